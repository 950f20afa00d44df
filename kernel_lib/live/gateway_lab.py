"""The live gateway lab: real worker threads calling a real loopback service whose latency and
error rate are dialed at run time, through one shared worker pool or through the gateway's
bulkheads and breaker (Failure Recovery, "Tool Circuit Breakers": the retry storm, table 8, tables
9-10, Napkin Math 0.4's shared pool of M threads).

**The service** is its own OS process (``python -m kernel_lib.live.gateway_lab serve --state-dir
DIR``, started by :class:`DialService`), a threaded HTTP server on ``127.0.0.1`` (standard library
only, so it starts in a fraction of a second). It reports by writing ``DIR/ready.json``
atomically (``{"url", "port", "pid"}``), leaves when the process that started it is gone
(:mod:`.orphan`) or on SIGTERM. Endpoints (JSON):

* ``POST /call``: waits the current latency (plus U(0, jitter)), then answers ``503`` with
  probability ``error_rate``, else ``200`` ``{"ok": true, "n": k}``. A request reads the dials
  when it arrives: a call that arrived during a stall keeps stalling after the dial is turned
  back, as a stuck request does;
* ``GET /admin``: the dials and the counters (``received``, ``in_flight``, ``peak_in_flight``,
  ``answered_ok``, ``answered_error``); ``POST /admin`` ``{latency_s?, error_rate?, jitter_s?}``
  turns the dials (``422`` for a bad value): the lab's schedule does it, a widget can too;
* ``GET /health``.

**The lab** (:func:`run_gateway_lab`, :func:`compare_gateway_lab`) runs, for the phases of a
:class:`LabConfig` (by default nominal, then the index stalling past the call timeout, then
recovered):

* ``agents`` trajectory threads, each calling the service again and again (its external tool);
* a local file tool (write and read back a small file in a temporary directory: a real POSIX
  file operation) scheduled every ``local_interval_s`` from a few caller threads, each call's
  latency measured from its scheduled time to its completion (queue wait included);

in one of two modes:

* ``"shared_pool"``: both kinds of call run on one ``ThreadPoolExecutor`` of ``pool_threads``
  threads (the chapter's single global pool); agents retry a failed call at once (the naive
  agent). A stalled index holds every thread until the call timeout, and the file tool waits
  behind it: its latency is measured, not assumed;
* ``"bulkheads"``: every call goes through a :class:`~kernel_lib.recovery.gateway.gateway.ToolGateway`
  with a ``local`` domain and an ``external_api`` domain cut from the same ``pool_threads``, one
  circuit breaker on the index (short cooldown so that it probes within the run), and the
  domain's backoff advice followed by the agents. The file tool keeps its own threads; the
  index's calls fail fast (``ERR_RESOURCE_EXHAUSTED``, ``ERR_CIRCUIT_OPEN``) once its domain is
  full or its breaker open; the breaker's transitions (trip, half-open probe, reopen with the
  cooldown doubled, close after recovery) are recorded with their times.

Everything returned is plain data for a widget: per-call samples, pool occupancy sampled over
time, the dials applied, the breaker's transitions, per-phase summaries (see :func:`run_gateway_lab`).
:class:`GatewayLab` runs the same lab step by step: start it, turn the dials whenever you like
(a widget's sliders), poll :meth:`GatewayLab.snapshot` for new samples, stop it for the report.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.client
import http.server
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernel_lib._support.procs import kill_group
from kernel_lib.errors import HerdConfigError, ServiceError
from kernel_lib.live.orphan import parent_env, watch_parent
from kernel_lib._support.workdirs import write_text_atomic

__all__ = ["DialService", "Phase", "LabConfig", "LAB_MODES", "DEFAULT_PHASES", "GatewayLab", "run_gateway_lab",
           "compare_gateway_lab", "lab_breaker", "lab_domains", "READY_FILE"]

READY_FILE = "ready.json"
_MODULE = "kernel_lib.live.gateway_lab"
LAB_MODES = ("shared_pool", "bulkheads")


# ------------------------------------------------------------------------------------------------
# the service process
# ------------------------------------------------------------------------------------------------


class _Dials:
    """The service's dials and counters (thread-safe)."""

    def __init__(self, seed: int):
        self.lock = threading.Lock()
        self.latency_s = 0.005
        self.error_rate = 0.0
        self.jitter_s = 0.0
        self.rng = random.Random(seed)
        self.received = self.in_flight = self.peak_in_flight = self.answered_ok = self.answered_error = 0

    def view(self) -> dict[str, Any]:
        with self.lock:
            return {"latency_s": self.latency_s, "error_rate": self.error_rate, "jitter_s": self.jitter_s,
                    "received": self.received, "in_flight": self.in_flight, "peak_in_flight": self.peak_in_flight,
                    "answered_ok": self.answered_ok, "answered_error": self.answered_error}

    def set(self, doc: Any) -> str | None:
        """Apply ``{latency_s?, error_rate?, jitter_s?}``; the error text for a bad document."""
        if not isinstance(doc, dict) or set(doc) - {"latency_s", "error_rate", "jitter_s"}:
            return "expected a JSON object with latency_s, error_rate and/or jitter_s"
        for k, v in doc.items():
            hi = 1.0 if k == "error_rate" else 3600.0
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= hi:
                return f"{k} must be a number in [0, {hi:g}], got {v!r}"
        with self.lock:
            for k, v in doc.items():
                setattr(self, k, float(v))
        return None


