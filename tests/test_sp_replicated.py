"""What vLLM 0.33.0's sequence-parallel MoE (expert parallelism, tp > 1, dp > 1) holds whole on every GPU
(`collectives.SEQUENCE_PARALLEL_REPLICATED`; DESIGN.md §Time model, "Under expert parallelism", "What the
sequence-parallel MoE holds whole"): the weights a GPU holds and the roofline's reading and multiplying of
them, against hand sums of the checkpoints' shapes (tests/data/hf)."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.model.collectives import sequence_parallel_replicated
from kvsim.model.shard import shard
from kvsim.model.timing import roofline_time_model

PS = 1e12
H200_HBM = 4.8e12  # B/s (kvsim's H200 datasheet figure)
H200_BF16 = 989.4e12  # FLOP/s, dense


def _bytes(model: str, tp: int, dp: int, ep: bool, rocm: bool = False) -> int:
    m = kvsim.models.get(model)
    return shard(m, None, tp, data_parallel_size=dp, expert_parallel=ep, rocm=rocm).param_bytes


def _terms(model: str, tp: int, dp: int, ep: bool) -> dict[str, float]:
    rt = roofline_time_model(
        kvsim.models.get(model),
        kvsim.gpus.get("h200"),
        tensor_parallel_size=tp,
        data_parallel_size=dp,
        expert_parallel=ep,
    )
    return {t.name: t.ps for t in rt.terms}


def test_which_groups_and_when():
    """Only under the sequence-parallel MoE, and by the model's file."""
    v32 = kvsim.models.get("deepseek-v3.2")
    assert sequence_parallel_replicated(v32, 8, 2, True) == ("shared_experts", "mlp")
    assert sequence_parallel_replicated(v32, 8, 2, True, rocm=True) == ("shared_experts",)
    assert sequence_parallel_replicated(v32, 8, 1, True) == ()  # dp 1: not sequence-parallel
    assert sequence_parallel_replicated(v32, 8, 2, False) == ()  # no expert parallelism
    assert sequence_parallel_replicated(v32, 1, 8, True) == ()  # tp 1
    assert sequence_parallel_replicated(kvsim.models.get("kimi-k3"), 8, 4, True, rocm=True) == ()
    assert sequence_parallel_replicated(kvsim.models.get("qwen3-30b-a3b"), 2, 2, True) == ()
    assert sequence_parallel_replicated(kvsim.models.get("minimax-m2"), 2, 2, True) == ()  # does not opt in
    assert sequence_parallel_replicated(kvsim.models.get("llama-4-scout"), 4, 2, True) == ("shared_experts",)


def test_llama_4_scout_shared_expert_whole():
    """Llama 4 Scout at tp 4, dp 2: its 48 MoE layers' shared expert (gate, up, down of 5,120 x 8,192 in bf16,
    `llama4.py` L107-116) is 48 x 3 x 5,120 x 8,192 x 2 = 12,079,595,520 B; under expert parallelism a GPU
    holds it whole, 3/4 more than its quarter without (the routed experts an eighth either way)."""
    shared = 48 * 3 * 5120 * 8192 * 2
    assert shared == 12_079_595_520
    assert _bytes("llama-4-scout", 4, 2, True) - _bytes("llama-4-scout", 4, 2, False) == shared * 3 // 4


def test_deepseek_v32_dense_mlp_whole_on_cuda_only():
    """DeepSeek-V3.2 at tp 8, dp 2, EP: on CUDA its 3 dense layers' MLP (gate, up, down of 7,168 x 18,432 in
    fp8 with an fp32 scale a 128 x 128 block: 3 x 3 x (7,168 x 18,432 + 4 x 56 x 144) = 1,189,375,488 B) lies
    whole too (`models/deepseek_v32/nvidia/model.py` L106-115), on ROCm split (`amd/model.py` L96-103)."""
    mlp = 3 * 3 * (7168 * 18432 + 4 * 56 * 144)
    assert mlp == 1_189_375_488
    cuda, rocm = _bytes("deepseek-v3.2", 8, 2, True), _bytes("deepseek-v3.2", 8, 2, True, rocm=True)
    assert cuda - rocm == pytest.approx(mlp * 7 / 8, abs=1)
    # and the shared experts on both: 58 x 3 x (7,168 x 2,048 + 4 x 56 x 16), 7/8 of them more than without EP
    shared = 58 * 3 * (7168 * 2048 + 4 * 56 * 16)
    assert rocm - _bytes("deepseek-v3.2", 8, 2, False) == pytest.approx(shared * 7 / 8, abs=1)


def test_kimi_k3_shared_experts_and_dense_mlp_whole():
    """Kimi-K3 at tp 8, dp 4, EP: its 92 MoE layers' two shared experts (3 x 7,168 x 6,144 in bf16) and layer
    0's dense MLP (3 x 7,168 x 33,792) are 24,310,185,984 + 1,453,326,336 B, whole on every GPU on CUDA
    (`KimiMLP` L233-258); a GPU holds 7/8 of them more than where its file does not opt in (ROCm)."""
    shared = 92 * 3 * 7168 * 6144 * 2
    dense = 3 * 7168 * 33792 * 2
    assert (shared, dense) == (24_310_185_984, 1_453_326_336)
    more = _bytes("kimi-k3", 8, 4, True) - _bytes("kimi-k3", 8, 4, True, rocm=True)
    assert more == pytest.approx((shared + dense) * 7 / 8, abs=1)  # 22,543,073,280 B, 20.99 GiB


