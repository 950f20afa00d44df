"""The processes inside a quarantine sandbox (issue 19; stdlib only, so they start fast).

``python -m kernel_lib.live.quarantine_sandbox agent --counter-dir DIR [--children N] [--wait-fd FD]``
    A stand-in for an agent's process tree: it waits for one line on ``FD`` (the supervisor
    writes it once the process is in its cgroup, so every process forked afterwards is born
    inside), then forks ``N`` children, the first of which forks a grandchild, and every process
    of the tree rewrites ``DIR/counter-<pid>`` with an increasing count every ``--interval-ms``.
    A frozen tree leaves its counters where they were. Each process exits when its parent does.

``python -m kernel_lib.live.quarantine_sandbox probe --url URL [--token-file F] [--timeout-s S]``
    One tool request from wherever it runs (inside the namespace: ``ip netns exec NS ...``):
    ``POST URL/call`` with the lease read from ``F`` as a bearer token. Prints one JSON line
    ``{"answered", "status", "error", "elapsed_ms"}``; exit code 0 when the service answered
    (whatever the status), 3 when no answer came (refused, unreachable, timed out).

``python -m kernel_lib.live.quarantine_sandbox enter --wait-fd FD -- CMD ...``
    Waits for the supervisor's line, then replaces itself with ``CMD`` (a practitioner's worker
    started inside the sandbox).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

__all__ = ["main"]


def _wait(fd: int | None) -> None:
    if fd is None:
        return
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            b = f.read(1)
            if not b or b == b"\n":
                return


def _count_forever(path: str, interval_s: float, parent: int) -> None:
    n = 0
    tmp = f"{path}.tmp"
    while True:
        n += 1
        with open(tmp, "w") as f:
            f.write(str(n))
        os.replace(tmp, path)
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(interval_s)


def _agent(args: argparse.Namespace) -> int:
    _wait(args.wait_fd)
    os.makedirs(args.counter_dir, exist_ok=True)
    interval = max(args.interval_ms, 0.1) / 1000.0
    me = os.getpid()
    for i in range(args.children):
        if os.fork() == 0:
            child = os.getpid()
            if i == 0 and os.fork() == 0:   # a grandchild: the tree is deeper than one level
                _count_forever(os.path.join(args.counter_dir, f"counter-{os.getpid()}"), interval, child)
            _count_forever(os.path.join(args.counter_dir, f"counter-{child}"), interval, me)
    parent = os.getppid()
    _count_forever(os.path.join(args.counter_dir, f"counter-{me}"), interval, parent)
    return 0   # pragma: no cover - the loop never returns


def _probe(args: argparse.Namespace) -> int:
    token = ""
    if args.token_file:
        with open(args.token_file) as f:
            token = f.read().strip()
    body = json.dumps({"action": args.action, "arguments": {"name": args.branch}, "operation_id": args.operation_id,
                       "idempotency_key": args.operation_id}).encode()
    req = urllib.request.Request(args.url.rstrip("/") + "/call", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {token}"} if token else {})})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # never through a proxy
    t0 = time.perf_counter()
    out: dict = {"answered": False, "status": None, "error": None}
    try:
        with opener.open(req, timeout=args.timeout_s) as r:
            out.update(answered=True, status=r.status)
    except urllib.error.HTTPError as exc:   # an answer with an error status (401 for a revoked lease)
        out.update(answered=True, status=exc.code)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        out["error"] = f"{type(reason).__name__}: {reason}"
    out["elapsed_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    print(json.dumps(out), flush=True)
    return 0 if out["answered"] else 3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernel_lib.live.quarantine_sandbox",
                                 description="Processes inside a quarantine sandbox (issue 19).")
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("agent", help="a process tree whose every member advances a counter file")
    a.add_argument("--counter-dir", required=True)
    a.add_argument("--children", type=int, default=2)
    a.add_argument("--interval-ms", type=float, default=2.0)
    a.add_argument("--wait-fd", type=int, default=None)
    p = sub.add_parser("probe", help="one tool request; exit 0 when answered, 3 when not")
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", default=None)
    p.add_argument("--timeout-s", type=float, default=1.0)
    p.add_argument("--action", default="create_branch")
    p.add_argument("--branch", default="quarantine-probe")
    p.add_argument("--operation-id", default=None)
    e = sub.add_parser("enter", help="wait for the supervisor's line, then exec CMD")
    e.add_argument("--wait-fd", type=int, required=True)
    e.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if args.command == "agent":
        return _agent(args)
    if args.command == "probe":
        args.operation_id = args.operation_id or f"probe-{os.getpid()}-{time.monotonic_ns()}"
        return _probe(args)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("enter needs a command after --")
    _wait(args.wait_fd)
    os.execvp(cmd[0], cmd)
    return 127   # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
