"""The `Model` type: one transformer's memory-relevant architecture, and the dtypes it is priced in.

KV bytes per token = `coef · num_layers · kv_width · dtype_bytes`, where `coef = 2` (a K and a V vector)
and `kv_width = num_kv_heads · head_dim` for multi-head, grouped-query and multi-query attention (the
KV heads, not the attention heads), and `coef = 1`, `kv_width = kv_lora_rank + qk_rope_head_dim` for
multi-head latent attention (DeepSeek-V2/V3 cache one compressed latent plus the decoupled RoPE key per
layer). The KV dtype may differ from the weights' (fp8 KV cache): `with_kv_dtype("fp8")`. Where Models come
from: the presets (`kvsim.model.models`, `kvsim.model.catalogue`) and config files (`kvsim.model.hf_config`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.dsa import FP8_DS_MLA, dsa_index_bytes, index_key_bytes, mla_entry_bits
from kvsim.model.dtypes import DTYPE_BITS, HF_DTYPES, NVFP4_KV, dtype_bits
from kvsim.model.encoders import Tower
from kvsim.model.kv_dtype_values import check_nvfp4
from kvsim.model.layers import FULL, Layer
from kvsim.model.releases import LATEST


@dataclass(frozen=True)
class Model:
    """One transformer's memory-relevant architecture.

    Attributes:
        name: preset name (lower case, dashed).
        num_layers: decoder layers.
        hidden_size: model width.
        num_attention_heads: query heads.
        num_kv_heads: key/value heads (fewer than query heads under GQA/MQA).
        head_dim: width of one head.
        intermediate_size: MLP width (dense layers).
        vocab_size: embedding rows.
        num_params: total parameters (what the weights occupy).
        num_active_params: parameters touched per token (differs from `num_params` for MoE).
        max_model_len: default context length of the published config (vLLM's `max_model_len` when not
            given).
        context_limit: the longest `max_model_len` vLLM accepts for it without
            `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1` (its derived context, or the config's `model_max_length`
            when larger; a LongRoPE model's exceeds its default); 0: `max_model_len`.
        context_key: the config field the context comes from (vLLM's error names it); `default` for a
            config stating none (vLLM assumes 2,048); empty for the 2024 presets (`max_position_embeddings`).
        weight_dtype: dtype of the weights as served.
        kv_dtype: dtype of the KV cache.
        kv_lora_rank: MLA latent width (0 for non-MLA models).
        qk_rope_head_dim: MLA decoupled RoPE key width (0 for non-MLA models).
        qk_nope_head_dim: MLA's per-head key width without RoPE (0 where the config states none): what
            vLLM's FlashInfer MLA backend takes (`kvsim.model.layers.mla_default_block_size`).
        q_lora_rank: MLA's query latent width (the config's `q_lora_rank`; 0 where it is absent or null: the
            query projected from the hidden state directly, `q_proj`; 0 for non-MLA models).
        v_head_dim: MLA's per-head value width (the config's `v_head_dim`; where it states none, `head_dim`,
            as the weights count it, `kvsim.model.params`; 0 for non-MLA models). With `qk_nope_head_dim`,
            `q_lora_rank` and the latent, the widths the roofline's activations and elementwise kernels move
            for an MLA layer (`kvsim.model.timing.mla_layer_values`), not `head_dim`.
        source: where the numbers come from.
        layers: each decoder layer's cache (`kvsim.model.layers.Layer`: full attention, sliding window,
            chunked local, Mamba state, shared); empty: `num_layers` full-attention layers.
        weight_bytes: bytes the weights take as vLLM loads them, scales and zero points included
            (`kvsim.model.quant`); 0: `num_params` x `weight_dtype`.
        quantization: vLLM's quantization method of the weights (`""`: none), with what it quantizes.
        num_experts, experts_per_token, expert_ffn: the routed experts (0 for a dense model).
        config_json: the Hugging Face config fields the model was built from (JSON), so that
            `kvsim.model.models.with_quantization` can price them again; empty for the 2024 presets.
        encoders: the checkpoint's other towers vLLM loads and profiles beside the language model
            (`vision`, `audio`: its config's `vision_config` / `audio_config`).
        towers: those of them kvsim counts (`kvsim.model.encoders.Tower`, in bytes: the parameters
            tensor parallelism splits and those every GPU holds whole, in the checkpoint's dtype).
        uncounted: why each of the others is not counted (`vision: kvsim does not count ...`).
        rope_cache_bytes: the rotary embeddings' cos/sin caches vLLM builds at load (every GPU holds
            them whole; `kvsim.model.rope`).
        mla_absorbed_bytes: MLA's `W_UK_T` / `W_UV`, the copy of a quantized `kv_b_proj` vLLM 0.33.0
            dequantizes into the checkpoint's dtype after loading and keeps beside it (split by heads over
            tensor parallelism as `kv_b_proj` is; 0 where `kv_b_proj` is unquantized, its copy a view):
            `kvsim.model.hf_config.mla_absorbed_bytes`.
        row_inputs: each module group's row-parallel input widths, with the group size of the
            quantization whose kernels need whole groups on every rank (AWQ, GPTQ, compressed-tensors'
            int groups; 0 for none) and whether the checkpoint quantizes such a matrix in some layer (an
            ignore list may leave it unquantized in all): what tensor parallelism must divide
            (`kvsim.model.shard`); empty for the 2024 presets.
        release: the vLLM release whose reading of the config the model was built by, as given (`"0.34"`,
            `"v0"`: `kvsim.model.releases`' readers' numbers); the weights' readers read its quantization
            again by it.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_params: int
    num_active_params: int
    max_model_len: int
    weight_dtype: str = "fp16"
    context_limit: int = 0
    context_key: str = ""
    kv_dtype: str = "fp16"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    q_lora_rank: int = 0
    v_head_dim: int = 0
    source: str = ""
    layers: tuple[Layer, ...] = ()
    weight_bytes: int = 0
    quantization: str = ""
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ffn: int = 0
    config_json: str = dataclasses.field(default="", compare=False, repr=False)
    row_inputs: tuple[tuple[str, int, int, bool], ...] = dataclasses.field(
        default=(), compare=False, repr=False
    )
    encoders: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    towers: tuple[Tower, ...] = dataclasses.field(default=(), compare=False, repr=False)
    uncounted: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    rope_cache_bytes: int = dataclasses.field(default=0, compare=False, repr=False)
    mla_absorbed_bytes: int = dataclasses.field(default=0, compare=False, repr=False)
    release: str = dataclasses.field(default=LATEST, repr=False)

    def __post_init__(self) -> None:
        dtype_bits(self.weight_dtype)
        if self.weight_dtype == FP8_DS_MLA or self.weight_dtype in NVFP4_KV:
            owner = "sparse MLA's" if self.weight_dtype == FP8_DS_MLA else "FlashInfer's"
            raise InvalidArgumentError(
                f"{self.weight_dtype} is a KV cache layout ({owner}), not a weight dtype"
            )
        dtype_bits(self.kv_dtype)
        if self.layers and len(self.layers) != self.num_layers:
            raise InvalidArgumentError(
                f"model {self.name}: {len(self.layers)} layer specs for {self.num_layers} layers"
            )
        for field in ("num_layers", "num_kv_heads", "head_dim", "num_params", "num_active_params"):
            if getattr(self, field) < 1:
                raise InvalidArgumentError(f"{field} {getattr(self, field)} must be at least 1")

    @property
    def longest_context(self) -> int:
        """The longest `max_model_len` vLLM accepts without `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`."""
        return self.context_limit or self.max_model_len

    @property
    def is_mla(self) -> bool:
        """Whether the model caches an MLA latent instead of per-head K and V."""
        return self.kv_lora_rank > 0

    def layer_list(self) -> tuple[Layer, ...]:
        """Every decoder layer's cache (`num_layers` full-attention layers when `layers` is empty)."""
        return self.layers or (FULL,) * self.num_layers

    @property
    def is_dsa(self) -> bool:
        """Whether the model's attention is sparse: DeepSeek-V3.2's sparse MLA (an indexer picks `index_topk`
        keys a query; `kvsim.model.hf_sparse.deepseek_v32_layers`) or MiniMax-M3's block-sparse attention
        (not MLA: an indexer picks `sparse_topk_blocks` blocks a query; `hf_sparse.minimax_m3_layers`), whose
        rules `kvsim.model.dsa.resolve` applies."""
        return any(lay.kind == "full" and lay.index_heads for lay in self.layers)

    @property
    def is_hybrid(self) -> bool:
        """Whether some layer keeps other than full attention (sliding window, chunked, state, shared)."""
        # (a layer without attention, Nemotron-NAS's no-op one, keeps nothing: the rest may be one full group)
        return any(layer.kind not in ("full", "none") for layer in self.layers)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache one token occupies across all layers if every attention layer kept it (the
        full-attention count; a hybrid model's pool is sized by `kvsim.model.layers.kv_layout`)."""
        if self.is_mla:
            # One latent per token in each attention layer (Kimi-Linear's KDA layers keep a state instead).
            attention = sum(lay.kind not in ("mamba", "shared", "none") for lay in self.layer_list())
            # (FlashMLA's fp8_ds_mla entry for sparse MLA: 656 bytes, `kvsim.model.dsa.mla_entry_bits`)
            width = self.kv_lora_rank + self.qk_rope_head_dim
            bits = attention * mla_entry_bits(width, self.kv_dtype, dtype_bits(self.kv_dtype))
            # DeepSeek-V3.2's indexer keys: index_head_dim fp8 values and an fp32 scale per 128, a layer
            index = sum(
                dsa_index_bytes(lay.index_head_dim)
                for lay in self.layer_list()
                if lay.kind == "full" and lay.index_head_dim
            )
            return -(-bits // 8) + index
        bits = 0
        dsv4 = Fraction(0)
        for layer in self.layer_list():
            if layer.kind == "deepseek_v4":
                # Every cache keeping every token (fp8_ds_mla; DESIGN.md §Hybrid attention): the latent
                # entry, the compressed one per `ratio` tokens, the indexer's key per 4 tokens (ratio 4).
                # Counted in bits per `ratio` tokens, exactly; rounded up once at the end.
                r, idx = max(1, layer.compress_ratio), layer.index_head_dim
                dsv4 += Fraction(584 * 8 * (r + 1), r) if r > 1 else 584 * 8
                dsv4 += Fraction(dsa_index_bytes(idx) * 8, 4) if r == 4 else 0
            if layer.kind in ("full", "sliding_window", "chunked_local"):
                heads = layer.num_kv_heads or self.num_kv_heads
                # K and V: 2 x head_dim, or K's and V's widths where they differ (MiMo-V2)
                bits += heads * layer.kv_bits(self.head_dim, self.kv_dtype)
            if layer.kind == "full" and layer.index_head_dim:
                # MiniMax-M3's sparse layer: its index key (bf16, one copy a GPU, whatever the KV dtype)
                bits += 8 * index_key_bytes(self, layer.index_head_dim)
        return -(-(bits + math.ceil(dsv4)) // 8)

    @property
    def quant_method(self) -> str:
        """vLLM's quantization method of the weights (`quantization`'s name before its colon; `""`: none)."""
        return self.quantization.split(":")[0]

    @property
    def config_fields(self) -> Mapping[str, Any]:
        """The config fields the model was built from (`config_json`, read-only; empty for the 2024 presets,
        which keep none), parsed once per distinct text."""
        return _config_fields(self.config_json)

    @property
    def model_type(self) -> str:
        """The config's `model_type` (`""` for the 2024 presets, which keep no config fields)."""
        return str(self.config_fields.get("model_type", ""))

    @property
    def param_bytes(self) -> int:
        """Bytes the weights occupy as vLLM loads them: `weight_bytes` when known (quantized checkpoints,
        scales included), else parameter count x weight dtype size."""
        if self.weight_bytes:
            return self.weight_bytes
        return -(-self.num_params * dtype_bits(self.weight_dtype) // 8)

    @property
    def tower_bytes(self) -> int:
        """Bytes of the towers kvsim counts (`towers`; of a model `shard` split, one GPU's share)."""
        return sum(t.total for t in self.towers)

    @property
    def loaded_bytes(self) -> int:
        """Bytes vLLM's "Model loading took X GiB" counts (the weights memory it keeps out of the KV
        cache): the language model's weights (`param_bytes`), the towers it counts (`towers`), the
        rotary caches (`rope_cache_bytes`) and MLA's dequantized copy of `kv_b_proj` (`mla_absorbed_bytes`).
        Of a model `kvsim.model.shard.shard` split, one GPU's."""
        return self.param_bytes + self.tower_bytes + self.rope_cache_bytes + self.mla_absorbed_bytes

    def with_kv_dtype(self, kv_dtype: str) -> Model:
        """The same model with its KV cache stored as `kv_dtype` (e.g. `"fp8"`; vLLM's and Hugging Face's
        spellings such as `"bfloat16"` are taken too)."""
        kv_dtype = HF_DTYPES.get(kv_dtype, kv_dtype)
        dtype_bits(kv_dtype)
        if kv_dtype == FP8_DS_MLA and not (self.is_mla and self.is_dsa):
            raise InvalidArgumentError(
                f"model {self.name}: fp8_ds_mla is FlashMLA's sparse MLA entry (DeepSeek-V3.2's, GLM-5's), not "
                "this model's cache layout"
            )
        # (the GPU's rules, `kv_dtype_values.nvfp4_refusal` on its arch, are the config's: `SimConfig`)
        check_nvfp4(self, kv_dtype)
        return dataclasses.replace(self, kv_dtype=kv_dtype)

    def with_weight_dtype(self, weight_dtype: str) -> Model:
        """The same model with its weights stored as `weight_dtype` (e.g. `"int4"`)."""
        dtype_bits(weight_dtype)
        return dataclasses.replace(self, weight_dtype=weight_dtype, weight_bytes=0, quantization="")


__all__ = ["DTYPE_BITS", "Model", "dtype_bits"]


@functools.lru_cache(maxsize=256)
def _config_fields(config_json: str) -> Mapping[str, Any]:
    """`Model.config_fields`: the kept JSON object, read-only (shared by every caller of one text)."""
    try:
        kept = json.loads(config_json) if config_json else {}
    except ValueError:
        kept = {}
    return MappingProxyType(kept if isinstance(kept, dict) else {})
