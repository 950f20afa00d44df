"""``recovery.synthesis``: the synthesized fault-tolerant runtime (Failure Recovery, "Fault-Tolerant
System Synthesis": H = ⟨K_sched, L_wal, S_saga, G_gate⟩, table 13, figure 5, table 14).

* ``lifelines`` -- figure 5 as data: a trajectory log and the services' audit read as messages
  between the four lifelines (scheduler, log, saga engine, services).

Every public name is exported here and loaded on first use (PEP 562).
"""

from kernel_lib._support.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.recovery.synthesis.lifelines": (
        "LIFELINES", "LIFELINE_LABELS", "KINDS", "KIND_MEANINGS", "LifelineMessage", "Crash", "lifeline_messages",
        "turn_rows", "legend_rows"),
})
