"""The checkpoint manifest: the contract of one recovery boundary (§11.4.1, §11.4.2).

A manifest binds an exact committed log position ``covered_sequence_number`` (p) of one
trajectory to:

* the record at p: the digest and size of its complete snapshot, and either the snapshot itself
  (``full``) or a record delta against the base checkpoint (``incremental``);
* the workspace at p: the id of its tree, and either the tree object (``full``) or a workspace
  delta against the base's tree (``incremental``); None when the trajectory has no workspace;
* the base checkpoint (id and manifest digest) and the chain length back to a full base;
* the digests of required artifacts (objects restore must find intact, e.g. offloaded model
  inputs);
* the log prefix digest at p (``TrajectoryRecord.prefix_sha256``), and the reducer version and
  formats needed to read all of it (``versions``; ``record_format`` is
  ``kernel_lib.record-snapshot/4``, MessagePack with each table's rows as one byte string and
  their end offsets, for chains begun today; ``.../3`` (each row a MessagePack array of its
  own), ``.../2`` (attempts in a table of their own) and ``.../1`` (canonical JSON) for older
  ones and the delta chains built on them; all are read);
* (format 2) ``covered_event_sha256``: the SHA-256 of the canonical bytes of the event at p
  (``Event.digest``; None when p is 0). The prefix digest chains every event 1..p, so checking
  it means reading the whole prefix; the event digest is checked by reading event p alone, and
  ties the manifest to this log rather than to another log of the same trajectory id whose
  event p differs.

Stored as canonical RFC 8785 JSON under its own SHA-256 in the blob store; the ``Checkpoint``
(schema 2) event that publishes it carries that digest. Format 1 manifests (written before the
covered-event digest existed) are still read; their ``covered_event_sha256`` is None and their
binding to the log cannot be checked beyond positions and trajectory id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kernel_lib.errors import UnrecoverableStateError
from kernel_lib.core.events import REDUCER_VERSION
from kernel_lib.checkpoint.blobs import is_digest, sha256_hex
from kernel_lib.checkpoint.state import DELTA_FORMAT_OF, RECORD_DELTA_FORMAT, RECORD_FORMAT, canonical
from kernel_lib.checkpoint.tree import DELTA_FORMAT, TREE_FORMAT

MANIFEST_FORMAT = "kernel_lib.checkpoint/2"
#: Manifest formats this build reads (format 1 lacks ``covered_event_sha256``).
READABLE_FORMATS = ("kernel_lib.checkpoint/1", MANIFEST_FORMAT)
#: Formats and versions this build writes and can read, recorded in every manifest.
VERSIONS = {"reducer_version": REDUCER_VERSION, "record_format": RECORD_FORMAT,
            "record_delta_format": RECORD_DELTA_FORMAT, "tree_format": TREE_FORMAT,
            "workspace_delta_format": DELTA_FORMAT, "checkpoint_event_schema": 2, "workspace_event_schema": 1}


def versions_for(record_format: str) -> dict[str, Any]:
    """:data:`VERSIONS` for a chain whose record snapshots are in ``record_format`` (a chain
    keeps the format of its full base; see :mod:`kernel_lib.checkpoint.state`)."""
    return {**VERSIONS, "record_format": record_format, "record_delta_format": DELTA_FORMAT_OF[record_format]}


@dataclass(frozen=True)
class CheckpointManifest:
    """One checkpoint manifest (see the module docstring). ``record`` holds ``sha256`` and
    ``size`` (bytes) of the complete record snapshot plus ``snapshot`` or ``delta`` (object
    digests); ``workspace`` holds ``tree_sha256``, ``files``, ``bytes`` plus ``tree`` or
    ``delta``. ``covered_event_sha256`` is the digest of the event at the covered position (None
    at position 0 and in a format-1 manifest); ``format`` is the manifest format it was read
    from or will be written as."""

    checkpoint_id: str
    trajectory_id: str
    covered_sequence_number: int
    prefix_sha256: str
    kind: str
    record: dict[str, Any]
    workspace: dict[str, Any] | None
    base: dict[str, str] | None = None
    chain_length: int = 0
    artifacts: tuple[str, ...] = ()
    supersedes: tuple[str, ...] = ()
    versions: dict[str, Any] = field(default_factory=lambda: dict(VERSIONS))
    covered_event_sha256: str | None = None
    format: str = MANIFEST_FORMAT

    def to_json(self) -> dict[str, Any]:
        d = {"format": self.format, "checkpoint_id": self.checkpoint_id, "trajectory_id": self.trajectory_id,
             "covered_sequence_number": self.covered_sequence_number, "prefix_sha256": self.prefix_sha256,
             "kind": self.kind, "record": self.record, "workspace": self.workspace, "base": self.base,
             "chain_length": self.chain_length, "artifacts": list(self.artifacts),
             "supersedes": list(self.supersedes), "versions": self.versions}
        if self.format != READABLE_FORMATS[0]:
            d["covered_event_sha256"] = self.covered_event_sha256
        return d

    @property
    def canonical(self) -> bytes:
        return canonical(self.to_json())

    @property
    def sha256(self) -> str:
        return sha256_hex(self.canonical)

    @property
    def record_sha256(self) -> str:
        return self.record["sha256"]

    @property
    def record_format(self) -> str:
        """The record snapshot format of this checkpoint's chain (``versions.record_format``)."""
        return self.versions["record_format"]

    @property
    def tree_sha256(self) -> str | None:
        return None if self.workspace is None else self.workspace["tree_sha256"]

    def objects(self) -> list[str]:
        """Digests of the objects this manifest itself references (not its base's, not file
        blobs): record snapshot or delta, tree or workspace delta, artifacts."""
        out = [self.record.get("snapshot") or self.record.get("delta")]
        if self.workspace is not None:
            out.append(self.workspace.get("tree") or self.workspace.get("delta"))
        out.extend(self.artifacts)
        return [d for d in out if d]

    @classmethod
    def from_bytes(cls, data: bytes, *, name: str = "manifest") -> "CheckpointManifest":
        """Parse stored manifest bytes.

        Raises UnrecoverableStateError if they are not a manifest of a format, reducer version
        and kind this build reads.
        """
        try:
            d = json.loads(data)
            if not isinstance(d, dict) or d.get("format") not in READABLE_FORMATS:
                raise ValueError(f"format is {d.get('format') if isinstance(d, dict) else None!r}, "
                                 f"not one of {READABLE_FORMATS}")
            versions = d["versions"]
            from kernel_lib.core.record import SUPPORTED_REDUCER_VERSIONS
            if versions.get("reducer_version") not in SUPPORTED_REDUCER_VERSIONS:
                raise ValueError(f"written under reducer version {versions.get('reducer_version')}; this build "
                                 f"folds {sorted(SUPPORTED_REDUCER_VERSIONS)}")
            if versions.get("record_format") not in DELTA_FORMAT_OF:
                raise ValueError(f"record_format {versions.get('record_format')!r} is not one of the "
                                 f"{tuple(DELTA_FORMAT_OF)} this build reads")
            if versions.get("record_delta_format") != DELTA_FORMAT_OF[versions["record_format"]]:
                raise ValueError(f"record_delta_format {versions.get('record_delta_format')!r} does not go with "
                                 f"record_format {versions['record_format']!r}")
            for key in ("tree_format", "workspace_delta_format"):
                if versions.get(key) != VERSIONS[key]:
                    raise ValueError(f"{key} {versions.get(key)!r} is not the {VERSIONS[key]!r} this build reads")
            m = cls(checkpoint_id=d["checkpoint_id"], trajectory_id=d["trajectory_id"],
                    covered_sequence_number=d["covered_sequence_number"], prefix_sha256=d["prefix_sha256"],
                    kind=d["kind"], record=d["record"], workspace=d["workspace"], base=d["base"],
                    chain_length=d["chain_length"], artifacts=tuple(d["artifacts"]),
                    supersedes=tuple(d["supersedes"]), versions=versions,
                    covered_event_sha256=(d["covered_event_sha256"] if d["format"] != READABLE_FORMATS[0] else None),
                    format=d["format"])
            m._check()
            return m
        except UnrecoverableStateError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UnrecoverableStateError(f"checkpoint {name} is not a manifest this build reads: {exc}",
                                          missing=[("checkpoint manifest", name)]) from None

    def _check(self) -> None:
        if self.kind not in ("full", "incremental"):
            raise ValueError(f"unknown kind {self.kind!r}")
        if type(self.covered_sequence_number) is not int or self.covered_sequence_number < 0:
            raise ValueError("covered_sequence_number must be an integer >= 0")
        if self.format != READABLE_FORMATS[0]:
            if self.covered_sequence_number == 0:
                if self.covered_event_sha256 is not None:
                    raise ValueError("a checkpoint at position 0 covers no event, yet names one")
            elif not is_digest(self.covered_event_sha256):
                raise ValueError("covered_event_sha256 is not a digest")
        if not is_digest(self.record.get("sha256")):
            raise ValueError("record.sha256 is not a digest")
        own = "snapshot" if self.kind == "full" else "delta"
        if not is_digest(self.record.get(own)):
            raise ValueError(f"a {self.kind} checkpoint needs record.{own}")
        if self.workspace is not None:
            if not is_digest(self.workspace.get("tree_sha256")):
                raise ValueError("workspace.tree_sha256 is not a digest")
            if not is_digest(self.workspace.get("tree" if self.kind == "full" else "delta")):
                raise ValueError(f"a {self.kind} checkpoint needs "
                                 f"workspace.{'tree' if self.kind == 'full' else 'delta'}")
        if (self.kind == "incremental") != (self.base is not None):
            raise ValueError("an incremental checkpoint names its base, a full one none")
        if self.base is not None and not is_digest(self.base.get("manifest_sha256")):
            raise ValueError("base.manifest_sha256 is not a digest")
        if not all(is_digest(a) for a in self.artifacts):
            raise ValueError("an artifact reference is not a digest")
