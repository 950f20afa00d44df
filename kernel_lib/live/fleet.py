"""The worker fleet: N real worker processes on one host running trajectories from a shared durable
queue, each trajectory owned under a lease, taken over when its worker dies (Failure Recovery,
"Fault-Tolerant System Synthesis"; Chapter 11 §11.5.1 resume at fleet scale).

:class:`Fleet` is the controller. It starts, in a fleet directory of its own (removed by
:meth:`Fleet.stop`):

* the tool services and the credential broker as processes on loopback
  (:class:`~kernel_lib.live.services.LiveFleet`; or it uses a running one you pass);
* the durable queue (:class:`~kernel_lib.live.fleet_queue.FleetQueue`, an SQLite file);
* the ownership coordinator: an SQLite file (:class:`~kernel_lib.ownership.leases.SQLiteOwnershipCoordinator`)
  or, with ``coordinator="etcd"``, etcd leases (:class:`~kernel_lib.quorum.coordinator.EtcdOwnershipCoordinator`
  on a cluster it starts on loopback, or on the endpoints you give); the queue stays an SQLite
  file on this host either way;
* the shared breaker store (:class:`~kernel_lib.recovery.gateway.shared.SQLiteBreakerStore`): every
  worker's breaker for a service is the same breaker;
* ``workers`` worker processes (:mod:`kernel_lib.live.fleet_worker`), each its own interpreter and
  session, so a real ``SIGKILL`` reaches only that worker.

The controller API: :meth:`~Fleet.submit` trajectories (a registered program name and its
parameters, :mod:`kernel_lib.live.fleet_programs`; FIFO with priority), :meth:`~Fleet.kill_worker`
(a real SIGKILL, of a given pid or of a random busy worker, optionally replaced by a new worker),
:meth:`~Fleet.pause_worker` / :meth:`~Fleet.resume_worker` (SIGSTOP / SIGCONT: the stalled
owner), :meth:`~Fleet.wait`, :meth:`~Fleet.results`, :meth:`~Fleet.summary`, :meth:`~Fleet.stop`.

``durability``: ``"on"`` (default) writes each trajectory's log to its own SQLite file (or
segment directory) acknowledged at the fdatasync tier (the trajectory declares ``host_crash``);
``"off"`` keeps it in the worker's memory (the memory store, tier ``memory``, declaring
``none``): nothing survives the worker, so a takeover starts the trajectory again from its
first step, and only the services' idempotency keys keep that from duplicating effects. The
queue, the coordinator and the services keep their own durability in both modes (the fleet
could not hand work over otherwise): the switch prices the trajectory log alone. It is a
default per fleet and can be set per trajectory at :meth:`~Fleet.submit`, so the same workers
run both (``bench fleet``).

Results (:meth:`Fleet.results`), per trajectory: ``state``, ``outcome``, the owner history
(worker, pid, ``owner_epoch``, times, fenced or killed), ``takeovers``, and for each takeover
after a kill the recovery time objective decomposed, all measured on the wall clock:
``lease_expiry_wait_s`` (kill -> the dead owner's lease expired), ``claim_s`` (-> a worker
claimed the row: a free worker's next look at the queue), ``takeover_s`` (-> the new lease was
granted, installed as the log's fence, the old owner's capability tokens revoked and a new one
issued), ``log_open_fold_s`` (-> the log was opened and folded), ``probes_s`` (status lookups of
in-doubt operations before the first new event), ``other_s`` (the rest until the first new
event), and ``rto_s`` (kill -> the first event the new owner appended: forward progress again).
The services' own audit trails judge each trajectory (:func:`kernel_lib.sim.saga_sweep.account`):
``forward_repeated`` and ``compensators_repeated`` count effects applied more than once;
``effects_left_unlisted`` counts resources of an ended, not completed, trajectory still held and
not listed as residue.
"""

from typing import Any

from kernel_lib.live.fleet_controller import (
    COORDINATORS,
    DEFAULT_BREAKER,
    DURABILITY,
    STORES,
    Fleet,
    rto_decomposition,
)

__all__ = ["Fleet", "DURABILITY", "COORDINATORS", "STORES", "DEFAULT_BREAKER", "rto_decomposition", "live_scorecard"]


def live_scorecard(trajectories: int = 20, seed: int = 0, turns: int = 6, **kw: Any) -> dict[str, Any]:
    """Table 14's sample on the live fleet: :func:`kernel_lib.live.scorecard_live.run_live_scorecard`
    (the name ``python -m kernel_lib scorecard --live`` calls). ``kw``: its other arguments
    (``workers``, ``configs``, ``profile``, ...)."""
    from kernel_lib.live.scorecard_live import run_live_scorecard

    return run_live_scorecard(trajectories, seed, turns=turns, **kw)
