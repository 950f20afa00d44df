"""The worker fleet (kernel_lib.live.fleet): real worker processes, real SIGKILLs, a durable queue,
ownership leases on the SQLite coordinator, shared breakers (Failure Recovery, "Fault-Tolerant
System Synthesis"; Chapter 11 §11.5.1).

Fault model: a worker is SIGKILLed mid-trajectory (right after a dispatch whose effect the service
applied and whose result was never logged), workers are SIGKILLed at random while the queue still
holds work, an owner is SIGSTOPped until its lease expires and then resumed (the zombie), a
service answers 503 until its breaker trips, the controller's caller raises inside the fleet.
Invariant: every trajectory ends exactly once; the services' own audits count no effect applied
twice and no compensator run twice; a stale owner's appends, dispatches and result are refused;
no worker process and no fleet directory outlives stop(). Goal: a user runs many trajectories on
a few workers and loses none of them to a dead worker.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel_lib._support.procs import pid_alive
from kernel_lib.errors import ConfigError, FleetError
from kernel_lib.live.fleet import Fleet, rto_decomposition
from kernel_lib.live.fleet_queue import FleetQueue
from kernel_lib.live.services import LiveFleet
from kernel_lib.sim.services import ACTIONS

#: position 16 of the deployment saga: right after T2 (reserve_ip) was dispatched; the egress_ip
#: service applied it, its ToolResult is not in the log (the step is in doubt)
AFTER_T2_DISPATCH = 16
DEPLOYMENT_TOOLS = ("provision_sandbox", "reserve_ip", "compile_binary", "bind_firewall", "publish_dns")


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    with LiveFleet(tmp_path_factory.mktemp("svc"), client_timeout_s=5.0) as f:
        yield f


def applied_for(services, trajectory_id: str) -> dict[str, int]:
    """Creates applied per tool for one trajectory's saga, from the services' own audits."""
    out: dict[str, int] = {}
    for trail in services.audits().values():
        for a in trail:
            if str(a.get("operation_id", "")).startswith(trajectory_id + ".") and not a.get("refused") \
                    and not ACTIONS[a["action"]].releases:
                out[a["action"]] = out.get(a["action"], 0) + 1
    return out


def applied_per_operation(services, trajectory_id: str) -> dict[str, int]:
    """Creates applied per operation id of one trajectory's saga, from the services' own audits."""
    out: dict[str, int] = {}
    for trail in services.audits().values():
        for a in trail:
            op = str(a.get("operation_id", ""))
            if op.startswith(trajectory_id + ".") and not a.get("refused") and not ACTIONS[a["action"]].releases:
                out[op] = out.get(op, 0) + 1
    return out


def received(services, action: str) -> int:
    return services.counts()[ACTIONS[action].service]["received"].get(action, 0)


# --- the queue on its own ----------------------------------------------------------------------------


def test_claims_are_fifo_within_priority_and_an_expired_claim_is_taken_over_first(tmp_path):
    q = FleetQueue(tmp_path / "q.sqlite")
    q.submit([{"trajectory_id": t, "program": "deployment", "durability": "on", "priority": p}
              for t, p in (("a", 0), ("b", 0), ("c", 5), ("d", 0))])
    t = 1000.0
    first = q.claim("w1", 1, 2.0, now=t)
    assert first.trajectory_id == "c" and not first.takeover      # priority first
    assert q.claim("w2", 2, 2.0, now=t + 1).trajectory_id == "a"   # then FIFO (w2's claim lasts to t + 3)
    # w1 dies: its provisional lease runs out; the next claim takes "c" over before "b"
    again = q.claim("w3", 3, 2.0, now=t + 2.5)
    assert (again.trajectory_id, again.takeover, again.previous_worker, again.claims) == ("c", True, "w1", 2)
    assert q.claim("w3", 3, 2.0, now=t + 2.6).trajectory_id == "b"
    # the stale holder cannot renew, finish or hand back what it no longer holds
    assert not q.renew("c", "w1", 1, t + 10)
    assert not q.finish("c", "w1", 1, "done", "COMPLETED", {})
    assert q.set_owner("c", "w3", 2, t + 5) and q.finish("c", "w3", 2, "done", "COMPLETED", {})
    assert {r["trajectory_id"]: r["state"] for r in q.rows()} == {"a": "claimed", "b": "claimed", "c": "done",
                                                                  "d": "queued"}
    with pytest.raises(ConfigError):
        q.submit([{"trajectory_id": "a", "program": "deployment", "durability": "on"}])
    q.close()


def test_a_trajectory_that_keeps_losing_its_workers_is_unwound_then_given_up(tmp_path):
    q = FleetQueue(tmp_path / "q.sqlite")
    q.submit([{"trajectory_id": "x", "program": "deployment", "durability": "on"}])
    for k in range(3):
        assert q.claim(f"w{k}", k, 1.0, max_claims=3, now=100.0 + 2 * k).mode == "forward"
    # past the forward bound: not failed, handed out again to be unwound (compensation only)
    unwind = q.claim("w8", 8, 1.0, max_claims=3, max_unwind_claims=1, now=110.0)
    assert (unwind.mode, unwind.unwind_claims, unwind.claims) == ("unwind", 1, 4)
    q.update_attempt(unwind.attempt_id, notes=json.dumps({"residue": [{"operation_id": "x.T1"}]}))
    # the unwind dies too: past the unwind bound the row is failed, listing what the unwinder noted
    assert q.claim("w9", 9, 1.0, max_claims=3, max_unwind_claims=1, now=112.0) is None
    (row,) = q.rows()
    assert (row["state"], row["outcome"], row["claims"], row["unwind_claims"]) == ("failed", "GAVE_UP", 4, 1)
    assert row["result"]["residue"] == [{"operation_id": "x.T1"}] and row["result"]["gave_up"] == "unwind"
    q.close()


def _claimer(path: str, worker: str, out: str, go) -> None:
    q = FleetQueue(path)
    got = []
    go.wait(30)   # every process is up and has its connection: then they race
    while True:
        c = q.claim(worker, os.getpid(), 600.0)
        if c is None:
            break
        got.append(c.trajectory_id)
        time.sleep(0.002)   # the work between two claims (SQLite's busy wait favours a claimer that never pauses)
    Path(out).write_text(json.dumps(got))
    q.close()


def test_processes_racing_for_claims_never_claim_one_trajectory_twice(tmp_path):
    path = tmp_path / "q.sqlite"
    with FleetQueue(path) as q:
        q.submit([{"trajectory_id": f"t{i:03d}", "program": "deployment", "durability": "on"} for i in range(120)])
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    procs = [ctx.Process(target=_claimer, args=(str(path), f"w{k}", str(tmp_path / f"w{k}.json"), go))
             for k in range(4)]
    for p in procs:
        p.start()
    time.sleep(0.3)
    go.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    claimed = [t for k in range(4) for t in json.loads((tmp_path / f"w{k}.json").read_text())]
    assert sorted(claimed) == [f"t{i:03d}" for i in range(120)]      # each exactly once
    assert sum(1 for k in range(4) if json.loads((tmp_path / f"w{k}.json").read_text())) >= 2


def test_the_rto_parts_add_up_to_the_rto():
    att = {"claimed_at_s": 11.2, "granted_at_s": 11.25, "folded_at_s": 11.27, "first_append_at_s": 11.4,
           "probes": 1, "probes_s": 0.05, "finished_at_s": 12.0}
    r = rto_decomposition(10.0, 11.0, att)
    assert r["rto_s"] == pytest.approx(1.4) and r["lease_expiry_wait_s"] == pytest.approx(1.0)
    parts = ("lease_expiry_wait_s", "claim_s", "takeover_s", "log_open_fold_s", "probes_s", "other_s")
    assert sum(r[p] for p in parts) == pytest.approx(r["rto_s"])
    assert r["resumed_by"] == "first_append"
    assert rto_decomposition(10.0, None, {**att, "first_append_at_s": None})["resumed_by"] == "finish"


# --- the fleet ----------------------------------------------------------------------------------------


def test_a_fleet_runs_every_trajectory_once_and_the_services_count_each_effect_once(services):
    with Fleet(2, services=services) as f:
        ids = f.submit(5)
        f.wait(ids, timeout_s=60)
        res = f.results(ids)
        ran_on = {o["worker_id"] for r in res for o in r["owners"]}
    assert [r["outcome"] for r in res] == ["COMPLETED"] * 5
    for r in res:
        assert applied_for(services, r["trajectory_id"]) == {t: 1 for t in DEPLOYMENT_TOOLS}
        assert r["services"]["forward_repeated"] == 0 and r["takeovers"] == 0
        assert [o["owner_epoch"] for o in r["owners"]] == [1]
    assert ran_on <= set(f.pids())


@pytest.mark.parametrize("store", ["sqlite", "segment"])
def test_a_worker_sigkilled_mid_trajectory_is_taken_over_and_resumed_from_the_log(services, store):
    with Fleet(2, services=services, lease_ttl_s=1.0, store=store) as f:
        [tid] = f.submit([{"params": {"pause_at": AFTER_T2_DISPATCH}}])
        paused = f.wait_marker(tid)
        assert paused["name"] == "after:dispatch"
        before = received(services, "reserve_ip")
        kill = f.kill_worker(paused["pid"])
        assert kill["worker_exit"] == -signal.SIGKILL and kill["trajectory_id"] == tid and kill["owner_epoch"] == 1
        f.wait([tid], timeout_s=30)
        [r] = f.results([tid])
        events = f.events(tid)
    assert r["outcome"] == "COMPLETED" and r["takeovers"] == 1
    first, second = r["owners"]
    assert first["killed"] and first["pid"] == paused["pid"]
    assert second["pid"] != paused["pid"] and second["owner_epoch"] == 2
    # the in-doubt T2 was settled by the service's status lookup, never dispatched again
    assert second["probes"] >= 1
    assert received(services, "reserve_ip") == before
    assert applied_for(services, tid) == {t: 1 for t in DEPLOYMENT_TOOLS}
    assert r["services"]["forward_repeated"] == 0
    # the log: the first owner's events, then only the new owner's
    epochs = [e.owner_epoch for e in events]
    assert epochs == sorted(epochs) and set(epochs) == {1, 2}
    [rto] = r["rto"]
    assert 0 <= rto["lease_expiry_wait_s"] <= 1.0 + 0.05
    assert rto["rto_s"] >= rto["lease_expiry_wait_s"] and rto["resumed_by"] == "first_append"
    parts = ("lease_expiry_wait_s", "claim_s", "takeover_s", "log_open_fold_s", "probes_s", "other_s")
    assert sum(rto[p] for p in parts) == pytest.approx(rto["rto_s"], abs=1e-5)


def test_a_worker_that_sigkills_itself_at_a_drawn_position_is_replaced_and_its_trajectory_taken_over(services):
    with Fleet(2, services=services) as f:
        [tid] = f.submit([{"params": {"kill_at": AFTER_T2_DISPATCH}}])
        f.wait([tid], timeout_s=30)
        [r] = f.results([tid])
        [kill] = f.queue.kills()
        alive = f.alive_workers()
        dead = [w for w, p in f._procs.items() if p.poll() is not None]
        codes = [f._procs[w].returncode for w in dead]
    assert kill["sent_by"] == "self" and kill["trajectory_id"] == tid and kill["detail"]["name"] == "after:dispatch"
    assert codes == [-signal.SIGKILL] and len(alive) == 2          # the dead worker was replaced
    assert r["outcome"] == "COMPLETED" and [o["owner_epoch"] for o in r["owners"]] == [1, 2]
    assert r["owners"][0]["killed"] and r["rto"][0]["lease_expires_at_s"] == kill["lease_expires_at_s"]
    assert applied_for(services, tid) == {t: 1 for t in DEPLOYMENT_TOOLS}


def test_a_stalled_owner_is_fenced_by_the_log_and_the_queue_after_the_takeover(services):
    with Fleet(2, services=services, lease_ttl_s=1.0) as f:
        [tid] = f.submit([{"params": {"pause_at": AFTER_T2_DISPATCH, "stall": True}}])
        paused = f.wait_marker(tid)
        f.pause_worker(paused["pid"])                 # SIGSTOP: the owner stops, its lease runs out
        f.wait([tid], timeout_s=30)                   # another worker took it over and finished it
        done_at = f.queue.rows([tid])[0]["finished_at_s"]
        f.resume_worker(paused["pid"], trajectory_id=tid)   # SIGCONT: the zombie acts on its stale belief
        deadline = time.monotonic() + 15
        while f.queue.attempts(tid)[0]["finished_at_s"] is None and time.monotonic() < deadline:
            time.sleep(0.02)
        [r] = f.results([tid])
        events = f.events(tid)
    zombie, heir = r["owners"]
    assert zombie["pid"] == paused["pid"] and zombie["fenced"] and zombie["outcome"] == "FENCED"
    assert "StaleOwnerError" in zombie["error"] and zombie["finished_at_s"] > done_at
    assert heir["owner_epoch"] == 2 and heir["outcome"] == "COMPLETED" and r["outcome"] == "COMPLETED"
    # nothing of the zombie landed after the takeover: its epoch stops where the heir's begins
    last_old = max(e.sequence_number for e in events if e.owner_epoch == 1)
    assert last_old < min(e.sequence_number for e in events if e.owner_epoch == 2)
    assert applied_for(services, tid) == {t: 1 for t in DEPLOYMENT_TOOLS}


def test_a_tripped_breaker_in_one_worker_is_open_in_the_others(services):
    cfg = {"minimum_calls": 2, "window_size": 4, "cooldown_s": 60.0, "cooldown_max_s": 60.0}
    with Fleet(2, services=services, breaker=cfg) as f:
        services.inject("reserve_ip", "server_error", count=2)
        w_a, w_b = sorted(f.pids())
        before = received(services, "reserve_ip")
        [a] = f.submit([{"worker": w_a}])
        f.wait([a], timeout_s=30)
        after_a = received(services, "reserve_ip")
        [b] = f.submit([{"worker": w_b}])
        f.wait([b], timeout_s=30)
        ra, rb = f.results([a, b])
        trips = f.breaker_transitions()
        pids = f.pids()
    services.clear_faults()
    assert after_a - before == 2                                  # the two 503s reached the service
    assert [(t["dependency_id"], t["to_state"], t["pid"]) for t in trips] == [("service:egress_ip", "open",
                                                                                pids[w_a])]
    assert ra["owners"][0]["worker_id"] == w_a and rb["owners"][0]["worker_id"] == w_b
    # worker B never sent reserve_ip: its breaker was the one A tripped
    assert received(services, "reserve_ip") == after_a
    assert rb["fast_fails"] >= 1 and rb["outcome"] == "ABORT_CONSISTENT", (ra, rb)
    assert rb["services"]["effects_left_unlisted"] == 0 and rb["services"]["compensators_repeated"] == 0


def test_the_queue_loses_nothing_when_workers_are_killed_at_random(services):
    # the kills come on a wall-clock cadence, so on a loaded machine one trajectory can be hit more
    # often than the default give-up bound (5 claims); that bound is tested on the queue above, and
    # this test is about nothing being lost or applied twice, so the bound is lifted here
    with Fleet(2, services=services, lease_ttl_s=0.6, max_claims=100) as f:
        ids = f.submit(8, params={"extra_steps": 3})
        f.wait(ids, timeout_s=90, kill_every_s=0.25, seed=7)
        res = f.results(ids)
        kills = f.queue.kills()
    assert kills and all(k["signal"] == "SIGKILL" for k in kills)
    assert [r["state"] for r in res] == ["done"] * 8 and {r["outcome"] for r in res} == {"COMPLETED"}
    assert all(r["services"]["forward_repeated"] == 0 for r in res)
    killed = {k["trajectory_id"] for k in kills if k["trajectory_id"]}
    for r in res:
        if r["trajectory_id"] in killed:
            assert r["claims"] >= 2 and r["owners"][-1]["outcome"] == "COMPLETED"
        ops = applied_per_operation(services, r["trajectory_id"])
        assert sorted(ops.values()) == [1] * 8            # T1..T4, three branches, T5: each applied once


def test_with_durability_off_a_takeover_starts_over_and_only_idempotency_keys_prevent_duplicates(services):
    with Fleet(2, services=services, durability="off") as f:
        [tid] = f.submit([{"params": {"pause_at": AFTER_T2_DISPATCH}}])
        paused = f.wait_marker(tid)
        before = received(services, "reserve_ip")
        f.kill_worker(paused["pid"])
        f.wait([tid], timeout_s=30)
        [r] = f.results([tid])
        assert not any((f.dir / "logs").iterdir())          # no log file was written
    assert r["outcome"] == "COMPLETED" and r["owners"][1]["owner_epoch"] == 2
    # the new owner found no log: it dispatched T1 and T2 again; the services answered from their
    # idempotency tables, so nothing was applied twice
    assert r["owners"][1]["probes"] == 0
    assert received(services, "reserve_ip") == before + 1
    assert applied_for(services, tid) == {t: 1 for t in DEPLOYMENT_TOOLS}


# --- clean shutdown --------------------------------------------------------------------------------


def _all_dead(pids) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not any(pid_alive(p) for p in pids):
            return True
        time.sleep(0.02)
    return False


def test_stop_leaves_no_worker_no_service_and_no_directory_even_when_the_caller_fails(tmp_path):
    with pytest.raises(RuntimeError, match="the caller failed"):
        with Fleet(2, workdir=tmp_path) as f:
            f.submit([{"params": {"pause_at": 5}}])        # one worker blocked inside a trajectory
            f.wait_marker(f.queue.rows()[0]["trajectory_id"])
            pids = list(f.pids().values()) + [f.services.pid(s) for s in f.services.services]
            paused = f.busy_workers()[0]["pid"]
            f.pause_worker(paused)                          # and one stopped by SIGSTOP
            raise RuntimeError("the caller failed")
    assert _all_dead(pids)
    assert list(tmp_path.iterdir()) == []
    f.stop()                                                # idempotent
    with pytest.raises(FleetError):
        f.submit(1)


def test_a_fleet_that_fails_to_start_stops_what_it_started(tmp_path, monkeypatch, services):
    started: list[int] = []
    real = Fleet.spawn_worker

    def spawn_then_fail(self):
        if len(self._procs) == 1:
            started.extend(p.pid for p in self._procs.values())
            raise OSError("no more processes")
        return real(self)

    monkeypatch.setattr(Fleet, "spawn_worker", spawn_then_fail)
    with pytest.raises(OSError):
        Fleet(3, workdir=tmp_path, services=services)
    assert started and _all_dead(started)
    assert list(tmp_path.iterdir()) == []
    assert not services.is_down("dns")                     # a fleet given services leaves them running


def test_bad_arguments_are_refused_before_anything_starts(tmp_path):
    for kw in ({"workers": 0}, {"coordinator": "zk"}, {"durability": "maybe"}, {"lease_ttl_s": 0},
               {"store": "memory"}, {"workdir": tmp_path / "missing"}):
        with pytest.raises(ConfigError):
            Fleet(**kw)
    assert list(tmp_path.iterdir()) == []


# --- the command -----------------------------------------------------------------------------------


def test_fleet_run_command_prints_json_and_exits_0_when_every_trajectory_ended_cleanly(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.run([sys.executable, "-m", "kernel_lib", "fleet", "run", "--workers", "2", "--trajectories", "3",
                        "--json", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout)
    assert r["ok"] and r["summary"]["outcomes"] == {"COMPLETED": 3} and r["throughput_per_s"] > 0
    assert r["fleet"]["coordinator"] == "sqlite" and len(r["trajectories"]) == 3
    assert list(tmp_path.iterdir()) == []
    bad = subprocess.run([sys.executable, "-m", "kernel_lib", "fleet", "run", "--workers", "0"], capture_output=True,
                         text=True, timeout=60, env=env)
    assert bad.returncode == 2 and "--workers" in bad.stderr
    unwound = subprocess.run([sys.executable, "-m", "kernel_lib", "fleet", "run", "--trajectories", "1", "--param",
                              "fail_at_dns=true", "--json", "--dir", str(tmp_path)], capture_output=True, text=True,
                             timeout=120, env=env)
    assert unwound.returncode == 0 and json.loads(unwound.stdout)["summary"]["outcomes"] == {"ABORT_CONSISTENT": 1}
    unknown = subprocess.run([sys.executable, "-m", "kernel_lib", "fleet", "run", "--program", "nope"],
                             capture_output=True, text=True, timeout=60, env=env)
    assert unknown.returncode == 2 and "unknown fleet program" in unknown.stderr


def test_ctrl_c_of_fleet_run_stops_every_process_removes_the_directory_and_prints_no_traceback(tmp_path):
    """Adversarial review (issue 20): SIGINT of `fleet run` cleaned up but ended in a raw traceback."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.Popen([sys.executable, "-m", "kernel_lib", "fleet", "run", "--workers", "1", "--trajectories", "1",
                          "--param", "pause_at=3", "--dir", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        markers: list[Path] = []
        while not markers and time.monotonic() < deadline and p.poll() is None:
            markers = list(tmp_path.glob("kl-fleet-*/markers/*.json"))
            time.sleep(0.05)
        assert markers, "the worker never paused inside its trajectory"
        time.sleep(0.1)
        worker = json.loads(markers[0].read_text())["pid"]
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err[-2000:]
    assert "Traceback" not in err and err.startswith("interrupted")
    assert _all_dead([worker])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("program, params", [
    ("deployment", {"extra_steps": -1}), ("deployment", {"fail_at_dns": "maybe"}), ("deployment", {"nonsense": 1}),
    ("deployment", {"pause_at": "three"}), ("sysadmin", {"config": "foo"}), ("sysadmin", {"process_kill": 0.5}),
    ("sysadmin", {"profile": {"process_kil": 0.5}}), ("sysadmin", {"profile": {"process_kill": 2}}),
    ("sysadmin", {"turns": 3}), ("sysadmin", {"timings": [1]}),
])
def test_parameters_a_program_would_refuse_are_refused_before_anything_starts(tmp_path, program, params):
    """Adversarial review (issue 20): `fleet run --param extra_steps=-1` (or a misspelt name) started the
    fleet, failed in every worker that claimed the trajectory until it was given up, reported those
    claims as takeovers and exited 1; an unknown name was silently ignored."""
    from kernel_lib.cli import main
    from kernel_lib.live.fleet_programs import check_params

    with pytest.raises(ConfigError):
        check_params(program, params)
    argv = ["fleet", "run", "--trajectories", "1", "--program", program, "--dir", str(tmp_path)]
    for k, v in params.items():
        argv += ["--param", f"{k}={json.dumps(v)}"]
    assert main(argv) == 2
    assert list(tmp_path.iterdir()) == []


def test_the_parameters_the_programs_document_are_accepted():
    from kernel_lib.live.fleet_programs import check_params

    check_params("deployment", {"domain": "x.example.test", "fail_at_dns": True, "extra_steps": 3, "pause_at": 16,
                                "stall": True, "kill_at": 5, "kill_epoch": 2})
    check_params("sysadmin", {"config": "wal_only", "seed": 3, "index": 2, "turns": 8, "timings": {"probe_s": 0.01},
                              "profile": {"network_drop": 0.1, "process_kill": 0.05}})
    with pytest.raises(ConfigError):
        check_params("nope", {})


def test_fleet_run_help_names_every_registered_program(capsys):
    """The --help text is written without importing the programs (start-up); it must still name
    each one a user can pass to --program."""
    from kernel_lib.cli import main
    from kernel_lib.live.fleet_programs import PROGRAMS

    with pytest.raises(SystemExit):
        main(["fleet", "run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert PROGRAMS and all(name in text for name in PROGRAMS)
