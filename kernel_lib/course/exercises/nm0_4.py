"""Failure Recovery, Napkin Math 0.4, "Bulkhead capacity and jitter under RPC stress", as a seeded exercise (nm0.4).

Source: the Failure Recovery chapter, "Tool Circuit Breakers" (figure 4 panel (b), "Jittered backoff
protocols" with the full-jitter formula t_wait(k) ~ U(0, min(T_max, T_0·2^k))) and the worked block
Napkin Math 0.4 that follows it: agents blocked on an index that times out, sharing one worker pool,
then retrying with deterministic or with full-jitter backoff.

Givens (papermill names): ``agents`` N trajectories, each holding one call to the failing index;
``pool_threads`` M worker threads shared by every tool; ``timeout_ms`` T the client timeout that
ends each blocked call; ``base_ms`` T_0 and ``cap_ms`` T_max of the backoff; ``failing_agents`` F
agents whose first attempt failed together at t0 (their calls dispatched at t0 and timed out at
t0 + T); ``dispatch_jitter_ms`` d the operating system's dispatch jitter, also the width of the bins
in which arrivals are counted; ``retry_attempt`` k, the retry's exponent (the block's first retry is
k = 1).

Step 1, the pool (sympy, :func:`formulas`): min(N, M) threads block for T; M − N are left. The
pool is full only when N ≥ M; then the queued calls take the threads in waves of M, and the pool
stays full for ⌊N/M⌋·T. With N < M the stated load leaves the pool short of full: exhausting it
takes M − N more calls that also block, and only a stream of them faster than (M − N)/T arrives
before the agents' calls time out (:func:`exhaust_time_ms` gives the time at a stated rate). The
chapter's "t_exhaust < 200 ms" and 4,800 ms frozen window assume 44 such calls within one more
decode step: a load the givens do not state (alternative ``chapter_secondary_burst``).

Step 2, the retries: deterministic backoff wakes every failing agent at t0 + T + T_0·2^k, within
one dispatch window, a peak of F/d; full jitter spreads them uniformly over W = min(T_max, T_0·2^k),
a mean of F/W. The reduction of peak over mean is W/d, whatever F. The mean is not the peak of the
jittered arrivals: counted in bins of width d the busiest bin holds more than F·d/W; its expectation
is computed exactly (:func:`expected_max_bin_count`, a multinomial maximum by Levin's Poisson
representation) and compared with independent Poisson bins (alternative ``independent_poisson_bins``).

Other readings, graded ``alternative``: ``zero_indexed_k`` (the text calls k zero-indexed, so the
first retry would be k = 0: the given minus one); ``capped_deterministic`` (the deterministic wait
truncated at T_max like the jittered one; the block writes it without the cap). A seeded simulation
of the same retries (:mod:`kernel_lib.sim.herd`) is drawn beside the answers in the notebook.
"""

from __future__ import annotations

import functools
import math
import random
from typing import Any, Mapping

import sympy as sp

from kernel_lib.course.exercises._common import Param, Tol, exact, grade, jsonable, validate
from kernel_lib.errors import ConfigError

EXERCISE = "nm0.4"
TITLE = "Bulkhead capacity and jitter under RPC stress"

PARAMS = (
    Param("agents", int, 1, 1_000_000, "agent trajectories N, each blocked on one call to the failing index"),
    Param("pool_threads", int, 1, 1_000_000, "worker threads M in the one pool every tool shares"),
    Param("timeout_ms", float, 0.001, 1e7, "client timeout T that ends each blocked call, ms"),
    Param("base_ms", float, 0.001, 1e7, "backoff base slot T_0, ms"),
    Param("cap_ms", float, 0.001, 1e8, "backoff ceiling T_max, ms"),
    Param("failing_agents", int, 1, 1_000_000, "agents F whose first attempt failed together at t0"),
    Param("dispatch_jitter_ms", float, 0.001, 1e6, "OS dispatch jitter d (and the width of the counting bins), ms"),
    Param("retry_attempt", int, 0, 60, "the retry's exponent k (the block's first retry is k = 1)"),
)

