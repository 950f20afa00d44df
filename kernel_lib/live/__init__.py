"""The live substrate of the crash worksheet (issue 3): real processes, files and sockets.

* :mod:`.workspace` — the immutable, content-addressed workspace snapshot ``ws_r18``.
* :mod:`.executor` — the executor service (its own OS process, loopback only) that runs the real
  tests, keeps charging after the worker dies, answers status by operation id and signs its
  completion records (Ed25519).
* :mod:`.model` — the seeded stochastic model stand-in.
* :mod:`.worker` — the worker process (runs the repair trajectory through the dispatch gate; can
  pause at a log position) and the replacement worker (``--recover``: fold, then reconcile).
* :mod:`.controller` — the crash controller: ``run_worksheet`` kills the worker with a real
  ``SIGKILL`` and recovers in a new process (§11.1, §11.3.3, §11.5.3).
"""
