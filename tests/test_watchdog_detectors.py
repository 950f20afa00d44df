"""The watchdog's detectors on constructed step sequences (Failure Recovery, "Semantic Watchdog
Timers": figure 3, table 6, the cycle-detector listing, table 7; issue 18).

Fault model: an agent that keeps acting without progress: a workspace that comes back to a state
it had k mutative steps ago (k = 1 a no-op, k = 2 the figure-3 flip-flop, up to K), verifier
metrics that stop improving or swing back and forth, a failing call re-issued (back to back or
with other calls in between), the same question put to the user again and again, a model whose
text collapses into repetition. Invariants: each detector fires at the log position where its
evidence is complete, never on a trajectory whose states are all distinct (property), and the
tiers climb 1, 2, 3 within an episode. Goal: every kind and every period is exercised by a
sequence built for it, and a bad configuration is a typed error.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.errors import ConfigError, KernelError, WatchdogConfigError
from kernel_lib.recovery.watchdog import DETECTION_KINDS, WatchStep
from kernel_lib.recovery.watchdog.detectors import (
    WatchdogConfig, assign_tiers, detect_action_repetition, detect_embedding_drift, detect_entropy_collapse,
    detect_metric_oscillation, detect_metric_stagnation, detect_repeated_questions, detect_state_cycles,
    embedding_status, lexical_entropy, question_sentences, run_watchdog,
)

# --- builders ---------------------------------------------------------------------------------------------


def step(i: int, *, state: str | None = None, tool: str = "edit", args: dict | None = None, obs: str | None = "ok",
         error: bool = False, mutative: bool | None = True, kind: str = "tool", actor: str = "agent",
         metrics: dict | None = None, text: str = "") -> WatchStep:
    """Step i at log position 10*i (its observation at 10*i + 1)."""
    return WatchStep(position=10 * i, kind=kind, actor=actor, tool=tool, arguments=args if args is not None else {},
                     observation=obs, observation_error=error, observation_position=10 * i + 1 if obs is not None
                     else None, state_hash=state, state_source="workspace" if state else None,
                     metrics=metrics or {}, mutative=mutative, model_text=text)


def states(*hashes: str, **kw) -> list[WatchStep]:
    return [step(i, state=h, args={"n": i}, **kw) for i, h in enumerate(hashes)]


def kinds(dets) -> list[str]:
    return [d.kind for d in dets]


# --- state-hash cycles (figure 3, the listing) -----------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 3, 4])
def test_a_cycle_of_period_k_fires_when_the_state_comes_back(k):
    orbit = [f"s{j}" for j in range(k)]
    seq = states("s_init", *orbit, orbit[0])
    dets = detect_state_cycles(seq)
    assert len(dets) == 1
    d = dets[0]
    assert d.kind == "state_hash_cycle" and d.evidence["period"] == k
    assert d.position == seq[-1].observation_position          # the state is known once the action ran
    assert d.evidence["matched_position"] == seq[-1 - k].position
    assert d.evidence["occurrences"] == [s.position for s in seq[-1 - k:]]
    assert d.evidence["first_repeat_position"] == seq[-1].position


def test_figure_3_flip_flop_keeps_firing_while_it_persists():
    seq = states("A", "B", "A", "B", "A")                    # modify line 42, revert, modify again, ...
    dets = detect_state_cycles(seq)
    assert [d.evidence["period"] for d in dets] == [2, 2, 2]
    assert [d.evidence["step_position"] for d in dets] == [20, 30, 40]


def test_period_one_is_a_no_op_repeated_and_needs_the_configured_repeats():
    seq = states("A", "A", "A", "A")
    dets = detect_state_cycles(seq)                          # noop_min_repeats = 2 by default
    assert [d.evidence["step_position"] for d in dets] == [20, 30]
    assert all(d.evidence["period"] == 1 for d in dets)
    assert [d.evidence["unchanged_steps"] for d in dets] == [2, 3]
    assert kinds(detect_state_cycles(seq, WatchdogConfig(noop_min_repeats=1))) == ["state_hash_cycle"] * 3
    assert detect_state_cycles(states("A", "A"), WatchdogConfig()) == []   # one refused edit is not a loop yet


def test_a_cycle_longer_than_the_window_is_not_seen():
    seq = states("x", "a", "b", "c", "d", "e", "a")           # period 5
    assert detect_state_cycles(seq, WatchdogConfig(max_period=4)) == []
    (d,) = detect_state_cycles(seq, WatchdogConfig(max_period=5))
    assert d.evidence["period"] == 5


def test_reads_do_not_count_and_an_unknown_action_that_changed_nothing_is_not_a_no_op():
    reads = [step(1, state="A"), step(2, state="A", mutative=False, tool="cat"), step(3, state="B"),
             step(4, state="B", mutative=False), step(5, state="A")]
    (d,) = detect_state_cycles(reads)                        # A, B, A over the mutative steps only
    assert d.evidence["period"] == 2 and d.evidence["matched_position"] == 10
    runs = [step(1, state="A"), step(2, state="A", mutative=None, tool="python"),
            step(3, state="A", mutative=None, tool="python")]
    assert detect_state_cycles(runs) == []                   # a failing script run is how one reproduces a bug
    assert detect_state_cycles([step(1), step(2)]) == []     # no state recorded: nothing to compare


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 40), mutative=st.lists(st.sampled_from([True, False, None]), min_size=40, max_size=40),
       k=st.integers(1, 8), noop=st.integers(1, 4))
def test_property_never_fires_when_every_state_is_distinct(n, mutative, k, noop):
    seq = [step(i, state=f"h{i}", mutative=mutative[i]) for i in range(n)]
    assert detect_state_cycles(seq, WatchdogConfig(max_period=k, noop_min_repeats=noop)) == []


@settings(max_examples=200, deadline=None)
@given(hashes=st.lists(st.sampled_from("abcd"), min_size=0, max_size=30), k=st.integers(1, 6))
def test_property_a_detection_names_the_smallest_period_that_matches(hashes, k):
    seq = states(*hashes)
    for d in detect_state_cycles(seq, WatchdogConfig(max_period=k)):
        t = next(i for i, s in enumerate(seq) if s.position == d.evidence["step_position"])
        p = d.evidence["period"]
        assert 1 <= p <= k and seq[t - p].state_hash == seq[t].state_hash
        assert all(seq[t - q].state_hash != seq[t].state_hash for q in range(1, p))


# --- metrics ----------------------------------------------------------------------------------------------------


def measured(*series: dict) -> list[WatchStep]:
    return [step(i, metrics=m, args={"n": i}) for i, m in enumerate(series)]


def test_stagnation_after_an_epoch_and_its_grace():
    flat = measured(*({"tests_passed": 3} for _ in range(6)))
    (d,) = detect_metric_stagnation(flat)                    # E = 3, grace 1: m_3 vs m_0 and m_4 vs m_1
    assert d.evidence["step_position"] == flat[4].position and d.evidence["epoch"] == 3
    assert len(d.evidence["series"]) == 5
    (d0,) = detect_metric_stagnation(flat, WatchdogConfig(metric_grace=0))
    assert d0.evidence["step_position"] == flat[3].position


def test_improvement_in_one_metric_is_progress_and_direction_matters():
    assert detect_metric_stagnation(measured(*({"tests_passed": v} for v in range(6)))) == []
    fewer_failures = measured(*({"tests_passed": 3, "tests_failed": 9 - v} for v in range(6)))
    assert detect_metric_stagnation(fewer_failures) == []
    more_failures = measured(*({"tests_failed": v} for v in range(6)))
    assert kinds(detect_metric_stagnation(more_failures)) == ["metric_stagnation"]
    lint = measured(*({"lint_findings": 1} for _ in range(5)))
    assert kinds(detect_metric_stagnation(lint)) == ["metric_stagnation"]


def test_oscillation_between_four_and_three_passing_tests():
    osc = measured(*({"tests_passed": v} for v in (4, 3, 4, 3)))
    (d,) = detect_metric_oscillation(osc)
    assert d.evidence["metric"] == "tests_passed" and d.evidence["values"] == [4, 3, 4, 3]
    assert d.position == osc[3].observation_position
    assert detect_metric_oscillation(measured(*({"tests_passed": v} for v in (1, 3, 2, 4)))) == []  # new best
    assert detect_metric_oscillation(measured(*({"tests_passed": v} for v in (1, 2, 3, 4)))) == []


# --- action repetition --------------------------------------------------------------------------------------------

BOOK = {"flight": "HAT001", "payment": "gift_card_1"}


def test_a_failing_call_repeated_back_to_back():
    seq = [step(0, tool="book", args=BOOK, obs="Error: balance too low", error=True, state="S"),
           step(1, tool="book", args=BOOK, obs="Error: balance too low", error=True, state="S")]
    (d,) = detect_action_repetition(seq)
    assert d.position == seq[1].position                      # before its result: a live gate can interrupt
    assert d.evidence["repeat_of"] == seq[0].position and d.evidence["steps_between"] == 0
    assert d.evidence["confirmed_by"] == "same_state" and "balance" in d.evidence["error"]


def test_a_failing_call_repeated_with_other_calls_in_between():
    seq = [step(0, tool="get_reservation", args={"id": "R1"}, mutative=False, obs="{}", state="S"),
           step(1, tool="book", args=BOOK, obs="Error: balance too low", error=True, state="S"),
           step(2, tool="get_reservation", args={"id": "R1"}, mutative=False, obs="{}", state="S"),
           step(3, tool="think", args={"t": "hm"}, mutative=False, obs="", state="S"),
           step(4, tool="book", args=BOOK, obs="Error: balance too low", error=True, state="S"),
           step(5, tool="get_reservation", args={"id": "R1"}, mutative=False, obs="{}", state="S"),
           step(6, tool="book", args=BOOK, obs="Error: balance too low", error=True, state="S")]
    dets = detect_action_repetition(seq)
    assert [d.position for d in dets] == [40, 60]             # the look-ups repeat too, but never failed
    assert dets[0].evidence["steps_between"] == 2
    assert dets[1].evidence["occurrences"] == [10, 40, 60]
    assert [d.position for d in detect_action_repetition(seq, WatchdogConfig(repetition_window=2))] == [60]
    assert detect_action_repetition(seq, WatchdogConfig(repetition_window=1)) == []


def test_no_repetition_without_an_error_or_across_a_fix():
    ok = [step(0, tool="book", args=BOOK, state="S"), step(1, tool="book", args=BOOK, state="S")]
    assert detect_action_repetition(ok) == []
    fixed = [step(0, tool="pytest", args={}, obs="1 failed", error=True, state="A", mutative=None),
             step(1, tool="edit", args={"fix": 1}, state="B"),
             step(2, tool="pytest", args={}, obs="1 passed", state="B", mutative=None)]
    assert detect_action_repetition(fixed) == []              # re-running the test after a fix is the job
    again = fixed[:2] + [step(2, tool="pytest", args={}, obs="1 failed", error=True, state="B", mutative=None)]
    (d,) = detect_action_repetition(again)
    assert d.evidence["confirmed_by"] == "same_error" and d.position == again[2].observation_position


def test_declared_nonces_are_not_part_of_the_signature():
    a = step(0, tool="pay", args={"amount": 5, "request_id": "r-1"}, obs="Error: declined", error=True, state="S")
    b = step(1, tool="pay", args={"amount": 5, "request_id": "r-2"}, obs="Error: declined", error=True, state="S")
    assert kinds(detect_action_repetition([a, b])) == ["action_repetition"]
    assert detect_action_repetition([a, b], WatchdogConfig(nonce_arguments=())) == []


def test_actors_are_kept_apart():
    a = step(0, tool="message:WebSurfer", args={"text": "I clicked 'Go'."}, obs="Error: 404", error=True,
             kind="message", actor="WebSurfer", state="S")
    b = step(1, tool="message:WebSurfer", args={"text": "I clicked 'Go'."}, kind="message", actor="FileSurfer",
             state="S")
    assert detect_action_repetition([a, b]) == []


# --- the same question again -------------------------------------------------------------------------------------


def ask(i: int, text: str, answer: str = "I told you already.") -> WatchStep:
    return step(i, tool="message:agent", args={"text": text}, kind="question", mutative=False, obs=answer,
                text=text)


def test_the_same_question_asked_again_and_again():
    q = "Could you please provide your reservation ID so I can look it up?"
    seq = [ask(0, q), ask(1, "I understand. " + q), ask(2, q)]
    (d,) = detect_repeated_questions(seq)
    assert d.position == seq[2].position and d.evidence["times_asked"] == 3
    assert d.evidence["asked_before"]["positions"] == [0, 10]
    assert detect_repeated_questions(seq[:2]) == []
    assert kinds(detect_repeated_questions(seq[:2], WatchdogConfig(question_min_asks=2))) == ["repeated_question"]


def test_courtesy_offers_subjectless_questions_and_new_confirmations_are_not_repeats():
    courtesy = [ask(i, "Your booking is done. If you need further assistance, please let me know!") for i in range(4)]
    assert detect_repeated_questions(courtesy) == []
    vague = [ask(i, "Would you like me to do that?") for i in range(4)]
    assert detect_repeated_questions(vague) == []
    q = "Do you confirm the change to flight HAT001 on May 20 for $120?"
    changed = [ask(0, q, "yes"), step(1, tool="update_reservation", args={"n": 1}, state="S1"),
               ask(2, q, "yes"), step(3, tool="update_reservation", args={"n": 2}, state="S2"), ask(4, q, "yes")]
    assert detect_repeated_questions(changed) == []
    assert question_sentences("Done. Shall we go on? Please confirm the payment method.") == [
        "Shall we go on?", "Please confirm the payment method."]


# --- entropy collapse and embedding drift -------------------------------------------------------------------------

VARIED = ["The failing test imports the parser before the config module is loaded, so the default path is empty "
          f"and the fixture number {i} never sees the environment variable that names the data directory."
          for i in range(6)]


def test_entropy_collapse_against_the_actors_own_baseline():
    texts = VARIED[:5] + ["try again " * 15]
    seq = [step(i, text=t, args={"n": i}) for i, t in enumerate(texts)]
    (d,) = detect_entropy_collapse(seq)
    assert d.position == seq[5].position and d.evidence["entropy"] < 0.5 * d.evidence["baseline"]
    assert detect_entropy_collapse([step(i, text=t, args={"n": i}) for i, t in enumerate(VARIED)]) == []
    h, n = lexical_entropy("a b c d")
    assert n == 4 and math.isclose(h, 1.0)
    assert lexical_entropy("go go go go")[0] == 0.0


def bag_of_words(texts):
    vocab = sorted({w for t in texts for w in t.lower().split()})
    return [[t.lower().split().count(w) for w in vocab] for t in texts]


def test_embedding_drift_with_an_embedder_and_unavailable_without_one(monkeypatch):
    monkeypatch.delenv("KERNEL_LIB_EMBEDDING_MODEL", raising=False)
    para = ("I will now open the configuration file and change the port setting to the value that the test "
            "expects before running the suite again")
    seq = [step(0, text=para, args={"n": 0}), step(1, text=para.replace("now ", "") + " once more", args={"n": 1})]
    (d,) = detect_embedding_drift(seq, embedder=bag_of_words)
    assert d.kind == "embedding_drift" and d.evidence["similarity"] >= 0.96 and not d.evidence["identical"]
    assert detect_embedding_drift(seq) == []                 # no model installed: no detection, no failure
    status = embedding_status()
    assert not status.available and "KERNEL_LIB_EMBEDDING_MODEL" in status.reason
    assert embedding_status(WatchdogConfig(embedder=bag_of_words)).available
    assert kinds(run_watchdog(seq, WatchdogConfig(embedder=bag_of_words, kinds=("embedding_drift",)))) == [
        "embedding_drift"]


# --- tiers (table 7) and the whole run ----------------------------------------------------------------------------


def test_tiers_climb_within_an_episode_and_start_over_after_a_gap():
    seq = [step(0, tool="book", args=BOOK, obs="Error: x", error=True, state="S")]
    seq += [step(i, tool="book", args=BOOK, obs="Error: x", error=True, state="S") for i in range(1, 6)]
    seq += [step(i, tool="look", args={"n": i}, mutative=False, state="S") for i in range(6, 20)]
    seq += [step(i, tool="book", args=BOOK, obs="Error: x", error=True, state="S") for i in (20, 21)]
    dets = run_watchdog(seq, WatchdogConfig(kinds=("action_repetition",)))
    assert [d.tier for d in dets] == [1, 2, 3, 3, 3, 1]       # a new episode after 14 quiet steps
    assert [d.evidence["alarm"] for d in dets] == [1, 2, 3, 4, 5, 1]


def test_detections_about_one_step_are_one_alarm():
    seq = [step(0, tool="edit", args={"a": 1}, state="A"),
           step(1, tool="submit", args={"f": 1}, obs="Wrong flag!", error=True, state="A"),
           step(2, tool="submit", args={"f": 1}, obs="Wrong flag!", error=True, state="A")]
    dets = run_watchdog(seq)
    assert sorted(kinds(dets)) == ["action_repetition", "state_hash_cycle"]
    assert {d.tier for d in dets} == {1}
    again = assign_tiers(dets, seq)
    assert [d.tier for d in again] == [1, 1] and dets[0].tier == 1


def test_run_watchdog_runs_only_the_kinds_asked_for():
    seq = states("A", "B", "A")
    assert kinds(run_watchdog(seq, WatchdogConfig(kinds=("metric_stagnation",)))) == []
    assert kinds(run_watchdog(seq)) == ["state_hash_cycle"]
    assert set(WatchdogConfig().kinds) == set(DETECTION_KINDS)


@pytest.mark.parametrize("field, value", [
    ("max_period", 0), ("max_period", 2.5), ("max_period", True), ("noop_min_repeats", 0), ("metric_epoch", 0),
    ("metric_grace", -1), ("repetition_window", 0), ("question_similarity", 0.0), ("question_similarity", 1.5),
    ("question_similarity", float("nan")), ("question_min_asks", 1), ("entropy_collapse_ratio", 1.0),
    ("entropy_min_tokens", 1), ("embedding_similarity", -0.1), ("episode_gap_steps", 0),
    ("kinds", ("state_hash_cycle", "heartbeat")), ("kinds", "state_hash_cycle"), ("nonce_arguments", "nonce"),
    ("embedder", 42),
])
def test_a_bad_configuration_is_a_typed_error_naming_the_field(field, value):
    with pytest.raises(WatchdogConfigError) as info:
        WatchdogConfig(**{field: value})
    assert isinstance(info.value, ConfigError) and isinstance(info.value, KernelError)
    assert field.split("_")[0] in str(info.value) or "kind" in str(info.value)


def test_run_watchdog_refuses_something_that_is_not_a_config():
    with pytest.raises(WatchdogConfigError):
        run_watchdog([], {"max_period": 4})


# --- steps folded from our own log ------------------------------------------------------------------------------


def _own_log_flip_flop():
    """A repair agent on a real-looking log of ours: edit line 42 (tree A), run the tests (3 pass),
    revert (tree B), run (4 pass), edit again (tree A), run (3 pass), revert (B), run (4 pass)."""
    from kernel_lib.core.events import ModelReplied, WorkspaceChanged
    from tests.helpers import ev, intent, result, task

    tree = {"A": "a" * 64, "B": "b" * 64, "0": "0" * 64}
    events, seq = [ev(task(), 1)], 1

    def add(payload):
        nonlocal seq
        seq += 1
        events.append(ev(payload, seq))

    current = "0"
    for n, (edit_to, passed) in enumerate([("A", 3), ("B", 4), ("A", 3), ("B", 4)]):
        op_e, op_t = f"edit{n}", f"test{n}"
        add(ModelReplied(invocation_id=f"m{n}", status="complete", reply=f"Changing line 42, attempt {n}.",
                         proposal={"tool_calls": [{"tool": "edit_file"}]}))
        add(intent(op_e, tool="edit_file", arguments={"path": "cfg.py", "line": 42, "to": edit_to},
                   repeat_contract="unsafe"))
        add(result(op_e, outcome={"written": "cfg.py"}))
        add(WorkspaceChanged(change_id=f"c{n}", base_tree_sha256=tree[current], result_tree_sha256=tree[edit_to],
                             delta_sha256="d" * 64, operation_id=op_e, files_written=1))
        current = edit_to
        add(intent(op_t, tool="run_tests", arguments={"snapshot": "ws"}, repeat_contract="read_only"))
        add(result(op_t, outcome={"passed": passed, "failed": 5 - passed}))
    return events


def test_steps_of_our_own_log_carry_workspace_trees_metrics_and_model_text():
    from kernel_lib.recovery.watchdog.steps import watch_steps

    steps = watch_steps(_own_log_flip_flop())
    assert [s.tool for s in steps] == ["edit_file", "run_tests"] * 4
    assert all(s.state_source == "workspace" for s in steps)
    assert [s.state_hash[0] for s in steps] == list("AABBAABB".lower())
    assert [s.mutative for s in steps] == [True, False] * 4     # a writing verb; tests declared read_only
    assert [s.metrics.get("tests_passed") for s in steps[1::2]] == [3, 4, 3, 4]
    assert steps[0].model_text.startswith("Changing line 42")
    dets = run_watchdog(steps)
    cycles = [d for d in dets if d.kind == "state_hash_cycle"]
    assert [d.evidence["period"] for d in cycles] == [2, 2]
    assert cycles[0].evidence["state_source"] == "workspace"
    assert any(d.kind == "metric_oscillation" for d in dets)
    assert [d.tier for d in dets] == sorted(d.tier for d in dets)


def test_a_growing_log_folded_event_by_event_gives_the_steps_of_each_prefix():
    """The first step is folded before any tree is recorded (its state then comes from what the
    log reveals); once trees arrive, every step's state must be what the one-pass fold says."""
    from kernel_lib.recovery.watchdog.steps import StepFold, watch_steps
    from tests.helpers import ev, intent, result

    flip_flop = _own_log_flip_flop()
    first = [flip_flop[0], ev(intent("branch", tool="create_branch", arguments={"name": "fix"}), 2),
             ev(result("branch", outcome={"branch_id": "b-1"}), 3)]   # a change the log only reveals
    events = first + [ev(e.payload, e.sequence_number + 2) for e in flip_flop[1:]]
    assert watch_steps(events)[0].state_hash is None   # no tree before the next step: no state
    fold = StepFold()
    for i in range(len(events)):
        fold.add(events[i:i + 1])
        assert fold.steps() == watch_steps(events[:i + 1]), i
    assert fold.add(events).steps() == watch_steps(events)   # events already folded are skipped


