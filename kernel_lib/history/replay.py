"""Harness regression replay (Durable Execution §11.6.2): run the harness code again, on recorded inputs.

Folding a log shows what the old harness decided. To test a *changed* harness on the same history,
the harness itself must run again while every external input it consumes comes from the record:
model replies, tool observations, and the control events and late results that arrived while it
ran. :class:`ReplayAdapter` is that source. It gives the harness two transports with the shapes
the :class:`~kernel_lib.gate.dispatch.DispatchGate` uses (``model(ContextBuilt) -> ModelReply`` and
``tool(ToolIntent) -> ToolReply``) and the recorded external inputs in their logged order.

The matching-request rule. A recorded reply is served only to the request it answered:

* a model request is looked up by its invocation id, then its canonical form (model, the digest
  of the delivered input, request configuration) must equal the recorded one;
* a tool request is looked up by operation id and attempt id, then its canonical form (tool,
  arguments, input reference, repeat contract) must equal the recorded one;
* with ``order="recorded"`` (the default) requests must also arrive in the order the log holds
  them; ``order="any"`` declares that any order of the recorded requests is equivalent (for
  concurrent calls whose order the harness does not care about). Under ``order="any"`` a request
  served out of its recorded order is still served, and the report lists it
  (:attr:`ReplayReport.findings`, kind ``out_of_order_serve``, with its recorded and served
  positions): a shifted identifier under which another call's reply is served never passes
  silently; :attr:`ReplayReport.clean` is False then.

Runtime inputs. Identifiers, random draws and clock readings a harness uses come from a
:class:`HarnessRuntime` (``runtime.random()``, ``runtime.uuid()``, ``runtime.new_id(prefix)``,
``runtime.now()``). Live, :class:`RecordingRuntime` draws the value and appends it as a
``RuntimeInput`` before returning it; under replay, :meth:`ReplayAdapter.runtime` serves the
recorded values in their recorded order and appends the same ``RuntimeInput`` to the replayed log.
Draw N of the replay must ask for the kind and name recorded at draw N: a harness that now draws
one more random number before it makes an operation id fails *at that draw* with
:class:`~kernel_lib.errors.ReplayInputMismatchError` (draw index, the recorded kind, name and value,
and what the replay asked for), not at a request whose arguments carry the shifted id. A harness
that draws fewer inputs than recorded has the rest listed in :attr:`ReplayReport.unserved_draws`.
The recorded draws are the ``RuntimeInput`` events of kind ``random`` or ``identifier``, and of
kind ``clock`` other than the gate's own recheck reading (which :meth:`ReplayAdapter.clock` serves).

Canonical forms are compared as canonical JSON after the declared normalizations only
(:data:`NORMALIZATIONS`). The delivered input is compared by its digest, which is what every
recording holds. Any difference raises :class:`ReplayMismatchError` at once, with both sides; a
request the recording never saw raises it too. There is no fallback to a live call.

Sealing. :func:`sealed` is a context manager that cuts the live side-effect paths of this process
for the duration of a replay: socket connections (so HTTP clients fail), child processes, and
``os.system``. An attempt raises :class:`LiveCallDuringReplayError`. The patch is process-wide,
so run one replay at a time in a process.

What a passing replay shows: that the harness, given exactly these inputs, makes exactly the
recorded requests (and so reaches the recorded decisions). It says nothing about inputs it was not
given, nor about whether the task was done well.
"""

from __future__ import annotations

import contextlib
import os
import random as _random
import socket
import subprocess
import threading
import uuid as _uuid
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import rfc8785

from kernel_lib.core.decisions import RECHECK_CLOCK_INPUT, RESUME_CLOCK_INPUT
from kernel_lib.gate.dispatch import ModelReply, ToolReply
from kernel_lib._support.checks import finite_or_none
from kernel_lib._support.clock import wall_clock
from kernel_lib.errors import (
    ConfigError, KernelError, LiveCallDuringReplayError, ReplayInputMismatchError, ReplayMismatchError,
)
from kernel_lib.core.events import (
    ApprovalResolved,
    BudgetSettled,
    ContextBuilt,
    ControlChanged,
    Event,
    ModelReplied,
    RuntimeInput,
    ToolIntent,
    ToolResult,
)

#: Declared normalizations a replay may apply to canonical requests before comparing them.
NORMALIZATIONS = {
    "ignore_request_config": "drop a model request's request_config (e.g. a changed timeout or trace header)",
    "ignore_input_ref": "drop a tool request's input reference (when snapshots were renamed, not changed)",
}
ORDERS = ("recorded", "any")
#: Prefix of the ``RuntimeInput`` names a :class:`HarnessRuntime` records (``harness:random``, ``harness:id:op``).
HARNESS_INPUT_PREFIX = "harness:"
#: ``RuntimeInput`` kinds a harness draws (a ``clock`` reading counts unless it is the gate's recheck reading).
DRAW_KINDS = ("random", "identifier", "clock")


def rerun_match_probability(per_call: float, calls: int) -> float:
    """Chance that re-running ``calls`` model calls reproduces every recorded output, when each
    call independently reproduces its output with probability ``per_call``: ``per_call ** calls``
    (the compounding of the companion chapter's eq. 1.1, applied in §11.9 "rerunning at
    temperature zero"; e.g. 0.99 over 30 calls ≈ 0.74). A lower bound on what replay avoids: it
    ignores clocks, generated identifiers and a changing environment.

    Args:
        per_call: probability in [0, 1].
        calls: a whole number of calls >= 0.

    Raises:
        ConfigError: ``per_call`` not a finite number in [0, 1], or ``calls`` not an int >= 0.
    """
    if isinstance(per_call, bool) or not isinstance(per_call, (int, float)) or not 0.0 <= per_call <= 1.0:
        raise ConfigError(f"per_call must be a probability in [0, 1], got {per_call!r}")
    if type(calls) is not int or calls < 0:
        raise ConfigError(f"calls must be an int >= 0, got {calls!r}")
    return float(per_call) ** calls


def _canon(x: Any) -> str:
    return rfc8785.dumps(x).decode()


@dataclass
class _Recorded:
    kind: str
    key: str
    request: dict[str, Any]
    reply: Any = None
    sequence_number: int = 0
    served: bool = False
    reply_sequence: int | None = None


