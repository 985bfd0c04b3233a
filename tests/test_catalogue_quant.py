"""Weights as vLLM loads them (split from tests/test_catalogue.py): the quantization methods' parsers, checks
and byte counts (issue 25; DESIGN.md §Defaults and sizing)."""

from __future__ import annotations

import json
import math
import re

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model import gpus, hf_config, models, quant
from tests.catalogue_common import GIB, HF

# -- quantization -------------------------------------------------------------------------------------------


def test_mxfp4_prices_the_experts_at_4_25_bits_and_the_rest_in_bf16():
    """gpt-oss-120b: every expert matrix at 4 bits plus an 8-bit scale per 32 inputs; attention, router,
    embeddings, lm_head, biases and norms at 2 bytes (re-derived here from the config)."""
    cfg = json.loads((HF / "gpt-oss-120b.json").read_text())
    h, f, e, n = (
        cfg["hidden_size"],
        cfg["intermediate_size"],
        cfg["num_local_experts"],
        cfg["num_hidden_layers"],
    )
    expert_weights = n * e * (h * 2 * f + f * h)
    expert_bytes = n * e * (2 * f * h // 2 + 2 * f * (h // 32) + h * f // 2 + h * (f // 32))
    m = models.get("gpt-oss-120b")
    rest = m.num_params - expert_weights
    assert m.weight_bytes == expert_bytes + 2 * rest
    assert m.weight_bytes / GIB == pytest.approx(60.77, abs=0.01)
    # vLLM 0.14.1 logged 64.38 GiB on an H100 (vllm-project/vllm#33155): its Triton backend pads the experts.
    assert m.weight_bytes / GIB < 64.38


def test_awq_and_gptq_count_scales_and_zero_points(tmp_path):
    """AWQ int4 in groups of 128: half a byte a weight, an fp16 scale and a 4-bit zero per group; GPTQ the
    same in vLLM 0.33.0 (no g_idx: it refuses group act-order), a desc_act of true with per-channel scales
    being no act-order at all."""
    one = quant.Format("int", 4, "group", group=128, zeros=True)
    from kvsim.model.params import Matrix

    m = Matrix(4096, 4096)
    assert one.matrix_bytes(m) == 4096 * 4096 // 2 + 32 * 4096 * 2 + 32 * 4096 // 2
    gptq = quant.from_config(
        {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}, "q"
    )
    assert gptq.formats["mlp"].matrix_bytes(m) == one.matrix_bytes(m)
    channel = quant.from_config(
        {"quant_method": "gptq", "bits": 8, "group_size": -1, "desc_act": True, "sym": True}, "q"
    )
    assert channel.formats["attn"].group == -1
    awq = models.get("qwen3-32b-awq")
    dense = models.get("qwen3-32b")
    assert awq.num_params == dense.num_params
    # The embeddings and lm_head stay fp16 (2 x 151936 x 5120 x 2 bytes); the linear layers ~4.16 bits.
    embeds = 2 * 151936 * 5120 * 2
    linear = dense.num_params - 2 * 151936 * 5120
    assert awq.weight_bytes == pytest.approx(embeds + linear * (4 + 20 / 128) / 8, rel=1e-3)


@pytest.mark.parametrize(
    ("kv", "dtype"),
    [
        ({"kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}, "fp8"),  # (kvsim: bf16)
        (
            {
                "quantization": {
                    "quant_algo": "FP8",
                    "kv_cache_scheme": {"num_bits": 8, "type": "float", "dynamic": False},
                }
            },
            "fp8",
        ),
        ({"kv_cache_quant_algo": "fp8"}, "fp8"),
        ({"kv_cache_scheme": {"dynamic": True, "num_bits": 8, "type": "float"}}, "bf16"),  # (vLLM: auto)
        ({"kv_cache_quant_algo": "INT8"}, "bf16"),  # (vLLM warns and serves auto; kvsim refused it)
        ({}, "bf16"),
    ],
)
def test_a_modelopt_kv_cache_is_fp8_as_vllm_resolves_it(tmp_path, kv, dtype):
    """vLLM 0.33.0's `get_kv_cache_quant_algo_string`: ModelOpt's exporter writes the KV cache's format as
    `kv_cache_scheme` (a dict) or, older, `kv_cache_quant_algo`; an 8-bit float scheme that is not dynamic
    is fp8. kvsim read only `kv_cache_quant_algo`: half the blocks for such a checkpoint."""
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    qc = {"quant_method": "modelopt", "quant_algo": "FP8", **kv}
    (tmp_path / "m.json").write_text(json.dumps({**base, "quantization_config": qc}))
    m = models.from_hf_config(tmp_path / "m.json")
    assert m.kv_dtype == dtype
    assert (
        m.kv_bytes_per_token * (2 if dtype == "fp8" else 1) == models.get("llama-3.1-8b").kv_bytes_per_token
    )


@pytest.mark.parametrize(
    "kv", [{"kv_cache_scheme": {"num_bits": 4, "type": "float"}}, {"kv_cache_quant_algo": "NVFP4"}]
)
def test_a_modelopt_nvfp4_kv_cache_is_nvfp4_under_auto(tmp_path, kv):
    """vLLM's `--kv-cache-dtype auto` takes nvfp4 from such a checkpoint (`vllm/utils/torch_utils.py`): 36,864
    bytes a token for Llama-3.1-8B (32 × 8 × 2 × (64 + 8)); an MLA checkpoint's is refused by name."""
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    qc = {"quant_method": "modelopt", "quant_algo": "FP8", **kv}
    (tmp_path / "m.json").write_text(json.dumps({**base, "quantization_config": qc}))
    m = models.from_hf_config(tmp_path / "m.json")
    assert m.kv_dtype == "nvfp4"
    assert m.kv_bytes_per_token == 32 * 8 * 2 * 72
    from kvsim.model.sizing import pool_blocks

    with pytest.raises(InvalidArgumentError, match="serves no NVFP4 KV cache on gfx942"):
        pool_blocks(m, "mi300x", 16)
    mla = json.loads((HF / "deepseek-v3.json").read_text())
    (tmp_path / "d.json").write_text(json.dumps({**mla, "quantization_config": qc}))
    with pytest.raises(InvalidArgumentError, match="the checkpoint quantizes the KV cache to NVFP4"):
        models.from_hf_config(tmp_path / "d.json")


def test_nvfp4_fp8_block_and_compressed_tensors(tmp_path):
    """A ModelOpt NVFP4 checkpoint: 4 bits + an fp8 scale per 16 inputs (scale tiles of 128 rows x 4), lm_head
    excluded, and its FP8 KV cache makes --kv-cache-dtype auto fp8; compressed-tensors fp8 per channel; a
    checkpoint ignoring attention keeps it in bf16."""
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    nv = {
        **base,
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "group_size": 16,
            "exclude_modules": ["lm_head"],
            "kv_cache_quant_algo": "FP8",
        },
    }
    (tmp_path / "nv.json").write_text(json.dumps(nv))
    m = models.from_hf_config(tmp_path / "nv.json")
    dense = models.get("llama-3.1-8b")
    assert m.kv_dtype == "fp8"
    assert m.kv_bytes_per_token * 2 == dense.kv_bytes_per_token
    h = 4096
    linear = dense.num_params - 2 * 128256 * h - (2 * 32 + 1) * h  # less embeddings, lm_head, norms
    assert m.weight_bytes / (linear * 4.5 / 8 + 2 * (2 * 128256 * h + 65 * h)) == pytest.approx(1, rel=2e-3)
    ct = {
        **base,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "ignore": ["lm_head", "re:.*self_attn.*"],
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
                }
            },
        },
    }
    (tmp_path / "ct.json").write_text(json.dumps(ct))
    c = models.from_hf_config(tmp_path / "ct.json")
    attn = 32 * (2 * h * h + 2 * h * 1024)
    mlp = 32 * 3 * h * 14336
    # the MLP at a byte a weight plus an fp32 scale per output row; attention (ignored) at 2 bytes
    assert c.weight_bytes == dense.param_bytes - mlp + 32 * (2 * 14336 + h) * 4
    assert attn > 0


