"""Locating a divergence (§11.7): compare two recorded executions boundary by boundary.

:func:`locate_divergence` takes the events of two logs of the same task (a recording and its
regression replay, two attempts, a golden trace and a live run), walks them boundary by boundary
under a declared :class:`Equivalence`, and reports the earliest boundary where they disagree, the
table 6 category of that boundary, and the limits of that finding (§11.7.2).

**What is compared, per category.** Every boundary event falls in one of the four categories of
table 6. The payload fields checked by default are:

=====================  ========================================================================
category               boundary events and what is checked there
=====================  ========================================================================
``assembled input``    ``ContextBuilt`` (one request of a model call). Checked: the delivered
                       input text; when one side kept only a SHA-256, the two digests instead.
                       Also checked here: the request settings ``model`` and ``request_config``,
                       but only for a request that got no ``ModelReplied`` on at least one side;
                       an answered request has them checked at its reply instead.
``model response``     ``ModelReplied``. Checked: ``status``, ``reply``, ``proposal``,
                       ``input_tokens``, ``output_tokens``, ``provider``, and ``request`` (the
                       ``model`` and ``request_config`` of the ``ContextBuilt`` this reply
                       answered), so a settings change surfaces at the reply it influenced.
``harness decision``   ``Authorized`` (subject kind, decision, policy version, grant, reason),
                       ``BudgetReserved`` (amount, policy version), ``BudgetSettled`` (actual
                       cost, final, evidence), ``ToolIntent`` (tool, arguments, ``input_ref``,
                       ``revision``, repeat contract, grant), ``ControlChanged``, ``PlanChanged``,
                       ``ApprovalRequested``, ``ApprovalResolved``, ``CompensationIssued``,
                       ``QuarantineChanged``, ``WatchdogIntervened``: the choices the harness made.
``tool observation``   ``ToolResult``. Checked: ``status``, ``outcome``, ``observation_complete``.
=====================  ========================================================================

:func:`boundary_fields` returns the same list as data. Never checked, because two runs differ
there by design: the event envelope (event ids, sequence numbers, epochs, provenance), pointers
to other events (``authorization_ref``, ``reservation_ref``, ``decision_id``, ``reservation_id``)
and transport or signing details (``job_handle``, a ``ToolResult``'s ``evidence``, ``source``,
``delivered_input_ref``). A few event types are compared as *supporting evidence* but are not
boundaries and never become the first mismatch: ``TaskStarted`` (starting state), ``Compacted``
(feeds assembled input), ``RuntimeInput`` (captured clock and configuration values; feeds harness
decisions) and ``WorkspaceChanged`` (feeds tool observations). Checkpoint events are skipped.

**Pairing.** A boundary of A is matched with the boundary of B that has the same key: event type,
the invocation or operation id (plus attempt id for tool calls), and how many times that key has
already occurred in its own log. Log position alone never pairs two boundaries, so concurrent
calls logged in swapped order still match. *Retried model calls* reuse one invocation id: the
n-th ``ContextBuilt`` (and the n-th ``ModelReplied``) of an invocation in A is matched with the
n-th in B, so every attempt is compared and a change in a late attempt is found at that attempt
(keys such as ``ModelReplied inv7 #2``). Each reply is taken to answer the most recent request
of its invocation logged before it; a request that no reply follows counts as unanswered. When
the runs share no ids (say, logs imported with generated ids), a fallback replaces each id by the
order in which it first shows up in its own log (``@1``, ``@2`` …) and pairs on those ordinals,
which is only right if both runs issued their calls in the same order. The report names the
pairing used and the reason for it.

**Order.** Steps follow A's log order; a boundary only B has is slotted in after the step of B's
previous matched boundary. Three checks concern order and sequence. (1) A log whose sequence
numbers repeat or skip, or whose event ids repeat, is refused with :class:`ConfigError`: it was
damaged or spliced. (2) A reply logged before any request of its invocation, or a ``ToolResult``
logged before its ``ToolIntent``, cannot reflect what happened; it is reported as invalid evidence
and that boundary is not counted as verified. (3) The recorded order of matched boundaries is
compared only when ``Equivalence(strict_order=True)``: then a boundary that B logged ahead of one
that came before it in A is a mismatch on ``(recorded order)``. By default any order of matched
boundaries counts as equivalent (footnote 8 of §11.6.2 allows this for concurrent calls), and the
report's claim says that the order was not compared.

**Outcome of each step.** A step is *verified* (equal, possibly by digest alone), a *mismatch*
(values differ, or a boundary exists on one side while the other log continues past it),
*undetermined* (evidence missing) or *missing* (the other log ended first). The verified prefix
runs up to the first step that is not verified; its last step is
:attr:`DivergenceReport.last_verified_boundary`, and the first mismatch is
:attr:`DivergenceReport.first_mismatch`.

**Missing evidence** is listed in the report and never counted as agreement: an input kept only as
a digest (equal on SHA-256 alone; a change cannot be shown as text), boundaries beyond the end of
the shorter log, a reply with no request to check, a request nobody answered, a tool intent with
no result, and every field holding :data:`NOT_RECORDED`, the marker the importers of
:mod:`kernel_lib.importers` leave where their source kept nothing. The marker is looked for at any
depth of nested dicts and lists; the path holding it is set aside on both sides before comparing,
so it makes a boundary neither equal (two markers prove nothing) nor different.

**What a report establishes, and what it does not.** It establishes that, under the declared
equivalence and the chosen pairing, the compared fields agree up to the last verified boundary and
disagree at the first mismatch, and the category of that boundary tells where the runs first
parted (a changed input or request, a changed reply to an identical request, a different harness
choice, a different observation of the same call). It does not establish the cause of the
difference, that later differences are independent rather than consequences of the first one,
agreement in anything the equivalence ignores or the log never captured (provider-side state,
unlogged clock or environment inputs, the outside world), agreement of texts seen only through
digests, or that either run would repeat if executed again. :attr:`DivergenceReport.establishes`
and :attr:`DivergenceReport.does_not_establish` spell these out for each report.

Source: Durable Execution chapter, §11.7.1 (boundary-by-boundary comparison, table 6) and
§11.7.2 (what digests and mismatches do and do not establish); §11.6.2 footnote 8 (concurrent
calls: record the observed order or declare any order equivalent).
"""

from __future__ import annotations

import difflib
import json
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence

from kernel_lib.errors import ConfigError
from kernel_lib.core.events import NOT_RECORDED, Event, registered_types

ASSEMBLED_INPUT = "assembled input"
MODEL_RESPONSE = "model response"
HARNESS_DECISION = "harness decision"
TOOL_OBSERVATION = "tool observation"
#: The four categories of table 6, in the order a turn passes through them.
CATEGORIES = (ASSEMBLED_INPUT, MODEL_RESPONSE, HARNESS_DECISION, TOOL_OBSERVATION)

#: Key names that ``Equivalence(ignore_durations=True)`` drops (matched against the whole key, any
#: case, camelCase read as snake_case): lengths of time such as ``duration_s``, ``elapsed_ms``,
#: ``latency_s``, ``execution_time``, ``execution_time_s`` (the SWE-agent importer's per-step run
#: time), ``wall_time``, ``wallclock_s``, ``response_time_ms``, ``durationMs``, ``elapsedTime``, and
#: ``runtime`` only with a unit (``runtime_s``; a bare ``runtime`` is often a name, not a length).
_UNIT = r"(?:_?(?:s|ms|us|ns|sec|secs|seconds|millis|milliseconds))"
DURATION_KEY = re.compile(r"(?:.*_)?(?:(?:duration|elapsed(?:_?time)?|latency|execution_?time|exec_?time|run_time"
                          r"|wall_?(?:clock|time)(?:_?time)?|cpu_?time|response_?time|time_?taken|took)" + _UNIT + "?"
                          r"|runtime" + _UNIT + ")", re.I)
#: Key names that ``Equivalence(ignore_timestamps=True)`` drops (matched against the whole key, any
#: case, camelCase read as snake_case): points in time such as ``timestamp``, ``created_at``,
#: ``createdAt``, ``deadline_unix_s``, ``start_time``, ``endTime``.
#: A key that :data:`DURATION_KEY` matches is a duration, never a timestamp.
TIMESTAMP_KEY = re.compile(r"(?:.*_)?(?:timestamp|time|ts|at|unix_s|unix_ms|datetime|date|created|updated)", re.I)

_DEFAULT_CAP = 20
#: Value an importer (:mod:`kernel_lib.importers`) puts in a required field its source never
#: recorded. A compared field holding it is left out of the comparison and reported as missing
#: evidence: two sentinels agree about nothing.

_HEX64 = re.compile(r"[0-9a-f]{64}")
#: Name of the RuntimeInput an importer writes first; its ``value["lacks"]`` lists what the source
#: never recorded (``"per-turn-usage"``: token counts of 0 mean "not recorded").
IMPORT_HEADER = "import:source"


def _lacks_usage(value: Any) -> bool:
    lacks = value.get("lacks") if isinstance(value, dict) else None
    if isinstance(lacks, str):
        try:
            lacks = json.loads(lacks)
        except ValueError:
            lacks = [x.strip() for x in lacks.split(",")]
    return isinstance(lacks, (list, tuple)) and "per-turn-usage" in lacks


# ------------------------------------------------------------------------------------------------
# boundary specifications
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Spec:
    """How one event type becomes a boundary: its category, its identity fields as
    ``(namespace, field)`` (namespace None: a literal label kept as is; ``"attempt"``: numbered
    within the preceding identity), and the payload fields compared."""
    category: str
    ids: tuple[tuple[str | None, str], ...]
    fields: tuple[str, ...]


_SUBJ, _ATT = "subject", "attempt"

