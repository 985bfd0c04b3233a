"""ModelOpt MIXED_PRECISION checkpoints (`kvsim.model.quant_modelopt.MixedPrecision`): each module in each
layer priced in the format vLLM 0.33.0 resolves for it from the checkpoint's `quantized_layers` map
(`ModelOptMixedPrecisionConfig._resolve_quant_algo` and `get_quant_method`, `modelopt.py`), where kvsim
refused the method by name before."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.model import models, quant
from kvsim.model.params import Breakdown
from kvsim.model.weights import model_breakdown, weight_groups

HF = Path(__file__).parent / "data" / "hf"
QWEN_35B = HF / "qwen3.6-35b-a3b-nvfp4"
QWEN_27B = HF / "qwen3.6-27b-nvfp4"


def _nvfp4(rows: int, cols: int) -> int:
    """One NVFP4 matrix as vLLM allocates it: two values a byte, an fp8 scale per 16 inputs in 128-row x
    4-column tiles, two fp32 global scales."""

    def up(x: int, m: int) -> int:
        return -(-x // m) * m

    return rows * cols // 2 + up(rows, 128) * up(-(-cols // 16), 4) + 8


def _fp8(rows: int, cols: int) -> int:
    """One fp8 matrix, per tensor: a byte a value and an fp32 scale."""
    return rows * cols + 4


def _qc(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())["quantization_config"]


def test_qwen3_6_35b_a3b_nvfp4_is_priced_layer_by_layer_from_its_map():
    """nvidia/Qwen3.6-35B-A3B-NVFP4's config.json (`quant_algo: MIXED_PRECISION`, read before its
    hf_quant_config.json, as vLLM reads it) names, for each of its 40 layers (30 gated-delta-net, 10 full
    attention, every one MoE), the linear attention's `in_proj_qkv`, `in_proj_z`, `out_proj` and the full
    attention's q, k, v, o FP8; the routed experts (`mlp.experts`), the shared expert's three projections
    and the `lm_head` W4A16_NVFP4 (NVFP4's bytes, 16-bit activations). By hand (hidden 2048, 256 experts of
    512, shared expert 512, vocabulary 248320; linear attention 16 key heads and 32 value heads of 128: key
    2048, value 4096 wide; full attention 16 heads of 256 with the output gate, 2 KV heads):

    - experts: 40 x 256 x 3 NVFP4 512 x 2048 (or 2048 x 512) matrices of 524,288 + 65,536 + 8 bytes;
    - shared experts: 40 x 3 of the same;
    - `lm_head`: NVFP4 248320 x 2048 (254,279,680 + 248,320 x 128 + 8);
    - attention: per linear layer vLLM's fused `in_proj_qkvz` (12288 x 2048; both its shards FP8) and
      `out_proj` (2048 x 4096) fp8, and `in_proj_ba` (64 x 2048), whose shards `in_proj_b` / `in_proj_a`
      the map does not name, bf16; per full layer q (8192 x 2048), k, v (512 x 2048) and o (2048 x 4096) fp8;
    - embeddings and routers (256 + 1 shared-expert gate rows of 2048) bf16, as vLLM builds them.

    The KV cache stays bf16: config.json's quantization_config has no `kv_cache_scheme` (the
    `kv_cache_quant_algo: FP8` is in hf_quant_config.json, which vLLM does not read beside it)."""
    m = models.from_hf_config(QWEN_35B)
    assert m.quantization == (
        "modelopt_mixed: lm_head nvfp4 w4a16, attn fp8 per tensor, experts nvfp4 w4a16, "
        "shared_experts nvfp4 w4a16"
    )
    assert m.kv_dtype == "bf16"
    groups = weight_groups(m)
    expert = _nvfp4(512, 2048)
    assert expert == _nvfp4(2048, 512) == 589_832
    assert groups["experts"].bytes == 40 * 256 * 3 * expert == 18_119_639_040
    assert groups["shared_experts"].bytes == 40 * 3 * expert
    assert groups["lm_head"].bytes == _nvfp4(248320, 2048) == 286_064_648
    linear = _fp8(12288, 2048) + _fp8(2048, 4096) + 2 * 64 * 2048
    full = _fp8(8192, 2048) + 2 * _fp8(512, 2048) + _fp8(2048, 4096)
    assert groups["attn"].bytes == 30 * linear + 10 * full == 1_287_127_440
    assert groups["embed"].bytes == 2 * 248320 * 2048
    assert groups["router"].bytes == 2 * 40 * (256 + 1) * 2048
    # the compute rates: fp8 attention; the W4A16 experts and lm_head at the 16-bit rate (Marlin)
    assert (groups["attn"].rate, groups["experts"].rate, groups["lm_head"].rate) == ("fp8", "bf16", "bf16")
    assert sum(g.bytes for g in groups.values()) == m.param_bytes == 20_825_156_184
    assert m.weight_dtype == "fp4"  # (the experts', most of the parameters)


def test_qwen3_6_27b_nvfp4_dense_mlp_w4a16_and_an_fp8_kv_cache():
    """nvidia/Qwen3.6-27B-NVFP4 (dense, 64 layers of 5120, MLP 17408): the MLP's gate, up (vLLM's fused
    `gate_up_proj`, both shards W4A16_NVFP4) and down NVFP4, the attention FP8 as the 35B's, the `lm_head`
    NVFP4; its config.json's `kv_cache_scheme` (8-bit float, static) makes the KV cache fp8."""
    m = models.from_hf_config(QWEN_27B)
    assert m.kv_dtype == "fp8"
    groups = weight_groups(m)
    assert groups["mlp"].bytes == 64 * (2 * _nvfp4(17408, 5120) + _nvfp4(5120, 17408))
    # linear attention: key 2048, value 6144 wide (48 value heads); full: 24 heads of 256 gated, 4 KV heads
    linear = _fp8(16384, 5120) + _fp8(5120, 6144) + 2 * 96 * 5120
    full = _fp8(12288, 5120) + 2 * _fp8(1024, 5120) + _fp8(5120, 6144)
    assert groups["attn"].bytes == 48 * linear + 16 * full
    assert groups["lm_head"].bytes == _nvfp4(248320, 5120)
    assert m.param_bytes == 20_150_568_072


