"""``python -m kernel_lib herd`` (kernel_lib.cli.herd over kernel_lib.sim.herd): the keys the issue
names, the text report with its charts, the help, and bad options as one error line."""

from __future__ import annotations

import json

import pytest

from kernel_lib.cli import main

POLICY_KEYS = ("deterministic", "full_jitter", "full_jitter_breaker")


def test_json_has_every_policy_with_its_rates_and_the_simulators_speed(capsys):
    assert main(["herd", "--agents", "400", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in POLICY_KEYS:
        r = out[k]
        assert {"peak_arrival_rate_per_s", "mean_arrival_rate_per_s", "peak_queue_depth", "mean_queue_depth",
                "goodput", "totals", "breaker_transitions"} <= set(r)
        assert "series" not in r
        assert r["totals"]["arrivals"] == r["totals"]["attempts"] - r["totals"]["fast_failed"]
    assert out["config"]["agents"] == 400
    # the restart resets every held call at once: deterministic backoff brings all 400 back in one bin
    assert out["deterministic"]["peak_arrival_rate_per_s"] == 400 / 0.002
    assert out["full_jitter"]["peak_arrival_rate_per_s"] < out["deterministic"]["peak_arrival_rate_per_s"]
    assert out["full_jitter_breaker"]["totals"]["fast_failed"] > 0
    assert out["simulator"]["agent_steps"] > 0 and out["simulator"]["agent_steps_per_s"] > 0


def test_series_on_request_and_options_reach_the_scenario(capsys):
    assert main(["herd", "--agents", "100", "--json", "--series", "--capacity", "50", "--outage-mode", "slow",
                 "--outage-s", "10", "--error-rate", "1", "--max-retries", "2", "--series-bin", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["capacity_per_s"] == 50 and out["config"]["outage_mode"] == "slow"
    s = out["full_jitter"]["series"]
    assert s["t_s"][:3] == [0.0, 1.0, 2.0] and sum(s["arrivals"]) == out["full_jitter"]["totals"]["arrivals"]
    assert out["deterministic"]["totals"]["failed"] > 0


def test_text_report_has_a_row_and_a_chart_per_policy(capsys):
    assert main(["herd", "--agents", "300"]) == 0
    text = capsys.readouterr().out
    for k in POLICY_KEYS:
        assert text.count(k) >= 4          # the table row and three chart lines
    assert "arrivals per s over time" in text and "queue depth over time" in text and "agent steps/s" in text


def test_help_explains_the_policies_and_the_keys(capsys):
    with pytest.raises(SystemExit) as e:
        main(["herd", "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "full_jitter_breaker" in text and "peak_arrival_rate_per_s" in text and "stall" in text


@pytest.mark.parametrize("argv", [["--agents", "0"], ["--capacity", "0"], ["--outage-mode", "down"],
                                  ["--error-rate", "nan"], ["--timeout", "-1"], ["--cap", "0.5"]])
def test_bad_options_are_one_error_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        code = main(["herd", "--agents", "5", *argv])
        raise SystemExit(code)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith(("error:", "python -m kernel_lib herd: error:"))
