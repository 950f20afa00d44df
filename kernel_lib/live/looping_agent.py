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
:class:`~kernel_lib.recovery.runner.SagaRunner`, and a Chapter 11 checkpoint of the workspace's
state before every mutative step is always in the log (see "The state" below).

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

The watchdog's parts, as the rest of the project has them:

* **The state.** One :class:`~kernel_lib.recovery.watchdog.workspace.WorkspaceHasher` per run
  (held by :class:`WorkspaceService`, ignore globs :data:`IGNORE_GLOBS`) keeps the workspace's
  canonical state hash incrementally: each tool call hashes with the paths it wrote as a hint,
  and the change source is inotify where the kernel offers it, else the stat scan
  (:attr:`LoopResult.workspace_hash` says which one ran and how often each mode was used). The
  log records the state in the form :func:`~kernel_lib.recovery.watchdog.steps.watch_steps`
  reads: at every quiet boundary (before each turn, and inside a tier-2 backtrack right after
  the rewind) a workspace that is not the newest checkpoint's tree gets a Chapter 11 checkpoint
  whose tree *is* the hasher's tree (its file blobs stored first). So every mutative step is
  followed by a ``Checkpoint`` naming the state it left, and the checkpoint before a cycle's
  onset, which tier 2 rewinds to, is always there.
* **The detector.** :func:`~kernel_lib.recovery.watchdog.detectors.detect_state_cycles` over the
  log's steps (``watch_steps`` of the events), inside
  :func:`~kernel_lib.recovery.watchdog.escalation.watch_window`: after a backtrack the window
  restarts at the restored state, since the rewound states are off the trajectory's path (as the
  rewound turns are out of the model's context). The newest detection goes to the ladder
  (:class:`~kernel_lib.recovery.watchdog.runner.WatchdogRunner`, which decides the tier).
  Only the state-hash detector drives the live loop (:func:`watch_config`); every detector runs
  over its log offline (``python -m kernel_lib watchdog``).

