"""The claims suite (DESIGN.md §Claims): runs every claim's experiment on the engine and writes results/claims.md.

Each claim row holds the source's number (quoted from the paper or the seed simulators, with where), ours (computed here
from the engine's summaries, never typed in), the command that reproduces ours, the tolerance (stated
before the run, in `Claim.tolerance`) and a verdict: CONFIRMED, INCONCLUSIVE (an order
shown only through its tolerance's slack), DIFFERS, or NOT TESTABLE with the reason.

Every experiment is a sweep (`kvsim.analysis.sweep`): all their points run in one thread pool, then each
experiment's rows land in `results/claims/<experiment>.parquet`, which `kvsim.analysis.plots` reads. A point
that fails because the engine lacks a feature (`InvalidArgumentError` / `NotImplementedError` at run
time) makes its claims NOT TESTABLE with the error text; any other exception is a bug and propagates.

This module is the runner (`run_claims`, `run_experiments`); the claims themselves are defined by group
(`claims_paper`, `claims_seed`, `claims_capacity`, `claims_fleet`, `claims_hybrid`, `claims_tier`,
`claims_pd`) in the vocabulary of `claims_model`, and
`claims_report` writes claims.md.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from kvsim.analysis.claims_capacity import (
    CapacityExperiment,
    capacity_claims,
    capacity_experiments,
    read_capacity,
    run_capacity,
)
from kvsim.analysis.claims_fleet import fleet_claims, fleet_experiments
from kvsim.analysis.claims_hybrid import hybrid_claims
from kvsim.analysis.claims_model import (
    CONFIRMED,
    DIFFERS,
    INCONCLUSIVE,
    NOT_TESTABLE,
    PAPER_FIG2,
    PAPER_FIG13,
    POLICY_LABEL,
    Claim,
    ClaimsReport,
    Experiment,
    Results,
    feature_error,
)
from kvsim.analysis.claims_paper import paper_claims, paper_experiments, sizing_claim
from kvsim.analysis.claims_pd import PdExperiment, pd_claims, pd_experiments, read_pd, run_pd
from kvsim.analysis.claims_report import render
from kvsim.analysis.claims_seed import mooncake_ceiling, seed_claims, seed_experiments, trace_claims
from kvsim.analysis.claims_tier import tier_claims, tier_experiments
from kvsim.analysis.executors import check_workers
from kvsim.analysis.sweep import Point, progress_bar, rows_frame, run_point
from kvsim.analysis.validate import validation_claims
from kvsim.errors import InvalidArgumentError
from kvsim.model.units import fmt_count


def experiments() -> list[Experiment]:
    """Every experiment the claims need (request counts before `scale`), in claims.md's order."""
    return [
        *paper_experiments(),
        *seed_experiments(),
        *capacity_experiments(),
        *fleet_experiments(),
        *tier_experiments(),
        *pd_experiments(),
    ]


def run_experiments(
    exps: Sequence[Experiment],
    out_dir: Path,
    *,
    workers: int | None = None,
    scale: float = 1.0,
    progress: bool = True,
) -> dict[str, Results]:
    """Runs every point of every experiment in one thread pool; writes `<out_dir>/<name>.parquet`.

    Raises:
        InvalidArgumentError: `workers` below 1 (None is the CPU count).
    """
    count = check_workers(workers)
    points: list[tuple[str, Point]] = []
    errors: dict[str, str] = {}
    for e in exps:
        try:
            points += [(e.name, p) for p in e.spec(scale).points()]
        except InvalidArgumentError as exc:
            errors[e.name] = str(exc)
    # Long points first (traces, big request counts) so the pool ends evenly.
    points.sort(key=lambda np_: -np_[1].requests * (50 if np_[1].workload.startswith("mooncake") else 1))
    rows: dict[str, list[dict[str, Any]]] = {e.name: [] for e in exps}
    bar = progress_bar(len(points), "claims", progress)
    with cf.ThreadPoolExecutor(max_workers=count) as pool:
        futures = {pool.submit(run_point, p): name for name, p in points}
        for fut in cf.as_completed(futures):
            name = futures[fut]
            failure = fut.exception()
            if failure is not None:
                if not feature_error(failure):
                    for f in futures:
                        f.cancel()
                    raise failure
                errors.setdefault(name, f"{type(failure).__name__}: {failure}")
            else:
                rows[name].append(fut.result())
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Results] = {}
    for e in exps:
        frame = rows_frame(sorted(rows[e.name], key=lambda r: r["point_id"]))
        path = out_dir / f"{e.name}.parquet"
        if frame.height and e.name not in errors:
            frame.write_parquet(path)
        elif path.exists():
            path.unlink()
        results[e.name] = Results(e, frame if e.name not in errors else pl.DataFrame(), errors.get(e.name))
    return results


