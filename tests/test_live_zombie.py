"""The zombie handoff for real (§11.5.1): SIGSTOP, lease expiry, takeover, SIGCONT.

Fault model: the worker that owns traj_repair_r18 under a lease (owner_epoch 1) is suspended
with SIGSTOP right after it dispatched test_r18 — not killed — and outlives its lease; a
replacement is granted owner_epoch 2; then the old worker resumes with SIGCONT and acts on its
stale belief (late append, late dispatch through its gate, its request re-sent to the executor).
Invariant: every late action is refused at a boundary that checks the epoch (log, gate,
executor); the log's owner_epochs never go down; test_r18 is dispatched exactly once and is
settled by the new owner's reconciliation, never re-dispatched. Goal: a run that shows the
epochs, each refusal and the preserved operation, and leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kernel_lib.errors import ConfigError
from kernel_lib.live.controller import port_accepts, run_zombie
from tests.helpers import group_gone, process_gone


def test_zombie_worker_is_fenced_at_every_boundary(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--zombie", "--json",
                        # the test must outlast the replacement's start-up (seconds on a loaded
                        # machine), so that it reconciles a running job, not an inbox record
                        "--test-delay-s", "6.0", "--lease-ttl-s", "1.0"],
                       capture_output=True, text=True, timeout=300, env=env, check=False)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["ok"], r["checks"]

    # the epochs: one grant each, the newer one installed in the log and at the executor
    e = r["epochs"]
    assert (e["old_worker"], e["new_worker"], e["log_fence"], e["executor_fence"]) == (1, 2, 2, 2)
    assert [(g["owner_id"], g["owner_epoch"]) for g in e["grants"]] == [("worker-old", 1), ("worker-new", 2)]

    # the stall was a real SIGSTOP while the test ran, and outlived the lease
    st = r["stall"]
    assert st["signal"] == "SIGSTOP" and st["process_state"] == "T" and st["stalled_after"] == "dispatch"
    assert st["executor_status_at_stall"] == "running" and st["job_handle"] == "job_tests_18"
    assert st["lease_lapsed_before_takeover"] and st["stalled_s"] > r["lease_ttl_s"]
    assert r["takeover"]["availability"] == "available"
    assert r["takeover"]["executor_fence"]["installed"] is True

    # each late action, and who refused it
    by = {a["boundary"]: a for a in r["rejections"]}
    assert set(by) == {"log", "dispatch gate", "executor"}
    assert not by["log"]["accepted"] and by["log"]["error_type"] == "StaleOwnerError"
    assert "owner_epoch=1" in by["log"]["error"] and "owner_epoch=2" in by["log"]["error"]
    gate = by["dispatch gate"]
    assert not gate["accepted"] and not gate["request_sent"] and gate["error_type"] == "StaleOwnerError"
    assert "owner_epoch=2" in gate["gate_recheck_now"]          # the lease check would withhold it too
    ex = by["executor"]
    assert not ex["accepted"] and ex["status_code"] == 409 and ex["reason"] == "stale_owner_epoch"
    assert ex["fence"] == 2
    assert [x["reason"] for x in r["executor"]["rejected"]] == ["stale_owner_epoch"]
    assert r["lease_after_resume"]["renewed"] is False and r["lease_after_resume"]["reason"] == "superseded"
    assert r["resume"] == {"signal": "SIGCONT", "worker_exit": 0}

    # the operation dispatched before the stall: kept, settled by reconciliation, not sent again
    pr = r["preserved"]
    assert pr["executor_submissions"] == 1 and pr["dispatched_under_owner_epoch"] == 1
    assert pr["attempts_in_log"] == ["attempt1"] and pr["status_in_log"] == "established"
    assert pr["outcome"]["passed"] == 5 and pr["outcome"]["failed"] == 0
    assert [(x["status"], x["source"], x["owner_epoch"]) for x in pr["evidence"]] == [
        ("accepted", "reply", 1), ("completed", "reconciliation", 2)]
    assert r["takeover"]["reconciliation"]["signature_verified"] is True

    # the log: epoch 1 up to the stall, epoch 2 after it, never back
    epochs = r["log"]["owner_epochs"]
    assert epochs == sorted(epochs) and set(epochs) == {1, 2}
    assert epochs.index(2) == st["log_position"]                 # the first event after the stall point

    # nothing left behind
    assert process_gone(r["processes"]["worker_pid"]) and process_gone(r["processes"]["executor_pid"])
    assert group_gone(r["processes"]["worker_pid"]) and group_gone(r["processes"]["executor_pid"])
    assert r["cleanup"]["workdir_removed"] and not port_accepts(r["executor"]["port"])
    assert not list(tmp_path.glob("kernel_lib_live_*"))


def test_zombie_refuses_the_segment_store_and_bad_input(tmp_path):
    with pytest.raises(ConfigError, match="one opener"):
        run_zombie("segment", workdir=tmp_path)
    for bad in (0.0, float("nan"), 1e9, True):
        with pytest.raises(ConfigError, match="lease_ttl_s"):
            run_zombie(workdir=tmp_path, lease_ttl_s=bad)
    assert list(tmp_path.iterdir()) == []                      # refused before any process or directory
    r = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--zombie", "--store", "segment"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "one opener" in r.stderr and "Traceback" not in r.stderr


def test_the_takeover_owner_is_the_one_the_coordinator_granted(tmp_path):
    """Fault model: the report names who took over. Invariant: the name comes from the grant the
    replacement received (the coordinator's history), not from a fixed label."""
    from kernel_lib.live.controller import run_zombie
    r = run_zombie(workdir=tmp_path, test_delay_s=2.0, lease_ttl_s=1.0, takeover_owner_id="replacement-7")
    assert r["ok"], r["checks"]
    granted = [g for g in r["epochs"]["grants"] if g["owner_epoch"] == r["takeover"]["owner_epoch"]]
    assert granted and granted[0]["owner_id"] == "replacement-7" == r["takeover"]["owner_id"]
    with pytest.raises(ConfigError):
        run_zombie(workdir=tmp_path, takeover_owner_id="")
