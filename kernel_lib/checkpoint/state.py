"""Record snapshots and record deltas (§11.4.1, §11.4.2).

A **record snapshot** holds one document::

    {"format": <the snapshot format>, "reducer_version": <int>,
     "record": <the record's scalars, task, budget figures and lists>,
     "tables": {"operations" | "attempts" | "reservations" | "approvals" | "decisions":
                {"ids": [...], "fields": [...], "rows": [[...], ...]}}}

in one of four formats, named by the ``record_format`` of the manifest that points at it:

* ``kernel_lib.record-snapshot/4`` (written today for every new chain): format 3's document
  with each table's ids and rows stored as byte strings instead of lists. ``row_bytes`` holds
  the rows' own MessagePack encodings one after the other and ``row_ends`` where each ends
  (little-endian uint64, one per row, the last one the length of ``row_bytes``), so row i lies
  between ``row_ends[i-1]`` (0 for the first) and ``row_ends[i]``; ``id_bytes`` and
  ``id_ends`` hold the ids (strings) alike. ``id_order`` and ``id_buckets`` (little-endian
  uint32) are a hash index of the ids: an id's bucket is the xxh3_64 of its encoding modulo
  the least power of two at or above the row count, ``id_order`` lists the row numbers by
  bucket (row order within one) and ``id_buckets`` where each bucket starts in it. A restore
  therefore decodes no id and no row and builds no dict of ids: the bytes come back as views
  of the stored object, a key the log suffix uses is found through the index, and its row
  decoded from its slice, when first used (:func:`record_from_snapshot`,
  :class:`~kernel_lib.core.lazy_table.IndexedLazyTable`; ``bench restore``). For the 56 000
  rows of a 100 000-event record, format 3's restore spends about 17 ms parsing past rows and
  7 ms decoding ids into dicts; format 4's about 0.3 ms. Offsets out of range, not increasing
  or not one per row, and an index that is not the index of its ids, are refused as a damaged
  snapshot (an index is checked in full when every key is first needed). A table whose ids
  are not all strings keeps its ``ids`` list;
* ``kernel_lib.record-snapshot/3`` (still read, and still written for the delta chains that
  started in it): MessagePack (msgspec), every map's keys sorted, holding
  :meth:`TrajectoryRecord.state_dict` (the budget in integer micro-dollars). Each value keeps its
  type (5 and 5.0 stay apart), so the decoded record is exactly the folded one, and decoding is
  several times quicker than parsing the same document as JSON. Each operation row carries its
  own attempts (its ``attempts`` cell is a list of ``[key, *values]`` rows under the table's
  ``attempt_fields``), so any one row can be decoded on its own; a restore leaves the rows
  stored until first read, but must still parse past each of them;
* ``kernel_lib.record-snapshot/2`` (older checkpoints; read, and continued likewise): the same
  encoding with the attempts in a table of their own whose rows name their operation by
  position, so it is always decoded in full;
* ``kernel_lib.record-snapshot/1`` (older checkpoints, read and continued likewise): canonical
  RFC 8785 JSON holding :meth:`TrajectoryRecord.snapshot_state` (the budget's figures in USD
  under their USD names).

Either way :meth:`TrajectoryRecord.from_dict` rebuilds an equal record. The record's tables are
written as rows under one field list, in insertion order: both encodings sort map keys, which
would lose the order the record shows (the operation table and the in-doubt lists are in log
order), and rows keep a 100 000-event record's snapshot small and quick to decode (every field
name once, not once per entry). A table whose entries do not all share their fields is stored
as ``values`` in every format. The SHA-256 of the stored bytes is the record digest a
checkpoint manifest and its ``Checkpoint`` event carry; equal records (same values, same types,
same table order) give the same bytes in every format (format 4 encodes each row with the same
sorted-key encoder), so the digest of a record rebuilt through a delta chain can be checked
against the one captured.

A **record delta** holds only what changed in the state since a base state: an ordered list of
operations on JSON paths (lists of object keys):

* ``["set", path, value]``: put ``value`` at ``path`` (a new or changed field);
* ``["del", path]``: remove the key at ``path``;
* ``["extend", path, items]``: append ``items`` to the list at ``path`` (record lists only grow).

Because the reducer only adds to its tables and lists, a delta between two checkpoints is about
as large as the record fields the intervening events changed, not the whole record; that is the
state growth term of eq. 3, not the log suffix. New table entries are set in insertion order, so
applying a delta keeps the tables' order (and the chain's final digest check would notice if not).
A delta is stored in the encoding of its chain's snapshots: ``kernel_lib.record-delta/2``
(MessagePack; a value whose type changed is set again) with snapshot formats 2, 3 and 4 (a
delta works on the state, which is the same in the three; only the snapshot encoding differs),
``kernel_lib.record-delta/1`` (canonical JSON) with format 1.
"""

from __future__ import annotations

import json
import sys
from array import array
from collections import Counter, deque
from itertools import accumulate, repeat
from operator import itemgetter, setitem
from typing import TYPE_CHECKING, Any, Sequence

import msgspec
import rfc8785
from xxhash import xxh3_64_intdigest

from kernel_lib._support.gc_pause import cyclic_gc_paused
from kernel_lib.errors import CheckpointError, UnrecoverableStateError
from kernel_lib.core.events import REDUCER_VERSION
from kernel_lib.checkpoint.blobs import sha256_hex

if TYPE_CHECKING:
    from kernel_lib.core.record import TrajectoryRecord

#: The record snapshot format of the first checkpoints: canonical JSON, budget figures in USD.
RECORD_FORMAT_JSON = "kernel_lib.record-snapshot/1"
#: Sorted-key MessagePack, budget in micro-dollars, attempts in a table of their own (still read).
RECORD_FORMAT_ATTEMPT_TABLE = "kernel_lib.record-snapshot/2"
#: Format 2 with each operation row holding its attempts (still read; its chains stay in it).
RECORD_FORMAT_NESTED = "kernel_lib.record-snapshot/3"
#: The record snapshot format written today: format 3 with each table's rows as one byte string
#: of row encodings plus their end offsets.
RECORD_FORMAT = "kernel_lib.record-snapshot/4"
RECORD_DELTA_FORMAT_JSON = "kernel_lib.record-delta/1"
RECORD_DELTA_FORMAT = "kernel_lib.record-delta/2"
#: Snapshot format → the format of the record deltas chained on it; the snapshot formats this build reads.
DELTA_FORMAT_OF = {RECORD_FORMAT_JSON: RECORD_DELTA_FORMAT_JSON, RECORD_FORMAT_ATTEMPT_TABLE: RECORD_DELTA_FORMAT,
                   RECORD_FORMAT_NESTED: RECORD_DELTA_FORMAT, RECORD_FORMAT: RECORD_DELTA_FORMAT}
