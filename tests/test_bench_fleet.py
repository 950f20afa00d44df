"""``bench fleet`` (kernel_lib.bench.fleet): the shape of its result, its two targets, its verdict
from the services' audits, and the CLI. A smoke size only; the ratio target is read from the
benchmark's own output, never asserted as a timing."""

from __future__ import annotations

import json

import pytest

from kernel_lib.bench.fleet import MODES, TARGET_RATIO, format_fleet_bench, run_fleet_bench
from kernel_lib.cli import main
from kernel_lib.errors import ConfigError


def test_both_modes_are_measured_in_one_run_and_judged_by_the_services(tmp_path):
    r = run_fleet_bench(1, 3, rounds=1, workdir=tmp_path)
    assert set(r["modes"]) == set(MODES)
    for m in MODES:
        assert len(r["modes"][m]["samples_throughput_per_s"]) == 1 and r["modes"][m]["throughput_per_s"] > 0
    assert r["ratio_on_over_off"] == pytest.approx(r["modes"]["on"]["throughput_per_s"]
                                                   / r["modes"]["off"]["throughput_per_s"])
    v = r["verdict"]
    assert v["trajectories"] == 3 * len(MODES)                     # every timed trajectory, judged
    assert v["completed"] == v["trajectories"] and v["lost_or_duplicated"] == 0
    ratio_t, loss_t = r["targets"]
    assert ratio_t["limit"] == f">= {TARGET_RATIO:g}" and ratio_t["passed"] == (ratio_t["measured"] >= TARGET_RATIO)
    assert loss_t["passed"] and loss_t["measured"] == 0
    assert "ratio on/off" in format_fleet_bench(r)
    assert list(tmp_path.iterdir()) == []


def test_bad_input_is_refused_before_anything_starts(tmp_path):
    for kw in ({"workers": 0}, {"trajectories": 0}, {"rounds": 0}):
        with pytest.raises(ConfigError):
            run_fleet_bench(**kw)
    assert main(["bench", "fleet", "--workers", "0"]) == 2
    assert main(["bench", "fleet", "--dir", str(tmp_path / "missing")]) == 2


def test_cli_json(capsys, tmp_path):
    assert main(["bench", "fleet", "--workers", "1", "--trajectories", "2", "--rounds", "1", "--json",
                 "--dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "fleet" and len(out["targets"]) == 2 and out["label"] == "measured"
