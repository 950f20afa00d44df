"""The watchdog's detectors: pure functions over a step sequence (Failure Recovery, "Semantic
Watchdog Timers": figure 3, table 6, the cycle-detector listing; the tier ladder of table 7).

Every detector takes the steps of one trajectory (:func:`kernel_lib.recovery.watchdog.steps.watch_steps`)
and a :class:`WatchdogConfig`, and returns :class:`~kernel_lib.recovery.watchdog.model.Detection`
records: ``position`` is the log's sequence number at which the evidence was complete (the
observation that closed a state cycle, the action that repeated), ``kind`` one of
:data:`~kernel_lib.recovery.watchdog.model.DETECTION_KINDS`, ``evidence`` plain JSON. Every
evidence object holds ``step_position`` (the action's position), ``occurrences`` (the positions of
the steps that make up the loop, oldest first) and ``first_repeat_position`` (the earliest
position at which the loop had repeated once), which :mod:`~kernel_lib.recovery.watchdog.compare`
uses to line up detectors on the same loop.

=====================  ==========================================================================
kind                   fires when
=====================  ==========================================================================
state_hash_cycle       H_t = H_{t-k} for the smallest k in [1, K] over the states after the
                       mutative steps (the listing; figure 3). k >= 2 fires at once (k = 2: the
                       flip-flop). k = 1 (a mutative step that changed nothing) fires once the
                       state has stayed the same over ``noop_min_repeats`` consecutive mutative
                       steps: one refused edit is not yet a loop, three in a row are.
metric_stagnation      over the measured steps, no metric improved between m_{i-E} and m_i
                       (Δm ≤ 0 componentwise, oriented so that larger is better) at
                       ``metric_grace`` + 1 consecutive measurements (table 6: E_grace allows
                       bounded exploratory regressions). Once per stagnant run.
metric_oscillation     one metric's last max(4, E + 1) values go up and down in turn (4, 3, 4, 3)
                       and the last one beats none before it. Once per run.
action_repetition      h_tool(a_t) = h_tool(a_{t-j}) for the latest earlier step of the same
                       actor within ``repetition_window`` steps, and that step's observation was
                       an error: a known invalid request re-issued, with or without other calls in
                       between (look up, retry the failing booking, look up again). Declared nonce
                       arguments are ignored (:func:`~kernel_lib.core.action_signature.action_signature`).
repeated_question      a question sentence the agent already asked ``question_min_asks`` - 1
                       times (token-set Jaccard ≥ ``question_similarity``) within
                       ``question_window`` steps, each time answered, with no successful
                       mutative step in between (a new confirmation for a new change is not a
                       repeat). Courtesy offers ("anything else?") and questions with no subject
                       of their own ("would you like me to do that?") are not counted.
entropy_collapse       the normalized lexical entropy H/log2(N) of one text of the model (N ≥
                       ``entropy_min_tokens`` word tokens) falls below ``entropy_collapse_ratio``
                       times the actor's own baseline (the median of its first
                       ``entropy_baseline_texts`` texts). Once per collapsed run.
embedding_drift        cos(e(x_t), e(x_{t-k})) ≥ ``embedding_similarity`` for a text of the same
                       actor among its last K texts (a paraphrased loop; table 6's semantic
                       embedding row). Only with an offline embedding model (:func:`load_embedder`);
                       without one the detector reports itself unavailable and fires nothing.
=====================  ==========================================================================

:func:`run_watchdog` runs the enabled detectors and assigns table 7's tiers with
:func:`assign_tiers`. Raises :class:`~kernel_lib.errors.WatchdogConfigError` for a bad configuration.
"""

from __future__ import annotations

import math
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from kernel_lib.errors import WatchdogConfigError
from kernel_lib.recovery.signatures import error_signature, extract_signature_parts
from kernel_lib.recovery.watchdog.model import DETECTION_KINDS, Detection, WatchStep, check_steps
from kernel_lib.recovery.watchdog.steps import step_signature