def _ct(weights: dict, **extra: object) -> dict:
    """A compressed-tensors quantization_config of one scheme on every Linear layer."""
    return {
        "quant_method": "compressed-tensors",
        **extra,
        "config_groups": {"g": {"targets": ["Linear"], "weights": weights}},
    }


def test_unmodelled_quantization_is_refused_by_name(tmp_path):
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    for qc, needle in (
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True},
            "vLLM 0.33.0 and 0.34.0 have no bitsandbytes",
        ),
        ({"quant_method": "gguf"}, "quant_method 'gguf' is not modelled"),
        (
            {
                "quant_method": "gptq",
                "bits": 4,
                "group_size": 128,
                "desc_act": False,
                "sym": True,
                "dynamic": {"-:.*": {}},
            },
            "dynamic",
        ),
        # vLLM 0.33.0's GPTQ: symmetric 4/8-bit, Marlin's group sizes, no group act-order; every key read.
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}, "has no 'desc_act'"),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": True},
            "desc_act true with group_size 128: vLLM 0.33.0 and 0.34.0 refuse it",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": False},
            "sym False",
        ),
        ({"quant_method": "gptq", "bits": 3, "group_size": 128, "desc_act": False, "sym": True}, "bits 3"),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 256, "desc_act": False, "sym": True},
            "Marlin does not support group_size = 256",
        ),
        ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "quant_algo 'W4A8_AWQ'"),
        # A group size of 0 or below -1 was priced per channel; a block of 'abc' or 0 was a bare ValueError
        # or ZeroDivisionError, a block of true taken as 1.
        (
            {"quant_method": "awq", "bits": 4, "group_size": 0, "zero_point": True},
            "quantization_config.group_size 0 must be at least 1",
        ),
        (
            {"quant_method": "awq", "bits": 4, "q_group_size": -5, "zero_point": True},
            "quantization_config.q_group_size -5 must",
        ),
        # vLLM 0.33.0's AWQ: 4-bit with zero points, every key read, `w_bit` before `bits` (an adversarial
        # pass found `w_bit: 8, bits: 4` taken as 4-bit) and a null one refused.
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "has no 'zero_point'"),
        (
            {"quant_method": "awq", "w_bit": 8, "bits": 4, "group_size": 128, "zero_point": True},
            "AWQ bits 8: vLLM 0.33.0 and 0.34.0 load 4-bit AWQ only",
        ),
        (
            {"quant_method": "awq", "w_bit": None, "bits": 4, "group_size": 128, "zero_point": True},
            "quantization_config.w_bit is null",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": None, "desc_act": False, "sym": True},
            "group_size is null",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"group_0": "x"}},
            "config group 'x' must be a JSON object",
        ),
        (
            {"quant_method": "awq", "bits": 8, "group_size": 128, "zero_point": True},
            "vLLM 0.33.0 and 0.34.0 load 4-bit AWQ only",
        ),
        (
            {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": False},
            "take zero points only",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": -7, "desc_act": False, "sym": True},
            "quantization_config.group_size -7 must",
        ),
        (
            _ct(
                {
                    "num_bits": 4,
                    "type": "int",
                    "strategy": "group",
                    "group_size": 128,
                    "actorder": "group",
                }
            ),
            "compressed-tensors actorder 'group': vLLM 0.33.0 and 0.34.0 refuse it",
        ),
        # compressed-tensors' QuantizationArgs lower-cases its strings and reads an actorder of true as group.
        (
            _ct(
                {
                    "num_bits": 4,
                    "type": "INT",
                    "strategy": "GROUP",
                    "group_size": 128,
                    "actorder": True,
                }
            ),
            "compressed-tensors actorder True: vLLM 0.33.0 and 0.34.0 refuse it",
        ),
        # A group that splits a layer's inputs, at any tensor-parallel size (verify_group_size_divides_partition).
        (
            _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 100}),
            "weights.group_size 100 does not divide the 4096 input features",
        ),
        ({"quant_method": "fp8", "weight_block_size": [True, 128]}, "weight_block_size [True, 128] must"),
        (
            _ct(
                {
                    "num_bits": 8,
                    "type": "float",
                    "strategy": "block",
                    "block_structure": ["abc", 1],
                }
            ),
            "block_structure ['abc', 1] must be two whole numbers",
        ),
        (
            _ct(
                {
                    "num_bits": 8,
                    "type": "float",
                    "strategy": "block",
                    "block_structure": [0, 128],
                }
            ),
            "block_structure [0, 128] must be two whole numbers",
        ),
        (
            _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": None}),
            "group_size None must be a whole number of at least 1 with strategy 'group'",
        ),
    ):
        p = tmp_path / "q.json"
        p.write_text(json.dumps({**base, "quantization_config": qc}))
        hf_config._HF_CACHE.clear()
        with pytest.raises(InvalidArgumentError, match=re.escape(needle)):
            models.from_hf_config(p)


