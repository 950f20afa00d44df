"""Reader for tau-bench trajectories, one (task, trial) per file (§11.6, §11.7; table 1).

Shape: ``{task_id, trial, reward, info: {task, source, user_cost, reward_info}, traj: [OpenAI
chat messages]}``. ``traj`` is the message list the agent's model was called with, so it maps
exactly as :mod:`.openai_messages` does: each assistant message is a turn whose delivered input
is the list before it, each ``tool_calls`` entry a reconstructed ToolIntent, each ``tool``
message the ToolResult of the call it answers, and the (simulated) user's and the system
messages RuntimeInputs. A tool message whose text starts with ``Error:`` is tau-bench's report
of a tool that raised: its ToolResult is ``failed`` and keeps the message.

What is *not* agent evidence stays out of the events and goes to the notes: ``info.task`` (the
user simulator's hidden instruction and the expected actions and outputs), ``reward`` and
``reward_info`` (the evaluator's verdict), and ``info.user_cost`` (what the user *simulator*
spent; the agent's own spending is not recorded, hence ``cost`` in lacks). A file with a
``reward`` is a finished, scored episode: a final ``ControlChanged`` to ``COMPLETED`` records
that, with the reward and ``info.source`` (what ended it) in its reason.

Raises :class:`~kernel_lib.importers.ImportFormatError` naming the file and the JSON path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernel_lib.importers._common import NOT_RECORDED, Builder, ImportResult, Source, join
from kernel_lib.importers.openai_messages import map_messages

FORMAT = "tau-bench"


def _tool_error(m: dict[str, Any], text: str) -> bool:
    return m.get("role") == "tool" and text.startswith("Error:")


def import_tau_bench(path: str | Path) -> ImportResult:
    """Import one tau-bench trajectory file (see module doc).

    Raises:
        ImportFormatError: unreadable or non-JSON file; a top level that is not an object with a
            ``traj`` list; a message, content, tool call or ``info`` field of the wrong type; tool
            call arguments that are not a JSON object.
    """
    src = Source(FORMAT, path)
    d = src.data
    if not isinstance(d, dict) or "traj" not in d:
        got = f"an object with keys {sorted(d)[:6]}" if isinstance(d, dict) else f"{type(d).__name__}"
        raise src.fail("$", f"expected a tau-bench object with a 'traj' message list, got {got}")
    traj = src.expect(d["traj"], list, "traj")
    if not traj:
        raise src.fail("traj", "no messages")
    info = src.get(d, "info", dict, "$", default={})
    task = src.get(info, "task", dict, "info", default={})
    task_id = src.get(d, "task_id", (int, str), "$")
    trial = src.get(d, "trial", (int, str), "$")
    reward = src.get(d, "reward", (int, float), "$")
    user_cost = src.get(info, "user_cost", (int, float), "info")
    end_source = src.get(info, "source", str, "info")
    requester = src.get(task, "user_id", str, "info.task")
    model = src.get(d, "model", str, "$") or src.get(info, "model", str, "info") or NOT_RECORDED

    b = Builder(src, f"kernel_lib.imports/{FORMAT}")
    b.lacks.update({"cost", "tool-descriptions"})
    if model == NOT_RECORDED:
        b.lacks.add("model-provenance")
    counts = map_messages(b, src, traj, "traj", model=model, is_error=_tool_error)
    if reward is not None:
        b.end("reward", to_state="COMPLETED",
              reason=f"tau-bench episode ended (info.source={end_source!r}); reward {reward}")
    else:
        b.lacks.add("terminal-state")
    b.notes.update({
        "counts": counts,
        "task_id": task_id, "trial": trial, "reward": reward,
        "evaluation": {"reward_info": info.get("reward_info"), "ended_by": end_source},
        "user_simulator": {"instruction_and_expected_outcome": task, "cost_usd": user_cost,
                           "note": "the simulated user's script and the evaluator's expected actions; "
                                   "the agent never received these, and the cost is the simulator's, "
                                   "not the agent's"},
    })
    other = {k: v for k, v in d.items() if k not in ("traj", "info", "task_id", "trial", "reward", "model")}
    other_info = {k: v for k, v in info.items() if k not in ("task", "source", "user_cost", "reward_info", "model")}
    if other or other_info:
        b.notes["unmapped_fields"] = {**other, **({"info": other_info} if other_info else {})}
    first_user = next((m for m in traj if isinstance(m, dict) and m.get("role") == "user"), None)
    objective = src.text(first_user.get("content"), join("traj", traj.index(first_user)) + ".content") \
        if first_user is not None else None
    tid = f"task{task_id:02d}" if isinstance(task_id, int) else (task_id or src.stem)
    return b.finish(task_id=tid, objective=objective, requester=requester,
                    config={"model": model, "trial": "" if trial is None else str(trial)})
