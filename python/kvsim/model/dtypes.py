"""The dtypes a model is priced in: bits per element (`DTYPE_BITS`, `dtype_bits`) and the spellings
Hugging Face and vLLM give them (`HF_DTYPES`). Below `kvsim.model.architecture`'s `Model`,
`kvsim.model.layers` and the config reader, which all read it."""

from __future__ import annotations

from kvsim.errors import InvalidArgumentError
from kvsim.model.dsa import FP8_DS_MLA

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
    "fp4": 4,
    # FlashMLA's fp8_ds_mla (sparse MLA, `kvsim.model.dsa.FP8_DS_MLA`): its NoPE values' 8 bits; an entry's
    # bytes are its own, 656 (`kvsim.model.dsa.mla_entry_bits`)
    FP8_DS_MLA: 8,
    # vLLM's NVFP4 KV cache (FlashInfer's): 4-bit values; a head's bytes a token are its own, with an fp8
    # scale per 16 values (`nvfp4_head_bytes`, `kv_head_bits`)
    "nvfp4": 4,
    "nvfp4_4over6": 4,
}

# The KV cache dtypes of vLLM's NVFP4 layout (`vllm/v1/kv_cache_interface.py` `get_kv_quant_mode`: both are
# `KVQuantMode.NVFP4`; `nvfp4_4over6` picks each block's scale differently, in the same bytes).
NVFP4_KV = ("nvfp4", "nvfp4_4over6")


def dtype_bits(dtype: str) -> int:
    """Bits per element of `dtype` (a key of `DTYPE_BITS`).

    Raises:
        InvalidArgumentError: an unknown dtype, naming the known ones.
    """
    try:
        return DTYPE_BITS[dtype]
    except KeyError:
        raise InvalidArgumentError(f"unknown dtype {dtype!r}; known: {sorted(DTYPE_BITS)}") from None


def nvfp4_head_bytes(head_size: int) -> int:
    """Bytes one K or V head of `head_size` values keeps a token in vLLM's NVFP4 KV cache: `head_size // 2`
    bytes of 4-bit values and `head_size // 16` of fp8 scales (vLLM 0.33.0's and 0.34.0's
    `nvfp4_kv_cache_full_dim`, `vllm/utils/torch_utils.py`; a uint8 page, `FlashInferBackend.customize_spec`)."""
    return head_size // 2 + head_size // 16


def kv_head_bits(k_width: int, v_width: int, kv_dtype: str, bits: int | None = None) -> int:
    """Bits one KV head keeps a token: its K head's `k_width` values and its V head's `v_width`, at `bits`
    each (default: `kv_dtype`'s), or, for an NVFP4 KV cache (`NVFP4_KV`), the bytes vLLM's page gives each
    (`nvfp4_head_bytes`: 4.5 bits a value at head sizes that are multiples of 16), counted from its integer
    formula, not from a fractional size a value."""
    if kv_dtype in NVFP4_KV:
        return 8 * (nvfp4_head_bytes(k_width) + nvfp4_head_bytes(v_width))
    return (k_width + v_width) * (bits if bits is not None else dtype_bits(kv_dtype))


HF_DTYPES = {
    # Hugging Face's and vLLM's spellings of the dtypes, as `DTYPE_BITS` names them
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float": "fp32",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
}
