"""A disaggregated fleet's side of `kvsim.simulate_cluster` (DESIGN.md §Prefill/decode disaggregation): the
prefill pool's knobs (`PD_KNOBS`), the prefill pool as the engines take it (`_pd_spec`: the knobs checked,
naming what is not modelled, and the link's time a block), the link's defaults (`pd_link_bandwidth`, a
block's bytes `_pd_block_bytes`), and the rows and summary keys a disaggregated run adds (`_pd_result`,
`pd_prefix_hits`). `kvsim.engine.cluster` calls it; the fleet's other rules stay there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from kvsim.engine.engine_input import EngineInput
from kvsim.engine.simulate import over
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import DP_DISAGGREGATED, PS_PER_S, SimConfig
from kvsim.model.config_checks import tier_knob
from kvsim.model.units import fmt_bytes_exact

# The prefill pool's knobs (DESIGN.md §Prefill/decode disaggregation), taken the same way.
PD_KNOBS = (
    "prefill_replicas",
    "pd_threshold_tokens",
    "pd_link_bandwidth",
    "pd_link_latency_s",
    "pd_link_ps_per_block",
)


def _kv_cache_dtype(config: SimConfig) -> tuple[str, str]:
    """The KV cache dtype a configuration's pool keeps, and where it came from when not given: `auto` is the
    model's; an fp8 that `auto` became is vLLM's own choice for the model on the GPU
    (`kvsim.model.dsa.dsa_kv_dtype`)."""
    from kvsim.model.models import resolve

    given = config._given.get("kv_cache_dtype")  # type: ignore[attr-defined]
    # (vLLM's fp8 is e4m3: one layout under either spelling)
    kv = {"fp8_e4m3": "fp8"}.get(config.kv_cache_dtype, config.kv_cache_dtype)
    if config.model is None:
        return kv, ""
    m = resolve(config.release_model)
    if kv == "auto":
        return m.kv_dtype, " (auto: the model's)"
    if given == "auto":
        return (
            kv,
            f" (auto: vLLM 0.33.0's and 0.34.0's for {m.name} on {config.gpu if isinstance(config.gpu, str) else 'its GPU'})",
        )
    return kv, ""


def _pd_spec(configs: list[SimConfig], spec: Any, prefill_config: Any = None) -> Any:
    """The prefill pool (`kvsim.reference.cluster.PdSpec`) from config[0]'s knobs, or None for an
    aggregated fleet; refuses what is not modelled, naming the field (DESIGN.md §Prefill/decode
    disaggregation)."""
    from kvsim.reference.cluster import PdSpec

    first = configs[0]
    p = first.prefill_replicas
    if prefill_config is not None and not isinstance(prefill_config, SimConfig):
        raise InvalidArgumentError(f"prefill_config {prefill_config!r} is not a kvsim.SimConfig")
    if p == 0:
        if prefill_config is not None:
            raise InvalidArgumentError("prefill_config is given but prefill_replicas is 0 (no prefill pool)")
        return None
    if prefill_config is not None:
        for knob in ("model", "sampling", "max_model_len"):
            a, b = getattr(prefill_config, knob), getattr(first, knob)
            if a != b:
                fitted = any(getattr(c.pool, "auto_fit", None) is not None for c in (prefill_config, first))
                why = (
                    " (max_model_len auto fits each pool's length to its own memory: give max_model_len a "
                    "number)"
                    if knob == "max_model_len" and fitted
                    else ""
                )
                raise InvalidArgumentError(
                    f"prefill_config's {knob} {a!r} differs from the decode replicas' {b!r}{why}: both pools of "
                    "a disaggregated fleet run one model on one workload"
                )
        (a, why_a), (b, why_b) = _kv_cache_dtype(prefill_config), _kv_cache_dtype(first)
        if a != b:
            raise InvalidArgumentError(
                f"prefill_config's KV cache dtype {a}{why_a} differs from the decode replicas' {b}{why_b}: both "
                "pools of a disaggregated fleet keep one KV layout (the transfer copies blocks as they are)"
            )
    for i, c in enumerate(configs):
        if c != first:
            raise InvalidArgumentError(
                f"config[{i}] differs from config[0]: a disaggregated fleet runs one config in both pools "
                "(per-pool configs, prefill_config, are not modelled yet)"
            )
    if spec.refresh_ps:
        raise InvalidArgumentError(
            f"router_refresh_s {first.router_refresh_s!r}: a disaggregated fleet's routers read the replicas "
            "exactly (snapshots are not modelled with a prefill pool); set it to 0"
        )
    what = f"prefill_replicas {p}"
    pc = prefill_config or first
    if pc.data_parallel_size > 1:
        # (the decode replicas' own is refused by SimConfig; a prefill pool of DP ranks would step apart)
        raise InvalidArgumentError(
            f"prefill_config's data_parallel_size {pc.data_parallel_size}: {DP_DISAGGREGATED}"
        )
    if prefill_config is not None and prefill_config.kv_offloading_chunks:
        raise InvalidArgumentError(
            f"prefill_config: {tier_knob(prefill_config)} (a CPU tier) is not modelled on a prefill replica "
            "(its finished requests hold their blocks for their transfers): drop it from the prefill config "
            "(--prefill-config)"
        )
    if pc.time_model == "linear" and pc.c0_ps == 0 and pc.c_tok_ps == 0 and pc.c_ctx_ps == 0:
        raise InvalidArgumentError(
            f"{what}: c0_ps, c_tok_ps and c_ctx_ps all 0 make a prefill step last no time, which the fleet's "
            "one clock cannot order against the decode replicas' steps (DESIGN.md §Prefill/decode "
            "disaggregation)"
        )
    # (a CPU tier on the decode replicas: SimConfig refuses it when built, PD_TIER)
    for c, whose in ((first, what), (pc, "prefill_config")):
        _check_hybrid_transfer(c, whose)
    tp, ptp = first.tensor_parallel_size, pc.tensor_parallel_size
    if max(tp, ptp) % min(tp, ptp):
        raise InvalidArgumentError(
            f"prefill_config's tensor_parallel_size {ptp} and the decode replicas' {tp} do not divide one "
            "another: vLLM 0.33.0's and 0.34.0's NIXL connector maps each decode rank onto whole prefill ranks or the "
            'reverse and asserts it (TransferTopology.tp_ratio, "Local tensor parallel size ... is not '
            'divisible by remote tensor parallel size"); give the pools TP sizes of which one divides the '
            "other (DESIGN.md §Prefill/decode disaggregation)"
        )
    layout = first.pool.layout
    if (
        layout is not None
        and any(g.kind == "mamba" for g in layout.groups)
        and pc.engine_block_size != first.engine_block_size
    ):
        if first.enable_prefix_caching:
            why = (
                "with prefix caching vLLM 0.33.0's and 0.34.0's NIXL connector refuses it (\"Prefix caching with "
                'heterogeneous physical_blocks_per_logical is not supported for Mamba hybrid models")'
            )
        else:
            why = (
                "vLLM 0.33.0's and 0.34.0's NIXL connector then pairs the pools' attention blocks by kernel block "
                "(TransferTopology.block_size_ratio, _apply_prefix_caching), which kvsim, with no kernel blocks, "
                "does not model"
            )
        tps = (
            f" (tensor_parallel_size {ptp} against {tp}: a block holds one GPU's share of a state)"
            if tp != ptp
            else ""
        )
        raise InvalidArgumentError(
            f"prefill_config's block size {pc.engine_block_size} differs from the decode replicas' "
            f"{first.engine_block_size}{tps} for model {getattr(first.model, 'name', first.model)}'s Mamba "
            f"(state) groups: {why}; give both pools one block size (DESIGN.md §Prefill/decode "
            'disaggregation, "A Mamba (state) group")'
        )
    for knob, needed in (
        ("policy", "vllm"),
        ("preemption", "recompute"),
        ("waiting_over_budget", "stop"),
        ("append_check", "exact"),
        ("watermark_rule", "while-running"),
    ):
        value = getattr(first, knob)
        if value != needed:
            raise InvalidArgumentError(
                f"{knob} {value!r}: a disaggregated fleet's decode replicas hold requests for their transfers "
                f"as vLLM v1's scheduler does, modelled for {knob} {needed!r}"
            )
    ps_per_block = first.pd_link_ps_per_block
    if ps_per_block is None:
        block = _pd_block_bytes(first)
        if block is None:
            raise InvalidArgumentError(
                f"{what}: pd_link_ps_per_block is needed without a model (the KV bytes of a block are unknown)"
            )
        bandwidth = pd_link_bandwidth(first)
        ps_per_block = round(block * PS_PER_S / bandwidth)
        if ps_per_block > 1 << 40:
            raise InvalidArgumentError(
                f"pd_link_bandwidth {bandwidth:g} B/s (--pd-link-bandwidth; a bare number is bytes per second) "
                f"moves a block of {fmt_bytes_exact(block)} in {_seconds(block / bandwidth)} s, more than the "
                f"{(1 << 40) / PS_PER_S:.5g} s a block's transfer may last: give at least "
                f"{_bandwidth_up(block * PS_PER_S / (1 << 40))} (as 25GB/s)"
            )
    latency = round(first.pd_link_latency_s * PS_PER_S)
    return PdSpec(p, first.pd_threshold_tokens, latency, ps_per_block, prefill_config)


def _seconds(s: float) -> str:
    return f"{s:,.1f}" if s >= 1000 else f"{s:.5g}"


def _bandwidth_up(rate: float) -> str:
    """`rate` bytes per second rounded up to three significant figures in the largest decimal unit that
    keeps it at least 1 (`7.63 MB/s`): the least bandwidth a refusal names, which then runs."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0)):
        if rate >= scale or unit == "B":
            x = rate / scale
            k = 2 - math.floor(math.log10(x)) if x > 0 else 0
            return f"{math.ceil(x * 10**k) / 10**k:g} {unit}/s"
    raise AssertionError("unreachable")