__all__ = ["WatchdogConfig", "EmbeddingStatus", "Embedder", "METRIC_DIRECTIONS", "assign_tiers",
           "detect_state_cycles", "detect_metric_stagnation", "detect_metric_oscillation",
           "detect_action_repetition", "detect_repeated_questions", "detect_entropy_collapse",
           "detect_embedding_drift", "embedding_status", "lexical_entropy", "load_embedder", "question_sentences",
           "run_watchdog"]

#: Orientation of the verifier metrics: +1 larger is better, -1 smaller is better. A metric not
#: named here is +1 unless its name ends in ``_failed``, ``_errors``, ``_findings`` or ``_warnings``.
METRIC_DIRECTIONS: dict[str, int] = {"tests_passed": 1, "tests_failed": -1, "tests_errors": -1,
                                     "compiler_errors": -1, "lint_findings": -1}

#: An embedding function: texts -> one vector per text (any float sequence).
Embedder = Callable[[list[str]], Sequence[Sequence[float]]]

#: Environment variable naming a local embedding model directory (model2vec or sentence-transformers).
EMBEDDING_MODEL_ENV = "KERNEL_LIB_EMBEDDING_MODEL"


@dataclass(frozen=True)
class WatchdogConfig:
    """The watchdog's parameters (table 6; table 7 for the tiers), validated on construction.

    ``max_period`` K: the longest cycle the state window holds (≥ 1; the listing's window).
    ``noop_min_repeats``: consecutive unchanged states before a k = 1 cycle fires (≥ 1).
    ``metric_epoch`` E (≥ 1) and ``metric_grace`` (≥ 0): the stagnation epoch and its grace.
    ``repetition_window``: steps looked back for an earlier identical failing action (≥ 1).
    ``nonce_arguments``: argument names ignored by the action signature (None: the defaults of
    :data:`~kernel_lib.core.action_signature.DEFAULT_NONCE_ARGUMENTS`).
    ``question_similarity`` in (0, 1], ``question_window`` (≥ 1 steps) and ``question_min_asks``
    (≥ 2: the ask at which a repeated question is reported; 3 means "again and again").
    ``entropy_baseline_texts`` (≥ 1), ``entropy_collapse_ratio`` in (0, 1), ``entropy_min_tokens`` (≥ 2).
    ``embedding_similarity`` in (0, 1]; ``embedder``: an embedding function to use instead of
    :func:`load_embedder` (tests, a notebook's own model).
    ``episode_gap_steps`` (≥ 1): a detection more than this many steps after the previous one
    starts a new episode, whose ladder starts again at tier 1.
    ``kinds``: the detectors to run (a subset of :data:`DETECTION_KINDS`, each named once).

    Raises :class:`~kernel_lib.errors.WatchdogConfigError` naming the first bad field.
    """

    max_period: int = 4
    noop_min_repeats: int = 2
    metric_epoch: int = 3
    metric_grace: int = 1
    repetition_window: int = 10
    nonce_arguments: tuple[str, ...] | None = None
    question_similarity: float = 0.8
    question_window: int = 20
    question_min_asks: int = 3
    entropy_baseline_texts: int = 5
    entropy_collapse_ratio: float = 0.5
    entropy_min_tokens: int = 20
    embedding_similarity: float = 0.96
    embedder: Embedder | None = field(default=None, compare=False, repr=False)
    episode_gap_steps: int = 8
    kinds: tuple[str, ...] = DETECTION_KINDS

    def __post_init__(self) -> None:
        ints = {"max_period": 1, "noop_min_repeats": 1, "metric_epoch": 1, "metric_grace": 0,
                "repetition_window": 1, "question_window": 1, "question_min_asks": 2, "entropy_baseline_texts": 1,
                "entropy_min_tokens": 2,
                "episode_gap_steps": 1}
        for name, lo in ints.items():
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise WatchdogConfigError(f"{name} must be an integer, got {v!r}")
            if v < lo:
                raise WatchdogConfigError(f"{name} must be >= {lo}, got {v}")
        for name, lo, hi, hi_open in (("question_similarity", 0.0, 1.0, False),
                                      ("entropy_collapse_ratio", 0.0, 1.0, True),
                                      ("embedding_similarity", 0.0, 1.0, False)):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise WatchdogConfigError(f"{name} must be a finite number, got {v!r}")
            if not (lo < v < hi if hi_open else lo < v <= hi):
                raise WatchdogConfigError(f"{name} must be in ({lo:g}, {hi:g}{')' if hi_open else ']'}, got {v}")
        if self.nonce_arguments is not None:
            if isinstance(self.nonce_arguments, str) or not isinstance(self.nonce_arguments, Iterable) \
                    or not all(isinstance(a, str) for a in self.nonce_arguments):
                raise WatchdogConfigError("nonce_arguments must be a sequence of argument names (str)")
            object.__setattr__(self, "nonce_arguments", tuple(self.nonce_arguments))
        if isinstance(self.kinds, str) or not isinstance(self.kinds, Iterable):
            raise WatchdogConfigError(f"kinds must be a sequence of detection kinds, got {self.kinds!r}")
        kinds = tuple(self.kinds)
        unknown = [k for k in kinds if k not in DETECTION_KINDS]
        if unknown:
            raise WatchdogConfigError(f"unknown detection kind(s) {unknown}; known: {', '.join(DETECTION_KINDS)}")
        twice = sorted({k for k in kinds if kinds.count(k) > 1})
        if twice:
            raise WatchdogConfigError(f"kinds names {twice} more than once (each detector would report twice)")
        object.__setattr__(self, "kinds", kinds)
        if self.embedder is not None and not callable(self.embedder):
            raise WatchdogConfigError("embedder must be callable: texts -> vectors")


