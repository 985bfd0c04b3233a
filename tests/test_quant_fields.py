"""Three quantization fields kvsim read wrongly or ignored before vLLM 0.34.0 (DESIGN.md §Defaults and sizing,
"Weights"): compressed-tensors' `transform_config` (online transforms refused by name, offline ones loaded),
ModelOpt NVFP4 configs whose config groups quantize weights only (run as W4A16: the 16-bit rate), and
compressed-tensors' W4A8 int8 scheme on the routed experts (vLLM's method for it is CPU-only: refused)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from kvsim.model import gpus, hf_config, models, quant
from kvsim.model.timing import roofline_time_model
from kvsim.model.weights import weight_groups
from tests.test_shard import _fits, _model, _one_line, _preset

HF = Path(__file__).parent / "data" / "hf"
LLAMA = json.loads((HF / "llama-3.1-8b.json").read_text())

# -- compressed-tensors' transform_config ---------------------------------------------------------------

_INT4 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}


def _ct(transform_config: Any = None, weights: dict[str, Any] | None = None, inputs: Any = None) -> dict:
    """A compressed-tensors W4A16 (int4 in groups of 128, pack-quantized) config, with `transform_config`."""
    group: dict[str, Any] = {"targets": ["Linear"], "weights": weights or _INT4}
    if inputs is not None:
        group["input_activations"] = inputs
    qc = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": group},
    }
    if transform_config is not None:
        qc["transform_config"] = transform_config
    return qc


def _transforms(*applies: tuple[str, list[str]], kind: str = "hadamard", head_dim: int | None = None) -> dict:
    """A `transform_config` of one scheme applied at each (location, targets)."""
    scheme: dict[str, Any] = {
        "type": kind,
        "apply": [{"targets": targets, "location": loc} for loc, targets in applies],
    }
    if head_dim is not None:
        scheme["head_dim"] = head_dim
    return {"config_groups": {"u": scheme}}


@pytest.mark.parametrize(
    ("tc", "location", "kind"),
    [
        (_transforms(("input", ["re:.*down_proj"]), head_dim=128), "input", "hadamard"),
        (_transforms(("output", ["Linear"]), kind="random-hadamard"), "output", "random-hadamard"),
        (
            _transforms(("weight_input", ["Linear"]), ("input", ["Linear"]), kind="random-matrix"),
            "input",
            "random-matrix",
        ),
        (_transforms(("q_attn", ["re:.*self_attn$"])), "q_attn", "hadamard"),
    ],
    ids=["hadamard-input", "random-hadamard-output", "offline-then-online", "q-attn"],
)
def test_an_online_transform_is_refused_by_name(tc, location, kind):
    """vLLM 0.33.0 and 0.34.0 (`CompressedTensorsConfig.get_quant_method`) wrap each linear layer an online
    transform targets in `CompressedTensorsLinearTransformMethod` (compressed_tensors/transform/linear.py),
    which transforms the layer's activations at every step: kvsim's time model has no such term. kvsim read
    past the field and priced the layers as plain W4A16."""
    said = (
        f"compressed-tensors transform_config group 'u' applies its '{kind}' transform online (location "
        f"'{location}'): vLLM 0.33.0 and 0.34.0 run it on the layer's activations at every step"
    )
    with pytest.raises(InvalidArgumentError, match=re.escape(said)):
        quant.from_config(_ct(tc), "config.json")
    assert quant.from_config(_ct(), "config.json").method == "compressed-tensors"  # the field alone


@pytest.mark.parametrize("tc", [None, {}, {"config_groups": {}}, _transforms()])
def test_no_transform_or_offline_ones_load_with_the_same_bytes(tc):
    """A falsy `transform_config` vLLM reads as none; a scheme applied only at `weight_input` /
    `weight_output` (compressed-tensors' `TransformLocation.is_online` false: folded into the stored
    weights at calibration) vLLM builds nothing for (`get_linear_transform_schemes` keeps online ones only),
    so the model loads as without the field, byte for byte."""
    offline = _transforms(("weight_input", ["Linear"]), ("weight_output", ["re:.*o_proj"]))
    for transforms in (tc, offline):
        m = _model({**LLAMA, "quantization_config": _ct(transforms)}, "ct")
        plain = _model({**LLAMA, "quantization_config": _ct()}, "ct")
        assert m.weight_bytes == plain.weight_bytes
        assert m.weight_bytes < _model(LLAMA, "bf16").weight_bytes // 2  # (int4 layers: still quantized)


@pytest.mark.parametrize(
    ("tc", "needle"),
    [
        ([1], "transform_config [1] must be an object of config_groups (a TransformConfig)"),
        ({"config_groups": []}, "must be an object of config_groups"),
        ({"config_groups": {"u": {"type": "hadamard", "apply": "input"}}}, "group 'u' {'type'"),
        (
            _transforms(("INPUT", ["Linear"])),
            "location 'INPUT' is not a compressed-tensors TransformLocation",
        ),
    ],
)
def test_a_transform_config_that_is_no_transform_config_is_refused_by_name(tc, needle):
    with pytest.raises(InvalidArgumentError, match=re.escape(needle)):
        quant.from_config(_ct(tc), "config.json")


def test_the_cli_refuses_an_online_transform_in_one_line(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "quantization_config": _ct(_transforms(("input", ["Linear"])))}))
    hf_config._HF_CACHE.clear()
    assert main(["run", "--model", str(path), "--gpu", "h100-80gb", "--requests", "10"]) == 2
    assert "applies its 'hadamard' transform online (location 'input')" in _one_line(capsys)


# -- ModelOpt NVFP4 with weight-only config groups: W4A16 ----------------------------------------------


def _nvfp4(*inputs: Any) -> dict:
    """A ModelOpt NVFP4 config (flat, config.json's) with one config group per entry of `inputs` (its
    `input_activations`; none given: no `config_groups`)."""
    qc: dict[str, Any] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    if inputs:
        w = {"num_bits": 4, "type": "float", "group_size": 16}
        qc["config_groups"] = {
            f"group_{i}": {"weights": w, "input_activations": a} for i, a in enumerate(inputs)
        }
    return qc


_A4 = {"num_bits": 4, "type": "float", "group_size": 16, "dynamic": False}


def test_weight_only_nvfp4_config_groups_compute_at_the_16_bit_rate():
    """vLLM 0.33.0's and 0.34.0's `ModelOptNvFp4Config._from_config` (modelopt.py) takes `quant_method`
    W4A16_NVFP4 for an NVFP4 config whose `config_groups` (at its top) are non-empty and all without
    `input_activations`: Marlin, 16-bit activations. kvsim priced them at the fp4 rate. The bytes are
    NVFP4's either way; on a B200 (fp4 4x its bf16 rate) the W4A16 model's linear FLOPs take what the
    unquantized model's take, the W4A4 one's a quarter of the layers' share."""
    b200 = gpus.get("b200")
    w4a16 = _model({**LLAMA, "quantization_config": _nvfp4(None, None)}, "w4a16")
    w4a4 = _model({**LLAMA, "quantization_config": _nvfp4(_A4)}, "w4a4")
    assert w4a16.weight_bytes == w4a4.weight_bytes
    rates = {g: (weight_groups(w4a16)[g].rate, weight_groups(w4a4)[g].rate) for g in ("attn", "mlp")}
    assert rates == {"attn": ("bf16", "fp4"), "mlp": ("bf16", "fp4")}
    assert "nvfp4 w4a16" in w4a16.quantization
    assert "w4a16" not in w4a4.quantization
    bf16 = roofline_time_model(_model(LLAMA, "bf16"), b200).dense_flop_tok_ps
    a16 = roofline_time_model(w4a16, b200).dense_flop_tok_ps
    a4 = roofline_time_model(w4a4, b200).dense_flop_tok_ps
    assert a16 == bf16 > a4


