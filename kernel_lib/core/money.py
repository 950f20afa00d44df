"""Money in the fold: integer micro-dollars (Durable Execution §11.5.3, §11.5.4).

Events carry USD amounts as JSON numbers (``amount_usd``, ``actual_usd``, ``budget_ceiling_usd``).
The record converts each one **once**, when it is folded, to an integer number of micro-dollars
(1 micro-dollar = 1e-6 USD) and does all its budget arithmetic on those integers: a reservation
released unspent, a settlement, a refund or a compensation then nets to exactly zero, and the
bounded-liability rule compares integers, with no tolerance.

Rounding: the amount is read as the decimal its shortest float representation shows (what the
log's JSON holds, e.g. ``0.1`` is 0.1, not 0.1000000000000000055...) and rounded half-even to
the nearest micro-dollar. Amounts finer than 1e-6 USD are therefore rounded (2.5e-6 USD becomes
2 micro-dollars, 3.5e-6 becomes 4); no chapter figure needs a finer grain.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

__all__ = ["MICRO_PER_USD", "usd_to_micro", "micro_to_usd"]

#: Micro-dollars per US dollar.
MICRO_PER_USD = 1_000_000

_QUANTUM = Decimal(1)


def usd_to_micro(amount_usd: Any) -> int:
    """``amount_usd`` (a finite int or float, USD) as integer micro-dollars, rounded half-even
    on the decimal the float's shortest representation shows (see the module docstring).

    Raises:
        ValueError: ``amount_usd`` is a bool, not a number, or not finite.
    """
    if isinstance(amount_usd, bool) or not isinstance(amount_usd, (int, float)):
        raise ValueError(f"a USD amount must be a number, got {type(amount_usd).__name__} {amount_usd!r:.80}")
    if isinstance(amount_usd, int):
        return int(amount_usd) * MICRO_PER_USD
    if not math.isfinite(amount_usd):
        raise ValueError(f"a USD amount must be finite, got {amount_usd!r}")
    scaled = amount_usd * MICRO_PER_USD
    nearest = round(scaled)
    if abs(scaled) < 2**45 and abs(scaled - nearest) < 0.25:
        # far from a tie and small enough that the product's rounding error (a few ulps, under
        # 0.01 here) cannot cross one: the float product rounds to the integer the decimal does
        return int(nearest)
    try:
        return int((Decimal(repr(float(amount_usd))) * MICRO_PER_USD).quantize(_QUANTUM, rounding=ROUND_HALF_EVEN))
    except InvalidOperation:   # pragma: no cover - finite floats always convert
        raise ValueError(f"a USD amount cannot be converted to micro-dollars: {amount_usd!r}") from None


def micro_to_usd(amount_micro_usd: int) -> float:
    """Integer micro-dollars as USD (the float nearest to ``amount_micro_usd`` × 1e-6)."""
    return amount_micro_usd / MICRO_PER_USD
