"""A model's layers as vLLM's KV-cache manager sees them, and the KV-cache groups vLLM forms from them.

Every decoder layer of a model keeps one kind of cache (vLLM 0.33.0's `KVCacheSpec` of that layer,
`vllm/v1/kv_cache_interface.py`):

- `full`: full attention, every token's K and V (MLA: one latent per token; `FullAttentionSpec`,
  `MLAAttentionSpec`);
- `sliding_window`: the last `window` tokens (`SlidingWindowSpec`);
- `chunked_local`: the tokens of the current chunk of `window` tokens (`ChunkedLocalAttentionSpec`,
  Llama 4's local layers);
- `mamba`: a recurrent state of fixed size per request, whatever its length (`MambaSpec`: Mamba 1 and 2,
  gated delta net / linear attention, Kimi's KDA);
- `shared`: a layer that reads another layer's KV (`kv_sharing_target_layer_name`): no cache of its own;
- `none`: a layer without attention (Nemotron-NAS's no-op attention, `nemotron_nas.py`): no cache, and no
  attention computed (the roofline counts none for it);
- `deepseek_v4`: a DeepSeek-V4 layer, which keeps several caches (a sliding window, and with a compress ratio
  a compressed latent cache, its compressor's state, and for ratio 4 the indexer's keys and state), each a
  vLLM spec of its own (`layers_dsv4._deepseek_v4_specs`; DESIGN.md §Hybrid attention, "DeepSeek-V4").

`kv_layout` groups them exactly as vLLM does (`vllm/v1/core/kv_cache_planning.py`: `get_kv_cache_groups`,
`unify_kv_cache_spec_page_size`, `_get_kv_cache_groups_uniform_page_size`; the attention block size a
Mamba state needs, `vllm/platforms/interface.py`: `_align_hybrid_block_size`), and gives the bytes one
block takes across a group's layers, the scheduler's block size and the per-request block counts behind
vLLM's start-up figures (`vllm/v1/core/kv_cache_utils.py`: `get_max_concurrency_for_kv_cache_config`).
DESIGN.md §Hybrid attention states each rule with its source.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.dsa import dsa_index_bytes, index_key_bytes, mla_entry_bits
from kvsim.model.dtypes import dtype_bits
from kvsim.model.layer_types import (
    FULL,
    GROUP_KINDS,
    LAYER_KINDS,
    MAX_TOKENS,
    MAX_WINDOW,
    NO_ATTENTION,
    UNCACHED_KINDS,
    KVGroup,
    KVLayout,
    Layer,
    MambaState,
)

# vLLM's FlashAttention backend takes kernel blocks in multiples of 16 tokens: the attention block size a
# Mamba state raises is a multiple of it (`_align_hybrid_block_size`: `kernel_block_alignment_size`).
KERNEL_BLOCK_ALIGNMENT = 16
# ... and for a model whose attention is MLA, a multiple of 128 (`if model_config.use_mla`, there).
MLA_HYBRID_ALIGNMENT = 128


def preferred_block_size(default: int, kernel_blocks: tuple[int, ...]) -> int:
    """`AttentionBackend.get_preferred_block_size` (vLLM 0.34.0, as 0.33.0): `default` where one of the
    backend's kernel block sizes (a `MultipleOf(n)` counted as `n`) divides it, else the smallest."""
    return default if any(default % b == 0 for b in kernel_blocks) else min(kernel_blocks)


