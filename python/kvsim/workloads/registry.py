"""The named workloads (`WORKLOADS`) that sweeps, the claims suite and `kvsim run --workload NAME` build:
their specs parsed (`NAME:key=value,...`), built (`make_workload`, synthetic presets or real traces from
the traces folder) and cached per process (a trace is loaded once; built workloads in a small LRU).

`sharegpt` and `alpaca` (the paper's length statistics, Poisson arrivals), `sharegpt-real` (resampled real
ShareGPT pairs), `synthetic`, and the real traces `mooncake-conversation`, `mooncake-synthetic`,
`azure-code`, `azure-conv` (deterministic: one seed only; `requests` keeps the first N rows). A spec
string `NAME:key=value,key=value` overrides synthetic parameters, e.g. `sharegpt:arrival_rate=4,max_tokens=2048`;
keys that are not `synthetic()` arguments go to its `length_params` (`prompt_len=16/256` is the range
(16, 256)); parameter kinds and trace parameters are `kvsim.workloads.specs`'.
"""

from __future__ import annotations

import difflib
import inspect
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kvsim.errors import InvalidArgumentError


def literal(text: str) -> Any:
    """A TOML-ish scalar from flag text: int, float, true/false, none, a/b range tuple, else the string.

    Raises:
        InvalidArgumentError: a number beyond a float's range (`1e400`, which Python's `float` reads as
            infinity): `'1e400' is beyond a float's range (about 1.8e308)`; the caller names the field.
    """
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    if "/" in t:
        values: list[Any] = []
        overflow = None
        for part in t.split("/"):
            try:
                values.append(literal(part))
            except InvalidArgumentError as exc:  # (a part beyond a float's range)
                overflow = overflow or exc
                values.append(math.inf)
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            if overflow is not None:
                raise overflow  # (a range of numbers, one of them too large)
            return tuple(values)
        return t  # (a path or a name: its parts are not numbers)
    for conv in (int, float):
        try:
            value = conv(t)
        except ValueError:
            continue
        if value in (math.inf, -math.inf) and "inf" not in low:
            raise InvalidArgumentError(f"{t!r} is beyond a float's range (about 1.8e308)")
        return value
    return t


def unknown_name(name: str, known: Iterable[str], what: str) -> InvalidArgumentError:
    """The error for an unknown `what` named `name`: the closest known names, then all of them."""
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return InvalidArgumentError(f"unknown {what} {name!r}{hint}; known: {', '.join(sorted(known))}")


@dataclass(frozen=True)
class WorkloadKind:
    """A named workload: a synthetic preset (its default `synthetic()` arguments) or a trace file.

    Attributes:
        name: the name used in `--workload`.
        synthetic: default keyword arguments of `kvsim.workloads.synthetic` (None for a trace).
        trace: (loader, path relative to the traces folder) of a real trace.
        description: one line for `--help`.
    """

    name: str
    synthetic: Mapping[str, Any] | None = None
    trace: tuple[str, str] | None = None
    description: str = ""

    @property
    def seeded(self) -> bool:
        return self.synthetic is not None


