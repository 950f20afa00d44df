"""Table 14's scorecard measured: N seeded trajectories per configuration on the simulated twins
(Failure Recovery, "Fault injection benchmarks", table 14).

:func:`run_scorecard` runs the systems-administration trajectory (:mod:`kernel_lib.sim.sysadmin`)
``trajectories`` times under each configuration of
:data:`~kernel_lib.recovery.synthesis.config.CONFIGS`, with the same seeded
:class:`~kernel_lib.recovery.synthesis.faults.FaultPlan` for every configuration (trajectory i
meets the same draws everywhere), on one fleet of twins per configuration, and reports per
configuration:

* ``completion_rate`` with its Wilson 95 % interval (``completion_ci95``), beside the closed form
  q^T of :mod:`kernel_lib.recovery.synthesis.completion` (``completion_closed_form``);
* ``duplicated_effects`` and ``leaked_resources``, counted from the services' audit and
  resources (:func:`~kernel_lib.sim.sysadmin.account_effects`), never from our log;
* ``rpo_turns`` (the most committed turns a kill lost; mean in ``rpo_turns_mean``; ``rpo_kind``
  ``total_loss`` where a kill loses everything), ``rto_s`` (kill → the recovered process's first
  record, over recovered kills; None with ``rto_note`` where nothing recovers), ``mttr_s`` (fault
  detected → the affected turn committed, over faults the trajectory got past), ``mtbf_s``
  (operational time per failed trajectory);
* ``invariant_violations`` (crash-consistency checks failed, at every trajectory's end and every
  restart), ``faults_injected`` by kind, ``unsafe_pivots`` (deploys that went out while the
  gate's checks would have failed), outcome ``states``.

**Time, labelled.** ``rto_s``/``mttr_s``/``mtbf_s`` are seconds on the virtual clock (the services'
declared durations and the stated :class:`~kernel_lib.recovery.synthesis.faults.Timings`) plus,
for a kill, the measured CPU time of our recovery code (``rto_cpu_s``, measured); ``wall_s`` and
``trajectories_per_s`` are measured wall time of the simulation itself.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from kernel_lib.errors import ConfigError
from kernel_lib.recovery.synthesis.completion import completion_rate, expected_duplicates, forms_as_text
from kernel_lib.recovery.synthesis.config import CONFIG_NAMES, config_named
from kernel_lib.recovery.synthesis.faults import FaultPlan, FaultProfile, Timings
from kernel_lib.recovery.synthesis.harness import Harness, TrajectoryOutcome
from kernel_lib.sim.services import TwinFleet
from kernel_lib.sim.sysadmin import SYSADMIN_TASK, account_effects, sysadmin_turns

__all__ = ["wilson_ci95", "run_configuration", "run_scorecard", "summarize", "completion_vs_turns",
           "CHAPTER_TABLE_14"]

#: What table 14 prints, for the comparison column (the chapter's claims, not our measurements).
CHAPTER_TABLE_14 = {"unmanaged": {"completion_rate": 0.142, "rpo": "total loss", "rto": "manual"},
                    "wal_only": {"completion_rate": 0.386, "rpo": "0 turns", "rto": "0.62 s"},
                    "saga_only": {"completion_rate": 0.491, "rpo": "memory lost", "rto": "unrecoverable"},
                    "synthesized": {"completion_rate": 0.948, "rpo": "0 turns", "rto": "0.57 s"}}


def wilson_ci95(successes: int, n: int, *, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval for ``successes`` of ``n`` (95 %: z = 1.959964; pass another z
    for another level). ``(0, 1)`` for n = 0."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    # at 0 (n) successes the end is exactly 0 (1); rounding would leave it a hair inside
    lo = 0.0 if successes <= 0 else max(0.0, mid - half)
    hi = 1.0 if successes >= n else min(1.0, mid + half)
    return (lo, hi)


class _AuditTail:
    """The services' audit entries since :meth:`begin` (the twins' own lists, not copied)."""

    def __init__(self, fleet: TwinFleet):
        self.fleet = fleet
        self.marks: dict[str, int] = {}

    def begin(self) -> None:
        self.marks = {s: len(t.logic.state["audit"]) for s, t in self.fleet.twins.items()}

    def __call__(self) -> dict[str, list[dict[str, Any]]]:
        return {s: t.logic.state["audit"][self.marks.get(s, 0):] for s, t in self.fleet.twins.items()}


def _mean(xs: list[float]) -> float | None:
    return math.fsum(xs) / len(xs) if xs else None


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def run_configuration(name: str, *, trajectories: int, seed: int, turns: int = 6,
                      profile: FaultProfile | None = None, timings: Timings | None = None,
                      check_invariant: bool = True,
                      progress: Callable[[int], None] | None = None) -> tuple[list[TrajectoryOutcome], dict[str, Any]]:
    """Run ``trajectories`` trajectories of configuration ``name`` on a fresh fleet of twins.
    Returns ``(outcomes, effects)`` where ``effects`` is the services' verdict
    (:func:`account_effects`) plus ``wall_s`` (measured). ``progress(1)`` after each trajectory."""
    cfg = config_named(name)
    profile = profile or FaultProfile()
    fleet = TwinFleet(simulate_durations=True)
    tail = _AuditTail(fleet)
    harness = Harness(cfg, fleet, SYSADMIN_TASK, plan=FaultPlan(seed, profile), timings=timings, turns=turns,
                      audit=tail if check_invariant else None)
    outcomes = []
    t0 = time.perf_counter()
    for i in range(trajectories):
        tail.begin()
        outcomes.append(harness.run(f"{name}-{i:05d}", i))
        if progress is not None:
            progress(1)
    wall = time.perf_counter() - t0
    effects = account_effects(fleet.audits(), fleet.resources(live_only=False),
                              {o.trajectory_id: (o.kept if o.completed else None) for o in outcomes})
    effects["wall_s"] = wall
    return outcomes, effects


def summarize(name: str, outcomes: list[TrajectoryOutcome], effects: dict[str, Any], *, turns: int,
              profile: FaultProfile) -> dict[str, Any]:
    """One configuration's row of the scorecard (see the module docstring for the keys)."""
    cfg = config_named(name)
    n = len(outcomes)
    done = sum(1 for o in outcomes if o.completed)
    lo, hi = wilson_ci95(done, n)
    replay = [t.replay for t in sysadmin_turns("x", turns)]
    closed = completion_rate(cfg, replay, profile)
    kills = [k for o in outcomes for k in o.kills]
    recovered = [k for k in kills if k["recovered"] and k["rto_s"] is not None]
    repairs = [x for o in outcomes for x in o.repairs_s]
    failed = n - done
    operational = math.fsum(o.virtual_s for o in outcomes)
    checks = [r for o in outcomes for r in o.invariant]
    faults = Counter(f["kind"] for o in outcomes for f in o.faults)
    row: dict[str, Any] = {
        "name": name, "trajectories": n, "turns": turns, "completed": done,
        "completion_rate": round(done / n, 4) if n else None,
        "completion_ci95": [round(lo, 4), round(hi, 4)],
        "completion_closed_form": round(closed, 4),
        "closed_form_within_ci95": lo <= closed <= hi,
        "duplicated_effects": effects["duplicated_effects"],
        "duplicated_effects_expected": round(n * expected_duplicates(cfg, replay, profile), 2),
        "duplicates_by_action": effects["duplicates_by_action"],
        "leaked_resources": effects["leaked_resources"], "leaked_by_kind": effects["leaked_by_kind"],
        "rpo_turns": max((k["rpo_turns"] for k in kills), default=0),
        "rpo_turns_mean": _r(_mean([k["rpo_turns"] for k in kills])),
        "kills": len(kills), "kills_recovered": len(recovered),
        "rto_s": _r(_mean([k["rto_s"] for k in recovered])),
        "rto_s_max": _r(max((k["rto_s"] for k in recovered), default=None)),
        "rto_cpu_s": _r(_mean([k["rto_cpu_s"] for k in recovered]), 6),
        "rto_virtual_s": _r(_mean([k["rto_virtual_s"] for k in recovered])),
        "mttr_s": _r(_mean(repairs)), "repairs": len(repairs),
        "mtbf_s": _r(operational / failed) if failed else None,
        "operational_s": round(operational, 2),
        "invariant_violations": sum(1 for r in checks if not r["ok"]), "invariant_checks": len(checks),
        "faults_injected": {k: faults.get(k, 0) for k in ("network_drop", "tool_exception", "process_kill",
                                                           "format_corruption")},
        "unsafe_pivots": sum(1 for o in outcomes if o.pivot.get("crossed") and o.pivot.get("checks_passed") is False),
        "pivots_unverified": sum(1 for o in outcomes if o.pivot.get("crossed") and not o.pivot.get("verified")),
        "blind_retries": sum(o.blind_retries for o in outcomes),
        "states": dict(Counter(o.state for o in outcomes).most_common()),
        "wall_s": round(effects["wall_s"], 3),
        "trajectories_per_s": round(n / effects["wall_s"], 1) if effects["wall_s"] > 0 else None,
    }
    if not cfg.durable_log:
        row["rpo_kind"] = "total_loss"
    if row["rto_s"] is None:
        row["rto_note"] = ("no kill was recovered: without a durable log a kill loses the trajectory" if
                           not cfg.durable_log else "no kill in this sample was recovered")
    elif not cfg.reconciliation_probe:
        row["rto_note"] = "only kills before the intent recover (a step left in doubt halts without a probe)"
    if row["mttr_s"] is None:
        row["mttr_note"] = "no fault was recovered: every fault ended its trajectory"
    if row["mtbf_s"] is None:
        row["mtbf_note"] = "no trajectory failed"
    return row