def test_a_retried_attempt_is_the_same_step_and_its_result_replaces_an_error():
    """A crash left attempt 1 in doubt (intent, no result) or a transient failure made the runtime
    try again: the operation is still one action, observed by its final result."""
    from kernel_lib.recovery.watchdog.steps import watch_steps
    from tests.helpers import ev, intent, result, task

    edit = {"tool": "edit_file", "arguments": {"path": "cfg.py", "to": "A"}, "repeat_contract": "idempotent"}
    events = [ev(task(), 1), ev(intent("e1", "a1", **edit), 2),                      # in doubt: no result
              ev(intent("e1", "a2", **edit), 3), ev(result("e1", "a2", outcome={"written": 1}), 4),
              ev(intent("e2", "a1", **edit), 5), ev(result("e2", "a1", status="timeout"), 6),
              ev(intent("e2", "a2", **edit), 7), ev(result("e2", "a2", outcome={"written": 1}), 8),
              ev(intent("e3", "a1", **edit), 9), ev(result("e3", "a1", outcome={"written": 1}), 10),
              ev(result("e3", "a2", status="failed", outcome={"error": "late"}), 11)]
    steps = watch_steps(events)
    assert [(s.position, s.observation_position, s.observation_error) for s in steps] == [
        (2, 4, False), (5, 8, False), (9, 10, False)]   # a success is not replaced by a later error


