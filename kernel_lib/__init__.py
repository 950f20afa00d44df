"""kernel_lib: the reusable core of durable-agents-lab.

Modules (Durable Execution chapter sections in brackets):

* :mod:`kernel_lib.core.events` — envelope, event families of table 1, canonical encoding [§11.2.2]
* :mod:`kernel_lib.log` — stores, acknowledgment tiers, group commit, append contract
  [§11.3.1, §11.3.4, §11.8.4]
* :mod:`kernel_lib.core.record` — trajectory record and the pure fold [§11.2.1, §11.5.3]
* :mod:`kernel_lib.gate.dispatch` — the dispatch gate and crash-position analysis [§11.3.2–11.3.3]
* :mod:`kernel_lib.verify.log_workload` — crash-consistency exploration of the segment log [§11.3.1]
* :mod:`kernel_lib.bench.append` — the append benchmark [§11.3.1 table 2, §11.3.4 eq. 2]
* :mod:`kernel_lib.checkpoint`, :mod:`kernel_lib.cadence` — checkpoints, restore, cadence [§11.4]
* :mod:`kernel_lib.ownership.leases`, :mod:`kernel_lib.gate.inbox` — leases, owner_epoch fencing, prefix
  availability, the durable result inbox [§11.5.1–11.5.3]
* :mod:`kernel_lib.gate.admission` — continuation admission after a resume [§11.5.4]
* :mod:`kernel_lib.resume.stages` — a real resume timed stage by stage; serial sum and critical path [§11.5, eq. 7]
* :mod:`kernel_lib.history.replay` — harness regression replay: the matching-request rule, sealing [§11.6.2]
* :mod:`kernel_lib.history.diverge` — locating the first divergence of two executions [§11.7, table 6]
* :mod:`kernel_lib.importers` — readers for other agents' recorded trajectories [§11.6–11.7]
* :mod:`kernel_lib.retention.pricing` — retention lifetimes and their price [§11.8, Napkin Math 11.2]
* :mod:`kernel_lib.course.exercises` — the §11.12 exercises: generators, solvers, checkers
"""

__version__ = "0.1.0"