DEFAULTS: dict[str, Any] = {
    "agents": 256,
    "pool_threads": 300,
    "timeout_ms": 5000.0,
    "base_ms": 1000.0,
    "cap_ms": 30000.0,
    "failing_agents": 128,
    "dispatch_jitter_ms": 2.0,
    "retry_attempt": 1,
}

GRADED: dict[str, Tol] = {
    "blocked_threads": Tol(),
    "free_threads": Tol(),
    "pool_exhausted_by_agents": Tol(),
    "frozen_window_ms": Tol(),
    "min_secondary_rate_to_exhaust_per_s": Tol(abs=1e-9),
    "deterministic_wait_ms": Tol(),
    "deterministic_wake_ms": Tol(),
    "deterministic_peak_rate_per_s": Tol(),
    "jitter_window_ms": Tol(),
    "jitter_mean_rate_per_s": Tol(),
    "peak_reduction": Tol(),
    "jitter_expected_peak_rate_per_s": Tol(),
}

#: What the block prints for its own assumptions that are not among the givens (typed from the text
#: only to show them beside what follows): the agents' first calls are all blocked within one
#: decode step of < 100 ms, and the pool is exhausted before 200 ms.
CHAPTER_DECODE_STEP_MS = 100.0
CHAPTER_EXHAUST_MS = 200.0


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, each coerced and range-checked.

    Raises ConfigError naming the parameter on an unknown name, a wrong type, a value out of its
    range, or more ``failing_agents`` than ``agents``.
    """
    p = validate(PARAMS, DEFAULTS, params)
    if p["failing_agents"] > p["agents"]:
        raise ConfigError(f"failing_agents {p['failing_agents']} is more than agents {p['agents']}")
    return p


#: The symbols of :func:`formulas`, in this order.
SYMBOLS = sp.symbols("N M T T_0 T_max F d k", positive=True)


@functools.lru_cache(maxsize=1)
def formulas() -> dict[str, sp.Expr]:
    """The closed forms (sympy) in N (agents), M (pool threads), T (timeout, ms), T_0 and T_max
    (backoff base and cap, ms), F (failing agents), d (dispatch jitter, ms), k (retry exponent).

    Rates are per second (the ms givens divided by 1000). The expected busiest bin of the jittered
    arrivals has no closed form; :func:`expected_max_bin_count` computes it.
    """
    N, M, T, T0, Tmax, F, d, k = SYMBOLS
    blocked = sp.Min(N, M)
    out: dict[str, sp.Expr] = {
        "blocked_threads": blocked,
        "free_threads": M - blocked,
        "queued_agents": N - blocked,
        # the pool is full while at least M calls are left: waves of M calls, each blocked for T
        "frozen_window_ms": sp.floor(N / M) * T,
        # extra blocking calls (each held for T) must come faster than the free threads / T
        "min_secondary_rate_to_exhaust_per_s": (M - blocked) / (T / 1000),
    }
    wait = T0 * 2**k
    window = sp.Min(Tmax, T0 * 2**k)
    out["deterministic_wait_ms"] = wait
    out["deterministic_wake_ms"] = T + wait
    out["deterministic_peak_rate_per_s"] = F / (d / 1000)
    out["jitter_window_ms"] = window
    out["jitter_mean_rate_per_s"] = F / (window / 1000)
    out["peak_reduction"] = sp.simplify(out["deterministic_peak_rate_per_s"] / out["jitter_mean_rate_per_s"])
    out["jitter_bins"] = window / d
    # capped_deterministic: the deterministic wait truncated like the jittered one
    out["capped_deterministic_wait_ms"] = window
    out["capped_deterministic_wake_ms"] = T + window
    return out


def _rational(x: float | int) -> sp.Rational:
    f = exact(x)
    return sp.Rational(f.numerator, f.denominator)


def substitutions(params: Mapping[str, Any] | None = None, k_offset: int = 0) -> dict[sp.Symbol, sp.Rational]:
    """``{symbol: exact value}`` for the symbols of :func:`formulas`, from the givens (validated
    first: ConfigError on bad ones), decimals taken as typed. ``k_offset`` shifts the exponent (−1:
    the ``zero_indexed_k`` reading)."""
    p = validate_params(params)
    names = ("agents", "pool_threads", "timeout_ms", "base_ms", "cap_ms", "failing_agents", "dispatch_jitter_ms")
    subs = {sym: _rational(p[name]) for sym, name in zip(SYMBOLS, names)}
    subs[SYMBOLS[7]] = sp.Integer(p["retry_attempt"] + k_offset)
    return subs


def _values(p: Mapping[str, Any], k_offset: int = 0) -> dict[str, sp.Expr]:
    subs = substitutions(p, k_offset)
    return {name: expr.xreplace(subs) for name, expr in formulas().items()}


# --- the busiest bin of the jittered arrivals ----------------------------------------------------------


def _bins(window_ms: float, bin_ms: float) -> tuple[int, float]:
    """``(full, partial_share)``: full bins of width ``bin_ms`` in the window, and the last partial
    bin's width as a share of a full one (0 when the bins tile the window)."""
    ratio = exact(window_ms) / exact(bin_ms)
    full = int(ratio)       # floor of a positive fraction
    return full, float(ratio - full)