def test_a_fused_module_whose_shards_disagree_is_refused():
    """vLLM raises "Mixed quant_algo within fused layer" when the shards of one fused module (q, k, v of
    `qkv_proj`; `in_proj_qkv`, `in_proj_z` of Qwen3.5's `in_proj_qkvz`) resolve to different algorithms:
    kvsim refuses the checkpoint likewise."""
    b, _ = model_breakdown(models.from_hf_config(QWEN_35B))
    qc = copy.deepcopy(_qc(QWEN_35B))
    qc["quantized_layers"]["model.language_model.layers.3.self_attn.k_proj"] = {
        "quant_algo": "W4A16_NVFP4",
        "group_size": 16,
    }
    with pytest.raises(InvalidArgumentError, match=r"qkv_proj.*vLLM 0\.33\.0 and 0\.34\.0 refuse it"):
        quant.from_config(qc, "t", b)
    qc = copy.deepcopy(_qc(QWEN_35B))
    qc["quantized_layers"]["model.language_model.layers.0.linear_attn.in_proj_z"] = {"quant_algo": "NVFP4"}
    with pytest.raises(InvalidArgumentError, match="in_proj_qkvz"):
        quant.from_config(qc, "t", b)


def test_a_module_absent_from_the_map_stays_unquantized():
    """A module the map names nowhere (by itself, its shards or anything below it) is built unquantized
    (`get_quant_method`: "Layer not in quantized_layers — leave unquantized"): layer 0's `out_proj` taken out
    of the map costs 2 bytes a weight there, the other 29 stay fp8."""
    m = models.from_hf_config(QWEN_35B)
    b, _ = model_breakdown(m)
    qc = copy.deepcopy(_qc(QWEN_35B))
    del qc["quantized_layers"]["model.language_model.layers.0.linear_attn.out_proj"]
    q = quant.from_config(qc, "t", b)
    full = quant.from_config(_qc(QWEN_35B), "t", b)
    (out,) = [mat for mat in b.matrices["attn"] if mat.module == "linear_attn.out_proj"]
    assert out.count == 30
    assert q.quantized(out, b, "attn") == 29
    assert q.group_bytes(b, "attn", 16) - full.group_bytes(b, "attn", 16) == 2 * 2048 * 4096 - _fp8(
        2048, 4096
    )
    # in_proj_ba (shards in_proj_b / in_proj_a) is in no layer's entries: bf16 in all 30
    (ba,) = [mat for mat in b.matrices["attn"] if mat.module == "linear_attn.in_proj_ba"]
    assert full.quantized(ba, b, "attn") == 0