#: The MessagePack formats (every other one is canonical JSON).
_BINARY_FORMATS = frozenset({RECORD_FORMAT_ATTEMPT_TABLE, RECORD_FORMAT_NESTED, RECORD_FORMAT, RECORD_DELTA_FORMAT})
#: The formats whose operation rows hold their attempts (and whose rows a restore can leave stored).
_NESTED_FORMATS = frozenset({RECORD_FORMAT_NESTED, RECORD_FORMAT})
#: Format 4's row and id offsets: little-endian unsigned 64-bit integers.
_END_BYTES = 8
#: The array type code of 32-bit unsigned integers (format 4's id index).
_U32 = "I" if array("I").itemsize == 4 else "L"
READABLE_RECORD_FORMATS = tuple(DELTA_FORMAT_OF)
#: Reservation fields as a format-1 record snapshot holds them (USD figures, TrajectoryRecord.snapshot_state).
_RESERVATION_USD_FIELDS = frozenset({"reservation_id", "subject_id", "amount_usd", "settled_usd", "released"})
#: Sorted keys in every map: equal documents encode to equal bytes (insertion order never matters).
_MSGPACK = msgspec.msgpack.Encoder(order="deterministic")
_UNPACK = msgspec.msgpack.Decoder()


def canonical(obj: Any) -> bytes:
    """RFC 8785 bytes of plain JSON data."""
    return rfc8785.dumps(obj)


def _check_format(fmt: str) -> str:
    if fmt not in DELTA_FORMAT_OF:
        raise UnrecoverableStateError(f"record snapshot format {fmt!r} is not one this build reads "
                                      f"({', '.join(READABLE_RECORD_FORMATS)})", missing=[("record snapshot", fmt)])
    return fmt


def state_of(record: "TrajectoryRecord", fmt: str = RECORD_FORMAT) -> dict[str, Any]:
    """The state a ``fmt`` snapshot of ``record`` holds: :meth:`TrajectoryRecord.state_dict`
    (formats 2 and 3) or :meth:`TrajectoryRecord.snapshot_state` (format 1, budget figures in USD)."""
    return record.snapshot_state() if _check_format(fmt) == RECORD_FORMAT_JSON else record.state_dict()


def _encode_doc(doc: dict[str, Any], binary: bool) -> bytes:
    if not binary:
        return canonical(doc)
    try:
        return _MSGPACK.encode(doc)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CheckpointError(f"the record state cannot be stored as a record snapshot: {exc}") from None


def _decode_doc(data: bytes, fmt: str | None, what: str) -> dict[str, Any]:
    """The document of snapshot or delta bytes, in the encoding ``fmt`` names (None: guessed from
    the first byte, a JSON object starting with ``{``); ValueError if it is not one."""
    binary = fmt in _BINARY_FORMATS if fmt is not None else data[:1] != b"{"
    try:
        d = _UNPACK.decode(data) if binary else json.loads(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"not MessagePack ({exc})") from None
    if not isinstance(d, dict):
        raise ValueError(f"a {type(d).__name__}, not a {what} object")
    if fmt is not None and d.get("format") != fmt:
        raise ValueError(f"format is {d.get('format')!r}, not the {fmt!r} its manifest names")
    return d


def _pack(table: dict[str, Any]) -> dict[str, Any]:
    """A table (id → object) as ``{"ids", "fields", "rows"}`` (fields sorted) when every object
    has the same keys, else ``{"ids", "values"}``: either way in insertion order."""
    ids = list(table)
    values = list(table.values())
    if values and all(type(v) is dict for v in values):
        keys = values[0].keys()
        if all(v.keys() == keys for v in values):
            fields = sorted(keys)
            return {"ids": ids, "fields": fields, "rows": [[v[f] for f in fields] for v in values]}
    return {"ids": ids, "values": values}


def _keyed(ids: list[Any], values: Any) -> dict[str, Any]:
    """``dict(zip(ids, values))``; ValueError if an id is given twice (the later row would silently
    replace the earlier one: a table entry lost)."""
    out = dict(zip(ids, values))
    if len(out) != len(ids):
        raise ValueError(f"a packed table names {len(ids) - len(out)} id(s) twice")
    return out


def _unpack(packed: dict[str, Any]) -> dict[str, Any]:
    ids = packed["ids"]
    if "rows" in packed:
        fields, rows = packed["fields"], packed["rows"]
        if len(rows) != len(ids) or any(len(r) != len(fields) for r in rows):
            raise ValueError("a packed table's rows do not match its ids and fields")
        return _keyed(ids, map(dict, map(zip, repeat(fields), rows)))
    if len(packed["values"]) != len(ids):
        raise ValueError("a packed table's values do not match its ids")
    return _keyed(ids, packed["values"])


def _uniform(values: list[Any]) -> list[str] | None:
    """The sorted common keys of ``values`` when each is a dict with the same keys, else None."""
    if not values or not all(type(v) is dict for v in values):
        return None
    keys = values[0].keys()
    return sorted(keys) if all(v.keys() == keys for v in values) else None


def _pack_operations_nested(ops: dict[str, Any]) -> dict[str, Any]:
    """Format 3's operation table: one row per operation whose ``attempts`` cell is the list of
    its attempts as ``[key, *values]`` rows under the table's ``attempt_fields``, in order; a
    table whose entries do not all share their fields is stored as ``values`` with each
    ``attempts`` as ``[key, attempt]`` pairs (the order kept either way)."""
    ids, values = list(ops), list(ops.values())
    if not ids:
        return {"ids": [], "fields": [], "attempt_fields": [], "rows": []}
    fields = _uniform(values)
    attempts = [a for v in values if type(v) is dict and type(v.get("attempts")) is dict
                for a in v["attempts"].values()]
    a_fields = _uniform(attempts) if attempts else []
    if fields is None or "attempts" not in fields or a_fields is None:
        return {"ids": ids, "values": [{**v, "attempts": [[k, a] for k, a in v["attempts"].items()]}
                                       if type(v) is dict and type(v.get("attempts")) is dict else v
                                       for v in values]}
    at = fields.index("attempts")
    rows = []
    for v in values:
        row = [v[f] for f in fields]
        row[at] = [[k, *[a[f] for f in a_fields]] for k, a in v["attempts"].items()]
        rows.append(row)
    return {"ids": ids, "fields": fields, "attempt_fields": a_fields, "rows": rows}