def test_compressed_tensors_int_weights_without_inputs_in_an_activation_format_are_refused(tmp_path):
    """vLLM 0.33.0's compressed-tensors config reader (`_quantization_scheme_map_from_config`,
    compressed_tensors.py:360-369) asserts float weights where the group's format (else the global one) is an
    activation-quantization format (naive-, int-, float-, nvfp4-pack-quantized) and the group has no
    input_activations: int weights there fail at load, on a dense model as on a MoE one. The nearest
    schemes load: the same int8 with dynamic per-token inputs, the same int4 in pack-quantized, fp8 weights
    without inputs in float-quantized (W8A16), a per-group pack-quantized format overriding the global one."""
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    p = tmp_path / "q.json"

    def load(qc: dict) -> object:
        p.write_text(json.dumps({**base, "quantization_config": qc}))
        hf_config._HF_CACHE.clear()
        return models.from_hf_config(p)

    int8 = {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}
    int4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
    for qc, fmt in (
        (_ct(int8, format="int-quantized"), "int-quantized"),
        (_ct(int4, format="naive-quantized"), "naive-quantized"),
        (_ct({**int4, "type": "INT"}, format="float-quantized"), "float-quantized"),
        (_ct(int8, format="nvfp4-pack-quantized"), "nvfp4-pack-quantized"),
    ):
        with pytest.raises(
            InvalidArgumentError,
            match=re.escape(
                f"compressed-tensors 'int' weights without input_activations in format {fmt!r}: vLLM 0.33.0 and 0.34.0 "
                "assert float weights there"
            ),
        ):
            load(qc)
    # The group's own format wins over the global one, as in vLLM.
    per_group = _ct(int4, format="pack-quantized")
    per_group["config_groups"]["g"]["format"] = "int-quantized"
    with pytest.raises(
        InvalidArgumentError, match=re.escape("in format 'int-quantized': vLLM 0.33.0 and 0.34.0 assert")
    ):
        load(per_group)
    per_group = _ct(int4, format="int-quantized")
    per_group["config_groups"]["g"]["format"] = "pack-quantized"
    assert load(per_group).quantization
    token = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True, "symmetric": True}
    w8a8 = _ct(int8, format="int-quantized")
    w8a8["config_groups"]["g"]["input_activations"] = token
    assert load(w8a8).quantization
    assert load(_ct(int4, format="pack-quantized")).quantization
    assert load(_ct(int4)).quantization  # no format at all: no assertion
    fp8 = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}
    assert load(_ct(fp8, format="float-quantized")).quantization