# --- helpers ---------------------------------------------------------------------------------------


def _fired_at(step: WatchStep) -> int:
    """The position at which a state is known: the observation's, else the action's."""
    return step.observation_position if step.observation_position is not None else step.position


def _short(h: str | None) -> str | None:
    return h[:16] if h else h


def _excerpt(text: str | None, n: int = 160) -> str:
    return " ".join((text or "").split())[:n]


def _detection(position: int, kind: str, step: WatchStep, occurrences: list[int], **evidence: Any) -> Detection:
    occ = sorted(set(occurrences))
    first_repeat = occ[1] if len(occ) > 1 else step.position
    first_repeat = evidence.pop("first_repeat", first_repeat)
    return Detection(position, kind, {"step_position": step.position, "actor": step.actor, "tool": step.tool,
                                      "occurrences": occ, "first_repeat_position": first_repeat, **evidence})


# --- state-hash monotonicity (figure 3, the listing) ------------------------------------------------


def detect_state_cycles(steps: Sequence[WatchStep], config: WatchdogConfig | None = None) -> list[Detection]:
    """``state_hash_cycle`` detections (module docstring): H_t = H_{t-k}, k in [1, K], over the
    states after mutative steps (``mutative`` True or unknown) that carry a state hash. Evidence:
    ``period`` k, ``state_hash`` (16 hex digits), ``state_source``, ``matched_position`` (the
    step whose state recurred), ``orbit`` (the k steps' positions and action signatures), and for
    k = 1 ``unchanged_steps`` (how many mutative steps in a row left the state as it was)."""
    cfg = config or WatchdogConfig()
    window: list[tuple[str, WatchStep]] = []
    out: list[Detection] = []
    noop = 0
    for step in steps:
        if step.state_hash is None or step.mutative is False:
            continue
        h = step.state_hash
        k = next((d for d in range(1, min(cfg.max_period, len(window)) + 1) if window[-d][0] == h), None)
        if k == 1 and step.mutative is None:
            continue      # an action of unknown effect that changed nothing visible (a failing script run)
        if k == 1:
            noop += 1
        else:
            noop = 0
        if k is not None and (k > 1 or noop >= cfg.noop_min_repeats):
            orbit = [s for _, s in window[-k:]] + [step]
            if k == 1:
                orbit = [s for _, s in window[-noop:]] + [step]
            occurrences = [s.position for s in orbit]
            ev: dict[str, Any] = {
                "period": k, "state_hash": _short(h), "state_source": step.state_source,
                "matched_position": window[-k][1].position,
                "orbit": [{"position": s.position, "signature": step_signature(s, cfg.nonce_arguments)} for s in orbit],
                "signature": step_signature(step, cfg.nonce_arguments),
            }
            if k == 1:
                ev["unchanged_steps"] = noop
            out.append(_detection(_fired_at(step), "state_hash_cycle", step, occurrences,
                                  first_repeat=step.position if k > 1 else orbit[min(2, len(orbit) - 1)].position,
                                  **ev))
        window.append((h, step))
        del window[:-cfg.max_period]
    return out


