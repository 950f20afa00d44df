"""§11.12 exercise 8, "An asynchronous replica behind an irreversible actor" (Advanced).

Uses §11.3.1 table 2 (a local barrier plus an asynchronous copy does not survive loss of the
worker's volume) and definition 11.2, §11.3.2 eq. 1 (intent acknowledged under the declared failure
domain before dispatch), §11.3.3 the completeness rule and table 3 (absence of an intent proves
nothing in a lagging prefix; an intent without evidence is in doubt; even a proven non-dispatch is
reconsidered under current admission, never dispatched automatically) and settlement before retry
(principle 8).

Givens (papermill names): ``worker_count`` workers, each dispatching ``dispatches_per_worker_hour``
approved changes as a Poisson process after ``approval_wait_s``; the remote copy lags by
``replica_lag_ms`` (``partition_lag_s`` during a partition); ``volume_failures_per_worker_year``;
``duplicate_cost_usd`` expected damage per duplicated change; ``quorum_ack_ms`` the off-volume quorum
acknowledgment of the alternative design.

Derivation (sympy): with per-worker rate λ and lag L, a failure finds at least one dispatch in the
preceding window with probability P = 1 - exp(-λL); across the fleet W·f·P such failures happen per
year, costing W·f·P·C. The quorum adds q per dispatch, i.e. q·r·24 per worker-day, and q/A per
change relative to the approval wait A.
"""

from __future__ import annotations

import random
from typing import Any, Mapping

import sympy as sp

from kernel_lib.course.exercises._common import Param, Tol, exact, grade, jsonable, validate

EXERCISE = "11.8"
TITLE = "An asynchronous replica behind an irreversible actor"

PARAMS = (
    Param("worker_count", int, 1, 1_000_000, "remediation workers in the fleet"),
    Param("dispatches_per_worker_hour", float, 1e-6, 1e6, "approved changes each worker dispatches per hour (Poisson)"),
    Param("approval_wait_s", float, 1e-3, 1e7, "typical wait for approval before a dispatch, s"),
    Param("replica_lag_ms", float, 0.0, 1e9, "how far the remote store lags the local log, ms"),
    Param("volume_failures_per_worker_year", float, 0.0, 1e4, "volume-losing failures per worker per year"),
    Param("duplicate_cost_usd", float, 0.0, 1e12, "expected damage of one duplicated change, USD"),
    Param("quorum_ack_ms", float, 0.0, 1e6, "off-volume quorum acknowledgment per dispatch, ms"),
    Param("partition_lag_s", float, 0.0, 1e7, "lag of the remote store during a network partition, s"),
)

DEFAULTS: dict[str, Any] = {
    "worker_count": 50,
    "dispatches_per_worker_hour": 2,
    "approval_wait_s": 900,
    "replica_lag_ms": 200,
    "volume_failures_per_worker_year": 2,
    "duplicate_cost_usd": 12000,
    "quorum_ack_ms": 6.5,
    "partition_lag_s": 60,
}

GRADED: dict[str, Tol] = {
    "lag_window_probability": Tol(abs=1e-12),
    "lag_window_failures_per_year": Tol(abs=1e-12),
    "lag_window_expected_loss_usd": Tol(abs=0.005),
    "partition_probability": Tol(abs=1e-12),
    "partition_failures_per_year": Tol(abs=1e-12),
    "partition_expected_loss_usd": Tol(abs=0.005),
    "quorum_latency_per_worker_day_ms": Tol(),
    "quorum_latency_fraction_of_approval_wait": Tol(abs=1e-15),
    "lag_window_recovery_state": Tol(),
}

VIOLATED_RULES = [
    "intent before effect under the declared failure domain (definition 11.2, eq. 1, table 2 row 3): a local "
    "fdatasync() shares the worker's volume, so an intent it acknowledges is lost with that volume; the async "
    "copy is not an acknowledgment",
    "the completeness rule (§11.3.3): a lagging replica is not a complete authoritative prefix, so a missing "
    "intent there does not show the change was never dispatched",
    "table 3 row 1: even a proven non-dispatch is re-admitted under current checks, never re-dispatched "
    "automatically",
    "settlement before retry (principle 8): an operation that may have begun is settled with the endpoint by its "
    "operation identity before any new attempt",
]

