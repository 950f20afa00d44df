"""Issue 19, stage 4: dynamic taint propagation (Failure Recovery, definition 0.3).

Fault model: a trajectory is quarantined; its output since t_taint is tainted, and peers have
derived artifacts from it. Invariants: (1) lineage closure: an artifact is readable by a peer iff
no taint mark reaches it along a lineage path on which nothing was cleared after the mark, checked
against a brute-force walk over every path (hypothesis); in particular nothing derived from a
tainted artifact is readable until cleared; (2) only an external verifier or an operator clears,
never the model or an agent trajectory; (3) the ledger is durable and applying a tombstone twice
changes nothing. Goal: peers never consume tainted output silently.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.checkpoint.blobs import MemoryBlobStore
from kernel_lib.errors import ArtifactError, ArtifactQuarantined, ClearanceRefused, TaintLedgerError
from kernel_lib.recovery.quarantine import (
    Artifact, Clearance, MediationGateway, TaintLedger, TaintState, Verifier, descendants, taint_states,
)


def h(i: int) -> str:
    return hashlib.sha256(f"artifact-{i}".encode()).hexdigest()


# --- the oracle: every lineage path, walked one by one ----------------------------------------------------


def oracle_blocked(arts: dict[str, Artifact], marks: list[tuple[str, int]], clears: list[tuple[str, int]]) -> set[str]:
    last_clear: dict[str, int] = {}
    for sha, seq in clears:
        last_clear[sha] = max(seq, last_clear.get(sha, seq))
    blocked = set()

    def paths_from(a: str):   # every path a -> ... following parents, a included
        yield [a]
        for p in arts[a].parents:
            for rest in paths_from(p):
                yield [a, *rest]

    for a in arts:
        for path in paths_from(a):
            end = path[-1]
            for sha, s in marks:
                if sha == end and all(last_clear.get(c, -1) < s for c in path):
                    blocked.add(a)
    return blocked


@st.composite
def histories(draw):
    n = draw(st.integers(1, 9))
    arts: dict[str, Artifact] = {}
    for i in range(n):
        parents = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=3)) if i else []
        arts[h(i)] = Artifact(h(i), draw(st.sampled_from(["t1", "t2", "peer"])), i, tuple(h(p) for p in parents))
    events = draw(st.lists(st.tuples(st.sampled_from(["taint", "clear"]), st.integers(0, n - 1)), max_size=12))
    marks = [(h(i), seq) for seq, (k, i) in enumerate(events, 1) if k == "taint"]
    clears = [(h(i), seq) for seq, (k, i) in enumerate(events, 1) if k == "clear"]
    return arts, marks, clears


@settings(max_examples=300, deadline=None)
@given(histories())
def test_lineage_closure_matches_every_path_walked_one_by_one(hist):
    arts, marks, clears = hist
    views = taint_states(arts, marks, clears)
    blocked = {a for a, v in views.items() if not v.readable}
    assert blocked == oracle_blocked(arts, marks, clears)
    for a, v in views.items():
        own = [s for sha, s in marks if sha == a]
        cleared = [s for sha, s in clears if sha == a]
        if v.state is TaintState.TAINTED:
            assert own and max(own) > max(cleared, default=-1)
        if v.state is TaintState.CLEARED:
            assert cleared
        if v.state is TaintState.SUSPECT:
            assert not own or max(own) < max(cleared, default=-1)


@settings(max_examples=200, deadline=None)
@given(histories())
def test_nothing_derived_from_an_uncleared_taint_is_readable(hist):
    """Taint everything marked, clear nothing: every descendant of a marked artifact is unreadable."""
    arts, marks, _ = hist
    views = taint_states(arts, marks, [])
    roots = {sha for sha, _ in marks}
    for d in descendants(arts, roots) | roots:
        assert not views[d].readable, d


# --- the model never clears ---------------------------------------------------------------------------


def _ledger_with_taint(tmp_path, name="ledger.sqlite"):
    ledger = TaintLedger(tmp_path / name, clock=lambda: 1000.0)
    gw = MediationGateway(ledger, MemoryBlobStore())
    note, _ = gw.publish(b"note", producer="t1", epoch=2, name="note.md")
    patch, _ = gw.publish(b"patch", producer="t1", epoch=6, name="patch.diff")
    review, _ = gw.publish(b"review", producer="peer", epoch=1, parents=[patch.sha256], name="review.md")
    log, _ = gw.publish(b"changelog", producer="peer", epoch=2, parents=[note.sha256], name="changelog.md")
    applied = ledger.apply_tombstone("t1", "q1", 5)
    return ledger, gw, {"note": note, "patch": patch, "review": review, "changelog": log}, applied


def test_a_models_i_checked_it_is_clean_is_refused_and_changes_nothing(tmp_path):
    ledger, gw, a, _ = _ledger_with_taint(tmp_path)
    with pytest.raises(ClearanceRefused, match="model") as info:
        gw.clear(Clearance(a["patch"].sha256, Verifier("model", "t1"), "self-review",
                           statement="I checked, it is clean"))
    assert info.value.verifier_kind == "model"
    for who in (Verifier("operator", "t1"), Verifier("operator", "peer"), Verifier("agent", "helper-bot"),
                Verifier("external_verifier", "harness"), Verifier("operator", "  ")):
        with pytest.raises(ClearanceRefused):   # an agent id posing as an operator, no evidence, no identity
            gw.clear(Clearance(a["patch"].sha256, who, "looked at it"))
    assert ledger.state(a["patch"].sha256).state is TaintState.TAINTED
    assert ledger.clearances() == []


def test_tainted_and_suspect_reads_are_refused_and_a_verifier_releases_lineage(tmp_path):
    ledger, gw, a, applied = _ledger_with_taint(tmp_path)
    assert applied.tainted == (a["patch"].sha256,) and applied.suspect == (a["review"].sha256,)
    assert gw.read(a["note"].sha256, reader="peer") == b"note"
    assert gw.read(a["changelog"].sha256, reader="peer") == b"changelog"
    with pytest.raises(ArtifactQuarantined) as info:
        gw.read(a["patch"].sha256, reader="peer")
    assert info.value.state == "TAINTED" and info.value.producer == "t1" and info.value.reader == "peer"
    with pytest.raises(ArtifactQuarantined) as info:
        gw.read(a["review"].sha256, reader="peer")
    assert info.value.state == "SUSPECT" and info.value.blocked_by == [a["patch"].sha256]
    assert gw.inspect(a["patch"].sha256, verifier=Verifier("operator", "alice")) == b"patch"
    with pytest.raises(ClearanceRefused):
        gw.inspect(a["patch"].sha256, verifier=Verifier("model", "t1"))
    view = gw.clear(Clearance(a["patch"].sha256, Verifier("external_verifier", "pytest-harness"), "tests",
                              evidence={"run": "r-1"}))
    assert view.state is TaintState.CLEARED and gw.read(a["review"].sha256, reader="peer") == b"review"
    assert len(gw.refused_reads) == 2


def test_a_later_quarantine_retaints_what_a_clearance_released(tmp_path):
    ledger, gw, a, _ = _ledger_with_taint(tmp_path)
    gw.clear(Clearance(a["patch"].sha256, Verifier("operator", "alice"), "diff review"))
    assert ledger.state(a["review"].sha256).readable
    ledger.apply_tombstone("t1", "q2", 1)   # a second incident, from the start of the log
    assert ledger.state(a["patch"].sha256).state is TaintState.TAINTED
    assert ledger.state(a["note"].sha256).state is TaintState.TAINTED
    assert ledger.state(a["changelog"].sha256).state is TaintState.SUSPECT


def test_the_ledger_is_durable_and_a_tombstone_applied_twice_changes_nothing(tmp_path):
    ledger, gw, a, first = _ledger_with_taint(tmp_path)
    again = ledger.apply_tombstone("t1", "q1", 5)
    assert again.already_applied and again.newly_tainted == () and again.tainted == first.tainted
    with pytest.raises(TaintLedgerError):
        ledger.apply_tombstone("t2", "q1", 5)   # the same incident id for another trajectory
    late, view = gw.publish(b"late write", producer="t1", epoch=9)   # a quarantined producer's late artifact
    assert view.state is TaintState.TAINTED
    states = {k: v.state for k, v in ledger.states().items()}
    ledger.close()
    reopened = TaintLedger(tmp_path / "ledger.sqlite")
    assert {k: v.state for k, v in reopened.states().items()} == states
    assert reopened.is_quarantined("t1") and not reopened.is_quarantined("peer")


def test_bad_envelopes_are_typed_errors(tmp_path):
    ledger = TaintLedger(tmp_path / "l.sqlite")
    for bad in (dict(sha256="xyz", producer="t", epoch=0), dict(sha256=h(1), producer="", epoch=0),
                dict(sha256=h(1), producer="t", epoch=-1), dict(sha256=h(1), producer="t", epoch=0, parents=(h(1),)),
                dict(sha256=h(1), producer="t", epoch=0, parents=(h(2), h(2)))):
        with pytest.raises(ArtifactError):
            Artifact(**bad)
    with pytest.raises(ArtifactError, match="not registered"):
        ledger.register(Artifact(h(1), "t", 0, (h(2),)))
    ledger.register(Artifact(h(2), "t", 0))
    ledger.register(Artifact(h(2), "t", 0))   # the same envelope again: nothing changes
    with pytest.raises(ArtifactError, match="never rewritten"):
        ledger.register(Artifact(h(2), "t", 1))
    (tmp_path / "other.sqlite").write_bytes(b"not a database at all, just bytes" * 4)
    with pytest.raises(TaintLedgerError):
        TaintLedger(tmp_path / "other.sqlite")