# --- metric monotonicity ---------------------------------------------------------------------------


def _direction(name: str) -> int:
    if name in METRIC_DIRECTIONS:
        return METRIC_DIRECTIONS[name]
    return -1 if name.endswith(("_failed", "_errors", "_findings", "_warnings")) else 1


def _improved(before: dict[str, float], after: dict[str, float]) -> bool | None:
    """Whether some metric got better from ``before`` to ``after`` (None: none in common)."""
    common = [k for k in after if k in before]
    if not common:
        return None
    return any(_direction(k) * (after[k] - before[k]) > 0 for k in common)


def _measured(steps: Sequence[WatchStep]) -> list[WatchStep]:
    return [s for s in steps if s.metrics]


def detect_metric_stagnation(steps: Sequence[WatchStep], config: WatchdogConfig | None = None) -> list[Detection]:
    """``metric_stagnation`` detections (module docstring): Δm_{i, i-E} ≤ 0 at ``metric_grace`` + 1
    consecutive measurements. Evidence: ``epoch`` E, ``grace``, ``series`` (position and metrics of
    the measurements from m_{i-E-grace} to m_i)."""
    cfg = config or WatchdogConfig()
    ms = _measured(steps)
    out: list[Detection] = []
    run, fired = 0, False
    E, g = cfg.metric_epoch, cfg.metric_grace
    for i in range(len(ms)):
        if i < E:
            continue
        better = _improved(ms[i - E].metrics, ms[i].metrics)
        if better is False:
            run += 1
        else:
            run, fired = 0, False
        if run >= g + 1 and not fired:
            fired = True
            span = ms[max(0, i - E - g):i + 1]
            out.append(_detection(_fired_at(ms[i]), "metric_stagnation", ms[i], [s.position for s in span],
                                  epoch=E, grace=g, first_repeat=ms[i - g].position,
                                  series=[{"position": s.position, "metrics": s.metrics} for s in span]))
    return out


def detect_metric_oscillation(steps: Sequence[WatchStep], config: WatchdogConfig | None = None) -> list[Detection]:
    """``metric_oscillation`` detections (module docstring): a metric whose last L = max(4, E + 1)
    values alternate up and down and whose last value is no new best. Evidence: ``metric``,
    ``values``, ``positions``."""
    cfg = config or WatchdogConfig()
    ms = _measured(steps)
    L = max(4, cfg.metric_epoch + 1)
    out: list[Detection] = []
    armed: dict[str, bool] = {}
    for i in range(L - 1, len(ms)):
        span = ms[i - L + 1:i + 1]
        names = sorted(set.intersection(*(set(s.metrics) for s in span)))
        for name in names:
            vals = [s.metrics[name] for s in span]
            diffs = [b - a for a, b in zip(vals, vals[1:])]
            alternating = all(d != 0 for d in diffs) and all(a * b < 0 for a, b in zip(diffs, diffs[1:]))
            d = _direction(name)
            no_new_best = d * vals[-1] <= max(d * v for v in vals[:-1])
            hit = alternating and no_new_best
            if hit and armed.get(name, True):
                armed[name] = False
                out.append(_detection(_fired_at(ms[i]), "metric_oscillation", ms[i], [s.position for s in span],
                                      first_repeat=span[2].position, metric=name, values=vals,
                                      positions=[s.position for s in span]))
            elif not hit:
                armed[name] = True
    return out


# --- action repetition after an error ----------------------------------------------------------------


def _error_sigma(text: str | None) -> str:
    return error_signature(*extract_signature_parts(text or ""))


