"""Two-phase commit across tool services, run to show what it costs (Failure Recovery, "Fallacies
and Pitfalls": the fallacy that distributed transactions across agent tools can be governed by 2PC;
"The Transactional Boundary Collapse").

The project's tool services (:mod:`kernel_lib.sim.services`) have no prepare phase; that is the
chapter's point, and :func:`prepare_hooks` computes it from their declared contracts. To run 2PC at
all, this module gives two of them one: :class:`PreparableService` wraps the same
:class:`~kernel_lib.sim.services.ServiceLogic` (so an effect, once committed, is an ordinary
resource in the service's audit) with the participant side of the protocol:

* ``prepare(txid, action, arguments)``: vote. A yes vote takes an **exclusive lock** on the row the
  action would touch (:data:`LOCK_ARGUMENTS`: the ``account`` of a payment hold, the ``region``
  pool of an IP reservation) and records the transaction as ``prepared`` durably (in the state
  dict, which the live participant commits to SQLite before it answers). A row locked by another
  transaction gets a no vote.
* ``commit(txid)`` applies the action through the service logic and releases the lock;
  ``abort(txid)`` releases it without an effect. Both are idempotent; an unknown txid is aborted
  (presumed abort: a late prepare of it is then refused).
* ``call(...)``: an ordinary request from any other client. One that touches a locked row is
  refused with ``423`` ``locked_by_prepared_transaction`` and **counted by the participant**
  (``blocked``, per action, with a log of when and for which transaction).
* ``terminate(txid, peers)``: the cooperative termination protocol. A prepared participant asks
  its peers: one that committed means commit, one that never voted yes means abort; when every
  peer it reaches is prepared too (or none answers) it cannot decide and stays blocked.
* ``resolve(txid, decision, operator)``: the manual intervention (a heuristic decision), counted
  apart from the coordinator's decisions.

:class:`TwoPhaseCoordinator` runs the protocol against any participants with that interface (the
twins here, the live processes of :mod:`kernel_lib.live.two_phase`): log BEGIN, prepare each
branch (a model turn of ``turn_s`` between protocol messages: in an agent each message is a tool
call), log the decision before any phase-2 message, deliver it, log END. ``cut`` stops it at a
chosen point (``after_prepare``: every branch voted yes and no decision exists; ``after_decision``:
COMMIT is logged and nothing was delivered; ``after_first_commit``: the first branch committed and
the rest did not hear). :meth:`TwoPhaseCoordinator.recover` is a restarted coordinator reading its
log: no decision means abort (presumed abort), a logged decision is delivered again.

:func:`run_two_phase` is the whole scenario on a virtual clock: two participants (``payments``
and ``egress_ip``), the coordinator, other clients that want the same rows every
``client_every_s`` seconds, the cut, an attempt at cooperative termination, and an operator who
intervenes ``intervene_after_s`` seconds after the cut. Everything returned is counted by the
participants. Deterministic; no process or socket.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kernel_lib._support.clock import ManualClock
from kernel_lib.errors import ConfigError, ServiceError
from kernel_lib.sim.services import ACTIONS, ServiceLogic

__all__ = ["LOCK_ARGUMENTS", "CUT_POINTS", "DECISIONS", "LOCKED", "PreparableService", "Participant", "Branch",
           "TwoPhaseCoordinator", "TwoPhaseRun", "run_two_phase", "prepare_hooks", "probe_prepare",
           "TWO_PHASE_VERBS", "default_branches", "SagaSameWork", "run_saga_same_work"]

#: Which argument of an action names the row a prepared transaction locks.
LOCK_ARGUMENTS: dict[str, str] = {"place_hold": "account", "reserve_ip": "region", "publish_dns": "name",
                                  "create_branch": "repo", "provision_sandbox": "image"}
#: Where :class:`TwoPhaseCoordinator` can be cut off (module docstring).
CUT_POINTS = ("after_prepare", "after_decision", "after_first_commit")
#: The decisions a transaction can end with.
DECISIONS = ("commit", "abort")
#: The HTTP status of a request refused because a prepared transaction holds its row (RFC 4918's Locked).
LOCKED = 423
#: The verbs a participant of two-phase commit must offer (X/Open XA's xa_prepare, xa_commit, xa_rollback).
TWO_PHASE_VERBS = ("prepare", "commit", "abort")


def _xa_state() -> dict[str, Any]:
    return {"transactions": {}, "locks": {}, "blocked": {}, "blocked_log": [], "heuristic": 0,
            "votes": {"yes": 0, "no": 0}, "decisions": {"commit": 0, "abort": 0}}


class PreparableService:
    """One tool service with a prepare phase it does not have in this project (module docstring).

    Args:
        name: the service (one of :data:`~kernel_lib.sim.services.SERVICES`).
        clock: seconds as a float (a :class:`~kernel_lib._support.clock.ManualClock` in the sim, the
            wall clock in the live participant).
        state: the JSON-able state to continue from (the live participant's committed document);
            a new service starts empty.

    Every method returns ``(http_status, body)`` like a service answer; ``body`` is JSON data.
    Times in the state (``prepared_s``, ``decided_s``, ``t_s`` of a blocked request) are readings
    of ``clock``. Raises ServiceError for an unknown service name.
    """

    def __init__(self, name: str, *, clock: Callable[[], float], state: dict[str, Any] | None = None):
        self.logic = ServiceLogic(name, state=state)
        self.clock = clock
        self.state = self.logic.state
        self.state.setdefault("xa", _xa_state())

    @property
    def name(self) -> str:
        return self.logic.name

    @property
    def xa(self) -> dict[str, Any]:
        return self.state["xa"]

    def _bump(self, table: str, key: str) -> None:
        self.state[table][key] = self.state[table].get(key, 0) + 1

    # --- the participant's side of the protocol -------------------------------------------------------
    def prepare(self, txid: str, action: str, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Phase one: vote on ``action(arguments)`` under transaction ``txid``. Yes (200,
        ``{"vote": "yes", "lock_key"}``): the row is locked and the transaction ``prepared``; no
        (409 when another transaction holds the row, or the transaction was already aborted;
        422 for an action this service does not offer or cannot lock). A repeated prepare of a
        prepared transaction answers yes again."""
        self._bump("received", "xa.prepare")
        if not isinstance(txid, str) or not txid:
            return 422, {"vote": "no", "error": "txid must be a non-empty string"}
        tx = self.xa["transactions"].get(txid)
        if tx is not None:
            if tx["state"] == "prepared":
                return 200, {"vote": "yes", "lock_key": tx["lock_key"], "repeat": True}
            return 409, {"vote": "no", "error": f"transaction {txid} is already {tx['state']}"}
        a = ACTIONS.get(action)
        lock_arg = LOCK_ARGUMENTS.get(action)
        if a is None or a.service != self.name or lock_arg is None or not isinstance(arguments, dict) \
                or not isinstance(arguments.get(lock_arg), str):
            self.xa["votes"]["no"] += 1
            offered = sorted(k for k in LOCK_ARGUMENTS if ACTIONS[k].service == self.name)
            return 422, {"vote": "no", "error": f"{self.name} cannot prepare {action!r} (it can prepare {offered})"}
        key = f"{lock_arg}={arguments[lock_arg]}"
        holder = self.xa["locks"].get(key)
        if holder is not None:
            self.xa["votes"]["no"] += 1
            return 409, {"vote": "no", "error": f"row {key} is locked by prepared transaction {holder}",
                         "holder": holder}
        self.xa["locks"][key] = txid
        self.xa["transactions"][txid] = {"state": "prepared", "action": action, "arguments": copy.deepcopy(arguments),
                                         "lock_key": key, "prepared_s": self.clock(), "decided_s": None,
                                         "decided_by": None, "output": None}
        self.xa["votes"]["yes"] += 1
        return 200, {"vote": "yes", "lock_key": key}

    def _decide(self, txid: str, decision: str, by: str) -> tuple[int, dict[str, Any]]:
        tx = self.xa["transactions"].get(txid)
        if tx is None:   # presumed abort: nothing prepared; remember the abort so a late prepare is refused
            if decision == "commit":
                return 404, {"error": f"no prepared transaction {txid}", "state": "unknown"}
            self.xa["transactions"][txid] = {"state": "aborted", "action": None, "arguments": None, "lock_key": None,
                                             "prepared_s": None, "decided_s": self.clock(), "decided_by": by,
                                             "output": None}
            return 200, {"state": "aborted", "presumed": True}
        want = "committed" if decision == "commit" else "aborted"
        if tx["state"] == want:
            return 200, {"state": want, "repeat": True, "output": tx.get("output")}
        if tx["state"] != "prepared":
            return 409, {"error": f"transaction {txid} is {tx['state']} (by {tx['decided_by']}); it cannot be "
                                  f"{want} now", "state": tx["state"], "decided_by": tx["decided_by"]}
        output = None
        if decision == "commit":
            status, body, _ = self.logic.call(tx["action"], tx["arguments"], txid, f"xa-{txid}", None)
            output = body
            if status >= 300:
                return status, {"error": f"commit of {txid} failed at the service: {body}", "state": "prepared"}
        self.xa["locks"].pop(tx["lock_key"], None)
        tx.update(state=want, decided_s=self.clock(), decided_by=by, output=output)
        self.xa["decisions"][decision] += 1
        return 200, {"state": want, "output": output}

    def commit(self, txid: str) -> tuple[int, dict[str, Any]]:
        """Phase two, commit: apply the prepared action, release the lock (200 ``{"state":
        "committed", "output"}``); 404 for a transaction never prepared, 409 for one already aborted."""
        self._bump("received", "xa.commit")
        return self._decide(txid, "commit", "coordinator")

    def abort(self, txid: str) -> tuple[int, dict[str, Any]]:
        """Phase two, abort: release the lock without an effect (200); 409 for one already committed."""
        self._bump("received", "xa.abort")
        return self._decide(txid, "abort", "coordinator")

    def status(self, txid: str) -> tuple[int, dict[str, Any]]:
        """``{"txid", "state": prepared|committed|aborted|unknown, "lock_key", "held_s", "decided_by",
        "prepared_s", "decided_s"}`` (``held_s``: how long the lock has been held, for a prepared
        transaction; the two times are readings of the participant's clock)."""
        tx = self.xa["transactions"].get(txid)
        if tx is None:
            return 200, {"txid": txid, "state": "unknown"}
        held = self.clock() - tx["prepared_s"] if tx["state"] == "prepared" else None
        return 200, {"txid": txid, "state": tx["state"], "lock_key": tx["lock_key"], "held_s": held,
                     "decided_by": tx["decided_by"], "prepared_s": tx["prepared_s"], "decided_s": tx["decided_s"]}

    def resolve(self, txid: str, decision: str, operator: str) -> tuple[int, dict[str, Any]]:
        """The manual intervention: an operator decides ``decision`` (``commit`` or ``abort``) for a
        prepared transaction without the coordinator (a heuristic decision, counted in
        ``heuristic``). 422 for a bad decision or operator name; otherwise as commit/abort."""
        if decision not in DECISIONS or not isinstance(operator, str) or not operator:
            return 422, {"error": f"decision must be one of {DECISIONS} and operator a name"}
        self._bump("received", "xa.resolve")
        status, body = self._decide(txid, decision, f"operator:{operator}")
        if status == 200 and not body.get("repeat") and not body.get("presumed"):
            self.xa["heuristic"] += 1
        return status, body

    def terminate(self, txid: str, peers: Mapping[str, Callable[[str], dict[str, Any]] | None]
                  ) -> dict[str, Any]:
        """The cooperative termination protocol for a prepared ``txid``: ask each peer's status
        (``peers[name](txid)`` returns ``{"state"}``; None or a raised ``OSError``: unreachable).
        A peer that committed means commit; one that is ``unknown`` or ``aborted`` never voted yes
        (or heard abort), so abort is safe; otherwise the participant cannot decide. Applies the
        decision it reaches. Returns ``{"decision": commit|abort|None, "blocked": bool, "asked":
        {peer: state or "unreachable"}}``."""
        self._bump("received", "xa.terminate")
        tx = self.xa["transactions"].get(txid)
        if tx is None or tx["state"] != "prepared":
            return {"decision": None, "blocked": False, "asked": {}, "state": tx["state"] if tx else "unknown"}
        asked: dict[str, str] = {}
        decision = None
        for name, ask in peers.items():
            try:
                state = ask(txid)["state"] if ask is not None else "unreachable"
            except OSError:
                state = "unreachable"
            asked[name] = state
            if state == "committed":
                decision = "commit"
            elif state in ("aborted", "unknown") and decision is None:
                decision = "abort"
        if decision is not None:
            self._decide(txid, decision, "termination protocol")
        return {"decision": decision, "blocked": decision is None, "asked": asked}

    # --- everybody else ---------------------------------------------------------------------------------
    def call(self, action: str, arguments: dict[str, Any], operation_id: str,
             idempotency_key: str | None = None) -> tuple[int, dict[str, Any]]:
        """An ordinary request of another client. Refused with :data:`LOCKED` (``reason:
        locked_by_prepared_transaction``, the holder and how long it has held the row) and counted
        in ``blocked`` when a prepared transaction holds its row; otherwise served by the service
        logic (no lease check)."""
        lock_arg = LOCK_ARGUMENTS.get(action)
        if lock_arg is not None and isinstance(arguments, dict):
            key = f"{lock_arg}={arguments.get(lock_arg)}"
            holder = self.xa["locks"].get(key)
            if holder is not None:
                self._bump("received", action)
                self.xa["blocked"][action] = self.xa["blocked"].get(action, 0) + 1
                held = self.clock() - self.xa["transactions"][holder]["prepared_s"]
                self.xa["blocked_log"].append({"t_s": self.clock(), "action": action, "lock_key": key,
                                               "holder": holder, "operation_id": operation_id})
                return LOCKED, {"error": f"row {key} is locked by prepared transaction {holder} (held {held:.3f} s)",
                                "reason": "locked_by_prepared_transaction", "holder": holder, "held_s": held,
                                "retryable": True}
        status, body, _ = self.logic.call(action, arguments, operation_id, idempotency_key, None)
        return status, body

    # --- what the participant counts ---------------------------------------------------------------------
    def counts(self) -> dict[str, Any]:
        """``{"received": {action or xa verb: n}, "applied": {action: n}, "blocked": {action: n},
        "votes": {"yes", "no"}, "decisions": {"commit", "abort"}, "heuristic": n, "locks_held": n}``."""
        c = self.logic.counts()
        return {"received": c["received"], "applied": c["applied"], "blocked": dict(self.xa["blocked"]),
                "votes": dict(self.xa["votes"]), "decisions": dict(self.xa["decisions"]),
                "heuristic": self.xa["heuristic"], "locks_held": len(self.xa["locks"])}

    def locks(self) -> dict[str, dict[str, Any]]:
        """``{lock_key: {"txid", "held_s"}}``: the rows locked now."""
        now = self.clock()
        return {k: {"txid": t, "held_s": now - self.xa["transactions"][t]["prepared_s"]}
                for k, t in self.xa["locks"].items()}

    def transactions(self) -> dict[str, dict[str, Any]]:
        """Every transaction this participant heard of, as recorded (a copy)."""
        return copy.deepcopy(self.xa["transactions"])

    def blocked_log(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.xa["blocked_log"])

    def resources(self) -> dict[str, dict[str, Any]]:
        """What the service holds (live resources), as :meth:`ServiceLogic.resources`."""
        return self.logic.resources()


class Participant(Protocol):
    """What :class:`TwoPhaseCoordinator` needs of a participant (a :class:`PreparableService` or
    the live client of :mod:`kernel_lib.live.two_phase`); each returns ``(http_status, body)`` and
    raises ``OSError`` when the participant cannot be reached."""

    def prepare(self, txid: str, action: str, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]]: ...

    def commit(self, txid: str) -> tuple[int, dict[str, Any]]: ...

    def abort(self, txid: str) -> tuple[int, dict[str, Any]]: ...