def _unpack_operations_nested(packed: dict[str, Any]) -> dict[str, Any]:
    ids = packed["ids"]
    if "rows" not in packed:
        if len(packed["values"]) != len(ids):
            raise ValueError("a packed table's values do not match its ids")
        return _keyed(ids, ({**v, "attempts": {a[0]: a[1] for a in v["attempts"]}} for v in packed["values"]))
    fields, a_fields, rows = packed["fields"], packed["attempt_fields"], packed["rows"]
    if len(rows) != len(ids) or any(len(r) != len(fields) for r in rows):
        raise ValueError("a packed table's rows do not match its ids and fields")
    if not rows:
        return {}
    at = fields.index("attempts")
    out = []
    for row in rows:
        d = dict(zip(fields, row))
        d["attempts"] = _attempts_of(row[at], a_fields)
        out.append(d)
    return _keyed(ids, out)


def _attempts_of(cell: Any, a_fields: list[str]) -> dict[str, Any]:
    """The attempts dict of a format-3 operation row's ``attempts`` cell; ValueError if malformed."""
    if type(cell) is not list or any(type(r) is not list or len(r) != len(a_fields) + 1 for r in cell):
        raise ValueError(f"an operation's attempts must be rows of a key and {len(a_fields)} values")
    if cell and not a_fields:   # a writer stores attempt fields whenever any operation has an attempt
        raise ValueError("an operation has attempts but the table names no attempt fields")
    out = {r[0]: dict(zip(a_fields, r[1:])) for r in cell}
    if len(out) != len(cell):
        raise ValueError("an operation names one of its attempts twice")
    return out


def _pack_state(state: dict[str, Any], nested: bool = True) -> dict[str, Any]:
    out = dict(state)
    tables: dict[str, Any] = {}
    if "operations" in state:
        ops = state["operations"]
        if nested:
            tables["operations"] = _pack_operations_nested(ops)
        else:
            attempts = []
            for pos, o in enumerate(ops.values()):
                for key, a in o.get("attempts", {}).items():
                    attempts.append({"operation": pos, "key": key, **a})
            tables["operations"] = _pack({k: {f: v for f, v in o.items() if f != "attempts"} for k, o in ops.items()})
            tables["attempts"] = _pack({str(i): a for i, a in enumerate(attempts)})
        del out["operations"]
    if "budget" in state:
        out["budget"] = {k: v for k, v in state["budget"].items() if k != "reservations"}
        tables["reservations"] = _pack(state["budget"].get("reservations", {}))
    for name in ("approvals", "decisions"):
        if name in state:
            tables[name] = _pack(state[name])
            del out[name]
    return {"record": out, "tables": tables}


def _unpack_state(packed: dict[str, Any], nested: bool = False) -> dict[str, Any]:
    state, tables = dict(packed["record"]), packed["tables"]
    if packed.get("format") == RECORD_FORMAT:
        tables = {k: _rows_from_bytes(t, k) for k, t in tables.items()}
    if "operations" in tables and nested:
        state["operations"] = _unpack_operations_nested(tables["operations"])
    elif "operations" in tables:
        ops = _unpack(tables["operations"])
        order = list(ops.values())
        for o in order:
            o["attempts"] = {}
        for a in _unpack(tables["attempts"]).values():
            order[a.pop("operation")]["attempts"][a.pop("key")] = a
        state["operations"] = ops
    if "reservations" in tables:
        state["budget"] = {**state["budget"], "reservations": _unpack(tables["reservations"])}
    for name in ("approvals", "decisions"):
        if name in tables:
            state[name] = _unpack(tables[name])
    return state


def encode_record_state(state: dict[str, Any], reducer_version: int = REDUCER_VERSION, *,
                        format: str = RECORD_FORMAT) -> bytes:
    """The record snapshot bytes of ``state`` (:func:`state_of` a record) in snapshot format
    ``format`` (see the module docstring). Raises CheckpointError if a value cannot be encoded
    (formats 2 and 3; format 1 raises rfc8785's errors)."""
    doc = {"format": _check_format(format), "reducer_version": reducer_version,
           **_pack_state(state, nested=format in _NESTED_FORMATS)}
    if format == RECORD_FORMAT:
        doc["tables"] = {k: _rows_as_bytes(t) for k, t in doc["tables"].items()}
    return _encode_doc(doc, format in _BINARY_FORMATS)


def _uints(code: str, values: Any) -> bytes:
    """Little-endian unsigned integers (``Q``: 64-bit, ``_U32``: 32-bit) as bytes."""
    out = array(code, values)
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def _uint_view(raw: Any, code: str) -> Sequence[int]:
    """The little-endian unsigned integers of ``raw`` (``Q`` or ``_U32``), without a copy on a
    little-endian machine; ValueError if ``raw`` is not a whole number of them."""
    size = array(code).itemsize
    if len(raw) % size:
        raise ValueError(f"{len(raw)} bytes are not a whole number of {size}-byte integers")
    if sys.byteorder == "little":
        return memoryview(raw).cast("B").cast(code)
    out = array(code, bytes(raw))
    out.byteswap()
    return out


def _bucket_count(count: int) -> int:
    """Buckets of the id index of ``count`` ids: the least power of two >= count (1 for none)."""
    return 1 << (count - 1).bit_length() if count > 1 else 1


def _id_index(encoded: list[bytes]) -> tuple[bytes, bytes]:
    """``(id_buckets, id_order)`` of ids given by their MessagePack encodings: an id's bucket is
    xxh3_64 of its encoding modulo :func:`_bucket_count`; ``id_order`` is the row numbers sorted
    by bucket (row order within one) and ``id_buckets`` where each bucket starts in it, one more
    entry than buckets (the last one the row count); both little-endian uint32."""
    count = len(encoded)
    if count >= 1 << 32:
        raise CheckpointError(f"a record table of {count} rows is more than a record snapshot indexes")
    mask = _bucket_count(count) - 1
    buckets = [h & mask for h in map(xxh3_64_intdigest, encoded)]
    counts = Counter(buckets)
    starts = accumulate((counts.get(b, 0) for b in range(mask + 1)), initial=0)
    return _uints(_U32, starts), _uints(_U32, sorted(range(count), key=buckets.__getitem__))


