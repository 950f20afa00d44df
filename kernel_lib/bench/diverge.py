"""``bench diverge``: the divergence localizer (§11.7) against a plain fold of the same log.

Two logs of ``n`` events (default 10 000) in the crash worksheet's turn shape (model call,
authorization, reservation, tool intent, tool result, settlement; the generator of
:func:`kernel_lib.bench.restore.make_events`) are built in memory. Log B is the same run as
log A up to about 90 % of its length; from there its generator draws from another seed, so its
delivered inputs, replies and observations differ while identities stay the same, and every event
id of B is re-stamped (``runB-…``) as a separate run's would be. The first mismatch is therefore
late, and the localizer has to walk nearly the whole of both logs.

Timed in interleaved rounds (:func:`kernel_lib.bench.harness.time_rounds`), median seconds:

* ``locate``: :func:`kernel_lib.history.diverge.locate_divergence` of A against B (exact equivalence);
* ``fold``: :func:`kernel_lib.core.record.fold` of log A from the initial record (one log).

Reported: both medians, the ratio ``locate / fold`` (how many folds of one log a localization
costs, on this machine in this run), the boundaries compared, and where the first mismatch was
found (checked to be the expected event). Decoding is not timed: both start from events in memory.
"""

from __future__ import annotations

import random
from typing import Any

from kernel_lib.bench.harness import median, ratio, time_rounds
from kernel_lib.bench.restore import TRAJECTORY
from kernel_lib.core.events import Event
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import ConfigError
from kernel_lib.history.diverge import locate_divergence
from kernel_lib.sim.events import EventMaker


def make_diverging_logs(n: int = 10_000, *, diverge_at: float = 0.9, seed: int = 0) -> tuple[list[Event], list[Event],
                                                                                            int]:
    """Two ``n``-event logs, identical (up to event ids) for the first ``int(n * diverge_at)``
    events; B's later texts and numbers come from another seed. Returns ``(a, b, k)`` with ``k``
    the index of the first event whose payload differs.

    Raises ConfigError when ``n`` < 16 or ``diverge_at`` is not in (0, 1).
    """
    if n < 16:
        raise ConfigError(f"n must be >= 16 events, got {n}")
    if not 0 < diverge_at < 1:
        raise ConfigError(f"diverge_at must lie in (0, 1), got {diverge_at}")
    split = int(n * diverge_at)
    ma, mb = (EventMaker(TRAJECTORY, random.Random(seed), short_texts=True),
              EventMaker(TRAJECTORY, random.Random(seed), short_texts=True))
    a, b = [], []
    for i in range(n):
        if i == split:
            mb.rng = random.Random(seed + 7919)
        for m, out in ((ma, a), (mb, b)):
            out.append(m.make())
            m.next_seq += 1
    b = [e.restamp(event_id=f"runB-{e.event_id}") for e in b]
    k = next(i for i in range(split, n) if a[i].payload != b[i].payload)
    return a, b, k


def run_diverge_bench(n: int = 10_000, *, rounds: int = 5, seed: int = 0) -> dict[str, Any]:
    """Time ``locate_divergence`` on two ``n``-event logs against ``fold`` of one of them (seconds).

    Returns ``{"events", "rounds", "median_s": {"locate", "fold"}, "samples_s", "ratio_locate_over_fold",
    "boundaries_compared", "first_mismatch", "expected_sequence_number", "found_expected"}``.

    Raises ConfigError when ``rounds`` < 1 (and as :func:`make_diverging_logs`).
    """
    if rounds < 1:
        raise ConfigError(f"rounds must be >= 1, got {rounds}")
    a, b, k = make_diverging_logs(n, seed=seed)
    rep = locate_divergence(a, b)
    fm = rep.first_mismatch
    samples = time_rounds({"locate": lambda: locate_divergence(a, b),
                           "fold": lambda: fold(initial_record(TRAJECTORY), a)}, rounds)
    med = {name: median(v) for name, v in samples.items()}
    return {
        "events": n, "rounds": rounds, "median_s": med, "samples_s": samples,
        "ratio_locate_over_fold": ratio(med["locate"], med["fold"]),
        "boundaries_compared": len(rep.steps),
        "first_mismatch": fm.ref() if fm else None,
        "expected_sequence_number": a[k].sequence_number,
        "found_expected": bool(fm and fm.a and fm.a.sequence_number == a[k].sequence_number),
    }


def format_diverge_bench(r: dict[str, Any]) -> str:
    """The result of :func:`run_diverge_bench` as a few lines of text."""
    m = r["median_s"]
    fm = r["first_mismatch"]
    return "\n".join([
        f"bench diverge: two logs of {r['events']} events, first payload difference at sequence "
        f"{r['expected_sequence_number']}; median of {r['rounds']} interleaved rounds",
        f"  locate_divergence (both logs): {m['locate'] * 1e3:8.1f} ms   "
        f"({r['boundaries_compared']} boundaries compared)",
        f"  fold of log A:                 {m['fold'] * 1e3:8.1f} ms",
        f"  ratio locate / fold:           {r['ratio_locate_over_fold']:8.2f}",
        f"  first mismatch: {fm['boundary'] + ' [' + fm['category'] + ']' if fm else 'none'} "
        f"({'the expected event' if r['found_expected'] else 'NOT the expected event'})",
        "  (this machine, this run; the localizer reads two logs, the fold one)",
    ])
