"""A helper body for tests/test_prefork.py: watches its controller like the live helpers do
(kernel_lib.live.orphan), says it started, and waits to be orphaned."""

from __future__ import annotations

import os
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from kernel_lib.live.orphan import watch_parent

    folder = Path(argv[0])
    watch_parent(lambda: os._exit(70), interval_s=0.05)
    (folder / "started").write_text(str(os.getpid()))
    time.sleep(0.5)
    (folder / "still-running").write_text("1")   # the watch did not fire while the controller lived
    time.sleep(120)
    return 0
