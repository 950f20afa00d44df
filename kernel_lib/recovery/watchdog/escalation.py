"""The watchdog's escalation ladder as pure decisions over the trajectory record (Failure Recovery,
"Watchdog intervention protocols", table 7).

Three tiers, each trading recovery cost against how much of the trajectory survives:

1. **context interrupt** — a synthetic observation in the model's context ([STATE_OSCILLATION]);
2. **checkpoint backtrack** — the workspace restored from the Chapter 11 checkpoint taken before
   the cycle's onset, and the failing action's signature h_tool masked (a tombstone the gate
   enforces);
3. **terminal abort** (ERR_SEMANTIC_DEADLOCK) — compensate before the pivot, freeze after it,
   capabilities revoked.

:func:`decide_tier` reads the interventions already in the log (:func:`interventions_of`) and a
new detection, and answers which tier applies (:class:`TierDecision`); it never acts. The
escalation rule, with ``E = policy.epoch_steps`` mutative steps (the text's "epoch of 3 steps";
read-only actions, such as running the tests, do not count):

* no intervention yet, or more than ``E`` mutative steps passed since the last one's detection
  without a new detection: tier 1 (the ladder starts again; spent backtracks stay spent);
* the loop is detected again within ``E`` mutative steps of the last intervention: one tier up
  from tier 1, and tier 2 again while backtracks remain (``policy.backtrack_budget``); once the
  budget is spent, tier 3;
* after a tier 3, nothing: the trajectory is over;
* a detection at or before the last intervention's, or about an action at or before the one the
  last intervention answered (the evidence's ``step_position``), was answered already: nothing.

Durability (intent before effect): every intervention is logged as a ``WatchdogIntervened``
``intent`` before any of its effects and as ``completed`` after all of them.
:func:`unfinished` finds an intent without its completion: the crash happened mid-tier, and the
worker must finish that tier (whose parameters the intent holds) before deciding anything new.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kernel_lib.core.action_signature import action_signature
from kernel_lib.core.record import TrajectoryRecord
from kernel_lib.errors import ConfigError, WatchInputError
from kernel_lib.recovery.watchdog.model import Detection, WatchStep

__all__ = ["LadderPolicy", "Intervention", "TierDecision", "interventions_of", "unfinished", "decide_tier",
           "mutative_steps", "action_at", "checkpoint_before", "onset_of", "step_position_of", "watch_window",
           "INTERRUPT_INPUT"]

#: ``RuntimeInput`` name (kind ``observation``) of the tier-1 interrupt delivered into the context.
INTERRUPT_INPUT = "watchdog.interrupt"


@dataclass(frozen=True)
class LadderPolicy:
    """The ladder's two numbers (Failure Recovery, table 7 and the tier-2 paragraph).

    ``epoch_steps``: a loop detected again within this many mutative steps of the last
    intervention's detection escalates (the text: "within an epoch of 3 steps"); ``>= 1``.
    ``backtrack_budget``: how many tier-2 backtracks a trajectory may spend before a persisting
    loop is aborted (tier 3); ``>= 0`` (0: tier 1, then tier 3).

    Raises ConfigError for values out of range.
    """

    epoch_steps: int = 3
    backtrack_budget: int = 1

    def __post_init__(self) -> None:
        if type(self.epoch_steps) is not int or self.epoch_steps < 1:
            raise ConfigError(f"epoch_steps must be an integer >= 1, got {self.epoch_steps!r}")
        if type(self.backtrack_budget) is not int or self.backtrack_budget < 0:
            raise ConfigError(f"backtrack_budget must be an integer >= 0, got {self.backtrack_budget!r}")


@dataclass(frozen=True)
class Intervention:
    """One intervention as the log holds it: its intent (``intent_position``) and, once done, its
    completion (``completed_position``; None while unfinished). The other fields are the
    intent's (a completion's ``checkpoint_restored`` and ``outcome`` win when present)."""

    intervention_id: str
    tier: int
    detection_kind: str
    detection_position: int | None
    intent_position: int
    completed_position: int | None = None
    action_signature: str | None = None
    onset_position: int | None = None
    checkpoint_restored: str | None = None
    outcome: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    reason: str = ""

    @property
    def finished(self) -> bool:
        return self.completed_position is not None

    def to_json(self) -> dict[str, Any]:
        return {"intervention_id": self.intervention_id, "tier": self.tier, "detection_kind": self.detection_kind,
                "detection_position": self.detection_position, "intent_position": self.intent_position,
                "completed_position": self.completed_position, "action_signature": self.action_signature,
                "onset_position": self.onset_position, "checkpoint_restored": self.checkpoint_restored,
                "outcome": self.outcome, "evidence": self.evidence, "reason": self.reason}


@dataclass(frozen=True)
class TierDecision:
    """What :func:`decide_tier` answers. ``tier``: 1, 2 or 3, or None (nothing to do: the
    detection was answered already, or the trajectory was aborted). ``resume``: the decision is
    to finish the unfinished intervention ``intervention_id`` (a crash cut it short), not a new
    one. ``action_signature``/``onset_position``/``checkpoint_id``: the tier's parameters (the
    signature to mask and the checkpoint to restore, for tier 2). ``backtracks_used``: tier-2
    interventions before this one. ``reason``: the rule that decided, in words."""

    tier: int | None
    reason: str
    intervention_id: str | None = None
    resume: bool = False
    action_signature: str | None = None
    onset_position: int | None = None
    checkpoint_id: str | None = None
    backtracks_used: int = 0
    steps_since_last: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"tier": self.tier, "reason": self.reason, "intervention_id": self.intervention_id,
                "resume": self.resume, "action_signature": self.action_signature,
                "onset_position": self.onset_position, "checkpoint_id": self.checkpoint_id,
                "backtracks_used": self.backtracks_used, "steps_since_last": self.steps_since_last}


# --- reading the log's interventions ----------------------------------------------------------------


def _records(record: TrajectoryRecord) -> list[dict[str, Any]]:
    return [r for r in record.recovery_records if r.get("event_type") == "WatchdogIntervened"]


def interventions_of(record: TrajectoryRecord) -> list[Intervention]:
    """Every watchdog intervention of the record, in log order (by intent position).

    Schema-2 records pair an ``intent`` with its ``completed`` by ``intervention_id``; a
    schema-1 record (one per intervention, logged after the fact) reads through its upcast as a
    completed intervention with id ``wd-v1-<position>``. A completion without an intent (a log
    written by hand) counts as a whole intervention at its own position."""
    out: dict[str, Intervention] = {}
    for r in _records(record):
        seq = r["sequence_number"]
        if "phase" not in r:   # schema 1 (WatchdogIntervenedV1): upcast
            from kernel_lib.core.events import WatchdogIntervenedV1

            v1 = WatchdogIntervenedV1(**{k: r[k] for k in ("watchdog", "tier", "signal", "action")}).upcast(seq)
            out[v1.intervention_id] = Intervention(
                v1.intervention_id, v1.tier, v1.detection_kind, None, seq, seq, v1.action_signature,
                v1.onset_position, None, None, dict(v1.evidence), v1.reason)
            continue
        iid = r["intervention_id"]
        if r["phase"] == "intent":
            if iid not in out:
                out[iid] = Intervention(iid, r["tier"], r["detection_kind"], r.get("detection_position"), seq, None,
                                        r.get("action_signature"), r.get("onset_position"),
                                        r.get("checkpoint_restored"), r.get("outcome"), dict(r.get("evidence") or {}),
                                        r.get("reason", ""))
            continue
        prev = out.get(iid)
        if prev is None:
            out[iid] = Intervention(iid, r["tier"], r["detection_kind"], r.get("detection_position"), seq, seq,
                                    r.get("action_signature"), r.get("onset_position"), r.get("checkpoint_restored"),
                                    r.get("outcome"), dict(r.get("evidence") or {}), r.get("reason", ""))
        elif prev.completed_position is None:
            out[iid] = Intervention(
                iid, prev.tier, prev.detection_kind, prev.detection_position, prev.intent_position, seq,
                prev.action_signature, prev.onset_position, r.get("checkpoint_restored") or prev.checkpoint_restored,
                r.get("outcome") or prev.outcome, prev.evidence, prev.reason)
    return sorted(out.values(), key=lambda i: i.intent_position)


def unfinished(record: TrajectoryRecord | Sequence[Intervention]) -> Intervention | None:
    """The intervention whose intent is logged and whose completion is not (the newest such),
    or None. A worker resuming the trajectory finishes it before anything else."""
    items = interventions_of(record) if isinstance(record, TrajectoryRecord) else list(record)
    return next((i for i in reversed(items) if not i.finished), None)


# --- facts the decision reads from the record --------------------------------------------------------


def mutative_steps(record: TrajectoryRecord, after: int, upto: int) -> int:
    """How many mutative tool steps the agent took at log positions in ``(after, upto]``:
    operations whose first intent lies there and whose repeat contract is not ``read_only`` (a
    test run or a lookup changes nothing). A second attempt of the same operation (after a crash
    left the first in doubt) is the same step; a proposal refused at admission (a masked action)
    never ran and does not count."""
    n = 0
    for op in record.operations.values():
        if op.kind != "tool" or op.repeat_contract == "read_only":
            continue
        first = min((a.intent_sequence for a in op.attempts.values() if a.intent_sequence is not None), default=None)
        if first is not None and after < first <= upto:
            n += 1
    return n


def action_at(record: TrajectoryRecord, position: int) -> tuple[str, dict[str, Any]] | None:
    """``(tool, arguments)`` of the tool attempt whose intent is at log ``position`` (or whose
    admission decision is there, for a refused proposal), or None."""
    for op in record.operations.values():
        if op.kind != "tool":
            continue
        if any(a.intent_sequence == position for a in op.attempts.values()) and op.tool is not None:
            return op.tool, dict(op.arguments)
    return None


def onset_of(detection: Detection) -> int:
    """The log position where the detected cycle began: the evidence's ``onset_position`` when the
    detector gave one, else the earliest of its ``positions`` or ``occurrences`` (the steps that
    make up the loop, as :mod:`~kernel_lib.recovery.watchdog.detectors` reports them), else the
    detection's own."""
    ev = detection.evidence or {}
    onset = ev.get("onset_position")
    if type(onset) is int and 1 <= onset <= detection.position:
        return onset
    ps = [p for key in ("positions", "occurrences") for p in ev.get(key) or []
          if type(p) is int and 1 <= p <= detection.position]
    return min([detection.position, *ps])


