"""The event envelope, the event families of table 1, canonical encoding and digests (§11.2.2).

Every event shares one envelope::

    trajectory_id, event_id, sequence_number, event_type, schema_version, reducer_version,
    owner_epoch, control_epoch, provenance {tenant, issuer}, payload

``payload`` is a typed, versioned record looked up in a registry by ``(event_type,
schema_version)``. The families of the Durable Execution chapter's table 1 are registered here,
together with the Failure Recovery chapter's records (compensation, quarantine, watchdog
interventions); later families register the same way, so adding one never changes the envelope
or the byte format of a log.

Canonical encoding is RFC 8785 (JSON Canonicalization Scheme): the same event always encodes to
the same bytes, and :attr:`Event.digest` is the SHA-256 of those bytes. Decoding re-encodes and
refuses any input that is not already canonical, so a stored digest always matches the bytes it
names.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

import ahocorasick_rs
import msgspec
import rfc8785
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator
from pydantic_core import SchemaValidator

from kernel_lib.core.canonical import canonical_json
from kernel_lib.errors import MalformedEventError, UnknownEventTypeError, UnknownSchemaVersionError
from kernel_lib.limits import JSON_DEPTH_MAX, JSON_NUMBER_MAX

#: Version of the reducer in :mod:`kernel_lib.core.record`. Stamped on every event appended by this build.
#: Sentinel an importer puts in every field the event schema requires but the source never
#: recorded (grant, authorization decision, reservation, model name, delivered input...). It names
#: no real object; a compared field holding it is missing evidence, never agreement (§11.7).
NOT_RECORDED = "not-recorded-by-source"

REDUCER_VERSION = 1

JSONValue = Any

# ------------------------------------------------------------------------------------------------
# payload records
# ------------------------------------------------------------------------------------------------

#: Largest magnitude a number in an event may have: RFC 8785 numbers are IEEE doubles, and a
#: value at or beyond 2**53 would not read back as the same JSON integer
#: (:data:`kernel_lib.limits.JSON_NUMBER_MAX`; this name is kept for the ``kernel_lib.core`` API).
JSON_SAFE_MAX = JSON_NUMBER_MAX
#: Deepest nesting of lists/objects a payload may use (:data:`kernel_lib.limits.JSON_DEPTH_MAX`).
JSON_MAX_DEPTH = JSON_DEPTH_MAX

# key names (lower-cased, letters only) that name a credential: by substring, or by ending
_SECRET_KEY_PARTS = ("apikey", "secret", "password", "passwd", "privatekey", "accesskey", "credential", "bearer",
                     "jwt", "cookie", "sessionid")
_SECRET_KEY_ENDINGS = ("authorization", "accesstoken", "authtoken", "refreshtoken", "sessiontoken", "idtoken",
                       "bearertoken", "apitoken", "oauthtoken", "githubtoken", "gitlabtoken", "slacktoken",
                       "csrftoken", "xsrftoken")
_SECRET_KEY_EXACT = ("token", "auth", "pass")
#: Credential shapes in text, as ``(literal triggers, lower-case triggers, pattern, group to redact,
#: characters that may not precede the match)``. A shape is tried only on text holding one of its
#: triggers (``in`` on the text, or on its lower-cased copy), so ordinary text costs a few substring
#: tests. A prefix shape may not start inside a word or an identifier ("task-…", "desk-…" hold no
#: "sk-…" key), and the shapes ordinary prose or code can also take ("bearer bonds", "sk-learn",
#: "pad_token = tokenizer.eos_token", "token: gpt-4o-mini") are checked further by
#: :func:`_credential_like`. The provider shapes follow the regex plugins of detect-secrets (AWS,
#: GitHub, GitLab, Slack, Stripe, OpenAI, JWT, private keys, basic-auth URLs), widened to the whole
#: key so that redaction removes all of it; a labelled shape ("Bearer …", "API_KEY=…",
#: ``user:password@``) has only its value redacted, the label stays as evidence. "Basic" counts only
#: after an ``Authorization`` header name (so "Basic Economy" is prose).
_WORD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_TEXT_SHAPES: tuple[tuple[str, tuple[str, ...], tuple[str, ...], re.Pattern[str], str | int, str], ...] = (
    ("bearer", (), ("bearer",), re.compile(r"(?i:\bbearer\s+)(?P<v>[A-Za-z0-9._~+/-]{8,}=*)"), "v", ""),
    ("basic", (), ("basic",),
     re.compile(r"(?i:\bauthorization\s*[:=]\s*[\"']?basic\s+)(?P<v>[A-Za-z0-9+/]{8,}=*)"), "v", ""),
    ("private-key", ("PRIVATE KEY",), (),
     re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*-----|$)", re.S),
     0, ""),
    ("openai", ("sk-",), (), re.compile(r"sk-(?P<v>[A-Za-z0-9_-]{20,})"), 0, _WORD + "_-"),
    ("stripe", ("k_live_", "k_test_"), (), re.compile(r"[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"), 0, _WORD + "_-"),
    ("github", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), (),
     re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"), 0, _WORD + "_-"),
    ("gitlab", ("glpat-",), (), re.compile(r"glpat-[A-Za-z0-9_-]{16,}"), 0, _WORD + "_-"),
    ("slack", ("xox",), (), re.compile(r"xox[abposre]-(?=[A-Za-z-]*[0-9])[A-Za-z0-9-]{10,}"), 0, _WORD + "_-"),
    ("google", ("AIza",), (), re.compile(r"AIza[0-9A-Za-z_-]{30,}"), 0, _WORD + "_-"),
    ("aws", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"), (),
     re.compile(r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{16}(?![A-Za-z0-9])"), 0, _WORD),
    ("jwt", ("eyJ",), (), re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), 0, _WORD + "_-"),
    ("url-userinfo", ("://",), (),
     re.compile(r"://(?P<v>[A-Za-z0-9._~%!$&'()*+,;=-]+:[A-Za-z0-9._~%!$&'()*+,;=-]+)@"), "v", ""),
    ("key-value", (), ("key", "secret", "passw", "token"),
     re.compile(r"(?i:api[_-]?key|secret(?:[_-]?key)?|password|passwd|token)[ \t]*[=:][ \t]*[\"']?"
                r"(?P<v>[A-Za-z0-9_~+/=!@$%^*-]{8,}+)(?![.(\[])"), "v", _WORD),
)
_REDACTED = "[redacted]"


def _credential_like(name: str, m: re.Match[str]) -> bool:
    """Whether a match of shape ``name`` (:data:`_TEXT_SHAPES`) is a credential rather than ordinary
    text: a bearer value holds a digit or is 20+ characters long; an ``sk-`` key holds OpenAI's
    ``T3BlbkFJ`` marker, a run of 20+ characters without ``-`` or ``_``, or 32+ characters mixing
    digits and both cases (so "sk-learn-compatible-estimators" is prose); a KEY=value value (8+
    characters on the key's line, not followed by ``.``, ``(`` or ``[``) mixes letters and digits
    and is no slug (parts joined by ``-`` or ``_`` that are each lower-case letters, digits, or at
    most 3 characters: "gpt-4o-mini", "task-0042"), so "pad_token = tokenizer.eos_token", "token =
    Keyword.Reserved", "max_token=4096", "token: max_tokens=4096" (an assignment read as the
    value: its parts split at ``=`` too) and "token: gpt-4o-mini" are ordinary while
    "password=hunter22" and "token: 5d41402a-bc4b-…" are not. The other shapes are specific
    enough as they stand."""
    if name == "bearer":
        v = m.group("v")
        return any(c.isdigit() for c in v) or len(v) >= 20
    if name == "openai":
        v = m.group("v")
        return ("T3BlbkFJ" in v or max(len(seg) for seg in re.split(r"[-_]", v)) >= 20
                or (len(v) >= 32 and any(c.isdigit() for c in v) and v.lower() != v and v.upper() != v))
    if name == "key-value":
        v = m.group("v")
        slug = all(seg.isalpha() and seg.islower() or seg.isdigit() or len(seg) <= 3 for seg in re.split(r"[-_=]", v))
        return any(c.isdigit() for c in v) and any(c.isalpha() for c in v) and not slug
    return True


#: Every literal trigger of :data:`_TEXT_SHAPES`, and every lower-case one. A text that holds none
#: of them tries no shape, so :func:`_text_secrets` answers it with one search
#: (:func:`_may_hold_secret`) instead of a pass per shape.
_ALL_TRIGGERS = tuple(sorted({t for shape in _TEXT_SHAPES for t in shape[1]}))
_ALL_LOWER_TRIGGERS = tuple(sorted({t for shape in _TEXT_SHAPES for t in shape[2]}))
#: Every trigger lower-cased, in one Aho-Corasick automaton searched over a lower-cased text (one
#: pass, instead of a substring test or a regex per trigger)
_TRIGGER_SEARCH = ahocorasick_rs.AhoCorasick(sorted({t.lower() for t in _ALL_TRIGGERS + _ALL_LOWER_TRIGGERS}),
                                             matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST)


#: The same triggers as one regular expression, for short texts. ``ahocorasick_rs`` releases the
#: GIL on every search, however short the text: in a process whose threads keep the GIL busy (a
#: fleet of trajectories on threads) each release hands the GIL to another thread and the caller
#: then waits for it back (up to the 5 ms switch interval), which costs far more than the search.
#: ``re`` keeps the GIL and is as fast on a few dozen characters (slower on long texts, which keep
#: the automaton).
_TRIGGER_RE = re.compile("|".join(re.escape(t) for t in sorted(
    {t.lower() for t in _ALL_TRIGGERS + _ALL_LOWER_TRIGGERS}, key=lambda t: (-len(t), t))))
#: texts up to this many characters are searched with :data:`_TRIGGER_RE`, longer ones with the automaton
_SHORT_TEXT_CHARS_MAX = 96


def _may_hold_secret(text: str) -> bool:
    """False only if ``text`` holds no trigger of any shape, so :func:`_text_secrets` finds nothing
    in it (each shape is tried only on a text holding one of its triggers).

    One search of ``text.lower()`` for every trigger lower-cased (:data:`_TRIGGER_RE` up to
    :data:`_SHORT_TEXT_CHARS_MAX` characters, the automaton above: the same answer, tested, without
    a GIL release for a short text). It misses no trigger: a literal
    trigger is ASCII and each ASCII character lower-cases to one ASCII character, so where
    ``text`` holds the trigger ``text.lower()`` holds it lower-cased; a lower-case trigger is
    looked for in ``text.lower()`` by its shape too. It may answer True where no shape's own test
    would (``SK-``, ``Asia``), and for a text holding a lone surrogate (not UTF-8, which the
    search needs): then the shapes decide."""
    lower = text.lower()
    if len(lower) <= _SHORT_TEXT_CHARS_MAX:
        return _TRIGGER_RE.search(lower) is not None
    try:
        return bool(_TRIGGER_SEARCH.find_matches_as_indexes(lower))
    except UnicodeEncodeError:
        return True


def _text_secrets(text: str) -> list[tuple[int, int]]:
    """Spans of ``text`` to redact (sorted, not overlapping): the secret part of each
    credential-like match of :data:`_TEXT_SHAPES`."""
    if not _may_hold_secret(text):
        return []
    lower: str | None = None
    spans: list[tuple[int, int]] = []
    for name, triggers, lower_triggers, pattern, group, not_before in _TEXT_SHAPES:
        if not any(t in text for t in triggers):
            if not lower_triggers:
                continue
            lower = text.lower() if lower is None else lower
            if not any(t in lower for t in lower_triggers):
                continue
        at = 0
        while (m := pattern.search(text, at)) is not None:
            if (not (not_before and m.start() and text[m.start() - 1] in not_before)
                    and _credential_like(name, m)):
                spans.append(m.span(group))
                at = m.end()
            else:                 # ordinary text: a credential may still start inside it
                at = m.start() + 1
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def _redact_text(text: str, spans: list[tuple[int, int]]) -> str:
    parts, at = [], 0
    for a, b in spans:
        parts += [text[at:a], _REDACTED]
        at = b
    return "".join(parts) + text[at:]


def _secret_key(k: str) -> bool:
    n = re.sub(r"[^a-z]", "", k.lower())
    return (any(p in n for p in _SECRET_KEY_PARTS) or n.endswith(_SECRET_KEY_ENDINGS) or n in _SECRET_KEY_EXACT
            or bool(_text_secrets(k)))


def _walk_secrets(value: Any, path: str, hits: list[str], redact: bool, depth: int = 0) -> Any:
    if depth > JSON_MAX_DEPTH:
        raise ValueError(f"{path or 'value'}: nested deeper than {JSON_MAX_DEPTH} levels")
    if isinstance(value, dict):
        out = {}
        for i, (k, v) in enumerate(value.items()):
            p = f"{path}.{k}" if path else str(k)
            if isinstance(k, str) and _text_secrets(k):   # the key itself is a credential
                hits.append(f"{path}.<key {i}>" if path else f"<key {i}>")
                out[f"{_REDACTED}#{i}" if redact else k] = _walk_secrets(v, p, hits, redact, depth + 1)
            elif (isinstance(k, str) and _secret_key(k) and v not in (None, "", [], {}) and v != _REDACTED
                  and not isinstance(v, bool)):          # a flag ("cookies_accepted": true) holds no secret
                hits.append(p)
                out[k] = _REDACTED if redact else v
            else:
                out[k] = _walk_secrets(v, p, hits, redact, depth + 1)
        return out
    if isinstance(value, list):
        return [_walk_secrets(v, f"{path}[{i}]", hits, redact, depth + 1) for i, v in enumerate(value)]
    if isinstance(value, str):
        spans = _text_secrets(value)
        if spans:
            hits.append(path or "<value>")
            return _redact_text(value, spans) if redact else value
    return value


def find_secrets(value: Any) -> list[str]:
    """Paths of every field in JSON-like ``value`` that looks like a credential (by key or text)."""
    hits: list[str] = []
    _walk_secrets(value, "", hits, False)
    return hits


def redact_secrets(value: Any) -> tuple[Any, list[str]]:
    """A copy of JSON-like ``value`` with credential-looking fields, text and keys replaced by
    ``[redacted]`` (nothing derived from the secret is kept), and the paths redacted. Used for
    *evidence* (tool outcomes, model replies), which the runtime does not control: the evidence is
    kept, the secret is not."""
    hits: list[str] = []
    return _walk_secrets(value, "", hits, True), hits


def check_json(value: Any, path: str = "payload", depth: int = 0) -> None:
    """Raise ValueError unless ``value`` is plain JSON data that encodes canonically and reads
    back identically: None, bool, int or finite float with magnitude ≤ :data:`JSON_SAFE_MAX`,
    UTF-8-encodable str, list, or dict with str keys; at most :data:`JSON_MAX_DEPTH` levels."""
    if depth > JSON_MAX_DEPTH:
        raise ValueError(f"{path}: nested deeper than {JSON_MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) > JSON_SAFE_MAX:
            raise ValueError(f"{path}: {value} is outside ±(2**53 - 1), the range that survives canonical JSON; "
                             "store it as a string")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value} is not a finite number (JSON has no NaN or infinity)")
        if abs(value) > JSON_SAFE_MAX:
            raise ValueError(f"{path}: {value} is outside ±(2**53 - 1), the range that survives canonical JSON; "
                             "store it as a string")
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{path}: text holds a lone surrogate and is not valid UTF-8") from None
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            check_json(v, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{path}: key {k!r} is not a string")
            check_json(k, f"{path} key", depth + 1)
            check_json(v, f"{path}.{k}", depth + 1)
        return
    if isinstance(value, BaseModel):
        return
    raise ValueError(f"{path}: {type(value).__name__} is not JSON data (use lists, dicts with str keys, "
                     "str, numbers, bool, None)")


class Payload(BaseModel):
    """Base of every payload record. Subclasses set ``event_type`` and ``schema_version``.

    Payloads are frozen, reject unknown fields, and refuse anything that looks like a credential:
    an event references a capability grant by id (§11.3, definition 11.2); the secret stays with
    the credential broker.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_type: ClassVar[str]
    schema_version: ClassVar[int]

    @model_validator(mode="before")
    @classmethod
    def _plain_json(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and info.context is not _PRECHECKED:
            check_json(data, cls.event_type)
        return data

    @model_validator(mode="after")
    def _no_secrets(self, info: ValidationInfo) -> "Payload":
        if info.context is _PRECHECKED:   # the input was shown clean by _clean_stored_json (decode_stored)
            return self
        # the record's own field names are the schema's, not data: scan their values only
        hits = [h for v in self.model_dump(mode="json").values() for h in find_secrets(v)]
        if hits:
            raise ValueError(
                f"field {hits[0]!r} looks like a credential; events reference a capability grant "
                "(grant_id) and never hold a secret (evidence can be passed through redact_secrets)"
            )
        return self


_REGISTRY: dict[tuple[str, int], type[Payload]] = {}


def register(cls: type[Payload]) -> type[Payload]:
    """Class decorator: register a payload record under ``(event_type, schema_version)``.

    Raises ValueError if that pair is already registered to another class.
    """
    key = (cls.event_type, cls.schema_version)
    if key in _REGISTRY and _REGISTRY[key] is not cls:
        raise ValueError(f"event {key} is already registered to {_REGISTRY[key].__name__}")
    _REGISTRY[key] = cls
    return cls


def registered_types() -> dict[str, list[int]]:
    """Map each registered event type to its known schema versions (sorted)."""
    out: dict[str, list[int]] = {}
    for t, v in _REGISTRY:
        out.setdefault(t, []).append(v)
    return {t: sorted(vs) for t, vs in sorted(out.items())}


def payload_class(event_type: str, schema_version: int, *, event_id: str | None = None) -> type[Payload]:
    """Look up the payload record for a type and version.

    Raises:
        UnknownEventTypeError: no version of ``event_type`` is registered.
        UnknownSchemaVersionError: the type is known but not this version.
    """
    cls = _REGISTRY.get((event_type, schema_version))
    if cls is not None:
        return cls
    known = registered_types()
    if event_type not in known:
        raise UnknownEventTypeError(f"unknown event type {event_type!r}", event_id=event_id, event_type=event_type)
    raise UnknownSchemaVersionError(
        f"unknown schema version {schema_version} of {event_type} (known: {known[event_type]})",
        event_id=event_id, event_type=event_type,
    )


NonNeg = Field(ge=0)

# --- Table 1, row 1: task -----------------------------------------------------------------------


@register
class TaskStarted(Payload):
    """Task and requester, initial grants and limits, deadlines, initial references, config."""
    event_type: ClassVar[str] = "TaskStarted"
    schema_version: ClassVar[int] = 1
    task_id: str
    requester: str
    objective: str
    grant_ids: list[str] = []
    budget_ceiling_usd: float = Field(ge=0)
    finalization_reserve_usd: float = Field(default=0.0, ge=0)
    deadline_unix_s: float | None = None
    finalization_deadline_unix_s: float | None = None
    initial_record_ref: str | None = None
    workspace_ref: str | None = None
    config: dict[str, str] = {}

    @model_validator(mode="after")
    def _reserve_fits(self) -> "TaskStarted":
        if self.finalization_reserve_usd > self.budget_ceiling_usd:
            raise ValueError("finalization_reserve_usd exceeds budget_ceiling_usd")
        return self


# --- model calls ---------------------------------------------------------------------------------


@register
class ContextBuilt(Payload):
    """The immutable delivered input of one model invocation, and how it was assembled."""
    event_type: ClassVar[str] = "ContextBuilt"
    schema_version: ClassVar[int] = 1
    invocation_id: str
    model: str
    delivered_input: str | None = None
    delivered_input_ref: str | None = None
    delivered_input_sha256: str
    request_config: dict[str, JSONValue] = {}

    @model_validator(mode="after")
    def _input_present(self) -> "ContextBuilt":
        if self.delivered_input is None and self.delivered_input_ref is None:
            raise ValueError("ContextBuilt needs delivered_input or delivered_input_ref")
        if self.delivered_input is not None:
            digest = hashlib.sha256(self.delivered_input.encode()).hexdigest()
            if digest != self.delivered_input_sha256:
                raise ValueError("delivered_input_sha256 does not match delivered_input")
        return self


@register
class ModelReplied(Payload):
    """What came back from one invocation: status, reply, usage, provider provenance."""
    event_type: ClassVar[str] = "ModelReplied"
    schema_version: ClassVar[int] = 1
    invocation_id: str
    status: Literal["complete", "partial", "error"]
    reply: str = ""
    proposal: dict[str, JSONValue] | None = None
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    provider: dict[str, str] = {}


# --- admission and accounting ------------------------------------------------------------------


@register
class Authorized(Payload):
    """An authorization decision for one operation or invocation under a policy version."""
    event_type: ClassVar[str] = "Authorized"
    schema_version: ClassVar[int] = 1
    decision_id: str
    subject_id: str
    subject_kind: Literal["tool", "model"]
    policy_version: str
    grant_id: str
    decision: Literal["allow", "deny"]
    reason: str = ""


@register
class BudgetReserved(Payload):
    """A reservation bound held against the budget for one operation or invocation."""
    event_type: ClassVar[str] = "BudgetReserved"
    schema_version: ClassVar[int] = 1
    reservation_id: str
    subject_id: str
    amount_usd: float = Field(ge=0)
    policy_version: str = "v1"


@register
class BudgetSettled(Payload):
    """Usage evidence against a reservation.

    ``actual_usd`` is the verified consumption this settlement reports. If ``final`` is true the
    rest of the reservation is released; otherwise the unverified remainder stays reserved as
    liability (§11.5.3: missing usage is never released as unspent budget).
    """
    event_type: ClassVar[str] = "BudgetSettled"
    schema_version: ClassVar[int] = 1
    reservation_id: str
    subject_id: str
    actual_usd: float = Field(ge=0)
    final: bool
    evidence: str = ""


# --- tool operations -----------------------------------------------------------------------------


@register
class ToolIntent(Payload):
    """The durable intent of one transport attempt of a logical operation (definition 11.2).

    Schema 2 adds ``idempotency_key``: the key the transport hands to the endpoint with this
    attempt (an ``Idempotency-Key`` header, a body field), the same for every attempt of one
    logical operation (:func:`kernel_lib.core.proposals.idempotency_key` derives it from the
    trajectory and operation ids, §11.3.3). None: no key was sent (an intent reconstructed by an
    importer, or built outside the gate). Schema 1 logs read as :class:`ToolIntentV1`.

    Schema 3 adds ``status_lookup``: the endpoint declared that it answers a status query by this
    operation's identity (reconciliation, §11.5.3). True tells a reader of the log that the
    attempt's evidence was acknowledged at the write tier and made durable by the log's next
    barrier (one durable barrier per step): if a host crash lost it, the attempt is in doubt and
    reconciliation asks the endpoint. False (the default, and every older intent): the evidence
    was acknowledged at the trajectory's own tier. Schema 2 logs read as :class:`ToolIntentV2`.
    """
    event_type: ClassVar[str] = "ToolIntent"
    schema_version: ClassVar[int] = 3
    operation_id: str
    attempt_id: str
    tool: str
    arguments: dict[str, JSONValue] = {}
    input_ref: str | None = None
    revision: str | None = None
    repeat_contract: Literal["idempotent", "idempotency_key", "at_most_once", "read_only", "unsafe"]
    grant_id: str
    authorization_ref: str
    reservation_ref: str
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)
    status_lookup: bool = False


