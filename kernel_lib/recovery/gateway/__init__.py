"""``recovery.gateway``: the tool gateway (Failure Recovery, "Tool Circuit Breakers": figure 4,
tables 8-10, Napkin Math 0.4, the pitfall "Allowing unbounded retries").

Every tool call an agent makes to a dependency passes one gateway that sheds load before an outage
spreads into the runtime: a bulkhead per domain (table 9), a circuit breaker per dependency
(table 8), a call timeout, a transport-only classification of the outcome, and a bounded, jittered
backoff decision (figure 4 (b)). The agent always gets an :class:`Observation` back: the tool's
real answer, or a synthetic fast fail (``ERR_CIRCUIT_OPEN``, ``ERR_BULKHEAD_FULL``,
``ERR_RESOURCE_EXHAUSTED``) made without contacting the dependency.

* ``model`` -- the vocabulary: :class:`CallOutcome`, :func:`classify_outcome` -> :class:`Verdict`,
  :class:`Observation` and its stable codes;
* ``backoff`` -- deterministic exponential, full, equal and decorrelated jitter (AWS Architecture
  Blog formulas), seeded, capped, with a retry budget; an unbounded policy is a config error;
* ``breaker`` -- the tri-state breaker as a pure state machine (count and time windows, minimum
  calls, failure and slow-call rates, single canary, cooldown doubling up to a cap);
* ``runner`` -- :class:`CircuitBreaker`: the machine applied under a lock for threads and asyncio,
  its state in the object or in a shared :class:`BreakerStore`;
* ``shared`` -- :class:`SQLiteBreakerStore`: one breaker per dependency for every process of the
  host (WAL, transitions as rows, the half-open canary single across processes);
* ``bulkhead`` -- per-domain slots, queue and timeouts (table 9's three domains, table 10's
  shares), for threads (a worker pool per domain) and asyncio;
* ``gateway`` -- :class:`ToolGateway`: bulkhead -> breaker -> call with timeout -> classification
  -> backoff decision, one observation per call.

* ``compare`` -- :data:`COMPARISON`: the semantics beside resilience4j and pybreaker (below).

Against resilience4j and pybreaker (the full table, with sources: :mod:`.compare`):

==============  =========================================================================================
we match        resilience4j's count- and time-based windows, minimumNumberOfCalls,
                failureRateThreshold (open at >=), slow-call rate and duration, permitted calls in
                half-open, a growing wait in open (its waitIntervalFunctionInOpenState), lazy
                open -> half-open (tick() for the timer variant), a semaphore / pool bulkhead;
                pybreaker's reset timeout and manual open / close
we add          a synthetic ERR_CIRCUIT_OPEN *observation* for the model (dependency, remaining
                cooldown) instead of an exception; a declared, replaceable transport-only
                classification; state shared by every process of the host (SQLite, one canary
                across processes) and across hosts (etcd); transitions as rows; a canary lease so a
                dead worker cannot wedge half-open; cooldown doubling to a cap by default; asyncio;
                AWS jitter schedules with a retry budget where an unbounded policy is an error
we differ       any failed canary reopens at once (resilience4j waits for all K and compares the
                rate); the lock is never held across the call (pybreaker 1.4 serialises calls)
we leave out    rate and time limiters as modules, fallbacks, metrics export and registries,
                disabled / metrics-only states
==============  =========================================================================================

Clock and randomness are injected everywhere, so the same code runs on the simulator's virtual
clock and live. Every public name is exported here and loaded on first use (PEP 562).
"""

from kernel_lib._support.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.recovery.gateway.model": (
        "OK", "ERR_TOOL", "ERR_TIMEOUT", "ERR_SERVER", "ERR_RATE_LIMITED", "ERR_TRANSPORT", "ERR_MALFORMED",
        "ERR_CIRCUIT_OPEN", "ERR_BULKHEAD_FULL", "ERR_RESOURCE_EXHAUSTED", "OBSERVATION_CODES",
        "SYNTHETIC_CODES", "FAILURE_KINDS", "CallOutcome", "Verdict", "Observation",
        "Classifier", "classify_outcome", "status_of"),
    "kernel_lib.recovery.gateway.backoff": (
        "BACKOFF_STRATEGIES", "BackoffStrategy", "BackoffPolicy", "RetryBudget", "BackoffSchedule", "ceiling_s",
        "backoff_delay_s", "bucket_take", "make_rng", "AWS_BACKOFF_SOURCE"),
    "kernel_lib.recovery.gateway.breaker": (
        "CLOSED", "OPEN", "HALF_OPEN", "BREAKER_STATES", "TRANSITION_REASONS", "WindowKind", "BreakerConfig",
        "BreakerState", "Permit", "Decision", "Transition", "initial_state", "decide", "record", "tick", "force",
        "window_rates", "cooldown_remaining_s", "TABLE_10_BREAKERS"),
    "kernel_lib.recovery.gateway.runner": (
        "BreakerStore", "MemoryBreakerStore", "CircuitBreaker", "BreakerSnapshot", "circuit_open_observation",
        "observation_of"),
    "kernel_lib.recovery.gateway.shared": ("SQLiteBreakerStore", "BREAKER_STORE_LAYOUT", "BREAKER_STORE_FILE"),
    "kernel_lib.recovery.gateway.bulkhead": ("DomainSpec", "TABLE_9_DOMAINS", "TABLE_10_SHARES", "domains_for_pool",
                                             "Bulkhead", "AsyncBulkhead", "BulkheadStats", "Slot"),
    "kernel_lib.recovery.gateway.gateway": ("ToolGateway", "Route", "bulkhead_observation"),
    "kernel_lib.recovery.gateway.compare": ("VERDICTS", "COMPARISON", "comparison_rows", "comparison_markdown"),
})
