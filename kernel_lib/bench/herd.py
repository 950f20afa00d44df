"""``bench herd``: the herd simulator's throughput (Failure Recovery, "Tool Circuit Breakers"; issue 19:
"10,000 agents simulated in seconds"), measured on this machine in one run and given as ratios.

Contenders, in interleaved rounds (the median of each):

* ``deterministic``, ``full_jitter``, ``full_jitter_breaker``: :func:`kernel_lib.sim.herd.run_herd`
  of the default scenario with ``--agents`` agents under each policy (:data:`~kernel_lib.sim.herd.POLICIES`);
* ``heapq_floor`` (the baseline): a bare event loop with the same number of events as the
  ``full_jitter`` run: ``heapq`` pops and pushes of the simulator's event tuples, one
  ``random.uniform`` draw per push, nothing else. No event-driven simulator in Python does less
  per event.

Figures: wall seconds per policy, agent steps (attempts) and events per second, and each policy's
cost per event as a ratio to the floor's. Targets: every policy's cost per event <= 10x the floor;
the three policies together for the agents asked (10,000 by default) in <= 10 s of wall time (the
issue's "in seconds"; absolute, so it is printed beside the machine it was measured on).

exit status: 0 when the benchmark ran, whether its targets passed or not (printed PASS or FAIL);
2 on bad input (one error: line).
"""

from __future__ import annotations

import heapq
import os
import random
import time
from collections.abc import Callable
from typing import Any

from kernel_lib.bench.harness import machine_info, median, ratio, time_rounds
from kernel_lib.errors import ConfigError

__all__ = ["run_herd_bench", "format_herd_bench", "TARGET_PER_EVENT_OVER_FLOOR", "TARGET_WALL_S",
           "DEFAULT_AGENTS"]

DEFAULT_AGENTS = 10_000
#: a policy's cost per event <= this multiple of the bare heapq loop's
TARGET_PER_EVENT_OVER_FLOOR = 10.0
#: the three policies for the agents asked, together, in at most this many seconds of wall time
TARGET_WALL_S = 10.0


def heapq_floor(events: int, agents: int, seed: int = 0) -> int:
    """A bare event loop of ``events`` pops over ``agents`` initial events (the simulator's tuple
    shape, one uniform draw per push); returns the pops made."""
    rng = random.Random(seed)
    heap = [(rng.uniform(0.0, 2.0), 1, i, i, "") for i in range(agents)]
    heapq.heapify(heap)
    seq, pops = agents, 0
    while heap and pops < events:
        t, kind, _, a, outcome = heapq.heappop(heap)
        pops += 1
        if pops + len(heap) < events:
            heapq.heappush(heap, (t + rng.uniform(0.0, 1.0), kind, seq, a, outcome))
            seq += 1
    return pops


def run_herd_bench(agents: int = DEFAULT_AGENTS, *, rounds: int = 3, seed: int = 0,
                   progress: "Callable[[str], None] | None" = None) -> dict[str, Any]:
    """Run the benchmark (module docstring) and return its figures.

    Returns ``{"benchmark": "herd", "agents", "rounds", "seed", "machine", "policies": {name:
    {"median_wall_s", "agent_steps", "events", "agent_steps_per_s", "events_per_s",
    "per_event_over_floor"}}, "floor": {"median_wall_s", "events", "events_per_s"},
    "total_wall_s", "samples_s", "targets": [{"name", "measured", "limit", "passed"}], "seconds"}``.

    Raises:
        ConfigError: ``agents`` below 1 or ``rounds`` below 1.
    """
    if type(agents) is not int or agents < 1:
        raise ConfigError(f"agents must be an integer >= 1, got {agents!r}")
    if type(rounds) is not int or rounds < 1:
        raise ConfigError(f"rounds must be an integer >= 1, got {rounds!r}")
    from kernel_lib.sim.herd import POLICIES, HerdConfig, run_herd

    tick = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    cfg = HerdConfig(agents=agents)
    tick(f"one run per policy, {agents} agents")
    sizes = {p.name: run_herd(cfg, p, seed) for p in POLICIES}
    floor_events = sizes["full_jitter"].events
    ops: dict[str, Callable[[], object]] = {p.name: (lambda p=p: run_herd(cfg, p, seed)) for p in POLICIES}
    ops["heapq_floor"] = lambda: heapq_floor(floor_events, agents, seed)
    tick(f"timing ({rounds} rounds)")
    samples = time_rounds(ops, rounds)
    med = {k: median(v) for k, v in samples.items()}
    floor_per_event = med["heapq_floor"] / floor_events if floor_events else float("nan")
    policies = {}
    for name, r in sizes.items():
        per_event = med[name] / r.events if r.events else float("nan")
        policies[name] = {"median_wall_s": med[name], "agent_steps": r.agent_steps, "events": r.events,
                          "agent_steps_per_s": r.agent_steps / med[name] if med[name] else None,
                          "events_per_s": r.events / med[name] if med[name] else None,
                          "per_event_over_floor": ratio(per_event, floor_per_event)}
    total = sum(med[n] for n in sizes)
    worst = max(p["per_event_over_floor"] for p in policies.values())
    targets = [
        {"name": "cost per event of the slowest policy vs a bare heapq event loop", "measured": worst,
         "limit": f"<= {TARGET_PER_EVENT_OVER_FLOOR:g}", "passed": bool(worst <= TARGET_PER_EVENT_OVER_FLOOR)},
        {"name": f"{agents:,} agents, three policies, wall time (s)", "measured": total,
         "limit": f"<= {TARGET_WALL_S:g}", "passed": bool(total <= TARGET_WALL_S)},
    ]
    return {"benchmark": "herd", "agents": agents, "rounds": rounds, "seed": seed,
            "machine": {**machine_info(), "cpus": os.cpu_count()}, "policies": policies,
            "floor": {"median_wall_s": med["heapq_floor"], "events": floor_events,
                      "events_per_s": floor_events / med["heapq_floor"] if med["heapq_floor"] else None},
            "total_wall_s": total, "samples_s": samples, "targets": targets,
            "seconds": time.perf_counter() - t_start}


def format_herd_bench(r: dict[str, Any]) -> str:
    """Human-readable table of :func:`run_herd_bench`'s result."""
    lines = [f"bench herd: {r['agents']:,} agents, seed {r['seed']}, {r['rounds']} rounds, "
             f"{r['machine'].get('platform', '?')}, {r['machine']['cpus']} CPUs ({r['seconds']:.0f} s)", "",
             f"{'policy':<21}{'wall s':>9}{'agent steps':>13}{'steps/s':>11}{'events/s':>11}{'x floor/event':>15}"]
    for name, p in r["policies"].items():
        lines.append(f"{name:<21}{p['median_wall_s']:>9.3f}{p['agent_steps']:>13,}{p['agent_steps_per_s']:>11,.0f}"
                     f"{p['events_per_s']:>11,.0f}{p['per_event_over_floor']:>15.2f}")
    f = r["floor"]
    lines += [f"{'heapq floor':<21}{f['median_wall_s']:>9.3f}{'':>13}{'':>11}{f['events_per_s']:>11,.0f}"
              f"{1.0:>15.2f}", "", "targets:"]
    for t in r["targets"]:
        lines.append(f"  {t['name']}: {t['measured']:.2f} (target {t['limit']})  {'PASS' if t['passed'] else 'FAIL'}")
    return "\n".join(lines)