@dataclass(frozen=True)
class Branch:
    """One branch of a distributed transaction: ``participant`` (a name the coordinator knows),
    ``action`` and ``arguments``."""

    participant: str
    action: str
    arguments: dict[str, Any]


def default_branches(account: str = "acct-7", region: str = "eu-west-1", amount_usd: float = 120.0) -> list[Branch]:
    """The two-service work of the demonstration: hold ``amount_usd`` on ``account`` at the
    payment processor and reserve an egress IP in ``region`` (a dedicated IP bought by card)."""
    return [Branch("payments", "place_hold", {"account": account, "amount_usd": amount_usd}),
            Branch("egress_ip", "reserve_ip", {"region": region})]


class TwoPhaseCoordinator:
    """The coordinator (module docstring).

    Args:
        participants: ``{name: participant}``.
        log: the coordinator's durable log, a list it appends records to (``{"record", "txid",
            ...}``; the live coordinator writes each to a file with fsync before going on). A
            restarted coordinator is a new object over the same list.
        wait: how a model turn passes between protocol messages (``ManualClock.advance`` in the sim).
        clock: seconds as a float (recorded in the log as ``t_s``).
        on_record: called with each log record right after it is appended (a timeline's hook).
    """

    def __init__(self, participants: Mapping[str, Any], log: list[dict[str, Any]], *,
                 wait: Callable[[float], Any] = lambda s: None, clock: Callable[[], float] = lambda: 0.0,
                 on_record: Callable[[dict[str, Any]], Any] = lambda entry: None):
        self.participants = dict(participants)
        self.log = log
        self.wait = wait
        self.clock = clock
        self.on_record = on_record

    def _append(self, record: str, txid: str, **fields: Any) -> dict[str, Any]:
        entry = {"record": record, "txid": txid, "t_s": self.clock(), **fields}
        self.log.append(entry)
        self.on_record(entry)
        return entry

    def run(self, txid: str, branches: Sequence[Branch], *, turn_s: float = 0.0, cut: str | None = None
            ) -> dict[str, Any]:
        """Run 2PC for ``branches`` as ``txid``; ``turn_s`` seconds (a model turn) pass before each
        protocol message after the first. ``cut``: stop there (one of :data:`CUT_POINTS`), as if
        the coordinator's process died or its network was severed. Returns ``{"txid", "state":
        committed|aborted|cut, "decision", "votes": {participant: vote}, "cut", "delivered":
        [participant, ...]}``.

        Raises ConfigError for an unknown cut point, an empty transaction, or a branch naming an
        unknown participant.
        """
        if cut is not None and cut not in CUT_POINTS:
            raise ConfigError(f"cut must be None or one of {CUT_POINTS}, got {cut!r}")
        if not branches:
            raise ConfigError("a transaction needs at least one branch")
        for b in branches:
            if b.participant not in self.participants:
                raise ConfigError(f"branch {b.action} names participant {b.participant!r}, which the coordinator "
                                  f"does not know ({sorted(self.participants)})")
        self._append("BEGIN", txid, branches=[dataclasses.asdict(b) for b in branches])
        votes: dict[str, str] = {}
        for i, b in enumerate(branches):
            if i:
                self.wait(turn_s)
            try:
                status, body = self.participants[b.participant].prepare(txid, b.action, b.arguments)
                vote = body.get("vote", "no") if status == 200 else "no"
            except OSError as exc:
                status, vote = None, "no"
                body = {"error": str(exc)}
            votes[b.participant] = vote
            self._append("VOTE", txid, participant=b.participant, vote=vote, http_status=status)
            if vote != "yes":
                break
        if cut == "after_prepare":
            return {"txid": txid, "state": "cut", "decision": None, "votes": votes, "cut": cut, "delivered": []}
        self.wait(turn_s)
        decision = "commit" if len(votes) == len(branches) and all(v == "yes" for v in votes.values()) else "abort"
        self._append("DECISION", txid, decision=decision)
        if cut == "after_decision":
            return {"txid": txid, "state": "cut", "decision": decision, "votes": votes, "cut": cut, "delivered": []}
        delivered = self._deliver(txid, decision, [b.participant for b in branches if votes.get(b.participant) == "yes"]
                                  if decision == "abort" else [b.participant for b in branches],
                                  stop_after_first=(cut == "after_first_commit"))
        if cut == "after_first_commit":
            return {"txid": txid, "state": "cut", "decision": decision, "votes": votes, "cut": cut,
                    "delivered": delivered}
        self._append("END", txid)
        return {"txid": txid, "state": "committed" if decision == "commit" else "aborted", "decision": decision,
                "votes": votes, "cut": None, "delivered": delivered}

    def _deliver(self, txid: str, decision: str, names: Sequence[str], *, stop_after_first: bool = False) -> list[str]:
        delivered = []
        for name in names:
            p = self.participants[name]
            try:
                status, body = (p.commit if decision == "commit" else p.abort)(txid)
            except OSError as exc:
                self._append("UNDELIVERED", txid, participant=name, decision=decision, error=str(exc))
                continue
            self._append("ACK", txid, participant=name, decision=decision, http_status=status,
                         state=body.get("state"))
            delivered.append(name)
            if stop_after_first:
                break
        return delivered

    def recover(self, txid: str) -> dict[str, Any]:
        """A restarted coordinator reads its log for ``txid``: no DECISION means abort (presumed
        abort: nobody can have been told commit), which it logs and delivers to every participant
        that voted; a logged decision is delivered again to every participant of the transaction.
        Returns ``{"txid", "decision", "presumed", "answers": {participant: (http_status, state)}}``.
        Raises ConfigError when the log holds no BEGIN for ``txid``."""
        mine = [e for e in self.log if e.get("txid") == txid]
        begin = next((e for e in mine if e["record"] == "BEGIN"), None)
        if begin is None:
            raise ConfigError(f"the coordinator's log holds no transaction {txid}")
        decided = next((e for e in mine if e["record"] == "DECISION"), None)
        presumed = decided is None
        decision = "abort" if presumed else decided["decision"]
        if presumed:
            self._append("DECISION", txid, decision="abort", presumed=True)
        names = list(dict.fromkeys(b["participant"] for b in begin["branches"]))
        answers: dict[str, Any] = {}
        for name in names:
            p = self.participants[name]
            try:
                status, body = (p.commit if decision == "commit" else p.abort)(txid)
                answers[name] = (status, body.get("state"))
                self._append("ACK", txid, participant=name, decision=decision, http_status=status,
                             state=body.get("state"))
            except OSError as exc:
                answers[name] = (None, f"unreachable: {exc}")
        self._append("END", txid, recovered=True)
        return {"txid": txid, "decision": decision, "presumed": presumed, "answers": answers}


