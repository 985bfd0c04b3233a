"""Tensor-parallel splits vLLM 0.33.0 cannot make, or makes wrongly without a word, refused by name
(`kvsim.model.shard`; DESIGN.md §Defaults and sizing, "Tensor parallelism"): the routed experts' width, a
gated delta net's key and value heads, a KDA layer's heads, DeepSeek-V4's output groups, gpt-oss's KV
heads and experts' width over its world, the OLMo family's KV heads under a key norm over them all, more
GPUs than Qwen2/3-MoE's and MiniMax-M2's experts, GPTQ groups split over the GPUs, an AWQ group as wide as
the layer, the routed experts' fp8 blocks and int groups, and (at load) compressed-tensors schemes no
fused-MoE method takes. Each next to a split, or a scheme, that still works."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

import kvsim
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError, UnsplittableModelError
from kvsim.model import hf_config
from kvsim.model.catalogue import ENTRIES
from kvsim.model.sizing import kv_bytes_per_token

HF = Path(__file__).parent / "data" / "hf"


def _model(cfg: dict[str, Any], name: str = "m") -> Any:
    return hf_config._from_dict(cfg, name, name, name, None)


def _preset(name: str, **change: Any) -> dict[str, Any]:
    return {**copy.deepcopy(ENTRIES[name][1]), **change}


def _fits(model: Any, tp: int, **kw: Any) -> None:
    kvsim.SimConfig(model=model, kv_cache_bytes="10GiB", tensor_parallel_size=tp, **kw)


def _refused(model: Any, tp: int, needle: str, **kw: Any) -> str:
    with pytest.raises(UnsplittableModelError, match=re.escape(needle)) as exc:
        _fits(model, tp, **kw)
    return str(exc.value)


def test_routed_experts_width_must_split_over_the_gpus():
    """vLLM's FusedMoEConfig asserts `intermediate_size % tp_size == 0` (fused_moe/config.py) without expert
    parallelism, then floor-divides; with it each GPU holds whole experts. kvsim priced 772 / 8 a GPU."""
    m = _model(_preset("qwen3-30b-a3b", moe_intermediate_size=772), "q3moe")
    _fits(m, 4)  # 193 a GPU
    msg = _refused(m, 8, "tensor_parallel_size 8 does not divide q3moe's moe_intermediate_size 772")
    assert "FusedMoEConfig asserts intermediate_size % tp_size == 0 (772 % 8 = 4)" in msg
    _fits(m, 8, enable_expert_parallel=True)  # whole experts on each GPU: nothing split
    _fits(m, 8, enable_expert_parallel=True, gpu="h100-80gb", time_model="linear")
    with pytest.raises(UnsplittableModelError, match="moe_intermediate_size 772"):
        kv_bytes_per_token(m, None, 8)
    # The presets split at every tensor-parallel size their attention heads allow (gpt-oss at as many as
    # its KV heads: test_gpt_oss_refuses_more_gpus_than_kv_heads_and_a_world_its_width_does_not_fill).
    for name, tp in (("qwen3-30b-a3b", 32), ("gpt-oss-120b", 8), ("qwen3-next-80b-a3b", 16)):
        _fits(name, tp)


def test_gpt_oss_refuses_more_gpus_than_kv_heads_and_a_world_its_width_does_not_fill():
    """vLLM 0.33.0's gpt_oss.py: OAIAttention gives each GPU num_key_value_heads // tp_size KV heads,
    replicating none, so at tp 16 its Attention gets 0 and `num_heads % num_kv_heads` divides by zero
    (kvsim priced one replicated KV head a GPU up to tp 64); MLPBlock asserts `intermediate_size %
    world_size == 0` on torch.distributed's world, every tp x dp GPU, under --enable-expert-parallel too, so
    gpt-oss-120b's 128 experts one a GPU over 128 GPUs are refused (2,880 % 128 = 64), where kvsim checked
    only that the experts divide."""
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        msg = _refused(name, 16, f"tensor_parallel_size 16 exceeds {name}'s num_key_value_heads 8")
        assert "gives each GPU 8 // 16 = 0 KV heads" in msg
        assert "num_heads % num_kv_heads check divides by zero" in msg
        _refused(name, 64, "tensor_parallel_size 64 exceeds", enable_expert_parallel=True)
        _fits(name, 8)
    for tp, dp in ((8, 16), (1, 128)):
        msg = _refused(
            "gpt-oss-120b",
            tp,
            f"tensor_parallel_size {tp} x data_parallel_size {dp} does not divide gpt-oss-120b's "
            "intermediate_size 2880",
            data_parallel_size=dp,
            enable_expert_parallel=True,
        )
        assert (
            f"asserts intermediate_size % world_size == 0 over every GPU, with --enable-expert-parallel "
            f"too (2880 % ({tp} x {dp}) = 64)" in msg
        )
    # 64 GPUs (2,880 / 64 = 45) with whole experts, and without (each expert split over tp x dp), and a
    # world of 3 (960 a GPU); the generic KV-head rule's replicated layouts for other models are untouched.
    _fits("gpt-oss-120b", 8, data_parallel_size=8, enable_expert_parallel=True)
    _fits("gpt-oss-120b", 1, data_parallel_size=64)
    _fits("gpt-oss-120b", 1, data_parallel_size=3)
    _fits("qwen3-30b-a3b", 32)
    from kvsim.model.models import resolve
    from kvsim.model.shard import shard

    with pytest.raises(UnsplittableModelError, match="num_key_value_heads 8"):
        shard(resolve("gpt-oss-20b"), None, 32)
    with pytest.raises(UnsplittableModelError, match="gpt-oss MLPBlock"):
        shard(resolve("gpt-oss-120b"), None, 4, data_parallel_size=32, expert_parallel=True)


_OLMOE_1B_7B = {  # allenai/OLMoE-1B-7B-0924's config.json (16 heads and 16 KV heads of 128)
    "model_type": "olmoe",
    "hidden_size": 2048,
    "intermediate_size": 1024,
    "max_position_embeddings": 4096,
    "num_attention_heads": 16,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 16,
    "num_key_value_heads": 16,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 50304,
}


@pytest.mark.parametrize("model_type", ["olmoe", "olmo2", "olmo3", "flex_olmo"])
def test_a_key_norm_over_all_kv_heads_refuses_more_gpus_than_kv_heads(model_type):
    """vLLM 0.33.0 normalizes OLMoE's, OLMo-2's, OLMo-3's and FlexOlmo's keys over the whole k projection
    (num_key_value_heads x head_dim): OlmoeAttention (olmoe.py) all-gathers each GPU's keys into it, and the
    Transformers backend that runs the others raises "Cannot gather norm of width ..." (TPAwareNormMixin), so
    the KV heads cannot replicate: kvsim priced one replicated KV head a GPU. Up to as many GPUs as KV heads
    they split, and the generic rule still replicates other models' heads."""
    m = _model({**_OLMOE_1B_7B, "model_type": model_type, "num_key_value_heads": 4}, "olmo")
    msg = _refused(
        m, 8, f"tensor_parallel_size 8 exceeds olmo's num_key_value_heads 4 (model_type {model_type}"
    )
    if model_type == "olmoe":
        assert "OlmoeAttention (olmoe.py) all-gathers each GPU's replicated KV head into 8 x 128 keys" in msg
        assert "k_norm of 4 x 128, whose shapes do not match" in msg
    else:
        assert f"vLLM runs {model_type} on its Transformers backend" in msg
        assert '"Cannot gather norm of width 512: a TP-sharded input of width 128 does not tile' in msg
    _refused(m, 16, "tensor_parallel_size 16 exceeds olmo's num_key_value_heads 4")
    _fits(m, 4)  # one KV head a GPU, split
    _fits(m, 2)
    _fits(_model(_OLMOE_1B_7B, "olmoe-1b-7b"), 16)  # its 16 KV heads split over 16 GPUs
    _fits(_model({**_OLMOE_1B_7B, "model_type": "llama", "num_key_value_heads": 4}, "llama"), 8)
    from kvsim.model.shard import shard

    assert shard(m, None, 4).num_kv_heads == 1
    with pytest.raises(UnsplittableModelError, match="a key norm over all its KV heads"):
        shard(m, None, 8)


