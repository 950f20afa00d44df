"""Figure 5 for real: the six-turn systems-administration trajectory under its four injected failures
(kernel_lib.sim.figure5 on the twins, kernel_lib.live.figure5 on live services with a real SIGKILL).

Fault model: the answer to provision_db dropped after the effect (turn 3), broken SQL the database
service refuses (turn 4), the worker killed right after the configuration update's intent (turn 5;
simulated in process, a real SIGKILL live), the restarted model's premature deploy (turn 6).
Invariant: each failure is judged by the services' own counts (one database, one migration
applied after one refusal, one configuration, one deploy sent only after a passing verdict) and
the crash-consistency invariant holds; the ladder comes from the log and the audit.
Goal: the synthesized runtime completes the trajectory; without the synthesis the same services
show what goes wrong.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from kernel_lib.core.events import PivotCrossed, PivotVerified, ToolIntent
from kernel_lib.errors import ConfigError
from kernel_lib.log import open_store
from kernel_lib.recovery.saga import fold_saga
from kernel_lib.sim.figure5 import FIGURE5_FAILURES, run_figure5


@pytest.fixture(scope="module")
def fig5(tmp_path_factory):
    return run_figure5(store_dir=tmp_path_factory.mktemp("fig5"))


def _counts(r, action):
    return r["counts"].get(action, {"received": 0, "applied": 0})


def test_the_synthesized_runtime_completes_figure5_and_each_failure_is_met(fig5):
    r = fig5
    assert r["state"] == "COMPLETED" and r["ok"] and r["invariant_ok"]
    assert [f["turn"] for f in r["failures"]] == [3, 4, 5, 6] and all(f["ok"] for f in r["failures"])
    assert [f["failure"] for f in r["failures"]] == [f["failure"] for f in FIGURE5_FAILURES]
    # turn 3: the database service received one provision_db and applied it once
    assert _counts(r, "provision_db") == {"received": 1, "applied": 1}
    # turn 4: the broken SQL reached the service and was refused; the repaired one was applied once
    assert _counts(r, "apply_migration") == {"received": 2, "applied": 1}
    assert "sql_syntax_error" in r["failures"][1]["what happened"]
    assert r["failures"][1]["evidence"]["repairs"] == 1 <= r["failures"][1]["evidence"]["k_repair"]
    assert _counts(r, "teardown_db")["applied"] == 0                  # forward, not a rollback of turn 3
    # turn 5: one configuration, sent once, after the restart
    assert _counts(r, "update_config") == {"received": 1, "applied": 1}
    assert r["kill"]["turn"] == 5 and r["kill"]["rpo_turns"] == 0 and r["kill"]["recovered"]
    assert r["failures"][2]["evidence"]["sigma_rebuilt"] == ["C1 delete_checkout", "C3 teardown_db",
                                                             "C5 revert_migration"]
    # turn 6: held first (a real failing check), then passed, and only one deploy ever reached the service
    assert [v["passed"] for v in r["verdicts"]] == [False, True]
    assert r["verdicts"][0]["failed_checks"] == ["config_digest"] and r["verdicts"][0]["model_claim"]
    assert _counts(r, "deploy_production") == {"received": 1, "applied": 1}
    assert r["held"] == [{"pivot_step_id": "fig5.T7", "held": True, "passed": False,
                          "failed_checks": ["config_digest"]}]


def test_the_log_orders_intent_gate_crossing_and_deploy(fig5, tmp_path_factory):
    """Read the log again from its SQLite file: the held verdict precedes the configuration's
    second attempt, the passing one the crossing, the crossing the deploy's intent."""
    r = fig5
    assert r["log_events"] > 40 and r["saga_steps"] == 7
    kinds = [m["kind"] for m in r["messages"]]
    for k in ("timeout", "probe", "repair", "crash", "recover", "gate", "pivot", "complete"):
        assert k in kinds, k
    crash = next(m for m in r["messages"] if m["kind"] == "crash")
    recover = r["messages"][crash["index"] + 1]
    assert recover["kind"] == "recover" and "Σ = [C1, C3, C5]" in recover["label"]
    assert crash["position"] == r["crashes"][0]["after_position"]
    held, passed = [m for m in r["messages"] if m["kind"] == "gate" and m["label"].startswith("verdict")]
    assert "FAILED config_digest" in held["label"] and "pivot held" in held["label"]
    assert held["turn"] == passed["turn"] == 6 and recover["index"] < held["index"] < passed["index"]
    # the deploy's dispatch comes after the passing verdict and the crossing, in the ladder too
    dispatch = next(m for m in r["messages"] if m["kind"] == "dispatch" and "deploy_production" in m["label"])
    pivot = next(m for m in r["messages"] if m["kind"] == "pivot")
    assert passed["index"] < pivot["index"] < dispatch["index"]


def test_figure5_is_deterministic_on_the_twins():
    a, b = run_figure5(), run_figure5(trajectory_id="fig5")
    strip = ("wall_s", "rto_s", "kill", "invariant")
    assert {k: v for k, v in a.items() if k not in strip} == {k: v for k, v in b.items() if k not in strip}


