"""§11.12 exercise 6, "Second lighthouse: mass resume for the support agent" (Intermediate).

Uses §11.5 eq. 7, the serial-stage resume time
``T_resume = T_own + T_read + T_fold + T_ws + T_recon + T_prefill``, once per session, and then asks
what happens when a whole region's sessions resume on one shared prefill pool. The per-session
figures are closed forms; the spread of added reply latency across all customers comes from the
virtual-clock simulation in :mod:`kernel_lib.resume.mass` (see :func:`simulate_policies`).

Givens (papermill names): ``sessions`` open sessions to resume, ``context_tokens`` each session's
context, ``shared_prefix_tokens`` the policy prefix every session shares, ``customer_think_s`` the
window over which customers write again, ``ownership_s`` / ``checkpoint_read_s`` / ``fold_s`` the
control-plane stages, ``in_doubt_fraction`` the share of sessions holding an in-doubt refund,
``refund_lookup_s`` its authorized lookup (the reconciliation term), ``prefill_tokens_per_s_single``
one request's prefill rate, ``pool_prefill_tokens_per_s`` the surviving pool's aggregate rate,
``added_latency_bound_s`` the most the failover may add to any customer's next reply.

Readings (stated in ``solve()["reading"]``, with the alternatives' numbers in ``["alternative"]``):
the workspace term is 0 (the customer record stays in its system of record); a resident shared
prefix leaves only the ``context - prefix`` private tokens to prefill; "drain the prefill work" is
total prefill tokens over the pool's aggregate rate (a fluid figure); the policy's "prefill load" is
the token rate it asks of the pool over the customers' window, divided by the pool's rate; "added
latency" is the time from a customer's message to the session being restored with its serving
state rebuilt.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from kernel_lib.errors import ConfigError
from kernel_lib.resume.mass import POLICIES, Pool, SimResult, Stages, Workload, simulate_many
from kernel_lib.course.exercises._common import Param, Tol, grade, jsonable, validate

EXERCISE = "11.6"
TITLE = "Second lighthouse: mass resume for the support agent"

#: Candidate policies, in order of preference when several meet the bound: a resident prefix prefills
#: fewer tokens, and an on-demand resume spends the pool only on sessions whose customers come back.
PREFERENCE = ("lazy_resident", "eager_resident", "lazy_cold", "eager_cold")
POLICY_CHOICES = (*PREFERENCE, "none")
IN_DOUBT_ACTIONS = ("reconcile", "reissue", "assume_failed", "ignore")
BINDING_TERMS = ("pool_prefill_throughput", "session_prefill_latency", "reconciliation", "control_plane", "none")

#: §11.5's repair trajectory: the context whose cold prefill the chapter prices at "roughly 2.3 s".
REPAIR_CONTEXT_TOKENS = 32_768
REPAIR_PREFILL_FLOOR_S = 2.3

PARAMS = (
    Param("sessions", int, 1, 1_000_000, "open sessions that must resume after the region fails"),
    Param("context_tokens", int, 1, 10_000_000, "tokens in each session's context"),
    Param("shared_prefix_tokens", int, 0, 10_000_000, "tokens of the policy prefix every session shares"),
    Param("customer_think_s", float, 1e-3, 1e5, "seconds a customer takes to read a reply and answer"),
    Param("ownership_s", float, 0.0, 1e4, "T_own: seconds to acquire the session's ownership (new owner_epoch)"),
    Param("checkpoint_read_s", float, 0.0, 1e4, "T_read: seconds to read and validate checkpoint and suffix"),
    Param("fold_s", float, 0.0, 1e4, "T_fold: seconds to fold the suffix"),
    Param("in_doubt_fraction", float, 0.0, 1.0, "share of sessions holding an in-doubt refund"),
    Param("refund_lookup_s", float, 0.0, 1e4, "T_recon: seconds of the authorized refund lookup"),
    Param("prefill_tokens_per_s_single", float, 1.0, 1e10, "prefill rate of one request, tokens/s"),
    Param("pool_prefill_tokens_per_s", float, 1.0, 1e12, "aggregate prefill rate of the surviving pool, tokens/s"),
    Param("added_latency_bound_s", float, 1e-6, 1e5, "most the failover may add to a customer's next reply, s"),
)

DEFAULTS: dict[str, Any] = {
    "sessions": 2000, "context_tokens": 8192, "shared_prefix_tokens": 6144, "customer_think_s": 20,
    "ownership_s": 0.020, "checkpoint_read_s": 0.015, "fold_s": 0.005, "in_doubt_fraction": 0.10,
    "refund_lookup_s": 0.150, "prefill_tokens_per_s_single": 20000, "pool_prefill_tokens_per_s": 400000,
    "added_latency_bound_s": 1.0,
}

GRADED: dict[str, Tol] = {
    "clean_cold_resume_s": Tol(),
    "in_doubt_cold_resume_s": Tol(),
    "clean_resident_resume_s": Tol(),
    "in_doubt_resident_resume_s": Tol(),
    "eager_cold_drain_s": Tol(),
    "eager_resident_drain_s": Tol(),
    "message_rate_per_s": Tol(),
    "proposed_policy": Tol(),
    "proposed_prefill_load_fraction": Tol(),
    "proposed_worst_added_latency_s": Tol(),
    "proposed_meets_bound": Tol(),
    "in_doubt_refund_action": Tol(),
    "binding_term": Tol(),
    "repair_binding_term": Tol(),
}


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, checked (ConfigError on a bad name, type or range).

    The shared prefix cannot be longer than the context, and the pool cannot prefill slower than one
    of its own requests.
    """
    p = validate(PARAMS, DEFAULTS, params)
    if p["shared_prefix_tokens"] > p["context_tokens"]:
        raise ConfigError(f"shared_prefix_tokens ({p['shared_prefix_tokens']}) cannot exceed context_tokens "
                          f"({p['context_tokens']})")
    if p["pool_prefill_tokens_per_s"] < p["prefill_tokens_per_s_single"]:
        raise ConfigError(f"pool_prefill_tokens_per_s ({p['pool_prefill_tokens_per_s']:g}) must be at least "
                          f"prefill_tokens_per_s_single ({p['prefill_tokens_per_s_single']:g})")
    return p


