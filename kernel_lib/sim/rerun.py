"""Re-running a recorded trajectory on a serving path that is not bit-stable (§11.9, "temperature zero").

A greedy call reproduces its recorded output only with some probability per call; eq. 1.1 compounds
that over the horizon (:func:`kernel_lib.history.replay.rerun_match_probability`). This module
simulates the re-runs on the seeded stand-in (:class:`~kernel_lib.sim.model.StochasticModel`):

* :class:`FlippingServer` — the modelled serving path: the recorded computation, or, for a call
  marked flipped, the nearest other seed whose reply differs (a numerically different kernel path);
* :func:`record_agent` — a trajectory of ``horizon_turns`` model calls through the real dispatch gate,
  each prompt carrying every earlier reply (as an agent's context does);
* :func:`simulate_reruns` — many re-runs with each call flipped independently with probability
  ``1 - per_call_reproduce``: how many reproduce the recording end to end, where the first flip
  falls, and how much of the rest differs after it (every later prompt differs, so later calls
  change far more often than the flip rate alone).

Everything is deterministic for a seed: the same arguments give the same counts.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from numbers import Integral

from kernel_lib.core.events import TaskStarted
from kernel_lib.errors import ConfigError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ModelCall, ModelReply
from kernel_lib.log import FailureDomain, LogStore, MemoryStore, TrajectoryLog
from kernel_lib.sim.model import MODEL_NAME, StochasticModel

__all__ = ["MAX_RERUN_CALLS", "FlippingServer", "RerunSimulation", "record_agent", "simulate_reruns"]

#: Bound on trials × horizon, so that a typo cannot start an hours-long simulation.
MAX_RERUN_CALLS = 5_000_000


class FlippingServer:
    """The modelled serving path of a re-run, a pure function of ``(seed, prompt, flipped)``.

    ``serve(prompt, False)`` is the recorded computation, ``StochasticModel(seed).reply(prompt)``;
    ``serve(prompt, True)`` is the reply of the nearest seed ``seed + k`` (k = 1, 2, ...) whose text
    differs. Replies are cached (the cache only saves time)."""

    def __init__(self, seed: int, *, max_cache: int = 4096):
        self.seed = int(seed)
        self._cache: dict[tuple[str, bool], ModelReply] = {}
        self._max_cache = max_cache

    def serve(self, prompt: str, flipped: bool) -> ModelReply:
        key = (prompt, bool(flipped))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        reply = StochasticModel(self.seed).reply(prompt)
        if flipped:
            recorded = reply
            for k in itertools.count(1):
                reply = StochasticModel(self.seed + k).reply(prompt)
                if reply.reply != recorded.reply:
                    break
        if len(self._cache) >= self._max_cache:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = reply
        return reply


def _whole(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise ConfigError(f"{name} must be a whole number >= {low}, got {value!r}")
    return int(value)


def record_agent(server: FlippingServer, first_prompt: str, horizon_turns: int, policy: AdmissionPolicy,
                 task: TaskStarted, *, grant_id: str, flipped_calls=frozenset(), trajectory_id: str = "traj_rerun",
                 store: LogStore | None = None, cost_bound_usd: float = 0.5) -> tuple[LogStore, list[str]]:
    """Record ``horizon_turns`` model calls ``call_01``, ``call_02``, ... through the dispatch gate;
    call ``t``'s prompt is ``first_prompt`` and every earlier reply, one per line.

    Args:
        server: the serving path; calls whose turn is in ``flipped_calls`` are served flipped.
        policy, task, grant_id: admission policy, the task started, and the grant each call uses
            (it must allow :data:`~kernel_lib.sim.model.MODEL_NAME`).
        store: where to record (default: a fresh MemoryStore; the log has ``must_survive=NONE``).

    Returns: ``(store, replies)`` with the reply text of every call, in order.

    Raises: ConfigError: a bad ``horizon_turns``; AdmissionDenied: the grant does not allow the model.
    """
    n_ = _whole("horizon_turns", horizon_turns, 1)
    store = store if store is not None else MemoryStore()
    gate = DispatchGate(TrajectoryLog(store, trajectory_id, must_survive=FailureDomain.NONE), policy)
    gate.start(task)
    history, replies = [first_prompt], []
    for t in range(1, n_ + 1):
        r = gate.run_model(ModelCall(f"call_{t:02d}", MODEL_NAME, "\n".join(history), grant_id, cost_bound_usd),
                           lambda ctx, t=t: server.serve(ctx.delivered_input, t in flipped_calls))
        history.append(r.reply)
        replies.append(r.reply)
    return store, replies


@dataclass(frozen=True)
class RerunSimulation:
    """What :func:`simulate_reruns` found.

    Fields:
        trials: re-runs simulated. identical: those whose every reply equals the recording.
        first_flip: for each re-run that diverged, the turn of its first flipped call.
        later_changed: for each diverged re-run with calls after its first flip, the fraction of
            those later calls whose reply differs from the recording.
    """

    trials: int
    identical: int
    first_flip: tuple[int, ...]
    later_changed: tuple[float, ...]

    @property
    def identical_fraction(self) -> float:
        return self.identical / self.trials


def simulate_reruns(server: FlippingServer, recorded_replies: list[str], first_prompt: str, *,
                    per_call_reproduce: float, trials: int, seed: int) -> RerunSimulation:
    """Simulate ``trials`` re-runs of a recording of ``len(recorded_replies)`` calls.

    In each re-run every call is flipped independently when ``random.Random(seed).random()`` (one
    draw per call, re-runs in order) is ``>= per_call_reproduce``; the prompts are rebuilt from the
    re-run's own replies, as in :func:`record_agent`.

    Raises: ConfigError: ``per_call_reproduce`` outside [0, 1], bad counts, an empty recording, or
    more than :data:`MAX_RERUN_CALLS` calls in all.
    """
    horizon = len(recorded_replies)
    n_ = _whole("trials", trials, 1)
    if horizon < 1:
        raise ConfigError("recorded_replies is empty")
    if n_ * horizon > MAX_RERUN_CALLS:
        raise ConfigError(f"{n_} trials x {horizon} calls exceeds {MAX_RERUN_CALLS:,}")
    if isinstance(per_call_reproduce, bool) or not isinstance(per_call_reproduce, (int, float)) \
            or not 0 <= per_call_reproduce <= 1:
        raise ConfigError(f"per_call_reproduce must be a probability in [0, 1], got {per_call_reproduce!r}")
    rng = random.Random(_whole("seed", seed, 0))
    identical, first_flip, later_changed = 0, [], []
    for _ in range(n_):
        flips = {t for t in range(1, horizon + 1) if rng.random() >= per_call_reproduce}
        history, replies = [first_prompt], []
        for t in range(1, horizon + 1):
            replies.append(server.serve("\n".join(history), t in flips).reply)
            history.append(replies[-1])
        if replies == recorded_replies:
            identical += 1
        else:
            f = min(flips)
            first_flip.append(f)
            after = list(zip(replies[f:], recorded_replies[f:]))
            if after:
                later_changed.append(sum(a != b for a, b in after) / len(after))
    return RerunSimulation(trials=n_, identical=identical, first_flip=tuple(first_flip),
                           later_changed=tuple(later_changed))
