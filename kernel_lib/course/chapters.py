"""The two chapters as the course shows them: plain-text sources read in place, their sections found,
and a Markdown view of each rendered for JupyterLab (headings with anchors a notebook can link to).

The chapter texts live beside the project (``../shared/chapters/``, hashed file names). They are never
copied into the repository: :func:`render_views` writes the Markdown views into the *untracked*
working copy that ``make lab`` builds (:mod:`kernel_lib.course.lab`), every time it runs.

The two sources use different layouts, and :func:`read_chapter` reads both:

* Durable Execution (chapter 11): one paragraph per line, numbered section headings on their own
  line (``11.4.3 Checkpoint cadence``), Markdown tables whose rows are split over two lines;
* Failure Recovery: paragraphs separated by blank lines, unnumbered headings (Title Case for a
  section, sentence case for a subsection), tab-separated tables, unfenced code.

A section's anchor is the id JupyterLab gives the rendered heading (its text with spaces turned into
``-``), so ``chapters/11_durable_execution.md#11.4.3-Checkpoint-cadence`` opens the Markdown preview
scrolled to §11.4.3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kernel_lib.errors import ConfigError

__all__ = ["Chapter", "Section", "anchor_for", "find_chapters", "read_chapter", "render_markdown",
           "render_views", "resolve_section"]

#: Readable file names for the chapters this course teaches, keyed by the title on a chapter's first line.
KNOWN_SLUGS = {"11 Durable Execution": "11_durable_execution", "Failure Recovery": "failure_recovery"}
#: Headings every chapter has before its first section.
_FRONT_HEADINGS = ("Purpose", "Learning Objectives")
#: Labelled blocks (definitions, worked numbers, checkpoints) shown as small headings so they can be linked.
_LABELLED = re.compile(r"^(Definition|Theorem|Napkin Math|Example|Systems Perspective|Checkpoint|Key Takeaways|"
                       r"Pitfall|Fallacy)\b[^:]{0,12}:\s*\S")
_NEXT = re.compile(r"^What[’']s Next:\s*\S")
#: A numbered side note of chapter 11 ("6 Checkpoint Interval Lineage: Young posed ...").
_SIDEBAR = re.compile(r"^\d+ [A-Z][^:.]{2,60}: \S")
_NUMBERED = re.compile(r"^(\d+(?:\.\d+)+)\s+([A-Z].*)$")
_SMALL_WORDS = {"a", "an", "and", "as", "at", "by", "for", "from", "in", "of", "on", "or", "the", "to", "vs.",
                "with"}
_MATH = re.compile(r"(\$\$.+?\$\$|\\\[.+?\\\]|\\\(.+?\\\)|(?<!\\)\$[^$\n]+?(?<!\\)\$)")
_CODE_START = re.compile(r"^(def |async def |class |import |from \S+ import |@\w|# |\s{2,}\S)")
#: Capitalised TeX commands that MathJax knows; any other ``\Name`` in a chapter is its own macro.
_TEX_CAPITALISED = {"Delta", "Gamma", "Lambda", "Omega", "Phi", "Pi", "Psi", "Sigma", "Theta", "Upsilon", "Xi",
                    "Leftarrow", "Rightarrow", "Leftrightarrow", "Longrightarrow", "Longleftarrow", "Pr", "Re",
                    "Im", "Bigg", "Big", "Biggl", "Biggr", "Bigl", "Bigr"}


@dataclass(frozen=True)
class Section:
    """One heading of a chapter.

    ``number`` is the section number (``"11.4.3"``) or None for an unnumbered heading; ``level`` is the
    Markdown heading level (1 the chapter title, 2 a section, 3 a subsection, 4 a labelled block such as
    a definition or a Napkin Math); ``anchor`` is the fragment JupyterLab resolves (see :func:`anchor_for`).
    """

    heading: str
    level: int
    number: str | None = None

    @property
    def anchor(self) -> str:
        return anchor_for(self.heading)

    @property
    def title(self) -> str:
        """The heading without its number."""
        return self.heading[len(self.number):].strip() if self.number else self.heading


@dataclass
class Chapter:
    """A chapter read from its plain-text source: ``title`` (its first line), ``slug`` (the readable
    file stem of its view), ``sections`` in order, and ``blocks``: ``(kind, text)`` pairs the view is
    rendered from (kind: ``heading``, ``para``, ``list``, ``note``, ``math``, ``code``, ``table``)."""

    source: Path
    title: str
    slug: str
    sections: list[Section] = field(default_factory=list)
    blocks: list[tuple[str, object]] = field(default_factory=list)

    @property
    def view_name(self) -> str:
        return f"{self.slug}.md"


def anchor_for(heading: str) -> str:
    """The id JupyterLab gives a rendered Markdown heading: its text, spaces replaced by ``-``."""
    return heading.replace(" ", "-")


def _slugify(title: str) -> str:
    return KNOWN_SLUGS.get(title) or re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_") or "chapter"


def _title_case(text: str) -> bool:
    words = [w for w in re.split(r"[\s-]+", text) if w and w[0].isalpha()]
    return bool(words) and all(w[0].isupper() or w.lower() in _SMALL_WORDS for w in words)


def _heading_level(line: str, *, numbered_layout: bool) -> tuple[int, str | None] | None:
    """``(level, number)`` when ``line`` is a heading, else None."""
    s = line.strip()
    if not s or len(s) > 110 or "\t" in s or s != line.rstrip() or s.startswith(("|", "-", "\\", "$", "#")):
        return None
    if s in _FRONT_HEADINGS:
        return 2, None
    if _NEXT.match(s):
        return 2, None
    if _LABELLED.match(s):
        return 4, None
    m = _NUMBERED.match(s)
    if m and len(s) <= 90 and not s.endswith("."):
        return min(1 + m.group(1).count("."), 4), m.group(1)
    if numbered_layout or len(s) > 90 or s.endswith((".", ":", "?", ",", ";")) or re.search(r"[=()\[\]$`_]", s):
        return None
    if not s[0].isupper():
        return None
    return (2 if _title_case(s.split(":")[0]) else 3), None


def _split_paragraphs(text: str, *, numbered_layout: bool) -> list[list[str]]:
    lines = text.splitlines()
    if numbered_layout:          # one paragraph per line; blank lines carry nothing
        return [[ln] for ln in lines if ln.strip()]
    paras, cur = [], []
    for ln in lines:
        if ln.strip():
            cur.append(ln)
        elif cur:
            paras.append(cur)
            cur = []
    if cur:
        paras.append(cur)
    return paras


def _is_code(para: list[str]) -> bool:
    return any(_CODE_START.match(ln) for ln in para) and not all(ln.startswith("- ") for ln in para)


def _pipe_cells(line: str) -> int:
    return line.count("|") - (1 if line.lstrip().startswith("|") else 0)


def read_chapter(path: str | Path) -> Chapter:
    """Read one chapter source and find its headings and blocks.

    Raises:
        ConfigError: ``path`` is missing, empty or not UTF-8 text.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read chapter {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read chapter {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if not first:
        raise ConfigError(f"chapter {path} is empty")
    numbered_layout = bool(re.match(r"^\d+\s", first)) or "\n\n" not in text[:4000]
    chapter = Chapter(source=path, title=first, slug=_slugify(first))
    paras = _split_paragraphs(text, numbered_layout=numbered_layout)
    chapter.sections.append(Section(first, 1, first.split()[0] if re.match(r"^\d+\s", first) else None))
    chapter.blocks.append(("heading", chapter.sections[0]))
    i = 1 if paras and len(paras[0]) == 1 and paras[0][0].strip() == first else 0
    while i < len(paras):
        para = paras[i]
        head = _heading_level(para[0], numbered_layout=numbered_layout) if len(para) == 1 else None
        if head:
            sec = Section(para[0].strip(), head[0], head[1])
            chapter.sections.append(sec)
            chapter.blocks.append(("heading", sec))
        elif para[0].lstrip().startswith("|") and numbered_layout:
            i = _read_pipe_table(paras, i, chapter)
            continue
        elif all("\t" in ln for ln in para):
            chapter.blocks.append(("table", [ln.split("\t") for ln in para]))
        elif _is_code(para) and not numbered_layout:
            code = list(para)
            while i + 1 < len(paras) and _is_code(paras[i + 1]) and paras[i + 1][0].startswith((" ", "#")):
                i += 1
                code += [""] + paras[i]
            chapter.blocks.append(("code", "\n".join(code)))
        elif len(para) == 1 and para[0].strip().startswith(("\\[", "$$")):
            chapter.blocks.append(("math", para[0].strip()))
        elif para[0].startswith(("↩", "↪")) or (numbered_layout and _SIDEBAR.match(para[0])):
            chapter.blocks.append(("note", " ".join(ln.strip() for ln in para)))
        elif para[0].startswith("- "):
            items = [para[0]]
            while numbered_layout and i + 1 < len(paras) and paras[i + 1][0].startswith("- "):
                i += 1
                items.append(paras[i][0])
            chapter.blocks.append(("list", items if numbered_layout else para))
        elif not numbered_layout and len(para) > 1 and all(len(ln) < 200 for ln in para):
            chapter.blocks.append(("list", ["- " + ln.strip() for ln in para]))    # one item a line
        else:
            chapter.blocks.append(("para", " ".join(ln.strip() for ln in para)))
        i += 1
    return chapter


def _read_pipe_table(paras: list[list[str]], i: int, chapter: Chapter) -> int:
    """A chapter-11 table: a header row, a rule, then rows written as fragments over several lines."""
    header = paras[i][0].strip()
    ncols = _pipe_cells(header)
    rows, i = [header], i + 1
    if i < len(paras) and re.match(r"^\|[-:| ]+\|$", paras[i][0].strip()):
        rows.append(paras[i][0].strip())
        i += 1
    else:
        rows.append("|" + "---|" * ncols)
    frag: list[str] = []
    while i < len(paras):
        ln = paras[i][0].strip()
        if not ln.endswith("|") or _heading_level(ln, numbered_layout=True):
            break
        frag.append(ln.lstrip("|").strip())
        if sum(_pipe_cells("|" + f) for f in frag) >= ncols:
            rows.append("| " + " ".join(frag))
            frag = []
        i += 1
    if frag:
        rows.append("| " + " ".join(frag))
    chapter.blocks.append(("pipe", rows))
    return i


def find_chapters(chapters_dir: str | Path) -> list[Chapter]:
    """Every ``*.txt`` chapter in ``chapters_dir``, in file-name order.

    Raises:
        ConfigError: the folder is missing or holds no chapter.
    """
    folder = Path(chapters_dir)
    if not folder.is_dir():
        raise ConfigError(f"no chapters folder at {folder} (the course reads them from ../shared/chapters "
                          "beside the project; pass --chapters to name another folder)")
    chapters = [read_chapter(p) for p in sorted(folder.glob("*.txt"))]
    if not chapters:
        raise ConfigError(f"{folder} holds no chapter (*.txt)")
    seen: set[str] = set()
    for ch in chapters:               # two chapters of one title must not share (overwrite) one view
        slug, n = ch.slug, 2
        while ch.view_name in seen:
            ch.slug, n = f"{slug}_{n}", n + 1
        seen.add(ch.view_name)
    return chapters


# ---------------------------------------------------------------------------------------------------
# Markdown rendering

def _tex(math: str) -> str:
    """A math span MathJax can typeset: ``\\[..\\]`` as ``$$..$$``, the chapter's own macros as italic names."""
    if math.startswith("\\[") and math.endswith("\\]"):
        math = "$$" + math[2:-2].strip() + "$$"
    elif math.startswith("\\(") and math.endswith("\\)"):
        math = "$" + math[2:-2].strip() + "$"
    return re.sub(r"\\([A-Z][A-Za-z]+)", lambda m: m.group(0) if m.group(1) in _TEX_CAPITALISED
                  else r"\mathit{" + m.group(1) + "}", math)


_REF = re.compile(r"^\$\\ref\{([^}$]+)\}\$$")
_REF_PREFIX = re.compile(r"^(?:pri|nbk|eq|tab|fig|sec|def|thm)(?:-vol\d+|-\d+)?-")


def _ref_text(label: str) -> str:
    """A cross-reference into the book (``$\\ref{pri-vol3-exactly-once-settlement}$``), which MathJax
    cannot resolve and would show as ``???``, as the label's own words in italics
    (``*exactly once settlement*``)."""
    words = _REF_PREFIX.sub("", label.strip()).replace("-", " ").replace("_", " ").strip()
    return f"*{words or label}*"


def _inline(text: str) -> str:
    """Running text for Markdown: math spans kept for MathJax, money signs and ``<`` escaped elsewhere,
    cross-references into the rest of the book as readable words (:func:`_ref_text`)."""
    out, pos = [], 0
    for m in _MATH.finditer(text):
        span = m.group(0)
        if ref := _REF.match(span):
            out.append(_escape(text[pos:m.start()]))
            out.append(_ref_text(ref.group(1)))
            pos = m.end()
            continue
        if span.startswith("$") and not span.startswith("$$") and not re.search(r"[\\^_{}=]", span):
            continue                      # "$4.42, and ... $0.05": two prices, not math
        out.append(_escape(text[pos:m.start()]))
        out.append(_tex(span))
        pos = m.end()
    out.append(_escape(text[pos:]))
    return "".join(out)


def _escape(text: str) -> str:
    return text.replace("<", "&lt;").replace("$", r"\$")


def _cell(text: str) -> str:
    return _inline(text.strip()).replace("|", r"\|")


def render_markdown(chapter: Chapter, *, note: str = "") -> str:
    """The chapter as one Markdown document (a heading per :class:`Section`, in order)."""
    out: list[str] = []
    if note:
        out.append(f"<!-- {note} -->")
    for kind, value in chapter.blocks:
        if kind == "heading":
            sec: Section = value          # type: ignore[assignment]
            out.append("#" * sec.level + " " + sec.heading.replace("<", "&lt;"))
        elif kind == "para":
            out.append(_inline(str(value)))
        elif kind == "note":
            out.append("> *" + _inline(str(value)).strip() + "*")
        elif kind == "math":
            out.append(_tex(str(value)))
        elif kind == "code":
            out.append("```python\n" + str(value) + "\n```")
        elif kind == "list":
            out.append("\n".join("- " + _inline(str(item)[2:].strip()) for item in value))  # type: ignore[union-attr]
        elif kind == "table":
            rows = value                  # type: ignore[assignment]
            width = max(len(r) for r in rows)
            lines = ["| " + " | ".join(_cell(c) for c in r + [""] * (width - len(r))) + " |" for r in rows]
            lines.insert(1, "|" + "---|" * width)
            out.append("\n".join(lines))
        elif kind == "pipe":
            out.append("\n".join(_inline(r) for r in value))        # type: ignore[union-attr]
    return "\n\n".join(out) + "\n"


def _contents(chapters: list[Chapter]) -> str:
    lines = ["# The chapters", "",
             "Rendered by `make lab` from the plain-text chapters beside the project (`../shared/chapters/`); "
             "this folder is not part of the repository and is written again on every `make lab`.", ""]
    for ch in chapters:
        lines.append(f"## [{ch.title}]({ch.view_name})")
        lines.append("")
        for sec in ch.sections[1:]:
            if sec.level in (2, 3):
                lines.append("  " * (sec.level - 2) + f"- [{sec.heading}]({ch.view_name}#{sec.anchor})")
        lines.append("")
    return "\n".join(lines)


def render_views(chapters_dir: str | Path, out_dir: str | Path) -> list[Path]:
    """Write one Markdown view per chapter, and a ``README.md`` contents page, into ``out_dir``.

    Files whose bytes would not change are left alone. Returns the views' paths (the contents page last).

    Raises:
        ConfigError: no chapters at ``chapters_dir`` (see :func:`find_chapters`).
    """
    chapters = find_chapters(chapters_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    pages = [(ch.view_name, render_markdown(ch, note=f"rendered from {ch.source.name} by make lab; not tracked"))
             for ch in chapters] + [("README.md", _contents(chapters))]
    for name, text in pages:
        target = out / name
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def resolve_section(chapters: list[Chapter], ref: str) -> tuple[Chapter, Section]:
    """The chapter and section a reference names: a number (``"11.4.3"`` or ``"§11.4.3"``), a heading
    (``"Forward Recovery"``, matched without regard to case; the first chapter that has it wins), or
    a heading qualified by its chapter's title (``"Failure Recovery: Fallacies and Pitfalls"``, when
    two chapters share a heading).

    Raises:
        ConfigError: no chapter has such a section.
    """
    key = ref.strip().lstrip("§").strip()
    prefix, sep, rest = key.partition(":")
    if sep:   # "Failure Recovery: Fallacies and Pitfalls": a heading of that chapter only
        for ch in chapters:
            if ch.title.lower() == prefix.strip().lower():
                want = rest.strip().lower()
                for sec in ch.sections:
                    if sec.heading.lower() == want or sec.title.lower() == want:
                        return ch, sec
    for ch in chapters:
        for sec in ch.sections:
            if sec.number == key or sec.heading.lower() == key.lower() or sec.title.lower() == key.lower():
                return ch, sec
    raise ConfigError(f"no chapter section {ref!r}")