@pytest.mark.parametrize(
    ("model_type", "key", "block"),
    [
        ("qwen2_moe", "num_experts", "Qwen2MoeSparseMoeBlock (qwen2_moe.py)"),
        ("qwen3_moe", "num_experts", "Qwen3MoeSparseMoeBlock (qwen3_moe.py)"),
        ("qwen3_vl_moe_text", "num_experts", "Qwen3MoeSparseMoeBlock (qwen3_moe.py)"),
        ("minimax_m2", "num_local_experts", "MiniMaxM2MoE (minimax_m2.py)"),
    ],
)
def test_qwen_moe_and_minimax_m2_refuse_more_tensor_parallel_gpus_than_experts(model_type, key, block):
    """vLLM 0.33.0's Qwen2-MoE, Qwen3-MoE and MiniMax-M2 MoE blocks raise "Tensor parallel size ... is
    greater than the number of experts ..." (qwen2_moe.py:136, qwen3_moe.py:154, minimax_m2.py:80) on the
    TP group's size alone: --enable-expert-parallel does not lift it, and data parallelism does not count
    (tp 4 x dp 4 over 4 experts loads, each expert's width split over 16 GPUs). Qwen3-VL-MoE's text model
    builds Qwen3-MoE's block (qwen3_vl_moe.py); other families' MoE blocks have no such check, and a Qwen
    config whose layers are all dense (mlp_only_layers) builds none."""
    cfg = _preset("qwen3-30b-a3b", model_type=model_type, num_experts_per_tok=2)
    cfg.pop("num_experts")
    m = _model({**cfg, key: 4}, "few")
    msg = _refused(
        m, 8, f"tensor_parallel_size 8 exceeds few's {key} 4 (model_type {model_type}): vLLM's {block}"
    )
    assert 'raises "Tensor parallel size 8 is greater than the number of experts 4."' in msg
    _refused(m, 8, "is greater than the number of experts 4", enable_expert_parallel=True)
    _fits(m, 4)
    _fits(m, 4, data_parallel_size=4)
    _fits(m, 2, data_parallel_size=2, enable_expert_parallel=True)
    _fits(_model({**cfg, "model_type": "mixtral", "num_local_experts": 4}, "mixtral"), 8)
    if key == "num_experts":
        dense = {**cfg, key: 4, "mlp_only_layers": list(range(cfg["num_hidden_layers"]))}
        _fits(_model(dense, "dense"), 8)
    from kvsim.model.shard import shard

    with pytest.raises(UnsplittableModelError, match="is greater than the number of experts 4"):
        shard(m, None, 8, expert_parallel=True)


