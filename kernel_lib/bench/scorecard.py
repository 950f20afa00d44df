"""``bench scorecard``: how fast the simulated scorecard runs (Failure Recovery, table 14; issue 20:
"scorecard runtime, trajectories per second per configuration on the simulated substrate"),
measured on this machine in one run.

Contenders, in interleaved rounds (the median of each):

* ``unmanaged``, ``wal_only``, ``saga_only``, ``synthesized``:
  :func:`kernel_lib.sim.scorecard.run_configuration` of ``--trajectories`` seeded six-turn
  trajectories on a fresh fleet of twins, with the crash-consistency checks the scorecard makes
  (what ``python -m kernel_lib scorecard`` runs per configuration);
* ``fault_draws`` (the floor): a bare loop drawing the same faults (the
  :class:`~kernel_lib.recovery.synthesis.faults.FaultPlan` of every proposal the synthesized
  configuration made in its run) and nothing else.

Figures: trajectories per second per configuration, each configuration's time per trajectory as a
ratio to ``unmanaged`` (the same log, gate and services, none of the recovery machinery: the
baseline measured in the same run), and the draw floor. Targets: the synthesized runtime costs at
most 6x the unmanaged one per trajectory on the twins; 1,000 trajectories x 4 configurations (the
scorecard's default) extrapolate to at most 60 s of wall time (absolute, so it is printed with the
machine it was measured on).

exit status: 0 when the benchmark ran, whether its targets passed or not (printed PASS or FAIL);
2 on bad input (one error: line).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from kernel_lib.bench.harness import machine_info, median, ratio, time_rounds
from kernel_lib.errors import ConfigError

__all__ = ["run_scorecard_bench", "format_scorecard_bench", "TARGET_SYNTHESIZED_OVER_UNMANAGED",
           "TARGET_SCORECARD_WALL_S", "DEFAULT_TRAJECTORIES"]

DEFAULT_TRAJECTORIES = 200
#: the synthesized configuration's time per trajectory <= this multiple of the unmanaged one's
TARGET_SYNTHESIZED_OVER_UNMANAGED = 6.0
#: 1,000 trajectories under each of the four configurations, extrapolated, in at most this many seconds
TARGET_SCORECARD_WALL_S = 60.0


def _draw_floor(counts: list[int], seed: int) -> int:
    """Draw ``counts[t]`` proposals' faults for each trajectory t, nothing else; the draws made."""
    from kernel_lib.recovery.synthesis.faults import FaultPlan

    plan = FaultPlan(seed)
    n = 0
    for t, c in enumerate(counts):
        for p in range(c):
            plan.draw(t, p)
            n += 1
    return n