Compared with the private stand-ins this replaced, the detector fires at the observation that
closed the cycle (the ``ToolResult`` one position after the action's intent), names the cycle's
onset through its ``occurrences`` and the action through ``signature``/``step_position`` (which
the ladder now reads), and sees the same states at the same turns: tier 1 at the first repeat,
tier 2 at the next, tier 3 when the masked edit's work-around brings the state back. Two things
keep that true across crashes: a tool step whose call a crash left in doubt is judged only once
its retried attempt has an outcome (before, the same step would be seen twice, at its intent and
at its result), and the ladder counts detections about one action as one alarm. Run over this
log offline (no window), the detectors also report the cycles that span the backtrack.

The effects are counted where they land, not from the log: every write the workspace receives
(an edit, a rewind) is appended to an effects ledger beside the workspace by the receiver,
acknowledged at ``fdatasync`` by default (``ledger_ack="write"``: written to the page cache only,
which an in-process crash test may choose since the page cache outlives it); the saga's services
count their own requests; the model's side is the delivered context. :func:`run_looping_agent`
resumes a crashed run from the log (the same call again, on the same store, workspace and
services); ``python -m kernel_lib.live.looping_agent`` runs it in a worker process that a test
kills with a real SIGKILL.
"""

from __future__ import annotations

import argparse
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

__all__ = ["LoopResult", "run_looping_agent", "write_world", "policy", "run_checks", "WorkspaceService",
           "SCENARIOS", "LEDGER_ACKS", "IGNORE_GLOBS", "loop_cost", "count_tokens", "watch_config"]

SCENARIOS = ("no_pivot", "pivot")
GRANT_ID = "grant-loop"
MODEL = "seeded-loop-policy"
WORKSPACE_TOOLS = ("edit_line", "write_file", "run_tests")
CONFIG = "app/config.py"
#: Globs never part of the workspace state (interpreter caches, scratch, the workspace service's
#: own temporary file of a write in progress): the hasher's ignore globs, which the checkpoints'
#: trees and the tier-2 rewind follow too.
IGNORE_GLOBS = ("__pycache__", ".pytest_cache", "scratch", "*.pyc", "*.tmp-write")
#: The effects ledger's acknowledgment tiers (labels of :class:`~kernel_lib.log.base.AckTier`):
#: ``fdatasync`` survives a host crash, ``write`` (the page cache) only the process's death.
LEDGER_ACKS = ("fdatasync", "write")
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


def count_tokens(text: str) -> int:
    """Tokens of ``text`` as a word-and-punctuation count (no model tokenizer is installed; a BPE
    tokenizer gives a comparable count for English and code). Used for the measured loop cost."""
    return len(re.findall(r"\w+|[^\w\s]", text))


# ------------------------------------------------------------------------------------------------
# the workspace: the receiver of edits and rewinds, with its own effects ledger
# ------------------------------------------------------------------------------------------------


class WorkspaceService:
    """The real workspace directory as the receiver of the agent's edits and the watchdog's
    rewinds, and the keeper of its state hash.

    Every write it applies is appended to ``ledger`` — the receiver's own count of effects,
    independent of the trajectory log — acknowledged at ``ledger_ack`` (:data:`LEDGER_ACKS`:
    ``fdatasync``, the default, or ``write``). A request whose result is already there writes
    nothing and is not counted (an edit or a rewind repeated after a crash). ``blobs``: the
    checkpoint blob store the rewinds read from. ``change_source``: the hasher's (``auto``,
    ``inotify``, ``scan``).

    The state: one :class:`~kernel_lib.recovery.watchdog.workspace.WorkspaceHasher` over the
    directory with :data:`IGNORE_GLOBS`, kept for the service's life (call :meth:`close`).

    Raises ConfigError for an unknown ``ledger_ack`` or change source, WorkspaceMissingError when
    the directory does not exist.
    """

    def __init__(self, workspace: str | os.PathLike, ledger: str | os.PathLike, blobs: Any = None, *,
                 ledger_ack: str = "fdatasync", change_source: str = "auto"):
        from kernel_lib.recovery.watchdog.workspace import WorkspaceHasher

        if ledger_ack not in LEDGER_ACKS:
            raise ConfigError(f"ledger_ack must be one of {', '.join(LEDGER_ACKS)}, got {ledger_ack!r}")
        self.workspace = Path(workspace)
        self.ledger = Path(ledger)
        self.blobs = blobs
        self.ledger_ack = ledger_ack
        self.hasher = WorkspaceHasher(self.workspace, IGNORE_GLOBS, change_source=change_source)  # type: ignore[arg-type]
        #: how many state hashes each mode of the hasher made (``full``, ``inotify``, ``scan``, ``hint``)
        self.hash_modes: dict[str, int] = {}
        self.hash_notes: list[str] = []
        self._tree: Any = None
        self._tree_of: str | None = None
        self._last_digest: str | None = None
        self.last_restored: list[str] = []

    def close(self) -> None:
        """Release the hasher's inotify descriptor."""
        self.hasher.close()

    def state(self, changed_paths: Any = None) -> Any:
        """H_t of the workspace now (a :class:`~kernel_lib.recovery.watchdog.workspace.StateHash`),
        incremental; ``changed_paths``: what the caller's own tool wrote since the last hash."""
        st = self.hasher.hash(changed_paths)
        self._last_digest = st.digest
        self.hash_modes[st.mode] = self.hash_modes.get(st.mode, 0) + 1
        if st.note and st.note not in self.hash_notes:
            self.hash_notes.append(st.note)
        return st

    def tree(self) -> Any:
        """The checkpoint :class:`~kernel_lib.checkpoint.tree.Tree` (modes stripped) of the state
        hashed last (hashing first if nothing was); built once per distinct state."""
        if self._last_digest is None:
            self.state()
        if self._tree_of != self._last_digest:
            self._tree, self._tree_of = self.hasher.tree(), self._last_digest
        return self._tree

    def store_blobs(self, tree: Any) -> int:
        """Put the bytes of every file of ``tree`` that ``blobs`` lacks (read from the workspace,
        durable on return); returns how many were stored. A file changed since it was hashed is
        stored under its new digest, so the tree's own entry stays missing and a capture of the
        tree refuses it (CheckpointError)."""
        need = [rel for rel, e in tree.files.items() if not self.blobs.has(e.sha256)]
        if need:
            self.blobs.put_many([(self.workspace / rel).read_bytes() for rel in need])
        return len(need)

    def hash_report(self) -> dict[str, Any]:
        """Which change source the hasher used and how often each mode ran (for :class:`LoopResult`)."""
        return {"change_source": self.hasher.change_source, "modes": dict(sorted(self.hash_modes.items())),
                "notes": list(self.hash_notes), "ignore_globs": list(IGNORE_GLOBS)}

    def _note(self, entry: dict[str, Any]) -> None:
        with open(self.ledger, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            if self.ledger_ack == "fdatasync":
                getattr(os, "fdatasync", os.fsync)(f.fileno())

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
            base = Path(dirpath).relative_to(self.workspace).as_posix()
            dirnames[:] = [d for d in dirnames if not self.hasher.ignored(d if base == "." else f"{base}/{d}")]
            for f in filenames:
                rel = f if base == "." else f"{base}/{f}"
                if not self.hasher.ignored(rel) and rel not in tree.files:
                    os.unlink(Path(dirpath) / f)
                    changed.append(rel)
        if changed:
            self._note({"effect": "restore", "checkpoint_id": checkpoint["checkpoint_id"], "files": changed})
        self.last_restored = changed
        return bool(changed)

    def transport(self, intent: Any) -> Any:
        """The gate's tool transport for :data:`WORKSPACE_TOOLS`: applies the call and answers with
        the workspace's state hash after it (and the check results, for ``run_tests``)."""
        from kernel_lib.core.proposals import ToolReply

        a = dict(intent.arguments)
        wrote_paths: list[str] = []
        if intent.tool == "edit_line":
            wrote = self.edit_line(a["path"], a["line"], a["text"], intent.operation_id)
            out: dict[str, Any] = {"applied": True, "changed": wrote}
            wrote_paths = [a["path"]]
        elif intent.tool == "write_file":
            wrote = self.write_file(a["path"], a["content"], intent.operation_id)
            out = {"applied": True, "changed": wrote}
            wrote_paths = [a["path"]]
        elif intent.tool == "run_tests":
            out = run_checks(self.workspace)
        else:
            return ToolReply("failed", outcome={"error": f"unknown tool {intent.tool}"}, observation_complete=True)
        out["workspace_sha256"] = self.state(wrote_paths).digest
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


def watch_config() -> Any:
    """The detector configuration of the live loop: the state-hash detector alone (table 6's first
    row; figure 3's flip-flop is a state cycle), the rest of
    :class:`~kernel_lib.recovery.watchdog.detectors.WatchdogConfig` at its defaults (window K = 4,
    a k = 1 no-op cycle after 2 unchanged mutative steps)."""
    from kernel_lib.recovery.watchdog.detectors import WatchdogConfig

    return WatchdogConfig(kinds=("state_hash_cycle",))


class _LogSteps:
    """The log's watchdog steps, folded incrementally
    (:class:`~kernel_lib.recovery.watchdog.steps.StepFold`: each event read once).

    Calling it returns the steps, or None when the log has not grown since the last call: the
    detection, a pure function of the log, would be the same, and the ladder has answered it
    already (a resumed run replaying its recorded turns appends nothing)."""

    def __init__(self, log: Any):
        from kernel_lib.recovery.watchdog.steps import StepFold

        self.log = log
        self.fold = StepFold()
        self._folded_at = -1

    def __call__(self) -> list[Any] | None:
        head = self.log.head
        if head == self._folded_at:
            return None
        if head > self.fold.last_position:
            self.fold.add(self.log.events(self.fold.last_position + 1, head))
        self._folded_at = head
        return self.fold.steps()


def _detect(record: Any, steps: list[Any], config: Any) -> Any:
    """The newest state-hash cycle among the steps the watchdog watches now (the window restarts
    at a backtrack's restored state), or None. A tool step still in doubt (a crash cut its call
    short; the resumed turn retries it) has no outcome yet and is judged once it has one. Pure:
    the log's steps in, a Detection out."""
    from kernel_lib.recovery.watchdog.detectors import detect_state_cycles
    from kernel_lib.recovery.watchdog.escalation import watch_window

    settled = [s for s in steps if s.kind != "tool" or s.observation_position is not None]
    found = detect_state_cycles(watch_window(settled, record), config)
    return max(found, key=lambda d: d.position) if found else None


def _record_state(gate: Any, checkpointer: Any, ws: WorkspaceService, changed_paths: Any = None) -> Any:
    """At a quiet boundary (the record at the log's head): when the workspace (the hasher's state,
    ``changed_paths`` as its hint) is not the tree of the newest checkpoint, capture a Chapter 11
    checkpoint of the hasher's tree, its missing file blobs stored first. Returns the capture's
    result, or None when the log already names this state. Idempotent: after a crash the same
    call records what the crash left unrecorded, and nothing twice."""
    from kernel_lib.core.record import fold_step

    ws.state(changed_paths)
    tree = ws.tree()
    rec = gate.record
    last = rec.checkpoints[-1].get("workspace_tree_sha256") if rec.checkpoints else None
    if last == tree.sha256:
        return None
    ws.store_blobs(tree)
    res = checkpointer.capture(rec, tree)
    fold_step(rec, res.event)
    return res


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
    counts them). ``error``: the SemanticDeadlockError's text, when tier 3 ended the run.
    ``workspace_hash``: the state hasher's change source (``inotify`` or ``scan``), how many
    hashes each mode made in this call (``full``, ``inotify``, ``scan``, ``hint``), its notes (a
    fallback's reason) and the ignore globs."""

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
    workspace_hash: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("outcome", "interventions", "refused", "turns", "log_head", "effects",
                                               "services", "loop_cost", "control_state", "revoked_leases",
                                               "positions", "error", "workspace_hash")}