def step_position_of(detection: Detection) -> int:
    """The log position of the action the detection is about: the evidence's ``step_position``
    (a detector fires at the observation that closed the loop, one or more positions after the
    action), else the detection's own position."""
    pos = (detection.evidence or {}).get("step_position")
    return pos if type(pos) is int and 1 <= pos <= detection.position else detection.position


def checkpoint_before(record: TrajectoryRecord, position: int) -> dict[str, Any] | None:
    """The newest checkpoint (Chapter 11, ``Checkpoint`` event) covering a log position before
    ``position`` and carrying a workspace, or None: the state the sandbox is rewound to."""
    best = None
    for c in record.checkpoints:
        covered = c.get("covered_sequence_number", 0)
        has_ws = c.get("workspace_tree_sha256") or c.get("workspace_manifest_sha256")
        if covered < position and has_ws and (best is None or covered >= best.get("covered_sequence_number", 0)):
            best = c
    return best


def _evidence_signature(detection: Detection) -> str | None:
    """h_tool of the looping action as the evidence names it: ``action_signature``, else the
    detectors' ``signature`` (both 16 hex digits), else None."""
    ev = detection.evidence or {}
    for key in ("action_signature", "signature"):
        sig = ev.get(key)
        if isinstance(sig, str) and len(sig) == 16:
            return sig
    return None