def _unchanged_since(steps: Sequence[WatchStep], j: int, i: int) -> bool:
    """Whether the environment is known to be as it was after step j when step i acts: equal
    state hashes, or (no state recorded) no step in between that may have changed something."""
    before, after = steps[j].state_hash, steps[i - 1].state_hash if i > 0 else None
    if before is not None and after is not None:
        return before == after
    return not any(s.mutative is not False and not s.observation_error for s in steps[j + 1:i])


def detect_action_repetition(steps: Sequence[WatchStep], config: WatchdogConfig | None = None) -> list[Detection]:
    """``action_repetition`` detections (module docstring): the latest earlier step of the same
    actor with the same signature h_tool, within ``repetition_window`` steps, ended in an error,
    and the request is known to be invalid still. That is so when the environment is as it was
    after the failure (equal state hashes, or nothing changed in between): then the repeat is
    reported at the action itself, before its result (a live watchdog can interrupt before
    dispatch). When something changed in between (a fix was applied, a booking made), the retry
    may well succeed: it is reported at its observation, and only if it failed again with the same
    error signature σ (:func:`~kernel_lib.recovery.signatures.error_signature`).

    Evidence: ``signature``, ``repeat_of`` (the earlier step's position), ``steps_between`` (0:
    back to back), ``error`` (an excerpt of the earlier error), ``confirmed_by`` (``"same_state"``
    or ``"same_error"``), ``occurrences`` (every position of this signature in the current run of
    failing repeats)."""
    cfg = config or WatchdogConfig()
    sigs = [step_signature(s, cfg.nonce_arguments) if s.kind != "question" else None for s in steps]
    out: list[Detection] = []
    run_start: dict[tuple[str, str], int] = {}
    for i, step in enumerate(steps):
        sig = sigs[i]
        if sig is None:
            continue
        j = next((j for j in range(i - 1, max(-1, i - 1 - cfg.repetition_window), -1)
                  if sigs[j] == sig and steps[j].actor == step.actor), None)
        key = (step.actor, sig)
        if j is None or not steps[j].observation_error:
            run_start.pop(key, None)
            continue
        if _unchanged_since(steps, j, i):
            confirmed, at = "same_state", step.position
        elif step.observation_error and _error_sigma(step.observation) == _error_sigma(steps[j].observation):
            confirmed, at = "same_error", _fired_at(step)
        else:
            run_start.pop(key, None)
            continue
        start = run_start.setdefault(key, j)
        occurrences = [steps[x].position for x in range(start, i + 1)
                       if sigs[x] == sig and steps[x].actor == step.actor]
        out.append(_detection(at, "action_repetition", step, occurrences, signature=sig,
                              repeat_of=steps[j].position, steps_between=i - j - 1,
                              error=_excerpt(steps[j].observation), confirmed_by=confirmed))
    return out


# --- the same question again -----------------------------------------------------------------------------

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_REQUEST = re.compile(r"^\s*(?:could|can|would|will|may) you\b|\bplease (?:provide|confirm|share|let me know|tell|"
                      r"specify|send|give)\b|\blet me know\b", re.IGNORECASE)
_COURTESY = re.compile(r"anything else|any other (?:questions?|concerns?)|further (?:assistance|questions?|help)|"
                       r"feel free|happy to (?:help|assist)|don'?t hesitate|(?:more|any) (?:help|assistance)",
                       re.IGNORECASE)
_TOKEN = re.compile(r"[a-z0-9]+(?:['_-][a-z0-9]+)*")
#: Words that carry no subject of their own in a question ("would you like me to do that?").
_FUNCTION_WORDS = frozenset("""a an the and or but if so to of in on at for with from by as is are was were be been am
do does did done doing have has had i me my we us our you your it its this that these those there here what which who
whom how when where why would will could can may might shall should please let know like want wish need ok okay yes no
not any some all just also then than now again go ahead proceed confirm sure help assist assistance""".split())