def _handler(dials: _Dials) -> type[http.server.BaseHTTPRequestHandler]:

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 -- the base class's name
            return

        def _send(self, status: int, doc: Any) -> None:
            body = json.dumps(doc).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:          # the client gave up (timeout) and closed its socket
                pass

        def _body(self) -> Any:
            n = int(self.headers.get("Content-Length") or 0)
            if not n:
                return {}
            try:
                return json.loads(self.rfile.read(n))
            except ValueError:
                return None

        def do_GET(self) -> None:     # noqa: N802 -- http.server's name
            if self.path == "/health":
                self._send(200, {"status": "ok", "pid": os.getpid()})
            elif self.path == "/admin":
                self._send(200, dials.view())
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:    # noqa: N802
            if self.path == "/admin":
                err = dials.set(self._body())
                self._send(422, {"error": err}) if err else self._send(200, dials.view())
                return
            if self.path != "/call":
                self._send(404, {"error": "not found"})
                return
            self._body()
            with dials.lock:
                dials.received += 1
                n = dials.received
                dials.in_flight += 1
                dials.peak_in_flight = max(dials.peak_in_flight, dials.in_flight)
                wait = dials.latency_s + (dials.rng.uniform(0.0, dials.jitter_s) if dials.jitter_s else 0.0)
                fail = dials.error_rate > 0 and dials.rng.random() < dials.error_rate
            try:
                time.sleep(wait)
                if fail:
                    self._send(503, {"error": "unavailable", "n": n})
                else:
                    self._send(200, {"ok": True, "n": n})
            finally:
                with dials.lock:
                    dials.in_flight -= 1
                    if fail:
                        dials.answered_error += 1
                    else:
                        dials.answered_ok += 1

    return Handler


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256



def serve(state_dir: str | os.PathLike, port: int = 0, seed: int = 0) -> int:
    """Run the service in this process until SIGTERM or the parent's death (module docstring)."""
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    server = _Server(("127.0.0.1", port), _handler(_Dials(seed)))
    port = server.server_address[1]
    stop = threading.Event()

    def shutdown(*_a: Any) -> None:
        if not stop.is_set():
            stop.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    watch_parent(shutdown)
    write_text_atomic(state / READY_FILE, json.dumps({"url": f"http://127.0.0.1:{port}", "port": port,
                                                  "pid": os.getpid()}))
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {_MODULE}",
                                 description="The gateway lab's dialable service on loopback (started by DialService).")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the dialable service")
    s.add_argument("--state-dir", required=True, help="directory for ready.json")
    s.add_argument("--port", type=int, default=0, help="port to bind (default: a free one)")
    s.add_argument("--seed", type=int, default=0, help="seed of the error draws")
    args = ap.parse_args(argv)
    return serve(args.state_dir, args.port, args.seed)


