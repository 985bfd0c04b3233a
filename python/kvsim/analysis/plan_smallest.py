"""The capacity search's inverse questions (DESIGN.md §Capacity search): the smallest replica count
(`smallest_replicas`) and the smallest memory (`smallest_memory`) at which a configuration meets its SLOs at
a target rate. The probes, the rounds and the rate search are `kvsim.analysis.plan`'s; these vary another
axis through the same `_search` (its module docstring says how, and what monotonicity it assumes)."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kvsim._core import POOL_BYTES_PER_BLOCK
from kvsim.analysis.plan import (
    _check_count,
    _check_positive,
    _resolve_probe,
    _search,
    _setup,
    at_rate,
    workload_rate,
)
from kvsim.analysis.plan_probes import (
    MEMORY_KNOBS,
    _replica_count,
    cluster_probe,
    default_probe,
    set_knob,
    set_replicas,
    settling_reasons,
    unservable,
)
from kvsim.analysis.plan_search import (
    DEFAULT_MAX_PROBES,
    DEFAULT_PRECISION,
    SLO,
    PlanResult,
    Search,
    check_precision,
    parse_slos,
)
from kvsim.errors import InvalidArgumentError
from kvsim.model.units import fmt_bytes, fmt_count


def _target(workload: Any, rate: float | None) -> tuple[Any, float]:
    base = workload_rate(workload)
    if rate is None:
        return workload, base
    r = _check_positive("rate", rate)
    return at_rate(workload, r, base, "give a higher --rate"), r


def smallest_replicas(
    workload: Any,
    config: Any,
    slos: Mapping[str, Any] | Sequence[str | SLO] | str,
    *,
    rate: float | None = None,
    goodput: Any = None,
    max_replicas: int = 1024,
    start: int = 1,
    max_probes: int = DEFAULT_MAX_PROBES,
    probe: Callable[[Any, Any], Mapping[str, Any]] | None = None,
    replicas: Callable[[Any, int], Any] = set_replicas,
    executor: str = "threads",
    workers: int | None = None,
    scheduler: str | None = None,
    backend: str = "rust",
) -> PlanResult:
    """The smallest replica count at which the fleet meets every SLO at `rate` (integer bisection: exact).

    Each probe is `probe(workload at rate, replicas(config, n))`; the default `replicas` is
    `set_replicas` (`config.replace(replicas=n)`) and the default probe `cluster_probe` (a fleet:
    `kvsim.simulate` would ignore the count). Assumes monotonicity (more replicas never fail where fewer
    pass); contradicting probes are reported in `violations`.

    Args:
        rate: the target rate in requests per second (default: the workload's own).
        max_replicas: the cap; `start`: the first count probed.
        Others: as `plan`.

    Raises:
        InvalidArgumentError: as `plan`; and from the default `replicas`, a SimConfig without that knob,
            or one whose `data_parallel_size` is above 1 (its fleets are whole DP groups).
    """
    slos_ = parse_slos(slos)
    dp = getattr(config, "data_parallel_size", 1)
    if replicas is set_replicas and dp > 1:
        # (every count probed but 1 and the multiples of dp would be refused: DP groups are whole)
        raise InvalidArgumentError(
            f"smallest replicas with data_parallel_size {dp}: a mixture-of-experts model's ranks step in DP "
            f"groups of {dp} (DESIGN.md §Data-parallel groups), and the search does not step by groups; run "
            f"the counts with kvsim run --replicas (a multiple of {dp}) or kvsim sweep --grid replicas=..."
        )
    max_replicas = _check_count("max_replicas", max_replicas, 1)
    start = _check_count("start", start, 1)
    max_probes = _check_count("max_probes", max_probes, 2)
    if start > max_replicas:
        raise InvalidArgumentError(f"start {start} must be at most max_replicas {max_replicas}")
    from kvsim.analysis.executors import check_executor

    width = check_executor(executor, workers, scheduler)
    run_probe = _resolve_probe(probe, slos_, goodput, backend, default=cluster_probe)
    target, r = _target(workload, rate)
    search = Search(float(start), False, True, 0.0, 1.0, float(max_replicas), max_probes, width)

    def make(n: float) -> tuple[Any, Any, dict[str, Any]]:
        return target, replicas(config, int(n)), {"rate": r}

    own = replicas is set_replicas
    aside = unservable(workload, config, probe) if own else None
    settling = settling_reasons(config, probe, pool_varies=False) if own else frozenset()
    result = _search(
        search, make, run_probe, slos_, "replicas", executor, workers, scheduler, _setup(workload, config, r),
        unservable=aside, settling=settling, stop_flat=True, router=getattr(config, "router", None),
    )  # fmt: skip
    if own and result.value is not None:
        result = dataclasses.replace(result, value_words=fleet_words(config, int(result.value)))
    return result


def fleet_words(config: Any, n: int) -> str:
    """What `n` replicas of `config`'s fleet are, after the count: "decode replicas (+ 1 prefill; 5 GPUs)"
    where a prefill pool stays fixed beside the searched decode replicas, else "replicas (8 GPUs)" (a
    replica's GPUs: its tensor-parallel size, as `kvsim.analysis.plan_pd.gpus_per_replica`)."""
    tp = getattr(config, "tensor_parallel_size", 1)
    tp = tp if isinstance(tp, int) and tp >= 1 else 1
    p = getattr(config, "prefill_replicas", 0) or 0
    gpus = fmt_count((n + p) * tp, "GPU")
    if p:
        return f"decode replica{'s' * (n != 1)} (+ {p} prefill; {gpus})"
    return f"replica{'s' * (n != 1)} ({gpus})"


def smallest_memory(
    workload: Any,
    config: Any,
    slos: Mapping[str, Any] | Sequence[str | SLO] | str,
    *,
    knob: str = "num_blocks",
    rate: float | None = None,
    goodput: Any = None,
    low: float | None = None,
    high: float | None = None,
    precision: Any = DEFAULT_PRECISION,
    max_probes: int = DEFAULT_MAX_PROBES,
    probe: Callable[[Any, Any], Mapping[str, Any]] | None = None,
    executor: str = "threads",
    workers: int | None = None,
    scheduler: str | None = None,
    backend: str = "rust",
) -> PlanResult:
    """The smallest memory (`knob`: `num_blocks`, `kv_cache_bytes` or `gpu_memory_utilization`) at which
    `config` meets every SLO at `rate`, to `precision` (`num_blocks` bisects to the block when the
    precision asks for it).

    Assumes monotonicity (more memory never fails where less passes); contradicting probes are reported.
    A value the configuration refuses (a GPU share that cannot hold the model's weights) fails its probe
    without a simulation; the row says why in `refused`.

    Args:
        knob: the memory knob varied (`set_knob`).
        rate: the target rate (default: the workload's own).
        low, high: the floor and cap (default: num_blocks 2 and the config's own x 64; kv_cache_bytes
            1 MiB and the config's pool bytes x 64; gpu_memory_utilization 0.01 and 1.0). The search starts
            at the config's own value. The default cap of num_blocks and kv_cache_bytes stays within what
            the memory limit lets the pools hold (all replicas' together); a `high` beyond it is refused.
        Others: as `plan`.

    Raises:
        InvalidArgumentError: an unknown knob, bad bounds (a `high` whose pools exceed the memory limit),
            a config whose max_model_len is auto (fitted to each probe's pool), and as `plan`.
    """
    if knob not in MEMORY_KNOBS:
        raise InvalidArgumentError(f"knob {knob!r} is not one of {', '.join(MEMORY_KNOBS)}")
    if not hasattr(config, "replace") or not hasattr(config, knob):
        raise InvalidArgumentError(
            f"config {type(config).__name__} has no {knob} to vary: smallest_memory needs one SimConfig"
        )
    if getattr(getattr(config, "pool", None), "auto_fit", None) is not None:
        # (auto refits the length to each probe's pool, so which requests reach it changes with the knob)
        raise InvalidArgumentError(
            f"knob {knob}: max_model_len auto fits the length to the pool that {knob} sizes, so the search "
            "would vary both: give max_model_len a number"
        )
    slos_ = parse_slos(slos)
    prec = check_precision(precision)
    max_probes = _check_count("max_probes", max_probes, 2)
    most = _most_blocks(config)
    if knob == "num_blocks":
        own = float(config.pool.vllm_blocks)  # (the num_blocks that gives this pool: v0's one fewer)
        lo_d, hi_d = 2.0, min(own * 64, most)
        pool = config.pool
        if pool.kv_room_bytes is not None and pool.layout is not None:
            # (more blocks than fit beside the weights fail in vLLM, CUDA out of memory: not searched above)
            hi_d = min(hi_d, float(pool.kv_room_bytes // pool.layout.bytes_per_block))
    elif knob == "kv_cache_bytes":
        pool = config.pool
        if pool.kv_cache_bytes is None and pool.kv_bytes_per_token is None:
            raise InvalidArgumentError("knob kv_cache_bytes needs a model (its KV bytes per token)")
        own = float(pool.kv_cache_bytes or pool.num_blocks * pool.block_size * pool.kv_bytes_per_token)
        lo_d, hi_d = float(2**20), own * 64
        if pool.kv_bytes_per_token:
            hi_d = min(hi_d, most * pool.block_size * pool.kv_bytes_per_token)
        room = pool.kv_room_bytes
        if room is not None:  # (a larger cache does not fit beside the weights: refused, not a failure)
            if room < lo_d:
                raise InvalidArgumentError(
                    f"knob kv_cache_bytes: {config.model}'s weights leave {fmt_bytes(room)} of {config.gpu}: "
                    "no KV cache to search over"
                )
            hi_d = min(hi_d, float(room))
            if high is not None and float(high) > room:
                raise InvalidArgumentError(
                    f"high {float(high):g}: kv_cache_bytes above {room} B ({fmt_bytes(room)}) does not fit "
                    f"{config.gpu} beside {config.model}'s weights"
                )
    else:
        own = float(config.gpu_memory_utilization)
        lo_d, hi_d = 0.01, 1.0
    lo_ = lo_d if low is None else _check_positive("low", low)
    hi_ = hi_d if high is None else _check_positive("high", high)
    if not lo_ < hi_:
        raise InvalidArgumentError(f"low {lo_:g} must be below high {hi_:g}")
    if high is not None and knob != "gpu_memory_utilization":
        blocks = set_knob(config, hi_, knob=knob).num_blocks
        if blocks is not None and blocks > most:
            raise InvalidArgumentError(
                f"high {hi_:g}: {blocks} blocks per replica are more than the {int(most)} whose bookkeeping "
                f"fits the memory limit ({fmt_count(_replica_count(config), 'replica')} of "
                f"{POOL_BYTES_PER_BLOCK} bytes per block against {_memory_limit()} bytes)"
            )
    start = min(max(own, lo_), hi_)
    from kvsim.analysis.executors import check_executor

    width = check_executor(executor, workers, scheduler)
    run_probe = _resolve_probe(probe, slos_, goodput, backend, default=default_probe(config))
    target, r = _target(workload, rate)
    integer = knob != "gpu_memory_utilization"
    search = Search(start, False, integer, prec, lo_, hi_, max_probes, width)
    setter = functools.partial(set_knob, knob=knob)

    def make(x: float) -> tuple[Any, Any, dict[str, Any]]:
        probe_config = setter(config, x)
        pool = probe_config.pool
        refusal = pool.vllm_refusal if pool is not None else None
        if refusal is not None:
            # (a pool vLLM 0.33.0 refuses at start-up does not suffice: an override below one request or past
            # the GPU, a kv_cache_bytes below one request without a GPU, which kvsim runs as experiments, are
            # refused by the configuration here, as a kv_cache_bytes below one request on a GPU is)
            raise InvalidArgumentError(f"{knob} {x:g}: {refusal}")
        return target, probe_config, {"rate": r}

    return _search(
        search, make, run_probe, slos_, knob, executor, workers, scheduler, _setup(workload, config, r, False),
        refusals_fail=True, unservable=unservable(workload, config, probe),
        settling=settling_reasons(config, probe, pool_varies=True),
    )  # fmt: skip


def _memory_limit() -> int:
    from kvsim._core import pool_memory

    return int(pool_memory(2)[1])


def _most_blocks(config: Any) -> float:
    """The most blocks per replica whose pools' bookkeeping fits the memory limit (DESIGN.md §Memory
    limits; a fleet's pools count together): a probe above it would be refused by the engine, so a
    memory search's default cap stays at or below it. A single contiguous replica keeps no per-block
    arrays: no bound."""
    n = _replica_count(config)
    if n == 1 and getattr(config, "is_contiguous", False):
        return math.inf
    return float(_memory_limit() // (POOL_BYTES_PER_BLOCK * n))


__all__ = ["smallest_memory", "smallest_replicas"]
