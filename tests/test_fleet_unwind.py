"""A poison trajectory in the worker fleet: given up on forward progress, it is unwound, not leaked
(Failure Recovery, "Saga compensation stacks"; kernel_lib.live.fleet_queue's two claim bounds).

Fault model: the deployment saga's worker is SIGKILLed (a real signal, sent by the worker to itself)
at a forward position on every forward claim, so no owner ever finishes it; optionally the workers
that unwind it are SIGKILLed too (once, or every time). Invariant: counted by the tool services'
own resource tables and audits, never by our log: once the row has ended, no resource its forward
steps created is left live unless the row's result lists it as residue; no compensator is applied
twice; nothing forward runs in an unwind claim. Goal: `fleet run --kill-every` never leaves a
given-up trajectory's sandbox, IP, build or firewall rule behind without telling an operator.
"""

from __future__ import annotations

import sqlite3

import pytest

from kernel_lib.errors import FleetError
from kernel_lib.live.fleet import Fleet
from kernel_lib.live.fleet_queue import FleetQueue
from kernel_lib.live.services import LiveFleet
from kernel_lib.sim.services import ACTIONS

#: a position of the deployment saga's forward run (the first owner's: right after T2's dispatch)
FORWARD_KILL_AT = 16


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    with LiveFleet(tmp_path_factory.mktemp("svc"), client_timeout_s=5.0) as f:
        yield f


def live_ops(services, trajectory_id: str) -> set[str]:
    """Operation ids of the trajectory's resources the services still hold (their own tables)."""
    return {str(r["operation_id"]) for held in services.resources().values() for r in held.values()
            if str(r.get("operation_id", "")).startswith(trajectory_id + ".")}


def created_ops(services, trajectory_id: str) -> set[str]:
    """Forward effects the services applied for the trajectory (their audits)."""
    return {str(a["operation_id"]) for trail in services.audits().values() for a in trail
            if str(a.get("operation_id", "")).startswith(trajectory_id + ".") and not a.get("refused")
            and not ACTIONS[a["action"]].releases}


def run_poison(services, params: dict, *, max_unwind_claims: int = 3):
    with Fleet(2, services=services, lease_ttl_s=0.5, max_claims=2, max_unwind_claims=max_unwind_claims) as f:
        [tid] = f.submit([{"params": {"kill_forward_at": FORWARD_KILL_AT, **params}}])
        f.wait([tid], timeout_s=60)
        [r] = f.results([tid])
        summary = f.summary([r])
        kills = f.queue.kills()
        attempts = f.queue.attempts(tid)
    return tid, r, summary, kills, attempts


def test_a_poison_trajectory_is_unwound_after_the_forward_bound_and_leaves_nothing_live(services):
    tid, r, summary, kills, attempts = run_poison(services, {})
    forward_kills = [k for k in kills if k["detail"]["mode"] == "forward"]
    assert len(forward_kills) == 2 and len(kills) == 2          # every forward claim was killed
    assert created_ops(services, tid)                            # its forward steps did create resources
    assert live_ops(services, tid) == set()                      # and none of them is left live
    assert (r["state"], r["outcome"], r["mode"]) == ("failed", "ABORT_CONSISTENT", "unwind")
    assert r["result"]["unwound_after_give_up"] and r["result"]["forward_claims"] == 2
    assert [a["mode"] for a in attempts] == ["forward", "forward", "unwind"]
    unwinder = r["owners"][-1]
    assert unwinder["owner_epoch"] == 3                           # fenced like a takeover
    assert r["services"]["compensators_repeated"] == 0 and r["services"]["forward_repeated"] == 0
    assert summary["unwound_after_give_up"] == 1 and summary["outcomes"] == {"ABORT_CONSISTENT": 1}


def test_an_unwinder_killed_midway_is_replaced_and_the_unwind_still_leaves_nothing_live(services):
    tid, r, _, kills, attempts = run_poison(services, {"kill_unwind_at": 17, "kill_unwind_claims": 1})
    assert [k["detail"]["mode"] for k in kills] == ["forward", "forward", "unwind"]
    assert [a["mode"] for a in attempts] == ["forward", "forward", "unwind", "unwind"]
    assert created_ops(services, tid) and live_ops(services, tid) == set()
    assert (r["state"], r["outcome"], r["unwind_claims"]) == ("failed", "ABORT_CONSISTENT", 2)
    assert r["services"]["compensators_repeated"] == 0 and r["services"]["forward_repeated"] == 0


