"""The sparse-attention models' layers read from their Hugging Face `config.json` (`kvsim.model.hf_layers`
dispatches here): DeepSeek-V3.2's and GLM-5's MLA layers with their indexer key caches, DeepSeek-V4's
compressed layers, MiniMax-M3's block-sparse layers with their index key caches, as vLLM 0.33.0 builds them
(DESIGN.md §Defaults and sizing, "DeepSeek-V3.2", "DeepSeek-V4", "MiniMax-M3"). `kvsim.model.dsa` holds
these models' other rules (KV dtype, block size, index key bytes, MiniMax-M3's sparse config).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.dsa import minimax_m3_sparse, whole_at_least
from kvsim.model.layer_types import DSV4_RATIOS, FULL, MAX_WINDOW, Layer
from kvsim.model.mamba_dims import STATE_DIM_MAX
from kvsim.model.releases import LATEST


def deepseek_v4_layers(
    cfg: dict[str, Any], model_type: str, num_layers: int, where: str, field_int: Any
) -> tuple[Layer, ...]:
    """DeepSeek-V4's layers (`model_type` `deepseek_v4`): `compress_ratios` (one per layer, the MTP layers'
    after them, unread: they keep caches only under speculative decoding), `sliding_window`,
    `index_head_dim`; the latent layout vLLM prices (head_dim 512 with 64 RoPE values) is checked."""
    if model_type == "deepseek_v41":
        raise InvalidArgumentError(
            f"model {where}: model_type 'deepseek_v41' (DeepSeek-V4.1, vLLM 0.33.0's and 0.34.0's DeepseekV41Config) is not "
            "modelled: only DeepSeek-V4 ('deepseek_v4') is; V4.1's shared KV source layers and Engram are not"
        )
    if model_type != "deepseek_v4":
        # (SGLang's copies of DeepSeek-V4 name it 'deepseek_ref': no config class of that name in vLLM 0.33.0,
        # transformers_utils/config.py's _CONFIG_REGISTRY)
        unregistered = (
            "; vLLM 0.33.0 and 0.34.0 register no config class named 'deepseek_ref'"
            if model_type == "deepseek_ref"
            else ""
        )
        raise InvalidArgumentError(
            f"model {where}: model_type {model_type!r} with 'compress_ratios': only DeepSeek-V4 "
            f"('deepseek_v4') is modelled{unregistered} (DeepSeek-V4.1's 'deepseek_v41', with shared KV source "
            "layers and Engram, is not either)"
        )
    ratios = cfg.get("compress_ratios")
    if ratios is None:
        raise InvalidArgumentError(
            f"model {where}: DeepSeek-V4 without 'compress_ratios' (the upstream 'layer_types' / "
            "'compress_rates' spelling is not read): kvsim needs each layer's ratio"
        )
    if (
        not isinstance(ratios, list)
        or len(ratios) < num_layers
        or any(isinstance(r, bool) or not isinstance(r, int) for r in ratios)
    ):
        raise InvalidArgumentError(
            f"model {where}: 'compress_ratios' must list a whole-number ratio for each of the {num_layers} "
            "layers (the MTP layers' may follow)"
        )
    for key, want in (("head_dim", 512), ("qk_rope_head_dim", 64)):
        if cfg.get(key) != want:
            raise InvalidArgumentError(
                f"model {where}: DeepSeek-V4 field {key!r} {cfg.get(key)!r}: only {want} is modelled (the "
                "fp8_ds_mla entry of 448 NoPE + 64 RoPE values that vLLM's FlashMLA backend stores)"
            )
    window = field_int("sliding_window", least=1)
    index_dim = field_int("index_head_dim", 128)
    index_heads = field_int("index_n_heads", 64)
    for i, r in enumerate(ratios[:num_layers]):
        if r not in DSV4_RATIOS:
            raise InvalidArgumentError(
                f"model {where}: compress_ratios[{i}] {r} is not one of {', '.join(map(str, DSV4_RATIOS))}"
            )
    return tuple(
        Layer(
            "deepseek_v4", window, 1, 512, compress_ratio=r, index_head_dim=index_dim, index_heads=index_heads
        )
        for r in ratios[:num_layers]
    )


def minimax_m3_layers(
    cfg: dict[str, Any], model_type: str, num_layers: int, where: str, release: str = LATEST
) -> tuple[Layer, ...]:
    """MiniMax-M3's layers (vLLM 0.33.0's `models/minimax_m3/nvidia/model.py`; DESIGN.md §Defaults and sizing,
    "MiniMax-M3"): a sparse layer (`dsa.minimax_m3_sparse`) is full attention of the model's KV heads read
    over its top-k blocks, with an index key cache of `sparse_index_dim` beside its K and V
    (`index_head_dim`, `index_heads`); the others plain full attention. Every layer's cache spec is a
    `FullAttentionSpec` (the index cache's an `MLAAttentionSpec`, a subclass): one KV-cache group, a block
    taking every layer's pages (`UniformTypeKVCacheSpecs`)."""
    for key in (
        "attn_type_list",
        "layers_block_type",
        "linear_attn_config",
        "hybrid_override_pattern",
        "layer_types",
        "sliding_window",
        "attention_chunk_size",
    ):
        if cfg.get(key):
            raise InvalidArgumentError(
                f"model {where}: field {key!r} (model_type {model_type!r}) names layer kinds vLLM 0.33.0's "
                "and 0.34.0's MiniMax-M3 do not read (every layer is full or block-sparse attention): not modelled"
            )
    sparse = minimax_m3_sparse(cfg, num_layers, where, release)
    if not any(sparse.layers):
        return ()
    return tuple(
        Layer("full", index_head_dim=sparse.index_dim, index_heads=sparse.index_heads) if s else FULL
        for s in sparse.layers
    )


# The model types vLLM 0.33.0 serves with DeepSeek-V3.2's sparse attention (`vllm/models/deepseek_v32/`:
# DeepseekV32ForCausalLM, and GLM-5's GlmMoeDsaForCausalLM on the same classes).
DSA_TYPES = frozenset({"deepseek_v32", "glm_moe_dsa"})


def dsa_indexer_layers(cfg: Mapping[str, Any], num_layers: int, where: str) -> list[bool]:
    """DeepSeek-V3.2's layers that build an indexer (and its key cache): vLLM 0.33.0's
    `deepseek_v32/attention.py` skips layer i when `max(i - index_skip_topk_offset + 1, 0) %
    index_topk_freq` is not 0 (1 and 2 by default: every layer has one), or where `index_topk_pattern`
    has an "S". The one reading of the fields (the layers here, the weights in `kvsim.model.params`)."""
    freq, offset = cfg.get("index_topk_freq", 1), cfg.get("index_skip_topk_offset", 2)
    for key, v, least in (("index_topk_freq", freq, 1), ("index_skip_topk_offset", offset, 0)):
        if not whole_at_least(v, least):
            raise InvalidArgumentError(
                f"model {where}: field {key!r} {v!r} must be a whole number{' of at least 1' if least else ''}"
            )
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None:
        # (vLLM indexes it by layer: an "S" skips, anything else builds an indexer)
        if not isinstance(pattern, (str, list)):
            raise InvalidArgumentError(
                f"model {where}: field 'index_topk_pattern' {pattern!r} must be a string (or list) of a letter a "
                "layer, S where the layer skips its indexer"
            )
        return [not (i < len(pattern) and pattern[i] == "S") for i in range(num_layers)]
    return [max(i - offset + 1, 0) % freq == 0 for i in range(num_layers)]


def deepseek_v32_layers(
    cfg: dict[str, Any], num_layers: int, where: str, field_int: Any
) -> tuple[Layer, ...]:
    """DeepSeek-V3.2's layers: MLA layers whose latent cache is read sparsely (`index_topk` keys a query),
    each with an indexer key cache where `dsa_indexer_layers` builds an indexer."""
    # (vLLM sizes its top-k buffer by `index_topk` and builds the attention from the two ranks: each must be
    # a whole number; the top-k a window the engine takes)
    field_int("index_topk", least=1, most=MAX_WINDOW)
    field_int("q_lora_rank", least=1, most=STATE_DIM_MAX)
    field_int("kv_lora_rank", least=1, most=STATE_DIM_MAX)
    dim = field_int("index_head_dim", least=1, most=STATE_DIM_MAX)
    heads = field_int("index_n_heads", least=1, most=STATE_DIM_MAX)
    if dim % 128:
        raise InvalidArgumentError(
            f"model {where}: field 'index_head_dim' {dim} is not a multiple of 128 (the indexer quantizes its "
            "keys in blocks of 128 values)"
        )
    # Layer-kind fields vLLM's sparse-attention classes do not take (every layer is sparse MLA): refused by
    # name, not read as another model's would be. GLM-5.2 lists its layers as `deepseek_sparse_attention`;
    # with such a list vLLM sets no cache-wide window (`arg_utils.py`: only when every layer slides).
    types = cfg.get("layer_types")
    if types is not None and (
        not isinstance(types, list)
        or any(t not in ("deepseek_sparse_attention", "full_attention") for t in types)
    ):
        raise InvalidArgumentError(
            f"model {where}: field 'layer_types' of a sparse-attention model names kinds other than "
            "deepseek_sparse_attention: not modelled (every layer is sparse MLA)"
        )
    unread = [
        k
        for k in ("attention_chunk_size", "hybrid_override_pattern", "layers_block_type", "attn_type_list")
        if cfg.get(k) is not None
    ]
    if cfg.get("sliding_window") is not None and types is None:
        unread.append("sliding_window")
    if unread:
        raise InvalidArgumentError(
            f"model {where}: field {unread[0]!r} on a sparse-attention model (DeepSeek-V3.2's classes) is not "
            "modelled: its layers are all sparse MLA"
        )
    has = dsa_indexer_layers(cfg, num_layers, where)
    return tuple(Layer("full", index_head_dim=dim if h else 0, index_heads=heads) for h in has)


__all__ = [
    "DSA_TYPES",
    "deepseek_v4_layers",
    "deepseek_v32_layers",
    "dsa_indexer_layers",
    "minimax_m3_layers",
]
