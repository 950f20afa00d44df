"""Bulkheads and the tool gateway (Failure Recovery, "Bulkhead resource partitioning": tables 9
and 10; table 8; Napkin Math 0.4).

Fault model: an external API that hangs (every call blocks), a queue that fills, a dependency
failing with 5xx, a hung call past its timeout. Invariants: local tools keep their capacity
while the external domain is saturated (they complete while every external call is still
blocked); a full queue answers ERR_RESOURCE_EXHAUSTED and a busy domain without a queue
ERR_BULKHEAD_FULL, without calling the tool; a timed-out call keeps its slot until it really
returns; the gateway advises a bounded, jittered retry only for transport failures.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from kernel_lib._support.clock import ManualClock
from kernel_lib.errors import GatewayConfigError
from kernel_lib.recovery.gateway import (
    ERR_BULKHEAD_FULL, ERR_CIRCUIT_OPEN, ERR_RESOURCE_EXHAUSTED, ERR_SERVER, ERR_TIMEOUT, ERR_TOOL, OK,
    TABLE_9_DOMAINS, BackoffPolicy, BreakerConfig, Bulkhead, DomainSpec, ToolGateway, domains_for_pool,
)


def _domains(ext_cap=4, ext_queue=2, ext_queue_wait=0.05, ext_timeout=5.0):
    return {
        "local": DomainSpec("local", 4, 8, 0.5, 0.5),
        "external_api": DomainSpec("external_api", ext_cap, ext_queue, ext_queue_wait, ext_timeout,
                                   BreakerConfig(window_size=4, minimum_calls=4, cooldown_s=60),
                                   BackoffPolicy("full_jitter", base_s=1.0, cap_s=30.0, max_retries=2)),
    }


class HangingAPI:
    def __init__(self):
        self.entered = 0
        self.lock = threading.Lock()
        self.release = threading.Event()

    def __call__(self):
        with self.lock:
            self.entered += 1
        self.release.wait(30)
        return {"status_code": 200}


def test_table_9_defaults_and_table_10_shares():
    t = TABLE_9_DOMAINS
    assert [(t[d].max_concurrent, t[d].queue_capacity, t[d].call_timeout_s) for d in
            ("local", "internal_rpc", "external_api")] == [(64, 128, 0.5), (32, 64, 2.0), (16, 16, 10.0)]
    assert t["local"].breaker is None                                   # table 10: disabled
    assert t["internal_rpc"].breaker.failure_rate_threshold == 0.5 and t["internal_rpc"].breaker.window_size == 10
    assert t["external_api"].breaker.failure_rate_threshold == 0.6 and t["external_api"].breaker.cooldown_s >= 60
    cut = domains_for_pool(300)                                          # Napkin Math 0.4's M = 300
    assert [cut[d].max_concurrent for d in ("local", "internal_rpc", "external_api")] == [180, 90, 30]


def test_local_tools_keep_their_capacity_while_the_external_domain_is_saturated():
    gw = ToolGateway(_domains(), clock=ManualClock(), rng=1)
    gw.register("scraper", "external_api")
    gw.register("read_file", "local")
    api = HangingAPI()
    blocked = [threading.Thread(target=gw.call, args=("scraper", api)) for _ in range(6)]   # 4 running + 2 queued
    for t in blocked:
        t.start()
    deadline = time.monotonic() + 10
    while api.entered < 4 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert api.entered == 4
    # the external domain is saturated: more external calls are shed without reaching the API
    shed = gw.call("scraper", api)
    assert shed.code in (ERR_RESOURCE_EXHAUSTED, ERR_BULKHEAD_FULL) and shed.synthetic and api.entered == 4
    # ... and every local call completes while all four external calls are still blocked
    local = [gw.call("read_file", lambda i=i: f"line {i}") for i in range(200)]
    assert all(o.code == OK for o in local) and not api.release.is_set() and api.entered == 4
    assert max(o.queue_wait_s for o in local) < 0.5
    api.release.set()
    for t in blocked:
        t.join(10)
    gw.close()


def test_a_shared_pool_starves_local_tools():
    """The contrast (Napkin Math 0.4 step 1): one pool for every tool, external calls hang, and a
    local call cannot get a slot until its queue wait runs out."""
    shared = DomainSpec("shared", 4, 4, 0.05, 5.0)
    gw = ToolGateway({"shared": shared}, clock=ManualClock(), rng=1)
    gw.register("scraper", "shared", breaker=None)
    gw.register("read_file", "shared", breaker=None)
    api = HangingAPI()
    threads = [threading.Thread(target=gw.call, args=("scraper", api)) for _ in range(4)]
    for t in threads:
        t.start()
    while api.entered < 4:
        time.sleep(0.001)
    obs = gw.call("read_file", lambda: "line")
    assert obs.code == ERR_BULKHEAD_FULL and not obs.dispatched
    api.release.set()
    for t in threads:
        t.join(10)
    gw.close()


def test_queue_full_is_resource_exhausted_and_no_queue_is_bulkhead_full():
    b = Bulkhead(DomainSpec("x", 1, 1, 5.0, 1.0))
    assert b.acquire().queue_wait_s == 0.0
    got = []
    waiter = threading.Thread(target=lambda: got.append(b.acquire()))
    waiter.start()
    while b.waiting < 1:
        time.sleep(0.001)
    assert b.acquire() == ERR_RESOURCE_EXHAUSTED                   # the one queue slot is taken
    b.release()
    waiter.join(5)
    assert got[0].queue_wait_s >= 0 and b.running == 1
    b0 = Bulkhead(DomainSpec("y", 1, 0, 0.0, 1.0))
    b0.acquire()
    assert b0.acquire() == ERR_BULKHEAD_FULL
    assert b.stats.rejected_exhausted == 1 and b0.stats.rejected_full == 1


def test_a_timed_out_call_keeps_its_slot_until_it_returns():
    gw = ToolGateway(_domains(ext_cap=1, ext_queue=0, ext_timeout=0.05), clock=ManualClock(), rng=3)
    gw.register("scraper", "external_api")
    api = HangingAPI()
    obs = gw.call("scraper", api)
    assert obs.code == ERR_TIMEOUT and obs.failure and obs.dispatched and obs.retry_after_s is not None
    assert 0 <= obs.retry_after_s <= 1.0                              # k = 0: U(0, min(30, 1 * 2^0))
    again = gw.call("scraper", api)
    assert again.code == ERR_BULKHEAD_FULL and api.entered == 1        # its thread is still blocked
    api.release.set()
    deadline = time.monotonic() + 5
    while gw.bulkheads["external_api"].running and time.monotonic() < deadline:
        time.sleep(0.001)
    assert gw.bulkheads["external_api"].running == 0
    gw.close()


def test_gateway_breaker_backoff_and_domain_errors():
    clock = ManualClock()
    gw = ToolGateway(_domains(), clock=clock, rng=random.Random(5))
    gw.register("pay", "external_api")
    calls = []

    def failing():
        calls.append(1)
        return {"status_code": 503}

    obs = [gw.call("pay", failing, attempt=k) for k in range(3)]
    assert [o.code for o in obs] == [ERR_SERVER] * 3
    assert obs[0].retry_after_s <= 1.0 and obs[1].retry_after_s <= 2.0 and obs[2].retry_after_s is None
    assert "No retry left" in obs[2].message
    assert gw.call("pay", failing).code == ERR_SERVER                   # 4th failure trips it
    fast = gw.call("pay", failing)
    assert fast.code == ERR_CIRCUIT_OPEN and fast.cooldown_remaining_s == 60.0 and len(calls) == 4
    snap = gw.snapshot()
    assert snap["breakers"]["pay"]["state"] == "open" and snap["domains"]["external_api"]["running"] == 0

    gw.register("db", "external_api")

    def missing():
        raise KeyError("record not found")

    dom = [gw.call("db", missing) for _ in range(10)]
    assert all(o.code == ERR_TOOL and not o.failure and o.retry_after_s is None for o in dom)
    assert gw.breaker("db").state().state == "closed"
    with pytest.raises(GatewayConfigError):
        gw.call("unknown", missing)
    gw.close()


def test_call_with_retries_follows_the_advice_with_an_injected_sleep():
    gw = ToolGateway(_domains(), clock=ManualClock(), rng=9)
    gw.register("flaky", "external_api", breaker=None)
    answers = iter([ConnectionResetError(), ConnectionResetError(), {"ok": 1}])

    def flaky():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    slept = []
    out = gw.call_with_retries("flaky", flaky, sleep=slept.append)
    assert [o.code for o in out] == ["ERR_TRANSPORT", "ERR_TRANSPORT", OK]
    assert slept == [out[0].retry_after_s, out[1].retry_after_s] and slept[0] <= 1.0 and slept[1] <= 2.0
    gw.close()


def test_asyncio_gateway_isolates_domains_and_cancels_timeouts():
    gw = ToolGateway(_domains(ext_cap=2, ext_queue=0, ext_timeout=0.05), clock=ManualClock(), rng=2)
    gw.register("scraper", "external_api")
    gw.register("read_file", "local")

    async def main():
        release = asyncio.Event()

        async def hang():
            await release.wait()

        async def read():
            return "text"

        ext = [asyncio.create_task(gw.acall("scraper", hang, timeout_s=10)) for _ in range(2)]
        await asyncio.sleep(0.01)
        shed = await gw.acall("scraper", hang)
        local = [await gw.acall("read_file", read) for _ in range(50)]
        local += await asyncio.gather(*(gw.acall("read_file", read) for _ in range(12)))   # 4 slots + 8 queued
        release.set()
        await asyncio.gather(*ext)
        timed = await gw.acall("scraper", asyncio.sleep, 1)
        return shed, local, timed

    shed, local, timed = asyncio.run(main())
    assert shed.code == ERR_BULKHEAD_FULL and all(o.code == OK for o in local)
    assert timed.code == ERR_TIMEOUT
    gw.close()


@pytest.mark.parametrize("kw", [{"max_concurrent": 0}, {"queue_capacity": -1}, {"call_timeout_s": 0},
                                {"queue_timeout_s": float("inf")}, {"name": ""}])
def test_bad_domains_are_typed_errors(kw):
    base = {"name": "d", "max_concurrent": 1, "queue_capacity": 0, "queue_timeout_s": 0.0, "call_timeout_s": 1.0}
    with pytest.raises(GatewayConfigError):
        DomainSpec(**{**base, **kw})


def test_acall_works_from_one_event_loop_after_another():
    gw = ToolGateway(_domains(), clock=ManualClock(), rng=2)
    gw.register("read_file", "local")

    async def read():
        return "text"

    async def burst():
        return await asyncio.gather(*(gw.acall("read_file", read) for _ in range(12)))

    for _ in range(2):                        # a second asyncio.run gets its own slots and queue
        assert [o.code for o in asyncio.run(burst())] == [OK] * 12
    gw.close()