def test_the_package_exports_every_public_name_of_its_modules_and_loads_none_of_them():
    import importlib
    import re
    import subprocess
    import sys
    from pathlib import Path

    import kernel_lib.recovery.watchdog as wd

    folder = Path(wd.__file__).parent
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    for name in modules:
        mod = importlib.import_module(f"kernel_lib.recovery.watchdog.{name}")
        assert f"``{name}``" in wd.__doc__, f"the package docstring does not name {name}"
        for public in mod.__all__:
            assert public in wd.__all__ and getattr(wd, public) is getattr(mod, public), (name, public)
    named = set(re.findall(r"^\* ``(\w+)``", wd.__doc__, re.MULTILINE))
    assert named == set(modules), named ^ set(modules)   # no module named that does not exist
    import os

    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    probe = "import json, sys, kernel_lib.recovery.watchdog; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                                       env=env).stdout)
    heavy = [m for m in loaded if m.startswith(("kernel_lib.recovery.watchdog.", "kernel_lib.core", "kernel_lib.log",
                                                "kernel_lib.checkpoint")) or m.split(".")[0] in
             ("pydantic", "rfc8785", "xxhash", "polars", "inotify_simple")]
    assert "kernel_lib.recovery.watchdog" in loaded and not heavy, heavy


def test_steps_of_an_imported_openai_message_log(tmp_path):
    from kernel_lib.importers import import_file
    from kernel_lib.recovery.watchdog.steps import watch_steps

    def call(cid, name, args):
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    msgs = [{"role": "user", "content": "Please fix the failing test."},
            {"role": "assistant", "content": "Running the tests.", "tool_calls": [call("c1", "run_tests", {})]},
            {"role": "tool", "tool_call_id": "c1", "content": "===== 1 failed, 4 passed in 0.12s ====="},
            {"role": "assistant", "content": "", "tool_calls": [call("c2", "edit_file", {"path": "a.py"})]},
            {"role": "tool", "tool_call_id": "c2", "content": "Error: a.py is read-only"},
            {"role": "assistant", "content": "", "tool_calls": [call("c3", "edit_file", {"path": "a.py"})]},
            {"role": "tool", "tool_call_id": "c3", "content": "Error: a.py is read-only"},
            {"role": "assistant", "content": "Which file should I edit instead?"},
            {"role": "user", "content": "b.py"}]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"messages": msgs}))
    steps = watch_steps(import_file("openai-messages", path).events)
    assert [s.kind for s in steps] == ["tool", "tool", "tool", "question"]
    assert steps[0].metrics == {"tests_passed": 4.0, "tests_failed": 1.0, "tests_errors": 0.0}
    assert steps[0].model_text == "Running the tests." and steps[0].mutative is None
    assert [s.observation_error for s in steps] == [False, True, True, False]
    assert steps[3].observation == "b.py" and all(s.state_source == "log" for s in steps)
    (rep,) = [d for d in run_watchdog(steps) if d.kind == "action_repetition"]
    assert rep.position == steps[2].position and rep.tier == 1


