"""The read path of the log: a fast route that must decide exactly as the checked one (§11.2.1, §11.8.4).

Fault model: reading a 100 000-event segment log cost most of its time in the credential scan and
in two walks of every payload, so the read path was given fast routes: msgspec decoding, one walk
and a prefilter for the credential scan (``decode_stored``), msgspec for the fields open indexes
(``_envelope_fields_fast``). A fast route that accepted a body the checked route refuses, or read
it as another event, would weaken the log's integrity silently. Invariant: for every input, the
fast routes give the same result as the checked ones: the same Event (same fields, canonical bytes
and digest), or the same typed error with the same message; on the store, the same index, the same
recovery report, the same events read; the credential prefilter (one Aho-Corasick search) finds a
span exactly where the shape-by-shape scan does; the payload validator without the two prechecked
model validators builds what ``model_validate`` builds; an Event filled slot by slot is the one
its constructor builds. Goal: a read path as fast as a JSON decoder allows, with every check the
reader made before (frame CRCs, digests, envelope and schema, unknown versions, credentials, torn
and corrupt tails) still made.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_core import SchemaValidator

import kernel_lib.core.events as events_mod
import kernel_lib.log.segment as segment_mod
from kernel_lib.core.events import Event, _decode_stored_checked, _decode_stored_fast, decode_stored
from kernel_lib.errors import KernelError
from kernel_lib.log import SegmentStore, SQLiteStore
from kernel_lib.sim.events import EventMaker

HISTORIES = Path(__file__).resolve().parent / "histories"


def _history_bodies() -> list[bytes]:
    """Every event of every frozen history (all families and schema versions they hold)."""
    out: dict[bytes, None] = {}
    stores = [(SegmentStore, p) for p in sorted(HISTORIES.glob("v*/*/segments"))]
    stores += [(SQLiteStore, p) for p in sorted(HISTORIES.glob("v*/*/log.sqlite"))]
    for cls, path in stores:
        s = cls.open(path, read_only=True)
        try:
            for t in s.trajectories():
                for e in _read_live(s, t):
                    out[e.canonical] = None
        finally:
            s.close()
    return list(out)


def _read_live(store, trajectory_id: str):
    """The events a store still holds (after a compacted prefix, if any)."""
    retired = getattr(store, "retired_through", lambda _t: 0)(trajectory_id)
    return store.read(trajectory_id, start=retired + 1)


def _maker_bodies(n: int = 60) -> list[bytes]:
    m = EventMaker("traj_read_path", random.Random(7))
    out = []
    for _ in range(n):
        out.append(m.make().canonical)
        m.next_seq += 1
    return out


SEEDS = _history_bodies() + _maker_bodies()


def _outcome(fn, data: bytes):
    """A comparable result: the event with its bytes, digest and payload class, or the typed error."""
    try:
        ev = fn(data)
    except KernelError as exc:
        return ("refused", type(exc).__name__, str(exc))
    return ("event", ev, ev.canonical, ev.digest, type(ev.payload), ev.payload.model_dump(mode="json"),
            ev.payload.model_fields_set, ev.payload.__dict__)


# --- generated inputs: genuine events, then changed in every way a stored body can be ---------------

_SECRETS = ["sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2", "Bearer abcdef123456", "ghp_" + "a" * 36, "password=hunter22x",
            "AKIA" + "ABCDEFGHIJKLMNOP", "https://user:pa55word@example.org/x", "token: 5d41402a-bc4b-11ee"]
json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-2**60, 2**60), st.integers(),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12), st.sampled_from(_SECRETS),
    st.sampled_from(["", "[redacted]", "idempotency_key", "key"]))
json_value = st.recursive(json_leaf, lambda c: st.one_of(
    st.lists(c, max_size=3),
    st.dictionaries(st.one_of(st.text(max_size=6), st.sampled_from(["api_key", "token", "auth", "cookies", "x"])),
                    c, max_size=3)), max_leaves=8)
RAW_INSERTS = [b"NaN", b"1e400", b"-Infinity", b'"\\ud800"', b'"\\udc00\\ud800"', b'"\xff"', b'"\xed\xa0\x80"',
               b"01", b"1.", b"[1,]", b'"a\x01"', b"\xef\xbb\xbf", b"\x00", b"  ", b'"\\u0073k-abc"', b"9" * 30,
               b"1.0", b"true", b"{}", b"[]", b'"\\/"']


@st.composite
def stored_bodies(draw) -> bytes:
    body = draw(st.sampled_from(SEEDS))
    how = draw(st.sampled_from(["as is", "payload field", "envelope field", "drop key", "extra key", "raw insert",
                                "flip byte", "truncate", "duplicate key", "deep", "reencode"]))
    d = json.loads(body)
    if how == "as is":
        return body
    if how == "payload field":
        keys = sorted(d["payload"]) + ["extra_field"]
        d["payload"][draw(st.sampled_from(keys))] = draw(json_value)
    elif how == "envelope field":
        d[draw(st.sampled_from(sorted(d)))] = draw(json_value)
    elif how == "drop key":
        target = draw(st.sampled_from(["envelope", "payload", "provenance"]))
        obj = d if target == "envelope" else d[target]
        if obj:
            obj.pop(draw(st.sampled_from(sorted(obj))))
    elif how == "extra key":
        d[draw(st.sampled_from(["extra", "payload", "sequence_number"]))] = draw(json_value)
    elif how == "deep":
        v: object = draw(json_leaf)
        for _ in range(draw(st.integers(60, 70))):
            v = [v] if draw(st.booleans()) else {"k": v}
        d["payload"][draw(st.sampled_from(sorted(d["payload"]) + ["x"]))] = v
    elif how in ("raw insert", "flip byte", "truncate", "duplicate key"):
        raw = bytearray(body)
        if how == "raw insert":
            i = draw(st.integers(0, len(raw)))
            raw[i:i + draw(st.integers(0, 4))] = draw(st.sampled_from(RAW_INSERTS))
        elif how == "flip byte":
            i = draw(st.integers(0, len(raw) - 1))
            raw[i] ^= draw(st.integers(1, 255))
        elif how == "truncate":
            del raw[draw(st.integers(0, len(raw) - 1)):]
        else:
            k = draw(st.sampled_from([b'"sequence_number":', b'"event_type":', b'"trajectory_id":']))
            raw[-1:] = b"," + k + draw(st.sampled_from([b"2", b'"x"', b"1", b'"ToolIntent"'])) + b"}"
        return bytes(raw)
    return json.dumps(d, ensure_ascii=draw(st.booleans()), separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
                      sort_keys=draw(st.booleans())).encode("utf-8", "surrogatepass")


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=stored_bodies())
def test_the_fast_decode_decides_as_the_checked_route(data):
    fast = _decode_stored_fast(data)
    checked = _outcome(_decode_stored_checked, data)
    if fast is not None:
        assert checked[0] == "event", f"the fast route accepted what the checked route refuses: {checked}"
        assert _outcome(_decode_stored_fast, data) == checked
    assert _outcome(decode_stored, data) == checked


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=stored_bodies())
def test_the_fields_open_indexes_are_the_ones_json_loads_finds(data, monkeypatch_module):
    def old(body):
        with monkeypatch_module.context() as m:
            m.setattr(segment_mod, "_envelope_fields_fast", lambda _b: None)
            try:
                return segment_mod._event_fields(body)
            except ValueError as exc:
                return ("refused", str(exc))
    want = old(data)
    fast = segment_mod._envelope_fields_fast(data)
    if fast is not None:
        assert fast == want
    try:
        got = segment_mod._event_fields(data)
    except ValueError as exc:
        got = ("refused", str(exc))
    assert got == want


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_genuine_events_of_every_frozen_family_take_the_fast_route():
    """Every event of the frozen histories (every family and schema version they hold) and of the
    simulator decodes by the fast route to the checked route's event; the seeds cover more than
    one schema version of a family."""
    versions = {(json.loads(b)["event_type"], json.loads(b)["schema_version"]) for b in SEEDS}
    assert len(versions) >= 12 and any(v > 1 for _t, v in versions), versions
    for body in SEEDS:
        assert _decode_stored_fast(body) is not None, json.loads(body)["event_type"]
        assert _outcome(_decode_stored_fast, body) == _outcome(_decode_stored_checked, body)


def test_a_clean_payload_is_walked_once_and_not_dumped(monkeypatch):
    """Situation: decoding walked each payload twice (check_json before the schema, model_dump and
    find_secrets after it). Invariant: decoding a clean stored event calls neither walk."""
    bodies = _maker_bodies(14)
    calls = {"check_json": 0, "find_secrets": 0}
    for name in calls:
        real = getattr(events_mod, name)

        def counted(*a, _real=real, _name=name, **k):
            calls[_name] += 1
            return _real(*a, **k)
        monkeypatch.setattr(events_mod, name, counted)
    for body in bodies:
        decode_stored(body)
    assert calls == {"check_json": 0, "find_secrets": 0}


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(st.text(max_size=60), st.sampled_from(_SECRETS),
                      st.builds(lambda a, s, b: a + s + b, st.text(max_size=8), st.sampled_from(_SECRETS),
                                st.text(max_size=8))))
def test_the_credential_prefilter_finds_what_the_shape_scan_finds(text, monkeypatch_module):
    got = events_mod._text_secrets(text)
    with monkeypatch_module.context() as m:
        m.setattr(events_mod, "_may_hold_secret", lambda _t: True)
        want = events_mod._text_secrets(text)
    assert got == want


_TRIGGERS = events_mod._ALL_TRIGGERS + events_mod._ALL_LOWER_TRIGGERS
# text near the prefilter's edges: triggers in any case, characters whose lower case is ASCII or
# longer than one character (Kelvin sign, dotted capital I), long s, final sigma, NUL, surrogates
trigger_text = st.lists(st.one_of(
    st.sampled_from(_TRIGGERS), st.sampled_from(_TRIGGERS).map(str.upper), st.sampled_from(_TRIGGERS).map(str.title),
    st.sampled_from(_SECRETS),
    st.sampled_from(["\u212a", "\u0130", "\u017f", "\u03a3", "\x00", "\ud800", "-", "_", " "]),
    st.text(max_size=6)), max_size=8).map("".join)


def _trigger_held(text: str) -> bool:
    """The shapes' own test (:func:`_text_secrets`): a literal trigger in the text, or a lower-case
    one in its lower-cased copy."""
    return (any(t in text for t in events_mod._ALL_TRIGGERS)
            or any(t in text.lower() for t in events_mod._ALL_LOWER_TRIGGERS))


@settings(max_examples=2000, deadline=None)
@given(text=trigger_text)
def test_the_one_search_prefilter_misses_no_trigger(text):
    """Situation: the prefilter is one Aho-Corasick search of the lower-cased text for every trigger
    lower-cased. Invariant: it answers True wherever a shape would be tried."""
    if _trigger_held(text):
        assert events_mod._may_hold_secret(text)


@settings(max_examples=1000, deadline=None)
@given(strings=st.lists(trigger_text, max_size=5))
def test_clean_strings_is_the_shape_scan_of_each_string(strings, monkeypatch_module):
    """Invariant: the joined look of :func:`_clean_strings` (its prefilter, its UTF-8 check, its
    cache of short clean strings) answers True exactly when every string is UTF-8 text in which the
    shape-by-shape scan, with no prefilter, finds nothing."""
    def utf8(s: str) -> bool:
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    with monkeypatch_module.context() as m:
        m.setattr(events_mod, "_may_hold_secret", lambda _t: True)
        want = all(utf8(s) and not events_mod._text_secrets(s) for s in strings)
    assert events_mod._clean_strings(list(strings)) == want


# --- the parts of the fast route: the payload validator and the event's construction ----------------

def _validated(fn, p):
    try:
        m = fn(p)
    except ValidationError as exc:
        return ("refused", [(e["type"], e["loc"]) for e in exc.errors()])
    return ("model", type(m), m, m.model_fields_set, m.__dict__)


def test_every_registered_record_gets_its_schema_without_the_two_prechecked_validators():
    """The fast route's validator of each record is its own core schema less the function nodes of
    ``Payload._plain_json`` and ``Payload._no_secrets`` (so a pydantic whose layout differs falls
    back to ``model_validate`` instead of dropping another node)."""
    for (et, sv), cls in events_mod._REGISTRY.items():
        validate = events_mod._stored_validator(et, sv)
        assert isinstance(getattr(validate, "__self__", None), SchemaValidator), cls.__name__
        removed: list[str] = []
        stripped = events_mod._without_prechecked_validators(cls.__pydantic_core_schema__, removed)
        assert sorted(removed) == ["function-after", "function-before"], cls.__name__
        funcs = [n["function"]["function"] for n in events_mod._schema_nodes(stripped)
                 if n.get("type", "").startswith("function-")]
        assert not any(getattr(f, "__func__", f) in events_mod._PRECHECKED_VALIDATORS for f in funcs)
    assert events_mod._stored_validator("NoSuchEvent", 1) is None


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=stored_bodies())
def test_the_stripped_validator_decides_as_model_validate_with_the_prechecked_context(data):
    """Situation: the fast route validates a payload with a schema from which two model validators
    were removed. Invariant: on any payload data (genuine, or changed in every way the generator
    knows), it returns the same instance (class, fields, fields set) or refuses with the same errors
    as the record's ``model_validate`` with :data:`_PRECHECKED`."""
    try:
        d = json.loads(data)
    except ValueError:
        return
    if not isinstance(d, dict):
        return
    for key in ((d.get("event_type"), d.get("schema_version")), ("ToolIntent", 3), ("ContextBuilt", 1)):
        cls = events_mod._REGISTRY.get(key) if isinstance(key[0], str) and type(key[1]) is int else None
        if cls is None:
            continue
        p = d.get("payload")
        want = _validated(lambda x, _c=cls: _c.model_validate(x, context=events_mod._PRECHECKED), p)
        assert _validated(events_mod._stored_validator(*key), p) == want


