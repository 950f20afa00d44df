"""Shared machinery of the trajectory importers: reading a source file, the typed error, the
vocabulary of what a source lacks, and the builder that turns mapped records into events.

Everything here is deterministic: it reads no clock, draws no random number, and derives every
identifier from the file's bytes and from positions inside the file. The design is described in
:mod:`kernel_lib.importers`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785
from pydantic import ValidationError

from kernel_lib.errors import ImportFormatError
from kernel_lib.core.events import (
    JSON_MAX_DEPTH,
    JSON_SAFE_MAX,
    REDUCER_VERSION,
    BudgetSettled,
    ContextBuilt,
    ControlChanged,
    Event,
    ModelReplied,
    Payload,
    Provenance,
    RuntimeInput,
    TaskStarted,
    ToolIntent,
    ToolResult,
    redact_secrets,
)
from kernel_lib.core.events import NOT_RECORDED  # noqa: F401  (the importers' sentinel, re-exported)
from kernel_lib.log.trajectory import default_event_id


#: Version of the mapping these importers apply; stamped in the ``import:source`` RuntimeInput.
IMPORTER_VERSION = 1

#: Transport attempt id given to the single attempt a source records per tool call.
SOURCE_ATTEMPT = "attempt1"

#: Every ``lacks`` entry an importer may report, with what it means for the imported record.
LACKS: dict[str, str] = {
    "intent-before-dispatch": "no durable intent was written before a tool call left the agent; the "
                              "ToolIntent events are reconstructed from the recorded call, after the fact",
    "authorization": "no authorization decision or capability grant is recorded (grant_id and "
                     "authorization_ref hold the not-recorded sentinel; no Authorized events)",
    "budget-reservation": "no reservation bound was held for any call (reservation_ref holds the sentinel; "
                          "no BudgetReserved events, so the record holds no reservation)",
    "budget": "no spending ceiling is recorded; TaskStarted.budget_ceiling_usd is 0",
    "owner-epoch": "no ownership grants or fencing: every event carries owner_epoch 0",
    "control-epoch": "no pause/cancel fence: every event carries control_epoch 0",
    "clock": "no wall-clock timestamps for turns or calls",
    "wire-request": "the exact request bytes (tokenisation, tool schemas, decoding parameters, history "
                    "processing) are not recorded; delivered_input holds the messages the source shows",
    "delivered-input": "for some model turns the source does not show what the model received "
                       "(delivered_input_ref is the sentinel; see notes)",
    "model-provenance": "the model name / version is not recorded (ContextBuilt.model is the sentinel)",
    "cost": "the agent's spending is not recorded (no BudgetSettled)",
    "per-turn-usage": "token counts per model turn are not recorded (ModelReplied tokens are 0)",
    "tool-calls": "the source records no structured tool calls or observations; agent messages are "
                  "imported as model turns and other messages as inputs",
    "tool-descriptions": "the tool schemas offered to the model are not recorded",
    "terminal-state": "how the run ended is not recorded (no final ControlChanged)",
    "requester": "who asked for the task is not recorded (TaskStarted.requester is the sentinel)",
    "objective": "the task's objective is not recorded (TaskStarted.objective is empty)",
}

#: ``lacks`` entries that hold for every imported trajectory: the schema-level facts no external
#: agent log records.
ALWAYS_LACKS = ("intent-before-dispatch", "authorization", "budget-reservation", "owner-epoch", "control-epoch",
                "clock", "wire-request")


@dataclass(frozen=True)
class ImportResult:
    """One imported trajectory.

    ``events``: the log, sequence numbers 1..N, ready for :func:`kernel_lib.core.record.fold`.
    ``source``: ``{format, file, sha256, size_bytes}`` of the file read.
    ``lacks``: sorted keys of :data:`LACKS` that this source does not record.
    ``notes``: what the source recorded that no event carries (labels, scores, configuration,
    redactions, warnings), as plain JSON data; the same notes are in the ``import:source``
    RuntimeInput.
    """

    events: list[Event]
    trajectory_id: str
    source: dict[str, Any]
    lacks: list[str]
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        """Events by role: ``events``, ``model_turns`` (ContextBuilt), ``tool_calls`` (ToolIntent),
        ``tool_results`` (ToolResult), ``inputs`` (RuntimeInput other than ``import:source``)."""
        by: dict[str, int] = {}
        for e in self.events:
            by[e.event_type] = by.get(e.event_type, 0) + 1
        inputs = sum(1 for e in self.events if e.event_type == "RuntimeInput" and e.payload.name != "import:source")
        return {"events": len(self.events), "model_turns": by.get("ContextBuilt", 0),
                "tool_calls": by.get("ToolIntent", 0), "tool_results": by.get("ToolResult", 0), "inputs": inputs}

    def to_jsonl(self) -> bytes:
        """The events as JSON lines with their digests (:func:`kernel_lib.log.files.encode_jsonl`):
        what ``python -m kernel_lib fold --log`` reads and verifies."""
        from kernel_lib.log.files import encode_jsonl
        return encode_jsonl(self.events)

    def summary(self) -> dict[str, Any]:
        """JSON summary: trajectory id, source, counts, lacks (the notes are left out)."""
        return {"trajectory_id": self.trajectory_id, "source": self.source, "counts": self.counts,
                "lacks": self.lacks}


# ------------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------------


#: Deepest nesting a value taken from a source may have inside an event (``_safe_numbers`` enforces it).
VALUE_MAX_DEPTH = JSON_MAX_DEPTH - 8
#: Levels a ModelReplied proposal adds above a call's arguments: ``tool_calls`` / ``[k]`` / ``arguments``.
ARGUMENTS_HEADROOM = 3


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def read_json(path: str | Path) -> tuple[Any, bytes]:
    """The parsed JSON document at ``path`` and its raw bytes.

    Raises:
        ImportFormatError: missing or unreadable file, a directory, an empty file, bytes that are
            not UTF-8, text that is not JSON (``where`` gives line and column), or NaN/Infinity.
    """
    p = Path(path)
    if not p.exists():
        raise ImportFormatError("no such file", path=path)
    if p.is_dir():
        raise ImportFormatError("is a directory; give one trajectory file", path=path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ImportFormatError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if not raw.strip():
        raise ImportFormatError("empty file", path=path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"not UTF-8 text (byte {exc.start})", path=path, where=f"byte {exc.start}") from None
    try:
        return json.loads(text, parse_constant=_reject_constant), raw
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"not JSON: {exc.msg}", path=path,
                                where=f"line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:   # NaN / Infinity
        raise ImportFormatError(f"not JSON: {exc}", path=path) from None
    except RecursionError:
        raise ImportFormatError("not JSON this reader can hold: nested too deeply", path=path) from None


_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


def trajectory_id_for(fmt: str, path: str | Path, sha256: str) -> str:
    """``import-<format>-<file stem>-<first 12 hex of the file's sha256>``: the same bytes under
    the same name always give the same id; a changed file gives a new one."""
    stem = _SAFE_ID.sub("_", Path(path).stem).strip("_") or "file"
    return f"import-{fmt}-{stem[:80]}-{sha256[:12]}"


# ------------------------------------------------------------------------------------------------
# small typed readers: each raises ImportFormatError naming the place
# ------------------------------------------------------------------------------------------------

_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
               bool: "true/false", type(None): "null"}


def type_name(value: Any) -> str:
    """'an object', 'a list', ... for error messages."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def join(where: str, key: str | int) -> str:
    """JSON path of ``key`` under ``where``: ``join('traj[3]', 'content')`` → ``traj[3].content``."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    return key if where == "$" else f"{where}.{key}"


def _name_text(name: str) -> str:
    """A file name as valid text: bytes that are not UTF-8 become ``\\xNN`` escapes."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