def resume_time_s(control_s: float, prefill_tokens: float, single_tokens_per_s: float,
                  workspace_s: float = 0.0, reconciliation_s: float = 0.0) -> float:
    """Eq. 7 for one session, stages in series: control-plane terms + workspace + reconciliation + prefill."""
    return control_s + workspace_s + reconciliation_s + prefill_tokens / single_tokens_per_s


def stages(p: Mapping[str, Any]) -> Stages:
    """The eq. 7 stages of the givens (no workspace; the refund lookup is the reconciliation term)."""
    return Stages(ownership_s=p["ownership_s"], checkpoint_read_s=p["checkpoint_read_s"], fold_s=p["fold_s"],
                  workspace_restore_s=0.0, reconciliation_s=p["refund_lookup_s"])


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity §11.12 exercise 6 asks for (eq. 7 per session, the pool's drain and load), and the policy."""
    p = validate_params(params)
    n, ctx, pre, think = p["sessions"], p["context_tokens"], p["shared_prefix_tokens"], p["customer_think_s"]
    r, P, bound, f = (p["prefill_tokens_per_s_single"], p["pool_prefill_tokens_per_s"], p["added_latency_bound_s"],
                      p["in_doubt_fraction"])
    look = p["refund_lookup_s"]
    control = p["ownership_s"] + p["checkpoint_read_s"] + p["fold_s"]
    tokens = {"cold": ctx, "resident": ctx - pre}
    in_doubt_count = round(f * n)

    resume = {}
    for kind, tok in tokens.items():
        resume[f"clean_{kind}"] = resume_time_s(control, tok, r)
        resume[f"in_doubt_{kind}"] = resume_time_s(control, tok, r, reconciliation_s=look)
    drain = {kind: n * tok / P for kind, tok in tokens.items()}
    rate = n / think
    load = {kind: rate * tok / P for kind, tok in tokens.items()}

    # closed-form worst added latency of each candidate (excluding queueing for the lazy ones, which the
    # load test stands in for): the slowest session's eq. 7 time; for an eager resume, also a customer
    # who writes at once while their session is the last the pool reaches
    worst_serial = {kind: resume[f"in_doubt_{kind}"] if in_doubt_count else resume[f"clean_{kind}"] for kind in tokens}
    candidates = {}
    for kind in tokens:
        candidates[f"lazy_{kind}"] = {"worst_added_latency_s": worst_serial[kind], "prefill_load_fraction": load[kind],
                                      "meets_bound": worst_serial[kind] <= bound and load[kind] <= 1.0}
        worst_eager = max(worst_serial[kind], control + drain[kind])
        candidates[f"eager_{kind}"] = {"worst_added_latency_s": worst_eager, "prefill_load_fraction": load[kind],
                                       "meets_bound": worst_eager <= bound}
    chosen = next((name for name in PREFERENCE if candidates[name]["meets_bound"]), "none")
    shown = candidates[chosen if chosen != "none" else "lazy_resident"]

    # which term keeps the naive design (every session resumed at once, cold) from meeting the bound
    terms_cold = {"control_plane": control, "reconciliation": look if in_doubt_count else 0.0,
                  "session_prefill_latency": ctx / r}
    if worst_serial["cold"] > bound:
        binding = max(terms_cold, key=terms_cold.get)
    elif candidates["eager_cold"]["worst_added_latency_s"] > bound:
        binding = "pool_prefill_throughput"
    else:
        binding = "none"
    stage_terms_proposed = {"control_plane": control, "reconciliation": look if in_doubt_count else 0.0,
                            "session_prefill_latency": tokens["resident"] / r}
    largest_stage_proposed = max(stage_terms_proposed, key=stage_terms_proposed.get)
    repair_prefill_s = REPAIR_CONTEXT_TOKENS / r

    out: dict[str, Any] = {
        "exercise": EXERCISE,
        "control_plane_s": control,
        "private_tokens": tokens["resident"],
        "in_doubt_sessions": in_doubt_count,
        "clean_cold_resume_s": resume["clean_cold"],
        "in_doubt_cold_resume_s": resume["in_doubt_cold"],
        "clean_resident_resume_s": resume["clean_resident"],
        "in_doubt_resident_resume_s": resume["in_doubt_resident"],
        "cold_prefill_share_of_resume": (ctx / r) / resume["clean_cold"],
        "eager_cold_drain_s": drain["cold"],
        "eager_resident_drain_s": drain["resident"],
        "drain_over_think_window_cold": drain["cold"] / think,
        "message_rate_per_s": rate,
        "lazy_cold_prefill_load_fraction": load["cold"],
        "candidates": candidates,
        "proposed_policy": chosen,
        "proposed_prefill_load_fraction": shown["prefill_load_fraction"],
        "proposed_worst_added_latency_s": shown["worst_added_latency_s"],
        "proposed_mean_added_latency_s": (in_doubt_count * resume[f"in_doubt_{chosen[5:]}"]
                                          + (n - in_doubt_count) * resume[f"clean_{chosen[5:]}"]) / n
        if chosen.startswith("lazy_") else None,
        "proposed_meets_bound": chosen != "none",
        "proposed_largest_stage": largest_stage_proposed,
        "in_doubt_refund_action": "reconcile",
        "binding_term": binding,
        "repair_binding_term": "session_prefill_latency",
        "repair_prefill_s_at_single_rate": repair_prefill_s,
        "repair_prefill_floor_s_chapter": REPAIR_PREFILL_FLOOR_S,
        "decision": chosen,
    }
    policy_words = {
        "lazy_resident": "resume each session on demand, when its customer's next message arrives, on a worker that "
                         "keeps the shared prefix resident (prefix-aware routing), so only the private tokens are "
                         "prefilled",
        "eager_resident": "resume every session at once against the resident shared prefix",
        "lazy_cold": "resume each session on demand with a full cold prefill",
        "eager_cold": "resume every session at once with a full cold prefill",
        "none": "no candidate meets the bound: more pool capacity, a shorter private context, or a looser bound is "
                "needed",
    }[chosen]
    out["decision_text"] = (
        f"Per eq. 7 in series (no workspace term), a clean session resumes in {resume['clean_cold']:.4g} s cold and "
        f"{resume['clean_resident']:.4g} s with the {pre}-token prefix resident; an in-doubt one adds the "
        f"{look:g} s lookup: {resume['in_doubt_cold']:.4g} s and {resume['in_doubt_resident']:.4g} s. "
        + (f"Each of these alone fits the {bound:g} s bound, but the pool cannot serve them all at once: "
           if worst_serial["cold"] <= bound
           else f"The slowest of these already exceeds the {bound:g} s bound, and at scale the pool adds to it: ")
        + f"an eager cold resume of {n} sessions holds {n * ctx:,} prefill tokens, {drain['cold']:.4g} s of the whole "
        f"pool ({drain['resident']:.4g} s with the prefix resident), while customers return at {rate:.4g} per second "
        f"from the first moment. Policy: {policy_words}. "
        + (f"Its prefill load is {shown['prefill_load_fraction']:.3g} of the pool (a cold on-demand resume would "
           f"need {load['cold']:.3g}), and its worst added latency is {shown['worst_added_latency_s']:.4g} s before "
           f"queueing. " if chosen != "none" else "")
        + "In-doubt refunds are reconciled, never reissued or presumed failed: the new owner runs the authorized "
        "lookup by the refund's operation identity; a settled refund is recorded and the reply may cite it, an "
        "unsettled one stays in doubt with its owner and held reservation, and any action that depends on it "
        "(another refund, a promise to the customer) is withheld while the conversation itself goes on. "
        f"The binding term differs from the repair trajectory's: there one long context makes the per-session "
        f"prefill the dominant latency ({REPAIR_CONTEXT_TOKENS:,} tokens, {repair_prefill_s:.3g} s at this pool's "
        f"per-request rate, about {REPAIR_PREFILL_FLOOR_S} s by the chapter's floor), while here "
        + {"pool_prefill_throughput": f"every session's own prefill is short and what binds is the pool's aggregate "
                                      f"prefill throughput against {n} sessions at once.",
           "none": "nothing binds: even a cold resume of every session at once drains within the bound.",
           }.get(binding, f"the slowest session's own eq. 7 sum already exceeds the bound, led by its {binding} term.")
        + (f" Under the proposed policy the longest single stage is the refund lookup ({look:g} s against "
           f"{tokens['resident'] / r:.4g} s of private prefill)." if largest_stage_proposed == "reconciliation"
           and chosen != "none" else ""))

    # alternative readings
    overlap_control = max(p["ownership_s"], p["checkpoint_read_s"]) + p["fold_s"]
    slots = max(1, math.floor(P / r + 1e-9))
    out["reading"] = {
        "workspace": "the workspace term of eq. 7 is 0 s: the customer record stays in its system of record.",
        "resident_prefix": "with the shared prefix resident a session prefills only its context minus the prefix "
                           f"({tokens['resident']} tokens); the prefix's KV is reused because every session's prompt "
                           "starts with exactly those tokens.",
        "serial": "eq. 7 in series, as the exercise asks. Alternative: ownership and the log read overlap (the "
                  "chapter notes reading the log needs no ownership), so their sum becomes their maximum.",
        "drain": "'drain the prefill work' is the fluid figure: total prefill tokens over the pool's aggregate rate. "
                 "Alternatives: add the control-plane head before the first prefill can start, or count whole "
                 f"rounds of {slots} single-rate prefill slots.",
        "arrivals": "'evenly over the following 20 s' means message k arrives at (k + 1/2) T/N in the simulation; "
                    "the closed forms only need the rate N/T. Alternative (simulation): a seeded Poisson stream "
                    "(N uniform times in the window).",
        "prefill_load": "the policy's prefill load is the token rate it asks of the pool over the customers' window, "
                        "N/T x tokens per session, divided by the pool rate. The one-off warm-up of the prefix on "
                        "each worker is left out (its cost is per worker, not per session); the alternative adds "
                        f"it for one worker per prefill slot ({slots}).",
        "added_latency": "the failover's added latency is the time from the customer's message to the session "
                         "being restored with serving state rebuilt (eq. 7 stages plus any wait for the pool); "
                         "prefilling the new message and generating the reply happen with or without a failover.",
        "policy_choice": "a policy meets the bound in closed form when its slowest session's eq. 7 time fits and, "
                         "for an on-demand resume, its prefill load stays at or below the pool; an eager resume must "
                         "also finish its whole drain within the bound. Among those that meet it the first of "
                         f"{', '.join(PREFERENCE)} is proposed. The simulation checks the choice with queueing.",
        "binding_term": "the binding term is the one that stops a naive mass resume (all sessions at once, cold) "
                        "from meeting the bound: the pool's aggregate prefill throughput when every session's own "
                        "eq. 7 time fits, otherwise the largest term of the slowest session's eq. 7 sum. For the "
                        "repair trajectory it is the single session's long prefill.",
    }
    warm_load = slots * pre / (think * P)
    out["alternative"] = {
        "overlapped_ownership_and_read": {
            "clean_cold_resume_s": resume_time_s(overlap_control, ctx, r),
            "in_doubt_cold_resume_s": resume_time_s(overlap_control, ctx, r, reconciliation_s=look),
            "clean_resident_resume_s": resume_time_s(overlap_control, tokens["resident"], r),
            "in_doubt_resident_resume_s": resume_time_s(overlap_control, tokens["resident"], r, reconciliation_s=look),
        },
        "lookup_beside_prefill": {
            "in_doubt_cold_resume_s": control + max(look, ctx / r),
            "in_doubt_resident_resume_s": control + max(look, tokens["resident"] / r),
        },
        "drain_with_control_head": {"eager_cold_drain_s": control + drain["cold"],
                                    "eager_resident_drain_s": control + drain["resident"]},
        "drain_in_whole_slot_rounds": {"eager_cold_drain_s": math.ceil(n / slots) * ctx / r,
                                       "eager_resident_drain_s": math.ceil(n / slots) * tokens["resident"] / r},
        "load_with_prefix_warmup": {"proposed_prefill_load_fraction": shown["prefill_load_fraction"] + warm_load},
    }
    return jsonable(out)


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve` (tolerances in ``GRADED``: 1 % relative, else exact)."""
    return grade(EXERCISE, solve(params), answers, GRADED)


def simulate_policies(params: Mapping[str, Any] | None = None, *, arrivals: str = "even", discipline: str = "fifo",
                      seed: int = 0, policies=tuple(POLICIES)) -> dict[str, SimResult]:
    """The mass resume of the givens on a virtual clock, once per policy (:mod:`kernel_lib.resume.mass`).

    ``arrivals``: ``"even"`` (the exercise's reading) or ``"poisson"``; ``discipline``: ``"fifo"``
    (prefill slots at the single-request rate) or ``"ps"`` (capped processor sharing).
    """
    p = validate_params(params)
    workload = Workload(sessions=p["sessions"], context_tokens=p["context_tokens"],
                        shared_prefix_tokens=p["shared_prefix_tokens"], think_s=float(p["customer_think_s"]),
                        in_doubt_fraction=p["in_doubt_fraction"], arrivals=arrivals, seed=seed)
    pool = Pool(pool_tokens_per_s=p["pool_prefill_tokens_per_s"], single_tokens_per_s=p["prefill_tokens_per_s_single"],
                discipline=discipline)
    return simulate_many(workload, stages(p), pool, policies)


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: fleet, contexts, stage times, pool and bound perturbed.

    The pool is a whole number of single-request rates, sized for a target prefill load of the
    on-demand resident policy; about one variant in ten gets a pool too small for it (no policy meets
    the bound), and the bound is usually, not always, loose enough for the slowest resident resume.
    """
    rng = random.Random(f"ex11.6:{seed}")
    n = rng.choice([500, 800, 1000, 1500, 2000, 3000, 4000])
    ctx = rng.choice([4096, 6144, 8192, 12288, 16384])
    pre = int(ctx * rng.choice([0.5, 0.625, 0.75, 0.875]))
    think = rng.choice([10, 15, 20, 30, 45, 60])
    single = rng.choice([10000, 15000, 20000, 25000, 40000])
    own, read, fold = (rng.choice([0.005, 0.010, 0.020, 0.030, 0.050]), rng.choice([0.005, 0.010, 0.015, 0.025, 0.040]),
                       rng.choice([0.002, 0.005, 0.010, 0.020]))
    lookup = rng.choice([0.050, 0.100, 0.150, 0.250, 0.400])
    target_load = rng.uniform(1.1, 1.6) if rng.random() < 0.1 else rng.uniform(0.3, 0.8)
    slots = max(1, math.ceil(n / think * (ctx - pre) / target_load / single))
    worst_resident = own + read + fold + lookup + (ctx - pre) / single
    bounds = [b for b in (0.5, 0.75, 1.0, 1.5, 2.0, 3.0) if b >= 1.25 * worst_resident] or [3.0]
    bound = rng.choice(bounds) if rng.random() < 0.9 else rng.choice([0.25, 0.5])
    return {
        "sessions": n, "context_tokens": ctx, "shared_prefix_tokens": pre, "customer_think_s": think,
        "ownership_s": own, "checkpoint_read_s": read, "fold_s": fold,
        "in_doubt_fraction": rng.choice([0.02, 0.05, 0.10, 0.15, 0.20, 0.30]),
        "refund_lookup_s": lookup,
        "prefill_tokens_per_s_single": single,
        "pool_prefill_tokens_per_s": single * slots,
        "added_latency_bound_s": bound,
    }
