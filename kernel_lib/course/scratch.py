"""Scratch folders for notebooks, with one disk policy for every figure labelled "measured".

A notebook that writes logs, blobs or workspaces asks for a :class:`ScratchArea` once (named after
the notebook) and takes one :class:`ScratchDir` per section from it::

    scratch = ScratchArea("nb11_4")
    print(scratch.describe())              # which folder, which filesystem, which device
    with scratch.dir("pause") as root:     # a fresh folder, removed when the block ends
        ...
    assert scratch.all_removed()           # the notebook's last cell

The policy, in one place:

* **Where.** Under ``parent`` if given, else ``$DURABLE_LAB_SCRATCH`` if set, else the system
  temporary directory (``tempfile.gettempdir()``, which honours ``TMPDIR``). If that one is kept in
  memory (tmpfs), the per-user cache folder ``~/.cache/durable-agents-lab/scratch`` is used instead
  when it is on a disk. Never inside the project's own checkout: a parent there is refused, so
  nothing a notebook writes can end up beside tracked files.
* **Which disk.** Every area and folder says which filesystem it is on
  (:func:`kernel_lib._support.disks.filesystem_of`). A figure timed on tmpfs measures memory, not a
  disk; :attr:`ScratchDir.on_real_disk` and :meth:`ScratchDir.measured_on` let the notebook say so
  next to the number.
* **Leftovers.** Each folder is marked with the notebook kernel's pid; folders of a kernel that died
  (killed, crashed) without cleaning up are swept when the next area with the same name is made.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kernel_lib._support.disks import FilesystemInfo, filesystem_of
from kernel_lib._support.workdirs import make_workdir, remove_tree, sweep_stale_workdirs
from kernel_lib.errors import ConfigError

__all__ = ["SCRATCH_ENV", "USER_CACHE_SCRATCH", "ScratchArea", "ScratchDir", "project_checkout",
           "scratch_dir", "scratch_parent"]

#: Environment variable naming the parent folder of every scratch folder (e.g. a folder on the disk
#: whose durability you want measured).
SCRATCH_ENV = "DURABLE_LAB_SCRATCH"
#: The fallback parent when the system temporary directory is kept in memory.
USER_CACHE_SCRATCH = Path("~/.cache/durable-agents-lab/scratch")


def project_checkout() -> Path | None:
    """The project's source checkout (the folder holding ``kernel_lib/`` and ``.git``), or None
    when kernel_lib runs from an installed copy."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / ".git").exists() and (root / "kernel_lib").is_dir() else None


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def scratch_parent(parent: str | os.PathLike | None = None) -> Path:
    """The folder new scratch folders go under, chosen by the policy in the module docstring.

    Raises:
        ConfigError: the chosen parent lies inside the project checkout, or is an existing file.
    """
    if parent is not None:
        chosen, why = Path(parent).expanduser(), "the parent argument"
    elif os.environ.get(SCRATCH_ENV):
        chosen, why = Path(os.environ[SCRATCH_ENV]).expanduser(), f"${SCRATCH_ENV}"
    else:
        chosen, why = Path(tempfile.gettempdir()), "the system temporary directory"
        if filesystem_of(chosen).in_memory:
            cache = USER_CACHE_SCRATCH.expanduser()
            if filesystem_of(cache).real_disk:
                chosen, why = cache, f"{USER_CACHE_SCRATCH} (the temporary directory is kept in memory)"
    checkout = project_checkout()
    if checkout is not None and _inside(chosen, checkout):
        raise ConfigError(f"scratch folders may not go inside the project checkout {checkout} ({why} is "
                          f"{chosen}); pass another parent or set ${SCRATCH_ENV}")
    if chosen.exists() and not chosen.is_dir():
        raise ConfigError(f"scratch parent {chosen} ({why}) is not a directory")
    return chosen


