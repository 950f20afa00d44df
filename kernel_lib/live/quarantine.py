"""The quarantine's thin runner: real containment primitives on this machine (Failure Recovery,
"Blast Radius Quarantine", table 12; issue 19). The decisions are pure and live in
:mod:`kernel_lib.recovery.quarantine`; this module applies them.

* :func:`probe_host` — what the machine offers (root, a writable cgroup v1 freezer or cgroup v2
  hierarchy, ``ip``/``tc`` and network namespaces), as
  :class:`~kernel_lib.recovery.quarantine.protocol.HostCapabilities`.
* Stage 1, suspension of the whole process tree: :class:`CgroupFreezer` (a child cgroup per
  trajectory; v1 ``freezer.state`` = ``FROZEN`` or v2 ``cgroup.freeze`` = 1, polled until the
  kernel reports the tree frozen) or :class:`SigstopFreezer` (``SIGSTOP`` to the process group,
  polled until every member is stopped). :func:`tree_progress` proves a tree stopped: its counter
  files stop advancing and ``/proc/<pid>/stat`` shows no member running.
* Stage 3, egress: :class:`NetnsSandbox` (a network namespace joined to the host by a veth pair on
  a private /30; cut by setting the host end down and a blackhole root qdisc on both ends, over
  netlink with pyroute2 when it is installed, else with ``ip``/``tc``), or the gateway fallback
  (:class:`~kernel_lib.recovery.quarantine.egress.EgressGuard` refuses every call).
* :class:`QuarantineSupervisor` — the four stages for one trajectory: stages 1 and 3 side by side,
  then stages 2 (revoke the leases at the broker) and 4 (the ``TrajectoryQuarantined`` tombstone
  in the log, then the taint ledger), each timed; :meth:`QuarantineSupervisor.resume` finishes a
  quarantine a crash cut short (the tombstone is the truth: revoke again, apply it again).

Every cgroup and namespace this module makes has a unique name with the prefix
:data:`NAME_PREFIX` and is removed by ``close()`` (each class is a context manager);
:func:`leftovers` lists any that remain. The demo is :mod:`kernel_lib.live.quarantine_demo`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_lib._support.procs import process_state
from kernel_lib.errors import ConfigError, ContainmentError, ContainmentUnavailableError, QuarantineIncompleteError
from kernel_lib.recovery.quarantine.protocol import HostCapabilities, MechanismChoice, QuarantineTrigger

__all__ = ["NAME_PREFIX", "probe_host", "CgroupFreezer", "SigstopFreezer", "NetnsSandbox", "GatewaySever",
           "tree_progress", "descendants_of", "leftovers", "QuarantineSupervisor", "QuarantineReport",
           "make_freezer", "spawn_in_sandbox"]

#: Prefix of every cgroup, namespace and veth this module creates (``klq``: kernel_lib quarantine).
NAME_PREFIX = "klq"
V1_FREEZER = "/sys/fs/cgroup/freezer"
#: Pause between two reads of a freezer's state: short, and it releases the GIL so the stage
#: running beside it (the egress cut) is not held up by the poll.
_POLL_S = 0.00002
_MOUNTS = "/proc/self/mounts"


def _writable_dir(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK)


def _cgroup2_mount() -> str | None:
    try:
        lines = Path(_MOUNTS).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup2":
            return parts[1]
    return None


def probe_host() -> HostCapabilities:
    """What this machine offers the quarantine (reads ``/proc/self/mounts``, ``/sys/fs/cgroup``,
    the effective uid and ``PATH``; changes nothing)."""
    notes: dict[str, str] = {}
    root = os.geteuid() == 0
    v1 = V1_FREEZER if _writable_dir(V1_FREEZER) and os.path.exists(f"{V1_FREEZER}/cgroup.procs") else None
    if v1 is None:
        notes["cgroup_v1"] = (f"{V1_FREEZER} is not mounted" if not os.path.isdir(V1_FREEZER)
                              else f"{V1_FREEZER} is not writable (not root?)")
    m2 = _cgroup2_mount()
    v2 = None
    if m2 is None:
        notes["cgroup_v2"] = "no cgroup2 hierarchy is mounted"
    elif not _writable_dir(m2):
        notes["cgroup_v2"] = f"the cgroup2 hierarchy at {m2} is not writable (not root, or not delegated)"
    elif not os.path.exists(os.path.join(m2, "cgroup.procs")):
        notes["cgroup_v2"] = f"{m2} holds no cgroup.procs"
    else:
        v2 = m2
    ip, tc = shutil.which("ip"), shutil.which("tc")
    netns = bool(root and ip and os.path.isdir("/proc/self/ns") and os.path.exists("/proc/self/ns/net"))
    if not netns:
        notes["netns"] = ("not root: network namespaces and veth pairs need CAP_NET_ADMIN" if not root
                          else "the ip command (iproute2) is not installed" if not ip
                          else "this kernel offers no network namespaces")
    if not tc:
        notes["tc"] = "the tc command is not installed: the cut sets the link down only"
    return HostCapabilities(cgroup_v1_freezer=v1, cgroup_v2=v2, netns=netns, tc=bool(tc), is_root=root, notes=notes)


def _unique(kind: str) -> str:
    return f"{NAME_PREFIX}-{kind}-{os.getpid()}-{secrets.token_hex(3)}"


def descendants_of(pid: int) -> list[int]:
    """``pid`` and every process below it (from ``/proc/<pid>/task/*/children``), parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            with contextlib.suppress(OSError, ValueError):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
    return list(dict.fromkeys(out))


def _group_members(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(name))
    return sorted(out)


def tree_progress(counter_dir: str | os.PathLike, pids: Sequence[int], *, wait_s: float = 0.3) -> dict[str, Any]:
    """Does a process tree still make progress? Reads every ``counter-*`` file of
    ``counter_dir``, waits ``wait_s`` seconds, reads them again, and reads each pid's state from
    ``/proc``. Returns ``{"advanced": {file: [before, after]}, "stopped": bool, "states": {pid:
    letter}, "counters": n}``: ``stopped`` when no counter advanced and no member is running (R)."""
    d = Path(counter_dir)

    def read() -> dict[str, int]:
        out = {}
        for f in sorted(d.glob("counter-*")):
            if f.suffix == ".tmp":
                continue
            with contextlib.suppress(OSError, ValueError):
                out[f.name] = int(f.read_text() or 0)
        return out

    before = read()
    time.sleep(wait_s)
    after = read()
    states = {p: process_state(p) for p in pids}
    advanced = {k: [before.get(k), v] for k, v in after.items() if before.get(k) != v}
    return {"advanced": advanced, "stopped": not advanced and bool(after) and all(s != "R" for s in states.values()),
            "states": {str(p): s for p, s in states.items()}, "counters": len(after)}


# ------------------------------------------------------------------------------------------------
# stage 1: suspension
# ------------------------------------------------------------------------------------------------


class CgroupFreezer:
    """A child cgroup for one trajectory, frozen and thawed as a whole (table 12 stage 1).

    ``version`` 1: ``<V1_FREEZER>/<name>``, frozen by writing ``FROZEN`` to ``freezer.state``;
    done when it reads ``FROZEN``. ``version`` 2: ``<cgroup2 mount>/<name>``, frozen by writing
    1 to ``cgroup.freeze``; done when ``cgroup.events`` says ``frozen 1``. Processes join with
    :meth:`adopt` (a pid) or :meth:`adopt_tree` (a pid and its descendants, repeated until no new
    one appears); a process forked inside stays inside.

    :meth:`close` kills whatever is left (SIGKILL, then thaw so the kill is delivered), waits for
    the cgroup to empty and removes it; it is safe to call twice.

    Raises ContainmentUnavailableError when the hierarchy is not there or not writable,
    ContainmentError when a write is refused."""

    def __init__(self, *, version: int = 1, root: str | None = None, name: str | None = None):
        if version not in (1, 2):
            raise ConfigError(f"cgroup version must be 1 or 2, got {version!r}")
        self.version = version
        base = root or (V1_FREEZER if version == 1 else _cgroup2_mount())
        if not base or not _writable_dir(base):
            raise ContainmentUnavailableError(f"no writable cgroup v{version} hierarchy ({base or 'not mounted'})",
                                              stage="suspend", mechanism="cgroup_freezer",
                                              reason="not mounted or not writable")
        self.name = name or _unique("cg")
        self.path = Path(base) / self.name
        try:
            self.path.mkdir()
        except OSError as exc:
            raise ContainmentError(f"cannot create cgroup {self.path}: {exc.strerror or exc}", stage="suspend",
                                   mechanism="cgroup_freezer") from None
        self.closed = False

    @property
    def procs_file(self) -> str:
        return str(self.path / "cgroup.procs")

    def _write(self, file: str, text: str) -> None:
        try:
            with open(self.path / file, "w") as f:
                f.write(text)
        except OSError as exc:
            raise ContainmentError(f"cannot write {text!r} to {self.path / file}: {exc.strerror or exc}",
                                   stage="suspend", mechanism="cgroup_freezer") from None

    def adopt(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the cgroup."""
        self._write("cgroup.procs", str(pid))

    def adopt_tree(self, pid: int, *, rounds: int = 5) -> list[int]:
        """Move ``pid`` and its descendants in (children forked meanwhile are caught by the next
        round). Returns the pids moved."""
        moved: list[int] = []
        for _ in range(rounds):
            fresh = [p for p in descendants_of(pid) if p not in moved]
            if not fresh:
                break
            for p in fresh:
                with contextlib.suppress(ContainmentError):   # a process that exited meanwhile
                    self.adopt(p)
                    moved.append(p)
        return moved

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def is_frozen(self) -> bool:
        if self.version == 1:
            return (self.path / "freezer.state").read_text().strip() == "FROZEN"
        return "frozen 1" in (self.path / "cgroup.events").read_text().splitlines()

    def freeze(self, *, timeout_s: float = 5.0) -> float:
        """Freeze every process of the cgroup; returns the milliseconds from the write to the
        kernel reporting the whole cgroup frozen. Raises ContainmentError past ``timeout_s``."""
        t0 = time.perf_counter()
        self._write("freezer.state" if self.version == 1 else "cgroup.freeze", "FROZEN" if self.version == 1 else "1")
        deadline = t0 + timeout_s
        while not self.is_frozen():
            if time.perf_counter() > deadline:
                raise ContainmentError(f"cgroup {self.path} did not report frozen within {timeout_s:g} s",
                                       stage="suspend", mechanism="cgroup_freezer")
            time.sleep(_POLL_S)   # let the other stage's thread run (the GIL)
        return (time.perf_counter() - t0) * 1000.0

    def thaw(self) -> None:
        self._write("freezer.state" if self.version == 1 else "cgroup.freeze", "THAWED" if self.version == 1 else "0")

    def kill(self, *, timeout_s: float = 10.0) -> None:
        """SIGKILL every process of the cgroup and wait until it is empty (a frozen v1 task
        dies only once thawed, so the cgroup is thawed after the signal)."""
        deadline = time.monotonic() + timeout_s
        while True:
            pids = self.pids()
            if not pids:
                return
            if self.version == 2 and (self.path / "cgroup.kill").exists():
                with contextlib.suppress(ContainmentError):
                    self._write("cgroup.kill", "1")
            for p in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p, signal.SIGKILL)
            with contextlib.suppress(ContainmentError, OSError):
                self.thaw()
            if time.monotonic() > deadline:
                raise ContainmentError(f"cgroup {self.path} still holds {pids} after SIGKILL", stage="suspend",
                                       mechanism="cgroup_freezer")
            time.sleep(0.01)

    def close(self) -> None:
        """Kill what is left and remove the cgroup (idempotent)."""
        if self.closed:
            return
        try:
            if self.path.exists():
                self.kill()
                deadline = time.monotonic() + 10.0
                while True:
                    try:
                        self.path.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:   # EBUSY while the last task is being reaped
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.01)
        finally:
            self.closed = True

    @property
    def mechanism(self) -> str:
        return "cgroup_freezer"

    def __enter__(self) -> "CgroupFreezer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SigstopFreezer:
    """``SIGSTOP`` to a process group (table 12 stage 1's fallback): every member of ``pgid``
    (a session leader's pid when the tree was started with ``start_new_session``) stops; a
    member that left the group (``setsid``) escapes, which is why the cgroup is preferred."""

    mechanism = "sigstop"

    def __init__(self, pgid: int):
        if type(pgid) is not int or pgid <= 1:
            raise ConfigError(f"pgid must be a process group id > 1, got {pgid!r}")
        self.pgid = pgid
        self.closed = False

    def pids(self) -> list[int]:
        return _group_members(self.pgid)

    def is_frozen(self) -> bool:
        members = self.pids()
        return bool(members) and all(process_state(p) in ("T", "t", None) for p in members)

    def freeze(self, *, timeout_s: float = 5.0) -> float:
        """Stop the group; returns the ms until every member shows state ``T``."""
        t0 = time.perf_counter()
        try:
            os.killpg(self.pgid, signal.SIGSTOP)
        except ProcessLookupError:
            raise ContainmentError(f"process group {self.pgid} is gone", stage="suspend", mechanism="sigstop") from None
        deadline = t0 + timeout_s
        while not self.is_frozen():
            if time.perf_counter() > deadline:
                raise ContainmentError(f"process group {self.pgid} did not stop within {timeout_s:g} s",
                                       stage="suspend", mechanism="sigstop")
            time.sleep(_POLL_S)
        return (time.perf_counter() - t0) * 1000.0

    def thaw(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGCONT)

    def kill(self, *, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise ContainmentError(f"process group {self.pgid} survives SIGKILL", stage="suspend",
                                       mechanism="sigstop")
            time.sleep(0.01)

    def close(self) -> None:
        if not self.closed:
            self.kill()
            self.closed = True

    def __enter__(self) -> "SigstopFreezer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def make_freezer(choice: MechanismChoice) -> CgroupFreezer | None:
    """The cgroup for ``choice`` (None with SIGSTOP: the group is known only once the tree runs)."""
    if choice.suspend == "cgroup_freezer":
        return CgroupFreezer(version=choice.cgroup_version or 1)
    return None


# ------------------------------------------------------------------------------------------------
# stage 3: egress
# ------------------------------------------------------------------------------------------------


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise ContainmentError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[:300]}",
                               stage="sever", mechanism="netns")
    return proc


def _used_networks() -> list[ipaddress.IPv4Network]:
    proc = _run("ip", "-4", "-o", "addr", "show", check=False)
    nets = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            with contextlib.suppress(ValueError, IndexError):
                nets.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    return nets


class NetnsSandbox:
    """A network namespace joined to the host by a veth pair on a private /30 (table 12 stage 3).

    The host end (``host_if``) holds ``host_ip`` (a tool service listens there), the namespace
    end (``ns_if``) holds ``ns_ip``; nothing else is routed. :meth:`command` prefixes a command
    so it runs inside (``ip netns exec``). :meth:`cut` severs egress: the host end set down
    (measured as ``egress_cut_ms``: from then on no frame crosses the pair), then a blackhole
    root qdisc on the host end and on the namespace end (the chapter's ``tc qdisc replace ...
    root blackhole``), over netlink with pyroute2 when installed, else with ``ip``/``tc``.
    :meth:`close` deletes the pair and the namespace (idempotent).

    Raises ContainmentUnavailableError when not root or ``ip`` is missing, ContainmentError when
    a step fails (what was made so far is removed)."""

    def __init__(self, *, subnet: str | None = None, name: str | None = None):
        if os.geteuid() != 0 or not shutil.which("ip"):
            raise ContainmentUnavailableError("network namespaces need root and the ip command", stage="sever",
                                              mechanism="netns", reason="not root or no ip command")
        token = secrets.token_hex(3)
        self.name = name or f"{NAME_PREFIX}-ns-{os.getpid()}-{token}"
        self.host_if, self.ns_if = f"{NAME_PREFIX}{token}h", f"{NAME_PREFIX}{token}n"
        self.subnet = ipaddress.ip_network(subnet) if subnet else self._free_subnet()
        if self.subnet.prefixlen != 30:
            raise ConfigError(f"the sandbox subnet must be a /30, got {self.subnet}")
        hosts = list(self.subnet.hosts())
        self.host_ip, self.ns_ip = str(hosts[0]), str(hosts[1])
        self.closed = False
        self.cut_done = False
        self._ipr: Any = None
        self._nsr: Any = None
        self._idx = self._ns_idx = 0
        try:
            _run("ip", "netns", "add", self.name)
            _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _run("ip", "link", "set", self.ns_if, "netns", self.name)
            _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _run("ip", "link", "set", self.host_if, "up")
            _run("ip", "-n", self.name, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
            _run("ip", "-n", self.name, "link", "set", self.ns_if, "up")
            _run("ip", "-n", self.name, "link", "set", "lo", "up")
            self._netlink()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _free_subnet() -> ipaddress.IPv4Network:
        used = _used_networks()
        rng = secrets.SystemRandom()
        for _ in range(200):
            net = ipaddress.ip_network(f"10.213.{rng.randrange(256)}.{rng.randrange(64) * 4}/30")
            if not any(net.overlaps(u) for u in used):
                return net
        raise ContainmentError("no free /30 in 10.213.0.0/16 for the sandbox", stage="sever", mechanism="netns")

    def command(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *cmd]

    def _netlink(self) -> Any:
        """An open pyroute2 netlink socket and the host end's index, made once before any cut (so
        the cut itself is one netlink message); None without pyroute2."""
        if self._ipr is None:
            try:
                from pyroute2 import IPRoute, NetNS
            except ImportError:   # pragma: no cover - pyroute2 is a dependency of the live extra
                return None
            ipr = IPRoute()
            idx = ipr.link_lookup(ifname=self.host_if)
            if not idx:
                ipr.close()
                raise ContainmentError(f"{self.host_if} is gone", stage="sever", mechanism="netns")
            self._ipr, self._idx = ipr, idx[0]
            with contextlib.suppress(Exception):   # without it, the namespace end's qdisc is set with tc
                nsr = NetNS(self.name)
                self._nsr, self._ns_idx = nsr, nsr.link_lookup(ifname=self.ns_if)[0]
        return self._ipr

    def cut(self) -> dict[str, Any]:
        """Sever egress; returns ``{"egress_cut_ms", "blackhole_ms", "steps", "netlink"}``:
        ``egress_cut_ms`` until the host end is down, ``blackhole_ms`` until both qdiscs are in
        place, from the same start."""
        ipr = self._netlink()
        steps: list[str] = []
        t0 = time.perf_counter()
        if ipr is not None:
            ipr.link("set", index=self._idx, state="down")
            t_down = time.perf_counter()
            steps.append(f"netlink: {self.host_if} down")
            with contextlib.suppress(Exception):   # the down link already drops; the qdisc is a second wall
                ipr.tc("replace", "blackhole", self._idx)
                steps.append(f"netlink: blackhole root qdisc on {self.host_if}")
        else:   # pragma: no cover
            _run("ip", "link", "set", "dev", self.host_if, "down")
            t_down = time.perf_counter()
            steps.append(f"ip: {self.host_if} down")
            if shutil.which("tc"):
                _run("tc", "qdisc", "replace", "dev", self.host_if, "root", "blackhole")
                steps.append(f"tc: blackhole root qdisc on {self.host_if}")
        done = False
        if self._nsr is not None:
            with contextlib.suppress(Exception):
                self._nsr.tc("replace", "blackhole", self._ns_idx)
                steps.append(f"netlink: blackhole root qdisc on {self.ns_if} (in {self.name})")
                done = True
        if not done and shutil.which("tc"):
            _run("tc", "-n", self.name, "qdisc", "replace", "dev", self.ns_if, "root", "blackhole")
            steps.append(f"tc: blackhole root qdisc on {self.ns_if} (in {self.name})")
        t_end = time.perf_counter()
        self.cut_done = True
        return {"egress_cut_ms": (t_down - t0) * 1000.0, "blackhole_ms": (t_end - t0) * 1000.0, "steps": steps,
                "netlink": ipr is not None}

    def qdiscs(self) -> dict[str, str]:
        """The root qdisc lines of both ends (``tc qdisc show``), for the record."""
        out = {}
        if shutil.which("tc"):
            out[self.host_if] = _run("tc", "qdisc", "show", "dev", self.host_if, check=False).stdout.strip()
            out[self.ns_if] = _run("tc", "-n", self.name, "qdisc", "show", "dev", self.ns_if,
                                   check=False).stdout.strip()
        return out

    def close(self) -> None:
        """Delete the veth pair and the namespace (idempotent; processes still inside lose their
        network, they are not killed: kill them first)."""
        if self.closed:
            return
        self.closed = True
        for handle in (self._nsr, self._ipr):
            if handle is not None:
                with contextlib.suppress(Exception):
                    handle.close()
        _run("ip", "link", "del", self.host_if, check=False)
        _run("ip", "netns", "del", self.name, check=False)

    def exists(self) -> bool:
        names = _run("ip", "netns", "list", check=False).stdout.split()
        return self.name in names or Path(f"/sys/class/net/{self.host_if}").exists()

    def __enter__(self) -> "NetnsSandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class GatewaySever:
    """Stage 3's fallback: the gateway's :class:`~kernel_lib.recovery.quarantine.egress.EgressGuard`
    refuses every later call of the trajectory (no namespace to cut)."""

    mechanism = "gateway"

    def __init__(self, guard: Any, trajectory_id: str):
        self.guard, self.trajectory_id = guard, trajectory_id

    def cut(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.guard.sever(self.trajectory_id)
        ms = (time.perf_counter() - t0) * 1000.0
        return {"egress_cut_ms": ms, "blackhole_ms": ms, "steps": [f"gateway: every call of {self.trajectory_id} "
                                                                    "refused"], "netlink": False}


def leftovers(prefix: str = NAME_PREFIX, *, pid: int | None = None,
              names: Collection[str] | None = None) -> dict[str, list[str]]:
    """Cgroups, namespaces and veth links with ``prefix`` that still exist (``pid``: only those
    made by that process, whose names carry it; ``names``: only those with one of these names,
    e.g. one run's own cgroup, namespace and veth ends, so two runs in one process do not count
    each other's)."""
    tag = f"-{pid}-" if pid is not None else ""
    only = None if names is None else frozenset(names)

    def mine(n: str) -> bool:
        return n.startswith(prefix) and (not tag or tag in n) and (only is None or n in only)

    out: dict[str, list[str]] = {"cgroups": [], "netns": [], "links": []}
    for base in (V1_FREEZER, _cgroup2_mount()):
        if base and os.path.isdir(base):
            out["cgroups"] += [os.path.join(base, n) for n in os.listdir(base) if mine(n)]
    if shutil.which("ip"):
        out["netns"] = [n for n in _run("ip", "netns", "list", check=False).stdout.split() if mine(n)]
    with contextlib.suppress(OSError):
        links = [n for n in os.listdir("/sys/class/net") if n.startswith(prefix) and (only is None or n in only)]
        # a veth's name carries no pid: with ``pid`` given, only those of a namespace of that pid
        if pid is not None and only is None:
            links = [n for n in links if any(n[len(prefix):len(prefix) + 6] in ns for ns in out["netns"])]
        out["links"] = links
    return out


def spawn_in_sandbox(cmd: Sequence[str], *, freezer: CgroupFreezer | None = None, netns: NetnsSandbox | None = None,
                     env: dict[str, str] | None = None, log_path: str | os.PathLike | None = None
                     ) -> subprocess.Popen:
    """Start ``cmd`` as the root of a new process tree (its own session and process group),
    inside ``netns`` when given, and move it into ``freezer`` before it runs anything: ``cmd``
    must take ``--wait-fd FD`` (as :mod:`kernel_lib.live.quarantine_sandbox` ``agent`` and
    ``enter`` do) and wait for the line the supervisor writes there once the process is in its
    cgroup, so every process it forks is born inside. Raises ContainmentError when the process
    could not be moved (it is killed)."""
    r, w = os.pipe()
    full = [*cmd, "--wait-fd", str(r)]
    if netns is not None:
        full = netns.command(full)
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(full, pass_fds=(r,), start_new_session=True, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    finally:
        os.close(r)
        if log_path:
            out.close()
    try:
        if freezer is not None:
            freezer.adopt(proc.pid)   # `ip netns exec` replaces itself with cmd: the pid is cmd's
        os.write(w, b"go\n")
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        raise
    finally:
        os.close(w)
    return proc


# ------------------------------------------------------------------------------------------------
# the supervisor: the four stages
# ------------------------------------------------------------------------------------------------


@dataclass
class QuarantineReport:
    """What :meth:`QuarantineSupervisor.quarantine` did. ``stage_ms``: each stage's own duration;
    ``at_ms``: when each stage was done, from the trigger's check (t = 0 at the start of the
    check: its start plus its own duration); ``started_ms``: when each stage started, from the same
    origin; ``mechanisms``: the primitive of each stage; ``details``: per stage, what it returned
    (the cut's steps, the revoked leases, the artifacts tainted...); ``errors``: a stage that
    failed (the others still ran)."""

    quarantine_id: str
    trajectory_id: str
    taint_from_sequence: int
    stage_ms: dict[str, float] = field(default_factory=dict)
    at_ms: dict[str, float] = field(default_factory=dict)
    started_ms: dict[str, float] = field(default_factory=dict)
    mechanisms: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"quarantine_id": self.quarantine_id, "trajectory_id": self.trajectory_id,
                "taint_from_sequence": self.taint_from_sequence,
                "stage_ms": {k: round(v, 3) for k, v in self.stage_ms.items()},
                "at_ms": {k: round(v, 3) for k, v in self.at_ms.items()},
                "started_ms": {k: round(v, 3) for k, v in self.started_ms.items()}, "mechanisms": dict(self.mechanisms),
                "details": self.details, "errors": dict(self.errors)}


class QuarantineSupervisor:
    """Runs table 12 for one trajectory (module docstring).

    Args:
        gate: the trajectory's :class:`~kernel_lib.gate.dispatch.DispatchGate` (the tombstone is
            appended through it); None: no log (the report only).
        freezer: a :class:`CgroupFreezer` or :class:`SigstopFreezer` holding the trajectory's tree
            (None: stage 1 skipped, reported ``none``).
        sever: a :class:`NetnsSandbox` or :class:`GatewaySever` (None: stage 3 skipped).
        revoke: revokes the trajectory's leases at the broker (``trajectory_id -> [lease ids]``).
        ledger: the :class:`~kernel_lib.recovery.quarantine.ledger.TaintLedger` (None: no taint ledger).
        guard: an :class:`~kernel_lib.recovery.quarantine.egress.EgressGuard` severed as well
            whatever ``sever`` is (defence in depth: the gateway refuses the trajectory too).
        clock: seconds, monotonic (default ``time.perf_counter``).
        freeze_timeout_s: how long stage 1 waits for the kernel to report the tree frozen (s);
            past it the stage fails (reported, never a hang).

    Raises ConfigError for a revoke that is not callable or a freeze timeout that is not a
    positive finite number."""

    def __init__(self, *, gate: Any = None, freezer: Any = None, sever: Any = None,
                 revoke: Callable[[str], list[str]] | None = None, ledger: Any = None, guard: Any = None,
                 clock: Callable[[], float] = time.perf_counter, freeze_timeout_s: float = 5.0):
        if isinstance(freeze_timeout_s, bool) or not isinstance(freeze_timeout_s, (int, float)) \
                or not 0 < freeze_timeout_s < float("inf"):
            raise ConfigError(f"freeze_timeout_s must be a positive finite number of seconds, got {freeze_timeout_s!r}")
        self.freeze_timeout_s = float(freeze_timeout_s)
        if revoke is not None and not callable(revoke):
            raise ConfigError(f"revoke must be callable (trajectory id -> lease ids), got {type(revoke).__name__}")
        self.gate, self.freezer, self.sever_ = gate, freezer, sever
        self.revoke = revoke or (lambda trajectory_id: [])
        self.ledger, self.guard, self.clock = ledger, guard, clock

    def _stage(self, report: QuarantineReport, name: str, t0: float, fn: Callable[[], Any]) -> None:
        start = self.clock()
        report.started_ms[name] = (start - t0) * 1000.0
        try:
            out = fn()
        except BaseException as exc:   # recorded; the other stages still run
            report.errors[name] = f"{type(exc).__name__}: {exc}"
            out = None
        end = self.clock()
        # a stage that reports when its guarantee held (the tree frozen, the link down) is done then;
        # what it does afterwards (the blackhole qdiscs) is a second wall, timed in its details
        report.stage_ms.setdefault(name, (end - start) * 1000.0)
        report.at_ms[name] = report.started_ms[name] + report.stage_ms[name]
        if out is not None:
            report.details[name] = out

    def _wave(self, report: QuarantineReport, t0: float, stages: list[tuple[str, Callable[[], Any]]]) -> None:
        threads = [threading.Thread(target=self._stage, args=(report, n, t0, fn), name=f"quarantine-{n}")
                   for n, fn in stages[1:]]
        for t in threads:
            t.start()
        self._stage(report, stages[0][0], t0, stages[0][1])   # the first in this thread: no start-up delay
        for t in threads:
            t.join()

    def quarantine(self, trigger: QuarantineTrigger, *, taint_from_sequence: int, t0: float | None = None,
                   quarantine_id: str | None = None, reason: str = "") -> QuarantineReport:
        """Contain ``trigger.trajectory_id``: stages 1 (suspend) and 3 (sever) side by side, then
        2 (revoke) and 4 (tombstone + ledger) side by side. ``t0``: the clock reading at the
        start of the policy check (default: now), so ``at_ms`` counts from the trigger.

        A failing stage is recorded in ``errors`` and the others still run; the tombstone is
        written whatever happened (it names the mechanisms that were applied). Then, when any
        stage failed, raises :class:`~kernel_lib.errors.QuarantineIncompleteError` naming the
        first failed stage, with the report attached (``.report``)."""
        t0 = self.clock() if t0 is None else t0
        tid = trigger.trajectory_id
        qid = quarantine_id or f"q-{tid}-{secrets.token_hex(4)}"
        report = QuarantineReport(qid, tid, taint_from_sequence)
        report.mechanisms["suspend"] = getattr(self.freezer, "mechanism", "none")
        report.mechanisms["sever"] = getattr(self.sever_, "mechanism", "netns" if isinstance(self.sever_, NetnsSandbox)
                                             else "gateway" if self.guard is not None else "none")
        if isinstance(self.freezer, CgroupFreezer):
            report.details["cgroup"] = {"version": self.freezer.version, "path": str(self.freezer.path)}

        def suspend() -> dict[str, Any]:
            if self.freezer is None:
                return {"skipped": "no freezer"}
            ms = self.freezer.freeze(timeout_s=self.freeze_timeout_s)
            report.stage_ms["suspend"] = ms   # the kernel's own transition, from the write to frozen
            return {"freeze_ms": ms, "pids": self.freezer.pids()}

        def sever() -> dict[str, Any]:
            out: dict[str, Any] = {}
            if self.guard is not None:
                self.guard.sever(tid)
                out["gateway"] = "every later call of the trajectory is refused"
            if self.sever_ is not None:
                cut = self.sever_.cut()
                report.stage_ms["sever"] = cut["egress_cut_ms"]
                out.update(cut)
            return out

        def revoke() -> dict[str, Any]:
            return {"revoked_leases": list(self.revoke(tid))}

        def taint() -> dict[str, Any]:
            return self._taint(trigger, qid, taint_from_sequence, report, reason)

        self._wave(report, t0, [("suspend", suspend), ("sever", sever)])
        self._wave(report, t0, [("revoke", revoke), ("taint", taint)])
        if report.errors:
            failed = "; ".join(f"{k}: {v}" for k, v in report.errors.items())
            raise QuarantineIncompleteError(f"quarantine {qid} of {tid} is incomplete ({failed})",
                                            failed_stages=report.errors, report=report)
        return report

    def _taint(self, trigger: QuarantineTrigger, qid: str, taint_from: int, report: QuarantineReport,
               reason: str) -> dict[str, Any]:
        from kernel_lib.recovery.quarantine.protocol import tombstone

        out: dict[str, Any] = {}
        covered: list[str] = []
        if self.ledger is not None:
            from kernel_lib.recovery.quarantine.taint import produced_since
            covered = produced_since(self.ledger.artifacts().values(), trigger.trajectory_id, taint_from)
        if self.gate is not None:
            payload = tombstone(trigger, quarantine_id=qid, taint_from_sequence=taint_from,
                                mechanisms=report.mechanisms, stage_ms=dict(report.stage_ms),
                                tainted_artifacts=covered, reason=reason)
            ev = self.gate.append(payload)[-1]
            out["tombstone_sequence"] = ev.sequence_number
            out["tombstone_digest"] = ev.digest
        if self.ledger is not None:
            applied = self.ledger.apply_tombstone(trigger.trajectory_id, qid, taint_from)
            out["ledger"] = applied.to_json()
        return out

    def resume(self, *, trajectory_id: str | None = None) -> dict[str, Any] | None:
        """Finish a quarantine the log records (after a supervisor crash): freeze the tree
        again if there is one, sever at the gateway, revoke again (idempotent) and apply the
        tombstone to the ledger again (idempotent). None when the log holds no tombstone."""
        from kernel_lib.recovery.quarantine.protocol import quarantine_of

        if self.gate is None:
            return None
        q = quarantine_of(self.gate.record)
        if q is None:
            return None
        tid = trajectory_id or self.gate.log.trajectory_id
        out: dict[str, Any] = {"quarantine_id": q["quarantine_id"]}
        if self.freezer is not None and self.freezer.pids():
            with contextlib.suppress(ContainmentError):
                self.freezer.freeze()
        if self.guard is not None:
            self.guard.sever(tid)
        out["revoked_leases"] = list(self.revoke(tid))
        if self.ledger is not None:
            out["ledger"] = self.ledger.apply_tombstone(tid, q["quarantine_id"], q["taint_from_sequence"]).to_json()
        return out


def python_module(module: str, *args: str) -> list[str]:
    """``[python, -m, module, *args]`` with this interpreter."""
    return [sys.executable, "-m", module, *args]
