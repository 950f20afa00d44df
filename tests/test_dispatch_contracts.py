"""Repeat contracts and the idempotency key at dispatch (issue 14, "Dispatch semantics"; §11.3.3).

Fault model: a tool call reaches an endpoint that does *not* deduplicate, the endpoint acts, and the
reply is lost (a timeout, a reset connection, a partial or accepted-only reply, or the worker dies and
a new owner resumes); the proposal declared no repeat contract. Also: an endpoint that does
deduplicate, by a key, sees a retry.

Invariants: a proposal that declares no contract is ``unsafe``, so a new attempt of the operation in
doubt is refused until the attempt is settled, and the endpoint's own counter shows one invocation
(DBOS #770's duplicated write cannot happen by default); every attempt of one logical operation carries
the same idempotency key, derived from the trajectory and operation ids, and that key is what the
endpoint receives (counted at the endpoint, in process and through the live executor's HTTP app);
intents recorded before the key existed (schema 1) still decode and fold.

Goal: retries happen only where the endpoint's declared contract makes them safe, and a keyed endpoint
can recognise a retry as the same operation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.core.events import ToolIntent, ToolIntentV1, decode
from kernel_lib.core.proposals import DEFAULT_REPEAT_CONTRACT, REPEAT_SAFE_CONTRACTS, idempotency_key
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import AdmissionDenied, ConfigError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from tests.conftest import make_store
from tests.helpers import task

TRAJ = "traj-contracts"
POLICY = AdmissionPolicy({"g": {"append_stream", "run_tests"}})
#: a stream write with no declared repeat contract (DBOS #770: a retried write appended twice)
WRITE = ToolProposal("write_chunk_7", "attempt1", "append_stream", {"stream": "s1", "chunk": 7}, "g", 0.1)


class NonDeduplicatingEndpoint:
    """A scripted endpoint that acts on every request it receives (it keeps no memory of earlier
    ones), then loses the reply the way ``fault`` says. Its own list of invocations is the evidence."""

    def __init__(self, fault: str):
        self.fault = fault
        self.invocations: list[tuple[str, str, str | None]] = []   # (operation, attempt, key received)

    def __call__(self, intent: ToolIntent) -> ToolReply:
        self.invocations.append((intent.operation_id, intent.attempt_id, getattr(intent, "idempotency_key", None)))
        if self.fault == "timeout":
            raise TimeoutError("read timed out after the request was sent")
        if self.fault == "reset":
            raise ConnectionResetError("connection reset by peer")
        if self.fault == "partial":
            return ToolReply("partial", outcome={"written": "unknown"})
        if self.fault == "accepted":
            return ToolReply("accepted", job_handle="job-1")
        raise SystemExit("worker killed after the request left")   # fault == "crash"


class KeyedEndpoint:
    """A scripted endpoint that deduplicates by the idempotency key it receives: one effect per key,
    a repeat answered from the stored result. Counts every request and every effect itself."""

    def __init__(self, lose_first_reply: bool = True):
        self.keys_received: list[str | None] = []
        self.effects: dict[str, int] = {}
        self._lose = lose_first_reply

    def __call__(self, intent: ToolIntent) -> ToolReply:
        key = intent.idempotency_key
        self.keys_received.append(key)
        duplicate = key in self.effects
        if not duplicate:
            self.effects[key] = self.effects.get(key, 0) + 1
        if self._lose:
            self._lose = False
            raise TimeoutError("reply lost")
        return ToolReply("completed", outcome={"duplicate": duplicate}, observation_complete=True)


def _gate(store, owner_epoch: int = 0) -> DispatchGate:
    return DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=owner_epoch), POLICY)


def _started(store) -> DispatchGate:
    gate = _gate(store)
    gate.start(task())
    return gate


def _intents(store, operation_id: str) -> list[ToolIntent]:
    return [e.payload for e in store.read(TRAJ)
            if isinstance(e.payload, ToolIntent) and e.payload.operation_id == operation_id]


# --- an undeclared contract is unsafe -------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(fault=st.sampled_from(["timeout", "reset", "partial", "accepted", "crash"]), retries=st.integers(1, 3),
       resume=st.booleans())
def test_an_undeclared_contract_is_unsafe_and_a_retry_in_doubt_is_refused_until_settled(fault, retries, resume):
    """The endpoint acted once and the reply was lost; every retry of the in-doubt operation (with
    the default contract, by this owner or by a new one after a resume) is refused and never reaches
    the endpoint; once reconciliation settles the attempt, the operation is established from that
    evidence, still with one invocation at the endpoint."""
    store = MemoryStore()
    gate = _started(store)
    endpoint = NonDeduplicatingEndpoint(fault)
    assert WRITE.repeat_contract == DEFAULT_REPEAT_CONTRACT == "unsafe" not in REPEAT_SAFE_CONTRACTS
    if fault == "crash":
        with pytest.raises(SystemExit):
            gate.run_tool(WRITE, endpoint)
    else:
        gate.run_tool(WRITE, endpoint)
    if resume or fault == "crash":   # a new owner folds the log and carries on
        gate = _gate(store, owner_epoch=store.claim_epoch(TRAJ))
    assert gate.record.in_doubt() == ["write_chunk_7"]
    for n in range(2, 2 + retries):
        with pytest.raises(AdmissionDenied, match="unsafe"):
            gate.run_tool(dataclasses.replace(WRITE, attempt_id=f"attempt{n}"), endpoint)
    assert len(endpoint.invocations) == 1, endpoint.invocations      # counted by the endpoint itself
    assert [i.attempt_id for i in _intents(store, "write_chunk_7")] == ["attempt1"]
    assert _intents(store, "write_chunk_7")[0].repeat_contract == "unsafe"

    # settlement (reconciliation with the endpoint's positive evidence) establishes the operation;
    # running it again would be a new operation with its own id
    gate.record_evidence("write_chunk_7", "attempt1", ToolReply("completed", outcome={"written": True},
                                                                observation_complete=True), source="reconciliation")
    assert gate.record.operations["write_chunk_7"].status == "established"
    with pytest.raises(AdmissionDenied, match="established"):
        gate.run_tool(dataclasses.replace(WRITE, attempt_id="attempt9"), endpoint)
    assert len(endpoint.invocations) == 1
    assert fold(initial_record(TRAJ), store.read(TRAJ)).to_dict() == gate.record.to_dict()


def test_a_declared_repeat_safe_contract_still_licenses_a_retry(tmp_path):
    """Declaring ``idempotency_key`` for an endpoint that honours it keeps retries possible: the
    retry is admitted and the keyed endpoint acts once (its own count)."""
    store = make_store("sqlite", tmp_path)
    try:
        gate = _started(store)
        keyed = dataclasses.replace(WRITE, repeat_contract="idempotency_key")
        endpoint = KeyedEndpoint()
        gate.run_tool(keyed, endpoint)
        rec = gate.run_tool(dataclasses.replace(keyed, attempt_id="attempt2"), endpoint)
        assert rec.operations["write_chunk_7"].status == "established"
        assert rec.operations["write_chunk_7"].outcome["duplicate"] is True
        assert list(endpoint.effects.values()) == [1] and len(endpoint.keys_received) == 2
    finally:
        store.close()


def test_an_unknown_repeat_contract_is_a_typed_error():
    with pytest.raises(ConfigError, match="repeat_contract"):
        dataclasses.replace(WRITE, repeat_contract="idempotent_key")


# --- the idempotency key --------------------------------------------------------------------------


def test_every_attempt_of_one_operation_carries_the_same_key_to_the_endpoint(tmp_path):
    """attempt1 (reply lost), attempt2 by the same owner, attempt3 by a new owner after a resume:
    the endpoint received one key three times, the operation's derived key, and acted once; the
    log's intents carry that key; another operation carries another key."""
    store = make_store("sqlite", tmp_path)
    try:
        gate = _started(store)
        keyed = dataclasses.replace(WRITE, repeat_contract="idempotency_key")
        endpoint = KeyedEndpoint()
        gate.run_tool(keyed, endpoint)                                             # reply lost: in doubt
        endpoint._lose = True
        gate.run_tool(dataclasses.replace(keyed, attempt_id="attempt2"), endpoint)  # lost again
        gate = _gate(store, owner_epoch=store.claim_epoch(TRAJ))                   # a new owner
        gate.run_tool(dataclasses.replace(keyed, attempt_id="attempt3"), endpoint)
        other = dataclasses.replace(keyed, operation_id="write_chunk_8")
        endpoint._lose = False
        gate.run_tool(other, endpoint)
        key = idempotency_key(TRAJ, "write_chunk_7")
        assert endpoint.keys_received == [key, key, key, idempotency_key(TRAJ, "write_chunk_8")]
        assert endpoint.effects == {key: 1, idempotency_key(TRAJ, "write_chunk_8"): 1}
        assert [i.idempotency_key for i in _intents(store, "write_chunk_7")] == [key, key, key]
        assert gate.record.operations["write_chunk_7"].status == "established"
    finally:
        store.close()


