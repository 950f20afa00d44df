"""Action signatures (Failure Recovery, table 6: action repetition; table 7 tier 2: the mask)."""

import pytest
import rfc8785
import xxhash
from hypothesis import given, strategies as st

from kernel_lib.core.action_signature import DEFAULT_NONCE_ARGUMENTS, action_signature

json_scalars = st.none() | st.booleans() | st.integers(-2**53 + 1, 2**53 - 1) | st.text(max_size=8)
json_objects = st.dictionaries(st.text(min_size=1, max_size=6), json_scalars, max_size=5)


@given(tool=st.text(max_size=10), args=json_objects)
def test_signature_is_xxh64_of_the_canonical_call(tool, args):
    kept = {k: v for k, v in args.items() if k not in DEFAULT_NONCE_ARGUMENTS}
    expected = xxhash.xxh64(rfc8785.dumps({"tool": tool, "arguments": kept})).hexdigest()
    assert action_signature(tool, args) == expected


@given(args=json_objects)
def test_key_order_does_not_matter(args):
    reversed_args = dict(reversed(list(args.items())))
    assert action_signature("t", args) == action_signature("t", reversed_args)


def test_a_retry_that_only_changed_its_nonce_is_the_same_action():
    first = action_signature("book", {"flight": "UA1", "idempotency_key": "k1"})
    retry = action_signature("book", {"flight": "UA1", "idempotency_key": "k2"})
    assert first == retry
    assert action_signature("book", {"flight": "UA2", "idempotency_key": "k1"}) != first


def test_declared_nonces_replace_the_defaults():
    a = action_signature("t", {"x": 1, "req": "a"}, nonce_arguments=["req"])
    b = action_signature("t", {"x": 1, "req": "b"}, nonce_arguments=["req"])
    assert a == b
    c = action_signature("t", {"x": 1, "request_id": "a"}, nonce_arguments=[])
    d = action_signature("t", {"x": 1, "request_id": "b"}, nonce_arguments=[])
    assert c != d


def test_tool_name_is_part_of_the_signature():
    assert action_signature("read", {"p": 1}) != action_signature("write", {"p": 1})


def test_bad_input_is_refused_with_a_type_error():
    with pytest.raises(TypeError, match="tool must be a str"):
        action_signature(3, {})
    with pytest.raises(TypeError, match="JSON object"):
        action_signature("t", [1, 2])
    with pytest.raises(rfc8785.CanonicalizationError):
        action_signature("t", {"x": float("nan")})
