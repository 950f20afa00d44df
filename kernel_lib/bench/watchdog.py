"""``bench watchdog``: what the watchdog's state hash costs per step (Failure Recovery, "Semantic
Watchdog Timers", table 6: "O(B) hash compute over B state bytes"), measured on this machine in one
run and given as ratios.

A workspace of ``--files`` files holding ``--mb`` megabytes in all (seeded random bytes, spread over
nested package directories, plus ignored caches and logs) is written to a temporary directory on
the measured disk. Contenders, in interleaved rounds:

* ``full``: a full hash: a fresh hasher reads, hashes and encodes every file (the baseline);
* ``incremental``: one file rewritten (same size, new bytes), then the watchdog's re-hash with its
  default change source (inotify events where available), timed apart from the write;
* ``no_change``: the same re-hash with nothing changed;
* ``incremental_scan`` and ``incremental_hint``: the one-file re-hash with the stat scan (the
  fallback: ``lstat`` of every file) and with the runner's own ``changed_paths`` hint (every path
  written since that hasher's previous hash, by any contender: the hint is exact);
* the step's own cost: ``tool_run`` (a real tool run as a subprocess: ``/bin/sh`` writing one
  workspace file) and ``durable_append`` (the step's ``ToolResult`` appended through the project's
  SQLite store at the fdatasync tier, one ``fdatasync`` per append).

Figures: median and p99 of each (ms), each ratio to ``full``, and the watchdog's re-hash against the
step it watches (tool run + durable append). Target: incremental / full <= 0.02 (the issue's 2 %).
The files are in the page cache throughout (they were just written), as an agent's working tree
is; a cold-cache full hash would cost more and make the ratio smaller still. After the rounds
every hasher's digest is checked against a fresh full hash (``consistent``). Other contenders'
writes land between a contender's calls too, so a re-hash may re-read more than its own one file
(the ``re-read`` column: median files read per call); the stat scan also re-reads files written
within its racy window.

exit status: 0 when the benchmark ran, whether its target passed or not (a missed target is a
measurement, printed FAIL); 2 on bad input (one error: line).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel_lib.bench.harness import Contender, MeasuredDir, machine_info, progress_bar, ratio, run_rounds, summarize
from kernel_lib.errors import ConfigError
from kernel_lib.recovery.watchdog.workspace import WorkspaceHasher

__all__ = ["run_watchdog_bench", "format_watchdog_bench", "TARGET_INCREMENTAL_OVER_FULL"]

#: incremental re-hash of a one-file change <= this share of a full hash (issue 18)
TARGET_INCREMENTAL_OVER_FULL = 0.02
#: files in the ignored caches and logs written beside the workspace's own (never read by the hasher)
_IGNORED_FILES = ("__pycache__/a.cpython-311.pyc", ".git/objects/pack/p.pack", "build.log", ".pytest_cache/v/x",
                  "node_modules/m/index.js", "tmp/scratch.bin")


def _make_workspace(root: Path, files: int, total_bytes: int, seed: int) -> list[str]:
    """Write ``files`` files of ``total_bytes`` in all under ``root``; return their relative paths."""
    rng = random.Random(f"bench-watchdog:{seed}")
    base, extra = divmod(total_bytes, files)
    paths = []
    for i in range(files):
        rel = f"pkg{i % 25:02d}/mod{(i // 25) % 8}/file{i:05d}.py"
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(base + (1 if i < extra else 0)))
        paths.append(rel)
    for rel in _IGNORED_FILES:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(4096))
    return paths


def _step_payload(digest: str) -> Any:
    from kernel_lib.core.events import ToolResult
    return ToolResult(operation_id="bench-watchdog.edit", attempt_id="bench-watchdog.edit.1", status="completed",
                      outcome={"exit_code": 0, "state_hash": digest}, observation_complete=True)


def run_watchdog_bench(*, files: int = 1000, mb: float = 10.0, rounds: int = 8, per_round: int = 4, seed: int = 0,
                       dir: "str | os.PathLike[str] | None" = None, progress: bool | None = None) -> dict[str, Any]:
    """Run the benchmark (module docstring) and return its figures.

    Args:
        files: files in the workspace (>= 10). mb: their total size in MB (10^6 bytes, > 0).
        rounds, per_round: interleaved rounds, calls per contender per round (>= 1 each).
        seed: seed of the file contents. dir: parent of the temporary directory (default: the
        current directory); it is removed. progress: a tqdm bar on stderr (default: on a terminal).

    Returns:
        ``{"benchmark": "watchdog", "machine", "workspace": {files, bytes, ignored_files},
        "change_source", "note", "ms": {contender: {min_ms, median_ms, p90_ms, p99_ms, mean_ms}},
        "ratios": {contender_over_full..., "incremental_over_step", "step_ms"}, "reread":
        {contender: files re-read per call (median)}, "consistent", "targets": [{name, measured,
        limit, passed}], "temp_dir_removed", "seconds"}``.

    Raises:
        ConfigError: an argument out of range, or ``dir`` not an existing directory.
    """
    for name, v, low in (("files", files, 10), ("rounds", rounds, 1), ("per_round", per_round, 1)):
        if type(v) is not int or v < low:
            raise ConfigError(f"{name} must be an integer >= {low}, got {v!r}")
    if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not 0 < mb <= 10_000:
        raise ConfigError(f"mb must be a number of megabytes in (0, 10000], got {mb!r}")
    total_bytes = int(mb * 1_000_000)
    if total_bytes < files:
        raise ConfigError(f"{mb} MB cannot hold {files} non-empty files")
    t_start = time.perf_counter()
    scratch = MeasuredDir(dir, prefix="bench-watchdog-")
    bar = progress_bar(1 + rounds, enabled=progress)
    try:
        result = _measure(scratch.path, files, total_bytes, rounds, per_round, seed, lambda: bar.update(1))
    finally:
        bar.close()
        scratch.remove()
    result.update(temp_dir_removed=scratch.removed, seconds=time.perf_counter() - t_start)
    return result


def _measure(root: Path, files: int, total_bytes: int, rounds: int, per_round: int, seed: int,
             tick: Callable[[], None]) -> dict[str, Any]:
    from kernel_lib.log import FailureDomain, TrajectoryLog, open_store
    machine = machine_info(root)
    ws = root / "workspace"
    paths = _make_workspace(ws, files, total_bytes, seed)
    time.sleep(0.25)                         # past the stat scan's racy window of the files just written
    rng = random.Random(f"bench-watchdog-edits:{seed}")
    watched = WorkspaceHasher(ws)                          # the watchdog's default change source
    scan = WorkspaceHasher(ws, change_source="scan")
    hinted = WorkspaceHasher(ws, change_source="scan")
    store = open_store("sqlite", root / "steps.sqlite", create=True)
    log = TrajectoryLog(store, "bench-watchdog", must_survive=FailureDomain.HOST_CRASH)
    reread: dict[str, list[int]] = {"incremental": [], "no_change": [], "incremental_scan": [],
                                    "incremental_hint": [], "full": []}
    edit_count = [0]
    unhinted: set[str] = set()               # written since the hinting hasher's last hash: its exact hint
    sizes = {rel: (ws / rel).stat().st_size for rel in paths}

    def edit() -> str:
        """Rewrite one file in place, same size, new bytes; its relative path."""
        rel = paths[rng.randrange(len(paths))]
        edit_count[0] += 1
        (ws / rel).write_bytes(rng.randbytes(sizes[rel]))
        unhinted.add(rel)
        return rel

    def timed(hasher: WorkspaceHasher, name: str, change: bool, hint: bool = False) -> Callable[[], float]:
        def op() -> float:
            if change:
                edit()
            written = sorted(unhinted) if hint else None
            t0 = time.perf_counter()
            s = hasher.hash(written)
            elapsed = time.perf_counter() - t0
            if hint:
                unhinted.clear()
            reread[name].append(len(s.reread))
            return elapsed
        return op

    def full() -> None:
        with WorkspaceHasher(ws, change_source="scan") as fresh:
            reread["full"].append(len(fresh.hash().reread))

    tool = ["/bin/sh", "-c", 'printf "%s" "$1" > "$2"', "sh"]
    tool_target = ws / paths[0]

    def tool_run() -> None:
        subprocess.run([*tool, f"edited {edit_count[0]}", str(tool_target)], check=True, stdin=subprocess.DEVNULL)
        unhinted.add(paths[0])

    try:
        for h in (watched, scan, hinted):
            h.hash()
        unhinted.clear()
        payload = _step_payload(watched.hash().digest)
        contenders = [
            Contender("full", full),
            Contender("incremental", timed(watched, "incremental", True), self_timed=True),
            Contender("no_change", timed(watched, "no_change", False), self_timed=True),
            Contender("incremental_scan", timed(scan, "incremental_scan", True), self_timed=True),
            Contender("incremental_hint", timed(hinted, "incremental_hint", True, hint=True), self_timed=True),
            Contender("tool_run", tool_run),
            Contender("durable_append", lambda: log.append(payload)),
        ]
        samples = run_rounds(contenders, rounds=rounds, per_round=per_round, warmup=2, tick=tick, collect="turn")
        with WorkspaceHasher(ws, change_source="scan") as fresh:
            truth = fresh.hash()
        consistent = (watched.hash().digest == scan.hash().digest == hinted.hash(sorted(unhinted)).digest
                      == truth.digest)
        change_source, note = watched.change_source, watched.note
    finally:
        for h in (watched, scan, hinted):
            h.close()
        store.close()
    ms = {k: summarize(v, "ms") for k, v in samples.items()}
    base = ms["full"]["median_ms"]
    step_ms = ms["tool_run"]["median_ms"] + ms["durable_append"]["median_ms"]
    ratios = {f"{k}_over_full": ratio(v["median_ms"], base) for k, v in ms.items() if k != "full"}
    ratios.update(step_ms=step_ms, incremental_over_step=ratio(ms["incremental"]["median_ms"], step_ms),
                  full_over_step=ratio(base, step_ms))
    inc = ratios["incremental_over_full"]
    targets = [{"name": "incremental re-hash of a one-file change / full hash (median)", "measured": inc,
                "limit": f"<= {TARGET_INCREMENTAL_OVER_FULL:g}", "passed": bool(inc <= TARGET_INCREMENTAL_OVER_FULL)}]
    return {"benchmark": "watchdog", "machine": machine,
            "workspace": {"files": truth.file_count, "bytes": truth.total_bytes, "ignored_files": len(_IGNORED_FILES)},
            "change_source": change_source, "note": note, "rounds": rounds, "per_round": per_round,
            "ms": ms, "ratios": ratios,
            "reread": {k: sorted(v)[len(v) // 2] if v else None for k, v in reread.items()},
            "consistent": consistent, "targets": targets}


def format_watchdog_bench(r: dict[str, Any]) -> str:
    """Human-readable table of :func:`run_watchdog_bench`'s result."""
    m, w = r["machine"], r["workspace"]
    lines = [f"bench watchdog: {m['platform']}, {m['cpu_count']} CPUs ({r['seconds']:.0f} s)",
             f"workspace: {w['files']} files, {w['bytes'] / 1e6:.1f} MB (+{w['ignored_files']} ignored cache/log "
             f"files); change source: {r['change_source']}" + (f" ({r['note']})" if r["note"] else ""), ""]
    warning = m.get("filesystem", {}).get("warning")
    if warning:
        lines += [f"WARNING: {warning}", ""]
    lines.append(f"  {'contender':<18} {'median ms':>10} {'p99 ms':>9} {'/ full':>8} {'re-read':>8}")
    for k, v in r["ms"].items():
        share = "" if k == "full" else f"{r['ratios'][f'{k}_over_full']:8.4f}"
        rr = r["reread"].get(k)
        lines.append(f"  {k:<18} {v['median_ms']:10.3f} {v['p99_ms']:9.3f} {share:>8} "
                     f"{'' if rr is None else rr:>8}")
    x = r["ratios"]
    lines += ["", f"the step it watches (tool run + durable append): {x['step_ms']:.3f} ms; incremental re-hash / step "
                  f"{x['incremental_over_step']:.4f}, full hash / step {x['full_over_step']:.2f}",
              f"incremental digests equal a fresh full hash: {r['consistent']}", "", "targets:"]
    for t in r["targets"]:
        lines.append(f"  {t['name']}: {t['measured']:.4f} (target {t['limit']})  {'PASS' if t['passed'] else 'FAIL'}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(format_watchdog_bench(run_watchdog_bench(progress=sys.stderr.isatty())))
