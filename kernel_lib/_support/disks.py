"""Which filesystem holds a path (stdlib only): mount point, filesystem type, device, and whether it
is kept in memory (tmpfs, ramfs) rather than on a disk.

A figure labelled "measured" that involves ``fsync``/``fdatasync`` means something only on a real
disk: on tmpfs the barrier returns at once, so the same code "measures" memory. Callers that time
durable writes ask :func:`filesystem_of` first and say which of the two they measured.

The answer comes from ``/proc/self/mountinfo`` (or ``/proc/mounts``) on Linux. Elsewhere the type is ``"unknown"`` and
``in_memory`` is None: the caller must then say it could not tell.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["IN_MEMORY_DEVICE_PREFIXES", "IN_MEMORY_FS_TYPES", "FilesystemInfo", "filesystem_of"]

#: Filesystem types whose files live in memory: a barrier there does not reach any disk.
IN_MEMORY_FS_TYPES = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"})
#: Block devices that are RAM (compressed or plain), whatever filesystem is put on them.
IN_MEMORY_DEVICE_PREFIXES = ("/dev/zram", "/dev/ram")


@dataclass(frozen=True)
class FilesystemInfo:
    """The filesystem holding ``path``.

    Fields:
        path: the path asked about, resolved (symlinks followed).
        mount_point: where that filesystem is mounted (None when unknown).
        fs_type: e.g. ``"ext4"``, ``"xfs"``, ``"tmpfs"``, ``"overlay"``; ``"unknown"`` off Linux.
        device: the mount source (e.g. ``"/dev/vda1"``; None when unknown).
        in_memory: True for :data:`IN_MEMORY_FS_TYPES` or a RAM block device
            (:data:`IN_MEMORY_DEVICE_PREFIXES`), False for any other known type, None when the type
            could not be read.
    """

    path: str
    mount_point: str | None
    fs_type: str
    device: str | None
    in_memory: bool | None

    @property
    def real_disk(self) -> bool:
        """True only when the type is known and not an in-memory one."""
        return self.in_memory is False

    def describe(self) -> str:
        """One line for a reader: ``"ext4 on /dev/vda (mounted at /)"``, with a warning for tmpfs."""
        if self.in_memory is None:
            return f"{self.path}: filesystem could not be identified (no /proc/self/mountinfo)"
        where = f"{self.fs_type} on {self.device or '?'} (mounted at {self.mount_point})"
        if self.in_memory:
            return (f"{where}: kept in memory, so a durable write there does not reach a disk; figures "
                    "timed there do not measure a disk")
        return where

    def to_dict(self) -> dict:
        return {**asdict(self), "real_disk": self.real_disk}


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040`` ...)."""
    for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, ch)
    return field


def _mounts() -> list[tuple[str, str, str]]:
    """``(mount point, fs type, device)`` of every mount, from ``/proc/self/mountinfo`` (or
    ``/proc/mounts``); empty when neither can be read."""
    rows = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) >= 5:
                    kind, source = (right.split() + ["", ""])[:2]
                    rows.append((_unescape(fields[4]), kind, _unescape(source)))
        return rows
    except OSError:
        pass
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                source, mnt, kind = (line.split() + ["", "", ""])[:3]
                rows.append((_unescape(mnt), kind, _unescape(source)))
    except OSError:
        pass
    return rows


def filesystem_of(path: str | os.PathLike) -> FilesystemInfo:
    """The filesystem that holds ``path`` (or, if it does not exist yet, its nearest existing
    ancestor): the longest mount point containing the resolved path, from ``/proc/self/mountinfo``.

    Never raises for an unreadable mount table: the result then has ``fs_type="unknown"`` and
    ``in_memory=None``."""
    p = Path(path).expanduser()
    while not p.exists() and p != p.parent:
        p = p.parent
    real = os.path.realpath(p)
    best_mnt, fs_type, device = None, "unknown", None
    for mnt, kind, source in _mounts():
        inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= len(best_mnt or ""):
            best_mnt, fs_type, device = mnt, kind or "unknown", source or None
    in_memory = None if fs_type == "unknown" else (
        fs_type in IN_MEMORY_FS_TYPES or (device or "").startswith(IN_MEMORY_DEVICE_PREFIXES))
    return FilesystemInfo(path=real, mount_point=best_mnt, fs_type=fs_type, device=device, in_memory=in_memory)
