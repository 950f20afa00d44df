"""The fault profile of table 14 and a seeded plan of who meets which fault (Failure Recovery,
"Fault injection benchmarks": faults in 20 % of executed turns: 8 % network drops, 6 % tool
exceptions, 4 % process kills, 2 % format corruption).

**Where a fault is drawn.** Once per *executed proposal*: every forward step the model proposes
and every repair attempt it proposes (a re-sample after a rejected malformed call is a new
proposal). Compensations, status lookups, re-sends of the same request under its idempotency key
and the verification gate's reads are exempt: the profile measures how the runtime meets faults
of the agent's own actions, and a fault inside the unwind would measure something else (the
saga sweep, :mod:`kernel_lib.sim.saga_sweep`, covers crashes there). At most one fault per
proposal. What each kind does:

* ``network_drop`` -- the answer never arrives (the caller waits ``Timings.timeout_s``): with
  probability ``drop_after_effect_fraction`` after the service applied the effect
  (``timeout_after``), otherwise before (``timeout_before``);
* ``tool_exception`` -- the proposal is semantically wrong (broken SQL, a bad URL, a version tag
  that is not one): the service itself refuses it (a final 4xx);
* ``process_kill`` -- the worker process dies at one of :data:`KILL_POSITIONS`, uniformly:
  before the intent is written, after the intent before dispatch, after dispatch before the
  result is logged;
* ``format_corruption`` -- the model's tool call is not well formed (truncated JSON).

A repair attempt that meets no fault is right with probability ``repair_success`` (the seeded
stand-in for the model's repair pass). :class:`FaultPlan` draws all of it from the seed, the
trajectory index and the proposal's index, so a run is reproducible and two configurations given
the same seed meet the same faults in the same proposals (common random numbers).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from kernel_lib.errors import ConfigError

__all__ = ["FAULT_KINDS", "KILL_POSITIONS", "FaultProfile", "Timings", "Fault", "FaultPlan", "ScriptedFaultPlan"]

FAULT_KINDS = ("network_drop", "tool_exception", "process_kill", "format_corruption")
KILL_POSITIONS = ("before_intent", "after_intent", "after_dispatch")


def _prob(name: str, v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not (0.0 <= v <= 1.0) or math.isnan(v):
        raise ConfigError(f"{name} must be a probability in [0, 1], got {v!r}")
    return float(v)


def _pos(name: str, v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"{name} must be a finite number >= 0, got {v!r}")
    return float(v)


@dataclass(frozen=True)
class FaultProfile:
    """The fault probabilities per executed proposal and the repair stand-in (see the module
    docstring). Defaults: the chapter's 20 % profile; ``repair_success`` 0.8, ``k_repair`` is the
    configuration's; ``resample_max`` re-samples after a rejected malformed call;
    ``repair_failure``: a failed repair proposes another wrong call (``"drift"``: a different
    error each time) or the same one again (``"spin"``: the anti-spin bound stops it).
    ConfigError when a probability is out of range or they sum past 1."""

    network_drop: float = 0.08
    tool_exception: float = 0.06
    process_kill: float = 0.04
    format_corruption: float = 0.02
    drop_after_effect_fraction: float = 0.5
    repair_success: float = 0.8
    resample_max: int = 2
    repair_failure: str = "drift"

    def __post_init__(self) -> None:
        for f in ("network_drop", "tool_exception", "process_kill", "format_corruption", "drop_after_effect_fraction",
                  "repair_success"):
            _prob(f, getattr(self, f))
        if self.total > 1.0 + 1e-12:
            raise ConfigError(f"the fault probabilities sum to {self.total:g} > 1")
        if type(self.resample_max) is not int or not 0 <= self.resample_max <= 10:
            raise ConfigError(f"resample_max must be an integer 0..10, got {self.resample_max!r}")
        if self.repair_failure not in ("drift", "spin"):
            raise ConfigError(f"repair_failure must be 'drift' or 'spin', got {self.repair_failure!r}")

    @property
    def total(self) -> float:
        """The probability that a proposal meets some fault (0.20 for the chapter's profile)."""
        return self.network_drop + self.tool_exception + self.process_kill + self.format_corruption

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total": round(self.total, 12)}


@dataclass(frozen=True)
class Timings:
    """Stated durations on the simulated substrate's virtual clock (seconds; given, not measured):
    ``timeout_s`` a caller waits for a lost answer; ``probe_s`` one status lookup (Napkin Math
    0.5's 45 ms probe); ``restart_s`` from a worker's death to its replacement running (detection
    and process start); ``proposal_s`` the stand-in model's time per proposal (a repair pass
    included). The services' own action durations come from their declarations."""

    timeout_s: float = 2.0
    probe_s: float = 0.045
    restart_s: float = 0.5
    proposal_s: float = 2.0

    def __post_init__(self) -> None:
        for f in ("timeout_s", "probe_s", "restart_s", "proposal_s"):
            _pos(f, getattr(self, f))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Fault:
    """One proposal's draw: ``kind`` (None: no fault, or one of :data:`FAULT_KINDS`),
    ``after_effect`` (a network drop after the service applied it), ``position`` (a kill's
    position), ``repair_u`` (the uniform the repair stand-in compares with ``repair_success``)."""

    kind: str | None
    after_effect: bool = False
    position: str | None = None
    repair_u: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "after_effect": self.after_effect, "position": self.position}


