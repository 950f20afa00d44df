"""The watchdog's vocabulary: a step as the detectors see it, and a detection (Failure Recovery,
"Semantic Watchdog Timers": S_t = <s_t, a_t, o_t>; table 6).

Pure data; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["DETECTION_KINDS", "DetectionKind", "Detection", "WatchStep", "StepKind"]

#: What a detector reports (table 6, plus the two rules the issue adds for real logs).
DETECTION_KINDS = (
    "state_hash_cycle",        # H_t == H_{t-k}, k in [1, K] (figure 3, the listing)
    "metric_stagnation",       # no metric improved over an epoch of E mutative steps (after the grace)
    "metric_oscillation",      # a metric going back and forth (m_pass 4, 3, 4, 3)
    "action_repetition",       # h_tool(a_t) == h_tool(a_{t-k}) and o_{t-k} was an error
    "entropy_collapse",        # lexical entropy of the model's text collapsed against its own baseline
    "repeated_question",       # the agent asks the user the same question again
    "embedding_drift",         # paraphrased loop by embedding distance (optional extra)
)
DetectionKind = Literal["state_hash_cycle", "metric_stagnation", "metric_oscillation", "action_repetition",
                        "entropy_collapse", "repeated_question", "embedding_drift"]

#: ``tool``: a tool call with arguments; ``message``: an agent's message treated as an action
#: (multi-agent transcripts such as Who&When, where "clicked X" is the action and what the next
#: speaker shows is the observation); ``question``: the agent addresses the user (no tool call).
StepKind = Literal["tool", "message", "question"]


@dataclass(frozen=True, slots=True)
class WatchStep:
    """One step t of a trajectory as the watchdog sees it: S_t = <s_t, a_t, o_t>.

    ``position``: the log's sequence number of the event that carries the action (what a
    detection reports). ``actor``: who acted (the agent's name in a multi-agent log, else
    ``"agent"``). ``tool`` and ``arguments``: the action (for a message, ``tool`` is
    ``"message:<actor>"`` and ``arguments`` ``{"text": ...}``). ``observation``: the text the
    environment returned after it (``None`` when the log holds none); ``observation_error``:
    whether that observation is an error. ``observation_position``: its sequence number.
    ``state_hash``: the environment's canonical state hash after the step (hex), ``None`` where
    the log reveals no state; ``state_source`` says where it came from (``"workspace"``: the
    real tree was hashed; ``"log"``: derived from what the log reveals). ``metrics``: verifier
    metrics after the step (``tests_passed``, ``tests_failed``, ``compiler_errors``,
    ``lint_findings``; absent when not measured). ``mutative``: whether the action may change the
    environment (``None``: unknown, treated as mutative). ``model_text``: the model's own text at
    this step (thought, reply), for the entropy detector.
    """

    position: int
    kind: StepKind
    actor: str
    tool: str
    arguments: dict[str, Any]
    observation: str | None = None
    observation_error: bool = False
    observation_position: int | None = None
    state_hash: str | None = None
    state_source: Literal["workspace", "log"] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    mutative: bool | None = None
    model_text: str = ""


@dataclass(frozen=True, slots=True)
class Detection:
    """Where a detector fired: ``position`` is the log's sequence number at which the evidence
    was complete (the step whose action or state closed the loop); ``kind`` one of
    :data:`DETECTION_KINDS` (or a baseline's rule name, e.g. ``"openhands.repeated_action_error"``);
    ``evidence`` plain JSON data (the period k, the positions of the earlier occurrences, the
    hashes, the metric series, ...); ``tier`` the table-7 tier the watchdog would apply (1, 2 or
    3; ``None`` for a baseline, which has no ladder); ``detector`` who fired (``"watchdog"`` or a
    baseline's name)."""

    position: int
    kind: str
    evidence: dict[str, Any]
    tier: int | None = None
    detector: str = "watchdog"

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "kind": self.kind, "evidence": self.evidence, "tier": self.tier,
                "detector": self.detector}
