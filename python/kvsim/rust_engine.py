"""The Rust engine behind `kvsim.simulate(..., backend="rust")`: one call across the boundary per run."""

from __future__ import annotations

from kvsim import _core
from kvsim.config import SimConfig
from kvsim.engine_input import EngineInput
from kvsim.errors import InvalidArgumentError
from kvsim.reference.engine import EngineOutput


def run(
    inp: EngineInput, config: SimConfig, timeseries_every: int = 0, record_events: bool = False
) -> EngineOutput:
    """Simulates every sequence of `inp` under `config` in the Rust core (GIL released)."""
    columns, counters = _core.run_engine(
        num_blocks=config.num_blocks,
        block_size=config.block_size,
        policy=config.policy,
        enable_prefix_caching=config.enable_prefix_caching,
        free_order=config.free_order,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        chunked_prefill=config.chunked_prefill,
        full_prompt_gate=config.admission_gate == "full-prompt",
        watermark_blocks=config.watermark_blocks,
        one_free_block=config.append_check == "one-free-block",
        max_model_len=config.max_model_len,
        time_model=config.time_model,
        iteration_time_ps=config.iteration_time_ps,
        c0_ps=config.c0_ps or 0,
        c_tok_ps=config.c_tok_ps or 0,
        c_ctx_ps=config.c_ctx_ps or 0,
        preemption=config.preemption,
        cpu_blocks=config.cpu_blocks,
        swap_ps_per_block=config.swap_ps_per_block,
        buddy=config.placement == "buddy",
        timeseries_every=timeseries_every,
        record_events=record_events,
        arrival_ps=inp.arrival_ps,
        prompt_len=inp.prompt_len,
        target=inp.target,
        max_gen=inp.max_gen,
        fork_parent=inp.fork_parent,
        output_seg=inp.output_seg,
        seg_offsets=inp.seg_offsets,
        segment_id=inp.segment_id,
        segment_len=inp.segment_len,
    )
    timeseries = columns.pop("timeseries")
    events = columns.pop("events")
    return EngineOutput(**columns, counters=counters, timeseries=timeseries, events=events)


def step_floor(inp: EngineInput, config: SimConfig) -> dict[str, int]:
    """The least work a step-exact engine does on `inp` (Rust, GIL released): the engine's steps and, where
    the pool suffices, its block allocations, with nothing else done (`kvsim_core::floor::step_floor`).
    The benchmarks compare the engine's time with it; it is not a simulator.

    Raises:
        InvalidArgumentError: a config or workload the floor does not model (it models policy `vllm` with
            the `ticks` time model and one sample per request).
    """
    if config.policy != "vllm":
        raise InvalidArgumentError(f"policy {config.policy!r}: the step floor models policy 'vllm' only")
    if config.time_model != "ticks":
        raise InvalidArgumentError(
            f"time_model {config.time_model!r}: the step floor models the 'ticks' time model only"
        )
    if (inp.sample > 0).any():
        raise InvalidArgumentError("num_samples > 1: the step floor models one sample per request only")
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
