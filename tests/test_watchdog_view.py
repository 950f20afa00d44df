"""The watchdog view (widgets/watchdog_view.py) and the timeline it shows
(kernel_lib/recovery/watchdog/timeline.py).

Fault model: a view that computes its own window and drifts from the detector it claims to show, a
detection drawn at the wrong step or as fired before it fired, a step from code or the page that
is out of range or of the wrong type raising into the notebook. Invariant: the window at every
step is the state-hash detector's own (a period the view shows is a detection the detector made,
and the other way round); every detection of every detector is in the view once, at its step, and
counts as fired from that step on; a refused step is the widget's message and changes nothing.
Goal: a reader scrubbing a log sees exactly what the kernel's detectors saw there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib.errors import WatchdogConfigError, WatchTimelineError
from kernel_lib.recovery.watchdog.baselines import gemini_detections, openhands_detections
from kernel_lib.recovery.watchdog.detectors import WatchdogConfig, detect_state_cycles, run_watchdog
from kernel_lib.recovery.watchdog.model import WatchStep
from kernel_lib.recovery.watchdog.timeline import DETECTORS, timeline_of_steps, watch_timeline

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "trajectories"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data/trajectories is not here")


def _steps(spec: list[tuple[str | None, bool | None, bool]]) -> list[WatchStep]:
    """Steps from (state letter or None, mutative, error) triples; the action is named by the state."""
    out = []
    for i, (state, mutative, error) in enumerate(spec, start=1):
        out.append(WatchStep(position=3 * i, kind="tool", actor="agent", tool="edit" if mutative else "look",
                             arguments={"to": state or "?"}, observation="boom" if error else "ok",
                             observation_error=error, observation_position=3 * i + 1,
                             state_hash=None if state is None else (state * 64)[:64], state_source="workspace",
                             mutative=mutative, metrics={"tests_passed": float(i % 2)} if i % 3 == 0 else {}))
    return out


_spec = st.lists(st.tuples(st.sampled_from([None, "a", "b", "c", "d", "e"]), st.sampled_from([True, False, None]),
                           st.booleans()), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_spec, st.integers(1, 5), st.integers(1, 3))
def test_the_window_shows_a_period_exactly_where_the_state_detector_fires(spec, max_period, noop_min):
    cfg = WatchdogConfig(max_period=max_period, noop_min_repeats=noop_min)
    steps = _steps(spec)
    tl = timeline_of_steps(steps, cfg)
    fired = {(d.evidence["step_position"], d.evidence["period"]) for d in detect_state_cycles(steps, cfg)}
    for i, s in enumerate(steps, start=1):
        w = tl.at(i)["state_window"]
        assert len(w["entries"]) <= max_period
        assert [e["distance"] for e in w["entries"]] == list(range(len(w["entries"]), 0, -1))
        k = w["period"]
        if k is not None and k >= 2:
            assert (s.position, k) in fired                     # a period >= 2 fires at once
        if k is not None:
            assert w["counted"] and w["entries"][-k]["matches"] and w["entries"][-k]["state_hash"] == w["current_hash"]
    for pos, k in fired:                                         # and every detection shows in the window
        i = next(j for j, s in enumerate(steps, start=1) if s.position == pos)
        assert tl.at(i)["state_window"]["period"] == k


def test_every_detection_of_every_detector_is_shown_once_at_its_step_and_fired_from_there_on():
    steps = _steps([("a", False, False), ("b", True, False), (None, None, True), ("c", True, False),
                    ("b", True, False), ("c", True, True), ("c", True, True), ("c", True, True),
                    ("c", True, True), ("c", True, True), ("c", True, True)])
    tl = timeline_of_steps(steps, name="constructed")
    expected = {"watchdog": run_watchdog(steps), "openhands": openhands_detections(steps),
                "openhands_calls": openhands_detections(steps, compare_thought=False),
                "gemini": gemini_detections(steps)}
    assert set(tl.detections) == set(DETECTORS)
    shown = [(f["detector"], f["kind"], f["position"]) for f in tl.fires()]
    assert sorted(shown) == sorted((n, d.kind, d.position) for n, ds in expected.items() for d in ds)
    assert len({n for n, _k, _p in shown}) >= 2                 # more than one detector fires here
    before = {n: 0 for n in DETECTORS}
    for i in range(tl.n_steps + 1):
        v = tl.at(i)
        for f in v["detections"]:
            assert f["fired"] == (i > 0 and f["step"] <= i) and f["here"] == (i > 0 and f["step"] == i)
            assert steps[f["step"] - 1].position <= f["position"]
        assert all(v["fired"][n] >= before[n] for n in DETECTORS)
        before = v["fired"]
        if i:
            assert v["current"]["position"] == steps[i - 1].position == v["position"]
            assert v["actions"][-1]["step"] == i and len(v["actions"]) <= tl.config.repetition_window
            assert [r["step"] for r in v["metrics"]["series"]] == [j for j in range(1, i + 1) if steps[j - 1].metrics]
    assert before == {n: len(expected[n]) for n in DETECTORS}


@pytest.mark.parametrize("bad", [-1, 12, 10**30, True, "3", 2.0, None])
def test_a_step_the_trajectory_does_not_have_is_a_typed_error(bad):
    tl = timeline_of_steps(_steps([("a", True, False)] * 11))
    with pytest.raises(WatchTimelineError, match="0 to 11"):
        tl.at(bad)
    with pytest.raises(WatchdogConfigError):
        timeline_of_steps([], config="not a config")
    with pytest.raises(TypeError):
        timeline_of_steps([1, 2])


@needs_data
def test_a_real_imported_log_scrubs_to_the_detectors_findings():
    """pydicom__pydicom-1458 (the data README: an identical failing edit repeated) and a tau-bench
    run whose booking is retried after its error."""
    from kernel_lib.importers import import_file
    from kernel_lib.recovery.watchdog.steps import watch_steps

    for fmt, path in (("swe-agent", DATA / "swe-agent" / "pydicom__pydicom-1458.traj"),
                      ("tau-bench", DATA / "tau-bench-airline" / "task08_trial1.json")):
        events = import_file(fmt, path).events
        tl = watch_timeline(events, name=path.name)
        assert tl.steps == tuple(watch_steps(events))
        kinds = {f["kind"] for f in tl.fires() if f["detector"] == "watchdog"}
        assert "action_repetition" in kinds
        rep = next(f for f in tl.fires() if f["kind"] == "action_repetition")
        acts = tl.at(rep["step"])["actions"]
        assert any(a["same_as_current"] and a["error"] for a in acts)     # the earlier failing call, same h_tool


# --- the widget ----------------------------------------------------------------------------------------


def _view(**kw):
    from widgets.watchdog_view import WatchdogView

    steps = _steps([("a", False, False), ("b", True, False), ("c", True, False), ("b", True, False),
                    ("c", True, False), ("c", True, True), ("c", True, True)])
    return steps, WatchdogView(steps, name="constructed", **kw)


def test_the_view_publishes_the_kernels_answer_at_every_step():
    from widgets.watchdog_view import readout_lines

    steps, w = _view()
    first = w.timeline.fires()[0]["step"]
    assert w.step == first and w.max_step == len(steps) and w.error == ""     # starts at the first detection
    for i in range(len(steps) + 1):
        w.step = i
        assert w.error == "" and w.view == w.timeline.at(i) and w.readout == readout_lines(w.timeline.at(i))
    w.step = first
    assert any(line.startswith("fires here: semantic watchdog") for line in w.readout)
    assert [d["detector"] for d in w.detectors] == list(DETECTORS)


@pytest.mark.parametrize("bad", [-1, 8, 10**30, True, "5", 4.0, None, [3]])
def test_a_bad_step_is_the_widgets_message_and_changes_nothing(bad):
    _steps_, w = _view(step=3)
    shown = dict(w.view)
    w.step = bad
    assert ("outside the trajectory" in w.error) if isinstance(bad, int) and not isinstance(bad, bool) \
        else ("not a step number" in w.error)
    assert "0 to 7" in w.error and "TraitError" not in w.error and w.step == 3 and w.view == shown
    w.step = 3                                  # the step already shown: still checked, the message clears
    assert w.error == ""


def test_the_view_refuses_what_is_not_a_log():
    from widgets.watchdog_view import WatchdogView

    with pytest.raises(ValueError, match="nothing to scrub"):
        WatchdogView([])
    with pytest.raises(TypeError, match="Event objects"):
        WatchdogView([1, 2])
    with pytest.raises(TypeError, match="WatchTimeline"):
        WatchdogView("a path")
    steps, w = _view()
    assert WatchdogView(w.timeline).timeline is w.timeline


def test_our_own_log_scrubs_too(tmp_path):
    """A log this project wrote (the crash worksheet) goes through the same view."""
    from kernel_lib.sim.worksheet import worksheet_events
    from widgets.watchdog_view import WatchdogView

    w = WatchdogView(worksheet_events(), name="worksheet")
    assert w.max_step >= 1 and w.error == ""
    assert w.view["current"]["tool"] == w.timeline.steps[w.step - 1].tool
