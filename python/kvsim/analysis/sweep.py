"""Parameter sweeps: grids over `SimConfig` fields crossed with workloads and seeds, run in parallel on
threads, processes or a Dask cluster, appended to a parquet file one row per point, resumable, and
aggregated across seeds.

A *point* is one simulation: a config (the base fields plus one value of every grid parameter), a named
workload with its parameters, a seed and a request count. Its row holds every parameter, every summary
metric (`kvsim.simulate(...).summary`) and the wall time; `point_id` (a hash of the fully resolved config,
the workload, the seed, the request count, the backend and the SLOs if any) is what resume compares, so a
point already in the output file is never run again. Delete the file (or pass `resume=False`) to recompute
after the engine changes.

SLOs (`goodput={"ttft": 500, "tpot": 50}`, ms, `kvsim.engine.metrics.parse_goodput`'s forms) add goodput and SLO
attainment to every row (`kvsim.engine.metrics.goodput_columns`: `request_goodput`, `good_requests`,
`slo_attainment`, `slo_attainment_<metric>` per SLO) and the SLOs themselves as `goodput_slos_ms`
(`ttft:500,tpot:50`). They are part of the point's identity: a sweep resumed with other SLOs runs its
points again as new rows (told apart by `goodput_slos_ms`), never mixing them with the old ones; a sweep
without SLOs keeps the ids it always had.

Grid names are `SimConfig` field names (`block_size`, `policy`, `num_blocks`, ...), or `workload.<name>`
for a parameter of a synthetic workload (`workload.arrival_rate`, `workload.sharing_ratio`). Everything is
validated before any work starts: unknown names, empty value lists, values of the wrong type, unknown
workloads and invalid combinations (every point's `SimConfig` is built up front) raise
`InvalidArgumentError`.

Workloads are named (`WORKLOADS`): `sharegpt` and `alpaca` (the paper's length statistics, Poisson
arrivals), `sharegpt-real` (resampled real ShareGPT pairs), and the real traces `mooncake-conversation`,
`mooncake-synthetic`, `azure-code`, `azure-conv` (deterministic: one seed only; `requests` keeps the first
N rows). A spec string `NAME:key=value,key=value` overrides synthetic parameters, e.g.
`sharegpt:arrival_rate=4,max_tokens=2048`; keys that are not `synthetic()` arguments go to its
`length_params` (`prompt_len=16/256` is the range (16, 256)).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import difflib
import hashlib
import inspect
import json
import math
import multiprocessing
import os
import shutil
import sys
import threading
import time
import tomllib
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kvsim.errors import InvalidArgumentError
from kvsim.model.config import CLUSTER_KNOBS, KNOBS, PAPER_SETUP, SimConfig, convert

EXECUTORS = ("threads", "processes", "dask")
CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SimConfig) if f.name != "extra")
# The claims suite's base: the paper's setup (PagedAttention §6.1), OPT-13B on one A100-40GB with 12 GiB of
# KV cache. A sweep's own base starts from KNOBS' defaults (kvsim.model.config), as SimConfig and `kvsim run` do.
DEFAULT_BASE: dict[str, Any] = dict(PAPER_SETUP)
META_COLUMNS = (
    "point_id",
    "workload",
    "seed",
    "requests",
    "backend",
    "wall_s",
    "workload_s",
    "kvsim_version",
)
WORKLOAD_PREFIX = "workload."
# The SLOs of a row (`ttft:500,tpot:50`, kvsim.engine.metrics.goodput_label): a parameter, like the workload.
SLO_COLUMN = "goodput_slos_ms"

# One line per SimConfig field: the help of `kvsim run --<field>` and of `--grid` (from kvsim.model.config.KNOBS).
FIELD_HELP: dict[str, str] = {name: knob.help for name, knob in KNOBS.items() if name != "extra"}


# ------------------------------------------------------------------------------------------- values


def _field_kind(name: str) -> str:
    """The value kind of a SimConfig field (`kvsim.model.config.KNOBS`): int, float, bool, choice, bytes, ..."""
    return KNOBS[name].kind


def _literal(text: str) -> Any:
    """A TOML-ish scalar from flag text: int, float, true/false, none, a/b range tuple, else the string."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    if "/" in t:
        parts = t.split("/")
        values = [_literal(p) for p in parts]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            return tuple(values)
        return t
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t


def coerce(name: str, value: Any) -> Any:
    """`value` (flag text or a TOML value) converted to SimConfig field `name` by the field's own rule
    (`kvsim.model.config.convert`: sizes and durations take units, `12GiB`, `5ms`; `none` unsets an optional
    field; `true`/`false` for switches).

    Raises:
        InvalidArgumentError: a value the field does not take; the message starts with the field's name.
    """
    kind = _field_kind(name)
    v = value
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("none", "null"):
            v = None
        elif kind in ("int", "float", "bool"):
            v = _literal(text)
        else:  # choices, names and paths as written; sizes and durations parse their own units
            v = text
    return convert(name, v)


