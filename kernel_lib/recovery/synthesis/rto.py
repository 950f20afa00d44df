"""Napkin Math 0.5, the recovery time objective, as closed forms (sympy), and what its snapshot can hold.

Failure Recovery, "Fault-Tolerant System Synthesis" → "Fault injection benchmarks", Napkin Math 0.5
(the RTO of a crashed trajectory resumed from a base snapshot and the WAL after it). The chapter's
sum, in its own terms::

    T_snap    = D_snap / B_disk                 read the latest base snapshot S_k
    T_wal     = D_wal / B_disk + t_random       read the WAL records after it (one random read)
    ΔL        = L − L_k                         context tokens added since the snapshot
    T_prefill = ΔL / P_prefill                  re-prefill only that delta
    T_probe   = L_net                           one round trip: tool session + reconciliation probe
    RTO       = T_snap + T_wal + T_prefill + T_probe

Units (decimal, as the block computes): sizes in MB (the exercise's ``wal_kb`` is divided by
1,000), bandwidth in MB/s, ``t_random`` and ``L_net`` in ms, ``P`` in tokens/s; every time
returned is in ms.

Two things the block asserts that its givens do not bear out, both computed here:

1. **The "additional 2.05 s".** Prefilling the whole context from scratch takes L / P = 16,384 /
   8,000 = 2.048 s: that is the *whole* prefill, not an addition. Re-evaluating from scratch
   replaces the 0.512 s delta prefill, so what it adds to the RTO is (L − ΔL) / P = L_k / P =
   12,288 / 8,000 = 1.536 s. The block's sentence speaks of the extra cost, so it needs 1.536 s;
   2.05 s is the total (``full_prefill_ms`` against ``full_prefill_extra_ms``).
2. **What a 48 MB snapshot can hold.** Skipping the prefill of the first L_k tokens needs their
   KV cache. For a dense 70B model with the published Llama 2/3 70B shape (:data:`LLAMA_70B`:
   80 layers, 8 KV heads under grouped-query attention, head dimension 128, 2-byte bf16 values),
   each token's keys and values take 2 · 80 · 8 · 128 · 2 = 327,680 bytes, so 12,288 tokens take
   4,026.5 MB (decimal), about 84 times the 48 MB stated; 48 MB holds 146 tokens' worth. A 48 MB
   snapshot holds the tokens (and the rest of the agent's state), not the inference state, so the
   prefill of the snapshot's own tokens is not saved.

:func:`rto_readings` sets the readings side by side with the chapter's printed figure:
``chapter`` (the block's sum: the snapshot restores inference state), ``tokens_only`` (the
snapshot holds tokens: the whole context is prefilled) and ``kv_cache_snapshot`` (the snapshot
also carries the KV cache of its L_k tokens, read at B_disk, and only ΔL is prefilled; moving it
from host memory onto the GPUs is not counted).

Pure: no I/O, no clock. The exercise (:mod:`kernel_lib.course.exercises.nm0_5`) and the measured
decomposition of our own runtime (:mod:`kernel_lib.live.rto`) both use these forms.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy as sp

from kernel_lib.errors import ConfigError

__all__ = ["ModelGivens", "LLAMA_70B", "RTO_SYMBOLS", "MODEL_SYMBOLS", "CHAPTER_RTO_PRINTED", "CHAPTER_GIVENS",
           "PRODUCTION_THRESHOLD_S", "rto_formulas", "rto_substitutions", "rto_terms", "rto_readings",
           "kv_bytes_per_token", "GIVEN_NAMES"]


@dataclass(frozen=True)
class ModelGivens:
    """The shape of the served model that fixes its KV cache per token (assumed; the chapter names
    only "a 70B parameter dense model"): ``layers`` transformer blocks, ``kv_heads`` key/value heads
    per block (grouped-query attention shares them among the query heads), ``head_dim`` values per
    head, ``bytes_per_value`` (2 for bf16/fp16). ``source`` says where the numbers come from.

    Raises ConfigError when a field is not a positive integer."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_value: int
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("layers", "kv_heads", "head_dim", "bytes_per_value"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{field} must be a positive integer, got {v!r}")


#: Llama 2 70B and Llama 3 70B share this attention shape: ``num_hidden_layers=80``,
#: ``num_key_value_heads=8``, ``hidden_size=8192`` over ``num_attention_heads=64`` (head dim 128),
#: ``torch_dtype=bfloat16``.
LLAMA_70B = ModelGivens(
    name="Llama 2/3 70B (dense, GQA)", layers=80, kv_heads=8, head_dim=128, bytes_per_value=2,
    source="config.json of meta-llama/Llama-2-70b-hf and meta-llama/Meta-Llama-3-70B on Hugging Face "
           "(num_hidden_layers 80, num_key_value_heads 8, hidden_size 8192 / num_attention_heads 64, "
           "bfloat16); Touvron et al. 2023, 'Llama 2: Open Foundation and Fine-Tuned Chat Models', "
           "sec. 2.2 (grouped-query attention in the 34B and 70B models)")

#: What Napkin Math 0.5 prints (typed from the text only to set it beside what its givens give).
CHAPTER_RTO_PRINTED: dict[str, float] = {
    "t_snap_ms": 13.7, "t_wal_ms": 0.06, "delta_tokens": 4096, "t_prefill_ms": 512.0, "t_probe_ms": 45.0,
    "rto_ms": 570.8, "additional_full_prefill_s": 2.05,
}
#: The block's givens under the exercise's parameter names (KB and MB decimal).
CHAPTER_GIVENS: dict[str, Any] = {
    "context_tokens": 16384, "snapshot_tokens": 12288, "snapshot_mb": 48.0, "wal_kb": 128.0,
    "disk_mb_per_s": 3500.0, "random_read_us": 25.0, "prefill_tokens_per_s": 8000.0, "probe_ms": 45.0,
}
#: The production threshold the block compares its RTO with (seconds).
PRODUCTION_THRESHOLD_S = 5.0

#: The givens of :func:`rto_terms`, in the order of :data:`RTO_SYMBOLS` (the exercise's parameter names).
GIVEN_NAMES = ("context_tokens", "snapshot_tokens", "snapshot_mb", "wal_kb", "disk_mb_per_s", "random_read_us",
               "prefill_tokens_per_s", "probe_ms")

#: L (context tokens at the crash), L_k (tokens covered by the snapshot), D_snap (MB), D_wal (MB),
#: B_disk (MB/s), t_random (ms), P (tokens/s), L_net (ms).
RTO_SYMBOLS = sp.symbols("L L_k D_snap D_wal B_disk t_random P_prefill L_net", nonnegative=True)
#: The model's layers, KV heads, head dimension and bytes per value.
MODEL_SYMBOLS = sp.symbols("n_layers n_kv d_head b", positive=True)


def kv_bytes_per_token(model: ModelGivens = LLAMA_70B) -> int:
    """Bytes of KV cache one token occupies: keys and values (2) × layers × KV heads × head dim ×
    bytes per value (327,680 for :data:`LLAMA_70B`)."""
    return 2 * model.layers * model.kv_heads * model.head_dim * model.bytes_per_value


@functools.lru_cache(maxsize=1)
def rto_formulas() -> dict[str, sp.Expr]:
    """The closed forms in :data:`RTO_SYMBOLS` and :data:`MODEL_SYMBOLS`; every time in ms, sizes in
    decimal MB, ``kv_bytes_per_token`` in bytes. Keys: ``t_snap_ms``, ``t_wal_ms``, ``delta_tokens``,
    ``t_prefill_ms``, ``t_probe_ms``, ``rto_ms``, ``full_prefill_ms`` (L / P), ``full_prefill_extra_ms``
    (what prefilling everything adds to the RTO: L_k / P), ``tokens_only_rto_ms``,
    ``kv_bytes_per_token``, ``kv_cache_mb`` (of the L_k snapshot tokens), ``snapshot_kv_token_capacity``
    (tokens whose KV cache fits in D_snap), ``kv_snapshot_t_snap_ms`` and ``kv_snapshot_rto_ms``
    (the snapshot also carrying that KV cache)."""
    L, Lk, D_snap, D_wal, B, t_rand, P, L_net = RTO_SYMBOLS
    n_layers, n_kv, d_head, b = MODEL_SYMBOLS
    ms = sp.Integer(1000)
    t_snap = D_snap / B * ms
    t_wal = D_wal / B * ms + t_rand
    delta = L - Lk
    t_prefill = delta / P * ms
    full = L / P * ms
    per_token = 2 * n_layers * n_kv * d_head * b
    kv_mb = per_token * Lk / sp.Integer(10) ** 6
    kv_t_snap = (D_snap + kv_mb) / B * ms
    return {
        "t_snap_ms": t_snap,
        "t_wal_ms": t_wal,
        "delta_tokens": delta,
        "t_prefill_ms": t_prefill,
        "t_probe_ms": L_net,
        "rto_ms": t_snap + t_wal + t_prefill + L_net,
        "full_prefill_ms": full,
        "full_prefill_extra_ms": sp.simplify(full - t_prefill),
        "tokens_only_rto_ms": t_snap + t_wal + full + L_net,
        "kv_bytes_per_token": per_token,
        "kv_cache_mb": kv_mb,
        "snapshot_kv_token_capacity": sp.floor(D_snap * sp.Integer(10) ** 6 / per_token),
        "kv_snapshot_t_snap_ms": kv_t_snap,
        "kv_snapshot_rto_ms": kv_t_snap + t_wal + t_prefill + L_net,
    }


def _rational(x: float | int) -> sp.Rational:
    """The decimal as typed (0.128, 3500.0) as an exact rational."""
    f = Fraction(repr(float(x))) if isinstance(x, float) else Fraction(x)
    return sp.Rational(f.numerator, f.denominator)


def _check_givens(givens: dict[str, Any]) -> dict[str, Any]:
    """Each given a finite number in its range (token counts integers); ConfigError naming it."""
    out = {}
    for name in GIVEN_NAMES:
        if name not in givens:
            raise ConfigError(f"{name} is missing (givens: {', '.join(GIVEN_NAMES)})")
        v = givens[name]
        integer = name.endswith("_tokens")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"{name} must be a finite {'integer' if integer else 'number'}, got {v!r}")
        if integer and not float(v).is_integer():
            raise ConfigError(f"{name} must be an integer, got {v!r}")
        strictly = name in ("context_tokens", "disk_mb_per_s", "prefill_tokens_per_s")
        if v < 0 or (strictly and v == 0):
            raise ConfigError(f"{name} must be {'positive' if strictly else 'at least 0'}, got {v!r}")
        out[name] = int(v) if integer else float(v)
    extra = sorted(set(givens) - set(GIVEN_NAMES))
    if extra:
        raise ConfigError(f"unknown given {extra[0]!r}; known: {', '.join(GIVEN_NAMES)}")
    if out["snapshot_tokens"] > out["context_tokens"]:
        raise ConfigError(f"snapshot_tokens {out['snapshot_tokens']} is more than context_tokens "
                          f"{out['context_tokens']} (the snapshot cannot cover more than the context at the crash)")
    return out


