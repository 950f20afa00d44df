"""Work directories of the live substrate and the etcd cluster (stdlib only): make one marked with
this process's pid, sweep the ones whose owner died, and delete a (possibly read-only) tree.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from kernel_lib._support.procs import pid_alive
from kernel_lib.errors import ConfigError

__all__ = ["OWNER_FILE", "make_writable", "remove_tree", "sweep_stale_workdirs", "make_workdir", "write_text_atomic"]


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so a reader in another process sees the old file or the new
    one, never a half-written one (a ready file, a marker, a result): write ``<name>.tmp`` beside it,
    then rename over it. Not a durability barrier (no fsync): these files describe live processes."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

OWNER_FILE = "owner.pid"   # the pid of the process that made a work directory (for the stale sweep)


def make_writable(root: str | os.PathLike) -> None:
    """Give the owner write permission again everywhere under ``root`` (before deleting it)."""
    root = Path(root)
    if not root.exists():
        return
    for dirpath, _dirnames, filenames in os.walk(root):
        Path(dirpath).chmod(0o755)
        for f in filenames:
            try:
                (Path(dirpath) / f).chmod(0o644)
            except OSError:
                pass


def remove_tree(root: str | os.PathLike) -> None:
    """Delete a (possibly read-only) snapshot or work tree; missing is fine."""
    root = Path(root)
    if root.exists():
        make_writable(root)
        shutil.rmtree(root, ignore_errors=False)


def sweep_stale_workdirs(parent: str | os.PathLike | None = None, *, prefix: str,
                         before_remove: "Callable[[Path], None] | None" = None) -> list[Path]:
    """Remove work directories (named ``prefix*`` under ``parent``, default the system temp
    directory) left by a process that died without cleaning up (its owner pid is gone, e.g. a
    killed notebook kernel), calling ``before_remove(dir)`` first (e.g. to stop processes it
    recorded). Directories without an owner mark are left alone. Returns the directories removed."""
    base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    removed = []
    for d in base.glob(prefix + "*"):
        try:
            owner = int((d / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue
        if owner != os.getpid() and not pid_alive(owner):
            if before_remove is not None:
                before_remove(d)
            remove_tree(d)
            removed.append(d)
    return removed


def make_workdir(parent: str | os.PathLike | None = None, *, prefix: str) -> Path:
    """A new private work directory ``prefix*`` under ``parent`` (default: the system temp dir),
    created if needed, marked with this process's pid; stale ones of dead owners are swept first.

    Raises: ConfigError: ``parent`` cannot be created or written."""
    try:
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        sweep_stale_workdirs(parent, prefix=prefix)
        work = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        (work / OWNER_FILE).write_text(f"{os.getpid()}\n")
    except OSError as exc:
        raise ConfigError(f"cannot create a work directory under {parent or tempfile.gettempdir()}: {exc}") from None
    return work
