"""Record snapshots and record deltas (§11.4.1, §11.4.2).

A **record snapshot** is the canonical (RFC 8785) JSON of::

    {"format": "kernel_lib.record-snapshot/1", "reducer_version": <int>,
     "record": <the record's scalars, task, budget figures and lists>,
     "tables": {"operations" | "attempts" | "reservations" | "approvals" | "decisions":
                {"ids": [...], "fields": [...], "rows": [[...], ...]}}}

It holds :meth:`TrajectoryRecord.snapshot_state` (stored fields only, no rounding; the budget's
integer micro-dollar figures written in USD under their USD names, as this format has always held
them), so :meth:`TrajectoryRecord.from_dict` rebuilds an equal record. The record's tables are written as
rows under one field list, in insertion order: canonical JSON sorts object keys, which would lose
the order the record shows (the operation table and the in-doubt lists are in log order), and
rows keep a 100 000-event record's snapshot small and quick to parse (every field name once, not
once per entry). Its SHA-256 is the record digest a checkpoint manifest and its ``Checkpoint``
event carry.

A **record delta** holds only what changed in the state since a base state: an ordered list of
operations on JSON paths (lists of object keys):

* ``["set", path, value]``: put ``value`` at ``path`` (a new or changed field);
* ``["del", path]``: remove the key at ``path``;
* ``["extend", path, items]``: append ``items`` to the list at ``path`` (record lists only grow).

Because the reducer only adds to its tables and lists, a delta between two checkpoints is about
as large as the record fields the intervening events changed, not the whole record; that is the
state growth term of eq. 3, not the log suffix. New table entries are set in insertion order, so
applying a delta keeps the tables' order (and the chain's final digest check would notice if not).
"""

from __future__ import annotations

import gc
import json
from typing import TYPE_CHECKING, Any

import rfc8785

from kernel_lib.errors import UnrecoverableStateError
from kernel_lib.core.events import REDUCER_VERSION
from kernel_lib.checkpoint.blobs import sha256_hex

if TYPE_CHECKING:
    from kernel_lib.core.record import TrajectoryRecord

RECORD_FORMAT = "kernel_lib.record-snapshot/1"
#: Reservation fields as a record snapshot holds them (USD figures, TrajectoryRecord.snapshot_state).
_RESERVATION_USD_FIELDS = frozenset({"reservation_id", "subject_id", "amount_usd", "settled_usd", "released"})
RECORD_DELTA_FORMAT = "kernel_lib.record-delta/1"


def canonical(obj: Any) -> bytes:
    """RFC 8785 bytes of plain JSON data."""
    return rfc8785.dumps(obj)


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


def _unpack(packed: dict[str, Any]) -> dict[str, Any]:
    ids = packed["ids"]
    if "rows" in packed:
        fields, rows = packed["fields"], packed["rows"]
        if len(rows) != len(ids) or any(len(r) != len(fields) for r in rows):
            raise ValueError("a packed table's rows do not match its ids and fields")
        return {i: dict(zip(fields, r)) for i, r in zip(ids, rows)}
    if len(packed["values"]) != len(ids):
        raise ValueError("a packed table's values do not match its ids")
    return dict(zip(ids, packed["values"]))


def _pack_state(state: dict[str, Any]) -> dict[str, Any]:
    out = dict(state)
    tables: dict[str, Any] = {}
    if "operations" in state:
        ops = state["operations"]
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


def _unpack_state(packed: dict[str, Any]) -> dict[str, Any]:
    state, tables = dict(packed["record"]), packed["tables"]
    if "operations" in tables:
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


def encode_record_state(state: dict[str, Any], reducer_version: int = REDUCER_VERSION) -> bytes:
    """The record snapshot bytes of ``state`` (see the module docstring)."""
    return canonical({"format": RECORD_FORMAT, "reducer_version": reducer_version, **_pack_state(state)})