def _truncated_poisson(lam: float, m: int) -> tuple[list[float], float]:
    """The Poisson(lam) pmf on 0..m conditioned on X <= m, and P(X <= m)."""
    w = [1.0]
    for j in range(1, m + 1):
        w.append(w[-1] * lam / j)
    total = math.fsum(w)
    return [x / total for x in w], math.exp(-lam) * total


def _sum_pmf(q: list[float], copies: int, n: int) -> tuple[list[float], float]:
    """The pmf of the sum of ``copies`` independent draws from ``q`` on 0..n, as ``(c, log_scale)``
    with pmf[i] = c[i]·exp(log_scale).

    With more copies than n, J. C. P. Miller's recurrence for the power of a polynomial, O(n·m): every
    term is then nonnegative, so it is stable (rescaled to stay finite). With fewer copies its terms
    alternate in sign and cancel, so the pmf is squared up by convolution instead (numpy), each step
    a pmf truncated at n: nonnegative throughout.
    """
    m = len(q) - 1
    if copies + 1 > n:
        c = [1.0] + [0.0] * n                       # relative to q_0^copies
        log_scale = copies * math.log(q[0])
        for i in range(1, n + 1):
            s = 0.0
            for j in range(1, min(i, m) + 1):
                s += ((copies + 1) * j - i) * q[j] * c[i - j]
            c[i] = s / (i * q[0])
            if c[i] > 1e250:
                c = [x * 1e-250 for x in c]
                log_scale += 250 * math.log(10)
        return c, log_scale
    import numpy as np

    result = np.zeros(n + 1)
    result[0] = 1.0
    base = np.zeros(n + 1)
    base[: m + 1] = q[: n + 1]
    k = copies
    while k:
        if k & 1:
            result = np.convolve(result, base)[: n + 1]
        k >>= 1
        if k:
            base = np.convolve(base, base)[: n + 1]
    return [float(x) for x in result], 0.0


