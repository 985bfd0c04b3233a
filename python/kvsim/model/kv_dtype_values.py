"""The `--kv-cache-dtype` values vLLM takes, and the ones kvsim models (DESIGN.md §Errors, "KV cache dtypes").

vLLM 0.34.0 validates `--kv-cache-dtype` against `KV_CACHE_DTYPES`, the mirror of its `CacheDType` literal
(`vllm/config/cache.py`, `CacheConfig._validate_cache_dtype`: "Invalid kv_cache_dtype: ... Valid values are:
..."); vLLM 0.33.0's list is the same, value for value. Neither has kvsim's short names `fp16`, `bf16` or
`fp32`: a KV cache in the model's 16- or 32-bit dtype is `auto` (or `float16`, `bfloat16`).

kvsim models `auto`, `float16`, `bfloat16` and the fp8 ones (`fp8`, `fp8_e4m3`, `fp8_e5m2`), whose page is the
element's bytes times K and V. The others vLLM takes have pages of their own, which kvsim does not size: NVFP4
(`nvfp4`, `nvfp4_4over6`: FlashInfer's backend only, `vllm/v1/attention/backends/flashinfer.py`; a head's K or V
is `head_size // 2` bytes of 4-bit values and `head_size // 16` bytes of fp8 block scales,
`vllm/utils/torch_utils.py` `nvfp4_kv_cache_full_dim`, packed by `FlashInferBackend.customize_spec`; 8.x, 9.x and
12.x GPUs take `nvfp4` only and not at head size 64 nor with sinks, 10.x takes both through TRT-LLM's kernels),
DeepSeek's MLA formats (`fp8_ds_mla`, `nvfp4_ds_mla`), the per-token-head scaled ones, TurboQuant's, Octave's,
UltraQuant's and Intel's `fp8_inc`.
"""

from __future__ import annotations

# vLLM 0.34.0's `CacheDType` (vllm/config/cache.py), in its order; vLLM 0.33.0's is the same list.
VLLM_KV_CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "octave_k3v4",
    "octave_k3v3",
    "octave_k3v3_compact",
    "ultraquant_4bit",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)
# The values of it kvsim models.
MODELLED = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
# The presets named after the releases whose list is read above (0.33.0, 0.34.0), and the defaults' (None).
READ_PRESETS = (None, "vllm-latest", "vllm-0.34", "vllm-0.33")
# kvsim's short names, and what vLLM takes for each.
SPELLED = {
    "fp16": "vLLM's name for it is float16",
    "bf16": "vLLM's name for it is bfloat16",
    "fp32": "vLLM has no 32-bit KV cache dtype: its auto follows the model's dtype",
}
# What vLLM 0.34.0's formats kvsim does not model are, for their refusal.
UNMODELLED_WHAT = {
    "nvfp4": "FlashInfer's backend on CUDA: 4-bit values and an fp8 scale per 16 of them, 9/32 of a bf16 page",
    "nvfp4_4over6": "FlashInfer's backend on CUDA: 4-bit values and an fp8 scale per 16 of them, 9/32 of a bf16 page",
}


def refusal(value: object, preset: str | None) -> str | None:
    """Why kvsim refuses `--kv-cache-dtype value` under `preset`, or None: under the presets whose release's
    list is read (`READ_PRESETS`), a value vLLM 0.33.0 and 0.34.0 refuse (kvsim's `fp16`, `bf16`, `fp32`), and
    one they take that kvsim does not model (`nvfp4`, ...). (Older presets keep kvsim's list: their releases'
    lists are not read here.)"""
    if preset not in READ_PRESETS or not isinstance(value, str):
        return None
    if value not in VLLM_KV_CACHE_DTYPES:
        hint = f" ({SPELLED[value]})" if value in SPELLED else ""
        return (
            f"kv_cache_dtype {value!r} is not one of vLLM 0.34.0's (and 0.33.0's) values, which vllm serve "
            f'refuses ("Invalid kv_cache_dtype", vllm/config/cache.py){hint}: vLLM takes '
            f"{', '.join(VLLM_KV_CACHE_DTYPES)}; kvsim models {', '.join(MODELLED)}"
        )
    if value not in MODELLED:
        what = f" ({UNMODELLED_WHAT[value]})" if value in UNMODELLED_WHAT else ""
        return (
            f"kv_cache_dtype {value!r}: vLLM 0.34.0 takes it{what} (vllm/config/cache.py, CacheDType), but kvsim does not "
            f'model its KV cache pages (DESIGN.md §Errors, "KV cache dtypes"): kvsim models {", ".join(MODELLED)}'
        )
    return None