def decode_record_state(data: bytes, *, name: str = "record snapshot") -> tuple[dict[str, Any], int]:
    """``(state, reducer_version)`` of snapshot bytes, with the tables in their recorded order.
    Raises UnrecoverableStateError if they are not a record snapshot."""
    gc_was = gc.isenabled()
    gc.disable()   # a large snapshot is hundreds of thousands of new objects and no garbage
    try:
        d = json.loads(data)
        if not isinstance(d, dict) or d.get("format") != RECORD_FORMAT or not isinstance(d.get("record"), dict):
            raise ValueError(f"format is {d.get('format') if isinstance(d, dict) else type(d).__name__!r}")
        return _unpack_state(d), int(d["reducer_version"])
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise UnrecoverableStateError(f"{name} is not a record snapshot: {exc}",
                                      missing=[("record snapshot", name)]) from None
    finally:
        if gc_was:
            gc.enable()


def record_from_snapshot(data: bytes, *, name: str = "record snapshot") -> "TrajectoryRecord":
    """The :class:`~kernel_lib.core.record.TrajectoryRecord` of snapshot bytes, built straight from the
    table rows (each row's field dict becomes the instance's ``__dict__``; no intermediate state
    dict). Equal to ``TrajectoryRecord.from_dict(decode_record_state(data)[0])``, several times
    faster for a large record (this is the full-checkpoint restore path).

    Raises UnrecoverableStateError if the bytes are not a record snapshot this build reads.
    """
    from kernel_lib.core.record import FIELD_NAMES, Attempt, Operation, Reservation, TrajectoryRecord

    gc_was = gc.isenabled()
    gc.disable()
    try:
        d = json.loads(data)
        if not isinstance(d, dict) or d.get("format") != RECORD_FORMAT or not isinstance(d.get("record"), dict):
            raise ValueError("not a record snapshot object")
        tables = d["tables"]
        op_t, att_t, res_t = tables.get("operations"), tables.get("attempts"), tables.get("reservations")
        op_f = FIELD_NAMES[Operation] - {"attempts"}
        att_f = FIELD_NAMES[Attempt] | {"operation", "key"}
        fast = (op_t is not None and att_t is not None and res_t is not None
                and all("rows" in t or not t["ids"] for t in (op_t, att_t, res_t))
                and (not op_t["ids"] or set(op_t["fields"]) == op_f)
                and (not att_t["ids"] or set(att_t["fields"]) == att_f)
                and (not res_t["ids"] or set(res_t["fields"]) in (FIELD_NAMES[Reservation], _RESERVATION_USD_FIELDS)))
        if not fast:
            return TrajectoryRecord.from_dict(_unpack_state(d))
        rest = dict(d, tables={k: v for k, v in tables.items() if k not in ("operations", "attempts", "reservations")})
        shell = _unpack_state(rest)
        shell["operations"] = {}
        shell["budget"] = {**shell["budget"], "reservations": {}}
        rec = TrajectoryRecord.from_dict(shell)
        ops: dict[str, Operation] = {}
        slots: list[dict[str, Attempt]] = []
        fields = op_t.get("fields", [])
        n = len(fields)
        if len(op_t.get("rows", ())) != len(op_t["ids"]):
            raise ValueError("operation rows do not match their ids")
        for k, row in zip(op_t["ids"], op_t.get("rows", ())):
            if len(row) != n:
                raise ValueError(f"operation {k!r}: row has {len(row)} values for {n} fields")
            od = dict(zip(fields, row))
            slot = od["attempts"] = {}
            slots.append(slot)
            o = object.__new__(Operation)
            o.__dict__ = od
            ops[k] = o
        fields = att_t.get("fields", [])
        n = len(fields)
        for row in att_t.get("rows", ()):
            if len(row) != n:
                raise ValueError("attempt row has the wrong number of values")
            ad = dict(zip(fields, row))
            slot = slots[ad.pop("operation")]
            a = object.__new__(Attempt)
            slot[ad.pop("key")] = a
            a.__dict__ = ad
        res: dict[str, Reservation] = {}
        fields = res_t.get("fields", [])
        n = len(fields)
        if len(res_t.get("rows", ())) != len(res_t["ids"]):
            raise ValueError("reservation rows do not match their ids")
        for k, row in zip(res_t["ids"], res_t.get("rows", ())):
            if len(row) != n:
                raise ValueError(f"reservation {k!r}: row has {len(row)} values for {n} fields")
            rd = dict(zip(fields, row))
            if "amount_usd" in rd:   # the snapshot layout: figures in USD, converted as the fold converts them
                res[k] = Reservation.from_usd(rd["reservation_id"], rd["subject_id"], rd["amount_usd"],
                                              rd["settled_usd"], rd["released"])
                continue
            if type(rd["amount_micro_usd"]) is not int or type(rd["settled_micro_usd"]) is not int:
                raise ValueError(f"reservation {k!r}: micro-dollar figures must be integers")
            r = object.__new__(Reservation)
            r.__dict__ = rd
            res[k] = r
        rec.operations = ops
        rec.budget.reservations = res
        return rec
    except UnrecoverableStateError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise UnrecoverableStateError(f"{name} is not a record snapshot: {exc}",
                                      missing=[("record snapshot", name)]) from None
    finally:
        if gc_was:
            gc.enable()


