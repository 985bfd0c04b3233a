"""What a run gives back (the twin of `rust/core/src/engine/output.rs`): per-sequence columns, their codes,
the counters and the time series' columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Reasons a sequence is rejected; the codes are shared with the Rust engine.
REJECT_REASONS = {
    1: "prompt_len reaches max_model_len: no room to generate",
    2: "needs more blocks than the pool holds",
    3: "needs a larger region than the address space",
    4: "needs more tokens in one step than max_num_batched_tokens (chunked prefill off)",
    5: "cannot be admitted even into an empty pool (watermark or admission gate)",
    6: "swapped out and cannot come back even into an empty pool (its sample group outgrew it)",
    7: "its samples need more running seats than max_num_seqs",
}

# Time-series columns (one row per recorded step; times in ps at the step's start; token counts).
TIMESERIES = (
    "step",
    "time_ps",
    "batch",
    "batched_tokens",
    "free_tokens",
    "stored_tokens",
    "allocated_tokens",
    "internal_tokens",
    "reserved_tokens",
    "external_tokens",
)
# ITL's record (kvsim.engine.metrics): every step's duration, run-length coded (`ITL_STEPS`: step j of a run,
# from 0, lasts `step_ps + j * step_slope_ps`, for `step_repeat` steps; consecutive steps join greedily,
# `push_step`), and every run of tokens a sequence sampled in consecutive steps (`ITL_RUNS`: its row, first
# and last step, and the gap in ps before its first token, -1 for a sequence's first token).
ITL_STEPS = ("step_ps", "step_slope_ps", "step_repeat")
ITL_RUNS = ("run_row", "run_first", "run_last", "run_gap_ps")
FINISHED, REJECTED = 0, 1
# The per-sequence output columns (`EngineOutput`'s), their dtypes and their value before anything happens.
COLUMN_FILL = {
    "first_scheduled": -1,
    "first_token": -1,
    "finish": -1,
    "generated": 0,
    "num_preemptions": 0,
    "num_swaps": 0,
    "cached_tokens": 0,
    "recomputed_tokens": 0,
    "cpu_hit_tokens": 0,
    "load_wait_ps": 0,
    "status": -1,
    "reject_reason": 0,
}
COLUMN_DTYPE = {k: np.int8 if k in ("status", "reject_reason") else np.int64 for k in COLUMN_FILL}
COUNTERS = (
    "num_steps",
    "busy_ps",
    "sum_batch",
    "sum_batched_tokens",
    "peak_batch",
    "peak_allocated_tokens",
    "w_batch",
    "w_stored",
    "w_allocated",
    "w_internal",
    "w_reserved",
    "w_external",
    "w_held_blocks",
    "w_logical_blocks",
    "num_preemptions",
    "num_evictions",
    "num_cow_copies",
    "prefix_hit_tokens",
    "prompt_tokens_admitted",
    "recomputed_tokens",
    "num_swapped_blocks",
    "num_block_allocations",
    "first_hit_tokens",
    "first_prompt_tokens",
    # The CPU tier (DESIGN.md §CPU tier); 0 without one.
    "cpu_hit_tokens",
    "first_cpu_hit_tokens",
    "num_loads",
    "loaded_blocks",
    "num_stores",
    "stored_blocks",
    "cpu_evictions",
    "stores_failed",
    "stores_skipped",
    "num_flushes",
    "load_wait_ps",
    "w_cpu_chunks",
    "peak_cpu_chunks",
    # A hybrid model's tier: the host bytes its loads and stores moved, each group's blocks at its own
    # bytes (`SimConfig.kv_offloading_group_block_bytes`); 0 for one full-attention group, whose bytes are
    # its blocks times `kv_offloading_block_bytes`.
    "loaded_group_bytes",
    "stored_group_bytes",
    # Prefill/decode disaggregation (DESIGN.md §Prefill/decode disaggregation): a decode replica's transfers
    # from the prefill pool, their blocks and their summed durations on its inbound link; 0 elsewhere.
    "pd_transfers",
    "pd_transfer_blocks",
    "pd_link_busy_ps",
)


@dataclass
class EngineOutput:
    """Raw per-sequence columns (times in ps, -1 when it never happened) and integer counters: int64,
    but `status` (0 finished, 1 rejected) and `reject_reason` (`REJECT_REASONS`' codes, 0 for none),
    int8."""

    first_scheduled: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    generated: np.ndarray
    num_preemptions: np.ndarray
    num_swaps: np.ndarray
    cached_tokens: np.ndarray
    recomputed_tokens: np.ndarray
    cpu_hit_tokens: np.ndarray
    load_wait_ps: np.ndarray
    status: np.ndarray
    reject_reason: np.ndarray
    counters: dict[str, int] = field(default_factory=dict)
    timeseries: dict[str, np.ndarray] = field(default_factory=dict)
    events: dict[str, np.ndarray] = field(default_factory=dict)
    # `ITL_STEPS` and `ITL_RUNS` columns (empty for a streamed run or a cluster: not recorded there).
    itl: dict[str, np.ndarray] = field(default_factory=dict)


def push_step(steps: list[list[int]], dt: int) -> None:
    """Appends a step of `dt` ps to the run-length coded durations `[step_ps, slope, repeat]`: a run of
    one step takes any next one (its slope set by it), a longer run one that continues its progression,
    else a new run starts (the Rust engine's `StepDurations::push`, the same greedy rule)."""
    if steps:
        last = steps[-1]
        if last[2] == 1:
            last[1] = dt - last[0]
            last[2] = 2
            return
        if dt == last[0] + last[1] * last[2]:
            last[2] += 1
            return
    steps.append([dt, 0, 1])