def test_an_event_built_slot_by_slot_is_the_one_its_constructor_builds():
    for body in SEEDS[:50]:
        ev = _decode_stored_checked(body)
        values = [getattr(ev, f.name) for f in dataclasses.fields(Event)]
        built = events_mod._stored_event(*values)
        assert type(built) is Event and built == Event(*values) == ev
        assert [getattr(built, f.name) for f in dataclasses.fields(Event)] == values
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.sequence_number = 9   # type: ignore[misc]


# --- the stores: torn and corrupt logs open and read the same with the fast routes off -------------

_counter = itertools.count()


def _without_fast_routes(m: pytest.MonkeyPatch) -> None:
    m.setattr(segment_mod, "_envelope_fields_fast", lambda _b: None)
    m.setattr(events_mod, "_decode_stored_fast", lambda *_a: None)


def _open_and_read(path: Path):
    try:
        s = SegmentStore.open(path, read_only=True)
    except KernelError as exc:
        return ("open refused", type(exc).__name__, str(exc))
    try:
        rep = s.recovery
        got = [("report", rep.torn_tail_found, rep.torn_tail_at, rep.torn_tail_reason, rep.tail_damage,
                rep.events_recovered)]
        for t in s.trajectories():
            try:
                got.append([(e.canonical, e.digest) for e in s.read(t)])
            except KernelError as exc:
                got.append(("read refused", type(exc).__name__, str(exc)))
        return got
    finally:
        s.close()


