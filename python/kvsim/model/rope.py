"""The rotary embeddings' cos/sin caches vLLM 0.33.0 builds when it loads a model.

Each rotary embedding (`vllm/model_executor/layers/rotary_embedding/`, `get_rope`) registers a buffer
`cos_sin_cache` of `rows × width` values, built on the GPU in the model's dtype while the model loads, so
vLLM's "Model loading took X GiB" counts it; layers whose `get_rope` arguments agree share one instance
(`_ROPE_DICT`), and every tensor-parallel rank holds all of them whole. The rows come from the config's
`max_position_embeddings` (never `--max-model-len`), as each class extends them (`rows`): `linear`
multiplies them by its factor, `yarn` and DeepSeek's scalings build `original_max_position_embeddings ×
factor`, `longrope` both lengths, mrope `positions_factor` times them (1 for Qwen3-VL's family, which
passes `mrope_positions_factor` 1 unless video pruning is on; 4 for the others); `default`, `llama3`,
`dynamic` and Gemma 4's `proportional` keep them. The width is `rope_dim`, else `head_dim ×
partial_rotary_factor` (MiniMax's `rotary_dim`), and the whole head for `proportional`.

By architecture (each model file's `get_rope` calls): OPT (learned positions), Kimi-Linear (NoPE latent
attention, KDA), Jamba and Nemotron-H (attention without RoPE) build none, Granite 4.0-H none unless its
`position_embedding_type` is "rope"; DeepSeek-V3.2 and GLM-5 a second one for their sparse attention's
indexer, neox-style unless `indexer_rope_interleave` (one cache where the styles agree); Gemma 3 builds one for its sliding-window layers (`default`, its
`rope_local_base_freq`) and one for its global layers (the config's scaling); Gemma 4 one for each layer
type of `rope_parameters` (the global layers' width their `global_head_dim`); Llama 4 one for its RoPE
layers (none on its NoPE layers); gpt-oss's is float32 (`gpt_oss.py` passes `dtype=torch.float32`);
DeepSeek-V3 and other latent-attention models rotate `qk_rope_head_dim`; DeepSeek-V4 builds a float32 one
for its sliding layers (`max_position_embeddings` rows) and one for its compressed layers
(`original_max_position_embeddings × factor`). A vision tower's own rotary tables are below a megabyte
and not counted.
"""

from __future__ import annotations

import math
from typing import Any

from kvsim.errors import InvalidArgumentError

# Model types that build no rotary embedding (learned positions; NoPE attention: vLLM 0.33.0's jamba.py and
# nemotron_h.py build their attention without one; granitemoehybrid.py only with `position_embedding_type`
# "rope", `cache_bytes`).
NO_ROPE = frozenset({"opt", "kimi_linear", "jamba", "nemotron_h"})

# Rope types whose cache keeps `max_position_embeddings` rows (`dynamic` too: vLLM 0.33.0's
# DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache takes `torch.arange(self.max_position_embeddings)`,
# whatever its comment says of `max_position_embeddings × scaling_factor`; DynamicNTKAlphaRotaryEmbedding the
# same).
_SAME_ROWS = frozenset({"default", "llama3", "dynamic", "proportional", "mrope", "ntk"})

# Every `rope_type` vLLM 0.33.0 builds a cache for: `get_rope`'s branches (`rotary_embedding/__init__.py`; any
# other raises "Unknown RoPE scaling type"), with the legacy names `patch_legacy_rope_type`
# (`transformers_utils/config.py`) renames first: `su` (longrope), `mrope` (default), `telechat3-yarn` (yarn).
# `bailing_mrope`, `openpangu` (mrope) and `mllama4` (a vision tower's) keep `max_position_embeddings` rows.
LEGACY_ROPE_NAMES = {"su": "longrope", "mrope": "default", "telechat3-yarn": "yarn"}
_YARN = frozenset({"yarn", "telechat3-yarn", "deepseek_yarn", "deepseek_llama_scaling"})
KNOWN_ROPE_TYPES = _SAME_ROWS | _YARN | {"linear", "longrope", "su", "bailing_mrope", "openpangu", "mllama4"}


