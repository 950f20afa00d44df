"""Symbolic derivations behind the cadence formulas (§11.4.3 theorem 11.1, eq. 3-5; §11.12 ex. 9).

Every closed form that :mod:`kernel_lib.cadence.formulas` evaluates numerically is derived here,
once, with sympy, from the expected-overhead expression it minimizes:

* ``young``: fraction of useful time lost, ``C/tau + tau/(2 M)`` for an interval ``tau`` between
  checkpoints, pause ``C`` and mean time between work-losing failures ``M`` (theorem 11.1, eq. 4).
* ``logged_stride``: seconds lost per completed turn, ``C/k + lam R k/2`` for a stride of ``k``
  turns, crash rate ``lam`` per turn and reconstruction cost ``R`` per logged turn (eq. 5).
* ``unlogged_stride``: the same balance with the re-execution cost ``Re`` of an unlogged turn.
* ``trace_expectation``: the expectation of eq. 6 over a Poisson crash trace of ``N`` turns
  (continuous approximation: a crash loses ``k/2`` turns on average), including the per-crash
  restore time ``T``, which does not move the optimum.
* ``discrete_trace_expectation``: the same with whole turns, where the lost suffix is uniform on
  ``0..k-1`` and so averages ``(k-1)/2``: the optimum is again unchanged.
* ``consolidation``: seconds lost per checkpoint in §11.12 exercise 9, ``P/m + p (B + d m/2)`` for
  consolidating every ``m`` checkpoints (pause ``P``, restore probability ``p`` per checkpoint
  interval, base read ``B``, per-delta apply ``d``).

Each balance has the form ``a/x + b x + c``. :func:`derive_balance` differentiates, solves for the
positive root, checks the second derivative there, and simplifies the *flat-minimum factor*: the
variable part of the overhead at ``x`` times the optimum, over its value at the optimum, which
comes out as ``(x + 1/x)/2`` for every balance.

Equation 3 (write volume of full vs incremental snapshots) is a summation rather than a balance;
:func:`snapshot_volumes` evaluates it symbolically.

:func:`derive` returns all of it (cached); :func:`numeric` lambdifies an expression;
:func:`check_numeric` compares the hand-written numeric functions of :mod:`.formulas` with the
lambdified sympy results at sample points (the test suite does the same with hypothesis).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy as sp

# --- symbols (all positive reals) ---------------------------------------------------------------
C, M, tau = sp.symbols("C M tau", positive=True)                 # pause s, MTBF s, interval s
lam, R, Re, k = sp.symbols("lambda R R_e k", positive=True)      # per turn, s/turn, s/turn, turns
N, T = sp.symbols("N T", positive=True)                          # turns in run, restore s/crash
P, p, B, d, m = sp.symbols("P p B d m", positive=True)           # exercise 9
g, n, i = sp.symbols("g n i", positive=True, integer=True)      # eq. 3
x = sp.symbols("x", positive=True)                               # miss factor (multiple of optimum)


@dataclass(frozen=True)
class Balance:
    """One derived balance ``overhead(variable) = a/variable + b*variable + c``.

    Fields:
        name: key in :func:`derive`.
        variable: the symbol being chosen (interval, stride, consolidation stride).
        overhead: the expected-overhead expression.
        constant: the part of ``overhead`` that does not depend on ``variable``.
        derivative: d overhead / d variable.
        optimum: the positive root of the derivative (the minimizer).
        minimum: overhead at the optimum.
        curvature: second derivative at the optimum (positive: a minimum).
        flat_factor: (overhead(x*optimum) - constant) / (minimum - constant), simplified.
    """

    name: str
    variable: sp.Symbol
    overhead: sp.Expr
    constant: sp.Expr
    derivative: sp.Expr
    optimum: sp.Expr
    minimum: sp.Expr
    curvature: sp.Expr
    flat_factor: sp.Expr

    def to_dict(self) -> dict[str, str]:
        return {"variable": str(self.variable), "overhead": str(self.overhead), "derivative": str(self.derivative),
                "optimum": str(self.optimum), "minimum": str(self.minimum), "curvature": str(self.curvature),
                "flat_factor": str(self.flat_factor)}


def derive_balance(name: str, variable: sp.Symbol, overhead: sp.Expr) -> Balance:
    """Differentiate ``overhead`` in ``variable``, solve for the single positive stationary point,
    confirm it is a minimum, and simplify the flat-minimum factor.

    Raises:
        ValueError: the derivative has no single positive root, or the root is not a minimum.
    """
    deriv = sp.diff(overhead, variable)
    roots = [r for r in sp.solve(sp.Eq(deriv, 0), variable) if r.is_positive is not False]
    if len(roots) != 1:
        raise ValueError(f"{name}: expected one positive stationary point, found {roots}")
    opt = sp.simplify(roots[0])
    curvature = sp.simplify(sp.diff(overhead, variable, 2).subs(variable, opt))
    if curvature.is_positive is not True:
        raise ValueError(f"{name}: the stationary point {opt} is not a minimum (curvature {curvature})")
    minimum = sp.simplify(overhead.subs(variable, opt))
    constant = sp.Add(*[t for t in sp.Add.make_args(sp.expand(overhead)) if not t.has(variable)])
    flat = sp.simplify(sp.factor((overhead.subs(variable, x * opt) - constant) / (minimum - constant)))
    return Balance(name, variable, overhead, constant, deriv, opt, minimum, curvature, flat)


@dataclass(frozen=True)
class SnapshotVolumes:
    """Equation 3 as sympy expressions in ``g`` (bytes per turn), ``k`` (stride) and ``n``
    (checkpoints): full = sum_{i=1..n} i g k, incremental = sum_{i=1..n} g k, and their ratio."""

    full: sp.Expr
    incremental: sp.Expr
    ratio: sp.Expr

    def to_dict(self) -> dict[str, str]:
        return {"full": str(self.full), "incremental": str(self.incremental), "ratio": str(self.ratio)}


def snapshot_volumes() -> SnapshotVolumes:
    """Equation 3: the i-th full snapshot rewrites all ``i g k`` bytes accumulated so far; the
    i-th delta writes only the ``g k`` bytes of its own stride."""
    full = sp.factor(sp.summation(i * g * k, (i, 1, n)))
    incr = sp.factor(sp.summation(g * k, (i, 1, n)))
    return SnapshotVolumes(full, incr, sp.simplify(full / incr))


@dataclass(frozen=True)
class Derivations:
    """Everything derived: the balances by name, eq. 3, and the logging gain."""

    balances: dict[str, Balance]
    snapshot: SnapshotVolumes
    logging_gain: sp.Expr            # logged optimum / unlogged optimum = sqrt(Re/R)
    worst_case_restore: sp.Expr      # exercise 9: B + d m
    deadline_stride: sp.Expr         # exercise 9: largest real m with B + d m <= D

    def __getitem__(self, name: str) -> Balance:
        return self.balances[name]

    def to_dict(self) -> dict[str, Any]:
        return {"balances": {k_: b.to_dict() for k_, b in self.balances.items()},
                "eq3_snapshot_volumes": self.snapshot.to_dict(), "logging_gain": str(self.logging_gain),
                "worst_case_restore": str(self.worst_case_restore), "deadline_stride": str(self.deadline_stride)}


D = sp.symbols("D", positive=True)   # exercise 9: restore deadline, s


@functools.lru_cache(maxsize=1)
def derive() -> Derivations:
    """Derive every balance once (cached; about a second of sympy on first call)."""
    balances = {
        "young": derive_balance("young", tau, C / tau + tau / (2 * M)),
        "logged_stride": derive_balance("logged_stride", k, C / k + lam * R * k / 2),
        "unlogged_stride": derive_balance("unlogged_stride", k, C / k + lam * Re * k / 2),
        "trace_expectation": derive_balance("trace_expectation", k,
                                            (N / k) * C + lam * N * T + lam * N * R * k / 2),
        "discrete_trace_expectation": derive_balance("discrete_trace_expectation", k,
                                                     (N / k) * C + lam * N * (T + R * (k - 1) / 2)),
        "consolidation": derive_balance("consolidation", m, P / m + p * (B + d * m / 2)),
    }
    # how much logging lengthens the best stride: the logged optimum over the unlogged one
    gain = sp.simplify(balances["logged_stride"].optimum / balances["unlogged_stride"].optimum)
    worst = B + d * m
    deadline = sp.solve(sp.Eq(worst, D), m)[0]
    return Derivations(balances, snapshot_volumes(), gain, worst, sp.simplify(deadline))


def numeric(expr: sp.Expr, *symbols: sp.Symbol) -> Callable[..., float]:
    """``expr`` as a plain-math Python function of ``symbols`` (sympy.lambdify, module math)."""
    return sp.lambdify(symbols, expr, modules="math")


def check_numeric(rel_tol: float = 1e-12) -> list[dict[str, Any]]:
    """Compare each numeric function of :mod:`kernel_lib.cadence.formulas` with the lambdified
    sympy result at a few sample points. Returns one row per comparison with ``ok``.

    Raises nothing; a mismatch shows as ``ok: False``.
    """
    import kernel_lib.cadence.formulas as f

    dv = derive()
    rows: list[dict[str, Any]] = []

    def row(what: str, ours: float, sym: float) -> None:
        rows.append({"quantity": what, "numeric": ours, "sympy": sym,
                     "ok": math.isclose(ours, sym, rel_tol=rel_tol, abs_tol=1e-300)})

    for c_, m_ in ((2.0, 600.0), (3.0, 1800.0), (0.01, 1e6)):
        row(f"young interval C={c_} M={m_}", f.young_interval_s(c_, m_),
            numeric(dv["young"].optimum, C, M)(c_, m_))
        row(f"young overhead at optimum C={c_} M={m_}", f.young_optimal_overhead_fraction(c_, m_),
            numeric(dv["young"].minimum, C, M)(c_, m_))
    for c_, l_, r_ in ((0.5, 0.02, 0.1), (0.8, 0.01, 0.05), (0.8, 0.01, 12.0)):
        row(f"logged stride C={c_} lam={l_} R={r_}", f.logged_stride_turns(c_, l_, r_),
            numeric(dv["logged_stride"].optimum, C, lam, R)(c_, l_, r_))
        row(f"overhead per turn at optimum C={c_} lam={l_} R={r_}", f.optimal_stride_overhead_s_per_turn(c_, l_, r_),
            numeric(dv["logged_stride"].minimum, C, lam, R)(c_, l_, r_))
        row(f"unlogged stride C={c_} lam={l_} Re={r_}", f.unlogged_stride_turns(c_, l_, r_),
            numeric(dv["unlogged_stride"].optimum, C, lam, Re)(c_, l_, r_))
    row("logging gain R=0.1 Re=20", f.logging_stride_gain(0.1, 20.0), numeric(dv.logging_gain, R, Re)(0.1, 20.0))
    for x_ in (0.1, 0.5, 2.0, 10.0):
        for name in ("young", "logged_stride", "consolidation"):
            row(f"flat factor {name} x={x_}", f.flat_minimum_factor(x_), numeric(dv[name].flat_factor, x)(x_))
    args = (1.0, 0.005, 0.2, 0.04)   # P, p, B, d of exercise 9
    row("consolidation optimum (ex. 9)", f.consolidation_optimal_stride(*args),
        numeric(dv["consolidation"].optimum, P, p, B, d)(*args))
    row("consolidation minimum (ex. 9)", f.consolidation_overhead_s(f.consolidation_optimal_stride(*args), *args),
        numeric(dv["consolidation"].minimum, P, p, B, d)(*args))
    g_, k_, n_ = 128_000, 5, 100
    vol = f.snapshot_write_volumes(g_, k_, n_)
    row("eq. 3 full bytes", vol.full_bytes, numeric(dv.snapshot.full, g, k, n)(g_, k_, n_))
    row("eq. 3 incremental bytes", vol.incremental_bytes, numeric(dv.snapshot.incremental, g, k, n)(g_, k_, n_))
    row("eq. 3 ratio", vol.ratio, numeric(dv.snapshot.ratio, n)(n_))
    return rows
