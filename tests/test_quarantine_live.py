"""Issue 19: quarantine on real processes, cgroups and network namespaces (Failure Recovery,
table 12, Example 0.2).

Fault model: a trajectory's process tree (a parent, children, a grandchild) keeps running and
its tool process can reach the network. Invariants: after stage 1 no member of the tree advances
its counter and none is running (cgroup v1 freezer, cgroup v2 freeze, SIGSTOP); after stage 3 a
request from inside the namespace that was answered before gets no answer; nothing the tests made
is left behind (cgroups, namespaces, veth links), also when a test body fails. These tests need
root, a writable cgroup hierarchy and ``ip``; they skip with the reason otherwise (on the course
machines they run).
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest

from kernel_lib.live.quarantine import (
    CgroupFreezer, NetnsSandbox, QuarantineSupervisor, SigstopFreezer, python_module,
    tree_progress,
)
from kernel_lib.recovery.quarantine import QuarantineTrigger
from tests.quarantine_support import (
    CAPS, SANDBOX, assert_nothing_left, need_netns, need_v1, need_v2, start_agent, stop_agent,
)



@pytest.fixture(autouse=True)
def nothing_left_behind():
    yield
    assert_nothing_left()


_agent, _stop = start_agent, stop_agent


@pytest.mark.parametrize("version", [pytest.param(1, marks=need_v1), pytest.param(2, marks=need_v2)])
def test_the_cgroup_freezer_stops_the_whole_tree(tmp_path, version):
    with CgroupFreezer(version=version) as fz:
        proc, counters = _agent(tmp_path, freezer=fz)
        try:
            pids = fz.pids()
            assert len(pids) == 4 and proc.pid in pids   # parent, two children, a grandchild: all born inside
            assert not tree_progress(counters, pids, wait_s=0.1)["stopped"]   # running before
            ms = fz.freeze()
            assert ms > 0 and fz.is_frozen()
            p = tree_progress(counters, pids, wait_s=0.3)
            assert p["stopped"] and p["counters"] == 4, p
            fz.thaw()
            assert not tree_progress(counters, pids, wait_s=0.2)["stopped"]   # thawed, it runs again
        finally:
            fz.close()   # kills the tree (thawing it so the SIGKILL lands) and removes the cgroup
            proc.wait(timeout=10)
        assert not fz.path.exists() and proc.returncode == -9


def test_sigstop_stops_the_process_group(tmp_path):
    proc, counters = _agent(tmp_path)
    try:
        fz = SigstopFreezer(proc.pid)
        pids = fz.pids()
        assert len(pids) == 4
        fz.freeze()
        p = tree_progress(counters, pids, wait_s=0.3)
        assert p["stopped"] and set(p["states"].values()) == {"T"}, p
        fz.close()
    finally:
        _stop(proc)


def _http_server(host: str):
    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer((host, 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _probe(ns, url, tmp_path):
    proc = subprocess.run(ns.command(python_module(SANDBOX, "probe", "--url", url, "--timeout-s", "1")),
                          capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


@need_netns
def test_a_request_from_inside_the_namespace_fails_after_the_cut(tmp_path):
    with NetnsSandbox() as ns:
        srv = _http_server(ns.host_ip)
        try:
            url = f"http://{ns.host_ip}:{srv.server_address[1]}"
            code, before = _probe(ns, url, tmp_path)
            assert code == 0 and before["status"] == 200
            cut = ns.cut()
            assert cut["egress_cut_ms"] > 0 and cut["blackhole_ms"] >= cut["egress_cut_ms"]
            code, after = _probe(ns, url, tmp_path)
            assert code == 3 and not after["answered"], after
            assert all("blackhole" in q for q in ns.qdiscs().values())
        finally:
            srv.shutdown()
            srv.server_close()
    assert not ns.exists()


@need_netns
@need_v1
def test_cgroups_and_namespaces_are_removed_when_the_body_fails(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with CgroupFreezer() as fz, NetnsSandbox() as ns:
            proc, _ = _agent(tmp_path, freezer=fz, netns=ns)
            fz.freeze()
            raise RuntimeError("boom")
    proc.wait(timeout=10)
    assert not fz.path.exists() and not ns.exists()


def test_the_supervisor_runs_the_stages_and_resumes_from_the_tombstone(tmp_path):
    """Without root: SIGSTOP, the gateway, a fake broker; a supervisor that died after the
    tombstone revokes again and applies the tombstone again when resumed."""
    from kernel_lib.core.events import TaskStarted
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
    from kernel_lib.live.quarantine import GatewaySever
    from kernel_lib.log import MemoryStore, TrajectoryLog
    from kernel_lib.recovery.quarantine import EgressGuard, EgressPolicy, TaintLedger

    gate = DispatchGate(TrajectoryLog(MemoryStore(), "t1", must_survive="none"), AdmissionPolicy({}))
    gate.start(TaskStarted(task_id="t", requester="r", objective="o", budget_ceiling_usd=1.0))
    revoked_calls = []
    ledger = TaintLedger(tmp_path / "l.sqlite")
    guard = EgressGuard(EgressPolicy(frozenset({"git.internal.example"})))
    proc, counters = _agent(tmp_path, children=1)
    try:
        sup = QuarantineSupervisor(gate=gate, freezer=SigstopFreezer(proc.pid), sever=GatewaySever(guard, "t1"),
                                   revoke=lambda t: revoked_calls.append(t) or ["lease-1"], ledger=ledger, guard=guard)
        rep = sup.quarantine(QuarantineTrigger("operator", "t1", 1), taint_from_sequence=1)
        assert not rep.errors and rep.mechanisms == {"suspend": "sigstop", "sever": "gateway"}
        assert set(rep.stage_ms) == {"suspend", "sever", "revoke", "taint"}
        assert rep.at_ms["revoke"] >= max(rep.at_ms["suspend"], rep.at_ms["sever"]) - 1e-6   # wave 2 after wave 1
        assert gate.record.control_state == "FROZEN" and guard.is_severed("t1")
        assert tree_progress(counters, sup.freezer.pids(), wait_s=0.2)["stopped"]
        again = QuarantineSupervisor(gate=gate, revoke=lambda t: revoked_calls.append(t) or [], ledger=ledger).resume()
        assert again["quarantine_id"] == rep.quarantine_id and again["ledger"]["already_applied"]
        assert revoked_calls == ["t1", "t1"]
    finally:
        _stop(proc)


@pytest.mark.skipif(not (CAPS.netns and (CAPS.cgroup_v1_freezer or CAPS.cgroup_v2)),
                    reason="the full demo needs root, a cgroup freezer and network namespaces")
def test_the_demo_command_measures_example_0_2_on_this_machine(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kernel_lib", "quarantine", "demo", "--json", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-2000:]
    r = json.loads(proc.stdout)
    for k in ("freeze_ms", "egress_cut_ms", "revocation_ms", "taint_ms", "policy_check_ms"):
        assert isinstance(r[k], float) and r[k] > 0, k
    assert r["suspend_mechanism"] == "cgroup_freezer" and r["sever_mechanism"] == "netns"
    for k in ("request_after_cut_failed", "tainted_read_refused", "model_clearance_refused", "tree_stopped",
              "revoked_lease_refused", "suspect_read_refused", "dispatch_refused", "clean"):
        assert r[k] is True, k
    assert r["revoked_request_status"] == 401 and r["control_state"] == "FROZEN"
    rows = {row["event"]: row for row in r["timeline"]["rows"]}
    assert rows["egress severed"]["chapter_ms"] == pytest.approx(1.5) and rows["leases revoked"]["chapter_ms"] == \
        pytest.approx(43.1)
    assert "measured" in r["timeline"]["labels"]["measured"] and list(tmp_path.iterdir()) == []


def test_the_gateway_and_sigstop_fallback_runs_the_same_checks(tmp_path):
    from kernel_lib.live.quarantine_demo import run_quarantine_demo

    r = run_quarantine_demo(tmp_path, suspend="sigstop", sever="gateway", children=1)
    assert (r["suspend_mechanism"], r["sever_mechanism"]) == ("sigstop", "gateway")
    assert r["request_after_cut_failed"] and r["tree_stopped"] and r["tainted_read_refused"]
    assert r["model_clearance_refused"] and r["revoked_lease_refused"] and r["clean"]
    assert "asked for" in r["choice"]["reasons"]["sever"]


def test_quarantine_help_loads_nothing_heavy(tmp_path):
    from tests.test_cli_startup import HEAVY, _loaded, _top

    code, mods = _loaded("quarantine", "demo", "--help", cwd=tmp_path)
    assert code == 0
    wrong = sorted(m for m in _top(mods) if m in HEAVY or m in ("kernel_lib.live", "kernel_lib.recovery",
                                                                 "kernel_lib.core", "kernel_lib.log"))
    assert not wrong, wrong
