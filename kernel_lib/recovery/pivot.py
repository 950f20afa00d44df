"""The pivot action boundary: a plan checker and a reorderer (Failure Recovery, "Pivot Action Irreversibility").

Source: the Failure Recovery chapter, "The tripartite action reversibility taxonomy" (table 5),
"The pivot action boundary" (the Pivot Action Boundary Invariant and its two phases), Example 0.1
("The dual-commit trap and pivot allocation") and Systems Perspective 0.1 (order the plan's DAG so
that the invertible and compensable steps come first and the one irreversible step last).

Everything here is pure: a plan in, a verdict or an order out; nothing is dispatched or logged.

The plan
--------
A :class:`Plan` is an ordered tuple of :class:`PlanStep`. Each step declares:

* ``id``: a non-empty string, unique in the plan;
* ``tier``: its reversibility tier, ``"I"`` (invertible), ``"II"`` (compensable) or ``"III"``
  (a pivot: no inverse and no compensator). There is no default: a step without a tier is refused
  (:class:`~kernel_lib.errors.PlanError`), as an undeclared tool is by
  :class:`~kernel_lib.recovery.contracts.ToolContract`;
* ``repeat_contract``: what the endpoint does with a repeated request, one of
  :data:`~kernel_lib.core.proposals.REPEAT_CONTRACTS`; ``"unsafe"`` when not declared, because
  nothing is then known about a repeat and the dangerous case is the one to assume;
* ``depends_on``: the ids of the steps whose *effect* this step needs, so it must run after them;
* ``tool`` and ``description``: optional, for people (not used by the rules);
* ``stageable`` (tier III only, default false): the step's payload can be built now and held in
  local escrow (an invertible write: dropping the escrow entry undoes it), then released to the
  world by an atomic outbox committed together with the pivot. The webhook, e-mail or message
  whose content is known before the point of no return is stageable; the BGP flip is not.

A plan produced by :func:`propose_order` uses two more fields, and a plan read from JSON may carry
them too, so that :func:`check_plan` can judge a transformed plan:

* ``stage_of``: this step writes the payload of step ``stage_of`` into escrow (it is tier I);
* ``outbox``: on the pivot, the ids whose staged payloads its atomic outbox flushes with it. A
  step that depends on a flushed id sees that effect only once the pivot has committed, so it
  runs after the pivot.

The invariant (:func:`check_plan`)
----------------------------------
The plan's pivot is its first tier III step: once it has run nothing can be rolled back, so every
step after it belongs to the finalization phase and every step before it to the preparation
phase. The rules, each reported with the steps that break it:

* ``unknown_dependency``: ``depends_on`` names no step of the plan (nor a flushed payload);
* ``dependency_cycle``: the dependencies are not acyclic (the steps on a cycle);
* ``dependency_order``: a step runs before a step it depends on (a dependency on a flushed id is
  met only after the pivot);
* ``at_most_one_pivot``: more than one tier III step (all of them named): a second point of no
  return leaves a hybrid state that can be neither unwound nor abandoned;
* ``preparation_reversible``: a step before the pivot that is not tier I or II (with the pivot
  taken as the first tier III step this can only be a staging step declared with another tier);
* ``finalization_repeat_safe``: a step after the pivot whose repeat contract is not in
  :data:`REPEAT_SAFE_CONTRACTS`. After the pivot the runtime can only go forward: a failed step
  is retried until it succeeds, so it must be safe to send again. ``idempotent`` and
  ``idempotency_key`` endpoints dedup a repeat, ``read_only`` ones have no effect to repeat;
  ``at_most_once`` forbids the retry the phase depends on and ``unsafe`` may apply twice. A step's
  tier does not matter after the pivot (its compensator will never be used);
* ``escrow``: a staging step that is not tier I, stages an id twice, or comes after the pivot;
  an outbox on a step that is not the pivot; an outbox entry with no staging step before the
  pivot; a staged payload that no outbox flushes (it would never leave escrow).

The reorderer (:func:`propose_order`)
-------------------------------------
A plan that is already valid is returned as it is. Otherwise, given the dependencies, it looks
for an order that satisfies the invariant, allowed to stage
stageable tier III steps. One tier III step stays the pivot; every other one must be stageable
and is split into a staging step (``<id>.stage``, tier I, ``idempotent``, with the original's
dependencies) placed before the pivot and an outbox entry on the pivot. The finalization phase is
forced: the steps that depend, directly or not, on the pivot or on a staged payload; all others
go before the pivot (the chapter's preference: everything that can be undone first). A candidate
pivot fails when a staged step or the pivot itself depends on a staged payload or on the pivot,
or when a forced finalization step is not repeat-safe. Among the candidates that work, the one
with the fewest finalization steps wins, then the earliest in the plan. Each phase is a
topological sort that breaks ties by the plan's own order, so the output is deterministic.

:func:`example_0_1` is the chapter's Example 0.1 as a plan: :func:`check_plan` refuses it and
:func:`propose_order` derives the chapter's remedy.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kernel_lib.core.proposals import DEFAULT_REPEAT_CONTRACT, REPEAT_CONTRACTS, REPEAT_SAFE_CONTRACTS
from kernel_lib.errors import PlanError
from kernel_lib.recovery.contracts import TIER_NAMES, TIERS

__all__ = ["RULES", "REPEAT_SAFE_CONTRACTS", "STAGE_SUFFIX", "PlanStep", "Plan", "Reason", "PlanCheck",
           "Transformation", "Proposal", "plan_from_json", "load_plan", "check_plan", "propose_order",
           "example_0_1", "EXAMPLES"]

#: The rules :func:`check_plan` applies, in the order it reports them (see the module docstring).
RULES = ("unknown_dependency", "dependency_cycle", "dependency_order", "at_most_one_pivot",
         "preparation_reversible", "finalization_repeat_safe", "escrow")
#: The id of the staging step :func:`propose_order` makes of a stageable step ``X``: ``X.stage``.
STAGE_SUFFIX = ".stage"

_STEP_KEYS = {"id", "tool", "tier", "repeat_contract", "depends_on", "stageable", "stage_of", "outbox",
              "description"}


@dataclass(frozen=True)
class PlanStep:
    """One step of a plan (see the module docstring for the meaning of each field).

    Raises:
        PlanError: an empty or non-string id, a missing or unknown tier, an unknown repeat
            contract, dependencies that are not a list of ids, ``stageable`` on a step that is not
            tier III, ``stage_of`` and ``outbox`` on one step.
    """

    id: str
    tier: str | None
    repeat_contract: str = DEFAULT_REPEAT_CONTRACT
    depends_on: tuple[str, ...] = ()
    tool: str | None = None
    stageable: bool = False
    stage_of: str | None = None
    outbox: tuple[str, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise PlanError(f"a step is named by a non-empty string id, got {self.id!r}")
        sid = self.id
        if self.tier is None:
            raise PlanError(f"step {sid!r} declares no reversibility tier; declare 'I' (invertible), 'II' "
                            "(compensable) or 'III' (pivot): an undeclared step is refused, not guessed", step=sid)
        if self.tier not in TIERS:
            raise PlanError(f"step {sid!r}: tier {self.tier!r} is not one of {', '.join(TIERS)}", step=sid)
        if not isinstance(self.repeat_contract, str) or self.repeat_contract not in REPEAT_CONTRACTS:
            raise PlanError(f"step {sid!r}: repeat_contract {self.repeat_contract!r} is not one of "
                            f"{', '.join(sorted(REPEAT_CONTRACTS))}", step=sid)
        object.__setattr__(self, "depends_on", _ids(self.depends_on, f"step {sid!r}: depends_on"))
        object.__setattr__(self, "outbox", _ids(self.outbox, f"step {sid!r}: outbox"))
        if not isinstance(self.stageable, bool):
            raise PlanError(f"step {sid!r}: stageable must be true or false, got {self.stageable!r}", step=sid)
        if self.stageable and self.tier != "III":
            raise PlanError(f"step {sid!r} is tier {self.tier} but declares stageable: only a pivot's (tier III) "
                            "payload is staged in escrow", step=sid)
        if self.stage_of is not None and (not isinstance(self.stage_of, str) or not self.stage_of):
            raise PlanError(f"step {sid!r}: stage_of names a step by a non-empty string, got {self.stage_of!r}",
                            step=sid)
        if self.stage_of is not None and self.outbox:
            raise PlanError(f"step {sid!r} both stages a payload (stage_of) and flushes an outbox", step=sid)
        for name in ("tool", "description"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise PlanError(f"step {sid!r}: {name} must be a string, got {v!r}", step=sid)

    @property
    def repeat_safe(self) -> bool:
        """True when a repeat of this step is harmless (its contract is in REPEAT_SAFE_CONTRACTS)."""
        return self.repeat_contract in REPEAT_SAFE_CONTRACTS

    def to_json(self) -> dict[str, Any]:
        """The step as plan JSON (optional fields only when set)."""
        out: dict[str, Any] = {"id": self.id}
        if self.tool is not None:
            out["tool"] = self.tool
        out |= {"tier": self.tier, "repeat_contract": self.repeat_contract, "depends_on": list(self.depends_on)}
        if self.stageable:
            out["stageable"] = True
        if self.stage_of is not None:
            out["stage_of"] = self.stage_of
        if self.outbox:
            out["outbox"] = list(self.outbox)
        if self.description:
            out["description"] = self.description
        return out


def _ids(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, (str, Mapping)) or not isinstance(value, Iterable):   # a JSON object is not a list
        raise PlanError(f"{what} must be a list of step ids, got {value!r}")
    out: list[str] = []
    for v in value:
        if not isinstance(v, str) or not v:
            raise PlanError(f"{what} must be a list of step ids (non-empty strings), got {v!r}")
        if v not in out:
            out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class Plan:
    """An ordered plan of steps (the order is the one the plan proposes to run them in).

    Raises:
        PlanError: no steps, a step that is not a PlanStep, an id used twice.
    """

    steps: tuple[PlanStep, ...]
    name: str = ""

    def __post_init__(self) -> None:
        steps = tuple(self.steps)
        if not steps:
            raise PlanError("a plan holds at least one step")
        seen: set[str] = set()
        for s in steps:
            if not isinstance(s, PlanStep):
                raise PlanError(f"a plan's steps are PlanStep objects, got {type(s).__name__}")
            if s.id in seen:
                raise PlanError(f"step id {s.id!r} is used twice", step=s.id)
            seen.add(s.id)
        object.__setattr__(self, "steps", steps)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.steps)

    def step(self, step_id: str) -> PlanStep:
        """The step named ``step_id`` (PlanError when there is none)."""
        for s in self.steps:
            if s.id == step_id:
                return s
        raise PlanError(f"no step {step_id!r} in the plan (steps: {', '.join(self.ids)})", step=step_id)

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON data (what :func:`plan_from_json` reads)."""
        out: dict[str, Any] = {"name": self.name} if self.name else {}
        return out | {"steps": [s.to_json() for s in self.steps]}


