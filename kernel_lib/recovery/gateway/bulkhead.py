"""Bulkheads: a concurrency cap, a bounded queue and timeouts per tool domain (Failure Recovery,
"Bulkhead resource partitioning": tables 9 and 10, N_blocked = min(C_pool, lambda_ext T_timeout)).

A domain (:class:`DomainSpec`) owns ``max_concurrent`` slots, a queue of ``queue_capacity``
callers waiting at most ``queue_timeout_s`` for one, and a call timeout. A call that finds every
slot busy and the queue full is refused at once with ``ERR_RESOURCE_EXHAUSTED`` (the chapter's
"queue saturated; defer execution"); one that finds every slot busy and no queue (capacity 0), or
whose queue wait runs out, is refused with ``ERR_BULKHEAD_FULL``. A hung external API can fill its
own domain, never another's: the local domain keeps all of its slots.

Two runners, one accounting:

* :class:`Bulkhead` (threads): calls run on the domain's own worker pool (a
  ``ThreadPoolExecutor`` of ``max_concurrent`` threads, table 9's "dedicated worker pools"); the
  caller waits at most ``call_timeout_s`` for the answer. A Python thread cannot be killed, so a
  call that timed out keeps its slot until it really returns: the cap counts the threads that are
  actually blocked, which is what protects the host.
* :class:`AsyncBulkhead` (asyncio): the same slots and queue for coroutines on one event loop;
  a call that times out is cancelled and gives its slot back.

:data:`TABLE_9_DOMAINS` holds the chapter's three domains with table 9's caps, queue slots and
timeouts, and table 10's breaker and backoff policy for each; :func:`domains_for_pool` splits a
host's worker capacity 60/30/10 % as table 10 does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kernel_lib.errors import GatewayConfigError
from kernel_lib.recovery.gateway.backoff import BackoffPolicy
from kernel_lib.recovery.gateway.breaker import TABLE_10_BREAKERS, BreakerConfig
from kernel_lib.recovery.gateway.model import ERR_BULKHEAD_FULL, ERR_RESOURCE_EXHAUSTED, CallOutcome

__all__ = ["DomainSpec", "TABLE_9_DOMAINS", "TABLE_10_SHARES", "domains_for_pool", "Bulkhead", "AsyncBulkhead",
           "BulkheadStats", "Slot"]


@dataclass(frozen=True, slots=True)
class DomainSpec:
    """One bulkhead domain (table 9 row).

    Fields:
        name: the domain's name (``local``, ``internal_rpc``, ``external_api`` or your own).
        max_concurrent: slots: calls running at once (>= 1).
        queue_capacity: callers that may wait for a slot (>= 0; 0: refuse at once).
        queue_timeout_s: the longest a queued caller waits for a slot (s, >= 0).
        call_timeout_s: the longest the gateway waits for a call's answer (s, > 0).
        breaker: the breaker configuration for the domain's dependencies, or None (no breaker:
            table 10's local tools, whose failures are the kernel's own).
        backoff: the retry policy for the domain's calls, or None (no retry advised).
        source: where the numbers come from (shown in tables).

    Raises:
        GatewayConfigError: a field out of range.
    """

    name: str
    max_concurrent: int
    queue_capacity: int
    queue_timeout_s: float
    call_timeout_s: float
    breaker: BreakerConfig | None = None
    backoff: BackoffPolicy | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise GatewayConfigError(f"a domain's name must be a non-empty str, got {self.name!r}", field="name")
        for f, low in (("max_concurrent", 1), ("queue_capacity", 0)):
            v = getattr(self, f)
            if type(v) is not int or not low <= v <= 1_000_000:
                raise GatewayConfigError(f"{self.name}.{f} must be an integer in [{low}, 1000000], got {v!r}",
                                         field=f)
        for f, positive in (("queue_timeout_s", False), ("call_timeout_s", True)):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or (v <= 0 if positive else v < 0):
                raise GatewayConfigError(f"{self.name}.{f} must be a finite number of seconds "
                                         f"{'> 0' if positive else '>= 0'}, got {v!r}", field=f)
            object.__setattr__(self, f, float(v))
        if self.breaker is not None and not isinstance(self.breaker, BreakerConfig):
            raise GatewayConfigError(f"{self.name}.breaker must be a BreakerConfig or None", field="breaker")
        if self.backoff is not None and not isinstance(self.backoff, BackoffPolicy):
            raise GatewayConfigError(f"{self.name}.backoff must be a BackoffPolicy or None", field="backoff")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "max_concurrent": self.max_concurrent, "queue_capacity": self.queue_capacity,
                "queue_timeout_s": self.queue_timeout_s, "call_timeout_s": self.call_timeout_s,
                "breaker": None if self.breaker is None else self.breaker.to_json(),
                "backoff": None if self.backoff is None else {
                    "strategy": self.backoff.strategy, "base_s": self.backoff.base_s, "cap_s": self.backoff.cap_s,
                    "max_retries": self.backoff.max_retries},
                "source": self.source}


_T9 = "table 9 (cap, queue slots, timeout); table 10 (breaker, backoff); queue wait = one call timeout (ours)"

#: The chapter's three domains. Concurrency caps, queue slots and timeouts: table 9. Breaker
#: policy: table 10 (:data:`~kernel_lib.recovery.gateway.breaker.TABLE_10_BREAKERS`). Backoff:
#: table 10 (local: immediate retry, at most 1; internal: exponential with full jitter; external:
#: full jitter with a wide cooldown; T0 and T_max are ours, from the chapter's examples). The
#: queue wait is not in the chapter: ours, one call timeout.
TABLE_9_DOMAINS: dict[str, DomainSpec] = {
    "local": DomainSpec("local", 64, 128, 0.5, 0.5, None,
                        BackoffPolicy("exponential", base_s=1e-3, cap_s=1e-3, max_retries=1), _T9),
    "internal_rpc": DomainSpec("internal_rpc", 32, 64, 2.0, 2.0, TABLE_10_BREAKERS["internal_rpc"],
                               BackoffPolicy("full_jitter", base_s=0.1, cap_s=10.0, max_retries=3), _T9),
    "external_api": DomainSpec("external_api", 16, 16, 10.0, 10.0, TABLE_10_BREAKERS["external_api"],
                               BackoffPolicy("full_jitter", base_s=1.0, cap_s=30.0, max_retries=3), _T9),
}

#: Table 10's "concurrency allocation": shares of the host's worker capacity per domain.
TABLE_10_SHARES = {"local": 0.6, "internal_rpc": 0.3, "external_api": 0.1}


def domains_for_pool(total_workers: int, *, shares: Mapping[str, float] = TABLE_10_SHARES,
                     base: Mapping[str, DomainSpec] = TABLE_9_DOMAINS) -> dict[str, DomainSpec]:
    """Table 9's domains with their caps re-cut from ``total_workers`` by table 10's shares
    (60/30/10 %; each at least 1; queue slots scaled in proportion). E.g. Napkin Math 0.4's
    M = 300 threads -> 180 / 90 / 30. Raises GatewayConfigError for a bad total or shares."""
    if type(total_workers) is not int or total_workers < len(shares):
        raise GatewayConfigError(f"total_workers must be an integer >= {len(shares)}, got {total_workers!r}",
                                 field="total_workers")
    if any(k not in base for k in shares) or not math.isclose(sum(shares.values()), 1.0, abs_tol=1e-9) \
            or any(not 0 < v <= 1 for v in shares.values()):
        raise GatewayConfigError(f"shares must name known domains and sum to 1, got {dict(shares)!r}", field="shares")
    out = {}
    for name, share in shares.items():
        spec = base[name]
        cap = max(1, int(total_workers * share))
        queue = max(0, round(spec.queue_capacity * cap / spec.max_concurrent))
        out[name] = replace(spec, max_concurrent=cap, queue_capacity=queue,
                            source=f"table 10 shares of {total_workers} workers; " + spec.source)
    return out


@dataclass
class BulkheadStats:
    """Counters of one bulkhead (since it was made): ``admitted`` (got a slot), ``queued`` (had to
    wait), ``rejected_full`` (ERR_BULKHEAD_FULL), ``rejected_exhausted`` (ERR_RESOURCE_EXHAUSTED),
    ``timed_out`` (call timeout), ``completed`` (returned, in time or not), ``peak_running``."""

    admitted: int = 0
    queued: int = 0
    rejected_full: int = 0
    rejected_exhausted: int = 0
    timed_out: int = 0
    completed: int = 0
    peak_running: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"admitted": self.admitted, "queued": self.queued, "rejected_full": self.rejected_full,
                "rejected_exhausted": self.rejected_exhausted, "timed_out": self.timed_out,
                "completed": self.completed, "peak_running": self.peak_running}


@dataclass(slots=True)
class Slot:
    """A granted slot: ``queue_wait_s`` is how long the caller waited for it (s)."""

    queue_wait_s: float


class Bulkhead:
    """A domain's slots, queue and worker pool, for threads (module docstring).

    Args:
        spec: the :class:`DomainSpec`.
        monotonic: the clock of queue waits (s; default ``time.monotonic``; waits are real waits,
            so this is the one clock not taken from the gateway's injected clock).

    Use :meth:`acquire` / :meth:`release` around your own call, or :meth:`run` to call on the
    domain's pool with the call timeout.
    """

    def __init__(self, spec: DomainSpec, *, monotonic: Callable[[], float] = time.monotonic):
        if not isinstance(spec, DomainSpec):
            raise GatewayConfigError(f"spec must be a DomainSpec, got {type(spec).__name__}", field="spec")
        self.spec = spec
        self._now = monotonic
        self._cond = threading.Condition(threading.Lock())
        self.running = 0
        self.waiting = 0
        self.stats = BulkheadStats()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def acquire(self) -> Slot | str:
        """A :class:`Slot`, or the refusal code (``ERR_BULKHEAD_FULL`` / ``ERR_RESOURCE_EXHAUSTED``)."""
        spec = self.spec
        with self._cond:
            if self.running < spec.max_concurrent and self.waiting == 0:
                self.running += 1
                self.stats.admitted += 1
                if self.running > self.stats.peak_running:
                    self.stats.peak_running = self.running
                return Slot(0.0)
            if self.waiting >= spec.queue_capacity:
                if spec.queue_capacity == 0:
                    self.stats.rejected_full += 1
                    return ERR_BULKHEAD_FULL
                self.stats.rejected_exhausted += 1
                return ERR_RESOURCE_EXHAUSTED
            self.waiting += 1
            self.stats.queued += 1
            t0 = self._now()
            deadline = t0 + spec.queue_timeout_s
            try:
                while self.running >= spec.max_concurrent:
                    left = deadline - self._now()
                    if left <= 0:
                        self.stats.rejected_full += 1
                        return ERR_BULKHEAD_FULL
                    self._cond.wait(left)
            finally:
                self.waiting -= 1
            self.running += 1
            self.stats.admitted += 1
            if self.running > self.stats.peak_running:
                self.stats.peak_running = self.running
            return Slot(self._now() - t0)

    def release(self) -> None:
        """Give a slot back (exactly once per granted :meth:`acquire`)."""
        with self._cond:
            self.running -= 1
            self.stats.completed += 1
            self._cond.notify()

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.spec.max_concurrent,
                                                                   thread_name_prefix=f"bulkhead-{self.spec.name}")
            return self._pool

    def call_in_slot(self, fn: Callable[..., Any], args: tuple, kwargs: dict, timeout_s: float | None = None
                     ) -> CallOutcome:
        """Run ``fn`` on the domain's pool while holding a slot already granted, waiting at most
        ``timeout_s`` (default: the domain's call timeout). The slot is released when ``fn``
        really returns (module docstring), not at the timeout."""
        timeout = self.spec.call_timeout_s if timeout_s is None else timeout_s
        t0 = time.perf_counter()
        try:
            fut = self._executor().submit(fn, *args, **kwargs)
        except BaseException:
            self.release()
            raise
        fut.add_done_callback(lambda _f: self.release())
        try:
            value = fut.result(timeout)
        except concurrent.futures.TimeoutError:
            with self._cond:
                self.stats.timed_out += 1
            return CallOutcome(timed_out=True, duration_s=time.perf_counter() - t0)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:          # noqa: B036 -- the tool's exception is the outcome
            return CallOutcome(error=exc, duration_s=time.perf_counter() - t0)
        return CallOutcome(value=value, duration_s=time.perf_counter() - t0)

    def run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> tuple[CallOutcome | None, Slot | str]:
        """Acquire a slot and call ``fn`` in it: ``(outcome, slot)``, or ``(None, refusal code)``."""
        slot = self.acquire()
        if not isinstance(slot, Slot):
            return None, slot
        return self.call_in_slot(fn, args, kwargs), slot

    def close(self, wait: bool = False) -> None:
        """Shut the worker pool down (calls still running finish on their threads)."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=wait, cancel_futures=True)
                self._pool = None

    def view(self) -> dict[str, Any]:
        """``{domain, running, waiting, max_concurrent, queue_capacity, stats}`` now."""
        with self._cond:
            return {"domain": self.spec.name, "running": self.running, "waiting": self.waiting,
                    "max_concurrent": self.spec.max_concurrent, "queue_capacity": self.spec.queue_capacity,
                    "stats": self.stats.to_json()}


class AsyncBulkhead:
    """A domain's slots and queue for asyncio tasks on one event loop (module docstring). Not
    thread-safe: use it from its loop only."""

    def __init__(self, spec: DomainSpec, *, monotonic: Callable[[], float] = time.monotonic):
        if not isinstance(spec, DomainSpec):
            raise GatewayConfigError(f"spec must be a DomainSpec, got {type(spec).__name__}", field="spec")
        self.spec = spec
        self._now = monotonic
        self.running = 0
        self.waiting = 0
        self.stats = BulkheadStats()
        self._cond: asyncio.Condition | None = None

    async def acquire(self) -> Slot | str:
        """A :class:`Slot`, or the refusal code (as :meth:`Bulkhead.acquire`)."""
        spec = self.spec
        if self.running < spec.max_concurrent and self.waiting == 0:
            self.running += 1
            self.stats.admitted += 1
            self.stats.peak_running = max(self.stats.peak_running, self.running)
            return Slot(0.0)
        if self.waiting >= spec.queue_capacity:
            if spec.queue_capacity == 0:
                self.stats.rejected_full += 1
                return ERR_BULKHEAD_FULL
            self.stats.rejected_exhausted += 1
            return ERR_RESOURCE_EXHAUSTED
        if self._cond is None:
            self._cond = asyncio.Condition()
        self.waiting += 1
        self.stats.queued += 1
        t0 = self._now()
        try:
            async with self._cond:
                await asyncio.wait_for(self._cond.wait_for(lambda: self.running < spec.max_concurrent),
                                       spec.queue_timeout_s)
                self.running += 1
        except asyncio.TimeoutError:
            self.stats.rejected_full += 1
            return ERR_BULKHEAD_FULL
        finally:
            self.waiting -= 1
        self.stats.admitted += 1
        self.stats.peak_running = max(self.stats.peak_running, self.running)
        return Slot(self._now() - t0)

    async def release(self) -> None:
        self.running -= 1
        self.stats.completed += 1
        if self._cond is not None:
            async with self._cond:
                self._cond.notify()

    async def call_in_slot(self, fn: Callable[..., Awaitable[Any]], args: tuple, kwargs: dict,
                           timeout_s: float | None = None) -> CallOutcome:
        """Await ``fn`` in a slot already granted, cancelled after ``timeout_s`` (default the
        domain's call timeout); the slot is given back either way."""
        timeout = self.spec.call_timeout_s if timeout_s is None else timeout_s
        t0 = time.perf_counter()
        try:
            value = await asyncio.wait_for(fn(*args, **kwargs), timeout)
        except asyncio.TimeoutError:
            self.stats.timed_out += 1
            return CallOutcome(timed_out=True, duration_s=time.perf_counter() - t0)
        except Exception as exc:
            return CallOutcome(error=exc, duration_s=time.perf_counter() - t0)
        finally:
            await self.release()
        return CallOutcome(value=value, duration_s=time.perf_counter() - t0)

    def view(self) -> dict[str, Any]:
        return {"domain": self.spec.name, "running": self.running, "waiting": self.waiting,
                "max_concurrent": self.spec.max_concurrent, "queue_capacity": self.spec.queue_capacity,
                "stats": self.stats.to_json()}
