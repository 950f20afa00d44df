"""Reader for plain OpenAI-style chat message lists (§11.6, §11.7; table 1).

Accepted shapes: a JSON list of messages, or an object ``{"messages": [...]}`` with optional
``model``, ``tools`` and ``id``. A message is ``{role, content, tool_calls?, tool_call_id?,
name?, function_call?, usage?}``; ``content`` is a string, null, or a list of parts with
``text``.

Mapping (the shared part, also used by :mod:`.tau_bench`):

* ``assistant`` message at index i → ``ContextBuilt(turn-000i)`` whose delivered input is
  ``{"messages": messages[0:i]}`` (plus ``tools`` when the file records them), then
  ``ModelReplied`` with the text and the proposed calls; per-message ``usage`` fills the token
  counts.
* each of its tool calls (or a legacy ``function_call``) → ``ToolIntent`` ``call-000i`` (the
  k-th extra call of the same turn is ``call-000i.k``), arguments parsed from their JSON string.
* ``tool``/``function`` message → ``ToolResult`` of the earliest call still without a result
  whose source id (or, for ``function``, name) matches; with no id, the earliest open call. A
  result that matches no call keeps its own id ``result-000i`` and folds as evidence without an
  intent. A call no message answers stays in doubt after the fold: the source shows no outcome.
  A result message flagged ``is_error: true`` or ``status: "error"`` gives a ``failed`` result.
* any other role (system, user, developer...) → ``RuntimeInput(kind="order")`` at its place.

Raises :class:`~kernel_lib.importers.ImportFormatError` naming the file and the JSON path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel_lib.importers._common import (
    NOT_RECORDED,
    Builder,
    ImportResult,
    Source,
    call_id,
    join,
    proposal_call,
    type_name,
)

FORMAT = "openai-messages"

#: Roles whose messages a model produced.
ASSISTANT_ROLES = frozenset({"assistant"})
#: Roles whose messages carry a tool's observation.
RESULT_ROLES = frozenset({"tool", "function", "ipython"})


def _tokens(src: Source, m: dict[str, Any], where: str) -> tuple[int, int] | None:
    u = m.get("usage")
    if u is None:
        return None
    src.expect(u, dict, join(where, "usage"))
    i = u.get("prompt_tokens", u.get("input_tokens", 0))
    o = u.get("completion_tokens", u.get("output_tokens", 0))
    src.expect(i, int, join(join(where, "usage"), "prompt_tokens"), "a whole number of tokens")
    src.expect(o, int, join(join(where, "usage"), "completion_tokens"), "a whole number of tokens")
    if i < 0 or o < 0:
        raise src.fail(join(where, "usage"), "token counts must not be negative")
    return i, o


def message_tool_calls(src: Source, m: dict[str, Any], where: str) -> list[tuple[str, dict[str, Any], str | None, str]]:
    """(tool name, arguments, source call id, JSON path of the arguments) of every call the
    message proposes."""
    out = []
    tcs = m.get("tool_calls")
    if tcs is not None:
        src.expect(tcs, list, join(where, "tool_calls"))
        for k, tc in enumerate(tcs):
            tw = join(join(where, "tool_calls"), k)
            src.expect(tc, dict, tw, "a tool call object")
            fn = tc.get("function", tc if "name" in tc else None)
            fw = join(tw, "function") if "function" in tc else tw
            src.expect(fn, dict, fw, "a function object {name, arguments}")
            name = src.get(fn, "name", str, fw, required=True)
            args = src.arguments(fn.get("arguments"), join(fw, "arguments"))
            cid = src.get(tc, "id", str, tw)
            out.append((name, args, cid, join(fw, "arguments")))
    fc = m.get("function_call")
    if fc is not None:
        fw = join(where, "function_call")
        src.expect(fc, dict, fw, "a function call object {name, arguments}")
        out.append((src.get(fc, "name", str, fw, required=True),
                    src.arguments(fc.get("arguments"), join(fw, "arguments")),
                    None, join(fw, "arguments")))
    return out


def map_messages(b: Builder, src: Source, messages: list[Any], base: str, *, model: str,
                 extra_input: dict[str, Any] | None = None,
                 is_error: Callable[[dict[str, Any], str], bool] | None = None) -> dict[str, int]:
    """Append the events of an OpenAI-style message list (see module doc) to ``b``.

    ``base`` is the list's JSON path (``messages``, ``traj``, ``$``); ``extra_input`` is stored
    beside the messages in each delivered input (e.g. ``tools``); ``is_error(message, text)``
    says whether a result message reports a tool error (the ToolResult is then ``failed``).
    Returns counts: model_turns, tool_calls, tool_results, inputs, unanswered, unmatched.
    """
    counts = {"model_turns": 0, "tool_calls": 0, "tool_results": 0, "inputs": 0, "unanswered": 0, "unmatched": 0}
    pending: list[dict[str, Any]] = []   # calls without a result yet, in proposal order
    usage_seen = False
    for i, m in enumerate(messages):
        where = join(base, i)
        src.expect(m, dict, where, "a message object")
        role = src.get(m, "role", str, where, required=True)
        text = src.text(m.get("content"), join(where, "content"))
        if role in ASSISTANT_ROLES:
            calls = message_tool_calls(src, m, where)
            tokens = _tokens(src, m, where)
            usage_seen |= tokens is not None
            turn_model = src.get(m, "model", str, where) or model
            inv = b.context(i, where, model=turn_model, messages=messages[:i], messages_path=base, extra=extra_input)
            proposed = [proposal_call(call_id(i, k), name, args, cid) for k, (name, args, cid, _) in enumerate(calls)]
            b.reply(inv, where, reply=text, proposal={"tool_calls": proposed} if proposed else None,
                    input_tokens=tokens[0] if tokens else 0, output_tokens=tokens[1] if tokens else 0,
                    provider={"model": turn_model} if turn_model != NOT_RECORDED else {})
            counts["model_turns"] += 1
            for k, (name, args, cid, cw) in enumerate(calls):
                op = call_id(i, k)
                b.intent(op, cw, tool=name, arguments=args)
                pending.append({"op": op, "id": cid, "name": name})
                counts["tool_calls"] += 1
        elif role in RESULT_ROLES:
            rid = src.get(m, "tool_call_id", str, where)
            name = src.get(m, "name", str, where)
            match = None
            if rid is not None:
                match = next((p for p in pending if p["id"] == rid), None)
            elif role == "function" and name is not None:
                match = next((p for p in pending if p["name"] == name), None)
            elif pending:
                match = pending[0]
            if match is not None:
                pending.remove(match)
                op = match["op"]
            else:
                op = f"result-{i:04d}"
                counts["unmatched"] += 1
                b.warnings.append(f"{where}: a tool result that answers no open call (tool_call_id {rid!r}); "
                                  f"kept as {op} without an intent")
            failed = bool(is_error and is_error(m, text))
            extra = {"tool": name} if name else {}
            b.result(op, where, observation=text, failed=failed, extra=extra,
                     evidence={"source_call_id": rid} if rid else None)
            counts["tool_results"] += 1
        else:
            value: dict[str, Any] = {"role": role, "content": text}
            if isinstance(m.get("name"), str):
                value["name"] = m["name"]
            b.message_input(where, value)
            counts["inputs"] += 1
    if pending:
        counts["unanswered"] = len(pending)
        b.notes["calls_without_observation"] = [p["op"] for p in pending]
        b.warnings.append(f"{len(pending)} tool call(s) have no recorded observation and stay in doubt: "
                          + ", ".join(p["op"] for p in pending))
    if not usage_seen:
        b.lacks.add("per-turn-usage")
    return counts


def _explicit_error(m: dict[str, Any], text: str) -> bool:
    """A result message that flags itself as an error (``is_error: true`` or ``status: "error"``)."""
    return m.get("is_error") is True or m.get("status") == "error"


def import_openai_messages(path: str | Path) -> ImportResult:
    """Import a plain OpenAI-style message list (see module doc for shapes and mapping).

    Lacks, besides the schema-level entries: cost, budget, requester, terminal-state, clock;
    model-provenance unless ``model`` is given; tool-descriptions unless ``tools`` is given.

    Raises:
        ImportFormatError: unreadable or non-JSON file, a top level that is neither a list nor an
            object with ``messages``, a message that is not an object or lacks ``role``, content of
            the wrong type, tool call arguments that are not a JSON object.
    """
    src = Source(FORMAT, path)
    d = src.data
    meta: dict[str, Any] = {}
    if isinstance(d, list):
        messages, base = d, "$"
    elif isinstance(d, dict) and "messages" in d:
        messages = src.expect(d["messages"], list, "messages")
        base = "messages"
        meta = {k: v for k, v in d.items() if k != "messages"}
    else:
        raise src.fail("$", f"expected a list of messages or an object with 'messages', got {_shape(d)}")
    if not messages:
        raise src.fail(base, "no messages")
    b = Builder(src, f"kernel_lib.imports/{FORMAT}")
    model = src.get(meta, "model", str, "$") or NOT_RECORDED
    if model == NOT_RECORDED:
        b.lacks.add("model-provenance")
    tools = meta.get("tools")
    extra = None
    if tools is not None:
        extra = {"tools": src.expect(tools, list, "tools")}
    else:
        b.lacks.add("tool-descriptions")
    counts = map_messages(b, src, messages, base, model=model, extra_input=extra, is_error=_explicit_error)
    b.lacks.update({"cost", "terminal-state"})
    if meta:
        b.notes["unmapped_fields"] = {k: v for k, v in meta.items() if k not in ("tools",)}
    b.notes["counts"] = counts
    first_user = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), None)
    objective = src.text(first_user.get("content"), "objective") if first_user else None
    task_id = src.get(meta, "id", (str, int), "$")
    return b.finish(task_id=str(task_id) if task_id is not None else src.stem, objective=objective,
                    requester=None, config={"model": model})


def _shape(d: Any) -> str:
    if isinstance(d, dict):
        return f"an object with keys {sorted(d)[:6]}"
    return type_name(d)
