"""ModelOpt checkpoints as vLLM 0.33.0 loads them (`vllm/model_executor/layers/quantization/modelopt.py`;
DESIGN.md §Defaults and sizing, "Weights"): `FP8` and `NVFP4` give every linear group one format
(`ModelOptFp8Config`, `ModelOptNvFp4Config`); `MIXED_PRECISION` (`ModelOptMixedPrecisionConfig`, NVIDIA's
NVFP4 releases of Qwen3.6, Nemotron 3.5, MiniMax-M3) names each module's algorithm in its
`quantized_layers` map, which vLLM reads module by module as it builds the model (`MixedPrecision`). The
KV cache's dtype is read as vLLM resolves `--kv-cache-dtype auto` for any of them (`kv_algo`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.quant_format import (
    LINEAR_GROUPS,
    Format,
    Quantization,
    ignore_list,
    int_field,
    spellings,
)
from kvsim.model.releases import LATEST, at_least, said

# vLLM 0.33.0's fused modules (the models' `packed_modules_mapping`: Llama's and Qwen's `qkv_proj`,
# `gate_up_proj`; Qwen3.5's gated delta net `in_proj_qkvz`, `in_proj_ba`, `qwen3_5.py`; DeepSeek's MLA
# `fused_qkv_a_proj`) and the checkpoint's shards of each.
PACKED = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
    "in_proj_qkvz": ("in_proj_qkv", "in_proj_z"),
    "in_proj_ba": ("in_proj_b", "in_proj_a"),
    "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"),
}
# kvsim's names of fused modules (`kvsim.model.params`: by their first part) -> vLLM's.
_FUSED_NAME = {"q_proj": "qkv_proj", "gate_proj": "gate_up_proj"}
# The algorithms vLLM 0.33.0's MIXED_PRECISION builds a linear layer in (`LINEAR_ALGOS`) and a fused-MoE
# layer in (`get_quant_method`: FP8, NVFP4, W4A16_NVFP4, MXFP8 and the block-FP8 ones).
_BLOCK_FP8_MOE = ("FP8_PB_WO", "FP8_BLOCK_SCALES")
_NVFP4_FAMILY = ("NVFP4", "W4A16_NVFP4")
# vLLM's b12x GGML codecs (`vllm/utils/b12x.py` `B12X_BLOCK_CODECS`), upper-cased.
_B12X = ("IQ2_XS", "IQ2_XXS", "Q8_0")


def kv_algo(qc: dict[str, Any], inner: dict[str, Any], where: str) -> str:
    """A ModelOpt checkpoint's KV cache dtype (`fp8`, `nvfp4`, or `""`: the model's), as vLLM 0.33.0 and 0.34.0
    resolve `--kv-cache-dtype auto` for it
    (`get_kv_cache_quant_algo_string`, vllm/utils/torch_utils.py): the first set of `kv_cache_scheme` (the
    exporter's newer spelling, an 8-bit float scheme that is not dynamic: fp8) and `kv_cache_quant_algo`
    (`FP8`), the inner `quantization` object's before the outer's; a 4-bit float scheme, or `NVFP4`, is
    `nvfp4` (FlashInfer's NVFP4 pages: `kvsim.model.kv_dtype_values`). Another scheme or name vLLM warns of and
    serves in the model's dtype: so does kvsim."""
    kv = inner.get("kv_cache_scheme") or qc.get("kv_cache_scheme")
    name = "kv_cache_scheme"
    if not kv:
        kv = inner.get("kv_cache_quant_algo") or qc.get("kv_cache_quant_algo")
        name = "kv_cache_quant_algo"
    if kv and not isinstance(kv, (str, dict)):
        raise InvalidArgumentError(
            f"{where}: modelopt {name} {kv!r} must be an algorithm's name (FP8) or a scheme object"
        )
    if isinstance(kv, dict):
        if kv.get("dynamic") is False and kv.get("num_bits") == 8 and kv.get("type") == "float":
            return "fp8"
        kv = "nvfp4" if kv.get("num_bits") == 4 and kv.get("type") == "float" else None
    return kv.lower() if isinstance(kv, str) and kv.lower() in ("fp8", "nvfp4") else ""


# vLLM 0.34.0's CSF encodings of NVFP4 block scales (`CSF_SCALE_ENCODINGS`, quantization/utils/nvfp4_utils.py)
CSF_SCALE_ENCODINGS = ("csf", "csf_32x2_v1")


def scale_encoding_refusal(
    encoding: Any, where: str, field_name: str, algo: str, release: str = LATEST
) -> str | None:
    """kvsim's refusal of a ModelOpt `weight_scale_encoding` (`field_name`, on an `algo` config or layer) under
    vLLM `release`, or None where that release loads the checkpoint. The field is new in vLLM 0.34.0, which
    (`ModelOptNvFp4Config`; per layer in `ModelOptMixedPrecisionConfig.__init__`, for NVFP4 and W4A16_NVFP4
    only) takes the CSF encodings: the checkpoint stores each E4M3 block-scale matrix as several compressed
    streams, which the weights mapper (`csf_weights_transform`, nvfp4_utils.py) decodes on the CPU into the
    exact scales of an uncompressed checkpoint, so the GPU holds what it holds for uncompressed NVFP4 (None:
    sized as that); it refuses any other value. A release before 0.34.0 reads no such field and decodes no
    streams (the checkpoint's scales are not the tensors its NVFP4 layers load): refused."""
    text = f"{where}: modelopt {field_name} {encoding!r}"
    if encoding not in CSF_SCALE_ENCODINGS or algo not in _NVFP4_FAMILY:
        return (
            f"{text}: vLLM 0.34.0 refuses it (it takes {' or '.join(map(repr, CSF_SCALE_ENCODINGS))} on NVFP4 "
            f'weights only: "unsupported weight_scale_encoding"), and releases before it do not read the field'
        )
    if at_least(release, "0.34.0"):
        return None
    return (
        f"{text} (CSF-compressed NVFP4 block scales): {said(release)} reads no such field and decodes no "
        "streams, so its NVFP4 layers do not find the scales they load (vLLM 0.34.0 decodes them at load into "
        "the scales an uncompressed checkpoint holds: csf_weights_transform, nvfp4_utils.py): use a preset of "
        "0.34.0 or later, or an uncompressed checkpoint"
    )


def weight_only_nvfp4(qc: dict[str, Any]) -> bool:
    """Whether vLLM runs a ModelOpt `NVFP4` config as W4A16 (`ModelOptNvFp4Config._from_config`, modelopt.py,
    0.33.0 and 0.34.0): its `config_groups` (read at the config's top, never inside `quantization`) are a
    non-empty object every one of whose groups is an object without `input_activations` (absent or null),
    so the checkpoint quantizes weights only and vLLM takes `quant_method` W4A16_NVFP4: NVFP4's bytes,
    16-bit activations through Marlin (`Format.a16`: the 16-bit rate)."""
    groups = qc.get("config_groups")
    return (
        isinstance(groups, dict)
        and bool(groups)
        and all(isinstance(g, dict) and g.get("input_activations") is None for g in groups.values())
    )


def modelopt(qc: dict[str, Any], where: str, release: str = LATEST) -> Quantization:
    """A ModelOpt `quantization_config` (config.json's, flat) or `hf_quant_config.json` (nested in
    `quantization`), its fields read where vLLM's `ModelOptQuantConfigBase.from_config` reads them, as vLLM
    `release` loads it (`weight_scale_encoding`: `scale_encoding_refusal`)."""
    algo = qc.get("quant_algo")
    if isinstance(qc.get("quantization"), dict):  # hf_quant_config.json's nesting
        algo = algo or qc["quantization"].get("quant_algo")
    algo = str(algo).upper() if algo is not None else None  # (vLLM upper-cases it)
    inner = qc["quantization"] if isinstance(qc.get("quantization"), dict) else qc
    # (hf_quant_config.json's nesting keeps the list inside `quantization`)
    ignored = ignore_list(qc, where, "exclude_modules", "ignore") or ignore_list(
        inner, where, "exclude_modules"
    )
    algo_kv = kv_algo(qc, inner, where)
    kv, kv4 = algo_kv == "fp8", algo_kv == "nvfp4"
    if algo == "FP8":
        return Quantization(
            "modelopt",
            {g: Format("fp8", 8, "tensor") for g in LINEAR_GROUPS},
            tuple(ignored),
            kv,
            kv_nvfp4=kv4,
        )
    if algo == "NVFP4":
        encoding = qc.get("weight_scale_encoding")
        if encoding is None:  # (vLLM reads the nested one only where the top one is absent or null)
            encoding = inner.get("weight_scale_encoding")
        refused = (
            None
            if encoding is None
            else scale_encoding_refusal(encoding, where, "weight_scale_encoding", "NVFP4", release)
        )
        if refused:
            raise InvalidArgumentError(refused)
        group = int_field(qc if "group_size" in qc else inner, where, "group_size", default=16)
        if group != 16:
            raise InvalidArgumentError(f"{where}: NVFP4 group_size {group}: vLLM's NVFP4 takes groups of 16")
        fmt = Format("nvfp4", 4, a16=weight_only_nvfp4(qc))
        return Quantization("modelopt_fp4", {g: fmt for g in LINEAR_GROUPS}, tuple(ignored), kv, kv_nvfp4=kv4)
    if algo == "MIXED_PRECISION":
        mixed = _mixed(qc, inner, where, release)
        return Quantization("modelopt_mixed", {}, tuple(ignored), kv, mixed, kv_nvfp4=kv4)
    raise InvalidArgumentError(
        f"{where}: modelopt quant_algo {algo!r} is not modelled by kvsim (FP8, NVFP4 and MIXED_PRECISION are)"
    )


def _mixed(qc: dict[str, Any], inner: dict[str, Any], where: str, release: str) -> MixedPrecision:
    """The `quantized_layers` map of a MIXED_PRECISION config, as `ModelOptMixedPrecisionConfig._from_config`
    and `__init__` read it: inside `quantization` where the config nests it, else at its top; each entry's
    `quant_algo` upper-cased; the NVFP4 group size the config's own `group_size`, else the first NVFP4 or
    W4A16_NVFP4 entry's (16 where it gives none); one block size for every block-FP8 MoE entry (its
    `group_size`, 128 where none)."""
    layers = inner.get("quantized_layers")
    if not isinstance(layers, dict) or not layers:
        raise InvalidArgumentError(
            f'{where}: modelopt MIXED_PRECISION without quantized_layers (vLLM: "MIXED_PRECISION quant_algo '
            "requires a non-empty 'quantized_layers' mapping in the quantization config.\")"
        )
    algos: dict[str, str] = {}
    for key, info in layers.items():
        if not isinstance(info, dict) or not isinstance(info.get("quant_algo"), str):
            raise InvalidArgumentError(
                f"{where}: modelopt quantized_layers[{key!r}] {info!r} must be an object with a quant_algo name"
            )
        size = info.get("group_size", 16)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidArgumentError(
                f"{where}: modelopt quantized_layers[{key!r}].group_size {size!r} must be a whole number of at "
                "least 1"
            )
        algos[str(key)] = info["quant_algo"].upper()
        encoding = info.get("weight_scale_encoding")
        field_name = f"quantized_layers[{key!r}].weight_scale_encoding"
        refused = (
            None
            if encoding is None
            else scale_encoding_refusal(encoding, where, field_name, algos[str(key)], release)
        )
        if refused:
            raise InvalidArgumentError(refused)
    group = inner.get("group_size")
    if group is None:
        group = next(
            (
                info.get("group_size", 16)
                for info in layers.values()
                if info["quant_algo"].upper() in _NVFP4_FAMILY
            ),
            16,
        )
    if any(a in _NVFP4_FAMILY for a in algos.values()) and group != 16:
        raise InvalidArgumentError(
            f"{where}: modelopt MIXED_PRECISION NVFP4 group_size {group!r}: vLLM's NVFP4 takes groups of 16"
        )
    blocks = sorted(
        {
            int(info.get("group_size", 128))
            for info in layers.values()
            if info["quant_algo"].upper() in _BLOCK_FP8_MOE
        }
    )
    if len(blocks) > 1:
        raise InvalidArgumentError(
            f'{where}: modelopt MIXED_PRECISION block-FP8 group sizes {blocks} (vLLM: "MIXED_PRECISION currently '
            f'requires all block-FP8 MoE layers to use one group_size, got {blocks}.")'
        )
    return MixedPrecision(algos, blocks[0] if blocks else 128, where)


@dataclass(frozen=True, eq=False)
class MixedPrecision:
    """A MIXED_PRECISION checkpoint's `quantized_layers`: each module's algorithm, found as vLLM 0.33.0's
    `ModelOptMixedPrecisionConfig._resolve_quant_algo` finds it for the module's prefix, and the format
    `get_quant_method` builds it in (`format_of`).

    Attributes:
        algos: the checkpoint's module names -> algorithm (upper-cased), in the file's order.
        block: the block-FP8 MoE layers' block size (`Fp8Config` of `block` x `block`).
        where: the file, for errors.
    """

    algos: dict[str, str]
    block: int = 128
    where: str = ""
    # each dotted prefix of a name in `algos` (not the name itself) -> the algorithm of the first name under it
    _under: dict[str, str] = field(default_factory=dict, repr=False)
    _cache: dict[tuple[str, str, tuple[str, ...]], Format | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for key, algo in self.algos.items():
            parts = key.split(".")
            for i in range(1, len(parts)):
                self._under.setdefault(".".join(parts[:i]), algo)

    def algo_of(self, name: str, aliases: tuple[str, ...] = ()) -> str | None:
        """The algorithm vLLM resolves for the module it calls `name` (kvsim's name of a fused module, by its
        first part, taken as vLLM's: `self_attn.q_proj` -> `self_attn.qkv_proj`), or None where the map
        names it nowhere. In vLLM's order (`_resolve_quant_algo`): the name itself; a fused module's
        shards (`PACKED`; all those named must agree, else vLLM raises "Mixed quant_algo within fused
        layer": refused likewise); the first name below it (a fused MoE's `mlp.experts` where the map
        names `mlp.experts.0.w1`); for `….experts`, the first name below its parent (`mlp.gate_proj`
        for `mlp.experts`). Every name in all its spellings (`spellings`: vLLM maps the map's names with
        the model's `hf_to_vllm_mapper` and tries the `language_model` candidates and `lm_head`)."""
        base, _, leaf = name.rpartition(".")
        leaf = _FUSED_NAME.get(leaf, leaf)
        name = f"{base}.{leaf}" if base else leaf
        names = spellings(name, aliases)
        if name.endswith(".lm_head"):
            names = (*names, "lm_head")
        for n in names:
            if n in self.algos:
                return self.algos[n]
        shards = PACKED.get(leaf)
        if shards:
            found = {
                self.algos[f"{b}.{s}"]
                for b in spellings(base, aliases)
                for s in shards
                if f"{b}.{s}" in self.algos
            }
            if len(found) > 1:
                raise InvalidArgumentError(
                    f"{self.where}: modelopt quantized_layers give the shards of {name} ({', '.join(shards)}) "
                    f'different algorithms {sorted(found)}: vLLM 0.33.0 and 0.34.0 refuse it ("Mixed quant_algo within '
                    f'fused layer {name}: ... All shards must use the same quantization.")'
                )
            if found:
                return found.pop()
        for n in names:
            if n in self._under:
                return self._under[n]
        if name.endswith(".experts"):
            for n in spellings(name[: -len(".experts")], aliases):
                if n in self._under:
                    return self._under[n]
        return None

    def format_of(self, group: str, name: str, aliases: tuple[str, ...]) -> Format | None:
        """The format vLLM 0.33.0 builds module `name` of `group` in (`get_quant_method`): a linear layer
        (attention, MLP, shared experts, `lm_head`) in its algorithm's format, unquantized where the map
        names it nowhere; the routed experts (a fused-MoE layer) likewise with the MoE methods; embeddings
        and routers unquantized (vLLM builds no quantized method for them here: `VocabParallelEmbedding`
        takes one only for the b12x codecs; the MoE models build their gates without the quant config).

        Raises:
            InvalidArgumentError: an algorithm kvsim has no bytes for (the b12x codecs), or one vLLM
                builds no quantized layer of there, named with the module.
        """
        if group not in (*LINEAR_GROUPS, "lm_head"):
            return None
        key = (group, name, aliases)
        if key not in self._cache:
            algo = self.algo_of(name, aliases)
            self._cache[key] = None if algo is None else self._format(algo, group == "experts", name)
        return self._cache[key]

    def _format(self, algo: str, experts: bool, name: str) -> Format:
        if algo == "NVFP4":
            return Format("nvfp4", 4)
        if algo == "W4A16_NVFP4":
            return Format("nvfp4", 4, a16=True)
        if algo == "FP8":
            return Format("fp8", 8, "tensor")
        if algo == "MXFP8":  # (`mxfp8_config`: `ModelOptMxFp8LinearMethod`, `ModelOptMxFp8FusedMoE`)
            return Format("mxfp8", 8)
        if experts and algo in _BLOCK_FP8_MOE:  # (`Fp8MoEMethod` of `fp8_block_config`)
            return Format("fp8", 8, "block", (self.block, self.block))
        if not experts and algo == "FP8_PB_WO":  # (`kFp8Static128BlockSym`)
            return Format("fp8", 8, "block", (128, 128))
        if not experts and algo == "FP8_PER_CHANNEL_PER_TOKEN":
            return Format("fp8", 8, "channel")
        what = f"{self.where}: modelopt MIXED_PRECISION quant_algo {algo!r} for {name}"
        if algo in _B12X:
            raise InvalidArgumentError(
                f"{what}: not modelled by kvsim (it has no byte format for {algo}: FP8, FP8_PER_CHANNEL_PER_TOKEN, "
                "FP8_PB_WO, MXFP8, NVFP4, W4A16_NVFP4 and block-FP8 experts are)"
            )
        layer = "fused-MoE" if experts else "linear"
        raise InvalidArgumentError(
            f"{what}: vLLM 0.33.0's and 0.34.0's ModelOptMixedPrecisionConfig.get_quant_method build no quantized {layer} "
            "layer of it (it would build the layer unquantized, which the checkpoint's quantized tensors do not "
            "fit): not modelled by kvsim"
        )


__all__ = [
    "CSF_SCALE_ENCODINGS",
    "PACKED",
    "MixedPrecision",
    "kv_algo",
    "modelopt",
    "scale_encoding_refusal",
    "weight_only_nvfp4",
]