@pytest.mark.parametrize(
    ("qc", "a16"),
    [
        (_nvfp4(), False),  # no config_groups: W4A4
        (_nvfp4(None), True),
        (_nvfp4(None, _A4), False),  # one group quantizes its inputs: W4A4 for all
        ({**_nvfp4(), "config_groups": {}}, False),  # empty: vLLM's test wants a non-empty object
        ({**_nvfp4(), "config_groups": {"g": "weights"}}, False),  # a group that is no object
    ],
)
def test_w4a16_needs_every_group_an_object_without_input_activations(qc, a16):
    q = quant.from_config(qc, "config.json")
    assert q.method == "modelopt_fp4"
    assert {f.a16 for f in q.formats.values()} == {a16}


def test_hf_quant_config_json_groups_are_read_at_its_top():
    """`original_config.get("config_groups")`: the whole file's top, as vLLM reads an hf_quant_config.json
    (its `quantization` object holds the algorithm; groups inside it are not read)."""
    inner = {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None, "exclude_modules": []}
    groups = {"g": {"weights": {"num_bits": 4}, "input_activations": None}}
    top = {"producer": {"name": "modelopt"}, "quantization": inner, "config_groups": groups}
    nested = {"producer": {"name": "modelopt"}, "quantization": {**inner, "config_groups": groups}}
    assert quant.from_config(top, "hf_quant_config.json").formats["attn"].rate == "bf16"
    assert quant.from_config(nested, "hf_quant_config.json").formats["attn"].rate == "fp4"


