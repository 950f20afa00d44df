"""Reader for SWE-agent ``.traj`` files (§11.6, §11.7; table 1).

Shape: ``{environment, trajectory: [{action, observation, response, thought, state,
execution_time?}], history: [chat messages], info: {exit_status, submission, model_stats},
replay_config?}``. Newer files record function-calling ``tool_calls`` on the history's assistant
messages and ``tool`` messages with ``tool_call_ids``; some hold only ``history``.

Mapping:

* ``trajectory[k]`` is turn k: ``ContextBuilt(turn-000k)`` + ``ModelReplied`` (reply = the
  step's ``response``; proposal = thought, action and the calls) + one ``ToolIntent``
  ``call-000k`` + a complete ``ToolResult`` holding the ``observation`` (with ``state`` and
  ``execution_time`` when recorded). The call is the history message's function call when the
  file records one, else the raw action: tool = its first word, arguments = ``{"command":
  action}``. A step with no action but an observation records the observation as a
  ``RuntimeInput(kind="order")``.
* Delivered input: the steps are aligned with the non-demonstration assistant messages of
  ``history`` by content, not by position: a step and a message match when they record the same
  action (better when the message's text is also the step's ``response``), or, for a message
  without ``action``, the same text as the step's ``response`` (all compared with outer
  whitespace stripped); the alignment is the best-scoring order-preserving pairing
  (:func:`align_steps`). The turn's delivered input is the history before its message,
  demonstrations included. Only a step the alignment leaves unmatched (the history skips it, or
  records something else there) gets the not-recorded sentinel and a note; the steps after it
  still match. Among consecutive steps with the same action and response a skipped one cannot
  be told apart: the alignment marks the last of the run. The history is what SWE-agent kept,
  before its history processors and templates shaped the request, hence ``wire-request`` in
  lacks.
* A file without ``trajectory`` is read from ``history`` alone: each non-demonstration assistant
  message at index j is turn j, its calls are answered by the following ``tool`` messages (by
  ``tool_call_ids``) or, for a plain action, by the next ``user`` message.
* ``info.model_stats.instance_cost`` becomes one ``BudgetSettled`` against no reservation, its
  token and call totals in the evidence (SWE-agent records no per-turn split). All-zero stats on
  a run with turns mean the run did not track cost: they are noted, not imported as a zero
  spend. ``replay_config``'s ``per_instance_cost_limit`` (when above 0) is the budget ceiling.
* ``info.exit_status`` ends the log with ``ControlChanged``: ``COMPLETED`` when it says the
  patch was submitted, ``FAILED`` otherwise; the status is the reason.

Raises :class:`~kernel_lib.importers.ImportFormatError` naming the file and the JSON path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernel_lib.importers._common import NOT_RECORDED, Builder, ImportResult, Source, call_id, join, proposal_call
from kernel_lib.importers.openai_messages import message_tool_calls

FORMAT = "swe-agent"


def _submitted(exit_status: str) -> bool:
    """SWE-agent's exit statuses read ``submitted`` or ``submitted (reason)`` when a patch went in;
    ``not_submitted_error`` and the like must not count."""
    return exit_status.strip().lower().startswith("submitted")


def _message_key(src: Source, hm: dict[str, Any], where: str) -> tuple[str | None, str]:
    """What an assistant message is matched on: ``(action, text)``, the action None when the
    message records none; outer whitespace stripped."""
    action = hm["action"].strip() if isinstance(hm.get("action"), str) else None
    return (action, src.text(hm.get("content"), join(where, "content")).strip())


def align_steps(steps: list[tuple[str, str]], messages: list[tuple[str | None, str]]) -> list[int | None]:
    """Align trajectory steps with history assistant messages by content (§11.7.1).

    ``steps`` holds one ``(action, response)`` pair per step and ``messages`` one
    ``(action or None, text)`` pair per assistant message (:func:`_message_key`), all with outer
    whitespace stripped. A message with an action matches a step with the same action (score 1,
    2 when its text is also the step's response); a message without one matches a step whose
    response is its text (score 2). Returns, per step, the index into ``messages`` it is paired
    with, or None: the order-preserving pairing of the highest total score (a weighted longest
    common subsequence; full matches at the common head and tail are paired first, ties go to
    the earlier step), so a message the history leaves out costs exactly one step and the steps
    after it still pair. Time O(n·m) over the part between the common head and tail.
    """
    def score(k: int, j: int) -> int:
        action, text = messages[j]
        if action is None:
            return 2 if text == steps[k][1] else 0
        return (1 + (text == steps[k][1])) if action == steps[k][0] else 0

    n, m = len(steps), len(messages)
    out: list[int | None] = [None] * n
    lo = 0
    while lo < n and lo < m and score(lo, lo) == 2:
        out[lo] = lo
        lo += 1
    hi_s, hi_m = n, m
    while hi_s > lo and hi_m > lo and score(hi_s - 1, hi_m - 1) == 2:
        hi_s, hi_m = hi_s - 1, hi_m - 1
        out[hi_s] = hi_m
    rows, cols = hi_s - lo, hi_m - lo
    if rows and cols:
        # best[i][j] = highest score pairing steps[lo+i:hi_s] with messages[lo+j:hi_m]
        best = [[0] * (cols + 1) for _ in range(rows + 1)]
        for i in range(rows - 1, -1, -1):
            here, below = best[i], best[i + 1]
            for j in range(cols - 1, -1, -1):
                sc = score(lo + i, lo + j)
                here[j] = max(below[j + 1] + sc if sc else 0, below[j], here[j + 1])
        i = j = 0
        while i < rows and j < cols:
            sc = score(lo + i, lo + j)
            if sc and best[i][j] == best[i + 1][j + 1] + sc:
                out[lo + i] = lo + j
                i, j = i + 1, j + 1
            elif best[i][j] == best[i + 1][j]:
                i += 1          # this step is not in the history
            else:
                j += 1          # this message is no step
    return out


def _command_call(action: str, where: str) -> tuple[str, dict[str, Any], None, str]:
    return (action.split()[0], {"command": action}, None, where)


def _is_demo(m: Any) -> bool:
    return isinstance(m, dict) and bool(m.get("is_demo"))


def _replay_config(src: Source, replay: Any) -> Any:
    """``replay_config`` as recorded, parsed when a SWE-agent version stored it as a JSON string,
    and checked where it is in the file (it is kept in the notes)."""
    if isinstance(replay, str):   # some SWE-agent versions store it as a JSON string
        try:
            replay = json.loads(replay)
        except ValueError:
            pass                  # not JSON: kept as text in the notes
        except RecursionError:
            raise src.fail("replay_config", "the JSON string is nested too deeply") from None
    if replay is not None:        # kept in the notes (notes.replay_config): check it where it is in the file
        src.check_value(replay, "replay_config", headroom=1)
    return replay


def _from_trajectory(src: Source, b: Builder, traj: list, history: list, assistant_at: list[int], turn,
                     counts: dict[str, int], alignment: list[str]) -> None:
    """Turns from ``trajectory``: step k is turn k, paired with the history's assistant message
    that records the same content (:func:`align_steps`, see module doc); steps and messages left
    unpaired go to ``alignment``."""
    for k, s in enumerate(traj):
        where = join("trajectory", k)
        src.expect(s, dict, where, "a step object")
        src.get(s, "action", str, where, required=True)
        src.get(s, "response", str, where, default="")
    keys = [_message_key(src, history[j], join("history", j)) for j in assistant_at]
    paired = align_steps([(s["action"].strip(), (s.get("response") or "").strip()) for s in traj], keys)
    used = {p for p in paired if p is not None}
    for p, j in enumerate(assistant_at):
        if p not in used:
            alignment.append(f"history[{j}]: an assistant message that matches no trajectory step")
    for k, s in enumerate(traj):
        where = join("trajectory", k)
        action = src.get(s, "action", str, where, required=True)
        observation = src.get(s, "observation", str, where, default="")
        response = src.get(s, "response", str, where, default="")
        thought = src.get(s, "thought", str, where, default="")
        exec_time = src.get(s, "execution_time", (int, float), where)
        hidx = assistant_at[paired[k]] if paired[k] is not None else None
        missing = ""
        if hidx is None:
            missing = ("the file has no history" if not history
                       else f"history records {len(assistant_at)} assistant message(s); none matches this step")
            if assistant_at:
                alignment.append(f"{where}: no history message records this step")
        calls: list = []
        if hidx is not None and history[hidx].get("tool_calls"):
            calls = message_tool_calls(src, history[hidx], join("history", hidx))
        elif action.strip():
            calls = [_command_call(action, join(where, "action"))]
        ops = turn(k, where, action=action, response=response, thought=thought, calls=calls,
                   delivered=history[:hidx] if hidx is not None else None, missing=missing)
        extra: dict[str, Any] = {}
        if "state" in s:              # stored one level down, in the result's outcome
            extra["state"] = src.check_value(s["state"], join(where, "state"), headroom=1)
        if exec_time is not None:
            extra["execution_time_s"] = exec_time
        ow = join(where, "observation")
        if ops:
            cid = calls[0][2]
            b.result(ops[0], ow, observation=observation, extra=extra,
                     evidence={"source_call_id": cid} if cid else None)
            counts["tool_results"] += 1
            if len(ops) > 1:
                counts["unanswered"] += len(ops) - 1
                b.warnings.append(f"{where}: {len(ops)} calls share one recorded observation; it is kept as "
                                  f"the result of {ops[0]}, and {', '.join(ops[1:])} stay in doubt")
        elif observation:
            b.message_input(ow, {"role": "environment", "content": observation, **extra})
            counts["inputs"] += 1


def _spend_and_end(src: Source, b: Builder, info: dict, counts: dict[str, int]) -> None:
    """The run's recorded spending (``info.model_stats``) and its end (``info.exit_status``)."""
    ms = src.get(info, "model_stats", dict, "info", default={})
    figures = {}
    for key in ("instance_cost", "total_cost", "tokens_sent", "tokens_received", "api_calls"):
        v = src.get(ms, key, (int, float), "info.model_stats")
        if v is not None:
            figures[key] = v
    tracked = any(figures.get(k, 0) > 0 for k in ("instance_cost", "tokens_sent", "tokens_received", "api_calls"))
    if tracked and "instance_cost" in figures:
        b.spend("info.model_stats.instance_cost", actual_usd=float(figures["instance_cost"]),
                evidence="SWE-agent info.model_stats: " + ", ".join(f"{k}={v}" for k, v in figures.items())
                         + " (totals for the run; no per-call split is recorded)")
    else:
        b.lacks.add("cost")
        if figures and not tracked:
            b.warnings.append(f"info.model_stats are all zero although {counts['model_turns']} model turn(s) are "
                              "recorded: read as cost not tracked, not as a zero spend")
    exit_status = src.get(info, "exit_status", str, "info")
    if exit_status:
        b.end("info.exit_status", to_state="COMPLETED" if _submitted(exit_status) else "FAILED",
              reason=f"SWE-agent exit_status={exit_status!r}")
    else:
        b.lacks.add("terminal-state")


def import_swe_agent(path: str | Path) -> ImportResult:
    """Import one SWE-agent ``.traj`` file (see module doc).

    Raises:
        ImportFormatError: unreadable or non-JSON file; a top level without ``trajectory`` or
            ``history``; a step or message that is not an object; ``action``, ``observation``,
            ``response``, ``thought`` or ``role`` of the wrong type; function-call arguments that
            are not a JSON object; ``model_stats`` figures that are not numbers.
    """
    src = Source(FORMAT, path)
    d = src.data
    if not isinstance(d, dict) or not ({"trajectory", "history"} & set(d)):
        got = f"an object with keys {sorted(d)[:6]}" if isinstance(d, dict) else type(d).__name__
        raise src.fail("$", f"expected a SWE-agent object with 'trajectory' and/or 'history', got {got}")
    traj = src.get(d, "trajectory", list, "$", default=[])
    history = src.get(d, "history", list, "$", default=[])
    info = src.get(d, "info", dict, "$", default={})
    env = src.get(d, "environment", str, "$")
    replay = d.get("replay_config")
    src.check_value(info, "info", headroom=1)                # kept as notes.info
    replay = _replay_config(src, replay)
    replay_d = replay if isinstance(replay, dict) else {}
    agent_cfg = replay_d.get("agent") if isinstance(replay_d.get("agent"), dict) else {}
    model_cfg = agent_cfg.get("model") if isinstance(agent_cfg.get("model"), dict) else {}
    model = model_cfg.get("name") if isinstance(model_cfg.get("name"), str) else NOT_RECORDED
    request_cfg = {k: model_cfg[k] for k in ("temperature", "top_p", "stop", "completion_kwargs") if k in model_cfg}

    for j, m in enumerate(history):
        hw = join("history", j)
        src.expect(m, dict, hw, "a message object")
        src.get(m, "role", str, hw, required=True)
    if not traj and not history:
        raise src.fail("trajectory", "no steps (and no history)")

    b = Builder(src, f"kernel_lib.imports/{FORMAT}")
    b.lacks.add("per-turn-usage")
    if model == NOT_RECORDED:
        b.lacks.add("model-provenance")
    assistant_at = [j for j, m in enumerate(history) if m["role"] == "assistant" and not _is_demo(m)]
    counts = {"model_turns": 0, "tool_calls": 0, "tool_results": 0, "inputs": 0, "unanswered": 0}
    alignment: list[str] = []

    def turn(position: int, where: str, *, action: str, response: str, thought: str, calls: list,
             delivered: list | None, missing: str) -> list[str]:
        inv = b.context(position, where, model=model, messages=delivered, messages_path="history",
                        request_config=request_cfg,
                        missing_reason=missing)
        ops = [call_id(position, k) for k in range(len(calls))]
        b.reply(inv, where, reply=response, proposal={
            "thought": thought, "action": action,
            "tool_calls": [proposal_call(op, name, args, cid) for op, (name, args, cid, _) in zip(ops, calls)]},
            provider={"model": model} if model != NOT_RECORDED else {})
        counts["model_turns"] += 1
        for op, (name, args, _cid, cw) in zip(ops, calls):
            b.intent(op, cw, tool=name, arguments=args)
            counts["tool_calls"] += 1
        return ops

    if traj:
        _from_trajectory(src, b, traj, history, assistant_at, turn, counts, alignment)
    else:
        _from_history(src, b, history, assistant_at, turn, counts)

    _spend_and_end(src, b, info, counts)

    limit = model_cfg.get("per_instance_cost_limit")
    ceiling = float(limit) if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0 else 0.0
    ps = replay_d.get("problem_statement") if isinstance(replay_d.get("problem_statement"), dict) else {}
    task_id = ps.get("id") if isinstance(ps.get("id"), str) else src.stem
    objective = next((ps[k] for k in ("text", "github_url") if isinstance(ps.get(k), str)), None)
    if objective is None:
        first = next((m for m in history if m["role"] == "user" and not _is_demo(m)), None)
        objective = src.text(first.get("content"), "objective") if first is not None else None
    env_cfg = replay_d.get("env") if isinstance(replay_d.get("env"), dict) else {}
    repo = env_cfg.get("repo") if isinstance(env_cfg.get("repo"), dict) else {}
    config = {"model": model}
    if env:
        config["environment"] = env
    for k in ("github_url", "repo_name", "base_commit"):
        if isinstance(repo.get(k), str):
            config[f"repo_{k}" if not k.startswith("repo") else k] = repo[k]
    b.notes["counts"] = counts
    if alignment:
        b.notes["history_alignment"] = alignment
    b.notes["info"] = info
    if replay is not None:
        b.notes["replay_config"] = replay
    other = {k: v for k, v in d.items() if k not in ("trajectory", "history", "info", "environment", "replay_config")}
    if other:
        for k, v in other.items():   # kept as notes.unmapped_fields.<key>
            src.check_value(v, join("$", k), headroom=2)
        b.notes["unmapped_fields"] = other
    return b.finish(task_id=task_id, objective=objective, requester=None, budget_ceiling_usd=ceiling, config=config)


def _from_history(src: Source, b: Builder, history: list, assistant_at: list[int], turn,
                  counts: dict[str, int]) -> None:
    """Turns from a history-only file: assistant message j is turn j (see module doc)."""
    bounds = assistant_at + [len(history)]
    for n, j in enumerate(assistant_at):
        m, where = history[j], join("history", j)
        action = src.get(m, "action", str, where, default="")
        thought = src.get(m, "thought", str, where, default="")
        response = src.text(m.get("content"), join(where, "content"))
        calls = message_tool_calls(src, m, where) if m.get("tool_calls") else (
            [_command_call(action, join(where, "action"))] if action.strip() else [])
        ops = turn(j, where, action=action, response=response, thought=thought, calls=calls,
                   delivered=history[:j], missing="")
        open_ops = [(op, c[2]) for op, c in zip(ops, calls)]
        for i in range(j + 1, bounds[n + 1]):
            r, rw = history[i], join("history", i)
            text = src.text(r.get("content"), join(rw, "content"))
            if r["role"] == "tool":
                ids = r.get("tool_call_ids")
                if ids is None:
                    ids = [r["tool_call_id"]] if isinstance(r.get("tool_call_id"), str) else []
                src.expect(ids, list, join(rw, "tool_call_ids"))
                match = next((x for x in open_ops if x[1] in ids), None) if ids else (open_ops[0] if open_ops else None)
                if match is None:
                    op = f"result-{i:04d}"
                    b.warnings.append(f"{rw}: a tool message that answers no open call; kept as {op} without an intent")
                else:
                    open_ops.remove(match)
                    op = match[0]
                b.result(op, rw, observation=text,
                         evidence={"source_call_id": ",".join(map(str, ids))} if ids else None)
                counts["tool_results"] += 1
            elif r["role"] == "user" and open_ops and not m.get("tool_calls"):
                op, _ = open_ops.pop(0)
                b.result(op, rw, observation=text)
                counts["tool_results"] += 1
            else:
                b.message_input(rw, {"role": r["role"], "content": text})
                counts["inputs"] += 1
        if open_ops:
            counts["unanswered"] += len(open_ops)
            b.warnings.append(f"{where}: no recorded observation for {', '.join(op for op, _ in open_ops)}; "
                              "stays in doubt")
    if not assistant_at:
        b.warnings.append("history holds no assistant message: no model turn to import")