def _rows_as_bytes(table: dict[str, Any]) -> dict[str, Any]:
    """A packed table in format 4's layout: its ``rows`` list replaced by ``row_bytes`` (each
    row's sorted-key MessagePack, one after the other) and ``row_ends`` (where each row ends,
    little-endian uint64), and (when every id is a string) its ``ids`` by ``id_bytes`` and
    ``id_ends`` (the ids' encodings and ends, alike) with the hash index ``id_buckets`` and
    ``id_order`` (:func:`_id_index`). A table stored as ``values`` is returned as it is."""
    if "rows" not in table:
        return table
    out = {k: v for k, v in table.items() if k != "rows"}
    ids = table["ids"]
    if all(type(k) is str for k in ids):
        del out["ids"]
        encoded = list(map(_MSGPACK.encode, ids))
        out["id_bytes"], out["id_ends"] = b"".join(encoded), _uints("Q", accumulate(map(len, encoded)))
        out["id_buckets"], out["id_order"] = _id_index(encoded)
    buf, ends = bytearray(), array("Q")
    try:
        for row in table["rows"]:
            _MSGPACK.encode_into(row, buf, -1)
            ends.append(len(buf))
    except (TypeError, ValueError, OverflowError) as exc:
        raise CheckpointError(f"the record state cannot be stored as a record snapshot: {exc}") from None
    if sys.byteorder != "little":
        ends.byteswap()
    out["row_bytes"], out["row_ends"] = bytes(buf), ends.tobytes()
    return out


def _row_ends(raw: Any, count: int, size: int, what: str) -> Sequence[int]:
    """The end offsets of a format-4 table's rows (or ids): ``count`` little-endian uint64, the
    last one ``size`` (the length of the bytes they cut). ValueError if they are not; whether
    each row starts before it ends is checked when the row is sliced (:func:`_row_slice`)."""
    if len(raw) != count * _END_BYTES:
        raise ValueError(f"{what} table: {len(raw)} bytes of ends for {count} rows ({_END_BYTES} bytes per row)")
    ends = _uint_view(raw, "Q")
    if (ends[-1] if count else 0) != size:
        raise ValueError(f"{what} table: its last end is byte {ends[-1] if count else 0}, its bytes end at {size}")
    return ends


def _row_slice(rows: Any, ends: Sequence[int], i: int) -> Any:
    """Row ``i`` of a format-4 table: ``rows[ends[i-1]:ends[i]]`` (from 0 for the first row);
    ValueError unless it starts before it ends, inside ``rows`` (offsets out of range or not
    increasing)."""
    start, end = (ends[i - 1] if i else 0), ends[i]
    if not start < end <= len(rows):
        raise ValueError(f"row {i} would run from byte {start} to {end} of {len(rows)}: the ends are not "
                         "increasing offsets into the bytes")
    return rows[start:end]


def _array_header(count: int) -> bytes:
    """The MessagePack header of an array of ``count`` items (the shortest form, as encoders write)."""
    if count < 16:
        return bytes([0x90 | count])
    return (b"\xdc" + count.to_bytes(2, "big")) if count < 1 << 16 else (b"\xdd" + count.to_bytes(4, "big"))


def _checked_ids(id_bytes: Any, id_ends: Any, buckets: Any, order: Any, count: int, what: str) -> list[str]:
    """The ids of a format-4 table, decoded and checked against everything stored about them:
    ``count`` strings whose encodings are ``id_bytes`` cut at ``id_ends``, none twice, and the
    hash index the writer makes of them (:func:`_id_index`). ValueError if not."""
    ends = _row_ends(id_ends, count, len(id_bytes), f"{what} id")
    try:
        ids = _UNPACK.decode(_array_header(count) + bytes(id_bytes))
    except msgspec.DecodeError as exc:
        raise ValueError(f"{what} table: its ids are not {count} MessagePack values ({exc})") from None
    if type(ids) is not list or len(ids) != count or any(type(k) is not str for k in ids):
        raise ValueError(f"{what} table: its id bytes do not hold {count} strings")
    encoded = list(map(_MSGPACK.encode, ids))
    if list(accumulate(map(len, encoded))) != list(ends):
        raise ValueError(f"{what} table: its id ends do not fall between its ids")
    if len(set(ids)) != count:
        raise ValueError(f"{what} table: it names {count - len(set(ids))} id(s) twice")
    if _id_index(encoded) != (bytes(buckets), bytes(order)):
        raise ValueError(f"{what} table: its id index is not the index of its ids")
    return ids


class _IdIndex:
    """A format-4 table's stored id index (:func:`_id_index`), read in place: the
    :class:`~kernel_lib.core.lazy_table.KeyIndex` of its
    :class:`~kernel_lib.core.lazy_table.IndexedLazyTable`. :meth:`find` hashes the key's
    encoding and compares it with the ids in its bucket; offsets found out of range raise
    UnrecoverableStateError naming the snapshot. Whether the index is the index of its ids is
    checked when every key is asked for (:meth:`keys`), not per lookup."""

    __slots__ = ("_ids", "_ends", "_starts", "_order", "_mask", "_count", "_what", "_name", "_raw")

    def __init__(self, t: "_ByteTable", count: int, what: str, name: str) -> None:
        self._ids, self._count, self._what, self._name = t.id_bytes, count, what, name
        self._ends = _row_ends(t.id_ends, count, len(t.id_bytes), f"{what} id")
        self._starts, self._order = _uint_view(t.id_buckets, _U32), _uint_view(t.id_order, _U32)
        buckets = _bucket_count(count)
        if len(self._starts) != buckets + 1 or len(self._order) != count or self._starts[0] != 0 \
                or self._starts[buckets] != count:
            raise ValueError(f"{what} table: its id index does not index {count} ids in {buckets} buckets")
        self._mask = buckets - 1
        self._raw = (t.id_ends, t.id_buckets, t.id_order)

    def __len__(self) -> int:
        return self._count

    def _bad(self, why: str) -> UnrecoverableStateError:
        return UnrecoverableStateError(f"{self._name}: the {self._what} table's id index {why}",
                                       missing=[("record snapshot", self._name)])

    def find(self, key: Any) -> int:
        if not isinstance(key, str):
            return -1
        kb = _MSGPACK.encode(key)
        b = xxh3_64_intdigest(kb) & self._mask
        lo, hi = self._starts[b], self._starts[b + 1]
        if not lo <= hi <= self._count:
            raise self._bad(f"gives bucket {b} the rows {lo}..{hi} of {self._count}")
        ids, ends, order = self._ids, self._ends, self._order
        for j in range(lo, hi):
            i = order[j]
            if i >= self._count:
                raise self._bad(f"names row {i} of {self._count}")
            start = ends[i - 1] if i else 0
            if not start < ends[i] <= len(ids):
                raise self._bad(f"finds id {i} at bytes {start}..{ends[i]} of {len(ids)}")
            if ids[start:ends[i]] == kb:
                return i
        return -1

    def keys(self) -> list[str]:
        try:
            return _checked_ids(self._ids, *self._raw, self._count, self._what)
        except ValueError as exc:
            raise UnrecoverableStateError(f"{self._name} is not a record snapshot: {exc}",
                                          missing=[("record snapshot", self._name)]) from None