def test_past_the_unwind_bound_the_row_is_given_up_with_its_residue_listed(services):
    tid, r, summary, kills, _ = run_poison(services, {"kill_unwind_at": 4}, max_unwind_claims=2)
    assert [k["detail"]["mode"] for k in kills] == ["forward", "forward", "unwind", "unwind"]
    assert (r["state"], r["outcome"], r["unwind_claims"]) == ("failed", "GAVE_UP", 2)
    left = live_ops(services, tid)
    assert left                                                   # the unwind never got through
    listed = {x["operation_id"] for x in r["result"]["residue"]}
    assert left <= listed, (left, listed)                         # everything still live is listed
    assert all(x["compensator"] for x in r["result"]["residue"] if x["operation_id"] in left)
    assert summary["gave_up"] == 1 and r["services"]["effects_left_unlisted"] == 0


# --- the queue file --------------------------------------------------------------------------------


def _v1_queue(path) -> None:
    """A queue file as the version before unwind claims wrote it (no mode columns, user_version 1)."""
    from kernel_lib.live import fleet_queue

    db = sqlite3.connect(path)
    for stmt in fleet_queue._SCHEMA:
        db.execute(stmt.replace(",\n    mode TEXT NOT NULL DEFAULT 'forward',\n    unwind_claims INTEGER NOT NULL "
                                "DEFAULT 0", "").replace(",\n    mode TEXT NOT NULL DEFAULT 'forward'", ""))
    db.execute("INSERT INTO trajectories (trajectory_id, seq, program, params, durability, state, claims, "
               "submitted_at_s) VALUES ('old', 1, 'deployment', '{}', 'on', 'queued', 0, 1.0)")
    db.execute("PRAGMA application_id=1263289937")
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()


def test_a_queue_file_of_the_previous_layout_is_upgraded_and_its_rows_claimed_forward(tmp_path):
    path = tmp_path / "q.sqlite"
    _v1_queue(path)
    assert "mode" not in {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(trajectories)")}
    with FleetQueue(path) as q:
        c = q.claim("w", 1, 1.0)
        assert (c.trajectory_id, c.mode, c.unwind_claims) == ("old", "forward", 0)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 2


def test_a_queue_file_of_a_newer_layout_is_refused_untouched(tmp_path):
    path = tmp_path / "q.sqlite"
    FleetQueue(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=9")
    db.commit()
    db.close()
    with pytest.raises(FleetError, match="layout version 9"):
        FleetQueue(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 9


def test_with_durability_off_a_given_up_trajectory_is_not_reported_unwound_while_its_effects_are_live(services):
    """Fault model: durability off (no log survives a claim), every forward claim SIGKILLed.
    Invariant: a row never claims ABORT_CONSISTENT, nor lists an empty residue, while the services
    still hold resources its forward claims created: with no log, what to undo is unknown."""
    with Fleet(2, services=services, lease_ttl_s=0.5, max_claims=2, durability="off") as f:
        [tid] = f.submit([{"params": {"kill_forward_at": FORWARD_KILL_AT}}])
        f.wait([tid], timeout_s=60)
        [r] = f.results([tid])
        summary = f.summary([r])
    left = live_ops(services, tid)
    assert created_ops(services, tid) and left                    # nothing could undo them: no log
    assert r["state"] == "failed" and r["outcome"] != "ABORT_CONSISTENT", r
    assert r["result"]["residue"] is None, r["result"]            # unknown, not "nothing"
    assert not r["result"].get("unwound_after_give_up")
    assert summary["gave_up"] == 1 and summary["effects_left_unlisted"] == len(left)


def test_a_previous_layout_file_whose_write_lock_is_held_is_refused_as_busy_not_as_a_wrong_version(tmp_path):
    """Fault model: another process (here a connection) holds the version-1 file's write lock while
    this one opens it, so the in-place upgrade cannot take the lock within the busy timeout.
    Goal: the error says "busy, retry" (retryable), not that the file is of a layout it cannot read;
    the file is left at version 1 and upgrades once the lock is gone."""
    path = tmp_path / "q.sqlite"
    _v1_queue(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(FleetError) as refused:
            FleetQueue(path, busy_timeout_s=0.05)
        assert refused.value.retryable, refused.value
        assert "layout version 1" not in str(refused.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 1
    with FleetQueue(path, busy_timeout_s=0.05) as q:
        assert q.claim("w", 1, 1.0).trajectory_id == "old"
