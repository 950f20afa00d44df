"""The tri-state circuit breaker as a pure state machine (Failure Recovery, "Tool Circuit
Breakers": figure 4 panel (a), table 8, E = (1/|W|) sum e_i, the cooldown doubling
T_cooldown <- min(2 T_cooldown, T_cooldown_max)).

Decisions are functions of a recorded :class:`BreakerState`, a :class:`BreakerConfig` and the
time ``now_s``; nothing here reads a clock, takes a lock or touches a store. The thin runners in
:mod:`kernel_lib.recovery.gateway.runner` (threads and asyncio, one process) and
:mod:`kernel_lib.recovery.gateway.shared` (every process of the host, through SQLite) apply them.

States and transitions (table 8)::

    closed     every call admitted; outcomes fill the sliding window W. Once W holds at least
               minimum_calls outcomes and the failure rate E >= tau_fail (or the slow-call rate
               >= its threshold) -> open (reason "failure_rate" / "slow_call_rate").
    open       every call refused (ERR_CIRCUIT_OPEN with the remaining cooldown). At
               now >= opened_at + cooldown the next decision moves to half_open
               (reason "cooldown_elapsed"): lazily, on the next call (or :func:`tick`).
    half_open  exactly ``half_open_permits`` canaries admitted (K_canary = 1 by default), each
               with a lease of ``canary_timeout_s``; every other caller refused. A canary
               failure (or a slow canary when slow calls count, or a lease that ran out: a
               canary whose caller died) -> open with the cooldown doubled up to
               ``cooldown_max_s`` ("canary_failed" / "canary_timeout"); once every permitted canary
               succeeded -> closed with an empty window and the base cooldown
               ("canary_succeeded").

A call is admitted with a :class:`Permit` naming the state's ``generation`` (incremented on every
transition). An outcome whose permit is from an older generation is ignored: a slow call admitted
while closed that returns after the breaker opened cannot decide a later half-open probe.

The records (:class:`BreakerState`, :class:`Permit`, :class:`Transition`, :class:`Decision`) are
slots dataclasses without ``frozen`` (a frozen one costs several times more to build, and the
closed path builds some per call): treat them as values; nothing here changes one after building it.

Windows: ``"count"`` keeps the last ``window_size`` outcomes as two bit strings (failures, slow
calls) in ints, O(1) per outcome; ``"time"`` keeps per-second buckets of the last ``window_size``
seconds (calls, failures, slow calls), as resilience4j aggregates its time-based window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

from kernel_lib.errors import GatewayConfigError

__all__ = ["CLOSED", "OPEN", "HALF_OPEN", "BREAKER_STATES", "TRANSITION_REASONS", "WindowKind", "BreakerConfig",
           "BreakerState", "Permit", "Decision", "Transition", "initial_state", "decide", "record", "tick",
           "force", "window_rates", "cooldown_remaining_s", "TABLE_10_BREAKERS"]

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
BREAKER_STATES = (CLOSED, OPEN, HALF_OPEN)
TRANSITION_REASONS = ("failure_rate", "slow_call_rate", "cooldown_elapsed", "canary_succeeded", "canary_failed",
                      "canary_timeout", "forced_open", "forced_closed")
WindowKind = Literal["count", "time"]

_WINDOW_MAX = 100_000


def _num(name: str, value: Any, *, low: float, high: float = math.inf, low_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (value <= low if low_open else value < low) or value > high:
        bound = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")
        raise GatewayConfigError(f"{name} must be a finite number {bound}, got {value!r}", field=name)
    return float(value)


def _int(name: str, value: Any, *, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise GatewayConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}", field=name)
    return value


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """A breaker's parameters (module docstring; resilience4j's names in brackets).

    Fields:
        window_kind: ``"count"`` (the last ``window_size`` calls) or ``"time"`` (the calls of the
            last ``window_size`` seconds, in 1-s buckets) [slidingWindowType].
        window_size: W: calls, or whole seconds (1..100000) [slidingWindowSize].
        minimum_calls: outcomes the window must hold before a rate can trip it (1..; for a count
            window at most W) [minimumNumberOfCalls].
        failure_rate_threshold: tau_fail in (0, 1]; trips at E >= tau_fail (the chapter: 0.5-0.7)
            [failureRateThreshold, a percentage there].
        slow_call_rate_threshold: in (0, 1], or None to ignore slow calls [slowCallRateThreshold].
        slow_call_duration_s: a call at least this long is slow (s, > 0; needed with the rate)
            [slowCallDurationThreshold].
        cooldown_s: T_cooldown, the base time open before a probe (s, > 0; the chapter: 30-120 s)
            [waitDurationInOpenState].
        cooldown_max_s: T_cooldown_max, the cap of the doubled cooldown (s, >= cooldown_s).
        half_open_permits: K_canary, canaries admitted in half-open (1..1000, default 1)
            [permittedNumberOfCallsInHalfOpenState].
        canary_timeout_s: a canary's lease (s, > 0): a canary not reported within it counts as
            failed, so a caller that died mid-probe cannot wedge the breaker half-open
            [maxWaitDurationInHalfOpenState, roughly].

    Raises:
        GatewayConfigError: a field out of range or inconsistent (the message names it).
    """

    window_kind: str = "count"
    window_size: int = 20
    minimum_calls: int = 10
    failure_rate_threshold: float = 0.5
    slow_call_rate_threshold: float | None = None
    slow_call_duration_s: float | None = None
    cooldown_s: float = 30.0
    cooldown_max_s: float = 300.0
    half_open_permits: int = 1
    canary_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.window_kind not in ("count", "time"):
            raise GatewayConfigError(f"window_kind must be 'count' or 'time', got {self.window_kind!r}",
                                     field="window_kind")
        _int("window_size", self.window_size, low=1, high=_WINDOW_MAX)
        high = self.window_size if self.window_kind == "count" else _WINDOW_MAX
        _int("minimum_calls", self.minimum_calls, low=1, high=high)
        object.__setattr__(self, "failure_rate_threshold",
                           _num("failure_rate_threshold", self.failure_rate_threshold, low=0, high=1, low_open=True))
        if self.slow_call_rate_threshold is not None:
            object.__setattr__(self, "slow_call_rate_threshold", _num(
                "slow_call_rate_threshold", self.slow_call_rate_threshold, low=0, high=1, low_open=True))
            if self.slow_call_duration_s is None:
                raise GatewayConfigError("slow_call_rate_threshold needs slow_call_duration_s (what counts as slow)",
                                         field="slow_call_duration_s")
        if self.slow_call_duration_s is not None:
            object.__setattr__(self, "slow_call_duration_s",
                               _num("slow_call_duration_s", self.slow_call_duration_s, low=0, low_open=True))
        object.__setattr__(self, "cooldown_s", _num("cooldown_s", self.cooldown_s, low=0, low_open=True))
        object.__setattr__(self, "cooldown_max_s", _num("cooldown_max_s", self.cooldown_max_s, low=self.cooldown_s))
        _int("half_open_permits", self.half_open_permits, low=1, high=1000)
        object.__setattr__(self, "canary_timeout_s",
                           _num("canary_timeout_s", self.canary_timeout_s, low=0, low_open=True))

    @property
    def counts_slow_calls(self) -> bool:
        return self.slow_call_rate_threshold is not None

    def to_json(self) -> dict[str, Any]:
        return {"window_kind": self.window_kind, "window_size": self.window_size, "minimum_calls": self.minimum_calls,
                "failure_rate_threshold": self.failure_rate_threshold,
                "slow_call_rate_threshold": self.slow_call_rate_threshold,
                "slow_call_duration_s": self.slow_call_duration_s, "cooldown_s": self.cooldown_s,
                "cooldown_max_s": self.cooldown_max_s, "half_open_permits": self.half_open_permits,
                "canary_timeout_s": self.canary_timeout_s}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BreakerConfig":
        """Raises GatewayConfigError for a document that is not a breaker configuration."""
        if not isinstance(data, dict):
            raise GatewayConfigError(f"a breaker configuration is a JSON object, got {type(data).__name__}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise GatewayConfigError(f"not a breaker configuration: {exc}") from None


#: Table 10's breaker policies per domain: local tools have none ("kernel failures are fatal");
#: internal RPC is aggressive (tau_fail 0.5, W 10); external APIs are conservative (tau_fail 0.6,
#: W 20, T_cooldown >= 60 s). The minimum number of calls, the cooldown cap and the canary lease
#: are not in the table: ours (W itself, 8x the base cooldown, the domain's call timeout + 1 s).
TABLE_10_BREAKERS: dict[str, BreakerConfig | None] = {
    "local": None,
    "internal_rpc": BreakerConfig(window_size=10, minimum_calls=10, failure_rate_threshold=0.5, cooldown_s=30.0,
                                  cooldown_max_s=240.0, canary_timeout_s=3.0),
    "external_api": BreakerConfig(window_size=20, minimum_calls=20, failure_rate_threshold=0.6, cooldown_s=60.0,
                                  cooldown_max_s=480.0, canary_timeout_s=11.0),
}


@dataclass(slots=True)
class BreakerState:
    """One breaker's recorded state (plain data; what a shared store holds).

    Fields:
        state: ``closed``, ``open`` or ``half_open``.
        generation: incremented on every transition (permits name it; a store compares it).
        calls: outcomes in a count window (<= W); unused (0) for a time window.
        fail_bits, slow_bits: the count window's failures and slow calls, newest in bit 0.
        buckets: the time window's ``(second, calls, failures, slow)`` tuples, oldest first.
        opened_at_s: when it last opened (s, the clock's scale), or None.
        cooldown_s: the current cooldown (base, doubled after each failed probe, capped).
        canaries: ``(permit_id, lease_deadline_s)`` of the canaries in flight.
        canary_successes: canaries of this half-open period that succeeded.
        changed_at_s: when the last transition happened (s), or None.
    """

    state: str
    generation: int
    calls: int
    fail_bits: int
    slow_bits: int
    buckets: tuple[tuple[int, int, int, int], ...]
    opened_at_s: float | None
    cooldown_s: float
    canaries: tuple[tuple[str, float], ...]
    canary_successes: int
    changed_at_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "generation": self.generation, "calls": self.calls,
                "fail_bits": self.fail_bits, "slow_bits": self.slow_bits,
                "buckets": [list(b) for b in self.buckets], "opened_at_s": self.opened_at_s,
                "cooldown_s": self.cooldown_s, "canaries": [list(c) for c in self.canaries],
                "canary_successes": self.canary_successes, "changed_at_s": self.changed_at_s}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BreakerState":
        """Raises ValueError (or KeyError / TypeError) for a document that is not a state; the
        stores turn these into BreakerStoreError."""
        s = cls(state=str(data["state"]), generation=int(data["generation"]), calls=int(data["calls"]),
                fail_bits=int(data["fail_bits"]), slow_bits=int(data["slow_bits"]),
                buckets=tuple((int(a), int(b), int(c), int(d)) for a, b, c, d in data["buckets"]),
                opened_at_s=None if data["opened_at_s"] is None else float(data["opened_at_s"]),
                cooldown_s=float(data["cooldown_s"]),
                canaries=tuple((str(p), float(d)) for p, d in data["canaries"]),
                canary_successes=int(data["canary_successes"]),
                changed_at_s=None if data["changed_at_s"] is None else float(data["changed_at_s"]))
        if s.state not in BREAKER_STATES or s.generation < 0 or s.calls < 0 or s.cooldown_s <= 0:
            raise ValueError(f"not a breaker state: {data!r}"[:200])
        return s


@dataclass(slots=True)
class Permit:
    """Admission of one call: the ``generation`` it was admitted in, whether it is a half-open
    ``canary``, and the canary's ``permit_id`` (empty for an ordinary call)."""

    generation: int
    canary: bool = False
    permit_id: str = ""


@dataclass(slots=True)
class Transition:
    """One state change, as recorded (a row of the shared store's transition table).

    ``at_s``: when (s); ``from_state``, ``to_state``; ``reason``: one of
    :data:`TRANSITION_REASONS`; ``generation``: the new generation; ``cooldown_s``: the cooldown
    in force after it; ``failure_rate`` / ``slow_call_rate`` / ``calls``: the window when it
    tripped (None otherwise)."""

    at_s: float
    from_state: str
    to_state: str
    reason: str
    generation: int
    cooldown_s: float
    failure_rate: float | None = None
    slow_call_rate: float | None = None
    calls: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"at_s": self.at_s, "from_state": self.from_state, "to_state": self.to_state, "reason": self.reason,
                "generation": self.generation, "cooldown_s": self.cooldown_s, "failure_rate": self.failure_rate,
                "slow_call_rate": self.slow_call_rate, "calls": self.calls}