def _rows_from_bytes(table: Any, what: str) -> Any:
    """A format-4 packed table (plain decoded data) back in format 3's layout: ``ids`` (checked
    as :func:`_checked_ids` does) and a ``rows`` list, every row decoded; a table stored as
    ``values`` as it is. ValueError if the ids, the offsets or a row are malformed."""
    if not isinstance(table, dict) or "values" in table:
        return table
    if "rows" in table:
        raise ValueError(f"{what} table: format 4 stores rows as row_bytes and row_ends, not as a list")
    rows, raw_ends = table["row_bytes"], table["row_ends"]
    if type(rows) is not bytes or type(raw_ends) is not bytes:
        raise ValueError(f"{what} table: row_bytes and row_ends must be byte strings")
    if "id_bytes" in table:
        parts = [table[k] for k in ("id_bytes", "id_ends", "id_buckets", "id_order")]
        if any(type(x) is not bytes for x in parts):
            raise ValueError(f"{what} table: its id bytes, ends and index must be byte strings")
        ids = _checked_ids(*parts, len(parts[1]) // _END_BYTES, what)
    else:
        ids = table["ids"]
        if type(ids) is not list:
            raise ValueError(f"{what} table: ids must be a list")
    ends = _row_ends(raw_ends, len(ids), len(rows), what)
    view = memoryview(rows)
    out = {k: v for k, v in table.items() if k not in ("row_bytes", "row_ends", "id_bytes", "id_ends", "id_buckets",
                                                       "id_order")}
    out["ids"] = ids
    out["rows"] = [_UNPACK.decode(_row_slice(view, ends, i)) for i in range(len(ids))]
    return out


def decode_record_state(data: bytes, *, name: str = "record snapshot",
                        format: str | None = None) -> tuple[dict[str, Any], int]:
    """``(state, reducer_version)`` of snapshot bytes, with the tables in their recorded order.
    ``format``: the snapshot format the manifest names (None: either, told by the bytes).
    Raises UnrecoverableStateError if they are not a record snapshot of that format."""
    with cyclic_gc_paused():   # a large snapshot is hundreds of thousands of new objects and no garbage
        try:
            d = _decode_doc(data, format, "record snapshot")
            if d.get("format") not in DELTA_FORMAT_OF or not isinstance(d.get("record"), dict):
                raise ValueError(f"format is {d.get('format')!r}")
            return _unpack_state(d, nested=d["format"] in _NESTED_FORMATS), int(d["reducer_version"])
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError) as exc:
            raise UnrecoverableStateError(f"{name} is not a record snapshot: {exc}",
                                          missing=[("record snapshot", name)]) from None


def _rows(table: dict[str, Any], what: str) -> list[list[Any]]:
    """The rows of a packed table, checked against its ids and fields (ValueError if not)."""
    ids, fields, rows = table["ids"], table.get("fields", []), table.get("rows", [])
    if type(ids) is not list or type(fields) is not list or type(rows) is not list:
        raise ValueError(f"{what} table: ids, fields and rows must be lists")
    if len(rows) != len(ids):
        raise ValueError(f"{what} table: {len(rows)} rows for {len(ids)} ids")
    if rows and (set(map(type, rows)) != {list} or set(map(len, rows)) != {len(fields)}):
        raise ValueError(f"{what} table: every row must be a list of {len(fields)} values")
    return rows


def _instances(cls: type, dicts: list[dict[str, Any]]) -> list[Any]:
    """Instances of the (plain, non-slotted) dataclass ``cls`` whose ``__dict__`` are ``dicts``,
    made without an ``__init__`` call each and with the loops in C (map)."""
    objs = list(map(object.__new__, repeat(cls, len(dicts))))
    deque(map(object.__setattr__, objs, repeat("__dict__"), dicts), maxlen=0)
    return objs


def _new(cls: type, d: dict[str, Any]) -> Any:
    """An instance of the (plain, non-slotted) dataclass ``cls`` whose ``__dict__`` is ``d``."""
    obj = object.__new__(cls)
    obj.__dict__ = d
    return obj


def record_from_snapshot(data: bytes, *, name: str = "record snapshot", format: str | None = None,
                         lazy: bool = True) -> "TrajectoryRecord":
    """The :class:`~kernel_lib.core.record.TrajectoryRecord` of snapshot bytes (the full-checkpoint
    restore path, §11.4.1), equal to ``TrajectoryRecord.from_dict(decode_record_state(data)[0])``
    and several times faster for a large record. ``format``: the snapshot format the manifest
    names (None: either, told by the bytes).

    Formats 4 and 3 with ``lazy`` (the default): the document is decoded down to its table
    rows, which stay in their stored form inside :class:`~kernel_lib.core.lazy_table.LazyTable`
    tables (operations, reservations, decisions) until first read; a restore then pays for the
    record's shell, its ids and the rows the log suffix touches, not for every object of a long
    trajectory. Format 4 stores a row as its row number (the row is sliced out of the table's
    ``row_bytes`` by its end offsets when read; no row is parsed before), format 3 as the row's
    own ``msgspec.Raw`` bytes (found by parsing past every row). The stored rows hold on to
    ``data`` until they are all built. ``lazy=False`` builds every row now (then a malformed row
    or offset fails here rather than when first read). The bytes are trusted to be the ones the
    manifest names: the caller checks their digest, before or (restore) alongside this call.
    Formats 1 and 2 are always built in full (each row's field dict becomes the instance's
    ``__dict__``; no intermediate state dict).

    Raises:
        UnrecoverableStateError: the bytes are not a record snapshot (of that format) this build
            reads, or a format-4 table's offsets are not one per id ending with its row bytes;
            with ``lazy``, also a row that turns out malformed (or whose offsets are out of
            range or not increasing) when it is first read.
    """
    with cyclic_gc_paused():   # hundreds of thousands of new objects and no garbage: skip the collector's passes
        try:
            guesses = ((format,) if format in _NESTED_FORMATS
                       else (RECORD_FORMAT, RECORD_FORMAT_NESTED) if format is None and data[:1] != b"{" else ())
            for fmt in guesses:
                rec = _record_from_rows(data, name, lazy, fmt)
                if rec is not None:
                    return rec
            return _record_from_v2(data, name, format)
        except UnrecoverableStateError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError,
                msgspec.DecodeError) as exc:
            raise UnrecoverableStateError(f"{name} is not a record snapshot: {exc}",
                                          missing=[("record snapshot", name)]) from None