_BOUNDARY_SPECS: dict[str, _Spec] = {
    "ContextBuilt": _Spec(ASSEMBLED_INPUT, ((_SUBJ, "invocation_id"),), ("delivered_input",)),
    "ModelReplied": _Spec(MODEL_RESPONSE, ((_SUBJ, "invocation_id"),),
                          ("status", "reply", "proposal", "input_tokens", "output_tokens", "provider")),
    "Authorized": _Spec(HARNESS_DECISION, ((_SUBJ, "subject_id"),),
                        ("subject_kind", "decision", "policy_version", "grant_id", "reason")),
    "BudgetReserved": _Spec(HARNESS_DECISION, ((_SUBJ, "subject_id"),), ("amount_usd", "policy_version")),
    "BudgetSettled": _Spec(HARNESS_DECISION, ((_SUBJ, "subject_id"),), ("actual_usd", "final", "evidence")),
    "ToolIntent": _Spec(HARNESS_DECISION, ((_SUBJ, "operation_id"), (_ATT, "attempt_id")),
                        ("tool", "arguments", "input_ref", "revision", "repeat_contract", "grant_id")),
    "ToolResult": _Spec(TOOL_OBSERVATION, ((_SUBJ, "operation_id"), (_ATT, "attempt_id")),
                        ("status", "outcome", "observation_complete")),
    "ControlChanged": _Spec(HARNESS_DECISION, (("control", "request_id"),),
                            ("issuer", "to_state", "bump_control_epoch", "reason")),
    "PlanChanged": _Spec(HARNESS_DECISION, ((None, "plan_revision"),), ("steps", "reason")),
    "ApprovalRequested": _Spec(HARNESS_DECISION, ((_SUBJ, "held_operation_id"), (_ATT, "held_attempt_id"),
                                                  ("approval", "approval_id")), ("reviewer", "expires_unix_s")),
    "ApprovalResolved": _Spec(HARNESS_DECISION, (("approval", "approval_id"),), ("decision", "reviewer", "evidence")),
    "CompensationIssued": _Spec(HARNESS_DECISION, ((_SUBJ, "step_operation_id"), (_SUBJ, "compensation_operation_id")),
                                ("saga_id", "reason")),
    "QuarantineChanged": _Spec(HARNESS_DECISION, ((_SUBJ, "subject_id"),), ("subject_kind", "quarantined", "reason")),
    # schema 2's fields (a schema-1 record answers them through its upcast)
    "WatchdogIntervened": _Spec(HARNESS_DECISION, (), ("phase", "tier", "detection_kind", "evidence",
                                                       "action_signature", "onset_position",
                                                       "checkpoint_restored")),
    "ActionMasked": _Spec(HARNESS_DECISION, (("mask", "action_signature"),), ("tool", "reason", "position")),
    "SagaStepChanged": _Spec(HARNESS_DECISION, ((_SUBJ, "step_id"),),
                             ("saga_id", "step_index", "state", "tool", "tier", "compensator", "residue")),
    "SagaChanged": _Spec(HARNESS_DECISION, (("saga", "saga_id"),), ("state", "failed_step_id")),
    "TrajectoryQuarantined": _Spec(HARNESS_DECISION, (("quarantine", "quarantine_id"),),
                                   ("trigger_kind", "trigger", "detected_at_sequence", "taint_from_sequence",
                                    "mechanisms", "revoked_leases", "tainted_artifacts")),
    "TrajectoryFrozen": _Spec(HARNESS_DECISION, (("incident", "incident_id"),),
                              ("failure_mode", "log_offset", "failing_tool", "residue", "incomplete_steps")),
    "RecoveryDecided": _Spec(HARNESS_DECISION, ((_SUBJ, "step_id"),),
                             ("directive", "gate", "remedy", "error_class", "failure_class", "error_signature",
                              "numbers")),
    "RepairOutcome": _Spec(TOOL_OBSERVATION, ((_SUBJ, "step_id"),),
                           ("failure_class", "remedy", "success", "error_signature")),
    "PivotVerified": _Spec(HARNESS_DECISION, ((_SUBJ, "pivot_step_id"),), ("saga_id", "passed", "failed_checks")),
    "PivotCrossed": _Spec(HARNESS_DECISION, (("saga", "saga_id"),),
                          ("pivot_step_id", "pivot_tool", "retired_compensators", "outbox")),
    "OutboxChanged": _Spec(HARNESS_DECISION, (("outbox", "entry_id"),),
                           ("saga_id", "state", "tool", "payload_sha256", "idempotency_key")),
}

# supporting evidence: compared, reported, never a boundary; the category says what it bears on
_CONTEXT_SPECS: dict[str, _Spec] = {
    "TaskStarted": _Spec("initial state", (), ("objective", "requester", "grant_ids", "budget_ceiling_usd",
                                               "finalization_reserve_usd", "deadline_unix_s",
                                               "finalization_deadline_unix_s", "initial_record_ref",
                                               "workspace_ref", "config")),
    "Compacted": _Spec(ASSEMBLED_INPUT, (), ("summary", "covers_from_sequence", "covers_to_sequence", "dependencies")),
    "RuntimeInput": _Spec(HARNESS_DECISION, ((None, "kind"), (None, "name")), ("value",)),
    "WorkspaceChanged": _Spec(TOOL_OBSERVATION, ((_SUBJ, "operation_id"),),
                              ("base_tree_sha256", "result_tree_sha256", "delta_sha256", "files_written",
                               "files_deleted", "mode_changes")),
}

_ALL_SPECS = {**_BOUNDARY_SPECS, **_CONTEXT_SPECS}


# per event type: spec, id getter, number of ids, field getter (always a tuple), supporting?
_GETTERS = {t: (s, operator.attrgetter(*[f for _, f in s.ids]) if s.ids else None, len(s.ids),
                (operator.attrgetter(*s.fields) if len(s.fields) > 1 else
                 (lambda p, _g=operator.attrgetter(s.fields[0]): (_g(p),))),
                t in _CONTEXT_SPECS)
            for t, s in _ALL_SPECS.items()}


def boundary_fields() -> dict[str, dict[str, Any]]:
    """Per event type: ``{"category", "identity", "compared"}``, what :func:`locate_divergence`
    compares by default (supporting-evidence types carry ``"supporting": True``)."""
    out = {}
    for specs, supporting in ((_BOUNDARY_SPECS, False), (_CONTEXT_SPECS, True)):
        for t, s in specs.items():
            compared = list(s.fields) + (["request.model", "request.request_config"] if t == "ModelReplied" else [])
            out[t] = {"category": s.category, "identity": [f for _, f in s.ids], "compared": compared,
                      "supporting": supporting}
    return out


