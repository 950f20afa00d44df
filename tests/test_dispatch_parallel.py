"""Parallel tool calls through one dispatch gate (issue 14, "Dispatch semantics"; §11.3.2, eq. 1).

Fault model: an agent issues one turn's tool calls at once, from threads or from asyncio tasks,
through one :class:`~kernel_lib.gate.dispatch.DispatchGate` over a durable store; the endpoint is
slow, so the calls overlap, and the budget may admit only some of them.

Invariants: the endpoint really saw overlapping calls (its own concurrency count > 1), yet the gate's
decide-and-append steps never overlapped (the ``on_position`` hook, which runs inside them, is never
entered twice at once); the log's sequence numbers are contiguous from 1; every admitted operation has
exactly one intent and one result, and the gate's record equals a fresh fold of the log and shows
each completed; every reservation is settled; at no log position does consumption + outstanding
reservations + the finalization reserve exceed the ceiling; when the budget fits only k of the N
calls, exactly k are admitted (and reach the endpoint) and N - k are refused with AdmissionDenied.

Goal: a real agent's parallel tool calls get the same eq. 1 guarantees as sequential ones.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib.core.events import TaskStarted, ToolIntent, ToolResult
from kernel_lib.core.money import usd_to_micro
from kernel_lib.core.record import fold, fold_step, initial_record
from kernel_lib.errors import AdmissionDenied
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
from kernel_lib.log import FailureDomain, TrajectoryLog
from tests.conftest import make_store

TRAJ = "traj-parallel"
N = 8
POLICY = AdmissionPolicy({"g": {"read_file"}})


def _task(ceiling_usd: float, reserve_usd: float = 0.5) -> TaskStarted:
    return TaskStarted(task_id="t", requester="alice", objective="read the repository", grant_ids=["g"],
                       budget_ceiling_usd=ceiling_usd, finalization_reserve_usd=reserve_usd)


def _proposals(n: int, bound_usd: float) -> list[ToolProposal]:
    return [ToolProposal(f"read_{i}", "attempt1", "read_file", {"path": f"src/m{i}.py"}, "g", bound_usd)
            for i in range(n)]


class Overlap:
    """Counts how many callers are inside at once (thread-safe); ``peak`` is the most seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = self.peak = 0

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc) -> None:
        with self._lock:
            self.now -= 1


class SlowEndpoint:
    """A read-only endpoint that takes ``pause_s`` per call and charges ``charge_usd``; it counts its
    invocations and its own concurrency (the evidence that the calls really overlapped)."""

    def __init__(self, pause_s: float, charge_usd: float):
        self.pause_s, self.charge_usd = pause_s, charge_usd
        self.overlap = Overlap()
        self.invocations: list[str] = []
        self._lock = threading.Lock()

    def _reply(self, intent: ToolIntent) -> ToolReply:
        return ToolReply("completed", outcome={"path": intent.arguments["path"]}, observation_complete=True,
                         charged_usd=self.charge_usd)

    def __call__(self, intent: ToolIntent) -> ToolReply:   # a blocking transport
        with self.overlap:
            with self._lock:
                self.invocations.append(intent.operation_id)
            time.sleep(self.pause_s)
        return self._reply(intent)

    async def call_async(self, intent: ToolIntent) -> ToolReply:   # an asyncio transport
        with self.overlap:
            with self._lock:
                self.invocations.append(intent.operation_id)
            await asyncio.sleep(self.pause_s)
        return self._reply(intent)


def _gate(store, task: TaskStarted) -> tuple[DispatchGate, Overlap]:
    inside = Overlap()

    def on_position(name, ev):   # after:<EventType> and after:recheck run inside decide-and-append steps
        if name == "after:dispatch":   # reported after the round trip, outside them
            return
        with inside:
            time.sleep(0.0005)    # widen the window a second writer would need

    gate = DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.PROCESS_CRASH), POLICY,
                        on_position=on_position)
    gate.start(task)
    return gate, inside


def _run_threads(gate: DispatchGate, proposals, transport) -> list[object]:
    barrier = threading.Barrier(len(proposals))

    def one(p):
        barrier.wait()
        try:
            return gate.run_tool(p, transport)
        except AdmissionDenied as exc:
            return exc

    with ThreadPoolExecutor(len(proposals)) as pool:
        return list(pool.map(one, proposals))


async def _run_tasks(gate: DispatchGate, proposals, transport) -> list[object]:
    return await asyncio.gather(*(gate.run_tool_async(p, transport) for p in proposals), return_exceptions=True)


