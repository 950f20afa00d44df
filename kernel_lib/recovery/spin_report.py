"""Where the anti-spin bound would have stopped a recorded repair loop (Failure Recovery, "The
anti-spin invariant": K_repair, σ = SHA-256(Normalize(type, source, signature)), the FIFO window
H_i per sub-transaction T_i).

:func:`spin_report` reads a trajectory log (our events, e.g. one produced by
:mod:`kernel_lib.importers` from another harness's file), picks out its error observations in log
order, groups them into sub-transactions, replays each group's errors through
:class:`~kernel_lib.recovery.signatures.SpinGuard` (a forward repair elected after every allowed
error, as :func:`~kernel_lib.recovery.signatures.first_stop` does) and says, per group, at which
log position the bound would have stopped repairing, and why.

**Which observations are errors** (:func:`kernel_lib.recovery.observations.is_error_text`, shared
with the watchdog). A ``ToolResult`` whose status is ``failed`` (the source marked
a tool error: tau-bench's ``Error:`` results) is one. A source that marks nothing (SWE-agent keeps
every observation as ``completed``) is read from its text: the observation is an error when
:func:`~kernel_lib.recovery.signatures.extract_signature_parts` finds a real error line in it (a
Python exception outside a numbered file listing, a shell error, an ``Error:`` line), or when it
is a short answer (at most :data:`SHORT_ANSWER_LINES` lines and :data:`SHORT_ANSWER_CHARS`
characters) whose first line uses refusal words (wrong, incorrect, invalid, failed, error, not
found, denied, refused: "Wrong flag!") and which says nothing of success ("completed
successfully, no errors" is a success). A long text with no error line (a file view, a diff) is
not an error even when the code it shows names exceptions. Multi-agent transcripts with no tool
events (Who&When) are read the same way from each agent's message (``ModelReplied``) and each
non-model message (``RuntimeInput`` order other than the user's or the system's).

**Grouping: the sub-transaction of an imported log.** Imported logs declare no sub-transaction,
so the group key stands in for T_i: *the tool (or action) name plus its target*. The target is,
in this order: an argument naming a file (``path``, ``file``, ``file_path``, ``filename``); the
first argument whose name ends in ``_id`` (tau-bench's ``user_id``, ``reservation_id``: the
entity the call acts on); for a shell-command call (``{"command": ...}``), the first word after the
tool that looks like a path (holds ``/`` or a dot-extension), else, for SWE-agent's editor
commands (``edit``, ``insert``) which act on the open file, the file recorded in the step's
``state.open_file``; else no target. For a transcript without tool events, the speaking agent is
the group. A group's *episode* is a run of its errors not interrupted by a success of the same
group: a success means the sub-transaction went through, so its repair counter k_i and window
H_i start afresh for the next failure (the chapter's bound counts *consecutive* repairs). When
the same σ comes back in a later episode of the group, the report lists it under
``recurrences``: the error did recur, but across a success, so the bound rightly did not fire.

**Positions.** Every error is reported with the log's sequence number (``seq``) and the source
file's own place (``source_path`` such as ``trajectory[7].observation``, ``traj[21]``,
``history[59]``, and ``source_index``, the number in its first brackets: the trajectory step or
message index).

Pure: no I/O. Raises :class:`~kernel_lib.errors.RecoveryPolicyError` for a bad K_repair or window.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernel_lib.recovery.observations import SHORT_ANSWER_CHARS, SHORT_ANSWER_LINES, is_error_text
from kernel_lib.recovery.signatures import (
    K_REPAIR_DEFAULT, WINDOW_DEFAULT, SpinGuard, check_k_repair, error_signature, extract_signature_parts, normalize,
)
from kernel_lib.recovery.taxonomy import classify_error

__all__ = ["SHORT_ANSWER_LINES", "SHORT_ANSWER_CHARS", "ErrorObservation", "SpinStop", "SpinGroup",
           "SpinReport", "is_error_text", "error_observations", "spin_report"]

_PATH_ARG_KEYS = ("path", "file", "file_path", "filename")
_OPEN_FILE_TOOLS = frozenset({"edit", "insert"})
_PATHISH = re.compile(r"^[\w./~-]*(?:/[\w.-]+|\.[A-Za-z]\w{0,5})$")
_INDEX = re.compile(r"\[(\d+)\]")
_SILENT_ROLES = frozenset({"user", "human", "system"})


@dataclass(frozen=True)
class ErrorObservation:
    """One error observation of the log. ``seq``: the event's sequence number; ``source_path`` /
    ``source_index``: its place in the source file (None when the log is our own); ``group``: the
    stand-in for T_i; ``episode``: 1-based episode of the group; ``iteration``: 1-based place in
    that episode; ``sigma`` and the normalized (type, source, signature); ``error_class``, ``rule``:
    gate 1's reading; ``excerpt``: the first 160 characters of the normalized message."""
    seq: int
    source_path: str | None
    source_index: int | None
    group: str
    episode: int
    iteration: int
    sigma: str
    normalized: tuple[str, str, str]
    error_class: str
    rule: str
    excerpt: str

    def position(self) -> dict[str, Any]:
        return {"seq": self.seq, "source_path": self.source_path, "source_index": self.source_index,
                "iteration": self.iteration}

    def as_dict(self) -> dict[str, Any]:
        return {**self.position(), "group": self.group, "episode": self.episode, "sigma": self.sigma,
                "type": self.normalized[0], "source": self.normalized[1], "error_class": self.error_class,
                "rule": self.rule, "excerpt": self.excerpt}


