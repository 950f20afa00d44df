"""Adversarial checks of issue 18 (Failure Recovery III, the semantic watchdog): inputs a hostile or
careless user hands the watchdog that its feature tests did not try.

Fault model: the watchdog command is pointed at a FIFO, an empty path, a log whose name is not
UTF-8 or whose sequence numbers repeat; the Python API is given steps, detections, events, worker
journals, workspace hints and run arguments of the wrong type or range. Invariants: every bad input
is refused with one typed error (the CLI: one ``error:`` line, exit 2), never a traceback or a
hang; nothing is logged, written or changed before the refusal; a refusal never blinds the
watchdog afterwards. Goal: each test below failed before its fix.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.cli import main
from kernel_lib.errors import ConfigError, WatchdogConfigError, WatchInputError, WatchTimelineError
from kernel_lib.recovery.watchdog.model import Detection, WatchStep

ROOT = Path(__file__).resolve().parents[1]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    lines = [ln for ln in err if not ln.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


def _worksheet_events():
    from kernel_lib.sim.worksheet import worksheet_events
    return worksheet_events()


def _tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if p.is_file():
            h.update(os.fsencode(p) + p.read_bytes())
    return h.hexdigest()


# --- the command ------------------------------------------------------------------------------------


def test_a_fifo_as_log_is_refused_not_read_for_ever(tmp_path):
    """A FIFO (or /dev/zero) named .json was sniffed by reading it: the command blocked for ever,
    with --import too."""
    fifo = tmp_path / "stream.json"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in ([str(fifo)], ["--import", "swe-agent", str(fifo)], ["/dev/zero"]):
        try:
            out = subprocess.run([sys.executable, "-m", "kernel_lib", "watchdog", *argv], capture_output=True,
                                 text=True, timeout=60, env=env)
        except subprocess.TimeoutExpired:
            pytest.fail(f"watchdog {argv} hung reading a non-regular file")
        err = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(err) == 1 and "not a log" in err[0], (argv, out.stderr)


def test_an_empty_log_path_is_no_log_not_the_current_directory(capsys, tmp_path, monkeypatch):
    """``watchdog ''`` ran every file of the current directory (Path('') is '.')."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.json").write_text("[]")
    assert main(["watchdog", ""]) == 2
    assert "no log given" in _one_error_line(capsys)