@dataclass
class ScratchDir:
    """One fresh scratch folder. Use it as a context manager (``with ... as path``: removed when
    the block ends, whether or not it failed) or call :meth:`cleanup` yourself.

    Fields:
        path: the folder (created, private, marked with this process's pid).
        label: the caller's name for it.
        filesystem: where it lives (:class:`~kernel_lib._support.disks.FilesystemInfo`).
    """

    path: Path
    label: str
    filesystem: FilesystemInfo

    @property
    def on_real_disk(self) -> bool:
        """True when the folder is on a known, non-memory filesystem."""
        return self.filesystem.real_disk

    @property
    def removed(self) -> bool:
        return not self.path.exists()

    @property
    def name(self) -> str:
        """The folder as a string (as ``tempfile.TemporaryDirectory.name``)."""
        return str(self.path)

    def measured_on(self) -> str:
        """The phrase to print beside a figure timed in this folder, e.g. ``"measured on this
        machine, ext4 on /dev/vda"`` or ``"measured in memory (tmpfs), not on a disk"``."""
        fs = self.filesystem
        if fs.in_memory is None:
            return "measured on this machine (filesystem not identified)"
        if fs.in_memory:
            return f"measured in memory ({fs.fs_type}), not on a disk"
        return f"measured on this machine, {fs.fs_type} on {fs.device or '?'}"

    def cleanup(self) -> bool:
        """Delete the folder and everything in it (read-only snapshots included). Idempotent.
        Returns True when it is gone."""
        remove_tree(self.path)
        return self.removed

    def __fspath__(self) -> str:
        return str(self.path)

    def __truediv__(self, other: str | os.PathLike) -> Path:
        return self.path / other

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc) -> None:
        self.cleanup()


@dataclass
class ScratchArea:
    """The scratch folders of one notebook (or one run), all under one parent.

    Args:
        name: a short name for the owner, used as the folders' prefix (e.g. ``"nb11_4"``; letters,
            digits, ``_`` and ``-`` only).
        parent: where to put them (default: :func:`scratch_parent`'s policy).

    Raises: ConfigError: a bad name, or a parent the policy refuses or that cannot be created.
    """

    name: str
    parent: Path | None = None
    made: list[ScratchDir] = field(default_factory=list, init=False)
    filesystem: FilesystemInfo | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "_-" for c in self.name):
            raise ConfigError(f"scratch name must be letters, digits, '_' or '-', got {self.name!r}")
        self.parent = scratch_parent(self.parent)
        try:
            self.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the scratch parent {self.parent}: {exc}") from None
        sweep_stale_workdirs(self.parent, prefix=f"{self.name}-")
        self.filesystem = filesystem_of(self.parent)

    @property
    def on_real_disk(self) -> bool:
        return self.filesystem.real_disk

    def dir(self, label: str) -> ScratchDir:
        """A new folder ``<parent>/<name>-<label>-XXXX``, empty but for its owner mark
        (``owner.pid``, used to sweep folders of a process that died).

        Raises: ConfigError: a bad label, or the folder cannot be created."""
        if not label or not all(c.isalnum() or c in "_-" for c in label):
            raise ConfigError(f"scratch label must be letters, digits, '_' or '-', got {label!r}")
        path = make_workdir(self.parent, prefix=f"{self.name}-{label}-")
        d = ScratchDir(path=path, label=label, filesystem=filesystem_of(path))
        self.made.append(d)
        return d

    def leftovers(self) -> list[Path]:
        """Folders made here that still exist."""
        return [d.path for d in self.made if not d.removed]

    def all_removed(self) -> bool:
        """True when at least one folder was made and every one is gone again."""
        return bool(self.made) and not self.leftovers()

    def cleanup(self) -> list[Path]:
        """Remove every folder made here; returns those that could not be removed."""
        for d in self.made:
            d.cleanup()
        return self.leftovers()

    def describe(self) -> str:
        """One line: the parent folder and the filesystem it is on (with the tmpfs warning)."""
        return f"scratch folders under {self.parent}: {self.filesystem.describe()}"


def scratch_dir(name: str, label: str = "work", *, parent: str | os.PathLike | None = None) -> ScratchDir:
    """One scratch folder outside an area: ``ScratchArea(name, parent).dir(label)``."""
    return ScratchArea(name, None if parent is None else Path(parent)).dir(label)