@dataclass(frozen=True)
class SpinStop:
    """Where the bound stops one episode: ``at`` (the error it refuses to repair), ``reason``
    (``repeated_signature`` or ``repair_budget_exhausted``), ``matched`` (with a repeat, the earlier
    error of equal σ), ``repairs_done`` (k_i before ``at``) and ``k_repair``."""
    at: ErrorObservation
    reason: str
    matched: ErrorObservation | None
    repairs_done: int
    k_repair: int

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.at.group, "episode": self.at.episode, "reason": self.reason,
                **{k: v for k, v in self.at.position().items()}, "error_class": self.at.error_class,
                "rule": self.at.rule, "sigma": self.at.sigma, "excerpt": self.at.excerpt,
                "matched": self.matched.position() if self.matched else None,
                "repairs_done": self.repairs_done, "k_repair": self.k_repair}


@dataclass(frozen=True)
class SpinGroup:
    """One episode of one group: its errors in log order and the stop (None: the bound never fired)."""
    group: str
    episode: int
    errors: tuple[ErrorObservation, ...]
    stop: SpinStop | None

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "episode": self.episode, "errors": [e.as_dict() for e in self.errors],
                "stop": self.stop.as_dict() if self.stop else None}


@dataclass(frozen=True)
class SpinReport:
    """The whole log's report: ``groups`` (episodes in order of their first error), ``stops``
    (the stopping episodes' stops), ``recurrences`` (σ seen again in a later episode of the same
    group), ``k_repair``, ``window`` and ``errors`` (count)."""
    k_repair: int
    window: int
    groups: tuple[SpinGroup, ...]
    recurrences: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def stops(self) -> tuple[SpinStop, ...]:
        return tuple(g.stop for g in self.groups if g.stop is not None)

    @property
    def errors(self) -> int:
        return sum(len(g.errors) for g in self.groups)

    def as_dict(self) -> dict[str, Any]:
        return {"k_repair": self.k_repair, "window": self.window, "errors": self.errors,
                "episodes": len(self.groups), "stops": [s.as_dict() for s in self.stops],
                "recurrences": list(self.recurrences), "groups": [g.as_dict() for g in self.groups]}


# --- reading the events ---------------------------------------------------------------------------


def _source_place(path: Any) -> tuple[str | None, int | None]:
    if not isinstance(path, str) or not path:
        return None, None
    m = _INDEX.search(path)
    return path, int(m.group(1)) if m else None


def _open_file(outcome: Mapping[str, Any]) -> str | None:
    state = outcome.get("state")
    if isinstance(state, str):
        try:
            state = json.loads(state)
        except ValueError:
            return None
    f = state.get("open_file") if isinstance(state, Mapping) else None
    if isinstance(f, str) and f.strip() and f.strip().lower() not in ("n/a", "none"):
        return f.strip().replace("\\", "/").rsplit("/", 1)[-1]
    return None


def _target(tool: str, arguments: Mapping[str, Any], outcome: Mapping[str, Any]) -> str | None:
    for k in _PATH_ARG_KEYS:
        if isinstance(arguments.get(k), str) and arguments[k].strip():
            return arguments[k].strip()
    for k, v in arguments.items():
        if k.endswith("_id") and isinstance(v, (str, int)) and not isinstance(v, bool):
            return f"{k}={v}"
    cmd = arguments.get("command")
    if isinstance(cmd, str):
        words = cmd.strip().splitlines()[0].split() if cmd.strip() else []
        for w in words[1:]:
            if _PATHISH.match(w.strip("'\"")):
                return w.strip("'\"")
        if tool in _OPEN_FILE_TOOLS:
            return _open_file(outcome)
    return None


