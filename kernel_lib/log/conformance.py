"""A conformance suite for log stores: the §11.8.4 append contract and the §11.3.1 tier
declaration, as plain check functions any :class:`~kernel_lib.log.base.LogStore` can be run
against (the project runs it on the memory, SQLite, segment and etcd stores).

A check takes an *opener* and the store's :class:`StoreCapabilities`:

* ``opener()`` opens (read-write) the log under test, the same log on every call within one
  check, and ``opener(read_only=True)`` opens it read-only (only called when the capabilities
  say ``read_only_open``). Each check gets a fresh, empty log: :func:`run_conformance` asks
  ``new_log()`` for a new opener before every check.
* The capabilities say what the store offers. Those a store already declares are read from it
  (:meth:`StoreCapabilities.of`: its tiers and the failure domains they survive, whether it
  overrides ``retire_prefix`` and ``claim_epoch``, an ``declaration()`` it provides); the rest
  depend on how the log is opened, so the caller states them (reopen, read-only opening, two
  handles at once, handles in other processes).

A check raises AssertionError naming the store and what it did wrong (any other exception is a
failure of the store too); a check whose capabilities are missing does not apply
(:meth:`ConformanceCheck.applies`). :data:`CHECKS` lists every check by name. Checks close every
handle they open, also when they fail.

Using it on a store of your own::

    from kernel_lib.log.conformance import StoreCapabilities, run_conformance

    def new_log():
        path = fresh_location()
        return lambda read_only=False: MyStore.open(path, read_only=read_only)

    probe = MyStore.open(fresh_location())
    caps = StoreCapabilities.of(probe, reopen=True, read_only_open=True)
    probe.close()
    for outcome in run_conformance(new_log, caps):
        print(outcome.name, outcome.status, outcome.message)

Raises (from :meth:`StoreCapabilities.of` and :func:`run_conformance`): ConfigError for a
capability declaration that contradicts itself or the store, or an unknown check name.
"""

from __future__ import annotations

import multiprocessing
import pickle
import random
import threading
import traceback
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Literal, Protocol

from kernel_lib.core.events import Event, RuntimeInput, ToolIntent, ToolResult
from kernel_lib.errors import (
    AcknowledgmentTooWeakError,
    ConfigError,
    ConflictingDuplicateError,
    PrefixRetiredError,
    SequenceGapError,
    StaleOwnerError,
    StoreClosedError,
    StoreError,
    StoreReadOnlyError,
    TierNotOfferedError,
)
from kernel_lib.log.base import MAX_OWNER_EPOCH, AckTier, FailureDomain, LogStore, choose_tier
from kernel_lib.log.trajectory import TrajectoryLog

__all__ = ["StoreCapabilities", "Opener", "ConformanceCheck", "CheckOutcome", "CHECKS", "check_names",
           "run_check", "run_conformance"]


class Opener(Protocol):
    """``opener(read_only=False) -> LogStore``: opens the log under test (the same log on every call)."""

    def __call__(self, read_only: bool = False) -> LogStore: ...


_HARNESS_FLAGS = ("reopen", "read_only_open", "concurrent_handles", "multi_process")


@dataclass(frozen=True)
class StoreCapabilities:
    """What a store offers, as the conformance checks need to know it.

    Fields:
        kind: the store's name (``store.name``).
        tiers: the acknowledgment tiers it offers (``store.offered_tiers``, §11.3.1 table 2).
        durable: its strongest tier survives at least a process crash (an acknowledged event
            outlives the handle that wrote it).
        retire_prefix: it implements log compaction (:meth:`LogStore.retire_prefix`, §11.8.3).
        claim_epoch: it claims an owner_epoch atomically (:meth:`LogStore.claim_epoch`, §11.5.1).
        reopen: closing every handle and calling the opener again finds the same log.
        read_only_open: ``opener(read_only=True)`` gives a handle that reads and refuses writes.
        concurrent_handles: the opener may be called again while a handle is open, giving a second
            independent handle on the same log (two connections, two clients). Without it, checks
            that need two claimants share one handle between two threads.
        multi_process: the opener can be pickled, and handles opened by it in other processes
            share the log (claims from several processes).
        declaration: what the store says about itself through a ``declaration()`` method, if it
            has one (e.g. the etcd store's members and the failures it tolerates), else None.
    """

    kind: str
    tiers: tuple[AckTier, ...]
    durable: bool
    retire_prefix: bool
    claim_epoch: bool
    reopen: bool = False
    read_only_open: bool = False
    concurrent_handles: bool = False
    multi_process: bool = False
    declaration: dict | None = field(default=None, compare=False)

    @classmethod
    def of(cls, store: LogStore, *, reopen: bool | None = None, read_only_open: bool = False,
           concurrent_handles: bool = False, multi_process: bool = False) -> "StoreCapabilities":
        """The capabilities ``store`` declares, plus what the caller states about opening it.

        ``reopen`` defaults to ``durable``. Calls ``store.declaration()`` when the store has one
        (it may talk to the store, e.g. ask an etcd cluster for its members).

        Raises:
            ConfigError: ``store`` is not a LogStore or offers no tier; ``reopen``,
                ``read_only_open`` or ``multi_process`` for a store that is not durable;
                ``multi_process`` without ``concurrent_handles``.
        """
        if not isinstance(store, LogStore):
            raise ConfigError(f"StoreCapabilities.of takes a LogStore, got {type(store).__name__}")
        tiers = tuple(store.offered_tiers)
        if not tiers or not all(isinstance(t, AckTier) for t in tiers):
            raise ConfigError(f"store {store.name!r} declares no acknowledgment tiers (offered_tiers={tiers!r})")
        durable = max(t.survives_up_to for t in tiers) >= FailureDomain.PROCESS_CRASH
        make_decl = getattr(store, "declaration", None)
        declaration = make_decl() if callable(make_decl) else None
        caps = cls(kind=store.name, tiers=tiers, durable=durable,
                   retire_prefix=type(store).retire_prefix is not LogStore.retire_prefix,
                   claim_epoch=type(store).claim_epoch is not LogStore.claim_epoch,
                   reopen=durable if reopen is None else bool(reopen), read_only_open=bool(read_only_open),
                   concurrent_handles=bool(concurrent_handles), multi_process=bool(multi_process),
                   declaration=declaration)
        caps.check()
        return caps

    def check(self) -> None:
        """Raise ConfigError if the declaration contradicts itself (see :meth:`of`)."""
        for flag in ("reopen", "read_only_open", "multi_process"):
            if getattr(self, flag) and not self.durable:
                raise ConfigError(f"store {self.kind!r}: {flag}=True, but its tiers {[t.label for t in self.tiers]} "
                                  "survive no process crash, so nothing outlives a handle")
        if self.multi_process and not self.concurrent_handles:
            raise ConfigError(f"store {self.kind!r}: multi_process=True needs concurrent_handles=True")

    def but(self, **changes) -> "StoreCapabilities":
        """A copy with some capabilities changed (e.g. ``caps.but(multi_process=False)``), checked."""
        caps = replace(self, **changes)
        caps.check()
        return caps

    def has(self, name: str) -> bool:
        return bool(getattr(self, name))


