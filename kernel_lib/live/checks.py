"""Where an executor job's seconds go: pytest's own timing and the start-up of its process (§11.9).

An executor job is charged from acceptance to finish (:mod:`kernel_lib.live.executor`). Of that
time, the executor's configured delay and the seconds pytest reports on its last line are two
parts; the rest is mostly starting a Python interpreter and importing pytest.
:func:`time_check_startup` measures that rest on this machine: it runs the executor's own check
command on a folder holding one empty test and times it on the wall clock, beside the duration
pytest itself reports.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kernel_lib.errors import ConfigError, LiveProcessError
from kernel_lib.live.executor import CHECKS

__all__ = ["CheckStartup", "check_environment", "pytest_reported_s", "time_check_startup"]

_REPORTED = re.compile(r" in ([0-9]+(?:\.[0-9]+)?)s\b")
#: Variables that would make pytest colour its output or load plugins from the caller's session.
_DROPPED_PREFIXES = ("PYTEST", "COV_")
_COLOR_VARS = ("FORCE_COLOR", "PY_COLORS", "CLICOLOR_FORCE")


def pytest_reported_s(summary: str) -> float:
    """The duration pytest prints on its summary line (``"5 passed in 0.97s"`` → 0.97): pytest's
    own clock, from collection to the end of the run, in seconds.

    Raises: ConfigError: the line holds no ``in <seconds>s``."""
    m = _REPORTED.search(summary or "")
    if m is None:
        raise ConfigError(f"no pytest duration ('in <seconds>s') in {summary!r}")
    return float(m.group(1))


def check_environment() -> dict[str, str]:
    """The environment the executor runs its check in: this process's, without pytest/coverage
    settings or forced colours, with byte-code writing off."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES) and k not in _COLOR_VARS}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"   # as the executor: no third-party plugin auto-loaded
    return env


@dataclass(frozen=True)
class CheckStartup:
    """One timed run of a check command on a one-test folder (seconds, measured on this machine).

    Fields: ``wall_s`` (subprocess start to exit, wall clock), ``reported_s`` (what pytest printed),
    ``startup_s`` (``wall_s - reported_s``: interpreter start, imports, collection set-up),
    ``summary`` (pytest's last line), ``check`` (the command's name in ``CHECKS``)."""

    wall_s: float
    reported_s: float
    startup_s: float
    summary: str
    check: str

    def to_dict(self) -> dict:
        return asdict(self)


def time_check_startup(directory: str | os.PathLike, *, check: str = "pytest -q",
                       timeout_s: float = 120.0) -> CheckStartup:
    """Run the executor's ``check`` once on a folder holding one empty test, timed.

    Args:
        directory: an existing, empty folder to write ``test_probe.py`` into (the caller owns and
            removes it; e.g. a :class:`kernel_lib.course.scratch.ScratchDir`).
        check: a key of :data:`kernel_lib.live.executor.CHECKS`.
        timeout_s: the longest run allowed (seconds, > 0, at most 600).

    Raises:
        ConfigError: ``directory`` is not a folder, an unknown ``check``, a bad ``timeout_s``.
        LiveProcessError: the command did not finish in time, or printed no pytest summary.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise ConfigError(f"directory {str(folder)!r} is not an existing folder")
    if check not in CHECKS:
        raise ConfigError(f"unknown check {check!r}; the executor runs {sorted(CHECKS)}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= 600:
        raise ConfigError(f"timeout_s must be a number of seconds in (0, 600], got {timeout_s!r}")
    (folder / "test_probe.py").write_text("def test_nothing():\n    pass\n")
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *CHECKS[check]], cwd=folder, env=check_environment(),
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise LiveProcessError(f"{check!r} on a one-test folder did not finish within {timeout_s:g} s") from None
    wall_s = time.perf_counter() - t0
    lines = done.stdout.strip().splitlines()
    try:
        reported_s = pytest_reported_s(lines[-1] if lines else "")
    except ConfigError:
        raise LiveProcessError(f"{check!r} printed no summary line (exit {done.returncode}): "
                               f"{(done.stdout + done.stderr)[-400:]}") from None
    return CheckStartup(wall_s=wall_s, reported_s=reported_s, startup_s=wall_s - reported_s, summary=lines[-1],
                        check=check)