def _candidates(events: Iterable[Any]) -> list[tuple[int, str | None, str, str, bool]]:
    """(seq, source path, group, text, is_error) of every observation that can be judged."""
    intents: dict[str, tuple[str, Mapping[str, Any]]] = {}
    out = []
    for e in events:
        p, seq = e.payload, e.sequence_number
        if e.event_type == "ToolIntent":
            intents[p.operation_id] = (p.tool, p.arguments if isinstance(p.arguments, Mapping) else {})
        elif e.event_type == "ToolResult":
            outcome = p.outcome if isinstance(p.outcome, Mapping) else {}
            text = outcome.get("observation")
            text = text if isinstance(text, str) else json.dumps(outcome, sort_keys=True, default=str)
            tool, args = intents.get(p.operation_id, (str(outcome.get("tool") or p.operation_id), {}))
            target = _target(tool, args, outcome)
            group = f"{tool} {target}" if target else tool
            failed = p.status == "failed" or is_error_text(text)
            out.append((seq, (p.evidence or {}).get("source_path"), group, text, failed))
        elif e.event_type == "ModelReplied":
            prop = p.proposal if isinstance(p.proposal, Mapping) else {}
            agent = prop.get("agent")
            if isinstance(agent, str) and isinstance(p.reply, str):      # a transcript turn (Who&When)
                m = re.search(r"(\d+)$", p.invocation_id)
                where = f"history[{int(m.group(1))}]" if m else None
                out.append((seq, where, agent, p.reply, is_error_text(p.reply)))
        elif e.event_type == "RuntimeInput" and p.kind == "order" and isinstance(p.value, Mapping):
            v = p.value
            role = str(v.get("role", ""))
            if role.lower() in _SILENT_ROLES or not isinstance(v.get("content"), str):
                continue
            who = v.get("name") if isinstance(v.get("name"), str) else role
            out.append((seq, v.get("source_path"), who, v["content"], is_error_text(v["content"])))
    return out


def error_observations(events: Sequence[Any]) -> list[tuple[int, str | None, str, str, bool]]:
    """Every observation the report judges, in log order: ``(seq, source_path, group, text,
    is_error)`` (see the module docstring for what counts and how groups are formed)."""
    return _candidates(events)


# --- the replay -------------------------------------------------------------------------------------


def _observation(seq: int, where: str | None, group: str, episode: int, iteration: int, text: str) -> ErrorObservation:
    parts = extract_signature_parts(text)
    norm = tuple(normalize(*parts).split("\n"))
    cls = classify_error(text)
    path, index = _source_place(where)
    return ErrorObservation(seq, path, index, group, episode, iteration, error_signature(*parts),
                            norm, cls.error_class, cls.rule, norm[2][:160])  # type: ignore[arg-type]


def _replay(group: str, episode: int, errors: list[ErrorObservation], k_repair: int, window: int) -> SpinStop | None:
    guard = SpinGuard(k_repair, window)
    for e in errors:
        v = guard.verdict(group, e.sigma)
        if not v.allowed:
            matched = errors[v.matched_iteration - 1] if v.matched_iteration else None
            return SpinStop(e, v.reason, matched, v.repairs_done, k_repair)
        guard = guard.observe(group, e.sigma, repaired=True)
    return None


def spin_report(events: Sequence[Any], *, k_repair: int = K_REPAIR_DEFAULT, window: int = WINDOW_DEFAULT) -> SpinReport:
    """The anti-spin report of one log.

    ``events``: the log's :class:`~kernel_lib.core.events.Event` list in sequence order;
    ``k_repair``: K_repair (1..3); ``window``: signatures kept per sub-transaction (≥ 1).
    Returns a :class:`SpinReport` (every episode, its errors and where the bound stops it).
    Raises :class:`~kernel_lib.errors.RecoveryPolicyError` for a bad ``k_repair`` or ``window``."""
    check_k_repair(k_repair, window)
    open_eps: dict[str, list[ErrorObservation]] = {}
    episodes: dict[str, int] = {}
    closed: list[tuple[str, int, list[ErrorObservation]]] = []
    for seq, where, group, text, failed in _candidates(events):
        if not failed:
            if open_eps.get(group):
                closed.append((group, episodes[group], open_eps.pop(group)))
            continue
        if not open_eps.get(group):
            episodes[group] = episodes.get(group, 0) + 1
            open_eps[group] = []
        errs = open_eps[group]
        errs.append(_observation(seq, where, group, episodes[group], len(errs) + 1, text))
    closed.extend((g, episodes[g], errs) for g, errs in open_eps.items() if errs)
    closed.sort(key=lambda t: t[2][0].seq)
    groups = tuple(SpinGroup(g, ep, tuple(errs), _replay(g, ep, errs, k_repair, window)) for g, ep, errs in closed)
    return SpinReport(k_repair, window, groups, _recurrences(groups))


def _recurrences(groups: tuple[SpinGroup, ...]) -> tuple[dict[str, Any], ...]:
    seen: dict[tuple[str, str], ErrorObservation] = {}
    out = []
    for g in groups:
        for e in g.errors:
            first = seen.get((g.group, e.sigma))
            if first is not None and first.episode != e.episode:
                out.append({"group": g.group, "sigma": e.sigma, "first": {**first.position(), "episode": first.episode},
                            "again": {**e.position(), "episode": e.episode}, "excerpt": e.excerpt})
            seen.setdefault((g.group, e.sigma), e)
    return tuple(out)
