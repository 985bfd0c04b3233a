# Type stub of the Rust extension `kvsim._core` (rust/py/src/); the docstrings live there.
# `make lint` checks this file against the built module with `python -m mypy.stubtest kvsim._core`.
# Integer arguments accept any object with `__index__` except a bool, and anything else raises
# kvsim.errors.InvalidArgumentError (DESIGN.md §Errors): the stub says `int`, what a caller should pass.

from typing import Any, TypeAlias, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "MAX_BLOCKS",
    "PGO_PROFILE",
    "POOL_BYTES_PER_BLOCK",
    "BlockPool",
    "CpuTier",
    "KVCacheManager",
    "Stream",
    "_panic_in_guard",
    "block_keys",
    "free_list_floor",
    "pool_memory",
    "run_cluster",
    "run_engine",
    "step_floor",
]

MAX_BLOCKS: int
PGO_PROFILE: str | None  # the build's profile (scripts/pgo_build.sh), None for a build without one
POOL_BYTES_PER_BLOCK: int

_Segments: TypeAlias = list[tuple[int, int]] | tuple[tuple[int, int], ...]
_BlockIds: TypeAlias = list[int] | tuple[int, ...]
_Keys: TypeAlias = list[int] | tuple[int, ...]
_KeyPositions: TypeAlias = list[tuple[int, int]] | tuple[tuple[int, int], ...]