def test_a_json_file_nested_too_deeply_to_sniff_is_refused(tmp_path, capsys):
    """Telling the format of ``[[[[...]]]]`` 100,000 deep raised RecursionError (a traceback)."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["watchdog", str(deep)]) == 2
    assert "not a JSON trajectory" in _one_error_line(capsys)


def test_an_observation_of_deeply_nested_json_text_is_watched(tmp_path, capsys):
    """A tool's observation text ``[[[[...`` 100,000 deep made the revealed-state reader raise
    RecursionError out of watch_steps (a traceback from the command)."""
    msgs = [{"role": "user", "content": "x"},
            {"role": "assistant", "content": "t", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "update_thing", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "[" * 100_000}]
    log = tmp_path / "deep_observation.json"
    log.write_text(json.dumps(msgs))
    assert main(["watchdog", str(log), "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["steps"] == 1


def test_compare_with_a_baseline_is_refused(capsys):
    """``--compare --baseline gemini`` silently ignored --baseline."""
    path = ROOT.parent / "shared/data/trajectories/tau-bench-airline/task08_trial1.json"
    if not path.exists():
        pytest.skip("shared data not here")
    assert main(["watchdog", str(path), "--compare", "--baseline", "gemini"]) == 2
    assert "--baseline" in _one_error_line(capsys)


def test_a_log_whose_name_is_not_utf8_is_read_and_printed(tmp_path, capsys):
    """An SQLite log (or a trajectory file) named with bytes that are not UTF-8: opening the store
    read-only raised UnicodeEncodeError (a traceback, exit 1); the importer refused the file with a
    three-line pydantic message."""
    from kernel_lib.log.stores import open_store

    db = Path(os.fsdecode(os.fsencode(tmp_path) + b"/run\xfe.db"))
    store = open_store("sqlite", db, create=True)
    for e in _worksheet_events():
        store.append(e, "fdatasync")
    store.close()
    before = _tree_digest(tmp_path)
    assert main(["watchdog", str(db)]) == 0, capsys.readouterr().err
    assert "run\\xfe.db" in capsys.readouterr().out
    assert main(["watchdog", str(db), "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["source"]["file"].endswith("run\\xfe.db")
    assert main(["watchdog", str(db), "--compare", "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["logs"][0]["name"].endswith("run\\xfe.db")
    traj = Path(os.fsdecode(os.fsencode(tmp_path) + b"/q\xff.json"))
    traj.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]))
    assert main(["watchdog", str(traj), "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["source"]["file"] == "q\\xff.json"
    traj.unlink()
    assert _tree_digest(tmp_path) == before       # the log was read, not changed


def test_a_log_whose_sequence_numbers_repeat_is_refused(tmp_path, capsys):
    """Events spliced or reordered (two at sequence number 3) were watched as given: detections at
    positions that name two events."""
    from kernel_lib.core.events import from_dict
    from kernel_lib.log.files import encode_jsonl

    events = _worksheet_events()
    spliced = []
    for e in events:
        d = json.loads(e.canonical)
        if d["sequence_number"] == 4:
            d["sequence_number"] = 3
        spliced.append(from_dict(d))
    log = tmp_path / "spliced.jsonl"
    log.write_bytes(encode_jsonl(spliced))
    before = log.read_bytes()
    assert main(["watchdog", str(log), "--json"]) == 2
    assert "sequence order" in _one_error_line(capsys)
    assert log.read_bytes() == before


# --- steps, detections, events -------------------------------------------------------------------------


def test_a_long_line_full_of_test_counts_is_read_in_linear_time():
    """An observation line starting with "= " and holding many "3 passed" but no " in 0.5s ===" tail
    made the pytest-summary regex (lazy parts around an alternation) take time quadratic in the
    line: 72 KB took 6.6 s, 580 KB would take minutes, per step, every time the log is watched."""
    probe = ("from kernel_lib.recovery.watchdog.steps import metrics_from_text\n"
             "print(metrics_from_text('= ' + '3 passed ' * 64000))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail("metrics_from_text took more than a minute on one 580 KB line")
    assert out.returncode == 0 and out.stdout.strip() == "{}", out.stderr


def test_many_open_screenshot_links_are_read_in_linear_time():
    """A transcript turn holding "screenshot of [" many times with no closing "]" made the browser
    state reader re-scan the rest of the text from each one: 128 KB took 6.6 s, 1 MB minutes."""
    probe = ("from kernel_lib.recovery.watchdog.steps import _browser_state\n"
             "print(_browser_state('screenshot of [' * 70000, 'WebSurfer'))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail("the browser state reader took more than a minute on 1 MB")
    assert out.returncode == 0 and out.stdout.strip() == "None", out.stderr


_OLD_SCREENSHOT = re.compile(r"screenshot of \[(?P<title>[^\]\n]*)\]\((?P<url>[^)\s]*)\)", re.IGNORECASE)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["screenshot of [", "Screenshot Of [", "]", "(", ")", "x", " ", "\n", "http://a",
                                 "[", "](u)", "]("]), max_size=16).map("".join))
def test_the_linear_screenshot_reader_finds_what_the_old_regex_found(text):
    from kernel_lib.recovery.watchdog.steps import _screenshot

    old, new = _OLD_SCREENSHOT.search(text), _screenshot(text)
    assert (old is None) == (new is None)
    if old is not None:
        assert (old.group("url"), old.end()) == (new.group("url"), new.end())


def test_gemini_chanting_over_many_short_lines_is_fast():
    """Gemini's content-loop tracker, as ported, shifted every stored chunk index on each line once
    its 5,000-character history was full: three messages of 20,000 short lines took 305 s."""
    probe = ("from kernel_lib.recovery.watchdog.model import WatchStep\n"
             "from kernel_lib.recovery.watchdog.baselines import gemini_detections\n"
             "t = '\\n'.join(f'line {i % 7} of {i % 11}' for i in range(20000))\n"
             "steps = [WatchStep(position=i + 1, kind='message', actor='a', tool='message:a', arguments={'text': t},"
             " model_text=t) for i in range(3)]\n"
             "print(len(gemini_detections(steps)))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail("the Gemini baseline took more than a minute on 1.3 MB of short lines")
    assert out.returncode == 0, out.stderr


def test_many_questions_are_compared_within_the_window_only():
    """Every question was compared with every earlier one (those out of the window skipped one by
    one): 8,000 questions took 3.7 s, 40,000 about 90 s."""
    probe = ("from kernel_lib.recovery.watchdog.model import WatchStep\n"
             "from kernel_lib.recovery.watchdog.detectors import detect_repeated_questions\n"
             "steps = [WatchStep(position=i + 1, kind='question', actor='a', tool='message:a', arguments={},"
             " observation='no', model_text=f'Could you provide the booking code for flight {i % 3}?')"
             " for i in range(40000)]\n"
             "print(len(detect_repeated_questions(steps)))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail("the repeated-question detector took more than a minute on 40,000 questions")
    assert out.returncode == 0 and int(out.stdout) > 0, out.stderr


def test_openhands_over_a_long_log_is_fast():
    """The OpenHands replay filtered the whole history again for every step (and scanned it for
    messages and observations): 16,000 failing calls took 91 s."""
    probe = ("from kernel_lib.recovery.watchdog.model import WatchStep\n"
             "from kernel_lib.recovery.watchdog.baselines import openhands_detections\n"
             "steps = [WatchStep(position=i + 1, kind='tool', actor='a', tool='edit', arguments={'x': i % 2},"
             " observation='Error: x', observation_error=True) for i in range(16000)]\n"
             "print(len(openhands_detections(steps)))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail("the OpenHands baseline took more than a minute on 16,000 steps")
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr


_OH_STEP = st.tuples(st.sampled_from(["tool", "tool", "message", "question"]), st.integers(0, 1),
                     st.sampled_from(["", "hi"]), st.sampled_from([None, "ok", "Error: x"]), st.booleans())


@settings(max_examples=150, deadline=None)
@given(st.lists(_OH_STEP, max_size=40), st.booleans(), st.sampled_from([None, True, False]))
def test_openhands_grown_history_equals_the_rules_on_every_prefix(spec, compare_thought, headless):
    """Invariant: the history grown one event at a time gives, at every step, the rules that hold on
    the history filtered afresh from that prefix (OpenHands' own view)."""
    from kernel_lib.recovery.watchdog.baselines import _History, _oh_events, _oh_rules, openhands_detections

    steps = [WatchStep(position=2 * i + 1, kind=k, actor="a", tool="edit" if k == "tool" else "message:a",
                       arguments={"x": x} if k == "tool" else {"text": text}, observation=obs,
                       observation_error=obs == "Error: x", observation_position=None if obs is None else 2 * i + 2,
                       mutative=mut if k != "question" else False)
             for i, (k, x, text, obs, mut) in enumerate(spec)]
    events = _oh_events(steps, compare_thought)
    mode = (not any(s.kind == "question" for s in steps)) if headless is None else headless
    expected, holding = [], set()
    for n in range(1, len(events) + 1):
        seen = events[:n]
        last_user = max((i for i, e in enumerate(seen) if e.role == "user"), default=-1)
        fresh = _History()
        for e in (seen if mode else seen[last_user + 1:]):
            if e.role != "user":
                fresh.add(e)
        held = _oh_rules(fresh)
        expected += [(events[n - 1].position, f"openhands.{r}", [a.position for a in acts])
                     for r, acts in held.items() if r not in holding]
        holding = set(held)
    got = [(d.position, d.kind, d.evidence["occurrences"])
           for d in openhands_detections(steps, compare_thought=compare_thought, headless=headless)]
    assert got == expected


class _ReferenceChanting:
    """The content-loop tracker as first ported from Gemini CLI (indices shifted on every cut)."""

    def __init__(self) -> None:
        self.history, self.stats, self.last = "", {}, 0

    def add(self, content: str) -> str | None:   # the reset/code-fence rules are shared and not varied here
        self.history += content
        if len(self.history) > 5000:
            cut = len(self.history) - 5000
            self.history = self.history[cut:]
            self.last = max(0, self.last - cut)
            self.stats = {k: kept for k, v in self.stats.items() if (kept := [i - cut for i in v if i - cut >= 0])}
        while self.last + 50 <= len(self.history):
            chunk = self.history[self.last:self.last + 50]
            seen = self.stats.setdefault(chunk, [])
            seen.append(self.last)
            if len(seen) >= 10:
                recent = seen[-10:]
                periods = {self.history[recent[i]:recent[i + 1]] for i in range(9)}
                if (recent[-1] - recent[0]) / 9 <= 250 and len(periods) <= 5:
                    return chunk
            self.last += 1
        return None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["ab", "abc ", "x" * 37, "loop loop loop ", "zz", "y" * 61, "\n", "q"]), min_size=1,
                max_size=12),
       st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=6), min_size=1, max_size=300))
