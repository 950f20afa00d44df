"""``recovery``: the Failure Recovery chapter (``../shared/chapters/003_b638c7bc18ddae49.txt``).

Empty today; the mechanisms of that chapter will live here, each written as a pure decision from
the fold plus a thin runner that applies it:

* ``saga`` — the trajectory saga: state machine, the compensation stack folded from the log,
  crash-safe unwind, terminal escalation (ACB freeze);
* ``policy`` — the recovery policy D(Ω): error taxonomy, budget headroom, the economic
  break-even of forward repair against unwind and rerun; the anti-spin bound;
* ``pivot`` — reversibility tiers, the pivot boundary and the verification gate;
* ``watchdog`` — semantic watchdogs (state-hash cycles, metric stagnation, action repetition,
  entropy collapse) and their three-tier interventions;
* ``gateway`` — the tool gateway: circuit breakers (closed, open, half-open), backoff, bulkheads;
* ``quarantine`` — quarantine and taint tracking.

May import: ``cadence``, ``resume``, ``history``, ``retention``, ``gate``, ``ownership``,
``checkpoint``, ``log``, ``core`` and the leaves; never ``importers``, ``sim``, ``live``,
``quorum``, ``verify``, ``bench``, ``cli`` or ``course``.
"""