@settings(max_examples=200)
@given(a=st.tuples(st.text(max_size=12), st.text(max_size=12)), b=st.tuples(st.text(max_size=12),
                                                                             st.text(max_size=12)))
def test_the_key_is_a_function_of_the_operation_identity_only(a, b):
    """Same (trajectory, operation): same key; a different pair (another trajectory with the same
    operation id included): a different key. Always a short ASCII token an intent can hold."""
    ka, kb = idempotency_key(*a), idempotency_key(*b)
    assert ka == idempotency_key(*a) and re.fullmatch(r"idem-[0-9a-f]{32}", ka)
    assert (ka == kb) == (a == b)
    ToolIntent(operation_id="o", attempt_id="a", tool="t", repeat_contract="unsafe", grant_id="g",
               authorization_ref="x", reservation_ref="y", idempotency_key=ka)   # passes the secret scan


# --- old logs --------------------------------------------------------------------------------------


def _v1_log(store, contract: str) -> MemoryStore:
    """A schema-1 log (written before the key existed): started, one attempt admitted and in doubt."""
    gate = _started(store)
    gate.run_tool(dataclasses.replace(WRITE, repeat_contract=contract), NonDeduplicatingEndpoint("timeout"))
    events = list(store.read(TRAJ))
    old = MemoryStore()
    for ev in events:
        if isinstance(ev.payload, ToolIntent):   # re-stamp the intent as a v1 log holds it
            fields = ev.payload.model_dump(exclude={"idempotency_key"})
            ev = ev.restamp(payload=ToolIntentV1(**fields))
        old.append_batch([ev], old.strongest_tier())
    return old