def test_the_chanting_tracker_fires_where_the_first_port_fired(words, lines):
    """Invariant: the tracker with absolute indices reports the same chunk at the same line as the
    port that shifted indices (histories past 5,000 characters included)."""
    from kernel_lib.recovery.watchdog.baselines import _Chanting

    new, ref = _Chanting(), _ReferenceChanting()
    for picks in lines:
        line = "".join(words[i % len(words)] for i in picks) + "\n"
        a, b = new.add(line), ref.add(line)
        assert a == b
        if a is not None:
            new, ref = _Chanting(), _ReferenceChanting()


_OLD_SUMMARY = re.compile(
    r"^=+ (?P<body>[^=\n]*?\b(?:passed|failed|errors?)\b[^=\n]*?) in [\d.]+\s*s(?:econds)?(?: \([^)]*\))? =+\s*$"
    r"|^(?:\w+: )?(?P<plain>\d+ passed, \d+ failed(?:, \d+ skipped)?)\s*$", re.MULTILINE)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["=", "===", " ", "3", "12", "passed", "failed", "error", "errors", ",", " in ",
                                 "0.52", "s", "seconds", "(", ")", "0:01", "\n", "x", "warnings", "E: ",
                                 "1 passed, 2 failed", " =", "= "]), max_size=30).map("".join))
