"""Gate 1 of the recovery policy D(Ω): the error taxonomy (Failure Recovery, figure 2, "Error
Taxonomy and Diagnosability"; table 4's "optimal domain" row).

:func:`classify_error` puts one error observation o_t^err into one of four classes:

* ``transient`` — the environment, not the request, was at fault; the same request may succeed
  later unchanged (TRANSIENT_RETRY with backoff);
* ``semantic`` — a deterministic fault of the request itself that its error text diagnoses; the
  same request fails again, a corrected one may not (a candidate for FORWARD_REPAIR);
* ``fatal`` — an invariant no repair can bypass (credentials, exhausted resources, the sandbox or
  a safety policy): compensate before the pivot, escalate after it;
* ``unclassified`` — no rule matched, or the evidence is contradictory. The classifier never
  guesses ``transient``: D(Ω) treats this class as the safe case (rollback/escalation).

Rules, in the order they are tried (first match decides). Structured errors of our tool services
(``{http_status, error, retryable, reason, retry_after_s, partial}``, see
:mod:`kernel_lib.sim.services`) go through the status rules first; every text (a service's
``error`` message, an imported log's ``observation``, a traceback, pytest or shell output) goes
through the text rules. For text holding a Python exception line, only that line (type and
message) is matched, so the source listing around it cannot trigger a rule.

=====================  ============  ==========================================================
rule                   class         evidence
=====================  ============  ==========================================================
credentials            fatal         401, 403, ``lease_*`` reasons (revoked, expired, unknown
                                     lease); "unauthorized", "forbidden", invalid API key/token,
                                     ``AuthenticationError``
policy_violation       fatal         a safety filter refused the request (``content_filter``,
                                     ``ResponsibleAIPolicyViolation``): repairing it means
                                     working around a safety policy, which the runtime may not do
resource_exhaustion    fatal         ``MemoryError``, out of memory / OOM, "No space left on
                                     device", ENOSPC, disk full, quota exceeded (also a 429 that
                                     says quota: OpenAI's ``insufficient_quota`` is billing, not
                                     rate), too many open files
sandbox_violation      fatal         ``PermissionError``, "Permission denied", "Operation not
                                     permitted", EACCES/EPERM, seccomp, read-only file system
partial_effect         unclassified  a 5xx that the service itself marks ``retryable: false``
                                     with ``partial: true``: an effect exists; retrying is not
                                     known to be safe and no repair of the request undoes it
rate_limited           transient     429, "rate limit", "too many requests", ``RateLimitError``
                                     (``retry_after_s`` kept)
timeout                transient     408, 504, a transport timeout (``TimeoutError``, "timed
                                     out", ``ReadTimeout``, "deadline exceeded")
lock_contention        transient     423; "database is locked", "resource busy", EBUSY/EAGAIN,
                                     "lock wait timeout", "deadlock detected", ``index.lock``;
                                     a 409 the service marks ``retryable: true``
server_unavailable     transient     502, 503, 504, and a 500 not marked final; "service
                                     unavailable", "bad gateway", connection refused/reset
retryable_declared     transient     any other answer the service marks ``retryable: true``
syntax_error           semantic      ``SyntaxError``, ``IndentationError``, ``JSONDecodeError``,
                                     "invalid syntax", "unexpected indent", YAML/parse errors
missing_parameter      semantic      "missing N required positional argument", "field
                                     required", "is a required property", "unexpected keyword
                                     argument", "missing parameter"
command_not_found      semantic      "command not found" (shell), exit status 127
not_found              semantic      404, ``FileNotFoundError``, "No such file or directory",
                                     ENOENT, "... not found", "does not exist"
code_error             semantic      ``ImportError``, ``ModuleNotFoundError``,
                                     ``AttributeError``, ``TypeError``, ``NameError``,
                                     ``KeyError``, ``IndexError``, ``ValueError``,
                                     ``AssertionError``, ``ZeroDivisionError``, ...
validation             semantic      400, 422, a 409 the service marks final (a state conflict
                                     that meets the same request again: another account owns the
                                     domain, the idempotency key was reused), "validation",
                                     "schema", "invalid", a domain rule's refusal ("not enough
                                     seats", "does not add up", "cannot be used")
(none)                 unclassified  nothing above matched (reason says so)
=====================  ============  ==========================================================

Why 5xx is transient: our services answer 5xx only when the server side could not serve a valid
request (an injected outage, the credential broker unreachable) and then they apply nothing and
say ``retryable: true``; the dispatch gate's idempotency key makes the unchanged request safe to
send again. The chapter's gate 1 puts network partitions in the same class. A 5xx the service
marks final is not treated so (rule ``partial_effect`` or the unclassified case).

Why fatal is tried first: a message can carry two signals ("429: you exceeded your current
quota"), and the more dangerous reading must win; a retry of an exhausted quota only burns time.

Pure; raises :class:`~kernel_lib.errors.RecoveryPolicyError` for an error of an unsupported kind
(see :func:`~kernel_lib.recovery.signatures.extract_signature_parts`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kernel_lib.errors import RecoveryPolicyError
from kernel_lib.recovery.signatures import extract_signature_parts

__all__ = ["ERROR_CLASSES", "ErrorClass", "ErrorClassification", "classify_error", "TEXT_RULES"]

ErrorClass = Literal["transient", "semantic", "fatal", "unclassified"]
ERROR_CLASSES: tuple[str, ...] = ("transient", "semantic", "fatal", "unclassified")


@dataclass(frozen=True)
class ErrorClassification:
    """Gate 1's answer. ``error_class`` (one of :data:`ERROR_CLASSES`); ``rule`` — the rule that
    decided (``credentials``, ``timeout``, ``syntax_error``, ... or ``no_rule`` /
    ``empty_error``); ``evidence`` — the status, reason or text the rule matched; ``reason`` — one
    sentence; ``retry_after_s`` — a 429's wait in seconds when the service gave one;
    ``http_status`` when there was one; ``failure_class`` — ``"<class>.<rule>"``, the key under
    which repair outcomes are counted (:class:`~kernel_lib.recovery.policy.RepairStats`)."""
    error_class: ErrorClass
    rule: str
    evidence: str
    reason: str
    retry_after_s: float | None = None
    http_status: int | None = None

    @property
    def failure_class(self) -> str:
        return f"{self.error_class}.{self.rule}"

    def as_dict(self) -> dict[str, Any]:
        return {"error_class": self.error_class, "rule": self.rule, "failure_class": self.failure_class,
                "evidence": self.evidence, "reason": self.reason, "retry_after_s": self.retry_after_s,
                "http_status": self.http_status}


def _rx(pattern: str, flags: int = re.IGNORECASE) -> re.Pattern[str]:
    return re.compile(pattern, flags)


#: The text rules, in order: ``(rule, class, pattern, one-line why)``.
TEXT_RULES: tuple[tuple[str, ErrorClass, re.Pattern[str], str], ...] = (
    ("credentials", "fatal", _rx(
        r"AuthenticationError|PermissionDeniedError|\bunauthori[sz]ed\b|\bforbidden\b|invalid[ _](?:api[ _]?key|"
        r"credentials?|token)|\b(?:lease|token|credentials?)[ _](?:revoked|expired)\b|capability lease refused|"
        r"\blease_(?:revoked|expired|unknown)"),
     "the credentials were revoked or are invalid: no repair of the request can restore them"),
    ("policy_violation", "fatal", _rx(r"content[_ ]filter|ResponsibleAIPolicyViolation|content management policy"),
     "a safety policy refused the request: repairing it would mean working around the policy"),
    ("resource_exhaustion", "fatal", _rx(
        r"\bMemoryError\b|out of memory|\bOOM\b|No space left on device|\bENOSPC\b|disk (?:is )?full|"
        r"quota (?:exceeded|exhausted)|insufficient_quota|exceeded your current quota|Too many open files"),
     "a hard resource is exhausted (memory, disk, quota): repair cannot create it"),
    ("sandbox_violation", "fatal", _rx(
        r"\bPermissionError\b|Permission denied|Operation not permitted|\bEACCES\b|\bEPERM\b|seccomp|"
        r"sandbox (?:violation|denied|escape)|Read-only file system"),
     "the sandbox refused the operation: the boundary is an invariant, not a bug to fix"),
    ("rate_limited", "transient", _rx(r"\b429\b|rate[ _-]?limit|too many requests|RateLimitError"),
     "rate limited: the same request succeeds after the window passes"),
    ("timeout", "transient", _rx(
        r"TimeoutError|\btimed out\b|\btimeout\b|ReadTimeout|ConnectTimeout|deadline exceeded|\b(?:408|504)\b"),
     "a timeout: the service or the network was slow, the request itself may be fine"),
    ("lock_contention", "transient", _rx(
        r"database is locked|resource (?:temporarily )?(?:busy|unavailable)|\bEBUSY\b|\bEAGAIN\b|"
        r"lock wait timeout|deadlock detected|could not obtain lock|index\.lock|StoreBusyError|\b423\b"),
     "lock contention: another writer holds the resource for now"),
    ("server_unavailable", "transient", _rx(
        r"service unavailable|bad gateway|\b50[23]\b|Connection(?:Refused|Reset|Aborted)Error|"
        r"connection (?:refused|reset|aborted)|APIConnectionError|InternalServerError|"
        r"temporary failure in name resolution"),
     "the server side could not serve the request now; nothing was applied"),
    ("syntax_error", "semantic", _rx(
        r"SyntaxError|IndentationError|TabError|JSONDecodeError|invalid syntax|unexpected indent|"
        r"unexpected EOF|YAMLError|ScannerError|ParserError|parse error|unmatched '[\])}]'|unterminated string"),
     "a syntax error: the text names what to fix"),
    ("missing_parameter", "semantic", _rx(
        r"missing \d+ required (?:positional |keyword-only )?arguments?|missing (?:required )?(?:parameter|field|"
        r"argument)|field required|is a required property|required (?:field|parameter|property)|"
        r"unexpected keyword argument"),
     "a missing or unexpected parameter: the text names it"),
    ("command_not_found", "semantic", _rx(r"command not found|exit (?:status|code) 127\b"),
     "the shell does not know the command: another command or an install step can fix it"),
    ("not_found", "semantic", _rx(
        r"FileNotFoundError|No such file or directory|\bENOENT\b|NotADirectoryError|IsADirectoryError|"
        r"\bnot found\b|does not exist|\b404\b|\bNotFoundError"),
     "something named in the request does not exist: the text names it"),
    ("code_error", "semantic", _rx(
        r"\b(?:ImportError|ModuleNotFoundError|AttributeError|TypeError|NameError|UnboundLocalError|KeyError|"
        r"IndexError|LookupError|ValueError|AssertionError|ZeroDivisionError|NotImplementedError|RecursionError|"
        r"OverflowError|UnicodeDecodeError|UnicodeEncodeError)\b", 0),
     "an exception of the code itself: the type and message diagnose it"),
    ("validation", "semantic", _rx(
        r"ValidationError|validation (?:error|failed)|\bschema\b|\b(?:400|422)\b|Bad Request|Unprocessable|"
        r"\binvalid\b|not enough|does not add up|cannot be used|is not allowed|must be"),
     "the request was rejected as invalid: the text says what the service expects"),
)


def _status_rule(status: int, err: Mapping[str, Any]) -> tuple[str, ErrorClass, str] | None:
    """The status rules for a service's structured error: ``(rule, class, why)`` or None to fall
    through to the text rules."""
    retryable = err.get("retryable")
    reason = err.get("reason") if isinstance(err.get("reason"), str) else ""
    if status in (401, 403) or reason.startswith("lease_"):
        return "credentials", "fatal", TEXT_RULES[0][3]
    if status == 429:
        return None if _quota(err) else ("rate_limited", "transient", TEXT_RULES[4][3])
    if status in (408, 504):
        return "timeout", "transient", TEXT_RULES[5][3]
    if status == 423 or (status == 409 and retryable is True):
        return "lock_contention", "transient", TEXT_RULES[6][3]
    if status >= 500:
        if retryable is False and err.get("partial"):
            return ("partial_effect", "unclassified",
                    "the service failed part way and says the request is final: an effect exists that a retry or "
                    "a repair does not undo, so this is left to compensation or an operator")
        if retryable is False:
            return ("final_server_error", "unclassified",
                    "a 5xx that the service marks final: not known to be transient, and not a fault of the request")
        return "server_unavailable", "transient", TEXT_RULES[7][3]
    if status == 404:
        return "not_found", "semantic", TEXT_RULES[11][3]
    if status in (400, 422) or (status == 409 and retryable is not True):
        return None   # the text decides between a policy refusal and an invalid request (validation)
    if retryable is True:
        return "retryable_declared", "transient", "the service says nothing was applied and the request may be retried"
    return None


def _quota(err: Mapping[str, Any]) -> bool:
    text = " ".join(str(err.get(k, "")) for k in ("error", "message", "reason", "code"))
    return bool(TEXT_RULES[2][2].search(text))


def _retry_after(err: Mapping[str, Any], text: str) -> float | None:
    v = err.get("retry_after_s")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
        return float(v)
    m = re.search(r"retry[ _-]after[\"']?\s*[:=]?\s*(\d+(?:\.\d+)?)", text, re.IGNORECASE)
    return float(m.group(1)) if m else None


def _text_of(error: Any) -> str:
    """The text the rules read: the deciding exception line when there is one, else all of it."""
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    if isinstance(error, Mapping):
        parts = [error[k] for k in ("error", "message", "detail", "observation", "reason", "code")
                 if isinstance(error.get(k), str)]
        return _text_of("\n".join(parts)) if parts else ""
    etype, _source, message = extract_signature_parts(error)
    if etype in ("text", "tool_error", "shell_error", "command_not_found"):
        return error
    return f"{etype}: {message}"


def classify_error(error: Any) -> ErrorClassification:
    """Gate 1: the class of ``error`` (see the module docstring for the rule table).

    ``error``: a tool service's structured error (a mapping with ``http_status`` or ``status``,
    ``error``, ``retryable``, ``reason``, ``retry_after_s``, ``partial``), an imported log's
    outcome (a mapping with ``observation``), a text (traceback, pytest, shell, a tool's
    ``Error: ...``) or an exception object. Returns an :class:`ErrorClassification`.
    Raises :class:`RecoveryPolicyError` for any other kind of value."""
    if not isinstance(error, (str, Mapping, BaseException)):
        raise RecoveryPolicyError(f"an error must be a service's error object, a text or an exception; "
                                  f"got {type(error).__name__}")
    err: Mapping[str, Any] = error if isinstance(error, Mapping) else {}
    raw_status = err.get("http_status", err.get("status"))
    status = raw_status if isinstance(raw_status, int) and not isinstance(raw_status, bool) else None
    if isinstance(error, Mapping) and status is None and not any(
            isinstance(error.get(k), str) for k in ("error", "message", "detail", "observation")):
        raise RecoveryPolicyError("an error object needs an integer http_status/status, or an error, message, "
                                  "detail or observation text")
    text = _text_of(error)
    if status is not None and 200 <= status < 300:
        return ErrorClassification("unclassified", "not_an_error", f"http_status {status}",
                                   f"http_status {status} is a success, not an error", http_status=status)
    if status is not None:
        hit = _status_rule(status, err)
        if hit is not None:
            rule, cls, why = hit
            reason = err.get("reason")
            evidence = f"http_status {status}" + (f", reason {reason}" if isinstance(reason, str) and reason else "")
            return ErrorClassification(cls, rule, evidence, why, _retry_after(err, text) if rule == "rate_limited"
                                       else None, status)
    if not text.strip():
        return ErrorClassification("unclassified", "empty_error", "", "the error carries no status and no text: "
                                   "nothing to classify", http_status=status)
    for rule, cls, pattern, why in TEXT_RULES:
        m = pattern.search(text)
        if m:
            evidence = (f"http_status {status}; " if status is not None else "") + f"matched {m.group(0)!r}"
            return ErrorClassification(cls, rule, evidence, why,
                                       _retry_after(err, text) if rule == "rate_limited" else None, status)
    if status is not None and status in (400, 409, 422):
        return ErrorClassification("semantic", "validation", f"http_status {status}",
                                   "the service refused the request as it stands (final 4xx): a corrected request "
                                   "may pass", http_status=status)
    line = text.strip().splitlines()[0][:120]
    return ErrorClassification("unclassified", "no_rule", f"{line!r}",
                               "no rule of the taxonomy matches this error; it is not guessed to be transient",
                               http_status=status)
