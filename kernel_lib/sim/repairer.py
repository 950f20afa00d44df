"""A seeded repair-pass stand-in, fallback models with prices, and the measured break-even of
forward repair (Failure Recovery, "Forward Recovery", Napkin Math 0.2, the anti-spin invariant).

:class:`SeededRepairer` is a :data:`~kernel_lib.recovery.repair.Repairer`: given the diagnostic
frame it returns the corrected arguments with the remedy's success probability, and otherwise
arguments that fail again, either with the **same** error (``failure="spin"``: the frame's own
arguments, so σ repeats) or with a **different** one each time (``failure="drift"``: the n-th
drifted arguments, which the scenario arranges to fail differently). The draw is a function of
(seed, sub-transaction, repair number, remedy and its detail) only, so a re-run after a crash
draws the same. :class:`StandInModel` is a model with its own price and success rate, for the
``model_fallback`` remedy (and for pricing the others).

:func:`measure_break_even` runs N seeded trials of the deployment saga whose last step
(``publish_dns``) fails semantically (the domain is taken) and measures, on the twins' virtual
clock and from the declared prices, what "repair first" (one repair of success probability p,
then unwind and rerun if it fails) and "unwind and rerun" cost from the failure on; it returns
both means next to the computed E[forward] = c_r + (1 − p)(U + R) and p* = c_r/(U + R).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kernel_lib.errors import ConfigError, RecoveryTerminated, StepFailedError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.policy import PolicyConfig, RemedyOption, RepairCosts, economics
from kernel_lib.recovery.repair import RepairFrame, RepairLoop, RepairLoopConfig, ToolCost
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
from kernel_lib.sim.deployment import DEPLOYMENT_STEPS, TAKEN_DOMAIN, deployment_registry
from kernel_lib.sim.saga_sweep import GRANT_ID, start_task
from kernel_lib.sim.services import ACTIONS, TwinFleet

__all__ = ["repair_draw", "StandInModel", "SeededRepairer", "FIXED_DOMAIN", "drift_domain", "dns_repairer",
           "deployment_tool_costs", "BreakEvenMeasurement", "measure_break_even"]

#: The domain a successful repair of the taken-domain failure proposes.
FIXED_DOMAIN = "api-2.example.test"


def drift_domain(n: int) -> str:
    """The n-th drifted domain (a repair that fails with another error: another taken name)."""
    return f"api-drift{n}.example.test"


def _p(name: str, v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not (0.0 <= v <= 1.0):
        raise ConfigError(f"{name} must be a probability in [0, 1], got {v!r}")
    return float(v)


def repair_draw(seed: int, step_id: str, repair_number: int, remedy: str, detail: Mapping[str, Any]) -> float:
    """The stand-in's uniform draw in [0, 1) for one repair pass (a function of its arguments only)."""
    key = f"{seed}\x00{step_id}\x00{repair_number}\x00{remedy}\x00{sorted(detail.items())!r}"
    return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")).random()


@dataclass(frozen=True)
class StandInModel:
    """A model stand-in with its own price (USD per million input/output tokens), decode speed
    (output tokens per s) and repair success rate ``success_p``."""
    name: str
    usd_per_mtok_in: float
    usd_per_mtok_out: float
    success_p: float
    decode_tokens_per_s: float = 50.0

    def __post_init__(self) -> None:
        _p(f"{self.name}.success_p", self.success_p)
        for n in ("usd_per_mtok_in", "usd_per_mtok_out", "decode_tokens_per_s"):
            v = getattr(self, n)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (n == "decode_tokens_per_s"
                                                                                     and v == 0):
                raise ConfigError(f"{self.name}.{n} must be a finite number >= 0 (> 0 for a speed), got {v!r}")

    def repair_costs(self, input_tokens: int, output_tokens: int, *, validation_s: float = 0.5) -> RepairCosts:
        """One repair pass on this model: tokens, USD, seconds (decode + ``validation_s``)."""
        usd = (input_tokens * self.usd_per_mtok_in + output_tokens * self.usd_per_mtok_out) / 1e6
        return RepairCosts(tokens=input_tokens + output_tokens, usd=usd,
                           s=output_tokens / self.decode_tokens_per_s + validation_s)

    def remedy(self, name: str, input_tokens: int, output_tokens: int, *, validation_s: float = 0.5,
               success_p: float | None = None, **detail: Any) -> RemedyOption:
        """A :class:`RemedyOption` priced on this model (``detail`` gains ``model``)."""
        return RemedyOption(name, self.repair_costs(input_tokens, output_tokens, validation_s=validation_s),
                            success_p, {"model": self.name, **detail})