def test_the_linear_summary_reader_reads_what_the_old_regex_read(text):
    """Invariant: the linear reader finds the same last summary as the regex it replaces."""
    from kernel_lib.recovery.watchdog.steps import _summary_bodies

    old = [(m.start(), m.group("body") or m.group("plain")) for m in _OLD_SUMMARY.finditer(text)]
    new = _summary_bodies(text)
    assert (old[-1][1] if old else None) == (new[-1][1] if new else None)


def _step(i: int, **kw) -> WatchStep:
    base = dict(position=10 * i, kind="tool", actor="agent", tool="edit", arguments={"n": i}, observation="ok",
                observation_position=10 * i + 1)
    return WatchStep(**{**base, **kw})


@pytest.mark.parametrize("field,value", [
    ("observation", 5), ("metrics", {"tests_passed": math.nan}), ("metrics", {"tests_passed": "3"}),
    ("state_hash", 7), ("position", "x"), ("position", None), ("position", True), ("kind", "bogus"),
    ("arguments", [1, 2]), ("arguments", {1: "a"}), ("tool", None), ("mutative", "yes"), ("model_text", None),
])
def test_a_step_with_a_field_of_the_wrong_type_is_refused_naming_it(field, value):
    """A hand-built step with an observation that is a number crashed a detector (AttributeError);
    NaN metrics made the stagnation detector fire on garbage; a position "x" or None was echoed as
    the detection's position."""
    with pytest.raises(WatchInputError) as info:
        _step(1, **{field: value})
    assert info.value.field == field


