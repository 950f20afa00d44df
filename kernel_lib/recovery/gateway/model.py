"""The gateway's vocabulary: what a call to a dependency produced (:class:`CallOutcome`), how the
breaker reads it (:func:`classify_outcome` -> :class:`Verdict`), and what the agent is shown
(:class:`Observation`, with a stable ``code``) (Failure Recovery, "Tool Circuit Breakers",
table 8, O_synthetic = <ERR_CIRCUIT_OPEN, dependency_id, T_cooldown_remaining>; tables 9-10).

Pure data and pure functions; no I/O.

**Transport failures only.** A breaker protects a dependency from load, so it counts what says
the dependency (or the path to it) is unwell: a timeout, an HTTP 5xx, an HTTP 429 (rate limit),
a refused or reset connection, a malformed frame (a body that does not decode, a broken HTTP
exchange). What the tool says about the *request* -- "record not found", a 404, a 409, a
validation error, an exception the tool raised on purpose -- is a domain error: the dependency
answered, so the breaker records a success, and the agent still sees the error. The rule is
:func:`classify_outcome`; pass another function of the same shape to the breaker or the gateway
to replace it (``classify=``).

The three records are slots dataclasses without ``frozen`` (building a frozen one costs several
times more, and one of each is built per call): treat them as values, never change one.

Observation codes (:data:`OBSERVATION_CODES`) are stable strings; a synthetic observation
(``synthetic=True``) is made by the gateway without contacting the dependency, and
``dispatched`` says whether the call reached the dependency at all.
"""

from __future__ import annotations

import errno
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["OK", "ERR_TOOL", "ERR_TIMEOUT", "ERR_SERVER", "ERR_RATE_LIMITED", "ERR_TRANSPORT", "ERR_MALFORMED",
           "ERR_CIRCUIT_OPEN", "ERR_BULKHEAD_FULL", "ERR_RESOURCE_EXHAUSTED", "OBSERVATION_CODES",
        "SYNTHETIC_CODES", "FAILURE_KINDS", "CallOutcome", "Verdict", "Observation",
           "Classifier", "classify_outcome", "status_of"]

OK = "OK"                                       # the tool answered and did what was asked
ERR_TOOL = "ERR_TOOL"                           # the tool answered with a domain error (breaker: success)
ERR_TIMEOUT = "ERR_TIMEOUT"                     # no answer within the call timeout (breaker: failure)
ERR_SERVER = "ERR_SERVER"                       # HTTP 5xx (breaker: failure)
ERR_RATE_LIMITED = "ERR_RATE_LIMITED"           # HTTP 429 (breaker: failure)
ERR_TRANSPORT = "ERR_TRANSPORT"                 # refused / reset connection, network error (breaker: failure)
ERR_MALFORMED = "ERR_MALFORMED"                 # a frame that does not decode (breaker: failure)
ERR_CIRCUIT_OPEN = "ERR_CIRCUIT_OPEN"           # synthetic: the breaker is open (or half-open, probe in flight)
ERR_BULKHEAD_FULL = "ERR_BULKHEAD_FULL"         # synthetic: all slots busy (no queue, or the wait timed out)
ERR_RESOURCE_EXHAUSTED = "ERR_RESOURCE_EXHAUSTED"   # synthetic: the domain's queue is full

OBSERVATION_CODES = (OK, ERR_TOOL, ERR_TIMEOUT, ERR_SERVER, ERR_RATE_LIMITED, ERR_TRANSPORT, ERR_MALFORMED,
                     ERR_CIRCUIT_OPEN, ERR_BULKHEAD_FULL, ERR_RESOURCE_EXHAUSTED)
#: codes the gateway makes without contacting the dependency
SYNTHETIC_CODES = (ERR_CIRCUIT_OPEN, ERR_BULKHEAD_FULL, ERR_RESOURCE_EXHAUSTED)
#: verdict kinds that count as breaker failures, and the code each maps to
FAILURE_KINDS = {"timeout": ERR_TIMEOUT, "server_error": ERR_SERVER, "rate_limited": ERR_RATE_LIMITED,
                 "transport": ERR_TRANSPORT, "malformed": ERR_MALFORMED}


