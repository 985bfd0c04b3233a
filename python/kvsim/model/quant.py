"""Weights as vLLM loads them: a checkpoint's `quantization_config` (or vLLM's `--quantization`) priced
module group by module group (DESIGN.md §Defaults and sizing, "Weights"): the methods' parsers
(`from_config`; ModelOpt's in `kvsim.model.quant_modelopt`) and the checks vLLM makes of a quantization
on a model. The byte formats and `Quantization` are `kvsim.model.quant_format`'s, re-exported here.

What stays in the checkpoint's dtype: the embeddings and norms always, the `lm_head` unless an AWQ or GPTQ
checkpoint says `lm_head: true` (or a ModelOpt MIXED_PRECISION map names it), the MoE routers (vLLM's MoE
models build their gate without the quant config), and every module the checkpoint's `ignore` /
`modules_to_not_convert` / `exclude_modules` / `ignored_layers` names. MXFP4 quantizes only the routed
experts (its linear method is the unquantized one). ModelOpt's MIXED_PRECISION prices each module in each
layer in the format its `quantized_layers` map gives it (`kvsim.model.quant_modelopt.MixedPrecision`).
A checkpoint that quantizes its KV cache to fp8 (modelopt's `kv_cache_scheme` of 8-bit floats, not dynamic,
or `kv_cache_quant_algo: FP8`; compressed-tensors' 8-bit float `kv_cache_scheme`) makes vLLM's
`--kv-cache-dtype auto` fp8. bitsandbytes is refused: vLLM 0.33.0 has no such method.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.breakdown import GROUPS, Breakdown
from kvsim.model.quant_ct import CT_ACTIVATION_FORMATS, CtArgs, int_with_inputs, wna8o8
from kvsim.model.quant_format import (
    LINEAR_GROUPS,
    NONE,
    Format,
    Quantization,
    ignore_list,
    int_field,
    is_ignored,
)
from kvsim.model.quant_modelopt import modelopt
from kvsim.model.quant_transform import ct_transforms
from kvsim.model.releases import LATEST

# vLLM's `--quantization` values kvsim models: `fp8` quantizes an unquantized checkpoint at load time
# (per tensor); the others name a quantized checkpoint's own method (vLLM's aliases included).
QUANTIZATION_CHOICES = (
    "fp8",
    "awq",
    "awq_marlin",
    "gptq",
    "gptq_marlin",
    "compressed-tensors",
    "mxfp4",
    "modelopt",
    "modelopt_fp4",
    "modelopt_mixed",
)
# (vLLM's override of a ModelOpt checkpoint's method takes any of the three: `_verify_quantization`)
_ALIASES = {
    "awq_marlin": "awq",
    "gptq_marlin": "gptq",
    "modelopt_fp4": "modelopt",
    "modelopt_mixed": "modelopt",
}


# A method as said, with its article ("an AWQ checkpoint"): the names spoken as letters, as vLLM's docs
# write them.
_SPOKEN = {
    "fp8": "an FP8",
    "awq": "an AWQ",
    "awq_marlin": "an AWQ",
    "gptq": "a GPTQ",
    "gptq_marlin": "a GPTQ",
    "compressed-tensors": "a compressed-tensors",
    "mxfp4": "an MXFP4",
    "modelopt": "a ModelOpt",
    "modelopt_fp4": "a ModelOpt",
    "modelopt_mixed": "a ModelOpt",
}


def _group_size(qc: dict[str, Any], where: str, *keys: str, default: int | None = None) -> int:
    """An integer format's `group_size`: inputs per scale, or -1 for one scale per output row (per channel)."""
    group = int_field(qc, where, *keys, default=default)
    if group < 1 and group != -1:
        key = next((k for k in keys if qc.get(k) is not None), keys[0])
        raise InvalidArgumentError(
            f"{where}: quantization_config.{key} {group} must be at least 1 (inputs per scale) or -1 (per channel)"
        )
    return group


def _block(block: Any) -> bool:
    """Whether `block` is an fp8 block shape: two integers of at least 1."""
    return (
        isinstance(block, list)
        and len(block) == 2
        and all(not isinstance(x, bool) and isinstance(x, int) and x > 0 for x in block)
    )


def _fp8(qc: dict[str, Any], where: str) -> Quantization:
    block = qc.get("weight_block_size")
    if block is not None:
        if not _block(block):
            raise InvalidArgumentError(f"{where}: weight_block_size {block!r} must be two whole numbers")
        fmt = Format("fp8", 8, "block", (block[0], block[1]))
    else:
        fmt = Format("fp8", 8, "tensor")
    ignored = ignore_list(qc, where, "ignored_layers", "modules_to_not_convert")
    return Quantization("fp8", {g: fmt for g in LINEAR_GROUPS}, tuple(ignored))


