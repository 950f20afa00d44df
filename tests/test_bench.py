"""``bench append`` in --quick mode without peers: the structure of what it reports.

No timing thresholds here: the targets live in the benchmark's own output, not in the tests.
"""

from __future__ import annotations

import math

import pytest

import kernel_lib.bench.append as bench
from kernel_lib.log import MemoryStore, SQLiteStore


def _expected_tiers() -> dict[str, set[str]]:
    out = {"memory": {t.label for t in MemoryStore.offered_tiers},
           "sqlite": {t.label for t in SQLiteStore.offered_tiers}}
    try:
        from kernel_lib.log.segment import SegmentStore
    except Exception:   # written concurrently; the bench reports it as skipped
        return out
    out["segment"] = {t.label for t in SegmentStore.offered_tiers}
    return out


def _positive_finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    return tmp_path_factory.mktemp("bench-parent")


class _Progress:
    """Stands in for tqdm: records the planned total and the rounds actually ticked."""

    bars: list["_Progress"] = []

    def __init__(self, total, **kw):
        self.total, self.done = total, 0
        self.bars.append(self)

    def update(self, n):
        self.done += n

    def set_description(self, _):
        pass

    def close(self):
        pass


@pytest.fixture(scope="module")
def result(parent):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench, "tqdm", _Progress)
        return bench.run_append_bench(dir=parent, quick=True, peers=False, progress=False)


def test_progress_total_is_the_rounds_run(result):
    (bar,) = _Progress.bars
    assert bar.done == bar.total


def test_machine_and_temp_dir_removed(result, parent):
    m = result["machine"]
    assert m["cpu_count"] >= 1 and m["python"] and m["sqlite_version"]
    assert m["filesystem"]["fs_type"]
    assert m["tmp_dir"].startswith(str(parent))
    assert list(parent.iterdir()) == [], "the benchmark must remove its temporary directory"


def test_every_store_and_tier_with_ratios_from_its_medians(result):
    al = result["append_latency"]
    assert set(al["baselines"]) == {"raw_write", "raw_write_fdatasync"}
    for fig in al["baselines"].values():
        assert _positive_finite(fig["median_us"]) and _positive_finite(fig["p99_us"])
        assert fig["n"] == result["config"]["iterations"]
    expected = _expected_tiers()
    assert {k: set(v) for k, v in al["stores"].items()} == expected
    for kind, tiers in al["stores"].items():
        for tier, fig in tiers.items():
            assert fig["n"] == result["config"]["iterations"], (kind, tier)
            assert fig["p99_us"] >= fig["median_us"] > 0
            assert fig["baseline"] == ("raw_write_fdatasync" if tier == "fdatasync" else "raw_write")
            assert _positive_finite(fig["ratio_median"]) and _positive_finite(fig["ratio_p99"])
            base = al["baselines"][fig["baseline"]]
            assert fig["ratio_median"] == pytest.approx(fig["median_us"] / base["median_us"])
            assert fig["ratio_p99"] == pytest.approx(fig["p99_us"] / base["p99_us"])


