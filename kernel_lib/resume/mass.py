"""Mass resume of many sessions on a virtual clock (Durable Execution §11.5, eq. 7; §11.12 exercise 6).

Equation 7 prices the resume of *one* trajectory as a serial sum of stages: ownership, checkpoint and
suffix read, suffix fold, workspace restore, reconciliation of in-doubt operations, and the prefill
that rebuilds serving state. When a whole serving region fails, thousands of sessions resume at
once, and the last stage stops being a private latency: every session's prefill draws on the same
accelerator pool, so the prefill term turns into a queue. This module simulates that, with no
sleeping and no wall clock, so a notebook can show how the added reply latency of each customer
is spread, not only its mean.

Model (every choice is a parameter or is stated here):

* **Sessions.** ``sessions`` open sessions; exactly ``round(in_doubt_fraction * sessions)`` of them,
  chosen by a seeded draw, hold one in-doubt operation (the support agent's refund) whose
  reconciliation lookup adds ``Stages.reconciliation_s`` to their serial chain.
* **Next messages.** Each customer writes again within ``think_s`` seconds of the failover. With
  ``arrivals="even"`` the messages land at ``(k + 1/2) * think_s / sessions`` (k = 0 .. n-1), handed to
  sessions in a seeded random order; with ``arrivals="poisson"`` each lands at an independent
  uniform time in ``[0, think_s]``, i.e. a Poisson stream conditioned on ``sessions`` messages in the
  window.
* **Per-session stages** run serially, as eq. 7 adds them: the control-plane stages (ownership, read,
  fold, workspace, and the lookup for an in-doubt session) first, the prefill after them. The
  control-plane stages are assumed not to contend with each other across sessions (the ownership
  coordinator, the log store and the refund system are taken to scale); only the prefill is shared.
* **Prefill pool.** A request prefills ``context_tokens`` cold, or only the
  ``context_tokens - shared_prefix_tokens`` private tokens when the shared prefix is resident. The pool
  has an aggregate rate ``pool_tokens_per_s`` and one request never runs faster than
  ``single_tokens_per_s``. Two disciplines:

  - ``"fifo"`` (the default): ``floor(pool / single)`` prefill slots, each at the single-request rate;
    requests start in the order they become ready (ties: session index, or message time under
    ``order="by_message"``) on the earliest free slot. When ``pool / single`` is not a whole number
    the fraction of a slot is left unused, so the fluid drain time ``tokens / pool`` is then a lower
    bound on the simulated one.
  - ``"ps"``: capped processor sharing; the ``n`` requests in the pool each progress at
    ``min(single, pool / n)`` tokens/s (the fluid limit of continuous batching).

* **Policies** (:class:`Policy`): the control-plane stages start either at the failover (``eager``) or
  when the customer's message arrives (``on_demand``); the prefill is requested either as soon as the
  control plane is done (``eager``) or only once the message has also arrived (``on_demand``).
* **Added latency** of a customer's next reply is ``max(0, prefill_end - message_at)``: the wait, from
  the message's arrival, for the session to be restored with its serving state rebuilt. The reply's
  own work (prefilling the new message, generating) would have happened without the failover and is
  not counted. A session resumed before its customer writes adds nothing.

Everything here is pure: :func:`simulate` is a function of its arguments and ``seed``.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kernel_lib.errors import ConfigError

DISCIPLINES = ("fifo", "ps")
ARRIVALS = ("even", "poisson")
STARTS = ("eager", "on_demand")
ORDERS = ("random", "by_message")


@dataclass(frozen=True)
class Stages:
    """The per-session terms of eq. 7 other than the prefill, in seconds.

    ``reconciliation_s`` is charged only to sessions that hold an in-doubt operation.
    """

    ownership_s: float
    checkpoint_read_s: float
    fold_s: float
    workspace_restore_s: float = 0.0
    reconciliation_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("ownership_s", "checkpoint_read_s", "fold_s", "workspace_restore_s", "reconciliation_s"):
            _finite_nonneg(name, getattr(self, name))

    def control_s(self, in_doubt: bool) -> float:
        """Seconds of the serial stages before the prefill, for a clean or an in-doubt session."""
        base = self.ownership_s + self.checkpoint_read_s + self.fold_s + self.workspace_restore_s
        return base + (self.reconciliation_s if in_doubt else 0.0)


@dataclass(frozen=True)
class Pool:
    """The surviving prefill capacity: aggregate tokens/s, the per-request ceiling, and the discipline."""

    pool_tokens_per_s: float
    single_tokens_per_s: float
    discipline: str = "fifo"

    def __post_init__(self) -> None:
        for name in ("pool_tokens_per_s", "single_tokens_per_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(f"{name} must be a positive number, got {v!r}")
        if self.pool_tokens_per_s < self.single_tokens_per_s:
            raise ConfigError(f"pool_tokens_per_s ({self.pool_tokens_per_s:g}) must be at least "
                              f"single_tokens_per_s ({self.single_tokens_per_s:g})")
        if self.discipline not in DISCIPLINES:
            raise ConfigError(f"discipline must be one of {DISCIPLINES}, got {self.discipline!r}")

    @property
    def slots(self) -> int:
        """FIFO prefill slots: how many requests run at once, each at the single-request rate."""
        return max(1, math.floor(self.pool_tokens_per_s / self.single_tokens_per_s + 1e-9))


@dataclass(frozen=True)
class Workload:
    """The sessions to resume and when their customers write again."""

    sessions: int
    context_tokens: int
    shared_prefix_tokens: int
    think_s: float
    in_doubt_fraction: float = 0.0
    arrivals: str = "even"
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.sessions, int) or self.sessions < 1:
            raise ConfigError(f"sessions must be a positive integer, got {self.sessions!r}")
        if not isinstance(self.context_tokens, int) or self.context_tokens < 1:
            raise ConfigError(f"context_tokens must be a positive integer, got {self.context_tokens!r}")
        if not isinstance(self.shared_prefix_tokens, int) or not 0 <= self.shared_prefix_tokens <= self.context_tokens:
            raise ConfigError(f"shared_prefix_tokens must be an integer from 0 to context_tokens "
                              f"({self.context_tokens}), got {self.shared_prefix_tokens!r}")
        if not (math.isfinite(self.think_s) and self.think_s > 0):
            raise ConfigError(f"think_s must be a positive number, got {self.think_s!r}")
        if not 0.0 <= self.in_doubt_fraction <= 1.0:
            raise ConfigError(f"in_doubt_fraction must be between 0 and 1, got {self.in_doubt_fraction!r}")
        if self.arrivals not in ARRIVALS:
            raise ConfigError(f"arrivals must be one of {ARRIVALS}, got {self.arrivals!r}")

    def prefill_tokens(self, prefix_resident: bool) -> int:
        """Tokens one session must prefill: all of its context cold, its private part with the prefix resident."""
        return self.context_tokens - (self.shared_prefix_tokens if prefix_resident else 0)

    @property
    def in_doubt_count(self) -> int:
        return round(self.in_doubt_fraction * self.sessions)


@dataclass(frozen=True)
class Policy:
    """When a session's control-plane stages and its prefill start, and whether the shared prefix is resident.

    ``control`` and ``prefill`` are ``"eager"`` (at the failover / as soon as the control plane is done) or
    ``"on_demand"`` (once the customer's message has arrived). An on-demand control plane with an eager
    prefill is refused: the prefill needs the restored session. ``order`` breaks ties in the FIFO queue:
    ``"random"`` (the session index, which the seeded draw makes unrelated to message times) or
    ``"by_message"`` (an oracle that knows who will write first).
    """

    name: str
    control: str
    prefill: str
    prefix_resident: bool
    order: str = "random"

    def __post_init__(self) -> None:
        if self.control not in STARTS or self.prefill not in STARTS:
            raise ConfigError(f"control and prefill must be one of {STARTS}, got {self.control!r}, {self.prefill!r}")
        if self.control == "on_demand" and self.prefill == "eager":
            raise ConfigError("an on-demand control plane cannot feed an eager prefill")
        if self.order not in ORDERS:
            raise ConfigError(f"order must be one of {ORDERS}, got {self.order!r}")


#: The policies exercise 6 compares. ``warm_control`` restores every session and settles the in-doubt
#: lookups right after the failover but waits for the customer before spending accelerator time.
POLICIES: dict[str, Policy] = {
    "eager_cold": Policy("eager_cold", "eager", "eager", prefix_resident=False),
    "eager_resident": Policy("eager_resident", "eager", "eager", prefix_resident=True),
    "lazy_cold": Policy("lazy_cold", "on_demand", "on_demand", prefix_resident=False),
    "lazy_resident": Policy("lazy_resident", "on_demand", "on_demand", prefix_resident=True),
    "warm_control": Policy("warm_control", "eager", "on_demand", prefix_resident=True),
}


@dataclass(frozen=True)
class SessionOutcome:
    """One session's timeline on the virtual clock (seconds after the failover)."""

    index: int
    in_doubt: bool
    message_at_s: float
    control_start_s: float
    prefill_ready_s: float
    prefill_start_s: float
    prefill_end_s: float
    serial_s: float            # eq. 7 for this session without queueing
    added_latency_s: float     # max(0, prefill_end - message_at)


@dataclass(frozen=True)
class SimResult:
    """Outcomes of one simulated mass resume, and summaries of the added latency."""

    policy: Policy
    pool: Pool
    workload: Workload
    outcomes: tuple[SessionOutcome, ...]
    prefill_tokens: int

    @property
    def added_latencies_s(self) -> list[float]:
        return [o.added_latency_s for o in self.outcomes]

    @property
    def drain_s(self) -> float:
        """When the last prefill finishes (s after the failover)."""
        return max(o.prefill_end_s for o in self.outcomes)

    @property
    def mean_s(self) -> float:
        return math.fsum(self.added_latencies_s) / len(self.outcomes)

    @property
    def max_s(self) -> float:
        return max(self.added_latencies_s)

    def quantile_s(self, q: float) -> float:
        """The q-quantile of added latency (nearest rank, 0 < q <= 1)."""
        xs = sorted(self.added_latencies_s)
        return xs[max(0, math.ceil(q * len(xs)) - 1)]

    def fraction_over(self, bound_s: float) -> float:
        """Share of customers whose next reply is delayed by more than ``bound_s``."""
        return sum(x > bound_s for x in self.added_latencies_s) / len(self.outcomes)

    def prefill_load_fraction(self) -> float:
        """Prefill tokens per second demanded over the customers' window, as a fraction of the pool.

        The window is ``think_s`` (the span the messages arrive over); an eager prefill concentrates
        the same tokens earlier, so this is the *average* load, not its peak.
        """
        demand = len(self.outcomes) * self.prefill_tokens / self.workload.think_s
        return demand / self.pool.pool_tokens_per_s

    def summary(self, bound_s: float) -> dict[str, float | str]:
        return {"policy": self.policy.name, "discipline": self.pool.discipline, "arrivals": self.workload.arrivals,
                "mean_s": self.mean_s, "p50_s": self.quantile_s(0.5), "p99_s": self.quantile_s(0.99),
                "max_s": self.max_s, "fraction_over_bound": self.fraction_over(bound_s), "drain_s": self.drain_s}


# --- arrivals and session draw -------------------------------------------------------------------


def draw_sessions(workload: Workload) -> tuple[list[bool], list[float]]:
    """The seeded in-doubt flags and message times of every session (index order)."""
    rng = random.Random(f"resume_sim:{workload.seed}")
    n = workload.sessions
    flagged = set(rng.sample(range(n), workload.in_doubt_count))
    in_doubt = [i in flagged for i in range(n)]
    if workload.arrivals == "even":
        gap = workload.think_s / n
        slots = [(k + 0.5) * gap for k in range(n)]
        rng.shuffle(slots)
        return in_doubt, slots
    return in_doubt, [rng.uniform(0.0, workload.think_s) for _ in range(n)]


# --- queue disciplines ---------------------------------------------------------------------------


def fifo_schedule(ready_s: Sequence[float], work_tokens: Sequence[float], slots: int, rate: float,
                  tiebreak: Sequence[float] | None = None) -> tuple[list[float], list[float]]:
    """First-come first-served on ``slots`` identical servers at ``rate`` tokens/s.

    Jobs start in order of ``(ready, tiebreak, index)`` on the earliest free slot. Returns ``(start, end)``
    per job. Each job's wait is non-increasing in ``slots`` and in ``rate`` (the Kiefer-Wolfowitz
    workload recursion is monotone), which the tests check.
    """
    n = len(ready_s)
    tb = tiebreak if tiebreak is not None else [0.0] * n
    order = sorted(range(n), key=lambda i: (ready_s[i], tb[i], i))
    free = [0.0] * slots
    start, end = [0.0] * n, [0.0] * n
    for i in order:
        s = max(ready_s[i], heapq.heappop(free))
        start[i], end[i] = s, s + work_tokens[i] / rate
        heapq.heappush(free, end[i])
    return start, end


def ps_schedule(ready_s: Sequence[float], work_tokens: Sequence[float], pool_rate: float,
                cap_rate: float) -> list[float]:
    """Capped processor sharing: the n jobs present each progress at ``min(cap_rate, pool_rate / n)``.

    Every present job gets the same rate, so it is enough to follow the service one job has received
    since time 0 (``level``); a job that joins at level L with w tokens leaves when the level reaches
    L + w. Returns each job's end time; a job starts as soon as it is ready.
    """
    n = len(ready_s)
    order = sorted(range(n), key=lambda i: (ready_s[i], i))
    end = [0.0] * n
    active: list[tuple[float, int]] = []
    t = level = 0.0
    k = 0
    while k < n or active:
        if not active:
            t = max(t, ready_s[order[k]])
        while k < n and ready_s[order[k]] <= t:
            i = order[k]
            heapq.heappush(active, (level + work_tokens[i], i))
            k += 1
        if not active:
            continue
        per_job = min(cap_rate, pool_rate / len(active))
        next_done = t + (active[0][0] - level) / per_job
        next_ready = ready_s[order[k]] if k < n else math.inf
        if next_ready < next_done:
            level += per_job * (next_ready - t)
            t = next_ready
            continue
        t, level = next_done, active[0][0]
        while active and active[0][0] <= level * (1 + 1e-12) + 1e-12:
            _, i = heapq.heappop(active)
            end[i] = t
    return end


# --- the simulation ------------------------------------------------------------------------------


def simulate(workload: Workload, stages: Stages, pool: Pool, policy: Policy) -> SimResult:
    """Resume every session of ``workload`` under ``policy`` on a virtual clock (see the module docstring).

    Raises ConfigError on inconsistent inputs. Deterministic in ``workload.seed``.
    """
    in_doubt, message_at = draw_sessions(workload)
    n = workload.sessions
    tokens = workload.prefill_tokens(policy.prefix_resident)
    prefill_alone_s = tokens / pool.single_tokens_per_s
    control_start = [0.0 if policy.control == "eager" else message_at[i] for i in range(n)]
    control_done = [control_start[i] + stages.control_s(in_doubt[i]) for i in range(n)]
    ready = [control_done[i] if policy.prefill == "eager" else max(control_done[i], message_at[i]) for i in range(n)]
    work = [float(tokens)] * n
    if pool.discipline == "fifo":
        tiebreak = message_at if policy.order == "by_message" else None
        start, end = fifo_schedule(ready, work, pool.slots, pool.single_tokens_per_s, tiebreak)
    else:
        end = ps_schedule(ready, work, pool.pool_tokens_per_s, pool.single_tokens_per_s)
        start = list(ready)
    outcomes = tuple(
        SessionOutcome(index=i, in_doubt=in_doubt[i], message_at_s=message_at[i], control_start_s=control_start[i],
                       prefill_ready_s=ready[i], prefill_start_s=start[i], prefill_end_s=end[i],
                       serial_s=stages.control_s(in_doubt[i]) + prefill_alone_s,
                       added_latency_s=max(0.0, end[i] - message_at[i]))
        for i in range(n))
    return SimResult(policy=policy, pool=pool, workload=workload, outcomes=outcomes, prefill_tokens=tokens)


def simulate_many(workload: Workload, stages: Stages, pool: Pool,
                  policies: Iterable[Policy | str] = tuple(POLICIES)) -> dict[str, SimResult]:
    """:func:`simulate` for each policy (by name from :data:`POLICIES`, or a :class:`Policy`)."""
    out = {}
    for p in policies:
        pol = POLICIES[p] if isinstance(p, str) else p
        out[pol.name] = simulate(workload, stages, pool, pol)
    return out


def _finite_nonneg(name: str, v: float) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"{name} must be a non-negative number, got {v!r}")
