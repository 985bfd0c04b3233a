"""Data parallelism's share of the routed experts (`kvsim.model.shard`; DESIGN.md §Defaults and sizing,
"Tensor parallelism"): without expert parallelism vLLM 0.33.0's fused MoE splits each expert over the
tp x dp GPUs, so a GPU's weights, the width checks, Kimi-Linear's and gpt-oss's paddings and the roofline
take that share; `kvsim run` says how the experts are spread and that a dp run is one rank's engine."""

from __future__ import annotations

import json

import pytest

import kvsim
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError, UnsplittableModelError
from tests.test_shard import HF, _fits, _model, _preset


def _qwen3_experts_bytes() -> int:
    """Qwen3-30B-A3B's routed experts, bf16, from its config: 48 MoE layers of 128 experts, each a gate-up
    (2 x 768 x 2,048) and a down (2,048 x 768) projection."""
    cfg = json.loads((HF / "qwen3-30b-a3b.json").read_text())
    layers, experts = cfg["num_hidden_layers"], cfg["num_experts"]
    hidden, width = cfg["hidden_size"], cfg["moe_intermediate_size"]
    assert (layers, experts, hidden, width, cfg.get("mlp_only_layers", [])) == (48, 128, 2048, 768, [])
    return layers * experts * 3 * hidden * width * 2