def test_group_commit_both_writer_models_for_1_4_16_writers(result):
    gc = result["group_commit"]
    assert gc["tier"] == "fdatasync" and gc["flush_timer_s"] == bench.DEFAULT_FLUSH_TIMER_S == 0.001
    assert set(gc["writer_models"]) == {"threads", "asyncio"}
    durable = set(_expected_tiers()) - {"memory"}
    assert set(gc["stores"]) == durable
    for kind, models in gc["stores"].items():
        assert set(models) == {"threads", "asyncio"}, kind
        for model, rows in models.items():
            assert [r["writers"] for r in rows] == [1, 4, 16]
            for r in rows:
                where = (kind, model, r["writers"])
                for k in ("single_flush_events_per_s", "group_commit_events_per_s", "speedup", "mean_batch_size",
                          "mean_storage_s", "amortized_storage_per_event_s", "time_per_flush_s"):
                    assert _positive_finite(r[k]), (*where, k)
                assert r["mean_queue_wait_s"] >= 0
                assert r["speedup"] == pytest.approx(r["group_commit_events_per_s"] / r["single_flush_events_per_s"])
                assert r["mean_wait_s"] == pytest.approx(r["mean_queue_wait_s"] + r["mean_storage_s"])
                # every measured event went through the committer exactly once, and nothing else did
                per_writer = result["config"]["group_events"] // r["writers"]
                assert r["events"] == per_writer * r["writers"] * gc["rounds"], where
                assert r["flushes"] * r["mean_batch_size"] == pytest.approx(r["events"])
                assert r["time_per_flush_s"] == pytest.approx(
                    r["events"] / r["group_commit_events_per_s"] / r["flushes"])
            assert rows[-1]["mean_batch_size"] > 1, f"{kind}/{model}: 16 writers never shared a flush"


def _check_step_figure(fig, trajectories):
    assert fig["trajectories"] == trajectories
    assert set(fig["skipped_peers"]) == {"dbos", "langgraph"}
    assert fig["comparison"] == {}
    ours = {k for k in fig["systems"] if k.startswith("ours/")}
    kinds = set(_expected_tiers()) - {"memory"}
    # the fleet measures both committers: a flusher thread (ours/KIND) and leader/follower (ours/KIND+leader)
    assert ours == {f"ours/{k}{suffix}" for k in kinds
                    for suffix in (("", bench.LEADER_SUFFIX) if trajectories > 1 else ("",))}
    for name in ours:
        s = fig["systems"][name]
        assert s["durability_overhead_us"] == pytest.approx(s["durable_step_us"] - s["non_durable_step_us"])
        assert s["durability"]["fsync_durable"] is True
        assert s["barriers_per_step"] == 1, "the gate's step: one admission+intent barrier; the reconcilable " \
                                            "endpoint's result rides the next one"
        assert set(s["run_us"]) == {f"{m}_{n}_steps" for m in ("durable", "plain")
                                    for n in (fig["steps_short_run"], fig["steps_long_run"])}
        assert all(math.isfinite(v) for v in s["run_us"].values())
        # per-step time is the slope between the two run lengths, per trajectory
        slope = ((s["run_us"][f"durable_{fig['steps_long_run']}_steps"] - s["run_us"]["durable_1_steps"])
                 / ((fig["steps_long_run"] - fig["steps_short_run"]) * trajectories))
        assert s["durable_step_us"] == pytest.approx(slope)
    return ours


def test_per_step_of_one_trajectory_without_peers(result):
    ps = result["per_step"]
    for name in _check_step_figure(ps, 1):
        assert "group_commit" not in ps["systems"][name]
        assert "durable_cpu_us_per_step" not in ps["systems"][name]


def test_fleet_of_16_trajectories_through_one_committer(result):
    fleet = result["fleet"]
    assert result["config"]["fleet_size"] == bench.FLEET_SIZE == 16
    assert fleet["runs"] == result["config"]["fleet_runs"]
    for name in _check_step_figure(fleet, 16):
        s = fleet["systems"][name]
        assert s["durability_overhead_cpu_us"] == pytest.approx(
            s["durable_cpu_us_per_step"] - s["non_durable_cpu_us_per_step"])
        g = s["group_commit"]   # one committer served every durable run of the figure
        assert g["flushes"] * g["mean_batch_size"] == pytest.approx(g["events"])
        assert g["mean_batch_size"] > 1, f"{name}: 16 trajectories never shared a flush"
        assert any("ONE" in n and "Committer" in n for n in s["notes"])
        leader = name.endswith(bench.LEADER_SUFFIX)
        assert any(("LeaderGroupCommitter" in n) == leader and "ONE" in n for n in s["notes"])