@final
class BlockPool:
    def __new__(
        cls, num_blocks: int, enable_caching: bool = True, free_order: str = "classic"
    ) -> BlockPool: ...
    @property
    def num_blocks(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def num_free_blocks(self) -> int: ...
    @property
    def num_evictions(self) -> int: ...
    @property
    def enable_caching(self) -> bool: ...
    @property
    def free_order(self) -> str: ...
    def allocate(self, num: int) -> list[int] | None: ...
    def free(self, block_ids: _BlockIds) -> None: ...
    def touch(self, block_ids: _BlockIds) -> None: ...
    def register(self, block_id: int, key: int) -> None: ...
    def lookup(self, key: int) -> int | None: ...
    def ref_cnt(self, block_id: int) -> int: ...
    def block_hash(self, block_id: int) -> int | None: ...
    def free_block_ids(self) -> list[int]: ...
    def cached_block_ids(self) -> list[int]: ...
    def check_invariants(self) -> None: ...
    def _panic_for_test(self) -> None: ...

@final
class KVCacheManager:
    def __new__(
        cls, num_blocks: int, block_size: int, enable_caching: bool = True, free_order: str = "classic"
    ) -> KVCacheManager: ...
    @property
    def num_blocks(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def enable_caching(self) -> bool: ...
    @property
    def num_free_blocks(self) -> int: ...
    @property
    def num_evictions(self) -> int: ...
    @property
    def num_cow_copies(self) -> int: ...
    @property
    def num_requests(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...
    def lookup(self, segments: _Segments) -> int: ...
    def allocate(self, request_id: int, segments: _Segments, num_new_tokens: int) -> list[int] | None: ...
    def free(self, request_id: int) -> None: ...
    def fork(self, parent_id: int, child_id: int) -> None: ...
    def block_table(self, request_id: int) -> list[int]: ...
    def num_computed_tokens(self, request_id: int) -> int: ...
    def free_block_ids(self) -> list[int]: ...
    def cached_block_ids(self) -> list[int]: ...
    def ref_cnt(self, block_id: int) -> int: ...
    def block_hash(self, block_id: int) -> int | None: ...
    def check_invariants(self) -> None: ...
    def _panic_for_test(self) -> None: ...

@final
class Stream:
    def __new__(
        cls,
        *,
        num_blocks: int,
        block_size: int,
        policy: str,
        enable_prefix_caching: bool,
        free_order: str,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        chunked_prefill: bool,
        full_prompt_gate: bool,
        skip_over_budget: bool = False,
        watermark_blocks: int,
        watermark_while_running: bool = False,
        one_free_block: bool = False,
        max_model_len: int | None,
        time_model: str,
        iteration_time_ps: int,
        c0_ps: int,
        c_tok_ps: int,
        c_ctx_ps: int,
        roofline: dict[str, Any] | None = None,
        preemption: str,
        cpu_blocks: int,
        swap_ps_per_block: int,
        buddy: bool,
        forks: bool,
        independent: bool = False,
    ) -> Stream: ...
    def feed(
        self,
        *,
        arrival_ps: npt.NDArray[np.int64],
        prompt_len: npt.NDArray[np.int64],
        target: npt.NDArray[np.int64],
        max_gen: npt.NDArray[np.int64],
        fork_parent: npt.NDArray[np.int64],
        output_seg: npt.NDArray[np.uint64],
        seg_offsets: npt.NDArray[np.int64],
        segment_id: npt.NDArray[np.uint64],
        segment_len: npt.NDArray[np.int64],
    ) -> None: ...
    def advance(self, final_input: bool) -> None: ...
    def take_done(self) -> dict[str, Any]: ...
    def counters(self) -> dict[str, int]: ...
    def _panic_for_test(self) -> None: ...

@final
class CpuTier:
    def __new__(
        cls,
        capacity: int,
        eviction: str = "lru",
        store_threshold: int = 0,
        tracker: int = 64000,
        count_per_request: bool = False,
    ) -> CpuTier: ...
    @property
    def capacity(self) -> int: ...
    @property
    def eviction(self) -> str: ...
    @property
    def used(self) -> int: ...
    @property
    def num_evictable(self) -> int: ...
    @property
    def num_evicted(self) -> int: ...
    @property
    def num_stores_skipped(self) -> int: ...
    @property
    def target(self) -> float: ...
    def lookup(self, key: int) -> int: ...
    def prepare_load(self, rid: int, keys: _KeyPositions) -> None: ...
    def complete_load(self, keys: _Keys) -> None: ...
    def prepare_store(self, rid: int, keys: _KeyPositions) -> tuple[list[int], list[int]] | None: ...
    def complete_store(self, keys: _Keys) -> None: ...
    def prepare_store_run(
        self, rid: int, hi: int, lo: int, n: int, pos: int
    ) -> tuple[list[int], list[int]] | None: ...
    def complete_store_run(self, hi: int, lo: int, n: int) -> None: ...
    def finish(self, rid: int) -> None: ...
    def check_invariants(self) -> None: ...
    def _internals(
        self,
    ) -> tuple[
        list[tuple[int, int, int]], list[int], list[int], list[int], list[int], list[tuple[int, int]]
    ]: ...

def block_keys(segments: _Segments, block_size: int) -> list[int]: ...
def pool_memory(num_blocks: int) -> tuple[int, int]: ...
def run_engine(
    *,
    num_blocks: int,
    block_size: int,
    policy: str,
    enable_prefix_caching: bool,
    free_order: str,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    chunked_prefill: bool,
    full_prompt_gate: bool,
    watermark_blocks: int,
    watermark_while_running: bool = False,
    one_free_block: bool = False,
    skip_over_budget: bool = False,
    max_model_len: int | None,
    time_model: str,
    iteration_time_ps: int,
    c0_ps: int,
    c_tok_ps: int,
    c_ctx_ps: int,
    roofline: dict[str, Any] | None = None,
    preemption: str,
    cpu_blocks: int,
    swap_ps_per_block: int,
    buddy: bool,
    timeseries_every: int,
    record_events: bool,
    arrival_ps: npt.NDArray[np.int64],
    prompt_len: npt.NDArray[np.int64],
    target: npt.NDArray[np.int64],
    max_gen: npt.NDArray[np.int64],
    fork_parent: npt.NDArray[np.int64],
    output_seg: npt.NDArray[np.uint64],
    seg_offsets: npt.NDArray[np.int64],
    segment_id: npt.NDArray[np.uint64],
    segment_len: npt.NDArray[np.int64],
) -> tuple[dict[str, Any], dict[str, int]]: ...
def run_cluster(
    *,
    configs: list[dict[str, Any]] | tuple[dict[str, Any], ...],
    router: str,
    router_seed: int = 0,
    router_refresh_ps: int = 0,
    prefix_load_cap: float = 1.5,
    router_weights: dict[str, float] | None = None,
    router_tie_break: str = "random",
    timeseries_every: int = 0,
    record_events: bool = False,
    prefill_replicas: int = 0,
    pd_threshold_tokens: int = 0,
    pd_link_latency_ps: int = 0,
    pd_link_ps_per_block: int = 0,
    prefill_config: dict[str, Any] | None = None,
    dp_group: int = 1,
    arrival_ps: npt.NDArray[np.int64],
    prompt_len: npt.NDArray[np.int64],
    target: npt.NDArray[np.int64],
    max_gen: npt.NDArray[np.int64],
    fork_parent: npt.NDArray[np.int64],
    output_seg: npt.NDArray[np.uint64],
    seg_offsets: npt.NDArray[np.int64],
    segment_id: npt.NDArray[np.uint64],
    segment_len: npt.NDArray[np.int64],
) -> dict[str, Any]: ...
def free_list_floor(num_blocks: int, ops: int) -> int: ...
def step_floor(
    *,
    num_blocks: int,
    block_size: int,
    iteration_ps: int,
    max_num_seqs: int,
    watermark_blocks: int,
    arrival_ps: npt.NDArray[np.int64],
    prompt_len: npt.NDArray[np.int64],
    target: npt.NDArray[np.int64],
) -> tuple[int, int, int, int]: ...
def _panic_in_guard() -> None: ...
