"""LANL failure records: the loader (built for the format, not for two files), inter-arrival
statistics, the Poisson check with its bootstrap-calibrated KS p-value, and the cadence they drive.

The real files are read from ../shared/data/failures/lanl/ relative to the repository root and
never copied; tests that need them skip with the reason when they are absent.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from scipy import stats

import kernel_lib.cadence.formulas as f
from kernel_lib.cadence.lanl import (
    analyze_lanl,
    arrival_stats,
    arrival_times_s,
    gaps_s,
    ks_statistic_exponential,
    load_lanl,
    poisson_check,
    replay_interval,
)
from kernel_lib.cli import main
from kernel_lib.errors import CadenceParameterError, FailureDataError

REPO = Path(__file__).resolve().parents[1]
LANL = REPO.parent / "shared" / "data" / "failures" / "lanl"

HEADER = ("System,machine type,nodes,procstot,procsinnode,nodenum,nodenumz,node install,node prod,node decom,"
          "fru type,mem,cputype,memtype,num intercon,purpose,Prob Started,Prob Fixed,Down Time,Facilities,Hardware,"
          "Human Error,Network,Undetermined,Software,Same Event")


def row(node: int, started: str, fixed: str = "", down: str = "10", hw: str = "CPU", sw: str = "",
        same: str = "No", system: int = 7) -> str:
    return (f"{system},cluster,4,16,4,{node + 1},{node},1-Oct,1-Dec,current,part,16,2,2,2,compute,{started},{fixed},"
            f"{down},,{hw},,,,{sw},{same}")


def write(tmp_path: Path, lines: list[str], name: str = "sys.csv") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.fixture
def messy(tmp_path):
    lines = [
        HEADER.replace("Prob Started", "  prob  STARTED ").replace("Same Event", "Same Event "),  # line 1
        row(0, "1/2/2002 12:00", "1/2/2002 18:30", "390"),                 # 2
        "",                                                                 # 3 blank
        row(1, " 1/3/2002   9:00 ", "1/3/2002 9:45", " 45 "),              # 4 odd whitespace
        row(1, "1/3/2002 9:00", "1/3/2002 9:45", "45"),                    # 5 repeats line 4 after trimming
        row(2, "1/5/2002 10:00", "", ""),                                  # 6 no fix time, no down time
        row(3, "1/5/2002 10:30", "1/5/2002 11:00", "30", same="Yes"),       # 7 same event
        row(0, "13/40/2002 10:00", "", ""),                                # 8 bad start
        row(0, "1/6/2002 10:00", "1/6/2002 11:00", "abc"),                 # 9 bad down time
        row(0, "1/7/2002 10:00", "1/7/2002 11:00", "60") + ",extra",       # 10 too many fields
        row(0, "1/8/02 10:00", "1/8/02 10:30", "30", hw="", sw='"Disk IO, firmware and storage"'),  # 11 2-digit year
        row(0, "1/9/2002 10:00", "1/9/2002 09:00", "-5"),                  # 12 negative down time
        row(2, "1/10/2002 10:00", "1/10/2002 09:00", "5"),                 # 13 fixed before started
        "   ",                                                              # 14 whitespace-only
        row(1, "1/11/2002 10:00", "1/11/2002 10:05", "5", same="maybe"),    # 15 unknown Same Event
    ]
    return write(tmp_path, lines)


def test_loader_handles_the_format_not_just_two_files(messy):
    r = load_lanl(messy)
    assert r.blank_lines == 2 and r.data_rows == 12
    assert {(s.line, s.reason.split(" ")[0]) for s in r.skipped} == {
        (8, "start"), (9, "down"), (10, "more"), (12, "down"), (15, "Same")}
    assert r.duplicates_dropped == 1
    assert r.same_event_rows == 1
    assert r.missing_fixed == 1 and r.fixed_before_started == 1
    assert r.frame.height == 12 - 5 - 1
    by_line = {d["line"]: d for d in r.frame.to_dicts()}
    assert by_line[11]["started"].year == 2002 and by_line[11]["blame"] == "software"
    assert by_line[11]["blame_detail"] == "Disk IO, firmware and storage"
    assert by_line[6]["fixed"] is None and by_line[6]["down_time_min"] is None
    assert by_line[13]["fixed"] is None
    assert r.node_column == "nodenumz" and r.systems == [7]


def test_loader_raises_naming_the_line(messy):
    with pytest.raises(FailureDataError) as ei:
        load_lanl(messy, errors="raise")
    assert ei.value.line == 8 and "13/40/2002" in str(ei.value) and str(messy) in str(ei.value)
    with pytest.raises(CadenceParameterError):
        load_lanl(messy, errors="ignore")


def test_loader_rejects_files_that_are_not_failure_records(tmp_path):
    with pytest.raises(FailureDataError, match="no such file"):
        load_lanl(tmp_path / "absent.csv")
    with pytest.raises(FailureDataError):
        load_lanl(write(tmp_path, [""], "empty.csv"))
    p = write(tmp_path, ["", "a,b,c", "1,2,3"], "other.csv")
    with pytest.raises(FailureDataError) as ei:
        load_lanl(p)
    assert ei.value.line == 2 and "prob started" in str(ei.value)
    with pytest.raises(FailureDataError, match="no usable"):
        load_lanl(write(tmp_path, [HEADER, row(0, "garbage")], "bad.csv"))


def test_same_event_rows_are_left_out_of_arrivals_unless_asked(messy):
    r = load_lanl(messy)
    assert len(arrival_times_s(r)) == len(arrival_times_s(r, include_same_event=True)) - 1
    with pytest.raises(FailureDataError):
        arrival_times_s(r, system=99)


def test_simultaneous_failures_merge_into_one_interrupt(tmp_path):
    p = write(tmp_path, [HEADER, row(0, "1/1/2003 0:00"), row(1, "1/1/2003 0:00"), row(2, "1/1/2003 1:00"),
                         row(0, "1/1/2003 3:00")])
    r = load_lanl(p)
    assert gaps_s(arrival_times_s(r)) == [3600.0, 7200.0]
    assert gaps_s(arrival_times_s(r, merge_simultaneous=False)) == [0.0, 3600.0, 7200.0]
    assert gaps_s(arrival_times_s(r, node=0)) == [3 * 3600.0]


def test_arrival_stats_are_exact_on_known_times():
    s = arrival_stats([0.0, 10.0, 30.0, 60.0], "x")
    assert s.mtbf_s == 20.0 and s.gaps == 3 and s.median_gap_s == 20.0
    assert math.isclose(s.cv, 10.0 / 20.0)   # sd of (10, 20, 30) is 10


def test_ks_statistic_matches_scipy():
    rng = random.Random(3)
    g = [rng.expovariate(1 / 50.0) for _ in range(200)]
    m = sum(g) / len(g)
    assert math.isclose(ks_statistic_exponential(g, m), stats.kstest(g, "expon", args=(0, m)).statistic,
                        rel_tol=1e-12)


def test_poisson_check_accepts_poisson_and_rejects_clustered_arrivals():
    rng = random.Random(11)
    poisson = [rng.expovariate(1 / 3600.0) for _ in range(400)]
    ok = poisson_check(poisson, resolution_s=0.0, bootstrap=199, seed=1)
    assert ok.poisson_plausible and 0.7 < ok.cv < 1.3 and "consistent with Poisson" in ok.verdict
    # bursts: many short gaps inside incidents, long quiet stretches between them (CV well above 1)
    clustered = [rng.expovariate(1 / 60.0) if rng.random() < 0.8 else rng.expovariate(1 / 20000.0) for _ in range(400)]
    bad = poisson_check(clustered, resolution_s=0.0, bootstrap=199, seed=1)
    assert not bad.poisson_plausible and bad.cv > 1.5 and bad.verdict.startswith("not Poisson")
    with pytest.raises(CadenceParameterError):
        poisson_check([1.0, 2.0])


def test_plain_ks_p_value_is_optimistic_when_the_rate_is_fitted():
    # under the null, a test at nominal 5% should reject 5% of samples; with the mean estimated from
    # the same data the plain KS p-value rejects far fewer, which is why the bootstrap is used
    rng = random.Random(2024)
    rejects = 0
    for _ in range(400):
        g = [rng.expovariate(1.0) for _ in range(60)]
        m = sum(g) / len(g)
        rejects += stats.kstest(g, "expon", args=(0, m)).pvalue < 0.05
    assert rejects / 400 < 0.02


def test_replay_matches_young_on_a_long_poisson_trace():
    rng = random.Random(5)
    mtbf, pause = 3600.0, 10.0
    t, times = 0.0, [0.0]
    for _ in range(20000):
        t += rng.expovariate(1 / mtbf)
        times.append(t)
    tau = f.young_interval_s(pause, mtbf)
    assert math.isclose(replay_interval(times, tau, pause), f.young_optimal_overhead_fraction(pause, mtbf),
                        rel_tol=0.05)
    # further from the optimum costs more, on the real account as in the model
    assert replay_interval(times, 10 * tau, pause) > replay_interval(times, tau, pause)
    assert replay_interval(times, tau / 10, pause) > replay_interval(times, tau, pause)
    with pytest.raises(CadenceParameterError):
        replay_interval([0.0], tau, pause)


def test_analysis_and_cli_on_a_synthetic_file(tmp_path, capsys):
    rng = random.Random(9)
    lines, t = [HEADER], 0.0
    import datetime as dt
    base = dt.datetime(2003, 1, 1)
    for _ in range(120):
        t += rng.expovariate(1 / 36000.0)
        when = base + dt.timedelta(seconds=t)
        lines.append(row(rng.randrange(4), f"{when.month}/{when.day}/{when.year} {when.hour}:{when.minute:02d}"))
    p = write(tmp_path, lines)
    a = analyze_lanl(p, pause_s=30, bootstrap=99)
    s = a.systems[0]
    assert s.system == 7 and s.nodes_in_system == 4 and s.cadence_system is not None
    assert math.isclose(s.cadence_system.young_interval_s, math.sqrt(2 * 30 * s.stats.mtbf_s))
    assert a.per_node.height == 4
    assert set(a.per_node.columns) >= {"node", "failures", "mtbf_s", "cv", "young_interval_s"}
    assert main(["cadence", "lanl", "--path", str(p), "--bootstrap", "99", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["systems"][0]["arrivals"]["failures"] == s.stats.failures
    assert main(["cadence", "lanl", "--path", str(tmp_path / "nope.csv")]) == 2
    assert "no such file" in capsys.readouterr().err


# --- the real records, read in place --------------------------------------------------------------------
def _real(name: str) -> Path:
    p = LANL / name
    if not p.is_file():
        pytest.skip(f"LANL failure data not present at {p} (the shared data directory is not mounted)")
    return p


@pytest.mark.parametrize("name,rows,dups,mtbf_h,cv", [
    ("system20.csv", 2478, 2, 13.59, 1.99),
    ("system02.csv", 7104, 6, 14.02, 1.67),
])
def test_real_lanl_systems(name, rows, dups, mtbf_h, cv):
    r = load_lanl(_real(name))
    assert r.data_rows == rows and r.duplicates_dropped == dups and not r.skipped
    a = analyze_lanl(r, pause_s=60, bootstrap=199, seed=0)
    s = a.systems[0]
    assert abs(s.stats.mtbf_s / 3600 - mtbf_h) < 0.01 and abs(s.stats.cv - cv) < 0.01
    assert not s.poisson.poisson_plausible            # failures cluster: CV well above 1
    # no simulated Poisson sample came near the observed statistic: the smallest p 199 samples can show
    assert s.poisson.ks_p_bootstrap == pytest.approx(1 / 200)
    c = s.cadence_system
    assert abs(c.young_interval_s - math.sqrt(2 * 60 * s.stats.mtbf_s)) < 1e-6
    # the replay grid contains Young's interval itself, so the best is at most its cost; and the
    # minimum is flat on the real times too
    assert c.best_replay_overhead <= c.replay_overhead_at_young <= 1.1 * c.best_replay_overhead


# --- adversarial review: paths, CLI parameters, node counts, malformed values, dates, quotes ----------
def _one_error_line(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def _synthetic(tmp_path: Path, n: int = 40) -> Path:
    return write(tmp_path, [HEADER] + [row(i % 4, f"1/{1 + i % 28}/2003 {i % 24}:00") for i in range(n)])


def test_a_directory_is_reported_as_one(tmp_path, capsys):
    with pytest.raises(FailureDataError, match="is a directory"):
        load_lanl(tmp_path)
    err = _one_error_line(capsys, ["cadence", "lanl", "--path", str(tmp_path)])
    assert "is a directory" in err and "no such file" not in err


@pytest.mark.parametrize("flags, says", [
    (["--seed", "-1"], "--seed"),                      # was a numpy ValueError traceback
    (["--bootstrap", "1000000000"], "--bootstrap"),    # would run for hours
    (["--bootstrap", "0"], "--bootstrap"),
    (["--pause-s", "1e300"], "--pause-s"),
])
def test_cli_lanl_bad_parameters_are_one_error_line(tmp_path, capsys, flags, says):
    err = _one_error_line(capsys, ["cadence", "lanl", "--path", str(_synthetic(tmp_path)), *flags])
    assert says in err


def test_bad_seed_and_bootstrap_are_refused_before_any_work(tmp_path):
    p = _synthetic(tmp_path)
    for kw, name in (({"seed": -1}, "seed"), ({"seed": None}, "seed"), ({"seed": "0"}, "seed"),
                     ({"bootstrap": 10 ** 9}, "bootstrap")):
        with pytest.raises(CadenceParameterError) as ei:
            analyze_lanl(p, **kw)
        assert ei.value.name == name
    with pytest.raises(CadenceParameterError):
        poisson_check([1.0, 2.0, 3.0, 4.0], seed=-1)


def test_declared_node_count_below_the_failing_nodes_is_raised_and_warned(tmp_path, capsys):
    lines = [HEADER] + [row(i, f"1/{1 + i % 28}/2003 {i % 24}:00").replace(",cluster,4,", ",cluster,1,")
                        for i in range(40)]
    p = write(tmp_path, lines)
    a = analyze_lanl(p, bootstrap=19)
    s = a.systems[0]
    assert s.nodes_declared == 1 and s.nodes_with_failures == 40 and s.nodes_in_system == 40
    assert s.node_mtbf_pooled_s == pytest.approx(40 * s.stats.window_s / s.node_failures)
    assert len(s.warnings) == 1 and "declare 1 node" in s.warnings[0] and "40 distinct" in s.warnings[0]
    assert a.warnings == [f"system 7: {s.warnings[0]}"]
    assert main(["cadence", "lanl", "--path", str(p), "--bootstrap", "19", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["warnings"] and out["systems"][0]["warnings"] == list(s.warnings)
    assert main(["cadence", "lanl", "--path", str(p), "--bootstrap", "19"]) == 0
    assert "warning: the rows declare 1 node(s)" in capsys.readouterr().out
    # a consistent file has no warnings
    assert analyze_lanl(_synthetic(tmp_path), bootstrap=19).warnings == []


@pytest.mark.parametrize("line, reason", [
    (row(1, "1/20/2003 10:00").replace(",cluster,4,", ",cluster,-3,"), "nodes -3"),
    (row(1, "1/20/2003 10:00").replace(",cluster,4,", ",cluster,0,"), "nodes 0"),
    (row(1, "1/20/2003 10:00").replace(",cluster,4,", ",cluster,four,"), "nodes four"),
    (row(-2, "1/20/2003 10:00"), "node number -2 is negative"),
    (row(1, "1/20/2003 10:00", down="nan"), "down time nan is not a finite"),
    (row(1, "1/20/2003 10:00", down="inf"), "down time inf is not a finite"),
    (row(1, "1/20/2003 10:00", down="1e400"), "down time 1e400 is not a finite"),
    (row(1, "1/20/69 10:00"), "reads as 2069-01-20 10:00"),     # pivot 70: 69 is 2069, in the future
    (row(1, "1/20/2105 10:00"), "reads as 2105-01-20"),
    (row(1, "1/20/1965 10:00"), "outside 1970-01-01 .. today"),
])
def test_malformed_values_are_skipped_or_raised_naming_the_row(tmp_path, line, reason):
    p = write(tmp_path, [HEADER] + [row(i % 4, f"1/{1 + i}/2003 10:00") for i in range(10)] + [line])
    r = load_lanl(p)
    assert [(s.line, reason in s.reason) for s in r.skipped] == [(12, True)], r.skipped
    assert r.frame.height == 10
    with pytest.raises(FailureDataError) as ei:
        load_lanl(p, errors="raise")
    assert ei.value.line == 12 and reason in str(ei.value)


def test_two_digit_years_follow_the_documented_pivot(tmp_path):
    from kernel_lib.cadence.lanl import EARLIEST_YEAR, TWO_DIGIT_YEAR_PIVOT
    assert (TWO_DIGIT_YEAR_PIVOT, EARLIEST_YEAR) == (70, 1970)
    p = write(tmp_path, [HEADER, row(0, "1/5/99 10:00"), row(1, "1/5/70 10:00"), row(2, "1/5/05 10:00"),
                         row(3, "1/6/05 10:00", fixed="1/6/2105 11:00")])
    r = load_lanl(p)
    assert not r.skipped
    assert sorted(d.year for d in r.frame["started"]) == [1970, 1999, 2005, 2005]
    assert r.frame.filter(r.frame["line"] == 5)["fixed"].to_list() == [None]   # a future fix time is unusable
    assert r.missing_fixed == 4


def test_an_unterminated_quote_is_one_line_naming_where_it_opens(tmp_path, capsys):
    lines = [HEADER] + [row(i % 4, f"1/{1 + i}/2003 10:00") for i in range(20)]
    lines[5] = row(1, "1/30/2003 10:00", sw='"unterminated')
    p = write(tmp_path, lines)
    with pytest.raises(FailureDataError) as ei:
        load_lanl(p)
    msg = str(ei.value)
    assert ei.value.line == 6 and "\n" not in msg and "never closed" in msg and len(msg) < 300
    assert "1/2/2003" not in msg                       # no raw file content
    err = _one_error_line(capsys, ["cadence", "lanl", "--path", str(p)])
    assert f"{p}:6:" in err
