"""``recovery.synthesis``: the synthesized fault-tolerant runtime (Failure Recovery, "Fault-Tolerant
System Synthesis": table 13, figure 5, Napkin Math 0.5, table 14).

* ``rto`` -- Napkin Math 0.5's recovery time as closed forms (sympy): snapshot read, WAL read,
  delta prefill, reconciliation probe, their sum, the full-prefill claim and what a snapshot of a
  given size can hold of a 70B model's KV cache.

Every public name is exported here and loaded on first use (PEP 562).
"""

from kernel_lib._support.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.recovery.synthesis.rto": (
        "ModelGivens", "LLAMA_70B", "RTO_SYMBOLS", "CHAPTER_RTO_PRINTED", "CHAPTER_GIVENS", "PRODUCTION_THRESHOLD_S",
        "MODEL_SYMBOLS", "GIVEN_NAMES", "rto_substitutions",
        "rto_formulas", "rto_terms", "rto_readings", "kv_bytes_per_token"),
})
