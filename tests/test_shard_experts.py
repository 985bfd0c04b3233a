"""The routed experts' quantization under tensor parallelism, refused by name where vLLM 0.33.0 refuses it
(`kvsim.model.shard._check_expert_quant`, `kvsim.model.quant.check_moe_scheme`; DESIGN.md §Defaults and
sizing, "Tensor parallelism"): a GPU's share of fp8 blocks (refined or not) and of GPTQ, AWQ and
compressed-tensors int groups, more GPUs than routed experts, and the compressed-tensors MoE schemes no
fused-MoE method takes. Each next to a layout that still loads."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from kvsim.cli import main
from kvsim.errors import InvalidArgumentError, UnsplittableModelError
from kvsim.model import hf_config
from tests.test_shard import HF, _fits, _model, _one_line, _preset, _refused

# -- the routed experts' fp8 blocks and int groups over the fused MoE's tp x dp GPUs -------------------------------


def _qwen3_moe(qc: dict[str, Any] | None, name: str, **change: Any) -> Any:
    """Qwen3-30B-A3B's shape (d 2048, 128 experts of 768) in quantization `qc`."""
    return _model(_preset("qwen3-30b-a3b", quantization_config=qc, **change), name)


_FP8_BLOCKS = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def _ct_experts(weights: dict[str, Any], inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    group: dict[str, Any] = {"targets": ["Linear"], "weights": weights}
    if inputs is not None:
        group["input_activations"] = inputs
    fmt = "pack-quantized" if weights["type"] == "int" else "float-quantized"
    return {"quant_method": "compressed-tensors", "format": fmt, "config_groups": {"group_0": group}}


def test_fp8_block_experts_share_must_refine_or_hold_whole_blocks():
    """vLLM 0.33.0's Fp8MoEMethod (fp8.py) refines a share that is no whole number of 128 x 128 blocks to
    square blocks of gcd(128, 128, share, hidden) when that is at least 32 (refine_fp8_moe_block_shape,
    fused_moe/oracle/fp8.py), else validate_fp8_block_shape_moe (quantization/utils/fp8_utils.py) raises:
    MiniMax-M2's 1,536-wide experts give 96 a GPU over 16 GPUs (refined to 32) but 48 over 32 (gcd 16)."""
    from kvsim.model.models import resolve
    from kvsim.model.shard import shard

    mm = resolve("minimax-m2")
    shard(mm, None, 8, data_parallel_size=2)  # 96 a GPU: refined to 32 x 32 blocks
    shard(mm, None, 48)  # 32 a GPU
    with pytest.raises(UnsplittableModelError) as exc:
        shard(mm, None, 8, data_parallel_size=4)
    msg = str(exc.value)
    assert msg.startswith(
        "tensor_parallel_size 8 x data_parallel_size 4: minimax-m2's routed experts take intermediate_size "
        "1536 // 32 = 48 intermediate features a GPU without --enable-expert-parallel, not a whole number of "
        "its fp8 blocks (weight_block_size [128, 128])"
    )
    assert "(refine_fp8_moe_block_shape: gcd 16)" in msg
    assert (
        "validate_fp8_block_shape_moe: \"The output_size of gate's and up's weight = 48 is not divisible by "
        'weight quantization block_n = 128."' in msg
    )
    shard(mm, None, 8, data_parallel_size=4, expert_parallel=True)  # whole experts: nothing split
    # Qwen3-30B-A3B-FP8's 768: 96 at tp 8 refines; 48 at tp 16 does not (gcd 16).
    q = _qwen3_moe(_FP8_BLOCKS, "q3fp8")
    _fits(q, 8)
    _refused(q, 16, "q3fp8's routed experts take moe_intermediate_size 768 // 16 = 48 intermediate features")
    _fits(q, 16, enable_expert_parallel=True)


def test_compressed_tensors_fp8_block_experts_share_is_not_refined():
    """compressed-tensors' CompressedTensorsW8A8Fp8MoEMethod (compressed_tensors_moe_w8a8_fp8.py) calls
    validate_fp8_block_shape_moe without refining: Qwen3-30B-A3B's 768 gives 96 a GPU at tp 8 and 192 at
    tp 4 (1.5 blocks), refused, where an fp8 checkpoint's Fp8MoEMethod refines them; 384 at tp 2 splits."""
    fp8 = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False}
    ct = _ct_experts(
        {**fp8, "strategy": "block", "block_structure": [128, 128]},
        {**fp8, "strategy": "group", "group_size": 128, "dynamic": True},
    )
    q = _qwen3_moe(ct, "q3ct")
    _fits(q, 2)
    msg = _refused(q, 4, "768 // 4 = 192 intermediate features a GPU")
    assert "not a whole number of its fp8 blocks (block_structure [128, 128]) (vLLM's" in msg
    assert "The output_size of gate's and up's weight = 192 is not divisible by weight quantization" in msg
    _refused(q, 8, "The output_size of gate's and up's weight = 96 is not divisible")
    # A block_n that divides the share leaves block_k's check (the attention's tp > 1).
    narrow = _ct_experts(
        {**fp8, "strategy": "block", "block_structure": [64, 128]},
        ct["config_groups"]["group_0"]["input_activations"],
    )
    _refused(
        _qwen3_moe(narrow, "q3n"),
        4,
        "The input_size of down's weight = 192 is not divisible by weight quantization block_k = 128.",
    )
    _fits(q, 8, enable_expert_parallel=True)
    _fits(_qwen3_moe(_FP8_BLOCKS, "q3fp8"), 4)


