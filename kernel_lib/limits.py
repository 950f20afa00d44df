"""Every bound the kernel enforces, with its reason and where it is enforced.

One place for the numbers, so their relations can be checked together (at import, below) and a
reader can see why each one has the value it has. Naming: UPPER case, the quantity and its unit,
then ``_MAX`` or ``_MIN`` (``EVENT_BYTES_MAX``, ``ETCD_LEASE_TTL_S_MAX``). The modules import
them from here; a few keep an older public name as an alias (``core.events.JSON_SAFE_MAX``,
``log.base.MAX_OWNER_EPOCH``, ``resume.stages.MAX_TOKENS`` / ``MAX_SECONDS``).

Standard library only; imports nothing of the kernel but :mod:`kernel_lib.errors`.
"""

from __future__ import annotations

__all__ = [
    "JSON_NUMBER_MAX", "JSON_DEPTH_MAX", "EVENT_BYTES_MAX", "OWNER_EPOCH_MAX", "SEQUENCE_NUMBER_MAX",
    "USAGE_USD_MAX", "ETCD_REQUEST_BYTES_MAX", "ETCD_TXN_OPS_MAX", "ETCD_TXN_EVENTS_MAX", "ETCD_TXN_BYTES_MAX",
    "ETCD_EVENT_OVERHEAD_BYTES", "ETCD_TXN_TRIES_MAX", "ETCD_LEASE_TTL_S_MAX", "GROUP_COMMIT_QUEUED_BATCHES_MAX",
    "SEGMENT_BYTES_MIN", "CHECKPOINT_SCAN_WINDOW_MAX", "CHECKPOINT_CHAIN_LENGTH_MAX", "CHECKPOINT_INDEX_STRIDE_MIN",
    "CHECKPOINT_INDEX_SNAPSHOTS_MAX", "RESUME_TOKENS_MAX", "RESUME_SECONDS_MAX", "MEASURE_PAYLOAD_BYTES_MAX",
    "etcd_encoded_bytes",
]

# --- the event envelope (core.events, every store) -----------------------------------------------

#: Largest magnitude of a number in an event. Reason: RFC 8785 numbers are IEEE doubles, and an
#: integer beyond 2**53 - 1 does not read back as the same JSON integer (I-JSON, RFC 7493 §2.2).
#: Enforced by ``core.events.check_json``.
JSON_NUMBER_MAX = 2**53 - 1

#: Deepest nesting of lists and objects in a payload. Reason: keeps the recursive check, encoder
#: and decoder far below Python's recursion limit (1000) on any input. Enforced by
#: ``core.events.check_json``.
JSON_DEPTH_MAX = 64

#: Largest canonical (RFC 8785) encoding of one event, bytes, in every store. Reason: the quorum
#: store sends an event base64-encoded (4/3 larger) inside one etcd transaction, which etcd limits
#: in size; one bound for all stores keeps a log movable between tiers. Larger payloads belong in
#: a blob store, referenced by digest (§11.8.2). Enforced by ``log.base.check_events`` (every
#: store's append and the group committer's submit), with ``EventTooLargeError``.
EVENT_BYTES_MAX = 640_000

# --- positions and epochs (log stores, ownership, retention) ---------------------------------------

#: Largest owner_epoch (a fence). Reason: SQLite keeps it in a signed 64-bit INTEGER, the segment
#: log in a signed 64-bit field, etcd in 20 decimal digits. Enforced by ``log.base`` argument
#: checks and each store's append.
OWNER_EPOCH_MAX = 2**63 - 1

#: Largest sequence number. Reason: stored in the same signed 64-bit fields as the epoch.
#: Enforced by the stores' appends and ``retention.references``.
SEQUENCE_NUMBER_MAX = 2**63 - 1

# --- money (core.proposals, gate.inbox) ------------------------------------------------------------

#: Largest usage report (USD) taken as evidence. Reason: beyond 2**53 - 1 a double no longer holds
#: whole dollars exactly, so the report cannot be a real charge, and the settlement that records it
#: must be storable as a JSON number (JSON_NUMBER_MAX); a larger report settles nothing.
USAGE_USD_MAX = 2**53 - 1

# --- the quorum tier (quorum.store, quorum.cluster, quorum.coordinator) ---------------------------

#: etcd's limit on one request, bytes. Reason: etcd's default ``--max-request-bytes`` (1.5 MiB);
#: a larger transaction is refused by the server.
ETCD_REQUEST_BYTES_MAX = 1_572_864

#: Operations in one etcd transaction. Reason: the cluster starts its members with
#: ``--max-txn-ops`` set to this (etcd's default is 128, too few for a batch of 200 events).
ETCD_TXN_OPS_MAX = 1024

#: Events per etcd transaction. Reason: each event takes two puts (its bytes and its id) and each
#: trajectory touched up to three puts and two comparisons; see the relation checked below.
ETCD_TXN_EVENTS_MAX = 200

#: Encoded event bytes per etcd transaction. Reason: the request limit, less room for keys,
#: comparisons and the JSON framing of the request.
ETCD_TXN_BYTES_MAX = 900_000

#: Bytes counted per event on top of its base64 encoding (keys, id record, JSON framing): a
#: measure used with the bounds above, not a bound itself.
ETCD_EVENT_OVERHEAD_BYTES = 256

#: Times the quorum store decides a batch again when concurrent writers change the state it read.
#: Reason: a batch is never applied against a stale state; past this many losses the caller retries.
ETCD_TXN_TRIES_MAX = 20

