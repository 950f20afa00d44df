"""Breaker dashboard: one circuit breaker's state, window, cooldown and transitions, stepped by hand
on a virtual clock or watched while the live gateway lab runs (Failure Recovery, "Tool Circuit
Breakers": table 8, figure 4 panel (a), E = (1/|W|) sum e_i against tau_fail, the cooldown
doubling T_cooldown <- min(2 T_cooldown, T_cooldown_max), the single canary).

An anywidget (JupyterLab, VS Code, marimo). It owns no state (DESIGN.md, principle 6): the
breaker is a :class:`kernel_lib.recovery.gateway.runner.CircuitBreaker` (the pure machine of
:mod:`kernel_lib.recovery.gateway.breaker` applied under a lock), and every figure shown is read
from it (:meth:`CircuitBreaker.snapshot`, :meth:`CircuitBreaker.state`,
:meth:`CircuitBreaker.transitions`). Two sources:

* ``BreakerDashboard(config)``: a breaker of its own on a
  :class:`~kernel_lib._support.clock.ManualClock` that starts at 0 s. Buttons (the protocol of
  :class:`widgets._base.CommandWidget`): ``success`` / ``failure`` (one call asks the breaker for
  a permit, then reports a transport success or failure; a refused call shows the synthetic
  ``ERR_CIRCUIT_OPEN`` observation the model would read), ``advance`` (the clock moves
  ``advance_s`` seconds and the time-driven transitions due are applied, as resilience4j's
  automatic open -> half-open does), ``reset`` (a new closed breaker and clock);
* ``BreakerDashboard.live(lab)``: the breaker of a running
  :class:`kernel_lib.live.gateway_lab.GatewayLab` in ``"bulkheads"`` mode (its ``symbol_index``
  dependency), times in seconds since the lab started. Buttons: ``refresh`` (read it again),
  ``dial`` (turn the lab's loopback service to ``latency_s`` and ``error_rate``: real threads call
  it, so the breaker trips and probes by itself).

Published traits: ``breaker`` (state and its label, the window's failure rate E and call count,
tau_fail, minimum calls, the cooldown, what remains of it, canaries in flight, the clock),
``window`` (the count window's outcomes, oldest first), ``transitions`` (time, from, to, reason,
cooldown after it, the rate that tripped it), ``timeline`` (the state's segments from 0 to now,
one per transition), ``readout`` (the same as sentences), ``status`` (what the last button did).

Bad input never raises into the notebook: ``advance_s``, ``latency_s`` or ``error_rate`` out of
range or of the wrong type (from code or from the page) keeps its previous value and says why in
``error``; a button that does not belong to the mode, or a dial the service refuses, is refused
the same way.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import traitlets

from kernel_lib._support.clock import ManualClock
from kernel_lib.errors import ConfigError
from kernel_lib.recovery.gateway.breaker import CLOSED, HALF_OPEN, OPEN, BreakerConfig
from kernel_lib.recovery.gateway.model import Observation
from kernel_lib.recovery.gateway.runner import CircuitBreaker
from widgets._base import CommandWidget, clip

__all__ = ["BreakerDashboard", "STATE_LABELS", "VIRTUAL_ACTIONS", "LIVE_ACTIONS", "readout_lines"]

#: How table 8 names the three states.
STATE_LABELS = {CLOSED: "Closed", OPEN: "Open", HALF_OPEN: "Half-Open"}
VIRTUAL_ACTIONS = ("success", "failure", "advance", "reset")
LIVE_ACTIONS = ("refresh", "dial")
#: The bounds the dashboard accepts (the service's own: latency 0..3600 s, error rate 0..1).
LIMITS = {"advance_s": (0.0, 86_400.0, True), "latency_s": (0.0, 3600.0, False), "error_rate": (0.0, 1.0, False)}

#: A short breaker for the hand-stepped dashboard: table 10's internal-RPC shape (tau_fail 0.5 over
#: W = 10 calls, at least 5) with a 30 s cooldown (the chapter's lower end) doubling up to 120 s.
DEFAULT_CONFIG = BreakerConfig(window_size=10, minimum_calls=5, failure_rate_threshold=0.5, cooldown_s=30.0,
                               cooldown_max_s=120.0, half_open_permits=1, canary_timeout_s=10.0)


def _fmt_s(x: float) -> str:
    return f"{x:,.1f} s" if x >= 1 else f"{x * 1000:,.0f} ms"


def readout_lines(breaker: dict[str, Any], transitions: list[dict[str, Any]]) -> list[str]:
    """The dashboard's state (the ``breaker`` and ``transitions`` traits) as sentences."""
    b = breaker
    lines = [f"{b['dependency_id']}: {b['state_label']} at t = {b['now_s']:,.2f} s (generation {b['generation']})"]
    if b["state"] == CLOSED:
        if b["calls"] < b["minimum_calls"]:
            lines.append(f"window holds {b['calls']} of the {b['minimum_calls']} calls needed before a rate counts; "
                         f"every call is dispatched")
        else:
            lines.append(f"E = {b['failure_rate']:.2f} over the last {b['calls']} calls (W = {b['window_size']}), "
                         f"below tau_fail = {b['tau_fail']:.2f}: every call is dispatched")
    elif b["state"] == OPEN:
        left = b["cooldown_remaining_s"]
        lines.append(f"every call fails fast with ERR_CIRCUIT_OPEN; cooldown {_fmt_s(b['cooldown_s'])} (cap "
                     f"{_fmt_s(b['cooldown_max_s'])}), " + (f"{_fmt_s(left)} left" if left > 0 else
                                                             "elapsed: the next call is the canary"))
    else:
        n = b["canaries_in_flight"]
        lines.append(f"half-open: {n} canary in flight, every other caller fails fast" if n else
                     "half-open: the next call is admitted as the canary; if it fails, the cooldown doubles to "
                     f"{_fmt_s(min(2 * b['cooldown_s'], b['cooldown_max_s']))}")
    if transitions:
        t = transitions[-1]
        lines.append(f"last transition at t = {t['t_s']:,.2f} s: {STATE_LABELS[t['from_state']]} -> "
                     f"{STATE_LABELS[t['to_state']]} ({t['reason']}), {len(transitions)} in all")
    else:
        lines.append("no transition yet")
    return lines