# ------------------------------------------------------------------------------------------------
# the declared equivalence relation
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Equivalence:
    """The declared equivalence relation under which two boundaries count as equal (§11.7).

    The default is exact canonical equality of the compared payload fields of each boundary
    (see the module docstring): key order never matters, because payloads are compared as
    canonical JSON data (RFC 8785: ``1`` and ``1.0`` are the same number, ``true`` is not ``1``).
    Each option below loosens that relation in one named, documented way, and the report lists
    the options in force.

    Options:
        ignore_fields: names of keys to drop before comparing. A plain name (``"reply"``,
            ``"duration_s"``) drops that key at any depth of every boundary's compared value; a
            name prefixed by an event type drops one path of that type only
            (``"ToolResult.outcome.log"``, ``"ModelReplied.request"``). Ignoring
            ``"delivered_input"`` turns off the assembled-input comparison.
        ignore_timestamps: drop keys whose names look like points in time (the whole key
            matches :data:`TIMESTAMP_KEY`: ``created_at``, ``timestamp``, ``deadline_unix_s`` …).
            Durations are not timestamps: this option keeps them.
        ignore_durations: drop keys whose names look like lengths of time (the whole key matches
            :data:`DURATION_KEY`: ``duration_s``, ``latency_ms``, ``execution_time_s`` …), such
            as the per-step run times the importers keep. Independent of ``ignore_timestamps``.
        normalize_whitespace: in every string, collapse each run of whitespace to one space and
            strip both ends.
        mask_patterns: regular expressions; every match inside a string is replaced by
            ``<masked>`` before comparing (e.g. temporary paths, request ids inside a prompt).
        embedded_json: a string holding a JSON object or array (tool arguments serialized by a
            provider, say) is compared as the parsed data, so its key order and spacing do not
            matter.
        ignore_list_order: compare lists as multisets (order of elements ignored).
        cost_tolerance_usd: two numbers under a key ending in ``_usd`` are equal when they
            differ by at most this much (USD).
        align: ``"identity"`` pairs boundaries by invocation/operation identity, ``"ordinal"``
            by the order of first appearance of each identity in its own log (the fallback for
            logs whose ids differ by run), ``"auto"`` (default) uses identity unless fewer than
            half the boundaries of the shorter log pair up that way and ordinal pairs more.
        strict_order: when False (default), any order of paired boundaries is equivalent (the
            declaration footnote 8 of §11.6.2 allows for concurrent calls); when True, a paired
            boundary that log B recorded before one that log A recorded earlier is a mismatch.

    Raises:
        ConfigError: an unknown ``align``, a negative or non-finite tolerance, a pattern that
            does not compile, an empty field name.
    """

    ignore_fields: tuple[str, ...] = ()
    ignore_timestamps: bool = False
    ignore_durations: bool = False
    normalize_whitespace: bool = False
    mask_patterns: tuple[str, ...] = ()
    embedded_json: bool = False
    ignore_list_order: bool = False
    cost_tolerance_usd: float = 0.0
    align: Literal["auto", "identity", "ordinal"] = "auto"
    strict_order: bool = False
    _exact: bool = field(default=True, init=False, repr=False, compare=False)
    _masks: tuple[re.Pattern, ...] = field(default=(), init=False, repr=False, compare=False)
    _plain: frozenset = field(default=frozenset(), init=False, repr=False, compare=False)
    _typed: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ignore_fields", tuple(self.ignore_fields))
        object.__setattr__(self, "mask_patterns", tuple(self.mask_patterns))
        if self.align not in ("auto", "identity", "ordinal"):
            raise ConfigError(f"align must be 'auto', 'identity' or 'ordinal', got {self.align!r}")
        tol = self.cost_tolerance_usd
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
            raise ConfigError(f"cost_tolerance_usd must be a finite number >= 0 (USD), got {tol!r}")
        masks = []
        for p in self.mask_patterns:
            try:
                masks.append(re.compile(p))
            except (re.error, TypeError) as exc:
                raise ConfigError(f"mask pattern {p!r} does not compile: {exc}") from None
        known = set(registered_types())
        plain, typed = set(), {}
        for f in self.ignore_fields:
            if not isinstance(f, str) or not f.strip(".") or "" in f.split("."):
                raise ConfigError(f"ignore_fields entries must be names like 'reply' or 'ToolResult.outcome.log', "
                                  f"got {f!r}")
            head, _, rest = f.partition(".")
            if head in known and rest:
                typed.setdefault(head, []).append(tuple(rest.split(".")))
            else:
                plain.add(f)
        loose = (self.ignore_fields or self.ignore_timestamps or self.ignore_durations or self.normalize_whitespace
                 or self.mask_patterns or self.embedded_json or self.ignore_list_order or self.cost_tolerance_usd)
        object.__setattr__(self, "_exact", not loose)
        object.__setattr__(self, "_masks", tuple(masks))
        object.__setattr__(self, "_plain", frozenset(plain))
        object.__setattr__(self, "_typed", typed)

    # --- what the relation is --------------------------------------------------------------------

    @property
    def exact(self) -> bool:
        """True when no option loosens exact canonical equality of the compared fields (``align``
        and ``strict_order`` say how boundaries pair up, not when values are equal)."""
        return self._exact

    @property
    def rewrites_text(self) -> bool:
        """True when the relation can equate strings whose bytes differ (whitespace, masks,
        embedded JSON): then two different digests no longer prove a mismatch."""
        return bool(self.normalize_whitespace or self.mask_patterns or self.embedded_json)

    def describe(self) -> list[str]:
        """One sentence per option in force (the first says what the baseline is)."""
        out = ["exact canonical equality of the compared payload fields of each boundary (key order never matters)"]
        if self.ignore_fields:
            out.append("ignoring fields: " + ", ".join(self.ignore_fields))
        if self.ignore_timestamps:
            out.append("ignoring keys that name points in time (timestamps; durations are kept)")
        if self.ignore_durations:
            out.append("ignoring keys that name durations (duration_s, latency_ms, execution_time_s, ...)")
        if self.normalize_whitespace:
            out.append("whitespace runs in strings collapsed to one space, ends stripped")
        if self.mask_patterns:
            out.append("masked in strings: " + ", ".join(repr(p) for p in self.mask_patterns))
        if self.embedded_json:
            out.append("JSON held in strings compared as parsed data")
        if self.ignore_list_order:
            out.append("lists compared as multisets")
        if self.cost_tolerance_usd:
            out.append(f"numbers under *_usd keys equal within {self.cost_tolerance_usd:g} USD")
        out.append("recorded order of paired boundaries must agree" if self.strict_order
                   else "any order of paired boundaries is equivalent")
        return out

    def to_dict(self) -> dict[str, Any]:
        """The options as plain JSON data."""
        return {"ignore_fields": list(self.ignore_fields), "ignore_timestamps": self.ignore_timestamps,
                "ignore_durations": self.ignore_durations,
                "normalize_whitespace": self.normalize_whitespace, "mask_patterns": list(self.mask_patterns),
                "embedded_json": self.embedded_json, "ignore_list_order": self.ignore_list_order,
                "cost_tolerance_usd": self.cost_tolerance_usd, "align": self.align,
                "strict_order": self.strict_order}

    # --- applying it -----------------------------------------------------------------------------

    def _text(self, s: str) -> Any:
        for m in self._masks:
            s = m.sub("<masked>", s)
        if self.embedded_json and s.lstrip()[:1] in ("{", "["):
            try:
                return self._value(json.loads(s))
            except (ValueError, RecursionError):
                pass
        if self.normalize_whitespace:
            s = " ".join(s.split())
        return s

    def _value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self._text(v)
        if isinstance(v, dict):
            return {k: self._value(x) for k, x in v.items() if not self._drop(k)}
        if isinstance(v, list):
            out = [self._value(x) for x in v]
            if self.ignore_list_order:
                out.sort(key=_canon_key)
            return out
        return v

    def _drop(self, key: str) -> bool:
        if key in self._plain:
            return True
        if not (self.ignore_timestamps or self.ignore_durations):
            return False
        if is_duration_key(key):
            return self.ignore_durations
        return self.ignore_timestamps and TIMESTAMP_KEY.fullmatch(_snake(key)) is not None

    def normalize(self, event_type: str, value: dict[str, Any]) -> dict[str, Any]:
        """``value`` (a boundary's compared fields) as this relation sees it."""
        if self._exact:
            return value
        out = self._value(value)
        for path in self._typed.get(event_type, ()):
            _drop_path(out, path)
        return out


def _snake(key: str) -> str:
    """``elapsedTime`` → ``elapsed_Time``: a word boundary before each inner capital, so the key
    patterns (matched case-insensitively) read camelCase keys as snake_case ones."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)


def is_duration_key(key: str) -> bool:
    """True when ``key`` names a length of time (:data:`DURATION_KEY`, whole key, any case,
    camelCase read as snake_case)."""
    return isinstance(key, str) and (DURATION_KEY.fullmatch(key) is not None
                                     or DURATION_KEY.fullmatch(_snake(key)) is not None)


def _drop_path(d: Any, path: tuple[str, ...]) -> None:
    for k in path[:-1]:
        if not isinstance(d, dict) or k not in d:
            return
        d = d[k]
    if isinstance(d, dict):
        d.pop(path[-1], None)


def _canon_key(v: Any) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False, default=str)


# ------------------------------------------------------------------------------------------------
# equality and diffs
# ------------------------------------------------------------------------------------------------


def _equal(a: Any, b: Any, tol: float, usd: bool = False) -> bool:
    """Canonical-JSON equality (bool is not a number; 1 == 1.0), with ``tol`` USD under *_usd keys."""
    if a is b:
        return True
    ta, tb = type(a), type(b)
    if ta is str:
        return tb is str and a == b
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta in (int, float) and tb in (int, float):
        return a == b or (usd and tol > 0 and abs(a - b) <= tol + 1e-12)
    if ta is not tb:
        return False
    if ta is dict:
        if a.keys() != b.keys():
            return False
        for k, x in a.items():
            y = b[k]
            if x is y or (type(x) is str and type(y) is str and x == y):
                continue
            if not _equal(x, y, tol, k.endswith("_usd")):
                return False
        return True
    if ta is list:
        return len(a) == len(b) and all(_equal(x, y, tol, usd) for x, y in zip(a, b))
    return a == b


def _short(v: Any, n: int | None = 80) -> str:
    """``v`` as one line of text, cut to ``n`` characters (``n=None``: never cut)."""
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True, ensure_ascii=False, default=str)
    s = repr(s) if isinstance(v, str) else s
    return s if n is None or len(s) <= n else s[: n - 1] + "…"


def _text_diff(path: str, a: str, b: str, out: list[str], cap: int, full: bool = False) -> None:
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), "A", "B", n=1, lineterm=""))[2:] \
        if ("\n" in a or "\n" in b) else []
    if full:   # configuration evidence: every changed line, never cut; a one-line value whole
        if lines:
            out.append(f"{path}: text differs ({len(a)} vs {len(b)} characters); every changed line:")
            out.extend("    " + ln for ln in lines)
        else:
            out.append(f"{path}: A {_short(a, None)} vs B {_short(b, None)}")
        return
    if lines:
        out.append(f"{path}: text differs ({len(a)} vs {len(b)} characters):")
        for ln in lines[: max(1, cap - len(out))]:
            out.append("    " + (ln if len(ln) <= 160 else ln[:159] + "…"))
        return
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    lo = max(0, i - 30)
    out.append(f"{path}: first differs at character {i}: A …{a[lo:i + 40]!r}… vs B …{b[lo:i + 40]!r}…"
               if i else f"{path}: A {_short(a)} vs B {_short(b)}")


def _diff(a: Any, b: Any, path: str, out: list[str], tol: float, cap: int = 12, usd: bool = False,
          full: bool = False) -> None:
    """Append readable differences between ``a`` and ``b`` to ``out`` (at most ``cap`` lines).
    ``full=True`` (configuration evidence): no cap, and no value is cut short."""
    if (not full and len(out) >= cap) or _equal(a, b, tol, usd):
        return
    n = None if full else 80
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            p = f"{path}.{k}" if path else k
            if k not in b:
                out.append(f"{p}: only in A ({_short(a[k], n)})")
            elif k not in a:
                out.append(f"{p}: only in B ({_short(b[k], n)})")
            else:
                _diff(a[k], b[k], p, out, tol, cap, k.endswith("_usd"), full)
            if not full and len(out) >= cap:
                return
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out, tol, cap, usd, full)
        return
    if isinstance(a, str) and isinstance(b, str):
        _text_diff(path or "value", a, b, out, cap, full)
        return
    out.append(f"{path or 'value'}: A {_short(a, n)} vs B {_short(b, n)}")


_ABSENT = object()


def _differences(a: Any, b: Any, path: str, tol: float, usd: bool = False) -> list[dict[str, Any]]:
    """Every differing leaf of ``a`` and ``b`` as ``{"path", "a", "b"}`` with the complete values
    (a key one side lacks: ``"only_in"`` names the side holding it and the other value is None)."""
    if a is not _ABSENT and b is not _ABSENT and _equal(a, b, tol, usd):
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[dict[str, Any]] = []
        for k in sorted(set(a) | set(b)):
            out += _differences(a.get(k, _ABSENT), b.get(k, _ABSENT), f"{path}.{k}" if path else k, tol,
                                k.endswith("_usd"))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]", tol, usd)]
    d = {"path": path or "value", "a": None if a is _ABSENT else a, "b": None if b is _ABSENT else b}
    if a is _ABSENT or b is _ABSENT:
        d["only_in"] = "B" if a is _ABSENT else "A"
    return [d]


#: Compared fields that hold configuration (a model call's ``request``: model name, decoding
#: parameters; a task's ``config``): their differences are always reported in full.
_CONFIG_FIELDS = ("request", "config")


def _clip_values(v: Any) -> Any:
    """A step's compared values for a report: long strings clipped, configuration fields whole."""
    if isinstance(v, dict):
        return {k: (x if k in _CONFIG_FIELDS else _clip(x)) for k, x in v.items()}
    return _clip(v)