def _unknown(name: str, known: Iterable[str], what: str) -> InvalidArgumentError:
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return InvalidArgumentError(f"unknown {what} {name!r}{hint}; known: {', '.join(sorted(known))}")


# ---------------------------------------------------------------------------------------- workloads


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
            "2048 − prompt (vLLM's server default for a client that sends none; :max_tokens=exact for the "
            "true output)",
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
            params[key.strip()] = _literal(value)
    else:
        raise InvalidArgumentError(f"workload {spec!r} must be a NAME[:key=value,...] string or a table")
    name = name.strip()
    if not name:
        raise InvalidArgumentError(
            f"workload {label!r} names no workload; known: {', '.join(sorted(WORKLOADS))}"
        )
    if name not in WORKLOADS:
        raise _unknown(name, WORKLOADS, "workload")
    seeded = WORKLOADS[name].seeded
    params = {k: check_param(label, k, v, synthetic=seeded) for k, v in params.items()}
    return name, params


def workload_label(name: str, params: Mapping[str, Any]) -> str:
    """The canonical spec string of a workload (`sharegpt:arrival_rate=4`)."""
    if not params:
        return name
    return name + ":" + ",".join(f"{k}={_fmt(v)}" for k, v in sorted(params.items()))


def _fmt(v: Any) -> str:
    if isinstance(v, tuple):
        return "/".join(_fmt(x) for x in v)
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def _synthetic_kwargs(name: str, params: Mapping[str, Any], requests: int, seed: int) -> dict[str, Any]:
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
    if kind.synthetic is not None:
        w = workloads.synthetic(**_synthetic_kwargs(name, params, requests, seed))
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


_TRACE_CACHE: dict[tuple[str, str], Any] = {}
_TRACE_LOCK = threading.Lock()


def _load_trace(loader: str, path: str) -> Any:
    from kvsim import workloads

    with _TRACE_LOCK:
        if (loader, path) not in _TRACE_CACHE:
            fn = workloads.load_mooncake if loader == "mooncake" else workloads.load_azure
            _TRACE_CACHE[(loader, path)] = fn(path)
        return _TRACE_CACHE[(loader, path)]


class _WorkloadCache:
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


_WORKLOADS_CACHE = _WorkloadCache()


# -------------------------------------------------------------------------------------------- points