@dataclass(frozen=True)
class _Draw:
    kind: str
    name: str
    value: Any
    sequence_number: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "value": self.value, "sequence_number": self.sequence_number}


@dataclass(frozen=True)
class ExternalInput:
    """An input that reached the harness from outside, not as a reply to one of its requests:
    a control change, an approval decision, or a late result (with its reported usage, USD)."""

    event: Event
    charged_usd: float | None = None


@dataclass
class ReplayReport:
    """What a replay served: ``served`` requests in the order asked, ``unserved`` recorded
    requests the harness never made (a harness that now skips a call), ``external_inputs``
    delivered, ``draws_served`` runtime inputs served (random draws, identifiers, clock readings),
    ``unserved_draws`` recorded draws the harness never asked for, and ``findings``: what the
    declared equivalence let pass but the replay saw, as dicts. A finding of kind
    ``out_of_order_serve`` (``order="any"`` only) names the ``request``, its ``recorded_ordinal``
    (1-based among the recorded requests) and ``recorded_sequence`` (log position), the
    ``served_ordinal`` at which the replay asked for it, and ``overtook`` (the earliest recorded
    request still unserved then) and/or ``served_after`` (the latest-recorded request already
    served), each with its recorded ordinal; a finding of kind ``runtime_input_mismatch`` is the
    draw that stopped the replay (see :class:`~kernel_lib.errors.ReplayInputMismatchError`).

    ``complete``: every recorded request and draw was asked for. ``clean``: complete and no
    findings."""

    served: list[str] = field(default_factory=list)
    unserved: list[str] = field(default_factory=list)
    external_inputs: int = 0
    draws_served: int = 0
    unserved_draws: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.unserved and not self.unserved_draws

    @property
    def clean(self) -> bool:
        return self.complete and not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {"served": list(self.served), "unserved": list(self.unserved),
                "external_inputs": self.external_inputs, "draws_served": self.draws_served,
                "unserved_draws": list(self.unserved_draws), "findings": [dict(f) for f in self.findings],
                "complete": self.complete, "clean": self.clean}


