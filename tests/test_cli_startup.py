"""CLI start-up: each ``python -m kernel_lib`` call imports only what its command uses.

Situation: every CLI call is a fresh interpreter, and the command list used to import every
command group's machinery (pydantic event models, sympy, the live substrate, the benchmarks), about
2 s before anything ran. Invariant: ``--help`` loads no kernel layer and no heavy library, and a
command loads the layers it needs but none that belong to other commands. Goal: a cheap start-up
that stays cheap as the Failure Recovery commands are added. Times are not asserted here (that is
``bench startup``'s job); what is imported is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_lib.bench.startup import format_startup_report, import_costs, run_startup_bench

ROOT = Path(__file__).resolve().parents[1]

#: third-party libraries that cost tens to hundreds of ms to import
HEAVY = ("pydantic", "sympy", "polars", "numpy", "scipy", "httpx", "tqdm", "cryptography", "rfc8785", "msgspec",
         "starlette", "uvicorn", "altair", "nbformat", "papermill", "anywidget", "ipywidgets")

_PROBE = """
import contextlib, io, json, sys
from kernel_lib.cli import main
code = None
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _loaded(*argv: str, cwd: Path) -> tuple[object, set[str]]:
    """(exit code, the modules loaded) after one CLI call in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["code"], set(out["modules"])


def _top(mods: set[str]) -> set[str]:
    """Third-party roots among HEAVY, and kernel_lib's subpackages (``kernel_lib.log``), that are loaded."""
    heavy = {m.split(".")[0] for m in mods if m.split(".")[0] in HEAVY}
    layers = {".".join(m.split(".")[:2]) for m in mods if m.startswith("kernel_lib.")}
    return heavy | layers


def test_the_command_list_loads_no_kernel_layer_and_no_heavy_library(tmp_path):
    code, mods = _loaded("--help", cwd=tmp_path)
    assert code == 0
    assert _top(mods) <= {"kernel_lib.cli", "kernel_lib.errors"}, sorted(_top(mods))


def test_a_command_is_listed_even_though_its_group_is_not_built(tmp_path):
    """Every command of every group appears in ``--help`` (the listing comes from each group's
    COMMANDS), and choosing one builds its full parser."""
    from kernel_lib.cli import COMMAND_GROUPS, build_parser
    full = build_parser()
    names = set(full._subparsers._group_actions[0].choices)   # the full parser's commands
    listed = subprocess.run([sys.executable, "-m", "kernel_lib", "--help"], capture_output=True, text=True,
                            cwd=tmp_path).stdout
    assert names and all(n in listed for n in names), sorted(n for n in names if n not in listed)
    import importlib
    declared = {c for g in COMMAND_GROUPS for c in importlib.import_module(f"kernel_lib.cli.{g}").COMMANDS}
    assert declared == names


