"""``python -m kernel_lib course``: the working copy JupyterLab opens, the chapter views, and the
chapter-links cell of each notebook.

* ``course prepare`` makes or refreshes ``lab/`` (what ``make lab`` runs before starting JupyterLab);
* ``course fresh notebooks/X.ipynb`` replaces your copy of one notebook with the course's (yours is
  moved to ``lab/course/backups/``);
* ``course chapters --out DIR`` renders the chapter views alone; ``--list`` prints their sections;
* ``course link-chapters NOTEBOOK...`` inserts or updates the links cell (``--check``: exit 1 when a
  notebook would change, write nothing).

Bad input (a path outside the course, an unknown section, no chapters folder) raises
:class:`kernel_lib.errors.ConfigError`: one ``error:`` line, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: Top-level command -> one-line help (the CLI lists it without importing anything else).
COMMANDS = {"course": "the lab's working copy, chapter views and chapter links"}

_EPILOG = """\
examples:
  python -m kernel_lib course prepare                      # what `make lab` does before opening JupyterLab
  python -m kernel_lib course fresh notebooks/11_4_checkpoints.ipynb
  python -m kernel_lib course chapters --list
  python -m kernel_lib course link-chapters notebooks/*.ipynb
  python -m kernel_lib course link-chapters --check notebooks/*.ipynb
"""


def _default_chapters() -> Path:
    from kernel_lib.course.lab import LabCopy
    return LabCopy.at().shared / "chapters"


def _prepare(args: argparse.Namespace) -> int:
    from kernel_lib.course.lab import prepare
    report = prepare(dest=args.dest, shared=args.shared)
    if args.json:
        print(json.dumps({"course": str(report.lab.course), "added": report.added, "updated": report.updated,
                          "kept": report.kept, "kept_behind": report.kept_behind, "chapters": report.chapters,
                          "notes": report.notes}, indent=2))
    else:
        print(report.summary())
    return 0


def _fresh(args: argparse.Namespace) -> int:
    from kernel_lib.course.lab import fresh
    for path in args.notebooks:
        copy, backup = fresh(path, dest=args.dest)
        print(f"{copy}: fresh from the course" + (f" (your copy: {backup})" if backup else ""))
    return 0


def _chapters(args: argparse.Namespace) -> int:
    from kernel_lib.course.chapters import find_chapters, render_views
    source = Path(args.chapters) if args.chapters else _default_chapters()
    if args.list:
        for ch in find_chapters(source):
            print(f"{ch.view_name}: {ch.title}")
            for sec in ch.sections[1:]:
                print(f"{'  ' * (sec.level - 1)}{sec.heading}  #{sec.anchor}")
        return 0
    if not args.out:
        print("error: give --out DIR (or --list)", file=sys.stderr)
        return 2
    for p in render_views(source, args.out):
        print(p)
    return 0


def _link(args: argparse.Namespace) -> int:
    from kernel_lib.course.notebook_links import link_notebook
    source = Path(args.chapters) if args.chapters else _default_chapters()
    changed = [p for p in args.notebooks
               if link_notebook(p, source, sections=args.section or None, write=not args.check)]
    for p in changed:
        print(f"{p}: {'would change' if args.check else 'chapter links written'}")
    if not changed:
        print(f"{len(args.notebooks)} notebook(s): chapter links up to date")
    return 1 if args.check and changed else 0


def add_commands(sub) -> None:
    p = sub.add_parser("course", help=COMMANDS["course"],
                       description=__doc__.split("\n\n")[0].replace("``", ""), epilog=_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    cs = p.add_subparsers(dest="course_command", metavar="ACTION")

    q = cs.add_parser("prepare", help="make or refresh the working copy lab/ (never overwrites your changes)")
    q.add_argument("--dest", help="where the working copy goes (default: lab/ in the checkout)")
    q.add_argument("--shared", help="the folder holding chapters/ and data/ (default: ../shared beside the project)")
    q.add_argument("--json", action="store_true", help="print what was done as JSON")
    q.set_defaults(func=_prepare)

    q = cs.add_parser("fresh", help="replace your copy of a notebook with the course's (yours goes to backups/)")
    q.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="e.g. notebooks/11_4_checkpoints.ipynb")
    q.add_argument("--dest", help="the working copy (default: lab/ in the checkout)")
    q.set_defaults(func=_fresh)

    q = cs.add_parser("chapters", help="render the chapter views, or list their sections and anchors")
    q.add_argument("--chapters", help="the plain-text chapters (default: ../shared/chapters beside the project)")
    q.add_argument("--out", help="folder for the Markdown views")
    q.add_argument("--list", action="store_true", help="print each chapter's sections with their anchors")
    q.set_defaults(func=_chapters)

    q = cs.add_parser("link-chapters", help="insert or update each notebook's chapter-links cell")
    q.add_argument("notebooks", nargs="+", metavar="NOTEBOOK")
    q.add_argument("--chapters", help="the plain-text chapters (default: ../shared/chapters beside the project)")
    q.add_argument("--section", action="append", metavar="REF",
                   help="a section the notebook teaches (repeatable; overrides the built-in table)")
    q.add_argument("--check", action="store_true", help="write nothing; exit 1 when a notebook would change")
    q.set_defaults(func=_link)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])