class Source:
    """A parsed source file and the typed accessors its reader uses."""

    def __init__(self, fmt: str, path: str | Path):
        self.fmt = fmt
        self.path = str(path)
        self.data, raw = read_json(path)
        self.sha256 = hashlib.sha256(raw).hexdigest()
        self.size_bytes = len(raw)
        # a file name that is not UTF-8 (os.fsdecode's lone surrogates) is kept as text with \xNN escapes
        self.file = _name_text(Path(path).name)
        self.stem = _name_text(Path(path).stem)

    def fail(self, where: str, message: str) -> ImportFormatError:
        return ImportFormatError(message, path=self.path, where=where)

    def expect(self, value: Any, types: type | tuple[type, ...], where: str, what: str = "") -> Any:
        """``value`` if it is of ``types`` (bool is never taken for a number), else the typed error."""
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in _as_tuple(types))
        if not ok:
            want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in _as_tuple(types))
            raise self.fail(where, f"expected {what or want}, got {type_name(value)}")
        return value

    def get(self, obj: dict[str, Any], key: str, types: type | tuple[type, ...], where: str, *,
            required: bool = False, default: Any = None) -> Any:
        """``obj[key]`` type-checked; missing (or null when null is not allowed) gives ``default``
        unless ``required``."""
        if key not in obj or (obj[key] is None and type(None) not in _as_tuple(types)):
            if required:
                raise self.fail(join(where, key), "missing")
            return default
        return self.expect(obj[key], types, join(where, key))

    def text(self, content: Any, where: str) -> str:
        """Message content as text: a string, null (empty), or a list of parts whose ``text``
        fields are concatenated (OpenAI's multi-part content)."""
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            out = []
            for i, part in enumerate(content):
                pw = join(where, i)
                if isinstance(part, str):
                    out.append(part)
                elif isinstance(part, dict):
                    t = part.get("text", "")
                    if isinstance(t, dict):   # {"type": "text", "text": {"value": ...}}
                        t = t.get("value", "")
                    out.append(self.expect(t, str, join(pw, "text")))
                else:
                    raise self.fail(pw, f"expected a content part (object or string), got {type_name(part)}")
            return "".join(out)
        raise self.fail(where, f"expected message content as a string, a list of parts or null, got "
                               f"{type_name(content)}")

    def check_value(self, value: Any, where: str, *, headroom: int = 0) -> Any:
        """``value`` unchanged, after checking it at its real place ``where`` in the source file: no
        NaN or infinity inside, and nesting that leaves ``headroom`` levels for the event that will
        wrap it (the schema's limit is :data:`VALUE_MAX_DEPTH`). Without this check a value the
        schema refuses would be blamed on the event's place rather than the file's."""
        limit = VALUE_MAX_DEPTH - headroom
        stack: list[tuple[Any, str, int]] = [(value, where, 0)]
        while stack:
            v, w, depth = stack.pop()
            if depth > limit:
                raise self.fail(w, f"nested deeper than {limit} levels")
            if isinstance(v, float) and math.isnan(v):   # (an overlong number such as 1e400 is stored as text later)
                raise self.fail(w, "NaN is not a JSON number")
            if isinstance(v, (list, dict)):
                items = enumerate(v) if isinstance(v, list) else ((str(k), x) for k, x in v.items())
                stack.extend((x, join(w, k), depth + 1) for k, x in items)
        return value

    def arguments(self, raw: Any, where: str) -> dict[str, Any]:
        """Tool call arguments: a JSON object, or a string holding one (OpenAI's encoding), checked at
        ``where`` (nesting leaves room for the proposal's ``tool_calls[k].arguments`` wrapping)."""
        if raw is None or raw == "":
            return {}
        if isinstance(raw, str):
            try:
                raw = json.loads(raw, parse_constant=_reject_constant)
            except (ValueError, RecursionError) as exc:
                msg = f"{exc.msg} (character {exc.pos})" if isinstance(exc, json.JSONDecodeError) else str(exc)
                raise self.fail(where, f"tool call arguments are not valid JSON: {msg}") from None
        if not isinstance(raw, dict):
            raise self.fail(where, f"tool call arguments must be a JSON object, got {type_name(raw)}")
        return self.check_value(raw, where, headroom=ARGUMENTS_HEADROOM)

    def source_info(self) -> dict[str, Any]:
        return {"format": self.fmt, "file": self.file, "sha256": self.sha256, "size_bytes": self.size_bytes}


