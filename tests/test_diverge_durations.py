"""Durations and configuration evidence in locating a divergence (§11.7; issue 14).

Fault model: (1) two runs that did the same thing at different speeds: the importers keep a
source's per-step run time (the SWE-agent importer writes ``execution_time_s`` into a tool
result's outcome), and ``diverge --ignore-timestamps`` did not drop it although its ``--help``
said "execution_time", so two runs equal but for their run times "diverged" at a tool result.
(2) A first divergence explained by a configuration difference (a long prompt template, a model
name, a decoding parameter) whose values the report cut to 80 characters or left out after six
lines, so the report could not show the difference that explains the divergence.
Invariant: keys that name durations (:data:`DURATION_KEY`) are dropped by their own declared
option, ``Equivalence(ignore_durations=True)`` / ``--ignore-durations``, and by nothing else;
everything else still compares. Every differing configuration value (supporting evidence, a
model call's ``request``) appears in the report complete, on both sides.
Goal: two logs that differ only in ``execution_time_s`` are equivalent under ``--ignore-durations``
and diverge without it; the report of a configuration-caused divergence shows the configuration
difference in full.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.cli import main as kernel_main
from kernel_lib.core.events import ContextBuilt, Event, ModelReplied, RuntimeInput, TaskStarted, ToolResult
from kernel_lib.history.diverge import DURATION_KEY, TIMESTAMP_KEY, Equivalence, is_duration_key, locate_divergence

SWE = Path("/work/shared/data/trajectories/swe-agent")
TIMED = SWE / "sweagenttestrepo-1c2844.traj"     # a real SWE-agent run whose steps record execution_time
PAIR = (SWE / "marshmallow-1867__default_sys-env_window100.traj", SWE / "marshmallow-1867__xml_sys-env_window100.traj")

needs_data = pytest.mark.skipif(not TIMED.exists(), reason="the shared SWE-agent trajectories are not available")


@lru_cache(maxsize=None)
def _imported(path: Path) -> tuple[Event, ...]:
    from kernel_lib.importers import import_file
    return tuple(import_file("swe-agent", path).events)


def _rebuilt(events, change):
    """The log with each ToolResult outcome passed through ``change(outcome, index)``."""
    out, k = [], 0
    for e in events:
        p = e.payload
        if isinstance(p, ToolResult):
            p = p.model_copy(update={"outcome": change(dict(p.outcome), k)})
            k += 1
        out.append(Event.create(trajectory_id=e.trajectory_id, event_id=e.event_id, sequence_number=e.sequence_number,
                                payload=p, owner_epoch=e.owner_epoch, control_epoch=e.control_epoch,
                                provenance=e.provenance, reducer_version=e.reducer_version))
    return out


def _write(path: Path, events) -> str:
    path.write_bytes(b"".join(e.canonical + b"\n" for e in events))
    return str(path)


# --- (1) durations ------------------------------------------------------------------------------

@needs_data
def test_two_real_runs_differing_only_in_execution_time_diverge_unless_durations_are_ignored(tmp_path, capsys):
    a = list(_imported(TIMED))
    timed = [e.payload.outcome["execution_time_s"] for e in a if isinstance(e.payload, ToolResult)]
    assert len(timed) >= 2                       # the real file records run times
    b = _rebuilt(a, lambda o, k: {**o, "execution_time_s": o["execution_time_s"] * 3 + 0.5})
    plain = locate_divergence(a, b)
    assert plain.diverged and plain.first_mismatch.event_type == "ToolResult"
    assert plain.first_mismatch.diff == [f"outcome.execution_time_s: A {timed[0]} vs B {timed[0] * 3 + 0.5}"]
    assert any("--ignore-durations" in s for s in plain.establishes)      # the report says how to declare it
    assert locate_divergence(a, b, Equivalence(ignore_timestamps=True)).diverged   # a duration is not a timestamp
    rep = locate_divergence(a, b, Equivalence(ignore_durations=True))
    assert not rep.diverged and rep.first_mismatch is None
    # the CLI: exit 1 without the flag, 0 with it; --help names the option and the importer's key
    pa, pb = _write(tmp_path / "a.jsonl", a), _write(tmp_path / "b.jsonl", b)
    assert kernel_main(["diverge", pa, pb, "--ignore-timestamps"]) == 1
    assert kernel_main(["diverge", pa, pb, "--ignore-durations", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["equivalence"]["options"]["ignore_durations"] is True and out["first_mismatch"] is None
    with pytest.raises(SystemExit):
        kernel_main(["diverge", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert "--ignore-durations" in helptext and "execution_time_s" in helptext
    assert "Durations are NOT dropped" in helptext


_DURATIONS = st.sampled_from(["execution_time_s", "duration_ms", "latency_s", "elapsed", "wall_time_s",
                              "durationMs", "step_duration_s", "time_taken"])
_SECONDS = st.floats(0, 1e4, allow_nan=False)


@needs_data
@settings(max_examples=40, deadline=None)
@given(key=_DURATIONS, times=st.lists(st.tuples(_SECONDS, _SECONDS), min_size=1, max_size=8),
       other=st.booleans())
def test_ignore_durations_drops_exactly_the_durations(key, times, other):
    a0 = list(_imported(TIMED))
    n = sum(isinstance(e.payload, ToolResult) for e in a0)
    t = (times * n)[:n]

    def with_time(side):
        def change(o, k):
            o.pop("execution_time_s", None)
            o[key] = t[k][side]
            if other and side == 1 and k == n - 1:
                o["state"] = {**o["state"], "open_file": "elsewhere.py"}   # a real difference, not a duration
            return o
        return change
    a, b = _rebuilt(a0, with_time(0)), _rebuilt(a0, with_time(1))
    differs_in_time = any(x != y for x, y in t)
    assert locate_divergence(a, b).diverged == (differs_in_time or other)
    rep = locate_divergence(a, b, Equivalence(ignore_durations=True))
    assert rep.diverged == other                     # the flag never hides a non-duration difference
    if other:
        assert rep.first_mismatch.diff[0].startswith("outcome.state.open_file")


def test_duration_and_timestamp_keys_are_disjoint():
    for k in ("execution_time_s", "execution_time", "duration_s", "latency_ms", "elapsed_s", "wall_time"):
        assert is_duration_key(k) and DURATION_KEY.fullmatch(k)
    for k in ("created_at", "timestamp", "deadline_unix_s", "start_time"):
        assert not is_duration_key(k) and TIMESTAMP_KEY.fullmatch(k)
    for k in ("timeout_s", "max_wait", "runtime", "state", "passed"):
        assert not is_duration_key(k)
    eq = Equivalence(ignore_timestamps=True)
    assert eq.normalize("ToolResult", {"outcome": {"execution_time": 1, "created_at": 2}}) == \
        {"outcome": {"execution_time": 1}}
    assert Equivalence(ignore_durations=True).normalize(
        "ToolResult", {"outcome": {"execution_time": 1, "created_at": 2}}) == {"outcome": {"created_at": 2}}


def test_camel_case_and_unit_suffixed_keys_are_classified_like_their_snake_case_spelling():
    """Fault: an importer or another runtime spells its keys ``elapsedTime``, ``createdAt`` or
    ``response_time_ms``. Invariant: a key's class (duration, point in time, neither) does not depend
    on its spelling. Goal: --ignore-durations drops the lengths, --ignore-timestamps the points."""
    for k in ("elapsedTime", "executionTime", "durationMs", "response_time_ms", "responseTime", "wallclock_s",
              "runtime_s", "took_ms"):
        assert is_duration_key(k), k
    for k in ("runtime", "timeout_s", "timeoutMs", "maxWait", "state", "format"):
        assert not is_duration_key(k), k
    eq = Equivalence(ignore_timestamps=True)
    assert eq.normalize("ToolResult", {"outcome": {"createdAt": 1, "startedAt": 2, "endTime": 3, "elapsedTime": 4,
                                                   "format": "x"}}) == \
        {"outcome": {"elapsedTime": 4, "format": "x"}}
    assert Equivalence(ignore_durations=True).normalize(
        "ToolResult", {"outcome": {"createdAt": 1, "elapsedTime": 4, "response_time_ms": 5}}) == \
        {"outcome": {"createdAt": 1}}


# --- (2) configuration evidence in full -----------------------------------------------------------

def _events(payloads, run):
    return [Event.create(trajectory_id="traj_cfg", event_id=f"{run}-{i}", sequence_number=i, payload=p)
            for i, p in enumerate(payloads, start=1)]


# one-line values (no line breaks of any kind: those are shown as a line diff instead)
_LONG = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")), min_size=200,
                max_size=600)
_TAIL = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=30)


@settings(max_examples=30, deadline=None)
@given(prefix=_LONG, tail_a=_TAIL, tail_b=_TAIL, model_a=_LONG, model_b=_LONG)
def test_a_configuration_difference_is_shown_in_full(prefix, tail_a, tail_b, model_a, model_b):
    """Long configuration values (a system template in the recorded run configuration, a long
    model name and system prompt in the request): the report holds each complete value."""
    if tail_a == tail_b or model_a == model_b:
        return
    tmpl_a, tmpl_b = prefix + tail_a, prefix + tail_b
    sys_a, sys_b = "You are careful. " * 20 + tail_a, "You are careful. " * 20 + tail_b

    def log(run, tmpl, model, system):
        text = "fix the bug"
        import hashlib
        return _events([
            TaskStarted(task_id="t", requester="r", objective="o", grant_ids=[], budget_ceiling_usd=1.0,
                        finalization_reserve_usd=0.0),
            RuntimeInput(kind="config", name="harness:templates", value={"system_template": tmpl, "window": 100}),
            ContextBuilt(invocation_id="inv1", model=model, delivered_input=text,
                         delivered_input_sha256=hashlib.sha256(text.encode()).hexdigest(),
                         request_config={"temperature": 0.0, "system": system}),
            ModelReplied(invocation_id="inv1", status="complete", reply="ok", input_tokens=1, output_tokens=1),
        ], run)
    rep = locate_divergence(log("A", tmpl_a, model_a, sys_a), log("B", tmpl_b, model_b, sys_b))
    fm = rep.first_mismatch
    assert fm is not None and fm.event_type == "ModelReplied" and "request" in fm.differing_fields
    got = {d["path"]: (d["a"], d["b"]) for d in fm.to_dict()["config_differences"]}
    assert got["request.model"] == (model_a, model_b)
    assert got["request.request_config.system"] == (sys_a, sys_b)
    d = rep.to_dict()
    assert d["first_mismatch"]["a_value"]["request"]["model"] == model_a       # not clipped
    ctx = next(c for c in d["context_differences"] if c["item"] == "RuntimeInput config/harness:templates")
    assert {x["path"]: (x["a"], x["b"]) for x in ctx["differences"]} == {"value.system_template": (tmpl_a, tmpl_b)}
    text = rep.summary()
    for whole in (model_a, model_b, sys_a, sys_b, tmpl_a, tmpl_b):   # the diff lines carry the whole values
        assert repr(whole) in text
    assert any("RuntimeInput config/harness:templates: value.system_template" in s for s in rep.establishes)


@pytest.mark.skipif(not PAIR[0].exists(), reason="the shared SWE-agent trajectories are not available")
def test_the_real_pair_shows_the_template_difference_that_explains_its_first_divergence():
    """The two real SWE-agent runs of marshmallow-1867 differ in their system template (commands
    in ``` fences vs <command> tags) and parser; the first mismatch is the delivered input, and the
    supporting evidence must show that template difference, not only the differing file names."""
    a, b = (list(_imported(p)) for p in PAIR)
    rep = locate_divergence(a, b)
    assert rep.first_mismatch.event_type == "ContextBuilt"
    src = next(c for c in rep.context_differences if c["item"] == "RuntimeInput config/import:source")
    full = {x["path"]: (x["a"], x["b"]) for x in src["differences"]}
    cfg_a, cfg_b = (next(e.payload.value for e in log if isinstance(e.payload, RuntimeInput)
                         and e.payload.name == "import:source") for log in (a, b))
    t = "value.notes.replay_config.agent.templates.system_template"
    assert full[t] == (cfg_a["notes"]["replay_config"]["agent"]["templates"]["system_template"],
                       cfg_b["notes"]["replay_config"]["agent"]["templates"]["system_template"])
    parser = "value.notes.replay_config.agent.tools.parse_function.type"
    assert full[parser] == ("thought_action", "xml_thought_action")
    text = rep.summary()
    assert "+<command>" in text and "-```" in text and "xml_thought_action" in text
