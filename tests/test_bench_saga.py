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
    assert set(gap) == {"write", "fdatasync"} and all(set(p) == {"appended", "read_back"} for p in gap.values())
    assert {k: f["tier"] for k, f in r["unwind"].items()} == {"memory": "memory", "sqlite": "fdatasync",
                                                             "segment": "fdatasync"}
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


def test_the_tables_name_the_tiers_as_the_help_does(quick):
    """Newcomer report: the help spoke of the write and fdatasync tiers while the tables said none and
    host_crash. Both now use kernel_lib.log.AckTier's labels."""
    from kernel_lib.bench.saga import format_saga_bench
    from kernel_lib.cli import build_parser
    from kernel_lib.log import AckTier

    r, _ = quick
    text = format_saga_bench(r)
    fig2, fig3 = text.split("\n2. ")[1].split("\ntargets:")[0].split("\n3. ")
    assert "(fdatasync)" in fig2 and "(memory" in fig2
    rows = [line.split()[0] for line in fig3.splitlines()[1:] if line.startswith("  ")]
    assert set(rows) == {AckTier.WRITE.label, AckTier.FDATASYNC.label}
    assert "host_crash" not in text and " none " not in text
    bench = build_parser("bench")._subparsers._group_actions[0].choices["bench"]
    help_text = bench._subparsers._group_actions[0].choices["saga"].format_help()
    for tier in AckTier:
        if tier is not AckTier.QUORUM:
            assert tier.label in help_text


def test_saga_help_is_plain_text_and_gives_the_exit_status():
    out = subprocess.run([sys.executable, "-m", "kernel_lib", "bench", "saga", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0
    for markup in ("``", "**", ":attr:", ":func:", ":class:", ":mod:"):
        assert markup not in out.stdout, markup
    assert "exit status:" in out.stdout and "whether its targets passed or not" in out.stdout


def test_a_missed_target_is_reported_not_an_exit_status(monkeypatch, capsys):
    """As bench append: the command exits 0 once the benchmark ran; a target that fails is in the output."""
    import kernel_lib.bench.saga as saga_bench
    from kernel_lib.cli import main

    missed = {"benchmark": "saga", "targets": [{"name": "x", "measured": 9.0, "limit": "<= 1.5", "passed": False}]}
    monkeypatch.setattr(saga_bench, "run_saga_bench", lambda **kw: missed)
    assert main(["bench", "saga", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["targets"][0]["passed"] is False
    monkeypatch.undo()
    assert main(["bench", "saga", "--rounds", "0"]) == 2
    assert capsys.readouterr().err == "error: rounds must be an integer >= 1, got 0\n"
