"""A record table whose entries are built on first use (§11.4.1, restore from a checkpoint).

A record snapshot of a long trajectory holds tens of thousands of table rows (operations,
reservations, decisions). A restore that builds every row's object before folding the log
suffix spends most of its time on rows the suffix never touches: a 100 000-event record is
about a quarter of a million Python objects. :class:`LazyTable` keeps each row in its stored
form until the row is first read, and builds it then, once; membership, length, key order,
insertion and deletion never build anything.

It behaves as the ``dict`` it stands for (``MutableMapping``: ``get``, ``in``, ``items``,
``==`` against a plain dict...), keeps insertion order (a built row stays where its stored row
was) and is copied, deep-copied and pickled as one. It is not a ``dict`` subclass on purpose:
C code that reads a dict's storage directly (``dict(d)`` fast paths, encoders) would see the
stored rows instead of the objects.

:class:`IndexedLazyTable` goes one step further for format-4 record snapshots: it does not even
hold a dict of the keys until one is needed, and finds a key through an index stored with the
rows (:class:`KeyIndex`).

Like a dict it is not safe for concurrent mutation from several threads: the record that holds
it is owned by one thread at a time (the dispatch gate's), as every record is.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["IndexedLazyTable", "KeyIndex", "LazyTable", "materialized"]

V = TypeVar("V")
_UNSET: Any = object()     # "no such key" (a stored value may be None)


class LazyTable(MutableMapping[str, V], Generic[V]):
    """``key → value`` where a value may still be a stored row, built on first read.

    Args:
        rows: ``key → stored row``, in table order (the mapping is owned by the table from now on).
        stored_type: the exact type of a stored row (a value of that type is built on read; no
            built value may have it).
        build: ``build(key, stored_row) → value``; its errors propagate to the reader (the
            restore path raises UnrecoverableStateError for a row it cannot read).
    """

    __slots__ = ("_data", "_stored_type", "_build")

    def __init__(self, rows: dict[str, Any], stored_type: type, build: Callable[[str, Any], V]) -> None:
        self._data = rows
        self._stored_type = stored_type
        self._build = build

    # --- the mapping ---------------------------------------------------------------------------
    def __getitem__(self, key: str) -> V:
        v = self._data[key]
        if type(v) is self._stored_type:
            v = self._data[key] = self._build(key, v)
        return v

    def get(self, key: str, default: Any = None) -> Any:
        v = self._data.get(key, _UNSET)      # no KeyError raised and caught for a missing key
        if v is _UNSET:
            return default
        if type(v) is self._stored_type:
            v = self._data[key] = self._build(key, v)
        return v

    def __setitem__(self, key: str, value: V) -> None:
        self._data[key] = value

    def __delitem__(self, key: str) -> None:
        del self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyTable):
            other = other.materialize()
        return self.materialize() == other if isinstance(other, dict) else NotImplemented

    __hash__ = None  # type: ignore[assignment]   # mutable, like a dict

    def __repr__(self) -> str:
        return f"LazyTable({self.materialize()!r})"

    # --- laziness --------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """How many rows are still in their stored form (not yet built)."""
        t = self._stored_type
        return sum(1 for v in self._data.values() if type(v) is t)

    def materialize(self) -> dict[str, V]:
        """Build every row still stored and return a plain ``dict`` of the values, in table order
        (a new dict; the values are the table's own objects)."""
        t, data = self._stored_type, self._data
        for k, v in data.items():
            if type(v) is t:
                data[k] = self._build(k, v)
        return dict(data)

    # --- copies ----------------------------------------------------------------------------------
    def __copy__(self) -> "LazyTable[V]":
        return LazyTable(dict(self._data), self._stored_type, self._build)

    def __deepcopy__(self, memo: dict[int, Any]) -> "LazyTable[V]":
        t = self._stored_type
        rows = {k: v if type(v) is t else copy.deepcopy(v, memo) for k, v in self._data.items()}
        return LazyTable(rows, t, self._build)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (self.materialize(),))      # a pickled table arrives as the dict it stands for


def materialized(table: Any) -> dict[str, Any]:
    """``table`` as a plain dict: a :class:`LazyTable`'s built rows, or the dict itself."""
    return table.materialize() if isinstance(table, LazyTable) else table


class KeyIndex(Protocol):
    """Where each key of a stored table is, without a dict of them: what
    :class:`IndexedLazyTable` looks keys up in (the record snapshot's stored id index)."""

    def __len__(self) -> int:
        """How many rows (keys) the stored table has."""

    def find(self, key: Any) -> int:
        """The row number of ``key``, or -1 if the table has no such key."""

    def keys(self) -> list[Any]:
        """Every key, in row order (checked: no key twice)."""



