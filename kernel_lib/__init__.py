"""kernel_lib: the reusable core of durable-agents-lab.

The package is layered. Each layer imports only the layers listed *below* it; siblings separated
by ``|`` do not import each other. ``tests/test_architecture.py`` runs import-linter on this map
(``[tool.importlinter]`` in ``pyproject.toml``), which sees imports inside functions too; nothing
in ``kernel_lib`` imports the views in ``widgets/`` or ``apps/``.

====================================================  ===========================================
layer (highest first)                                 what lives there  [chapter sections]
====================================================  ===========================================
``cli``                                               the only argparse code: one module per
                                                      command group, one exit-code policy
``course`` | ``bench`` | ``verify``                   exercises and notebook helpers [§11.12];
                                                      benchmarks on one harness; one crash-state
                                                      engine with its workloads [§11.3.1]
``live``                                              real processes: worker, executor service,
                                                      crash controller, the worksheet session
``quorum``                                            etcd cluster, store, coordinator, the
                                                      replication session [§11.3.1 row 3, §11.5.1]
``sim``                                               the deterministic substrate: event makers,
                                                      scripted endpoints, the model stand-in, the
                                                      worksheet trajectory
``importers``                                         readers of other agents' logs [§11.6–11.7]
``recovery``                                          Failure Recovery (sagas, forward repair,
                                                      pivots, watchdogs, gateway, quarantine)
``cadence`` | ``resume`` | ``history`` | ``retention``  checkpoint cadence [§11.4.3]; resume timed,
                                                      mass resume [§11.5]; replay, time travel,
                                                      branches, divergence [§11.6–11.7];
                                                      retention pricing and the storage-engine
                                                      contract [§11.8]
``gate`` | ``ownership``                              the dispatch gate applying core decisions,
                                                      continuation admission, signed evidence,
                                                      the result inbox [§11.3.2, §11.5.3–11.5.4];
                                                      leases, owner epochs, fencing [§11.5.1]
``checkpoint``                                        manifests, trees, capture, restore [§11.4]
``log``                                               stores, acknowledgment tiers and failure
                                                      domains, append contract, group commit,
                                                      log files, the store conformance suite
                                                      [§11.2–11.3, §11.8.4]
``core``                                              pure and deterministic: events, record and
                                                      fold, decisions [§11.2–11.3]
``limits`` | ``_support``                             every bound with its reason; stdlib-only
                                                      helpers (value checks, SQLite, processes)
``errors``                                            one exception tree
====================================================  ===========================================

``python -m kernel_lib --help`` lists the commands. The course notebooks are in ``notebooks/``.
"""

__version__ = "0.1.0"