def run_scorecard(*, trajectories: int = 1000, seed: int = 0, turns: int = 6, configs: Iterable[str] = CONFIG_NAMES,
                  profile: FaultProfile | None = None, timings: Timings | None = None,
                  check_invariant: bool = True, progress: bool | Callable[[str, int], None] = False) -> dict[str, Any]:
    """Table 14 measured (see the module docstring). ``progress``: True shows a tqdm bar on
    stderr; a callable is called as ``progress(config, done)``. Returns the scorecard document:
    a key per configuration and ``configurations`` (the same rows as a list, each with
    ``name``), ``seed``, ``trajectories``, ``turns``, ``profile``, ``timings``, ``semantics``,
    ``closed_forms``, ``chapter`` (table 14's figures, for comparison), ``time_labels``.
    ConfigError for fewer than 1 trajectory, an unknown configuration or fewer than 6 turns."""
    if type(trajectories) is not int or trajectories < 1:
        raise ConfigError(f"trajectories must be an integer >= 1, got {trajectories!r}")
    if type(seed) is not int:
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    if type(turns) is not int or turns < 6:
        raise ConfigError(f"turns must be an integer >= 6 (the six-turn task, longer ones repeat turns), got {turns!r}")
    names = list(configs)
    for n in names:
        config_named(n)
    profile = profile or FaultProfile()
    timings = timings or Timings()
    bar = None
    if progress is True:
        from tqdm import tqdm

        bar = tqdm(total=trajectories * len(names), unit="traj", desc="scorecard", leave=False)
    rows = []
    try:
        for name in names:
            if bar is not None:
                bar.set_description(f"scorecard {name}")
            tick = (lambda k: bar.update(k)) if bar is not None else (
                (lambda k, name=name: progress(name, k)) if callable(progress) else None)
            outcomes, effects = run_configuration(name, trajectories=trajectories, seed=seed, turns=turns,
                                                  profile=profile, timings=timings, check_invariant=check_invariant,
                                                  progress=tick)
            rows.append(summarize(name, outcomes, effects, turns=turns, profile=profile))
    finally:
        if bar is not None:
            bar.close()
    doc: dict[str, Any] = {r["name"]: r for r in rows}
    doc.update({
        "configurations": rows, "seed": seed, "trajectories": trajectories, "turns": turns,
        "profile": profile.as_dict(), "timings": timings.as_dict(),
        "semantics": {n: dict(config_named(n).semantics) for n in names},
        "flags": {n: {k: v for k, v in config_named(n).as_dict().items() if k not in ("name", "semantics")}
                  for n in names},
        "closed_forms": {"completion": "product of q over the turns (q by replay kind of the turn)",
                         "turn_replay_kinds": [t.replay for t in sysadmin_turns("x", turns)],
                         "q": forms_as_text(resample_max=profile.resample_max, repair_failure=profile.repair_failure)},
        "chapter": {n: CHAPTER_TABLE_14[n] for n in names if n in CHAPTER_TABLE_14},
        "time_labels": {"virtual": "rto_virtual_s, mttr_s, mtbf_s, operational_s: the simulated substrate's virtual "
                                   "clock (declared service durations and the stated timings)",
                        "measured": "rto_cpu_s (our recovery code's CPU time, part of rto_s and mttr_s), wall_s and "
                                    "trajectories_per_s (the simulation's wall time)"},
        "services": "simulated twins",
    })
    return doc


