"""Real failure data: LANL failure records, their inter-arrival times, MTBF, and the cadence they imply
(§11.4.3 theorem 11.1, eq. 4, with the measured MTBF in place of an assumed one).

The Los Alamos failure data (1996-2005) come as one CSV per system, one row per failure, with the
columns described in the data set's README: ``System``, ``nodes``, ``nodenum``/``nodenumz`` (node
number, from 1 / from 0), ``Prob Started`` and ``Prob Fixed`` (``m/d/yyyy H:MM``; the README also
allows two-digit years), ``Down Time`` (minutes), blame categories (``Facilities``, ``Hardware``,
``Human Error``, ``Network``, ``Undetermined``, ``Software``) and ``Same Event`` (whether the row
is related to an event already recorded). The data are not part of this repository; pass the path.

:func:`load_lanl` reads any file of that format with polars and is strict about what it keeps:

* header names are matched after trimming, case folding and collapsing whitespace; a missing
  required column (system, start time) raises :class:`~kernel_lib.errors.FailureDataError`;
* node numbers are optional: of the node columns present (``nodenumz`` preferred, then ``nodenum``)
  the first that holds any value is used; a row with an empty node cell is kept with a null node.
  When no row names a node (the columns are empty or absent), the system-level figures (MTBF,
  inter-arrival times, the Poisson check, the whole-system cadence) are computed as usual and the
  node-level analysis is skipped with a note (:attr:`FailureRecords.node_level`,
  :attr:`LanlAnalysis.notes`); rows without a node are left out of the node-level figures only;
* blank lines are counted and ignored; stray whitespace around values is trimmed;
* a malformed row is either skipped and listed with its file line and reason (``errors="skip"``,
  the default) or raises FailureDataError naming the line (``errors="raise"``); line numbers assume
  no quoted field spans lines. Malformed means: an unparseable start time, or one outside the
  accepted window (see below); a node number that is given but is not an integer >= 0; a ``nodes`` count that is
  given but is not a whole number >= 1; a down time that is given but is not a finite number of
  minutes >= 0 (``nan``, ``inf`` and overflowing values such as ``1e400`` are malformed); more
  fields than the header; an unknown ``Same Event`` value;
* dates: ``m/d/yyyy H:MM[:SS]`` or ``m/d/yy H:MM[:SS]``. A two-digit year is read with the pivot
  :data:`TWO_DIGIT_YEAR_PIVOT` = 70: 70-99 are 1970-1999 and 00-69 are 2000-2069 (the records span
  1996-2005). Any date must fall in the window from :data:`EARLIEST_YEAR` (1970-01-01) to the
  time of loading (plus a day for time zones): a start time outside it makes the row malformed
  (so ``1/5/69`` reads as 2069 and is refused as in the future, as is ``1/5/2105``);
* a missing, unparseable or out-of-window fix time is allowed (the start time is what arrivals
  need) and counted, as is a fix time earlier than the start (which is then dropped);
* a file that polars cannot parse as CSV (typically a quote that is never closed) raises
  FailureDataError with a one-line reason and, for an unclosed quote, the line where it opens;
* rows identical in every field are treated as one failure entered twice: kept once, counted;
* rows flagged ``Same Event`` are kept in the frame but left out of arrivals by default, because
  they restate a failure already counted.

:func:`arrival_stats` gives inter-arrival times and MTBF for a system or one node;
:func:`poisson_check` asks whether the gaps look exponential (coefficient of variation; KS test with
the rate estimated from the same gaps, calibrated by a parametric bootstrap);
:func:`replay_interval` charges a checkpoint interval against the real failure times; and
:func:`analyze_lanl` puts it together per system and per node.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import polars as pl

from kernel_lib.errors import CadenceParameterError, FailureDataError
import kernel_lib.cadence.formulas as f

# --- reading -------------------------------------------------------------------------------------

_ALIASES: dict[str, tuple[str, ...]] = {
    "system": ("system",),
    "node": ("nodenumz", "node number starting with zero", "nodenum", "node number", "node"),
    "nodes": ("nodes", "number of nodes"),
    "started": ("prob started", "problem started"),
    "fixed": ("prob fixed", "problem fixed"),
    "down_time_min": ("down time", "downtime"),
    "same_event": ("same event",),
}
_REQUIRED = ("system", "started")
BLAME_CATEGORIES = ("facilities", "hardware", "human error", "network", "undetermined", "software")
_YES = ("yes", "y", "true", "1")
_NO = ("no", "n", "false", "0", "")
#: two-digit years below this are 20xx, the others 19xx (the data span 1996-2005)
TWO_DIGIT_YEAR_PIVOT = 70
#: no date before January 1 of this year is accepted (nor any after the time of loading)
EARLIEST_YEAR = 1970


def _norm_header(text: str | None) -> str:
    return re.sub(r"\s+", " ", (text or "").replace("\ufeff", "").strip().strip('"').strip()).lower()


@dataclass(frozen=True)
class SkippedRow:
    """A data row left out: its 1-based file line and why."""

    line: int
    reason: str


@dataclass(frozen=True)
class FailureRecords:
    """A loaded LANL failure file.

    Fields:
        path: the file read.
        frame: polars DataFrame, one row per kept failure, sorted by start time, columns
            ``line`` (u32 file line), ``system`` (i64), ``node`` (i64), ``nodes_in_system``
            (i64 or null), ``started`` and ``fixed`` (datetime, minute resolution; fixed may be null),
            ``down_time_min`` (f64 or null), ``blame`` (first non-empty blame category or null),
            ``blame_detail`` (its text), ``same_event`` (bool).
        node_column: which header supplied node numbers (``nodenumz`` preferred; the first node column
            holding any value), or None when no column names a node.
        rows_without_node: kept rows whose node cell is empty (node null in ``frame``).
        data_rows: non-blank data rows read. blank_lines: blank lines ignored.
        skipped: malformed rows left out. duplicates_dropped: repeated identical rows removed.
        same_event_rows: rows flagged Same Event. missing_fixed: rows with no usable fix time.
        fixed_before_started: rows whose fix time preceded the start (fix time dropped).
    """

    path: str
    frame: pl.DataFrame
    node_column: str | None
    data_rows: int
    blank_lines: int
    skipped: tuple[SkippedRow, ...]
    duplicates_dropped: int
    same_event_rows: int
    missing_fixed: int
    fixed_before_started: int
    rows_without_node: int = 0

    @property
    def node_level(self) -> bool:
        """Whether any kept row names its node (node-level analysis is possible)."""
        return self.rows_without_node < self.frame.height

    @property
    def systems(self) -> list[int]:
        return sorted(self.frame["system"].unique().to_list())

    def summary(self) -> dict[str, Any]:
        return {"path": self.path, "node_column": self.node_column, "rows_without_node": self.rows_without_node,
                "node_level": self.node_level, "data_rows": self.data_rows,
                "kept_rows": self.frame.height, "blank_lines": self.blank_lines, "skipped_rows": len(self.skipped),
                "skipped_examples": [asdict(s) for s in self.skipped[:10]],
                "duplicates_dropped": self.duplicates_dropped, "same_event_rows": self.same_event_rows,
                "missing_fixed": self.missing_fixed, "fixed_before_started": self.fixed_before_started,
                "systems": self.systems}


def _two_digit(lo: int, hi: int) -> str:
    """A regex alternative matching the two-digit numbers lo..hi."""
    return "(" + "|".join(f"{v:02d}" for v in range(lo, hi + 1)) + ")"


def _parse_time(col: pl.Expr) -> pl.Expr:
    """``m/d/yyyy H:MM[:SS]`` (or a two-digit year, see :data:`TWO_DIGIT_YEAR_PIVOT`) as a datetime;
    null when it does not parse."""
    s = col.str.strip_chars().str.replace_all(r"\s+", " ")
    s = s.str.replace(rf"^(\d{{1,2}}/\d{{1,2}}/){_two_digit(TWO_DIGIT_YEAR_PIVOT, 99)} ", "${1}19${2} ")
    s = s.str.replace(rf"^(\d{{1,2}}/\d{{1,2}}/){_two_digit(0, TWO_DIGIT_YEAR_PIVOT - 1)} ", "${1}20${2} ")
    shape = s.str.contains(r"^\d{1,2}/\d{1,2}/\d{4} \d{1,2}:\d{2}(:\d{2})?$")
    secs = s.str.contains(r":\d{2}:\d{2}$")
    parsed = (pl.when(secs).then(s.str.strptime(pl.Datetime("us"), "%m/%d/%Y %H:%M:%S", strict=False))
              .otherwise(s.str.strptime(pl.Datetime("us"), "%m/%d/%Y %H:%M", strict=False)))
    return pl.when(shape.fill_null(False)).then(parsed).otherwise(None)


def _unclosed_quote_line(path: Path) -> int | None:
    """The 1-based line where a double quote opens a field that the file never closes, or None.
    Quotes are tracked across lines the way CSV reads them (``""`` inside a quoted field is an
    escaped quote and toggles twice)."""
    open_line = None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, text in enumerate(fh, start=1):
            for ch in text:
                if ch == '"':
                    open_line = number if open_line is None else None
    return open_line


def _unreadable(path: Path, where: str, exc: Exception) -> FailureDataError:
    """A one-line FailureDataError for a file polars could not parse (its messages quote whole
    stretches of the file over many lines)."""
    if isinstance(exc, OSError):
        return FailureDataError(f"not readable: {exc.strerror or type(exc).__name__}", path=where)
    line = _unclosed_quote_line(path)
    if line is not None:
        return FailureDataError("not readable as CSV: a double quote opens a field here and is never closed",
                                path=where, line=line)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    first = first if len(first) <= 120 else first[:117] + "..."
    return FailureDataError(f"not readable as CSV ({type(exc).__name__}: {first})", path=where)


def load_lanl(path: str | Path, *, errors: Literal["skip", "raise"] = "skip") -> FailureRecords:
    """Read one LANL failure-record CSV (see the module docstring for what is kept and what is not).

    Args:
        path: the CSV file (e.g. ``../shared/data/failures/lanl/system20.csv``).
        errors: ``"skip"`` leaves malformed rows out and lists them in ``skipped``; ``"raise"``
            raises on the first one.

    Raises:
        FailureDataError: the file is missing or a directory, unreadable as CSV (a one-line reason;
            an unclosed quote names its line), has no header or lacks a required column, holds no
            usable row, or (``errors="raise"``) a row is malformed (``line`` set).
        CadenceParameterError: ``errors`` is neither "skip" nor "raise".
    """
    if errors not in ("skip", "raise"):
        raise CadenceParameterError(f"errors must be 'skip' or 'raise', got {errors!r}", name="errors")
    p = Path(path)
    where = str(path)
    if p.is_dir():
        raise FailureDataError("is a directory, not a failure-record file", path=where)
    if not p.exists():
        raise FailureDataError("no such file", path=where)
    if not p.is_file():
        raise FailureDataError("is not a regular file", path=where)
    lead = 0   # blank lines before the header
    with open(p, "rb") as fh:
        for raw_line in fh:
            if raw_line.decode("utf-8", "replace").replace("\ufeff", "").strip():
                break
            lead += 1
    try:
        head = pl.read_csv(p, has_header=False, n_rows=1, infer_schema=False, encoding="utf8-lossy",
                           truncate_ragged_lines=True, skip_rows=lead)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise _unreadable(p, where, exc) from None
    if head.height == 0:
        raise FailureDataError("empty file: no header row", path=where)
    width = head.width
    names = [f"c{j}" for j in range(width + 1)]   # one extra column catches rows with too many fields
    try:
        raw = pl.read_csv(p, has_header=False, schema={n_: pl.String for n_ in names}, missing_columns="insert",
                          truncate_ragged_lines=True, encoding="utf8-lossy", row_index_name="row_index",
                          skip_rows=lead)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise _unreadable(p, where, exc) from None
    if raw.height == 0:
        raise FailureDataError("empty file: no header row", path=where)
    header = [_norm_header(v) for v in raw.row(0)[1:width + 1]]
    cols: dict[str, str] = {}
    for key, aliases in _ALIASES.items():
        if key == "node":
            continue
        for alias in aliases:
            if alias in header:
                cols[key] = f"c{header.index(alias)}"
                break
    node_candidates = [f"c{header.index(a_)}" for a_ in _ALIASES["node"] if a_ in header]
    missing = [k_ for k_ in _REQUIRED if k_ not in cols]
    if missing:
        raise FailureDataError(f"header lacks required column(s) {missing} (looked for "
                               f"{[_ALIASES[k_] for k_ in missing]}; found {header})", path=where, line=1 + lead)
    blame_cols = [(cat, f"c{header.index(cat)}") for cat in BLAME_CATEGORIES if cat in header]

    body = raw.slice(1).with_columns((pl.col("row_index") + 1 + lead).cast(pl.UInt32).alias("line"))
    value_cols = [f"c{j}" for j in range(width)]
    body = body.with_columns([pl.col(c).str.strip_chars() for c in names])
    blank = pl.all_horizontal([pl.col(c).is_null() | (pl.col(c) == "") for c in names])
    blank_lines = body.filter(blank).height
    body = body.filter(~blank)
    data_rows = body.height
    for c_ in node_candidates:   # the first node column that names any node; none: node-level analysis skipped
        if body.filter(pl.col(c_).fill_null("") != "").height:
            cols["node"] = c_
            break
    node_column = header[int(cols["node"][1:])] if "node" in cols else None
    node_text = pl.col(cols["node"]) if "node" in cols else pl.lit(None, dtype=pl.String)

    def col(key: str) -> pl.Expr:
        return pl.col(cols[key]) if key in cols else pl.lit(None, dtype=pl.String)

    same_text = col("same_event").fill_null("").str.to_lowercase()
    down_text = col("down_time_min")
    nodes_text = col("nodes")
    earliest = _dt.datetime(EARLIEST_YEAR, 1, 1)
    latest = _dt.datetime.now(_dt.UTC).replace(tzinfo=None) + _dt.timedelta(days=1)
    parsed = body.with_columns(
        system=pl.col(cols["system"]).str.to_integer(strict=False),
        node=node_text.str.to_integer(strict=False),
        nodes_in_system=nodes_text.str.to_integer(strict=False),
        started=_parse_time(pl.col(cols["started"])),
        fixed_raw=_parse_time(col("fixed")),
        down_time_min=down_text.cast(pl.Float64, strict=False),
        same_event=same_text.is_in(list(_YES)),
        blame=pl.coalesce([pl.when(pl.col(c).fill_null("") != "").then(pl.lit(cat)) for cat, c in blame_cols])
        if blame_cols else pl.lit(None, dtype=pl.String),
        blame_detail=pl.coalesce([pl.when(pl.col(c).fill_null("") != "").then(pl.col(c)) for _, c in blame_cols])
        if blame_cols else pl.lit(None, dtype=pl.String),
    )
    reason = (
        pl.when(pl.col(f"c{width}").is_not_null() & (pl.col(f"c{width}") != ""))
        .then(pl.lit(f"more fields than the header's {width}"))
        .when(pl.col("system").is_null())
        .then(pl.format("system {} is not an integer", pl.col(cols["system"]).fill_null("(empty)")))
        .when(node_text.fill_null("").ne("") & pl.col("node").is_null())
        .then(pl.format("node number {} is not an integer", node_text))
        .when(pl.col("node") < 0)
        .then(pl.format("node number {} is negative", node_text))
        .when(nodes_text.fill_null("").ne("") & (pl.col("nodes_in_system").is_null()
                                                 | (pl.col("nodes_in_system") < 1)))
        .then(pl.format("nodes {} is not a whole number of nodes >= 1", nodes_text))
        .when(pl.col("started").is_null())
        .then(pl.format("start time {} is not m/d/yyyy H:MM", pl.col(cols["started"]).fill_null("(empty)")))
        .when(~pl.col("started").is_between(pl.lit(earliest), pl.lit(latest)))
        .then(pl.format("start time {} reads as {}, outside {} .. today (two-digit years: {}-99 are 19xx, "
                        "00-{} are 20xx)", pl.col(cols["started"]), pl.col("started").dt.strftime("%Y-%m-%d %H:%M"),
                        pl.lit(f"{EARLIEST_YEAR}-01-01"), pl.lit(f"{TWO_DIGIT_YEAR_PIVOT:02d}"),
                        pl.lit(f"{TWO_DIGIT_YEAR_PIVOT - 1:02d}")))
        .when(down_text.fill_null("").ne("") & pl.col("down_time_min").is_null())
        .then(pl.format("down time {} is not a number of minutes", down_text))
        .when(~pl.col("down_time_min").is_finite())
        .then(pl.format("down time {} is not a finite number of minutes", down_text))
        .when(pl.col("down_time_min") < 0)
        .then(pl.format("down time {} is negative", down_text))
        .when(~same_text.is_in(list(_YES) + list(_NO)))
        .then(pl.format("Same Event value {} is neither yes nor no", col("same_event")))
        .otherwise(None)
    )
    parsed = parsed.with_columns(reason=reason).with_columns(   # a fix time outside the window is unusable
        fixed_raw=pl.when(pl.col("fixed_raw").is_between(pl.lit(earliest), pl.lit(latest)))
        .then(pl.col("fixed_raw")).otherwise(None))
    bad = parsed.filter(pl.col("reason").is_not_null()).select("line", "reason")
    if bad.height and errors == "raise":
        line, why = bad.row(0)
        raise FailureDataError(f"malformed row: {why}", path=where, line=int(line))
    skipped = tuple(SkippedRow(int(ln), str(r)) for ln, r in bad.iter_rows())
    good = parsed.filter(pl.col("reason").is_null())
    before = good.height
    # identical once parsed: compare parsed values where a column was parsed (so "9:00" and " 9:00 "
    # or "45" and "45.0" agree), the trimmed text elsewhere
    parsed_from = {cols[k_] for k_ in ("system", "node", "started", "fixed", "down_time_min", "same_event")
                   if k_ in cols}
    subset = [c for c in value_cols if c not in parsed_from] + ["system", "node", "started", "fixed_raw",
                                                                 "down_time_min", "same_event"]
    good = good.unique(subset=subset, keep="first", maintain_order=True)
    duplicates = before - good.height
    good = good.with_columns(
        fixed=pl.when(pl.col("fixed_raw") >= pl.col("started")).then(pl.col("fixed_raw")).otherwise(None),
        fixed_before=(pl.col("fixed_raw") < pl.col("started")).fill_null(False))
    frame = good.select("line", "system", "node", "nodes_in_system", "started", "fixed", "down_time_min", "blame",
                        "blame_detail", "same_event").sort(["started", "line"])
    if frame.height == 0:
        raise FailureDataError(f"no usable failure rows ({data_rows} data rows, {len(skipped)} malformed)", path=where)
    return FailureRecords(
        path=where, frame=frame, node_column=node_column, data_rows=data_rows, blank_lines=blank_lines,
        skipped=skipped, duplicates_dropped=duplicates, same_event_rows=int(frame["same_event"].sum()),
        missing_fixed=int(good["fixed_raw"].is_null().sum()), fixed_before_started=int(good["fixed_before"].sum()),
        rows_without_node=int(frame["node"].is_null().sum()))


# --- arrivals ----------------------------------------------------------------------------------------
def arrival_times_s(records: FailureRecords, *, system: int | None = None, node: int | None = None,
                    include_same_event: bool = False, merge_simultaneous: bool = True) -> list[float]:
    """Failure start times in seconds since the epoch, sorted, for one system (default: the only one in
    the file) or one node of it.

    ``merge_simultaneous`` counts failures that start in the same minute (the records' resolution) as
    one interrupt, which is what a job spanning those nodes sees; per node it only removes exact
    repeats. Rows flagged Same Event are left out unless ``include_same_event``.

    Raises FailureDataError: the system is not in the file, or the file holds several and none is named.
    """
    df = _scope(records, system)
    if node is not None:
        df = df.filter(pl.col("node") == node)
    if not include_same_event:
        df = df.filter(~pl.col("same_event"))
    times = df["started"].sort()
    if merge_simultaneous:
        times = times.unique(maintain_order=True)
    return [t.timestamp() for t in times.dt.replace_time_zone("UTC").to_list()]


def _scope(records: FailureRecords, system: int | None) -> pl.DataFrame:
    systems = records.systems
    if system is None:
        if len(systems) != 1:
            raise FailureDataError(f"the file holds systems {systems}; name one", path=records.path)
        system = systems[0]
    if system not in systems:
        raise FailureDataError(f"no system {system} in the file (it holds {systems})", path=records.path)
    return records.frame.filter(pl.col("system") == system)


def gaps_s(times_s: Sequence[float]) -> list[float]:
    """Inter-arrival times (seconds) of sorted arrival times."""
    return [b - a for a, b in zip(times_s, times_s[1:])]


@dataclass(frozen=True)
class ArrivalStats:
    """Inter-arrival statistics of one scope (a system or a node). Times in seconds.

    ``mtbf_s`` is the mean gap, (last - first) / (failures - 1); ``cv`` is the gaps' standard
    deviation over their mean (1 for a Poisson process, above 1 when failures cluster);
    ``zero_gaps`` counts failures starting in the same minute as the previous one.
    """

    scope: str
    failures: int
    first: str | None
    last: str | None
    window_s: float
    gaps: int
    mtbf_s: float | None
    median_gap_s: float | None
    cv: float | None
    zero_gaps: int

    def to_dict(self) -> dict:
        return asdict(self)


def arrival_stats(times_s: Sequence[float], scope: str) -> ArrivalStats:
    """:class:`ArrivalStats` of sorted arrival times (seconds)."""
    import datetime as _dt
    g = gaps_s(times_s)
    iso = (lambda t: _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%d %H:%M")) if times_s else None
    if not g:
        return ArrivalStats(scope, len(times_s), iso(times_s[0]) if times_s else None,
                            iso(times_s[-1]) if times_s else None, 0.0, 0, None, None, None, 0)
    mean = sum(g) / len(g)
    sd = math.sqrt(sum((v - mean) ** 2 for v in g) / (len(g) - 1)) if len(g) > 1 else None
    sg = sorted(g)
    med = sg[len(sg) // 2] if len(sg) % 2 else (sg[len(sg) // 2 - 1] + sg[len(sg) // 2]) / 2
    return ArrivalStats(scope, len(times_s), iso(times_s[0]), iso(times_s[-1]), times_s[-1] - times_s[0], len(g),
                        mean, med, (sd / mean) if (sd is not None and mean > 0) else None, sum(1 for v in g if v == 0))


# --- is it Poisson? ------------------------------------------------------------------------------------
KS_CAVEAT = ("the plain KS p-value treats the exponential's mean as known in advance; here it is estimated "
             "from the same gaps, which pulls the fitted curve toward the data, shrinks the statistic and "
             "makes that p-value too large. The bootstrap p-value redraws arrival sequences from the fitted "
             "exponential (rounded to the records' resolution, merged the same way), refits the mean on each "
             "and compares statistics: the Lilliefors idea, by simulation.")


@dataclass(frozen=True)
class PoissonCheck:
    """Do the gaps look like a Poisson process's (exponential inter-arrivals)?

    Fields:
        gaps: sample size. mean_gap_s: the fitted exponential's mean. cv: coefficient of variation.
        ks_statistic: sup |empirical CDF - fitted exponential CDF|.
        ks_p_plain: scipy's p-value for that statistic as if the mean were known (optimistic).
        ks_p_bootstrap: parametric-bootstrap p-value ((1 + #sim >= obs) / (1 + B)).
        bootstrap_samples: B. seed: the generator seed. resolution_s: rounding of times.
        alpha: significance level. poisson_plausible: ks_p_bootstrap >= alpha. verdict: one line.
    """

    gaps: int
    mean_gap_s: float
    cv: float | None
    ks_statistic: float
    ks_p_plain: float
    ks_p_bootstrap: float
    bootstrap_samples: int
    seed: int
    resolution_s: float
    alpha: float
    poisson_plausible: bool
    verdict: str
    caveat: str = KS_CAVEAT

    def to_dict(self) -> dict:
        return asdict(self)


#: Most bootstrap samples :func:`poisson_check` draws (each costs a sort of the sample; 10^5 samples
#: of a few thousand gaps take tens of seconds).
MAX_BOOTSTRAP = 100_000


def ks_statistic_exponential(gaps: Sequence[float], mean_s: float) -> float:
    """Kolmogorov-Smirnov distance between the gaps' empirical CDF and an exponential of mean ``mean_s``."""
    import numpy as np
    x = np.sort(np.asarray(gaps, dtype=float))
    n_ = x.size
    cdf = -np.expm1(-x / mean_s)
    i_ = np.arange(1, n_ + 1)
    return float(max(np.max(i_ / n_ - cdf), np.max(cdf - (i_ - 1) / n_)))


def poisson_check(gaps: Sequence[float], *, resolution_s: float = 60.0, merge_simultaneous: bool = True,
                  bootstrap: int = 999, seed: int = 0, alpha: float = 0.05) -> PoissonCheck:
    """Test whether inter-arrival times (seconds) are exponential with a rate fitted from them.

    The bootstrap mirrors how the observed gaps were made: ``len(gaps) + 1`` arrivals with exponential
    gaps of the fitted mean are floored to ``resolution_s`` and, with ``merge_simultaneous``, arrivals
    in the same tick are merged; the mean is refitted on each simulated sample and the KS statistic
    against its own fit recorded. Uses numpy (via scipy) with ``numpy.random.default_rng(seed)``.

    Raises CadenceParameterError: fewer than 3 gaps, a negative gap, all gaps zero, bootstrap
    outside 1..:data:`MAX_BOOTSTRAP`, a seed that is not an integer >= 0, alpha outside (0, 1],
    resolution < 0.
    """
    import numpy as np
    from scipy import stats

    g = np.asarray(list(gaps), dtype=float)
    if g.size < 3:
        raise CadenceParameterError(f"need at least 3 gaps to test, got {g.size}", name="gaps")
    if np.any(g < 0) or not np.all(np.isfinite(g)):
        raise CadenceParameterError("gaps must be finite and >= 0", name="gaps")
    mean = float(g.mean())
    if mean <= 0:
        raise CadenceParameterError("all gaps are zero", name="gaps")
    b_ = f.stride("bootstrap", bootstrap, MAX_BOOTSTRAP)
    seed = f.random_seed("seed", seed)
    a_ = f.probability("alpha", alpha)
    res = f.nonnegative("resolution_s", resolution_s)
    d_obs = ks_statistic_exponential(g, mean)
    p_plain = float(stats.kstest(g, "expon", args=(0.0, mean)).pvalue)
    rng = np.random.default_rng(seed)
    n_arr = g.size + 1
    exceed = 0
    for _ in range(b_):
        t = np.cumsum(rng.exponential(mean, size=n_arr))
        if res > 0:
            t = np.floor(t / res) * res
        sg = np.diff(t)
        if merge_simultaneous:
            sg = sg[sg > 0]
        if sg.size < 2 or sg.mean() <= 0:
            continue
        if ks_statistic_exponential(sg, float(sg.mean())) >= d_obs:
            exceed += 1
    p_boot = (1 + exceed) / (1 + b_)
    sd = float(g.std(ddof=1))
    cv = sd / mean
    plausible = p_boot >= a_
    shape = ("clustered: more short and more long gaps than Poisson" if cv > 1.1 else
             "more regular than Poisson" if cv < 0.9 else "CV near 1")
    p_text = f"p<={p_boot:.3g}" if exceed == 0 else f"p={p_boot:.3g}"   # no simulated statistic reached ours
    verdict = (f"{'consistent with' if plausible else 'not'} Poisson at alpha={a_:g}: bootstrap KS {p_text} "
               f"(plain p={p_plain:.3g}), CV={cv:.2f} ({shape})")
    return PoissonCheck(int(g.size), mean, cv, d_obs, p_plain, p_boot, b_, int(seed), res, a_, plausible, verdict)


# --- what the failure times say about cadence ---------------------------------------------------------
def replay_interval(times_s: Sequence[float], interval_s: float, pause_s: float, *,
                    restore_s: float = 0.0) -> float:
    """Fraction of wall time lost when a job that checkpoints after every ``interval_s`` of work (pause
    ``pause_s``) runs through the real failure times ``times_s`` (seconds, sorted), from the first to
    the last failure. Each failure discards the work and any pause since the latest finished
    checkpoint and costs ``restore_s``; the job restarts at the failure time. This is eq. 6's
    accounting in seconds, on a real trace instead of a Poisson one.

    Raises CadenceParameterError: fewer than 2 times, interval not > 0, pause or restore < 0.
    """
    tau_ = f.positive("interval_s", interval_s)
    c_ = f.nonnegative("pause_s", pause_s)
    r_ = f.nonnegative("restore_s", restore_s)
    if len(times_s) < 2:
        raise CadenceParameterError("need at least two failure times", name="times_s")
    lost = 0.0
    cycle = tau_ + c_
    for a, b in zip(times_s, times_s[1:]):
        up = b - a
        cycles = math.floor(up / cycle)
        lost += cycles * c_ + (up - cycles * cycle) + r_
    span = times_s[-1] - times_s[0]
    return lost / span if span > 0 else float("nan")


@dataclass(frozen=True)
class CadenceFromFailures:
    """Young's interval for one scope's measured MTBF, and how it fares on the real failure times.

    Fields:
        scope, pause_s, mtbf_s: inputs (MTBF measured from the records).
        young_interval_s, young_overhead_fraction: theorem 11.1 with that MTBF.
        replay_overhead_at_young: :func:`replay_interval` at Young's interval on the real times.
        best_replay_interval_s, best_replay_overhead: the best interval on a log grid over the real times.
        pause_to_mtbf: C / M (Young assumes it is small).
        notes: assumptions that do not hold, if any.
    """

    scope: str
    pause_s: float
    mtbf_s: float
    young_interval_s: float
    young_overhead_fraction: float
    replay_overhead_at_young: float | None
    best_replay_interval_s: float | None
    best_replay_overhead: float | None
    pause_to_mtbf: float
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        d_ = asdict(self)
        d_["notes"] = list(self.notes)
        return d_


def cadence_from_failures(times_s: Sequence[float] | None, mtbf_s: float, pause_s: float, scope: str, *,
                          poisson: PoissonCheck | None = None, grid_points: int = 121) -> CadenceFromFailures:
    """Young's interval from a measured MTBF and, when ``times_s`` are given, its replay on them next to
    the best interval on a log grid from 0.01x to 100x Young's. Raises CadenceParameterError."""
    t_y = f.young_interval_s(pause_s, mtbf_s)
    h_y = f.young_optimal_overhead_fraction(pause_s, mtbf_s)
    notes = []
    ratio = float(pause_s) / float(mtbf_s)
    if ratio > 0.1:
        notes.append(f"pause/MTBF = {ratio:.2g}: Young's approximation assumes the pause is much shorter than the MTBF")
    if poisson is not None and not poisson.poisson_plausible:
        notes.append("arrivals are not Poisson, which theorem 11.1 assumes; the replay on the real times shows "
                     "what that costs")
    rep = best_t = best_h = None
    if times_s is not None and len(times_s) >= 2:
        rep = replay_interval(times_s, t_y, pause_s)
        grid = [t_y * 10 ** (-2 + 4 * j / (grid_points - 1)) for j in range(grid_points)]
        best_h, best_t = min((replay_interval(times_s, t, pause_s), t) for t in grid)
    return CadenceFromFailures(scope, float(pause_s), float(mtbf_s), t_y, h_y, rep, best_t, best_h, ratio, tuple(notes))


@dataclass(frozen=True)
class SystemAnalysis:
    """One system: arrivals (raw and merged), Poisson check, system-level and node-level cadence.

    ``nodes_in_system`` is the node count the pooled node MTBF uses: the count the rows declare
    (``nodes`` column, most common value), raised to the number of distinct nodes that failed when
    the declaration is smaller (``nodes_declared`` keeps the declared count, None if no row
    declares one). ``warnings`` says when the data contradict themselves in a way that moves a
    result.
    """

    system: int
    stats: ArrivalStats
    merged_simultaneous: int
    poisson: PoissonCheck | None
    cadence_system: CadenceFromFailures | None
    nodes_in_system: int
    nodes_with_failures: int
    node_failures: int
    node_mtbf_pooled_s: float | None
    cadence_node: CadenceFromFailures | None
    nodes_declared: int | None = None
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"system": self.system, "arrivals": self.stats.to_dict(),
                "merged_simultaneous": self.merged_simultaneous,
                "poisson": self.poisson.to_dict() if self.poisson else None,
                "cadence_system": self.cadence_system.to_dict() if self.cadence_system else None,
                "nodes_in_system": self.nodes_in_system, "nodes_with_failures": self.nodes_with_failures,
                "node_failures": self.node_failures, "node_mtbf_pooled_s": self.node_mtbf_pooled_s,
                "cadence_node": self.cadence_node.to_dict() if self.cadence_node else None,
                "nodes_declared": self.nodes_declared, "warnings": list(self.warnings)}


@dataclass(frozen=True)
class LanlAnalysis:
    """:func:`analyze_lanl`'s result: the load report, per-system analyses, and a per-node frame
    (columns system, node, failures, first, last, mtbf_s, cv, young_interval_s). ``notes`` says what
    was not analysed and why (e.g. node-level analysis skipped: no row names a node)."""

    load: dict
    systems: tuple[SystemAnalysis, ...]
    per_node: pl.DataFrame
    pause_s: float
    include_same_event: bool
    merge_simultaneous: bool
    notes: tuple[str, ...] = ()

    @property
    def warnings(self) -> list[str]:
        """Every system's warnings, each prefixed with its system."""
        return [f"system {s.system}: {w}" for s in self.systems for w in s.warnings]

    def to_dict(self, *, nodes: bool = True) -> dict:
        out = {"source": "LANL failure records (1996-2005); theorem 11.1 with measured MTBF", "load": self.load,
               "warnings": self.warnings, "notes": list(self.notes),
               "pause_s": self.pause_s, "include_same_event": self.include_same_event,
               "merge_simultaneous": self.merge_simultaneous, "systems": [s.to_dict() for s in self.systems]}
        if nodes:
            out["per_node"] = self.per_node.with_columns(pl.col("first").dt.strftime("%Y-%m-%d %H:%M"),
                                                         pl.col("last").dt.strftime("%Y-%m-%d %H:%M")).to_dicts()
        return out


def per_node_frame(records: FailureRecords, pause_s: float, *, include_same_event: bool = False) -> pl.DataFrame:
    """Per node: failures, first/last start, MTBF (mean gap, s; null under 2 failures), CV of gaps, and
    Young's interval for ``pause_s`` at that MTBF. Sorted by system, node. Rows without a node are
    left out (an empty frame when no row names a node)."""
    f.positive("pause_s", pause_s)
    df = records.frame if include_same_event else records.frame.filter(~pl.col("same_event"))
    df = df.filter(pl.col("node").is_not_null())   # rows without a node count at system level only
    df = df.unique(subset=["system", "node", "started"], keep="first").sort(["system", "node", "started"])
    df = df.with_columns(gap_s=pl.col("started").diff().over(["system", "node"]).dt.total_seconds().cast(pl.Float64))
    out = df.group_by(["system", "node"]).agg(
        failures=pl.len(), first=pl.col("started").min(), last=pl.col("started").max(),
        mtbf_s=pl.col("gap_s").mean(), sd_s=pl.col("gap_s").std()).sort(["system", "node"])
    return out.with_columns(
        cv=pl.when(pl.col("mtbf_s") > 0).then(pl.col("sd_s") / pl.col("mtbf_s")),
        young_interval_s=pl.when(pl.col("mtbf_s") > 0).then((2.0 * pause_s * pl.col("mtbf_s")).sqrt()),
    ).drop("sd_s")


def analyze_lanl(source: str | Path | FailureRecords, *, pause_s: float = 60.0, bootstrap: int = 999,
                 seed: int = 0, alpha: float = 0.05, include_same_event: bool = False,
                 merge_simultaneous: bool = True, errors: Literal["skip", "raise"] = "skip") -> LanlAnalysis:
    """Failure statistics and the cadence they imply, per system and per node.

    Per system: arrivals of failures (same-minute failures merged into one interrupt by default),
    MTBF, CV, the Poisson check, Young's interval for ``pause_s`` at the system MTBF (a job that
    needs every node) and its replay on the real failure times; the pooled node MTBF (nodes in the
    system x observed window / node failures, counting nodes that never failed) and Young's interval
    for a job on one node. Per node: see :func:`per_node_frame`. A declared node count below the
    number of distinct failing nodes is raised to that number and reported in the system's
    ``warnings`` (all of them: :attr:`LanlAnalysis.warnings`).

    Raises FailureDataError (reading) and CadenceParameterError (bad parameters: a pause out of
    range, bootstrap outside 1..MAX_BOOTSTRAP, a seed that is not an integer >= 0).
    """
    c_ = f.positive("pause_s", pause_s)
    f.stride("bootstrap", bootstrap, MAX_BOOTSTRAP)
    f.random_seed("seed", seed)
    f.probability("alpha", alpha)
    records = source if isinstance(source, FailureRecords) else load_lanl(source, errors=errors)
    nodes = per_node_frame(records, c_, include_same_event=include_same_event)
    notes: list[str] = []
    if not records.node_level:
        notes.append("node-level analysis skipped: no row names a node (the node columns are empty or absent); "
                     "the system-level figures use every row")
    elif records.rows_without_node:
        notes.append(f"{records.rows_without_node} row(s) name no node: they count in the system-level figures and "
                     f"are left out of the node-level ones")
    out = []
    for system in records.systems:
        raw = arrival_times_s(records, system=system, include_same_event=include_same_event, merge_simultaneous=False)
        times = arrival_times_s(records, system=system, include_same_event=include_same_event,
                                merge_simultaneous=merge_simultaneous)
        st = arrival_stats(times, f"system {system}")
        g = gaps_s(times)
        pc = (poisson_check(g, merge_simultaneous=merge_simultaneous, bootstrap=bootstrap, seed=seed, alpha=alpha)
              if len(g) >= 3 and sum(g) > 0 else None)
        cad = cadence_from_failures(times, st.mtbf_s, c_, f"system {system}", poisson=pc) if st.mtbf_s else None
        sys_nodes = nodes.filter(pl.col("system") == system)
        declared = records.frame.filter(pl.col("system") == system)["nodes_in_system"].drop_nulls()
        warnings = []
        n_declared = int(declared.mode().max()) if declared.len() else None
        if declared.n_unique() > 1:
            warnings.append(f"rows declare different node counts {sorted(declared.unique().to_list())[:10]}; "
                            f"using the most common, {n_declared}")
        n_nodes = n_declared if n_declared is not None else sys_nodes.height
        if n_declared is not None and sys_nodes.height > n_declared:
            warnings.append(f"the rows declare {n_declared} node(s) but {sys_nodes.height} distinct nodes failed; "
                            f"the pooled node MTBF counts {sys_nodes.height} nodes (a lower bound: nodes that "
                            f"never failed are not in the records)")
            n_nodes = sys_nodes.height
        node_failures = int(sys_nodes["failures"].sum())
        pooled = (n_nodes * st.window_s / node_failures) if node_failures and n_nodes and st.window_s > 0 else None
        cad_node = None
        if pooled:
            try:
                cad_node = cadence_from_failures(None, pooled, c_, f"one node of system {system} (pooled MTBF)")
            except CadenceParameterError as exc:
                warnings.append(f"no one-node cadence: the pooled node MTBF {pooled:.4g} s is unusable ({exc})")
        if cad_node is not None:
            cad_node = replace(cad_node, notes=cad_node.notes + (
                "pooled MTBF = nodes x observed window / node failures: it assumes every node was in service for "
                "the whole window and that nodes fail alike (see the per-node table for how unalike they are)",))
        out.append(SystemAnalysis(system, st, len(raw) - len(times), pc, cad, n_nodes, sys_nodes.height, node_failures,
                                  pooled, cad_node, n_declared, tuple(warnings)))
    return LanlAnalysis(records.summary(), tuple(out), nodes, c_, include_same_event, merge_simultaneous, tuple(notes))
