"""Table 14 on the live worker fleet: a smaller sample of the scorecard with real processes and real
SIGKILLs (Failure Recovery, "Fault injection benchmarks"; issue 20: "a smaller sample on the live
fleet with real SIGKILLs").

:func:`run_live_scorecard` submits ``trajectories`` systems-administration trajectories per
configuration (default ``wal_only`` and ``synthesized``, the two with a durable log) to a
:class:`~kernel_lib.live.fleet.Fleet` of ``workers`` worker processes, each run by the ``sysadmin``
fleet program (:mod:`kernel_lib.live.fleet_sysadmin`): the same harness and the same seeded fault
plan as the simulated scorecard (:mod:`kernel_lib.sim.scorecard`), the chapter's profile, over the
live tool services. A drawn process kill is a real ``SIGKILL`` of the worker; the trajectory is
taken over by another worker once the lease expires and resumed from its log.

The result has the simulated scorecard's JSON shape (a key per configuration, ``configurations``,
``seed``, ``trajectories``, ``turns``, ``profile``, ``semantics``, ...; each row made by
:func:`kernel_lib.sim.scorecard.summarize`), with these differences, all stated in the document:

* every time is measured on the wall clock of this host; nothing is added for a model or a
  network (``timings`` all 0). ``rto_s`` is the fleet's measured RTO of a takeover (kill -> the
  new owner's first appended event); of it, ``rto_virtual_s`` here holds the waits (the dead
  owner's lease running out, then a worker's next look at the queue) and ``rto_cpu_s`` our
  recovery (grant and fence, log open and fold, probes, the rest), and ``rto_parts_mean`` every
  part; ``mttr_s`` is the harness's fault-to-commit time of the process that finished the
  trajectory, plus the RTO of each recovered kill;
* duplicated effects and leaked resources are counted from the live services' audits and
  resources (:func:`kernel_lib.sim.sysadmin.account_effects`); the crash-consistency invariant is
  checked at each trajectory's end and at each takeover, on what the log held then;
* ``rpo_turns``: for each kill, the turns the killed worker had committed minus the committed turns
  its successor found in the log.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kernel_lib.errors import ConfigError

__all__ = ["run_live_scorecard", "DEFAULT_CONFIGS"]

#: the configurations the live sample runs by default (the two with a durable log)
DEFAULT_CONFIGS = ("wal_only", "synthesized")
_RTO_PARTS = ("lease_expiry_wait_s", "claim_s", "takeover_s", "log_open_fold_s", "probes_s", "other_s")


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 6) if xs else None


def _outcome(name: str, turns: int, row: dict[str, Any], attempts: list[dict[str, Any]], kills: list[dict[str, Any]],
             rtos: list[dict[str, Any]], durable: bool, end_check: dict[str, Any]) -> Any:
    """One trajectory's :class:`~kernel_lib.recovery.synthesis.harness.TrajectoryOutcome`, put
    together from the fleet's records (the final process's outcome, every attempt's notes, the kills)."""
    from kernel_lib.recovery.synthesis.harness import TrajectoryOutcome

    res = row["result"] or {}
    state = row["outcome"] or "LOST"
    if row["state"] == "failed" and state in ("GAVE_UP", "ERROR"):
        state = "LOST"
    out = TrajectoryOutcome(row["trajectory_id"], name, state=state, turns=int(res.get("turns", turns)),
                            turns_committed=int(res.get("turns_committed", 0)))
    out.faults = [f for a in attempts for f in a["notes"].get("faults", [])]
    by_kill = {r["killed_at_s"]: r for r in rtos}
    for k in kills:
        detail = k["detail"] or {}
        later = [a for a in attempts if a["id"] > (k["attempt_id"] or 0)]
        surviving = later[0]["notes"].get("surviving_committed_turns") if later else None
        acked = detail.get("committed_turns")
        rpo = max(0, acked - surviving) if acked is not None and surviving is not None else acked
        recovered = durable and bool(later) and out.turns_committed >= int(detail.get("turn") or 0)
        r = by_kill.get(k["killed_at_s"])
        kill = {"turn": detail.get("turn"), "position": detail.get("position"), "rpo_turns": rpo or 0,
                "committed_turns": acked, "recovered": recovered, "rto_s": None, "rto_cpu_s": None,
                "rto_virtual_s": None, "probes": 0, "rto_parts": None}
        if recovered and r is not None and r.get("rto_s") is not None:
            kill.update(rto_s=r["rto_s"], rto_virtual_s=round(r["lease_expiry_wait_s"] + r["claim_s"], 6),
                        rto_cpu_s=round(r["rto_s"] - r["lease_expiry_wait_s"] - r["claim_s"], 6), probes=r["probes"],
                        rto_parts={p: r[p] for p in _RTO_PARTS})
        out.kills.append(kill)
    out.repairs_s = [float(x) for x in res.get("repairs_s", [])] + [k["rto_s"] for k in out.kills if k["rto_s"]]
    out.blind_retries = int(res.get("blind_retries", 0))
    started = min((a["claimed_at_s"] for a in attempts), default=None)
    ended = row["finished_at_s"]
    out.virtual_s = round(ended - started, 6) if started is not None and ended is not None else 0.0
    out.cpu_s = float(res.get("cpu_s", 0.0))
    out.kept = list(res.get("kept", []))
    out.pivot = dict(res.get("pivot") or {"reached": False, "verified": None, "checks_passed": None,
                                          "crossed": False})
    out.invariant = [a["notes"]["restart_invariant"] for a in attempts if "restart_invariant" in a["notes"]]
    out.invariant.append(end_check)
    return out