@pytest.fixture(scope="module")
def segment_template(tmp_path_factory):
    path = tmp_path_factory.mktemp("template") / "log"
    s = SegmentStore.open(path, create=True)
    m = EventMaker("traj_read_path", random.Random(3))
    evs = []
    for _ in range(40):
        evs.append(m.make())
        m.next_seq += 1
    s.append_batch(evs[:25], "fdatasync")
    s.append_batch(evs[25:], "write")
    s.close()
    return (path / "00000001.seg").read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_segment_logs_open_and_read_the_same_with_the_fast_routes_off(data, segment_template, tmp_path,
                                                                              monkeypatch_module):
    raw = bytearray(segment_template)
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
        if not raw:
            break
        i = data.draw(st.integers(0, len(raw) - 1))
        if how == "flip":
            raw[i] ^= data.draw(st.integers(1, 255))
        elif how == "truncate":
            del raw[i:]
        else:
            raw[i:i] = data.draw(st.sampled_from(RAW_INSERTS))
    path = tmp_path / f"log{next(_counter)}"
    path.mkdir()
    (path / "00000001.seg").write_bytes(bytes(raw))
    fast = _open_and_read(path)
    with monkeypatch_module.context() as m:
        _without_fast_routes(m)
        checked = _open_and_read(path)
    assert fast == checked