def test_steps_out_of_log_order_are_refused_by_every_entry_point():
    """Steps at repeated or falling positions were watched as given (detections at one position
    naming two steps)."""
    from kernel_lib.recovery.watchdog.baselines import run_baseline
    from kernel_lib.recovery.watchdog.detectors import run_watchdog
    from kernel_lib.recovery.watchdog.timeline import timeline_of_steps

    steps = [_step(1, state_hash="a", mutative=True), _step(1, state_hash="b", mutative=True)]
    for call in (lambda: run_watchdog(steps), lambda: run_baseline("gemini", steps),
                 lambda: timeline_of_steps(steps)):
        with pytest.raises(WatchInputError, match="log order"):
            call()
    with pytest.raises(WatchInputError):
        run_watchdog([1, 2])
    with pytest.raises(WatchdogConfigError):
        run_baseline(["gemini"], [])          # an unhashable name: a TypeError before


def test_events_that_are_not_events_are_refused():
    from kernel_lib.recovery.watchdog.steps import StepFold, watch_steps

    with pytest.raises(WatchInputError, match="Event"):
        watch_steps([{"event_type": "ToolIntent"}])
    with pytest.raises(WatchInputError, match="Event"):
        StepFold().add([None])


def test_arguments_canonical_json_refuses_still_get_a_signature():
    """The fallback for arguments RFC 8785 refuses (NaN, an integer past 2**53) handed xxHash a str
    and raised TypeError; arguments nested past the recursion limit raised RecursionError."""
    from kernel_lib.recovery.watchdog.detectors import run_watchdog
    from kernel_lib.recovery.watchdog.steps import step_signature

    for args in ({"x": math.nan}, {"x": 2**60}, {"x": "\ud800"}):
        a, b = _step(1, arguments=args), _step(2, arguments=dict(args))
        sig = step_signature(a)
        assert len(sig) == 16 and sig == step_signature(b)
    failing = [_step(i, arguments={"x": 2**60}, observation="Error: boom", observation_error=True) for i in (1, 2)]
    assert any(d.kind == "action_repetition" for d in run_watchdog(failing))
    deep: dict = {}
    cur = deep
    for _ in range(5000):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(WatchInputError, match="not JSON data"):
        step_signature(_step(1, arguments=deep))


def test_config_odd_nonce_and_repeated_kinds_are_refused():
    from kernel_lib.recovery.watchdog.detectors import WatchdogConfig

    with pytest.raises(WatchdogConfigError, match="nonce_arguments"):
        WatchdogConfig(nonce_arguments=5)          # TypeError before
    with pytest.raises(WatchdogConfigError, match="more than once"):
        WatchdogConfig(kinds=("state_hash_cycle", "state_hash_cycle"))   # every detection reported twice


@pytest.mark.parametrize("kw", [dict(position="x"), dict(position=-1), dict(evidence=None), dict(evidence=[1]),
                                dict(tier=7), dict(kind=None)])
def test_a_detection_with_a_field_of_the_wrong_type_is_refused(kw):
    with pytest.raises(WatchInputError):
        Detection(**{"position": 5, "kind": "state_hash_cycle", "evidence": {}, **kw})


# --- the runner -------------------------------------------------------------------------------------------


def _gate():
    from kernel_lib.core.events import TaskStarted
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
    from kernel_lib.log import MemoryStore, TrajectoryLog

    gate = DispatchGate(TrajectoryLog(MemoryStore(), "t", must_survive="none"), AdmissionPolicy({"g": {"edit_line"}}))
    gate.start(TaskStarted(task_id="t", requester="r", objective="o", budget_ceiling_usd=5.0, grant_ids=["g"]))
    for i in range(3):
        gate.run_tool(ToolProposal(f"op{i}", "a1", "edit_line", {"x": i % 2}, "g", 0.0),
                      lambda intent: ToolReply("completed", outcome={}, observation_complete=True))
    return gate


