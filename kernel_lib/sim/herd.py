"""The thundering herd on a virtual clock: N trajectories, one degraded service, retries with
deterministic or jittered backoff, with or without a shared circuit breaker (Failure Recovery,
"Tool Circuit Breakers": the retry-storm arrival rate, figure 4 panel (b), Napkin Math 0.4; the
pitfall "Allowing unbounded retries").

The service is one FIFO queue drained at ``capacity_per_s`` requests per second (each request
takes 1/C of the server), answering ``latency_s`` after its service (the pipeline behind the queue)
and refusing a request at once when ``queue_limit`` requests are already waiting. The outage is
``[outage_start_s, outage_start_s + outage_s)``, in one of two modes:

* ``"stall"`` (the default): the service hangs (it answers nothing, its queue stops) and then
  restarts, resetting every request it still holds at the outage's end, all at the same instant:
  the correlated failure that lines a fleet's retries up (the chapter's partition that makes N
  trajectories fail "simultaneously at t0"). A client whose timeout comes first sees a timeout.
* ``"slow"``: a request whose service starts in the outage answers after ``degraded_latency_s``
  (the chapter's L_degraded) and fails with probability ``degraded_error_rate`` (its epsilon).

The client gives up after ``timeout_s``; the server still spends its 1/C on a request whose client
has gone (wasted work) unless ``drop_expired``: a server that reads the caller's deadline and skips
a request it can no longer answer in time. Because
the queue is FIFO with a fixed service time, each request's start and answer are known when it
arrives, so the service needs no events of its own.

Each agent makes ``calls_per_agent`` logical calls, ``think_s`` apart, its first within
``start_spread_s`` of t = 0 (one decode step). A failed attempt (timeout, refusal by a full queue,
server error, or a fast fail of the breaker) is retried after the :class:`BackoffPolicy` delay of
:mod:`kernel_lib.recovery.gateway.backoff` (``max_retries`` retries at most, optionally a shared
:class:`RetryBudget` on the virtual clock), plus the scheduler's dispatch jitter U(0, d); when the
policy says no more, the agent gives the call up and moves on. With a breaker, one
:class:`BreakerState` of :mod:`kernel_lib.recovery.gateway.breaker` is shared by every agent: a
refused attempt fails fast (``ERR_CIRCUIT_OPEN``) and never reaches the service; outcomes are
recorded as the client sees them (a timeout at ``timeout_s``, a refusal at once).

Every attempt ends in exactly one of ``succeeded``, ``failed`` (server error), ``timed_out``,
``rejected`` (queue full), ``fast_failed`` (breaker), or is still ``in_flight`` at the horizon:
``attempts`` is their sum, and ``arrivals`` (what reached the service) is that sum without the
fast fails. Outputs per time bin of ``series_bin_s``: attempts, arrivals, the queue depth at the
bin's end, goodput (successes), timeouts, fast fails, rejections, errors; the peak arrival rate is
counted in bins of the dispatch jitter (``peak_bin_s``), the mean over the run.

Event-driven (``heapq``), deterministic for a seed; :func:`compare_herd` runs the three policies of
:data:`POLICIES` on the same agents and reports agent steps (attempts) per second of wall time.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from kernel_lib.errors import HerdConfigError
from kernel_lib.recovery.gateway.backoff import BACKOFF_STRATEGIES, BackoffPolicy, RetryBudget, backoff_delay_s
from kernel_lib.recovery.gateway.breaker import (
    CLOSED, HALF_OPEN, OPEN, BreakerConfig, Permit, decide, initial_state, record,
)

__all__ = ["HerdConfig", "HerdPolicy", "POLICIES", "OUTAGE_MODES", "DEFAULT_BREAKER", "OUTCOMES", "HerdResult",
           "run_herd", "compare_herd", "retry_wave", "peak_rate_per_s", "sparkline", "format_herd"]

#: how the service misbehaves during the outage (module docstring)
OUTAGE_MODES = ("stall", "slow")

#: the terminal outcomes of one attempt (plus ``in_flight`` at the horizon)
OUTCOMES = ("succeeded", "failed", "timed_out", "rejected", "fast_failed")

#: the simulator's default breaker: table 10's external API policy (tau_fail 0.6 over W = 20, minimum
#: 20 calls, one canary) with a cooldown short enough to probe during a run (5 s, doubling to 60 s)
DEFAULT_BREAKER = BreakerConfig(window_size=20, minimum_calls=20, failure_rate_threshold=0.6, cooldown_s=5.0,
                                cooldown_max_s=60.0, half_open_permits=1, canary_timeout_s=6.0)


def _num(name: str, value: Any, low: float, high: float = math.inf, *, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (value <= low if low_open else value < low) or value > high:
        bound = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")
        raise HerdConfigError(f"{name} must be a finite number {bound}, got {value!r}", field=name)
    return float(value)


#: the most agents one run simulates (10,000 take about a second, 100,000 about ten; the time per
#: agent grows with the queue, so ten million would take hours and gigabytes)
AGENTS_MAX = 1_000_000
#: the most first calls (agents x calls_per_agent) one run simulates
CALLS_MAX = 10_000_000


def _int(name: str, value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise HerdConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}", field=name)
    return value


@dataclass(frozen=True)
class HerdConfig:
    """The scenario (module docstring). Times in seconds, rates per second.

    Defaults: the chapter's numbers where it gives them (a service of 200 req/s, figure 4's text;
    L_nom = 50 ms; T_timeout = 5 s; T_0 = 1 s and T_max = 30 s, Napkin Math 0.4; a 2 ms dispatch
    jitter; L_degraded = 2 s for the ``"slow"`` mode), agents whose first calls spread over 2 s, a
    3 s ``"stall"`` outage from t = 0 that ends in a restart, and 8 retries at most. At most
    :data:`AGENTS_MAX` agents and :data:`CALLS_MAX` first calls in one run.

    Raises:
        HerdConfigError: a field out of range (``field`` names it).
    """

    agents: int = 1000
    calls_per_agent: int = 1
    think_s: float = 1.0
    start_spread_s: float = 2.0
    capacity_per_s: float = 200.0
    latency_s: float = 0.05
    timeout_s: float = 5.0
    queue_limit: int = 1_000_000
    outage_mode: str = "stall"
    outage_start_s: float = 0.0
    outage_s: float = 3.0
    degraded_latency_s: float = 2.0
    degraded_error_rate: float = 0.0
    drop_expired: bool = False
    base_s: float = 1.0
    cap_s: float = 30.0
    max_retries: int = 8
    dispatch_jitter_s: float = 0.002
    series_bin_s: float = 0.5
    horizon_s: float = 3600.0

    def __post_init__(self) -> None:
        _int("agents", self.agents, 1, AGENTS_MAX)
        _int("calls_per_agent", self.calls_per_agent, 1, 1_000_000)
        if self.agents * self.calls_per_agent > CALLS_MAX:
            raise HerdConfigError(f"agents x calls_per_agent = {self.agents * self.calls_per_agent} exceeds "
                                  f"{CALLS_MAX}: a run that size takes hours and gigabytes", field="calls_per_agent")
        _num("think_s", self.think_s, 0)
        _num("start_spread_s", self.start_spread_s, 0)
        _num("capacity_per_s", self.capacity_per_s, 0, low_open=True)
        _num("latency_s", self.latency_s, 0)
        _num("timeout_s", self.timeout_s, 0, low_open=True)
        _int("queue_limit", self.queue_limit, 0, 1_000_000_000)
        if self.outage_mode not in OUTAGE_MODES:
            raise HerdConfigError(f"outage_mode must be one of {', '.join(OUTAGE_MODES)}, got {self.outage_mode!r}",
                                  field="outage_mode")
        _num("outage_start_s", self.outage_start_s, 0)
        _num("outage_s", self.outage_s, 0)
        _num("degraded_latency_s", self.degraded_latency_s, 0)
        _num("degraded_error_rate", self.degraded_error_rate, 0, 1)
        if not isinstance(self.drop_expired, bool):
            raise HerdConfigError(f"drop_expired must be True or False, got {self.drop_expired!r}",
                                  field="drop_expired")
        _num("base_s", self.base_s, 0, low_open=True)
        _num("cap_s", self.cap_s, self.base_s)
        _int("max_retries", self.max_retries, 0, 1000)
        _num("dispatch_jitter_s", self.dispatch_jitter_s, 0, low_open=True)
        _num("series_bin_s", self.series_bin_s, 0, low_open=True)
        _num("horizon_s", self.horizon_s, 0, low_open=True)
        if self.horizon_s / self.series_bin_s > 5_000_000:
            raise HerdConfigError(f"horizon_s / series_bin_s is {self.horizon_s / self.series_bin_s:,.0f} bins; "
                                  "at most 5,000,000", field="series_bin_s")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HerdPolicy:
    """How agents retry: a backoff ``strategy`` (one of the gateway's ``BACKOFF_STRATEGIES``), an
    optional shared ``breaker`` (a :class:`BreakerConfig`; None: no breaker), and an optional shared
    retry budget (``budget_tokens`` tokens, refilled at ``budget_refill_per_s``; None: none).

    Raises:
        HerdConfigError: an unknown strategy, a breaker that is not a BreakerConfig, a bad budget.
    """

    name: str
    strategy: str = "full_jitter"
    breaker: BreakerConfig | None = None
    budget_tokens: float | None = None
    budget_refill_per_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise HerdConfigError(f"a policy needs a name, got {self.name!r}", field="name")
        if self.strategy not in BACKOFF_STRATEGIES:
            raise HerdConfigError(f"strategy must be one of {', '.join(BACKOFF_STRATEGIES)}, got {self.strategy!r}",
                                  field="strategy")
        if self.breaker is not None and not isinstance(self.breaker, BreakerConfig):
            raise HerdConfigError(f"breaker must be a BreakerConfig or None, got {type(self.breaker).__name__}",
                                  field="breaker")
        if self.budget_tokens is not None:
            _num("budget_tokens", self.budget_tokens, 1)
        _num("budget_refill_per_s", self.budget_refill_per_s, 0)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "strategy": self.strategy,
                "breaker": self.breaker.to_json() if self.breaker is not None else None,
                "budget_tokens": self.budget_tokens, "budget_refill_per_s": self.budget_refill_per_s}


#: the three policies the CLI compares (the issue's keys)
POLICIES: tuple[HerdPolicy, ...] = (
    HerdPolicy("deterministic", "exponential"),
    HerdPolicy("full_jitter", "full_jitter"),
    HerdPolicy("full_jitter_breaker", "full_jitter", DEFAULT_BREAKER),
)


@dataclass
class HerdResult:
    """One run: totals, per-bin series, peaks and means, breaker transitions, speed.

    ``series``: ``{"t_s", "attempts", "arrivals", "queue_depth", "goodput", "timeouts", "fast_fails",
    "rejected", "errors"}``, lists of equal length, one entry per ``series_bin_s`` bin (counts per
    bin; ``queue_depth`` at the bin's end). ``totals``: the attempt outcomes (:data:`OUTCOMES` and
    ``in_flight``), ``scheduled`` (attempts due after the horizon), ``attempts``, ``arrivals``,
    ``wasted_server_s`` (server time spent on requests
    whose client had gone), ``calls_completed`` / ``calls_given_up`` (logical calls),
    ``agents_done``. ``trace`` (with ``trace=True``): one dict per attempt.
    """

    policy: dict[str, Any]
    config: dict[str, Any]
    seed: int
    duration_s: float
    totals: dict[str, Any]
    series: dict[str, list]
    peak_bin_s: float
    peak_arrival_rate_per_s: float
    peak_arrival_at_s: float | None
    mean_arrival_rate_per_s: float
    peak_queue_depth: int
    mean_queue_depth: float
    goodput_per_s: float
    breaker_transitions: list[dict[str, Any]]
    events: int
    wall_s: float
    trace: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def agent_steps(self) -> int:
        """Agent steps simulated: attempts (each one decision of an agent to call the service)."""
        return int(self.totals["attempts"])

    def to_json(self, series: bool = True) -> dict[str, Any]:
        out = {"policy": self.policy, "seed": self.seed, "duration_s": self.duration_s, "totals": self.totals,
               "peak_bin_s": self.peak_bin_s, "peak_arrival_rate_per_s": self.peak_arrival_rate_per_s,
               "peak_arrival_at_s": self.peak_arrival_at_s, "mean_arrival_rate_per_s": self.mean_arrival_rate_per_s,
               "peak_queue_depth": self.peak_queue_depth, "mean_queue_depth": self.mean_queue_depth,
               "goodput": self.totals["succeeded"], "goodput_per_s": self.goodput_per_s,
               "breaker_transitions": self.breaker_transitions, "events": self.events,
               "agent_steps": self.agent_steps, "wall_s": self.wall_s}
        if series:
            out["series"] = self.series
        return out


# event kinds, ordered so that at one instant answers are handled before new attempts
_RESULT, _ATTEMPT = 0, 1
_SERIES_OF = {"succeeded": "goodput", "timed_out": "timeouts", "rejected": "rejected", "failed": "errors"}


class _Run:
    """One simulation's state and its event handlers (see :func:`run_herd`)."""

    def __init__(self, cfg: HerdConfig, pol: HerdPolicy, seed: int, trace: bool):
        self.cfg, self.pol, self.seed = cfg, pol, seed
        self.rng = random.Random(seed)
        self.now = 0.0
        budget = (RetryBudget(pol.budget_tokens, pol.budget_refill_per_s, clock=lambda: self.now)
                  if pol.budget_tokens is not None else None)
        self.backoff = BackoffPolicy(pol.strategy, cfg.base_s, cfg.cap_s, cfg.max_retries, budget)
        self.bcfg = pol.breaker
        self.bstate = initial_state(self.bcfg) if self.bcfg is not None else None
        self.transitions: list[dict[str, Any]] = []
        self.service_s = 1.0 / cfg.capacity_per_s
        self.out0, self.out1 = cfg.outage_start_s, cfg.outage_start_s + cfg.outage_s
        self.stall_mode = cfg.outage_mode == "stall"
        self.counts = {k: 0 for k in OUTCOMES}
        self.wasted_s = self.wait_total_s = 0.0
        self.calls_completed = self.calls_given_up = self.agents_done = 0
        self.server_free = 0.0
        self.n_stalled = 0
        self.waiting: deque[float] = deque()    # start times of admitted requests not yet started (FIFO)
        self.peak_depth = 0
        self.series: dict[str, list[int]] = {k: [] for k in ("attempts", "arrivals", "goodput", "timeouts",
                                                             "fast_fails", "rejected", "errors", "depth_delta")}
        self.fine: dict[int, int] = {}          # arrivals per dispatch-jitter bin (sparse), for the peak
        n = cfg.agents
        self.schedules: list[Any] = [None] * n  # each agent's current call's BackoffSchedule
        self.calls_left = [cfg.calls_per_agent] * n
        self.attempt_no = [0] * n
        self.permits: list[Permit | None] = [None] * n
        self.sent_at = [0.0] * n
        self.log: list[dict[str, Any]] | None = [] if trace else None
        self.heap: list[tuple[float, int, int, int, str]] = []
        self.seq = 0
        self.events = 0
        self.last_t = 0.0

    def bump(self, name: str, t: float, by: int = 1) -> None:
        i = int(t / self.cfg.series_bin_s)
        s = self.series[name]
        if i >= len(s):
            s.extend([0] * (i + 1 - len(s)))
        s[i] += by

    def push(self, t: float, kind: int, a: int, outcome: str = "") -> None:
        heapq.heappush(self.heap, (t, kind, self.seq, a, outcome))
        self.seq += 1

    def breaker_apply(self, new_state: Any, trs: tuple) -> None:
        self.bstate = new_state
        self.transitions.extend(tr.to_json() for tr in trs)

    def retry_or_give_up(self, a: int, t: float) -> None:
        """After a failed attempt at t: the next retry, or give the call up."""
        delay = self.schedules[a].next_delay_s()
        if delay is None:
            self.calls_given_up += 1
            self.call_done(a, t)
        else:
            self.push(t + delay + self.rng.uniform(0.0, self.cfg.dispatch_jitter_s), _ATTEMPT, a)

    def call_done(self, a: int, t: float) -> None:
        self.schedules[a] = None
        self.calls_left[a] -= 1
        if self.calls_left[a] > 0:
            self.push(t + self.cfg.think_s, _ATTEMPT, a)
        else:
            self.agents_done += 1

    def hold(self, t: float, until: float) -> None:
        """A request waits at the service from t until ``until`` (the queue depth series)."""
        self.bump("depth_delta", t, 1)
        self.bump("depth_delta", until, -1)
        self.wait_total_s += until - t

    def serve(self, t: float) -> tuple[str, float]:
        """A request reaches the service at t: its outcome and when the client learns it."""
        cfg, T = self.cfg, self.cfg.timeout_s
        waiting = self.waiting
        while waiting and waiting[0] <= t:
            waiting.popleft()
        held = self.n_stalled if t < self.out1 else 0       # requests the hung service holds until out1
        start = self.server_free if self.server_free > t else t
        in_stall = self.stall_mode and t < self.out1 and (t >= self.out0 or start >= self.out0)
        if (in_stall or start > t) and len(waiting) + held >= cfg.queue_limit:
            return "rejected", t                # it would have to wait, and the queue is full
        if in_stall:
            # the service hangs: no answer; the restart at out1 resets every request it holds
            self.n_stalled += 1
            self.hold(t, self.out1)
            return ("timed_out", t + T) if t + T < self.out1 else ("failed", self.out1)
        if start > t:
            waiting.append(start)
            self.hold(t, start)
        degraded = not self.stall_mode and self.out0 <= start < self.out1
        lat = cfg.degraded_latency_s if degraded else cfg.latency_s
        if cfg.drop_expired and start + self.service_s + lat - t > T:
            return "timed_out", t + T           # it cannot answer before its caller's deadline: skipped
        self.server_free = start + self.service_s
        done = self.server_free + lat
        if self.stall_mode and t < self.out1 and done >= self.out0:
            # served, but the answer is lost when the service hangs: reset at out1
            self.wasted_s += self.service_s
            return ("timed_out", t + T) if t + T < self.out1 else ("failed", self.out1)
        if done - t > T:
            self.wasted_s += self.service_s
            return "timed_out", t + T
        if degraded and cfg.degraded_error_rate and self.rng.random() < cfg.degraded_error_rate:
            return "failed", done
        return "succeeded", done

    def attempt(self, t: float, a: int) -> None:
        if self.schedules[a] is None:
            self.schedules[a] = self.backoff.schedule(self.rng)
            self.attempt_no[a] = 0
        else:
            self.attempt_no[a] += 1
        self.bump("attempts", t)
        state_at = None
        if self.bcfg is not None:
            dec = decide(self.bcfg, self.bstate, t, f"a{a}.{self.seq}")
            self.breaker_apply(dec.state, dec.transitions)
            state_at = self.bstate.state           # as decided (after a due open -> half_open)
            if not dec.admitted:
                self.counts["fast_failed"] += 1
                self.bump("fast_fails", t)
                if self.log is not None:
                    self.log.append({"agent": a, "attempt": self.attempt_no[a], "t_s": t, "breaker": state_at,
                                     "reached_service": False, "outcome": "fast_failed"})
                self.retry_or_give_up(a, t)
                return
            self.permits[a] = dec.permit
        self.bump("arrivals", t)
        fi = int(t / self.cfg.dispatch_jitter_s)
        self.fine[fi] = self.fine.get(fi, 0) + 1
        self.sent_at[a] = t
        res, answer_t = self.serve(t)
        depth = len(self.waiting) + (self.n_stalled if t < self.out1 else 0)
        if depth > self.peak_depth:
            self.peak_depth = depth
        if self.log is not None:
            self.log.append({"agent": a, "attempt": self.attempt_no[a], "t_s": t, "breaker": state_at,
                             "reached_service": True, "outcome": res, "answer_s": answer_t})
        self.push(answer_t, _RESULT, a, res)

    def result(self, t: float, a: int, outcome: str) -> None:
        """The client learns the outcome of its attempt."""
        self.counts[outcome] += 1
        self.bump(_SERIES_OF[outcome], t)
        if self.bcfg is not None and self.permits[a] is not None:
            new, trs = record(self.bcfg, self.bstate, self.permits[a], outcome != "succeeded", t - self.sent_at[a], t)
            self.breaker_apply(new, trs)
            self.permits[a] = None
        if outcome == "succeeded":
            self.calls_completed += 1
            self.call_done(a, t)
        else:
            self.retry_or_give_up(a, t)

    def run(self) -> None:
        cfg, rng = self.cfg, self.rng
        for a in range(cfg.agents):
            t0 = rng.uniform(0.0, cfg.start_spread_s) if cfg.start_spread_s else 0.0
            self.heap.append((t0, _ATTEMPT, self.seq, a, ""))
            self.seq += 1
        heapq.heapify(self.heap)
        heap, horizon = self.heap, cfg.horizon_s
        while heap and heap[0][0] <= horizon:
            t, kind, _, a, outcome = heapq.heappop(heap)
            self.events += 1
            self.now = self.last_t = t
            if kind == _ATTEMPT:
                self.attempt(t, a)
            else:
                self.result(t, a, outcome)

    def finish(self, wall0: float) -> HerdResult:
        cfg, series = self.cfg, self.series
        in_flight = sum(1 for e in self.heap if e[1] == _RESULT)
        attempts, arrivals = sum(series["attempts"]), sum(series["arrivals"])
        # the run lasts until every agent is done and the service is idle (it may still be working
        # through requests whose clients left, or holding stalled ones until the restart)
        duration = max(self.last_t, self.server_free, self.out1 if self.stall_mode and self.n_stalled else 0.0, 1e-12)
        n_bins = max(len(s) for s in series.values())
        for s in series.values():
            s.extend([0] * (n_bins - len(s)))
        depth, running = [], 0
        for delta in series.pop("depth_delta"):
            running += delta
            depth.append(running)
        fine = self.fine
        peak_i = max(fine, key=lambda i: (fine[i], -i)) if fine else None
        out_series: dict[str, list] = {"t_s": [round(i * cfg.series_bin_s, 9) for i in range(n_bins)], **series,
                                       "queue_depth": depth}
        totals = {**self.counts, "in_flight": in_flight, "scheduled": len(self.heap) - in_flight,
                  "attempts": attempts, "arrivals": arrivals, "wasted_server_s": self.wasted_s,
                  "calls_completed": self.calls_completed, "calls_given_up": self.calls_given_up,
                  "agents_done": self.agents_done}
        peak_bin = cfg.dispatch_jitter_s
        return HerdResult(
            policy=self.pol.to_json(), config=cfg.to_json(), seed=self.seed, duration_s=duration, totals=totals,
            series=out_series, peak_bin_s=peak_bin,
            peak_arrival_rate_per_s=(fine[peak_i] / peak_bin) if peak_i is not None else 0.0,
            peak_arrival_at_s=(peak_i * peak_bin) if peak_i is not None else None,
            mean_arrival_rate_per_s=arrivals / duration, peak_queue_depth=self.peak_depth,
            mean_queue_depth=self.wait_total_s / duration, goodput_per_s=self.counts["succeeded"] / duration,
            breaker_transitions=self.transitions, events=self.events, wall_s=time.perf_counter() - wall0,
            trace=self.log)


def run_herd(config: HerdConfig | None = None, policy: HerdPolicy | None = None, seed: int = 0, *,
             trace: bool = False) -> HerdResult:
    """Simulate one scenario under one policy (module docstring). Deterministic for ``seed``: the
    agents' start times, backoff draws, dispatch jitter and server errors come from one
    ``random.Random(seed)`` consumed in event order. ``trace``: keep one record per attempt
    (``agent``, ``attempt``, ``t_s``, ``breaker`` state as decided, ``reached_service``, ``outcome``,
    ``answer_s``) in ``HerdResult.trace``.

    Raises:
        HerdConfigError: ``config`` is not a HerdConfig, ``policy`` not a HerdPolicy, ``seed`` not an int.
    """
    cfg = HerdConfig() if config is None else config
    pol = POLICIES[1] if policy is None else policy
    if not isinstance(cfg, HerdConfig):
        raise HerdConfigError(f"config must be a HerdConfig, got {type(cfg).__name__}", field="config")
    if not isinstance(pol, HerdPolicy):
        raise HerdConfigError(f"policy must be a HerdPolicy, got {type(pol).__name__}", field="policy")
    if type(seed) is not int:
        raise HerdConfigError(f"seed must be an integer, got {seed!r}", field="seed")
    wall0 = time.perf_counter()
    sim = _Run(cfg, pol, seed, trace)
    sim.run()
    return sim.finish(wall0)


def compare_herd(config: HerdConfig | None = None, seed: int = 0,
                 policies: tuple[HerdPolicy, ...] = POLICIES, *, series: bool = True) -> dict[str, Any]:
    """Run every policy on the same scenario and seed: ``{"config", "seed", <policy name>: run's
    to_json(series), ..., "simulator": {"agent_steps", "events", "wall_s", "agent_steps_per_s",
    "events_per_s"}}``. Raises HerdConfigError for bad input or two policies with one name."""
    cfg = HerdConfig() if config is None else config
    names = [p.name for p in policies]
    if len(set(names)) != len(names) or not names:
        raise HerdConfigError(f"policies need distinct names, got {names}", field="policies")
    out: dict[str, Any] = {"config": cfg.to_json() if isinstance(cfg, HerdConfig) else None, "seed": seed}
    steps = events = 0
    wall = 0.0
    for p in policies:
        r = run_herd(cfg, p, seed)
        out[p.name] = r.to_json(series)
        steps += r.agent_steps
        events += r.events
        wall += r.wall_s
    out["simulator"] = {"agent_steps": steps, "events": events, "wall_s": wall,
                        "agent_steps_per_s": steps / wall if wall > 0 else None,
                        "events_per_s": events / wall if wall > 0 else None}
    return out


def peak_rate_per_s(arrival_times_s: list[float], bin_s: float) -> float:
    """The largest count of ``arrival_times_s`` in one bin of ``bin_s`` (aligned at 0), per second.
    Raises HerdConfigError for a bin that is not positive."""
    _num("bin_s", bin_s, 0, low_open=True)
    counts: dict[int, int] = {}
    for t in arrival_times_s:
        i = int(t // bin_s)
        counts[i] = counts.get(i, 0) + 1
    return max(counts.values()) / bin_s if counts else 0.0


def retry_wave(failing_agents: int, timeout_s: float, base_s: float, cap_s: float, retry_attempt: int,
               dispatch_jitter_s: float, strategy: str, seed: int = 0) -> list[float]:
    """Napkin Math 0.4's one wave of retries, drawn: ``failing_agents`` agents whose attempts were
    sent at t0 = 0 and timed out together at ``timeout_s`` each wait the ``strategy``'s delay for
    the retry with exponent ``retry_attempt`` (the gateway's :func:`backoff_delay_s`: for
    ``exponential`` min(cap, base·2^k), for ``full_jitter`` U(0, that)) and are dispatched within
    U(0, ``dispatch_jitter_s``). Returns the sorted arrival times (s after t0).

    Raises HerdConfigError (or the gateway's GatewayConfigError) for bad input."""
    _int("failing_agents", failing_agents, 1, 10_000_000)
    _num("timeout_s", timeout_s, 0)
    _num("dispatch_jitter_s", dispatch_jitter_s, 0)
    rng = random.Random(seed)
    times = [timeout_s + backoff_delay_s(strategy, base_s, cap_s, retry_attempt, rng) + rng.uniform(0.0,
                                                                                                    dispatch_jitter_s)
             for _ in range(failing_agents)]
    return sorted(times)


#: re-exported state names, for readers of ``trace`` and ``breaker_transitions``
BREAKER_STATE_NAMES = (CLOSED, OPEN, HALF_OPEN)


# --- text report (the CLI's) ---------------------------------------------------------------------------

_BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline(values: list[float], top: float, width: int = 60) -> str:
    """``values`` squeezed into ``width`` columns (each the largest of the values it covers), drawn
    with block characters scaled to ``top`` (a blank column is a zero)."""
    if not values or top <= 0:
        return " " * width
    n = len(values)
    cols = []
    for c in range(width):
        lo, hi = c * n // width, max(c * n // width + 1, (c + 1) * n // width)
        v = max(values[lo:hi]) if lo < n else 0
        cols.append(_BLOCKS[0] if v <= 0 else _BLOCKS[max(1, min(8, math.ceil(8 * v / top)))])
    return "".join(cols)


def format_herd(result: dict[str, Any], policies: tuple[str, ...] | None = None, width: int = 60) -> str:
    """A :func:`compare_herd` result (with series) as text: one table row per policy, then the
    arrival rate and the queue depth over time on one scale for every policy, then the simulator's
    speed."""
    names = policies or tuple(k for k in result if isinstance(result[k], dict) and "totals" in result[k])
    cfg = result.get("config") or {}
    lines = [f"retry storm: {cfg.get('agents')} agents, service {cfg.get('capacity_per_s'):g} req/s, timeout "
             f"{cfg.get('timeout_s'):g} s, {cfg.get('outage_mode')} outage of {cfg.get('outage_s'):g} s, backoff "
             f"T0 {cfg.get('base_s'):g} s cap {cfg.get('cap_s'):g} s, {cfg.get('max_retries')} retries at most "
             f"(seed {result.get('seed')})", ""]
    head = (f"{'policy':<21}{'peak req/s':>12}{'mean req/s':>11}{'peak queue':>11}{'mean queue':>11}"
            f"{'goodput':>9}{'gave up':>9}{'fast fails':>11}{'wasted s':>10}{'span s':>8}")
    lines += [head, "-" * len(head)]
    for k in names:
        r = result[k]
        t = r["totals"]
        lines.append(f"{k:<21}{r['peak_arrival_rate_per_s']:>12,.0f}{r['mean_arrival_rate_per_s']:>11,.1f}"
                     f"{r['peak_queue_depth']:>11,}{r['mean_queue_depth']:>11,.1f}{r['goodput']:>9,}"
                     f"{t['calls_given_up']:>9,}{t['fast_failed']:>11,}{t['wasted_server_s']:>10,.1f}"
                     f"{r['duration_s']:>8,.1f}")
    peak_bin = result[names[0]]["peak_bin_s"] if names else 0
    lines += ["", f"peak: arrivals in the busiest {peak_bin * 1e3:g} ms bin (the dispatch jitter), per second; mean: "
                  "arrivals over the span (until every agent is done and the service idle)"]
    if names and "series" in result[names[0]]:
        bin_s = cfg.get("series_bin_s", 1.0)
        longest = max(len(result[k]["series"]["t_s"]) for k in names)
        for metric, label in (("arrivals", "arrivals per s"), ("queue_depth", "queue depth"),
                              ("goodput", "goodput per s")):
            scale = 1.0 / bin_s if metric != "queue_depth" else 1.0
            rows = {k: [v * scale for v in result[k]["series"][metric]] for k in names}
            top = max((max(v) for v in rows.values() if v), default=0.0)
            col_s = bin_s * max(1.0, longest / width)    # a column shows the largest of the bins it covers
            lines += ["", f"{label} over time (0 to {longest * bin_s:,.0f} s; {bin_s:g} s bins, one column per "
                          f"{col_s:.3g} s showing its busiest bin; full height {top:,.0f})"]
            for k in names:
                padded = rows[k] + [0.0] * (longest - len(rows[k]))
                lines.append(f"  {k:<21}|{sparkline(padded, top, width)}|")
    sim = result.get("simulator")
    if sim:
        lines += ["", f"simulator: {sim['agent_steps']:,} agent steps ({sim['events']:,} events) in "
                      f"{sim['wall_s']:.2f} s = {sim['agent_steps_per_s']:,.0f} agent steps/s"]
    return "\n".join(lines)
