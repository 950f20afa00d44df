"""Action signatures: h_tool(a) = xxHash64(canonical JSON of the tool name and its arguments)
(Failure Recovery, "Semantic Watchdog Timers": the cycle-detector listing hashes each action
with a fast non-cryptographic hash; table 6, action repetition).

The signature identifies *what was asked*, not *when*: arguments the caller declares as nonces
(idempotency keys, request ids, timestamps a tool accepts but ignores) are dropped before
hashing, so a retry that only changed its nonce has the same signature as the call it repeats.
The gate uses the same function to refuse a masked action (table 7, tier 2), so the watchdog and
the gate can never disagree on which actions are "the same".

Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import xxhash

from kernel_lib.core.canonical import canonical_json

__all__ = ["DEFAULT_NONCE_ARGUMENTS", "action_signature"]

#: Argument names treated as nonces when the caller declares none: they vary between retries of
#: the same request without changing what is asked.
DEFAULT_NONCE_ARGUMENTS: frozenset[str] = frozenset({
    "idempotency_key", "request_id", "nonce", "timestamp", "operation_id", "client_token",
})


def action_signature(tool: str, arguments: Mapping[str, Any] | None = None, *,
                     nonce_arguments: Iterable[str] | None = None) -> str:
    """The action's signature: 16 lower-case hex digits of xxHash64 (seed 0) over the RFC 8785
    canonical JSON of ``{"tool": tool, "arguments": arguments minus the nonce arguments}``.

    Args:
        tool: the tool's name (a str).
        arguments: the call's arguments (a JSON object; ``None`` means ``{}``). Only top-level
            keys are matched against the nonce names.
        nonce_arguments: argument names to ignore; ``None`` means :data:`DEFAULT_NONCE_ARGUMENTS`,
            an empty iterable ignores none.

    Returns: a 16-character hex string.

    Raises:
        TypeError: ``tool`` is not a str or ``arguments`` not a mapping.
        rfc8785.CanonicalizationError: the arguments are not canonical JSON (a NaN, an integer
            outside ±(2**53 - 1), a lone surrogate, a non-string key).
    """
    if type(tool) is not str:
        raise TypeError(f"tool must be a str, not {type(tool).__name__}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise TypeError(f"arguments must be a JSON object (a mapping), not {type(arguments).__name__}")
    ignore = DEFAULT_NONCE_ARGUMENTS if nonce_arguments is None else frozenset(nonce_arguments)
    kept = {k: v for k, v in arguments.items() if k not in ignore}
    return xxhash.xxh64_hexdigest(canonical_json({"tool": tool, "arguments": kept}))