def test_an_awq_group_size_that_splits_a_layers_inputs_is_refused(tmp_path):
    """vLLM's AWQ takes whole groups of input features (`AWQLinearMethod.create_weights`: "The input size
    is not aligned with the quantized weight shape"), so `group_size` 7 on Qwen3-32B (5120-wide attention
    inputs) or one wider than the layer is no checkpoint vLLM loads: refused naming `group_size`, where it
    was priced as ceil(5120 / 7) groups. Groups that divide every layer (32, 64, 128), per channel (-1),
    are kept; an ignore list exempts only the matrices it names, layer by layer (a vision tower, the lm_head,
    one layer's down projection: the other layers' are checked; a review found llm-compressor's usual
    `ignore: ["lm_head"]` skipping the check at tp 1 while the tensor-parallel one was made)."""
    cfg = json.loads((HF / "qwen3-32b-awq.json").read_text())
    path = tmp_path / "config.json"
    for group, kept in ((7, False), (10240, False), (32, True), (64, True), (128, True), (-1, True)):
        path.write_text(
            json.dumps({**cfg, "quantization_config": {**cfg["quantization_config"], "group_size": group}})
        )
        hf_config._HF_CACHE.clear()
        if kept:
            assert models.from_hf_config(path).quantization.startswith("awq: attn int4")
            continue
        with pytest.raises(
            InvalidArgumentError, match=f"quantization_config.group_size {group} does not divide the 5120"
        ):
            models.from_hf_config(path)
    qc = {**cfg["quantization_config"], "group_size": 7, "modules_to_not_convert": ["visual"]}
    path.write_text(json.dumps({**cfg, "quantization_config": qc}))
    hf_config._HF_CACHE.clear()
    with pytest.raises(InvalidArgumentError, match="group_size 7 does not divide"):
        models.from_hf_config(path)
    qc = {
        **cfg["quantization_config"],
        "group_size": 7,
        "modules_to_not_convert": ["model.layers.3.mlp.down_proj"],
    }
    path.write_text(json.dumps({**cfg, "quantization_config": qc}))
    hf_config._HF_CACHE.clear()
    # (one layer's down projection left unquantized: every other matrix is still quantized, and split by 7;
    # kvsim skipped the check whenever an entry named a layer's module, a review found)
    with pytest.raises(InvalidArgumentError, match="group_size 7 does not divide the 5120"):
        models.from_hf_config(path)
    # compressed-tensors with llm-compressor's ignore list: checked at tp 1 as at tp 2.
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    ct = _ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 7}, ignore=["lm_head"])
    path.write_text(json.dumps({**base, "quantization_config": ct}))
    hf_config._HF_CACHE.clear()
    with pytest.raises(
        InvalidArgumentError, match=re.escape("weights.group_size 7 does not divide the 4096")
    ):
        models.from_hf_config(path)


