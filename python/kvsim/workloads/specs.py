"""Workload parameters from text: the type of every parameter a `--workload NAME:key=value` spec (or a
`workload.<key>` grid axis) may set, the trace parameters (time scale, request rate, row window), the
paper presets' client-style `max_tokens`, and users' own trace files (`--workload path.csv`).

`kvsim.workloads.registry.parse_workload` and `make_workload` call this module; `kvsim run` uses it for files.

Trace parameters (any workload, applied after it is built, in this order):
- `start`, `stop`: keep rows `[start, stop)` of the table (a row window; ids and content unchanged,
  arrivals shifted so that the window's first request arrives at 0);
- `time_scale`: multiply every arrival time by it (0.5 replays the trace at twice the load);
- `request_rate`: rescale arrivals so the mean rate is this many requests per second (the first
  arrival stays at its time; exclusive with `time_scale`). The result's meta records it as `request_rate`
  (kept true by a later `time_scale`): the arrivals' mean is then their rate, not a generator's nominal
  `arrival_rate` (`kvsim.analysis.plan.workload_rate`).

A user's own file (`kvsim run --workload path.csv`) is replayed from its first request (`rebase`).

`max_tokens=context` (the default of the paper presets `sharegpt` and `alpaca`) sets each request's
`max_tokens` to `max_model_len − prompt_len`, what vLLM's OpenAI server fills in when a client sends
no `max_tokens`; the request still generates its drawn output length. `max_tokens=exact` is the true
output, an integer is a cap for all.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.errors import InvalidArgumentError
from kvsim.workloads.table import arrival_rate
from kvsim.workloads.trace_table import TABLE_FORMATS

TRACE_PARAMS = ("start", "stop", "time_scale", "request_rate")
TRACE_SUFFIXES = tuple(TABLE_FORMATS)  # (the table loader's map: one place)
# The parameters of `kvsim.workloads.synthetic` and the kind of value each takes.
SYNTHETIC_PARAMS: dict[str, str] = {
    "arrival_rate": "positive",
    "arrivals": "str",
    "burstiness": "positive",
    "lengths": "str",
    "max_model_len": "count",
    "num_system_prompts": "count",
    "system_prompt_len": "counts",
    "sharing_ratio": "fraction",
    "turns": "count",
    "turn_interval": "nonnegative",
    "num_samples": "count",
    "beam_width": "count",
    "max_tokens": "max_tokens",
}
_TRACE_KINDS = {"start": "index", "stop": "index", "time_scale": "positive", "request_rate": "positive"}


def is_trace_file(spec: str) -> bool:
    """Whether a `--workload` value names a file of the user's (by its suffix)."""
    return Path(spec.partition(":")[0] if not Path(spec).exists() else spec).suffix.lower() in TRACE_SUFFIXES


def check_param(label: str, key: str, value: Any, *, synthetic: bool) -> Any:
    """`value` of workload parameter `key` checked and converted (ints stay ints, `a/b` ranges tuples).

    Args:
        label: the workload spec, for the message (or where it came from, such as the flag
            `--grid workload.arrival_rate` or a sweep file's `[grid] workload.arrival_rate`, when it starts
            with `--` or `[`).
        key: the parameter.
        value: its value (a literal parsed from text, or a TOML value).
        synthetic: whether the workload is generated (length parameters allowed) or a trace.

    Raises:
        InvalidArgumentError: `workload 'sharegpt:turns=1.5': turns 1.5 must be a whole number >= 1`.
    """
    kind = _TRACE_KINDS.get(key) or (SYNTHETIC_PARAMS.get(key) if synthetic else None)
    if kind is None and not synthetic:
        raise InvalidArgumentError(
            f"workload {label!r}: {key!r} is not a trace parameter ({', '.join(TRACE_PARAMS)})"
        )
    if kind is None:  # a length_params key: a number or an a/b range of numbers
        _check_length_key(label, key)
        kind = "length"
    try:
        return _convert(key, value, kind)
    except InvalidArgumentError as exc:
        where = label if label.startswith(("--", "[")) else f"workload {label!r}"
        raise InvalidArgumentError(f"{where}: {exc}") from None


def _check_length_key(label: str, key: str) -> None:
    """A key neither `synthetic()`'s nor a trace's must be some length distribution's parameter: a typo
    (`arival_rate`) is named as unknown, with the keys it may have meant, not blamed on the preset's lengths."""
    import difflib

    from kvsim.workloads.generators import LENGTH_PARAMS

    lengths = sorted({k for keys in LENGTH_PARAMS.values() for k in keys})
    if key in lengths:
        return
    known = [*SYNTHETIC_PARAMS, *TRACE_PARAMS, *lengths]
    close = difflib.get_close_matches(key, known, n=3)
    hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
    where = label if label.startswith(("--", "[")) else f"workload {label!r}"
    raise InvalidArgumentError(
        f"{where}: unknown parameter {key!r} ({hint}a generated workload takes {', '.join(SYNTHETIC_PARAMS)}, "
        f"{', '.join(TRACE_PARAMS)} and its lengths' parameters: {', '.join(lengths)})"
    )


