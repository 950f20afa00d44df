"""Our breaker, bulkhead and backoff beside resilience4j and pybreaker: what we match, what we add
for agents, what we leave out (Failure Recovery, "Tool Circuit Breakers"; issue 19).

:data:`COMPARISON` is plain data (a notebook renders it as a table; :func:`comparison_rows` gives
the rows as dicts, :func:`comparison_markdown` as a Markdown table). Each row: ``feature``,
``resilience4j``, ``pybreaker``, ``ours``, ``verdict`` (one of :data:`VERDICTS`).

Sources, read for this table (not from memory):

* resilience4j's CircuitBreaker configuration (names and defaults as documented for its
  CircuitBreakerConfig and the Spring / Camel properties that expose it): ``slidingWindowType``
  COUNT_BASED | TIME_BASED (default count), ``slidingWindowSize`` (100), ``minimumNumberOfCalls``
  (100), ``failureRateThreshold`` (50 %, open when the rate is equal or greater),
  ``slowCallRateThreshold`` (100 %) with ``slowCallDurationThreshold`` (60 s),
  ``waitDurationInOpenState`` (60 s) or ``waitIntervalFunctionInOpenState`` (a function of the
  attempt, e.g. exponential), ``permittedNumberOfCallsInHalfOpenState`` (10),
  ``maxWaitDurationInHalfOpenState`` (0: wait for the permitted calls indefinitely),
  ``automaticTransitionFromOpenToHalfOpenEnabled`` (false), ``recordExceptions`` /
  ``ignoreExceptions`` / ``recordResultPredicate``; refusals raise ``CallNotPermittedException``.
* pybreaker 1.4.1's source (installed from PyPI): ``fail_max`` (5) consecutive failures (a
  success resets the counter), ``reset_timeout`` (60 s), ``success_threshold`` (1),
  ``exclude`` (exception types or predicates not counted), listeners, ``CircuitMemoryStorage`` and
  ``CircuitRedisStorage`` (state, counters and ``opened_at`` in Redis, read and written as
  separate commands), ``CircuitBreakerError``; ``CircuitBreaker.call`` holds the breaker's
  ``RLock`` around the guarded call itself; ``call_async`` is for Tornado coroutines.
"""

from __future__ import annotations

from typing import Any

__all__ = ["VERDICTS", "COMPARISON", "comparison_rows", "comparison_markdown"]

#: ``match``: same semantics; ``add``: ours, for agents; ``differ``: both have it, we chose
#: otherwise; ``leave_out``: theirs, not ours.
VERDICTS = ("match", "add", "differ", "leave_out")

_F = ("feature", "resilience4j", "pybreaker", "ours", "verdict")

