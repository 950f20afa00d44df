"""``bench read``: the read-path figure and its target, printed by the command line (§11.2.1, §11.5.2).

Situation: a practitioner asks how fast a replacement worker can open, read and fold a log, and
the benchmarks had no figure for it. Invariant: ``bench read --json`` times open, read, fold and
the three together against a msgspec decode of the same event bytes measured in the same run,
prints fold throughput against a plain dict loop, and lists the read-path ratio under ``targets``
({name, measured, limit, passed}); the log it times reads back the events written. Goal: the
figure the issue sets a target for (open + read + fold <= 4x the decode) is on every machine's
report. No time is asserted (the machine is shared); only shapes, units and that ratios are
ratios of the medians measured.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from kernel_lib.bench.read import TARGET_READ_PATH_RATIO, format_read_bench, run_read_bench
from kernel_lib.errors import ConfigError


def test_the_read_bench_reports_ratios_to_the_msgspec_baseline_and_its_target(tmp_path):
    r = run_read_bench(60, rounds=1, dir=tmp_path)
    med, over = r["read_path"]["median_s"], r["read_path"]["over_msgspec"]
    assert set(med) >= {"msgspec_decode", "open", "read", "fold", "open_read_fold", "plain_loop"}
    for name, value in over.items():
        assert math.isclose(value, med[name] / med["msgspec_decode"]), name
    th = r["fold_throughput"]
    assert math.isclose(th["fold_over_plain"], th["fold_events_per_s"] / th["plain_loop_events_per_s"])
    [t] = r["targets"]
    assert set(t) == {"name", "measured", "limit", "passed"}
    assert t["measured"] == over["open_read_fold"] and t["limit"] == f"<= {TARGET_READ_PATH_RATIO:g}"
    assert t["passed"] is (t["measured"] <= TARGET_READ_PATH_RATIO)
    assert r["temp_dir_removed"] and not any(tmp_path.iterdir())
    assert "open + read + fold" in format_read_bench(r)


def test_bench_read_json_prints_the_target_on_the_command_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kernel_lib", "bench", "read", "--json", "--events", "40",
                           "--rounds", "1", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["benchmark"] == "read" and out["events"] == 40
    assert [t["name"] for t in out["targets"]] == [
        "open + read + fold of 40 events vs a msgspec JSON decode of the same bytes"]


@pytest.mark.parametrize("kw", [{"events": 5}, {"events": 60, "rounds": 0}])
def test_bad_arguments_are_a_config_error(kw, tmp_path):
    with pytest.raises(ConfigError):
        run_read_bench(**{"dir": tmp_path, **kw})