def mla_default_block_size(model: Any, arch: str, kv_dtype: str, default: int = 16) -> int:
    """The block size vLLM 0.33.0 gives an MLA model when `--block-size` is not set: that of the first MLA
    backend in its priority list (`vllm/platforms/cuda.py`, `_get_backend_priorities`) that takes the
    model, its preferred size (`AttentionBackend.get_preferred_block_size`: 16 if the backend takes it,
    else its smallest). On compute capability 10.x (B200, B300) FlashInfer's MLA backend, kernel blocks
    of 32 or 64, for a `qk_nope_head_dim` of 64, 128 or 192 (`flashinfer_mla.py`): 32. On 9.x (H100,
    H200) FlashAttention's MLA backend (blocks of 16's multiples) unless the KV cache is fp8, which it
    does not take: then FlashMLA's, blocks of 64 (`flashmla.py`; its dense kernel assumed built, as in
    vLLM's CUDA wheels). Elsewhere (8.x, 12.x: Triton's MLA backend) 16. DeepSeek-V4 keeps 16 here (its
    own layout gives its 256-token blocks). Refused: what the list's later backends decide (a
    `qk_nope_head_dim` FlashInfer's kernel does not take on 10.x; `fp8_e5m2`, which neither FlashInfer's
    nor FlashMLA's takes). `default` is vLLM's `CacheConfig.DEFAULT_BLOCK_SIZE` offered to the backend
    (`kvsim.model.block_default`): 16 gives the sizes above; 64 (vLLM 0.34.0) gives 64 on every one of them,
    each taking it (FlashInfer MLA: 32 or 64; FlashMLA: 64; the others multiples of 16), with the same
    refusals (the backend picked does not depend on it)."""
    if any(lay.kind == "deepseek_v4" for lay in model.layers):
        return 16
    if not arch.startswith(("sm_9", "sm_10")):
        return preferred_block_size(default, (16,))  # Triton MLA (ROCm's too: AITER's MLA is off by default)
    fp8 = kv_dtype.startswith("fp8")
    if kv_dtype == "fp8_e5m2":
        raise InvalidArgumentError(
            f"model {model.name} on {arch}: kv_cache_dtype fp8_e5m2 on an MLA model: vLLM 0.33.0's and 0.34.0's "
            "FlashInfer and FlashMLA backends do not take it, and which later backend it picks is not modelled; give "
            "block_size (or fp8)"
        )
    if arch.startswith("sm_10"):
        nope = model.qk_nope_head_dim or 1  # (vLLM's getattr default)
        if nope not in (64, 128, 192):
            raise InvalidArgumentError(
                f"model {model.name} on {arch}: qk_nope_head_dim {nope} is not one vLLM 0.33.0's and 0.34.0's "
                "FlashInfer MLA backend takes (64, 128, 192), and which later backend it picks is not modelled; give "
                "block_size"
            )
        return preferred_block_size(default, (32, 64))  # FlashInfer MLA
    return preferred_block_size(default, (64,) if fp8 else (16,))  # FlashMLA, else FlashAttention MLA


# FlashAttention 4's fp8 page on 9.x (vLLM 0.33.0, `v1/attention/backends/flash_attn.py` 300-326,
# `_get_sm90_fa4_fp8_kv_block_size`: "The SM90 FP8-KV-dequant kernel uses a 64-token TMA tile/page").
FA4_FP8_BLOCK = 64
# The head width that takes it: FlashAttention 3 takes heads up to 256 on 9.x, so vLLM upgrades a wider one
# to FlashAttention 4 (`v1/attention/backends/fa_utils.py` 139-166; FA4 present in vLLM's wheel, whose
# `vllm_flash_attn/cute/interface.py` makes `FA4_AVAILABLE`, `vllm_flash_attn/flash_attn_interface.py` 32-45,
# 72-86: 9.x, 10.x, 11.x), and the fp8 page rule names 512 only.
FA4_FP8_HEAD = 512


def fa4_fp8_block_size(model: Any, arch: str | None, kv_dtype: str) -> int | None:
    """64 where vLLM 0.33.0's FlashAttention backend reads an fp8 cache in FlashAttention 4's 64-token pages:
    compute capability 9.x, a `kv_dtype` of fp8 or fp8_e4m3, and a model whose widest attention head (vLLM's
    `ModelConfig.get_head_size`: the largest layer's, `config/model_arch.py` 94-133) is 512, as Gemma 4's
    global layers. Then `FlashAttentionBackend.get_preferred_block_size` returns 64 for the cache block
    (`flash_attn.py` 372-374) and the 512-wide layers' only kernel block is 64 (`get_supported_kernel_block_sizes`,
    356-366); narrower layers keep multiples of 16. None elsewhere (an MLA model: its own backends)."""
    if model.is_mla or not (arch or "").startswith("sm_9") or kv_dtype not in ("fp8", "fp8_e4m3"):
        return None
    heads = [
        lay.head_dim or model.head_dim for lay in model.layer_list() if lay.kind not in ("mamba", "none")
    ]
    return FA4_FP8_BLOCK if heads and max(heads) == FA4_FP8_HEAD else None


