"""Dynamic taint propagation over a provenance graph, pure (Failure Recovery, definition 0.3).

Every artifact a trajectory emits carries an envelope (:class:`Artifact`): its SHA-256, the
producing trajectory, the epoch (the producer's log position when it was made) and the artifacts
it was derived from. The graph is a DAG by construction: a parent must be known before its child.

Taint is kept as two kinds of marks in one ordered history (the ledger's sequence numbers):

* a **taint mark** on an artifact (a quarantine tombstone names every artifact its trajectory
  produced from t_taint on);
* a **clearance** of an artifact by an external verifier or an operator (:class:`Clearance`,
  checked by :func:`check_clearance`: a model, or any agent trajectory, vouching for output is
  refused, the definition's common pitfall).

The state of an artifact follows from the marks (:func:`taint_states`):

* ``TAINTED`` — it carries a taint mark newer than its latest clearance;
* ``SUSPECT`` — it is not tainted itself, but some ancestor's taint mark reaches it along a
  lineage path on which no artifact (itself included) was cleared after that mark;
* ``CLEARED`` — it was cleared and nothing reaches it past that clearance;
* ``UNTAINTED`` — none of the above.

Formally, ``block(a)`` is the newest taint mark s on a or on an ancestor b such that every
artifact on some path from a to b was last cleared before s; a is readable by peers
(:func:`readable`) iff ``block(a)`` is None. A later quarantine re-taints what an earlier
clearance released: a clearance covers only the marks before it.
"""

from __future__ import annotations

import heapq
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kernel_lib.errors import ArtifactError, ClearanceRefused

__all__ = ["TaintState", "Artifact", "Verifier", "Clearance", "TaintView", "VERIFIER_KINDS", "REFUSED_VERIFIER_KINDS",
           "READABLE_STATES", "check_clearance", "taint_states", "readable", "produced_since", "descendants",
           "is_sha256"]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def is_sha256(text: object) -> bool:
    """Is ``text`` 64 lowercase hex digits?"""
    return isinstance(text, str) and bool(_HEX64.match(text))


class TaintState(str, Enum):
    """τ(a) of definition 0.3."""

    UNTAINTED = "UNTAINTED"
    SUSPECT = "SUSPECT"
    TAINTED = "TAINTED"
    CLEARED = "CLEARED"


#: The states a peer may read.
READABLE_STATES = frozenset({TaintState.UNTAINTED, TaintState.CLEARED})


@dataclass(frozen=True)
class Artifact:
    """An artifact's envelope: ``sha256`` of its bytes, ``producer`` (trajectory id), ``epoch``
    (the producer's log position when it was made, >= 0), ``parents`` (hashes it was derived
    from, no repeats, not itself), ``name`` (for people).

    Raises ArtifactError for a malformed field."""

    sha256: str
    producer: str
    epoch: int
    parents: tuple[str, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        if not is_sha256(self.sha256):
            raise ArtifactError(f"an artifact's hash must be 64 lowercase hex digits, got {self.sha256!r}",
                                sha256=None)
        if not isinstance(self.producer, str) or not self.producer:
            raise ArtifactError(f"artifact {self.sha256[:12]}…: producer must be a non-empty trajectory id",
                                sha256=self.sha256)
        if type(self.epoch) is not int or self.epoch < 0:
            raise ArtifactError(f"artifact {self.sha256[:12]}…: epoch must be a log position >= 0, got "
                                f"{self.epoch!r}", sha256=self.sha256)
        parents = tuple(self.parents) if not isinstance(self.parents, str) else (self.parents,)
        for p in parents:
            if not is_sha256(p):
                raise ArtifactError(f"artifact {self.sha256[:12]}…: parent {p!r} is not a SHA-256 hex digest",
                                    sha256=self.sha256)
        if self.sha256 in parents:
            raise ArtifactError(f"artifact {self.sha256[:12]}… names itself as a parent", sha256=self.sha256)
        if len(set(parents)) != len(parents):
            raise ArtifactError(f"artifact {self.sha256[:12]}… names a parent twice", sha256=self.sha256)
        if not isinstance(self.name, str):
            raise ArtifactError(f"artifact {self.sha256[:12]}…: name must be a string", sha256=self.sha256)
        object.__setattr__(self, "parents", parents)

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "producer": self.producer, "epoch": self.epoch, "parents": list(self.parents),
                "name": self.name}


#: Who may clear taint (definition 0.3: independent, out-of-band verification).
VERIFIER_KINDS = ("external_verifier", "operator")
#: Who may not, whatever they say: the model, or any agent trajectory.
REFUSED_VERIFIER_KINDS = ("model", "agent")