@dataclass(slots=True)
class CallOutcome:
    """What one call produced, as the classifier sees it.

    ``value``: what the tool returned (None when it raised); ``error``: the exception it raised (or
    None); ``timed_out``: the gateway gave up waiting after the call timeout (the call may still be
    running); ``duration_s``: from dispatch to the answer or the timeout (s, >= 0)."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    duration_s: float = 0.0


@dataclass(slots=True)
class Verdict:
    """The breaker's reading of one outcome: ``failure`` (counted in the window's failure rate),
    ``kind`` (``ok``, ``domain_error``, or a key of :data:`FAILURE_KINDS`), the observation
    ``code``, and the HTTP ``status`` when one was seen."""

    failure: bool
    kind: str
    code: str
    status: int | None = None


Classifier = Callable[[CallOutcome], Verdict]

# exception class names that mean "the frame did not decode" or "the HTTP exchange broke", matched by
# name so that no client library has to be imported (json, msgspec, httpx, http.client, h11, urllib3)
_MALFORMED_NAMES = frozenset({
    "JSONDecodeError", "DecodeError", "DecodingError", "RemoteProtocolError", "LocalProtocolError",
    "ProtocolError", "IncompleteRead", "BadStatusLine", "LineTooLong", "UnknownProtocol", "InvalidChunkLength",
    "HTTPException", "ContentDecodingError", "ChunkedEncodingError", "InvalidHeader", "MalformedFrameError",
    "ResponseNotChunked", "UnicodeDecodeError",
})
_TIMEOUT_NAMES = frozenset({"TimeoutError", "timeout", "TimeoutException", "ReadTimeout", "ConnectTimeout",
                            "WriteTimeout", "PoolTimeout", "Timeout", "DeadlineExceeded"})
_TRANSPORT_NAMES = frozenset({"ConnectError", "ConnectionError", "NetworkError", "ReadError", "WriteError",
                              "CloseError", "ProxyError", "ServiceDownError", "BrokerUnreachableError", "gaierror",
                              "herror"})
_NETWORK_ERRNOS = frozenset({errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE,
                             errno.ENETUNREACH, errno.ENETDOWN, errno.ENETRESET, errno.EHOSTUNREACH, errno.EHOSTDOWN})


_PLAIN = frozenset({str, bytes, int, float, bool, list, tuple})


def status_of(obj: Any) -> int | None:
    """The HTTP status an object carries, or None: an ``int`` attribute ``status_code`` or
    ``status`` (httpx / requests / aiohttp responses), a ``response`` attribute holding one (an
    ``httpx.HTTPStatusError``), or a mapping with an int ``status_code`` / ``status`` key. Only
    values in 100..599 count."""
    for candidate in (obj, getattr(obj, "response", None)):
        if candidate is None:
            continue
        if isinstance(candidate, Mapping):
            values = (candidate.get("status_code"), candidate.get("status"))
        else:
            values = (getattr(candidate, "status_code", None), getattr(candidate, "status", None))
        for v in values:
            if type(v) is int and 100 <= v <= 599:
                return v
    return None


def _names(exc: BaseException) -> set[str]:
    return {c.__name__ for c in type(exc).__mro__}


def classify_outcome(outcome: CallOutcome) -> Verdict:
    """The declared classification (module docstring): transport failures count, domain errors
    do not. In order:

    1. ``timed_out``, or an exception that is a timeout (``TimeoutError``, ``socket.timeout``,
       httpx's ``TimeoutException`` family, by class name) -> ``timeout``;
    2. an HTTP status on the value or the exception: 429 -> ``rate_limited``; 5xx ->
       ``server_error``; any other status -> ``ok`` (2xx/3xx, with a value) or ``domain_error``
       (4xx, or raised);
    3. an exception that is a malformed frame (``json.JSONDecodeError``, ``msgspec.DecodeError``,
       ``http.client.HTTPException``, httpx's protocol and decoding errors, ...) -> ``malformed``;
    4. a network exception (``ConnectionError`` and its subclasses, ``OSError`` with a network
       errno, httpx's ``ConnectError`` / ``NetworkError``) -> ``transport``;
    5. a kernel_lib error whose ``retryable`` is True (nothing was applied, may succeed later) ->
       ``transport``;
    6. any other exception -> ``domain_error`` (the tool answered; the breaker records a success);
    7. no exception -> ``ok``.

    A ``KeyboardInterrupt`` / ``SystemExit`` is never passed here (the gateway re-raises them).
    """
    err = outcome.error
    if err is None and not outcome.timed_out:
        value = outcome.value
        t = type(value)
        if value is None or t in _PLAIN:               # the common case, without attribute probes
            return Verdict(False, "ok", OK)
        if t is dict and "status" not in value and "status_code" not in value:
            return Verdict(False, "ok", OK)
    if outcome.timed_out:
        return Verdict(True, "timeout", ERR_TIMEOUT)
    if err is not None and (_names(err) & _TIMEOUT_NAMES):
        return Verdict(True, "timeout", ERR_TIMEOUT)
    status = status_of(err if err is not None else outcome.value)
    if status is not None:
        if status == 429:
            return Verdict(True, "rate_limited", ERR_RATE_LIMITED, status)
        if status >= 500:
            return Verdict(True, "server_error", ERR_SERVER, status)
        if err is None and status < 400:
            return Verdict(False, "ok", OK, status)
        return Verdict(False, "domain_error", ERR_TOOL, status)
    if err is None:
        return Verdict(False, "ok", OK)
    names = _names(err)
    if names & _MALFORMED_NAMES:
        return Verdict(True, "malformed", ERR_MALFORMED)
    if isinstance(err, ConnectionError) or names & _TRANSPORT_NAMES or (
            isinstance(err, OSError) and err.errno in _NETWORK_ERRNOS):
        return Verdict(True, "transport", ERR_TRANSPORT)
    if getattr(err, "retryable", False) is True:     # a kernel_lib error: nothing applied, may succeed later
        return Verdict(True, "transport", ERR_TRANSPORT)
    return Verdict(False, "domain_error", ERR_TOOL)


def _brief(value: Any, limit: int = 500) -> str:
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass(slots=True)
class Observation:
    """What the agent is shown for one tool call through the gateway (plain data).

    Fields:
        code: one of :data:`OBSERVATION_CODES` (stable; branch on it, not on ``message``).
        dependency_id: the dependency called (the breaker's key).
        domain: the bulkhead domain (``local``, ``internal_rpc``, ``external_api`` or a custom one).
        synthetic: made by the gateway without contacting the dependency (fast fail).
        dispatched: the call reached the dependency (False for every synthetic observation).
        message: one line for the model's context (a synthetic one tells it not to retry now).
        value: what the tool returned (real observations; None otherwise).
        error: the exception's class and text when the tool raised (else None).
        status: the HTTP status seen, if any.
        failure: the breaker counted this outcome as a failure (transport criteria).
        breaker_state: the breaker's state after the call (``closed``/``open``/``half_open``;
            None when the domain has no breaker).
        cooldown_remaining_s: with ERR_CIRCUIT_OPEN: seconds until the breaker admits a probe
            (0.0 when half-open with its probe in flight).
        duration_s: time spent in the gateway for this attempt (s), queue wait included.
        queue_wait_s: time spent waiting for a bulkhead slot (s).
        attempt: 0 for the first call, k+1 for retry k.
        retry_after_s: the backoff's delay before the next retry when the gateway advises one,
            else None (no retry: success, a domain error, a synthetic fast fail, or no budget left).
    """

    code: str
    dependency_id: str
    domain: str
    synthetic: bool
    dispatched: bool
    message: str
    value: Any = None
    error: str | None = None
    status: int | None = None
    failure: bool = False
    breaker_state: str | None = None
    cooldown_remaining_s: float | None = None
    duration_s: float = 0.0
    queue_wait_s: float = 0.0
    attempt: int = 0
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        """True for ``OK``."""
        return self.code == OK

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``value`` shortened to text when it is not plain JSON)."""
        value = self.value
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            value = _brief(value)
        out = {"code": self.code, "dependency_id": self.dependency_id, "domain": self.domain,
               "synthetic": self.synthetic, "dispatched": self.dispatched, "message": self.message, "value": value,
               "error": self.error, "status": self.status, "failure": self.failure,
               "breaker_state": self.breaker_state, "cooldown_remaining_s": self.cooldown_remaining_s,
               "duration_s": self.duration_s, "queue_wait_s": self.queue_wait_s, "attempt": self.attempt,
               "retry_after_s": self.retry_after_s}
        for k in ("cooldown_remaining_s", "duration_s", "queue_wait_s", "retry_after_s"):
            v = out[k]
            if isinstance(v, float) and not math.isfinite(v):
                out[k] = None
        return out

    def context_text(self) -> str:
        """The line the model reads: ``[CODE] message`` (the value follows for a real answer)."""
        if self.code == OK:
            return _brief(self.value)
        return f"[{self.code}] {self.message}"
