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

Like a dict it is not safe for concurrent mutation from several threads: the record that holds
it is owned by one thread at a time (the dispatch gate's), as every record is.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar

__all__ = ["LazyTable", "materialized"]

V = TypeVar("V")


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
        try:
            return self[key]
        except KeyError:
            return default

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
