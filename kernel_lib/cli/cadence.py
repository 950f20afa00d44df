"""``python -m kernel_lib cadence ...``: checkpoint cadence from the command line (§11.4.3).

Bad parameters raise :class:`~kernel_lib.errors.CadenceParameterError` or
:class:`~kernel_lib.errors.FailureDataError` (both KernelErrors), which the main CLI prints as one
``error:`` line with exit code 2. A parameter error names the option the user gave (``--pause-s:
consolidation_pause_s must be ...``). Comma-separated lists (``--miss``, ``--crash-turns``,
``--strides``) are parsed by the commands, so that a bad list is such an error too, not an argparse
usage dump. ``simulate`` refuses runs longer than
:data:`~kernel_lib.cadence.trace.MAX_SIMULATED_TURNS` turns, and bounds its turn-by-turn check
(:data:`CHECK_BUDGET_TURNS`), showing a progress bar on a terminal when that check is long.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from typing import Any

from kernel_lib.errors import CadenceParameterError

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"cadence": "how often to checkpoint (§11.4.3): Young, eq. 5-6, Napkin Math 11.1, LANL failure data"}

#: Turn-steps the ``simulate`` command spends on its turn-by-turn check (strides are checked cheapest
#: first while they fit; the cheapest is always checked). About 0.2 s per million steps.
CHECK_BUDGET_TURNS = 5_000_000
#: ``--strides all`` evaluates every stride 1..N only up to this N.
MAX_ALL_STRIDES_CLI = 10_000

_EPILOG = """\
subcommands:
  trace          Napkin Math 11.1 rebuilt: solve the unprinted givens (crash turns, C, R,
                 restore time) from the printed results and recompute every printed figure
  young          theorem 11.1 / eq. 4: Young's interval, its overhead, the flat minimum
  stride         eq. 5: logged and unlogged stride in turns, the sqrt(Re/R) gain; R given or
                 measured on this machine from a real kernel_lib log
  simulate       eq. 6 on a crash trace (given turns or seeded Poisson crashes) at chosen strides,
                 checked against a turn-by-turn simulation
  consolidation  §11.12 exercise 9: how often to consolidate a delta chain, with a restore deadline
  snapshot       eq. 3: bytes written by full vs incremental snapshots
  lanl           real failure records (LANL format): MTBF, inter-arrival CV, a Poisson test, and
                 Young's interval for a given pause at the measured MTBF
  derive         the sympy derivations behind all of the above, and a check of the numeric code

examples:
  python -m kernel_lib cadence trace
  python -m kernel_lib cadence young --pause-s 2 --mtbf-s 600
  python -m kernel_lib cadence stride --pause-s 0.5 --failure-rate-per-turn 0.02 --measure-reconstruction sqlite
  python -m kernel_lib cadence simulate --turns 1000 --failure-rate-per-turn 0.02 --seed 7 --pause-s 0.5 \\
      --restore-s 1 --reconstruction-s-per-turn 0.1
  python -m kernel_lib cadence lanl --path ../shared/data/failures/lanl/system20.csv --pause-s 60
