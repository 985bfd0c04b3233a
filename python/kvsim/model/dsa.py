"""Sparse attention's rules (DESIGN.md §Defaults and sizing, "DeepSeek-V3.2"): DeepSeek-V3.2's and GLM-5's
indexer key cache, the block size its indexer takes, the KV dtype vLLM 0.33.0 gives them and the layouts
kvsim refuses. One place for them: `kvsim.model.config.SimConfig` and `kvsim.model.sizing` (`size_pool`,
`pool_blocks`) go through `resolve`."""

from __future__ import annotations

from typing import Any

from kvsim.errors import InvalidArgumentError


def dsa_index_bytes(index_head_dim: int) -> int:
    """Bytes one token's indexer key takes in a layer: `index_head_dim` fp8 values and an fp32 scale per 128
    of them (`DeepseekV32IndexerCache`, uint8: 132 for DeepSeek-V3.2's 128-wide keys), one copy a GPU."""
    return index_head_dim + index_head_dim // 128 * 4


# DeepSeek-V3.2's indexer backend takes kernel blocks of 64 tokens only on CUDA (vLLM 0.33.0,
# `v1/attention/backends/mla/indexer.py` `get_supported_kernel_block_sizes`; any on ROCm).
DSA_CUDA_BLOCK = 64


def dsa_kv_dtype(model: Any, arch: str | None, kv_dtype: str | None) -> str | None:
    """The KV cache dtype vLLM 0.33.0 gives a sparse-attention model on `arch` for `kv_dtype` (None or auto:
    the model's): GLM-5 (`glm_moe_dsa`) takes fp8 on compute capability 10.x (`GlmMoeDsaForCausalLM.
    verify_and_update_config`, "Using fp8 kv-cache for GlmMoeDsaForCausalLM on SM10x"); else unchanged."""
    if kv_dtype in (None, "auto") and model.model_type == "glm_moe_dsa" and (arch or "").startswith("sm_10"):
        return "fp8"
    return kv_dtype


def dsa_block_size(model: Any, arch: str | None, kv_dtype: str, block_size: int | None) -> int:
    """A sparse-attention model's block size on `arch` (None: a GPU not named, taken as CUDA's, vLLM's
    wheel): `block_size` when given, else 64 on CUDA (the indexer's only kernel block, which every sparse
    MLA backend takes) and 16 on ROCm (vLLM's default; its indexer takes multiples of 16). `kv_dtype` is
    the cache's (`dsa_kv_dtype` applied).

    Raises:
        InvalidArgumentError: what vLLM 0.33.0 refuses or kvsim does not model, named: on CUDA a block size
            that is not a multiple of 64, a compute capability other than 9.x and 10.x (below 9: no sparse
            MLA backend, "No valid attention backend found"; 12.x: FlashInfer's SM120 backend stores
            FlashMLA's 656-byte `fp8_ds_mla` entries whatever the dtype; others: none), a latent other
            than 512 + 64 wide (the sparse kernels' only one), `fp8_e5m2` and `fp32` (no sparse backend, CUDA's
            or ROCm's, takes them); an
            fp8 cache where the backend vLLM picks stores `fp8_ds_mla` entries (9.x's FlashMLA; 10.x's
            FlashMLA where FlashInfer's backend does not take the model, a `qk_nope_head_dim` other than 128
            and 192) or where no GPU is named (the layout depends on it).
    """
    rocm = arch is not None and arch.startswith("gfx")
    where = f"model {model.name}" + (f" on {arch}" if arch else "")
    fp8 = kv_dtype.startswith("fp8")
    major = 0
    if arch is not None and arch.startswith("sm_"):
        major = int(arch[3:-1]) if arch[3:].isdigit() and len(arch) > 4 else 0
        if major < 9:
            raise InvalidArgumentError(
                f"{where}: sparse MLA (DeepSeek-V3.2's attention) has no attention backend below compute capability "
                '9.0 in vLLM 0.33.0 ("No valid attention backend found"; FlashMLA, FlashAttention and FlashInfer\'s '
                "sparse kernels need Hopper or later)"
            )
        if major == 12:
            raise InvalidArgumentError(
                f"{where}: vLLM 0.33.0 serves sparse MLA on compute capability 12.x with FlashInfer's SM120 sparse "
                "backend, which stores FlashMLA's 656-byte fp8_ds_mla entries whatever the KV dtype: that layout "
                "is not modelled"
            )
        if major not in (9, 10):
            raise InvalidArgumentError(
                f"{where}: vLLM 0.33.0 has sparse MLA backends for compute capability 9.x, 10.x and 12.x only"
            )
    if not rocm:
        width = model.kv_lora_rank + model.qk_rope_head_dim
        if (model.kv_lora_rank, model.qk_rope_head_dim) != (512, 64):
            raise InvalidArgumentError(
                f"{where}: a latent of {model.kv_lora_rank} + {model.qk_rope_head_dim} = {width}: vLLM 0.33.0's "
                "sparse MLA kernels on CUDA take 512 + 64 only (no backend would be found)"
            )

    if kv_dtype in ("fp8_e5m2", "fp32"):
        raise InvalidArgumentError(
            f"{where}: kv_cache_dtype {kv_dtype}: none of vLLM 0.33.0's sparse MLA backends takes it (their "
            "supported_kv_cache_dtypes: auto, float16, bfloat16 and fp8 as e4m3; FlashMLA's its fp8_ds_mla)"
        )
    if fp8 and not rocm:
        nope = model.qk_nope_head_dim
        if major == 0:
            ask = "name the GPU" if arch is None else "give the GPU's arch (sm_XY)"
            raise InvalidArgumentError(
                f"{where}: an fp8 KV cache for sparse MLA takes a layout that depends on the GPU (576 bytes an "
                f"entry on compute capability 10.x, FlashMLA's 656 on 9.x): {ask}"
            )
        why = ""
        if major == 9:
            why = "FlashMLA's 656-byte fp8_ds_mla layout on compute capability 9.x (its sparse backend)"
        elif nope not in (128, 192):
            why = (
                f"FlashMLA's 656-byte fp8_ds_mla layout on 10.x for a qk_nope_head_dim of {nope} (FlashInfer's "
                "sparse backend, first for fp8, takes 128 and 192)"
            )
        if why:
            raise InvalidArgumentError(
                f"{where}: an fp8 KV cache for sparse MLA is {why}, which is not modelled"
            )
    if block_size is None:
        return 16 if rocm else DSA_CUDA_BLOCK
    if not rocm and block_size % DSA_CUDA_BLOCK:
        raise InvalidArgumentError(
            f"{where}: block_size {block_size} is not a multiple of {DSA_CUDA_BLOCK}: vLLM 0.33.0's sparse-attention "
            f"indexer takes kernel blocks of {DSA_CUDA_BLOCK} tokens only on CUDA (give a multiple of "
            f"{DSA_CUDA_BLOCK}, or leave it unset)"
        )
    return block_size


def resolve(
    model: Any, arch: str | None, kv_cache_dtype: str | None, block_size: int | None
) -> tuple[str | None, int]:
    """A sparse-attention model's KV cache dtype (`dsa_kv_dtype`: None or auto stays so unless vLLM picks
    another) and block size (`dsa_block_size`, which refuses what is not modelled) on `arch`."""
    kv = dsa_kv_dtype(model, arch, kv_cache_dtype)
    dtype = model.kv_dtype if kv in (None, "auto") else kv
    return kv, dsa_block_size(model, arch, dtype, block_size)


__all__ = ["DSA_CUDA_BLOCK", "dsa_block_size", "dsa_index_bytes", "dsa_kv_dtype", "resolve"]