def completion_vs_turns(lengths: Iterable[int] = (6, 8, 10, 12, 16, 20), *, trajectories: int = 200, seed: int = 0,
                        configs: Iterable[str] = CONFIG_NAMES, profile: FaultProfile | None = None,
                        timings: Timings | None = None) -> list[dict[str, Any]]:
    """How the completion rate moves with trajectory length: for each configuration and length,
    the simulated rate (``trajectories`` seeded runs, Wilson 95 % interval) beside the closed
    form. Rows ``{config, turns, completion_rate, completion_ci95, closed_form, trajectories}``.
    ConfigError for a length below 6."""
    profile = profile or FaultProfile()
    rows = []
    for turns in lengths:
        if type(turns) is not int or turns < 6:
            raise ConfigError(f"every length must be an integer >= 6, got {turns!r}")
        replay = [t.replay for t in sysadmin_turns("x", turns)]
        for name in configs:
            outcomes, _ = run_configuration(name, trajectories=trajectories, seed=seed, turns=turns, profile=profile,
                                            timings=timings, check_invariant=False)
            done = sum(1 for o in outcomes if o.completed)
            lo, hi = wilson_ci95(done, trajectories)
            rows.append({"config": name, "turns": turns, "completion_rate": round(done / trajectories, 4),
                         "completion_ci95": [round(lo, 4), round(hi, 4)],
                         "closed_form": round(completion_rate(config_named(name), replay, profile), 4),
                         "trajectories": trajectories})
    return rows
