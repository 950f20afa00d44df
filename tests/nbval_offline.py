"""pytest plugin for the nbval runs of tests/test_notebooks.py (loaded with ``-p tests.nbval_offline``).

nbval already fails a notebook whose cell raises; this adds the offline check to the same run, so
each notebook is executed once for both: a cell whose executed outputs would need the internet to
display (a chart that loads Vega from a CDN, see :func:`tests.helpers.network_dependent_outputs`)
fails, whether or not the cell is tagged ``nbval-check-output``.
"""

from __future__ import annotations

import nbformat
import pytest

from tests.helpers import network_dependent_outputs

NEEDS_INTERNET = "outputs that would need the internet to display (the course machine is offline)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or report.failed:
        return
    outputs = getattr(item, "test_outputs", None)      # nbval's IPyNbCell keeps what the kernel sent
    if not outputs:
        return
    cell = nbformat.v4.new_code_cell("", outputs=[nbformat.from_dict(dict(o)) for o in outputs])
    found = network_dependent_outputs(nbformat.v4.new_notebook(cells=[cell]))
    if found:
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid}: {NEEDS_INTERNET}:\n" + "\n".join(found)