def test_a_detection_from_the_future_is_refused_and_does_not_blind_the_watchdog():
    """A detection at a position past the log's head was answered and logged; every real
    detection after it was then "already answered" (the log durably blinded the watchdog)."""
    from kernel_lib.recovery.watchdog.runner import WatchdogRunner

    gate = _gate()
    runner = WatchdogRunner(gate)
    head = gate.record.last_sequence_number
    with pytest.raises(WatchInputError, match="names no position"):
        runner.intervene(Detection(10**9, "state_hash_cycle", {}))
    with pytest.raises(WatchInputError):
        runner.intervene(Detection(0, "state_hash_cycle", {}))
    assert gate.record.last_sequence_number == head and runner.interventions() == []   # nothing logged
    real = runner.intervene(Detection(head, "state_hash_cycle", {"step_position": head}))
    assert real is not None and real.tier == 1


def test_the_ladder_refuses_a_negative_step_count_and_a_policy_that_is_none():
    """``steps_since_last=-5`` was read as "within the epoch" (tier 2 at once); "3" raised
    TypeError, a policy given as a dict AttributeError."""
    from kernel_lib.recovery.watchdog.escalation import Intervention, decide_tier

    history = [Intervention("wd-10-t1", 1, "state_hash_cycle", 10, 11, 13)]
    for bad in (-5, "3", 1.5, True):
        with pytest.raises(ConfigError, match="steps_since_last"):
            decide_tier(history, Detection(20, "state_hash_cycle", {}), steps_since_last=bad)
    with pytest.raises(ConfigError, match="LadderPolicy"):
        decide_tier(history, Detection(20, "state_hash_cycle", {}), {"epoch_steps": 3}, steps_since_last=1)


def test_a_runner_with_a_revoke_that_is_not_callable_is_refused_at_once():
    """``revoke="nope"`` was accepted; tier 3 logged its intent, then failed on the call, and every
    resume after that failed the same way (the trajectory could never finish its abort)."""
    from kernel_lib.recovery.watchdog.runner import WatchdogRunner

    gate = _gate()
    for kw in (dict(revoke="nope"), dict(workspace=object()), dict(policy={"epoch_steps": 3}), dict(issuer="")):
        with pytest.raises(ConfigError):
            WatchdogRunner(gate, **kw)


def test_evidence_the_log_cannot_hold_is_refused_before_anything_is_logged():
    """Evidence with a NaN or a set raised pydantic's ValidationError from the runner."""
    from kernel_lib.recovery.watchdog.runner import WatchdogRunner

    gate = _gate()
    runner = WatchdogRunner(gate)
    head = gate.record.last_sequence_number
    for evidence in ({"x": math.nan}, {"x": {1, 2}}):
        with pytest.raises(WatchInputError, match="cannot be logged"):
            runner.intervene(Detection(head, "state_hash_cycle", evidence))
    assert gate.record.last_sequence_number == head


# --- the workspace hasher -----------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["scan", "inotify"])
def test_a_hint_through_a_symlinked_directory_adds_no_phantom_file(tmp_path, source):
    """``hash(["up/b"])`` with ``up`` a link to the workspace (or to /etc) lstat'ed through the
    link and added a file ``up/b`` that is not in the workspace: the incremental hash then differed
    from a fresh one, and a link could pull a file from outside into the state."""
    from kernel_lib.recovery.watchdog.workspace import WorkspaceHasher, inotify_available

    if source == "inotify" and not inotify_available()[0]:
        pytest.skip("no inotify here")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "b").write_text("b")
    (root / "d").mkdir()
    (root / "d" / "x").write_text("x")
    with WorkspaceHasher(root, change_source=source) as h:
        h.hash()
        (root / "up").symlink_to(root)
        h.hash(["up"])
        got = h.hash(["up/b", "up/d/x"])
        assert "up/b" not in got.changed
        assert got.digest == WorkspaceHasher(root, change_source="scan").hash().digest
        # a directory replaced by a link, hinted with a path under it
        (root / "d" / "x").unlink()
        (root / "d").rmdir()
        (root / "d").symlink_to(root)
        got = h.hash(["d", "d/b"])
        assert got.digest == WorkspaceHasher(root, change_source="scan").hash().digest
        assert got.file_count == 3   # b, up, d (two links hashed by their target text)