# ------------------------------------------------------------------------------------------------
# the scenario on a virtual clock
# ------------------------------------------------------------------------------------------------


@dataclass
class TwoPhaseRun:
    """What :func:`run_two_phase` did, all counted by the participants.

    ``timeline``: one row per event ``{"t_s", "who", "what", "<participant>: row" ...,
    "requests refused so far (423, ...)"}`` (t in seconds of virtual time from the first prepare;
    each participant's lock state then, and the refused requests the participants had counted);
    ``coordinator``: its run's result; ``coordinator_log``: its log; ``termination``:
    the cooperative termination attempts; ``clients``: ``{participant: {"sent", "locked", "served"}}``
    as the clients saw the answers; ``counts``: each participant's :meth:`PreparableService.counts`;
    ``lock_held_s``: how long each participant held its row (from its own record: prepare to
    decision; None while still held at the end); ``transactions``: each participant's record of
    ``txid``; ``resources``: what each holds at the end; ``blocked_log``: each participant's log of
    refused requests.
    """

    config: dict[str, Any]
    timeline: list[dict[str, Any]]
    coordinator: dict[str, Any]
    coordinator_log: list[dict[str, Any]]
    termination: list[dict[str, Any]]
    clients: dict[str, dict[str, int]]
    counts: dict[str, dict[str, Any]]
    lock_held_s: dict[str, float | None]
    transactions: dict[str, dict[str, Any]]
    resources: dict[str, dict[str, Any]]
    blocked_log: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_seconds(name: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0) or value > 86_400:
        raise ConfigError(f"{name} must be a number of seconds in {'(0' if positive else '[0'}, 86400], got {value!r}")
    return float(value)


