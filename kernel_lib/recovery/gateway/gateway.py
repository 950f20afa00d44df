"""The tool gateway: one object composing bulkhead -> circuit breaker -> call with timeout ->
classification -> backoff decision, and answering every call with an
:class:`~kernel_lib.recovery.gateway.model.Observation` (Failure Recovery, "Tool Circuit Breakers":
table 8, figure 4, tables 9-10).

For one call to ``dependency_id`` (registered in a domain with :meth:`ToolGateway.register`):

1. an open breaker before its cooldown answers ``ERR_CIRCUIT_OPEN`` at once (a peek that changes
   nothing, so a refused call does not even queue for a slot);
2. the domain's bulkhead grants a slot, or answers ``ERR_BULKHEAD_FULL`` /
   ``ERR_RESOURCE_EXHAUSTED``;
3. the breaker admits the call (closed, or as the half-open canary) or answers
   ``ERR_CIRCUIT_OPEN`` (the slot is given back);
4. the call runs on the domain's worker pool (threads) or is awaited (asyncio), given up after
   the domain's call timeout (the asyncio slots are the domain's caps again, per event loop, apart
   from the threads' slots);
5. the outcome is classified (transport failures only; replaceable) and recorded by the breaker;
6. a failure gets a backoff decision from the domain's policy: ``retry_after_s`` (a jittered delay,
   when ``attempt < max_retries`` and the retry budget pays for it) or None.

Steps 1-3 are fast fails: nothing leaves the host, so none is a dispatch -- no ``ToolIntent`` is
written before one and none is needed (§11.3 eq. 1 governs effects, and a refusal has none). A
caller that logs its trajectory records the synthetic observation as what the model saw. A
dispatched call (step 4) is a dispatch: a caller that needs it durable goes through its
:class:`~kernel_lib.gate.dispatch.DispatchGate` first and passes the gate's effect function as
``fn``; the gateway changes nothing of the gate's durability rules.

The gateway does not sleep: it advises (``retry_after_s``). :meth:`ToolGateway.call_with_retries`
is the small loop that follows the advice with an injected ``sleep`` (the simulator passes its
virtual clock's).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kernel_lib._support.clock import wall_clock
from kernel_lib.errors import GatewayConfigError
from kernel_lib.recovery.gateway.backoff import BackoffPolicy, make_rng
from kernel_lib.recovery.gateway.breaker import OPEN, BreakerConfig, Permit, Transition, cooldown_remaining_s
from kernel_lib.recovery.gateway.bulkhead import TABLE_9_DOMAINS, AsyncBulkhead, Bulkhead, DomainSpec, Slot
from kernel_lib.recovery.gateway.model import (
    ERR_RESOURCE_EXHAUSTED, CallOutcome, Classifier, Observation, Verdict, classify_outcome,
)
from kernel_lib.recovery.gateway.runner import BreakerStore, CircuitBreaker, circuit_open_observation, observation_of

__all__ = ["ToolGateway", "Route", "bulkhead_observation"]

_DEFAULT = object()


@dataclass(frozen=True, slots=True)
class Route:
    """Where a dependency's calls go: its ``domain``, its ``breaker`` (None: no breaker) and its
    ``backoff`` policy (None: no retry advised)."""

    dependency_id: str
    domain: str
    breaker: CircuitBreaker | None
    backoff: BackoffPolicy | None


def _call_arguments(attempt: Any, previous_delay_s: Any, timeout_s: Any) -> None:
    """Check a call's own arguments before anything is dispatched (a bad one found after the tool
    ran would lose its observation). Raises GatewayConfigError."""
    if type(attempt) is not int or attempt < 0:
        raise GatewayConfigError(f"attempt must be an integer >= 0 (0 for the first call), got {attempt!r}",
                                 field="attempt")
    for name, v, positive in (("previous_delay_s", previous_delay_s, False), ("timeout_s", timeout_s, True)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or (v <= 0 if positive else v < 0):
            bound = "> 0" if positive else ">= 0"
            raise GatewayConfigError(f"{name} must be None or a finite number of seconds {bound}, got {v!r}",
                                     field=name)


def bulkhead_observation(code: str, dependency_id: str, domain: str, spec: DomainSpec, *, attempt: int = 0
                         ) -> Observation:
    """The synthetic observation of a call the bulkhead refused (nothing was sent)."""
    if code == ERR_RESOURCE_EXHAUSTED:
        msg = (f"The {domain} tool queue is saturated ({spec.queue_capacity} callers already waiting for "
               f"{spec.max_concurrent} slots). This call to {dependency_id!r} was not sent; defer it, take another "
               "branch, or wait before trying again.")
    else:
        msg = (f"Every {domain} tool slot is busy ({spec.max_concurrent} running) and none freed up in time. This "
               f"call to {dependency_id!r} was not sent; defer it or try another approach.")
    return Observation(code, dependency_id, domain, True, False, msg, attempt=attempt)


class ToolGateway:
    """Every tool call through bulkhead, breaker, timeout, classification and backoff (module docstring).

    Args:
        domains: name -> :class:`DomainSpec` (default :data:`TABLE_9_DOMAINS`).
        clock: seconds as a float for the breakers (injected; default the wall clock).
        rng: the backoff's random generator, or a seed (injected; default freshly seeded).
        classify: the outcome classifier for every breaker (default :func:`classify_outcome`).
        breaker_store: a shared :class:`BreakerStore` (e.g. ``SQLiteBreakerStore``) or None.
        on_transition: called with ``(dependency_id, transition)`` on every breaker transition.

    Raises:
        GatewayConfigError: a bad argument.
    """

    def __init__(self, domains: Mapping[str, DomainSpec] | None = None, *, clock: Callable[[], float] = wall_clock,
                 rng: "random.Random | int | None" = None, classify: Classifier = classify_outcome,
                 breaker_store: BreakerStore | None = None,
                 on_transition: Callable[[str, Transition], None] | None = None):
        domains = dict(TABLE_9_DOMAINS if domains is None else domains)
        if not domains:
            raise GatewayConfigError("a gateway needs at least one domain", field="domains")
        for name, spec in domains.items():
            if not isinstance(spec, DomainSpec) or spec.name != name:
                raise GatewayConfigError(f"domains must map each name to its DomainSpec, got {name!r}: {spec!r}",
                                         field="domains")
        if not callable(clock) or not callable(classify):
            raise GatewayConfigError("clock and classify must be callable")
        self.domains = domains
        self.clock = clock
        self.rng = make_rng(rng)
        self._rng_lock = threading.Lock()
        self.classify = classify
        self.breaker_store = breaker_store
        self.on_transition = on_transition
        self.bulkheads = {name: Bulkhead(spec) for name, spec in domains.items()}
        # one AsyncBulkhead per (event loop, domain): asyncio primitives belong to one loop
        self._async_bulkheads: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncBulkhead]]" = \
            weakref.WeakKeyDictionary()
        self.routes: dict[str, Route] = {}
        self._lock = threading.Lock()

    # --- routes -----------------------------------------------------------------------------------------
    def register(self, dependency_id: str, domain: str, *, breaker: Any = _DEFAULT, backoff: Any = _DEFAULT) -> Route:
        """Route ``dependency_id``'s calls through ``domain``. ``breaker``: a :class:`BreakerConfig`,
        None (no breaker), or omitted (the domain's, table 10). ``backoff``: a :class:`BackoffPolicy`,
        None, or omitted (the domain's). Registering again replaces the route (and its breaker).

        Raises GatewayConfigError for an unknown domain, a bad dependency id or a bad policy."""
        if not isinstance(dependency_id, str) or not dependency_id or len(dependency_id) > 512:
            raise GatewayConfigError(f"dependency_id must be a non-empty str of at most 512 characters, got "
                                     f"{dependency_id!r}", field="dependency_id")
        if not isinstance(domain, str) or domain not in self.domains:
            raise GatewayConfigError(f"unknown domain {domain!r}; known: {', '.join(self.domains)}", field="domain")
        spec = self.domains[domain]
        cfg = spec.breaker if breaker is _DEFAULT else breaker
        pol = spec.backoff if backoff is _DEFAULT else backoff
        if cfg is not None and not isinstance(cfg, BreakerConfig):
            raise GatewayConfigError("breaker must be a BreakerConfig or None", field="breaker")
        if pol is not None and not isinstance(pol, BackoffPolicy):
            raise GatewayConfigError("backoff must be a BackoffPolicy or None", field="backoff")
        cb = None
        if cfg is not None:
            hook = None
            if self.on_transition is not None:
                hook = (lambda t, _d=dependency_id: self.on_transition(_d, t))
            cb = CircuitBreaker(dependency_id, cfg, clock=self.clock, classify=self.classify,
                                store=self.breaker_store, on_transition=hook)
        route = Route(dependency_id, domain, cb, pol)
        with self._lock:
            self.routes[dependency_id] = route
        return route

    def route(self, dependency_id: str) -> Route:
        """The registered route. Raises GatewayConfigError for an unregistered dependency."""
        r = self.routes.get(dependency_id)
        if r is None:
            raise GatewayConfigError(f"dependency {dependency_id!r} is not registered with the gateway "
                                     "(ToolGateway.register)", field="dependency_id")
        return r

    def breaker(self, dependency_id: str) -> CircuitBreaker | None:
        return self.route(dependency_id).breaker

    # --- the steps ----------------------------------------------------------------------------------------
    def _peek_open(self, r: Route, attempt: int) -> Observation | None:
        cb = r.breaker
        if cb is None:
            return None
        st = cb.state()
        if st.state == OPEN:
            remaining = cooldown_remaining_s(st, float(self.clock()))
            if remaining > 0:
                return circuit_open_observation(r.dependency_id, remaining, OPEN, domain=r.domain, attempt=attempt)
        return None

    def _advice(self, r: Route, verdict: Verdict, attempt: int, previous_delay_s: float | None) -> float | None:
        pol = r.backoff
        if not verdict.failure or pol is None:
            return None
        if pol.max_retries is not None and attempt >= pol.max_retries:
            return None
        if pol.budget is not None and not pol.budget.try_take():
            return None
        with self._rng_lock:
            return pol.delay_s(min(attempt, 1000), self.rng, previous_delay_s)

    def _finish(self, r: Route, permit: Permit | None, outcome: CallOutcome, slot: Slot, attempt: int,
                previous_delay_s: float | None) -> Observation:
        if r.breaker is not None and permit is not None:
            verdict, state = r.breaker.complete(permit, outcome)
        else:
            verdict, state = self.classify(outcome), None
        retry = self._advice(r, verdict, attempt, previous_delay_s)
        obs = observation_of(r.dependency_id, outcome, verdict, domain=r.domain, breaker_state=state, attempt=attempt,
                             queue_wait_s=slot.queue_wait_s, retry_after_s=retry)
        if verdict.failure and retry is None and r.backoff is not None:
            obs = _with_message(obs, obs.message + " No retry left under the retry policy.")
        return obs

    def call(self, dependency_id: str, fn: Callable[..., Any], /, *args: Any, attempt: int = 0,
             previous_delay_s: float | None = None, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """One attempt of ``fn(*args, **kwargs)`` through the gateway (module docstring's steps).

        ``attempt``: 0 for the first call, k+1 for retry k (for the backoff decision);
        ``previous_delay_s``: the last delay (decorrelated jitter); ``timeout_s``: overrides the
        domain's call timeout. Returns the real or synthetic observation; never raises for what the
        tool did (``KeyboardInterrupt`` / ``SystemExit`` propagate). Raises GatewayConfigError
        for an unregistered dependency or a bad ``attempt`` / ``timeout_s`` / ``previous_delay_s``
        (checked before anything is dispatched)."""
        r = self.route(dependency_id)
        _call_arguments(attempt, previous_delay_s, timeout_s)
        refused = self._peek_open(r, attempt)
        if refused is not None:
            return refused
        bh = self.bulkheads[r.domain]
        slot = bh.acquire()
        if not isinstance(slot, Slot):
            return bulkhead_observation(slot, dependency_id, r.domain, bh.spec, attempt=attempt)
        permit = None
        if r.breaker is not None:
            p = r.breaker.acquire(domain=r.domain, attempt=attempt)
            if not isinstance(p, Permit):
                bh.release()
                return p
            permit = p
        try:
            outcome = bh.call_in_slot(fn, args, kwargs, timeout_s)
        except (KeyboardInterrupt, SystemExit):
            if permit is not None:
                r.breaker.abandon(permit)
            raise
        return self._finish(r, permit, outcome, slot, attempt, previous_delay_s)

    async def acall(self, dependency_id: str, fn: Callable[..., Awaitable[Any]], /, *args: Any, attempt: int = 0,
                    previous_delay_s: float | None = None, timeout_s: float | None = None,
                    **kwargs: Any) -> Observation:
        """The asyncio form of :meth:`call` (``fn`` is a coroutine function; the domain's
        :class:`AsyncBulkhead` on this loop; a timed-out call is cancelled)."""
        r = self.route(dependency_id)
        _call_arguments(attempt, previous_delay_s, timeout_s)
        refused = self._peek_open(r, attempt)
        if refused is not None:
            return refused
        per_loop = self._async_bulkheads.setdefault(asyncio.get_running_loop(), {})
        bh = per_loop.get(r.domain)
        if bh is None:
            bh = per_loop[r.domain] = AsyncBulkhead(self.domains[r.domain])
        slot = await bh.acquire()
        if not isinstance(slot, Slot):
            return bulkhead_observation(slot, dependency_id, r.domain, bh.spec, attempt=attempt)
        permit = None
        if r.breaker is not None:
            p = r.breaker.acquire(domain=r.domain, attempt=attempt)
            if not isinstance(p, Permit):
                await bh.release()
                return p
            permit = p
        try:
            outcome = await bh.call_in_slot(fn, args, kwargs, timeout_s)
        except BaseException:
            if permit is not None:
                r.breaker.abandon(permit)
            raise
        return self._finish(r, permit, outcome, slot, attempt, previous_delay_s)

    def call_with_retries(self, dependency_id: str, fn: Callable[..., Any], /, *args: Any,
                          sleep: Callable[[float], Any] = time.sleep, **kwargs: Any) -> list[Observation]:
        """Call, and follow the gateway's advice: sleep ``retry_after_s`` (with the injected
        ``sleep``) and call again, until an answer with no retry advised. Returns every attempt's
        observation (the last one is what the agent sees). Bounded by the route's policy."""
        out: list[Observation] = []
        prev = None
        while True:
            obs = self.call(dependency_id, fn, *args, attempt=len(out), previous_delay_s=prev, **kwargs)
            out.append(obs)
            if obs.retry_after_s is None:
                return out
            prev = obs.retry_after_s
            sleep(obs.retry_after_s)

    # --- views ---------------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The dashboard's view: ``{"domains": {name: bulkhead view}, "breakers": {dependency:
        breaker snapshot}}`` (plain JSON)."""
        return {"domains": {n: b.view() for n, b in self.bulkheads.items()},
                "breakers": {d: r.breaker.snapshot().to_json() for d, r in self.routes.items()
                             if r.breaker is not None}}

    def close(self) -> None:
        """Shut the domains' worker pools down (running calls finish on their threads)."""
        for b in self.bulkheads.values():
            b.close()


def _with_message(obs: Observation, message: str) -> Observation:
    return replace(obs, message=message)
