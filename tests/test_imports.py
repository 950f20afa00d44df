"""Importers of other agents' recorded trajectories (kernel_lib.importers; §11.6, §11.7, table 1).

The real files are read in place from ../shared/data/trajectories/ (never copied into the
project); tests that need them skip, with the reason, when that directory is absent. Counts are
taken from the raw JSON here, independently of the importers.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import random
import shutil
from functools import cache
from pathlib import Path

import pytest

from kernel_lib.log import load_events
from kernel_lib.cli import main as kernel_main
from kernel_lib.errors import KernelError
from kernel_lib.importers import (
    ALWAYS_LACKS,
    FORMATS,
    LACKS,
    NOT_RECORDED,
    ImportFormatError,
    ImportResult,
    UnknownImportFormatError,
    import_file,
)
from kernel_lib.importers._common import canonical_text
from kernel_lib.cli.importers import add_commands as add_cli
from kernel_lib.cli import main as _kernel_main
from kernel_lib.core.record import fold, initial_record


def import_main(argv):
    """The `import` command (the tests name it with or without the leading word)."""
    return _kernel_main(argv if argv[:1] == ["import"] else ["import", *argv])

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TRAJ = DATA / "trajectories"
ABSENT = f"real trajectories not found at {TRAJ} (the shared data directory beside the project)"

#: folder glob → format
LAYOUT = (("swe-agent", "*.traj", "swe-agent"), ("tau-bench*", "*.json", "tau-bench"),
          ("who-and-when*", "*.json", "who-and-when"))


def _real_files() -> list:
    if not TRAJ.is_dir():
        return [pytest.param(None, None, marks=pytest.mark.skip(reason=ABSENT), id="no-data")]
    out = []
    for folder, pattern, fmt in LAYOUT:
        for d in sorted(TRAJ.glob(folder)):
            for f in sorted(d.glob(pattern)):
                out.append(pytest.param(fmt, f, id=f"{fmt}/{f.name}"))
    return out or [pytest.param(None, None, marks=pytest.mark.skip(reason=f"no trajectory files under {TRAJ}"),
                                id="no-files")]


REAL = _real_files()


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not found ({ABSENT})")
    return path


@cache
def _imported(fmt: str, path: Path) -> ImportResult:
    return import_file(fmt, path)


def _of(r: ImportResult, event_type: str) -> list:
    return [e for e in r.events if e.event_type == event_type]


# ------------------------------------------------------------------------------------------------
# independent counts from the raw JSON
# ------------------------------------------------------------------------------------------------


def _expected_counts(fmt: str, raw) -> dict[str, int]:
    if fmt == "swe-agent":
        steps = raw.get("trajectory") or []
        if steps:   # one step = one model turn; a non-empty action is one call, answered by its observation
            calls = sum(1 for s in steps if s["action"].strip())
            return {"model_turns": len(steps), "tool_calls": calls, "tool_results": calls}
        turns = [m for m in raw["history"] if m["role"] == "assistant" and not m.get("is_demo")]
        calls = sum(len(m.get("tool_calls") or []) or (1 if (m.get("action") or "").strip() else 0) for m in turns)
        results = sum(1 for m in raw["history"] if m["role"] == "tool")
        return {"model_turns": len(turns), "tool_calls": calls, "tool_results": results}
    if fmt == "tau-bench":
        msgs = raw["traj"]
        return {"model_turns": sum(m["role"] == "assistant" for m in msgs),
                "tool_calls": sum(len(m.get("tool_calls") or []) for m in msgs),
                "tool_results": sum(m["role"] == "tool" for m in msgs),
                "inputs": sum(m["role"] not in ("assistant", "tool") for m in msgs)}
    if fmt == "who-and-when":
        h = raw["history"]
        agent = [m for m in h if m["role"].lower() not in ("human", "user", "system")
                 and (m.get("name") or "").lower() != "computer_terminal"]
        return {"model_turns": len(agent), "tool_calls": 0, "tool_results": 0, "inputs": len(h) - len(agent)}
    raise AssertionError(fmt)


# ------------------------------------------------------------------------------------------------
# every real file
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt,path", REAL)
def test_real_file_imports_folds_and_keeps_counts(fmt, path):
    raw = json.loads(path.read_bytes())
    r = _imported(fmt, path)
    c = r.counts
    for k, v in _expected_counts(fmt, raw).items():
        assert c[k] == v, (k, c, path.name)
    assert len(_of(r, "ModelReplied")) == c["model_turns"]
    assert [e.sequence_number for e in r.events] == list(range(1, len(r.events) + 1))
    assert len({e.event_id for e in r.events}) == len(r.events)
    assert {e.trajectory_id for e in r.events} == {r.trajectory_id}

    # the header says what is missing
    assert r.events[0].event_type == "TaskStarted"
    head = r.events[1].payload
    assert (r.events[1].event_type, head.kind, head.name) == ("RuntimeInput", "config", "import:source")
    assert head.value["lacks"] == r.lacks == sorted(set(r.lacks))
    assert set(ALWAYS_LACKS) <= set(r.lacks) and set(r.lacks) <= set(LACKS)
    assert head.value["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() == r.source["sha256"]
    assert head.value["file"] == path.name and head.value["format"] == fmt

    # the fold: no reservations, no epochs, nothing in doubt (every recorded call has its observation)
    rec = fold(initial_record(r.trajectory_id), r.events)
    assert rec.last_sequence_number == len(r.events)
    assert rec.budget.reservations == {} and rec.budget.outstanding_reservations_usd == 0
    assert rec.owner_epoch == 0 and rec.control_epoch == 0
    assert all(e.owner_epoch == 0 and e.control_epoch == 0 for e in r.events)
    assert rec.decisions == {} and not _of(r, "Authorized") and not _of(r, "BudgetReserved")
    assert rec.in_doubt() == [] and rec.attempts_in_doubt() == []
    tools = [op for op in rec.operations.values() if op.kind == "tool"]
    models = [op for op in rec.operations.values() if op.kind == "model"]
    assert len(tools) == c["tool_calls"] and len(models) == c["model_turns"]
    for op in tools:
        assert op.status == "established" and not op.intent_missing
        assert op.repeat_contract == "unsafe"
        assert op.authorization_ref == op.reservation_id == NOT_RECORDED
    assert all(op.status == "established" for op in models)
    for e in _of(r, "ToolIntent"):
        assert e.payload.grant_id == NOT_RECORDED


@pytest.mark.parametrize("fmt,path", REAL)
def test_real_file_import_is_deterministic(fmt, path):
    a = _imported(fmt, path)
    b = import_file(fmt, path)
    assert [e.digest for e in a.events] == [e.digest for e in b.events]
    assert a.to_jsonl() == b.to_jsonl() and a.trajectory_id == b.trajectory_id and a.notes == b.notes


def test_import_does_not_depend_on_where_the_file_lies(tmp_path):
    src = _need(TRAJ / "swe-agent" / "sweagenttestrepo-1c2844.traj")
    shutil.copyfile(src, tmp_path / src.name)   # a scratch copy outside the project
    a, b = import_file("swe-agent", src), import_file("swe-agent", tmp_path / src.name)
    assert [e.digest for e in a.events] == [e.digest for e in b.events]


# ------------------------------------------------------------------------------------------------
# what each reader keeps
# ------------------------------------------------------------------------------------------------


def test_tau_bench_keeps_messages_calls_observations_and_errors():
    path = _need(TRAJ / "tau-bench-airline" / "task08_trial1.json")
    raw = json.loads(path.read_bytes())
    r = import_file("tau-bench", path)
    msgs = raw["traj"]
    assert "redacted" not in r.notes
    for e in _of(r, "ContextBuilt"):   # delivered input = the messages before the turn
        i = int(e.payload.invocation_id.removeprefix("turn-"))
        assert msgs[i]["role"] == "assistant"
        assert e.payload.delivered_input == canonical_text({"messages": msgs[:i]})
        assert e.payload.delivered_input_sha256 == hashlib.sha256(e.payload.delivered_input.encode()).hexdigest()
    intents = {e.payload.operation_id: e.payload for e in _of(r, "ToolIntent")}
    for i, m in enumerate(msgs):
        for k, tc in enumerate(m.get("tool_calls") or []):
            p = intents[f"call-{i:04d}" if k == 0 else f"call-{i:04d}.{k}"]
            assert (p.tool, p.arguments) == (tc["function"]["name"], json.loads(tc["function"]["arguments"]))
    results = _of(r, "ToolResult")
    tool_msgs = [m for m in msgs if m["role"] == "tool"]
    assert [e.payload.outcome["observation"] for e in results] == [m["content"] for m in tool_msgs]
    failed = [e for e in results if e.payload.status == "failed"]
    assert len(failed) == sum(m["content"].startswith("Error:") for m in tool_msgs) == 3
    # repeated source call ids (this file reuses some) still pair each result with its own call
    assert [e.payload.operation_id for e in results] == [
        f"call-{i:04d}" for i, m in enumerate(msgs) if m.get("tool_calls")]
    # the evaluator's data stays out of the events
    assert r.notes["reward"] == raw["reward"] and r.notes["user_simulator"]["cost_usd"] == raw["info"]["user_cost"]
    assert not _of(r, "BudgetSettled") and "cost" in r.lacks and "model-provenance" in r.lacks
    end = _of(r, "ControlChanged")
    assert len(end) == 1 and end[0].payload.to_state == "COMPLETED" and "reward 0.0" in end[0].payload.reason
    task = r.events[0].payload
    assert task.requester == raw["info"]["task"]["user_id"] and task.objective == msgs[1]["content"]


def test_swe_agent_keeps_steps_history_and_cost():
    path = _need(TRAJ / "swe-agent" / "pydicom__pydicom-1458.traj")
    raw = json.loads(path.read_bytes())
    r = import_file("swe-agent", path)
    steps, hist = raw["trajectory"], raw["history"]
    turns = [j for j, m in enumerate(hist) if m["role"] == "assistant" and not m.get("is_demo")]
    for k, e in enumerate(_of(r, "ContextBuilt")):
        assert e.payload.invocation_id == f"turn-{k:04d}"
        assert e.payload.delivered_input == canonical_text({"messages": hist[:turns[k]]})
    for k, e in enumerate(_of(r, "ToolIntent")):
        assert e.payload.operation_id == f"call-{k:04d}"
        assert e.payload.arguments == {"command": steps[k]["action"]}
        assert e.payload.tool == steps[k]["action"].split()[0]
    assert [e.payload.outcome["observation"] for e in _of(r, "ToolResult")] == [s["observation"] for s in steps]
    assert [e.payload.reply for e in _of(r, "ModelReplied")] == [s["response"] for s in steps]
    # the identical failing edit, repeated, is kept as two separate calls with the same observation
    calls = {e.payload.operation_id: e.payload for e in _of(r, "ToolIntent")}
    results = {e.payload.operation_id: e.payload for e in _of(r, "ToolResult")}
    assert calls["call-0006"].arguments == calls["call-0007"].arguments
    assert results["call-0006"].outcome == results["call-0007"].outcome
    assert "syntax error" in results["call-0007"].outcome["observation"]
    spent = _of(r, "BudgetSettled")
    assert len(spent) == 1 and spent[0].payload.actual_usd == raw["info"]["model_stats"]["instance_cost"]
    assert spent[0].payload.reservation_id == NOT_RECORDED
    rec = fold(initial_record(r.trajectory_id), r.events)
    assert rec.budget.actual_consumption_usd == pytest.approx(1.26719)
    assert rec.control_state == "COMPLETED"
    assert {"budget", "model-provenance", "per-turn-usage"} <= set(r.lacks) and "cost" not in r.lacks


def test_swe_agent_function_calls_and_unmatched_step():
    path = _need(TRAJ / "swe-agent" / "sweagenttestrepo-1c2844.traj")
    raw = json.loads(path.read_bytes())
    r = import_file("swe-agent", path)
    hist = raw["history"]
    calls = [tc for m in hist if m["role"] == "assistant" for tc in m.get("tool_calls") or []]
    intents = _of(r, "ToolIntent")
    for tc, e in zip(calls, intents):   # history's function calls give the tool and its arguments
        assert e.payload.tool == tc["function"]["name"]
        assert e.payload.arguments == json.loads(tc["function"]["arguments"])
    results = _of(r, "ToolResult")
    assert [x.payload.evidence.get("source_call_id") for x in results[:len(calls)]] == [tc["id"] for tc in calls]
    # the history stops before the last step: that turn's input is marked, not guessed
    last = _of(r, "ContextBuilt")[-1].payload
    assert last.delivered_input is None and last.delivered_input_ref == NOT_RECORDED
    assert "delivered-input" in r.lacks
    assert r.notes["delivered_input_not_recorded"][0]["invocation_id"] == "turn-0004"
    assert r.events[0].payload.budget_ceiling_usd == 3.0   # replay_config's per-instance limit
    assert r.events[0].payload.config["model"] == "gpt-4o"


def test_swe_agent_history_only_file():
    path = _need(TRAJ / "swe-agent" / "function_calling_simple.traj")
    r = import_file("swe-agent", path)
    raw = json.loads(path.read_bytes())
    pos = [j for j, m in enumerate(raw["history"]) if m["role"] == "assistant"]
    assert [e.payload.invocation_id for e in _of(r, "ContextBuilt")] == [f"turn-{j:04d}" for j in pos]
    assert {"terminal-state", "cost"} <= set(r.lacks)
    assert fold(initial_record(r.trajectory_id), r.events).control_state == "RUNNING"


def test_swe_agent_zero_model_stats_read_as_not_tracked():
    r = import_file("swe-agent", _need(TRAJ / "swe-agent" / "ctf_crypto_eps.traj"))
    assert not _of(r, "BudgetSettled") and "cost" in r.lacks
    assert any("all zero" in w for w in r.notes["warnings"])
    assert [e.payload.outcome["observation"] for e in _of(r, "ToolResult")][8:13] == ["Wrong flag!"] * 5


def test_swe_agent_pair_aligns_turn_by_turn():
    a = import_file("swe-agent", _need(TRAJ / "swe-agent" / "marshmallow-1867__default_sys-env_window100.traj"))
    b = import_file("swe-agent", _need(TRAJ / "swe-agent" / "marshmallow-1867__xml_sys-env_window100.traj"))
    ids = lambda r: [e.payload.invocation_id for e in _of(r, "ContextBuilt")]
    ops = lambda r: [e.payload.operation_id for e in _of(r, "ToolIntent")]
    assert ids(a) == ids(b) and ops(a) == ops(b)   # positional ids line the two runs up (§11.7.1)
    # the two harness configurations send different inputs from the first turn on
    assert (_of(a, "ContextBuilt")[0].payload.delivered_input_sha256
            != _of(b, "ContextBuilt")[0].payload.delivered_input_sha256)


def test_who_and_when_keeps_speakers_and_labels_as_notes():
    folder = TRAJ / "who-and-when-handcrafted"
    files = sorted(_need(folder).glob("*.json"))
    assert files
    for path in files:
        raw = json.loads(path.read_bytes())
        r = import_file("who-and-when", path)
        h = raw["history"]
        for e in _of(r, "ContextBuilt"):
            i = int(e.payload.invocation_id.removeprefix("turn-"))
            assert e.payload.request_config["source_role"] == h[i]["role"]
            assert e.payload.delivered_input_ref == NOT_RECORDED
        replies = {e.payload.invocation_id: e.payload for e in _of(r, "ModelReplied")}
        for i, m in enumerate(h):
            if f"turn-{i:04d}" in replies:
                assert replies[f"turn-{i:04d}"].reply == m["content"] or "redacted" in r.notes
        labels = r.notes["ground_truth_labels"]
        assert labels["mistake_agent"] == raw["mistake_agent"] and labels["mistake_step"] == raw["mistake_step"]
        inv = labels["mistake_invocation_id"]
        assert inv == f"turn-{int(raw['mistake_step']):04d}" and inv in replies
        assert replies[inv].proposal["agent"] == raw["mistake_agent"] and labels["speaker_matches_mistake_agent"]
        # labels are not agent events: only the import:source record mentions them
        assert [e.sequence_number for e in r.events if "mistake_agent" in e.canonical.decode()] == [2]
        assert r.events[0].payload.objective == raw["question"]
        assert {"tool-calls", "delivered-input", "model-provenance"} <= set(r.lacks)


def test_who_and_when_name_field_and_executor_messages(tmp_path):
    doc = {"question": "q?", "question_ID": "qid-9", "mistake_agent": "Excel_Expert", "mistake_step": "2",
           "mistake_reason": "wrong range", "is_correct": False, "system_prompt": {"Excel_Expert": "you are..."},
           "history": [{"content": "task text", "role": "assistant", "name": "Planner_Expert"},
                       {"content": "exitcode: 0", "role": "user", "name": "Computer_terminal"},
                       {"content": "=SUM(A1:A3)", "role": "user", "name": "Excel_Expert"}]}
    f = tmp_path / "ag.json"
    f.write_text(json.dumps(doc))
    r = import_file("who-and-when", f)
    assert [e.payload.invocation_id for e in _of(r, "ContextBuilt")] == ["turn-0000", "turn-0002"]
    inputs = [e.payload for e in _of(r, "RuntimeInput") if e.payload.kind == "order"]
    assert [(p.name, p.value["name"]) for p in inputs] == [("message:history[1]", "Computer_terminal")]
    assert r.notes["ground_truth_labels"]["speaker_at_mistake_step"] == "Excel_Expert"
    assert r.notes["system_prompts"] == doc["system_prompt"] and r.notes["benchmark"]["is_correct"] is False


# ------------------------------------------------------------------------------------------------
# plain OpenAI-style messages
# ------------------------------------------------------------------------------------------------


def _write(tmp_path: Path, doc, name="m.json") -> Path:
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    return f


def test_openai_messages_from_a_real_message_list(tmp_path):
    raw = json.loads(_need(TRAJ / "tau-bench-airline" / "task00_trial3.json").read_bytes())
    r = import_file("openai-messages", _write(tmp_path, raw["traj"]))
    exp = _expected_counts("tau-bench", raw)
    assert {k: r.counts[k] for k in exp} == exp
    rec = fold(initial_record(r.trajectory_id), r.events)
    assert rec.in_doubt() == [] and rec.budget.reservations == {}
    assert {"terminal-state", "cost", "model-provenance", "tool-descriptions"} <= set(r.lacks)


def test_openai_messages_parallel_calls_orphans_and_unanswered(tmp_path):
    doc = {"model": "gpt-x", "tools": [{"type": "function", "function": {"name": "f"}}], "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "do "}, {"type": "text", "text": "it"}]},
        {"role": "assistant", "content": None, "usage": {"prompt_tokens": 11, "completion_tokens": 3},
         "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
                        {"id": "b", "type": "function", "function": {"name": "g", "arguments": {"y": 2}}}]},
        {"role": "tool", "tool_call_id": "b", "content": "B done"},
        {"role": "tool", "tool_call_id": "a", "content": "A done", "is_error": True},
        {"role": "tool", "tool_call_id": "zzz", "content": "nobody asked"},
        {"role": "assistant", "content": "one more", "function_call": {"name": "h", "arguments": "{}"}},
        {"role": "assistant", "content": "and", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    ]}
    r = import_file("openai-messages", _write(tmp_path, doc))
    res = {e.payload.operation_id: e.payload for e in _of(r, "ToolResult")}
    assert res["call-0002"].outcome["observation"] == "A done" and res["call-0002.1"].outcome["observation"] == "B done"
    assert (res["call-0002"].status, res["call-0002.1"].status) == ("failed", "completed")
    assert res["result-0005"].evidence["source_call_id"] == "zzz"
    rep = _of(r, "ModelReplied")[0].payload
    assert (rep.input_tokens, rep.output_tokens) == (11, 3)
    assert [c["source_call_id"] for c in rep.proposal["tool_calls"]] == ["a", "b"]
    assert _of(r, "RuntimeInput")[-1].payload.value["content"] == "do it"
    first = _of(r, "ContextBuilt")[0].payload
    assert json.loads(first.delivered_input)["tools"] == doc["tools"] and first.model == "gpt-x"
    assert not {"model-provenance", "tool-descriptions", "per-turn-usage"} & set(r.lacks)
    rec = fold(initial_record(r.trajectory_id), r.events)
    # calls the source never answers stay in doubt; a result without a call is flagged as such
    assert rec.in_doubt() == ["call-0006", "call-0007"]
    assert rec.operations["result-0005"].intent_missing
    assert r.notes["calls_without_observation"] == ["call-0006", "call-0007"]


def test_secrets_and_unsafe_numbers_are_kept_out_of_events(tmp_path):
    doc = [{"role": "user", "content": "my key is sk-live_abcdefghijklmnopqrstuvwx please"},
           {"role": "assistant", "content": "ok", "tool_calls": [
               {"id": "a", "function": {"name": "login",
                                        "arguments": json.dumps({"password": "hunter22", "n": 2**60})}}]},
           {"role": "tool", "tool_call_id": "a", "content": "welcome"}]
    r = import_file("openai-messages", _write(tmp_path, doc))
    blob = r.to_jsonl().decode()
    assert "hunter22" not in blob and "sk-live_abcdefghijklmnopqrstuvwx" not in blob
    assert {"$[0].content", "$[1].tool_calls[0].function.arguments.password"} <= set(r.notes["redacted"])
    assert "$[1].tool_calls[0].function.arguments.n" in r.notes["numbers_stored_as_text"]
    assert _of(r, "ToolIntent")[0].payload.arguments["n"] == str(2**60)
    fold(initial_record(r.trajectory_id), r.events)


# ------------------------------------------------------------------------------------------------
# malformed input: a typed error naming the file and the place
# ------------------------------------------------------------------------------------------------


def _swe(**over):
    doc = {"environment": "x", "trajectory": [
        {"action": "ls\n", "observation": "a b", "response": "ls", "thought": "look", "state": "{}"},
        {"action": "submit\n", "observation": "diff", "response": "submit", "thought": "done", "state": "{}"}],
        "history": [], "info": {"exit_status": "submitted"}}
    doc.update(over)
    return doc


def _tau(arguments='{"user_id": "u1"}', content="hi"):
    return {"task_id": 1, "trial": 0, "reward": 1.0, "info": {}, "traj": [
        {"role": "system", "content": "policy"}, {"role": "user", "content": content},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_user_details", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_user_details", "content": "{}"}]}


MALFORMED = [
    ("swe-agent", b"", "$", "empty file"),
    ("tau-bench", b"  \n", "$", "empty file"),
    ("swe-agent", b'{"trajectory": [1,', "line 1 column 19", "not JSON"),
    ("who-and-when", b"\xff\xfe{}", "byte 0", "not UTF-8"),
    ("tau-bench", b'{"traj": [{"role": "user", "content": NaN}]}', "$", "NaN"),
    ("swe-agent", [1, 2], "$", "expected a SWE-agent object"),
    ("tau-bench", {"messages": []}, "$", "expected a tau-bench object"),
    ("who-and-when", {"history": "text"}, "history", "expected a list"),
    ("openai-messages", {"chat": []}, "$", "expected a list of messages"),
    ("swe-agent", _swe(trajectory=[{"action": "ls", "observation": "x"}, "oops"]), "trajectory[1]", "step object"),
    ("swe-agent", _swe(trajectory=[{"action": "ls", "observation": 5}]), "trajectory[0].observation", "a string"),
    ("swe-agent", _swe(trajectory=[{"observation": "x"}]), "trajectory[0].action", "missing"),
    ("swe-agent", _swe(info={"model_stats": {"instance_cost": "cheap"}}), "info.model_stats.instance_cost",
     "expected"),
    ("tau-bench", _tau(arguments='{"user_id": '), "traj[2].tool_calls[0].function.arguments", "not valid JSON"),
    ("tau-bench", _tau(arguments='["u1"]'), "traj[2].tool_calls[0].function.arguments", "JSON object"),
    ("tau-bench", _tau(content=7), "traj[1].content", "message content"),
    ("tau-bench", {"traj": [{"role": "user", "content": "x"}, ["assistant", "hi"]]}, "traj[1]", "message object"),
    ("openai-messages", [{"content": "no role"}], "$[0].role", "missing"),
    ("openai-messages", [], "$", "no messages"),
    ("who-and-when", {"history": [{"content": "q", "role": "human"}, {"content": "x", "name": 3, "role": "A"}]},
     "history[1].name", "a string"),
    ("who-and-when", {"history": [{"content": "q", "role": "human"}, "WebSurfer: hi"]}, "history[1]", "entry object"),
]


@pytest.mark.parametrize("fmt,content,where,words", MALFORMED, ids=[f"{m[0]}:{m[2]}:{m[3]}" for m in MALFORMED])
def test_malformed_input_gives_typed_error_with_place(tmp_path, fmt, content, where, words):
    f = tmp_path / "bad.json"
    f.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    with pytest.raises(ImportFormatError) as info:
        import_file(fmt, f)
    err = info.value
    assert isinstance(err, KernelError) and isinstance(err, ValueError)
    assert err.where == where and err.path == str(f)
    assert str(f) in str(err) and where in str(err) and words in str(err)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(ImportFormatError, match="no such file"):
        import_file("swe-agent", tmp_path / "nope.traj")
    with pytest.raises(ImportFormatError, match="directory"):
        import_file("swe-agent", tmp_path)
    with pytest.raises(UnknownImportFormatError, match="known: swe-agent"):
        import_file("langsmith", tmp_path / "x.json")


def _json_paths(v, p=()):
    yield p
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _json_paths(x, p + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _json_paths(x, p + (i,))


FUZZ = (("swe-agent", "swe-agent/sweagenttestrepo-1c2844.traj"),
        ("swe-agent", "swe-agent/function_calling_simple.traj"),
        ("tau-bench", "tau-bench-airline/task08_trial1.json"), ("who-and-when", "who-and-when-handcrafted/006.json"))


@pytest.mark.parametrize("fmt,rel", FUZZ, ids=[r for _, r in FUZZ])
def test_damaged_real_files_never_raise_untyped_errors(tmp_path, fmt, rel):
    """Replace or drop one random node at a time: the import either works (and folds) or raises
    ImportFormatError, never KeyError/TypeError/AttributeError."""
    data = json.loads(_need(TRAJ / rel).read_bytes())
    paths = list(_json_paths(data))[1:]
    rng = random.Random(rel)
    swaps = [None, 1, "x", [], {}, True, 1e300, -5, "{not json", [1, 2], {"a": 1}, 2**60]
    f = tmp_path / "damaged.json"
    outcomes = {"ok": 0, "typed": 0}
    for _ in range(150):
        d = copy.deepcopy(data)
        p = rng.choice(paths)
        parent = d
        for k in p[:-1]:
            parent = parent[k]
        if isinstance(parent, dict) and rng.random() < 0.2:
            del parent[p[-1]]
        else:
            parent[p[-1]] = rng.choice(swaps)
        f.write_text(json.dumps(d))
        try:
            r = import_file(fmt, f)
        except ImportFormatError as exc:
            assert str(f) in str(exc)
            outcomes["typed"] += 1
            continue
        fold(initial_record(r.trajectory_id), r.events)
        outcomes["ok"] += 1
    assert outcomes["ok"] and outcomes["typed"]


# ------------------------------------------------------------------------------------------------
# the command line
# ------------------------------------------------------------------------------------------------


def test_cli_writes_a_log_that_fold_reads(tmp_path, capsys):
    path = _need(TRAJ / "tau-bench-airline" / "task15_trial1.json")
    out = tmp_path / "t15.jsonl"
    assert import_main(["import", "tau-bench", str(path), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    r = import_file("tau-bench", path)
    assert summary["trajectory_id"] == r.trajectory_id and summary["counts"] == r.counts
    assert summary["lacks"] == r.lacks and summary["out"] == str(out)
    assert out.read_bytes() == r.to_jsonl()
    assert [e.digest for e in load_events(str(out))] == [e.digest for e in r.events]
    assert kernel_main(["fold", "--log", str(out), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["owner_epoch"] == 0 and rec["in_doubt"] == [] and rec["budget"]["reservations"] == {}
    assert rec["control_state"] == "COMPLETED" and rec["last_sequence_number"] == r.counts["events"]
    assert kernel_main(["fold", "--log", str(out)]) == 0
    assert "owner_epoch 0" in capsys.readouterr().out


def test_cli_through_a_parser_the_way_the_main_cli_wires_it(tmp_path, capsys):
    path = _need(TRAJ / "swe-agent" / "pydicom__pydicom-1458.traj")
    ap = argparse.ArgumentParser(prog="python -m kernel_lib")
    add_cli(ap.add_subparsers(dest="command"))
    out = tmp_path / "p.ndjson"
    args = ap.parse_args(["import", "swe-agent", str(path), "--out", str(out)])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "12 model turns, 12 tool calls" in text and f"fold --log {out}" in text
    assert len(load_events(str(out))) == import_file("swe-agent", path).counts["events"]
    with pytest.raises(SystemExit):
        ap.parse_args(["import", "langsmith", str(path), "--out", str(out)])


def test_cli_help_and_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        import_main(["import", "--help"])
    helptext = capsys.readouterr().out
    assert NOT_RECORDED in helptext and all(k in helptext for k in LACKS) and all(k in helptext for k in FORMATS)
    bad = tmp_path / "bad.json"
    bad.write_text('{"traj": [{"role": "assistant", "content": 1}]}')
    out = tmp_path / "o.jsonl"
    assert import_main(["tau-bench", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(bad) in err and "traj[0].content" in err and not out.exists()
    good = _write(tmp_path, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    assert import_main(["openai-messages", str(good), "--out", str(tmp_path / "o.log")]) == 2
    assert ".jsonl" in capsys.readouterr().err
    assert import_main(["openai-messages", str(good), "--out", str(out)]) == 0
    assert import_main(["openai-messages", str(good), "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert import_main(["openai-messages", str(good), "--out", str(out), "--force"]) == 0


# --- errors name the real place in the source file (round 6) ---------------------------------------


def _deep(n: int, key: str = "a") -> dict:
    x: dict = {}
    for _ in range(n):
        x = {key: x}
    return x


@pytest.mark.parametrize("as_string", [False, True])
def test_deep_tool_call_arguments_are_blamed_on_their_place_in_the_file(tmp_path, as_string):
    args = _deep(60)
    f = _write(tmp_path, [{"role": "assistant", "content": "x", "tool_calls": [
        {"id": "c1", "function": {"name": "f", "arguments": json.dumps(args) if as_string else args}}]}])
    with pytest.raises(ImportFormatError, match="nested deeper") as info:
        import_file("openai-messages", f)
    assert info.value.where.startswith("$[0].tool_calls[0].function.arguments.a.a")
    assert "proposal" not in info.value.where


def test_arguments_just_within_the_limit_still_import(tmp_path):
    f = _write(tmp_path, [{"role": "assistant", "content": "x", "tool_calls": [
        {"id": "c1", "function": {"name": "f", "arguments": _deep(52)}}]}])
    assert import_file("openai-messages", f).counts["tool_calls"] == 1


def test_deep_swe_agent_state_is_blamed_on_the_step_state(tmp_path):
    doc = _swe()
    doc["trajectory"][0]["state"] = _deep(60, "d")
    with pytest.raises(ImportFormatError, match="nested deeper") as info:
        import_file("swe-agent", _write(tmp_path, doc, "s.traj"))
    assert info.value.where.startswith("trajectory[0].state.d.d")


def test_nan_inside_a_replay_config_string_is_blamed_on_replay_config(tmp_path):
    rc = json.dumps({"agent": {"model": {"name": "gpt4", "temperature": 0}}}).replace("0}", "NaN}")
    with pytest.raises(ImportFormatError, match="NaN") as info:
        import_file("swe-agent", _write(tmp_path, _swe(replay_config=rc), "s.traj"))
    assert info.value.where == "replay_config.agent.model.temperature"


def test_deep_replay_config_info_and_extra_fields_are_blamed_on_their_place(tmp_path):
    for over, where in (({"replay_config": _deep(60)}, "replay_config.a"), ({"info": _deep(60)}, "info.a"),
                        ({"extra": _deep(60)}, "extra.a")):
        with pytest.raises(ImportFormatError, match="nested deeper") as info:
            import_file("swe-agent", _write(tmp_path, _swe(**over), "s.traj"))
        assert info.value.where.startswith(where), (over.keys(), info.value.where)


# --- import --out (round 6) ----------------------------------------------------------------------


def _good(tmp_path: Path) -> Path:
    return _write(tmp_path, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "g.json")


def test_out_in_a_missing_directory_is_refused_not_created(tmp_path, capsys):
    out = tmp_path / "no" / "sub" / "x.jsonl"
    assert import_main(["openai-messages", str(_good(tmp_path)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(out) in err and "does not exist" in err
    assert not (tmp_path / "no").exists()


def test_out_is_written_with_the_umask_mode(tmp_path):
    import os
    out = tmp_path / "x.jsonl"
    old = os.umask(0o027)
    try:
        assert import_main(["openai-messages", str(_good(tmp_path)), "--out", str(out)]) == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o640


def test_out_that_is_a_directory_is_named_as_given(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    out.mkdir()
    assert import_main(["openai-messages", str(_good(tmp_path)), "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert f"--out {out} is a directory" in err and ".d.jsonl." not in err
    assert list(out.iterdir()) == [] and not list(tmp_path.glob(".d.jsonl.*"))


def test_an_unwritable_out_is_reported_under_the_users_path(tmp_path, capsys, monkeypatch):
    import tempfile

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".x.jsonl.abc123"))
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    out = tmp_path / "x.jsonl"
    assert import_main(["openai-messages", str(_good(tmp_path)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out}" in err and "Permission denied" in err and ".x.jsonl.abc123" not in err


def test_a_dangling_symlink_is_not_replaced_without_force(tmp_path, capsys):
    out = tmp_path / "l.jsonl"
    out.symlink_to(tmp_path / "nowhere")
    good = _good(tmp_path)
    assert import_main(["openai-messages", str(good), "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.is_symlink()
    assert import_main(["openai-messages", str(good), "--out", str(out), "--force"]) == 0
    assert not out.is_symlink() and load_events(str(out))


# --- Who&When mistake_step that is not a step index (round 6) --------------------------------------


@pytest.mark.parametrize("step", [True, False, -1, "-1", 1.0, "²"])
def test_who_and_when_mistake_step_that_is_not_an_index_points_at_no_turn(tmp_path, step):
    doc = {"question": "q?", "mistake_agent": "A", "mistake_step": step,
           "history": [{"content": "task", "role": "human"}, {"content": "x", "role": "A"},
                       {"content": "y", "role": "B"}]}
    r = import_file("who-and-when", _write(tmp_path, doc, "ww.json"))
    labels = r.notes["ground_truth_labels"]
    assert labels["mistake_step"] == step
    assert "mistake_position" not in labels and "mistake_invocation_id" not in labels
    assert any("not a step index" in w for w in r.notes["warnings"])


def test_who_and_when_mistake_step_as_int_and_text_still_points_at_the_turn(tmp_path):
    for step in (1, "1", " 1 "):
        doc = {"question": "q?", "mistake_agent": "A", "mistake_step": step,
               "history": [{"content": "task", "role": "human"}, {"content": "x", "role": "A"}]}
        labels = import_file("who-and-when", _write(tmp_path, doc, "ww.json")).notes["ground_truth_labels"]
        assert labels["mistake_invocation_id"] == "turn-0001" and labels["speaker_matches_mistake_agent"] is True


@pytest.mark.parametrize("status, state", [("submitted", "COMPLETED"), ("submitted (exit_cost)", "COMPLETED"),
                                           ("not_submitted_error", "FAILED"), ("exit_context", "FAILED")])
def test_only_a_submitted_exit_status_ends_an_imported_run_completed(status, state):
    from kernel_lib.importers.swe_agent import _submitted
    assert _submitted(status) == (state == "COMPLETED")
