"""Start, fault and stop a real etcd cluster on loopback (§11.3.1 table 2 row 3, footnote 3).

etcd is a replicated key-value store built on Raft: a write is acknowledged only after a majority
of members has it in their logs on disk, so with three members an acknowledged write survives the
loss of any one member (and its disk). :class:`EtcdCluster` runs N ``etcd`` processes from
Debian's ``etcd-server`` package on 127.0.0.1, each with its own data directory and its own
client and peer ports, and gives the faults the chapter reasons about as real process operations:

* :meth:`EtcdCluster.kill` — ``SIGKILL`` a member (a crashed node; its disk survives);
* :meth:`EtcdCluster.pause` / :meth:`EtcdCluster.resume` — ``SIGSTOP`` / ``SIGCONT`` (a node cut
  off by a partition: alive, silent, and back later with its state);
* :meth:`EtcdCluster.destroy_volume` — ``SIGKILL`` and delete its data directory (volume loss);
* :meth:`EtcdCluster.restart` — start a killed member again on its ports and data (rejoining).

Every process started is recorded by pid in ``members.json`` in the work directory and stopped by
pid in :meth:`EtcdCluster.stop` (also on ``with`` exit). The members are started with
``PR_SET_PDEATHSIG`` so they die with the process that started them, and a later cluster sweeps
work directories whose owner died (:func:`sweep_stale_clusters`).

Set-up: ``make test`` / ``make lab`` install ``etcd-server`` and ``etcd-client`` with apt-get when
``etcd`` is missing (:func:`etcd_binary` says how if it still is).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_lib._support.procs import free_port, wait_all_threads_stopped
from kernel_lib._support.workdirs import sweep_stale_workdirs
from kernel_lib.errors import ConfigError, QuorumSetupError
from kernel_lib.limits import ETCD_TXN_OPS_MAX

TEMP_PREFIX = "kl-etcd-"
OWNER_FILE = "owner.pid"
MEMBERS_FILE = "members.json"


def etcd_binary() -> str:
    """Path of the ``etcd`` server binary.

    Raises:
        QuorumSetupError: not installed (names the Debian packages and the make target)."""
    path = shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)
    if path is None:
        raise QuorumSetupError("the etcd server is not installed: run `make test` or `make lab` "
                               "(they install Debian's "
                               "etcd-server and etcd-client with apt-get), "
                               "or `apt-get install etcd-server etcd-client`")
    return path




def _die_with_parent() -> None:     # pragma: no cover - runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except OSError:
        pass


def _kill_recorded_members(d: Path) -> None:
    """SIGKILL the members recorded in ``d``'s members.json, but only a pid that is still an etcd
    process of that directory (a recorded pid may have been reused by something else)."""
    try:
        pids = [m["pid"] for m in json.loads((d / MEMBERS_FILE).read_text()) if m.get("pid")]
    except (OSError, ValueError, TypeError, KeyError):
        pids = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not cmdline or not cmdline[0].endswith(b"etcd") or not any(str(d).encode() in a for a in cmdline):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def sweep_stale_clusters(parent: str | os.PathLike | None = None) -> list[Path]:
    """Stop the members of, and remove, cluster work directories whose owner process is gone
    (e.g. a killed notebook kernel). Returns the directories removed."""
    return sweep_stale_workdirs(parent, prefix=TEMP_PREFIX, before_remove=_kill_recorded_members)


@dataclass
class Member:
    """One etcd member: its name, loopback ports, data directory, and process (None: not running)."""

    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen | None = None
    paused: bool = False
    state: str = "new"          # new, running, paused, killed, destroyed, stopped

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "client_url": self.client_url, "peer_url": self.peer_url, "pid": self.pid,
                "state": self.state, "data_dir": str(self.data_dir)}


@dataclass
class EtcdCluster:
    """N etcd members on loopback (module docstring).

    Args:
        members: how many (1..7; 3 tolerates one failure, 5 two).
        work_dir: where data directories and logs go (default: a new temp directory, removed by
            :meth:`stop`); a directory you give is kept.
        start_timeout_s: how long :meth:`start` waits for every member to be healthy.
        heartbeat_ms, election_ms: Raft timing (etcd's ``--heartbeat-interval`` and
            ``--election-timeout``); short values make failover visible in a notebook.

    Raises:
        ConfigError: bad arguments. QuorumSetupError: etcd missing (at :meth:`start`).
    """

    members_n: int = 3
    work_dir: Path | None = None
    start_timeout_s: float = 20.0
    heartbeat_ms: int = 50
    election_ms: int = 500
    members: list[Member] = field(default_factory=list)
    _own_dir: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if type(self.members_n) is not int or not 1 <= self.members_n <= 7:
            raise ConfigError(f"members must be an int from 1 to 7, got {self.members_n!r}")
        for name in ("heartbeat_ms", "election_ms"):
            v = getattr(self, name)
            if type(v) is not int or v <= 0:
                raise ConfigError(f"{name} must be an int > 0, got {v!r}")
        if self.election_ms < 5 * self.heartbeat_ms:
            raise ConfigError("election_ms must be at least 5 x heartbeat_ms (etcd requires it)")
        if self.election_ms > 50_000:
            raise ConfigError(f"election_ms must be at most 50000 (etcd refuses more), got {self.election_ms!r}")
        t = self.start_timeout_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ConfigError(f"start_timeout_s must be a finite number of seconds > 0, got {t!r}")

    # --- life cycle -------------------------------------------------------------------------------
    def start(self) -> "EtcdCluster":
        """Start every member and wait until the cluster has a leader. Idempotent."""
        if self.members:
            return self
        binary = etcd_binary()
        sweep_stale_clusters()
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
            self._own_dir = True
        else:
            self.work_dir = Path(self.work_dir)
            self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / OWNER_FILE).write_text(f"{os.getpid()}\n")
        for attempt in range(3):
            taken: set[int] = set()
            self.members = []
            for i in range(self.members_n):
                name = f"m{i}"
                ports = (free_port(taken), 0)
                taken.add(ports[0])
                ports = (ports[0], free_port(taken))
                taken.add(ports[1])
                self.members.append(Member(name, ports[0], ports[1], self.work_dir / f"{name}-{attempt}",
                                           self.work_dir / f"{name}.log"))
            try:
                for m in self.members:
                    self._spawn(binary, m, "new")
                self.wait_healthy(self.start_timeout_s)
                return self
            except QuorumSetupError as exc:
                lost_port = "address already in use" in str(exc)
                for m in self.members:
                    self._terminate(m)
                if not lost_port or attempt == 2:
                    self.stop()
                    raise
            except BaseException:
                self.stop()
                raise
        return self

    def _initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    def _spawn(self, binary: str, m: Member, cluster_state: str, extra: tuple[str, ...] = ()) -> None:
        cmd = [binary, *extra, "--name", m.name, "--data-dir", str(m.data_dir),
               "--listen-client-urls", m.client_url, "--advertise-client-urls", m.client_url,
               "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
               "--initial-cluster", self._initial_cluster(), "--initial-cluster-state", cluster_state,
               "--initial-cluster-token", f"kl-{os.getpid()}-{id(self)}",
               "--heartbeat-interval", str(self.heartbeat_ms), "--election-timeout", str(self.election_ms),
               "--max-txn-ops", str(ETCD_TXN_OPS_MAX), "--logger", "zap", "--log-outputs", "stderr"]
        log = open(m.log_path, "ab")
        try:
            main = threading.current_thread() is threading.main_thread()
            m.process = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=_die_with_parent if main else None)
        finally:
            log.close()
        m.state, m.paused = "running", False
        self._write_members()

    def _write_members(self) -> None:
        if self.work_dir is not None:
            try:
                (self.work_dir / MEMBERS_FILE).write_text(json.dumps([m.to_dict() for m in self.members]))
            except OSError:     # the directory is being removed (stop, or an interrupted start)
                pass

    def wait_healthy(self, timeout_s: float, members: list[Member] | None = None) -> None:
        """Wait until each running member answers ``/health`` with a leader.

        Raises QuorumSetupError naming the members that did not (with their log's last line)."""
        import httpx

        todo = [m for m in (members or self.members) if not m.paused and m.state not in ("killed", "destroyed",
                                                                                        "stopped")]
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=1.0) as http:
            while todo and time.monotonic() < deadline:
                if any(not m.running() for m in todo):
                    break                   # a member exited (e.g. etcd refused its flags): no point waiting
                for m in list(todo):
                    try:
                        r = http.get(m.client_url + "/health")
                        if r.status_code == 200 and r.json().get("health") == "true":
                            todo.remove(m)
                    except (httpx.HTTPError, ValueError):
                        pass
                if todo:
                    time.sleep(0.05)
        if todo:
            lines = []
            for m in todo:
                tail = m.log_path.read_text(errors="replace").strip().splitlines()[-1:] if m.log_path.exists() else []
                lines.append(f"{m.name} (pid {m.pid}, running={m.running()}): {tail[0][:300] if tail else 'no log'}")
            raise QuorumSetupError(f"etcd members not healthy within {timeout_s} s: " + "; ".join(lines))

    def stop(self) -> None:
        """Stop every member by pid (SIGCONT first for paused ones, then SIGTERM, SIGKILL after 5 s)
        and remove the work directory if this cluster created it. Idempotent."""
        with self._lock:
            for m in self.members:
                self._terminate(m)
                m.state = "stopped"
            self._write_members()
            if self._own_dir and self.work_dir is not None:
                shutil.rmtree(self.work_dir, ignore_errors=True)

    def _terminate(self, m: Member, sig: int = signal.SIGTERM) -> None:
        p = m.process
        if p is None or p.poll() is not None:
            return
        try:
            os.kill(p.pid, signal.SIGCONT)
            os.kill(p.pid, sig)
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=5)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "EtcdCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- faults -----------------------------------------------------------------------------------------
    def member(self, which: "int | str") -> Member:
        if isinstance(which, int) and not isinstance(which, bool) and 0 <= which < len(self.members):
            return self.members[which]
        for m in self.members:
            if m.name == which:
                return m
        raise ConfigError(f"no member {which!r}; members are {[m.name for m in self.members]}")

    def kill(self, which: "int | str") -> Member:
        """SIGKILL one member (its data directory stays)."""
        m = self.member(which)
        if m.process is not None and m.process.poll() is None:
            os.kill(m.process.pid, signal.SIGCONT)
            os.kill(m.process.pid, signal.SIGKILL)
            m.process.wait(timeout=5)
        m.state, m.paused = "killed", False
        self._write_members()
        return m

    def pause(self, which: "int | str") -> Member:
        """SIGSTOP one member: it stops answering peers and clients (a partitioned node). Returns
        once every thread of the member shows stopped in ``/proc`` (at most 2 s), so that a write
        sent right after cannot still be answered by it."""
        m = self.member(which)
        if not m.running():
            raise ConfigError(f"member {m.name} is not running ({m.state}); cannot pause it")
        os.kill(m.process.pid, signal.SIGSTOP)
        wait_all_threads_stopped(m.process.pid)
        m.state, m.paused = "paused", True
        self._write_members()
        return m

    def resume(self, which: "int | str") -> Member:
        """SIGCONT a paused member: it rejoins with the state it had."""
        m = self.member(which)
        if m.running():
            os.kill(m.process.pid, signal.SIGCONT)
        m.state, m.paused = ("running" if m.running() else m.state), False
        self._write_members()
        return m

    def destroy_volume(self, which: "int | str") -> Member:
        """SIGKILL one member and delete its data directory: the loss of that member's volume."""
        m = self.kill(which)
        shutil.rmtree(m.data_dir, ignore_errors=True)
        m.state = "destroyed"
        self._write_members()
        return m

    def restart(self, which: "int | str", *, wait_s: float = 20.0) -> Member:
        """Start a killed member again on its own ports and data directory (a member whose volume
        was destroyed cannot rejoin under its old identity: use a fresh cluster)."""
        m = self.member(which)
        if m.running():
            return m
        if m.state == "destroyed":
            raise ConfigError(f"member {m.name}'s volume was destroyed; it cannot rejoin as the same member")
        self._spawn(etcd_binary(), m, "existing")
        self.wait_healthy(wait_s, [m])
        return m

    def recover_alone(self, which: "int | str", *, wait_s: float = 20.0) -> Member:
        """Disaster recovery when no majority is left: restart member ``which`` (killed first if
        running) from its own data directory with ``--force-new-cluster``, as a one-member cluster
        holding exactly what that member had on disk. The other members' identities are dropped;
        use this only to read what survived."""
        m = self.member(which)
        if m.state == "destroyed":
            raise ConfigError(f"member {m.name}'s volume was destroyed; nothing is left to recover from it")
        if m.running():
            self.kill(m.name)
        self._spawn(etcd_binary(), m, "existing", ("--force-new-cluster",))
        self.wait_healthy(wait_s, [m])
        return m

    # --- views ----------------------------------------------------------------------------------------------
    def endpoints(self, *, only_running: bool = False) -> list[str]:
        """Client URLs of the members (all, or only the running and unpaused ones)."""
        return [m.client_url for m in self.members if not only_running or (m.running() and not m.paused)]

    def leader(self, timeout_s: float = 5.0) -> Member:
        """The member the running members report as Raft leader (asks each ``/v3/maintenance/status``).

        Raises QuorumSetupError if no running member reports a leader within ``timeout_s``."""
        import httpx

        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=0.5) as http:
            while time.monotonic() < deadline:
                ids: dict[str, Member] = {}
                leader_id = None
                for m in self.members:
                    if not m.running() or m.paused:
                        continue
                    try:
                        data = http.post(m.client_url + "/v3/maintenance/status", json={}).json()
                    except (httpx.HTTPError, ValueError):
                        continue
                    ids[str(data.get("header", {}).get("member_id"))] = m
                    leader_id = str(data.get("leader")) if data.get("leader") not in (None, "0") else leader_id
                if leader_id in ids:
                    return ids[leader_id]
                time.sleep(0.05)
        raise QuorumSetupError(f"no running etcd member reports a leader within {timeout_s} s")

    def alive(self) -> int:
        """Members running and not paused."""
        return sum(1 for m in self.members if m.running() and not m.paused)

    def majority(self) -> int:
        return len(self.members) // 2 + 1

    def status(self) -> list[dict[str, Any]]:
        """Per member: name, state, pid, client URL (no network call)."""
        return [{"member": m.name, "state": m.state if m.running() or m.state != "running" else "exited",
                 "pid": m.pid, "client_url": m.client_url} for m in self.members]
