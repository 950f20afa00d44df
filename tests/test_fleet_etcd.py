"""The worker fleet with its ownership leases on etcd (kernel_lib.live.fleet, coordinator="etcd";
Chapter 11 §11.5.1 with a replicated lease service; Failure Recovery, "Fault-Tolerant System Synthesis").

Fault model: the owner of a trajectory is SIGKILLed right after a dispatch whose effect the service
applied; etcd, not the dead worker, decides when its lease is over. Invariant: the trajectory is
taken over under the next owner_epoch granted by etcd, resumed from the log with the in-doubt step
settled by the status lookup, and the services count every effect once. Goal: the fleet behaves
the same on a lease service that survives the loss of a volume.
"""

from __future__ import annotations

import signal

import pytest

from kernel_lib.errors import ConfigError
from kernel_lib.live.fleet import Fleet

pytestmark = pytest.mark.quorum


def test_a_sigkilled_owner_is_taken_over_under_an_etcd_lease(tmp_path):
    with pytest.raises(ConfigError, match="whole seconds"):
        Fleet(2, coordinator="etcd", lease_ttl_s=1.0)
    with Fleet(2, coordinator="etcd", workdir=tmp_path) as f:
        assert f.lease_ttl_s == 2.0
        assert f.config["coordinator"]["kind"] == "etcd"
        [tid] = f.submit([{"params": {"pause_at": 16}}])
        paused = f.wait_marker(tid, timeout_s=60)
        kill = f.kill_worker(paused["pid"])
        assert kill["worker_exit"] == -signal.SIGKILL
        f.wait([tid], timeout_s=60)
        [r] = f.results([tid])
        grants = f.coord.history(tid)
    assert r["outcome"] == "COMPLETED" and r["takeovers"] == 1
    assert [g.owner_epoch for g in grants] == [1, 2]
    assert [g.owner_id for g in grants] == [o["worker_id"] for o in r["owners"]]
    assert r["owners"][1]["probes"] >= 1
    assert r["services"]["forward_repeated"] == 0 and r["services"]["effects_committed"] == 5
    [rto] = r["rto"]
    # etcd's TTLs are whole seconds, and etcd expires a key on its own clock: within a few seconds
    assert 0 <= rto["lease_expiry_wait_s"] and rto["rto_s"] < 8.0
    assert list(tmp_path.iterdir()) == []
