"""The log scrubber as a marimo app: `marimo run apps/scrubber.py` (from the project root).

Slide through a recorded trajectory and see the record a replacement worker would fold at each
log position (§11.2.1); operations in doubt are highlighted. Set LOG to any log kernel_lib can
read (a .jsonl file of canonical events, a SQLite log, a segment-log directory).
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App()


@app.cell
def _():
    import os

    import marimo as mo

    from kernel_lib.log import load_events
    from kernel_lib.errors import KernelError
    from widgets.scrubber import LogScrubber

    here = os.path.dirname(os.path.abspath(__file__))
    LOG = os.environ.get("SCRUBBER_LOG", os.path.join(here, "..", "datasets", "worksheet_r18_example.jsonl"))
    try:
        events, load_error = load_events(LOG), None
    except (KernelError, OSError) as exc:   # a missing, corrupt or foreign log: say so on the page
        events, load_error = [], f"{type(exc).__name__}: {exc}"
    return LOG, LogScrubber, events, load_error, mo


@app.cell
def _(LOG, LogScrubber, events, load_error, mo):
    title = mo.md("### Log scrubber: the record at each log position (§11.2.1)")
    if load_error:
        scrubber = None
        page = mo.vstack([title, mo.callout(mo.md(f"**Cannot load `{LOG}`.** {load_error}\n\n"
                                                  "Set `SCRUBBER_LOG` to a `.jsonl` file of canonical events, "
                                                  "a SQLite log or a segment-log directory."), kind="danger")])
    else:
        scrubber = mo.ui.anywidget(LogScrubber(events, position=0))
        page = mo.vstack([title, scrubber])
    page  # noqa: B018  marimo displays a cell's last expression
    return (scrubber,)


if __name__ == "__main__":
    app.run()
