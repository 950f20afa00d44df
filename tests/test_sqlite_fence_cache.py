"""The SQLite store answers fence() from its writer's cache after its own one-statement appends
(issue 15: the gate's dispatch-time recheck read the fence through a second connection at every
step, about a third of the store's time per step).

Fault model: another connection, or another process, raises the trajectory's fence (a new owner
takes over, §11.5.1) or appends, at any point between the first store's appends and its fence
reads. Invariant: fence() never returns an epoch older than the newest one committed by anyone;
a stale owner's next append is refused by the store. Goal: the cache saves the read and changes
no answer.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernel_lib.errors import StaleOwnerError, StoreError
from kernel_lib.log import AckTier
from kernel_lib.log.sqlite import SQLiteStore
from tests.helpers import ev, intent, result, task


def _second_connection_reads(store: SQLiteStore, monkeypatch) -> list[str]:
    """Count fence() reads that went through the store's second connection."""
    seen: list[str] = []
    real = SQLiteStore._reading

    def counting(self, what):
        if self is store and what == "fence":
            seen.append(what)
        return real(self, what)

    monkeypatch.setattr(SQLiteStore, "_reading", counting)
    return seen


def test_after_its_own_appends_the_writer_answers_fence_from_its_cache(tmp_path, monkeypatch):
    store = SQLiteStore.open(tmp_path / "log.sqlite", create=True)
    reads = _second_connection_reads(store, monkeypatch)
    store.append_batch([ev(task(), 1, epoch=3)], AckTier.FDATASYNC)
    store.install_fence("traj-a", 3)
    store.append_batch([ev(intent(), 2, epoch=3), ev(result(), 3, epoch=3)], AckTier.WRITE)
    before = len(reads)
    assert [store.fence("traj-a") for _ in range(5)] == [3] * 5
    assert len(reads) == before          # no second-connection read while nobody else committed
    store.close()


@pytest.mark.parametrize("other", ["connection", "process"])
def test_a_fence_raised_elsewhere_is_seen_at_once_and_the_stale_append_refused(tmp_path, other):
    path = tmp_path / "log.sqlite"
    store = SQLiteStore.open(path, create=True)
    store.append_batch([ev(task(), 1, epoch=1)], AckTier.FDATASYNC)
    store.install_fence("traj-a", 1)
    store.append_batch([ev(intent(), 2, epoch=1)], AckTier.WRITE)
    assert store.fence("traj-a") == 1          # cached
    if other == "connection":
        second = SQLiteStore.open(path)
        assert second.claim_epoch("traj-a") == 2
        second.close()
    else:
        code = ("from kernel_lib.log.sqlite import SQLiteStore; s = SQLiteStore.open(%r); "
                "print(s.claim_epoch('traj-a')); s.close()" % str(path))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "2", out.stderr
    assert store.fence("traj-a") == 2          # not the cached 1
    with pytest.raises((StaleOwnerError, StoreError)):
        out = store.append_batch([ev(result(), 3, epoch=1)], AckTier.WRITE)
        raise next(o for o in out if isinstance(o, StoreError))
    store.close()


def test_an_append_by_another_connection_to_another_trajectory_drops_the_cache(tmp_path):
    """Another connection's commit of any kind changes PRAGMA data_version: the writer's cached
    fences are dropped, and the fence read goes to the database (answering the same value)."""
    path = tmp_path / "log.sqlite"
    store = SQLiteStore.open(path, create=True)
    store.append_batch([ev(task(), 1, epoch=0)], AckTier.WRITE)
    assert store._cached_fence("traj-a") == 0
    second = SQLiteStore.open(path)
    second.append_batch([ev(task(), 1, traj="traj-b")], AckTier.WRITE)
    second.close()
    assert store._cached_fence("traj-a") is None
    assert store.fence("traj-a") == 0
    store.close()