@register
class ToolIntentV2(ToolIntent):
    """Schema 2 of ``ToolIntent``, as logs written before ``status_lookup`` hold it: the same
    fields without it (it reads as False and is never encoded, so a stored v2 event re-encodes to
    its own bytes). Read only; the gate writes schema 3. A subclass of :class:`ToolIntent`."""
    schema_version: ClassVar[int] = 2
    status_lookup: Literal[False] = Field(default=False, exclude=True)


@register
class ToolIntentV1(ToolIntent):
    """Schema 1 of ``ToolIntent``, as logs written before the idempotency key hold it: the same
    fields without ``idempotency_key`` and ``status_lookup`` (they read as None and False and are
    never encoded, so a stored v1 event re-encodes to its own bytes). Read only; the gate writes
    schema 3. A subclass of :class:`ToolIntent`, so every reader of intents reads all three."""
    schema_version: ClassVar[int] = 1
    idempotency_key: None = Field(default=None, exclude=True)
    status_lookup: Literal[False] = Field(default=False, exclude=True)


@register
class ToolResult(Payload):
    """Evidence about an attempt. Only ``completed``/``failed`` with a complete observation settle it."""
    event_type: ClassVar[str] = "ToolResult"
    schema_version: ClassVar[int] = 1
    operation_id: str
    attempt_id: str
    status: Literal["accepted", "running", "completed", "failed", "timeout", "partial", "unreachable"]
    job_handle: str | None = None
    outcome: dict[str, JSONValue] | None = None
    observation_complete: bool = False
    evidence: dict[str, str] | None = None
    source: Literal["reply", "reconciliation", "inbox"] = "reply"


