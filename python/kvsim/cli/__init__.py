"""The `kvsim` command line: `kvsim run` (one simulation), `kvsim plan` (capacity search, `kvsim.cli.plan`),
`kvsim sweep` (a grid), `kvsim claims` (the claims suite that writes results/claims.md and the plots),
`kvsim calibrate` (the roofline's efficiencies fitted to measured profiles, `kvsim.cli.calibrate`).

`kvsim run` speaks vLLM's language: its flags are vLLM's engine arguments where vLLM has one
(`--num-gpu-blocks-override`, `--kv-cache-memory-bytes`, `--enable-prefix-caching` /
`--no-enable-prefix-caching`, `-tp`, ...; kvsim's own spellings stay as aliases), sizes and durations take
units (`12GiB`, `5ms`, `120us`), and it reports what `vllm bench serve` reports (`kvsim.engine.metrics`).
Every knob's default comes from `kvsim.model.config.KNOBS`, the same table SimConfig uses. Errors are one
line on stderr naming the flag, exit status 2.

`python -m bench.sweep` is `kvsim sweep` with one difference: with no arguments it runs the claims suite.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvsim.analysis.sweep import (
    CONFIG_FIELDS,
    EXECUTORS,
    SweepSpec,
    check_output,
    invalid_text,
    make_workload,
    run_sweep,
)
from kvsim.analysis.sweep_revisions import replaced_note
from kvsim.analysis.sweep_stats import point_axes, workloads_named_once
from kvsim.cli import calibrate as cli_calibrate
from kvsim.cli import plan as cli_plan
from kvsim.cli.flags import METRICS_POINTER, FlagError, Parser, _add_workload_flags, _Formatter, _run_parser
from kvsim.cli.refusals import (
    FieldSpelling,
    _refuse_idle_swap,
    _refuse_modelless_knobs,
    refuse_idle_at_every_point,
    sweep_sizing_notes,
)
from kvsim.cli.run import _int_flag, cmd_run
from kvsim.cli.sweep_fields import flag_fields
from kvsim.cli.sweep_table import TRANSPORT, VERDICTS, ci_legend, multi_gpu_transports, sweep_table
from kvsim.errors import InvalidArgumentError, KvsimError
from kvsim.lab import cli as lab_cli
from kvsim.model.config import PAPER_SETUP
from kvsim.model.units import fmt_count

RESULTS = Path("results")
DEFAULT_SHOW = ("throughput_rps", "mean_batch", "kv_utilization", "e2e_s_p99")
# What each swept knob moves, shown before DEFAULT_SHOW when it is a grid axis (a sweep over block size
# printed identical throughput, batch and utilisation for 16 and 32, and not what block size changes).
_POOL = ("peak_allocated_fraction", "preemptions")
AXIS_METRICS: dict[str, tuple[str, ...]] = {
    # (internal fragmentation as a share of the slots allocated, what a block size trades: as a share of
    # the pool it read 0.0 % for 128-token blocks that wasted 13 % of what they held)
    "block_size": ("internal_fragmentation_of_allocated", "preemptions"),
    **dict.fromkeys(
        (
            "num_blocks",
            "kv_cache_bytes",
            "gpu_memory_utilization",
            "gpu",
            "model",
            "tensor_parallel_size",
            "kv_cache_dtype",
            "activation_reserve_bytes",
        ),
        _POOL,
    ),
    "policy": ("mean_batch", "reservation_waste", "external_fragmentation", "preemptions"),
    "placement": ("external_fragmentation", "preemptions"),
    "enable_prefix_caching": ("prefix_hit_rate", "blocks_saved_by_sharing"),
    "free_order": ("prefix_hit_rate", "evictions"),
    **dict.fromkeys(
        ("preemption", "cpu_blocks", "swap_space_bytes"),
        ("preemptions", "recomputed_tokens", "swapped_blocks"),
    ),
    "sampling": ("cow_copies", "blocks_saved_by_sharing"),
    **dict.fromkeys(("max_num_seqs", "max_num_batched_tokens", "chunked_prefill"), ("preemptions",)),
    **dict.fromkeys(
        ("watermark", "watermark_rule", "admission_gate", "append_check"),
        ("preemptions", "peak_allocated_fraction"),
    ),
    **dict.fromkeys(
        (
            "replicas",
            "router",
            "router_refresh_s",
            "router_seed",
            "prefix_load_cap",
            "router_weights",
            "router_tie_break",
        ),
        ("prefix_hit_rate", "load_imbalance"),
    ),
}


# After the metrics the axes move: the throughput and the tail latency (what any knob is for).
AFTER_MOVED = ("throughput_rps", "e2e_s_p99")


def default_show(spec: SweepSpec, known: Sequence[str]) -> list[str]:
    """The metrics a sweep prints unless `--show` names them: those its grid's axes move (`AXIS_METRICS`)
    and `AFTER_MOVED`, or `DEFAULT_SHOW` for axes with none (a workload's rate), then goodput and SLO
    attainment when it has SLOs; each once, known ones only."""
    moved = [m for axis in spec.grid for m in AXIS_METRICS.get(axis, ())]
    per_slo = [m for m in known if m.startswith("slo_attainment_")]
    wanted = [
        *moved,
        *(AFTER_MOVED if moved else DEFAULT_SHOW),
        "request_goodput",
        "slo_attainment",
        *per_slo,
    ]
    return [m for m in dict.fromkeys(wanted) if m in known]


def _sweep_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="a grid parameter and its values, repeatable (crossed). NAME is a SimConfig field "
        f"({', '.join(CONFIG_FIELDS)}) or workload.<synthetic parameter> (workload.arrival_rate=1,2,4); "
        "router_weights' values are lists, separated by ';' (router_weights='prefix=3,queue=1;queue=1')",
    )
    p.add_argument(
        "--base",
        action="append",
        default=[],
        metavar="NAME=V",
        help="a fixed SimConfig field under the grid, repeatable; unset fields take kvsim.model.config.KNOBS' "
        f"defaults (the claims suite's base is the paper's setup: {PAPER_SETUP})",
    )
    _add_workload_flags(p, many=True)
    p.add_argument(
        "--seeds", type=int, default=None, metavar="K", help="seeds 0..K-1 per synthetic point (default: 1)"
    )
    p.add_argument("--file", metavar="PATH.toml", help="read the sweep from a TOML file (flags override it)")
    p.add_argument(
        "--name", default=None, help="sweep name: the output is results/<name>.parquet (default: sweep)"
    )
    p.add_argument(
        "--output",
        metavar="PATH.parquet",
        default=None,
        help="output file (default: results/<name>.parquet)",
    )
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=None,
        help="threads (the Rust engine releases the GIL), processes, or dask (default: threads)",
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
        "--goodput",
        nargs="+",
        default=None,
        metavar="METRIC:MS",
        help="SLOs in milliseconds (ttft:500 tpot:50 e2el:2000; metrics ttft, tpot, e2el), as `kvsim run "
        "--goodput`: every row gains request_goodput (req/s meeting all of them), good_requests, "
        "slo_attainment and slo_attainment_<metric> per SLO, and goodput_slos_ms; the SLOs are part of "
        "each point's identity, so a resumed sweep with other SLOs runs its points again as new rows "
        "(default: none; a sweep file's `goodput = {ttft = 500, tpot = 50}`)",
    )
    p.add_argument(
        "--show",
        metavar="M1,M2,...",
        default=None,
        help="metrics to print aggregated across seeds (mean ± 95%% CI) when the sweep ends (default: what "
        "the grid's axes move, e.g. internal_fragmentation_of_allocated,preemptions for block_size, then "
        f"{','.join(AFTER_MOVED)}; {','.join(DEFAULT_SHOW)} for axes that name none (a workload's "
        "rate); with SLOs request_goodput,slo_attainment,slo_attainment_<metric>. A pool's derived "
        "num_blocks shows beside the axes when it differs; overloaded, a run's verdict, shows yes, no or "
        "how many seeds say yes)",
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
            "Example (the paper's setup; without a gpu every step takes 1 ms and this load never fills\n"
            "the pool, so the policies would tie): kvsim sweep --base model=opt-13b --base gpu=a100-40gb \\\n"
            "    --base kv_cache_bytes=12GiB --grid block_size=8,16,32 --grid policy=vllm,orca-max --seeds 3"
        ),
        epilog=METRICS_POINTER,
    )
    _sweep_flags(p)
    return p


def _claims_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "claims",
        formatter_class=_Formatter,
        help="run the claims suite: results/claims.md and results/plots/*.png",
        description="Run every claim of DESIGN.md §Claims on the engine; write results/claims.md and the plots.",
    )
    _claims_flags(p)
    return p


def _claims_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", metavar="DIR", default=str(RESULTS), help="output folder (default: results)")
    p.add_argument(
        "--workers", type=int, default=None, metavar="N", help="parallel simulations (default: CPU count)"
    )
    p.add_argument(
        "--scale",
        default=1.0,
        metavar="FACTOR",
        help="multiply every claim's request count (0.1 for a quick look; counts are written to claims.md) "
        "(default: 1)",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the plots")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="re-read each experiment's rows from <results>/claims/*.parquet instead of running it again",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress output")


# Subcommands: name -> (adds its parser, runs it). Another subcommand registers itself here.
SUBCOMMANDS: dict[
    str, tuple[Callable[[Any], argparse.ArgumentParser], Callable[[argparse.Namespace], int]]
] = {}


def build_parser() -> argparse.ArgumentParser:
    """The `kvsim` parser with its subcommands (`SUBCOMMANDS`)."""
    from kvsim import __version__

    p = Parser(
        prog="kvsim",
        formatter_class=_Formatter,
        description="kvsim: simulate paged KV-cache memory management for LLM serving (vLLM PagedAttention).",
        epilog=METRICS_POINTER,
    )
    p.add_argument("--version", action="version", version=f"kvsim {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}")
    parsers = {name: add(sub) for name, (add, _) in SUBCOMMANDS.items()}
    p.set_defaults(_subparsers=parsers)
    return p


# -------------------------------------------------------------------------------------------- sweep


def spec_from_args(args: argparse.Namespace) -> tuple[SweepSpec, dict[str, Any]]:
    """A `SweepSpec` and run options from sweep flags (and `--file`)."""
    if args.file:
        spec, options = SweepSpec.from_toml(args.file)
    else:
        spec, options = SweepSpec(), {}
    flag_base, flag_grid = flag_fields(args, spec)
    # A flag overrides the file's value of its field, in the base or the grid; a field given in both
    # --base and --grid (or in both of a file's tables) is refused by SweepSpec.points.
    args.base_flags = set(flag_base)  # (a base field given by --base, not by the file: its refusal's name)
    args.grid_flags = set(flag_grid)
    spec.base = {**{k: v for k, v in spec.base.items() if k not in flag_grid}, **flag_base}
    spec.grid = {**{k: v for k, v in spec.grid.items() if k not in flag_base}, **flag_grid}
    if args.workload:
        spec.workloads = list(args.workload)
    if args.seeds is not None:
        spec.seeds = args.seeds
    if args.requests is not None:
        spec.requests = _int_flag("--requests", args.requests, 1)
    if args.backend:
        spec.backend = args.backend
    if args.name:
        spec.name = args.name
    if args.goodput is not None:
        from kvsim.engine.metrics import parse_goodput

        try:
            spec.goodput = parse_goodput(args.goodput)
        except InvalidArgumentError as exc:
            raise FlagError(f"argument --goodput: {exc}") from None
    for k in ("executor", "workers", "scheduler", "output"):
        if getattr(args, k) is not None:
            options[k] = getattr(args, k)
    if args.workers is not None:
        options["workers"] = _int_flag("--workers", args.workers, 1)
    if args.seeds is not None:
        _int_flag("--seeds", args.seeds, 1)
    options.setdefault("output", str(RESULTS / f"{spec.name}.parquet"))
    return spec, options


def _flag_error(flag: str, exc: InvalidArgumentError) -> InvalidArgumentError:
    """`exc` reworded to name the flag the bad value came from."""
    return InvalidArgumentError(f"argument {flag}: {exc}")


def sweep_configs(args: argparse.Namespace, spec: SweepSpec) -> list[tuple[Any, dict[str, Any]]]:
    """The sweep's distinct configurations (its valid ones with `--skip-invalid`), each with what was given
    for it (its base and grid fields)."""
    configs: dict[str, tuple[Any, dict[str, Any]]] = {}
    for point in spec.points(skip_invalid=args.skip_invalid):
        key = repr(sorted(point.config.items(), key=lambda kv: kv[0]))
        if key not in configs:
            configs[key] = (point.sim_config(), dict(point.config))
    return list(configs.values())


def sweep_field(args: argparse.Namespace, spec: SweepSpec, name: str) -> str:
    """A sweep's field as given: `--base NAME` / `--grid NAME`, or the sweep file's `[base] NAME` /
    `[grid] NAME`."""
    table = "grid" if name in spec.grid else "base"
    if name in getattr(args, f"{table}_flags", set()) or not args.file:
        return f"--{table} {name}"
    return f"sweep file {args.file}: [{table}] {name}"


def refuse_idle_fields(args: argparse.Namespace, spec: SweepSpec) -> list[tuple[Any, dict[str, Any]]]:
    """`kvsim run`'s refusals of a knob that does nothing (`kvsim.cli.refusals.refuse_idle_at_every_point`),
    over the sweep's points: a base field is refused only where no point reads it (a base `placement`
    under a grid of policies with a contiguous one, a base `router` under a grid of replica counts),
    named as given (`--base NAME=V`, or the sweep file's `[base]`). A grid axis is what the sweep measures,
    not refused: values that do the same give the same rows. Returns the configurations (`sweep_configs`)."""

    def where(name: str) -> str:
        said = sweep_field(args, spec, name)
        return f"argument {said}" if said.startswith("--") else said

    pairs = sweep_configs(args, spec)
    configs = {i: c for i, (c, _) in enumerate(pairs)}
    points = [(c, None) for c in configs.values()]
    refuse_idle_at_every_point(points, where, FieldSpelling(), given=set(spec.base))
    if configs:
        # (the swap space and the modelless knobs, as kvsim run refuses them: over every point)
        values = list(configs.values())
        _refuse_idle_swap(None, values, spec.base, {}, where=where)
        _refuse_modelless_knobs(None, values[0], spec.base, {}, where=where, configs=values)
    return pairs


def known_metrics(spec: SweepSpec, skip_invalid: bool = False) -> list[str]:
    """The metric columns a sweep's rows will have: the summaries of two-request runs of the sweep's
    points (its valid ones with `skip_invalid`; with their SLOs' goodput columns), one of each kind of
    run whose summary has its own columns (a CPU tier's, a fleet's, a P/D split's, a model's KV-cache
    groups), in the order they first appear, plus the steady-state columns and the wall times. A metric some rows lack (a tier's where
    the grid also runs without one) is null there."""
    from kvsim.analysis.sweep import simulate_point

    known: dict[str, None] = {}
    kinds: set[tuple[Any, ...]] = set()
    for point in spec.points(skip_invalid=skip_invalid):
        cfg = point.sim_config()
        kind = (bool(cfg.kv_offloading_chunks), cfg.replicas > 1, cfg.prefill_replicas, cfg.model)
        if kind in kinds:
            continue
        kinds.add(kind)
        workload = make_workload(point.workload, point.workload_params, 2, point.seed)
        summary = simulate_point(point, workload, cfg, False).summary  # a fleet's too
        # (a None is a metric with no value in the probe: a mean over no load)
        known |= dict.fromkeys(k for k, v in summary.items() if v is None or isinstance(v, int | float))
    return [*known, "arrival_span_s", "steady_requests", *VERDICTS, "wall_s", "workload_s"]


def with_rejected(show: list[str], frame: Any) -> list[str]:
    """The default metrics (`default_show`) with `rejected` where some point rejected requests (before the
    throughput, which is over the requests served): points that reject different requests are measured on
    different requests, and a table without the count hid it (llama-3-8b's 8,192-token context refuses
    the long prompts gpt-oss-20b's 131,072 serves)."""
    if (
        "rejected" in show
        or "rejected" not in frame.columns
        or not (frame["rejected"].fill_null(0) > 0).any()
    ):
        return show
    at = show.index("throughput_rps") if "throughput_rps" in show else len(show)
    return [*show[:at], "rejected", *show[at:]]


def rejected_note(frame: Any) -> str | None:
    """A note when a sweep's points rejected different numbers of requests (a point's mean over its
    seeds): their metrics are over different requests served."""
    import polars as pl

    if "rejected" not in frame.columns or "point_id" not in frame.columns:
        return None
    n = [pl.col("num_requests").mean()] if "num_requests" in frame.columns else []
    per_point = frame.group_by("point_id", maintain_order=True).agg(
        pl.col("rejected").fill_null(0).mean(), *n
    )
    lo, hi = per_point["rejected"].min(), per_point["rejected"].max()
    if lo == hi:
        return None
    total = per_point["num_requests"].unique().to_list() if n else []
    of = f" of {total[0]:,.0f}" if len(total) == 1 else ""
    return (
        f"the points rejected different numbers of requests ({lo:,.4g} to {hi:,.4g}{of}; column rejected), "
        "so they served different requests: a point's throughput and latencies are over the requests it "
        "served, not one set shared by every point (a rejected request was never served: e.g. a prompt "
        "reaching max_model_len, which defaults to the model's context)"
    )


def transport_note(frame: Any) -> str | None:
    """A note when every multi-GPU point of a sweep stages its collectives through host memory (PCIe
    without peer-to-peer: a GeForce card's default, or `pcie_p2p=false`), which no column shows then (the
    table has a `collective_transport` column only where the multi-GPU points' transports differ:
    `sweep_table`); none otherwise."""
    from kvsim.model.collectives import HOST_STAGED_LATENCY_PS, HOST_STAGED_SHARE

    kinds = multi_gpu_transports(frame)
    if len(kinds) != 1 or "host-staged" not in kinds[0]:
        return None
    return (
        f"every multi-GPU point stages its collectives through host memory ({TRANSPORT} {kinds[0]}: PCIe "
        f"without peer-to-peer, 1/{HOST_STAGED_SHARE} of the host link's rate and "
        f"{HOST_STAGED_LATENCY_PS / 1e6:g} µs more a collective); pcie_p2p=true prices GPUs that do "
        "peer-to-peer"
    )


def _runs_of(outcome: Any) -> str:
    """What the sweep's runs are, where its rows say: ": 4 points × 2 seeds" (a row is a run, one point's
    one seed; the notes count points, newcomer46 found "8 points run" beside "2 of the sweep's 4 points")."""
    from kvsim.analysis.sweep_stats import parameter_columns

    frame = outcome.frame
    params = parameter_columns(frame)
    if frame.height == 0 or not params or "seed" not in frame.columns:
        return ""
    points, seeds = frame.select(params).unique().height, frame["seed"].n_unique()
    if points * seeds != outcome.ran + outcome.skipped:
        return ""
    return f": {fmt_count(points, 'point')} × {fmt_count(seeds, 'seed')}"


def _refuse_no_pool(args: argparse.Namespace, spec: SweepSpec) -> None:
    """`kvsim run`'s refusals of a sweep with no pool to simulate, before anything else is checked or run
    (else every point failed as an "invalid grid combination", `num_blocks None`, one line a point): no
    model nor `num_blocks`; a model with no memory to size a pool from (no `gpu`, `kv_cache_bytes` nor
    `num_blocks`); memory with no model to size one for. Fields named as given (`sweep_field`)."""
    given = [k for k in ("model", "num_blocks", "gpu", "kv_cache_bytes", "gpu_memory_utilization")
             if k in spec.base or k in spec.grid]  # fmt: skip

    def said(name: str) -> str:
        where = sweep_field(args, spec, name)
        raw = [b for b in args.base if b.partition("=")[0].strip() == name]
        return f"--base {raw[-1].strip()}" if where.startswith("--base") and raw else where

    if "num_blocks" in given:
        return
    if "model" in given and not {"gpu", "kv_cache_bytes"} & set(given):
        raise FlagError(
            f"no pool to simulate: {said('model')} without a gpu has no memory to size one from: give --base "
            "gpu=NAME (sized as vLLM does), --base kv_cache_bytes=SIZE, or --base num_blocks=N (or a --grid "
            "of one of them)"
        )
    memory = [said(k) for k in given if k != "model"]
    if "model" not in given and memory:
        raise FlagError(
            f"no pool to simulate: {' and '.join(memory)} without a model: a pool's blocks are sized from the "
            "model's bytes a token: give --base model=NAME (sized as vLLM does), or --base num_blocks=N (or a "
            "--grid of one of them)"
        )
    if "model" not in given:
        raise FlagError(
            "no pool to simulate: give --base model=NAME --base gpu=NAME (sized as vLLM does), --base "
            "model=NAME --base kv_cache_bytes=SIZE, or --base num_blocks=N (or a --grid of one of them)"
        )


def cmd_sweep(args: argparse.Namespace) -> int:
    spec, options = spec_from_args(args)
    _refuse_no_pool(args, spec)
    try:
        check_output(options["output"])
    except InvalidArgumentError as exc:
        raise _flag_error("--output", exc) from None
    if args.show is not None:
        show = [m.strip() for m in args.show.split(",") if m.strip()]
        if not show:  # (it ran the sweep and printed no table)
            raise FlagError(
                f"argument --show: {args.show!r} names no metric; name one or more, comma-separated"
            )
        twice = sorted({m for m in show if show.count(m) > 1})
        if twice:  # checked before any work: the table would have two columns of one name
            raise FlagError(f"argument --show: {','.join(twice)} given twice; name each metric once")
    configs = refuse_idle_fields(args, spec)
    # (kvsim run's notes on a sizing field another overrides, once for the sweep: printed with the others)
    sizing = sweep_sizing_notes(configs, lambda name: sweep_field(args, spec, name))
    known = known_metrics(spec, args.skip_invalid)
    if args.show is None:
        show = default_show(spec, known)
    unknown = [m for m in show if m not in known]
    if unknown:
        needs_slos = any(m in ("request_goodput", "good_requests") or m.startswith("slo_") for m in unknown)
        hint = " (goodput and SLO attainment need --goodput METRIC:MS)" if needs_slos else ""
        raise InvalidArgumentError(
            f"--show {','.join(unknown)}: not a metric of a sweep row{hint}; metrics: {', '.join(known)}"
        )
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
    print(f"{spec.name}: {fmt_count(outcome.ran, 'run')} now, {outcome.skipped:,} already in {outcome.path}"
          f"{_runs_of(outcome)} ({outcome.wall_s:.1f} s)")  # fmt: skip
    replaced = replaced_note(outcome.replaced, outcome.path)
    if replaced is not None:
        print(f"note: {replaced}")
    if args.skip_invalid:
        bad = spec.invalid()
        if bad:  # (what --skip-invalid left out, and why: it said nothing)
            print(
                f"note: {fmt_count(len(bad), 'invalid grid combination')} skipped (--skip-invalid): "
                f"{invalid_text(bad)}"
            )
    if show and outcome.frame.height:
        import polars as pl

        # (a metric's whole name: polars cuts names and cells at 32 characters by default, and
        # internal_fragmentation_of_allocated read `internal_fragmentation_of_allo…`; a cell wrapped onto
        # two lines at 200 characters in all), and each column's unit under its name, not its dtype
        with pl.Config(
            tbl_rows=200, tbl_cols=30, tbl_width_chars=1000, tbl_hide_dataframe_shape=True, fmt_str_lengths=80,
            tbl_hide_column_data_types=True,
        ):  # fmt: skip
            if args.show is None:
                show = with_rejected(show, outcome.frame)
            # (a metric the rows already in the file lack, written before it existed: null cells, and a
            # note, where polars raised ColumnNotFoundError)
            lacking = [m for m in show if m not in outcome.frame.columns]
            frame = outcome.frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(m) for m in lacking)
            table = sweep_table(frame, spec.grid, show)
            print(table)
            for line in ci_legend(table):
                print(line)
        if lacking:
            print(
                f"note: --show {','.join(lacking)}: the rows in {outcome.path} lack "
                f"{'it' if len(lacking) == 1 else 'them'} (written by a kvsim before the metric), so the cells "
                "are null; --no-resume or a new --output runs the points again"
            )
        note = rejected_note(outcome.frame)
        if note is not None:
            print(f"note: {note}")
    if outcome.frame.height:
        from kvsim.analysis.steady_state import sweep_overloaded_note, sweep_too_short_note

        named = workloads_named_once(outcome.frame, spec.grid)
        axes = point_axes(named, spec.grid)
        # (kvsim run's steady-state rules, once for the sweep: overloaded, then too short)
        for note in (sweep_overloaded_note(named, axes), sweep_too_short_note(named, axes)):
            if note is not None:
                print(f"note: {note}")
        staged = transport_note(outcome.frame)
        if staged is not None:
            print(f"note: {staged}")
    for line in sizing:
        print(f"note: {line}")
    return 0


def cmd_claims(args: argparse.Namespace) -> int:
    from kvsim.analysis.claims import check_results_dir, check_scale, run_claims

    try:  # the messages start with the option's name: "--scale nan must be ...", "--results x: ..."
        try:
            scale = float(args.scale)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"scale {args.scale!r} must be a finite number > 0") from None
        check_scale(scale)
        check_results_dir(Path(args.results))
    except InvalidArgumentError as exc:
        flag = "--results" if str(exc).startswith("results") else "--scale"
        raise InvalidArgumentError(f"argument {flag}: {exc}") from None
    workers = None if args.workers is None else _int_flag("--workers", args.workers, 1)
    report = run_claims(
        Path(args.results),
        workers=workers,
        scale=scale,
        progress=not args.no_progress,
        reuse=args.reuse,
    )
    if not args.no_plots:
        from kvsim.analysis.plots import plot_all

        report.plots = plot_all(Path(args.results), report.results)
    print(report.table())
    print()
    print(report.summary_line())
    return 0


def _validate_gpu_parser(sub: Any) -> argparse.ArgumentParser:
    from kvsim.gpu import validate  # no torch until it runs (kvsim.gpu.validate: its own flags)

    return validate.add_subparser(sub)


def cmd_validate_gpu(args: argparse.Namespace) -> int:
    from kvsim.gpu.validate import run as validate_gpu

    return validate_gpu(args, "kvsim validate-gpu", list(args._argv[1:]))


SUBCOMMANDS.update(
    {
        "run": (_run_parser, cmd_run),
        "plan": (cli_plan.add_parser, cli_plan.cmd_plan),
        "sweep": (_sweep_parser, cmd_sweep),
        "claims": (_claims_parser, cmd_claims),
        "validate-gpu": (_validate_gpu_parser, cmd_validate_gpu),
        "calibrate": (cli_calibrate.add_parser, cli_calibrate.cmd_calibrate),
        "lab": (lab_cli.add_parser, lab_cli.main),
    }
)


def out_of_memory(exc: MemoryError) -> str:
    """One line for a run this machine cannot hold (numpy's "Unable to allocate 7.28 TiB for an array with
    shape ..." says how much; `--requests 1000000000000` once ended in a traceback)."""
    first = str(exc).split(" for an array", 1)[0].strip()
    asked = f" ({first[0].lower()}{first[1:]})" if first else ""
    return (
        f"out of memory{asked}: this machine cannot hold the run as asked; fewer requests (--requests) or a "
        "shorter trace"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `kvsim` console script: the exit status (2 for any bad input, one line)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # the subcommand's usage, not the top-level one
            args._subparsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    args._argv = argv
    try:
        return SUBCOMMANDS[args.command][1](args)
    except KvsimError as exc:
        print(f"kvsim {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError as exc:
        print(f"kvsim {args.command}: error: {out_of_memory(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"kvsim {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`kvsim run ... | head`): not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def bench_main(argv: Sequence[str] | None = None) -> int:
    """`python -m bench.sweep`: the claims suite with no arguments, else a sweep (same flags)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        return main(["claims"])
    p = Parser(
        prog="python -m bench.sweep",
        formatter_class=_Formatter,
        description="With no arguments: the claims suite (results/claims.md, results/plots/). "
        "Otherwise a sweep; the flags are those of `kvsim sweep`.",
    )
    _sweep_flags(p)
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return cmd_sweep(args)
    except KvsimError as exc:
        print(f"bench.sweep: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError as exc:
        print(f"bench.sweep: error: {out_of_memory(exc)}", file=sys.stderr)
        return 2
