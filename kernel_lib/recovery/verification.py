"""The pre-pivot verification gate: deterministic checks decide; the model's own claim does not.

Failure Recovery, "The pivot action boundary" (the pivot step: before T_pivot is dispatched the
runtime verifies that every pre-condition holds) and Systems Perspective 0.1 ("reversibility is a
property of the environment, not the prompt"). A model that says "all tests pass, safe to go live"
has produced text; the gate reads the world instead:

* :class:`TestRunCheck` — a real test run (``python -m pytest`` in a subprocess) in the
  sandbox's working directory; evidence: exit status, pytest's summary line, duration (s) and the
  SHA-256 of the tree that was tested;
* :class:`DigestCheck` — the SHA-256 of an artifact on disk against the digest a service recorded
  for it (read from the service, e.g. the image a sandbox was provisioned with);
* :class:`StateCheck` — an invariant over a service's state, read from the service (a resource
  active, a route not yet public, a staged entry present).

:func:`run_gate` runs the checks in order and returns a :class:`GateVerdict`: ``passed`` is true
exactly when there is at least one check and every check passed. A check that raises is a failed
check (its evidence names the exception); it never passes by default. A :class:`ModelClaim` is
recorded with the verdict and shown, with weight 0: whatever it says, ``passed`` is computed from
the checks alone. The runner records the verdict (``PivotVerified``) with
:meth:`kernel_lib.recovery.runner.SagaRunner.verify_pivot`; the crossing follows only a passing
one.

The checks do their reads when :func:`run_gate` calls them (effects: a subprocess, file reads,
service reads); the verdict itself is a pure function of their results.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kernel_lib.errors import VerificationError

__all__ = ["CheckResult", "ModelClaim", "GateVerdict", "Check", "TestRunCheck", "DigestCheck", "StateCheck",
           "run_gate", "tree_sha256", "file_sha256"]


def _json_safe(value: Any) -> Any:
    """``value`` as plain JSON data (anything else becomes its ``repr``)."""
    return json.loads(json.dumps(value, default=repr, sort_keys=True))


@dataclass(frozen=True)
class CheckResult:
    """One check's result: ``name``, ``passed`` and ``evidence`` (JSON data: what was read)."""

    name: str
    passed: bool
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": bool(self.passed), "evidence": _json_safe(self.evidence)}


@dataclass(frozen=True)
class ModelClaim:
    """What the model said about its own work (``text``) and whether it claims success. Recorded
    with the verdict and shown; its weight in the verdict is 0."""

    text: str
    claims_success: bool

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text[:2000], "claims_success": bool(self.claims_success), "weight": 0}


@dataclass(frozen=True)
class GateVerdict:
    """The gate's verdict: the :class:`CheckResult` of every check, in order, and the model's
    claim (ignored). ``passed``: at least one check and all of them passed."""

    checks: tuple[CheckResult, ...]
    model_claim: ModelClaim | None = None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failed_checks(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.checks if not c.passed)

    @property
    def claim_contradicted(self) -> bool:
        """The model claimed success while a check failed."""
        return bool(self.model_claim and self.model_claim.claims_success and not self.passed)

    def to_record(self) -> dict[str, Any]:
        """``{passed, checks, failed_checks, model_claim}``: the fields of ``PivotVerified``."""
        return {"passed": self.passed, "checks": [c.to_json() for c in self.checks],
                "failed_checks": list(self.failed_checks),
                "model_claim": self.model_claim.to_json() if self.model_claim else None}


class Check(Protocol):
    """A deterministic check: ``name`` and ``run()`` returning a :class:`CheckResult`."""

    name: str

    def run(self) -> CheckResult: ...


def run_gate(checks: Iterable[Check], claim: ModelClaim | None = None) -> GateVerdict:
    """Run ``checks`` in order and return the :class:`GateVerdict` (see the module docstring).

    A check that raises an ``Exception`` is recorded as failed with ``{"error": ...}`` as its
    evidence. ``claim`` is recorded and given no weight.

    Raises:
        VerificationError: no checks, a check without a name, two checks with one name, or a
            ``claim`` that is not a :class:`ModelClaim`.
    """
    checks = list(checks)
    if not checks:
        raise VerificationError("the pre-pivot gate needs at least one deterministic check: an empty gate would "
                                "let the crossing rest on nothing")
    names = [getattr(c, "name", None) for c in checks]
    if any(not isinstance(n, str) or not n for n in names) or len(set(names)) != len(names):
        raise VerificationError(f"every check needs a unique non-empty name, got {names!r}")
    if claim is not None and not isinstance(claim, ModelClaim):
        raise VerificationError(f"claim must be a ModelClaim or None, got {type(claim).__name__}")
    results = []
    for c in checks:
        try:
            r = c.run()
            if not isinstance(r, CheckResult):
                r = CheckResult(c.name, False, {"error": f"the check returned {type(r).__name__}, not a CheckResult"})
        except Exception as exc:   # a check that cannot say yes has said no
            r = CheckResult(c.name, False, {"error": f"{type(exc).__name__}: {exc}"[:500]})
        results.append(r)
    return GateVerdict(tuple(results), claim)


