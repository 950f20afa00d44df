"""Notebook FR.6's runs as tables: the Failure Recovery chapter's four fallacies and pitfalls
("Fallacies and Pitfalls"), each run, with what the services counted.

Every function runs something in :mod:`kernel_lib.sim` or :mod:`kernel_lib.live` and returns plain
rows (lists of dicts with readable keys) for a notebook to show; nothing here decides anything.

1. Two-phase commit across tools: :func:`two_phase_scenarios` (the coordinator cut off at each
   point, on a virtual clock), :func:`two_phase_count_rows`, :func:`prepare_hook_rows` (the
   project's contracts offer no prepare), :func:`saga_same_work_rows` (the same work as a saga).
2. Backward rollback: :func:`rollback_rows` (:mod:`kernel_lib.sim.rollback_pitfall`).
3. Heartbeats: :func:`liveness_rows` and :func:`journal_rows` (both timelines of
   :func:`~kernel_lib.live.heartbeat.run_heartbeat_fallacy`), :func:`supervised_rows`.
4. Unbounded retries: :func:`herd_pitfall` (:mod:`kernel_lib.sim.herd`), :func:`live_lab_rows`
   (:mod:`kernel_lib.live.gateway_lab`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["two_phase_scenarios", "two_phase_count_rows", "prepare_hook_rows", "saga_same_work_rows",
           "rollback_rows", "liveness_rows", "journal_rows", "supervised_rows", "HERD_POLICIES", "herd_configs",
           "herd_pitfall", "live_lab_rows", "live_two_phase_rows"]


# --- 1. two-phase commit ---------------------------------------------------------------------------


def _tx_state(run: Any, name: str) -> str:
    tx = run.transactions.get(name) or {}
    by = tx.get("decided_by")
    return f"{tx.get('state', 'unknown')}" + (f" (by {by})" if by and by != "coordinator" else "")


#: The scenarios :func:`two_phase_scenarios` runs: (label, keyword arguments of run_two_phase).
_SCENARIOS = (
    ("coordinator finishes", {"cut": None}),
    ("cut after every yes vote; an operator aborts by hand", {"cut": "after_prepare"}),
    ("cut after COMMIT was logged; the coordinator restarts", {"cut": "after_decision", "recover_coordinator": True}),
    ("cut after the first commit, the other participant isolated; an operator aborts it",
     {"cut": "after_first_commit", "isolate_after_cut": True}),
)


def two_phase_scenarios(*, turn_s: float = 2.0, client_every_s: float = 0.5, intervene_after_s: float = 60.0
                        ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run :func:`~kernel_lib.sim.two_phase.run_two_phase` once per scenario (the coordinator
    finishing, then cut off at each point) with the same timing. Returns ``(runs, rows)``:
    ``runs`` maps each label to its :class:`~kernel_lib.sim.two_phase.TwoPhaseRun`; one row per
    scenario: how long each participant held its row (s, virtual time, from its own record),
    the requests of other clients each refused (counted by the participant), what each
    transaction branch ended as, and whether the outcome is atomic (both committed or both
    aborted). Raises ConfigError for bad times."""
    from kernel_lib.sim.two_phase import run_two_phase

    runs: dict[str, Any] = {}
    rows = []
    for label, kw in _SCENARIOS:
        run = run_two_phase(turn_s=turn_s, client_every_s=client_every_s, intervene_after_s=intervene_after_s, **kw)
        runs[label] = run
        states = {n: (run.transactions.get(n) or {}).get("state") for n in run.counts}
        row: dict[str, Any] = {"scenario": label}
        for n in run.counts:
            row[f"{n}: row locked (s)"] = run.lock_held_s[n]
        for n, c in run.counts.items():
            row[f"{n}: requests refused (423)"] = sum(c["blocked"].values())
        for n in run.counts:
            row[f"{n}: branch ended"] = _tx_state(run, n)
        row["atomic"] = len(set(states.values())) == 1 and None not in states.values()
        row["decided by hand"] = sum(c["heuristic"] for c in run.counts.values())
        rows.append(row)
    return runs, rows


def two_phase_count_rows(run: Any) -> list[dict[str, Any]]:
    """One row per participant of a :class:`~kernel_lib.sim.two_phase.TwoPhaseRun`: the other
    clients' requests as they saw the answers, and the participant's own counts (refused,
    applied, votes, decisions by hand)."""
    rows = []
    for n, c in run.counts.items():
        seen = run.clients[n]
        rows.append({"participant": n, "other clients sent": seen["sent"],
                     "clients saw 423 Locked": seen["locked"], "clients were served": seen["served"],
                     "participant counted refused": sum(c["blocked"].values()),
                     "participant applied (all actions)": sum(c["applied"].values()),
                     "yes votes": c["votes"]["yes"], "decided by hand": c["heuristic"],
                     "row locked (s)": run.lock_held_s[n]})
    return rows


