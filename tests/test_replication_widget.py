"""The replication panel on real etcd members: its Python API, its buttons, and one real browser.

Fault model: one member is SIGKILLed (the leader, so an election happens), a second is SIGSTOPped
(a partition), which leaves one of three members answering; later the paused member gets SIGCONT and
the killed one is restarted on its own data. Invariant: an append is reported acknowledged only after
a majority committed it; without a majority the append is reported as not acknowledged within the
timeout and its event is held in doubt, never skipped; every acknowledged event is in the log
afterwards, at the sequence number it was acknowledged at; no etcd process outlives stop(), close()
or the interpreter. Goal: a student can drive all of it by buttons or by method calls, and bad input
is a typed error (Python) or a message (widget), never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel_lib.errors import ConfigError, KernelError
from tests.helpers import process_gone
from widgets.replication import (ClusterNotRunningError, ClusterRunningError, MemberStateError, ReplicationPanel,
                                 UnknownMemberError)

pytestmark = pytest.mark.quorum

TIMEOUT_S = 2.0


def _etcd_processes_under(work_dir: Path | None) -> list[int]:
    """Pids of live processes whose command line names ``work_dir`` (the cluster's data)."""
    if work_dir is None:
        return []
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(work_dir) in cmd and not process_gone(int(d.name)):
            found.append(int(d.name))
    return found


def _other_running(panel: ReplicationPanel, *, besides: str) -> str:
    return next(m["member"] for m in panel.state()["members"] if m["state"] == "running" and m["member"] != besides)


def test_the_scenario_kill_one_pause_a_second_resume_restart_then_stop():
    panel = ReplicationPanel(append_timeout_s=TIMEOUT_S)
    try:
        s = panel.start()
        work_dir = panel.cluster.work_dir
        assert s["running"] and [m["state"] for m in s["members"]] == ["running"] * 3 and s["majority"] == 2
        # on a loaded machine the first election can outlast start's own wait: ask again (bounded)
        deadline = time.monotonic() + 15.0
        while sum(m["leader"] for m in s["members"]) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
            s = panel.state()
        assert sum(m["leader"] for m in s["members"]) == 1, s["members"]
        first = [panel.append() for _ in range(3)]
        assert all(o["acknowledged"] and o["ms"] > 0 for o in first)
        assert [o["sequence"] for o in first] == [1, 2, 3] and "acknowledged in" in first[0]["text"]

        # kill the leader: two of three is still a majority, so appends go on after an election
        leader = s["leader"]
        panel.kill(leader)
        assert panel.state()["alive"] == 2
        after_kill = [panel.append() for _ in range(2)]
        assert all(o["acknowledged"] for o in after_kill) and after_kill[-1]["sequence"] == 5

        # pause a second member: one of three answers, so the append is NOT acknowledged, within the timeout
        paused = _other_running(panel, besides=leader)
        panel.pause(paused)
        t0 = time.monotonic()
        stalled = panel.append()
        waited = time.monotonic() - t0
        assert not stalled["acknowledged"] and stalled["sequence"] == 6
        assert waited < TIMEOUT_S + 2.0, waited
        assert "NOT acknowledged" in stalled["text"] and "in doubt" in stalled["text"]
        assert "may still commit later" in stalled["text"]
        st = panel.state()
        assert st["in_doubt"] == [stalled["event_id"]] and st["unacknowledged"] == 1 and st["head"] == 5
        # while #6 is in doubt the trajectory does not move past it
        behind = panel.append()
        assert not behind["acknowledged"] and "NOT sent" in behind["text"]

        # resume: a majority is back, the in-doubt event lands (deduplicated or written once), nothing lost
        panel.resume(paused)
        st = panel.state()
        assert st["in_doubt"] == [] and st["resolved_later"] == 1 and st["head"] == 6
        assert stalled["event_id"] in st["acknowledged_event_ids"]
        assert st["check"]["ok"] is True
        landed = panel.append()
        assert landed["acknowledged"] and landed["sequence"] == 7

        # restart the killed member on its own data: every acknowledged event is present, in order
        panel.restart(leader)
        st = panel.state()
        assert [m["state"] for m in st["members"]] == ["running"] * 3
        check = st["check"]
        assert check["ok"] is True and check["acknowledged"] == 7 and check["missing"] == [] and check["head"] == 7
        assert "all 7 acknowledged events present" in panel.check
        assert (st["acknowledged"], st["unacknowledged"]) == (6, 2)
        pids = list(panel.pids)
        assert len(pids) == 4                     # three started, one restarted
    finally:
        panel.stop()
    assert all(process_gone(p) for p in pids), pids
    assert _etcd_processes_under(work_dir) == [] and not Path(work_dir).exists()
    assert not panel.state()["running"] and "none left running" in panel.status


def test_bad_input_is_a_typed_error_from_python():
    panel = ReplicationPanel(append_timeout_s=TIMEOUT_S)
    try:
        with pytest.raises(ClusterNotRunningError, match="start it first"):
            panel.append()
        with pytest.raises(ClusterNotRunningError):
            panel.kill(0)
        panel.start()
        with pytest.raises(ClusterRunningError):
            panel.start()
        for bad in (3, -1, "m7", True, None, 1.0):
            with pytest.raises(UnknownMemberError):
                panel.kill(bad)
        with pytest.raises(MemberStateError, match="already running"):
            panel.restart("m1")
        with pytest.raises(MemberStateError, match="not paused"):
            panel.resume(1)
        panel.destroy_volume("m2")
        with pytest.raises(MemberStateError, match="volume was destroyed"):
            panel.restart("m2")
        with pytest.raises(MemberStateError, match="only a running member"):
            panel.pause("m2")
        assert panel.append()["acknowledged"]          # two of three still commit
        pids = list(panel.pids)
    finally:
        panel.stop()
    assert all(process_gone(p) for p in pids)
    assert issubclass(UnknownMemberError, ConfigError) and issubclass(MemberStateError, KernelError)
    with pytest.raises(ConfigError):
        ReplicationPanel(append_timeout_s=0)
    with pytest.raises(ConfigError):
        ReplicationPanel(members=0)


def test_buttons_reach_the_same_steps_and_bad_input_is_a_message():
    w = ReplicationPanel(append_timeout_s=TIMEOUT_S)
    try:
        w.command = {"action": "append", "n": 1}
        assert "start it first" in w.error and w.completed == 1 and not w.busy
        w.command = {"action": "start", "n": 2}
        assert w.error == "" and [m["state"] for m in w.members] == ["running"] * 3
        w.command = {"action": "append", "n": 3}
        assert w.error == "" and w.head == 1 and w.counts["acknowledged"] == 1
        assert w.outcomes[-1]["kind"] == "acknowledged" and "acknowledged in" in w.outcomes[-1]["text"]
        w.command = {"action": "kill", "member": "m9", "n": 4}
        assert "no member 'm9'" in w.error
        w.command = {"action": "restart", "member": "m0", "n": 5}
        assert "already running" in w.error
        w.command = {"action": "destroy_volume", "member": "m0", "n": 6}
        assert w.error == "" and w.members[0]["state"] == "destroyed"
        w.command = {"action": "restart", "member": "m0", "n": 7}
        assert "volume was destroyed" in w.error
        w.command = {"action": "explode", "n": 8}
        assert "unknown action" in w.error
        for _n, bad in enumerate(["x", None, [1], {"action": None}, {"n": 3}], start=9):
            w.command = bad
            assert "malformed command" in w.error
        w.command = {"action": "kill", "member": "Z" * 100_000, "n": 20}
        assert "no member" in w.error and len(w.error) < 800          # huge input is cut, not echoed
        w.command = {"action": "start", "n": 21}
        assert "already running" in w.error
        pids = list(w.pids)
    finally:
        w.close()
    assert all(process_gone(p) for p in pids)
    assert "none left running" in w.status


def test_an_interpreter_that_exits_without_stop_takes_its_members_with_it(tmp_path):
    """A kernel that exits (here: a child interpreter that never calls stop) leaves no etcd behind."""
    script = ("import json\nfrom widgets.replication import ReplicationPanel\n"
              "p = ReplicationPanel(); p.start(); p.append()\n"
              "print(json.dumps({'pids': p.pids, 'work_dir': str(p.cluster.work_dir)}))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr[-2000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(process_gone(p) for p in info["pids"]):
        time.sleep(0.1)
    assert info["pids"] and all(process_gone(p) for p in info["pids"])
    assert _etcd_processes_under(Path(info["work_dir"])) == []


# --- one real browser: JupyterLab renders the panel, a student clicks start then append -------------------------
@pytest.mark.browser
def test_replication_panel_in_jupyterlab_acknowledges_an_append(lab, browser):
    import nbformat

    from tests.browser_support import _ERROR_OUTPUTS, _KERNEL_IDLE

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# replication panel"),
        nbformat.v4.new_code_cell("from widgets import ReplicationPanel\npanel = ReplicationPanel()\npanel")],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
    nbformat.write(nb, lab.root / "notebooks" / "replication_panel.ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    pids: list[int] = []
    try:
        page.goto(lab.tree("notebooks/replication_panel.ipynb"))
        page.wait_for_function("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                               " return !!w && !!w.context && w.context.path.endsWith('replication_panel.ipynb'); }",
                               timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        panel = page.locator(".dal-replication").first
        panel.wait_for(state="visible", timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []

        def click(action: str) -> None:
            before = int(panel.get_attribute("data-completed") or 0)
            panel.locator(f"button[data-action={action}]").click()
            page.wait_for_function("([el, before]) => Number(el.dataset.completed) > before",
                                   arg=[panel.element_handle(), before], timeout=120_000)

        click("start")
        assert panel.locator(".dal-error").inner_text().strip() == ""
        rows = panel.locator(".dal-members tr[data-member]")
        assert rows.count() == 3
        pids = [int(rows.nth(i).locator("td").nth(2).inner_text()) for i in range(3)]
        # start waits leader_wait_s for the election; on a loaded machine it can take longer, and
        # the panel then shows no leader until it is asked again (its refresh button)
        for _ in range(10):
            if "★ leader" in panel.locator(".dal-members").inner_text():
                break
            page.wait_for_timeout(500)
            click("refresh")
        assert "★ leader" in panel.locator(".dal-members").inner_text()

        click("append")
        line = panel.locator(".dal-outcomes li.dal-acknowledged").last
        line.wait_for(state="visible", timeout=30_000)
        assert "event #1 (TaskStarted) acknowledged in" in line.inner_text() and "ms (measured)" in line.inner_text()
        assert "appends acknowledged: 1" in panel.locator(".dal-counts").inner_text()
        assert "#1" in panel.locator(".dal-head").inner_text()
        if os.environ.get("DAL_SCREENSHOT_DIR"):      # for a person who wants to look
            panel.scroll_into_view_if_needed()
            page.screenshot(path=str(Path(os.environ["DAL_SCREENSHOT_DIR"]) / "replication_panel.png"))

        click("stop")
        assert "none left running" in panel.locator(".dal-status").inner_text()
        assert pids and all(process_gone(p) for p in pids)
    finally:
        page.close()
        for p in pids:                      # never leave a member behind, even if an assertion failed
            if not process_gone(p):
                try:
                    os.kill(p, 9)
                except ProcessLookupError:
                    pass