def test_floor_and_overhead_targets_from_the_reported_figures():
    """The floor ratio and the target rows are recomputed from a figure's own numbers."""
    steps = {"systems": {
        "ours/segment": {"durable_step_us": 900.0, "durability_overhead_us": 600.0, "barriers_per_step": 2.0},
        "langgraph": {"durable_step_us": 1200.0, "durability_overhead_us": 1000.0},
        "dbos": {"durable_step_us": 3000.0, "durability_overhead_us": 2900.0}}}
    cmp_ = bench._compare_to_peers(steps, raw_fdatasync_us=250.0)
    over = cmp_["durability_overhead_us"]
    assert over["faster_peer"] == "langgraph"
    assert over["ours_over_faster_peer"]["ours/segment"] == pytest.approx(0.6)
    floor = over["floor"]
    assert floor["target_us"] == pytest.approx(bench.TARGET_OVERHEAD_RATIO * 1000.0)
    assert floor["one_barrier_ratio"] == pytest.approx(0.25)
    assert floor["ours"]["ours/segment"] == pytest.approx({"barriers_per_step": 2.0, "floor_us": 500.0,
                                                           "floor_ratio": 0.5})
    (row,) = bench._overhead_targets(3, False, cmp_)
    assert row["passed"] is False and row["floor_ratio"] == pytest.approx(0.5)
    assert "unreachable for one trajectory" in row["detail"]
    assert "floor" not in bench._compare_to_peers(steps)["durability_overhead_us"]   # fleet: no floor
    (fleet_row,) = bench._overhead_targets(4, True, bench._compare_to_peers(steps))
    assert "fleet" in fleet_row["name"] and "detail" not in fleet_row


def test_the_sqlite_engine_floor_is_no_peer_and_is_printed_beside_ours_sqlite():
    """engine/sqlite (SQLite alone, no code of ours) never stands in as the faster peer, and its
    overhead ratio appears on the ours/sqlite row only."""
    steps = {"systems": {
        "ours/sqlite": {"durable_step_us": 900.0, "durability_overhead_us": 500.0, "barriers_per_step": 1.0},
        "ours/segment": {"durable_step_us": 800.0, "durability_overhead_us": 300.0, "barriers_per_step": 1.0},
        bench.ENGINE_FLOOR: {"durable_step_us": 320.0, "durability_overhead_us": 320.0},
        "langgraph": {"durable_step_us": 1200.0, "durability_overhead_us": 1000.0}}}
    cmp_ = bench._compare_to_peers(steps, raw_fdatasync_us=200.0)
    over = cmp_["durability_overhead_us"]
    assert over["faster_peer"] == "langgraph" and bench.ENGINE_FLOOR not in over["ours_over_faster_peer"]
    assert over["floor"]["sqlite_engine"] == pytest.approx({"overhead_us": 320.0, "ratio": 0.32})
    rows = {r["name"].split()[0]: r for r in bench._overhead_targets(3, False, cmp_)}
    assert set(rows) == {"ours/sqlite", "ours/segment"}
    assert rows["ours/sqlite"]["engine_floor_ratio"] == pytest.approx(0.32)
    assert "adds 0.18" in rows["ours/sqlite"]["detail"]
    assert "engine_floor_ratio" not in rows["ours/segment"]


def test_the_bench_runs_from_inside_a_running_event_loop(tmp_path):
    """Notebooks and marimo call it from a running loop; figure 2's asyncio writers need their own."""
    import asyncio

    async def main():
        return bench.run_append_bench(dir=tmp_path, quick=True, peers=False, progress=False)

    r = asyncio.run(main())
    assert r["group_commit"]["stores"] and r["targets"]


# --- bench restore (§11.4): structure on a tiny log, no timing thresholds ------------------------


