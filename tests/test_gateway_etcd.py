"""The breaker shared across hosts through etcd (the quorum tier; Failure Recovery, "Tool Circuit
Breakers"). Real etcd members on loopback.

Fault model: two "hosts" (separate clients, separate breaker objects) call one dependency; many
threads on both reach the half-open breaker at once. Invariants: a trip seen by one is seen by the
other; exactly one canary reaches the dependency (counted there) however the compare-and-swap
races go; transitions are recorded under the dependency.
"""

from __future__ import annotations

import threading
import time

import pytest

from kernel_lib.quorum import EtcdCluster
from kernel_lib.quorum.breaker_store import EtcdBreakerStore
from kernel_lib.recovery.gateway import CLOSED, ERR_CIRCUIT_OPEN, ERR_TRANSPORT, OK, OPEN, BreakerConfig, CircuitBreaker

pytestmark = pytest.mark.quorum

CFG = BreakerConfig(window_size=3, minimum_calls=3, cooldown_s=0.5, cooldown_max_s=4.0, canary_timeout_s=30.0)


@pytest.fixture(scope="module")
def cluster():
    with EtcdCluster(3) as c:
        yield c


def test_two_hosts_share_one_breaker_and_one_canary(cluster):
    host_a = EtcdBreakerStore(cluster.endpoints(), max_staleness_s=0.0)
    host_b = EtcdBreakerStore(cluster.endpoints(), max_staleness_s=0.0)
    a = CircuitBreaker("payments", CFG, store=host_a)
    b = CircuitBreaker("payments", CFG, store=host_b)
    hits, lock, release = [0], threading.Lock(), threading.Event()

    def dependency(fail):
        with lock:
            hits[0] += 1
        if fail:
            raise ConnectionRefusedError("payments down")
        release.wait(30)
        return {"ok": True}

    for _ in range(3):
        assert a.call(dependency, True).code == ERR_TRANSPORT
    assert b.call(dependency, True).code == ERR_CIRCUIT_OPEN and hits[0] == 3     # host b sees host a's trip
    time.sleep(CFG.cooldown_s + 0.05)
    results, rl = [], threading.Lock()

    def worker(cb):
        obs = cb.call(dependency, False)
        with rl:
            results.append(obs.code)

    threads = [threading.Thread(target=worker, args=(cb,)) for cb in (a, b) * 8]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while (len(results) < 15 or hits[0] < 4) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert results.count(ERR_CIRCUIT_OPEN) == 15 and hits[0] == 4     # counted at the dependency
    release.set()
    for t in threads:
        t.join(30)
    assert results.count(OK) == 1 and a.state().state == CLOSED and b.state().state == CLOSED
    reasons = [t.reason for t in a.transitions()]
    assert reasons == ["failure_rate", "cooldown_elapsed", "canary_succeeded"]
    assert host_a.stats["writes"] + host_b.stats["writes"] >= 3
    host_a.close()
    host_b.close()


def test_staleness_bound_and_forced_open(cluster):
    with EtcdBreakerStore(cluster.endpoints(), max_staleness_s=0.2) as s1, \
            EtcdBreakerStore(cluster.endpoints(), max_staleness_s=0.2) as s2:
        a = CircuitBreaker("search", CFG, store=s1)
        b = CircuitBreaker("search", CFG, store=s2)
        assert b.state().state == CLOSED
        a.force("open")
        time.sleep(0.25)                         # past b's staleness bound
        assert b.state().state == OPEN
