"""Breaker state shared by every process of a host (Failure Recovery, "Tool Circuit Breakers":
the breaker short-circuits calls "across all running trajectories").

Fault model: a worker trips the breaker against a failing loopback service and exits (a restart);
several worker processes reach a half-open breaker at the same moment; a second worker opens the
store with other thresholds; the file is not a breaker store. Invariants: a new process sees the
open breaker and fails fast (the service, which counts the requests it receives, sees none); exactly
one canary request reaches the service across processes; transitions are rows with time, from,
to, reason; nothing foreign is overwritten.
"""

from __future__ import annotations

import http.server
import multiprocessing
import threading
import time
import urllib.request

import pytest

from kernel_lib.errors import BreakerStoreError
from kernel_lib.recovery.gateway import (
    CLOSED, ERR_CIRCUIT_OPEN, ERR_SERVER, OK, OPEN, BreakerConfig, CircuitBreaker, SQLiteBreakerStore,
)

CFG = BreakerConfig(window_size=3, minimum_calls=3, failure_rate_threshold=0.5, cooldown_s=0.3, cooldown_max_s=5.0,
                    canary_timeout_s=30.0)
DEP = "symbol_index"


class Service:
    """A loopback HTTP service that counts every request it receives; ``mode`` is ``fail`` (503)
    or ``hold`` (wait for ``release``, then 200)."""

    def __init__(self):
        self.hits = 0
        self.mode = "fail"
        self.release = threading.Event()
        lock = threading.Lock()
        svc = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                with lock:
                    svc.hits += 1
                if svc.mode == "hold":
                    svc.release.wait(30)
                    code = 200
                else:
                    code = 503
                body = b'{"ok": true}' if code == 200 else b'{"error": "Service Unavailable"}'
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/search"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service():
    s = Service()
    yield s
    s.close()


def http_get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return {"status": r.status, "body": r.read().decode()}


def _worker(db_path, url, calls, cfg, barrier, out):
    store = SQLiteBreakerStore(db_path)
    cb = CircuitBreaker(DEP, cfg, store=store)
    if barrier is not None:
        barrier.wait(30)
    for _ in range(calls):
        out.put(cb.call(http_get, url).code)
    store.close()


def _spawn(n, *args):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    barrier = ctx.Barrier(n) if n > 1 else None
    procs = [ctx.Process(target=_worker, args=(*args, barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    _KEEP.append(barrier)          # the parent must hold the barrier's semaphores until the children have them
    return procs, out


_KEEP: list = []


def test_a_restarted_worker_sees_the_open_breaker_and_does_not_call(tmp_path, service):
    db = str(tmp_path / "breakers.sqlite")
    cfg = BreakerConfig(window_size=3, minimum_calls=3, cooldown_s=60.0)
    procs, out = _spawn(1, db, service.url, 3, cfg)     # worker 1 trips it, then exits
    codes = [out.get(timeout=60) for _ in range(3)]
    procs[0].join(60)
    assert codes == [ERR_SERVER] * 3 and service.hits == 3 and procs[0].exitcode == 0
    procs, out = _spawn(1, db, service.url, 5, cfg)     # a new process, same host
    codes = [out.get(timeout=60) for _ in range(5)]
    procs[0].join(60)
    assert codes == [ERR_CIRCUIT_OPEN] * 5 and service.hits == 3     # counted at the service
    with SQLiteBreakerStore(db) as store:
        rows = store.transition_rows(DEP)
        assert [(r["from_state"], r["to_state"], r["reason"]) for r in rows] == [("closed", "open", "failure_rate")]
        assert rows[0]["pid"] != multiprocessing.current_process().pid and rows[0]["at_s"] > 0
        assert store.dependencies()[0]["state"] == OPEN


def test_exactly_one_canary_across_processes(tmp_path, service):
    db = str(tmp_path / "breakers.sqlite")
    store = SQLiteBreakerStore(db)
    cb = CircuitBreaker(DEP, CFG, store=store)
    for _ in range(3):
        assert cb.call(http_get, service.url).code == ERR_SERVER
    assert cb.state().state == OPEN and service.hits == 3
    service.mode = "hold"
    time.sleep(CFG.cooldown_s + 0.1)
    n = 6
    procs, out = _spawn(n, db, service.url, 1, CFG)
    refused = [out.get(timeout=60) for _ in range(n - 1)]     # the canary's request is held at the service
    assert refused == [ERR_CIRCUIT_OPEN] * (n - 1)
    deadline = time.monotonic() + 30                # the canary's request may still be on its way
    while service.hits < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.hits == 3 + 1                    # every other process has already answered
    service.release.set()
    assert out.get(timeout=60) == OK
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert service.hits == 4 and cb.state().state == CLOSED
    reasons = [t.reason for t in cb.transitions()]
    assert reasons == ["failure_rate", "cooldown_elapsed", "canary_succeeded"]
    store.close()


def test_threads_of_one_process_share_the_store_with_other_breaker_objects(tmp_path):
    """Two breaker objects on two connections (as two workers would hold): one trips, the other
    refuses at once; successes into a clean full window write nothing."""
    db = tmp_path / "b.sqlite"
    s1, s2 = SQLiteBreakerStore(db), SQLiteBreakerStore(db)
    a, b = CircuitBreaker(DEP, CFG, store=s1), CircuitBreaker(DEP, CFG, store=s2)
    for _ in range(3):
        a.call(lambda: {"ok": 1})
    writes = s1.stats["writes"]
    for _ in range(50):
        assert a.call(lambda: {"ok": 1}).code == OK
    assert s1.stats["writes"] == writes                 # the healthy path does not write
    for _ in range(2):
        a.call(lambda: (_ for _ in ()).throw(ConnectionResetError()))
    assert a.state().state == OPEN
    assert b.call(lambda: {"ok": 1}).code == ERR_CIRCUIT_OPEN
    s1.close()
    s2.close()


def test_a_worker_with_other_thresholds_is_refused(tmp_path):
    db = tmp_path / "b.sqlite"
    with SQLiteBreakerStore(db) as s:
        CircuitBreaker(DEP, CFG, store=s).force("open")
        other = BreakerConfig(window_size=3, minimum_calls=3, failure_rate_threshold=0.9, cooldown_s=0.3,
                              cooldown_max_s=5.0, canary_timeout_s=30.0)
        with pytest.raises(BreakerStoreError) as e:
            CircuitBreaker(DEP, other, store=s)
        assert e.value.dependency_id == DEP


def test_in_dir_shares_one_file_per_state_directory(tmp_path):
    with SQLiteBreakerStore.in_dir(tmp_path / "state") as a, SQLiteBreakerStore.in_dir(tmp_path / "state") as b:
        CircuitBreaker(DEP, CFG, store=a).force("open")
        assert CircuitBreaker(DEP, CFG, store=b).state().state == OPEN
    assert (tmp_path / "state" / "breakers.sqlite").is_file()


def test_a_foreign_file_is_refused_and_left_alone(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_bytes(b"not a database at all")
    with pytest.raises(BreakerStoreError):
        SQLiteBreakerStore(p)
    assert p.read_bytes() == b"not a database at all"