@pytest.mark.parametrize("contract", ["unsafe", "idempotency_key"])
def test_an_intent_recorded_without_a_key_decodes_folds_and_a_new_attempt_gets_the_key(contract):
    old = _v1_log(MemoryStore(), contract)
    v1 = [e for e in old.read(TRAJ) if e.event_type == "ToolIntent"]
    assert [e.schema_version for e in v1] == [1] and b'"idempotency_key":' not in v1[0].canonical
    back = decode(v1[0].canonical)
    assert type(back.payload) is ToolIntentV1 and back.payload.idempotency_key is None and back == v1[0]
    gate = _gate(old, owner_epoch=old.claim_epoch(TRAJ))
    assert gate.record.in_doubt() == ["write_chunk_7"]
    endpoint = KeyedEndpoint(lose_first_reply=False)
    retry = dataclasses.replace(WRITE, attempt_id="attempt2", repeat_contract=contract)
    if contract == "unsafe":
        with pytest.raises(AdmissionDenied):
            gate.run_tool(retry, endpoint)
        assert endpoint.keys_received == []
    else:
        gate.run_tool(retry, endpoint)
        new = [e for e in old.read(TRAJ) if e.event_type == "ToolIntent"][-1]
        assert new.schema_version == ToolIntent.schema_version
        assert endpoint.keys_received == [idempotency_key(TRAJ, "write_chunk_7")]


# --- the live executor: the key over HTTP -----------------------------------------------------------


class _SyncASGI(httpx.BaseTransport):
    """A blocking httpx transport into an ASGI app served on an event loop in another thread (what
    the worker's blocking client meets in a real executor, without a socket)."""

    def __init__(self, app, loop: asyncio.AbstractEventLoop):
        self._inner, self._loop = httpx.ASGITransport(app=app), loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def go() -> httpx.Response:
            r = await self._inner.handle_async_request(request)
            return httpx.Response(r.status_code, headers=r.headers, content=await r.aread())
        return asyncio.run_coroutine_threadsafe(go(), self._loop).result(10)


