"""vLLM 0.34.0's quantization changes in the weights' bytes (DESIGN.md §Presets, "0.34.0's quantization
layers"): ModelOpt's `weight_scale_encoding` (CSF-compressed NVFP4 block scales, a field only 0.34.0 reads)
sized as 0.34.0 holds it and refused by name under 0.33.0, and compressed-tensors' W4A8O8 scheme (`CompressedTensorsWNA8O8Int`) priced as 0.34.0 holds
it. Each byte count is worked by hand from vLLM's shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.model import models, quant
from kvsim.model.params import Breakdown
from kvsim.model.weights import weight_groups

HF = Path(__file__).parent / "data" / "hf"


def _one_matrix() -> Breakdown:
    """One attention matrix of 512 output rows x 1,024 input features, in one layer."""
    b = Breakdown()
    b.add("attn", 512, 1024, 1, module="self_attn.o_proj", layers=range(1))
    return b


def _nvfp4(**fields: object) -> dict:
    """A ModelOpt NVFP4 `quantization_config` as config.json carries it (flat)."""
    return {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, **fields}


def test_nvfp4_without_an_encoding_is_priced_as_0_34_0_would_hold_csf_scales():
    """What 0.34.0 holds for a CSF checkpoint is what it holds for an uncompressed one: `csf_weights_transform`
    (quantization/utils/nvfp4_utils.py) decodes the streams on the CPU into the E4M3 `weight_scale`
    `ModelOptNvFp4LinearMethod` allocates. 512 x 1,024 in NVFP4: 512 x 1,024 / 2 = 262,144 bytes of values;
    1,024 / 16 = 64 fp8 scales a row, swizzled into 128-row x 4-column tiles (512 and 64 are whole tiles):
    512 x 64 = 32,768 bytes; two fp32 global scales, 8 bytes. 294,920 bytes."""
    b = _one_matrix()
    q = quant.from_config(_nvfp4(), "config.json", b)
    assert q.group_bytes(b, "attn", 16) == 262_144 + 32_768 + 8 == 294_920


@pytest.mark.parametrize("encoding", ["csf", "csf_32x2_v1"])
def test_a_csf_weight_scale_encoding_is_sized_under_0_34_0_and_refused_before(encoding):
    """vLLM 0.34.0 takes the two CSF encodings (`CSF_SCALE_ENCODINGS`; `ModelOptNvFp4Config._from_config`
    reads the field at the top, else inside `quantization`) and decodes the streams at load into the scales
    an uncompressed checkpoint holds: the same 294,920 bytes as the config without the field. 0.33.0 does not
    read the field (the release is the readers' argument, the latest by default): refused by name."""
    b = _one_matrix()
    for release in ("0.34.0", "0.34", None):
        kwargs = {} if release is None else {"release": release}
        q = quant.from_config(_nvfp4(weight_scale_encoding=encoding), "config.json", b, **kwargs)
        assert q.group_bytes(b, "attn", 16) == 294_920
        assert q.formats["attn"].kind == "nvfp4"
    said = rf"modelopt weight_scale_encoding '{encoding}' \(CSF-compressed NVFP4 block scales\): vLLM 0\.33\.0 reads"
    with pytest.raises(InvalidArgumentError, match=said):
        quant.from_config(_nvfp4(weight_scale_encoding=encoding), "config.json", release="0.33.0")
    # hf_quant_config.json's nesting (no quant_method: ModelOpt's producer names the method)
    nested = {
        "producer": {"name": "modelopt"},
        "quantization": {
            "quant_algo": "NVFP4",
            "group_size": 16,
            "kv_cache_quant_algo": None,
            "exclude_modules": ["lm_head"],
            "weight_scale_encoding": encoding,
        },
    }
    with pytest.raises(InvalidArgumentError, match=said):
        quant.from_config(nested, "hf_quant_config.json", release="0.33.0")
    assert quant.from_config(nested, "hf_quant_config.json", b).group_bytes(b, "attn", 16) == 294_920
    # a null at the top: vLLM reads the nested one
    topnull = {**nested, "quant_method": "modelopt", "weight_scale_encoding": None}
    with pytest.raises(InvalidArgumentError, match=said):
        quant.from_config(topnull, "t", release="0.33.0")


def test_an_encoding_0_34_0_refuses_is_refused_with_its_words():
    for release in ("0.34.0", "0.33.0"):
        with pytest.raises(
            InvalidArgumentError, match=r"'zstd': vLLM 0\.34\.0 refuses it .*unsupported weight_scale"
        ):
            quant.from_config(_nvfp4(weight_scale_encoding="zstd"), "config.json", release=release)


def test_a_release_that_is_no_release_number_is_refused_by_name():
    for bad in ("latest", "0.34.x", "", "1", 34):
        with pytest.raises(InvalidArgumentError, match=r"release .* is not a vLLM release number"):
            quant.from_config(_nvfp4(weight_scale_encoding="csf"), "config.json", release=bad)  # type: ignore[arg-type]


def test_a_csf_checkpoint_loads_under_0_34_0_as_its_uncompressed_twin(tmp_path):
    """Llama-3.1-8B in NVFP4 (lm_head excluded): with the CSF field the model's weights are the bytes of the
    same checkpoint without it under 0.34.0 (the default); under 0.33.0 the model is refused by name."""
    cfg = json.loads((HF / "llama-3.1-8b.json").read_text())
    cfg["quantization_config"] = _nvfp4(weight_scale_encoding="csf", exclude_modules=["lm_head"])
    path = tmp_path / "csf" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    csf = models.from_hf_config(path)
    with pytest.raises(InvalidArgumentError, match=r"config\.json'?: modelopt weight_scale_encoding 'csf'"):
        models.from_hf_config(path, release="0.33.0")
    with pytest.raises(InvalidArgumentError, match=r"config\.json'?: modelopt weight_scale_encoding 'csf'"):
        models.resolve(str(path), release="0.33.0")
    assert models.resolve(str(path), release="0.34.0").param_bytes == csf.param_bytes
    del cfg["quantization_config"]["weight_scale_encoding"]
    plain = tmp_path / "plain" / "config.json"
    plain.parent.mkdir()
    plain.write_text(json.dumps(cfg))
    twin = models.from_hf_config(plain, release="0.33.0")
    assert csf.quant_method == twin.quant_method == "modelopt_fp4"
    assert csf.param_bytes == twin.param_bytes
    assert weight_groups(csf) == weight_groups(twin)


def _mixed(info: dict) -> dict:
    return {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "quantized_layers": {"model.layers.0.mlp.down_proj": info},
    }


def test_a_mixed_precision_layers_encoding():
    """0.34.0's `ModelOptMixedPrecisionConfig.__init__` reads `weight_scale_encoding` per entry of
    `quantized_layers`: a CSF encoding on NVFP4 or W4A16_NVFP4 decoded as above (the layer in NVFP4), any
    other (or on another algorithm) refused ("unsupported weight_scale_encoding for ..."); 0.33.0 reads no
    such field: refused."""
    for algo in ("NVFP4", "W4A16_NVFP4"):
        q = quant.from_config(_mixed({"quant_algo": algo, "weight_scale_encoding": "csf"}), "t")
        plain = quant.from_config(_mixed({"quant_algo": algo}), "t")
        assert q.modules is not None
        assert plain.modules is not None
        fmt = q.modules.format_of("mlp", "model.layers.0.mlp.down_proj", ())
        assert fmt is not None
        assert fmt.kind == "nvfp4"
        assert fmt == plain.modules.format_of("mlp", "model.layers.0.mlp.down_proj", ())
        with pytest.raises(
            InvalidArgumentError, match=r"weight_scale_encoding 'csf' \(CSF-compressed.*0\.33\.0"
        ):
            quant.from_config(
                _mixed({"quant_algo": algo, "weight_scale_encoding": "csf"}), "t", release="0.33.0"
            )
    with pytest.raises(InvalidArgumentError, match=r"weight_scale_encoding 'csf': vLLM 0\.34\.0 refuses it"):
        quant.from_config(_mixed({"quant_algo": "FP8", "weight_scale_encoding": "csf"}), "t")


def _w4a8o8(fmt: str, bits: int = 4, strategy: str = "group", **weights: object) -> dict:
    """A compressed-tensors config of int weights with static per-tensor int8 input and output activations
    (`_is_wNa8o8_int`, compressed_tensors.py: `CompressedTensorsWNA8O8Int`)."""
    act = {"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": False, "symmetric": True}
    w = {"num_bits": bits, "type": "int", "symmetric": True, "strategy": strategy, "dynamic": False}
    if strategy == "group":
        w["group_size"] = 128
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {**w, **weights},
                "input_activations": act,
                "output_activations": act,
            }
        },
    }


