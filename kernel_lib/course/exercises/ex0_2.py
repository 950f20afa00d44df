"""Failure Recovery, Example 0.2, "Containment latency and blast radius budget", as a seeded
exercise (ex0.2).

Source: the Failure Recovery chapter, "Blast Radius Quarantine": table 12 (the four stages), the
supervisor's freeze-and-drop listing, and Example 0.2: an agent fed an injected pull request
decodes a ``curl`` to an attacker's endpoint carrying its session token; the pre-execution policy
check refuses it and the supervisor contains the trajectory.

Givens (papermill names, milliseconds unless stated): ``policy_check_ms`` the policy engine's
check of the call against the egress allow-list; ``egress_drop_ms`` installing the packet drop on
the sandbox's interface; ``freeze_ms`` freezing the sandbox's cgroup; ``idp_revocation_ms`` the
identity provider's revocation round trip; ``taint_broadcast_ms`` the taint ledger's update
reaching the peers; ``decode_tokens_per_s`` the model's decoding rate (tokens per second).

Derivation (sympy, :func:`formulas`): the clock starts when the model finishes decoding the
offending call. Stages 1 and 3 start when the check ends, side by side: egress is sealed at
c + L_net, the tree frozen at c + L_freeze, and the local boundary holds at their maximum. In
the chapter's reading stages 2 and 4 start at the end of the check as well ("concurrently"):
the ledger is updated at c + L_taint and the token revoked at c + L_idp. One token takes
1000 / rate ms; the seal beats the next token when it comes first. The token stays valid for
c + L_idp minus the seal, a window in which nothing can use it.

Alternative reading, graded ``alternative``: ``sequential_waves`` — stages 2 and 4 start only once
the local seal holds (the order this project's live supervisor uses), so the taint and the
revocation come later by the seal time. :func:`chapter_figures` lists each printed figure beside
its computed value. The same timeline measured on this machine's real cgroup freezer, network
namespace, broker and ledger: :mod:`kernel_lib.course.exercises.ex0_2_measure`.
"""

from __future__ import annotations

import functools
import random
from typing import Any, Mapping

import sympy as sp

from kernel_lib.course.exercises._common import Param, Tol, exact, grade, jsonable, validate

EXERCISE = "ex0.2"
TITLE = "Containment latency and blast radius budget"

PARAMS = (
    Param("policy_check_ms", float, 0.0, 10_000.0, "the pre-execution policy check of the call, ms"),
    Param("egress_drop_ms", float, 0.0, 10_000.0, "installing the packet drop on the sandbox's interface, ms"),
    Param("freeze_ms", float, 0.0, 10_000.0, "freezing the sandbox's process tree (cgroup freezer), ms"),
    Param("idp_revocation_ms", float, 0.0, 600_000.0, "the identity provider's token revocation round trip, ms"),
    Param("taint_broadcast_ms", float, 0.0, 600_000.0, "the taint ledger's update reaching the peers, ms"),
    Param("decode_tokens_per_s", float, 0.001, 1_000_000.0, "the model's decoding rate, tokens per second"),
)

DEFAULTS: dict[str, Any] = {
    "policy_check_ms": 1.1,
    "egress_drop_ms": 0.4,
    "freeze_ms": 1.2,
    "idp_revocation_ms": 42.0,
    "taint_broadcast_ms": 3.5,
    "decode_tokens_per_s": 50.0,
}