def run_live_scorecard(trajectories: int = 20, seed: int = 0, workers: int = 2, *,
                       configs: Iterable[str] = DEFAULT_CONFIGS, turns: int = 6, profile: Any = None,
                       coordinator: str = "sqlite", lease_ttl_s: float | None = None,
                       timeout_s: float | None = None, workdir: Any = None,
                       progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Table 14's sample on the live fleet (module docstring).

    Args:
        trajectories: per configuration (1..1000).
        seed: the fault plan's seed (the simulated scorecard with the same seed draws the same
            faults for the same proposals).
        workers: worker processes (1..16).
        configs: configuration names (:data:`~kernel_lib.recovery.synthesis.config.CONFIG_NAMES`).
        turns: trajectory length (>= 6).
        profile: a :class:`~kernel_lib.recovery.synthesis.faults.FaultProfile` (default the
            chapter's 20 %).
        coordinator, lease_ttl_s: the fleet's ownership coordinator (``sqlite``/``etcd``) and lease.
        timeout_s: the longest wait per configuration (default 60 s + 5 s per trajectory).
        workdir: where the fleet's directory goes (default: the system temporary folder).
        progress: called with a line per configuration.

    Returns:
        The scorecard document (the simulated scorecard's shape; module docstring), with
        ``services`` ``"live"`` and ``live``: ``{workers, coordinator, kills, takeovers,
        wall_s per configuration}``.

    Raises:
        ConfigError: a bad argument (nothing started). FleetError / FleetTimeoutError: the fleet
            failed (everything it started is stopped).
    """
    from kernel_lib.live.fleet_controller import Fleet
    from kernel_lib.recovery.synthesis.completion import forms_as_text
    from kernel_lib.recovery.synthesis.config import config_named
    from kernel_lib.recovery.synthesis.faults import FaultProfile, Timings
    from kernel_lib.recovery.synthesis.invariant import check_crash_consistency
    from kernel_lib.sim.scorecard import CHAPTER_TABLE_14, summarize
    from kernel_lib.sim.sysadmin import account_effects, sysadmin_turns

    if isinstance(trajectories, bool) or not isinstance(trajectories, int) or not 1 <= trajectories <= 1000:
        raise ConfigError(f"trajectories must be an integer 1..1000, got {trajectories!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 16:
        raise ConfigError(f"workers must be an integer 1..16, got {workers!r}")
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 6:
        raise ConfigError(f"turns must be an integer >= 6, got {turns!r}")
    names = list(configs)
    if not names:
        raise ConfigError("name at least one configuration")
    cfgs = {n: config_named(n) for n in names}
    profile = profile or FaultProfile()
    if not isinstance(profile, FaultProfile):
        raise ConfigError(f"profile must be a FaultProfile, got {type(profile).__name__}")
    wait_s = timeout_s if timeout_s is not None else 60.0 + 5.0 * trajectories
    tick = progress or (lambda _m: None)
    nonce = uuid.uuid4().hex[:6]
    profile_fields = {k: v for k, v in profile.as_dict().items() if k != "total"}
    per_config: dict[str, dict[str, Any]] = {}
    with Fleet(workers, coordinator=coordinator, lease_ttl_s=lease_ttl_s, workdir=workdir, max_claims=20) as fleet:
        for name in names:
            tick(f"live scorecard: {name}, {trajectories} trajectories on {workers} workers")
            items = [{"trajectory_id": f"live-{name}-{nonce}-{i:04d}", "program": "sysadmin",
                      "durability": "on" if cfgs[name].durable_log else "off",
                      "params": {"config": name, "seed": seed, "index": i, "turns": turns, "profile": profile_fields}}
                     for i in range(trajectories)]
            t0 = time.perf_counter()
            ids = fleet.submit(items)
            fleet.wait(ids, timeout_s=wait_s)
            per_config[name] = {"ids": ids, "wall_s": time.perf_counter() - t0}
        tick("judging by the services' audits")
        audits = fleet.services.audits()
        resources = fleet.services.resources(live_only=False)
        attempts = fleet.queue.attempts()
        kills = fleet.queue.kills()
        rows = []
        takeovers_total = 0
        for name in names:
            ids = per_config[name]["ids"]
            results = {r["trajectory_id"]: r for r in fleet.results(ids, judge=False)}
            outcomes = []
            for q in fleet.queue.rows(ids):
                tid = q["trajectory_id"]
                events = fleet.events(tid)
                report = check_crash_consistency(events, audits, trajectory_id=tid)
                outcomes.append(_outcome(name, turns, q, [a for a in attempts if a["trajectory_id"] == tid],
                                         [k for k in kills if k["trajectory_id"] == tid], results[tid]["rto"],
                                         cfgs[name].durable_log, {"when": "end", **report.as_dict()}))
                takeovers_total += results[tid]["takeovers"]
            effects = account_effects(audits, resources, {o.trajectory_id: (o.kept if o.completed else None)
                                                          for o in outcomes})
            effects["wall_s"] = per_config[name]["wall_s"]
            row = summarize(name, outcomes, effects, turns=turns, profile=profile)
            parts = [k["rto_parts"] for o in outcomes for k in o.kills if k.get("rto_parts")]
            row["rto_parts_mean"] = {p: _mean([x[p] for x in parts]) for p in _RTO_PARTS}
            row["takeovers"] = sum(results[t]["takeovers"] for t in ids)
            row["self_kills"] = sum(1 for k in kills if k["trajectory_id"] in set(ids) and k["sent_by"] == "self")
            rows.append(row)
        live = {"workers": workers, "coordinator": fleet.coordinator_kind, "lease_ttl_s": fleet.lease_ttl_s,
                "kills": len(kills), "takeovers": takeovers_total,
                "wall_s": {n: round(per_config[n]["wall_s"], 3) for n in names}, "fleet": fleet.describe()}
    doc: dict[str, Any] = {r["name"]: r for r in rows}
    timings = Timings(0.0, 0.0, 0.0, 0.0)
    doc.update({
        "configurations": rows, "seed": seed, "trajectories": trajectories, "turns": turns,
        "profile": profile.as_dict(), "timings": timings.as_dict(),
        "semantics": {n: dict(cfgs[n].semantics) for n in names},
        "flags": {n: {k: v for k, v in cfgs[n].as_dict().items() if k not in ("name", "semantics")} for n in names},
        "closed_forms": {"completion": "product of q over the turns (q by replay kind of the turn)",
                         "turn_replay_kinds": [t.replay for t in sysadmin_turns("x", turns)],
                         "q": forms_as_text(resample_max=profile.resample_max, repair_failure=profile.repair_failure)},
        "chapter": {n: CHAPTER_TABLE_14[n] for n in names if n in CHAPTER_TABLE_14},
        "time_labels": {
            "measured": "every time here is measured on this host's wall clock: rto_s (kill -> the new owner's first "
                        "appended event), its parts in rto_parts_mean, mttr_s, mtbf_s, operational_s, wall_s",
            "rto_virtual_s": "on the live fleet: the waits inside rto_s (the dead owner's lease running out, then a "
                             "worker's next look at the queue), measured",
            "rto_cpu_s": "on the live fleet: our recovery inside rto_s (grant and fence, log open and fold, "
                         "probes, the rest), measured wall time",
            "timings": "all 0: no model and no network delay is added on the live substrate"},
        "services": "live (real processes on loopback, real SIGKILLs of the workers)",
        "live": live,
    })
    return doc