@dataclass(frozen=True)
class Verifier:
    """Who clears: ``kind`` (``external_verifier``, ``operator``; ``model`` and ``agent`` are
    accepted here only to be refused by :func:`check_clearance`) and ``identity`` (a harness
    name and version, an operator's account)."""

    kind: str
    identity: str


@dataclass(frozen=True)
class Clearance:
    """A request to clear ``sha256``: by ``verifier``, with ``method`` (what was checked: a test
    run, a diff review, a scanner) and ``evidence`` (plain JSON: digests, run ids, a ticket).
    ``statement``: free text, never enough on its own."""

    sha256: str
    verifier: Verifier
    method: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    statement: str = ""


def _ident(text: str) -> str:
    """An identity as compared with the agents' ids: without surrounding blanks, case-folded, with
    compatibility forms folded (a full-width "ｔ１" or " T1 " is the trajectory t1 in disguise)."""
    return unicodedata.normalize("NFKC", text).strip().casefold()


def check_clearance(clearance: Clearance, *, agent_ids: Collection[str] = ()) -> None:
    """Refuse a clearance that is not independent (definition 0.3's common pitfall).

    Refused (:class:`~kernel_lib.errors.ClearanceRefused`): a verifier kind that is not an
    external verifier or an operator (the model saying "I checked, it is clean" among them); an
    empty identity; an identity that is an agent trajectory (``agent_ids``: every producer the
    ledger knows, quarantined or not): no trajectory vouches for output; an empty method; an
    external verifier without evidence.

    Raises ArtifactError for a hash that is not a SHA-256 digest."""
    if not isinstance(clearance, Clearance) or not isinstance(clearance.verifier, Verifier):
        raise ClearanceRefused(f"a clearance must be a Clearance with a Verifier, got {type(clearance).__name__}")
    if not is_sha256(clearance.sha256):
        raise ArtifactError(f"a clearance names {clearance.sha256!r}, not a SHA-256 hex digest")
    v = clearance.verifier
    if v.kind not in VERIFIER_KINDS:
        who = "the model" if v.kind == "model" else f"a verifier of kind {v.kind!r}"
        raise ClearanceRefused(f"{who} ({v.identity!r}) cannot clear taint: only an external verifier or an operator "
                               "can, out of band; a model's own check of its output is no evidence",
                               verifier_kind=v.kind, verifier_id=v.identity)
    if not isinstance(v.identity, str) or not v.identity.strip():
        raise ClearanceRefused("a clearance must name its verifier's identity", verifier_kind=v.kind,
                               verifier_id=v.identity)
    if _ident(v.identity) in {_ident(a) for a in agent_ids if isinstance(a, str)}:   # " t1", "T1" are t1
        raise ClearanceRefused(f"{v.identity!r} is an agent trajectory, not an independent verifier: a trajectory "
                               "cannot clear output, its own or a peer's", verifier_kind=v.kind,
                               verifier_id=v.identity)
    if not isinstance(clearance.method, str) or not clearance.method.strip():
        raise ClearanceRefused("a clearance must say what was checked (method)", verifier_kind=v.kind,
                               verifier_id=v.identity)
    if v.kind == "external_verifier" and not clearance.evidence:
        raise ClearanceRefused(f"external verifier {v.identity!r} gave no evidence (a run id, digests, a report)",
                               verifier_kind=v.kind, verifier_id=v.identity)


@dataclass(frozen=True)
class TaintView:
    """One artifact's state. ``blocked_since``: the ledger sequence number of the taint mark that
    blocks it (None when readable); ``blocked_by``: the tainted artifacts its state comes from
    (itself first when TAINTED; at most :data:`BLOCKED_BY_MAX`, the smallest hashes);
    ``cleared_at``: its latest clearance's sequence number, if any."""

    sha256: str
    state: TaintState
    blocked_since: int | None = None
    blocked_by: tuple[str, ...] = ()
    cleared_at: int | None = None

    @property
    def readable(self) -> bool:
        return self.state in READABLE_STATES

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "state": self.state.value, "blocked_since": self.blocked_since,
                "blocked_by": list(self.blocked_by), "cleared_at": self.cleared_at}