def _as_tuple(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


# ------------------------------------------------------------------------------------------------
# values the event schema accepts
# ------------------------------------------------------------------------------------------------


def canonical_text(value: Any) -> str:
    """RFC 8785 text of JSON ``value`` (the form a delivered-input manifest is stored in)."""
    return rfc8785.dumps(value).decode("utf-8")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def proposal_call(operation_id: str, tool: str, arguments: dict[str, Any],
                  source_call_id: str | None) -> dict[str, Any]:
    """One entry of a ModelReplied proposal's ``tool_calls`` list."""
    d: dict[str, Any] = {"operation_id": operation_id, "tool": tool, "arguments": arguments}
    if source_call_id:
        d["source_call_id"] = source_call_id
    return d


def call_id(position: int, k: int) -> str:
    """Operation id of the ``k``-th tool call proposed at source position ``position``:
    ``call-0007`` for the first, ``call-0007.1`` for a second in the same turn."""
    return f"call-{position:04d}" if k == 0 else f"call-{position:04d}.{k}"


def turn_id(position: int) -> str:
    """Invocation id of the model turn at source position ``position``: ``turn-0007``."""
    return f"turn-{position:04d}"


# ------------------------------------------------------------------------------------------------
# the builder
# ------------------------------------------------------------------------------------------------


class Builder:
    """Collects payloads in log order and stamps them into events.

    Every value taken from the source passes :meth:`clean`: numbers beyond the range canonical
    JSON keeps exactly become strings, and credential-looking text or keys are redacted (the
    event schema refuses secrets); both are listed in the notes with their source location.
    """

    def __init__(self, src: Source, provenance_issuer: str):
        self.src = src
        self.trajectory_id = trajectory_id_for(src.fmt, src.path, src.sha256)
        self.provenance = Provenance(tenant="imported", issuer=provenance_issuer)
        self.payloads: list[Payload] = []
        self.lacks: set[str] = set(ALWAYS_LACKS)
        self.notes: dict[str, Any] = {}
        self.redactions: list[str] = []
        self.converted: list[str] = []
        self.warnings: list[str] = []
        self._canon: dict[str, list[str]] = {}

    # --- values --------------------------------------------------------------------------------
    def clean(self, value: Any, where: str) -> Any:
        """``value`` made acceptable to the event schema (see class doc); raises the typed error if
        it nests deeper than the schema allows."""
        value = self._safe_numbers(value, where, 0)
        out, hits = redact_secrets(value)
        self.redactions.extend(where if h in ("", "<value>") else f"{where}{h}" if h.startswith("[")
                               else f"{where}.{h}" for h in hits)
        return out

    def _safe_numbers(self, v: Any, where: str, depth: int) -> Any:
        if depth > VALUE_MAX_DEPTH:
            raise self.src.fail(where, f"nested deeper than {VALUE_MAX_DEPTH} levels")
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, (int, float)):
            if abs(v) > JSON_SAFE_MAX:
                self.converted.append(where)
                return str(v)
            return v
        if isinstance(v, list):
            return [self._safe_numbers(x, join(where, i), depth + 1) for i, x in enumerate(v)]
        if isinstance(v, dict):
            return {str(k): self._safe_numbers(x, join(where, str(k)), depth + 1) for k, x in v.items()}
        return v

    def clean_text(self, text: str, where: str) -> str:
        """A string made acceptable to the schema (redacted where it looks like a credential)."""
        out = self.clean(text, where)
        return out if isinstance(out, str) else str(out)

    # --- payloads ------------------------------------------------------------------------------
    def add(self, cls: Callable[..., Payload], where: str, **fields: Any) -> Payload:
        """Append one payload; a value the schema still refuses becomes the typed error at ``where``."""
        try:
            p = cls(**fields)
        except (ValidationError, ValueError) as exc:
            if isinstance(exc, ValidationError):
                first = exc.errors()[0]
                loc = ".".join(str(x) for x in first.get("loc", ()))
                msg = f"{first.get('msg')}" + (f" (field {loc})" if loc else "")
            else:
                msg = str(exc)
            raise self.src.fail(where, f"cannot be represented as {getattr(cls, 'event_type', cls)}: {msg}") from None
        self.payloads.append(p)
        return p

    def context(self, position: int, where: str, *, model: str, messages: list[Any] | None,
                messages_path: str = "", extra: dict[str, Any] | None = None,
                request_config: dict[str, Any] | None = None, missing_reason: str = "") -> str:
        """ContextBuilt for the turn at ``position``. ``messages`` is what the source shows the
        model received, the first ``len(messages)`` entries of the list at JSON path
        ``messages_path``; it is stored as the canonical JSON ``{"messages": [...], **extra}``
        (redacted). None means the source does not show it: then ``delivered_input_ref`` and the
        digest field hold :data:`NOT_RECORDED` (the digest field then names no digest: compare
        such turns as unknown, never as equal) and ``missing_reason``, if given, goes to the notes."""
        inv = turn_id(position)
        cfg = dict(self.clean(request_config or {}, join(where, "request_config")))
        cfg.setdefault("source_path", where)
        if messages is None:
            self.lacks.add("delivered-input")
            if missing_reason:
                self.notes.setdefault("delivered_input_not_recorded", []).append(
                    {"invocation_id": inv, "source_path": where, "reason": missing_reason})
            self.add(ContextBuilt, where, invocation_id=inv, model=model, delivered_input=None,
                     delivered_input_ref=NOT_RECORDED, delivered_input_sha256=NOT_RECORDED, request_config=cfg)
            return inv
        text = self._manifest_text(messages, messages_path, extra or {}, where)
        try:
            p = ContextBuilt(invocation_id=inv, model=model, delivered_input=text,
                             delivered_input_sha256=sha256_text(text), request_config=cfg)
        except (ValidationError, ValueError):
            # JSON escaping can make text look like a credential that did not before: redact the
            # manifest text as a whole, hash what is stored
            text, hits = redact_secrets(text)
            if hits:
                self.redactions.append(f"{where} (delivered input text)")
            self.add(ContextBuilt, where, invocation_id=inv, model=model, delivered_input=text,
                     delivered_input_sha256=sha256_text(text), request_config=cfg)
        else:
            self.payloads.append(p)
        return inv

    def _manifest_text(self, messages: list[Any], messages_path: str, extra: dict[str, Any], where: str) -> str:
        """RFC 8785 text of ``{"messages": messages, **extra}``, built from per-message canonical
        texts that are cleaned and encoded once per import (a prefix grows by one turn at a time)."""
        cache = self._canon.setdefault(messages_path, [])
        for k in range(len(cache), len(messages)):
            cache.append(canonical_text(self.clean(messages[k], join(messages_path or "$", k))))
        fields = {"messages": "[" + ",".join(cache[:len(messages)]) + "]"}
        for key, value in extra.items():
            if not key.isascii() or key in fields:
                raise self.src.fail(where, f"unsupported delivered-input field {key!r}")
            fields[key] = canonical_text(self.clean(value, f"{where} ({key})"))
        # RFC 8785 orders members by UTF-16 code units; for ASCII keys that is plain string order
        return "{" + ",".join(f"{json.dumps(k)}:{fields[k]}" for k in sorted(fields)) + "}"

    def reply(self, inv: str, where: str, *, reply: str, proposal: dict[str, Any] | None,
              input_tokens: int = 0, output_tokens: int = 0, provider: dict[str, str] | None = None) -> None:
        self.add(ModelReplied, where, invocation_id=inv, status="complete", reply=self.clean_text(reply, where),
                 proposal=self.clean(proposal, join(where, "proposal")) if proposal is not None else None,
                 input_tokens=input_tokens, output_tokens=output_tokens,
                 provider=self.clean(provider or {}, join(where, "provider")))

    def intent(self, operation_id: str, where: str, *, tool: str, arguments: dict[str, Any]) -> None:
        """A ToolIntent reconstructed from a recorded call: repeat contract ``unsafe`` (the source
        declares none, so no re-run may be assumed safe) and the not-recorded sentinel for the
        grant, the authorization decision and the reservation."""
        self.add(ToolIntent, where, operation_id=operation_id, attempt_id=SOURCE_ATTEMPT,
                 tool=self.clean_text(tool, where) or NOT_RECORDED, arguments=self.clean(arguments, where),
                 repeat_contract="unsafe", grant_id=NOT_RECORDED, authorization_ref=NOT_RECORDED,
                 reservation_ref=NOT_RECORDED)

    def result(self, operation_id: str, where: str, *, observation: Any, failed: bool = False,
               extra: dict[str, Any] | None = None, evidence: dict[str, str] | None = None) -> None:
        """A ToolResult for the source's observation: complete (the source's observation is all
        there will ever be), ``completed`` or, when the source marks an error, ``failed``."""
        outcome = {"observation": observation, **(extra or {})}
        ev = {"source_path": where, **(evidence or {})}
        self.add(ToolResult, where, operation_id=operation_id, attempt_id=SOURCE_ATTEMPT,
                 status="failed" if failed else "completed", outcome=self.clean(outcome, where),
                 observation_complete=True, evidence={k: str(v) for k, v in self.clean(ev, where).items()},
                 source="reply")

    def message_input(self, where: str, value: dict[str, Any]) -> None:
        """A message the harness passed to the agent that no model produced (user, human, system,
        an executor's output without a recorded call): RuntimeInput ``order`` at its place."""
        self.add(RuntimeInput, where, kind="order", name=f"message:{where}",
                 value=self.clean({"source_path": where, **value}, where))

    def spend(self, where: str, *, actual_usd: float, evidence: str) -> None:
        """Recorded spending as a BudgetSettled against no reservation (the source held none)."""
        self.add(BudgetSettled, where, reservation_id=NOT_RECORDED, subject_id="model-calls:total",
                 actual_usd=actual_usd, final=True, evidence=self.clean_text(evidence, where))

    def end(self, where: str, *, to_state: str, reason: str) -> None:
        """The run's recorded end as a final ControlChanged."""
        self.add(ControlChanged, where, request_id="source-end", issuer=f"import:{self.src.fmt}",
                 to_state=to_state, reason=self.clean_text(reason, where))

    # --- finishing -----------------------------------------------------------------------------
    def finish(self, *, task_id: str, objective: str | None, requester: str | None, budget_ceiling_usd: float = 0.0,
               config: dict[str, str] | None = None, workspace_ref: str | None = None) -> ImportResult:
        """Prepend TaskStarted and the ``import:source`` RuntimeInput, stamp events 1..N."""
        if objective is None:
            self.lacks.add("objective")
        if requester is None:
            self.lacks.add("requester")
        if budget_ceiling_usd <= 0:
            self.lacks.add("budget")
        if self.redactions:
            self.notes["redacted"] = sorted(set(self.redactions))
        if self.converted:
            self.notes["numbers_stored_as_text"] = sorted(set(self.converted))
        if self.warnings:
            self.notes["warnings"] = list(self.warnings)
        lacks = sorted(self.lacks)
        notes = self.clean(self.notes, "notes")
        src = self.src.source_info()
        cfg = {"source_format": self.src.fmt, "source_file": self.src.file, "source_sha256": self.src.sha256,
               "importer_version": str(IMPORTER_VERSION)}
        cfg.update({k: str(v) for k, v in (config or {}).items()})
        head: list[Payload] = []
        try:
            head.append(TaskStarted(task_id=self.clean_text(task_id, "task_id") or NOT_RECORDED,
                                    requester=self.clean_text(requester, "requester") if requester else NOT_RECORDED,
                                    objective=self.clean_text(objective or "", "objective"),
                                    budget_ceiling_usd=max(budget_ceiling_usd, 0.0),
                                    workspace_ref=workspace_ref, config=self.clean(cfg, "config")))
            head.append(RuntimeInput(kind="config", name="import:source",
                                     value={**src, "importer_version": IMPORTER_VERSION,
                                            "reducer_version": REDUCER_VERSION,
                                            "sentinel": NOT_RECORDED, "lacks": lacks, "notes": notes}))
        except (ValidationError, ValueError) as exc:
            raise self.src.fail("$", f"task header cannot be represented: {' '.join(str(exc).split())[:500]}") from None
        events = [Event.create(trajectory_id=self.trajectory_id,
                               event_id=default_event_id(self.trajectory_id, 0, i),
                               sequence_number=i, payload=p, owner_epoch=0, control_epoch=0,
                               provenance=self.provenance)
                  for i, p in enumerate(head + self.payloads, start=1)]
        return ImportResult(events=events, trajectory_id=self.trajectory_id, source=src, lacks=lacks, notes=notes)