def prepare_hook_rows() -> list[dict[str, Any]]:
    """:func:`kernel_lib.sim.two_phase.prepare_hooks` over the project's services and contracts."""
    from kernel_lib.sim.two_phase import prepare_hooks

    return prepare_hooks()


def saga_same_work_rows(*, turn_s: float = 2.0, client_every_s: float = 0.5, outage_s: float = 60.0
                        ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The same work as a saga (:func:`~kernel_lib.sim.two_phase.run_saga_same_work`), the runner
    cut off after T1 for ``outage_s`` seconds, then finished by a new runner: once completing,
    once with T2 refused (409) and compensated. Returns ``(runs, rows)``: per run the saga's end
    state and, per service, the other clients' requests sent and applied (from the services'
    audit), the saga's own effects, the rows it held locked (none) and what it still holds."""
    from kernel_lib.sim.two_phase import run_saga_same_work

    runs: dict[str, Any] = {}
    rows = []
    for label, fail in (("T2 succeeds", False), ("T2 refused (409): compensate T1", True)):
        r = run_saga_same_work(fail_second=fail, turn_s=turn_s, client_every_s=client_every_s, outage_s=outage_s)
        runs[label] = r
        row: dict[str, Any] = {"saga run (cut after T1, resumed later)": label, "saga ended": r.state}
        for n, c in r.clients.items():
            row[f"{n}: other clients sent"] = c["sent"]
            row[f"{n}: applied"] = c["applied"]
        row["saga's own effects (audit)"] = ", ".join(f"{k} x{v}" for k, v in sorted(r.saga_effects.items()))
        row["rows locked"] = r.locks_held
        row["saga still holds"] = ", ".join(x["resource_id"] for x in r.live) or "nothing"
        rows.append(row)
    return runs, rows


def live_two_phase_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The counts of :func:`kernel_lib.live.two_phase.run_live_two_phase` as rows, one per participant
    process (read from the process): refused requests, applied effects, decisions by hand, how the
    clients' requests were answered in each phase, and how long the row was locked (measured)."""
    rows = []
    for n, c in report["counts"].items():
        phases = report["clients"].get(n, {})
        rows.append({"participant process": n, "refused (423), counted by the process": sum(c["blocked"].values()),
                     **{f"clients {phase}": ", ".join(f"{k} x{v}" for k, v in sorted(t.items()))
                        for phase, t in phases.items()},
                     "decided by hand": c["heuristic"], "row locked (s, measured)": report["lock_held_s"].get(n)})
    return rows


# --- 2. backward rollback ----------------------------------------------------------------------------


