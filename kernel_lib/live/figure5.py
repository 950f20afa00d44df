"""Figure 5 against live services, with a real worker process killed by SIGKILL at turn 5 and the
recovery in a new process (Failure Recovery, "Anatomy of a faulted trajectory").

The same trajectory, faults and judgement as :mod:`kernel_lib.sim.figure5`, with real parts: the
tool services and the credential broker are processes on loopback
(:class:`~kernel_lib.live.services.LiveFleet`, each with its state in its own SQLite file), the
trajectory log is an SQLite file, and the worker is its own process::

    python -m kernel_lib.live.figure5 --fleet DIR --store FILE --trajectory ID [--pause-marker FILE] [--restarted]

With ``--pause-marker`` the worker runs the synthesized harness until the configuration update's
intent (turn 5) is durable, writes the marker atomically (``{position, pid, wall_s}``) and blocks
until it is killed; the controller (:func:`run_figure5_live`) then sends a real ``SIGKILL``. The
recovery process (``--restarted``) opens the same log and runs the same script: committed turns are
answered from the log, the in-doubt configuration update is settled by the config service's status
lookup, and the restarted model's premature deploy meets the gate (:class:`~kernel_lib.sim.figure5
.Figure5Harness`). It prints one JSON object: the harness's outcome, the gate attempts it made
and the wall time of its first record.

The network drop at turn 3 is real too: the database service applies ``provision_db`` and holds
the answer until the worker's client gives up (``client_timeout_s``); the broken SQL is refused by
the service's SQLite. The virtual waits of the harness (:class:`Timings`) are set to 0: every wait
here is a real one, measured. RTO is measured on the wall clock, from the SIGKILL to the
recovery process's first appended record (its start-up included).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernel_lib.errors import ConfigError, LiveProcessError
from kernel_lib._support.workdirs import write_text_atomic

__all__ = ["run_figure5_live", "main", "LIVE_TIMINGS"]

#: The harness's virtual waits, all 0 live: the services, the timeouts and the processes take real time.
LIVE_TIMINGS = {"timeout_s": 0.0, "probe_s": 0.0, "restart_s": 0.0, "proposal_s": 0.0}
_MODULE = "kernel_lib.live.figure5"
#: how long a service of the fleet this module starts holds an answer it drops (s): the worker's
#: client must give up well before (at most half of it), or it gets the service's 504 instead of a
#: timeout and the lost answer of turn 3 is not staged
HOLD_S = 30.0



def _worker(args: argparse.Namespace) -> int:
    """The worker or recovery process (module docstring)."""
    from kernel_lib.live.services import LiveFleet
    from kernel_lib.log import open_store
    from kernel_lib.recovery.synthesis.config import CONFIGS
    from kernel_lib.recovery.synthesis.faults import Timings
    from kernel_lib.sim.figure5 import Figure5Harness, figure5_plan
    from kernel_lib.sim.sysadmin import SYSADMIN_TASK

    fleet = LiveFleet.attach(args.fleet, client_timeout_s=args.client_timeout_s)
    store = open_store("sqlite", args.store, create=True)
    first: dict[str, Any] = {}
    last = {"seq": 0}

    def step(h: Any, name: str, ev: Any) -> None:
        if ev is not None:
            first.setdefault("wall_s", time.time())
            first.setdefault("position", ev.sequence_number)
            last["seq"] = ev.sequence_number
        if (args.pause_marker and name == "after:ToolIntent" and ev is not None
                and ev.payload.tool == "update_config"):
            write_text_atomic(Path(args.pause_marker), json.dumps({"position": ev.sequence_number, "pid": os.getpid(),
                                                               "wall_s": time.time()}))
            while True:      # block until killed
                signal.pause()

    try:
        harness = Figure5Harness(CONFIGS["synthesized"], fleet, SYSADMIN_TASK, plan=figure5_plan(kill=False),
                                 timings=Timings(**LIVE_TIMINGS), store_factory=lambda tid: store,
                                 audit=fleet.audits, on_step=step, restarted=args.restarted)
        out = harness.run(args.trajectory)
        result = {"pid": os.getpid(), "outcome": out.as_dict(), "held": harness.held,
                  "first_record": first, "log_head": last["seq"]}
    finally:
        store.close()
        fleet.close()
    print(json.dumps(result, default=str), flush=True)
    return 0


def _env() -> dict[str, str]:
    from kernel_lib.live.orphan import parent_env

    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", **parent_env()}


def _argv(fleet_dir: Path, store: Path, tid: str, *, marker: Path | None = None, restarted: bool = False,
          client_timeout_s: float) -> list[str]:
    argv = [sys.executable, "-m", _MODULE, "--fleet", str(fleet_dir), "--store", str(store), "--trajectory", tid,
            "--client-timeout-s", str(client_timeout_s)]
    if marker is not None:
        argv += ["--pause-marker", str(marker)]
    if restarted:
        argv.append("--restarted")
    return argv


def run_figure5_live(*, workdir: str | os.PathLike | None = None, fleet: Any = None, trajectory_id: str | None = None,
                     client_timeout_s: float = 1.0, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run figure 5 on live services with a real SIGKILL at turn 5 (module docstring).

    Args:
        workdir: where the work folder goes (default: the system temporary folder); removed after.
        fleet: a running :class:`~kernel_lib.live.services.LiveFleet` to reuse (default: one is
            started in the work folder and stopped at the end).
        trajectory_id: default a fresh ``fig5-live-<nonce>`` (one fleet may serve several runs).
        client_timeout_s: how long the worker waits for a service's answer (the dropped answer at
            turn 3 costs this much); at most half the time the services hold a dropped answer
            (:data:`HOLD_S`, or the given fleet's ``hold_s``).
        timeout_s: the longest the worker may take to reach turn 5, and the recovery to finish.

    Returns:
        :func:`kernel_lib.sim.figure5.run_figure5`'s report with ``substrate`` live, plus
        ``signal`` (``SIGKILL``), ``worker_pid``, ``recovery_pid``, ``worker_exit`` (-9),
        ``rto_s`` measured on the wall clock and ``timings`` (fleet start, worker, recovery).

    Raises:
        ConfigError: ``workdir`` is not an existing directory; ``client_timeout_s`` is not a number
            of seconds > 0 and at most half the services' hold.
        LiveProcessError / ServiceError: a process failed, or the worker did not reach turn 5.
    """
    import uuid

    from kernel_lib.live.services import LiveFleet
    from kernel_lib._support.workdirs import remove_tree
    from kernel_lib.log import open_store
    from kernel_lib.recovery.synthesis.lifelines import Crash
    from kernel_lib.sim.figure5 import figure5_report

    if workdir is not None and not Path(workdir).is_dir():
        raise ConfigError(f"workdir {str(workdir)!r} is not an existing directory")
    hold = float(getattr(fleet, "hold_s", HOLD_S)) if fleet is not None else HOLD_S
    if isinstance(client_timeout_s, bool) or not isinstance(client_timeout_s, (int, float)) \
            or not 0 < client_timeout_s <= hold / 2:
        raise ConfigError(f"client_timeout_s must be seconds in (0, {hold / 2:g}], got {client_timeout_s!r}: the "
                          f"services hold the answer they drop at turn 3 for {hold:g} s, and a client that waits "
                          "longer gets their 504 instead of a timeout")
    tid = trajectory_id or f"fig5-live-{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="kl-fig5-live-", dir=workdir))
    own = fleet is None
    timings: dict[str, Any] = {}
    try:
        if own:
            fleet = LiveFleet(work / "fleet", client_timeout_s=5.0, hold_s=HOLD_S)
            timings["fleet_start_s"] = fleet.start_s
        store = work / "figure5.sqlite"
        marker = work / "paused.json"
        log = work / "worker.log"
        t0 = time.monotonic()
        with log.open("w") as err:
            proc = subprocess.Popen(_argv(fleet.state_dir, store, tid, marker=marker,
                                          client_timeout_s=client_timeout_s),
                                    stdout=subprocess.DEVNULL, stderr=err, env=_env(), start_new_session=True)
        try:
            seen = None
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and proc.poll() is None:
                if marker.exists():
                    with contextlib.suppress(ValueError, OSError):
                        seen = json.loads(marker.read_text())
                        break
                time.sleep(0.005)
            if seen is None:
                raise LiveProcessError(f"the figure-5 worker did not reach turn 5 within {timeout_s:g} s (exit "
                                       f"{proc.poll()}): {log.read_text(errors='replace')[-800:]}")
            os.kill(proc.pid, signal.SIGKILL)       # the real thing: no handler runs, nothing is flushed
            killed_wall = time.time()
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                from kernel_lib._support.procs import kill_group
                kill_group(proc)
        timings["worker_s"] = round(time.monotonic() - t0, 3)
        t1 = time.monotonic()
        try:
            rec = subprocess.run(_argv(fleet.state_dir, store, tid, restarted=True, client_timeout_s=client_timeout_s),
                                 capture_output=True, text=True, env=_env(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise LiveProcessError(f"the recovery process did not finish within {timeout_s:g} s") from None
        timings["recovery_s"] = round(time.monotonic() - t1, 3)
        lines = [ln for ln in rec.stdout.splitlines() if ln.startswith("{")]
        if rec.returncode != 0 or not lines:
            raise LiveProcessError(f"the recovery process exited with code {rec.returncode}: {rec.stderr[-800:]}")
        result = json.loads(lines[-1])
        with open_store("sqlite", store, read_only=True) as st:
            events = list(st.read(tid))
        first = result.get("first_record") or {}
        rto = {"rto_s": round(first["wall_s"] - killed_wall, 4) if first.get("wall_s") else None,
               "rto_note": "measured on the wall clock: from the SIGKILL to the recovery process's first appended "
                           "record (process start, imports, opening and folding the log, the status lookup)"}
        crash = Crash(int(seen["position"]), f"SIGKILL of pid {proc.pid}")
        outcome = result["outcome"]
        report = figure5_report(events, fleet.audits(), fleet.counts(), fleet.resources(live_only=False), outcome,
                         result.get("held") or [], [crash], trajectory_id=tid,
                         substrate="live services (processes on loopback), real SIGKILL", wall_s=0.0, rto=rto)
        report.update(signal="SIGKILL", worker_pid=proc.pid, worker_exit=code, recovery_pid=result.get("pid"),
                      timings=timings, wall_s=round(timings["worker_s"] + timings["recovery_s"], 3))
        report["kill"] = {"turn": 5, "position": "after the update_config intent", "log_position": seen["position"],
                          "rpo_turns": report["failures"][2]["evidence"].get("rpo_turns"), "rto_s": rto["rto_s"]}
        report["ok"] = report["ok"] and code == -signal.SIGKILL
        return report
    finally:
        if own and fleet is not None:
            fleet.close()
        remove_tree(work)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m kernel_lib.live.figure5",
                                 description="Figure 5's worker process (started by `python -m kernel_lib figure5 "
                                             "--live`, which also kills and recovers it).")
    ap.add_argument("--fleet", required=True, help="the running live fleet's state directory")
    ap.add_argument("--store", required=True, help="the trajectory log's SQLite file")
    ap.add_argument("--trajectory", required=True)
    ap.add_argument("--pause-marker", default=None,
                    help="block right after the configuration update's intent, having written this file")
    ap.add_argument("--restarted", action="store_true", help="this process recovers a killed one's log")
    ap.add_argument("--client-timeout-s", type=float, default=1.0, help="how long a service call waits, seconds")
    return ap


def main(argv: list[str] | None = None) -> int:
    from kernel_lib.live.orphan import watch_parent

    args = build_parser().parse_args(argv)
    watch_parent(lambda: os._exit(70))   # the controller is gone: leave nothing running behind it
    return _worker(args)


if __name__ == "__main__":
    sys.exit(main())
