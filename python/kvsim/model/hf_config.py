"""A `Model` from a Hugging Face `config.json`: the local hub cache, the fields read, the checks.

`from_hf_config` reads a file (or the folder holding one), `cached_config` finds a hub id's file in the
local Hugging Face cache (nothing is downloaded); `_from_dict` is the one reader every preset of the
catalogue goes through too (`kvsim.model.catalogue`), so a preset and its checkpoint's config give the same
answers. Also reachable as `kvsim.model.models.from_hf_config` and friends, where they lived first.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.architecture import Model
from kvsim.model.dsa import MINIMAX_M3_TYPES, minimax_m3_schema
from kvsim.model.dtypes import HF_DTYPES, dtype_bits
from kvsim.model.encoders import Tower
from kvsim.model.hf_layers import layers_from_hf_config
from kvsim.model.kv_dtype_values import nvfp4_refusal
from kvsim.model.nemotron_nas import MODEL_TYPE as NAS_TYPE
from kvsim.model.nemotron_nas import first_kv_heads, nas_blocks
from kvsim.model.releases import LATEST
from kvsim.model.releases import version as release_version
from kvsim.model.rope import LEGACY_ROPE_NAMES

if TYPE_CHECKING:
    from kvsim.model.breakdown import Breakdown
    from kvsim.model.quant_format import Quantization

# The most decoder layers a config may state (the largest served models have a few hundred).
MAX_LAYERS = 65_536

_HF_CACHE: dict[tuple[str, float, float | None, str | None, str | None, str], Model] = {}


def hf_cache_dir() -> Path:
    """Where the Hugging Face hub keeps downloaded repositories: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
    `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub` (huggingface_hub's own order)."""
    import os

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _is_hub_id(text: str) -> bool:
    """`org/name` as the Hugging Face hub spells a repository (one slash, no path-like parts)."""
    import re

    return re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", text) is not None and ".." not in text


def cached_config(repo_id: str) -> Path | None:
    """The `config.json` of hub repository `repo_id` in the local Hugging Face cache, or None: the snapshot
    `refs/main` names, else the most recent snapshot holding one. Nothing is downloaded."""
    repo = hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    try:
        ref = (repo / "refs" / "main").read_text().strip()
    except OSError:
        ref = ""
    if ref and (snapshots / ref / "config.json").is_file():
        return snapshots / ref / "config.json"
    try:
        found = [d / "config.json" for d in snapshots.iterdir() if (d / "config.json").is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def from_hf_config(
    path: str | Path, name: str | None = None, quantization: str | None = None, release: str = LATEST
) -> Model:
    """A `Model` from a Hugging Face `config.json` (a file, or a folder holding one).

    Read: `num_hidden_layers`, `hidden_size`, `num_attention_heads`, `num_key_value_heads` (or vLLM's other
    names for it, with Falcon's and ChatGLM's rules: `_kv_heads`; default: the attention heads; `multi_query`
    gives 1), `head_dim` (default hidden / heads), `intermediate_size`
    (`ffn_dim` for OPT), `vocab_size`, `max_position_embeddings`, `torch_dtype` (or `dtype`), MLA's
    `kv_lora_rank` + `qk_rope_head_dim` (DeepSeek-V2/V3) with its `q_lora_rank`, `qk_nope_head_dim` and
    `v_head_dim`, and `quantization_config` (`kvsim.model.quant`:
    fp8, MXFP4, NVFP4, AWQ, GPTQ, compressed-tensors). The parameter count is not in a config: it is
    derived from these fields (`kvsim.model.params`: embeddings, tied or not; attention projections, MLA's
    low-rank ones included; a gated MLP for Llama-like models, two matrices for OPT/GPT; mixture-of-experts
    layers from `n_routed_experts` / `num_local_experts` / `num_experts`, `moe_intermediate_size`, shared
    experts, `first_k_dense_replace`, `decoder_sparse_step`, `moe_layers`; active parameters from
    `num_experts_per_tok`). A multimodal config's `text_config` is read (the vision tower is not counted).
    The model's name is `name`, else the path. `quantization` is vLLM's `--quantization`. `release` is the
    vLLM release whose reading is followed where releases read a field differently (`kvsim.model.releases`:
    ModelOpt's `weight_scale_encoding`, MiniMax-M3's legacy sparse fields); the latest by default.

    Raises:
        InvalidArgumentError: naming the file and the missing, invalid or unmodelled field.
    """
    import json

    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    side = p.parent / "hf_quant_config.json"
    try:
        stamp = p.stat().st_mtime
        # (the file beside it is read too: a change to it, or its removal, is a new model)
        side_stamp = side.stat().st_mtime if side.is_file() else None
    except OSError as exc:
        raise InvalidArgumentError(f"model {str(path)!r}: cannot read {p}: {exc.strerror}") from None
    release_version(release)  # (refused by name before the file is read; the model records it as given)
    key = (str(p), stamp, side_stamp, name, quantization, release)
    if key in _HF_CACHE:
        return _HF_CACHE[key]
    try:
        cfg = json.loads(p.read_bytes())
    # (ValueError: an integer literal past Python's 4,300 digits; RecursionError: arrays nested too deep)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"model {str(path)!r}: {p} is not a JSON config: {exc}") from None
    if not isinstance(cfg, dict):
        raise InvalidArgumentError(f"model {str(path)!r}: {p} does not hold a JSON object")
    if cfg.get("quantization_config") is None and side.is_file():
        # ModelOpt 0.29 and before keep the quantization in this file beside config.json, which vLLM 0.33.0
        # reads when config.json has none (`vllm/transformers_utils/config.py`)
        try:
            quant_cfg = json.loads(side.read_bytes())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise InvalidArgumentError(f"model {str(path)!r}: {side} is not a JSON config: {exc}") from None
        cfg = {**cfg, "quantization_config": quant_cfg}
        try:
            model = _from_dict(cfg, name or str(path), str(path), str(p), quantization, release)
        except InvalidArgumentError as e:
            # (its fields are named as vLLM names them once read, `quantization_config.*`: say where they are)
            if "quantization_config" not in str(e):
                raise
            raise InvalidArgumentError(
                f"{e} (quantization_config read from {side}: its fields sit under 'quantization' there)"
            ) from None
    else:
        model = _from_dict(cfg, name or str(path), str(path), str(p), quantization, release)
    _HF_CACHE[key] = model
    return model


# The config.json fields a Model is built from (kept in `Model.config_json` so it can be priced again).
_KEPT_FIELDS = (
    "model_type",
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "hidden_size",
    "n_embd",
    "d_model",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "n_head_kv",
    "multi_query",
    "new_decoder_architecture",
    "num_kv_heads",
    "multi_query_group_num",
    "multi_query_attention",
    "num_attention_groups",
    "head_dim",
    "intermediate_size",
    "ffn_dim",
    "n_inner",
    "intermediate_size_mlp",
    "vocab_size",
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
    "torch_dtype",
    "dtype",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "q_lora_rank",
    "qk_nope_head_dim",
    "v_head_dim",
    "tie_word_embeddings",
    "attention_bias",
    "bias",  # (Nemotron-NAS's attention biases: `kvsim.model.nemotron_nas`)
    "qkv_bias",
    "hidden_act",
    "n_routed_experts",
    "num_local_experts",
    "num_experts",
    "moe_intermediate_size",
    "n_shared_experts",
    "num_shared_experts",
    "shared_expert_intermediate_size",
    "num_experts_per_tok",
    "experts_per_token",
    "num_experts_per_token",
    "model_max_length",
    "linear_attn_config",
    "min_moe_intermediate_per_partition",  # Kimi-Linear's expert padding under TP (`kvsim.model.shard`)
    # Kimi-K3's MLA, latent MoE and attention residuals (`kvsim.model.params_kimi`)
    "mla_use_nope",
    "mla_use_output_gate",
    "routed_expert_hidden_size",
    "latent_moe_use_norm",
    "attn_res_block_size",
    "first_k_dense_replace",
    "decoder_sparse_step",
    "interleave_moe_layer_step",
    "moe_layers",
    "moe_layer_freq",
    "mlp_only_layers",
    "topk_method",
    "quantization_config",
    # The layers' kinds and state shapes (`layers_from_hf_config`, `params_models.gated_delta_net`).
    "layer_types",
    "sliding_window",
    "sliding_window_pattern",
    "block_configs",
    "index_topk",
    "index_topk_freq",
    "index_skip_topk_offset",
    "index_topk_pattern",
    "indexer_rope_interleave",
    "attention_chunk_size",
    "no_rope_layers",
    # RoPE (the context `_rope_scaled` derives, the rotary caches `kvsim.model.rope` sizes).
    "rope_scaling",
    "rope_parameters",
    "original_max_position_embeddings",
    "rope_theta",
    "rope_local_base_freq",
    "partial_rotary_factor",
    "rotary_dim",
    "use_sliding_window",
    "max_window_layers",
    "full_attention_interval",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "attn_output_gate",
    "mamba_ssm_dtype",
    "attn_type_list",
    "compress_ratios",
    # Gemma 4 (`hf_layers._gemma4_layers`, `params_models.gemma4`).
    "global_head_dim",
    "num_global_key_value_heads",
    "attention_k_eq_v",
    "num_kv_shared_layers",
    "hidden_size_per_layer_input",
    "vocab_size_per_layer_input",
    "use_double_wide_mlp",
    "expert_intermediate_size",
    "top_k_experts",
    # MiMo-V2-Flash (`hf_layers._mimo_v2_layers`, `params_models.mimo_v2_attention`).
    "hybrid_layer_pattern",
    "sliding_window_size",
    "swa_num_attention_heads",
    "swa_num_key_value_heads",
    "swa_head_dim",
    "swa_v_head_dim",
    "add_swa_attention_sink_bias",
    # DeepSeek-V4 (`hf_sparse.deepseek_v4_layers`, `params_models.deepseek_v4`, `quant.deepseek_v4`).
    "o_groups",
    "o_lora_rank",
    "index_n_heads",
    "index_head_dim",
    "hc_mult",
    "num_hash_layers",
    "expert_dtype",
    # The Mamba hybrids (`hf_layers`, `kvsim.model.params_state`): Jamba, Nemotron-H, Granite 4.0-H.
    "attn_layer_period",
    "attn_layer_offset",
    "expert_layer_period",
    "expert_layer_offset",
    "mamba_expand",
    "mamba_d_state",
    "mamba_d_conv",
    "mamba_dt_rank",
    "mamba_conv_bias",
    "mamba_proj_bias",
    "mamba_n_heads",
    "mamba_d_head",
    "mamba_n_groups",
    "mamba_num_heads",
    "mamba_head_dim",
    "mamba_ssm_cache_dtype",
    "n_groups",
    "ssm_state_size",
    "conv_kernel",
    "use_conv_bias",
    "use_bias",
    "mlp_bias",
    "hybrid_override_pattern",
    "layers_block_type",
    "moe_latent_size",
    "moe_shared_expert_intermediate_size",
    "shared_intermediate_size",
    "position_embedding_type",
    # MiniMax-M3's sparse layers and their indexer (`kvsim.model.dsa.minimax_m3_sparse`), its dense layers'
    # MLP width and router bias (`kvsim.model.params`).
    "sparse_attention_config",
    "dense_intermediate_size",
    "use_routing_bias",
)


# RoPE types whose `factor` vLLM does not apply to the derived context (YaRN variants and Llama 3's leave
# `max_position_embeddings` already scaled; `vllm/config/model.py` `_get_and_verify_max_len`, 0.33.0).
# A legacy name counts as the type vLLM renames it to first (`rope.LEGACY_ROPE_NAMES`: `su` is longrope,
# `telechat3-yarn` yarn).
_ROPE_UNSCALED = ("longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def _kv_heads(cfg: dict[str, Any], heads: int, pick: Any) -> int:
    """The KV heads vLLM 0.33.0's attention layers cache (before tensor parallelism): Falcon's
    (`falcon.py`) its `num_kv_heads` under `new_decoder_architecture`, else 1 under `multi_query`, else
    every head; ChatGLM's (`chatglm.py`) `multi_query_group_num` under `multi_query_attention`, else every
    head; any other model the first of vLLM's names for it (`CONFIG_FIELD_ALIASES["total_num_kv_heads"]`,
    vllm/transformers_utils/config.py: `n_head_kv`, `num_kv_heads`, `num_key_value_heads`,
    `multi_query_group_num`, `num_attention_groups`), else 1 under `multi_query` (GPTBigCode), else every
    head."""
    kind = str(cfg.get("model_type", ""))
    if kind == "falcon":
        if cfg.get("new_decoder_architecture"):
            return int(pick("num_kv_heads", "n_head_kv", default=heads, least=1))
        return 1 if cfg.get("multi_query") else heads
    if kind == "chatglm":
        return int(pick("multi_query_group_num", least=1)) if cfg.get("multi_query_attention") else heads
    return int(
        pick(
            "n_head_kv",
            "num_kv_heads",
            "num_key_value_heads",
            "multi_query_group_num",
            "num_attention_groups",
            default=1 if cfg.get("multi_query") else heads,
            least=1,
        )
    )


# The model types vLLM 0.33.0 runs as MLA when they state a `kv_lora_rank` (`is_deepseek_mla`,
# vllm/transformers_utils/model_arch_config_convertor.py; DeepSeek-V4 by its compressed layers, read apart).
_MLA_TYPES = frozenset(
    {
        "axk1",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "deepseek_v4",
        "deepseek_v41",
        "dots3_note",
        "deepseek_mtp",
        "k3_dspark",
        "glm5_next",
        "glm5_next_text",
        "glm_moe_dsa",
        "glm4_moe_lite",
        "glm4_moe_lite_mtp",
        "kimi_k2",
        "kimi_linear",
        "longcat_flash",
        "pangu_ultra_moe",
        "pangu_ultra_moe_mtp",
        "bailing_hybrid",
        "bailing_hybrid_mtp",
        "bailing_hybrid_v3_mtp",
        "hy_v4",
        "hy_v4_mtp",
    }
)


def _cache_heads(
    cfg: dict[str, Any], kv_lora: int, rope: int, head_dim: int, pick: Any, where: str
) -> tuple[int, int, int]:
    """(the MLA latent's width, its RoPE width, the head width) that the attention layers cache. A
    `kv_lora_rank` is an MLA latent only for vLLM 0.33.0's MLA model types (`_MLA_TYPES`); MiniCPM3's
    low-rank attention caches every head's K and V at `qk_nope_head_dim + qk_rope_head_dim`
    (`minicpm3.py`: an `Attention` of that head size, V padded to it); another model type with one is
    refused by name (vLLM reads its cache from its own model file, which kvsim does not know)."""
    kind = str(cfg.get("model_type", ""))
    if not kv_lora or kind in _MLA_TYPES:
        return kv_lora, rope, head_dim
    if kind == "minicpm3":
        nope = pick("qk_nope_head_dim", least=1)
        return 0, 0, int(nope) + int(pick("qk_rope_head_dim", least=1))
    if kind == "mistral_large_4":
        # (0.34.0 adds it to `is_deepseek_mla`'s list: Mistral Large 4, MLA with a DSA indexer)
        raise InvalidArgumentError(
            f"model {where!r}: model_type 'mistral_large_4' (Mistral Large 4, new in vLLM 0.34.0: MLA with "
            "a DSA indexer) is not modelled"
        )
    raise InvalidArgumentError(
        f"model {where!r}: field 'kv_lora_rank' on model_type {kind!r}: vLLM 0.33.0 and 0.34.0 run MLA only "
        "for DeepSeek-style model types (deepseek_v2, deepseek_v3, kimi_k2, ...), and kvsim does not know what "
        "this model's attention caches"
    )


# The keys a config states its context by (vLLM 0.33.0's `derive_max_model_len_and_key`, its order).
_CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


def _rope_scaled(cfg: dict[str, Any], max_len: int, where: str) -> tuple[int, int]:
    """The context vLLM 0.33.0 derives from `max_len` and the config's RoPE scaling (`rope_scaling`, or
    transformers 5's `rope_parameters`, a dict or one per layer type), as (the longest `max_model_len` it
    accepts, its default): times the scaling factor of a type other than `_ROPE_UNSCALED` (`linear`,
    `dynamic`; not for Gemma 3, whose context is already scaled); a LongRoPE model defaults to its
    `original_max_position_embeddings` and accepts up to the derived context."""
    rope = cfg.get("rope_parameters", cfg.get("rope_scaling"))
    if rope is None:
        return max_len, max_len
    if not isinstance(rope, dict):
        raise InvalidArgumentError(f"model {where!r}: field 'rope_scaling' {rope!r} must be an object")
    nested = rope and all(isinstance(v, dict) for v in rope.values())
    params = [p for p in rope.values() if p] if nested else ([rope] if rope else [])
    factor: Any = 1.0
    longrope = False
    for p in params:
        kind = p.get("rope_type", p.get("type", "default"))
        if kind == "":  # (an empty name is no type: refused, as rope.py refuses it, not scaled by its factor)
            raise InvalidArgumentError(
                f"model {where!r}: field 'rope_scaling.rope_type' is empty; name a rope type ('default' for "
                "unscaled RoPE)"
            )
        if not isinstance(kind, str):
            raise InvalidArgumentError(
                f"model {where!r}: field 'rope_scaling.rope_type' {kind!r} must be a name"
            )
        kind = LEGACY_ROPE_NAMES.get(kind, kind)
        longrope |= kind == "longrope"
        if kind not in _ROPE_UNSCALED:
            factor = p.get("factor", factor)
    if factor is None:
        factor = 1.0  # (vLLM falls back to 1 for a null factor)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor > 0 or factor > 2**20:
        raise InvalidArgumentError(
            f"model {where!r}: field 'rope_scaling.factor' {factor!r} must be a positive number"
        )
    limit = max_len if "gemma3" in str(cfg.get("model_type", "")) else max(1, int(max_len * factor))
    if not longrope:
        return limit, limit
    original = cfg.get("original_max_position_embeddings", limit)
    if isinstance(original, bool) or not isinstance(original, int) or original < 1:
        raise InvalidArgumentError(
            f"model {where!r}: field 'original_max_position_embeddings' {original!r} must be a whole "
            "number of at least 1"
        )
    return limit, original


def _from_dict(
    cfg: dict[str, Any], name: str, where: str, source: str, quantization: str | None, release: str = LATEST
) -> Model:
    """The `Model` of config fields `cfg` (see `from_hf_config`) as vLLM `release` reads them; `where` names it
    in errors."""
    import json

    from kvsim.model import quant, served
    from kvsim.model.params import fused_parts_refusal, param_breakdown
    from kvsim.model.rope import cache_bytes as rope_cache_bytes

    path = where
    p = source
    release_version(release)  # (a release that is no release number: refused by name, whatever the model)
    try:
        refusal = served.refusal(cfg)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"model {str(path)!r}: {exc}") from None
    if refusal:
        raise InvalidArgumentError(f"model {str(path)!r}: {refusal}")
    encoders = tuple(e for e in ("vision", "audio") if isinstance(cfg.get(f"{e}_config"), dict))
    wrapper = cfg
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the language model inside
        cfg = {**cfg, **cfg["text_config"]}
    if cfg.get("model_type") in MINIMAX_M3_TYPES:  # (transformers 5's schema read as vLLM 0.34.0 reads it)
        cfg = minimax_m3_schema(cfg, repr(str(path)), release)
        sparse_refusal = served.transformers_sparse_refusal(wrapper, cfg)
        if sparse_refusal:
            raise InvalidArgumentError(f"model {str(path)!r}: {sparse_refusal}")

    def pick(*keys: str, default: Any = None, required: bool = True, least: int = 0) -> Any:
        for k in keys:
            if cfg.get(k) is not None:
                v = cfg[k]
                if isinstance(v, bool) or not isinstance(v, int) or v < least:
                    at_least = f" of at least {least}" if least else ""
                    raise InvalidArgumentError(
                        f"model {str(path)!r}: field {k!r} {v!r} must be a whole number{at_least}"
                    )
                return v
        if required and default is None:
            raise InvalidArgumentError(f"model {str(path)!r}: {p} has no {' / '.join(map(repr, keys))}")
        return default

    blocks = cfg.get("layers_block_type", cfg.get("layer_types", cfg.get("hybrid_override_pattern")))
    if cfg.get("model_type") == "nemotron_h" and isinstance(blocks, (list, str)) and blocks:
        # transformers' NemotronHConfig derives the layers from its block list and ignores the field
        layers = len(blocks)
    else:
        layers = pick("num_hidden_layers", "n_layer", "num_layers")
    hidden = pick("hidden_size", "n_embd", "d_model")
    heads = pick("num_attention_heads", "n_head")
    if heads < 1 or layers < 1 or hidden < 1:
        raise InvalidArgumentError(f"model {str(path)!r}: layers, hidden size and heads must be at least 1")
    if layers > MAX_LAYERS:
        # (kvsim lists a model's layers one by one: a count no model has is refused, not allocated)
        raise InvalidArgumentError(
            f"model {str(path)!r}: {layers:,} layers is more than kvsim models ({MAX_LAYERS:,})"
        )
    kv_heads = _kv_heads(cfg, heads, pick)
    kv_keys = (
        "n_head_kv",
        "num_kv_heads",
        "num_key_value_heads",
        "multi_query_group_num",
        "num_attention_groups",
    )
    if cfg.get("model_type") in ("jamba", "nemotron_h") and all(cfg.get(k) is None for k in kv_keys):
        kv_heads = 8  # transformers' JambaConfig and NemotronHConfig default (not every head)
    head_dim = pick("head_dim", default=hidden // heads)
    model_type = str(cfg.get("model_type", ""))
    if model_type in ("jamba", "granitemoehybrid"):
        # vLLM 0.33.0's jamba.py and granitemoehybrid.py size their attention heads hidden / heads whatever
        # the config says
        head_dim = hidden // heads
        if head_dim < 1:
            raise InvalidArgumentError(
                f"model {str(path)!r}: hidden_size {hidden} over num_attention_heads {heads} gives heads 0 wide "
                f"({model_type} sizes its attention heads hidden_size // num_attention_heads)"
            )
    elif model_type == "nemotron_h" and cfg.get("head_dim") is None:
        head_dim = 128  # transformers' NemotronHConfig default, which nemotron_h.py reads
    elif cfg.get("head_dim") is None and head_dim < 1:
        # (the Model's own check said "head_dim 0 must be at least 1", naming neither the model nor the fields)
        raise InvalidArgumentError(
            f"model {str(path)!r}: hidden_size {hidden} over num_attention_heads {heads} gives heads 0 wide "
            "(with no head_dim given, vLLM sizes each head hidden_size // num_attention_heads)"
        )
    nas = None
    if model_type == NAS_TYPE:
        # Nemotron-NAS: each layer's KV heads and MLP width from its block (`kvsim.model.nemotron_nas`); the
        # model's KV heads are the first attention layer's, as vLLM 0.33.0 reports them, and its MLP width
        # the widest layer's (what the activations' estimate reads).
        nas = nas_blocks(cfg, layers, heads, hidden, str(path))
        kv_heads = first_kv_heads(nas)
    # (a context, a vocabulary or an MLP of 0 is no model: its context divided the concurrency figure)
    widths = cfg.get("intermediate_size")
    if nas is not None:
        ffn = max((blk.ffn for blk in nas), default=0) or hidden  # (no MLP at all: hidden, unread)
    elif cfg.get("model_type") == "nemotron_h" and isinstance(widths, list):
        # (Nemotron-H's MLP layers may each have their own width, `params_state.nemotron_h`, which checks
        # them; the model's `intermediate_size` is the widest, what the activations' estimate reads)
        ffn = max((w for w in widths if isinstance(w, int) and not isinstance(w, bool)), default=1)
    else:
        # (transformers' defaults where a Mamba hybrid's config omits it; else 4 x hidden)
        default_ffn = {"jamba": 14336, "granitemoehybrid": 11008, "nemotron_h": 21504}.get(
            str(cfg.get("model_type")), 4 * hidden
        )
        ffn = pick("intermediate_size", "ffn_dim", "n_inner", default=default_ffn, least=1)
    vocab = pick("vocab_size", least=1)
    # The context as vLLM 0.33.0 derives it (`ModelArchConfigConvertor.derive_max_model_len_and_key`): the
    # smallest of these keys present, then `model_max_length` in their place when set (Kimi-Linear's config
    # states only it); 2048 when none is (vLLM warns); then the RoPE scaling (`_rope_scaled`). The user's
    # `max_model_len` may not exceed it, nor the wrapper's `model_max_length` when larger
    # (`_get_and_verify_max_len`; `Model.context_limit`).
    # (`model_max_length` is read from the text config alone, as vLLM's `hf_text_config` holds it: a
    # multimodal wrapper's own is not the language model's; the other keys from the merged fields, as the
    # text config's class defaults would give a wrapper's)
    text = wrapper["text_config"] if isinstance(wrapper.get("text_config"), dict) else wrapper
    lengths = {k: pick(k, required=False, least=1) for k in _CONTEXT_KEYS if k != "model_max_length"}
    lengths["model_max_length"] = (
        pick("model_max_length", required=False, least=1) if "model_max_length" in text else None
    )
    present = {k: v for k, v in lengths.items() if v is not None}
    context_key = min(present, key=present.__getitem__) if present else ""
    if lengths["model_max_length"]:
        context_key = "model_max_length"
    max_len = present[context_key] if context_key else 2048
    limit, max_len = _rope_scaled(cfg, max_len, str(path))
    if lengths["model_max_length"] and lengths["model_max_length"] > limit:
        limit = lengths["model_max_length"]
    # (a latent of 0 is no MLA: it ran as ordinary attention; a null one is no MLA, as vLLM reads it)
    kv_lora = pick("kv_lora_rank", default=0, required=False, least=1)
    rope = pick("qk_rope_head_dim", default=0, required=False)
    # What the attention layers cache: an MLA latent only for vLLM's MLA model types; MiniCPM3's low-rank
    # attention caches per-head K and V (`_cache_heads`).
    cache_lora, cache_rope, cache_head_dim = _cache_heads(cfg, kv_lora, rope, head_dim, pick, str(path))
    if not kv_lora and (kv_heads < 1 or heads % kv_heads):
        # Grouped-query attention shares each KV head among heads / kv_heads query heads (transformers
        # and vLLM refuse any other ratio).
        raise InvalidArgumentError(
            f"model {str(path)!r}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
            f"{kv_heads}"
        )
    # Without a dtype vLLM reads the weights' (safetensors metadata), else takes float32, which it serves
    # in bfloat16 (`get_torch_dtype`, `_resolve_auto_dtype`); kvsim reads no weights: bfloat16, two bytes as
    # any 16-bit checkpoint's (gpt-oss's config names none).
    # (only an absent or null field is absent: a false or a 0 is refused below, not taken as bfloat16)
    raw_dtype = cfg.get("torch_dtype")
    if raw_dtype is None:
        raw_dtype = cfg.get("dtype")
    if raw_dtype is None:
        raw_dtype = "bfloat16"
    if not isinstance(raw_dtype, str) or raw_dtype not in HF_DTYPES:
        raise InvalidArgumentError(
            f"model {str(path)!r}: torch_dtype {raw_dtype!r} is not one of {sorted(HF_DTYPES)}"
        )
    dtype = HF_DTYPES[raw_dtype]
    if dtype == "fp32":
        # vLLM 0.33.0 serves a float32 checkpoint in the platform's first supported dtype with `--dtype
        # auto` (`vllm/config/model.py` `_resolve_auto_dtype`, "Downcast for float32 models"): bfloat16 on
        # CUDA GPUs of compute capability 8.0 and up and on ROCm, float16 before (the same two bytes).
        dtype = "bf16"
    towers, uncounted = _towers(wrapper, encoders, hidden, dtype_bits(dtype), str(path))
    checkpoint = quant.from_config(cfg.get("quantization_config"), f"model {str(path)!r}", release=release)
    if cfg.get("model_type") == "deepseek_v4" and checkpoint.method == "fp8":
        checkpoint = quant.deepseek_v4(checkpoint, cfg, f"model {str(path)!r}")
    q = quant.with_flag(checkpoint, quantization, f"model {str(path)!r}")
    # The layers first: their reader checks the fields the weights' reader counts too.
    model_layers = layers_from_hf_config(cfg, layers, str(path), release)
    # (after the layers' reader, which checks the fields the rotary caches read too: head widths, layers)
    rope_bytes = rope_cache_bytes(cfg, head_dim, dtype_bits(dtype), str(path))
    b = param_breakdown(
        cfg, layers, hidden, heads, kv_heads, head_dim, ffn, vocab, kv_lora, rope, pick, str(path)
    )
    q = q.for_model(b)  # (the ignore list read module by module, layer by layer)
    refusal = fused_parts_refusal(b, q.ignored) if q.method else None
    if refusal:
        raise InvalidArgumentError(f"model {str(path)!r}: {refusal}")
    quant.check_groups(q, b, cfg.get("quantization_config"), f"model {str(path)!r}")
    quant.check_moe_scheme(q, b, cfg.get("quantization_config"), f"model {str(path)!r}")
    weight_dtype = dtype
    if q.method:
        # The dtype of the quantized layers; the rest stay in torch_dtype (weight_bytes has the exact sum).
        first = next(iter(q.formats.values()), None)
        if q.modules is not None and q.formats:  # (MIXED_PRECISION: the format of most parameters)
            first = q.formats[max(q.formats, key=b.params)]
        kind = first.kind if first else ""
        weight_dtype = {"fp8": "fp8", "mxfp4": "fp4", "nvfp4": "fp4"}.get(kind, "int4")
        if kind == "int" and first is not None and first.bits == 8:
            weight_dtype = "int8"
    model = Model(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=cache_head_dim,
        intermediate_size=ffn,
        vocab_size=vocab,
        num_params=b.total,
        num_active_params=b.active,
        max_model_len=max_len,
        context_limit=limit,
        context_key=context_key or "default",
        weight_dtype=weight_dtype,
        # The KV cache stays in torch_dtype whatever the weights' quantization, unless the checkpoint
        # quantizes it too (vLLM's --kv-cache-dtype auto then resolves to fp8).
        kv_dtype="fp8" if q.kv_fp8 else "nvfp4" if q.kv_nvfp4 else dtype,
        kv_lora_rank=cache_lora,
        qk_rope_head_dim=cache_rope,
        qk_nope_head_dim=pick("qk_nope_head_dim", default=0, required=False) if cache_lora else 0,
        # (read as the weights read them, `kvsim.model.params`: a null q_lora_rank is none, a missing
        # v_head_dim is head_dim)
        q_lora_rank=pick("q_lora_rank", default=0, required=False) if cache_lora else 0,
        v_head_dim=pick("v_head_dim", default=head_dim, required=False) if cache_lora else 0,
        source=str(p),
        layers=model_layers,
        weight_bytes=q.weight_bytes(b, dtype_bits(dtype)),
        quantization=q.describe() if q.method else "",
        num_experts=b.num_experts,
        experts_per_token=b.experts_per_token,
        expert_ffn=b.expert_ffn,
        config_json=json.dumps({k: cfg[k] for k in _KEPT_FIELDS if k in cfg}, sort_keys=True),
        # (a row-parallel matrix the checkpoint leaves unquantized in every layer holds no quantized share)
        row_inputs=tuple(
            sorted(
                {
                    (g, m.cols, quant.shard_group(q, g) if quantized else 0, quantized)
                    for g, m in b.row_inputs()
                    for quantized in [bool(q.method) and q.quantized(m, b, g) > 0]
                }
            )
        ),
        encoders=encoders,
        towers=towers,
        uncounted=uncounted,
        rope_cache_bytes=rope_bytes,
        mla_absorbed_bytes=mla_absorbed_bytes(b, q, dtype_bits(dtype)),
        release=release,
    )
    why = nvfp4_refusal(model, model.kv_dtype)
    if why is not None:
        # (the checkpoint's NVFP4 KV cache, which vLLM's --kv-cache-dtype auto takes: FlashInfer's limits)
        raise InvalidArgumentError(
            f"{model.name}: the checkpoint quantizes the KV cache to NVFP4 (ModelOpt's kv_cache_quant_algo or "
            f"kv_cache_scheme, which --kv-cache-dtype auto takes), but vLLM 0.34.0 (and 0.33.0) serves no NVFP4 "
            f"KV cache {why}"
        )
    return model


def mla_absorbed_bytes(b: Breakdown, q: Quantization, bits: int) -> int:
    """Bytes of the copy of MLA's `kv_b_proj` vLLM 0.33.0 keeps beside it where the checkpoint quantizes
    it, on the whole model (`kvsim.model.shard.shard` splits it by heads, as `kv_b_proj`): after loading,
    `MLAAttention.process_weights_after_loading` dequantizes `kv_b_proj` into the model's dtype
    (`split_kv_b_proj`, `get_and_maybe_dequant_weights`) and keeps the result as `W_UV` and `W_UK_T` (views of
    one tensor), while `kv_b_proj` itself stays for the prefill (vllm/model_executor/layers/attention/
    mla_attention.py, v0.33.0, lines 408-424, 1270-1277 and 1346-1349; vllm/model_executor/model_loader/
    utils.py line 206 passes `model_config.dtype`). An unquantized `kv_b_proj` (GLM-5, Kimi-K3: the ignore
    list names it) is only cast to its own dtype, `weight.to(out_dtype)`, the same tensor
    (quantization/utils/quant_utils.py lines 531-535): nothing is added. `bits`: the model's dtype."""
    total = 0
    for m in b.matrices["attn"]:
        if m.module != "self_attn.kv_b_proj":
            continue
        for fmt, n in q.layout(b, "attn", m).items():
            if fmt is not None:
                total += m.rows * m.cols * n * bits // 8
    return total


def _towers(
    wrapper: dict[str, Any], encoders: tuple[str, ...], text_hidden: int, bits: int, where: str
) -> tuple[tuple[Tower, ...], tuple[str, ...]]:
    """The towers of `wrapper`'s `encoders` kvsim counts, priced at `bits` a parameter (the checkpoint's
    dtype, in which vLLM loads them), and why each of the others is not counted."""
    import dataclasses as dc

    from kvsim.model.encoders import Uncounted, tower

    counted, why = [], []
    for name in encoders:
        try:
            t = tower(wrapper, name, text_hidden)
        except Uncounted as exc:
            why.append(f"{name}: {exc}")
            continue
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"model {where!r}: {name}_config: {exc}") from None
        counted.append(dc.replace(t, split=t.split * bits // 8, whole=t.whole * bits // 8))
    return tuple(counted), tuple(why)


__all__ = ["cached_config", "from_hf_config", "hf_cache_dir", "mla_absorbed_bytes"]