class BreakerDashboard(CommandWidget, static="breaker_dashboard"):
    """One breaker's state, window, cooldown and transitions (module docstring).

    Args:
        config: the :class:`BreakerConfig` of the hand-stepped breaker (default
            :data:`DEFAULT_CONFIG`).
        dependency_id: the dependency's name (shown to the "model" in ERR_CIRCUIT_OPEN).
        advance_s: how far the ``advance`` button moves the virtual clock (s, > 0).

    Raises:
        GatewayConfigError: ``config`` is not a BreakerConfig, or ``dependency_id`` is empty.
    """

    ACTIONS = VIRTUAL_ACTIONS + LIVE_ACTIONS

    mode = traitlets.Unicode("virtual").tag(sync=True)
    # Any, so that a wrong value reaches the validators and becomes a message instead of a TraitError
    advance_s = traitlets.Any(5.0).tag(sync=True)
    latency_s = traitlets.Any(0.005).tag(sync=True)
    error_rate = traitlets.Any(0.0).tag(sync=True)
    for _t in (advance_s, latency_s, error_rate):
        _t.allow_none = False
    del _t
    breaker = traitlets.Dict().tag(sync=True)
    window = traitlets.List().tag(sync=True)
    transitions = traitlets.List().tag(sync=True)
    timeline = traitlets.List().tag(sync=True)
    readout = traitlets.List().tag(sync=True)
    lab_phase = traitlets.Unicode("").tag(sync=True)

    def __init__(self, config: BreakerConfig | None = None, *, dependency_id: str = "symbol_index",
                 advance_s: float = 5.0, _lab: Any = None, **kw: Any):
        self._ready = False
        self.__dict__["_good_values"] = {n: float(type(self).class_traits()[n].default_value) for n in LIMITS}
        self.lab = _lab
        if _lab is None:
            self._config = DEFAULT_CONFIG if config is None else config
            self.clock: ManualClock | None = None
            self.cb = self._new_breaker(dependency_id)
        else:
            self.clock = None
            self.cb = _lab.gw.routes[dependency_id].breaker
        super().__init__(mode="virtual" if _lab is None else "live", **kw)
        self.advance_s = advance_s
        self._ready = True
        self.refresh()

    @classmethod
    def live(cls, lab: Any, dependency_id: str = "symbol_index", **kw: Any) -> "BreakerDashboard":
        """A dashboard over the breaker of ``lab`` (a started or stopped
        :class:`~kernel_lib.live.gateway_lab.GatewayLab` in ``"bulkheads"`` mode).

        Raises:
            TypeError: ``lab`` is not a GatewayLab.
            ConfigError: the lab runs the shared pool (no breaker), or has no such dependency.
        """
        from kernel_lib.live.gateway_lab import GatewayLab

        if not isinstance(lab, GatewayLab):
            raise TypeError(f"BreakerDashboard.live watches a kernel_lib.live.gateway_lab.GatewayLab, got "
                            f"{type(lab).__name__}")
        if lab.gw is None:
            raise ConfigError(f"the lab runs in {lab.mode!r} mode: it has no gateway and no breaker; start one in "
                              "'bulkheads' mode")
        route = lab.gw.routes.get(dependency_id)
        if route is None or route.breaker is None:
            raise ConfigError(f"the lab's gateway has no breaker on {dependency_id!r}; it has "
                              f"{sorted(d for d, r in lab.gw.routes.items() if r.breaker is not None)}")
        return cls(dependency_id=dependency_id, _lab=lab, **kw)

    def _new_breaker(self, dependency_id: str) -> CircuitBreaker:
        self.clock = ManualClock(0.0)
        return CircuitBreaker(dependency_id, self._config, clock=self.clock, history=10_000)

    # --- the control traits: refused values keep the previous one ---------------------------------
    def _check_number(self, name: str, value: Any) -> Any:
        low, high, low_open = LIMITS[name]
        # the last accepted value, kept here: a value set from the page arrives inside
        # hold_trait_notifications, where the trait already holds the new value when this runs
        good = self.__dict__["_good_values"]
        previous = good[name]
        ok = (not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(value)
              and (value > low if low_open else value >= low) and value <= high)
        if not ok:
            bound = f"{'above' if low_open else 'from'} {low:g} {'and at most' if low_open else 'to'} {high:g}"
            self.error = clip(f"{name} = {clip(repr(value), 60)} was refused: choose a number {bound}; it stays "
                              f"{previous!r}", 400)
            return previous
        if self._ready and self.error.startswith(f"{name} = "):
            self.error = ""
        good[name] = float(value)
        return float(value)

    @traitlets.validate("advance_s")
    def _v_advance(self, proposal: dict[str, Any]) -> Any:
        return self._check_number("advance_s", proposal["value"])

    @traitlets.validate("latency_s")
    def _v_latency(self, proposal: dict[str, Any]) -> Any:
        return self._check_number("latency_s", proposal["value"])

    @traitlets.validate("error_rate")
    def _v_error_rate(self, proposal: dict[str, Any]) -> Any:
        return self._check_number("error_rate", proposal["value"])

    # --- the actions -----------------------------------------------------------------------------------
    def call(self, failure: bool, duration_s: float = 0.0) -> str:
        """One call through the hand-stepped breaker: ask for a permit; when admitted, record a
        transport ``failure`` (or success) of ``duration_s``. Returns what happened, in words.
        Raises ConfigError on a live dashboard (the lab's threads make the calls there)."""
        if self.lab is not None:
            raise ConfigError("the live lab's agents make the calls; use dial to change what the service does")
        permit = self.cb.acquire()
        if isinstance(permit, Observation):
            return f"refused without a call: {permit.context_text()}"
        kind = "canary" if permit.canary else "call"
        after = self.cb.record(permit, failure, duration_s)
        outcome = "failed (transport)" if failure else "succeeded"
        return f"{kind} dispatched, {outcome}; breaker now {STATE_LABELS[after]}"

    def advance(self, seconds: float | None = None) -> str:
        """Move the virtual clock ``seconds`` (default ``advance_s``) and apply the transitions due.
        Raises ConfigError on a live dashboard or for a bad ``seconds``."""
        if self.lab is not None or self.clock is None:
            raise ConfigError("the live lab runs on the wall clock; it cannot be advanced by hand")
        step = self.advance_s if seconds is None else seconds
        self.clock.advance(step)
        trs = self.cb.tick()
        moved = ", ".join(f"{STATE_LABELS[t.from_state]} -> {STATE_LABELS[t.to_state]} ({t.reason})" for t in trs)
        return f"clock +{step:g} s, now t = {self.clock():g} s" + (f"; {moved}" if moved else "")

    def dispatch(self, command: dict[str, Any]) -> None:
        action = command["action"]
        live_only, virtual_only = set(LIVE_ACTIONS), set(VIRTUAL_ACTIONS)

        def step() -> None:
            if self.lab is None and action in live_only:
                raise ConfigError(f"{action!r} drives a live lab; this dashboard steps its own breaker: "
                                  f"choose one of {list(VIRTUAL_ACTIONS)}")
            if self.lab is not None and action in virtual_only:
                raise ConfigError(f"{action!r} steps a breaker by hand; this dashboard watches a live lab: "
                                  f"choose one of {list(LIVE_ACTIONS)}")
            if action in ("success", "failure"):
                self.status = self.call(action == "failure")
            elif action == "advance":
                self.status = self.advance()
            elif action == "reset":
                self.cb = self._new_breaker(self.cb.dependency_id)
                self.status = "a new closed breaker, clock at 0 s"
            elif action == "dial":
                from kernel_lib.errors import HerdConfigError
                try:
                    view = self.lab.dial(latency_s=self.latency_s, error_rate=self.error_rate,
                                         label=f"dial {self.latency_s:g} s, {self.error_rate:g}")
                except HerdConfigError as exc:
                    raise ConfigError(str(exc)) from None
                self.status = (f"service dialed: latency {view['latency_s']:g} s, error rate "
                               f"{view['error_rate']:g}")
            else:
                self.status = "read again"

        self.attempt(action, step)

    # --- publishing ------------------------------------------------------------------------------------
    def refresh(self, keep_error: bool = False) -> None:
        """Read the breaker and publish it (``keep_error`` leaves ``error`` as it is)."""
        cfg = self.cb.config
        origin = 0.0 if self.lab is None else self.lab.wall0     # the lab's times count from its start
        snap = self.cb.snapshot()
        st = self.cb.state()
        now = snap.now_s - origin
        trs = [{"t_s": t.at_s - origin, "from_state": t.from_state, "to_state": t.to_state, "reason": t.reason,
                "cooldown_s": t.cooldown_s, "failure_rate": t.failure_rate, "calls": t.calls}
               for t in self.cb.transitions(limit=10_000)]
        b = {"dependency_id": self.cb.dependency_id, "state": snap.state, "state_label": STATE_LABELS[snap.state],
             "generation": snap.generation, "failure_rate": snap.failure_rate, "calls": snap.calls,
             "window_kind": cfg.window_kind, "window_size": cfg.window_size, "minimum_calls": cfg.minimum_calls,
             "tau_fail": cfg.failure_rate_threshold, "cooldown_s": snap.cooldown_s, "base_cooldown_s": cfg.cooldown_s,
             "cooldown_max_s": cfg.cooldown_max_s, "cooldown_remaining_s": snap.cooldown_remaining_s,
             "canaries_in_flight": snap.canaries_in_flight, "half_open_permits": cfg.half_open_permits,
             "now_s": now}
        window = []
        if cfg.window_kind == "count" and snap.state == CLOSED:
            window = [{"i": i, "failure": bool((st.fail_bits >> (st.calls - 1 - i)) & 1)} for i in range(st.calls)]
        segments, start, state = [], 0.0, CLOSED
        for t in trs:
            segments.append({"from_s": start, "to_s": t["t_s"], "state": state})
            start, state = t["t_s"], t["to_state"]
        segments.append({"from_s": start, "to_s": max(now, start), "state": state})
        with self.hold_trait_notifications():
            self.breaker, self.window, self.transitions, self.timeline = b, window, trs, segments
            self.readout = readout_lines(b, trs)
            if self.lab is not None:
                self.lab_phase = self.lab.phase
            if not keep_error:
                self.error = ""


#: What the front end receives: static/_shared.js + static/breaker_dashboard.js, and its CSS.
_ESM, _CSS = BreakerDashboard._esm, BreakerDashboard._css
