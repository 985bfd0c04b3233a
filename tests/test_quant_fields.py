"""A quantization field kvsim read wrongly before vLLM 0.34.0 (DESIGN.md §Defaults and sizing, "Weights"):
ModelOpt NVFP4 configs whose config groups quantize weights only (run as W4A16: the 16-bit rate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvsim.model import gpus, quant
from kvsim.model.timing import roofline_time_model
from kvsim.model.weights import weight_groups
from tests.test_shard import _model

HF = Path(__file__).parent / "data" / "hf"
LLAMA = json.loads((HF / "llama-3.1-8b.json").read_text())


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
