"""``recovery``: the Failure Recovery chapter (``../shared/chapters/003_b638c7bc18ddae49.txt``).

The mechanisms of that chapter live here, each written as a pure decision from the fold plus a
thin runner that applies it. Built so far:

* ``contracts`` — tool declarations (table 5): reversibility tier, repeat contract, status
  lookup, the registered compensator and how its arguments bind; refused when incomplete;
* ``saga`` — the trajectory saga as a fold of the log: the table-2 state machine, the
  compensation stack Σ (table 3), the unwind's next action;
* ``runner`` — the thin runner: forward steps and compensators through the dispatch gate,
  crash-safe unwind, PANIC and terminal escalation (the ACB freeze);
* ``agent`` — the same declarations for a practitioner's plain Python functions;
* ``views`` — what a notebook or widget shows of a saga (L_fwd, Σ, the timeline of its records),
  as rows computed from the fold;
* ``taxonomy`` — gate 1: transient / semantic / fatal / unclassified, for the services' error
  objects and imported logs' text;
* ``signatures`` — error signatures σ (normalization documented) and the anti-spin bound
  (``SpinGuard``: k_i ≤ K_repair, repeated σ in a FIFO window);
* ``spin_report`` — where the anti-spin bound would have stopped each repair loop of a recorded
  log (ours or an imported one): error observations, the sub-transaction stand-in for imported
  logs, both positions of each stop;
* ``repair_stats`` — the per-failure-class repair success estimate p (Beta(1, 1) prior), folded
  from ``RepairOutcome`` records;
* ``policy`` — the recovery policy D(Ω): gate 1, anti-spin, gate 2 budget headroom, gate 3 the
  break-even of forward repair against unwind and rerun; remedies chosen by expected cost;
* ``repair`` — the forward-repair loop over the runner: Ω folded from the log, D(Ω) recorded
  before it is acted on, transient retry, repair through the dispatch gate under the anti-spin
  bound, rollback or escalation; k_i and H_i come back from the log after a crash;
* ``pivot`` — the pivot action boundary (table 5, Example 0.1): a plan checker for the invariant
  and a reorderer that stages irreversible payloads in escrow for the pivot's atomic outbox;
* ``verification`` — the pre-pivot verification gate: deterministic checks (a test run, artifact
  digests, invariants read from the services) with evidence; the model's claim has weight 0. The
  crossing PREPARING -> COMMITTED (``PivotCrossed``) is in ``saga`` and ``runner``;
* ``plan_run`` — a pivot plan run through the saga runner (gate, crossing, pivot with its
  outbox, finalization; unwind before the pivot, escalation after it);
* ``observations`` — reading an error from an observation's text (shared by ``spin_report`` and
  the watchdog);
* ``watchdog`` — semantic watchdogs (table 6: state-hash cycles over the workspace or what a log
  reveals, metric stagnation and oscillation, action repetition, repeated questions, entropy
  collapse, optional embedding drift), the baselines other runtimes ship, and the table-7
  three-tier intervention (interrupt, backtrack with an action mask, ERR_SEMANTIC_DEADLOCK);
* ``gateway`` — the tool gateway (tables 8-10, figure 4): a pure tri-state circuit breaker
  (count / time windows, minimum calls, failure and slow-call rates, one canary, cooldown
  doubling) run for threads and asyncio with its state shared by every process of the host
  (SQLite); bounded, jittered backoff (AWS schedules, retry budgets); per-domain bulkheads; the
  ``ToolGateway`` answering every call with a real or synthetic observation
  (``ERR_CIRCUIT_OPEN``, ``ERR_BULKHEAD_FULL``, ``ERR_RESOURCE_EXHAUSTED``); the comparison with
  resilience4j and pybreaker;
* ``quarantine`` — blast-radius quarantine (tables 11-12, definition 0.3, Example 0.2): the
  pre-execution egress check and gateway severing, the four-stage protocol's decisions, the
  ``TrajectoryQuarantined`` tombstone, taint lineage, the durable taint ledger and the mediation
  gateway (its effects run in ``kernel_lib.live.quarantine``);
* ``synthesis`` — the synthesized fault-tolerant runtime (table 13, figure 5, table 14): one
  harness whose configuration selects the unmanaged script, WAL only, saga only or the whole
  synthesis; the crash-consistency invariant checked after every step and the restart
  classification; the seeded 20 % fault profile; figure 5's lifelines as data; closed forms of the
  completion rate and of Napkin Math 0.5's RTO (its runners: ``kernel_lib.sim.scorecard``,
  ``kernel_lib.live.fleet``, ``kernel_lib.live.figure5``).

May import: ``cadence``, ``resume``, ``history``, ``retention``, ``gate``, ``ownership``,
``checkpoint``, ``log``, ``core`` and the leaves; never ``importers``, ``sim``, ``live``,
``quorum``, ``verify``, ``bench``, ``cli`` or ``course``.
"""
