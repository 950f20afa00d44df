"""``bench watchdog`` (issue 18): a small run has every figure, ratios against its own full hash,
a one-file re-read per incremental call, digests that agree with a fresh full hash, and the
target in the shared shape. No timing is asserted here (speed targets live in the benchmark)."""

from __future__ import annotations

import json

import pytest

from kernel_lib.bench import watchdog as wb
from kernel_lib.cli import main
from kernel_lib.errors import ConfigError

CONTENDERS = {"full", "incremental", "no_change", "incremental_scan", "incremental_hint", "tool_run", "durable_append"}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return wb.run_watchdog_bench(files=40, mb=0.2, rounds=2, per_round=2, dir=tmp_path_factory.mktemp("bw"),
                                 progress=False)


def test_a_small_run_has_every_figure_and_ratio(small):
    assert set(small["ms"]) == CONTENDERS
    w = small["workspace"]
    assert w["files"] == 40 and w["ignored_files"] == len(wb._IGNORED_FILES)
    assert 195_000 < w["bytes"] < 195_100       # the tool run rewrote one 5,000-byte file with a short text
    for k in CONTENDERS - {"full"}:
        assert small["ratios"][f"{k}_over_full"] == pytest.approx(small["ms"][k]["median_ms"]
                                                                  / small["ms"]["full"]["median_ms"])
    step = small["ms"]["tool_run"]["median_ms"] + small["ms"]["durable_append"]["median_ms"]
    assert small["ratios"]["step_ms"] == pytest.approx(step)
    assert small["reread"]["full"] == 40 and small["reread"]["no_change"] == 0
    assert small["consistent"] is True and small["temp_dir_removed"] is True


def test_the_target_is_the_issues_two_percent(small):
    (t,) = small["targets"]
    assert t["limit"] == "<= 0.02" and t["measured"] == small["ratios"]["incremental_over_full"]
    assert t["passed"] == (t["measured"] <= 0.02)
    assert ("PASS" if t["passed"] else "FAIL") in wb.format_watchdog_bench(small)


@pytest.mark.parametrize("kw", [{"files": 5}, {"mb": 0}, {"mb": True}, {"rounds": 0}, {"per_round": "2"},
                                {"files": 1000, "mb": 0.0005}])
def test_bad_arguments_are_config_errors(kw, tmp_path):
    with pytest.raises(ConfigError):
        wb.run_watchdog_bench(dir=tmp_path, **kw)


def test_cli_json_and_bad_dir(tmp_path, capsys):
    assert main(["bench", "watchdog", "--files", "20", "--mb", "0.05", "--rounds", "1", "--per-round", "1",
                 "--dir", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "watchdog" and set(out["ms"]) == CONTENDERS and out["targets"]
    assert main(["bench", "watchdog", "--dir", str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err.startswith("error:")