@dataclass(slots=True)
class Decision:
    """The answer to "may this call go out now?".

    ``admitted``: the call may be dispatched under ``permit``; otherwise it fails fast with
    ERR_CIRCUIT_OPEN. ``state``: the breaker's state after deciding (the same object when
    nothing changed, so a runner can skip writing it). ``transitions``: what changed on the way
    (open -> half_open, or an expired canary reopening it). ``cooldown_remaining_s``: for a
    refusal, seconds until a probe may be admitted (0.0 when half-open with its probes in
    flight)."""

    admitted: bool
    permit: Permit | None
    state: BreakerState
    transitions: tuple[Transition, ...] = ()
    cooldown_remaining_s: float = 0.0


def initial_state(config: BreakerConfig) -> BreakerState:
    """A closed breaker with an empty window and the base cooldown."""
    return BreakerState(CLOSED, 0, 0, 0, 0, (), None, config.cooldown_s, (), 0, None)


def _closed(config: BreakerConfig, state: BreakerState, now_s: float, reason: str) -> tuple[BreakerState, Transition]:
    new = BreakerState(CLOSED, state.generation + 1, 0, 0, 0, (), None, config.cooldown_s, (), 0, now_s)
    return new, Transition(now_s, state.state, CLOSED, reason, new.generation, new.cooldown_s)


