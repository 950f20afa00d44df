"""The heartbeat fallacy, run: a worker process that answers every liveness probe while it goes
round in circles (Failure Recovery, "Semantic Watchdog Timers": "The failure of classical OS
liveness probes", and the fallacy in "Fallacies and Pitfalls" that takes a heartbeat for progress).

The worker (``python -m kernel_lib.live.heartbeat CONFIG_JSON``, started by
:func:`spawn_looping_worker`) is a process with the three signs of life a supervisor usually reads:

* **HTTP health**: ``GET /healthz`` on a loopback port answers ``200`` with
  ``{"status": "ok", "pid", "uptime_s", "steps", "last_step_age_s"}``, served from its own thread
  (a Kubernetes-style liveness probe);
* **heartbeats**: ``READY=1`` once, then ``WATCHDOG=1`` every ``heartbeat_s`` seconds, sent as
  datagrams to the socket named by ``NOTIFY_SOCKET``, which is how a daemon keeps systemd's
  ``WatchdogSec=`` timer from firing (the ``sd_notify`` protocol; an ``@`` name is a Linux abstract
  socket);
* **activity**: a step every ``step_s`` seconds, so the process is never idle and its health
  answer always reports a fresh step.

Its work is the looping agent's task (:func:`kernel_lib.live.looping_agent.write_world`: make the
two checks of ``tests/test_config.py`` pass by editing ``app/config.py``) done by the same stubborn
rule as the looping agent's seeded policy: look at the newest failure only. It runs the checks,
sets ``TIMEOUT_S = 45`` for the first, runs them again, sets ``TIMEOUT_S = 40`` for the second, and
so on: figure 3's flip-flop on a real file, forever. Each step is appended to a JSON-lines journal
(the worker's action log: the tool, its arguments, the observation, the verifier metrics, and the
environment's state hash right after the step, taken by the worker's runtime with
:class:`~kernel_lib.recovery.watchdog.workspace.WorkspaceHasher`).

The supervisor's side (:class:`LoopingWorker`, :func:`run_heartbeat_fallacy`) probes the worker as
an orchestrator would (HTTP, heartbeat gaps against a ``WatchdogSec``, the process state in
``/proc``), hashes the workspace itself at every probe, and runs the semantic watchdog over the
journal (:func:`journal_steps` -> :func:`~kernel_lib.recovery.watchdog.detectors.run_watchdog`).
Every liveness check passes; the watchdog reports the loop.

The worker leaves by itself when the process that started it is gone (:mod:`.orphan`), after
``max_runtime_s`` seconds, or on ``SIGTERM``. Raises :class:`~kernel_lib.errors.LiveProcessError`
when the worker does not start.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import math
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_lib._support.procs import process_state
from kernel_lib.errors import ConfigError, LiveProcessError, WatchInputError
from kernel_lib.recovery.watchdog.model import Detection, WatchStep

__all__ = ["HEALTH_PATH", "LivenessProbe", "HeartbeatFallacyReport", "LoopingWorker", "spawn_looping_worker",
           "journal_steps", "run_heartbeat_fallacy", "SupervisedRun", "run_watchdog_supervisor"]

HEALTH_PATH = "/healthz"
_MODULE = "kernel_lib.live.heartbeat"


# ------------------------------------------------------------------------------------------------
# the worker process
# ------------------------------------------------------------------------------------------------


def _notify(sock: socket.socket | None, address: str | None, message: bytes) -> None:
    if sock is None or not address:
        return
    with contextlib.suppress(OSError):
        sock.sendto(message, address)


def _notify_address(raw: str | None) -> str | None:
    """``NOTIFY_SOCKET`` as an AF_UNIX address (a leading ``@`` names an abstract socket)."""
    if not raw:
        return None
    return "\0" + raw[1:] if raw.startswith("@") else raw


class _State:
    """What the worker's threads share: its start time, steps taken, last step time, stop flag."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.steps = 0
        self.last_step = self.started
        self.stop = threading.Event()