class FaultPlan:
    """The seeded plan: :meth:`draw` (trajectory index, proposal index) -> :class:`Fault`, a pure
    function of the seed and both indexes. ConfigError for a seed that is not an integer."""

    def __init__(self, seed: int, profile: FaultProfile = FaultProfile()):
        if type(seed) is not int:
            raise ConfigError(f"the fault plan's seed must be an integer, got {seed!r}")
        if not isinstance(profile, FaultProfile):
            raise ConfigError(f"profile must be a FaultProfile, got {type(profile).__name__}")
        self.seed = seed
        self.profile = profile
        p = profile
        self._cuts = (("network_drop", p.network_drop), ("tool_exception", p.network_drop + p.tool_exception),
                      ("process_kill", p.network_drop + p.tool_exception + p.process_kill),
                      ("format_corruption", p.total))

    def draw(self, trajectory: int, proposal: int, *, turn: int = 0, nth: int = 0) -> Fault:
        """The fault of proposal ``proposal`` (0-based, counted over the whole trajectory) of
        trajectory ``trajectory``; ``turn`` (1-based) and ``nth`` (the proposal's place within its
        turn) are for scripted plans and not used here."""
        rng = random.Random((self.seed * 1_000_003 + trajectory) * 1_000_003 + proposal)
        u, v, r = rng.random(), rng.random(), rng.random()
        kind = next((k for k, cut in self._cuts if u < cut), None)
        if kind == "network_drop":
            return Fault(kind, after_effect=v < self.profile.drop_after_effect_fraction, repair_u=r)
        if kind == "process_kill":
            return Fault(kind, position=KILL_POSITIONS[min(2, int(v * 3))], repair_u=r)
        return Fault(kind, repair_u=r)


class ScriptedFaultPlan(FaultPlan):
    """A plan that injects exactly the faults it is given (a scenario, figure 5):
    ``{(turn, nth): Fault}``, ``turn`` 1-based, ``nth`` the proposal's place within the turn
    (0: the first proposal, 1: the first repair or re-sample, ...). Every other proposal meets no
    fault, and every repair succeeds unless its entry says otherwise (``Fault(None,
    repair_u=0.9)``: a wrong repair). ConfigError for a malformed script."""

    def __init__(self, script: dict[tuple[int, int], Fault], profile: FaultProfile = FaultProfile()):
        super().__init__(0, profile)
        for key, f in script.items():
            if not (isinstance(key, tuple) and len(key) == 2 and all(type(x) is int and x >= 0 for x in key)
                    and key[0] >= 1) or not isinstance(f, Fault):
                raise ConfigError(f"a scripted fault is (turn >= 1, nth >= 0) -> Fault, got {key!r} -> {f!r}")
            if f.kind is not None and f.kind not in FAULT_KINDS:
                raise ConfigError(f"unknown fault kind {f.kind!r} (known: {', '.join(FAULT_KINDS)})")
            if f.kind == "process_kill" and f.position not in KILL_POSITIONS:
                raise ConfigError(f"a kill needs a position in {KILL_POSITIONS}, got {f.position!r}")
        self.script = dict(script)

    def draw(self, trajectory: int, proposal: int, *, turn: int = 0, nth: int = 0) -> Fault:
        return self.script.get((turn, nth), Fault(None))