def _opened(state: BreakerState, now_s: float, reason: str, cooldown_s: float, rates: tuple | None = None
            ) -> tuple[BreakerState, Transition]:
    new = BreakerState(OPEN, state.generation + 1, 0, 0, 0, (), now_s, cooldown_s, (), 0, now_s)
    fr, sr, n = rates if rates is not None else (None, None, None)
    return new, Transition(now_s, state.state, OPEN, reason, new.generation, cooldown_s, fr, sr, n)


def cooldown_remaining_s(state: BreakerState, now_s: float) -> float:
    """Seconds until an open breaker admits a probe (0.0 when not open or already due)."""
    if state.state != OPEN or state.opened_at_s is None:
        return 0.0
    return max(0.0, state.opened_at_s + state.cooldown_s - now_s)


def _half_open_step(config: BreakerConfig, state: BreakerState, now_s: float) -> tuple[BreakerState, list[Transition]]:
    """open -> half_open when the cooldown has elapsed; half_open -> open when a canary's lease ran
    out. Returns the (possibly same) state and the transitions made."""
    trs: list[Transition] = []
    if state.state == OPEN and state.opened_at_s is not None and now_s >= state.opened_at_s + state.cooldown_s:
        state = BreakerState(HALF_OPEN, state.generation + 1, 0, 0, 0, (), state.opened_at_s, state.cooldown_s, (), 0,
                             now_s)
        trs.append(Transition(now_s, OPEN, HALF_OPEN, "cooldown_elapsed", state.generation, state.cooldown_s))
    if state.state == HALF_OPEN and state.canaries and any(d <= now_s for _, d in state.canaries):
        state, tr = _opened(state, now_s, "canary_timeout", min(2 * state.cooldown_s, config.cooldown_max_s))
        trs.append(tr)
    return state, trs