def _health_server(state: _State) -> http.server.ThreadingHTTPServer:
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:   # noqa: N802 - the stdlib's name
            if self.path != HEALTH_PATH:
                self.send_error(404)
                return
            now = time.monotonic()
            body = json.dumps({"status": "ok", "pid": os.getpid(), "uptime_s": round(now - state.started, 3),
                               "steps": state.steps, "last_step_age_s": round(now - state.last_step, 3)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:   # quiet: the probe runs many times a second
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server


def _heartbeats(state: _State, interval_s: float) -> None:
    address = _notify_address(os.environ.get("NOTIFY_SOCKET"))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) if address else None
    try:
        _notify(sock, address, b"READY=1")
        while not state.stop.wait(interval_s):
            _notify(sock, address, b"WATCHDOG=1")
    finally:
        if sock is not None:
            sock.close()


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _step(ws: Path, hasher: Any, n: int, last_failed: list[str] | None) -> dict[str, Any]:
    """Step ``n``: run the checks when the last step was an edit (or none ran yet), else edit line 2
    toward the newest failure only (the looping agent's stubborn rule)."""
    from kernel_lib.live.looping_agent import CONFIG, run_checks

    if last_failed is None:
        res = run_checks(ws)
        obs = {"passed": res["passed"], "failed": res["failed"]}
        return {"step": n, "tool": "run_tests", "arguments": {}, "observation": obs, "mutative": False,
                "metrics": {"tests_passed": res["tests_passed"], "tests_failed": res["tests_failed"]},
                "state_sha256": hasher.hash().digest}
    text = "TIMEOUT_S = 45" if "test_timeout_covers_slow_start" in last_failed else "TIMEOUT_S = 40"
    path = ws / CONFIG
    lines = path.read_text().splitlines()
    lines[1] = text
    _write(path, "\n".join(lines) + "\n")
    return {"step": n, "tool": "edit_line", "arguments": {"path": CONFIG, "line": 2, "text": text},
            "observation": {"applied": True}, "mutative": True, "metrics": {},
            "state_sha256": hasher.hash(changed_paths=[CONFIG]).digest}


def worker_main(config: dict[str, Any]) -> int:
    """The worker process (module docstring). ``config``: ``workspace``, ``journal``,
    ``ready_file``, ``step_s``, ``heartbeat_s``, ``max_runtime_s``. Writes ``ready_file``
    (``{"pid", "port"}``) once it serves health; returns 0 when stopped."""
    from kernel_lib.live.looping_agent import write_world
    from kernel_lib.live.orphan import watch_parent
    from kernel_lib.recovery.watchdog.workspace import WorkspaceHasher

    ws = Path(config["workspace"])
    if not ws.exists() or not any(ws.iterdir()):
        write_world(ws)
    state = _State()
    signal.signal(signal.SIGTERM, lambda *_: state.stop.set())
    watch_parent(state.stop.set)
    server = _health_server(state)
    threading.Thread(target=_heartbeats, args=(state, float(config["heartbeat_s"])), name="heartbeat",
                     daemon=True).start()
    _write(Path(config["ready_file"]), json.dumps({"pid": os.getpid(), "port": server.server_address[1]}))
    deadline = state.started + float(config["max_runtime_s"])
    step_s = float(config["step_s"])
    last_failed: list[str] | None = None
    n = 0
    with WorkspaceHasher(ws) as hasher, open(config["journal"], "a", encoding="utf-8") as journal:
        hasher.hash()
        while not state.stop.is_set() and time.monotonic() < deadline:
            n += 1
            entry = _step(ws, hasher, n, last_failed)
            entry["t_s"] = round(time.monotonic() - state.started, 4)
            journal.write(json.dumps(entry, sort_keys=True) + "\n")
            journal.flush()
            last_failed = entry["observation"]["failed"] if entry["tool"] == "run_tests" else None
            state.steps, state.last_step = n, time.monotonic()
            state.stop.wait(step_s)      # a model call's latency, in this stand-in
    state.stop.set()
    server.shutdown()
    server.server_close()
    return 0


# ------------------------------------------------------------------------------------------------
# the supervisor's side
# ------------------------------------------------------------------------------------------------


def journal_steps(path: str | os.PathLike) -> list[WatchStep]:
    """The worker's journal as the watchdog's steps: one :class:`WatchStep` per line, ``position``
    and ``observation_position`` the step number, ``state_source="workspace"`` (the runtime hashed
    the real tree after the step), ``mutative`` False for the checks. A partly written last line
    (no newline after it yet: the worker is still writing) is left for the next read; blank lines
    are skipped. Missing file: no steps.

    Raises :class:`~kernel_lib.errors.WatchInputError` (naming ``file:line``) for a path that is
    not a regular file, and for a line that ends in a newline but is not UTF-8 JSON, or is not a
    step record (``step``, ``tool``, ``arguments``, ``observation``, ``metrics``, ``mutative``,
    ``state_sha256`` of the right types): the worker writes each line whole, so such a line is
    damage, and reading on past it, or stopping silently there, would hide steps."""
    p = Path(path)
    if not p.exists():
        return []
    if not p.is_file():
        raise WatchInputError(f"worker journal {str(p)!r} is not a regular file")
    lines = p.read_bytes().split(b"\n")
    out = []
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{p}:{i}"
        try:
            e = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            if i == len(lines):      # no newline after it: still being written
                break
            raise WatchInputError(f"{where}: not a JSON line ({type(exc).__name__}); a journal line ending in a "
                                  "newline was written whole, so this is damage") from None
        out.append(_journal_step(e, where))
    return out


def _journal_step(e: Any, where: str) -> WatchStep:
    """One journal record as a WatchStep (:func:`journal_steps`); WatchInputError names ``where``."""
    try:
        if not isinstance(e, dict):
            raise TypeError(f"a JSON object, not {type(e).__name__}")
        metrics, args = e["metrics"], e["arguments"]
        if not isinstance(metrics, dict) or not isinstance(args, dict):
            raise TypeError("metrics and arguments must be JSON objects")
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in metrics.values()):
            raise TypeError("metrics must be numbers")
        obs = json.dumps(e["observation"], sort_keys=True)
        return WatchStep(position=e["step"], kind="tool", actor="worker", tool=e["tool"], arguments=dict(args),
                         observation=obs, observation_position=e["step"], state_hash=e["state_sha256"],
                         state_source="workspace", metrics={k: float(v) for k, v in metrics.items()},
                         mutative=e["mutative"])
    except KeyError as exc:
        raise WatchInputError(f"{where}: not a step record: no field {exc}") from None
    except (TypeError, ValueError) as exc:   # WatchInputError (a field of WatchStep) is a ValueError too
        raise WatchInputError(f"{where}: not a step record: {exc}") from None


