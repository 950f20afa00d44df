"""Saga stepper: drive the deployment saga by hand and watch Σ beside the services' real state.

Failure Recovery, "The Trajectory Saga Pattern" (definition 0.1, tables 2–3, the unwind listing)
and "Terminal escalation". An anywidget (JupyterLab, VS Code, marimo) over a
:class:`kernel_lib.sim.saga_demo.SagaDemo`. It owns no state (DESIGN.md, principle 6): a button
writes ``command = {"action", "kind"?, "step"?, "target"?, "after"?, "n"}`` (the protocol of
:class:`widgets._base.CommandWidget`), the Python side calls the demo, and then publishes what the
kernel computes: ``forward`` (L_fwd) and ``stack`` (Σ, top first), both folded from the stored
log by :mod:`kernel_lib.recovery.views`; ``resources`` (this saga's), ``counts`` and
``invariants``, read from the services through the fleet facade. ``counts`` and ``invariants``
are changes since this stepper's saga began (:func:`~kernel_lib.sim.saga_demo.count_delta`,
:func:`~kernel_lib.sim.saga_demo.invariant_delta`: only the invariants of Φ that moved), so
another saga's leftovers on the same fleet do not show and a clean unwind shows no change. Then
``in_doubt``, ``saga_state``, ``frozen``, ``summary`` (one line on what the last action did) and
``error``.

Actions: ``step`` (the next forward step), ``inject`` (queue fault ``fault_kind``, one of
:data:`kernel_lib.sim.services.FAULT_KINDS`, on T_k or C_k: ``fault_step``, ``fault_target``),
``crash_unwind`` (unwind and abandon the runner after ``crash_after`` compensators were sent),
``recover`` (a new runner over the same log), ``unwind``, ``refresh``.

Bad input never raises into the notebook. A value the demo refuses (a fault on a step that
already ran or never will, named with the first step that has not run; a crash after more
compensators than Σ holds; a step after a failure) becomes the demo's reason in ``error``. So
does a value of the wrong kind set on a control trait, from code or from the browser
(``stepper.fault_step = 9``, ``stepper.fault_kind = "meteor"``): the trait keeps its previous
value. The next action that succeeds clears the message.
"""

from __future__ import annotations

from typing import Any

import traitlets

from kernel_lib.errors import ConfigError, TrajectoryFrozenRefusal
from kernel_lib.sim.deployment import DEPLOYMENT_STEPS
from kernel_lib.sim.saga_demo import SagaDemo
from kernel_lib.sim.services import FAULT_KINDS
from widgets._base import CommandWidget, as_whole, clip

ACTIONS = ("step", "inject", "crash_unwind", "recover", "unwind", "refresh")
TARGETS = ("forward", "compensator")