def pd_link_bandwidth(config: SimConfig) -> float:
    """A decode replica's inbound link, bytes per second per GPU: `pd_link_bandwidth` given, else its GPU's
    NIC (`Gpu.network_bandwidth`: B300 and GB300's 800 Gb/s ConnectX-8), else a 400 Gb/s NIC a GPU
    (`collectives.NETWORK_BANDWIDTH`, NVIDIA's DGX H100 / H200 / B200): one figure for the NIC the
    collectives past a host cross too."""
    if config.pd_link_bandwidth is not None:
        return float(config.pd_link_bandwidth)
    from kvsim.model.collectives import NETWORK_BANDWIDTH

    if config.gpu is not None:
        from kvsim.model.gpus import resolve as resolve_gpu

        return resolve_gpu(config.gpu).network_bandwidth or NETWORK_BANDWIDTH
    return NETWORK_BANDWIDTH


def _pd_block_bytes(config: SimConfig) -> float | None:
    """One GPU's bytes of one block a transfer moves: the model's KV per token times the block size; for
    a hybrid model the pool's stride, whichever group's block it is (vLLM 0.33.0's NIXL reads a block of
    any group across every layer slot: DESIGN.md §Prefill/decode disaggregation, a hybrid model); None
    without a model."""
    layout = config.pool.layout
    if layout is not None and not layout.single_full:
        return layout.bytes_per_block
    per_token = config.pool.kv_bytes_per_token
    return None if per_token is None else per_token * config.engine_block_size