def test_w4a8o8_int_quantized_keeps_a_byte_a_value():
    """`CompressedTensorsWNA8O8Int._pack_int_quantized_weight` (0.34.0) packs the int8-stored 4-bit values to
    int32 into the loaded `weight` storage (`move_parameter`, then `replace_parameter`, which copies a
    smaller tensor into the parameter's own storage: "the loaded storage never shrinks"), so a value keeps
    its byte; the scale is `params_dtype`, one per 128 inputs and row, and there is no zero point.
    512 x 1,024: 524,288 bytes of values + 512 x (1,024 / 128) x 2 = 8,192 of scales = 532,480 (0.33.0
    registered a new packed parameter and freed the int8 one: 262,144 + 8,192 = 270,336)."""
    b = _one_matrix()
    q = quant.from_config(_w4a8o8("int-quantized"), "t", b)
    assert q.group_bytes(b, "attn", 16) == 524_288 + 8_192 == 532_480
    assert q.formats["attn"].rate == "bf16"  # a weight-only matmul between fake-quantized activations
    assert q.describe().startswith("compressed-tensors: attn int4 group 128 in int8 storage")
    # pack-quantized: the checkpoint's int32 words are loaded as they are, half a byte a value
    packed = quant.from_config(_w4a8o8("pack-quantized"), "t", b)
    assert packed.group_bytes(b, "attn", 16) == 262_144 + 8_192 == 270_336
    # 8-bit per channel: a byte a value either way, one 16-bit scale a row (it was taken for int8 W8A8:
    # an fp32 scale a row, 524,288 + 2,048, at the fp8 rate)
    eight = quant.from_config(_w4a8o8("int-quantized", bits=8, strategy="channel"), "t", b)
    assert eight.group_bytes(b, "attn", 16) == 524_288 + 512 * 2 == 525_312
    assert eight.formats["attn"].rate == "bf16"


