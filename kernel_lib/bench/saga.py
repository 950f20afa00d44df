"""``bench saga``: what the trajectory saga costs in the log (Failure Recovery, Napkin Math 0.1).

One run, in one temporary directory on the measured disk, on the simulated twins of the tool
services (virtual clock: the services' own durations are not waited for, so the figures are the
runtime's cost alone):

1. **Log overhead per saga transition**: one durable ``SagaStepChanged`` (COMMITTED with C_i
   bound, the record a forward step waits for) appended through a trajectory log at the
   fdatasync tier, on SQLite and on the segment log, against ``os.write`` + ``os.fdatasync`` of
   the same bytes to a plain file, measured in the same interleaved rounds: median and p99 in
   µs, and the ratio store / raw. Then the deployment saga is run once per store and the
   barriers its log handle waited for are counted (:attr:`TrajectoryLog.barriers`): per forward
   step, and per compensator pop (the unwind's barriers less the one that ends it). The runner
   documents 2 per forward step and 1 per pop; Napkin Math 0.1's ``fsyncs_per_forward_step`` and
   ``fsyncs_per_compensator`` are these counts.
2. **Unwind of a 100-step saga** on the twins: 100 committed compensable steps (the four
   deployment steps and git branches), a 409 on the DNS step, then the unwind of all 100; the
   forward run and the unwind timed apart, in seconds and per pop, on the memory store (no
   durability), SQLite and the segment log (fdatasync tier), in rounds that rotate the stores.
3. **The store gap**: the whole deployment saga (5 steps, 4 pops) per store at the write tier
   (what ``saga sweep --services twins`` uses on a file store) and at the fdatasync tier (the live
   sweep's workers), with the runner as built (it folds the
   events the gate appended) and with the path before (every append read back from the store
   and folded), in the same rounds: ms per saga, and sqlite / segment for each.

Targets: a saga transition at fdatasync <= 1.5 x raw write+fdatasync (the append bench's
target); barriers per forward step = 2 and per pop = 1, on both stores.

Figures are this machine's, from this run; ratios compare contenders measured in the same run.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel_lib.bench.harness import (
    Contender, MeasuredDir, machine_info, median, progress_bar, ratio, round_order, run_rounds, summarize,
)
from kernel_lib.errors import ConfigError, StepFailedError

__all__ = ["run_saga_bench", "format_saga_bench", "DURABLE_STORES", "TARGET_TRANSITION_RATIO"]

DURABLE_STORES = ("sqlite", "segment")
#: a saga transition at fdatasync <= this x raw write+fdatasync (as kernel_lib.bench.append)
TARGET_TRANSITION_RATIO = 1.5
#: what the runner documents (kernel_lib.recovery.runner, "Barriers")
DOCUMENTED_BARRIERS = {"per_forward_step": 2, "per_pop": 1, "to_end_unwind": 1}


class _Plan:
    def __init__(self, quick: bool, rounds: int | None, steps: int):
        self.quick = quick
        self.rounds = rounds or (3 if quick else 8)
        self.per_round = 8 if quick else 40        # figure 1: appends per contender per round
        self.warmup = 3 if quick else 10
        self.unwind_rounds = 1 if quick else 3      # figure 2
        self.sagas_per_round = 1 if quick else 3    # figure 3
        self.steps = steps


def _open(kind: str, root: Path, name: str) -> Any:
    from kernel_lib.log import MemoryStore, open_store
    if kind == "memory":
        return MemoryStore()
    return open_store(kind, root / (f"{name}.sqlite" if kind == "sqlite" else f"{name}.seglog"), create=True)


def _runner(store: Any, trajectory_id: str, must_survive: str, *, read_back: bool = False) -> tuple[Any, Any]:
    """A saga runner on fresh twins over ``store`` (read_back: the runner path before it folded the
    gate's appended events, every append read back from the store)."""
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
    from kernel_lib.log import TrajectoryLog
    from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
    from kernel_lib.recovery.saga import fold_saga
    from kernel_lib.sim.deployment import TAKEN_DOMAIN, deployment_registry
    from kernel_lib.sim.saga_sweep import GRANT_ID, start_task
    from kernel_lib.sim.services import TwinFleet

    class ReadBack(SagaRunner):
        def _refold(self):   # the path before: read back what was appended, then fold it
            head = self.gate.log.head
            if self.saga.last_sequence_number < head:
                fold_saga(self.gate.log.events(self.saga.last_sequence_number + 1, head), self.saga_id,
                          into=self.saga)
            return self.saga

    fleet = TwinFleet()
    fleet.taken_name(TAKEN_DOMAIN)
    reg = deployment_registry()
    log = TrajectoryLog(store, trajectory_id, must_survive=must_survive)
    gate = DispatchGate(log, AdmissionPolicy({GRANT_ID: set(reg.names())}), coalesce_admission=True)
    start_task(gate, trajectory_id)
    cls = ReadBack if read_back else SagaRunner
    return cls(gate, reg, fleet.client(trajectory_id), saga_id="deploy", grant_id=GRANT_ID,
               retry=RetryPolicy(max_attempts=4), sleep=fleet.clock.advance), fleet


# ------------------------------------------------------------------------------------------------
# figure 1: one saga transition against a raw write+fdatasync; barriers counted
# ------------------------------------------------------------------------------------------------


def _transition_payload() -> Any:
    from kernel_lib.core.events import SagaStepChanged
    from kernel_lib.core.proposals import idempotency_key
    return SagaStepChanged(saga_id="deploy", step_id="deploy.T2", step_index=2, state="COMMITTED", tool="reserve_ip",
                           tier="II", compensator={"tool": "release_ip", "arguments": {"ip_id": "ip-0001"},
                                                   "operation_id": "deploy.T2.C",
                                                   "idempotency_key": idempotency_key("bench-saga", "deploy.T2.C"),
                                                   "repeat_contract": "idempotency_key", "status_lookup": True})


def _figure_transition(root: Path, plan: _Plan, tick: Callable[[], None]) -> dict[str, Any]:
    from kernel_lib.log import FailureDomain, TrajectoryLog
    payload = _transition_payload()
    n = plan.warmup + plan.per_round * plan.rounds
    fd = os.open(root / "raw-fdatasync.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    stores, contenders = [], []
    try:
        probe = TrajectoryLog(_open("memory", root, "probe"), "bench-saga-transition", must_survive="none")
        body = probe.stamp(payload, 1).canonical
        contenders.append(Contender("raw_write_fdatasync", lambda: (os.write(fd, body), os.fdatasync(fd))))
        for kind in DURABLE_STORES:
            store = _open(kind, root, f"transition-{kind}")
            stores.append(store)
            log = TrajectoryLog(store, "bench-saga-transition", must_survive=FailureDomain.HOST_CRASH)
            contenders.append(Contender(kind, lambda log=log: log.append(payload)))
        samples = run_rounds(contenders, rounds=plan.rounds, per_round=plan.per_round, warmup=plan.warmup,
                             tick=tick, collect="round")
    finally:
        os.close(fd)
        for s in stores:
            s.close()
    figs = {k: summarize(v, "us") for k, v in samples.items()}
    base = figs.pop("raw_write_fdatasync")
    for fig in figs.values():
        fig.update(ratio_median=ratio(fig["median_us"], base["median_us"]),
                   ratio_p99=ratio(fig["p99_us"], base["p99_us"]))
    return {"event_bytes": len(body), "appends_per_contender": n - plan.warmup, "baseline": base, "stores": figs}


def _count_barriers(root: Path, kind: str) -> dict[str, Any]:
    """Run the deployment saga at the fdatasync tier and count its log handle's barriers."""
    from kernel_lib.log import FailureDomain
    from kernel_lib.sim.deployment import DEPLOYMENT_STEPS, TAKEN_DOMAIN
    store = _open(kind, root, f"barriers-{kind}")
    try:
        runner, _ = _runner(store, "bench-saga-barriers", FailureDomain.HOST_CRASH.label)
        log = runner.gate.log
        per_step, outputs = [], {}
        args = {"provision_sandbox": lambda: {"image": "deploy-base", "vcpus": 2},
                "reserve_ip": lambda: {"region": "eu-west-1"},
                "compile_binary": lambda: {"sandbox_id": outputs["provision_sandbox"]["sandbox_id"], "target": "api"},
                "bind_firewall": lambda: {"sandbox_id": outputs["provision_sandbox"]["sandbox_id"],
                                          "ip_id": outputs["reserve_ip"]["ip_id"], "ports": [443]}}
        for tool in DEPLOYMENT_STEPS[:-1]:
            b0 = log.barriers
            outputs[tool] = runner.step(tool, args[tool]())
            per_step.append(log.barriers - b0)
        b0 = log.barriers
        try:
            runner.step("publish_dns", {"name": TAKEN_DOMAIN, "ip_id": outputs["reserve_ip"]["ip_id"]})
        except StepFailedError:
            pass
        failed_step = log.barriers - b0
        b0 = log.barriers
        state = runner.unwind("bench")
        unwind = log.barriers - b0
        pops = sum(1 for s in runner.saga.steps.values() if s.state == "COMPENSATED")
    finally:
        store.close()
    end = DOCUMENTED_BARRIERS["to_end_unwind"]
    return {"state": state, "forward_steps": len(per_step), "barriers_per_committed_step": per_step,
            "per_forward_step": sum(per_step) / len(per_step), "failed_step": failed_step,
            "pops": pops, "unwind_barriers": unwind, "per_pop": (unwind - end) / pops if pops else math.nan}


# ------------------------------------------------------------------------------------------------
# figure 2: unwind of a 100-step saga; figure 3: the deployment saga per store and path
# ------------------------------------------------------------------------------------------------


def _long_saga(store: Any, trajectory_id: str, must_survive: str, steps: int) -> dict[str, float]:
    from kernel_lib.sim.deployment import TAKEN_DOMAIN
    runner, fleet = _runner(store, trajectory_id, must_survive)
    t0 = time.perf_counter()
    sb = runner.step("provision_sandbox", {"image": "deploy-base", "vcpus": 2})
    ip = runner.step("reserve_ip", {"region": "eu-west-1"})
    runner.step("compile_binary", {"sandbox_id": sb["sandbox_id"], "target": "api"})
    runner.step("bind_firewall", {"sandbox_id": sb["sandbox_id"], "ip_id": ip["ip_id"], "ports": [443]})
    for k in range(steps - 4):
        runner.step("create_branch", {"name": f"deploy-{k}"})
    try:
        runner.step("publish_dns", {"name": TAKEN_DOMAIN, "ip_id": ip["ip_id"]})
    except StepFailedError:
        pass
    t1 = time.perf_counter()
    state = runner.unwind("bench")
    t2 = time.perf_counter()
    pops = sum(fleet.counts()[s]["applied"].get(a, 0) for s, a in (
        ("sandbox", "teardown_sandbox"), ("egress_ip", "release_ip"), ("build", "clean_build"),
        ("firewall", "unbind_firewall"), ("git", "delete_branch")))
    if state != "ABORT_CONSISTENT" or pops != steps:
        raise AssertionError(f"the {steps}-step saga ended {state} with {pops} compensators applied")   # a bug
    return {"forward_s": t1 - t0, "unwind_s": t2 - t1, "pops": pops, "tier": runner.gate.log.tier.label}


def _figure_unwind(root: Path, plan: _Plan, tick: Callable[[], None]) -> dict[str, Any]:
    from kernel_lib.log import FailureDomain
    kinds = ("memory", *DURABLE_STORES)
    # what each store's log declares it must survive; the tier it acknowledges at is read back from the log
    tiers = {"memory": FailureDomain.NONE.label, "sqlite": FailureDomain.HOST_CRASH.label,
             "segment": FailureDomain.HOST_CRASH.label}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for r in range(plan.unwind_rounds):
        for i in round_order(len(kinds), r):
            kind = kinds[i]
            store = _open(kind, root, f"unwind-{kind}-{r}")
            try:
                runs[kind].append(_long_saga(store, f"bench-saga-unwind-{r}", tiers[kind], plan.steps))
            finally:
                store.close()
        tick()
    out = {}
    for kind, rows in runs.items():
        unwind_s, forward_s = median([x["unwind_s"] for x in rows]), median([x["forward_s"] for x in rows])
        out[kind] = {"must_survive": tiers[kind], "tier": rows[0]["tier"],
                     "steps": plan.steps, "rounds": len(rows), "unwind_s": unwind_s,
                     "unwind_per_pop_ms": unwind_s / plan.steps * 1e3, "forward_s": forward_s,
                     "forward_per_step_ms": forward_s / plan.steps * 1e3,
                     "unwind_over_forward": ratio(unwind_s, forward_s), "samples": rows}
    return out


def _figure_store_gap(root: Path, plan: _Plan, tick: Callable[[], None]) -> dict[str, Any]:
    from kernel_lib.log import AckTier
    from kernel_lib.sim.deployment import run_deployment
    # the two acknowledgment tiers (kernel_lib.log.AckTier): each log declares the failure its tier survives
    cells = [(kind, tier.label, path) for tier in (AckTier.WRITE, AckTier.FDATASYNC)
             for kind in DURABLE_STORES for path in ("appended", "read_back")]
    stores = {c: _open(c[0], root, f"gap-{c[0]}-{c[1]}-{c[2]}") for c in cells}
    count = [0]

    def one(cell: tuple[str, str, str]) -> None:
        count[0] += 1
        runner, _ = _runner(stores[cell], f"bench-saga-gap-{count[0]}", AckTier.parse(cell[1]).survives_up_to.label,
                            read_back=cell[2] == "read_back")
        if runner.gate.log.tier.label != cell[1]:   # the figure is labelled with the tier the log really used
            raise AssertionError(f"{cell[0]} acknowledged at {runner.gate.log.tier.label}, not {cell[1]}")   # a bug
        if run_deployment(runner)["state"] != "ABORT_CONSISTENT":
            raise AssertionError("the deployment saga did not unwind")   # a bug
    try:
        contenders = [Contender("|".join(c), lambda c=c: one(c)) for c in cells]
        samples = run_rounds(contenders, rounds=plan.rounds, per_round=plan.sagas_per_round, warmup=1, tick=tick)
    finally:
        for s in stores.values():
            s.close()
    ms = {k: median(v) * 1e3 for k, v in samples.items()}
    out: dict[str, Any] = {"sagas_per_cell": plan.rounds * plan.sagas_per_round, "ms_per_saga": {}}
    for (kind, tier, path) in cells:
        out["ms_per_saga"].setdefault(tier, {}).setdefault(path, {})[kind] = ms[f"{kind}|{tier}|{path}"]
    out["sqlite_over_segment"] = {tier: {path: ratio(v["sqlite"], v["segment"]) for path, v in paths.items()}
                                  for tier, paths in out["ms_per_saga"].items()}
    out["read_back_over_appended"] = {tier: {kind: ratio(paths["read_back"][kind], paths["appended"][kind])
                                             for kind in DURABLE_STORES}
                                      for tier, paths in out["ms_per_saga"].items()}
    return out


# ------------------------------------------------------------------------------------------------


def run_saga_bench(*, dir: "str | os.PathLike[str] | None" = None, quick: bool = False, rounds: int | None = None,
                   steps: int = 100, progress: bool | None = None) -> dict[str, Any]:
    """Run the benchmark (module docstring) and return its figures.

    Args:
        dir: parent of the temporary directory (default: the current directory); it is removed.
        quick: few rounds (a smoke run of a few seconds).
        rounds: interleaved rounds of figures 1 and 3 (default 8; --quick 3).
        steps: committed steps of figure 2's saga (default 100, at least 4).
        progress: show a tqdm bar on stderr (default: when stderr is a terminal).

    Returns:
        ``{"benchmark": "saga", "quick", "machine", "transition": {"baseline", "stores": {kind:
        {median_us, p99_us, ..., ratio_median, ratio_p99}}}, "barriers": {kind: {per_forward_step,
        per_pop, ...}}, "documented_barriers", "unwind": {kind: {unwind_s, unwind_per_pop_ms,
        forward_s, tier, must_survive, ...}}, "store_gap": {"ms_per_saga": {tier ("write" |
        "fdatasync"): {path: {kind: ms}}},
        "sqlite_over_segment", "read_back_over_appended"}, "targets": [{"name", "measured", "limit",
        "passed"}], "temp_dir_removed", "seconds"}``.

    Raises:
        ConfigError: ``rounds`` below 1, ``steps`` below 4, or ``dir`` not an existing directory.
    """
    if rounds is not None and (type(rounds) is not int or rounds < 1):
        raise ConfigError(f"rounds must be an integer >= 1, got {rounds!r}")
    if type(steps) is not int or steps < 4:
        raise ConfigError(f"steps must be an integer >= 4 (the deployment saga's four steps), got {steps!r}")
    plan = _Plan(quick, rounds, steps)
    t_start = time.perf_counter()
    scratch = MeasuredDir(dir, prefix="bench-saga-")
    total = (1 + plan.rounds) + len(DURABLE_STORES) + plan.unwind_rounds + (1 + plan.rounds)
    bar = progress_bar(total, enabled=progress)
    tick = lambda: bar.update(1)   # noqa: E731
    try:
        machine = machine_info(scratch.path)
        bar.set_description("saga transition vs raw fdatasync")
        transition = _figure_transition(scratch.path, plan, tick)
        bar.set_description("barriers per step and per pop")
        barriers = {}
        for kind in DURABLE_STORES:
            barriers[kind] = _count_barriers(scratch.path, kind)
            tick()
        bar.set_description(f"unwind of a {steps}-step saga")
        unwind = _figure_unwind(scratch.path, plan, tick)
        bar.set_description("deployment saga per store and path")
        gap = _figure_store_gap(scratch.path, plan, tick)
    finally:
        bar.close()
        scratch.remove()
    targets = []
    for kind, fig in transition["stores"].items():
        targets.append({"name": f"{kind}: one saga transition at fdatasync vs raw write+fdatasync (median)",
                        "measured": fig["ratio_median"], "limit": f"<= {TARGET_TRANSITION_RATIO:g}",
                        "passed": bool(fig["ratio_median"] <= TARGET_TRANSITION_RATIO)})
    for kind, b in barriers.items():
        for key in ("per_forward_step", "per_pop"):
            want = DOCUMENTED_BARRIERS[key]
            targets.append({"name": f"{kind}: barriers {key.replace('_', ' ')} (counted by the log handle)",
                            "measured": b[key], "limit": f"== {want}", "passed": b[key] == want})
    return {"benchmark": "saga", "quick": quick, "rounds": plan.rounds, "machine": machine,
            "services": "simulated twins (virtual clock)", "transition": transition, "barriers": barriers,
            "documented_barriers": DOCUMENTED_BARRIERS, "unwind": unwind, "store_gap": gap, "targets": targets,
            "temp_dir_removed": scratch.removed, "seconds": time.perf_counter() - t_start}


def format_saga_bench(r: dict[str, Any]) -> str:
    """Human-readable tables of :func:`run_saga_bench`'s result."""
    m = r["machine"]
    lines = [f"bench saga: {m['platform']}, {m['cpu_count']} CPUs, {r['services']} "
             f"({r['seconds']:.0f} s{', quick' if r['quick'] else ''})", ""]
    warning = m.get("filesystem", {}).get("warning")
    if warning:
        lines += [f"WARNING: {warning}", ""]
    t = r["transition"]
    lines.append(f"1. one saga transition ({t['event_bytes']} bytes) at fdatasync, {t['appends_per_contender']} "
                 "appends each (µs; ratio to raw write+fdatasync):")
    b = t["baseline"]
    lines.append(f"  {'raw write+fdatasync':<22} median {b['median_us']:9.1f}  p99 {b['p99_us']:9.1f}")
    for kind, f in t["stores"].items():
        lines.append(f"  {kind:<22} median {f['median_us']:9.1f}  p99 {f['p99_us']:9.1f}   "
                     f"{f['ratio_median']:5.2f}x / {f['ratio_p99']:5.2f}x")
    lines.append("   barriers (counted by the log handle; documented: 2 per forward step, 1 per pop, 1 to end):")
    for kind, x in r["barriers"].items():
        lines.append(f"  {kind:<22} per forward step {x['per_forward_step']:.2f}  per pop {x['per_pop']:.2f}  "
                     f"(failed step {x['failed_step']}, unwind {x['unwind_barriers']} for {x['pops']} pops)")
    lines += ["", "2. unwind of a long saga on the twins (median of rounds):"]
    for kind, x in r["unwind"].items():
        lines.append(f"  {kind:<8} ({x['tier']:<9}) {x['steps']} steps: unwind {x['unwind_s']:7.3f} s "
                     f"({x['unwind_per_pop_ms']:6.2f} ms/pop), forward {x['forward_s']:7.3f} s "
                     f"({x['forward_per_step_ms']:6.2f} ms/step), unwind/forward {x['unwind_over_forward']:.2f}")
    g = r["store_gap"]
    lines += ["", f"3. the deployment saga (5 steps, 4 pops), ms per saga, {g['sagas_per_cell']} each, per "
                  "acknowledgment tier and runner path:"]
    for tier, paths in g["ms_per_saga"].items():
        for path, kinds in paths.items():
            lines.append(f"  {tier:<9} {path:<9} sqlite {kinds['sqlite']:7.1f}  segment {kinds['segment']:7.1f}  "
                         f"sqlite/segment {g['sqlite_over_segment'][tier][path]:.2f}")
    lines += ["", "targets:"]
    for x in r["targets"]:
        lines.append(f"  {x['name']}: {x['measured']:.2f} (target {x['limit']})  {'PASS' if x['passed'] else 'FAIL'}")
    return "\n".join(lines)