# ------------------------------------------------------------------------------------------------
# deltas
# ------------------------------------------------------------------------------------------------


def _same_scalar(a: Any, b: Any) -> bool:
    # JSON equality: 5 and 5.0 encode alike, True and 1 do not
    return a is b or (a == b and isinstance(a, bool) == isinstance(b, bool) and type(a) in (int, float, str, bool)
                      and type(b) in (int, float, str, bool))


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return False
    return _same_scalar(a, b)


def _diff(a: Any, b: Any, path: list[str], ops: list[list[Any]]) -> None:
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
                _diff(a[k], v, path + [k], ops)
        return
    if isinstance(a, list) and isinstance(b, list):
        n = len(a)
        if len(b) >= n and all(x is y or _same(x, y) for x, y in zip(a, b)):
            if len(b) > n:
                ops.append(["extend", path, b[n:]])
            return
        ops.append(["set", path, b])
        return
    if not _same(a, b):
        ops.append(["set", path, b])


def diff_state(base: dict[str, Any], new: dict[str, Any]) -> list[list[Any]]:
    """The delta operations that turn ``base`` into ``new`` (both plain JSON objects)."""
    ops: list[list[Any]] = []
    _diff(base, new, [], ops)
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


def encode_record_delta(base_sha256: str, result_sha256: str, ops: list[list[Any]]) -> bytes:
    """Stored bytes of a record delta from snapshot ``base_sha256`` to snapshot ``result_sha256``."""
    return canonical({"format": RECORD_DELTA_FORMAT, "base_record_sha256": base_sha256,
                      "result_record_sha256": result_sha256, "ops": ops})


def decode_record_delta(data: bytes, *, name: str = "record delta") -> tuple[str, str, list[list[Any]]]:
    """``(base_record_sha256, result_record_sha256, ops)``; UnrecoverableStateError if malformed."""
    try:
        d = json.loads(data)
        if not isinstance(d, dict) or d.get("format") != RECORD_DELTA_FORMAT or not isinstance(d.get("ops"), list):
            raise ValueError("not a record delta object")
        return d["base_record_sha256"], d["result_record_sha256"], d["ops"]
    except (ValueError, TypeError, KeyError) as exc:
        raise UnrecoverableStateError(f"{name} is not a record delta: {exc}",
                                      missing=[("record delta", name)]) from None


def record_digest(state: dict[str, Any], reducer_version: int = REDUCER_VERSION) -> tuple[str, bytes]:
    """``(sha256, bytes)`` of the record snapshot of ``state``."""
    data = encode_record_state(state, reducer_version)
    return sha256_hex(data), data
