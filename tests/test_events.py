"""Events (§11.2.2): canonical encoding, digests, typed decode errors, no secrets in intents."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernel_lib.core.events as E
from kernel_lib.errors import MalformedEventError, UnknownEventTypeError, UnknownSchemaVersionError
from tests.helpers import ev, intent, task

TABLE_1 = ["TaskStarted", "ContextBuilt", "ModelReplied", "Authorized", "BudgetReserved", "BudgetSettled",
           "ToolIntent", "ToolResult", "ControlChanged", "PlanChanged", "ApprovalRequested",
           "ApprovalResolved", "Compacted", "RuntimeInput", "Checkpoint"]

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**53 + 1, 2**53 - 1),
                         st.floats(min_value=-1e15, max_value=1e15, allow_nan=False), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda c: st.one_of(
    st.lists(c, max_size=4), st.dictionaries(st.text(alphabet="abcdefgh_", min_size=1, max_size=8), c, max_size=4)),
    max_leaves=12)


def test_every_table_1_family_and_recovery_records_are_registered():
    known = E.registered_types()
    for t in TABLE_1 + ["CompensationIssued", "QuarantineChanged", "WatchdogIntervened", "RecoveryDecided",
                        "RepairOutcome"]:
        assert 1 in known[t], t


@settings(max_examples=150)
@given(args=st.dictionaries(st.text(alphabet="abcdefgh_", min_size=1, max_size=8), json_values, max_size=5),
       seq=st.integers(1, 10**6), epoch=st.integers(0, 50))
def test_encoding_is_canonical_and_roundtrips(args, seq, epoch):
    e1 = ev(intent(arguments=args), seq, epoch=epoch)
    # the same event built from a dict with reversed key insertion order gives the same bytes
    e2 = ev(intent(arguments=dict(reversed(list(args.items())))), seq, epoch=epoch)
    assert e1.canonical == e2.canonical and e1.digest == e2.digest
    back = E.decode(e1.canonical)
    assert back == e1 and back.canonical == e1.canonical and back.digest == e1.digest


def test_values_outside_the_canonical_json_domain_are_a_typed_error():
    for bad in ({"n": 2**60}, {"n": 1e17}, {"n": float("nan")}, {"n": float("inf")}, {"s": {1, 2}},
                {1: "a", "1": "b"}, {"t": "\ud800"}, {"b": b"bytes"}):
        with pytest.raises(ValueError):
            intent(arguments=bad)
    deep = cur = {}
    for _ in range(100):
        cur["x"] = {}
        cur = cur["x"]
    with pytest.raises(ValueError, match="deeper"):
        intent(arguments=deep)


def test_digest_changes_with_any_field():
    base = ev(intent(), 3)
    assert ev(intent(), 4).digest != base.digest
    assert ev(intent(), 3, epoch=1).digest != base.digest
    assert ev(intent(attempt="attempt2"), 3).digest != base.digest


def _raw(event, **changes):
    d = event.to_dict()
    d.update(changes)
    return json.dumps(d).encode()


def test_unknown_type_is_a_typed_error_naming_the_event():
    raw = _raw(ev(task(), 1), event_type="Teleported")
    with pytest.raises(UnknownEventTypeError) as ei:
        E.decode(raw)
    assert ei.value.event_id == "traj-a-1" and "Teleported" in str(ei.value)


def test_unknown_version_is_a_typed_error():
    with pytest.raises(UnknownSchemaVersionError) as ei:
        E.decode(_raw(ev(task(), 1), schema_version=7))
    assert "traj-a-1" in str(ei.value) and "[1]" in str(ei.value)


@pytest.mark.parametrize("change", [
    {"sequence_number": 0}, {"sequence_number": "3"}, {"owner_epoch": -1}, {"provenance": {"tenant": "x"}},
    {"payload": {"task_id": "t"}}, {"payload": "nope"}, {"extra": 1},
])
def test_malformed_envelope_or_payload_is_a_typed_error(change):
    with pytest.raises(MalformedEventError):
        E.decode(_raw(ev(task(), 1), **change))


@pytest.mark.parametrize("raw", [b"", b"\xff\xfe", b"[1,2]", b"{not json"])
def test_garbage_is_a_typed_error(raw):
    with pytest.raises(MalformedEventError):
        E.decode(raw)


def test_non_canonical_bytes_are_refused():
    e = ev(task(), 1)
    pretty = json.dumps(e.to_dict(), indent=2).encode()
    assert E.from_dict(json.loads(pretty)) == e     # same content is fine as data...
    with pytest.raises(MalformedEventError, match="canonical"):
        E.decode(pretty)                              # ...but stored bytes must be canonical


@pytest.mark.parametrize("args", [{"api_key": "x"}, {"headers": {"Authorization": "y"}},
                                  {"cmd": "curl -H 'Bearer abcdefgh12345'"}, {"env": [{"password": "p"}]},
                                  {"x-api-key": "k"}, {"aws_secret_access_key": "k"}, {"GITHUB_TOKEN": "k"},
                                  {"note": "key sk-abcdefghijklmnopqrstu inside text"},
                                  {"jwt_like": "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.sig"}])
def test_an_intent_never_holds_a_secret(args):
    with pytest.raises(ValueError, match="credential"):
        intent(arguments=args)
    assert intent(arguments={"input_tokens": 5, "max_tokens": 9}).grant_id == "g"   # ordinary keys are fine


def test_redaction_keeps_evidence_and_drops_the_secret():
    outcome = {"token": "abc", "log": "auth: Bearer abcdefgh12345 ok", "passed": 3}
    clean, paths = E.redact_secrets(outcome)
    assert paths == ["token", "log"] and clean["passed"] == 3
    assert "abcdefgh12345" not in str(clean) and clean["token"] == "[redacted]"
    assert E.find_secrets(clean) == []


def test_registering_a_new_family_needs_no_envelope_change():
    class SagaStepCompensated(E.Payload):
        event_type = "SagaStepCompensatedTest"
        schema_version = 1
        saga_id: str

    E.register(SagaStepCompensated)
    e = ev(SagaStepCompensated(saga_id="s1"), 1)
    assert E.decode(e.canonical) == e
    assert set(e.to_dict()) == set(ev(task(), 1).to_dict())


@pytest.mark.parametrize("key", ["next_page_token", "stop_token", "authorization_ref", "key", "bypass", "pwd",
                                 "max_tokens", "input_tokens", "token_count", "keyboard"])
def test_ordinary_keys_are_not_mistaken_for_credentials(key):
    assert E.find_secrets({key: "value-1234"}) == []


@pytest.mark.parametrize("value", [
    {"ghp_abcdefghijklmnopqrstuvwxyz1234": 1},                      # a secret used as a key
    {"note": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nsecretbody\n-----END RSA PRIVATE KEY-----"},
    {"url": "https://alice:hunter2@example.com/x"}, {"h": "authorization: basic dXNlcjpwYXNz"},
    {"env": "API_KEY=abcd1234 other"}, {"t": "xoxb-1234567890-abc"}, {"g": "AIzaSyA1234567890abcdefghijklmnopqrstu"},
    {"password": "[redacted:hunter2]"},                              # a fake marker is still a secret
])
def test_redaction_removes_the_whole_secret(value):
    clean, paths = E.redact_secrets(value)
    assert paths and E.find_secrets(clean) == []
    for secret in ("hunter2", "ghp_abc", "secretbody", "dXNlcjpwYXNz", "abcd1234", "xoxb-123", "AIzaSyA"):
        assert secret not in str(clean)
