#!/usr/bin/env python3
"""Write the frozen compatibility histories once: logs of the current formats and their folds.

A frozen history is a log written by this build in every storage format, checked in beside the
record its full fold gives (``expected_record.json``). ``tests/test_histories.py`` opens every
one read-only and folds it with the reducer of the build under test, so a change to the event
decoding, a store's on-disk format or the reducer that would alter how an old log reads is
caught (the idea of replaying checked-in histories in Temporal's replayer tests).

    python tools/freeze_histories.py                       # write tests/histories/v1/ (once)
    python tools/freeze_histories.py --new-version v2      # a format changed: write v2/ beside v1/

Frozen files are never rewritten: the script refuses to write into a version folder that already
exists (exit status 2). A format change adds a new folder with ``--new-version NAME``; the old
folders stay, because the build must still read the logs they hold.

Each history ``<root>/<version>/<name>/`` holds:

* ``events.jsonl`` — one canonical (RFC 8785) event per line;
* ``log.sqlite`` — a :class:`kernel_lib.log.SQLiteStore` file (closed cleanly: no ``-wal``);
* ``segments/`` — a :class:`kernel_lib.log.SegmentStore` directory (small segments, so the
  history spans several files; the ``LOCK`` file, which only carries a writer's pid, is removed);
* ``expected_record.json`` — ``TrajectoryRecord.to_dict()`` of the fold of every event;
* ``manifest.json`` — what the history covers, its trajectory, head, fence and event digests.

The compacted history holds only ``log.sqlite`` (log compaction, §11.8.3, is an SQLite and
memory store feature) and the ``blobs/`` directory its checkpoint is restored from; its expected
record is the full fold computed before the prefix was retired.

Exit status: 0 written; 2 refused (the version folder exists, or a bad name).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore, MemoryBlobStore  # noqa: E402
from kernel_lib.checkpoint.restore import restore  # noqa: E402
from kernel_lib.core.events import (REDUCER_VERSION, ApprovalRequested, ApprovalResolved, Event,  # noqa: E402
                                    RuntimeInput, decode)
from kernel_lib.core.record import fold, initial_record  # noqa: E402
from kernel_lib.gate.dispatch import (AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal,  # noqa: E402
                                      ToolReply)
from kernel_lib.importers import import_file  # noqa: E402
from kernel_lib.log import AckTier, MemoryStore, SegmentStore, SQLiteStore, TrajectoryLog  # noqa: E402
from kernel_lib.log.segment import FORMAT_VERSION as SEGMENT_FORMAT_VERSION  # noqa: E402
from kernel_lib.log.sqlite import LAYOUT_VERSION as SQLITE_LAYOUT_VERSION  # noqa: E402
from kernel_lib.retention import ReferenceIndex, compact  # noqa: E402
from kernel_lib.retention.pricing import full_retention  # noqa: E402
from kernel_lib.sim.worksheet import worksheet_events, worksheet_task  # noqa: E402

DEFAULT_ROOT = ROOT / "tests" / "histories"
FIRST_VERSION = "v1"
#: Segment size of the frozen segment logs (bytes): small, so each history spans several files.
SEGMENT_BYTES = 2048
#: A fixed clock (Unix seconds) for the gates' dispatch-time approval checks.
FIXED_NOW_UNIX_S = 1_767_225_600.0
POLICY = AdmissionPolicy(grants={"grant_repair": {"run_tests", "deploy", "stand-in-model"}})


# --- the trajectories ---------------------------------------------------------------------------------

def _log(store: MemoryStore, tid: str, epoch: int = 0) -> TrajectoryLog:
    return TrajectoryLog(store, tid, must_survive="none", owner_epoch=epoch)


def _gate(log: TrajectoryLog) -> DispatchGate:
    return DispatchGate(log, POLICY, clock=lambda: FIXED_NOW_UNIX_S)


def _proposal(op: str, attempt: str = "attempt1", tool: str = "run_tests", bound_usd: float = 0.5) -> ToolProposal:
    return ToolProposal(operation_id=op, attempt_id=attempt, tool=tool, arguments={"snapshot": "ws_r18"},
                        grant_id="grant_repair", cost_bound_usd=bound_usd, repeat_contract="idempotency_key",
                        revision="r18")


def _timeout(intent) -> ToolReply:
    raise TimeoutError("no reply from the executor within 30 s")


def worksheet(store: MemoryStore) -> str:
    """The crash worksheet's trajectory (§11.1, §11.3): task, model call, admission, intent,
    accepted dispatch, completed result with usage."""
    worksheet_events(store)
    return store.trajectories()[0]


def in_doubt(store: MemoryStore) -> str:
    """A tool attempt that timed out: its intent is durable, no adequate evidence came back, so the
    operation is in doubt and its reservation stays held (§11.3.2, §11.5.3)."""
    tid = "traj_in_doubt"
    gate = _gate(_log(store, tid))
    gate.start(worksheet_task())
    gate.run_tool(_proposal("test_r18"), _timeout)
    return tid


def paused_approval(store: MemoryStore) -> str:
    """Control and approvals: the trajectory paused by an operator, an approval requested for a
    deploy while paused, the resume left awaiting that approval, the approval granted and the
    deploy dispatched (rechecked against it, §11.5.3), a second request refused, paused again."""
    tid = "traj_paused_approval"
    log = _log(store, tid)
    gate = _gate(log)

    def logged(payload) -> None:
        log.append(payload)
        gate.record = fold(initial_record(tid), log.events())

    gate.start(worksheet_task())
    gate.change_control("PAUSED", issuer="operator", request_id="ctl-pause", reason="change window closed")
    logged(ApprovalRequested(approval_id="apr_deploy", held_operation_id="deploy_r18", held_attempt_id="attempt1",
                             reviewer="bob", expires_unix_s=FIXED_NOW_UNIX_S + 3600.0))
    gate.change_control("RUNNING", issuer="operator", request_id="ctl-resume")
    assert gate.record.control_state == "AWAITING_APPROVAL", gate.record.control_state
    logged(ApprovalResolved(approval_id="apr_deploy", decision="approved", reviewer="bob", evidence="ticket 42"))
    gate.run_tool(_proposal("deploy_r18", tool="deploy", bound_usd=0.2),
                  lambda i: ToolReply(status="completed", observation_complete=True, outcome={"deployed": "r18"},
                                      charged_usd=0.05))
    logged(ApprovalRequested(approval_id="apr_rollback", held_operation_id="rollback_r18",
                             held_attempt_id="attempt1", reviewer="bob"))
    logged(ApprovalResolved(approval_id="apr_rollback", decision="refused", reviewer="bob", evidence="not needed"))
    gate.change_control("PAUSED", issuer="operator", request_id="ctl-pause-2", reason="end of the shift")
    return tid


def retry(store: MemoryStore) -> str:
    """A first attempt lost to a timeout, a new owner (owner_epoch 1, claimed at the log) and a
    second attempt of the same operation that completes and settles (§11.5.1, §11.5.4)."""
    tid = "traj_retry"
    gate = _gate(_log(store, tid))
    gate.start(worksheet_task())
    gate.run_tool(_proposal("test_r18"), _timeout)
    epoch = store.claim_epoch(tid)
    gate = _gate(_log(store, tid, epoch))
    gate.run_tool(_proposal("test_r18", attempt="attempt2"),
                  lambda i: ToolReply(status="completed", observation_complete=True, outcome={"passed": 3},
                                      job_handle="job_tests_19", charged_usd=0.31))
    return tid


def model_calls(store: MemoryStore) -> str:
    """Model invocations: a complete reply with a proposal, a partial one with usage, an error
    (ContextBuilt before the request, ModelReplied after, usage settled, §11.3.2)."""
    tid = "traj_model_calls"
    gate = _gate(_log(store, tid))
    gate.start(worksheet_task())
    replies = [ModelReply(status="complete", reply="Run the tests.", input_tokens=412, output_tokens=38,
                          proposal={"tool": "run_tests", "arguments": {"snapshot": "ws_r18"}}, charged_usd=0.012),
               ModelReply(status="partial", reply="The patch looks", input_tokens=380, output_tokens=4,
                          charged_usd=0.004),
               ModelReply(status="error", reply="upstream overloaded")]
    for i, reply in enumerate(replies, start=1):
        gate.run_model(ModelCall(invocation_id=f"model_call_{i}", model="stand-in-model", grant_id="grant_repair",
                                 delivered_input=f"Turn {i}: repair the failing test of ws_r18.", cost_bound_usd=0.2,
                                 request_config={"temperature": 0}),
                       lambda ctx, r=reply: r)
    return tid


def _checkpointed(store, blobs) -> str:
    tid = "traj_checkpoint"
    log = _log(store, tid) if isinstance(store, MemoryStore) else TrajectoryLog(store, tid, must_survive="host_crash")
    gate = _gate(log)
    gate.start(worksheet_task())
    gate.run_tool(_proposal("test_r18"), lambda i: ToolReply(status="completed", observation_complete=True,
                                                             outcome={"passed": 3}, charged_usd=0.31))
    gate.run_tool(_proposal("lint_r18", bound_usd=0.1), _timeout)
    cap = Checkpointer(log, blobs).capture(gate.record, {"src/median.py": b"def median(xs):\n    ...\n"})
    gate.record = fold(initial_record(tid), log.events())
    assert gate.record.last_sequence_number == cap.event.sequence_number
    log.append(RuntimeInput(kind="clock", name="after_checkpoint", value=FIXED_NOW_UNIX_S))
    gate.record = fold(initial_record(tid), log.events())
    gate.run_tool(_proposal("test_r19", bound_usd=0.2), lambda i: ToolReply(status="accepted", job_handle="job_19"))
    return tid


def checkpoint(store: MemoryStore) -> str:
    """A published checkpoint event (CheckpointV2, §11.4) between work before and after it; the
    checkpoint's objects are not part of this history (only the event is)."""
    return _checkpointed(store, MemoryBlobStore())