def test_w4a8o8_under_0_33_0_holds_half_a_byte_a_value():
    """0.33.0 registered the packed int32 tensor and freed the int8 one: 262,144 + 8,192 = 270,336 bytes."""
    b = _one_matrix()
    q = quant.from_config(_w4a8o8("int-quantized"), "t", b, release="0.33.0")
    assert q.group_bytes(b, "attn", 16) == 262_144 + 8_192 == 270_336
    assert (
        quant.from_config(_w4a8o8("int-quantized"), "t", b, release="0.34").group_bytes(b, "attn", 16)
        == 532_480
    )


def test_w4a8o8_needs_both_static_int8_activations():
    """Without `output_activations` vLLM picks another scheme (`kvsim.model.quant_ct.int_with_inputs`): none
    for static per-tensor int8 inputs on a pack-quantized checkpoint, none for dynamic per-tensor ones on an
    int-quantized one (W4A8Int wants them per token): refused by name, as vLLM raises."""
    cfg = _w4a8o8("pack-quantized")
    del cfg["config_groups"]["group_0"]["output_activations"]
    with pytest.raises(InvalidArgumentError, match="No compressed-tensors compatible scheme was found"):
        quant.from_config(cfg, "t")
    cfg = _w4a8o8("int-quantized")
    del cfg["config_groups"]["group_0"]["output_activations"]
    cfg["config_groups"]["group_0"]["input_activations"]["dynamic"] = True
    with pytest.raises(
        InvalidArgumentError, match=r"dynamic int8 per-tensor input_activations.*No compressed"
    ):
        quant.from_config(cfg, "t")
    cfg["config_groups"]["group_0"]["input_activations"]["strategy"] = "token"  # W4A8Int
    assert quant.from_config(cfg, "t").formats["attn"].held_bits == 8


def test_asymmetric_w4a8o8_is_refused_by_name():
    with pytest.raises(InvalidArgumentError, match="CompressedTensorsWNA8O8Int registers no zero point"):
        quant.from_config(_w4a8o8("int-quantized", symmetric=False), "t")


def test_w4a8o8_llama_3_1_8b_attention(tmp_path):
    """Llama-3.1-8B's attention in int-quantized W4A8O8 (groups of 128): each of 32 layers holds qkv_proj
    ((32 + 8 + 8) x 128 = 6,144 rows) and o_proj (4,096 rows), 4,096 inputs each: 10,240 x 4,096 =
    41,943,040 bytes of values and 10,240 x 32 x 2 = 655,360 of scales a layer; x 32 = 1,363,148,800."""
    cfg = json.loads((HF / "llama-3.1-8b.json").read_text())
    cfg["quantization_config"] = _w4a8o8("int-quantized")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    attn = weight_groups(models.from_hf_config(path))["attn"]
    assert attn.bytes == (10_240 * 4_096 + 10_240 * 32 * 2) * 32 == 1_363_148_800
