"""``python -m kernel_lib exercise``: solve, generate, check, grade and strip the seeded exercises
(§11.12's ``11.N`` and the Failure Recovery chapter's ``nm0.N`` / ``ex0.N``).

Bad input (an unknown exercise or parameter, a value of the wrong type or out of range, an
unreadable answers file) raises :class:`kernel_lib.errors.ConfigError`, which the main CLI prints as
one ``error:`` line with exit code 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kernel_lib.cli._args import positive_seconds
from kernel_lib.errors import ConfigError



def _exercise_numbers_on_disk() -> list[str]:
    """The exercise numbers (``"1"`` … ``"9"``) of the modules ``course/exercises/ex11_N.py``, read from
    the folder so the command list can name them without importing the exercises (and sympy)."""
    folder = Path(__file__).resolve().parent.parent / "course" / "exercises"
    numbers = [f.stem.removeprefix("ex11_") for f in folder.glob("ex11_*.py")]
    return sorted((n for n in numbers if n.isdigit()), key=int)


def _chapter0_ids_on_disk() -> list[str]:
    """The Failure Recovery exercise ids (``nm0.1``, ``ex0.2`` …) of the modules ``nm0_N.py`` and
    ``ex0_N.py`` in ``course/exercises/``, read from the folder (no import)."""
    folder = Path(__file__).resolve().parent.parent / "course" / "exercises"
    ids = []
    for prefix in ("nm0", "ex0"):
        numbers = [f.stem.removeprefix(prefix + "_") for f in folder.glob(f"{prefix}_*.py")]
        ids += [f"{prefix}.{n}" for n in sorted((n for n in numbers if n.isdigit()), key=int)]
    return ids


def _and_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"exercise": "solve, generate, check, grade and strip the seeded §11.12 exercises "
                        + _and_list(_exercise_numbers_on_disk() or ["(none found)"])
                        + (" and Failure Recovery's " + _and_list(_chapter0_ids_on_disk())
                           if _chapter0_ids_on_disk() else "")}

_EPILOG_TAIL = """\
examples:
  python -m kernel_lib exercise solve 11.4 --json
  python -m kernel_lib exercise solve 11.4 --param flush_ms=4 --param dispatch_budget_ms=10
  python -m kernel_lib exercise solve 11.1 --param replica_durable_ms=1.5,2.5,6.5
  python -m kernel_lib exercise solve nm0.1 --json
  python -m kernel_lib exercise generate 11.8 --seed 7 > params.json
  python -m kernel_lib exercise check 11.8 --seed 7 --answers answers.json
  python -m kernel_lib exercise grade submissions/*.ipynb --seed 7 --json
  python -m kernel_lib exercise strip --check
  python -m kernel_lib exercise measure nm0.5 --json

check and grade exit 0 when every graded quantity is right, 1 when any is wrong, 2 on bad input.
Expected values are printed only with --reveal.
"""


def _exercise_ids() -> list[str]:
    """The registered exercise ids, in order (every list of exercises in the help is built from these)."""
    from kernel_lib.course.exercises import MODULES
    return list(MODULES)


def _epilog() -> str:
    """The help's list of exercises, built from the registry so that none is left out, then the examples."""
    from kernel_lib.course.exercises import MODULES, title
    items = [f"{k} ({t[0].lower() + t[1:]})" for k, t in ((k, title(k)) for k in MODULES)]
    lines, line = [], "exercises: "
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if line.strip() != "exercises:" and len(line) + 1 + len(piece) > 100:
            lines.append(line.rstrip())
            line = " " * 11
        line += piece + " "
    lines.append(line.rstrip())
    return "\n".join(lines) + "\n\n" + _EPILOG_TAIL


def _params_from_args(mod, args: argparse.Namespace) -> dict[str, Any]:
    """Givens: the seeded variant (``--seed``) or defaults, overridden by ``--param`` and ``--params``."""
    params: dict[str, Any] = dict(mod.generate(args.seed)) if getattr(args, "seed", None) is not None else {}
    if getattr(args, "params_file", None):
        params.update(_read_json_object(args.params_file, "--params"))
    by_name = {p.name: p for p in mod.PARAMS}
    for item in getattr(args, "param", None) or []:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"--param wants name=value, got {item!r}")
        if name not in by_name:
            raise ConfigError(f"unknown parameter {name!r} for exercise {mod.EXERCISE}; known: {', '.join(by_name)}")
        params[name] = by_name[name].parse(value)
    return mod.validate_params(params)


def _read_json_object(path: str, flag: str) -> dict[str, Any]:
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{flag} {path}: must hold a JSON object of name -> value")
    return data


def _cmd_list(args: argparse.Namespace) -> int:
    from kernel_lib.course.exercises import EXERCISES
    rows = {k: {"title": m.TITLE, "defaults": m.DEFAULTS, "graded": list(m.GRADED)} for k, m in EXERCISES.items()}
    if args.json:
        print(json.dumps(rows))
    else:
        for k, r in rows.items():
            print(f"{k}  {r['title']}\n     parameters: " + ", ".join(f"{n}={v}" for n, v in r["defaults"].items())
                  + "\n     graded: " + ", ".join(r["graded"]))
    return 0


def _cmd_solve(args: argparse.Namespace) -> int:
    from kernel_lib.course.exercises import get
    mod = get(args.exercise)
    params = _params_from_args(mod, args)
    sol = mod.solve(params)
    if args.json:
        print(json.dumps({"params": params, **sol}))
        return 0
    from kernel_lib.course.exercises._common import display_value, exercise_label
    print(f"{exercise_label(mod.EXERCISE)}: {mod.TITLE}")
    print("givens: " + ", ".join(f"{k}={v}" for k, v in params.items()))   # as --param takes them
    skip = {"exercise", "decision_text", "reading", "alternative", "violated_rules", "decision"}
    w = max(len(k) for k in sol if k not in skip)
    for k, v in sol.items():
        if k in skip:
            continue
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):   # rows (nm0.5's readings)
            print(f"  {k}:")
            for row in v:
                print(f"    - {display_value(row, k)}")
        else:               # money and shares as the grading report shows them (course.exercises._common)
            print(f"  {k:<{w}}  {display_value(v, k)}")
    if "violated_rules" in sol:
        print("rules the recovery procedure violates:")
        for r in sol["violated_rules"]:
            print(f"  - {r}")
    print(f"decision: {sol['decision']}\n  {sol['decision_text']}")
    print("reading (where the statement is ambiguous):")
    for k, v in sol["reading"].items():
        print(f"  {k}: {v}")
    alternative = sol["alternative"]
    if alternative:
        print("answers under the alternative readings:")
        for k, v in alternative.items():   # {reading: {quantity: value}}, or {quantity: value} (11.1, 11.8)
            print(f"  {k}: {display_value(v, k)}")
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    from kernel_lib.course.exercises import get
    mod = get(args.exercise)
    print(json.dumps(mod.validate_params(mod.generate(args.seed))))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from kernel_lib.course.exercises import format_report, get
    mod = get(args.exercise)
    params = _params_from_args(mod, args)
    answers = _read_json_object(args.answers, "--answers")
    report = mod.check(params, answers)
    if args.json:
        from kernel_lib.course.exercises import redact
        from kernel_lib.course.exercises._common import strict_json
        print(json.dumps(strict_json({"params": params, **redact(report, args.reveal)}), allow_nan=False))
    else:
        print(getattr(mod, "format_report", format_report)(report, reveal=args.reveal))
    return 0 if report["all_ok"] else 1


def _cmd_grade(args: argparse.Namespace) -> int:
    import sys

    from kernel_lib.course.exercises import format_report, get
    from kernel_lib.course.exercises.grading import expand, grade_class, grade_notebook
    kw = {"execute": args.execute, "reveal": args.reveal, "accept": args.accept_readings,
          "kernel_name": args.kernel, "timeout_s": args.timeout}
    paths = expand(args.notebooks)
    if len(paths) == 1:   # one notebook: its report; bad input is one error line (and, with --json, {notebook, error})
        try:
            report = grade_notebook(paths[0], args.seed, **kw)
        except ConfigError as exc:
            report = {"notebook": paths[0], "error": str(exc)}
        subs, out = [report], report
    else:
        out = grade_class(paths, args.seed, **kw)
        subs = out["submissions"]
    for s in subs:
        if "error" in s:
            print(f"error: {s['error']}", file=sys.stderr)
    if args.json:
        from kernel_lib.course.exercises._common import strict_json
        print(json.dumps(strict_json(out), allow_nan=False))
    else:
        for s in subs:
            if "error" not in s:
                fmt = getattr(get(s["exercise"]), "format_report", format_report)
                print(f"{s['notebook']} ({s['answers_from']}): score {s['score']}/{s['max_score']}")
                print(fmt(s, reveal=args.reveal) + (f"\n  note: {s['note']}" if s.get("note") else ""))
        if len(subs) > 1:
            m = out["summary"]
            print(f"{m['notebooks']} notebooks: {m['all_right']} all right, {m['wrong']} with wrong answers, "
                  f"{m['errors']} not gradable")
    if any("error" in s for s in subs):
        return 2
    return 0 if all(s["all_ok"] for s in subs) else 1


#: Exercises whose quantities can be measured on this machine: id -> what ``exercise measure`` runs.
MEASURES = {"nm0.5": "our runtime's recovery, decomposed into Napkin Math 0.5's RTO terms "
                     "(kernel_lib.live.rto.measure_rto)"}


def _cmd_measure(args: argparse.Namespace) -> int:
    from kernel_lib.course.exercises import canonical_id, get
    key = canonical_id(args.exercise)
    if key not in MEASURES:
        raise ConfigError(f"no measurement for exercise {args.exercise!r}; available: {', '.join(MEASURES)} "
                          "(nm0.1 is measured by `bench saga`)")
    mod = get(key)
    params = _params_from_args(mod, args)
    from kernel_lib.live.rto import format_rto_table, measure_rto
    if args.dir is not None and not Path(args.dir).is_dir():
        raise ConfigError(f"--dir {args.dir}: not an existing directory")
    result = measure_rto(params, turns=args.turns, snapshot_every=args.snapshot_every,
                         takeover_lease_s=args.takeover_lease_s, rounds=args.rounds, store=args.store,
                         directory=args.dir)
    if args.json:
        from kernel_lib.course.exercises._common import strict_json
        print(json.dumps(strict_json({"exercise": key, "params": params, **result}), allow_nan=False))
    else:
        print(format_rto_table(result))
    return 0


def build_strip_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from kernel_lib.course.strip import EXERCISES_DIR, SOLUTIONS_DIR
    p = parser or argparse.ArgumentParser(prog="python -m kernel_lib exercise strip")
    p.description = ("Derive exercises/*.ipynb from solutions/*.ipynb by removing solution regions (cells tagged "
                     "'solution'; lines between '# BEGIN SOLUTION' and '# END SOLUTION') and every output.")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if any exercise notebook is missing or differs from its "
                        "stripped solution")
    p.add_argument("--solutions", default=str(SOLUTIONS_DIR), metavar="DIR", help=f"default: {SOLUTIONS_DIR}")
    p.add_argument("--exercises", default=str(EXERCISES_DIR), metavar="DIR", help=f"default: {EXERCISES_DIR}")
    p.set_defaults(func=run_strip)
    return p


def run_strip(args: argparse.Namespace) -> int:
    from kernel_lib.course.strip import sync
    if not Path(args.solutions).is_dir():
        raise ConfigError(f"--solutions {args.solutions}: not a directory")
    out = sync(Path(args.solutions), Path(args.exercises), check=args.check)
    if args.check:
        for line in out:
            print(line)
        if not out:
            print("exercises/ is in sync with solutions/")
        return 1 if out else 0
    for line in out:
        print(f"derived {line}")
    return 0


def _add_params_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="override one given (repeatable); lists as 1.5,2.5,6.5 or JSON")
    p.add_argument("--params", dest="params_file", metavar="FILE", help="a JSON object of givens (e.g. from generate)")
    p.add_argument("--seed", type=int, help="start from the seeded variant `generate --seed S` instead of the defaults")


def add_commands(subparsers) -> argparse.ArgumentParser:
    """Register ``exercise`` and its subcommands on the main CLI's ``subparsers``."""
    ids = _exercise_ids()
    epilog = _epilog()
    top = subparsers.add_parser(
        "exercise", help=COMMANDS["exercise"],
        description="The seeded exercises (§11.12's 11.N, Failure Recovery's nm0.N): solve a variant, generate one "
                    "from a seed, check a student's answers, grade students' notebooks, or derive the student "
                    "notebooks from the solutions.",
        epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="exercise_command", metavar="SUBCOMMAND", required=True)
    ex_help = (f"exercise id: {', '.join(ids[:-1])} or {ids[-1]} (also 1, 2, … for 11.1, 11.2, …; "
               "nm0_1 or NM0.1 for nm0.1)")

    p = sub.add_parser("list", help="the exercises, their parameters and graded quantities")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("solve", help="every quantity the exercise asks for, and its decision",
                       description="Solve an exercise for its default givens, a seeded variant (--seed) or "
                                   "overridden givens (--param), printing every quantity, the decision, the "
                                   "reading taken where the statement is ambiguous, and the alternative's answers.",
                       epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("exercise", help=ex_help)
    _add_params_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object: params and every computed quantity")
    p.set_defaults(func=_cmd_solve)

    p = sub.add_parser("generate", help="a seeded variant's givens as JSON",
                       description="Print the givens of a seeded variant as one JSON object (papermill parameters).")
    p.add_argument("exercise", help=ex_help)
    p.add_argument("--seed", type=int, default=0, help="variant seed (default 0)")
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("check", help="grade a student's answers (exit 0 all ok, 1 otherwise)",
                       description="Grade the answers in a JSON object {quantity: value} against the solution "
                                   "of the given variant. Floats pass within 1% relative (tiny absolute slack "
                                   "near zero); integers, booleans, index lists and states must match exactly.",
                       epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("exercise", help=ex_help)
    p.add_argument("--answers", required=True, metavar="FILE", help="JSON object of quantity -> answer")
    _add_params_args(p)
    p.add_argument("--reveal", action="store_true", help="show the expected values too (text and JSON)")
    p.add_argument("--json", action="store_true", help="the grading report as one JSON object")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("grade", help="grade students' exercise notebooks (exit 0 all right, 1 any wrong, 2 bad input)",
                       description="Grade submitted exercise notebooks: take the answers their grading cell "
                                   "recorded (or run each notebook with papermill, the givens injected), grade "
                                   "every quantity (one point each; an answer of a documented alternative "
                                   "reading is named as such) and print one report per notebook, or with "
                                   "several notebooks a class summary too. The student's files are never "
                                   "written. Exit 0 when every answer is right, 1 when any is wrong, 2 when a "
                                   "notebook cannot be graded (missing, not a notebook, no answer cell, a cell "
                                   "raises).",
                       epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="notebook files, folders of them, or globs")
    p.add_argument("--seed", type=int, help="grade against the seeded variant `generate --seed S` (default: the "
                                            "exercise's defaults)")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", default=None,
                     help="always run the notebooks (default: only those without answers recorded for the givens)")
    run.add_argument("--no-execute", dest="execute", action="store_false",
                     help="never run them: grade only the answers recorded in their outputs")
    p.add_argument("--accept-readings", action="store_true",
                   help="count an answer of a documented alternative reading as right")
    p.add_argument("--reveal", action="store_true", help="show the expected values too (text and JSON)")
    p.add_argument("--kernel", default="python3", help="Jupyter kernel to run notebooks with (default python3)")
    p.add_argument("--timeout", type=positive_seconds, default=600.0, metavar="S",
                   help="seconds per cell, a positive number (default 600)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: the notebook's report, or {submissions, summary} for several")
    p.set_defaults(func=_cmd_grade)

    p = sub.add_parser("measure", help="measure an exercise's quantities on this machine (nm0.5: our runtime's RTO)",
                       description="Measure on this machine what a Napkin Math block computes. nm0.5: record a "
                                   "trajectory on a durable log against the live tool services (processes on "
                                   "loopback), crash it in its last turn after the service applied the step, "
                                   "recover it, and time each of the block's RTO terms as our runtime pays them: "
                                   "snapshot read (checkpoint restore), WAL read and fold, prefill (computed: the "
                                   "stand-in model has no inference state), probe (a new tool session and a status "
                                   "lookup), plus the reconciled result's append and, with --takeover-lease-s, the "
                                   "wait for the crashed worker's lease. Each row beside the block's formula. "
                                   "Figures labelled measured are this machine's, from this run.",
                       epilog="examples:\n  python -m kernel_lib exercise measure nm0.5\n"
                              "  python -m kernel_lib exercise measure nm0.5 --takeover-lease-s 2 --json\n\n"
                              "exit 0 when measured, 2 on bad input",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("exercise", help="exercise id: " + ", ".join(MEASURES))
    _add_params_args(p)
    p.add_argument("--turns", type=int, default=10, help="turns of the recorded trajectory, the crash in the last "
                                                         "(default 10, as in the block)")
    p.add_argument("--snapshot-every", type=int, default=4, help="a checkpoint after every N turns (default 4)")
    p.add_argument("--takeover-lease-s", type=float, default=None, metavar="S",
                   help="recover as another worker that waits out the crashed worker's lease of S seconds "
                        "(default: a restart on the same host, no lease wait)")
    p.add_argument("--rounds", type=int, default=5,
                   help="repetitions of the read-only phases after the first recovery (default 5); the medians "
                        "are over ROUNDS + 1 samples, the first recovery's included")
    p.add_argument("--store", choices=("sqlite", "segment"), default="sqlite", help="the log's store (default sqlite)")
    p.add_argument("--dir", default=None, help="where to put the temporary directory (default: the system's); "
                                               "use a directory on the disk you want measured")
    p.add_argument("--json", action="store_true", help="one JSON object: the rows and the recorded trajectory")
    p.set_defaults(func=_cmd_measure)

    p = sub.add_parser("strip", help="derive exercises/ from solutions/ (or --check that they are in sync)")
    build_strip_parser(p)
    return top