@dataclass
class SeededRepairer:
    """A seeded repair pass (see the module docstring).

    Args:
        fix: the corrected arguments for a frame.
        success_p: one probability, or one per remedy name; ``model_fallback`` uses the
            :class:`StandInModel` named by the frame's ``remedy_detail["model"]`` when ``models``
            has it.
        seed: the draw's seed.
        failure: ``"spin"`` (the same arguments again) or ``"drift"`` (``drift(frame, n)``, n = the
            repair number).
        drift: the n-th drifted arguments (required for ``"drift"``).
        models: the fallback models by name.
        on_call: called with each frame (a virtual clock's advance by the pass's time, a counter).
    """
    fix: Callable[[RepairFrame], dict[str, Any]]
    success_p: float | Mapping[str, float]
    seed: int = 0
    failure: Literal["spin", "drift"] = "spin"
    drift: Callable[[RepairFrame, int], dict[str, Any]] | None = None
    models: Mapping[str, StandInModel] = field(default_factory=dict)
    on_call: Callable[[RepairFrame], Any] | None = None
    frames: list[RepairFrame] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.failure not in ("spin", "drift"):
            raise ConfigError(f"failure must be 'spin' or 'drift', got {self.failure!r}")
        if self.failure == "drift" and self.drift is None:
            raise ConfigError("failure='drift' needs drift(frame, n), the n-th differently failing arguments")
        if isinstance(self.success_p, Mapping):
            for k, v in self.success_p.items():
                _p(f"success_p[{k}]", v)
        else:
            _p("success_p", self.success_p)

    def p_for(self, frame: RepairFrame) -> float:
        """The success probability of this frame's remedy."""
        model = self.models.get(str(frame.remedy_detail.get("model")))
        if frame.remedy == "model_fallback" and model is not None:
            return model.success_p
        if isinstance(self.success_p, Mapping):
            return float(self.success_p.get(frame.remedy, 0.0))
        return float(self.success_p)

    def succeeds(self, frame: RepairFrame) -> bool:
        """Whether this frame's repair works: a uniform draw seeded by (seed, sub-transaction,
        repair number, remedy, its detail), below :meth:`p_for`. Pure."""
        return repair_draw(self.seed, frame.step_id, frame.repair_number, frame.remedy,
                           frame.remedy_detail) < self.p_for(frame)

    def __call__(self, frame: RepairFrame) -> dict[str, Any]:
        self.frames.append(frame)
        if self.on_call is not None:
            self.on_call(frame)
        if self.succeeds(frame):
            return dict(self.fix(frame))
        if self.failure == "spin":
            return dict(frame.arguments)
        assert self.drift is not None
        return dict(self.drift(frame, frame.repair_number))


def dns_repairer(success_p: float | Mapping[str, float], *, seed: int = 0, failure: Literal["spin", "drift"] = "spin",
                 models: Mapping[str, StandInModel] | None = None,
                 on_call: Callable[[RepairFrame], Any] | None = None) -> SeededRepairer:
    """A :class:`SeededRepairer` for the taken-domain failure of ``publish_dns``: the fix proposes
    :data:`FIXED_DOMAIN`; drift proposes :func:`drift_domain` (n) (the scenario marks those taken)."""
    return SeededRepairer(lambda f: {**f.arguments, "name": FIXED_DOMAIN}, success_p, seed, failure,
                          (lambda f, n: {**f.arguments, "name": drift_domain(n)}), dict(models or {}), on_call)


def deployment_tool_costs(*, model_s_per_step: float = 9.0, usd_per_step: float = 0.0324) -> dict[str, ToolCost]:
    """Declared :class:`ToolCost` of every action of the services: forward = the action's duration
    plus ``model_s_per_step`` of model work billed ``usd_per_step``; compensation = the releasing
    action's duration (no model work). Defaults: about Napkin Math 0.2's forward figures spread
    over five steps (46 s, $0.162)."""
    rel = {a.releases: a for a in ACTIONS.values() if a.releases}
    out = {}
    for a in ACTIONS.values():
        comp = rel.get(a.creates) if a.creates and not a.pivot else None
        out[a.name] = ToolCost(a.duration_s + (0.0 if a.releases else model_s_per_step),
                               0.0 if a.releases else usd_per_step, comp.duration_s if comp else 0.0, 0.0)
    return out