@register
class AttemptWithheld(Payload):
    """The dispatch-time recheck withheld an admitted attempt whose intent is durable, and the
    request never left (§11.3.2, §11.5.3): the gate appends this before it could ever send, so it
    is the verified evidence that the attempt has no remote effect and no charge.

    The fold settles the attempt as never sent (it is no longer in doubt) and releases
    ``reservation_id`` unspent; a later release of the operation is a new attempt with its own
    admission and reservation. ``subject_kind`` says whether ``subject_id`` is a tool operation
    (``attempt_id`` its attempt) or a model invocation (``attempt_id`` is the invocation id);
    ``reason`` is the recheck's (a pause, a moved control epoch, a void or expired approval, an
    ownership check that failed)."""
    event_type: ClassVar[str] = "AttemptWithheld"
    schema_version: ClassVar[int] = 1
    subject_id: str
    subject_kind: Literal["tool", "model"]
    attempt_id: str
    reservation_id: str | None = None
    reason: str = ""


# --- control, plan, approvals ------------------------------------------------------------------

ControlState = Literal[
    "RUNNING", "PAUSED", "AWAITING_APPROVAL", "FINALIZING", "COMPLETED", "CANCELLED", "FAILED"
]
#: The control state a ``TrajectoryFrozen`` sets (terminal escalation). Not a ``ControlChanged``
#: target: only the freeze record enters it, and only ``CANCELLED`` or ``FAILED`` leave it.
FROZEN = "FROZEN"


@register
class ControlChanged(Payload):
    """A guarded control transition; ``bump_control_epoch`` invalidates in-flight continuations."""
    event_type: ClassVar[str] = "ControlChanged"
    schema_version: ClassVar[int] = 1
    request_id: str
    issuer: str
    to_state: ControlState
    bump_control_epoch: bool = False
    reason: str = ""