def _check_fa4_fp8_blocks(
    model: Any, layers: list[Layer], gpu_arch: str | None, blocks: list[tuple[int, int]]
) -> None:
    """Refuses a layout whose 512-wide layers' block (`blocks`: layer index and its group's block) is not a
    multiple of FlashAttention 4's 64-token fp8 page where vLLM 0.33.0 reads their cache with it
    (`fa4_fp8_block_size`): no kernel block divides it (a `--block-size` given that vLLM refuses)."""
    if fa4_fp8_block_size(model, gpu_arch, model.kv_dtype) is None:
        return
    for i, bs in blocks:
        if (layers[i].head_dim or model.head_dim) == FA4_FP8_HEAD and bs % FA4_FP8_BLOCK:
            raise InvalidArgumentError(
                f"model {model.name} on {gpu_arch}: its {FA4_FP8_HEAD}-wide layers (layer {i}) would take blocks "
                f"of {bs} tokens, not a multiple of {FA4_FP8_BLOCK}: vLLM 0.33.0 and 0.34.0 serve them "
                f"with FlashAttention 4, which reads an fp8 cache in {FA4_FP8_BLOCK}-token pages only on compute "
                "capability 9.x (flash_attn.py, _get_sm90_fa4_fp8_kv_block_size): no kernel block fits; leave "
                "block_size unset or give one that makes them a multiple of 64"
            )


# The gated delta net's prefill kernel (vLLM 0.33.0, `vllm/model_executor/layers/mamba/gdn/
# qwen_gdn_linear_attn.py`, `_resolve_gdn_prefill_backend`): FlashInfer's on CUDA GPUs of compute capability
# 9.0, or 10.x and 12.x with `linear_key_head_dim` 128 and a CUDA 13 runtime (vLLM 0.33.0's PyPI wheel is a
# CUDA 13 build: it requires `nvidia-cutlass-dsl[cu13]`); Triton's elsewhere (ROCm: Triton or AITER's
# FlyDSL). Only FlashInfer's exports prefill checkpoints, at offsets that are multiples of 64 tokens
# (`FLASHINFER_GDN_CHECKPOINT_ALIGNMENT`, `vllm/v1/attention/backends/gdn_attn.py`), which in align mode
# makes the attention block a multiple of 64 (`_align_hybrid_block_size`, `vllm/platforms/interface.py`).
GDN_PREFILL_BACKENDS = ("auto", "flashinfer", "triton")
FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64
# The layout's note when no GPU architecture picks the kernel (`kvsim run` prints it: `run_report`).
GDN_ASSUMED_NOTE = (
    "gated delta net prefill on FlashInfer's kernel (vLLM's on Hopper and Blackwell GPUs: prefill checkpoints, "
    "blocks a multiple of 64 tokens with prefix caching); no GPU architecture given (--gdn-prefill-backend "
    "triton for Triton's, as on other GPUs)"
)


# Kimi-K3's KDA prefill (vLLM 0.33.0, `vllm/models/kimi_k3/nvidia/kda.py`, `resolve_kda_prefill_backend`,
# `kda_prefill_backend` "auto"): FlashKDA on CUDA GPUs of compute capability 9, 10 or 12 (with a bounded gate,
# heads of 128, bfloat16 activations: `MambaState.kda_checkpoint_grid`), Triton's elsewhere. FlashKDA exports
# prefill checkpoints on a 16-token grid (`kda_prefill_checkpoint_alignment`, `kda_checkpoint.py`). vLLM's
# FlashInfer KDA prefill, taken only when asked for, is not modelled.
FLASHKDA_CHECKPOINT_ALIGNMENT = 16
KDA_ASSUMED_NOTE = (
    "KDA prefill on FlashKDA (vLLM's on compute capability 9, 10 and 12 GPUs: a prefill checkpoint block a "
    "request with prefix caching); no GPU architecture given"
)