@pytest.mark.parametrize("tool, args, contract, expected", [
    ("get_user_details", {"user_id": "u1"}, "unsafe", False),
    ("book_reservation", {}, "unsafe", True),
    ("run_tests", {}, "read_only", False),
    ("run_tests", {}, "unsafe", None),
    ("cat", {"command": "cat a.py\n"}, "unsafe", False),
    ("cat", {"command": "cat a.py > b.py\n"}, "unsafe", True),
    ("echo", {"command": "echo 'x' | base64 -d\n"}, "unsafe", False),
    ("git", {"command": "git diff\n"}, "unsafe", False),
    ("git", {"command": "git checkout -- a.py\n"}, "unsafe", True),
    ("sed", {"command": "sed -i 's/a/b/' a.py\n"}, "unsafe", True),
    ("edit", {"command": "edit 1:2\nx\nend_of_edit\n"}, "unsafe", True),
    ("python", {"command": "python reproduce.py\n"}, "unsafe", None),
])
def test_what_counts_as_mutative(tool, args, contract, expected):
    from kernel_lib.recovery.watchdog.steps import is_mutative
    assert is_mutative(tool, args, contract) is expected


def test_metrics_read_from_text():
    from kernel_lib.recovery.watchdog.steps import metrics_from_text
    assert metrics_from_text("collected 9 items\n...\n===== 2 failed, 7 passed, 1 error in 1.05s =====\n") == {
        "tests_passed": 7.0, "tests_failed": 2.0, "tests_errors": 1.0}
    assert metrics_from_text("3 passed, 0 failed\n") == {"tests_passed": 3.0, "tests_failed": 0.0,
                                                          "tests_errors": 0.0}
    lint = "Your proposed edit has introduced new syntax error(s).\n\nERRORS:\n- E999 SyntaxError: x\n- F821 y\n"
    assert metrics_from_text(lint) == {"lint_findings": 2.0}
    assert metrics_from_text("src/a.c:12:5: error: expected ';'\nsrc/a.c:20:1: error: x\n") == {"compiler_errors": 2.0}
    assert metrics_from_text("All good, I passed the test of time.") == {}


