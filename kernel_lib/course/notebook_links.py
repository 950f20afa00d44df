"""One marked Markdown cell per notebook linking to the chapter section(s) it teaches.

:func:`link_notebook` inserts the cell (tagged ``chapter-links``, cell id ``chapter-links``) right
after the notebook's title cell, or rewrites it in place when it is already there, so running it
again changes nothing. The links point at the chapter views ``make lab`` renders into the working
copy (``../chapters/<chapter>.md#<section anchor>``, see :mod:`kernel_lib.course.chapters`); in
JupyterLab a click opens the chapter scrolled to that section.

Which sections a notebook teaches, in order of precedence: the ``sections=`` argument (the CLI's
``--section``), the notebook's metadata ``chapter_sections`` (a list of section numbers such as
``"11.4.3"`` or headings such as ``"Forward Recovery"``), the table :data:`NOTEBOOK_SECTIONS`, and
for a file named ``11_N_….ipynb`` the section 11.N.

Usage: ``python -m kernel_lib course link-chapters notebooks/*.ipynb [--check]``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from kernel_lib.course.chapters import Chapter, find_chapters, resolve_section
from kernel_lib.errors import ConfigError

__all__ = ["CELL_ID", "CELL_TAG", "NOTEBOOK_SECTIONS", "link_cell_source", "link_notebook", "sections_for"]

CELL_TAG = "chapter-links"
CELL_ID = "chapter-links"
#: The chapter views' folder as a notebook in notebooks/, exercises/ or solutions/ of the working copy sees it.
CHAPTERS_HREF = "../chapters"

#: The sections each course notebook teaches (by file stem); ``"*"`` links every chapter's contents.
NOTEBOOK_SECTIONS: dict[str, tuple[str, ...]] = {
    "index": ("*",),
    "11_1_worker_failure": ("11.1", "11.3.3", "11.5.3"),
    "11_2_trajectory_log": ("11.2", "11.2.1", "11.2.2"),
    "11_3_durable_intent": ("11.3", "11.3.1", "11.3.2", "11.3.3", "11.3.4"),
    "11_3b_quorum": ("11.3.1", "11.5.1"),
    "11_4_checkpoints": ("11.4", "11.4.1", "11.4.2", "11.4.3"),
    "11_5_resume": ("11.5", "11.5.1", "11.5.2", "11.5.3", "11.5.4"),
    "11_6_replay_divergence": ("11.6", "11.6.1", "11.6.2", "11.6.3", "11.7", "11.7.1", "11.7.2"),
    "11_8_retention": ("11.8", "11.8.1", "11.8.2", "11.8.3", "11.8.4"),
    "11_9_fallacies": ("11.9",),
    "nm0_1": ("Saga compensation stacks", "Napkin Math 0.1: Saga log unwinding overheads"),
    "nm0_2": ("Dynamic arbitration: The recovery policy function",
              "Napkin Math 0.2: Forward repair vs. compensate and rerun"),
    "nm0_3": ("Semantic Watchdog Timers", "Napkin Math 0.3: What an undetected loop costs"),
    "nm0_4": ("Tool Circuit Breakers", "Jittered backoff protocols",
              "Napkin Math 0.4: Bulkhead capacity and jitter under RPC stress"),
    "nm0_5": ("Fault injection benchmarks", "Napkin Math 0.5: Quantitative recovery overhead and RTO bounds"),
    "ex0_1": ("The pivot action boundary", "Example 0.1: The dual-commit trap and pivot allocation"),
    "ex0_2": ("Blast Radius Quarantine", "Example 0.2: Containment latency and blast radius budget"),
    "fr_1_sagas": ("The Transactional Boundary Collapse", "The Trajectory Saga Pattern",
                   "Compensating action semantics", "Saga compensation stacks", "Terminal escalation"),
    "fr_1b_agent_tools": ("Saga compensation stacks", "The tripartite action reversibility taxonomy"),
    "fr_2_forward_recovery": ("Forward Recovery", "Dynamic arbitration: The recovery policy function",
                              "The anti-spin invariant: Bounding forward repair trajectories",
                              "Pivot Action Irreversibility", "The pivot action boundary"),
    "fr_3_watchdogs": ("Semantic Watchdog Timers", "The failure of classical OS liveness probes",
                       "Quantifiable semantic progress invariants", "Napkin Math 0.3: What an undetected loop costs",
                       "Watchdog intervention protocols", "Failure Recovery: Fallacies and Pitfalls"),
    "fr_4_gateway_quarantine": ("Tool Circuit Breakers", "Tri-state circuit breakers", "Jittered backoff protocols",
                                "Napkin Math 0.4: Bulkhead capacity and jitter under RPC stress",
                                "Bulkhead resource partitioning", "Blast Radius Quarantine",
                                "The four-stage quarantine protocol", "Dynamic taint tracking",
                                "Example 0.2: Containment latency and blast radius budget"),
    "fr_5_synthesis": ("Fault-Tolerant System Synthesis", "The synthesized runtime engine",
                       "Anatomy of a faulted trajectory", "Fault injection benchmarks",
                       "Napkin Math 0.5: Quantitative recovery overhead and RTO bounds"),
    "fr_6_fallacies": ("Failure Recovery: Fallacies and Pitfalls", "The Transactional Boundary Collapse",
                       "The pivot action boundary", "Semantic Watchdog Timers", "Tool Circuit Breakers",
                       "Jittered backoff protocols"),
}
_MARK = ("<!-- chapter-links: written by `python -m kernel_lib course link-chapters`; "
         "the sections come from kernel_lib/course/notebook_links.py -->")


def sections_for(path: str | Path, nb=None) -> tuple[str, ...]:
    """The section references ``path`` teaches (see the module docstring for the precedence).

    Raises:
        ConfigError: nothing names the notebook's sections.
    """
    stem = Path(path).stem
    meta = (nb.metadata.get("chapter_sections") if nb is not None else None) or None
    if meta:
        if not isinstance(meta, list) or not all(isinstance(s, str) for s in meta):
            raise ConfigError(f"{path}: metadata chapter_sections must be a list of section names")
        return tuple(meta)
    if stem in NOTEBOOK_SECTIONS:
        return NOTEBOOK_SECTIONS[stem]
    m = re.match(r"^(\d+)_(\d+)(?:_|$)", stem)
    if m:
        return (f"{m.group(1)}.{m.group(2)}",)
    if re.match(r"^ex\d+_\d+$", stem):
        return ("11.12",)
    raise ConfigError(f"{path}: no chapter sections known; add them to the notebook's metadata "
                      "(\"chapter_sections\": [\"11.4.3\"]) or pass --section")


def _href(chapter: Chapter, anchor: str | None = None) -> str:
    return f"{CHAPTERS_HREF}/{chapter.view_name}" + (f"#{anchor}" if anchor else "")


def link_cell_source(refs: Sequence[str], chapters: list[Chapter]) -> str:
    """The Markdown of the links cell for section references ``refs`` (``"*"``: every chapter).

    Raises:
        ConfigError: a reference names no section of any chapter.
    """
    lines = [_MARK]
    if list(refs) == ["*"]:
        links = [f"[{ch.title}]({_href(ch)})" for ch in chapters]
        lines.append("**The chapters, readable here:** " + " · ".join(links)
                     + f" · [all sections]({CHAPTERS_HREF}/README.md)")
        return "\n".join(lines)
    items = []
    for ref in refs:
        ch, sec = resolve_section(chapters, ref)
        label = f"§{sec.heading}" if sec.number else f"{ch.title}: {sec.heading}"
        items.append(f"[{label}]({_href(ch, sec.anchor)})")
    lines.append("**Read in the chapter:** " + " · ".join(items))
    return "\n".join(lines)


def _find_cell(nb) -> int | None:
    for i, c in enumerate(nb.cells):
        if CELL_TAG in c.get("metadata", {}).get("tags", []) or c.get("id") == CELL_ID:
            return i
    return None


def link_notebook(path: str | Path, chapters_dir: str | Path, *, sections: Sequence[str] | None = None,
                  write: bool = True) -> bool:
    """Insert or update the links cell of the notebook at ``path``; returns True when its bytes change
    (with ``write=False`` nothing is written: the check mode).

    Raises:
        ConfigError: no chapters at ``chapters_dir``, unknown sections, or an unreadable notebook.
    """
    import nbformat

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        nb = nbformat.reads(text, as_version=4)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read notebook {path}: {exc}") from None
    chapters = find_chapters(chapters_dir)
    source = link_cell_source(sections or sections_for(path, nb), chapters)
    at = _find_cell(nb)
    if at is None:
        cell = nbformat.v4.new_markdown_cell(source, metadata={"tags": [CELL_TAG]})
        cell["id"] = CELL_ID
        first_is_title = bool(nb.cells) and nb.cells[0].cell_type == "markdown"
        nb.cells.insert(1 if first_is_title else 0, cell)
    else:
        nb.cells[at].source = source
    new_text = nbformat.writes(nb) + "\n"
    if new_text == text:
        return False
    if write:
        nbformat.validate(nb)
        path.write_text(new_text, encoding="utf-8")
    return True
