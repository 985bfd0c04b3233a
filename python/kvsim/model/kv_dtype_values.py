"""The `--kv-cache-dtype` values vLLM takes, and the ones kvsim models (DESIGN.md §Errors, "KV cache dtypes").

vLLM 0.34.0 validates `--kv-cache-dtype` against `KV_CACHE_DTYPES`, the mirror of its `CacheDType` literal
(`vllm/config/cache.py`, `CacheConfig._validate_cache_dtype`: "Invalid kv_cache_dtype: ... Valid values are:
..."); vLLM 0.33.0's list is the same, value for value. Neither has kvsim's short names `fp16`, `bf16` or
`fp32`: a KV cache in the model's 16- or 32-bit dtype is `auto` (or `float16`, `bfloat16`).

kvsim models `auto`, `float16`, `bfloat16` and the fp8 ones (`fp8`, `fp8_e4m3`, `fp8_e5m2`), whose page is the
element's bytes times K and V, and NVFP4 (`nvfp4`, `nvfp4_4over6`), whose page is `2 × kv_heads` slots of
`head_size // 2 + head_size // 16` bytes a token (4-bit values and an fp8 scale per 16:
`vllm/utils/torch_utils.py` `nvfp4_kv_cache_full_dim`, packed by `FlashInferBackend.customize_spec`; the same
bytes for both: `nvfp4_4over6` only picks each block's scale another way), 9/32 of a bf16 page at head sizes
that are multiples of 16 (`kvsim.model.dtypes.kv_head_bits`). FlashInfer's backend alone takes it
(`vllm/v1/attention/backends/flashinfer.py`), and `nvfp4_refusal` says where it does not: 8.x, 9.x and 12.x GPUs
take `nvfp4` only and not at head size 64 nor with sinks, 10.x takes both through TRT-LLM's kernels; no MLA, no
ROCm. The others vLLM takes have pages of their own, which kvsim does not size: DeepSeek's MLA formats
(`fp8_ds_mla`, `nvfp4_ds_mla`), the per-token-head scaled ones, TurboQuant's, Octave's, UltraQuant's and Intel's
`fp8_inc`.
"""

from __future__ import annotations

from typing import Any

from kvsim.model.dtypes import NVFP4_KV

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
MODELLED = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4", "nvfp4_4over6")
# kvsim's short names, and what vLLM takes for each.
SPELLED = {
    "fp16": "vLLM's name for it is float16",
    "bf16": "vLLM's name for it is bfloat16",
    "fp32": "vLLM has no 32-bit KV cache dtype: its auto follows the model's dtype",
}


def refusal(value: object, release: str, preset: str | None) -> str | None:
    """Why kvsim refuses `--kv-cache-dtype value` under vLLM `release` (a `vllm_release`, the one `preset` sets
    or one given over it), or None: under the releases whose list is read
    (`kvsim.model.releases.is_read`: 0.33.0, 0.34.0), a value they refuse (kvsim's `fp16`, `bf16`, `fp32`), and
    one they take that kvsim does not model (`fp8_inc`, ...). (Older releases keep kvsim's list: their lists are
    not read here, so NVFP4, read in 0.33.0's and 0.34.0's sources, is refused under them.)"""
    from kvsim.model.presets import named_release, release_words  # (here: presets import this module's lists)
    from kvsim.model.releases import RELEASES, is_read

    if not isinstance(value, str) or release not in RELEASES:  # (a bad release: the knob refuses it by name)
        return None
    if not is_read(release):
        if value in NVFP4_KV:
            return (
                f"kv_cache_dtype {value!r} under {named_release(release, preset)}: kvsim models the NVFP4 KV cache as vLLM 0.33.0 "
                "and 0.34.0 lay it out (the presets vllm-0.33, vllm-0.34, vllm-latest); the older releases' are "
                f"not read, and this is {release_words(release)}"
            )
        return None
    if value not in VLLM_KV_CACHE_DTYPES:
        hint = f" ({SPELLED[value]})" if value in SPELLED else ""
        return (
            f"kv_cache_dtype {value!r} is not one of vLLM 0.34.0's (and 0.33.0's) values, which vllm serve "
            f'refuses ("Invalid kv_cache_dtype", vllm/config/cache.py){hint}: vLLM takes '
            f"{', '.join(VLLM_KV_CACHE_DTYPES)}; kvsim models {', '.join(MODELLED)}"
        )
    if value not in MODELLED:
        return (
            f"kv_cache_dtype {value!r}: vLLM 0.34.0 takes it (vllm/config/cache.py, CacheDType), but kvsim does not "
            f'model its KV cache pages (DESIGN.md §Errors, "KV cache dtypes"): kvsim models {", ".join(MODELLED)}'
        )
    return None


