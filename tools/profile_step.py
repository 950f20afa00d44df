"""Where a durable step's time goes: ``bench append``'s step (figure 3 / 4), timed and profiled.

Usage (from the worktree, project venv)::

    PYTHONPATH=. python tools/profile_step.py [--store segment|sqlite] [--steps 200] [--fleet 16]
        [--profile durable|plain] [--top 30]

Prints the per-step wall and CPU time of the durable step and of the non-durable one (the same
step on a MemoryStore), their difference (what durability adds), and optionally a cProfile of
one mode sorted by own time. ``--fleet N`` runs N trajectories in threads over one store and one
GroupCommitter, as figure 4 does. A development tool; the benchmark itself is ``bench append``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import threading
import time
from pathlib import Path

from kernel_lib.bench.append import DEFAULT_BATCH_CAP, DEFAULT_FLUSH_TIMER_S, _our_step_system, _Stores
from kernel_lib.log import GroupCommitter


def _run(system, durable: bool, steps: int, fleet: int, tag: str) -> tuple[float, float]:
    """Wall and process-CPU seconds of ``fleet`` concurrent runs of ``steps`` steps each."""
    if fleet <= 1:
        w0, c0 = time.perf_counter(), time.process_time()
        system.run(durable, steps, tag)
        return time.perf_counter() - w0, time.process_time() - c0
    barrier = threading.Barrier(fleet + 1)
    threads = [threading.Thread(target=lambda j=j: (barrier.wait(), system.run(durable, steps, f"{tag}-{j}")))
               for j in range(fleet)]
    for t in threads:
        t.start()
    w0, c0 = time.perf_counter(), time.process_time()
    barrier.wait()
    for t in threads:
        t.join()
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="segment", choices=("segment", "sqlite"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--fleet", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", choices=("durable", "plain"))
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="profile-step-", dir=".") as tmp:
        stores = _Stores(Path(tmp))
        committer = None
        if a.fleet > 1:
            committer = lambda store, tier: GroupCommitter(  # noqa: E731
                store, tier, flush_timer_s=DEFAULT_FLUSH_TIMER_S, batch_cap=DEFAULT_BATCH_CAP)
        system = _our_step_system(a.store, stores, committer)
        try:
            _run(system, True, 5, a.fleet, "warm-d")
            _run(system, False, 5, a.fleet, "warm-p")
            res: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            for r in range(a.rounds):
                for durable in ((True, False) if r % 2 else (False, True)):
                    res[durable].append(_run(system, durable, a.steps, a.fleet, f"r{r}-{durable}"))
            n = a.steps * max(1, a.fleet)
            mid = lambda xs: sorted(xs)[len(xs) // 2] / n * 1e6  # noqa: E731
            per = {d: (mid([x[0] for x in xs]), mid([x[1] for x in xs])) for d, xs in res.items()}
            print(f"{a.store}, fleet {a.fleet}, {a.steps} steps, median of {a.rounds}: "
                  f"durable {per[True][0]:.0f} µs/step (CPU {per[True][1]:.0f}), plain {per[False][0]:.0f} "
                  f"(CPU {per[False][1]:.0f}); durability adds {per[True][0] - per[False][0]:.0f} µs wall, "
                  f"{per[True][1] - per[False][1]:.0f} µs CPU")
            if system.group_commit is not None:
                g = system.group_commit()
                print(f"  committer: mean batch {g['mean_batch_size']:.2f}, queue wait "
                      f"{g['mean_queue_wait_s'] * 1e6:.0f} µs, storage {g['mean_storage_s'] * 1e6:.0f} µs")
            if a.profile:
                prof = cProfile.Profile()
                prof.enable()
                _run(system, a.profile == "durable", a.steps, a.fleet, "profiled")
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)
        finally:
            system.close()
            stores.close()


if __name__ == "__main__":
    main()
