"""``bench fleet``: the worker fleet's throughput with the trajectory log durable against the same
fleet with it off (Failure Recovery, "Fault-Tolerant System Synthesis"; issue 20: "the live fleet's
throughput against the same fleet with durability off (ratio)"), measured on this machine in one run.

One :class:`~kernel_lib.live.fleet.Fleet` (the same worker processes, the same live services, the
same queue and coordinator) runs batches of ``trajectories`` deployment sagas, alternately with
``durability="on"`` (each trajectory's log an SQLite file acknowledged at the fdatasync tier: two
durable barriers per step) and ``durability="off"`` (the log in the worker's memory), in
interleaved rounds whose order rotates (on/off, off/on, ...). A batch is timed from its
submission to the end of its last trajectory; throughput is trajectories per second. The workers
are started and warmed (their imports done, one trajectory each way) before any batch is timed.

Figures: per mode the median throughput and the median seconds a trajectory runs (claimed -> ended);
the ratio on/off of the throughputs; the services' verdict over every trajectory run (all
COMPLETED, no effect applied twice). Targets: the ratio on/off >= :data:`TARGET_RATIO` (durability
should cost the fleet less than half its throughput: the tool calls, not the log, bound a
trajectory), and no trajectory lost or duplicated (== 0). Every figure is measured; the machine,
and the disk the logs were on, are printed beside them.

exit status: 0 when the benchmark ran, whether its targets passed or not (printed PASS or FAIL);
2 on bad input (one error: line).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from kernel_lib.bench.harness import filesystem_of, machine_info, median, ratio, round_order
from kernel_lib.errors import ConfigError

__all__ = ["run_fleet_bench", "format_fleet_bench", "TARGET_RATIO", "MODES"]

#: throughput with durability on / off must be at least this
TARGET_RATIO = 0.5
MODES = ("on", "off")


def run_fleet_bench(workers: int = 2, trajectories: int = 20, *, rounds: int = 3, coordinator: str = "sqlite",
                    workdir: str | os.PathLike | None = None,
                    progress: "Callable[[str], None] | None" = None) -> dict[str, Any]:
    """Run the benchmark (module docstring) and return its figures.

    Returns ``{"benchmark": "fleet", "workers", "trajectories", "rounds", "coordinator", "machine",
    "modes": {"on"|"off": {"throughput_per_s", "median_trajectory_s", "samples_throughput_per_s"}},
    "ratio_on_over_off", "verdict": {"trajectories", "completed", "forward_repeated",
    "compensators_repeated", "lost_or_duplicated"}, "targets": [{"name", "measured", "limit",
    "passed"}], "seconds"}``.

    Raises:
        ConfigError: ``workers`` not 1..16, ``trajectories`` not 1..1000, ``rounds`` below 1, a
            bad coordinator or ``workdir``.
        FleetError / FleetTimeoutError: the fleet failed (nothing is left running).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 16:
        raise ConfigError(f"workers must be an integer 1..16, got {workers!r}")
    if isinstance(trajectories, bool) or not isinstance(trajectories, int) or not 1 <= trajectories <= 1000:
        raise ConfigError(f"trajectories must be an integer 1..1000, got {trajectories!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"rounds must be an integer >= 1, got {rounds!r}")
    from kernel_lib.live.fleet import Fleet

    tick = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    tick(f"starting {workers} workers and the services")
    with Fleet(workers, coordinator=coordinator, workdir=workdir) as fleet:
        warm = fleet.submit([{"durability": m} for m in MODES for _ in range(workers)])
        fleet.wait(warm, timeout_s=120)
        samples: dict[str, list[float]] = {m: [] for m in MODES}
        per_traj: dict[str, list[float]] = {m: [] for m in MODES}
        all_ids: list[str] = []
        for r in range(rounds):
            for i in round_order(len(MODES), r):
                mode = MODES[i]
                tick(f"round {r + 1}/{rounds}: durability {mode}")
                t0 = time.perf_counter()
                ids = fleet.submit(trajectories, durability=mode)
                fleet.wait(ids, timeout_s=max(120.0, 10.0 * trajectories))
                wall = time.perf_counter() - t0
                samples[mode].append(trajectories / wall)
                per_traj[mode].extend(x["owners"][-1]["finished_at_s"] - x["owners"][0]["claimed_at_s"]
                                      for x in fleet.results(ids, judge=False))
                all_ids += ids
        tick("judging by the services' audits")
        res = fleet.results(all_ids)
        fs = filesystem_of(fleet.dir)
    modes = {m: {"throughput_per_s": median(samples[m]), "median_trajectory_s": median(per_traj[m]),
                 "samples_throughput_per_s": samples[m]} for m in MODES}
    r_on_off = ratio(modes["on"]["throughput_per_s"], modes["off"]["throughput_per_s"])
    completed = sum(1 for x in res if x["outcome"] == "COMPLETED")
    fwd = sum(x["services"]["forward_repeated"] for x in res)
    comp = sum(x["services"]["compensators_repeated"] for x in res)
    bad = (len(res) - completed) + fwd + comp
    targets = [
        {"name": "fleet throughput, durability on / off (same fleet, same run)", "measured": r_on_off,
         "limit": f">= {TARGET_RATIO:g}", "passed": bool(r_on_off >= TARGET_RATIO)},
        {"name": "trajectories lost, failed or with an effect applied twice (services' audits)", "measured": bad,
         "limit": "== 0", "passed": bad == 0},
    ]
    return {"benchmark": "fleet", "workers": workers, "trajectories": trajectories, "rounds": rounds,
            "coordinator": coordinator, "machine": {**machine_info(), "logs_filesystem": fs,
                                                    "tmp_dir": str(workdir or tempfile.gettempdir())},
            "modes": modes, "ratio_on_over_off": r_on_off,
            "verdict": {"trajectories": len(res), "completed": completed, "forward_repeated": fwd,
                        "compensators_repeated": comp, "lost_or_duplicated": bad},
            "targets": targets, "seconds": time.perf_counter() - t_start, "label": "measured"}


def format_fleet_bench(r: dict[str, Any]) -> str:
    """Human-readable table of :func:`run_fleet_bench`'s result."""
    fs = r["machine"]["logs_filesystem"]
    lines = [f"bench fleet: {r['workers']} workers, {r['trajectories']} deployment sagas per batch, {r['rounds']} "
             f"rounds, coordinator {r['coordinator']}, logs on {fs.get('fs_type')} {fs.get('device')}"
             f"{' (RAM disk: fdatasync measures no disk)' if fs.get('ram_disk') else ''}, "
             f"{r['machine']['cpu_count']} CPUs ({r['seconds']:.0f} s, measured)", "",
             f"{'durability':<12}{'trajectories/s':>16}{'s per trajectory':>18}"]
    for m, v in r["modes"].items():
        lines.append(f"{m:<12}{v['throughput_per_s']:>16.2f}{v['median_trajectory_s']:>18.3f}")
    v = r["verdict"]
    lines += ["", f"ratio on/off: {r['ratio_on_over_off']:.3f}",
              f"services' audits: {v['completed']}/{v['trajectories']} completed, {v['forward_repeated']} effects "
              f"applied twice, {v['compensators_repeated']} compensators applied twice", "", "targets:"]
    for t in r["targets"]:
        lines.append(f"  {t['name']}: {t['measured']:.3g} (target {t['limit']})  {'PASS' if t['passed'] else 'FAIL'}")
    return "\n".join(lines)