# -- compressed-tensors W4A8 int8 routed experts: vLLM's method is CPU-only ------------------------------


def _qwen3_moe(qc: dict[str, Any], name: str) -> Any:
    return _model(_preset("qwen3-30b-a3b", quantization_config=copy.deepcopy(qc)), name)


_INT8_TOKEN = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}


@pytest.mark.parametrize("strategy", ["group", "channel"])
def test_w4a8_int8_experts_are_refused_on_a_gpu(strategy):
    """int4 weights (per group or channel, symmetric) with int8 dynamic per-token inputs on a fused-MoE
    layer: vLLM 0.33.0's and 0.34.0's `get_moe_method` picks `CompressedTensorsW4A8Int8MoEMethod`
    (`_is_dynamic_token_w4a8_int`), whose backend oracle (fused_moe/oracle/w4a8_int8.py
    `_get_priority_backends`) has CPU_INT4 on a CPU platform only and raises "W4A8 Int8 MoE is only
    supported on CPU platforms" on a GPU. kvsim accepted it. The same model with fp8 inputs (W4A8 fp8,
    `CompressedTensorsW4A8Fp8MoEMethod`) and with its experts left unquantized still load."""
    w = {**_INT4, "strategy": strategy}
    if strategy == "channel":
        del w["group_size"]
    qc = _ct(weights=w, inputs=_INT8_TOKEN)
    with pytest.raises(InvalidArgumentError) as exc:
        _qwen3_moe(qc, "q3w4a8")
    msg = str(exc.value)
    assert (
        f"int4 per-{strategy} weights with dynamic int8 per-token input_activations (format 'pack-quantized') on the "
        "routed experts: vLLM 0.33.0 and 0.34.0 have no fused-MoE method on a GPU for that scheme" in msg
    )
    assert "CompressedTensorsW4A8Int8MoEMethod (compressed_tensors_moe_w4a8_int8.py), is CPU-only" in msg
    assert '"W4A8 Int8 MoE is only supported on CPU platforms"' in msg
    fp8 = {**_INT8_TOKEN, "type": "float"}
    _fits(_qwen3_moe(_ct(weights={**_INT4}, inputs=fp8), "q3w4afp8"), 2)
    _fits(_qwen3_moe({**qc, "ignore": ["re:.*mlp.experts.*"]}, "q3ignored"), 2)


def test_w4a8_int8_experts_are_refused_as_a_model_is_loaded(tmp_path):
    cfg = _preset("qwen3-30b-a3b", quantization_config=_ct(inputs=_INT8_TOKEN))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InvalidArgumentError, match="only supported on CPU platforms"):
        models.from_hf_config(path)