MIN_SCALED_REQUESTS = 20  # below this a claim's mean is a handful of requests, not a measurement


MAX_SCALED_REQUESTS = 2**40  # a sweep's most requests a point (`kvsim.analysis.sweep`)


def _round_down(x: float) -> float:
    """`x` cut to three significant digits (a bound shown rounded up would be refused when given)."""
    unit = 10.0 ** (math.floor(math.log10(x)) - 2)
    return math.floor(x / unit) * unit


def check_scale(scale: Any) -> float:
    """`scale` if it is a finite number > 0 that leaves every scaled experiment at least
    `MIN_SCALED_REQUESTS` requests per point and at most `MAX_SCALED_REQUESTS`.

    Raises:
        InvalidArgumentError: naming the value and, for a too small one, the smallest that works.
    """
    if (
        isinstance(scale, bool)
        or not isinstance(scale, int | float)
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise InvalidArgumentError(f"scale {scale!r} must be a finite number > 0 (1 = the full suite)")
    scalable = [e.requests for e in experiments() if e.scalable]
    smallest, largest = min(scalable), max(scalable)
    if largest * scale > MAX_SCALED_REQUESTS:
        # (a sweep's requests are at most 2**40: each experiment failed alone and the suite wrote its table
        # of nothing; a scale of 1e308 overflowed)
        raise InvalidArgumentError(
            f"scale {scale:g} asks more than 2**40 requests of the largest experiment ({largest:,} a point at "
            f"scale 1); the largest scale is {_round_down(MAX_SCALED_REQUESTS / largest):.3g}"
        )
    if smallest * scale < MIN_SCALED_REQUESTS:
        raise InvalidArgumentError(
            f"scale {scale:g} leaves {fmt_count(max(0, round(smallest * scale)), 'request')} in the smallest experiment "
            f"(fewer than {MIN_SCALED_REQUESTS}); the least scale is {MIN_SCALED_REQUESTS / smallest:.3g}"
        )
    return float(scale)


def check_results_dir(results_dir: Path) -> Path:
    """Checks, before any experiment runs, that the suite can write into `results_dir` (made if missing).

    Raises:
        InvalidArgumentError: naming the folder and why not.
    """
    import tempfile

    p = Path(results_dir)
    if p.exists() and not p.is_dir():
        raise InvalidArgumentError(f"results {p} is a file, not a folder")
    try:
        (p / "claims").mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p / "claims", prefix=".probe-"):
            pass
    except OSError as exc:
        raise InvalidArgumentError(f"results {p}: cannot write there ({exc.strerror or exc})") from None
    return p


