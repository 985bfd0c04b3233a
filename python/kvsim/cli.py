"""The `kvsim` command line: `kvsim run` (one simulation), `kvsim sweep` (a grid), `kvsim claims` (the
claims suite that writes results/claims.md and the plots).

`python -m bench.sweep` is `kvsim sweep` with one difference: with no arguments it runs the claims suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvsim.errors import InvalidArgumentError, KvsimError
from kvsim.lab import cli as lab_cli
from kvsim.sweep import (
    CONFIG_FIELDS,
    DEFAULT_BASE,
    EXECUTORS,
    FIELD_HELP,
    WORKLOADS,
    SweepSpec,
    aggregate,
    coerce,
    make_workload,
    parse_grid_args,
    parse_workload,
    run_sweep,
)

RESULTS = Path("results")
_WORKLOAD_HELP = "; ".join(f"{k}: {v.description}" for k, v in WORKLOADS.items())
_SUMMARY_ORDER = (
    "num_requests",
    "completed",
    "rejected",
    "makespan_s",
    "throughput_rps",
    "throughput_tok_s",
    "mean_batch",
    "peak_batch",
    "kv_utilization",
    "kv_allocated_fraction",
    "internal_fragmentation",
    "reservation_waste",
    "external_fragmentation",
    "stored_share_of_allocated",
    "prefix_hit_rate",
    "blocks_saved_by_sharing",
    "preemptions",
    "ttft_s_p50",
    "ttft_s_p99",
    "tpot_s_p50",
    "tpot_s_p99",
    "e2e_s_p50",
    "e2e_s_p99",
    "normalized_latency_s_per_token",
)


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's line breaks and shows each flag's default."""


def _add_workload_flags(p: argparse.ArgumentParser, *, many: bool) -> None:
    p.add_argument(
        "--workload",
        action="append" if many else "store",
        metavar="NAME[:K=V,...]",
        default=None,
        help=(
            "workload, optionally with synthetic() parameters (sharegpt:arrival_rate=4,max_tokens=2048; "
            "other keys go to length_params, a/b is a range)"
            + (", repeatable (crossed with the grid)" if many else "")
            + f". Names: {_WORKLOAD_HELP}. Default: sharegpt"
        ),
    )
    p.add_argument(
        "--requests",
        type=int,
        default=None,
        metavar="N",
        help="requests per simulation (traces: the first N rows); default 10000",
    )
    p.add_argument("--backend", choices=("rust", "reference"), default=None, help="engine (default rust)")


def _run_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run",
        formatter_class=_Formatter,
        help="run one simulation and print its summary",
        description=(
            "Run one simulation from flags or a TOML file and print the summary table.\n\n"
            "Every SimConfig field is a flag (--block-size 32 --policy orca-max ...). Unset fields take\n"
            f"the paper's setup: {DEFAULT_BASE}.\n"
            "A TOML file may hold `workload`, `requests`, `seed`, `backend` and a [config] table."
        ),
    )
    p.add_argument("--toml", metavar="PATH", help="read the run from a TOML file (flags override it)")
    _add_workload_flags(p, many=False)
    p.add_argument("--seed", type=int, default=None, help="workload seed (default 0)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object (for machines)")
    g = p.add_argument_group("SimConfig fields")
    for name in CONFIG_FIELDS:
        g.add_argument(
            f"--{name.replace('_', '-')}",
            *([f"--{name}"] if "_" in name else []),
            dest=f"cfg_{name}",
            metavar="V",
            default=None,
            help=FIELD_HELP.get(name, name),
        )
    return p


def _sweep_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="a grid parameter and its values, repeatable (crossed). NAME is a SimConfig field "
        f"({', '.join(CONFIG_FIELDS)}) or workload.<synthetic parameter> (workload.arrival_rate=1,2,4)",
    )
    p.add_argument(
        "--base",
        action="append",
        default=[],
        metavar="NAME=V",
        help=f"a fixed SimConfig field under the grid, repeatable; defaults {DEFAULT_BASE}",
    )
    _add_workload_flags(p, many=True)
    p.add_argument(
        "--seeds", type=int, default=None, metavar="K", help="seeds 0..K-1 per synthetic point (default 1)"
    )
    p.add_argument("--file", metavar="PATH.toml", help="read the sweep from a TOML file (flags override it)")
    p.add_argument(
        "--name", default=None, help="sweep name: the output is results/<name>.parquet (default sweep)"
    )
    p.add_argument(
        "--output", metavar="PATH.parquet", default=None, help="output file (default results/<name>.parquet)"
    )
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=None,
        help="threads (default; the Rust engine releases the GIL), processes, or dask",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="Dask scheduler address (tcp://host:port); without it --executor dask starts a local cluster",
    )
    p.add_argument(
        "--workers", type=int, default=None, metavar="N", help="parallel workers (default: CPU count)"
    )
    p.add_argument(
        "--no-resume", action="store_true", help="start the output afresh instead of skipping finished points"
    )
    p.add_argument(
        "--skip-invalid", action="store_true", help="drop invalid grid combinations instead of failing"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--show",
        metavar="M1,M2,...",
        default="throughput_rps,mean_batch,kv_utilization,e2e_s_p99",
        help="metrics to print aggregated across seeds (mean ± 95%% CI) when the sweep ends",
    )


