"""kernel_lib.retention.pricing: bytes by artifact class, the storage bill, policies and promises (§11.8), and
Napkin Math 11.2 recomputed with its two implicit quantities inferred. Expected values are worked out
here from the givens with plain arithmetic (1 KB = 1000 B, 1 GB = 10^9 B)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernel_lib.retention.pricing as rt
from kernel_lib.errors import ConfigError

# --- units and bytes --------------------------------------------------------------------------------


def test_units_are_decimal_with_binary_only_as_the_alternative():
    assert (rt.BYTES_PER_KB, rt.BYTES_PER_MB, rt.BYTES_PER_GB) == (10 ** 3, 10 ** 6, 10 ** 9)
    assert rt.BYTES_PER_GIB == 2 ** 30 and rt.MONTHS_PER_YEAR == 12
    assert rt.kb_to_bytes(4) == 4000 and rt.mb_to_bytes(50) == 50e6
    assert rt.bytes_to_gb(3e7) == pytest.approx(0.03)
    assert rt.bytes_to_gib(2 ** 30) == 1.0


def test_trajectory_bytes_of_the_research_agent():
    tb = rt.trajectory_bytes(20, 4, 40, pages=100, page_kb_raw=300)
    assert tb.envelopes == 20 * 4 * 1000
    assert tb.observations == 20 * 40 * 1000
    assert tb.raw_pages == 100 * 300 * 1000
    assert tb.workspace == 0
    assert tb.log == 880_000 and tb.total == 30_880_000
    assert tb.by_class() == {"envelopes": 80_000, "observations": 800_000, "raw_pages": 30_000_000, "workspace": 0}
    assert tb.dominant() == "raw_pages"
    assert tb.share("raw_pages") == pytest.approx(30_000 / 30_880)
    with pytest.raises(ConfigError):
        tb.share("pages")


def test_dominant_breaks_ties_in_class_order_and_empty_trajectory_has_zero_shares():
    assert rt.trajectory_bytes(1, 5, 5).dominant() == "envelopes"
    empty = rt.trajectory_bytes(0, 4, 40)
    assert empty.total == 0 and empty.share("envelopes") == 0.0


# --- the bill ----------------------------------------------------------------------------------------


def test_storage_cost_is_gb_times_price_times_months():
    # 30 MB of raw pages for a year at $0.023 per GB-month
    assert rt.storage_cost_usd(30e6, 0.023, 12) == pytest.approx(0.03 * 0.023 * 12)
    assert rt.storage_cost_usd(0, 0.023, 12) == 0
    assert rt.share_of_attempt(0.00828, 1.5) == pytest.approx(0.00828 / 1.5)
    assert rt.fleet_cost_usd(0.00093288, 1_000_000) == pytest.approx(932.88)


def test_policy_costs_per_class():
    tb = rt.trajectory_bytes(20, 4, 40, pages=100, page_kb_raw=300)
    full = rt.policy_cost_usd(tb, rt.full_retention(12), 0.023)
    split = rt.policy_cost_usd(tb, rt.split_lifetimes(12, 1), 0.023)
    gb_month = 0.023
    assert full["envelopes"] == pytest.approx(80e3 / 1e9 * gb_month * 12)
    assert full["observations"] == pytest.approx(800e3 / 1e9 * gb_month * 12)
    assert full["raw_pages"] == pytest.approx(30e6 / 1e9 * gb_month * 12)
    assert full["total"] == pytest.approx(30.88e6 / 1e9 * gb_month * 12)
    assert split["raw_pages"] == pytest.approx(30e6 / 1e9 * gb_month * 1)
    assert split["total"] == pytest.approx((880e3 * 12 + 30e6 * 1) / 1e9 * gb_month)
    assert split["workspace"] == 0
    # a class kept only while the run is live, or never kept, costs nothing after the run
    pol = rt.RetentionPolicy("p", {"envelopes": 0.0, "observations": None})
    assert rt.policy_cost_usd(tb, pol, 0.023)["total"] == 0


@settings(max_examples=100, deadline=None)
@given(nbytes=st.floats(0, 1e15), price=st.floats(1e-6, 10), months=st.floats(0, 600), k=st.floats(0.1, 10))
def test_the_bill_is_linear_in_bytes_and_months(nbytes, price, months, k):
    base = rt.storage_cost_usd(nbytes, price, months)
    assert rt.storage_cost_usd(nbytes * k, price, months) == pytest.approx(base * k, rel=1e-9, abs=1e-300)
    assert rt.storage_cost_usd(nbytes, price, months * k) == pytest.approx(base * k, rel=1e-9, abs=1e-300)


@settings(max_examples=100, deadline=None)
@given(turns=st.integers(0, 500), env=st.floats(0, 100), obs=st.floats(0, 500), pages=st.integers(0, 1000),
       page=st.floats(0, 2000), ws=st.floats(0, 1000), replay=st.floats(0.01, 120), frac=st.floats(0, 1))
def test_a_shorter_diagnostic_window_never_costs_more(turns, env, obs, pages, page, ws, replay, frac):
    tb = rt.trajectory_bytes(turns, env, obs, pages=pages, page_kb_raw=page, workspace_mb=ws)
    full = rt.policy_cost_usd(tb, rt.full_retention(replay), 0.023)
    split = rt.policy_cost_usd(tb, rt.split_lifetimes(replay, replay * frac), 0.023)
    assert split["total"] <= full["total"] * (1 + 1e-12) + 1e-18
    assert full["total"] == pytest.approx(sum(v for c, v in full.items() if c != "total"))


# --- promises --------------------------------------------------------------------------------------


def test_promises_kept_by_each_policy():
    wanted = rt.promises(12, 1)
    assert [p.name for p in wanted] == list(rt.PROMISES)
    split = rt.promises_kept(rt.split_lifetimes(12, 1), wanted)
    assert all(v.kept for v in split.values())
    digest_only = rt.RetentionPolicy("d", {"envelopes": 12, "observations": 0.0, "raw_pages": 1})
    v = rt.promises_kept(digest_only, wanted)
    assert v["current_recovery"].kept and not v["historical_replay"].kept
    assert v["historical_replay"].short == ("observations",)
    never = rt.RetentionPolicy("n", {"envelopes": 12, "raw_pages": 12})          # observations never kept
    v = rt.promises_kept(never, wanted)
    assert not v["current_recovery"].kept and not v["historical_replay"].kept and v["diagnostics"].kept
    short_diag = rt.promises_kept(rt.split_lifetimes(12, 0.5), wanted)
    assert not short_diag["diagnostics"].kept and short_diag["historical_replay"].kept


def test_a_workspace_is_read_by_recovery_and_replay():
    wanted = rt.promises(12, 1, workspace=True)
    assert "workspace" in wanted[0].classes and "workspace" in wanted[1].classes
    pol = rt.RetentionPolicy("no ws", {"envelopes": 12, "observations": 12, "raw_pages": 1})
    v = rt.promises_kept(pol, wanted)
    assert not v["current_recovery"].kept and v["current_recovery"].short == ("workspace",)


# --- bad input -------------------------------------------------------------------------------------

BAD_AMOUNTS = [-1, -0.001, float("nan"), float("inf"), float("-inf"), True, "4", None]


@pytest.mark.parametrize("bad", BAD_AMOUNTS)
def test_bad_amounts_raise_config_error(bad):
    calls = [
        lambda: rt.trajectory_bytes(20, bad, 40),
        lambda: rt.trajectory_bytes(20, 4, bad),
        lambda: rt.trajectory_bytes(20, 4, 40, pages=100, page_kb_raw=bad),
        lambda: rt.trajectory_bytes(20, 4, 40, workspace_mb=bad),
        lambda: rt.storage_cost_usd(bad, 0.023, 12),
        lambda: rt.storage_cost_usd(1e6, bad, 12),
        lambda: rt.storage_cost_usd(1e6, 0.023, bad),
        lambda: rt.share_of_attempt(bad, 1.5),
        lambda: rt.share_of_attempt(0.01, bad),
        lambda: rt.fleet_cost_usd(bad, 10),
        lambda: rt.full_retention(bad),
        lambda: rt.split_lifetimes(12, bad),
        lambda: rt.split_lifetimes(bad, 1),
        lambda: rt.RetentionPolicy("p", {"raw_pages": bad}) if bad is not None else rt.kb_to_bytes(bad),
        lambda: rt.promises(bad, 1),
        lambda: rt.kb_to_bytes(bad),
        lambda: rt.bytes_to_gb(bad),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(ConfigError):
            call()
            pytest.fail(f"call {i} accepted {bad!r}")


@pytest.mark.parametrize("bad", [-1, 2.5, float("nan"), float("inf"), True, "20"])
def test_bad_counts_raise_config_error(bad):
    with pytest.raises(ConfigError):
        rt.trajectory_bytes(bad, 4, 40)
    with pytest.raises(ConfigError):
        rt.trajectory_bytes(20, 4, 40, pages=bad, page_kb_raw=300)
    with pytest.raises(ConfigError):
        rt.fleet_cost_usd(0.01, bad)


def test_a_zero_attempt_cost_and_an_unknown_class_are_refused():
    with pytest.raises(ConfigError):
        rt.share_of_attempt(0.01, 0)
    with pytest.raises(ConfigError):
        rt.RetentionPolicy("p", {"pages": 12})
    assert rt.trajectory_bytes(20.0, 4, 40).envelopes == 80_000       # a whole float count is fine


# --- Napkin Math 11.2 ----------------------------------------------------------------------------


def test_napkin_11_2_log_and_units():
    n = rt.napkin_11_2()
    assert n.log_bytes == 30 * (4 + 128) * 1000                       # 3.96 MB, as printed
    assert n.log_bytes / 1e6 == pytest.approx(3.96)
    assert n.log_bytes_binary_reading_mib == pytest.approx(30 * 132 / 1024)   # 3.87: not the printed figure
    assert abs(n.log_bytes_binary_reading_mib - 3.96) > 0.05


def test_napkin_11_2_infers_the_workspace_and_the_attempt_cost():
    n = rt.napkin_11_2()
    log_mb = 3.96
    # "about 54 MB" in whole MB leaves the workspace in [53.5 - 3.96, 54.5 - 3.96) MB
    assert n.workspace_mb_range == pytest.approx((53.5 - log_mb, 54.5 - log_mb))
    assert n.workspace_mb == 50
    assert n.total_bytes == pytest.approx(53.96e6)
    bill = 0.05396 * 0.023 * 12
    log_bill = 0.00396 * 0.023 * 12
    assert n.cost_usd == pytest.approx(bill) and n.log_cost_usd == pytest.approx(log_bill)
    assert n.cost_usd_from_printed_total == pytest.approx(0.054 * 0.023 * 12)
    # 0.7 % (rounded) and 0.05 % (rounded) bound the attempt cost from both sides
    lo = max(bill / 0.0075, log_bill / 0.00055)
    hi = min(bill / 0.0065, log_bill / 0.00045)
    assert n.attempt_cost_usd_range == pytest.approx((lo, hi))
    assert n.attempt_cost_usd == pytest.approx(bill / 0.007)
    assert lo < 2.0 < hi and not lo < 1.5 < hi              # about $2; not the research agent's $1.50
    assert n.log_share_of_attempt == pytest.approx(log_bill / (bill / 0.007))
    assert n.workspace_share_of_bytes == pytest.approx(50 / 53.96)
    assert n.dominant == "workspace"


def test_napkin_11_2_every_printed_figure_is_reproduced():
    n = rt.napkin_11_2()
    assert n.all_ok, [c for c in n.checks if not c.ok]
    figures = {c.figure: c for c in n.checks}
    assert set(figures) == {"log_mb", "total_mb", "total_gb", "cost_cents", "share_of_attempt_percent",
                            "log_share_of_attempt_percent", "workspace_share_of_bytes_percent", "under_percent"}
    assert figures["cost_cents"].computed == pytest.approx(100 * 0.05396 * 0.023 * 12)
    # the independent tests are the ones not used to infer anything
    assert {c.figure for c in n.checks if c.basis == "givens"} == {
        "log_mb", "cost_cents", "log_share_of_attempt_percent", "workspace_share_of_bytes_percent"}
    d = n.to_dict()
    assert d["all_ok"] is True and len(d["notes"]) == 4 and "1000" in d["notes"][0]


def test_napkin_11_2_names_an_attempt_cost_outside_the_range():
    assert "$1.50" in rt.napkin_11_2(other_attempt_cost_usd=1.5).notes[2]
    assert "0.99 percent" in rt.napkin_11_2(other_attempt_cost_usd=1.5).notes[2]
    assert "$2.10" not in rt.napkin_11_2(other_attempt_cost_usd=2.1).notes[2]      # inside the range: not named
    with pytest.raises(ConfigError):
        rt.napkin_11_2(other_attempt_cost_usd=-1)


def test_napkin_11_2_with_inconsistent_printed_figures_is_refused():
    printed = dict(rt.NAPKIN_11_2_PRINTED, total_mb=80)     # an 80 MB total cannot also be 93 % workspace
    with pytest.raises(ConfigError):
        rt.napkin_11_2(printed)
    printed = dict(rt.NAPKIN_11_2_PRINTED, log_share_of_attempt_percent=0.2)   # shares that no attempt cost fits
    with pytest.raises(ConfigError):
        rt.napkin_11_2(printed)


def test_napkin_11_2_a_perturbed_figure_is_caught():
    printed = dict(rt.NAPKIN_11_2_PRINTED, log_mb=4.1)
    n = rt.napkin_11_2(printed)
    bad = [c.figure for c in n.checks if not c.ok]
    assert bad == ["log_mb"]
    assert math.isclose(n.log_bytes, 3.96e6)


# --- adversarial inputs (round 6): every failure is a typed ConfigError, every result finite -------


@pytest.mark.parametrize("call", [
    lambda: rt.storage_cost_usd(10 ** 400, 0.023, 12),
    lambda: rt.trajectory_bytes(10 ** 400, 4, 128),
    lambda: rt.fleet_cost_usd(1e308, 10 ** 400),
    lambda: rt.bytes_to_gb(10 ** 400),
])
def test_huge_integers_are_refused_not_overflow_error(call):
    with pytest.raises(ConfigError):
        call()


@pytest.mark.parametrize("call", [
    lambda: rt.storage_cost_usd(1e308, 1e308, 12),
    lambda: rt.trajectory_bytes(1e308, 4, 128),
    lambda: rt.fleet_cost_usd(1e308, 10),
    lambda: rt.share_of_attempt(1e308, 1e-308),
    lambda: rt.TrajectoryBytes(1e308, 1e308),
])
def test_finite_inputs_whose_result_overflows_are_refused(call):
    with pytest.raises(ConfigError, match="overflow"):
        call()


@pytest.mark.parametrize("lifetimes", [None, 3, "envelopes", [("envelopes", 1)]])
def test_a_policy_needs_a_mapping_of_lifetimes(lifetimes):
    with pytest.raises(ConfigError, match="mapping"):
        rt.RetentionPolicy("p", lifetimes)


def test_a_policy_with_mixed_key_types_is_refused_typed():
    with pytest.raises(ConfigError, match="unknown artifact class"):
        rt.RetentionPolicy("p", {1: 2, "x": 3})


@pytest.mark.parametrize("fields", [(-5, 10), (float("nan"), 1), (1, float("inf")), (True, 1), ("3", 1)])
def test_trajectory_bytes_fields_are_checked(fields):
    with pytest.raises(ConfigError):
        rt.TrajectoryBytes(*fields)


@pytest.mark.parametrize("change", [
    {"share_of_attempt_percent": 0.05},
    {"log_share_of_attempt_percent": 0},
    {"workspace_share_of_bytes_percent": 100},
    {"givens": {}},
    {"givens": None},
    {"givens": {**rt.NAPKIN_11_2_PRINTED["givens"], "turns": 0}},
    {"givens": {**rt.NAPKIN_11_2_PRINTED["givens"], "usd_per_gb_month": 0}},
    {"givens": {**rt.NAPKIN_11_2_PRINTED["givens"], "turns": 10 ** 400}},
    {"total_mb": "54"},
    {"total_mb": 1e308},
    {"cost_cents": float("nan")},
])
def test_napkin_11_2_with_a_bad_printed_table_is_refused_typed(change):
    with pytest.raises(ConfigError):
        rt.napkin_11_2({**rt.NAPKIN_11_2_PRINTED, **change})


def test_napkin_11_2_missing_figure_and_non_mapping_are_named():
    pr = dict(rt.NAPKIN_11_2_PRINTED)
    del pr["log_mb"]
    with pytest.raises(ConfigError, match="log_mb"):
        rt.napkin_11_2(pr)
    with pytest.raises(ConfigError, match="mapping"):
        rt.napkin_11_2([1, 2])