def plan_from_json(data: Any) -> Plan:
    """A :class:`Plan` from JSON data: ``{"name": ..., "steps": [step, ...]}`` or a bare list of steps,
    each step an object with the keys of :class:`PlanStep` (``id`` and ``tier`` required).

    Raises:
        PlanError: anything else (wrong shapes, unknown keys, a missing tier, duplicate ids ...).
    """
    name = ""
    if isinstance(data, Mapping):
        extra = sorted(set(data) - {"name", "steps", "description"})
        if extra:
            raise PlanError(f"unknown plan key {extra[0]!r}; a plan is {{\"name\": ..., \"steps\": [...]}}")
        name = data.get("name", "")
        if not isinstance(name, str):
            raise PlanError(f"the plan's name must be a string, got {name!r}")
        if "steps" not in data:
            raise PlanError("the plan has no \"steps\" list")
        data = data["steps"]
    if not isinstance(data, list):
        raise PlanError(f"a plan's steps are a JSON list of step objects, got {type(data).__name__}")
    steps = []
    for i, raw in enumerate(data):
        if not isinstance(raw, Mapping):
            raise PlanError(f"step #{i + 1} must be a JSON object, got {raw!r}")
        unknown = sorted(set(raw) - _STEP_KEYS)
        if unknown:
            raise PlanError(f"step #{i + 1} ({raw.get('id')!r}): unknown key {unknown[0]!r}; a step has "
                            f"{', '.join(sorted(_STEP_KEYS))}", step=raw.get("id") if isinstance(raw.get("id"), str)
                            else None)
        if "id" not in raw:
            raise PlanError(f"step #{i + 1} has no id")
        kw = dict(raw)
        kw.setdefault("tier", None)
        steps.append(PlanStep(**kw))
    return Plan(tuple(steps), name)


