"""The seeded stochastic model stand-in (§11.1, §11.2.1, principle 4 of DESIGN.md).

:class:`StochasticModel` is a policy whose reply is a deterministic function of ``(seed, prompt)``:
the same seed and prompt always give the same reply, a different seed (a fresh sample after a
crash) generally gives a different continuation. Its replies go through
:meth:`~kernel_lib.gate.dispatch.DispatchGate.run_model` and are recorded as ``ModelReplied`` events,
so folding the log reproduces what the model said; re-prompting after a crash does not.
"""

from __future__ import annotations

import hashlib
import random

from kernel_lib.gate.dispatch import ModelReply

MODEL_NAME = "stochastic-stand-in"

#: Candidate first turns. Every one proposes running the tests of the snapshot; the wording,
#: token counts and the plan after the test differ with the sample.
_CONTINUATIONS = [
    "Run the test suite against ws_r18 to check candidate patch r18.",
    "Before anything else, verify r18: run pytest on the ws_r18 snapshot.",
    "The fix to median looks right; confirm it by running the tests on ws_r18.",
    "Dispatch the tests for ws_r18, then summarise the failures if any remain.",
    "Check the even-length median case by running the full test suite on ws_r18.",
    "Start a fresh test run of ws_r18 now; the earlier state is unknown to me.",
]
_NEXT_STEPS = ["then report to the requester", "then open a review", "then consider edge cases for empty input",
               "then re-read stats.py", "then stop"]


class StochasticModel:
    """A seeded stand-in for an LLM: ``reply(prompt)`` depends only on ``seed`` and ``prompt``."""

    def __init__(self, seed: int, *, usd_per_1k_tokens: float = 0.02):
        self.seed = int(seed)
        self.usd_per_1k_tokens = usd_per_1k_tokens

    def _rng(self, prompt: str) -> random.Random:
        h = hashlib.sha256(f"{self.seed}\x00{prompt}".encode()).digest()
        return random.Random(int.from_bytes(h[:8], "big"))

    def reply(self, prompt: str) -> ModelReply:
        """One sampled reply: text, a ``run_tests`` proposal for ws_r18, token usage and its charge."""
        rng = self._rng(prompt)
        text = f"{rng.choice(_CONTINUATIONS)} ({rng.choice(_NEXT_STEPS)})"
        tin, tout = len(prompt.split()) * 4 + rng.randint(300, 500), rng.randint(20, 80)
        return ModelReply(status="complete", reply=text,
                          proposal={"tool": "run_tests", "arguments": {"snapshot": "ws_r18", "check": "pytest -q"}},
                          input_tokens=tin, output_tokens=tout,
                          charged_usd=round((tin + tout) / 1000 * self.usd_per_1k_tokens, 6))


def repair_prompt(snapshot_ref: str) -> str:
    """The delivered input of the worksheet's first model call."""
    return ("You are a software-repair agent. The test test_median_even_count_is_mean_of_middle_pair fails on the "
            f"base repository. Candidate patch r18 is applied in the immutable workspace snapshot {snapshot_ref}. "
            "Propose the next action.")