def test_bench_restore_runs_from_the_cli_on_a_tiny_log(tmp_path):
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "kernel_lib", "bench", "restore", "--json", "--sizes", "120",
                          "--rounds", "1", "--positions", "3", "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    r = json.loads(out)
    (x,) = r["results"]
    reach = x["reach_last_position"]
    assert x["events"] == 120 and reach["restore_equals_fold"] is True
    assert reach["head"] == 120 + len(x["captures"]) + 1          # the Checkpoint events and the consolidated base
    assert [c["kind"] for c in x["captures"]] == ["full"] + ["incremental"] * (len(x["captures"]) - 1)
    assert reach["chain_length"] == len(x["captures"]) - 1 and x["consolidation"]["supersedes"] == reach["chain_length"]
    for k in ("fold_from_start", "restore_latest", "restore_chain"):
        assert _positive_finite(reach["median_s"][k])
    assert _positive_finite(reach["speedup_latest"]) and _positive_finite(x["fold_throughput"]["fold_over_plain"])
    assert _positive_finite(x["scrubber"]["median_ms"]) and "record_view" in x["scrubber"]["via"]
    assert [t["passed"] for t in r["targets"]] == [None, None]        # the targets are for 100 000 events
    assert r["temp_dir_removed"] and list(tmp_path.iterdir()) == []


def test_bench_restore_refuses_bad_arguments():
    import kernel_lib.bench.restore as rb
    from kernel_lib.errors import ConfigError

    for kw in ({"sizes": [5]}, {"store": "memory"}, {"rounds": 0}, {"scrub_positions": 0}):
        with pytest.raises(ConfigError):
            rb.run_restore_bench(**kw)


def test_bench_restore_runs_a_repeated_size_once(tmp_path):
    """Fault: the same size is given twice (``--sizes 20 20``); both runs shared one log path, so
    the second appended a second TaskStarted to the first's log and failed. Invariant: each size
    has its own log. Goal: a repeated size is run once and reported once."""
    import kernel_lib.bench.restore as rb

    r = rb.run_restore_bench(sizes=[20, 20], rounds=1, scrub_positions=1, dir=str(tmp_path))
    assert r["sizes"] == [20] and [x["events"] for x in r["results"]] == [20]
    assert r["results"][0]["reach_last_position"]["restore_equals_fold"] is True
    assert r["temp_dir_removed"] and list(tmp_path.iterdir()) == []



def _figure_3_report(steps, cmp_):
    """Figure 3's printed lines for a hand-made ``steps`` and its comparison."""
    for v in steps["systems"].values():
        v.update(non_durable_step_us=v["durable_step_us"] - v["durability_overhead_us"], durability={}, notes=[])
    return "\n".join(bench._format_steps({**steps, "trajectories": 1, "steps_short_run": 1, "steps_long_run": 21,
                                           "runs": 1, "note": "", "skipped_peers": {}, "comparison": cmp_}, "3."))


@pytest.mark.parametrize("in_step_us, unreachable", [(480.0, True), (300.0, False)])
def test_the_in_step_engine_floor_is_no_peer_and_says_when_it_is_above_the_limit(in_step_us, unreachable):
    """engine/sqlite+step (the same SQLite work inside the gate's step) is a floor, never a peer;
    the ours/sqlite row reports it, what our store adds over it, and whether the floor itself is
    already above the limit."""
    steps = {"systems": {
        "ours/sqlite": {"durable_step_us": 900.0, "durability_overhead_us": 500.0, "barriers_per_step": 1.0},
        bench.ENGINE_FLOOR: {"durable_step_us": 320.0, "durability_overhead_us": 320.0},
        bench.ENGINE_IN_STEP: {"durable_step_us": in_step_us + 300.0, "durability_overhead_us": in_step_us},
        "langgraph": {"durable_step_us": 400.0, "durability_overhead_us": 1000.0}}}
    cmp_ = bench._compare_to_peers(steps, raw_fdatasync_us=200.0)
    over = cmp_["durability_overhead_us"]
    assert over["faster_peer"] == "langgraph"   # the floors are faster per step, yet no peer
    assert bench.ENGINE_IN_STEP not in over["ours_over_faster_peer"]
    assert over["floor"]["sqlite_engine_in_step"]["ratio"] == pytest.approx(in_step_us / 1000.0)
    (row,) = bench._overhead_targets(3, False, cmp_)
    assert row["engine_in_step_floor_ratio"] == pytest.approx(in_step_us / 1000.0)
    assert f"our store adds {0.5 - in_step_us / 1000.0:+.2f}" in row["detail"]
    assert ("no store doing these two SQLite commits" in row["detail"]) is unreachable
    report = _figure_3_report(steps, cmp_)
    assert bench.ENGINE_IN_STEP in report


