"""The circuit breaker's thin runner: the pure machine of :mod:`~kernel_lib.recovery.gateway.breaker`
applied under a lock, for threads and for asyncio, with its state either in this object or in a
shared store (Failure Recovery, "Tool Circuit Breakers", table 8).

:class:`CircuitBreaker` is the one class callers use:

* :meth:`~CircuitBreaker.acquire` -> a :class:`~kernel_lib.recovery.gateway.breaker.Permit`, or the
  synthetic ``ERR_CIRCUIT_OPEN`` :class:`~kernel_lib.recovery.gateway.model.Observation` (dependency
  id, remaining cooldown) when the breaker refuses; :meth:`~CircuitBreaker.complete` records the
  outcome under that permit. Between the two the caller does the real call.
* :meth:`~CircuitBreaker.call` (a plain function) and :meth:`~CircuitBreaker.acall` (a coroutine
  function, with an optional timeout) do all three and return an Observation.

Thread- and asyncio-safety: every decision runs under one ``threading.Lock`` held for a few
microseconds and never across the call itself or an ``await``; so a thread never blocks another
for the length of a call (pybreaker 1.4 holds its lock around the guarded call), and an asyncio
task holding the lock cannot be suspended inside it, so the lock is never contended on one loop.
The single canary of half-open holds under contention because admitting it is one atomic
step: read the state, decide, write the state with the canary's lease.

Where the state lives: with ``store=None`` in this object (one process). With a
:class:`BreakerStore` (:class:`MemoryBreakerStore` in one process; ``SQLiteBreakerStore`` of
:mod:`kernel_lib.recovery.gateway.shared` for every process of a host; ``EtcdBreakerStore`` of
:mod:`kernel_lib.quorum.breaker_store` across hosts) every breaker object with the same
``dependency_id`` on the same store shares one state: decisions that change the state run inside
the store's atomic update (a transaction, a compare-and-swap), decisions that do not change it
(closed admission, an open refusal before the cooldown, a success into a clean full window) read a
cached copy that the store vouches is current (:meth:`BreakerStore.is_fresh`) and write nothing.

With a store that does I/O (SQLite, etcd), a decision that writes blocks the caller for that
write; from asyncio that is the event loop (a local SQLite commit at ``synchronous=NORMAL`` is
tens to hundreds of microseconds; an etcd round trip is a network round trip -- run such calls in
a thread, ``asyncio.to_thread``, where that matters).

A fast fail is not a dispatch: nothing leaves the host, so no ``ToolIntent`` precedes it and the
trajectory log needs none (§11.3 eq. 1 constrains effects, and there is none).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from kernel_lib._support.clock import wall_clock
from kernel_lib.errors import GatewayConfigError
from kernel_lib.recovery.gateway.breaker import (
    CLOSED, OPEN, BreakerConfig, BreakerState, Permit, Transition, cooldown_remaining_s, decide, force, initial_state,
    record, tick, window_rates,
)
from kernel_lib.recovery.gateway.model import (
    ERR_CIRCUIT_OPEN, CallOutcome, Classifier, Observation, Verdict, classify_outcome,
)

__all__ = ["BreakerStore", "MemoryBreakerStore", "CircuitBreaker", "BreakerSnapshot", "circuit_open_observation",
           "observation_of"]

R = TypeVar("R")
#: an update applied atomically by a store: state -> (new state, transitions, result)
Update = Callable[[BreakerState], "tuple[BreakerState, tuple[Transition, ...], Any]"]


class BreakerStore(Protocol):
    """Where breaker states live when they are shared (one row / key per dependency)."""

    def load(self, dependency_id: str, config: BreakerConfig) -> tuple[BreakerState, object]:
        """The dependency's state (the initial state when there is none yet) and a freshness
        token for :meth:`is_fresh`. Raises BreakerStoreError."""

    def is_fresh(self, dependency_id: str, token: object) -> bool:
        """True when the state read or written with ``token`` is still the current one. Must be
        cheap (called on every admission); may answer False when unsure."""

    def update(self, dependency_id: str, config: BreakerConfig, fn: Update
               ) -> tuple[BreakerState, tuple[Transition, ...], object, Any]:
        """Atomically: read the current state, ``new, transitions, result = fn(state)``, and
        when ``new is not state`` or there are transitions, write ``new`` and append the
        transitions. Returns ``(new, transitions, token, result)``. ``fn`` is pure and may run more than once
        (a compare-and-swap retry). Raises BreakerStoreError."""

    def transitions(self, dependency_id: str | None = None, *, limit: int = 1000) -> list[tuple[str, Transition]]:
        """The recorded transitions, oldest first: ``(dependency_id, transition)``."""


class MemoryBreakerStore:
    """A :class:`BreakerStore` in this process's memory: breaker objects built on it with the same
    dependency id share one state (as if they were one breaker). The model for the durable stores
    and a test double; a restarted process starts from scratch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[BreakerState, int]] = {}
        self._log: list[tuple[str, Transition]] = []

    def load(self, dependency_id: str, config: BreakerConfig) -> tuple[BreakerState, object]:
        with self._lock:
            st, version = self._rows.get(dependency_id, (initial_state(config), 0))
            return st, version

    def is_fresh(self, dependency_id: str, token: object) -> bool:
        row = self._rows.get(dependency_id)
        return (row[1] if row is not None else 0) == token

    def update(self, dependency_id: str, config: BreakerConfig, fn: Update
               ) -> tuple[BreakerState, tuple[Transition, ...], object, Any]:
        with self._lock:
            st, version = self._rows.get(dependency_id, (initial_state(config), 0))
            new, trs, result = fn(st)
            if new is not st or trs:
                version += 1
                self._rows[dependency_id] = (new, version)
                self._log.extend((dependency_id, t) for t in trs)
            return new, trs, version, result

    def transitions(self, dependency_id: str | None = None, *, limit: int = 1000) -> list[tuple[str, Transition]]:
        with self._lock:
            rows = [r for r in self._log if dependency_id is None or r[0] == dependency_id]
        return rows[-limit:]