def _signature(record: TrajectoryRecord, detection: Detection) -> str | None:
    sig = _evidence_signature(detection)
    if sig is not None:
        return sig
    act = action_at(record, step_position_of(detection)) or action_at(record, detection.position)
    return action_signature(*act) if act is not None else None


def watch_window(steps: Sequence[WatchStep], history: TrajectoryRecord | Sequence[Intervention]) -> list[WatchStep]:
    """The steps the detectors should watch now (pure).

    A tier-2 backtrack rewinds the trajectory: the workspace goes back to a checkpoint and the turns
    since the cycle's onset leave the model's context. The states before the rewind are no longer
    on the trajectory's path, so the window restarts there: it begins at the last step before the
    newest backtrack's completion, whose recorded state is the one the backtrack restored (the log
    records the restored tree before the completion, so
    :func:`~kernel_lib.recovery.watchdog.steps.watch_steps` gives that step the restored state).
    Without a finished backtrack, every step. ``steps`` in log order; ``history`` the record or
    its interventions."""
    items = interventions_of(history) if isinstance(history, TrajectoryRecord) else list(history)
    done = [i.completed_position for i in items if i.tier == 2 and i.completed_position is not None]
    if not done:
        return list(steps)
    at = max(done)
    start = max((i for i, s in enumerate(steps) if s.position < at), default=0)
    return list(steps[start:])


# --- the decision ------------------------------------------------------------------------------------


