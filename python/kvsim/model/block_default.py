"""The block size vLLM gives an unset `--block-size` (DESIGN.md §Defaults and sizing, "Block size").

vLLM offers `CacheConfig.DEFAULT_BLOCK_SIZE` (`vllm/config/cache.py`: 16 up to 0.33.0, 64 in 0.34.0) to the
attention backend it picks (`Platform.update_block_size_for_backend`, `vllm/platforms/interface.py`), whose
`get_preferred_block_size` keeps it where one of its kernel block sizes divides it and else takes its smallest
(`AttentionBackend.get_preferred_block_size`, `vllm/v1/attention/backend.py`); a few backends override that.
kvsim's knob `default_block_size` is that constant: 16 (vLLM 0.33.0 and older, their presets) or 64
(vLLM 0.34.0, the default). A Mamba
hybrid's attention block then starts from the result (`_align_hybrid_block_size`:
`max(smallest kernel block, block_size)`, `kvsim.model.layers.kv_layout`); a sparse-attention model's is
`kvsim.model.dsa`'s.
"""

from __future__ import annotations

from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.gpus import is_rocm
from kvsim.model.layers import fa4_fp8_block_size, mla_default_block_size

# vLLM's `CacheConfig.DEFAULT_BLOCK_SIZE`: 0.33.0 and before, 0.34.0.
DEFAULT_BLOCK_SIZES = (16, 64)
# ROCm's first dense backend, ROCM_ATTN (`v1/attention/backends/rocm_attn.py`): its `get_preferred_block_size`
# returns 16 whatever is offered (the native paged-attention kernel's size), for the head sizes it lists
# (`get_supported_head_sizes`) and the KV dtypes it takes (`supported_kv_cache_dtypes`: no fp32).
ROCM_ATTN_BLOCK = 16
ROCM_ATTN_HEADS = (32, 64, 80, 96, 128, 160, 192, 224, 256)
# vLLM 0.34.0's multimodal models whose image tokens attend both ways (`is_mm_prefix_lm`'s fallback list,
# `vllm/transformers_utils/model_arch_config_convertor.py`), which ROCM_ATTN does not serve (`supports_mm_prefix`).
MM_PREFIX_LM_TYPES = frozenset({"bagel", "gemma3", "molmo2", "moondream3", "paligemma"})
# RDNA GPUs on which vLLM 0.34.0 tries Triton's backend before ROCM_ATTN (`RocmPlatform`'s selector, `on_gfx1201()
# or on_gfx1100()`), unless the KV cache is fp8_e5m2.
ROCM_TRITON_FIRST = ("gfx1100", "gfx1201")


def check_default_block_size(value: int) -> None:
    """Refuses a `default_block_size` that is not one of vLLM's (`DEFAULT_BLOCK_SIZES`)."""
    if value not in DEFAULT_BLOCK_SIZES:
        raise InvalidArgumentError(
            f"default_block_size {value} is not one of vLLM's CacheConfig.DEFAULT_BLOCK_SIZE values kvsim "
            "models: 16 (vLLM 0.33.0 and before) or 64 (vLLM 0.34.0)"
        )


def _has_sinks(model: Any) -> bool:
    """Whether vLLM's model class passes attention sinks to its attention layers, as far as kvsim reads the
    config: gpt-oss (always), MiMo-V2's sliding layers (`add_swa_attention_sink_bias`), Granite's
    (`attention_sinks`, else when `layer_types` is set: `granite.py`)."""
    cfg = model.config_fields
    kind = model.model_type
    if kind == "gpt_oss" or cfg.get("add_swa_attention_sink_bias"):
        return True
    if kind in ("granite", "granitemoe"):
        return bool(cfg.get("attention_sinks", cfg.get("layer_types") is not None))
    return False