WORKLOADS: dict[str, WorkloadKind] = {
    w.name: w
    for w in (
        WorkloadKind(
            "synthetic",
            {"lengths": "sharegpt-paper", "arrival_rate": 1.0},
            description="kvsim.workloads.synthetic with its own defaults except 1 req/s; set lengths etc.",
        ),
        WorkloadKind(
            "sharegpt",
            {"lengths": "sharegpt-paper", "arrival_rate": 2.0, "max_tokens": "context"},
            description="paper ShareGPT statistics (161.31 in / 337.99 out), Poisson 2 req/s, max_tokens = "
            "2048 − prompt (the paper's: what vLLM fills in for a client that sends none at OPT-13B's context "
            "of 2,048; :max_tokens=exact for the true output)",
        ),
        WorkloadKind(
            "alpaca",
            {"lengths": "alpaca-paper", "arrival_rate": 30.0, "max_tokens": "context"},
            description="paper Alpaca statistics (19.31 in / 58.45 out), Poisson 30 req/s, max_tokens = "
            "2048 − prompt",
        ),
        WorkloadKind(
            "sharegpt-real",
            {"lengths": "sharegpt-real", "arrival_rate": 0.5},
            description="real ShareGPT (prompt, output) pairs resampled, Poisson 0.5 req/s",
        ),
        WorkloadKind(
            "mooncake-conversation",
            trace=("mooncake", "mooncake/conversation_trace.jsonl"),
            description="Mooncake FAST'25 conversation trace (12,031 requests, prefix hashes)",
        ),
        WorkloadKind(
            "mooncake-synthetic",
            trace=("mooncake", "mooncake/synthetic_trace.jsonl"),
            description="Mooncake FAST'25 synthetic trace (3,993 requests, prefix hashes)",
        ),
        WorkloadKind(
            "azure-code",
            trace=("azure", "azure_llm_2023/AzureLLMInferenceTrace_code.csv"),
            description="Azure LLM inference 2023, code (8,819 requests)",
        ),
        WorkloadKind(
            "azure-conv",
            trace=("azure", "azure_llm_2023/AzureLLMInferenceTrace_conv.csv"),
            description="Azure LLM inference 2023, conversation (19,366 requests)",
        ),
    )
}
_SYNTHETIC_ARGS = tuple(
    p
    for p in inspect.signature(__import__("kvsim.workloads", fromlist=["synthetic"]).synthetic).parameters
    if p not in ("num_requests", "seed", "first_request_id", "length_params")
)


def parse_workload(spec: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """`NAME` or `NAME:key=value,...` (or a TOML table with `name`) -> (name, parameter overrides).

    Every value is checked against the parameter's kind (`kvsim.workloads.specs`): `arrival_rate=abc`,
    `num_samples=abc` or `turns=1.5` fail here, naming the spec and the parameter. Traces take the
    trace parameters (`start`, `stop`, `time_scale`, `request_rate`) only.

    Raises:
        InvalidArgumentError: an empty or unknown workload, a malformed pair, or a bad value.
    """
    from kvsim.workloads.specs import check_param

    if isinstance(spec, Mapping):
        params = dict(spec)
        name = params.pop("name", None)
        if not isinstance(name, str):
            raise InvalidArgumentError(f"workload table {dict(spec)!r} needs a name")
        label = name
    elif isinstance(spec, str):
        label = spec
        name, _, rest = spec.partition(":")
        params = {}
        for pair in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = pair.partition("=")
            if not eq or not key.strip() or not value.strip():
                raise InvalidArgumentError(f"workload {spec!r}: {pair!r} is not key=value")
            if key.strip() in params:
                raise InvalidArgumentError(f"workload {spec!r}: {key.strip()!r} given twice")
            try:
                params[key.strip()] = literal(value)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"workload {spec!r}: {key.strip()} {exc}") from None
    else:
        raise InvalidArgumentError(f"workload {spec!r} must be a NAME[:key=value,...] string or a table")
    name = name.strip()
    if not name:
        raise InvalidArgumentError(
            f"workload {label!r} names no workload; known: {', '.join(sorted(WORKLOADS))}"
        )
    if name not in WORKLOADS:
        raise unknown_name(name, WORKLOADS, "workload")
    seeded = WORKLOADS[name].seeded
    params = {k: check_param(label, k, v, synthetic=seeded) for k, v in params.items()}
    return name, params


def workload_label(name: str, params: Mapping[str, Any]) -> str:
    """The canonical spec string of a workload (`sharegpt:arrival_rate=4`)."""
    if not params:
        return name
    return name + ":" + ",".join(f"{k}={format_value(v)}" for k, v in sorted(params.items()))


