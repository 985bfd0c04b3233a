"""The engine's state, declared once (the fields of Rust's `Engine` struct in `rust/core/src/engine/mod.rs`):
every concern's module reads it; `core.Engine.__init__` builds it. For the type checker, it also names the
methods one concern calls in another (each defined in exactly one module)."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from kvsim.engine.engine_input import EngineInput
from kvsim.model.config import SimConfig
from kvsim.reference.contiguous import Buddy, FirstFit
from kvsim.reference.cpu_tier import CpuTier
from kvsim.reference.engine.seq import Seq
from kvsim.reference.kv_cache_manager import KVCacheManager
from kvsim.reference.kv_groups import HybridKVCacheManager


class State:
    """What one replica holds between steps."""

    inp: EngineInput
    cfg: SimConfig
    bs: int
    paged: bool
    kv: KVCacheManager  # paged policies with one full-attention group
    hybrid: bool  # several KV-cache groups (or one that is not full attention): `hkv` serves them
    hkv: HybridKVCacheManager
    space: FirstFit | Buddy  # contiguous policies
    t: int  # the clock (ps): the start of the next step
    seqs: list[Seq]  # every row pushed, in order; `arrivals` their arrival times; `nxt` the next to join
    arrivals: list[int]
    nxt: int
    waiting: deque[Seq]
    running: list[Seq]
    # Preempted by swapping (a sequence, or a group's running members): their blocks are in the CPU pool.
    swapped: deque[list[Seq]]
    cpu_used: int
    swap_blocks_step: int  # blocks swapped out or in during the current step (its PCIe time)
    # The CPU tier (DESIGN.md §CPU tier; offload.py): None without one; requests holding blocks for a
    # load; those finished in the step before (their last stores come next step); a stalled engine.
    tier: CpuTier | None
    # The held queue's machinery runs: a CPU tier, or a decode replica's connector (`pd_link`).
    connector: bool
    pd_link: tuple[int, int] | None
    # A disaggregated fleet (DESIGN.md §Prefill/decode disaggregation, step 7): a decode replica's
    # decided transfers (row, end); a prefill replica's held finished requests and their known ends.
    sends_decided: list[tuple[int, int]]
    hold_sends: bool
    prefill_side: bool
    done_rows: list[int]
    sending: dict[int, Seq]
    send_ends: list[tuple[int, int]]
    touched: set[int]
    preempted_now: list[Seq]
    held: deque[Seq]
    finished_last: list[Seq]
    stalled: bool
    outstanding: int  # reserve policy: blocks promised to admitted sequences
    num_rejected: int
    c: dict[str, int]  # the counters (`COUNTERS`)
    cols: dict[str, np.ndarray]  # the per-sequence output columns (`COLUMN_FILL`), grown by doubling
    events: list[tuple[int, int, int, int, int, int]] | None
    ts_every: int
    ts: dict[str, list[int]]
    itl_steps: list[list[int]]  # ITL: step durations, run-length coded (`output.push_step`)
    itl_runs: list[tuple[int, int, int, int]]  # ITL: closed runs of tokens (`output.ITL_RUNS`)
    token_times: dict[int, list[int]] | None  # test hook: every token's time by row (`record_token_times`)

    if TYPE_CHECKING:
        # events.py
        def log(self, kind: str, s: Seq, block: int = -1, count: int = -1) -> None: ...
        def log_schedule(self, scheduled: list[tuple[Seq, int]]) -> None: ...
        def log_allocations(self, s: Seq, new: list[int], first: str = "allocate") -> None: ...

        # admission.py
        def region_size(self, s: Seq) -> int: ...
        def peak_blocks(self, s: Seq) -> int: ...
        def reject_at_arrival(self, s: Seq) -> int: ...
        def admission_watermark(self) -> int: ...
        def try_admit(self, s: Seq, budget: int) -> int: ...
        def waiting_phase(self, scheduled: list[tuple[Seq, int]], budget: int) -> None: ...
        def reject(self, s: Seq, reason: int) -> None: ...
        def note_admission(self, s: Seq, hit: int, total: int, cpu_hit: int = 0) -> None: ...
        def over_budget(self) -> int: ...

        # hybrid.py
        def hybrid_peak_blocks(self, s: Seq) -> int: ...
        def hybrid_try_admit(self, s: Seq, budget: int) -> int: ...
        def hybrid_try_grow(self, s: Seq, num_new: int) -> bool: ...
        def hybrid_release(self, s: Seq) -> None: ...
        def hybrid_state(self) -> tuple[int, int, list[int], int]: ...

        # running.py
        def schedule(self) -> list[tuple[Seq, int]]: ...
        def try_grow(self, s: Seq, num_new: int, check: bool = True) -> bool: ...
        def step(self) -> None: ...
        def fork(self, parent: Seq, step: int) -> list[Seq]: ...
        def note_token(self, s: Seq, step: int) -> None: ...

        # preemption.py
        def preempt_tail(self, s: Seq) -> bool: ...
        def group_fits(self, unit: list[Seq]) -> bool: ...
        def swap_in_phase(self, scheduled: list[tuple[Seq, int]], budget: int) -> int: ...

        # offload.py
        def init_tier(self) -> None: ...
        def tier_waiting_phase(self, scheduled: list[tuple[Seq, int]], budget: int) -> None: ...
        def offer_stores(self, scheduled: list[tuple[Seq, int]], step_end: int) -> tuple[bool, int]: ...
        def tier_finished(self, s: Seq) -> None: ...
        def observe(self) -> bool: ...
        def tier_empty_step(self) -> bool: ...
        def resolve_stall(self, limit: int | None) -> bool: ...
        def tier_measure(self, dt: int) -> None: ...

        # memory.py
        def release(self, s: Seq) -> None: ...
        def measure(self, dt: int, batch: int, tokens: int) -> None: ...
        def finish_counters(self) -> None: ...

        # timing.py
        def step_time(self, scheduled: list[tuple[Seq, int]]) -> int: ...