def rto_substitutions(givens: dict[str, Any], model: ModelGivens = LLAMA_70B) -> dict[sp.Symbol, sp.Rational]:
    """``{symbol: exact value}`` for :func:`rto_formulas` from the givens (named as :data:`GIVEN_NAMES`,
    ``wal_kb`` turned into MB and ``random_read_us`` into ms). Raises ConfigError for a missing,
    unknown or bad given, or a snapshot covering more tokens than the context holds."""
    g = _check_givens(dict(givens))
    L, Lk, D_snap, D_wal, B, t_rand, P, L_net = RTO_SYMBOLS
    n_layers, n_kv, d_head, b = MODEL_SYMBOLS
    return {L: sp.Integer(g["context_tokens"]), Lk: sp.Integer(g["snapshot_tokens"]),
            D_snap: _rational(g["snapshot_mb"]), D_wal: _rational(g["wal_kb"]) / 1000,
            B: _rational(g["disk_mb_per_s"]), t_rand: _rational(g["random_read_us"]) / 1000,
            P: _rational(g["prefill_tokens_per_s"]), L_net: _rational(g["probe_ms"]),
            n_layers: sp.Integer(model.layers), n_kv: sp.Integer(model.kv_heads),
            d_head: sp.Integer(model.head_dim), b: sp.Integer(model.bytes_per_value)}