@dataclass(frozen=True)
class ConformanceCheck:
    """One check of the suite: ``run(opener, capabilities)`` raises AssertionError on a violation.

    ``needs`` are capability names that must be true for the check to apply, ``unless`` names
    that must be false (the checks of what a store without a feature must say)."""

    name: str
    run: Callable[[Opener, StoreCapabilities], None]
    doc: str
    needs: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()

    def applies(self, caps: StoreCapabilities) -> str | None:
        """None when the check applies to a store with ``caps``, else why it does not."""
        missing = [n for n in self.needs if not caps.has(n)]
        present = [n for n in self.unless if caps.has(n)]
        if missing:
            return f"needs {', '.join(missing)}, which store {caps.kind!r} does not declare"
        if present:
            return f"checks a store without {', '.join(present)}; store {caps.kind!r} has it"
        return None


@dataclass(frozen=True)
class CheckOutcome:
    """What :func:`run_conformance` found for one check: ``passed``, ``failed`` (``message`` says
    what went wrong) or ``not_applicable`` (``message`` says why)."""

    name: str
    status: Literal["passed", "failed", "not_applicable"]
    message: str = ""


#: Every check, by name, in the order they run.
CHECKS: dict[str, ConformanceCheck] = {}


def _check(*, needs: tuple[str, ...] = (), unless: tuple[str, ...] = ()):
    def register(fn: Callable[[Opener, StoreCapabilities], None]) -> Callable[[Opener, StoreCapabilities], None]:
        doc = " ".join((fn.__doc__ or "").split())
        CHECKS[fn.__name__] = ConformanceCheck(fn.__name__, fn, doc, tuple(needs), tuple(unless))
        return fn
    return register


def check_names(caps: StoreCapabilities | None = None) -> list[str]:
    """Names of every check (with ``caps``: of those that apply), in running order."""
    return [n for n, c in CHECKS.items() if caps is None or c.applies(caps) is None]


def run_check(name: str, opener: Opener, caps: StoreCapabilities) -> None:
    """Run one check on the (fresh) log behind ``opener``.

    Raises:
        ConfigError: unknown check name, or the check does not apply to ``caps``.
        AssertionError: the store violates what the check states (or any error the store raised).
    """
    check = CHECKS.get(name)
    if check is None:
        raise ConfigError(f"no conformance check {name!r}; the checks are {list(CHECKS)}")
    why = check.applies(caps)
    if why is not None:
        raise ConfigError(f"check {name} does not apply: {why}")
    check.run(opener, caps)


