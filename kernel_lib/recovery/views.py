"""The saga as tables and a timeline, read from the fold (for notebooks and widgets).

Failure Recovery, table 3 (the forward execution log L_fwd and the compensation stack Σ) and
the unwind listing. Everything here is a pure function of a :class:`~kernel_lib.recovery.saga.SagaRecord`
or of the trajectory's events: rows of plain JSON data (str, int, bool, None) that a table or a
chart shows as they are. Nothing is kept between calls and nothing is dispatched, so a view of a
log read by a new process is the same as the view of the process that wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kernel_lib.core.events import Event, SagaChanged, SagaStepChanged, ToolIntent, ToolResult, TrajectoryFrozen
from kernel_lib.recovery.saga import SagaRecord

__all__ = ["call_text", "binding_text", "contract_rows", "forward_rows", "stack_rows", "timeline_rows", "step_label"]


def call_text(tool: str, arguments: Mapping[str, Any] | None) -> str:
    """``tool(k=v, ...)``: one call as a reader writes it (keys sorted, values as JSON-ish text)."""
    args = ", ".join(f"{k}={_value(v)}" for k, v in sorted((arguments or {}).items()))
    return f"{tool}({args})"


def binding_text(compensator: Mapping[str, Any] | None) -> str:
    """A declared compensator with how its arguments bind from the step:
    ``teardown_sandbox(sandbox_id ← output.sandbox_id)``; ``""`` for None."""
    if not compensator:
        return ""
    bind = compensator.get("bind") or {}
    return f"{compensator['tool']}(" + ", ".join(f"{k} ← {v}" for k, v in bind.items()) + ")"


def contract_rows(schemas: Iterable[Mapping[str, Any]], *, tier_names: bool = True) -> list[dict[str, Any]]:
    """The tools' declared contracts (table 5), one row per registered tool, from a registry's
    ``schemas()``: ``tool``, ``tier`` (``II (compensable)``; the bare tier with ``tier_names=False``),
    ``repeat contract``, ``status lookup``, ``compensator (bound from the step)`` (:func:`binding_text`;
    ``—, it is one`` for a compensator, ``∅ (pivot)`` for a tool without one)."""
    rows = []
    for s in schemas:
        tier = f'{s["tier"]} ({s["tier_name"]})' if tier_names and s.get("tier_name") else s["tier"]
        comp = binding_text(s.get("compensator")) or ("—, it is one" if s.get("is_compensator") else "∅ (pivot)")
        rows.append({"tool": s["name"], "tier": tier, "repeat contract": s["repeat_contract"],
                     "status lookup": s["status_lookup"], "compensator (bound from the step)": comp})
    return rows


def _value(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _short_key(key: str | None) -> str:
    return "" if not key else (key if len(key) <= 18 else key[:18] + "…")


def step_label(step_id: str, saga_id: str) -> str:
    """``"T3"`` for ``<saga>.T3`` and ``"C3"`` for its compensator ``<saga>.T3.C``; other ids unchanged."""
    prefix = saga_id + "."
    if not step_id.startswith(prefix):
        return step_id
    rest = step_id[len(prefix):]
    return "C" + rest[1:-2] if rest.endswith(".C") and rest.startswith("T") else rest


def forward_rows(saga: SagaRecord) -> list[dict[str, Any]]:
    """L_fwd (table 3), one row per declared step in index order.

    Keys: ``step`` ("T1"), ``tool``, ``tier`` (I/II/III), ``state`` (table 2), ``idempotency key``
    (κ_i, shortened), ``compensator`` (C_i as bound from the step's output, ``"∅ (pivot)"`` for a
    tier-III step, ``""`` while none is recorded).
    """
    rows = []
    for s in sorted(saga.steps.values(), key=lambda s: s.index):
        if s.compensator is not None:
            comp = call_text(s.compensator["tool"], s.compensator.get("arguments"))
        else:
            comp = "∅ (pivot)" if s.pivot else ""
        rows.append({"step": f"T{s.index}", "tool": s.tool, "tier": s.tier, "state": s.state,
                     "idempotency key": _short_key(s.idempotency_key), "compensator": comp})
    return rows


def stack_rows(saga: SagaRecord) -> list[dict[str, Any]]:
    """Σ (table 3), top first: ``position`` (TOP, STACK[n]…), ``compensator`` ("C4"), ``call``
    (the bound call), ``compensation key`` (κ_i^c, shortened), ``state`` of the step it undoes.
    Empty when nothing is left to compensate."""
    return [{"position": r["position"], "compensator": f"C{r['step']}", "call": call_text(r["compensator"],
                                                                                          r["arguments"]),
             "compensation key": _short_key(r["idempotency_key"]), "state": r["state"]}
            for r in saga.stack_view()]


def timeline_rows(events: Iterable[Event], saga_id: str) -> list[dict[str, Any]]:
    """Every record of the saga in log order, for a timeline chart.

    One row per ``SagaChanged``, ``SagaStepChanged``, ``ToolIntent``/``ToolResult`` of one of the
    saga's operations, and ``TrajectoryFrozen``. Keys: ``position`` (sequence number), ``record``
    (event type), ``lane`` ("saga", "T1"…; a compensator shares its step's lane), ``phase``
    ("forward", "unwind", "saga", "freeze"), ``label`` (the state, or the attempt and its status).
    """
    prefix = saga_id + "."
    rows: list[dict[str, Any]] = []
    for ev in events:
        p = ev.payload
        if isinstance(p, SagaChanged) and p.saga_id == saga_id:
            rows.append({"position": ev.sequence_number, "record": "SagaChanged", "lane": "saga", "phase": "saga",
                         "label": p.state})
        elif isinstance(p, SagaStepChanged) and p.saga_id == saga_id:
            unwind = p.state in ("COMPENSATING", "COMPENSATED", "PANIC", "MANUAL_ESCALATION")
            rows.append({"position": ev.sequence_number, "record": "SagaStepChanged", "lane": f"T{p.step_index}",
                         "phase": "unwind" if unwind else "forward", "label": p.state})
        elif isinstance(p, (ToolIntent, ToolResult)) and p.operation_id.startswith(prefix):
            label = step_label(p.operation_id, saga_id)
            lane = "T" + label[1:] if label.startswith("C") else label
            what = "intent" if isinstance(p, ToolIntent) else f"{p.status} ({p.source})"
            rows.append({"position": ev.sequence_number, "record": ev.event_type, "lane": lane,
                         "phase": "unwind" if label.startswith("C") else "forward",
                         "label": f"{label} {p.attempt_id} {what}"})
        elif isinstance(p, TrajectoryFrozen) and p.saga_id in (None, saga_id):
            rows.append({"position": ev.sequence_number, "record": "TrajectoryFrozen", "lane": "saga",
                         "phase": "freeze", "label": p.failure_mode})
    return rows
