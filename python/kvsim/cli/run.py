"""`kvsim run`: one simulation from vLLM-style flags (or a TOML file), reported as `vllm bench serve`
reports it, with the pool line and notes. Its flags come from `kvsim.model.config.KNOBS`: vLLM's spelling first
(`--num-gpu-blocks-override`, `--kv-cache-memory-bytes`, `--enable-prefix-caching` /
`--no-enable-prefix-caching`, `-tp`, ...), kvsim's own kept as aliases; values are text converted by
the knob's own rule (`kvsim.analysis.sweep_grid.coerce`, units included), so an error names the flag as typed.
The flags and `--help` are `kvsim.cli.flags`'; the `kvsim` parser and the other subcommands live in
`kvsim.cli`; what a run prints and saves in `kvsim.cli.run_output`, the human table and most notes in
`kvsim.analysis.run_report`.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from kvsim.analysis.run_report import (
    run_notes,
)
from kvsim.analysis.sweep import (
    CONFIG_FIELDS,
    WORKLOADS,
    coerce,
    make_workload,
    parse_workload,
    read_toml,
    toml_int,
    toml_value,
)
from kvsim.cli.block_backend import backend_block_refusal
from kvsim.cli.flags import _BARE, GPU_FLAGS, FlagError
from kvsim.cli.refusals import (
    _given_at,
    _overridden_sizing,
    _refuse_idle_knobs,
    _refuse_idle_model_knobs,
    _refuse_idle_swap,
    _refuse_modelless_knobs,
    given_where,
    measured_flag_error,
)
from kvsim.cli.release_checks import (
    prefill_release,
    read_model,
    refuse_bad_release,
    refuse_kv_dtype,
    release_setter,
    run_release,
)
from kvsim.cli.run_output import print_run, run_record, save_run
from kvsim.errors import InvalidArgumentError, MeasuredSizingError, TimeUnitError, TraceFormatError
from kvsim.model.config import CLUSTER_KNOBS, KNOBS
from kvsim.model.knob_table import MAX_TIME_PS, PS_PER_S
from kvsim.model.releases import RELEASES
from kvsim.workloads.registry import format_value, trace_file_hint

# ---------------------------------------------------------------------------------------------- run
# The flags that set a workload's trace parameters.
TRACE_FLAGS = {
    "start": "--rows",
    "stop": "--rows",
    "time_scale": "--time-scale",
    "request_rate": "--request-rate",
}


def _flag_value(flag: str, name: str, text: Any, release: Any = None) -> Any:
    """The value of knob `name` from `text`, given as `flag` (vLLM's `--swap-space` counts GiB; a model read
    under `release`, `coerce`)."""
    bare_number = r"\s*(\d[\d_]*\.?\d*|\.\d+)([eE][+-]?\d+)?\s*"
    if flag == "--swap-space" and isinstance(text, str) and re.fullmatch(bare_number, text):
        # vLLM's --swap-space is a float of GiB, cut to whole bytes (int(swap_space * GiB_bytes)).
        import contextlib
        import decimal

        with contextlib.suppress(decimal.DecimalException):  # too large for a Decimal: the parser names it
            text = str(int(decimal.Decimal(text.strip().replace("_", "")) * 2**30))
    if flag in _VLLM_HUMAN_INT_FLAGS and isinstance(text, str):
        text = _vllm_human_int(flag, text)
    try:
        return coerce(name, text, release)
    except InvalidArgumentError as exc:
        raise FlagError(f"argument {flag}: {exc}") from None


# vLLM's flags that take its human-readable integers (vllm/utils/argparse_utils.py `human_readable_int`):
# `8k` is 8,000 and `8K` 8,192 (lower case decimal, upper case binary, no fraction with a binary suffix).
_VLLM_HUMAN_INT_FLAGS = ("--kv-cache-memory-bytes", "--max-num-batched-tokens", "--max-model-len")


def _vllm_human_int(flag: str, text: str) -> str:
    """`text` with vLLM's one-letter suffix (`32k`, `12G`) written out as a whole number, as vLLM reads it
    on `flag`; anything else (`12GiB`, `8192`) unchanged, for kvsim's own parsing."""
    # (a sign kept, so that `-12G` reaches the flag's own "must not be negative", not "unknown size unit")
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)([kKmMgGtT])\s*", text)
    if not m:
        return text
    number, suffix = m.groups()
    if suffix.islower():
        return str(int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3)))
    if "." in number:
        raise FlagError(
            f"argument {flag}: {text!r}: a binary suffix ({suffix}) takes a whole number, as in vLLM"
        )
    return str(int(number) * 2 ** (10 * "KMGT".index(suffix) + 10))


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