def run_scorecard_bench(trajectories: int = DEFAULT_TRAJECTORIES, *, rounds: int = 3, seed: int = 0,
                        progress: "Callable[[str], None] | None" = None) -> dict[str, Any]:
    """Run the benchmark (module docstring) and return its figures.

    Returns ``{"benchmark": "scorecard", "trajectories", "rounds", "seed", "machine",
    "configurations": {name: {"median_wall_s", "trajectories_per_s", "per_trajectory_over_unmanaged",
    "completion_rate"}}, "floor": {"median_wall_s", "draws", "draws_per_s"},
    "scorecard_1000_wall_s", "samples_s", "targets": [{"name", "measured", "limit", "passed"}],
    "seconds"}``. Raises ConfigError for ``trajectories`` or ``rounds`` below 1."""
    if type(trajectories) is not int or trajectories < 1:
        raise ConfigError(f"trajectories must be an integer >= 1, got {trajectories!r}")
    if type(rounds) is not int or rounds < 1:
        raise ConfigError(f"rounds must be an integer >= 1, got {rounds!r}")
    from kernel_lib.recovery.synthesis.config import CONFIG_NAMES
    from kernel_lib.sim.scorecard import run_configuration

    tick = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    tick(f"one run per configuration, {trajectories} trajectories")
    first = {n: run_configuration(n, trajectories=trajectories, seed=seed)[0] for n in CONFIG_NAMES}
    counts = [o.proposals for o in first["synthesized"]]
    ops: dict[str, Callable[[], object]] = {
        n: (lambda n=n: run_configuration(n, trajectories=trajectories, seed=seed)) for n in CONFIG_NAMES}
    ops["fault_draws"] = lambda: _draw_floor(counts, seed)
    tick(f"timing ({rounds} rounds)")
    samples = time_rounds(ops, rounds)
    med = {k: median(v) for k, v in samples.items()}
    base = med["unmanaged"] / trajectories
    configs = {}
    for n in CONFIG_NAMES:
        per = med[n] / trajectories
        done = sum(1 for o in first[n] if o.completed)
        configs[n] = {"median_wall_s": med[n], "trajectories_per_s": trajectories / med[n] if med[n] else None,
                      "per_trajectory_ms": per * 1e3, "per_trajectory_over_unmanaged": ratio(per, base),
                      "completion_rate": done / trajectories}
    draws = sum(counts)
    full = sum(1000 * med[n] / trajectories for n in CONFIG_NAMES)
    over = configs["synthesized"]["per_trajectory_over_unmanaged"]
    targets = [
        {"name": "synthesized vs unmanaged, time per trajectory (x)", "measured": over,
         "limit": f"<= {TARGET_SYNTHESIZED_OVER_UNMANAGED:g}",
         "passed": bool(over <= TARGET_SYNTHESIZED_OVER_UNMANAGED)},
        {"name": "1,000 trajectories x 4 configurations, extrapolated wall time (s)", "measured": full,
         "limit": f"<= {TARGET_SCORECARD_WALL_S:g}", "passed": bool(full <= TARGET_SCORECARD_WALL_S)},
    ]
    return {"benchmark": "scorecard", "trajectories": trajectories, "rounds": rounds, "seed": seed,
            "machine": {**machine_info(), "cpus": os.cpu_count()}, "configurations": configs,
            "floor": {"median_wall_s": med["fault_draws"], "draws": draws,
                      "draws_per_s": draws / med["fault_draws"] if med["fault_draws"] else None},
            "scorecard_1000_wall_s": full, "samples_s": samples, "targets": targets,
            "seconds": time.perf_counter() - t_start}


def format_scorecard_bench(r: dict[str, Any]) -> str:
    """Human-readable table of :func:`run_scorecard_bench`'s result."""
    lines = [f"bench scorecard: {r['trajectories']} trajectories per configuration, seed {r['seed']}, "
             f"{r['rounds']} rounds, {r['machine'].get('platform', '?')}, {r['machine']['cpus']} CPUs "
             f"({r['seconds']:.0f} s), measured", "",
             f"{'configuration':<14}{'wall s':>9}{'traj/s':>9}{'ms/traj':>9}{'x unmanaged':>13}{'completed':>11}"]
    for name, c in r["configurations"].items():
        lines.append(f"{name:<14}{c['median_wall_s']:>9.3f}{c['trajectories_per_s']:>9.1f}"
                     f"{c['per_trajectory_ms']:>9.2f}{c['per_trajectory_over_unmanaged']:>13.2f}"
                     f"{c['completion_rate']:>11.3f}")
    f = r["floor"]
    lines += [f"{'fault draws':<14}{f['median_wall_s']:>9.3f}  ({f['draws']:,} draws, {f['draws_per_s']:,.0f}/s: "
              "the fault plan alone)", "",
              f"1,000 trajectories x 4 configurations, extrapolated: {r['scorecard_1000_wall_s']:.1f} s", "",
              "targets:"]
    for t in r["targets"]:
        lines.append(f"  {t['name']}: {t['measured']:.2f} (target {t['limit']})  {'PASS' if t['passed'] else 'FAIL'}")
    return "\n".join(lines)
