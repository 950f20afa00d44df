"""Signed completion evidence (§11.5.3): what an executor signs and how a worker verifies it.

A completion record is a JSON object; the executor signs the RFC 8785 encoding of the record
without its ``signature`` field with its Ed25519 key, and anyone holding the public key checks it
here before the record counts as evidence (a durable result inbox stores only verified records).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kernel_lib.errors import EvidenceSignatureError

__all__ = ["signing_bytes", "load_public_key", "verify_completion"]


def signing_bytes(record: dict[str, Any]) -> bytes:
    """What is signed: the RFC 8785 encoding of the record without its ``signature`` field."""
    return rfc8785.dumps({k: v for k, v in record.items() if k != "signature"})


def load_public_key(path_or_hex: str | os.PathLike) -> Ed25519PublicKey:
    """An Ed25519 public key from a file holding 64 hex characters, or from the hex itself."""
    text = str(path_or_hex)
    if not re.fullmatch(r"[0-9a-fA-F]{64}", text):
        text = Path(path_or_hex).read_text().strip()
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text))


def verify_completion(record: dict[str, Any], public_key: Ed25519PublicKey | str | os.PathLike,
                      signature: str | None = None) -> dict[str, Any]:
    """Authenticate a completion record (§11.5.3) and return it.

    ``signature`` (hex) defaults to ``record["signature"]``. ``public_key`` is a key object, a
    path to the key file, or its hex.

    Raises:
        EvidenceSignatureError: no signature, a malformed one, or one that does not verify (the
            record was changed after signing, or another key signed it).
    """
    key = public_key if isinstance(public_key, Ed25519PublicKey) else load_public_key(public_key)
    sig = signature if signature is not None else (record or {}).get("signature")
    if not isinstance(record, dict) or not isinstance(sig, str) or not re.fullmatch(r"[0-9a-f]{128}", sig):
        raise EvidenceSignatureError("completion record has no well-formed Ed25519 signature (128 hex characters)")
    try:
        key.verify(bytes.fromhex(sig), signing_bytes(record))
    except InvalidSignature:
        raise EvidenceSignatureError(
            f"completion record for {record.get('operation_id')!r} does not verify against the executor's "
            "public key: it was altered after signing or signed by another key") from None
    return record