def kda_flashkda(arch: str | None) -> bool:
    """Whether vLLM runs a bounded-gate KDA layer's prefill on FlashKDA on a GPU of architecture `arch`
    (None or "": unknown, taken as FlashKDA's, the kernel of the Hopper and Blackwell GPUs)."""
    if not arch:
        return True
    family = arch.removeprefix("sm_")
    return arch.startswith("sm_") and family.isdigit() and int(family) // 10 in (9, 10, 12)


def _check_gdn_backend(backend: str) -> None:
    if backend not in GDN_PREFILL_BACKENDS:
        raise InvalidArgumentError(
            f"gdn_prefill_backend {backend!r} is not one of {', '.join(map(repr, GDN_PREFILL_BACKENDS))}"
        )


def gdn_flashinfer(arch: str | None, head_k_dim: int, backend: str = "auto") -> bool:
    """Whether vLLM runs the gated delta net's prefill on FlashInfer's kernel: `backend` `auto` or
    `flashinfer` (which falls back to Triton where FlashInfer's kernel does not run, as vLLM does) on a GPU of
    architecture `arch` (`Gpu.arch`: `sm_90`, `gfx942`, ...; None or "" unknown: taken as FlashInfer's, the
    kernel of the Hopper and Blackwell GPUs such models are served on) for keys of `head_k_dim`."""
    _check_gdn_backend(backend)
    if backend == "triton":
        return False
    if not arch:
        return True
    if arch == "sm_90":
        return True
    family = arch.removeprefix("sm_")
    if arch.startswith("sm_") and family.isdigit() and int(family) // 10 in (10, 12):
        return head_k_dim == 128
    return False