def _toml_int(args: argparse.Namespace, data: dict[str, Any], key: str, default: int, lo: int) -> int:
    """Whole number `key` of a run file (the bounds of the flag of the same name; a sweep file's rule)."""
    return toml_int(f"run file {args.toml}", data, key, default, lo)


def _float_flag(flag: str, text: Any) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise FlagError(f"argument {flag}: {text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise FlagError(f"argument {flag}: {text!r} must be a positive number")
    return value


def _as_given(args: argparse.Namespace, cfg: dict[str, Any], name: str) -> str:
    """A config field as the user gave it: its flag and text (`--gpu a100-40gb`), a GPU of --gpu-* flags,
    or the run file's key."""
    given = getattr(args, f"cfg_{name}", None)
    if given is not None:
        return f"{given[0]} {given[1]}"
    if name == "gpu" and any(
        getattr(args, f"gpu_{key}", None) is not None for key, _, _ in GPU_FLAGS.values()
    ):
        return "a GPU of --gpu-* flags"
    return f"run file {args.toml}'s [config] {name} = {cfg[name]!r}"


def _gpu_from_flags(args: argparse.Namespace, cfg: dict[str, Any]) -> None:
    """Replace `cfg["gpu"]` with the GPU the --gpu-* flags describe (on top of --gpu NAME when given)."""
    from kvsim.model import gpus

    spec = {key: getattr(args, f"gpu_{key}", None) for key, _, _ in GPU_FLAGS.values()}
    spec = {k: v for k, v in spec.items() if v is not None}
    if not spec:
        return
    try:
        base = gpus.resolve(cfg["gpu"]) if cfg.get("gpu") is not None else None
        cfg["gpu"] = gpus.from_spec(spec, "--gpu-* flags", base)
    except InvalidArgumentError as exc:
        text = str(exc).replace("--gpu-* flags: ", "")
        flag_of = {k: f for f, (k, _, _) in GPU_FLAGS.items()}
        if text.startswith("a GPU needs"):
            # (the figures missing: named as their flags, the complaint on a flag that was given)
            missing = [flag_of[k] for k in ("memory", "bandwidth", "tflops") if k not in spec]
            raise FlagError(
                f"argument {flag_of[next(iter(spec))]}: a GPU described by flags needs {', '.join(missing)} "
                "too (--gpu-memory 48GiB --gpu-bandwidth 864GB/s --gpu-tflops 362), or --gpu NAME to start from"
            ) from None
        key = next((k for k in spec if text.startswith(k) or f" {k} " in f" {text} "), next(iter(spec)))
        flag = flag_of[key]
        raise FlagError(f"argument {flag}: {text}") from None


def _config_from_args(args: argparse.Namespace, data: dict[str, Any], *, refuse_idle: bool = True) -> Any:
    """The run's SimConfig from its flags and run file, refusing what it would not read; `refuse_idle=False`
    leaves a model's idle knobs and an idle swap space to the caller (`kvsim plan`, whose candidates may
    read them: it refuses them over its points, `refuse_idle_at_every_point`, `_refuse_idle_swap`). Keeps
    the flag each knob was given by in `args.flag_of`, and the knobs the user gave (flags and run file) in
    `args.given_knobs`, with their values in `args.given_cfg`."""
    import kvsim

    cfg: dict[str, Any] = {}
    refuse_bad_release(args, data)  # (first: the release decides how the model is read)
    release = run_release(args, data)
    # (the model's reader's release; one that is no release is the knob's to refuse)
    reads = release if isinstance(release, str) and release in RELEASES else None
    setter = release_setter(args, data)
    for k, v in data.get("config", {}).items():
        if k not in CONFIG_FIELDS:
            import difflib

            close = difflib.get_close_matches(str(k), CONFIG_FIELDS, n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise InvalidArgumentError(f"run file {args.toml}: unknown SimConfig field {k!r}{hint}")
        refuse_kv_dtype(f"run file {args.toml}: [config] kv_cache_dtype", k, v, release, args.preset)
        if k == "model":
            at = f"run file {args.toml}: [config]"
            cfg[k] = read_model(f"{at} model", v, reads, setter, plain=f"{at} ")
            continue
        try:
            cfg[k] = toml_value(k, v, reads)  # SimConfig's rule: no "400" for an integer (flags are text)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"run file {args.toml}: [config] {exc}") from None
    flag_of: dict[str, str] = {}
    for name in CONFIG_FIELDS:
        given = getattr(args, f"cfg_{name}")
        if given is not None:
            flag, text = given
            refuse_kv_dtype(f"argument {flag}", name, text, release, args.preset)
            cfg[name] = (
                read_model(f"argument {flag}", text, reads, setter)
                if name == "model"
                else _flag_value(flag, name, text, reads)
            )
            flag_of[name] = flag
    positional = getattr(args, "model_arg", None)
    if positional is not None:
        if "model" in flag_of:
            raise FlagError(
                f"argument {flag_of['model']}: the model is given twice (MODEL {positional!r} too)"
            )
        cfg["model"] = read_model("argument MODEL", positional, reads, setter)
        flag_of["model"] = "MODEL"
    _gpu_from_flags(args, cfg)
    if cfg.get("num_blocks") is None and cfg.get("model") is None:
        memory = [
            _as_given(args, cfg, k)
            for k in ("gpu", "kv_cache_bytes", "gpu_memory_utilization")
            if cfg.get(k) is not None
        ]
        if memory:  # (what was given, and the model it lacks)
            raise FlagError(
                f"no pool to simulate: {' and '.join(memory)} without --model: a pool's blocks are sized from "
                "the model's bytes a token: give --model (sized as vLLM does), or --num-gpu-blocks-override"
            )
        raise FlagError(
            "no pool to simulate: give --model and --gpu (sized as vLLM does), --model with "
            "--kv-cache-memory-bytes, or --num-gpu-blocks-override"
        )
    if all(cfg.get(k) is None for k in ("num_blocks", "kv_cache_bytes", "gpu")) and not args.preset:
        smallest = getattr(args, "smallest", None)
        start = (
            f" (--smallest {smallest} starts its search at that pool, or at the GPU's)"
            if smallest in ("num_blocks", "kv_cache_bytes", "gpu_memory_utilization")
            else ""
        )
        raise FlagError(
            f"no pool to simulate: --model {cfg['model']} without --gpu has no memory to size one from: give "
            f"--gpu (sized as vLLM does), --kv-cache-memory-bytes, or --num-gpu-blocks-override{start}"
        )
    try:
        config = kvsim.SimConfig.preset(args.preset, **cfg) if args.preset else kvsim.SimConfig(**cfg)
    except MeasuredSizingError as exc:
        raise measured_flag_error(exc, flag_of) from None
    except InvalidArgumentError as exc:
        field, _, rest = str(exc).partition(" ")
        field = field.rstrip(":")
        if field in flag_of:
            raise FlagError(f"argument {flag_of[field]}: {exc}") from None
        if field == "gpu_memory_utilization" and rest.startswith("model "):
            # (the pool's refusal at the share the user did not give: named by what they gave, as "does not
            # fit on" is: the context asked for, else the model)
            blame = "max_model_len" if "max_model_len" in cfg else "model"
            raise FlagError(f"{_given_at(args, flag_of, blame)}: {rest}") from None
        raise
    if refuse_idle:
        _refuse_idle_swap(args, [config], cfg, flag_of)
    _refuse_modelless_knobs(args, config, cfg, flag_of)
    args.flag_of, args.given_knobs = flag_of, set(cfg)
    args.given_cfg = cfg
    if refuse_idle:
        _refuse_idle_model_knobs(args, config, cfg, flag_of)
    args.sizing_notes, args.overridden_knobs = _overridden_sizing(args, config, cfg, flag_of)
    args.prefill_sim_config = _prefill_config(args, cfg, setter)
    if args.prefill_sim_config is not None and not config.prefill_replicas:
        # (`simulate_cluster` refuses it in a fleet; a single replica never reads it)
        raise FlagError(
            "argument --prefill-config: the prefill replicas' config, but this run has no prefill pool: give "
            "--prefill-replicas N (a disaggregated fleet) or drop the flag"
        )
    _refuse_backend_block(args, config, args.prefill_sim_config)
    return config


def _prefill_config(args: argparse.Namespace, cfg: dict[str, Any], setter: str | None) -> Any:
    """`--prefill-config KNOB=VALUE,...`: the prefill pool's SimConfig, the decode replicas' knobs with
    these over them (built as the decode config is, so a GPU given here sizes its own pool); None without
    the flag. Its model is read under the release the prefill config will have (its own `vllm_release=`,
    else the run's, set by `setter`), a refusal naming what set it (`read_model`)."""
    import kvsim

    text = getattr(args, "prefill_config", None)
    if text is None:
        return None
    flag = "argument --prefill-config"
    over: dict[str, Any] = {}
    release, prefill_setter = prefill_release(args, cfg, text, setter)
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key or not value.strip():
            raise FlagError(
                f"{flag}: {part.strip()!r} is not KNOB=VALUE (e.g. gpu=b200,tensor_parallel_size=2)"
            )
        if key not in CONFIG_FIELDS:
            raise FlagError(f"{flag}: unknown SimConfig field {key!r}")
        if key in CLUSTER_KNOBS:
            # (the fleet's shape and its routers are the run's: here they were taken and dropped)
            raise FlagError(
                f"{flag}: {key} is the fleet's, not the prefill replicas' own: give it as --{key.replace('_', '-')}"
            )
        refuse_kv_dtype(f"{flag}: kv_cache_dtype", key, value.strip(), release, args.preset)
        if key == "model":
            reads = release if isinstance(release, str) and release in RELEASES else None
            over[key] = read_model(f"{flag}: model", value, reads, prefill_setter, plain=f"{flag}: ")
            continue
        try:
            over[key] = coerce(key, value)
        except InvalidArgumentError as exc:
            raise FlagError(f"{flag}: {exc}") from None
    # (the prefill pool is no decode replica of a disaggregated fleet: its config, built apart, has no
    # prefill pool of its own, so SimConfig does not refuse it as one, a CPU tier say)
    merged = {**cfg, **over, "prefill_replicas": 0}
    # (a replica of the disaggregated fleet all the same: an unset sizing settles as the decode side's does,
    # profiled, for NIXL's connector, `kvsim.model.measured.unset_sizing`; it settled measured until user52)
    merged.setdefault("kv_cache_sizing", "profiled")
    resized = "gpu" in over or "tensor_parallel_size" in over or "kv_cache_memory_bytes" in over
    if resized and "num_blocks" not in over:  # the prefill side's pool sized anew, unless given here
        merged.pop("num_blocks", None)
    try:
        return kvsim.SimConfig.preset(args.preset, **merged) if args.preset else kvsim.SimConfig(**merged)
    except InvalidArgumentError as exc:
        raise FlagError(f"{flag}: {exc}") from None


def _workload_from_args(args: argparse.Namespace, data: dict[str, Any], notes: list[str]) -> tuple[Any, dict]:
    from kvsim.workloads import specs as ws

    spec = args.workload if args.workload is not None else data.get("workload", "sharegpt")
    requests = (
        _int_flag("--requests", args.requests, 1)
        if args.requests is not None
        else _toml_int(args, data, "requests", 10_000, 1)
    )
    seed_given = args.seed is not None or "seed" in data
    seed = _int_flag("--seed", args.seed, 0) if args.seed is not None else _toml_int(args, data, "seed", 0, 0)
    trace: dict[str, Any] = {}
    if args.time_scale is not None:
        trace["time_scale"] = _float_flag("--time-scale", args.time_scale)
    if args.request_rate is not None:
        if args.time_scale is not None:
            raise FlagError("argument --request-rate: not allowed with --time-scale (give one of them)")
        if str(args.request_rate).strip().lower() in ("inf", "infinity", "+inf"):
            raise FlagError(
                f"argument --request-rate: {args.request_rate!r}: vllm bench serve's inf (every request at "
                "once) is --workload NAME:arrivals=all-at-once here (a synthetic workload); give a rate in "
                "requests per second"
            )
        trace["request_rate"] = _float_flag("--request-rate", args.request_rate)
    if args.rows is not None:
        start, colon, stop = args.rows.partition(":")
        if not colon:
            raise FlagError(f"argument --rows: {args.rows!r} is not START:STOP (1000:2000, :5000, 100:)")
        if start.strip():
            trace["start"] = _int_flag("--rows", start, 0)
        if stop.strip():
            trace["stop"] = _int_flag("--rows", stop, 1)
        if trace.get("stop", 1 << 62) <= trace.get("start", 0):
            raise FlagError(f"argument --rows: {args.rows!r}: STOP must be above START (rows [START, STOP))")
    if isinstance(spec, str) and ws.is_trace_file(spec):
        try:
            columns = ws.parse_columns(args.trace_columns)
        except InvalidArgumentError as exc:
            raise FlagError(f"argument --trace-columns: {exc}") from None
        time_unit = args.trace_time_unit or "s"
        try:
            full = ws.load_file(spec, columns=columns, time_unit=time_unit)
        except TraceFormatError as exc:
            hint = trace_file_hint(spec, exc.field, exc.reason)
            raise TraceFormatError(exc.path, exc.line, exc.field, exc.reason + hint) from None
        except TimeUnitError as exc:  # (one kvsim does not read, or any beside dates: they carry their unit)
            raise FlagError(f"argument --trace-time-unit: {exc}") from None
        unread = ws.unread_content_note(spec, full)
        if unread is not None:
            notes.append(unread)
        if "hash_ids" in full.meta["columns"]:  # (read by its own name: the workload line shows it)
            columns = {**(columns or {}), "hash_ids": full.meta["columns"]["hash_ids"]}
        if len(full) and full.arrival[0] > 0:
            # Its own timestamps (unix seconds, an offset): replayed from its first request, as vllm bench
            # serve does, so the duration and the throughputs count from it.
            notes.append(
                f"{spec}'s arrivals start at {full.arrival[0]:,.3f} s: replayed from its first request "
                "(every arrival shifted by that)"
            )
            full = ws.rebase(full)
        window = {k: v for k, v in trace.items() if k in ("start", "stop")}
        full = ws.apply_trace_params(full, window, spec) if window else full
        w = full if requests >= len(full) else full[:requests]
        w = ws.apply_trace_params(w, {k: v for k, v in trace.items() if k not in window}, spec)
        name, params = spec, {"columns": columns, "time_unit": time_unit, **trace}
        seeded = False
    else:
        if args.trace_columns is not None:
            raise FlagError("argument --trace-columns: applies to a file workload (--workload path.csv)")
        if args.trace_time_unit is not None:
            raise FlagError("argument --trace-time-unit: applies to a file workload (--workload path.csv)")
        try:
            name, params = parse_workload(spec)
            # A flag and the spec setting one trace parameter: the flag once replaced it silently.
            for key in trace:
                if key in params:
                    raise FlagError(
                        f"argument {TRACE_FLAGS[key]}: workload {spec!r} sets {key}="
                        f"{format_value(params[key])} too (give it once)"
                    )
            params = {**params, **trace}
            seeded = WORKLOADS[name].seeded
            w = make_workload(name, params, requests, seed)
        except InvalidArgumentError as exc:
            # Errors of the generator itself (lengths=nosuch, max_model_len below the prompt mean) do not
            # name the workload: say which spec gave them, and the flag (or the run file) it came from.
            msg = str(exc) if str(exc).startswith("workload") else f"workload {spec!r}: {exc}"
            where = (
                f"run file {args.toml}"
                if args.workload is None and "workload" in data
                else "argument --rows"
                if args.rows is not None and "rows [" in msg
                else "argument --workload"
            )
            raise FlagError(f"{where}: {msg}") from None
    if seed_given and not seeded:
        notes.append(
            f"--seed {seed} is ignored: the trace {name} is deterministic (every seed gives the same run)"
        )
    last = float(w.arrival[-1]) if len(w) else 0.0
    stretch = next((k for k in ("time_scale", "request_rate") if k in trace), None)
    if stretch is not None and not last * PS_PER_S < MAX_TIME_PS:
        # (the engine's input refused it as "row N: arrival ... s is past the simulated clock's range ...:
        # rebase the timestamps", naming no flag and advising what would not help)
        raise FlagError(
            f"argument {TRACE_FLAGS[stretch]}: {format_value(trace[stretch])} puts the last of "
            f"{len(w):,} arrivals at {last:.4g} s, past the simulated clock's range (about 53 days): give "
            f"{'a smaller scale' if stretch == 'time_scale' else 'a higher rate'}"
        )
    info = {"name": name, "params": params, "requests": len(w), "seed": seed if seeded else None}
    return w, info


def _save_dir_from_args(args: argparse.Namespace) -> Path | None:
    """Where `--save-result` writes: its DIR, or (bare, vLLM's flag) `--result-dir` or the current folder;
    None without it. Checked before the run."""
    if args.save_result is None:
        if args.result_dir is not None:
            raise FlagError(
                "argument --result-dir: applies with --save-result (--save-result --result-dir DIR)"
            )
        return None
    if args.save_result is _BARE:
        if args.result_dir is None:
            return _check_save_dir(".", "--save-result")
        return _check_save_dir(args.result_dir, "--result-dir")
    if args.result_dir is not None:
        raise FlagError("argument --result-dir: not allowed with --save-result DIR (name the folder once)")
    return _check_save_dir(args.save_result, "--save-result")


def _check_save_dir(path: str, flag: str) -> Path:
    """The result folder (given as `flag`), checked before the run: writable if it exists, else the
    nearest folder above it writable (it is created only when the results are written, so a run refused
    later leaves no folder behind)."""
    if "\0" in path or not path.strip():
        raise FlagError(f"argument {flag}: {path!r} is not a folder name")
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise FlagError(f"argument {flag}: {d} exists and is not a folder")
    above = d
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise FlagError(f"argument {flag}: cannot create {d}: {above} is not a folder")
    why = write_probe(above)
    if why:
        verb = "write in" if above == d else f"create {d}: cannot write in"
        raise FlagError(f"argument {flag}: cannot {verb} {above}: {why}")
    return d


def write_probe(folder: Path) -> str | None:
    """Why nothing can be written in `folder` (a real write of a temporary file: permission bits do not
    bind root, and some folders refuse files), or None when a file can be."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".kvsim-write-check-"):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def is_fleet(config: Any) -> bool:
    """Whether a run is a fleet (`kvsim.simulate_cluster`): more than one replica, or a fleet knob (the
    router's) set away from its default; a fleet of one replica gives exactly what `simulate` gives, plus
    the fleet's part."""
    return any(getattr(config, name) != KNOBS[name].default for name in CLUSTER_KNOBS)


def read_run_file(args: argparse.Namespace) -> dict[str, Any]:
    """The `--toml` run file's table (empty without one), its keys checked."""
    data: dict[str, Any] = {}
    if args.toml:
        data = read_toml(args.toml, "run file")  # a sweep file's rule
        if not isinstance(data.get("config", {}), dict):
            raise InvalidArgumentError(f"run file {args.toml}: config must be a [config] table")
        if data.get("backend", "rust") not in ("rust", "reference"):
            raise InvalidArgumentError(
                f"run file {args.toml}: backend {data['backend']!r} is not one of 'rust', 'reference'"
            )
        unknown = set(data) - {"workload", "requests", "seed", "backend", "config"}
        if unknown:
            raise InvalidArgumentError(f"run file {args.toml}: unknown keys {sorted(unknown)}")
    return data


def _refuse_backend_block(args: argparse.Namespace, config: Any, prefill: Any) -> None:
    """Refuses a block size given with a model on a GPU that no attention backend of vLLM 0.33.0 or 0.34.0 takes
    (`kvsim.cli.block_backend`): the replicas' own, then the prefill replicas' (`--prefill-config`) where theirs
    is their own."""
    why = backend_block_refusal(config, given_where(args)("block_size"))
    if why is None and prefill is not None and prefill.block_size != config.block_size:
        why = backend_block_refusal(prefill, "argument --prefill-config: block_size")
    if why is not None:
        raise FlagError(why)


def cmd_run(args: argparse.Namespace) -> int:
    import kvsim
    from kvsim.engine import metrics

    data = read_run_file(args)
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
    save_dir = _save_dir_from_args(args)
    config = _config_from_args(args, data)
    _refuse_idle_knobs(args, config, getattr(args, "prefill_sim_config", None))
    notes: list[str] = list(getattr(args, "sizing_notes", []))
    workload, info = _workload_from_args(args, data, notes)
    backend = args.backend or data.get("backend", "rust")
    # ITL's distribution is exact from the engines' record (kvsim.engine.metrics.itl_values): no time series.
    fleet = is_fleet(config)
    if fleet:
        if "itl" in pct_metrics:
            notes.append(
                "ITL: mean only in a fleet (the replicas carry no per-token record yet; the mean is exact)"
            )
        prefill = getattr(args, "prefill_sim_config", None)
        try:
            result: Any = kvsim.simulate_cluster(workload, config, backend=backend, prefill_config=prefill)
        except InvalidArgumentError as exc:
            if prefill is not None and "prefill_config" in str(exc):
                raise FlagError(f"argument --prefill-config: {exc}") from None
            raise
    else:
        result = kvsim.simulate(workload, config, backend=backend)
    assert result.requests is not None, "simulate keeps the request rows"
    serving = metrics.serving_metrics(
        result.requests,
        result.raw,
        percentile_metrics=pct_metrics,
        metric_percentiles=pcts,
        goodput=goodput,
    )
    run_notes(result, workload, info, notes)
    out = run_record(args, config, result, serving, info, notes, backend, goodput, fleet, workload)
    save_run(args, save_dir, config, result, out, info)
    if args.json:
        print(json.dumps(out, default=str, ensure_ascii=False))
    else:
        print_run(args, config, result, serving, out, info, notes, pct_metrics, pcts, fleet, save_dir)
    return 0
