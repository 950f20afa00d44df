"""``recovery.synthesis``: the synthesized fault-tolerant runtime (Failure Recovery, "Fault-Tolerant
System Synthesis": the crash-consistency invariant, H = ⟨K_sched, L_wal, S_saga, G_gate⟩, table
13, figure 5, table 14).

Nothing here is new mechanism: the harness composes Chapter 11's log and dispatch gate with this
chapter's saga runner, recovery policy and repair loop, and the pre-pivot verification gate, and a
:class:`RuntimeConfig` selects which of them a run may use (table 14's four configurations).

* ``config`` -- :class:`RuntimeConfig` and :data:`CONFIGS` (``unmanaged``, ``wal_only``,
  ``saga_only``, ``synthesized``), each with its stated semantics;
* ``faults`` -- :class:`FaultProfile` (the chapter's 20 % profile, every probability a parameter),
  :class:`Timings` and the seeded :class:`FaultPlan`;
* ``harness`` -- :class:`Harness`: one runner class driven by the configuration, over any fleet
  with the twin/live facade and any task (the systems-administration task lives in
  :mod:`kernel_lib.sim.sysadmin`), returning a :class:`TrajectoryOutcome` per trajectory;
* ``invariant`` -- the crash-consistency invariant as a pure check over the log and the services'
  audit, and the restart classification (committed, compensable, pending forward repair);
* ``lifelines`` -- figure 5 as data: a trajectory log and the services' audit read as messages
  between the four lifelines (scheduler, log, saga engine, services), the crashes the log cannot
  record and the recoveries that follow;
* ``completion`` -- closed forms (sympy) of the completion rate against trajectory length under
  our fault semantics;
* ``rto`` -- Napkin Math 0.5's recovery time as closed forms (sympy): snapshot read, WAL read,
  delta prefill, reconciliation probe, their sum, the full-prefill claim and what a snapshot of a
  given size can hold of a 70B model's KV cache.

Every public name is exported here and loaded on first use (PEP 562).
"""

from kernel_lib._support.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.recovery.synthesis.config": ("RuntimeConfig", "CONFIGS", "CONFIG_NAMES", "config_named"),
    "kernel_lib.recovery.synthesis.faults": ("FaultProfile", "Timings", "Fault", "FaultPlan", "FAULT_KINDS",
                                            "KILL_POSITIONS", "ScriptedFaultPlan"),
    "kernel_lib.recovery.synthesis.harness": ("Harness", "TrajectoryOutcome", "TurnSpec", "Task",
                                             "SimulatedKill"),
    "kernel_lib.recovery.synthesis.invariant": ("InvariantReport", "check_crash_consistency", "classify",
                                               "CLASSIFICATIONS"),
    "kernel_lib.recovery.synthesis.lifelines": (
        "LIFELINES", "LIFELINE_LABELS", "KINDS", "KIND_MEANINGS", "LifelineMessage", "Crash", "lifeline_messages",
        "turn_rows", "legend_rows"),
    "kernel_lib.recovery.synthesis.completion": ("completion_forms", "completion_form", "completion_rate",
                                                "per_turn_success", "per_turn_form", "expected_duplicates",
                                                "forms_as_text", "REPLAY_KINDS"),
    "kernel_lib.recovery.synthesis.rto": (
        "ModelGivens", "LLAMA_70B", "RTO_SYMBOLS", "CHAPTER_RTO_PRINTED", "CHAPTER_GIVENS", "PRODUCTION_THRESHOLD_S",
        "MODEL_SYMBOLS", "GIVEN_NAMES", "rto_substitutions",
        "rto_formulas", "rto_terms", "rto_readings", "kv_bytes_per_token"),
})