def _checked(params: dict[str, Any], where: str) -> dict[str, Any]:
    """`params` with `rope_type` spelled out, its sizes checked (vLLM's classes would fail on them)."""
    out = dict(params)
    for key in ("rope_type", "type"):
        if out.get(key) == "":  # (no name: not the default, which hf_config's context would not scale)
            raise InvalidArgumentError(
                f"model {where!r}: field {key!r} is empty; name a rope type (vLLM 0.33.0's and 0.34.0's get_rope "
                "build none without a name; 'default' for unscaled RoPE)"
            )
    kind = out.get("rope_type") or out.get("type") or "default"
    if not isinstance(kind, str):
        raise InvalidArgumentError(f"model {where!r}: field 'rope_type' {kind!r} must be a name")
    if kind not in KNOWN_ROPE_TYPES:
        raise InvalidArgumentError(
            f'model {where!r}: rope_type {kind!r} is not one vLLM 0.33.0 or 0.34.0 builds (their get_rope raises "Unknown '
            f'RoPE scaling type"; they build {", ".join(sorted(KNOWN_ROPE_TYPES))})'
        )
    if kind == "dynamic" and "alpha" not in out and "factor" not in out:
        raise InvalidArgumentError(
            f"model {where!r}: rope_type 'dynamic' needs a 'factor' or an 'alpha' (vLLM 0.33.0's and 0.34.0's "
            "get_rope: \"Dynamic rope scaling must contain either 'alpha' or 'factor' field\")"
        )
    out["rope_type"] = kind
    factor = out.get("factor")
    # (a list of factors only for `linear`, whose cache holds each factor's rows; a null factor is 1)
    factors = factor if isinstance(factor, list) and kind == "linear" else [factor]
    if not factors or any(
        (f is not None or len(factors) > 1)
        and (isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f <= 2**20)
        for f in factors
    ):
        raise InvalidArgumentError(f"model {where!r}: field 'factor' {factor!r} must be a positive number")
    for key, lo, hi in (("original_max_position_embeddings", 1, 2**40), ("rope_dim", 1, 2**20)):
        v = out.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi):
            raise InvalidArgumentError(
                f"model {where!r}: field {key!r} {v!r} must be a whole number of at least 1"
            )
    partial = out.get("partial_rotary_factor")
    if partial is not None and (
        isinstance(partial, bool) or not isinstance(partial, int | float) or not 0 < partial <= 1
    ):
        raise InvalidArgumentError(
            f"model {where!r}: field 'partial_rotary_factor' {partial!r} must lie in (0, 1] (vLLM's get_rope)"
        )
    return out


