"""Is the log shorter than a position another durable record names? (§11.5.1, §11.5.3, §11.8.4)

A log that lost a suffix is internally consistent: every remaining record has a good CRC and the
sequence is gapless, so a cut made exactly on a record boundary is invisible to the log itself.
Other durable records remember positions the log once held:

* a **checkpoint manifest** in the blob store covers position p and binds the digest of event p
  (a capture runs only with the record at the log's head, so the log held p when it was taken;
  this holds for manifests whose publication never happened, and for retired ones, whose
  tombstones keep the covered position);
* a **result-inbox entry** whose signed completion record names ``intent_sequence``: the log
  position of the ``ToolIntent`` the endpoint was sent (durable intent before dispatch, §11.3:
  the intent was in the log before the request left);
* a **replica**'s head: every event a follower holds came from the primary.

:func:`find_truncation` is the pure check: given the log's head and the positions those records
name (:class:`NamedPosition`), it returns a :class:`TruncationFinding`. The gatherers
(:func:`checkpoint_positions`, :func:`inbox_positions`, :func:`replica_positions`) read the
records; :func:`refuse_truncated` combines them and raises
:class:`~kernel_lib.errors.LogTruncatedError` naming the highest position named, who names it,
and the log's head. :func:`kernel_lib.resume.stages.timed_resume` calls it before any stage.

A replica is accepted as anything with ``head(trajectory_id)`` (a
:class:`~kernel_lib.log.LogStore`, e.g. :class:`kernel_lib.retention.FollowerReplica`) or as a
plain ``name -> head`` mapping, so this layer needs nothing from ``retention``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kernel_lib.checkpoint.blobs import BlobStore
from kernel_lib.checkpoint.retired import scan_trajectory
from kernel_lib.errors import ConfigError, LogTruncatedError
from kernel_lib.gate.inbox import ResultInbox
from kernel_lib.log import LogStore

__all__ = ["NamedPosition", "TruncationFinding", "find_truncation", "checkpoint_positions", "inbox_positions",
           "replica_positions", "named_positions", "refuse_truncated"]

#: The kinds of durable record that name a log position.
KINDS = ("checkpoint", "inbox", "replica")


@dataclass(frozen=True)
class NamedPosition:
    """One log position (a sequence number ≥ 1) that a durable record says the log held:
    ``kind`` (one of :data:`KINDS`) and ``named_by`` (which record, for messages)."""

    position: int
    kind: str
    named_by: str

    def __post_init__(self) -> None:
        if type(self.position) is not int or self.position < 0:
            raise ConfigError(f"a named position is an int >= 0, got {self.position!r}")
        if self.kind not in KINDS:
            raise ConfigError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class TruncationFinding:
    """What :func:`find_truncation` found: the log's ``head``, every position ``named``, and
    ``beyond``: those past the head, highest first (empty: no truncation seen)."""

    trajectory_id: str
    head: int
    named: tuple[NamedPosition, ...]
    beyond: tuple[NamedPosition, ...]

    @property
    def truncated(self) -> bool:
        return bool(self.beyond)

    @property
    def worst(self) -> NamedPosition | None:
        """The highest position named past the head, or None."""
        return self.beyond[0] if self.beyond else None

    def describe(self) -> str:
        if not self.truncated:
            return (f"the log of {self.trajectory_id!r} (head #{self.head}) holds every position the "
                    f"{len(self.named)} durable record(s) checked name")
        w = self.worst
        more = f" (and {len(self.beyond) - 1} more record(s) past the head)" if len(self.beyond) > 1 else ""
        return (f"the log of {self.trajectory_id!r} is truncated: its head is #{self.head}, but {w.named_by} names "
                f"position #{w.position}{more}; a suffix was lost (a cut on a record boundary passes every CRC), "
                "so resuming from this log would silently forget acknowledged events")


def find_truncation(head: int, named: Iterable[NamedPosition], *, trajectory_id: str = "") -> TruncationFinding:
    """The pure check: which of ``named`` lie past ``head`` (the log's head, an int ≥ 0).

    Raises ConfigError for a head that is not an int ≥ 0 or an item that is not a NamedPosition."""
    if type(head) is not int or head < 0:
        raise ConfigError(f"head must be an int >= 0, got {head!r}")
    named = tuple(named)
    if not all(isinstance(n, NamedPosition) for n in named):
        raise ConfigError("named must hold NamedPosition items")
    beyond = tuple(sorted((n for n in named if n.position > head), key=lambda n: (-n.position, n.kind, n.named_by)))
    return TruncationFinding(trajectory_id, head, named, beyond)


def checkpoint_positions(blobs: BlobStore, trajectory_id: str) -> list[NamedPosition]:
    """The covered position of every checkpoint manifest (and retired checkpoint's tombstone)
    of ``trajectory_id`` in ``blobs``. Reads every small object once
    (:func:`kernel_lib.checkpoint.retired.scan_trajectory`)."""
    found = scan_trajectory(blobs, trajectory_id)
    out = [NamedPosition(m.covered_sequence_number, "checkpoint",
                         f"checkpoint {m.checkpoint_id} (manifest {d[:16]}… in blob store {blobs.name})")
           for d, m in found.manifests]
    out += [NamedPosition(t.covered_sequence_number, "checkpoint",
                          f"retired checkpoint {t.checkpoint_id} (tombstone in blob store {blobs.name})")
            for t in found.tombstones]
    return out


def inbox_positions(inbox: ResultInbox, trajectory_id: str) -> list[NamedPosition]:
    """The ``intent_sequence`` of every stored completion record of ``trajectory_id`` that
    names one (an int ≥ 1; records without it name no position). Raises InboxError if the
    inbox cannot be read."""
    out = []
    for e in inbox.entries(trajectory_id):
        pos = e.record.get("intent_sequence") if isinstance(e.record, dict) else None
        if type(pos) is int and pos >= 1:
            out.append(NamedPosition(pos, "inbox", f"inbox entry {e.entry_id} ({e.operation_id}/{e.attempt_id}, "
                                                   f"{e.status}, in {inbox.path})"))
    return out


def replica_positions(replicas: Mapping[str, int] | Iterable[Any], trajectory_id: str) -> list[NamedPosition]:
    """The head of each replica: a ``name -> head`` mapping, or objects with
    ``head(trajectory_id)`` (and a ``name``). Raises ConfigError for anything else."""
    if isinstance(replicas, Mapping):
        items = list(replicas.items())
    else:
        items = []
        for r in replicas:
            if not callable(getattr(r, "head", None)):
                raise ConfigError(f"a replica is a LogStore (anything with head(trajectory_id)) or a name -> head "
                                  f"mapping, got {type(r).__name__}")
            items.append((str(getattr(r, "name", type(r).__name__)), r.head(trajectory_id)))
    out = []
    for name, head in items:
        if type(head) is not int or head < 0:
            raise ConfigError(f"the head of replica {name!r} must be an int >= 0, got {head!r}")
        out.append(NamedPosition(head, "replica", f"replica {name!r} (its head)"))
    return out


def named_positions(trajectory_id: str, *, blobs: BlobStore | None = None, inbox: ResultInbox | None = None,
                    replicas: Mapping[str, int] | Iterable[Any] = ()) -> list[NamedPosition]:
    """Every position the given durable records name for ``trajectory_id``."""
    out: list[NamedPosition] = []
    if blobs is not None:
        out += checkpoint_positions(blobs, trajectory_id)
    if inbox is not None:
        out += inbox_positions(inbox, trajectory_id)
    out += replica_positions(replicas, trajectory_id)
    return out


def refuse_truncated(store: LogStore, trajectory_id: str, *, blobs: BlobStore | None = None,
                     inbox: ResultInbox | None = None,
                     replicas: Mapping[str, int] | Iterable[Any] = ()) -> TruncationFinding:
    """Raise if ``store``'s log of ``trajectory_id`` is shorter than a position ``blobs``,
    ``inbox`` or ``replicas`` name; otherwise return the finding (nothing past the head).

    Raises:
        ConfigError: ``blobs`` not a BlobStore, ``inbox`` not a ResultInbox, a bad replica.
        LogTruncatedError: the log is truncated (``position``, ``named_by``, ``kind`` of the
            highest position named; ``head``; ``finding``).
        StoreError, InboxError: the log's head or the inbox cannot be read.
    """
    if blobs is not None and not isinstance(blobs, BlobStore):
        raise ConfigError(f"blobs must be a BlobStore or None, got {type(blobs).__name__}")
    if inbox is not None and not isinstance(inbox, ResultInbox):
        raise ConfigError(f"inbox must be a ResultInbox or None, got {type(inbox).__name__}")
    if isinstance(replicas, (str, bytes)) or not isinstance(replicas, (Mapping, Iterable)):
        raise ConfigError(f"replicas must be a name -> head mapping or a list of LogStores, got {replicas!r}")
    replicas = replicas if isinstance(replicas, Mapping) else list(replicas)
    head = store.head(trajectory_id)
    named = named_positions(trajectory_id, blobs=blobs, inbox=inbox, replicas=replicas)
    finding = find_truncation(head, named, trajectory_id=trajectory_id)
    if finding.truncated:
        w = finding.worst
        raise LogTruncatedError(finding.describe() + "; resume refused", trajectory_id=trajectory_id, head=head,
                                position=w.position, named_by=w.named_by, kind=w.kind, finding=finding)
    return finding
