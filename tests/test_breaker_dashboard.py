"""The breaker dashboard (widgets/breaker_dashboard.py): a view over a kernel CircuitBreaker.

Fault model: a value of the wrong type or out of range set on a control trait (from code or from
the page), a button of the other mode, a malformed command, a dashboard whose published figures
drift from the breaker's own. Invariant: every published figure is the kernel's (the snapshot's
state, rate, cooldown, transitions), the timeline covers 0..now without gaps, a refusal keeps the
previous value and says why in ``error``, nothing raises into the notebook. Goal: a student steps
table 8's machine by hand, or watches the live lab's breaker trip and probe.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.recovery.gateway.breaker import BreakerConfig
from widgets.breaker_dashboard import DEFAULT_CONFIG, STATE_LABELS, BreakerDashboard


class _Clicks:
    """Sends commands the way the page does: each with a new ``n``."""

    def __init__(self, dash: BreakerDashboard):
        self.dash, self.n = dash, 0

    def __call__(self, action: str) -> str:
        self.n += 1
        self.dash.command = {"action": action, "n": self.n}
        assert self.dash.completed == self.n and not self.dash.busy
        return self.dash.status


def _assert_published_is_the_kernels(d: BreakerDashboard) -> None:
    snap = d.cb.snapshot()
    b = d.breaker
    assert b["state"] == snap.state and b["state_label"] == STATE_LABELS[snap.state]
    assert b["failure_rate"] == snap.failure_rate and b["calls"] == snap.calls
    assert b["cooldown_s"] == snap.cooldown_s and b["cooldown_remaining_s"] == snap.cooldown_remaining_s
    assert [t["reason"] for t in d.transitions] == [t.reason for t in d.cb.transitions()]
    segs = d.timeline
    assert segs[0]["from_s"] == 0.0 and segs[-1]["to_s"] == pytest.approx(b["now_s"])
    assert all(a["to_s"] == c["from_s"] for a, c in zip(segs, segs[1:]))
    assert segs[-1]["state"] == snap.state
    if snap.state == "closed":
        assert len(d.window) == snap.calls
        assert sum(w["failure"] for w in d.window) == round(snap.failure_rate * snap.calls)


def test_trip_probe_fail_double_then_close_on_the_virtual_clock():
    d = BreakerDashboard()
    click = _Clicks(d)
    assert d.mode == "virtual" and d.breaker["state"] == "closed" and d.transitions == []
    for _ in range(DEFAULT_CONFIG.minimum_calls):
        click("failure")
    assert d.breaker["state"] == "open" and d.transitions[-1]["reason"] == "failure_rate"
    said = click("success")                                     # refused: the model's synthetic observation
    assert "ERR_CIRCUIT_OPEN" in said and "symbol_index" in said
    assert d.breaker["cooldown_remaining_s"] == DEFAULT_CONFIG.cooldown_s
    d.advance_s = DEFAULT_CONFIG.cooldown_s
    assert "Half-Open" in click("advance") and d.breaker["state"] == "half_open"
    assert "canary" in click("failure")                          # a failed canary: open, cooldown doubled
    assert d.breaker["state"] == "open" and d.breaker["cooldown_s"] == 2 * DEFAULT_CONFIG.cooldown_s
    click("advance")
    assert d.breaker["state"] == "open" and d.breaker["cooldown_remaining_s"] == DEFAULT_CONFIG.cooldown_s
    click("advance")
    click("success")
    assert d.breaker["state"] == "closed" and d.breaker["cooldown_s"] == DEFAULT_CONFIG.cooldown_s
    assert [t["to_state"] for t in d.transitions] == ["open", "half_open", "open", "half_open", "closed"]
    assert d.error == "" and any("canary_succeeded" in line for line in d.readout)
    _assert_published_is_the_kernels(d)
    click("reset")
    assert d.breaker["state"] == "closed" and d.transitions == [] and d.breaker["now_s"] == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["success", "failure", "advance", "reset"]), max_size=40),
       st.sampled_from([1.0, 7.5, 30.0]))
def test_every_published_figure_is_the_breakers_own(actions, advance_s):
    d = BreakerDashboard(BreakerConfig(window_size=6, minimum_calls=3, failure_rate_threshold=0.5, cooldown_s=10.0,
                                       cooldown_max_s=40.0, canary_timeout_s=5.0), advance_s=advance_s)
    click = _Clicks(d)
    for a in actions:
        click(a)
        assert d.error == ""
        _assert_published_is_the_kernels(d)


@pytest.mark.parametrize("name, bad", [("advance_s", 0), ("advance_s", -3.0), ("advance_s", float("inf")),
                                       ("advance_s", "5"), ("advance_s", True), ("advance_s", None),
                                       ("advance_s", 1e9), ("latency_s", -0.1), ("latency_s", 4000.0),
                                       ("error_rate", 1.5), ("error_rate", float("nan")), ("error_rate", [0.1])])
def test_a_bad_control_value_is_refused_with_the_widgets_own_message(name, bad):
    d = BreakerDashboard()
    before = getattr(d, name)
    setattr(d, name, bad)                                   # never a TraitError
    assert getattr(d, name) == before
    assert d.error.startswith(f"{name} = ") and "was refused" in d.error and "choose a number" in d.error
    setattr(d, name, 0.5)                                   # a good value clears its message
    assert d.error == "" and getattr(d, name) == 0.5


@pytest.mark.parametrize("name, bad", [("advance_s", -1), ("advance_s", "abc"), ("latency_s", 9999),
                                       ("error_rate", -0.5)])
def test_a_bad_value_from_the_page_is_refused_too(name, bad):
    """The page's values arrive through set_state, inside hold_trait_notifications: the trait holds
    the new value while the validator runs, and must still end with the previous one."""
    d = BreakerDashboard()
    before = getattr(d, name)
    d.set_state({name: bad})
    assert getattr(d, name) == before and d.error.startswith(f"{name} = ") and f"it stays {before!r}" in d.error
    d.set_state({name: 0.25})
    assert getattr(d, name) == 0.25 and d.error == ""


def test_buttons_of_the_other_mode_and_malformed_commands_are_refused():
    d = BreakerDashboard()
    click = _Clicks(d)
    click("dial")
    assert "drives a live lab" in d.error and d.breaker["state"] == "closed"
    click("success")
    assert d.error == ""
    click("explode")
    assert "unknown action" in d.error
    d.command = "not a command"
    assert "malformed command" in d.error and not d.busy


def test_constructor_checks():
    with pytest.raises(TypeError, match="GatewayLab"):
        BreakerDashboard.live(object())
    from kernel_lib.errors import GatewayConfigError
    with pytest.raises(GatewayConfigError):
        BreakerDashboard("not a config")


def test_live_dashboard_watches_the_labs_breaker_trip_and_dial_it_back():
    """A real lab (threads, a loopback service): dial the index past the call timeout, the breaker
    trips; dial it back, it closes after a canary. Every figure is the lab breaker's."""
    from kernel_lib.live.gateway_lab import DialService, GatewayLab, LabConfig

    cfg = LabConfig(call_timeout_s=0.3, breaker_cooldown_s=0.3)
    with DialService() as svc:
        lab = GatewayLab("shared_pool", cfg, svc)
        from kernel_lib.errors import ConfigError
        with pytest.raises(ConfigError, match="no gateway"):
            BreakerDashboard.live(lab)
        lab = GatewayLab("bulkheads", cfg, svc).start()
        try:
            d = BreakerDashboard.live(lab)
            click = _Clicks(d)
            assert d.mode == "live" and d.cb is lab.gw.routes["symbol_index"].breaker
            d.latency_s = 5000.0                                      # refused before it reaches the service
            assert "latency_s = 5000.0 was refused" in d.error
            d.latency_s = 1.0
            assert "1 s" in click("dial") and d.error == ""
            deadline = time.monotonic() + 10
            while not d.transitions and time.monotonic() < deadline:
                time.sleep(0.1)
                click("refresh")
            assert d.transitions[0]["to_state"] == "open" and d.transitions[0]["reason"] == "failure_rate"
            d.latency_s = 0.005
            click("dial")
            deadline = time.monotonic() + 10
            while not (d.transitions[-1]["to_state"] == "closed") and time.monotonic() < deadline:
                time.sleep(0.1)
                click("refresh")
            assert d.transitions[-1]["reason"] == "canary_succeeded"
            assert d.lab_phase.startswith("dial 0.005")
            click("advance")
            assert "watches a live lab" in d.error
        finally:
            lab.stop()
        click("refresh")                     # the lab is stopped: nothing moves between the two reads
        _assert_published_is_the_kernels(d)
