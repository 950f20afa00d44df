"""``bench replay``: serving a recorded trajectory through the replay adapter (§11.6.2) against a
plain fold of the same log, in the same run.

A synthetic recording of ``n`` events (default 10 000) in the crash worksheet's turn shape (the
generator of :func:`kernel_lib.bench.restore.make_events`) is built in memory. The replay side
does what the adapter does for a harness under regression replay: index the recording, then,
for every recorded model request and tool request in logged order, match the request (identity,
canonical form, recorded order) and hand back the recorded reply. The requests are rebuilt from
the recorded ``ContextBuilt`` and ``ToolIntent`` payloads, as a faithful harness would issue them.
The harness's own work (its gate, its appends) is not timed: this measures the adapter's share.

Timed in interleaved rounds (:func:`kernel_lib.bench.harness.time_rounds`), median seconds:

* ``replay``: build a :class:`~kernel_lib.history.replay.ReplayAdapter` and serve every recorded request;
* ``fold``: :func:`kernel_lib.core.record.fold` of the same log from the initial record.

Reported: both medians, the ratio ``replay / fold``, and the number of requests served.
"""

from __future__ import annotations

from typing import Any

from kernel_lib.bench.harness import median, ratio, time_rounds
from kernel_lib.bench.restore import TRAJECTORY, make_events
from kernel_lib.errors import ConfigError
from kernel_lib.core.events import ContextBuilt, ToolIntent
from kernel_lib.core.record import fold, initial_record
from kernel_lib.history.replay import ReplayAdapter


def _serve_all(events, requests) -> int:
    adapter = ReplayAdapter(events)
    for p in requests:
        if isinstance(p, ContextBuilt):
            adapter.model(p)
        else:
            adapter.tool(p)
    return len(adapter.report.served)


def run_replay_bench(n: int = 10_000, *, rounds: int = 5, seed: int = 0) -> dict[str, Any]:
    """Time the adapter serving an ``n``-event recording against ``fold`` of it (seconds).

    Returns ``{"events", "rounds", "requests", "median_s": {"replay", "fold"}, "samples_s",
    "ratio_replay_over_fold"}``.

    Raises ConfigError when ``n`` < 16 or ``rounds`` < 1.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 16:
        raise ConfigError(f"n must be an integer >= 16 events, got {n!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"rounds must be an integer >= 1, got {rounds!r}")
    events = make_events(n, seed=seed)
    # a request whose reply the recording lacks (the generator may end mid-turn) cannot be served
    answered = {e.payload.invocation_id for e in events if e.event_type == "ModelReplied"} | {
        (e.payload.operation_id, e.payload.attempt_id) for e in events
        if e.event_type == "ToolResult" and e.payload.source == "reply"}
    def servable(p) -> bool:
        return ((isinstance(p, ContextBuilt) and p.invocation_id in answered)
                or (isinstance(p, ToolIntent) and (p.operation_id, p.attempt_id) in answered))
    # keep the recorded order servable: stop before the first request the recording never answered
    cut = next((i for i, e in enumerate(events) if isinstance(e.payload, (ContextBuilt, ToolIntent))
                and not servable(e.payload)), len(events))
    events = events[:cut]
    requests = [e.payload for e in events if isinstance(e.payload, (ContextBuilt, ToolIntent))]
    served = _serve_all(events, requests)
    samples = time_rounds({"replay": lambda: _serve_all(events, requests),
                           "fold": lambda: fold(initial_record(TRAJECTORY), events)}, rounds)
    med = {k: median(v) for k, v in samples.items()}
    return {"events": len(events), "rounds": rounds, "requests": served, "median_s": med, "samples_s": samples,
            "ratio_replay_over_fold": ratio(med["replay"], med["fold"])}


def format_replay_bench(r: dict[str, Any]) -> str:
    """The result of :func:`run_replay_bench` as a few lines of text."""
    m = r["median_s"]
    return "\n".join([
        f"bench replay: a recording of {r['events']} events, {r['requests']} requests served by the adapter; "
        f"median of {r['rounds']} interleaved rounds",
        f"  replay adapter (index + match + serve): {m['replay'] * 1e3:8.1f} ms",
        f"  fold of the same log:                   {m['fold'] * 1e3:8.1f} ms",
        f"  ratio replay / fold:                    {r['ratio_replay_over_fold']:8.2f}",
        "  (this machine, this run; the harness's own work is not included)",
    ])