# --- the baselines on constructed sequences -----------------------------------------------------------------------


def call(i, tool="edit", args=None, obs="same output", error=False, thought="", kind="tool"):
    return step(i, tool=tool, args=args if args is not None else {"a": 1}, obs=obs, error=error, text=thought,
                kind=kind)


def test_openhands_same_action_and_observation_four_times():
    from kernel_lib.recovery.watchdog.baselines import openhands_detections
    four = [call(i) for i in range(4)]
    (d,) = openhands_detections(four)
    assert d.kind == "openhands.repeating_action_observation" and d.position == four[3].observation_position
    assert d.evidence["occurrences"] == [0, 10, 20, 30] and d.tier is None and d.detector == "openhands"
    assert openhands_detections(four[:3]) == []


def test_openhands_same_action_with_errors_three_times_and_the_thought_counts():
    from kernel_lib.recovery.watchdog.baselines import openhands_detections
    three = [call(i, obs="Error: x", error=True) for i in range(3)]
    (d,) = openhands_detections(three)
    assert d.kind == "openhands.repeating_action_error" and d.position == three[2].observation_position
    varied = [call(i, obs="Error: x", error=True, thought=f"attempt {i}") for i in range(3)]
    assert openhands_detections(varied) == []                                  # as shipped: thoughts differ
    assert [d.kind for d in openhands_detections(varied, compare_thought=False)] == [
        "openhands.repeating_action_error"]
    interleaved = [call(0, obs="Error: x", error=True), call(1, tool="think", obs=""),
                   call(2, obs="Error: x", error=True), call(3, tool="think", obs=""),
                   call(4, obs="Error: x", error=True)]
    assert openhands_detections(interleaved) == []                             # look-ups between: missed


