"""The tool services and the credential broker as real processes on loopback (Failure Recovery).

Each service of :data:`kernel_lib.sim.services.SERVICES` (sandbox, egress_ip, build, firewall,
dns, payments, git, email, routing) runs as its own OS process, serving the same
:class:`~kernel_lib.sim.services.ServiceLogic` its simulated twin runs in process::

    python -m kernel_lib.live.services serve --service NAME --state-dir DIR --broker URL
    python -m kernel_lib.live.services broker --state-dir DIR

Both bind ``127.0.0.1`` only (a free port, or ``--port`` on a restart; ``serve --host ADDR``, repeatable,
binds other addresses, such as a quarantine sandbox's veth address), and report by writing
``DIR/ready.json`` atomically (``{"name", "url", "port", "pid"}``). SIGTERM stops them cleanly.

Durability. A process keeps its whole state (the JSON-able dict of the logic) in an SQLite file
of its own, ``DIR/state.sqlite`` (WAL, ``synchronous=FULL``: a commit has been fsynced), and
commits it after every request that changed it and **before** the answer leaves. A restarted
process reopens the file and carries on: what exists, the answers under each idempotency key, the
operation table of the status lookup, the received/applied counts and the audit trail. An
injected ``crash`` fault commits the received count first, then the process sends itself a real
``SIGKILL`` (no answer, no clean-up).

A service's endpoints (JSON):

* ``POST /call`` ``{action, arguments, operation_id, idempotency_key}``, the capability lease in
  ``Authorization: Bearer <token>``: the service introspects the lease at the broker on every
  request (``401`` from the service itself for a revoked, expired or unknown lease) and answers
  with the logic's HTTP status and body. ``timeout_after``/``timeout_before`` hold the answer
  until the client gives up and disconnects (at most ``--hold-s``); ``slow`` really sleeps
  ``delay_s`` before answering. A broker that does not answer: ``503`` (retryable).
* ``GET /operations/{operation_id}``: the status lookup (``completed``/``failed``/``unknown``).
* ``GET /resources[?all=1]``, ``GET /audit``, ``GET /counts``, ``GET /invariants``, ``GET /health``.
* ``POST /faults`` ``{action, kind, count, delay_s?, retry_after_s?}`` (422 on a bad spec),
  ``DELETE /faults``; ``POST /taken-names`` ``{name}`` (dns only).

The broker: ``POST /leases`` ``{trajectory_id, ttl_s}`` → ``{lease_id, token, expires_s}``,
``POST /introspect`` ``{token}`` → ``{active, trajectory_id, lease_id, reason}``, ``POST /revoke``
``{trajectory_id}`` → ``{revoked: [lease_id, ...]}``. Leases and revocations are committed like a
service's state; the introspection counter is kept in memory only (it is a statistic).

:class:`LiveFleet` starts the broker and every service in parallel and offers the fleet facade of
:class:`~kernel_lib.sim.services.TwinFleet` (same methods, shapes and errors:
:class:`~kernel_lib.errors.ServiceDownError` when a service process is dead, ``TimeoutError`` when
no answer came in time), ``client(trajectory_id)`` returning :class:`LiveEndpoints` (the runner's
:class:`~kernel_lib.recovery.runner.Endpoints`, over httpx), a real :meth:`LiveFleet.restart` and
:meth:`LiveFleet.attach` for another process (a saga worker) to use a running fleet.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kernel_lib._support.procs import free_port, kill_group, pid_alive
from kernel_lib._support.sqlite import Layout, close_quietly, open_database, statements, write_transaction
from kernel_lib.errors import BrokerUnreachableError, ConfigError, ServiceDownError, ServiceError
from kernel_lib.live.orphan import parent_env, watch_parent
from kernel_lib._support.workdirs import write_text_atomic

__all__ = ["BROKER", "LiveFleet", "LiveEndpoints", "ServiceState", "WallClock", "READY_FILE", "STATE_FILE",
           "FLEET_FILE"]

#: the name of the broker's directory and process among the services
BROKER = "broker"
READY_FILE = "ready.json"
STATE_FILE = "state.sqlite"
#: the fleet's own record in its state directory: ``{"owner_pid", "services", "started_s"}``
FLEET_FILE = "fleet.json"

_LAYOUT = Layout(kind="tool service state", label="service state", version=1,
                 tables={"service_state": frozenset({"id", "doc"})},
                 schema=statements("CREATE TABLE IF NOT EXISTS service_state "
                                   "(id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL);"),
                 application_id=0x5356_4331)   # "SVC1"


class ServiceState:
    """One process's durable state: a JSON document in an SQLite file of its own (WAL,
    ``synchronous=FULL``; one row, replaced in one transaction per change).

    Raises ServiceError when the file cannot be opened or is not a service state file."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.db = open_database(self.path, _LAYOUT, error=ServiceError, synchronous="FULL")
        self._last: str | None = None

    def load(self) -> dict[str, Any] | None:
        row = self.db.execute("SELECT doc FROM service_state WHERE id = 1").fetchone()
        if row is None:
            return None
        self._last = row[0]
        return json.loads(row[0])

    def save(self, doc: dict[str, Any]) -> bool:
        """Commit ``doc`` (fsynced) unless it is the one stored; True when it wrote."""
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        if text == self._last:
            return False
        with write_transaction(self.db, f"service state {self.path}", busy_error=ServiceError):
            self.db.execute("INSERT OR REPLACE INTO service_state (id, doc) VALUES (1, ?)", (text,))
        self._last = text
        return True

    def close(self) -> None:
        close_quietly(self.db)