class ReplayAdapter:
    """Serves a recorded trajectory's external inputs to a harness under replay (§11.6.2).

    Args:
        events: the recorded log (one trajectory, in sequence order).
        normalizations: names from :data:`NORMALIZATIONS` applied to both sides before comparing.
        order: ``"recorded"`` (requests must come in the logged order) or ``"any"`` (a declared
            equivalence: any order of the recorded requests; each serve that departs from the
            recorded order is listed in ``report.findings``).

    Raises:
        ConfigError: an unknown normalization or order, events of several trajectories, or a
            recording that answers one request twice in incompatible ways.
    """

    def __init__(self, events: Sequence[Event], *, normalizations: Sequence[str] = (), order: str = "recorded"):
        unknown = sorted(set(normalizations) - set(NORMALIZATIONS))
        if unknown:
            raise ConfigError(f"unknown normalization(s) {unknown}; declared ones: {sorted(NORMALIZATIONS)}")
        if order not in ORDERS:
            raise ConfigError(f"order must be one of {ORDERS}, got {order!r}")
        if isinstance(events, (str, bytes, dict)) or not hasattr(events, "__iter__"):
            raise ConfigError(f"a recording is a sequence of Events, got {type(events).__name__}")
        events = list(events)
        if any(not isinstance(e, Event) for e in events):
            raise ConfigError("a recording holds Event objects only (load a log with kernel_lib.log.load_events)")
        if [e.sequence_number for e in events] != sorted(e.sequence_number for e in events):
            raise ConfigError("a recording must be in sequence order")
        if len({e.trajectory_id for e in events}) > 1:
            raise ConfigError("a replay recording holds one trajectory; got events of "
                              f"{sorted({e.trajectory_id for e in events})}")
        self.normalizations = tuple(normalizations)
        self.order = order
        self._recorded: dict[tuple[str, str], _Recorded] = {}
        self._order: list[tuple[str, str]] = []
        self._ordinal: dict[tuple[str, str], int] = {}   # request -> its index in the recorded order
        self._inputs: list[ExternalInput] = []
        self._clock_readings: list[tuple[int, Any]] = []   # (position, now_unix_s) the recheck recorded
        self._clock_served = 0
        self._draws: list[_Draw] = []          # the harness's runtime inputs, in log order
        self._draws_served = 0
        early: set[tuple[str, str]] = set()   # replies seen before their request
        usage: dict[int, float] = {}          # sequence number of a reply/result -> usage logged after it
        last: dict[str, int] = {}             # subject -> sequence number of its latest reply/result
        for ev in events:
            p = ev.payload
            if isinstance(p, ContextBuilt):
                if ("model", p.invocation_id) in early:
                    raise ConfigError(f"the recording holds a reply to model request {p.invocation_id} before the "
                                      "request itself; it cannot be a log this runtime wrote")
                self._add(_Recorded("model", p.invocation_id, self._model_request(p), None, ev.sequence_number))
            elif isinstance(p, ModelReplied):
                rec = self._recorded.get(("model", p.invocation_id))
                if rec is None:
                    early.add(("model", p.invocation_id))
                last[p.invocation_id] = ev.sequence_number
                if rec is not None and rec.reply is not None and rec.reply.model_dump() != p.model_dump():
                    raise ConfigError(f"the recording answers model request {p.invocation_id} twice, differently "
                                      f"(positions {rec.reply_sequence} and {ev.sequence_number})")
                if rec is not None and rec.reply is None:
                    rec.reply = p
                    rec.reply_sequence = ev.sequence_number
            elif isinstance(p, ToolIntent):
                key = f"{p.operation_id}/{p.attempt_id}"
                if ("tool", key) in early:
                    raise ConfigError(f"the recording holds a reply to tool request {key} before its intent; the "
                                      "intent is always durable before dispatch (eq. 1)")
                self._add(_Recorded("tool", key, self._tool_request(p), None, ev.sequence_number))
            elif isinstance(p, ToolResult):
                rec = self._recorded.get(("tool", f"{p.operation_id}/{p.attempt_id}"))
                if rec is None and p.source == "reply":
                    early.add(("tool", f"{p.operation_id}/{p.attempt_id}"))
                last[p.operation_id] = ev.sequence_number
                if p.source == "reply" and rec is not None and rec.reply is not None:
                    raise ConfigError(f"the recording holds two direct replies to tool request {p.operation_id}/"
                                      f"{p.attempt_id} (positions {rec.reply_sequence} and {ev.sequence_number}); "
                                      "later evidence arrives by reconciliation or the inbox, not as a reply")
                if p.source == "reply" and rec is not None and rec.reply is None:
                    rec.reply = p
                    rec.reply_sequence = ev.sequence_number
                else:   # a late result, reconciliation or inbox evidence: it arrived from outside
                    self._inputs.append(ExternalInput(ev))
            elif isinstance(p, BudgetSettled):
                at = last.get(p.subject_id)   # usage evidence belongs to the reply or result just before it
                if at is not None and at not in usage:
                    usage[at] = p.actual_usd
            elif isinstance(p, (ControlChanged, ApprovalResolved)):
                self._inputs.append(ExternalInput(ev))
            elif (isinstance(p, RuntimeInput) and p.kind == "clock" and p.name == RECHECK_CLOCK_INPUT
                  and isinstance(p.value, dict)):
                self._clock_readings.append((ev.sequence_number, p.value.get("now_unix_s")))
            elif (isinstance(p, RuntimeInput) and p.kind in DRAW_KINDS
                  and p.name not in (RECHECK_CLOCK_INPUT, RESUME_CLOCK_INPUT)):   # the runtime's, not the harness's
                self._draws.append(_Draw(p.kind, p.name, p.value, ev.sequence_number))
        self._inputs = [ExternalInput(x.event, usage.get(x.event.sequence_number)) for x in self._inputs]
        self._usage = usage
        self._next = 0
        self.report = ReplayReport()

    # --- recording ------------------------------------------------------------------------------
    def _add(self, rec: _Recorded) -> None:
        k = (rec.kind, rec.key)
        if k in self._recorded:
            raise ConfigError(f"the recording holds two {rec.kind} requests under {rec.key}")
        self._recorded[k] = rec
        self._ordinal[k] = len(self._order)
        self._order.append(k)

    def _model_request(self, p: ContextBuilt) -> dict[str, Any]:
        req = {"model": p.model, "delivered_input_sha256": p.delivered_input_sha256,
               "request_config": dict(p.request_config)}
        if "ignore_request_config" in self.normalizations:
            req.pop("request_config")
        return req

    def _tool_request(self, p: ToolIntent) -> dict[str, Any]:
        req = {"tool": p.tool, "arguments": dict(p.arguments), "input_ref": p.input_ref,
               "repeat_contract": p.repeat_contract}
        if "ignore_input_ref" in self.normalizations:
            req.pop("input_ref")
        return req

    # --- serving ----------------------------------------------------------------------------------
    def _match(self, kind: str, key: str, actual: dict[str, Any]) -> _Recorded:
        rec = self._recorded.get((kind, key))
        if rec is None:
            raise ReplayMismatchError(f"the recording has no {kind} request under this identity; a replay never "
                                      "falls back to a live call", kind=kind, key=key, expected=None, actual=actual)
        if rec.served:
            raise ReplayMismatchError("this request was already served once in this replay", kind=kind, key=key,
                                      expected=rec.request, actual=actual)
        if _canon(rec.request) != _canon(actual):
            diff = sorted(k for k in set(rec.request) | set(actual)   # canonical, so true and 1 differ
                          if k not in rec.request or k not in actual or _canon(rec.request[k]) != _canon(actual[k]))
            raise ReplayMismatchError(f"the request differs from the recorded one in {diff}", kind=kind, key=key,
                                      expected=rec.request, actual=actual)
        if self.order == "recorded":
            while self._next < len(self._order) and self._recorded[self._order[self._next]].served:
                self._next += 1   # the first recorded request not served yet
            if self._next < len(self._order) and self._order[self._next] != (kind, key):
                first = self._recorded[self._order[self._next]]
                raise ReplayMismatchError(f"out of the recorded order: {first.kind} {first.key} comes first (declare "
                                          "order='any' if the order does not matter)", kind=kind, key=key,
                                          expected=first.request, actual=actual)
        if rec.reply is None:
            raise ReplayMismatchError("the recording has this request but no reply to it (the run stopped there); "
                                      "replay cannot invent one", kind=kind, key=key, expected=rec.request,
                                      actual=actual)
        if self.order == "any":
            self._note_order(kind, key)
        rec.served = True
        self.report.served.append(f"{kind} {key}")
        return rec

    def _note_order(self, kind: str, key: str) -> None:
        """Under ``order="any"``: report a serve that departs from the recorded order (it overtakes
        a request recorded before it, or comes after one recorded after it)."""
        at = self._ordinal[(kind, key)]
        overtook = next((k for k in self._order[:at] if not self._recorded[k].served), None)
        after = max((self._ordinal[k] for k in self._order[at + 1:] if self._recorded[k].served), default=None)
        if overtook is None and after is None:
            return
        rec = self._recorded[(kind, key)]
        finding: dict[str, Any] = {"finding": "out_of_order_serve", "request": f"{kind} {key}",
                                   "recorded_ordinal": at + 1, "recorded_sequence": rec.sequence_number,
                                   "served_ordinal": len(self.report.served) + 1}
        parts = []
        if overtook is not None:
            o = self._recorded[overtook]
            finding["overtook"] = {"request": f"{o.kind} {o.key}", "recorded_ordinal": self._ordinal[overtook] + 1,
                                   "recorded_sequence": o.sequence_number}
            parts.append(f"ahead of {o.kind} {o.key} (recorded #{self._ordinal[overtook] + 1}, not served yet)")
        if after is not None:
            o = self._recorded[self._order[after]]
            finding["served_after"] = {"request": f"{o.kind} {o.key}", "recorded_ordinal": after + 1,
                                       "recorded_sequence": o.sequence_number}
            parts.append(f"after {o.kind} {o.key} (recorded #{after + 1}, already served)")
        finding["message"] = (f"{kind} {key} was recorded as request #{at + 1} (log position {rec.sequence_number}) "
                              f"and served as #{finding['served_ordinal']}, " + " and ".join(parts)
                              + "; order='any' admits this, but its reply is the one recorded for that identity, "
                              "which a shifted identifier would make another call's reply")
        self.report.findings.append(finding)

    def model(self, ctx: ContextBuilt) -> ModelReply:
        """The model transport: the recorded reply to this exact request."""
        if not isinstance(ctx, ContextBuilt):
            raise ConfigError(f"the model transport takes a ContextBuilt, got {type(ctx).__name__}")
        rec = self._match("model", ctx.invocation_id, self._model_request(ctx))
        r: ModelReplied = rec.reply
        return ModelReply(status=r.status, reply=r.reply, proposal=r.proposal, input_tokens=r.input_tokens,
                          output_tokens=r.output_tokens, charged_usd=self._usage.get(rec.reply_sequence))

    def tool(self, intent: ToolIntent) -> ToolReply:
        """The tool transport: the recorded reply to this exact operation attempt."""
        if not isinstance(intent, ToolIntent):
            raise ConfigError(f"the tool transport takes a ToolIntent, got {type(intent).__name__}")
        key = f"{intent.operation_id}/{intent.attempt_id}"
        rec = self._match("tool", key, self._tool_request(intent))
        r: ToolResult = rec.reply
        return ToolReply(status=r.status, job_handle=r.job_handle, outcome=r.outcome,
                         observation_complete=r.observation_complete, evidence=r.evidence,
                         charged_usd=self._usage.get(rec.reply_sequence))

    def clock(self) -> float:
        """The dispatch gate's clock during a replay: each call serves the next reading the
        recorded run's dispatch-time recheck logged (``RuntimeInput`` named
        :data:`~kernel_lib.core.decisions.RECHECK_CLOCK_INPUT`), so an approval's expiry is judged
        at the recorded time, not now.

        Raises: ReplayMismatchError: the replayed harness reads the clock more often than the
        recorded run did (its control flow diverged)."""
        if self._clock_served >= len(self._clock_readings):
            raise ReplayMismatchError(
                f"the replayed run read the dispatch-time clock {self._clock_served + 1} time(s); the recording "
                f"holds {len(self._clock_readings)} reading(s): its recheck took another path",
                kind="clock", key=RECHECK_CLOCK_INPUT, expected=None, actual={"reading": self._clock_served + 1})
        _position, now = self._clock_readings[self._clock_served]
        self._clock_served += 1
        return now

    def runtime(self, gate) -> "ReplayRuntime":
        """The harness's runtime inputs under replay: a :class:`HarnessRuntime` that serves the
        recorded draws in their recorded order and appends each one to ``gate``'s (replayed) log,
        as the live :class:`RecordingRuntime` did."""
        return ReplayRuntime(self, gate)

    def _serve_draw(self, kind: str, name: str) -> _Draw:
        i = self._draws_served
        asked = {"kind": kind, "name": name}
        if i >= len(self._draws):
            reason = (f"the replayed harness asked for runtime input #{i + 1} ({kind} {name}); the recording holds "
                      f"{len(self._draws)} draw(s): its control flow diverged")
            self._draw_finding(i + 1, None, asked, reason)
            raise ReplayInputMismatchError(reason, draw_index=i + 1, expected=None, actual=asked)
        d = self._draws[i]
        if (d.kind, d.name) != (kind, name):
            reason = (f"draw #{i + 1}: the recording holds {d.kind} {d.name} = {_show(d.value)} at log position "
                      f"{d.sequence_number}; the replayed harness asked for {kind} {name} (it draws its runtime inputs "
                      "in another order or number, so every later draw would be shifted)")
            self._draw_finding(i + 1, d.to_dict(), asked, reason)
            raise ReplayInputMismatchError(reason, draw_index=i + 1, expected=d.to_dict(), actual=asked)
        self._draws_served += 1
        self.report.draws_served = self._draws_served
        return d

    def _draw_finding(self, index: int, recorded: Any, asked: dict[str, Any], reason: str) -> None:
        self.report.findings.append({"finding": "runtime_input_mismatch", "draw_index": index, "recorded": recorded,
                                     "asked": asked, "message": reason})

    def external_inputs(self) -> list[ExternalInput]:
        """Control events, approval decisions and late results, in their logged order: the inputs
        that reached the harness from outside rather than as replies to its requests."""
        self.report.external_inputs = len(self._inputs)
        return list(self._inputs)

    def finish(self) -> ReplayReport:
        """The report; ``unserved`` lists recorded requests the harness did not make."""
        self.report.unserved = [f"{k} {key}" for (k, key) in self._order if not self._recorded[(k, key)].served]
        self.report.unserved_draws = [f"draw #{i + 1} {d.kind} {d.name} (log position {d.sequence_number})"
                                      for i, d in enumerate(self._draws) if i >= self._draws_served]
        return self.report


