"""§11.12 exercise 1, "Pricing the durable acknowledgment" (Basic).

Uses §11.3.1 table 2 (which acknowledgment survives which failure domain), definition 11.2
(durable intent: acknowledged by storage outside the declared failure domain before dispatch) and
footnote 3 (a majority quorum survives the loss of a minority of replicas, and only of failures
the replicas do not share).

Givens (papermill names): ``dispatch_count`` tool dispatches, one per turn, each turn otherwise
spending ``work_per_turn_s`` on model and tool work; acknowledgment latencies ``write_ack_ms``
(returned write()) and ``fdatasync_ack_ms`` (returned fdatasync()); ``replica_durable_ms`` the time
at which each replica of the replicated store holds the record durably, measured from the append;
``colocated_replica_index`` the replica that lives on the worker's own volume;
``required_offvolume_copies`` the placement policy's count of durable copies off that volume.

Derivation (sympy, see :func:`formulas`): the acknowledgment under the placement policy is the
``required_offvolume_copies``-th smallest durability time among the off-volume replicas; an
ordinary majority commits at the ⌊n/2⌋+1-th smallest time among all replicas. With per-dispatch
acknowledgment ``a`` and turn work ``w``, the trajectory lasts ``N (w + a)`` and the acknowledgment's
share of it is ``a / (w + a)``.
"""

from __future__ import annotations

import functools
import random
from typing import Any, Mapping

import sympy as sp

from kernel_lib.course.exercises._common import Param, Tol, exact, grade, jsonable, validate

EXERCISE = "11.1"
TITLE = "Pricing the durable acknowledgment"

PARAMS = (
    Param("dispatch_count", int, 1, 100_000, "tool dispatches in the trajectory, one per turn"),
    Param("work_per_turn_s", float, 1e-3, 3600.0, "model and tool work per turn, seconds"),
    Param("write_ack_ms", float, 0.0, 1000.0, "latency of a returned write(), ms"),
    Param("fdatasync_ack_ms", float, 0.0, 1000.0, "latency of a returned fdatasync(), ms"),
    Param("replica_durable_ms", list, 0.0, 60_000.0,
          "time from the append until each replica holds the record durably, ms", min_len=2, max_len=9),
    Param("colocated_replica_index", int, 0, 8, "index of the replica kept on the worker's own volume"),
    Param("required_offvolume_copies", int, 1, 8, "durable copies outside the worker volume required before dispatch"),
)

DEFAULTS: dict[str, Any] = {
    "dispatch_count": 40,
    "work_per_turn_s": 4.0,
    "write_ack_ms": 0.02,
    "fdatasync_ack_ms": 0.4,
    "replica_durable_ms": [1.5, 2.5, 6.5],
    "colocated_replica_index": 0,
    "required_offvolume_copies": 2,
}