def run_conformance(new_log: Callable[[], Opener], caps: StoreCapabilities, *,
                    only: Iterable[str] | None = None) -> list[CheckOutcome]:
    """Run every check (or those named in ``only``) on a fresh log each, from ``new_log()``.

    Returns one :class:`CheckOutcome` per check; a failure's message is the assertion (or the
    exception and where it was raised). Raises ConfigError for an unknown name in ``only``.
    """
    names = list(CHECKS) if only is None else list(only)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ConfigError(f"no conformance checks {unknown}; the checks are {list(CHECKS)}")
    out = []
    for name in names:
        why = CHECKS[name].applies(caps)
        if why is not None:
            out.append(CheckOutcome(name, "not_applicable", why))
            continue
        try:
            CHECKS[name].run(new_log(), caps)
        except AssertionError as exc:
            out.append(CheckOutcome(name, "failed", str(exc)))
        except Exception as exc:  # noqa: BLE001 - any error of the store fails the check
            where = traceback.extract_tb(exc.__traceback__)[-1]
            out.append(CheckOutcome(name, "failed",
                                    f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"))
        else:
            out.append(CheckOutcome(name, "passed"))
    return out


# --- helpers ------------------------------------------------------------------------------------------

class _Handles:
    """Opens handles through the opener and closes every one of them on exit."""

    def __init__(self, opener: Opener):
        self._opener = opener
        self.opened: list[LogStore] = []

    def __call__(self, read_only: bool = False) -> LogStore:
        store = self._opener(read_only=True) if read_only else self._opener()
        if not isinstance(store, LogStore):
            raise AssertionError(f"the opener returned a {type(store).__name__}, not a LogStore")
        self.opened.append(store)
        return store

    def __enter__(self) -> "_Handles":
        return self

    def __exit__(self, *exc) -> None:
        for store in reversed(self.opened):
            try:
                store.close()
            except Exception:  # noqa: BLE001 - closing after a failure must not hide the failure
                pass


def _fail(store: LogStore, what: str) -> AssertionError:
    return AssertionError(f"store {store.name!r}: {what}")


def _expect(store: LogStore, ok: bool, what: str) -> None:
    if not ok:
        raise _fail(store, what)


def _raises(store: LogStore, errors: type[BaseException] | tuple[type[BaseException], ...], call: Callable[[], object],
            what: str, match: str | None = None) -> BaseException:
    """Run ``call``; it must raise one of ``errors`` (whose message contains ``match``)."""
    names = " or ".join(e.__name__ for e in (errors if isinstance(errors, tuple) else (errors,)))
    try:
        result = call()
        if hasattr(result, "__next__"):
            list(result)        # a lazy read raises when iterated
    except errors as exc:
        if match is not None and match not in str(exc):
            raise _fail(store, f"{what}: raised {type(exc).__name__} as expected, but its message does not say "
                               f"{match!r}: {exc}") from exc
        return exc
    except Exception as exc:  # noqa: BLE001 - reported as the wrong error
        raise _fail(store, f"{what}: expected {names}, got {type(exc).__name__}: {exc}") from exc
    raise _fail(store, f"{what}: expected {names}, nothing was raised")


def _draw(tid: str, seq: int, *, epoch: int = 0, event_id: str | None = None, value: int = 1) -> Event:
    return Event.create(trajectory_id=tid, event_id=event_id or f"{tid}/{seq}", sequence_number=seq,
                        owner_epoch=epoch, payload=RuntimeInput(kind="random", name="draw", value=value))


def _intent(tid: str, seq: int, op: str = "test_r18", *, epoch: int = 0, event_id: str | None = None) -> Event:
    payload = ToolIntent(operation_id=op, attempt_id="attempt1", tool="run_tests", arguments={"snapshot": "ws_r18"},
                         repeat_contract="idempotency_key", grant_id="g", authorization_ref=f"auth-{op}",
                         reservation_ref=f"res-{op}")
    return Event.create(trajectory_id=tid, event_id=event_id or f"{tid}/{seq}", sequence_number=seq,
                        owner_epoch=epoch, payload=payload)


def _result(tid: str, seq: int, status: str = "completed", *, complete: bool = True, event_id: str | None = None,
            op: str = "test_r18") -> Event:
    payload = ToolResult(operation_id=op, attempt_id="attempt1", status=status, observation_complete=complete)
    return Event.create(trajectory_id=tid, event_id=event_id or f"{tid}/{seq}", sequence_number=seq, payload=payload)


def _bytes(store: LogStore, tid: str, start: int = 1) -> list[bytes]:
    return [e.canonical for e in store.read(tid, start)]


def _tier(store: LogStore) -> AckTier:
    return store.strongest_tier()


# --- tiers and failure domains (§11.3.1 table 2) ---------------------------------------------------


@_check()
def declared_tiers_match_the_store(opener: Opener, caps: StoreCapabilities) -> None:
    """The store offers the tiers declared; for every failure domain the cheapest offered tier
    that survives it is chosen, and a trajectory that must survive more than the strongest tier
    is refused naming the store, its strongest tier and the domain; an unoffered tier is refused."""
    with _Handles(opener) as h:
        s = h()
        _expect(s, tuple(s.offered_tiers) == caps.tiers, f"offers {[t.label for t in s.offered_tiers]}, declared "
                f"{[t.label for t in caps.tiers]}")
        strongest = max(caps.tiers, key=lambda t: t.survives_up_to)
        _expect(s, s.strongest_tier() is strongest, f"strongest_tier() is {s.strongest_tier().label}, not "
                f"{strongest.label}")
        _expect(s, caps.durable == (strongest.survives_up_to >= FailureDomain.PROCESS_CRASH),
                "the durable capability disagrees with the failure domains of its tiers")
        for domain in FailureDomain:
            fitting = [t for t in caps.tiers if t.covers(domain)]
            if fitting:
                want = min(fitting, key=lambda t: t.survives_up_to)
                _expect(s, choose_tier(s, domain) is want, f"choose_tier for {domain.label} gave "
                        f"{choose_tier(s, domain).label}, the cheapest surviving tier is {want.label}")
                _expect(s, TrajectoryLog(s, "traj-a", must_survive=domain).tier is want,
                        f"a trajectory that must survive {domain.label} did not get tier {want.label}")
            else:
                err = _raises(s, AcknowledgmentTooWeakError,
                              lambda d=domain: TrajectoryLog(s, "traj-a", must_survive=d),
                              f"a trajectory that must survive {domain.label}")
                _expect(s, (err.store, err.strongest, err.required) == (s.name, strongest.label, domain.label),
                        f"the refusal names {err.store!r}/{err.strongest!r}/{err.required!r}: {err}")
        for tier in AckTier:
            if tier not in caps.tiers:
                _raises(s, TierNotOfferedError, lambda t=tier: s.append(_draw("traj-a", 1), t),
                        f"an append at the unoffered tier {tier.label}")
        _expect(s, s.head("traj-a") == 0, "an append at a refused tier left an event behind")
        if caps.declaration is not None:
            d = caps.declaration
            survives = [x.label for x in sorted(strongest.survives) if x > FailureDomain.NONE]
            _expect(s, d.get("tier") == strongest.label and d.get("survives") == survives,
                    f"its declaration() says tier {d.get('tier')!r} surviving {d.get('survives')!r}; its tiers say "
                    f"{strongest.label!r} surviving {survives!r}")


@_check()
def tiers_given_as_labels_are_parsed(opener: Opener, caps: StoreCapabilities) -> None:
    """A tier may be given by its label, in any case; anything else (an unknown label, an
    unoffered tier's label, None, a number) is TierNotOfferedError and appends nothing."""
    with _Handles(opener) as h:
        s = h()
        tier = _tier(s)
        out = s.append(_draw("traj-a", 1), tier.label.upper())
        _expect(s, out.tier is tier, f"append at {tier.label.upper()!r} was acknowledged at {out.tier!r}")
        bad = ["bogus", None, 3] + [t.label for t in AckTier if t not in caps.tiers]
        for label in bad:
            _raises(s, TierNotOfferedError, lambda x=label: s.append(_draw("traj-a", 2), x),
                    f"append at tier {label!r}")
        _expect(s, s.head("traj-a") == 1, f"head is {s.head('traj-a')} after refused appends, not 1")


# --- the append contract (§11.8.4) -----------------------------------------------------------------


@_check()
def identical_retry_is_acknowledged_without_a_second_copy(opener: Opener, caps: StoreCapabilities) -> None:
    """Appending the same event again (same id, same bytes) is acknowledged as a duplicate at
    its original position and stores nothing twice."""
    with _Handles(opener) as h:
        s = h()
        t = _tier(s)
        e = _draw("traj-a", 1)
        first, again = s.append(e, t), s.append(e, t)
        _expect(s, not first.duplicate, "the first append was acknowledged as a duplicate")
        _expect(s, again.duplicate and again.sequence_number == 1, f"the identical retry was acknowledged as {again}")
        _expect(s, [x.event_id for x in s.read("traj-a")] == [e.event_id] and s.head("traj-a") == 1,
                "the identical retry stored a second copy")


@_check()
def conflicting_duplicate_is_refused_and_nothing_is_overwritten(opener: Opener, caps: StoreCapabilities) -> None:
    """A retried batch carrying a timeout result under the event id that holds the success
    evidence is ConflictingDuplicateError ("split brain"); the stored success survives."""
    with _Handles(opener) as h:
        s = h()
        t = _tier(s)
        s.append_batch([_draw("traj-a", 1), _intent("traj-a", 2)], t)
        success = _result("traj-a", 3, event_id="res-1")
        s.append(success, t)
        timeout = _result("traj-a", 3, "timeout", complete=False, event_id="res-1")
        _raises(s, ConflictingDuplicateError, lambda: s.append(timeout, t), "a different event under a stored event id",
                match="split brain")
        stored = _bytes(s, "traj-a")
        _expect(s, len(stored) == 3 and stored[-1] == success.canonical,
                "the conflicting event replaced the stored one")


@_check()
def sequence_numbers_are_gapless(opener: Opener, caps: StoreCapabilities) -> None:
    """The next append must be head + 1: a gap, or a second event at a taken position, is
    SequenceGapError."""
    with _Handles(opener) as h:
        s = h()
        t = _tier(s)
        _raises(s, SequenceGapError, lambda: s.append(_draw("traj-a", 2), t), "an append at #2 of an empty trajectory")
        s.append(_draw("traj-a", 1), t)
        _raises(s, SequenceGapError, lambda: s.append(_draw("traj-a", 1, event_id="other"), t),
                "another event at the taken position #1")
        _raises(s, SequenceGapError, lambda: s.append(_draw("traj-a", 3), t), "an append at #3 after #1")
        _expect(s, s.head("traj-a") == 1, f"head is {s.head('traj-a')}, not 1")


@_check()
def a_stale_owner_is_fenced_at_the_log(opener: Opener, caps: StoreCapabilities) -> None:
    """An append stamped with an owner_epoch older than the newest the log has seen (from an
    append or an installed fence) is StaleOwnerError; install_fence never goes back (§11.5.1)."""
    with _Handles(opener) as h:
        s = h()
        t = _tier(s)
        s.append(_draw("traj-a", 1, epoch=1), t)
        _raises(s, StaleOwnerError, lambda: s.append(_draw("traj-a", 2, epoch=0), t), "an epoch-0 append after epoch 1",
                match="owner_epoch=0")
        s.install_fence("traj-a", 2)
        _expect(s, s.fence("traj-a") == 2, f"fence is {s.fence('traj-a')} after install_fence(2)")
        _raises(s, StaleOwnerError, lambda: s.append(_draw("traj-a", 2, epoch=1), t), "an epoch-1 append after fence 2")
        _raises(s, StaleOwnerError, lambda: s.install_fence("traj-a", 1), "install_fence(1) after fence 2")
        s.install_fence("traj-a", 2)              # the current epoch again is accepted
        _expect(s, s.append(_draw("traj-a", 2, epoch=2), t).sequence_number == 2, "the owner's append was refused")
        _expect(s, s.fence("traj-a") == 2 and s.fence("traj-b") == 0, "fences are not kept per trajectory")


@_check()
def batch_outcomes_are_decided_per_event(opener: Opener, caps: StoreCapabilities) -> None:
    """One bad event of a batch gets its error in the returned list; the others are appended."""
    with _Handles(opener) as h:
        s = h()
        out = s.append_batch([_draw("traj-a", 1), _draw("traj-a", 5), _draw("traj-a", 2)], _tier(s))
        _expect(s, len(out) == 3 and not isinstance(out[0], Exception) and isinstance(out[1], SequenceGapError)
                and not isinstance(out[2], Exception) and out[2].sequence_number == 2, f"batch outcomes {out}")
        _expect(s, s.head("traj-a") == 2, f"head is {s.head('traj-a')}, not 2")


@_check()
def mixed_batches_decide_every_event(opener: Opener, caps: StoreCapabilities) -> None:
    """A batch mixing an identical retry, a new event, a conflict with an id repeated inside the
    batch and another new event: each is decided on its own (a store's all-new fast path must
    fall back to deciding each one)."""
    with _Handles(opener) as h:
        s = h()
        t = _tier(s)
        e1, e2 = _draw("traj-a", 1), _intent("traj-a", 2)
        s.append(e1, t)
        e3 = _result("traj-a", 3)
        out = s.append_batch([e1, e2, _intent("traj-a", 3, op="b", event_id=e2.event_id), e3], t)
        _expect(s, not isinstance(out[0], Exception) and out[0].duplicate, f"the retry of #1 gave {out[0]!r}")
        _expect(s, not isinstance(out[1], Exception) and not out[1].duplicate, f"the new #2 gave {out[1]!r}")
        _expect(s, isinstance(out[2], ConflictingDuplicateError), f"the id repeated in the batch gave {out[2]!r}")
        _expect(s, not isinstance(out[3], Exception) and out[3].sequence_number == 3, f"the new #3 gave {out[3]!r}")
        _expect(s, _bytes(s, "traj-a") == [e1.canonical, e2.canonical, e3.canonical], "the stored events differ")


@_check()
def non_event_batch_members_are_refused_up_front(opener: Opener, caps: StoreCapabilities) -> None:
    """A batch member that is not an Event is StoreError before anything of the batch is
    appended (and its attributes are never touched); the store stays usable."""
    class Boom:
        @property
        def trajectory_id(self):
            raise KeyboardInterrupt("a batch member's attributes must not be read")

    with _Handles(opener) as h:
        s = h()
        t = _tier(s)
        s.append(_draw("traj-a", 1), t)
        for bad in ({"a": 1}, Boom(), None, _draw("traj-a", 2).canonical):
            _raises(s, StoreError, lambda b=bad: s.append_batch([_draw("traj-a", 2), b], t),
                    f"a batch with a {type(bad).__name__} member", match="Event")
        _expect(s, s.append_batch([], t) == [], "an empty batch did not return []")
        _expect(s, s.head("traj-a") == 1, "part of a refused batch was appended")
        _expect(s, s.append(_draw("traj-a", 2), t).sequence_number == 2, "the store is unusable after a refused batch")


RANGES = [(1, None), (1, 3), (2, 4), (-5, 2), (0, 0), (3, 1), (1, -1), (4, 4), (5, 9), (9, None), (2, 2**70)]


@_check()
def read_ranges_mean_the_same_in_every_store(opener: Opener, caps: StoreCapabilities) -> None:
    """read(start, stop) is inclusive; start < 1 reads from 1, stop=None to the head, stop <
    start nothing; non-int bounds are StoreError."""
    with _Handles(opener) as h:
        s = h()
        s.append_batch([_draw("traj-a", i) for i in range(1, 5)], _tier(s))
        for start, stop in RANGES:
            lo, hi = max(start, 1), 4 if stop is None else min(stop, 4)
            got = [e.sequence_number for e in s.read("traj-a", start, stop)]
            _expect(s, got == list(range(lo, hi + 1)), f"read(start={start}, stop={stop}) gave {got}")
        _expect(s, list(s.read("traj-none")) == [] and s.head("traj-none") == 0, "an unknown trajectory is not empty")
        for bad in ((1.5, None), (1, "3"), ("1", None)):
            _raises(s, StoreError, lambda b=bad: s.read("traj-a", *b), f"read{bad}")


@_check()
def trajectories_are_independent_and_listed_sorted(opener: Opener, caps: StoreCapabilities) -> None:
    """Trajectories have their own sequences and fences (ids with '/' included), and
    trajectories() lists those with events, sorted."""
    with _Handles(opener) as h:
        s = h()
        t = _tier(s)
        ids = ["traj-b", "traj-a", "traj-a/e/1"]
        for n, tid in enumerate(ids, start=1):
            s.append_batch([_draw(tid, i) for i in range(1, n + 1)], t)
        s.install_fence("traj-c", 3)                           # a fence alone is not a trajectory with events
        _expect(s, s.trajectories() == sorted(ids), f"trajectories() is {s.trajectories()}, not {sorted(ids)}")
        _expect(s, [s.head(x) for x in ids] == [1, 2, 3], f"heads {[s.head(x) for x in ids]}, not [1, 2, 3]")
        _expect(s, [s.fence(x) for x in ids] == [0, 0, 0] and s.fence("traj-c") == 3, "fences leak across trajectories")
        _expect(s, [e.trajectory_id for e in s.read("traj-a")] == ["traj-a", "traj-a"], "read returned another "
                "trajectory's events")


@_check()
def install_fence_arguments_are_checked(opener: Opener, caps: StoreCapabilities) -> None:
    """install_fence takes a non-empty trajectory id and an int 0 <= owner_epoch < 2**63 (bool
    excluded), else StoreError changing nothing; 2**63 - 1 is kept (and survives a reopen)."""
    with _Handles(opener) as h:
        s = h()
        s.install_fence("traj-a", 5)
        for tid, epoch in (("traj-a", 7.5), ("traj-a", True), ("traj-a", "9"), ("traj-a", None), ("new", -1),
                           ("big", 2**63), ("big", 2**64), ("", 6), (None, 6), (3, 6)):
            err = _raises(s, StoreError, lambda a=tid, b=epoch: s.install_fence(a, b),
                          f"install_fence({tid!r}, {epoch!r})")
            _expect(s, "owner_epoch" in str(err) or "trajectory" in str(err), f"the refusal does not say why: {err}")
        _expect(s, s.fence("traj-a") == 5 and s.fence("big") == 0, "a refused install_fence changed a fence")
        s.install_fence("big", MAX_OWNER_EPOCH)
        _expect(s, s.fence("big") == MAX_OWNER_EPOCH, f"fence is {s.fence('big')}, not 2**63 - 1")
        if caps.reopen:
            s.close()
            _expect(s, h().fence("big") == MAX_OWNER_EPOCH, "the fence 2**63 - 1 did not survive a reopen")


# --- claiming an epoch (§11.5.1: no two owners with one epoch) --------------------------------------


@_check(needs=("claim_epoch",))
def claim_epoch_installs_a_strictly_newer_epoch(opener: Opener, caps: StoreCapabilities) -> None:
    """claim_epoch() installs fence + 1; a given epoch only if strictly newer (unlike
    install_fence, which accepts the current one); bad arguments are StoreError changing nothing."""
    with _Handles(opener) as h:
        s = h()
        _expect(s, s.claim_epoch("traj-a") == 1 and s.fence("traj-a") == 1, "the first claim is not epoch 1")
        _expect(s, s.claim_epoch("traj-a") == 2, "the second claim is not epoch 2")
        s.install_fence("traj-a", 2)
        _raises(s, StaleOwnerError, lambda: s.claim_epoch("traj-a", 2), "claim_epoch(2) at fence 2",
                match="owner_epoch=2")
        _raises(s, StaleOwnerError, lambda: s.claim_epoch("traj-a", 1), "claim_epoch(1) at fence 2")
        _expect(s, s.claim_epoch("traj-a", 7) == 7 and s.fence("traj-a") == 7, "claim_epoch(7) did not install 7")
        for tid, epoch in (("", None), (None, None), ("traj-a", 0), ("traj-a", True), ("traj-a", 2**63),
                           ("traj-a", 8.0)):
            _raises(s, StoreError, lambda a=tid, b=epoch: s.claim_epoch(a, b), f"claim_epoch({tid!r}, {epoch!r})")
        _expect(s, s.fence("traj-a") == 7, "a refused claim changed the fence")
        _raises(s, StaleOwnerError, lambda: s.append(_draw("traj-a", 1, epoch=6), _tier(s)),
                "an epoch-6 append at fence 7")
        _expect(s, s.claim_epoch("traj-b") == 1, "claims are not per trajectory")


@_check(unless=("claim_epoch",))
def a_store_without_atomic_claims_says_so(opener: Opener, caps: StoreCapabilities) -> None:
    """A store that cannot claim an epoch atomically raises StoreError and changes no fence."""
    with _Handles(opener) as h:
        s = h()
        _raises(s, StoreError, lambda: s.claim_epoch("traj-a"), "claim_epoch on a store without atomic claims")
        _expect(s, s.fence("traj-a") == 0, "a refused claim changed the fence")


@_check(needs=("claim_epoch",))
def two_claimants_never_share_an_epoch(opener: Opener, caps: StoreCapabilities) -> None:
    """Two replacement workers claim at the same moment. Each handle's fence() is instrumented
    so a claim going through it reads the fence together with the other before either installs
    (the interleaving that gave both owner_epoch=1); the epochs must differ and the older owner's
    append is fenced. With concurrent_handles the claimants hold two handles, else one shared."""
    with _Handles(opener) as h:
        first = h()
        handles = [first, h()] if caps.concurrent_handles else [first, first]
        barrier = threading.Barrier(2)

        def instrument(store: LogStore) -> None:
            read = store.fence

            def fence(tid: str) -> int:
                value = read(tid)
                try:
                    barrier.wait(1.0)        # wait for the other claimant to have read it too
                except threading.BrokenBarrierError:
                    pass
                return value
            store.fence = fence

        for store in {id(x): x for x in handles}.values():
            instrument(store)
        got: dict[int, int] = {}
        errors: list[BaseException] = []

        def claim(i: int) -> None:
            try:
                got[i] = handles[i].claim_epoch("traj-a")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        _expect(first, not errors, f"a claimant failed: {errors!r}")
        _expect(first, sorted(got.values()) == [1, 2], f"the two claimants got epochs {sorted(got.values())}")
        loser = min(got, key=got.get)
        _raises(first, StaleOwnerError,
                lambda: handles[loser].append(_draw("traj-a", 1, epoch=got[loser]), _tier(first)),
                f"the append of the claimant holding epoch {got[loser]}")
        handles[1 - loser].append(_draw("traj-a", 1, epoch=got[1 - loser]), _tier(first))


def _claim_in_another_process(opener: Opener, trajectory_id: str, n: int, barrier, results) -> None:
    """Child process of :func:`claims_from_several_processes_hand_out_each_epoch_once`."""
    try:
        store = opener()
        try:
            barrier.wait(120)          # every process has its handle: claim together
            results.put(("ok", [store.claim_epoch(trajectory_id) for _ in range(n)]))
        finally:
            store.close()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        results.put(("error", f"{type(exc).__name__}: {exc}"))


@_check(needs=("claim_epoch", "multi_process", "reopen"))
def claims_from_several_processes_hand_out_each_epoch_once(opener: Opener, caps: StoreCapabilities) -> None:
    """Three processes (spawned, each with its own handle) claim 15 epochs each on one log at
    once: the 45 epochs are exactly 1..45, none twice, and the fence is 45 afterwards. (The
    processes are started with ``spawn``: a script running this check guards its entry point
    with ``if __name__ == "__main__":``.)"""
    procs, per_proc = 3, 15
    try:
        pickle.dumps(opener)
    except Exception as exc:  # noqa: BLE001 - any pickling failure
        raise AssertionError(f"store {caps.kind!r} declares multi_process, but its opener cannot be pickled: "
                             f"{exc}") from exc
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    children = [ctx.Process(target=_claim_in_another_process, args=(opener, "traj-a", per_proc, barrier, results),
                            daemon=True) for _ in range(procs)]
    claimed: list[int] = []
    problems: list[str] = []
    try:
        for c in children:
            c.start()
        for _ in children:
            try:
                status, value = results.get(timeout=240)
            except Exception:  # noqa: BLE001 - queue.Empty
                problems.append("a claiming process sent no result within 240 s")
                break
            if status == "ok":
                claimed += value
            else:
                problems.append(value)
    finally:
        for c in children:
            if c.pid is None:          # never started (start() raised)
                continue
            c.join(30)
            if c.is_alive():
                c.kill()
                c.join(10)
        results.close()
    with _Handles(opener) as h:
        s = h()
        _expect(s, not problems, f"claiming processes failed: {problems}")
        _expect(s, sorted(claimed) == list(range(1, procs * per_proc + 1)),
                f"the processes claimed {sorted(claimed)}: an epoch was handed out twice or skipped")
        _expect(s, s.fence("traj-a") == procs * per_proc, f"the fence is {s.fence('traj-a')} after the claims")


# --- durability, read-only opening, close --------------------------------------------------------------


@_check(needs=("reopen",))
def everything_survives_close_and_reopen(opener: Opener, caps: StoreCapabilities) -> None:
    """After close, a new handle reads every acknowledged event byte for byte, the fence and the
    trajectory list, and still fences an older owner."""
    with _Handles(opener) as h:
        s = h()
        events = [_draw("traj-a", 1), _intent("traj-a", 2), _result("traj-a", 3)]
        s.append_batch(events, _tier(s))
        s.install_fence("traj-a", 4)
        s.close()
        s2 = h()
        _expect(s2, _bytes(s2, "traj-a") == [e.canonical for e in events], "the events read back differ after reopen")
        _expect(s2, s2.head("traj-a") == 3 and s2.fence("traj-a") == 4 and s2.trajectories() == ["traj-a"],
                f"after reopen head {s2.head('traj-a')}, fence {s2.fence('traj-a')}, trajectories {s2.trajectories()}")
        _raises(s2, StaleOwnerError, lambda: s2.append(_draw("traj-a", 4, epoch=3), _tier(s2)),
                "an epoch-3 append after reopening at fence 4")
        _expect(s2, s2.append(_draw("traj-a", 4, epoch=4), _tier(s2)).sequence_number == 4,
                "appends do not continue after reopen")


@_check(needs=("read_only_open", "reopen"))
def a_read_only_handle_reads_everything_and_refuses_writes(opener: Opener, caps: StoreCapabilities) -> None:
    """A read-only handle reads the same events, heads and fences, says it is read-only, and
    refuses appends, fences, claims and compaction with StoreReadOnlyError."""
    with _Handles(opener) as h:
        s = h()
        events = [_draw("traj-a", 1), _intent("traj-a", 2)]
        s.append_batch(events, _tier(s))
        s.install_fence("traj-a", 3)
        s.close()
        ro = h(read_only=True)
        _expect(ro, ro.read_only and ro.recovery.read_only, "the handle does not say it is read-only")
        _expect(ro, _bytes(ro, "traj-a") == [e.canonical for e in events] and ro.head("traj-a") == 2
                and ro.fence("traj-a") == 3 and ro.trajectories() == ["traj-a"], "the read-only handle reads otherwise")
        t = _tier(ro)
        _raises(ro, StoreReadOnlyError, lambda: ro.append(_draw("traj-a", 3, epoch=3), t),
                "append on a read-only handle")
        _raises(ro, StoreReadOnlyError, lambda: ro.append_batch([_draw("traj-b", 1)], t), "append_batch read-only")
        _raises(ro, StoreReadOnlyError, lambda: ro.install_fence("traj-a", 9), "install_fence read-only")
        if caps.claim_epoch:
            _raises(ro, StoreReadOnlyError, lambda: ro.claim_epoch("traj-a"), "claim_epoch read-only")
        if caps.retire_prefix:
            _raises(ro, StoreReadOnlyError, lambda: ro.retire_prefix("traj-a", 1, checkpoint_event_id="ck"),
                    "retire_prefix read-only")
        _expect(ro, ro.head("traj-a") == 2 and ro.fence("traj-a") == 3 and ro.trajectories() == ["traj-a"],
                "a refused write changed the log")
        ro.close()
        _expect(ro, h().fence("traj-a") == 3, "the fence changed behind a read-only handle")


@_check(needs=("claim_epoch", "reopen", "read_only_open"))
def claim_epoch_is_durable_and_refused_read_only(opener: Opener, caps: StoreCapabilities) -> None:
    """A claimed epoch survives a reopen (read-only and read-write), and the next claim builds on it."""
    with _Handles(opener) as h:
        s = h()
        _expect(s, s.claim_epoch("traj-a") == 1, "the first claim is not epoch 1")
        s.close()
        ro = h(read_only=True)
        _expect(ro, ro.fence("traj-a") == 1, f"read-only, the fence is {ro.fence('traj-a')}, not the claimed 1")
        _raises(ro, StoreReadOnlyError, lambda: ro.claim_epoch("traj-a"), "claim_epoch on a read-only handle")
        ro.close()
        _expect(ro, h().claim_epoch("traj-a") == 2, "the claim after reopening is not epoch 2")


@_check()
def every_operation_after_close_raises_store_closed(opener: Opener, caps: StoreCapabilities) -> None:
    """close() is idempotent; afterwards every method but close raises StoreClosedError."""
    with _Handles(opener) as h:
        s = h()
        t = _tier(s)
        s.append(_draw("traj-a", 1), t)
        s.close()
        s.close()
        calls = {"head": lambda: s.head("traj-a"), "fence": lambda: s.fence("traj-a"), "trajectories": s.trajectories,
                 "read": lambda: s.read("traj-a"), "append": lambda: s.append(_draw("traj-a", 2), t),
                 "install_fence": lambda: s.install_fence("traj-a", 1)}
        if caps.claim_epoch:
            calls["claim_epoch"] = lambda: s.claim_epoch("traj-a")
        if caps.retire_prefix:
            calls["retired_through"] = lambda: s.retired_through("traj-a")
        for name, call in calls.items():
            _raises(s, StoreClosedError, call, f"{name}() after close")


# --- log compaction (§11.8.3) -----------------------------------------------------------------------


@_check(needs=("retire_prefix",))
def retire_prefix_keeps_the_suffix_head_fence_and_ids(opener: Opener, caps: StoreCapabilities) -> None:
    """retire_prefix(t, p) removes events 1..p and keeps the suffix, head, fence and event ids:
    reads of the prefix raise PrefixRetiredError naming the mark and checkpoint, an identical late
    retry is still a duplicate, a conflicting one still refused; retiring at or below the mark is
    a no-op; bad arguments are StoreError; the mark survives a reopen."""
    with _Handles(opener) as h:
        s = h()
        t = _tier(s)
        events = [_draw("traj-a", i, value=i) for i in range(1, 6)]
        s.append_batch(events, t)
        s.install_fence("traj-a", 3)
        s.append(_draw("traj-b", 1), t)
        _expect(s, s.retired_through("traj-a") == 0, "a fresh trajectory has a retired prefix")
        _expect(s, s.retire_prefix("traj-a", 2, checkpoint_event_id="ck-3") == 2, "retire_prefix(2) did not return 2")

        def check_retired(x: LogStore) -> None:
            _expect(x, x.retired_through("traj-a") == 2, f"retired_through is {x.retired_through('traj-a')}, not 2")
            err = _raises(x, PrefixRetiredError, lambda: x.read("traj-a"), "a read from #1 after retiring #1..#2")
            _expect(x, (err.retired_through, err.checkpoint_event_id) == (2, "ck-3"),
                    f"PrefixRetiredError names {err.retired_through}/{err.checkpoint_event_id!r}, not 2/'ck-3'")
            _raises(x, PrefixRetiredError, lambda: x.read("traj-a", 2, 4), "a read from #2 after retiring #1..#2")
            _expect(x, _bytes(x, "traj-a", 3) == [e.canonical for e in events[2:]], "the retained suffix changed")
            _expect(x, x.head("traj-a") == len(events) and x.fence("traj-a") == 3, "head or fence changed by retiring")
            _expect(x, x.retired_through("traj-b") == 0 and _bytes(x, "traj-b") == [_draw("traj-b", 1).canonical],
                    "retiring one trajectory touched another")

        check_retired(s)
        again = s.append(events[0], t)
        _expect(s, again.duplicate and again.sequence_number == 1, f"a late identical retry of #1 gave {again}")
        _raises(s, ConflictingDuplicateError, lambda: s.append(_draw("traj-a", 6, event_id=events[0].event_id), t),
                "another event under a retired event id")
        _expect(s, s.retire_prefix("traj-a", 1, checkpoint_event_id="ck-old") == 2, "retiring below the mark moved it")
        for through, ck in ((5, "ck"), (9, "ck"), (-1, "ck"), (True, "ck"), ("3", "ck"), (3, ""), (3, None)):
            _raises(s, StoreError, lambda a=through, b=ck: s.retire_prefix("traj-a", a, checkpoint_event_id=b),
                    f"retire_prefix(through={through!r}, checkpoint_event_id={ck!r})")
        check_retired(s)
        events.append(_draw("traj-a", 6, epoch=3))
        _expect(s, s.append(events[-1], t).sequence_number == 6, "appends stop after compaction")
        if caps.reopen:
            s.close()
            check_retired(h())


@_check(unless=("retire_prefix",))
def a_store_that_cannot_compact_says_so(opener: Opener, caps: StoreCapabilities) -> None:
    """A store without log compaction raises StoreError from retire_prefix, reports no retired
    prefix and keeps every event."""
    with _Handles(opener) as h:
        s = h()
        events = [_draw("traj-a", i) for i in range(1, 4)]
        s.append_batch(events, _tier(s))
        _raises(s, StoreError, lambda: s.retire_prefix("traj-a", 1, checkpoint_event_id="ck"), "retire_prefix")
        _expect(s, s.retired_through("traj-a") == 0, "retired_through is not 0 on a store that cannot compact")
        _expect(s, _bytes(s, "traj-a") == [e.canonical for e in events], "a refused retire_prefix lost events")


# --- a model of the contract -----------------------------------------------------------------------------


@_check()
def the_contract_matches_a_model_under_random_operations(opener: Opener, caps: StoreCapabilities) -> None:
    """A seeded random walk of appends, identical retries, conflicting duplicates, stale owners,
    gaps and fences on two trajectories, checked against a plain model after every step."""
    rng = random.Random(20251201)
    with _Handles(opener) as h:
        s = h()
        t = _tier(s)
        model: dict[str, list[Event]] = {"a": [], "b": []}
        fences = {"a": 0, "b": 0}
        n = 0
        for step in range(60):
            tid = rng.choice("ab")
            action = rng.choice(["append", "append", "retry", "conflict", "stale", "fence", "gap"])
            n += 1
            fresh = _draw(tid, len(model[tid]) + 1, epoch=fences[tid] + rng.randint(0, 1), event_id=f"id{n}", value=n)
            where = f"step {step} ({action} on {tid})"
            if action == "append":
                s.append(fresh, t)
                model[tid].append(fresh)
                fences[tid] = max(fences[tid], fresh.owner_epoch)
            elif action == "retry" and model[tid]:
                _expect(s, s.append(rng.choice(model[tid]), t).duplicate, f"{where}: the retry was not a duplicate")
            elif action == "conflict" and model[tid]:
                old = rng.choice(model[tid])
                bad = _draw(tid, old.sequence_number, epoch=old.owner_epoch, event_id=old.event_id, value=-1)
                _raises(s, ConflictingDuplicateError, lambda b=bad: s.append(b, t), where)
            elif action == "stale" and fences[tid] > 0:
                stale = _draw(tid, len(model[tid]) + 1, epoch=fences[tid] - 1, event_id=f"id{n}")
                _raises(s, StaleOwnerError, lambda b=stale: s.append(b, t), where)
            elif action == "fence":
                fences[tid] += 1
                s.install_fence(tid, fences[tid])
            elif action == "gap":
                gap = _draw(tid, len(model[tid]) + rng.randint(2, 4), epoch=fences[tid], event_id=f"id{n}")
                _raises(s, SequenceGapError, lambda b=gap: s.append(b, t), where)
            for x, evs in model.items():
                _expect(s, _bytes(s, x) == [e.canonical for e in evs],
                        f"{where}: trajectory {x} differs from the model")
                _expect(s, s.head(x) == len(evs) and s.fence(x) == fences[x],
                        f"{where}: {x} has head {s.head(x)}/fence {s.fence(x)}, the model {len(evs)}/{fences[x]}")