# ------------------------------------------------------------------------------------------------
# the client side
# ------------------------------------------------------------------------------------------------


class DialService:
    """The dialable service as a real process on loopback (module docstring).

    Args:
        state_dir: where its ``ready.json`` goes (a temporary directory when None, removed on close).
        seed: seed of the service's error draws.
        start_timeout_s: how long to wait for ``ready.json``.

    Raises:
        ServiceError: the process exited or did not report in time.
    """

    def __init__(self, state_dir: str | os.PathLike | None = None, *, seed: int = 0, start_timeout_s: float = 30.0):
        self._tmp = tempfile.TemporaryDirectory(prefix="gateway-lab-") if state_dir is None else None
        self.state_dir = Path(self._tmp.name if self._tmp is not None else state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ready = self.state_dir / READY_FILE
        with contextlib.suppress(FileNotFoundError):
            ready.unlink()
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **parent_env()}
        self._log = open(self.state_dir / "service.log", "ab")   # noqa: SIM115 -- closed in close()
        self.proc: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-m", _MODULE, "serve", "--state-dir", str(self.state_dir), "--seed", str(seed)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        deadline = time.monotonic() + start_timeout_s
        info = None
        while time.monotonic() < deadline:
            if ready.exists():
                with contextlib.suppress(ValueError, OSError):
                    info = json.loads(ready.read_text())
                    break
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        if info is None:
            code = self.proc.poll()
            self.close()
            raise ServiceError(f"the gateway lab's service did not report ready (exit code {code})")
        self.url, self.port, self.pid = info["url"], int(info["port"]), int(info["pid"])

    def _request(self, method: str, path: str, doc: Any = None, timeout_s: float = 5.0) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            body = None if doc is None else json.dumps(doc)
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
        finally:
            conn.close()

    def call(self, timeout_s: float) -> dict[str, Any]:
        """One call of the service's tool: ``{"status", "body"}`` (the gateway classifies the
        status). Raises ``TimeoutError`` when no answer came within ``timeout_s``, ``ConnectionError``
        (or another ``OSError``) when the connection failed."""
        status, body = self._request("POST", "/call", {}, timeout_s)
        return {"status": status, "body": body}

    def dial(self, *, latency_s: float | None = None, error_rate: float | None = None,
             jitter_s: float | None = None) -> dict[str, Any]:
        """Turn the dials (only those given); returns the service's view. Raises
        HerdConfigError for a value the service refuses."""
        doc = {k: v for k, v in (("latency_s", latency_s), ("error_rate", error_rate), ("jitter_s", jitter_s))
               if v is not None}
        status, body = self._request("POST", "/admin", doc)
        if status != 200:
            raise HerdConfigError(f"the service refused the dial: {body.get('error') if body else status}",
                                  field=next(iter(doc), None))
        return body

    def stats(self) -> dict[str, Any]:
        """The dials and counters (module docstring)."""
        return self._request("GET", "/admin")[1]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL) and remove a temporary state directory."""
        if self.proc is not None:
            kill_group(self.proc, signal.SIGTERM, wait_s=5.0)
            self.proc = None
        with contextlib.suppress(Exception):
            self._log.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "DialService":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ------------------------------------------------------------------------------------------------
# the lab
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """One stretch of a lab run: ``name``, ``duration_s``, and the dials the service gets at its
    start (``latency_s``, ``error_rate``)."""

    name: str
    duration_s: float
    latency_s: float
    error_rate: float = 0.0


#: nominal (5 ms), the index stalling for 3 s (past the default 0.5 s call timeout), recovered
DEFAULT_PHASES = (Phase("nominal", 1.0, 0.005), Phase("degraded", 3.0, 3.0), Phase("recovered", 2.0, 0.005))


@dataclass(frozen=True)
class LabConfig:
    """A lab run (module docstring). Times in seconds.

    Fields: ``pool_threads`` (M: the shared pool, or the threads the bulkheads cut), ``agents``
    (trajectory threads calling the service), ``call_timeout_s`` (the client's timeout of one
    service call), ``think_s`` (an agent's pause between calls), ``local_interval_s`` (one local
    file tool call scheduled this often), ``local_callers`` (threads that issue them),
    ``local_file_bytes``, ``external_threads`` (the external domain's share of M in bulkhead
    mode; the rest is the local domain's), ``external_queue`` (its queue slots),
    ``sample_interval_s`` (pool occupancy sampling), ``breaker_cooldown_s``, ``phases``.

    Raises:
        HerdConfigError: a field out of range.
    """

    pool_threads: int = 12
    agents: int = 20
    call_timeout_s: float = 0.5
    think_s: float = 0.05
    local_interval_s: float = 0.02
    local_callers: int = 8
    local_file_bytes: int = 4096
    external_threads: int = 4
    external_queue: int = 4
    sample_interval_s: float = 0.05
    breaker_cooldown_s: float = 0.4
    phases: tuple[Phase, ...] = DEFAULT_PHASES
    seed: int = 0

    def __post_init__(self) -> None:
        def num(name: str, low: float, high: float, low_open: bool = True) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or (v <= low if low_open else v < low) or v > high:
                raise HerdConfigError(f"{name} must be a number in {'(' if low_open else '['}{low:g}, {high:g}], "
                                      f"got {v!r}", field=name)

        def integer(name: str, low: int, high: int) -> None:
            v = getattr(self, name)
            if type(v) is not int or not low <= v <= high:
                raise HerdConfigError(f"{name} must be an integer in [{low}, {high}], got {v!r}", field=name)

        integer("pool_threads", 2, 1024)
        integer("agents", 1, 4096)
        integer("local_callers", 1, 256)
        integer("local_file_bytes", 0, 64 << 20)
        integer("external_threads", 1, self.pool_threads - 1)
        integer("external_queue", 0, 100_000)
        integer("seed", -2**63, 2**63)
        num("call_timeout_s", 0, 600)
        num("think_s", 0, 60, low_open=False)
        num("local_interval_s", 0, 60)
        num("sample_interval_s", 0, 60)
        num("breaker_cooldown_s", 0, 600)
        if not self.phases or not all(isinstance(p, Phase) for p in self.phases):
            raise HerdConfigError("phases must be a non-empty tuple of Phase", field="phases")
        for p in self.phases:
            if not (isinstance(p.duration_s, (int, float)) and 0 < p.duration_s <= 3600
                    and isinstance(p.latency_s, (int, float)) and 0 <= p.latency_s <= 3600
                    and isinstance(p.error_rate, (int, float)) and 0 <= p.error_rate <= 1):
                raise HerdConfigError(f"phase {p.name!r}: duration in (0, 3600] s, latency in [0, 3600] s and "
                                      "error_rate in [0, 1]", field="phases")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["phases"] = [asdict(p) for p in self.phases]
        return d


def lab_breaker(cfg: LabConfig) -> Any:
    """The index's breaker in the lab: table 10's internal-RPC shape (tau_fail 0.5 over 10 calls,
    at least 5), one canary, a cooldown of ``breaker_cooldown_s`` doubling up to 4x, a canary
    lease of the call timeout plus 0.5 s (shortened from the table's seconds so that a few-second
    run shows every transition)."""
    from kernel_lib.recovery.gateway.breaker import BreakerConfig
    return BreakerConfig(window_size=10, minimum_calls=5, failure_rate_threshold=0.5,
                         cooldown_s=cfg.breaker_cooldown_s, cooldown_max_s=4 * cfg.breaker_cooldown_s,
                         half_open_permits=1, canary_timeout_s=cfg.call_timeout_s + 0.5)


def lab_domains(cfg: LabConfig) -> dict[str, Any]:
    """The two bulkheads of the lab cut from ``pool_threads``: ``local`` (the rest of the threads,
    table 9's queue and 0.5 s timeout, no breaker) and ``external_api`` (``external_threads``
    threads, ``external_queue`` slots, a queue wait of one call timeout, :func:`lab_breaker`,
    full-jitter backoff of at most 2 retries)."""
    from kernel_lib.recovery.gateway.backoff import BackoffPolicy
    from kernel_lib.recovery.gateway.bulkhead import DomainSpec
    local_threads = cfg.pool_threads - cfg.external_threads
    return {
        "local": DomainSpec("local", local_threads, 128, 0.5, 0.5, None, None, "lab: table 9's local row, "
                                                                                "the threads the external one leaves"),
        "external_api": DomainSpec("external_api", cfg.external_threads, cfg.external_queue, cfg.call_timeout_s,
                                   cfg.call_timeout_s + 0.5, lab_breaker(cfg),
                                   BackoffPolicy("full_jitter", base_s=0.05, cap_s=0.5, max_retries=2),
                                   "lab: a short external domain so that a run of seconds shows it"),
    }


def _local_tool(folder: Path, size: int, rng_bytes: bytes) -> int:
    """The local file tool: write ``size`` bytes to a file and read them back (a real POSIX file
    operation, no fsync). Returns the bytes read."""
    path = folder / f"t{threading.get_ident()}.bin"
    path.write_bytes(rng_bytes[:size])
    return len(path.read_bytes())


def _quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


@dataclass
class _Recorder:
    t0: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    local: list[dict[str, Any]] = field(default_factory=list)
    external: list[dict[str, Any]] = field(default_factory=list)
    occupancy: list[dict[str, Any]] = field(default_factory=list)
    transitions: list[dict[str, Any]] = field(default_factory=list)
    dials: list[dict[str, Any]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.t0


class _CountingPool:
    """A ``ThreadPoolExecutor`` that counts its running tasks (for the occupancy samples)."""

    def __init__(self, threads: int):
        self.pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="shared-pool")
        self.threads = threads
        self.lock = threading.Lock()
        self.running = 0
        self.submitted = 0
        self.finished = 0

    def run(self, fn: Any, *args: Any) -> Any:
        def wrapped() -> Any:
            with self.lock:
                self.running += 1
            try:
                return fn(*args)
            finally:
                with self.lock:
                    self.running -= 1
                    self.finished += 1
        with self.lock:
            self.submitted += 1
        return self.pool.submit(wrapped).result()

    def view(self) -> dict[str, int]:
        with self.lock:
            return {"running": self.running, "queued": self.submitted - self.finished - self.running}


class GatewayLab:
    """One lab in ``mode`` against ``service``, driven step by step (what a widget does) or by
    :func:`run_gateway_lab` (a scripted run of the config's phases).

    ``start()`` starts the agents, the local tool's scheduler and the sampler; ``dial(latency_s=,
    error_rate=, label=)`` turns the service's dials and starts a new phase named ``label``;
    ``snapshot(since_s=)`` returns the samples recorded after ``since_s`` (for a live plot);
    ``stop()`` stops every thread and returns the report (see :func:`run_gateway_lab`). Also a
    context manager (``stop`` on exit). Raises HerdConfigError for a bad mode or config.
    """

    def __init__(self, mode: str, config: LabConfig | None, service: DialService):
        from kernel_lib.recovery.gateway.gateway import ToolGateway

        if mode not in LAB_MODES:
            raise HerdConfigError(f"mode must be one of {', '.join(LAB_MODES)}, got {mode!r}", field="mode")
        cfg = LabConfig() if config is None else config
        if not isinstance(cfg, LabConfig):
            raise HerdConfigError(f"config must be a LabConfig, got {type(cfg).__name__}", field="config")
        if not isinstance(service, DialService):
            raise HerdConfigError(f"service must be a DialService, got {type(service).__name__}", field="service")
        self.mode, self.cfg, self.svc = mode, cfg, service
        self.rec = _Recorder(time.monotonic())
        self.wall0 = time.time()
        self.stop_event = threading.Event()
        self.phase = cfg.phases[0].name
        self.payload = random.Random(cfg.seed).randbytes(cfg.local_file_bytes)
        self._folder = tempfile.TemporaryDirectory(prefix="gateway-lab-files-")
        self.folder = Path(self._folder.name)
        self.dispatched = 0
        self._dispatched_lock = threading.Lock()
        self.received0 = 0
        self.gw: Any = None
        self.pool: _CountingPool | None = None
        if mode == "bulkheads":
            self.gw = ToolGateway(lab_domains(cfg), rng=cfg.seed, on_transition=self._on_transition)
            self.gw.register("symbol_index", "external_api")
            self.gw.register("workspace_fs", "local")
        else:
            self.pool = _CountingPool(cfg.pool_threads)
        self.callers = concurrent.futures.ThreadPoolExecutor(cfg.local_callers, thread_name_prefix="local-caller")
        self.threads = [threading.Thread(target=self._agent, args=(i,), name=f"agent-{i}", daemon=True)
                        for i in range(cfg.agents)]
        self.threads += [threading.Thread(target=self._scheduler, name="local-scheduler", daemon=True),
                         threading.Thread(target=self._sampler, name="sampler", daemon=True)]
        self.started = False
        self.report: dict[str, Any] | None = None

    # --- the threads ---------------------------------------------------------------------------------
    def _on_transition(self, dep: str, tr: Any) -> None:
        with self.rec.lock:
            self.rec.transitions.append({"t_s": tr.at_s - self.wall0, "dependency_id": dep,
                                         "from_state": tr.from_state, "to_state": tr.to_state, "reason": tr.reason,
                                         "cooldown_s": tr.cooldown_s})

    def _http_call(self) -> dict[str, Any]:
        with self._dispatched_lock:
            self.dispatched += 1
        return self.svc.call(self.cfg.call_timeout_s)

    def _agent(self, i: int) -> None:
        from kernel_lib.recovery.gateway.model import CallOutcome, classify_outcome

        cfg, rec, gw, stop = self.cfg, self.rec, self.gw, self.stop_event
        rng = random.Random(f"{cfg.seed}:{i}")
        attempt, prev = 0, None
        while not stop.is_set():
            t, phase = rec.now(), self.phase
            if gw is not None:
                obs = gw.call("symbol_index", self._http_call, attempt=attempt, previous_delay_s=prev)
                code, disp, dur, wait = obs.code, obs.dispatched, obs.duration_s, obs.retry_after_s
                if obs.ok or wait is None:
                    attempt, prev = 0, None
                    if obs.code == "ERR_CIRCUIT_OPEN" and obs.cooldown_remaining_s:
                        wait = min(obs.cooldown_remaining_s, 0.5) * rng.uniform(0.5, 1.0)
                else:
                    attempt, prev = attempt + 1, wait
            else:
                t_call = time.perf_counter()
                try:
                    value = self.pool.run(self._http_call)
                    outcome = CallOutcome(value=value, duration_s=time.perf_counter() - t_call)
                except (RuntimeError, concurrent.futures.CancelledError):   # the pool shut down at the end
                    return
                except Exception as exc:    # noqa: BLE001 -- the call's failure is the outcome
                    outcome = CallOutcome(error=exc, duration_s=time.perf_counter() - t_call)
                code, disp, dur, wait = classify_outcome(outcome).code, True, outcome.duration_s, None
            with rec.lock:
                rec.external.append({"t_s": t, "phase": phase, "code": code, "duration_ms": dur * 1e3,
                                     "dispatched": disp})
            stop.wait(cfg.think_s + (wait or 0.0))

    def _local_call(self, scheduled: float, phase: str) -> None:
        cfg = self.cfg
        if self.gw is not None:
            ok = self.gw.call("workspace_fs", _local_tool, self.folder, cfg.local_file_bytes, self.payload).ok
        else:
            try:
                self.pool.run(_local_tool, self.folder, cfg.local_file_bytes, self.payload)
                ok = True
            except (RuntimeError, concurrent.futures.CancelledError):    # the pool shut down at the end
                return
        with self.rec.lock:
            self.rec.local.append({"t_s": scheduled, "phase": phase, "latency_ms": (self.rec.now() - scheduled) * 1e3,
                                   "ok": ok})

    def _scheduler(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            at = n * self.cfg.local_interval_s
            delay = at - self.rec.now()
            if delay > 0 and self.stop_event.wait(delay):
                return
            with contextlib.suppress(RuntimeError):
                self.callers.submit(self._local_call, at, self.phase)
            n += 1

    def _sampler(self) -> None:
        while not self.stop_event.is_set():
            row: dict[str, Any] = {"t_s": self.rec.now(), "phase": self.phase}
            if self.gw is not None:
                snap = self.gw.snapshot()
                for name, d in snap["domains"].items():
                    row[f"{name}_running"], row[f"{name}_waiting"] = d["running"], d["waiting"]
                row["breaker"] = snap["breakers"]["symbol_index"]["state"]
            else:
                row.update(self.pool.view())
            with self.rec.lock:
                self.rec.occupancy.append(row)
            self.stop_event.wait(self.cfg.sample_interval_s)

    # --- the controls ---------------------------------------------------------------------------------
    def start(self) -> "GatewayLab":
        """Dial the first phase and start every thread (once)."""
        if self.started:
            return self
        first = self.cfg.phases[0]
        self.svc.dial(latency_s=first.latency_s, error_rate=first.error_rate)
        self.received0 = self.svc.stats()["received"]
        self.rec.t0 = time.monotonic()
        self.wall0 = time.time()
        with self.rec.lock:
            self.rec.dials.append({"t_s": 0.0, "phase": first.name, "latency_s": first.latency_s,
                                   "error_rate": first.error_rate})
        self.started = True
        for t in self.threads:
            t.start()
        return self

    def dial(self, *, latency_s: float | None = None, error_rate: float | None = None,
             label: str | None = None) -> dict[str, Any]:
        """Turn the service's dials now and start a phase named ``label`` (default ``"dial N"``);
        returns the service's view. Raises HerdConfigError for a value the service refuses."""
        view = self.svc.dial(latency_s=latency_s, error_rate=error_rate)
        with self.rec.lock:
            name = label or f"dial {len(self.rec.dials)}"
            self.phase = name
            self.rec.dials.append({"t_s": self.rec.now(), "phase": name, "latency_s": view["latency_s"],
                                   "error_rate": view["error_rate"]})
        return view

    def snapshot(self, since_s: float = -1.0) -> dict[str, Any]:
        """What was recorded after ``since_s`` (s from the start): ``{"t_s" (now), "phase",
        "local", "external", "occupancy", "breaker_transitions", "dials"}`` (lists of the same
        rows as the report), for a live plot that polls."""
        with self.rec.lock:
            return {"t_s": self.rec.now(), "phase": self.phase,
                    **{k: [r for r in getattr(self.rec, attr) if r["t_s"] > since_s]
                       for k, attr in (("local", "local"), ("external", "external"), ("occupancy", "occupancy"),
                                       ("breaker_transitions", "transitions"), ("dials", "dials"))}}

    def stop(self) -> dict[str, Any]:
        """Stop every thread (waiting at most a call timeout and 2 s for each) and return the
        report (:func:`run_gateway_lab`); a second call returns the same report."""
        if self.report is not None:
            return self.report
        self.stop_event.set()
        duration = self.rec.now()
        if self.pool is not None:          # queued calls are cancelled; running ones end by their timeout
            self.pool.pool.shutdown(wait=False, cancel_futures=True)
        for t in self.threads:
            if t.is_alive():
                t.join(timeout=self.cfg.call_timeout_s + 2.0)
        self.callers.shutdown(wait=True, cancel_futures=True)
        if self.gw is not None:
            self.gw.close()
        self._folder.cleanup()
        stats = self.svc.stats()
        names = list(dict.fromkeys(d["phase"] for d in self.rec.dials))
        self.report = _report(self.mode, self.cfg, self.rec, duration, stats, stats["received"] - self.received0,
                              self.dispatched, names)
        return self.report

    def __enter__(self) -> "GatewayLab":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def run_gateway_lab(mode: str, config: LabConfig | None = None, *, service: DialService | None = None
                    ) -> dict[str, Any]:
    """One scripted lab run (module docstring): the config's phases one after the other, in
    ``mode`` (``"shared_pool"`` or ``"bulkheads"``) against ``service`` (a :class:`DialService`;
    one is started and stopped here when None).

    Returns plain data: ``{"mode", "config", "duration_s", "dials": [{t_s, phase, latency_s,
    error_rate}], "local": [{t_s, phase, latency_ms, ok}], "external": [{t_s, phase, code,
    duration_ms, dispatched}], "occupancy": [{t_s, phase, ...}] (shared pool: ``running``,
    ``queued``; bulkheads: per domain ``<domain>_running`` / ``<domain>_waiting`` and
    ``breaker``), "breaker_transitions": [{t_s, dependency_id, from_state, to_state, reason,
    cooldown_s}], "phases": {name: {"local_calls", "local_p50_ms", "local_p99_ms", "local_max_ms",
    "external_codes": {code: n}, "external_ok"}}, "service": the service's dials and counters at
    the end, "service_received": calls the service received during the run, "dispatched": external
    calls that left the host}``. Times ``t_s`` in seconds from the run's start.

    Raises:
        HerdConfigError: an unknown mode or a bad config; ServiceError: the service did not start.
    """
    cfg = LabConfig() if config is None else config
    own = service is None
    svc = DialService(seed=cfg.seed if isinstance(cfg, LabConfig) else 0) if own else service
    try:
        lab = GatewayLab(mode, cfg, svc)
        try:
            lab.start()
            end = 0.0
            for i, p in enumerate(cfg.phases):
                if i:
                    lab.dial(latency_s=p.latency_s, error_rate=p.error_rate, label=p.name)
                end += p.duration_s
                while (left := end - lab.rec.now()) > 0:
                    time.sleep(min(left, 0.05))
        finally:
            report = lab.stop()
        return report
    finally:
        if own:
            svc.close()


def _report(mode: str, cfg: LabConfig, rec: _Recorder, duration: float, stats: dict[str, Any], received: int,
            dispatched: int, phase_names: list[str]) -> dict[str, Any]:
    phases: dict[str, Any] = {}
    for name in phase_names:
        lat = [r["latency_ms"] for r in rec.local if r["phase"] == name]
        codes: dict[str, int] = {}
        for r in rec.external:
            if r["phase"] == name:
                codes[r["code"]] = codes.get(r["code"], 0) + 1
        phases[name] = {"local_calls": len(lat), "local_p50_ms": _quantile(lat, 0.5),
                        "local_p99_ms": _quantile(lat, 0.99), "local_max_ms": max(lat) if lat else None,
                        "external_codes": codes, "external_ok": codes.get("OK", 0)}
    return {"mode": mode, "config": cfg.to_json(), "duration_s": duration, "dials": rec.dials,
            "local": sorted(rec.local, key=lambda r: r["t_s"]),
            "external": sorted(rec.external, key=lambda r: r["t_s"]),
            "occupancy": rec.occupancy, "breaker_transitions": rec.transitions, "phases": phases,
            "service": stats, "service_received": received, "dispatched": dispatched}


def compare_gateway_lab(config: LabConfig | None = None, *, service: DialService | None = None) -> dict[str, Any]:
    """Both modes, one after the other, against one service process: ``{"shared_pool": run,
    "bulkheads": run, "summary": {phase: {"shared_pool_local_p99_ms", "bulkheads_local_p99_ms",
    "local_p99_ratio"}}}`` (ratio: shared over bulkheads). Raises as :func:`run_gateway_lab`."""
    cfg = LabConfig() if config is None else config
    own = service is None
    svc = DialService(seed=cfg.seed if isinstance(cfg, LabConfig) else 0) if own else service
    try:
        shared = run_gateway_lab("shared_pool", cfg, service=svc)
        time.sleep(cfg.call_timeout_s)        # let the first run's last calls drain from the service
        bulk = run_gateway_lab("bulkheads", cfg, service=svc)
    finally:
        if own:
            svc.close()
    summary = {}
    for name in shared["phases"]:
        a, b = shared["phases"][name]["local_p99_ms"], bulk["phases"][name]["local_p99_ms"]
        summary[name] = {"shared_pool_local_p99_ms": a, "bulkheads_local_p99_ms": b,
                         "local_p99_ratio": (a / b) if a is not None and b else None}
    return {"shared_pool": shared, "bulkheads": bulk, "summary": summary}


if __name__ == "__main__":
    sys.exit(main())