@pytest.fixture
def executor(tmp_path):
    """The live executor's app in process, its service on a loop of its own: jobs fail fast on the
    fake snapshot, which is all a deduplication count needs."""
    from kernel_lib.live.executor import ExecutorService, build_app

    service = ExecutorService(tmp_path / "snap", "0" * 64, tmp_path / "state", usd_per_s=0.0, test_delay_s=0.0)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url="http://testserver", transport=_SyncASGI(build_app(service), loop)) as client:
            yield service, client
    finally:
        asyncio.run_coroutine_threadsafe(service.shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


ARGS = {"snapshot_digest": "0" * 64, "check": "pytest -q"}


def test_the_live_executor_receives_the_key_and_deduplicates_by_it(executor):
    """Through the worker's transport: attempt1 reaches the executor, its reply is lost; attempt2
    (declared ``idempotency_key``, as the worksheet's run_tests tool is) carries the same key in the
    header and the body; the executor holds one job under it, submitted twice."""
    from kernel_lib.live.worker import make_transport

    service, client = executor
    gate = _started(MemoryStore())
    send = make_transport(client, "http://testserver", gate.log)

    def reply_lost(intent):
        send(intent)
        raise TimeoutError("reply lost")

    test = ToolProposal("test_r18", "attempt1", "run_tests", ARGS, "g", 0.5, repeat_contract="idempotency_key")
    gate.run_tool(test, reply_lost)
    gate.run_tool(dataclasses.replace(test, attempt_id="attempt2"), send)
    key = idempotency_key(TRAJ, "test_r18")
    assert list(service.jobs_by_key) == [key] and list(service.jobs) == ["test_r18"]
    job = service.jobs["test_r18"]
    assert (job.idempotency_key, job.submissions, job.attempt_id) == (key, 2, "attempt1")


def test_the_executor_refuses_a_key_that_disagrees_or_claims_a_held_operation(executor):
    service, client = executor
    body = {"operation_id": "test_r18", "attempt_id": "attempt1", **ARGS}
    assert client.post("/jobs", json={**body, "idempotency_key": "idem-a"},
                       headers={"Idempotency-Key": "idem-b"}).status_code == 422
    assert client.post("/jobs", json=body, headers={"Idempotency-Key": "bad key"}).status_code == 422
    assert client.post("/jobs", json=body, headers={"Idempotency-Key": "idem-a"}).status_code == 200
    again = client.post("/jobs", json={**body, "attempt_id": "attempt2"}, headers={"Idempotency-Key": "idem-a"})
    assert again.status_code == 200 and again.json()["duplicate"] is True
    # the same operation id under another key: another logical operation (e.g. another trajectory's)
    other = client.post("/jobs", json=body, headers={"Idempotency-Key": "idem-c"})
    assert other.status_code == 409 and other.json()["reason"] == "operation_id_in_use"
    # the same key for a different request
    moved = client.post("/jobs", json={**body, "operation_id": "test_r19"}, headers={"Idempotency-Key": "idem-a"})
    assert moved.status_code == 409 and moved.json()["reason"] == "conflicting_request"
    assert len(service.jobs) == 1 and service.jobs["test_r18"].submissions == 2


def test_the_client_sends_the_requests_key_as_the_header():
    from kernel_lib.live.client import ExecutorClient

    body = {"operation_id": "test_r18", "attempt_id": "attempt1", **ARGS, "idempotency_key": "idem-z"}
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("idempotency-key"))
        return httpx.Response(200, json={"job_handle": "j", "status": "accepted"})

    with ExecutorClient("http://127.0.0.1:1", transport=httpx.MockTransport(handler)) as ex:
        ex.submit(body)
        ex.submit({k: v for k, v in body.items() if k != "idempotency_key"}, idempotency_key="idem-y")
    assert seen == ["idem-z", "idem-y"]


def test_a_contract_that_is_not_a_string_is_a_config_error():
    """Fault: a caller passes a list or dict as the repeat contract. Invariant: every unknown
    contract is refused the same way. Goal: ConfigError, not a TypeError from a set lookup."""
    from kernel_lib.core.proposals import ToolProposal
    from kernel_lib.errors import ConfigError
    for bad in (["unsafe"], {"c": 1}, None, 3, b"unsafe"):
        with pytest.raises(ConfigError, match="repeat_contract must be one of"):
            ToolProposal(operation_id="op", attempt_id="a1", tool="t", arguments={}, grant_id="g",
                         cost_bound_usd=0.1, repeat_contract=bad)