def run_claims(
    results_dir: Path = Path("results"),
    *,
    workers: int | None = None,
    scale: float = 1.0,
    progress: bool = True,
    only: Sequence[str] | None = None,
    reuse: bool = False,
) -> ClaimsReport:
    """Runs the claims suite and writes `<results_dir>/claims.md`; `kvsim.analysis.plots.plot_all` draws the
    report's results (claims produce the results, plots only read them).

    Args:
        results_dir: output folder (claims.md, claims/*.parquet, plots/).
        workers: parallel simulations, at least 1 (default, None: the CPU count).
        scale: multiplies every experiment's request count (traces are capped at their length).
        progress: show progress on stderr.
        only: run only these experiments (the others' claims say NOT TESTABLE: not run).
        reuse: read each experiment's rows from `<results_dir>/claims/<name>.parquet` (written by an
            earlier run) instead of running it; experiments without a file run.

    Returns:
        The report (claims, path, wall time, the results by experiment).
    """
    check_scale(scale)
    check_workers(workers)
    check_results_dir(results_dir)
    t0 = time.perf_counter()
    exps = experiments()
    chosen = [e for e in exps if only is None or e.name in only]
    results: dict[str, Results] = {}
    if reuse:
        for e in list(chosen):
            path = results_dir / "claims" / f"{e.name}.parquet"
            if path.exists():
                reused = isinstance(e, CapacityExperiment)
                results[e.name] = (
                    read_capacity(e, results_dir) if reused else Results(e, pl.read_parquet(path), None)
                )
                if isinstance(e, PdExperiment):
                    results[e.name] = read_pd(e, results_dir)
                chosen.remove(e)
    # Capacity experiments' points are searches (kvsim.plan), each running its own rounds of probes.
    searches = [e for e in chosen if isinstance(e, CapacityExperiment)]
    # The disaggregation experiment's points are searches too (kvsim.analysis.claims_pd).
    pds = [e for e in chosen if isinstance(e, PdExperiment)]
    sweeps = [e for e in chosen if not isinstance(e, CapacityExperiment | PdExperiment)]
    results.update(
        run_experiments(sweeps, results_dir / "claims", workers=workers, scale=scale, progress=progress)
    )
    results.update(run_capacity(searches, results_dir / "claims", scale=scale))
    results.update(run_pd(pds, results_dir / "claims"))
    for e in exps:
        results.setdefault(e.name, Results(e, pl.DataFrame(), "not run (excluded by `only`)"))
    claims = [
        sizing_claim(),
        *hybrid_claims(results_dir),
        *paper_claims(results, scale),
        *capacity_claims(results, scale),
        *seed_claims(results, scale),
        *trace_claims(results, scale),
        *fleet_claims(results, scale),
        *tier_claims(results, scale),
        *pd_claims(results, scale),
        *validation_claims(),
    ]
    wall = time.perf_counter() - t0
    path = results_dir / "claims.md"
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(render(claims, exps, results, scale, wall, reused=reuse))
    return ClaimsReport(claims, path, time.perf_counter() - t0, results=results)


# The suite's names, importable from here (the verdicts, the report's classes, what kvsim.analysis.plots reads).
__all__ = [
    "CONFIRMED",
    "DIFFERS",
    "INCONCLUSIVE",
    "NOT_TESTABLE",
    "PAPER_FIG2",
    "PAPER_FIG13",
    "POLICY_LABEL",
    "Claim",
    "ClaimsReport",
    "Experiment",
    "Results",
    "check_results_dir",
    "check_scale",
    "experiments",
    "mooncake_ceiling",
    "run_claims",
    "run_experiments",
    "run_point",
]


def main(argv: Sequence[str]) -> int:
    """`python -m kvsim.analysis.claims [SCALE]`: the suite's verdicts in one line, no plots (`kvsim claims`
    writes claims.md and the plots); a bad SCALE is one line and exit status 2."""

    from kvsim.cli.flags import Parser  # (argparse's, its errors one line and exit status 2)

    p = Parser(
        prog="python -m kvsim.analysis.claims",
        description="Run every claim and print the verdicts' count (no claims.md, no plots: kvsim claims).",
    )
    p.add_argument("scale", nargs="?", default="1", metavar="SCALE", help="multiply every claim's requests")
    args = p.parse_args(list(argv))
    try:
        scale = check_scale(float(args.scale))
    except (ValueError, InvalidArgumentError) as exc:
        p.error(
            f"SCALE {args.scale!r}: {exc}"
            if isinstance(exc, InvalidArgumentError)
            else f"SCALE {args.scale!r} is not a number"
        )
    print(run_claims(scale=scale).summary_line())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
