"""The suite on both cores (issue 15): ``make test`` runs independent tests in parallel workers.

Fault model: two pytest-xdist workers run tests of the suite at the same time on one machine; a
module-scoped fixture (an etcd cluster, a recorded example) is expensive and must not be built
once per worker; a test that sweeps "the system temporary folder" must not see the other worker's
folders. Invariant: the command ``make test`` runs starts more than one worker, prints the 15
slowest tests, gives every worker its own ``TMPDIR`` inside that worker's pytest base folder, and
runs all tests that share one module-scoped fixture on a single worker, where the fixture is built
once. Goal: the whole suite fits the time a practitioner expects on a 2-core machine.

The check runs the very command line ``make -n test`` prints (so a change of the Makefile is seen)
on a small suite written into ``tmp_path`` that loads this project's conftest; what each test saw
is written by the test itself into files that the outer test then reads.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

INNER_CONFTEST = """
pytest_plugins = ["tests.conftest"]
"""

# each test writes what it saw: its worker, the system temporary folder, its base folder
INNER_COMMON = """
import json, os, subprocess, sys, tempfile
from pathlib import Path

OUT = Path(os.environ["SUITE_PARALLEL_OUT"])

def seen(name, tmp_path_factory, **extra):
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    rec = {"test": name, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
           "tmpdir": tempfile.gettempdir(), "child_tmpdir": child, "env_tmpdir": os.environ.get("TMPDIR"),
           "basetemp": str(tmp_path_factory.getbasetemp()), **extra}
    (OUT / f"{name}.json").write_text(json.dumps(rec))
"""

INNER_PLAIN = """
import time
import pytest
from inner_common import seen

@pytest.mark.parametrize("i", range(12))
def test_plain(i, tmp_path_factory):
    time.sleep(0.3)          # long enough that one worker cannot drain the queue alone
    seen(f"plain{i}", tmp_path_factory)
"""

INNER_SHARED = """
import os
import pytest
from inner_common import OUT, seen

@pytest.fixture(scope="module")
def costly():
    # counted by the fixture itself: one line per set-up, naming the worker that built it
    with (OUT / "costly-setups.txt").open("a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
    return "built"

@pytest.mark.parametrize("i", range(6))
def test_shares_the_costly_fixture(i, costly, tmp_path_factory):
    seen(f"shared{i}", tmp_path_factory, costly=costly)

def test_same_module_without_it(tmp_path_factory):
    seen("loose", tmp_path_factory)
"""


def _make_test_command() -> list[str]:
    """The pytest command line of ``make test`` (as ``make -n`` prints it), without PYTEST_ARGS."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    marker = "@PYTEST_ARGS@"
    out = subprocess.run(["make", "-n", "--no-print-directory", "test", f"PYTEST_ARGS={marker}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stdout.splitlines() if " -m pytest" in ln and marker in ln]
    assert len(lines) == 1, f"`make -n test` printed no single pytest command:\n{out.stdout}"
    argv = shlex.split(lines[0])
    assert argv[1:3] == ["-m", "pytest"], argv
    return [sys.executable, *[a for a in argv[1:] if a != marker]]


def _workers_of(argv: list[str]) -> str | None:
    for i, a in enumerate(argv):
        if a in ("-n", "--numprocesses") and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--numprocesses="):
            return a.split("=", 1)[1]
        if a.startswith("-n") and len(a) > 2:
            return a[2:]
    return None


def test_make_test_runs_on_every_core_with_own_temp_folders_and_prints_the_slowest(tmp_path):
    argv = _make_test_command()
    assert _workers_of(argv) not in (None, "0"), f"`make test` runs in one process: {argv}"

    suite, out, base = tmp_path / "suite", tmp_path / "out", tmp_path / "basetemp"
    suite.mkdir()
    out.mkdir()
    (suite / "conftest.py").write_text(INNER_CONFTEST)
    (suite / "inner_common.py").write_text(textwrap.dedent(INNER_COMMON))
    (suite / "test_plain.py").write_text(textwrap.dedent(INNER_PLAIN))
    (suite / "test_shared.py").write_text(textwrap.dedent(INNER_SHARED))
    # two workers even on a one-core runner; of the installed plugins only xdist is loaded (the
    # others' start-up, in the controller and in each worker, is most of this run's time)
    env = dict(os.environ, SUITE_PARALLEL_OUT=str(out), PYTHONPATH=os.pathsep.join([str(ROOT), str(suite)]),
               PYTEST_XDIST_AUTO_NUM_WORKERS="2", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [*argv[:3], "-p", "xdist.plugin", *argv[3:], "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(suite),
           f"--basetemp={base}",
           "-p", "no:cacheprovider", str(suite)]
    proc = subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"

    # the project's options ask for the 15 slowest tests at the end of every run
    assert "slowest 15 durations" in proc.stdout, proc.stdout[-3000:]

    seen = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert len(seen) == 12 + 6 + 1, sorted(seen)
    workers = {r["worker"] for r in seen.values()}
    assert len(workers) >= 2 and "main" not in workers, workers

    # every worker has its own system temporary folder, inside its own base folder, passed on to
    # the processes it starts; no two workers share one
    by_worker = {}
    for r in seen.values():
        own = Path(r["tmpdir"]).resolve()
        assert Path(r["basetemp"]).resolve() in own.parents, r
        assert base.resolve() in own.parents, r
        assert Path(r["child_tmpdir"]).resolve() == own and r["env_tmpdir"] == r["tmpdir"], r
        by_worker.setdefault(r["worker"], set()).add(own)
    assert all(len(dirs) == 1 for dirs in by_worker.values()), by_worker
    assert len(set().union(*by_worker.values())) == len(by_worker), by_worker

    # the tests sharing a module-scoped fixture ran on one worker, which built it once
    shared_workers = {seen[f"shared{i}"]["worker"] for i in range(6)}
    assert len(shared_workers) == 1, shared_workers
    setups = (out / "costly-setups.txt").read_text().split()
    assert setups == sorted(shared_workers), setups