@pytest.mark.parametrize("barrier_us, unreachable", [(380.0, True), (250.0, False)])
def test_one_barrier_inside_the_step_is_a_floor_of_every_store(barrier_us, unreachable):
    """floor/fdatasync+step (the gate's step with one raw fdatasync, no store) is a floor, never a
    peer; every ours row reports it, what its store adds over it, and whether that floor is already
    above the limit for one trajectory."""
    steps = {"systems": {
        "ours/segment": {"durable_step_us": 700.0, "durability_overhead_us": 300.0, "barriers_per_step": 1.0},
        "ours/sqlite": {"durable_step_us": 900.0, "durability_overhead_us": 500.0, "barriers_per_step": 1.0},
        bench.BARRIER_IN_STEP: {"durable_step_us": barrier_us + 200.0, "durability_overhead_us": barrier_us},
        "langgraph": {"durable_step_us": 1100.0, "durability_overhead_us": 1000.0}}}
    cmp_ = bench._compare_to_peers(steps, raw_fdatasync_us=140.0)
    over = cmp_["durability_overhead_us"]
    assert bench.BARRIER_IN_STEP not in over["ours_over_faster_peer"] and over["faster_peer"] == "langgraph"
    rows = {r["name"].split()[0]: r for r in bench._overhead_targets(3, False, cmp_)}
    assert set(rows) == {"ours/segment", "ours/sqlite"}
    for name, measured in (("ours/segment", 0.3), ("ours/sqlite", 0.5)):
        row = rows[name]
        assert row["barrier_in_step_floor_ratio"] == pytest.approx(barrier_us / 1000.0)
        assert f"this store adds {measured - barrier_us / 1000.0:+.2f}" in row["detail"]
        assert ("no design waiting for one barrier per step" in row["detail"]) is unreachable
    report = _figure_3_report(steps, cmp_)
    assert f"floor of one barrier inside the step ({bench.BARRIER_IN_STEP}" in report


@pytest.mark.parametrize("args, says", [
    (["--iterations", str(10 ** 22)], "--iterations must be"),
    (["--flush-timer-ms", "nan"], "flush timer"),
    (["--flush-timer-ms", "inf"], "flush timer"),
])
def test_bench_append_refuses_a_huge_or_non_finite_setting_before_it_measures_anything(tmp_path, args, says):
    """Fault model: a typo'd --iterations (10**22 appends: the run would build events until the
    machine runs out of memory) or a NaN/inf flush timer (seen refused only by the group committer,
    after figure 1 had been measured). Goal: exit 2 at once with a clear error; no temporary
    directory is created under --dir. Run as a subprocess with a timeout: without the check it
    would not come back."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    try:
        done = subprocess.run([sys.executable, "-m", "kernel_lib", "bench", "append", "--no-peers",
                               "--dir", str(tmp_path), *args], capture_output=True, text=True, timeout=30, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"bench append {args} was still running after 30 s instead of refusing the setting")
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert says in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("iterations", [10 ** 22, bench.MAX_ITERATIONS + 1] if hasattr(bench, "MAX_ITERATIONS")
                         else [10 ** 22])
def test_bench_plan_refuses_more_iterations_than_it_can_hold(iterations):
    with pytest.raises(bench.KernelError, match="--iterations must be"):
        bench.BenchPlan.make(iterations)