def test_openhands_alternation_monologue_and_empty_replies():
    from kernel_lib.recovery.watchdog.baselines import openhands_detections
    abab = [call(i, tool="ab"[i % 2], obs="ab"[i % 2]) for i in range(6)]
    assert [d.kind for d in openhands_detections(abab)] == ["openhands.alternating_pattern"]
    said = [step(i, kind="message", tool="message:agent", args={"text": "I will fix it."}, obs=None,
                 mutative=False) for i in range(3)]
    assert [d.kind for d in openhands_detections(said)] == ["openhands.monologue"]
    empty = [step(i, kind="message", tool="message:agent", args={"text": ""}, obs=None, mutative=False)
             for i in range(3)]
    assert "openhands.empty_response" in [d.kind for d in openhands_detections(empty)]


def test_openhands_interactive_mode_looks_only_after_the_users_last_message():
    from kernel_lib.recovery.watchdog.baselines import openhands_detections
    seq = [call(0, obs="Error: x", error=True), call(1, obs="Error: x", error=True),
           ask(2, "Could you share the booking reference for the trip?"), call(3, obs="Error: x", error=True),
           call(4, obs="Error: x", error=True)]
    assert openhands_detections(seq) == [] and openhands_detections(seq, headless=True) == []
    (d,) = openhands_detections(seq + [call(5, obs="Error: x", error=True)])
    assert d.evidence["mode"] == "interactive" and d.evidence["occurrences"] == [30, 40, 50]
    assert openhands_detections([call(i, obs="Error: x", error=True) for i in range(3)])[0].evidence["mode"] == \
        "headless"


