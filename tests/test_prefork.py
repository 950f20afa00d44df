"""Children forked from a preloaded server (kernel_lib._support.prefork), as the live sweeps start
their workers, executors and recovery processes.

Fault model: the controller that started the fork server is killed with SIGKILL while a forked
helper runs; a helper is killed with SIGKILL; a helper fails. Invariant: a forked helper is a process
of its own (its own pid and session), its exit status reads as subprocess's does (-9 for SIGKILL),
and the orphan watch of the live helpers sees its controller go even though the helper's parent is
the fork server. Goal: the sweeps' speed-up leaves no process behind and hides no failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kernel_lib._support.prefork import PreforkLauncher
from kernel_lib.live.orphan import parent_env
from tests.helpers import process_gone

ROOT = Path(__file__).resolve().parents[1]


def _wait_for(path: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_a_forked_child_is_its_own_process_and_reports_exits_like_subprocess(tmp_path):
    launch = PreforkLauncher(["kernel_lib.live.orphan"])
    assert launch.forks
    out, err = tmp_path / "out", tmp_path / "err"
    proc = launch.popen("tests.orphan_child", [str(tmp_path)], stdout=out, stderr=err, env=parent_env())
    _wait_for(tmp_path / "started")
    assert proc.pid == int((tmp_path / "started").read_text()) != os.getpid()
    assert os.getsid(proc.pid) == proc.pid and proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    # a child that fails says so by its status and its stderr
    bad = launch.run("kernel_lib.live.saga_worker", ["--store", "nope"], stdout=out, stderr=err, timeout_s=60)
    assert bad == 2 and "invalid choice" in err.read_text()


def test_a_forked_helper_leaves_when_its_controller_is_sigkilled(tmp_path):
    code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from pathlib import Path\n"
        "from kernel_lib._support.prefork import PreforkLauncher\n"
        "from kernel_lib.live.orphan import parent_env\n"
        f"folder = Path({str(tmp_path)!r})\n"
        "p = PreforkLauncher(['kernel_lib.live.orphan']).popen('tests.orphan_child', [str(folder)],\n"
        "    stdout=folder / 'out', stderr=folder / 'err', env=parent_env())\n"
        "time.sleep(120)\n")
    controller = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, start_new_session=True)
    try:
        _wait_for(tmp_path / "still-running")   # not orphaned while the controller lives
        child = int((tmp_path / "started").read_text())
        assert not process_gone(child)
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait(timeout=10)
        deadline = time.monotonic() + 15
        while not process_gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_gone(child), "the forked helper outlived its controller"
    finally:
        if controller.poll() is None:
            controller.kill()
        if (tmp_path / "started").exists():
            pid = int((tmp_path / "started").read_text())
            if not process_gone(pid):
                os.kill(pid, signal.SIGKILL)
