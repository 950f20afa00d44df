"""``python -m kernel_lib worksheet``: the crash worksheet with real processes (issue 3, §11.1–11.3, §11.5.3)."""

from __future__ import annotations

import argparse
import json
import signal
import sys

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"worksheet": "the crash worksheet for real: SIGKILL a worker mid-test and recover from the log, "
                         "or (--zombie) freeze a leased worker and watch the fences refuse it"}


def _epilog() -> str:
    from kernel_lib.live.controller import EXPECTED, crash_points
    return """\
crash points: --crash-after takes any event the worker appends, as a log position N, TYPE#K (the
K-th event of that type) or TYPE (its first event for test_r18, else its first event). An event
the gate appends in one batch with the next ones ("one batch through M") is durable only with
them, so the worker is killed at M:
""" + "\n".join(f"  {p.describe()}" for p in crash_points()) + """

what the four crash points of table 3 give:
""" + "\n".join(f"  {k:<15} {v}" for k, v in EXPECTED.items()) + """

The run builds ws_r18 (datasets/repair_r18: base + patch_r18.diff, content-addressed), starts the
executor service on 127.0.0.1 (a free port), starts a worker that pauses right after the chosen
event is durable, kills it with SIGKILL, asks the executor whether the test is still running,
then a replacement worker process folds the surviving log ("recovered") and reconciles test_r18
by operation id against the executor, verifying the Ed25519 signature of any completion record
("reconciled"). All processes and temporary files are removed at the end.

--zombie runs the handoff of §11.5.1 instead: the worker holds a lease (owner_epoch 1), dispatches
test_r18 and is frozen with SIGSTOP (not killed); its lease lapses; a replacement is granted
owner_epoch 2, installs it in the log and at the executor and reconciles test_r18; then SIGCONT
wakes the old worker, whose late append, late dispatch through its gate and re-sent request are
each refused, while test_r18 keeps its single dispatch (sqlite or etcd store: the segment log
admits one opener at a time).

--sweep kills the worker at every kill position (every batch end) in turn (a fresh executor, log
and worker each time, a real SIGKILL, a replacement that folds and reconciles) and reports, per
logical operation, how
often the executor process itself says it was invoked; an operation invoked more often than its
repeat contract allows (once under unsafe / at_most_once) is a violation. Its JSON has positions,
runs, invocations (largest count in one run), invocations_by_position, contracts, violations,
errors and ok. A progress bar goes to stderr when stderr is a terminal. Exit code: 0 ok,
1 violations found, 2 an error (a position that did not run, a bad argument).

examples:
  python -m kernel_lib worksheet --crash-after ToolResult --store segment --json
  python -m kernel_lib worksheet --crash-after TaskStarted
  python -m kernel_lib worksheet --crash-after 'BudgetSettled#1' --json
  python -m kernel_lib worksheet --sweep --store sqlite --json
  python -m kernel_lib worksheet --zombie --json
"""


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt   # unwind through run_worksheet's clean-up, as Ctrl-C does


def _print_zombie(r: dict) -> None:
    e, st, tk = r["epochs"], r["stall"], r["takeover"]
    print(f"old worker pid {st['worker_pid']} (owner_epoch {e['old_worker']}) dispatched test_r18 "
          f"({st['job_handle']}) and was frozen with SIGSTOP (state {st['process_state']}); the test was "
          f"{st['executor_status_at_stall']}")
    print(f"its lease lapsed; {tk['owner_id']} was granted owner_epoch {e['new_worker']} and installed it in the log "
          f"(fence {e['log_fence']}) and at the executor (fence {e['executor_fence']})")
    rc = tk["reconciliation"]
    print(f"reconciliation of test_r18: {rc.get('action')}"
          + (f" ({rc.get('status')}: {(rc.get('outcome') or {}).get('summary', '')})" if rc.get("status") else ""))
    print(f"SIGCONT after {st['stalled_s']} s; the old worker acted on its stale lease:")
    for a in r["rejections"]:
        verdict = "ACCEPTED" if a.get("accepted") else "refused"
        why = a.get("error_type") or f"HTTP {a.get('status_code')} {a.get('reason')}"
        by = f"; refused by the {a['refused_by']}" if a.get("refused_by") else ""
        print(f"  {a['boundary']:<14} {verdict}: {a['action']} ({why}{by})")
        if a.get("gate_recheck_now"):
            print(f"  {'':<14} the gate's own recheck would say: {a['gate_recheck_now']}")
    lease = r.get("lease_after_resume") or {}
    print(f"  its lease renewal afterwards: {'renewed' if lease.get('renewed') else lease.get('reason')}")
    p = r["preserved"]
    print(f"preserved: {p['operation_id']} {p['status_in_log']} with attempts {p['attempts_in_log']}, "
          f"{p['executor_submissions']} submission(s) at the executor ({p['job_handle']})")
    print(f"log owner_epochs by position: {r['log']['owner_epochs']}")
    print(f"all checks passed: {r['ok']}" + ("" if r["ok"] else
                                              f" (failed: {[k for k, v in r['checks'].items() if not v]})"))


