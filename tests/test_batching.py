"""Group commit by batch cap (kernel_lib.bench.batching, eq. 2), the measurement of notebook 11.3 §4.

Invariants: every append of every writer is acknowledged once per cap, by a flush no larger than its
cap; each acknowledgment's wait is its queue wait plus the storage time; every intent is durable in
its writer's trajectory afterwards; the run says which filesystem it measured; bad input is typed.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from kernel_lib.bench.batching import MAX_APPENDS, measure_batch_caps
from kernel_lib.errors import ConfigError, StoreError
from kernel_lib.log import open_store


def test_every_append_is_acknowledged_within_its_cap_and_durable(tmp_path):
    run = measure_batch_caps(tmp_path, [1, 3], writers=3, appends_per_writer=5, flush_timer_s=0.001, seed=1)
    assert Counter(a.batch_cap for a in run.acks) == {1: 15, 3: 15}
    assert all(1 <= a.batch_size <= a.batch_cap for a in run.acks)
    assert all(a.wait_s == pytest.approx(a.queue_wait_s + a.storage_s) and a.storage_s > 0 for a in run.acks)
    assert {a.batch_size for a in run.acks if a.batch_cap == 1} == {1}
    for cap in (1, 3):
        store = open_store("sqlite", tmp_path / f"group-{cap}.sqlite", read_only=True)
        try:
            assert [store.head(f"traj_w{w}") for w in range(3)] == [5, 5, 5]
        finally:
            store.close()
    assert run.tier == "fdatasync" and run.filesystem.path == os.path.realpath(tmp_path)
    assert len(run.rows()) == 30 and set(run.rows()[0]) == {"batch_cap", "batch_size", "queue_wait_s", "storage_s",
                                                            "wait_s"}


@pytest.mark.parametrize("kw", [{"batch_caps": []}, {"batch_caps": [0]}, {"batch_caps": [True]},
                                {"writers": 0}, {"appends_per_writer": 1.5}, {"seed": -1}, {"max_think_s": -1},
                                {"writers": MAX_APPENDS, "appends_per_writer": 2}])
def test_bad_input_is_a_typed_error(tmp_path, kw):
    args = {"batch_caps": [1], **kw}
    with pytest.raises(ConfigError):
        measure_batch_caps(tmp_path, args.pop("batch_caps"), **args)


def test_an_unknown_tier_or_folder_is_refused(tmp_path):
    with pytest.raises(StoreError):
        measure_batch_caps(tmp_path, [1], tier="fast")
    with pytest.raises(ConfigError):
        measure_batch_caps(tmp_path / "absent", [1])