def _get_from_keys(qc: dict[str, Any], where: str, *keys: str) -> str:
    """The first of `keys` the config has, whatever its value, as vLLM's `get_from_keys` reads a quantization
    config (`base_config.py`); none of them is vLLM's refusal, in its words."""
    key = next((k for k in keys if k in qc), None)
    if key is None:
        raise InvalidArgumentError(
            f'{where}: quantization_config has no {" or ".join(repr(k) for k in keys)} (vLLM: "Cannot find '
            f"any of {list(keys)} in the model's quantization config.\")"
        )
    return key


def _awq(qc: dict[str, Any], where: str) -> Quantization:
    """An AWQ checkpoint as vLLM 0.33.0 loads it (`auto_awq.py` `AutoAWQConfig`, its one AWQ method): 4-bit
    weights (`TYPE_MAP`; 8-bit is refused) with zero points, `w_bit`/`bits`, `q_group_size`/`group_size`
    and `zero_point` read as vLLM reads them (each must be there), the `lm_head` quantized when the config
    says `lm_head: true` (`get_quant_method` takes `ParallelLMHead` then)."""
    found = [_get_from_keys(qc, where, *keys) for keys in (("w_bit", "bits"), ("q_group_size", "group_size"))]
    _get_from_keys(qc, where, "zero_point")
    for key in found:
        if qc[key] is None:
            raise InvalidArgumentError(f"{where}: quantization_config.{key} is null (vLLM reads it as given)")
    bits = int_field(qc, where, found[0])
    group = _group_size(qc, where, found[1])
    if bits != 4:
        raise InvalidArgumentError(
            f'{where}: AWQ bits {bits}: vLLM 0.33.0 and 0.34.0 load 4-bit AWQ only ("Unsupported num_bits = {bits}. '
            'Supported: 4.")'
        )
    if qc.get("zero_point") is not True:
        raise InvalidArgumentError(
            f"{where}: AWQ zero_point {qc.get('zero_point')!r}: vLLM 0.33.0's and 0.34.0's AWQ take zero points only"
        )
    fmt = Format("int", bits, "group", group=group, zeros=True)
    ignored = ignore_list(qc, where, "modules_to_not_convert")
    formats = {g: fmt for g in LINEAR_GROUPS}
    if qc.get("lm_head"):  # (vLLM tests it for truth, as GPTQ's)
        formats["lm_head"] = fmt
    return Quantization("awq", formats, tuple(ignored))


def _gptq(qc: dict[str, Any], where: str) -> Quantization:
    """A GPTQ checkpoint as vLLM 0.33.0 loads it (`auto_gptq.py` `AutoGPTQConfig`, its one GPTQ method):
    symmetric 4- or 8-bit weights (`TYPE_MAP`) in groups Marlin takes (-1, 32, 64 or 128:
    `verify_marlin_supported`), without group activation ordering (`normalize_and_validate_gptq_desc_act`:
    `desc_act` with groups is "no longer supported"), so no `g_idx`. `bits`, `group_size`, `desc_act`
    and `sym` are read as vLLM reads them (`get_from_keys`: each must be there)."""
    for key in ("bits", "group_size", "desc_act", "sym"):
        _get_from_keys(qc, where, key)
    if qc["group_size"] is None:
        raise InvalidArgumentError(
            f"{where}: quantization_config.group_size is null: vLLM 0.33.0's and 0.34.0's GPTQ kernels take -1, 32, 64 or 128 "
            '("Marlin does not support group_size = None")'
        )
    bits = int_field(qc, where, "bits")
    group = _group_size(qc, where, "group_size", default=-1)
    sym, desc_act = qc["sym"], qc["desc_act"]
    if not isinstance(sym, bool) or not isinstance(desc_act, bool):
        raise InvalidArgumentError(f"{where}: quantization_config.sym and desc_act must be true or false")
    if (bits, sym) not in ((4, True), (8, True)):
        raise InvalidArgumentError(
            f"{where}: GPTQ bits {bits}, sym {sym}: vLLM 0.33.0 and 0.34.0 load symmetric 4- and 8-bit GPTQ only "
            f'("Unsupported quantization config: bits={bits}, sym={sym}")'
        )
    if desc_act and group != -1:
        raise InvalidArgumentError(
            f"{where}: quantization_config.desc_act true with group_size {group}: vLLM 0.33.0 and 0.34.0 refuse it "
            '("GPTQ group activation ordering (desc_act=True) is no longer supported")'
        )
    if group not in (-1, 32, 64, 128):
        raise InvalidArgumentError(
            f"{where}: GPTQ group_size {group}: vLLM 0.33.0's and 0.34.0's GPTQ kernels take -1, 32, 64 or 128 "
            f'("Marlin does not support group_size = {group}")'
        )
    if qc.get("dynamic"):
        raise InvalidArgumentError(
            f"{where}: quantization_config.dynamic (per-module GPTQ overrides) is not modelled by kvsim"
        )
    fmt = Format("int", bits, "group", group=group, zeros=True)
    ignored = ignore_list(qc, where, "modules_to_not_convert")
    formats = {g: fmt for g in LINEAR_GROUPS}
    if qc.get("lm_head"):
        formats["lm_head"] = fmt
    return Quantization("gptq", formats, tuple(ignored))