def test_data_parallel_ranks_split_each_expert_without_expert_parallelism():
    """vLLM 0.33.0's FusedMoEParallelConfig.make (fused_moe/config.py) flattens tp x dp into the fused MoE's
    tp_size without --enable-expert-parallel (flatten_tp_across_dp_and_pcp): each GPU holds a 1/(tp x dp)
    slice of every routed expert, while attention, the dense layers and the shared experts stay split by
    tp. So at tp 1 dp 4 a GPU of Qwen3-30B-A3B holds the rest of the weights whole and a quarter of the
    experts: the same bytes as expert parallelism over those 4 GPUs (whole experts, a quarter of them)."""
    from kvsim.model.models import resolve
    from kvsim.model.shard import replicated, shard
    from kvsim.model.sizing import size_pool

    experts = _qwen3_experts_bytes()
    assert experts == 57_982_058_496
    m = resolve("qwen3-30b-a3b")
    whole = m.param_bytes
    rest = whole - experts
    assert shard(m, None, 1, data_parallel_size=4).param_bytes == rest + experts // 4 == 17_577_701_376
    rep = replicated(m)[0]  # (the routers and norms: whole on every GPU of a TP group)
    assert shard(m, None, 2, data_parallel_size=2).param_bytes == -(-(rest - rep) // 2) + rep + experts // 4
    assert shard(m, None, 2, data_parallel_size=4).param_bytes == -(-(rest - rep) // 2) + rep + experts // 8
    assert shard(m, None, 1, data_parallel_size=4, expert_parallel=True).param_bytes == rest + experts // 4
    # The tokens a GPU multiplies, per token of its own rank, stay the tp share: its slice of the experts
    # sees every rank's tokens.
    assert shard(m, None, 1, data_parallel_size=4).num_active_params == m.num_active_params
    # The pool: one GPU's weights (and its rotary caches), more blocks than one GPU of all the experts.
    dp = size_pool("qwen3-30b-a3b", "h100-80gb", 16, data_parallel_size=4)
    alone = size_pool("qwen3-30b-a3b", "h100-80gb", 16)
    assert dp.weight_bytes == rest + experts // 4 + dp.rope_cache_bytes
    assert alone.weight_bytes == whole + alone.rope_cache_bytes
    assert dp.kv_cache_bytes - alone.kv_cache_bytes == experts - experts // 4
    assert dp.num_blocks > 3 * alone.num_blocks
    # SimConfig takes it (it once refused data_parallel_size without expert parallelism), kvsim run too.
    cfg = kvsim.SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb", data_parallel_size=4)
    assert cfg.pool.weight_bytes == dp.weight_bytes
    assert cfg.num_blocks > 3 * kvsim.SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb").num_blocks
    # A dense model's DP ranks are engines of their own: still refused, pointing to replicas.
    with pytest.raises(
        InvalidArgumentError, match=r"^data_parallel_size 2: model llama-3-8b is dense.*replicas 2"
    ):
        kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb", data_parallel_size=2)


def test_the_experts_width_must_split_over_tp_times_dp():
    """FusedMoEConfig.__post_init__ asserts intermediate_size % tp_size == 0 on the flattened tp x dp: a
    1,000-wide expert splits over 8 GPUs (tp 4 dp 2), not over 16 (tp 4 dp 4), though tp 4 alone and
    expert parallelism take it."""
    m = _model(_preset("qwen3-30b-a3b", moe_intermediate_size=1000), "q")
    _fits(m, 4, data_parallel_size=2)
    _fits(m, 4)
    _fits(m, 4, data_parallel_size=4, enable_expert_parallel=True)
    with pytest.raises(UnsplittableModelError) as exc:
        _fits(m, 4, data_parallel_size=4)
    msg = str(exc.value)
    assert msg.startswith(
        "tensor_parallel_size 4 x data_parallel_size 4 does not divide q's moe_intermediate_size 1000"
    )
    assert "asserts intermediate_size % tp_size == 0 (1000 % (4 x 4) = 8)" in msg
    from kvsim.model.shard import shard

    with pytest.raises(
        InvalidArgumentError, match="data_parallel_size 0 must be a whole number of at least 1"
    ):
        shard(m, None, 1, data_parallel_size=0)


def test_kimi_linear_pads_by_the_attentions_tp_then_splits_over_tp_times_dp():
    """KimiMoE (vllm/models/kimi_k3/nvidia/model.py) decides its padding with the attention's tp
    (get_tensor_model_parallel_world_size()): at tp 8 it builds its FusedMoE 256 x 8 = 2,048 wide, which the
    fused MoE splits over tp x dp GPUs: 128 a GPU at dp 2 (where the checkpoint's share is 64). At tp 4
    (1,024 // 4 = 256: not padded) dp 4 the 1,024-wide experts take 64 a GPU, unpadded. At tp 8 dp 3 the
    padded 2,048 does not split over 24 GPUs: vLLM's assert, refused."""
    from kvsim.model.models import resolve
    from kvsim.model.shard import padded_expert_width, replicated, shard
    from kvsim.model.timing import roofline_time_model

    cfg = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
    experts, hidden, width = cfg["num_experts"], cfg["hidden_size"], cfg["moe_intermediate_size"]
    moe_layers = cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]
    all_experts = experts * moe_layers * 3 * hidden * width * 2  # bf16
    m = resolve("kimi-linear-48b-a3b")
    rest = m.param_bytes - all_experts
    per_gpu = experts * moe_layers * 3 * hidden * (256 * 8 // 16) * 2  # 2,048 wide over 16 GPUs
    assert padded_expert_width(m, 8, 2) == 128
    rep = replicated(m)[0]
    assert shard(m, None, 8, data_parallel_size=2).param_bytes == -(-(rest - rep) // 8) + rep + per_gpu
    assert (
        shard(m, None, 8, data_parallel_size=2).param_bytes == 12_344_652_448
    )  # (12,334,317,216 with g_a_proj split, no router bias)
    assert padded_expert_width(m, 4, 4) == 0
    assert (
        shard(m, None, 4, data_parallel_size=4).param_bytes == -(-(rest - rep) // 4) + rep + all_experts // 16
    )
    _fits(m, 8, data_parallel_size=2)
    with pytest.raises(UnsplittableModelError) as exc:
        _fits(m, 8, data_parallel_size=3)
    assert (
        "pads kimi-linear-48b-a3b's routed experts to min_moe_intermediate_per_partition 256 x 8 = 2048"
        in str(exc.value)
    )
    assert "(2048 % 24 = 8)" in str(exc.value)
    # The roofline reads the padded share: 128 a GPU, every DP rank's tokens on it.
    from kvsim.model.gpus import resolve as gpu

    terms = {
        t.name: t
        for t in roofline_time_model(m, gpu("h200"), tensor_parallel_size=8, data_parallel_size=2).terms
    }
    assert terms["moe_mem"].how.startswith(f"{per_gpu:,} B of experts on one GPU")


def test_the_roofline_reads_the_tp_times_dp_share_of_the_experts():
    """Without expert parallelism at tp 1 dp 4, a GPU streams a quarter of each expert, every rank's tokens
    reach it (vLLM's naive dispatch and combine over the 4 GPUs: MoERunner's do_naive_dispatch_combine),
    and it multiplies a quarter of each touched expert for 4 ranks' tokens: the same per own token as one
    GPU alone. Expert parallelism over the same 4 GPUs prices the same; the linear model's step reads the
    same weights as the pool."""
    from kvsim.model.gpus import resolve as gpu
    from kvsim.model.linear_time import linear_time_model
    from kvsim.model.models import resolve
    from kvsim.model.shard import shard
    from kvsim.model.timing import Efficiencies, roofline_time_model

    m, h100 = resolve("qwen3-30b-a3b"), gpu("h100-80gb")
    experts = _qwen3_experts_bytes()
    ps = 10**12
    # (read at HBM's full rate, a flat fused-MoE curve: the share, not the kernel's efficiency, is tested here)
    flat = Efficiencies(moe_memory=((1.0, 1.0),))
    dp = roofline_time_model(m, h100, data_parallel_size=4, max_num_batched_tokens=2048, efficiencies=flat)
    alone = roofline_time_model(m, h100, max_num_batched_tokens=2048)
    ep = roofline_time_model(
        m, h100, data_parallel_size=4, expert_parallel=True, max_num_batched_tokens=2048, efficiencies=flat
    )
    bw = h100.hbm_bandwidth
    assert dp.moe_mem_ps[-1] == round(experts / 4 / bw * ps)
    k, e = 8, 128
    # (the table and the FLOPs per token gathered from the 4 ranks: a lone rank's 2 tokens read as 8)
    assert dp.moe_mem_ps[8] == round(experts / 4 * (1 - (1 - k / e) ** 8) / bw * ps)
    assert dp.moe_senders == 4
    assert 4 * dp.moe_flop_tok_ps == pytest.approx(alone.moe_flop_tok_ps, abs=2)
    names = {t.name for t in dp.terms}
    assert "ep_gather_scatter_tok" in names
    assert "ep_gather_scatter" not in {t.name for t in alone.terms}
    # Expert parallelism at dp 1 over tp 4: no all-to-all (vLLM's use_all2all_kernels needs dp > 1), the
    # TP all-reduce only, as tensor parallelism alone; its experts a GPU a quarter, as tp 4's.
    ep1 = roofline_time_model(
        m, h100, tensor_parallel_size=4, expert_parallel=True, max_num_batched_tokens=2048
    )
    tp4 = roofline_time_model(m, h100, tensor_parallel_size=4, max_num_batched_tokens=2048)
    assert not {"ep_gather_scatter", "ep_gather_scatter_tok"} & {t.name for t in ep1.terms}
    assert {t.name for t in ep1.terms} == {t.name for t in tp4.terms}
    assert dp.engine_kwargs() == ep.engine_kwargs()
    lt = linear_time_model(m, h100, data_parallel_size=4)
    assert lt.c0_ps == round(shard(m, None, 1, data_parallel_size=4).param_bytes * ps / bw)
    assert lt.c0_ps < linear_time_model(m, h100).c0_ps


def test_gpt_oss_mxfp4_padding_pads_the_tp_times_dp_share():
    """gpt-oss's MXFP4 experts are padded per rank (mxfp4_round_up_hidden_size_and_intermediate_size): at tp
    1 dp 4 the rank's share is 2,880 / 4 = 720, padded to 768 on an H100 (Triton, intermediate to 64) where
    the whole 2,880 is not padded at tp 1 alone; on an A100 (Marlin: hidden to 3,072, intermediate to 128)
    3,072 x 768 instead of 2,880 x 720. 17/32 bytes an element (4-bit values, a byte's scale per 32)."""
    from kvsim.model.models import resolve
    from kvsim.model.mxfp4_padding import mxfp4_padding_bytes
    from kvsim.model.shard import shard
    from kvsim.model.sizing import size_pool

    cfg = json.loads((HF / "gpt-oss-120b.json").read_text())
    layers, experts, hidden, width = (
        cfg["num_hidden_layers"],
        cfg["num_local_experts"],
        cfg["hidden_size"],
        cfg["intermediate_size"],
    )
    assert (layers, experts, hidden, width) == (36, 128, 2880, 2880)
    h100 = layers * experts * 3 * hidden * (768 - 720) * 17 // 32
    a100 = layers * experts * 3 * (3072 * 768 - hidden * 720) * 17 // 32
    assert (h100, a100) == (1_015_234_560, 2_098_151_424)
    m = resolve("gpt-oss-120b")
    assert mxfp4_padding_bytes(m, "sm_90", 1) == 0
    assert mxfp4_padding_bytes(m, "sm_90", 1, dp=4) == h100
    assert mxfp4_padding_bytes(m, "sm_80", 1, dp=4) == a100
    pool = size_pool("gpt-oss-120b", "h100-80gb", 16, data_parallel_size=4)
    # Beside them, the Triton kernels' float32 biases (128 experts x (2 x 768 + 2,880) a layer, for kvsim's
    # bf16 2 x 2,880 + 2,880) and Hopper's padded scales (w13 1,536 rows x 90 groups to 92; w2 2,880 rows to
    # 3,072 x 24 groups): tests/test_weights_after_load.py
    triton = layers * experts * ((2 * 768 + 2880) * 4 - (2 * 2880 + 2880) * 2 + 1536 * 2 + 192 * 24)
    assert triton == 37_158_912
    assert (
        pool.weight_bytes
        == shard(m, None, 1, data_parallel_size=4).param_bytes + h100 + triton + pool.rope_cache_bytes
    )


def test_kvsim_run_takes_data_parallelism_on_a_moe_model_and_notes_kimis_padding(capsys):
    argv = ["run", "kimi-linear-48b-a3b", "--gpu", "h100-80gb", "--requests", "10", "-tp", "8", "-dp", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    pad = [line for line in out.splitlines() if "pads kimi-linear-48b-a3b's routed experts" in line]
    assert len(pad) == 1
    assert (
        "to 128 wide a GPU at tensor_parallel_size 8, data_parallel_size 2 (1,024 // (8 x 2) = 64" in pad[0]
    )
    assert main(["run", "qwen3-30b-a3b", "--gpu", "h100-80gb", "--requests", "10", "-dp", "4"]) == 0


def test_the_pool_line_says_how_the_routed_experts_are_spread():
    """`kvsim run`'s pool line names the data-parallel ranks and where the routed experts lie (their width
    split over tp x dp GPUs, or whole under expert parallelism), beside tp; a dense model's line is as
    before."""
    line = kvsim.SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb", data_parallel_size=4).pool.line()
    assert line.endswith("per token, tp 1 × dp 4 (routed experts split over 4 GPUs))")
    ep = kvsim.SimConfig(
        model="qwen3-30b-a3b",
        gpu="h100-80gb",
        tensor_parallel_size=2,
        data_parallel_size=2,
        enable_expert_parallel=True,
    ).pool
    assert ep.line().endswith("tp 2 × dp 2 (routed experts whole on 4 GPUs: expert parallelism))")
    assert (ep.data_parallel_size, ep.expert_parallel) == (2, True)
    dense = kvsim.SimConfig(model="llama-3-70b", gpu="h100-80gb", tensor_parallel_size=4).pool.line()
    assert dense.endswith("llama-3-70b 80.0 KiB per token, tp 4)")


def test_kvsim_run_says_a_dp_run_is_one_ranks_engine(capsys):
    """With data_parallel_size 4 one engine runs, given the whole workload, where vLLM spreads it over four;
    `kvsim run` says so and how to run all four (--replicas 4), and when they run, that each replica is one
    rank (tests/test_fleet_dp.py)."""
    argv = ["run", "qwen3-30b-a3b", "--gpu", "h100-80gb", "-dp", "4", "--requests", "50"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "note: data_parallel_size 4: vLLM runs 4 engines" in out
    assert "--replicas 4 runs all 4 behind a router" in out
    assert main([*argv, "--replicas", "4"]) == 0
    out = capsys.readouterr().out
    assert "vLLM runs 4 engines" not in out
    assert "note: data_parallel_size 4 with 4 replicas: each replica is one DP rank's engine" in out
    assert "1 DP group of 4 ranks" in out


def test_deepseek_v3_takes_data_and_expert_parallelism(capsys):
    """DeepSeek-V3 (and R1) was a preset without its experts, which kvsim refused data and expert parallelism
    for as a dense model's. Its 58 MoE layers' 256 routed experts (tests/data/hf/deepseek-v3.json), each a
    gate, an up and a down projection of 7,168 x 2,048 in fp8 with an fp32 scale a 128 x 128 block, are the
    weights dp spreads over tp x dp GPUs; the rest stays split by tp (what is whole, whole)."""
    from kvsim.model.gpus import get as gpu
    from kvsim.model.models import resolve
    from kvsim.model.shard import replicated, shard
    from kvsim.model.timing import roofline_time_model

    cfg = json.loads((HF / "deepseek-v3.json").read_text())
    layers = cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]
    hidden, width = cfg["hidden_size"], cfg["moe_intermediate_size"]
    block = cfg["quantization_config"]["weight_block_size"]
    assert (layers, cfg["n_routed_experts"], hidden, width, block) == (58, 256, 7168, 2048, [128, 128])
    one = 3 * (hidden * width + 4 * (hidden // 128) * (width // 128))  # (fp8 bytes and the fp32 scales)
    experts = layers * cfg["n_routed_experts"] * one
    m = resolve("deepseek-r1")
    whole = replicated(m)[0]
    rest = m.param_bytes - experts - whole
    assert shard(m, None, 8).param_bytes == -(-(rest + experts) // 8) + whole
    dp2 = shard(m, None, 8, data_parallel_size=2).param_bytes
    assert dp2 == -(-rest // 8) + -(-experts // 16) + whole
    # Expert parallelism at tp 8, dp 2: vLLM 0.33.0's sequence-parallel MoE, under which each MoE layer's one
    # shared expert (a routed expert's shape: `DeepseekV2MLP` with `disable_tp`, deepseek_v2.py L261-277,
    # L364-372) lies whole on every GPU: 58 x one more than its eighth.
    shared = layers * one
    ep = shard(m, None, 8, data_parallel_size=2, expert_parallel=True).param_bytes
    assert ep == -(-(rest - shared) // 8) + -(-experts // 16) + whole + shared
    assert ep - dp2 == shared * 7 // 8 == 2_235_585_408  # 2.08 GiB
    assert shard(m, None, 8, expert_parallel=True).param_bytes == -(-rest // 8) + -(-experts // 8) + whole
    base = dict(model="deepseek-v3", gpu="h200", tensor_parallel_size=8)
    alone = kvsim.SimConfig(**base)
    two = kvsim.SimConfig(**base, data_parallel_size=2)
    assert two.pool.weight_bytes - alone.pool.weight_bytes == dp2 - shard(m, None, 8).param_bytes
    assert two.num_blocks > alone.num_blocks
    assert kvsim.SimConfig(**base, enable_expert_parallel=True).enable_expert_parallel
    # The roofline's MoE terms: the experts a batch touches, and every rank's tokens gathered to them.
    terms = {t.name for t in roofline_time_model(m, gpu("h200"), tensor_parallel_size=8).terms}
    assert {"moe_mem", "moe_flop_tok"} <= terms
    assert "ep_gather_scatter_tok" not in terms
    rl = roofline_time_model(m, gpu("h200"), tensor_parallel_size=8, data_parallel_size=2)
    assert "ep_gather_scatter_tok" in {t.name for t in rl.terms}
    for flags, says in (
        (["-dp", "2"], "tp 8 × dp 2 (routed experts split over 16 GPUs)"),
        (["-ep"], "tp 8 (routed experts whole on 8 GPUs: expert parallelism)"),
        (["-dp", "2", "-ep"], "tp 8 × dp 2 (routed experts whole on 16 GPUs: expert parallelism)"),
    ):
        argv = ["run", "--model", "deepseek-r1", "--gpu", "h200", "-tp", "8", *flags, "--requests", "5"]
        assert main(argv) == 0
        assert says in capsys.readouterr().out
