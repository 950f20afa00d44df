"""kernel_lib.bench.harness (the one timing harness of every benchmark) and kernel_lib.bench.growth.

Structure only: no timing thresholds (targets live in the benchmarks' own output).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from kernel_lib.bench import harness as h
from kernel_lib.errors import ConfigError, KernelError


def test_round_order_puts_every_contender_first_and_last_once_per_cycle_and_flips_neighbours():
    for n in (2, 3, 5):
        cycle = [h.round_order(n, r) for r in range(n)]
        assert sorted(o[0] for o in cycle) == list(range(n)) and sorted(o[-1] for o in cycle) == list(range(n))
        assert all(sorted(o) == list(range(n)) for o in cycle)
        # the next cycle runs each order reversed: who follows whom flips
        assert [h.round_order(n, n + r) for r in range(n)] == [o[::-1] for o in cycle]
    assert [h.round_order(2, r) for r in range(4)] == [[0, 1], [1, 0], [1, 0], [0, 1]]


def test_quantile_is_nearest_rank_and_summaries_use_it():
    xs = [float(i) for i in range(1, 101)]            # 1..100
    assert h.quantile(xs, 0.9) == 90 and h.quantile(xs, 0.99) == 99 and h.quantile(xs, 1.0) == 100
    assert h.quantile([3.0], 0.5) == 3.0 and math.isnan(h.quantile([], 0.5))
    assert h.median([1.0, 2.0, 3.0, 4.0]) == 2.5
    s = h.summarize([x / 1e3 for x in xs], "ms")
    assert s == pytest.approx({"min_ms": 1.0, "median_ms": 50.5, "p90_ms": 90.0, "p99_ms": 99.0, "mean_ms": 50.5,
                               "n": 100})
    with pytest.raises(ConfigError):
        h.quantile(xs, 0)
    with pytest.raises(ConfigError):
        h.summarize(xs, "minutes")


def test_ratios_against_a_baseline():
    assert h.ratio(3.0, 1.5) == 2.0 and math.isnan(h.ratio(1.0, 0.0)) and math.isnan(h.ratio(1.0, float("nan")))
    assert h.ratios_to({"fold": 2.0, "restore": 0.5}, "fold") == {"fold": 1.0, "restore": 0.25}
    with pytest.raises(ConfigError):
        h.ratios_to({"fold": 2.0}, "plain")


def test_run_rounds_warms_up_consumes_items_in_order_and_ticks_once_a_round():
    calls: list[tuple[str, int]] = []
    a = h.Contender("a", lambda i: calls.append(("a", i)), items=list(range(10)))
    b = h.Contender("b", lambda: calls.append(("b", -1)), cpu=True)
    c = h.Contender("c", lambda: 0.25, self_timed=True)
    ticks = []
    out = h.run_rounds([a, b, c], rounds=3, per_round=[1, 2, 3], warmup=2, tick=lambda: ticks.append(1),
                       collect="round")
    assert len(ticks) == h.rounds_ticks(3) == 4
    assert [i for who, i in calls if who == "a"] == list(range(8))        # 2 warm-up + 1 + 2 + 3, in order
    assert {k: len(v) for k, v in out.items()} == {"a": 6, "b": 6, "c": 6}   # the warm-up is not recorded
    assert out["c"] == [0.25] * 6 and len(b.cpu_samples_s) == 6 and a.cpu_samples_s == []
    assert all(x >= 0 for x in out["a"] + out["b"])
    with pytest.raises(KernelError, match="ran out of pre-built items"):
        h.run_rounds([h.Contender("short", lambda i: None, items=[1, 2])], rounds=3)
    for bad in ({"rounds": 0}, {"rounds": 2, "per_round": [1]}, {"rounds": 1, "warmup": -1},
                {"rounds": 1, "collect": "always"}):
        with pytest.raises(ConfigError):
            h.run_rounds([h.Contender("x", lambda: None)], **bad)
    with pytest.raises(ConfigError):
        h.run_rounds([h.Contender("x", lambda: None), h.Contender("x", lambda: None)], rounds=1)


def test_measured_dir_is_made_under_the_given_parent_says_which_disk_and_is_removed(tmp_path):
    with h.MeasuredDir(tmp_path, prefix="bench-test-") as d:
        assert d.path.parent == tmp_path and d.path.is_dir() and d.path.name.startswith("bench-test-")
        assert d.filesystem["fs_type"] and "ram_disk" in d.filesystem
        (d.path / "x").write_text("x")
    assert d.removed and list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match="not an existing directory"):
        h.MeasuredDir(tmp_path / "absent")
    m = h.machine_info(tmp_path)
    assert m["cpu_count"] >= 1 and m["python"] and m["tmp_dir"] == str(tmp_path) and "filesystem" in m


@pytest.mark.skipif(not Path("/proc/self/mountinfo").is_file(), reason="needs a Linux mount table")
def test_a_ram_disk_is_flagged():
    shm = Path("/dev/shm")
    if not shm.is_dir() or h.filesystem_of(shm)["fs_type"] != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    fs = h.filesystem_of(shm)
    assert fs["ram_disk"] is True and "RAM disk" in fs["warning"]
    root = h.filesystem_of(os.path.realpath("/"))
    assert root["mount_point"] == "/"


def test_progress_bar_uses_the_given_factory():
    made = []

    class Bar:
        def __init__(self, **kw):
            made.append(kw)

    h.progress_bar(7, enabled=False, factory=Bar)
    assert made == [{"total": 7, "unit": "round", "file": made[0]["file"], "leave": False, "disable": True}]


def test_growth_bench_on_a_short_trajectory(tmp_path):
    from kernel_lib.bench.growth import MODES, run_growth_bench

    r = run_growth_bench(tmp_path, turns=4, stride=2, bytes_per_turn=1000, restore_repeats=2)
    try:
        assert [x["mode"] for x in r["rows"]] == [m for m in MODES for _ in range(2)]
        by = {(x["mode"], x["checkpoint"]): x for x in r["rows"]}
        assert by[("incremental", 2)]["chain length"] == 1 and by[(MODES[0], 2)]["chain length"] == 0
        assert by[(MODES[2], 1)]["restore_ms"] is None and by[(MODES[1], 2)]["restore_ms"] > 0
        s = r["summary"]
        assert s["full_over_incremental_bytes"] == pytest.approx(
            s["bytes_written_total"][MODES[0]] / s["bytes_written_total"][MODES[1]])
        assert s["full_over_incremental_bytes"] > 1            # deltas write less than self-contained copies
        assert r["machine"]["tmp_dir"] == str(tmp_path)
        assert not (tmp_path / "restore-timing").exists()
    finally:
        for run in r["runs"].values():
            run["store"].close()
    with pytest.raises(ConfigError):
        run_growth_bench(tmp_path / "absent")
