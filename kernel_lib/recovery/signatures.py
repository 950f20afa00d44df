"""Error signatures σ and the anti-spin bound on forward repair (Failure Recovery, "The anti-spin
invariant": the repair spin-loop trace, the counter k_i ≤ K_repair, σ = SHA-256(Normalize(type,
source, signature)) in a sliding FIFO window H_i per sub-transaction).

Two failed repair attempts of one sub-transaction "hit the same error" when their signatures
σ are equal. σ must therefore be blind to what changes between two runs of the same fault and
keep what tells two faults apart.

**What** :func:`normalize` **removes** (each part is replaced by a placeholder, so the shape of the
message stays):

==========================  ==================================================  ===============
removed                     example                                             becomes
==========================  ==================================================  ===============
ANSI colour codes           ``\\x1b[31m``                                        (nothing)
UUIDs                       ``5d41402a-bc4b-4a7e-9f0c-2a0c1d8e3f10``            ``<uuid>``
ISO-8601 timestamps, times  ``2024-05-01T12:03:04.5Z``, ``12:03:04``            ``<ts>``
hex addresses, digests      ``0x7f3a2c1d9e80``, a 40-hex git sha                ``<addr>``, ``<hex>``
temporary paths             ``/tmp/pytest-of-u/pytest-7/test_a0/x.py``          ``<tmp>/x.py``
other absolute paths        ``/home/u/.venv/lib/.../orm/__init__.py``            ``__init__.py``
line and column numbers     ``line 17``, ``x.py:17:5``, ``(1458 more lines)``   ``line <n>``, ``x.py``
PIDs, ports                 ``pid 4242``, ``127.0.0.1:8123``, ``port 8123``     ``pid <n>``, ``127.0.0.1:<port>``
epoch-like numbers          ``1714565000``, ``1714565000123``                    ``<epoch>``
durations                   ``after 30.2s``, ``1500 ms``                         ``after <dur>``
runs of whitespace          newlines, tabs, indentation                         one space
==========================  ==================================================  ===============

**What it keeps, and why**: the exception type exactly as written (``ImportError`` and
``ModuleNotFoundError`` are different faults, and Python names are case-sensitive); the source's
file *basename* and function (the fault's place without the machine's directory layout, which
differs between a pytest tmp dir, a venv and a container); every word and identifier of the
message, quoted names included (``cannot import name 'AsyncSession'`` against ``'Session'`` is
a different missing name, so a different fault); small numbers that are not line numbers, ports,
PIDs or times (an HTTP status, "missing 2 required positional arguments"): they distinguish
faults and do not change between runs. Two files with the same basename in different folders
get the same σ: a cost of dropping the machine's layout, accepted.

The three normalized parts are joined with a newline (no part holds one after whitespace is
collapsed, so the join is unambiguous) and hashed with SHA-256: :func:`error_signature`.

**The anti-spin bound** (:class:`SpinGuard`, a pure fold): per sub-transaction T_i a counter k_i
of forward repairs already elected and a FIFO window H_i of the last ``window`` signatures, each
with the iteration (1-based position in T_i's error sequence) it came from. Before another repair
:meth:`SpinGuard.verdict` answers, in this order:

1. ``repeated_signature`` — σ_k equals some σ_j, j < k, still in the window: stop at once, even
   with repair budget left (the model is cycling: the chapter's iteration 4 repeats iteration 1);
2. ``repair_budget_exhausted`` — k_i ≥ K_repair repairs were already spent;
3. ``allowed``.

K_repair defaults to 3 and may be configured to 1, 2 or 3 only: the chapter bounds it at 3 for
production runtimes, and 0 would mean "never repair", which is the policy's job (gate 3), not the
guard's. The window defaults to 8 (≥ K_repair + 1, so every cycle within one repair budget is
seen); a shorter window forgets older signatures first.

Everything here is pure: no I/O, no clock. Raises :class:`~kernel_lib.errors.RecoveryPolicyError`
for a bad K_repair or window and for an error of an unsupported kind.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kernel_lib.errors import RecoveryPolicyError

__all__ = ["K_REPAIR_DEFAULT", "K_REPAIR_MAX", "WINDOW_DEFAULT", "normalize", "error_signature",
           "extract_signature_parts", "signature_of", "SpinVerdict", "SpinGuard", "first_stop"]

#: The chapter's bound on consecutive forward repairs of one sub-transaction, and its ceiling.
K_REPAIR_DEFAULT = 3
K_REPAIR_MAX = 3
#: Signatures kept per sub-transaction (the FIFO window H_i).
WINDOW_DEFAULT = 8

# --- normalization ----------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_ISO_TS = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b")
_TIME = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b")
_HEX_ADDR = re.compile(r"\b0x[0-9a-fA-F]+\b")
_LONG_HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{16,}\b")
_TMP_PATH = re.compile(
    r"(?:(?<=[\s'\"(=:])|^)(?:/private)?(?:/tmp|/var/tmp|/var/folders|/dev/shm)(?:/[^\s'\"():,;]*)?"
    r"|[A-Za-z]:\\Users\\[^\\\s]+\\AppData\\Local\\Temp(?:\\[^\s'\"():,;]*)?")
_ABS_PATH = re.compile(r"(?:(?<=[\s'\"(=:\[])|^)(?:/[\w.@+~-]+){2,}/?")
_FILE_LINE = re.compile(r"\b([\w.-]+\.[A-Za-z]\w{0,5}):\d+(?::\d+)?\b")
_LINE_WORD = re.compile(r"\b(line|lineno|col|column)(\s*[=:]?\s*)\d+\b", re.IGNORECASE)
_MORE_LINES = re.compile(r"\(\d+ more lines? (?:above|below)\)|\(\d+ lines total\)")
_PID = re.compile(r"\b(pid|process|thread|worker)(\s*[=:#]?\s*)\d+\b", re.IGNORECASE)
_HOST_PORT = re.compile(r"\b(localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\]|::1)(:)\d{2,5}\b")
_PORT = re.compile(r"\b(port)(\s*[=:]?\s*)\d{2,5}\b", re.IGNORECASE)
_EPOCH = re.compile(r"\b1\d{9}(?:\d{3})?(?:\.\d+)?\b")
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|us|µs|ns|s|sec|secs|seconds?|min|minutes?|h|hours?)\b")
_SPACE = re.compile(r"\s+")


def _path_to_basename(m: re.Match[str]) -> str:
    base = m.group(0).rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
    return base


def _tmp_to_placeholder(m: re.Match[str]) -> str:
    base = m.group(0).rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
    return f"<tmp>/{base}" if "." in base.strip(".") else "<tmp>"


def _normalize_part(text: str) -> str:
    s = _ANSI.sub("", text)
    s = _UUID.sub("<uuid>", s)
    s = _ISO_TS.sub("<ts>", s)
    s = _TIME.sub("<ts>", s)
    s = _HEX_ADDR.sub("<addr>", s)
    s = _LONG_HEX.sub("<hex>", s)
    s = _TMP_PATH.sub(_tmp_to_placeholder, s)
    s = _ABS_PATH.sub(_path_to_basename, s)
    s = _MORE_LINES.sub("", s)
    s = _FILE_LINE.sub(r"\1", s)
    s = _LINE_WORD.sub(r"\1\2<n>", s)
    s = _PID.sub(r"\1\2<n>", s)
    s = _HOST_PORT.sub(r"\1\2<port>", s)
    s = _PORT.sub(r"\1\2<n>", s)
    s = _EPOCH.sub("<epoch>", s)
    s = _DURATION.sub("<dur>", s)
    return _SPACE.sub(" ", s).strip()


def normalize(type_: str, source: str, signature: str) -> str:
    """Normalize(type, source, signature) of the anti-spin invariant: the three parts with run-to-run
    noise removed (see the module docstring for what goes and what stays), joined by ``"\\n"``.

    ``type_``: the error's type (``ImportError``, ``http_409``); ``source``: where it arose (a file
    basename and function, a tool name); ``signature``: its message. Returns a str.
    Raises :class:`RecoveryPolicyError` if a part is not a str."""
    for name, v in (("type", type_), ("source", source), ("signature", signature)):
        if not isinstance(v, str):
            raise RecoveryPolicyError(f"normalize: {name} must be a str, got {type(v).__name__}")
    return "\n".join(_normalize_part(p) for p in (type_, source, signature))


def error_signature(type_: str, source: str, signature: str) -> str:
    """σ = SHA-256(Normalize(type, source, signature)) as 64 lower-case hex digits.
    Raises :class:`RecoveryPolicyError` as :func:`normalize`."""
    return hashlib.sha256(normalize(type_, source, signature).encode("utf-8")).hexdigest()


# --- extracting (type, source, signature) -----------------------------------------------------------

#: A Python exception line, optionally behind a pytest ``E`` marker, a flake8 ``- E999`` code, a
#: ``FAILED path::test - `` summary or a label ending in ``: `` (``Iteration 4: ImportError: ...``). Warnings
#: (``UserWarning: ...``) are not errors and never decide.
_EXC_LINE = re.compile(
    r"(?:^|[\s:(\-])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault)):"
    r"(?:\s+(.*?))?\s*$")
_LISTING_LINE = re.compile(r"^\s*\d+:")        # a numbered source line in a file view (swe-agent)
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+(?:, in (\S+))?')
_PYTEST_LOC = re.compile(r"^([\w./\\-]+\.py):\d+:")
_SHELL = re.compile(r"^(?:/bin/)?(bash|sh|zsh|dash)(?:: line \d+)?: (?:(\S+): )?(.*)$")
_SHELL_PLAIN = re.compile(r"^(\S+): (.*?(?:command not found|No such file or directory|Permission denied).*)$")
_TOOL_ERROR = re.compile(r"^(?:Error|ERROR|error)\s*:\s*(.+)$")


def _exception_line(text: str) -> tuple[int, str, str] | None:
    """(line index, exception type, message) of the deciding exception line: after a traceback
    header the last such line (Python prints the innermost cause last); otherwise the first."""
    lines = text.splitlines()
    tb = max((i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")), default=None)
    hits = []
    for i, ln in enumerate(lines):
        if _LISTING_LINE.match(ln):
            continue
        m = _EXC_LINE.search(ln)
        if m:
            hits.append((i, m.group(1), m.group(2) or ""))
    if not hits:
        return None
    if tb is not None:
        after = [h for h in hits if h[0] > tb]
        if after:
            return after[-1]
    return hits[0]


def _source_of_text(lines: list[str], upto: int) -> str:
    """The innermost traceback frame (file basename and function) or pytest location before line
    ``upto``; '' when there is none."""
    for ln in reversed(lines[:upto]):
        m = _FRAME.match(ln)
        if m:
            base = m.group(1).replace("\\", "/").rsplit("/", 1)[-1]
            return f"{base}:{m.group(2)}" if m.group(2) else base
        m = _PYTEST_LOC.match(ln)
        if m:
            return m.group(1).replace("\\", "/").rsplit("/", 1)[-1]
    return ""


def _parts_of_text(text: str) -> tuple[str, str, str]:
    lines = text.splitlines()
    exc = _exception_line(text)
    if exc is not None:
        i, etype, msg = exc
        return etype, _source_of_text(lines, i), msg
    for ln in lines:
        m = _SHELL.match(ln.strip())
        if m:
            cmd, rest = m.group(2) or "", m.group(3)
            if rest.endswith("command not found"):
                return "command_not_found", m.group(1), f"{cmd}: {rest}" if cmd else rest
            return "shell_error", m.group(1), f"{cmd}: {rest}" if cmd else rest
        m = _SHELL_PLAIN.match(ln.strip())
        if m:
            return "shell_error", m.group(1).rsplit("/", 1)[-1], m.group(2)
        m = _TOOL_ERROR.match(ln.strip())
        if m:
            return "tool_error", "", m.group(1)
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    return "text", "", first


def extract_signature_parts(error: Any) -> tuple[str, str, str]:
    """(type, source, signature) of one error observation, before normalization.

    Accepts: a service's structured error (a mapping: ``http_status``/``status``, ``error``,
    ``reason``, ``tool``/``service``/``action``; type ``http_<status>``, plus ``:<reason>`` when
    there is one; an imported log's ``{"observation": text}`` is read as text); a Python traceback,
    pytest output, a shell error or any other text (type: the deciding exception's name, or
    ``command_not_found``/``shell_error``/``tool_error``/``text``); an exception object (its class
    name, the innermost frame of its traceback, its message).

    Raises :class:`RecoveryPolicyError` for anything else (None, numbers, lists)."""
    if isinstance(error, BaseException):
        tb = error.__traceback__
        source = ""
        while tb is not None:
            code = tb.tb_frame.f_code
            source = f"{code.co_filename.replace(chr(92), '/').rsplit('/', 1)[-1]}:{code.co_name}"
            tb = tb.tb_next
        return type(error).__name__, source, str(error)
    if isinstance(error, str):
        return _parts_of_text(error)
    if isinstance(error, Mapping):
        status = error.get("http_status", error.get("status"))
        texts = [error[k] for k in ("error", "message", "detail") if isinstance(error.get(k), str)]
        if not isinstance(status, int) or isinstance(status, bool):
            obs = error.get("observation")
            if isinstance(obs, str):
                return _parts_of_text(obs)
            if texts:
                return _parts_of_text("\n".join(texts))
            raise RecoveryPolicyError("an error object needs an integer http_status/status, or an error, "
                                      "message, detail or observation text")
        reason = error.get("reason")
        etype = f"http_{status}" + (f":{reason}" if isinstance(reason, str) and reason else "")
        source = next((error[k] for k in ("tool", "action", "service") if isinstance(error.get(k), str)), "")
        return etype, source, " ".join(texts)
    raise RecoveryPolicyError(f"an error must be a service's error object, a text or an exception; "
                              f"got {type(error).__name__}")


def signature_of(error: Any) -> str:
    """σ of one error observation: :func:`error_signature` of :func:`extract_signature_parts`."""
    return error_signature(*extract_signature_parts(error))


# --- the anti-spin bound ---------------------------------------------------------------------------

SpinReason = Literal["allowed", "repeated_signature", "repair_budget_exhausted"]


@dataclass(frozen=True)
class SpinVerdict:
    """The anti-spin answer to "may T_i be repaired again?".

    ``allowed``; ``reason`` (``allowed``, ``repeated_signature`` or ``repair_budget_exhausted``);
    ``step_id``; ``iteration`` — the 1-based position of this error in T_i's sequence;
    ``repairs_done`` — k_i before this error; ``k_repair`` — K_repair; ``sigma`` — this error's σ;
    ``matched_iteration`` — with ``repeated_signature``, the earlier iteration j whose σ_j = σ_k."""
    allowed: bool
    reason: SpinReason
    step_id: str
    iteration: int
    repairs_done: int
    k_repair: int
    sigma: str
    matched_iteration: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "reason": self.reason, "step_id": self.step_id,
                "iteration": self.iteration, "repairs_done": self.repairs_done, "k_repair": self.k_repair,
                "sigma": self.sigma, "matched_iteration": self.matched_iteration}


def check_k_repair(k_repair: Any, window: Any = WINDOW_DEFAULT) -> None:
    """Refuse a K_repair outside 1..3 or a window shorter than 1 (:class:`RecoveryPolicyError`)."""
    if type(k_repair) is not int or not 1 <= k_repair <= K_REPAIR_MAX:
        raise RecoveryPolicyError(f"k_repair must be an integer in 1..{K_REPAIR_MAX} (the anti-spin bound "
                                  f"K_repair <= 3), got {k_repair!r}")
    if type(window) is not int or window < 1:
        raise RecoveryPolicyError(f"window must be an integer >= 1 (signatures kept per sub-transaction), "
                                  f"got {window!r}")


@dataclass(frozen=True)
class _StepSpin:
    repairs_done: int = 0
    errors_seen: int = 0
    window: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class SpinGuard:
    """The anti-spin state of a trajectory: per sub-transaction k_i and the window H_i. Immutable;
    :meth:`observe` returns a new guard (a fold step), so a new owner can rebuild it from the log.

    ``k_repair``: K_repair (1..3, default 3); ``window``: signatures kept per step (default 8).
    Raises :class:`RecoveryPolicyError` for values outside those ranges."""
    k_repair: int = K_REPAIR_DEFAULT
    window: int = WINDOW_DEFAULT
    steps: Mapping[str, _StepSpin] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_k_repair(self.k_repair, self.window)

    @classmethod
    def for_step(cls, step_id: str, repairs_done: int, prior_signatures: Iterable[str], *,
                 k_repair: int = K_REPAIR_DEFAULT, window: int = WINDOW_DEFAULT) -> "SpinGuard":
        """A guard holding one step's state as recorded: k_i = ``repairs_done`` and its earlier
        errors' signatures, oldest first (numbered 1, 2, ...; only the last ``window`` kept).
        Raises :class:`RecoveryPolicyError` for a negative count."""
        if type(repairs_done) is not int or repairs_done < 0:
            raise RecoveryPolicyError(f"repairs_done must be an integer >= 0, got {repairs_done!r}")
        sigmas = list(prior_signatures)
        numbered = tuple((i + 1, s) for i, s in enumerate(sigmas))[-window:] if window >= 1 else ()
        return cls(k_repair, window, {step_id: _StepSpin(repairs_done, len(sigmas), numbered)})

    def verdict(self, step_id: str, sigma: str) -> SpinVerdict:
        """Whether T_``step_id`` may be repaired after an error of signature ``sigma`` (see the
        module docstring for the order of the checks). Pure: the guard does not change."""
        st = self.steps.get(step_id, _StepSpin())
        iteration = st.errors_seen + 1
        match = next((j for j, s in st.window if s == sigma), None)
        base = dict(step_id=step_id, iteration=iteration, repairs_done=st.repairs_done, k_repair=self.k_repair,
                    sigma=sigma)
        if match is not None:
            return SpinVerdict(False, "repeated_signature", matched_iteration=match, **base)
        if st.repairs_done >= self.k_repair:
            return SpinVerdict(False, "repair_budget_exhausted", **base)
        return SpinVerdict(True, "allowed", **base)

    def observe(self, step_id: str, sigma: str, *, repaired: bool) -> "SpinGuard":
        """The guard after T_``step_id`` failed with ``sigma`` and the runtime did (``repaired``) or
        did not elect a forward repair for it: σ enters the window (the oldest leaves when full),
        and k_i grows by one for a repair."""
        st = self.steps.get(step_id, _StepSpin())
        n = st.errors_seen + 1
        window = (st.window + ((n, sigma),))[-self.window:]
        new = _StepSpin(st.repairs_done + (1 if repaired else 0), n, window)
        return SpinGuard(self.k_repair, self.window, {**self.steps, step_id: new})


def first_stop(sigmas: Iterable[str], *, step_id: str = "T", k_repair: int = K_REPAIR_DEFAULT,
               window: int = WINDOW_DEFAULT) -> SpinVerdict | None:
    """Replay one sub-transaction's error sequence through the guard, repairing after every allowed
    error; the first verdict that stops repair, or None if the bound never stops it. Use it to say
    where the anti-spin bound would have stopped a recorded repair loop."""
    guard = SpinGuard(k_repair, window)
    for sigma in sigmas:
        v = guard.verdict(step_id, sigma)
        if not v.allowed:
            return v
        guard = guard.observe(step_id, sigma, repaired=True)
    return None
