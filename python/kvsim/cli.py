"""The `kvsim` command line: `kvsim run` (one simulation), `kvsim sweep` (a grid), `kvsim claims` (the
claims suite that writes results/claims.md and the plots).

`kvsim run` speaks vLLM's language: its flags are vLLM's engine arguments where vLLM has one
(`--num-gpu-blocks-override`, `--kv-cache-memory-bytes`, `--enable-prefix-caching` /
`--no-enable-prefix-caching`, `-tp`, ...; kvsim's own spellings stay as aliases), sizes and durations take
units (`12GiB`, `5ms`, `120us`), and it reports what `vllm bench serve` reports (`kvsim.metrics`).
Every knob's default comes from `kvsim.config.KNOBS`, the same table SimConfig uses. Errors are one
line on stderr naming the flag, exit status 2.

`python -m bench.sweep` is `kvsim sweep` with one difference: with no arguments it runs the claims suite.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvsim.config import KNOBS, PAPER_SETUP
from kvsim.errors import InvalidArgumentError, KvsimError
from kvsim.sweep import (
    CONFIG_FIELDS,
    EXECUTORS,
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
METRICS_POINTER = (
    "Metrics: each is defined once in python/kvsim/metrics.py (serving metrics, vllm bench serve's) and "
    "DESIGN.md §Metrics (the summary's memory and cache metrics)."
)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks; adds `(default: X)` to a flag whose help names no default
    and whose default is a value (not None, not False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS, []):
            return text
        if action.option_strings:
            return f"{text} (default: {action.default})"
        return text


def _fmt_default(name: str) -> str:
    """A knob's default for `--help`, in its unit."""
    from kvsim.units import fmt_bytes, fmt_duration_ps

    k = KNOBS[name]
    d = k.default
    if d is None:
        return ""
    if isinstance(d, bool):
        return "on" if d else "off"
    if k.kind == "bytes":
        return fmt_bytes(d)
    if k.kind == "duration":
        return fmt_duration_ps(d).replace(" ", "")
    return str(d)


class _Given(argparse.Action):
    """Stores `(flag as typed, text)`: the value is converted later by its knob's rule, and an error
    names the flag the user typed."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, (option_string, values))


class _Switch(argparse.Action):
    """A vLLM-style switch: `--enable-x` turns it on, `--no-enable-x` off; `--enable-x false` (today's
    spelling, with a value) is kept as an alias."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        assert option_string is not None
        if option_string.startswith("--no-"):
            setattr(namespace, self.dest, (option_string, "false"))
        else:
            setattr(namespace, self.dest, (option_string, "true" if values is None else values))


def _knob_flags(name: str) -> list[str]:
    """Every spelling of knob `name`: vLLM's first (if any), then `--name-with-dashes`, `--name_as_is`."""
    k = KNOBS[name]
    dashed = f"--{name.replace('_', '-')}"
    flags = [*k.flags, dashed]
    if "_" in name:
        flags.append(f"--{name}")
    return list(dict.fromkeys(flags))


_UNIT_TEXT = {
    "bytes": "a size: 12GiB, 512MiB, 1.5GB; a bare number is bytes",
    "duration": "a time: 1ms, 120us, 5ns; a bare number is picoseconds",
}


def _add_knob_flags(g: Any) -> None:
    for name in CONFIG_FIELDS:
        k = KNOBS[name]
        flags = _knob_flags(name)
        default = _fmt_default(name)
        unit = _UNIT_TEXT.get(k.kind) or (k.unit if k.unit in ("tokens", "blocks", "sequences") else "")
        if name == "swap_space_bytes":
            unit = "a size: 4GiB; after --swap-space a bare number is GiB, as in vLLM; default: unset, no CPU pool"
        if default and k.kind not in ("bytes", "duration"):
            default = str(k.default)
        tail = "; ".join(x for x in (unit, f"default: {default}" if default else "") if x)
        text = f"{k.help} ({tail})" if tail else k.help
        if k.kind == "bool":
            g.add_argument(
                *flags, dest=f"cfg_{name}", action=_Switch, nargs="?", metavar="BOOL", default=None, help=text
            )
            offs = [f"--no-{f[2:]}" for f in flags if f.startswith("--") and "_" not in f]
            g.add_argument(
                *offs, dest=f"cfg_{name}", action=_Switch, nargs=0, default=None, help=f"turn {flags[0]} off"
            )
            continue
        metavar = "{" + ",".join(k.choices) + "}" if k.kind == "choice" else (k.metavar or "VALUE")
        g.add_argument(*flags, dest=f"cfg_{name}", action=_Given, metavar=metavar, default=None, help=text)


