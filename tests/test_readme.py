"""The README's quickstart runs and prints what it says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_block_runs(tmp_path):
    text = (ROOT / "README.md").read_text()
    code = re.search(r"## Quickstart.*?```python\n(.*?)```", text, re.S).group(1)
    code = code.replace("tempfile.mkdtemp()", repr(str(tmp_path)))
    assert repr(str(tmp_path)) in code, "the quickstart no longer writes under tempfile.mkdtemp()"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README quickstart", "exec"), {})
    assert out.getvalue().strip() == "['test_r18'] 0.5"


def test_readme_gives_exactly_two_set_up_commands():
    text = (ROOT / "README.md").read_text()
    section = text.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```\n(.*?)\n```", section) == ["make lab", "make test"]
