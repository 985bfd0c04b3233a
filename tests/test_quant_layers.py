"""A checkpoint's ignore list read module by module, layer by layer (`kvsim.model.quant.Quantization.quantized`),
as vLLM 0.33.0 decides each module's method from its prefix (`is_layer_skipped`, `quant_utils.py`; ModelOpt's
`is_layer_excluded`): a module the list names in some layers only is unquantized in those layers, and a group
is exempt whole when the list names it in every layer that holds it (not every decoder layer)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.model import models, quant
from kvsim.model.params import Breakdown
from kvsim.model.weights import model_breakdown, weight_groups

HF = Path(__file__).parent / "data" / "hf"
NVFP4 = quant.Format("nvfp4", 4)
BF16 = quant.Format("dense", 16)


def _fp8(ignored: list[str]) -> dict:
    return {"quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": ignored}


def test_a_module_ignored_in_half_the_layers_prices_half_the_group():
    b = Breakdown()
    b.add("mlp", 1024, 512, 2 * 8, module="mlp.gate_proj", layers=range(8))  # gate, up
    b.add("mlp", 512, 1024, 8, row=True, module="mlp.down_proj", layers=range(8))
    whole = sum(m.params for m in b.matrices["mlp"])
    fp8 = quant.Format("fp8", 8, "tensor")
    all_fp8 = sum(fp8.matrix_bytes(m) for m in b.matrices["mlp"])
    half = [f"model.layers.{i}.mlp" for i in range(0, 8, 2)]
    q = quant.from_config(_fp8(half), "t", b)
    assert "mlp" in q.formats  # quantized where it is not named
    assert [q.quantized(m, b, "mlp") for m in b.matrices["mlp"]] == [8, 4]
    assert q.group_bytes(b, "mlp", 16) == all_fp8 // 2 + whole  # half at fp8, half at 2 bytes
    # one projection named in one layer: that layer's down_proj alone
    one = quant.from_config(_fp8(["model.layers.3.mlp.down_proj"]), "t", b)
    assert [one.quantized(m, b, "mlp") for m in b.matrices["mlp"]] == [16, 7]
    # named in every layer: the group is exempt (and no longer said quantized)
    every = quant.from_config(_fp8(["re:model\\.layers\\.\\d+\\.mlp\\..*"]), "t", b)
    assert "mlp" not in every.formats
    assert every.group_bytes(b, "mlp", 16) == 2 * whole


def test_a_group_is_exempt_where_every_layer_holding_it_is_named():
    """Rule 2: the layers that hold the group, not every decoder layer. A dense MLP on the first 3 of 8
    layers (DeepSeek's `first_k_dense_replace`), named in those 3, is unquantized; the experts of the other 5
    stay quantized."""
    b = Breakdown()
    b.add("mlp", 256, 128, 3, module="mlp.gate_proj", layers=range(3))
    b.add("experts", 64, 128, 4 * 5, module="mlp.experts", layers=range(3, 8))
    q = quant.from_config(_fp8([f"model.layers.{i}.mlp.gate_proj" for i in range(3)]), "t", b)
    assert "mlp" not in q.formats
    assert "experts" in q.formats


def test_glm_5_2_nvfp4_dense_mlps_of_its_first_layers_stay_bf16():
    """nvidia/GLM-5.2-NVFP4's ignore list names layers 0, 1 and 2 whole (`model.layers.0*`,
    `model.layers.1.*`, `model.layers.2.*`): the only layers with a dense MLP (`first_k_dense_replace` 3).
    vLLM builds those MLPs unquantized; kvsim priced them NVFP4, since the list names no MLP in the 75 MoE
    layers (0.98 GB short: 443.91 GB where the breakdown's own sum is 444.89 GB)."""
    m = models.from_hf_config(HF / "glm-5.2-nvfp4.json")
    groups = weight_groups(m)
    b, _ = model_breakdown(m)
    mlps = b.matrices["mlp"]
    assert {i for mat in mlps for i in mat.layers} == {0, 1, 2}
    assert "mlp" not in m.quantization
    assert groups["mlp"].bytes == 2 * groups["mlp"].params == 3 * 3 * 6144 * 12288 * 2
    was = sum(NVFP4.matrix_bytes(mat) for mat in mlps)  # what kvsim priced them before
    assert groups["mlp"].bytes - was == 976_748_472
    assert m.param_bytes == 444_889_387_008  # 443,912,638,536 before, with the MLPs NVFP4
    assert sum(g.bytes for g in groups.values()) == m.param_bytes


def test_nemotron_3_nano_nvfp4_keeps_its_attention_and_the_mamba_mixers_before_it_bf16():
    """nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4 (its `hf_quant_config.json`) excludes, by Nemotron-H's own
    names (`backbone.layers.N.mixer.q_proj`, ... `in_proj`, `out_proj`), the attention of its 6 attention
    layers and the Mamba mixer of the 6 layers before them: vLLM (`hf_to_vllm_mapper`: `backbone` ->
    `model`) builds those unquantized; kvsim matched Llama's `self_attn` names only and priced them all
    NVFP4 (18.82 GB for 19.36 GB). Hugging Face counts the checkpoint's stored values (two 4-bit weights a
    byte, an fp8 scale per 16) at 18.2B (as a public model page quotes Hugging Face's figure, rounded): this
    pricing's count is 18.24B, the one with every mixer NVFP4 18.07B."""
    m = models.from_hf_config(HF / "nemotron-3-nano-30b-a3b-nvfp4")
    assert m.quantization.startswith("modelopt_fp4")
    assert m.kv_dtype == "fp8"
    b, _ = model_breakdown(m)
    qc = json.loads((HF / "nemotron-3-nano-30b-a3b-nvfp4" / "hf_quant_config.json").read_text())
    q = quant.from_config(qc, "t", b)
    attention, mamba = [5, 12, 19, 26, 33, 42], [4, 11, 18, 25, 32, 41]
    by_module = {mat.module: mat for mat in b.matrices["attn"]}
    assert by_module["mixer.in_proj"].count == 23
    assert by_module["mixer.o_proj"].count == 6
    for mat in b.matrices["attn"]:
        named = attention if mat.module.startswith(("mixer.q_proj", "mixer.o_proj")) else mamba
        each = mat.count // len(mat.layers)
        assert q.quantized(mat, b, "attn") == mat.count - each * len(named), mat.module
    assert all(
        q.quantized(mat, b, g) == mat.count for g in ("experts", "shared_experts") for mat in b.matrices[g]
    )
    expect = 0
    for mat in b.matrices["attn"]:
        n = q.quantized(mat, b, "attn")
        expect += (
            NVFP4.matrix_bytes(mat) * n // mat.count + BF16.matrix_bytes(mat) * (mat.count - n) // mat.count
        )
    assert weight_groups(m)["attn"].bytes == expect
    assert m.param_bytes == 19_355_785_472  # 18,820,207,136 with every mixer NVFP4

    def stored_values(q: quant.Quantization) -> int:
        total = b.other
        for g, mats in b.matrices.items():
            for mat in mats:
                n = q.quantized(mat, b, g) if g in q.formats else 0
                per = mat.rows * mat.cols
                total += n * (per // 2 + per // 16 + 2) + (mat.count - n) * per
        return total

    assert round(stored_values(q) / 1e9, 1) == 18.2
    assert round(stored_values(quant.Quantization(q.method, q.formats)) / 1e9, 1) == 18.1


def test_nemotron_h_names_match_both_spellings():
    """vLLM's `model.layers.N.mixer.*` and the checkpoint's `backbone.layers.N.mixer.*` name the same module."""
    assert quant.is_ignored(
        "model.layers.4.mixer.in_proj", ["backbone.layers.4.mixer.in_proj"], ("backbone",)
    )
    assert quant.is_ignored("model.layers.4.mixer.in_proj", ["model.layers.4.mixer.in_proj"], ("backbone",))
    assert not quant.is_ignored("model.layers.4.mixer.in_proj", ["backbone.layers.4.mixer.in_proj"])
    assert not quant.is_ignored(
        "model.layers.14.mixer.in_proj", ["backbone.layers.4.mixer.in_proj"], ("backbone",)
    )


@pytest.mark.parametrize(
    ("entry", "name", "named"),
    [
        ("lm_head", "lm_head", True),  # the name itself
        ("model.layers.1", "model.layers.1.mlp.gate", True),  # a module below it
        ("model.layers.1", "model.layers.12.mlp.gate", False),  # not a prefix of another component
        ("self_attn", "model.layers.3.self_attn.q_proj", True),  # a component
        ("mlp.gate", "model.layers.3.mlp.gate", True),  # a dotted run of components, at the end
        ("mlp.gate", "model.layers.3.mlp.gate_proj", False),
        ("gate", "model.layers.3.mlp.gate_proj", False),
        ("model.layers.1*", "model.layers.12.mlp.gate", True),  # a glob
        ("*.mlp.*", "model.layers.0.mlp.experts", True),
        ("*experts", "model.layers.0.mlp.experts.w1", True),  # a glob naming a module above
        ("re:model\\.layers\\.[0-2]\\.", "model.layers.2.mlp", True),  # a regex, matched from the start
        ("re:layers\\.2", "model.layers.2.mlp", False),
    ],
)
def test_ignore_entries_name_modules_as_vllm_spells_them(entry, name, named):
    """Each spelling an ignore list uses, compiled once per list (`_pattern_regex`): the answers kvsim gave
    when it matched every entry against every name in turn."""
    assert quant.is_ignored(name, [entry]) is named


def test_an_ignore_entry_that_is_no_regular_expression_is_refused_by_name():
    with pytest.raises(InvalidArgumentError, match=r"ignored_layers entry 're:\(' is not a valid regular"):
        quant.from_config(_fp8(["lm_head", "re:("]), "config.json")


def _kimi_fp8(tmp_path: Path, ignored: list[str]) -> Path:
    cfg = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
    cfg["quantization_config"] = _fp8(ignored)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_kimi_linear_moe_block_is_named_block_sparse_moe(tmp_path):
    """vLLM 0.33.0 builds Kimi-Linear's MoE block under `block_sparse_moe` (`models/kimi_k3/nvidia/model.py`,
    KimiDecoderLayer: prefix `...block_sparse_moe`; the checkpoint's names too), its first layer's dense MLP
    under `mlp`. kvsim named the MoE block `mlp.*`: an ignore list naming `block_sparse_moe` missed it, and
    one naming `mlp` took the 26 MoE layers' shared experts for unquantized where vLLM quantizes them."""
    b = model_breakdown(models.from_hf_config(HF / "kimi-linear-48b-a3b.json"))[0]
    names = {g: {m.module for m in b.matrices[g]} for g in ("mlp", "experts", "shared_experts", "router")}
    assert names == {
        "mlp": {"mlp.gate_proj", "mlp.down_proj"},
        "experts": {"block_sparse_moe.experts"},
        "shared_experts": {
            "block_sparse_moe.shared_experts.gate_proj",
            "block_sparse_moe.shared_experts.down_proj",
        },
        "router": {"block_sparse_moe.gate"},
    }
    # The shared experts of every MoE layer named: that group is exempt, the routed experts are not.
    m = models.from_hf_config(_kimi_fp8(tmp_path, ["re:.*block_sparse_moe\\.shared_experts.*"]))
    assert "shared_experts" not in m.quantization
    assert "experts" in m.quantization
    shared = 26 * 3 * 2304 * 1024
    assert weight_groups(m)["shared_experts"].bytes == 2 * shared
    # One layer's: that layer's alone stays bf16.
    m = models.from_hf_config(_kimi_fp8(tmp_path, ["model.layers.5.block_sparse_moe.shared_experts"]))
    fp8 = quant.Format("fp8", 8, "tensor")
    layer = [dataclasses.replace(mat, count=mat.count // 26) for mat in b.matrices["shared_experts"]]
    assert weight_groups(m)["shared_experts"].bytes == sum(
        25 * fp8.matrix_bytes(mat) + BF16.matrix_bytes(mat) for mat in layer
    )
    # `mlp` names the dense MLP of layer 0 only (as in vLLM), not the MoE blocks.
    m = models.from_hf_config(_kimi_fp8(tmp_path, ["re:.*\\.mlp\\..*"]))
    assert "mlp" not in m.quantization
    assert "shared_experts" in m.quantization


def test_kimi_linear_kda_input_projection_is_one_module_to_an_ignore_list(tmp_path):
    """vLLM 0.33.0 fuses KDA's q, k, v, b and f_a projections into `self_attn.in_proj_qkvgfab`
    (`KimiLinearModel.packed_modules_mapping`): an ignore list naming all its parts leaves the module
    unquantized; one naming some parts only is refused by vLLM ("Detected some but not all shards"), and by
    kvsim, which priced them apart (`b_proj` and `f_a_proj` separately named, `g_a_proj` under `f_a_proj`'s
    name)."""
    every = ["q_proj", "k_proj", "v_proj", "b_proj", "f_a_proj"]
    m = models.from_hf_config(_kimi_fp8(tmp_path, [f"model.layers.0.self_attn.{p}" for p in every]))
    b = model_breakdown(m)[0]
    q = quant.from_config(_fp8([f"model.layers.0.self_attn.{p}" for p in every]), "t", b)
    in_proj = [mat for mat in b.matrices["attn"] if mat.fused == "self_attn.in_proj_qkvgfab"]
    assert [(mat.rows, mat.count, mat.whole) for mat in in_proj] == [
        (4096, 60, False),
        (32, 20, False),
        (128, 20, True),
    ]
    assert [q.quantized(mat, b, "attn") for mat in in_proj] == [57, 19, 19]  # layer 0's parts unquantized
    by_module = {mat.module: mat for mat in b.matrices["attn"] if 0 in mat.layers}
    assert by_module["self_attn.g_a_proj"].whole
    assert not by_module["self_attn.g_b_proj"].whole
    assert q.quantized(by_module["self_attn.g_a_proj"], b, "attn") == 20  # a module of its own, not named
    for named in (["model.layers.2.self_attn.b_proj"], ["re:.*self_attn\\.f_a_proj"]):
        with pytest.raises(
            InvalidArgumentError, match=r"vLLM 0\.33\.0 and 0\.34\.0 fuse them into one module"
        ):
            models.from_hf_config(_kimi_fp8(tmp_path, named))
    with pytest.raises(InvalidArgumentError, match="by its own name, which kvsim does not read"):
        models.from_hf_config(_kimi_fp8(tmp_path, ["model.layers.1.self_attn.in_proj_qkvgfab"]))
    # `self_attn` names every part (and MLA's modules) alike: taken.
    m = models.from_hf_config(_kimi_fp8(tmp_path, ["self_attn"]))
    assert "attn" not in m.quantization


def test_a_quantization_config_without_a_method_says_what_it_lacks():
    """A ModelOpt file whose producer is missing (as some copies of NVIDIA's hf_quant_config.json are) names
    no method vLLM 0.33.0 can read: the refusal says which fields it looked for."""
    with pytest.raises(InvalidArgumentError, match="has no quant_method, nor ModelOpt's producer"):
        quant.from_config(
            {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}, "config.json"
        )


@pytest.mark.parametrize(
    ("named", "fused"),
    [
        (["self_attn.q_proj"], "self_attn.qkv_proj"),
        (["self_attn.k_proj", "self_attn.v_proj"], "self_attn.qkv_proj"),
        (["mlp.up_proj"], "mlp.gate_up_proj"),
    ],
)
def test_an_ignore_list_naming_some_parts_of_a_fused_module_is_refused(named, fused):
    """vLLM 0.33.0 fuses q, k, v (and gate, up) into one module and refuses an ignore list naming some of its
    parts ("Detected some but not all shards ... are quantized", `is_layer_skipped`): kvsim priced the named
    ones' group by its first part (all bf16 for `q_proj`, all fp8 for `k_proj`). All of them is a layer's
    module unquantized."""
    from kvsim.model import hf_config

    cfg = json.loads((HF / "qwen3-32b.json").read_text())

    def load(entries: list[str]):
        qc = _fp8([f"model.layers.0.{e}" for e in entries])
        return hf_config._from_dict({**cfg, "quantization_config": qc}, "q", "q", "q", None)

    with pytest.raises(InvalidArgumentError, match=rf"not .*\({re.escape(fused)}\) and refuse"):
        load(named)
    parts = {
        "self_attn.qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "mlp.gate_up_proj": ["gate_proj", "up_proj"],
    }
    prefix = fused.split(".")[0]
    assert load([f"{prefix}.{p}" for p in parts[fused]]).weight_bytes > load([]).weight_bytes


@pytest.mark.parametrize("entry", ["re:a{4294967295}", "re:" + "(" * 500 + ")" * 500])
def test_an_ignore_entry_past_the_regex_engines_bounds_is_refused_by_name(entry):
    """A repeat past the engine's bound raised a bare OverflowError, groups nested past its depth a
    RecursionError (an adversarial pass)."""
    with pytest.raises(InvalidArgumentError, match="is not a valid regular expression"):
        quant.from_config(_fp8(["lm_head", entry]), "config.json")
