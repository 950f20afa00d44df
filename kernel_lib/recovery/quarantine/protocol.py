"""The four-stage quarantine protocol as pure decisions (Failure Recovery, "Blast Radius
Quarantine": tables 11 and 12, Example 0.2).

* :data:`TABLE_12` — the four stages (suspend, revoke, sever, taint) with their primitives and
  what each guarantees, and :data:`WAVES`: stages 1 and 3 run together first (the local seal),
  then stages 2 and 4;
* :class:`HostCapabilities` / :func:`choose_mechanisms` — which primitive each local stage uses
  on a machine (cgroup freezer v1 or v2, else SIGSTOP of the process group; a network namespace,
  else severing at the gateway), with the reason for each fallback. Probing the machine is an
  effect and lives in :mod:`kernel_lib.live.quarantine`;
* :class:`QuarantineTrigger`, :func:`taint_origin` — what set the quarantine off, and t_taint:
  the earliest log position where untrusted data came in (the first result of a tool declared
  untrusted, at or before the detection), else the start of the log (fail-safe);
* :func:`tombstone`, :func:`quarantine_of`, :func:`refuse_if_quarantined` — the
  ``TrajectoryQuarantined`` record and how a worker reads it back from the fold;
* :func:`containment_timeline` — Example 0.2's arithmetic: when egress is sealed, when the tree
  is frozen, when peers are blocked and when the identity provider revokes, against the time one
  token takes to decode.

No clock, no process, no file: every function here is a function of its arguments and the
trajectory record.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel_lib.errors import ConfigError, ContainmentUnavailableError, TrajectoryQuarantinedRefusal

__all__ = ["Stage", "TABLE_12", "WAVES", "STAGE_NAMES", "SUSPEND_MECHANISMS", "SEVER_MECHANISMS",
           "HostCapabilities", "MechanismChoice", "choose_mechanisms", "QuarantineTrigger", "TRIGGER_KINDS",
           "taint_origin", "tombstone", "quarantine_of", "quarantines_of", "refuse_if_quarantined",
           "ContainmentTimeline", "containment_timeline", "EXAMPLE_0_2_GIVENS"]


@dataclass(frozen=True)
class Stage:
    """One row of table 12: its number, name (the key used in reports and ``stage_ms``), the
    primitive this project applies, what it acts on, and what it guarantees."""

    number: int
    name: str
    primitive: str
    targets: str
    guarantee: str


TABLE_12: tuple[Stage, ...] = (
    Stage(1, "suspend", "cgroup freezer (v1 freezer.state, v2 cgroup.freeze), else SIGSTOP of the process group",
          "the agent process, its interpreter and every child it spawned",
          "no further system call or decoded token; memory kept for the post-mortem"),
    Stage(2, "revoke", "revoke every capability lease of the trajectory at the credential broker",
          "bearer tokens the services introspect on each request",
          "privileges only shrink: a request presenting a revoked lease is refused (401)"),
    Stage(3, "sever", "veth link down and a blackhole root qdisc on both ends, else refusal at the gateway",
          "the sandbox's network namespace and its veth pair",
          "no packet leaves the sandbox: no exfiltration, no command-and-control"),
    Stage(4, "taint", "a TrajectoryQuarantined tombstone in the log and the taint ledger updated",
          "artifacts produced since t_taint and everything derived from them",
          "peers cannot read tainted or suspect artifacts until a verifier or operator clears them"),
)
STAGE_NAMES = tuple(s.name for s in TABLE_12)
#: Example 0.2's order: the local seal (stages 1 and 3 together), then revocation and taint together.
WAVES: tuple[tuple[str, ...], ...] = (("suspend", "sever"), ("revoke", "taint"))

SUSPEND_MECHANISMS = ("cgroup_freezer", "sigstop")
SEVER_MECHANISMS = ("netns", "gateway")
_SUSPEND_CHOICES = ("auto", "cgroup", "cgroup-v1", "cgroup-v2", "sigstop")
_SEVER_CHOICES = ("auto", "netns", "gateway")


@dataclass(frozen=True)
class HostCapabilities:
    """What a machine offers the quarantine (probed by :func:`kernel_lib.live.quarantine.probe_host`).

    ``cgroup_v1_freezer``: the mount point of a writable cgroup v1 freezer hierarchy, or None.
    ``cgroup_v2``: the mount point of a writable cgroup v2 hierarchy whose children offer
    ``cgroup.freeze``, or None. ``netns``: network namespaces with veth pairs can be made (root,
    ``ip`` present). ``tc``: the ``tc`` command is present (blackhole qdiscs). ``notes``: why a
    capability is missing, by name."""

    cgroup_v1_freezer: str | None = None
    cgroup_v2: str | None = None
    netns: bool = False
    tc: bool = False
    is_root: bool = False
    notes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MechanismChoice:
    """The primitive of each local stage. ``suspend``: ``cgroup_freezer`` or ``sigstop``;
    ``cgroup_version``: 1 or 2 with the freezer (None with SIGSTOP); ``sever``: ``netns`` or
    ``gateway``; ``reasons``: why, per stage (a fallback says what was missing)."""

    suspend: str
    sever: str
    cgroup_version: int | None = None
    reasons: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"suspend": self.suspend, "cgroup_version": self.cgroup_version, "sever": self.sever,
                "reasons": dict(self.reasons)}


def choose_mechanisms(caps: HostCapabilities, *, suspend: str = "auto", sever: str = "auto") -> MechanismChoice:
    """Choose each local stage's primitive on a machine with ``caps``.

    ``suspend``: ``auto`` (the cgroup v1 freezer, else cgroup v2 ``cgroup.freeze``, else SIGSTOP),
    ``cgroup`` (either freezer), ``cgroup-v1``, ``cgroup-v2`` or ``sigstop``. ``sever``: ``auto``
    (a network namespace, else the gateway), ``netns`` or ``gateway``. ``auto`` falls back and
    says why in ``reasons``; a primitive asked for by name that the machine lacks raises.

    Raises:
        ConfigError: an unknown choice.
        ContainmentUnavailableError: a primitive named explicitly is not offered (``reason`` says why).
    """
    if suspend not in _SUSPEND_CHOICES:
        raise ConfigError(f"suspend must be one of {', '.join(_SUSPEND_CHOICES)}, got {suspend!r}")
    if sever not in _SEVER_CHOICES:
        raise ConfigError(f"sever must be one of {', '.join(_SEVER_CHOICES)}, got {sever!r}")
    notes = dict(caps.notes)
    reasons: dict[str, str] = {}
    version: int | None = None
    if suspend in ("auto", "cgroup", "cgroup-v1") and caps.cgroup_v1_freezer:
        mech, version = "cgroup_freezer", 1
        reasons["suspend"] = f"cgroup v1 freezer at {caps.cgroup_v1_freezer}"
    elif suspend in ("auto", "cgroup", "cgroup-v2") and caps.cgroup_v2:
        mech, version = "cgroup_freezer", 2
        reasons["suspend"] = f"cgroup v2 cgroup.freeze under {caps.cgroup_v2}"
    elif suspend in ("auto", "sigstop"):
        mech = "sigstop"
        why = "; ".join(v for k, v in notes.items() if k.startswith("cgroup")) or "no writable cgroup freezer"
        reasons["suspend"] = ("SIGSTOP of the process group (asked for)" if suspend == "sigstop"
                              else f"SIGSTOP of the process group: {why}")
    else:
        why = notes.get("cgroup_v1" if suspend == "cgroup-v1" else "cgroup_v2", "") or "not offered on this machine"
        raise ContainmentUnavailableError(f"suspension by {suspend} is not available: {why}", stage="suspend",
                                          mechanism="cgroup_freezer", reason=why)
    if sever in ("auto", "netns") and caps.netns:
        sev = "netns"
        reasons["sever"] = "network namespace with a veth pair: link down" + (" and blackhole qdiscs" if caps.tc
                                                                               else "")
    elif sever == "netns":
        why = notes.get("netns", "") or "network namespaces are not available"
        raise ContainmentUnavailableError(f"severing by netns is not available: {why}", stage="sever",
                                          mechanism="netns", reason=why)
    else:
        sev = "gateway"
        reasons["sever"] = ("the gateway refuses every call of the trajectory (asked for)" if sever == "gateway"
                            else "the gateway refuses every call of the trajectory: "
                            + (notes.get("netns", "") or "network namespaces are not available"))
    return MechanismChoice(mech, sev, version, reasons)


TRIGGER_KINDS = ("egress_violation", "invariant_violation", "watchdog", "capability_request", "operator")


@dataclass(frozen=True)
class QuarantineTrigger:
    """What set a quarantine off (table 11's trigger row). ``kind``: one of
    :data:`TRIGGER_KINDS`; ``trajectory_id``: the trajectory to contain; ``evidence``: plain JSON
    (credentials are redacted when the tombstone is built); ``detected_at_sequence``: t*, the
    log's last position when it was detected (0 for an empty log).

    Raises ConfigError for an unknown kind, an empty trajectory id or a negative position."""

    kind: str
    trajectory_id: str
    detected_at_sequence: int
    evidence: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""

    def __post_init__(self) -> None:
        if self.kind not in TRIGGER_KINDS:
            raise ConfigError(f"trigger kind must be one of {', '.join(TRIGGER_KINDS)}, got {self.kind!r}")
        if not isinstance(self.trajectory_id, str) or not self.trajectory_id:
            raise ConfigError(f"trajectory_id must be a non-empty string, got {self.trajectory_id!r}")
        if type(self.detected_at_sequence) is not int or self.detected_at_sequence < 0:
            raise ConfigError(f"detected_at_sequence must be an integer >= 0, got {self.detected_at_sequence!r}")
        if not isinstance(self.evidence, Mapping):
            raise ConfigError(f"evidence must be a mapping, got {type(self.evidence).__name__}")


def taint_origin(record: Any, *, untrusted_tools: Collection[str] = (), detected_at: int | None = None
                 ) -> tuple[int, str]:
    """t_taint for a trajectory: ``(log position, reason)``.

    The earliest call of a tool in ``untrusted_tools`` (tools whose output is outside data: a
    fetched page, a pull request, an e-mail) that has a recorded result, taken at its intent's
    log position (its data may have come in any time after it was sent; the earlier bound taints
    more, never less), at or before ``detected_at`` (default: the record's last position). With
    none, the whole trajectory is suspect and t_taint is 1 (fail-safe: nothing the trajectory
    produced is trusted). ``record`` is a :class:`~kernel_lib.core.record.TrajectoryRecord`.

    Raises ConfigError for a ``detected_at`` that is negative or after the record's last position."""
    last = record.last_sequence_number
    t_star = last if detected_at is None else detected_at
    if type(t_star) is not int or not 0 <= t_star <= last:
        raise ConfigError(f"detected_at must be a log position 0..{last}, got {detected_at!r}")
    untrusted = set(untrusted_tools)
    firsts = []
    for op in record.operations.values():
        if op.tool not in untrusted:
            continue
        for att in op.attempts.values():
            if att.last_result_sequence is None or att.intent_sequence is None or att.intent_sequence > t_star:
                continue   # no result recorded: nothing of it reached the model
            firsts.append((att.intent_sequence, op.operation_id, op.tool))
    if firsts:
        seq, op_id, tool = min(firsts)
        return seq, f"untrusted data came in through {tool} ({op_id}), sent at #{seq}"
    return 1, ("no untrusted input is recorded before the detection: everything the trajectory produced is "
               "suspect (t_taint = 1)")


def tombstone(trigger: QuarantineTrigger, *, quarantine_id: str, taint_from_sequence: int,
              mechanisms: Mapping[str, str] | None = None, stage_ms: Mapping[str, float] | None = None,
              revoked_leases: Collection[str] = (), tainted_artifacts: Collection[str] = (), reason: str = "") -> Any:
    """The ``TrajectoryQuarantined`` payload for ``trigger`` (credentials in the evidence
    redacted, stage latencies rounded to microseconds).

    Raises ConfigError when t_taint is after the detection or a field cannot be logged."""
    from kernel_lib.core.events import TrajectoryQuarantined, redact_secrets

    evidence, redacted = redact_secrets(dict(trigger.evidence))
    if redacted:
        evidence = {**evidence, "redacted_paths": list(redacted)}
    try:
        return TrajectoryQuarantined(
            quarantine_id=quarantine_id, trigger_kind=trigger.kind, trigger=evidence,
            detected_at_sequence=trigger.detected_at_sequence, taint_from_sequence=taint_from_sequence,
            mechanisms=dict(mechanisms or {}), stage_ms={k: round(float(v), 3) for k, v in (stage_ms or {}).items()},
            revoked_leases=list(revoked_leases), tainted_artifacts=list(tainted_artifacts),
            reason=(reason or trigger.reason)[:1000])
    except ValueError as exc:   # pydantic's ValidationError
        raise ConfigError(f"the quarantine tombstone cannot be logged: {' '.join(str(exc).split())[:300]}") from None


def quarantines_of(record: Any) -> list[dict[str, Any]]:
    """Every quarantine tombstone of the record, in log order (each a recovery record: the
    payload's fields plus ``sequence_number``)."""
    return [r for r in record.recovery_records if r.get("event_type") == "TrajectoryQuarantined"]


def quarantine_of(record: Any) -> dict[str, Any] | None:
    """The trajectory's quarantine: the first tombstone, with ``taint_from_sequence`` the
    earliest any tombstone names (a later one may widen the taint, never narrow it); None when
    the trajectory is not quarantined."""
    found = quarantines_of(record)
    if not found:
        return None
    return {**found[0], "taint_from_sequence": min(r["taint_from_sequence"] for r in found),
            "tombstones": len(found)}


def refuse_if_quarantined(record: Any) -> None:
    """Raise :class:`~kernel_lib.errors.TrajectoryQuarantinedRefusal` when the record holds a
    quarantine tombstone: a worker calls it before resuming or dispatching anything."""
    q = quarantine_of(record)
    if q is not None:
        raise TrajectoryQuarantinedRefusal(
            f"trajectory {record.trajectory_id} is quarantined ({q['trigger_kind']}, {q['quarantine_id']} at "
            f"#{q['sequence_number']}); its output from #{q['taint_from_sequence']} on is tainted and it is neither "
            "resumed nor dispatched", quarantine_id=q["quarantine_id"], taint_from_sequence=q["taint_from_sequence"])


#: Example 0.2's givens as the chapter states them (milliseconds, tokens per second).
EXAMPLE_0_2_GIVENS: dict[str, float] = {
    "policy_check_ms": 1.1, "egress_drop_ms": 0.4, "freeze_ms": 1.2, "idp_revocation_ms": 42.0,
    "taint_broadcast_ms": 3.5, "decode_tokens_per_s": 50.0,
}


@dataclass(frozen=True)
class ContainmentTimeline:
    """Example 0.2's containment timeline, milliseconds from the moment the model finished
    decoding the offending call (t = 0).

    ``egress_sealed_ms``, ``frozen_ms``, ``taint_ms``, ``revoked_ms``: when each stage is done;
    ``local_seal_ms``: when both local stages are (the later of the two); ``token_ms``: one
    decoded token; ``tokens_before_seal``: whole tokens the model could decode before the local
    seal; ``sealed_within_one_token``: the seal comes before the next token; ``exposure_ms``: how
    long the token stays valid after the local seal (harmless: nothing can use it).
    ``wave2_start_ms``: when stages 2 and 4 start (the policy check with ``reading="concurrent"``,
    the local seal with ``"sequential_waves"``)."""

    reading: str
    policy_check_ms: float
    egress_sealed_ms: float
    frozen_ms: float
    local_seal_ms: float
    wave2_start_ms: float
    taint_ms: float
    revoked_ms: float
    token_ms: float
    tokens_before_seal: int
    sealed_within_one_token: bool
    exposure_ms: float

    def events(self) -> list[dict[str, Any]]:
        """The timeline's events in time order: ``[{t_ms, stage, event}]``."""
        rows = [(self.policy_check_ms, "trigger", "policy check refuses the destination; quarantine declared"),
                (self.egress_sealed_ms, "sever", "egress dropped at the sandbox's interface"),
                (self.frozen_ms, "suspend", "process tree frozen"),
                (self.taint_ms, "taint", "taint ledger updated: peers blocked"),
                (self.revoked_ms, "revoke", "session token revoked at the identity provider")]
        return [{"t_ms": t, "stage": s, "event": e} for t, s, e in sorted(rows, key=lambda r: r[0])]

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"events": self.events()}


def _ms(name: str, v: Any, *, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ConfigError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {v!r}")
    return float(v)


def containment_timeline(*, policy_check_ms: float, egress_drop_ms: float, freeze_ms: float,
                         idp_revocation_ms: float, taint_broadcast_ms: float, decode_tokens_per_s: float,
                         reading: str = "concurrent") -> ContainmentTimeline:
    """Example 0.2's arithmetic from its givens (ms; tokens per second).

    The policy check ends at ``policy_check_ms``; stages 1 and 3 start then, side by side, so
    egress is sealed at check + drop and the tree frozen at check + freeze. With
    ``reading="concurrent"`` (the chapter's numbers) stages 2 and 4 start at the check too; with
    ``"sequential_waves"`` they start once the local seal is complete. One token takes
    1000 / ``decode_tokens_per_s`` ms.

    Raises ConfigError for a negative or non-finite given, a zero decode rate, or an unknown reading."""
    check = _ms("policy_check_ms", policy_check_ms)
    drop, freeze = _ms("egress_drop_ms", egress_drop_ms), _ms("freeze_ms", freeze_ms)
    idp, taint = _ms("idp_revocation_ms", idp_revocation_ms), _ms("taint_broadcast_ms", taint_broadcast_ms)
    rate = _ms("decode_tokens_per_s", decode_tokens_per_s, positive=True)
    if reading not in ("concurrent", "sequential_waves"):
        raise ConfigError(f"reading must be 'concurrent' or 'sequential_waves', got {reading!r}")
    sealed, frozen = check + drop, check + freeze
    local = max(sealed, frozen)
    wave2 = check if reading == "concurrent" else local
    token = 1000.0 / rate
    revoked = wave2 + idp
    return ContainmentTimeline(reading=reading, policy_check_ms=check, egress_sealed_ms=sealed, frozen_ms=frozen,
                               local_seal_ms=local, wave2_start_ms=wave2, taint_ms=wave2 + taint, revoked_ms=revoked,
                               token_ms=token, tokens_before_seal=math.floor(local / token + 1e-9),
                               sealed_within_one_token=local < token, exposure_ms=max(0.0, revoked - local))
