"""The heartbeat fallacy run for real (Failure Recovery, "The failure of classical OS liveness
probes"; kernel_lib/live/heartbeat.py).

Fault model: a worker process that keeps every liveness signal green (HTTP health 200, sd_notify
heartbeats within WatchdogSec, a sleeping-not-dead process, fresh activity) while its environment
flips between two states. Invariant: every liveness probe says healthy, the watchdog over the
worker's journal reports a state cycle of period 2, the supervisor's own hashes of the workspace
see no more than the start and the two states of the flip-flop, and the worker is gone afterwards.
Goal: liveness and progress are different questions, answered by different evidence.
"""

from __future__ import annotations

import json
import time

import pytest

from kernel_lib._support.procs import pid_alive
from kernel_lib.errors import ConfigError
from kernel_lib.live.heartbeat import journal_steps, run_heartbeat_fallacy, spawn_looping_worker


def test_a_looping_worker_passes_every_liveness_probe_and_the_watchdog_reports_the_loop(tmp_path):
    report = run_heartbeat_fallacy(tmp_path / "hb", duration_s=2.0, probe_every_s=0.2, step_s=0.08,
                                   heartbeat_s=0.15, watchdog_sec=1.5)
    assert len(report.probes) >= 5 and report.liveness_healthy
    assert all(p.http_status == 200 and p.heartbeat_gap_s <= 1.5 for p in report.probes)
    assert report.probes[-1].heartbeats >= 3                        # heartbeats really arrived
    assert report.probes[-1].reported_steps >= 6                     # and the health answer saw fresh steps
    cycles = [d for d in report.detections if d.kind == "state_hash_cycle"]
    assert cycles and cycles[0].evidence["period"] == 2
    assert report.first_detection_step == cycles[0].evidence["step_position"] == 6   # run, +45, run, +40, run, +45
    assert report.distinct_states_journal == 3 and 2 <= report.distinct_states_probed <= 3
    assert report.exit_code == 0
    assert not report.probes[-1].semantic.startswith("no loop")


def test_the_worker_leaves_on_sigterm_and_its_journal_reads_as_steps(tmp_path):
    worker = spawn_looping_worker(tmp_path / "w", step_s=0.05, heartbeat_s=0.1)
    try:
        assert worker.healthz()["http_status"] == 200
        deadline = time.monotonic() + 30
        while len(worker.steps()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        assert worker.stop() == 0
    assert not pid_alive(worker.pid)
    steps = journal_steps(worker.journal)
    assert steps and steps[0].tool == "run_tests" and steps[0].mutative is False
    assert all(s.state_source == "workspace" and len(s.state_hash) == 64 for s in steps)
    with open(worker.journal, "a") as f:                              # a line the worker was still writing
        f.write(json.dumps({"step": 999})[:7])
    assert journal_steps(worker.journal) == steps
    assert journal_steps(tmp_path / "missing.jsonl") == []


@pytest.mark.parametrize("bad", [0, -1.0, True, "1"])
def test_bad_intervals_are_refused_before_anything_starts(tmp_path, bad):
    with pytest.raises(ConfigError):
        spawn_looping_worker(tmp_path / "w", step_s=bad)
    with pytest.raises(ConfigError):
        run_heartbeat_fallacy(tmp_path / "w", duration_s=bad)
    assert not (tmp_path / "w" / "ready.json").exists()