def rollback_rows(outcomes: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per :class:`~kernel_lib.sim.rollback_pitfall.RollbackOutcome`: the runtime, the order
    run, the saga's own verdict, the failed step, the messages the relay delivered to the customer
    (number and subjects) and what the saga still holds."""
    labels = {"naive": "taken domain", "ordered": "taken domain", "ordered_free_domain": "free domain"}
    rows = []
    for key, o in outcomes.items():
        rows.append({"runtime": o.runtime, "domain": labels.get(key, key), "order run": " → ".join(o.order),
                     "the saga says": o.saga_state, "failed step": o.failed_step or "-",
                     "messages the relay delivered to the customer": o.messages_delivered,
                     "their subjects": " | ".join(m["subject"] for m in o.messages) or "-",
                     "gate checks passed": (f"{sum(c['passed'] for c in o.gate)}/{len(o.gate)}" if o.gate
                                            else "(no gate ran)"),
                     "still held (not messages)": ", ".join(r["resource_id"] for r in o.live_resources
                                                             if r["service"] != "email") or "nothing"})
    return rows


# --- 3. heartbeats ------------------------------------------------------------------------------------


def liveness_rows(report: Any) -> list[dict[str, Any]]:
    """The supervisor's probes of :class:`~kernel_lib.live.heartbeat.HeartbeatFallacyReport` as rows
    (the liveness timeline): time, HTTP answer, heartbeats, longest gap, process state, verdict,
    and what the semantic watchdog concluded from the journal at that moment."""
    return [{"t (s)": p.t_s, "HTTP /healthz": p.http_status, "last step age (s)": p.last_step_age_s,
             "heartbeats so far": p.heartbeats, "longest heartbeat gap (s)": p.heartbeat_gap_s,
             "/proc state": p.process_state, "liveness": p.liveness, "semantic watchdog": p.semantic}
            for p in report.probes]


def journal_rows(journal: str | os.PathLike, report: Any) -> list[dict[str, Any]]:
    """The state timeline: one row per journal step (its time since the worker started, the tool,
    the arguments, the state hash after it, the first step that state was seen at), and whether
    the watchdog had fired by then (from ``report.detections``)."""
    first_seen: dict[str, int] = {}
    fired_at = report.first_detection_step
    rows = []
    path = Path(journal)
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        h = e["state_sha256"]
        first_seen.setdefault(h, e["step"])
        rows.append({"step": e["step"], "t (s)": e.get("t_s"), "tool": e["tool"],
                     "arguments": json.dumps(e["arguments"], sort_keys=True) if e["arguments"] else "",
                     "state hash": h[:12], "state first seen at step": first_seen[h],
                     "watchdog": ("fires: state cycle" if fired_at == e["step"] else
                                  ("(fired)" if fired_at is not None and e["step"] > fired_at else ""))})
    return rows


def supervised_rows(liveness_only: Any, supervised: Any) -> list[dict[str, Any]]:
    """The two supervisors side by side: one that trusts liveness (the report of
    :func:`~kernel_lib.live.heartbeat.run_heartbeat_fallacy`, stopped at the end of its run) and one
    that stops the worker at the watchdog's first detection
    (:func:`~kernel_lib.live.heartbeat.run_watchdog_supervisor`). Measured on this machine."""
    steps = liveness_only.steps
    return [
        {"supervisor": "liveness only (HTTP, heartbeats, /proc)",
         "liveness probes passed": f"{sum(p.liveness == 'healthy' for p in liveness_only.probes)}/"
                                   f"{len(liveness_only.probes)}",
         "stopped the worker": "no (the run's end stopped it)",
         "steps taken": len(steps), "distinct states": liveness_only.distinct_states_journal,
         "loop seen at step": liveness_only.first_detection_step},
        {"supervisor": "liveness + semantic watchdog",
         "liveness probes passed": f"{supervised.healthy_probes}/{supervised.probes}",
         "stopped the worker": (f"yes, {supervised.detected_after_s} s after start" if not supervised.timed_out
                                else "no (no detection)"),
         "steps taken": supervised.steps_taken, "distinct states": None,
         "loop seen at step": supervised.detected_at_step},
    ]


# --- 4. unbounded retries -------------------------------------------------------------------------------


#: The retry policies of :func:`herd_pitfall`: name -> (label, strategy, backoff base/cap (s), max retries, breaker).
HERD_POLICIES: dict[str, tuple[str, str, float | None, int, bool]] = {
    "at_once_unbounded": ("retry at once, no bound", "exponential", 0.01, 1000, False),
    "at_once_bounded": ("retry at once, at most 8 retries", "exponential", 0.01, 8, False),
    "deterministic": ("exponential backoff, no jitter, no breaker", "exponential", None, 8, False),
    "jitter_breaker": ("full jitter + shared breaker", "full_jitter", None, 8, True),
}


_SERIES = (("arrivals", "requests reaching the service (/s)"), ("goodput", "successful answers (/s)"),
           ("queue_depth", "queue depth"))


def herd_configs(*, agents: int = 300, calls_per_agent: int = 20, think_s: float = 2.0, timeout_s: float = 1.0,
                 outage_start_s: float = 10.0, outage_s: float = 3.0, horizon_s: float = 120.0) -> dict[str, Any]:
    """The scenario of :func:`herd_pitfall` per policy: ``{name: (HerdConfig, HerdPolicy)}``. A fleet
    of ``agents`` trajectories each make ``calls_per_agent`` calls ``think_s`` apart to one service
    (200 requests/s, 50 ms); from ``outage_start_s`` for ``outage_s`` seconds it answers every
    request with an error after 50 ms (a fast-failing hiccup); the client gives up on an answer
    after ``timeout_s``. Backoff base/cap: 10 ms for "at once", else the herd's defaults (1 s, 30 s).
    Raises HerdConfigError for a value out of range."""
    from kernel_lib.sim.herd import DEFAULT_BREAKER, HerdConfig, HerdPolicy

    base = dict(agents=agents, calls_per_agent=calls_per_agent, think_s=think_s, start_spread_s=think_s,
                outage_mode="slow", outage_start_s=outage_start_s, outage_s=outage_s, degraded_latency_s=0.05,
                degraded_error_rate=1.0, horizon_s=horizon_s, series_bin_s=1.0, timeout_s=timeout_s)
    out = {}
    for name, (_label, strategy, delay, retries, breaker) in HERD_POLICIES.items():
        extra = {"base_s": delay, "cap_s": delay} if delay is not None else {}
        cfg = HerdConfig(**base, max_retries=retries, **extra)
        out[name] = (cfg, HerdPolicy(name, strategy, DEFAULT_BREAKER if breaker else None))
    return out


def herd_pitfall(*, seed: int = 0, **scenario: Any) -> dict[str, Any]:
    """Run every policy of :data:`HERD_POLICIES` on the scenario of :func:`herd_configs` (virtual
    clock, deterministic for ``seed``), plus the same fleet with no outage. Returns ``{"rows",
    "series", "runs", "collapse"}``: one row per policy (attempts, requests that reached the
    service: the service's count, calls completed and given up, peak queue, server time wasted,
    when the last answer came, the seconds after the outage until goodput returned to the
    no-outage level); ``series``: long-form ``{policy, t (s), metric, value}`` per second for a
    chart; ``collapse``: the arithmetic of when retrying at once overloads the service (agents /
    timeout against capacity)."""
    from kernel_lib.sim.herd import HerdPolicy, run_herd

    configs = herd_configs(**scenario)
    cfg0 = next(iter(configs.values()))[0]
    baseline = run_herd(cfg0.__class__(**{**cfg0.to_json(), "outage_s": 0.0}), HerdPolicy("no_outage", "full_jitter"),
                        seed)
    runs = {"no_outage": baseline}
    rows = []
    series = []
    for name, (cfg, pol) in configs.items():
        r = run_herd(cfg, pol, seed)
        runs[name] = r
        rows.append({"policy": HERD_POLICIES[name][0], "attempts": r.totals["attempts"],
                     "requests that reached the service": r.totals["arrivals"],
                     "failed fast (breaker)": r.totals["fast_failed"],
                     "calls completed": r.totals["calls_completed"], "calls given up": r.totals["calls_given_up"],
                     "still waiting at the horizon": r.totals["in_flight"],
                     "peak queue depth": r.peak_queue_depth,
                     "server time wasted (s)": round(r.totals["wasted_server_s"], 2),
                     "last answer (s)": round(r.duration_s, 1)})
        for i, t in enumerate(r.series["t_s"]):
            if t > cfg.horizon_s:
                break
            for key, title in _SERIES:
                series.append({"policy": HERD_POLICIES[name][0], "t (s)": t, "metric": title,
                               "value": r.series[key][i]})
    rows.append({"policy": "(reference) the same fleet, no outage", "attempts": baseline.totals["attempts"],
                 "requests that reached the service": baseline.totals["arrivals"], "failed fast (breaker)": 0,
                 "calls completed": baseline.totals["calls_completed"],
                 "calls given up": baseline.totals["calls_given_up"], "still waiting at the horizon": 0,
                 "peak queue depth": baseline.peak_queue_depth, "server time wasted (s)": 0.0,
                 "last answer (s)": round(baseline.duration_s, 1)})
    collapse = {"agents": cfg0.agents, "timeout_s": cfg0.timeout_s, "capacity_per_s": cfg0.capacity_per_s,
                "retry_rate_at_once_per_s": cfg0.agents / cfg0.timeout_s,
                "queue_wait_if_all_wait_s": cfg0.agents / cfg0.capacity_per_s,
                "normal_load_per_s": cfg0.agents / cfg0.think_s}
    return {"rows": rows, "series": series, "runs": runs, "collapse": collapse}


def live_lab_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`kernel_lib.live.gateway_lab.compare_gateway_lab`'s two runs as rows: per mode, the
    requests the service process counted (``service_received``), and per phase the external calls'
    answers as the agents saw them and how many left the host."""
    rows = []
    for mode, label in (("shared_pool", "naive: one pool, retry at once"),
                        ("bulkheads", "gateway: bulkhead + breaker + jittered backoff")):
        run = report[mode]
        row: dict[str, Any] = {"mode": label, "requests the service counted": run["service_received"]}
        for phase, p in run["phases"].items():
            sent = sum(1 for e in run["external"] if e["phase"] == phase and e.get("dispatched"))
            row[f"{phase}: sent to the service"] = sent
            row[f"{phase}: answers"] = ", ".join(f"{k} x{v}" for k, v in sorted(p["external_codes"].items()))
        row["breaker transitions"] = len(run["breaker_transitions"])
        rows.append(row)
    return rows
