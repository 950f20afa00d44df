"""``bench append`` in --quick mode without peers: the structure of what it reports.

No timing thresholds here: the targets live in the benchmark's own output, not in the tests.
"""

from __future__ import annotations

import json
import math
import sys

import pytest

from kernel_lib import bench
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


@pytest.fixture(scope="module")
def result(parent):
    return bench.run_append_bench(dir=parent, quick=True, peers=False, progress=False)


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


def test_group_commit_for_1_4_16_writers(result):
    gc = result["group_commit"]
    assert gc["tier"] == "fdatasync" and gc["flush_timer_s"] > 0
    durable = set(_expected_tiers()) - {"memory"}
    assert set(gc["stores"]) == durable
    for kind, rows in gc["stores"].items():
        assert [r["writers"] for r in rows] == [1, 4, 16]
        for r in rows:
            for k in ("single_flush_events_per_s", "group_commit_events_per_s", "speedup",
                      "mean_batch_size", "mean_storage_s", "amortized_storage_per_event_s"):
                assert _positive_finite(r[k]), (kind, r["writers"], k)
            assert r["mean_queue_wait_s"] >= 0
            assert r["speedup"] == pytest.approx(r["group_commit_events_per_s"] / r["single_flush_events_per_s"])
            assert r["mean_wait_s"] == pytest.approx(r["mean_queue_wait_s"] + r["mean_storage_s"])
            assert r["flushes"] * r["mean_batch_size"] == pytest.approx(r["events"])
        sixteen = rows[-1]
        assert sixteen["mean_batch_size"] > 1, f"{kind}: 16 writers never shared a flush"


def test_per_step_ours_without_peers(result):
    ps = result["per_step"]
    assert set(ps["skipped_peers"]) == {"dbos", "langgraph"}
    assert ps["comparison"] == {}
    ours = {k for k in ps["systems"] if k.startswith("ours/")}
    assert ours == {f"ours/{k}" for k in set(_expected_tiers()) - {"memory"}}
    for name in ours:
        s = ps["systems"][name]
        assert s["durability_overhead_us"] == pytest.approx(s["durable_step_us"] - s["non_durable_step_us"])
        assert s["durability"]["fsync_durable"] is True
        assert all(math.isfinite(v) for v in s["run_us"].values())


def test_our_step_without_the_dispatch_gate(tmp_path, monkeypatch):
    """Without kernel_lib.dispatch, our step is the gate's durable path by hand: two appends."""
    monkeypatch.setitem(sys.modules, "kernel_lib.dispatch", None)   # import now raises ImportError
    stores = bench._Stores(tmp_path)
    try:
        system = bench._our_step_system("sqlite", stores)
        assert "TrajectoryLog" in system.notes[0]
        system.run(True, 3, "durable")
        system.run(False, 3, "plain")
        durable = stores.opened[0]
        assert [e.event_type for e in durable.read("step-durable")] == ["ToolIntent", "ToolResult"] * 3
        assert system.durability()["fsync_durable"] is True
    finally:
        stores.close()


def test_targets_listed_with_pass_fail(result):
    figures = {t["figure"] for t in result["targets"]}
    assert figures == {1, 2, 3}
    for t in result["targets"]:
        assert t["passed"] in (True, False, None)
        if t["figure"] == 3:
            assert t["passed"] is None   # no peers measured: not evaluated


def test_report_is_readable(result):
    text = bench.format_report(result)
    for heading in ("1. Per-append latency", "2. Group commit", "3. Per-step time", "4. Targets"):
        assert heading in text
    assert "skipped dbos: --no-peers" in text


def test_cli_json_is_one_object(tmp_path, capsys):
    assert bench.main(["append", "--quick", "--no-peers", "--json", "--dir", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"machine", "config", "append_latency", "group_commit", "per_step", "targets"}
    assert list(tmp_path.iterdir()) == []


def test_cli_help_and_bad_iterations(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["append", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--json", "--dir", "--iterations", "--quick", "--no-peers"):
        assert flag in out
    assert bench.main(["append", "--iterations", "0", "--no-peers"]) == 2