def _check_hybrid_transfer(config: SimConfig, what: str) -> None:
    """Refuses, by name, the hybrid layouts whose transfer is not modelled: a packed layout of unequal
    group pages (DeepSeek-V4). Mamba (state) groups are modelled (DESIGN.md §Prefill/decode
    disaggregation, a hybrid model, "A Mamba (state) group")."""
    layout = config.pool.layout
    if layout is None or layout.single_full:
        return
    name = getattr(config.model, "name", config.model)
    if any(g.bytes_per_block != layout.bytes_per_block for g in layout.groups):
        raise InvalidArgumentError(
            f"{what}: model {name}'s KV-cache groups are packed with unequal pages (DeepSeek-V4's "
            "block-outermost layout), whose transfer is not modelled (vLLM's NIXL connector reads each group "
            "in its own regions); uniform-page hybrid layouts are"
        )


def _pd_result(
    requests: pl.DataFrame,
    s: dict[str, Any],
    workload: Any,
    inp: EngineInput,
    columns: dict[str, np.ndarray],
    extra: dict[str, np.ndarray],
    counters: list[dict[str, int]],
    configs: list[SimConfig],
    pd: Any,
) -> pl.DataFrame:
    """A disaggregated fleet's rows and summary keys (DESIGN.md §Prefill/decode disaggregation, Metrics):
    per request the prefill replica and TTFT split into prefill queueing, prefill, transfer and decode
    queueing (`requests` with those columns, returned); per fleet the transfers, their bytes, the links'
    and the pools' utilisation (into the summary `s`)."""
    d = len(configs)
    decode_c, prefill_c = counters[:d], counters[d:]
    arrival = inp.arrival_ps
    pre = extra["prefill_replica"]
    remote = (pre >= 0) & (extra["prefill_finish"] >= 0) & (columns["first_token"] >= 0)
    first = extra["prefill_first_scheduled"]
    f = extra["prefill_finish"]
    ttft = np.where(columns["first_token"] >= 0, columns["first_token"] - arrival, -1)
    split = {
        "ttft_prefill_queue_s": np.where(remote, first - arrival, 0),
        "ttft_prefill_s": np.where(remote, f - first, 0),
        "ttft_transfer_s": np.where(remote, columns["load_wait_ps"], 0),
    }
    split["ttft_decode_s"] = (
        ttft - split["ttft_prefill_queue_s"] - split["ttft_prefill_s"] - split["ttft_transfer_s"]
    )
    rows = inp.request_row
    new = [pl.Series("prefill_replica", _per_request(workload, rows, pre, -1), dtype=pl.Int64)]
    done = columns["first_token"] >= 0
    for name, v in split.items():
        per = np.full(len(workload), np.nan)
        per[rows[done]] = v[done] / PS_PER_S
        new.append(pl.Series(name, per, dtype=pl.Float64, nan_to_null=True))  # (none: null, as other times)
    requests = requests.with_columns(new)
    for name, v in split.items():
        x = v[done] / PS_PER_S
        s[f"{name.removesuffix('_s')}_p50_s"] = float(np.percentile(x, 50)) if len(x) else None
        s[f"{name.removesuffix('_s')}_p99_s"] = float(np.percentile(x, 99)) if len(x) else None
    first_cfg = configs[0]
    block_bytes = _pd_block_bytes(first_cfg)
    blocks = sum(c["pd_transfer_blocks"] for c in decode_c)
    makespan = max((c.get("makespan_ps", 0) for c in counters), default=0)
    s["prefill_replicas"] = pd.prefill_replicas
    s["pd_disaggregated"] = int((pre >= 0).sum())
    s["pd_local_prefills"] = int(len(pre) - (pre >= 0).sum())
    s["pd_transfers"] = sum(c["pd_transfers"] for c in decode_c)
    s["pd_transfer_blocks"] = blocks
    s["pd_transfer_bytes"] = (
        blocks * block_bytes * first_cfg.tensor_parallel_size if block_bytes is not None else None
    )
    link_busy = sum(c["pd_link_busy_ps"] for c in decode_c)
    # (the links' time in use, each transfer's fixed latency included, during which the next transfer on
    # the link waits; and the part of it the bytes took, blocks × time per block: the bandwidth used)
    s["pd_link_utilization"] = over(link_busy, d * makespan)
    s["pd_link_bandwidth_utilization"] = over(blocks * pd.link_ps_per_block, d * makespan)
    s.update(pd_prefix_hits(decode_c, prefill_c))
    for pool, cs in (("decode", decode_c), ("prefill", prefill_c)):
        busy = sum(c["busy_ps"] for c in cs)
        steps = sum(c["num_steps"] for c in cs)
        s[f"{pool}_busy_fraction"] = over(busy, len(cs) * makespan)
        s[f"{pool}_pool_mean_batch"] = over(sum(c["sum_batch"] for c in cs), steps)
    # The imbalance between the pools: the busier pool's busy fraction over the idler's (1: balanced;
    # None: one pool never stepped while the other did, or no time passed).
    pools = (s["prefill_busy_fraction"], s["decode_busy_fraction"])
    hi, lo = (max(pools), min(pools)) if None not in pools else (None, None)
    s["pd_pool_imbalance"] = None if hi is None else hi / lo if lo else (1.0 if hi == 0 else None)
    return requests


