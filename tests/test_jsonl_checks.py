"""Plain ``.jsonl`` logs get the stores' checks (issue 14, §11.2.2 digests).

Fault model: one bit of a ``.jsonl`` log the project wrote flips on disk or in transit; or a line
is appended that reuses an event id with other content (a split brain, a bad merge); or the file
was written by another tool without digests.
Invariant: every line the project writes carries its event's digest; reading a log verifies each
digest and refuses a conflicting duplicate event id with a typed error naming ``file:line``, while
an exact repeat is read once; a file without digests is read with one "unchecked" note.
Goal: ``python -m kernel_lib fold --log FILE.jsonl`` never folds a changed event with exit 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kernel_lib.core.events import Event, RuntimeInput
from kernel_lib.errors import ConflictingDuplicateError, CorruptLogError, KernelError
from kernel_lib.log import load_events
from kernel_lib.sim.worksheet import worksheet_events

ROOT = Path(__file__).resolve().parents[1]
EVENTS = worksheet_events()


def encode_jsonl(events) -> bytes:
    """The line format load_events documents, built here independently of the writer."""
    return b"".join(b'{"digest":"' + e.digest.encode() + b'","event":' + e.canonical + b"}\n" for e in events)


def _fold(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernel_lib", "fold", "--json", "--log", str(path)],
                          capture_output=True, text=True, cwd=ROOT)


def _silent(notes: list[str]):
    return notes.append


def _flip_in_value(data: bytes, value: bytes) -> bytes:
    """``data`` with one bit flipped in the first occurrence of ``value`` (a JSON string's letters):
    the result is still canonical JSON of a valid event, only its content differs."""
    i = data.index(value) + 1
    out = bytearray(data)
    out[i] ^= 0x02           # a lowercase letter stays a lowercase letter
    return bytes(out)


def test_every_line_the_project_writes_carries_its_digest(tmp_path):
    out = tmp_path / "example.jsonl"
    subprocess.run([sys.executable, "-m", "kernel_lib", "example", "--out", str(out)], check=True, cwd=ROOT)
    for path in (out, ROOT / "datasets" / "worksheet_r18_example.jsonl"):
        lines = [ln for ln in path.read_bytes().splitlines() if ln.strip()]
        assert lines, path
        for ln in lines:
            doc = json.loads(ln)
            assert set(doc) == {"digest", "event"} and ln.endswith(b"}}"), (path, ln[:80])
    assert out.read_bytes() == encode_jsonl(EVENTS)
    from kernel_lib.log.files import encode_jsonl as writer
    assert writer(EVENTS) == encode_jsonl(EVENTS)
    notes: list[str] = []
    got = load_events(out, on_note=_silent(notes))
    assert [e.canonical for e in got] == [e.canonical for e in EVENTS] and notes == []


def test_import_result_to_jsonl_carries_digests(tmp_path):
    from kernel_lib.importers import import_file
    doc = [{"role": "user", "content": "fix the test"}, {"role": "assistant", "content": "done"}]
    src = tmp_path / "m.json"
    src.write_text(json.dumps(doc))
    r = import_file("openai-messages", src)
    lines = r.to_jsonl().splitlines()
    assert r.to_jsonl() == encode_jsonl(r.events) and len(lines) == len(r.events) > 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.integers(0, 10**9), bit=st.integers(0, 7))
def test_any_flipped_bit_is_refused_with_a_typed_error(tmp_path, pick, bit):
    data = bytearray(encode_jsonl(EVENTS))
    data[pick % len(data)] ^= 1 << bit
    path = tmp_path / "flipped.jsonl"
    path.write_bytes(bytes(data))
    with pytest.raises(KernelError):
        load_events(path, on_note=_silent([]))


def test_flipped_bit_in_an_event_value_fails_fold_with_a_digest_error(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_bytes(encode_jsonl(EVENTS))
    assert _fold(good).returncode == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(_flip_in_value(good.read_bytes(), b'"pytest -q"'))
    pairs = zip(good.read_bytes().splitlines(), bad.read_bytes().splitlines())
    line = next(i for i, (a, b) in enumerate(pairs, start=1) if a != b)
    with pytest.raises(CorruptLogError, match=rf"bad\.jsonl:{line}: .*digest"):
        load_events(bad, on_note=_silent([]))
    p = _fold(bad)
    assert p.returncode == 2 and p.stderr.startswith("error:") and f"bad.jsonl:{line}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""


def _other(e: Event) -> Event:
    """An event with ``e``'s id and position but other content."""
    return Event.create(trajectory_id=e.trajectory_id, event_id=e.event_id, sequence_number=e.sequence_number,
                        owner_epoch=e.owner_epoch, control_epoch=e.control_epoch, provenance=e.provenance,
                        payload=RuntimeInput(kind="identifier", name="conflict", value="other"))


@pytest.mark.parametrize("with_digests", [True, False])
def test_conflicting_duplicate_event_id_is_refused(tmp_path, with_digests):
    evs = list(EVENTS[:4]) + [_other(EVENTS[2])]
    path = tmp_path / "dup.jsonl"
    path.write_bytes(encode_jsonl(evs) if with_digests else b"".join(e.canonical + b"\n" for e in evs))
    with pytest.raises(ConflictingDuplicateError, match=rf"dup\.jsonl:5: .*{EVENTS[2].event_id}.*line 3"):
        load_events(path, on_note=_silent([]))
    p = _fold(path)
    assert p.returncode == 2 and "dup.jsonl:5" in p.stderr and "conflicting duplicate" in p.stderr, p.stderr


def test_exact_repeat_is_read_once_with_a_note(tmp_path):
    path = tmp_path / "rep.jsonl"
    path.write_bytes(encode_jsonl(list(EVENTS) + [EVENTS[3]]))
    notes: list[str] = []
    got = load_events(path, on_note=_silent(notes))
    assert [e.canonical for e in got] == [e.canonical for e in EVENTS]
    assert len(notes) == 1 and "repeat" in notes[0]


def test_file_without_digests_is_read_with_one_unchecked_note(tmp_path):
    path = tmp_path / "foreign.jsonl"
    path.write_bytes(b"".join(e.canonical + b"\n" for e in EVENTS))
    notes: list[str] = []
    got = load_events(path, on_note=_silent(notes))
    assert [e.canonical for e in got] == [e.canonical for e in EVENTS]
    assert len(notes) == 1 and "unchecked" in notes[0] and f"{len(EVENTS)} of {len(EVENTS)}" in notes[0]
    p = _fold(path)
    assert p.returncode == 0 and "unchecked" in p.stderr, p.stderr


def test_reserialized_wrapper_is_still_checked(tmp_path):
    """Another tool may rewrite the lines with other spacing; the digest still guards the event."""
    lines = [json.dumps(json.loads(ln), indent=None, separators=(", ", ": "))
             for ln in encode_jsonl(EVENTS).decode().splitlines()]
    path = tmp_path / "spaced.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert [e.canonical for e in load_events(path, on_note=_silent([]))] == [e.canonical for e in EVENTS]
    doc = json.loads(lines[2])
    doc["digest"] = "0" * 64
    lines[2] = json.dumps(doc)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorruptLogError, match=r"spaced\.jsonl:3"):
        load_events(path, on_note=_silent([]))


