"""``bench gateway`` (issue 19): a small run has every contender, ratios computed from its own
bare call and pybreaker, the shared store's write counts, and targets in the shared shape. No
timing is asserted here (speed targets live in the benchmark)."""

from __future__ import annotations

import json

import pytest

from kernel_lib.bench import gateway as gb
from kernel_lib.cli import main
from kernel_lib.errors import ConfigError

OURS = {"bare", "breaker", "breaker_core", "bulkhead", "bulkhead_pool", "gateway", "shared_breaker",
        "shared_breaker_writes", "open_refusal"}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return gb.run_gateway_bench(rounds=2, batch=20, dir=tmp_path_factory.mktemp("bg"), progress=False)


def test_a_small_run_has_every_figure(small):
    names = set(small["us"])
    assert OURS <= names
    bare = small["us"]["bare"]["median_us"]
    for k in names - {"bare"}:
        assert small["ratios"][f"{k}_over_bare"] == pytest.approx(small["us"][k]["median_us"] / bare)
        assert small["overhead_us"][k] == pytest.approx(small["us"][k]["median_us"] - bare)
    s = small["shared_store"]
    assert s["writes_per_healthy_call"] == 0 and s["writes_per_call_with_failures"] == 1.0
    assert s["fresh_checks_per_call"] == 2.0 and small["temp_dir_removed"] is True


def test_targets_are_measured_against_pybreaker_when_installed(small):
    by_name = {t["name"]: t for t in small["targets"]}
    assert by_name["shared SQLite breaker: writes per healthy call"]["passed"] is True
    if small["pybreaker"] is None:
        assert "pybreaker" not in small["us"]
        return
    assert {"pybreaker", "pybreaker_open"} <= set(small["us"])
    r = small["ratios"]
    assert r["breaker_overhead_over_pybreaker"] == pytest.approx(small["overhead_us"]["breaker"]
                                                                 / small["overhead_us"]["pybreaker"])
    for t in small["targets"]:
        limit = float(t["limit"].split()[-1])
        assert t["passed"] == (t["measured"] <= limit if t["limit"].startswith("<=") else t["measured"] == limit)
    assert ("PASS" in gb.format_gateway_bench(small)) or ("FAIL" in gb.format_gateway_bench(small))


@pytest.mark.parametrize("kw", [{"rounds": 0}, {"batch": 5}, {"batch": "20"}])
def test_bad_arguments_are_config_errors(kw, tmp_path):
    with pytest.raises(ConfigError):
        gb.run_gateway_bench(dir=tmp_path, **kw)


def test_cli_json(tmp_path, capsys):
    assert main(["bench", "gateway", "--rounds", "1", "--batch", "10", "--no-peers", "--dir", str(tmp_path),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "gateway" and OURS <= set(out["us"]) and "pybreaker" not in out["us"]
    assert main(["bench", "gateway", "--dir", str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err.startswith("error:")