def rocm_attn_refusal(
    model: Any, arch: str, kv_dtype: str, *, connector: bool, multimodal: bool
) -> str | None:
    """Why vLLM 0.34.0's ROCm platform does not serve a dense model with ROCM_ATTN, or None where it does
    (its `_get_backend_priorities` and the backend's checks): a KV connector (a CPU tier: the
    OffloadingConnector; ROCM_ATTN is left out of the list), an RDNA GPU that tries Triton first, a head size or
    KV dtype it does not list, attention sinks, a multimodal model whose image tokens attend both ways."""
    heads = sorted(
        {lay.head_dim or model.head_dim for lay in model.layer_list() if lay.kind not in ("mamba", "none")}
    )
    if connector:
        return "a KV connector (a CPU tier's OffloadingConnector, a disaggregated fleet's NIXL), which ROCM_ATTN does not serve"
    if arch in ROCM_TRITON_FIRST and kv_dtype != "fp8_e5m2":
        return f"{arch}, on which vLLM tries Triton's backend first"
    if any(h not in ROCM_ATTN_HEADS for h in heads):
        return f"a head size of {max(h for h in heads if h not in ROCM_ATTN_HEADS)}, which ROCM_ATTN does not list"
    if kv_dtype == "fp32":
        return "an fp32 KV cache, which ROCM_ATTN does not take"
    if _has_sinks(model):
        return "attention sinks, which ROCM_ATTN does not take"
    # (kvsim keeps the text config's model_type, `gemma3_text`; vLLM reads the checkpoint's, `gemma3`)
    if multimodal and model.model_type.removesuffix("_text") in MM_PREFIX_LM_TYPES:
        return "image tokens that attend both ways (is_mm_prefix_lm), which ROCM_ATTN does not serve"
    return None


def default_block_size(
    model: Any,
    arch: str | None,
    kv_dtype: str,
    default: int = 16,
    *,
    connector: bool = False,
    multimodal: bool = False,
) -> int:
    """The block size vLLM gives `model` on a GPU of architecture `arch` (None: not named, taken as CUDA's,
    vLLM's wheel) when `--block-size` is not set and `CacheConfig.DEFAULT_BLOCK_SIZE` is `default` (16 or
    64): the preferred size of the backend it picks for the model.

    - An MLA model: `kvsim.model.layers.mla_default_block_size` (its backends: FlashAttention MLA and Triton
      MLA take multiples of 16, FlashInfer MLA 32 or 64, FlashMLA 64; ROCm's Triton MLA, AITER's MLA being
      off by default): 16, 32 or 64 under 16; 64 under 64.
    - A dense model on CUDA: FlashAttention, FlashInfer and Triton all take `default` (multiples of 16; 16, 32
      or 64), but FlashAttention 4's 64-token fp8 pages (`kvsim.model.layers.fa4_fp8_block_size`): `max`.
    - A dense model on ROCm: ROCM_ATTN's 16, whatever is offered; under 64, where ROCM_ATTN does not serve the
      model (`rocm_attn_refusal`), the next backend's, which takes 64 (AITER's unified attention prefers 64,
      AITER's FlashAttention takes 16 or 32, Triton multiples of 16). Under 16 kvsim keeps 16 there (as
      before: the AITER backends' choice depends on the install).

    `connector`: a KV connector is configured (kvsim's CPU tier, a disaggregated fleet); `multimodal`: the checkpoint's encoders are
    served (not `language_model_only`). A sparse-attention model's block is `kvsim.model.dsa`'s, a
    DeepSeek-V4 model's its own layout's (16 here stands for unset, as before).
    """
    check_default_block_size(default)
    if any(lay.kind == "deepseek_v4" for lay in model.layers):
        return 16  # (its own layout's 256-token blocks: `kvsim.model.layers_dsv4`, where 16 stands for unset)
    if model.is_mla:
        return mla_default_block_size(model, arch, kv_dtype, default) if arch is not None else default
    if arch is None:
        return default
    if is_rocm(arch):
        if default == 16:
            return ROCM_ATTN_BLOCK
        why = rocm_attn_refusal(model, arch, kv_dtype, connector=connector, multimodal=multimodal)
        return default if why is not None else ROCM_ATTN_BLOCK
    fa4 = fa4_fp8_block_size(model, arch, kv_dtype)
    return max(default, fa4) if fa4 is not None else default


__all__ = [
    "DEFAULT_BLOCK_SIZES",
    "MM_PREFIX_LM_TYPES",
    "ROCM_ATTN_BLOCK",
    "ROCM_ATTN_HEADS",
    "check_default_block_size",
    "default_block_size",
    "rocm_attn_refusal",
]