def question_sentences(text: str) -> list[str]:
    """The sentences of ``text`` that ask something: ending in ``?``, or a request (``could you``,
    ``please provide/confirm/share``, ``let me know``); courtesy offers ("if you need anything
    else, let me know") are not questions here."""
    out = []
    for m in _SENTENCE.finditer(text or ""):
        s = m.group(0).strip()
        if s and (s.endswith("?") or _REQUEST.search(s)) and not _COURTESY.search(s):
            out.append(s)
    return out


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall((text or "").lower())


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def detect_repeated_questions(steps: Sequence[WatchStep], config: WatchdogConfig | None = None) -> list[Detection]:
    """``repeated_question`` detections (module docstring): the ``question_min_asks``-th time a
    question with a subject of its own (at least two content words) is asked, every earlier ask
    answered. Evidence: ``question`` (the sentence), ``asked_before`` (the earlier asks' positions
    and the first one's sentence), ``similarity`` (to the closest earlier ask), ``answers``
    (excerpts of what the user answered)."""
    cfg = config or WatchdogConfig()
    out: list[Detection] = []
    asked: deque[tuple[int, str, set[str], str]] = deque()     # (step index, sentence, tokens, actor)
    for i, step in enumerate(steps):
        if step.kind != "question":
            continue
        while asked and i - asked[0][0] > cfg.question_window:   # out of the window for good
            asked.popleft()
        best: tuple[list[tuple[int, str, float]], str] | None = None
        mine = []
        for q in question_sentences(step.model_text or str(step.arguments.get("text", ""))):
            toks = set(_tokens(q))
            if len(toks - _FUNCTION_WORDS) < 2:
                continue
            mine.append((i, q, toks, step.actor))
            same = []
            for j, prev, ptoks, actor in asked:
                if actor != step.actor or i - j > cfg.question_window or steps[j].observation is None:
                    continue
                sim = _jaccard(toks, ptoks)
                if sim >= cfg.question_similarity:
                    same.append((j, prev, sim))
            if same:
                first = same[0][0]
                if any(s.kind == "tool" and s.mutative is not False and not s.observation_error
                       for s in steps[first + 1:i]):
                    same = [x for x in same if not any(s.kind == "tool" and s.mutative is not False
                                                       and not s.observation_error for s in steps[x[0] + 1:i])]
            if same and len({j for j, _, _ in same}) + 1 >= cfg.question_min_asks and (
                    best is None or len(same) > len(best[0])):
                best = (same, q)
        asked.extend(mine)
        if best is not None:
            same, q = best
            earlier = sorted({j for j, _, _ in same})
            out.append(_detection(step.position, "repeated_question", step,
                                  [steps[j].position for j in earlier] + [step.position],
                                  question=_excerpt(q), times_asked=len(earlier) + 1,
                                  asked_before={"positions": [steps[j].position for j in earlier],
                                                "question": _excerpt(same[0][1])},
                                  similarity=round(max(x[2] for x in same), 3),
                                  answers=[_excerpt(steps[j].observation, 100) for j in earlier]))
    return out


# --- lexical entropy collapse ------------------------------------------------------------------------------


def lexical_entropy(text: str) -> tuple[float, int]:
    """(normalized entropy H/log2(N), N) of the word tokens of ``text``: H is the Shannon entropy
    (bits) of the token frequencies, N the number of tokens. 1.0 means no token repeats; text
    that keeps saying the same few words tends to 0. (0.0, N) for N < 2."""
    toks = _tokens(text)
    n = len(toks)
    if n < 2:
        return 0.0, n
    counts: dict[str, int] = {}
    for t in toks:
        counts[t] = counts.get(t, 0) + 1
    h = -sum(c / n * math.log2(c / n) for c in counts.values())
    return h / math.log2(n), n