COMPARISON: tuple[tuple[str, str, str, str, str], ...] = (
    ("count-based sliding window", "slidingWindowType=COUNT_BASED, slidingWindowSize (100)",
     "no window: fail_max consecutive failures (5), reset by a success",
     "window_kind='count', window_size W (20): the last W outcomes as bit strings", "match"),
    ("time-based sliding window", "TIME_BASED: the last N seconds, aggregated per second", "none",
     "window_kind='time': 1-s buckets of the last window_size seconds", "match"),
    ("minimum calls before a rate counts", "minimumNumberOfCalls (100)", "n/a (consecutive count)",
     "minimum_calls (10)", "match"),
    ("failure-rate threshold", "failureRateThreshold, %, opens at >= (50)", "fail_max consecutive",
     "failure_rate_threshold tau_fail in (0, 1], opens at E >= tau_fail (0.5; table 10: 0.5 / 0.6)", "match"),
    ("slow-call rate", "slowCallRateThreshold (100 %) + slowCallDurationThreshold (60 s)", "none",
     "slow_call_rate_threshold + slow_call_duration_s (off by default)", "match"),
    ("what counts as a failure", "recordExceptions / ignoreExceptions / recordResultPredicate (any exception "
     "by default)", "every exception except exclude=[...]",
     "a declared, tested classify_outcome: transport only (timeouts, 5xx, 429, malformed frames, network "
     "errors); domain errors are successes; replaceable", "differ"),
    ("cooldown in open", "waitDurationInOpenState (60 s), or waitIntervalFunctionInOpenState(attempt)",
     "reset_timeout (60 s), fixed",
     "cooldown_s doubled after each failed probe up to cooldown_max_s; a success resets it to the base",
     "match"),
    ("open -> half-open", "on the next call, or by a timer (automaticTransitionFromOpenToHalfOpenEnabled)",
     "on the next call", "on the next call (decide), or tick() for a dashboard / the simulator", "match"),
    ("calls permitted in half-open", "permittedNumberOfCallsInHalfOpenState (10)",
     "the next call (the lock serialises callers); success_threshold successes close it",
     "half_open_permits K_canary (1); others fail fast at once", "match"),
    ("half-open verdict", "failure rate of the permitted calls vs the threshold, after all of them",
     "one failed trial reopens", "any failed (or, with slow calls counted, slow) canary reopens at once; all K "
     "succeeded closes", "differ"),
    ("a probe that never reports", "maxWaitDurationInHalfOpenState (0: waits for ever)", "n/a",
     "canary_timeout_s lease: an unreported canary counts as failed (a dead worker cannot wedge it)", "add"),
    ("concurrency of guarded calls", "not serialised", "RLock held around the guarded call: one call at a time "
     "per breaker per process", "the lock is held only to decide and record, never across the call", "differ"),
    ("what a refused caller gets", "CallNotPermittedException", "CircuitBreakerError",
     "an Observation: ERR_CIRCUIT_OPEN with dependency_id and cooldown_remaining_s, text for the model's context",
     "add"),
    ("state shared across processes", "no (in-process; metrics exported)",
     "CircuitRedisStorage: shared, but state and counters are separate reads and writes",
     "SQLiteBreakerStore (WAL) on the host: read-decide-write in one BEGIN IMMEDIATE transaction, so one canary "
     "across processes; EtcdBreakerStore across hosts (compare-and-swap)", "add"),
    ("transitions recorded", "event publisher (in memory)", "listeners (state_change)",
     "rows (time, from, to, reason, generation, cooldown, rates, pid) in the shared store; on_transition hook",
     "add"),
    ("asyncio", "n/a (Java; Reactor / RxJava / Kotlin adapters)", "call_async for Tornado only",
     "CircuitBreaker.acall, AsyncBulkhead, ToolGateway.acall", "add"),
    ("bulkhead", "SemaphoreBulkhead (maxConcurrentCalls, maxWaitDuration); ThreadPoolBulkhead (pool, queueCapacity)",
     "none", "per-domain slots + queue + queue wait + call timeout on a per-domain pool (table 9 defaults); "
     "ERR_BULKHEAD_FULL / ERR_RESOURCE_EXHAUSTED observations", "match"),
    ("retry backoff", "Retry + IntervalFunction (fixed, exponential, randomized)", "none",
     "exponential, full / equal / decorrelated jitter (AWS formulas), seeded, capped; max_retries and/or a "
     "token-bucket budget; an unbounded policy is a config error", "add"),
    ("rate limiter, time limiter as separate modules", "RateLimiter, TimeLimiter", "none",
     "no rate limiter (the retry budget bounds retries only); the call timeout lives in the bulkhead", "leave_out"),
    ("metrics export, health indicators, registry, config hot reload", "Micrometer, Actuator, registry",
     "listeners, counters", "snapshot() / gateway.snapshot() only", "leave_out"),
    ("fallback functions", "fallbackMethod / decorators", "none",
     "none: the synthetic observation goes to the model, which chooses another plan (or the saga compensates)",
     "leave_out"),
    ("manual control", "transitionToOpenState / Closed / Disabled / ForcedOpen", "open() / close() / half_open()",
     "force('open' | 'closed'); no disabled / metrics-only states", "match"),
)


def comparison_rows() -> list[dict[str, Any]]:
    """:data:`COMPARISON` as a list of dicts with keys ``feature``, ``resilience4j``,
    ``pybreaker``, ``ours``, ``verdict``."""
    return [dict(zip(_F, r)) for r in COMPARISON]


def comparison_markdown() -> str:
    """:data:`COMPARISON` as a Markdown table."""
    lines = ["| " + " | ".join(_F) + " |", "|" + "---|" * len(_F)]
    for r in COMPARISON:
        lines.append("| " + " | ".join(c.replace("|", "/") for c in r) + " |")
    return "\n".join(lines)