def _mxfp4(qc: dict[str, Any], where: str) -> Quantization:
    ignored = ignore_list(qc, where, "modules_to_not_convert", "ignored_layers")
    return Quantization("mxfp4", {"experts": Format("mxfp4", 4)}, tuple(ignored))


def _ct_format(weights: dict[str, Any], fmt_name: str, where: str) -> Format:
    """One compressed-tensors weights scheme, its strings read as compressed-tensors' `QuantizationArgs`
    validates them (lower-cased; an `actorder` of true is group ordering)."""

    def lower(v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v

    bits = weights.get("num_bits")
    kind = lower(weights.get("type"))
    strategy = lower(weights.get("strategy"))
    group = weights.get("group_size") or 0
    actorder = "group" if weights.get("actorder") is True else lower(weights.get("actorder"))
    if kind == "float" and bits == 8:
        if strategy == "block":
            block = weights.get("block_structure") or [128, 128]
            if not _block(block):
                raise InvalidArgumentError(
                    f"{where}: compressed-tensors block_structure {block!r} must be two whole numbers of at least 1"
                )
            return Format("fp8", 8, "block", (block[0], block[1]))
        if strategy in ("tensor", "channel"):
            return Format("fp8", 8, strategy)
    if kind == "float" and bits == 4 and strategy in ("tensor_group", "group") and group == 16:
        return Format("nvfp4", 4)
    if (
        kind == "float"
        and bits == 4
        and strategy == "group"
        and group == 32
        and weights.get("symmetric", True)
    ):
        return Format("mxfp4", 4)  # vLLM's `_is_mxfp4` (compressed_tensors.py): W4A4Mxfp4, E8M0 scales per 32
    if kind == "int" and bits in (4, 8) and strategy in ("group", "channel"):
        if strategy == "group" and (isinstance(group, bool) or not isinstance(group, int) or group < 1):
            raise InvalidArgumentError(
                f"{where}: compressed-tensors group_size {weights.get('group_size')!r} must be a whole number of at "
                "least 1 with strategy 'group'"
            )
        zeros = not weights.get("symmetric", True)
        if actorder in ("group", "dynamic"):
            raise InvalidArgumentError(
                f"{where}: compressed-tensors actorder {weights['actorder']!r}: vLLM 0.33.0 and 0.34.0 refuse it "
                '("Compressed-tensors group/dynamic activation ordering ... is no longer supported")'
            )
        if bits == 8 and strategy == "channel" and fmt_name == "int-quantized":
            return Format("fp8", 8, "channel")  # int8 w8a8: a byte per weight, an fp32 scale per row
        return Format("int", bits, strategy, group=group if strategy == "group" else -1, zeros=zeros)
    raise InvalidArgumentError(
        f"{where}: compressed-tensors weights {weights!r} (format {fmt_name!r}) are not modelled by kvsim "
        "(fp8 per tensor / channel / block, nvfp4, mxfp4, int4 / int8 per group or channel are)"
    )


def _compressed_tensors(qc: dict[str, Any], where: str, release: str = LATEST) -> Quantization:
    kv_scheme = qc.get("kv_cache_scheme")
    if kv_scheme is not None and not (
        isinstance(kv_scheme, dict) and kv_scheme.get("num_bits") == 8 and kv_scheme.get("type") == "float"
    ):
        raise InvalidArgumentError(
            f"{where}: quantization_config.kv_cache_scheme {kv_scheme!r} is not modelled by kvsim (an 8-bit float "
            "scheme, an fp8 KV cache, is)"
        )
    ct_transforms(qc.get("transform_config"), where)
    groups_cfg = qc.get("config_groups")
    if not isinstance(groups_cfg, dict) or not groups_cfg:
        raise InvalidArgumentError(f"{where}: compressed-tensors quantization_config has no config_groups")
    if len(groups_cfg) > 1:
        raise InvalidArgumentError(
            f"{where}: compressed-tensors with {len(groups_cfg)} config_groups (mixed schemes) is not modelled by "
            "kvsim"
        )
    (scheme,) = groups_cfg.values()
    if not isinstance(scheme, dict):
        raise InvalidArgumentError(
            f"{where}: compressed-tensors config group {scheme!r} must be a JSON object"
        )
    targets = scheme.get("targets") or []
    if "Linear" not in targets:
        raise InvalidArgumentError(
            f"{where}: compressed-tensors targets {targets!r}: kvsim models a scheme targeting 'Linear'"
        )
    weights = scheme.get("weights")
    if not isinstance(weights, dict):
        raise InvalidArgumentError(f"{where}: compressed-tensors config group has no weights scheme")
    fmt_name = _ct_format_name(scheme, qc)
    fmt = _ct_format(weights, fmt_name, where)
    fmt = wna8o8(scheme, fmt_name, fmt, where, release) or int_with_inputs(
        scheme, fmt_name, fmt, where, release
    )
    # vLLM 0.33.0's config reader (`_quantization_scheme_map_from_config`, compressed_tensors.py:360-369)
    # asserts float weights where the group's format quantizes activations and the group gives no
    # input_activations (W8A16 fp8 is the one such scheme it takes), for every model.
    w_type = CtArgs.of(weights).type
    if fmt_name in CT_ACTIVATION_FORMATS and not scheme.get("input_activations") and w_type != "float":
        raise InvalidArgumentError(
            f"{where}: compressed-tensors {w_type!r} weights without input_activations in format {fmt_name!r}: "
            "vLLM 0.33.0 and 0.34.0 assert float weights there (`assert ...weights.type == QuantizationType.FLOAT` in "
            "_quantization_scheme_map_from_config, compressed_tensors.py)"
        )
    ignored = ignore_list(qc, where, "ignore")
    return Quantization(
        "compressed-tensors",
        {g: fmt for g in LINEAR_GROUPS},
        tuple(ignored),
    )


def ct_scheme(qc: Any) -> dict[str, Any]:
    """A compressed-tensors `quantization_config`'s one config group (`_compressed_tensors` takes exactly
    one), or {} when it has none, several, or one that is not an object."""
    groups = qc.get("config_groups") if isinstance(qc, dict) else None
    schemes = list(groups.values()) if isinstance(groups, dict) else []
    return schemes[0] if len(schemes) == 1 and isinstance(schemes[0], dict) else {}


def _ct_format_name(scheme: dict[str, Any], qc: dict[str, Any]) -> str:
    """The format vLLM 0.33.0 reads for config group `scheme`: its own, else the config's global one
    (`_quantization_scheme_map_from_config`, compressed_tensors.py:349-356); "" when neither is given."""
    own = scheme.get("format")
    return str(own if own is not None else qc.get("format") or "")


def _ct_moe_refusal(scheme: dict[str, Any], fmt_name: str) -> str | None:
    """vLLM 0.33.0's refusal of one compressed-tensors config group on a fused-MoE layer, else None: the
    order `CompressedTensorsMoEMethod.get_moe_method` (`compressed_tensors_moe.py:66-201`) tries its MoE
    methods in, with the predicates of `CompressedTensorsConfig` (`compressed_tensors.py`). Its GPU-specific
    picks change no outcome (the sm90 / sm100 fp8 predicates take what its generic fp8 W8A8 one takes;
    ROCm's FlyDSL is one of its WNA16 methods); where kvsim cannot tell (MXFP8's uint8 scales), it accepts.
    A method that runs on a CPU only (the W4A8 int8 one) is a refusal: kvsim models GPUs."""
    weights, inputs = scheme.get("weights"), scheme.get("input_activations")
    if not isinstance(weights, dict) or (inputs and not isinstance(inputs, dict)):
        return None
    w = CtArgs.of(weights)
    # (vLLM keeps the input scheme only when it is given: `_quantization_scheme_map_from_config`)
    a = CtArgs.of(inputs) if inputs else None
    if a is None and w.type != "float" and fmt_name in CT_ACTIVATION_FORMATS:
        return None  # (vLLM asserts float weights here, for every model: refused in `_compressed_tensors`)
    if w.type == "float" and w.symmetric and w.group == 32 and w.strategy == "group" and w.bits in (4, 8):
        return None  # MXFP4 (W4A4, W4A8) and MXFP8 methods (MXFP8 also wants uint8 scales: not read)
    if w.strategy in ("channel", "group") and a is None and not w.dynamic:  # `_is_wNa16_group_channel`
        if w.bits in range(2, 9) and fmt_name == "pack-quantized":
            return None  # CompressedTensorsWNA16MoEMethod
        return (
            f'it takes them as weight-only (WNA16) and raises "For Fused MoE layers, only format: '
            f'pack-quantized and bits: [2, 3, 4, 5, 6, 7, 8] is supported ..." (format {fmt_name!r}, '
            f"bits {w.bits})"
        )
    nvfp4 = ("tensor_group", "float", 4, 16, True)
    if (w.strategy, w.type, w.bits, w.group, w.symmetric) == nvfp4:
        if a is None or (a.strategy, a.type, a.bits, a.group, a.symmetric) == nvfp4:
            return None  # CompressedTensorsW4A4Nvfp4MoEMethod (NVFP4A16 without inputs)
        return (
            f'it raises "For NVFP4 weights, input quantization must also be NVFP4 format or None for '
            f'NVFP4A16, found ..." ({a.describe()} inputs)'
        )
    static_w = not w.dynamic
    if (
        a is not None
        and w.type == "float"
        and a.type == "float"
        and w.symmetric
        and static_w
        and w.strategy in ("tensor", "channel", "block")
        and (bool(a.dynamic) or (a.symmetric and a.strategy == "tensor"))
    ):
        return None  # `_is_fp8_w8a8`: CompressedTensorsW8A8Fp8MoEMethod
    if a is None:
        return (
            "no method takes weights without input_activations there: its `_is_dynamic_token_w8a8` "
            "(compressed_tensors.py) reads the absent input scheme's num_bits and fails (AttributeError "
            "\"'NoneType' object has no attribute 'num_bits'\") before its \"Unsupported FusedMoe scheme\""
        )
    token = a.strategy == "token" and static_w and bool(a.dynamic)
    if token and w.bits == a.bits == 8 and w.strategy in ("tensor", "channel") and w.symmetric:
        return None  # `_is_dynamic_token_w8a8`: CompressedTensorsW8A8Int8MoEMethod
    if token and w.type == "int" and w.bits == 4 and a.bits == 8 and w.symmetric:
        if a.type == "float" and w.strategy == "group" and a.symmetric:
            return None  # `_is_fp8_w4a8`: CompressedTensorsW4A8Fp8MoEMethod
        if a.type == "int" and w.strategy in ("group", "channel"):  # `_is_dynamic_token_w4a8_int`
            return (
                "its one method for it, CompressedTensorsW4A8Int8MoEMethod (compressed_tensors_moe_w4a8_int8.py), "
                "is CPU-only: its backend oracle (fused_moe/oracle/w4a8_int8.py) offers CPU_INT4 on a CPU "
                'platform only and raises "W4A8 Int8 MoE is only supported on CPU platforms" on a GPU'
            )
    return 'it raises "Unsupported FusedMoe scheme: ..."'


def check_moe_scheme(q: Quantization, b: Breakdown, qc: Any, where: str) -> None:
    """A compressed-tensors checkpoint's scheme on its routed experts (`b`'s `experts`, when `q` quantizes
    them), as vLLM 0.33.0 picks their fused-MoE method (`_ct_moe_refusal`): its dense layers' linear
    methods take schemes its MoE methods do not (fp8 weights without input quantization, W8A16, on a
    dense model load; on the experts they are refused). Not checked where the ignore list leaves every
    layer's experts unquantized (`Quantization.quantized`).

    Raises:
        InvalidArgumentError: naming the scheme and vLLM's words.
    """
    if (
        q.method != "compressed-tensors"
        or "experts" not in q.formats
        or not any(q.quantized(m, b, "experts") for m in b.matrices["experts"])
    ):
        return
    scheme = ct_scheme(qc)
    if not scheme:
        return
    fmt_name = _ct_format_name(scheme, qc)
    vllm = _ct_moe_refusal(scheme, fmt_name)
    if vllm is None:
        return
    w = CtArgs.of(scheme["weights"])
    inputs = scheme.get("input_activations")
    ins = f"{CtArgs.of(inputs).describe()} input_activations" if inputs else "no input_activations"
    raise InvalidArgumentError(
        f"{where}: compressed-tensors {w.describe()} weights with {ins} (format {fmt_name!r}) on the routed "
        f"experts: vLLM 0.33.0 and 0.34.0 have no fused-MoE method on a GPU for that scheme (CompressedTensorsMoEMethod."
        f"get_moe_method, compressed_tensors_moe.py): {vllm}"
    )


_PARSERS = {
    "fp8": _fp8,
    "awq": _awq,
    "gptq": _gptq,
    "mxfp4": _mxfp4,
    "modelopt": modelopt,
    "compressed-tensors": _compressed_tensors,
}


def from_config(qc: Any, where: str, b: Breakdown | None = None, release: str = LATEST) -> Quantization:
    """The `Quantization` a checkpoint's `quantization_config` describes (`where` names the file in errors),
    on the model of breakdown `b` where given (`Quantization.for_model`: its ignore list read module by
    module, layer by layer); without `b`, every group the method quantizes is kept in `formats` (the ignore
    list still prices each matrix: `Quantization.weight_bytes`; a ModelOpt MIXED_PRECISION one has no
    group formats until read on a model, its `modules` pricing each matrix). A ModelOpt config without `quant_method` (an
    `hf_quant_config.json`, whose `producer` is modelopt) takes vLLM's from its `quant_algo`
    (`ModelArchConfigConvertor._normalize_quantization_config`). `release` is the vLLM release whose reading
    is followed where releases differ (`kvsim.model.releases`: ModelOpt's `weight_scale_encoding`,
    compressed-tensors' int8-stored 4-bit values, `kvsim.model.quant_ct`).

    Raises:
        InvalidArgumentError: a method or a field kvsim does not model, named.
    """
    if qc is None:
        return NONE
    if not isinstance(qc, dict):
        raise InvalidArgumentError(f"{where}: quantization_config {qc!r} must be a JSON object")
    method = qc.get("quant_method")
    inner = qc.get("quantization")
    producer = qc.get("producer")
    legacy = isinstance(inner, dict) and "modelopt_quant_config" in inner
    if (
        method is None
        and isinstance(inner, dict)
        and ((isinstance(producer, dict) and producer.get("name") == "modelopt") or legacy)
    ):
        algo = str(inner.get("quant_algo", "")).upper()
        if algo not in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "MIXED_PRECISION"):
            raise InvalidArgumentError(
                f'{where}: ModelOpt quant_algo {inner.get("quant_algo")!r} (vLLM: "Unknown ModelOpt quant algo")'
            )
        method = (
            "modelopt"  # (vLLM's modelopt / modelopt_fp4 / modelopt_mixed: one parser here, by quant_algo)
        )
    if method == "bitsandbytes":
        raise InvalidArgumentError(
            f"{where}: quant_method 'bitsandbytes': vLLM 0.33.0 and 0.34.0 have no bitsandbytes quantization (it is not "
            "one of its QuantizationMethods), so kvsim cannot size it as vLLM would load it"
        )
    parser = _PARSERS.get(str(method))
    if method is None:
        raise InvalidArgumentError(
            f"{where}: quantization_config has no quant_method, nor ModelOpt's producer with a "
            "'quantization.quant_algo' (an hf_quant_config.json's): vLLM 0.33.0 and 0.34.0 find no quantization method "
            "in it (`_normalize_quantization_config`), so kvsim cannot say how its weights load"
        )
    if parser is None:
        raise InvalidArgumentError(
            f"{where}: quant_method {method!r} is not modelled by kvsim; known: {', '.join(sorted(_PARSERS))}"
        )
    if parser is modelopt:  # (the two readers whose reading depends on the release)
        q = modelopt(qc, where, release)
    elif parser is _compressed_tensors:
        q = _compressed_tensors(qc, where, release)
    else:
        q = parser(qc, where)
    return q.for_model(b) if b is not None else q


