"""Pausing Python's cyclic garbage collector around a bulk decode (the log's read path, §11.5.2).

Opening, reading and folding a long log allocates a few container objects per event and keeps
them all (the index, the decoded events, the record), so the collector's passes keep walking a
heap that only grows and find nothing to free: at 20 000 events that is about a fifth of the read
path's time on the machine this was measured on (``python -m kernel_lib bench read``). Reference
counting still frees everything that is not in a cycle while the collector is paused.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["cyclic_gc_paused"]


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Disable the cyclic collector for the ``with`` block and enable it again on the way out,
    however the block ends, if (and only if) it was enabled on the way in, so nested pauses and
    a caller that keeps the collector off are left as they were. Process-wide, as the collector
    is: another thread's allocations during the block are not collected either until it ends."""
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