@dataclass(frozen=True)
class BreakEvenMeasurement:
    """Measured and computed costs of the two strategies from the failure on (s and USD).
    ``repair_first_*``/``unwind_rerun_*``: measured means over ``trials``; ``computed_*``: the
    napkin's formulas on the declared figures; ``p_star_*``: c_r/(U + R); ``repairs_succeeded``:
    how many trials' repair worked (the realized p)."""
    p: float
    trials: int
    repairs_succeeded: int
    repair_first_s: float
    repair_first_usd: float
    unwind_rerun_s: float
    unwind_rerun_usd: float
    computed_forward_s: float
    computed_forward_usd: float
    computed_backward_s: float
    computed_backward_usd: float
    p_star_s: float
    p_star_usd: float

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


_STEPS = DEPLOYMENT_STEPS   # provision_sandbox, reserve_ip, compile_binary, bind_firewall, publish_dns


def _args(tool: str, outs: dict[str, Any], domain: str) -> dict[str, Any]:
    if tool == "provision_sandbox":
        return {"image": "deploy-base", "vcpus": 2}
    if tool == "reserve_ip":
        return {"region": "eu-west-1"}
    if tool == "compile_binary":
        return {"sandbox_id": outs["provision_sandbox"]["sandbox_id"], "target": "api"}
    if tool == "bind_firewall":
        return {"sandbox_id": outs["provision_sandbox"]["sandbox_id"], "ip_id": outs["reserve_ip"]["ip_id"],
                "ports": [443]}
    return {"name": domain, "ip_id": outs["reserve_ip"]["ip_id"]}


def measure_break_even(p: float, *, trials: int = 200, seed: int = 0, model_s_per_step: float = 9.0,
                       usd_per_step: float = 0.0324, repair_input_tokens: int = 2390, repair_output_tokens: int = 180,
                       model: StandInModel | None = None, simulate_all: bool = False) -> BreakEvenMeasurement:
    """Run ``trials`` seeded trials of each strategy on the twins (virtual clock) and measure them.

    The saga is :data:`~kernel_lib.sim.deployment.DEPLOYMENT_STEPS`; its last step publishes a
    taken domain (409, a semantic fault). From that failure on:

    * **repair first**: one repair (K_repair = 1, the remedy offered as certain so the policy
      always tries it; the stand-in succeeds with probability ``p``); the repair pass takes the
      model's decode time, the repaired call runs on the twin; a failed repair is stopped by the
      bound, and the saga is unwound and rerun with the right domain;
    * **unwind and rerun**: unwind at once, rerun.

    Time is the twins' virtual clock (action durations, plus ``model_s_per_step`` per forward step
    and the repair pass's decode time); dollars are ``usd_per_step`` per forward step plus the
    repair pass's price. The computed side uses U = Σ compensation time, R = the rerun of every
    step including the last, c_r = decode + the repaired step's run. Raises :class:`ConfigError`
    for p outside [0, 1] or fewer than one trial.

    The twins and the virtual clock are deterministic, so a trial's cost depends only on whether
    the stand-in's seeded draw succeeds; by default each distinct path (repair worked, repair
    failed, unwind at once) is simulated once on the twins and reused for every trial with the
    same draw (N = 200 in well under a second after the first few runs). ``simulate_all=True``
    simulates every trial in full (``tests/test_forward_repair.py`` checks both agree)."""
    _p("p", p)
    if type(trials) is not int or trials < 1:
        raise ConfigError(f"trials must be an integer >= 1, got {trials!r}")
    model = model or StandInModel("stand-in", 3.0, 15.0, p)
    last = ACTIONS[_STEPS[-1]]
    decode_s = repair_output_tokens / model.decode_tokens_per_s
    costs = model.repair_costs(repair_input_tokens, repair_output_tokens, validation_s=last.duration_s)
    tool_costs = deployment_tool_costs(model_s_per_step=model_s_per_step, usd_per_step=usd_per_step)
    unwind_s = math.fsum(tool_costs[t].compensation_s for t in _STEPS[:-1])
    rerun_s = math.fsum(tool_costs[t].forward_s for t in _STEPS)
    rerun_usd = math.fsum(tool_costs[t].forward_usd for t in _STEPS)
    e = economics(costs, p, unwind_s=unwind_s, unwind_usd=0.0, rerun_s=rerun_s, rerun_usd=rerun_usd)
    policy = PolicyConfig((RemedyOption("error_feedback", costs, 1.0, {"model": model.name}),), k_repair=1)
    cfg = RepairLoopConfig(policy, tool_costs)
    results: dict[str, list[tuple[float, float]]] = {"repair": [], "unwind": []}
    succeeded = 0
    paths: dict[tuple[str, bool], tuple[float, float, bool]] = {}
    for i in range(trials):
        trial_seed = seed * 1_000_003 + i
        for strategy in ("repair", "unwind"):
            # the twins are deterministic: a trial's path depends only on the stand-in's draw, so
            # unless every trial is simulated (``simulate_all``) each path runs once on the twins
            draw = (strategy == "repair"
                    and repair_draw(trial_seed, "deploy.T5", 1, "error_feedback", {"model": model.name}) < p)
            key = (strategy, draw)
            if simulate_all or key not in paths:
                paths[key] = _trial(strategy, p, trial_seed, cfg, model_s_per_step, usd_per_step, decode_s)
            s, usd, ok = paths[key]
            results[strategy].append((s, usd))
            succeeded += int(ok and strategy == "repair")

    def mean(xs: list[float]) -> float:
        return math.fsum(xs) / len(xs)
    return BreakEvenMeasurement(
        p, trials, succeeded, mean([x[0] for x in results["repair"]]), mean([x[1] for x in results["repair"]]),
        mean([x[0] for x in results["unwind"]]), mean([x[1] for x in results["unwind"]]),
        e.forward_s, e.forward_usd, e.backward_s, e.backward_usd, e.p_star_s, e.p_star_usd)