def _p_max_at_most(n: int, full: int, partial: float, m: int) -> float:
    """P(no bin holds more than ``m``) when ``n`` arrivals fall uniformly at random into ``full``
    bins of width 1 and one of width ``partial`` (0: none).

    Levin (1981), "A representation for multinomial cumulative distribution functions": with
    independent X_i ~ Poisson(n·p_i), P(max ≤ m) = n!/(n^n e^−n) · Π P(X_i ≤ m) · P(Σ Y_i = n), the
    Y_i being X_i conditioned on X_i ≤ m. The pmf of the sum of the ``full`` identical Y_i comes from
    J. C. P. Miller's recurrence for the power of a polynomial (O(n·m)), rescaled to stay finite.
    """
    cells = full + partial
    if m >= n:
        return 1.0
    if m * (full + (1 if partial else 0)) < n:
        return 0.0                                  # pigeonhole: some bin holds more than m
    lam = n / cells
    q, g = _truncated_poisson(lam, m)
    log_total = full * math.log(g)
    c, log_scale = _sum_pmf(q, full, n)
    if partial:
        qp, gp = _truncated_poisson(n * partial / cells, m)
        log_total += math.log(gp)
        at_n = math.fsum(qp[j] * c[n - j] for j in range(min(m, n) + 1))
    else:
        at_n = c[n]
    if at_n <= 0.0:
        return 0.0
    log_p = math.lgamma(n + 1) + n - n * math.log(n) + log_total + math.log(at_n) + log_scale
    return min(1.0, math.exp(log_p))


def max_bin_count_cdf(arrivals: int, window_ms: float, bin_ms: float,
                      poisson_bins: bool = False) -> list[float]:
    """``[P(busiest bin ≤ m) for m = 0, 1, ...]`` up to the first m where it is 1 (to 1e-15), for
    ``arrivals`` drawn independently and uniformly over ``window_ms`` and counted in bins of
    ``bin_ms`` aligned at the window's start (the last bin partial when they do not tile it).

    ``poisson_bins``: each bin an independent Poisson count of the same mean (the approximation
    that ignores that the counts sum to ``arrivals``). Raises ConfigError for fewer than one
    arrival or a window or bin that is not positive.
    """
    if isinstance(arrivals, bool) or not isinstance(arrivals, int) or arrivals < 1:
        raise ConfigError(f"arrivals must be a positive integer, got {arrivals!r}")
    if not (window_ms > 0 and bin_ms > 0 and math.isfinite(window_ms) and math.isfinite(bin_ms)):
        raise ConfigError(f"window_ms and bin_ms must be positive, got {window_ms!r} and {bin_ms!r}")
    full, partial = _bins(window_ms, bin_ms)
    if full == 0:                                   # the whole window fits in one bin
        return [0.0] * arrivals + [1.0]
    cells = full + partial
    cdf: list[float] = []
    for m in range(arrivals + 1):
        # P(max > m) is at most the sum over the bins of P(that bin > m) (the union bound): it closes
        # the tail where the float representation of P(max <= m) cannot resolve 1 - P any more
        if poisson_bins:
            lam = arrivals / cells
            p = _truncated_poisson(lam, m)[1] ** full * (_truncated_poisson(lam * partial, m)[1] if partial else 1.0)
        elif m * (full + (1 if partial else 0)) < arrivals:
            p = 0.0                                 # pigeonhole: some bin holds more than m
        else:
            bound = min(1.0, full * _binomial_above(arrivals, 1 / cells, m)
                        + (_binomial_above(arrivals, partial / cells, m) if partial else 0.0))
            p = 1.0 - bound if bound < 1e-6 else max(_p_max_at_most(arrivals, full, partial, m), 1.0 - bound)
        if p >= 1.0 - 1e-15:
            cdf.append(1.0)
            break
        cdf.append(p)
    return cdf


def _binomial_above(n: int, p: float, m: int) -> float:
    """P(Binomial(n, p) > m), summed from the terms above m (exact up to float rounding)."""
    if m >= n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = []
    for j in range(m + 1, n + 1):
        t = math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_p + (n - j) * log_q)
        terms.append(t)
        if j > n * p and t < 1e-18 * max(terms):
            break
    return math.fsum(terms)


def expected_max_bin_count(arrivals: int, window_ms: float, bin_ms: float, poisson_bins: bool = False) -> float:
    """E[arrivals in the busiest bin] = Σ_m (1 − P(max ≤ m)), from :func:`max_bin_count_cdf` (same
    arguments, same errors)."""
    return math.fsum(1.0 - p for p in max_bin_count_cdf(arrivals, window_ms, bin_ms, poisson_bins))