# FlashInfer's head sizes (`FlashInferBackend.get_supported_head_sizes`, vLLM 0.33.0 and 0.34.0).
FLASHINFER_HEAD_SIZES = (64, 128, 256, 512)


def nvfp4_refusal(model: Any, kv_dtype: str, arch: str | None = None) -> str | None:
    """Why vLLM 0.34.0 (and 0.33.0) serves no NVFP4 KV cache (`nvfp4`, `nvfp4_4over6`) for `model` on a GPU of
    architecture `arch` (None: not named, the GPU's rules not applied), or None where it does.

    FlashInfer's backend alone takes it (`supported_kv_cache_dtypes`): not an MLA model (no MLA backend lists
    it; `nvfp4_ds_mla` is DeepSeek's sparse MLA format), nor DeepSeek-V4's cache; K and V heads of one size
    (`customize_spec` asserts it) that FlashInfer lists (`get_supported_head_sizes`); on CUDA only (ROCm's
    backends do not list it), compute capability 8.0 to 12.1 (`supports_compute_capability`); on 8.x, 9.x and
    12.x `nvfp4` only (`supports_kv_cache_dtype`: `_nvfp4_kv_on_fa2`), not at head size 64 nor with attention
    sinks (`supports_combination`); on 10.x both (TRT-LLM's kernels); 11.x takes neither."""
    from kvsim.model.block_default import _has_sinks
    from kvsim.model.gpus import is_rocm, sm_capability

    if kv_dtype not in NVFP4_KV:
        return None
    if model.is_mla:
        return (
            "for an MLA model: FlashInfer's backend alone takes it, and serves no MLA (vLLM's MLA backends do not list "
            "it; nvfp4_ds_mla is DeepSeek's sparse MLA format, which kvsim does not model)"
        )
    if any(lay.kind == "deepseek_v4" for lay in model.layer_list()):
        return "for DeepSeek-V4's cache (its own MLA layout), which FlashInfer's backend does not serve"
    if model.is_dsa:
        return (
            "for sparse attention: MiniMax-M3's NVFP4 cache is its own SM100 MSA backend's "
            "(MiniMaxM3SparseMSANvfp4Backend), which kvsim does not model"
        )
    layers = [lay for lay in model.layer_list() if lay.kind in ("full", "sliding_window", "chunked_local")]
    for lay in layers:
        k = lay.head_dim or model.head_dim
        v = lay.v_head_dim or k
        if k != v:
            return (
                f"for K heads of {k} and V heads of {v} values: FlashInferBackend.customize_spec asserts one size "
                '("nvfp4 with asymmetric K/V head sizes not yet supported")'
            )
        if k not in FLASHINFER_HEAD_SIZES:
            return (
                f"at a head size of {k}, which FlashInfer's backend, the one that takes it, does not list "
                f"({', '.join(map(str, FLASHINFER_HEAD_SIZES))})"
            )
    if arch is None:
        return None
    if is_rocm(arch):
        return f"on {arch}, a ROCm GPU: FlashInfer's backend, the one that takes it, runs on CUDA only"
    cap = sm_capability(arch)
    if cap is None or not 80 <= cap <= 121 or cap // 10 == 11:
        return f"on {arch}: FlashInfer's backend takes it on compute capability 8.x, 9.x and 12.x (nvfp4 only) and 10.x"
    if cap // 10 in (8, 9, 12):
        if kv_dtype != "nvfp4":
            return (
                f"on {arch}, compute capability {cap // 10}.x, where FlashInfer takes nvfp4 only (its slot-mapping "
                "writer has no scale search; nvfp4_4over6 needs 10.x's TRT-LLM kernels)"
            )
        heads = sorted({lay.head_dim or model.head_dim for lay in layers})
        if 64 in heads:
            return f'on {arch} at head size 64 ("fa2 prefill misreads an NVFP4 KV cache at head_size 64")'
        if _has_sinks(model):
            return (
                f'on {arch} with attention sinks ("the sink prefill wrapper cannot read an NVFP4 KV cache")'
            )
    return None


def check_nvfp4(model: Any, kv_dtype: str, arch: str | None = None) -> None:
    """Raises `InvalidArgumentError` where vLLM serves no NVFP4 KV cache for `model` on `arch`
    (`nvfp4_refusal`), naming why."""
    why = nvfp4_refusal(model, kv_dtype, arch)
    if why is not None:
        from kvsim.errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"kv_cache_dtype {kv_dtype}: model {model.name}: vLLM 0.34.0 (and 0.33.0) serves no NVFP4 KV cache {why}"
        )