def circuit_open_observation(dependency_id: str, remaining_s: float, breaker_state: str, *, domain: str = "",
                             attempt: int = 0) -> Observation:
    """The synthetic observation of a refused call: <ERR_CIRCUIT_OPEN, dependency_id,
    T_cooldown_remaining> (the chapter's O_synthetic). Nothing was sent to the dependency."""
    if breaker_state == "half_open":
        msg = (f"Circuit breaker for {dependency_id!r} is half-open: one probe call is testing whether it has "
               "recovered. This call was not sent. Do not retry it now; use another approach or wait.")
    else:
        msg = (f"Circuit breaker for {dependency_id!r} is open after repeated transport failures. This call was not "
               f"sent. The next probe is allowed in {remaining_s:.1f} s. Do not retry it before then; use another "
               "tool or plan, or wait.")
    return Observation(ERR_CIRCUIT_OPEN, dependency_id, domain, True, False, msg, breaker_state=breaker_state,
                       cooldown_remaining_s=remaining_s, attempt=attempt)


def observation_of(dependency_id: str, outcome: CallOutcome, verdict: Verdict, *, domain: str = "",
                   breaker_state: str | None = None, attempt: int = 0, queue_wait_s: float = 0.0,
                   retry_after_s: float | None = None, code: str | None = None) -> Observation:
    """The real observation of a dispatched call (``dispatched=True``, ``synthetic=False``)."""
    err = outcome.error
    c = code or verdict.code
    if c == "OK" and err is None:                   # the common case, built positionally
        return Observation(c, dependency_id, domain, False, True, "ok", outcome.value, None, verdict.status, False,
                           breaker_state, None, outcome.duration_s + queue_wait_s, queue_wait_s, attempt,
                           retry_after_s)
    error = None if err is None else f"{type(err).__name__}: {err}"[:500]
    if c == "OK":
        msg = "ok"
    elif outcome.timed_out:
        msg = f"no answer from {dependency_id!r} within {outcome.duration_s:.3f} s (timed out)"
    elif verdict.status is not None:
        msg = f"{dependency_id!r} answered HTTP {verdict.status}" + (f" ({error})" if error else "")
    else:
        msg = error or f"{dependency_id!r}: {verdict.kind}"
    return Observation(c, dependency_id, domain, False, True, msg, value=outcome.value, error=error,
                       status=verdict.status, failure=verdict.failure, breaker_state=breaker_state,
                       duration_s=outcome.duration_s + queue_wait_s, queue_wait_s=queue_wait_s, attempt=attempt,
                       retry_after_s=retry_after_s)