#: the most other-client requests one run may simulate per participant (about 5 s of simulation on
#: a 2-core machine): a ``client_every_s`` far below the protocol's own time scale would otherwise
#: simulate millions of requests that show nothing more
MAX_CLIENT_REQUESTS = 200_000


def _check_client_load(client_every_s: float, span_s: float) -> None:
    n = span_s / client_every_s
    if n > MAX_CLIENT_REQUESTS:
        raise ConfigError(f"client_every_s={client_every_s:g} s over a run of about {span_s:g} s would simulate "
                          f"{n:,.0f} requests per participant (at most {MAX_CLIENT_REQUESTS:,}); choose "
                          f"client_every_s >= {span_s / MAX_CLIENT_REQUESTS:.3g} s")


def run_two_phase(*, cut: str | None = "after_prepare", turn_s: float = 2.0, client_every_s: float = 0.5,
                  intervene_after_s: float | None = 60.0, operator_decision: str = "abort",
                  isolate_after_cut: bool = False, after_s: float = 2.0, recover_coordinator: bool = False,
                  txid: str = "tx-1", branches: Sequence[Branch] | None = None) -> TwoPhaseRun:
    """Run the 2PC scenario on a virtual clock (module docstring) and return a :class:`TwoPhaseRun`.

    Args:
        cut: where the coordinator is cut off (one of :data:`CUT_POINTS`), or None (it finishes).
        turn_s: seconds of a model turn between protocol messages (s, ≥ 0).
        client_every_s: each participant gets one request from another client for the same row this
            often (s, > 0), from the first prepare to the end.
        intervene_after_s: seconds after the cut when an operator resolves every transaction still
            prepared with ``operator_decision``; None: nobody intervenes (the locks are still held at
            the end).
        isolate_after_cut: the participants cannot reach each other either (a partition), so the
            cooperative termination protocol hears nothing.
        after_s: seconds the clients keep coming after the last protocol event (to show the rows
            free again, or still locked).
        recover_coordinator: instead of an operator, the coordinator restarts at the intervention time
            and finishes from its log (:meth:`TwoPhaseCoordinator.recover`).
        txid: the transaction id; ``branches``: the work (default :func:`default_branches`).

    Raises:
        ConfigError: a bad cut point, time, or operator decision; a client_every_s so small that the
            run would simulate more than :data:`MAX_CLIENT_REQUESTS` requests per participant.
    """
    if cut is not None and cut not in CUT_POINTS:
        raise ConfigError(f"cut must be None or one of {CUT_POINTS}, got {cut!r}")
    turn_s = _check_seconds("turn_s", turn_s)
    client_every_s = _check_seconds("client_every_s", client_every_s, positive=True)
    after_s = _check_seconds("after_s", after_s)
    # the run lasts the protocol's turns (at most eight), the wait for the intervention, and after_s
    _check_client_load(client_every_s, 8 * turn_s + (intervene_after_s if isinstance(intervene_after_s, (int, float))
                                                     and not isinstance(intervene_after_s, bool) else 0.0) + after_s)
    if intervene_after_s is not None:
        intervene_after_s = _check_seconds("intervene_after_s", intervene_after_s)
    if operator_decision not in DECISIONS:
        raise ConfigError(f"operator_decision must be one of {DECISIONS}, got {operator_decision!r}")
    branches = list(branches or default_branches())
    clock = ManualClock(0.0)
    parts = {b.participant: PreparableService(b.participant, clock=clock) for b in branches}
    if len(parts) != len(branches):
        raise ConfigError("each branch needs its own participant")
    t0 = clock()
    timeline: list[dict[str, Any]] = []
    clients = {n: {"sent": 0, "locked": 0, "served": 0} for n in parts}
    next_client = [t0]

    def lock_text(p: PreparableService) -> str:
        held = p.locks()
        return ", ".join(f"locked by {v['txid']} ({k})" for k, v in held.items()) or "free"

    def note(who: str, what: str) -> None:
        row = {"t_s": round(clock() - t0, 6), "who": who, "what": what}
        row.update({f"{n}: row": lock_text(p) for n, p in parts.items()})
        row["requests refused so far (423, counted by the participants)"] = sum(
            sum(p.counts()["blocked"].values()) for p in parts.values())
        timeline.append(row)

    def client_round() -> None:
        for b in branches:
            p = parts[b.participant]
            n = clients[b.participant]["sent"] + 1
            op = f"client-{b.participant}-{n}"
            status, _ = p.call(b.action, dict(b.arguments), op, op)
            clients[b.participant]["sent"] += 1
            clients[b.participant]["locked" if status == LOCKED else "served"] += 1

    def advance_to(t: float) -> None:
        while next_client[0] <= t:
            clock.advance(max(0.0, next_client[0] - clock()))
            client_round()
            next_client[0] += client_every_s
        clock.advance(max(0.0, t - clock()))

    def wait(s: float) -> None:
        advance_to(clock() + s)

    def on_record(e: dict[str, Any]) -> None:
        if e["record"] == "VOTE":
            note("coordinator", f"prepare at {e['participant']}: vote {e['vote']}")
        elif e["record"] == "DECISION":
            note("coordinator", f"decision {e['decision']} logged" + (" (presumed: none was logged)"
                                                                       if e.get("presumed") else ""))
        elif e["record"] == "ACK":
            note("coordinator", f"{e['decision']} delivered to {e['participant']}: {e.get('state')}")
        elif e["record"] == "END":
            note("coordinator", "end" + (" (after restart)" if e.get("recovered") else ""))

    log: list[dict[str, Any]] = []
    coord = TwoPhaseCoordinator(parts, log, wait=wait, clock=lambda: clock() - t0, on_record=on_record)
    result = coord.run(txid, branches, turn_s=turn_s, cut=cut)
    termination: list[dict[str, Any]] = []
    if cut is not None:
        note("coordinator", f"cut off {cut.replace('_', ' ')} (process gone / network severed)")
        t_cut = clock()
        # after a participant's own timeout (one turn), each still-prepared participant tries cooperative termination
        advance_to(t_cut + max(turn_s, client_every_s))
        for name, p in parts.items():
            if p.transactions().get(txid, {}).get("state") != "prepared":
                continue
            peers = {other: (None if isolate_after_cut else (lambda t, q=q: q.status(t)[1]))
                     for other, q in parts.items() if other != name}
            out = p.terminate(txid, peers)
            termination.append({"participant": name, **out})
            asked = ", ".join(f"{k}: {v}" for k, v in out["asked"].items())
            note(name, f"cooperative termination: asked {asked} -> "
                       + ("cannot decide, stays prepared" if out["blocked"] else f"{out['decision']}"))
        if intervene_after_s is not None:
            advance_to(t_cut + intervene_after_s)
            if recover_coordinator:
                note("coordinator", "restarted: reads its log")
                TwoPhaseCoordinator(parts, log, wait=wait, clock=lambda: clock() - t0,
                                    on_record=on_record).recover(txid)
            else:
                for name, p in parts.items():
                    if p.transactions().get(txid, {}).get("state") == "prepared":
                        status, body = p.resolve(txid, operator_decision, "oncall")
                        note("operator", f"resolves {txid} at {name} by hand: {operator_decision} -> "
                                         f"{body.get('state')}")
    advance_to(clock() + after_s)
    note("clients", "end of the run")
    held = {}
    for name, p in parts.items():
        tx = p.transactions().get(txid) or {}
        held[name] = (None if tx.get("state") == "prepared" or tx.get("prepared_s") is None
                      else round(tx["decided_s"] - tx["prepared_s"], 6))
    return TwoPhaseRun(
        config={"cut": cut, "turn_s": turn_s, "client_every_s": client_every_s, "intervene_after_s": intervene_after_s,
                "operator_decision": operator_decision, "isolate_after_cut": isolate_after_cut, "after_s": after_s,
                "recover_coordinator": recover_coordinator, "txid": txid,
                "branches": [dataclasses.asdict(b) for b in branches]},
        timeline=timeline, coordinator=result, coordinator_log=log, termination=termination, clients=clients,
        counts={n: p.counts() for n, p in parts.items()}, lock_held_s=held,
        transactions={n: p.transactions().get(txid, {}) for n, p in parts.items()},
        resources={n: p.resources() for n, p in parts.items()},
        blocked_log={n: p.blocked_log() for n, p in parts.items()})


