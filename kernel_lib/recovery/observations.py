"""Reading an observation: is this text an error report? (Failure Recovery, "The anti-spin
invariant" and "Semantic Watchdog Timers": the anti-spin report and the watchdog's action
repetition both need to know which observations report a failure.)

Sources mark errors differently or not at all: tau-bench marks a failed tool result, SWE-agent
keeps every observation as a plain text. :func:`is_error_text` reads an *unmarked* observation:
it is an error when :func:`~kernel_lib.recovery.signatures.extract_signature_parts` finds a real
error line in it (a Python exception outside a numbered file listing, a shell error, an
``Error:`` line), or when it is a short answer (at most :data:`SHORT_ANSWER_LINES` lines and
:data:`SHORT_ANSWER_CHARS` characters) whose first line uses refusal words (wrong, incorrect,
invalid, failed, error, not found, denied, refused, cannot, unable: "Wrong flag!") and which says
nothing of success ("completed successfully, no errors" is a success). A long text with no error
line (a file view, a diff) is not an error even when the code it shows names exceptions.

Shared by :mod:`kernel_lib.recovery.spin_report` and :mod:`kernel_lib.recovery.watchdog.steps`.
Pure; no I/O.
"""

from __future__ import annotations

import re

from kernel_lib.recovery.signatures import extract_signature_parts

__all__ = ["SHORT_ANSWER_LINES", "SHORT_ANSWER_CHARS", "is_error_text"]

#: An observation of at most this many lines and characters may be a plain refusal ("Wrong flag!").
SHORT_ANSWER_LINES = 3
SHORT_ANSWER_CHARS = 300

_REFUSAL = re.compile(r"\b(wrong|incorrect|invalid|fail(?:ed|ure|s)?|errors?|not found|denied|refused|"
                      r"cannot|can't|unable)\b", re.IGNORECASE)
_SUCCESS = re.compile(r"\b(success(?:ful(?:ly)?)?|succeeded|passed|no errors?|0 (?:errors?|failed))\b", re.IGNORECASE)


def is_error_text(text: str) -> bool:
    """Whether an unmarked observation ``text`` reports a failure (see the module docstring):
    an error line found by ``extract_signature_parts``, or a short answer whose first line uses
    refusal words and that reports no success. Returns a bool; never raises (a non-str is no
    error)."""
    if not isinstance(text, str) or not text.strip():
        return False
    if extract_signature_parts(text)[0] != "text":
        return True
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    short = len(lines) <= SHORT_ANSWER_LINES and len(text.strip()) <= SHORT_ANSWER_CHARS
    return short and bool(_REFUSAL.search(lines[0])) and not _SUCCESS.search(text)
