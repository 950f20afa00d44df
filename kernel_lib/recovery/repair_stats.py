"""The repair success estimate p per failure class and remedy, folded from recorded outcomes
(Failure Recovery, Napkin Math 0.2's systems insight: p is measured, not assumed).

Each ``RepairOutcome`` record of the log is one Bernoulli trial of one remedy on one failure class
(``"semantic.syntax_error"``...). :func:`fold_repair_stats` counts them into a
:class:`RepairStats` per ``(failure_class, remedy)``.

**Prior**: Beta(1, 1), the uniform prior: before any outcome of a class is recorded, no repair
rate is more plausible than another. The posterior after s successes in n attempts is
Beta(1 + s, 1 + n − s); its mean (s + 1)/(n + 2) (Laplace's rule) is the p the policy uses, and it
never says 0 or 1 from a few trials (2 successes in 2 attempts give 0.75, not certainty). The 95 %
interval is the equal-tailed credible interval, the 2.5 % and 97.5 % quantiles of that posterior,
computed here with the regularized incomplete beta function (a continued fraction) and
bisection, so the kernel needs no scipy; ``tests/test_recovery_policy.py`` checks it against
``scipy.stats.beta.ppf`` where scipy is installed. With n = 0 the interval is [0.025, 0.975]:
the policy reports that count, so a reader sees an estimate that rests on the prior alone.

Pure: no I/O. Raises :class:`~kernel_lib.errors.RecoveryPolicyError` for counts that are negative
or inconsistent, or a prior that is not positive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kernel_lib.errors import RecoveryPolicyError

__all__ = ["PRIOR", "RepairStats", "beta_cdf", "beta_quantile", "fold_repair_stats"]

#: The stated prior of every repair success rate: Beta(a, b).
PRIOR = (1.0, 1.0)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """P(X ≤ x) for X ~ Beta(a, b), a, b > 0 (the regularized incomplete beta I_x(a, b))."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def beta_quantile(q: float, a: float, b: float) -> float:
    """The x with P(X ≤ x) = q for X ~ Beta(a, b), by bisection to 1e-12."""
    if not 0.0 <= q <= 1.0:
        raise RecoveryPolicyError(f"a quantile's level is in [0, 1], got {q!r}")
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if beta_cdf(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class RepairStats:
    """Recorded outcomes of one remedy on one failure class: ``successes`` of ``attempts`` and the
    prior Beta(``prior_a``, ``prior_b``). ``mean`` is the posterior mean, the p the policy uses;
    :meth:`interval` the equal-tailed credible interval. Raises :class:`RecoveryPolicyError` for
    negative counts, more successes than attempts, or a prior parameter that is not > 0."""
    successes: int = 0
    attempts: int = 0
    prior_a: float = PRIOR[0]
    prior_b: float = PRIOR[1]

    def __post_init__(self) -> None:
        counts_ok = type(self.successes) is int and type(self.attempts) is int
        if not counts_ok or not 0 <= self.successes <= self.attempts:
            raise RecoveryPolicyError(f"repair outcomes need integers 0 <= successes <= attempts, got "
                                      f"{self.successes!r} of {self.attempts!r}")
        for name, v in (("prior_a", self.prior_a), ("prior_b", self.prior_b)):
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise RecoveryPolicyError(f"{name} must be a finite number > 0, got {v!r}")

    @property
    def posterior(self) -> tuple[float, float]:
        return self.prior_a + self.successes, self.prior_b + self.attempts - self.successes

    @property
    def mean(self) -> float:
        a, b = self.posterior
        return a / (a + b)

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """The equal-tailed ``level`` credible interval of p (fractions in [0, 1])."""
        if not 0.0 < level < 1.0:
            raise RecoveryPolicyError(f"level must be in (0, 1), got {level!r}")
        a, b = self.posterior
        tail = (1.0 - level) / 2.0
        return beta_quantile(tail, a, b), beta_quantile(1.0 - tail, a, b)

    def add(self, success: bool) -> "RepairStats":
        """The stats after one more recorded outcome."""
        return RepairStats(self.successes + (1 if success else 0), self.attempts + 1, self.prior_a, self.prior_b)

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.interval()
        return {"successes": self.successes, "attempts": self.attempts,
                "prior": f"Beta({self.prior_a:g}, {self.prior_b:g})", "mean": self.mean,
                "interval_95": [lo, hi]}


def fold_repair_stats(outcomes: Iterable[Any]) -> dict[tuple[str, str], RepairStats]:
    """Count repair outcomes per ``(failure_class, remedy)``.

    ``outcomes``: ``RepairOutcome`` payloads, events carrying them (other events are skipped), or
    mappings ``{failure_class, remedy, success}``. Returns a dict of :class:`RepairStats` under
    the stated prior. Raises :class:`RecoveryPolicyError` for a mapping without those keys."""
    out: dict[tuple[str, str], RepairStats] = {}
    for item in outcomes:
        rec = getattr(item, "payload", item)
        if getattr(rec, "event_type", None) == "RepairOutcome":
            key, success = (rec.failure_class, rec.remedy), rec.success
        elif isinstance(rec, Mapping):
            if not (isinstance(rec.get("failure_class"), str) and isinstance(rec.get("remedy"), str)
                    and isinstance(rec.get("success"), bool)):
                raise RecoveryPolicyError("a repair outcome is {failure_class: str, remedy: str, success: bool}, "
                                          f"got {dict(rec)!r}")
            key, success = (rec["failure_class"], rec["remedy"]), rec["success"]
        else:
            continue
        out[key] = out.get(key, RepairStats()).add(success)
    return out
