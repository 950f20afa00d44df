"""The immutable workspace snapshot ``ws_r18`` (§11.1, §11.4): base repository + candidate patch r18.

A snapshot is a directory tree named by its content:

* the *manifest* maps every relative path (POSIX separators) to the SHA-256 of its bytes;
* the *digest* is the SHA-256 of the canonical (RFC 8785) JSON encoding of the manifest;
* the directory is ``<root>/ws_r18-<digest[:16]>`` and is made read-only after it is built.

:func:`verify` recomputes the manifest and raises :class:`SnapshotMismatchError` if any file was
added, removed or changed. (Read-only permissions stop accidents, not root: the digest check is
what guarantees the executor tests exactly the snapshot the intent names.)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import rfc8785

from kernel_lib._support.workdirs import make_writable, remove_tree  # noqa: F401
from kernel_lib.errors import PatchApplyError, SnapshotMismatchError

#: The dataset directory: ``datasets/repair_r18`` of this repository.
DATASET_DIR = Path(__file__).resolve().parents[2] / "datasets" / "repair_r18"
BASE_DIR = DATASET_DIR / "base"
PATCH_FILE = DATASET_DIR / "patch_r18.diff"
SNAPSHOT_NAME = "ws_r18"

#: Names never part of a snapshot (interpreter and tool caches).
_IGNORED = {"__pycache__", ".pytest_cache"}


@dataclass(frozen=True)
class Snapshot:
    """A built snapshot: its directory, digest (hex SHA-256) and manifest (path → sha256)."""

    path: Path
    digest: str
    manifest: dict[str, str]

    @property
    def ref(self) -> str:
        """``ws_r18@sha256:<digest>``: how an intent names the snapshot (its input_ref)."""
        return f"{SNAPSHOT_NAME}@sha256:{self.digest}"


def _files(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED)
        for f in filenames:
            if not f.endswith((".pyc", ".pyo")):
                out.append(Path(dirpath) / f)
    return sorted(out)


def manifest_of(root: str | os.PathLike) -> dict[str, str]:
    """Relative POSIX path → SHA-256 hex of every file under ``root`` (caches excluded)."""
    root = Path(root)
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in _files(root)}


def manifest_digest(manifest: dict[str, str]) -> str:
    """SHA-256 hex of the canonical (RFC 8785) encoding of ``manifest``: the snapshot's root digest."""
    return hashlib.sha256(rfc8785.dumps(manifest)).hexdigest()


def apply_patch(tree: str | os.PathLike, patch_file: str | os.PathLike) -> None:
    """Apply a unified diff (``-p1``) to ``tree`` in place with ``git apply`` (or ``patch``).

    Raises PatchApplyError if neither tool exists or the patch does not apply cleanly.
    """
    tree, patch_file = Path(tree), Path(patch_file).resolve()
    git, patch = shutil.which("git"), shutil.which("patch")
    if git:
        # --unsafe-paths is not needed: paths are relative; run outside any repository
        cmd = [git, "--git-dir=/nonexistent", "apply", "--whitespace=nowarn", str(patch_file)]
        env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tree.parent)}
    elif patch:
        cmd = [patch, "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-i", str(patch_file)]
        env = dict(os.environ)
    else:
        raise PatchApplyError("neither `git` nor `patch` is installed; cannot apply the candidate patch")
    p = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env=env, timeout=30)
    if p.returncode != 0:
        raise PatchApplyError(f"{patch_file.name} does not apply to {tree}: {(p.stderr or p.stdout).strip()[:300]}")
    for rej in list(tree.rglob("*.rej")) + list(tree.rglob("*.orig")):
        rej.unlink()


def _make_read_only(root: Path) -> None:
    for p in _files(root):
        p.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    for dirpath, _, _ in sorted(os.walk(root), reverse=True):
        Path(dirpath).chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)


def build_snapshot(dest_root: str | os.PathLike, base: str | os.PathLike = BASE_DIR,
                   patch_file: str | os.PathLike | None = PATCH_FILE) -> Snapshot:
    """Build ``ws_r18`` = ``base`` + ``patch_file`` under ``dest_root`` as a read-only,
    content-addressed directory, and return it. Building the same content twice returns the
    existing directory (after verifying it).

    Raises: PatchApplyError (the patch does not apply), SnapshotMismatchError (an existing
    directory with this name no longer matches its digest).
    """
    dest_root = Path(dest_root)
    dest_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=dest_root))
    try:
        tree = staging / "tree"
        tree.mkdir()
        for rel in manifest_of(base):
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(base) / rel, tree / rel)
        if patch_file is not None:
            apply_patch(tree, patch_file)
        manifest = manifest_of(tree)
        digest = manifest_digest(manifest)
        final = dest_root / f"{SNAPSHOT_NAME}-{digest[:16]}"
        if final.exists():
            verify(final, digest)
        else:
            _make_read_only(tree)
            tree.chmod(0o755)   # rename needs the directory itself writable on some systems
            os.rename(tree, final)
            final.chmod(0o555)
        return Snapshot(final, digest, manifest)
    finally:
        remove_tree(staging)


def verify(snapshot_dir: str | os.PathLike, digest: str) -> dict[str, str]:
    """Check that ``snapshot_dir`` hashes to ``digest``; return its manifest.

    Raises:
        SnapshotMismatchError: the directory is missing, or a file was added, removed or changed
            (``differences`` names them).
    """
    snapshot_dir = Path(snapshot_dir)
    if not snapshot_dir.is_dir():
        raise SnapshotMismatchError(f"snapshot directory {snapshot_dir} does not exist")
    manifest = manifest_of(snapshot_dir)
    actual = manifest_digest(manifest)
    if actual != digest:
        diffs: list[str] = []
        expected_name = snapshot_dir.name
        diffs.append(f"digest {actual[:16]}… != {digest[:16]}… ({expected_name})")
        raise SnapshotMismatchError(
            f"snapshot {snapshot_dir} does not match digest {digest}: its content hashes to {actual}", diffs)
    return manifest


def copy_verified(snapshot_dir: str | os.PathLike, digest: str, dest: str | os.PathLike) -> Path:
    """Copy a verified snapshot into a fresh, writable private directory ``dest`` and verify
    the copy too. Raises SnapshotMismatchError if either does not match ``digest``."""
    manifest = verify(snapshot_dir, digest)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=False)
    for rel in manifest:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(snapshot_dir) / rel, dest / rel)
    verify(dest, digest)
    return dest