@dataclass(frozen=True)
class Point:
    """One simulation of a sweep (plain data, so it pickles to processes and Dask workers).

    Attributes:
        config: SimConfig keyword arguments (base fields and this point's grid values).
        workload: workload name (a key of `WORKLOADS`).
        workload_params: that workload's parameter overrides.
        seed: workload seed (0 for traces).
        requests: requests to simulate (traces: at most their length).
        backend: `rust` or `reference`.
        grid: the grid parameters of this point and their values (config fields and `workload.*`).
        goodput: SLO bounds in ms by metric (`kvsim.engine.metrics.parse_goodput`'s output), or empty for none.
    """

    config: Mapping[str, Any]
    workload: str
    workload_params: Mapping[str, Any]
    seed: int
    requests: int
    backend: str = "rust"
    grid: Mapping[str, Any] = field(default_factory=dict)
    goodput: Mapping[str, float] = field(default_factory=dict)

    def sim_config(self) -> SimConfig:
        return SimConfig(**self.config)

    @property
    def workload_key(self) -> str:
        return json.dumps([self.workload, sorted(self.workload_params.items()), self.requests, self.seed])

    def point_id(self, resolved: Mapping[str, Any] | None = None) -> str:
        """A stable hash of everything that determines this point's row (the SLOs only when there are
        some, so a sweep without them keeps the ids it had before SLOs existed)."""
        resolved = resolved if resolved is not None else self.sim_config().to_dict()
        # The fleet's knobs only when one differs from its default, so a one-replica point keeps the id
        # it had before fleets existed.
        resolved = {k: v for k, v in resolved.items() if not (k in CLUSTER_KNOBS and v == KNOBS[k].default)}
        identity: dict[str, Any] = {
            "config": resolved,
            "workload": self.workload,
            "workload_params": self.workload_params,
            "seed": self.seed,
            "requests": self.requests,
            "backend": self.backend,
        }
        if self.goodput:
            identity["goodput"] = {k: float(v) for k, v in self.goodput.items()}
        blob = json.dumps(identity, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


def simulate_point(point: Point, workload: Any, config: SimConfig, record_timeseries: bool | int) -> Any:
    import kvsim

    extra: dict[str, Any] = {"goodput": dict(point.goodput)} if point.goodput else {}
    if is_fleet_point(point, config):
        return kvsim.simulate_cluster(workload, config, backend=point.backend, **extra)
    if record_timeseries:
        extra["record_timeseries"] = record_timeseries
    return kvsim.simulate(workload, config, backend=point.backend, **extra)


def is_fleet_point(point: Point, config: SimConfig) -> bool:
    """Whether a point runs `kvsim.simulate_cluster`: it names a fleet knob (`replicas`, `router`, ...:
    a grid axis or the base) or has more than one replica; its row then has the fleet's summary columns
    (`load_imbalance`, `load_imbalance_requests`), with one replica too, so a `replicas` axis gives one
    table."""
    return config.replicas > 1 or any(name in point.config for name in CLUSTER_KNOBS)


def run_point(point: Point) -> dict[str, Any]:
    """Runs one point and returns its row: parameters, summary metrics (with the goodput columns of its
    SLOs, `kvsim.engine.metrics.goodput_columns`, as `simulate(..., goodput=)` gives them), wall time.

    The workload is built once per process and reused by the points that share it (threads wait for
    the one building it), so `workload_s` is 0 on a cache hit.
    """
    import kvsim

    config = point.sim_config()
    workload, workload_s = _WORKLOADS_CACHE.get(
        point.workload_key,
        lambda: make_workload(point.workload, point.workload_params, point.requests, point.seed),
    )
    t0 = time.perf_counter()
    result = simulate_point(point, workload, config, False)
    wall = time.perf_counter() - t0
    resolved = config.to_dict()
    row: dict[str, Any] = {
        "point_id": point.point_id(resolved),
        "workload": workload_label(point.workload, point.workload_params),
        "seed": point.seed,
        "requests": point.requests,
        "backend": point.backend,
    }
    row.update(resolved)
    if row.get("router_weights") is not None:  # a mapping: one text column (`prefix=3,queue=1`)
        row["router_weights"] = ",".join(f"{k}={v:g}" for k, v in row["router_weights"].items())
    row.update({WORKLOAD_PREFIX + k: _plain(v) for k, v in point.workload_params.items()})
    row.update({k: _plain(v) for k, v in point.grid.items() if k.startswith(WORKLOAD_PREFIX)})
    if point.goodput:
        from kvsim.engine.metrics import goodput_label

        row[SLO_COLUMN] = goodput_label(point.goodput)
    row.update(result.summary)
    row["wall_s"] = wall
    row["workload_s"] = workload_s
    row["kvsim_version"] = kvsim.__version__
    return row


def _plain(v: Any) -> Any:
    return _fmt(v) if isinstance(v, tuple | list) else v


# ---------------------------------------------------------------------------------------------- grid


def parse_grid_args(items: Sequence[str]) -> dict[str, list[Any]]:
    """`["block_size=8,16", "policy=vllm,orca-max"]` -> `{"block_size": [8, 16], "policy": [...]}`.

    Raises:
        InvalidArgumentError: a missing `=`, an unknown or repeated name, an empty or repeated value.
    """
    grid: dict[str, list[Any]] = {}
    for item in items:
        name, eq, values = item.partition("=")
        name = name.strip()
        if not eq:
            raise InvalidArgumentError(f"--grid {item!r}: expected NAME=V1,V2,...")
        if name in grid:
            raise InvalidArgumentError(f"--grid {name} given twice; list all its values once")
        raw = values.split(",")
        if not values.strip() or any(not v.strip() for v in raw):
            raise InvalidArgumentError(f"--grid {name}: empty value in {values!r}")
        grid[name] = list(raw)
    return check_grid(grid)


def check_grid(grid: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """Validates names and converts values to their field types (flag text or TOML values).

    Raises:
        InvalidArgumentError: an unknown name, an empty value list, a repeated value or a wrong type.
    """
    out: dict[str, list[Any]] = {}
    for name, values in grid.items():
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            values = [values]
        if len(values) == 0:
            raise InvalidArgumentError(f"grid parameter {name} has no values")
        if name.startswith(WORKLOAD_PREFIX):
            key = name[len(WORKLOAD_PREFIX) :]
            if not key:
                raise InvalidArgumentError(f"grid parameter {name!r} names no workload parameter")
            from kvsim.workloads.specs import check_param

            conv = [
                check_param(f"--grid {name}", key, _literal(v) if isinstance(v, str) else v, synthetic=True)
                for v in values
            ]
        elif name in CONFIG_FIELDS:
            try:
                conv = [coerce(name, v) for v in values]
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"--grid {name}: {exc}") from None
        else:
            raise _unknown(name, [*CONFIG_FIELDS, "workload.<synthetic parameter>"], "grid parameter")
        seen = [json.dumps(v, default=str) for v in conv]
        if len(set(seen)) != len(seen):
            raise InvalidArgumentError(f"grid parameter {name} repeats a value: {list(values)}")
        out[name] = conv
    return out


@dataclass
class SweepSpec:
    """Everything a sweep needs; build it with `SweepSpec.from_toml` or keywords, then `points()`.

    Attributes:
        name: names the output (`results/<name>.parquet`).
        grid: parameter -> values (config fields and `workload.*`), crossed.
        base: fixed SimConfig fields under the grid (unset fields: `kvsim.model.config.KNOBS`' defaults).
        workloads: workload specs (`sharegpt`, `alpaca:arrival_rate=10`, ...), crossed with the grid.
        seeds: seeds 0..seeds-1 for synthetic workloads (traces run once).
        requests: requests per point.
        backend: engine backend.
        goodput: SLOs in ms (`{"ttft": 500, "tpot": 50}`, or any form `kvsim.engine.metrics.parse_goodput`
            takes): every row gains goodput and SLO attainment, and the SLOs join the point's identity.
    """

    name: str = "sweep"
    grid: dict[str, list[Any]] = field(default_factory=dict)
    base: dict[str, Any] = field(default_factory=dict)
    workloads: list[Any] = field(default_factory=lambda: ["sharegpt"])
    seeds: int = 1
    requests: int = 10_000
    backend: str = "rust"
    goodput: Any = field(default_factory=dict)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> tuple[SweepSpec, dict[str, Any]]:
        """Reads a sweep file; returns the spec and the run options it sets (executor, workers, output).

        The file: top-level `name`, `requests`, `seeds`, `workloads` (list of specs or tables with
        `name`), `backend`, `executor`, `workers`, `scheduler`, `output`; `goodput` (SLOs in ms: a
        table `{ttft = 500, tpot = 50}`, or the flag's text `"ttft:500 tpot:50"`); table `[base]` of
        fixed SimConfig fields; table `[grid]` of lists.

        Raises:
            InvalidArgumentError: a missing or malformed file or an unknown key.
        """
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise InvalidArgumentError(f"sweep file {p} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidArgumentError(f"sweep file {p}: {exc}") from None
        known = {"name", "requests", "seeds", "workloads", "backend", "base", "grid", "goodput"}
        options = {"executor", "workers", "scheduler", "output"}
        unknown = set(data) - known - options
        if unknown:
            raise InvalidArgumentError(f"sweep file {p}: unknown keys {sorted(unknown)}")
        spec = cls(name=data.get("name", p.stem))
        if "base" in data:
            spec.base = dict(data["base"])
        spec.grid = check_grid(data.get("grid", {}))
        spec.workloads = list(data.get("workloads", spec.workloads))
        spec.seeds = int(data.get("seeds", spec.seeds))
        spec.requests = int(data.get("requests", spec.requests))
        spec.backend = data.get("backend", spec.backend)
        if "goodput" in data:
            from kvsim.engine.metrics import parse_goodput

            try:
                spec.goodput = parse_goodput(data["goodput"])
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"sweep file {p}: {exc}") from None
        return spec, {k: data[k] for k in options if k in data}

    def points(self, *, skip_invalid: bool = False) -> list[Point]:
        """Every point, workload-major (so a worker's cached workload serves its neighbours).

        Raises:
            InvalidArgumentError: a bad option, an unknown workload or base field, or invalid combinations
                (every one is listed unless `skip_invalid`).
        """
        if self.requests < 1:
            raise InvalidArgumentError(f"requests {self.requests} must be at least 1")
        if self.seeds < 1:
            raise InvalidArgumentError(f"seeds {self.seeds} must be at least 1")
        if self.backend not in ("rust", "reference"):
            raise InvalidArgumentError(f"backend {self.backend!r} is not 'rust' or 'reference'")
        if not self.workloads:
            raise InvalidArgumentError("no workloads given")
        from kvsim.engine.metrics import parse_goodput

        slos = parse_goodput(self.goodput)
        for k in self.base:
            if k not in CONFIG_FIELDS:
                raise _unknown(k, CONFIG_FIELDS, "base field")
        base = {k: coerce(k, v) for k, v in self.base.items()}
        grid = check_grid(self.grid)
        parsed = [parse_workload(w) for w in self.workloads]
        labels = [workload_label(n, p) for n, p in parsed]
        if len(set(labels)) != len(labels):
            raise InvalidArgumentError(f"a workload is listed twice: {labels}")
        workload_grid = {
            k[len(WORKLOAD_PREFIX) :]: v for k, v in grid.items() if k.startswith(WORKLOAD_PREFIX)
        }
        for name, params in parsed:
            if workload_grid and not WORKLOADS[name].seeded:
                raise InvalidArgumentError(
                    f"grid {sorted(WORKLOAD_PREFIX + k for k in workload_grid)} applies to synthetic "
                    f"workloads, not the trace {name!r}"
                )
            if WORKLOADS[name].seeded:
                _check_synthetic(name, params, workload_grid)
        names = list(grid)
        combos: list[dict[str, Any]] = [{}]
        for n in names:
            combos = [{**c, n: v} for c in combos for v in grid[n]]
        points: list[Point] = []
        bad: list[str] = []
        config_ok: dict[str, bool] = {}
        for (wname, wparams), _label in zip(parsed, labels, strict=True):
            seeds = range(self.seeds) if WORKLOADS[wname].seeded else range(1)
            for combo in combos:
                cfg = {**base, **{k: v for k, v in combo.items() if not k.startswith(WORKLOAD_PREFIX)}}
                wp = {
                    **wparams,
                    **{
                        k[len(WORKLOAD_PREFIX) :]: v
                        for k, v in combo.items()
                        if k.startswith(WORKLOAD_PREFIX)
                    },
                }
                key = json.dumps(cfg, sort_keys=True, default=str)
                if key not in config_ok:
                    try:
                        SimConfig(**cfg)
                        config_ok[key] = True
                    except (InvalidArgumentError, TypeError, ValueError) as exc:
                        config_ok[key] = False
                        bad.append(f"{combo or cfg}: {exc}")
                if not config_ok[key]:
                    continue
                for seed in seeds:
                    points.append(Point(cfg, wname, wp, seed, self.requests, self.backend, combo, slos))
        if bad and not skip_invalid:
            shown = "\n  ".join(bad[:8]) + (f"\n  ... and {len(bad) - 8} more" if len(bad) > 8 else "")
            raise InvalidArgumentError(
                f"{len(bad)} invalid grid combination(s) (split the grid, or skip them with --skip-invalid):"
                f"\n  {shown}"
            )
        if not points:
            raise InvalidArgumentError("the grid has no valid points")
        return points


def _check_synthetic(name: str, params: Mapping[str, Any], grid: Mapping[str, Sequence[Any]]) -> None:
    """Builds two requests of every workload variant so bad values fail before any work starts."""
    from kvsim import workloads

    variants: list[dict[str, Any]] = [dict(params)]
    for k, values in grid.items():
        variants = [{**v, k: x} for v in variants for x in values]
    for k, values in grid.items():  # each grid value alone first, so the error names the grid value
        for x in values:
            try:
                workloads.synthetic(**_synthetic_kwargs(name, {**params, k: x}, 2, 0))
            except (TypeError, ValueError) as exc:
                raise InvalidArgumentError(
                    f"grid {WORKLOAD_PREFIX}{k}={_fmt(x)}: not valid for workload {name} ({exc})"
                ) from None
    for v in variants:
        try:
            workloads.synthetic(**_synthetic_kwargs(name, v, 2, 0))
        except (TypeError, ValueError) as exc:  # InvalidArgumentError is a ValueError
            raise InvalidArgumentError(f"workload {workload_label(name, v)}: {exc}") from None


# ---------------------------------------------------------------------------------------- the store


def check_output(path: str | os.PathLike[str]) -> Path:
    """Checks, before any point runs, that a sweep can write its parquet file at `path`: not a folder,
    not an existing file that is not parquet, and in a folder that exists or can be made and is writable.

    Returns:
        The path.

    Raises:
        InvalidArgumentError: why it cannot be written (the message starts with the path).
    """
    import tempfile

    p = Path(path)
    if p.is_dir():
        raise InvalidArgumentError(f"{p} is a folder, not a parquet file")
    if p.exists():
        try:
            pl.read_parquet_schema(p)
        except Exception as exc:  # polars raises several kinds for a file that is not parquet
            raise InvalidArgumentError(
                f"{p} exists and is not a parquet file ({type(exc).__name__}); move it or choose another path"
            ) from None
    for parent in [p.parent, *p.parent.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise InvalidArgumentError(f"{p}: {parent} is a file, not a folder")
            break
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=f".{p.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise InvalidArgumentError(f"{p}: cannot write in {p.parent} ({exc.strerror or exc})") from None
    return p


class ResultStore:
    """The sweep's parquet file: rows already there (for resume) and new rows.

    While a sweep runs, each flush (at most every `flush_every_s` seconds) writes only the rows that
    arrived since the last one, as one part file in `<path>.parts/`, so a sweep's writing is linear in
    its rows; `finish()` writes the file itself as one table (old rows, parts and new rows, to a temporary
    name, then renamed) and removes the parts. An interrupted sweep leaves its parts: the next one reads
    the file and the parts (`polars.scan_parquet`), and skips every point found, so resume is exact and
    an interruption loses at most `flush_every_s` of work. A row is identified by `point_id`; a point
    found twice (the file written, the parts not yet removed) is kept once.

    Raises:
        InvalidArgumentError: `path` cannot be written (see `check_output`), or holds what is not parquet.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None, *, resume: bool = True, flush_every_s: float = 10.0
    ):
        self.path = check_output(path) if path is not None else None
        self.old = pl.DataFrame()
        self.new: list[dict[str, Any]] = []
        self.flushed = 0  # rows of `new` already in a part file
        self._next_part = 0
        self.flush_every_s = flush_every_s
        self._last_flush = time.monotonic()
        if self.path is None:
            return
        if not resume:
            self.path.unlink(missing_ok=True)
            shutil.rmtree(self.parts_dir, ignore_errors=True)
            return
        frames = []
        if self.path.exists():
            frames.append(pl.scan_parquet(self.path))
        parts = sorted(self.parts_dir.glob("part-*.parquet")) if self.parts_dir.is_dir() else []
        if parts:
            frames.append(pl.scan_parquet(parts))
        if frames:
            try:
                old = pl.concat(frames, how="diagonal_relaxed").collect()
            except Exception as exc:  # a damaged part or file: say which store, not polars' internals
                raise InvalidArgumentError(
                    f"{self.path}: cannot read the rows already there ({type(exc).__name__}: {exc})"
                ) from None
            if "point_id" in old.columns:
                old = old.unique(subset="point_id", keep="first", maintain_order=True)
            self.old = old
        self._next_part = 1 + max((int(p.stem.split("-")[1]) for p in parts), default=-1)

    @property
    def parts_dir(self) -> Path:
        assert self.path is not None
        return self.path.with_name(self.path.name + ".parts")

    @property
    def done(self) -> set[str]:
        ids = set(self.old["point_id"].to_list()) if "point_id" in self.old.columns else set()
        return ids | {r["point_id"] for r in self.new}

    def add(self, row: dict[str, Any]) -> None:
        self.new.append(row)
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def frame(self) -> pl.DataFrame:
        new = rows_frame(self.new)
        if self.old.height == 0:
            return new
        if new.height == 0:
            return self.old
        return pl.concat([self.old, new], how="diagonal_relaxed")

    def flush(self) -> None:
        """Writes the rows added since the last flush as one part file (nothing if there are none). A
        part that cannot be written stays in memory and goes into the next part or the final file."""
        self._last_flush = time.monotonic()
        if self.path is None or self.flushed == len(self.new):
            return
        part = self.parts_dir / f"part-{self._next_part:06d}.parquet"
        try:
            self.parts_dir.mkdir(parents=True, exist_ok=True)
            tmp = part.with_name(part.name + ".tmp")
            rows_frame(self.new[self.flushed :]).write_parquet(tmp)
            os.replace(tmp, part)
        except OSError:
            return  # kept in memory; finish() says where the rows went if the file cannot be written either
        self._next_part += 1
        self.flushed = len(self.new)

    def finish(self) -> None:
        """Writes the file as one table and removes the parts.

        Raises:
            InvalidArgumentError: the file cannot be written; the message says where the rows were kept
                instead (a parquet file in the temporary folder).
        """
        if self.path is None or (not self.new and not self.parts_dir.is_dir()):
            return
        frame = self.frame()
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            frame.write_parquet(tmp)
            os.replace(tmp, self.path)
        except OSError as exc:
            import tempfile

            try:
                fd, kept = tempfile.mkstemp(prefix=f"kvsim-{self.path.stem}-", suffix=".parquet")
                os.close(fd)
                frame.write_parquet(kept)
            except OSError as again:
                where = (
                    f"; the rows flushed earlier are in {self.parts_dir}" if self.parts_dir.is_dir() else ""
                )
                raise InvalidArgumentError(
                    f"cannot write {self.path} ({exc.strerror or exc}) nor a copy in the temporary folder "
                    f"({again.strerror or again}){where}"
                ) from None
            raise InvalidArgumentError(
                f"cannot write {self.path} ({exc.strerror or exc}); its {frame.height} rows are in {kept}"
            ) from None
        shutil.rmtree(self.parts_dir, ignore_errors=True)


def rows_frame(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """Rows (dicts, possibly with different keys and nulls) as one frame."""
    if not rows:
        return pl.DataFrame()
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    cols = {k: [r.get(k) for r in rows] for k in keys}
    series = []
    for k, values in cols.items():
        kinds = {type(v) for v in values if v is not None}
        if kinds and kinds <= {int, float} and float in kinds:
            values = [None if v is None else float(v) for v in values]
        elif len(kinds) > 1:
            values = [None if v is None else str(v) for v in values]
        series.append(pl.Series(k, values, strict=False))
    return pl.DataFrame(series)


# ------------------------------------------------------------------------------------------ running


def progress_bar(total: int, desc: str, enabled: bool) -> Any:
    """A tqdm bar on stderr, or None: only when `enabled` and stderr is a terminal (in a log, a bar's
    carriage returns would pile up into one long line)."""
    if not enabled or not total or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="pt", dynamic_ncols=True, smoothing=0.1)


def _local_map(pool: cf.Executor, task: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
    futures = [pool.submit(task, item) for item in items]
    try:
        for fut in cf.as_completed(futures):
            yield fut.result()
    finally:
        for fut in futures:
            fut.cancel()


def _dask_map(client: Any, task: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
    from distributed import as_completed

    for fut in as_completed(client.map(task, list(items), pure=False)):
        yield fut.result()


def _check_executor(executor: str, workers: int | None, scheduler: str | None) -> int:
    """The worker count (default: the CPU count) once the executor options are valid.

    Raises:
        InvalidArgumentError: an unknown executor, workers < 1, or a scheduler without `dask`.
    """
    if executor not in EXECUTORS:
        raise InvalidArgumentError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InvalidArgumentError(f"workers {workers!r} must be at least 1")
    if scheduler and executor != "dask":
        raise InvalidArgumentError("--scheduler needs --executor dask")
    return workers or os.cpu_count() or 1


def _check_scheduler(address: str) -> None:
    """Refuses a Dask scheduler address that is no address or (TCP) does not answer, before a `Client` is
    built: a Client whose start failed complains again from its finaliser at the interpreter's exit."""
    import socket

    import dask
    from dask.utils import parse_timedelta
    from distributed.comm import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    try:
        proto, loc = parse_address(address)
        get_backend(proto)
        if proto in ("tcp", "tls"):
            host, port = parse_host_port(loc)
            timeout = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="s")
            socket.create_connection((host, port), timeout=timeout).close()
    except (OSError, ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"scheduler {address!r}: cannot connect ({exc})") from None


@contextlib.contextmanager
def executor_session(
    executor: str = "threads",
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    dask_processes: bool = False,
) -> Iterator[Callable[[Callable[[Any], Any], Sequence[Any]], Iterator[Any]]]:
    """One pool of workers for several batches of tasks: yields `map(task, items)`, which runs
    `task(item)` for every item in parallel and yields the results in completion order. What `execute`
    runs sweep points on, and `kvsim.plan` its rounds of probes (one pool for all rounds). A task and its
    items must pickle for `processes` and `dask` (module-level functions, plain data).

    Args:
        executor: `threads` (the Rust engine releases the GIL), `processes` (spawned) or `dask`.
        workers: parallel workers (default: the CPU count).
        scheduler: a Dask scheduler address (`tcp://host:port`); without it `dask` starts a LocalCluster
            on 127.0.0.1.
        dask_processes: LocalCluster workers as processes (True) or threads in this process (False).

    Raises:
        InvalidArgumentError: an unknown executor, workers < 1, or a scheduler without `dask`.
    """
    workers = _check_executor(executor, workers, scheduler)
    if executor in ("threads", "processes"):
        pool: cf.Executor
        if executor == "threads":
            pool = cf.ThreadPoolExecutor(max_workers=workers)
        else:
            ctx = multiprocessing.get_context("spawn")  # fork would copy polars' and Rayon's thread pools
            pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
        with pool:
            yield lambda task, items: _local_map(pool, task, items)
        return
    with warnings.catch_warnings():
        # distributed warns on import about optional packages and on cluster start about ports; neither
        # matters for a sweep, and pytest turns warnings into errors.
        warnings.simplefilter("ignore")
        from distributed import Client, LocalCluster

        cluster = None
        if scheduler:
            _check_scheduler(scheduler)
            try:
                client = Client(scheduler)
            except (OSError, ValueError) as exc:  # unreachable (a timeout is an OSError), or not an address
                raise InvalidArgumentError(f"scheduler {scheduler!r}: cannot connect ({exc})") from None
        else:
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=dask_processes,
                protocol="tcp://",
                host="127.0.0.1",
                dashboard_address=None,
                silence_logs=40,
            )
            client = Client(cluster)
    try:
        yield lambda task, items: _dask_map(client, task, items)
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client.close()
            if cluster is not None:
                cluster.close()


