"""Tombstones of retired checkpoints, and what a blob store says about a trajectory (§11.4.2).

Retiring the deltas a consolidated full base superseded (:meth:`Checkpointer.retire
<kernel_lib.checkpoint.capture.Checkpointer.retire>`) removes their manifests and record deltas,
but the ``Checkpoint`` events that published them stay in the log. Without a trace, a later
restore at one of their positions would find the event, miss the manifest and report it as lost
data. So before anything is removed, retirement stores one :class:`Tombstone` per retired
checkpoint: which checkpoint (id, manifest digest, covered position), which objects went, who
retired it (e.g. ``"consolidation"``), when (Unix seconds, the caller's clock) and which
checkpoint replaced it. A tombstone is an ordinary content-addressed object of the blob store
(canonical RFC 8785 JSON, format :data:`TOMBSTONE_FORMAT`), durable when ``put_many`` returns;
no reference index registers it, so garbage collection never removes it.

:func:`scan_trajectory` lists, for one trajectory, every checkpoint manifest and tombstone the
store holds, by reading each small object once (objects over
:data:`SCAN_OBJECT_BYTES_MAX` bytes, e.g. large file blobs, are skipped by size). Its cost is
proportional to the store's object count; restore calls it only when a checkpoint it needs is
missing, and resume once per resume to learn which log positions the store vouches for
(:mod:`kernel_lib.resume.truncation`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from kernel_lib.errors import UnrecoverableStateError
from kernel_lib.checkpoint.blobs import BlobStore, DirectoryBlobStore, MemoryBlobStore, is_digest
from kernel_lib.checkpoint.manifest import READABLE_FORMATS, CheckpointManifest
from kernel_lib.checkpoint.state import canonical

#: Format of a tombstone object.
TOMBSTONE_FORMAT = "kernel_lib.checkpoint-tombstone/1"
#: Objects larger than this (bytes) are not read by :func:`scan_trajectory`: manifests and
#: tombstones are a few KiB.
SCAN_OBJECT_BYTES_MAX = 256 * 1024


@dataclass(frozen=True)
class Tombstone:
    """The durable trace of one retired checkpoint.

    Fields: ``trajectory_id``; ``checkpoint_id`` and ``manifest_sha256`` of the retired
    checkpoint; ``covered_sequence_number`` (the log position it covered); ``objects`` (digests
    removed with it: its manifest, its record delta); ``retired_by`` (who retired it, e.g.
    ``"consolidation"``); ``retired_at_unix_s`` (when, Unix seconds, from the retiring caller's
    clock); ``replaced_by`` (the checkpoint id that superseded it, "" if none).
    """

    trajectory_id: str
    checkpoint_id: str
    manifest_sha256: str
    covered_sequence_number: int
    objects: tuple[str, ...]
    retired_by: str
    retired_at_unix_s: float
    replaced_by: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"format": TOMBSTONE_FORMAT, "trajectory_id": self.trajectory_id, "checkpoint_id": self.checkpoint_id,
                "manifest_sha256": self.manifest_sha256, "covered_sequence_number": self.covered_sequence_number,
                "objects": list(self.objects), "retired_by": self.retired_by,
                "retired_at_unix_s": self.retired_at_unix_s, "replaced_by": self.replaced_by}

    @property
    def canonical(self) -> bytes:
        return canonical(self.to_json())

    def names(self, digest: str) -> bool:
        """True if ``digest`` is the retired manifest or one of the objects removed with it."""
        return digest == self.manifest_sha256 or digest in self.objects

    def describe(self) -> str:
        """One line: which checkpoint, retired by whom and when (UTC), replaced by what."""
        import time

        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.retired_at_unix_s))
        return (f"checkpoint {self.checkpoint_id} (covering position {self.covered_sequence_number}) was retired by "
                f"{self.retired_by} at {when} (unix {self.retired_at_unix_s:.3f} s)"
                + (f", replaced by {self.replaced_by}" if self.replaced_by else ""))

    @classmethod
    def from_json(cls, d: Any) -> "Tombstone":
        """Parse a tombstone object's JSON. Raises UnrecoverableStateError if it is not one."""
        try:
            if not isinstance(d, dict) or d.get("format") != TOMBSTONE_FORMAT:
                raise ValueError("not a tombstone")
            t = cls(str(d["trajectory_id"]), str(d["checkpoint_id"]), d["manifest_sha256"],
                    d["covered_sequence_number"], tuple(d["objects"]), str(d["retired_by"]),
                    float(d["retired_at_unix_s"]), str(d.get("replaced_by") or ""))
            if not is_digest(t.manifest_sha256) or not all(is_digest(o) for o in t.objects) or \
                    type(t.covered_sequence_number) is not int or t.covered_sequence_number < 0:
                raise ValueError("malformed tombstone fields")
            return t
        except (ValueError, TypeError, KeyError) as exc:
            raise UnrecoverableStateError(f"object is not a checkpoint tombstone: {exc}") from None


