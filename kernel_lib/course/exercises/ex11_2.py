"""§11.12 exercise 2, "Write amplification of a growing record" (Basic).

Uses §11.4.2 eq. 3 (bytes written by full snapshots and by deltas when checkpointed state grows by
the same amount every turn), evaluated by :func:`kernel_lib.cadence.snapshot_write_volumes`, and the
consolidation mechanism of §11.4.2 (merge a long delta chain into a new base).

Givens (papermill names): ``turns`` in the trajectory, ``state_growth_kb_per_turn`` growth of the
checkpointed record per turn, ``stride_turns`` turns between checkpoints, ``restore_mb_per_s`` read
rate of a restore, ``delta_overhead_ms`` fixed fetch/validate/apply cost of each delta in a chain
beyond reading its bytes.

Units: KB = 1000 bytes and MB = 10^6 bytes (SI). This is the convention under which §11.4.2's own
example (500 turns x 128 KB, stride 5) gives its printed "3.2 GB" and "64 MB"; the binary reading
(KiB, MiB) gives 3.08 GiB and 62.5 MiB instead (see :func:`chapter_example`), and is reported as the
alternative.

Model: ``n = turns // stride`` checkpoints (the last at turn ``n * stride``; a partial stride at the
end has no checkpoint). State at the final checkpoint is ``g k n`` bytes, the sum of the n deltas.
Restore from one full snapshot reads that state once; restore from the chain (empty base) reads
every delta's bytes at the same rate and pays the fixed per-delta cost n times.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from kernel_lib.cadence import snapshot_write_volumes
from kernel_lib.errors import ConfigError
from kernel_lib.course.exercises._common import Param, Tol, grade, jsonable, validate

EXERCISE = "11.2"
TITLE = "Write amplification of a growing record"

BYTES_PER_KB = 1000          # SI: reproduces §11.4.2's printed 3.2 GB / 64 MB
BYTES_PER_MB = 1000 ** 2
BYTES_PER_GB = 1000 ** 3
BINARY_KB, BINARY_MB, BINARY_GB = 1024, 1024 ** 2, 1024 ** 3

REPRESENTATIONS = ("full", "incremental")
MECHANISMS = ("consolidation", "compaction", "group_commit", "shorter_stride")

PARAMS = (
    Param("turns", int, 1, 10_000_000, "turns in the trajectory"),
    Param("state_growth_kb_per_turn", float, 1e-3, 1e7, "growth of the checkpointed record per turn, KB (1000 bytes)"),
    Param("stride_turns", int, 1, 1_000_000, "turns between checkpoints"),
    Param("restore_mb_per_s", float, 1e-3, 1e7, "read rate of a restore, MB (10^6 bytes) per second"),
    Param("delta_overhead_ms", float, 0.0, 1e6, "fixed fetch, validation and application cost per delta, ms"),
)

DEFAULTS: dict[str, Any] = {"turns": 400, "state_growth_kb_per_turn": 64, "stride_turns": 8,
                            "restore_mb_per_s": 200, "delta_overhead_ms": 20}

GRADED: dict[str, Tol] = {
    "checkpoint_count": Tol(),
    "full_write_mb": Tol(),
    "incremental_write_mb": Tol(),
    "write_amplification": Tol(),
    "final_state_mb": Tol(),
    "full_restore_s": Tol(),
    "delta_chain_restore_s": Tol(),
    "rare_crash_representation": Tol(),
    "bounding_mechanism": Tol(),
}

#: §11.4.2's worked example: givens and the figures the text prints (targets, never inputs).
CHAPTER_EXAMPLE = {"turns": 500, "state_growth_kb_per_turn": 128, "stride_turns": 5}
PRINTED = {"checkpoints": 100, "full_gb": 3.2, "incremental_mb": 64.0, "ratio": 50.5}


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, checked (ConfigError on a bad name, type or range)."""
    p = validate(PARAMS, DEFAULTS, params)
    if p["stride_turns"] > p["turns"]:
        raise ConfigError(f"stride_turns ({p['stride_turns']}) must not exceed turns ({p['turns']}): "
                          "no checkpoint would be published")
    return p


def _volumes(p: Mapping[str, Any], kb: int) -> dict[str, float]:
    n = p["turns"] // p["stride_turns"]
    vol = snapshot_write_volumes(p["state_growth_kb_per_turn"] * kb, p["stride_turns"], n)
    return {"n": n, "full_bytes": vol.full_bytes, "incremental_bytes": vol.incremental_bytes, "ratio": vol.ratio,
            "state_bytes": vol.incremental_bytes}   # the n deltas together are the whole state