def pd_prefix_hits(decode_c: Sequence[dict[str, int]], prefill_c: Sequence[dict[str, int]]) -> dict[str, Any]:
    """A disaggregated fleet's prefix-cache hits (DESIGN.md §Metrics, §Prefill/decode disaggregation):
    each pool's hit tokens over the prompt tokens its replicas looked up (admitted, resumes included), and
    the fleet's `prefix_hit_*` over every lookup of both pools. A disaggregated prompt is looked up twice:
    on its prefill replica, where a hit saves computing it, and on its decode replica, where a hit saves
    transferring it (its transferred tokens count there as looked up and not hit)."""
    out: dict[str, Any] = {}
    for pool, cs in (("prefill", prefill_c), ("decode", decode_c)):
        hits = sum(c["prefix_hit_tokens"] for c in cs)
        looked_up = sum(c["prompt_tokens_admitted"] for c in cs)
        out[f"{pool}_prefix_hit_tokens"] = hits
        out[f"{pool}_prompt_tokens"] = looked_up
        out[f"{pool}_prefix_hit_rate"] = over(hits, looked_up)
    both = [*prefill_c, *decode_c]
    out["prefix_hit_tokens"] = out["prefill_prefix_hit_tokens"] + out["decode_prefix_hit_tokens"]
    out["prefix_hit_rate"] = over(
        out["prefix_hit_tokens"], out["prefill_prompt_tokens"] + out["decode_prompt_tokens"]
    )
    out["prefix_hit_rate_first_admission"] = over(
        sum(c["first_hit_tokens"] for c in both), sum(c["first_prompt_tokens"] for c in both)
    )
    return out


def _per_request(workload: Any, rows: np.ndarray, values: np.ndarray, fill: int) -> np.ndarray:
    out = np.full(len(workload), fill, dtype=np.int64)
    out[rows] = values
    return out


__all__ = ["PD_KNOBS", "pd_link_bandwidth", "pd_prefix_hits"]