def exhaust_time_ms(params: Mapping[str, Any] | None, secondary_calls_per_s: float) -> dict[str, Any]:
    """When the shared pool runs out if, besides the agents' blocked calls, other calls that also
    block for the timeout (a sub-task hitting the same index, a tool stuck behind it) arrive at
    ``secondary_calls_per_s`` from t0: ``{"secondary_calls_per_s", "calls_needed", "t_exhaust_ms",
    "frozen_window_ms", "exhausted_before_timeout"}``. Times from t0, when the agents' calls are in
    flight; ``t_exhaust_ms`` None when the pool is not exhausted before the agents' calls time out
    (the frozen window is then 0). Raises ConfigError for bad givens or a negative rate.
    """
    p = validate_params(params)
    if isinstance(secondary_calls_per_s, bool) or not isinstance(secondary_calls_per_s, (int, float)) \
            or not math.isfinite(secondary_calls_per_s) or secondary_calls_per_s < 0:
        raise ConfigError(f"secondary_calls_per_s must be a finite number >= 0, got {secondary_calls_per_s!r}")
    free = max(0, p["pool_threads"] - p["agents"])
    if free == 0:                   # the agents fill the pool themselves: waves of M calls, each held for T
        return {"secondary_calls_per_s": float(secondary_calls_per_s), "calls_needed": 0, "t_exhaust_ms": 0.0,
                "frozen_window_ms": float(p["agents"] // p["pool_threads"]) * p["timeout_ms"],
                "exhausted_before_timeout": True}
    t = free / secondary_calls_per_s * 1000.0 if secondary_calls_per_s else math.inf
    before = t < p["timeout_ms"]
    return {"secondary_calls_per_s": float(secondary_calls_per_s), "calls_needed": free,
            "t_exhaust_ms": t if before else None, "frozen_window_ms": p["timeout_ms"] - t if before else 0.0,
            "exhausted_before_timeout": before}


def _number(name: str, x: sp.Expr) -> int | float | bool:
    if name in ("blocked_threads", "free_threads", "queued_agents"):
        return int(x)
    return float(x)


def _step2(p: Mapping[str, Any], k_offset: int = 0) -> dict[str, Any]:
    v = _values(p, k_offset)
    out = {k: float(v[k]) for k in ("deterministic_wait_ms", "deterministic_wake_ms", "deterministic_peak_rate_per_s",
                                    "jitter_window_ms", "jitter_mean_rate_per_s", "peak_reduction", "jitter_bins",
                                    "capped_deterministic_wait_ms", "capped_deterministic_wake_ms")}
    F, d = p["failing_agents"], p["dispatch_jitter_ms"]
    emax = expected_max_bin_count(F, out["jitter_window_ms"], d)
    out["jitter_expected_max_per_bin"] = emax
    out["jitter_expected_peak_rate_per_s"] = emax / (d / 1000.0)
    out["binned_peak_reduction"] = out["deterministic_peak_rate_per_s"] / out["jitter_expected_peak_rate_per_s"]
    return out


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity Napkin Math 0.4 computes, from the givens (threads, ms, requests per second).

    Graded, step 1 (the pool): ``blocked_threads`` min(N, M), ``free_threads``, whether the agents'
    calls alone fill the pool (``pool_exhausted_by_agents``), how long the pool stays full under the
    stated load (``frozen_window_ms``), and the slowest stream of other blocking calls that fills it
    before the timeout (``min_secondary_rate_to_exhaust_per_s``). Step 2 (the retries): the
    deterministic wait and wake time after t0 (``deterministic_wait_ms``, ``deterministic_wake_ms``),
    its peak rate F/d, the full-jitter window and mean rate, their ratio ``peak_reduction``, and the
    expected peak rate of the jittered arrivals in bins of width d
    (``jitter_expected_peak_rate_per_s``). Also returned: the expected busiest bin, the peak-to-peak
    reduction, the exhaustion time at a few stated secondary rates, the chapter's reading, the
    alternative readings' answers. Raises ConfigError for bad givens.
    """
    p = validate_params(params)
    v = _values(p)
    N, M, T = p["agents"], p["pool_threads"], p["timeout_ms"]
    pool = {k: _number(k, v[k]) for k in ("blocked_threads", "free_threads", "queued_agents", "frozen_window_ms",
                                           "min_secondary_rate_to_exhaust_per_s")}
    exhausted = N >= M
    step2 = _step2(p)
    poisson_peak = expected_max_bin_count(p["failing_agents"], step2["jitter_window_ms"], p["dispatch_jitter_ms"],
                                          poisson_bins=True) / (p["dispatch_jitter_ms"] / 1000.0)
    free = pool["free_threads"]
    # the stream of extra blocking calls the chapter's "< 200 ms" needs: the free threads within the
    # one decode step after the agents' own
    chapter_rate = free / ((CHAPTER_EXHAUST_MS - CHAPTER_DECODE_STEP_MS) / 1000.0)
    rates = sorted({pool["min_secondary_rate_to_exhaust_per_s"] * 2, chapter_rate, chapter_rate * 10}) if free else []
    by_rate = [exhaust_time_ms(p, r) for r in rates if r > 0]

    if exhausted:
        pool_text = (f"The {N} agents' calls fill all {M} threads at once ({pool['queued_agents']} more wait): the "
                     f"pool stays full for {pool['frozen_window_ms']:,.0f} ms, and every local tool waits with it. ")
    else:
        pool_text = (f"The {N} agents' calls hold {pool['blocked_threads']} of {M} threads for {T:,.0f} ms; "
                     f"{free} stay free, so the stated load alone does not exhaust the pool (frozen window 0 ms). "
                     f"It takes {free} more calls that also block: any such stream faster than "
                     f"{pool['min_secondary_rate_to_exhaust_per_s']:g}/s fills the pool before the timeout, and the "
                     f"chapter's < {CHAPTER_EXHAUST_MS:.0f} ms needs {chapter_rate:,.0f}/s of them. ")
    text = pool_text + (
        f"On retry {p['retry_attempt']}, deterministic backoff wakes all {p['failing_agents']} failing agents "
        f"{step2['deterministic_wait_ms']:,.0f} ms after their timeout "
        f"(t0 + {step2['deterministic_wake_ms']:,.0f} ms), "
        f"{step2['deterministic_peak_rate_per_s']:,.0f} req/s within one {p['dispatch_jitter_ms']:g} ms dispatch "
        f"window; full jitter spreads them over {step2['jitter_window_ms']:,.0f} ms, "
        f"{step2['jitter_mean_rate_per_s']:,.4g} req/s on average ({step2['peak_reduction']:,.0f}x lower). "
        f"The busiest {p['dispatch_jitter_ms']:g} ms bin "
        f"of the jittered arrivals still holds {step2['jitter_expected_max_per_bin']:.2f} of them on average, "
        f"{step2['jitter_expected_peak_rate_per_s']:,.0f} req/s: peak against peak the reduction is "
        f"{step2['binned_peak_reduction']:,.1f}x. Separate pools (bulkheads) keep local tools running while the "
        f"index's calls block; jitter and a breaker keep the retries from arriving together.")

    zero_k = p["retry_attempt"] >= 1
    zk = _step2(p, k_offset=-1) if zero_k else None
    alternative: dict[str, Any] = {
        "chapter_secondary_burst": {
            "pool_exhausted_by_agents": True,
            "frozen_window_ms": max(0.0, T - CHAPTER_EXHAUST_MS) if not exhausted else pool["frozen_window_ms"],
        },
        "capped_deterministic": {
            "deterministic_wait_ms": step2["capped_deterministic_wait_ms"],
            "deterministic_wake_ms": step2["capped_deterministic_wake_ms"],
        },
        "independent_poisson_bins": {"jitter_expected_peak_rate_per_s": poisson_peak},
    }
    if zk is not None:
        alternative["zero_indexed_k"] = {k: zk[k] for k in (
            "deterministic_wait_ms", "deterministic_wake_ms", "jitter_window_ms", "jitter_mean_rate_per_s",
            "peak_reduction", "jitter_expected_peak_rate_per_s")}
    out = {
        "exercise": EXERCISE,
        **{k: pool[k] for k in ("blocked_threads", "free_threads", "queued_agents")},
        "pool_exhausted_by_agents": exhausted,
        "t_exhaust_ms": 0.0 if exhausted else None,
        "frozen_window_ms": pool["frozen_window_ms"],
        "min_secondary_rate_to_exhaust_per_s": pool["min_secondary_rate_to_exhaust_per_s"],
        "exhaust_by_secondary_rate": by_rate,
        "chapter_secondary_rate_per_s": chapter_rate if free else 0.0,
        **{k: step2[k] for k in ("deterministic_wait_ms", "deterministic_wake_ms", "deterministic_peak_rate_per_s",
                                 "jitter_window_ms", "jitter_mean_rate_per_s", "peak_reduction", "jitter_bins",
                                 "jitter_expected_max_per_bin", "jitter_expected_peak_rate_per_s",
                                 "binned_peak_reduction")},
        "decision": "bulkheads_and_full_jitter",
        "decision_text": text,
        "reading": {
            "t0": "t0 is when the agents' calls are in flight (the block: within the first decode step); the "
                  "failing agents' attempts were dispatched at t0 and time out at t0 + T.",
            "pool_exhausted_by_agents": "the pool is exhausted when every thread is blocked. The stated load is N "
                                        "blocked calls; calls that the givens do not state are not assumed. "
                                        "Alternative 'chapter_secondary_burst': the block's own assumption that "
                                        "the free threads are taken by secondary calls within the next decode step, "
                                        "exhausting the pool before 200 ms and freezing it until the timeout.",
            "frozen_window_ms": "how long every thread is blocked under the stated load: ⌊N/M⌋ waves of M calls, "
                                "each held for T (0 when N < M).",
            "retry_attempt": "the given is the exponent k of the retry (the block's first retry uses 2^1). "
                             "Alternative 'zero_indexed_k': the text also calls k zero-indexed, which makes the "
                             "first retry k = 0, so the exponent is the given minus one.",
            "deterministic_wait_ms": "deterministic backoff as the block writes it, T_0·2^k without the cap. "
                                     "Alternative 'capped_deterministic': truncated at T_max like full jitter.",
            "jitter_expected_peak_rate_per_s": "arrivals counted in bins of the dispatch jitter's width, aligned at "
                                               "the start of the jitter window; the expectation of the busiest "
                                               "bin, exact for F arrivals summing to F. Alternative "
                                               "'independent_poisson_bins': each bin an independent Poisson count.",
        },
        "alternative": alternative,
    }
    return jsonable(out)


#: Alternative answers filed under other names (none: every reading is nested under its quantities' names).
ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {}


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve`: thread counts and the yes/no exactly, every other number
    within 1 % relative (a zero exactly). An answer of a documented alternative reading is graded ``alternative`` (see
    :func:`~kernel_lib.course.exercises.accept_readings`)."""
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def chapter_figures() -> list[dict[str, Any]]:
    """Each figure Napkin Math 0.4 prints, beside what its givens (:data:`DEFAULTS`) give:
    ``[{claim, printed, computed, holds, note}]``. Only the printed text is typed in."""
    s = solve(DEFAULTS)
    d = DEFAULTS

    def row(claim: str, printed: str, computed: str, note: str, holds: bool | None = None) -> dict[str, Any]:
        return {"claim": claim, "printed": printed, "computed": computed,
                "holds": computed == printed if holds is None else holds, "note": note}

    exhaust_text = ("0 ms (the agents fill the pool)" if s["pool_exhausted_by_agents"] else
                    f"never, from the stated load ({s['blocked_threads']} of {d['pool_threads']} threads)")
    return [
        row("threads left free", "44 threads", f"{s['free_threads']} threads",
            f"{d['pool_threads']} − {s['blocked_threads']} blocked by the agents"),
        row("time to thread exhaustion", "< 200 ms", exhaust_text,
            f"{s['free_threads']} more blocking calls are needed and the givens state none; a stream of them "
            f"faster than {s['min_secondary_rate_to_exhaust_per_s']:g}/s exhausts the pool before the "
            f"{d['timeout_ms']:,.0f} ms timeout, and {s['chapter_secondary_rate_per_s']:,.0f}/s within the 100 ms "
            f"after the agents' decode step gives the printed < 200 ms", holds=s["pool_exhausted_by_agents"]),
        row("runtime frozen for", "4800 ms", f"{s['frozen_window_ms']:,.0f} ms",
            "the printed window is T − 200 ms, which follows only with the secondary burst the block assumes "
            "(alternative 'chapter_secondary_burst')"),
        row("deterministic wait, k = 1", "2000 ms", f"{s['deterministic_wait_ms']:.0f} ms",
            f"{d['base_ms']:g}·2^{d['retry_attempt']}"),
        row("deterministic wake", "t0 + 7000 ms", f"t0 + {s['deterministic_wake_ms']:.0f} ms",
            f"timeout {d['timeout_ms']:g} + wait {s['deterministic_wait_ms']:g}"),
        row("deterministic peak", "64,000 requests/sec", f"{s['deterministic_peak_rate_per_s']:,.0f} requests/sec",
            f"{d['failing_agents']} requests in {d['dispatch_jitter_ms']:g} ms"),
        row("full-jitter ceiling", "2000 ms", f"{s['jitter_window_ms']:.0f} ms",
            f"min({d['cap_ms']:g}, {d['base_ms']:g}·2^{d['retry_attempt']})"),
        row("full-jitter expected rate", "64 requests/sec", f"{s['jitter_mean_rate_per_s']:,.0f} requests/sec",
            f"the mean over the window; its busiest {d['dispatch_jitter_ms']:g} ms bin averages "
            f"{s['jitter_expected_peak_rate_per_s']:,.0f} req/s ({s['jitter_expected_max_per_bin']:.2f} arrivals)"),
        row("reduction", "1000×", f"{s['peak_reduction']:.0f}×",
            f"peak over mean = window / dispatch jitter; peak over peak (binned) is "
            f"{s['binned_peak_reduction']:,.1f}×"),
    ]


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: another fleet and pool (sometimes the agents alone fill it), timeout,
    backoff base and cap (sometimes below the deterministic wait), failing share, dispatch jitter
    and retry exponent (1 to 6)."""
    rng = random.Random(f"nm0.4:{seed}")
    agents = rng.choice([32, 64, 96, 128, 192, 256, 384, 512])
    pool = max(8, int(agents * rng.choice([0.5, 0.75, 0.9, 1.0, 1.1, 1.17, 1.25, 1.5, 2.0])))
    base = rng.choice([50.0, 100.0, 200.0, 250.0, 500.0, 1000.0])
    k = rng.randint(1, 6)
    return {
        "agents": agents,
        "pool_threads": pool,
        "timeout_ms": rng.choice([1000.0, 2000.0, 5000.0, 10000.0, 30000.0]),
        "base_ms": base,
        "cap_ms": rng.choice([2000.0, 5000.0, 10000.0, 30000.0, 60000.0]),
        "failing_agents": max(1, min(agents, int(agents * rng.choice([0.125, 0.25, 0.5, 0.75, 1.0])))),
        "dispatch_jitter_ms": rng.choice([0.5, 1.0, 2.0, 5.0]),
        "retry_attempt": k,
    }
