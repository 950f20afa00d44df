"""The command line's usage errors name the command that refused them (issue 15, newcomer report:
``bench restore --quick`` printed the top-level usage), and ``--quick`` smoke runs exist for the
read and restore benchmarks."""

from __future__ import annotations

import json

import pytest

from kernel_lib.cli import main


@pytest.mark.parametrize("argv, usage", [
    (["bench", "restore", "--bogus"], "python -m kernel_lib bench restore"),
    (["bench", "read", "--events", "10", "--nope"], "python -m kernel_lib bench read"),
    (["saga", "sweep", "--zz"], "python -m kernel_lib saga sweep"),
])
def test_unknown_option_is_reported_by_the_command_that_refuses_it(argv, usage, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"{usage}: error: unrecognized arguments: {argv[-1]}" in err
    assert err.startswith(f"usage: {usage}")


def test_quick_read_bench_reports_its_own_size(capsys):
    assert main(["bench", "read", "--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["targets"]
    assert "5000 events" in row["name"] and row["measured"] > 0


def test_quick_restore_bench_leaves_the_100k_targets_unmeasured(capsys):
    assert main(["bench", "restore", "--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["targets"] and all(t["passed"] is None for t in out["targets"])


def test_ctrl_c_in_a_command_exits_130_with_one_line_and_no_traceback(monkeypatch, capsys):
    """Adversarial review (issue 20): Ctrl-C of `fleet run`, `scorecard --live` or `exercise measure`
    cleaned up its processes but printed a raw KeyboardInterrupt traceback."""
    import kernel_lib.cli.figure5 as fig5_cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(fig5_cli, "_cmd_figure5", interrupted)
    assert main(["figure5"]) == 130
    err = capsys.readouterr().err
    assert err.startswith("interrupted") and "Traceback" not in err and len(err.strip().splitlines()) == 1
