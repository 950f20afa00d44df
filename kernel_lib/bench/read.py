"""``bench read``: the read path of the log against a msgspec JSON decode of the same bytes (§11.2.1,
§11.5.2: a replacement worker opens the log, reads it and folds it before it can resume).

One run in one temporary directory, for a log of n events (default 100 000) of the crash
worksheet's turn shape (model call, authorization, reservation, tool intent, tool result,
settlement) written with the project's own segment-log writer:

1. **Read path**, timed in interleaved rounds (median of each):

   * *open*: :meth:`SegmentStore.open` read-only: every frame's CRC32C, the envelope fields the
     index needs (one header unpack and a msgspec decode of four fields per record, in the scan
     loop), the gapless-sequence and fence checks; no SHA-256 (a read computes it);
   * *read*: decode every event (:meth:`SegmentStore.read`): envelope and payload validated
     against the registered schema, the credential scan. The timed reader was read once before,
     so its digests are cached; a first read also hashes each event (SHA-256 of the bytes open
     indexed), which *open + read + fold* includes;
   * *fold*: the reducer over the decoded events (:func:`kernel_lib.core.record.fold`);
   * *open + read + fold* as one call, what a replacement worker pays;
   * the baseline: ``msgspec.json.decode`` of every event's stored bytes into plain Python data,
     no checks, kept in a list as a reader keeps them, with Python's default settings;
   * the same decode with the cyclic garbage collector paused (``msgspec_decode_gc_off``), the
     floor of any JSON reader in Python. Kept objects make the collector run full passes as the
     list grows, which costs the plain decode about as much as the decoding itself on these
     events; our reader pauses the collector while it decodes a run of events, so the path is
     printed against this floor too (``over_msgspec_gc_off``), beside the target's ratio.

   Each is also given as a ratio to the baseline. Target: open + read + fold ≤ 4 × the baseline.
2. **Fold throughput**: events/s of the reducer and of a plain-Python loop applying the same
   decoded events to dicts with the least bookkeeping (operation status, open reservations,
   consumed USD; :func:`kernel_lib.bench.restore.plain_fold`), and their ratio.

Figures are this machine's, from this run; ratios compare contenders measured in the same run.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from typing import Any

from kernel_lib.bench.harness import MeasuredDir, machine_info, median, ratio, time_rounds
from kernel_lib.errors import ConfigError

DEFAULT_EVENTS = 100_000
DEFAULT_ROUNDS = 3
TARGET_READ_PATH_RATIO = 4.0     # open + read + fold <= 4x a msgspec decode of the same bytes
TRAJECTORY = "traj_bench_restore"   # the log kernel_lib.bench.restore.make_events builds


def run_read_bench(events: int = DEFAULT_EVENTS, *, rounds: int = DEFAULT_ROUNDS, seed: int = 0,
                   dir: "str | os.PathLike[str] | None" = None,
                   progress: "Callable[[str], None] | None" = None) -> dict[str, Any]:
    """Run the benchmark (module docstring) and return its figures.

    Args:
        events: events in the log (an int >= 20).
        rounds: interleaved timed rounds (an int >= 1); each figure is the median over them.
        seed: seed of the generated log.
        dir: parent of the temporary directory (default: the current directory); it is removed.
        progress: called with a short description before each step.

    Returns:
        ``{"benchmark": "read", "events", "rounds", "seed", "machine", "log_bytes",
        "read_path": {"median_s": {name: s}, "over_msgspec": {name: ratio},
        "over_msgspec_gc_off": {name: ratio}, "samples_s"},
        "fold_throughput": {"fold_events_per_s", "plain_loop_events_per_s", "fold_over_plain"},
        "targets": [{"name", "measured", "limit", "passed"}], "temp_dir_removed", "seconds"}``.
        Times in seconds, ratios unitless.

    Raises:
        ConfigError: ``events`` below 20, ``rounds`` below 1, or ``dir`` not an existing directory.
    """
    if type(events) is not int or events < 20:
        raise ConfigError(f"events must be an integer >= 20, got {events!r}")
    if type(rounds) is not int or rounds < 1:
        raise ConfigError(f"rounds must be an integer >= 1, got {rounds!r}")
    import msgspec

    from kernel_lib.bench.restore import make_events, plain_fold
    from kernel_lib.core.record import fold, initial_record
    from kernel_lib.log.segment import SegmentStore

    tick = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    scratch = MeasuredDir(dir, prefix="bench-read-")
    try:
        machine = {**machine_info(scratch.path), "cpus": os.cpu_count()}
        tick(f"generating {events} events")
        made = make_events(events, seed)
        path = scratch.path / "log"
        store = SegmentStore.open(path, create=True)
        tick("writing the segment log")
        for i in range(0, len(made), 1000):
            store.append_batch(made[i:i + 1000], "write" if i + 1000 < len(made) else "fdatasync")
        store.close()
        bodies = [e.canonical for e in made]
        log_bytes = sum(os.path.getsize(path / n) for n in os.listdir(path))
        del made

        def open_log() -> SegmentStore:
            return SegmentStore.open(path, read_only=True)

        reader = open_log()
        decoded = list(reader.read(TRAJECTORY))
        if len(decoded) != events or [e.canonical for e in decoded] != bodies:
            raise AssertionError("the segment log does not read back the events written")   # a store bug

        def read_all() -> list:
            return list(reader.read(TRAJECTORY))

        def pipeline() -> Any:
            s = open_log()
            try:
                return fold(initial_record(TRAJECTORY), s.read(TRAJECTORY))
            finally:
                s.close()

        decoder = msgspec.json.Decoder()

        def decode_gc_off() -> list:
            was = gc.isenabled()
            gc.disable()
            try:
                return [decoder.decode(b) for b in bodies]
            finally:
                if was:
                    gc.enable()

        tick(f"timing the read path ({rounds} rounds)")
        samples = time_rounds({
            "msgspec_decode": lambda: [decoder.decode(b) for b in bodies],
            "msgspec_decode_gc_off": decode_gc_off,
            "open": lambda: open_log().close(),
            "read": read_all,
            "fold": lambda: fold(initial_record(TRAJECTORY), decoded),
            "open_read_fold": pipeline,
            "plain_loop": lambda: plain_fold(decoded),
        }, rounds)
        reader.close()
    finally:
        scratch.remove()
    med = {k: median(v) for k, v in samples.items()}
    base = med["msgspec_decode"]
    over = {k: ratio(v, base) for k, v in med.items() if k != "plain_loop"}
    over_floor = {k: ratio(v, med["msgspec_decode_gc_off"]) for k, v in med.items() if k != "plain_loop"}
    fold_eps = events / med["fold"] if med["fold"] else float("nan")
    plain_eps = events / med["plain_loop"] if med["plain_loop"] else float("nan")
    measured = over["open_read_fold"]
    targets = [{"name": f"open + read + fold of {events} events vs a msgspec JSON decode of the same bytes",
                "measured": measured, "limit": f"<= {TARGET_READ_PATH_RATIO:g}",
                "passed": bool(measured <= TARGET_READ_PATH_RATIO)}]
    return {"benchmark": "read", "events": events, "rounds": rounds, "seed": seed, "machine": machine,
            "log_bytes": log_bytes,
            "read_path": {"median_s": med, "over_msgspec": over, "over_msgspec_gc_off": over_floor,
                          "samples_s": samples},
            "fold_throughput": {"events": events, "fold_events_per_s": fold_eps, "plain_loop_events_per_s": plain_eps,
                                "fold_over_plain": ratio(fold_eps, plain_eps)},
            "targets": targets, "temp_dir_removed": scratch.removed, "seconds": time.perf_counter() - t_start}


def format_read_bench(r: dict[str, Any]) -> str:
    """Human-readable table of :func:`run_read_bench`'s result."""
    rp, th = r["read_path"], r["fold_throughput"]
    med, over, floor = rp["median_s"], rp["over_msgspec"], rp["over_msgspec_gc_off"]
    lines = [f"bench read: segment log of {r['events']:,} events ({r['log_bytes']:,} bytes), seed {r['seed']}, "
             f"{r['rounds']} rounds, {r['machine']['platform']}, {r['machine']['cpus']} CPUs "
             f"({r['seconds']:.0f} s)", ""]
    warning = r["machine"].get("filesystem", {}).get("warning")
    if warning:
        lines.append(f"WARNING: {warning}")
    lines.append("read path (median s; ratio to the msgspec decode of the same bytes; ratio to that decode with "
                 "the garbage collector paused):")
    for name, label in (("msgspec_decode", "msgspec JSON decode (baseline)"),
                        ("msgspec_decode_gc_off", "  the same, collector paused"), ("open", "open (read-only)"),
                        ("read", "read (decode every event)"), ("fold", "fold (reducer)"),
                        ("open_read_fold", "open + read + fold")):
        lines.append(f"  {label:<32} {med[name]:9.3f} s   {over[name]:6.2f}x   {floor[name]:6.2f}x")
    lines += ["", f"fold throughput: reducer {th['fold_events_per_s']:,.0f} events/s, plain dict loop "
                  f"{th['plain_loop_events_per_s']:,.0f} events/s: reducer / plain = {th['fold_over_plain']:.2f}",
              "", "targets:"]
    for t in r["targets"]:
        lines.append(f"  {t['name']}: {t['measured']:.2f} (target {t['limit']})  {'PASS' if t['passed'] else 'FAIL'}")
    return "\n".join(lines)