_W, _r, _L, _f, _C, _q, _A = sp.symbols("W r L f C q A", positive=True)


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, checked (ConfigError on a bad name, type or range)."""
    return validate(PARAMS, DEFAULTS, params)


def formulas() -> dict[str, sp.Expr]:
    """Closed forms: r per hour, L in seconds, f per worker-year, q in ms, A in seconds."""
    lam = _r / 3600                                   # dispatches per second per worker
    P = 1 - sp.exp(-lam * _L)                          # P(at least one Poisson dispatch in the window)
    return {
        "probability": P,
        "failures_per_year": _W * _f * P,
        "expected_loss": _W * _f * P * _C,
        "expected_duplicates": _W * _f * lam * _L,     # alternative: every dispatch in the window repeats
        "quorum_per_worker_day_ms": _q * _r * 24,
        "quorum_fraction_of_approval": (_q / 1000) / _A,
    }


def _window(p: Mapping[str, Any], lag_s: float) -> dict[str, float]:
    f = formulas()
    s = {_W: p["worker_count"], _r: sp.Rational(exact(p["dispatches_per_worker_hour"])), _L: sp.Rational(exact(lag_s)),
         _f: sp.Rational(exact(p["volume_failures_per_worker_year"])), _C: sp.Rational(exact(p["duplicate_cost_usd"]))}
    P = float(f["probability"].subs(s).evalf(30))
    fails = float(f["failures_per_year"].subs(s).evalf(30))
    dup = float(f["expected_duplicates"].subs(s).evalf(30))
    return {"probability": P, "failures_per_year": fails,
            "expected_loss_usd": float(f["expected_loss"].subs(s).evalf(30)),
            "expected_duplicates_per_year": dup,
            "expected_duplicates_loss_usd": dup * p["duplicate_cost_usd"]}


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity §11.12 exercise 8 asks for, and the redesign (table 2, table 3, completeness rule)."""
    p = validate_params(params)
    lag = _window(p, p["replica_lag_ms"] / 1000)
    part = _window(p, p["partition_lag_s"])
    f = formulas()
    s = {_q: sp.Rational(exact(p["quorum_ack_ms"])), _r: sp.Rational(exact(p["dispatches_per_worker_hour"])),
         _A: sp.Rational(exact(p["approval_wait_s"]))}
    per_day = float(f["quorum_per_worker_day_ms"].subs(s))
    frac = float(f["quorum_fraction_of_approval"].subs(s))
    out: dict[str, Any] = {
        "exercise": EXERCISE,
        "violated_rules": VIOLATED_RULES,
        "lag_window_recovery_state": "in_doubt",
        "fleet_volume_failures_per_year": p["worker_count"] * p["volume_failures_per_worker_year"],
        "lag_window_probability": lag["probability"],
        "lag_window_failures_per_year": lag["failures_per_year"],
        "lag_window_expected_loss_usd": lag["expected_loss_usd"],
        "partition_probability": part["probability"],
        "partition_failures_per_year": part["failures_per_year"],
        "partition_expected_loss_usd": part["expected_loss_usd"],
        "partition_to_lag_loss_ratio": (part["expected_loss_usd"] / lag["expected_loss_usd"]
                                        if lag["expected_loss_usd"] else None),
        "quorum_latency_per_worker_day_ms": per_day,
        "quorum_latency_fraction_of_approval_wait": frac,
        "decision": "quorum_ack_and_in_doubt_recovery",
        "decision_text": (
            f"Across {p['worker_count']} workers the {p['replica_lag_ms']:g} ms lag window costs about "
            f"${lag['expected_loss_usd']:,.2f}/year ({lag['failures_per_year']:.4g} failures land in it), but a "
            f"{p['partition_lag_s']:g} s partition raises that to ${part['expected_loss_usd']:,.0f}/year "
            f"({part['failures_per_year']:.4g} failures): the exposure is set by the lag, which the design does not "
            f"bound, not by the typical case. The quorum costs {per_day:g} ms per worker-day, {frac:.2e} of an "
            f"approval wait per change. Redesign: acknowledge each intent from a quorum outside the worker's volume "
            f"before dispatch; on recovery read only the authoritative store (hold, do not fall back to a lagging "
            f"replica, if it is unreachable); mark every approved proposal with an intent but no outcome evidence "
            f"in doubt, reconcile it with the endpoint by operation id before any retry, and re-admit proposals "
            f"without an intent under current checks instead of dispatching them automatically. For an "
            f"irreversible actor the target is a correctness rule (no phantom or duplicate effect under the "
            f"declared failure domain), not the expected dollar loss at the typical lag nor the milliseconds of "
            f"acknowledgment, which are negligible beside the approval wait."),
        "reading": {
            "probability": "a failure causes a duplicate when at least one dispatch happened in the lag window "
                           "before it: P = 1 - exp(-λL) for Poisson dispatches; each such failure counted as one "
                           "duplicate change. Alternative: count every dispatch in the window as a duplicate, "
                           "expected W·f·λ·L per year (the two agree to first order for small λL).",
            "quorum_latency": "the quorum acknowledgment's full time is charged (the local fdatasync time it "
                              "replaces is not given); per worker-day = q × dispatches per day.",
        },
        "alternative": {
            "lag_window_expected_duplicates_per_year": lag["expected_duplicates_per_year"],
            "lag_window_expected_duplicates_loss_usd": lag["expected_duplicates_loss_usd"],
            "partition_expected_duplicates_per_year": part["expected_duplicates_per_year"],
            "partition_expected_duplicates_loss_usd": part["expected_duplicates_loss_usd"],
        },
    }
    return jsonable(out)


#: Alternative answers filed under other names: key in ``solve()["alternative"]`` -> (reading, graded quantity).
#: The alternative reading counts every dispatch in the window as a duplicate, not each failure once.
ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {
    "lag_window_expected_duplicates_per_year": ("every_dispatch_in_window", "lag_window_failures_per_year"),
    "lag_window_expected_duplicates_loss_usd": ("every_dispatch_in_window", "lag_window_expected_loss_usd"),
    "partition_expected_duplicates_per_year": ("every_dispatch_in_window", "partition_failures_per_year"),
    "partition_expected_duplicates_loss_usd": ("every_dispatch_in_window", "partition_expected_loss_usd"),
}


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve` (tolerances in ``GRADED``: 1 % relative, else exact)."""
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: fleet size, dispatch rate, lags, failure rate and damage perturbed."""
    rng = random.Random(f"ex11.8:{seed}")
    return {
        "worker_count": rng.randrange(10, 501, 10),
        "dispatches_per_worker_hour": rng.choice([0.5, 1, 2, 3, 4, 6]),
        "approval_wait_s": rng.choice([300, 600, 900, 1800, 3600]),
        "replica_lag_ms": rng.choice([50, 100, 200, 500, 1000]),
        "volume_failures_per_worker_year": rng.choice([0.5, 1, 2, 4]),
        "duplicate_cost_usd": rng.randrange(1000, 50_001, 500),
        "quorum_ack_ms": round(rng.uniform(2.0, 15.0), 1),
        "partition_lag_s": rng.choice([10, 30, 60, 120, 300]),
    }