_MESSAGES = {
    "id": "frozen-import-example",
    "model": "stand-in-model",
    "messages": [
        {"role": "system", "content": "You repair failing tests."},
        {"role": "user", "content": "The median test fails on even-length lists."},
        {"role": "assistant", "content": "Let me run the tests.",
         "tool_calls": [{"id": "call_a", "type": "function",
                         "function": {"name": "run_tests", "arguments": "{\"snapshot\": \"ws_r18\"}"}}],
         "usage": {"prompt_tokens": 40, "completion_tokens": 12}},
        {"role": "tool", "tool_call_id": "call_a", "content": "1 failed, 2 passed"},
        {"role": "assistant", "content": "I will patch median and rerun.",
         "tool_calls": [{"id": "call_b", "type": "function",
                         "function": {"name": "run_tests", "arguments": "{\"snapshot\": \"ws_r19\"}"}}]},
    ],
}


def imported(store: MemoryStore, folder: Path) -> str:
    """A log translated from a small OpenAI-style message list written for this purpose (kept as
    ``source_messages.json``): model turns, a tool call answered and one never answered (§11.6)."""
    src = folder / "source_messages.json"
    src.write_text(json.dumps(_MESSAGES, indent=1, sort_keys=True) + "\n")
    res = import_file("openai-messages", src)
    store.append_batch(res.events, AckTier.MEMORY)
    return res.trajectory_id


