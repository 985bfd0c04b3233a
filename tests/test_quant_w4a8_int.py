"""compressed-tensors' dense W4A8 integer checkpoints (4-bit int weights, int8 input activations) as vLLM 0.34.0
picks their scheme (`CompressedTensorsConfig._get_scheme_from_parts`, compressed_tensors.py; the same in
0.33.0) and holds their bytes (`kvsim.model.quant_ct.int_with_inputs`; DESIGN.md §Defaults and sizing,
"Weights"): WNA8Int on a pack-quantized checkpoint (the packed words, as WNA16), W4A8Int on an int-quantized
one (an int8 a value under 0.34.0, which keeps the loaded storage), anything else refused by name with vLLM's
"No compressed-tensors compatible scheme was found". Each byte count is worked by hand from vLLM's shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.model import models, quant
from kvsim.model.params import Breakdown
from kvsim.model.weights import weight_groups
from tests.cli_run_common import _error

HF = Path(__file__).parent / "data" / "hf"
NO_SCHEME = "No compressed-tensors compatible scheme was found"


def _one_matrix() -> Breakdown:
    """One attention matrix of 512 output rows x 1,024 input features, in one layer."""
    b = Breakdown()
    b.add("attn", 512, 1024, 1, module="self_attn.o_proj", layers=range(1))
    return b


def _w4a8(fmt: str, strategy: str = "group", inputs: dict | None = None, **weights: object) -> dict:
    """A compressed-tensors W4A8 int config: int4 weights (groups of 128, symmetric) and dynamic symmetric
    int8 inputs per token, llm-compressor's W4A8 preset."""
    w = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": strategy, "dynamic": False}
    if strategy == "group":
        w["group_size"] = 128
    act = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True, "symmetric": True}
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {**w, **weights},
                "input_activations": act | (inputs or {}),
            }
        },
    }


def test_pack_quantized_is_wna8int_and_holds_wna16s_bytes():
    """`_is_wNaM_int` (pack-quantized, int weights per group or channel, symmetric dynamic int8 inputs per
    token or group): `CompressedTensorsWNA8Int` registers `weight_packed` (512 x 1,024 / 8 int32 words:
    262,144 bytes) and a 16-bit scale per 128 inputs and row (512 x 8 x 2 = 8,192): 270,336 bytes, the
    16-bit rate (its kernel, from choose_mp_linear_kernel for 16-bit activations, reads no int8 inputs but
    Humming's). Asymmetric weights add packed zero points (8 groups x 512 x 4 bits = 2,048 bytes); int4
    inputs per group are WNA4Int, the same bytes. Both releases."""
    b = _one_matrix()
    for release in ("0.34.0", "0.33.0"):
        q = quant.from_config(_w4a8("pack-quantized"), "t", b, release=release)
        assert q.group_bytes(b, "attn", 16) == 262_144 + 8_192 == 270_336
        assert q.formats["attn"].rate == "bf16"
        zp = quant.from_config(_w4a8("pack-quantized", symmetric=False), "t", b, release=release)
        assert zp.group_bytes(b, "attn", 16) == 270_336 + 2_048
    four = _w4a8("pack-quantized", inputs={"num_bits": 4, "strategy": "group", "group_size": 32})
    assert quant.from_config(four, "t", b).group_bytes(b, "attn", 16) == 270_336


def test_int_quantized_is_w4a8int_and_keeps_a_byte_a_value_under_0_34_0():
    """`_is_dynamic_token_w4a8_int` on an activation format: `CompressedTensorsW4A8Int` loads each value into
    an int8 `weight` (512 x 1,024 = 524,288 bytes) beside a 16-bit scale per group (8,192); its `int4` type
    only HummingLinearKernel takes on CUDA, which packs the values; 0.34.0 keeps the loaded storage
    (532,480 bytes), 0.33.0 freed it (262,144 + 8,192 = 270,336). Per channel: one scale a row (1,024 bytes).
    Inputs of either symmetry."""
    b = _one_matrix()
    q = quant.from_config(_w4a8("int-quantized"), "t", b)
    assert q.group_bytes(b, "attn", 16) == 524_288 + 8_192 == 532_480
    assert q.formats["attn"].rate == "bf16"
    assert q.describe().startswith("compressed-tensors: attn int4 group 128 in int8 storage")
    old = quant.from_config(_w4a8("int-quantized"), "t", b, release="0.33.0")
    assert old.group_bytes(b, "attn", 16) == 262_144 + 8_192 == 270_336
    channel = quant.from_config(_w4a8("int-quantized", strategy="channel"), "t", b)
    assert channel.group_bytes(b, "attn", 16) == 524_288 + 512 * 2
    asym_in = quant.from_config(_w4a8("int-quantized", inputs={"symmetric": False}), "t", b)
    assert asym_in.group_bytes(b, "attn", 16) == 532_480


@pytest.mark.parametrize(
    ("fmt", "weights", "inputs", "said"),
    [
        ("pack-quantized", {}, {"symmetric": False}, "asymmetric dynamic int8 per-token input_activations"),
        ("pack-quantized", {}, {"dynamic": False}, "with int8 per-token input_activations"),
        ("pack-quantized", {}, {"strategy": "tensor"}, "dynamic int8 per-tensor input_activations"),
        ("int-quantized", {"symmetric": False}, {}, "asymmetric int4 per-group weights"),
        ("int-quantized", {}, {"strategy": "group", "group_size": 128}, "dynamic int8 per-group input"),
        ("int-quantized", {}, {"num_bits": 4}, "dynamic int4 per-token input_activations"),
    ],
)
def test_what_no_scheme_takes_is_refused_with_vllms_words(fmt, weights, inputs, said):
    """Where none of vLLM's schemes takes the group it raises NotImplementedError ("No compressed-tensors
    compatible scheme was found") building the first quantized layer: refused by name, in every release."""
    for release in ("0.34.0", "0.33.0"):
        with pytest.raises(InvalidArgumentError, match=rf"{said}.*{NO_SCHEME}"):
            quant.from_config(_w4a8(fmt, inputs=inputs, **weights), "t", release=release)


def test_llama_3_1_8b_in_w4a8int(capsys, tmp_path):
    """Llama-3.1-8B's attention in int-quantized W4A8Int (groups of 128): each of 32 layers holds qkv_proj
    ((32 + 8 + 8) x 128 = 6,144 rows) and o_proj (4,096 rows) over 4,096 inputs: 10,240 x 4,096 =
    41,943,040 bytes of values and 10,240 x 32 x 2 = 655,360 of scales a layer; x 32 = 1,363,148,800 under
    0.34.0, (20,971,520 + 655,360) x 32 = 692,060,160 under 0.33.0. A refused scheme: one line, exit 2."""
    cfg = json.loads((HF / "llama-3.1-8b.json").read_text())
    cfg["quantization_config"] = _w4a8("int-quantized")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert weight_groups(models.from_hf_config(path))["attn"].bytes == 1_363_148_800
    old = models.resolve(str(path), release="0.33.0")
    assert weight_groups(old)["attn"].bytes == (20_971_520 + 655_360) * 32 == 692_060_160
    cfg["quantization_config"] = _w4a8("pack-quantized", inputs={"symmetric": False})
    bad = tmp_path / "bad" / "config.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(cfg))
    err = _error(capsys, ["run", "--model", str(bad), "--gpu", "h100", "--requests", "2"])
    assert err.startswith(f"kvsim run: error: argument --model: model {str(bad)!r}: compressed-tensors")
    assert NO_SCHEME in err
    assert err.count("\n") <= 1