def _show(v: Any, limit: int = 200) -> str:
    text = _canon(v) if v is not None else "null"
    return text if len(text) <= limit else text[:limit] + "…"


# ------------------------------------------------------------------------------------------------
# the harness's runtime inputs: identifiers, random draws, clock readings (§11.6.2)
# ------------------------------------------------------------------------------------------------


class HarnessRuntime:
    """Where a harness gets identifiers, random numbers and the time (§11.6.2: the capture
    boundary supplies every nondeterministic input the harness consumes).

    Every method is one *draw*: a ``RuntimeInput`` named ``harness:<name>`` in the trajectory log.
    :class:`RecordingRuntime` makes the draws live and records them; the runtime
    :meth:`ReplayAdapter.runtime` returns serves them from the recording. A harness written
    against this interface draws the same values on replay, and a harness that changed what it
    draws fails at the first draw that differs.

    Methods (``name`` labels the draw; it is part of what replay matches):
        random(name="random") -> float in [0, 1) (kind ``random``)
        randint(low, high, name="randint") -> int in [low, high] (kind ``random``)
        uuid(name="uuid") -> str, a random UUID4 (kind ``identifier``)
        new_id(prefix) -> str, ``"<prefix>-<12 hex digits>"`` (kind ``identifier``, name ``id:<prefix>``)
        now(name="now") -> float, seconds since the epoch (kind ``clock``)

    Raises: ConfigError for a bad name, prefix or range; under replay
    :class:`~kernel_lib.errors.ReplayInputMismatchError` at a draw the recording does not hold.
    """

    draws: int = 0

    def _draw(self, kind: str, name: str, make) -> Any:   # pragma: no cover - overridden
        raise NotImplementedError

    @staticmethod
    def _name(name: str) -> str:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"a runtime input needs a non-empty name, got {name!r}")
        return HARNESS_INPUT_PREFIX + name

    def random(self, name: str = "random") -> float:
        return float(self._draw("random", self._name(name), lambda rng, clock: rng.random()))

    def randint(self, low: int, high: int, name: str = "randint") -> int:
        if any(isinstance(x, bool) or not isinstance(x, int) for x in (low, high)) or low > high:
            raise ConfigError(f"randint needs whole numbers low <= high, got {low!r}, {high!r}")
        return int(self._draw("random", self._name(name), lambda rng, clock: rng.randint(low, high)))

    def uuid(self, name: str = "uuid") -> str:
        return str(self._draw("identifier", self._name(name),
                              lambda rng, clock: str(_uuid.UUID(int=rng.getrandbits(128), version=4))))

    def new_id(self, prefix: str) -> str:
        if not isinstance(prefix, str) or not prefix.strip():
            raise ConfigError(f"new_id needs a non-empty prefix, got {prefix!r}")
        return str(self._draw("identifier", self._name(f"id:{prefix}"),
                              lambda rng, clock: f"{prefix}-{rng.getrandbits(48):012x}"))

    def now(self, name: str = "now") -> float:
        return float(self._draw("clock", self._name(name), lambda rng, clock: _reading(clock())))


