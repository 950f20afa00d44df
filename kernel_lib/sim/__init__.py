"""``sim``: the deterministic substrate (Design principle 4: determinism is injected).

* :mod:`.events` — seeded synthetic trajectories (:class:`EventMaker`) and the sample tool intent
  the benchmarks, the quorum demo and the replication panel append;
* :mod:`.worksheet` — the crash worksheet's trajectory recorded through the dispatch gate;
* :mod:`.model` — the seeded model stand-in;
* :mod:`.endpoints` — scripted endpoints with declared repeat contracts (a payment service, its
  idempotency-key variant, a completion signer) and a worker that dies after sending.
* :mod:`.rerun` — re-runs of a recording on a serving path that is not bit-stable (a flipped call
  answers from the nearest other seed), simulated many times (§11.9).
* :mod:`.saga_demo` — the deployment saga one action at a time over a fleet facade (step, inject,
  unwind, crash during the unwind, recover), the two-phase-commit fallacy run and an out-of-band
  incident channel, for notebook FR.1 and the saga stepper widget.
* :mod:`.repairer` — a seeded repair-pass stand-in (success, spin or drift), fallback models with
  prices, and the measured break-even of repair first against unwind and rerun (Napkin Math 0.2).
* :mod:`.herd` — the retry storm on a virtual clock: N agents, one FIFO service that stalls and
  restarts (or slows and errs), the gateway's backoff and one shared breaker; deterministic backoff
  against full jitter against full jitter with the breaker (Napkin Math 0.4, figure 4 (b)).
* :mod:`.two_phase` — two-phase commit with lockable participants (the project's services have no
  prepare phase; these are given one), a coordinator that can be cut off, the same work as a saga.
* :mod:`.rollback_pitfall` — an e-mail "compensated" by a correction against the pivot-ordered plan.

May import: every layer below it (``importers`` and down); never ``quorum``, ``live`` or a real
process or socket.
"""

from kernel_lib._support.lazy import lazy_exports

# The names load on first use: the live tool services import kernel_lib.sim.services in each of
# their processes, and an eager import of the worksheet here (the dispatch gate, the log) would add
# about half a second to every service's start-up.
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.sim.worksheet": ("WORKSHEET_TRAJECTORY", "WS_R18_REF", "worksheet_policy", "worksheet_task",
                                 "worksheet_events"),
    "kernel_lib.sim.model": ("MODEL_NAME", "StochasticModel", "repair_prompt"),
    "kernel_lib.sim.events": ("EventMaker", "sample_intent", "sample_intent_events"),
})
