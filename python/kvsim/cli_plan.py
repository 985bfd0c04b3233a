"""`kvsim plan`: the highest request rate a configuration sustains under SLOs (`kvsim.plan`), from the
same workload and configuration flags as `kvsim run`, printing every probe as a table and the answer.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kvsim.cli_run import (
    METRICS_POINTER,
    FlagError,
    _config_from_args,
    _float_flag,
    _Formatter,
    _int_flag,
    _workload_from_args,
    add_run_inputs,
    read_run_file,
)
from kvsim.errors import InvalidArgumentError
from kvsim.plan_search import DEFAULT_MAX_PROBES, METRICS
from kvsim.sweep import EXECUTORS


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "plan",
        formatter_class=_Formatter,
        help="capacity search: the highest request rate that meets SLOs",
        description=(
            "Find the highest request rate at which a configuration meets SLOs on a workload's traffic:\n"
            "its arrivals are scaled (a trace replays faster, a generator's rate changes), each probe is\n"
            "a full simulation, first doubling or halving from the workload's own rate until one passes\n"
            "and one fails, then bisecting to --precision. Probes of a round run in parallel\n"
            "(--executor, --workers). The search assumes a lower rate never fails where a higher one\n"
            "passes; probes that contradict it are reported (NOT MONOTONE), not hidden.\n"
            "The workload and configuration flags are kvsim run's (DESIGN.md §Capacity search).\n\n"
            "Example: kvsim plan --model opt-13b --gpu a100-40gb --workload sharegpt --requests 2000 \\\n"
            "    --slo ttft_p99:2s --slo tpot_p99:100ms"
        ),
        epilog=METRICS_POINTER,
    )
    add_run_inputs(p)
    s = p.add_argument_group("search")
    s.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC:BOUND",
        help="an SLO, repeatable (all must hold): a latency bound with its unit (ttft_p99:2s, "
        "tpot_p99:100ms, normalized_latency:250ms, per token) or goodput_fraction:0.99 (with --goodput). "
        f"Metrics: {', '.join(METRICS)} (required)",
    )
    s.add_argument(
        "--goodput",
        nargs="+",
        default=None,
        metavar="METRIC:MS",
        help="per-request SLOs in milliseconds (ttft:500 tpot:50, as kvsim run --goodput) that "
        "goodput_fraction counts (default: none)",
    )
    s.add_argument(
        "--precision",
        default="2%",
        metavar="REL",
        help="stop when the bracket's upper rate is within this of its lower one (2%% or 0.02)",
    )
    s.add_argument(
        "--start-rate",
        metavar="REQ/S",
        default=None,
        help="the first rate probed (default: the workload's own)",
    )
    s.add_argument(
        "--min-rate", metavar="REQ/S", default=None, help="the floor of the search (default: start / 4096)"
    )
    s.add_argument(
        "--max-rate", metavar="REQ/S", default=None, help="the cap of the search (default: start x 4096)"
    )
    s.add_argument(
        "--max-probes",
        metavar="N",
        default=str(DEFAULT_MAX_PROBES),
        help=f"at most N simulations (default: {DEFAULT_MAX_PROBES})",
    )
    s.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="threads",
        help="where a round's probes run: threads, processes or dask (kvsim sweep's executors)",
    )
    s.add_argument(
        "--workers",
        default=None,
        metavar="N",
        help="probes per round, run in parallel (default: CPU count)",
    )
    s.add_argument(
        "--scheduler", metavar="ADDRESS", default=None, help="Dask scheduler address (with --executor dask)"
    )
    o = p.add_argument_group("output")
    o.add_argument(
        "--plot", metavar="PATH.png", default=None, help="draw the probes, the bounds and the knee"
    )
    o.add_argument("--json", action="store_true", help="print the result as one JSON object (for machines)")
    return p


def _search_options(args: argparse.Namespace) -> dict[str, Any]:
    from kvsim.metrics import parse_goodput
    from kvsim.plan_search import check_precision, parse_slos

    if not args.slo:
        raise FlagError("argument --slo: give at least one SLO (--slo ttft_p99:2s --slo tpot_p99:100ms)")
    opts: dict[str, Any] = {}
    for flag, key, value, convert in (
        ("--slo", "slos", args.slo, parse_slos),
        ("--precision", "precision", args.precision, check_precision),
        ("--goodput", "goodput", args.goodput, lambda v: parse_goodput(v) if v is not None else None),
    ):
        try:
            opts[key] = convert(value)
        except InvalidArgumentError as exc:
            raise FlagError(f"argument {flag}: {exc}") from None
    for flag, key in (("--start-rate", "start_rate"), ("--min-rate", "min_rate"), ("--max-rate", "max_rate")):
        if getattr(args, key) is not None:
            opts[key] = _float_flag(flag, getattr(args, key))
    opts["max_probes"] = _int_flag("--max-probes", args.max_probes, 2)
    if args.workers is not None:
        opts["workers"] = _int_flag("--workers", args.workers, 1)
    if args.scheduler and args.executor != "dask":
        raise FlagError("argument --scheduler: needs --executor dask")
    opts["executor"] = args.executor
    opts["scheduler"] = args.scheduler
    return opts


def _check_plot_path(path: str) -> None:
    from pathlib import Path

    p = Path(path)
    if p.suffix.lower() != ".png":
        raise FlagError(f"argument --plot: {path!r} must be a .png file")
    if p.exists() and p.is_dir():
        raise FlagError(f"argument --plot: {path} is a folder")
    if not p.parent.exists():
        raise FlagError(f"argument --plot: folder {p.parent} does not exist")


def cmd_plan(args: argparse.Namespace) -> int:
    import kvsim

    data = read_run_file(args)
    opts = _search_options(args)
    if args.plot is not None:
        _check_plot_path(args.plot)
    config = _config_from_args(args, data)
    notes: list[str] = []
    workload, info = _workload_from_args(args, data, notes)
    backend = args.backend or data.get("backend", "rust")
    result = kvsim.plan(workload, config, opts.pop("slos"), backend=backend, **opts)
    plot = None
    if args.plot is not None:
        try:
            plot = str(result.plot(args.plot))
        except OSError as exc:
            raise FlagError(f"argument --plot: cannot write {args.plot}: {exc.strerror or exc}") from None
    if args.json:
        out = {
            "kvsim_version": kvsim.__version__,
            "argv": getattr(args, "_argv", None),
            "pool": config.pool.line(),
            "config": config.describe(),
            "workload": info,
            "backend": backend,
            **result.to_dict(),
            "plot": plot,
            "notes": notes,
        }
        print(json.dumps(out, default=str, ensure_ascii=False))
        return 0
    print(f"workload: {info['name']}, {info['requests']:,} requests; probes scale its arrivals")
    print(config.pool.line())
    print()
    print(result.table())
    print()
    print(f"{result.status}: {result.message}")
    for note in notes:
        print(f"note: {note}")
    if plot is not None:
        print(f"plot: {plot}")
    return 0


__all__ = ["add_parser", "cmd_plan"]