def _chain_restore_s(state_bytes: float, deltas: int, rate_bytes_per_s: float, per_delta_s: float) -> float:
    """Restore from an empty base through ``deltas`` deltas: every byte read once, plus the fixed cost
    of each delta (exercise 2's restore model; not an equation of the chapter)."""
    return state_bytes / rate_bytes_per_s + deltas * per_delta_s


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity §11.12 exercise 2 asks for (eq. 3, restore times), and its decision."""
    p = validate_params(params)
    si = _volumes(p, BYTES_PER_KB)
    n = si["n"]
    rate = p["restore_mb_per_s"] * BYTES_PER_MB
    per_delta = p["delta_overhead_ms"] / 1000
    full_restore = si["state_bytes"] / rate
    chain_restore = _chain_restore_s(si["state_bytes"], n, rate, per_delta)
    incremental_wins = si["ratio"] > 1
    saved_mb = (si["full_bytes"] - si["incremental_bytes"]) / BYTES_PER_MB
    extra_restore = chain_restore - full_restore
    # illustration only: if writes ran at the restore rate, how many crashes per run would the extra
    # restore time of the chain need to cost before it ate the write time the deltas save
    saved_write_s = saved_mb * BYTES_PER_MB / rate
    breakeven = saved_write_s / extra_restore if extra_restore > 0 else None

    binary = _volumes(p, BINARY_KB)
    b_rate = p["restore_mb_per_s"] * BINARY_MB

    out: dict[str, Any] = {
        "exercise": EXERCISE,
        "checkpoint_count": n,
        "uncheckpointed_tail_turns": p["turns"] - n * p["stride_turns"],
        "full_write_bytes": si["full_bytes"],
        "incremental_write_bytes": si["incremental_bytes"],
        "full_write_mb": si["full_bytes"] / BYTES_PER_MB,
        "full_write_gb": si["full_bytes"] / BYTES_PER_GB,
        "incremental_write_mb": si["incremental_bytes"] / BYTES_PER_MB,
        "write_amplification": si["ratio"],
        "write_saved_mb": saved_mb,
        "final_state_mb": si["state_bytes"] / BYTES_PER_MB,
        "delta_chain_length": n,
        "full_restore_s": full_restore,
        "delta_chain_restore_s": chain_restore,
        "delta_chain_fixed_cost_s": n * per_delta,
        "restore_slowdown": chain_restore / full_restore,
        "extra_restore_per_crash_s": extra_restore,
        "rare_crash_representation": "incremental" if incremental_wins else "full",
        "bounding_mechanism": "consolidation",
        "illustration_saved_write_s_at_restore_rate": saved_write_s,
        "illustration_breakeven_crashes_per_run": breakeven,
    }
    out["decision"] = "incremental_with_consolidation" if incremental_wins else "full"
    out["decision_text"] = (
        f"{n} checkpoints of a record growing {p['state_growth_kb_per_turn']:g} KB/turn: full snapshots write "
        f"{out['full_write_mb']:,.1f} MB, deltas {out['incremental_write_mb']:,.1f} MB, {si['ratio']:g}x less "
        f"(eq. 3, (n+1)/2). Restoring the final {out['final_state_mb']:,.2f} MB takes {full_restore:.3g} s from one "
        f"full snapshot and {chain_restore:.3g} s through the {n}-delta chain, {out['restore_slowdown']:.3g}x "
        f"longer, almost all of it the {n} x {p['delta_overhead_ms']:g} ms fixed cost. "
        + ("A trajectory that rarely crashes pays the write cost at every checkpoint but the restore cost only "
           f"after a crash, so it should store deltas: they save {saved_mb:,.1f} MB of writes on every run and "
           f"cost {extra_restore:.3g} s extra per crash. Their weakness, restore time growing with the chain, is "
           "bounded by periodic consolidation: merging the chain into a new base caps the number of deltas a "
           "restore must fetch, validate and apply (exercise 9 chooses how often)."
           if incremental_wins else
           "With a single checkpoint the two write the same bytes and the full snapshot restores faster, so keep "
           "full snapshots; consolidation is what would bound a delta chain if the run grew longer."))
    out["reading"] = {
        "units": "KB = 1000 bytes, MB = 10^6 bytes, restore rate in 10^6 bytes/s: the SI convention reproduces "
                 f"§11.4.2's printed {PRINTED['full_gb']:g} GB and {PRINTED['incremental_mb']:g} MB (see "
                 "chapter_example()). Alternative: binary units (KiB, MiB/s).",
        "checkpoints": "n = turns // stride_turns checkpoints; the final checkpoint is at turn n·stride and its "
                       "state is g·k·n bytes (the sum of the n deltas).",
        "chain_restore": "restoring from the chain reads every delta's bytes at the restore rate and adds the "
                         "fixed per-delta cost for each of the n deltas; the full snapshot pays its bytes only. "
                         "Alternatives: the per-delta cost already covers reading the delta's bytes "
                         "(n × overhead only), or the single full snapshot also pays one fixed per-object cost.",
        "decision": "crashes are rare, so per-run write volume dominates and restore latency is paid seldom; "
                    "the mechanism that bounds chain length is consolidation (compaction only deletes what "
                    "consolidation has superseded).",
    }
    out["alternative"] = {
        "binary_units": {
            "full_write_mib": binary["full_bytes"] / BINARY_MB,
            "full_write_gib": binary["full_bytes"] / BINARY_GB,
            "incremental_write_mib": binary["incremental_bytes"] / BINARY_MB,
            "final_state_mib": binary["state_bytes"] / BINARY_MB,
            "full_restore_s": binary["state_bytes"] / b_rate,
            "delta_chain_restore_s": _chain_restore_s(binary["state_bytes"], n, b_rate, per_delta),
        },
        "overhead_includes_bytes": {"delta_chain_restore_s": n * per_delta},
        "full_pays_one_fixed_cost": {"full_restore_s": full_restore + per_delta},
    }
    return jsonable(out)


#: Alternative answers filed under other names: ``reading/key`` in ``solve()["alternative"]`` -> (reading, graded
#: quantity). Binary units give MiB where the graded reading gives MB.
ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {
    "binary_units/full_write_mib": ("binary_units", "full_write_mb"),
    "binary_units/incremental_write_mib": ("binary_units", "incremental_write_mb"),
    "binary_units/final_state_mib": ("binary_units", "final_state_mb"),
}


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve` (tolerances in ``GRADED``: 1 % relative, else exact)."""
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def chapter_example() -> dict[str, Any]:
    """§11.4.2's worked example recomputed through eq. 3 in both unit conventions, beside its printed
    figures (:data:`PRINTED`): ``{"printed", "si", "binary", "si_matches", "binary_matches"}``.

    A convention matches when it gives the printed figures to the precision the text prints them.
    """
    p = {**DEFAULTS, **CHAPTER_EXAMPLE}
    rows = {}
    for name, kb, mb, gb in (("si", BYTES_PER_KB, BYTES_PER_MB, BYTES_PER_GB),
                             ("binary", BINARY_KB, BINARY_MB, BINARY_GB)):
        v = _volumes(p, kb)
        rows[name] = {"checkpoints": v["n"], "full_gb": v["full_bytes"] / gb,
                      "incremental_mb": v["incremental_bytes"] / mb, "ratio": v["ratio"]}
    out: dict[str, Any] = {"givens": dict(CHAPTER_EXAMPLE), "printed": dict(PRINTED), **rows}
    for name in ("si", "binary"):
        r = rows[name]
        out[f"{name}_matches"] = (r["checkpoints"] == PRINTED["checkpoints"]
                                  and round(r["full_gb"], 1) == PRINTED["full_gb"]
                                  and round(r["incremental_mb"]) == PRINTED["incremental_mb"]
                                  and r["ratio"] == PRINTED["ratio"])
    return jsonable(out)


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: a whole number of strides, growth, restore rate and per-delta cost perturbed."""
    rng = random.Random(f"ex11.2:{seed}")
    stride = rng.choice([2, 4, 5, 8, 10, 12, 16, 20, 25])
    n = rng.randrange(10, 201)
    return {
        "turns": n * stride,
        "state_growth_kb_per_turn": rng.choice([16, 24, 32, 48, 64, 96, 128, 256, 512]),
        "stride_turns": stride,
        "restore_mb_per_s": rng.choice([50, 100, 150, 200, 400, 800, 1000]),
        "delta_overhead_ms": rng.choice([5, 10, 15, 20, 30, 50]),
    }
