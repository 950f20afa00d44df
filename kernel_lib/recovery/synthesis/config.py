"""The four runtime configurations of table 14, as flags of one harness (Failure Recovery, "Fault
injection benchmarks", table 14).

The chapter names four architectures (unmanaged script, WAL-only persistence, saga-only rollback,
the synthesized runtime) and describes in words how each meets a network partition, a crash, a
tool exception and an irreversible mutation. It does not say what "retries blindly" or "execution
stalls" mean operationally; :class:`RuntimeConfig` states our reading as seven flags and each
configuration carries its semantics as text (the scorecard prints it beside the numbers):

==========================  ===========  ==========  ===========  =============
flag                        unmanaged    wal_only    saga_only    synthesized
==========================  ===========  ==========  ===========  =============
``durable_log``             no           yes         no           yes
``reconciliation_probe``    no           no          no           yes
``saga_compensation``       no           no          yes          yes
``forward_repair_k``        0            0           0            2 (K_repair)
``pivot_gate``              no           no          no           yes
``schema_validation``       no           no          no           yes
``retry_blindly``           no           no          yes          no
==========================  ===========  ==========  ===========  =============

A log that is not durable still exists while the process lives (the runner keeps its records in
memory); a process kill loses it. Pure data; :class:`~kernel_lib.errors.ConfigError` for an
unknown name or an inconsistent configuration.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kernel_lib.errors import ConfigError

__all__ = ["RuntimeConfig", "CONFIGS", "CONFIG_NAMES", "config_named"]


@dataclass(frozen=True)
class RuntimeConfig:
    """One runtime configuration of table 14 (see the module docstring).

    Args:
        name: the configuration's name (``unmanaged``, ``wal_only``, ``saga_only``,
            ``synthesized``, or your own).
        durable_log: the trajectory log survives a process kill (intent durable before dispatch);
            False: it lives in process memory only.
        reconciliation_probe: an attempt in doubt (a dropped answer, a kill) is settled by the
            service's status lookup under the logged operation id before anything is re-sent.
        saga_compensation: a failed trajectory unwinds its compensation stack Σ.
        forward_repair_k: K_repair, forward repairs per failed step (0: none; 1..3).
        pivot_gate: the deterministic verification gate runs before the tier III step and the
            crossing needs its passing verdict.
        schema_validation: a malformed tool call is rejected before dispatch and re-sampled.
        retry_blindly: a step whose answer was lost is sent again as a new request (new
            operation id and idempotency key: a duplicate when the first had applied).
        semantics: the stated semantics, one sentence per fault kind.
    """

    name: str
    durable_log: bool
    reconciliation_probe: bool
    saga_compensation: bool
    forward_repair_k: int
    pivot_gate: bool
    schema_validation: bool
    retry_blindly: bool
    semantics: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"a runtime configuration needs a name, got {self.name!r}")
        for f in ("durable_log", "reconciliation_probe", "saga_compensation", "pivot_gate", "schema_validation",
                  "retry_blindly"):
            if not isinstance(getattr(self, f), bool):
                raise ConfigError(f"{self.name}: {f} must be True or False, got {getattr(self, f)!r}")
        k = self.forward_repair_k
        if type(k) is not int or not 0 <= k <= 3:
            raise ConfigError(f"{self.name}: forward_repair_k must be an integer 0..3 (K_repair), got {k!r}")
        if self.retry_blindly and self.reconciliation_probe:
            raise ConfigError(f"{self.name}: retry_blindly and reconciliation_probe exclude each other (a probe "
                              "settles a lost answer; a blind retry re-sends without asking)")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["semantics"] = dict(self.semantics)
        return d


_UNMANAGED = RuntimeConfig(
    "unmanaged", durable_log=False, reconciliation_probe=False, saga_compensation=False, forward_repair_k=0,
    pivot_gate=False, schema_validation=False, retry_blindly=False, semantics=(
        ("log", "none: the records live in process memory only"),
        ("network_drop", "unhandled: the trajectory fails with whatever it created left behind"),
        ("tool_exception", "aborts: nothing is undone"),
        ("process_kill", "total loss: every committed turn is lost (RPO = all), resources leak, no recovery"),
        ("format_corruption", "the script crashes parsing the call"),
        ("pivot", "no gate"),
    ))
_WAL_ONLY = RuntimeConfig(
    "wal_only", durable_log=True, reconciliation_probe=False, saga_compensation=False, forward_repair_k=0,
    pivot_gate=False, schema_validation=False, retry_blindly=False, semantics=(
        ("log", "durable, intent before dispatch"),
        ("network_drop", "logged; the step is in doubt and without a probe the run halts safely"),
        ("tool_exception", "logged; execution stalls (nothing undone)"),
        ("process_kill", "resumed from the log (RPO 0); a step left in doubt halts (no probe)"),
        ("format_corruption", "the malformed call is logged and the run halts"),
        ("pivot", "no gate"),
    ))
_SAGA_ONLY = RuntimeConfig(
    "saga_only", durable_log=False, reconciliation_probe=False, saga_compensation=True, forward_repair_k=0,
    pivot_gate=False, schema_validation=False, retry_blindly=True, semantics=(
        ("log", "in process memory only"),
        ("network_drop", "blind retry as a new request: a duplicate when the first had applied"),
        ("tool_exception", "full rollback (Σ unwound); the trajectory fails"),
        ("process_kill", "memory lost: Σ is gone, resources leak, unrecoverable"),
        ("format_corruption", "treated as a tool failure: rollback"),
        ("pivot", "tier order enforced by the saga, no gate"),
    ))
_SYNTHESIZED = RuntimeConfig(
    "synthesized", durable_log=True, reconciliation_probe=True, saga_compensation=True, forward_repair_k=2,
    pivot_gate=True, schema_validation=True, retry_blindly=False, semantics=(
        ("log", "durable, intent before dispatch"),
        ("network_drop", "reconciliation probe with the logged operation id; re-sent under the same key only when "
                         "the service never applied it"),
        ("tool_exception", "forward repair, at most K_repair = 2 per step under the anti-spin bound; on "
                           "exhaustion the saga compensates"),
        ("process_kill", "resumed from the log: in doubt settled by the probe, Σ rebuilt by the fold"),
        ("format_corruption", "schema validation rejects the call before dispatch; the model is re-sampled "
                              "(bounded)"),
        ("pivot", "deterministic verification gate before the crossing"),
    ))

#: Table 14's configurations by name, in the table's order.
CONFIGS: dict[str, RuntimeConfig] = {c.name: c for c in (_UNMANAGED, _WAL_ONLY, _SAGA_ONLY, _SYNTHESIZED)}
CONFIG_NAMES: tuple[str, ...] = tuple(CONFIGS)


def config_named(name: str) -> RuntimeConfig:
    """The configuration called ``name`` (ConfigError naming the known ones otherwise)."""
    c = CONFIGS.get(name)
    if c is None:
        raise ConfigError(f"unknown runtime configuration {name!r} (known: {', '.join(CONFIG_NAMES)})")
    return c
