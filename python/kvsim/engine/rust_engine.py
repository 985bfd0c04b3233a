"""The Rust engine behind `kvsim.simulate(..., backend="rust")`: one call across the boundary per run."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import numpy as np

from kvsim import _core
from kvsim.engine.engine_input import EngineInput
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import SimConfig
from kvsim.model.segments import OUTPUT_BIT
from kvsim.reference.engine import EngineOutput
from kvsim.reference.kv_groups import KINDS

_NO_FORKS = np.zeros(0, dtype=np.int64)


def config_kwargs(config: SimConfig) -> dict[str, Any]:
    """The engine's configuration as `_core.run_engine` / `_core.Stream` keyword arguments."""
    assert config.num_blocks is not None, "SimConfig sizes the pool"
    groups = config.kv_groups
    hybrid: dict[str, Any] = {}
    if groups:
        hybrid = dict(
            kv_groups=[
                (
                    KINDS.index(g.kind),
                    g.window,
                    g.block_size,
                    -1 if g.cap is None else g.cap,
                    g.checkpoint_blocks,
                )
                for g in groups
            ],
            scheduler_block_size=config.pool.layout.scheduler_block_size,
            retention_interval=config.prefix_cache_retention_interval,
        )
    return dict(
        **hybrid,
        num_blocks=config.num_blocks,
        block_size=config.engine_block_size,
        policy=config.policy,
        enable_prefix_caching=config.enable_prefix_caching,
        free_order=config.free_order,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        chunked_prefill=config.chunked_prefill,
        full_prompt_gate=config.admission_gate == "full-prompt",
        skip_over_budget=config.waiting_over_budget == "skip",
        async_scheduling=config.async_scheduling is True,  # (None, vLLM's default deployment: synchronous)
        watermark_blocks=config.watermark_blocks,
        watermark_while_running=config.watermark_rule == "while-running",
        one_free_block=config.append_check == "one-free-block",
        max_model_len=config.max_model_len,
        # calibrated is linear (a roofline calibration resolves to roofline)
        time_model=config.time_model if config.time_model in ("ticks", "roofline") else "linear",
        roofline=None if config.roofline is None else config.roofline.engine_kwargs(),
        iteration_time_ps=config.iteration_time_ps,
        c0_ps=config.c0_ps or 0,
        c_tok_ps=config.c_tok_ps or 0,
        c_ctx_ps=config.c_ctx_ps or 0,
        preemption=config.preemption,
        cpu_blocks=config.cpu_blocks,
        swap_ps_per_block=config.swap_ps_per_block,
        buddy=config.placement == "buddy",
        cpu_tier=(
            config.kv_offloading_chunks,
            config.kv_offloading_eviction_policy,
            config.kv_offloading_prompt_only,
            config.kv_offloading_blocks_per_chunk,
            config.kv_offloading_store_threshold,
            config.kv_offloading_ps_per_block,
            config.kv_offloading_latency_ps,
            # (a hybrid model's groups: each group's block at its own time on the link and its own bytes)
            list(
                zip(
                    config.kv_offloading_group_ps_per_block or (),
                    config.kv_offloading_group_block_bytes or (),
                    strict=True,
                )
            ),
            # vLLM 0.34.0's two rules (DESIGN.md §CPU tier)
            config.kv_offloading_store_threshold_count == "per-request",
            config.kv_offloading_hit_junction,
        )
        if config.kv_offloading_chunks
        else None,
    )


def input_kwargs(inp: EngineInput) -> dict[str, Any]:
    """The per-sequence columns as `_core` keyword arguments (a broadcast -1 `fork_parent`, nothing
    forked, crosses as an empty column)."""
    return {
        "arrival_ps": inp.arrival_ps,
        "prompt_len": inp.prompt_len,
        "target": inp.target,
        "max_gen": inp.max_gen,
        "fork_parent": _NO_FORKS if inp.fork_parent.strides == (0,) else inp.fork_parent,
        "output_seg": inp.output_seg,
        "seg_offsets": inp.seg_offsets,
        "segment_id": inp.segment_id,
        "segment_len": inp.segment_len,
    }


def run(
    inp: EngineInput, config: SimConfig, timeseries_every: int = 0, record_events: bool = False
) -> EngineOutput:
    """Simulates every sequence of `inp` under `config` in the Rust core (GIL released)."""
    columns, counters = _core.run_engine(
        **config_kwargs(config),
        timeseries_every=timeseries_every,
        record_events=record_events,
        **input_kwargs(inp),
    )
    timeseries = columns.pop("timeseries")
    events = columns.pop("events")
    itl = columns.pop("itl")
    return EngineOutput(**columns, counters=counters, timeseries=timeseries, events=events, itl=itl)


def step_floor(inp: EngineInput, config: SimConfig) -> dict[str, int]:
    """The least work a step-exact engine does on `inp` (Rust, GIL released; `kvsim_core::floor`): the
    engine's steps and block allocations with nothing else done, for the benchmarks to compare the
    engine's time with. It is not a simulator: it admits whole prompts whatever the token budget and
    never preempts, so it takes exactly the engine's steps and allocations only while the budget never
    binds and the pool suffices; under pressure it allocates no more than the engine.

    Raises:
        InvalidArgumentError: what `check_step_floor` refuses.
    """
    check_step_floor(inp, config)
    return step_floor_unchecked(inp, config)


