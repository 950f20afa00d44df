"""``python -m kernel_lib worksheet``: the crash worksheet with real processes (issue 3, §11.1–11.3, §11.5.3)."""

from __future__ import annotations

import argparse
import json
import signal
import sys

from .controller import CRASH_POINTS, EXPECTED, run_worksheet

_EPILOG = """\
what each --crash-after gives (table 3):
""" + "\n".join(f"  {k:<15} {v}" for k, v in EXPECTED.items()) + """

The run builds ws_r18 (datasets/repair_r18: base + patch_r18.diff, content-addressed), starts the
executor service on 127.0.0.1 (a free port), starts a worker that pauses right after the chosen
event is durable, kills it with SIGKILL, asks the executor whether the test is still running,
then a replacement worker process folds the surviving log ("recovered") and reconciles test_r18
by operation id against the executor, verifying the Ed25519 signature of any completion record
("reconciled"). All processes and temporary files are removed at the end.

example:
  python -m kernel_lib worksheet --crash-after ToolResult --store segment --json
"""


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt   # unwind through run_worksheet's clean-up, as Ctrl-C does


def _cmd(args: argparse.Namespace) -> int:
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
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
    c, e, rec, recon = r["crash"], r["executor"], r["recovered"], r["reconciled"]
    op = rec["operations"].get("test_r18")
    print(f"crash: {c['signal']} to worker pid {c['worker_pid']} after {c['paused_at']} at log position "
          f"{c['log_position']} ({r['store']} store)")
    print(f"executor at the crash: test_r18 {e['status_at_crash']}"
          + (f" ({e['job_handle']}, {e['charged_usd_at_crash']} USD so far)" if e["job_handle"] else ""))
    print("recovered (new process, fold of the surviving log): test_r18 "
          + (f"{op['status']} (attempt {op['attempt_id']}, job {op['job_handle']})" if op else "absent")
          + f"; held reservations {rec['budget']['outstanding_reservations']}")
    act = recon["actions"].get("test_r18", {})
    print(f"reconciled: {act.get('action')}: {act.get('note', '')}")
    print(f"model: recorded reply {r['model'].get('recorded_reply')!r}; fresh sample "
          f"{r['model'].get('fresh_reply')!r}")
    if r.get("kept_log"):
        print(f"log kept at {r['kept_log']} (python -m kernel_lib fold --log {r['kept_log']})")
    print("(--json prints the whole report)")
    return 0


def add_cli(subparsers) -> argparse.ArgumentParser:
    """Register the ``worksheet`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser(
        "worksheet", help="the crash worksheet for real: SIGKILL a worker mid-test, recover from the log",
        description="Run the repair trajectory with real processes, kill the worker with SIGKILL right after "
                    "an event is durable, rebuild the record in a new process and reconcile test_r18 against "
                    "the executor (§11.1, §11.3.3, §11.5.3). Prints one JSON object with --json: crash, "
                    "executor, recovered, reconciled, model.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--crash-after", choices=CRASH_POINTS, default="ToolResult",
                   help="kill the worker right after this event for test_r18 is durable (default ToolResult)")
    p.add_argument("--store", choices=["sqlite", "segment"], default="sqlite", help="log store (default sqlite)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model stand-in (default 0)")
    p.add_argument("--test-delay-s", type=float, default=2.0,
                   help="seconds the executor waits before starting pytest, so the test is still running at "
                        "the crash (default 2.0)")
    p.add_argument("--reconcile-timeout-s", type=float, default=60.0,
                   help="how long reconciliation waits for a running test to finish (default 60)")
    p.add_argument("--keep", metavar="DIR", help="copy the surviving (reconciled) log into DIR for inspection")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd)
    return p
