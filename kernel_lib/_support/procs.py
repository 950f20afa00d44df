"""Process and port utilities shared by the live substrate, the etcd cluster and the reference
index (stdlib only): is a pid alive, what state is it in, kill a process group and reap it, does a
loopback port accept connections, pick a free loopback port.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["pid_alive", "process_state", "wait_all_threads_stopped", "kill_group", "port_accepts", "free_port",
           "ephemeral_port_range"]


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists on this host and has not exited (signal 0 probe;
    an exited child not yet reaped, a zombie, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def process_state(pid: int) -> str | None:
    """The one-letter state of process ``pid`` from ``/proc`` (``T``: stopped, ``S``: sleeping,
    ``R``: running, ``Z``: zombie), or None when it cannot be read."""
    return process_state_path(f"/proc/{pid}/stat")


def wait_all_threads_stopped(pid: int, timeout_s: float = 2.0) -> bool:
    """After a SIGSTOP: wait until every thread of ``pid`` shows the stopped state (``T``) in
    ``/proc/PID/task/*/stat`` and return True, or False after ``timeout_s`` seconds (or if the
    process is gone). ``kill`` returns once the signal is queued, while threads running on another
    CPU may still finish what they were doing (an etcd member could still answer one message)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return False
        states = [process_state_path(f"/proc/{pid}/task/{t}/stat") for t in tasks]
        if states and all(st in ("T", "t") for st in states):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)


def process_state_path(stat_path: str) -> str | None:
    """The one-letter state in a ``/proc/.../stat`` file, or None when it cannot be read."""
    try:
        text = Path(stat_path).read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()[0] if ")" in text else None


def kill_group(proc: subprocess.Popen | None, sig: int = signal.SIGKILL, wait_s: float = 10.0) -> None:
    """Send ``sig`` to the process group of ``proc`` (started in its own session) and reap it;
    SIGKILL the group if it has not exited within ``wait_s`` seconds, and any stragglers after."""
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=wait_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):   # stragglers left in the group
        os.killpg(proc.pid, signal.SIGKILL)


def port_accepts(port: int, timeout_s: float = 0.5) -> bool:
    """Does 127.0.0.1:``port`` accept a TCP connection?"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(("127.0.0.1", port))
            return True
        except OSError:
            return False


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (``/proc/sys/net/ipv4/ip_local_port_range``)."""
    try:
        lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


_PORT_RNG = random.Random()


def free_port(taken: "set[int] | None" = None) -> int:
    """A loopback port that binds now, chosen BELOW the kernel's ephemeral range: the port is
    released before the server binds it, and a port from the ephemeral range could meanwhile be
    handed to some outgoing connection (then the server fails with 'address already in use')."""
    lo, _hi = ephemeral_port_range()
    taken = taken or set()
    for _ in range(200):
        port = _PORT_RNG.randrange(20000, max(20001, min(lo, 32768)))
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:    # fall back to any free port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
