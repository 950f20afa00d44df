"""kernel_lib: the reusable core of durable-agents-lab.

Modules (Durable Execution chapter sections in brackets):

* :mod:`kernel_lib.events` — envelope, event families of table 1, canonical encoding [§11.2.2]
* :mod:`kernel_lib.log` — stores, acknowledgment tiers, group commit, append contract
  [§11.3.1, §11.3.4, §11.8.4]
* :mod:`kernel_lib.record` — trajectory record and the pure fold [§11.2.1, §11.5.3]
* :mod:`kernel_lib.dispatch` — the dispatch gate and crash-position analysis [§11.3.2–11.3.3]
* :mod:`kernel_lib.crashcheck` — crash-consistency exploration of the segment log [§11.3.1]
* :mod:`kernel_lib.bench` — the append benchmark [§11.3.1 table 2, §11.3.4 eq. 2]
* :mod:`kernel_lib.resume` — a real resume timed stage by stage; serial sum and critical path [§11.5, eq. 7]
"""

__version__ = "0.1.0"
