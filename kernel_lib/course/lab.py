"""The working copy the course opens in JupyterLab, so that working through a notebook never dirties
the repository's tracked files.

``make lab`` calls :func:`prepare`, then starts JupyterLab with the working copy as its root. The
working copy lives in ``lab/`` at the top of the checkout (listed in ``.gitignore``)::

    lab/
      shared -> ../../shared       the chapters and third-party data beside the project (read in place)
      course/                      JupyterLab's root: what the student sees
        notebooks/  exercises/  solutions/     copies of the tracked notebooks, the student's to edit
        chapters/                  Markdown views of the chapters, rendered on every make lab
        backups/                   your old copies, kept by ``course fresh``
        datasets -> ../../datasets   apps -> ../../apps     the project's own data and apps, linked

A notebook in ``lab/course/notebooks/`` sits two folders below ``lab/``, as a tracked one sits two
folders below the project's parent, so the relative paths the notebooks use (``../datasets/…``,
``../../shared/data/…``, links to ``../exercises/…``) resolve the same from both places.

Copy policy (every :func:`prepare`):

* a notebook missing from the working copy is copied from the tracked one;
* a copy the student has not changed (its bytes are those written last time, recorded in
  ``lab/.copies.json``) follows the tracked notebook when that changed;
* a copied notebook carries the lab kernel's ``language_info`` (:func:`kernel_language_info`) and
  ``kernelspec`` as the installed kernel describes itself, so JupyterLab does not mark it modified
  when its kernel starts;
* a copy the student has changed (edited, or run and saved) is never overwritten; :func:`prepare`
  reports it as kept, and says when the tracked notebook has moved on since.

:func:`fresh` replaces one copy with the tracked notebook, moving the old copy into
``lab/course/backups/`` (visible in JupyterLab).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_lib.course.chapters import render_views
from kernel_lib.errors import ConfigError

__all__ = ["COURSE_FOLDERS", "LabCopy", "PrepareReport", "fresh", "prepare"]

#: The tracked folders whose notebooks the working copy holds.
COURSE_FOLDERS = ("notebooks", "exercises", "solutions")
#: The project's folders the working copy links to (read by the notebooks, never written by them).
LINKED_FOLDERS = ("datasets", "apps")
_MANIFEST = ".copies.json"
_COPIED_SUFFIXES = (".ipynb", ".md")


def _project_root() -> Path:
    return Path(__file__).resolve().parents[2]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class LabCopy:
    """Where a working copy lives: ``project`` (the checkout), ``root`` (``lab/``), ``course``
    (JupyterLab's root, ``lab/course``) and ``shared`` (the folder beside the project holding
    ``chapters/`` and ``data/``)."""

    project: Path
    root: Path
    shared: Path

    @property
    def course(self) -> Path:
        return self.root / "course"

    @property
    def chapters(self) -> Path:
        return self.course / "chapters"

    @classmethod
    def at(cls, project: str | os.PathLike | None = None, dest: str | os.PathLike | None = None,
           shared: str | os.PathLike | None = None) -> LabCopy:
        """The working copy of ``project`` (default: this checkout) at ``dest`` (default:
        ``project/lab``), reading ``shared`` (default: ``project/../shared``)."""
        proj = Path(project).resolve() if project else _project_root()
        if not (proj / "notebooks").is_dir():
            raise ConfigError(f"{proj} is not a course checkout (it has no notebooks/ folder)")
        if isinstance(dest, str) and not dest.strip():   # `--dest ""`: not a request for the default lab/
            raise ConfigError("the working copy's destination is empty: name a folder, or leave --dest out for "
                              f"{proj / 'lab'}")
        root = Path(dest).resolve() if dest is not None else proj / "lab"
        return cls(project=proj, root=root, shared=Path(shared).resolve() if shared else proj.parent / "shared")

    def copy_of(self, tracked: str | os.PathLike) -> Path:
        """The working copy of a tracked notebook, given as ``notebooks/x.ipynb`` (relative to the
        project, or an absolute path inside it)."""
        rel = Path(tracked)
        if rel.is_absolute():
            try:
                rel = rel.resolve().relative_to(self.project)
            except ValueError:
                raise ConfigError(f"{tracked} is not inside {self.project}") from None
        if not rel.parts or rel.parts[0] not in COURSE_FOLDERS or ".." in rel.parts:   # never outside them
            raise ConfigError(f"{tracked}: the working copy holds only {', '.join(COURSE_FOLDERS)}")
        return self.course / rel


@dataclass
class PrepareReport:
    """What :func:`prepare` did, as paths relative to the course folder: ``added`` (new copies),
    ``updated`` (unchanged copies that followed the tracked notebook), ``kept`` (copies the student
    changed, left alone), ``kept_behind`` (the subset of ``kept`` whose tracked notebook changed since),
    ``chapters`` (the rendered views) and ``notes`` (anything missing, such as the shared folder)."""

    lab: LabCopy
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    kept_behind: list[str] = field(default_factory=list)
    chapters: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"working copy: {self.lab.course} (JupyterLab opens it; the tracked notebooks stay untouched)",
                 f"  {len(self.added)} copied, {len(self.updated)} updated from the course, "
                 f"{len(self.kept)} of your changed copies kept as they are"]
        for rel in self.kept_behind:
            lines.append(f"  note: {rel} changed in the course since you copied it; for a fresh copy run "
                         f"`.venv/bin/python -m kernel_lib course fresh {rel}` (yours goes to backups/)")
        if self.chapters:
            lines.append(f"  chapters rendered: {', '.join(self.chapters)}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _load_manifest(lab: LabCopy) -> dict[str, dict[str, str]]:
    path = lab.root / _MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    # a hand-edited entry that is not {"copied": digest} is treated as unknown (the copy is then
    # the student's own and is never overwritten), not as a crash
    return {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("copied"), str)}


def _save_manifest(lab: LabCopy, manifest: dict[str, dict[str, str]]) -> None:
    path = lab.root / _MANIFEST
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _link(link: Path, target: Path) -> None:
    """A relative symlink ``link -> target``, made or corrected; a real folder in its place is left alone."""
    rel = os.path.relpath(target, link.parent)
    if link.is_symlink():
        if os.readlink(link) == rel:
            return
        link.unlink()
    elif link.exists():
        return
    link.symlink_to(rel, target_is_directory=True)


def kernel_language_info() -> dict[str, Any]:
    """The ``language_info`` the lab's Python kernel (ipykernel on this interpreter) reports. A
    notebook whose metadata differs from it is marked modified by JupyterLab the moment its kernel
    starts, before the student has done anything; the working copies carry it from the start."""
    try:
        from ipykernel.ipkernel import IPythonKernel
        info = dict(IPythonKernel.language_info)
    except Exception:   # pragma: no cover - ipykernel comes with the course extra
        major = sys.version_info[0]
        info = {"name": "python", "mimetype": "text/x-python", "codemirror_mode": {"name": "ipython", "version": major},
                "pygments_lexer": f"ipython{major}", "nbconvert_exporter": "python", "file_extension": ".py"}
    info["version"] = sys.version.split()[0]
    return info


def _kernelspec(given: Any) -> dict[str, str] | None:
    """The notebook's ``kernelspec`` as the installed kernel of that name describes itself (its
    ``display_name`` and ``language``), which JupyterLab writes into the open notebook too; None
    when the notebook names no kernel or that kernel is not installed here (left as it is)."""
    name = given.get("name") if isinstance(given, dict) else None
    if not isinstance(name, str):
        return None
    try:
        from jupyter_client.kernelspec import KernelSpecManager
        spec = KernelSpecManager().get_kernel_spec(name)
    except Exception:   # no such kernel here, or no jupyter_client: keep the notebook's own
        return None
    return {"display_name": spec.display_name, "language": spec.language, "name": name}


def _copy(src: Path, dst: Path) -> str:
    """Write the working copy of ``src`` at ``dst`` (atomically); returns the digest of what was
    written. A notebook gets this interpreter's :func:`kernel_language_info` in its metadata (a
    notebook that is not JSON is copied as it is); everything else is copied byte for byte."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    data = None
    if src.suffix == ".ipynb":
        try:
            nb = json.loads(src.read_text(encoding="utf-8"))
            if isinstance(nb, dict) and isinstance(nb.get("metadata", {}), dict):
                meta = nb.setdefault("metadata", {})
                meta["language_info"] = kernel_language_info()
                spec = _kernelspec(meta.get("kernelspec"))
                if spec is not None:
                    meta["kernelspec"] = spec
                data = (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
        except (ValueError, UnicodeDecodeError):
            data = None
    if data is None:
        shutil.copyfile(src, tmp)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, dst)
    return _digest(dst)