# ------------------------------------------------------------------------------------------------
# the project's real endpoints: no prepare hook
# ------------------------------------------------------------------------------------------------


def prepare_hooks(actions: Mapping[str, Any] | None = None, contracts: Sequence[Any] | None = None
                  ) -> list[dict[str, Any]]:
    """For every forward tool of the project's services, what 2PC would need and what is declared,
    computed from :data:`~kernel_lib.sim.services.ACTIONS` and the declared contracts (default
    :func:`~kernel_lib.sim.services.deployment_contracts`). One row per forward tool: ``tool``,
    ``service``, ``tier``, ``repeat contract``, ``compensator``, ``prepare/commit/abort verbs``
    (the actions of that service named ``<verb>_<tool>`` or ``<verb>``; an empty string when there
    are none), ``contract field for a prepare phase`` (fields of the contract type whose name
    mentions prepare, commit, abort, lock or two-phase; empty when none), ``what undoes it``."""
    from kernel_lib.sim.services import deployment_contracts

    actions = ACTIONS if actions is None else actions
    contracts = list(deployment_contracts() if contracts is None else contracts)
    by_name = {c.name: c for c in contracts}
    words = ("prepare", "commit", "abort", "lock", "two_phase", "xa")
    rows = []
    for name, a in actions.items():
        c = by_name.get(name)
        if c is None or c.is_compensator:
            continue
        same = [x for x, y in actions.items() if y.service == a.service]
        verbs = sorted(x for x in same if any(x == v or x.startswith(f"{v}_") for v in TWO_PHASE_VERBS))
        fields = [f.name for f in dataclasses.fields(c) if any(w in f.name.lower() for w in words)]
        undo = (f"compensator {c.compensator.tool} (a new request, after the effect)" if c.compensator is not None
                else "nothing (tier III: C = ∅)")
        rows.append({"tool": name, "service": a.service, "tier": c.tier, "repeat contract": c.repeat_contract,
                     "compensator": c.compensator.tool if c.compensator else "", "prepare/commit/abort verbs":
                     ", ".join(verbs), "contract field for a prepare phase": ", ".join(fields), "what undoes it": undo})
    return rows