# The methods whose integer groups vLLM 0.33.0 cannot split (`check_groups`, `shard_group`).
SPLIT_GROUP_METHODS = ("awq", "gptq", "compressed-tensors")


def not_whole_groups(method: str, cols: int, group: int, full: int | None = None) -> str:
    """vLLM 0.33.0's words (or, where it says none, what it does) when a layer's input features on one rank,
    `cols` of the layer's `full` (default: `cols`, the whole matrix), are not whole groups of `method`'s."""
    full = cols if full is None else full
    if method == "compressed-tensors":
        return (
            f'"Weight input_size_per_partition={cols} is not divisible by group_size={group}" (vLLM\'s '
            "verify_group_size_divides_partition)"
        )
    if method == "gptq":
        # `AutoGPTQLinearMethod.create_weights` checks no shape itself; it asks `choose_mp_linear_kernel`
        # (`kernels/linear/__init__.py`) for a kernel: Marlin's `can_implement` refuses a group that does not
        # divide its inputs, Machete (compute capability 9.0, inputs a multiple of 64) and Exllama (float16
        # activations; it checks the whole layer's inputs only) take one, with `cols // group` rows of scales.
        n = cols // group
        if group >= full:
            return (
                f"MarlinLinearKernel takes a group as wide as the layer and sizes the scales at {cols} // {group} "
                f"= 0 groups (AutoGPTQLinearMethod, auto_gptq.py)"
            )
        marlin = (
            f'MarlinLinearKernel refuses it ("in_features per partition {cols} is not divisible by group_size = '
            f'{group}.")'
        )
        if full != cols:
            return (
                f"{marlin}; a kernel that takes it instead (Machete, or Exllama under float16) loads each GPU {n} "
                f"rows of scales cut from the checkpoint at its rank x {n}, not its {cols} features' groups, so "
                "every GPU after the first computes with other groups' scales; with none, \"Failed to find a "
                'kernel that can implement the WNA16 linear layer" (AutoGPTQLinearMethod, auto_gptq.py)'
            )
        return (
            f"{marlin}; a kernel that takes it instead (Machete) sizes the scales at {cols} // {group} = {n} "
            "groups, fewer than the checkpoint's (AutoGPTQLinearMethod, auto_gptq.py)"
        )
    if group in (32, 64, 128) and group >= full:
        return (
            f"AWQ-Marlin takes a group as wide as the layer (check_marlin_supports_layer) and sizes the scales "
            f"at {cols} // {group} = 0 groups (AutoAWQMarlinLinearMethod)"
        )
    return '"The input size is not aligned with the quantized weight shape" (vLLM\'s AutoAWQLinearMethod)'