def test_frozen_histories_read_the_same_with_the_fast_routes_off(monkeypatch):
    """Every frozen store (segment and SQLite) reads to the same events, bytes and digests."""
    stores = [(SegmentStore, p) for p in sorted(HISTORIES.glob("v*/*/segments"))]
    stores += [(SQLiteStore, p) for p in sorted(HISTORIES.glob("v*/*/log.sqlite"))]
    assert stores

    def read_all():
        out = []
        for cls, p in stores:
            s = cls.open(p, read_only=True)
            try:
                out.append([(e, e.canonical, e.digest) for t in s.trajectories() for e in _read_live(s, t)])
            finally:
                s.close()
        return out
    fast = read_all()
    with monkeypatch.context() as m:
        _without_fast_routes(m)
        assert read_all() == fast


@settings(max_examples=1000, deadline=None)
@given(text=trigger_text, pad=st.sampled_from([0, events_mod._SHORT_TEXT_CHARS_MAX]))
def test_the_short_text_expression_and_the_automaton_agree(text, pad):
    """Situation: a short text is searched with one regular expression (no GIL release), a long
    one with the Aho-Corasick automaton. Invariant: on any UTF-8 text both answer the same, and the
    prefilter misses no trigger on either side of the length threshold."""
    text = "x" * pad + text
    lower = text.lower()
    try:
        by_automaton = bool(events_mod._TRIGGER_SEARCH.find_matches_as_indexes(lower))
    except UnicodeEncodeError:
        by_automaton = None   # the automaton takes UTF-8 only; the prefilter answers True there
    if by_automaton is not None:
        assert (events_mod._TRIGGER_RE.search(lower) is not None) == by_automaton
    if _trigger_held(text):
        assert events_mod._may_hold_secret(text)


def test_a_short_text_search_keeps_the_gil(monkeypatch):
    """Situation: the short strings every event carries (identifiers, tool names, literals), which a
    fleet of trajectories on threads stamps all the time. Goal: they are not searched with the
    automaton, whose every call releases the GIL (under contention, a hand-off per string)."""
    calls = []

    class Counting:
        def find_matches_as_indexes(self, text):
            calls.append(len(text))
            return []
    monkeypatch.setattr(events_mod, "_TRIGGER_SEARCH", Counting())
    assert not events_mod._may_hold_secret("op-17")
    assert events_mod._may_hold_secret("a Bearer abc")
    assert not events_mod._may_hold_secret("y" * (events_mod._SHORT_TEXT_CHARS_MAX + 1))
    assert calls == [events_mod._SHORT_TEXT_CHARS_MAX + 1]
