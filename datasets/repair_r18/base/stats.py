"""Small descriptive statistics used by the repair worksheet (a real module with a real bug)."""

from __future__ import annotations

from typing import Sequence


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean. Raises ValueError for an empty sequence."""
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / len(values)


def median(values: Sequence[float]) -> float:
    """Middle value of the sorted data; the mean of the two middle values for an even count.

    Raises ValueError for an empty sequence.
    """
    if not values:
        raise ValueError("median of an empty sequence")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid]


def variance(values: Sequence[float]) -> float:
    """Population variance. Raises ValueError for an empty sequence."""
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / len(values)
