"""Budget.outstanding_reservations_micro_usd keeps a cache of the reservations still holding a
liability, so admission at step n does not walk all n reservations (issue 15: a 3,000-step run spent
most of its time in this sum).

Fault model: reservations added, settled in part, settled past their bound, released, replaced by
a copy in place (a fork), the whole dict replaced (a fork, a restore), asked for between any two of
these. Invariant: the figure equals the plain sum over every reservation, and the cache never shows
up in what the budget stores. Goal: the shortcut is invisible except in time.
"""

from __future__ import annotations

import copy
import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.core.record import Budget, Reservation

OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5_000)),
    st.tuples(st.just("settle"), st.integers(0, 40), st.integers(0, 3_000)),
    st.tuples(st.just("release"), st.integers(0, 40)),
    st.tuples(st.just("copy_one"), st.integers(0, 40)),
    st.tuples(st.just("new_dict"),),
    st.tuples(st.just("copy_budget"),),
    st.tuples(st.just("ask"),),
), max_size=80)


def _plain(b: Budget) -> int:
    return sum(r.outstanding_micro_usd for r in b.reservations.values())


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_the_cached_sum_equals_the_plain_sum_after_any_sequence(ops):
    b = Budget(ceiling_micro_usd=10**9)
    for op in ops:
        ids = list(b.reservations)
        if op[0] == "add":
            rid = f"r{len(ids)}"
            b.reservations[rid] = Reservation(rid, f"op{len(ids)}", op[1])
        elif op[0] == "settle" and ids:
            b.reservations[ids[op[1] % len(ids)]].settled_micro_usd += op[2]
        elif op[0] == "release" and ids:
            b.reservations[ids[op[1] % len(ids)]].released = True
        elif op[0] == "copy_one" and ids:
            rid = ids[op[1] % len(ids)]
            b.reservations[rid] = copy.copy(b.reservations[rid])
        elif op[0] == "new_dict":
            b.reservations = dict(b.reservations)
        elif op[0] == "copy_budget":
            b = copy.copy(b)
            b.reservations = {k: copy.copy(r) for k, r in b.reservations.items()}
        assert b.outstanding_reservations_micro_usd == _plain(b), op
    assert b.available_micro_usd == b.ceiling_micro_usd - b.actual_consumption_micro_usd - _plain(b)


def test_the_cache_is_not_part_of_the_budgets_fields_or_equality():
    a, b = Budget(), Budget()
    for bud in (a, b):
        bud.reservations["r0"] = Reservation("r0", "op0", 700)
    assert a.outstanding_reservations_micro_usd == 700   # fills a's cache only
    assert a == b and dataclasses.asdict(a) == dataclasses.asdict(b)
    assert "_open_cache" not in {f.name for f in dataclasses.fields(Budget)}


def test_a_long_run_asks_in_time_linear_in_the_open_reservations():
    """10,000 reservations made and settled one after another (a long trajectory): each ask walks
    only the ones still open, counted by how many reservation objects are read."""
    reads = 0

    class Counting(Reservation):
        @property
        def outstanding_micro_usd(self) -> int:   # type: ignore[override]
            nonlocal reads
            reads += 1
            return super().outstanding_micro_usd

    b = Budget(ceiling_micro_usd=10**12)
    for i in range(10_000):
        b.reservations[f"r{i}"] = Counting(f"r{i}", f"op{i}", 100)
        assert b.outstanding_reservations_micro_usd == 100
        b.reservations[f"r{i}"].released = True
    assert reads <= 2 * 10_000   # the plain sum would read 50,005,000
