"""Example 0.2 measured on this machine: the containment stages' real latencies fed into the
exercise's arithmetic (Failure Recovery, "Blast Radius Quarantine"; the exercise: :mod:`.ex0_2`).

:func:`measure_containment` runs :func:`kernel_lib.live.quarantine_demo.run_quarantine_demo` (a
real process tree frozen by the cgroup freezer or SIGSTOP, a real network namespace cut, a real
broker revoking the lease, the tombstone and the SQLite taint ledger) and takes its measured stage
durations as the exercise's givens: ``policy_check_ms`` as measured, ``egress_drop_ms`` = the cut,
``freeze_ms`` = the freeze, ``idp_revocation_ms`` = the broker's revocation (a local broker, not a
cloud identity provider), ``taint_broadcast_ms`` = the tombstone and ledger update;
``decode_tokens_per_s`` stays the exercise's given. :func:`comparison_rows` sets the chapter's
figures, the formula at the measured givens (both readings) and the times the live supervisor
observed side by side.

This module imports the live layer; :mod:`.ex0_2` stays light.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from kernel_lib.course.exercises import ex0_2

__all__ = ["LABEL", "measure_containment", "comparison_rows"]

#: How every measured figure is labelled beside the computed ones.
LABEL = "measured on this machine"


def measure_containment(params: Mapping[str, Any] | None = None, *, directory: str | os.PathLike | None = None,
                        suspend: str = "auto", sever: str = "auto") -> dict[str, Any]:
    """Run the live quarantine once and solve Example 0.2 with its measured stage latencies.

    Returns ``{"label", "mechanisms", "givens", "measured_givens", "napkin", "napkin_measured",
    "napkin_measured_sequential", "observed_at_ms", "checks"}``: ``napkin`` solved at the
    chapter's givens (or ``params``), ``napkin_measured`` at the measured ones (the chapter's
    reading), ``napkin_measured_sequential`` the ``sequential_waves`` reading (the live
    supervisor's order), ``observed_at_ms`` the live run's own stage completion times.

    Raises ConfigError for bad givens or mechanisms, ContainmentUnavailableError for a mechanism
    named that the machine lacks."""
    from kernel_lib.live.quarantine_demo import run_quarantine_demo

    givens = ex0_2.validate_params(params)
    r = run_quarantine_demo(directory, suspend=suspend, sever=sever)
    measured = ex0_2.validate_params({
        "policy_check_ms": r["policy_check_ms"], "egress_drop_ms": r["egress_cut_ms"], "freeze_ms": r["freeze_ms"],
        "idp_revocation_ms": r["revocation_ms"], "taint_broadcast_ms": r["taint_ms"],
        "decode_tokens_per_s": givens["decode_tokens_per_s"]})
    solved = ex0_2.solve(measured)
    return {
        "label": LABEL,
        "mechanisms": {"suspend": r["suspend_mechanism"], "sever": r["sever_mechanism"],
                       "cgroup_version": r.get("cgroup_version")},
        "givens": givens,
        "measured_givens": measured,
        "napkin": ex0_2.solve(givens),
        "napkin_measured": solved,
        "napkin_measured_sequential": {**solved, **solved["alternative"]["sequential_waves"]},
        "observed_at_ms": r["report"]["at_ms"],
        "checks": {k: r[k] for k in ("tree_stopped", "request_after_cut_failed", "revoked_lease_refused",
                                      "tainted_read_refused", "model_clearance_refused", "clean")},
    }


def comparison_rows(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows for a table: each event's time in the chapter (from its givens), from the formula at
    the measured givens (chapter's reading and sequential waves), and as the live run saw it."""
    names = (("egress sealed", "egress_sealed_ms", "sever"), ("tree frozen", "frozen_ms", "suspend"),
             ("local seal", "local_seal_ms", None), ("taint recorded", "taint_ms", "taint"),
             ("token revoked", "revoked_ms", "revoke"))
    obs = m["observed_at_ms"]
    rows = []
    for label, key, stage in names:
        observed = (max(obs.get("sever", 0.0), obs.get("suspend", 0.0)) if stage is None else obs.get(stage))
        rows.append({"event": label, "chapter_ms": m["napkin"][key], "formula_measured_ms": m["napkin_measured"][key],
                     "formula_measured_sequential_ms": m["napkin_measured_sequential"][key],
                     "observed_ms": observed})
    return rows
