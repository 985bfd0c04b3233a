"""Quantization fields kvsim read wrongly before vLLM 0.34.0 (DESIGN.md §Defaults and sizing, "Weights"):
ModelOpt NVFP4 configs whose config groups quantize weights only (run as W4A16: the 16-bit rate), and
compressed-tensors' W4A8 int8 scheme on the routed experts (vLLM's method for it is CPU-only: refused)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.model import gpus, models, quant
from kvsim.model.timing import roofline_time_model
from kvsim.model.weights import weight_groups
from tests.test_shard import _fits, _model, _preset

HF = Path(__file__).parent / "data" / "hf"
LLAMA = json.loads((HF / "llama-3.1-8b.json").read_text())


_INT4 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}


def _ct(weights: dict[str, Any] | None = None, inputs: Any = None) -> dict:
    """A compressed-tensors config of one group: `weights` (default int4 in groups of 128), pack-quantized."""
    group: dict[str, Any] = {"targets": ["Linear"], "weights": weights or _INT4}
    if inputs is not None:
        group["input_activations"] = inputs
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": group},
    }


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