def prepare(project: str | os.PathLike | None = None, dest: str | os.PathLike | None = None,
            shared: str | os.PathLike | None = None) -> PrepareReport:
    """Create or refresh the working copy (see the module docstring for the layout and copy policy).

    Returns a :class:`PrepareReport`. Raises ConfigError when ``project`` is not a course checkout.
    Missing shared chapters are a note in the report, not an error: the notebooks still open.
    """
    lab = LabCopy.at(project, dest, shared)
    report = PrepareReport(lab)
    lab.course.mkdir(parents=True, exist_ok=True)
    manifest = _load_manifest(lab)
    for folder in COURSE_FOLDERS:
        for src in sorted((lab.project / folder).glob("*")):
            if src.suffix not in _COPIED_SUFFIXES or not src.is_file():
                continue
            rel = f"{folder}/{src.name}"
            dst = lab.course / rel
            tracked = _digest(src)
            seen = manifest.get(rel, {})
            if not dst.exists():
                manifest[rel] = {"copied": tracked, "written": _copy(src, dst)}
                report.added.append(rel)
                continue
            now = _digest(dst)
            # the bytes last written here (an older manifest recorded only the tracked digest)
            untouched = now == seen.get("written", seen.get("copied")) or ("written" not in seen and now == tracked)
            if not untouched:
                report.kept.append(rel)
                if seen.get("copied") and seen.get("copied") != tracked:
                    report.kept_behind.append(rel)
                continue
            if seen.get("copied") == tracked and seen.get("written") == now:
                continue                 # up to date
            if seen.get("copied") not in (None, tracked):
                report.updated.append(rel)   # the student never changed it: follow the course
            manifest[rel] = {"copied": tracked, "written": _copy(src, dst)}
    for name in LINKED_FOLDERS:
        if (lab.project / name).is_dir():
            _link(lab.course / name, lab.project / name)
    if lab.shared.is_dir():
        _link(lab.root / "shared", lab.shared)
        chapters = lab.shared / "chapters"
        if chapters.is_dir():
            try:
                report.chapters = [p.name for p in render_views(chapters, lab.chapters)]
            except ConfigError as exc:   # no chapter in it, an empty or unreadable one: the notebooks still open
                report.notes.append(f"chapters not rendered: {exc}")
        else:
            report.notes.append(f"no chapters at {chapters}: the chapter links will not open")
    else:
        report.notes.append(f"no shared folder at {lab.shared}: chapters and third-party data are missing "
                            "(the notebooks say which cells skip)")
    _save_manifest(lab, manifest)
    return report


