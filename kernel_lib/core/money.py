"""Money in the fold: integer micro-dollars (Durable Execution §11.5.3, §11.5.4).

Events carry USD amounts as JSON numbers (``amount_usd``, ``actual_usd``, ``budget_ceiling_usd``).
The record converts each one **once**, when it is folded, to an integer number of micro-dollars
(1 micro-dollar = 1e-6 USD) and does all its budget arithmetic on those integers: a reservation
released unspent, a settlement, a refund or a compensation then nets to exactly zero, and the
bounded-liability rule compares integers, with no tolerance.

Rounding: the amount is read as the decimal its shortest float representation shows (what the
log's JSON holds, e.g. ``0.1`` is 0.1, not 0.1000000000000000055...). An amount that is a whole
number of micro-dollars converts exactly; a finer one is rounded **in the safe direction** of the
bounded-liability rule (§11.3.2): what is reserved, spent or held back (a reservation's bound, a
settlement's usage, the finalization reserve) rounds *up*, what may be spent (the budget ceiling)
rounds *down* (``rounding="up"`` / ``"down"``), so the fold never counts less liability, nor more
headroom, than the log states. A figure that is already a total (a checkpoint snapshot's sums)
rounds to the nearest micro-dollar, half-even (``"nearest"``).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any, Literal

__all__ = ["MICRO_PER_USD", "usd_to_micro", "micro_to_usd"]

#: Micro-dollars per US dollar.
MICRO_PER_USD = 1_000_000

_QUANTUM = Decimal(1)


Rounding = Literal["nearest", "up", "down"]
_DECIMAL_ROUNDING = {"nearest": ROUND_HALF_EVEN, "up": ROUND_CEILING, "down": ROUND_FLOOR}


def usd_to_micro(amount_usd: Any, rounding: Rounding = "nearest") -> int:
    """``amount_usd`` (a finite int or float, USD) as integer micro-dollars: exact when it is a
    whole number of micro-dollars, else rounded ``"nearest"`` (half-even), ``"up"`` or ``"down"``
    on the decimal the float's shortest representation shows (see the module docstring).

    Raises:
        ValueError: ``amount_usd`` is a bool, not a number, or not finite; an unknown ``rounding``.
    """
    if isinstance(amount_usd, bool) or not isinstance(amount_usd, (int, float)):
        raise ValueError(f"a USD amount must be a number, got {type(amount_usd).__name__} {amount_usd!r:.80}")
    if rounding not in _DECIMAL_ROUNDING:
        raise ValueError(f"rounding must be one of {sorted(_DECIMAL_ROUNDING)}, got {rounding!r}")
    if isinstance(amount_usd, int):
        return int(amount_usd) * MICRO_PER_USD
    if not math.isfinite(amount_usd):
        raise ValueError(f"a USD amount must be finite, got {amount_usd!r}")
    scaled = amount_usd * MICRO_PER_USD
    nearest = round(scaled)
    if abs(scaled) < 2**45:
        if nearest / MICRO_PER_USD == amount_usd:
            # a whole number of micro-dollars (the common case: amounts written by this kernel).
            # Below 2**45 micro-dollars two multiples of 1e-6 are more than one ulp apart, so no
            # other multiple rounds to this float; its shortest decimal therefore has at most six
            # fractional digits and is nearest / 1e6 exactly, in every rounding direction
            return int(nearest)
        off = abs(scaled - nearest)
        if rounding == "nearest" and off < 0.25:
            # far from a tie and small enough that the product's rounding error (a few ulps, under
            # 0.01 here) cannot cross one: the float product rounds to the integer the decimal does
            return int(nearest)
        if rounding != "nearest" and off > 0.01:
            # clearly between two integers: the product's error cannot move it across either
            return int(math.ceil(scaled) if rounding == "up" else math.floor(scaled))
    try:
        return int((Decimal(repr(float(amount_usd))) * MICRO_PER_USD).quantize(
            _QUANTUM, rounding=_DECIMAL_ROUNDING[rounding]))
    except InvalidOperation:   # pragma: no cover - finite floats always convert
        raise ValueError(f"a USD amount cannot be converted to micro-dollars: {amount_usd!r}") from None


def micro_to_usd(amount_micro_usd: int) -> float:
    """Integer micro-dollars as USD (the float nearest to ``amount_micro_usd`` × 1e-6)."""
    return amount_micro_usd / MICRO_PER_USD