def format_value(v: Any) -> str:
    """A parameter value as spec text (a range `16/256`, `true`/`false`)."""
    if isinstance(v, tuple):
        return "/".join(format_value(x) for x in v)
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def synthetic_kwargs(name: str, params: Mapping[str, Any], requests: int, seed: int) -> dict[str, Any]:
    """`synthetic()` keyword arguments of a workload (trace parameters and `max_tokens=context` are
    applied afterwards by `make_workload`)."""
    from kvsim.workloads.specs import TRACE_PARAMS

    kind = WORKLOADS[name]
    assert kind.synthetic is not None
    kwargs: dict[str, Any] = {**kind.synthetic}
    length_params: dict[str, Any] = {}
    for k, v in params.items():
        if k in TRACE_PARAMS:
            continue
        if k in _SYNTHETIC_ARGS:
            kwargs[k] = list(v) if k == "max_tokens" and isinstance(v, tuple) else v
        else:
            length_params[k] = v
    if kwargs.get("max_tokens") is not None and isinstance(kwargs["max_tokens"], list):
        kwargs["max_tokens"] = tuple(kwargs["max_tokens"])
    if kwargs.get("max_tokens") == "context":
        kwargs["max_tokens"] = "exact"
    if length_params:
        kwargs["length_params"] = length_params
    return {"num_requests": requests, "seed": seed, **kwargs}


def make_workload(name: str, params: Mapping[str, Any], requests: int, seed: int) -> Any:
    """Builds (or loads) a workload; traces keep their first `requests` rows (of the `start`/`stop`
    window); then `time_scale` / `request_rate` apply (`kvsim.workloads.specs`).

    Raises:
        InvalidArgumentError: a missing trace file or a bad parameter.
    """
    from kvsim import workloads
    from kvsim.workloads.specs import apply_trace_params, client_max_tokens, split_trace_params

    kind = WORKLOADS[name]
    label = workload_label(name, params)
    _, trace = split_trace_params(params)
    check_arrival_params(name, params, label)
    if kind.synthetic is not None:
        w = workloads.synthetic(**synthetic_kwargs(name, params, requests, seed))
        if {**kind.synthetic, **params}.get("max_tokens") == "context":
            w = client_max_tokens(w, label)
        return apply_trace_params(w, trace, label)
    assert kind.trace is not None
    loader, rel = kind.trace
    path = workloads.traces_dir() / rel
    if not path.exists():
        raise InvalidArgumentError(f"workload {name!r}: trace file {path} does not exist (set KVSIM_TRACES)")
    full = _load_trace(loader, str(path))
    window = {k: v for k, v in trace.items() if k in ("start", "stop")}
    if window:
        full = apply_trace_params(full, window, label)
    w = full if requests >= len(full) else full[:requests]
    return apply_trace_params(w, {k: v for k, v in trace.items() if k not in window}, label)


def check_arrival_params(name: str, params: Mapping[str, Any], label: str) -> None:
    """Refuses a parameter given to a workload whose arrival process never reads it (it was echoed in the
    workload line as if it applied): `arrival_rate` with `all-at-once`, and `time_scale` with `all-at-once`
    when every request arrives at 0 (one turn; `request_rate` is refused there by the trace parameters). A
    `burstiness` other than 1 with arrivals other than `gamma` is `synthetic`'s to refuse (1 is Poisson's
    own).

    Raises:
        InvalidArgumentError: naming the workload, the parameter and the arrivals.
    """
    kind = WORKLOADS[name]
    if kind.synthetic is None:
        return
    arrivals = params.get("arrivals", kind.synthetic.get("arrivals", "poisson"))
    if arrivals == "all-at-once":
        defaults = {**kind.synthetic, **params}
        # A conversation's later turns arrive turn_interval apart: time_scale scales those.
        one_instant = defaults.get("turns", 1) == 1 or defaults.get("turn_interval", 30.0) == 0
        for key in ("arrival_rate", *(("time_scale",) if one_instant else ())):
            if key in params:
                raise InvalidArgumentError(
                    f"workload {label!r}: {key} does nothing with arrivals=all-at-once (every request "
                    "arrives at 0)"
                )


