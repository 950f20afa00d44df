"""Two-phase commit with real processes: the coordinator is killed with ``SIGKILL`` after every
participant voted yes, and the participants' rows stay locked across a participant restart until
an operator resolves them (Failure Recovery, "Fallacies and Pitfalls": the 2PC fallacy).

Processes (each ``python -m kernel_lib.live.two_phase CONFIG_JSON``, in its own session, leaving
when the process that started it is gone):

* a **participant** (``{"role": "participant", "service", "state_dir", "port"}``) serves
  :class:`~kernel_lib.sim.two_phase.PreparableService` over HTTP on ``127.0.0.1``; its state is a
  :class:`~kernel_lib.live.services.ServiceState` (SQLite, ``synchronous=FULL``) committed after
  every request that changed it and before the answer leaves, so a prepared transaction and its
  lock survive the participant's own ``SIGKILL``. Endpoints (JSON): ``POST /call`` (an ordinary
  client request ``{action, arguments, operation_id, idempotency_key}``; 423 while a prepared
  transaction holds the row), ``POST /xa/prepare`` ``{txid, action, arguments}``, ``POST
  /xa/commit`` and ``POST /xa/abort`` ``{txid}``, ``GET /xa/status/{txid}``, ``POST /xa/resolve``
  ``{txid, decision, operator}`` (the manual intervention), ``GET /counts``, ``GET /locks``,
  ``GET /health``. It reports by writing ``state_dir/ready.json`` (``{"url", "port", "pid"}``).
* the **coordinator** (``{"role": "coordinator", "participants": {name: url}, "txid",
  "branches", "turn_s", "log"}``) runs :class:`~kernel_lib.sim.two_phase.TwoPhaseCoordinator`
  over HTTP (standard library only, so it starts fast), appending each log record to the JSON-lines
  file ``log`` with fsync before it goes on; ``turn_s`` seconds (a model turn) pass between
  protocol messages.

:func:`run_live_two_phase` starts two participants, starts the coordinator, ``SIGKILL``\\ s it as
soon as its log holds every yes vote (inside the turn before its decision), then measures: other
clients' requests refused by the participants (their own counts), the lock still held after the
payment participant is itself killed and restarted on its state file, and the rows free again only
after the operator's resolution. Every time in its timeline is measured on this machine.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any
from kernel_lib._support.workdirs import write_text_atomic

__all__ = ["HttpParticipant", "TwoPhaseProcesses", "run_live_two_phase", "READY_FILE"]

READY_FILE = "ready.json"
_MODULE = "kernel_lib.live.two_phase"


# ------------------------------------------------------------------------------------------------
# the participant process
# ------------------------------------------------------------------------------------------------



def build_participant_app(service: str, state: Any) -> Any:
    """The participant's Starlette app (module docstring) over ``state`` (a ServiceState)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from kernel_lib.sim.two_phase import PreparableService

    part = PreparableService(service, clock=time.time, state=state.load())
    state.save(part.state)

    async def body_of(request: Any) -> dict[str, Any]:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            body = None
        return body if isinstance(body, dict) else {}

    def answer(result: tuple[int, dict[str, Any]]) -> JSONResponse:
        state.save(part.state)     # durable before the answer leaves
        status, body = result
        return JSONResponse(body, status_code=status)

    async def call(request: Any) -> JSONResponse:
        b = await body_of(request)
        if not isinstance(b.get("action"), str) or not isinstance(b.get("operation_id"), str):
            return JSONResponse({"error": "body must be {action, arguments, operation_id, idempotency_key}"},
                                status_code=422)
        key = b.get("idempotency_key") if isinstance(b.get("idempotency_key"), str) else None
        return answer(part.call(b["action"], b.get("arguments") or {}, b["operation_id"], key))

    async def prepare(request: Any) -> JSONResponse:
        b = await body_of(request)
        return answer(part.prepare(str(b.get("txid") or ""), str(b.get("action") or ""), b.get("arguments") or {}))

    async def commit(request: Any) -> JSONResponse:
        return answer(part.commit(str((await body_of(request)).get("txid") or "")))

    async def abort(request: Any) -> JSONResponse:
        return answer(part.abort(str((await body_of(request)).get("txid") or "")))

    async def resolve(request: Any) -> JSONResponse:
        b = await body_of(request)
        return answer(part.resolve(str(b.get("txid") or ""), str(b.get("decision") or ""),
                                   str(b.get("operator") or "")))

    async def status(request: Any) -> JSONResponse:
        code, body = part.status(request.path_params["txid"])
        return JSONResponse(body, status_code=code)

    async def counts(request: Any) -> JSONResponse:
        return JSONResponse(part.counts())

    async def locks(request: Any) -> JSONResponse:
        return JSONResponse(part.locks())

    async def health(request: Any) -> JSONResponse:
        return JSONResponse({"ok": True, "pid": os.getpid(), "service": service})

    return Starlette(routes=[Route("/call", call, methods=["POST"]),
                             Route("/xa/prepare", prepare, methods=["POST"]),
                             Route("/xa/commit", commit, methods=["POST"]),
                             Route("/xa/abort", abort, methods=["POST"]),
                             Route("/xa/resolve", resolve, methods=["POST"]),
                             Route("/xa/status/{txid}", status, methods=["GET"]),
                             Route("/counts", counts, methods=["GET"]),
                             Route("/locks", locks, methods=["GET"]),
                             Route("/health", health, methods=["GET"])])