_INTEGERS = ("delta_tokens", "kv_bytes_per_token", "snapshot_kv_token_capacity")


def rto_terms(givens: dict[str, Any], model: ModelGivens = LLAMA_70B) -> dict[str, Any]:
    """Every quantity of :func:`rto_formulas` at the givens, as Python numbers (token and byte counts
    ``int``, times in ms and sizes in MB ``float``), plus ``snapshot_holds_kv_cache`` (does D_snap
    reach the KV cache of the L_k tokens?) and ``rto_within_threshold`` (chapter's sum below
    :data:`PRODUCTION_THRESHOLD_S`). Raises ConfigError as :func:`rto_substitutions`."""
    subs = rto_substitutions(givens, model)
    out: dict[str, Any] = {}
    for name, expr in rto_formulas().items():
        v = expr.xreplace(subs)
        out[name] = int(v) if name in _INTEGERS else float(v)
    out["snapshot_holds_kv_cache"] = bool(subs[RTO_SYMBOLS[2]] >= rto_formulas()["kv_cache_mb"].xreplace(subs))
    out["rto_within_threshold"] = out["rto_ms"] < PRODUCTION_THRESHOLD_S * 1000
    return out


def rto_readings(givens: dict[str, Any], model: ModelGivens = LLAMA_70B) -> list[dict[str, Any]]:
    """The RTO under each reading of what the snapshot holds, one row each: ``{reading, snapshot_holds,
    t_snap_ms, t_wal_ms, prefill_tokens, t_prefill_ms, t_probe_ms, rto_ms, within_threshold, note}``:

    * ``chapter``: the block's sum (the snapshot restores the inference state; only ΔL is prefilled);
    * ``tokens_only``: the snapshot holds tokens, so the whole context L is prefilled;
    * ``kv_cache_snapshot``: the snapshot also carries the KV cache of its L_k tokens (read at
      B_disk; the copy onto the GPUs not counted), and only ΔL is prefilled.

    Raises ConfigError as :func:`rto_substitutions`."""
    t = rto_terms(givens, model)
    g = _check_givens(dict(givens))
    common = {"t_wal_ms": t["t_wal_ms"], "t_probe_ms": t["t_probe_ms"]}
    rows = [
        {"reading": "chapter", "snapshot_holds": "inference state in the stated snapshot", "t_snap_ms": t["t_snap_ms"],
         **common, "prefill_tokens": t["delta_tokens"], "t_prefill_ms": t["t_prefill_ms"], "rto_ms": t["rto_ms"],
         "note": f"needs the KV cache of {g['snapshot_tokens']:,} tokens ({t['kv_cache_mb']:,.1f} MB for "
                 f"{model.name}) inside {g['snapshot_mb']:g} MB"
                 + ("" if t["snapshot_holds_kv_cache"] else ": it does not fit")},
        {"reading": "tokens_only", "snapshot_holds": "tokens and agent state", "t_snap_ms": t["t_snap_ms"], **common,
         "prefill_tokens": g["context_tokens"], "t_prefill_ms": t["full_prefill_ms"], "rto_ms": t["tokens_only_rto_ms"],
         "note": f"the whole context is prefilled: {t['full_prefill_extra_ms']:,.1f} ms more than the delta"},
        {"reading": "kv_cache_snapshot", "snapshot_holds": "tokens, agent state and the KV cache",
         "t_snap_ms": t["kv_snapshot_t_snap_ms"], **common, "prefill_tokens": t["delta_tokens"],
         "t_prefill_ms": t["t_prefill_ms"], "rto_ms": t["kv_snapshot_rto_ms"],
         "note": f"{g['snapshot_mb']:g} MB + {t['kv_cache_mb']:,.1f} MB of KV cache read at "
                 f"{g['disk_mb_per_s']:g} MB/s; host-to-GPU copy not counted"},
    ]
    for r in rows:
        r["within_threshold"] = r["rto_ms"] < PRODUCTION_THRESHOLD_S * 1000
    return rows