_TRACE_CACHE: dict[tuple[str, str], Any] = {}
_TRACE_LOCK = threading.Lock()


def _load_trace(loader: str, path: str) -> Any:
    from kvsim import workloads

    with _TRACE_LOCK:
        if (loader, path) not in _TRACE_CACHE:
            fn = workloads.load_mooncake if loader == "mooncake" else workloads.load_azure
            _TRACE_CACHE[(loader, path)] = fn(path)
        return _TRACE_CACHE[(loader, path)]


class WorkloadCache:
    """A small per-process LRU of built workloads; one lock per key so two threads build it once."""

    def __init__(self, size: int = 2) -> None:
        self.size = size
        self.items: OrderedDict[str, Any] = OrderedDict()
        self.lock = threading.Lock()
        self.key_locks: dict[str, threading.Lock] = {}

    def get(self, key: str, build: Callable[[], Any]) -> tuple[Any, float]:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key], 0.0
            key_lock = self.key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self.lock:
                if key in self.items:
                    return self.items[key], 0.0
            t0 = time.perf_counter()
            value = build()
            spent = time.perf_counter() - t0
            with self.lock:
                self.items[key] = value
                while len(self.items) > self.size:
                    self.items.popitem(last=False)
                self.key_locks.pop(key, None)
            return value, spent


WORKLOAD_CACHE = WorkloadCache()


__all__ = [
    "WORKLOADS",
    "WORKLOAD_CACHE",
    "WorkloadCache",
    "WorkloadKind",
    "check_arrival_params",
    "format_value",
    "literal",
    "make_workload",
    "parse_workload",
    "synthetic_kwargs",
    "unknown_name",
    "workload_label",
]


# The column mappings that read the registry's trace formats as a file workload (`kvsim run --workload
# PATH`): Mooncake's hash_ids by the same-name rule, Azure's dates as seconds since the earliest.
_FORMAT_FLAGS = {
    "mooncake": (
        ("timestamp", "input_length", "output_length", "hash_ids"),
        "--time-unit ms --trace-columns arrival=timestamp,prompt_len=input_length,output_len=output_length "
        "(hash_ids is read as prompt content)",
    ),
    "azure": (
        ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
        "--trace-columns arrival=TIMESTAMP,prompt_len=ContextTokens,output_len=GeneratedTokens (its dates are "
        "read as seconds since the earliest)",
    ),
}


def trace_file_hint(path: str, field: str, reason: str) -> str:
    """What to do about a user's trace file (`kvsim run --workload PATH`) that failed to load for missing
    columns (`field` "header"): the `--trace-columns` to give, and where the file is one of the registry's
    traces (its file name) or in their format (its columns), that workload. "" for any other error (a
    bad row is the file's to fix)."""
    from pathlib import Path

    from kvsim.workloads.trace_table import file_columns

    if not (field == "header" and "missing" in reason):
        return ""
    name = Path(path).name
    same = [w.name for w in WORKLOADS.values() if w.trace is not None and Path(w.trace[1]).name == name]
    present = set(file_columns(Path(path)))
    fmt = next((k for k, (cols, _) in _FORMAT_FLAGS.items() if set(cols[:3]) <= present), None)
    parts = []
    if same:
        parts.append(f"its name is that of the trace --workload {same[0]} reads (with its own loader)")
    elif fmt is not None:
        kinds = " / ".join(w.name for w in WORKLOADS.values() if w.trace is not None and w.trace[0] == fmt)
        parts.append(f"its columns are those of the {fmt.capitalize()} traces ({kinds})")
    if fmt is not None:
        parts.append(f"as a file workload: {_FORMAT_FLAGS[fmt][1]}")
    else:
        parts.append("name the file's columns with --trace-columns arrival=COL,prompt_len=COL,output_len=COL")
    return "; " + "; ".join(parts)