def test_kimi_linear_pads_a_narrow_expert_share_instead():
    """Kimi-Linear's KimiMoE (vllm/models/kimi_k3/nvidia/model.py) pads a GPU's expert width below 256 (or
    the config's `min_moe_intermediate_per_partition`) up to it before FusedMoE sees it, so only a wider
    share must divide evenly."""
    cfg = _preset("kimi-linear-48b-a3b", moe_intermediate_size=2052, num_shared_experts=4)
    m = _model(cfg, "kimi")
    _refused(m, 8, "does not divide kimi's moe_intermediate_size 2052")  # 256 a GPU: not padded
    _fits(m, 16)  # 128 a GPU, padded to 256
    # The config's own least share (`min_moe_intermediate_per_partition`), when it gives one.
    narrow = _model({**cfg, "min_moe_intermediate_per_partition": 64}, "kimi")
    _refused(narrow, 16, "does not divide kimi's moe_intermediate_size 2052")


def test_gated_delta_net_heads_must_split_over_the_gpus():
    """A gated delta net's value heads: vLLM asserts `divide(num_v_heads, tp_size)` (A_log, the recurrent
    state's shape); its key heads: no check, each GPU gets `num_k_heads // tp_size` (0 for 4 heads at tp 8)
    and the forward's reshapes of the projections fail or mix tokens (qwen_gdn_linear_attn.py). Qwen3-Next's
    fused layout and Qwen3.5's split one alike."""
    for preset in ("qwen3-next-80b-a3b", "qwen3.6-35b-a3b"):
        m = _model(_preset(preset, linear_num_key_heads=4), "gdn")
        _fits(m, 4)
        msg = _refused(m, 8, "tensor_parallel_size 8 does not divide gdn's linear_num_key_heads 4")
        assert "give each GPU 4 // 8 = 0 key heads" in msg
    m = _model(_preset("qwen3-next-80b-a3b", linear_num_key_heads=8, linear_num_value_heads=24), "gdn")
    _fits(m, 8)
    _refused(
        m,
        16,
        "linear_num_value_heads 24 (its gated delta net's value heads): vLLM's gated delta net "
        'asserts it: "24 is not divisible by 16"',
    )


def test_kda_heads_must_split_over_the_gpus():
    """Kimi-Linear's KDA layers: vLLM's KimiGatedDeltaNetAttention (kimi_gdn_linear_attn.py) asserts
    `num_heads % tp_size == 0`."""
    cfg = _preset("kimi-linear-48b-a3b")
    cfg["linear_attn_config"] = {**cfg["linear_attn_config"], "num_heads": 24}
    m = _model(cfg, "kda")
    _fits(m, 8)
    _refused(m, 16, "does not divide kda's linear_attn_config.num_heads 24 (its KDA layers' heads)")


def test_deepseek_v4_output_groups_must_split_over_the_gpus():
    """DeepSeek-V4's grouped output projection: vLLM 0.33.0's DeepseekV4Attention
    (vllm/models/deepseek_v4/attention.py) gives each GPU `o_groups // tp_size` groups without a check and
    takes its share of wo_a as that many groups; the CUDA o-projection divides the GPU's heads by them
    (nvidia/flashmla.py). DeepSeek-V4-Flash's 8 groups: 1 a GPU at tp 8, 0 at tp 16 (its 64 heads would
    split)."""
    _fits("deepseek-v4-flash", 8)
    msg = _refused(
        "deepseek-v4-flash", 16, "tensor_parallel_size 16 does not divide deepseek-v4-flash's o_groups 8"
    )
    assert "give each GPU 8 // 16 = 0 output groups (DeepseekV4Attention)" in msg
    assert "\n" not in msg
    # Fewer GPUs than groups, not dividing them: 12 groups over 8 GPUs, 1.5 groups' rows of wo_a a GPU.
    m = _model(_preset("deepseek-v4-flash", num_attention_heads=96, o_groups=12), "v4g12")
    _fits(m, 4)
    msg = _refused(m, 8, "tensor_parallel_size 8 does not divide v4g12's o_groups 12")
    assert "12 // 8 = 1 output groups" in msg
    assert "not a whole number of groups" in msg