# --- digests ------------------------------------------------------------------------------------


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 hex of a file's bytes (OSError when it cannot be read)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_sha256(root: str | os.PathLike, *, skip: Sequence[str] = ("__pycache__", ".pytest_cache")) -> str:
    """SHA-256 hex of a directory tree: the sorted ``relative/path\\0sha256\\n`` lines of its
    regular files (directories named in ``skip`` are left out). OSError when unreadable."""
    root = Path(root)
    lines = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part in skip for part in rel.parts) or not p.is_file():
            continue
        lines.append(f"{rel.as_posix()}\0{file_sha256(p)}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


# --- the checks ---------------------------------------------------------------------------------

_SUMMARY = re.compile(r"\b(\d+) (passed|failed|error|errors)\b")


@dataclass(frozen=True)
class TestRunCheck:
    """Run the tests of ``directory`` with ``python -m pytest -q`` in a subprocess (no cache, no
    byte-code, the caller's pytest plugins and settings dropped: no installed plugin is
    auto-loaded, ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``; name the ones the tests need in
    ``plugins``, each passed as ``-p NAME``; auto-loading every plugin of a full environment costs
    seconds per run). Passes when pytest exits 0 and
    reports at least one passed test. Evidence: ``returncode``, ``summary`` (pytest's last line),
    ``passed``/``failed`` counts, ``duration_s`` (wall clock), ``tree_sha256`` of what was
    tested, ``directory``."""

    __test__ = False   # not a pytest test class

    name: str
    directory: str
    timeout_s: float = 120.0
    plugins: tuple[str, ...] = ()

    def run(self) -> CheckResult:
        d = Path(self.directory)
        if not d.is_dir():
            return CheckResult(self.name, False, {"error": f"no directory {d}", "directory": str(d)})
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "COV_"))}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        digest = tree_sha256(d)
        t0 = time.monotonic()
        try:
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                                  "--no-header", "--color=no", "-o", "addopts=",
                                  *[a for name in self.plugins for a in ("-p", name)], "."], cwd=d, env=env,
                                 capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            return CheckResult(self.name, False, {"error": f"the test run took more than {self.timeout_s} s",
                                                  "directory": str(d), "tree_sha256": digest})
        lines = [ln for ln in run.stdout.splitlines() if ln.strip()]
        summary = lines[-1] if lines else run.stderr.strip()[-300:]
        counts = {k: int(n) for n, k in _SUMMARY.findall(summary)}
        ok = run.returncode == 0 and counts.get("passed", 0) > 0
        return CheckResult(self.name, ok, {
            "returncode": run.returncode, "summary": summary[:300], "passed": counts.get("passed", 0),
            "failed": counts.get("failed", 0), "duration_s": round(time.monotonic() - t0, 3),
            "tree_sha256": digest, "directory": str(d)})


@dataclass(frozen=True)
class DigestCheck:
    """The SHA-256 of the file ``path`` against ``expected()`` — the digest a service recorded
    (read when the check runs; None: the service holds no record). ``source`` says where the
    expected digest was read (for the evidence). Evidence: ``actual_sha256``,
    ``expected_sha256``, ``source``, ``path``, ``bytes``."""

    name: str
    path: str
    expected: Callable[[], str | None]
    source: str = ""

    def run(self) -> CheckResult:
        want = self.expected()
        p = Path(self.path)
        got = file_sha256(p) if p.is_file() else None
        ev = {"actual_sha256": got, "expected_sha256": want, "source": self.source, "path": str(p),
              "bytes": p.stat().st_size if got else None}
        if want is None:
            ev["error"] = "the service holds no digest for this artifact"
        elif got is None:
            ev["error"] = "the artifact is missing"
        return CheckResult(self.name, got is not None and want is not None and got == want, ev)


@dataclass(frozen=True)
class StateCheck:
    """An invariant over a service's state: ``read()`` reads it (from the service), ``predicate``
    judges what was read; ``expected`` says in words what must hold. Evidence: ``observed``
    (what was read, as JSON) and ``expected``."""

    name: str
    read: Callable[[], Any]
    predicate: Callable[[Any], bool]
    expected: str = ""

    def run(self) -> CheckResult:
        observed = self.read()
        return CheckResult(self.name, bool(self.predicate(observed)),
                           {"observed": _json_safe(observed), "expected": self.expected})