class IndexedLazyTable(LazyTable[V]):
    """A :class:`LazyTable` over a stored table whose key → row map is not built either: a key
    is looked up in a :class:`KeyIndex` (a hash index stored with the rows) when first used,
    and the row is built from its row number (``build(key, row_number)``). What the table's
    user changes is kept beside the stored rows: rows built or replaced (by row number), rows
    deleted, keys added. A restore therefore pays for the keys and rows the log suffix touches,
    not for a dict of every id of a long trajectory.

    The first operation that needs every key (iteration, ``==``, copies, pickling,
    :meth:`materialize`) builds the dict of all keys once, in table order, with those changes
    applied in the order a ``dict`` would show them (a deleted and re-added key moves to the
    end), and from then on the table is an ordinary :class:`LazyTable`.
    """

    __slots__ = ("_index", "_added", "_changed", "_deleted", "_row_of")

    def __init__(self, index: KeyIndex, build: Callable[[Any, int], V]) -> None:
        super().__init__(None, int, build)   # type: ignore[arg-type]   # no dict until _promote
        self._index: KeyIndex | None = index
        self._added: dict[Any, V] = {}        # keys the stored table does not hold (or deleted, then set)
        self._changed: dict[int, V] = {}      # row number -> built or assigned value
        self._deleted: set[int] = set()
        self._row_of: dict[Any, int] = {}     # keys looked up so far -> row number (-1: not stored)

    def _row(self, key: Any) -> int:
        """The live row number of ``key`` in the stored table, or -1 (absent or deleted)."""
        i = self._row_of.get(key)
        if i is None:
            i = self._row_of[key] = self._index.find(key)   # type: ignore[union-attr]
        return -1 if i < 0 or i in self._deleted else i

    def _promote(self) -> None:
        """Build the dict of every key once (see the class docstring)."""
        if self._data is not None:
            return
        keys = self._index.keys()   # type: ignore[union-attr]
        data: dict[Any, Any] = dict(zip(keys, range(len(keys))))
        for i in self._deleted:
            del data[keys[i]]
        for i, v in self._changed.items():
            data[keys[i]] = v
        data.update(self._added)
        self._data = data
        self._index, self._added, self._changed, self._deleted, self._row_of = None, {}, {}, set(), {}

    # --- the mapping, before the dict exists -----------------------------------------------------
    def __getitem__(self, key: Any) -> V:
        if self._data is not None:
            return super().__getitem__(key)
        if key in self._added:
            return self._added[key]
        i = self._row(key)
        if i < 0:
            raise KeyError(key)
        v = self._changed.get(i, _UNSET)
        if v is _UNSET:
            v = self._changed[i] = self._build(key, i)
        return v

    def __setitem__(self, key: Any, value: V) -> None:
        if self._data is not None:
            super().__setitem__(key, value)
        elif key in self._added:
            self._added[key] = value
        elif (i := self._row(key)) >= 0:
            self._changed[i] = value
        else:
            self._added[key] = value

    def __delitem__(self, key: Any) -> None:
        if self._data is not None:
            super().__delitem__(key)
        elif key in self._added:
            del self._added[key]
        elif (i := self._row(key)) >= 0:
            self._deleted.add(i)
            self._changed.pop(i, None)
        else:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        if self._data is not None:
            return super().__contains__(key)
        return key in self._added or self._row(key) >= 0

    def __len__(self) -> int:
        if self._data is not None:
            return super().__len__()
        return len(self._index) - len(self._deleted) + len(self._added)   # type: ignore[arg-type]

    def get(self, key: Any, default: Any = None) -> Any:
        if self._data is not None:
            return super().get(key, default)
        v = self._added.get(key, _UNSET)
        if v is not _UNSET:
            return v
        i = self._row(key)
        if i < 0:
            return default
        v = self._changed.get(i, _UNSET)
        if v is _UNSET:
            v = self._changed[i] = self._build(key, i)
        return v

    @property
    def pending(self) -> int:
        if self._data is not None:
            return super().pending
        return len(self._index) - len(self._deleted) - len(self._changed)   # type: ignore[arg-type]

    # --- everything that needs every key ---------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        self._promote()
        return super().__iter__()

    def __eq__(self, other: object) -> bool:
        self._promote()
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._promote()
        return super().__repr__()

    def materialize(self) -> dict[Any, V]:
        self._promote()
        return super().materialize()

    def __copy__(self) -> LazyTable[V]:
        self._promote()
        return super().__copy__()

    def __deepcopy__(self, memo: dict[int, Any]) -> LazyTable[V]:
        self._promote()
        return super().__deepcopy__(memo)
