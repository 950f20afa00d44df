"""A bad parameter is refused under the name the user gave it.

Situation: an instructor runs notebook 11.1 headless (``papermill -p crash_after …``) or the CLI
(``worksheet --crash-after …``) with a value that is no crash point, or of the wrong type.
Invariant: the error names the parameter as the user spelled it (``crash_after``,
``--crash-after``), shows the value (not just its type), and lists the valid points; nothing starts.
Goal: the user can fix the right thing without reading the library's internals (``pause_at``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from kernel_lib.errors import ConfigError, UnknownCrashPointError
from kernel_lib.live.session import check_worksheet_parameters

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("value, shown", [("Lunch", "'Lunch'"), (3.5, "3.5 (a float)"), (None, "None (a NoneType)"),
                                          ([1], "[1] (a list)"), (99, "'99'")])
def test_a_bad_crash_after_is_named_with_its_value(value, shown):
    with pytest.raises(UnknownCrashPointError) as err:
        check_worksheet_parameters(crash_after=value)
    msg = str(err.value)
    assert msg.startswith("crash_after: unknown crash point ") and shown in msg
    assert "pause_at" not in msg and "1 TaskStarted#1" in msg


@pytest.mark.parametrize("params, name", [({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"), ({"store": "ram"}, "store"),
                                          ({"test_delay_s": "1"}, "test_delay_s"),
                                          ({"test_delay_s": 601}, "test_delay_s")])
def test_every_worksheet_parameter_is_checked_under_its_own_name(params, name):
    with pytest.raises(ConfigError, match=f"^{name} "):
        check_worksheet_parameters(**params)


def test_good_parameters_resolve_to_the_point_they_name():
    got = check_worksheet_parameters(crash_after="ToolIntent")
    assert got["crash_after"] == "ToolIntent" and "ToolIntent" in got["point"]


def test_the_cli_names_its_option(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--crash-after", "Lunch"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --crash-after: unknown crash point 'Lunch'"), proc.stderr


def test_notebook_11_1_checks_its_parameters_before_starting_anything():
    """The cell that builds the session first checks the papermill parameters by name."""
    nb = nbformat.read(ROOT / "notebooks" / "11_1_worker_failure.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    first_start = next(i for i, s in enumerate(code) if "WorksheetSession(" in s)
    assert "check_worksheet_parameters(" in code[first_start]
    src = code[first_start]
    assert src.index("check_worksheet_parameters(seed=") < src.index("WorksheetSession(store_kind")


@pytest.mark.parametrize("params, name", [
    ({"forward_step_ms": "120,350"}, "forward_step_ms"), ({"forward_step_ms": [120, -1, 5]}, "forward_step_ms"),
    ({"forward_step_ms": [120, 350]}, "forward_step_ms"), ({"compensator_ms": [45, 220, 15]}, "compensator_ms"),
    ({"compensator_ms": [45, "x", 15, 10]}, "compensator_ms"), ({"fsync_ms": -1.2}, "fsync_ms"),
    ({"fsync_ms": "1.2"}, "fsync_ms"), ({"fsyncs_per_forward_step": 1.5}, "fsyncs_per_forward_step"),
    ({"fsyncs_per_compensator": True}, "fsyncs_per_compensator"), ({"input_tokens": -5}, "input_tokens"),
    ({"output_tokens": 12.5}, "output_tokens"), ({"input_usd_per_mtok": float("nan")}, "input_usd_per_mtok"),
    ({"output_usd_per_mtok": None}, "output_usd_per_mtok")])
def test_napkin_math_0_1_names_the_parameter_the_user_gave(params, name):
    """Failure Recovery nm0.1: each papermill/--param name is refused under its own name (a typed ConfigError)."""
    from kernel_lib.course.exercises import get
    with pytest.raises(ConfigError, match=f"^{name} "):
        get("nm0.1").solve(params)


def test_napkin_math_0_1_cli_names_the_parameter(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kernel_lib", "exercise", "solve", "nm0.1", "--param", "fsync_ms=abc"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: fsync_ms must be a number"), proc.stderr
