"""A live looping agent: a seeded policy on a real workspace that falls into figure 3's flip-flop,
caught at the repeat and driven through table 7's three tiers (Failure Recovery, "Semantic
Watchdog Timers").

The world (:func:`write_world`): a tiny project in a real directory, ``app/config.py`` with

    RETRIES = 3
    TIMEOUT_S = 30

and two checks that pull line 2 in opposite directions: ``test_timeout_covers_slow_start``
(``TIMEOUT_S >= 45``) and ``test_total_wait_within_budget`` (``RETRIES * TIMEOUT_S <= 120``). Raising the
timeout to 45 fixes the first and breaks the second; lowering it to 40 does the opposite. The
real fix changes the other line (``RETRIES = 2``).

The agent (:func:`policy`, a seeded stand-in for a model, deterministic in its delivered context
and the seed) only ever looks at the newest failure, so it edits line 2 to 45, runs the tests,
edits it to 40, runs the tests, edits it to 45 again: the workspace returns to a state it had
two mutative steps earlier (k = 2), and the watchdog catches the repeat. Every model call and
every tool call goes through the dispatch gate (eq. 1), the saga (a sandbox and a branch, and in
the ``pivot`` scenario a notification e-mail, a tier-III pivot) runs through
:class:`~kernel_lib.recovery.runner.SagaRunner`, and Chapter 11 checkpoints of the workspace are
captured before every mutative step.

The ladder, with a stubborn policy (``obey_interrupt=0``, the default):

* tier 1 at the first repeat: the interrupt goes into the next context; the policy ignores it;
* tier 2 at the next repeat (within the epoch): the workspace is rewound to the checkpoint
  before the cycle's onset and the repeating edit is masked; the gate refuses it when the
  policy proposes it again, and the policy works around the mask by writing the same file
  content with another tool (a different h_tool, the same state);
* tier 3 when the state repeats again: ERR_SEMANTIC_DEADLOCK, the saga compensated (no pivot)
  or the trajectory frozen (past the pivot), capabilities revoked.

With ``obey_interrupt=1`` the interrupt breaks the loop (the policy tries the other line) and
the run ends resolved after tier 1.

The effects are counted where they land, not from the log: every write the workspace receives
(an edit, a rewind) is appended to an effects ledger beside the workspace, written and fsynced by
the receiver; the saga's services count their own requests; the model's side is the delivered
context. :func:`run_looping_agent` resumes a crashed run from the log (the same call again, on
the same store, workspace and services); ``python -m kernel_lib.live.looping_agent`` runs it in a
worker process that a test kills with a real SIGKILL.

Stand-ins: the state-hash detector here (:func:`_detect_state_cycle`) and the workspace hash
(:func:`workspace_state_sha256`) are minimal private versions of ``detectors`` and ``workspace``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernel_lib.errors import ActionMaskedRefusal, ConfigError, SemanticDeadlockError

__all__ = ["LoopResult", "run_looping_agent", "write_world", "policy", "workspace_state_sha256", "run_checks",
           "WorkspaceService", "SCENARIOS", "loop_cost", "count_tokens"]

SCENARIOS = ("no_pivot", "pivot")
GRANT_ID = "grant-loop"
MODEL = "seeded-loop-policy"
WORKSPACE_TOOLS = ("edit_line", "write_file", "run_tests")
CONFIG = "app/config.py"
#: Names never part of the workspace state (interpreter caches, scratch).
IGNORE = ("__pycache__", ".pytest_cache", "scratch")
INPUT_USD_PER_MTOK, OUTPUT_USD_PER_MTOK = 3.0, 15.0   # the illustrative prices of Napkin Math 0.3

_INITIAL_CONFIG = "RETRIES = 3\nTIMEOUT_S = 30\n"
_CHECKS = '''"""The checks the agent must pass (run by the looping agent's run_tests tool)."""
from app import config


def test_timeout_covers_slow_start():
    assert config.TIMEOUT_S >= 45


def test_total_wait_within_budget():
    assert config.RETRIES * config.TIMEOUT_S <= 120
'''


def write_world(workspace: str | os.PathLike) -> Path:
    """Create the looping agent's project in ``workspace`` (an empty or missing directory) and
    return its path. Raises ConfigError when the directory holds anything."""
    ws = Path(workspace)
    if ws.exists() and any(ws.iterdir()):
        raise ConfigError(f"{ws} is not empty; the looping agent's world is written into an empty directory")
    (ws / "app").mkdir(parents=True, exist_ok=True)
    (ws / "app" / "__init__.py").write_text("")
    (ws / CONFIG).write_text(_INITIAL_CONFIG)
    (ws / "tests").mkdir(exist_ok=True)
    (ws / "tests" / "test_config.py").write_text(_CHECKS)
    return ws


def _config_values(ws: Path) -> dict[str, int]:
    out = {}
    for line in (ws / CONFIG).read_text().splitlines():
        m = re.fullmatch(r"\s*([A-Z_]+)\s*=\s*(-?\d+)\s*(#.*)?", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def run_checks(workspace: str | os.PathLike) -> dict[str, Any]:
    """The two checks of ``tests/test_config.py``, evaluated on the real file ``app/config.py``
    (read and parsed here, not imported: no interpreter caches, milliseconds per run). Returns
    ``{"passed": [...], "failed": [...], "tests_passed": n, "tests_failed": n}``."""
    v = _config_values(Path(workspace))
    r, t = v.get("RETRIES"), v.get("TIMEOUT_S")
    results = {"test_timeout_covers_slow_start": t is not None and t >= 45,
               "test_total_wait_within_budget": r is not None and t is not None and r * t <= 120}
    passed = [k for k, ok in results.items() if ok]
    failed = [k for k, ok in results.items() if not ok]
    return {"passed": passed, "failed": failed, "tests_passed": len(passed), "tests_failed": len(failed)}


def workspace_state_sha256(workspace: str | os.PathLike) -> str:
    """The environment's canonical state hash: SHA-256 of the sorted file tree (paths and content
    digests; timestamps and modes left out, :data:`IGNORE` names skipped).

    TODO(wd-hash): replace with ``kernel_lib.recovery.watchdog.workspace.WorkspaceHasher``."""
    root = Path(workspace)
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORE)
        for f in sorted(filenames):
            if f in IGNORE or f.endswith(".pyc"):
                continue
            p = Path(dirpath) / f
            rel = p.relative_to(root).as_posix()
            h.update(rel.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def count_tokens(text: str) -> int:
    """Tokens of ``text`` as a word-and-punctuation count (no model tokenizer is installed; a BPE
    tokenizer gives a comparable count for English and code). Used for the measured loop cost."""
    return len(re.findall(r"\w+|[^\w\s]", text))


# ------------------------------------------------------------------------------------------------
# the workspace: the receiver of edits and rewinds, with its own effects ledger
# ------------------------------------------------------------------------------------------------


class WorkspaceService:
    """The real workspace directory as the receiver of the agent's edits and the watchdog's
    rewinds. Every write it applies is appended (and fsynced) to ``ledger`` — the receiver's own
    count of effects, independent of the trajectory log. A request whose result is already
    there writes nothing and is not counted (an edit or a rewind repeated after a crash).
    """

    def __init__(self, workspace: str | os.PathLike, ledger: str | os.PathLike, blobs: Any = None):
        self.workspace = Path(workspace)
        self.ledger = Path(ledger)
        self.blobs = blobs

    def _note(self, entry: dict[str, Any]) -> None:
        with open(self.ledger, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def effects(self) -> list[dict[str, Any]]:
        """The ledger's entries, oldest first."""
        if not self.ledger.exists():
            return []
        return [json.loads(ln) for ln in self.ledger.read_text().splitlines() if ln.strip()]

    def _write(self, rel: str, data: bytes) -> bool:
        p = self.workspace / rel
        if p.exists() and p.read_bytes() == data:
            return False
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp-write")
        tmp.write_bytes(data)
        os.replace(tmp, p)
        return True

    def edit_line(self, path: str, line: int, text: str, operation_id: str) -> bool:
        lines = (self.workspace / path).read_text().splitlines()
        if not 1 <= line <= len(lines):
            raise ConfigError(f"{path} has {len(lines)} lines; no line {line}")
        lines[line - 1] = text
        wrote = self._write(path, ("\n".join(lines) + "\n").encode())
        if wrote:
            self._note({"effect": "edit", "tool": "edit_line", "path": path, "operation_id": operation_id})
        return wrote

    def write_file(self, path: str, content: str, operation_id: str) -> bool:
        wrote = self._write(path, content.encode())
        if wrote:
            self._note({"effect": "edit", "tool": "write_file", "path": path, "operation_id": operation_id})
        return wrote

    def restore(self, checkpoint: dict[str, Any]) -> bool:
        """Rewind the workspace to ``checkpoint`` (an entry of ``record.checkpoints``): its tree is
        read back from the checkpoint's blobs (digests verified) and each differing file written,
        each extra file removed. Returns whether anything was written (the
        :class:`~kernel_lib.recovery.watchdog.runner.WorkspaceRestorer` contract)."""
        from kernel_lib.checkpoint.restore import load_checkpoint

        lc = load_checkpoint(self.blobs, checkpoint["manifest_sha256"])
        tree = lc.tree
        changed = []
        for rel, entry in sorted(tree.files.items()):
            data = self.blobs.get(entry.sha256, kind="file blob", needed_by="watchdog tier 2")
            if self._write(rel, data):
                changed.append(rel)
        for dirpath, dirnames, filenames in os.walk(self.workspace):
            dirnames[:] = [d for d in dirnames if d not in IGNORE]
            for f in filenames:
                rel = (Path(dirpath) / f).relative_to(self.workspace).as_posix()
                if f not in IGNORE and not f.endswith(".pyc") and rel not in tree.files:
                    os.unlink(Path(dirpath) / f)
                    changed.append(rel)
        if changed:
            self._note({"effect": "restore", "checkpoint_id": checkpoint["checkpoint_id"], "files": changed})
        return bool(changed)

    def transport(self, intent: Any) -> Any:
        """The gate's tool transport for :data:`WORKSPACE_TOOLS`: applies the call and answers with
        the workspace's state hash after it (and the check results, for ``run_tests``)."""
        from kernel_lib.core.proposals import ToolReply

        a = dict(intent.arguments)
        if intent.tool == "edit_line":
            wrote = self.edit_line(a["path"], a["line"], a["text"], intent.operation_id)
            out: dict[str, Any] = {"applied": True, "changed": wrote}
        elif intent.tool == "write_file":
            wrote = self.write_file(a["path"], a["content"], intent.operation_id)
            out = {"applied": True, "changed": wrote}
        elif intent.tool == "run_tests":
            out = run_checks(self.workspace)
        else:
            return ToolReply("failed", outcome={"error": f"unknown tool {intent.tool}"}, observation_complete=True)
        out["workspace_sha256"] = workspace_state_sha256(self.workspace)
        return ToolReply("completed", outcome=out, observation_complete=True)


# ------------------------------------------------------------------------------------------------
# the model stand-in: a seeded policy over its delivered context
# ------------------------------------------------------------------------------------------------

_LAST = "LAST OBSERVATION: "


def policy(delivered_input: str, *, seed: int, turn: int, obey_interrupt: float = 0.0) -> dict[str, Any]:
    """The seeded policy: the next action from the delivered context (the model stand-in).

    It reads the context's last line (``LAST OBSERVATION: {...}``) and whether a watchdog
    interrupt arrived since its last edit. Deterministic in (context, seed, turn). Returns
    ``{"tool", "arguments", "thought"}`` (tool ``finish`` ends the run)."""
    rng = random.Random(f"{seed}:{turn}")
    last_line = delivered_input.rstrip("\n").rsplit("\n", 1)[-1]
    obs = json.loads(last_line[len(_LAST):]) if last_line.startswith(_LAST) else {}
    kind = obs.get("kind")
    if kind in (None, "edit", "restore"):
        return {"tool": "run_tests", "arguments": {}, "thought": "Run the tests to see where we stand."}
    if kind == "refused":
        target = obs.get("arguments", {})
        cur = obs.get("config", _INITIAL_CONFIG)
        lines = cur.splitlines()
        line = target.get("line", 2)
        lines[line - 1] = target.get("text", "")
        return {"tool": "write_file", "arguments": {"path": CONFIG, "content": "\n".join(lines) + "\n"},
                "thought": "That edit was refused; write the file with the same change instead."}
    failed = obs.get("failed", [])
    if not failed:
        return {"tool": "finish", "arguments": {}, "thought": "All checks pass."}
    if obs.get("interrupted") and rng.random() < obey_interrupt:
        return {"tool": "edit_line", "arguments": {"path": CONFIG, "line": 1, "text": "RETRIES = 2"},
                "thought": "The watchdog says I am going round in circles: change the other line instead."}
    if "test_timeout_covers_slow_start" in failed:
        return {"tool": "edit_line", "arguments": {"path": CONFIG, "line": 2, "text": "TIMEOUT_S = 45"},
                "thought": "The timeout is too short for a slow start: raise it."}
    return {"tool": "edit_line", "arguments": {"path": CONFIG, "line": 2, "text": "TIMEOUT_S = 40"},
            "thought": "The total wait is over budget: lower the timeout."}


# ------------------------------------------------------------------------------------------------
# reading the log: turns, the context, the detector stand-in
# ------------------------------------------------------------------------------------------------


def _turn_ids(n: int) -> tuple[str, str]:
    return f"t{n}", f"t{n}.op"


def _tool_ops(record: Any) -> list[tuple[int, Any]]:
    """The agent's workspace tool operations in log order: (first decision/intent position, op)."""
    out = []
    for oid, op in record.operations.items():
        if op.kind == "tool" and re.fullmatch(r"t\d+\.op", oid):
            seqs = [a.intent_sequence for a in op.attempts.values() if a.intent_sequence is not None]
            auth = record.decisions.get(op.authorization_ref or "", {}).get("sequence_number")
            pos = min(seqs) if seqs else auth
            if pos is not None:
                out.append((pos, op))
    return sorted(out, key=lambda x: x[0])


def _backtrack_positions(record: Any) -> list[int]:
    return [r["sequence_number"] for r in record.recovery_records
            if r.get("event_type") == "WatchdogIntervened" and r.get("phase") == "completed" and r.get("tier") == 2]


def _detect_state_cycle(record: Any, window: int = 8) -> Any:
    """State-hash cycle over the mutative steps since the last backtrack (figure 3, the listing):
    the newest mutative step whose resulting state equals one of the previous ``window`` states,
    as a :class:`~kernel_lib.recovery.watchdog.model.Detection` at that step's intent position.

    TODO(wd-detect): replace with ``kernel_lib.recovery.watchdog.detectors`` over the log's steps."""
    from kernel_lib.core.action_signature import action_signature
    from kernel_lib.recovery.watchdog.model import Detection

    since = max(_backtrack_positions(record), default=0)
    states: list[tuple[int, str, str]] = []   # (position, state hash, signature) of mutative steps
    for pos, op in _tool_ops(record):
        if pos <= since or op.repeat_contract == "read_only" or op.status != "established":
            continue
        h = (op.outcome or {}).get("workspace_sha256")
        if h:
            states.append((pos, h, action_signature(op.tool, op.arguments)))
    if since:   # the state the backtrack restored is the window's first entry
        base = next((r for r in reversed(record.recovery_records) if r.get("event_type") == "WatchdogIntervened"
                     and r.get("sequence_number") == since), None)
        if base is not None:
            rt = [ri for ri in record.runtime_inputs if ri.get("name") == "looping_agent.restored_state"
                  and ri["value"].get("intervention_id") == base.get("intervention_id")]
            if rt:
                states.insert(0, (since, rt[-1]["value"]["workspace_sha256"], ""))
    if len(states) < 2:
        return None
    pos, h, sig = states[-1]
    prior = states[-1 - window:-1]
    for k, (p_pos, p_h, _s) in enumerate(reversed(prior), start=1):
        if p_h == h:
            return Detection(position=pos, kind="state_hash_cycle", evidence={
                "period": k, "positions": [p_pos, pos], "state_sha256": h, "action_signature": sig,
                "onset_position": p_pos})
    return None


def _render_context(record: Any, objective: str) -> str:
    """The model's delivered input, built from the log only: the task, each turn's action and
    observation (turns a backtrack pruned replaced by one line), watchdog interrupts, refusals,
    and the last observation as one JSON line for the policy."""
    lines = [f"TASK: {objective}", "TOOLS: edit_line(path, line, text), write_file(path, content), run_tests()"]
    pruned: list[tuple[int, int]] = []
    for r in record.recovery_records:
        if r.get("event_type") == "WatchdogIntervened" and r.get("phase") == "completed" and r.get("tier") == 2:
            pruned.append((r.get("onset_position") or 0, r["sequence_number"]))
    events: list[tuple[int, str, dict[str, Any] | None]] = []
    for pos, op in _tool_ops(record):
        if any(a <= pos <= b for a, b in pruned):
            continue
        args = json.dumps(op.arguments, sort_keys=True)
        if op.status == "denied":   # never got an intent: what was asked is the turn's proposal
            asked = _proposal_of(record, op.operation_id) or {}
            args = json.dumps(asked.get("arguments", {}), sort_keys=True)
            events.append((pos, f"ACTION {asked.get('tool')} {args} -> REFUSED by the gate (masked action)",
                           {"kind": "refused", "arguments": asked.get("arguments", {})}))
        elif op.status == "established":
            out = op.outcome or {}
            if op.tool == "run_tests":
                events.append((pos, f"ACTION run_tests -> passed {out.get('passed')} failed {out.get('failed')}",
                               {"kind": "tests", "failed": out.get("failed", [])}))
            else:
                events.append((pos, f"ACTION {op.tool} {args} -> applied", {"kind": "edit"}))
    for a, b in pruned:
        events.append((b, f"[BACKTRACK] turns #{a}..#{b} were rewound: the workspace is back at a checkpoint and "
                          "the repeated action is masked", {"kind": "restore"}))
    for ri in record.runtime_inputs:
        if ri.get("kind") == "observation":
            events.append((ri["sequence_number"], str(ri["value"].get("text", "")), None))
    events.sort(key=lambda e: e[0])
    last: dict[str, Any] = {}
    interrupted = False
    for _pos, text, obs in events:
        lines.append(text)
        if obs is None:
            interrupted = True
            continue
        if obs["kind"] in ("edit", "restore", "refused"):
            interrupted = interrupted and obs["kind"] == "refused"
        last = dict(obs)
    last["interrupted"] = interrupted
    if last.get("kind") == "refused":
        last["config"] = _current_config_hint(record)
    lines.append(_LAST + json.dumps(last, sort_keys=True))
    return "\n".join(lines) + "\n"


def _proposal_of(record: Any, tool_operation_id: str) -> dict[str, Any] | None:
    """The model proposal that turn's tool operation ``t<n>.op`` carried out."""
    base = tool_operation_id[:-len(".op")]
    for oid, op in record.operations.items():
        if op.kind == "model" and (oid == base or oid.startswith(base + ".r")) and op.status == "established":
            return (op.outcome or {}).get("proposal")
    return None


def _current_config_hint(record: Any) -> str:
    """The config file as the agent's own actions since the last backtrack left it (what the
    agent knows without reading the workspace)."""
    lines = _INITIAL_CONFIG.splitlines()
    since = max(_backtrack_positions(record), default=0)
    for pos, op in _tool_ops(record):
        if pos <= since or op.status != "established":
            continue
        if op.tool == "edit_line":
            lines[op.arguments["line"] - 1] = op.arguments["text"]
        elif op.tool == "write_file":
            lines = op.arguments["content"].splitlines()
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------------


@dataclass
class LoopResult:
    """What :func:`run_looping_agent` did.

    ``outcome``: ``resolved`` (the checks pass), ``compensated`` (tier 3 before the pivot),
    ``frozen`` (tier 3 past the pivot) or ``ceiling`` (the turn ceiling stopped it).
    ``interventions``: the log's watchdog interventions (:meth:`Intervention.to_json`).
    ``refused``: masked proposals the gate refused. ``turns``: model turns taken.
    ``effects``: the workspace's own ledger; ``services``: the saga services' applied counts;
    ``revoked_leases``: leases tier 3 revoked. ``loop_cost``: the measured token cost
    (:func:`loop_cost`). ``positions``: the gate positions reported in this call (a crash test
    counts them). ``error``: the SemanticDeadlockError's text, when tier 3 ended the run."""

    outcome: str
    interventions: list[dict[str, Any]]
    refused: int
    turns: int
    log_head: int
    effects: list[dict[str, Any]]
    services: dict[str, Any]
    loop_cost: dict[str, Any]
    control_state: str
    revoked_leases: list[str] = field(default_factory=list)
    positions: list[str] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("outcome", "interventions", "refused", "turns", "log_head", "effects",
                                               "services", "loop_cost", "control_state", "revoked_leases",
                                               "positions", "error")}


def loop_cost(record: Any, *, turn_ceiling: int = 50) -> dict[str, Any]:
    """The measured cost of the loop, for Napkin Math 0.3: per model turn the input tokens of its
    delivered context and its output tokens (:func:`count_tokens`); the loop's first turn (the
    turn before the cycle's first edit), the tokens spent from there to the first detection and
    to the end, the measured growth Δ of the re-sent context per turn, and the arithmetic-series
    projection to the turn ceiling (n·s0 + Δ·n(n−1)/2, no prefix caching) with its ratio to what
    detection at the first repeat cost. USD at 3 and 15 USD per million input and output tokens."""
    turns = []
    for oid, op in record.operations.items():
        if op.kind == "model" and op.status == "established" and op.outcome:
            m = re.fullmatch(r"t(\d+)(\.r\d+)?", oid)
            if m:
                turns.append((int(m.group(1)), op.outcome.get("input_tokens", 0), op.outcome.get("output_tokens", 0),
                              min(a.intent_sequence or 0 for a in op.attempts.values())))
    turns.sort()
    ivs = [r for r in record.recovery_records if r.get("event_type") == "WatchdogIntervened"
           and r.get("phase") == "intent"]
    out: dict[str, Any] = {"turns": len(turns), "input_tokens_per_turn": [t[1] for t in turns],
                           "output_tokens_per_turn": [t[2] for t in turns], "tokenizer": "word-and-punctuation count",
                           "turn_ceiling": turn_ceiling}
    if not ivs or not turns:
        return out
    first = ivs[0]
    onset = first.get("onset_position") or first["sequence_number"]
    loop_turns = [t for t in turns if t[3] < onset]
    start = loop_turns[-1][0] if loop_turns else turns[0][0]
    looped = [t for t in turns if t[0] >= start]
    detect = [t for t in looped if t[3] < first["sequence_number"]]
    s0 = looped[0][1]
    growth = [b[1] - a[1] for a, b in zip(looped, looped[1:])]
    delta = sum(growth) / len(growth) if growth else 0.0
    n_det = len(detect)
    out_tok = sum(t[2] for t in looped) / max(1, len(looped))

    def usd(inp: float, outp: float) -> float:
        return round(inp * INPUT_USD_PER_MTOK / 1e6 + outp * OUTPUT_USD_PER_MTOK / 1e6, 6)

    ceiling_in = turn_ceiling * s0 + delta * turn_ceiling * (turn_ceiling - 1) / 2
    det_in = sum(t[1] for t in detect)
    out.update(loop_first_turn=start, first_turn_tokens=s0, growth_tokens_per_turn=round(delta, 2),
               turns_to_detection=n_det, input_tokens_to_detection=det_in,
               input_tokens_whole_loop=sum(t[1] for t in looped),
               output_tokens_whole_loop=sum(t[2] for t in looped),
               usd_to_detection=usd(det_in, out_tok * n_det),
               ceiling_input_tokens_projected=round(ceiling_in),
               usd_to_ceiling_projected=usd(ceiling_in, out_tok * turn_ceiling),
               ratio_ceiling_to_detection=round(ceiling_in / det_in, 2) if det_in else None)
    return out


def _model_transport(seed: int, obey_interrupt: float, turn: int) -> Callable[[Any], Any]:
    from kernel_lib.core.proposals import ModelReply

    def call(ctx: Any) -> Any:
        prop = policy(ctx.delivered_input, seed=seed, turn=turn, obey_interrupt=obey_interrupt)
        text = json.dumps(prop, sort_keys=True)
        tin, tout = count_tokens(ctx.delivered_input), count_tokens(text)
        return ModelReply("complete", reply=prop["thought"], proposal=prop, input_tokens=tin, output_tokens=tout,
                          charged_usd=tin * INPUT_USD_PER_MTOK / 1e6 + tout * OUTPUT_USD_PER_MTOK / 1e6)
    return call


def _model_turn(gate: Any, n: int, objective: str, seed: int, obey_interrupt: float) -> dict[str, Any]:
    """Turn ``n``'s proposal: from the log when its reply is recorded, else a model call through
    the gate (a fresh invocation id when an earlier one is in doubt)."""
    from kernel_lib.core.proposals import ModelCall

    rec = gate.record
    base = _turn_ids(n)[0]
    tries = [oid for oid in rec.operations if oid == base or oid.startswith(base + ".r")]
    for oid in tries:
        op = rec.operations[oid]
        if op.status == "established" and op.outcome and op.outcome.get("proposal"):
            return op.outcome["proposal"]
    inv = base if not tries else f"{base}.r{len(tries)}"
    ctx = _render_context(rec, objective)
    reply = gate.run_model(ModelCall(inv, MODEL, ctx, GRANT_ID, 0.05), _model_transport(seed, obey_interrupt, n))
    return reply.proposal


def _tool_turn(gate: Any, n: int, prop: dict[str, Any], ws: WorkspaceService, checkpointer: Any) -> str:
    """Run turn ``n``'s tool call (resuming an attempt in doubt). Returns ``done``, ``refused``."""
    from kernel_lib.core.proposals import ToolProposal
    from kernel_lib.core.record import fold_step

    oid = _turn_ids(n)[1]
    op = gate.record.operations.get(oid)
    if op is not None and op.status in ("established", "denied"):
        return "refused" if op.status == "denied" else "done"
    contract = "read_only" if prop["tool"] == "run_tests" else "idempotent"
    if contract != "read_only" and gate.log.head and gate.record.last_sequence_number == gate.log.head:
        last = gate.record.checkpoints[-1]["sequence_number"] if gate.record.checkpoints else None
        if last != gate.log.head:   # a Chapter 11 checkpoint before every mutative step
            res = checkpointer.capture(gate.record, ws.workspace)
            fold_step(gate.record, res.event)
    attempt = f"a{len(op.attempts) + 1}" if op is not None else "a1"
    try:
        gate.run_tool(ToolProposal(oid, attempt, prop["tool"], dict(prop["arguments"]), GRANT_ID, 0.0,
                                   repeat_contract=contract), ws.transport)
    except ActionMaskedRefusal:
        return "refused"
    return "done"


def _build(store: Any, trajectory_id: str, workspace: Path, fleet: Any, blobs: Any, *, scenario: str,
           on_position: Callable[[str, Any], None], must_survive: str) -> tuple[Any, Any, Any, Any]:
    from kernel_lib.checkpoint.capture import Checkpointer
    from kernel_lib.core.events import TaskStarted
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
    from kernel_lib.log import TrajectoryLog
    from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
    from kernel_lib.sim.deployment import deployment_registry

    reg = deployment_registry()
    log = TrajectoryLog(store, trajectory_id, must_survive=must_survive)
    gate = DispatchGate(log, AdmissionPolicy({GRANT_ID: set(reg.names()) | set(WORKSPACE_TOOLS) | {MODEL}}),
                        coalesce_admission=True, on_position=on_position)
    if gate.record.task is None:
        gate.start(TaskStarted(task_id=trajectory_id, requester="looping-agent", objective=_objective(scenario),
                               grant_ids=[GRANT_ID], budget_ceiling_usd=100.0, config={"scenario": scenario}))
    saga = SagaRunner(gate, reg, fleet.client(trajectory_id), saga_id=f"{trajectory_id}.saga", grant_id=GRANT_ID,
                      retry=RetryPolicy(max_attempts=4, base_s=0.0, cap_s=0.0))
    return gate, saga, Checkpointer(log, blobs, ignore=IGNORE), log


def _objective(scenario: str) -> str:
    return ("Make the checks in tests/test_config.py pass by changing app/config.py"
            + ("; tell the reviewer when you start." if scenario == "pivot" else "."))


def _saga_steps(saga: Any, scenario: str) -> None:
    sb = saga.step("provision_sandbox", {"image": "py311-tests", "vcpus": 1})
    saga.step("create_branch", {"name": "fix-timeout"})
    if scenario == "pivot":
        saga.step("send_email", {"to": "reviewer@example.test", "subject": "started on the timeout fix",
                                 "sandbox_id": sb["sandbox_id"]})


def run_looping_agent(workspace: str | os.PathLike, *, store: Any = None, fleet: Any = None,
                      trajectory_id: str = "loop-1", scenario: str = "no_pivot", seed: int = 0,
                      obey_interrupt: float = 0.0, turn_ceiling: int = 50, epoch_steps: int = 3,
                      backtrack_budget: int = 1, must_survive: str = "process_crash",
                      on_position: Callable[[str, Any], None] | None = None) -> LoopResult:
    """Run (or resume) the looping agent on ``workspace`` until it resolves, tier 3 ends it, or
    ``turn_ceiling`` model turns were taken (module docstring).

    Args:
        workspace: the project directory (written by :func:`write_world` when missing or empty).
            Beside it, ``<workspace>.effects.jsonl`` is the workspace's effects ledger and
            ``<workspace>.blobs/`` the checkpoint blob store.
        store: the trajectory log's store (default: an SQLite file ``<workspace>.log.sqlite``).
            Calling again with the same store, workspace and fleet resumes the run from its log.
        fleet: the saga's tool services (a :class:`~kernel_lib.sim.services.TwinFleet` or a live
            fleet); default a new twin fleet (whose counts then die with it).
        scenario: ``no_pivot`` or ``pivot`` (a tier-III e-mail before the loop).
        seed, obey_interrupt: the policy's seed and the probability that it follows a tier-1
            interrupt (0: stubborn, the loop persists; 1: the interrupt breaks it).
        epoch_steps, backtrack_budget: the ladder (:class:`LadderPolicy`).
        must_survive: the failure domain the trajectory declares (``none`` for an in-memory
            store in a simulation whose crashes are raised in process).
        on_position: called with every gate position name (a crash test raises from it).

    Returns: a :class:`LoopResult`.

    Raises:
        ConfigError: an unknown scenario, or a workspace that is neither empty nor this world.
    """
    from kernel_lib.checkpoint.blobs import DirectoryBlobStore
    from kernel_lib.log.sqlite import SQLiteStore
    from kernel_lib.recovery.watchdog.escalation import LadderPolicy, interventions_of
    from kernel_lib.recovery.watchdog.runner import WatchdogRunner
    from kernel_lib.sim.services import TwinFleet

    if scenario not in SCENARIOS:
        raise ConfigError(f"scenario must be one of {', '.join(SCENARIOS)}, got {scenario!r}")
    ws_dir = Path(workspace)
    if not ws_dir.exists() or not any(ws_dir.iterdir()):
        write_world(ws_dir)
    elif not (ws_dir / CONFIG).is_file():
        raise ConfigError(f"{ws_dir} is not the looping agent's world (no {CONFIG})")
    own_store = store is None
    if own_store:
        store = SQLiteStore.open(str(ws_dir) + ".log.sqlite", create=True)
    fleet = fleet if fleet is not None else TwinFleet()
    blobs_dir = Path(str(ws_dir) + ".blobs")
    blobs_dir.mkdir(exist_ok=True)
    blobs = DirectoryBlobStore(str(blobs_dir))
    positions: list[str] = []

    def seen(name: str, ev: Any) -> None:
        positions.append(name)
        if on_position is not None:
            on_position(name, ev)

    try:
        gate, saga, checkpointer, _log = _build(store, trajectory_id, ws_dir, fleet, blobs, scenario=scenario,
                                                on_position=seen, must_survive=must_survive)
        ws = WorkspaceService(ws_dir, str(ws_dir) + ".effects.jsonl", blobs)
        runner = WatchdogRunner(gate, workspace=_RestoreAndNote(ws, gate), saga=saga,
                                policy=LadderPolicy(epoch_steps, backtrack_budget))
        outcome, error, revoked = "ceiling", None, []
        objective = _objective(scenario)
        try:
            runner.resume()   # a tier a crash cut short (a tier-3 unwind too) is finished first
            if gate.record.control_state == "RUNNING" and saga.saga.state in (None, "RUNNING", "COMMITTED"):
                _saga_steps(saga, scenario)
            n = 0
            while True:
                runner.resume()   # a tier a crash cut short is finished before anything else
                det = _detect_state_cycle(gate.record)
                if det is not None:
                    runner.intervene(det)
                if gate.record.control_state != "RUNNING":
                    outcome = _terminal_outcome(gate.record)
                    break
                n += 1
                if n > turn_ceiling:
                    break
                prop = _model_turn(gate, n, objective, seed, obey_interrupt)
                if prop["tool"] == "finish":
                    outcome = "resolved"
                    saga.complete() if saga.saga.state in ("RUNNING", "COMMITTED") else None
                    break
                _tool_turn(gate, n, prop, ws, checkpointer)
        except SemanticDeadlockError as exc:
            outcome, error, revoked = exc.outcome or _terminal_outcome(gate.record), str(exc), exc.revoked_leases
        rec = gate.record
        refused = sum(1 for _p, op in _tool_ops(rec) if op.status == "denied")
        return LoopResult(outcome=outcome, interventions=[i.to_json() for i in interventions_of(rec)],
                          refused=refused, turns=sum(1 for o in rec.operations.values() if o.kind == "model"),
                          log_head=gate.log.head, effects=ws.effects(), services=_service_counts(fleet),
                          loop_cost=loop_cost(rec, turn_ceiling=turn_ceiling), control_state=rec.control_state,
                          revoked_leases=list(revoked), positions=positions, error=error)
    finally:
        if own_store:
            store.close()


def _terminal_outcome(record: Any) -> str:
    if record.control_state == "FROZEN":
        return "frozen"
    if record.control_state in ("FAILED", "CANCELLED"):
        return "compensated"
    return "resolved" if record.control_state == "COMPLETED" else "ceiling"


def _service_counts(fleet: Any) -> dict[str, Any]:
    try:
        return {"counts": fleet.counts(), "live_resources": len(fleet.live_resources())}
    except Exception as exc:   # noqa: BLE001 - a report field, not a decision
        return {"error": str(exc)}


class _RestoreAndNote:
    """The tier-2 restorer: rewinds the workspace, then records the state it restored as a
    ``RuntimeInput`` (kind ``observation``) so the detector's window restarts from it after a
    crash too. Both steps are idempotent."""

    def __init__(self, ws: WorkspaceService, gate: Any):
        self.ws, self.gate = ws, gate

    def restore(self, checkpoint: dict[str, Any]) -> bool:
        from kernel_lib.core.events import RuntimeInput

        wrote = self.ws.restore(checkpoint)
        iid = next((r["intervention_id"] for r in reversed(self.gate.record.recovery_records)
                    if r.get("event_type") == "WatchdogIntervened" and r.get("phase") == "intent"), None)
        have = any(ri.get("name") == "looping_agent.restored_state" and ri["value"].get("intervention_id") == iid
                   for ri in self.gate.record.runtime_inputs)
        if not have:
            self.gate.append(RuntimeInput(kind="config", name="looping_agent.restored_state", value={
                "intervention_id": iid, "checkpoint_id": checkpoint["checkpoint_id"],
                "workspace_sha256": workspace_state_sha256(self.ws.workspace)}))
        return wrote


# ------------------------------------------------------------------------------------------------
# the worker process (killed by a real SIGKILL in the tests)
# ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m kernel_lib.live.looping_agent --workspace DIR --store-path FILE --fleet DIR
    [--scenario S] [--pause-at K --marker FILE]``: run or resume the looping agent against a
    running live fleet; with ``--pause-at K`` write ``--marker`` right after the K-th gate
    position and block until killed. Prints the :class:`LoopResult` as one JSON line."""
    ap = argparse.ArgumentParser(prog="python -m kernel_lib.live.looping_agent")
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--store-path", required=True)
    ap.add_argument("--fleet", default=None, help="a running live fleet's state directory (default: twins)")
    ap.add_argument("--trajectory", default="loop-live")
    ap.add_argument("--scenario", choices=SCENARIOS, default="no_pivot")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pause-at", type=int, default=None)
    ap.add_argument("--marker", default=None)
    args = ap.parse_args(argv)
    from kernel_lib.log.sqlite import SQLiteStore

    fleet = None
    if args.fleet:
        from kernel_lib.live.services import LiveFleet

        fleet = LiveFleet.attach(args.fleet)
    count = [0]

    def on_position(name: str, ev: Any) -> None:
        count[0] += 1
        if args.pause_at is not None and count[0] == args.pause_at:
            tmp = Path(args.marker + ".tmp")
            tmp.write_text(json.dumps({"position": count[0], "name": name, "pid": os.getpid()}))
            os.replace(tmp, args.marker)
            while True:
                signal.pause()

    store = SQLiteStore.open(args.store_path, create=True)
    try:
        res = run_looping_agent(args.workspace, store=store, fleet=fleet, trajectory_id=args.trajectory,
                                scenario=args.scenario, seed=args.seed, on_position=on_position)
    finally:
        store.close()
        if fleet is not None:
            fleet.close()
    print(json.dumps(res.to_json(), default=str), flush=True)
    return 0


if __name__ == "__main__":   # pragma: no cover - the worker process
    sys.exit(main())