def loop_cost(record: Any, *, turn_ceiling: int = 50, input_usd_per_mtok: float = INPUT_USD_PER_MTOK,
              output_usd_per_mtok: float = OUTPUT_USD_PER_MTOK) -> dict[str, Any]:
    """The measured cost of the loop, for Napkin Math 0.3 (tokens by :func:`count_tokens`).

    From the record's model turns: each turn's input tokens (the delivered context) and output
    tokens; the loop's first turn (the turn that proposed the cycle's first action); the turns
    from there to the first watchdog intervention (``turns_to_detection``) and what they sent and
    wrote (``input_tokens_to_detection``, ``output_tokens_to_detection``, ``usd_to_detection``:
    measured sums); the loop's first context s0 (``first_turn_tokens``) and the growth Δ of the
    re-sent context per turn while the loop went undetected (``growth_tokens_per_turn``, the mean
    step over the turns to detection; over the whole loop when fewer than two), and the
    arithmetic-series projection of an undetected loop to ``turn_ceiling`` turns (input
    n·s0 + Δ·n(n−1)/2, no prefix caching; output n times the mean output per turn):
    ``ceiling_input_tokens_projected``, ``usd_to_ceiling_projected``, with the ratios
    ``ratio_ceiling_to_detection`` (input tokens) and ``usd_ratio_ceiling_to_detection``. Also
    the whole loop's tokens (its later turns include the interrupt and the backtrack's pruning).

    USD at ``input_usd_per_mtok`` / ``output_usd_per_mtok`` per million tokens (default: the
    prices the run was charged at). Without an intervention only the per-turn lists are given.
    Raises ConfigError for a ``turn_ceiling`` below 1 or a negative price."""
    if type(turn_ceiling) is not int or turn_ceiling < 1:
        raise ConfigError(f"turn_ceiling must be an integer >= 1, got {turn_ceiling!r}")
    if not all(isinstance(x, (int, float)) and x >= 0 for x in (input_usd_per_mtok, output_usd_per_mtok)):
        raise ConfigError("prices must be numbers >= 0 (USD per million tokens)")
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
                           "turn_ceiling": turn_ceiling, "input_usd_per_mtok": input_usd_per_mtok,
                           "output_usd_per_mtok": output_usd_per_mtok}
    if not ivs or not turns:
        return out
    first = ivs[0]
    onset = first.get("onset_position") or first["sequence_number"]
    loop_turns = [t for t in turns if t[3] < onset]
    start = loop_turns[-1][0] if loop_turns else turns[0][0]
    looped = [t for t in turns if t[0] >= start]
    detect = [t for t in looped if t[3] < first["sequence_number"]]
    basis = detect if len(detect) >= 2 else looped
    s0 = looped[0][1]
    growth = [b[1] - a[1] for a, b in zip(basis, basis[1:])]
    delta = sum(growth) / len(growth) if growth else 0.0
    out_mean = sum(t[2] for t in basis) / len(basis)

    def usd(inp: float, outp: float) -> float:
        return round((inp * input_usd_per_mtok + outp * output_usd_per_mtok) / 1e6, 6)

    N = turn_ceiling
    ceiling_in = N * s0 + delta * N * (N - 1) / 2
    det_in, det_out = sum(t[1] for t in detect), sum(t[2] for t in detect)
    det_usd, ceiling_usd = usd(det_in, det_out), usd(ceiling_in, out_mean * N)
    out.update(loop_first_turn=start, first_turn_tokens=s0, growth_tokens_per_turn=round(delta, 2),
               output_tokens_per_turn_mean=round(out_mean, 2), turns_to_detection=len(detect),
               input_tokens_to_detection=det_in, output_tokens_to_detection=det_out,
               input_tokens_whole_loop=sum(t[1] for t in looped),
               output_tokens_whole_loop=sum(t[2] for t in looped),
               usd_to_detection=det_usd,
               ceiling_input_tokens_projected=round(ceiling_in),
               usd_to_ceiling_projected=ceiling_usd,
               ratio_ceiling_to_detection=round(ceiling_in / det_in, 2) if det_in else None,
               usd_ratio_ceiling_to_detection=round(ceiling_usd / det_usd, 2) if det_usd else None)
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