def plain_number(value: Any) -> Any:
    """A numpy scalar (any `numbers.Integral` / `numbers.Real`) as its Python int / float; a bool (numpy's
    is no `numbers.Integral`) and anything else as it is."""
    if isinstance(value, int | float):  # a bool among them
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def _number(key: str, value: Any) -> float:
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{key} {value!r} must be a number")
    try:
        v = float(value)
    except OverflowError:
        raise InvalidArgumentError(f"{key} {value!r} is out of range") from None
    if not math.isfinite(v):
        raise InvalidArgumentError(f"{key} {value!r} must be finite")
    return v


def _whole(key: str, value: Any, lo: int) -> int:
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{key} {value!r} must be a whole number >= {lo}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise InvalidArgumentError(f"{key} {value!r} must be a whole number >= {lo}")
    v = int(value)
    if v < lo or v > 1 << 40:
        raise InvalidArgumentError(f"{key} {value!r} must be a whole number between {lo} and 2**40")
    return v


def _convert(key: str, value: Any, kind: str) -> Any:
    if kind == "positive":
        v = _number(key, value)
        if v <= 0:
            raise InvalidArgumentError(f"{key} {value!r} must be > 0")
        return v
    if kind == "nonnegative":
        v = _number(key, value)
        if v < 0:
            raise InvalidArgumentError(f"{key} {value!r} must be >= 0")
        return v
    if kind == "fraction":
        v = _number(key, value)
        if not 0 <= v <= 1:
            raise InvalidArgumentError(f"{key} {value!r} must be in [0, 1]")
        return v
    if kind == "count":
        return _whole(key, value, 1)
    if kind == "index":
        return _whole(key, value, 0)
    if kind == "counts":
        if isinstance(value, tuple | list):
            return tuple(_whole(key, v, 0) for v in value)
        return _whole(key, value, 0)
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(f"{key} {value!r} must be a name")
        return value
    if kind == "max_tokens":
        if value in ("exact", "context"):
            return value
        if isinstance(value, str):
            raise InvalidArgumentError(f"max_tokens {value!r} must be exact, context or a whole number >= 1")
        return _whole(key, value, 1)
    # length parameter: a number or a lo/hi range
    if isinstance(value, tuple | list):
        plain = [plain_number(v) for v in value]
        return tuple(v if isinstance(v, int) and not isinstance(v, bool) else _number(key, v) for v in plain)
    if isinstance(value, str):
        if key in ("path", "prompt_column", "output_column"):
            return value
        raise InvalidArgumentError(f"{key} {value!r} must be a number or a lo/hi range")
    _number(key, value)
    return plain_number(value)


