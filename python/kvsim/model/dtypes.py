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