def _experts_model() -> Breakdown:
    b = Breakdown(aliases=("backbone",))
    b.add("attn", 256, 128, 2, module="mixer.in_proj", layers=range(2))
    b.add("experts", 64, 128, 2 * 4, module="mixer.experts", layers=range(2))  # 4 experts' up
    b.add("experts", 128, 64, 2 * 4, module="mixer.experts", layers=range(2))  # down
    b.add("router", 4, 128, 2, module="mixer.gate", layers=range(2))
    return b


def _mixed(layers: dict, exclude: list[str] | None = None) -> dict:
    return {
        "producer": {"name": "modelopt"},
        "quantization": {
            "quant_algo": "MIXED_PRECISION",
            "quantized_layers": layers,
            "exclude_modules": exclude or [],
        },
    }


def test_experts_named_one_by_one_resolve_by_their_prefix():
    """Nemotron-H's map names each expert's projections (`backbone.layers.N.mixer.experts.K.up_proj`): vLLM's
    fused-MoE layer `model.layers.N.mixer.experts` takes the first name below it (the checkpoint's `backbone`
    mapped to `model`); the exclude list comes first; the router is never quantized."""
    b = _experts_model()
    layers = {
        f"backbone.layers.{i}.mixer.experts.{k}.{p}": {"quant_algo": "W4A16_NVFP4", "group_size": 16}
        for i in range(2)
        for k in range(4)
        for p in ("up_proj", "down_proj")
    }
    layers |= {f"backbone.layers.{i}.mixer.in_proj": {"quant_algo": "FP8"} for i in range(2)}
    layers["backbone.layers.0.mixer.gate"] = {"quant_algo": "FP8"}
    q = quant.from_config(_mixed(layers, ["backbone.layers.1.mixer.in_proj"]), "t", b)
    assert q.describe() == "modelopt_mixed: attn fp8 per tensor, experts nvfp4 w4a16"
    (attn,) = b.matrices["attn"]
    assert q.layout(b, "attn", attn) == {quant.Format("fp8", 8, "tensor"): 1, None: 1}
    assert all(q.quantized(mat, b, "experts") == mat.count for mat in b.matrices["experts"])
    assert q.quantized(b.matrices["router"][0], b, "router") == 0


def test_the_experts_parent_rule_and_block_fp8_experts():
    """A map naming only `mixer.gate_proj`-style siblings of the experts (ModelOpt's `…moe.gate_proj`) gives
    the fused-MoE layer their algorithm (vLLM's `.experts` parent rule); block-FP8 experts take the one
    `group_size` of the map's block-FP8 entries as their block, and two different ones are refused."""
    b = _experts_model()
    layers = {
        f"model.layers.{i}.mixer.w_gate": {"quant_algo": "FP8_PB_WO", "group_size": 64} for i in range(2)
    }
    q = quant.from_config(_mixed(layers), "t", b)
    assert q.formats["experts"] == quant.Format("fp8", 8, "block", (64, 64))
    layers["model.layers.1.mixer.w_gate"] = {"quant_algo": "FP8_BLOCK_SCALES", "group_size": 128}
    with pytest.raises(InvalidArgumentError, match="one group_size"):
        quant.from_config(_mixed(layers), "t", b)