class _StoredTable(msgspec.Struct):
    """A packed format-3 table decoded down to its rows, each left as its stored MessagePack bytes."""
    ids: list[str]
    fields: list[str] = []
    attempt_fields: list[str] = []
    rows: list[msgspec.Raw] | None = None
    values: msgspec.Raw = msgspec.Raw()          # empty: absent (a Raw cannot be in a union)


class _StoredTables(msgspec.Struct):
    operations: _StoredTable | None = None
    reservations: _StoredTable | None = None
    decisions: _StoredTable | None = None
    approvals: msgspec.Raw = msgspec.Raw()       # empty: absent


class _StoredSnapshot(msgspec.Struct):
    format: str
    reducer_version: int
    record: dict[str, Any]
    tables: _StoredTables


class _DecodedTable(_StoredTable):
    """The same table with its rows decoded."""
    rows: list[Any] | None = None


class _DecodedTables(_StoredTables):
    operations: _DecodedTable | None = None
    reservations: _DecodedTable | None = None
    decisions: _DecodedTable | None = None


class _DecodedSnapshot(_StoredSnapshot):
    tables: _DecodedTables


class _ByteTable(msgspec.Struct):
    """A format-4 table as stored: its ids' and rows' bytes, ends and id index as views of the
    stored bytes (no id or row parsed); ``ids`` only for a table stored as ``values``."""
    ids: list[str] | None = None
    fields: list[str] = []
    attempt_fields: list[str] = []
    id_bytes: memoryview | None = None
    id_ends: memoryview | None = None
    id_buckets: memoryview | None = None
    id_order: memoryview | None = None
    row_bytes: memoryview | None = None
    row_ends: memoryview | None = None
    values: msgspec.Raw = msgspec.Raw()          # empty: absent


class _ByteTables(msgspec.Struct):
    operations: _ByteTable | None = None
    reservations: _ByteTable | None = None
    decisions: _ByteTable | None = None
    approvals: msgspec.Raw = msgspec.Raw()       # empty: absent


class _ByteSnapshot(msgspec.Struct):
    format: str
    reducer_version: int
    record: dict[str, Any]
    tables: _ByteTables


_STORED = msgspec.msgpack.Decoder(_StoredSnapshot)
_DECODED = msgspec.msgpack.Decoder(_DecodedSnapshot)
_BYTES = msgspec.msgpack.Decoder(_ByteSnapshot)