@register
class PlanChanged(Payload):
    """A plan revision with its steps and their dependencies."""
    event_type: ClassVar[str] = "PlanChanged"
    schema_version: ClassVar[int] = 1
    plan_revision: int = Field(ge=1)
    steps: list[dict[str, JSONValue]]
    reason: str = ""


@register
class ApprovalRequested(Payload):
    """An action held for review: the exact held operation and attempt, reviewer and expiry."""
    event_type: ClassVar[str] = "ApprovalRequested"
    schema_version: ClassVar[int] = 1
    approval_id: str
    held_operation_id: str
    held_attempt_id: str
    reviewer: str
    expires_unix_s: float | None = None


@register
class ApprovalResolved(Payload):
    """The reviewer's decision, or the request's withdrawal or expiry."""
    event_type: ClassVar[str] = "ApprovalResolved"
    schema_version: ClassVar[int] = 1
    approval_id: str
    decision: Literal["approved", "refused", "withdrawn", "expired"]
    reviewer: str
    evidence: str = ""


# --- replay boundary -----------------------------------------------------------------------------


@register
class Compacted(Payload):
    """A recorded summary that replaced a span of context, with what it depends on."""
    event_type: ClassVar[str] = "Compacted"
    schema_version: ClassVar[int] = 1
    summary: str
    covers_from_sequence: int = Field(ge=1)
    covers_to_sequence: int = Field(ge=1)
    dependencies: list[str] = []


@register
class RuntimeInput(Payload):
    """A clock reading, random draw, identifier or configuration input, recorded for replay.

    Kind ``observation``: a synthetic observation the runtime delivers into the model's context
    (the watchdog's tier-1 interrupt, Failure Recovery table 7): recorded here first, so the next
    context is built from the log and a replay delivers the same text."""
    event_type: ClassVar[str] = "RuntimeInput"
    schema_version: ClassVar[int] = 1
    kind: Literal["clock", "random", "identifier", "config", "order", "observation"]
    name: str
    value: JSONValue


@register
class Checkpoint(Payload):
    """A checkpoint manifest bound to an exact covered log boundary (§11.4)."""
    event_type: ClassVar[str] = "Checkpoint"
    schema_version: ClassVar[int] = 1
    checkpoint_id: str
    covered_sequence_number: int = Field(ge=0)
    record_manifest_sha256: str
    workspace_manifest_sha256: str | None = None
    artifact_refs: list[str] = []


_SHA256_HEX = r"^[0-9a-f]{64}$"


@register
class CheckpointV2(Payload):
    """A published checkpoint manifest (§11.4.1, §11.4.2; see :mod:`kernel_lib.checkpoint`).

    ``manifest_sha256`` names the manifest's bytes in a content-addressed blob store; those bytes
    and everything they reference were durable before this event was appended, so the event is the
    publication. ``covered_sequence_number`` is the log position p at which the record snapshot
    and the workspace tree are frozen (the event itself sits after p). ``kind`` is ``full`` (a
    complete record snapshot and tree) or ``incremental`` (deltas against ``base_checkpoint_id``).
    ``record_sha256`` is the digest of the complete record snapshot at p either way, and
    ``workspace_tree_sha256`` the digest of the tree (None: no workspace). ``supersedes`` lists the
    checkpoints a consolidated base replaces (their deltas may be retired once this is published).
    """
    event_type: ClassVar[str] = "Checkpoint"
    schema_version: ClassVar[int] = 2
    checkpoint_id: str = Field(min_length=1)
    covered_sequence_number: int = Field(ge=0)
    manifest_sha256: str = Field(pattern=_SHA256_HEX)
    kind: Literal["full", "incremental"]
    base_checkpoint_id: str | None = None
    record_sha256: str = Field(pattern=_SHA256_HEX)
    workspace_tree_sha256: str | None = Field(default=None, pattern=_SHA256_HEX)
    artifact_refs: list[str] = []
    supersedes: list[str] = []

    @model_validator(mode="after")
    def _base_matches_kind(self) -> "CheckpointV2":
        if (self.kind == "incremental") != (self.base_checkpoint_id is not None):
            raise ValueError("an incremental checkpoint names its base_checkpoint_id; a full one has none")
        return self


@register
class WorkspaceChanged(Payload):
    """A recorded workspace delta (§11.4.1): the workspace went from tree ``base_tree_sha256`` to
    tree ``result_tree_sha256`` by the ordered changes stored under ``delta_sha256`` (writes with
    their blob digests, deletions, executable-flag changes). The delta, the new blobs and the
    result tree were durable before this event was appended. ``operation_id`` names the operation
    whose effect this is, when one did. Counts are numbers of files."""
    event_type: ClassVar[str] = "WorkspaceChanged"
    schema_version: ClassVar[int] = 1
    change_id: str = Field(min_length=1)
    base_tree_sha256: str = Field(pattern=_SHA256_HEX)
    result_tree_sha256: str = Field(pattern=_SHA256_HEX)
    delta_sha256: str = Field(pattern=_SHA256_HEX)
    operation_id: str | None = None
    files_written: int = Field(default=0, ge=0)
    files_deleted: int = Field(default=0, ge=0)
    mode_changes: int = Field(default=0, ge=0)


# --- Failure Recovery chapter records ---------------------------------------------------------


@register
class CompensationIssued(Payload):
    """A compensator admitted for an established forward step of a saga."""
    event_type: ClassVar[str] = "CompensationIssued"
    schema_version: ClassVar[int] = 1
    saga_id: str
    step_operation_id: str
    compensation_operation_id: str
    reason: str = ""


#: The states of a saga sub-transaction (Failure Recovery, table 2), plus ``HALTED`` (a failed
#: step after which the saga stops without unwinding: past the pivot) and ``ABORTED`` (a proposed
#: step that never ran).
SAGA_STEP_STATES = ("PENDING", "EXECUTING", "COMMITTED", "FAILED", "COMPENSATING", "COMPENSATED", "PANIC",
                    "MANUAL_ESCALATION", "ABORTED", "HALTED")
SagaStepState = Literal["PENDING", "EXECUTING", "COMMITTED", "FAILED", "COMPENSATING", "COMPENSATED", "PANIC",
                        "MANUAL_ESCALATION", "ABORTED", "HALTED"]
#: Reversibility tiers (Failure Recovery, table 5): I invertible, II compensable, III pivot.
ReversibilityTier = Literal["I", "II", "III"]


@register
class SagaStepChanged(Payload):
    """One transition of a saga sub-transaction T_i (Failure Recovery, definition 0.1, table 2).

    ``step_id`` is T_i's operation id (its ``ToolIntent``/``ToolResult`` carry the same id);
    ``idempotency_key`` is κ_i. ``compensator`` is C_i bound from T_i's output, recorded with the
    ``COMMITTED`` transition (or with ``FAILED`` when the failed step left a partial effect):
    ``{tool, arguments, operation_id, idempotency_key, repeat_contract, status_lookup}``, where
    ``idempotency_key`` is κ_i^c. None for a pivot (C_i = ∅). ``residue``: with ``PANIC``, the
    resources the services still hold (read from them, not assumed). The saga's fold is
    :func:`kernel_lib.recovery.saga.fold_saga`; the state machine it enforces is
    :data:`kernel_lib.recovery.saga.TRANSITIONS`.
    """
    event_type: ClassVar[str] = "SagaStepChanged"
    schema_version: ClassVar[int] = 1
    saga_id: str = Field(min_length=1)
    step_id: str = Field(min_length=1)
    step_index: int = Field(ge=1)
    state: SagaStepState
    tool: str = Field(min_length=1)
    tier: ReversibilityTier
    idempotency_key: str | None = None
    compensator: dict[str, JSONValue] | None = None
    reason: str = ""
    residue: list[dict[str, JSONValue]] = []


@register
class SagaChanged(Payload):
    """A saga-level transition: ``RUNNING`` (forward), ``COMPENSATING`` (the unwind began),
    ``ABORT_CONSISTENT`` (every compensator ran: the unwind ended clean), ``COMPLETED``, ``PANIC``
    (a compensator failed unrecoverably), ``HALTED`` (a failure past the pivot: no rollback)
    (Failure Recovery, "Saga compensation stacks", the unwind listing)."""
    event_type: ClassVar[str] = "SagaChanged"
    schema_version: ClassVar[int] = 1
    saga_id: str = Field(min_length=1)
    state: Literal["RUNNING", "COMPENSATING", "ABORT_CONSISTENT", "COMPLETED", "PANIC", "HALTED"]
    failed_step_id: str | None = None
    reason: str = ""


