"""SWE-agent importer: a history that skips a step is re-aligned by content (§11.6, §11.7.1; issue 14).

Fault model: SWE-agent's ``history`` leaves out one step of ``trajectory`` (a history processor
dropped it, the file was trimmed, a step was retried outside the chat). The old reader paired
step k with the k-th assistant message by position, so from the skipped step on every turn met
the wrong message and was marked not-recorded.

Invariant: the steps and the history's assistant messages are paired by content; a message the
history leaves out costs exactly one step (the skipped one, or an identical neighbour when the
content cannot tell them apart), and every other turn's delivered input is the history before
the message that records that very step.

Goal: the turns after a gap keep their delivered input, so replay and divergence work over
them (§11.7.1) instead of treating the whole tail as unknown.

The real files are read in place from ../shared/data/trajectories/swe-agent/; the altered
copies are written to the test's own tmp_path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_lib.importers import import_file
from kernel_lib.importers._common import canonical_text
from kernel_lib.importers.swe_agent import align_steps

SWE = Path(__file__).resolve().parents[2] / "shared" / "data" / "trajectories" / "swe-agent"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} not found (the shared data directory beside the project)")
    return path


def _files_with_steps() -> list[Path]:
    if not SWE.is_dir():
        return []
    return [f for f in sorted(SWE.glob("*.traj")) if json.loads(f.read_bytes()).get("trajectory")]


def _assistant_at(history: list) -> list[int]:
    return [j for j, m in enumerate(history) if m["role"] == "assistant" and not m.get("is_demo")]


def _skip_step(raw: dict, p: int) -> dict:
    """``raw`` with the p-th assistant message of its history removed, together with the messages
    that answer it (up to the next assistant message): the history skips that step."""
    hist = raw["history"]
    at = _assistant_at(hist) + [len(hist)]
    out = dict(raw)
    out["history"] = hist[:at[p]] + hist[at[p + 1]:] if p + 1 < len(at) - 1 else hist[:at[p]]
    return out


def _not_recorded(r) -> set[int]:
    return {int(e.payload.invocation_id.removeprefix("turn-")) for e in r.events
            if e.payload.event_type == "ContextBuilt" and e.payload.delivered_input is None}


def _check_delivered(r, raw: dict) -> None:
    """Every turn with a delivered input holds the history before an assistant message that records
    that turn's own step, and the messages so chosen go forward with the steps."""
    hist, steps = raw["history"], raw["trajectory"]
    last = -1
    for e in r.events:
        if e.payload.event_type != "ContextBuilt" or e.payload.delivered_input is None:
            continue
        k = int(e.payload.invocation_id.removeprefix("turn-"))
        j = len(json.loads(e.payload.delivered_input)["messages"])
        assert e.payload.delivered_input == canonical_text({"messages": hist[:j]})
        m = hist[j]
        assert m["role"] == "assistant" and m["action"].strip() == steps[k]["action"].strip()
        assert j > last
        last = j


def _write(tmp_path: Path, doc: dict, name: str) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_real_file_with_a_skipped_step_marks_only_that_step(tmp_path):
    """pydicom: the history skips step 3; only turn 3 is not-recorded, turns 4.. keep their input."""
    src = _need(SWE / "pydicom__pydicom-1458.traj")
    raw = json.loads(src.read_bytes())
    assert _not_recorded(import_file("swe-agent", src)) == set()
    cut = _skip_step(raw, 3)
    r = import_file("swe-agent", _write(tmp_path, cut, src.name))
    assert _not_recorded(r) == {3}
    _check_delivered(r, cut)
    # the turns after the gap match the same messages as in the untouched file
    hist_at = _assistant_at(cut["history"])
    for k in range(4, len(raw["trajectory"])):
        ctx = next(e.payload for e in r.events if e.payload.event_type == "ContextBuilt"
                   and e.payload.invocation_id == f"turn-{k:04d}")
        assert ctx.delivered_input == canonical_text({"messages": cut["history"][:hist_at[k - 1]]})
    [note] = r.notes["delivered_input_not_recorded"]
    assert note["invocation_id"] == "turn-0003"


@pytest.mark.parametrize("path", _files_with_steps() or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"no SWE-agent trajectories under {SWE}"))], ids=lambda p: p.name if p else "none")
def test_removing_any_one_step_marks_exactly_that_step(tmp_path, path):
    """Every real file, every step the untouched file pairs: removing it from the history adds
    exactly one not-recorded turn, with the removed step's content, and nothing else changes."""
    raw = json.loads(path.read_bytes())
    base = _not_recorded(import_file("swe-agent", path))
    steps = raw["trajectory"]
    n_msgs = len(_assistant_at(raw["history"]))
    assert n_msgs >= 1
    for p in range(min(n_msgs, len(steps))):
        if p in base:
            continue
        cut = _skip_step(raw, p)
        r = import_file("swe-agent", _write(tmp_path, cut, f"cut{p}.traj"))
        added = _not_recorded(r) - base
        assert len(added) == 1 and base <= _not_recorded(r), (p, sorted(_not_recorded(r)))
        [k] = added
        same = lambda a, b: (a["action"].strip(), a["response"].strip()) == (b["action"].strip(), b["response"].strip())
        assert k == p or same(steps[k], steps[p]), (p, k)
        _check_delivered(r, cut)


# --- the alignment itself ------------------------------------------------------------------------

#: steps drawn from few actions and few replies, so repeats (same action, other reply; or both the
#: same, like ctf_crypto_eps's repeated submits) are common
STEPS = st.lists(st.tuples(st.sampled_from(["ls", "cat a", "submit flag"]), st.sampled_from(["", "r1", "r2"])),
                 min_size=1, max_size=14)


@given(steps=STEPS, with_action=st.booleans(), data=st.data())
def test_align_steps_loses_exactly_the_skipped_step(steps, with_action, data):
    """Any step sequence (repeats included), any one message removed, messages with or without an
    action: exactly one step is left unpaired, it has the removed step's content, and the pairing
    is order-preserving and pairs each remaining message with a step of its own content."""
    p = data.draw(st.integers(0, len(steps) - 1))
    msgs = [(a if with_action else None, r) for i, (a, r) in enumerate(steps) if i != p]
    out = align_steps(steps, msgs)
    seen = (lambda s: s) if with_action else (lambda s: (None, s[1]))   # what a message can show of a step
    missing = [k for k, j in enumerate(out) if j is None]
    assert len(missing) == 1 and seen(steps[missing[0]]) == seen(steps[p])
    paired = [(k, j) for k, j in enumerate(out) if j is not None]
    assert [j for _, j in paired] == list(range(len(msgs)))
    assert all(seen(steps[k]) == msgs[j] for k, j in paired)


@given(steps=STEPS)
def test_align_steps_pairs_an_intact_history_by_position(steps):
    assert align_steps(steps, [(a, r) for a, r in steps]) == list(range(len(steps)))