def _check_log(store, gate: DispatchGate, admitted: set[str], denied: set[str]) -> None:
    events = list(store.read(TRAJ))
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))
    intents = [e.payload.operation_id for e in events if isinstance(e.payload, ToolIntent)]
    results = [e.payload.operation_id for e in events if isinstance(e.payload, ToolResult)]
    assert sorted(intents) == sorted(results) == sorted(admitted)   # exactly one of each per operation
    rec = fold(initial_record(TRAJ), events)
    assert rec.to_dict() == gate.record.to_dict()
    assert {k for k, op in rec.operations.items() if op.status == "established"} == admitted
    assert {k for k, op in rec.operations.items() if op.status == "denied"} == denied
    assert all(r.released for r in rec.budget.reservations.values()) and len(rec.budget.reservations) == len(admitted)
    assert rec.budget.outstanding_reservations_micro_usd == 0
    step = initial_record(TRAJ)
    for ev in events:   # the budget rule held at every position of the log
        fold_step(step, ev)
        b = step.budget
        assert b.actual_consumption_micro_usd + b.outstanding_reservations_micro_usd \
            + b.finalization_reserve_micro_usd <= b.ceiling_micro_usd, ev.sequence_number


@pytest.mark.parametrize("mode", ["threads", "asyncio", "asyncio_blocking_transport"])
def test_n_parallel_calls_overlap_and_leave_one_intent_and_result_each(tmp_path, mode):
    store = make_store("sqlite", tmp_path)
    try:
        gate, inside = _gate(store, _task(5.0))
        endpoint = SlowEndpoint(pause_s=0.15, charge_usd=0.05)
        props = _proposals(N, 0.5)
        if mode == "threads":
            out = _run_threads(gate, props, endpoint)
        else:
            out = asyncio.run(_run_tasks(gate, props, endpoint.call_async if mode == "asyncio" else endpoint))
        assert not [x for x in out if isinstance(x, BaseException)], out
        assert endpoint.overlap.peak > 1, "the endpoint never saw two calls at once"
        assert inside.peak == 1, "two decide-and-append steps of the gate overlapped"
        assert sorted(endpoint.invocations) == sorted(p.operation_id for p in props)
        _check_log(store, gate, {p.operation_id for p in props}, set())
        assert gate.record.budget.actual_consumption_micro_usd == N * usd_to_micro(0.05)
    finally:
        store.close()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bound_usd=st.sampled_from([0.7, 1.0, 1.3, 2.0]), use_asyncio=st.booleans())
def test_a_budget_that_fits_k_of_n_admits_exactly_k(tmp_path_factory, bound_usd, use_asyncio):
    """Each call charges its full bound, so a settled call frees nothing: exactly
    k = (ceiling - reserve) // bound calls fit, whatever the interleaving."""
    store = make_store("sqlite", tmp_path_factory.mktemp("kofn"))
    try:
        ceiling, reserve = 5.0, 0.5
        k = (usd_to_micro(ceiling) - usd_to_micro(reserve)) // usd_to_micro(bound_usd)
        assert 0 < k < N
        gate, inside = _gate(store, _task(ceiling, reserve))
        endpoint = SlowEndpoint(pause_s=0.05, charge_usd=bound_usd)
        props = _proposals(N, bound_usd)
        out = (asyncio.run(_run_tasks(gate, props, endpoint.call_async)) if use_asyncio
               else _run_threads(gate, props, endpoint))
        denied = {p.operation_id for p, x in zip(props, out) if isinstance(x, AdmissionDenied)}
        admitted = {p.operation_id for p, x in zip(props, out) if not isinstance(x, BaseException)}
        assert len(admitted) == k and len(denied) == N - k and len(admitted | denied) == N, out
        assert sorted(endpoint.invocations) == sorted(admitted)   # counted at the endpoint
        assert inside.peak == 1
        _check_log(store, gate, admitted, denied)
    finally:
        store.close()


def test_cancelling_an_awaiting_task_does_not_abandon_an_admitted_call(tmp_path):
    """The attempt was admitted and its intent is durable: cancelling the task that awaits it lets
    it run to its evidence, so it is not left in doubt."""
    store = make_store("sqlite", tmp_path)
    try:
        gate, _ = _gate(store, _task(5.0))
        endpoint = SlowEndpoint(pause_s=0.2, charge_usd=0.05)

        async def main():
            t = asyncio.create_task(gate.run_tool_async(_proposals(1, 0.5)[0], endpoint.call_async))
            while not endpoint.invocations:
                await asyncio.sleep(0.01)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            for _ in range(300):   # the call finishes on its own, through its usage evidence
                with gate.lock:
                    if gate.record.budget.reservations and all(r.released for r in
                                                               gate.record.budget.reservations.values()):
                        return
                await asyncio.sleep(0.01)

        asyncio.run(main())
        assert gate.record.operations["read_0"].status == "established"
        _check_log(store, gate, {"read_0"}, set())
    finally:
        store.close()
