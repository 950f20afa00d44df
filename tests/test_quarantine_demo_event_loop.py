"""The live quarantine demo called from a thread that runs an asyncio event loop, as a Jupyter
kernel's main thread does (FR.4's notebook calls it there).

Fault model: pyroute2's synchronous netlink sockets start an event loop of their own, which fails
with "This event loop is already running" in such a thread. Invariant: the demo gives the same
report from inside a running loop as from plain code. Needs root and network namespaces (the
fallbacks never touch pyroute2); skips with the reason otherwise.
"""

from __future__ import annotations

import asyncio

import pytest

from kernel_lib.live.quarantine import probe_host
from kernel_lib.live.quarantine_demo import _loop_running, run_quarantine_demo

CAPS = probe_host()


def test_loop_detection():
    assert _loop_running() is False

    async def inside() -> bool:
        return _loop_running()

    assert asyncio.run(inside()) is True


@pytest.mark.skipif(not CAPS.netns, reason=f"no network namespaces: {CAPS.notes.get('netns')}")
def test_the_demo_runs_from_inside_a_running_event_loop(tmp_path):
    async def notebook_cell() -> dict:
        return run_quarantine_demo(tmp_path, sever="netns")      # called synchronously, as a cell does

    q = asyncio.run(notebook_cell())
    assert q["sever_mechanism"] == "netns" and q["request_after_cut_failed"] and q["clean"]
    assert q["tainted_read_refused"] and q["model_clearance_refused"]