"""


def _floats(text: str | list, name: str) -> list[float]:
    """A comma-separated list of numbers (``--miss``), else CadenceParameterError naming ``name``."""
    if isinstance(text, list):
        return text
    try:
        out = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        out = []
    if not out:
        raise CadenceParameterError(f"{text!r} is not a comma-separated list of numbers", name=name)
    return out


def _ints(text: str | list, name: str) -> list[int]:
    """A comma-separated list of whole numbers (``--crash-turns``, ``--strides``), else
    CadenceParameterError naming ``name``. An empty list is allowed (no crashes)."""
    if isinstance(text, list):
        return text
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise CadenceParameterError(f"{text!r} is not a comma-separated list of whole numbers", name=name) from None


def _naming_flags(func: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser,
                  aliases: dict[str, str] | None = None) -> Callable[[argparse.Namespace], int]:
    """``func`` with each CadenceParameterError prefixed by the option that supplied the blamed value
    (``--pause-s: consolidation_pause_s must be ...``), when the user gave that option."""
    dests = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    names = {**{d: d for d in dests}, **(aliases or {})}   # parameter name -> argparse dest

    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except CadenceParameterError as exc:
            dest = names.get(exc.name or "")
            flag = dests.get(dest or "")
            if flag and getattr(args, dest, None) is not None and not str(exc).startswith(flag):
                raise CadenceParameterError(f"{flag}: {exc}", name=exc.name) from None
            raise

    return run


def _dump(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


def _table(header: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[j]) for r in cells) for j in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _g(v: Any, nd: int = 4) -> str:
    return "-" if v is None else (f"{v:.{nd}g}" if isinstance(v, float) else str(v))


# --- trace -------------------------------------------------------------------------------------------
def _cmd_trace(args: argparse.Namespace) -> int:
    from kernel_lib.cadence.napkin import reconstruct
    r = reconstruct()
    if args.json:
        _dump(r.to_dict())
        return 0 if r.all_ok else 1
    print("Napkin Math 11.1 rebuilt from its printed results (§11.4.3 eq. 5-6, §11.9 pitfall)")
    print(f"stated: {r.turns}-turn run, strides {list(r.strides)}, re-execution 20 s per unlogged turn")
    print(f"solved: crashes after turns {list(r.crash_turns)} (lambda = {r.failure_rate_per_turn:g}/turn), "
          f"C = {r.pause_s:g} s, R = {r.reconstruction_s_per_turn:g} s/turn, "
          f"T_restore = {r.restore_s_per_crash:g} s/crash")
    print()
    print(_table(["stride", "checkpoints", "lost suffixes", "capture s", "restore s", "reconstruct s",
                  "recovery s", "eq.6 overhead s"],
                 [[x.stride_turns, x.checkpoints, " & ".join(map(str, x.lost_suffix_turns)), _g(x.capture_s),
                   _g(x.restore_s), _g(x.reconstruction_s), _g(x.recovery_s), _g(x.overhead_s)] for x in r.results]))
    print()
    print(f"k* logged = {r.logged_stride_turns:.2f} turns, k* unlogged = {r.unlogged_stride_turns:.2f} turns, "
          f"gain sqrt(Re/R) = {r.logging_gain:.2f}")
    print()
    print(_table(["printed figure", "printed", "computed", "tolerance", "ok"],
                 [[c.figure, c.printed, _g(c.computed, 6) if isinstance(c.computed, float) else c.computed,
                   "exact" if c.tolerance is None or c.tolerance <= 1e-9 else f"±{c.tolerance:g}",
                   "yes" if c.ok else "NO"] for c in r.checks]))
    print()
    for n_ in r.notes:
        print(f"note: {n_}")
    return 0 if r.all_ok else 1


# --- young -------------------------------------------------------------------------------------------
def _cmd_young(args: argparse.Namespace) -> int:
    from kernel_lib.cadence.formulas import young_summary
    s = young_summary(args.pause_s, args.mtbf_s, _floats(args.miss, "miss_factor"))
    if args.json:
        _dump({"source": "theorem 11.1, eq. 4", **s.to_dict()})
        return 0
    print(f"Young's interval (theorem 11.1, eq. 4): sqrt(2 x {s.pause_s:g} s x {s.mtbf_s:g} s) = {s.interval_s:.4g} s")
    print(f"overhead at it: sqrt(2C/M) = {100 * s.overhead_fraction:.3g}% of useful time "
          f"(pause/MTBF = {s.pause_to_mtbf:.3g}; the approximation wants it small)")
    print()
    print(_table(["miss factor", "interval s", "overhead %", "x optimum", "(x+1/x)/2"],
                 [[_g(m["miss_factor"]), _g(m["interval_s"]), _g(100 * m["overhead_fraction"]),
                   _g(m["relative_to_optimum"]), _g(m["flat_minimum_factor"])] for m in s.misses]))
    return 0


# --- stride ------------------------------------------------------------------------------------------
def _reconstruction(args: argparse.Namespace):
    from kernel_lib.cadence.measure import Quantity, measure_reconstruction
    if args.measure_reconstruction:
        return measure_reconstruction(args.measure_reconstruction, directory=args.dir)
    if args.reconstruction_s_per_turn is None:
        raise CadenceParameterError("give --reconstruction-s-per-turn or --measure-reconstruction {sqlite,segment}",
                                    name="reconstruction_s_per_turn")
    return Quantity(args.reconstruction_s_per_turn, "s/turn", "given")


def _print_measured(q) -> None:
    if q.source == "measured":
        d = q.detail
        print(f"R measured on this machine: {q.value * 1e3:.4g} ms/turn ({d['store']} log, {d['events_per_turn']:g} "
              f"events/turn, fixed part {d['intercept_s'] * 1e3:.3g} ms per restore; {q.method})")
        for n_ in q.notes:
            print(f"  caveat: {n_}")


def _cmd_stride(args: argparse.Namespace) -> int:
    import kernel_lib.cadence.formulas as f
    q = _reconstruction(args)
    s = f.stride_summary(args.pause_s, args.failure_rate_per_turn, q.value, args.reexecution_s_per_turn,
                         reconstruction_source=q.source)
    mixed = None
    if args.unlogged_fraction is not None:
        if args.reexecution_s_per_turn is None:
            raise CadenceParameterError("--unlogged-fraction needs --reexecution-s-per-turn", name="unlogged_fraction")
        cost = f.effective_turn_cost_s(args.unlogged_fraction, q.value, args.reexecution_s_per_turn)
        k_mixed = f.stride_turns(args.pause_s, args.failure_rate_per_turn, cost)
        mixed = {"unlogged_fraction": args.unlogged_fraction, "effective_cost_s_per_turn": cost,
                 "stride_turns": k_mixed,
                 "overhead_s_per_turn": f.optimal_stride_overhead_s_per_turn(args.pause_s, args.failure_rate_per_turn,
                                                                              cost),
                 "overhead_keeping_logged_stride_s_per_turn": f.stride_overhead_s_per_turn(
                     s.logged_stride_turns, args.pause_s, args.failure_rate_per_turn, cost)}
    if args.json:
        _dump({"source": "eq. 5", **s.to_dict(), "reconstruction": q.to_dict(), "partly_unlogged": mixed})
        return 0
    _print_measured(q)
    print(f"logged stride (eq. 5): k* = sqrt(2C/(lambda R)) = {s.logged_stride_turns:.4g} turns, "
          f"overhead {s.logged_overhead_s_per_turn:.4g} s/turn")
    if s.unlogged_stride_turns is not None:
        print(f"unlogged stride (Re = {s.reexecution_s_per_turn:g} s): k* = {s.unlogged_stride_turns:.4g} turns, "
              f"overhead {s.unlogged_overhead_s_per_turn:.4g} s/turn; logging lengthens the stride "
              f"sqrt(Re/R) = {s.logging_gain:.4g}x")
    if mixed:
        print(f"with {100 * mixed['unlogged_fraction']:g}% of turns unlogged: "
              f"cost {mixed['effective_cost_s_per_turn']:.4g}"
              f" s/turn, k* = {mixed['stride_turns']:.4g} turns, overhead {mixed['overhead_s_per_turn']:.4g} s/turn "
              f"(keeping the logged stride: {mixed['overhead_keeping_logged_stride_s_per_turn']:.4g} s/turn)")
    return 0


# --- simulate ----------------------------------------------------------------------------------------
def _cmd_simulate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    import kernel_lib.cadence.formulas as f
    from kernel_lib.cadence.measure import resolve_pause
    from kernel_lib.cadence.trace import (
        MAX_SIMULATED_TURNS,
        evaluate_strides,
        given_trace,
        poisson_trace,
        simulate_turn_by_turn,
    )
    turns = f.stride("turns", args.turns)
    if turns > MAX_SIMULATED_TURNS:
        raise CadenceParameterError(f"turns must be <= {MAX_SIMULATED_TURNS:,} for simulate (it checks eq. 6 by "
                                    f"walking the run turn by turn), got {turns:,}", name="turns")
    if args.strides.strip().lower() == "all":
        if turns > MAX_ALL_STRIDES_CLI:
            raise CadenceParameterError(f"'all' would evaluate {turns:,} strides; it is allowed up to "
                                        f"{MAX_ALL_STRIDES_CLI:,} turns: list the strides instead", name="strides")
        strides = None
    else:
        strides = _ints(args.strides, "strides")
        if not strides:
            raise CadenceParameterError("no strides to evaluate", name="strides")
    if args.crash_turns is not None:
        trace = given_trace(args.turns, _ints(args.crash_turns, "crash_turns"))
    elif args.failure_rate_per_turn is not None:
        trace = poisson_trace(args.turns, args.failure_rate_per_turn, args.seed)
    else:
        raise CadenceParameterError("give --crash-turns or --failure-rate-per-turn (with --seed)", name="crash_turns")
    q = _reconstruction(args)
    pause = resolve_pause(args.pause_s)
    ev = evaluate_strides(trace, strides, pause_s=pause, restore_s_per_crash=args.restore_s,
                          reconstruction_s_per_turn=q)
    # the turn-by-turn check walks every turn and every lost suffix turn of each stride it checks:
    # check the cheapest strides first while they fit in the budget (always at least the cheapest)
    checked, steps = [], 0
    for r in sorted(ev.results, key=lambda r: (r.overhead_s, -r.stride_turns)):
        cost = trace.turns + sum(r.lost_suffix_turns)
        if checked and steps + cost > CHECK_BUDGET_TURNS:
            break
        checked.append(r)
        steps += cost
    brute = {}
    with tqdm(total=steps, unit="step", unit_scale=True, desc="turn-by-turn check", leave=False,
              disable=None if steps >= 2_000_000 else True) as bar:   # None: shown on a terminal only
        for r in checked:
            brute[r.stride_turns] = simulate_turn_by_turn(trace, r.stride_turns, pause_s=ev.pause_s,
                                                          restore_s_per_crash=ev.restore_s_per_crash,
                                                          reconstruction_s_per_turn=ev.reconstruction_s_per_turn)
            bar.update(trace.turns + sum(r.lost_suffix_turns))
    # summing turn by turn rounds once per step: allow for that on long runs
    rel = max(1e-9, 4e-16 * trace.turns)
    agree = all(abs(brute[r.stride_turns] - r.overhead_s) <= rel * max(1.0, r.overhead_s) for r in checked)
    try:   # the eq. 5 balance at the trace's own rate, when it has one (a given trace may be out of range)
        k_star = (f.logged_stride_turns(ev.pause_s, trace.failure_rate_per_turn, ev.reconstruction_s_per_turn)
                  if trace.crashes and ev.pause_s > 0 and ev.reconstruction_s_per_turn > 0 else None)
    except CadenceParameterError:
        k_star = None
    if args.json:
        _dump({"source": "eq. 6", **ev.to_dict(), "reconstruction": q.to_dict(),
               "turn_by_turn_agrees": agree, "turn_by_turn_checked_strides": sorted(brute),
               "logged_stride_turns_eq5": k_star})
        return 0 if agree else 1
    _print_measured(q)
    t = trace
    print(f"trace: {t.turns} turns, {t.crashes} crash(es) after turns {list(t.crash_turns)[:20]}"
          f"{' ...' if t.crashes > 20 else ''} ({t.source}); lambda = {t.failure_rate_per_turn:.4g}/turn")
    print(f"givens: C = {ev.pause_s:g} s ({ev.sources['pause_s']}), T_restore = {ev.restore_s_per_crash:g} s, "
          f"R = {ev.reconstruction_s_per_turn:.4g} s/turn ({ev.sources['reconstruction_s_per_turn']})")
    rows = ev.results if len(ev.results) <= 40 else sorted(ev.results, key=lambda r: r.overhead_s)[:20]
    if len(ev.results) > 40:
        print(f"(showing the 20 cheapest of {len(ev.results)} strides)")
    print(_table(["stride", "checkpoints", "capture s", "recovery s", "eq.6 overhead s", "turn-by-turn s"],
                 [[r.stride_turns, r.checkpoints, _g(r.capture_s), _g(r.recovery_s), _g(r.overhead_s),
                   _g(brute.get(r.stride_turns))] for r in rows]))
    print(f"best stride on this trace: {ev.best.stride_turns} ({ev.best.overhead_s:.4g} s)"
          + (f"; eq. 5 balance k* = {k_star:.4g} turns" if k_star else ""))
    print(f"turn-by-turn simulation agrees with eq. 6 at {len(brute)} strides"
          + (f" (the cheapest {len(brute)} of {len(ev.results)}: the check is bounded to about "
             f"{CHECK_BUDGET_TURNS:,} turn-steps)" if len(brute) < len(ev.results) else "")
          + f": {'yes' if agree else 'NO'}")
    return 0 if agree else 1


# --- consolidation / snapshot ------------------------------------------------------------------------------
def _cmd_consolidation(args: argparse.Namespace) -> int:
    from kernel_lib.cadence.formulas import consolidation_plan
    p = consolidation_plan(args.pause_s, args.restore_probability, args.base_read_s, args.delta_apply_s,
                           args.deadline_s)
    if args.json:
        _dump({"source": "§11.12 exercise 9 (method of theorem 11.1)", **p.to_dict()})
        return 0
    print(f"H(m) = {p.consolidation_pause_s:g}/m + {p.restore_probability:g} x ({p.base_read_s:g} + "
          f"{p.delta_apply_s:g} m/2) s per checkpoint")
    print(f"m* = sqrt(2P/(p d)) = {p.optimal_stride:.4g} checkpoints, H(m*) = {p.optimal_overhead_s:.4g} s, "
          f"worst-case restore at m* = {p.worst_case_restore_at_optimum_s:.4g} s")
    if p.deadline_s is not None:
        print(f"deadline {p.deadline_s:g} s: largest m = {p.deadline_stride}, H = {p.deadline_overhead_s:.4g} s "
              f"({p.deadline_cost_ratio:.4g}x H(m*)); m-dependent terms {p.variable_part_ratio:.4g}x vs "
              f"(x+1/x)/2 = {p.flat_minimum_factor:.4g} at x = {p.miss_factor:.4g}")
    return 0


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from kernel_lib.cadence.formulas import snapshot_write_volumes, stride
    k_ = stride("stride_turns", args.stride_turns)
    turns = stride("turns", args.turns)
    if turns < k_:
        raise CadenceParameterError(f"turns ({turns:,}) is shorter than stride_turns ({k_:,}): the run would "
                                    f"publish no checkpoint", name="turns")
    n_ = turns // k_
    v = snapshot_write_volumes(args.bytes_per_turn, k_, n_)
    if args.json:
        _dump({"source": "eq. 3", "turns": args.turns, **v.to_dict()})
        return 0
    print(f"{n_} checkpoints, one every {k_} turns, state growing {v.bytes_per_turn:g} bytes/turn (eq. 3):")
    print(f"  full snapshots  g k n(n+1)/2 = {v.full_bytes:.6g} bytes")
    print(f"  incremental     g k n        = {v.incremental_bytes:.6g} bytes")
    print(f"  ratio (n+1)/2                = {v.ratio:g}")
    return 0


# --- lanl -------------------------------------------------------------------------------------------------
def _cmd_lanl(args: argparse.Namespace) -> int:
    from kernel_lib.cadence.lanl import analyze_lanl
    a = analyze_lanl(args.path, pause_s=args.pause_s, bootstrap=args.bootstrap, seed=args.seed,
                     include_same_event=args.include_same_event, merge_simultaneous=not args.no_merge,
                     errors="raise" if args.strict else "skip")
    if args.json:
        _dump(a.to_dict(nodes=args.nodes > 0))
        return 0
    ld = a.load
    print(f"{ld['path']}: {ld['data_rows']} rows, kept {ld['kept_rows']}; skipped {ld['skipped_rows']} malformed, "
          f"{ld['duplicates_dropped']} duplicate, {ld['blank_lines']} blank; "
          f"{ld['same_event_rows']} flagged Same Event "
          f"({'included' if a.include_same_event else 'left out of arrivals'}); "
          f"{ld['missing_fixed']} without fix time")
    for s in ld["skipped_examples"]:
        print(f"  skipped line {s['line']}: {s['reason']}")
    for s in a.systems:
        st = s.stats
        print(f"\nsystem {s.system}: {st.failures} interrupts {st.first} .. {st.last}"
              + (f" ({s.merged_simultaneous} same-minute failures merged)" if s.merged_simultaneous else ""))
        if st.mtbf_s:
            print(f"  MTBF {st.mtbf_s / 3600:.4g} h (median gap {st.median_gap_s / 3600:.3g} h), CV {_g(st.cv, 3)}")
        if s.poisson:
            print(f"  {s.poisson.verdict}")
        if s.cadence_system:
            c = s.cadence_system
            print(f"  whole-system job, pause {c.pause_s:g} s: Young's interval {c.young_interval_s / 60:.4g} min, "
                  f"overhead {100 * c.young_overhead_fraction:.3g}% (Poisson model); on the real failure times "
                  f"{100 * c.replay_overhead_at_young:.3g}%, "
                  f"best interval there {c.best_replay_interval_s / 60:.4g} min "
                  f"({100 * c.best_replay_overhead:.3g}%)")
        if s.cadence_node:
            c = s.cadence_node
            print(f"  one-node job: pooled node MTBF {c.mtbf_s / 86400:.4g} days ({s.nodes_in_system} nodes, "
                  f"{s.nodes_with_failures} ever failed), Young's interval {c.young_interval_s / 3600:.4g} h, "
                  f"overhead {100 * c.young_overhead_fraction:.3g}%")
        for w in s.warnings:
            print(f"  warning: {w}")
    for n_ in a.notes:
        print(f"\nnote: {n_}")
    if args.nodes > 0 and a.per_node.height:
        top = a.per_node.sort("failures", descending=True).head(args.nodes)
        print(f"\nmost-failing nodes (of {a.per_node.height}):")
        print(_table(["system", "node", "failures", "MTBF h", "CV", "Young min"],
                     [[r["system"], r["node"], r["failures"], _g(r["mtbf_s"] / 3600 if r["mtbf_s"] else None),
                       _g(r["cv"], 3), _g(r["young_interval_s"] / 60 if r["young_interval_s"] else None)]
                      for r in top.iter_rows(named=True)]))
    if a.systems and a.systems[0].poisson:
        print(f"\nnote: {a.systems[0].poisson.caveat}")
    return 0


# --- derive -----------------------------------------------------------------------------------------------
def _cmd_derive(args: argparse.Namespace) -> int:
    from kernel_lib.cadence.derivation import check_numeric, derive
    d = derive()
    rows = check_numeric()
    ok = all(r["ok"] for r in rows)
    if args.json:
        _dump({**d.to_dict(), "numeric_check": rows, "numeric_check_ok": ok})
        return 0 if ok else 1
    for name, b in d.balances.items():
        print(f"{name}: overhead = {b.overhead}")
        print(f"  d/d{b.variable} = {b.derivative} = 0  ->  {b.variable}* = {b.optimum}")
        print(f"  minimum = {b.minimum}; curvature there = {b.curvature} > 0; flat factor = {b.flat_factor}")
    print(f"logging gain (logged k* / unlogged k*) = {d.logging_gain}")
    print(f"eq. 3: W_full = {d.snapshot.full}, W_incr = {d.snapshot.incremental}, ratio = {d.snapshot.ratio}")
    print(f"exercise 9: worst-case restore = {d.worst_case_restore}; "
          f"largest m under deadline D: m <= {d.deadline_stride}")
    print(f"numeric functions agree with the sympy results at {len(rows)} sample points: {'yes' if ok else 'NO'}")
    for r in rows:
        if not r["ok"]:
            print(f"  MISMATCH {r['quantity']}: numeric {r['numeric']} vs sympy {r['sympy']}")
    return 0 if ok else 1


# --- registration -----------------------------------------------------------------------------------------
def add_commands(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``cadence`` and its subcommands on a CLI's subparsers."""
    top = subparsers.add_parser(
        "cadence", help=COMMANDS["cadence"],
        description="Checkpoint cadence (§11.4.3): balance the pause of each checkpoint against the work a crash "
                    "makes you redo (Young, eq. 4) or merely reconstruct from the log (eq. 5), and charge a stride "
                    "against a concrete crash trace (eq. 6).",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="cadence_command", metavar="SUBCOMMAND", required=True)

    def json_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")

    p = sub.add_parser("trace", help="Napkin Math 11.1 rebuilt from its printed results",
                       description="Solve the givens Napkin Math 11.1 does not print (the two crash turns, the capture "
                                   "pause C, the per-turn reconstruction cost R, the per-crash restore time) from the "
                                   "results it does print, then recompute every printed figure (per-stride "
                                   "checkpoints, suffixes, totals and eq. 6 overheads, lambda, k*, the unlogged k*, "
                                   "the gain, the §11.9 every-turn figure) and compare. Exit 1 if any differs.")
    json_flag(p)
    p.set_defaults(func=_cmd_trace)

    p = sub.add_parser("young", help="Young's interval sqrt(2 C M) and its flat minimum (theorem 11.1, eq. 4)",
                       description="Young's interval for a checkpoint pause C and a mean time between work-losing "
                                   "failures M, the overhead sqrt(2C/M) there, and the overhead when the interval "
                                   "misses by the given factors, next to (x + 1/x)/2.")
    p.add_argument("--pause-s", type=float, required=True, help="C: seconds execution stops per checkpoint")
    p.add_argument("--mtbf-s", type=float, required=True, help="M: mean seconds between work-losing failures")
    p.add_argument("--miss", default="0.1,0.5,2,10",
                   help="comma-separated miss factors to tabulate (default 0.1,0.5,2,10)")
    json_flag(p)
    p.set_defaults(func=_naming_flags(_cmd_young, p, {"miss_factor": "miss"}))

    def reconstruction_args(p: argparse.ArgumentParser) -> None:
        g = p.add_mutually_exclusive_group()
        g.add_argument("--reconstruction-s-per-turn", type=float,
                       help="R: seconds to reconstruct one logged turn (read, check, fold, apply)")
        g.add_argument("--measure-reconstruction", choices=("sqlite", "segment"),
                       help="measure R on this machine from a real kernel_lib log of this kind (about a second)")
        p.add_argument("--dir", help="where to put the measured log's temporary directory (default: system temp)")

    p = sub.add_parser("stride", help="the stride in turns, logged vs unlogged (eq. 5)",
                       description="k* = sqrt(2C/(lambda R)) for logged turns and sqrt(2C/(lambda Re)) for turns that "
                                   "must be re-executed, the per-turn overhead sqrt(2 C lambda c) at each, and the "
                                   "gain sqrt(Re/R). With --unlogged-fraction, a mix of both (§11.12 exercise 5).")
    p.add_argument("--pause-s", type=float, required=True, help="C: seconds execution stops per checkpoint")
    p.add_argument("--failure-rate-per-turn", type=float, required=True, help="lambda: crashes per completed turn")
    reconstruction_args(p)
    p.add_argument("--reexecution-s-per-turn", type=float, help="Re: seconds to re-execute an unlogged turn")
    p.add_argument("--unlogged-fraction", type=float, help="share of turns whose state the log misses (0..1)")
    json_flag(p)
    p.set_defaults(func=_naming_flags(_cmd_stride, p, {"cost_s_per_turn": "reconstruction_s_per_turn"}))

    p = sub.add_parser("simulate", help="eq. 6 on a crash trace, at chosen strides",
                       description="Charge each stride against one crash trace: N_k C + N_crash T_restore + "
                                   "R sum(lost suffix) (eq. 6), and check it against a turn-by-turn simulation. "
                                   "Crash turns count completed turns (0..N-1). A run of N turns takes N // k "
                                   "checkpoints. Exit 1 if the two disagree.")
    p.add_argument("--turns", type=int, required=True, help="N: turns in the run (at most 10,000,000)")
    p.add_argument("--crash-turns", help="comma-separated completed turns at each crash (a trace as data)")
    p.add_argument("--failure-rate-per-turn", type=float, help="draw Poisson crashes at this rate per turn instead")
    p.add_argument("--seed", type=int, default=0, help="seed of the Poisson draw, >= 0 (default 0)")
    p.add_argument("--pause-s", type=float, required=True, help="C: capture pause per checkpoint, seconds")
    p.add_argument("--restore-s", type=float, required=True, help="T_restore: fixed restore seconds per crash")
    reconstruction_args(p)
    p.add_argument("--strides", default="1,2,5,10,20,25,50",
                   help="comma-separated strides, or 'all' for 1..N with N <= 10,000 (default 1,2,5,10,20,25,50)")
    json_flag(p)
    p.set_defaults(func=_naming_flags(_cmd_simulate, p, {"restore_s_per_crash": "restore_s",
                                                          "stride_turns": "strides"}))

    p = sub.add_parser("consolidation", help="how often to consolidate a delta chain (§11.12 exercise 9)",
                       description="Expected seconds per checkpoint H(m) = P/m + p (B + d m/2) for a new base every m "
                                   "checkpoints; its optimum, the worst-case restore B + d m, and with --deadline-s "
                                   "the largest admissible m and what it costs.")
    p.add_argument("--pause-s", type=float, required=True, help="P: seconds a consolidation pauses execution")
    p.add_argument("--restore-probability", type=float, required=True,
                   help="p: probability that a restore is needed between two checkpoints")
    p.add_argument("--base-read-s", type=float, required=True, help="B: seconds to read the base")
    p.add_argument("--delta-apply-s", type=float, required=True, help="d: seconds per delta in the chain")
    p.add_argument("--deadline-s", type=float, help="longest allowed restore, seconds")
    json_flag(p)
    p.set_defaults(func=_naming_flags(_cmd_consolidation, p, {"consolidation_pause_s": "pause_s"}))

    p = sub.add_parser("snapshot", help="write volume of full vs incremental snapshots (eq. 3)",
                       description="Bytes written over a run by full snapshots (g k n(n+1)/2) and by deltas (g k n), "
                                   "n = turns // stride checkpoints, and their ratio (n+1)/2.")
    p.add_argument("--bytes-per-turn", type=float, required=True, help="g: growth of checkpointed state per turn")
    p.add_argument("--stride-turns", type=int, required=True, help="k: turns between checkpoints")
    p.add_argument("--turns", type=int, required=True, help="turns in the trajectory")
    json_flag(p)
    p.set_defaults(func=_naming_flags(_cmd_snapshot, p))

    p = sub.add_parser("lanl", help="MTBF, Poisson test and Young's interval from LANL failure records",
                       description="Read a LANL-format failure file (one row per failure; see README.source of the "
                                   "data set), report inter-arrival statistics per system and node, test whether "
                                   "arrivals look Poisson (CV, and a KS test whose p-value is calibrated by a "
                                   "parametric bootstrap because the rate is fitted from the same data), and give "
                                   "Young's interval for --pause-s at the measured MTBF, replayed on the real "
                                   "failure times. Malformed rows are skipped and listed (--strict: an error).")
    p.add_argument("--path", required=True, help="the CSV file, e.g. ../shared/data/failures/lanl/system20.csv")
    p.add_argument("--pause-s", type=float, default=60.0, help="checkpoint pause C in seconds (default 60)")
    p.add_argument("--bootstrap", type=int, default=999,
                   help="parametric bootstrap samples, 1..100000 (default 999)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed, >= 0 (default 0)")
    p.add_argument("--include-same-event", action="store_true",
                   help="count rows flagged Same Event as separate arrivals (default: left out)")
    p.add_argument("--no-merge", action="store_true",
                   help="do not merge failures starting in the same minute into one system interrupt")
    p.add_argument("--strict", action="store_true", help="stop at the first malformed row instead of skipping it")
    p.add_argument("--nodes", type=int, default=10, help="show this many most-failing nodes (default 10; 0: none)")
    json_flag(p)
    p.set_defaults(func=_naming_flags(_cmd_lanl, p))

    p = sub.add_parser("derive", help="the sympy derivations and a check of the numeric code",
                       description="Derive each balance with sympy (differentiate, solve, check curvature, simplify "
                                   "the flat-minimum factor), eq. 3, and compare the numeric functions used "
                                   "everywhere with the symbolic results. Exit 1 on a mismatch.")
    json_flag(p)
    p.set_defaults(func=_cmd_derive)
    return top