def split_trace_params(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(generator parameters, trace parameters)."""
    gen = {k: v for k, v in params.items() if k not in TRACE_PARAMS}
    return gen, {k: v for k, v in params.items() if k in TRACE_PARAMS}


def rebase(workload: Any) -> Any:
    """The workload with its clock started at its first request (arrivals shifted so the first is 0;
    `meta["rebased_s"]` is the shift), as `vllm bench serve` replays a trace: its duration, and so every
    throughput, counts from the first request."""
    from kvsim.workloads import Workload

    if not len(workload) or workload.arrival[0] <= 0:
        return workload
    cols = {k: np.array(v) for k, v in workload.columns().items()}
    cols["arrival"] = cols["arrival"] - cols["arrival"][0]
    return Workload._from_owned(
        cols,
        {**workload.meta, "rebased_s": float(workload.arrival[0])},
        allow_foreign_outputs=workload.allow_foreign_outputs,
    )


def apply_trace_params(workload: Any, params: Mapping[str, Any], label: str) -> Any:
    """The workload with `start`/`stop`, `time_scale` and `request_rate` applied (module docstring).

    Raises:
        InvalidArgumentError: an empty window, or `time_scale` with `request_rate`.
    """
    from kvsim.workloads import Workload

    if not params:
        return workload
    n = len(workload)
    start = int(params.get("start", 0))
    stop = int(params.get("stop", n))
    if start or stop < n:
        if not start < min(stop, n):
            raise InvalidArgumentError(f"workload {label!r}: rows [{start}, {stop}) of {n} hold no request")
        workload = workload[start:stop]
        if start:
            # A window replays from its first request: the clock starts there (throughput counts from 0).
            workload = rebase(workload)
    if "time_scale" in params and "request_rate" in params:
        raise InvalidArgumentError(f"workload {label!r}: give time_scale or request_rate, not both")
    factor = None
    if "time_scale" in params:
        factor = float(params["time_scale"])
    elif "request_rate" in params:
        arrival = workload.arrival
        span = float(arrival[-1] - arrival[0]) if len(arrival) > 1 else 0.0
        if span <= 0:
            raise InvalidArgumentError(
                f"workload {label!r}: request_rate needs arrivals spread over time (all arrive at once)"
            )
        factor = arrival_rate(len(arrival), span) / float(params["request_rate"])
    if factor is not None and factor != 1.0:
        cols = {k: np.array(v) for k, v in workload.columns().items()}
        first = cols["arrival"][0] if len(cols["arrival"]) else 0.0
        cols["arrival"] = first + (cols["arrival"] - first) * factor
        # (scales compose: a rate read from the generator's `arrival_rate` divides by their product)
        meta = {**workload.meta, "time_scale": float(workload.meta.get("time_scale", 1.0)) * factor}
        if "request_rate" in params:
            meta["request_rate"] = float(params["request_rate"])
        elif "request_rate" in meta:
            meta["request_rate"] = float(meta["request_rate"]) / factor
        workload = Workload._from_owned(cols, meta, allow_foreign_outputs=workload.allow_foreign_outputs)
    return workload


def client_max_tokens(workload: Any, label: str) -> Any:
    """The workload with `max_tokens = max_model_len − prompt_len` per request (at least 1): what vLLM's
    server fills in for a client that sends no `max_tokens`. The workload must record its
    `max_model_len` (the paper presets do: 2048).

    Raises:
        InvalidArgumentError: a workload without a `max_model_len`.
    """
    from kvsim.workloads import Workload

    mml = workload.meta.get("max_model_len")
    if mml is None:
        raise InvalidArgumentError(
            f"workload {label!r}: max_tokens=context needs max_model_len (set it: max_model_len=2048)"
        )
    cols = {k: np.array(v) for k, v in workload.columns().items()}
    cols["max_tokens"] = np.maximum(int(mml) - cols["prompt_len"], 1).astype(np.int64)
    meta = {**workload.meta, "max_tokens": "context"}
    return Workload._from_owned(cols, meta, allow_foreign_outputs=workload.allow_foreign_outputs)


def load_file(path: str, *, columns: Mapping[str, str] | None, time_unit: str) -> Any:
    """A user's trace file through `kvsim.workloads.load_table` (csv, jsonl, parquet)."""
    from kvsim.workloads import load_table

    return load_table(path, columns=columns, time_unit=time_unit)


def unread_content_note(spec: str, w: Any) -> str | None:
    """The note for a file whose columns that look like prompt content (their names say `hash`) were not
    read (`load_table`'s `meta["unread_content"]`), or None."""
    unread = list(w.meta.get("unread_content") or [])
    if not unread:
        return None
    names = ", ".join(repr(c) for c in unread)
    return (
        f"{spec} has {'a column' if len(unread) == 1 else 'columns'} {names} that "
        f"look{'s' * (len(unread) == 1)} like prompt content but {'is' if len(unread) == 1 else 'are'} not "
        f"read, so every prompt is taken as unique: --trace-columns hash_ids={unread[0]} reads one as "
        "Mooncake's hash ids (a list of ids per row, 512 tokens each; rows with equal leading ids share a prefix)"
    )


def parse_columns(text: str | None) -> dict[str, str] | None:
    """`arrival=timestamp,prompt_len=input_tokens` -> a `load_table` column mapping.

    Raises:
        InvalidArgumentError: a pair that is not OURS=THEIRS, or a column of ours mapped to two of theirs.
    """
    if text is None:
        return None
    out: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        ours, eq, theirs = pair.partition("=")
        if not eq or not ours.strip() or not theirs.strip():
            raise InvalidArgumentError(f"{pair!r} is not OURS=THEIRS (arrival=timestamp,...)")
        if ours.strip() in out and out[ours.strip()] != theirs.strip():
            # (the last one was read, silently; `--router-weight` and `--goodput` refuse a repeat too)
            raise InvalidArgumentError(
                f"{ours.strip()!r} is mapped twice ({out[ours.strip()]!r} and {theirs.strip()!r}): give it once"
            )
        out[ours.strip()] = theirs.strip()
    if not out:
        raise InvalidArgumentError(f"{text!r} names no column")
    return out


__all__ = [
    "SYNTHETIC_PARAMS",
    "TRACE_PARAMS",
    "apply_trace_params",
    "check_param",
    "client_max_tokens",
    "is_trace_file",
    "load_file",
    "parse_columns",
    "plain_number",
    "rebase",
    "split_trace_params",
    "unread_content_note",
]