def check_groups(q: Quantization, b: Breakdown, qc: Any, where: str) -> None:
    """An AWQ, GPTQ or compressed-tensors int checkpoint's group size against the matrices it quantizes
    (`b`): vLLM takes only whole groups of input features (`AutoAWQLinearMethod.create_weights`: "The input
    size is not aligned with the quantized weight shape"; AWQ-Marlin falls back to it for a layer Marlin
    cannot take; compressed-tensors' `verify_group_size_divides_partition`, for every layer; GPTQ's
    `AutoGPTQLinearMethod.create_weights` takes the first kernel that can implement the layer: Marlin's
    refuses it, Machete's takes it and sizes the scales at `input_size // group_size` groups, fewer than the
    checkpoint's, and with no kernel left vLLM raises "Failed to find a kernel"), so a group that does not divide a quantized
    matrix's input features (`group_size` 7 on a 4096-wide layer) is no checkpoint vLLM loads. Per channel
    (-1) divides any. Only the matrices the checkpoint quantizes are checked (`Quantization.quantized`: an
    ignore list may leave a `down_proj` of odd width unquantized in some layers, or all); not the routed
    experts (their kernels pad or fall back). Under tensor parallelism vLLM checks each GPU's share (`kvsim.model.shard`); this checks the
    whole matrix, which any share that divides must divide too.

    Raises:
        InvalidArgumentError: naming the group size's field, its value, and the first matrix.
    """
    if q.method not in SPLIT_GROUP_METHODS or not isinstance(qc, dict):
        return
    if q.method == "awq":
        key = "quantization_config." + next(k for k in ("q_group_size", "group_size") if k in qc)
    elif q.method == "gptq":
        key = "quantization_config.group_size"
    else:
        key = "compressed-tensors weights.group_size"
    for group in GROUPS:
        fmt = q.formats.get(group)
        if group == "experts" or fmt is None or fmt.kind != "int" or fmt.group < 1:
            continue
        for m in b.matrices[group]:
            if m.cols % fmt.group and q.quantized(m, b, group):
                raise InvalidArgumentError(
                    f"{where}: {key} {fmt.group} does not divide the {m.cols} input features of the {group} "
                    f"layers' {m.rows} x {m.cols} matrices: vLLM needs whole groups "
                    f"({not_whole_groups(q.method, m.cols, fmt.group)})"
                )