def load_plan(text: str) -> Plan:
    """A plan from JSON text (PlanError when it is not JSON or not a plan)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"the plan is not valid JSON ({exc})") from None
    return plan_from_json(data)


# --- the checker --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reason:
    """One broken rule: its name (one of :data:`RULES`), the offending step ids and a sentence."""

    rule: str
    steps: tuple[str, ...]
    message: str

    def __str__(self) -> str:
        return f"{self.rule} [{', '.join(self.steps)}]: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "steps": list(self.steps), "message": self.message}


@dataclass(frozen=True)
class PlanCheck:
    """The verdict of :func:`check_plan`: ``valid`` and, when not, one :class:`Reason` per broken
    rule (in :data:`RULES` order). ``pivot`` is the plan's pivot (its first tier III step) or None;
    ``preparation`` and ``finalization`` the ids before and after it, in plan order."""

    valid: bool
    reasons: tuple[Reason, ...]
    pivot: str | None
    preparation: tuple[str, ...]
    finalization: tuple[str, ...]

    @property
    def offending(self) -> dict[str, list[str]]:
        """``{rule: [step ids]}`` of the broken rules."""
        return {r.rule: list(r.steps) for r in self.reasons}

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "reasons": [str(r) for r in self.reasons],
                "violations": [r.to_json() for r in self.reasons], "pivot": self.pivot,
                "preparation": list(self.preparation), "finalization": list(self.finalization)}


def _in_order(ids: Iterable[str], order: Sequence[str]) -> tuple[str, ...]:
    wanted = set(ids)
    return tuple(i for i in order if i in wanted)


def _cycle_steps(deps: Mapping[str, Sequence[str]]) -> set[str]:
    """The ids that lie on a dependency cycle (Tarjan's strongly connected components, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: set[str] = set()
    counter = 0
    for root in deps:
        if root in index:
            continue
        work = [(root, iter(deps[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next((d for d in it if d in deps), None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(deps[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1 or node in deps[node]:
                    out.update(comp)
    return out


def _escrow_reasons(plan: Plan, pivot_pos: int | None) -> tuple[list[str], list[str]]:
    """Offending ids and messages of the ``escrow`` rule."""
    pos = {s.id: i for i, s in enumerate(plan.steps)}
    bad: list[str] = []
    msgs: list[str] = []
    staged: dict[str, str] = {}
    for s in plan.steps:
        if s.stage_of is None:
            continue
        if s.stage_of in staged:
            bad.append(s.id)
            msgs.append(f"{s.id} stages {s.stage_of}, which {staged[s.stage_of]} already stages")
        staged.setdefault(s.stage_of, s.id)
        if s.tier != "I":
            bad.append(s.id)
            msgs.append(f"{s.id} writes {s.stage_of}'s payload into escrow, an invertible write, but is declared "
                        f"tier {s.tier}")
        if pivot_pos is not None and pos[s.id] > pivot_pos:
            bad.append(s.id)
            msgs.append(f"{s.id} stages a payload after the pivot, where no outbox will flush it")
    flushed: set[str] = set()
    for s in plan.steps:
        if not s.outbox:
            continue
        if pivot_pos is None or pos[s.id] != pivot_pos:
            bad.append(s.id)
            msgs.append(f"{s.id} flushes an outbox but is not the pivot; the outbox is released atomically with "
                        "the pivot only")
            continue
        for x in s.outbox:
            flushed.add(x)
            st = staged.get(x)
            if st is None or pos[st] > pivot_pos:
                bad.append(s.id)
                msgs.append(f"the pivot {s.id} flushes {x}, but no step before it stages {x}'s payload")
    for x, st in staged.items():
        if x not in flushed:
            bad.append(st)
            msgs.append(f"{st} stages {x}'s payload, but no pivot outbox flushes it: it would stay in escrow")
    return bad, msgs


def check_plan(plan: Plan) -> PlanCheck:
    """Judge ``plan`` against the Pivot Action Boundary Invariant (Failure Recovery, "The pivot
    action boundary"); the rules are listed in the module docstring and in :data:`RULES`.

    Returns a :class:`PlanCheck` (never raises for a plan that breaks the rules: that is the
    answer). Raises TypeError when ``plan`` is not a :class:`Plan`.
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"check_plan takes a Plan (see plan_from_json), got {type(plan).__name__}")
    ids = plan.ids
    pos = {s.id: i for i, s in enumerate(plan.steps)}
    pivots = [s.id for s in plan.steps if s.tier == "III"]
    pivot = pivots[0] if pivots else None
    pivot_pos = pos[pivot] if pivot is not None else None
    flushed = {x for s in plan.steps if pivot is not None and s.id == pivot for x in s.outbox}
    found: dict[str, tuple[list[str], list[str]]] = {rule: ([], []) for rule in RULES}

    def add(rule: str, steps: Iterable[str], msg: str) -> None:
        found[rule][0].extend(steps)
        found[rule][1].append(msg)

    for s in plan.steps:
        for d in s.depends_on:
            if d not in pos and d not in flushed:
                add("unknown_dependency", [s.id], f"{s.id} depends on {d!r}, which is no step of the plan")
    deps = {s.id: [d for d in s.depends_on if d in pos] for s in plan.steps}
    on_cycle = _cycle_steps(deps)
    if on_cycle:
        add("dependency_cycle", _in_order(on_cycle, ids), "the dependencies of "
            + ", ".join(_in_order(on_cycle, ids)) + " form a cycle: no order can satisfy them")
    for s in plan.steps:
        for d in s.depends_on:
            if d in pos and pos[d] > pos[s.id]:
                add("dependency_order", [s.id], f"{s.id} runs before {d}, which it depends on")
            elif d in flushed and d not in pos and pivot_pos is not None and pos[s.id] <= pivot_pos:
                add("dependency_order", [s.id], f"{s.id} depends on {d}, whose staged payload is released only "
                    f"with the pivot {pivot}, yet runs before it")
    if len(pivots) > 1:
        add("at_most_one_pivot", pivots, f"{len(pivots)} pivots (tier III: no inverse, no compensator): "
            f"{', '.join(pivots)}; a plan may cross one point of no return only")
    if pivot_pos is not None:
        for s in plan.steps[:pivot_pos]:
            if s.tier not in ("I", "II"):
                add("preparation_reversible", [s.id], f"{s.id} (tier {s.tier}) runs before the pivot {pivot}, "
                    "where every step must be invertible (I) or compensable (II)")
        for s in plan.steps[pivot_pos + 1:]:
            if not s.repeat_safe:
                add("finalization_repeat_safe", [s.id],
                    f"{s.id} (tier {s.tier}, {TIER_NAMES[s.tier]}; repeat contract {s.repeat_contract}) runs after "
                    f"the pivot {pivot}, where a failed step can only be retried forward: it must be idempotent "
                    f"({', '.join(sorted(REPEAT_SAFE_CONTRACTS))})")
    bad, msgs = _escrow_reasons(plan, pivot_pos)
    for b, m in zip(bad, msgs):
        add("escrow", [b], m)
    reasons = tuple(Reason(rule, _dedup(steps), "; ".join(msgs)) for rule, (steps, msgs) in found.items() if msgs)
    return PlanCheck(not reasons, reasons, pivot,
                     ids if pivot_pos is None else ids[:pivot_pos],
                     () if pivot_pos is None else ids[pivot_pos + 1:])


def _dedup(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


# --- the reorderer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Transformation:
    """One change :func:`propose_order` made to the plan: ``kind`` is ``stage_in_escrow`` (a tier III
    step split into a staging step and an outbox entry), ``outbox_flush`` (the pivot releases the
    staged payloads), ``moved_before_pivot`` (a step the plan ran after the pivot now runs in the
    preparation phase, its compensator still live: the chapter's T4') or ``moved_after_pivot`` (a
    step forced into the finalization phase by its dependencies)."""

    kind: str
    step: str
    message: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "step": self.step, "message": self.message, **dict(self.detail)}


@dataclass(frozen=True)
class Proposal:
    """What :func:`propose_order` found: ``order`` (the transformed plan's step ids, in order) and
    ``plan`` (the transformed plan itself), or both None with ``reasons`` saying why no valid order
    exists. ``pivot`` and ``staged`` name the pivot chosen and the steps staged in escrow."""

    order: tuple[str, ...] | None
    plan: Plan | None
    reasons: tuple[Reason, ...]
    transformations: tuple[Transformation, ...]
    pivot: str | None = None
    staged: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"proposed_order": list(self.order) if self.order is not None else None,
                "proposal_reasons": [str(r) for r in self.reasons],
                "transformations": [t.to_json() for t in self.transformations],
                "pivot": self.pivot, "staged": list(self.staged),
                "transformed_plan": self.plan.to_json() if self.plan is not None else None}


def _descendants(roots: Iterable[str], children: Mapping[str, Sequence[str]]) -> set[str]:
    out: set[str] = set()
    todo = list(roots)
    while todo:
        for c in children[todo.pop()]:
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _topo(ids: Sequence[str], deps: Mapping[str, Sequence[str]], rank: Mapping[str, int]) -> list[str]:
    """Kahn's topological sort of ``ids`` (dependencies outside ``ids`` ignored), ties by ``rank``."""
    members = set(ids)
    indeg = {i: sum(d in members for d in deps[i]) for i in ids}
    users: dict[str, list[str]] = {i: [] for i in ids}
    for i in ids:
        for d in deps[i]:
            if d in members:
                users[d].append(i)
    heap = [(rank[i], i) for i in ids if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, i = heapq.heappop(heap)
        out.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(heap, (rank[u], u))
    return out


def _names(items: Sequence[str], limit: int = 8) -> str:
    """``items`` joined for a message, the first ``limit`` named and the rest counted (the Reason's
    ``steps`` still lists every one)."""
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" and {len(items) - limit} more"


def _stage_id(step_id: str, taken: set[str]) -> str:
    sid = step_id + STAGE_SUFFIX
    while sid in taken:
        sid += "'"
    return sid


def _try_pivot(plan: Plan, p: str, children: Mapping[str, Sequence[str]], parents: Mapping[str, Sequence[str]],
               by_id: Mapping[str, PlanStep]) -> tuple[list[str], list[Reason]]:
    """For pivot candidate ``p``: (the finalization ids, []) when it works, else ([], the reasons).

    Linear in the plan's steps and dependencies (propose_order calls it once per tier III step)."""
    others = [s.id for s in plan.steps if s.tier == "III" and s.id != p]
    unstageable = [x for x in others if not by_id[x].stageable]
    if unstageable:
        return [], [Reason("at_most_one_pivot", (p, *unstageable),
                           f"with {p} as the pivot, {', '.join(unstageable)} would be a second point of no return "
                           "and cannot be staged (not stageable)")]
    after_pivot = _descendants([p], children)
    after_flush = _descendants(others, children)
    reasons = []
    on_pivot = [x for x in others if x in after_pivot]
    on_flush = [x for x in others if x not in after_pivot and x in after_flush]
    if on_pivot:   # one reason per candidate and cause, not one per step: a chain of n pivots stays O(n) reasons
        reasons.append(Reason("dependency_order", (*on_pivot, p), f"{_names(on_pivot)} "
                              f"{'depends' if len(on_pivot) == 1 else 'depend'} on the pivot {p}, so "
                              f"{'its payload' if len(on_pivot) == 1 else 'their payloads'} cannot be staged before "
                              "the pivot"))
    if on_flush:
        reasons.append(Reason("dependency_order", tuple(on_flush), f"{_names(on_flush)} "
                              f"{'depends' if len(on_flush) == 1 else 'depend'} on another staged payload, released "
                              f"only with the pivot {p}: {'it' if len(on_flush) == 1 else 'they'} cannot be staged "
                              "before the pivot"))
    if p in after_flush:
        before_pivot = _descendants([p], parents)   # the steps p depends on, directly or not
        reasons.append(Reason("dependency_order", (p,), f"the pivot {p} depends on a staged payload ("
                              + ", ".join(x for x in others if x in before_pivot)
                              + "), which its own outbox releases only once it has committed"))
    after = after_pivot | after_flush
    staged = set(others)
    final = [i for i in plan.ids if i in after and i != p and i not in staged]
    unsafe = [i for i in final if not by_id[i].repeat_safe]
    if unsafe:
        reasons.append(Reason("finalization_repeat_safe", tuple(unsafe),
                              f"with {p} as the pivot, " + _names(
                                  [f"{i} ({by_id[i].repeat_contract}, tier {by_id[i].tier})" for i in unsafe])
                              + " must run after it (they depend on the pivot or on a staged payload) but are not "
                              "idempotent"))
    return (final, []) if not reasons else ([], reasons)


def propose_order(plan: Plan) -> Proposal:
    """A valid order for ``plan`` under its declared dependencies, with escrow and an atomic outbox
    where a second tier III step needs them, or why none exists (Failure Recovery, Example 0.1
    and Systems Perspective 0.1; the method is in the module docstring).

    The returned :attr:`Proposal.plan` passes :func:`check_plan`; a plan that already passes is
    returned unchanged (a transformed plan that does not is not reworked: reason ``escrow``).
    Raises TypeError when ``plan`` is not a :class:`Plan`.
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"propose_order takes a Plan (see plan_from_json), got {type(plan).__name__}")
    check = check_plan(plan)
    if check.valid:   # already valid: the plan's own order is kept (pivot and phases as written)
        return Proposal(plan.ids, plan, (), (), check.pivot, ())
    if any(s.stage_of is not None or s.outbox for s in plan.steps):
        return Proposal(None, None, (Reason("escrow", tuple(s.id for s in plan.steps if s.stage_of or s.outbox),
                                            "the plan is already transformed (stage_of, outbox) and not "
                                            "valid; the reorderer takes a plan as written, with stageable "
                                            "steps"),), ())
    blocking = tuple(r for r in check.reasons if r.rule in ("unknown_dependency", "dependency_cycle"))
    if blocking:
        return Proposal(None, None, blocking, ())
    deps = {s.id: s.depends_on for s in plan.steps}
    children: dict[str, list[str]] = {i: [] for i in plan.ids}
    for s in plan.steps:
        for d in s.depends_on:
            children[d].append(s.id)
    by_id = {s.id: s for s in plan.steps}
    pivots = [s.id for s in plan.steps if s.tier == "III"]
    rank = {s.id: i for i, s in enumerate(plan.steps)}
    if not pivots:
        order = _topo(plan.ids, deps, rank)
        new = Plan(tuple(plan.step(i) for i in order), plan.name)
        return Proposal(tuple(order), new, (), (), None, ())
    tried: list[tuple[str, list[str]]] = []
    reasons: list[Reason] = []
    for p in pivots:
        final, why = _try_pivot(plan, p, children, deps, by_id)
        if why:
            reasons.extend(why)
        else:
            tried.append((p, final))
            if not final:   # no finalization step: no later candidate can beat it (ties go to the earliest)
                break
    if not tried:
        unstageable = [p for p in pivots if not by_id[p].stageable]
        if len(unstageable) > 1:   # the short answer first: no choice of pivot can work
            reasons.insert(0, Reason("at_most_one_pivot", tuple(unstageable),
                                     f"{len(unstageable)} pivots that cannot be staged: {', '.join(unstageable)}; "
                                     "at most one point of no return, and escrow needs a stageable payload"))
        return Proposal(None, None, tuple(_dedup_reasons(reasons)), ())
    p, final = min(tried, key=lambda t: (len(t[1]), rank[t[0]]))
    return _build(plan, p, final, deps, rank)


def _dedup_reasons(reasons: Iterable[Reason]) -> list[Reason]:
    return list(dict.fromkeys(reasons))


def _build(plan: Plan, p: str, final: list[str], deps: Mapping[str, Sequence[str]],
           rank: Mapping[str, int]) -> Proposal:
    """The transformed plan for pivot ``p`` with the finalization ids ``final``."""
    staged = [s.id for s in plan.steps if s.tier == "III" and s.id != p]
    taken = set(plan.ids)
    stage_ids = {}
    for x in staged:
        stage_ids[x] = _stage_id(x, taken)
        taken.add(stage_ids[x])
    prep_orig = [i for i in plan.ids if i != p and i not in final]
    prep_deps = {stage_ids.get(i, i): deps[i] for i in prep_orig}
    prep_rank = {stage_ids.get(i, i): rank[i] for i in prep_orig}
    prep = _topo([stage_ids.get(i, i) for i in prep_orig], prep_deps, prep_rank)
    fin = _topo(final, deps, rank)
    steps: list[PlanStep] = []
    by_id = {s.id: s for s in plan.steps}
    staged_by = {v: k for k, v in stage_ids.items()}
    for i in prep:
        if i in staged_by:
            x = staged_by[i]
            steps.append(PlanStep(i, "I", "idempotent", by_id[x].depends_on, stage_of=x,
                                  description=f"stage {x}'s payload in local escrow (invertible: drop the entry)"))
        else:
            steps.append(by_id[i])
    steps.append(replace(by_id[p], outbox=tuple(staged)))
    steps += [by_id[i] for i in fin]
    new = Plan(tuple(steps), plan.name)
    order = tuple(s.id for s in steps)
    return Proposal(order, new, (), tuple(_transformations(plan, p, staged, stage_ids, final)), p, tuple(staged))


def _transformations(plan: Plan, p: str, staged: list[str], stage_ids: Mapping[str, str],
                     final: list[str]) -> list[Transformation]:
    out = []
    pos = {i: k for k, i in enumerate(plan.ids)}
    for x in staged:
        out.append(Transformation("stage_in_escrow", x, f"{x} (tier III, stageable) becomes {stage_ids[x]}: its "
                                  "payload is staged in local escrow (tier I) before the pivot",
                                  {"stage_step": stage_ids[x], "flushed_by": p}))
    if staged:
        out.append(Transformation("outbox_flush", p, f"the pivot {p} commits together with an atomic outbox that "
                                  f"releases the staged payload{'s' if len(staged) > 1 else ''} of "
                                  f"{', '.join(staged)}: one point of no return", {"outbox": list(staged)}))
    staged_set, final_set, tier = set(staged), set(final), {s.id: s.tier for s in plan.steps}
    for i in plan.ids:
        if i == p or i in staged_set:
            continue
        if pos[i] > pos[p] and i not in final_set:
            out.append(Transformation("moved_before_pivot", i, f"{i} (tier {tier[i]}) moves into the "
                                      f"preparation phase, before the pivot {p}: its failure is still unwound"))
        elif pos[i] < pos[p] and i in final_set:
            out.append(Transformation("moved_after_pivot", i, f"{i} depends on the pivot or on a staged payload: it "
                                      f"runs in the finalization phase, after {p}, and is idempotent"))
    return out


# --- Example 0.1 --------------------------------------------------------------------------------


def example_0_1() -> Plan:
    """Example 0.1 of the Failure Recovery chapter, "The dual-commit trap", as the agent proposed it.

    T1 provisions the GPU cluster (II: terminated through the cloud API), T2 validates and warms it
    (I, internal), T3 activates BGP anycast (III: public traffic arrives at once), T4 migrates the
    service catalog (II: rolled back by the database), T5 sends the signed compliance webhook (III;
    its payload is known before activation, so it is stageable). The dependencies are this
    project's reading of the scenario (the chapter gives none): T2 and T4 need the cluster, T3
    needs the validated cluster, T5 reports the validated cluster and its catalog entry.
    """
    return Plan((
        PlanStep("T1", "II", "idempotency_key", (), tool="provision_gpu_cluster",
                 description="provision 16 x H100 across two availability zones (5.50 USD/min)"),
        PlanStep("T2", "I", "idempotent", ("T1",), tool="warm_and_validate",
                 description="matmul pre-flight validation, warm the PagedAttention KV caches"),
        PlanStep("T3", "III", "unsafe", ("T1", "T2"), tool="activate_bgp_anycast",
                 description="register the instances with the global anycast BGP mesh: public traffic"),
        PlanStep("T4", "II", "unsafe", ("T1",), tool="migrate_service_catalog",
                 description="administrative migration of the global service catalog database"),
        PlanStep("T5", "III", "unsafe", ("T2", "T4"), tool="send_compliance_webhook", stageable=True,
                 description="signed audit webhook to the external compliance registry"),
    ), "Example 0.1: the dual-commit trap")


#: The built-in example plans by name (``python -m kernel_lib plan example NAME``).
EXAMPLES = {"ex0.1": example_0_1}