def _reading(now: Any) -> float:
    reading = finite_or_none(now)
    if reading is None:
        raise ConfigError(f"the clock returned {now!r:.60}, not a finite number of seconds")
    return reading


class RecordingRuntime(HarnessRuntime):
    """The live :class:`HarnessRuntime`: each draw is made, appended to ``gate``'s log as a
    ``RuntimeInput`` (durable at the log's tier before the harness sees the value), and returned.

    Args:
        gate: the :class:`~kernel_lib.gate.dispatch.DispatchGate` of the run (its ``append``).
        rng: a ``random.Random`` (default: ``random.SystemRandom()``); seed one for tests.
        clock: ``clock() -> seconds`` for :meth:`now` (default: the wall clock).
    """

    def __init__(self, gate, *, rng: _random.Random | None = None, clock=wall_clock):
        if not callable(getattr(gate, "append", None)):
            raise ConfigError(f"a RecordingRuntime records through a dispatch gate, got {type(gate).__name__}")
        self.gate, self.rng, self.clock = gate, rng if rng is not None else _random.SystemRandom(), clock
        self.draws = 0

    def _draw(self, kind: str, name: str, make) -> Any:
        value = make(self.rng, self.clock)
        self.gate.append(RuntimeInput(kind=kind, name=name, value=value))
        self.draws += 1
        return value


class ReplayRuntime(HarnessRuntime):
    """The replay :class:`HarnessRuntime` of a :class:`ReplayAdapter`: draw N returns the value
    recorded at draw N, after checking that the harness asks for the recorded kind and name, and
    appends it to ``gate``'s replayed log. Raises ReplayInputMismatchError otherwise (the
    adapter's report lists the finding too)."""

    def __init__(self, adapter: ReplayAdapter, gate):
        if not callable(getattr(gate, "append", None)):
            raise ConfigError(f"a ReplayRuntime appends through a dispatch gate, got {type(gate).__name__}")
        self.adapter, self.gate = adapter, gate
        self.draws = 0

    def _draw(self, kind: str, name: str, make) -> Any:
        d = self.adapter._serve_draw(kind, name)
        if self.gate is not None:
            self.gate.append(RuntimeInput(kind=d.kind, name=d.name, value=d.value))
        self.draws += 1
        return d.value


# ------------------------------------------------------------------------------------------------
# sealing the live side-effect paths
# ------------------------------------------------------------------------------------------------


_SEAL_LOCK = threading.Lock()
_SEAL_STATE: dict[str, Any] = {"depth": 0, "saved": []}
_INET = (socket.AF_INET, socket.AF_INET6)


def _seal_patches(reason: str) -> list[tuple[Any, str, Any]]:
    def refuse(what: str):
        def _refused(*args: Any, **kwargs: Any):
            raise LiveCallDuringReplayError(f"{what} refused: {reason}; replay serves recorded observations only")
        return _refused

    def refuse_inet(name: str):
        original = getattr(socket.socket, name)

        def _guarded(self, *args: Any, **kwargs: Any):
            if self.family in _INET:   # a network peer; local pipes (AF_UNIX) of the event loop still work
                raise LiveCallDuringReplayError(f"sending on a network socket ({name}) refused: {reason}; replay "
                                                "serves recorded observations only")
            return original(self, *args, **kwargs)
        return _guarded

    patches = [(socket.socket, "connect", refuse("socket connect")),
               (socket.socket, "connect_ex", refuse("socket connect")),
               (socket, "create_connection", refuse("socket connection")),
               (subprocess.Popen, "__init__", refuse("starting a child process")),
               (os, "system", refuse("os.system"))]
    for name in ("send", "sendall", "sendto", "sendmsg"):   # connections opened before the seal (keep-alive pools)
        patches.append((socket.socket, name, refuse_inet(name)))
    import posix
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnv", "spawnve", "spawnvp", "spawnvpe",
                 "execv", "execve", "execvp", "execvpe"):
        if hasattr(os, name):
            patches.append((os, name, refuse(f"os.{name}")))
    for name in ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve"):
        if hasattr(posix, name):   # the same functions under the posix module's own names
            patches.append((posix, name, refuse(f"posix.{name}")))
    return patches


