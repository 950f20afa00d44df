"""Auditing what the write-time scanner redacted, and which model calls saw it (§11.9, "the final context window").

When a tool observation holds credential-shaped text, the dispatch gate logs the observation with
that text replaced by ``[redacted]`` and names the fields in ``outcome.redacted_fields``
(:func:`kernel_lib.core.events.redact_secrets`): the evidence is kept, the secret is not. A later
compaction may drop the observation from the context window, so the final window alone cannot tell
that a credential ever passed through; the log can.

* :func:`audit_redactions` — every redacted observation in a trajectory's events, with the model
  calls whose logged input (``ContextBuilt.delivered_input``) carried its redacted text;
* :func:`flagged_lines` — the same question asked of one text (e.g. a context window): the lines
  holding the redaction marker or credential-shaped text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kernel_lib.core.events import Event, find_secrets

__all__ = ["REDACTION_MARKER", "RedactionFinding", "audit_redactions", "flagged_lines"]

#: What the write-time scanner puts in place of credential-shaped text.
REDACTION_MARKER = "[redacted]"


@dataclass(frozen=True)
class RedactionFinding:
    """One redacted observation: the ``ToolResult`` at ``sequence_number`` for ``operation_id``,
    its ``redacted_fields`` (paths in the outcome), and ``seen_by``: the invocation ids of the
    model calls whose logged input contains the redacted text of one of those fields."""

    sequence_number: int
    operation_id: str
    redacted_fields: tuple[str, ...]
    seen_by: tuple[str, ...]


def audit_redactions(events: Iterable[Event]) -> list[RedactionFinding]:
    """Every ``ToolResult`` whose outcome lists ``redacted_fields``, in log order, with the model
    calls that saw its redacted text (a field whose value is not a string is listed but matched
    against no input)."""
    events = list(events)
    inputs = [(e.payload.invocation_id, e.payload.delivered_input or "") for e in events
              if e.event_type == "ContextBuilt"]
    findings = []
    for e in events:
        outcome = e.payload.outcome if e.event_type == "ToolResult" else None
        fields = (outcome or {}).get("redacted_fields") if isinstance(outcome, dict) else None
        if not fields:
            continue
        texts = [outcome[f] for f in fields if isinstance(outcome.get(f), str) and outcome[f]]
        seen_by = tuple(inv for inv, text in inputs if any(t in text for t in texts))
        findings.append(RedactionFinding(e.sequence_number, e.payload.operation_id, tuple(fields), seen_by))
    return findings


def flagged_lines(text: str) -> list[str]:
    """The lines of ``text`` that hold :data:`REDACTION_MARKER` or credential-shaped text (by the
    same detector the write-time scanner uses)."""
    return [line for line in (text or "").splitlines() if REDACTION_MARKER in line or find_secrets(line)]
