"""``bench gateway``: what the tool gateway adds to a call (Failure Recovery, "Tool Circuit
Breakers": table 8's "linear thread usage" closed state and "~0 ms" open state; tables 9-10),
measured on this machine in one run and given as ratios against a bare call and against
pybreaker.

The called function is a trivial local tool (it returns a small dict), so every figure is the
gateway's own cost. Each sample times a batch of ``--batch`` calls (per-call figures are the
batch time divided by the batch), in interleaved rounds. Contenders:

* ``bare``: the function called directly (the baseline);
* ``breaker``: :meth:`CircuitBreaker.call` on a closed breaker, state in the object (admission,
  the call, classification, recording, the Observation);
* ``breaker_core``: :meth:`CircuitBreaker.acquire` + :meth:`CircuitBreaker.record` around the
  call (no classification, no Observation): the state machine's own cost;
* ``pybreaker``: ``pybreaker.CircuitBreaker.call`` on a closed breaker (when installed);
* ``bulkhead``: a bulkhead slot taken and given back around the call, in the caller's thread;
* ``bulkhead_pool``: the call run in a slot on the domain's worker pool with its call timeout
  (what the gateway does: a thread hand-off per call);
* ``gateway``: :meth:`ToolGateway.call` for a dependency in the external-API domain (peek,
  bulkhead, breaker, pool, classification, backoff advice);
* ``shared_breaker``: :meth:`CircuitBreaker.call` on a breaker whose state is in an
  :class:`SQLiteBreakerStore` (WAL, on the measured disk), healthy: per call, two ``PRAGMA
  data_version`` probes and no write;
* ``shared_breaker_writes``: the same with every second call a transport failure (at a
  threshold it never reaches), so every outcome changes the window: one write transaction per call;
* ``open_refusal`` / ``pybreaker_open``: a call refused by an open breaker (ours returns the
  synthetic observation; pybreaker raises ``CircuitBreakerError``, caught).

Figures: per-call median and p90 (µs) of each, each one's overhead over ``bare`` (µs), and the
ratios ``X_over_bare`` and ``X_overhead_over_pybreaker`` (overhead ratios).

Targets (the pybreaker ones when pybreaker is installed):

* like for like, ``breaker_core`` overhead <= pybreaker's (both admit, count and hand back the
  raw value);
* the agent-facing call, ``breaker`` overhead (classification and an Observation on top) <= 2x
  pybreaker's;
* failing fast, ``open_refusal`` <= ``pybreaker_open`` (an observation against a raised error);
* a healthy call on the shared SQLite breaker writes nothing (writes per call == 0).

``gateway`` and ``bulkhead_pool`` are dominated by the hand-off to the domain's worker pool (the
price of a call timeout the caller can enforce on a blocking function); that is a figure, not a
target.

exit status: 0 when the benchmark ran, whether its targets passed or not; 2 on bad input.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from kernel_lib.bench.harness import Contender, MeasuredDir, machine_info, progress_bar, run_rounds, summarize
from kernel_lib.errors import ConfigError

__all__ = ["run_gateway_bench", "format_gateway_bench", "TARGET_BREAKER_OVERHEAD_OVER_PYBREAKER",
           "TARGET_CALL_OVERHEAD_OVER_PYBREAKER"]

#: the breaker's admission + recording overhead over a bare call, divided by pybreaker's: at most this
TARGET_BREAKER_OVERHEAD_OVER_PYBREAKER = 1.0
#: the agent-facing call (classification + Observation on top): at most this times pybreaker's overhead
TARGET_CALL_OVERHEAD_OVER_PYBREAKER = 2.0


def _tool() -> dict[str, int]:
    return {"rows": 1}


def _batch(fn: Callable[[], object], n: int) -> Callable[[], object]:
    def op() -> None:
        for _ in range(n):
            fn()
    return op


def run_gateway_bench(*, rounds: int = 10, batch: int = 500, peers: bool = True,
                      dir: "str | os.PathLike[str] | None" = None, progress: bool | None = None) -> dict[str, Any]:
    """Run the benchmark (module docstring) and return its figures.

    Args:
        rounds: interleaved rounds (>= 1). batch: calls per sample (>= 10).
        peers: measure pybreaker when it is installed. dir: parent of the temporary directory
        holding the shared breaker's SQLite file (default: the current directory); it is removed.
        progress: a tqdm bar on stderr (default: on a terminal).

    Returns:
        ``{"benchmark": "gateway", "machine", "batch", "us": {contender: {median_us, p90_us, ...}},
        "overhead_us": {contender: median - bare median}, "ratios": {...}, "shared_store":
        {"writes_per_healthy_call", "writes_per_call_with_failures", "fresh_checks_per_call",
        "synchronous"}, "pybreaker": version or None, "targets": [{name, measured, limit, passed}],
        "temp_dir_removed", "seconds"}``.

    Raises:
        ConfigError: an argument out of range, or ``dir`` not an existing directory.
    """
    for name, v, low in (("rounds", rounds, 1), ("batch", batch, 10)):
        if type(v) is not int or v < low:
            raise ConfigError(f"{name} must be an integer >= {low}, got {v!r}")
    t_start = time.perf_counter()
    scratch = MeasuredDir(dir, prefix="bench-gateway-")
    bar = progress_bar(1 + rounds, enabled=progress)
    try:
        result = _measure(scratch.path, rounds, batch, peers, lambda: bar.update(1))
    finally:
        bar.close()
        scratch.remove()
    result.update(temp_dir_removed=scratch.removed, seconds=time.perf_counter() - t_start)
    return result


def _pybreaker() -> Any:
    try:
        import pybreaker
    except ImportError:
        return None
    return pybreaker


def _measure(root: Any, rounds: int, batch: int, peers: bool, tick: Callable[[], None]) -> dict[str, Any]:
    from kernel_lib._support.clock import ManualClock
    from kernel_lib.recovery.gateway import (
        BreakerConfig, Bulkhead, CircuitBreaker, DomainSpec, SQLiteBreakerStore, ToolGateway,
    )
    from kernel_lib.recovery.gateway.runner import Permit

    machine = machine_info(root)
    clock = ManualClock()
    cfg = BreakerConfig(window_size=20, minimum_calls=20, failure_rate_threshold=1.0, cooldown_s=3600.0,
                        cooldown_max_s=3600.0)
    breaker = CircuitBreaker("bench.tool", cfg, clock=clock)
    core = CircuitBreaker("bench.core", cfg, clock=clock)

    def core_call() -> None:
        p = core.acquire()
        if type(p) is Permit:
            t0 = time.perf_counter()
            _tool()
            core.record(p, False, time.perf_counter() - t0)

    spec = DomainSpec("bench", 8, 8, 1.0, 5.0)
    bh = Bulkhead(spec)

    def bulkhead_call() -> None:
        bh.acquire()
        try:
            _tool()
        finally:
            bh.release()

    pool = Bulkhead(spec)

    def pool_call() -> None:
        pool.acquire()
        pool.call_in_slot(_tool, (), {})

    gw = ToolGateway({"external_api": DomainSpec("external_api", 8, 8, 1.0, 5.0, cfg)}, clock=clock, rng=0)
    gw.register("bench.api", "external_api")
    store = SQLiteBreakerStore(root / "breakers.sqlite")
    store_w = SQLiteBreakerStore(root / "breakers-writes.sqlite")
    shared = CircuitBreaker("bench.shared", cfg, clock=clock, store=store)
    shared_w = CircuitBreaker("bench.shared_w", cfg, clock=clock, store=store_w)
    flip = [False]

    def flaky() -> dict[str, int]:
        flip[0] = not flip[0]
        if flip[0]:
            raise ConnectionResetError("bench")
        return {"rows": 1}

    opened = CircuitBreaker("bench.open", cfg, clock=clock)
    opened.force("open")
    ops: dict[str, Callable[[], object]] = {
        "bare": _tool, "breaker": lambda: breaker.call(_tool), "breaker_core": core_call,
        "bulkhead": bulkhead_call, "bulkhead_pool": pool_call, "gateway": lambda: gw.call("bench.api", _tool),
        "shared_breaker": lambda: shared.call(_tool), "shared_breaker_writes": lambda: shared_w.call(flaky),
        "open_refusal": lambda: opened.call(_tool),
    }
    pb = _pybreaker() if peers else None
    if pb is not None:
        pbc = pb.CircuitBreaker(fail_max=10**9, reset_timeout=3600)
        pbo = pb.CircuitBreaker(fail_max=1, reset_timeout=3600)
        pbo.open()

        def pb_open() -> None:
            try:
                pbo.call(_tool)
            except pb.CircuitBreakerError:
                pass

        ops["pybreaker"] = lambda: pbc.call(_tool)
        ops["pybreaker_open"] = pb_open
    # the shared breakers' windows fill up before the measurement (a clean full window: no writes)
    for _ in range(cfg.window_size):
        shared.call(_tool)
    contenders = [Contender(name, _batch(fn, batch)) for name, fn in ops.items()]
    h0, w0 = dict(store.stats), dict(store_w.stats)
    run_rounds(contenders, rounds=rounds, warmup=1, tick=tick, collect="round")
    calls = (rounds + 1) * batch                       # warm-up batch included
    healthy_writes = store.stats["writes"] - h0["writes"]
    per_call_w = (store_w.stats["writes"] - w0["writes"]) / calls
    fresh_checks = (store.stats["fresh_checks"] - h0["fresh_checks"]) / calls
    store.close()
    store_w.close()
    gw.close()
    bh.close()
    pool.close()
    us = {c.name: summarize([s / batch for s in c.samples_s], "us") for c in contenders}
    bare = us["bare"]["median_us"]
    overhead = {k: v["median_us"] - bare for k, v in us.items() if k != "bare"}
    ratios: dict[str, float] = {f"{k}_over_bare": v["median_us"] / bare for k, v in us.items() if k != "bare"}
    targets = []
    if "pybreaker" in overhead:
        for k in ("breaker", "breaker_core", "shared_breaker", "gateway"):
            ratios[f"{k}_overhead_over_pybreaker"] = overhead[k] / overhead["pybreaker"]
        ratios["open_refusal_over_pybreaker_open"] = us["open_refusal"]["median_us"] / us["pybreaker_open"]["median_us"]
        for name, key, limit in (
                ("breaker (admission + recording) overhead / pybreaker overhead",
                 "breaker_core_overhead_over_pybreaker", TARGET_BREAKER_OVERHEAD_OVER_PYBREAKER),
                ("breaker call with Observation, overhead / pybreaker overhead", "breaker_overhead_over_pybreaker",
                 TARGET_CALL_OVERHEAD_OVER_PYBREAKER),
                ("open refusal / pybreaker open refusal", "open_refusal_over_pybreaker_open", 1.0)):
            m = ratios[key]
            targets.append({"name": name, "measured": m, "limit": f"<= {limit:g}", "passed": m <= limit})
    hw = healthy_writes / calls
    targets.append({"name": "shared SQLite breaker: writes per healthy call", "measured": hw, "limit": "== 0",
                    "passed": hw == 0})
    return {"benchmark": "gateway", "machine": machine, "batch": batch, "rounds": rounds, "us": us,
            "overhead_us": overhead, "ratios": ratios,
            "shared_store": {"writes_per_healthy_call": hw, "writes_per_call_with_failures": per_call_w,
                             "fresh_checks_per_call": fresh_checks, "synchronous": "NORMAL", "journal_mode": "WAL"},
            "pybreaker": _version("pybreaker") if pb is not None else None, "targets": targets}


def _version(dist: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def format_gateway_bench(r: dict[str, Any]) -> str:
    """Human-readable table of :func:`run_gateway_bench`'s result."""
    m = r["machine"]
    lines = [f"bench gateway: {m['platform']}, {m['cpu_count']} CPUs, Python {m.get('python', '')} "
             f"({r['seconds']:.1f} s; {r['rounds']} rounds x {r['batch']} calls per contender)",
             f"pybreaker: {r['pybreaker'] or 'not installed (pip install pybreaker)'}", "",
             f"  {'contender':<22} {'median us':>10} {'p90 us':>9} {'overhead us':>12} {'x bare':>8} "
             f"{'/ pybreaker':>12}"]
    x = r["ratios"]
    for k, v in r["us"].items():
        ov = "" if k == "bare" else f"{r['overhead_us'][k]:12.3f}"
        xb = "" if k == "bare" else f"{x[f'{k}_over_bare']:8.2f}"
        pb = x.get(f"{k}_overhead_over_pybreaker")
        lines.append(f"  {k:<22} {v['median_us']:10.3f} {v['p90_us']:9.3f} {ov:>12} {xb:>8} "
                     f"{'' if pb is None else f'{pb:12.2f}':>12}")
    s = r["shared_store"]
    lines += ["", f"shared SQLite breaker ({s['journal_mode']}, synchronous={s['synchronous']}): "
                  f"{s['fresh_checks_per_call']:.1f} data_version probes per call; writes per healthy call "
                  f"{s['writes_per_healthy_call']:.3f}, per call with failures in the window "
                  f"{s['writes_per_call_with_failures']:.3f}"]
    if "open_refusal_over_pybreaker_open" in x:
        lines.append(f"fail fast (open): ours / pybreaker's = {x['open_refusal_over_pybreaker_open']:.2f}")
    lines += ["", "targets:"]
    for t in r["targets"]:
        lines.append(f"  {t['name']}: {t['measured']:.3f} (target {t['limit']})  {'PASS' if t['passed'] else 'FAIL'}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(format_gateway_bench(run_gateway_bench(progress=sys.stderr.isatty())))