@contextlib.contextmanager
def sealed(reason: str = "a harness regression replay is running") -> Iterator[None]:
    """Cut this process's live side-effect paths while the block runs: outgoing socket
    connections, sends on network sockets that were already open (a pooled keep-alive HTTP
    connection), new child processes (``subprocess``, ``os.fork``/``posix_spawn``/``spawn*``/
    ``exec*``) and ``os.system``. Each attempt raises :class:`LiveCallDuringReplayError`.

    Blocks may nest or overlap across threads: the paths stay cut until the last one exits, and
    are restored exactly once. Loopback is cut too (a tool service on 127.0.0.1 is live). This is a
    guard of the test runtime, not a sandbox: code that calls the C socket module directly, or
    another process, is outside its reach.
    """
    with _SEAL_LOCK:
        if _SEAL_STATE["depth"] == 0:
            patches = _seal_patches(reason)
            _SEAL_STATE["saved"] = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
            for obj, name, fn in patches:
                setattr(obj, name, fn)
        _SEAL_STATE["depth"] += 1
    try:
        yield
    finally:
        with _SEAL_LOCK:
            _SEAL_STATE["depth"] -= 1
            if _SEAL_STATE["depth"] == 0:
                for obj, name, fn in _SEAL_STATE["saved"]:
                    setattr(obj, name, fn)
                _SEAL_STATE["saved"] = []


# ------------------------------------------------------------------------------------------------
# the §11.6.2 example: a late result arrives while the trajectory is PAUSED
# ------------------------------------------------------------------------------------------------

#: The harness of the example, as plain data (the grant and the bounds it uses).
EXAMPLE_GRANT = "grant_repair"
EXAMPLE_TRAJECTORY = "traj_r18_late_result"


def example_policy():
    from kernel_lib.gate.dispatch import AdmissionPolicy
    return AdmissionPolicy({EXAMPLE_GRANT: {"run_tests", "stand-in-model"}})


def worksheet_harness(gate, model, tool, inputs: Sequence[ExternalInput], *,
                      fire_model_on_late_result: bool = False) -> None:
    """A small harness for the late-result example of §11.6.2, written the way a harness is: it
    starts the task, asks the model, dispatches ``test_r18`` through the dispatch gate, and then
    handles what arrives from outside (a pause, a late result).

    ``fire_model_on_late_result=True`` is the regression the chapter describes: on a late result
    it asks the model again, going around the dispatch gate. Replay must catch it.
    """
    from kernel_lib.gate.dispatch import ModelCall, ToolProposal
    from kernel_lib.core.events import TaskStarted

    gate.start(TaskStarted(task_id="repair-r18", requester="alice", objective="fix the median bug",
                           grant_ids=[EXAMPLE_GRANT], budget_ceiling_usd=2.0, finalization_reserve_usd=0.2))
    gate.run_model(ModelCall("model_call_1", "stand-in-model", "tests for ws_r18?", EXAMPLE_GRANT, 0.05), model)
    gate.run_tool(ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, EXAMPLE_GRANT, 0.5,
                               input_ref="ws_r18"), tool)
    for inp in inputs:
        p = inp.event.payload
        if isinstance(p, ControlChanged):
            gate.change_control(p.to_state, issuer=p.issuer, request_id=p.request_id, reason=p.reason,
                                bump_control_epoch=p.bump_control_epoch)
        elif isinstance(p, ToolResult):
            # a late result updates the operation table; a paused trajectory takes no new turn
            gate.record_evidence(p.operation_id, p.attempt_id,
                                 ToolReply(status=p.status, job_handle=p.job_handle, outcome=p.outcome,
                                           observation_complete=p.observation_complete, evidence=p.evidence,
                                           charged_usd=inp.charged_usd), source=p.source)
            if fire_model_on_late_result:   # the regression: a new model turn on a late result
                import hashlib
                text = f"test_r18 finished: {p.outcome}"
                model(ContextBuilt(invocation_id="model_call_2", model="stand-in-model", delivered_input=text,
                                   delivered_input_sha256=hashlib.sha256(text.encode()).hexdigest()))


def record_example(store=None):
    """Run :func:`worksheet_harness` once against scripted endpoints and return the recorded log
    (a list of events): the model proposes the test, the executor accepts it, an operator pauses
    the trajectory, and the test's completion arrives late, through the result inbox."""
    from kernel_lib.gate.dispatch import DispatchGate
    from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog

    store = store or MemoryStore()
    log = TrajectoryLog(store, EXAMPLE_TRAJECTORY, must_survive=FailureDomain.NONE)
    gate = DispatchGate(log, example_policy())

    def model(ctx: ContextBuilt) -> ModelReply:
        return ModelReply(status="complete", reply="run the tests on ws_r18", proposal={"tool": "run_tests"},
                          input_tokens=120, output_tokens=12, charged_usd=0.01)

    def tool(intent: ToolIntent) -> ToolReply:
        return ToolReply(status="accepted", job_handle="job_tests_18")

    # what arrives from outside, built as the events they will be logged as
    pause = ControlChanged(request_id="pause-1", issuer="operator", to_state="PAUSED", bump_control_epoch=True,
                           reason="operator pause")
    late = ToolResult(operation_id="test_r18", attempt_id="attempt1", status="completed", job_handle="job_tests_18",
                      outcome={"passed": 5, "failed": 0}, observation_complete=True, source="inbox")
    stub = [ExternalInput(Event.create(trajectory_id=EXAMPLE_TRAJECTORY, event_id="x1", sequence_number=1,
                                       payload=pause)),
            ExternalInput(Event.create(trajectory_id=EXAMPLE_TRAJECTORY, event_id="x2", sequence_number=2,
                                       payload=late), charged_usd=0.12)]
    worksheet_harness(gate, model, tool, stub)
    return list(store.read(EXAMPLE_TRAJECTORY))


def replay_harness(events: Sequence[Event], harness=worksheet_harness, *, order: str = "recorded",
                   normalizations: Sequence[str] = (), policy=None, with_runtime: bool = False,
                   **harness_kw) -> tuple[list[Event], ReplayReport]:
    """Run ``harness`` against the recording ``events`` inside :func:`sealed`, on a fresh
    in-memory log, and return the replayed log and the report.

    ``harness(gate, model, tool, inputs, **harness_kw)`` is called with the replay transports and
    the recorded external inputs; with ``with_runtime=True`` also ``runtime=`` the replay
    :class:`HarnessRuntime` (recorded identifiers, random draws, clock readings). ``order`` and
    ``normalizations`` are passed to :class:`ReplayAdapter`; ``policy`` is the admission policy
    (default: :func:`example_policy`).

    Raises ReplayMismatchError at the first request that does not match
    (ReplayInputMismatchError at the first runtime input that does not);
    LiveCallDuringReplayError if anything tries to go live."""
    from kernel_lib.gate.dispatch import DispatchGate
    from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog

    adapter = ReplayAdapter(events, order=order, normalizations=normalizations)
    store = MemoryStore()
    traj = events[0].trajectory_id if events else EXAMPLE_TRAJECTORY
    gate = DispatchGate(TrajectoryLog(store, traj, must_survive=FailureDomain.NONE),
                        policy if policy is not None else example_policy(), clock=adapter.clock)
    if with_runtime:
        harness_kw["runtime"] = adapter.runtime(gate)
    with sealed():
        harness(gate, adapter.model, adapter.tool, adapter.external_inputs(), **harness_kw)
    return list(store.read(traj)), adapter.finish()


