"""The one crash-state engine (kernel_lib.verify.engine) on a tiny workload of its own.

Fault model: a crash after any file operation of a one-file "write a record, maybe fdatasync it,
acknowledge it" workload. Invariant: an acknowledged record is on disk after the crash. Goal: the
engine finds no violation when the barrier precedes the acknowledgment, and finds one (reported
in its single report type) when the workload acknowledges without the barrier.
"""

from __future__ import annotations

import argparse
import json

import pytest

import kernel_lib.cli.verify as verify_commands
from kernel_lib.errors import ConfigError
from kernel_lib.verify.engine import CrashReport, CrashWorkload, Verdict, explore

RECORD = b"r18:" + b"x" * 1000     # spans two 512-byte sectors, so torn states exist


class OneRecord(CrashWorkload):
    counters = ("files_seen",)
    tallies = ("size",)

    def __init__(self, name: str, sync: bool):
        self.name, self.sync = name, sync

    def record(self, fs, seed):
        fs.makedirs("/d")
        h = fs.open_file("/d/rec", create=True)
        fs.pwrite(h, 0, RECORD)
        if self.sync:
            fs.fdatasync(h)
            fs.fsync_dir("/d")
        fs.close(h)
        fs.mark_ack(["rec"], "fdatasync")
        return {"records_written": 1}

    def check(self, fs, promised):
        present = fs.exists("/d/rec") and fs.read_all("/d/rec") == RECORD
        problems = tuple(f"acknowledged {p} is missing" for p in promised if not present)
        return Verdict(problems, counts={"files_seen": int(fs.exists("/d/rec"))},
                       tally={"size": str(fs.size("/d/rec")) if fs.exists("/d/rec") else "none"})


def test_engine_passes_a_synced_workload_and_catches_an_unsynced_acknowledgment():
    report = explore([OneRecord("synced", True), OneRecord("unsynced", False)], seed=0)
    assert isinstance(report, CrashReport)
    good, bad = report.rows["synced"], report.rows["unsynced"]
    assert good.violations == 0 and good.states_explored > 0
    assert bad.violations > 0 and report.violations == bad.violations
    assert {"process", "host", "torn"} <= set(bad.by_kind)
    assert all(d["workload"] == "unsynced" for d in report.violation_details)
    assert good.facts == {"records_written": 1} and report.workloads["synced"]["records_written"] == 1
    # counters and tallies are summed over the rows and also read as attributes
    assert report.files_seen == report.counts["files_seen"] > 0
    assert report.size == report.tallies["size"] and "none" in report.size
    d = report.to_dict()
    assert d["states_explored"] == good.states_explored + bad.states_explored
    assert set(d) >= {"states_generated", "violations", "files_seen", "size", "seconds", "seed", "workloads"}
    with pytest.raises(AttributeError):
        _ = report.no_such_figure


def test_engine_cap_is_a_seeded_sample_and_bad_input_is_refused():
    a = explore([OneRecord("synced", True)], seed=3, max_states=5)
    b = explore([OneRecord("synced", True)], seed=3, max_states=5)
    assert a.states_generated == 5 and a.to_dict()["workloads"] == b.to_dict()["workloads"]
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ConfigError):
            explore([OneRecord("synced", True)], max_states=bad)
    with pytest.raises(ConfigError):
        explore([OneRecord("same", True), OneRecord("same", False)])
    with pytest.raises(ConfigError):
        explore([])


def test_crashcheck_runs_the_payload_workloads_when_named(capsys):
    ap = argparse.ArgumentParser()
    verify_commands.add_commands(ap.add_subparsers())
    args = ap.parse_args(["crashcheck", "--json", "--workload", "payload-first", "--workload", "reference-first"])
    assert args.func(args) == 1          # reference-first is the unsafe order
    out = json.loads(capsys.readouterr().out)
    assert list(out["workloads"]) == ["payload-first", "reference-first"]
    assert out["workloads"]["payload-first"]["violations"] == 0
    assert out["workloads"]["reference-first"]["violations"] == out["violations"] > 0
