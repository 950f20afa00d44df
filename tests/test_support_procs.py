"""kernel_lib._support.procs: waiting until a SIGSTOPped process has really stopped.

Fault model: ``kill(pid, SIGSTOP)`` returns once the signal is queued; threads running on another
CPU can still finish a request (an etcd member paused "as a partition" answered one more write on
a loaded CI run). Goal: after ``wait_all_threads_stopped`` returns True, every thread is stopped;
it returns False for a running or vanished process instead of hanging.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from kernel_lib._support.procs import process_state_path, wait_all_threads_stopped

_BUSY_THREADS = ("import threading, time\n"
                 "def spin():\n    while True:\n        sum(range(1000))\n"
                 "for _ in range(4):\n    threading.Thread(target=spin, daemon=True).start()\n"
                 "time.sleep(60)\n")


def test_a_stopped_multithreaded_process_is_seen_stopped_and_a_running_one_is_not():
    proc = subprocess.Popen([sys.executable, "-c", _BUSY_THREADS])
    try:
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{proc.pid}/task")) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert wait_all_threads_stopped(proc.pid, timeout_s=0.2) is False   # running: times out, no hang
        os.kill(proc.pid, signal.SIGSTOP)
        assert wait_all_threads_stopped(proc.pid) is True
        tasks = os.listdir(f"/proc/{proc.pid}/task")
        assert len(tasks) >= 5
        assert {process_state_path(f"/proc/{proc.pid}/task/{t}/stat") for t in tasks} <= {"T", "t"}
    finally:
        proc.kill()
        proc.wait()
    assert wait_all_threads_stopped(proc.pid, timeout_s=0.1) is False   # gone


def test_unreadable_stat_gives_none():
    assert process_state_path("/proc/0/definitely/not/here") is None
