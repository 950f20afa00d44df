"""The tri-state circuit breaker (Failure Recovery, "Tool Circuit Breakers", table 8, figure 4 (a)).

Fault model: a dependency that times out, answers 5xx / 429, sends malformed frames, or answers
with domain errors; many threads and asyncio tasks calling at once when the cooldown ends.
Invariants: only transport failures trip it; it trips at E >= tau_fail once the window holds the
minimum calls; open refuses with ERR_CIRCUIT_OPEN and the remaining cooldown without calling the
dependency; half-open lets exactly one canary reach the dependency (counted at the dependency); a
failed canary doubles the cooldown up to its cap, a successful one closes with the base cooldown.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib._support.clock import ManualClock
from kernel_lib.errors import GatewayConfigError, StoreBusyError
from kernel_lib.recovery.gateway import (
    CLOSED, ERR_CIRCUIT_OPEN, ERR_MALFORMED, ERR_RATE_LIMITED, ERR_SERVER, ERR_TIMEOUT, ERR_TOOL, ERR_TRANSPORT,
    HALF_OPEN, OK, OPEN, BreakerConfig, CallOutcome, CircuitBreaker, MemoryBreakerStore, Permit, classify_outcome,
    decide, initial_state, record, tick, window_rates,
)


class Resp:
    def __init__(self, status_code):
        self.status_code = status_code


class HTTPStatusError(Exception):
    def __init__(self, status):
        super().__init__(f"HTTP {status}")
        self.response = Resp(status)


class RecordNotFound(Exception):
    pass


# --- classification ---------------------------------------------------------------------------------

@pytest.mark.parametrize("outcome, failure, code", [
    (CallOutcome(value={"rows": []}), False, OK),
    (CallOutcome(value=Resp(200)), False, OK),
    (CallOutcome(value=Resp(404)), False, ERR_TOOL),
    (CallOutcome(value={"status": 409, "error": "conflict"}), False, ERR_TOOL),
    (CallOutcome(error=RecordNotFound("record not found")), False, ERR_TOOL),
    (CallOutcome(error=KeyError("x")), False, ERR_TOOL),
    (CallOutcome(error=ValueError("bad argument")), False, ERR_TOOL),
    (CallOutcome(error=HTTPStatusError(404)), False, ERR_TOOL),
    (CallOutcome(timed_out=True, duration_s=5.0), True, ERR_TIMEOUT),
    (CallOutcome(error=TimeoutError()), True, ERR_TIMEOUT),
    (CallOutcome(error=socket.timeout()), True, ERR_TIMEOUT),
    (CallOutcome(value=Resp(503)), True, ERR_SERVER),
    (CallOutcome(value={"status_code": 500}), True, ERR_SERVER),
    (CallOutcome(error=HTTPStatusError(502)), True, ERR_SERVER),
    (CallOutcome(value=Resp(429)), True, ERR_RATE_LIMITED),
    (CallOutcome(error=ConnectionRefusedError()), True, ERR_TRANSPORT),
    (CallOutcome(error=ConnectionResetError()), True, ERR_TRANSPORT),
    (CallOutcome(error=socket.gaierror("no such host")), True, ERR_TRANSPORT),
    (CallOutcome(error=StoreBusyError("locked")), True, ERR_TRANSPORT),
    (CallOutcome(error=json.JSONDecodeError("Expecting value", "<html>", 0)), True, ERR_MALFORMED),
])
def test_only_transport_failures_count(outcome, failure, code):
    v = classify_outcome(outcome)
    assert (v.failure, v.code) == (failure, code)


def test_a_user_classifier_replaces_the_declared_one():
    """A tool whose 404 means the service lost its data: the user counts it as a failure."""
    def strict(o):
        v = classify_outcome(o)
        return v.__class__(True, "server_error", ERR_SERVER, v.status) if v.status == 404 else v
    cb = CircuitBreaker("idx", BreakerConfig(window_size=2, minimum_calls=2), classify=strict, clock=ManualClock())
    cb.call(lambda: Resp(404))
    cb.call(lambda: Resp(404))
    assert cb.state().state == OPEN
    plain = CircuitBreaker("idx", BreakerConfig(window_size=2, minimum_calls=2), clock=ManualClock())
    plain.call(lambda: Resp(404))
    plain.call(lambda: Resp(404))
    assert plain.state().state == CLOSED


# --- the pure machine --------------------------------------------------------------------------------

def _feed(cfg, st, failures, t0=0.0):
    trs = []
    for i, f in enumerate(failures):
        d = decide(cfg, st, t0 + i)
        assert d.admitted
        st, tr = record(cfg, st, d.permit, bool(f), 0.01, t0 + i)
        trs += tr
    return st, trs


def test_trips_at_the_threshold_only_after_the_minimum_calls():
    cfg = BreakerConfig(window_size=10, minimum_calls=6, failure_rate_threshold=0.5)
    st, trs = _feed(cfg, initial_state(cfg), [1, 1, 1, 1, 1])      # 5 failures, below the minimum
    assert st.state == CLOSED and not trs
    st, trs = _feed(cfg, st, [1])
    assert st.state == OPEN and trs[0].reason == "failure_rate" and trs[0].failure_rate == 1.0


@given(st.lists(st.booleans(), min_size=1, max_size=60), st.integers(1, 20), st.floats(0.05, 1.0))
@settings(max_examples=200, deadline=None)
def test_count_window_rate_is_the_last_w_outcomes(outcomes, w, tau):
    """Invariant: while closed, E is the failure fraction of the last min(n, W) outcomes, and the
    breaker is open exactly from the first prefix where E >= tau with n >= minimum_calls."""
    cfg = BreakerConfig(window_size=w, minimum_calls=w, failure_rate_threshold=tau, cooldown_s=1e6,
                        cooldown_max_s=1e6)
    s = initial_state(cfg)
    for i, f in enumerate(outcomes):
        d = decide(cfg, s, float(i))
        if not d.admitted:
            assert s.state == OPEN
            return
        s, _ = record(cfg, s, d.permit, f, 0.0, float(i))
        last = outcomes[max(0, i + 1 - w): i + 1]
        expected_open = len(last) >= w and sum(last) / len(last) >= tau
        assert (s.state == OPEN) == expected_open
        if s.state == CLOSED:
            assert window_rates(cfg, s)[0] == pytest.approx(sum(last) / len(last))


def test_time_window_forgets_old_seconds():
    cfg = BreakerConfig(window_kind="time", window_size=10, minimum_calls=4, failure_rate_threshold=0.5)
    s = initial_state(cfg)
    for t in (0.0, 0.5, 1.0):                  # three failures early on
        s, _ = record(cfg, s, decide(cfg, s, t).permit, True, 0.0, t)
    for t in (20.0, 20.5, 21.0):               # later: they have left the window
        s, trs = record(cfg, s, decide(cfg, s, t).permit, False, 0.0, t)
    s, trs = record(cfg, s, decide(cfg, s, 22.0).permit, True, 0.0, 22.0)
    assert s.state == CLOSED and window_rates(cfg, s, 22.0) == (0.25, 0.0, 4)
    s, trs = record(cfg, s, decide(cfg, s, 22.5).permit, True, 0.0, 22.5)     # 2 of 5 -> still closed
    s, trs = record(cfg, s, decide(cfg, s, 23.0).permit, True, 0.0, 23.0)     # 3 of 6 -> 0.5 -> open
    assert s.state == OPEN and trs[0].calls == 6


def test_slow_calls_trip_when_their_rate_is_configured():
    cfg = BreakerConfig(window_size=4, minimum_calls=4, failure_rate_threshold=1.0, slow_call_rate_threshold=0.5,
                        slow_call_duration_s=2.0)
    s = initial_state(cfg)
    for i, dur in enumerate((0.1, 3.0, 0.1, 2.5)):
        s, trs = record(cfg, s, decide(cfg, s, float(i)).permit, False, dur, float(i))
    assert s.state == OPEN and trs[0].reason == "slow_call_rate" and trs[0].slow_call_rate == 0.5
    with pytest.raises(GatewayConfigError):
        BreakerConfig(slow_call_rate_threshold=0.5)          # no duration: what is slow?


def test_open_refuses_with_the_remaining_cooldown_then_one_canary():
    cfg = BreakerConfig(window_size=2, minimum_calls=2, cooldown_s=30, cooldown_max_s=100)
    s, _ = _feed(cfg, initial_state(cfg), [1, 1], t0=100.0)        # opened at 101
    d = decide(cfg, s, 111.0)
    assert not d.admitted and d.cooldown_remaining_s == pytest.approx(20.0) and d.state is s
    d = decide(cfg, s, 131.0, "p1")
    assert d.admitted and d.permit.canary and d.state.state == HALF_OPEN
    assert [t.reason for t in d.transitions] == ["cooldown_elapsed"]
    d2 = decide(cfg, d.state, 131.0, "p2")
    assert not d2.admitted and d2.cooldown_remaining_s == 0.0


def test_failed_canaries_double_the_cooldown_up_to_the_cap_and_a_success_resets_it():
    cfg = BreakerConfig(window_size=2, minimum_calls=2, cooldown_s=10, cooldown_max_s=35)
    s, _ = _feed(cfg, initial_state(cfg), [1, 1])
    now, seen = 1.0, []
    for _ in range(4):
        now += s.cooldown_s
        d = decide(cfg, s, now, "c")
        s, trs = record(cfg, d.state, d.permit, True, 0.0, now)
        seen.append(s.cooldown_s)
        assert trs[-1].reason == "canary_failed"
    assert seen == [20.0, 35.0, 35.0, 35.0]
    now += s.cooldown_s
    d = decide(cfg, s, now, "c")
    s, trs = record(cfg, d.state, d.permit, False, 0.0, now)
    assert s.state == CLOSED and s.cooldown_s == 10.0 and s.calls == 0 and trs[-1].reason == "canary_succeeded"


def test_a_canary_that_never_reports_reopens_the_breaker():
    cfg = BreakerConfig(window_size=1, minimum_calls=1, cooldown_s=5, cooldown_max_s=50, canary_timeout_s=2)
    s, _ = _feed(cfg, initial_state(cfg), [1])
    d = decide(cfg, s, 10.0, "dead-worker")
    assert d.admitted
    s, trs = tick(cfg, d.state, 11.9)
    assert s.state == HALF_OPEN and not trs
    s, trs = tick(cfg, s, 12.0)
    assert s.state == OPEN and trs[0].reason == "canary_timeout" and s.cooldown_s == 10.0
    late, _ = record(cfg, s, d.permit, False, 0.0, 12.5)          # the dead worker's late report is stale
    assert late is s


def test_a_stale_outcome_cannot_decide_a_later_probe():
    cfg = BreakerConfig(window_size=2, minimum_calls=2, cooldown_s=1)
    s = initial_state(cfg)
    slow_permit = decide(cfg, s, 0.0).permit                    # admitted while closed, still running
    s, _ = _feed(cfg, s, [1, 1])
    d = decide(cfg, s, 5.0, "probe")
    s2, trs = record(cfg, d.state, slow_permit, False, 0.0, 5.1)  # the old call returns OK: ignored
    assert s2 is d.state and s2.state == HALF_OPEN and not trs


def test_k_permitted_canaries():
    cfg = BreakerConfig(window_size=1, minimum_calls=1, cooldown_s=1, half_open_permits=3)
    s, _ = _feed(cfg, initial_state(cfg), [1])
    permits = []
    for i in range(5):
        d = decide(cfg, s, 2.0, f"c{i}")
        s = d.state
        if d.admitted:
            permits.append(d.permit)
    assert len(permits) == 3
    for p in permits[:2]:
        s, _ = record(cfg, s, p, False, 0.0, 2.1)
        assert s.state == HALF_OPEN
    s, _ = record(cfg, s, permits[2], False, 0.0, 2.2)
    assert s.state == CLOSED


@pytest.mark.parametrize("kw", [{"failure_rate_threshold": 0}, {"failure_rate_threshold": 1.5},
                                {"window_size": 0}, {"minimum_calls": 21}, {"window_kind": "sliding"},
                                {"cooldown_s": 10, "cooldown_max_s": 5}, {"half_open_permits": 0},
                                {"canary_timeout_s": float("nan")}, {"window_size": True}])
def test_bad_configs_are_typed_errors(kw):
    with pytest.raises(GatewayConfigError):
        BreakerConfig(**kw)


# --- the runner: threads, asyncio ----------------------------------------------------------------------

class Dependency:
    """A dependency that counts the calls that reach it (the count the tests trust)."""

    def __init__(self):
        self.calls = 0
        self.lock = threading.Lock()
        self.fail = True
        self.release = threading.Event()

    def __call__(self):
        with self.lock:
            self.calls += 1
        if self.fail:
            raise ConnectionResetError("reset by peer")
        self.release.wait(10)
        return {"ok": True}


def _open_breaker(clock, store=None, **kw):
    cfg = BreakerConfig(window_size=3, minimum_calls=3, cooldown_s=30, cooldown_max_s=120, **kw)
    dep = Dependency()
    cb = CircuitBreaker("search_index", cfg, clock=clock, store=store)
    for _ in range(3):
        assert cb.call(dep).code == ERR_TRANSPORT
    assert cb.state().state == OPEN and dep.calls == 3
    return cb, dep


def test_open_fails_fast_without_touching_the_dependency():
    clock = ManualClock()
    cb, dep = _open_breaker(clock)
    clock.advance(12)
    obs = cb.call(dep)
    assert obs.code == ERR_CIRCUIT_OPEN and obs.synthetic and not obs.dispatched
    assert obs.dependency_id == "search_index" and obs.cooldown_remaining_s == pytest.approx(18.0)
    assert "18.0 s" in obs.message and dep.calls == 3


@pytest.mark.parametrize("shared", [False, True])
def test_exactly_one_canary_reaches_the_dependency_under_thread_contention(shared):
    """64 threads released together into a half-open breaker: one call reaches the dependency,
    63 fail fast while it is in flight; when it succeeds the breaker closes."""
    clock = ManualClock()
    cb, dep = _open_breaker(clock, store=MemoryBreakerStore() if shared else None)
    dep.fail = False
    clock.advance(30)
    n = 64
    barrier = threading.Barrier(n)
    results, refused = [], threading.Semaphore(0)
    rlock = threading.Lock()

    def worker():
        barrier.wait()
        obs = cb.call(dep)
        with rlock:
            results.append(obs)
        if obs.code == ERR_CIRCUIT_OPEN:
            refused.release()

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for _ in range(n - 1):
        assert refused.acquire(timeout=20)
    deadline = time.monotonic() + 20            # the canary thread may not have reached the call yet
    while dep.calls < 4 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert dep.calls == 3 + 1                   # counted at the dependency; every other thread has answered
    dep.release.set()
    for t in threads:
        t.join(20)
    codes = sorted(o.code for o in results)
    assert codes.count(OK) == 1 and codes.count(ERR_CIRCUIT_OPEN) == n - 1
    assert all(o.cooldown_remaining_s == 0.0 for o in results if o.code == ERR_CIRCUIT_OPEN)
    assert cb.state().state == CLOSED and dep.calls == 4


def test_exactly_one_canary_under_asyncio_contention():
    clock = ManualClock()
    cb, dep = _open_breaker(clock)
    clock.advance(30)
    hits = []

    async def main():
        release = asyncio.Event()

        async def dependency():
            hits.append(1)                      # counted at the dependency
            await release.wait()
            return "fresh index"

        async def caller():
            return await cb.acall(dependency, timeout_s=10)

        tasks = [asyncio.create_task(caller()) for _ in range(200)]
        while sum(t.done() for t in tasks) < 199 or not hits:
            await asyncio.sleep(0.001)
        assert len(hits) == 1
        release.set()
        return await asyncio.gather(*tasks)

    out = asyncio.run(main())
    assert [o.code for o in out].count(OK) == 1 and len(hits) == 1
    assert cb.state().state == CLOSED


def test_acall_timeout_is_a_failure_and_domain_errors_are_not():
    clock = ManualClock()
    cfg = BreakerConfig(window_size=2, minimum_calls=2)
    cb = CircuitBreaker("svc", cfg, clock=clock)

    async def not_found():
        raise RecordNotFound("no such record")

    async def hang():
        await asyncio.sleep(10)

    async def main():
        a = await cb.acall(not_found)
        b = await cb.acall(not_found)
        assert cb.state().state == CLOSED and a.code == ERR_TOOL and not a.failure
        c = await cb.acall(hang, timeout_s=0.01)
        d = await cb.acall(hang, timeout_s=0.01)
        return a, b, c, d

    *_, c, d = asyncio.run(main())
    assert c.code == ERR_TIMEOUT and c.failure and cb.state().state == OPEN


def test_transitions_are_reported_and_an_operator_can_force():
    clock = ManualClock()
    seen = []
    cb = CircuitBreaker("svc", BreakerConfig(window_size=1, minimum_calls=1), clock=clock, on_transition=seen.append)
    cb.force("open")
    assert cb.state().state == OPEN and seen[-1].reason == "forced_open"
    cb.force("closed")
    assert [t.to_state for t in cb.transitions()] == [OPEN, CLOSED]
    snap = cb.snapshot().to_json()
    assert snap["state"] == CLOSED and snap["calls"] == 0
    with pytest.raises(GatewayConfigError):
        cb.force("half_open")


def test_acquire_returns_a_permit_or_the_synthetic_observation():
    clock = ManualClock()
    cb, dep = _open_breaker(clock)
    assert cb.acquire().code == ERR_CIRCUIT_OPEN
    clock.advance(30)
    p = cb.acquire()
    assert isinstance(p, Permit) and p.canary
    verdict, state = cb.complete(p, CallOutcome(value={"ok": 1}, duration_s=0.2))
    assert not verdict.failure and state == CLOSED


@given(st.lists(st.tuples(st.booleans(), st.floats(0, 3), st.floats(0, 20)), max_size=80),
       st.sampled_from(["count", "time"]), st.booleans())
@settings(max_examples=150, deadline=None)
def test_the_runner_agrees_with_the_pure_machine(steps, kind, slow):
    """The runner's inline fast paths (closed admission, the no-op success, the open refusal)
    give the same states and refusals as folding the pure decide/record over the same steps."""
    cfg = BreakerConfig(window_kind=kind, window_size=5, minimum_calls=3, failure_rate_threshold=0.6,
                        slow_call_rate_threshold=0.5 if slow else None, slow_call_duration_s=2.0 if slow else None,
                        cooldown_s=4.0, cooldown_max_s=16.0, canary_timeout_s=100.0)
    clock = ManualClock(0.0)
    cb = CircuitBreaker("dep", cfg, clock=clock)
    s = initial_state(cfg)
    for i, (fail, dur, dt) in enumerate(steps):
        clock.advance(dt)
        now = clock()
        d = decide(cfg, s, now, f"p{i}")
        p = cb.acquire()
        assert isinstance(p, Permit) == d.admitted
        s = d.state
        if d.admitted:
            s, _ = record(cfg, s, d.permit, fail, dur, now)
            cb.record(p, fail, dur)
        else:
            assert p.cooldown_remaining_s == pytest.approx(d.cooldown_remaining_s)
        got = cb.state()
        assert (got.state, got.generation, got.calls, got.fail_bits, got.slow_bits, got.cooldown_s) == \
            (s.state, s.generation, s.calls, s.fail_bits, s.slow_bits, s.cooldown_s)
