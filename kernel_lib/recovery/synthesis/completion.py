"""Closed forms of the completion rate against trajectory length, under our fault semantics
(Failure Recovery, table 14; the chapter states neither its trajectory lengths nor what its
configurations do with each fault, so its completion rates cannot be derived; ours can).

Faults are drawn independently per executed proposal (:mod:`.faults`): a network drop with
probability d (a share a of them after the effect), a tool exception e, a process kill k (at one
of three positions, uniformly), a format corruption f, no fault n = 1 − d − e − k − f. A repair
attempt that meets no fault is right with probability r. A turn gets through or ends the
trajectory, and the turns of one trajectory meet independent draws, so

    completion = Π_turns q_turn,   and for T alike turns  completion(T) = q^T

where q follows from the configuration's flags (:class:`~.config.RuntimeConfig`) and, for a
configuration that retries blindly, from what the service does with a repeated request
(:attr:`~.harness.TurnSpec.replay`):

* a proposal "goes through" with g = n + δ·d + κ·k. δ = 1 when a drop is settled (a
  reconciliation probe; a blind retry of a request the service applies again or that only
  reads), δ = 1 − a for a blind retry the service refuses once the first had applied (a
  migration whose change is already in the schema), 0 otherwise; κ is the share of kills
  survived: 1 with a durable log and a probe, 1/3 with a durable log alone (only a kill before
  the intent leaves nothing in doubt), 0 without a durable log;
* with schema validation a malformed call is re-sampled up to R times: each proposal phase ends
  in a valid call with G = Σ_{i=0}^{R} f^i (G = 1 without: the malformed call ends the run);
* with forward repair (K = K_repair > 0) a tool exception is followed by up to K repairs, each
  right with s = g·r·G and wrong again with w = (g·(1 − r) + e)·G (with ``repair_failure="spin"``
  a wrong repair repeats the same error and the anti-spin bound stops after one: K_eff = 1).

    q = G·(g + e·s·Σ_{j=0}^{K_eff−1} w^j)

For table 14's rows: unmanaged q = n; WAL only q = n + k/3; saga only q = n + d (n + (1 − a)·d
on a migration turn); synthesized the full form. The expected duplicated effects of a
configuration that retries blindly are Σ_t P(turn t reached)·d·a over the turns whose repeat the
service applies again. :func:`completion_forms` gives the sympy expressions,
:func:`completion_rate` evaluates them; ``tests/test_synthesis_scorecard.py`` compares them with
the simulation. ConfigError for an unknown configuration, replay kind or length.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence

import sympy as sp

from kernel_lib.errors import ConfigError
from kernel_lib.recovery.synthesis.config import CONFIGS, RuntimeConfig
from kernel_lib.recovery.synthesis.faults import FaultProfile

__all__ = ["SYMBOLS", "REPLAY_KINDS", "per_turn_form", "completion_form", "completion_forms", "per_turn_success",
           "completion_rate", "expected_duplicates", "forms_as_text"]

d, e, k, f, a, r, T = sp.symbols("d e k f a r T", nonnegative=True)
#: The symbols of the forms: drop, exception, kill, format probabilities, the after-effect share
#: of drops, repair success, trajectory length (turns).
SYMBOLS = {"d": d, "e": e, "k": k, "f": f, "a": a, "r": r, "T": T}
REPLAY_KINDS = ("repeats", "harmless", "refused")

Replay = int | Sequence[str]


def _config(config: RuntimeConfig | str) -> RuntimeConfig:
    if isinstance(config, RuntimeConfig):
        return config
    c = CONFIGS.get(config)
    if c is None:
        raise ConfigError(f"unknown runtime configuration {config!r} (known: {', '.join(CONFIGS)})")
    return c


def _kinds(turns: Replay) -> tuple[str, ...]:
    if isinstance(turns, int) and not isinstance(turns, bool):
        if turns < 1:
            raise ConfigError(f"turns must be an integer >= 1, got {turns!r}")
        return ("repeats",) * turns
    kinds = tuple(turns)
    bad = [x for x in kinds if x not in REPLAY_KINDS]
    if not kinds or bad:
        raise ConfigError(f"a trajectory is a non-empty list of replay kinds {REPLAY_KINDS}, got {kinds!r}")
    return kinds


def per_turn_form(config: RuntimeConfig | str, replay: str = "repeats", *, resample_max: int = 2,
                  repair_failure: str = "drift") -> sp.Expr:
    """q for one turn of replay kind ``replay``, a sympy expression in d, e, k, f, a, r (see the
    module docstring)."""
    c = _config(config)
    if replay not in REPLAY_KINDS:
        raise ConfigError(f"replay must be one of {REPLAY_KINDS}, got {replay!r}")
    n = 1 - d - e - k - f
    if c.reconciliation_probe:
        drop = d
    elif c.retry_blindly:
        drop = d * (1 - a) if replay == "refused" else d
    else:
        drop = sp.Integer(0)
    kill = k if (c.durable_log and c.reconciliation_probe) else (k / 3 if c.durable_log else sp.Integer(0))
    g = n + drop + kill
    big_g = sum(f ** i for i in range(resample_max + 1)) if c.schema_validation else sp.Integer(1)
    q = g
    if c.forward_repair_k:
        k_eff = c.forward_repair_k if repair_failure == "drift" else 1
        s = g * r * big_g
        w = (g * (1 - r) + e) * big_g
        q = g + e * s * sum(w ** j for j in range(k_eff))
    return big_g * q


def completion_form(config: RuntimeConfig | str, turns: Replay, *, resample_max: int = 2,
                    repair_failure: str = "drift") -> sp.Expr:
    """Π q_turn over ``turns`` (an int: that many turns of kind ``repeats``; or the turns'
    replay kinds, e.g. the systems-administration task's)."""
    counts = Counter(_kinds(turns))
    out = sp.Integer(1)
    for kind, n in counts.items():
        out *= per_turn_form(config, kind, resample_max=resample_max, repair_failure=repair_failure) ** n
    return out


def completion_forms(*, resample_max: int = 2, repair_failure: str = "drift") -> dict[str, sp.Expr]:
    """``{configuration: q^T}`` for table 14's configurations and T alike turns (kind ``repeats``)."""
    return {name: per_turn_form(c, resample_max=resample_max, repair_failure=repair_failure) ** T
            for name, c in CONFIGS.items()}


def _subs(profile: FaultProfile) -> dict[sp.Symbol, float]:
    return {d: profile.network_drop, e: profile.tool_exception, k: profile.process_kill, f: profile.format_corruption,
            a: profile.drop_after_effect_fraction, r: profile.repair_success}


@functools.lru_cache(maxsize=256)
def _q(config: RuntimeConfig, replay: str, profile: FaultProfile) -> float:
    form = per_turn_form(config, replay, resample_max=profile.resample_max, repair_failure=profile.repair_failure)
    return float(form.subs(_subs(profile)))


def per_turn_success(config: RuntimeConfig | str, profile: FaultProfile | None = None,
                     replay: str = "repeats") -> float:
    """q evaluated for ``profile`` (default: the chapter's 20 % profile)."""
    return _q(_config(config), replay, profile or FaultProfile())


def completion_rate(config: RuntimeConfig | str, turns: Replay, profile: FaultProfile | None = None) -> float:
    """The expected completion rate: Π q_turn over ``turns`` (see :func:`completion_form`)."""
    c, p = _config(config), profile or FaultProfile()
    out = 1.0
    for kind in _kinds(turns):
        out *= _q(c, kind, p)
    return out


def expected_duplicates(config: RuntimeConfig | str, turns: Replay, profile: FaultProfile | None = None) -> float:
    """Expected duplicated effects per trajectory: Σ_t P(turn t reached)·d·a over the turns whose
    blind repeat the service applies again, when the configuration retries blindly; else 0 (a
    probe, or no retry, never applies one request twice)."""
    c, p = _config(config), profile or FaultProfile()
    if not c.retry_blindly:
        return 0.0
    reach, total = 1.0, 0.0
    for kind in _kinds(turns):
        if kind == "repeats":
            total += reach * p.network_drop * p.drop_after_effect_fraction
        reach *= _q(c, kind, p)
    return total


def forms_as_text(**kw: object) -> dict[str, dict[str, str]]:
    """The per-turn forms q by configuration and replay kind, as text (for ``--json``)."""
    return {name: {kind: str(per_turn_form(c, kind, **kw)) for kind in REPLAY_KINDS}
            for name, c in CONFIGS.items()}