def _flat(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """The config's rope parameters as one dict (transformers 5's `rope_parameters`, else 4's `rope_scaling`
    with `rope_theta` and `partial_rotary_factor` beside it), `rope_type` spelled out."""
    params: dict[str, Any] = {}
    scaling = cfg.get("rope_scaling")
    if isinstance(scaling, dict):
        params.update(scaling)
    given = cfg.get("rope_parameters")
    if isinstance(given, dict) and not any(isinstance(v, dict) for v in given.values()):
        params.update(given)
    for key in ("rope_theta", "partial_rotary_factor"):
        if key not in params and cfg.get(key) is not None:
            params[key] = cfg[key]
    return _checked(params, where)


def _by_layer_type(cfg: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """transformers 5's `rope_parameters` kept per layer type (`{"full_attention": {...}, ...}`), checked."""
    given = cfg.get("rope_parameters")
    if not isinstance(given, dict) or not any(isinstance(v, dict) for v in given.values()):
        return {}
    return {k: _checked(v, where) for k, v in sorted(given.items()) if isinstance(v, dict)}


def rows(params: dict[str, Any], max_position: int, mrope_factor: int = 4) -> int:
    """The rows of the cache `get_rope` builds for `params` and `max_position` (the class's rule)."""
    kind = params.get("rope_type", "default")
    factor = params.get("factor")
    factor = 1 if factor is None else factor  # (a null factor is 1, as vLLM's context derivation takes it)
    original = params.get("original_max_position_embeddings") or max_position
    mrope = mrope_factor if params.get("mrope_section") else 1
    if kind == "linear":
        factors = factor if isinstance(factor, list) else [factor]
        return sum(math.ceil(max_position * (1 if f is None else f)) for f in factors)
    if kind in _YARN:
        return math.ceil(original * mrope * factor)
    if kind in ("longrope", "su"):
        return original + max_position
    return max_position * mrope


def _width(params: dict[str, Any], head: int) -> int:
    if params.get("rope_type") == "proportional":
        return head
    if params.get("rope_dim"):
        return int(params["rope_dim"])
    return int(head * float(params.get("partial_rotary_factor", 1.0)))


def _whole(cfg: dict[str, Any], key: str, default: int, where: str) -> int:
    """Config field `key`, a whole number of at least 1 (`default` when absent or null)."""
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 2**20:
        raise InvalidArgumentError(
            f"model {where!r}: field {key!r} {v!r} must be a whole number of at least 1"
        )
    return v


def cache_bytes(cfg: dict[str, Any], head_dim: int, bits: int, where: str = "config") -> int:
    """Bytes of every rotary cache vLLM builds for a model of config fields `cfg` (a wrapper's `text_config`
    merged in), heads of `head_dim`, served in a dtype of `bits` a value; each GPU holds them all.

    Raises:
        InvalidArgumentError: a rope field vLLM's classes cannot take (a factor that is not a positive
            number, a partial rotary factor outside (0, 1], ...), naming it and `where`.
    """
    model_type = str(cfg.get("model_type", ""))
    if model_type in NO_ROPE or (
        model_type == "granitemoehybrid" and cfg.get("position_embedding_type") != "rope"
    ):
        return 0
    max_position = int(cfg.get("max_position_embeddings") or 0)
    if max_position < 1:
        return 0
    caches: dict[tuple[Any, ...], int] = {}

    def add(params: dict[str, Any], head: int, elem_bits: int, mrope_factor: int = 4) -> None:
        width, n = _width(params, head), rows(params, max_position, mrope_factor)
        key = (head, width, n, elem_bits, tuple(sorted((k, repr(v)) for k, v in params.items())))
        caches[key] = n * width * elem_bits // 8

    flat = _flat(cfg, where)
    by_type = _by_layer_type(cfg, where)
    layer_types = cfg.get("layer_types") if isinstance(cfg.get("layer_types"), list) else None
    if model_type.startswith("gemma3"):
        # transformers 5 keeps the two layer types' parameters apart (vLLM reads them so, `gemma3.py`);
        # transformers 4's `rope_scaling` is the global layers', the local ones `rope_local_base_freq`'s.
        local = by_type.get(
            "sliding_attention",
            {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq", 10000.0)},
        )
        full = by_type.get("full_attention", {**flat, "rope_theta": cfg.get("rope_theta", 1000000.0)})
        if layer_types is None or "sliding_attention" in layer_types:
            add(local, head_dim, bits)
        if layer_types is None or "full_attention" in layer_types:
            add(full, head_dim, bits)
    elif model_type.startswith("gemma4"):
        for kind, params in by_type.items():
            if layer_types is not None and kind not in layer_types:
                continue
            head = _whole(cfg, "global_head_dim", head_dim, where) if kind == "full_attention" else head_dim
            add(params, head, bits)
    elif model_type == "deepseek_v4":
        rope = _whole(cfg, "qk_rope_head_dim", head_dim, where)
        add({"rope_type": "default", "rope_dim": rope, "branch": "main"}, head_dim, 32)
        add({**flat, "rope_type": "deepseek_llama_scaling", "rope_dim": rope}, head_dim, 32)
    elif (
        model_type.startswith("llama4")
        and isinstance(cfg.get("no_rope_layers"), list)
        and cfg["no_rope_layers"]  # (an empty list is transformers' default pattern: RoPE on 3 of 4)
        and not any(cfg["no_rope_layers"])
    ):
        return 0
    else:
        head = _whole(cfg, "qk_rope_head_dim", head_dim, where) if cfg.get("kv_lora_rank") else head_dim
        params = dict(flat)
        rotary = cfg.get("rotary_dim")
        if rotary is not None and "rope_dim" not in params:
            # MiniMax's (vLLM: partial = rotary_dim / head_dim)
            if isinstance(rotary, bool) or not isinstance(rotary, int) or not 1 <= rotary <= head_dim:
                raise InvalidArgumentError(
                    f"model {where!r}: field 'rotary_dim' {rotary!r} must be a whole number from 1 to head_dim "
                    f"{head_dim}"
                )
            params["rope_dim"] = rotary
        qwen3_vl = model_type.startswith(("qwen3_vl", "qwen3_5"))
        elem = 32 if model_type == "gpt_oss" else bits
        for each in [{**params, **p} for p in by_type.values()] or [params]:  # (one a layer type, if kept so)
            add(each, head or head_dim, elem, 1 if qwen3_vl else 4)
            if model_type in ("deepseek_v32", "glm_moe_dsa") and not cfg.get("indexer_rope_interleave"):
                # The sparse attention's indexer rotates its keys neox-style (`indexer_rope_emb`,
                # `is_neox_style = not indexer_rope_interleave`) where the MLA rotary is not: vLLM's `get_rope`
                # keys its caches on the style, so a second cache of the same shape.
                add({**each, "is_neox_style": True}, head or head_dim, elem, 4)
    return sum(caches.values())


def default_bytes(max_position: int, head_dim: int, bits: int) -> int:
    """The one `default` cache of a model whose every layer rotates its whole head (the 2024 presets)."""
    return max_position * head_dim * bits // 8


__all__ = ["KNOWN_ROPE_TYPES", "NO_ROPE", "cache_bytes", "default_bytes", "rows"]