def check_step_floor(inp: EngineInput, config: SimConfig) -> None:
    """Raises `InvalidArgumentError` for a config or workload the step floor does not model: a policy
    other than `vllm`, the `linear` time model, a watermark under `watermark_rule="while-running"` (the
    floor holds it at every admission), more than one sample per request, prompts that share
    content or quote a generated output (the engine would find prefix hits), or, without chunked prefill,
    a prompt over the token budget (the engine rejects it)."""
    if config.policy != "vllm":
        raise InvalidArgumentError(f"policy {config.policy!r}: the step floor models policy 'vllm' only")
    if config.time_model != "ticks":
        raise InvalidArgumentError(
            f"time_model {config.time_model!r}: the step floor models the 'ticks' time model only"
        )
    if config.watermark_blocks > 0 and config.watermark_rule != "always":
        raise InvalidArgumentError(
            f"watermark_rule {config.watermark_rule!r} with watermark {config.watermark}: the step floor "
            "models the 'always' rule only"
        )
    if (inp.sample > 0).any():
        raise InvalidArgumentError("num_samples > 1: the step floor models one sample per request only")
    if _shared_content(inp):
        raise InvalidArgumentError("prompts share content: the step floor models private prompts only")
    if not config.chunked_prefill and (inp.prompt_len > config.max_num_batched_tokens).any():
        raise InvalidArgumentError(
            f"chunked_prefill False with a prompt over max_num_batched_tokens "
            f"{config.max_num_batched_tokens}: the engine rejects it, the step floor does not model that"
        )


def step_floor_unchecked(inp: EngineInput, config: SimConfig) -> dict[str, int]:
    """`step_floor` without `check_step_floor` (the benchmark times this call alone)."""
    assert config.num_blocks is not None, "SimConfig sizes the pool"
    steps, allocations, finished, checksum = _core.step_floor(
        num_blocks=config.num_blocks,
        block_size=config.block_size,
        iteration_ps=config.iteration_time_ps,
        max_num_seqs=config.max_num_seqs,
        watermark_blocks=config.watermark_blocks,
        arrival_ps=inp.arrival_ps,
        prompt_len=inp.prompt_len,
        target=inp.target,
    )
    return {"steps": steps, "block_allocations": allocations, "finished": finished, "checksum": checksum}


def _shared_content(inp: EngineInput) -> bool:
    """Whether one content id occurs in the prompts of two sequences, or a prompt quotes a generated
    output (output ids have the top bit set, workload ids stay below 2^63: `kvsim.model.segments`)."""
    ids = inp.segment_id.astype(np.uint64, copy=False)
    if (ids >= np.uint64(OUTPUT_BIT)).any():
        return True
    owner = np.repeat(np.arange(len(inp.prompt_len)), np.diff(inp.seg_offsets))
    order = np.argsort(ids, kind="stable")  # owners stay ascending within one id
    ids, owner = ids[order], owner[order]
    return bool(((ids[1:] == ids[:-1]) & (owner[1:] != owner[:-1])).any())


class RouterLike(Protocol):
    """What `run_cluster` reads of a router (`kvsim.reference.cluster.RouterSpec`'s fields, read-only)."""

    @property
    def name(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def refresh_ps(self) -> int: ...
    @property
    def prefix_load_cap(self) -> float: ...
    @property
    def weights(self) -> Mapping[str, float] | Iterable[tuple[str, float]] | None: ...
    @property
    def tie_break(self) -> str: ...


def run_cluster(
    inp: EngineInput, configs: list[SimConfig], router: RouterLike, pd: Any = None
) -> dict[str, Any]:
    """Runs `inp` on one Rust replica per config behind `router` on one clock (GIL released;
    `kvsim_core::cluster`). Returns `dict(columns=..., counters=[...])`: every per-row output column in
    workload order plus `replica` (int64), and one counters dict per replica (`run`'s counters), the
    shape of the reference's `ClusterOutput`.

    Raises:
        InvalidArgumentError: an empty `configs`, an unknown router or a bad router parameter, and
            everything `run` refuses.
    """
    weights = None if router.weights is None else dict(router.weights)
    result = _core.run_cluster(
        configs=[config_kwargs(c) for c in configs],
        router=router.name,
        router_seed=router.seed,
        router_refresh_ps=router.refresh_ps,
        prefix_load_cap=router.prefix_load_cap,
        router_weights=weights,
        router_tie_break=router.tie_break,
        prefill_replicas=0 if pd is None else pd.prefill_replicas,
        pd_threshold_tokens=0 if pd is None else pd.threshold_tokens,
        pd_link_latency_ps=0 if pd is None else pd.link_latency_ps,
        pd_link_ps_per_block=0 if pd is None else pd.link_ps_per_block,
        prefill_config=None if pd is None or pd.prefill_config is None else config_kwargs(pd.prefill_config),
        # (a fleet's data-parallel groups, `RouterSpec.dp_group`; a router without it: none)
        dp_group=getattr(router, "dp_group", 1),
        **input_kwargs(inp),
    )
    columns = dict(result["outputs"])
    columns["replica"] = result["replica"]
    for name in ("prefill_replica", "prefill_first_scheduled", "prefill_finish"):
        if name in result:
            columns[name] = result[name]
    return {"columns": columns, "counters": list(result["counters"])}
