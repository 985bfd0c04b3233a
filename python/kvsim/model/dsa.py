"""Sparse attention's rules (DESIGN.md §Defaults and sizing, "DeepSeek-V3.2" and "MiniMax-M3"): DeepSeek-V3.2's
and GLM-5's indexer key cache, MiniMax-M3's index key cache, the block size their indexers take, the KV dtype
vLLM 0.33.0 gives them and the layouts kvsim refuses. One place for them: `kvsim.model.config.SimConfig` and
`kvsim.model.sizing` (`size_pool`, `pool_blocks`) go through `resolve`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.gpus import is_rocm, sm_capability
from kvsim.model.releases import LATEST, at_least


def dsa_index_bytes(index_head_dim: int) -> int:
    """Bytes one token's indexer key takes in a layer: `index_head_dim` fp8 values and an fp32 scale per 128
    of them (`DeepseekV32IndexerCache`, uint8: 132 for DeepSeek-V3.2's 128-wide keys), one copy a GPU."""
    return index_head_dim + index_head_dim // 128 * 4


# DeepSeek-V3.2's indexer backend takes kernel blocks of 64 tokens only on CUDA (vLLM 0.33.0,
# `v1/attention/backends/mla/indexer.py` `get_supported_kernel_block_sizes`; any on ROCm).
DSA_CUDA_BLOCK = 64


# FlashMLA's `fp8_ds_mla` entry, one a token a layer (vLLM 0.33.0, `v1/attention/backends/mla/flashmla_sparse.py`
# 76-87: 512 fp8 e4m3 NoPE values, 4 fp32 scales (one per 128 of them), 64 bf16 RoPE values = 512 + 16 + 128;
# `model_executor/layers/attention/mla_attention.py` 1386, `MLAAttention.get_kv_cache_spec`: the spec's
# `state_content_bytes`, its page `block_size` × 656, `v1/kv_cache_interface.py` 586-601). The dtype kvsim
# keeps for it is vLLM's own name: `_canonicalize_sparse_mla_kv_cache_dtype` (`mla_attention.py` 359-376) turns
# the cache dtype into it where FlashMLA's sparse backend (an fp8 cache) or FlashInfer's SM120 one (auto, fp8,
# fp8_e4m3) serves the model.
FP8_DS_MLA = "fp8_ds_mla"
FP8_DS_MLA_BYTES = 656


def mla_entry_bits(width: int, kv_dtype: str, bits: int) -> int:
    """Bits one token's MLA latent takes in one layer: 656 bytes' in FlashMLA's `fp8_ds_mla` layout
    (`FP8_DS_MLA_BYTES`), else its `width` values of `bits` each (`kv_dtype`'s)."""
    return 8 * FP8_DS_MLA_BYTES if kv_dtype == FP8_DS_MLA else width * bits


def _sm_major(arch: str | None) -> int:
    """A CUDA arch's compute capability major (`sm_90` 9, `sm_100` 10, `sm_120` 12: `gpus.sm_capability`'s
    tens); 0 for none, ROCm's or one not spelt sm_XY."""
    return (sm_capability(arch) or 0) // 10


def dsa_kv_dtype(model: Any, arch: str | None, kv_dtype: str | None) -> str | None:
    """The KV cache dtype vLLM 0.33.0 gives a sparse-attention model on `arch` for `kv_dtype` (None or auto:
    the model's), as its engine ends with it:

    - GLM-5 (`glm_moe_dsa`) takes fp8 on compute capability 10.x (`model_executor/models/config.py` 89-101,
      `GlmMoeDsaForCausalLM.verify_and_update_config`: auto becomes fp8_e4m3, "Using fp8 kv-cache for
      GlmMoeDsaForCausalLM on SM10x"; kvsim's fp8, the same e4m3 values).
    - `fp8_ds_mla` (`FP8_DS_MLA`) where the backend vLLM picks stores FlashMLA's 656-byte entries
      (`model_executor/layers/attention/mla_attention.py` 359-376, `_canonicalize_sparse_mla_kv_cache_dtype`):
      on 9.x an fp8 cache, which FlashAttention's sparse MLA backend does not take
      (`flashattn_mla_sparse.py` 43-47, 97-100) and FlashMLA's sparse backend, next in the list
      (`platforms/cuda.py` 139-151), does (`flashmla_sparse.py` 149-155: "fp8", its alias for fp8_ds_mla);
      on 10.x an fp8 cache of a model FlashInfer's sparse backend (first for fp8, `cuda.py` 100-105) does not
      take, a `qk_nope_head_dim` other than 128 and 192 (`flashinfer_mla_sparse.py` 137-156), so FlashMLA's;
      on 12.x auto, fp8 and fp8_e4m3 (FlashInfer's SM120 sparse backend, the only sparse one there, `cuda.py`
      135-139, `flashinfer_mla_sparse.py` 164-241), and bf16, which DeepSeek-V3.2's hook makes auto
      (`models/config.py` 74-86, "Using bfloat16 kv-cache for DeepSeekV3.2"; GLM-5 has no such hook).
    - Else unchanged. Which dtypes no backend takes is `dsa_block_size`'s to refuse.
    """
    major = _sm_major(arch)
    if kv_dtype in (None, "auto") and model.model_type == "glm_moe_dsa" and major == 10:
        # (vLLM's fp8_e4m3: FlashMLA's sparse backend, the one after FlashInfer's, does not list that
        # spelling, so a model FlashInfer's does not take is refused, `dsa_block_size`)
        return "fp8" if model.qk_nope_head_dim in (128, 192) else "fp8_e4m3"
    if kv_dtype == FP8_DS_MLA or not model.is_mla:
        return kv_dtype
    if major == 12:
        take = ("auto", "fp8", "fp8_e4m3") + (
            ("bf16", "bfloat16") if model.model_type == "deepseek_v32" else ()
        )
        return FP8_DS_MLA if (kv_dtype or "auto") in take and model.kv_dtype == "bf16" else kv_dtype
    if kv_dtype == "fp8" and (major == 9 or (major == 10 and model.qk_nope_head_dim not in (128, 192))):
        return FP8_DS_MLA
    return kv_dtype


def dsa_block_size(
    model: Any, arch: str | None, kv_dtype: str, block_size: int | None, default: int = 16
) -> int:
    """A sparse-attention model's block size on `arch` (None: a GPU not named, taken as CUDA's, vLLM's
    wheel): `block_size` when given, else 64 on CUDA (the indexer's only kernel block, which every sparse
    MLA backend takes: FlashMLA's `MultipleOf(64)`, or exactly 64 for its fp8 cache on 10.x, and FlashInfer's
    SM120 backend's `MultipleOf(64)`, `flashmla_sparse.py` 157-164, `flashinfer_mla_sparse.py` 179-181) and 16
    on ROCm (vLLM's `default`, `CacheConfig.DEFAULT_BLOCK_SIZE`: 16, or 64 in vLLM 0.34.0, which ROCm's
    AITER sparse MLA backend and its indexer both take, kernel blocks of 1 or multiples of 16). `kv_dtype` is
    the cache's (`dsa_kv_dtype` applied; auto as the model's).

    Raises:
        InvalidArgumentError: what vLLM 0.33.0 refuses or kvsim does not model, named: on CUDA a block size
            that is not a multiple of 64, a compute capability other than 9.x, 10.x and 12.x (below 9: no
            sparse MLA backend, "No valid attention backend found"; others: none), a latent other than
            512 + 64 wide (the sparse kernels' only one), `fp8_e5m2` and `fp32` (no sparse backend, CUDA's or
            ROCm's, takes them); on 12.x a dtype FlashInfer's SM120 backend does not take (fp16; GLM-5's bf16)
            or a model it refuses (`index_topk` other than 2,048, a model dtype other than bf16); `fp8_e4m3`
            where FlashMLA's sparse backend would be the one (9.x: it does not list that spelling, and the
            FlashInfer SM90 backend after it needs a FlashInfer build kvsim does not assume; 10.x with a
            `qk_nope_head_dim` FlashInfer's does not take: none); an fp8 cache where no GPU is named (the
            layout depends on it).
    """
    rocm = is_rocm(arch)
    where = f"model {model.name}" + (f" on {arch}" if arch else "")
    fp8 = kv_dtype.startswith("fp8")
    major = 0
    if arch is not None and arch.startswith("sm_"):
        major = _sm_major(arch)
        if major < 9:
            raise InvalidArgumentError(
                f"{where}: sparse MLA (DeepSeek-V3.2's attention) has no attention backend below compute capability "
                '9.0 in vLLM 0.33.0 and 0.34.0 ("No valid attention backend found"; FlashMLA, FlashAttention and FlashInfer\'s '
                "sparse kernels need Hopper or later)"
            )
        if major not in (9, 10, 12):
            raise InvalidArgumentError(
                f"{where}: vLLM 0.33.0 and 0.34.0 have sparse MLA backends for compute capability 9.x, 10.x and 12.x only"
            )
    if not rocm:
        width = model.kv_lora_rank + model.qk_rope_head_dim
        if (model.kv_lora_rank, model.qk_rope_head_dim) != (512, 64):
            raise InvalidArgumentError(
                f"{where}: a latent of {model.kv_lora_rank} + {model.qk_rope_head_dim} = {width}: vLLM 0.33.0's and "
                "0.34.0's sparse MLA kernels on CUDA take 512 + 64 only (no backend would be found)"
            )

    if kv_dtype in ("fp8_e5m2", "fp32"):
        raise InvalidArgumentError(
            f"{where}: kv_cache_dtype {kv_dtype}: none of vLLM 0.33.0's sparse MLA backends (nor 0.34.0's) takes it (their "
            "supported_kv_cache_dtypes: auto, float16, bfloat16 and fp8 as e4m3; FlashMLA's its fp8_ds_mla)"
        )
    topk = model.config_fields.get("index_topk")
    if major == 12 and (kv_dtype != FP8_DS_MLA or topk != 2048 or model.kv_dtype != "bf16"):
        why = (
            f"index_topk {topk} (it takes 2,048 only)"
            if topk != 2048
            else f"a model dtype of {model.kv_dtype} (it takes bfloat16 only)"
            if model.kv_dtype != "bf16"
            else f"kv_cache_dtype {kv_dtype} (it takes auto, fp8, fp8_e4m3 and fp8_ds_mla)"
        )
        raise InvalidArgumentError(
            f"{where}: vLLM 0.33.0's and 0.34.0's one sparse MLA backend on compute capability 12.x, FlashInfer's SM120 "
            f"(flashinfer_mla_sparse.py, FlashInferMLASparseSM120Backend), refuses {why}: no backend would be found"
        )
    if fp8 and kv_dtype != FP8_DS_MLA and not rocm:
        nope = model.qk_nope_head_dim
        if major == 0:
            ask = "name the GPU" if arch is None else "give the GPU's arch (sm_XY)"
            raise InvalidArgumentError(
                f"{where}: an fp8 KV cache for sparse MLA takes a layout that depends on the GPU (576 bytes an "
                f"entry on compute capability 10.x, FlashMLA's 656 on 9.x and 12.x): {ask}"
            )
        if major == 9 or nope not in (128, 192):
            on = "9.x" if major == 9 else f"10.x for a qk_nope_head_dim of {nope}"
            raise InvalidArgumentError(
                f"{where}: kv_cache_dtype {kv_dtype} on compute capability {on}: vLLM 0.33.0's and 0.34.0's FlashMLA sparse "
                "backend takes fp8 (its alias for fp8_ds_mla), not this spelling, and the backend after it "
                "(FlashInfer's SM90 sparse one, which needs FlashInfer 0.6.18 or later) is not modelled: give fp8"
            )
    if block_size is None:
        return default if rocm else DSA_CUDA_BLOCK
    if not rocm and block_size % DSA_CUDA_BLOCK:
        raise InvalidArgumentError(
            f"{where}: block_size {block_size} is not a multiple of {DSA_CUDA_BLOCK}: vLLM 0.33.0's and 0.34.0's "
            f"sparse-attention indexer takes kernel blocks of {DSA_CUDA_BLOCK} tokens only on CUDA (give a multiple of "
            f"{DSA_CUDA_BLOCK}, or leave it unset)"
        )
    return block_size


# MiniMax-M3 (vLLM 0.33.0, `vllm/models/minimax_m3/`). Its model types: the published text config's
# (`minimax_m3`, MiniMaxAI/MiniMax-M3), the multimodal wrapper vLLM registers (`minimax_m3_vl`,
# `vllm/transformers_utils/config.py`; NVIDIA's MiniMax-M3-NVFP4) and that wrapper's text config
# (`minimax_m3_text`, `vllm/transformers_utils/configs/minimax_m3.py` MiniMaxM3TextConfig).
# vLLM 0.34.0 reads it through transformers' `MiniMaxM3VLTextConfig` (`transformers_utils/configs/minimax_m3.py`;
# transformers 5.x `models/minimax_m3_vl/configuration_minimax_m3_vl.py`), model_type `minimax_m3_vl_text`.
MINIMAX_M3_TYPES = frozenset({"minimax_m3", "minimax_m3_vl", "minimax_m3_text", "minimax_m3_vl_text"})
# transformers' flat indexer fields, each with the legacy `sparse_attention_config` key that overrides it and its
# class default (`MiniMaxM3VLTextConfig.__post_init__`).
MINIMAX_M3_FLAT_INDEX = {
    "index_n_heads": ("sparse_num_index_heads", 4),
    "index_head_dim": ("sparse_index_dim", 128),
    "index_block_size": ("sparse_block_size", 128),
    "index_topk_blocks": ("sparse_topk_blocks", 16),
    "index_local_blocks": ("sparse_local_block", 1),
}
# The legacy `sparse_attention_config` keys vLLM 0.34.0 does not read (transformers' `MiniMaxM3VLTextConfig.
# __post_init__` keeps `MINIMAX_M3_FLAT_INDEX`'s keys and `sparse_attention_freq` and drops the rest; vLLM
# 0.34.0's `models/minimax_m3/nvidia/model.py` reads none of them): vLLM 0.33.0 read them.
MINIMAX_M3_UNREAD = (
    "sparse_score_type",
    "sparse_init_block",
    "sparse_disable_index_value",
    "use_sparse_attention",
)
_M3_LAYER_TYPES = {
    "layer_types": ("minimax_m3_sparse", "full_attention"),
    "mlp_layer_types": ("sparse", "dense"),
}


def minimax_m3_schema(cfg: dict[str, Any], where: str, release: str = LATEST) -> dict[str, Any]:
    """A MiniMax-M3 config in transformers 5's schema (`MiniMaxM3VLTextConfig`: `layer_types`,
    `mlp_layer_types`, the flat `index_*` fields, model_type `minimax_m3_vl_text`) turned into the legacy
    fields kvsim reads (`sparse_attention_config`, `moe_layer_freq`) as transformers' `__post_init__` resolves
    the two: `layer_types` and `mlp_layer_types` win over `sparse_attention_freq` and `moe_layer_freq`, which
    give them only where they are absent, and where neither is given every layer is full attention and every
    MLP a MoE block; a legacy `sparse_attention_config` index key wins over its flat field, which takes the
    class default where both are absent. The legacy fields vLLM 0.34.0 no longer reads (`sparse_score_type`,
    `sparse_init_block`, `sparse_disable_index_value`: every sparse layer builds no index value) are dropped.
    A config with none of the new fields is returned as it is (vLLM 0.33.0's reading), unless `release` is
    0.34.0 or later and it lacks `sparse_attention_config` or `moe_layer_freq`: 0.34.0 reads every config
    through `MiniMaxM3VLTextConfig`, whose defaults then make every layer full attention, every MLP a MoE
    block (under 0.33.0 `minimax_m3_sparse` and `kvsim.model.params` refuse the missing field).

    Raises:
        InvalidArgumentError: a `layer_types` or `mlp_layer_types` that is not a list of the
            `num_hidden_layers` layers' kinds (transformers' `validate_layer_type` refuses another length),
            a kind other than the two vLLM's MiniMax-M3 tells apart (`minimax_m3_sparse` / `full_attention`,
            `sparse` / `dense`), a `sparse_attention_config` that is not an object.
    """
    new = (
        cfg.get("model_type") == "minimax_m3_vl_text"
        or any(cfg.get(k) is not None for k in (*_M3_LAYER_TYPES, *MINIMAX_M3_FLAT_INDEX))
        or (
            at_least(release, "0.34.0")
            and any(cfg.get(k) is None for k in ("sparse_attention_config", "moe_layer_freq"))
        )
    )
    count: Any = cfg.get("num_hidden_layers")
    if not new or not whole_at_least(count, 1):  # (no layer count: the reader refuses it by name)
        return cfg
    n = int(count)
    legacy = cfg.get("sparse_attention_config")
    if legacy is not None and not isinstance(legacy, Mapping):
        raise InvalidArgumentError(
            f"model {where}: field 'sparse_attention_config' {legacy!r} must be an object"
        )
    legacy = dict(legacy or {})
    derived = {
        "layer_types": (legacy.get("sparse_attention_freq"), "sparse_attention_config.sparse_attention_freq"),
        "mlp_layer_types": (cfg.get("moe_layer_freq"), "moe_layer_freq"),
    }
    kinds: dict[str, list[bool]] = {}
    for key, (yes, no) in _M3_LAYER_TYPES.items():
        given = cfg.get(key)
        if given is None:
            freq, name = derived[key]
            if freq is None:  # (transformers' default: every layer full attention; every MLP a MoE block)
                kinds[key] = [key == "mlp_layer_types"] * n
                continue
            if not isinstance(freq, list) or len(freq) != n:
                raise InvalidArgumentError(f"model {where}: field {name!r} {freq!r} must list the {n} layers")
            kinds[key] = [bool(f) for f in freq]
            continue
        if not isinstance(given, list) or len(given) != n or not all(t in (yes, no) for t in given):
            raise InvalidArgumentError(
                f"model {where}: field {key!r} must list the {n} layers (num_hidden_layers), each {yes!r} or "
                f"{no!r} (transformers' MiniMaxM3VLTextConfig checks the length; vLLM 0.34.0's MiniMax-M3 tells "
                "only these apart)"
            )
        kinds[key] = [t == yes for t in given]
    sparse = {
        legacy_key: legacy.get(legacy_key, cfg.get(flat, default))
        for flat, (legacy_key, default) in MINIMAX_M3_FLAT_INDEX.items()
    }
    sparse["sparse_attention_freq"] = [int(k) for k in kinds["layer_types"]]
    sparse["sparse_disable_index_value"] = [1] * n
    out = {k: v for k, v in cfg.items() if k not in (*_M3_LAYER_TYPES, *MINIMAX_M3_FLAT_INDEX)}
    out["sparse_attention_config"] = sparse
    out["moe_layer_freq"] = [int(k) for k in kinds["mlp_layer_types"]]
    return out


# The block of its sparse layers' kernels: one sparse block is one KV page (`SPARSE_BLOCK_SIZE` 128 in
# `common/ops/sparse_attn.py` and `common/ops/index_topk.py`), the only kernel block size its attention and
# indexer backends take (`MiniMaxM3SparseBackend`, `common/sparse_attention.py`, and `MiniMaxM3IndexerBackend`,
# `common/indexer.py`: `get_supported_kernel_block_sizes` [128]; the NVIDIA MSA and AMD backends subclass them).
MINIMAX_M3_BLOCK = 128
# The one head width its sparse attention and indexer backends take (`get_supported_head_sizes` [128]).
MINIMAX_M3_HEAD = 128
# The KV cache dtypes its sparse attention backend takes (`MiniMaxM3SparseBackend.supported_kv_cache_dtypes`;
# auto: the model's dtype).
MINIMAX_M3_KV_DTYPES = ("auto", "bfloat16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True)
class MiniMaxM3Sparse:
    """MiniMax-M3's `sparse_attention_config` as vLLM 0.33.0 reads it (`nvidia/model.py`
    `MiniMaxM3SparseAttention`, `MiniMaxM3DecoderLayer`, `common/indexer.py`).

    Attributes:
        layers: whether each decoder layer is sparse (`sparse_attention_freq[i] != 0`,
            `_sparse_attention_layer_ids`): its attention reads the top-k blocks the indexer picks and it keeps
            an index key cache (`MiniMaxM3IndexerCache`) beside its K and V.
        index_heads: `sparse_num_index_heads`, the index query heads (as many as the KV heads, split as they
            are: `MinimaxM3QKVParallelLinearWithIndexer`).
        index_dim: `sparse_index_dim`, the width of an index query head and of the one index key a token.
        topk_blocks: `sparse_topk_blocks`, the blocks a query attends (its init and local blocks among them:
            `common/ops/index_topk.py` forces them into the top-k).
    """

    layers: tuple[bool, ...]
    index_heads: int
    index_dim: int
    topk_blocks: int

    @property
    def topk_tokens(self) -> int:
        """The keys a query of a sparse layer attends at most: `topk_blocks` blocks of 128 tokens."""
        return self.topk_blocks * MINIMAX_M3_BLOCK


def whole_at_least(v: Any, least: int) -> bool:
    """Whether `v` is an integer (not a boolean) of at least `least` (a config field's check)."""
    return not isinstance(v, bool) and isinstance(v, int) and v >= least


def minimax_m3_sparse(
    cfg: Mapping[str, Any], num_layers: int, where: str, release: str = LATEST
) -> MiniMaxM3Sparse:
    """MiniMax-M3's sparse layers and indexer read from `cfg` (a `minimax_m3*` config's text fields), the one
    reading of `sparse_attention_config` (the layers in `kvsim.model.hf_layers`, the weights in
    `kvsim.model.params`, the top-k reads in `kvsim.model.timing`).

    Raises:
        InvalidArgumentError: what vLLM 0.33.0 refuses or builds otherwise than the config says, and what
            kvsim does not model, each named by its field: no `sparse_attention_config` (vLLM 0.33.0's
            MiniMaxM3TextConfig puts the preview's in its place; under 0.34.0 `minimax_m3_schema` gives one), a `sparse_attention_freq` that is not a list
            of the layers' 0 / 1; on a config with sparse layers: `sparse_num_index_heads` other than
            `num_key_value_heads` (vLLM asserts it), `sparse_index_dim` or `head_dim` other than 128 (the
            backends' only head size), `sparse_block_size` other than 128 (the kernels' `SPARSE_BLOCK_SIZE`),
            a `sparse_topk_blocks` below 1, `sparse_init_block` / `sparse_local_block` below 0,
            `sparse_score_type` other than max (the only one the kernels implement), a sparse layer whose
            `sparse_disable_index_value` entry is 0 (vLLM builds no index value or output projection). The
            last three (and `sparse_init_block`) only under a `release` before 0.34.0: vLLM 0.34.0 reads
            the config through transformers' `MiniMaxM3VLTextConfig`, whose `__post_init__` keeps the
            `sparse_attention_config` keys `MINIMAX_M3_FLAT_INDEX` names and `sparse_attention_freq` and
            drops the rest (`MINIMAX_M3_UNREAD`), so whatever they say, it builds the same model.
    """
    sparse = cfg.get("sparse_attention_config")
    if not isinstance(sparse, Mapping):
        raise InvalidArgumentError(
            f"model {where}: MiniMax-M3 without a 'sparse_attention_config' object: vLLM 0.33.0's "
            "MiniMaxM3TextConfig would put the preview checkpoint's in its place (57 sparse layers), which kvsim "
            "does not guess (vLLM 0.34.0's, transformers' MiniMaxM3VLTextConfig, makes every layer full "
            "attention, as vllm_release 0.34.0 sizes it); give the field (or transformers 5's 'layer_types')"
        )
    freq = sparse.get("sparse_attention_freq")
    if freq is None:
        freq = [0] * num_layers  # (`_sparse_attention_layer_ids`: no list, no sparse layer)
    if not isinstance(freq, list) or len(freq) != num_layers or not all(whole_at_least(f, 0) for f in freq):
        raise InvalidArgumentError(
            f"model {where}: field 'sparse_attention_config.sparse_attention_freq' must list the {num_layers} "
            "layers, each a whole number: 0 dense attention, any other sparse (top-k blocks and an index key "
            "cache; vLLM 0.33.0's _sparse_attention_layer_ids and 0.34.0's MiniMaxM3VLTextConfig take every "
            "entry that is not 0)"
        )
    layers = tuple(f != 0 for f in freq)
    if not any(layers):
        return MiniMaxM3Sparse(layers, 0, 0, 0)

    def field(key: str, default: Any = None, least: int = 1) -> int:
        v = sparse.get(key, default)
        if not whole_at_least(v, least):
            at = f" of at least {least}" if least else ""
            # (0.34.0 reads the legacy keys through transformers' flat fields, all but sparse_init_block)
            also = "; 0.34.0's reads no such field" if key in MINIMAX_M3_UNREAD else ", as 0.34.0's does"
            raise InvalidArgumentError(
                f"model {where}: field 'sparse_attention_config.{key}' {v!r} must be a whole number{at} "
                f"(vLLM 0.33.0's MiniMax-M3 reads it for its sparse layers{also})"
            )
        return int(v)

    reads_all = not at_least(release, "0.34.0")  # (0.34.0 drops MINIMAX_M3_UNREAD)
    heads, dim = field("sparse_num_index_heads"), field("sparse_index_dim")
    topk, block = field("sparse_topk_blocks"), field("sparse_block_size")
    if reads_all:
        field("sparse_init_block", 0, least=0)
    field("sparse_local_block", 0, least=0)
    kv_heads = cfg.get("num_key_value_heads")
    if kv_heads is None:
        raise InvalidArgumentError(
            f"model {where}: MiniMax-M3 without 'num_key_value_heads' (MiniMaxM3TextConfig's default, 4, which "
            "its index heads must equal, is not guessed): give the field"
        )
    if heads != kv_heads:
        raise InvalidArgumentError(
            f"model {where}: field 'sparse_attention_config.sparse_num_index_heads' {heads} is not the "
            f"{kv_heads} KV heads: vLLM 0.33.0's and 0.34.0's MinimaxM3QKVParallelLinearWithIndexer asserts "
            '"total_num_index_heads == total_num_kv_heads"'
        )
    head_dim = cfg.get("head_dim")
    for key, v in (("sparse_attention_config.sparse_index_dim", dim), ("head_dim", head_dim)):
        if v != MINIMAX_M3_HEAD:
            raise InvalidArgumentError(
                f"model {where}: field {key!r} {v!r}: vLLM 0.33.0's and 0.34.0's MiniMax-M3 sparse attention and "
                "indexer "
                f"backends take heads of {MINIMAX_M3_HEAD} only (get_supported_head_sizes)"
            )
    if block != MINIMAX_M3_BLOCK:
        raise InvalidArgumentError(
            f"model {where}: field 'sparse_attention_config.sparse_block_size' {block}: vLLM 0.33.0's and "
            f"0.34.0's MiniMax-M3 kernels score and attend blocks of {MINIMAX_M3_BLOCK} tokens whatever the config says "
            "(SPARSE_BLOCK_SIZE, models/minimax_m3/common/ops/sparse_attn.py): not modelled"
        )
    if not reads_all:
        return MiniMaxM3Sparse(layers, heads, dim, topk)
    score = sparse.get("sparse_score_type", "max")
    if score != "max":
        raise InvalidArgumentError(
            f"model {where}: field 'sparse_attention_config.sparse_score_type' {score!r}: vLLM 0.33.0's and "
            '0.34.0\'s MiniMax-M3 indexer kernels implement "max" only (models/minimax_m3/common/ops/index_topk.py): not modelled'
        )
    no_value = sparse.get("sparse_disable_index_value")
    if no_value is not None and (not isinstance(no_value, list) or len(no_value) != num_layers):
        raise InvalidArgumentError(
            f"model {where}: field 'sparse_attention_config.sparse_disable_index_value' must list the "
            f"{num_layers} layers"
        )
    if any(s and not (no_value or [0] * num_layers)[i] for i, s in enumerate(layers)):
        raise InvalidArgumentError(
            f"model {where}: field 'sparse_attention_config.sparse_disable_index_value' leaves a sparse layer's "
            "index value on: vLLM 0.33.0's and 0.34.0's MiniMax-M3 build no index value or output projection "
            "(their MiniMaxM3SparseAttention disables them on every sparse layer), which kvsim does not model"
        )
    return MiniMaxM3Sparse(layers, heads, dim, topk)


def index_key_bytes(model: Any, index_dim: int) -> int:
    """Bytes one token's index key takes in one layer on one GPU: DeepSeek-V3.2's (an MLA model) fp8 key and
    scales (`dsa_index_bytes`); MiniMax-M3's bf16 vector of `index_dim` values, 2 bytes each, one copy a GPU
    (`MiniMaxM3IndexerCache.get_kv_cache_spec`: an `MLAAttentionSpec` of 1 head of `sparse_index_dim`, no V,
    in bf16, the dtype `indexer_kv_dtype` auto resolves to: `AttentionConfig.resolve_indexer_kv_dtype("bf16")`
    in `nvidia/model.py`; 256 bytes for MiniMax-M3's 128)."""
    return dsa_index_bytes(index_dim) if model.is_mla else 2 * index_dim


def minimax_m3_block_size(model: Any, arch: str | None, kv_dtype: str | None, block_size: int | None) -> int:
    """MiniMax-M3's block size: `block_size` when given, else 128 (vLLM 0.33.0's
    `Platform._preferred_block_size_for_backends`: the least block every backend takes, its sparse attention's
    and indexer's only kernel block, 128, which its dense layers' backends take too; on ROCm as on CUDA).
    `kv_dtype` is the `kv_cache_dtype` asked (None: auto).

    Raises:
        InvalidArgumentError: a `kv_cache_dtype` its sparse backend does not take (fp16, fp32: not
            modelled) or a block size that is not a multiple of 128 (vLLM's `select_common_block_size` finds
            no kernel block for it: "No common block size").
    """
    where = f"model {model.name}" + (f" on {arch}" if arch else "")
    if kv_dtype is not None and kv_dtype not in MINIMAX_M3_KV_DTYPES:
        raise InvalidArgumentError(
            f"{where}: kv_cache_dtype {kv_dtype}: vLLM 0.33.0's and 0.34.0's MiniMax-M3 sparse attention backends take "
            "bfloat16 and fp8 (e4m3, e5m2) (MiniMaxM3SparseBackend.supported_kv_cache_dtypes) and, on NVIDIA's "
            "SM100 MSA backend, nvfp4 (MiniMaxM3SparseMSANvfp4Backend), which kvsim does not model: not modelled"
        )
    if block_size is None:
        return MINIMAX_M3_BLOCK
    if block_size % MINIMAX_M3_BLOCK:
        raise InvalidArgumentError(
            f"{where}: block_size {block_size} is not a multiple of {MINIMAX_M3_BLOCK}: vLLM 0.33.0's and "
            f"0.34.0's MiniMax-M3 sparse attention and indexer take kernel blocks of {MINIMAX_M3_BLOCK} tokens only (one sparse block "
            f'a page; "No common block size"): give a multiple of {MINIMAX_M3_BLOCK}, or leave it unset'
        )
    return block_size


def resolve(
    model: Any, arch: str | None, kv_cache_dtype: str | None, block_size: int | None, default: int = 16
) -> tuple[str | None, int]:
    """A sparse-attention model's KV cache dtype (`dsa_kv_dtype`: None or auto stays so unless vLLM picks
    another) and block size (`dsa_block_size`, which refuses what is not modelled; `default`, vLLM's
    `CacheConfig.DEFAULT_BLOCK_SIZE`, where it is unset) on `arch`; MiniMax-M3's (not MLA) its own
    (`minimax_m3_block_size`: the dtype as asked; 128 under either default)."""
    if not model.is_mla:
        return kv_cache_dtype, minimax_m3_block_size(model, arch, kv_cache_dtype, block_size)
    kv = dsa_kv_dtype(model, arch, kv_cache_dtype)
    dtype = model.kv_dtype if kv in (None, "auto") else kv
    return kv, dsa_block_size(model, arch, dtype, block_size, default)


def topk_indices_bytes(model: Any, max_num_batched_tokens: int, tp: int) -> int:
    """The top-k index buffer a sparse-attention model allocates as vLLM 0.33.0 builds it, so in "Model
    loading took" (0.33.0's v1/worker/gpu_model_runner.py line 5076, 0.34.0's v1/worker/gpu/model_runner.py
    `load_model`, read the memory the model's construction and
    loading kept): one int32 per `index_topk` key of each of `max_num_batched_tokens` tokens, shared by every
    indexer layer, whole on every GPU: DeepSeek-V3.2 and GLM-5 (`models/deepseek_v32/nvidia/model.py` lines
    192-197; `amd/model.py` lines 148-153), DeepSeek-V4 (`models/deepseek_v4/nvidia/model.py` lines 848-852);
    MiniMax-M3's, with a `sparse_attention_config`, per token (rounded up to 4) per index head of a GPU's
    share (at least one) per `sparse_topk_blocks` block (`models/minimax_m3/nvidia/model.py` lines 831-845).
    0 for other models."""
    cfg = model.config_fields
    kind = cfg.get("model_type")
    if kind in ("deepseek_v32", "glm_moe_dsa", "deepseek_v4"):
        topk = cfg.get("index_topk")
        return max_num_batched_tokens * int(topk) * 4 if whole_at_least(topk, 1) else 0
    if kind in MINIMAX_M3_TYPES:
        sparse = cfg.get("sparse_attention_config")
        if not isinstance(sparse, Mapping):
            return 0
        heads: Any = sparse.get("sparse_num_index_heads")
        blocks: Any = sparse.get("sparse_topk_blocks")
        if not whole_at_least(heads, 1) or not whole_at_least(blocks, 1):
            return 0
        return -(-max_num_batched_tokens // 4) * 4 * max(1, heads // tp) * blocks * 4
    return 0


# ShardQ (vLLM 0.34.0, `AttentionConfig.sparse_mla_shard_q`, True by default; `v1/attention/ops/shardq.py`): under
# tensor parallelism a sparse MLA layer's prefill is split over the TP ranks by token, through exchange buffers
# `allocate_shardq_buffers` allocates once, in symmetric memory, as the model is built. FlashMLA's sparse
# backend takes it only on its quantized (`fp8_ds_mla`) path below 32 heads a GPU
# (`flashmla_sparse.py` `MIN_HEADS_FOR_BF16_PREFILL`); on 10.x a bf16 cache goes to FlashAttention 4's sparse
# backend (a FlashInfer subclass) at up to 16 heads a GPU, else FlashMLA's (`platforms/cuda.py`).
SHARDQ_FLASHMLA_HEADS = 32
SHARDQ_FA4_HEADS = 16
SHARDQ_TYPES = frozenset({"deepseek_v32", "glm_moe_dsa"})


def shardq_bytes(
    model: Any,
    arch: str | None,
    kv_dtype: str | None,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
) -> int:
    """ShardQ's exchange buffers on one GPU, as vLLM 0.34.0 allocates them for DeepSeek-V3.2 and GLM-5
    (`shardq_eligible`: `models/deepseek_v32/attention.py`) at `tp` > 1 on CUDA, where the sparse MLA backend
    it picks takes ShardQ (`SparseMLACommonImpl.use_shardq`, `sparse_mla_attention.py`: `supports_shardq`,
    no context parallelism, no FULL graphs for mixed batches, none of which kvsim models):

    - compute capability 10.x: an fp8 cache on FlashInfer's sparse backend (`kv_dtype` fp8, which
      `dsa_kv_dtype` leaves there for it; the query then in fp8, `supports_quant_query_input`), `fp8_ds_mla`
      on FlashMLA's below 32 heads a GPU, a 16-bit cache at up to 16 heads a GPU (FlashAttention 4's);
    - 9.x: `fp8_ds_mla` on FlashMLA's below 32 heads a GPU (a 16-bit cache runs on FlashAttention's sparse
      backend, which does not take it);
    - none on 12.x (FlashInfer's SM120 backend does not) and ROCm.

    The buffers (`allocate_shardq_buffers`, `ShardQWorkspace`, one ubatch): q, `(ceil(max_num_batched_tokens
    / tp) + 2 · max_num_seqs) × heads × (kv_lora_rank + qk_rope_head_dim)` values (heads: the model's, a
    GPU's share times tp), 1 byte in fp8 else 2; out, `max_num_batched_tokens × heads a GPU × kv_lora_rank`
    16-bit values. `kv_dtype` is the cache's as `resolve` gives it (None or auto: the model's). 0 where
    none is allocated."""
    if tp < 2 or model.config_fields.get("model_type") not in SHARDQ_TYPES or not model.is_mla:
        return 0
    major = _sm_major(arch)
    if is_rocm(arch) or major not in (9, 10):
        return 0
    heads = model.num_attention_heads // tp
    dtype = model.kv_dtype if kv_dtype in (None, "auto") else str(kv_dtype)
    fp8_query = False
    if dtype == FP8_DS_MLA:
        takes = heads < SHARDQ_FLASHMLA_HEADS
    elif dtype.startswith("fp8"):
        takes = fp8_query = major == 10
    else:
        takes = major == 10 and heads <= SHARDQ_FA4_HEADS
    if not takes:
        return 0
    local = -(-max_num_batched_tokens // tp) + 2 * max_num_seqs
    q = local * heads * tp * (model.kv_lora_rank + model.qk_rope_head_dim) * (1 if fp8_query else 2)
    return q + max_num_batched_tokens * heads * model.kv_lora_rank * 2


__all__ = [
    "DSA_CUDA_BLOCK",
    "FP8_DS_MLA",
    "FP8_DS_MLA_BYTES",
    "MINIMAX_M3_BLOCK",
    "MINIMAX_M3_FLAT_INDEX",
    "MINIMAX_M3_TYPES",
    "MINIMAX_M3_UNREAD",
    "MiniMaxM3Sparse",
    "dsa_block_size",
    "dsa_index_bytes",
    "dsa_kv_dtype",
    "index_key_bytes",
    "minimax_m3_block_size",
    "minimax_m3_schema",
    "minimax_m3_sparse",
    "mla_entry_bits",
    "resolve",
    "shardq_bytes",
    "topk_indices_bytes",
]
