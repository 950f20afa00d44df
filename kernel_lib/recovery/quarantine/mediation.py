"""The mediation gateway: peers read shared artifacts only through it (Failure Recovery,
"Dynamic taint tracking"; definition 0.3).

:class:`MediationGateway` sits between agents and the shared artifact store (a content-addressed
:class:`~kernel_lib.checkpoint.blobs.BlobStore`: every read is hashed again, so an artifact's name
is its proof) and the taint ledger:

* :meth:`~MediationGateway.publish` stores bytes and registers their envelope (producer, epoch,
  parents) in the ledger, in that order (an envelope never names bytes that are not stored);
* :meth:`~MediationGateway.read` returns an artifact's bytes to a peer only when its taint state
  is UNTAINTED or CLEARED; a TAINTED or SUSPECT one is refused with
  :class:`~kernel_lib.errors.ArtifactQuarantined` (what blocks it, and since when);
* :meth:`~MediationGateway.inspect` gives the bytes to an external verifier or an operator
  whatever the state (they must read what they clear); a model or agent is refused;
* :meth:`~MediationGateway.clear` records a verifier's clearance through the ledger.

Every refused read is counted (``refused_reads``) for the demo and the notebook.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from kernel_lib.checkpoint.blobs import BlobStore, MemoryBlobStore, sha256_hex
from kernel_lib.errors import ArtifactError, ArtifactQuarantined, ClearanceRefused, ConfigError
from kernel_lib.recovery.quarantine.ledger import TaintLedger
from kernel_lib.recovery.quarantine.taint import (
    VERIFIER_KINDS, Artifact, Clearance, TaintView, Verifier,
)

__all__ = ["MediationGateway"]


class MediationGateway:
    """Reads and writes of shared artifacts, checked against the taint ledger (module docstring).

    Args:
        ledger: the :class:`~.ledger.TaintLedger`.
        blobs: where the bytes live (default: in memory).

    Raises ConfigError for a ledger that is not a TaintLedger or a store that is not a BlobStore."""

    def __init__(self, ledger: TaintLedger, blobs: BlobStore | None = None):
        if not isinstance(ledger, TaintLedger):
            raise ConfigError(f"ledger must be a TaintLedger, got {type(ledger).__name__}")
        if blobs is not None and not isinstance(blobs, BlobStore):
            raise ConfigError(f"blobs must be a BlobStore, got {type(blobs).__name__}")
        self.ledger = ledger
        self.blobs = blobs if blobs is not None else MemoryBlobStore()
        self._lock = threading.Lock()
        self.refused_reads: list[dict[str, Any]] = []

    def publish(self, data: bytes, *, producer: str, epoch: int, parents: Iterable[str] = (),
                name: str = "") -> tuple[Artifact, TaintView]:
        """Store ``data`` and register it as produced by ``producer`` at log position ``epoch``,
        derived from ``parents``. Returns the envelope and its state (a quarantined producer's
        new artifact is TAINTED at once; one derived from a tainted artifact is SUSPECT).

        Raises ArtifactError (bad envelope, unregistered parent), ConfigError (data not bytes)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ConfigError(f"artifact data must be bytes, got {type(data).__name__}")
        data = bytes(data)
        art = Artifact(sha256_hex(data), producer, epoch, tuple(parents), name)   # validated before any write
        self.blobs.put(data)
        return art, self.ledger.register(art)

    def read(self, sha256: str, *, reader: str) -> bytes:
        """The bytes of ``sha256`` for peer ``reader``, if its state allows.

        Raises:
            ArtifactQuarantined: the artifact is TAINTED or SUSPECT (``blocked_by`` names the
                tainted artifacts it comes from).
            ArtifactError: the hash is not registered.
            UnrecoverableStateError: the bytes are missing or damaged in the store."""
        view = self.ledger.state(sha256)
        if not view.readable:
            art = self.ledger.artifact(sha256)
            with self._lock:
                self.refused_reads.append({"sha256": sha256, "reader": reader, "state": view.state.value})
            origin = ("it is tainted itself" if view.state.value == "TAINTED"
                      else "it derives from tainted " + ", ".join(h[:12] + "…" for h in view.blocked_by))
            raise ArtifactQuarantined(
                f"{reader} may not read {art.name or 'artifact'} {sha256[:12]}… (produced by {art.producer} at "
                f"#{art.epoch}): it is {view.state.value}; {origin}; it waits for an external verifier or an operator",
                sha256=sha256, state=view.state.value, producer=art.producer, reader=reader,
                blocked_by=list(view.blocked_by))
        return self.blobs.get(sha256, kind="artifact", needed_by=reader)

    def inspect(self, sha256: str, *, verifier: Verifier) -> bytes:
        """The bytes of ``sha256`` for an external verifier or an operator, whatever its state
        (they must read what they clear). Raises ClearanceRefused for any other kind."""
        if not isinstance(verifier, Verifier) or verifier.kind not in VERIFIER_KINDS:
            kind = getattr(verifier, "kind", None)
            raise ClearanceRefused(f"only an external verifier or an operator may inspect a quarantined artifact, not "
                                   f"{kind!r}", verifier_kind=kind, verifier_id=getattr(verifier, "identity", None))
        self.ledger.artifact(sha256)
        return self.blobs.get(sha256, kind="artifact", needed_by=f"{verifier.kind} {verifier.identity}")

    def clear(self, clearance: Clearance) -> TaintView:
        """Record a clearance (see :meth:`.ledger.TaintLedger.clear`)."""
        return self.ledger.clear(clearance)

    def state(self, sha256: str) -> TaintView:
        return self.ledger.state(sha256)

    def readable(self, sha256: str) -> bool:
        try:
            return self.ledger.state(sha256).readable
        except ArtifactError:
            return False
