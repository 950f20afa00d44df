"""Content-addressed payload storage with payload-before-reference ordering (§11.8.2).

A large payload (a delivered model input, a tool result body, a workspace file) lives in a
content-addressed :class:`~kernel_lib.checkpoint.BlobStore`; the log event carries only a
:class:`PayloadRef` (digest, byte length, format, location, artifact class). Three rules:

1. **payload durable before reference.** :meth:`PayloadStore.put` records a liveness reference in
   the :class:`~.references.ReferenceIndex` first (so no collection can remove the bytes), then
   writes the bytes and waits for the blob store's durable acknowledgment (a
   :class:`~kernel_lib.checkpoint.DirectoryBlobStore` ``fdatasync``\\s each object and ``fsync``\\s
   its directory). :meth:`PayloadStore.append` refuses (:class:`DanglingReferenceError`, nothing
   appended) an event naming a digest whose bytes are not stored intact or that its holder never
   registered. A crash anywhere leaves either no reference in the log or durable bytes behind it.
2. **digest is not permission.** :meth:`PayloadStore.get` verifies the bytes against the digest
   and serves them only to a tenant one of whose trajectories references them.
3. **copies are complete before the original goes.** :meth:`PayloadStore.migrate` moves bodies to
   another (cold) store and deletes the local copy only after reading each one back from the
   destination and checking its digest.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from kernel_lib.checkpoint.blobs import BlobStore, sha256_hex
from kernel_lib.errors import ConfigError, DanglingReferenceError, PayloadAccessError, UnrecoverableStateError
from kernel_lib.core.events import Event, Payload
from kernel_lib.log.base import AckTier, AppendOutcome, LogStore
from kernel_lib.log.trajectory import TrajectoryLog
from kernel_lib.retention.references import ReferenceIndex


@dataclass(frozen=True)
class PayloadRef:
    """What an event envelope records about an offloaded payload (§11.8.2): its SHA-256
    ``digest`` (hex), ``length`` in bytes, ``media_type``, the ``location`` (blob store name) and
    the ``artifact_class`` its retention lifetime follows. ``to_dict`` gives a JSON-ready dict."""

    digest: str
    length: int
    media_type: str
    location: str
    artifact_class: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MigrationReport:
    """What :meth:`PayloadStore.migrate` did: ``copied`` and ``verified`` at the destination,
    ``retired`` locally (only verified ones), and ``failed`` as ``(digest, reason)``."""

    copied: list[str] = field(default_factory=list)
    verified: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


def referenced_digests(value: Any) -> set[str]:
    """Every :class:`PayloadRef`-shaped dict (``{"digest": ..., "length": ..., ...}``) or
    ``*_ref`` string field found anywhere inside ``value`` (an event payload as a dict)."""
    out: set[str] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if isinstance(v.get("digest"), str) and "length" in v and "artifact_class" in v:
                out.add(v["digest"])
            for k, x in v.items():
                if isinstance(k, str) and k.endswith("_ref") and isinstance(x, str) and len(x) == 64:
                    out.add(x)
                stack.append(x)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return out


class PayloadStore:
    """Offloaded payloads for many trajectories over one blob store and one reference index.

    Args:
        blobs: the content-addressed store holding the bytes (shared across trajectories).
        index: the reference ledger.
        clock: ``() -> Unix seconds`` used to stamp references (default ``time.time``).
    """

    def __init__(self, blobs: BlobStore, index: ReferenceIndex, *, clock=time.time):
        self.blobs, self.index, self.clock = blobs, index, clock

    def put(self, data: bytes, *, trajectory_id: str, holder: str, artifact_class: str,
            media_type: str = "application/octet-stream") -> PayloadRef:
        """Store ``data`` durably for ``holder`` (the id of the event or checkpoint that will name
        it) and return the reference to put in that event. Identical bytes from any trajectory
        are stored once.

        Raises:
            ConfigError: ``data`` not bytes, bad names. RetentionError: unregistered trajectory.
            StoreError / OSError from the blob store: the bytes are not durable; do not reference.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ConfigError(f"a payload must be bytes, got {type(data).__name__}")
        if not isinstance(media_type, str) or not media_type:
            raise ConfigError(f"media_type must be a non-empty string, got {media_type!r}")
        data = bytes(data)
        digest = sha256_hex(data)
        self.index.add(digest, trajectory_id=trajectory_id, holder=holder, artifact_class=artifact_class,
                       now_unix_s=self.clock())
        self.blobs.put(data)
        return PayloadRef(digest, len(data), media_type, self.blobs.name, artifact_class)

    def check_durable(self, event: Event, digests: Iterable[str] | None = None) -> list[str]:
        """The digests ``event`` names (or ``digests``) that are NOT safe to reference yet: bytes
        absent or damaged in the blob store, or no reference registered by this event's id."""
        wanted = sorted(set(digests) if digests is not None else referenced_digests(event.payload.model_dump()))
        holders = {r.digest for r in self.index.references(trajectory_id=event.trajectory_id)
                   if r.holder == event.event_id}
        bad = []
        for d in wanted:
            if d not in holders or not self.blobs.has(d):
                bad.append(d)
        return bad

    def append(self, store: LogStore, event: Event, tier: "AckTier | str", *,
               digests: Sequence[str] | None = None) -> AppendOutcome:
        """Append ``event`` after proving every payload it references is durable and registered
        for it (rule 1 of the module docstring).

        Raises:
            DanglingReferenceError: a referenced payload is not durable or not registered for
                ``event.event_id``; nothing was appended.
            The store's append errors otherwise.
        """
        bad = self.check_durable(event, digests)
        if bad:
            raise DanglingReferenceError(
                f"event {event.event_id} names payload(s) {', '.join(d[:16] + '…' for d in bad)} that are not durable "
                f"in {self.blobs.name} under a reference held by this event: store them with PayloadStore.put("
                f"holder={event.event_id!r}) first; nothing was appended", digests=bad)
        return store.append(event, tier)

    def log_with_payloads(self, log: TrajectoryLog, build: Callable[[dict[str, PayloadRef]], Payload],
                          parts: Mapping[str, tuple[bytes, str, str]]) -> Event:
        """Store each part durably, then append the payload ``build(refs)`` that names them, as
        the next event of ``log`` (the common path: rule 1 with no ids to get wrong).

        Args:
            log: the trajectory's log handle.
            build: ``{name: PayloadRef} -> Payload``; e.g. a ``ContextBuilt`` whose
                ``delivered_input_ref`` is ``refs["prompt"].digest``.
            parts: ``{name: (bytes, artifact_class, media_type)}``.

        Raises:
            DanglingReferenceError: the built payload names a digest not stored for this event.
            The put's and the log's errors otherwise (nothing appended).
        """
        eid = log.next_event_id()
        refs = {name: self.put(data, trajectory_id=log.trajectory_id, holder=eid, artifact_class=cls, media_type=mt)
                for name, (data, cls, mt) in parts.items()}
        return self.append_to_log(log, build(refs))

    def append_to_log(self, log: TrajectoryLog, payload: Payload) -> Event:
        """Append ``payload`` as the next event of ``log`` after checking that every payload
        digest it names was stored (:meth:`put`) with ``holder=log.next_event_id()``.

        Raises:
            DanglingReferenceError: a named digest is not durable or not registered for this
                event; nothing was appended. The log's append errors otherwise.
        """
        eid = log.next_event_id()
        bad = self.check_durable(log.stamp(payload, log.head + 1, event_id=eid))
        if bad:
            raise DanglingReferenceError(f"event {eid} would name {', '.join(d[:16] + '…' for d in bad)}, which is not "
                                         "durable under a reference held by it; nothing was appended", digests=bad)
        return log.append(payload, event_id=eid)

    def get(self, digest: str, *, tenant: str, needed_by: str = "") -> bytes:
        """The bytes of ``digest``, verified, for ``tenant``.

        Raises:
            PayloadAccessError: no trajectory of ``tenant`` references ``digest``.
            UnrecoverableStateError: the bytes are missing or damaged (``missing`` names them).
        """
        if not self.index.readable_by(digest, tenant):
            raise PayloadAccessError(f"tenant {tenant!r} holds no reference to payload {digest[:16]}…: knowing a "
                                     "digest does not grant the right to read its bytes")
        return self.blobs.get(digest, kind="payload", needed_by=needed_by)

    def migrate(self, digests: Iterable[str], destination: BlobStore, *, retire_local: bool = True) -> MigrationReport:
        """Copy each payload body to ``destination`` and, with ``retire_local``, delete the local
        copy only after the destination returns bytes with the right digest (§11.8.4's cold-tier
        rule). A body missing or damaged locally is reported in ``failed`` and left alone."""
        rep = MigrationReport()
        for d in digests:
            try:
                data = self.blobs.get(d, kind="payload", needed_by="migration")
            except UnrecoverableStateError as exc:
                rep.failed.append((d, f"local copy unreadable: {exc}"))
                continue
            destination.put(data)
            rep.copied.append(d)
            try:
                destination.get(d, kind="payload", needed_by="migration check")
            except UnrecoverableStateError as exc:
                rep.failed.append((d, f"not readable at the destination: {exc}"))
                continue
            rep.verified.append(d)       # get() checked the digest of what came back
            if retire_local and self.blobs.delete(d):
                rep.retired.append(d)
        return rep
