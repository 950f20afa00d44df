"""Typed errors of the live substrate. All derive from :class:`kernel_lib.errors.KernelError`,
so the CLI prints them as one line (exit code 2) instead of a traceback."""

from __future__ import annotations

from kernel_lib.errors import KernelError


class LiveError(KernelError):
    """Base of the live substrate's errors."""


class SnapshotMismatchError(LiveError):
    """A workspace snapshot's files do not hash to the digest that names it (§11.4: a
    content-addressed tree is identified by its digest; any added, removed or changed file is a
    mismatch). ``differences`` lists the relative paths that differ."""

    def __init__(self, message: str, differences: list[str] | None = None):
        self.differences = list(differences or [])
        super().__init__(message)


class PatchApplyError(LiveError):
    """The candidate patch does not apply to the base repository."""


class EvidenceSignatureError(LiveError):
    """A completion record's Ed25519 signature does not verify against the executor's public key
    (tampered, truncated, or signed by another key): it is not evidence (§11.5.3)."""


class LiveProcessError(LiveError):
    """A live process (executor, worker, replacement worker) failed to start, report or stop in time."""
