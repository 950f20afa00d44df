"""The watchdog's vocabulary: a step as the detectors see it, and a detection (Failure Recovery,
"Semantic Watchdog Timers": S_t = <s_t, a_t, o_t>; table 6).

Pure data; no I/O. Both records check their fields on construction and raise
:class:`~kernel_lib.errors.WatchInputError` naming the field (a step built by hand with an
observation that is a number, or metrics that are not finite numbers, would otherwise fail deep
inside a detector or make one fire on garbage); :func:`check_steps` checks a whole sequence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kernel_lib.errors import WatchInputError

__all__ = ["DETECTION_KINDS", "DetectionKind", "Detection", "WatchStep", "StepKind", "STEP_KINDS", "check_steps"]

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
STEP_KINDS = ("tool", "message", "question")
_STATE_SOURCES = ("workspace", "log", None)


def _position(owner: str, name: str, value: Any, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if type(value) is not int or value < 0:
        raise WatchInputError(f"{owner}.{name} must be a log position (an integer >= 0), got {_brief(value)}",
                              field=name)


def _typed(owner: str, name: str, value: Any, types: tuple[type, ...], what: str) -> None:
    if not isinstance(value, types):
        raise WatchInputError(f"{owner}.{name} must be {what}, got {_brief(value)}", field=name)


def _brief(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge integer"
    return f"{text[:60]} ({type(value).__name__})"


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

    def __post_init__(self) -> None:
        """Raises WatchInputError for a field of the wrong type or range (module docstring)."""
        o = "WatchStep"
        _position(o, "position", self.position)
        if self.kind not in STEP_KINDS:
            raise WatchInputError(f"WatchStep.kind must be one of {', '.join(STEP_KINDS)}, got {_brief(self.kind)}",
                                  field="kind")
        _typed(o, "actor", self.actor, (str,), "a str")
        _typed(o, "tool", self.tool, (str,), "a str")
        _typed(o, "arguments", self.arguments, (Mapping,), "a JSON object (a mapping)")
        bad_key = next((k for k in self.arguments if not isinstance(k, str)), None)
        if bad_key is not None:
            raise WatchInputError(f"WatchStep.arguments keys must be str (JSON object keys), got {_brief(bad_key)}",
                                  field="arguments")
        _typed(o, "observation", self.observation, (str, type(None)), "a str or None")
        _typed(o, "observation_error", self.observation_error, (bool,), "a bool")
        _position(o, "observation_position", self.observation_position, optional=True)
        _typed(o, "state_hash", self.state_hash, (str, type(None)), "a str (hex digest) or None")
        if self.state_source not in _STATE_SOURCES:
            raise WatchInputError(f"WatchStep.state_source must be 'workspace', 'log' or None, got "
                                  f"{_brief(self.state_source)}", field="state_source")
        _typed(o, "metrics", self.metrics, (Mapping,), "a mapping of metric name -> number")
        for k, v in self.metrics.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float)) \
                    or not math.isfinite(v):
                raise WatchInputError(f"WatchStep.metrics must map names (str) to finite numbers, got "
                                      f"{_brief(k)}: {_brief(v)}", field="metrics")
        _typed(o, "mutative", self.mutative, (bool, type(None)), "a bool or None")
        _typed(o, "model_text", self.model_text, (str,), "a str")


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

    def __post_init__(self) -> None:
        """Raises WatchInputError for a field of the wrong type or range (module docstring)."""
        _position("Detection", "position", self.position)
        _typed("Detection", "kind", self.kind, (str,), "a str")
        _typed("Detection", "evidence", self.evidence, (Mapping,), "a JSON object (a mapping)")
        if self.tier is not None and (type(self.tier) is not int or not 1 <= self.tier <= 3):
            raise WatchInputError(f"Detection.tier must be 1, 2, 3 or None, got {_brief(self.tier)}", field="tier")
        _typed("Detection", "detector", self.detector, (str,), "a str")

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "kind": self.kind, "evidence": self.evidence, "tier": self.tier,
                "detector": self.detector}


def check_steps(steps: Iterable[Any]) -> list[WatchStep]:
    """``steps`` as a list, checked: every item a :class:`WatchStep`, positions strictly
    increasing (one trajectory in log order; a step's position is the sequence number of its own
    action, so two steps never share one). Raises WatchInputError otherwise (TypeError-like
    input: not an iterable of steps)."""
    if isinstance(steps, (str, bytes, Mapping)) or not isinstance(steps, Iterable):
        raise WatchInputError(f"steps must be a sequence of WatchStep, got {type(steps).__name__}")
    out = list(steps)
    prev: WatchStep | None = None
    for i, s in enumerate(out):
        if not isinstance(s, WatchStep):
            raise WatchInputError(f"steps[{i}] is a {type(s).__name__}, not a WatchStep")
        if prev is not None and s.position <= prev.position:
            raise WatchInputError(f"steps[{i}] is at log position {s.position}, not after the step before it "
                                  f"(#{prev.position}): the steps of one trajectory are in log order, each at its "
                                  "own position", field="position")
        prev = s
    return out