def test_gemini_same_tool_call_five_times_in_a_row_then_latched_until_the_next_prompt():
    from kernel_lib.recovery.watchdog.baselines import gemini_detections
    five = [call(i) for i in range(7)]
    (d,) = gemini_detections(five)                                  # latched after the first
    assert d.kind == "gemini.tool_call_loop" and d.position == five[4].position and d.evidence["repeats"] == 5
    assert gemini_detections(five[:4]) == []
    broken = five[:3] + [call(3, tool="think")] + [call(i) for i in range(4, 8)]
    assert gemini_detections(broken) == []
    reset = five[:5] + [ask(5, "Shall I keep retrying the same edit on the file?")] + [call(i) for i in range(6, 11)]
    assert [d.position for d in gemini_detections(reset)] == [40, 100]


def test_gemini_content_chanting_outside_code_blocks():
    from kernel_lib.recovery.watchdog.baselines import gemini_detections
    chant = "I need to check the configuration file again. " * 30
    (d,) = gemini_detections([step(0, kind="message", tool="message:agent", args={"text": chant}, obs=None,
                                   mutative=False)])
    assert d.kind == "gemini.content_chanting" and d.evidence["chunk"] in chant
    fenced = "```\n" + chant + "\n```\n"
    assert gemini_detections([step(0, kind="message", tool="message:agent", args={"text": fenced}, obs=None,
                                   mutative=False)]) == []
    assert gemini_detections([step(0, kind="message", tool="message:agent", args={"text": VARIED[0] * 1},
                                   obs=None, mutative=False)]) == []


def test_an_unknown_baseline_is_a_typed_error():
    from kernel_lib.recovery.watchdog.baselines import run_baseline
    with pytest.raises(WatchdogConfigError, match="openhands, gemini"):
        run_baseline("langgraph", [])


@settings(max_examples=150, deadline=None)
@given(tools=st.lists(st.sampled_from(["a", "b", "c"]), max_size=25),
       errors=st.lists(st.booleans(), min_size=25, max_size=25))
def test_property_repetition_needs_an_earlier_error_of_the_same_call(tools, errors):
    seq = [step(i, tool=t, args={}, obs="Error: no" if errors[i] else "fine", error=errors[i], state="S")
           for i, t in enumerate(tools)]
    dets = detect_action_repetition(seq)
    for d in dets:
        before = next(s for s in seq if s.position == d.evidence["repeat_of"])
        now = next(s for s in seq if s.position == d.evidence["step_position"])
        assert before.tool == now.tool and before.observation_error and before.position < now.position
    if not any(errors):
        assert dets == []
    tiers = [d.tier for d in run_watchdog(seq, WatchdogConfig(kinds=("action_repetition",)))]
    assert all(t in (1, 2, 3) for t in tiers)
