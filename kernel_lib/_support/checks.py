"""Value checks for user input (stdlib only): each returns the checked value or raises
:class:`kernel_lib.errors.ConfigError` naming the argument and what it got."""

from __future__ import annotations

import math

from kernel_lib.errors import ConfigError

__all__ = ["ID_CHARS_MAX", "check_id", "finite_or_none", "check_seconds", "check_unix_s"]

#: Longest identifier (trajectory id, owner id, lease id) the ownership layer accepts.
ID_CHARS_MAX = 512


def check_id(name: str, value: object, *, chars_max: int = ID_CHARS_MAX) -> str:
    """``value`` as a non-empty string of at most ``chars_max`` characters."""
    if not isinstance(value, str) or not value or len(value) > chars_max:
        raise ConfigError(f"{name} must be a non-empty string of at most {chars_max} characters, got {value!r}")
    return value


def finite_or_none(value: object) -> float | None:
    """``value`` as a finite float, or None if it is not a finite int or float (bools excluded)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        v = float(value)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


def check_seconds(name: str, value: object, *, positive: bool = False) -> float:
    """``value`` as a finite number of seconds (> 0 with ``positive``)."""
    v = finite_or_none(value)
    if v is None or (positive and v <= 0):
        raise ConfigError(f"{name} must be a finite number of seconds{' > 0' if positive else ''}, got {value!r}")
    return v


def check_unix_s(name: str, value: object) -> float:
    """``value`` as a finite number of seconds since the epoch."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number of seconds since the epoch, got {value!r}")
    return float(value)