# The least compute capability each quantization method runs on in vLLM 0.33.0 (its config's
# `get_min_capability`, checked by `VllmConfig._get_quantization_config`): AWQ 7.5 (`auto_awq.py`), GPTQ 6.0
# (`auto_gptq.py`), fp8 7.5 (`fp8.py`), MXFP4 8.0 (`mxfp4.py`), compressed-tensors 7.0, ModelOpt fp8 8.0 and
# NVFP4 7.5, MIXED_PRECISION 7.5 (`modelopt.py`).
MIN_CAPABILITY = {
    "awq": 75,
    "gptq": 60,
    "fp8": 75,
    "mxfp4": 80,
    "compressed-tensors": 70,
    "modelopt_mixed": 75,  # (ModelOptMixedPrecisionConfig: Marlin's W4A16 and FP8 paths from 7.5)
}


def min_capability(method: str, described: str) -> int | None:
    """`method`'s least compute capability (`MIN_CAPABILITY`; ModelOpt by its format, from the model's
    quantization description `described`), or None for a method without one here."""
    if method == "modelopt":
        return 75 if "nvfp4" in described else 80
    return MIN_CAPABILITY.get(method)


def shard_group(q: Quantization, group: str) -> int:
    """The group size every tensor-parallel rank's share of a row-parallel input must be a whole number of,
    for module group `group` under `q` (0: none). vLLM 0.33.0 refuses a share that splits a group for AWQ
    (`auto_awq.py`: Marlin declines the layer, `check_marlin_supports_layer`, and `AutoAWQLinearMethod`
    raises "The input size is not aligned with the quantized weight shape. This can be caused by too large
    tensor parallel size.") and compressed-tensors' int groups (`compressed_tensors_wNa16.py`: "Weight
    input_size_per_partition = ... is not divisible by group_size = ..."), and refuses or loads wrongly
    GPTQ's (`auto_gptq.py` `AutoGPTQLinearMethod`, no check of its own: `MarlinLinearKernel` refuses the
    share; Machete or Exllama, where they take it, get `input_size_per_partition // group_size` rows of
    scales cut from the checkpoint at `rank x` that many, so every rank after the first applies another
    group's scales: `not_whole_groups`). Routed experts have their own kernels' rules
    (`kvsim.model.shard._check_expert_quant`)."""
    fmt = q.formats.get(group)
    if group == "experts" or fmt is None or fmt.kind != "int" or fmt.group < 1:
        return 0
    return fmt.group if q.method in SPLIT_GROUP_METHODS else 0