def test_deepseek_v3_reads_its_shared_experts_whole_and_routes_a_tp_th():
    """DeepSeek-V3 on H200 at tp 8, dp 2: with EP (sequence-parallel) each step reads 7/8 of the shared
    experts' 2,554,954,752 B more than without (where they are split): 2,235,585,408 B at 4.8 TB/s, 465.75 µs;
    the shared experts' FLOPs a token stay an eighth of their parameters (whole weights on an eighth of the
    tokens), and the routers' (58 x 256 x 7,168 = 106,430,464 parameters, whole) drop to an eighth: 2 x
    106,430,464 x 7/8 FLOPs less a token at 989.4 TFLOP/s."""
    sp, split = _terms("deepseek-v3", 8, 2, True), _terms("deepseek-v3", 8, 2, False)
    shared = 58 * 3 * (7168 * 2048 + 4 * 56 * 16)
    assert sp["dense_mem"] - split["dense_mem"] == pytest.approx(shared * 7 / 8 / H200_HBM * PS, abs=1)
    router = 58 * 256 * 7168
    assert split["dense_flop_tok"] - sp["dense_flop_tok"] == pytest.approx(
        2 * router * 7 / 8 / H200_BF16 * PS, abs=0.01
    )


def test_kimi_k3_latent_projections_multiply_a_tp_th():
    """Kimi-K3 at tp 8, dp 2 on H200: the latent projections (7,168 x 3,584 down and up, 92 MoE layers, whole
    anyway: 4,726,980,608 parameters), the routers (896 x 7,168 a layer: 590,872,576) and the replicated
    shared experts and dense MLP (12,155,092,992 + 726,663,168 parameters, a tp-th a token either way) run on
    a tp-th of the rank's tokens under the sequence-parallel MoE: the whole ones' FLOPs a token drop 7/8."""
    sp, split = _terms("kimi-k3", 8, 2, True), _terms("kimi-k3", 8, 2, False)
    latent, router = 92 * 2 * 7168 * 3584, 92 * 896 * 7168
    assert (latent, router) == (4_726_980_608, 590_872_576)
    assert split["dense_flop_tok"] - sp["dense_flop_tok"] == pytest.approx(
        2 * (latent + router) * 7 / 8 / H200_BF16 * PS, abs=0.01
    )
    shared, dense = 92 * 3 * 7168 * 6144 * 2, 3 * 7168 * 33792 * 2
    assert sp["dense_mem"] - split["dense_mem"] == pytest.approx(
        (shared + dense) * 7 / 8 / H200_HBM * PS, abs=1
    )


def test_pool_line_counts_them():
    """The pool `SimConfig` sizes shrinks by the weights held whole (Llama 4 Scout at tp 4, dp 2 on H200)."""
    base = dict(
        model="llama-4-scout", gpu="h200", tensor_parallel_size=4, data_parallel_size=2, max_model_len=1048576
    )
    ep = kvsim.SimConfig(**base, enable_expert_parallel=True)
    no = kvsim.SimConfig(**base)
    assert ep.pool.weight_bytes - no.pool.weight_bytes == 12_079_595_520 * 3 // 4


def test_linear_model_multiplies_the_moe_blocks_whole_matrices_on_a_tp_th():
    """The linear model's parameters a token multiplies (`Model.num_active_params` of a GPU's share): under
    the sequence-parallel MoE DeepSeek-V3's routers (58 x 256 x 7,168 = 106,430,464, whole on every GPU) run
    on an eighth of the rank's tokens, 7/8 of them fewer a token at tp 8, dp 2; the shared experts stay an
    eighth a token (whole weights, an eighth of the tokens)."""
    m = kvsim.models.get("deepseek-v3")
    sp = shard(m, None, 8, data_parallel_size=2, expert_parallel=True).num_active_params
    split = shard(m, None, 8, data_parallel_size=2).num_active_params
    assert split - sp == 106_430_464 * 7 // 8 == 93_126_656


def test_kimi_k2_is_served_by_deepseeks_file():
    """Moonshot's Kimi-K2 says `model_type` kimi_k2 and `architectures` DeepseekV3ForCausalLM: vLLM 0.33.0 serves
    it with deepseek_v2.py, so its sequence-parallel MoE is DeepSeek's decoder-layer pattern with its shared
    experts whole, as DeepSeek-V3's (a review found the type missing: priced as not opting in)."""
    import dataclasses
    import json

    from kvsim.model.collectives import sequence_parallel_moe, sequence_parallel_pattern

    v3 = kvsim.models.get("deepseek-v3")
    k2 = dataclasses.replace(v3, config_json=json.dumps({**v3.config_fields, "model_type": "kimi_k2"}))
    assert k2.model_type == "kimi_k2"
    assert sequence_parallel_pattern(k2) == sequence_parallel_pattern(v3) == "deepseek"
    assert sequence_parallel_moe(k2, 8, 2, True)
    assert sequence_parallel_replicated(k2, 8, 2, True) == ("shared_experts",)
