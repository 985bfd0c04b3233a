"""A model's layers read from its Hugging Face `config.json`: each decoder layer's cache kind
(`kvsim.model.layers.Layer`) as vLLM 0.33.0 builds the model's layers from the config (`layer_types` and the
fields transformers derives it from; Gemma 4's global and KV-shared layers; DeepSeek-V4's compress ratios;
Mamba and linear-attention states). `kvsim.model.layers` groups them as vLLM's KV-cache manager does; this
module only reads configs (DESIGN.md §Hybrid attention states each rule with its source).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.dsa import MINIMAX_M3_TYPES, whole_at_least
from kvsim.model.hf_sparse import DSA_TYPES, deepseek_v4_layers, deepseek_v32_layers, minimax_m3_layers
from kvsim.model.layers import (
    FLASHKDA_CHECKPOINT_ALIGNMENT,
    FULL,
    MAX_WINDOW,
    NO_ATTENTION,
    Layer,
    MambaState,
)
from kvsim.model.mamba_dims import STATE_DIM_MAX, mamba_dims
from kvsim.model.nemotron_nas import MODEL_TYPE as NAS_TYPE
from kvsim.model.nemotron_nas import first_kv_heads, nas_blocks
from kvsim.model.releases import LATEST

# Layer names of a config's `layer_types` (transformers' spelling) and the kind each is.
_HF_LAYER_TYPES = {
    "full_attention": "full",
    "attention": "full",
    "sliding_attention": "sliding_window",
    "chunked_attention": "chunked_local",
    "linear_attention": "mamba",
    "mamba": "mamba",
}


def full_attention_interval(cfg: Mapping[str, Any], where: str) -> int:
    """Qwen3-Next's `full_attention_interval`: every so many layers one is full attention, the others gated
    delta nets (4 when absent, transformers' `Qwen3NextConfig`); a whole number of at least 1. The one
    reading of the field (the layers here, the weights in `kvsim.model.params`)."""
    v = cfg.get("full_attention_interval", 4)
    if not whole_at_least(v, 1):
        raise InvalidArgumentError(
            f"model {where}: field 'full_attention_interval' {v!r} must be a whole number of at least 1"
        )
    assert isinstance(v, int)
    return v


def jamba_period(cfg: Mapping[str, Any], what: str, period: int, offset: int, where: str) -> tuple[int, int]:
    """Jamba's `{what}_layer_period` and `{what}_layer_offset` (`attn`: 8 and 4 when absent; `expert`: 2
    and 1, transformers' `JambaConfig`): a period of at least 1 and an offset below it, as the config class
    refuses an offset of the period or more (`_check_supported_offset`)."""
    p, o = cfg.get(f"{what}_layer_period", period), cfg.get(f"{what}_layer_offset", offset)
    for key, v, least in ((f"{what}_layer_period", p, 1), (f"{what}_layer_offset", o, 0)):
        if not whole_at_least(v, least):
            raise InvalidArgumentError(
                f"model {where}: field {key!r} {v!r} must be a whole number{' of at least 1' if least else ''}"
            )
    if o >= p:
        raise InvalidArgumentError(
            f"model {where}: field '{what}_layer_offset' {o} must be below '{what}_layer_period' {p} "
            "(transformers' JambaConfig refuses it)"
        )
    return p, o


def jamba_attention_layers(cfg: Mapping[str, Any], num_layers: int, where: str) -> list[bool]:
    """Jamba's attention layers: `i % attn_layer_period == attn_layer_offset` (transformers' `JambaConfig`
    `layers_block_type`), the others Mamba. The one reading of the fields (the layers here, the weights in
    `kvsim.model.params_state`)."""
    period, offset = jamba_period(cfg, "attn", 8, 4, where)
    return [i % period == offset for i in range(num_layers)]


# Nemotron-H's block names (transformers' `NemotronHConfig.layers_block_type`, and the older spellings its
# `remap_legacy_layer_types` reads) as the letters of `hybrid_override_pattern`.
_NEMOTRON_H_BLOCKS = {
    "linear_attention": "M",
    "mamba": "M",
    "full_attention": "*",
    "attention": "*",
    "mlp": "-",
    "moe": "E",
}


def nemotron_h_pattern(cfg: Mapping[str, Any], num_layers: int, where: str) -> str:
    """Nemotron-H's blocks, a letter a layer (`M` Mamba 2, `*` attention, `-` MLP, `E` MoE): its
    `layers_block_type` (or `layer_types`) where given, as transformers' `NemotronHConfig` prefers it, else
    `hybrid_override_pattern`; one a layer. The one reading of the fields (the layers here, the weights in
    `kvsim.model.params_state`)."""
    blocks = cfg.get("layers_block_type", cfg.get("layer_types"))
    if blocks is not None:
        key = "layers_block_type" if cfg.get("layers_block_type") is not None else "layer_types"
        if not isinstance(blocks, list) or len(blocks) != num_layers:
            raise InvalidArgumentError(f"model {where}: {key!r} must list the {num_layers} layers' blocks")
        unknown = sorted({str(t) for t in blocks if not isinstance(t, str) or t not in _NEMOTRON_H_BLOCKS})
        if unknown:
            raise InvalidArgumentError(
                f"model {where}: {key!r} blocks {unknown} are not Nemotron-H's "
                f"({', '.join(sorted(_NEMOTRON_H_BLOCKS))})"
            )
        return "".join(_NEMOTRON_H_BLOCKS[t] for t in blocks)
    letters = cfg.get("hybrid_override_pattern")
    if not isinstance(letters, str) or len(letters) != num_layers:
        raise InvalidArgumentError(
            f"model {where}: 'hybrid_override_pattern' must name the {num_layers} layers"
        )
    if set(letters) - set("M*-E"):
        raise InvalidArgumentError(
            f"model {where}: 'hybrid_override_pattern' letters {sorted(set(letters) - set('M*-E'))} are "
            "not Mamba (M), attention (*), MLP (-) or MoE (E)"
        )
    return letters


def granite_layer_is_mamba(cfg: Mapping[str, Any], num_layers: int, where: str) -> list[bool]:
    """Granite 4.0-H's mixers by `layer_types` (`mamba` / `linear_attention` or `attention` /
    `full_attention`, vLLM's `granitemoehybrid.py`); every layer Mamba when absent (transformers'
    `GraniteMoeHybridConfig`). The one reading of the field (the layers here, the weights in
    `kvsim.model.params_state`)."""
    # (`layers_block_type` is the config class's other name for it, `attribute_map`)
    types = cfg.get("layer_types", cfg.get("layers_block_type"))
    if types is None:
        return [True] * num_layers
    if not isinstance(types, list) or len(types) != num_layers:
        raise InvalidArgumentError(f"model {where}: 'layer_types' must list the {num_layers} layers' types")
    kinds = {"mamba": True, "linear_attention": True, "attention": False, "full_attention": False}
    unknown = sorted({str(t) for t in types if not isinstance(t, str) or t not in kinds})
    if unknown:
        raise InvalidArgumentError(
            f"model {where}: layer types {unknown} of 'layer_types' are not Granite 4.0-H's ({', '.join(sorted(kinds))})"
        )
    return [kinds[t] for t in types]


def kimi_linear_attention(
    cfg: Mapping[str, Any], num_layers: int, where: str
) -> tuple[int, int, int, frozenset[int]]:
    """Kimi-Linear's `linear_attn_config`: (`num_heads`, `head_dim`, `short_conv_kernel_size` (4 when
    absent), the KDA layers), each number a whole number of at least 1 and `kda_layers` a non-empty list of
    distinct layer numbers from 1 to `num_layers` (1-based, vLLM's `KimiLinearConfig.is_kda_layer`). The one
    reading of the field (the layers here, the weights in `kvsim.model.params`)."""
    lac = cfg.get("linear_attn_config")
    if not isinstance(lac, dict):
        raise InvalidArgumentError(f"model {where}: 'linear_attn_config' must be an object")
    if cfg.get("dsa_config") is not None:
        # Kimi-K3.1 (vLLM 0.34.0: `KimiK31ForConditionalGeneration`, `transformers_utils/configs/
        # kimi_linear.py` `KimiLinearDSAConfig`, `models/kimi_k3/nvidia/model.py` `KimiK3DSAAttention`) puts
        # DeepSeek sparse attention on its `dsa_layers`; read past, it was sized as Kimi-K3.
        raise InvalidArgumentError(
            f"model {where}: field 'dsa_config' (Kimi-K3.1's DeepSeek sparse attention, vLLM 0.34.0) is not "
            "modelled: its index key cache, top-k buffer, indexer weights and packed block size would be "
            "missing (kvsim sizes Kimi-Linear and Kimi-K3)"
        )
    # Fields that change what vLLM 0.33.0 builds (`vllm/models/kimi_k3/nvidia/model.py`, KimiDecoderLayer): a
    # full-rank gate is Kimi-K3's layer (`KimiK3DeltaAttention`, `nvidia/kda.py`: the gate a fourth slice of
    # the input projection, its prefill on FlashKDA where the gate is bounded), read here; a bounded gate
    # without it (Kimi-Linear's layer, whose prefill vLLM's `KimiGatedDeltaNetAttention` asserts is Triton's)
    # is refused rather than read past.
    full_rank = lac.get("use_full_rank_gate")
    if full_rank is not None and not isinstance(full_rank, bool):
        raise InvalidArgumentError(
            f"model {where}: field 'linear_attn_config.use_full_rank_gate' {full_rank!r} must be true or false"
        )
    bound = lac.get("gate_lower_bound")
    if bound is not None and not full_rank:
        raise InvalidArgumentError(
            f"model {where}: field 'linear_attn_config.gate_lower_bound' {bound!r} is not modelled: a bounded KDA "
            "gate runs vLLM's prefill on FlashKDA on compute capability 9.x-12.x GPUs, whose prefill "
            "checkpoints kvsim models for Kimi-K3's full-rank-gate layer only"
        )
    if (
        full_rank
        and bound is not None
        and (isinstance(bound, bool) or not isinstance(bound, (int, float)) or not -5.0 <= bound < 0)
    ):
        # (KimiK3DeltaAttention asserts `_KDA_GATE_LOGBOUND_MIN <= gate_lower_bound < 0`)
        raise InvalidArgumentError(
            f"model {where}: field 'linear_attn_config.gate_lower_bound' {bound!r} must be a number in [-5, 0) "
            "(vLLM 0.33.0's and 0.34.0's KimiK3DeltaAttention asserts it)"
        )
    numbers = []
    for key, default in (("num_heads", None), ("head_dim", None), ("short_conv_kernel_size", 4)):
        v = lac.get(key, default)
        if not whole_at_least(v, 1) or (isinstance(v, int) and v > STATE_DIM_MAX):
            raise InvalidArgumentError(
                f"model {where}: field 'linear_attn_config.{key}' {v!r} must be a whole number of at least 1 "
                f"up to {STATE_DIM_MAX:,}"
            )
        assert isinstance(v, int)
        numbers.append(v)
    kda = lac.get("kda_layers")
    if (
        not isinstance(kda, list)
        or not kda
        or not all(whole_at_least(i, 1) and i <= num_layers for i in kda)
        or len(set(kda)) != len(kda)
    ):
        raise InvalidArgumentError(
            f"model {where}: field 'linear_attn_config.kda_layers' {kda!r} must list distinct layer numbers "
            f"from 1 to {num_layers} (1-based)"
        )
    heads, head_dim, kernel = numbers
    return heads, head_dim, kernel, frozenset(kda)


def kimi_full_rank_gate(cfg: Mapping[str, Any]) -> bool:
    """Whether a Kimi config's KDA layers are Kimi-K3's (`linear_attn_config.use_full_rank_gate`, which
    vLLM 0.33.0 reads by its truth: `KimiK3DeltaAttention`, `models/kimi_k3/nvidia/kda.py`)."""
    lac = cfg.get("linear_attn_config")
    # (a value not true or false is refused where the layers are read, `kimi_linear_attention`)
    return isinstance(lac, dict) and lac.get("use_full_rank_gate") is True


def layers_from_hf_config(
    cfg: dict[str, Any], num_layers: int, where: str, release: str = LATEST
) -> tuple[Layer, ...]:
    """Each decoder layer's cache from a Hugging Face `config.json` (already merged with its
    `text_config`), as vLLM 0.33.0 builds the layers (the rules and their sources: DESIGN.md §Hybrid
    attention). Empty: every layer full attention.

    Read: `layer_types` (with `sliding_window`, `attention_chunk_size`), and where a checkpoint has none,
    what transformers derives it from: Gemma's, Cohere2's and EXAONE 4's `sliding_window_pattern`, gpt-oss's
    alternation, Llama 4's
    `no_rope_layers` with `attention_chunk_size`, Qwen's `use_sliding_window` / `max_window_layers`,
    Qwen3-Next's `full_attention_interval`, Jamba's `attn_layer_period` / `attn_layer_offset`,
    Nemotron-H's `hybrid_override_pattern`, Kimi-Linear's `linear_attn_config`, and a model-wide
    `sliding_window` (Mistral: every layer). A state layer's shape comes from the model's fields as vLLM's
    `MambaStateShapeCalculator` reads them. `release`: the vLLM release whose reading of MiniMax-M3's
    legacy sparse fields is followed (`kvsim.model.dsa.minimax_m3_sparse`).

    Raises:
        InvalidArgumentError: a field kvsim cannot model, named, rather than a guess.
    """
    model_type = str(cfg.get("model_type", ""))

    def field_int(key: str, default: int | None = None, least: int = 0, most: int | None = None) -> int:
        v = cfg.get(key, default)
        if not whole_at_least(v, least) or (most is not None and isinstance(v, int) and v > most):
            at_least = f" of at least {least}" if least else ""
            at_most = f" up to {most:,}" if most is not None else ""
            raise InvalidArgumentError(
                f"model {where}: field {key!r} {v!r} must be a whole number{at_least}{at_most}"
            )
        assert isinstance(v, int)
        return v

    def field_window(key: str) -> int:
        """A window or chunk in tokens: from 1 to what the engine takes (`MAX_WINDOW`)."""
        v = field_int(key, least=1)
        if v > MAX_WINDOW:
            raise InvalidArgumentError(
                f"model {where}: field {key!r} {v} is longer than {MAX_WINDOW} tokens (2**63 - 1), the longest "
                "window kvsim's engine takes"
            )
        return v

    window = cfg.get("sliding_window")
    if window == 0:
        window = None  # vLLM: 0 means no sliding window (ModelConfig)
    if window is not None:
        window = field_window("sliding_window")

    def sliding() -> Layer:
        if window is None:
            raise InvalidArgumentError(f"model {where}: sliding-window layers but no 'sliding_window'")
        return Layer("sliding_window", window)

    if model_type.startswith("deepseek_v4") or cfg.get("compress_ratios") is not None:
        return deepseek_v4_layers(cfg, model_type, num_layers, where, field_int)
    if model_type == NAS_TYPE:
        # Nemotron-NAS: each layer's attention from its block (`kvsim.model.nemotron_nas`): its own KV heads,
        # or none at all (a no-op attention: no cache, no attention computed)
        blocks = nas_blocks(
            cfg,
            num_layers,
            field_int("num_attention_heads", least=1),
            field_int("hidden_size", least=1),
            where,
        )
        first = first_kv_heads(blocks)
        return _trim(
            [
                NO_ATTENTION
                if not blk.kv_heads
                else FULL
                if blk.kv_heads == first
                else Layer("full", num_kv_heads=blk.kv_heads)
                for blk in blocks
            ]
        )
    if model_type in MIMO_V2_TYPES:
        return _mimo_v2_layers(cfg, num_layers, where, field_int, field_window)
    _refuse_unread_layers(cfg, model_type, where)
    if model_type in MINIMAX_M3_TYPES:
        return minimax_m3_layers(cfg, model_type, num_layers, where, release)
    if model_type in DSA_TYPES:
        return deepseek_v32_layers(cfg, num_layers, where, field_int)
    if model_type.startswith("gemma4"):
        return _gemma4_layers(cfg, num_layers, where, field_int, sliding)
    if model_type == "minimax_m2":
        # vLLM's minimax_m2.py builds every layer as full attention; its `attn_type_list` marks them 1
        # (MiniMax-Text-01's lightning-attention layers are 0, which MiniMax-M2 has none of).
        kinds = cfg.get("attn_type_list")
        if kinds is not None and (not isinstance(kinds, list) or any(k != 1 for k in kinds)):
            raise InvalidArgumentError(
                f"model {where}: MiniMax-M2's 'attn_type_list' must mark every layer 1 (full attention); "
                "linear (lightning) attention layers are not modelled"
            )
        return ()
    state = _hf_state(cfg, model_type, num_layers, where, field_int)
    if state is None:
        # State-layer fields of a model type kvsim reads no state for (Bamba's `attn_layer_indices` and
        # `mamba_*`, any other Mamba hybrid's): its layers ran as full attention, the states dropped.
        unread = sorted(
            k
            for k, v in cfg.items()
            if v is not None
            and (k.startswith(("mamba_", "ssm_")) or k in ("attn_layer_indices", "attn_layer_period"))
        )
        if unread:
            raise InvalidArgumentError(
                f"model {where}: field {unread[0]!r} (model_type {model_type!r}) describes state layers kvsim "
                "does not read for this model type (it reads Qwen3-Next's, Qwen3.5's, Jamba's, Nemotron-H's, "
                "Granite 4.0-H's and Kimi-Linear's); give the layers explicitly (kvsim.models.Model(layers=...))"
            )
    # (Nemotron-H's and Granite 4.0-H's layer lists name blocks, not caches: read by their own readers below)
    types = None if model_type in ("nemotron_h", "granitemoehybrid") else cfg.get("layer_types")
    if model_type in ("cohere2", "cohere2_moe") and window is not None:
        # vLLM 0.33.0's commandr.py and cohere2_moe.py: a Cohere sliding layer sees `sliding_window` + 1
        # tokens, and its KV cache keeps them.
        window += 1
    if types is None and model_type in ("cohere2", "exaone4"):
        types = _pattern_layer_types(cfg, model_type, num_layers, where, field_int)
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers:
            raise InvalidArgumentError(
                f"model {where}: 'layer_types' must list the {num_layers} layers' types"
            )
        out = []
        for t in types:
            kind = _HF_LAYER_TYPES.get(t) if isinstance(t, str) else None
            if kind is None:
                raise InvalidArgumentError(
                    f"model {where}: layer type {t!r} of 'layer_types' is not one kvsim models "
                    f"({', '.join(sorted(_HF_LAYER_TYPES))})"
                )
            if kind == "sliding_window":
                out.append(sliding())
            elif kind == "chunked_local":
                out.append(Layer("chunked_local", field_window("attention_chunk_size")))
            elif kind == "mamba":
                if state is None:
                    raise InvalidArgumentError(
                        f"model {where}: {t!r} layers, but no state-layer fields kvsim reads "
                        "(Qwen3-Next's linear_*; Kimi's linear_attn_config)"
                    )
                out.append(Layer("mamba", state=state))
            else:
                out.append(FULL)
        return _trim(out)
    n = num_layers
    if model_type in ("gemma3", "gemma3_text", "gemma2"):
        pattern = 2 if model_type == "gemma2" else field_int("sliding_window_pattern", 6, least=1)
        return _trim([sliding() if (i + 1) % pattern else FULL for i in range(n)])
    if model_type == "gpt_oss":  # vLLM's gpt_oss.py: even layers slide
        return _trim([sliding() if i % 2 == 0 else FULL for i in range(n)])
    if model_type in ("llama4", "llama4_text"):
        chunk = cfg.get("attention_chunk_size")
        nope = cfg.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(n)]
        if (
            not isinstance(nope, list)
            or len(nope) != n
            or any(r not in (0, 1) or isinstance(r, float) for r in nope)
        ):
            raise InvalidArgumentError(
                f"model {where}: 'no_rope_layers' must list the {n} layers, each 1 (RoPE) or 0 (NoPE)"
            )
        if not chunk:
            return ()
        return _trim(
            [Layer("chunked_local", field_window("attention_chunk_size")) if r else FULL for r in nope]
        )
    if (
        state is not None
        and model_type not in ("qwen3_next", "kimi_linear", "jamba", "nemotron_h", "granitemoehybrid")
        and not any(cfg.get(k) is not None for k in ("layers_block_type", "hybrid_override_pattern"))
    ):
        # (Qwen3-Next's state fields under another model type, without `layer_types`: every layer ran as
        # full attention, the fields unread)
        raise InvalidArgumentError(
            f"model {where}: field 'linear_num_value_heads' (Qwen3-Next's state layers) under model_type "
            f"{model_type!r} without 'layer_types': which layers keep a state is not known; give "
            "'layer_types' or model_type 'qwen3_next'"
        )
    if model_type.startswith("qwen2") or (model_type.startswith("qwen3") and model_type != "qwen3_next"):
        if not cfg.get("use_sliding_window"):
            return ()
        first = field_int("max_window_layers", n)
        return _trim([sliding() if i >= first else FULL for i in range(n)])
    if model_type == "qwen3_next":
        interval = full_attention_interval(cfg, where)
        assert state is not None
        return _trim([Layer("mamba", state=state) if (i + 1) % interval else FULL for i in range(n)])
    if model_type == "jamba":
        assert state is not None
        attn = jamba_attention_layers(cfg, n, where)
        return _trim([FULL if a else Layer("mamba", state=state) for a in attn])
    if model_type == "nemotron_h":
        assert state is not None
        # (vLLM's NemotronHAttention gives each attention layer `sliding_window` as its own window)
        attention = sliding() if window is not None else FULL
        # (an MLP or MoE block has no attention: no cache, no attention in the roofline; it was `shared`,
        # which the roofline reads as a layer attending to another's keys, as Gemma 4's KV-shared layers do)
        kinds = {"M": Layer("mamba", state=state), "*": attention, "-": Layer("none"), "E": Layer("none")}
        return _trim([kinds[c] for c in nemotron_h_pattern(cfg, n, where)])
    if model_type == "granitemoehybrid":
        assert state is not None
        return _trim(
            [Layer("mamba", state=state) if m else FULL for m in granite_layer_is_mamba(cfg, n, where)]
        )
    if model_type == "kimi_linear":
        kda = kimi_linear_attention(cfg, n, where)[3]  # 1-based (vLLM's KimiLinearConfig.is_kda_layer)
        assert state is not None
        return _trim([Layer("mamba", state=state) if i + 1 in kda else FULL for i in range(n)])
    for key in ("attn_type_list", "layers_block_type", "linear_attn_config", "hybrid_override_pattern"):
        if cfg.get(key) is not None:
            raise InvalidArgumentError(
                f"model {where}: field {key!r} (model_type {model_type!r}) names layer kinds kvsim does not "
                "read for this model type; give the layers explicitly (kvsim.models.Model(layers=...))"
            )
    if window is not None:  # vLLM: CacheConfig.sliding_window for every layer (Mistral v0.1)
        return tuple(sliding() for _ in range(n))
    if cfg.get("attention_chunk_size"):
        raise InvalidArgumentError(
            f"model {where}: field 'attention_chunk_size' without 'layer_types' or Llama 4's "
            "'no_rope_layers': which layers are local is not known"
        )
    return ()


def _refuse_unread_layers(cfg: dict[str, Any], model_type: str, where: str) -> None:
    """Refuses by name the configs whose layers vLLM 0.33.0 builds from fields kvsim does not read (it read
    them as plain attention, silently): per-layer `block_configs` on a model type other than Nemotron-NAS's
    (`nemotron-nas`, read by `kvsim.model.nemotron_nas`), `hybrid_layer_pattern` on a model type other than
    MiMo-V2-Flash's (`mimo_v2_flash`, read by `_mimo_v2_layers`), MiniMax-M3's `sparse_attention_config` on a
    model type other than MiniMax-M3's (`MINIMAX_M3_TYPES`, read by `_minimax_m3_layers`: an index key cache on
    its sparse layers) and DeepSeek-V3.2's indexer key cache (`index_topk`: `DeepseekV32IndexerCache` in
    `deepseek_v2.py`, 132 more bytes a token a layer, in blocks of 64) on a model type other than `DSA_TYPES`."""
    if cfg.get("block_configs") is not None:
        raise InvalidArgumentError(
            f"model {where}: field 'block_configs' (per-layer blocks) is read for Nemotron-NAS only "
            f"(model_type 'nemotron-nas'), not for model_type {model_type!r}: its layers are not modelled"
        )
    if cfg.get("hybrid_layer_pattern") is not None:
        raise InvalidArgumentError(
            f"model {where}: field 'hybrid_layer_pattern' (MiMo-V2's sliding-window layers, each with its own "
            f"heads and head widths: vLLM's mimo_v2.py) is read for MiMo-V2-Flash only (model_type "
            f"'mimo_v2_flash'), not for model_type {model_type!r}: its layers are not modelled"
        )
    sparse = cfg.get("sparse_attention_config")
    freq = sparse.get("sparse_attention_freq") if isinstance(sparse, dict) else None
    # (a value not a list, a number or a string: not a list of dense layers' zeros, refused as sparse layers)
    if model_type not in MINIMAX_M3_TYPES and freq is not None and (not isinstance(freq, list) or any(freq)):
        raise InvalidArgumentError(
            f"model {where}: field 'sparse_attention_config' (MiniMax-M3's block-sparse attention) is read for "
            f"MiniMax-M3 only (model_type {', '.join(map(repr, sorted(MINIMAX_M3_TYPES)))}), not for model_type "
            f"{model_type!r}: its sparse layers' index key cache (`MiniMaxM3IndexerCache`, vLLM's "
            "models/minimax_m3/common/indexer.py) and top-k block reads are not read, and kvsim would size the "
            "model as plain attention"
        )
    if cfg.get("index_topk") is not None and model_type not in DSA_TYPES:
        raise InvalidArgumentError(
            f"model {where}: field 'index_topk' (model_type {model_type!r}, DeepSeek's sparse attention) is "
            "modelled only for DeepSeek-V3.2 ('deepseek_v32') and GLM-5 ('glm_moe_dsa'): this model's indexer "
            "caches are not read"
        )


def _pattern_layer_types(
    cfg: dict[str, Any], model_type: str, n: int, where: str, field_int: Any
) -> list[str]:
    """The `layer_types` transformers' `Cohere2Config` and `Exaone4Config` derive when a checkpoint has
    none, which vLLM 0.33.0's `commandr.py` and `exaone4.py` read: layer i slides unless i + 1 is a multiple
    of `sliding_window_pattern` (4 when absent: three local layers to one global)."""
    pattern = cfg.get("sliding_window_pattern", 4)
    if isinstance(pattern, str):
        raise InvalidArgumentError(
            f"model {where}: field 'sliding_window_pattern' {pattern!r} (model_type {model_type!r}) is a "
            "string kvsim does not read; give 'layer_types'"
        )
    pattern = field_int("sliding_window_pattern", 4, least=1)
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]


# The model types kvsim reads as vLLM 0.33.0's `mimo_v2.py` builds them (MiMoV2FlashForCausalLM).
MIMO_V2_TYPES = frozenset({"mimo_v2_flash"})


def _mimo_v2_layers(
    cfg: dict[str, Any], n: int, where: str, field_int: Any, field_window: Any
) -> tuple[Layer, ...]:
    """MiMo-V2-Flash's layers as vLLM 0.33.0's `mimo_v2.py` builds them (`MiMoV2FlashDecoderLayer`,
    `MiMoV2Attention`): layer i slides when `hybrid_layer_pattern[i]` is 1 (`is_compressed_softmax_layer`),
    over `sliding_window_size` tokens with `swa_num_key_value_heads` KV heads, K heads of `swa_head_dim`
    and V heads of `swa_v_head_dim` (`swa_head_dim` when absent); else full attention with
    `num_key_value_heads`, `head_dim` and `v_head_dim` (`head_dim` when absent). The model sets
    `cache_config.sliding_window` to None, so the full layers keep every token whatever the config's
    `sliding_window`; its `attention_chunk_size` is read by no layer. The sliding layers' attention sinks
    are learned per-head logits (`add_swa_attention_sink_bias`): weights, no cached token.

    Refused: a pattern that does not list the layers as 0s and 1s; `swa_num_attention_heads` other than
    `num_attention_heads` (kvsim prices one attention-head count a model: the roofline's scores, the
    activations; the weights read each layer's own).
    """
    pattern = cfg.get("hybrid_layer_pattern")
    if (
        not isinstance(pattern, list)
        or len(pattern) != n
        or any(isinstance(x, bool) or x not in (0, 1) for x in pattern)
    ):
        raise InvalidArgumentError(
            f"model {where}: 'hybrid_layer_pattern' must list the {n} layers, each 1 (sliding window) or 0 "
            "(full attention)"
        )
    heads = field_int("num_attention_heads", least=1)
    head = field_int("head_dim", least=1)
    v_head = field_int("v_head_dim", least=1) if cfg.get("v_head_dim") is not None else head
    kv = field_int("num_key_value_heads", least=1)
    full = Layer("full", num_kv_heads=kv, head_dim=head, v_head_dim=v_head)
    if not any(pattern):
        return (full,) * n
    swa_heads = field_int("swa_num_attention_heads", least=1)
    if swa_heads != heads:
        raise InvalidArgumentError(
            f"model {where}: swa_num_attention_heads {swa_heads} differs from num_attention_heads {heads}: "
            "kvsim prices one attention-head count a model (the roofline's attention), not a layer's own"
        )
    swa_kv = field_int("swa_num_key_value_heads", least=1)
    if swa_heads % swa_kv:
        raise InvalidArgumentError(
            f"model {where}: swa_num_attention_heads {swa_heads} is not a multiple of swa_num_key_value_heads "
            f"{swa_kv}"
        )
    swa_head = field_int("swa_head_dim", least=1)
    swa_v = field_int("swa_v_head_dim", least=1) if cfg.get("swa_v_head_dim") is not None else swa_head
    window = field_window("sliding_window_size")
    swa = Layer("sliding_window", window, num_kv_heads=swa_kv, head_dim=swa_head, v_head_dim=swa_v)
    return tuple(swa if x else full for x in pattern)


def _gemma4_layers(
    cfg: dict[str, Any], n: int, where: str, field_int: Any, sliding: Any
) -> tuple[Layer, ...]:
    """Gemma 4's layers as vLLM 0.33.0's `gemma4.py` builds them (`Gemma4Attention`, with the per-layer
    head width and KV heads transformers' `Gemma4TextConfig.per_layer_config` gives):

    - a `sliding_attention` layer: a sliding window of `sliding_window` tokens, `num_key_value_heads` heads
      of `head_dim`;
    - a `full_attention` (global) layer: full attention with heads of `global_head_dim` (`head_dim` when
      absent), `num_global_key_value_heads` of them where `attention_k_eq_v` (else `num_key_value_heads`).
      `attention_k_eq_v` loads the checkpoint's K projection into both the K and V slots of the layer's
      `qkv_proj` (`_gemma4_layer_weights_mapper`): the layer still caches K and V, a plain full-attention
      page;
    - the last `num_kv_shared_layers` layers: `kv_sharing_target_layer_name` is the last earlier layer of
      the same type, so they keep no cache of their own (`shared`).

    Per-layer embeddings (E2B / E4B) keep no cache: their weights are counted in `params_models.gemma4`.
    """
    types = cfg.get("layer_types")
    if not isinstance(types, list) or len(types) != n:
        raise InvalidArgumentError(f"model {where}: Gemma 4's 'layer_types' must list the {n} layers' types")
    head_dim = field_int("head_dim")
    # Absent or None: `head_dim` (vLLM's getattr default); 0 is no head width.
    global_dim = field_int("global_head_dim", least=1) if cfg.get("global_head_dim") is not None else head_dim
    kv = field_int("num_key_value_heads", least=1)
    global_kv = kv
    if cfg.get("attention_k_eq_v") and cfg.get("num_global_key_value_heads") is not None:
        global_kv = field_int("num_global_key_value_heads", least=1)
        heads = cfg.get("num_attention_heads")
        if isinstance(heads, int) and not isinstance(heads, bool) and heads % global_kv:
            # vLLM's Attention: "num_heads (32) is not divisible by num_kv_heads (3)"
            raise InvalidArgumentError(
                f"model {where}: num_attention_heads {heads} is not a multiple of num_global_key_value_heads "
                f"{global_kv}"
            )
    shared = field_int("num_kv_shared_layers", 0) if cfg.get("num_kv_shared_layers") is not None else 0
    first_shared = n - shared
    out: list[Layer] = []
    for i, t in enumerate(types):
        if t not in ("sliding_attention", "full_attention"):
            raise InvalidArgumentError(
                f"model {where}: Gemma 4 layer type {t!r} is not 'sliding_attention' or 'full_attention'"
            )
        if shared and i >= first_shared:
            if t not in types[:first_shared]:
                raise InvalidArgumentError(
                    f"model {where}: KV-shared layer {i} ({t!r}) has no earlier {t!r} layer to read"
                )
            out.append(Layer("shared"))
        elif t == "sliding_attention":
            out.append(Layer("sliding_window", sliding().window, num_kv_heads=kv, head_dim=head_dim))
        else:
            out.append(Layer("full", num_kv_heads=global_kv, head_dim=global_dim))
    return tuple(out)


def _trim(layers: list[Layer]) -> tuple[Layer, ...]:
    """Every layer full attention is `()`, the model's plain form."""
    return () if all(lay is FULL or lay == FULL for lay in layers) else tuple(layers)


def _hf_state(
    cfg: dict[str, Any], model_type: str, num_layers: int, where: str, field_int: Any
) -> MambaState | None:
    """A state layer's shape from a config's fields (vLLM's `get_mamba_state_shape_from_config` of each
    model, `vllm/model_executor/models/`), or None for a model without state layers. Its sizes (heads,
    widths, a convolution's kernel) are whole numbers of at least 1."""
    if model_type == "qwen3_next" or cfg.get("linear_num_value_heads") is not None:
        nk, nv = (
            field_int("linear_num_key_heads", least=1, most=STATE_DIM_MAX),
            field_int("linear_num_value_heads", least=1, most=STATE_DIM_MAX),
        )
        hk, hv = (
            field_int("linear_key_head_dim", least=1, most=STATE_DIM_MAX),
            field_int("linear_value_head_dim", least=1, most=STATE_DIM_MAX),
        )
        # gated_delta_net_state_shape: conv (hk·nk·2 + hv·nv, kernel − 1), temporal (nv, hv, hk). Qwen3.5
        # keeps the temporal state in its config's `mamba_ssm_dtype` (vLLM's
        # Qwen3_5ForConditionalGenerationConfig sets mamba_ssm_cache_dtype from it when left 'auto');
        # Qwen3-Next in the model's dtype.
        ssm_dtype = cfg.get("mamba_ssm_dtype") if model_type.startswith("qwen3_5") else None
        ssm_bits = {None: 0, "float32": 32, "bfloat16": 16, "float16": 16}.get(ssm_dtype)
        if ssm_bits is None:
            raise InvalidArgumentError(
                f"model {where}: field 'mamba_ssm_dtype' {ssm_dtype!r} is not float32, bfloat16 or float16"
            )
        return MambaState(
            conv_channels=hk * nk * 2 + hv * nv,
            conv_width=field_int("linear_conv_kernel_dim", 4, least=1, most=STATE_DIM_MAX) - 1,
            ssm_heads=nv,
            ssm_per_head=hv * hk,
            ssm_bits=ssm_bits,
            checkpoint_blocks=1,  # (on FlashInfer's prefill kernel only: `layers.gdn_flashinfer`)
            gdn_head_k_dim=hk,
        )
    dims = mamba_dims(cfg, model_type, where)
    if dims is not None and model_type == "jamba":
        # mamba1_state_shape: conv (expand·hidden, d_conv − 1), temporal (expand·hidden, d_state).
        return MambaState(
            conv_channels=dims.inner,
            conv_width=dims.kernel - 1,
            ssm_heads=dims.inner,
            ssm_per_head=dims.state,
        )
    if dims is not None:
        # mamba2_state_shape: conv (heads·head_dim + 2·n_groups·state, conv_kernel − 1), temporal
        # (heads, head_dim, state) (Granite 4.0-H: heads·head_dim is expand·hidden). Granite keeps both
        # states in the model's dtype (mamba2_state_dtype with the cache dtypes 'auto'); Nemotron-H its SSM
        # state in float32 unless its config says otherwise (vLLM's NemotronHForCausalLMConfig; "auto": the
        # conv state's dtype, the model's: `_mamba_state_dtype`).
        ssm_bits = 0
        if model_type == "nemotron_h":
            ssm_dtype = cfg.get("mamba_ssm_cache_dtype", "float32")
            ssm_bits = {"float32": 32, "bfloat16": 16, "float16": 16, "auto": 0}.get(str(ssm_dtype), -1)
            if ssm_bits < 0 or not isinstance(ssm_dtype, str):
                raise InvalidArgumentError(
                    f"model {where}: field 'mamba_ssm_cache_dtype' {ssm_dtype!r} is not auto, float32, bfloat16 "
                    "or float16"
                )
        return MambaState(
            conv_channels=dims.inner,
            conv_width=dims.kernel - 1,
            ssm_heads=dims.heads,
            ssm_per_head=dims.head_dim * dims.state,
            mamba2_groups=dims.groups,
            mamba2_state_size=dims.state,
            ssm_bits=ssm_bits,
            checkpoint_blocks=1,
        )
    if model_type == "kimi_linear":
        heads, head_dim, kernel, _ = kimi_linear_attention(cfg, num_layers, where)
        # kda_state_shape: conv (3·heads·head_dim, kernel − 1), recurrent (heads, head_dim, head_dim) in
        # float32 (MambaStateDtypeCalculator.kda_state_dtype with "auto"); Kimi-K3's layer registers the same
        # shapes. Its prefill runs on FlashKDA (`resolve_kda_prefill_backend`, `nvidia/kda.py`) where the
        # gate is bounded, the heads 128 wide and the activations bfloat16 (on GPUs of compute capability 9,
        # 10 or 12: `layers.kda_flashkda`), which exports prefill checkpoints on a 16-token grid
        # (`kda_checkpoint.py`): one checkpoint block a request (`num_prefill_checkpoint_blocks`).
        dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
        flashkda = (
            kimi_full_rank_gate(cfg)
            and cfg["linear_attn_config"].get("gate_lower_bound") is not None
            and head_dim == 128
            and dtype == "bfloat16"
        )
        return MambaState(
            conv_channels=3 * heads * head_dim,
            conv_width=kernel - 1,
            ssm_heads=heads,
            ssm_per_head=head_dim * head_dim,
            ssm_bits=32,
            checkpoint_blocks=1 if flashkda else 0,
            kda_checkpoint_grid=FLASHKDA_CHECKPOINT_ALIGNMENT if flashkda else 0,
        )
    return None


__all__ = [
    "MIMO_V2_TYPES",
    "full_attention_interval",
    "granite_layer_is_mamba",
    "jamba_attention_layers",
    "jamba_period",
    "kimi_full_rank_gate",
    "kimi_linear_attention",
    "layers_from_hf_config",
    "nemotron_h_pattern",
]