@dataclass
class LoopingWorker:
    """A running heartbeat worker and the supervisor's handles on it (module docstring).

    ``proc``: the process; ``port``: its health port; ``workspace`` and ``journal``: its files;
    ``notify_name``: the ``NOTIFY_SOCKET`` it sends heartbeats to (bound here). Use as a context
    manager, or call :meth:`stop`."""

    proc: subprocess.Popen
    port: int
    workspace: Path
    journal: Path
    notify_name: str
    _sock: socket.socket = field(repr=False)
    heartbeats: list[tuple[float, str]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def healthz(self, timeout_s: float = 2.0) -> dict[str, Any]:
        """One HTTP liveness probe: ``{"http_status", "body", "latency_ms"}`` (status None and an
        ``error`` when the connection failed)."""
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            conn.request("GET", HEALTH_PATH)
            resp = conn.getresponse()
            body = resp.read()
            try:
                parsed: Any = json.loads(body)
            except ValueError:
                parsed = body.decode("utf-8", "replace")
            return {"http_status": resp.status, "body": parsed, "latency_ms": (time.perf_counter() - t0) * 1e3}
        except OSError as exc:
            return {"http_status": None, "body": None, "latency_ms": (time.perf_counter() - t0) * 1e3,
                    "error": f"{type(exc).__name__}: {exc}"}
        finally:
            conn.close()

    def drain_heartbeats(self) -> list[tuple[float, str]]:
        """Read every heartbeat datagram queued so far; returns all received, ``(monotonic s,
        message)``."""
        while True:
            try:
                data = self._sock.recv(256)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            self.heartbeats.append((time.monotonic(), data.decode("ascii", "replace").strip()))
        return self.heartbeats

    def process_state(self) -> str | None:
        """The worker's one-letter state in ``/proc`` (``S`` sleeping, ``R`` running, ``Z``...)."""
        return process_state(self.pid)

    def steps(self) -> list[WatchStep]:
        """The journal so far (:func:`journal_steps`)."""
        return journal_steps(self.journal)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the worker (SIGKILL after ``timeout_s``), reap it, close the heartbeat socket.
        Returns the exit code."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)
        self._sock.close()
        return self.proc.returncode

    def __enter__(self) -> "LoopingWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_looping_worker(workdir: str | os.PathLike, *, step_s: float = 0.1, heartbeat_s: float = 0.2,
                         max_runtime_s: float = 120.0, start_timeout_s: float = 60.0) -> LoopingWorker:
    """Start the heartbeat worker in ``workdir`` (its workspace, journal, ready file and log go
    there) and wait until it serves health.

    Raises ConfigError for an interval or timeout that is not a finite number > 0, LiveProcessError
    when the worker exits or does not report within ``start_timeout_s``."""
    for name, v in (("step_s", step_s), ("heartbeat_s", heartbeat_s), ("max_runtime_s", max_runtime_s),
                    ("start_timeout_s", start_timeout_s)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < math.inf:
            raise ConfigError(f"{name} must be a finite number > 0, got {v!r}")
    from kernel_lib.live.controller import live_env

    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    ready, journal, log = work / "ready.json", work / "journal.jsonl", work / "worker.log"
    for f in (ready, journal):
        f.unlink(missing_ok=True)
    name = f"@dal-heartbeat-{os.getpid()}-{secrets.token_hex(4)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(_notify_address(name))
    sock.setblocking(False)
    cfg = {"workspace": str(work / "workspace"), "journal": str(journal), "ready_file": str(ready),
           "step_s": step_s, "heartbeat_s": heartbeat_s, "max_runtime_s": max_runtime_s}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", _MODULE, json.dumps(cfg)], env={**live_env(),
                                "NOTIFY_SOCKET": name}, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + start_timeout_s
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            sock.close()
            raise LiveProcessError(f"the heartbeat worker did not start (exit {proc.returncode}):\n"
                                   f"{log.read_text()[-2000:]}")
        time.sleep(0.02)
    info = json.loads(ready.read_text())
    return LoopingWorker(proc, int(info["port"]), work / "workspace", journal, name, sock)


