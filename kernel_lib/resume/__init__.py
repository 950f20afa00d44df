"""``resume``: resuming a trajectory under a new owner, timed (§11.5, eq. 7; §11.12 exercise 6).

* :mod:`.stages` — a real resume timed stage by stage (acquire, fetch, fold, reconcile, admit),
  the serial sum against the critical path;
* :mod:`.mass` — the virtual-clock mass-resume simulator of exercise 6;
* :mod:`.truncation` — refusing a log shorter than a position a checkpoint manifest, an inbox
  entry or a replica names (a cut on a record boundary that no CRC sees).

May import: ``gate``, ``ownership``, ``checkpoint``, ``log``, ``core`` and the leaves.
"""

from kernel_lib.resume.stages import (
    DEPENDS_ON, MAX_SECONDS, MAX_TOKENS, DEFAULT_PREFILL, MEASURED_LABEL, NOT_RUN_LABEL, PREFILL_LABEL,
    PrefillModel, ResumeTimeline, Stage, StageTimer, STAGE_NAMES, TimedResume, timed_resume
)
from kernel_lib.resume.mass import (
    DISCIPLINES, ARRIVALS, STARTS, ORDERS, Stages, Pool, Workload, Policy, POLICIES, SessionOutcome,
    SimResult, draw_sessions, fifo_schedule, ps_schedule, simulate, simulate_many
)

__all__ = [
    "DEPENDS_ON", "MAX_SECONDS", "MAX_TOKENS", "DEFAULT_PREFILL", "MEASURED_LABEL", "NOT_RUN_LABEL",
    "PREFILL_LABEL", "PrefillModel", "ResumeTimeline", "Stage", "StageTimer", "STAGE_NAMES", "TimedResume",
    "timed_resume", "DISCIPLINES", "ARRIVALS", "STARTS", "ORDERS", "Stages", "Pool", "Workload", "Policy",
    "POLICIES", "SessionOutcome", "SimResult", "draw_sessions", "fifo_schedule", "ps_schedule", "simulate",
    "simulate_many"
]