def _output_text(output: dict[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in (output or {}).items())


def summarize(result: dict[str, Any]) -> str:
    """One line saying what the demo's last action did (the widget shows it under the buttons)."""
    action = result.get("action")
    if action == "step":
        if result.get("state") == "COMMITTED":
            return f"{result['step']} {result['tool']} COMMITTED ({_output_text(result.get('output'))}); C_i recorded"
        return f"{result['step']} {result['tool']} FAILED: {clip(str(result.get('error')), 160)}; unwind now"
    if action == "inject":
        return f"queued {result['fault']} on {result['on']} for the next {result['count']} call(s)"
    if action in ("unwind", "crash_during_unwind"):
        if result.get("crashed_after"):
            doubt = ", ".join(result.get("in_doubt") or []) or "nothing"
            return (f"runner abandoned: {result['crashed_after']}; the surviving log has {result['log_head']} events, "
                    f"in doubt: {doubt}; recover starts a new runner")
        if result.get("state") == "PANIC":
            inc = result.get("incident") or {}
            left = ", ".join(r.get("resource_id", "?") for r in result.get("residue") or []) or "nothing"
            return (f"PANIC: {inc.get('failure_mode')} ({inc.get('failing_tool')}); trajectory frozen as "
                    f"{inc.get('incident_id')}; still live: {left}")
        return f"unwind ended {result.get('state')}"
    if action == "recover":
        restarted = ", ".join(result.get("restarted") or [])
        head = "new runner over the same log" + (f" (restarted {restarted})" if restarted else "")
        if result.get("state") == "FROZEN":
            return f"{head}: the trajectory is FROZEN; it does nothing"
        replayed = ", ".join(result.get("replayed") or []) or "none"
        stack = ", ".join(result.get("stack") or []) or "empty"
        doubt = ", ".join(result.get("in_doubt") or []) or "nothing"
        return f"{head}: saga {result.get('state')}; replayed from the log: {replayed}; Σ: {stack}; in doubt: {doubt}"
    return ""


class SagaStepper(CommandWidget, static="saga_stepper"):
    """Buttons for the saga's actions; L_fwd and Σ beside the services' resources, counts and Φ's change.

    Args:
        demo: the :class:`SagaDemo` to drive (the caller closes it).
    """

    ACTIONS = ACTIONS
    COMMAND_FIELDS = ", 'kind': <fault kind>, 'step': <1..5>, 'target': 'forward'|'compensator', 'after': <n>"

    # Any, so a wrong value reaches the validators below and becomes a message instead of a TraitError
    fault_kind = traitlets.Any("conflict").tag(sync=True)
    fault_step = traitlets.Any(5).tag(sync=True)
    fault_target = traitlets.Any("forward").tag(sync=True)
    crash_after = traitlets.Any(1).tag(sync=True)
    for _t in (fault_kind, fault_step, fault_target, crash_after):
        _t.allow_none = False
    del _t
    kinds = traitlets.List().tag(sync=True)
    steps = traitlets.List().tag(sync=True)
    saga_state = traitlets.Unicode("").tag(sync=True)
    frozen = traitlets.Unicode("").tag(sync=True)
    crashed = traitlets.Bool(False).tag(sync=True)
    next_step = traitlets.Int(1).tag(sync=True)
    forward = traitlets.List().tag(sync=True)
    stack = traitlets.List().tag(sync=True)
    in_doubt = traitlets.List().tag(sync=True)
    resources = traitlets.List().tag(sync=True)
    counts = traitlets.List().tag(sync=True)
    invariants = traitlets.List().tag(sync=True)
    summary = traitlets.Unicode("").tag(sync=True)

    def __init__(self, demo: SagaDemo, **kw: Any):
        if not isinstance(demo, SagaDemo):
            raise TypeError(f"SagaStepper drives a kernel_lib.sim.saga_demo.SagaDemo, got {type(demo).__name__}")
        self.demo = demo
        self._ready = False
        self._refused: str | None = None
        super().__init__(**kw)
        # defaults are never validated: seed the last accepted values with them
        self.__dict__.setdefault("_good_values", {}).update(
            {n: getattr(self, n) for n in ("fault_kind", "fault_target", "fault_step", "crash_after")
             if n not in self.__dict__["_good_values"]})
        self.kinds = list(FAULT_KINDS)
        self.steps = [{"value": i, "label": f"{i}: {t}"} for i, t in enumerate(DEPLOYMENT_STEPS, start=1)]
        self._ready = True
        self.refresh()

    # --- the control traits: refused values keep the previous one ---------------------------------
    def _refuse(self, name: str, value: Any, why: str) -> Any:
        # the last accepted value, kept here: a value sent from the page arrives inside
        # hold_trait_notifications, where the trait already holds the refused value when this runs
        previous = self.__dict__.setdefault("_good_values", {}).get(name, self._trait_values.get(name))
        self.error = self._refused = clip(f"{name} = {clip(repr(value), 60)} was refused: {why}; it stays "
                                          f"{previous!r}", 400)
        return previous

    def _accept(self, name: str, value: Any) -> Any:
        self.__dict__.setdefault("_good_values", {})[name] = value
        if self._ready and self.error.startswith(("fault_", "crash_after")):
            self.error = ""
        return value

    @traitlets.validate("fault_kind")
    def _check_kind(self, proposal: dict[str, Any]) -> Any:
        v = proposal["value"]
        if v not in FAULT_KINDS:
            return self._refuse("fault_kind", v, f"choose one of {', '.join(FAULT_KINDS)}")
        return self._accept("fault_kind", v)

    @traitlets.validate("fault_target")
    def _check_target(self, proposal: dict[str, Any]) -> Any:
        v = proposal["value"]
        if v not in TARGETS:
            return self._refuse("fault_target", v, "choose 'forward' (T_k) or 'compensator' (C_k)")
        return self._accept("fault_target", v)

    @traitlets.validate("fault_step")
    def _check_step(self, proposal: dict[str, Any]) -> Any:
        v = as_whole(proposal["value"])
        if v is None or not 1 <= v <= len(DEPLOYMENT_STEPS):
            return self._refuse("fault_step", proposal["value"], f"k is a whole number 1..{len(DEPLOYMENT_STEPS)}")
        return self._accept("fault_step", v)

    @traitlets.validate("crash_after")
    def _check_after(self, proposal: dict[str, Any]) -> Any:
        v = as_whole(proposal["value"])
        if v is None or not 1 <= v <= len(DEPLOYMENT_STEPS):
            return self._refuse("crash_after", proposal["value"],
                                "the number of compensators sent before the crash is a whole number "
                                f"1..{len(DEPLOYMENT_STEPS)}")
        return self._accept("crash_after", v)

    # --- actions -------------------------------------------------------------------------------------
    def run(self, action: str, **fields: Any) -> bool:
        """Run one action (``fields``: ``kind``, ``step``, ``target``, ``after`` set the control traits
        first). True on success; False when the reason is in ``error``."""
        names = {"kind": "fault_kind", "step": "fault_step", "target": "fault_target", "after": "crash_after"}
        self._refused = None
        for key, trait in names.items():
            if fields.get(key) is not None:
                setattr(self, trait, fields[key])
                if self._refused:
                    refused, self._refused = self._refused, None
                    self.summary = ""
                    self.refresh(keep_error=True)
                    self.error = refused
                    return False

        def step() -> None:
            try:
                act()
            except TrajectoryFrozenRefusal as exc:    # a refusal, not a fault: shown like any other reason
                raise ConfigError(str(exc)) from None

        def act() -> None:
            d = self.demo
            if action == "step":
                result = d.step()
            elif action == "inject":
                result = d.inject(self.fault_kind, self.fault_step, target=self.fault_target)
            elif action == "crash_unwind":
                result = d.crash_during_unwind(self.crash_after)
            elif action == "recover":
                result = d.recover()
            elif action == "unwind":
                result = d.unwind()
            else:
                result = {}
            self.summary = summarize(result) if result else self.summary

        return self.attempt(action, step)

    def refusal(self, action: str, exc: Exception) -> str:
        self.summary = ""
        return super().refusal(action, exc)

    def refresh(self, keep_error: bool = False) -> None:
        """Fold the stored log and read the services (through the demo) into the traits."""
        try:
            v = self.demo.view()
        except Exception as exc:   # noqa: BLE001 - a log or service that cannot be read: say so in the widget
            self.error = clip(f"cannot read the saga's state: {exc}", 400)
            return
        self.saga_state = v["saga_state"]
        self.frozen = (f"{v['frozen']['failure_mode']} (incident {v['frozen']['incident_id']})"
                       if v["frozen"] else "")
        self.crashed = v["crashed"]
        self.next_step = v["next_step"]
        self.forward, self.stack, self.in_doubt = v["forward"], v["stack"], v["in_doubt"]
        self.resources, self.counts, self.invariants = v["resources"], v["counts"], v["invariants"]
        self.status = (f"saga {v['saga_state']}" + (f", FROZEN: {self.frozen}" if self.frozen else "")
                       + (", runner abandoned (recover)" if v["crashed"] else "")
                       + f"; log {v['log_head']} events"
                       + (f"; next forward step T{v['next_step']}" if v["saga_state"] in ("(not started)", "RUNNING")
                          and not any(r["state"] in ("FAILED", "ABORTED", "HALTED") for r in v["forward"])
                          and v["next_step"] <= len(DEPLOYMENT_STEPS) else ""))
        if not keep_error:
            self.error = ""

    def dispatch(self, command: dict[str, Any]) -> None:
        fields = {k: command.get(k) for k in ("kind", "step", "target", "after") if k in command}
        self.run(str(command["action"]), **fields)


#: What the front end receives: static/_shared.js + static/saga_stepper.js, and static/saga_stepper.css.
_ESM, _CSS = SagaStepper._esm, SagaStepper._css
