"""The widgets' shared pieces: front-end files in widgets/static, the JavaScript helper module
bundled in front of each widget's own code, the Python command protocol, and the replication
panel's state living in kernel_lib.quorum.session.

Fault model: a widget whose front end is missing or not shipped (package data), a bundle that
pulls code from the network or does not parse, a hot reload that leaves a live widget on old
code, a malformed or failing command that raises into the notebook or leaves ``busy`` set.
Invariant: each widget's ``_esm`` is ``_shared.js`` then its own file, one module with no import;
every command ends with ``busy`` cleared, ``completed`` set and any refusal in ``error``. Goal: a
widget author edits plain ``.js``/``.css`` files and writes only what is particular to the widget.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import shutil
import subprocess
import tomllib
import warnings
from pathlib import Path

import pytest

from kernel_lib.errors import ClusterNotRunningError, ConfigError, ReplicationSessionError
from widgets._base import STATIC_DIR, CommandWidget, KernelWidget, bundle_esm, reload_static, widget_css

ROOT = Path(__file__).resolve().parents[1]
WIDGETS = {   # module -> (class, static name, root CSS class)
    "widgets.scrubber": ("LogScrubber", "scrubber", "dal-scrubber"),
    "widgets.crash_panel": ("CrashPanel", "crash_panel", "dal-crash-panel"),
    "widgets.replication": ("ReplicationPanel", "replication", "dal-replication"),
    "widgets.cadence_explorer": ("CadenceExplorer", "cadence_explorer", "dal-cadence"),
    "widgets.resume_timeline": ("ResumeTimelineView", "resume_timeline", "dal-resume"),
    "widgets.retention_planner": ("RetentionPlanner", "retention_planner", "dal-retention"),
    "widgets.saga_stepper": ("SagaStepper", "saga_stepper", "dal-saga-stepper"),
    "widgets.policy_explorer": ("PolicyExplorer", "policy_explorer", "dal-policy"),
    "widgets.watchdog_view": ("WatchdogView", "watchdog_view", "dal-watchdog"),
    "widgets.breaker_dashboard": ("BreakerDashboard", "breaker_dashboard", "dal-breaker"),
    "widgets.lifeline_stepper": ("LifelineStepper", "lifeline_stepper", "dal-lifeline-stepper"),
}


def _widget_class(module: str) -> type[KernelWidget]:
    return getattr(importlib.import_module(module), WIDGETS[module][0])


@pytest.mark.parametrize("module", sorted(WIDGETS))
def test_each_widget_loads_the_shared_helpers_then_its_own_files(module):
    cls = _widget_class(module)
    name = WIDGETS[module][1]
    shared = (STATIC_DIR / "_shared.js").read_text()
    own = (STATIC_DIR / f"{name}.js").read_text()
    assert issubclass(cls, KernelWidget) and cls.static_name == name
    assert cls._esm.startswith(shared) and cls._esm.endswith(own) and cls._esm == bundle_esm(name)
    assert cls._css == (STATIC_DIR / f"{name}.css").read_text() == widget_css(name)
    mod = importlib.import_module(module)
    assert (mod._ESM, mod._CSS) == (cls._esm, cls._css)          # the old module constants still hold
    # one module: no import of anything, nothing from a network, one default export
    assert "import " not in cls._esm and "http" not in cls._esm and cls._esm.count("export default") == 1
    assert "dal.isolateKeys(el" in own and "lmSuppressShortcuts" in cls._esm
    assert "const dal" not in own                                 # the helpers are not redefined


def test_every_static_file_is_used_and_shipped_as_package_data():
    files = sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file())
    expected = sorted(["_shared.js"] + [f"{n}.{ext}" for _c, n, _r in WIDGETS.values() for ext in ("js", "css")])
    assert files == expected
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["widgets"]
    assert all(any(fnmatch.fnmatch(f"static/{f}", g) for g in globs) for f in files), globs


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize("module", sorted(WIDGETS))
def test_each_bundle_parses_as_an_es_module(module, tmp_path):
    path = tmp_path / f"{WIDGETS[module][1]}.mjs"
    path.write_text(_widget_class(module)._esm)
    run = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_a_missing_front_end_file_is_a_clear_error():
    with pytest.raises(ConfigError, match="nowhere.js"):
        bundle_esm("nowhere")
    with pytest.raises(ConfigError, match="nowhere.css"):
        widget_css("nowhere")


def test_reload_static_pushes_edited_files_to_live_widgets(tmp_path, monkeypatch):
    import widgets._base as base
    from kernel_lib.sim.worksheet import worksheet_events
    from widgets.scrubber import LogScrubber

    w = LogScrubber(worksheet_events(), position=2)
    before_esm, before_css = w._esm, w._css
    copy = tmp_path / "static"
    shutil.copytree(STATIC_DIR, copy)
    (copy / "scrubber.js").write_text((copy / "scrubber.js").read_text() + "\n// edited\n")
    (copy / "scrubber.css").write_text(".dal-scrubber { color: red; }\n")
    monkeypatch.setattr(base, "STATIC_DIR", copy)
    try:
        assert reload_static() >= 1
        assert w._esm.endswith("// edited\n") and w._esm != before_esm and LogScrubber._esm == w._esm
        assert w._css == ".dal-scrubber { color: red; }\n" == LogScrubber._css
    finally:
        monkeypatch.undo()
        reload_static()                 # the classes and live widgets back on the real files
    assert w._esm == before_esm and w._css == before_css and LogScrubber._esm == before_esm


class _Toy(CommandWidget):
    """A command widget with two actions: ``ok`` and ``fail`` (raises ValueError)."""

    ACTIONS = ("ok", "fail")

    def __init__(self):
        self.refreshed = 0
        self.busy_seen: list[bool] = []
        super().__init__()

    def refresh(self, keep_error: bool = False) -> None:
        self.refreshed += 1

    def dispatch(self, command):
        def step():
            self.busy_seen.append(self.busy)
            if command["action"] == "fail":
                raise ValueError("it failed on purpose")
        self.attempt(command["action"], step)


def test_the_command_protocol_sets_busy_completed_and_error():
    w = _Toy()
    w.command = {"action": "ok", "n": 1}
    assert (w.error, w.completed, w.busy, w.busy_seen, w.refreshed) == ("", 1, False, [True], 1)
    w.command = {"action": "fail", "n": 2}
    assert w.error == "fail: it failed on purpose" and w.completed == 2 and not w.busy and w.refreshed == 2
    w.command = {"action": "explode", "n": 3}
    assert "unknown action 'explode'" in w.error and "['ok', 'fail']" in w.error and w.completed == 3
    assert w.busy_seen == [True, True] and w.refreshed == 3       # the unknown action ran nothing
    for bad in ("x", None, [1], {"action": ""}, {"n": 4}):
        done = w.completed
        w.command = bad
        assert "malformed command" in w.error and w.completed == done + 1 and not w.busy
    w.command = {"action": "ok" * 100_000, "n": 40}
    assert len(w.error) < 800 and w.completed == 40               # huge input is cut, not echoed
    w.command = {"action": "ok", "n": True}                        # a bool is no click number
    assert w.error == "" and w.completed == 41


def test_the_replication_session_lives_in_the_kernel_and_the_panel_only_drives_it():
    from kernel_lib.quorum import ReplicationSession
    from widgets.replication import ReplicationPanel, ReplicationPanelError

    s = ReplicationSession(append_timeout_s=1.0)
    assert ReplicationPanelError is ReplicationSessionError
    with pytest.raises(ClusterNotRunningError, match="start it first"):
        s.append()
    st = s.stop()
    assert st["running"] is False and st["members"] == [] and "nothing to stop" in s.message
    for bad in ({"members": 0}, {"members": True}, {"append_timeout_s": 0}, {"leader_wait_s": float("nan")}):
        with pytest.raises(ConfigError):
            ReplicationSession(**bad)
    with pytest.raises(ConfigError, match="either a session or settings"):
        ReplicationPanel(s, members=3)
    with pytest.raises(ConfigError, match="ReplicationSession"):
        ReplicationPanel("not a session")
    p = ReplicationPanel(s)
    assert p.session is s and p.append_timeout_s == 1.0 and p.cluster is None and p.pids == []
    assert p.status == "no cluster: click start cluster" and p.members == []
    p.command = {"action": "append", "n": 1}
    assert "start it first" in p.error and p.completed == 1 and not p.busy
    p.close()
    assert not s.running


# --- every bundle in a bare page: a fake model with the widget's own state -------------------------------
_RENDER = """async ([esm, state]) => {
  const handlers = {}; const sent = [];
  const model = {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; sent.push([k, v]); },
    save_changes: () => {},
    on: (ev, f) => { (handlers[ev] = handlers[ev] || []).push(f); },
    off: () => {}, send: () => {},
  };
  const el = document.createElement("div"); document.body.appendChild(el);
  const mod = await import(URL.createObjectURL(new Blob([esm], { type: "text/javascript" })));
  await mod.default.render({ model, el });
  window.__dal = { model, el, sent, handlers, state };
  return el.className;
}"""


def _watchdog_view():
    """The watchdog view over a constructed flip-flop: two edits that return the state, with the
    checks (metrics) run in between, so every panel has rows."""
    from kernel_lib.recovery.watchdog.model import WatchStep
    from widgets.watchdog_view import WatchdogView

    steps = []
    for i, (tool, state, mutative) in enumerate([("run_tests", "s0", False), ("edit", "a", True),
                                                  ("run_tests", "a", False), ("edit", "b", True),
                                                  ("run_tests", "b", False), ("edit", "a", True)], start=1):
        metrics = {"tests_passed": 1.0, "tests_failed": 1.0} if tool == "run_tests" else {}
        steps.append(WatchStep(position=2 * i, kind="tool", actor="agent", tool=tool,
                               arguments={"value": state} if mutative else {}, observation="ok",
                               observation_position=2 * i + 1, state_hash=(state * 64)[:64],
                               state_source="workspace", metrics=metrics, mutative=mutative))
    return WatchdogView(steps, name="constructed flip-flop", step=1)


def _breaker_dashboard():
    """A hand-stepped breaker that tripped (five failures), so the transitions table has a row."""
    from widgets.breaker_dashboard import BreakerDashboard

    d = BreakerDashboard()
    for n in range(1, 6):
        d.command = {"action": "failure", "n": n}
    return d


def _instances(tmp_path):
    from kernel_lib.live.session import WorksheetSession
    from kernel_lib.resume.stages import PrefillModel, ResumeTimeline
    from kernel_lib.sim.worksheet import worksheet_events
    from widgets import (CadenceExplorer, CrashPanel, LogScrubber, PolicyExplorer, ReplicationPanel,
                         ResumeTimelineView, RetentionPlanner)

    tl = ResumeTimeline.from_durations({"ownership": 0.005, "checkpoint_suffix_read": 0.02, "fold": 0.01,
                                        "workspace_restore": 0.002, "reconciliation": 0.04}, measured=True,
                                       prefill=PrefillModel(8192, 6144, 20000.0))
    session = WorksheetSession("sqlite", seed=0, test_delay_s=0.0, workdir=tmp_path)
    return session, {
        "widgets.scrubber": LogScrubber(worksheet_events(), position=9),
        "widgets.crash_panel": CrashPanel(session),
        "widgets.replication": ReplicationPanel(append_timeout_s=1.0),
        "widgets.cadence_explorer": CadenceExplorer(draw_svg=False),
        "widgets.resume_timeline": ResumeTimelineView(tl, draw_svg=False),
        "widgets.retention_planner": RetentionPlanner(),
        "widgets.policy_explorer": PolicyExplorer(draw_svg=False),
        "widgets.watchdog_view": _watchdog_view(),
        "widgets.breaker_dashboard": _breaker_dashboard(),
    }


@pytest.mark.browser
def test_every_bundle_renders_in_chromium_and_keeps_its_keys(browser, tmp_path):
    session, widgets = _instances(tmp_path)
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.set_content("<html><body></body></html>")
        page.evaluate("() => { window.__keys = 0; document.addEventListener('keydown', () => window.__keys++); }")
        for module, w in widgets.items():
            page.evaluate("() => { document.body.replaceChildren(); }")
            state = json.loads(json.dumps(w.get_state(), default=str))
            root = page.evaluate(_RENDER, [w._esm, state])
            assert WIDGETS[module][2] in root.split(), (module, root)
            el = page.locator("body > div")
            assert el.get_attribute("data-lm-suppress-shortcuts") == "true", module
            # a key typed anywhere inside stays inside (JupyterLab's shortcuts never see it)
            first = el.locator("input, select, button").first
            first.focus()
            first.press("ArrowRight")
            first.press("0")
            assert page.evaluate("() => window.__keys") == 0, module
            if module == "widgets.scrubber":        # the shared table fill: header + one row per operation
                rows = el.locator("table.dal-ops tr")
                assert rows.count() == 1 + len(w.record["operations"])
                assert el.locator("table.dal-ops th").all_inner_texts()[0] == "operation"
                assert el.locator("tr.dal-in-doubt").count() == len(w.record["in_doubt"])
            if module == "widgets.crash_panel":     # the shared command protocol: {action, position, n, view}
                el.locator("button[data-action=recover]").click()
                sent = page.evaluate("() => window.__dal.sent.filter(([k]) => k === 'command').map(([, v]) => v)")
                assert len(sent) == 1 and sent[0]["action"] == "recover" and sent[0]["n"] == 1
                assert sent[0]["position"] == "ToolResult" and sent[0]["view"]
                assert el.get_attribute("data-completed") == "0"
            if module == "widgets.resume_timeline":
                assert el.locator("table.dal-stages tr").count() == 1 + len(w.stages)
                assert el.locator("input.dal-number[data-name=cached_prefix_tokens]").input_value() == "6144"
            if module == "widgets.policy_explorer":   # the directive, and a typed box goes to the kernel
                assert el.locator(".dal-directive").inner_text().startswith("FORWARD_REPAIR")
                box = el.locator("input.dal-number[data-name=success_p]")
                assert box.input_value() == "0.5"
                box.fill("0.02")
                box.press("Enter")
                sent = page.evaluate("() => window.__dal.sent.filter(([k]) => k === 'success_p').map(([, v]) => v)")
                assert sent[-1:] == [0.02]
                assert el.locator("select[data-name=error_class]").input_value() == "semantic"
            if module == "widgets.watchdog_view":     # one lane per detector; "next" and a mark go to a detection
                first = w.timeline.fires()[0]
                assert el.locator("table.dal-window tr").count() == 2          # header + this step (W is empty)
                marks = {(f["detector"], f["step"]) for f in w.timeline.fires()}      # one per detector and step
                assert el.locator("circle.dal-mark").count() == len(marks)
                assert el.locator("table.dal-detections tr[data-detector=watchdog]").count() == len(
                    w.timeline.detections["watchdog"]) > 0
                el.locator("button[data-action=next]").click()
                el.locator(f"circle.dal-mark[data-step='{first['step']}']").first.click()
                sent = page.evaluate("() => window.__dal.sent.filter(([k]) => k === 'step').map(([, v]) => v)")
                assert sent == [first["step"], first["step"]]
            if module == "widgets.breaker_dashboard":   # the state the kernel published, one row per transition
                assert el.get_attribute("data-state") == "open" and el.locator(".dal-state").inner_text() == "Open"
                assert el.locator("table.dal-transitions tr").count() == 1 + len(w.transitions) == 2
                assert el.locator("rect.dal-seg").count() == len(w.timeline)
                el.locator("button[data-action=advance]").click()
                sent = page.evaluate("() => window.__dal.sent.filter(([k]) => k === 'command').map(([, v]) => v)")
                assert [c["action"] for c in sent] == ["advance"]
            if module == "widgets.retention_planner":
                assert el.locator("table.dal-costs tr[data-policy]").count() == len(w.cost_cells)
                assert el.locator("table.dal-promises td.dal-broken-cell").count() >= 1
        assert errors == []
    finally:
        page.close()
        widgets["widgets.replication"].close()
        session.close()


def test_hot_reload_without_watchfiles_says_how_to_reload_by_hand(monkeypatch):
    import importlib.util

    import widgets._base as base
    from kernel_lib.sim.worksheet import worksheet_events
    from widgets.scrubber import LogScrubber

    if importlib.util.find_spec("watchfiles") is not None:
        pytest.skip("watchfiles is installed: the reload thread would start")
    monkeypatch.setenv("ANYWIDGET_HMR", "1")
    monkeypatch.setattr(base, "_watch_started", False)
    with pytest.warns(UserWarning, match="reload_static"):
        LogScrubber(worksheet_events())
    assert base._watch_started
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # once only: a second widget does not warn again
        LogScrubber(worksheet_events())
