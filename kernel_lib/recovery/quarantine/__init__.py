"""``recovery.quarantine``: blast-radius quarantine and taint (Failure Recovery, "Blast Radius
Quarantine": tables 11 and 12, definition 0.3, Example 0.2; issue 19).

When a trajectory is suspected of being compromised (an injected command heading for a host off
the allow-list, a broken invariant, a watchdog trip), the supervisor contains it in four stages
that never ask the model anything: suspend its process tree, revoke its capability leases, sever
its network, and taint what it produced. The pure parts live here; the effects (cgroups,
signals, network namespaces, processes) in the thin runner :mod:`kernel_lib.live.quarantine`.

* ``egress`` — the pre-execution egress check (:func:`check_tool_call` over an
  :class:`EgressPolicy` allow-list; the destinations a call names, shell commands included) and
  :class:`EgressGuard`, the gateway-level severing used where namespaces are not available;
* ``protocol`` — table 12 (:data:`TABLE_12`, :data:`WAVES`), the mechanism choice per machine
  (:func:`choose_mechanisms`), the trigger and t_taint (:func:`taint_origin`), the
  ``TrajectoryQuarantined`` tombstone and how a worker reads it back (:func:`quarantine_of`,
  :func:`refuse_if_quarantined`), and Example 0.2's timeline (:func:`containment_timeline`);
* ``taint`` — artifacts, the four taint states, lineage (:func:`taint_states`) and the
  independence rule for clearances (:func:`check_clearance`: the model never clears);
* ``ledger`` — the durable taint ledger (SQLite): registrations, tombstones, clearances;
* ``mediation`` — :class:`MediationGateway`: peers read shared artifacts only through it, and a
  tainted or suspect one is refused (:class:`~kernel_lib.errors.ArtifactQuarantined`).

Every public name is exported here and loaded on first use (PEP 562).
"""

from kernel_lib._support.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.recovery.quarantine.egress": ("EgressPolicy", "EgressDecision", "EgressGuard", "destinations_of",
                                              "hosts_in_command", "check_destinations", "check_tool_call",
                                              "COMMAND_ARGUMENTS", "NETWORK_COMMANDS"),
    "kernel_lib.recovery.quarantine.protocol": (
        "Stage", "TABLE_12", "WAVES", "STAGE_NAMES", "SUSPEND_MECHANISMS", "SEVER_MECHANISMS", "HostCapabilities",
        "MechanismChoice", "choose_mechanisms", "QuarantineTrigger", "TRIGGER_KINDS", "taint_origin", "tombstone",
        "quarantine_of", "quarantines_of", "refuse_if_quarantined", "ContainmentTimeline", "containment_timeline",
        "EXAMPLE_0_2_GIVENS"),
    "kernel_lib.recovery.quarantine.taint": ("TaintState", "Artifact", "Verifier", "Clearance", "TaintView",
                                             "VERIFIER_KINDS", "REFUSED_VERIFIER_KINDS", "READABLE_STATES",
                                             "check_clearance", "taint_states", "readable", "produced_since",
                                             "descendants", "is_sha256"),
    "kernel_lib.recovery.quarantine.ledger": ("TaintLedger", "AppliedTombstone"),
    "kernel_lib.recovery.quarantine.mediation": ("MediationGateway",),
})