def test_tensor_parallelism_must_split_layers_as_vllm_does(tmp_path):
    """vLLM refuses a tensor-parallel size that splits an AWQ group on a rank's share of a row-parallel input
    (Qwen2.5-72B's 29,568-wide down projection at tp 2, 4 and 8: "The input size is not aligned with the
    quantized weight shape"; Qwen padded its AWQ checkpoints to 29,696 for this), one that does not divide a
    row-parallel input at all, or KV heads that neither split nor replicate evenly; where kvsim priced
    each as weights / tp."""
    cfg = json.loads((HF / "qwen2.5-72b.json").read_text())
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "quantization_config": awq}))
    hf_config._HF_CACHE.clear()
    kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB")
    for tp in (2, 4, 8):
        with pytest.raises(
            InvalidArgumentError, match=f"29568 // {tp} = {29568 // tp} input features a GPU, not a whole"
        ):
            kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=tp)
    path.write_text(json.dumps({**cfg, "intermediate_size": 29696, "quantization_config": awq}))
    hf_config._HF_CACHE.clear()
    for tp in (2, 4, 8):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=tp)
    # GPTQ loads a split group without an error, its scales then wrong: refused too (tests/test_shard.py).
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
    path.write_text(json.dumps({**cfg, "quantization_config": gptq}))
    hf_config._HF_CACHE.clear()
    with pytest.raises(InvalidArgumentError, match="not a whole number of its gptq groups of 128"):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=2)
    # Unquantized: the split only has to be even.
    path.write_text(json.dumps({**cfg, "intermediate_size": 29570}))
    hf_config._HF_CACHE.clear()
    kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=2)
    with pytest.raises(InvalidArgumentError, match='vLLM: "29570 is not divisible by 4"'):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=4)
    # KV heads: 8 split over 2, 4 or 8, replicated over 16; 6 over 4 neither.
    path.write_text(json.dumps({**cfg, "num_attention_heads": 48, "num_key_value_heads": 6}))
    hf_config._HF_CACHE.clear()
    kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=2)
    with pytest.raises(InvalidArgumentError, match="6 KV heads neither divide among 4 GPUs nor replicate"):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=4)
    kvsim.SimConfig(model="qwen3-32b-awq", kv_cache_bytes="10GiB", tensor_parallel_size=8)  # 3,200 = 25 x 128
    # Gemma 4's global layers have KV heads of their own: checked as the others (an adversarial pass found
    # 3 of them taken at tp 2, and 0 given a pool group).
    g4 = json.loads((HF / "gemma-4-31b.json").read_text())
    for global_kv, tp, needle in (
        (3, 1, "num_attention_heads 32 is not a multiple of num_global_key_value_heads 3"),
        (0, 1, "'num_global_key_value_heads' 0 must be a whole number of at least 1"),
        (8, 16, None),
        (16, 8, None),
    ):
        text = {**g4["text_config"], "num_global_key_value_heads": global_kv}
        path.write_text(json.dumps({**g4, "text_config": text}))
        hf_config._HF_CACHE.clear()
        if needle is None:
            kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=tp)
        else:
            with pytest.raises(InvalidArgumentError, match=re.escape(needle)):
                kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=tp)
    text = {**g4["text_config"], "num_global_key_value_heads": 3, "num_attention_heads": 48}
    path.write_text(json.dumps({**g4, "text_config": text}))
    hf_config._HF_CACHE.clear()
    kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB")
    with pytest.raises(InvalidArgumentError, match="3 KV heads neither divide among 2 GPUs"):
        kvsim.SimConfig(model=str(path), kv_cache_bytes="10GiB", tensor_parallel_size=2)