def _sweep_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "sweep",
        formatter_class=_Formatter,
        help="run a parameter grid in parallel into results/<name>.parquet",
        description=(
            "Cross a grid of SimConfig fields with workloads and seeds, run the points in parallel,\n"
            "append one row per point (parameters, summary metrics, wall time) to a parquet file.\n"
            "Points already in the file are skipped (resume). Bad grids fail before any work.\n\n"
            "Example: kvsim sweep --grid block_size=8,16,32 --grid policy=vllm,orca-max --seeds 3"
        ),
    )
    _sweep_flags(p)
    return p


def _claims_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "claims",
        formatter_class=_Formatter,
        help="run the claims suite: results/claims.md and results/plots/*.png",
        description="Run every claim of SPEC §8 on the engine; write results/claims.md and the plots.",
    )
    _claims_flags(p)
    return p


def _claims_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", metavar="DIR", default=str(RESULTS), help="output folder")
    p.add_argument(
        "--workers", type=int, default=None, metavar="N", help="parallel simulations (default: CPU count)"
    )
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every claim's request count (0.1 for a quick look; counts are written to claims.md)",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the plots")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="re-read each experiment's rows from <results>/claims/*.parquet instead of running it again",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress output")


def build_parser() -> argparse.ArgumentParser:
    """The `kvsim` parser with its three subcommands."""
    p = argparse.ArgumentParser(
        prog="kvsim",
        formatter_class=_Formatter,
        description="kvsim: simulate paged KV-cache memory management for LLM serving (vLLM PagedAttention).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{run,sweep,claims,lab}")
    _run_parser(sub)
    _sweep_parser(sub)
    _claims_parser(sub)
    lab_cli.add_parser(sub)
    return p


# ---------------------------------------------------------------------------------------------- run


def _fmt_value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def summary_table(summary: dict[str, Any]) -> str:
    """The summary as an aligned two-column table (main metrics first)."""
    keys = [k for k in _SUMMARY_ORDER if k in summary] + sorted(k for k in summary if k not in _SUMMARY_ORDER)
    width = max(len(k) for k in keys)
    return "\n".join(f"{k:<{width}}  {_fmt_value(summary[k])}" for k in keys)


def cmd_run(args: argparse.Namespace) -> int:
    import kvsim

    data: dict[str, Any] = {}
    if args.toml:
        try:
            data = tomllib.loads(Path(args.toml).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidArgumentError(f"run file {args.toml}: {exc}") from None
        unknown = set(data) - {"workload", "requests", "seed", "backend", "config"}
        if unknown:
            raise InvalidArgumentError(f"run file {args.toml}: unknown keys {sorted(unknown)}")
    cfg: dict[str, Any] = {**DEFAULT_BASE, **data.get("config", {})}
    for name in CONFIG_FIELDS:
        value = getattr(args, f"cfg_{name}")
        if value is not None:
            cfg[name] = value
    for k in list(cfg):
        if k not in CONFIG_FIELDS:
            raise InvalidArgumentError(f"unknown SimConfig field {k!r}")
        cfg[k] = coerce(k, cfg[k])
    config = kvsim.SimConfig(**cfg)
    name, params = parse_workload(args.workload or data.get("workload", "sharegpt"))
    requests = args.requests if args.requests is not None else int(data.get("requests", 10_000))
    seed = args.seed if args.seed is not None else int(data.get("seed", 0))
    if requests < 1:
        raise InvalidArgumentError(f"requests {requests} must be at least 1")
    workload = make_workload(name, params, requests, seed)
    result = kvsim.simulate(workload, config, backend=args.backend or data.get("backend", "rust"))
    if args.json:
        print(json.dumps({"config": config.to_dict(), "summary": result.summary}, default=str))
    else:
        print(f"workload {name} {params or ''} requests {len(workload)} seed {seed}")
        print(f"config   {', '.join(f'{k}={v}' for k, v in config.to_dict().items() if v is not None)}\n")
        print(summary_table(result.summary))
    return 0


# -------------------------------------------------------------------------------------------- sweep


def spec_from_args(args: argparse.Namespace) -> tuple[SweepSpec, dict[str, Any]]:
    """A `SweepSpec` and run options from sweep flags (and `--file`)."""
    if args.file:
        spec, options = SweepSpec.from_toml(args.file)
    else:
        spec, options = SweepSpec(), {}
    if args.grid:
        spec.grid = {**spec.grid, **parse_grid_args(args.grid)}
    for item in args.base:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise InvalidArgumentError(f"--base {item!r}: expected NAME=VALUE")
        if key.strip() not in CONFIG_FIELDS:
            raise InvalidArgumentError(f"--base {key.strip()!r} is not a SimConfig field")
        spec.base[key.strip()] = coerce(key.strip(), value)
    if args.workload:
        spec.workloads = list(args.workload)
    if args.seeds is not None:
        spec.seeds = args.seeds
    if args.requests is not None:
        spec.requests = args.requests
    if args.backend:
        spec.backend = args.backend
    if args.name:
        spec.name = args.name
    for k in ("executor", "workers", "scheduler", "output"):
        if getattr(args, k) is not None:
            options[k] = getattr(args, k)
    options.setdefault("output", str(RESULTS / f"{spec.name}.parquet"))
    return spec, options


def cmd_sweep(args: argparse.Namespace) -> int:
    spec, options = spec_from_args(args)
    outcome = run_sweep(
        spec,
        output=options["output"],
        executor=options.get("executor", "threads"),
        workers=options.get("workers"),
        scheduler=options.get("scheduler"),
        resume=not args.no_resume,
        progress=not args.no_progress,
        skip_invalid=args.skip_invalid,
    )
    print(
        f"{spec.name}: {outcome.ran} points run, {outcome.skipped} already in {outcome.path} "
        f"({outcome.wall_s:.1f} s)"
    )
    show = [m for m in args.show.split(",") if m and m in outcome.frame.columns]
    if show and outcome.frame.height:
        import polars as pl

        agg = aggregate(outcome.frame, metrics=show)
        varying = [c for c in agg.columns if not c.endswith(("_mean", "_std", "_ci95")) and c != "n_seeds"]
        varying = [c for c in varying if agg[c].n_unique() > 1] or ["workload"]
        cols = [pl.col(c) for c in varying] + [pl.col("n_seeds")]
        for m in show:
            cols.append(
                pl.format(
                    "{} ± {}", pl.col(f"{m}_mean").round_sig_figs(4), pl.col(f"{m}_ci95").round_sig_figs(2)
                )
                .fill_null(pl.col(f"{m}_mean").round_sig_figs(4).cast(pl.String))
                .alias(m)
            )
        with pl.Config(tbl_rows=200, tbl_cols=30, tbl_width_chars=200, tbl_hide_dataframe_shape=True):
            print(agg.select(cols))
    return 0


def cmd_claims(args: argparse.Namespace) -> int:
    from kvsim.claims import run_claims

    report = run_claims(
        Path(args.results),
        workers=args.workers,
        scale=args.scale,
        plots=not args.no_plots,
        progress=not args.no_progress,
        reuse=args.reuse,
    )
    print(report.table())
    print()
    print(report.summary_line())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `kvsim` console script."""
    args = build_parser().parse_args(argv)
    try:
        return {"run": cmd_run, "sweep": cmd_sweep, "claims": cmd_claims, "lab": lab_cli.main}[args.command](
            args
        )
    except KvsimError as exc:
        print(f"kvsim {args.command}: error: {exc}", file=sys.stderr)
        return 2


def bench_main(argv: Sequence[str] | None = None) -> int:
    """`python -m bench.sweep`: the claims suite with no arguments, else a sweep (same flags)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        return main(["claims"])
    p = argparse.ArgumentParser(
        prog="python -m bench.sweep",
        formatter_class=_Formatter,
        description="With no arguments: the claims suite (results/claims.md, results/plots/). "
        "Otherwise a sweep; the flags are those of `kvsim sweep`.",
    )
    _sweep_flags(p)
    args = p.parse_args(argv)
    try:
        return cmd_sweep(args)
    except KvsimError as exc:
        print(f"bench.sweep: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
