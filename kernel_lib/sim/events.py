"""Seeded synthetic trajectories: the one event maker the crash-state workloads and the benchmarks
share (a task, then turns of context, reply, authorization, reservation, tool intent, tool result
and settlement), deterministic from its seed.
"""

from __future__ import annotations

import hashlib
import random

from kernel_lib.core.events import (
    Authorized, BudgetReserved, BudgetSettled, ContextBuilt, Event, ModelReplied, Payload, Provenance, TaskStarted,
    ToolIntent, ToolResult,
)

__all__ = ["EventMaker", "sample_intent", "sample_intent_events"]

_WORDS = ("patch", "test", "assert", "fixture", "module", "regression", "import", "timeout", "config",
          "retry", "branch", "diff", "runner", "sandbox", "coverage", "stack", "frame", "result")


# ------------------------------------------------------------------------------------------------
# realistic events
# ------------------------------------------------------------------------------------------------


class EventMaker:
    """Builds one trajectory's events: a task, then turns of context → reply → authorization →
    reservation → tool intent → tool result → settlement, with seeded text of varied length."""

    def __init__(self, trajectory_id: str, rng: random.Random, *, short_texts: bool = False):
        self.trajectory_id = trajectory_id
        self.rng = rng
        self.short_texts = short_texts
        self.next_seq = 1       # the sequence number the next accepted event takes
        self._made = 0

    def _text(self, lo: int, hi: int) -> str:
        if self.short_texts:
            return self._short_text(lo, hi)
        n = self.rng.randint(lo, hi)
        words = []
        while sum(len(w) + 1 for w in words) < n:
            words.append(self.rng.choice(_WORDS))
        return " ".join(words)[:n]

    def _short_text(self, lo: int, hi: int) -> str:
        """A quarter of the length (40–400 characters), built in linear time (the benchmarks')."""
        n = self.rng.randint(max(lo // 4, 10), max(hi // 4, 20))
        words, size = [], 0
        while size < n:
            w = self.rng.choice(_WORDS)
            words.append(w)
            size += len(w) + 1
        return " ".join(words)[:n]

    def _payload(self, step: int) -> Payload:
        t, r = self.trajectory_id, step // 7
        op, att = f"{t}-op{r}", f"{t}-op{r}-a1"
        phase = step % 7
        if step == 0:
            return TaskStarted(task_id=f"{t}-task", requester="user_17", objective=self._text(40, 160),
                               grant_ids=["grant_repo_rw"], budget_ceiling_usd=5.0, finalization_reserve_usd=0.25,
                               workspace_ref="ws_r18")
        if phase == 1:
            text = self._text(200, 1300)
            return ContextBuilt(invocation_id=f"{t}-inv{r}", model="model-x", delivered_input=text,
                                delivered_input_sha256=hashlib.sha256(text.encode()).hexdigest())
        if phase == 2:
            return ModelReplied(invocation_id=f"{t}-inv{r}", status="complete", reply=self._text(50, 400),
                                input_tokens=self.rng.randint(500, 9000), output_tokens=self.rng.randint(20, 800))
        if phase == 3:
            return Authorized(decision_id=f"{op}-auth", subject_id=op, subject_kind="tool", policy_version="p3",
                              grant_id="grant_repo_rw", decision="allow")
        if phase == 4:
            return BudgetReserved(reservation_id=f"{op}-res", subject_id=op,
                                  amount_usd=round(self.rng.uniform(0.01, 0.4), 4))
        if phase == 5:
            return ToolIntent(operation_id=op, attempt_id=att, tool="run_tests",
                              arguments={"check": f"test_r{r}", "workspace": "ws_r18"}, revision=f"r{r}",
                              repeat_contract="idempotency_key", grant_id="grant_repo_rw",
                              authorization_ref=f"{op}-auth", reservation_ref=f"{op}-res")
        if phase == 6:
            return ToolResult(operation_id=op, attempt_id=att, status="completed", job_handle=f"job_{op}",
                              outcome={"passed": self.rng.randint(0, 60), "failed": self.rng.randint(0, 3),
                                       "log": self._text(100, 1600)}, observation_complete=True)
        return BudgetSettled(reservation_id=f"{t}-op{r - 1}-res", subject_id=f"{t}-op{r - 1}",
                             actual_usd=0.01, final=True)

    def make(self, *, owner_epoch: int = 0, sequence_number: int | None = None) -> Event:
        """A new event (fresh event id) numbered ``next_seq`` unless ``sequence_number`` is given.
        The maker's ``next_seq`` advances only via :meth:`accepted`."""
        step = self._made
        self._made += 1
        return Event.create(trajectory_id=self.trajectory_id, event_id=f"{self.trajectory_id}-ev{step:04d}",
                            sequence_number=sequence_number or self.next_seq, payload=self._payload(step),
                            owner_epoch=owner_epoch, provenance=Provenance("tenant_a", "worker_1"))




def sample_intent(n: int, *, arguments: dict | None = None, pad_chars: int = 0, grant_id: str = "g") -> ToolIntent:
    """The ``n``-th sample tool intent (``op<n>``/``attempt1`` running ``run_tests``), the shape the
    benchmarks, the quorum demo and the replication panel append. ``arguments`` default to
    ``{"i": n}``; ``pad_chars`` adds a ``pad`` argument of that many characters to reach a realistic
    event size (a worksheet intent with its arguments is about 0.7 kB)."""
    args = dict(arguments) if arguments is not None else {"i": n}
    if pad_chars:
        args["pad"] = "x" * pad_chars
    return ToolIntent(operation_id=f"op{n}", attempt_id="attempt1", tool="run_tests", arguments=args,
                      repeat_contract="idempotency_key", grant_id=grant_id, authorization_ref=f"auth{n}",
                      reservation_ref=f"res{n}")


def sample_intent_events(trajectory_id: str, n: int, *, start: int = 1, pad_chars: int = 0) -> list[Event]:
    """``n`` events of :func:`sample_intent` for one trajectory, sequence numbers ``start`` … ``start+n-1``,
    event ids ``<trajectory>/<sequence>``."""
    return [Event.create(trajectory_id=trajectory_id, event_id=f"{trajectory_id}/{s}", sequence_number=s,
                         payload=sample_intent(s, pad_chars=pad_chars)) for s in range(start, start + n)]