class BreakerSnapshot:
    """What a dashboard shows of one breaker at ``now_s`` (plain attributes; :meth:`to_json`)."""

    __slots__ = ("dependency_id", "state", "generation", "failure_rate", "slow_call_rate", "calls",
                 "cooldown_s", "cooldown_remaining_s", "canaries_in_flight", "now_s")

    def __init__(self, dependency_id: str, config: BreakerConfig, st: BreakerState, now_s: float):
        self.dependency_id = dependency_id
        self.state = st.state
        self.generation = st.generation
        self.failure_rate, self.slow_call_rate, self.calls = window_rates(config, st, now_s)
        self.cooldown_s = st.cooldown_s
        self.cooldown_remaining_s = cooldown_remaining_s(st, now_s)
        self.canaries_in_flight = len(st.canaries)
        self.now_s = now_s

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


_IDS = itertools.count(1)


class CircuitBreaker:
    """One dependency's circuit breaker (module docstring).

    Args:
        dependency_id: the dependency's name (the store's key; shown to the model). Non-empty str.
        config: a :class:`BreakerConfig` (default: its defaults: count window 20, minimum 10
            calls, tau_fail 0.5, cooldown 30 s doubling to 300 s, one canary).
        clock: seconds as a float, injected (default the wall clock, comparable across the
            processes of a host; a :class:`~kernel_lib._support.clock.ManualClock` or the
            simulator's virtual clock in tests).
        classify: outcome -> verdict (default :func:`classify_outcome`: transport failures only).
        store: a :class:`BreakerStore` to share the state, or None (state in this object).
        on_transition: called with each :class:`Transition` this object made (outside the lock).
        history: transitions kept in :attr:`recent_transitions` (this object's own, newest last).

    Raises:
        GatewayConfigError: a bad argument.
    """

    def __init__(self, dependency_id: str, config: BreakerConfig | None = None, *,
                 clock: Callable[[], float] = wall_clock, classify: Classifier = classify_outcome,
                 store: BreakerStore | None = None, on_transition: Callable[[Transition], None] | None = None,
                 history: int = 256):
        if not isinstance(dependency_id, str) or not dependency_id or len(dependency_id) > 512:
            raise GatewayConfigError(f"dependency_id must be a non-empty str of at most 512 characters, got "
                                     f"{dependency_id!r}", field="dependency_id")
        config = BreakerConfig() if config is None else config
        if not isinstance(config, BreakerConfig):
            raise GatewayConfigError(f"config must be a BreakerConfig, got {type(config).__name__}", field="config")
        for name, fn in (("clock", clock), ("classify", classify)):
            if not callable(fn):
                raise GatewayConfigError(f"{name} must be callable", field=name)
        if on_transition is not None and not callable(on_transition):
            raise GatewayConfigError("on_transition must be callable or None", field="on_transition")
        if type(history) is not int or history < 0:
            raise GatewayConfigError(f"history must be an integer >= 0, got {history!r}", field="history")
        self.dependency_id = dependency_id
        self.config = config
        self.clock = clock
        self.classify = classify
        self.store = store
        self.on_transition = on_transition
        self.recent_transitions: deque[Transition] = deque(maxlen=history)
        self._lock = threading.Lock()
        self._tag = f"{os.getpid()}.{next(_IDS)}"
        self._ids = itertools.count(1)
        if store is None:
            self._state = initial_state(config)
            self._token: object = None
        else:
            self._state, self._token = store.load(dependency_id, config)
        self._closed_permit = Permit(-1)          # the permit of the current closed generation, reused
        # record()'s no-op case, checked inline on the hot path: a success (not slow) into a full count
        # window holding no failure and no slow call leaves the state as it is (breaker.record agrees)
        self._full_w = config.window_size if config.window_kind == "count" else -1
        self._slow_s = config.slow_call_duration_s

    # --- state access (the only code that knows where the state lives) -------------------------------
    def _current(self) -> BreakerState:
        """The current state (caller holds the lock): this object's, or the store's (cached while
        the store says it is fresh)."""
        if self.store is not None and not self.store.is_fresh(self.dependency_id, self._token):
            self._state, self._token = self.store.load(self.dependency_id, self.config)
        return self._state

    def _apply(self, fn: Update) -> tuple[tuple[Transition, ...], Any]:
        """Apply ``fn`` atomically (caller holds the lock); ``(transitions, result)``. A dry run
        on the current state that changes nothing writes nothing; otherwise the store's atomic
        update re-runs ``fn`` on the state it reads, and its run is the one that counts."""
        st = self._current()
        new, trs, result = fn(st)
        if new is st and not trs:
            return (), result
        if self.store is None:
            self._state = new
        else:
            self._state, trs, self._token, result = self.store.update(self.dependency_id, self.config, fn)
        if trs:
            self.recent_transitions.extend(trs)
        return trs, result

    def _emit(self, trs: tuple[Transition, ...]) -> None:
        if trs and self.on_transition is not None:
            for t in trs:
                self.on_transition(t)

    # --- admission and outcomes ----------------------------------------------------------------------
    def acquire(self, *, domain: str = "", attempt: int = 0) -> Permit | Observation:
        """A :class:`Permit` when the call may be dispatched now; otherwise the synthetic
        ``ERR_CIRCUIT_OPEN`` observation (open, or half-open with its canaries in flight)."""
        with self._lock:
            st = self._state if self.store is None else self._current()
            if st.state == CLOSED:                      # the common case: nothing to decide or write
                p = self._closed_permit
                if p.generation != st.generation:
                    p = self._closed_permit = Permit(st.generation)
                return p
            now = float(self.clock())
            if st.state == OPEN and st.opened_at_s is not None and now < st.opened_at_s + st.cooldown_s:
                remaining = st.opened_at_s + st.cooldown_s - now      # refused, nothing changes: decide() agrees
                return circuit_open_observation(self.dependency_id, remaining, OPEN, domain=domain, attempt=attempt)
            pid = f"{self._tag}.{next(self._ids)}"

            def fn(s: BreakerState) -> tuple[BreakerState, tuple[Transition, ...], Any]:
                d = decide(self.config, s, now, pid)
                return d.state, d.transitions, d

            trs, d = self._apply(fn)
        self._emit(trs)
        if d.admitted:
            return d.permit
        return circuit_open_observation(self.dependency_id, d.cooldown_remaining_s, d.state.state, domain=domain,
                                        attempt=attempt)

    def record(self, permit: Permit, failure: bool, duration_s: float = 0.0) -> str:
        """Record an outcome already classified (``failure``: transport criteria) of a call
        admitted under ``permit`` that took ``duration_s``. Returns the breaker state after it."""
        with self._lock:
            if self.store is None:                      # the state is ours: no closure, no dry run
                st = self._state
                if (not failure and st.calls == self._full_w and not st.fail_bits and not st.slow_bits
                        and st.state == CLOSED and permit.generation == st.generation
                        and (self._slow_s is None or duration_s < self._slow_s)):
                    return CLOSED
                now = float(self.clock())
                new, trs = record(self.config, st, permit, failure, duration_s, now)
                if new is st:
                    return st.state
                self._state = new
                if trs:
                    self.recent_transitions.extend(trs)
                state = new.state
            else:
                def fn(s: BreakerState) -> tuple[BreakerState, tuple[Transition, ...], Any]:
                    new, trs = record(self.config, s, permit, failure, duration_s, now)
                    return new, trs, new.state

                now = float(self.clock())
                trs, state = self._apply(fn)
        self._emit(trs)
        return state

    def abandon(self, permit: Permit, duration_s: float = 0.0) -> str:
        """The caller gave up on a call admitted under ``permit`` before it answered (its task was
        cancelled, the process is being interrupted). The dependency did nothing wrong, so an
        ordinary call is not counted at all (counting it as a failure let cancelled callers trip
        the breaker of a healthy dependency); a half-open canary counts as failed, so the breaker
        reopens now instead of waiting out the canary's lease. Returns the state after it."""
        if not permit.canary:
            with self._lock:
                return (self._state if self.store is None else self._current()).state
        return self.record(permit, True, duration_s)

    def complete(self, permit: Permit, outcome: CallOutcome) -> tuple[Verdict, str]:
        """Classify ``outcome`` with :attr:`classify` and record it; ``(verdict, state after)``."""
        verdict = self.classify(outcome)
        return verdict, self.record(permit, verdict.failure, outcome.duration_s)

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Observation:
        """Call ``fn(*args, **kwargs)`` through the breaker: a fast ``ERR_CIRCUIT_OPEN`` when it
        refuses, else the real observation (its ``value`` is what ``fn`` returned). An exception
        from ``fn`` is classified and returned as an observation, not raised (``KeyboardInterrupt``
        and ``SystemExit`` propagate after :meth:`abandon`)."""
        p = self.acquire()
        if type(p) is not Permit:
            return p
        clock = time.perf_counter
        t0 = clock()
        try:
            value = fn(*args, **kwargs)
        except (KeyboardInterrupt, SystemExit):
            self.abandon(p, clock() - t0)
            raise
        except BaseException as exc:           # noqa: B036 -- classified, recorded, returned as an observation
            outcome = CallOutcome(None, exc, False, clock() - t0)
        else:
            outcome = CallOutcome(value, None, False, clock() - t0)
        verdict = self.classify(outcome)
        state = self.record(p, verdict.failure, outcome.duration_s)
        return observation_of(self.dependency_id, outcome, verdict, breaker_state=state)

    async def acall(self, fn: Callable[..., Awaitable[Any]], /, *args: Any, timeout_s: float | None = None,
                    **kwargs: Any) -> Observation:
        """The asyncio form of :meth:`call`: ``await fn(*args, **kwargs)``, given up after
        ``timeout_s`` (s; None: no limit) as a timeout failure (the awaited task is cancelled)."""
        p = self.acquire()
        if type(p) is not Permit:
            return p
        t0 = time.perf_counter()
        try:
            if timeout_s is None:
                value = await fn(*args, **kwargs)
            else:
                value = await asyncio.wait_for(fn(*args, **kwargs), timeout_s)
        except asyncio.TimeoutError:
            outcome = CallOutcome(timed_out=True, duration_s=time.perf_counter() - t0)
        except asyncio.CancelledError:
            self.abandon(p, time.perf_counter() - t0)
            raise
        except Exception as exc:
            outcome = CallOutcome(error=exc, duration_s=time.perf_counter() - t0)
        else:
            outcome = CallOutcome(value=value, duration_s=time.perf_counter() - t0)
        verdict, state = self.complete(p, outcome)
        return observation_of(self.dependency_id, outcome, verdict, breaker_state=state)

    # --- views and operator actions ------------------------------------------------------------------
    def state(self) -> BreakerState:
        """The current recorded state (time-driven transitions not applied: see :meth:`tick`)."""
        with self._lock:
            return self._current()

    def tick(self) -> tuple[Transition, ...]:
        """Apply the transitions due now without admitting a call (:func:`breaker.tick`)."""
        with self._lock:
            now = float(self.clock())

            def fn(s: BreakerState) -> tuple[BreakerState, tuple[Transition, ...], Any]:
                new, trs = tick(self.config, s, now)
                return new, trs, None

            trs, _ = self._apply(fn)
        self._emit(trs)
        return trs

    def snapshot(self) -> BreakerSnapshot:
        """The dashboard's view now (:class:`BreakerSnapshot`)."""
        with self._lock:
            st = self._current()
            return BreakerSnapshot(self.dependency_id, self.config, st, float(self.clock()))

    def force(self, to_state: str) -> tuple[Transition, ...]:
        """An operator forces ``"open"`` or ``"closed"`` (:func:`breaker.force`)."""
        with self._lock:
            now = float(self.clock())

            def fn(s: BreakerState) -> tuple[BreakerState, tuple[Transition, ...], Any]:
                new, trs = force(self.config, s, to_state, now)
                return new, trs, None

            trs, _ = self._apply(fn)
        self._emit(trs)
        return trs

    def transitions(self, *, limit: int = 1000) -> list[Transition]:
        """The dependency's recorded transitions: from the store when shared (every process's),
        else this object's :attr:`recent_transitions`."""
        if self.store is None:
            return list(self.recent_transitions)[-limit:]
        return [t for _, t in self.store.transitions(self.dependency_id, limit=limit)]