def detect_entropy_collapse(steps: Sequence[WatchStep], config: WatchdogConfig | None = None) -> list[Detection]:
    """``entropy_collapse`` detections (module docstring). Evidence: ``entropy`` (normalized),
    ``baseline`` (the actor's median over its first texts), ``ratio``, ``tokens``, ``excerpt``."""
    cfg = config or WatchdogConfig()
    out: list[Detection] = []
    seen: dict[str, list[float]] = {}
    collapsed: dict[str, bool] = {}
    for step in steps:
        h, n = lexical_entropy(step.model_text)
        if n < cfg.entropy_min_tokens:
            continue
        base_vals = seen.setdefault(step.actor, [])
        if len(base_vals) < cfg.entropy_baseline_texts:
            base_vals.append(h)
            continue
        baseline = median(base_vals)
        low = baseline > 0 and h < cfg.entropy_collapse_ratio * baseline
        if low and not collapsed.get(step.actor):
            collapsed[step.actor] = True
            out.append(_detection(step.position, "entropy_collapse", step, [step.position], entropy=round(h, 4),
                                  baseline=round(baseline, 4), ratio=round(h / baseline, 4), tokens=n,
                                  excerpt=_excerpt(step.model_text)))
        elif not low:
            collapsed[step.actor] = False
    return out


# --- embedding drift (optional) -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddingStatus:
    """Whether the embedding detector can run: ``available`` and, if not, ``reason``; ``model``
    names what was loaded."""
    available: bool
    reason: str = ""
    model: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"available": self.available, "reason": self.reason, "model": self.model}


def load_embedder() -> tuple[Embedder | None, EmbeddingStatus]:
    """An offline embedding function, if one is installed: the model directory named by the
    environment variable ``KERNEL_LIB_EMBEDDING_MODEL``, read with ``model2vec`` (StaticModel) or
    ``sentence_transformers``, never downloaded (Hugging Face offline mode is forced). The optional
    extra ``durable-agents-lab[embeddings]`` installs model2vec; the model directory is the user's
    to provide. Returns ``(None, status)`` with the reason when there is none; never raises."""
    path = os.environ.get(EMBEDDING_MODEL_ENV, "").strip()
    if not path:
        return None, EmbeddingStatus(False, f"no offline embedding model: set {EMBEDDING_MODEL_ENV} to a local "
                                            "model2vec or sentence-transformers model directory")
    if not os.path.isdir(path):
        return None, EmbeddingStatus(False, f"{EMBEDDING_MODEL_ENV}={path!r} is not a directory")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    errors = []
    try:
        from model2vec import StaticModel   # type: ignore[import-not-found]
        model = StaticModel.from_pretrained(path)
        return (lambda texts: [list(map(float, v)) for v in model.encode(texts)],
                EmbeddingStatus(True, model=f"model2vec:{path}"))
    except Exception as exc:   # not installed, or not a model2vec directory
        errors.append(f"model2vec: {type(exc).__name__}: {exc}")
    try:
        from sentence_transformers import SentenceTransformer   # type: ignore[import-not-found]
        st = SentenceTransformer(path, local_files_only=True)
        return (lambda texts: [list(map(float, v)) for v in st.encode(texts)],
                EmbeddingStatus(True, model=f"sentence-transformers:{path}"))
    except Exception as exc:
        errors.append(f"sentence-transformers: {type(exc).__name__}: {exc}")
    return None, EmbeddingStatus(False, "; ".join(e[:200] for e in errors))


def embedding_status(config: WatchdogConfig | None = None) -> EmbeddingStatus:
    """Whether :func:`detect_embedding_drift` can run with ``config`` (its own embedder, or
    :func:`load_embedder`'s)."""
    cfg = config or WatchdogConfig()
    if cfg.embedder is not None:
        return EmbeddingStatus(True, model="config.embedder")
    return load_embedder()[1]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def detect_embedding_drift(steps: Sequence[WatchStep], config: WatchdogConfig | None = None,
                           embedder: Embedder | None = None) -> list[Detection]:
    """``embedding_drift`` detections (module docstring). ``embedder``: the function to use (else
    the config's, else :func:`load_embedder`'s; none at all: no detection). Evidence:
    ``similarity``, ``matched_position``, ``identical`` (the texts are equal, not paraphrased)."""
    cfg = config or WatchdogConfig()
    embed = embedder or cfg.embedder or load_embedder()[0]
    if embed is None:
        return []
    chosen = [(i, s) for i, s in enumerate(steps) if len(_tokens(s.model_text)) >= cfg.entropy_min_tokens]
    if not chosen:
        return []
    vectors = embed([s.model_text for _, s in chosen])
    out: list[Detection] = []
    recent: dict[str, list[tuple[WatchStep, Sequence[float]]]] = {}
    for (_, step), vec in zip(chosen, vectors):
        prev = recent.setdefault(step.actor, [])
        hit = None
        for other, ovec in reversed(prev[-cfg.max_period:]):
            sim = _cosine(vec, ovec)
            if sim >= cfg.embedding_similarity:
                hit = (other, sim)
                break
        if hit is not None:
            other, sim = hit
            out.append(_detection(step.position, "embedding_drift", step, [other.position, step.position],
                                  similarity=round(sim, 4), matched_position=other.position,
                                  identical=other.model_text == step.model_text))
        prev.append((step, vec))
    return out