def _clip(v: Any, n: int = 2000) -> Any:
    """``v`` with long strings shortened to ``n`` characters (for reports)."""
    if isinstance(v, str):
        return v if len(v) <= n else v[:n] + f"… [{len(v) - n} more characters]"
    if isinstance(v, dict):
        return {k: _clip(x, n) for k, x in v.items()}
    if isinstance(v, list):
        return [_clip(x, n) for x in v]
    return v


# ------------------------------------------------------------------------------------------------
# boundaries
# ------------------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Boundary:
    """One boundary of one log: an event seen as a point where two runs can be compared.

    ``key`` is the alignment key (event type, identities, occurrence) rendered as text, the same
    on both sides when the boundaries pair up; ``ids`` are the raw identifiers in this log;
    ``index`` is the position among the log's events (0-based); ``value`` the compared fields
    before the equivalence is applied. For ``ContextBuilt``, ``value`` holds the delivered text
    (None when only a digest survives), ``digest`` its SHA-256, ``request`` its model and
    ``request_config``, and ``replied`` whether some ``ModelReplied`` answered this very request
    (not merely its invocation). For ``ModelReplied``, ``answers`` is the key of the
    ``ContextBuilt`` it answered: the latest request of its invocation logged before it, so each
    attempt of a retried call is matched with its own request.
    """
    key: str
    event_type: str
    category: str
    index: int
    sequence_number: int
    event_id: str
    ids: tuple[str, ...]
    value: dict[str, Any]
    digest: str | None = None
    ref: str | None = None
    supporting: bool = False
    request: dict[str, Any] | None = None
    replied: bool = True
    answers: str | None = None

    def where(self) -> dict[str, Any]:
        """Where this boundary sits in its log."""
        return {"sequence_number": self.sequence_number, "event_id": self.event_id, "ids": list(self.ids)}


def _ordinal_key(spec_ids, raw, maps) -> tuple:
    out, parent = [], None
    for (ns, _), r in zip(spec_ids, raw):
        if ns is None:
            out.append(r)
            continue
        scope = (ns, parent) if ns == _ATT else ns
        m = maps.setdefault(scope, {})
        o = m.setdefault(r, len(m) + 1)
        tok = f"@{o}"
        out.append(tok)
        if ns == _SUBJ:
            parent = tok
    return tuple(out)


def _id(v: Any) -> str:
    return v if type(v) is str else "" if v is None else str(v)


def extract_boundaries(events: Sequence[Event], *, ordinal: bool = False) -> tuple[list[Boundary], list[Boundary]]:
    """The boundaries and the supporting-evidence items of one log, in log order.

    ``ordinal=True`` renders identities by order of first appearance (the fallback alignment).
    Returns ``(boundaries, supporting)``. Events of unknown or storage types are skipped.
    """
    # Which request each reply answers. A retried call records several ContextBuilt events under
    # one invocation id; a reply belongs to the newest of them logged before it. A reply logged
    # ahead of every request of its invocation (a damaged order, see _causal_faults) falls back to
    # the invocation's first request. Keys: event positions in ``events``.
    latest: dict[str, int] = {}
    first: dict[str, int] = {}
    answered_by: dict[int, int | None] = {}
    orphans: list[tuple[int, str]] = []
    no_usage = False
    for i, e in enumerate(events):
        t = e.event_type
        if t == "ContextBuilt":
            inv = e.payload.invocation_id
            latest[inv] = i
            first.setdefault(inv, i)
        elif t == "ModelReplied":
            inv = e.payload.invocation_id
            j = latest.get(inv)
            answered_by[i] = j
            if j is None:
                orphans.append((i, inv))
        elif t == "RuntimeInput" and e.payload.name == IMPORT_HEADER:
            no_usage = no_usage or _lacks_usage(e.payload.value)
    for i, inv in orphans:
        answered_by[i] = first.get(inv)
    replied = set(answered_by.values())
    ctx_at: dict[int, Boundary] = {}
    maps: dict[Any, dict[str, int]] = {}
    seen: dict[str, int] = {}
    bounds: list[Boundary] = []
    support: list[Boundary] = []
    getters = _GETTERS
    for i, e in enumerate(events):
        t = e.event_type
        g = getters.get(t)
        if g is None:
            continue
        spec, get_ids, n_ids, get_fields, supporting = g
        p = e.payload
        if n_ids == 1:
            v = get_ids(p)
            raw = (v if type(v) is str else _id(v),)
        elif n_ids:
            raw = tuple(map(_id, get_ids(p)))
        else:
            raw = ()
        ident = _ordinal_key(spec.ids, raw, maps) if ordinal else raw
        base = f"{t} {'/'.join(ident)}" if ident else t
        occ = seen.get(base, 0) + 1
        seen[base] = occ
        key = base if occ == 1 and ident else f"{base} #{occ}"
        digest = ref = request = None
        has_reply = True
        if t == "ContextBuilt":
            value = {"delivered_input": p.delivered_input}
            digest, ref = p.delivered_input_sha256, p.delivered_input_ref
            request = {"model": p.model, "request_config": p.request_config}
            has_reply = i in replied
        else:
            value = dict(zip(spec.fields, get_fields(p)))
            if t == "ModelReplied":
                j = answered_by[i]
                if j is None:
                    value["request"] = None
                else:
                    q = events[j].payload
                    value["request"] = {"model": q.model, "request_config": q.request_config}
                if no_usage:
                    # the import header says the source kept no per-turn usage: a 0 there is "not
                    # recorded", not a count
                    for f in ("input_tokens", "output_tokens"):
                        if value.get(f) == 0 and type(value.get(f)) is int:
                            value[f] = NOT_RECORDED
        b = Boundary(key, t, spec.category, i, e.sequence_number, e.event_id, raw, value, digest, ref, supporting,
                     request, has_reply)
        if t == "ContextBuilt":
            ctx_at[i] = b
        (support if supporting else bounds).append(b)
    for b in bounds:
        if b.event_type == "ModelReplied":
            j = answered_by[b.index]
            b.answers = ctx_at[j].key if j is not None else None
    return bounds, support


# ------------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Step:
    """One aligned comparison step: a boundary of A, of B, or both, and its outcome.

    ``status`` is ``verified``, ``verified_by_digest``, ``mismatch``, ``undetermined`` (evidence
    missing) or ``missing`` (the boundary lies past the end of the other log). ``diff`` lists
    the differences; ``same_fields`` and ``differing_fields`` name the compared fields (for a
    verified step, ``same_fields`` is left empty: every compared field agrees, see :meth:`to_dict`).
    ``config_differences`` lists each differing leaf of a configuration field (a model call's
    ``request``: model name, decoding parameters) as ``{"path", "a", "b"}`` with complete values;
    ``diff`` shows those paths uncut too.
    """
    key: str
    category: str
    event_type: str
    a: Boundary | None
    b: Boundary | None
    status: str = "verified"
    diff: Sequence[str] = ()
    same_fields: Sequence[str] = ()
    differing_fields: Sequence[str] = ()
    a_value: Any = None
    b_value: Any = None
    note: str = ""
    config_differences: Sequence[dict[str, Any]] = ()

    @property
    def verified(self) -> bool:
        return self.status in ("verified", "verified_by_digest")

    def ref(self) -> dict[str, Any]:
        """The boundary named: key, category, event type, and where it sits in each log."""
        return {"boundary": self.key, "category": self.category, "event_type": self.event_type,
                "a": self.a.where() if self.a else None, "b": self.b.where() if self.b else None}

    def to_dict(self) -> dict[str, Any]:
        d = self.ref()
        same = list(self.same_fields) or (sorted(self.a_value) if self.verified and isinstance(self.a_value, dict)
                                          else [])
        d.update(status=self.status, diff=list(self.diff), same_fields=same,
                 differing_fields=list(self.differing_fields), a_value=_clip_values(self.a_value),
                 b_value=_clip_values(self.b_value))
        if self.config_differences:
            d["config_differences"] = [dict(x) for x in self.config_differences]
        if self.note:
            d["note"] = self.note
        return d


