"""Builders of realistic events for tests."""

from __future__ import annotations

import os

from kernel_lib.core.events import Event, TaskStarted, ToolIntent, ToolResult
from kernel_lib.log.fs import ForwardingFileSystem, OsFileSystem


def task(ceiling=5.0):
    return TaskStarted(task_id="t", requester="alice", objective="repair", grant_ids=["g"],
                       budget_ceiling_usd=ceiling, finalization_reserve_usd=0.5)


def intent(op="test_r18", attempt="attempt1", **kw):
    args = dict(operation_id=op, attempt_id=attempt, tool="run_tests", arguments={"snapshot": "ws_r18"},
                repeat_contract="idempotency_key", grant_id="g", authorization_ref=f"auth-{op}",
                reservation_ref=f"res-{op}")
    args.update(kw)
    return ToolIntent(**args)


def result(op="test_r18", attempt="attempt1", status="completed", complete=True, **kw):
    return ToolResult(operation_id=op, attempt_id=attempt, status=status, observation_complete=complete, **kw)


def ev(payload, seq, traj="traj-a", epoch=0, event_id=None, control_epoch=0):
    return Event.create(trajectory_id=traj, event_id=event_id or f"{traj}-{seq}", sequence_number=seq,
                        payload=payload, owner_epoch=epoch, control_epoch=control_epoch)


def process_gone(pid: int) -> bool:
    """True once no process has this pid (it was reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def group_gone(pgid: int) -> bool:
    """True once no process is left in this process group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def network_dependent_outputs(nb) -> list[str]:
    """Outputs of an executed notebook that would need the internet to display (e.g. altair's
    default HTML renderer loads Vega from a CDN). The course machine is offline, so a chart must be
    drawn in the kernel (``alt.renderers.enable("svg")``) or by a bundled widget."""
    found = []
    for i, c in enumerate(nb.cells):
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            blob = str(o.get("data", {})) + str(o.get("text", ""))
            if "cdn.jsdelivr.net" in blob or "unpkg.com" in blob or "<script src=\"http" in blob:
                found.append(f"cell {i}: {blob[:160]}")
    return found


def wrong_answer(v):
    """A value that an exercise grader must mark wrong for a quantity whose right answer is ``v``."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, str):
        return v + "_not"
    if isinstance(v, list):
        return v + [99]
    if isinstance(v, int):
        return v + 1
    return v * 1.05 if abs(v) > 1e-9 else 0.1


class FdatasyncCountingFS(ForwardingFileSystem):
    """The real file system, counting the fdatasync calls that reach it (``fdatasyncs``): barriers
    counted where they happen, not by the log that asked for them."""

    def __init__(self):
        super().__init__(OsFileSystem())
        self.fdatasyncs = 0

    def fdatasync(self, handle):
        self.fdatasyncs += 1
        return super().fdatasync(handle)
