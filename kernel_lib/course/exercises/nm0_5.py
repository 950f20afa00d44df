"""Failure Recovery, Napkin Math 0.5, "Quantitative recovery overhead and RTO bounds", as a seeded exercise (nm0.5).

Source: the Failure Recovery chapter, "Fault-Tolerant System Synthesis" → "Fault injection
benchmarks" (the RTO definition beside MTBF, MTTR and RPO) and the worked block Napkin Math 0.5
after it: a trajectory that crashes with L context tokens, resumed from a base snapshot covering
L_k of them plus the WAL records written since, on one host's NVMe, a tensor-parallel inference
engine that re-prefills context, and one network round trip to the tool service.

Givens (papermill names, decimal KB and MB as the block computes): ``context_tokens`` L,
``snapshot_tokens`` L_k, ``snapshot_mb`` D_snap, ``wal_kb`` D_wal, ``disk_mb_per_s`` B_disk
(sequential), ``random_read_us`` the latency of one random 4 KB read, ``prefill_tokens_per_s`` P,
``probe_ms`` L_net.

The closed forms are :mod:`kernel_lib.recovery.synthesis.rto` (sympy): T_snap = D_snap/B_disk,
T_wal = D_wal/B_disk + t_random, ΔL = L − L_k, T_prefill = ΔL/P, T_probe = L_net and their sum.
Two checks the exercise adds: the block's "additional 2.05 s" of full prefill (2.048 s is L/P, the
whole prefill; what re-evaluating everything adds over the delta prefill is L_k/P = 1.536 s), and
whether a 48 MB snapshot can hold the inference state it is credited with (the KV cache of 12,288
tokens of a dense 70B model with Llama 2/3 70B's published shape is about 4 GB: it cannot; then the
whole context is prefilled, ``tokens_only_rto_ms``).

Other readings, graded ``alternative``: ``additional_is_full_prefill`` (the extra cost answered with
the whole prefill, as the block prints it); ``random_read_per_4k_block`` (one random-read latency
per 4 KB block of the WAL instead of one for the whole read); ``binary_units`` (MiB for the KV
cache, and for the snapshot and the disk rate alike); ``full_multi_head_attention`` (one KV head
per query head, 64, as a 70B model without grouped-query attention would have);
``snapshot_holds_tokens_only`` (the RTO answered with the physically consistent sum, the whole
context prefilled). The measured decomposition of our own runtime's RTO is
:func:`kernel_lib.live.rto.measure_rto`.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any, Mapping

import sympy as sp

from kernel_lib.course.exercises._common import Param, Tol, grade, jsonable, validate
from kernel_lib.errors import ConfigError
from kernel_lib.recovery.synthesis.rto import (
    CHAPTER_RTO_PRINTED,
    LLAMA_70B,
    PRODUCTION_THRESHOLD_S,
    RTO_SYMBOLS,
    MODEL_SYMBOLS,
    rto_formulas,
    rto_readings,
    rto_substitutions,
    rto_terms,
)

EXERCISE = "nm0.5"
TITLE = "Quantitative recovery overhead and RTO bounds"

PARAMS = (
    Param("context_tokens", int, 1, 10_000_000, "context tokens L at the crash"),
    Param("snapshot_tokens", int, 0, 10_000_000, "context tokens L_k the latest base snapshot covers"),
    Param("snapshot_mb", float, 0.0, 1e7, "the snapshot's size on disk D_snap, MB (decimal)"),
    Param("wal_kb", float, 0.0, 1e9, "WAL records written after the snapshot D_wal, KB (decimal)"),
    Param("disk_mb_per_s", float, 0.001, 1e7, "sequential read throughput B_disk, MB/s (decimal)"),
    Param("random_read_us", float, 0.0, 1e7, "latency of one random 4 KB read, µs"),
    Param("prefill_tokens_per_s", float, 0.001, 1e9, "the inference engine's prefill rate P, tokens/s"),
    Param("probe_ms", float, 0.0, 1e7, "one network round trip L_net (tool session + reconciliation probe), ms"),
)

DEFAULTS: dict[str, Any] = {
    "context_tokens": 16384,
    "snapshot_tokens": 12288,
    "snapshot_mb": 48.0,
    "wal_kb": 128.0,
    "disk_mb_per_s": 3500.0,
    "random_read_us": 25.0,
    "prefill_tokens_per_s": 8000.0,
    "probe_ms": 45.0,
}

_TINY = Tol(abs=1e-9)
GRADED: dict[str, Tol] = {
    "t_snap_ms": _TINY,
    "t_wal_ms": _TINY,
    "delta_tokens": Tol(),
    "t_prefill_ms": _TINY,
    "t_probe_ms": _TINY,
    "rto_ms": Tol(),
    "full_prefill_ms": _TINY,
    "full_prefill_extra_ms": _TINY,
    "kv_bytes_per_token": Tol(),
    "kv_cache_mb": _TINY,
    "snapshot_kv_token_capacity": Tol(),
    "snapshot_holds_kv_cache": Tol(),
    "tokens_only_rto_ms": Tol(),
    "kv_snapshot_rto_ms": Tol(),
}

#: The model the KV-cache questions assume (the block names only "a 70B parameter dense model").
MODEL = LLAMA_70B
#: The WAL read in 4 KB blocks (the ``random_read_per_4k_block`` reading).
BLOCK_KB = 4.0


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, each coerced and range-checked.

    Raises ConfigError naming the parameter on an unknown name, a wrong type, a value out of its
    range, or a snapshot covering more tokens than the context holds (``snapshot_tokens``).
    """
    p = validate(PARAMS, DEFAULTS, params)
    if p["snapshot_tokens"] > p["context_tokens"]:
        raise ConfigError(f"snapshot_tokens {p['snapshot_tokens']} is more than context_tokens "
                          f"{p['context_tokens']}: a snapshot covers part of the context at the crash")
    return p


