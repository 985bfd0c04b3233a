"""A `--block-size` no attention backend on the GPU's platform takes (DESIGN.md §Defaults and sizing, "Block
size").

vLLM 0.33.0's and 0.34.0's `CacheConfig.block_size` takes any positive size (`vllm/config/cache.py`), but the
platform then picks an attention backend that supports it (`CudaPlatform.get_attn_backend_cls`,
`vllm/platforms/cuda.py`; ROCm's the same, `vllm/platforms/rocm.py`) through
`AttentionBackend.supports_block_size` (`vllm/v1/attention/backend.py`: the size must be a multiple of one of the
backend's `get_supported_kernel_block_sizes`), and where none does it raises "No valid attention backend found".
For a model without MLA every backend on both platforms' lists takes multiples of 16 only:

- CUDA (`_get_backend_priorities`): FLASH_ATTN `MultipleOf(16)`, FLASHINFER 16, 32 or 64, TRITON_ATTN and
  FLEX_ATTENTION `MultipleOf(16)`, TURBOQUANT 16, 32, 64 or 128.
- ROCm: ROCM_ATTN, ROCM_AITER_UNIFIED_ATTN, TRITON_ATTN and ROCM_OCTAVE `MultipleOf(16)`, ROCM_AITER_FA 16 or
  32, TURBOQUANT and ULTRAQUANT 16, 32, 64 or 128.

A model with MLA is served at any size: both lists hold TRITON_MLA (`vllm/v1/attention/backends/mla/
triton_mla.py`), which keeps the base class's `MultipleOf(1)`; a sparse-attention model's block is
`kvsim.model.dsa`'s to refuse. Without a GPU a block size is a free experiment (the paper's block-size study),
and a configuration of a release older than 0.33.0 (`vllm_release`: the presets older than `vllm-0.33`) gets a
note, not a refusal (kvsim has read 0.33.0's and 0.34.0's backends only)."""

from __future__ import annotations

from typing import Any

from kvsim.model.presets import named_release
from kvsim.model.releases import is_read  # (the releases whose backends are read above)

# The kernel block every non-MLA backend of vLLM 0.33.0 and 0.34.0 on CUDA and ROCm divides a block by.
KERNEL_MULTIPLE = 16


def no_backend_block(config: Any) -> int | None:
    """The pool's block size where it was given with a model on a GPU and no attention backend vLLM 0.33.0 or
    0.34.0 would pick takes it, else None (a state layer's raise, `kvsim.cli.run_output.block_size_note`, may have
    made it a multiple of 16)."""
    from kvsim.model.models import resolve

    if config._given.get("block_size") is None or config.model is None or config.gpu is None:
        return None
    used = int(config.pool.pool_block_size)
    if used % KERNEL_MULTIPLE == 0 or resolve(config.release_model).is_mla:
        return None
    return used


def _why(size: int) -> str:
    return (
        f"block size {size}: vLLM 0.33.0 and 0.34.0 start no attention backend on a GPU for it (every backend on "
        "CUDA's and ROCm's lists takes multiples of 16 only: FlashAttention, Triton and FlexAttention any "
        'multiple, FlashInfer multiples of 16, 32 or 64 kernel blocks; vllm serve stops with "No valid attention backend found")'
    )


def backend_block_refusal(config: Any, where: str) -> str | None:
    """The refusal of a block size no backend takes (`no_backend_block`) in a configuration of a release whose
    backends kvsim read (`vllm_release` 0.33.0 or 0.34.0), naming `where` it was given (`argument --block-size`,
    the run file's field, `argument --prefill-config`); None otherwise."""
    size = no_backend_block(config)
    if size is None or not is_read(config):
        return None
    return (
        f"{where}: {_why(size)}: give a multiple of 16 (16, 32, 64), or leave out --gpu to run {size} as an "
        "experiment (--kv-cache-memory-bytes or --num-gpu-blocks-override size the pool without a GPU)"
    )


def backend_block_note(config: Any, preset: str | None, who: str = "") -> str | None:
    """The note for a block size no backend of vLLM 0.33.0 or 0.34.0 takes (`no_backend_block`) in a
    configuration of an older release (`--preset`'s, or `--vllm-release`): kvsim runs it as asked; `who` names
    the replicas (`"prefill replicas' "` for `--prefill-config`'s)."""
    size = no_backend_block(config)
    if size is None or is_read(config):
        return None
    by = named_release(config.vllm_release, preset, flag=True)
    return f"{who}{_why(size)}; kvsim has not read the backends' sizes of {by} and runs it as asked"