def probe_prepare(call: Callable[[str, dict[str, Any], str], tuple[int, dict[str, Any]]],
                  tools: Sequence[str] = ("place_hold", "reserve_ip")) -> list[dict[str, Any]]:
    """Ask the real services for a prepare phase: for each tool, send ``prepare_<tool>`` through
    ``call(action, arguments, operation_id) -> (http_status, body)`` (a twin's or a live service's
    raw request). Returns ``{"asked", "http_status", "answer"}`` rows (the service's own words);
    a ServiceError from the fleet (no service routes the verb) is reported as the answer."""
    rows = []
    for tool in tools:
        verb = f"prepare_{tool}"
        try:
            status, body = call(verb, {"txid": "tx-probe"}, f"probe.{verb}")
            answer = body.get("error") or body
        except ServiceError as exc:
            status, answer = None, f"refused before sending: {exc}"
        rows.append({"asked": verb, "http_status": status, "answer": str(answer)})
    return rows


# ------------------------------------------------------------------------------------------------
# the same work as a saga, on the project's real (twin) services
# ------------------------------------------------------------------------------------------------


@dataclass
class SagaSameWork:
    """What :func:`run_saga_same_work` did: ``state`` (``COMPLETED`` or ``ABORT_CONSISTENT``),
    ``timeline`` (``{"t_s", "who", "what"}`` rows), ``clients``: per service, how the other
    clients' requests for the same rows were answered, counted by the services (``received`` and
    ``applied`` for their operation ids, from the services' audit and counts), ``saga_effects``:
    ``{action: applied}`` for the saga's own operations (from the services' audit), ``live``: the
    saga's resources still held at the end, ``locks_held``: always 0 here (no service holds a lock
    for anyone), ``recovered``: whether a second runner finished the work."""

    state: str
    timeline: list[dict[str, Any]]
    clients: dict[str, dict[str, int]]
    saga_effects: dict[str, int]
    live: list[dict[str, Any]]
    locks_held: int
    recovered: bool

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def run_saga_same_work(*, fail_second: bool = False, crash_after_first: bool = True, turn_s: float = 2.0,
                       client_every_s: float = 0.5, outage_s: float = 60.0, after_s: float = 2.0,
                       saga_id: str = "same-work", branches: Sequence[Branch] | None = None) -> SagaSameWork:
    """The two-service work of :func:`run_two_phase` as a saga on the twin services (the project's
    real contracts: each step commits at once, its compensator bound and logged).

    T1 places the hold, T2 reserves the IP (``fail_second``: the egress service answers a final 409
    and the saga compensates T1). ``crash_after_first``: the runner is abandoned right after T1
    committed (the same cut as the coordinator's) and a new runner over the same log finishes the
    script ``outage_s`` seconds later. Other clients send a request for the same account and region
    every ``client_every_s`` seconds throughout, through their own capability leases.

    Raises ConfigError for a bad time, or a client_every_s that would simulate more than
    :data:`MAX_CLIENT_REQUESTS` requests per participant.
    """
    from kernel_lib.errors import StepFailedError
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
    from kernel_lib.log import MemoryStore, TrajectoryLog
    from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
    from kernel_lib.sim.deployment import deployment_registry
    from kernel_lib.sim.saga_sweep import GRANT_ID, start_task
    from kernel_lib.sim.services import TwinFleet

    turn_s = _check_seconds("turn_s", turn_s)
    client_every_s = _check_seconds("client_every_s", client_every_s, positive=True)
    outage_s = _check_seconds("outage_s", outage_s)
    after_s = _check_seconds("after_s", after_s)
    _check_client_load(client_every_s, 8 * turn_s + outage_s + after_s)
    branches = list(branches or default_branches())
    fleet = TwinFleet()
    clock = fleet.clock
    t0 = clock()
    other = fleet.client("other-clients")
    registry = deployment_registry()
    store = MemoryStore()
    traj = f"traj-{saga_id}"
    timeline: list[dict[str, Any]] = []
    sent = {b.participant: 0 for b in branches}
    next_client = [t0]

    def note(who: str, what: str) -> None:
        timeline.append({"t_s": round(clock() - t0, 6), "who": who, "what": what})

    def advance_to(t: float) -> None:
        while next_client[0] <= t:
            clock.advance(max(0.0, next_client[0] - clock()))
            for b in branches:
                sent[b.participant] += 1
                op = f"client-{b.participant}-{sent[b.participant]}"
                other.call(b.action, dict(b.arguments), op, op)
            next_client[0] += client_every_s
        clock.advance(max(0.0, t - clock()))

    def runner() -> SagaRunner:
        log = TrajectoryLog(store, traj, must_survive="none")
        gate = DispatchGate(log, AdmissionPolicy({GRANT_ID: set(registry.names())}), coalesce_admission=True)
        if gate.record.task is None:
            start_task(gate, traj)
        return SagaRunner(gate, registry, fleet.client(traj), saga_id=saga_id, grant_id=GRANT_ID,
                          retry=RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.05), sleep=clock.advance)

    def script(r: SagaRunner, *, stop_after_first: bool) -> str:
        try:
            for i, b in enumerate(branches):
                if i:
                    advance_to(clock() + turn_s)
                if i == len(branches) - 1 and fail_second:
                    fleet.inject(b.action, "conflict")
                before = r.saga.steps.get(r.next_step_id)
                out = r.step(b.action, dict(b.arguments))
                if before is not None and before.state == "COMMITTED":
                    note("saga", f"T{i + 1} {b.action}: answered from the log ({out}), nothing sent")
                else:
                    note("saga", f"T{i + 1} {b.action} committed at {b.participant} ({out}); C{i + 1} logged")
                if stop_after_first and i == 0:
                    return "CUT"
        except StepFailedError as exc:
            note("saga", f"step failed: {exc}")
            advance_to(clock() + turn_s)
            state = r.unwind(f"step failed: {exc}")
            note("saga", f"unwound: {state}")
            return state
        r.complete()
        note("saga", "COMPLETED")
        return "COMPLETED"

    state = script(runner(), stop_after_first=crash_after_first)
    recovered = False
    if state == "CUT":
        note("saga", "runner cut off after T1 (process gone); nothing is locked at any service")
        advance_to(clock() + outage_s)
        note("saga", "a new runner re-runs the script over the same log")
        state = script(runner(), stop_after_first=False)
        recovered = True
    advance_to(clock() + after_s)
    note("clients", "end of the run")
    counts = fleet.counts()
    audits = fleet.audits()
    clients: dict[str, dict[str, int]] = {}
    for b in branches:
        applied = sum(1 for a in audits[b.participant] if str(a.get("operation_id", "")).startswith("client-")
                      and a["action"] == b.action and not a.get("refused"))
        received = counts[b.participant]["received"].get(b.action, 0)
        clients[b.participant] = {"sent": sent[b.participant], "applied": applied,
                                  "received (all requests of the action)": received}
    effects: dict[str, int] = {}
    for trail in audits.values():
        for a in trail:
            if str(a.get("operation_id", "")).startswith(saga_id + ".") and not a.get("refused"):
                effects[a["action"]] = effects.get(a["action"], 0) + 1
    live = [r for r in fleet.live_resources() if str(r["operation_id"]).startswith(saga_id + ".")]
    return SagaSameWork(state=state, timeline=timeline, clients=clients, saga_effects=effects, live=live,
                        locks_held=0, recovered=recovered)