#: The symbols of :func:`formulas`: :data:`~kernel_lib.recovery.synthesis.rto.RTO_SYMBOLS` then the model's.
SYMBOLS = RTO_SYMBOLS + MODEL_SYMBOLS


def formulas() -> dict[str, sp.Expr]:
    """The closed forms (sympy), times in ms: :func:`kernel_lib.recovery.synthesis.rto.rto_formulas`."""
    return rto_formulas()


def substitutions(params: Mapping[str, Any] | None = None) -> dict[sp.Symbol, sp.Rational]:
    """``{symbol: exact value}`` for :func:`formulas` from the givens (validated first: ConfigError on
    bad ones) and :data:`MODEL`; KB and µs turned into MB and ms."""
    return rto_substitutions(validate_params(params), MODEL)


def _alternatives(p: Mapping[str, Any], t: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each documented reading's answers (module docstring), computed from its own assumption."""
    blocks = math.ceil(p["wal_kb"] / BLOCK_KB)
    wal_blocks = p["wal_kb"] / 1000 / p["disk_mb_per_s"] * 1000 + blocks * p["random_read_us"] / 1000
    dw = wal_blocks - t["t_wal_ms"]
    mib = 2 ** 20
    kv_mib = t["kv_bytes_per_token"] * p["snapshot_tokens"] / mib
    # consistent binary units: the snapshot's and the disk's MB read as MiB, so only the KV bytes change
    kv_rto_mib = ((p["snapshot_mb"] + kv_mib) / p["disk_mb_per_s"] * 1000 + t["t_wal_ms"] + t["t_prefill_ms"]
                  + t["t_probe_ms"])
    mha = rto_terms(p, replace(MODEL, name=MODEL.name + " without GQA", kv_heads=MODEL.kv_heads * 8))
    return {
        "additional_is_full_prefill": {"full_prefill_extra_ms": t["full_prefill_ms"]},
        "random_read_per_4k_block": {"t_wal_ms": wal_blocks, "rto_ms": t["rto_ms"] + dw,
                                     "tokens_only_rto_ms": t["tokens_only_rto_ms"] + dw,
                                     "kv_snapshot_rto_ms": t["kv_snapshot_rto_ms"] + dw},
        "binary_units": {"kv_cache_mb": kv_mib, "kv_snapshot_rto_ms": kv_rto_mib},
        "full_multi_head_attention": {k: mha[k] for k in ("kv_bytes_per_token", "kv_cache_mb",
                                                          "snapshot_kv_token_capacity", "snapshot_holds_kv_cache",
                                                          "kv_snapshot_rto_ms")},
        "snapshot_holds_tokens_only": {"rto_ms": t["tokens_only_rto_ms"]},
    }


def _decision(readings: list[dict[str, Any]]) -> str:
    ok = {r["reading"]: r["within_threshold"] for r in readings}
    if all(ok.values()):
        return "within_threshold"
    if ok["chapter"] and not ok["tokens_only"]:
        return "within_threshold_only_if_the_kv_cache_is_restored"
    return "over_threshold"


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity Napkin Math 0.5 computes and the two checks above, from the givens.

    Graded (times in ms, sizes in decimal MB): ``t_snap_ms``, ``t_wal_ms``, ``delta_tokens``,
    ``t_prefill_ms``, ``t_probe_ms``, ``rto_ms`` (the block's sum); ``full_prefill_ms`` (L/P, the whole
    context) and ``full_prefill_extra_ms`` (what that adds over the delta prefill, L_k/P);
    ``kv_bytes_per_token``, ``kv_cache_mb`` (of the L_k snapshot tokens), ``snapshot_kv_token_capacity``
    (tokens whose KV cache fits in D_snap), ``snapshot_holds_kv_cache``; ``tokens_only_rto_ms`` (the
    snapshot holds tokens: everything is prefilled) and ``kv_snapshot_rto_ms`` (the snapshot also
    carries the KV cache). Also returned: the three readings as rows (``readings``), the chapter's
    printed figures, the model assumed, the decision, the reading taken where the statement is
    ambiguous and the alternative readings' answers. Raises ConfigError for bad givens.
    """
    p = validate_params(params)
    t = rto_terms(p, MODEL)
    readings = rto_readings(p, MODEL)
    decision = _decision(readings)
    by = {r["reading"]: r for r in readings}
    threshold_ms = PRODUCTION_THRESHOLD_S * 1000
    fit = ("fits" if t["snapshot_holds_kv_cache"] else
           f"does not fit ({t['kv_cache_mb'] / p['snapshot_mb']:,.0f}x too small)" if p["snapshot_mb"] else
           "does not fit (the snapshot is empty)")
    text = (f"The block's sum gives {t['rto_ms']:,.1f} ms ({t['t_snap_ms']:.2f} + {t['t_wal_ms']:.4f} + "
            f"{t['t_prefill_ms']:,.1f} + {t['t_probe_ms']:g} ms). It credits the {p['snapshot_mb']:g} MB snapshot "
            f"with the inference state of {p['snapshot_tokens']:,} tokens, but their KV cache on {MODEL.name} is "
            f"{t['kv_cache_mb']:,.1f} MB: it {fit}; {p['snapshot_mb']:g} MB holds "
            f"{t['snapshot_kv_token_capacity']:,} tokens' worth. A snapshot of tokens means prefilling all "
            f"{p['context_tokens']:,} tokens: {t['full_prefill_ms']:,.0f} ms of prefill, "
            f"{t['full_prefill_extra_ms']:,.0f} ms more than the delta, RTO {t['tokens_only_rto_ms']:,.1f} ms. "
            f"Carrying the KV cache in the snapshot instead costs {by['kv_cache_snapshot']['t_snap_ms']:,.0f} ms "
            f"of disk read: RTO {t['kv_snapshot_rto_ms']:,.1f} ms. Against the {threshold_ms:,.0f} ms threshold: "
            + ", ".join(f"{r['reading']} {'within' if r['within_threshold'] else 'over'}" for r in readings) + ".")
    out = {
        "exercise": EXERCISE,
        **{k: t[k] for k in GRADED},
        "kv_snapshot_t_snap_ms": t["kv_snapshot_t_snap_ms"],
        "rto_within_threshold": t["rto_within_threshold"],
        "readings": readings,
        "chapter_printed": dict(CHAPTER_RTO_PRINTED),
        "threshold_ms": threshold_ms,
        "model": {"name": MODEL.name, "layers": MODEL.layers, "kv_heads": MODEL.kv_heads,
                  "head_dim": MODEL.head_dim, "bytes_per_value": MODEL.bytes_per_value, "source": MODEL.source},
        "decision": decision,
        "decision_text": text,
        "reading": {
            "units": "KB and MB are decimal, as the block computes (0.128 MB of WAL, 3,500 MB/s); MB/s and MB "
                     "cancel in the read times. Alternative 'binary_units': the KV cache in MiB (and the "
                     "snapshot and disk rate in MiB alike).",
            "t_wal_ms": "one random-read latency for the whole WAL read, as the block charges it. Alternative "
                        "'random_read_per_4k_block': one per 4 KB block of the WAL.",
            "full_prefill_extra_ms": "the block's 'additional 2.05 s' is the whole prefill L/P (2.048 s at the "
                                     "defaults); what re-evaluating from scratch adds to the RTO is L/P − ΔL/P = "
                                     "L_k/P, and that is the number the sentence needs. Alternative "
                                     "'additional_is_full_prefill': the whole prefill.",
            "kv_cache": f"the model is {MODEL.name}: {MODEL.layers} layers, {MODEL.kv_heads} KV heads of dimension "
                        f"{MODEL.head_dim}, {MODEL.bytes_per_value} bytes per value, keys and values for every "
                        f"token ({MODEL.source}). Alternative 'full_multi_head_attention': 64 KV heads.",
            "rto_ms": "the block's sum, as printed; it assumes the snapshot restores the inference state. The "
                      "physically consistent sum is tokens_only_rto_ms. Alternative 'snapshot_holds_tokens_only': "
                      "that sum given as the RTO.",
            "kv_snapshot_rto_ms": "the snapshot as stated plus the KV cache of its L_k tokens, read at B_disk; "
                                  "copying it from host memory onto the GPUs is not counted.",
        },
        "alternative": _alternatives(p, t),
    }
    return jsonable(out)


#: Alternative answers filed under other names (none: every reading is nested under its quantities' names).
ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {}


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve`: token and byte counts and the yes/no exactly, every
    other number within 1 % relative (a zero exactly, to 1e-9). An answer of a documented alternative
    reading is graded ``alternative`` (see :func:`~kernel_lib.course.exercises.accept_readings`)."""
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def _rounds_to(computed: float, printed: float) -> bool:
    """Does ``computed`` round to ``printed`` at the printed figure's last decimal?"""
    text = repr(float(printed))
    decimals = len(text.split(".")[1].rstrip("0")) if "." in text else 0
    return round(computed, decimals) == round(printed, decimals)


def chapter_figures() -> list[dict[str, Any]]:
    """Each figure Napkin Math 0.5 prints, beside what its givens (:data:`DEFAULTS`) give:
    ``[{claim, printed, computed, holds, note}]``. Only the printed text is typed in."""
    s, c, d = solve(DEFAULTS), CHAPTER_RTO_PRINTED, DEFAULTS

    def row(claim: str, printed: str, computed: str, holds: bool, note: str) -> dict[str, Any]:
        return {"claim": claim, "printed": printed, "computed": computed, "holds": holds, "note": note}

    return [
        row("T_snap", f"≈ {c['t_snap_ms']:g} ms", f"{s['t_snap_ms']:.3f} ms",
            _rounds_to(s["t_snap_ms"], c["t_snap_ms"]),
            f"{d['snapshot_mb']:g} MB / {d['disk_mb_per_s']:,.0f} MB/s"),
        row("T_wal", f"≈ {c['t_wal_ms']:g} ms", f"{s['t_wal_ms']:.4f} ms", _rounds_to(s["t_wal_ms"], c["t_wal_ms"]),
            f"{d['wal_kb'] / 1000:g} MB / {d['disk_mb_per_s']:,.0f} MB/s + {d['random_read_us'] / 1000:g} ms"),
        row("ΔL", f"{c['delta_tokens']:,} tokens", f"{s['delta_tokens']:,} tokens",
            s["delta_tokens"] == c["delta_tokens"], f"{d['context_tokens']:,} − {d['snapshot_tokens']:,}"),
        row("T_prefill", f"{c['t_prefill_ms']:g} ms", f"{s['t_prefill_ms']:g} ms",
            _rounds_to(s["t_prefill_ms"], c["t_prefill_ms"]), "only the delta, if the snapshot restores the KV cache"),
        row("T_probe", f"{c['t_probe_ms']:g} ms", f"{s['t_probe_ms']:g} ms", s["t_probe_ms"] == c["t_probe_ms"],
            "one round trip"),
        row("RTO", f"≈ {c['rto_ms']:g} ms", f"{s['rto_ms']:.3f} ms", _rounds_to(s["rto_ms"], c["rto_ms"]),
            "the block's sum"),
        row("additional prefill from scratch", f"{c['additional_full_prefill_s']:g} s",
            f"{s['full_prefill_extra_ms'] / 1000:g} s", _rounds_to(s["full_prefill_extra_ms"] / 1000,
                                                                   c["additional_full_prefill_s"]),
            f"{s['full_prefill_ms'] / 1000:g} s is the whole prefill ({d['context_tokens']:,} / "
            f"{d['prefill_tokens_per_s']:,.0f}); the addition over the {s['t_prefill_ms']:g} ms delta is "
            f"{d['snapshot_tokens']:,} / {d['prefill_tokens_per_s']:,.0f}"),
        row("the snapshot preserves the inference state", f"{d['snapshot_mb']:g} MB",
            f"{s['kv_cache_mb']:,.1f} MB of KV cache", s["snapshot_holds_kv_cache"],
            f"{s['kv_bytes_per_token']:,} B/token on {MODEL.name}; {d['snapshot_mb']:g} MB holds "
            f"{s['snapshot_kv_token_capacity']} tokens' worth"),
        row("below the 5.0 s threshold", "yes", f"{s['rto_ms']:,.0f} / {s['tokens_only_rto_ms']:,.0f} / "
            f"{s['kv_snapshot_rto_ms']:,.0f} ms", all(r["within_threshold"] for r in s["readings"]),
            "chapter / tokens only / KV cache in the snapshot"),
    ]


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: another context length and snapshot coverage, snapshot and WAL sizes (some
    snapshots large enough for the KV cache), disk, random-read latency, prefill rate and round trip."""
    rng = random.Random(f"nm0.5:{seed}")
    context = rng.choice([4096, 8192, 16384, 32768, 65536, 131072])
    share = rng.choice([0.25, 0.5, 0.625, 0.75, 0.875])
    return {
        "context_tokens": context,
        "snapshot_tokens": int(context * share),
        "snapshot_mb": rng.choice([8.0, 16.0, 48.0, 128.0, 512.0, 4096.0, 65536.0]),
        "wal_kb": rng.choice([16.0, 64.0, 128.0, 512.0, 2048.0]),
        "disk_mb_per_s": rng.choice([500.0, 1500.0, 3500.0, 7000.0, 12000.0]),
        "random_read_us": rng.choice([10.0, 25.0, 80.0, 100.0]),
        "prefill_tokens_per_s": rng.choice([2000.0, 4000.0, 8000.0, 16000.0, 40000.0]),
        "probe_ms": rng.choice([5.0, 20.0, 45.0, 120.0, 250.0]),
    }
