"""The log scrubber as a marimo app: `marimo run apps/scrubber.py` (from the project root).

Slide through a recorded trajectory and see the record a replacement worker would fold at each
log position (§11.2.1); operations in doubt are highlighted. The page says what to do and what to
notice (the durable intent, the job handle, the settled result and budget). Set LOG to any log kernel_lib can
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
    guide = mo.md(
        "**What to do.** Drag the slider, or click it and use the arrow keys: position *n* means the "
        "first *n* events of the log have been folded, as a replacement worker would fold them after a "
        "crash at that point.\n\n"
        "**What to notice.**\n\n"
        "- Stop where the last event is `ToolIntent`: the test run is written down before it is sent, so "
        "its row turns yellow, *in doubt*. A worker that crashed here cannot tell whether the job started.\n"
        "- One step on, `ToolResult` with status accepted: the row now has a job handle, still no outcome. "
        "The handle is what lets the new worker ask the executor instead of running the tests again.\n"
        "- The next `ToolResult` (completed) settles the doubt; only the `BudgetSettled` after it "
        "releases the money held for the call in the budget line: evidence and money are separate events.\n"
        "- The model call is in doubt too, between `ContextBuilt` and `ModelReplied`.\n"
        "- Move back and forth: the same position always shows the same record (the fold reads only the log).")
    if load_error:
        scrubber = None
        page = mo.vstack([title, mo.callout(mo.md(f"**Cannot load `{LOG}`.** {load_error}\n\n"
                                                  "Set `SCRUBBER_LOG` to a `.jsonl` file of canonical events, "
                                                  "a SQLite log or a segment-log directory."), kind="danger")])
    else:
        scrubber = mo.ui.anywidget(LogScrubber(events, position=0))
        page = mo.vstack([title, guide, scrubber])
    page  # noqa: B018  marimo displays a cell's last expression
    return (scrubber,)


if __name__ == "__main__":
    app.run()
