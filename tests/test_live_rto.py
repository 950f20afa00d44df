"""Our runtime's RTO measured in Napkin Math 0.5's terms (kernel_lib.live.rto) on the live services.

Fault model: the recording process dies right after the git service applied the last turn's step and
before its result reached the log (the step is in doubt). Invariant: the recovery settles it by the
service's status lookup, so the service's own audit holds exactly one applied effect per turn (no
re-dispatch). Goal: every term of the block is reported beside its formula, labelled measured (or
computed, for the prefill the stand-in model cannot measure), and a takeover really waits out the
crashed worker's lease. One fleet for the module: a few seconds in all.
"""

from __future__ import annotations

import json
import math

import pytest

from kernel_lib.cli import main
from kernel_lib.errors import ConfigError
from kernel_lib.live.rto import LABEL, TOOL, TRAJECTORY, format_rto_table, measure_rto
from kernel_lib.live.services import LiveFleet
from kernel_lib.recovery.synthesis.rto import CHAPTER_GIVENS, rto_terms


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with LiveFleet(tmp_path_factory.mktemp("rto-fleet")) as f:
        yield f


def _applied(fleet, trajectory_id: str) -> list[str]:
    """Operation ids of the create_branch effects the git service applied for one trajectory (its
    audit, not our log; the saga's operation ids are ``<trajectory>.T<i>``)."""
    return [a["operation_id"] for a in fleet.audits()["git"]
            if a.get("action") == TOOL and str(a.get("operation_id", "")).startswith(trajectory_id + ".")
            and not a.get("refused")]


def test_a_restart_is_decomposed_into_the_blocks_terms(fleet, tmp_path):
    r = measure_rto(fleet=fleet, turns=6, snapshot_every=2, rounds=2, directory=tmp_path)
    rows = {row["term"]: row for row in r["rows"]}
    assert list(rows) == ["snapshot", "wal", "prefill", "probe", "settle", "total"]
    chapter = rto_terms(CHAPTER_GIVENS)
    assert rows["snapshot"]["chapter_formula_value_ms"] == chapter["t_snap_ms"]
    assert rows["wal"]["chapter_formula_value_ms"] == chapter["t_wal_ms"]
    assert rows["prefill"]["chapter_formula_value_ms"] == 512.0 and rows["probe"]["chapter_formula_value_ms"] == 45
    assert rows["total"]["chapter_formula_value_ms"] == pytest.approx(570.7758571428)
    for term in ("snapshot", "wal", "probe", "settle"):
        row = rows[term]
        assert row["label"] == LABEL and math.isfinite(row["measured_ms"]) and row["measured_ms"] > 0, row
        assert row["measured_ms"] == row["ours_ms"]
    # the prefill is not measured: computed from the recorded context and the given rate
    rec = r["recorded"]
    assert rows["prefill"]["measured_ms"] is None and rows["prefill"]["label"].startswith("computed")
    assert rec["delta_tokens"] == rec["context_tokens"] - rec["snapshot_tokens"] > 0
    assert rows["prefill"]["ours_ms"] == pytest.approx(rec["delta_tokens"] / 8000 * 1000)
    # the latest checkpoint (after turn 4) is restored and the records after it are folded
    assert rec["checkpoint_turn"] == 4 and rec["crash_turn"] == 6
    assert rec["checkpoint_position"] < rec["head_at_crash"] == rec["checkpoint_position"] + rec["suffix_events"]
    assert rec["snapshot_bytes"] > 0 and rec["wal_bytes"] > 0
    assert rows["snapshot"]["formula_at_our_sizes_ms"] == pytest.approx(rec["snapshot_bytes"] / 1e6 / 3500 * 1e3)
    # the in-doubt step was settled by the service's lookup, and the service applied every step once
    tid = rec["trajectory_id"]
    assert tid.startswith(TRAJECTORY + "-")
    assert rec["in_doubt_operation"] == f"{tid}.T6" and rec["probe_status"] == "completed"
    applied = _applied(fleet, tid)
    assert sorted(applied) == sorted(f"{tid}.T{i}" for i in range(1, 7)), applied
    # the end-to-end time covers its phases; our total adds the computed prefill
    first = r["first_run_ms"]
    assert rows["total"]["measured_ms"] >= first["snapshot"] + first["wal"] + first["settle"]
    assert rows["total"]["ours_ms"] == pytest.approx(sum(rows[t]["ours_ms"] for t in list(rows)[:-1]))
    assert len(rows["snapshot"]["samples_ms"]) == 3
    text = format_rto_table(r)
    assert "restart on the same host" in text and "page cache" in text and "snapshot" in text
    json.dumps(r, allow_nan=False)


def test_a_takeover_waits_out_the_crashed_workers_lease(fleet, tmp_path):
    ttl = 0.25
    r = measure_rto(fleet=fleet, turns=3, snapshot_every=1, rounds=1, takeover_lease_s=ttl, store="segment",
                    directory=tmp_path)
    rows = {row["term"]: row for row in r["rows"]}
    assert list(rows)[0] == "lease_wait" and rows["lease_wait"]["chapter_formula_value_ms"] is None
    wait = rows["lease_wait"]["measured_ms"]
    # worker A renewed at the start of its last turn and died a few ms later: B waits most of the ttl
    assert ttl * 1e3 * 0.5 < wait < ttl * 1e3 + 500, wait
    assert rows["total"]["measured_ms"] >= wait
    rec = r["recorded"]
    assert rec["probe_status"] == "completed" and rec["checkpoint_turn"] == 2
    # a second run on the same fleet is a trajectory of its own: its steps were applied, once each
    assert sorted(_applied(fleet, rec["trajectory_id"])) == [f"{rec['trajectory_id']}.T{i}" for i in (1, 2, 3)]


@pytest.mark.parametrize("kw, name", [
    ({"turns": 1}, "turns"), ({"snapshot_every": 10}, "snapshot_every"), ({"snapshot_every": 0}, "snapshot_every"),
    ({"takeover_lease_s": 0.0}, "takeover_lease_s"), ({"rounds": 0}, "rounds"), ({"store": "memory"}, "store"),
    ({"params": {"probe_ms": -1}}, "probe_ms"), ({"params": {"snapshot_tokens": 10 ** 6}}, "snapshot_tokens")])
def test_bad_arguments_are_refused_before_anything_starts(kw, name):
    with pytest.raises(ConfigError, match=f"^{name} "):
        measure_rto(**kw)


def test_cli_measure(capsys):
    assert main(["exercise", "measure", "nm0.5", "--json", "--turns", "3", "--snapshot-every", "2",
                 "--rounds", "1", "--param", "prefill_tokens_per_s=4000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exercise"] == "nm0.5" and out["params"]["prefill_tokens_per_s"] == 4000
    prefill = next(r for r in out["rows"] if r["term"] == "prefill")
    assert prefill["chapter_formula_value_ms"] == 1024.0
    assert {r["term"] for r in out["rows"]} == {"snapshot", "wal", "prefill", "probe", "settle", "total"}
    assert main(["exercise", "measure", "nm0.4"]) == 2
    assert "no measurement" in capsys.readouterr().err
    assert main(["exercise", "measure", "nm0.5", "--turns", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: turns")