GRADED: dict[str, Tol] = {
    "egress_sealed_ms": Tol(abs=1e-6),
    "frozen_ms": Tol(abs=1e-6),
    "local_seal_ms": Tol(abs=1e-6),
    "taint_ms": Tol(abs=1e-6),
    "revoked_ms": Tol(abs=1e-6),
    "token_ms": Tol(abs=1e-6),
    "sealed_within_one_token": Tol(),
}


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, each coerced and range-checked (ConfigError naming the
    parameter on an unknown name, a wrong type or a value out of its range)."""
    return validate(PARAMS, DEFAULTS, params)


#: The symbols of :func:`formulas`, in the order of :data:`PARAMS` (all nonnegative).
SYMBOLS = sp.symbols("c L_net L_freeze L_idp L_taint r", nonnegative=True)


@functools.lru_cache(maxsize=1)
def formulas() -> dict[str, sp.Expr]:
    """The closed forms (sympy) in c (check), L_net, L_freeze, L_idp, L_taint (ms) and r (tokens/s)."""
    c, net, freeze, idp, taint, r = SYMBOLS
    sealed, frozen = c + net, c + freeze
    local = sp.Max(sealed, frozen)
    out = {"egress_sealed_ms": sealed, "frozen_ms": frozen, "local_seal_ms": local, "taint_ms": c + taint,
           "revoked_ms": c + idp, "token_ms": 1000 / r}
    out["seal_margin_ms"] = out["token_ms"] - local
    out["token_exposure_ms"] = out["revoked_ms"] - local
    out["tokens_before_seal"] = sp.floor(local / out["token_ms"])
    out["sequential_taint_ms"] = local + taint
    out["sequential_revoked_ms"] = local + idp
    return out


def substitutions(params: Mapping[str, Any] | None = None) -> dict[sp.Symbol, sp.Rational]:
    """``{symbol: exact value}`` from the givens (validated first), decimals taken as typed."""
    p = validate_params(params)
    return {sym: sp.Rational(exact(p[prm.name]).numerator, exact(p[prm.name]).denominator)
            for sym, prm in zip(SYMBOLS, PARAMS)}


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Example 0.2's timeline from the givens (ms from the end of decoding).

    Graded: ``egress_sealed_ms``, ``frozen_ms``, ``local_seal_ms``, ``taint_ms``, ``revoked_ms``,
    ``token_ms`` and ``sealed_within_one_token``. Also returned: the margin to the next token, how
    long the token stays valid after the seal, whole tokens decoded before it, the timeline's
    events, and the ``sequential_waves`` reading. Raises ConfigError for bad givens."""
    p = validate_params(params)
    subs = substitutions(p)
    v = {k: e.xreplace(subs) for k, e in formulas().items()}
    num = {k: (int(x) if k == "tokens_before_seal" else float(x)) for k, x in v.items()}
    sealed_first = bool(v["local_seal_ms"] < v["token_ms"])
    events = sorted([(num["egress_sealed_ms"], "egress dropped at the sandbox's interface (stage 3)"),
                     (num["frozen_ms"], "process tree frozen (stage 1)"),
                     (num["taint_ms"], "taint ledger updated, peers blocked (stage 4)"),
                     (num["revoked_ms"], "session token revoked at the identity provider (stage 2)")])
    text = (f"The check ends at {num['egress_sealed_ms'] - p['egress_drop_ms']:g} ms; egress is sealed at "
            f"{num['egress_sealed_ms']:g} ms and the tree frozen at {num['frozen_ms']:g} ms, so the local boundary "
            f"holds at {num['local_seal_ms']:g} ms, "
            + (f"{num['seal_margin_ms']:g} ms before the next token ({num['token_ms']:g} ms per token). "
               if sealed_first else f"after the next token would be out ({num['token_ms']:g} ms per token): "
               f"{num['tokens_before_seal']} token(s) decoded before the seal. ")
            + f"Peers are blocked at {num['taint_ms']:g} ms; the token dies at {num['revoked_ms']:g} ms, "
            f"{num['token_exposure_ms']:g} ms after the seal, a window nothing can use.")
    out = {
        "exercise": EXERCISE,
        **{k: num[k] for k in ("egress_sealed_ms", "frozen_ms", "local_seal_ms", "taint_ms", "revoked_ms", "token_ms",
                               "seal_margin_ms", "token_exposure_ms", "tokens_before_seal")},
        "sealed_within_one_token": sealed_first,
        "events": [{"t_ms": t, "event": e} for t, e in events],
        "decision": "local_seal_first" if sealed_first else "seal_too_slow",
        "decision_text": text,
        "reading": {
            "taint_ms": "stages 2 and 4 start when the check ends, beside stages 1 and 3 (the chapter's 1.1 + 3.5 and "
                        "1.1 + 42.0). Alternative 'sequential_waves': they start once the local seal holds.",
            "sealed_within_one_token": "the seal must come before the next token would be decoded: local seal < "
                                       "1000 / rate.",
        },
        "alternative": {"sequential_waves": {"taint_ms": num["sequential_taint_ms"],
                                             "revoked_ms": num["sequential_revoked_ms"]}},
    }
    return jsonable(out)


#: Alternative answers filed under other names (none: the reading is nested under the quantities' names).
ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {}


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve`: times within 1 % relative (or a millionth of a
    ms), the verdict exactly. An answer of the ``sequential_waves`` reading is graded ``alternative``."""
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def chapter_figures() -> list[dict[str, Any]]:
    """Each figure Example 0.2 prints beside what its givens (:data:`DEFAULTS`) give, rounded as
    printed: ``[{claim, printed, computed, holds, note}]``. Only the printed text is typed in."""
    s = solve(DEFAULTS)
    d = DEFAULTS

    def row(claim: str, printed: str, computed: str, note: str) -> dict[str, Any]:
        return {"claim": claim, "printed": printed, "computed": computed, "holds": computed == printed, "note": note}

    return [
        row("egress frames dropped", "1.5 ms", f"{s['egress_sealed_ms']:.1f} ms",
            f"{d['policy_check_ms']:g} + {d['egress_drop_ms']:g}"),
        row("sandbox frozen", "2.3 ms", f"{s['frozen_ms']:.1f} ms", f"{d['policy_check_ms']:g} + {d['freeze_ms']:g}"),
        row("taint ledger updated", "4.6 ms", f"{s['taint_ms']:.1f} ms",
            f"{d['policy_check_ms']:g} + {d['taint_broadcast_ms']:g}"),
        row("token revoked", "43.1 ms", f"{s['revoked_ms']:.1f} ms",
            f"{d['policy_check_ms']:g} + {d['idp_revocation_ms']:g}"),
        row("local boundary sealed", "2.3 ms", f"{s['local_seal_ms']:.1f} ms", "the later of the two local stages"),
        row("one token", "20 ms", f"{s['token_ms']:.0f} ms", f"1000 / {d['decode_tokens_per_s']:g} tokens per second"),
        row("sealed under", "2.5 ms", "2.5 ms" if s["local_seal_ms"] < 2.5 else f"{s['local_seal_ms']:.1f} ms",
            f"{s['local_seal_ms']:g} ms < 2.5 ms"),
    ]


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: another check time, drop and freeze latencies (sometimes a slow freeze,
    SIGSTOP on a loaded host), revocation and broadcast times, and decoding rate."""
    rng = random.Random(f"ex0.2:{seed}")
    return {
        "policy_check_ms": round(rng.uniform(0.2, 3.0), 1),
        "egress_drop_ms": round(rng.uniform(0.1, 2.0), 1),
        "freeze_ms": round(rng.choice([rng.uniform(0.2, 3.0), rng.uniform(5.0, 40.0)]), 1),
        "idp_revocation_ms": round(rng.uniform(5.0, 250.0), 1),
        "taint_broadcast_ms": round(rng.uniform(0.5, 20.0), 1),
        "decode_tokens_per_s": float(rng.choice([20, 30, 50, 80, 120, 200])),
    }