@dataclass
class DivergenceReport:
    """What :func:`locate_divergence` found (§11.7.2: a bounded engineering claim).

    Fields:
        verdict: ``equivalent`` (every step verified), ``diverged`` (a first mismatch exists),
            ``equivalent_prefix`` (no mismatch, but one log ends early or evidence is missing),
            ``nothing_compared`` (neither log holds a boundary).
        last_verified_boundary: the last step of the verified prefix (every step up to it
            verified), or None when the very first step is not verified.
        halted_by: the first non-verified step when it is not a mismatch (missing evidence that
            stopped the verified prefix), else None.
        first_mismatch: the earliest mismatching step in A's causal order, or None.
        identical: every verified step (confirmed equal under the equivalence).
        differences: every mismatching step after the first, in order.
        missing_evidence: dicts ``{boundary, side, what, consequence}``.
        context_differences: supporting-evidence differences (``TaskStarted``, ``Compacted``,
            ``RuntimeInput``, ``WorkspaceChanged``) with the category they bear on: ``diff`` (every
            differing path, readable, never cut short) and ``differences`` (each differing leaf as
            ``{"path", "a", "b"}`` with the complete values), so a configuration difference that
            explains the first mismatch is shown in full.
        establishes / does_not_establish: sentences stating the claim and its limits.
        alignment: ``{"method", "reason", "paired", "a_only", "b_only", ...}``.
    """
    log_a: dict[str, Any]
    log_b: dict[str, Any]
    equivalence: Equivalence
    alignment: dict[str, Any]
    steps: list[Step]
    verdict: str
    last_verified_boundary: Step | None
    halted_by: Step | None
    first_mismatch: Step | None
    identical: list[Step]
    differences: list[Step]
    missing_evidence: list[dict[str, Any]]
    context_differences: list[dict[str, Any]]
    establishes: list[str]
    does_not_establish: list[str]
    verified_prefix: int = 0

    @property
    def diverged(self) -> bool:
        return self.first_mismatch is not None

    def to_dict(self, *, max_items: int = 1000, max_differences: int = _DEFAULT_CAP) -> dict[str, Any]:
        """Plain JSON data. Lists are capped (``max_items`` identical boundaries and missing-evidence
        entries, ``max_differences`` later differences); each capped list reports its total."""
        by_cat: dict[str, int] = {c: 0 for c in CATEGORIES}
        for s in self.identical:
            by_cat[s.category] += 1
        by_digest = sum(1 for s in self.identical if s.status == "verified_by_digest")
        return {
            "verdict": self.verdict,
            "log_a": self.log_a, "log_b": self.log_b,
            "equivalence": {"options": self.equivalence.to_dict(), "declared": self.equivalence.describe()},
            "alignment": self.alignment,
            "boundaries_compared": len(self.steps),
            "verified_prefix": self.verified_prefix,
            "last_verified_boundary": self.last_verified_boundary.ref() if self.last_verified_boundary else None,
            "halted_by": self.halted_by.to_dict() if self.halted_by else None,
            "first_mismatch": self.first_mismatch.to_dict() if self.first_mismatch else None,
            "identical_evidence": {
                "count": len(self.identical), "by_category": by_cat, "by_digest_only": by_digest,
                "boundaries": [s.key for s in self.identical[:max_items]],
                "omitted": max(0, len(self.identical) - max_items)},
            "differences": {"count": len(self.differences),
                            "items": [s.to_dict() for s in self.differences[:max_differences]],
                            "omitted": max(0, len(self.differences) - max_differences)},
            "missing_evidence": {"count": len(self.missing_evidence),
                                 "items": self.missing_evidence[:max_items],
                                 "omitted": max(0, len(self.missing_evidence) - max_items)},
            "context_differences": self.context_differences[:max_items],
            "establishes": list(self.establishes),
            "does_not_establish": list(self.does_not_establish),
        }

    def summary(self, *, max_differences: int = 5) -> str:
        """A human-readable report (what the CLI prints without ``--json``)."""
        L = []
        for side, info in (("A", self.log_a), ("B", self.log_b)):
            name = info.get("label") or info["trajectory_id"] or "(empty)"
            L.append(f"log {side}: {name} (trajectory {info['trajectory_id']}, {info['events']} events, "
                     f"{info['boundaries']} boundaries)")
        L.append("equivalence: " + "; ".join(self.equivalence.describe()))
        al = self.alignment
        L.append(f"alignment: {al['method']} ({al['paired']} pairs, {al['a_only']} only in A, {al['b_only']} only in "
                 f"B); {al['reason']}")
        L.append(f"verdict: {self.verdict}")
        lv = self.last_verified_boundary
        L.append("last verified boundary: " + (f"{lv.key} [{lv.category}] (A seq {_seq(lv.a)}, B seq {_seq(lv.b)}); "
                                               f"{self.verified_prefix} verified in a row"
                                               if lv else "none (the first boundary is not verified)"))
        if self.halted_by:
            h = self.halted_by
            L.append(f"verification halted at: {h.key} [{h.category}]: {h.note}")
        fm = self.first_mismatch
        if fm:
            L.append(f"first mismatch: {fm.key} [{fm.category}] (A seq {_seq(fm.a)}, B seq {_seq(fm.b)})")
            L += ["    " + d for d in fm.diff]
            if fm.same_fields:
                L.append("    same at this boundary: " + ", ".join(fm.same_fields))
        else:
            L.append("first mismatch: none")
        by_cat: dict[str, int] = {}
        for s in self.identical:
            by_cat[s.category] = by_cat.get(s.category, 0) + 1
        L.append(f"identical evidence: {len(self.identical)} boundaries ("
                 + ", ".join(f"{c} {by_cat.get(c, 0)}" for c in CATEGORIES) + ")")
        if self.differences:
            shown = min(max_differences, len(self.differences))
            L.append(f"later differences: {len(self.differences)} (first {shown})")
            for s in self.differences[:max_differences]:
                L.append(f"  {s.key} [{s.category}]: {s.diff[0] if s.diff else s.status}")
        if self.context_differences:
            L.append(f"supporting evidence that differs: {len(self.context_differences)}")
            for c in self.context_differences[:max_differences]:   # every differing path, uncut
                L.append(f"  {c['item']} (bears on {c['bears_on']}):")
                L += [f"    {d}" for d in c["diff"]]
        if self.missing_evidence:
            L.append(f"missing evidence: {len(self.missing_evidence)}")
            for m in self.missing_evidence[:max_differences]:
                L.append(f"  {m['boundary']} ({m['side']}): {m['what']}; {m['consequence']}")
            if len(self.missing_evidence) > max_differences:
                L.append(f"  … {len(self.missing_evidence) - max_differences} more (--json lists them)")
        L.append("establishes:")
        L += [f"  - {s}" for s in self.establishes]
        L.append("does not establish:")
        L += [f"  - {s}" for s in self.does_not_establish]
        return "\n".join(L)


def _seq(b: Boundary | None) -> str:
    return "-" if b is None else str(b.sequence_number)


# ------------------------------------------------------------------------------------------------
# alignment and comparison
# ------------------------------------------------------------------------------------------------


def _pair(ba: list[Boundary], bb: list[Boundary]) -> tuple[list[tuple[Boundary | None, Boundary | None]], int]:
    """Pair boundaries by key; return the steps ordered by A's log order (a B-only boundary goes
    right after the step holding B's preceding paired boundary) and the number of pairs."""
    a_by_key = {a.key: i for i, a in enumerate(ba)}
    b_of_a: list[Boundary | None] = [None] * len(ba)
    after: dict[int, list[Boundary]] = {}
    anchor, paired = -1, 0
    for b in bb:
        i = a_by_key.get(b.key)
        if i is None:
            after.setdefault(anchor, []).append(b)
        else:
            b_of_a[i] = b
            anchor = i
            paired += 1
    out: list[tuple[Boundary | None, Boundary | None]] = [(None, b) for b in after.get(-1, ())]
    for i, a in enumerate(ba):
        out.append((a, b_of_a[i]))
        if i in after:
            out.extend((None, b) for b in after[i])
    return out, paired


