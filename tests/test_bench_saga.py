"""``python -m kernel_lib bench saga --quick --json``: the figures' shape, and the barriers the log
handle counted against the runner's documented 2 per forward step and 1 per compensator pop
(kernel_lib.recovery.runner, "Barriers"; Napkin Math 0.1's fsyncs per step and per pop)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from kernel_lib.bench.saga import DOCUMENTED_BARRIERS, DURABLE_STORES, run_saga_bench
from kernel_lib.errors import ConfigError


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench-saga")
    out = subprocess.run([sys.executable, "-m", "kernel_lib", "bench", "saga", "--quick", "--json", "--dir", str(d)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), d


def test_the_quick_bench_prints_every_figure_with_ratios_against_its_own_baseline(quick):
    r, d = quick
    assert r["benchmark"] == "saga" and r["quick"] and r["temp_dir_removed"] and not list(d.iterdir())
    t = r["transition"]
    assert t["baseline"]["median_us"] > 0 and set(t["stores"]) == set(DURABLE_STORES)
    for fig in t["stores"].values():
        assert fig["median_us"] > 0 and math.isclose(fig["ratio_median"], fig["median_us"] / t["baseline"]["median_us"])
    assert set(r["unwind"]) == {"memory", *DURABLE_STORES}
    for fig in r["unwind"].values():
        assert fig["steps"] == 100 and all(s["pops"] == 100 for s in fig["samples"])
        assert fig["unwind_s"] > 0 and math.isclose(fig["unwind_per_pop_ms"], fig["unwind_s"] / 100 * 1e3)
    gap = r["store_gap"]["ms_per_saga"]
    assert set(gap) == {"none", "host_crash"} and all(set(p) == {"appended", "read_back"} for p in gap.values())
    names = [x["name"] for x in r["targets"]]
    assert len(names) == 3 * len(DURABLE_STORES) and all(set(x) == {"name", "measured", "limit", "passed"}
                                                         for x in r["targets"])


def test_counted_barriers_are_the_documented_two_per_forward_step_and_one_per_pop(quick):
    r, _ = quick
    for kind in DURABLE_STORES:
        b = r["barriers"][kind]
        assert b["state"] == "ABORT_CONSISTENT" and b["pops"] == 4 and b["forward_steps"] == 4
        assert b["barriers_per_committed_step"] == [DOCUMENTED_BARRIERS["per_forward_step"]] * 4, b
        assert b["unwind_barriers"] == 4 * DOCUMENTED_BARRIERS["per_pop"] + DOCUMENTED_BARRIERS["to_end_unwind"], b
    rows = [x for x in r["targets"] if "barriers" in x["name"]]
    assert rows and all(x["passed"] for x in rows)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ConfigError):
        run_saga_bench(dir=tmp_path, steps=3)
    with pytest.raises(ConfigError):
        run_saga_bench(dir=tmp_path, rounds=0)
    with pytest.raises(ConfigError):
        run_saga_bench(dir=tmp_path / "missing")
    out = subprocess.run([sys.executable, "-m", "kernel_lib", "bench", "saga", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "raw write+fdatasync" in out.stdout and "100-step" in out.stdout