@pytest.mark.parametrize(
    "qc",
    [
        {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True},
        {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
    ],
    ids=["gptq", "awq"],
)
def test_gptq_and_awq_experts_share_must_hold_groups_of_at_least_32(qc):
    """vLLM 0.33.0's GPTQ and AWQ MoE (auto_gptq.py, auto_awq.py) take a share the group divides with the
    MoE Marlin method (check_moe_marlin_supports_layer); otherwise MoeWNA16Method (moe_wna16.py) halves the
    group until it divides the share and asserts it stays at least 32: Qwen3-30B-A3B's 768 in groups of 128
    gives 96 a GPU at tp 8 (groups of 32), 48 at tp 16 or 24 over tp 4 x dp 8: refused."""
    method = qc["quant_method"]
    q = _qwen3_moe(qc, "q3int")
    _fits(q, 8)
    msg = _refused(q, 16, "q3int's routed experts take moe_intermediate_size 768 // 16 = 48 intermediate")
    assert (
        f"not a whole number of its {method} groups (group_size 128) nor of their halves of at least 32"
        in msg
    )
    assert (
        "MoeWNA16Method asserts group_size >= 32 while halving the group to divide it (moe_wna16.py)" in msg
    )
    _fits(q, 16, enable_expert_parallel=True)
    _refused(q, 4, "tensor_parallel_size 4 x data_parallel_size 8: q3int's", data_parallel_size=8)
    _fits(q, 4, data_parallel_size=2)  # 96 a GPU


def test_compressed_tensors_int_experts_share_must_hold_whole_groups():
    """compressed-tensors' CompressedTensorsWNA16MoEMethod (compressed_tensors_moe_wna16.py) raises when the
    group does not divide a GPU's share ("Scale groups would otherwise cross TP shard boundaries"): 768 in
    groups of 128 gives 192 at tp 4, refused; 384 at tp 2 splits. An asymmetric per-channel scheme's gate
    and up rows must hold whole int32s of 4-bit zero points: 1,000 gives 250 at tp 4 (500 rows)."""
    int4 = {"num_bits": 4, "type": "int", "symmetric": True, "dynamic": False}
    q = _qwen3_moe(_ct_experts({**int4, "strategy": "group", "group_size": 128}), "q3w4")
    _fits(q, 2)
    msg = _refused(q, 4, "q3w4's routed experts take moe_intermediate_size 768 // 4 = 192 intermediate")
    assert "not a whole number of its compressed-tensors groups (group_size 128)" in msg
    assert "partition (192) to be divisible by group_size (128)." in msg
    _fits(q, 4, enable_expert_parallel=True)
    asym = _ct_experts({**int4, "strategy": "channel", "symmetric": False})
    a = _qwen3_moe(asym, "q3asym", moe_intermediate_size=1000)
    _fits(a, 2)
    msg = _refused(a, 4, "whose gate and up rows (2 x 250) are not whole int32s of its 4-bit zero points")
    assert "(2 * intermediate_size_per_partition = 500) must be divisible by packed_factor (8)." in msg


_FP8 = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False}