def _attention_page(layer: Layer, model: Any, tp: int, kv_bits: int, block_size: int) -> int:
    """One block's bytes in one attention layer on one of `tp` ranks (vLLM's `page_size_bytes`)."""
    if model.is_mla:
        width = model.kv_lora_rank + model.qk_rope_head_dim
        index = 0
        if layer.index_head_dim and layer.kind == "full":
            # DeepSeek-V3.2: the layer's indexer key cache (uint8, one copy a GPU) joins its latent's group
            # (`UniformTypeKVCacheSpecs`): a block takes both pages.
            index = block_size * dsa_index_bytes(layer.index_head_dim)
        # (an fp8_ds_mla entry: 656 bytes whatever the bits, `kvsim.model.dsa.mla_entry_bits`)
        return block_size * mla_entry_bits(width, model.kv_dtype, kv_bits) // 8 + index
    heads = layer.num_kv_heads or model.num_kv_heads
    heads = max(1, heads // tp)  # ModelConfig.get_num_kv_heads: replicated when tp > heads
    index = 0
    if layer.index_head_dim and layer.kind == "full":
        # MiniMax-M3's sparse layer: its index key cache (bf16, one copy a GPU; `MiniMaxM3IndexerCache`)
        # joins its K and V's group (`UniformTypeKVCacheSpecs`): a block takes both pages.
        index = block_size * index_key_bytes(model, layer.index_head_dim)
    # K and V (`head_size + head_size_v`: twice the head width unless V's differs, MiMo-V2), at `kv_bits`
    # a value, or an NVFP4 cache's bytes from vLLM's formula (`kvsim.model.dtypes.kv_head_bits`)
    return block_size * heads * layer.kv_bits(model.head_dim, model.kv_dtype, kv_bits) // 8 + index


def _with_checkpoints(group: KVGroup, layers: list[Layer]) -> KVGroup:
    """A Mamba group with its layers' prefill-checkpoint blocks."""

    if group.kind != "mamba":
        return group
    states = [layers[i].state for i in group.layer_ids]
    blocks = max((st.checkpoint_blocks for st in states if st is not None), default=0)
    return dataclasses.replace(group, checkpoint_blocks=blocks)


def _without_checkpoints(layers: list[Layer], picked: Callable[[MambaState], bool]) -> list[Layer]:
    """`layers` with no prefill checkpoint on the state layers `picked` chooses (their prefill kernel on
    this GPU exports none: the gated delta net off FlashInfer, KDA off FlashKDA)."""
    return [
        dataclasses.replace(lay, state=dataclasses.replace(lay.state, checkpoint_blocks=0))
        if lay.state is not None and picked(lay.state)
        else lay
        for lay in layers
    ]


def kv_layout(
    model: Any,
    block_size: int,
    *,
    tensor_parallel_size: int = 1,
    kv_bits: int | None = None,
    enable_prefix_caching: bool = True,
    hybrid_kv_cache_manager: str = "auto",
    max_model_len: int | None = None,
    gpu_arch: str | None = None,
    gdn_prefill_backend: str = "auto",
) -> KVLayout:
    """The KV-cache groups of `model` (a `kvsim.model.models.Model`) as vLLM 0.33.0 forms them.

    Args:
        block_size: the attention block size asked for (`--block-size`); a Mamba state may raise it.
        tensor_parallel_size: ranks the model is split over (KV heads and states are per rank).
        kv_bits: bits per KV element (default: the model's KV dtype).
        enable_prefix_caching: with Mamba layers, checkpoints are kept for prefix caching
            (`mamba_cache_mode="align"`, vLLM's default with caching on); without, one state per request
            in a block of `max_model_len` tokens.
        hybrid_kv_cache_manager: `"auto"` (vLLM's default: on, chunked local attention included), `"on"`,
            or `"off"` (`--disable-hybrid-kv-cache-manager`: local layers counted as full attention).
        max_model_len: the context length (the model's when None).
        gpu_arch: the GPU's architecture (`Gpu.arch`), which picks the gated delta net's prefill kernel
            (`gdn_flashinfer`); None: unknown.
        gdn_prefill_backend: vLLM's `gdn_prefill_backend` (`--additional-config`): auto, flashinfer, triton.

    Raises:
        InvalidArgumentError: a layout vLLM refuses (naming why).
    """
    tp = tensor_parallel_size
    bits = kv_bits if kv_bits is not None else dtype_bits(model.kv_dtype)
    weight_bits = dtype_bits(model.weight_dtype) if model.weight_dtype in ("fp16", "bf16", "fp32") else 16
    mml = max_model_len if max_model_len is not None else model.max_model_len
    layers = list(model.layer_list())
    _check_gdn_backend(gdn_prefill_backend)
    notes: list[str] = []
    # The gated delta net's prefill kernel: checkpoints (and their 64-token grid) only on FlashInfer's.
    gdn = [lay.state.gdn_head_k_dim for lay in layers if lay.state is not None and lay.state.gdn_head_k_dim]
    gdn_grid = None
    if gdn:
        if all(gdn_flashinfer(gpu_arch, hk, gdn_prefill_backend) for hk in gdn):
            gdn_grid = FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
            if not gpu_arch:
                notes.append(GDN_ASSUMED_NOTE)
        else:
            layers = _without_checkpoints(layers, lambda st: bool(st.gdn_head_k_dim))
    # Kimi-K3's KDA prefill: checkpoints (on a 16-token grid) only on FlashKDA.
    kda_grid = None
    kda = [
        lay.state.kda_checkpoint_grid
        for lay in layers
        if lay.state is not None and lay.state.kda_checkpoint_grid
    ]
    if kda:
        if kda_flashkda(gpu_arch):
            kda_grid = math.lcm(*kda)
            if not gpu_arch:
                notes.append(KDA_ASSUMED_NOTE)
        else:
            layers = _without_checkpoints(layers, lambda st: bool(st.kda_checkpoint_grid))
    if any(lay.kind == "deepseek_v4" for lay in layers):
        from kvsim.model.layers_dsv4 import deepseek_v4_layout  # (it builds this module's KVLayout)

        return deepseek_v4_layout(model, layers, block_size, hybrid_kv_cache_manager)
    has_local = any(lay.kind in ("sliding_window", "chunked_local") for lay in layers)
    has_full = any(lay.kind == "full" for lay in layers)
    has_mamba = any(lay.kind == "mamba" for lay in layers)
    if hybrid_kv_cache_manager not in ("auto", "on", "off"):
        raise InvalidArgumentError(
            f"hybrid_kv_cache_manager {hybrid_kv_cache_manager!r} is not one of 'auto', 'on', 'off'"
        )
    # `auto` is vLLM's default: the hybrid manager on. (vLLM turns it off for chunked local attention only when
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 0, which defaults to 1 in 0.19.0 and 0.33.0's
    # `envs.py`, or with EAGLE, which kvsim does not model; Llama-4-Scout's 0.19.0 start-up log counts the
    # hybrid manager's blocks: results/startup.md.)
    hybrid_on = hybrid_kv_cache_manager in ("on", "auto")
    promoted = False
    if not hybrid_on and has_full and has_local:
        # unify_hybrid_kv_cache_specs: sliding-window and chunked-local layers allocated as full attention.
        # (each keeps its own KV heads and widths: FullAttentionSpec of the layer's `num_kv_heads`,
        # `head_size`, `head_size_v`; MiMo-V2's sliding layers have twice the full layers' KV heads)
        layers = [
            dataclasses.replace(lay, kind="full", window=0)
            if lay.kind in ("sliding_window", "chunked_local")
            else lay
            for lay in layers
        ]
        promoted = True
        notes.append("hybrid KV-cache manager off: local-attention layers keep every token")
    if has_mamba and not hybrid_on:
        raise InvalidArgumentError(
            f"model {model.name}: Mamba / linear-attention layers need vLLM's hybrid KV-cache manager "
            "(hybrid_kv_cache_manager 'off' is refused by vLLM for them)"
        )
    cached = [(i, lay) for i, lay in enumerate(layers) if lay.kind not in UNCACHED_KINDS]
    if not cached:
        raise InvalidArgumentError(
            f"model {model.name} keeps no KV cache (attention-free): kvsim models the KV cache only"
        )
    align = has_mamba and enable_prefix_caching
    # The attention block size: raised until an attention page holds a Mamba state
    # (`_align_hybrid_block_size`, the first attention layer's page per token against the largest state).
    attn_bs = block_size
    mamba_page = 0
    if has_mamba:
        mamba_page = max(lay.state.page_bytes(tp, weight_bits) for _, lay in cached if lay.state is not None)
        first_attn = next((lay for _, lay in cached if lay.kind != "mamba"), None)
        if first_attn is not None:
            per_token = _attention_page(first_attn, model, tp, bits, 1)
            align_to = max(KERNEL_BLOCK_ALIGNMENT, block_size)
            if model.is_mla:
                # vLLM 0.33.0's `_align_hybrid_block_size` (vllm/platforms/interface.py): a hybrid MLA model's
                # block a multiple of 128 tokens (the TRT-LLM / FlashInfer MLA decode kernels' alignment),
                # on every GPU (Kimi-Linear: 1,920 tokens at tp 1 where 16's multiple gave 1,888)
                align_to = max(align_to, MLA_HYBRID_ALIGNMENT)
            states = [lay.state for _, lay in cached if lay.state is not None]
            if align and gdn_grid is not None and all(st.gdn_head_k_dim for st in states):
                # Internal prefill checkpoints land on block boundaries: the block a multiple of the
                # checkpoints' grid (the lcm of every state layer's, none unless all have one).
                align_to = math.lcm(align_to, gdn_grid)
            if align and kda_grid is not None and all(st.kda_checkpoint_grid for st in states):
                align_to = math.lcm(align_to, kda_grid)
            needed = align_to * -(-mamba_page // (align_to * per_token))
            needed = KERNEL_BLOCK_ALIGNMENT * -(-needed // KERNEL_BLOCK_ALIGNMENT)
            if needed > MAX_TOKENS:
                # (a state sized by absurd config fields: the engine's block size took no such number and
                # refused it as `kv_groups`, naming no field)
                raise InvalidArgumentError(
                    f"model {model.name}: a state layer keeps {mamba_page:,} B a request (its config's "
                    f"state sizes): a block would need {needed:,} tokens to hold it, above kvsim's limit of "
                    f"{MAX_TOKENS:,}"
                )
            if attn_bs < needed:
                attn_bs = needed
                notes.append(
                    f"attention block size raised to {attn_bs} tokens so that a block holds a Mamba state "
                    f"(vLLM's _align_hybrid_block_size)"
                )
    # Per layer: (kind, window, block size, page bytes).
    specs: list[tuple[int, tuple[str, int, int, int]]] = []
    for i, lay in cached:
        if lay.kind == "mamba":
            assert lay.state is not None
            bs = attn_bs if align else mml
            specs.append((i, ("mamba", 0, bs, lay.state.page_bytes(tp, weight_bits))))
        else:
            window = lay.window if lay.kind in ("sliding_window", "chunked_local") else 0
            page = _attention_page(lay, model, tp, bits, attn_bs)
            specs.append((i, (lay.kind, window, attn_bs, page)))
    if has_mamba:
        # The Mamba page is padded to the attention page (mamba_page_size_padded).
        attn_page = max((s[3] for _, s in specs if s[0] != "mamba"), default=mamba_page)
        if attn_page < mamba_page:
            attn_page = mamba_page  # attention-free apart from states: the state page is the page
        specs = [(i, (s[0], s[1], s[2], attn_page) if s[0] == "mamba" else s) for i, s in specs]
    distinct = {s for _, s in specs}
    kinds = {(s[0], s[1]) for s in distinct}
    if len(distinct) == 1 or (len(kinds) == 1 and len({s[2] for s in distinct}) == 1):
        # One spec (most models), or one kind with per-layer pages (UniformTypeKVCacheSpecs): one group,
        # a block taking every layer's page.
        (kind, window), bs = next(iter(kinds)), next(iter(distinct))[2]
        page_sum = sum(s[3] for _, s in specs)
        ids = tuple(i for i, _ in specs)
        group = _with_checkpoints(
            KVGroup(kind, window, bs, len(specs), ids, specs[0][1][3], page_sum), layers
        )
        _check_fa4_fp8_blocks(model, layers, gpu_arch, [(i, bs) for i, _ in specs])
        return KVLayout((group,), page_sum, attn_bs, bs, align, promoted, tuple(notes))
    # unify_kv_cache_spec_page_size: the smaller pages grow to the largest by a larger block size (or, for
    # a page that does not divide it, padding).
    max_page = max(s[3] for _, s in specs)
    unified: list[tuple[int, tuple[str, int, int, int]]] = []
    for i, (kind, window, bs, page) in specs:
        if page != max_page and kind != "mamba":
            if max_page % page == 0:
                bs, page = bs * (max_page // page), max_page
            elif not model.is_mla:
                page = max_page  # padded
            else:
                raise InvalidArgumentError(
                    f"model {model.name}: layer {i}'s page of {page} B does not divide the largest page "
                    f"({max_page} B) and an MLA page cannot be padded (vLLM refuses this layout)"
                )
        unified.append((i, (kind, window, bs, max_page if kind == "mamba" else page)))
    _check_fa4_fp8_blocks(model, layers, gpu_arch, [(i, spec[2]) for i, spec in unified])
    buckets: dict[tuple[str, int, int, int], list[int]] = {}
    for i, spec in unified:
        buckets.setdefault(spec, []).append(i)
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups: list[KVGroup] = []
    for (kind, window, bs, page), members in buckets.items():
        n = -(-len(members) // group_size)
        for k in range(n):
            groups.append(
                KVGroup(kind, window, bs, group_size, tuple(members[k::n]), page, group_size * page)
            )
    groups = [_with_checkpoints(g, layers) for g in groups]
    sched = math.lcm(*(g.block_size for g in groups))
    return KVLayout(
        tuple(groups),
        max(g.bytes_per_block for g in groups),
        attn_bs,
        sched,
        align,
        promoted,
        tuple(notes),
    )


__all__ = [
    "FA4_FP8_BLOCK",
    "FULL",
    "GROUP_KINDS",
    "KERNEL_BLOCK_ALIGNMENT",
    "LAYER_KINDS",
    "MAX_WINDOW",
    "NO_ATTENTION",
    "UNCACHED_KINDS",
    "KVGroup",
    "KVLayout",
    "Layer",
    "MambaState",
    "fa4_fp8_block_size",
    "kv_layout",
]