def _add_workload_flags(p: argparse.ArgumentParser, *, many: bool) -> None:
    p.add_argument(
        "--workload",
        action="append" if many else "store",
        metavar="NAME[:K=V,...]|PATH",
        default=None,
        help=(
            "workload, optionally with parameters (sharegpt:arrival_rate=4,max_tokens=2048; other keys go "
            "to synthetic()'s length_params, a/b is a range; every workload takes start=, stop= (a row "
            "window), time_scale= or request_rate=)"
            + (
                ", repeatable (crossed with the grid)"
                if many
                else "; or a csv/jsonl/parquet file of your own (see --trace-columns)"
            )
            + f". Names: {_WORKLOAD_HELP} (default: sharegpt)"
        ),
    )
    p.add_argument(
        "--requests",
        "--num-prompts",
        type=str,
        default=None,
        metavar="N",
        help="requests per simulation (traces: the first N rows) (default: 10000)",
    )
    p.add_argument(
        "--backend",
        choices=("rust", "reference"),
        default=None,
        help="engine: rust (fast) or reference (the pure-Python spec) (default: rust)",
    )


def _run_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run",
        formatter_class=_Formatter,
        help="run one simulation and print its summary",
        description=(
            "Run one simulation from flags or a TOML file and print what vllm bench serve would, plus\n"
            "memory, cache and preemption metrics, and the pool line (what memory is simulated).\n\n"
            "Give --model and --gpu (the pool is sized as vLLM does: gpu memory utilization x device\n"
            "memory - weights / tp - activations), or --model with --kv-cache-memory-bytes, or\n"
            "--num-gpu-blocks-override. Unset knobs take kvsim.config.KNOBS' defaults (DESIGN.md\n"
            "§Defaults); --preset starts from a vLLM release's rules. A TOML file may hold `workload`,\n"
            "`requests`, `seed`, `backend` and a [config] table.\n\n"
            "Example: kvsim run --model llama-3-8b --gpu h100-80gb --workload sharegpt:arrival_rate=8"
        ),
        epilog=METRICS_POINTER,
    )
    p.add_argument("--toml", metavar="PATH", help="read the run from a TOML file (flags override it)")
    w = p.add_argument_group("workload")
    _add_workload_flags(w, many=False)  # type: ignore[arg-type]
    w.add_argument(
        "--seed",
        default=None,
        metavar="N",
        help="workload seed, an integer >= 0 (default: 0; traces are deterministic and ignore it, with a note)",
    )
    w.add_argument(
        "--trace-columns",
        metavar="OURS=THEIRS,...",
        default=None,
        help="a file workload's column names: arrival, prompt_len, output_len (required), max_tokens, "
        "num_samples, request_id (default: the same names)",
    )
    w.add_argument(
        "--trace-time-unit",
        "--time-unit",
        choices=("s", "ms", "us"),
        default="s",
        help="unit of a file workload's arrival column",
    )
    w.add_argument(
        "--time-scale",
        metavar="FACTOR",
        default=None,
        help="multiply every arrival time by FACTOR (0.5 replays a trace at twice the load) (default: 1)",
    )
    w.add_argument(
        "--request-rate",
        metavar="REQ/S",
        default=None,
        help="rescale arrivals to this mean request rate (default: the workload's own)",
    )
    w.add_argument(
        "--rows",
        metavar="START:STOP",
        default=None,
        help="keep rows [START, STOP) of the workload (a trace window) (default: all)",
    )
    c = p.add_argument_group("configuration (SimConfig fields; vLLM's flag names first)")
    c.add_argument(
        "--preset",
        choices=("vllm-v1", "vllm-latest", "vllm-v0"),
        default=None,
        help="start from a vLLM release's rules (SimConfig.preset); flags override it (default: none)",
    )
    _add_knob_flags(c)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print the result as one JSON object (for machines)")
    o.add_argument(
        "--save-result",
        metavar="DIR",
        default=None,
        help="also write the result (JSON: version, resolved config, workload, seed, pool, metrics) and "
        "the per-request rows (parquet) into DIR",
    )
    o.add_argument(
        "--percentile-metrics",
        default="ttft,tpot,itl",
        metavar="M1,M2,...",
        help="latency metrics to report, of ttft, tpot, itl, e2el (vllm bench serve's; itl's median, std and "
        "percentiles record every step's time, about 80 bytes a step) (default: ttft,tpot,itl)",
    )
    o.add_argument(
        "--metric-percentiles",
        default="99",
        metavar="P1,P2,...",
        help="percentiles of those metrics (default: 99)",
    )
    o.add_argument(
        "--goodput",
        nargs="+",
        default=None,
        metavar="METRIC:MS",
        help="SLOs in milliseconds (ttft:500 tpot:50 e2el:2000): report goodput, the requests per second "
        "that met all of them, and SLO attainment (default: none)",
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
        help="a fixed SimConfig field under the grid, repeatable; unset fields take kvsim.config.KNOBS' "
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
        "--show",
        metavar="M1,M2,...",
        default="throughput_rps,mean_batch,kv_utilization,e2e_s_p99",
        help="metrics to print aggregated across seeds (mean ± 95%% CI) when the sweep ends "
        "(default: throughput_rps,mean_batch,kv_utilization,e2e_s_p99)",
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
            "Example: kvsim sweep --base model=opt-13b --base kv_cache_bytes=12GiB \\\n"
            "    --grid block_size=8,16,32 --grid policy=vllm,orca-max --seeds 3"
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
        description="Run every claim of the paper and the seed simulators on the engine; write "
        "results/claims.md and the plots.",
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
        type=float,
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

    p = argparse.ArgumentParser(
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


# ---------------------------------------------------------------------------------------------- run


class FlagError(KvsimError):
    """A bad flag value: printed as `kvsim run: error: argument --flag: ...`."""


def _flag_value(flag: str, name: str, text: Any) -> Any:
    """The value of knob `name` from `text`, given as `flag` (vLLM's `--swap-space` counts GiB)."""
    if flag == "--swap-space" and isinstance(text, str) and re.fullmatch(r"\s*[\d.]+\s*", text):
        text = f"{text.strip()}GiB"
    try:
        return coerce(name, text)
    except InvalidArgumentError as exc:
        raise FlagError(f"argument {flag}: {exc}") from None


def _int_flag(flag: str, text: Any, lo: int) -> int:
    try:
        value = int(str(text).strip().replace("_", ""))
    except ValueError:
        raise FlagError(f"argument {flag}: {text!r} is not an integer") from None
    if value < lo:
        raise FlagError(f"argument {flag}: {value} must be at least {lo}")
    if value > 1 << 40:
        raise FlagError(f"argument {flag}: {value} must be at most 2**40")
    return value


def _float_flag(flag: str, text: Any) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise FlagError(f"argument {flag}: {text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise FlagError(f"argument {flag}: {text!r} must be a positive number")
    return value


def _config_from_args(args: argparse.Namespace, data: dict[str, Any]) -> Any:
    import kvsim

    cfg: dict[str, Any] = {}
    for k, v in data.get("config", {}).items():
        if k not in CONFIG_FIELDS:
            raise InvalidArgumentError(f"run file {args.toml}: unknown SimConfig field {k!r}")
        try:
            cfg[k] = coerce(k, v)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"run file {args.toml}: [config] {exc}") from None
    flag_of: dict[str, str] = {}
    for name in CONFIG_FIELDS:
        given = getattr(args, f"cfg_{name}")
        if given is not None:
            flag, text = given
            cfg[name] = _flag_value(flag, name, text)
            flag_of[name] = flag
    if cfg.get("num_blocks") is None and cfg.get("model") is None:
        raise FlagError(
            "no pool to simulate: give --model and --gpu (sized as vLLM does), --model with "
            "--kv-cache-memory-bytes, or --num-gpu-blocks-override"
        )
    try:
        if args.preset:
            return kvsim.SimConfig.preset(args.preset, **cfg)
        return kvsim.SimConfig(**cfg)
    except InvalidArgumentError as exc:
        field = str(exc).split(" ", 1)[0].rstrip(":")
        if field in flag_of:
            raise FlagError(f"argument {flag_of[field]}: {exc}") from None
        raise


def _workload_from_args(args: argparse.Namespace, data: dict[str, Any], notes: list[str]) -> tuple[Any, dict]:
    from kvsim import workload_specs as ws

    spec = args.workload if args.workload is not None else data.get("workload", "sharegpt")
    requests = _int_flag("--requests", args.requests, 1) if args.requests is not None else None
    if requests is None:
        requests = int(data.get("requests", 10_000))
        if requests < 1:
            raise InvalidArgumentError(f"run file {args.toml}: requests {requests} must be at least 1")
    seed_given = args.seed is not None or "seed" in data
    seed = _int_flag("--seed", args.seed, 0) if args.seed is not None else int(data.get("seed", 0))
    if seed < 0:
        raise InvalidArgumentError(f"seed {seed} must be at least 0")
    trace: dict[str, Any] = {}
    if args.time_scale is not None:
        trace["time_scale"] = _float_flag("--time-scale", args.time_scale)
    if args.request_rate is not None:
        trace["request_rate"] = _float_flag("--request-rate", args.request_rate)
    if args.rows is not None:
        start, colon, stop = args.rows.partition(":")
        if not colon:
            raise FlagError(f"argument --rows: {args.rows!r} is not START:STOP (1000:2000, :5000, 100:)")
        if start.strip():
            trace["start"] = _int_flag("--rows", start, 0)
        if stop.strip():
            trace["stop"] = _int_flag("--rows", stop, 1)
    if isinstance(spec, str) and ws.is_trace_file(spec):
        try:
            columns = ws.parse_columns(args.trace_columns)
        except InvalidArgumentError as exc:
            raise FlagError(f"argument --trace-columns: {exc}") from None
        full = ws.load_file(spec, columns=columns, time_unit=args.trace_time_unit)
        window = {k: v for k, v in trace.items() if k in ("start", "stop")}
        full = ws.apply_trace_params(full, window, spec) if window else full
        w = full if requests >= len(full) else full[:requests]
        w = ws.apply_trace_params(w, {k: v for k, v in trace.items() if k not in window}, spec)
        name, params = spec, {"columns": columns, "time_unit": args.trace_time_unit}
        seeded = False
    else:
        if args.trace_columns is not None:
            raise FlagError("argument --trace-columns: applies to a file workload (--workload path.csv)")
        try:
            name, params = parse_workload(spec)
        except InvalidArgumentError as exc:
            raise FlagError(f"argument --workload: {exc}") from None
        params = {**params, **trace}
        seeded = WORKLOADS[name].seeded
        w = make_workload(name, params, requests, seed)
    if seed_given and not seeded:
        notes.append(
            f"--seed {seed} is ignored: the trace {name} is deterministic (every seed gives the same run)"
        )
    info = {"name": name, "params": params, "requests": len(w), "seed": seed if seeded else None}
    return w, info


def _notes(result: Any, workload: Any, info: dict[str, Any], notes: list[str]) -> None:
    """What the user should know about this run's answer (appended to `notes`)."""
    import numpy as np

    s, cfg = result.summary, result.config
    peak = s.get("peak_allocated_fraction", 0.0)
    queue = s.get("queueing_s_p99")
    e2e = s.get("e2e_s_p50")
    if s["preemptions"] == 0 and peak < 0.9 and (queue is None or e2e is None or queue <= 0.01 * e2e):
        notes.append(
            f"not memory-bound: the pool peaked at {peak:.0%} of its capacity, nothing was preempted and "
            f"requests barely queued (p99 {1000 * (queue or 0):.1f} ms); memory knobs (block size, pool size, "
            "gpu memory utilization, preemption) cannot change this answer; raise the load to see them"
        )
    if cfg.enable_prefix_caching and len(workload):
        ids = np.asarray(workload.segment_id)
        if len(np.unique(ids)) == len(ids) and s.get("prefix_hit_rate_first_admission", 0.0) == 0.0:
            why = (
                "the Azure traces carry no content hashes, so every prompt is its own"
                if str(info["name"]).startswith("azure")
                else "no two of its prompts share content"
            )
            notes.append(
                f"prefix caching is on, but {info['name']} cannot hit the cache across requests ({why}): "
                "its prefix hit rate is 0 whatever the cache"
            )


_GROUPS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    (
        "throughput",
        (
            ("completed", "requests completed", "count"),
            ("failed", "requests rejected", "count"),
            ("duration_s", "duration", "s"),
            ("request_throughput", "request throughput", "req/s"),
            ("output_throughput", "output token throughput", "tok/s"),
            ("total_token_throughput", "total token throughput", "tok/s"),
            ("request_goodput", "request goodput", "req/s"),
            ("slo_attainment", "SLO attainment", "%"),
        ),
    ),
    (
        "memory",
        (
            ("kv_utilization", "KV utilization (tokens stored)", "%"),
            ("kv_allocated_fraction", "KV allocated", "%"),
            ("peak_allocated_fraction", "peak allocated", "%"),
            ("internal_fragmentation", "internal fragmentation", "%"),
            ("reservation_waste", "reservation waste", "%"),
            ("external_fragmentation", "external fragmentation", "%"),
            ("mean_batch", "mean batch", "sequences"),
            ("peak_batch", "peak batch", "sequences"),
        ),
    ),
    (
        "cache",
        (
            ("prefix_hit_rate", "prefix hit rate", "%"),
            ("prefix_hit_rate_first_admission", "prefix hit rate (first admissions)", "%"),
            ("blocks_saved_by_sharing", "blocks saved by sharing", "blocks"),
            ("evictions", "evictions", "blocks"),
            ("cow_copies", "copy-on-write copies", "blocks"),
        ),
    ),
    (
        "preemption",
        (
            ("preemptions", "preemptions", "count"),
            ("recomputed_tokens", "recomputed tokens", "tokens"),
            ("swapped_blocks", "swapped blocks (out and in)", "blocks"),
        ),
    ),
)


def _num(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if unit == "%":
        return f"{100 * v:.1f} %"
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def render_table(
    serving: dict[str, Any], summary: dict[str, Any], metrics: Sequence[str], pcts: Sequence[float]
) -> str:
    """The human table: throughput, latency (ms), memory, cache and preemption groups, with units."""
    from kvsim.metrics import _pct_key

    values = {**summary, **serving}
    lines: list[str] = []
    for title, rows in _GROUPS:
        shown = [(k, label, unit) for k, label, unit in rows if values.get(k) is not None or k in serving]
        if title == "throughput":
            shown = [r for r in shown if r[0] in values]
        if not shown:
            continue
        lines.append(f"== {title} ==")
        lines += [
            f"  {label:<36} {_num(values[k], unit):>14} {'' if unit in ('%', 'count') else unit}"
            for k, label, unit in shown
        ]
        if title == "throughput":
            lines.append("== latency (ms) ==")
            cols = ["mean", "median", "std", *[_pct_key(p) for p in pcts]]
            lines.append("  " + " " * 8 + "".join(f"{c:>12}" for c in cols))
            for m in metrics:
                row = [serving.get(f"{c}_{m}_ms") for c in cols]
                lines.append(f"  {m.upper():<8}" + "".join(f"{_num(v):>12}" for v in row))
            if "itl" in metrics and serving.get("itl_inexact_sequences"):
                lines.append(
                    f"  (ITL: mean only; {serving['itl_inexact_sequences']:,} sequences missed steps, preempted "
                    "or out of budget, and the engines do not record their gaps: kvsim/metrics.py)"
                )
    return "\n".join(lines)


def summary_table(summary: dict[str, Any]) -> str:
    """The whole summary as an aligned two-column table (every key, sorted)."""
    width = max(len(k) for k in summary)
    return "\n".join(f"{k:<{width}}  {_num(summary[k])}" for k in sorted(summary))


def _check_save_dir(path: str) -> Path:
    """The `--save-result` folder, created, checked writable before the run."""
    import os

    d = Path(path)
    if d.exists() and not d.is_dir():
        raise FlagError(f"argument --save-result: {d} exists and is not a folder")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FlagError(f"argument --save-result: cannot create {d}: {exc.strerror}") from None
    if not os.access(d, os.W_OK):
        raise FlagError(f"argument --save-result: {d} is not writable")
    return d


def cmd_run(args: argparse.Namespace) -> int:
    import kvsim
    from kvsim import metrics

    data: dict[str, Any] = {}
    if args.toml:
        try:
            data = tomllib.loads(Path(args.toml).read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise InvalidArgumentError(f"run file {args.toml}: {exc}") from None
        unknown = set(data) - {"workload", "requests", "seed", "backend", "config"}
        if unknown:
            raise InvalidArgumentError(f"run file {args.toml}: unknown keys {sorted(unknown)}")
    try:
        pct_metrics = metrics.parse_percentile_metrics(args.percentile_metrics)
    except InvalidArgumentError as exc:
        raise FlagError(f"argument --percentile-metrics: {exc}") from None
    try:
        pcts = metrics.parse_metric_percentiles(args.metric_percentiles)
    except InvalidArgumentError as exc:
        raise FlagError(f"argument --metric-percentiles: {exc}") from None
    try:
        goodput = metrics.parse_goodput(args.goodput)
    except InvalidArgumentError as exc:
        raise FlagError(f"argument --goodput: {exc}") from None
    save_dir = _check_save_dir(args.save_result) if args.save_result else None
    config = _config_from_args(args, data)
    notes: list[str] = []
    workload, info = _workload_from_args(args, data, notes)
    backend = args.backend or data.get("backend", "rust")
    result = kvsim.simulate(workload, config, backend=backend, record_timeseries="itl" in pct_metrics)
    step_starts = result.raw.timeseries["time_ps"] if result.raw.timeseries else None
    serving = metrics.serving_metrics(
        result.requests,
        result.raw,
        percentile_metrics=pct_metrics,
        metric_percentiles=pcts,
        goodput=goodput,
        step_start_ps=step_starts,
    )
    _notes(result, workload, info, notes)
    record = {
        "kvsim_version": kvsim.__version__,
        "argv": getattr(args, "_argv", None),
        "pool": config.pool.line(),
        "pool_sizing": config.pool.to_dict(),
        "config": config.describe(),
        "workload": info,
        "seed": info["seed"],
        "backend": backend,
        "goodput_slos_ms": goodput,
        "serving": serving,
        "summary": result.summary,
        "notes": notes,
    }
    if save_dir is not None:
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"kvsim-{Path(str(info['name'])).stem}-{config.policy}")
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
        path = save_dir / f"{stem}-{stamp}.json"
        try:
            path.write_text(json.dumps(record, indent=2, default=str, ensure_ascii=False) + "\n")
            result.requests.write_parquet(path.with_suffix(".requests.parquet"))
        except OSError as exc:
            raise FlagError(f"argument --save-result: cannot write {path}: {exc.strerror}") from None
        record["saved"] = str(path)
    if args.json:
        print(json.dumps(record, default=str, ensure_ascii=False))
    else:
        params = ",".join(
            f"{k}={','.join(f'{a}={b}' for a, b in v.items()) if isinstance(v, dict) else v}"
            for k, v in info["params"].items()
            if v is not None
        )
        seed = f", seed {info['seed']}" if info["seed"] is not None else ""
        print(
            f"workload: {info['name']}{':' + params if params else ''}, {info['requests']:,} requests{seed}"
        )
        print(record["pool"])
        raw_cfg, human = config.to_dict(), config.describe()
        shown = {
            k: human[k]
            for k, v in raw_cfg.items()
            if v is not None and v != KNOBS[k].default and not (k == "swap_ps_per_block" and v == 0)
        }
        print("config: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
        print()
        print(render_table(serving, result.summary, pct_metrics, pcts))
        for note in notes:
            print(f"note: {note}")
        if save_dir is not None:
            print(f"saved: {record['saved']}")
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
        try:
            spec.base[key.strip()] = coerce(key.strip(), value)
        except InvalidArgumentError as exc:
            raise FlagError(f"argument --base: {exc}") from None
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


SUBCOMMANDS.update(
    {
        "run": (_run_parser, cmd_run),
        "sweep": (_sweep_parser, cmd_sweep),
        "claims": (_claims_parser, cmd_claims),
    }
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
    p = argparse.ArgumentParser(
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


if __name__ == "__main__":
    sys.exit(main())