# ------------------------------------------------------------------------------------------------
# time-travel replay (§11.6.1, definition 11.3)
# ------------------------------------------------------------------------------------------------


@dataclass
class TimeTravelView:
    """The recorded state at one log position, rebuilt by the reducer alone.

    ``record`` is the trajectory record at ``position``; ``restore`` the
    :class:`~kernel_lib.checkpoint.restore.RestoreResult` when a blob store was given (checkpoint
    used, workspace tree, bytes read); ``delivered_inputs`` maps each model invocation logged up
    to ``position`` to the exact input it was sent, as recorded (text, or the bytes behind its
    reference); ``missing`` lists ``(what, name, why)`` for every delivered input whose bytes are
    no longer retained. ``in_doubt`` are the operations the projection keeps in doubt there.
    """

    position: int
    record: Any
    delivered_inputs: dict[str, str]
    missing: list[tuple[str, str, str]]
    restore: Any = None

    @property
    def in_doubt(self) -> list[str]:
        return self.record.in_doubt()

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position, "in_doubt": self.in_doubt, "delivered_inputs": dict(self.delivered_inputs),
                "missing": [list(m) for m in self.missing],
                "restore": self.restore.to_dict() if self.restore is not None else None,
                "record": self.record.to_dict()}


def time_travel(store, trajectory_id: str, position: int, *, blobs=None, dest=None) -> TimeTravelView:
    """Rebuild the recorded state of ``trajectory_id`` at log ``position`` without any model or
    tool call (§11.6.1): from the newest usable checkpoint and the suffix when ``blobs`` is given
    (the workspace too, written to ``dest`` if given), else by folding from record_0; plus the
    exact delivered input of every ``ContextBuilt`` up to ``position``.

    Raises:
        ConfigError: ``position`` outside 0..head.
        UnrecoverableStateError: retention pruned an object the record or workspace at that
            position needs; ``missing`` names it (kind, digest). A delivered input whose bytes
            are gone does not stop the view: it is listed in ``missing``, as is a prefix that log
            compaction retired.
        PrefixRetiredError: log compaction retired events the record at ``position`` needs (no
            retained checkpoint at or before it).
    """
    from kernel_lib.core.record import fold, initial_record

    head = store.head(trajectory_id)
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= head:
        raise ConfigError(f"position {position!r} is outside the log of {trajectory_id!r} (0..{head})")
    restored = None
    if blobs is not None:
        from kernel_lib.checkpoint.restore import restore
        restored = restore(store, trajectory_id, blobs, target=position, dest=dest)
        record = restored.record
    else:
        record = fold(initial_record(trajectory_id), store.read(trajectory_id, 1, position) if position else [])
    inputs: dict[str, str] = {}
    missing: list[tuple[str, str, str]] = []
    retired = store.retired_through(trajectory_id)
    if retired and position:
        missing.append(("log prefix", f"#1..#{min(retired, position)}",
                        "retired by log compaction (§11.8.3): the delivered inputs logged there are gone"))
    for ev in (store.read(trajectory_id, retired + 1, position) if position > retired else []):
        p = ev.payload
        if not isinstance(p, ContextBuilt):
            continue
        if p.delivered_input is not None:
            inputs[p.invocation_id] = p.delivered_input
            continue
        ref = p.delivered_input_ref or ""
        if blobs is None:
            missing.append(("delivered input", p.invocation_id, f"held by reference {ref[:16]}…; no blob store given"))
            continue
        try:
            data = blobs.get(ref, kind="delivered input", needed_by=f"ContextBuilt {p.invocation_id}")
        except KernelError as exc:
            missing.append(("delivered input", p.invocation_id, str(exc)))
            continue
        inputs[p.invocation_id] = data.decode("utf-8", errors="replace")
    return TimeTravelView(position, record, inputs, missing, restored)


# ------------------------------------------------------------------------------------------------
# counterfactual branches (§11.6.3)
# ------------------------------------------------------------------------------------------------

BRANCH_ORIGIN = "branch:origin"


@dataclass(frozen=True)
class Intervention:
    """What a counterfactual branch changes: ``kind`` (``prompt_template``, ``model``, ``policy``,
    ``observation_filter`` or ``other``), a one-line ``description`` and the ``changes`` as data."""

    kind: str
    description: str
    changes: dict[str, Any] = field(default_factory=dict)

    KINDS = ("prompt_template", "model", "policy", "observation_filter", "other")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ConfigError(f"intervention kind must be one of {self.KINDS}, got {self.kind!r}")
        if not isinstance(self.description, str) or not self.description.strip():
            raise ConfigError("an intervention needs a description (what is changed, and why)")
        if not isinstance(self.changes, dict):
            raise ConfigError(f"intervention changes must be a dict, got {type(self.changes).__name__}")
        from kernel_lib.core.events import check_json, redact_secrets
        try:
            check_json(self.changes)
        except ValueError as exc:
            raise ConfigError(f"intervention changes must be plain JSON data (finite numbers, strings, lists, "
                              f"objects): {exc}") from None
        if redact_secrets(self.changes)[1]:
            raise ConfigError("intervention changes hold credential-looking values; a log never stores secrets")


