"""The crash worksheet with real processes (issue 3): SIGKILL a worker, recover in a new process.

Fault model: the worker process is killed with SIGKILL right after an event for test_r18 is
durable (Authorized, BudgetReserved, ToolIntent, ToolResult), on both durable stores.
Invariant: the replacement's fold invents no outcome, holds the reservation of any admitted
attempt, and concludes what table 3 predicts; reconciliation records only evidence whose
Ed25519 signature verifies. Goal: a verified test result when the executor has one, and nothing
left behind (processes, port, temp files).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_lib.errors import KernelError
from kernel_lib.live.controller import port_accepts, run_worksheet
from kernel_lib.errors import EvidenceSignatureError, SnapshotMismatchError
from kernel_lib.live.executor import job_handle_for, verify_completion
from kernel_lib.sim.model import StochasticModel
from kernel_lib.live.workspace import build_snapshot, manifest_digest, remove_tree, verify
from kernel_lib.resume.stages import DEFAULT_PREFILL, STAGE_NAMES, PrefillModel, ResumeTimeline

from .conftest import DURABLE_KINDS
from tests.helpers import group_gone, process_gone

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("store_kind", DURABLE_KINDS)
@pytest.mark.parametrize("crash_after", ["Authorized", "BudgetReserved", "ToolIntent", "ToolResult"])
def test_sigkill_worker_and_recover(crash_after, store_kind, tmp_path):
    # a private parent directory, so concurrent test runs cannot see each other's work directories
    r = run_worksheet(crash_after, store_kind, workdir=tmp_path, seed=7, test_delay_s=1.0, reconcile_timeout_s=60,
                      step_timeout_s=60)
    crash, ex, rec, recon = r["crash"], r["executor"], r["recovered"], r["reconciled"]
    assert crash["signal"] == "SIGKILL" and crash["worker_exit"] == -9 and crash["paused_at"] == crash_after
    assert rec["log_position"] == crash["log_position"]   # the fold covers exactly the surviving log
    op = rec["operations"].get("test_r18")
    held = rec["budget"]["outstanding_reservations"]
    action = recon["actions"]["test_r18"]

    if crash_after == "Authorized":
        # authorized, not yet admitted: not dispatched, nothing in doubt, no reservation for it
        assert op["status"] == "proposed" and op["conclusion"] == "not_dispatched"
        assert "res-test_r18/attempt1" not in held
        assert ex["status_at_crash"] == "unknown" and not ex["job_running_at_crash"]
        assert action["action"] == "not dispatched"
    elif crash_after == "BudgetReserved":
        assert op["status"] == "admitted" and op["conclusion"] == "not_dispatched"
        assert held == {"res-test_r18/attempt1": 0.5}
        assert ex["status_at_crash"] == "unknown" and not ex["job_running_at_crash"]
        assert action["action"] == "not dispatched" and "do not dispatch automatically" in action["note"]
        assert recon["operations"]["test_r18"]["status"] == "admitted"   # no dispatch by recovery
    elif crash_after == "ToolIntent":
        assert op["status"] == "in_doubt" and op["attempt_id"] == "attempt1" and op["job_handle"] is None
        assert held == {"res-test_r18/attempt1": 0.5}
        # paused right after the intent: the request never left, and the executor knows no job
        assert ex["status_at_crash"] == "unknown" and not ex["job_running_at_crash"]
        assert action["executor_status"] == "unknown" and action["action"] == "kept in doubt"
        assert "no job known to the executor for test_r18" in action["note"] and "contract" in action["note"]
        assert recon["in_doubt"] == ["test_r18"]
        assert recon["budget"]["outstanding_reservations"] == {"res-test_r18/attempt1": 0.5}
    else:  # ToolResult: the acceptance with the job handle is logged; the test is still running
        assert op["status"] == "in_doubt" and op["attempt_id"] == "attempt1"
        assert op["job_handle"] == "job_tests_18" and op["last_result_status"] == "accepted"
        assert held == {"res-test_r18/attempt1": 0.5}
        assert ex["job_running_at_crash"] and ex["job_handle"] == "job_tests_18"
        assert action["action"] == "recorded verified evidence" and action["signature_verified"] is True
        final = recon["operations"]["test_r18"]
        assert final["status"] == "established" and final["outcome"]["passed"] == 5
        assert final["outcome"]["failed"] == 0
        assert recon["in_doubt"] == [] and recon["budget"]["outstanding_reservations"] == {}
        # the recorded evidence is the signed record itself, and it still verifies from the log
        full = recon["record"]["operations"]["test_r18"]
        signed = json.loads(full["evidence"]["signed_record"])
        signed["signature"] = full["evidence"]["signature_ed25519"]
        assert signed["operation_id"] == "test_r18" and signed["attempt_id"] == "attempt1"
        assert recon["budget"]["actual_consumption_usd"] > rec["budget"]["actual_consumption_usd"]
        assert recon["owner_epoch"] == 1
    if crash_after != "ToolResult":   # no invented outcome anywhere
        assert all(o["outcome"] is None for k, o in recon["operations"].items() if o["kind"] == "tool")
    # the replacement timed each stage of eq. 7 it ran (§11.5); the prefill is computed, not measured
    tl = ResumeTimeline.from_dict(r["resume_timeline"])
    assert [s.name for s in tl.stages] == list(STAGE_NAMES)
    for name in ("ownership", "checkpoint_suffix_read", "fold", "workspace_restore", "reconciliation"):
        assert tl.stage(name).measured and tl.stage(name).duration_s > 0, name
    assert not tl.stage("prefill").measured
    assert tl.stage("prefill").duration_s == pytest.approx(DEFAULT_PREFILL.prefill_s)
    assert tl.critical_path_s <= tl.serial_sum_s
    # the fold reproduces the recorded model reply; a fresh sample is a different continuation
    m = r["model"]
    assert m["recorded_reply"] == StochasticModel(7).reply(_prompt_of(recon)).reply
    assert m["fresh_reply"] != m["recorded_reply"]

    # nothing left behind
    assert process_gone(r["processes"]["worker_pid"]) and process_gone(r["processes"]["executor_pid"])
    assert group_gone(r["processes"]["executor_pid"]) and group_gone(r["processes"]["worker_pid"])
    assert r["cleanup"]["workdir_removed"] and r["cleanup"]["executor_port_closed"]
    assert not port_accepts(ex["port"])
    assert list(tmp_path.iterdir()) == []   # the run's work directory (snapshot, log, job trees) is gone


def test_session_reconcile_reports_the_timed_resume(tmp_path):
    """After a real SIGKILL right after the durable intent, ``reconcile()`` carries the
    replacement's timed stages: five measured on this machine, the prefill computed from the
    given model; an inspection-only ``recovered()`` times only the read and the fold."""
    from kernel_lib.live.session import WorksheetSession

    prefill = PrefillModel(32_000, 1_000, 5_000.0)
    with WorksheetSession("sqlite", seed=0, test_delay_s=0.5, workdir=tmp_path) as s:
        s.start(pause_at="ToolIntent")
        s.crash()
        looked = ResumeTimeline.from_dict(s.recovered()["resume_timeline"])
        assert [n for n in STAGE_NAMES if looked.stage(n).measured] == ["checkpoint_suffix_read", "fold"]
        assert looked.stage("ownership").duration_s == 0 and not looked.prefill.needed
        out = s.reconcile(timeout_s=10, prefill=prefill)
        tl = ResumeTimeline.from_dict(out["resume_timeline"])
        assert out["actions"]["test_r18"]["action"] == "kept in doubt"        # the usual keys are still there
        assert s.resume_timeline == out["resume_timeline"]
        for name in ("ownership", "checkpoint_suffix_read", "fold", "workspace_restore", "reconciliation"):
            st = tl.stage(name)
            assert st.measured and st.duration_s > 0 and st.source == "measured on this machine", name
        assert "copied" in tl.stage("workspace_restore").detail
        assert tl.prefill == prefill and tl.stage("prefill").duration_s == pytest.approx((32_000 - 1_000) / 5_000.0)
        assert tl.stage("prefill").source == "computed from the prefill model (given)"
        assert tl.serial_sum_s == pytest.approx(sum(tl.durations_s.values()))
        assert tl.critical_path[-2:] == ["reconciliation", "prefill"]        # the prefill given dominates
        assert tl.availability_s > 0
    assert list(tmp_path.iterdir()) == []


def _prompt_of(reconciled: dict) -> str:
    from kernel_lib.sim.model import repair_prompt
    return repair_prompt(reconciled["record"]["task"]["workspace_ref"])


def test_keep_copies_the_log_and_the_cli_folds_it(tmp_path):
    r = run_worksheet("ToolIntent", "sqlite", seed=1, test_delay_s=0.2, reconcile_timeout_s=5,
                      keep=tmp_path / "kept")
    out = subprocess.run([sys.executable, "-m", "kernel_lib", "fold", "--json", "--log", r["kept_log"]],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert json.loads(out)["in_doubt"] == ["test_r18"]


def test_cli_worksheet_json_and_bad_input():
    p = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--crash-after", "BudgetReserved",
                        "--store", "segment", "--test-delay-s", "0.1", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert set(r) >= {"crash", "executor", "recovered", "reconciled"}
    assert r["recovered"]["operations"]["test_r18"]["status"] == "admitted"
    bad = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--crash-after", "Nope"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown crash point" in bad.stderr and "1 TaskStarted#1" in bad.stderr
    with pytest.raises(KernelError):
        run_worksheet("Nope")


# ------------------------------------------------------------------------------------------------
# units: snapshot digest, signatures
# ------------------------------------------------------------------------------------------------


def test_snapshot_is_content_addressed_read_only_and_verified(tmp_path):
    s = build_snapshot(tmp_path / "snaps")
    assert s.digest == manifest_digest(s.manifest) and s.path.name == f"ws_r18-{s.digest[:16]}"
    assert set(s.manifest) == {"pytest.ini", "stats.py", "tests/test_stats.py"}
    assert "(ordered[mid - 1] + ordered[mid]) / 2" in (s.path / "stats.py").read_text()   # patch r18 applied
    assert not os.stat(s.path / "stats.py").st_mode & 0o222
    assert verify(s.path, s.digest) == s.manifest
    assert build_snapshot(tmp_path / "snaps").digest == s.digest   # same content, same name
    # the digest does not depend on where the snapshot lives, only on content
    base_only = build_snapshot(tmp_path / "base", patch_file=None)
    assert base_only.digest != s.digest
    with pytest.raises(SnapshotMismatchError):
        verify(s.path, base_only.digest)
    (s.path / "stats.py").chmod(0o644)
    (s.path).chmod(0o755)
    (s.path / "stats.py").write_text("tampered\n")
    with pytest.raises(SnapshotMismatchError):
        verify(s.path, s.digest)
    (s.path / "stats.py").write_text((base_only.path / "stats.py").read_text())   # unpatched content
    with pytest.raises(SnapshotMismatchError):
        verify(s.path, s.digest)
    with pytest.raises(SnapshotMismatchError):
        verify(tmp_path / "missing", s.digest)
    remove_tree(tmp_path / "snaps")
    remove_tree(tmp_path / "base")


def test_base_repository_really_fails_and_the_patch_fixes_it(tmp_path):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    for patch, want_rc in ((None, 1), ("default", 0)):
        s = build_snapshot(tmp_path / str(want_rc), **({"patch_file": None} if patch is None else {}))
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=s.path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == want_rc, p.stdout[-500:]
        remove_tree(tmp_path / str(want_rc))


def _signed_record():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from kernel_lib.live.executor import signing_bytes
    key = Ed25519PrivateKey.generate()
    rec = {"operation_id": "test_r18", "attempt_id": "attempt1", "job_handle": "job_tests_18", "status": "completed",
           "outcome": {"passed": 5, "failed": 0}, "charged_usd": 0.03}
    rec["signature"] = key.sign(signing_bytes(rec)).hex()
    return key, rec


def test_completion_signature_verifies_and_tampering_is_rejected(tmp_path):
    key, rec = _signed_record()
    pub = key.public_key()
    assert verify_completion(rec, pub) is rec
    key_file = tmp_path / "k.pub"
    key_file.write_text(pub.public_bytes_raw().hex() + "\n")
    verify_completion(rec, key_file)
    verify_completion(rec, pub.public_bytes_raw().hex())
    for tamper in ({"status": "failed"}, {"outcome": {"passed": 4, "failed": 1}}, {"charged_usd": 0.0},
                   {"attempt_id": "attempt2"}, {"signature": "00" * 64}, {"signature": "not hex"}):
        with pytest.raises(EvidenceSignatureError):
            verify_completion({**rec, **tamper}, pub)
    other, _ = _signed_record()
    with pytest.raises(EvidenceSignatureError):
        verify_completion(rec, other.public_key())
    with pytest.raises(EvidenceSignatureError):
        verify_completion({k: v for k, v in rec.items() if k != "signature"}, pub)


def test_job_handle_and_model_determinism():
    assert job_handle_for("test_r18") == "job_tests_18"
    assert job_handle_for("deploy") == job_handle_for("deploy") != job_handle_for("deploy2")
    a, b = StochasticModel(3).reply("prompt"), StochasticModel(3).reply("prompt")
    assert a == b
    assert len({StochasticModel(s).reply("prompt").reply for s in range(20)}) > 3


_ORPHAN_SCRIPT = """
import sys, json
from kernel_lib.live.session import WorksheetSession
s = WorksheetSession(test_delay_s=60.0, workdir=sys.argv[1])
r = s.start(pause_at="ToolResult")
print(json.dumps({"executor": s._executor.pid, "worker": r["worker_pid"], "workdir": str(s.workdir)}), flush=True)
import time; time.sleep(600)
"""


def test_helpers_shut_down_when_their_controller_is_killed(tmp_path):
    """Fault model: the notebook kernel that owns a worksheet session is killed (SIGKILL, OOM).
    Invariant: no executor, worker or test process outlives it for long; its work directory is
    swept by the next controller. Goal: nothing left behind on the student's machine."""
    import signal
    import time

    from kernel_lib.live.controller import make_workdir
    ctl = subprocess.Popen([sys.executable, "-c", _ORPHAN_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(ctl.stdout.readline())
    finally:
        os.kill(ctl.pid, signal.SIGKILL)
        ctl.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (process_gone(info["executor"]) and process_gone(info["worker"])):
        time.sleep(0.2)
    assert process_gone(info["executor"]) and group_gone(info["executor"])
    assert process_gone(info["worker"]) and group_gone(info["worker"])
    assert Path(info["workdir"]).exists()             # the dead controller could not remove it...
    fresh = make_workdir(tmp_path)                    # ...the next one sweeps it
    assert not Path(info["workdir"]).exists() and fresh.exists()


def test_cli_worksheet_cleans_up_on_sigterm(tmp_path):
    import signal
    import time
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.Popen([sys.executable, "-m", "kernel_lib", "worksheet", "--test-delay-s", "60",
                          "--reconcile-timeout-s", "120"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    deadline = time.monotonic() + 60
    ready = []
    while time.monotonic() < deadline and not ready:
        ready = list(tmp_path.glob("kernel_lib_live_*/executor/ready.json"))
        time.sleep(0.2)
    assert ready, "the executor never reported"
    executor_pid = json.loads(ready[0].read_text())["pid"]
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "interrupted" in err
    assert process_gone(executor_pid) and not list(tmp_path.glob("kernel_lib_live_*"))


def test_cli_worksheet_refuses_a_non_finite_timeout():
    for bad in ("nan", "inf", "-5"):
        r = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--reconcile-timeout-s", bad],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "reconcile_timeout_s" in r.stderr and "Traceback" not in r.stderr


def test_a_record_waiting_in_the_result_inbox_settles_test_r18_without_asking_the_executor(tmp_path):
    """Fault model: the worker is SIGKILLed after the executor accepted test_r18; the test finishes
    while no worker exists. Invariant: the executor's signed completion record is kept in the
    durable result inbox, outside every process that could die with the worker. Goal: the
    replacement ingests it (authenticated again) and settles test_r18 from it, asking the executor
    nothing about that operation."""
    import time

    from kernel_lib.live.session import WorksheetSession

    with WorksheetSession("sqlite", seed=0, test_delay_s=0.2, workdir=tmp_path) as s:
        s.start(pause_at="ToolResult")
        s.crash()
        deadline = time.monotonic() + 60
        while s._executor_status().get("status") == "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s._executor_status().get("status") == "completed"
        out = s.reconcile(timeout_s=10)
        act = out["actions"]["test_r18"]
        assert act["source"] == "inbox" and act["action"] == "recorded verified evidence", act
        assert [o["action"] for o in out["inbox"]["outcomes"]] == ["established"]
        sources = [e["payload"]["source"] for e in (ev.to_dict() for ev in s.events())
                   if e["event_type"] == "ToolResult"]
        assert sources == ["reply", "inbox"]
        assert out["record"]["operations"]["test_r18"]["status"] == "established"


# ------------------------------------------------------------------------------------------------
# the replacement's arguments and ownership (in process: nothing here needs the executor)
# ------------------------------------------------------------------------------------------------

def _replacement_log(tmp_path):
    """An SQLite log holding the worksheet's TaskStarted (it names a ws_r18 digest), and a public
    key file. Returns (log path, key path)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    import kernel_lib.live.worker as worker
    from kernel_lib.log import SQLiteStore, TrajectoryLog

    path = tmp_path / "log.sqlite"
    store = SQLiteStore.open(path, create=True)
    TrajectoryLog(store, worker.TRAJECTORY, must_survive="host_crash").append(worker.task("ab" * 32))
    store.close()
    key = tmp_path / "executor.pub"
    key.write_text(Ed25519PrivateKey.generate().public_key().public_bytes_raw().hex() + "\n")
    return path, key


def _fence(path):
    import kernel_lib.live.worker as worker
    from kernel_lib.log import SQLiteStore

    s = SQLiteStore.open(path, read_only=True)
    try:
        return s.fence(worker.TRAJECTORY)
    finally:
        s.close()


def test_worker_help_names_its_caller_and_explains_every_option():
    import kernel_lib.live.worker as worker

    ap = worker.build_parser()
    assert "python -m kernel_lib worksheet" in ap.description and "internal" in ap.description
    undocumented = [a.option_strings[0] for a in ap._actions if a.option_strings and not a.help]
    assert undocumented == []


def test_replacement_refuses_bad_paths_before_taking_ownership(tmp_path, capsys, monkeypatch):
    """Fault model: the replacement is started with a --restore-root that does not exist (or is a
    file), an --inbox that is a directory, lies in a missing directory or is not an SQLite inbox,
    a --workspace-snapshot that does not exist, or no usable --public-key. Invariant: arguments
    are checked before ownership. Goal: exit 2 with ``error: ...`` (no traceback), no lease in
    the coordinator, the log's fence unchanged, no inbox file created."""
    import kernel_lib.live.worker as worker
    from kernel_lib.live.orphan import PARENT_ENV
    from kernel_lib.ownership.leases import SQLiteOwnershipCoordinator

    import sqlite3

    monkeypatch.delenv(PARENT_ENV, raising=False)
    path, key = _replacement_log(tmp_path)
    coord = tmp_path / "leases.sqlite"
    (tmp_path / "adir").mkdir()
    (tmp_path / "garbage.sqlite").write_bytes(b"not sqlite" * 200)
    other_db = tmp_path / "other.sqlite"
    db = sqlite3.connect(other_db)
    db.execute("CREATE TABLE unrelated (x)")
    db.commit()
    db.close()
    base = ["--recover", "--reconcile", "--store", "sqlite", "--store-path", str(path), "--coordinator", str(coord),
            "--owner-id", "B", "--public-key", str(key)]
    cases = [
        (["--restore-root", str(tmp_path / "no" / "such")], "--restore-root"),
        (["--restore-root", str(key)], "not a directory"),
        (["--workspace-snapshot", str(tmp_path / "no-snapshot")], "--workspace-snapshot"),
        (["--inbox", str(tmp_path / "adir")], "is a directory"),
        (["--inbox", str(tmp_path / "no" / "inbox.sqlite")], "does not exist"),
        (["--inbox", str(tmp_path / "garbage.sqlite")], "not a readable SQLite"),
        (["--inbox", str(other_db)], "completions"),
        (["--public-key", str(tmp_path / "missing.pub")], "--public-key"),
    ]
    for extra, match in cases:
        rc = worker.main(base + extra)
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith("error: ") and match in err and "Traceback" not in err, (extra, err)
    rc = worker.main([a for a in base if a != str(key) and a != "--public-key"])
    assert rc == 2 and "--public-key" in capsys.readouterr().err
    assert _fence(path) == 0
    if coord.exists():
        with SQLiteOwnershipCoordinator.open(coord) as c:
            assert c.current(worker.TRAJECTORY) is None
    # an absent inbox in an existing directory is fine: the run goes through and takes ownership
    rc = worker.main(base + ["--inbox", str(tmp_path / "fresh.sqlite"), "--restore-root", str(tmp_path)])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["reconciled"]["owner_epoch_installed"] == 1 == _fence(path)


def test_replacement_gives_its_lease_back_when_it_fails_after_ownership(tmp_path, capsys, monkeypatch):
    """Fault model: the replacement is granted the lease and fences the log, then fails (here the
    workspace snapshot does not hash to the digest the log names). Invariant: a failed owner does
    not block the next replacement for the lease's ttl. Goal: exit 2 with the typed error, the
    lease released (its epoch stays the log's fence), and the next replacement granted at once."""
    import kernel_lib.live.worker as worker
    from kernel_lib.live.orphan import PARENT_ENV
    from kernel_lib.ownership.leases import SQLiteOwnershipCoordinator

    monkeypatch.delenv(PARENT_ENV, raising=False)
    path, key = _replacement_log(tmp_path)
    coord = tmp_path / "leases.sqlite"
    (tmp_path / "not_the_snapshot").mkdir()
    base = ["--recover", "--reconcile", "--store", "sqlite", "--store-path", str(path), "--coordinator", str(coord),
            "--public-key", str(key), "--lease-ttl-s", "600", "--lease-wait-s", "0"]
    rc = worker.main(base + ["--owner-id", "A", "--workspace-snapshot", str(tmp_path / "not_the_snapshot")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and "Traceback" not in err
    with SQLiteOwnershipCoordinator.open(coord) as c:
        lease = c.current(worker.TRAJECTORY)
    assert lease.owner_id == "A" and lease.released and _fence(path) == lease.owner_epoch == 1
    rc = worker.main(base + ["--owner-id", "B"])                   # no LeaseHeldError, no 600 s wait
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["ownership"]["lease"]["owner_epoch"] == 2 == _fence(path)


def test_two_replacements_racing_without_a_coordinator_never_share_an_epoch(tmp_path, capsys, monkeypatch):
    """Fault model: two replacements run ``--recover --reconcile`` on one SQLite log at once,
    without a coordinator. Every read of the log's fence through a writable handle waits for the
    other replacement's, pinning the interleaving in which both read it before either installs.
    Invariant: no two owners hold one epoch. Goal: the two install different epochs."""
    import threading

    import kernel_lib.live.worker as worker
    from kernel_lib.live.orphan import PARENT_ENV
    from kernel_lib.log import SQLiteStore

    monkeypatch.delenv(PARENT_ENV, raising=False)
    path, key = _replacement_log(tmp_path)
    barrier = threading.Barrier(2)
    read = SQLiteStore.fence

    def fence(self, tid):
        value = read(self, tid)
        if not self.read_only:
            try:
                barrier.wait(2.0)
            except threading.BrokenBarrierError:
                pass
        return value
    monkeypatch.setattr(SQLiteStore, "fence", fence)
    rcs: list[int] = []
    args = ["--recover", "--reconcile", "--store", "sqlite", "--store-path", str(path), "--public-key", str(key)]
    threads = [threading.Thread(target=lambda: rcs.append(worker.main(args))) for _ in range(2)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    outs = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines() if line.startswith("{")]
    assert rcs == [0, 0] and len(outs) == 2
    assert sorted(o["reconciled"]["owner_epoch_installed"] for o in outs) == [1, 2] and _fence(path) == 2