class _Unknown:
    """Stands in, on both sides, for a list element one side never recorded, so that the other
    elements keep their positions and the stand-ins compare equal (by identity)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "<not compared>"


_UNKNOWN = _Unknown()


def _holds_sentinel(v: Any) -> bool:
    """Whether the dict or list ``v`` holds the not-recorded sentinel at any depth (a quick test
    that stops at the first hit; :func:`_unrecorded` then finds the paths)."""
    for x in (v.values() if type(v) is dict else v):
        tx = type(x)
        if tx is str:
            if x == NOT_RECORDED:
                return True
        elif (tx is dict or tx is list) and _holds_sentinel(x):
            return True
    return False


def _unrecorded(v: Any, path: tuple = ()) -> list[tuple]:
    """Paths (tuples of dict keys and list indices) at which ``v`` holds the not-recorded sentinel,
    at any depth of nested dicts and lists, in a stable order."""
    if type(v) in (dict, list) and not _holds_sentinel(v):
        return []
    out: list[tuple] = []
    stack = [(path, v)]
    while stack:
        p, x = stack.pop()
        tx = type(x)
        if tx is str:
            if x == NOT_RECORDED:
                out.append(p)
        elif tx is dict:
            stack.extend((p + (k,), y) for k, y in reversed(x.items()) if type(y) in (str, dict, list))
        elif tx is list:
            stack.extend((p + (k,), y) for k, y in reversed(list(enumerate(x))) if type(y) in (str, dict, list))
    return out


def _path_text(path: tuple) -> str:
    """``("arguments", "files", 0, "path")`` as ``arguments.files[0].path``."""
    out = ""
    for k in path:
        out += f"[{k}]" if type(k) is int else (f".{k}" if out else str(k))
    return out


def _without(v: Any, paths: Iterable[tuple]) -> Any:
    """``v`` with every path of ``paths`` set aside: a dict key is dropped, a list element is
    replaced by :data:`_UNKNOWN`. Only the containers along a path are copied; paths absent from
    ``v`` are skipped (the other side may hold the sentinel where this side holds nothing)."""
    tree: dict = {}
    for p in paths:
        node = tree
        for k in p[:-1]:
            node = node.setdefault(k, {})
            if node is None:
                break
        else:
            node[p[-1]] = None                      # a leaf: the whole value there is set aside
    return _prune(v, tree)


def _prune(v: Any, tree: dict) -> Any:
    if type(v) is dict:
        out = dict(v)
        for k, sub in tree.items():
            if k not in out:
                continue
            if sub is None:
                del out[k]
            else:
                out[k] = _prune(out[k], sub)
        return out
    if type(v) is list:
        out = list(v)
        for k, sub in tree.items():
            if type(k) is int and 0 <= k < len(out):
                out[k] = _UNKNOWN if sub is None else _prune(out[k], sub)
        return out
    return v


def _compare_value(step: Step, eq: Equivalence, unrec: dict) -> None:
    a, b = step.a, step.b
    va, vb = eq.normalize(a.event_type, a.value), eq.normalize(b.event_type, b.value)
    step.a_value, step.b_value = va, vb
    tol = eq.cost_tolerance_usd
    if _equal(va, vb, tol):
        fields = _unrecorded(va)            # equal values hold the sentinel at the same places
        if fields:
            names = [_path_text(f) for f in fields]
            for f in names:
                _note_unrecorded(unrec, step, f, "A, B")
            step.status = "undetermined"
            step.note = ("not recorded by the source on either side (not compared, so this boundary is not "
                         "verified): " + ", ".join(names))
        return
    ua, ub = _unrecorded(va), _unrecorded(vb)
    if ua or ub:
        sa, sb = set(ua), set(ub)
        gone = ua + [f for f in ub if f not in sa]
        for f in gone:
            _note_unrecorded(unrec, step, _path_text(f), ", ".join(s for s, u in (("A", sa), ("B", sb)) if f in u))
        va, vb = _without(va, gone), _without(vb, gone)
        step.note = "not recorded by the source (not compared): " + ", ".join(_path_text(f) for f in gone)
        if _equal(va, vb, tol):
            step.status = "undetermined"
            step.note += "; the other fields agree, but this boundary is not verified"
            return
    step.status = "mismatch"
    same, differing, diff = [], [], []
    for k in sorted(set(va) | set(vb)):
        (same if k in va and k in vb and _equal(va[k], vb[k], tol, k.endswith("_usd")) else differing).append(k)
    plain = [k for k in differing if k not in _CONFIG_FIELDS]
    _diff({k: va[k] for k in plain if k in va}, {k: vb[k] for k in plain if k in vb}, "", diff, tol)
    config = [k for k in differing if k in _CONFIG_FIELDS]
    if config:   # a configuration difference is shown whole, never cut short
        ca, cb = {k: va[k] for k in config if k in va}, {k: vb[k] for k in config if k in vb}
        _diff(ca, cb, "", diff, tol, full=True)
        step.config_differences = _differences(ca, cb, "", tol)
    step.same_fields, step.differing_fields, step.diff = same, differing, diff


def _note_unrecorded(unrec: dict, step: Step, fld: str, sides: str) -> None:
    _tally(unrec, step, sides, f"{step.event_type}.{fld} holds the not-recorded sentinel ({NOT_RECORDED!r})",
           "the field was left out of the comparison: a source that never recorded it cannot show agreement or "
           "disagreement")


def _tally(agg: dict, step: Step, sides: str, what: str, consequence: str) -> None:
    """Count one missing-evidence finding; findings of one kind are reported once, with a count."""
    k = (step.event_type, what, sides)
    if k in agg:
        agg[k]["count"] += 1
    else:
        agg[k] = {"boundary": step.key, "side": sides, "count": 1, "what": what, "consequence": consequence}


def _is_digest(d: str | None) -> bool:
    return d is not None and _HEX64.fullmatch(d) is not None


def _compare_input(step: Step, eq: Equivalence, missing: list) -> None:
    """The assembled-input boundary: text when both sides hold it, else the digests."""
    a, b = step.a, step.b
    step.a_value = {"delivered_input": a.value["delivered_input"], "delivered_input_sha256": a.digest}
    step.b_value = {"delivered_input": b.value["delivered_input"], "delivered_input_sha256": b.digest}
    if "delivered_input" in eq._plain or ("delivered_input",) in eq._typed.get("ContextBuilt", ()):
        step.note = "delivered input ignored by the equivalence"
        return
    ta, tb = a.value["delivered_input"], b.value["delivered_input"]
    if ta is not None and tb is not None:
        na, nb = (eq._text(ta), eq._text(tb)) if eq.rewrites_text else (ta, tb)
        if _equal(na, nb, 0.0):
            return
        step.status = "mismatch"
        step.differing_fields = ["delivered_input"]
        step.diff = []
        if isinstance(na, str) and isinstance(nb, str):
            _text_diff("delivered_input", na, nb, step.diff, 12)
        else:
            _diff(na, nb, "delivered_input", step.diff, 0.0)
        return
    only = ", ".join(s for s, v in (("A", ta), ("B", tb)) if v is None)
    absent = [s for s, x in (("A", a), ("B", b)) if x.value["delivered_input"] is None and not _is_digest(x.digest)]
    if absent:
        step.status = "undetermined"
        step.note = (f"log {', '.join(absent)} records neither the delivered input nor its digest (ref "
                     f"{', '.join(str(x.ref) for x in (a, b) if x.value['delivered_input'] is None)}), so the inputs "
                     "cannot be compared")
        missing.append({"boundary": step.key, "side": ", ".join(absent),
                        "what": "the delivered input of this invocation (neither text nor digest recorded)",
                        "consequence": "the assembled input cannot be compared; verification stops here"})
        return
    refs = ", ".join(str(x.ref) for x in (a, b) if x.value["delivered_input"] is None)
    if a.digest == b.digest:
        step.status = "verified_by_digest"
        step.same_fields = ["delivered_input_sha256"]
        step.note = f"equal by SHA-256 only: log {only} holds only a digest of the delivered input"
        missing.append({"boundary": step.key, "side": only,
                        "what": f"only a digest of the delivered input survives (ref {refs})",
                        "consequence": "equality confirmed by SHA-256 only; the text was not inspected"})
        return
    if eq.rewrites_text:
        step.status = "undetermined"
        step.note = (f"digests differ but log {only} holds only a digest, and the equivalence rewrites text, so "
                     "whether the inputs are equivalent cannot be decided")
        missing.append({"boundary": step.key, "side": only, "what": f"the delivered input text (ref {refs})",
                        "consequence": step.note})
        return
    step.status = "mismatch"
    step.differing_fields = ["delivered_input_sha256"]
    step.diff = [f"delivered_input_sha256: A {a.digest[:16]}… vs B {b.digest[:16]}…",
                 f"the bytes changed; log {only} holds only a digest, so which text changed cannot be shown"]
    missing.append({"boundary": step.key, "side": only, "what": f"the delivered input text (ref {refs})",
                    "consequence": "the digests prove the bytes changed but not which text changed"})


def _compare_request(step: Step, eq: Equivalence, unrec: dict) -> None:
    """The request part of an assembled-input boundary (``model``, ``request_config``), compared
    there when an invocation has no ``ModelReplied`` on a side (otherwise the reply's boundary
    compares it)."""
    a, b = step.a, step.b
    if a.request is None or b.request is None or ("request",) in eq._typed.get("ModelReplied", ()):
        return
    va = eq.normalize("ContextBuilt", {"request": dict(a.request)})
    vb = eq.normalize("ContextBuilt", {"request": dict(b.request)})
    if "request" not in va or "request" not in vb:
        return
    step.a_value = {**(step.a_value or {}), "request": va["request"]}
    step.b_value = {**(step.b_value or {}), "request": vb["request"]}
    ua, ub = _unrecorded(va["request"], ("request",)), _unrecorded(vb["request"], ("request",))
    sa, sb = set(ua), set(ub)
    gone = ua + [f for f in ub if f not in sa]
    for f in gone:
        _note_unrecorded(unrec, step, _path_text(f), ", ".join(s for s, u in (("A", sa), ("B", sb)) if f in u))
    inner = [f[1:] for f in gone]
    ra, rb = _without(va["request"], inner), _without(vb["request"], inner)
    if _equal(ra, rb, eq.cost_tolerance_usd):
        if gone and step.verified:
            step.status = "undetermined"
            step.note = ("request not recorded by the source (not compared, so this boundary is not verified): "
                         + ", ".join(_path_text(f) for f in gone))
        return
    diff: list[str] = []
    _diff(ra, rb, "request", diff, eq.cost_tolerance_usd, full=True)
    step.status = "mismatch"
    step.differing_fields = [*step.differing_fields, "request"]
    step.diff = [*step.diff, *diff]
    step.config_differences = [*step.config_differences, *_differences(ra, rb, "request", eq.cost_tolerance_usd)]


def _causal_faults(bs: list[Boundary]) -> dict[int, str]:
    """Boundaries of one log recorded in a causally impossible order: a ``ToolResult`` before its
    ``ToolIntent``, a ``ModelReplied`` before its ``ContextBuilt`` (by ``id()`` of the boundary)."""
    intent: dict[tuple, int] = {}
    ctx: dict[tuple, int] = {}
    for x in bs:
        if x.event_type == "ToolIntent":
            intent.setdefault(x.ids[:2], x.index)
        elif x.event_type == "ContextBuilt":
            ctx.setdefault(x.ids[:1], x.index)
    out = {}
    for x in bs:
        if x.event_type == "ToolResult" and intent.get(x.ids[:2], -1) > x.index:
            out[id(x)] = "ToolResult recorded before its ToolIntent"
        elif x.event_type == "ModelReplied" and ctx.get(x.ids[:1], -1) > x.index:
            out[id(x)] = "ModelReplied recorded before its ContextBuilt (the request it answered)"
    return out


def _choose_alignment(events_a, events_b, eq: Equivalence):
    ia = extract_boundaries(events_a)
    ib = extract_boundaries(events_b)
    steps_i, paired_i = _pair(ia[0], ib[0])
    shorter = min(len(ia[0]), len(ib[0]))
    info = {"identity_pairs": paired_i}
    if eq.align == "identity" or (eq.align == "auto" and (shorter == 0 or paired_i * 2 >= shorter)):
        reason = ("declared by the equivalence" if eq.align == "identity" else
                  f"{paired_i} of the shorter log's {shorter} boundaries share invocation/operation identities")
        return "identity", reason, ia, ib, steps_i, paired_i, info
    oa = extract_boundaries(events_a, ordinal=True)
    ob = extract_boundaries(events_b, ordinal=True)
    steps_o, paired_o = _pair(oa[0], ob[0])
    info["ordinal_pairs"] = paired_o
    if eq.align == "ordinal" or paired_o > paired_i:
        reason = ("declared by the equivalence" if eq.align == "ordinal" else
                  f"only {paired_i} of the shorter log's {shorter} boundaries share identities, so identities are "
                  f"renamed by order of first appearance in each log (@1, @2, …), which pairs {paired_o}")
        reason += ("; this fallback aligns by (boundary kind, ordinal within kind) and assumes both runs issued "
                   "their calls in the same order")
        return "ordinal", reason, oa, ob, steps_o, paired_o, info
    reason = (f"only {paired_i} of {shorter} boundaries share identities, and ordinal alignment pairs no more "
              f"({paired_o}), so identities are kept")
    return "identity", reason, ia, ib, steps_i, paired_i, info


def _log_info(events: Sequence[Event], n_bounds: int, label: str | None) -> dict[str, Any]:
    return {"label": label, "trajectory_id": events[0].trajectory_id if events else None, "events": len(events),
            "boundaries": n_bounds}


def _check_events(events: Any, name: str) -> list[Event]:
    if isinstance(events, (str, bytes)) or not isinstance(events, Iterable):
        raise ConfigError(f"{name} must be a sequence of Event, got {type(events).__name__}")
    events = list(events)
    for e in events:
        if not isinstance(e, Event):
            raise ConfigError(f"{name} must hold kernel_lib.core.events.Event objects, found {type(e).__name__}")
    trajs = {e.trajectory_id for e in events}
    if len(trajs) > 1:
        raise ConfigError(f"{name} holds {len(trajs)} trajectories ({sorted(trajs)[:3]}); compare one run per side")
    fault = sequence_fault(events)
    if fault is not None:
        raise ConfigError(f"{name}: event {fault[0] + 1} {fault[1]}")
    return events


def sequence_fault(events: Sequence[Event]) -> tuple[int, str] | None:
    """The first event (index, what is wrong) whose sequence number repeats or skips (each must be
    the previous one plus 1) or whose event id repeats; None for a well-formed log. Such a log
    was damaged or spliced: its boundaries cannot be compared honestly."""
    ids: set[str] = set()
    prev = None
    for i, e in enumerate(events):
        n = e.sequence_number
        if prev is not None and n != prev + 1:
            how = "repeats" if n <= prev else "skips"
            return i, (f"(event_id {e.event_id!r}) has sequence_number {n} after {prev}: the log {how} sequence "
                       "numbers, so it is damaged or spliced and cannot be compared")
        if e.event_id in ids:
            return i, (f"repeats event_id {e.event_id!r}: the log is damaged or spliced and cannot be compared")
        ids.add(e.event_id)
        prev = n
    return None


def _walk_pairs(pairs, eq: Equivalence, ba, bb, missing: list[dict[str, Any]],
                unrec: dict[tuple, dict[str, Any]]) -> tuple[list[Step], dict[str, dict[str, Any]]]:
    """One :class:`Step` per aligned pair, in A's order: compared where both logs hold the
    boundary, marked missing (past a log's end) or one-sided otherwise. Evidence gaps go to
    ``missing`` and unrecorded requests to ``unrec`` as they are met; a boundary a log records in a
    causally impossible order is noted in ``missing`` and not counted as verified. Returns the steps
    and, per log that ends early, its end-of-log item (with a ``count`` of boundaries past the end)."""
    steps: list[Step] = []
    last_pos = {"A": -1, "B": -1}
    for pos, (a, b) in enumerate(pairs):
        if a is not None:
            last_pos["A"] = pos
        if b is not None:
            last_pos["B"] = pos
    max_b_index = -1
    prev_key_b = None
    faults = {"A": _causal_faults(ba), "B": _causal_faults(bb)}
    ends: dict[str, dict[str, Any]] = {}
    for pos, (a, b) in enumerate(pairs):
        one = a or b
        st = Step(one.key, one.category, one.event_type, a, b)
        if a is not None and b is not None:
            if a.event_type == "ContextBuilt":
                _compare_input(st, eq, missing)
                if not (a.replied and b.replied):
                    _compare_request(st, eq, unrec)
            else:
                _compare_value(st, eq, unrec)
            if eq.strict_order:
                if b.index < max_b_index:
                    st.status = "mismatch"
                    st.diff = [f"order: B recorded this boundary before {prev_key_b}, A after it", *st.diff]
                    st.differing_fields = [*st.differing_fields, "(recorded order)"]
                elif b.index > max_b_index:
                    max_b_index, prev_key_b = b.index, b.key
            _note_request(st, unrec)
        else:
            present, absent = ("A", "B") if a is not None else ("B", "A")
            st.a_value = eq.normalize(a.event_type, a.value) if a else None
            st.b_value = eq.normalize(b.event_type, b.value) if b else None
            if pos > last_pos[absent]:
                st.status = "missing"
                st.note = f"log {absent} ends before this boundary"
                if absent in ends:
                    ends[absent]["count"] += 1
                else:
                    ends[absent] = {"boundary": st.key, "side": absent, "count": 1,
                                    "what": f"log {absent} ends before this boundary",
                                    "consequence": "a truncated log and a run that stopped look alike here; the "
                                                   "boundaries past its end cannot be compared"}
            else:
                st.status = "mismatch"
                st.differing_fields = ["(presence)"]
                st.diff = [f"present in {present} only: log {absent} records no {one.event_type} with this identity "
                           f"({'/'.join(one.ids) or 'no id'}) but goes on past this point"]
        for side, x in (("A", a), ("B", b)):
            why = faults[side].get(id(x)) if x is not None else None
            if why is None:
                continue
            missing.append({"boundary": st.key, "side": side, "what": f"causally impossible order in log {side}: "
                            f"{why} (invalid evidence)",
                            "consequence": "the recorded order cannot be the order things happened, so the log is "
                                           "damaged or reordered; this boundary is not counted as verified"})
            if st.verified:
                st.status = "undetermined"
                st.note = f"causally impossible order in log {side}: {why}"
        steps.append(st)
    return steps, ends


def _verified_prefix(steps: list[Step]) -> int:
    """How many steps from the start are verified, up to the first that is not."""
    prefix = 0
    for s in steps:
        if not s.verified:
            break
        prefix += 1
    return prefix


def _verdict(steps: list[Step], first: Step | None, prefix: int) -> str:
    """The report's verdict from the first mismatch and the verified prefix."""
    if first is not None:
        return "diverged"
    if not steps:
        return "nothing_compared"
    if prefix == len(steps):
        return "equivalent"
    return "equivalent_prefix"


def locate_divergence(events_a: Sequence[Event], events_b: Sequence[Event], equivalence: Equivalence | None = None,
                      *, label_a: str | None = None, label_b: str | None = None) -> DivergenceReport:
    """Compare two executions boundary by boundary and report the earliest mismatch (§11.7.1).

    Args:
        events_a, events_b: the events of one trajectory each, in log order (e.g. from
            :func:`kernel_lib.log.load_events`). A is the reference: steps follow A's order.
        equivalence: the declared relation (default: :class:`Equivalence` ``()``, exact).
        label_a, label_b: names for the logs in the report (e.g. their paths).

    Returns:
        A :class:`DivergenceReport`: last verified boundary, first mismatch and its table 6
        category, identical evidence, later differences, missing evidence, and what the result
        does and does not establish.

    Raises:
        ConfigError: an argument is not a sequence of :class:`Event` of one trajectory.
    """
    eq = equivalence if equivalence is not None else Equivalence()
    if not isinstance(eq, Equivalence):
        raise ConfigError(f"equivalence must be an Equivalence, got {type(eq).__name__}")
    events_a = _check_events(events_a, "events_a")
    events_b = _check_events(events_b, "events_b")
    method, reason, (ba, sa), (bb, sb), pairs, paired, info = _choose_alignment(events_a, events_b, eq)

    missing: list[dict[str, Any]] = []
    unrec: dict[tuple, dict[str, Any]] = {}
    steps, ends = _walk_pairs(pairs, eq, ba, bb, missing, unrec)
    _note_unsettled(steps, ba, bb, missing)
    for item in ends.values():
        n = item.pop("count")
        item["what"] = f"log {item['side']} ends before this boundary ({n} boundar{'y' if n == 1 else 'ies'} of the " \
                       "other log lie past its end)"
        missing.append(item)
    for item in unrec.values():
        item = dict(item)
        n = item.pop("count")
        item["what"] += f" at {n} boundar{'y' if n == 1 else 'ies'}, first here"
        missing.append(item)

    identical = [s for s in steps if s.verified]
    mismatches = [s for s in steps if s.status == "mismatch"]
    first = mismatches[0] if mismatches else None
    prefix = _verified_prefix(steps)
    last_verified = steps[prefix - 1] if prefix else None
    halted = steps[prefix] if prefix < len(steps) and steps[prefix].status != "mismatch" else None
    verdict = _verdict(steps, first, prefix)

    context = _compare_context(sa, sb, eq)
    alignment = {"method": method, "reason": reason, "paired": paired,
                 "a_only": sum(1 for s in steps if s.b is None), "b_only": sum(1 for s in steps if s.a is None), **info}
    rep = DivergenceReport(
        log_a=_log_info(events_a, len(ba), label_a), log_b=_log_info(events_b, len(bb), label_b), equivalence=eq,
        alignment=alignment, steps=steps, verdict=verdict, last_verified_boundary=last_verified, halted_by=halted,
        first_mismatch=first, identical=identical, differences=mismatches[1:], missing_evidence=missing,
        context_differences=context, establishes=[], does_not_establish=[], verified_prefix=prefix)
    rep.establishes, rep.does_not_establish = _claims(rep, steps)
    return rep


def _note_request(st: Step, agg: dict) -> None:
    if st.event_type != "ModelReplied":
        return
    for side, x in (("A", st.a), ("B", st.b)):
        if x is not None and x.value.get("request") is None:
            _tally(agg, st, side, "no ContextBuilt for this invocation (the request it answered)",
                   "whether the two calls had the same model and decoding parameters cannot be checked")


def _note_unsettled(steps: list[Step], ba: list[Boundary], bb: list[Boundary], missing: list[dict[str, Any]]) -> None:
    """Paired tool intents with no observation on a side: the outcome cannot be compared there."""
    res = {side: {x.ids[:2] for x in bs if x.event_type == "ToolResult"} for side, bs in (("A", ba), ("B", bb))}
    for st in steps:
        if st.event_type == "ContextBuilt" and st.a is not None and st.b is not None:
            lacking = [s for s, x in (("A", st.a), ("B", st.b)) if not x.replied]
            if lacking:
                missing.append({"boundary": st.key, "side": ", ".join(lacking),
                                "what": "no ModelReplied recorded for this invocation (in doubt or never answered)",
                                "consequence": "its model response cannot be compared; only the delivered input and "
                                               "the request (model, request_config) were"})
            continue
        if st.event_type != "ToolIntent" or st.a is None or st.b is None:
            continue
        lacking = [s for s, x in (("A", st.a), ("B", st.b)) if x.ids[:2] not in res[s]]
        if lacking:
            missing.append({"boundary": st.key, "side": ", ".join(lacking),
                            "what": "no ToolResult recorded for this attempt (in doubt or never observed)",
                            "consequence": "its tool observation cannot be compared"})


def _compare_context(sa: list[Boundary], sb: list[Boundary], eq: Equivalence) -> list[dict[str, Any]]:
    out = []
    pairs, _ = _pair(sa, sb)
    for a, b in pairs:
        one = a or b
        item = {"item": one.key, "bears_on": one.category, "a": a.where() if a else None,
                "b": b.where() if b else None, "diff": []}
        if a is None or b is None:
            item["diff"] = [f"present in {'A' if a else 'B'} only"]
            out.append(item)
            continue
        va, vb = eq.normalize(a.event_type, a.value), eq.normalize(b.event_type, b.value)
        if not _equal(va, vb, eq.cost_tolerance_usd):
            # supporting evidence (the configuration a divergence may come from) is shown in full
            _diff(va, vb, "", item["diff"], eq.cost_tolerance_usd, full=True)
            item["differences"] = _differences(va, vb, "", eq.cost_tolerance_usd)
            out.append(item)
    return out


# ------------------------------------------------------------------------------------------------
# what the result establishes (§11.7.2)
# ------------------------------------------------------------------------------------------------


def _prior(steps: list[Step], fm: Step, key: str) -> Step | None:
    for s in steps:
        if s is fm:
            return None
        if s.key == key:
            return s
    return None


def _config_claims(rep: DivergenceReport, fm: Step) -> list[str]:
    """Sentences for a first mismatch that a recorded configuration difference, or a run time
    alone, may explain."""
    yes = []
    config = [c for c in rep.context_differences if c.get("differences")
              and (c["item"].startswith("RuntimeInput config/") or c["bears_on"] == "initial state")]
    if config:
        paths = "; ".join(f"{c['item']}: " + ", ".join(d["path"] for d in c["differences"]) for c in config)
        yes.append(f"The recorded configuration differs between the runs ({paths}); the supporting evidence shows "
                   "each differing value in full, to be read before the first mismatch is blamed on the harness "
                   "code, the model or the tool.")
    if fm.a is not None and fm.b is not None and not rep.equivalence.ignore_durations:
        leaves = _differences(fm.a_value, fm.b_value, "", rep.equivalence.cost_tolerance_usd)
        if leaves and all(is_duration_key(re.sub(r"\[\d+\]$", "", d["path"]).rsplit(".", 1)[-1]) for d in leaves):
            yes.append(f"The first mismatch differs only in keys that name durations "
                       f"({', '.join(d['path'] for d in leaves)}): a run time, not a different result; declare "
                       "Equivalence(ignore_durations=True) (--ignore-durations) if run times are not compared.")
    return yes


def _claims(rep: DivergenceReport, steps: list[Step]) -> tuple[list[str], list[str]]:
    yes: list[str] = []
    no: list[str] = []
    eqtxt = "exact canonical equality" if rep.equivalence.exact else "the declared equivalence"
    if not rep.equivalence.strict_order:
        eqtxt += " of the compared fields (the recorded order of paired boundaries was not compared)"
    fm = rep.first_mismatch
    n_before = steps.index(fm) if fm else len(steps)
    verified_before = sum(1 for s in steps[:n_before] if s.verified)
    digest_before = sum(1 for s in steps[:n_before] if s.status == "verified_by_digest")
    unverified_before = n_before - verified_before
    after = (" at the first boundary compared" if n_before == 0 else
             f", while all {n_before} earlier boundar{'y agrees' if n_before == 1 else 'ies agree'}"
             if not unverified_before else
             f"; of the {n_before} earlier boundaries {verified_before} agree and {unverified_before} could not be "
             "compared")
    if fm is None:
        if not steps:
            yes.append("Nothing: neither log holds a boundary of table 6 (no model call, decision or tool "
                       "observation).")
        elif rep.verdict == "equivalent":
            yes.append(f"Under {eqtxt}, all {len(steps)} aligned boundaries agree: in the fields compared, the two "
                       "logs record the same delivered inputs, replies, harness decisions and tool observations.")
        else:
            yes.append(f"Under {eqtxt}, no compared boundary differs; {len(rep.identical)} of {len(steps)} were "
                       "verified, and the rest could not be compared (see missing evidence).")
        no.append("That the runs agree in anything the equivalence ignores or the log never recorded (server-side "
                  "model state, unrecorded clock or environment inputs, the world outside the recorded snapshots).")
        no.append("That running either execution again would reproduce it.")
    else:
        cat = fm.category
        if fm.a is None or fm.b is None:
            present = "A" if fm.a is not None else "B"
            yes.append(f"Log {present} records a {cat} boundary ({fm.key}) that the other log lacks while both go on: "
                       f"the runs took different paths at this point{after}.")
        elif cat == ASSEMBLED_INPUT:
            how = "their bytes differ; only a digest survives on one side" if "delivered_input_sha256" in \
                fm.differing_fields else "their texts differ"
            if "request" in fm.differing_fields:
                yes.append(f"The invocations at {fm.key} were assembled with a different model or decoding parameters "
                           f"(request){after}: a configuration change, not sampling.")
            if fm.differing_fields != ["request"]:
                yes.append(f"The invocations at {fm.key} did not receive the same recorded input ({how}){after}: "
                           "the change arose in context assembly or in what it drew on (prompt template, "
                           "compaction, source or workspace versions) before the model was called.")
            no.append("Which assembly step or dependency changed: inspect the diff and the provenance of the "
                      "changed text.")
            no.append("Whether the changed input caused any later difference; that is a causal question for a "
                      "controlled experiment.")
        elif cat == MODEL_RESPONSE:
            # the request this reply answered (for a retry: that attempt's own request)
            inp = next((s for s in steps[:n_before] if s.event_type == "ContextBuilt" and s.a is not None
                        and s.key == fm.a.answers), None) if fm.a.answers else None
            request_differs = ("request" in fm.differing_fields and fm.a.value.get("request") is not None
                               and fm.b.value.get("request") is not None)
            if request_differs:
                yes.append(f"The calls at {fm.key} were sent with a different model or decoding parameters, so their "
                           "replies may differ for that reason alone: a configuration change, not sampling.")
            elif inp is not None and inp.note.startswith("delivered input ignored"):
                yes.append(f"The replies at {fm.key} differ with the same request (model, decoding parameters); the "
                           "delivered input was left out of the comparison by the equivalence, so it may account "
                           "for the difference.")
            elif inp is not None and inp.verified:
                by = " (by digest only)" if inp.status == "verified_by_digest" else ""
                req = ("and the request (model, decoding parameters)" if fm.a.value.get("request") is not None
                       and fm.b.value.get("request") is not None else "(the request itself is not recorded)")
                yes.append(f"The delivered input{by} {req} of {fm.key} are identical in both logs{after}, yet the "
                           "replies differ: sampling nondeterminism, a server-side model change or unrecorded service "
                           "state; not a harness defect at or before this boundary.")
                no.append("That everything the provider saw was identical: tool schemas or provider settings outside "
                          "the recorded request may still differ.")
            else:
                yes.append(f"The replies at {fm.key} differ; the input of this invocation was not verified equal, so "
                           "the cause may lie in the input as well as in the model.")
            no.append("The root cause inside the provider: server-side model revisions, batching and floating-point "
                      "reduction order are not in the log.")
        elif cat == HARNESS_DECISION:
            yes.append(f"The harness decided differently at {fm.key} ({', '.join(fm.differing_fields) or 'see diff'})"
                       f"{after}.")
            no.append("Whether the difference is an intended policy or parser change, a defect, or the effect of an "
                      "input the log did not capture (host clock, environment variable, feature flag).")
            if any(c["bears_on"] == HARNESS_DECISION for c in rep.context_differences):
                yes.append("Recorded runtime inputs (clock, random, configuration) also differ; see the supporting "
                           "evidence before blaming the harness code.")
        elif cat == TOOL_OBSERVATION:
            intent = _prior(steps, fm, fm.key.replace("ToolResult", "ToolIntent", 1).split(" #")[0])
            if intent is not None and intent.verified:
                yes.append(f"The same operation attempt (same tool, arguments and target snapshot in its intent) "
                           f"returned different evidence at {fm.key}{after}: the tool or its environment behaved "
                           "differently.")
            else:
                yes.append(f"The recorded observations at {fm.key} differ; the intent of this attempt was not "
                           "verified equal, so the requests may not have been comparable.")
            no.append("That the environments were comparable beyond what the log records (service configuration, "
                      "dependency versions, external services), or whether the tool is nondeterministic.")
        if rep.differences:
            no.append(f"That the {len(rep.differences)} later differences are independent faults: every boundary "
                      "after the first mismatch may only be its consequence.")
    if digest_before:
        no.append(f"What text {digest_before} boundaries delivered: they were confirmed equal by SHA-256 only.")
    if rep.halted_by is not None and (fm is None or steps.index(rep.halted_by) < n_before):
        no.append(f"Agreement past {rep.halted_by.key}: the verified prefix stops there ({rep.halted_by.note}); "
                  "a divergence hidden there would go unseen.")
    if rep.alignment["method"] == "ordinal":
        no.append("Correct pairing if the runs issued their calls in different orders: ordinal alignment assumes "
                  "the same order, so a reordering shows up as a mismatch.")
    start = [c for c in rep.context_differences if c["bears_on"] == "initial state"]
    if start:
        yes.append(f"The recorded task start differs ({start[0]['diff'][0] if start[0]['diff'] else 'TaskStarted'}); "
                   "check that the runs began from the same task and configuration before reading further.")
    if fm is not None:
        yes += _config_claims(rep, fm)
    if not rep.equivalence.exact:
        no.append("Equality in what the equivalence ignores or normalizes: "
                  + "; ".join(rep.equivalence.describe()[1:-1]) + ".")
    return yes, no