@register
class PivotVerified(Payload):
    """The verdict of the pre-pivot verification gate for ``pivot_step_id`` (Failure Recovery,
    "The pivot action boundary": before T_pivot is dispatched the runtime verifies its
    pre-conditions; computed by :func:`kernel_lib.recovery.verification.run_gate`).

    ``checks``: one ``{name, passed, evidence}`` per deterministic check, in the order run.
    ``failed_checks``: the names of those that failed (``passed`` is true exactly when it is
    empty). ``model_claim``: what the model said about its own work, kept for people and given no
    weight (``{"text", "claims_success", "weight": 0}``), or None."""
    event_type: ClassVar[str] = "PivotVerified"
    schema_version: ClassVar[int] = 1
    saga_id: str = Field(min_length=1)
    pivot_step_id: str = Field(min_length=1)
    passed: bool
    checks: list[dict[str, JSONValue]] = []
    failed_checks: list[str] = []
    model_claim: dict[str, JSONValue] | None = None


@register
class PivotCrossed(Payload):
    """The saga crosses its pivot: STATUS_PREPARING -> STATUS_COMMITTED (Failure Recovery, "The
    pivot action boundary": the pivot's dispatch requires a synchronous write to the WAL). It is
    appended with a barrier before the pivot's ``ToolIntent``; from it on the compensation log
    L_comp is retired (``retired_compensators``: the step ids whose C_i will never run) and a
    failure is retried forward or escalated, never unwound.

    ``pivot_step_id``/``pivot_index``/``pivot_tool``: the pivot step T_k the crossing is for.
    ``verified_sequence``: the log position of the passing :class:`PivotVerified` it rests on, or
    None when the runner was configured without a gate (recorded as such, never implied).
    ``outbox``: the escrow entries (:class:`OutboxChanged`) the atomic outbox releases with the
    pivot. The saga's fold is :func:`kernel_lib.recovery.saga.fold_saga`."""
    event_type: ClassVar[str] = "PivotCrossed"
    schema_version: ClassVar[int] = 1
    saga_id: str = Field(min_length=1)
    pivot_step_id: str = Field(min_length=1)
    pivot_index: int = Field(ge=1)
    pivot_tool: str = Field(min_length=1)
    verified_sequence: int | None = Field(default=None, ge=1)
    retired_compensators: list[str] = []
    outbox: list[str] = []
    reason: str = ""


@register
class OutboxChanged(Payload):
    """One entry of the saga's escrow and atomic outbox (Failure Recovery, Example 0.1, the
    structural remedy): an irreversible payload staged before the pivot and released with it.

    ``STAGED``: the payload (``tool`` and ``arguments``) is durable in the log and has not been
    sent (an invertible step: dropping the entry undoes it). ``DROPPED``: the unwind discarded it
    before the pivot (never sent). ``FLUSHED``: after the pivot, the service answered that it
    applied the send (``operation_id`` is the send's operation, ``idempotency_key`` its κ, fixed
    when the entry was staged, so every re-send after a crash is deduplicated by the service).
    ``payload_sha256``: SHA-256 of the canonical JSON of ``[tool, arguments]``."""
    event_type: ClassVar[str] = "OutboxChanged"
    schema_version: ClassVar[int] = 1
    saga_id: str = Field(min_length=1)
    entry_id: str = Field(min_length=1)
    state: Literal["STAGED", "DROPPED", "FLUSHED"]
    tool: str = Field(min_length=1)
    arguments: dict[str, JSONValue] = {}
    operation_id: str = Field(min_length=1)
    idempotency_key: str = Field(min_length=1)
    payload_sha256: str = Field(pattern=_SHA256_HEX)
    reason: str = ""


@register
class TrajectoryFrozen(Payload):
    """Terminal escalation, the ACB freeze (Failure Recovery, "Terminal escalation"): the
    trajectory is halted (no admission of model calls or tool dispatch: the fold sets its control
    state to ``FROZEN``, which only an operator's ``CANCELLED``/``FAILED`` leaves), its capability
    leases were revoked at the broker (``revoked_leases``), and this incident record was emitted
    out of band. ``failure_mode``: ``COMPENSATION_CORRUPTED`` before the pivot (a compensator
    failed), ``POST_PIVOT_STALLED`` after it, ``SEMANTIC_DEADLOCK`` when the watchdog's tier 3
    aborted a looping trajectory past its pivot (ERR_SEMANTIC_DEADLOCK, table 7). ``log_offset``:
    the log position the freeze describes (the last event before this one). ``residue``:
    resources the services still hold; ``incomplete_steps``: steps not finished (post-pivot)."""
    event_type: ClassVar[str] = "TrajectoryFrozen"
    schema_version: ClassVar[int] = 1
    incident_id: str = Field(min_length=1)
    saga_id: str | None = None
    failure_mode: Literal["POST_PIVOT_STALLED", "COMPENSATION_CORRUPTED", "SEMANTIC_DEADLOCK"]
    log_offset: int = Field(ge=0)
    failing_tool: str | None = None
    error: dict[str, JSONValue] = {}
    frozen_context_ref: str
    revoked_leases: list[str] = []
    residue: list[dict[str, JSONValue]] = []
    incomplete_steps: list[str] = []


@register
class QuarantineChanged(Payload):
    """An artifact, tool or trajectory placed in or released from quarantine (taint)."""
    event_type: ClassVar[str] = "QuarantineChanged"
    schema_version: ClassVar[int] = 1
    subject_id: str
    subject_kind: Literal["artifact", "tool", "trajectory", "operation"]
    quarantined: bool
    reason: str = ""


_ACTION_SIGNATURE_HEX = r"^[0-9a-f]{16}$"


@register
class WatchdogIntervened(Payload):
    """One step of a semantic watchdog's intervention (Failure Recovery, table 7), logged before
    and after its effects: ``phase`` ``intent`` is appended before the tier touches anything (the
    durable intent), ``completed`` after every effect of the tier is done, so a worker that finds
    an intent without its completion finishes that tier and starts no other
    (:func:`kernel_lib.recovery.watchdog.escalation.unfinished`).

    ``intervention_id`` pairs the two records. ``tier``: 1 synthetic interrupt, 2 backtrack
    (restore + mask), 3 terminal abort (ERR_SEMANTIC_DEADLOCK). ``detection_kind`` and
    ``detection_position``: the detector that fired and the log position where it fired;
    ``evidence``: its evidence (plain JSON). ``action_signature``: h_tool of the looping action
    (:func:`kernel_lib.core.action_signature.action_signature`, 16 hex digits), when there is one.
    ``onset_position``: the log position where the cycle began. ``checkpoint_restored``: with a
    tier-2 completion, the id of the checkpoint the workspace was restored from. ``outcome``: with
    a tier-3 completion, ``compensated`` (no pivot crossed) or ``frozen`` (past it).

    Schema 2; schema 1 logs read as :class:`WatchdogIntervenedV1` (:meth:`WatchdogIntervenedV1.upcast`)."""
    event_type: ClassVar[str] = "WatchdogIntervened"
    schema_version: ClassVar[int] = 2
    intervention_id: str = Field(min_length=1)
    phase: Literal["intent", "completed"]
    tier: int = Field(ge=1, le=3)
    detection_kind: str = Field(min_length=1)
    detection_position: int | None = Field(default=None, ge=1)
    evidence: dict[str, JSONValue] = {}
    action_signature: str | None = Field(default=None, pattern=_ACTION_SIGNATURE_HEX)
    onset_position: int | None = Field(default=None, ge=1)
    checkpoint_restored: str | None = None
    outcome: Literal["interrupted", "backtracked", "compensated", "frozen"] | None = None
    reason: str = ""


@register
class WatchdogIntervenedV1(Payload):
    """Schema 1 of ``WatchdogIntervened``, as logs written before the three-tier ladder hold it:
    one record per intervention (no intent/completion pair), the detector's name in ``watchdog``,
    its signal and a free-text ``action``. Read only (a stored v1 event re-encodes to its own
    bytes); :meth:`upcast` gives the schema-2 view a reader of interventions uses."""
    event_type: ClassVar[str] = "WatchdogIntervened"
    schema_version: ClassVar[int] = 1
    watchdog: Literal["state_hash_cycle", "metric_stagnation", "action_repetition"]
    tier: int = Field(ge=1, le=3)
    signal: dict[str, JSONValue] = {}
    action: str

    def upcast(self, sequence_number: int) -> WatchdogIntervened:
        """The schema-2 record this one stands for: a completed intervention (schema 1 logged
        interventions after the fact) with id ``wd-v1-<sequence_number>``, the signal as
        evidence and ``action`` as reason; an ``action_signature``/``onset_position`` in the
        signal is carried over when it has the schema-2 shape."""
        sig = self.signal.get("action_signature")
        onset = self.signal.get("onset_position")
        return WatchdogIntervened(
            intervention_id=f"wd-v1-{sequence_number}", phase="completed", tier=self.tier,
            detection_kind=self.watchdog, evidence=dict(self.signal),
            action_signature=sig if isinstance(sig, str) and re.fullmatch(_ACTION_SIGNATURE_HEX, sig) else None,
            onset_position=onset if type(onset) is int and onset >= 1 else None, reason=self.action)

    # the schema-2 names, read through the upcast (what a reader comparing both versions asks for)
    phase = property(lambda self: "completed")
    detection_kind = property(lambda self: self.watchdog)
    evidence = property(lambda self: dict(self.signal))
    action_signature = property(lambda self: self.upcast(1).action_signature)
    onset_position = property(lambda self: self.upcast(1).onset_position)
    checkpoint_restored = property(lambda self: None)