def decide(config: BreakerConfig, state: BreakerState, now_s: float, permit_id: str = "") -> Decision:
    """May a call go out at ``now_s``? (module docstring). ``permit_id`` names the canary if one
    is admitted (the runner makes it unique: process, thread, counter); an ordinary call needs none.

    Closed: admitted, state unchanged. Open before its cooldown: refused, state unchanged. Open
    after it: half-open, then as half-open. Half-open: an expired canary lease reopens it
    (refused); else admitted as a canary while fewer than ``half_open_permits`` canaries are in
    flight or succeeded, refused otherwise."""
    s = state.state
    if s == CLOSED:
        return Decision(True, Permit(state.generation), state)
    if s == OPEN and (state.opened_at_s is None or now_s < state.opened_at_s + state.cooldown_s):
        return Decision(False, None, state, (), cooldown_remaining_s(state, now_s))
    state, trs = _half_open_step(config, state, now_s)
    if state.state == OPEN:
        return Decision(False, None, state, tuple(trs), cooldown_remaining_s(state, now_s))
    if len(state.canaries) + state.canary_successes < config.half_open_permits:
        pid = permit_id or f"canary-{state.generation}-{len(state.canaries) + state.canary_successes}"
        state = replace(state, canaries=state.canaries + ((pid, now_s + config.canary_timeout_s),))
        return Decision(True, Permit(state.generation, True, pid), state, tuple(trs))
    return Decision(False, None, state, tuple(trs), 0.0)


def tick(config: BreakerConfig, state: BreakerState, now_s: float) -> tuple[BreakerState, tuple[Transition, ...]]:
    """Apply the time-driven transitions due at ``now_s`` without admitting a call (open ->
    half_open after the cooldown; an expired canary lease -> open), like resilience4j's automatic
    transition. For dashboards and the simulator; :func:`decide` does the same on the next call."""
    new, trs = _half_open_step(config, state, now_s)
    return new, tuple(trs)


