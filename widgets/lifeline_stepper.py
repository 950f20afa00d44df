"""Lifeline stepper: figure 5's protocol ladder, stepped one message at a time.

Failure Recovery, "Anatomy of a faulted trajectory" (figure 5: the control plane K_sched, the
write-ahead log L_wal, the saga engine S_saga and the sandbox / external services as four
lifelines, across six turns and four injected failures). An anywidget (JupyterLab, VS Code,
marimo) that draws the ladder as SVG and steps through its messages. It owns no state (DESIGN.md,
principle 6): the messages are computed by
:func:`kernel_lib.recovery.synthesis.lifelines.lifeline_messages` from a trajectory log and the
services' audit, and the widget only shows them; the legend's words, the turn labels and the
readout come from the kernel too.

Controls (the protocol of :class:`widgets._base.CommandWidget`): ``first``, ``prev``, ``next``,
``last``, ``goto`` (``{"to": n}``, the slider) and ``turn`` (``{"turn": t}``: the first message of
turn t). ``step`` is the current message, 1..len(messages), and may also be set from code.

Bad input never raises into the notebook: a step outside 1..n (``prev`` on the first message,
``next`` on the last, ``stepper.step = 0``), a value that is not a whole number, or a turn the
ladder does not have, is refused with the widget's own message in ``error`` and the last good
step stays shown. The next accepted move clears the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import traitlets

from kernel_lib.errors import ConfigError
from kernel_lib.recovery.synthesis.lifelines import (
    KIND_MEANINGS, LIFELINE_LABELS, LIFELINES, Crash, LifelineMessage, lifeline_messages, turn_rows,
)
from widgets._base import CommandWidget, as_whole, clip

__all__ = ["LifelineStepper", "ACTIONS"]

ACTIONS = ("first", "prev", "next", "last", "goto", "turn")


class LifelineStepper(CommandWidget, static="lifeline_stepper"):
    """Figure 5's ladder over ``messages``, one message at a time (see the module docstring).

    Args:
        messages: the ladder, as :func:`~kernel_lib.recovery.synthesis.lifelines.lifeline_messages`
            returns it (or the same as dicts, e.g. read back from a run's JSON).
        title: a caption over the ladder (e.g. "figure 5 on the simulated twins").
        step: the message to show first (1-based; default the first).

    Raises:
        ConfigError: ``messages`` is empty, or a message is not a lifeline message.
    """

    ACTIONS = ACTIONS
    COMMAND_FIELDS = ", 'to': <1..n> (goto), 'turn': <t> (turn)"

    # Any, so a wrong value reaches the validator below and becomes a message instead of a TraitError
    step = traitlets.Any(1).tag(sync=True)
    step.allow_none = False
    title = traitlets.Unicode("").tag(sync=True)
    lifelines = traitlets.List().tag(sync=True)
    messages = traitlets.List().tag(sync=True)
    legend = traitlets.List().tag(sync=True)
    turns = traitlets.List().tag(sync=True)
    current = traitlets.Dict().tag(sync=True)
    readout = traitlets.Unicode("").tag(sync=True)

    def __init__(self, messages: Iterable[LifelineMessage | Mapping[str, Any]], *, title: str = "",
                 step: int = 1, **kw: Any):
        if messages is None or isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            raise ConfigError("LifelineStepper shows a list of lifeline messages (kernel_lib.recovery.synthesis"
                              f".lifelines.lifeline_messages), got {type(messages).__name__}")
        rows = []
        for m in messages:
            if isinstance(m, LifelineMessage):
                rows.append(m.to_json())
            elif isinstance(m, Mapping) and {"source", "target", "label", "kind", "turn"} <= set(m):
                rows.append(dict(m))
            else:
                raise ConfigError(f"LifelineStepper shows lifeline messages (kernel_lib.recovery.synthesis.lifelines"
                                  f".lifeline_messages), got {type(m).__name__}")
        if not rows:
            raise ConfigError("the ladder holds no message: nothing to step through")
        self._n = len(rows)
        self._good = 1
        self._ready = False
        super().__init__(**kw)
        kinds = {r["kind"] for r in rows}
        with self.hold_trait_notifications():
            self.title = title
            self.lifelines = [{"id": lf, "label": LIFELINE_LABELS[lf]} for lf in LIFELINES]
            self.messages = rows
            self.legend = [{"kind": k, "meaning": m} for k, m in KIND_MEANINGS.items() if k in kinds]
            self.turns = turn_rows(LifelineMessage(**{k: r.get(k) for k in LifelineMessage.__dataclass_fields__})
                                   for r in rows)
        self._ready = True
        self.step = step
        if self.error:                     # a bad first step: show the first message instead
            self._show(1)

    @classmethod
    def from_log(cls, events: Iterable[Any], audits: Mapping[str, Iterable[Mapping[str, Any]]] | None = None, *,
                 crashes: Iterable[Crash | int] = (), title: str = "", **kw: Any) -> "LifelineStepper":
        """The stepper over the ladder of one trajectory's ``events`` (and the services' ``audits``,
        the ``crashes`` the log cannot record): :func:`lifeline_messages` computes it."""
        return cls(lifeline_messages(events, audits, crashes=crashes), title=title, **kw)

    # --- the current message ----------------------------------------------------------------------------
    def _show(self, k: int) -> None:
        m = self.messages[k - 1]
        self._good = k
        turn = next((t for t in self.turns if t["turn"] == m["turn"]), {"label": f"turn {m['turn']}"})
        pos = f"log position {m['position']}" if m.get("position") is not None else "no log position"
        self.current = {**m, "meaning": KIND_MEANINGS.get(m["kind"], ""), "turn_label": turn["label"],
                        "from": LIFELINE_LABELS.get(m["source"], m["source"]),
                        "to": LIFELINE_LABELS.get(m["target"], m["target"])}
        self.readout = f"message {k} of {self._n} · {turn['label']} · {pos} · {m['kind']}"
        self.status = self.readout

    @traitlets.validate("step")
    def _check_step(self, proposal: dict[str, Any]) -> Any:
        v = as_whole(proposal["value"])
        if v is None or not 1 <= v <= self._n:
            if v is not None and v < 1:
                why = "there is no message before the first"
            elif v is not None:
                why = f"the ladder has {self._n} messages"
            else:
                why = "a step is a whole number"
            self.error = clip(f"step = {clip(repr(proposal['value']), 40)} was refused: {why} (choose 1..{self._n}); "
                              f"it stays {self._good}", 400)
            return self._good
        self._show(v)
        if self._ready:
            self.error = ""
        return v

    # --- the buttons ------------------------------------------------------------------------------------
    def go(self, to: Any) -> bool:
        """Show message ``to`` (1..n). True when shown; otherwise the reason is in ``error``."""
        self.step = to
        return not self.error

    def dispatch(self, command: dict[str, Any]) -> None:
        action = str(command["action"])

        def move() -> None:
            k = self._good
            if action == "first":
                target: Any = 1
            elif action == "last":
                target = self._n
            elif action == "prev":
                target = k - 1
            elif action == "next":
                target = k + 1
            elif action == "goto":
                target = command.get("to")
            else:
                t = as_whole(command.get("turn"))
                row = next((r for r in self.turns if r["turn"] == t), None)
                if row is None:
                    raise ConfigError(f"turn {clip(repr(command.get('turn')), 40)} is not in this ladder: choose "
                                      f"one of {[r['turn'] for r in self.turns]}; it stays at message {k}")
                target = row["first"] + 1
            if not self.go(target):
                raise ConfigError(self.error)

        self.attempt(action, move)

    def refusal(self, action: str, exc: Exception) -> str:
        return clip(str(exc), 600) if action in ACTIONS else super().refusal(action, exc)

    def refresh(self, keep_error: bool = False) -> None:
        """Show the current message again (the ladder itself never changes)."""
        self._show(self._good)
        if not keep_error:
            self.error = ""


#: What the front end receives: static/_shared.js + static/lifeline_stepper.js, and its CSS.
_ESM, _CSS = LifelineStepper._esm, LifelineStepper._css