@pytest.mark.parametrize("config, bad", [("saga_only", 3), ("wal_only", 4), ("unmanaged", 3)])
def test_without_the_synthesis_the_services_show_what_goes_wrong(config, bad):
    """The same script and faults under a partial configuration, judged the same way."""
    r = run_figure5(config=config)
    assert not r["ok"] and r["state"] != "COMPLETED"
    assert not r["failures"][bad - 3]["ok"]
    assert _counts(r, "deploy_production")["received"] == 0
    if config == "saga_only":          # the blind retry: the database service made two databases
        assert _counts(r, "provision_db") == {"received": 2, "applied": 2}


def test_bad_input_is_refused():
    with pytest.raises(ConfigError, match="unknown configuration"):
        run_figure5(config="magic")
    with pytest.raises(ConfigError, match="without dots"):
        run_figure5(trajectory_id="a.b")


def test_the_cli_runs_figure5_and_reports_it(tmp_path):
    run = subprocess.run([sys.executable, "-m", "kernel_lib", "figure5", "--json"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout)
    assert r["ok"] and {"failures", "verdicts", "messages", "rto_s", "counts"} <= set(r)
    text = subprocess.run([sys.executable, "-m", "kernel_lib", "figure5", "--ladder"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert text.returncode == 0 and "turn 6  premature commit across the pivot  [ok]" in text.stdout
    assert "crash" in text.stdout and "scheduler -> services" in text.stdout
    bad = subprocess.run([sys.executable, "-m", "kernel_lib", "figure5", "--client-timeout", "0"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert bad.returncode == 2 and "--client-timeout" in bad.stderr


def test_the_text_report_gives_each_measured_time_its_unit_once(fig5, capsys):
    """Invariant: a timing named ``worker_s`` reads ``worker 3.900 s``, never ``worker s 3.9 s``; and
    --client-timeout, which only the live run has, is refused on the twins (exit 2) instead of ignored."""
    from kernel_lib.cli import main
    from kernel_lib.cli.figure5 import format_figure5

    line = format_figure5({**fig5, "timings": {"fleet_start_s": 2.25, "worker_s": 3.9}}).splitlines()[-1]
    assert line == "measured: fleet start 2.250 s, worker 3.900 s"
    assert main(["figure5", "--client-timeout", "2"]) == 2
    assert "--live" in capsys.readouterr().err


def test_figure5_live_with_a_real_sigkill(tmp_path):
    """One live run: the services as processes, the worker killed by SIGKILL at turn 5, recovered
    in a new process; the same judgement by the live services' counts."""
    from kernel_lib.live.figure5 import run_figure5_live

    r = run_figure5_live(workdir=tmp_path)
    assert r["signal"] == "SIGKILL" and r["worker_exit"] == -signal.SIGKILL
    assert r["recovery_pid"] != r["worker_pid"]
    assert r["state"] == "COMPLETED" and r["ok"], [f for f in r["failures"] if not f["ok"]]
    assert _counts(r, "provision_db") == {"received": 1, "applied": 1}
    assert _counts(r, "apply_migration") == {"received": 2, "applied": 1}
    assert _counts(r, "update_config") == {"received": 1, "applied": 1}
    assert _counts(r, "deploy_production") == {"received": 1, "applied": 1}
    assert [v["passed"] for v in r["verdicts"]] == [False, True]
    assert isinstance(r["rto_s"], float) and 0 < r["rto_s"] < 30
    assert any(m["kind"] == "crash" and "SIGKILL" in m["label"] for m in r["messages"])
    assert list(tmp_path.iterdir()) == []          # the work folder is removed, the fleet stopped


def test_the_log_file_holds_what_the_report_says(tmp_path):
    run_figure5(store_dir=tmp_path)
    with open_store("sqlite", tmp_path / "figure5.sqlite", read_only=True) as st:
        events = list(st.read("fig5"))
    saga = fold_saga(events, "fig5")
    assert saga.state == "COMPLETED"
    seq = {type(e.payload).__name__: e.sequence_number for e in events
           if isinstance(e.payload, (PivotCrossed,))}
    verdicts = [e.sequence_number for e in events if isinstance(e.payload, PivotVerified)]
    deploy = next(e.sequence_number for e in events if isinstance(e.payload, ToolIntent)
                  and e.payload.tool == "deploy_production")
    assert verdicts[0] < verdicts[1] < seq["PivotCrossed"] < deploy


@pytest.mark.parametrize("client_timeout_s", [30.0, 60.0, 1e9, float("nan"), float("inf"), -1.0, True])
def test_a_client_timeout_that_cannot_stage_the_lost_answer_is_refused_before_anything_starts(tmp_path,
                                                                                              client_timeout_s):
    """Adversarial review (issue 20): `figure5 --live --client-timeout 60` (longer than the 30 s the
    service holds the dropped answer) got a 504 instead of a timeout at turn 3, retried blind and
    provisioned a second database; the run then reported figure 5 as not met (exit 1)."""
    from kernel_lib.cli import main
    from kernel_lib.live.figure5 import run_figure5_live

    with pytest.raises(ConfigError, match="client_timeout_s"):
        run_figure5_live(workdir=tmp_path, client_timeout_s=client_timeout_s)
    assert list(tmp_path.iterdir()) == []
    if isinstance(client_timeout_s, float) and client_timeout_s > 0 and client_timeout_s != float("inf"):
        assert main(["figure5", "--live", "--client-timeout", str(client_timeout_s)]) == 2