class BranchTransports:
    """Transports for a branch's continuation: the parent's recorded replies while the branch
    makes exactly the parent's requests (the matching-request rule), then, from the first request
    that differs, the ``sandbox`` transports for this and every later request (recorded replies
    are obsolete from there on). Without a sandbox the first differing request halts the branch
    with :class:`ReplayMismatchError`. ``diverged_at`` names that first request."""

    def __init__(self, parent_suffix: Sequence[Event], *, sandbox_model=None, sandbox_tool=None):
        self.adapter = ReplayAdapter(parent_suffix) if parent_suffix else None
        self.sandbox_model, self.sandbox_tool = sandbox_model, sandbox_tool
        self.diverged_at: str | None = None
        self.fresh: list[str] = []

    def _go(self, kind: str, key: str, recorded, sandbox, request):
        if self.diverged_at is None and self.adapter is not None:
            try:
                return recorded(request)
            except ReplayMismatchError:
                if sandbox is None:
                    raise
                self.diverged_at = f"{kind} {key}"
        elif self.diverged_at is None:
            self.diverged_at = f"{kind} {key}"
        if sandbox is None:
            raise ReplayMismatchError("the branch left its recorded prefix and has no sandbox for new observations; "
                                      "it halts here", kind=kind, key=key, expected=None, actual=None)
        self.fresh.append(f"{kind} {key}")
        return sandbox(request)

    def model(self, ctx: ContextBuilt) -> ModelReply:
        return self._go("model", ctx.invocation_id, self.adapter.model if self.adapter else None,
                        self.sandbox_model, ctx)

    def tool(self, intent: ToolIntent) -> ToolReply:
        return self._go("tool", f"{intent.operation_id}/{intent.attempt_id}",
                        self.adapter.tool if self.adapter else None, self.sandbox_tool, intent)


@dataclass
class Branch:
    """A counterfactual branch: a new trajectory ``branch_id`` whose base record is the parent's
    record at ``parent_position`` (folded, never re-executed), re-identified, with every parent
    approval made void. Its own log (in ``store``) starts with a ``RuntimeInput`` named
    ``branch:origin`` that records the parent, the position, the parent's prefix digest there and
    the intervention. ``record()`` folds the branch log over the base record."""

    branch_id: str
    parent_trajectory: str
    parent_position: int
    intervention: Intervention
    base_record: Any
    store: Any
    parent_suffix: list[Event]
    voided_approvals: list[str]

    def record(self):
        from kernel_lib.core.record import fold
        return fold(self.base_record, self.store.read(self.branch_id))

    def gate(self, policy, **kw):
        """A dispatch gate on the branch log, over the branch's current record."""
        from kernel_lib.gate.dispatch import DispatchGate
        from kernel_lib.log import FailureDomain, TrajectoryLog
        log = TrajectoryLog(self.store, self.branch_id, must_survive=FailureDomain.NONE)
        return DispatchGate(log, policy, record=self.record(), **kw)

    def transports(self, *, sandbox_model=None, sandbox_tool=None) -> BranchTransports:
        """Recorded replies while the branch repeats the parent's requests, then the sandbox."""
        return BranchTransports(self.parent_suffix, sandbox_model=sandbox_model, sandbox_tool=sandbox_tool)


def _append_first(log, payload) -> None:
    """Append the branch origin as event 1 of the branch log, at that position exactly: two forks
    racing for one branch id both write position 1, and the store keeps the first and refuses a
    different second one."""
    from kernel_lib.errors import StoreError
    ev = log.stamp(payload, 1)
    try:
        for res in log.store.append_batch([ev], log.tier):
            if isinstance(res, Exception):
                raise res
    except StoreError as exc:
        raise ConfigError(f"branch id {log.trajectory_id!r} is already in use (another fork wrote its first event): "
                          f"{exc}") from None


def fork_branch(parent_store, parent_trajectory: str, position: int, *, branch_id: str, intervention: Intervention,
                store=None, blobs=None) -> Branch:
    """Fork ``parent_trajectory`` at log ``position`` into a new branch (§11.6.3).

    The shared prefix is rebuilt by :func:`time_travel` (checkpoint plus suffix when ``blobs`` is
    given): no model or tool is called for it. The branch gets a fresh id, its own log in
    ``store`` (default: a new in-memory store) that starts with the origin record, and a base
    record in which every parent approval is void (an approval granted to the parent is never
    a grant to the branch). The parent's log is only read.

    Raises:
        ConfigError: bad ``position`` or ``branch_id`` (empty, equal to the parent's, or already
            present in ``store``), or a non-Intervention.
        UnrecoverableStateError: the state at ``position`` cannot be rebuilt (see time_travel).
    """
    import copy as _copy

    from kernel_lib.core.events import RuntimeInput
    from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog

    if not isinstance(intervention, Intervention):
        raise ConfigError(f"intervention must be an Intervention, got {type(intervention).__name__}")
    if not isinstance(branch_id, str) or not branch_id or branch_id == parent_trajectory:
        raise ConfigError(f"a branch needs a fresh, non-empty id distinct from its parent's, got {branch_id!r}")
    store = store if store is not None else MemoryStore()
    if parent_store.head(parent_trajectory) == 0:
        raise ConfigError(f"the parent store holds no trajectory {parent_trajectory!r}: nothing to fork")
    if store.head(branch_id) != 0:
        raise ConfigError(f"{branch_id!r} already has events in the branch store; a branch id is used once")
    view = time_travel(parent_store, parent_trajectory, position, blobs=blobs)
    base = _copy.deepcopy(view.record)
    prefix_sha256 = base.prefix_sha256
    base.trajectory_id, base.last_sequence_number, base.owner_epoch = branch_id, 0, 0
    voided = []
    for a in base.approvals.values():
        if a.status in ("pending", "approved"):
            voided.append(a.approval_id)
            a.status = "withdrawn"
    if base.control_state == "AWAITING_APPROVAL":
        base.control_state = "RUNNING"
    head = parent_store.head(parent_trajectory)
    suffix = list(parent_store.read(parent_trajectory, position + 1, head)) if position < head else []
    log = TrajectoryLog(store, branch_id, must_survive=FailureDomain.NONE)
    _append_first(log, RuntimeInput(kind="config", name=BRANCH_ORIGIN, value={
        "parent_trajectory": parent_trajectory, "parent_position": position, "parent_prefix_sha256": prefix_sha256,
        "intervention": {"kind": intervention.kind, "description": intervention.description,
                         "changes": intervention.changes},
        "voided_parent_approvals": voided, "side_effects": "sandbox only"}))
    return Branch(branch_id, parent_trajectory, position, intervention, base, store, suffix, voided)