def participant_main(config: dict[str, Any]) -> int:
    """The participant process (module docstring)."""
    import uvicorn

    from kernel_lib.live.orphan import watch_parent
    from kernel_lib.live.services import STATE_FILE, ServiceState

    state_dir = Path(config["state_dir"])
    state_dir.mkdir(parents=True, exist_ok=True)
    state = ServiceState(state_dir / STATE_FILE)
    app = build_participant_app(config["service"], state)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", int(config.get("port") or 0)))
    except OSError:
        sock.bind(("127.0.0.1", 0))    # the old port was taken meanwhile: ready.json says which
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False,
                                           timeout_graceful_shutdown=1))
    orig_startup = server.startup

    async def startup(sockets: Any = None) -> None:
        await orig_startup(sockets=sockets)
        write_text_atomic(state_dir / READY_FILE, json.dumps({"url": f"http://127.0.0.1:{port}", "port": port,
                                                          "pid": os.getpid()}))

    server.startup = startup
    watch_parent(lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        state.close()
    return 0


# ------------------------------------------------------------------------------------------------
# the coordinator process (standard library only)
# ------------------------------------------------------------------------------------------------


def _http(url: str, method: str, path: str, body: dict[str, Any] | None = None,
          timeout_s: float = 5.0) -> tuple[int, dict[str, Any]]:
    """One JSON request; ``(http_status, body)``. Raises OSError when the participant cannot be
    reached or does not answer within ``timeout_s``."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout_s)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        resp = conn.getresponse()
        raw = resp.read()
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {"text": raw.decode("utf-8", "replace")}
        return resp.status, parsed if isinstance(parsed, dict) else {"value": parsed}
    except (http.client.HTTPException, TimeoutError) as exc:
        raise OSError(f"{method} {url}{path}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


class HttpParticipant:
    """A live participant as :class:`~kernel_lib.sim.two_phase.TwoPhaseCoordinator` and the
    clients reach it (each method returns ``(http_status, body)``; OSError when unreachable)."""

    def __init__(self, url: str, timeout_s: float = 5.0):
        self.url = url
        self.timeout_s = timeout_s

    def prepare(self, txid: str, action: str, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return _http(self.url, "POST", "/xa/prepare", {"txid": txid, "action": action, "arguments": arguments},
                     self.timeout_s)

    def commit(self, txid: str) -> tuple[int, dict[str, Any]]:
        return _http(self.url, "POST", "/xa/commit", {"txid": txid}, self.timeout_s)

    def abort(self, txid: str) -> tuple[int, dict[str, Any]]:
        return _http(self.url, "POST", "/xa/abort", {"txid": txid}, self.timeout_s)

    def status(self, txid: str) -> tuple[int, dict[str, Any]]:
        return _http(self.url, "GET", f"/xa/status/{urllib.parse.quote(txid)}", None, self.timeout_s)

    def resolve(self, txid: str, decision: str, operator: str) -> tuple[int, dict[str, Any]]:
        return _http(self.url, "POST", "/xa/resolve", {"txid": txid, "decision": decision, "operator": operator},
                     self.timeout_s)

    def call(self, action: str, arguments: dict[str, Any], operation_id: str,
             idempotency_key: str | None = None) -> tuple[int, dict[str, Any]]:
        return _http(self.url, "POST", "/call", {"action": action, "arguments": arguments,
                                                 "operation_id": operation_id, "idempotency_key": idempotency_key},
                     self.timeout_s)

    def counts(self) -> dict[str, Any]:
        return _http(self.url, "GET", "/counts", None, self.timeout_s)[1]

    def locks(self) -> dict[str, Any]:
        return _http(self.url, "GET", "/locks", None, self.timeout_s)[1]


class _FileLog(list):
    """The coordinator's log: a list whose ``append`` first writes the record to a JSON-lines file
    and fsyncs it (the record is durable before the coordinator goes on)."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path

    def append(self, entry: dict[str, Any]) -> None:   # type: ignore[override]
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        super().append(entry)


def coordinator_main(config: dict[str, Any]) -> int:
    """The coordinator process (module docstring)."""
    from kernel_lib.live.orphan import watch_parent
    from kernel_lib.sim.two_phase import Branch, TwoPhaseCoordinator

    watch_parent(lambda: os.kill(os.getpid(), signal.SIGTERM))
    parts = {name: HttpParticipant(url) for name, url in config["participants"].items()}
    log = _FileLog(Path(config["log"]))
    coord = TwoPhaseCoordinator(parts, log, wait=time.sleep, clock=time.time)
    coord.run(config["txid"], [Branch(**b) for b in config["branches"]], turn_s=float(config["turn_s"]))
    return 0


# ------------------------------------------------------------------------------------------------
# the supervisor's side
# ------------------------------------------------------------------------------------------------


def read_log(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The coordinator's log as written so far (a partly written last line is left out)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


class TwoPhaseProcesses:
    """Participant processes and a coordinator process under ``workdir`` (the supervisor's handles).

    ``start_participants(names)`` starts them in parallel and waits for their ready files;
    ``start_coordinator(...)`` starts the coordinator; ``kill(name)`` sends SIGKILL (a participant
    or ``"coordinator"``) and reaps it; ``restart(name)`` starts a participant again on its state
    file; ``close()`` stops everything started here. Raises
    :class:`~kernel_lib.errors.LiveProcessError` when a process does not start.
    """

    def __init__(self, workdir: str | os.PathLike, *, start_timeout_s: float = 60.0):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.start_timeout_s = start_timeout_s
        self.procs: dict[str, subprocess.Popen] = {}
        self.ready: dict[str, dict[str, Any]] = {}

    def _spawn(self, name: str, config: dict[str, Any]) -> None:
        from kernel_lib.live.controller import live_env

        with open(self.workdir / f"{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", _MODULE, json.dumps(config)], env=live_env(),
                                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def _start(self, names: list[str], ports: dict[str, int]) -> None:
        from kernel_lib.errors import LiveProcessError

        for name in names:
            d = self.workdir / name
            d.mkdir(parents=True, exist_ok=True)
            (d / READY_FILE).unlink(missing_ok=True)
            self._spawn(name, {"role": "participant", "service": name, "state_dir": str(d),
                               "port": ports.get(name, 0)})
        deadline = time.monotonic() + self.start_timeout_s
        for name in names:
            path = self.workdir / name / READY_FILE
            while True:
                if path.exists():
                    with contextlib.suppress(ValueError, OSError):
                        self.ready[name] = json.loads(path.read_text())
                        break
                if self.procs[name].poll() is not None or time.monotonic() > deadline:
                    log = (self.workdir / f"{name}.log").read_text(errors="replace")[-1500:]
                    raise LiveProcessError(f"participant {name} did not start (exit {self.procs[name].poll()}):\n{log}")
                time.sleep(0.01)

    def start_participants(self, names: list[str]) -> None:
        self._start(list(names), {})

    def participant(self, name: str) -> HttpParticipant:
        return HttpParticipant(self.ready[name]["url"])

    def start_coordinator(self, txid: str, branches: list[dict[str, Any]], turn_s: float) -> Path:
        """Start the coordinator; returns its log file."""
        log = self.workdir / "coordinator.jsonl"
        log.unlink(missing_ok=True)
        self._spawn("coordinator", {"role": "coordinator", "txid": txid, "branches": branches, "turn_s": turn_s,
                                    "log": str(log),
                                    "participants": {n: r["url"] for n, r in self.ready.items()}})
        return log

    def kill(self, name: str) -> int | None:
        """SIGKILL ``name``'s process (its whole session) and reap it; returns its exit status."""
        from kernel_lib._support.procs import kill_group

        proc = self.procs.get(name)
        if proc is None:
            return None
        kill_group(proc, signal.SIGKILL)
        return proc.returncode

    def restart(self, name: str) -> None:
        """Kill ``name`` if it runs and start a new participant process on the same state file and port."""
        if self.procs.get(name) is not None and self.procs[name].poll() is None:
            self.kill(name)
        self._start([name], {name: int(self.ready[name]["port"])})

    def close(self) -> None:
        from kernel_lib._support.procs import kill_group

        for proc in self.procs.values():
            kill_group(proc, signal.SIGTERM, wait_s=5.0)
        self.procs.clear()

    def __enter__(self) -> "TwoPhaseProcesses":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_live_two_phase(workdir: str | os.PathLike, *, turn_s: float = 3.0, client_requests: int = 10,
                       client_every_s: float = 0.05, restart_participant: bool = True, operator: str = "oncall",
                       txid: str = "tx-live-1", kill_timeout_s: float = 60.0) -> dict[str, Any]:
    """The 2PC fallacy with real processes (module docstring). Returns plain data:
    ``{"timeline": [{"t_s", "who", "what", "payments: row", "egress_ip: row"}], "coordinator_log",
    "coordinator_exit", "clients": {participant: {"while locked": {status: n}, "after resolution":
    {status: n}}}, "counts": {participant: counts read from the process}, "lock_held_s": {participant:
    seconds from its prepare to the operator's decision, by its own clock}, "lock_survived_restart",
    "restart_s", "start_s"}``; ``t_s`` measured from the coordinator's start.

    Args:
        turn_s: the coordinator's model turn between protocol messages (s); the SIGKILL lands in
            the turn after the last yes vote, so it must be long enough to see the votes (> 0.5 s).
        client_requests: requests each participant gets from other clients while the row is locked
            (and once more after the restart, and after the resolution), ``client_every_s`` apart.
        restart_participant: also SIGKILL the payment participant and start it again on its state.

    Raises ConfigError for a bad argument, LiveProcessError when a process does not start or the
    coordinator's votes do not appear within ``kill_timeout_s``. Every process is stopped before
    this returns.
    """
    from kernel_lib.errors import ConfigError, LiveProcessError
    from kernel_lib.sim.two_phase import LOCKED, default_branches

    if isinstance(turn_s, bool) or not isinstance(turn_s, (int, float)) or not 0.5 <= turn_s <= 60:
        raise ConfigError(f"turn_s must be 0.5..60 s (the kill lands inside the turn), got {turn_s!r}")
    if isinstance(client_requests, bool) or not isinstance(client_requests, int) or not 1 <= client_requests <= 1000:
        raise ConfigError(f"client_requests must be an integer 1..1000, got {client_requests!r}")
    branches = [{"participant": b.participant, "action": b.action, "arguments": b.arguments}
                for b in default_branches()]
    names = [b["participant"] for b in branches]
    timeline: list[dict[str, Any]] = []
    clients: dict[str, dict[str, dict[str, int]]] = {n: {} for n in names}
    with TwoPhaseProcesses(workdir) as procs:
        t_start = time.monotonic()
        procs.start_participants(names)
        start_s = time.monotonic() - t_start
        t0 = time.monotonic()

        def note(who: str, what: str) -> None:
            row = {"t_s": round(time.monotonic() - t0, 3), "who": who, "what": what}
            for n in names:
                try:
                    held = procs.participant(n).locks()
                    row[f"{n}: row"] = ", ".join(f"locked by {v['txid']} ({k})" for k, v in held.items()) or "free"
                except OSError:
                    row[f"{n}: row"] = "(process down)"
            timeline.append(row)

        def clients_round(phase: str, count: int) -> None:
            for i in range(count):
                for b in branches:
                    n = b["participant"]
                    op = f"client-{n}-{phase}-{i}"
                    status, _ = procs.participant(n).call(b["action"], b["arguments"], op, op)
                    tally = clients[n].setdefault(phase, {})
                    tally[str(status)] = tally.get(str(status), 0) + 1
                time.sleep(client_every_s)

        log_path = procs.start_coordinator(txid, branches, float(turn_s))
        deadline = time.monotonic() + kill_timeout_s
        while sum(1 for e in read_log(log_path) if e.get("record") == "VOTE" and e.get("vote") == "yes") < len(names):
            if time.monotonic() > deadline or procs.procs["coordinator"].poll() is not None:
                raise LiveProcessError(f"the coordinator's votes did not appear: {read_log(log_path)}")
            time.sleep(0.005)
        note("coordinator", f"every participant voted yes ({len(names)} VOTE records in its log)")
        code = procs.kill("coordinator")
        note("supervisor", f"SIGKILL to the coordinator (exit status {code}) before its decision")
        clients_round("while locked", client_requests)
        locked = sum(v.get(str(LOCKED), 0) for c in clients.values() for v in c.values())
        note("clients", f"{client_requests} requests per participant for the same rows: {locked} answered "
                        f"{LOCKED} Locked")
        survived = None
        restart_s = None
        if restart_participant:
            t_r = time.monotonic()
            procs.restart("payments")
            restart_s = round(time.monotonic() - t_r, 3)
            survived = bool(procs.participant("payments").locks())
            note("supervisor", f"payments participant SIGKILLed and restarted on its state file in {restart_s} s: "
                               f"the lock {'is still held' if survived else 'is gone'}")
            clients_round("after the participant restart", 1)
        for n in names:
            status, body = procs.participant(n).resolve(txid, "abort", operator)
            note("operator", f"resolves {txid} at {n} by hand: abort -> {status} {body.get('state')}")
        clients_round("after resolution", 1)
        note("clients", "one more request per participant after the resolution")
        counts = {n: procs.participant(n).counts() for n in names}
        held = {}
        for n in names:
            st = procs.participant(n).status(txid)[1]
            held[n] = round(st["decided_s"] - st["prepared_s"], 3) if st.get("decided_s") else None
        coordinator_log = read_log(log_path)
    return {"timeline": timeline, "coordinator_log": coordinator_log, "coordinator_exit": code,
            "clients": clients, "counts": counts, "lock_held_s": held, "lock_survived_restart": survived,
            "restart_s": restart_s, "start_s": round(start_s, 3), "turn_s": float(turn_s), "txid": txid}


def main(argv: list[str] | None = None) -> int:
    """``python -m kernel_lib.live.two_phase CONFIG_JSON``: a participant or the coordinator."""
    args = sys.argv[1:] if argv is None else argv
    config = json.loads(args[0])
    if config.get("role") == "participant":
        return participant_main(config)
    if config.get("role") == "coordinator":
        return coordinator_main(config)
    print(f"unknown role {config.get('role')!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":   # pragma: no cover - the processes
    sys.exit(main())
