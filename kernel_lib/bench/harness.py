"""``bench.harness``: the one timing harness every benchmark of :mod:`kernel_lib.bench` uses.

A benchmark here compares *contenders* (a store against a raw write, a restore against a fold
from the start, ...) measured in the same run, on the same machine and disk, and reports each as a
ratio against a baseline contender. This module holds what they share:

* **Interleaved rounds** (:class:`Contender`, :func:`run_rounds`, :func:`time_rounds`): each
  contender is warmed up, then measured a few calls per round, in an order that changes every
  round (:func:`round_order`), with garbage collections outside the measured calls, so slow
  drift and noise on a shared machine fall on every contender alike.
* **Summaries** (:func:`summarize`, :func:`quantile`, :func:`median`): min, median, p90, p99
  and mean of samples in seconds, reported in a chosen unit. One quantile definition for every
  benchmark: nearest rank (the smallest sample with at least a fraction ``q`` of the samples at
  or below it); the median is the conventional one (the mean of the two middle samples when
  their number is even).
* **Ratios** (:func:`ratio`, :func:`ratios_to`) against a baseline measured in the same run.
* **Machine and disk** (:func:`machine_info`, :func:`filesystem_of`): CPU count, Python,
  platform, SQLite, and which device, mount point and filesystem type a directory is on, and
  whether that is a RAM disk (tmpfs, ramfs, zram), where ``fdatasync`` reaches no disk.
* **A directory on the measured disk** (:class:`MeasuredDir`): created under a given parent or
  the current directory (never the system temp directory, which may be a RAM disk), with its
  filesystem recorded so a result says which disk it measured.
* **Progress** (:func:`progress_bar`): a tqdm bar on stderr, ticked once per round.

Times are wall-clock seconds from :func:`time.perf_counter` (CPU seconds from
:func:`time.process_time`) unless a name says otherwise (``_ms``, ``_us``).
"""

from __future__ import annotations

import gc
import math
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from tqdm import tqdm

from kernel_lib._support import disks
from kernel_lib.errors import ConfigError, KernelError

__all__ = [
    "UNITS",
    "Contender",
    "MeasuredDir",
    "filesystem_of",
    "machine_info",
    "median",
    "progress_bar",
    "quantile",
    "ratio",
    "ratios_to",
    "round_order",
    "round_plan",
    "rounds_ticks",
    "run_rounds",
    "summarize",
    "time_call",
    "time_each",
    "time_rounds",
]

#: Units a summary can be reported in, and the factor from seconds.
UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6}


# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------


def time_call(fn: Callable[[], object]) -> float:
    """Wall time of one call ``fn()``, in seconds (``time.perf_counter``)."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_each(fn: Callable[[Any], object], items: Iterable[Any]) -> list[float]:
    """Call ``fn(item)`` for each item; return each call's wall time, in seconds."""
    out: list[float] = []
    clock = time.perf_counter
    for a in items:
        t0 = clock()
        fn(a)
        out.append(clock() - t0)
    return out


@dataclass
class Contender:
    """One thing a benchmark measures, call by call, against the others of its figure.

    Args:
        name: its key in the results.
        op: the measured operation. Called as ``op(item)`` with the next of ``items`` when
            ``items`` is given (pre-built inputs, consumed in order across warm-up and rounds,
            e.g. events with increasing sequence numbers), else as ``op()``.
        items: the pre-built inputs, or None.
        self_timed: ``op`` returns its own wall time in seconds (for an operation whose set-up,
            such as starting threads, must stay outside the measurement); otherwise the harness
            times the call.
        cpu: also record the process's CPU time of each call (all threads, seconds).

    After :func:`run_rounds`, ``samples_s`` holds the wall time of every measured call (seconds,
    warm-up excluded) and ``cpu_samples_s`` their CPU times when ``cpu`` is set.
    """

    name: str
    op: Callable[..., object]
    items: Sequence[Any] | None = None
    self_timed: bool = False
    cpu: bool = False
    samples_s: list[float] = field(default_factory=list)
    cpu_samples_s: list[float] = field(default_factory=list)
    position: int = 0   # items consumed so far

    def _take(self, n: int) -> Sequence[Any]:
        if self.items is None:
            return [None] * n
        chunk = self.items[self.position:self.position + n]
        if len(chunk) < n:
            raise KernelError(f"benchmark contender {self.name} ran out of pre-built items "
                              f"({len(self.items)} for {self.position + n} calls)")
        self.position += n
        return chunk

    def run(self, n: int, *, keep: bool = True) -> None:
        """Make the next ``n`` calls; with ``keep``, record their wall (and CPU) times in seconds."""
        items = self._take(n)
        op = self.op if self.items is not None else (lambda _none: self.op())
        if not self.self_timed and not self.cpu:
            walls = time_each(op, items)
            if keep:
                self.samples_s += walls
            return
        for a in items:
            cpu0, t0 = time.process_time(), time.perf_counter()
            out = op(a)
            wall = float(out) if self.self_timed else time.perf_counter() - t0   # type: ignore[arg-type]
            cpu_s = time.process_time() - cpu0
            if keep:
                self.samples_s.append(wall)
                if self.cpu:
                    self.cpu_samples_s.append(cpu_s)