def fresh(tracked: str | os.PathLike, project: str | os.PathLike | None = None,
          dest: str | os.PathLike | None = None) -> tuple[Path, Path | None]:
    """Replace the working copy of one tracked notebook (``notebooks/11_4_checkpoints.ipynb``) with
    the course's version. The old copy, when there is one, is moved to ``lab/course/backups/<folder>/`` with
    a time stamp in its name. Returns ``(copy, backup or None)``.

    Raises:
        ConfigError: the path is not one of the course's notebooks.
    """
    lab = LabCopy.at(project, dest)
    dst = lab.copy_of(tracked)
    rel = dst.relative_to(lab.course)
    src = lab.project / rel
    if not src.is_file():
        raise ConfigError(f"the course has no {rel} (see {lab.project / rel.parts[0]})")
    backup = None
    if dst.exists():
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = lab.course / "backups" / rel.parent / f"{dst.stem}-{stamp}{dst.suffix}"
        n = 1
        while backup.exists():
            backup = backup.with_name(f"{dst.stem}-{stamp}-{n}{dst.suffix}")
            n += 1
        backup.parent.mkdir(parents=True, exist_ok=True)
        os.replace(dst, backup)
    written = _copy(src, dst)
    manifest = _load_manifest(lab)
    manifest[rel.as_posix()] = {"copied": _digest(src), "written": written}
    lab.root.mkdir(parents=True, exist_ok=True)
    _save_manifest(lab, manifest)
    return dst, backup