def execute(
    points: Sequence[Point],
    *,
    executor: str = "threads",
    workers: int | None = None,
    scheduler: str | None = None,
    dask_processes: bool = False,
) -> Iterable[dict[str, Any]]:
    """Runs points in parallel, yielding rows in completion order (`executor_session`'s options).

    Raises:
        InvalidArgumentError: an unknown executor, workers < 1, or a scheduler without `dask`.
    """
    _check_executor(executor, workers, scheduler)

    def rows() -> Iterator[dict[str, Any]]:
        with executor_session(
            executor, workers=workers, scheduler=scheduler, dask_processes=dask_processes
        ) as run:
            yield from run(run_point, points)

    return rows()


@dataclass
class SweepOutcome:
    """What `run_sweep` did.

    Attributes:
        frame: every row of the output (old and new).
        ran: points run now.
        skipped: points found in the output already.
        wall_s: seconds the run took.
        path: the parquet file (None when not written).
    """

    frame: pl.DataFrame
    ran: int
    skipped: int
    wall_s: float
    path: Path | None


def run_sweep(
    spec: SweepSpec,
    *,
    output: str | os.PathLike[str] | None = None,
    executor: str = "threads",
    workers: int | None = None,
    scheduler: str | None = None,
    resume: bool = True,
    progress: bool = True,
    skip_invalid: bool = False,
    dask_processes: bool = False,
    flush_every_s: float = 10.0,
) -> SweepOutcome:
    """Validates the whole sweep, skips points already in `output`, runs the rest, writes every row.

    Args:
        spec: the sweep.
        output: parquet path (None: keep rows in memory only).
        executor: `threads`, `processes` or `dask`.
        workers: parallel workers (default: CPU count).
        scheduler: Dask scheduler address.
        resume: skip points already in `output` (False: start the file afresh).
        progress: show a progress bar with ETA on stderr.
        skip_invalid: drop invalid grid combinations instead of failing.
        dask_processes: local Dask workers as processes.
        flush_every_s: rewrite the parquet file at most this often while running.

    Returns:
        A `SweepOutcome`.

    Raises:
        InvalidArgumentError: anything wrong with the sweep, before any point runs.
    """
    points = spec.points(skip_invalid=skip_invalid)
    if executor not in EXECUTORS:
        raise InvalidArgumentError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    if scheduler and executor != "dask":
        raise InvalidArgumentError("--scheduler needs --executor dask")
    if workers is not None and workers < 1:
        raise InvalidArgumentError(f"workers {workers} must be at least 1")
    store = ResultStore(output, resume=resume, flush_every_s=flush_every_s)
    done = store.done
    ids = [p.point_id() for p in points]
    if len(set(ids)) != len(ids):
        raise InvalidArgumentError("the grid lists the same point twice (two values resolve to one config)")
    todo = [p for p, i in zip(points, ids, strict=True) if i not in done]
    t0 = time.perf_counter()
    bar = progress_bar(len(todo), spec.name, progress)
    try:
        if todo:
            for row in execute(
                todo, executor=executor, workers=workers, scheduler=scheduler, dask_processes=dask_processes
            ):
                store.add(row)
                if bar is not None:
                    bar.update(1)
    except BaseException:
        # Interrupted or failed: keep what ran (as a part at least) so that the next run resumes from it.
        store.flush()
        with contextlib.suppress(Exception):
            store.finish()
        raise
    finally:
        if bar is not None:
            bar.close()
    store.finish()
    frame = store.frame()
    if frame.height and "point_id" in frame.columns:
        # The rows of this sweep's points, in grid order (workload, then the grid as given, then seed),
        # whatever order they completed in.
        order = pl.DataFrame({"point_id": ids, "_grid_order": range(len(ids))})
        frame = frame.join(order, on="point_id", how="inner").sort("_grid_order").drop("_grid_order")
    return SweepOutcome(frame, len(todo), len(points) - len(todo), time.perf_counter() - t0, store.path)