@register
class ActionMasked(Payload):
    """A tombstone that masks an action signature from the agent's action space (Failure
    Recovery, table 7, tier 2): from this record on, the dispatch gate refuses every tool call
    whose h_tool equals ``action_signature``
    (:class:`~kernel_lib.errors.ActionMaskedRefusal`). Permanent for the trajectory.

    ``action_signature``: 16 hex digits of :func:`~kernel_lib.core.action_signature.action_signature`
    computed with ``nonce_arguments`` (None: the default nonce names). ``tool``: the masked
    call's tool, for people. ``position``: the log position of the failing action that was
    masked (its ``ToolIntent``). ``intervention_id``: the watchdog intervention that masked it."""
    event_type: ClassVar[str] = "ActionMasked"
    schema_version: ClassVar[int] = 1
    action_signature: str = Field(pattern=_ACTION_SIGNATURE_HEX)
    reason: str = Field(min_length=1)
    position: int = Field(ge=1)
    tool: str | None = None
    intervention_id: str | None = None
    nonce_arguments: list[str] | None = None


#: What set a quarantine off (Failure Recovery, table 11's trigger row): a pre-execution egress
#: check refusing a destination, a broken invariant, a watchdog trip, a capability the
#: trajectory was never granted, or an operator's decision.
QuarantineTriggerKind = Literal["egress_violation", "invariant_violation", "watchdog", "capability_request",
                                "operator"]


@register
class TrajectoryQuarantined(Payload):
    """The quarantine tombstone (Failure Recovery, "Blast Radius Quarantine", table 12 stage 4;
    issue 19): the trajectory is contained and everything it produced from log position
    ``taint_from_sequence`` (t_taint) on is tainted. The fold keeps it as a recovery record and
    sets the control state to ``FROZEN`` (unless the trajectory had already ended): admission
    refuses every model call and dispatch, and only an operator's ``CANCELLED``/``FAILED`` leaves
    it, so a quarantined trajectory is never resumed.

    ``quarantine_id`` names the incident. ``trigger_kind`` and ``trigger`` (plain JSON evidence,
    credentials redacted) say what set it off; ``detected_at_sequence`` is t*, the last log
    position when it was detected (0: an empty log); t_taint <= t*. ``mechanisms``: the
    primitive each stage used (``{"suspend": "cgroup_freezer", "sever": "netns", ...}``);
    ``stage_ms``: the measured latency of each stage, milliseconds; ``revoked_leases``: the
    capability leases revoked at the broker; ``tainted_artifacts``: SHA-256 hashes of the
    artifacts the ledger tainted when the tombstone was written (the ledger re-derives them from
    ``taint_from_sequence``, so a missing entry here taints nothing less)."""
    event_type: ClassVar[str] = "TrajectoryQuarantined"
    schema_version: ClassVar[int] = 1
    quarantine_id: str = Field(min_length=1)
    trigger_kind: QuarantineTriggerKind
    trigger: dict[str, JSONValue] = {}
    detected_at_sequence: int = Field(ge=0)
    taint_from_sequence: int = Field(ge=1)
    mechanisms: dict[str, str] = {}
    stage_ms: dict[str, float] = {}
    revoked_leases: list[str] = []
    tainted_artifacts: list[str] = []
    reason: str = ""

    @model_validator(mode="after")
    def _taint_not_after_detection(self) -> "TrajectoryQuarantined":
        if self.taint_from_sequence > max(self.detected_at_sequence, 1):
            raise ValueError(f"taint_from_sequence {self.taint_from_sequence} is after the detection at "
                             f"{self.detected_at_sequence}: t_taint <= t*")
        bad = [h for h in self.tainted_artifacts if not re.fullmatch(_SHA256_HEX, h)]
        if bad:
            raise ValueError(f"tainted_artifacts must be SHA-256 hex digests, got {bad[0]!r}")
        return self


#: The directives of the recovery policy D(Ω) (Failure Recovery, figure 2).
RecoveryDirective = Literal["TRANSIENT_RETRY", "FORWARD_REPAIR", "BACKWARD_ROLLBACK", "OPERATOR_ESCALATE"]
#: The remedies a decision may name: retry unchanged (transient), and the three forward repairs.
RecoveryRemedy = Literal["retry_unchanged", "error_feedback", "resample", "model_fallback"]


@register
class RecoveryDecided(Payload):
    """What the recovery policy D(Ω) decided for a failed sub-transaction, and why (Failure
    Recovery, figure 2's three gates and the anti-spin invariant; computed by
    :func:`kernel_lib.recovery.policy.decide`).

    ``step_id``: the failed T_t's operation id. ``gate``: the gate that decided (1 taxonomy, 2
    budget headroom, 3 economics; ``"anti-spin"`` the repair bound; ``"pivot"`` a forward repair
    chosen after the pivot, where rollback is not available). ``numbers``: every number that
    decided it (costs in s and USD, p and its estimate, break-evens, budgets). ``remedy``: with
    TRANSIENT_RETRY or FORWARD_REPAIR, the remedy chosen (None otherwise). ``error_signature``: σ
    of the error (SHA-256 hex). ``error_class`` and ``failure_class`` (``"<class>.<rule>"``) are
    gate 1's reading of the error."""
    event_type: ClassVar[str] = "RecoveryDecided"
    schema_version: ClassVar[int] = 1
    step_id: str = Field(min_length=1)
    directive: RecoveryDirective
    gate: Literal[1, 2, 3, "anti-spin", "pivot"]
    reason: str = Field(min_length=1)
    numbers: dict[str, JSONValue] = {}
    remedy: RecoveryRemedy | None = None
    error_signature: str = Field(pattern=_SHA256_HEX)
    error_class: Literal["transient", "semantic", "fatal", "unclassified"]
    failure_class: str = Field(min_length=1)


@register
class RepairOutcome(Payload):
    """Whether one forward repair of ``step_id`` worked: the trial that
    :func:`kernel_lib.recovery.repair_stats.fold_repair_stats` counts into the per-failure-class
    estimate of p (Failure Recovery, Napkin Math 0.2: p is measured). ``failure_class`` is gate 1's
    ``"<class>.<rule>"``; ``error_signature`` the σ of the error the repair answered."""
    event_type: ClassVar[str] = "RepairOutcome"
    schema_version: ClassVar[int] = 1
    step_id: str = Field(min_length=1)
    failure_class: str = Field(min_length=1)
    remedy: Literal["error_feedback", "resample", "model_fallback"]
    success: bool
    error_signature: str | None = Field(default=None, pattern=_SHA256_HEX)


# ------------------------------------------------------------------------------------------------
# the envelope
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Provenance:
    """Tenant and issuer on whose behalf the event was appended."""
    tenant: str
    issuer: str


_ENVELOPE_KEYS = (
    "trajectory_id", "event_id", "sequence_number", "event_type", "schema_version",
    "reducer_version", "owner_epoch", "control_epoch", "provenance", "payload",
)


def _check_envelope(d: dict[str, Any], event_id: str | None) -> None:
    for k in ("trajectory_id", "event_id", "event_type"):
        if not isinstance(d.get(k), str) or not d[k]:
            raise MalformedEventError(f"envelope field {k!r} must be a non-empty string", event_id=event_id)
    for k, lo in (("sequence_number", 1), ("schema_version", 1), ("reducer_version", 1),
                  ("owner_epoch", 0), ("control_epoch", 0)):
        v = d.get(k)
        if type(v) is not int or v < lo:
            raise MalformedEventError(f"envelope field {k!r} must be an integer >= {lo}, got {v!r}",
                                      event_id=event_id, event_type=d.get("event_type"))
    p = d.get("provenance")
    if not (isinstance(p, dict) and set(p) == {"tenant", "issuer"} and all(isinstance(x, str) for x in p.values())):
        raise MalformedEventError("provenance must be {tenant: str, issuer: str}", event_id=event_id,
                                  event_type=d.get("event_type"))


