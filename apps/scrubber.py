"""The log scrubber as a marimo app: `marimo run apps/scrubber.py` (from the project root).

Slide through a recorded trajectory and see the record a replacement worker would fold at each
log position (§11.2.1); operations in doubt are highlighted. Set LOG to any log kernel_lib can
read (a .jsonl file of canonical events, a SQLite log, a segment-log directory).
"""

import marimo

app = marimo.App()


@app.cell
def _():
    import os

    import marimo as mo

    from kernel_lib.cli import load_events
    from widgets.scrubber import LogScrubber

    here = os.path.dirname(os.path.abspath(__file__))
    LOG = os.environ.get("SCRUBBER_LOG", os.path.join(here, "..", "datasets", "worksheet_r18_example.jsonl"))
    events = load_events(LOG)
    return LogScrubber, events, mo


@app.cell
def _(LogScrubber, events, mo):
    scrubber = mo.ui.anywidget(LogScrubber(events, position=0))
    mo.vstack([mo.md("### Log scrubber: the record at each log position (§11.2.1)"), scrubber])
    return (scrubber,)


if __name__ == "__main__":
    app.run()