def test_gptq_groups_split_over_the_gpus_are_refused():
    """vLLM 0.33.0's AutoGPTQLinearMethod checks no shape itself: at tp 2 Qwen2.5-72B's 29,568-wide down
    projection gives each GPU 14,784 features (115.5 groups of 128); MarlinLinearKernel refuses it, but
    Machete (compute capability 9.0: 14,784 is a multiple of 64) takes it with 115 rows of scales cut from the
    checkpoint at rank x 115, so the second GPU computes with the wrong groups' scales without an error.
    Qwen's 29,696-wide GPTQ checkpoints split; a group that does not divide the whole layer is refused at
    load."""
    cfg = json.loads((HF / "qwen2.5-72b.json").read_text())
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
    m = _model({**cfg, "quantization_config": gptq}, "q72gptq")
    _fits(m, 1)
    for tp in (2, 4, 8):
        msg = _refused(
            m, tp, f"29568 // {tp} = {29568 // tp} input features a GPU, not a whole number of its gptq"
        )
        n = 29568 // tp
        assert (
            f'MarlinLinearKernel refuses it ("in_features per partition {n} is not divisible by group_size'
            in msg
        )
        assert (
            f"loads each GPU {n // 128} rows of scales cut from the checkpoint at its rank x {n // 128}"
            in msg
        )
    padded = _model({**cfg, "intermediate_size": 29696, "quantization_config": gptq}, "q72gptq")
    for tp in (2, 4, 8):
        _fits(padded, tp)
    with pytest.raises(InvalidArgumentError, match="group_size 128 does not divide the 29600 input features"):
        _model({**cfg, "intermediate_size": 29600, "quantization_config": gptq})
    per_channel = {**gptq, "group_size": -1}
    _fits(_model({**cfg, "quantization_config": per_channel}), 2)


def test_an_awq_group_as_wide_as_the_layer_is_split_as_any_other():
    """AWQ's group of 4096 is no Marlin group (check_marlin_supported takes 32, 64, 128), so every layer
    goes to AutoAWQLinearMethod, which refuses a GPU's 2,048 of o_proj's 4,096 features ("The input size is
    not aligned..."); kvsim exempted a group as wide as the layer. At tp 1 it loads."""
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    awq = {"quant_method": "awq", "bits": 4, "group_size": 4096, "zero_point": True}
    m = _model({**base, "intermediate_size": 16384, "quantization_config": awq}, "awq4096")
    _fits(m, 1)
    msg = _refused(m, 2, "attn output projections take 4096 // 2 = 2048 input features a GPU")
    assert "The input size is not aligned with the quantized weight shape" in msg
    _fits(_model({**base, "quantization_config": {**awq, "group_size": 128}}), 8)


def _one_line(capsys: Any) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_the_cli_says_each_refusal_in_one_line_with_exit_status_2(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_preset("qwen3-next-80b-a3b", linear_num_key_heads=4)))
    hf_config._HF_CACHE.clear()
    argv = ["run", "--model", str(path), "--gpu", "h100-80gb", "--requests", "10"]
    assert main([*argv, "-tp", "8"]) == 2
    assert "linear_num_key_heads 4" in _one_line(capsys)
    path.write_text(json.dumps(_preset("qwen3-30b-a3b", moe_intermediate_size=772)))
    hf_config._HF_CACHE.clear()
    assert main([*argv, "-tp", "8"]) == 2
    assert "moe_intermediate_size 772" in _one_line(capsys)
    assert main([*argv, "-tp", "4"]) == 0
    v4 = ["run", "--model", "deepseek-v4-flash", "--gpu", "b200", "--requests", "10"]
    assert main([*v4, "-tp", "16"]) == 2
    assert "does not divide deepseek-v4-flash's o_groups 8" in _one_line(capsys)
    assert main([*v4, "-tp", "8"]) == 0
    oss = ["run", "--model", "gpt-oss-120b", "--gpu", "h100-80gb", "--requests", "10"]
    assert main([*oss, "-tp", "16"]) == 2
    assert "exceeds gpt-oss-120b's num_key_value_heads 8" in _one_line(capsys)
    assert main([*oss, "-tp", "8", "-dp", "16", "-ep"]) == 2
    assert "does not divide gpt-oss-120b's intermediate_size 2880" in _one_line(capsys)
    assert main([*oss, "-tp", "8"]) == 0