@dataclass(frozen=True, slots=True)
class Event:
    """One immutable log event: the envelope of §11.2.2 around a typed payload.

    Build with :meth:`Event.create` (validates, computes the canonical bytes once) or
    :func:`decode`. ``canonical`` is the RFC 8785 encoding; ``digest`` its SHA-256 (hex).

    Raises (from ``create``): MalformedEventError if an envelope field or the payload is invalid.
    """

    trajectory_id: str
    event_id: str
    sequence_number: int
    event_type: str
    schema_version: int
    reducer_version: int
    owner_epoch: int
    control_epoch: int
    provenance: Provenance
    payload: Payload
    canonical: bytes = field(repr=False, compare=False)
    digest: str = field(repr=False, compare=False)

    @classmethod
    def create(
        cls,
        *,
        trajectory_id: str,
        event_id: str,
        sequence_number: int,
        payload: Payload,
        owner_epoch: int = 0,
        control_epoch: int = 0,
        provenance: Provenance = Provenance("default", "kernel_lib"),
        reducer_version: int = REDUCER_VERSION,
    ) -> "Event":
        if not isinstance(payload, Payload):
            raise MalformedEventError("payload must be a registered Payload record", event_id=event_id)
        d = {
            "trajectory_id": trajectory_id, "event_id": event_id, "sequence_number": sequence_number,
            "event_type": payload.event_type, "schema_version": payload.schema_version,
            "reducer_version": reducer_version, "owner_epoch": owner_epoch,
            "control_epoch": control_epoch,
            "provenance": {"tenant": provenance.tenant, "issuer": provenance.issuer},
        }
        _check_envelope(d, event_id)
        d["payload"] = payload.model_dump(mode="json")
        raw = _canonical(d, event_id, payload.event_type)
        return cls(trajectory_id, event_id, sequence_number, payload.event_type, payload.schema_version,
                   reducer_version, owner_epoch, control_epoch, provenance, payload, raw,
                   hashlib.sha256(raw).hexdigest())

    def to_dict(self) -> dict[str, Any]:
        """The envelope as plain JSON-compatible data (what ``canonical`` encodes)."""
        return json.loads(self.canonical)

    def restamp(self, **changes: Any) -> "Event":
        """A copy with envelope fields changed (e.g. ``sequence_number``), re-encoded."""
        args = dict(trajectory_id=self.trajectory_id, event_id=self.event_id,
                    sequence_number=self.sequence_number, payload=self.payload,
                    owner_epoch=self.owner_epoch, control_epoch=self.control_epoch,
                    provenance=self.provenance, reducer_version=self.reducer_version)
        args.update(changes)
        return Event.create(**args)


def _canonical(d: dict[str, Any], event_id: str | None, event_type: str | None) -> bytes:
    try:
        return canonical_json(d)   # rfc8785.dumps's bytes, faster (kernel_lib.core.canonical)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise MalformedEventError(f"cannot canonically encode event: {exc}", event_id=event_id,
                                  event_type=event_type) from exc


def encode(event: Event) -> bytes:
    """Canonical bytes of ``event`` (RFC 8785). Same event, same bytes."""
    return event.canonical


def digest(data: bytes) -> str:
    """SHA-256 hex digest used for events and content-addressed payloads."""
    return hashlib.sha256(data).hexdigest()


def decode(data: bytes) -> Event:
    """Decode canonical bytes into an :class:`Event`.

    Raises:
        MalformedEventError: not JSON, not an object, a bad envelope field, a payload that fails its
            schema, or bytes that are not the canonical encoding of what they hold.
        UnknownEventTypeError, UnknownSchemaVersionError: the type/version is not registered.
    """
    data = _as_bytes(data)
    try:
        d = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedEventError(f"event is not valid UTF-8 JSON: {str(exc)[:200]}") from None
    return from_dict(d, expect_canonical=data)


def _as_bytes(data: Any) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise MalformedEventError(f"an encoded event must be bytes, got {type(data).__name__}")


def from_dict(d: Any, *, expect_canonical: bytes | None = None) -> Event:
    """Build an :class:`Event` from envelope data (e.g. parsed JSON). Errors as :func:`decode`."""
    if not isinstance(d, dict):
        raise MalformedEventError(f"event must be a JSON object, got {type(d).__name__}")
    event_id = d.get("event_id") if isinstance(d.get("event_id"), str) else None
    extra = set(d) - set(_ENVELOPE_KEYS)
    missing = set(_ENVELOPE_KEYS) - set(d)
    if extra or missing:
        raise MalformedEventError(
            f"envelope keys wrong (missing {sorted(missing)}, unexpected {sorted(extra)})",
            event_id=event_id, event_type=d.get("event_type") if isinstance(d.get("event_type"), str) else None)
    _check_envelope(d, event_id)
    payload = _payload_of(d, event_id)
    ev = Event.create(
        trajectory_id=d["trajectory_id"], event_id=d["event_id"], sequence_number=d["sequence_number"],
        payload=payload, owner_epoch=d["owner_epoch"], control_epoch=d["control_epoch"],
        provenance=Provenance(**d["provenance"]), reducer_version=d["reducer_version"],
    )
    if expect_canonical is not None and ev.canonical != expect_canonical:
        raise MalformedEventError("event bytes are not in canonical form (RFC 8785)", event_id=event_id,
                                  event_type=d["event_type"])
    return ev


def _payload_of(d: dict[str, Any], event_id: str | None) -> Payload:
    """The envelope's payload validated against its registered record (typed errors)."""
    cls = payload_class(d["event_type"], d["schema_version"], event_id=event_id)
    try:
        return cls.model_validate(d["payload"])
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ())) or "payload"
        raise MalformedEventError(f"payload invalid at {loc}: {first.get('msg')}", event_id=event_id,
                                  event_type=d["event_type"]) from exc


def decode_stored(data: bytes, *, known_digest: "str | None" = None) -> Event:
    """Decode bytes that a store's integrity check (a frame CRC, a stored digest) proves are the
    exact ``canonical`` bytes an :class:`Event` was appended with.

    ``known_digest``: the SHA-256 (lowercase hex) the caller itself computed from these very bytes
    (the segment log's cache of the digest computed here at the event's first read; the SQLite log's row check),
    used as the event's ``digest`` instead of hashing the bytes a second time. Never pass a digest
    read from storage unchecked. None (the default): the digest is computed here.

    Skips only the re-encoding that :func:`decode` uses to prove canonical form (about 3/4 of its
    cost); the envelope and the payload are still validated against the registered schema, and the
    payload is still checked for plain JSON and for credentials.

    Two routes give the same result. The fast route (:func:`_decode_stored_fast`) parses with
    msgspec straight into a typed envelope and validates the payload once, having shown the
    payload clean in a single walk (:func:`_clean_stored_json`) instead of the model validators'
    two. Whenever it cannot vouch for the bytes (anything msgspec or that walk refuses, an
    unregistered type, a failing schema) it steps aside and the checked route below decides, so
    every refusal is the one :func:`decode_stored` has always raised, with the same message.

    Raises: as :func:`decode`.
    """
    if type(data) is not bytes:
        data = _as_bytes(data)
    if known_digest is None:
        known_digest = hashlib.sha256(data).hexdigest()
    ev = _decode_stored_fast(data, known_digest)
    return ev if ev is not None else _decode_stored_checked(data, known_digest)


def _decode_stored_checked(data: bytes, known_digest: "str | None" = None) -> Event:
    """The reference route of :func:`decode_stored`: json.loads, the envelope checks, the payload's
    model validators. Raises the typed errors of :func:`decode`."""
    try:
        d = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedEventError(f"stored event is not valid UTF-8 JSON: {str(exc)[:200]}") from None
    if not isinstance(d, dict) or set(d) != set(_ENVELOPE_KEYS):
        raise MalformedEventError("stored event does not have the envelope's keys")
    event_id = d["event_id"] if isinstance(d["event_id"], str) else None
    _check_envelope(d, event_id)
    payload = _payload_of(d, event_id)
    return Event(d["trajectory_id"], d["event_id"], d["sequence_number"], d["event_type"], d["schema_version"],
                 d["reducer_version"], d["owner_epoch"], d["control_epoch"], Provenance(**d["provenance"]),
                 payload, bytes(data), known_digest if known_digest is not None else hashlib.sha256(data).hexdigest())


class _StoredProvenance(msgspec.Struct, forbid_unknown_fields=True):
    tenant: str
    issuer: str


class _StoredEnvelope(msgspec.Struct, forbid_unknown_fields=True):
    """The envelope as msgspec decodes it: every key required, no other key, strict types (an int
    field takes a JSON integer, never a float or a bool), the payload as plain JSON data."""
    trajectory_id: str
    event_id: str
    sequence_number: int
    event_type: str
    schema_version: int
    reducer_version: int
    owner_epoch: int
    control_epoch: int
    provenance: _StoredProvenance
    payload: Any


_STORED_DECODER = msgspec.json.Decoder(_StoredEnvelope)
#: validation context telling the Payload model validators that :func:`_clean_stored_json` already
#: showed the input plain JSON without credentials (compared by identity: no caller can forge it)
_PRECHECKED: dict[str, bool] = {"prechecked_by_decode_stored": True}
_PROVENANCES: dict[tuple[str, str], Provenance] = {}
_KEY_CLEAN: dict[str, bool] = {}