def _sweep(args: argparse.Namespace) -> int:
    from kernel_lib.live.sweep import run_sweep

    r = run_sweep(args.store, seed=args.seed, test_delay_s=0.0 if args.test_delay_s is None else args.test_delay_s,
                  reconcile_timeout_s=args.reconcile_timeout_s, progress=True)
    if args.json:
        print(json.dumps(r, sort_keys=True))
    else:
        for run in r["runs"]:
            inv = ", ".join(f"{op} {v['invocations']}x ({v['repeat_contract']})"
                            for op, v in run["invocations"].items())
            print(f"  {run['position']:>2} {run['point']:<17} killed (exit {run['worker_exit']}); recovered "
                  f"{run['recovered'].get('test_r18', 'absent')}, reconciled "
                  f"{run['reconciled'].get('test_r18')}; executor invocations: {inv}")
        for e in r["errors"]:
            print(f"  error at position {e['position']} ({e['point']}): {e['error']}")
        for v in r["violations"]:
            if v.get("kind") == "lost_evidence_unsettled":
                print(f"  VIOLATION at position {v['position']}: deferred evidence of {v['operation_id']} at "
                      f"#{v['lost_position']} lost and not settled by reconciliation ({v['action']})")
                continue
            print(f"  VIOLATION at position {v['position']}: {v['operation_id']} invoked {v['invocations']}x, "
                  f"{v['repeat_contract']} allows {v['allowed']}")
        print(f"{len(r['positions'])} positions on the {r['store']} store in {r['elapsed_s']:.1f} s; "
              f"invocations per operation (largest in one run): {r['invocations']}; ok: {r['ok']}")
    return 2 if r["errors"] else 1 if r["violations"] else 0


def _cmd(args: argparse.Namespace) -> int:
    if args.sweep and (args.crash_after is not None or args.keep or args.zombie):
        print("error: --sweep kills the worker at every position itself; --crash-after, --keep and --zombie do "
              "not combine with it", file=sys.stderr)
        return 2
    if args.zombie and (args.crash_after is not None or args.keep):
        print("error: --crash-after and --keep belong to the crash worksheet; --zombie stalls the worker "
              "(SIGSTOP) right after it dispatched test_r18 instead of killing it", file=sys.stderr)
        return 2
    if not args.zombie and args.lease_ttl_s is not None:
        print("error: --lease-ttl-s applies only with --zombie", file=sys.stderr)
        return 2
    args.crash_after = "ToolResult" if args.crash_after is None else args.crash_after   # '' is refused, not defaulted
    from kernel_lib.live.controller import resolve_crash_point, run_worksheet, run_zombie
    if not args.sweep and not args.zombie:   # refused before any process starts, naming the option
        resolve_crash_point(args.crash_after, args.seed, parameter="--crash-after")
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if args.sweep:
            return _sweep(args)
        args.test_delay_s = 2.0 if args.test_delay_s is None else args.test_delay_s
        if args.zombie:
            r = run_zombie(args.store, None, args.seed, args.test_delay_s,
                           lease_ttl_s=args.lease_ttl_s,
                           reconcile_timeout_s=args.reconcile_timeout_s)
        else:
            r = run_worksheet(args.crash_after, args.store, None, args.seed, args.test_delay_s, keep=args.keep,
                              reconcile_timeout_s=args.reconcile_timeout_s)
    except KeyboardInterrupt:
        print("worksheet interrupted; its processes and work directory were removed", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps(r, sort_keys=True))
        return 0
    if args.zombie:
        _print_zombie(r)
        return 0
    c, e, rec, recon = r["crash"], r["executor"], r["recovered"], r["reconciled"]
    op = rec["operations"].get("test_r18")
    held = ", ".join(f"{k} {v:g} USD" for k, v in rec["budget"]["outstanding_reservations"].items()) or "none"
    print(f"crash: {c['signal']} to worker pid {c['worker_pid']} after {c['paused_at']} at log position "
          f"{c['log_position']} ({r['store']} store)")
    print(f"executor at the crash: test_r18 {e['status_at_crash']}"
          + (f" ({e['job_handle']}, {e['charged_usd_at_crash']} USD so far)" if e["job_handle"] else ""))
    print("recovered (new process, fold of the surviving log): test_r18 "
          + (f"{op['status']} (attempt {op['attempt_id']}, job handle "
             + (op["job_handle"] or "not in the log") + ")" if op else "absent")
          + f"; held reservations: {held}")
    act = recon["actions"].get("test_r18", {})
    from kernel_lib.live.session import action_reading
    print(f"reconciled: {action_reading(act)}")
    if r["model"].get("recorded_reply") is None:
        print("model: no model reply survived in the log, so there is nothing recorded to reproduce")
    else:
        print(f"model: the fold reproduces the recorded reply {r['model'].get('recorded_reply')!r}; asking the "
              f"stand-in again samples {r['model'].get('fresh_reply')!r}, so recovery reads the log, not the model")
    tl = r.get("resume_timeline")
    if tl:
        from kernel_lib.resume.stages import ResumeTimeline
        print("resume stages (eq. 7):")
        for line in ResumeTimeline.from_dict(tl).summary_lines():
            print("  " + line)
    if r.get("kept_log"):
        print(f"log kept at {r['kept_log']} (python -m kernel_lib fold --log {r['kept_log']})")
    print("(--json prints the whole report)")
    return 0


