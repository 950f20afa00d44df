"""Reader for Who&When failure-attribution logs (§11.7; table 1).

Shape: ``{history: [{content, role, name?}], question, question_ID, ground_truth,
is_corrected (or is_correct), mistake_agent, mistake_step, mistake_reason, level?,
mistake_type?, system_prompt?}``. The hand-crafted subset names the speaker in ``role``
(``WebSurfer``, ``Orchestrator (thought)``, ``Orchestrator (-> WebSurfer)``, ``human``); the
algorithm-generated subset puts it in ``name`` (``Excel_Expert``, ``Computer_terminal``) beside
a chat ``role``.

Mapping: entry i of ``history`` keeps position i, so the labels line up with the events.

* An entry spoken by an agent is turn i: ``ContextBuilt(turn-000i)`` + ``ModelReplied`` with the
  text. The speaker (``name``, else ``role`` without its parenthesised suffix) and the raw role
  go into ``request_config`` and the proposal; ``Orchestrator (-> X)`` also records
  ``addressed_to: X``. The log is a shared transcript: what each agent's model actually
  received is not in it, so every turn's delivered input is the not-recorded sentinel.
* An entry from the human, the system, or the code executor (``Computer_terminal``) is not a
  model turn: it is a ``RuntimeInput(kind="order")`` at its place. Who&When records no
  structured tool calls, so there are no ToolIntent/ToolResult events.
* The labels (``mistake_agent``, ``mistake_step``, ``mistake_reason``, ``mistake_type``), the
  answer and the correction flag are the benchmark's ground truth about the run, not something
  the agents did: they go to the notes, with ``mistake_invocation_id`` naming the turn the step
  points at and whether that turn's speaker is the labelled agent.

Raises :class:`~kernel_lib.importers.ImportFormatError` naming the file and the JSON path.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kernel_lib.importers._common import NOT_RECORDED, Builder, ImportResult, Source, join, turn_id

FORMAT = "who-and-when"

#: Speakers (lower-cased ``name``, or ``role`` when there is no name) that are not models.
NON_MODEL_SPEAKERS = frozenset({"human", "user", "system", "computer_terminal"})
_ADDRESSED = re.compile(r"\(\s*->\s*([^)]+?)\s*\)")
_LABELS = ("mistake_agent", "mistake_step", "mistake_reason", "mistake_type")
_KEPT = ("question", "question_ID", "ground_truth", "groundtruth", "is_corrected", "is_correct", "level",
         "system_prompt", "history") + _LABELS


def speaker_of(role: str, name: str | None) -> str:
    """Who spoke an entry: its ``name``, else its ``role`` without a ``(...)`` suffix."""
    if name:
        return name
    return role.split("(", 1)[0].strip() or role


def is_model_turn(role: str, name: str | None) -> bool:
    """True unless the entry comes from the human, the system or the code executor."""
    return role.lower() not in ("human", "system") and speaker_of(role, name).lower() not in NON_MODEL_SPEAKERS


def import_who_when(path: str | Path) -> ImportResult:
    """Import one Who&When log (see module doc).

    Raises:
        ImportFormatError: unreadable or non-JSON file; a top level that is not an object with a
            ``history`` list; an entry that is not an object, lacks ``role``, or has ``content``
            or ``name`` of the wrong type.
    """
    src = Source(FORMAT, path)
    d = src.data
    if not isinstance(d, dict) or "history" not in d:
        got = f"an object with keys {sorted(d)[:6]}" if isinstance(d, dict) else type(d).__name__
        raise src.fail("$", f"expected a Who&When object with a 'history' list, got {got}")
    history = src.expect(d["history"], list, "history")
    if not history:
        raise src.fail("history", "no entries")
    question = src.get(d, "question", str, "$")
    qid = src.get(d, "question_ID", (str, int), "$")

    b = Builder(src, f"kernel_lib.imports/{FORMAT}")
    b.lacks.update({"tool-calls", "model-provenance", "delivered-input", "cost", "per-turn-usage", "terminal-state"})
    speakers: dict[int, str] = {}
    turns = inputs = 0
    human_seen = False
    for i, m in enumerate(history):
        where = join("history", i)
        src.expect(m, dict, where, "an entry object {content, role, name?}")
        role = src.get(m, "role", str, where, required=True)
        name = src.get(m, "name", str, where)
        text = src.text(m.get("content"), join(where, "content"))
        who = speaker_of(role, name)
        if not is_model_turn(role, name):
            human_seen |= who.lower() in ("human", "user")
            b.message_input(where, {"role": role, **({"name": name} if name else {}), "content": text})
            inputs += 1
            continue
        speakers[i] = who
        meta: dict[str, Any] = {"agent": who, "source_role": role}
        to = _ADDRESSED.search(role)
        if to:
            meta["addressed_to"] = to.group(1)
        inv = b.context(i, where, model=NOT_RECORDED, messages=None, request_config=meta)
        b.reply(inv, where, reply=text, proposal=meta)
        turns += 1
    b.notes["delivered_input_not_recorded"] = ("Who&When keeps the shared transcript only; what each agent's "
                                               "model received is not recorded, for every turn")
    labels = {k: d[k] for k in _LABELS if k in d}
    if labels:
        step = labels.get("mistake_step")
        # a step index is a whole number >= 0 (or its decimal text): a bool is not one (True is not step 1),
        # and a negative number would silently count from the end of the history
        pos = (step if isinstance(step, int) and not isinstance(step, bool) and step >= 0
               else int(step.strip()) if isinstance(step, str) and step.strip().isascii() and step.strip().isdigit()
               else None)
        if pos is None and step is not None:
            b.warnings.append(f"mistake_step {step!r} is not a step index (a whole number >= 0); the label is kept "
                              "as recorded and points at no turn")
        if pos is not None:
            labels["mistake_position"] = join("history", pos)
            labels["mistake_invocation_id"] = turn_id(pos) if pos in speakers else None
            labels["speaker_at_mistake_step"] = speakers.get(pos)
            if "mistake_agent" in d:
                labels["speaker_matches_mistake_agent"] = speakers.get(pos) == d["mistake_agent"]
            if pos >= len(history):
                b.warnings.append(f"mistake_step {step!r} is beyond the history ({len(history)} entries)")
        b.notes["ground_truth_labels"] = labels
    for k in ("ground_truth", "groundtruth", "is_corrected", "is_correct", "level", "question_ID"):
        if k in d:
            b.notes.setdefault("benchmark", {})[k] = d[k]
    if "system_prompt" in d:
        b.notes["system_prompts"] = d["system_prompt"]
    other = {k: v for k, v in d.items() if k not in _KEPT}
    if other:
        b.notes["unmapped_fields"] = other
    b.notes["counts"] = {"model_turns": turns, "inputs": inputs, "agents": sorted(set(speakers.values()))}
    if question is None:   # the first human message states the task
        first = next((m for m in history if m["role"].lower() == "human"), None)
        question = src.text(first.get("content"), "objective") if first is not None else None
    return b.finish(task_id=str(qid) if qid is not None else src.stem, objective=question,
                    requester="human" if human_seen else None)