def deepseek_v4(checkpoint: Quantization, cfg: Mapping[str, Any], where: str) -> Quantization:
    """A DeepSeek-V4 fp8 checkpoint as vLLM 0.33.0 loads it (`vllm/models/deepseek_v4/quant_config.py`,
    `DeepseekV4FP8Config`, which `DeepseekV4ForCausalLMConfig` makes of `quant_method: fp8`): linear layers
    fp8 in blocks; the routed experts MXFP4 when the config's `expert_dtype` is `fp4` (its default;
    `Mxfp4MoEMethod`), NVFP4 in groups of 16 when `quantization_config.moe_quant_algo` is also `NVFP4`
    (NVIDIA's DeepSeek-V4 NVFP4 releases: `ModelOptNvFp4FusedMoE` in `get_quant_method`), fp8 blocks when
    `expert_dtype` is `fp8` (which reads no `moe_quant_algo`). Another `moe_quant_algo` is refused by name
    (vLLM would build MXFP4 experts for weights stored otherwise)."""
    qc = cfg.get("quantization_config") or {}
    expert = cfg.get("expert_dtype", "fp4")
    if expert not in ("fp4", "fp8"):
        raise InvalidArgumentError(f"{where}: expert_dtype {expert!r} is not 'fp4' or 'fp8' (vLLM's check)")
    moe_algo = qc.get("moe_quant_algo")
    if moe_algo is not None and (not isinstance(moe_algo, str) or moe_algo.upper() not in ("", "NVFP4")):
        raise InvalidArgumentError(
            f"{where}: quantization_config.moe_quant_algo {moe_algo!r} is not modelled (vLLM 0.33.0 and 0.34.0 read "
            "'NVFP4' there, DeepSeek-V4's NVFP4 experts, and builds MXFP4 experts for anything else)"
        )
    formats = dict(checkpoint.formats)
    if expert == "fp4" and "experts" in formats:
        nvfp4 = isinstance(moe_algo, str) and moe_algo.upper() == "NVFP4"
        formats["experts"] = Format("nvfp4", 4) if nvfp4 else Format("mxfp4", 4)
    return Quantization("deepseek_v4_fp8", formats, checkpoint.ignored, checkpoint.kv_fp8)