def decide_tier(history: TrajectoryRecord | Sequence[Intervention], detection: Detection,
                policy: LadderPolicy = LadderPolicy(), *, steps_since_last: int | None = None) -> TierDecision:
    """Which tier of table 7 answers ``detection`` (see the module docstring for the rule).

    Args:
        history: the trajectory record (folded to at least the detection), or its interventions
            (:func:`interventions_of`) when ``steps_since_last`` is given.
        detection: the detector's report (its ``position`` is a log sequence number).
        policy: the ladder's epoch and backtrack budget.
        steps_since_last: mutative steps since the last intervention's detection, up to and
            including the detection's own; None: counted from ``history`` (a record).

    Returns: a :class:`TierDecision`. With an unfinished intervention in the history the
    decision is to resume it (``resume=True``, its own tier and id), whatever the detection.

    Raises:
        ConfigError: ``history`` is a list of interventions and ``steps_since_last`` is missing;
            ``steps_since_last`` is not a whole number >= 0; ``policy`` is not a LadderPolicy.
        WatchInputError: ``detection`` is not a Detection, or names no position of the log (below
            1, or past the record's last sequence number: an intervention logged for a future
            position would count every real detection before it as answered already).
    """
    record = history if isinstance(history, TrajectoryRecord) else None
    if not isinstance(policy, LadderPolicy):
        raise ConfigError(f"policy must be a LadderPolicy, got {type(policy).__name__}")
    if steps_since_last is not None and (type(steps_since_last) is not int or steps_since_last < 0):
        raise ConfigError(f"steps_since_last must be a whole number of steps >= 0, got {steps_since_last!r}")
    if not isinstance(detection, Detection):
        raise WatchInputError(f"detection must be a Detection, got {type(detection).__name__}")
    head = record.last_sequence_number if record is not None else None
    if detection.position < 1 or (head is not None and detection.position > head):
        raise WatchInputError(f"the detection at #{detection.position} names no position of the log "
                              f"(1 to {head if head is not None else 'its head'})", field="position")
    items = interventions_of(record) if record is not None else list(history)
    open_one = unfinished(items)
    if open_one is not None:
        return TierDecision(open_one.tier, f"intervention {open_one.intervention_id} (tier {open_one.tier}) was "
                            "logged without its completion: finish it first", open_one.intervention_id, True,
                            open_one.action_signature, open_one.onset_position, open_one.checkpoint_restored,
                            sum(1 for i in items if i.tier == 2 and i is not open_one))
    if any(i.tier == 3 for i in items):
        return TierDecision(None, "the trajectory was aborted (tier 3): nothing more to do")
    backtracks = sum(1 for i in items if i.tier == 2)
    last = items[-1] if items else None
    last_at = None if last is None else (last.detection_position or last.intent_position)
    if last_at is not None and detection.position <= last_at:
        return TierDecision(None, f"the detection at #{detection.position} is not after the last intervention's "
                            f"(#{last_at}): already answered", backtracks_used=backtracks)
    last_step = (last.evidence or {}).get("step_position") if last is not None else None
    if type(last_step) is int and "step_position" in (detection.evidence or {}) \
            and step_position_of(detection) <= last_step:
        # one alarm per step (as assign_tiers groups them): the same step seen again, e.g. once its
        # observation arrived, is the alarm already answered, not a persisting loop
        return TierDecision(None, f"the detection at #{detection.position} is about the action at "
                            f"#{step_position_of(detection)}, which the last intervention answered (its action at "
                            f"#{last_step}): already answered", backtracks_used=backtracks)
    onset = onset_of(detection)
    sig = _signature(record, detection) if record is not None else _evidence_signature(detection)
    iid_base = f"wd-{detection.position}"
    if last is None:
        return TierDecision(1, "first detection of a loop: interrupt the model's context (tier 1)", f"{iid_base}-t1",
                            action_signature=sig, onset_position=onset, backtracks_used=backtracks)
    if steps_since_last is None:
        if record is None:
            raise ConfigError("decide_tier over a list of interventions needs steps_since_last")
        steps_since_last = mutative_steps(record, last_at, detection.position)
    E = policy.epoch_steps
    if steps_since_last > E:
        return TierDecision(1, f"{steps_since_last} mutative steps since the last intervention, more than an epoch "
                            f"(E={E}): a new loop, the ladder starts again at tier 1", f"{iid_base}-t1",
                            action_signature=sig, onset_position=onset, backtracks_used=backtracks,
                            steps_since_last=steps_since_last)
    persists = (f"the loop persists {steps_since_last} mutative step(s) after tier {last.tier} (within the epoch "
                f"E={E})")
    if backtracks < policy.backtrack_budget:
        ckpt = checkpoint_before(record, onset) if record is not None else None
        # the onset of a loop that persisted through a tier-1 interrupt is the earlier loop's
        start = min(onset, last.onset_position or onset)
        if record is not None:
            ckpt = checkpoint_before(record, start) or ckpt
        return TierDecision(2, f"{persists}: backtrack {backtracks + 1} of {policy.backtrack_budget} (tier 2)",
                            f"{iid_base}-t2", action_signature=sig, onset_position=start,
                            checkpoint_id=ckpt.get("checkpoint_id") if ckpt else None, backtracks_used=backtracks,
                            steps_since_last=steps_since_last)
    return TierDecision(3, f"{persists} and the backtrack budget ({policy.backtrack_budget}) is spent: terminal abort "
                        "ERR_SEMANTIC_DEADLOCK (tier 3)", f"{iid_base}-t3", action_signature=sig,
                        onset_position=onset, backtracks_used=backtracks, steps_since_last=steps_since_last)