class WallClock:
    """The live fleet's clock: ``clock()`` is ``time.time()``; ``advance(s)`` really sleeps
    (the runner's backoff waits with it, as it advances a twin fleet's virtual clock)."""

    def __call__(self) -> float:
        return time.time()

    def advance(self, seconds: float) -> float:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 3600:
            raise ConfigError(f"a wait is 0..3600 seconds, got {seconds!r}")
        time.sleep(seconds)
        return time.time()



# ------------------------------------------------------------------------------------------------
# the server side (runs in the service or broker process)
# ------------------------------------------------------------------------------------------------


async def _json_body(request: Any) -> Any:
    try:
        return await request.json()
    except (ValueError, UnicodeDecodeError):
        return None


def _bearer(request: Any) -> str | None:
    auth = request.headers.get("authorization") or ""
    return auth[7:].strip() or None if auth.lower().startswith("bearer ") else None


def build_broker_app(state: ServiceState) -> Any:
    """The broker's Starlette app over :class:`~kernel_lib.sim.services.BrokerLogic` (wall clock)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from kernel_lib.sim.services import BrokerLogic

    logic = BrokerLogic(time.time, state.load())
    logic.state["introspections"] = 0

    def persist() -> None:
        state.save({**logic.state, "introspections": 0})

    async def leases(request: Any) -> JSONResponse:
        body = await _json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("trajectory_id"), str) or not body["trajectory_id"]:
            return JSONResponse({"error": "body must be {trajectory_id, ttl_s}"}, status_code=422)
        try:
            out = logic.issue(body["trajectory_id"], body.get("ttl_s", 300.0))
        except ServiceError as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        persist()
        return JSONResponse(out)

    async def introspect(request: Any) -> JSONResponse:
        body = await _json_body(request)
        token = body.get("token") if isinstance(body, dict) else None
        return JSONResponse(logic.introspect(token if isinstance(token, str) else None))

    async def revoke(request: Any) -> JSONResponse:
        body = await _json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("trajectory_id"), str):
            return JSONResponse({"error": "body must be {trajectory_id}"}, status_code=422)
        out = logic.revoke_all(body["trajectory_id"])
        persist()
        return JSONResponse({"revoked": out})

    async def health(request: Any) -> JSONResponse:
        return JSONResponse({"ok": True, "pid": os.getpid(), "name": BROKER,
                             "introspections": logic.state["introspections"]})

    return Starlette(routes=[Route("/leases", leases, methods=["POST"]),
                             Route("/introspect", introspect, methods=["POST"]),
                             Route("/revoke", revoke, methods=["POST"]),
                             Route("/health", health, methods=["GET"])])


def build_service_app(name: str, state: ServiceState, broker_url: str | None, *, hold_s: float = 30.0,
                      simulate_durations: bool = False) -> Any:
    """One service's Starlette app over :class:`~kernel_lib.sim.services.ServiceLogic` (module
    docstring). ``broker_url`` None: no lease check (a fleet started without a broker)."""
    import httpx
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from kernel_lib.sim.services import ServiceLogic

    broker = (httpx.Client(timeout=5.0, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))
              if broker_url else None)

    def introspect(token: str | None) -> dict[str, Any]:
        try:
            r = broker.post(f"{broker_url}/introspect", json={"token": token})
            return r.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise BrokerUnreachableError(f"{type(exc).__name__}: {exc}") from None

    logic = ServiceLogic(name, state=state.load(), introspect=introspect if broker else None,
                         sleep=time.sleep, simulate_durations=simulate_durations)
    state.save(logic.state)   # a new file holds the initial state from the start

    async def call(request: Any) -> JSONResponse:
        body = await _json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("action"), str) \
                or not isinstance(body.get("operation_id"), str):
            return JSONResponse({"error": "body must be {action, arguments, operation_id, idempotency_key}",
                                 "retryable": False}, status_code=422)
        key = body.get("idempotency_key")
        try:
            status, answer, effect = logic.call(body["action"], body.get("arguments", {}), body["operation_id"],
                                                key if isinstance(key, str) and key else None, _bearer(request))
        except BrokerUnreachableError as exc:
            state.save(logic.state)   # the request was counted
            return JSONResponse({"error": f"the credential broker did not answer: {exc}", "retryable": True},
                                status_code=503)
        state.save(logic.state)   # durable before anything is answered (or the process dies)
        if effect == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if effect == "timeout":
            deadline = time.monotonic() + hold_s
            while time.monotonic() < deadline and not await request.is_disconnected():
                await asyncio.sleep(0.02)
            return JSONResponse({"error": "held past the client's timeout (injected)"}, status_code=504)
        if effect and effect.startswith("slow:"):
            await asyncio.sleep(float(effect.split(":", 1)[1]))
        return JSONResponse(answer, status_code=status)

    async def operation(request: Any) -> JSONResponse:
        return JSONResponse(logic.lookup(request.path_params["operation_id"]))

    async def resources(request: Any) -> JSONResponse:
        return JSONResponse(logic.resources(live_only=request.query_params.get("all") not in ("1", "true")))

    async def audit(request: Any) -> JSONResponse:
        return JSONResponse(logic.state["audit"])

    async def counts(request: Any) -> JSONResponse:
        return JSONResponse(logic.counts())

    async def invariants(request: Any) -> JSONResponse:
        return JSONResponse(logic.invariants())

    async def faults(request: Any) -> JSONResponse:
        if request.method == "DELETE":
            logic.clear_faults()
            state.save(logic.state)
            return JSONResponse({"faults": {}})
        body = await _json_body(request)
        if not isinstance(body, dict):
            return JSONResponse({"error": "body must be {action, kind, count, ...}"}, status_code=422)
        params = {k: v for k, v in body.items() if k not in ("action", "kind", "count")}
        try:
            spec = logic.inject(body.get("action"), body.get("kind"), body.get("count", 1), **params)
        except (ServiceError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        state.save(logic.state)
        return JSONResponse(spec)

    async def taken(request: Any) -> JSONResponse:
        body = await _json_body(request)
        if name != "dns":
            return JSONResponse({"error": f"service {name} keeps no domain names"}, status_code=404)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return JSONResponse({"error": "body must be {name}"}, status_code=422)
        logic.taken_name(body["name"])
        state.save(logic.state)
        return JSONResponse({"taken_names": logic.state["taken_names"]})

    async def health(request: Any) -> JSONResponse:
        return JSONResponse({"ok": True, "pid": os.getpid(), "name": name})

    return Starlette(routes=[Route("/call", call, methods=["POST"]),
                             Route("/operations/{operation_id}", operation, methods=["GET"]),
                             Route("/resources", resources, methods=["GET"]),
                             Route("/audit", audit, methods=["GET"]),
                             Route("/counts", counts, methods=["GET"]),
                             Route("/invariants", invariants, methods=["GET"]),
                             Route("/faults", faults, methods=["POST", "DELETE"]),
                             Route("/taken-names", taken, methods=["POST"]),
                             Route("/health", health, methods=["GET"])])


def _serve(app: Any, name: str, state_dir: Path, port: int, hosts: tuple[str, ...] = ("127.0.0.1",)) -> int:
    """Serve ``app`` on ``port`` of every address in ``hosts`` (the first one's URL goes in the
    ready file; a quarantine sandbox reaches a service on its veth address, issue 19)."""
    import uvicorn

    socks = []
    for i, host in enumerate(hosts):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            if not port or i:
                raise
            sock.bind((host, 0))   # the old port was taken meanwhile: a new one (ready.json says which)
        sock.listen(128)
        port = sock.getsockname()[1]
        socks.append(sock)
    url = f"http://{hosts[0]}:{port}"

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False,
                                           timeout_graceful_shutdown=1))
    orig_startup = server.startup

    async def startup(sockets: Any = None) -> None:
        await orig_startup(sockets=sockets)
        write_text_atomic(state_dir / READY_FILE, json.dumps({"name": name, "url": url, "port": port,
                                                          "pid": os.getpid()}))

    server.startup = startup   # ready.json only once the socket serves
    watch_parent(lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        server.run(sockets=socks)
    finally:
        for sock in socks:
            sock.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    from kernel_lib.sim.services import SERVICES

    ap = argparse.ArgumentParser(prog="python -m kernel_lib.live.services",
                                 description="A tool service or the credential broker of the Failure Recovery "
                                             "chapter as a process on loopback (started by LiveFleet).")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve one tool service")
    s.add_argument("--service", required=True, choices=SERVICES)
    s.add_argument("--broker", default=None, help="the broker's base URL (none: leases are not checked)")
    s.add_argument("--hold-s", type=float, default=30.0,
                   help="longest an injected timeout holds its answer, seconds (default %(default)s)")
    s.add_argument("--host", action="append", default=None,
                   help="an IPv4 address to listen on (repeatable; default 127.0.0.1; the first one's URL is reported)")
    s.add_argument("--simulate-durations", action="store_true",
                   help="really sleep each action's duration (the chapter's figures: compile takes 4.2 s)")
    b = sub.add_parser("broker", help="serve the credential broker")
    for p in (s, b):
        p.add_argument("--state-dir", required=True, help="directory for state.sqlite and ready.json")
        p.add_argument("--port", type=int, default=0, help="port to bind (default: a free one)")
    args = ap.parse_args(argv)
    if not 0 <= args.port < 65536:
        ap.error(f"--port must be 0..65535, got {args.port}")
    state_dir = Path(args.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    try:
        state = ServiceState(state_dir / STATE_FILE)
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        if args.command == "broker":
            return _serve(build_broker_app(state), BROKER, state_dir, args.port)
        if not (0 < args.hold_s <= 3600):
            ap.error(f"--hold-s must be in (0, 3600], got {args.hold_s}")
        app = build_service_app(args.service, state, args.broker, hold_s=args.hold_s,
                                simulate_durations=args.simulate_durations)
        return _serve(app, args.service, state_dir, args.port, tuple(args.host or ("127.0.0.1",)))
    finally:
        state.close()


# ------------------------------------------------------------------------------------------------
# the client side: the fleet
# ------------------------------------------------------------------------------------------------


class LiveFleet:
    """The broker and every tool service as processes on loopback, behind the fleet facade of
    :class:`~kernel_lib.sim.services.TwinFleet` (see the module docstring).

    Args:
        state_dir: the fleet's directory (``<state_dir>/<service>/state.sqlite`` and ``ready.json``
            per process, ``fleet.json``); reused when it holds a stopped fleet's state.
        check_leases: start the broker and make every service introspect each request's lease.
        client_timeout_s: how long a ``/call`` waits for its answer before ``TimeoutError``.
        hold_s: how long an injected timeout holds its answer at the service.
        start_timeout_s: how long to wait for every ``ready.json``.

    ``start_s`` is the measured wall time from the first spawn to the last ready file.

    Raises:
        ServiceError: a process exited or did not report in time (the others are stopped).
    """

    def __init__(self, state_dir: str | os.PathLike, *, check_leases: bool = True, client_timeout_s: float = 2.0,
                 hold_s: float = 30.0, start_timeout_s: float = 60.0, simulate_durations: bool = False,
                 _attach: bool = False):
        import httpx

        from kernel_lib.sim.services import SERVICES

        self.state_dir = Path(state_dir)
        self.clock = WallClock()
        self.client_timeout_s = float(client_timeout_s)
        self.hold_s = float(hold_s)
        self.simulate_durations = simulate_durations
        self._procs: dict[str, subprocess.Popen] = {}
        self._ready: dict[str, dict[str, Any]] = {}
        # no kept-alive connections: a connection pooled to a process that was killed and restarted
        # would fail the next request as if the new process were down (a loopback connect is cheap)
        self._http = httpx.Client(timeout=10.0, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))
        self.owner = not _attach
        self.start_s: float | None = None
        if _attach:
            meta = json.loads((self.state_dir / FLEET_FILE).read_text())
            self.check_leases = bool(meta["check_leases"])
            self._services = tuple(meta["services"])
            for name in self._names():
                self._ready[name] = self._read_ready(name)
            return
        self.check_leases = check_leases
        self._services = tuple(SERVICES)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        try:
            if check_leases:   # the broker's port is chosen first, so every process starts at once
                port = free_port()
                self._ready[BROKER] = {"url": f"http://127.0.0.1:{port}", "port": port}
                self._spawn(BROKER, port)
            for name in self._services:   # in parallel: each imports while the others do
                self._spawn(name)
            if check_leases:
                self._ready[BROKER] = self._wait_ready(BROKER, start_timeout_s)
                if self._ready[BROKER]["port"] != port:   # the port was taken meanwhile: tell the services
                    for name in self._services:
                        kill_group(self._procs[name])
                        self._spawn(name)
            for name in self._services:
                self._ready[name] = self._wait_ready(name, start_timeout_s)
        except BaseException:
            self.close()
            raise
        self.start_s = round(time.monotonic() - t0, 3)
        write_text_atomic(self.state_dir / FLEET_FILE, json.dumps({
            "owner_pid": os.getpid(), "services": list(self._services), "check_leases": check_leases,
            "client_timeout_s": self.client_timeout_s, "start_s": self.start_s}))

    @classmethod
    def attach(cls, state_dir: str | os.PathLike, *, client_timeout_s: float = 2.0) -> "LiveFleet":
        """A handle on the running fleet in ``state_dir`` (from another process): reads its ready
        files; :meth:`close` stops nothing. Raises ServiceError when no fleet was started there."""
        path = Path(state_dir) / FLEET_FILE
        if not path.is_file():
            raise ServiceError(f"no live fleet in {state_dir} (no {FLEET_FILE})")
        return cls(state_dir, client_timeout_s=client_timeout_s, _attach=True)

    # --- processes -------------------------------------------------------------------------------
    def _names(self) -> tuple[str, ...]:
        return ((BROKER,) if self.check_leases else ()) + self._services

    def _dir(self, name: str) -> Path:
        return self.state_dir / name

    def _read_ready(self, name: str) -> dict[str, Any]:
        try:
            return json.loads((self._dir(name) / READY_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise ServiceError(f"{name}: no ready file in {self._dir(name)}: {exc}") from None

    def _spawn(self, name: str, port: int = 0) -> None:
        d = self._dir(name)
        d.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            (d / READY_FILE).unlink()
        cmd = [sys.executable, "-m", "kernel_lib.live.services"]
        if name == BROKER:
            cmd += ["broker"]
        else:
            cmd += ["serve", "--service", name, "--hold-s", str(self.hold_s)]
            if self.check_leases:
                cmd += ["--broker", self._ready[BROKER]["url"]]
            if self.simulate_durations:
                cmd += ["--simulate-durations"]
        cmd += ["--state-dir", str(d), "--port", str(port)]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
        if self.owner:
            env.update(parent_env())   # the services stop when the fleet's owner dies
        else:
            env.pop("KERNEL_LIB_LIVE_PARENT", None)
        with open(d / "service.log", "ab") as log:
            self._procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 start_new_session=True, env=env)

    def _wait_ready(self, name: str, timeout_s: float) -> dict[str, Any]:
        path, proc = self._dir(name) / READY_FILE, self._procs[name]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists():
                with contextlib.suppress(ValueError, OSError):
                    return json.loads(path.read_text())
            if proc.poll() is not None:
                tail = (self._dir(name) / "service.log").read_text(errors="replace")[-600:]
                raise ServiceError(f"{name} exited with code {proc.returncode} before it was ready: {tail.strip()}")
            time.sleep(0.01)
        raise ServiceError(f"{name} did not report ready within {timeout_s:g} s")

    def pid(self, service: str) -> int:
        """The pid of the process serving ``service`` (or the broker)."""
        self._check(service, broker_ok=True)
        return int(self._ready[service]["pid"])

    def url(self, service: str) -> str:
        self._check(service, broker_ok=True)
        return self._ready[service]["url"]

    def _check(self, service: str, *, broker_ok: bool = False) -> None:
        if service not in self._services and not (broker_ok and service == BROKER and self.check_leases):
            raise ServiceError(f"unknown service {service!r} (known: {', '.join(self._services)})")

    # --- HTTP ------------------------------------------------------------------------------------
    def _request(self, service: str, method: str, path: str, *, timeout_s: float | None = None,
                 **kw: Any) -> Any:
        import httpx

        for fresh in (False, True):
            url = self._ready[service]["url"]
            try:
                r = self._http.request(method, url + path, timeout=timeout_s or 10.0, **kw)
            except httpx.TimeoutException as exc:
                raise TimeoutError(f"{service} {method} {path}: no answer within "
                                   f"{timeout_s or 10.0:g} s") from exc
            except httpx.TransportError as exc:
                if not fresh and not self.owner:   # another process may have restarted it elsewhere
                    with contextlib.suppress(ServiceError):
                        self._ready[service] = self._read_ready(service)
                        continue
                raise ServiceDownError(f"service {service} is down ({type(exc).__name__}: {exc})") from None
            return r
        raise AssertionError("unreachable")

    def _get(self, service: str, path: str) -> Any:
        return self._request(service, "GET", path).json()

    def call(self, action: str, arguments: dict[str, Any], operation_id: str, idempotency_key: str | None,
             token: str | None) -> tuple[int, dict[str, Any]]:
        """One request to the service that offers ``action``: ``(http_status, body)``. Raises
        ``TimeoutError`` (no answer within ``client_timeout_s``) or ServiceDownError."""
        service = self._service_of(action)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        r = self._request(service, "POST", "/call", timeout_s=self.client_timeout_s, headers=headers,
                          json={"action": action, "arguments": arguments, "operation_id": operation_id,
                                "idempotency_key": idempotency_key})
        return r.status_code, r.json()

    def _service_of(self, tool: str) -> str:
        from kernel_lib.sim.services import ACTIONS

        a = ACTIONS.get(tool)
        if a is None or a.service not in self._services:
            raise ServiceError(f"no service offers {tool!r}")
        return a.service

    # --- the fleet facade (the same methods as TwinFleet) ------------------------------------------
    @property
    def services(self) -> tuple[str, ...]:
        """The service names, in the order of :data:`~kernel_lib.sim.services.SERVICES`."""
        return self._services

    def client(self, trajectory_id: str, *, ttl_s: float = 3600.0) -> "LiveEndpoints":
        """The endpoints one trajectory's runner uses, with a fresh capability lease from the broker."""
        token = None
        if self.check_leases:
            r = self._request(BROKER, "POST", "/leases", json={"trajectory_id": trajectory_id, "ttl_s": ttl_s})
            if r.status_code != 200:
                raise ServiceError(f"the broker refused a lease: {r.json().get('error')}")
            token = r.json()["token"]
        return LiveEndpoints(self, trajectory_id, token)

    def live_resources(self) -> list[dict[str, Any]]:
        out = []
        for name in self._services:
            for rid, r in self._get(name, "/resources").items():
                out.append({"service": name, "resource_id": rid, "kind": r["kind"], "state": r["state"],
                            "operation_id": r["operation_id"]})
        return out

    def inject(self, action: str, kind: str, count: int = 1, **params: Any) -> dict[str, Any]:
        """Queue fault ``kind`` for the next ``count`` calls of ``action`` at its service (committed
        there). Raises ServiceError on a bad spec (the service's 422)."""
        r = self._request(self._service_of(action), "POST", "/faults",
                          json={"action": action, "kind": kind, "count": count, **params})
        if r.status_code != 200:
            raise ServiceError(r.json().get("error", f"fault refused ({r.status_code})"))
        return r.json()

    def clear_faults(self, service: str | None = None) -> None:
        """Drop every queued fault (of one service, or of all)."""
        for name in self._services:
            if service is None or name == service:
                self._request(name, "DELETE", "/faults")

    def taken_name(self, name: str) -> None:
        """Mark a DNS name as owned by another account: ``publish_dns`` of it answers 409."""
        self._request("dns", "POST", "/taken-names", json={"name": name})

    def crash(self, service: str) -> None:
        """Kill the service's process with a real SIGKILL (its committed state survives in its file)."""
        self._check(service, broker_ok=True)
        pid = self.pid(service)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        proc = self._procs.get(service)
        if proc is not None and proc.pid == pid:
            proc.wait(timeout=10)
        else:
            deadline = time.monotonic() + 10
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.01)

    def restart(self, service: str, *, timeout_s: float = 30.0) -> None:
        """Start a new process for ``service`` on the same state file (and, if free, the same port);
        a running one is killed first."""
        self._check(service, broker_ok=True)
        if not self.is_down(service):
            self.crash(service)
        proc = self._procs.get(service)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._spawn(service, port=int(self._ready[service]["port"]))
        self._ready[service] = self._wait_ready(service, timeout_s)

    def is_down(self, service: str) -> bool:
        """Is the service's process dead (or exited)?"""
        self._check(service, broker_ok=True)
        proc = self._procs.get(service)
        pid = int(self._ready[service]["pid"])
        if proc is not None and proc.pid == pid:
            return proc.poll() is not None
        return not pid_alive(pid)

    def resources(self, *, live_only: bool = True) -> dict[str, dict[str, dict[str, Any]]]:
        """``{service: {resource_id: {kind, state, operation_id, arguments, pivot}}}`` read from each process."""
        q = "" if live_only else "?all=1"
        return {name: self._get(name, "/resources" + q) for name in self._services}

    def audits(self) -> dict[str, list[dict[str, Any]]]:
        """``{service: [audit entry, ...]}`` read from each process."""
        return {name: self._get(name, "/audit") for name in self._services}

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{service: {received|applied|refused: {action: n}}}``, counted by the processes."""
        return {name: self._get(name, "/counts") for name in self._services}

    def invariants(self) -> dict[str, dict[str, Any]]:
        """``{service: Φ}`` (definition 0.2), computed by each process."""
        return {name: self._get(name, "/invariants") for name in self._services}

    def revoke(self, trajectory_id: str) -> list[str]:
        """Revoke every capability lease of the trajectory at the broker; the revoked lease ids."""
        if not self.check_leases:
            return []
        return list(self._request(BROKER, "POST", "/revoke", json={"trajectory_id": trajectory_id}).json()["revoked"])

    def close(self) -> None:
        """Stop the processes this fleet started (SIGTERM, then SIGKILL); an attached handle stops nothing."""
        for name, proc in list(self._procs.items()):
            if self.owner or name in self._procs:
                kill_group(proc, signal.SIGTERM, wait_s=5.0)
        self._procs.clear()
        self._http.close()

    def __enter__(self) -> "LiveFleet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LiveEndpoints:
    """One trajectory's view of a :class:`LiveFleet` (the runner's
    :class:`~kernel_lib.recovery.runner.Endpoints`): every call presents its lease token."""

    def __init__(self, fleet: LiveFleet, trajectory_id: str, token: str | None):
        self.fleet, self.trajectory_id, self.token = fleet, trajectory_id, token

    def call(self, action: str, arguments: dict[str, Any], operation_id: str,
             idempotency_key: str | None) -> tuple[int, dict[str, Any]]:
        """One raw request: ``(http_status, body)`` (TimeoutError, ServiceDownError)."""
        return self.fleet.call(action, arguments, operation_id, idempotency_key, self.token)

    def send(self, intent: Any) -> Any:
        from kernel_lib.sim.services import reply_from_answer

        status, body = self.call(intent.tool, dict(intent.arguments), intent.operation_id, intent.idempotency_key)
        return reply_from_answer(status, body)

    def lookup(self, tool: str, operation_id: str) -> dict[str, Any]:
        return self.fleet._get(self.fleet._service_of(tool), f"/operations/{operation_id}")

    def live_resources(self) -> list[dict[str, Any]]:
        return self.fleet.live_resources()

    def revoke(self, trajectory_id: str) -> list[str]:
        return self.fleet.revoke(trajectory_id)


if __name__ == "__main__":
    sys.exit(main())