@pytest.mark.parametrize("root", ["", "/tmp/a\0b", None, 5])
def test_a_root_that_is_no_path_is_a_config_error(root):
    """``""`` hashed the current directory; a NUL raised ValueError, None/5 TypeError."""
    from kernel_lib.recovery.watchdog.workspace import WorkspaceHasher

    with pytest.raises(ConfigError):
        WorkspaceHasher(root)


@pytest.mark.parametrize("hint", [[5], [None], ["a\0b"], 5])
def test_hints_that_are_no_paths_are_config_errors(tmp_path, hint):
    from kernel_lib.recovery.watchdog.workspace import WorkspaceHasher

    (tmp_path / "a").write_text("a")
    with WorkspaceHasher(tmp_path, change_source="scan") as h:
        first = h.hash()
        with pytest.raises(ConfigError):
            h.hash(hint)
        assert h.hash().digest == first.digest
    with pytest.raises(ConfigError):
        WorkspaceHasher(tmp_path, None)


# --- the heartbeat worker's journal and parameters ---------------------------------------------------------


_GOOD = {"step": 1, "tool": "edit_line", "arguments": {"line": 2}, "observation": {"applied": True},
         "state_sha256": "ab" * 32, "metrics": {}, "mutative": True}


def _journal(tmp_path, *lines: str, end: str = "\n") -> Path:
    p = tmp_path / "journal.jsonl"
    p.write_text("\n".join(lines) + end)
    return p


def test_a_damaged_journal_line_is_refused_not_read_past_or_stopped_at(tmp_path):
    """A torn line in the middle silently ended the journal there (steps after it vanished); a blank
    first line gave no steps at all; a line of the wrong shape raised KeyError/TypeError."""
    from kernel_lib.live.heartbeat import journal_steps

    g1, g3 = json.dumps(_GOOD), json.dumps({**_GOOD, "step": 3})
    with pytest.raises(WatchInputError, match=r"journal.jsonl:2"):
        journal_steps(_journal(tmp_path, g1, '{"step": 2, "to', g3))
    assert [s.position for s in journal_steps(_journal(tmp_path, "", g1, "", g3))] == [1, 3]
    assert [s.position for s in journal_steps(_journal(tmp_path, g1, '{"step": 2', end=""))] == [1]  # being written
    for bad in ({k: v for k, v in _GOOD.items() if k != "metrics"}, [1], {**_GOOD, "arguments": [1]},
                {**_GOOD, "metrics": {"a": "x"}}, {**_GOOD, "step": "one"}):
        with pytest.raises(WatchInputError, match="not a step record"):
            journal_steps(_journal(tmp_path, json.dumps(bad)))
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00\n")
    with pytest.raises(WatchInputError):
        journal_steps(tmp_path / "bin.jsonl")
    with pytest.raises(WatchInputError, match="regular file"):
        journal_steps(tmp_path)


def test_infinite_durations_and_a_bad_config_are_refused_before_a_worker_starts(tmp_path):
    """duration_s=inf probed for ever; step_s=inf started a worker that never stepped; a config
    that is not a WatchdogConfig was refused only after the worker had run."""
    from kernel_lib.live.heartbeat import run_heartbeat_fallacy, spawn_looping_worker

    probe = ("import math, sys; from kernel_lib.live.heartbeat import run_heartbeat_fallacy\n"
             "run_heartbeat_fallacy(sys.argv[1], duration_s=math.inf)")
    try:   # in a process of its own: before the fix this call never returned
        out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "a")], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail("run_heartbeat_fallacy(duration_s=inf) probed for ever")
    assert out.returncode != 0 and "ConfigError" in out.stderr and "finite" in out.stderr, out.stderr
    with pytest.raises(ConfigError, match="finite"):
        spawn_looping_worker(tmp_path / "b", step_s=math.inf)
    with pytest.raises(ConfigError, match="start_timeout_s"):
        spawn_looping_worker(tmp_path / "c", start_timeout_s=math.nan)
    with pytest.raises(WatchdogConfigError):
        run_heartbeat_fallacy(tmp_path / "d", config="not a config")
    assert not any((tmp_path / n).exists() for n in "abcd")