@dataclass(frozen=True)
class LivenessProbe:
    """One round of the supervisor's probes at ``t_s`` seconds after the worker started serving:
    the HTTP answer (``http_status``, ``reported_steps``, ``last_step_age_s``, ``latency_ms``),
    ``heartbeats`` received so far and the longest ``heartbeat_gap_s`` so far, the process state
    in ``/proc``, ``liveness`` (``healthy`` when HTTP said 200, the gap is within ``WatchdogSec``
    and the process is not a zombie; else ``unhealthy``), ``workspace_state`` (the supervisor's
    own hash of the workspace, 16 hex digits), ``journal_steps`` and ``semantic`` (what the
    watchdog concluded from the journal so far: ``no loop seen`` or the first detection)."""

    t_s: float
    http_status: int | None
    reported_steps: int | None
    last_step_age_s: float | None
    latency_ms: float
    heartbeats: int
    heartbeat_gap_s: float
    process_state: str | None
    liveness: str
    workspace_state: str
    journal_steps: int
    semantic: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class HeartbeatFallacyReport:
    """What :func:`run_heartbeat_fallacy` saw: every probe; ``watchdog_sec`` (the heartbeat
    deadline); ``liveness_healthy`` (every probe said healthy); ``steps`` and ``detections`` (the
    watchdog over the whole journal); ``first_detection_step`` and ``first_detection_t_s`` (when
    the loop was first reported; None if never); ``distinct_states_probed`` (the workspace states
    the supervisor's own hashes saw) and ``distinct_states_journal`` (in the journal); ``exit_code``."""

    probes: list[LivenessProbe]
    watchdog_sec: float
    liveness_healthy: bool
    steps: list[WatchStep]
    detections: list[Detection]
    first_detection_step: int | None
    first_detection_t_s: float | None
    distinct_states_probed: int
    distinct_states_journal: int
    exit_code: int | None