GRADED: dict[str, Tol] = {
    "process_crash_ack_ms": Tol(),
    "host_crash_ack_ms": Tol(),
    "required_replica_indices": Tol(),
    "placement_ack_ms": Tol(),
    "placement_ack_fraction": Tol(rel=0.01),
    "majority_ack_ms": Tol(),
    "majority_saving_per_dispatch_ms": Tol(abs=1e-9),
    "majority_saving_per_trajectory_ms": Tol(abs=1e-6),
    "majority_offvolume_copies": Tol(),
    "majority_survives_worker_volume_loss": Tol(),
    "majority_satisfies_contract": Tol(),
}


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, checked (ConfigError on a bad name, type or range)."""
    from kernel_lib.errors import ConfigError
    p = validate(PARAMS, DEFAULTS, params)
    n = len(p["replica_durable_ms"])
    if p["colocated_replica_index"] >= n:
        raise ConfigError(f"colocated_replica_index must name one of the {n} replicas (0..{n - 1}), "
                          f"got {p['colocated_replica_index']}")
    if p["required_offvolume_copies"] > n - 1:
        raise ConfigError(f"required_offvolume_copies must be at most the {n - 1} off-volume replicas, "
                          f"got {p['required_offvolume_copies']}")
    return p


def formulas() -> dict[str, sp.Expr]:
    """The closed forms used: per-trajectory acknowledgment time, elapsed time, and shares."""
    return dict(_formulas())


@functools.cache
def _formulas() -> dict[str, sp.Expr]:
    # derived once per process (sympy's simplify is most of a solve's time)
    N, w, a, m = sp.symbols("N w_turn a_ack a_majority", positive=True)
    elapsed = N * (w + a)
    return {
        "ack_per_trajectory": N * a,
        "elapsed": elapsed,
        "ack_fraction": sp.simplify(N * a / elapsed),           # a / (w + a)
        "ack_fraction_of_work": sp.simplify(N * a / (N * w)),    # a / w (alternative reading)
        "saving_per_trajectory": sp.expand(N * (a - m)),
    }


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity §11.12 exercise 1 asks for, and its decision (table 2, def. 11.2, footnote 3).

    Times in ms unless the name says otherwise; indices refer to ``replica_durable_ms``.
    """
    p = validate_params(params)
    t = p["replica_durable_ms"]
    n = len(t)
    colo = p["colocated_replica_index"]
    k = p["required_offvolume_copies"]
    order = sorted(range(n), key=lambda i: (t[i], i))
    off = [i for i in order if i != colo]
    required = sorted(off[:k])
    placement_ack = max(t[i] for i in required)
    quorum = n // 2 + 1
    majority = sorted(order[:quorum])
    majority_ack = max(t[i] for i in majority)
    majority_off = sum(1 for i in majority if i != colo)

    f = formulas()
    N, w, a, m = sp.symbols("N w_turn a_ack a_majority", positive=True)
    subs = {N: p["dispatch_count"], w: sp.Rational(exact(p["work_per_turn_s"])) * 1000,
            a: sp.Rational(exact(placement_ack)), m: sp.Rational(exact(majority_ack))}
    val = {name: float(expr.subs(subs)) for name, expr in f.items()}

    satisfies = majority_off >= k
    out = {
        "exercise": EXERCISE,
        "process_crash_ack_ms": p["write_ack_ms"],
        "host_crash_ack_ms": p["fdatasync_ack_ms"],
        "offvolume_replica_indices": sorted(off),
        "required_replica_indices": required,
        "placement_ack_ms": placement_ack,
        "placement_ack_per_trajectory_ms": val["ack_per_trajectory"],
        "trajectory_elapsed_s": val["elapsed"] / 1000,
        "placement_ack_fraction": val["ack_fraction"],
        "majority_quorum_size": quorum,
        "majority_replica_indices": majority,
        "majority_ack_ms": majority_ack,
        "majority_saving_per_dispatch_ms": placement_ack - majority_ack,
        "majority_saving_per_trajectory_ms": val["saving_per_trajectory"],
        "majority_offvolume_copies": majority_off,
        "majority_survives_worker_volume_loss": majority_off >= 1,
        "majority_satisfies_contract": satisfies,
        "decision": "adopt" if satisfies else "reject",
        "decision_text": (
            f"Table 2 row 1 (process crash) is met by the returned write() at {p['write_ack_ms']:g} ms and row 2 "
            f"(power loss, volume intact) by the returned fdatasync() at {p['fdatasync_ack_ms']:g} ms. The placement "
            f"policy needs replicas {required} (the {k} fastest off the worker volume), so dispatch waits "
            f"{placement_ack:g} ms, {val['ack_fraction']:.4%} of the trajectory. A majority of {quorum} "
            f"(replicas {majority}) acknowledges at {majority_ack:g} ms, "
            f"saving {placement_ack - majority_ack:g} ms per "
            f"dispatch, but holds only {majority_off} off-volume cop{'y' if majority_off == 1 else 'ies'} at that "
            f"moment: it {'survives' if majority_off >= 1 else 'does not survive'} the loss of the worker volume "
            f"alone, and it {'meets' if satisfies else 'does not meet'} the chosen policy of {k} off-volume copies. "
            + ("Adopt it: the contract still holds." if satisfies else
               "Reject it: the saving is bought by weakening the declared contract, which only a deliberate "
               "contract change (not a latency tweak) could allow.")),
        "reading": {
            "placement_ack_fraction": "share of the whole elapsed trajectory, N(w+a), that the N acknowledgments "
                                      "occupy: a/(w+a). Alternative: relative to the work alone, a/w.",
            "majority": "an ordinary majority commits when the fastest ⌊n/2⌋+1 replicas hold the record; with "
                        "the co-located replica the fastest this is the colleague's 'co-located plus one off-volume'.",
        },
        "alternative": {"placement_ack_fraction_of_work": val["ack_fraction_of_work"]},
    }
    return jsonable(out)


#: Alternative answers filed under other names: key in ``solve()["alternative"]`` -> (reading, graded quantity).
ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {
    "placement_ack_fraction_of_work": ("share_of_work", "placement_ack_fraction"),
}


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve` (tolerances in ``GRADED``: 1 % relative, else exact)."""
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: three or five replicas, the co-located one the fastest (a local disk)."""
    rng = random.Random(f"ex11.1:{seed}")
    n = rng.choice([3, 3, 3, 5])
    local = round(rng.uniform(0.5, 2.0), 1)
    others = sorted(round(local + rng.uniform(0.5, 12.0), 1) for _ in range(n - 1))
    colo = rng.randrange(n)
    replicas = others[:]
    replicas.insert(colo, local)
    return {
        "dispatch_count": rng.randrange(10, 201, 5),
        "work_per_turn_s": round(rng.uniform(0.5, 20.0), 1),
        "write_ack_ms": round(rng.uniform(0.005, 0.1), 3),
        "fdatasync_ack_ms": round(rng.uniform(0.1, 3.0), 2),
        "replica_durable_ms": replicas,
        "colocated_replica_index": colo,
        "required_offvolume_copies": rng.randint(2, n - 1 if n == 3 else n - 2),
    }
