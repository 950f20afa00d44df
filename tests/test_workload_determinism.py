"""A recorded crash workload is the same every run.

Situation: the checkpoint-capture workload (``crashcheck --workload checkpoint-capture``, notebook
11.4's crash-state cell) retires a delta chain, which writes a tombstone carrying a clock reading.
Fault model: a wall-clock reading changes the tombstone's bytes, so its content address, the
directories created for it and the number of recorded file operations vary between runs (the
notebook's stored "147 file operations … 80 distinct states" was sometimes 146/81). Invariant:
recording the workload twice gives byte-identical operations. Goal: its crash-state figures are
reproducible, and nbval can compare them.
"""

from kernel_lib.verify.checkpoint_workload import explore, record_workload


def test_recording_the_capture_workload_twice_gives_the_same_operations():
    first, second = record_workload(0), record_workload(0)
    assert [(o.kind, o.path, o.data) for o in first.ops] == [(o.kind, o.path, o.data) for o in second.ops]


def test_its_crash_state_figures_repeat():
    a, b = explore(0, max_states=40), explore(0, max_states=40)
    assert (a.ops, a.states_generated, a.states_explored) == (b.ops, b.states_generated, b.states_explored)