def _row_counts(tables: tuple[Any, ...], in_bytes: bool) -> list[int] | None:
    """The row count of each lazily read table (format 4 when ``in_bytes``, else format 3), or
    None when one does not have the layout the lazy builders read."""
    counts = []
    for x in tables:
        if in_bytes:
            if x.id_bytes is None and x.ids == [] and x.row_bytes is None:
                counts.append(0)           # an empty table, stored as values
                continue
            if None in (x.id_bytes, x.id_ends, x.id_buckets, x.id_order, x.row_bytes, x.row_ends):
                return None
            counts.append(len(x.id_ends) // _END_BYTES)
        else:
            if not x.ids and x.rows is None:
                x.rows = []              # an empty table, stored as values
            if x.rows is None or len(x.rows) != len(x.ids):
                return None
            counts.append(len(x.ids))
    return counts


def _record_from_rows(data: bytes, name: str, lazy: bool, fmt: str) -> "TrajectoryRecord | None":
    """Format 3 or 4 as lazy tables (or built in full), or None when the document does not have
    the layout these builders read (then the caller decodes it in full).

    Format 3's stored rows are ``msgspec.Raw`` values (msgspec parsed past each to find the
    next) in a :class:`~kernel_lib.core.lazy_table.LazyTable` keyed by the decoded ids. Format
    4's tables are :class:`~kernel_lib.core.lazy_table.IndexedLazyTable` over the stored id
    index (no id decoded, no dict built, no row parsed): a key is found through the index when
    first used, and its row sliced out by its end offsets and decoded when first read."""
    from kernel_lib.core.lazy_table import IndexedLazyTable, LazyTable
    from kernel_lib.core.record import FIELD_NAMES, Attempt, Operation, Reservation, TrajectoryRecord

    in_bytes = fmt == RECORD_FORMAT
    try:
        d = (_BYTES if in_bytes else _STORED if lazy else _DECODED).decode(data)
    except msgspec.ValidationError:
        return None          # not this layout: the full decoder says what is wrong with it
    if d.format != fmt:
        return None
    t = d.tables
    op_t, res_t, dec_t = t.operations, t.reservations, t.decisions
    if op_t is None or res_t is None or dec_t is None:
        return None
    counts = _row_counts((op_t, res_t, dec_t), in_bytes)
    if counts is None:
        return None
    op_f, att_f, res_f, dec_f = list(op_t.fields), list(op_t.attempt_fields), list(res_t.fields), list(dec_t.fields)
    if counts[0] and (set(op_f) != FIELD_NAMES[Operation] or (att_f and set(att_f) != FIELD_NAMES[Attempt])):
        return None
    if (counts[1] and set(res_f) != FIELD_NAMES[Reservation]) or (counts[2] and not dec_f):
        return None
    approvals: dict[str, Any] = {}
    if len(t.approvals):
        packed = _UNPACK.decode(t.approvals)
        approvals = _unpack(_rows_from_bytes(packed, "approval") if in_bytes else packed)
    shell = dict(d.record, operations={}, decisions={}, approvals=approvals)
    shell["budget"] = {**shell["budget"], "reservations": {}}
    rec = TrajectoryRecord.from_dict(shell)
    at = op_f.index("attempts") if counts[0] else 0
    micro = [res_f.index(f) for f in ("amount_micro_usd", "settled_micro_usd")] if counts[1] else []

    def bad(what: str, key: str, why: str) -> UnrecoverableStateError:
        return UnrecoverableStateError(f"{name}: the {what} row of {key!r} {why}", missing=[("record snapshot", name)])

    def op_of(key: str, row: Any) -> Operation:
        if type(row) is not list or len(row) != len(op_f):
            raise bad("operation", key, f"is not a list of {len(op_f)} values")
        try:
            attempts = _attempts_of(row[at], att_f)
        except (ValueError, TypeError) as exc:
            raise bad("operation", key, f"has malformed attempts: {exc}") from None
        od = dict(zip(op_f, row))
        od["attempts"] = {k: _new(Attempt, a) for k, a in attempts.items()}
        return _new(Operation, od)

    def reservation_of(key: str, row: Any) -> Reservation:
        if type(row) is not list or len(row) != len(res_f):
            raise bad("reservation", key, f"is not a list of {len(res_f)} values")
        if any(type(row[i]) is not int for i in micro):
            raise bad("reservation", key, "has micro-dollar figures that are not integers")
        return _new(Reservation, dict(zip(res_f, row)))

    def decision_of(key: str, row: Any) -> dict[str, Any]:
        if type(row) is not list or len(row) != len(dec_f):
            raise bad("decision", key, f"is not a list of {len(dec_f)} values")
        return dict(zip(dec_f, row))

    built = ((op_t, op_of, "operation"), (res_t, reservation_of, "reservation"), (dec_t, decision_of, "decision"))

    def decoded(f: Any, what: str, key: str, raw: Any) -> Any:
        try:
            row = _UNPACK.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise bad(what, key, f"is not MessagePack ({exc})") from None
        return f(key, row)

    def stored(f: Any, what: str) -> Any:          # format 3: the row's own bytes
        def build(key: str, raw: msgspec.Raw) -> Any:
            return decoded(f, what, key, raw)
        return build

    def sliced(f: Any, what: str, rows: memoryview, ends: Sequence[int]) -> Any:   # format 4: a row number
        def build(key: str, i: int) -> Any:
            try:
                raw = _row_slice(rows, ends, i)
            except ValueError as exc:
                raise bad(what, key, f"cannot be found in the snapshot: {exc}") from None
            return decoded(f, what, key, raw)
        return build

    tables: list[Any] = []
    for (x, f, what), count in zip(built, counts):
        if in_bytes and x.id_bytes is None:      # empty
            tables.append(LazyTable({}, int, f) if lazy else {})
            continue
        if in_bytes:
            index = _IdIndex(x, count, what, name)
            build = sliced(f, what, x.row_bytes, _row_ends(x.row_ends, count, len(x.row_bytes), what))
            if lazy:
                tables.append(IndexedLazyTable(index, build))
                continue
            ids: list[Any] = index.keys()       # every id checked (none twice), with its index
            tables.append(dict(zip(ids, map(build, ids, range(count)))))
            continue
        table = dict(zip(x.ids, x.rows)) if lazy else dict(zip(x.ids, map(f, x.ids, x.rows)))
        if len(table) != len(x.ids):   # a later row would silently replace an earlier one
            raise UnrecoverableStateError(f"{name}: the {what} table names {len(x.ids) - len(table)} id(s) twice",
                                          missing=[("record snapshot", name)])
        tables.append(LazyTable(table, msgspec.Raw, stored(f, what)) if lazy else table)
    rec.operations, rec.budget.reservations, rec.decisions = tables
    return rec


def _record_from_v2(data: bytes, name: str, format: str | None) -> "TrajectoryRecord":
    """Formats 1 and 2 (and format 3 outside the lazy layout), built in full."""
    from kernel_lib.core.record import FIELD_NAMES, Attempt, Operation, Reservation, TrajectoryRecord

    d = _decode_doc(data, format, "record snapshot")
    if d.get("format") not in DELTA_FORMAT_OF or not isinstance(d.get("record"), dict):
        raise ValueError("not a record snapshot object")
    tables = d["tables"]
    op_t, att_t, res_t = tables.get("operations"), tables.get("attempts"), tables.get("reservations")
    op_f = FIELD_NAMES[Operation] - {"attempts"}
    att_f = FIELD_NAMES[Attempt] | {"operation", "key"}

    def fits(t: dict[str, Any], *names: frozenset[str]) -> bool:
        if not t["ids"]:
            return True
        fields = t.get("fields")
        return "rows" in t and type(fields) is list and any(len(fields) == len(n) and set(fields) == n
                                                             for n in names)

    fast = (op_t is not None and att_t is not None and res_t is not None and fits(op_t, op_f)
            and fits(att_t, att_f) and fits(res_t, FIELD_NAMES[Reservation], _RESERVATION_USD_FIELDS))
    if not fast:
        return TrajectoryRecord.from_dict(_unpack_state(d, nested=d["format"] in _NESTED_FORMATS))
    rest = dict(d, tables={k: v for k, v in tables.items()
                           if k not in ("operations", "attempts", "reservations")})
    shell = _unpack_state(rest)
    shell["operations"] = {}
    shell["budget"] = {**shell["budget"], "reservations": {}}
    rec = TrajectoryRecord.from_dict(shell)
    # operations: one field dict per row, each with a fresh attempts dict
    rows = _rows(op_t, "operation")
    odicts = list(map(dict, map(zip, repeat(op_t.get("fields", [])), rows)))
    slots: list[dict[str, Attempt]] = [{} for _ in odicts]
    deque(map(setitem, odicts, repeat("attempts"), slots), maxlen=0)
    ops = _keyed(op_t["ids"], _instances(Operation, odicts))
    # attempts: rows name their operation (its position in the table) and their key there
    rows = _rows(att_t, "attempt")
    if rows:
        fields = att_t["fields"]
        keep = [i for i, f in enumerate(fields) if f not in ("operation", "key")]
        adicts = list(map(dict, map(zip, repeat([fields[i] for i in keep]), map(itemgetter(*keep), rows))))
        positions = list(map(itemgetter(fields.index("operation")), rows))
        if set(map(type, positions)) != {int} or min(positions) < 0:
            raise ValueError("an attempt row names no operation position")
        for pos, key, a in zip(positions, map(itemgetter(fields.index("key")), rows),
                               _instances(Attempt, adicts)):
            slots[pos][key] = a
    # reservations: micro-dollar integers (format 2) or USD figures (format 1)
    rows = _rows(res_t, "reservation")
    res: dict[str, Reservation] = {}
    if rows:
        fields = res_t["fields"]
        if "amount_usd" in fields:   # converted as the fold converts them
            res = _keyed(res_t["ids"], [Reservation.from_usd(rd["reservation_id"], rd["subject_id"], rd["amount_usd"],
                                                             rd["settled_usd"], rd["released"])
                                        for rd in map(dict, map(zip, repeat(fields), rows))])
        else:
            for f in ("amount_micro_usd", "settled_micro_usd"):
                if set(map(type, map(itemgetter(fields.index(f)), rows))) != {int}:
                    raise ValueError(f"reservation {f} figures must be integers")
            res = _keyed(res_t["ids"], _instances(Reservation, list(map(dict, map(zip, repeat(fields), rows)))))
    rec.operations = ops
    rec.budget.reservations = res
    return rec


# ------------------------------------------------------------------------------------------------
# deltas
# ------------------------------------------------------------------------------------------------


def _same_scalar(a: Any, b: Any, exact: bool) -> bool:
    # JSON equality: 5 and 5.0 encode alike, True and 1 do not; exact (MessagePack): same type too
    if a is b:
        return True
    if exact:
        return type(a) is type(b) and type(a) in (int, float, str, bool) and a == b
    return (a == b and isinstance(a, bool) == isinstance(b, bool) and type(a) in (int, float, str, bool)
            and type(b) in (int, float, str, bool))


def _same(a: Any, b: Any, exact: bool) -> bool:
    if a is b:
        return True
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k], exact) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y, exact) for x, y in zip(a, b))
    if a is None or b is None:
        return False
    return _same_scalar(a, b, exact)