def _semantic(detections: list[Detection]) -> str:
    if not detections:
        return "no loop seen"
    d = detections[0]
    period = d.evidence.get("period")
    return f"looping: {d.kind}{f' k={period}' if period else ''} at step {d.evidence.get('step_position', d.position)}"


def run_heartbeat_fallacy(workdir: str | os.PathLike, *, duration_s: float = 3.0, probe_every_s: float = 0.25,
                          step_s: float = 0.1, heartbeat_s: float = 0.2, watchdog_sec: float = 1.0,
                          config: Any = None) -> HeartbeatFallacyReport:
    """Start the worker, probe it every ``probe_every_s`` seconds for ``duration_s`` seconds as a
    supervisor would (HTTP health, heartbeat gaps against ``watchdog_sec``, ``/proc``), hash the
    workspace at every probe, run the semantic watchdog (``config``: a
    :class:`~kernel_lib.recovery.watchdog.detectors.WatchdogConfig`) over the journal, then stop
    the worker. The numbers are measured on this machine.

    Raises ConfigError for durations that are not finite numbers > 0, WatchdogConfigError for a
    ``config`` that is not a WatchdogConfig (both before a worker starts), LiveProcessError when
    the worker does not start."""
    from kernel_lib.errors import WatchdogConfigError
    from kernel_lib.recovery.watchdog.detectors import WatchdogConfig, run_watchdog
    from kernel_lib.recovery.watchdog.workspace import WorkspaceHasher

    for name, v in (("duration_s", duration_s), ("probe_every_s", probe_every_s), ("watchdog_sec", watchdog_sec)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < math.inf:
            raise ConfigError(f"{name} must be a finite number > 0, got {v!r}")
    if config is not None and not isinstance(config, WatchdogConfig):   # before a worker is started
        raise WatchdogConfigError(f"config must be a WatchdogConfig, not {type(config).__name__}")
    probes: list[LivenessProbe] = []
    first_t: float | None = None
    with spawn_looping_worker(workdir, step_s=step_s, heartbeat_s=heartbeat_s) as worker, \
            WorkspaceHasher(worker.workspace) as hasher:
        start = time.monotonic()
        last_beat = start
        gap = 0.0
        while True:
            now = time.monotonic()
            health = worker.healthz()
            beats = worker.drain_heartbeats()
            for t, _msg in beats:
                gap = max(gap, t - last_beat)
                last_beat = max(last_beat, t)
            gap = max(gap, time.monotonic() - last_beat)
            pstate = worker.process_state()
            digest = hasher.hash().digest
            steps = worker.steps()
            dets = run_watchdog(steps, config)
            if dets and first_t is None:
                first_t = now - start
            body = health["body"] if isinstance(health.get("body"), dict) else {}
            ok = health["http_status"] == 200 and gap <= watchdog_sec and pstate not in (None, "Z", "X")
            probes.append(LivenessProbe(round(now - start, 3), health["http_status"], body.get("steps"),
                                        body.get("last_step_age_s"), round(health["latency_ms"], 2), len(beats),
                                        round(gap, 3), pstate, "healthy" if ok else "unhealthy", digest[:16],
                                        len(steps), _semantic(dets)))
            if now - start >= duration_s:
                break
            time.sleep(max(0.0, probe_every_s - (time.monotonic() - now)))
        code = worker.stop()
        steps = worker.steps()
    dets = run_watchdog(steps, config)
    first_step = dets[0].evidence.get("step_position", dets[0].position) if dets else None
    return HeartbeatFallacyReport(probes, watchdog_sec, all(p.liveness == "healthy" for p in probes), steps, dets,
                                  first_step, None if first_t is None else round(first_t, 3),
                                  len({p.workspace_state for p in probes}),
                                  len({s.state_hash for s in steps if s.state_hash}), code)


@dataclass(frozen=True)
class SupervisedRun:
    """What :func:`run_watchdog_supervisor` saw: ``detection`` (the first :class:`Detection`, or
    None), ``detected_at_step`` and ``detected_after_s`` (measured from the worker's start of
    serving), ``steps_taken`` (journal steps when the worker was stopped), ``stopped_after_s``,
    ``healthy_probes`` / ``probes`` (the HTTP liveness probe still answered 200 each time the
    supervisor polled), ``exit_code``, ``timed_out`` (no detection within ``max_s``)."""

    detection: Detection | None
    detected_at_step: int | None
    detected_after_s: float | None
    steps_taken: int
    stopped_after_s: float
    healthy_probes: int
    probes: int
    exit_code: int | None
    timed_out: bool


def run_watchdog_supervisor(workdir: str | os.PathLike, *, max_s: float = 10.0, poll_every_s: float = 0.1,
                            step_s: float = 0.1, heartbeat_s: float = 0.2, config: Any = None) -> SupervisedRun:
    """The mechanism that avoids the heartbeat fallacy, run: start the same looping worker, and
    every ``poll_every_s`` seconds probe its health *and* run the semantic watchdog over its
    journal; stop the worker (SIGTERM) at the first detection instead of letting a passing
    heartbeat keep it running. ``max_s``: give up after that long (``timed_out``). Times are
    measured on this machine.

    Raises ConfigError for durations that are not finite numbers > 0, WatchdogConfigError for a bad
    ``config``, LiveProcessError when the worker does not start."""
    from kernel_lib.errors import WatchdogConfigError
    from kernel_lib.recovery.watchdog.detectors import WatchdogConfig, run_watchdog

    for name, v in (("max_s", max_s), ("poll_every_s", poll_every_s)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < math.inf:
            raise ConfigError(f"{name} must be a finite number > 0, got {v!r}")
    if config is not None and not isinstance(config, WatchdogConfig):
        raise WatchdogConfigError(f"config must be a WatchdogConfig, not {type(config).__name__}")
    healthy = probes = 0
    det = None
    detected_after = None
    with spawn_looping_worker(workdir, step_s=step_s, heartbeat_s=heartbeat_s) as worker:
        start = time.monotonic()
        while True:
            health = worker.healthz()
            probes += 1
            healthy += health["http_status"] == 200
            dets = run_watchdog(worker.steps(), config)
            if dets:
                det = dets[0]
                detected_after = round(time.monotonic() - start, 3)
                break
            if time.monotonic() - start >= max_s:
                break
            time.sleep(poll_every_s)
        code = worker.stop()
        stopped = round(time.monotonic() - start, 3)
        steps = worker.steps()
    at = det.evidence.get("step_position", det.position) if det is not None else None
    return SupervisedRun(det, at, detected_after, len(steps), stopped, healthy, probes, code, det is None)


if __name__ == "__main__":   # pragma: no cover - the worker process
    sys.exit(worker_main(json.loads(sys.argv[1])))