#: Longest etcd lease, seconds. Reason: etcd's ``MaxLeaseTTL`` (9e9 s); a longer TTL is refused by
#: the server. Enforced by ``quorum.coordinator``.
ETCD_LEASE_TTL_S_MAX = 9_000_000_000

# --- group commit (log.group_commit) ---------------------------------------------------------------

#: Batches a group committer holds ahead of its flusher (the open batch and full ones waiting).
#: Reason: bounds the memory held by unacknowledged events when the store is slower than the
#: writers; past it a writer waits for a flush (backpressure), and is never dropped.
GROUP_COMMIT_QUEUED_BATCHES_MAX = 64

# --- the segment log (log.segment) -----------------------------------------------------------------

#: Smallest ``segment_bytes`` a segment log accepts. Reason: a segment must hold its header and
#: at least one small record before it rolls; a batch larger than a segment gets one of its own.
SEGMENT_BYTES_MIN = 256

# --- checkpoints (checkpoint.restore, checkpoint.capture, checkpoint.index) ----------------------

#: Widest window of events scanned at once when looking back for the newest Checkpoint event.
#: Reason: the window doubles from 256; this caps the memory of one read.
CHECKPOINT_SCAN_WINDOW_MAX = 65_536

#: Longest chain of incremental checkpoints a restore follows. Reason: a longer chain is a
#: corrupted or cyclic base reference, not a real history (captures fall back to a full one long
#: before).
CHECKPOINT_CHAIN_LENGTH_MAX = 100_000

#: Fewest events between two in-memory record snapshots of a checkpoint index. Reason: a snapshot
#: costs O(operations) pointer copies; closer ones cost more than refolding the gap.
CHECKPOINT_INDEX_STRIDE_MIN = 64

#: Most in-memory record snapshots a checkpoint index keeps. Reason: bounds its memory to a small
#: multiple of one record.
CHECKPOINT_INDEX_SNAPSHOTS_MAX = 48

# --- resume (resume.stages) ------------------------------------------------------------------------

#: Largest token count a resume stage accepts. Reason: far above any context window; anything
#: larger is a unit mistake, refused before it makes an absurd timeline.
RESUME_TOKENS_MAX = 10**12

#: Latest time (s from the start of a resume) a stage may name. Reason: keeps every sum of stage
#: times exact to well under a millisecond in a double.
RESUME_SECONDS_MAX = 1e15

# --- measurement workloads (cadence.measure) -------------------------------------------------------

#: Largest filler a cadence measurement puts in one model input, bytes. Reason: the filler goes
#: into a ``ContextBuilt`` event, which must stay within :data:`EVENT_BYTES_MAX` with its envelope.
MEASURE_PAYLOAD_BYTES_MAX = EVENT_BYTES_MAX - 8_192


def etcd_encoded_bytes(event_bytes: int) -> int:
    """Bytes an event of ``event_bytes`` canonical bytes counts for in an etcd transaction
    (its base64 encoding plus :data:`ETCD_EVENT_OVERHEAD_BYTES`)."""
    return 4 * ((event_bytes + 2) // 3) + ETCD_EVENT_OVERHEAD_BYTES


# --- relations between the bounds, checked at import ----------------------------------------------


def _relations() -> list[tuple[bool, str]]:
    return [
        (etcd_encoded_bytes(EVENT_BYTES_MAX) <= ETCD_TXN_BYTES_MAX,
         "a largest event, base64-encoded, fits one etcd transaction (EVENT_BYTES_MAX <= ETCD_TXN_BYTES_MAX)"),
        (ETCD_TXN_BYTES_MAX + 64 * 1024 <= ETCD_REQUEST_BYTES_MAX,
         "a full transaction leaves 64 KiB of the etcd request for keys, comparisons and framing"),
        (5 * ETCD_TXN_EVENTS_MAX <= ETCD_TXN_OPS_MAX,
         "a transaction of ETCD_TXN_EVENTS_MAX events (2 puts each, up to 3 puts per trajectory) stays within "
         "ETCD_TXN_OPS_MAX"),
        (JSON_NUMBER_MAX < OWNER_EPOCH_MAX == SEQUENCE_NUMBER_MAX == 2**63 - 1,
         "epochs and sequence numbers share the signed 64-bit range; JSON numbers are narrower"),
        (0 < MEASURE_PAYLOAD_BYTES_MAX < EVENT_BYTES_MAX, "a measurement's filler fits one event with its envelope"),
        (SEGMENT_BYTES_MIN >= 64, "a segment holds at least its header"),
        (GROUP_COMMIT_QUEUED_BATCHES_MAX >= 1, "a group committer can queue at least its open batch"),
        (CHECKPOINT_INDEX_STRIDE_MIN >= 1 and CHECKPOINT_INDEX_SNAPSHOTS_MAX >= 1, "an index keeps snapshots"),
        (256 <= CHECKPOINT_SCAN_WINDOW_MAX, "the scan window may grow from its first 256 events"),
        (JSON_DEPTH_MAX < 500, "nesting stays far below Python's recursion limit"),
        (USAGE_USD_MAX <= JSON_NUMBER_MAX, "a usage report taken as evidence is storable in its BudgetSettled event"),
    ]


def _check_relations() -> None:
    broken = [why for ok, why in _relations() if not ok]
    if broken:   # a programmer error in this file: refuse to import rather than run with it
        raise AssertionError("kernel_lib.limits: broken relation(s): " + "; ".join(broken))


_check_relations()
