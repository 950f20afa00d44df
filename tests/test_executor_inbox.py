"""The executor's side of the durable result inbox (§11.5.3) and its test summaries.

Fault model: the executor is started with an ``--inbox`` it can never deposit into, a job arrives
without a trajectory scope, or the executor inherits colour-forcing variables from a Jupyter kernel.
Invariant: no completion record silently misses the inbox (an unusable inbox refuses startup, an
unscoped record is listed as an inbox failure), and what the executor reports is plain text.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from kernel_lib.gate.inbox import ResultInbox
from kernel_lib.live.controller import spawn_executor, stop_executor
from kernel_lib.live.executor import EXECUTOR_ID, ExecutorService, Job
from kernel_lib.live.orphan import parent_env
from kernel_lib.live.workspace import build_snapshot, remove_tree


def _service(tmp_path: Path, inbox: Path | None) -> ExecutorService:
    return ExecutorService(tmp_path / "snap", "0" * 64, tmp_path / "state", usd_per_s=0.0, test_delay_s=0.0,
                           inbox_path=inbox)


def _job(trajectory_id: str | None) -> Job:
    return Job("test_r18", "attempt1", "0" * 64, "pytest -q", "job_tests_18", time.time(), time.monotonic(),
               trajectory_id=trajectory_id, owner_epoch=1 if trajectory_id else None)


def test_a_job_without_trajectory_scope_is_listed_as_an_inbox_failure(tmp_path):
    """With an inbox configured, a record that cannot be filed under a trajectory is not dropped
    silently: it shows in inbox_failures with its reason; a scoped one is deposited."""
    inbox = tmp_path / "inbox.sqlite"
    service = _service(tmp_path, inbox)
    service._finish(_job(None), "completed", {"passed": 5, "failed": 0})
    assert [(f["operation_id"], f["reason"]) for f in service.inbox_failures] == [("test_r18", "no trajectory scope")]
    service.inbox_failures.clear()
    service._finish(_job("traj-x"), "completed", {"passed": 5, "failed": 0})
    assert service.inbox_failures == []
    with ResultInbox(inbox, {EXECUTOR_ID: service.public_key_hex}) as box:
        assert [e.status for e in box.entries("traj-x")] == ["completed"]
    # without an inbox there is nothing to fail
    plain = _service(tmp_path, None)
    plain._finish(_job(None), "completed", {"passed": 5, "failed": 0})
    assert plain.inbox_failures == []


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    root = tmp_path_factory.mktemp("snap")
    snap = build_snapshot(root)
    yield snap
    remove_tree(root)


def _start(snap, state: Path, inbox: Path, *extra: str) -> subprocess.CompletedProcess:
    """Run the executor as the controller does; one that (wrongly) starts serving is killed after
    the timeout, and the test fails on TimeoutExpired instead of hanging."""
    cmd = [sys.executable, "-m", "kernel_lib.live.executor", "--snapshot", str(snap.path), "--digest", snap.digest,
           "--state-dir", str(state), "--test-delay-s", "0", "--inbox", str(inbox), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **parent_env()},
                          stdin=subprocess.DEVNULL)


def test_an_unusable_inbox_refuses_startup_with_exit_2(tmp_path, snapshot):
    """A directory, a path under a missing directory, a file that is not SQLite: the executor
    refuses to start (``error:`` on stderr, exit 2, no ready.json) instead of serving records it
    could never deposit. The existing file is left as it was."""
    (tmp_path / "adir").mkdir()
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not sqlite" * 100)
    (tmp_path / "plain").write_text("x")
    for i, inbox in enumerate([tmp_path / "adir", tmp_path / "missing" / "inbox.sqlite",
                               tmp_path / "plain" / "inbox.sqlite", garbage]):
        state = tmp_path / f"state{i}"
        r = _start(snapshot, state, inbox)
        assert r.returncode == 2 and r.stderr.startswith("error: --inbox ") and "unusable" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert not (state / "ready.json").exists()
    assert garbage.read_bytes() == b"this is not sqlite" * 100


@pytest.mark.parametrize("flag,value", [("--usd-per-s", "nan"), ("--usd-per-s", "-1"), ("--test-delay-s", "inf")])
def test_non_finite_or_negative_rates_refuse_startup(tmp_path, snapshot, flag, value):
    """A NaN rate would make every completion record unsignable (RFC 8785 has no NaN)."""
    r = _start(snapshot, tmp_path / "state", tmp_path / "inbox.sqlite", flag, value)
    assert r.returncode == 2 and "error:" in r.stderr and flag in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_test_summary_is_plain_text_when_colour_is_forced(tmp_path, snapshot):
    """Seen in a notebook: the executor inherited FORCE_COLOR from the Jupyter kernel and its
    summary read ``\\x1b[32m5 passed``. The tests run with --color=no and without those
    variables, so the summary (and the signed record) holds no escape codes; the record is
    deposited in the inbox under its trajectory."""
    env = {**os.environ, **parent_env(), "FORCE_COLOR": "1", "PY_COLORS": "1", "CLICOLOR_FORCE": "1",
           "TERM": "xterm-256color"}
    proc, ready = spawn_executor(tmp_path, snapshot, usd_per_s=0.01, test_delay_s=0.0, env=env, timeout_s=60)
    try:
        with httpx.Client(timeout=10, trust_env=False) as c:
            r = c.post(f"{ready['url']}/jobs", json={"operation_id": "test_r18", "attempt_id": "attempt1",
                                                      "snapshot_digest": snapshot.digest, "check": "pytest -q",
                                                      "trajectory_id": "traj-x", "owner_epoch": 1})
            assert r.status_code == 200, r.text
            deadline = time.monotonic() + 120
            while (st := c.get(f"{ready['url']}/operations/test_r18").json())["status"] == "running":
                assert time.monotonic() < deadline, st
                time.sleep(0.1)
            failures = c.get(f"{ready['url']}/inbox-failures").json()["failures"]
    finally:
        stop_executor(proc)
    assert st["status"] == "completed", st
    summary = st["outcome"]["summary"]
    assert "\x1b" not in summary and "passed" in summary, repr(summary)
    assert "\x1b" not in st["record"]["outcome"]["summary"]
    assert failures == []
    n = sqlite3.connect(ready["inbox_path"]).execute("SELECT count(*) FROM completions").fetchone()[0]
    assert n == 1
