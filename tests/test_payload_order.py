"""The write-order experiment of §11.8.2 with a real SIGKILL (kernel_lib.live.payload_order).

Fault model: the worker process is killed (SIGKILL) between the two writes of one turn. Invariant: in the
reference-first order the log ends with an event naming bytes that never arrived; in the payload-first
order every logged event's bytes are present and the only residue is a payload no event names.
"""

from __future__ import annotations

import pytest

from kernel_lib.errors import ConfigError
from kernel_lib.live.payload_order import GAP_TURN, kill_in_write_gap, main


@pytest.mark.parametrize("order, events, dangling, orphans", [("reference-first", GAP_TURN, 1, 0),
                                                              ("payload-first", GAP_TURN - 1, 0, 1)])
def test_a_kill_in_the_gap_leaves_what_the_write_order_allows(tmp_path, order, events, dangling, orphans):
    run = kill_in_write_gap(tmp_path / order, order, kill_window_s=0.5)
    try:
        assert run.summary == {"order": order, "exit signal": 9, "events in the log": events,
                               "events naming missing bytes": dangling, "stored payloads no event names": orphans}
        assert run.store.head("w") == events
    finally:
        run.store.close()


def test_bad_input_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError):
        kill_in_write_gap(tmp_path / "x", "sideways")
    with pytest.raises(ConfigError):
        kill_in_write_gap(tmp_path / "x", "payload-first", kill_window_s=0)
    (tmp_path / "used").mkdir()
    with pytest.raises(ConfigError, match="already exists"):
        kill_in_write_gap(tmp_path / "used", "payload-first")
    assert main(["only-one-arg"]) == 2