def _tool_turn(gate: Any, n: int, prop: dict[str, Any], ws: WorkspaceService) -> str:
    """Run turn ``n``'s tool call (resuming an attempt in doubt). Returns ``done``, ``refused``.
    (The state before it is checkpointed at the top of the turn: :func:`_record_state`.)"""
    from kernel_lib.core.proposals import ToolProposal

    oid = _turn_ids(n)[1]
    op = gate.record.operations.get(oid)
    if op is not None and op.status in ("established", "denied"):
        return "refused" if op.status == "denied" else "done"
    contract = "read_only" if prop["tool"] == "run_tests" else "idempotent"
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
    return gate, saga, Checkpointer(log, blobs), log


def _objective(scenario: str) -> str:
    return ("Make the checks in tests/test_config.py pass by changing app/config.py"
            + ("; tell the reviewer when you start." if scenario == "pivot" else "."))


def _saga_steps(saga: Any, scenario: str) -> None:
    sb = saga.step("provision_sandbox", {"image": "py311-tests", "vcpus": 1})
    saga.step("create_branch", {"name": "fix-timeout"})
    if scenario == "pivot":
        saga.step("send_email", {"to": "reviewer@example.test", "subject": "started on the timeout fix",
                                 "sandbox_id": sb["sandbox_id"]})