# --- from the adversarial pass: a digest that can be stripped, reordered or re-cased ------------------
def _lines() -> list[bytes]:
    return encode_jsonl(EVENTS).splitlines()


def test_a_line_stripped_of_its_digest_in_a_checked_log_is_refused(tmp_path):
    """Fault: one line of a checked log is edited and its digest wrapper removed (so no digest can
    fail). Invariant: a log the project wrote has a digest on every line, so a mix of checked and
    unchecked lines is itself damage. Goal: CorruptLogError naming that line, and fold exits 2."""
    lines = _lines()
    tampered = EVENTS[2].to_dict()
    tampered_line = json.dumps(tampered, sort_keys=True, separators=(",", ":")).encode()
    for k in (0, 2, len(lines) - 1):
        path = tmp_path / f"strip{k}.jsonl"
        path.write_bytes(b"\n".join(lines[:k] + [json.dumps(EVENTS[k].to_dict(), sort_keys=True,
                                                             separators=(",", ":")).encode()] + lines[k + 1:]) + b"\n")
        with pytest.raises(CorruptLogError, match=rf"{path.name}:{k + 1}: this line carries no digest"):
            load_events(path, on_note=lambda _: None)
    path = tmp_path / "strip.jsonl"
    path.write_bytes(b"\n".join(lines[:2] + [tampered_line] + lines[3:]) + b"\n")
    run = _fold(path)
    assert run.returncode == 2 and "carries no digest" in run.stderr


def test_a_wrapper_in_another_key_order_is_still_checked(tmp_path):
    """Fault: another JSON tool rewrote the wrapper with ``event`` first. Invariant: the check does
    not depend on the wrapper's key order (the digest itself must stay as written: lowercase hex, so
    that a flipped case bit in it is damage too). Goal: the intact file folds; the same file with a
    changed event is refused; an upper-cased digest is refused."""
    lines = _lines()
    reordered = [b'{"event":' + e.canonical + b',"digest":"' + e.digest.encode() + b'"}' for e in EVENTS]
    good = tmp_path / "reordered.jsonl"
    good.write_bytes(b"\n".join(reordered) + b"\n")
    assert [e.event_id for e in load_events(good, on_note=lambda _: None)] == [e.event_id for e in EVENTS]
    changed = reordered[:]
    changed[3] = changed[3].replace(b'"sequence_number":4', b'"sequence_number":5')
    assert changed[3] != reordered[3]
    bad = tmp_path / "reordered_bad.jsonl"
    bad.write_bytes(b"\n".join(changed) + b"\n")
    with pytest.raises(CorruptLogError, match="reordered_bad.jsonl:4"):
        load_events(bad, on_note=lambda _: None)
    upper = tmp_path / "upper.jsonl"
    upper.write_bytes(b"\n".join(lines[:1] + [lines[1].replace(EVENTS[1].digest.encode(),
                                                              EVENTS[1].digest.upper().encode())] + lines[2:]) + b"\n")
    with pytest.raises(CorruptLogError, match="upper.jsonl:2"):
        load_events(upper, on_note=lambda _: None)


def test_a_flip_that_breaks_the_schema_is_reported_as_a_digest_mismatch(tmp_path):
    """Fault: a bit flip turns an event type into an unknown one. Invariant: the digest is checked
    before the event is decoded. Goal: the error says the line changed after it was written."""
    lines = _lines()
    i = next(k for k, e in enumerate(EVENTS) if e.event_type == "BudgetReserved")
    line = bytearray(lines[i])
    j = line.index(b"BudgetReserved")
    line[j + 1] ^= 1
    path = tmp_path / "flip.jsonl"
    path.write_bytes(b"\n".join(lines[:i] + [bytes(line)] + lines[i + 1:]) + b"\n")
    with pytest.raises(CorruptLogError, match=rf"flip.jsonl:{i + 1}: .*changed after it was written"):
        load_events(path, on_note=lambda _: None)
