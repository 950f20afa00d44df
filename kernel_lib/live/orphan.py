"""Orphan watch for the worksheet's helper processes (executor, workers).

The controller starts each helper in its own session so that a real ``SIGKILL`` of a worker never
reaches anyone else. The price is that nothing tells a helper when the process that started it
(a notebook kernel, the ``worksheet`` command) dies without cleaning up, for instance when the
kernel is killed or runs out of memory. The controller therefore names itself in the environment
variable :data:`PARENT_ENV`; each helper watches its parent pid and shuts itself down once it has
been re-parented. Without the variable (a helper started by hand) the watch does nothing.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

from kernel_lib._support.procs import pid_alive  # noqa: F401  (re-exported: the live helpers use it)

PARENT_ENV = "KERNEL_LIB_LIVE_PARENT"


def parent_env() -> dict[str, str]:
    """The environment entry a controller passes to the helpers it starts (its own pid)."""
    return {PARENT_ENV: str(os.getpid())}


def watch_parent(on_orphan: Callable[[], None], interval_s: float = 0.5) -> threading.Thread | None:
    """Call ``on_orphan()`` once (from a daemon thread) when this process's parent is no longer
    the pid named in :data:`PARENT_ENV`. Returns the thread, or None when there is nothing to watch."""
    raw = os.environ.get(PARENT_ENV, "")
    if not raw.isdigit():
        return None
    parent = int(raw)
    # started directly by the controller, the helper's parent is the controller; forked through a
    # fork server (kernel_lib._support.prefork), its parent is the server, a child of the
    # controller that exits with it: then the helper leaves once that server is gone or the
    # controller no longer runs
    first = os.getppid()

    def gone() -> bool:
        if first == parent:
            return os.getppid() != parent
        return os.getppid() != first or not pid_alive(parent)

    def loop() -> None:
        while not gone():
            time.sleep(interval_s)
        on_orphan()

    t = threading.Thread(target=loop, name="orphan-watch", daemon=True)
    t.start()
    return t