def test_a_quantization_below_its_least_compute_capability_is_refused(tmp_path):
    """vLLM refuses a method on an NVIDIA GPU below its config's `get_min_capability` (MXFP4 8.0: gpt-oss on
    an RTX 2070, sm_75), with its words; an online fp8 (7.5) runs there (a Qwen3 of 12 layers: Qwen3-8B's
    8.8 GiB in fp8 would not fit its 7.8 GiB); AMD GPUs are not NVIDIA sm_XY."""
    with pytest.raises(
        InvalidArgumentError, match=re.escape("Minimum capability: 80. Current capability: 75")
    ):
        kvsim.SimConfig(model="gpt-oss-20b", gpu="rtx-2070", max_model_len=1024)
    small = tmp_path / "config.json"
    small.write_text(json.dumps(json.loads((HF / "qwen3-8b.json").read_text()) | {"num_hidden_layers": 12}))
    kvsim.SimConfig(
        model=str(small), gpu="rtx-2070", quantization="fp8", kv_cache_bytes="1GiB", max_model_len=1024
    )
    kvsim.SimConfig(model="gpt-oss-20b", gpu="mi300x", max_model_len=1024)


def test_gpt_oss_experts_are_padded_as_vllms_default_backend_pads_them():
    """vLLM 0.33.0 pads gpt-oss's MXFP4 experts for the kernels it picks by default
    (`mxfp4_round_up_hidden_size_and_intermediate_size`): none on an H100 at tp 1 (Triton: the 2,880-wide
    intermediate is a multiple of 64), each rank's 1,440 to 1,472 at tp 2; hidden 3,072 and intermediate
    2,944 with Marlin (A100, RTX 5090) and FlashInfer's TRT-LLM kernels (B200): 5.13 GiB more for
    gpt-oss-120b, whose "Model loading took 65.9651 GiB" vLLM 0.11.2 logged with Marlin (blog.huikang.dev,
    quoted in robertelee78/hf2q). Expert parallelism pads whole experts; other models are untouched."""
    from kvsim.model.mxfp4_padding import mxfp4_padding_bytes

    m = models.get("gpt-oss-120b")
    per = m.num_experts * m.num_layers * 3 * 17 / 32  # elements of (hidden x a rank's intermediate) to bytes
    assert mxfp4_padding_bytes(m, "sm_90", 1) == 0
    assert mxfp4_padding_bytes(m, "sm_90", 2) == int(per * 2880 * (1472 - 1440))
    assert mxfp4_padding_bytes(m, "sm_100", 1) == int(per * (3072 * 2944 - 2880 * 2880))
    assert mxfp4_padding_bytes(m, "sm_90", 2, ep=2) == 0  # whole experts: 2,880 is a multiple of 64
    assert mxfp4_padding_bytes(m, "sm_80", 2, ep=2) == int(per / 2 * (3072 * 2944 - 2880 * 2880))
    assert (
        mxfp4_padding_bytes(m, None, 1) == mxfp4_padding_bytes(models.get("qwen3-30b-a3b"), "sm_80", 1) == 0
    )
    h100 = kvsim.SimConfig(model="gpt-oss-120b", gpu="h100-80gb").pool.figures
    a100 = kvsim.SimConfig(model="gpt-oss-120b", gpu="a100-80gb", max_model_len=32768).pool.figures
    # (the loaded bytes: the weights and gpt-oss's float32 rotary cache, 32 MiB)
    assert m.loaded_bytes == m.param_bytes + 32 * 2**20
    # (on the H100's Triton kernels, float32 expert biases and Hopper's padded scale layout beside them:
    # tests/test_weights_after_load.py)
    assert h100.model_loading_bytes == m.loaded_bytes + 294_912_000
    assert a100.model_loading_bytes == m.loaded_bytes + mxfp4_padding_bytes(m, "sm_80", 1)
    assert abs(a100.model_loading_bytes / GIB - 65.97) < 0.1
    # The KV memory is what the padded weights leave.
    flat = kvsim.SimConfig(model="gpt-oss-20b", gpu="rtx-5090", activation_reserve_bytes="2GiB").pool
    assert flat.kv_cache_bytes == (
        math.floor(gpus.get("rtx-5090").memory_bytes * 0.92)
        - models.get("gpt-oss-20b").loaded_bytes
        - mxfp4_padding_bytes(models.get("gpt-oss-20b"), "sm_120", 1)
        - 2 * GIB
    )


