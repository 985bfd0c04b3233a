"""Model presets: the architecture numbers that decide KV bytes per token and weight bytes (SPEC §2).

KV bytes per token = `coef · num_layers · kv_width · dtype_bytes`, where `coef = 2` (a K and a V vector)
and `kv_width = num_kv_heads · head_dim` for multi-head, grouped-query and multi-query attention (the
KV heads, not the attention heads), and `coef = 1`, `kv_width = kv_lora_rank + qk_rope_head_dim` for
multi-head latent attention (DeepSeek-V2/V3 cache one compressed latent plus the decoupled RoPE key per
layer). The KV dtype may differ from the weights' (fp8 KV cache): `with_kv_dtype("fp8")`.

Parameter counts are the published totals (Hugging Face safetensors metadata) for Llama, Mistral and
Qwen, which the test-suite re-derives from the architecture fields below; OPT's are derived from its
config the same way (learned positions, biases, tied embeddings); DeepSeek-V3's is its README's 671B
main-model total, of which 37B are active per token (`num_active_params`, used for FLOPs).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kvsim.errors import InvalidArgumentError

# Bits per element, so sub-byte formats (int4 weights) stay exact in integer arithmetic.
DTYPE_BITS: dict[str, int] = {
    "fp32": 32,
    "fp16": 16,
    "bf16": 16,
    "fp8": 8,
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
    "int8": 8,
    "int4": 4,
}


def dtype_bits(dtype: str) -> int:
    """Bits per element of `dtype` (a key of `DTYPE_BITS`).

    Raises:
        InvalidArgumentError: an unknown dtype, naming the known ones.
    """
    try:
        return DTYPE_BITS[dtype]
    except KeyError:
        raise InvalidArgumentError(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BITS)}") from None


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
        max_model_len: default context length of the published config.
        weight_dtype: dtype of the weights as served.
        kv_dtype: dtype of the KV cache.
        kv_lora_rank: MLA latent width (0 for non-MLA models).
        qk_rope_head_dim: MLA decoupled RoPE key width (0 for non-MLA models).
        source: where the numbers come from.
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
    kv_dtype: str = "fp16"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        dtype_bits(self.weight_dtype)
        dtype_bits(self.kv_dtype)
        for field in ("num_layers", "num_kv_heads", "head_dim", "num_params", "num_active_params"):
            if getattr(self, field) < 1:
                raise InvalidArgumentError(f"{field} {getattr(self, field)} must be at least 1")

    @property
    def is_mla(self) -> bool:
        """Whether the model caches an MLA latent instead of per-head K and V."""
        return self.kv_lora_rank > 0

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of KV cache one token occupies across all layers (SPEC §2)."""
        if self.is_mla:
            coef, width = 1, self.kv_lora_rank + self.qk_rope_head_dim
        else:
            coef, width = 2, self.num_kv_heads * self.head_dim
        bits = coef * self.num_layers * width * dtype_bits(self.kv_dtype)
        return -(-bits // 8)

    @property
    def param_bytes(self) -> int:
        """Bytes the weights occupy: parameter count x weight dtype size."""
        return -(-self.num_params * dtype_bits(self.weight_dtype) // 8)

    def with_kv_dtype(self, kv_dtype: str) -> Model:
        """The same model with its KV cache stored as `kv_dtype` (e.g. `"fp8"`)."""
        dtype_bits(kv_dtype)
        return dataclasses.replace(self, kv_dtype=kv_dtype)

    def with_weight_dtype(self, weight_dtype: str) -> Model:
        """The same model with its weights stored as `weight_dtype` (e.g. `"int4"`)."""
        dtype_bits(weight_dtype)
        return dataclasses.replace(self, weight_dtype=weight_dtype)


def _dense(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    vocab: int,
    params: int,
    max_len: int,
    source: str,
    dtype: str = "fp16",
) -> Model:
    return Model(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate_size=ffn,
        vocab_size=vocab,
        num_params=params,
        num_active_params=params,
        max_model_len=max_len,
        weight_dtype=dtype,
        kv_dtype=dtype,
        source=source,
    )


_HF = "https://huggingface.co/{}/blob/main/config.json"

MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        # facebook/opt-13b config.json: 40 layers, d 5120, 40 heads, ffn 20480, vocab 50272, 2048 positions.
        _dense(
            "opt-13b", 40, 5120, 40, 40, 20480, 50272, 12_853_473_280, 2048, _HF.format("facebook/opt-13b")
        ),
        # facebook/opt-66b config.json: 64 layers, d 9216, 72 heads, ffn 36864.
        _dense(
            "opt-66b", 64, 9216, 72, 72, 36864, 50272, 65_719_701_504, 2048, _HF.format("facebook/opt-66b")
        ),
        # OPT paper (Zhang et al. 2022, arXiv 2205.01068) Table 1: 96 layers, 96 heads, d 12288.
        _dense(
            "opt-175b", 96, 12288, 96, 96, 49152, 50272, 174_604_468_224, 2048, "arXiv:2205.01068 Table 1"
        ),
        # meta-llama/Llama-2-7b-hf config.json: 32 layers, d 4096, 32 heads (no GQA), ffn 11008.
        _dense(
            "llama-2-7b",
            32,
            4096,
            32,
            32,
            11008,
            32000,
            6_738_415_616,
            4096,
            _HF.format("meta-llama/Llama-2-7b-hf"),
        ),
        # meta-llama/Llama-2-13b-hf config.json: 40 layers, d 5120, 40 heads, ffn 13824.
        _dense(
            "llama-2-13b",
            40,
            5120,
            40,
            40,
            13824,
            32000,
            13_015_864_320,
            4096,
            _HF.format("meta-llama/Llama-2-13b-hf"),
        ),
        # meta-llama/Llama-2-70b-hf config.json: 80 layers, d 8192, 64 heads, 8 KV heads, ffn 28672.
        _dense(
            "llama-2-70b",
            80,
            8192,
            64,
            8,
            28672,
            32000,
            68_976_648_192,
            4096,
            _HF.format("meta-llama/Llama-2-70b-hf"),
        ),
        # meta-llama/Meta-Llama-3-8B config.json: 32 layers, d 4096, 32 heads, 8 KV heads, vocab 128256.
        _dense(
            "llama-3-8b",
            32,
            4096,
            32,
            8,
            14336,
            128256,
            8_030_261_248,
            8192,
            _HF.format("meta-llama/Meta-Llama-3-8B"),
            "bf16",
        ),
        # meta-llama/Meta-Llama-3-70B config.json: 80 layers, d 8192, 64 heads, 8 KV heads, ffn 28672.
        _dense(
            "llama-3-70b",
            80,
            8192,
            64,
            8,
            28672,
            128256,
            70_553_706_496,
            8192,
            _HF.format("meta-llama/Meta-Llama-3-70B"),
            "bf16",
        ),
        # mistralai/Mistral-7B-v0.1 config.json: 32 layers, d 4096, 32 heads, 8 KV heads, ffn 14336.
        _dense(
            "mistral-7b",
            32,
            4096,
            32,
            8,
            14336,
            32000,
            7_241_732_096,
            32768,
            _HF.format("mistralai/Mistral-7B-v0.1"),
            "bf16",
        ),
        # Qwen/Qwen2.5-7B config.json: 28 layers, d 3584, 28 heads, 4 KV heads, ffn 18944, vocab 152064.
        _dense(
            "qwen2.5-7b",
            28,
            3584,
            28,
            4,
            18944,
            152064,
            7_615_616_512,
            32768,
            _HF.format("Qwen/Qwen2.5-7B"),
            "bf16",
        ),
        # Qwen/Qwen2.5-72B config.json: 80 layers, d 8192, 64 heads, 8 KV heads, ffn 29568.
        _dense(
            "qwen2.5-72b",
            80,
            8192,
            64,
            8,
            29568,
            152064,
            72_706_203_648,
            32768,
            _HF.format("Qwen/Qwen2.5-72B"),
            "bf16",
        ),
        # deepseek-ai/DeepSeek-V3 config.json: 61 layers, d 7168, 128 heads, MLA kv_lora_rank 512 +
        # qk_rope_head_dim 64; README: 671B total / 37B active (MTP module excluded), fp8 weights, bf16 KV.
        Model(
            name="deepseek-v3",
            num_layers=61,
            hidden_size=7168,
            num_attention_heads=128,
            num_kv_heads=128,
            head_dim=128,
            intermediate_size=18432,
            vocab_size=129280,
            num_params=671_000_000_000,
            num_active_params=37_000_000_000,
            max_model_len=163840,
            weight_dtype="fp8",
            kv_dtype="bf16",
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            source=_HF.format("deepseek-ai/DeepSeek-V3"),
        ),
    )
}


def names() -> list[str]:
    """The preset names, sorted."""
    return sorted(MODELS)


def get(name: str) -> Model:
    """The preset called `name` (lower case, dashed: `opt-13b`, `llama-3-8b`, `deepseek-v3`, ...).

    Raises:
        InvalidArgumentError: an unknown name; the message lists the known ones.
    """
    try:
        return MODELS[name]
    except KeyError:
        raise InvalidArgumentError(f"unknown model {name!r}; known: {', '.join(names())}") from None


__all__ = ["DTYPE_BITS", "MODELS", "Model", "dtype_bits", "get", "names"]
