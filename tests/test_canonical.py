"""The fast RFC 8785 route (kernel_lib.core.canonical) writes the reference's bytes (issue 15).

Situation: every event is encoded once per append; the reference encoder (``rfc8785``) is pure
Python and was the largest per-step CPU cost of the gate. Invariant: :func:`canonical_json` returns
byte for byte what ``rfc8785.dumps`` returns, and raises what it raises, for any value. Goal: the
event digests (and so every stored log) are unchanged by the faster route.
"""

from __future__ import annotations

import math
import sys

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.core import canonical
from kernel_lib.core.canonical import canonical_json

_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 1.0, -1.0, 0.1, 1e-4, 9.99e-5, 1e-7, 1e15, 1e16, 1e21, 123456789.125, 2.0**53, 5e-324])
_scalars = (st.none() | st.booleans() | st.integers(-(2**60), 2**60) | _floats
            | st.text(st.characters(), max_size=12))
_values = st.recursive(_scalars, lambda c: st.lists(c, max_size=4)
                       | st.dictionaries(st.text(st.characters(), max_size=6), c, max_size=4), max_leaves=20)


def _outcome(f, v):
    try:
        return ("ok", f(v))
    except Exception as exc:   # noqa: BLE001 - the error type is part of the contract
        return ("error", type(exc))


@settings(max_examples=600, deadline=None)
@given(_values)
def test_the_fast_route_writes_the_reference_bytes_or_raises_its_error(value):
    assert _outcome(canonical_json, value) == _outcome(rfc8785.dumps, value)


def test_every_code_point_is_escaped_as_the_reference_does():
    chunk = []
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        chunk.append(chr(cp))
        if len(chunk) == 4096 or cp == sys.maxunicode:
            s = "".join(chunk)
            assert canonical_json({"k": s}) == rfc8785.dumps({"k": s})
            chunk = []
    with pytest.raises(rfc8785.CanonicalizationError):
        canonical_json({"k": "a\ud800"})


def test_the_fast_route_is_taken_for_an_event_shape(monkeypatch):
    """Goal: the shapes events have do not fall back (else nothing would be faster)."""
    calls = []
    monkeypatch.setattr(canonical.rfc8785, "dumps", lambda v: calls.append(v) or b"")
    event = {"trajectory_id": "t", "sequence_number": 3, "payload": {"amount_usd": 0.5, "ceiling": 1.0,
                                                                      "args": {"i": [1, 2.25, None, True]}}}
    assert canonical_json(event) == (b'{"payload":{"amount_usd":0.5,"args":{"i":[1,2.25,null,true]},"ceiling":1},'
                                     b'"sequence_number":3,"trajectory_id":"t"}')
    assert calls == []
    canonical_json({"x": math.pi * 1e20})
    assert len(calls) == 1