# --- the live looping agent ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [dict(obey_interrupt="x"), dict(obey_interrupt=math.nan), dict(obey_interrupt=2.0),
                                dict(seed=None), dict(seed=1.5), dict(trajectory_id=5), dict(trajectory_id=""),
                                dict(epoch_steps=0), dict(backtrack_budget=-1), dict(change_source="bogus")])
def test_bad_run_arguments_are_refused_before_anything_is_written(tmp_path, kw):
    """obey_interrupt="x" raised TypeError mid-run; NaN, 2 and seeds that are not integers ran; a bad
    ladder, change source or trajectory id was refused only after the world, the blob folder (and
    for a trajectory id 5, pydantic's ValidationError) had been written."""
    from kernel_lib.live.looping_agent import run_looping_agent
    from kernel_lib.log import MemoryStore

    with pytest.raises(ConfigError):
        run_looping_agent(tmp_path / "ws", store=MemoryStore(), must_survive="none", **kw)
    assert list(tmp_path.iterdir()) == []


def test_a_workspace_that_is_a_file_is_a_config_error(tmp_path):
    from kernel_lib.live.looping_agent import run_looping_agent
    from kernel_lib.log import MemoryStore

    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(ConfigError, match="directory"):
        run_looping_agent(f, store=MemoryStore(), must_survive="none")
    assert f.read_text() == "x"


# --- the timeline and the view --------------------------------------------------------------------------------


def test_a_step_too_large_to_print_is_refused_not_raised():
    """``step = 10**5000`` raised ValueError (int-to-text limit) from the message, out of the
    widget that promises never to raise, and out of WatchTimeline.at."""
    from widgets.watchdog_view import WatchdogView
    from kernel_lib.recovery.watchdog.timeline import timeline_of_steps

    steps = [_step(i, state_hash="ab"[i % 2] * 64, mutative=True) for i in range(1, 6)]
    with pytest.raises(WatchTimelineError, match="huge"):
        timeline_of_steps(steps).at(10**5000)
    w = WatchdogView(steps, step=2)
    w.step = -10**5000
    assert w.step == 2 and "huge" in w.error


def test_max_step_set_from_code_is_refused():
    """``view.max_step = -1`` (or 100) was taken: the slider's end no longer matched the trajectory."""
    from widgets.watchdog_view import WatchdogView

    steps = [_step(i) for i in range(1, 4)]
    w = WatchdogView(steps, step=1)
    for bad in (-1, 100):
        w.max_step = bad
        assert w.max_step == 3 and "max_step" in w.error


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=30), st.integers(-2, 200))
def test_the_timeline_finds_a_positions_step_by_binary_search(gaps, position):
    """step_of was a walk over every step for every detection and every scrub (a 3,000-step log:
    0.5 s per step shown); it is a binary search now, with the walk's answer."""
    from kernel_lib.recovery.watchdog.timeline import timeline_of_steps

    positions = [sum(gaps[:i + 1]) for i in range(len(gaps))]
    steps = [WatchStep(position=p, kind="tool", actor="a", tool="edit", arguments={"x": p % 2}) for p in positions]
    tl = timeline_of_steps(steps)
    assert tl.step_of(position) == sum(1 for p in positions if p <= position)
    first = tl.fires()
    for f in first:
        f["step"] = -1                     # a caller's change to what fires() returned
    assert tl.fires() == [{**f, "step": tl.step_of(f["position"])} for f in first]