def test_kimi_linear_padded_experts_are_counted_in_a_gpus_weights():
    """vLLM's KimiMoE (vllm/models/kimi_k3/nvidia/model.py) builds its FusedMoE at
    min_moe_intermediate_per_partition (256) x tp when 1,024 // tp falls below 256 without expert
    parallelism: at tp 8 each GPU's w13 (2 x 256 x 2,304) and w2 (2,304 x 256) of every expert, bf16,
    where the checkpoint gives it 128 wide. Computed here from the config's numbers."""
    from kvsim.model.gpus import resolve as gpu
    from kvsim.model.models import resolve
    from kvsim.model.shard import replicated, shard
    from kvsim.model.sizing import size_pool
    from kvsim.model.timing import roofline_time_model

    cfg = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
    experts, hidden, width = cfg["num_experts"], cfg["hidden_size"], cfg["moe_intermediate_size"]
    moe_layers = cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]  # moe_layer_freq 1
    assert (experts, hidden, width, moe_layers) == (256, 2304, 1024, 26)
    bf16 = 2
    per_gpu_experts = experts * moe_layers * 3 * hidden * 256 * bf16  # padded to 256 a GPU
    pad = per_gpu_experts - experts * moe_layers * 3 * hidden * (width // 8) * bf16
    assert (per_gpu_experts, pad) == (23_555_211_264, 11_777_605_632)
    m = resolve("kimi-linear-48b-a3b")
    whole = m.param_bytes  # tp 1: nothing padded
    assert shard(m, None, 1).param_bytes == whole == 98_245_363_456
    rep = replicated(m)[0]
    # Whole on every GPU (vLLM 0.33.0): the routers (GateLinear) and their e_score_correction_bias, MLA's
    # kv_a_proj_with_mqa (a ReplicatedLinear), KDA's f_a_proj slice of in_proj_qkvgfab (replicated_shard_id
    # 4) and g_a_proj (a ReplicatedLinear), the norms (two a layer, the final one, MLA's kv_a_layernorm,
    # KDA's o_norm). kvsim split g_a_proj over the GPUs (-10,321,920 B at tp 8) and left the bias out.
    norms = (2 * 27 + 1) * hidden + 7 * 512 + 20 * 128
    kda_a = 2 * 20 * 128 * hidden  # f_a_proj, g_a_proj
    assert rep == bf16 * (26 * 256 * hidden + 26 * 256 + 7 * 576 * hidden + kda_a + norms) == 73_122_304
    assert shard(m, None, 8).param_bytes == -(-(whole - rep) // 8) + rep + pad == 24_122_258_080
    pool = size_pool("kimi-linear-48b-a3b", "h200", 16, tensor_parallel_size=8)
    assert pool.weight_bytes == -(-(whole - rep) // 8) + rep + pad + pool.rope_cache_bytes
    # Expert parallelism: whole experts, not padded; tp 4 gives 256 a GPU, nothing to pad.
    assert shard(m, None, 8, expert_parallel=True).param_bytes == -(-(whole - rep) // 8) + rep
    ep = size_pool("kimi-linear-48b-a3b", "h200", 16, tensor_parallel_size=8, enable_expert_parallel=True)
    assert ep.weight_bytes == -(-(whole - rep) // 8) + rep + ep.rope_cache_bytes
    assert shard(m, None, 4).param_bytes == -(-(whole - rep) // 4) + rep
    # The roofline reads the padded experts (vLLM's fused-MoE kernels take the padded tensors' shapes).
    terms = {t.name: t for t in roofline_time_model(m, gpu("h200"), tensor_parallel_size=8).terms}
    assert terms["moe_mem"].how.startswith(f"{per_gpu_experts:,} B of experts on one GPU")
    unpadded = {
        t.name: t
        for t in roofline_time_model(m, gpu("h200"), tensor_parallel_size=8, expert_parallel=True).terms
    }
    assert unpadded["moe_mem"].how.startswith(f"{per_gpu_experts // 2:,} B of experts")
    assert terms["moe_flop_tok"].ps == pytest.approx(2 * unpadded["moe_flop_tok"].ps)
    # The config's own least share, when it gives one: 64 leaves 128 a GPU unpadded.
    narrow = _model({**cfg, "min_moe_intermediate_per_partition": 64}, "kimi")
    assert shard(narrow, None, 8).param_bytes == -(-(narrow.param_bytes - rep) // 8) + rep


def test_kvsim_run_says_when_vllm_pads_the_experts(capsys):
    """The padding is 11.0 GiB of a GPU's 22.4 GiB of weights at tp 8: `kvsim run` says why the weights are
    twice tp 4's share, and not where nothing is padded (tp 4, expert parallelism)."""
    from kvsim.model.units import fmt_bytes

    argv = ["run", "kimi-linear-48b-a3b", "--gpu", "h100-80gb", "--requests", "10"]
    assert main([*argv, "-tp", "8"]) == 0
    out = capsys.readouterr().out
    pad = [line for line in out.splitlines() if "pads kimi-linear-48b-a3b's routed experts" in line]
    assert len(pad) == 1
    assert "to 256 wide a GPU at tensor_parallel_size 8 (1,024 // 8 = 128" in pad[0]
    assert f"{fmt_bytes(11_777_605_632)} of zeros a GPU" in pad[0]  # the test above's padding
    for more in (["-tp", "4"], ["-tp", "8", "--enable-expert-parallel"]):
        assert main([*argv, *more]) == 0
        assert "routed experts to" not in capsys.readouterr().out
    # Under --quantization fp8 the experts, their padding with them, are one byte a weight: half the zeros
    # (26 MoE layers x 256 experts x 3 x 2,304 x 128 bytes, and the per-tensor scales in proportion); the
    # note said bf16's 11.0 GiB beside 11.3 GiB of weights.
    assert main([*argv, "-tp", "8", "--quantization", "fp8"]) == 0
    pad = [line for line in capsys.readouterr().out.splitlines() if "routed experts to 256" in line]
    assert len(pad) == 1
    assert f"{fmt_bytes(26 * 256 * 3 * 2304 * 128)} of zeros a GPU" in pad[0]


def _qwen3_4b_fp8(**change: Any) -> Any:
    """Qwen/Qwen3-4B-FP8's shape: d 2560, 32 heads and 8 KV heads of 128, MLP 9728, fp8 in 128x128 blocks."""
    qc = {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": [128, 128],
    }
    cfg = _preset(
        "qwen3-8b",
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        tie_word_embeddings=True,
        quantization_config=qc,
    )
    return _model({**cfg, **change}, "q3-4b-fp8")


def test_fp8_block_row_parallel_share_must_hold_whole_blocks():
    """vLLM's validate_fp8_block_shape (quantization/utils/fp8_utils.py, from Fp8LinearMethod.create_weights)
    raises when a row-parallel layer's input_size_per_partition is not a multiple of block_k: Qwen3-4B-FP8's
    9,728-wide down projection gives 1,216 a GPU at tp 8 (9.5 blocks of 128); 2,432 at tp 4 splits."""
    m = _qwen3_4b_fp8()
    _fits(m, 4)
    msg = _refused(m, 8, "q3-4b-fp8's mlp output projections take 9728 // 8 = 1216 input features a GPU")
    assert (
        'validate_fp8_block_shape: "Weight input_size_per_partition = 1216 is not divisible by weight '
        'quantization block_k = 128."' in msg
    )
    # The same through compressed-tensors' fp8 block scheme (CompressedTensorsW8A8Fp8 calls the same check).
    ct = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 8,
                    "type": "float",
                    "strategy": "block",
                    "block_structure": [128, 128],
                    "symmetric": True,
                    "dynamic": False,
                },
                "input_activations": {
                    "num_bits": 8,
                    "type": "float",
                    "strategy": "group",
                    "group_size": 128,
                    "symmetric": True,
                    "dynamic": True,
                },
            }
        },
        "ignore": ["lm_head"],
    }
    _refused(_qwen3_4b_fp8(quantization_config=ct), 8, "not divisible by weight quantization block_k = 128")
    # Per-tensor fp8 (vLLM's online --quantization fp8, or a checkpoint without blocks) has no blocks.
    _fits(_qwen3_4b_fp8(quantization_config=None), 8, quantization="fp8")
    # The presets in fp8 blocks split where their heads do: MiniMax-M2 (48 heads) at 16 and 48. DeepSeek-V4's
    # MLP rounds its width up to whole blocks a GPU (DeepseekV4MLP), so 2,048 // 32 = 64 is not refused (on
    # 32 output groups: DeepSeek-V4-Flash's 8 do not split over 32 GPUs).
    from kvsim.model.models import resolve
    from kvsim.model.shard import shard

    for name, tp in (("minimax-m2", 16), ("minimax-m2", 48)):
        shard(resolve(name), None, tp)
    shard(_model(_preset("deepseek-v4-flash", o_groups=32), "v4g32"), None, 32)


def test_fp8_block_mla_column_share_must_hold_whole_blocks():
    """A column-parallel layer of one output must give each GPU whole blocks of block_n
    (validate_fp8_block_shape: "Weight output_partition_size = ... block_n"): DeepSeek-V3's q_b_proj is
    128 heads x 192; with 40 heads, 5 a GPU at tp 8 give 960, 7.5 blocks of 128. Its dense MLP's 18,432-wide
    down projection gives 576 a GPU at tp 32: refused as a row-parallel share."""
    from kvsim.model.models import resolve
    from kvsim.model.shard import shard

    cfg = json.loads((HF / "deepseek-v3.json").read_text())
    m = _model({**cfg, "num_attention_heads": 40, "num_key_value_heads": 40}, "ds40")
    shard(m, None, 4)  # 10 heads x 192 = 1,920: 15 blocks
    with pytest.raises(UnsplittableModelError, match=re.escape("MLA q_b_proj (40 heads x 192)")) as exc:
        shard(m, None, 8)
    assert "Weight output_partition_size = 960 is not divisible by weight quantization block_n = 128." in str(
        exc.value
    )
    v3 = resolve(str(HF / "deepseek-v3.json"))
    shard(v3, None, 16)
    with pytest.raises(UnsplittableModelError, match="mlp output projections take 18432 // 32 = 576"):
        shard(v3, None, 32)


def test_expert_parallelism_lifts_the_experts_check_wherever_the_model_is_split():
    """With --enable-expert-parallel vLLM's FusedMoEConfig sees tp_size 1 (FusedMoEParallelConfig.make: each
    GPU holds whole experts), so no width is asserted: the pool from a GPU's memory (available_kv_bytes)
    and a swap space's blocks (kv_bytes_per_token) split the model without the experts' check too; they
    refused 772 at tp 8 under expert parallelism."""
    from kvsim.model.sizing import expert_parallel_weight_bytes

    m = _model(_preset("qwen3-30b-a3b", moe_intermediate_size=772), "q3moe")
    cfg = kvsim.SimConfig(model=m, gpu="h100-80gb", tensor_parallel_size=8, enable_expert_parallel=True)
    rope = cfg.pool.rope_cache_bytes or 0
    assert cfg.pool.weight_bytes == expert_parallel_weight_bytes(m, None, 8, 1) + rope
    kvsim.SimConfig(
        model=m,
        gpu="h100-80gb",
        tensor_parallel_size=8,
        enable_expert_parallel=True,
        swap_space_bytes="4GiB",
        preemption="swap",
    )
    # 48 layers, K and V, the 4 KV heads replicated to one a GPU at tp 8, 128 wide, bf16.
    assert kv_bytes_per_token(m, None, 8, expert_parallel=True) == 48 * 2 * 1 * 128 * 2
    with pytest.raises(UnsplittableModelError, match="moe_intermediate_size 772"):
        kvsim.SimConfig(model=m, gpu="h100-80gb", tensor_parallel_size=8)


@pytest.mark.parametrize("bad", ["256", None, 256.0, True, [256]])
def test_kimi_min_moe_intermediate_per_partition_must_be_a_whole_number(bad):
    """vLLM's KimiMoE compares `getattr(config, "min_moe_intermediate_per_partition", 256)` with
    `moe_intermediate_size // tp` as given (tp > 1, no expert parallelism): a null or a string is its
    TypeError, a float pads to a float width; kvsim read any of them as no padding (11 GiB a GPU short at
    tp 8). Unread at tp 1 and under expert parallelism, as in vLLM."""
    from kvsim.model.shard import replicated, shard

    cfg = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
    m = _model({**cfg, "min_moe_intermediate_per_partition": bad}, "kimi")
    with pytest.raises(
        InvalidArgumentError, match=re.escape(f"field 'min_moe_intermediate_per_partition' {bad!r}")
    ):
        shard(m, None, 8)
    shard(m, None, 1)
    rep = replicated(m)[0]
    assert shard(m, None, 8, expert_parallel=True).param_bytes == -(-(m.param_bytes - rep) // 8) + rep


def test_kimi_min_moe_intermediate_per_partition_below_the_share_pads_nothing(tmp_path, capsys):
    """A least share at or below 128 (0, or negative: vLLM's comparison is then never true) leaves
    1,024 // 8 = 128 a GPU unpadded; the CLI says a malformed one in one line with exit status 2."""
    from kvsim.model.shard import replicated, shard

    cfg = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
    for least in (-5, 0, 128):
        m = _model({**cfg, "min_moe_intermediate_per_partition": least}, "kimi")
        rep = replicated(m)[0]
        assert shard(m, None, 8).param_bytes == -(-(m.param_bytes - rep) // 8) + rep
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "min_moe_intermediate_per_partition": "256"}))
    hf_config._HF_CACHE.clear()
    argv = ["run", "--model", str(path), "--gpu", "h100-80gb", "--requests", "10"]
    assert main([*argv, "-tp", "8"]) == 2
    assert "field 'min_moe_intermediate_per_partition' '256' must be a whole number" in _one_line(capsys)
    assert main([*argv, "-tp", "8", "--enable-expert-parallel"]) == 0


def test_fp8_block_mla_column_rule_reaches_kimi_k2():
    """Kimi-K2's config (model_type kimi_k2) is served by vLLM's DeepseekV3ForCausalLM, whose MLA q_b_proj is
    the same one-output ColumnParallelLinear: 40 heads x 192 give 960 a GPU at tp 8, 7.5 blocks of 128."""
    from kvsim.model.shard import shard

    cfg = json.loads((HF / "deepseek-v3.json").read_text())
    m = _model({**cfg, "model_type": "kimi_k2", "num_attention_heads": 40, "num_key_value_heads": 40}, "k2")
    shard(m, None, 4)
    with pytest.raises(UnsplittableModelError, match=re.escape("MLA q_b_proj (40 heads x 192)")):
        shard(m, None, 8)


def test_deepseek_v32_indexer_and_mla_a_projections_are_whole_on_every_gpu():
    """vLLM 0.33.0 builds DeepSeek-V3.2's indexer whole on every rank (`deepseek_v32/attention.py`: `wq_b` a
    ReplicatedLinear, `wk_weights_proj` with disable_tp), and MLA's `fused_qkv_a_proj` (q_a_proj and
    kv_a_proj_with_mqa, disable_tp) and the router (GateLinear) too: at tp 8 a GPU holds all of them plus
    1/8 of the rest. kvsim split them by 8 (0.76 GiB of indexer a GPU too little)."""
    from kvsim.model.models import resolve
    from kvsim.model.shard import shard

    cfg = json.loads((HF / "deepseek-v3.2.json").read_text())
    m = resolve("deepseek-v3.2")
    h, layers, q_lora = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["q_lora_rank"]
    heads, dim = cfg["index_n_heads"], cfg["index_head_dim"]
    a_rows = q_lora + cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
    fp8_block = lambda rows, cols: rows * cols + -(-rows // 128) * -(-cols // 128) * 4  # noqa: E731
    indexer = layers * (fp8_block(heads * dim, q_lora) + ((dim + heads) * h + 2 * dim) * 2)  # wk bf16
    assert indexer == 935_679_488  # DESIGN.md's 0.87 GiB
    a_proj = layers * fp8_block(a_rows, h)
    moe_layers = layers - cfg["first_k_dense_replace"]
    router = moe_layers * (cfg["n_routed_experts"] * h + cfg["n_routed_experts"]) * 2  # and its bias
    norms = (layers * (2 * h + q_lora + cfg["kv_lora_rank"]) + h) * 2
    whole = indexer + a_proj + router + norms
    assert shard(m, None, 8).param_bytes == -(-(m.param_bytes - whole) // 8) + whole
    # 0.76 GiB of it the indexer's, which kvsim gave a GPU an eighth of.
    assert (indexer - indexer // 8) / 2**30 == pytest.approx(0.763, abs=0.001)
    assert shard(m, None, 8).param_bytes - -(-m.param_bytes // 8) > indexer - indexer // 8


def test_nemotron_3_super_latent_projections_are_whole_on_every_gpu():
    """Nemotron-H's `fc1_latent_proj` and `fc2_latent_proj` are ReplicatedLinears (vLLM 0.33.0's
    `nemotron_h.py`, NemotronHMoE), as is its router (GateLinear): Nemotron-3-Super's 0.625 GiB of latent
    projections lie whole on each of 8 GPUs, about 0.55 GiB a GPU more than an eighth."""
    from kvsim.model.models import resolve
    from kvsim.model.shard import shard

    cfg = json.loads((HF / "nemotron-3-super-120b-a12b.json").read_text())
    m = resolve(str(HF / "nemotron-3-super-120b-a12b.json"))
    h, latent = cfg["hidden_size"], cfg["moe_latent_size"]
    n_moe = cfg["hybrid_override_pattern"].count("E")
    latent_bytes = 2 * latent * h * n_moe * 2  # bf16
    assert latent_bytes / 2**30 == pytest.approx(0.625)
    router = (
        (cfg["n_routed_experts"] * h + cfg["n_routed_experts"]) * n_moe * 2
    )  # and e_score_correction_bias
    norms = (len(cfg["hybrid_override_pattern"]) + 1) * h * 2
    whole = latent_bytes + router + norms
    # Its 8 attention layers' 2 KV heads, replicated over 8 GPUs (`QKVParallelLinear`): a GPU holds one
    # head's K and V rows, half of them, not an eighth.
    kv = cfg["num_key_value_heads"]
    kv_bytes = 2 * kv * cfg["head_dim"] * h * cfg["hybrid_override_pattern"].count("*") * 2
    assert (
        shard(m, None, 8).param_bytes == -(-(m.param_bytes - whole - kv_bytes) // 8) + whole + kv_bytes // kv
    )
    assert (latent_bytes - latent_bytes // 8) / 2**30 == pytest.approx(0.547, abs=0.001)


@pytest.mark.parametrize("name", ["deepseek-v3.2", "glm-5", "qwen3-30b-a3b", "llama-3.1-8b", "gemma-4-e4b"])
def test_tensor_parallel_1_is_the_whole_model_and_whole_weights_are_a_part_of_it(name):
    """At tp 1 nothing is split: a GPU holds the model's weights and parameters as counted, whatever vLLM
    would replicate; what it replicates is a part of them, and at tp > 1 counted once a GPU."""
    from kvsim.model.models import resolve
    from kvsim.model.shard import replicated, shard

    m = resolve(name)
    one = shard(m, None, 1)
    assert (one.param_bytes, one.num_params, one.num_active_params) == (
        m.param_bytes,
        m.num_params,
        m.num_active_params,
    )
    nbytes, params = replicated(m)
    assert 0 < nbytes < m.param_bytes
    assert 0 < params < m.num_active_params
    two = shard(m, None, 2)
    assert two.num_params == -(-(m.num_params - params) // 2) + params


def test_whole_weights_are_priced_layer_by_layer_as_the_ignore_list_names_them():
    """The weights every GPU holds whole are priced as the rest of the model, layer by layer: an fp8
    DeepSeek-V3.2 whose `ignored_layers` names layer 0's attention holds that layer's MLA A projections and
    indexer `wq_b` (whole on every GPU) in bf16, the other layers' in fp8 blocks of 128 x 128; its split
    attention matrices of layer 0 (q_b, kv_b, o) bf16 too, split over tp."""
    from kvsim.model.shard import replicated, shard

    cfg = json.loads((HF / "deepseek-v3.2.json").read_text())
    h, q_lora, kv_lora = cfg["hidden_size"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
    rope, nope, v = cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    heads = cfg["num_attention_heads"]
    qc = {**cfg["quantization_config"], "ignored_layers": ["model.layers.0.self_attn"]}
    base, ignored = _model(cfg, "base"), _model({**cfg, "quantization_config": qc}, "ignored")

    def extra(rows: int, cols: int) -> int:  # bf16 less fp8 in 128 x 128 blocks (a float32 scale each)
        return 2 * rows * cols - (rows * cols + -(-rows // 128) * -(-cols // 128) * 4)

    whole = extra(q_lora, h) + extra(kv_lora + rope, h)  # q_a_proj, kv_a_proj_with_mqa
    whole += extra(cfg["index_n_heads"] * cfg["index_head_dim"], q_lora)  # the indexer's wq_b
    split = extra(heads * (nope + rope), q_lora) + extra(heads * (nope + v), kv_lora) + extra(h, heads * v)
    assert replicated(ignored)[0] - replicated(base)[0] == whole
    assert replicated(ignored)[1] == replicated(base)[1]
    assert ignored.param_bytes - base.param_bytes == whole + split
    rep = replicated(ignored)[0]
    assert shard(ignored, None, 8).param_bytes == -(-(ignored.param_bytes - rep) // 8) + rep


def test_layers_of_their_own_kv_heads_split_over_the_gpus():
    """Gemma 4 31B's layers name their own KV heads (16 sliding, 4 global): at tp 4 each GPU holds a quarter
    of every layer's, so a quarter of the KV bytes a token (the pool line's figure, the linear model's); they
    were kept whole (880 KiB a token shown at tp 8 where a GPU holds 120)."""
    from kvsim.model.models import resolve
    from kvsim.model.shard import shard

    m = resolve("gemma-4-31b")
    assert {lay.num_kv_heads for lay in m.layer_list()} == {16, 4}
    assert shard(m, None, 4).kv_bytes_per_token * 4 == m.kv_bytes_per_token
    assert {lay.num_kv_heads for lay in shard(m, None, 4).layer_list()} == {4, 1}
