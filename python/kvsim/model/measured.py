"""vLLM 0.34.0's KV cache sized from measured memory (`kv_cache_sizing` "measured"; DESIGN.md §Defaults and
sizing, "Measured sizing").

vLLM 0.34.0 turns `enable_extensible_kv_cache` on by default on CUDA and ROCm (`VllmConfig.
_resolve_extensible_kv_cache`, `vllm/config/vllm.py`): the cache reserves address space for the blocks its
profiling allows (0.33.0's rule, `kvsim.model.sizing.available_kv_bytes`, at the resolved utilization: the
capacity), and after warmup and CUDA-graph capture commits the blocks the measured memory holds
(`measure_kv_cache_blocks`, `vllm/v1/worker/extensible_kv_cache.py`), no more than the capacity
(`finalize_extensible_kv_cache`, `vllm/v1/core/kv_cache_planning.py`). An unset `gpu_memory_utilization` is
then 1.0 (`CacheConfig.resolved_gpu_memory_utilization`). The measured bytes (`measure_kv_cache_bytes`, ported
here as it is):

    min(requested − non-KV in use, free + committed − margin) − max(transient peak, torch reserve growth)

with `requested` = `ceil(total memory × utilization)` (`request_memory`), non-KV in use = the free memory at
start less the free memory after warmup less the KV blocks committed, the margin `max(1 GiB (3 on ROCm),
0.75 × transient peak)`. kvsim's terms (`measure`): free memory at start the device's memory (the CUDA
context and other processes counted as none), non-KV in use the weights, non-torch memory and CUDA graphs
(`kvsim.model.memory`), the transient peak the activation peak kvsim estimates for the profiling run, the
torch reserve growth 0 (fragmentation, which kvsim does not model), no block committed before the sizing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvsim.model.layer_types import KVLayout
from kvsim.model.memory import NonKV, format_gib
from kvsim.model.units import fmt_bytes

# `KV_CACHE_MARGIN_FLOOR_BYTES`, `KV_CACHE_MARGIN_FRACTION`, `KV_CACHE_NON_TORCH_RESERVE_BYTES`
# (`vllm/v1/worker/extensible_kv_cache.py`): CUDA's, and ROCm's where they differ.
MARGIN_FLOOR_BYTES = 1 << 30
MARGIN_FLOOR_BYTES_ROCM = 3 << 30
MARGIN_FRACTION = 0.75
NON_TORCH_RESERVE_BYTES = 1 << 29
NON_TORCH_RESERVE_BYTES_ROCM = 2 << 29
# `CacheConfig.resolved_gpu_memory_utilization` (vLLM 0.34.0, `vllm/config/cache.py`) for none given: 1.0
# with the extensible cache on, else `DEFAULT_GPU_MEMORY_UTILIZATION`, 0.92 (the default from 0.20.0 on).
MEASURED_GPU_MEMORY_UTILIZATION = 1.0
PROFILED_GPU_MEMORY_UTILIZATION = 0.92
SIZINGS = ("profiled", "measured")


def resolved_gpu_memory_utilization(given: float | None, measured: bool) -> float:
    """The share of device memory the pool is sized from, as vLLM 0.34.0's
    `CacheConfig.resolved_gpu_memory_utilization`: `given` where one is (a cap under measured sizing too),
    else 1.0 where the pool is sized from measured memory (`measured`) and 0.92 where it is profiled."""
    if given is not None:
        return given
    return MEASURED_GPU_MEMORY_UTILIZATION if measured else PROFILED_GPU_MEMORY_UTILIZATION


def measure_kv_cache_bytes(
    *,
    init_free_memory: int,
    free_memory: int,
    committed_bytes: int,
    requested_memory: int,
    transient_peak_bytes: int = 0,
    torch_reserve_growth_bytes: int = 0,
    margin_floor_bytes: int = MARGIN_FLOOR_BYTES,
    margin_fraction: float = MARGIN_FRACTION,
) -> int:
    """vLLM 0.34.0's `measure_kv_cache_bytes`, line for line: the bytes the KV cache may occupy given the
    memory measured after warmup."""
    non_kv_used = init_free_memory - free_memory - committed_bytes
    headroom = free_memory + committed_bytes
    margin = max(margin_floor_bytes, int(transient_peak_bytes * margin_fraction))
    available = min(requested_memory - non_kv_used, headroom - margin)
    available -= max(transient_peak_bytes, torch_reserve_growth_bytes)
    return max(available, 0)


def measured_off(*, kv_cache_bytes: bool, num_blocks: bool, rocm: bool, disaggregated: bool) -> str | None:
    """Why vLLM 0.34.0 leaves the extensible cache off (`_resolve_extensible_kv_cache`) for what kvsim models,
    else None: `--kv-cache-memory-bytes` or `--num-gpu-blocks-override` given (both override the measured
    size), or on ROCm a connector that registers the cache (NIXL's, kvsim's prefill/decode disaggregation:
    "UCX and RDMA cannot yet register driver-mapped memory"). vLLM then sizes as 0.33.0 did and an unset
    `gpu_memory_utilization` is 0.92."""
    if kv_cache_bytes:
        return "kv_cache_bytes (vLLM's --kv-cache-memory-bytes) overrides the measured size"
    if num_blocks:
        return "num_blocks (vLLM's --num-gpu-blocks-override) overrides the measured size"
    if rocm and disaggregated:
        return "on ROCm a connector that registers the KV cache (NIXL's) cannot use driver-mapped memory"
    return None


def unset_sizing(
    *,
    kv_cache_bytes: bool,
    num_blocks: bool,
    rocm: bool,
    disaggregated: bool,
    v0_pool: bool,
    activation_reserve: bool,
) -> str:
    """`kv_cache_sizing` left unset, as vLLM 0.34.0 settles an unset `enable_extensible_kv_cache`
    (`VllmConfig._resolve_extensible_kv_cache`, `vllm/config/vllm.py`): "measured" unless it is off there
    (`measured_off`), or a disaggregated fleet on CUDA (NIXL's connector exports the cache by FABRIC handles,
    which need an IMEX channel; without one vLLM leaves it off, "Extensible KV cache off: without an IMEX
    channel, KV transfers within a host (e.g. NIXL) would lose NVLink", and kvsim assumes none), or a knob
    only the profiled rule reads is given (`pool_null_block` "extra", vLLM v0's pool; `activation_reserve_bytes`,
    one measured non-KV total): then "profiled"."""
    off = measured_off(
        kv_cache_bytes=kv_cache_bytes, num_blocks=num_blocks, rocm=rocm, disaggregated=disaggregated
    )
    if off is not None or disaggregated or v0_pool or activation_reserve:
        return "profiled"
    return "measured"


# vLLM 0.34.0's lines for NIXL's connector (a disaggregated fleet) on CUDA without an IMEX channel, which kvsim
# assumes (`VllmConfig._resolve_extensible_kv_cache`, `vllm/config/vllm.py` ~3247-3267): the info line where it
# turns an unset extensible KV cache off, and the warning where one asked for stays on.
IMEX_OFF = (
    "Extensible KV cache off: without an IMEX channel, KV transfers within a host (e.g. NIXL) would lose NVLink "
    "and fall back to RDMA or TCP. If transfers only cross hosts, pass --enable-extensible-kv-cache."
)
NO_IMEX = (
    "No IMEX channel: with the extensible KV cache, KV transfers within a host (e.g. NIXL) fall back to TCP. "
    "Transfers across hosts use RDMA."
)
PD_PROFILED = "profiled: vLLM 0.34.0 keeps the extensible KV cache off for NIXL without an IMEX channel"


def imex_lines(
    *, disaggregated: bool, rocm: bool, off: str | None, given: str | None, on: bool
) -> tuple[str, ...]:
    """vLLM 0.34.0's line on the extensible KV cache beside NIXL on CUDA without an IMEX channel: `IMEX_OFF`
    where `kv_cache_sizing` was left unset and settled "profiled", `NO_IMEX` where measured sizing is `on`;
    none without a prefill pool, on ROCm or where another rule turns it off first (`off`, `measured_off`)."""
    if not disaggregated or rocm or off is not None:
        return ()
    if on:
        return (NO_IMEX,)
    return (IMEX_OFF,) if given is None else ()


def with_imex(pool: Any, gpu: Any, disaggregated: bool, given: str | None, on: bool) -> Any:
    """`pool` (a `PoolSizing`) with vLLM 0.34.0's line on the extensible KV cache beside NIXL (`imex_lines`,
    first among its start-up lines) and, where that left it off, why its line says profiled (`PD_PROFILED`);
    `given`: `kv_cache_sizing` as given, `on`: whether measured sizing is on (`SimConfig._size`)."""
    import dataclasses

    from kvsim.model.gpus import is_rocm
    from kvsim.model.gpus import resolve as resolve_gpu

    if pool.figures is None or pool.source != "gpu":
        return pool
    rocm = is_rocm(resolve_gpu(gpu).arch)
    off = measured_off(kv_cache_bytes=False, num_blocks=False, rocm=rocm, disaggregated=disaggregated)
    lines = imex_lines(disaggregated=disaggregated, rocm=rocm, off=off, given=given, on=on)
    if not lines:
        return pool
    figures = dataclasses.replace(pool.figures, config_lines=lines)
    return dataclasses.replace(pool, figures=figures, profiled_why=None if on else PD_PROFILED)


@dataclass(frozen=True)
class MeasuredSizing:
    """The terms of a pool sized from measured memory (bytes, one GPU's).

    Attributes:
        memory_bytes: the device's memory (vLLM's total, and kvsim's free memory at start).
        requested_bytes: `ceil(memory × utilization)`.
        non_kv_bytes: weights, non-torch memory and CUDA graphs (what stays in use after warmup).
        transient_peak_bytes: the activation peak kept free.
        margin_bytes: the margin below the device's free memory.
        kv_bytes: `measure_kv_cache_bytes`.
        capacity_bytes: the profiled KV bytes (0.33.0's rule at the same utilization): the reservation.
        vllm_blocks: `min(floor(kv_bytes / block bytes), floor(capacity_bytes / block bytes))`, vLLM's
            `num_gpu_blocks`.
        bytes_per_block: one block's bytes across the layers.
        torch_bytes: what torch's allocator holds after warmup (the weights and the CUDA graphs' pool).
        non_torch_reserve_bytes: kept free beside torch's cap (512 MiB, 1 GiB on ROCm).
        margin_floor_bytes: the margin's floor (1 GiB, 3 GiB on ROCm).
    """

    memory_bytes: int
    requested_bytes: int
    non_kv_bytes: int
    transient_peak_bytes: int
    margin_bytes: int
    kv_bytes: int
    capacity_bytes: int
    vllm_blocks: int
    bytes_per_block: int
    torch_bytes: int
    non_torch_reserve_bytes: int
    margin_floor_bytes: int

    @property
    def free_bytes(self) -> int:
        """Free memory after warmup (no block committed)."""
        return self.memory_bytes - self.non_kv_bytes

    def why(self, gpu: str, utilization: float, weight_bytes: int, non_torch_bytes: int) -> str:
        """The pool line's terms: `h100-80gb × 1.00 − 15.0 GiB weights − 256.0 MiB non-torch − 776.1 MiB CUDA
        graphs − 1.9 GiB activations − 1.4 GiB margin (measured after warmup, vLLM 0.34.0)`; no margin where
        the requested share is the bound."""
        graphs = self.non_kv_bytes - weight_bytes - non_torch_bytes
        out = (
            f"{gpu} × {utilization:.2f} − {fmt_bytes(weight_bytes)} weights − {fmt_bytes(non_torch_bytes)} "
            f"non-torch" + (f" − {fmt_bytes(graphs)} CUDA graphs" if graphs else "")
        )
        out += f" − {fmt_bytes(self.transient_peak_bytes)} activations"
        if self.requested_bytes > self.memory_bytes - self.margin_bytes:
            out += f" − {fmt_bytes(self.margin_bytes)} margin"
        return out + " (measured after warmup, vLLM 0.34.0)"

    def withheld_bytes(self) -> int:
        """What a budget of all the memory free at start would add (`measure_kv_cache_blocks`' warning)."""
        whole = measure_kv_cache_bytes(
            init_free_memory=self.memory_bytes,
            free_memory=self.free_bytes,
            committed_bytes=0,
            requested_memory=self.memory_bytes,
            transient_peak_bytes=self.transient_peak_bytes,
            margin_floor_bytes=self.margin_floor_bytes,
        )
        return whole - self.kv_bytes

    def lines(self, utilization: float) -> tuple[str, ...]:
        """The lines vLLM 0.34.0 logs for it: `measure_kv_cache_blocks`' warning where a `gpu_memory_utilization`
        between 0.7 and 1.0 (given: kvsim reads its default as unset, 1.0) keeps 1 GiB or more out of the cache, its "Memory after warmup" (kvsim's
        terms: nothing committed, no torch reservation growth), and last `extend_kv_cache`'s "Extended KV
        cache" (the blocks' bytes, granule rounding not counted); the engine's "GPU KV cache size" line comes
        before the last."""
        kv = self.vllm_blocks * self.bytes_per_block
        left_free = self.free_bytes - kv - self.non_torch_reserve_bytes
        limit = self.torch_bytes + max(left_free, 0)
        peak = format_gib(self.transient_peak_bytes)
        out: tuple[str, ...] = ()
        withheld = self.withheld_bytes()
        if 0.7 < utilization < 1.0 and withheld >= 1 << 30:
            out = (
                f"gpu_memory_utilization={utilization} caps this instance at {format_gib(self.requested_bytes)} "
                f"GiB, keeping {format_gib(withheld)} GiB of free device memory out of the KV cache. The "
                "extensible KV cache is sized from the memory measured after warmup and CUDA graph capture, so "
                "vLLM's own use needs no headroom below 1.0. Leave gpu_memory_utilization unset unless it leaves "
                "room for memory vLLM does not measure: other processes sharing the GPU (including ones that "
                "allocate on it later), the CPU on a unified-memory device, weight transfer buffers for weight "
                "updates, or a KV connector's own device buffers.",
            )
        return (
            *out,
            f"Memory after warmup: {format_gib(self.free_bytes)} GiB free, 0.0 GiB committed to the KV cache, "
            f"{peak} GiB kept for transient activations ({peak} GiB allocated at peak, 0.0 GiB of torch "
            f"reservation growth); {self.vllm_blocks} KV cache blocks ({format_gib(kv)} GiB) fit within the "
            f"requested {format_gib(self.requested_bytes)} GiB. Torch may reserve up to {format_gib(limit)} GiB.",
            f"Extended KV cache to {self.vllm_blocks} blocks ({kv / (1 << 30):.2f} GiB).",
        )


def measure(
    memory_bytes: int,
    gpu_memory_utilization: float,
    weight_bytes: int,
    nonkv: NonKV,
    capacity_bytes: int,
    layout: KVLayout,
    rocm: bool,
) -> MeasuredSizing:
    """A pool's measured sizing from kvsim's memory terms (the module docstring says which is which): one
    GPU's `weight_bytes` as loaded, its `nonkv` estimates (`kvsim.model.memory.non_kv_memory`), the profiled
    `capacity_bytes` and the `layout`'s block bytes, on ROCm (`rocm`) or CUDA."""
    non_torch_bytes, cudagraph_bytes, activation_bytes = nonkv.non_torch, nonkv.cudagraph, nonkv.activation
    bytes_per_block = layout.bytes_per_block
    requested = math.ceil(memory_bytes * gpu_memory_utilization)
    non_kv = weight_bytes + non_torch_bytes + cudagraph_bytes
    floor = MARGIN_FLOOR_BYTES_ROCM if rocm else MARGIN_FLOOR_BYTES
    kv = measure_kv_cache_bytes(
        init_free_memory=memory_bytes,
        free_memory=memory_bytes - non_kv,
        committed_bytes=0,
        requested_memory=requested,
        transient_peak_bytes=activation_bytes,
        margin_floor_bytes=floor,
    )
    return MeasuredSizing(
        memory_bytes=memory_bytes,
        requested_bytes=requested,
        non_kv_bytes=non_kv,
        transient_peak_bytes=activation_bytes,
        margin_bytes=max(floor, int(activation_bytes * MARGIN_FRACTION)),
        kv_bytes=kv,
        capacity_bytes=capacity_bytes,
        vllm_blocks=min(kv // bytes_per_block, capacity_bytes // bytes_per_block),
        bytes_per_block=bytes_per_block,
        torch_bytes=weight_bytes + cudagraph_bytes,
        non_torch_reserve_bytes=NON_TORCH_RESERVE_BYTES_ROCM if rocm else NON_TORCH_RESERVE_BYTES,
        margin_floor_bytes=floor,
    )


__all__ = [
    "IMEX_OFF",
    "MARGIN_FLOOR_BYTES",
    "MARGIN_FLOOR_BYTES_ROCM",
    "MARGIN_FRACTION",
    "MEASURED_GPU_MEMORY_UTILIZATION",
    "NO_IMEX",
    "PD_PROFILED",
    "PROFILED_GPU_MEMORY_UTILIZATION",
    "SIZINGS",
    "MeasuredSizing",
    "imex_lines",
    "measure",
    "measure_kv_cache_bytes",
    "measured_off",
    "resolved_gpu_memory_utilization",
    "unset_sizing",
    "with_imex",
]