def _topological(artifacts: Mapping[str, Artifact]) -> list[str]:
    order: list[str] = []
    state: dict[str, int] = {}
    for root in artifacts:
        if state.get(root) == 2:
            continue
        stack = [(root, iter(artifacts[root].parents))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[node] = 2
                order.append(node)
                continue
            if nxt not in artifacts:
                raise ArtifactError(f"artifact {node[:12]}… names unknown parent {nxt[:12]}…", sha256=node)
            if state.get(nxt) == 1:
                raise ArtifactError(f"the provenance graph has a cycle through {nxt[:12]}…", sha256=nxt)
            if state.get(nxt) is None:
                state[nxt] = 1
                stack.append((nxt, iter(artifacts[nxt].parents)))
    return order


#: The most hashes a view's ``blocked_by`` names: the smallest ones (an artifact deep in a long
#: tainted lineage is blocked by every tainted ancestor; naming them all made a chain of n tainted
#: artifacts cost O(n^2) time and memory).
BLOCKED_BY_MAX = 16


def _smallest(hashes: set[str]) -> frozenset[str]:
    """The :data:`BLOCKED_BY_MAX` smallest of ``hashes`` (the k smallest of a union are the k
    smallest of the union of each part's k smallest, so trimming at every node is exact)."""
    if len(hashes) <= BLOCKED_BY_MAX:
        return frozenset(hashes)
    return frozenset(heapq.nsmallest(BLOCKED_BY_MAX, hashes))


def taint_states(artifacts: Mapping[str, Artifact], taint_marks: Iterable[tuple[str, int]],
                 clearances: Iterable[tuple[str, int]]) -> dict[str, TaintView]:
    """The state of every artifact (module docstring). ``taint_marks`` and ``clearances`` are
    ``(sha256, sequence number)`` pairs of one ordered history (larger is later).

    Raises ArtifactError for a mark on an unknown artifact, an unknown parent or a cycle."""
    marks: dict[str, int] = {}
    for sha, seq in taint_marks:
        if sha not in artifacts:
            raise ArtifactError(f"a taint mark names unknown artifact {str(sha)[:12]}…", sha256=sha)
        marks[sha] = max(seq, marks.get(sha, seq))
    cleared: dict[str, int] = {}
    for sha, seq in clearances:
        if sha not in artifacts:
            raise ArtifactError(f"a clearance names unknown artifact {str(sha)[:12]}…", sha256=sha)
        cleared[sha] = max(seq, cleared.get(sha, seq))
    block: dict[str, int | None] = {}
    origins: dict[str, frozenset[str]] = {}
    out: dict[str, TaintView] = {}
    for sha in _topological(artifacts):
        last_clear = cleared.get(sha, -1)
        own = marks.get(sha)
        own = own if own is not None and own > last_clear else None
        inherited, inh_origins = None, set()
        for p in artifacts[sha].parents:
            b = block[p]
            if b is not None and b > last_clear:
                inherited = b if inherited is None else max(inherited, b)
                inh_origins |= origins[p]
        if own is not None:
            state, b, orig = TaintState.TAINTED, max(own, inherited or own), _smallest(inh_origins | {sha})
        elif inherited is not None:
            state, b, orig = TaintState.SUSPECT, inherited, _smallest(inh_origins)
        else:
            state, b, orig = (TaintState.CLEARED if sha in cleared else TaintState.UNTAINTED), None, frozenset()
        block[sha], origins[sha] = b, orig
        if state is TaintState.TAINTED:
            by = (sha,) + tuple(sorted(orig - {sha}))[:BLOCKED_BY_MAX - 1]
        else:
            by = tuple(sorted(orig))
        out[sha] = TaintView(sha, state, b, by, cleared.get(sha))
    return {sha: out[sha] for sha in artifacts}


def readable(view: TaintView) -> bool:
    """May a peer read the artifact? (UNTAINTED or CLEARED)"""
    return view.state in READABLE_STATES


def produced_since(artifacts: Iterable[Artifact], trajectory_id: str, taint_from_sequence: int) -> list[str]:
    """Hashes of the artifacts ``trajectory_id`` produced at or after log position t_taint."""
    return [a.sha256 for a in artifacts if a.producer == trajectory_id and a.epoch >= taint_from_sequence]


def descendants(artifacts: Mapping[str, Artifact], roots: Iterable[str]) -> set[str]:
    """Every artifact derived, directly or not, from ``roots`` (the roots excluded unless derived)."""
    children: dict[str, list[str]] = {}
    for a in artifacts.values():
        for p in a.parents:
            children.setdefault(p, []).append(a.sha256)
    seen: set[str] = set()
    todo = [c for r in roots for c in children.get(r, ())]
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.add(c)
            todo.extend(children.get(c, ()))
    return seen
