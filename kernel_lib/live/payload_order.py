"""A payload is durable before anything names it: the write-order experiment, with a real SIGKILL (§11.8.2).

A worker process writes each model input as a content-addressed payload and logs a ``ContextBuilt``
event naming it, in one of two orders:

* ``"payload-first"``: :meth:`kernel_lib.retention.PayloadStore.put` (a liveness reference in the
  ledger, then the bytes written and synced), then :meth:`~kernel_lib.retention.PayloadStore.append_to_log`,
  which checks the bytes are there before appending the event;
* ``"reference-first"``: the event first, then the bytes (the naive order).

:func:`kill_in_write_gap` starts that worker as its own process
(``python -m kernel_lib.live.payload_order ROOT ORDER PAUSE_S``), waits until it announces the gap
between the two writes of turn ``5``, where it pauses ``kill_window_s``, and kills it there with a real
``SIGKILL``. Then it opens what survived: the reference-first worker leaves an event whose bytes never
arrived, the payload-first one leaves bytes no event names (held by the ledger, so nothing is lost).
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from kernel_lib.errors import ConfigError, LiveProcessError

__all__ = ["GAP_TURN", "ORDERS", "KilledWrite", "kill_in_write_gap", "main"]

ORDERS = ("reference-first", "payload-first")
#: The turn in whose write gap the worker pauses (and is killed).
GAP_TURN = 5
_TURNS = 1000
_TRAJECTORY = "w"


class KilledWrite(NamedTuple):
    """What survived one killed worker: the log ``store`` (opened read-only; the caller closes it),
    its ``blobs`` (a DirectoryBlobStore), and a ``summary`` dict ``{order, exit signal, events in the
    log, events naming missing bytes, stored payloads no event names}``."""

    store: Any
    blobs: Any
    summary: dict[str, Any]


def _worker(root: str, order: str, pause_s: float) -> None:
    """The worker process's body: up to 1000 turns, each a payload and the event naming it, written
    in ``order``; before the second write of each turn it prints ``gap <turn>`` and, at turn
    :data:`GAP_TURN`, pauses ``pause_s`` seconds."""
    from kernel_lib.checkpoint import DirectoryBlobStore
    from kernel_lib.checkpoint.blobs import sha256_hex
    from kernel_lib.core.events import ContextBuilt
    from kernel_lib.log import SQLiteStore, TrajectoryLog
    from kernel_lib.retention import PayloadStore, ReferenceIndex
    from kernel_lib.retention.pricing import full_retention

    store, blobs = SQLiteStore.open(root + "/log.db", create=True), DirectoryBlobStore(root + "/blobs")
    index = ReferenceIndex(root + "/refs.db")
    index.register(_TRAJECTORY, tenant="acme", policy=full_retention(12))
    payloads, log = PayloadStore(blobs, index), TrajectoryLog(store, _TRAJECTORY)

    def ctx(d: str, i: int) -> ContextBuilt:
        return ContextBuilt(invocation_id=f"inv{i}", model="m", delivered_input_ref=d, delivered_input_sha256=d)

    for i in range(1, _TURNS):
        data = (f"turn {i}: the exact prompt the model received. " * 400).encode()
        if order == "payload-first":
            ref = payloads.put(data, trajectory_id=_TRAJECTORY, holder=log.next_event_id(),
                               artifact_class="observations")
            print("gap", i, flush=True)
            time.sleep(pause_s if i == GAP_TURN else 0)
            payloads.append_to_log(log, ctx(ref.digest, i))
        else:
            log.append(ctx(sha256_hex(data), i))
            print("gap", i, flush=True)
            time.sleep(pause_s if i == GAP_TURN else 0)
            blobs.put(data)


def kill_in_write_gap(root: str | Path, order: str, *, kill_window_s: float = 0.5,
                      timeout_s: float = 60.0) -> KilledWrite:
    """Run the worker in ``order`` under ``root`` (created; must not exist) and SIGKILL it in the
    gap of turn :data:`GAP_TURN`; return what survived.

    Args:
        root: a new folder for the worker's log, blobs and ledger.
        order: one of :data:`ORDERS`.
        kill_window_s: how long the worker pauses in that gap (seconds, > 0, at most 600): the kill
            must land inside it.
        timeout_s: the longest the worker may take to reach the gap (seconds, > 0, at most 600).

    Raises:
        ConfigError: an unknown order, a bad window or timeout, ``root`` already exists.
        LiveProcessError: the worker exited or timed out before announcing the gap.
    """
    from kernel_lib.checkpoint import DirectoryBlobStore
    from kernel_lib.live.controller import live_env
    from kernel_lib.log import SQLiteStore

    if order not in ORDERS:
        raise ConfigError(f"order must be one of {list(ORDERS)}, got {order!r}")
    for name, value in (("kill_window_s", kill_window_s), ("timeout_s", timeout_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 600:
            raise ConfigError(f"{name} must be a number of seconds in (0, 600], got {value!r}")
    root = Path(root)
    try:
        root.mkdir()
    except FileExistsError:
        raise ConfigError(f"{root} already exists: the experiment starts from an empty folder") from None
    child = subprocess.Popen([sys.executable, "-m", "kernel_lib.live.payload_order", str(root), order,
                              str(kill_window_s)], stdout=subprocess.PIPE, text=True, env=live_env(),
                             start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:                                   # the worker's stdout, line by line
        for line in child.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="payload-order-stdout", daemon=True).start()
    killed = False
    deadline = time.monotonic() + timeout_s
    try:
        while not killed:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            if line.split() == ["gap", str(GAP_TURN)]:
                child.send_signal(signal.SIGKILL)          # a real SIGKILL, inside the gap
                killed = True
    finally:
        if not killed:
            child.kill()
        child.wait()
    if not killed:
        raise LiveProcessError(f"the {order} worker did not reach the gap of turn {GAP_TURN} (exit {child.returncode})")
    store = SQLiteStore.open(root / "log.db", read_only=True)
    blobs = DirectoryBlobStore(str(root / "blobs"))
    events = list(store.read(_TRAJECTORY))
    dangling = [e.sequence_number for e in events if not blobs.has(e.payload.delivered_input_ref)]
    named = {e.payload.delivered_input_ref for e in events}
    orphans = [d for d in blobs.digests() if d not in named]
    return KilledWrite(store, blobs, {"order": order, "exit signal": -child.returncode,
                                      "events in the log": len(events), "events naming missing bytes": len(dangling),
                                      "stored payloads no event names": len(orphans)})


def main(argv: list[str] | None = None) -> int:
    """Entry point of the worker process: ``ROOT ORDER PAUSE_S``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[1] not in ORDERS:
        print(f"usage: python -m kernel_lib.live.payload_order ROOT {{{','.join(ORDERS)}}} PAUSE_S", file=sys.stderr)
        return 2
    _worker(args[0], args[1], float(args[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