def window_rates(config: BreakerConfig, state: BreakerState, now_s: float | None = None
                 ) -> tuple[float, float, int]:
    """``(failure_rate, slow_call_rate, calls)`` of the window (rates 0.0 when it is empty); for a
    time window, only buckets within ``window_size`` seconds of ``now_s`` (all buckets when None)."""
    if config.window_kind == "count":
        n = state.calls
        if n == 0:
            return 0.0, 0.0, 0
        return state.fail_bits.bit_count() / n, state.slow_bits.bit_count() / n, n
    buckets = state.buckets
    if now_s is not None:
        oldest = math.floor(now_s) - config.window_size + 1
        buckets = tuple(b for b in buckets if b[0] >= oldest)
    n = sum(b[1] for b in buckets)
    if n == 0:
        return 0.0, 0.0, 0
    return sum(b[2] for b in buckets) / n, sum(b[3] for b in buckets) / n, n


def _trip_reason(config: BreakerConfig, fr: float, sr: float, n: int) -> str | None:
    if n < config.minimum_calls:
        return None
    if fr >= config.failure_rate_threshold:
        return "failure_rate"
    if config.slow_call_rate_threshold is not None and sr >= config.slow_call_rate_threshold:
        return "slow_call_rate"
    return None


def record(config: BreakerConfig, state: BreakerState, permit: Permit, failure: bool, duration_s: float,
           now_s: float) -> tuple[BreakerState, tuple[Transition, ...]]:
    """Record the outcome of a call admitted under ``permit``: ``failure`` (the classifier's
    verdict: transport criteria), ``duration_s`` (for the slow-call rate), at ``now_s``.

    Returns the new state (the same object when nothing changed: a stale permit, or a success into
    a full count window holding no failure and no slow call) and the transitions made."""
    if permit.generation != state.generation:
        return state, ()
    slow = config.slow_call_duration_s is not None and duration_s >= config.slow_call_duration_s
    s = state.state
    if s == CLOSED:
        if config.window_kind == "count":
            w = config.window_size
            mask = (1 << w) - 1
            fb = ((state.fail_bits << 1) | failure) & mask
            sb = ((state.slow_bits << 1) | slow) & mask
            n = state.calls + 1 if state.calls < w else w
            if n == state.calls and fb == state.fail_bits and sb == state.slow_bits:
                return state, ()
            new = BreakerState(CLOSED, state.generation, n, fb, sb, (), state.opened_at_s, state.cooldown_s, (), 0,
                               state.changed_at_s)
            fr, sr = fb.bit_count() / n, sb.bit_count() / n
        else:
            sec = math.floor(now_s)
            oldest = sec - config.window_size + 1
            buckets = [b for b in state.buckets if b[0] >= oldest]
            if buckets and buckets[-1][0] == sec:
                _, c, f, sl = buckets[-1]
                buckets[-1] = (sec, c + 1, f + failure, sl + slow)
            else:
                buckets.append((sec, 1, int(failure), int(slow)))
            new = BreakerState(CLOSED, state.generation, 0, 0, 0, tuple(buckets), state.opened_at_s,
                               state.cooldown_s, (), 0, state.changed_at_s)
            n = sum(b[1] for b in buckets)
            fr = sum(b[2] for b in buckets) / n
            sr = sum(b[3] for b in buckets) / n
        reason = _trip_reason(config, fr, sr, n)
        if reason is None:
            return new, ()
        opened, tr = _opened(new, now_s, reason, config.cooldown_s, (fr, sr, n))
        return opened, (tr,)
    if s == HALF_OPEN and permit.canary:
        if not any(pid == permit.permit_id for pid, _ in state.canaries):
            return state, ()
        if failure or (slow and config.counts_slow_calls):
            opened, tr = _opened(state, now_s, "canary_failed", min(2 * state.cooldown_s, config.cooldown_max_s))
            return opened, (tr,)
        rest = tuple(c for c in state.canaries if c[0] != permit.permit_id)
        done = state.canary_successes + 1
        if done >= config.half_open_permits:
            closed, tr = _closed(config, state, now_s, "canary_succeeded")
            return closed, (tr,)
        return replace(state, canaries=rest, canary_successes=done), ()
    return state, ()


def force(config: BreakerConfig, state: BreakerState, to_state: str, now_s: float
          ) -> tuple[BreakerState, tuple[Transition, ...]]:
    """An operator's override: ``"open"`` (with the current cooldown, reason ``forced_open``) or
    ``"closed"`` (empty window, base cooldown, ``forced_closed``). A no-op when already there.
    Raises GatewayConfigError for another target."""
    if to_state not in (OPEN, CLOSED):
        raise GatewayConfigError(f"a breaker can be forced 'open' or 'closed', got {to_state!r}", field="to_state")
    if state.state == to_state:
        return state, ()
    if to_state == OPEN:
        new, tr = _opened(state, now_s, "forced_open", state.cooldown_s)
    else:
        new, tr = _closed(config, state, now_s, "forced_closed")
    return new, (tr,)