def _trial(strategy: str, p: float, seed: int, cfg: RepairLoopConfig, model_s: float, usd_per_step: float,
           decode_s: float) -> tuple[float, float, bool]:
    fleet = TwinFleet(simulate_durations=True)
    fleet.taken_name(TAKEN_DOMAIN)
    tid = f"be-{strategy}-{seed}"
    reg = deployment_registry()
    gate = DispatchGate(TrajectoryLog(MemoryStore(), tid, must_survive="none"),
                        AdmissionPolicy({GRANT_ID: set(reg.names())}), coalesce_admission=True)
    start_task(gate, tid)
    endpoints = fleet.client(tid)
    runner = SagaRunner(gate, reg, endpoints, saga_id="deploy", grant_id=GRANT_ID, retry=RetryPolicy(max_attempts=1),
                        sleep=fleet.clock.advance)
    outs: dict[str, Any] = {}
    for tool in _STEPS[:-1]:
        outs[tool] = runner.step(tool, _args(tool, outs, TAKEN_DOMAIN))
    spent_usd = 0.0
    marks: list[float] = []
    repaired = False
    if strategy == "repair":
        def think(frame: RepairFrame) -> None:   # the failure is behind us: measure from here
            marks.append(fleet.clock())
            fleet.clock.advance(decode_s)
        loop = RepairLoop(runner, cfg, dns_repairer(p, seed=seed, on_call=think))
        try:
            loop.step(_STEPS[-1], _args(_STEPS[-1], outs, TAKEN_DOMAIN))
            repaired = True
        except RecoveryTerminated:
            pass
        spent_usd += math.fsum(h.charged("usd") for h in loop.repairs().values())
    else:
        try:
            runner.step(_STEPS[-1], _args(_STEPS[-1], outs, TAKEN_DOMAIN))
        except StepFailedError:   # the 409: measured from here
            pass
        marks.append(fleet.clock())
        runner.unwind("unwind and rerun")
    if not repaired:
        rerun = SagaRunner(gate, reg, endpoints, saga_id="rerun", grant_id=GRANT_ID,
                           retry=RetryPolicy(max_attempts=1), sleep=fleet.clock.advance)
        outs = {}
        for tool in _STEPS:
            fleet.clock.advance(model_s)
            spent_usd += usd_per_step
            outs[tool] = rerun.step(tool, _args(tool, outs, FIXED_DOMAIN))
        rerun.complete()
    return fleet.clock() - marks[0], spent_usd, repaired
