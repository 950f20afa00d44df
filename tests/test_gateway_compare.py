"""The comparison with resilience4j and pybreaker (issue 19) is well-formed data, and the claims
about pybreaker that can be checked on the installed package are checked here."""

from __future__ import annotations

import threading
import time

import pytest

from kernel_lib.recovery.gateway import COMPARISON, VERDICTS, BreakerConfig, CircuitBreaker, comparison_markdown, \
    comparison_rows


def test_rows_are_complete_and_cover_the_issues_points():
    rows = comparison_rows()
    assert all(r["verdict"] in VERDICTS and all(r[k].strip() for k in r) for r in rows)
    features = " ".join(r["feature"] for r in rows)
    for needed in ("count-based", "time-based", "minimum calls", "half-open", "slow-call", "cooldown",
                   "shared across processes"):
        assert needed in features
    assert {r["verdict"] for r in rows} == set(VERDICTS)
    md = comparison_markdown()
    assert md.count("\n") == len(COMPARISON) + 1


def test_pybreaker_counts_consecutive_failures_and_serialises_calls():
    pybreaker = pytest.importorskip("pybreaker")
    cb = pybreaker.CircuitBreaker(fail_max=3, reset_timeout=60)

    def boom():
        raise ConnectionError("down")

    for _ in range(2):
        with pytest.raises(ConnectionError):
            cb.call(boom)
    cb.call(lambda: "ok")                      # a success resets the counter: consecutive, not a window
    for _ in range(2):
        with pytest.raises(ConnectionError):
            cb.call(boom)
    assert cb.current_state == "closed"
    # its lock is held around the guarded call: a second caller waits for the first one's call
    inside, release, order = threading.Event(), threading.Event(), []

    def slow():
        order.append("first in")
        inside.set()
        release.wait(10)
        order.append("first out")

    t1 = threading.Thread(target=cb.call, args=(slow,))
    t1.start()
    inside.wait(10)
    t2 = threading.Thread(target=cb.call, args=(lambda: order.append("second"),))
    t2.start()
    time.sleep(0.1)
    assert order == ["first in"]               # the second call has not run
    release.set()
    t1.join(10)
    t2.join(10)
    assert order == ["first in", "first out", "second"]


def test_ours_does_not_serialise_calls():
    cb = CircuitBreaker("svc", BreakerConfig())
    inside, release, order = threading.Event(), threading.Event(), []

    def slow():
        inside.set()
        release.wait(10)

    t1 = threading.Thread(target=cb.call, args=(slow,))
    t1.start()
    inside.wait(10)
    assert cb.call(lambda: order.append("second")).code == "OK" and order == ["second"]
    release.set()
    t1.join(10)