# --- tiers (table 7) and the whole watchdog ---------------------------------------------------------------


def assign_tiers(detections: Sequence[Detection], steps: Sequence[WatchStep],
                 config: WatchdogConfig | None = None) -> list[Detection]:
    """Table 7's ladder as a pure function: detections sorted by position, grouped into alarms (all
    detections about one step, ``evidence["step_position"]``, are one alarm) and episodes (an alarm more than
    ``episode_gap_steps`` steps after the previous alarm starts a new episode). The n-th alarm of
    an episode gets tier min(n, 3): the first a context interrupt (tier 1), the next a checkpoint
    backtrack with the action masked (tier 2), any further one the terminal abort (tier 3).
    Returns new :class:`Detection` objects with ``evidence["alarm"]`` = n; the input is not
    changed."""
    cfg = config or WatchdogConfig()
    index: dict[int, int] = {}
    for i, s in enumerate(steps):
        index.setdefault(s.position, i)
        if s.observation_position is not None:
            index.setdefault(s.observation_position, i)

    def step_of(pos: int) -> int:
        if pos in index:
            return index[pos]
        earlier = [i for p, i in index.items() if p <= pos]
        return max(earlier) if earlier else 0

    out: list[Detection] = []
    last_step: int | None = None
    n = 0
    for d in sorted(detections, key=lambda d: (d.position, DETECTION_KINDS.index(d.kind)
                                               if d.kind in DETECTION_KINDS else 99)):
        at = step_of(d.evidence.get("step_position", d.position))
        if at != last_step:
            if last_step is None or at - last_step > cfg.episode_gap_steps:
                n = 0
            n += 1
            last_step = at
        out.append(Detection(d.position, d.kind, {**d.evidence, "alarm": n}, min(n, 3), d.detector))
    return out


_DETECTORS: dict[str, Callable[[Sequence[WatchStep], WatchdogConfig], list[Detection]]] = {
    "state_hash_cycle": detect_state_cycles,
    "metric_stagnation": detect_metric_stagnation,
    "metric_oscillation": detect_metric_oscillation,
    "action_repetition": detect_action_repetition,
    "repeated_question": detect_repeated_questions,
    "entropy_collapse": detect_entropy_collapse,
    "embedding_drift": detect_embedding_drift,
}


def run_watchdog(steps: Sequence[WatchStep], config: WatchdogConfig | None = None) -> list[Detection]:
    """Every enabled detector over ``steps`` (one trajectory, in log order), with tiers.

    Returns the detections sorted by position, each with ``tier`` 1, 2 or 3 (:func:`assign_tiers`)
    and ``detector="watchdog"``. The embedding detector fires only when an embedder is available
    (:func:`embedding_status` says whether). Raises :class:`~kernel_lib.errors.WatchdogConfigError`
    for a ``config`` that is not a :class:`WatchdogConfig`, :class:`~kernel_lib.errors.WatchInputError`
    for ``steps`` that are not WatchStep objects in log order (:func:`~.model.check_steps`)."""
    if config is None:
        config = WatchdogConfig()
    if not isinstance(config, WatchdogConfig):
        raise WatchdogConfigError(f"config must be a WatchdogConfig, not {type(config).__name__}")
    steps = check_steps(steps)
    found: list[Detection] = []
    for kind in config.kinds:
        found.extend(_DETECTORS[kind](steps, config))
    return assign_tiers(found, steps, config)
