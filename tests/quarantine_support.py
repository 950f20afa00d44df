"""Shared pieces of the live quarantine tests (tests/test_quarantine_live.py and
tests/test_adversarial_issue19_quarantine.py): what this host offers, the skip marks that follow
from it, the sandboxed stand-in agent tree, and the check that nothing a test made is left."""

from __future__ import annotations

import os
import signal
import time

import pytest

from kernel_lib.live.quarantine import leftovers, probe_host, python_module, spawn_in_sandbox

CAPS = probe_host()
SANDBOX = "kernel_lib.live.quarantine_sandbox"

need_v1 = pytest.mark.skipif(not CAPS.cgroup_v1_freezer, reason=f"no writable cgroup v1 freezer: "
                                                                 f"{CAPS.notes.get('cgroup_v1')}")
need_v2 = pytest.mark.skipif(not CAPS.cgroup_v2, reason=f"no writable cgroup v2: {CAPS.notes.get('cgroup_v2')}")
need_netns = pytest.mark.skipif(not CAPS.netns, reason=f"no network namespaces: {CAPS.notes.get('netns')}")
need_all = pytest.mark.skipif(not (CAPS.netns and (CAPS.cgroup_v1_freezer or CAPS.cgroup_v2)),
                              reason="needs root, a cgroup freezer and network namespaces")


def assert_nothing_left() -> None:
    """No cgroup, namespace or veth link made by this process is left."""
    left = leftovers(pid=os.getpid())
    assert not any(left.values()), left


def start_agent(tmp_path, freezer=None, netns=None, children=2):
    """The sandbox's stand-in agent (a parent, ``children`` children, the first with a
    grandchild), each writing a counter under ``tmp_path/counters``; waits until every counter exists.
    Returns ``(process, counter directory)``."""
    counters = tmp_path / "counters"
    proc = spawn_in_sandbox(python_module(SANDBOX, "agent", "--counter-dir", str(counters), "--children",
                                          str(children)), freezer=freezer, netns=netns)
    deadline = time.monotonic() + 20
    while len(list(counters.glob("counter-*"))) < 2 + children and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc, counters


def stop_agent(proc) -> None:
    """Kill the agent's process group (and continue it, should it be stopped) and reap it."""
    for sig in (signal.SIGKILL, signal.SIGCONT):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)