def _stored_size(blobs: BlobStore, digest: str) -> int | None:
    """Stored length without reading the bytes where the store allows it (a stat)."""
    if isinstance(blobs, DirectoryBlobStore):
        try:
            return blobs.fs.size(blobs.path_of(digest))
        except OSError:
            return None
    if isinstance(blobs, MemoryBlobStore):
        data = blobs.objects.get(digest)
        return None if data is None else len(data)
    return blobs.size(digest)


@dataclass
class TrajectoryObjects:
    """What :func:`scan_trajectory` found for one trajectory: ``manifests`` as (digest, manifest)
    and ``tombstones``, each sorted by covered position."""

    manifests: list[tuple[str, CheckpointManifest]]
    tombstones: list[Tombstone]

    def tombstone_for(self, digests: Iterable[str]) -> Tombstone | None:
        """The tombstone naming any of ``digests`` (a manifest or an object retired with it)."""
        wanted = [d for d in digests if d]
        for t in self.tombstones:
            if any(t.names(d) for d in wanted):
                return t
        return None


def scan_trajectory(blobs: BlobStore, trajectory_id: str) -> TrajectoryObjects:
    """Every checkpoint manifest and tombstone of ``trajectory_id`` in ``blobs`` (see the module
    docstring for the cost). Objects that are damaged, unreadable or of another trajectory are
    passed over; this never raises for the store's contents."""
    manifests: list[tuple[str, CheckpointManifest]] = []
    tombstones: list[Tombstone] = []
    markers = tuple(f'"format":"{f}"'.encode() for f in (*READABLE_FORMATS, TOMBSTONE_FORMAT))
    for d in sorted(blobs.digests()):
        size = _stored_size(blobs, d)
        if size is None or size > SCAN_OBJECT_BYTES_MAX:
            continue
        try:
            raw = blobs.get(d, kind="object")
        except UnrecoverableStateError:
            continue
        if not raw.startswith(b"{") or not any(m in raw for m in markers) or trajectory_id.encode() not in raw:
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(doc, dict) or doc.get("trajectory_id") != trajectory_id:
            continue
        try:
            if doc.get("format") == TOMBSTONE_FORMAT:
                tombstones.append(Tombstone.from_json(doc))
            else:
                manifests.append((d, CheckpointManifest.from_bytes(raw, name=d[:16])))
        except UnrecoverableStateError:
            continue
    manifests.sort(key=lambda x: (x[1].covered_sequence_number, x[0]))
    tombstones.sort(key=lambda t: (t.covered_sequence_number, t.manifest_sha256))
    return TrajectoryObjects(manifests, tombstones)


def write_tombstones(blobs: BlobStore, tombstones: Iterable[Tombstone]) -> list[str]:
    """Store ``tombstones`` (durable on return, before anything they describe is removed);
    returns their digests. Raises CheckpointError if the store cannot hold them."""
    return blobs.put_many([t.canonical for t in tombstones]).digests


__all__ = ["TOMBSTONE_FORMAT", "SCAN_OBJECT_BYTES_MAX", "Tombstone", "TrajectoryObjects", "scan_trajectory",
           "write_tombstones"]