def test_vllms_quantization_flag():
    """--quantization fp8 halves an unquantized model's linear layers at load time; naming another method than
    the checkpoint's is vLLM's refusal; naming the checkpoint's (or its alias) changes nothing."""
    bf16 = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb")
    fp8 = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", quantization="fp8")
    embeds, rope = 2 * 128256 * 4096 * 2, bf16.pool.rope_cache_bytes  # (the rotary cache stays bf16)
    assert rope == fp8.pool.rope_cache_bytes == 32 * 2**20
    assert fp8.pool.weight_bytes - rope == pytest.approx(
        embeds + (bf16.pool.weight_bytes - rope - embeds) / 2, rel=1e-3
    )
    assert fp8.num_blocks > bf16.num_blocks
    with pytest.raises(InvalidArgumentError, match=r"model config \(awq\) does not match .* \(gptq\)"):
        kvsim.SimConfig(model="qwen3-32b-awq", gpu="h100-80gb", quantization="gptq")
    same = kvsim.SimConfig(model="qwen3-32b-awq", gpu="h100-80gb", quantization="awq_marlin")
    assert same.num_blocks == kvsim.SimConfig(model="qwen3-32b-awq", gpu="h100-80gb").num_blocks
    with pytest.raises(InvalidArgumentError, match="only 'fp8' quantizes an unquantized checkpoint"):
        kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", quantization="awq")
