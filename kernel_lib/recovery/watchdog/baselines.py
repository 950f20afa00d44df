"""The loop rules other agent runtimes ship, replayed over the same steps as the watchdog, for
comparison (issue 18: "implement, as named baselines, the rules other runtimes ship").

Both baselines read the :class:`~kernel_lib.recovery.watchdog.model.WatchStep` list of a log (the
same actions and observations the watchdog reads) and return
:class:`~kernel_lib.recovery.watchdog.model.Detection` records in the watchdog's shape, with
``detector="openhands"`` or ``"gemini"``, ``kind`` ``"<detector>.<rule>"`` and ``tier=None`` (no
ladder). Every evidence object carries ``step_position``, ``occurrences`` and
``first_repeat_position`` as the watchdog's do. Pure; no I/O.

**OpenHands' stuck detector** (:func:`openhands_detections`), after
``openhands/controller/stuck.py`` of the OpenHands repository (``StuckDetector.is_stuck``, the
legacy V0 controller) and ``openhands-sdk/openhands/sdk/conversation/stuck_detector.py`` of the
software-agent-sdk repository (V1, the same thresholds as ``StuckDetectionThresholds``). Checked
after every event, over the history with the user's messages left out (headless mode) or, when a
person takes part in the conversation, over the history after the user's last message
(interactive mode):

* ``repeating_action_observation``: the last 4 actions are equal and the last 4 observations are
  equal;
* ``repeating_action_error``: the last 3 actions are equal and the last 3 observations are errors
  (OpenHands' ``ErrorObservation``; here an observation the step marks as an error);
* ``monologue``: the agent's last 3 messages are equal, with no observation between them;
* ``alternating_pattern``: the last 6 actions and the last 6 observations repeat every other one
  (A, B, A, B, A, B);
* ``empty_response``: 3 empty agent messages in a row (V0's newest rule);
* the context-window rule (10 ``AgentCondensationObservation`` events with nothing between them)
  is left out: none of the formats read here records a context condensation.

Actions are compared as OpenHands compares them: tool and arguments *and the thought* that came
with the call (V0 compares the action dataclasses, thought field included; V1's ``_event_eq``
compares ``thought`` explicitly). ``compare_thought=False`` gives the more generous variant that
compares the call alone. Observations are compared by content (V0 compares a shell command's
output only by command and exit code, which these logs do not record separately). OpenHands
stops the run at its first detection; the replay reports each onset (a rule that starts to hold)
so that later loops in the same log are visible too.

**Gemini CLI's loop detection** (:func:`gemini_detections`), after
``packages/core/src/services/loopDetectionService.ts`` of the gemini-cli repository
(``LoopDetectionService``):

* ``tool_call_loop``: the same tool call (name and ``JSON.stringify`` of its arguments, as
  recorded) 5 times in a row (``TOOL_CALL_LOOP_THRESHOLD``); any other call resets the count;
* ``content_chanting``: in the model's text, a 50-character chunk (``CONTENT_CHUNK_SIZE``) seen 10
  times (``CONTENT_LOOP_THRESHOLD``) at an average distance of at most 250 characters, with at
  most 5 distinct texts between consecutive occurrences; code blocks are skipped, and tables,
  lists, headings, block quotes and dividers reset the tracking, as do tool calls; the text is
  fed line by line in place of the stream's chunks;
* a detection latches until the next user prompt (``reset``), which also clears the counts;
* the LLM-judged check (after 30 turns, a model asked whether the conversation loops) is left
  out: it needs a model and is not reproducible offline.

Steps map onto these runtimes' events as follows: a tool step is an action (a tool call) and its
observation; a multi-agent message that reports a browser or file action is an action and the
page or file it showed; any other agent message is an agent message (OpenHands' ``MessageAction``,
Gemini's content); a question step is an agent message followed by the user's message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kernel_lib.errors import WatchdogConfigError
from kernel_lib.recovery.watchdog.model import Detection, WatchStep, check_steps
from kernel_lib.recovery.watchdog.steps import step_signature

__all__ = ["BASELINES", "OPENHANDS_RULES", "GEMINI_RULES", "openhands_detections", "gemini_detections",
           "run_baseline"]

OPENHANDS_RULES = ("repeating_action_observation", "repeating_action_error", "monologue", "alternating_pattern",
                   "empty_response")
GEMINI_RULES = ("tool_call_loop", "content_chanting")

# thresholds as shipped
_OH_ACTION_OBSERVATION = 4
_OH_ACTION_ERROR = 3
_OH_MONOLOGUE = 3
_OH_ALTERNATING = 6
_OH_EMPTY = 3
_GEMINI_TOOL_CALL_LOOP_THRESHOLD = 5
_GEMINI_CONTENT_LOOP_THRESHOLD = 10
_GEMINI_CONTENT_CHUNK_SIZE = 50
_GEMINI_MAX_HISTORY_LENGTH = 5000


@dataclass(frozen=True)
class _Ev:
    """One OpenHands-style event: ``role`` action (a tool call or an agent's browser action),
    message (an agent's MessageAction), observation, error (an ErrorObservation), user."""
    role: Literal["action", "message", "observation", "error", "user"]
    key: str
    position: int
    step: WatchStep


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _is_action_report(step: WatchStep) -> bool:
    return step.kind == "message" and step.mutative is True


def _oh_events(steps: Sequence[WatchStep], compare_thought: bool) -> list[_Ev]:
    step_positions = {s.position for s in steps}
    out: list[_Ev] = []
    for s in steps:
        if s.kind == "tool" or _is_action_report(s):
            thought = {"thought": s.model_text} if compare_thought else {}
            key = _dump({"tool": s.tool, "arguments": s.arguments, **thought})
            out.append(_Ev("action", key, s.position, s))
        else:
            out.append(_Ev("message", _dump(s.arguments.get("text", "")), s.position, s))
        if s.observation is None:
            continue
        at = s.observation_position if s.observation_position is not None else s.position
        if s.kind == "question":
            out.append(_Ev("user", s.observation, at, s))
        elif s.kind == "tool" or _is_action_report(s) or at not in step_positions:
            out.append(_Ev("error" if s.observation_error else "observation",
                           ("error:" if s.observation_error else "obs:") + s.observation, at, s))
    return out


class _History:
    """The history OpenHands' rules read, grown one event at a time, with the positions of its
    actions (and agent messages), observations (and errors) and messages kept as it grows: each
    rule then reads the newest few in constant time, instead of a pass over the whole history per
    step (quadratic in a long log)."""

    def __init__(self) -> None:
        self.events: list[_Ev] = []
        self.acts: list[int] = []          # action or message
        self.obs: list[int] = []           # observation or error
        self.msgs: list[int] = []          # message
        self.empties = 0                   # messages with empty text at the end, unbroken
        self._monologue: tuple[tuple[int, ...], list[_Ev] | None] = ((), None)

    def add(self, e: _Ev) -> None:
        i = len(self.events)
        self.events.append(e)
        if e.role in ("action", "message"):
            self.acts.append(i)
        if e.role in ("observation", "error"):
            self.obs.append(i)
        if e.role == "message":
            self.msgs.append(i)
            self.empties = 0 if json.loads(e.key).strip() else self.empties + 1
        elif e.role in ("action", "observation", "error"):
            self.empties = 0

    def last(self, index: list[int], n: int) -> list[_Ev]:
        """The newest ``n`` events of ``index``, newest first (as OpenHands collects them)."""
        return [self.events[i] for i in reversed(index[-n:])]

    def monologue(self) -> list[_Ev] | None:
        """The last three messages when they are equal and no observation came between them
        (computed again only when a message arrives)."""
        last3 = tuple(self.msgs[-_OH_MONOLOGUE:])
        if last3 != self._monologue[0]:
            found = None
            if len(last3) == _OH_MONOLOGUE and len({self.events[i].key for i in last3}) == 1 and not any(
                    e.role in ("observation", "error") for e in self.events[last3[0] + 1:last3[-1]]):
                found = [self.events[i] for i in last3]
            self._monologue = (last3, found)
        return self._monologue[1]


def _oh_rules(history: _History) -> dict[str, list[_Ev]]:
    """The OpenHands rules that hold on ``history`` (already filtered), each with the actions
    that make it hold (oldest first)."""
    held: dict[str, list[_Ev]] = {}
    if len(history.events) < 3:
        return held
    acts = history.last(history.acts, 4)
    obs = history.last(history.obs, 4)
    if len(acts) == 4 and len(obs) == 4 and len({a.key for a in acts}) == 1 and len({o.key for o in obs}) == 1 \
            and acts[0].role == acts[-1].role and len({o.role for o in obs}) == 1:
        held["repeating_action_observation"] = acts[::-1]
    if len(acts) >= 3 and len(obs) >= 3 and len({a.key for a in acts[:3]}) == 1 and \
            len({a.role for a in acts[:3]}) == 1 and all(o.role == "error" for o in obs[:3]):
        held["repeating_action_error"] = acts[:3][::-1]
    mono = history.monologue()
    if mono is not None:
        held["monologue"] = mono
    if len(history.events) >= _OH_ALTERNATING:
        a6 = history.last(history.acts, _OH_ALTERNATING)
        o6 = history.last(history.obs, _OH_ALTERNATING)
        if len(a6) == 6 and len(o6) == 6:
            def same(x: _Ev, y: _Ev) -> bool:
                return x.key == y.key and x.role == y.role
            if all(same(a6[i], a6[i + 2]) for i in range(4)) and all(same(o6[i], o6[i + 2]) for i in range(4)):
                held["alternating_pattern"] = a6[::-1]
    if history.empties >= _OH_EMPTY:   # a rule's actions matter at its onset, when there are exactly three
        held["empty_response"] = history.last(history.msgs, _OH_EMPTY)[::-1]
    return held


def openhands_detections(steps: Sequence[WatchStep], *, compare_thought: bool = True,
                         headless: bool | None = None) -> list[Detection]:
    """OpenHands' stuck-detector rules replayed over ``steps`` (module docstring).

    ``compare_thought``: compare the thought with the call, as OpenHands does (default), or the
    call alone. ``headless``: True leaves the user's messages out of the history, False looks only
    at the history after the user's last message, None chooses interactive when the log has
    question steps (a person answers the agent) and headless otherwise.
    Returns one detection per onset of a rule, ``kind="openhands.<rule>"``, ``tier=None``;
    ``evidence``: ``rule``, ``repeats`` (the rule's count), ``signature`` (h_tool of the repeated
    action), ``occurrences`` (the positions of the actions the rule matched)."""
    steps = list(steps)
    events = _oh_events(steps, compare_thought)
    if headless is None:
        headless = not any(s.kind == "question" for s in steps)
    out: list[Detection] = []
    holding: set[str] = set()
    history = _History()      # headless: every event but the user's; interactive: those after the user's last
    for n in range(1, len(events) + 1):
        e = events[n - 1]
        if e.role == "user":
            if not headless:
                history = _History()
        else:
            history.add(e)
        held = _oh_rules(history)
        for rule, acts in held.items():
            if rule in holding:
                continue
            occ = [a.position for a in acts]
            step = acts[-1].step
            out.append(Detection(events[n - 1].position, f"openhands.{rule}", {
                "rule": rule, "repeats": len(acts), "step_position": step.position, "actor": step.actor,
                "tool": step.tool, "signature": step_signature(step), "occurrences": occ,
                "first_repeat_position": occ[1] if len(occ) > 1 else occ[0],
                "mode": "headless" if headless else "interactive"}, None, "openhands"))
        holding = set(held)
    return out


# --- Gemini CLI -------------------------------------------------------------------------------------------

_TABLE = re.compile(r"(^|\n)\s*(\|.*\||[|+-]{3,})")
_LIST_ITEM = re.compile(r"(^|\n)\s*[*-+]\s")          # sic: in the source, [*-+] is the range '*'..'+'
_NUMBERED_ITEM = re.compile(r"(^|\n)\s*\d+\.\s")
_HEADING = re.compile(r"(^|\n)#+\s")
_BLOCKQUOTE = re.compile(r"(^|\n)>\s")
_DIVIDER = re.compile(r"[+-_=*\u2500-\u257F]+")       # sic: '+-_' is a range in the source too


class _Chanting:
    """Gemini CLI's content-loop tracker (``checkContentLoop`` and what it calls).

    The source shifts every stored chunk index each time its history is cut to the last 5,000
    characters (``truncateAndUpdate``): a cost of the whole index per line once the history is
    full, minutes for a text of many short lines. Here indices are absolute in the stream since the
    last reset (``offset`` characters were cut so far) and those that fell off the front are
    dropped when their chunk is seen again, with the same counts; chunks not seen for a while are
    swept out once the index grows past a few histories' worth."""

    def __init__(self) -> None:
        self.in_code = False
        self.reset()

    def reset(self) -> None:
        self.history = ""
        self.stats: dict[str, list[int]] = {}   # chunk -> absolute start indices (offset + index in history)
        self.last = 0
        self.offset = 0

    def add(self, content: str) -> str | None:
        """Feed one chunk; returns the repeating text when a loop is detected, else None."""
        fences = content.count("```")
        divider = _DIVIDER.fullmatch(content) is not None
        if fences or _TABLE.search(content) or _LIST_ITEM.search(content) or _NUMBERED_ITEM.search(content) \
                or _HEADING.search(content) or _BLOCKQUOTE.search(content) or divider:
            self.reset()
        was_in = self.in_code
        if fences % 2:
            self.in_code = not self.in_code
        if was_in or self.in_code or divider:
            return None
        self.history += content
        if len(self.history) > _GEMINI_MAX_HISTORY_LENGTH:
            cut = len(self.history) - _GEMINI_MAX_HISTORY_LENGTH
            self.history = self.history[cut:]
            self.last = max(0, self.last - cut)
            self.offset += cut
            if len(self.stats) > 4 * _GEMINI_MAX_HISTORY_LENGTH:    # sweep chunks that fell off the front
                self.stats = {k: kept for k, v in self.stats.items() if (kept := [i for i in v if i >= self.offset])}
        size, offset = _GEMINI_CONTENT_CHUNK_SIZE, self.offset
        while self.last + size <= len(self.history):
            chunk = self.history[self.last:self.last + size]
            seen = self.stats.get(chunk)
            if seen is None:
                self.stats[chunk] = [offset + self.last]
            else:
                stale = next((k for k, i in enumerate(seen) if i >= offset), len(seen))
                if stale:
                    del seen[:stale]
                seen.append(offset + self.last)
                if len(seen) >= _GEMINI_CONTENT_LOOP_THRESHOLD:
                    recent = [i - offset for i in seen[-_GEMINI_CONTENT_LOOP_THRESHOLD:]]
                    average = (recent[-1] - recent[0]) / (_GEMINI_CONTENT_LOOP_THRESHOLD - 1)
                    periods = {self.history[recent[i]:recent[i + 1]] for i in range(len(recent) - 1)}
                    if average <= size * 5 and len(periods) <= _GEMINI_CONTENT_LOOP_THRESHOLD // 2:
                        return chunk
            self.last += 1
        return None


def _js_stringify(value: Any) -> str:
    """``JSON.stringify`` of a JSON value: keys in recorded order, no spaces."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def gemini_detections(steps: Sequence[WatchStep]) -> list[Detection]:
    """Gemini CLI's loop detection replayed over ``steps`` (module docstring). Returns
    ``kind="gemini.tool_call_loop"`` or ``"gemini.content_chanting"`` detections, ``tier=None``;
    ``evidence``: ``rule``, ``repeats``, ``signature``, ``occurrences`` (the identical calls), or
    ``chunk`` (the repeating text) for chanting."""
    out: list[Detection] = []
    last_key: str | None = None
    calls: list[WatchStep] = []
    chanting = _Chanting()
    latched = False

    def fire(position: int, step: WatchStep, rule: str, occ: list[int], **extra: Any) -> None:
        nonlocal latched
        latched = True
        out.append(Detection(position, f"gemini.{rule}", {
            "rule": rule, "step_position": step.position, "actor": step.actor, "tool": step.tool,
            "signature": step_signature(step), "occurrences": occ,
            "first_repeat_position": occ[1] if len(occ) > 1 else occ[0], **extra}, None, "gemini"))

    for s in steps:
        is_call = s.kind == "tool" or _is_action_report(s)
        text = s.model_text if is_call else str(s.arguments.get("text", "")) or s.model_text
        if not latched:
            for line in text.splitlines(keepends=True):
                chunk = chanting.add(line)
                if chunk is not None:
                    fire(s.position, s, "content_chanting", [s.position], chunk=chunk)
                    break
        if is_call and not latched:
            chanting.reset()
            key = f"{s.tool}:{_js_stringify(s.arguments)}"
            if key == last_key:
                calls.append(s)
            else:
                last_key, calls = key, [s]
            if len(calls) >= _GEMINI_TOOL_CALL_LOOP_THRESHOLD:
                fire(s.position, s, "tool_call_loop", [c.position for c in calls], repeats=len(calls))
        if s.kind == "question" and s.observation is not None:      # the user's next prompt: reset()
            latched, last_key, calls = False, None, []
            chanting = _Chanting()
    return out


#: The named baselines: name -> function(steps) -> detections.
BASELINES = {"openhands": openhands_detections, "gemini": gemini_detections}


def run_baseline(name: str, steps: Sequence[WatchStep]) -> list[Detection]:
    """The detections of the baseline ``name`` (``"openhands"`` or ``"gemini"``) over ``steps``.
    Raises :class:`~kernel_lib.errors.WatchdogConfigError` for an unknown name,
    :class:`~kernel_lib.errors.WatchInputError` for steps that are not WatchStep objects in log order."""
    fn = BASELINES.get(name) if isinstance(name, str) else None
    if fn is None:
        raise WatchdogConfigError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return fn(check_steps(steps))