@pytest.mark.parametrize(
    ("weights", "inputs", "fmt", "needle"),
    [
        (
            {**_FP8, "strategy": "tensor"},
            None,
            "float-quantized",
            "float8 per-tensor weights with no input_activations (format 'float-quantized') on the routed "
            "experts: vLLM 0.33.0 and 0.34.0 have no fused-MoE method on a GPU for that scheme",
        ),
        (
            {**_FP8, "strategy": "block", "block_structure": [128, 128]},
            None,
            "float-quantized",
            "(AttributeError \"'NoneType' object has no attribute 'num_bits'\") before its \"Unsupported FusedMoe "
            'scheme"',
        ),
        (
            {**_FP8, "strategy": "channel"},
            None,
            "float-quantized",
            'raises "For Fused MoE layers, only format: pack-quantized and bits: [2, 3, 4, 5, 6, 7, 8] is '
            "supported ...\" (format 'float-quantized', bits 8)",
        ),
        (
            {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"},
            {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "tensor"},
            "int-quantized",
            "int8 per-channel weights with int8 per-tensor input_activations (format 'int-quantized') on the "
            "routed experts: vLLM 0.33.0 and 0.34.0 have no fused-MoE method on a GPU for that scheme (CompressedTensorsMoEMethod."
            'get_moe_method, compressed_tensors_moe.py): it raises "Unsupported FusedMoe scheme: ..."',
        ),
        (
            {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
            {**_FP8, "strategy": "token", "dynamic": True},
            "nvfp4-pack-quantized",
            'raises "For NVFP4 weights, input quantization must also be NVFP4 format or None for NVFP4A16',
        ),
    ],
    ids=["fp8-tensor-w8a16", "fp8-block-w8a16", "fp8-channel-w8a16", "int8-static-w8a8", "nvfp4-fp8-inputs"],
)
def test_compressed_tensors_schemes_no_fused_moe_method_takes_are_refused_at_load(
    weights, inputs, fmt, needle
):
    """vLLM 0.33.0 picks a compressed-tensors MoE layer's method in CompressedTensorsMoEMethod.get_moe_method
    (compressed_tensors_moe.py:66-201), which takes fewer schemes than its linear layers: fp8 weights without
    input quantization (W8A16) reach no MoE method, failing on the absent input scheme (tensor, block) or in
    its weight-only WNA16 branch (channel: "only format: pack-quantized"); int8 W8A8 with static inputs and
    NVFP4 weights with fp8 inputs are refused too. At any tp; the same scheme on a dense model loads."""
    qc = _ct_experts(weights, inputs)
    qc["format"] = fmt
    with pytest.raises(InvalidArgumentError, match=re.escape(needle)):
        _qwen3_moe(qc, "q3ct")
    llama = json.loads((HF / "llama-3.1-8b.json").read_text())
    _fits(_model({**llama, "quantization_config": qc}, "dense"), 1)
    # The experts left unquantized by the ignore list load; so does the same model's fp8 W8A8 (dynamic inputs).
    _fits(_qwen3_moe({**qc, "ignore": ["re:.*mlp.experts.*"]}, "q3ignored"), 1)
    dynamic = _ct_experts({**_FP8, "strategy": "channel"}, {**_FP8, "strategy": "token", "dynamic": True})
    _fits(_qwen3_moe(dynamic, "q3fp8dyn"), 4)


def test_compressed_tensors_moe_schemes_vllm_takes_still_load():
    """The MoE methods' schemes: fp8 W8A8 per tensor (static inputs) and per block (dynamic groups), int4
    W4A16 pack-quantized, int8 W8A8 with dynamic per-token inputs, NVFP4 (with NVFP4 inputs or none), int4
    weights with fp8 dynamic per-token inputs (W4A8)."""
    int4 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}
    int8 = {"num_bits": 8, "type": "int", "symmetric": True}
    nvfp4 = {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group", "group_size": 16}
    token = {**_FP8, "strategy": "token", "dynamic": True}
    for weights, inputs, fmt in (
        ({**_FP8, "strategy": "tensor"}, {**_FP8, "strategy": "tensor"}, "float-quantized"),
        (
            {**_FP8, "strategy": "block", "block_structure": [128, 128]},
            {**_FP8, "strategy": "group", "group_size": 128, "dynamic": True},
            "float-quantized",
        ),
        (int4, None, "pack-quantized"),
        ({**int8, "strategy": "channel"}, {**int8, "strategy": "token", "dynamic": True}, "int-quantized"),
        (nvfp4, {**nvfp4, "dynamic": "local"}, "nvfp4-pack-quantized"),
        (nvfp4, None, "nvfp4-pack-quantized"),
        (int4, token, "pack-quantized"),
    ):
        qc = _ct_experts(weights, inputs)
        qc["format"] = fmt
        _fits(_qwen3_moe(qc, "q3ok"), 2)


def test_compressed_tensors_int_experts_without_inputs_in_an_activation_format_are_refused_at_load():
    """vLLM 0.33.0's config reader asserts float weights where the format quantizes activations and no
    input_activations are given (`_quantization_scheme_map_from_config`, compressed_tensors.py:360-369),
    before any MoE method is picked: int4 W4A16 experts in int-quantized are refused (they loaded in kvsim);
    in pack-quantized they load (CompressedTensorsWNA16MoEMethod)."""
    int4 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}
    qc = _ct_experts(int4)
    qc["format"] = "int-quantized"
    with pytest.raises(
        InvalidArgumentError,
        match=re.escape(
            "'int' weights without input_activations in format 'int-quantized': vLLM 0.33.0 and 0.34.0 assert"
        ),
    ):
        _qwen3_moe(qc, "q3w4a16int")
    _fits(_qwen3_moe(_ct_experts(int4), "q3w4a16"), 2)


def test_the_cli_refuses_more_gpus_than_experts_and_an_experts_scheme_in_one_line(tmp_path, capsys):
    path = tmp_path / "config.json"
    cfg = _preset("qwen3-30b-a3b", num_experts=4, num_experts_per_tok=2)
    path.write_text(json.dumps(cfg))
    hf_config._HF_CACHE.clear()
    argv = ["run", "--model", str(path), "--gpu", "h100-80gb", "--requests", "10"]
    assert main([*argv, "-tp", "8", "-ep"]) == 2
    assert 'Qwen3MoeSparseMoeBlock (qwen3_moe.py) raises "Tensor parallel size 8 is greater' in _one_line(
        capsys
    )
    assert main([*argv, "-tp", "4"]) == 0
    capsys.readouterr()
    qc = _ct_experts({**_FP8, "strategy": "tensor"})
    path.write_text(json.dumps(_preset("qwen3-30b-a3b", quantization_config=qc)))
    hf_config._HF_CACHE.clear()
    assert main([*argv, "-tp", "1"]) == 2
    assert "float8 per-tensor weights with no input_activations" in _one_line(capsys)


def test_the_cli_refuses_an_expert_share_of_fp8_blocks_in_one_line(capsys):
    argv = ["run", "minimax-m2", "--gpu", "h100-80gb", "--requests", "10", "-tp", "8"]
    assert main([*argv, "-dp", "4"]) == 2
    assert "validate_fp8_block_shape_moe" in _one_line(capsys)
    assert main([*argv, "-dp", "2"]) == 0


# -- data parallelism without expert parallelism: the fused MoE's tp x dp split ------------------------------------