@pytest.fixture(scope="module")
def example_log(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "example.jsonl"
    subprocess.run([sys.executable, "-m", "kernel_lib", "example", "--out", str(out)], check=True)
    return out


#: command -> layers and libraries it must not load (they belong to other commands)
NOT_USED = {
    "fold": ("sympy", "polars", "numpy", "httpx", "tqdm", "cryptography", "kernel_lib.live", "kernel_lib.quorum",
             "kernel_lib.bench", "kernel_lib.cadence", "kernel_lib.course", "kernel_lib.verify",
             "kernel_lib.importers", "kernel_lib.history", "kernel_lib.sim", "kernel_lib.gate"),
    "diverge": ("sympy", "polars", "httpx", "kernel_lib.live", "kernel_lib.quorum", "kernel_lib.bench",
                "kernel_lib.cadence", "kernel_lib.course", "kernel_lib.verify", "kernel_lib.importers"),
    "cadence": ("pydantic", "httpx", "cryptography", "kernel_lib.log", "kernel_lib.live", "kernel_lib.quorum",
                "kernel_lib.bench", "kernel_lib.course", "kernel_lib.history"),
    "import": ("sympy", "polars", "httpx", "kernel_lib.live", "kernel_lib.quorum", "kernel_lib.bench",
               "kernel_lib.cadence", "kernel_lib.course", "kernel_lib.verify"),
    "schema": ("sympy", "polars", "httpx", "cryptography", "kernel_lib.log", "kernel_lib.live", "kernel_lib.bench",
               "kernel_lib.sim", "kernel_lib.gate"),
    # D(Ω) is pure: no event models (pydantic) until a decision is logged, no store, no services
    "recovery": ("pydantic", "sympy", "polars", "numpy", "scipy", "httpx", "kernel_lib.core", "kernel_lib.log",
                 "kernel_lib.live", "kernel_lib.sim", "kernel_lib.importers", "kernel_lib.bench",
                 "kernel_lib.course"),
    "plan": ("sympy", "polars", "numpy", "httpx", "cryptography", "kernel_lib.log", "kernel_lib.live",
             "kernel_lib.quorum", "kernel_lib.bench", "kernel_lib.cadence", "kernel_lib.course", "kernel_lib.verify",
             "kernel_lib.importers", "kernel_lib.sim", "kernel_lib.gate"),
    # the herd simulator: the gateway's backoff and breaker on a virtual clock, no events, no store
    "herd": ("pydantic", "sympy", "polars", "numpy", "httpx", "cryptography", "kernel_lib.core", "kernel_lib.log",
             "kernel_lib.live", "kernel_lib.quorum", "kernel_lib.bench", "kernel_lib.course", "kernel_lib.gate"),
    # figure 5 on the twins: no live processes, no charts, no tables
    "figure5": ("sympy", "polars", "numpy", "httpx", "altair", "kernel_lib.live", "kernel_lib.quorum",
                "kernel_lib.bench", "kernel_lib.course", "kernel_lib.importers", "kernel_lib.verify"),
}


def _omega_file(folder: Path) -> Path:
    path = folder / "omega.json"
    path.write_text(json.dumps({
        "failed_step": {"step_id": "T6", "tool": "apply_routes", "tier": "II", "pivot_crossed": False},
        "error": "SyntaxError: invalid syntax", "budget": {"tokens_rem": 10000, "steps_rem": 5, "usd_rem": 1.0},
        "history": [{"step_id": "T1", "compensation_s": 40.6, "compensation_usd": 0.0, "forward_s": 46.0,
                     "forward_usd": 0.162}],
        "remedies": [{"name": "error_feedback", "tokens": 2570, "usd": 0.00987, "s": 4.1}]}))
    return path


@pytest.mark.parametrize("command", sorted(NOT_USED))
def test_a_command_loads_only_what_it_uses(command, example_log, tmp_path):
    argv = {"fold": ["fold", "--log", str(example_log)],
            "diverge": ["diverge", str(example_log), str(example_log)],
            "cadence": ["cadence", "young", "--pause-s", "30", "--mtbf-s", "3600"],
            "import": ["import", "--help"],
            "schema": ["schema"],
            "recovery": ["recovery", "decide", str(_omega_file(tmp_path)), "--json"],
            "plan": ["plan", "example", "ex0.1"],
            "herd": ["herd", "--agents", "50", "--json"],
            "figure5": ["figure5", "--json"]}[command]
    code, mods = _loaded(*argv, cwd=tmp_path)
    assert code == 0
    wrong = sorted(m for m in _top(mods) if m in NOT_USED[command])
    assert not wrong, f"{' '.join(argv)} loaded {wrong}"


def test_startup_bench_reports_ratios_and_its_target(monkeypatch):
    """The benchmark runs whole processes and reports the --help target; its figures are
    checked for shape, not speed (a loaded machine is slower alike)."""
    result = run_startup_bench(rounds=1, commands=[("fold", "--help")], progress=False)
    assert set(result["commands"]) == {"--help", "fold --help"}
    for s in result["commands"].values():
        assert s["median_ms"] > 0 and s["ratio_to_baseline"] > 0
    (t,) = result["targets"]
    assert t["limit"] == 0.3 and t["passed"] == (t["measured"] <= 0.3)
    assert "python -m kernel_lib --help" in format_startup_report(result)
    rows = import_costs()
    assert rows and rows == sorted(rows, key=lambda r: -r["cumulative_us"])
    assert any(r["module"] == "kernel_lib.cli" for r in rows)


def test_exercise_help_lists_every_exercise_without_importing_one(tmp_path):
    """Newcomer report (issue 15): ``exercise --help`` took over a second, importing every exercise
    module (and sympy, the checkpoint and resume layers) to print their titles. Invariant: the help
    lists every registered id with its title, read from the module sources; no exercise module and
    no heavy library is loaded."""
    from kernel_lib.course.exercises import EXERCISES, MODULES

    code, mods = _loaded("exercise", "--help", cwd=tmp_path)
    assert code == 0
    loaded = sorted(m for m in mods if m.removeprefix("kernel_lib.course.exercises.") in MODULES.values())
    assert not loaded, loaded
    assert not {m.split(".")[0] for m in mods} & {"sympy", "polars", "numpy", "scipy"}
    listed = " ".join(subprocess.run([sys.executable, "-m", "kernel_lib", "exercise", "--help"], capture_output=True,
                                     text=True, cwd=tmp_path).stdout.split())
    for k, mod in EXERCISES.items():
        assert f"{k} ({mod.TITLE[0].lower() + mod.TITLE[1:]}" in listed, k