def _checked_run(workspace: Any, *, seed: Any, obey_interrupt: Any, change_source: Any, trajectory_id: Any) -> Path:
    """The workspace as a Path, once :func:`run_looping_agent`'s other arguments are checked (before
    the world, the blob folder or the ledger is written). Raises ConfigError."""
    if type(seed) is not int:
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    if isinstance(obey_interrupt, bool) or not isinstance(obey_interrupt, (int, float)) \
            or not 0.0 <= obey_interrupt <= 1.0:
        raise ConfigError(f"obey_interrupt is a probability in [0, 1], got {obey_interrupt!r}")
    if change_source not in ("auto", "inotify", "scan"):
        raise ConfigError(f"change_source {change_source!r} is not 'auto', 'inotify' or 'scan'")
    if not isinstance(trajectory_id, str) or not trajectory_id:
        raise ConfigError(f"trajectory_id must be a non-empty str, got {trajectory_id!r}")
    try:
        ws_dir = Path(workspace)
        if "\0" in str(ws_dir) or (ws_dir.exists() and not ws_dir.is_dir()):
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"workspace must be a directory path, got {workspace!r}") from None
    return ws_dir


def run_looping_agent(workspace: str | os.PathLike, *, store: Any = None, fleet: Any = None, blobs: Any = None,
                      trajectory_id: str = "loop-1", scenario: str = "no_pivot", seed: int = 0,
                      obey_interrupt: float = 0.0, turn_ceiling: int = 50, epoch_steps: int = 3,
                      backtrack_budget: int = 1, must_survive: str = "process_crash", ledger_ack: str = "fdatasync",
                      change_source: str = "auto",
                      on_position: Callable[[str, Any], None] | None = None) -> LoopResult:
    """Run (or resume) the looping agent on ``workspace`` until it resolves, tier 3 ends it, or
    ``turn_ceiling`` model turns were taken (module docstring).

    Args:
        workspace: the project directory (written by :func:`write_world` when missing or empty).
            Beside it, ``<workspace>.effects.jsonl`` is the workspace's effects ledger.
        store: the trajectory log's store (default: an SQLite file ``<workspace>.log.sqlite``).
            Calling again with the same store, workspace, fleet and blobs resumes the run from its log.
        fleet: the saga's tool services (a :class:`~kernel_lib.sim.services.TwinFleet` or a live
            fleet); default a new twin fleet (whose counts then die with it).
        blobs: the checkpoint blob store (default: a durable
            :class:`~kernel_lib.checkpoint.blobs.DirectoryBlobStore` at ``<workspace>.blobs/``; an
            in-process simulation may keep a :class:`~kernel_lib.checkpoint.blobs.MemoryBlobStore`
            across its crash and resume, as it keeps its log store).
        scenario: ``no_pivot`` or ``pivot`` (a tier-III e-mail before the loop).
        seed, obey_interrupt: the policy's seed and the probability that it follows a tier-1
            interrupt (0: stubborn, the loop persists; 1: the interrupt breaks it).
        epoch_steps, backtrack_budget: the ladder (:class:`LadderPolicy`).
        must_survive: the failure domain the trajectory declares (``none`` for an in-memory
            store in a simulation whose crashes are raised in process).
        ledger_ack: the effects ledger's acknowledgment (:data:`LEDGER_ACKS`): ``fdatasync`` (the
            default: each entry survives a host crash) or ``write`` (the page cache: enough for a
            crash raised in process, where the page cache lives on and a sync proves nothing).
        change_source: the workspace hasher's (``auto``: inotify where available, else the stat scan).
        on_position: called with every gate position name (a crash test raises from it).

    Returns: a :class:`LoopResult`.

    Raises:
        ConfigError: an unknown scenario, ledger acknowledgment or change source, a turn ceiling
            below 1, a seed that is not an integer, an ``obey_interrupt`` outside [0, 1], a bad
            ladder (:class:`LadderPolicy`) or trajectory id, or a workspace that is not a directory
            or neither empty nor this world; all before anything is written.
    """
    from kernel_lib.checkpoint.blobs import DirectoryBlobStore
    from kernel_lib.log.sqlite import SQLiteStore
    from kernel_lib.recovery.watchdog.escalation import LadderPolicy, interventions_of
    from kernel_lib.recovery.watchdog.runner import WatchdogRunner
    from kernel_lib.sim.services import TwinFleet

    if scenario not in SCENARIOS:
        raise ConfigError(f"scenario must be one of {', '.join(SCENARIOS)}, got {scenario!r}")
    if ledger_ack not in LEDGER_ACKS:
        raise ConfigError(f"ledger_ack must be one of {', '.join(LEDGER_ACKS)}, got {ledger_ack!r}")
    if type(turn_ceiling) is not int or turn_ceiling < 1:
        raise ConfigError(f"turn_ceiling must be an integer >= 1, got {turn_ceiling!r}")
    ws_dir = _checked_run(workspace, seed=seed, obey_interrupt=obey_interrupt, change_source=change_source,
                          trajectory_id=trajectory_id)
    ladder = LadderPolicy(epoch_steps, backtrack_budget)   # checked before anything is written too
    if not ws_dir.exists() or not any(ws_dir.iterdir()):
        write_world(ws_dir)
    elif not (ws_dir / CONFIG).is_file():
        raise ConfigError(f"{ws_dir} is not the looping agent's world (no {CONFIG})")
    if blobs is None:
        blobs_dir = Path(str(ws_dir) + ".blobs")
        blobs_dir.mkdir(exist_ok=True)
        blobs = DirectoryBlobStore(str(blobs_dir))
    ws = WorkspaceService(ws_dir, str(ws_dir) + ".effects.jsonl", blobs, ledger_ack=ledger_ack,
                          change_source=change_source)
    own_store = store is None
    positions: list[str] = []

    def seen(name: str, ev: Any) -> None:
        positions.append(name)
        if on_position is not None:
            on_position(name, ev)

    try:
        if own_store:
            store = SQLiteStore.open(str(ws_dir) + ".log.sqlite", create=True)
        fleet = fleet if fleet is not None else TwinFleet()
        gate, saga, checkpointer, log = _build(store, trajectory_id, ws_dir, fleet, blobs, scenario=scenario,
                                               on_position=seen, must_survive=must_survive)
        runner = WatchdogRunner(gate, workspace=_Restorer(ws, gate, checkpointer), saga=saga,
                                policy=ladder)
        steps, config = _LogSteps(log), watch_config()
        outcome, error, revoked = "ceiling", None, []
        objective = _objective(scenario)
        try:
            runner.resume()   # a tier a crash cut short (a tier-3 unwind too) is finished first
            if gate.record.control_state == "RUNNING" and saga.saga.state in (None, "RUNNING", "COMMITTED"):
                _saga_steps(saga, scenario)
            n = 0
            while True:
                runner.resume()   # a tier a crash cut short is finished before anything else
                _record_state(gate, checkpointer, ws)   # the state the last step left, in the log
                now = steps()
                det = _detect(gate.record, now, config) if now is not None else None
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
                _tool_turn(gate, n, prop, ws)
        except SemanticDeadlockError as exc:
            outcome, error, revoked = exc.outcome or _terminal_outcome(gate.record), str(exc), exc.revoked_leases
        rec = gate.record
        refused = sum(1 for _p, op in _tool_ops(rec) if op.status == "denied")
        return LoopResult(outcome=outcome, interventions=[i.to_json() for i in interventions_of(rec)],
                          refused=refused, turns=sum(1 for o in rec.operations.values() if o.kind == "model"),
                          log_head=gate.log.head, effects=ws.effects(), services=_service_counts(fleet),
                          loop_cost=loop_cost(rec, turn_ceiling=turn_ceiling), control_state=rec.control_state,
                          revoked_leases=list(revoked), positions=positions, error=error,
                          workspace_hash=ws.hash_report())
    finally:
        ws.close()
        if own_store and store is not None:
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


class _Restorer:
    """The tier-2 restorer: rewinds the workspace to the checkpoint, then records the restored
    state in the log as a checkpoint (:func:`_record_state`, inside the tier, before its
    completion), so the step before the backtrack carries the restored state and the detector's
    window (:func:`~kernel_lib.recovery.watchdog.escalation.watch_window`) restarts from it, after
    a crash too. Both steps are idempotent."""

    def __init__(self, ws: WorkspaceService, gate: Any, checkpointer: Any):
        self.ws, self.gate, self.checkpointer = ws, gate, checkpointer

    def restore(self, checkpoint: dict[str, Any]) -> bool:
        wrote = self.ws.restore(checkpoint)
        _record_state(self.gate, self.checkpointer, self.ws, self.ws.last_restored)
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