def round_order(n: int, r: int) -> list[int]:
    """The order (indices ``0..n-1``) in which ``n`` contenders run in round ``r`` (from 0).

    The order rotates by one every round, so over ``n`` rounds each contender runs first once and
    last once; in every other cycle of ``n`` rounds it is also reversed, so no contender always
    runs right after the same neighbour (with two contenders: AB, BA, BA, AB, ...).
    """
    if n < 1:
        return []
    k = r % n
    order = list(range(k, n)) + list(range(k))
    return order[::-1] if (r // n) % 2 else order


def rounds_ticks(rounds: int) -> int:
    """How many times :func:`run_rounds` calls its ``tick``: once after the warm-up, once a round."""
    return 1 + rounds


def run_rounds(contenders: Sequence[Contender], *, rounds: int, per_round: int | Sequence[int] = 1,
               warmup: int = 0, tick: Callable[[], None] | None = None,
               collect: Literal["turn", "round", "none"] = "turn") -> dict[str, list[float]]:
    """Measure ``contenders`` in interleaved rounds; returns ``{name: wall times in s}``.

    First every contender makes ``warmup`` calls (not recorded); then, in each of ``rounds``
    rounds, every contender makes ``per_round`` calls (an int, or one count per round) in the
    order :func:`round_order` gives. ``tick()`` is called after the warm-up and after each round
    (:func:`rounds_ticks` times in all).

    ``collect``: when to run :func:`gc.collect`, outside the measurement: before each
    contender's turn (``"turn"``, for long calls), once before each round (``"round"``, for many
    short calls, or a large process where one collection takes a noticeable time), or never.

    Raises:
        ConfigError: no contenders, two with one name, ``rounds`` < 1, a count below 0, or an
            unknown ``collect``.
        KernelError: a contender ran out of pre-built items.
    """
    names = [c.name for c in contenders]
    if not contenders or len(set(names)) != len(names):
        raise ConfigError(f"need contenders with distinct names, got {names!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"rounds must be an integer >= 1, got {rounds!r}")
    counts = [per_round] * rounds if isinstance(per_round, int) else list(per_round)
    if len(counts) != rounds or any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in counts):
        raise ConfigError(f"per_round must be an integer >= 0 or {rounds} of them, got {per_round!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ConfigError(f"warmup must be an integer >= 0, got {warmup!r}")
    if collect not in ("turn", "round", "none"):
        raise ConfigError(f"collect must be 'turn', 'round' or 'none', got {collect!r}")
    tick = tick or (lambda: None)
    for c in contenders:
        c.run(warmup, keep=False)
    tick()
    for r in range(rounds):
        if collect == "round":
            gc.collect()
        for i in round_order(len(contenders), r):
            if collect == "turn":
                gc.collect()
            contenders[i].run(counts[r])
        tick()
    return {c.name: list(c.samples_s) for c in contenders}


def time_rounds(ops: Mapping[str, Callable[[], object]], rounds: int, *, warmup: int = 0,
                tick: Callable[[], None] | None = None) -> dict[str, list[float]]:
    """Time each ``op()`` once per round, interleaved (:func:`run_rounds`); ``{name: seconds}``."""
    return run_rounds([Contender(name, op) for name, op in ops.items()], rounds=rounds, warmup=warmup, tick=tick)


def round_plan(runs: int, rounds: int) -> tuple[int, int]:
    """``(per_round, rounds)``: at least ``runs`` measured calls in about ``rounds`` rounds."""
    if runs < 1 or rounds < 1:
        raise ConfigError(f"runs and rounds must be >= 1, got {runs}, {rounds}")
    per_round = math.ceil(runs / rounds)
    return per_round, math.ceil(runs / per_round)


# ------------------------------------------------------------------------------------------------
# summaries and ratios
# ------------------------------------------------------------------------------------------------


def median(samples: Sequence[float]) -> float:
    """The median of ``samples`` (mean of the two middle ones for an even count); NaN if empty."""
    return statistics.median(samples) if len(samples) else float("nan")


def quantile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1): the smallest sample with at least a fraction
    ``q`` of all samples at or below it. NaN if ``samples`` is empty.

    Raises ConfigError when ``q`` is not in (0, 1].
    """
    if not 0 < q <= 1:
        raise ConfigError(f"quantile q must lie in (0, 1], got {q!r}")
    if not len(samples):
        return float("nan")
    s = sorted(samples)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def summarize(samples_s: Sequence[float], unit: str = "us") -> dict[str, float]:
    """Min, median, p90, p99 (nearest rank) and mean of samples given in seconds, reported in
    ``unit`` (``s``, ``ms`` or ``us``; the keys end with it: ``median_us``), and ``n``.

    Raises ConfigError for an unknown unit.
    """
    if unit not in UNITS:
        raise ConfigError(f"unit must be one of {sorted(UNITS)}, got {unit!r}")
    f, n = UNITS[unit], len(samples_s)
    nan = float("nan")
    return {f"min_{unit}": min(samples_s) * f if n else nan, f"median_{unit}": median(samples_s) * f,
            f"p90_{unit}": quantile(samples_s, 0.90) * f, f"p99_{unit}": quantile(samples_s, 0.99) * f,
            f"mean_{unit}": statistics.fmean(samples_s) * f if n else nan, "n": n}


def ratio(value: float, baseline: float) -> float:
    """``value / baseline``; NaN when the baseline is zero or NaN (nothing to compare against)."""
    if not baseline or math.isnan(baseline):
        return float("nan")
    return value / baseline


def ratios_to(values: Mapping[str, float], baseline: str) -> dict[str, float]:
    """Every entry of ``values`` divided by the baseline entry ``values[baseline]``.

    Raises ConfigError when ``baseline`` is not among ``values``.
    """
    if baseline not in values:
        raise ConfigError(f"baseline {baseline!r} is not among the contenders {sorted(values)}")
    return {k: ratio(v, values[baseline]) for k, v in values.items()}


# ------------------------------------------------------------------------------------------------
# machine, disk, and a directory on the measured disk
# ------------------------------------------------------------------------------------------------


def filesystem_of(path: str | os.PathLike) -> dict[str, Any]:
    """Which disk ``path`` is on: ``{"mount_point", "fs_type", "device", "ram_disk"}``, plus a
    ``"warning"`` when it is a RAM disk (tmpfs, ramfs, a ``/dev/zram*`` or ``/dev/ram*``
    device), where ``fdatasync`` measures no disk.

    Read from the Linux mount table (:func:`kernel_lib._support.disks.filesystem_of`); elsewhere
    ``fs_type`` is ``"unknown"`` and ``ram_disk`` False (not known to be one).
    """
    fs = disks.filesystem_of(path)
    out: dict[str, Any] = {"mount_point": fs.mount_point, "fs_type": fs.fs_type, "device": fs.device,
                           "ram_disk": fs.in_memory is True}
    if out["ram_disk"]:
        out["warning"] = (f"{fs.path} is on {fs.fs_type} ({fs.device or 'no device'}), a RAM disk: fdatasync "
                          "reaches no disk there, so the fdatasync figures do not measure one; pass --dir on a "
                          "real disk")
    return out


def machine_info(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """This machine: ``cpu_count``, ``python`` (version), ``implementation``, ``platform``,
    ``sqlite_version``; with ``path``, also ``tmp_dir`` (that path) and ``filesystem``
    (:func:`filesystem_of` it: the disk the benchmark measured)."""
    out: dict[str, Any] = {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                           "implementation": platform.python_implementation(), "platform": platform.platform(),
                           "sqlite_version": sqlite3.sqlite_version}
    if path is not None:
        out.update(tmp_dir=str(path), filesystem=filesystem_of(path))
    return out


class MeasuredDir:
    """A fresh temporary directory on the disk a benchmark means to measure.

    Created under ``parent`` (default: the current directory, so the disk is the project's, not
    the system temp directory, which may be a RAM disk). ``filesystem`` records which disk it is
    on (:func:`filesystem_of`); a RAM disk is never refused but always flagged there
    (``ram_disk``, ``warning``), so the result says so. Use as a context manager, or call
    :meth:`remove`; either deletes the directory and everything in it.

    Raises:
        ConfigError: ``parent`` is not an existing directory.
    """

    def __init__(self, parent: str | os.PathLike | None = None, *, prefix: str = "bench-"):
        base = Path(parent) if parent is not None else Path.cwd()
        if not base.is_dir():
            raise ConfigError(f"--dir {str(base)!r} is not an existing directory")
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        self.filesystem = filesystem_of(self.path)

    @property
    def removed(self) -> bool:
        """True once the directory no longer exists."""
        return not self.path.exists()

    def remove(self) -> bool:
        """Delete the directory tree (errors ignored); returns :attr:`removed`."""
        shutil.rmtree(self.path, ignore_errors=True)
        return self.removed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


# ------------------------------------------------------------------------------------------------
# progress
# ------------------------------------------------------------------------------------------------


def progress_bar(total: int, *, enabled: bool | None = None, unit: str = "round",
                 factory: Callable[..., Any] | None = None) -> Any:
    """A progress bar on stderr over ``total`` units (tick it with ``bar.update(1)``, e.g. as
    :func:`run_rounds`'s ``tick``); ``bar.set_description(text)`` names the current figure and
    ``bar.close()`` removes it.

    ``enabled``: show it (default: when stderr is a terminal); a disabled bar does nothing.
    ``factory``: the bar class, called like :class:`tqdm.tqdm` (default tqdm; tests pass a stub).
    """
    show = sys.stderr.isatty() if enabled is None else enabled
    return (factory or tqdm)(total=total, unit=unit, file=sys.stderr, leave=False, disable=not show)