# -------------------------------------------------------------------------------------- aggregation

# Two-sided 97.5 % quantiles of Student's t for 1..30 degrees of freedom (no scipy dependency).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile (the 95 % two-sided interval); large df use a Cornish-Fisher term."""
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)


def parameter_columns(frame: pl.DataFrame) -> list[str]:
    """The columns of a sweep frame that identify a point apart from its seed."""
    return [
        c
        for c in frame.columns
        if c in CONFIG_FIELDS
        or c.startswith(WORKLOAD_PREFIX)
        or c in ("workload", "requests", "backend", SLO_COLUMN)
    ]


def metric_columns(frame: pl.DataFrame) -> list[str]:
    """Numeric columns that are results (summary metrics and wall time), not parameters."""
    params = set(parameter_columns(frame)) | {"point_id", "seed", "kvsim_version"}
    return [c for c in frame.columns if c not in params and frame[c].dtype.is_numeric()]


def aggregate(
    frame: pl.DataFrame, metrics: Sequence[str] | None = None, by: Sequence[str] | None = None
) -> pl.DataFrame:
    """Mean, standard deviation and 95 % confidence half-width of each metric across seeds.

    Args:
        frame: sweep rows.
        metrics: metric columns (default: every numeric result column).
        by: grouping columns (default: every parameter column, i.e. all but the seed).

    Returns:
        One row per group: the `by` columns, `n_seeds`, and `<m>_mean`, `<m>_std`, `<m>_ci95` per metric
        (`ci95` = t(0.975, n-1) · std / sqrt(n), null for one seed).
    """
    if frame.height == 0:
        return frame
    by = list(by) if by is not None else parameter_columns(frame)
    metrics = list(metrics) if metrics is not None else metric_columns(frame)
    exprs: list[pl.Expr] = [pl.len().alias("n_seeds")]
    for m in metrics:
        col = pl.col(m).cast(pl.Float64)
        exprs += [col.mean().alias(f"{m}_mean"), col.std().alias(f"{m}_std")]
    out = frame.group_by(by, maintain_order=True).agg(exprs)
    tq = pl.Series("_t", [t_quantile_975(int(n) - 1) for n in out["n_seeds"]], dtype=pl.Float64)
    out = out.with_columns(tq).with_columns(
        [
            pl.when(pl.col("n_seeds") > 1)
            .then(pl.col("_t") * pl.col(f"{m}_std") / pl.col("n_seeds").cast(pl.Float64).sqrt())
            .otherwise(None)
            .alias(f"{m}_ci95")
            for m in metrics
        ]
    )
    return out.drop("_t")


__all__ = [
    "CONFIG_FIELDS",
    "DEFAULT_BASE",
    "EXECUTORS",
    "FIELD_HELP",
    "SLO_COLUMN",
    "WORKLOADS",
    "Point",
    "ResultStore",
    "SweepOutcome",
    "SweepSpec",
    "aggregate",
    "check_grid",
    "check_output",
    "coerce",
    "execute",
    "make_workload",
    "parse_grid_args",
    "parse_workload",
    "progress_bar",
    "run_point",
    "run_sweep",
    "t_quantile_975",
    "workload_label",
]