def _decode_stored_fast(data: bytes, known_digest: "str | None" = None) -> "Event | None":
    """The fast route of :func:`decode_stored`: the event, or None where the checked route must
    decide. Returns an event only where :func:`_decode_stored_checked` returns an equal one with
    the same canonical bytes and digest (tests/test_read_path.py checks it).

    The payload's top level is walked here (its values; nested lists and dicts by
    :func:`_clean_stored_json`), validated by :func:`_stored_validator` and the event built by
    :func:`_stored_event`."""
    try:
        env = _STORED_DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    tid, eid, seq, et, sv = env.trajectory_id, env.event_id, env.sequence_number, env.event_type, env.schema_version
    rv, oe, ce = env.reducer_version, env.owner_epoch, env.control_epoch
    if not (tid and eid and et and seq >= 1 and sv >= 1 and rv >= 1 and oe >= 0 and ce >= 0):
        return None
    validate = _STORED_VALIDATORS.get((et, sv))
    if validate is None:
        validate = _stored_validator(et, sv)
        if validate is None:
            return None
    p = env.payload
    if type(p) is not dict:
        return None
    strings: list[str] = []
    short = _SHORT_CLEAN
    for x in p.values():         # the payload's keys are field names: the model refuses unknown ones
        tx = type(x)
        if tx is str:
            if x not in short:
                strings.append(x)
        elif tx is int or tx is float:
            if not -JSON_SAFE_MAX <= x <= JSON_SAFE_MAX:   # also refuses NaN
                return None
        elif x is None or tx is bool:
            continue
        elif not _clean_stored_json(x, 1, strings):
            return None
    if strings and not _clean_strings(strings):
        return None
    try:
        payload = validate(p)
    except ValidationError:
        return None
    pv = env.provenance
    prov = _PROVENANCES.get((pv.tenant, pv.issuer))
    if prov is None:
        if len(_PROVENANCES) > 4096:
            _PROVENANCES.clear()
        prov = _PROVENANCES[(pv.tenant, pv.issuer)] = Provenance(pv.tenant, pv.issuer)
    return _stored_event(tid, eid, seq, et, sv, rv, oe, ce, prov, payload, data,
                         known_digest if known_digest is not None else hashlib.sha256(data).hexdigest())


#: ``(event_type, schema_version)`` → the payload validator of :func:`_decode_stored_fast`
#: (:func:`_stored_validator`), built at first use
_STORED_VALIDATORS: dict[tuple[str, int], Callable[[Any], Payload]] = {}
#: the two :class:`Payload` model validators that leave a payload unchanged, and raise nothing,
#: when the validation context is :data:`_PRECHECKED`
_PRECHECKED_VALIDATORS = (Payload._plain_json.__func__, Payload._no_secrets)


def _stored_validator(event_type: str, schema_version: int) -> "Callable[[Any], Payload] | None":
    """The validator :func:`_decode_stored_fast` uses for the registered payload record of
    ``(event_type, schema_version)`` (None: not registered), kept in :data:`_STORED_VALIDATORS`.

    It is the record's own pydantic-core schema less the ``function-before`` node of
    ``Payload._plain_json`` and the ``function-after`` node of ``Payload._no_secrets``: with the
    context :data:`_PRECHECKED` these return their input unchanged and never raise, so removing
    them changes no result and no refusal, only the two calls into Python per payload. Every other
    node (fields, constraints, the record's own model validators, the model's class and config) is
    the record's, so the result is the instance ``cls.model_validate(p, context=_PRECHECKED)``
    builds. Where the schema does not hold exactly those two nodes (another pydantic layout, a
    record that overrides them), the validator is that ``model_validate`` call itself."""
    cls = _REGISTRY.get((event_type, schema_version))
    if cls is None:
        return None
    removed: list[str] = []
    schema = _without_prechecked_validators(cls.__pydantic_core_schema__, removed)
    models = [n for n in _schema_nodes(schema) if n.get("type") == "model" and n.get("cls") is cls]
    validate: Callable[[Any], Payload]
    if sorted(removed) == ["function-after", "function-before"] and len(models) == 1:
        validate = SchemaValidator(schema, models[0].get("config")).validate_python
    else:
        def validate(p: Any, _cls: type[Payload] = cls) -> Payload:
            return _cls.model_validate(p, context=_PRECHECKED)
    _STORED_VALIDATORS[(event_type, schema_version)] = validate
    return validate


def _without_prechecked_validators(schema: Any, removed: list[str]) -> Any:
    """A copy of a core schema without the function nodes of :data:`_PRECHECKED_VALIDATORS` (each
    replaced by the schema it wraps); the type of each removed node is appended to ``removed``."""
    if isinstance(schema, dict):
        if schema.get("type") in ("function-before", "function-after"):
            f = schema.get("function", {}).get("function")
            if getattr(f, "__func__", f) in _PRECHECKED_VALIDATORS:
                removed.append(schema["type"])
                return _without_prechecked_validators(schema["schema"], removed)
        return {k: _without_prechecked_validators(v, removed) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_without_prechecked_validators(v, removed) for v in schema]
    return schema


def _schema_nodes(schema: Any) -> Iterator[dict[str, Any]]:
    """Every dict in a core schema, depth first."""
    if isinstance(schema, dict):
        yield schema
        for v in schema.values():
            yield from _schema_nodes(v)
    elif isinstance(schema, list):
        for v in schema:
            yield from _schema_nodes(v)


class _EventSlots:
    """:class:`Event`'s slots and nothing else, so the same memory layout: an instance filled by
    plain attribute stores and then given the class ``Event`` (CPython allows changing the class
    of an object between two classes of the same layout) is the Event its constructor builds,
    without the constructor's ``object.__setattr__`` call per field (a frozen dataclass's)."""
    __slots__ = tuple(f.name for f in fields(Event))


_new_object = object.__new__


def _stored_event(trajectory_id: str, event_id: str, sequence_number: int, event_type: str, schema_version: int,
                  reducer_version: int, owner_epoch: int, control_epoch: int, provenance: Provenance,
                  payload: Payload, canonical: bytes, digest: str) -> Event:
    """``Event(...)`` with these fields, its slots filled directly (no checks: the fast route's
    values are already checked)."""
    ev = _new_object(_EventSlots)
    ev.trajectory_id = trajectory_id
    ev.event_id = event_id
    ev.sequence_number = sequence_number
    ev.event_type = event_type
    ev.schema_version = schema_version
    ev.reducer_version = reducer_version
    ev.owner_epoch = owner_epoch
    ev.control_epoch = control_epoch
    ev.provenance = provenance
    ev.payload = payload
    ev.canonical = canonical
    ev.digest = digest
    ev.__class__ = Event   # type: ignore[assignment]
    return ev   # type: ignore[return-value]


#: verdicts of :func:`_clean_strings` on single short strings seen before (identifiers, literals,
#: tool names recur in every turn): a pure function of the string, so a cached True is exact
_SHORT_CLEAN: dict[str, bool] = {}
_SHORT_BYTES = 128


def _clean_strings(strings: list[str]) -> bool:
    """True if every string is valid UTF-8 text in which :func:`_text_secrets` finds no span.

    First one look at them all, joined by NUL: a trigger inside one string is a trigger of the
    whole (no trigger holds a NUL, and lower-casing maps each character alone but for the Greek
    final sigma), so a whole without any trigger settles it. Otherwise each string is scanned
    (and a short one's verdict kept)."""
    text = "\x00".join(strings)
    if not text.isascii():          # ASCII text is UTF-8 as it stands
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False
    if not _may_hold_secret(text):
        return True
    for s in strings:
        if _text_secrets(s):
            return False
        if len(s) <= _SHORT_BYTES:
            if len(_SHORT_CLEAN) > 65536:
                _SHORT_CLEAN.clear()
            _SHORT_CLEAN[s] = True
    return True


def _clean_stored_json(value: Any, depth: int, strings: list[str], top: bool = False) -> bool:
    """True only if :func:`check_json` accepts ``value`` (msgspec output: dict, list, str, int,
    float, bool, None) and no key in it can be a credential; the strings not already known clean
    are appended to ``strings`` for :func:`_clean_strings`. ``top``: the payload itself, whose keys
    are field names (the model refuses unknown ones; the secret scan skips them too)."""
    if depth > JSON_MAX_DEPTH:
        return False
    t = type(value)
    if t is dict:
        items = value.values() if top else value
        if value and depth + 1 > JSON_MAX_DEPTH:
            return False
    elif t is list:
        items = value
        if value and depth + 1 > JSON_MAX_DEPTH:
            return False
    else:
        return _clean_stored_json([value], depth - 1, strings)
    short = _SHORT_CLEAN
    for x in items:
        if not top and t is dict:       # x is a key: neither a credential's name nor its text
            clean = _KEY_CLEAN.get(x)
            if clean is None:
                if len(_KEY_CLEAN) > 4096:
                    _KEY_CLEAN.clear()
                clean = _KEY_CLEAN[x] = type(x) is str and _clean_strings([x]) and not _secret_key(x)
            if not clean:
                return False
            x = value[x]
        tx = type(x)
        if tx is str:
            if x not in short:
                strings.append(x)
        elif tx is int or tx is float:
            if not -JSON_SAFE_MAX <= x <= JSON_SAFE_MAX:   # also refuses NaN
                return False
        elif x is None or tx is bool:
            continue
        elif not _clean_stored_json(x, depth + 1, strings):
            return False
    return True