def add_commands(subparsers) -> argparse.ArgumentParser:
    """Register the ``worksheet`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser(
        "worksheet", help=COMMANDS["worksheet"],
        description="Run the repair trajectory with real processes, kill the worker with SIGKILL right after "
                    "any event of it is durable, rebuild the record in a new process and reconcile test_r18 against "
                    "the executor (§11.1, §11.3.3, §11.5.3). Prints one JSON object with --json: crash, "
                    "executor, recovered, reconciled, model, resume_timeline (the replacement's timed stages, "
                    "eq. 7). With --zombie (§11.5.1) the JSON holds epochs, stall, takeover, resume, "
                    "rejections (one per boundary that refused the old worker), preserved (test_r18, "
                    "dispatched once), log, checks and ok.",
        epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--crash-after", metavar="POINT", default=None,
                   help="kill the worker right after this crash point is durable: a log position N, an event type "
                        "(its first event for test_r18, else its first event) or TYPE#K; any event the worker "
                        "appends (listed below; an unknown point exits 2 listing them). Default ToolResult; not "
                        "with --zombie or --sweep")
    p.add_argument("--store", choices=["sqlite", "segment", "etcd"], default="sqlite",
                   help="log store (default sqlite); etcd starts three etcd members on loopback for the run (the "
                        "quorum tier, §11.3.1) and, with --zombie, takes leases from them too; every member is "
                        "stopped at the end")
    p.add_argument("--seed", type=int, default=0, help="seed of the model stand-in (default 0)")
    p.add_argument("--test-delay-s", type=float, default=None,
                   help="seconds the executor waits before starting pytest, so the test is still running at "
                        "the crash (default 2.0; 0 with --sweep)")
    p.add_argument("--reconcile-timeout-s", type=float, default=60.0,
                   help="how long reconciliation waits for a running test to finish (default 60)")
    p.add_argument("--keep", metavar="DIR", help="copy the surviving (reconciled) log into DIR for inspection")
    p.add_argument("--zombie", action="store_true",
                   help="the §11.5.1 handoff: SIGSTOP a leased worker after it dispatched test_r18, let a "
                        "replacement take over, SIGCONT the old one and show each boundary refusing it")
    p.add_argument("--lease-ttl-s", type=float, default=None,
                   help="with --zombie: the old worker's lease term in seconds (default 1.0; 3.0 with --store etcd, "
                        "whose lease TTLs are whole seconds)")
    p.add_argument("--sweep", action="store_true",
                   help="kill the worker at every position of the trajectory in turn, recover each time, and "
                        "report each operation's invocations as the executor process counts them (exit 1 when "
                        "an operation was invoked more often than its repeat contract allows)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd)
    return p