def _diff(a: Any, b: Any, path: list[str], ops: list[list[Any]], exact: bool) -> None:
    if a is b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                ops.append(["del", path + [k]])
        for k, v in b.items():
            if k not in a:
                ops.append(["set", path + [k], v])
            else:
                _diff(a[k], v, path + [k], ops, exact)
        return
    if isinstance(a, list) and isinstance(b, list):
        n = len(a)
        if len(b) >= n and all(x is y or _same(x, y, exact) for x, y in zip(a, b)):
            if len(b) > n:
                ops.append(["extend", path, b[n:]])
            return
        ops.append(["set", path, b])
        return
    if not _same(a, b, exact):
        ops.append(["set", path, b])


def diff_state(base: dict[str, Any], new: dict[str, Any], *, format: str = RECORD_FORMAT) -> list[list[Any]]:
    """The delta operations that turn ``base`` into ``new`` (both plain JSON objects), for a chain
    of snapshot format ``format``: under formats 2 and 3 a value whose type changed (5 to 5.0) is
    set again, since their snapshots tell them apart; under format 1 (JSON) it is not."""
    ops: list[list[Any]] = []
    _diff(base, new, [], ops, _check_format(format) in _BINARY_FORMATS)
    return ops


def apply_state_delta(state: dict[str, Any], ops: list[list[Any]]) -> dict[str, Any]:
    """Apply delta ``ops`` to ``state`` in place and return it.

    Raises UnrecoverableStateError if an operation does not fit the state (a missing parent, a
    list operation on a non-list)."""
    try:
        for op in ops:
            kind, path = op[0], op[1]
            if kind == "extend":
                target = _walk(state, path)
                if not isinstance(target, list):
                    raise ValueError(f"extend at {path} finds a {type(target).__name__}, not a list")
                target.extend(op[2])
                continue
            if not path:
                raise ValueError("a set/del on the whole state")
            parent = _walk(state, path[:-1])
            if not isinstance(parent, dict):
                raise ValueError(f"{kind} at {path} finds a {type(parent).__name__} parent")
            if kind == "set":
                parent[path[-1]] = op[2]
            elif kind == "del":
                del parent[path[-1]]
            else:
                raise ValueError(f"unknown delta operation {kind!r}")
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise UnrecoverableStateError(f"record delta does not apply to its base: {exc}",
                                      missing=[("record delta", "apply")]) from None
    return state


def _walk(state: Any, path: list[str]) -> Any:
    cur = state
    for k in path:
        cur = cur[k]
    return cur


def encode_record_delta(base_sha256: str, result_sha256: str, ops: list[list[Any]], *,
                        format: str = RECORD_DELTA_FORMAT) -> bytes:
    """Stored bytes of a record delta from snapshot ``base_sha256`` to snapshot ``result_sha256``,
    in delta format ``format`` (the one :data:`DELTA_FORMAT_OF` its chain's snapshot format)."""
    if format not in DELTA_FORMAT_OF.values():
        raise CheckpointError(f"record delta format {format!r} is not one this build writes")
    return _encode_doc({"format": format, "base_record_sha256": base_sha256, "result_record_sha256": result_sha256,
                        "ops": ops}, format == RECORD_DELTA_FORMAT)


def decode_record_delta(data: bytes, *, name: str = "record delta",
                        format: str | None = None) -> tuple[str, str, list[list[Any]]]:
    """``(base_record_sha256, result_record_sha256, ops)`` of delta bytes of format ``format``
    (None: either); UnrecoverableStateError if malformed."""
    try:
        d = _decode_doc(data, format, "record delta")
        if d.get("format") not in DELTA_FORMAT_OF.values() or not isinstance(d.get("ops"), list):
            raise ValueError("not a record delta object")
        return d["base_record_sha256"], d["result_record_sha256"], d["ops"]
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise UnrecoverableStateError(f"{name} is not a record delta: {exc}",
                                      missing=[("record delta", name)]) from None


def record_digest(state: dict[str, Any], reducer_version: int = REDUCER_VERSION, *,
                  format: str = RECORD_FORMAT) -> tuple[str, bytes]:
    """``(sha256, bytes)`` of the record snapshot of ``state`` in snapshot format ``format``."""
    data = encode_record_state(state, reducer_version, format=format)
    return sha256_hex(data), data