#: name -> (builder, does the builder take the history's folder)
HISTORIES: dict[str, tuple[Callable, bool]] = {
    "worksheet": (worksheet, False),
    "in_doubt": (in_doubt, False),
    "paused_approval": (paused_approval, False),
    "retry": (retry, False),
    "model_calls": (model_calls, False),
    "checkpoint": (checkpoint, False),
    "imported_openai": (imported, True),
}


# --- writing the formats ------------------------------------------------------------------------------

def _dump(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")


def _manifest(name: str, doc: str, events: list[Event], fence: int, formats: list[str], **extra) -> dict:
    return {"history": name, "what": " ".join(doc.split()), "trajectory_id": events[0].trajectory_id,
            "events": len(events), "head": events[-1].sequence_number, "fence": fence, "formats": formats,
            "event_types": sorted({e.event_type for e in events}),
            "event_sha256": [e.digest for e in events],
            "format_versions": {"sqlite_layout": SQLITE_LAYOUT_VERSION, "segment_frame": SEGMENT_FORMAT_VERSION,
                                "reducer": REDUCER_VERSION},
            **extra}


def _write_formats(folder: Path, events: list[Event], fence: int) -> None:
    tid = events[0].trajectory_id
    (folder / "events.jsonl").write_bytes(b"".join(e.canonical + b"\n" for e in events))
    with SQLiteStore.open(folder / "log.sqlite", create=True) as s:
        s.append_batch(events, AckTier.FDATASYNC)
        if fence:
            s.install_fence(tid, fence)
    with SegmentStore.open(folder / "segments", segment_bytes=SEGMENT_BYTES, create=True) as s:
        for i in range(0, len(events), 3):        # several batches, so several frames per file
            s.append_batch(events[i:i + 3], AckTier.FDATASYNC)
        if fence:
            s.install_fence(tid, fence)
    (folder / "segments" / "LOCK").unlink(missing_ok=True)


def freeze_history(folder: Path, name: str) -> None:
    builder, wants_folder = HISTORIES[name]
    folder.mkdir(parents=True)
    store = MemoryStore()
    tid = builder(store, folder) if wants_folder else builder(store)
    # fold the events as a reader of the log gets them (decoded from their canonical bytes): a
    # payload built in memory may hold 5.0 where the canonical JSON, and so every reader, has 5
    events = [decode(e.canonical) for e in store.read(tid)]
    _write_formats(folder, events, store.fence(tid))
    _dump(folder / "expected_record.json", fold(initial_record(tid), events).to_dict())
    _dump(folder / "manifest.json", _manifest(name, builder.__doc__ or "", events, store.fence(tid),
                                              ["jsonl", "sqlite", "segment"]))


def freeze_compacted(folder: Path) -> None:
    """The checkpoint history on SQLite with its prefix retired by log compaction (§11.8.3): the
    log starts at the checkpoint's covered position; the record is restored from the checkpoint in
    ``blobs/`` and the retained suffix."""
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="kl-freeze-") as tmp:
        store = SQLiteStore.open(folder / "log.sqlite", create=True)
        blobs = DirectoryBlobStore(str(folder / "blobs"))
        tid = _checkpointed(store, blobs)
        events = list(store.read(tid))
        full = fold(initial_record(tid), events).to_dict()
        index = ReferenceIndex(Path(tmp) / "refs.db")
        index.register(tid, tenant="frozen", policy=full_retention(12))
        rep = compact(store, blobs, index, tid, now_unix_s=FIXED_NOW_UNIX_S)
        index.close()
        assert restore(store, tid, blobs).record.to_dict() == full
        retired = store.retired_through(tid)
        store.close()
    for extra in ("log.sqlite-wal", "log.sqlite-shm"):
        assert not (folder / extra).exists(), f"{extra} left behind"
    _dump(folder / "expected_record.json", full)
    _dump(folder / "manifest.json", _manifest("compacted_sqlite", freeze_compacted.__doc__ or "", events, 0,
                                              ["sqlite"], retired_through=retired,
                                              recoverable_from=rep.recoverable_from))