def with_flag(checkpoint: Quantization, flag: str | None, where: str) -> Quantization:
    """The quantization vLLM applies given `--quantization flag` (None: the checkpoint's).

    `fp8` on an unquantized checkpoint quantizes every linear layer per tensor at load time (vLLM's online
    fp8); any other value must name the checkpoint's own method (or one of vLLM's aliases for it:
    `awq_marlin`, `gptq_marlin`, `modelopt_fp4`), as vLLM's `ModelConfig._verify_quantization` requires.
    """
    if flag is None:
        return checkpoint
    if flag not in QUANTIZATION_CHOICES:
        raise InvalidArgumentError(
            f"quantization {flag!r} is not one of {', '.join(QUANTIZATION_CHOICES)} (the values kvsim models)"
        )
    if not checkpoint.method:
        if flag != "fp8":
            raise InvalidArgumentError(
                f"quantization {flag!r}: {where} is not {_SPOKEN[flag]} checkpoint (it has no "
                "quantization_config); "
                "only 'fp8' quantizes an unquantized checkpoint at load time"
            )
        return Quantization("fp8", {g: Format("fp8", 8, "tensor") for g in LINEAR_GROUPS})
    wanted = _ALIASES.get(flag, flag)
    have = _ALIASES.get(checkpoint.method, checkpoint.method)
    if wanted != have:
        raise InvalidArgumentError(
            f"quantization {flag!r}: Quantization method specified in the model config ({checkpoint.method}) does "
            f"not match the quantization method specified in the `quantization` argument ({flag}) (vLLM's check)"
        )
    return checkpoint


__all__ = [
    "LINEAR_GROUPS",
    "MIN_CAPABILITY",
    "NONE",
    "QUANTIZATION_CHOICES",
    "SPLIT_GROUP_METHODS",
    "Format",
    "Quantization",
    "check_groups",
    "deepseek_v4",
    "from_config",
    "is_ignored",
    "min_capability",
    "not_whole_groups",
    "shard_group",
    "with_flag",
]
# (`ModuleFormats`, `ignore_list`, `int_field` and `spellings` are `kvsim.model.quant_format`'s)
