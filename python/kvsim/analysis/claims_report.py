"""claims.md: the claims suite's report (DESIGN.md §Claims), one table of claims with their verdicts, the
notes and commands, and the experiments that ran.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence

import polars as pl

from kvsim.analysis.claims_model import (
    CONFIRMED,
    DIFFERS,
    INCONCLUSIVE,
    NOT_TESTABLE,
    PAPER,
    VERDICTS,
    Claim,
    Experiment,
    Results,
    requests_ran,
)


def render(claims: Sequence[Claim], exps: Sequence[Experiment], results: Mapping[str, Results],
           scale: float, wall_s: float, reused: bool = False) -> str:  # fmt: skip
    """claims.md as text. With `reused` (`kvsim claims --reuse`) the values come from an earlier run's
    rows, re-read, and the machine and wall time are the re-read's: the header says so."""
    counts = {v: sum(c.verdict == v for c in claims) for v in VERDICTS}
    where = "an earlier run's rows (results/claims/*.parquet)" if reused else "this run"
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    lines = [
        "# Claims",
        "",
        "Written by `python -m bench.sweep` (no arguments; `kvsim claims` is the same). Every *ours* value",
        f"comes from running the Rust engine in {where}; *source* values are quoted from the paper",
        f"({PAPER}) or the seed simulators' benchmarks (DESIGN.md §Claims). Tolerances were fixed before the run. Request counts are scaled by {scale}.",
        (
            f"Rows re-read with `kvsim claims --reuse` on: {machine}; wall time of the re-read {wall_s:.0f} s "
            "(the machine and wall time of the run that produced the rows are not recorded in them)."
            if reused
            else f"Machine: {machine}; wall time {wall_s:.0f} s."
        ),
        "",
        f"**{len(claims)} claims: {counts[CONFIRMED]} CONFIRMED, {counts[INCONCLUSIVE]} INCONCLUSIVE, "
        f"{counts[DIFFERS]} DIFFERS, {counts[NOT_TESTABLE]} NOT TESTABLE.**",
        "",
        "INCONCLUSIVE: a claim of an order (a rise, a fall, one at least as high as another) that our numbers",
        "show only through the slack its tolerance allows, the numbers' precision: within it they cannot tell",
        "the order (the row's note names the values that go against it).",
        "",
        "Token share (Fig. 2) = stored tokens / (allocated + externally fragmented memory), time-weighted over",
        "busy time; ± is the 95 % confidence half-width across seeds (Student's t).",
        "",
        "| id | claim | source | source's number | ours | tolerance | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        lines.append(
            f"| {c.id} | {c.claim} | {c.source} | {c.source_value} | {c.ours} | {c.tolerance} | **{c.verdict}** |"
        )
    lines += ["", "## Notes and commands", ""]
    for c in claims:
        lines.append(f"- **{c.id}** ({c.verdict}){': ' + c.note if c.note else ''}")
        lines.append(f"  `{c.command}`")
    lines += [
        "",
        "## Experiments",
        "",
        "| experiment | points | requests per point | seeds | setup |",
        "|---|---:|---:|---:|---|",
    ]
    for e in exps:
        res = results.get(e.name)
        n = res.frame.height if res is not None else 0
        status = f" (failed: {res.error})" if res is not None and res.error else ""
        lines.append(
            f"| {e.name} | {n} | {requests_ran(res.frame if res is not None else pl.DataFrame(), e.spec(scale).requests)} | {e.seeds} | {e.why}{status} |"
        )
    lines.append("")
    return "\n".join(lines)
