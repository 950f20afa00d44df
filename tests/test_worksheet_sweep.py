"""The crash sweep (issue 14): ``python -m kernel_lib worksheet --sweep --store {sqlite,segment} --json``.

Fault model: the worker process dies by a real SIGKILL at each kill position of its trajectory in
turn (every batch end, so every event is covered); a replacement process folds the surviving log
and reconciles by operation id each time.
Invariant: no logical operation is invoked at the executor more often than its repeat contract
allows (once under ``unsafe`` / ``at_most_once``), counted by the executor process itself; an
operation is invoked there at all only if the request left before the kill, i.e. only if the
surviving log holds the executor's acceptance of it.
Goal: one command that shows it for every position, on both local stores, and that fails (exit
1) when an operation was invoked too often.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kernel_lib.cli as cli
from kernel_lib.core.proposals import REPEAT_SAFE_CONTRACTS
from kernel_lib.live.controller import crash_points
from kernel_lib.live.crash_points import kill_positions
from kernel_lib.live.sweep import allowed_invocations, find_violations
from kernel_lib.live.worker import OPERATION, reference_events

CONTRACTS = ["idempotent", "idempotency_key", "at_most_once", "read_only", "unsafe"]


# ------------------------------------------------------------------------------------------------
# units: the violation rule can fire
# ------------------------------------------------------------------------------------------------


def test_two_invocations_under_an_unsafe_contract_are_a_violation():
    runs = [{"position": 10, "invocations": {OPERATION: {"invocations": 2, "repeat_contract": "unsafe"}}},
            {"position": 11, "invocations": {OPERATION: {"invocations": 2, "repeat_contract": "idempotency_key"}}},
            {"position": 12, "invocations": {OPERATION: {"invocations": 1, "repeat_contract": "unsafe"}}}]
    assert find_violations(runs) == [{"position": 10, "operation_id": OPERATION, "invocations": 2, "allowed": 1,
                                      "repeat_contract": "unsafe"}]


@given(st.lists(st.tuples(st.sampled_from(CONTRACTS + ["made_up"]), st.integers(0, 5)), max_size=6))
def test_a_violation_is_exactly_a_repeat_the_contract_does_not_allow(ops):
    runs = [{"position": i + 1, "invocations": {f"op{i}": {"invocations": n, "repeat_contract": c}}}
            for i, (c, n) in enumerate(ops)]
    flagged = {v["operation_id"] for v in find_violations(runs)}
    assert flagged == {f"op{i}" for i, (c, n) in enumerate(ops) if c not in REPEAT_SAFE_CONTRACTS and n > 1}
    assert all(allowed_invocations(c) == (None if c in REPEAT_SAFE_CONTRACTS else 1) for c, _ in ops)


def test_the_cli_exits_1_on_a_violation_and_2_on_an_error(monkeypatch, capsys):
    import kernel_lib.live.sweep as sweep

    base = {"store": "sqlite", "seed": 0, "positions": [1], "runs": [], "invocations": {OPERATION: 2},
            "violations": [{"position": 10, "operation_id": OPERATION, "invocations": 2, "allowed": 1,
                            "repeat_contract": "unsafe"}], "errors": [], "ok": False, "elapsed_s": 0.0}
    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: base)
    assert cli.main(["worksheet", "--sweep", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["violations"][0]["invocations"] == 2
    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: {**base, "violations": [],
                                                             "errors": [{"position": 3, "point": "x", "error": "e"}]})
    assert cli.main(["worksheet", "--sweep"]) == 2
    assert "error at position 3" in capsys.readouterr().out
    assert cli.main(["worksheet", "--sweep", "--crash-after", "ToolIntent"]) == 2
    assert "--sweep" in capsys.readouterr().err


def test_sweep_help_explains_it():
    p = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0
    for word in ("--sweep", "violation", "invocations", "Exit code: 0 ok"):
        assert word in p.stdout, word


# ------------------------------------------------------------------------------------------------
# the real command, on both local stores
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["sqlite", "segment"])
def test_the_sweep_kills_at_every_position_and_counts_at_the_executor(store):
    p = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--sweep", "--store", store, "--json"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout)
    points = crash_points()
    kills = kill_positions(points)
    # every kill position tried, and through them every event of the trajectory
    assert r["positions"] == kills and len(r["runs"]) == len(kills)
    assert {int(k): v for k, v in r["events_covered"].items()} == {q.position: q.durable_at for q in points}
    evs = reference_events()
    for run in r["runs"]:
        n = run["position"]
        assert run["signal"] == "SIGKILL" and run["worker_exit"] == -9 and run["killed_at_log_position"] == n
        assert run["workdir_removed"]
        count = run["invocations"][OPERATION]["invocations"]
        # the executor saw the request only if its acceptance is in the surviving prefix
        accepted = any(e.event_type == "ToolResult" and e.payload.operation_id == OPERATION for e in evs[:n])
        assert (count >= 1) == accepted, (n, count)
        allowed = allowed_invocations(run["invocations"][OPERATION]["repeat_contract"])
        assert allowed is None or count <= allowed, (n, count)
        assert r["invocations_by_position"][str(n)][OPERATION] == count
        # recovery invented nothing: nothing is established unless its evidence survived or was reconciled
        if not accepted:
            assert run["reconciled"][OPERATION] in ("absent", "not dispatched", "kept in doubt")
    # one durable barrier per step: some kills fall after deferred evidence and before the next
    # barrier; a SIGKILL (process crash) loses none of it, so the replacement finds it all
    deferred_kills = [run for run in r["runs"] if run["deferred_uncovered_at_kill"]]
    assert {run["position"] for run in deferred_kills} == {k for k in kills
                                                          if any(q.deferred and q.durable_at == k for q in points)}
    assert deferred_kills and all(run["deferred_lost"] == [] for run in r["runs"])
    assert all(run["recovered_log_position"] == run["position"] for run in r["runs"])
    assert r["invocations"][OPERATION] == max(run["invocations"][OPERATION]["invocations"] for run in r["runs"])
    assert r["violations"] == [] and r["errors"] == [] and r["ok"] is True
    assert "model_call_1" in r["not_counted"]
