"""Napkin Math 0.3 measured on the live looping agent: what its loop cost in tokens and dollars up
to the watchdog's first intervention, and what the same loop would cost left to the turn ceiling.

Failure Recovery, "Semantic Watchdog Timers", Napkin Math 0.3 (the exercise: :mod:`.nm0_3`).
:func:`measure_loop` runs :func:`kernel_lib.live.looping_agent.run_looping_agent` (a seeded policy
caught in figure 3's flip-flop on a real workspace, every model call through the dispatch gate),
then reads the cost off its log with :func:`kernel_lib.live.looping_agent.loop_cost`: the
tokens each model turn was sent and wrote (counted by
:func:`~kernel_lib.live.looping_agent.count_tokens`, a word-and-punctuation count: no model
tokenizer is installed), summed over the looping turns up to the first intervention, and the
arithmetic series of an undetected loop projected to the turn ceiling.

Nothing is typed in here: the prices and the turn ceiling are the exercise's givens
(:func:`.nm0_3.validate_params`, its defaults unless ``params`` overrides them), every token
count is measured. The measured loop also gives its own napkin givens (s0, Δ, output per turn,
the detect turn d), which :func:`measure_loop` feeds back into :func:`.nm0_3.solve`, so a notebook
can set three columns side by side (:func:`comparison_rows`): the chapter's givens, the measured
loop, and the formula with the measured givens.

Which reading of the exercise fits the agent: its context keeps each action's one-line outcome
and drops the model's own replies, so the context grows by the observation only; that is the
exercise's ``error_only_context`` reading (Δ = observation tokens), and the formula's figures
with the measured givens are taken from it.

This module imports the live agent and the log layer; :mod:`.nm0_3` stays light.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from kernel_lib.course.exercises import nm0_3

__all__ = ["LABEL", "READING", "measure_loop", "comparison_rows"]

#: How every measured figure is labelled beside the computed ones.
LABEL = "measured on the live looping agent"
#: The exercise's reading that matches the agent's context (module docstring).
READING = "error_only_context"


def measure_loop(params: Mapping[str, Any] | None = None, *, scenario: str | None = None, seed: int | None = None,
                 directory: str | os.PathLike | None = None) -> dict[str, Any]:
    """Run the live looping agent once (in a temporary folder under ``directory`` if given) and
    price its loop at the exercise's givens.

    ``params``: Napkin Math 0.3's givens (validated by :func:`.nm0_3.validate_params`; the
    exercise's defaults where absent); the prices and ``turn_ceiling`` are used (the run's own
    ceiling too). ``scenario`` and ``seed``: the agent's (its defaults when None).

    Returns ``{"label", "reading", "givens", "measured", "measured_givens", "napkin",
    "napkin_measured", "outcome", "interventions"}``: ``measured`` is :func:`loop_cost` of the run
    (tokens and USD to the first intervention, the projection to the ceiling, the per-turn lists);
    ``measured_givens`` the exercise's givens with s0, Δ, output per turn and d measured
    (``error_tokens_per_turn`` = Δ, the :data:`READING`); ``napkin`` the exercise solved at the
    chapter's givens, ``napkin_measured`` solved at the measured givens, each as the reading's
    figures (``delta_tokens_per_turn``, ``detect_input_tokens``, ``detect_usd``,
    ``ceiling_input_tokens``, ``ceiling_usd``, ``cost_ratio``, ``token_ratio``).

    Raises ConfigError for bad givens, and for a run that the watchdog never interrupted (no loop
    to price).
    """
    from kernel_lib.core.record import fold, initial_record
    from kernel_lib.errors import ConfigError
    from kernel_lib.live.looping_agent import loop_cost, run_looping_agent
    from kernel_lib.log import MemoryStore
    from kernel_lib.sim.services import TwinFleet

    givens = nm0_3.validate_params(params)
    run: dict[str, Any] = {"turn_ceiling": givens["turn_ceiling"], "must_survive": "none"}
    if scenario is not None:
        run["scenario"] = scenario
    if seed is not None:
        run["seed"] = seed
    store, trajectory = MemoryStore(), "nm0-3-measure"
    with tempfile.TemporaryDirectory(prefix="nm0-3-", dir=directory) as tmp:
        result = run_looping_agent(Path(tmp) / "ws", store=store, fleet=TwinFleet(), trajectory_id=trajectory, **run)
    record = fold(initial_record(trajectory), store.read(trajectory))
    measured = loop_cost(record, turn_ceiling=givens["turn_ceiling"], input_usd_per_mtok=givens["input_usd_per_mtok"],
                         output_usd_per_mtok=givens["output_usd_per_mtok"])
    if "turns_to_detection" not in measured or not measured["turns_to_detection"]:
        raise ConfigError(f"the run ended {result.outcome!r} without a watchdog intervention: no loop to price")
    measured_givens = {**givens, "first_turn_tokens": measured["first_turn_tokens"],
                       "output_tokens_per_turn": round(measured["output_tokens_per_turn_mean"]),
                       "error_tokens_per_turn": round(measured["growth_tokens_per_turn"]),
                       "detect_turn": min(measured["turns_to_detection"], givens["turn_ceiling"])}
    return {"label": LABEL, "reading": READING, "givens": givens, "measured": measured,
            "measured_givens": measured_givens, "napkin": _reading(nm0_3.solve(givens), main=True),
            "napkin_measured": _reading(nm0_3.solve(measured_givens), main=False),
            "outcome": result.outcome, "interventions": [(i["tier"], i["outcome"]) for i in result.interventions]}


_FIGURES = ("delta_tokens_per_turn", "detect_input_tokens", "detect_usd", "ceiling_input_tokens", "ceiling_usd",
            "cost_ratio")


def _reading(solved: Mapping[str, Any], *, main: bool) -> dict[str, Any]:
    """The figures of one reading: the exercise's main one, or :data:`READING` (its alternative
    answers, the rest from the main reading where the alternative does not change them)."""
    alt = {} if main else solved["alternative"][READING]
    out = {k: alt.get(k, solved[k]) for k in _FIGURES}
    tokens_ratio = out["ceiling_input_tokens"] / out["detect_input_tokens"] if out["detect_input_tokens"] else None
    return {**out, "token_ratio": tokens_ratio}


def comparison_rows(measured: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows for a table, one per quantity: ``{"quantity", "napkin", "measured", "napkin_measured"}``
    (the exercise at the chapter's givens; the live loop as measured; the exercise's formula at
    the measured givens, in the :data:`READING`). ``measured``: what :func:`measure_loop` returned."""
    m, nap, nm = measured["measured"], measured["napkin"], measured["napkin_measured"]
    g, mg = measured["givens"], measured["measured_givens"]
    return [
        {"quantity": "first looping turn's context s0 (tokens)", "napkin": g["first_turn_tokens"],
         "measured": m["first_turn_tokens"], "napkin_measured": mg["first_turn_tokens"]},
        {"quantity": "context growth per turn Δ (tokens)", "napkin": nap["delta_tokens_per_turn"],
         "measured": m["growth_tokens_per_turn"], "napkin_measured": nm["delta_tokens_per_turn"]},
        {"quantity": "turns to detection d", "napkin": g["detect_turn"], "measured": m["turns_to_detection"],
         "napkin_measured": mg["detect_turn"]},
        {"quantity": "input tokens to detection", "napkin": nap["detect_input_tokens"],
         "measured": m["input_tokens_to_detection"], "napkin_measured": nm["detect_input_tokens"]},
        {"quantity": "USD to detection", "napkin": nap["detect_usd"], "measured": m["usd_to_detection"],
         "napkin_measured": nm["detect_usd"]},
        {"quantity": f"input tokens to the ceiling ({g['turn_ceiling']} turns)", "napkin": nap["ceiling_input_tokens"],
         "measured": m["ceiling_input_tokens_projected"], "napkin_measured": nm["ceiling_input_tokens"]},
        {"quantity": "USD to the ceiling", "napkin": nap["ceiling_usd"], "measured": m["usd_to_ceiling_projected"],
         "napkin_measured": nm["ceiling_usd"]},
        {"quantity": "cheaper by (USD ratio)", "napkin": nap["cost_ratio"],
         "measured": m["usd_ratio_ceiling_to_detection"], "napkin_measured": nm["cost_ratio"]},
    ]
