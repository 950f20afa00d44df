"""``bench startup``: what one command-line call costs before it does any work.

Every ``python -m kernel_lib …`` call is a new interpreter, so its start-up is paid by every
instructor script, CI step and notebook cell that shells out. The CLI keeps it small by importing
what a command needs only when that command runs (:mod:`kernel_lib.cli`). This benchmark measures,
in the same run and in interleaved rounds, as whole processes:

* ``python -c pass`` — the interpreter's own start-up, the baseline nothing can beat;
* ``python -m kernel_lib --help`` — the command list;
* one light command per group (``fold --help``, ``cadence young --help``, ...) — what choosing a
  command adds.

It prints medians in ms, each as a ratio against the interpreter baseline, the heaviest imports of
``--help`` (``python -X importtime``, cumulative µs), and one target: ``--help`` median ≤ 0.3 s
(issue 15). Numbers are this machine's, now; on a loaded machine every process is slower alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from kernel_lib.bench.harness import machine_info, progress_bar, ratio, rounds_ticks, summarize, time_rounds

__all__ = ["DEFAULT_COMMANDS", "HELP_LIMIT_S", "import_costs", "run_startup_bench", "format_startup_report"]

#: The ``--help`` start-up target in seconds (issue 15: "``python -m kernel_lib --help`` ≤ 0.3 s").
HELP_LIMIT_S = 0.3

#: Commands timed besides the baseline and ``--help``: one per command group, each only parsing.
DEFAULT_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("fold", "--help"), ("cadence", "young", "--help"), ("diverge", "--help"), ("worksheet", "--help"),
    ("exercise", "--help"), ("bench", "--help"),
)


def _argv(args: Sequence[str]) -> list[str]:
    return [sys.executable, *args]


def _run(argv: list[str]) -> None:
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def import_costs(args: Sequence[str] = ("-m", "kernel_lib", "--help"), top: int = 8) -> list[dict[str, Any]]:
    """The ``top`` heaviest imports of one ``python ARGS`` call by cumulative time, from
    ``python -X importtime``: ``[{"module": str, "cumulative_us": int, "self_us": int}]``, heaviest first."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *args], capture_output=True, text=True)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = [p.strip() for p in line[len("import time:"):].split("|")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue   # the header line
        rows.append({"module": parts[2].strip(), "cumulative_us": int(parts[1]), "self_us": int(parts[0])})
    return sorted(rows, key=lambda r: -r["cumulative_us"])[:top]


def run_startup_bench(*, rounds: int = 7, commands: Sequence[Sequence[str]] = DEFAULT_COMMANDS,
                      progress: bool | None = None) -> dict[str, Any]:
    """Time the interpreter baseline, ``--help`` and ``commands`` as whole processes.

    Returns ``{"machine", "rounds", "baseline": summary_ms, "commands": {label: summary_ms +
    ratio_to_baseline}, "help_imports": [...], "targets": [{name, measured, limit, passed}]}``;
    summaries are :func:`~kernel_lib.bench.harness.summarize` in ms. Raises ConfigError for
    ``rounds`` < 1 (from the harness) and CalledProcessError when a timed command fails."""
    ops = {"python -c pass": lambda: _run(_argv(["-c", "pass"])),
           "--help": lambda: _run(_argv(["-m", "kernel_lib", "--help"]))}
    for cmd in commands:
        ops[" ".join(cmd)] = (lambda c=tuple(cmd): _run(_argv(["-m", "kernel_lib", *c])))
    bar = progress_bar(rounds_ticks(rounds), enabled=progress)
    try:
        samples = time_rounds(ops, rounds, warmup=1, tick=lambda: bar.update(1))
    finally:
        bar.close()
    base = summarize(samples.pop("python -c pass"), "ms")
    out: dict[str, Any] = {"machine": machine_info(), "rounds": rounds, "baseline": base, "commands": {}}
    for label, s in samples.items():
        summ = summarize(s, "ms")
        summ["ratio_to_baseline"] = ratio(summ["median_ms"], base["median_ms"])
        out["commands"][label] = summ
    help_s = out["commands"]["--help"]["median_ms"] / 1e3
    out["help_imports"] = import_costs()
    out["targets"] = [{"name": "python -m kernel_lib --help median (s)", "measured": round(help_s, 4),
                       "limit": HELP_LIMIT_S, "passed": help_s <= HELP_LIMIT_S}]
    return out


def format_startup_report(result: dict[str, Any]) -> str:
    """The report of :func:`run_startup_bench` as text lines."""
    base = result["baseline"]["median_ms"]
    lines = [f"start-up of one CLI call, whole processes, {result['rounds']} interleaved rounds (this machine, now)",
             f"  {'python -c pass (baseline)':<44} {base:8.1f} ms    1.00x"]
    for label, s in result["commands"].items():
        lines.append(f"  {'python -m kernel_lib ' + label:<44} {s['median_ms']:8.1f} ms {s['ratio_to_baseline']:7.2f}x")
    lines.append("heaviest imports of --help (python -X importtime, cumulative):")
    for r in result["help_imports"]:
        lines.append(f"  {r['module']:<44} {r['cumulative_us'] / 1e3:8.1f} ms")
    for t in result["targets"]:
        lines.append(f"target {t['name']}: {t['measured']:.3f} <= {t['limit']} {'PASS' if t['passed'] else 'FAIL'}")
    return "\n".join(lines)