def test_algorithms_kvsim_has_no_bytes_for_are_refused_by_name():
    """The b12x codecs have no byte format in kvsim: refused with the module; FP8_BLOCK_SCALES on a linear
    layer, which vLLM would build unquantized, too. (MXFP8, refused until MiniMax-M3-NVFP4's attention
    needed it, is priced: `test_a_block_sparse_moe_block_is_named_as_vllm_builds_it`.)"""
    b = _experts_model()
    for algo in ("Q8_0", "FP8_BLOCK_SCALES"):
        layers = {f"model.layers.{i}.mixer.in_proj": {"quant_algo": algo} for i in range(2)}
        with pytest.raises(InvalidArgumentError, match=f"'{algo}' for model.layers.0.mixer.in_proj"):
            quant.from_config(_mixed(layers), "t", b)
    with pytest.raises(InvalidArgumentError, match="non-empty 'quantized_layers'"):
        quant.from_config(_mixed({}), "t", b)


def _mixtral(quantization_config: dict) -> dict:
    cfg = json.loads((HF / "mixtral-8x7b.json").read_text())
    return {**cfg, "quantization_config": quantization_config}


def test_a_block_sparse_moe_block_is_named_as_vllm_builds_it():
    """vLLM 0.33.0 builds Mixtral's MoE block with the `block_sparse_moe` prefix (`mixtral.py`; PhiMoE, Granite
    MoE and MiniMax-M3 alike), the name a per-module map is read against: a map naming each layer's
    `block_sparse_moe.experts` NVFP4 and its attention MXFP8 (fp8 values and an E8M0 byte per 32 inputs,
    `ModelOptMxFp8LinearMethod`) prices them so, where kvsim's `mlp.experts` matched nothing and left 45B
    expert parameters bf16 (NVIDIA's MiniMax-M3-NVFP4 names its experts so: 844 GB for ~248 GB)."""
    layers = 32
    qmap = {}
    for i in range(layers):
        p = f"model.layers.{i}"
        qmap[f"{p}.block_sparse_moe.experts"] = {"quant_algo": "NVFP4", "group_size": 16}
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            qmap[f"{p}.self_attn.{proj}"] = {"quant_algo": "MXFP8"}
    qc = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "producer": {"name": "modelopt"},
        "quantized_layers": qmap,
        "exclude_modules": ["lm_head"],
    }
    from kvsim.model import hf_config

    m = hf_config._from_dict(_mixtral(qc), "mixtral", "mixtral", "mixtral", None)
    g = weight_groups(m)
    hidden, ffn, experts = 4096, 14336, 8
    assert g["experts"].bytes == layers * experts * (2 * _nvfp4(ffn, hidden) + _nvfp4(hidden, ffn))
    mxfp8 = lambda rows, cols: rows * cols + rows * (cols // 32)  # noqa: E731
    attn = mxfp8(4096, hidden) + 2 * mxfp8(1024, hidden) + mxfp8(hidden, 4096)
    assert g["attn"].bytes == layers * attn
    assert g["attn"].rate == "fp8"


def test_mxfp8_experts_split_into_shares_of_32_or_are_refused():
    """vLLM's MXFP8 experts (`ModelOptMxFp8FusedMoE.create_weights`) take a share of each expert's width a
    multiple of 32 (a scale per 32 inputs): Mixtral's 14,336 over tp 8 x dp 16 is 112 a GPU, refused with
    vLLM's words; over tp 8 x dp 2 (896) it loads."""
    from kvsim.errors import UnsplittableModelError
    from kvsim.model import hf_config, shard

    qmap = {f"model.layers.{i}.block_sparse_moe.experts": {"quant_algo": "MXFP8"} for i in range(32)}
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": qmap}
    m = hf_config._from_dict(_mixtral(qc), "mixtral", "mixtral", "mixtral", None)
    assert "experts mxfp8" in m.quantization
    shard.shard(m, None, 8, data_parallel_size=2)
    with pytest.raises(
        UnsplittableModelError, match="intermediate_size_per_partition divisible by 32, got 112"
    ):
        shard.shard(m, None, 8, data_parallel_size=16)


@pytest.mark.parametrize("size", ["abc", None, 0, -128, 128.5, True])
def test_a_map_entrys_group_size_that_is_no_whole_number_is_refused_by_name(size):
    """A block-FP8 entry's `group_size` sizes its blocks: a string, null, zero, a negative or fractional
    number raised a bare ValueError / TypeError / ZeroDivisionError or was priced; refused by name."""
    layers = {
        f"model.layers.{i}.mixer.experts": {"quant_algo": "FP8_PB_WO", "group_size": size} for i in range(2)
    }
    with pytest.raises(
        InvalidArgumentError, match=r"quantized_layers\['model.layers.0.mixer.experts'\].group_size"
    ):
        quant.from_config(_mixed(layers), "t", _experts_model())


def test_an_ignore_list_naming_layers_elsewhere_does_not_skip_the_experts_split_check(tmp_path):
    """Qwen3.6-35B-A3B's list names only its MTP layers (`mtp.layers.0*`); with block-FP8 experts of 128
    (FP8_BLOCK_SCALES) its 512-wide experts split over 8 GPUs give 64 features a GPU, which vLLM refuses
    (`validate_fp8_block_shape_moe`). kvsim skipped every split check once an entry named "layers" (an
    adversarial pass found), pricing it."""
    import kvsim
    from kvsim.errors import UnsplittableModelError

    cfg = json.loads((QWEN_35B / "config.json").read_text())
    qc = copy.deepcopy(cfg["quantization_config"])
    for key in qc["quantized_layers"]:
        if key.endswith("mlp.experts"):
            qc["quantized_layers"][key] = {"quant_algo": "FP8_BLOCK_SCALES", "group_size": 128}
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "quantization_config": qc}))
    with pytest.raises(UnsplittableModelError, match="not a whole number of its fp8 blocks"):
        kvsim.SimConfig(model=str(tmp_path / "config.json"), gpu="b200", tensor_parallel_size=8)


@pytest.mark.parametrize("value", [["FP8"], 8, True])
def test_a_kv_cache_algorithm_of_another_type_is_refused_by_name(value):
    """`kv_cache_quant_algo` a list, a number or a flag was read as no fp8 KV cache (an adversarial pass)."""
    qc = {
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": value},
    }
    with pytest.raises(InvalidArgumentError, match=r"kv_cache_quant_algo .* must be an algorithm's name"):
        quant.from_config(qc, "t")


def test_a_mixed_maps_row_parallel_matrices_are_known_quantized_for_the_split_checks():
    """`Model.row_inputs` says which row-parallel matrices the checkpoint quantizes, for the tensor-parallel
    checks (fp8 blocks, int groups); a MIXED_PRECISION map's module formats depend on their group, which the
    callers did not pass: every matrix read as unquantized, the checks skipped (a re-read of the diff)."""
    from kvsim.model import hf_config

    qmap = {f"model.layers.{i}.self_attn.o_proj": {"quant_algo": "FP8_PB_WO"} for i in range(32)}
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": qmap}
    m = hf_config._from_dict(_mixtral(qc), "mixtral", "mixtral", "mixtral", None)
    assert ("attn", 4096, 0, True) in m.row_inputs