README = """# Frozen histories, format version {version}

Logs written once by `tools/freeze_histories.py` with the formats of this version, each beside the
record its full fold gave when it was written. `tests/test_histories.py` opens every one read-only
in every test run, folds it with the current reducer and compares the result with
`expected_record.json` exactly; it also checks that the formats of one history hold the same
canonical event bytes and that opening them changes no file.

Format versions of this folder:

| what | version |
|---|---|
| SQLite log layout (`PRAGMA user_version`, `kernel_lib.log.sqlite.LAYOUT_VERSION`) | {sqlite} |
| segment frame `format_version` (`kernel_lib.log.segment.FORMAT_VERSION`) | {segment} |
| reducer version stamped on events (`kernel_lib.core.events.REDUCER_VERSION`) | {reducer} |
| event payloads | the schema versions in each `manifest.json`'s events (all 1, except `Checkpoint` 2) |

**Never regenerate these files in place.** They are the evidence that logs written by an older
build still read and fold the same way. If a test here fails, the change under test alters how
an existing log is read or folded: fix the change, or, if the change is intended, keep reading
this version and add a new one beside it (`python tools/freeze_histories.py --new-version v2`
writes `../v2/`); this folder stays.

Each `<history>/` holds `events.jsonl`, `log.sqlite` and `segments/` (the same events in the three
formats), `expected_record.json` (`TrajectoryRecord.to_dict()` of the full fold) and
`manifest.json` (what it covers, its trajectory, head, fence and event digests).
`compacted_sqlite/` holds only `log.sqlite`, with the prefix before its checkpoint retired, and
the checkpoint's `blobs/`; its expected record is the full fold taken before compaction.

| history | what it covers |
|---|---|
{rows}
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--new-version", metavar="NAME", help="write a new version folder NAME (e.g. v2) beside the "
                    "existing ones; without it the first version folder is written, once")
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="folder of the version folders "
                    "(default: tests/histories)")
    args = ap.parse_args(argv)
    version = args.new_version or FIRST_VERSION
    if not re.fullmatch(r"v\d+[a-z0-9_]*", version):
        print(f"freeze_histories: a version folder is named like v2, not {version!r}", file=sys.stderr)
        return 2
    out = args.root / version
    if out.exists():
        print(f"freeze_histories: {out} exists; frozen histories are never rewritten. A format change adds a new "
              "folder: --new-version NAME", file=sys.stderr)
        return 2
    if args.new_version is None and any(args.root.glob("v*")):
        print(f"freeze_histories: {args.root} already holds a version folder; name the new one with --new-version",
              file=sys.stderr)
        return 2
    args.root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=args.root))   # renamed into place when complete
    try:
        rows = []
        for name in HISTORIES:
            freeze_history(tmp / name, name)
            rows.append(f"| `{name}` | {' '.join((HISTORIES[name][0].__doc__ or '').split())} |")
        freeze_compacted(tmp / "compacted_sqlite")
        rows.append(f"| `compacted_sqlite` | {' '.join((freeze_compacted.__doc__ or '').split())} |")
        (tmp / "README.md").write_text(README.format(version=version, sqlite=SQLITE_LAYOUT_VERSION,
                                                     segment=SEGMENT_FORMAT_VERSION, reducer=REDUCER_VERSION,
                                                     rows="\n".join(rows)))
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({len(HISTORIES) + 1} histories, {total:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
