"""The roofline time model (DESIGN.md §Time model): each coefficient from the GPU's and the model's figures,
the max of memory and compute per operator group, the experts table, tensor and expert parallelism, windowed
attention, exactness in both engines on real models, the configuration's rules and its errors."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model.timing import (
    CHUNKED,
    FULL,
    FUSED_MOE_MEMORY,
    SLIDING,
    AttentionClass,
    Efficiencies,
    RooflineTimeModel,
    mla_layer_values,
    roofline_time_model,
    weight_groups,
)
from kvsim.reference.engine.timing import keys_and_pairs, roofline_step
from kvsim.workloads import synthetic

PS = 1e12


def brute(kind: int, w: int, c: int, n: int) -> tuple[int, int]:
    """Keys read and pairs formed, query by query (position p = c - n .. c - 1)."""
    keys: set[int] = set()
    pairs = 0
    for p in range(c - n, c):
        if kind == FULL:
            seen = range(p + 1)
        elif kind == SLIDING:
            seen = range(max(0, p - w + 1), p + 1)
        else:
            seen = range(p // w * w, p + 1)
        keys.update(seen)
        pairs += len(seen)
    return len(keys), pairs


@given(st.sampled_from([FULL, SLIDING, CHUNKED]), st.integers(1, 40), st.integers(1, 200), st.data())
def test_keys_and_pairs_are_the_queries_own(kind, window, c, data):
    n = data.draw(st.integers(1, c))
    w = 0 if kind == FULL else window
    assert keys_and_pairs(kind, w, c, n) == brute(kind, window, c, n)


LLAMA, PRO = kvsim.models.get("llama-3.1-8b"), kvsim.gpus.get("rtx-pro-6000")


def test_each_term_is_bytes_or_flops_over_the_datasheet_rate():
    m, g = LLAMA, PRO
    rt = roofline_time_model(m, g, max_num_batched_tokens=2048)
    h, layers, d = m.hidden_size, m.num_layers, m.head_dim
    q, kv = m.num_attention_heads * d, m.num_kv_heads * d
    dense_params = layers * (h * (q + 2 * kv) + q * h + 3 * h * m.intermediate_size)
    # Llama-3.1-8B in bf16: 2 bytes a weight, 1,597 GB/s, 500 TFLOPS bf16 dense (the datasheet's).
    assert rt.dense_mem_ps == round(2 * dense_params / 1597e9 * PS)
    assert rt.dense_flop_tok_ps == round(2 * dense_params / 500e12 * PS)
    assert rt.head_mem_ps == round(2 * m.vocab_size * h / 1597e9 * PS)
    assert rt.head_flop_seq_ps == round(2 * m.vocab_size * h / 500e12 * PS)
    (a,) = rt.attention
    assert (a.kind, a.window, a.layers) == (FULL, 0, layers)
    assert a.kv_ps == round(layers * 2 * kv * 2 / 1597e9 * PS)  # K and V of 8 heads of 128, bf16
    assert a.flop_ps == round(layers * 4 * q / 500e12 * PS)
    assert rt.moe_mem_ps == ()
    assert rt.fixed_ps == 0


def test_a_step_is_the_larger_of_streaming_and_computing():
    rt = roofline_time_model(LLAMA, PRO, max_num_batched_tokens=8192)
    ridge = rt.dense_mem_ps / (rt.dense_flop_tok_ps - rt.dense_mem_tok_ps)  # tokens where compute catches up
    assert 200 < ridge < 400  # 500 TFLOPS over 1.6 TB/s: ~313 FLOPs per byte, a bf16 weight 2 bytes
    base = [rt.base_ps(t, 1) - rt.tok_ps * t - rt.seq_ps - rt.head_mem_ps for t in (1, 8, 1024, 4096)]
    assert base[0] == rt.dense_mem_ps + rt.dense_mem_tok_ps  # memory-bound: the weights
    assert base[1] == rt.dense_mem_ps + 8 * rt.dense_mem_tok_ps
    assert base[2] == 1024 * rt.dense_flop_tok_ps  # compute-bound past the ridge
    assert base[3] == 4 * base[2]
    # Decode attention is memory-bound (GQA: 4 query heads per KV head): a key costs its bytes.
    (a,) = rt.attention
    assert a.decode_ps == a.kv_ps > a.flop_ps
    one = roofline_step(rt, [(1000, 1)])
    assert roofline_step(rt, [(2000, 1)]) - one == 1000 * a.kv_ps
    # A 2,048-token prefill: its pairs, not its keys, price its attention.
    chunk = roofline_step(rt, [(2048, 2048)]) - rt.base_ps(2048, 1)
    assert chunk == a.flop_ps * (2048 * 2048 - 2048 * 2047 // 2) > a.kv_ps * 2048


HF = Path(__file__).parent / "data" / "hf"
DSV3, H200 = kvsim.models.get("deepseek-v3"), kvsim.gpus.get("h200")


def _terms(rt: RooflineTimeModel) -> dict[str, float]:
    return {t.name: t.ps for t in rt.terms}


def test_an_mla_layer_moves_its_latent_and_heads_widths_not_hidden_over_heads():
    """DeepSeek-V3's config states no head_dim (kvsim's is hidden / heads = 56, a width vLLM's MLA never
    moves): its activations and elementwise values are MLA's (DESIGN.md §Time model, "MLA's widths"), from
    the published config.json's fields. At tp 8, 16 heads a GPU: the fused A projection, q_b_proj (a query
    of 128 + 64 a head), the absorbed W_UK (the query 512 + 64 wide a head) and W_UV, o_proj; the two latent
    norms, the RoPE parts' rotary, the latent's KV write."""
    cfg = json.loads((HF / "deepseek-v3.json").read_text())
    h, r, rope = cfg["hidden_size"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    p, v, c = cfg["qk_nope_head_dim"], cfg["v_head_dim"], cfg["q_lora_rank"]
    n = cfg["num_attention_heads"] // 8
    act, elem = mla_layer_values(DSV3, 8)
    assert act == (h + c + r + rope) + (c + n * (p + rope)) + (n * p + n * r) + (n * r + n * v) + (n * v + h)
    assert elem == 2 * c + 2 * r + 2 * (n * rope + rope) + (r + rope)
    assert (act, elem) == (43_584, 6_848)  # (hidden / heads gave 17,920 and 5,376)
    rt = roofline_time_model(DSV3, H200, tensor_parallel_size=8)
    dense, layers, ffn = cfg["first_k_dense_replace"], cfg["num_hidden_layers"], cfg["intermediate_size"] // 8
    values = layers * act + dense * (2 * h + 3 * ffn)  # the dense layers' MLP: gate_up and down in and out
    assert _terms(rt)["dense_mem_tok"] == pytest.approx(values * 2 / 4.8e12 * PS, rel=1e-12)
    assert rt.dense_mem_tok_ps == round(values * 2 / 4.8e12 * PS)


def test_an_mla_models_per_token_terms_follow_its_latent_not_head_dim():
    """The per-token terms of an MLA model move with its latent (1 + 2 x 16 values a layer through the
    matrices for each latent value at tp 8, 3 elementwise) and not with head_dim; a GQA model's move with
    head_dim (so the first check could fail)."""
    base = roofline_time_model(DSV3, H200, tensor_parallel_size=8)
    other = roofline_time_model(dataclasses.replace(DSV3, head_dim=128), H200, tensor_parallel_size=8)
    assert (other.dense_mem_tok_ps, other.tok_ps) == (base.dense_mem_tok_ps, base.tok_ps)
    llama = kvsim.models.get("llama-3.1-8b")
    gqa = [roofline_time_model(dataclasses.replace(llama, head_dim=d), H200) for d in (128, 256)]
    assert gqa[1].dense_mem_tok_ps > gqa[0].dense_mem_tok_ps
    assert gqa[1].tok_ps > gqa[0].tok_ps
    wider = roofline_time_model(dataclasses.replace(DSV3, kv_lora_rank=1024), H200, tensor_parallel_size=8)
    t0, t1, more = _terms(base), _terms(wider), 1024 - 512
    assert t1["dense_mem_tok"] - t0["dense_mem_tok"] == pytest.approx(61 * more * 33 * 2 / 4.8e12 * PS)
    assert t1["elementwise_tok"] - t0["elementwise_tok"] == pytest.approx(61 * more * 3 * 2 / 4.8e12 * PS)


def test_kimi_mla_layers_have_their_own_widths_and_its_kda_layers_keep_head_dim():
    """Kimi-Linear: 7 MLA layers without a query latent (`q_proj` and `kv_a_proj_with_mqa` each read the
    hidden state) and without rotary (vLLM's KimiMLAAttention builds none: NoPE), 20 KDA layers priced as
    before (heads x head_dim, hidden / heads = 72). Kimi-K3's output gate, fused into the A projection, adds
    heads x v_head out and the gate's multiply (read g and o, write o) elementwise."""
    m = kvsim.models.get("kimi-linear-48b-a3b")
    n, h, r, rope, p, v = 32, 2304, 512, 64, 128, 128
    act, elem = mla_layer_values(m, 1)
    assert act == (h + n * (p + rope)) + (h + r + rope) + (n * p + n * r) + (n * r + n * v) + (n * v + h)
    assert elem == 2 * r + (r + rope)
    gqa = (h + 3 * 32 * 72) + (32 * 72 + h)
    values = 7 * act + 20 * gqa + 1 * (2 * h + 3 * 9216)  # (one dense layer, first_k_dense_replace 1)
    rt = roofline_time_model(m, H200)
    assert _terms(rt)["dense_mem_tok"] == pytest.approx(values * 2 / 4.8e12 * PS, rel=1e-12)
    k3 = kvsim.models.get("kimi-k3")
    gated = mla_layer_values(k3, 8)
    plain = dataclasses.replace(
        k3, config_json=json.dumps({**k3.config_fields, "mla_use_output_gate": False})
    )
    ungated = mla_layer_values(plain, 8)
    assert (gated[0] - ungated[0], gated[1] - ungated[1]) == (96 // 8 * 128, 3 * 96 // 8 * 128)


def test_dense_mla_prefill_pairs_take_forward_mha_and_decodes_the_absorbed_path():
    """DeepSeek-V3 at tp 8 (16 heads a GPU, r 512, rope 64, p 128, v 128) on an H200: a decode attends the
    latent entries (vLLM's absorbed `forward_mqa`: 2·16·(512 + 64) + 2·16·512 = 16 · 2,176 FLOPs a pair and
    layer, 1,152 bytes a key), alone or beside a prefill; a prefilling sequence's queries the up-projected
    keys and values (`forward_mha`: 2·16·(128 + 64) + 2·16·128 = 16 · 640 FLOPs a pair, 16·(192 + 128)
    bf16 values read a key), and each step its chunks gather and up-project the latents they had cached
    (`_compute_prefill_context`): per cached key and layer the gather (1,152 bytes read, 1,152 written) and
    the keys' concatenation (4,224 bytes in, 6,144 out), then the fp8 kv_b_proj GEMM (1,024 bytes in, 8,192
    out, 2·512·16·256 FLOPs at the fp8 rate) whose 512·16·256 fp8 weights (2 MiB, and their block scales)
    are read once a step, at 4.8 TB/s and 1,978.9 TFLOPS fp8 (989.4 bf16, the attention's)."""
    rt = roofline_time_model(DSV3, H200, tensor_parallel_size=8)
    (a,) = rt.attention
    layers, n, bf16, fp8, hbm = 61, 16, 989.4e12, 1978.9e12, 4.8e12
    assert a.kv_ps == round(layers * 1152 / hbm * PS)
    assert a.flop_ps == round(layers * n * 2176 / bf16 * PS)
    assert a.prefill_ps == a.prefill_flop_ps == round(layers * n * 640 / bf16 * PS)
    assert a.prefill_key_ps == a.prefill_kv_ps == round(layers * n * 320 * 2 / hbm * PS)
    assert a.context_ps == round(layers * (1152 + 1152 + 4224 + 6144) / hbm * PS)
    assert a.context_gemm_ps == round(layers * (1024 + 8192) / hbm * PS)
    assert a.context_flop_ps == round(layers * 2 * 512 * n * 256 / fp8 * PS)
    scales = 4 / (128 * 128)  # (fp32 block scales a 128 × 128 block of fp8 weights)
    assert a.context_weight_ps == pytest.approx(layers * 512 * n * 256 * (1 + scales) / hbm * PS, rel=1e-3)
    # A decode pays the absorbed path's pairs where they outweigh its latent's bytes (a key, a pair).
    assert a.decode_ps == max(a.kv_ps, a.flop_ps)
    slow = roofline_time_model(
        DSV3, H200, tensor_parallel_size=8, efficiencies=Efficiencies(attention_compute=0.1)
    )
    (s,) = slow.attention
    assert s.flop_ps > s.kv_ps
    assert roofline_step(slow, [(1000, 1)]) - slow.base_ps(1, 1) == 1000 * s.flop_ps
    assert s.flop_ps == pytest.approx(layers * n * 2176 / (0.1 * bf16) * PS, abs=1)
    # A first chunk of 2,048 tokens: its pairs at forward_mha's price (compute-bound), nothing cached.
    pairs = 2048 * 2048 - 2048 * 2047 // 2
    assert a.prefill_ps * pairs > a.prefill_key_ps * 2048
    assert roofline_step(rt, [(2048, 2048)]) - rt.base_ps(2048, 1) == a.prefill_ps * pairs
    # A second chunk, 2,048 cached: its pairs, the cached latents gathered and up-projected once (the GEMM
    # just memory-bound at 2,048 keys: its weights outweigh its FLOPs' lead over its activations).
    pairs = 2048 * 4096 - 2048 * 2047 // 2
    gemm = a.context_weight_ps + a.context_gemm_ps * 2048
    assert gemm > a.context_flop_ps * 2048
    second = roofline_step(rt, [(4096, 2048)]) - rt.base_ps(2048, 1)
    assert second == a.prefill_ps * pairs + a.context_ps * 2048 + gemm
    # Beside a decode at 1,000 tokens: it keeps the absorbed path's price (forward_mqa, as alone); its keys
    # are not the chunk's context.
    assert a.mixed_ps == a.kv_ps
    both = roofline_step(rt, [(1000, 1), (4096, 2048)]) - rt.base_ps(2049, 2)
    assert both == 1000 * a.decode_ps + second
    # Sparse MLA (DeepSeek-V3.2: every token through forward_mqa) and GQA keep one price, no context.
    for m in (kvsim.models.get("deepseek-v3.2"), LLAMA):
        for c in roofline_time_model(m, H200, tensor_parallel_size=8).attention:
            assert (c.prefill_ps, c.prefill_key_ps, c.context_ps) == (c.flop_ps, c.kv_ps, 0)
            assert (c.context_gemm_ps, c.context_flop_ps, c.context_weight_ps) == (0, 0, 0)


def test_dense_mla_prefill_costs_by_hand():
    """DeepSeek-V3 at tp 8 on an H200, each prefill term against the formula: a short chunk reads its keys
    and values up-projected (memory-bound below about 200 queries), a prefix hit's few cached keys pay the
    up-projection's weights whole (the GEMM memory-bound), many cached keys its FLOPs (the weights' read
    hidden), and the weights are read once a step however many sequences bring cached keys."""
    rt = roofline_time_model(DSV3, H200, tensor_parallel_size=8)
    (a,) = rt.attention

    def attention(rows: list[tuple[int, int]]) -> int:
        return roofline_step(rt, rows) - rt.base_ps(sum(n for _, n in rows), len(rows))

    # 32 new tokens after 128 cached: 160 keys read up-projected, 4,624 pairs; 128 keys up-projected.
    pairs = 32 * 160 - 32 * 31 // 2
    assert a.prefill_key_ps * 160 > a.prefill_ps * pairs
    context = a.context_ps * 128 + a.context_weight_ps + a.context_gemm_ps * 128
    assert attention([(160, 32)]) == a.prefill_key_ps * 160 + context
    # The weights (26.7 µs over 61 layers) against the per-key terms: 128 cached keys cost their weights
    # more than twice over.
    assert a.context_weight_ps == pytest.approx(26.66e6, rel=1e-3)
    assert context == pytest.approx(a.context_weight_ps + 128 * (a.context_ps + a.context_gemm_ps))
    # 122,880 cached keys: the GEMM compute-bound, the weights' read hidden under its FLOPs.
    big = attention([(131072, 8192)])
    pairs = 8192 * 131072 - 8192 * 8191 // 2
    assert big == a.prefill_ps * pairs + (a.context_ps + a.context_flop_ps) * 122880
    # Two chunks with 1,000 cached keys each: one read of the weights for the step's 2,000.
    one, two = attention([(1100, 100)]), attention([(1100, 100), (1100, 100)])
    pairs = 100 * 1100 - 100 * 99 // 2
    keys = max(a.prefill_key_ps * 1100, a.prefill_ps * pairs)
    assert one == keys + a.context_ps * 1000 + a.context_weight_ps + a.context_gemm_ps * 1000
    assert two == 2 * keys + a.context_ps * 2000 + a.context_weight_ps + a.context_gemm_ps * 2000
    assert two - 2 * one == -a.context_weight_ps
    # Nothing cached (first chunks, with or without decodes beside them): no weights read.
    first = attention([(500, 500), (300, 300)])
    assert first == max(a.prefill_key_ps * 800, a.prefill_ps * (500 * 501 // 2 + 300 * 301 // 2))
    # A calibrated mixed-batch penalty leaves a dense MLA layer's decodes alone (forward_mqa apart), and
    # still slows a GQA model's.
    eff = Efficiencies(attention_mixed=0.5)
    (m,) = roofline_time_model(DSV3, H200, tensor_parallel_size=8, efficiencies=eff).attention
    assert m.mixed_ps == m.kv_ps == a.kv_ps
    (g,) = roofline_time_model(LLAMA, H200, efficiencies=eff).attention
    assert g.mixed_ps == pytest.approx(2 * g.kv_ps, abs=1)


def test_kimi_mla_layers_take_the_prefill_path_too():
    """Kimi-Linear's 7 MLA layers (32 heads at tp 1; bf16 weights: kv_b_proj at the bf16 rate, 2 bytes a
    parameter) take the same prefill path; its KDA layers have no attention class."""
    m = kvsim.models.get("kimi-linear-48b-a3b")
    (a,) = roofline_time_model(m, H200).attention
    n, bf16, hbm = 32, 989.4e12, 4.8e12
    assert a.layers == 7
    assert a.flop_ps == round(7 * n * 2176 / bf16 * PS)
    assert a.prefill_ps == round(7 * n * 640 / bf16 * PS)
    assert a.prefill_key_ps == round(7 * n * 320 * 2 / hbm * PS)
    moved = 2 * 576 * 2 + (n * 128 + 64) * 2 + n * 192 * 2
    assert a.context_ps == round(7 * moved / hbm * PS)
    assert a.context_gemm_ps == round(7 * (512 + n * 256) * 2 / hbm * PS)
    assert a.context_flop_ps == round(7 * 2 * 512 * n * 256 / bf16 * PS)
    assert a.context_weight_ps == round(7 * 512 * n * 256 * 2 / hbm * PS)
    assert a.mixed_ps == a.kv_ps


def test_tensor_parallelism_halves_the_weights_and_adds_all_reduces():
    m, g = kvsim.models.get("qwen3-32b"), kvsim.gpus.get("h100-80gb")
    one, two = (roofline_time_model(m, g, tensor_parallel_size=tp) for tp in (1, 2))
    assert two.dense_mem_ps == pytest.approx(one.dense_mem_ps / 2, abs=1)
    assert two.head_mem_ps == pytest.approx(one.head_mem_ps / 2, abs=1)
    # Two all-reduces of the hidden state per layer: 2 (tp - 1) / tp of it crosses NVLink (450 GB/s a way).
    per_token = 2 * m.num_layers * 1 * m.hidden_size * 2 / 450e9 * PS
    terms = {t.name: t.ps for t in two.terms}
    assert terms["tp_allreduce_tok"] == pytest.approx(per_token, rel=1e-9)
    assert two.tok_ps == round(terms["tp_allreduce_tok"] + terms["elementwise_tok"])
    assert two.fixed_ps == 2 * m.num_layers * 2 * Efficiencies().collective_hop_ps
    # Without NVLink the same bytes cross PCIe (64 GB/s a way on the RTX PRO 6000): slower.
    pcie = roofline_time_model(m, PRO, tensor_parallel_size=2)
    assert pcie.tok_ps > two.tok_ps


def test_experts_touched_grow_with_the_batch_and_saturate():
    """The experts touched under uniform routing, read at HBM's full rate (a flat fused-MoE curve of 1: the
    curve itself is `test_the_experts_read_at_the_fused_moe_kernels_measured_fraction`)."""
    m = kvsim.models.get("qwen3-30b-a3b")
    flat = Efficiencies(moe_memory=((1.0, 1.0),))
    rt = roofline_time_model(m, PRO, max_num_batched_tokens=2048, efficiencies=flat)
    table = rt.moe_mem_ps
    experts = weight_groups(m)["experts"].bytes
    full = round(experts / 1597e9 * PS)
    assert table[0] == 0
    assert table[-1] == full
    assert len(table) < 2048
    assert all(a <= b for a, b in itertools.pairwise(table))
    e, k = m.num_experts, m.experts_per_token
    for t in (1, 8, 64):  # E (1 - (1 - k/E)^T) of E experts touched, uniform routing
        assert table[t] == round(experts * (1 - (1 - k / e) ** t) / 1597e9 * PS)
    assert table[1] == pytest.approx(full * k / e, rel=1e-6)
    # Expert parallelism over 2 GPUs (DP 2): each holds half the experts, and both ranks' tokens reach them:
    # the table and the FLOPs per token gathered, a lone rank's 4 tokens read as 8 (`moe_senders` 2).
    ep = roofline_time_model(
        m, PRO, data_parallel_size=2, expert_parallel=True, max_num_batched_tokens=2048, efficiencies=flat
    )
    assert ep.moe_mem_ps[-1] == round(experts / 2 / 1597e9 * PS)
    assert ep.moe_mem_ps[8] == round(experts / 2 * (1 - (1 - k / e) ** 8) / 1597e9 * PS)
    assert ep.moe_senders == 2
    assert rt.moe_senders == 1
    assert ep.experts_ps(8) == max(ep.moe_mem_ps[8], 8 * ep.moe_flop_tok_ps)
    one = dataclasses.replace(ep, moe_senders=1)
    assert ep.base_ps(4, 1) - one.base_ps(4, 1) == ep.experts_ps(8) - ep.experts_ps(4)
    # half the experts a GPU, each token gathered from both ranks: per own token, as one GPU alone
    assert 2 * ep.moe_flop_tok_ps == pytest.approx(rt.moe_flop_tok_ps, abs=2)
    assert ep.fixed_ps > 0
    assert ep.tok_ps > rt.tok_ps
    # The pool: one GPU holds the rest of the weights and half the experts.
    cfg = kvsim.SimConfig(
        model=m, gpu=PRO, data_parallel_size=2, enable_expert_parallel=True, max_model_len=32768
    )
    alone = kvsim.SimConfig(model=m, gpu=PRO, max_model_len=32768)
    assert cfg.pool.weight_bytes == pytest.approx(alone.pool.weight_bytes - experts / 2, rel=1e-6)
    assert cfg.num_blocks > alone.num_blocks


def test_the_experts_read_at_the_fused_moe_kernels_measured_fraction():
    """The routed experts stream at the lower of HBM × gemm_memory and HBM × the fused-MoE kernel's measured
    fraction at the step's tokens per touched expert, t = N · k / E[touched] (`FUSED_MOE_MEMORY`, from
    vllm#19049's benchmark_moe.py on this very shape). Qwen3-30B-A3B (48 layers × 128 experts of 3 × 2,048
    × 768 bf16 = 57,982,058,496 B) on an RTX PRO 6000 (1,597 GB/s), by hand:

    * N = 1, below the knee: 8 experts of 128 touched, t = 1, the curve's first point 0.4446: 57.98 GB /
      16 / (1,597 GB/s × 0.4446) = 5.104 ms (2.269 ms at the full rate).
    * N = 128, above it: 1 − (15/16)^128 of them touched, t = 8.002, past the last point (t 6.0123):
      0.8220 held, 44.158 ms (36.297 ms at the full rate).
    * N = 12, between points 1.2398 (0.7771) and 1.5530 (0.8184): t = 12/16 / (1 − (15/16)^12) = 1.3913,
      linear in log t."""
    m = kvsim.models.get("qwen3-30b-a3b")
    experts = 48 * 128 * 3 * 2048 * 768 * 2
    assert weight_groups(m)["experts"].bytes == experts
    hbm = 1597e9
    rt = roofline_time_model(m, PRO, max_num_batched_tokens=2048)
    assert rt.moe_mem_ps[1] == round(experts / 16 / (hbm * 0.4446) * PS) == 5_103_866_105
    touched = 1 - (15 / 16) ** 128
    assert 128 * 8 / 128 / touched == pytest.approx(8.0021, abs=1e-4)
    assert rt.moe_mem_ps[128] == round(experts * touched / (hbm * 0.8220) * PS) == 44_157_517_720
    assert rt.experts_ps(128) == rt.moe_mem_ps[128]  # (memory-bound: 128 tokens' FLOPs are far less)
    assert rt.moe_mem_ps[-1] == round(experts / (hbm * 0.8220) * PS)
    touched = 1 - (15 / 16) ** 12
    t = 12 / 16 / touched
    frac = 0.7771 + math.log(t / 1.2398) / math.log(1.5530 / 1.2398) * (0.8184 - 0.7771)
    assert frac == pytest.approx(0.7982, abs=1e-4)
    assert rt.moe_mem_ps[12] == round(experts * touched / (hbm * frac) * PS)
    assert all(a <= b for a, b in itertools.pairwise(rt.moe_mem_ps))
    # Under a calibration the lower rate wins: at gemm_memory 0.5 the curve below 0.5 (N = 1), else 0.5.
    half = roofline_time_model(
        m, PRO, max_num_batched_tokens=2048, efficiencies=Efficiencies(gemm_memory=0.5)
    )
    assert half.moe_mem_ps[1] == rt.moe_mem_ps[1]
    assert half.moe_mem_ps[128] == round(experts * (1 - (15 / 16) ** 128) / (hbm * 0.5) * PS)
    # Under expert parallelism (DP 2) a GPU holds half the experts and t is the same: the same fraction.
    ep = roofline_time_model(m, PRO, data_parallel_size=2, expert_parallel=True, max_num_batched_tokens=2048)
    assert ep.moe_mem_ps[1] == round(experts / 2 / 16 / (hbm * 0.4446) * PS)
    # Everything else is as without the curve: the dense projections, shared experts, router, FLOPs.
    flat = roofline_time_model(
        m, PRO, max_num_batched_tokens=2048, efficiencies=Efficiencies(moe_memory=((1.0, 1.0),))
    )
    assert dataclasses.replace(rt, moe_mem_ps=flat.moe_mem_ps) == flat
    # A calibration's own curve (an Efficiencies field, as a calibration JSON's lists).
    own = Efficiencies.from_dict({"moe_memory": [[1, 0.5], [4, 0.9]]}, "test")
    assert own.moe_memory == ((1.0, 0.5), (4.0, 0.9))
    assert own.to_dict()["moe_memory"] == [[1.0, 0.5], [4.0, 0.9]]
    assert "moe_memory" not in Efficiencies().to_dict()
    for bad in ((), ((2.0, 0.5), (1.0, 0.6)), ((1.0, 1.5),), ((0.0, 0.5),)):
        with pytest.raises(InvalidArgumentError, match="efficiency moe_memory"):
            Efficiencies(moe_memory=bad)


def test_the_fused_moe_benchmark_is_a_call_cost_plus_the_bytes():
    """DESIGN.md §Time model, "The routed experts' read": the #19049 times behind `FUSED_MOE_MEMORY` are a
    fixed 56.1 µs a call plus the bytes at 0.892 of the A100's 1,555 GB/s (least squares on the time), within
    5.4 % of every point; a third term per token fits no closer (5.3 % at most). The times are read back
    from the curve's own fractions (each the experts touched × 9,437,184 B over the time and 1,555 GB/s), so
    an edit to the curve that the paragraph does not follow fails here."""
    hbm, expert = 1555e9, 9_437_184
    tokens = np.array([1, 2, 4, 8, 16, 24, 32, 48, 64, 96], dtype=float)
    touched = 128 * (1 - (1 - 8 / 128) ** tokens)
    assert len(FUSED_MOE_MEMORY) == len(tokens)
    assert [t for t, _ in FUSED_MOE_MEMORY] == pytest.approx(tokens * 8 / touched, abs=1e-4)
    read_s = touched * expert / hbm  # (at the datasheet's full rate)
    times = read_s / np.array([f for _, f in FUSED_MOE_MEMORY])
    assert times[0] * 1e6 == pytest.approx(109.21, abs=0.02)  # (the benchmark's 109.21 µs at one token)
    assert times[-1] * 1e6 == pytest.approx(943.14, abs=0.1)
    line = np.column_stack([np.ones_like(read_s), read_s])
    (call, inverse), *_ = np.linalg.lstsq(line, times, rcond=None)
    assert call * 1e6 == pytest.approx(56.1, abs=0.05)
    assert 1 / inverse == pytest.approx(0.892, abs=0.0005)
    residual = line @ [call, inverse] / times - 1
    assert np.max(np.abs(residual)) == pytest.approx(0.054, abs=0.0005)  # (at 4 tokens, -5.4 %)
    assert np.argmax(np.abs(residual)) == 2
    per_token = np.column_stack([line, tokens])
    fit, *_ = np.linalg.lstsq(per_token, times, rcond=None)
    assert np.max(np.abs(per_token @ fit / times - 1)) == pytest.approx(0.053, abs=0.0005)
    # The curve itself puts the call's cost into the fraction: flat at 0.82-0.84 of HBM from two tokens an
    # expert, where the line's bytes alone would read at 0.892.
    assert all(0.82 <= f <= 0.84 for t, f in FUSED_MOE_MEMORY if t > 1.9)


def test_a_dense_model_does_not_see_the_fused_moe_curve():
    """No routed experts, no table: the dense roofline is the same whatever the curve."""
    for m in (LLAMA, kvsim.models.get("qwen3-32b")):
        rt = roofline_time_model(m, PRO)
        assert rt.moe_mem_ps == ()
        assert rt == roofline_time_model(m, PRO, efficiencies=Efficiencies(moe_memory=((1.0, 0.1),)))
    line = kvsim.SimConfig(model="llama-3.1-8b", gpu="rtx-pro-6000").time_line()
    assert "fused-MoE" not in line


def test_the_time_line_names_the_experts_read():
    line = kvsim.SimConfig(model="qwen3-30b-a3b", gpu="rtx-pro-6000").time_line()
    assert (
        "the routed experts' weights read at vLLM's fused-MoE kernel's measured efficiency (0.44-0.84 of HBM "
        "by tokens per expert: its benchmark_moe.py on Qwen3-30B-A3B's experts, A100, vllm-project/vllm#19049)"
        in line
    )
    cal = kvsim.SimConfig(model="qwen3-30b-a3b", gpu="rtx-pro-6000", calibration="rtx-pro-6000-llama-3.1-8b")
    assert (
        "calibration rtx-pro-6000-llama-3.1-8b (fitted on llama-3.1-8b on rtx-pro-6000), the routed experts' "
        "weights read at vLLM's" in cal.time_line()
    )


def test_windowed_layers_read_their_window():
    m = kvsim.models.get("gpt-oss-20b")
    rt = roofline_time_model(m, kvsim.gpus.get("h100-80gb"))
    kinds = sorted((a.kind, a.window) for a in rt.attention)
    assert kinds == [(FULL, 0), (SLIDING, 128)]
    assert rt.needs_full_steps
    full, slide = sorted(rt.attention, key=lambda a: a.kind)
    # A decode at 10,000 tokens reads 10,000 keys of the full layers and 128 of the windowed ones.
    step = roofline_step(rt, [(10_000, 1)]) - rt.base_ps(1, 1)
    assert step == full.decode_ps * 10_000 + slide.decode_ps * 128


def test_decodes_beside_a_prefill_cost_the_mixed_rate():
    eff = Efficiencies(attention_memory=0.9, attention_mixed=0.45)
    rt = roofline_time_model(LLAMA, PRO, efficiencies=eff)
    (a,) = rt.attention
    assert a.mixed_ps == pytest.approx(2 * a.kv_ps, abs=2)
    alone = roofline_step(rt, [(1000, 1)] * 4) - rt.base_ps(4, 4)
    beside = roofline_step(rt, [(1000, 1)] * 4 + [(64, 64)]) - rt.base_ps(68, 5)
    prefill = max(a.kv_ps * 64, a.flop_ps * (64 * 64 - 64 * 63 // 2))
    assert alone == 4000 * a.kv_ps
    assert beside == 4000 * a.mixed_ps + prefill


@pytest.mark.parametrize(
    "kw",
    [
        {"model": "llama-3.1-8b", "gpu": "rtx-pro-6000", "max_num_seqs": 32, "max_num_batched_tokens": 512},
        {"model": "gpt-oss-20b", "gpu": "h100-80gb", "max_num_batched_tokens": 512},  # windows: full steps
        {"model": "gpt-oss-20b", "gpu": "h100-80gb", "hybrid_kv_cache_manager": "off"},  # ... in one group
        {"model": "qwen3-30b-a3b", "gpu": "h100-80gb", "num_blocks": 1500, "max_num_batched_tokens": 256},
        # dense MLA: prefill chunks at forward_mha's price and their cached latents up-projected
        {
            "model": "deepseek-v3",
            "gpu": "h200",
            "tensor_parallel_size": 8,
            "num_blocks": 600,
            "max_num_batched_tokens": 256,
        },
        {
            "model": "qwen3-32b",
            "gpu": "rtx-pro-6000",
            "tensor_parallel_size": 2,
            "calibration": "rtx-pro-6000-llama-3.1-8b",
        },
    ],
)
def test_real_models_run_alike_in_both_engines(kw):
    """Paper-like lengths, prefill chunks beside decodes, preemption in the small pool: the derived
    coefficients give both engines the same clock and rows."""
    w = synthetic(120, arrival_rate=30, lengths="sharegpt-paper", seed=5)
    cfg = kvsim.SimConfig(**kw)
    assert cfg.time_model == "roofline"
    ref = kvsim.simulate(w, cfg, backend="reference")
    rust = kvsim.simulate(w, cfg)
    assert rust.raw.counters == ref.raw.counters
    assert rust.requests.equals(ref.requests, null_equal=True)
    assert rust.summary == ref.summary


def test_auto_is_the_roofline_with_a_model_and_a_gpu():
    cfg = kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb")
    assert cfg.time_model == "roofline"
    assert cfg.roofline is not None
    assert kvsim.SimConfig(num_blocks=64).roofline is None
    assert kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb", time_model="linear").roofline is None
    assert cfg.time_line().startswith("time: roofline of llama-3-8b on h100-80gb, datasheet figures")
    assert kvsim.SimConfig(num_blocks=64).time_line().startswith("time: ticks, every step 1 ms")
    cal = kvsim.SimConfig(model="qwen3-8b", gpu="rtx-pro-6000", calibration="rtx-pro-6000-llama-3.1-8b")
    assert cal.time_model == "roofline"
    assert cal.roofline.dense_mem_ps > roofline_time_model(kvsim.models.get("qwen3-8b"), PRO).dense_mem_ps


def test_hand_set_coefficients_survive_replace():
    rt = RooflineTimeModel(1, 2, 3, 4, 5, 6, (), 0, 7, 8, (AttentionClass(FULL, 0, 9, 10, 11),))
    cfg = kvsim.SimConfig(num_blocks=64).with_roofline(rt)
    assert cfg.time_model == "roofline"
    assert cfg.roofline is rt
    again = cfg.replace(block_size=32)
    assert again.roofline is rt
    assert again.block_size == 32
    assert cfg.replace(time_model="ticks").roofline is None
    with pytest.raises(InvalidArgumentError, match=r"must be a kvsim\.model\.timing\.RooflineTimeModel"):
        cfg.with_roofline("fast")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"num_blocks": 64, "time_model": "roofline"}, "needs a model and a gpu"),
        (
            {"num_blocks": 64, "calibration": "rtx-pro-6000-llama-3.1-8b"},
            "holds the roofline's efficiencies: it needs a model and a gpu",
        ),
        (
            {"model": "llama-3-8b", "gpu": "h100-80gb", "calibration": "rtx-pro-6000-llama-3.1-8b"},
            "was fitted on gpu 'rtx-pro-6000', not 'h100-80gb'",
        ),
        (
            {
                "model": "llama-3-8b",
                "gpu": "h100-80gb",
                "time_model": "linear",
                "calibration": "rtx-4090-llama-3.1-8b",
            },
            "needs time_model 'roofline', 'calibrated' or 'auto', not 'linear'",
        ),
        (
            {
                "model": "qwen3-30b-a3b",
                "gpu": "h100-80gb",
                "data_parallel_size": 3,
                "enable_expert_parallel": True,
            },
            "does not divide qwen3-30b-a3b's 128 experts",
        ),
    ],
)
def test_time_model_errors_name_the_knob(kw, match):
    with pytest.raises(InvalidArgumentError, match=match):
        kvsim.SimConfig(**kw)


def test_coefficients_are_bounded_and_checked():
    with pytest.raises(InvalidArgumentError, match="efficiency gemm_memory 0 must lie in"):
        Efficiencies(gemm_memory=0)
    with pytest.raises(InvalidArgumentError, match="step_overhead_ps -1"):
        Efficiencies(step_overhead_ps=-1)
    # An efficiency too low for the engines' 2^40 ps is named, with its least value for the model and GPU.
    with pytest.raises(
        InvalidArgumentError,
        match=r"efficiency gemm_memory 1e-06 is too low for llama-3-70b on l4: .* at least 0\.415",
    ):
        roofline_time_model(
            kvsim.models.get("llama-3-70b"), kvsim.gpus.get("l4"), efficiencies=Efficiencies(gemm_memory=1e-6)
        )
    with pytest.raises(InvalidArgumentError, match="a window belongs to sliding"):
        RooflineTimeModel(0, 0, 0, 0, 0, 0, (), 0, 0, 0, (AttentionClass(FULL, 16, 1, 1),))
    with pytest.raises(InvalidArgumentError, match="moe_flop_tok_ps without a moe_mem_ps table"):
        RooflineTimeModel(0, 0, 0, 0, 0, 0, (), 5, 0, 0, ())


def test_the_binding_refuses_a_bad_roofline():
    from kvsim import _core
    from kvsim.engine.engine_input import prepare
    from kvsim.engine.rust_engine import config_kwargs, input_kwargs

    cfg = kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb")
    kw = config_kwargs(cfg)
    inp = input_kwargs(prepare(synthetic(2, seed=1), cfg))
    bad = dict(kw["roofline"], attention=[(3, 0, 1, 1, 1, 1, 0, 1, 0, 0, 0)])
    with pytest.raises(InvalidArgumentError, match="attention class kind 3"):
        _core.run_engine(**{**kw, "roofline": bad}, timeseries_every=0, record_events=False, **inp)
    short = dict(kw["roofline"], attention=[(0, 0, 1, 1, 1, 1, 0)])  # (no prefill_kv_ps, context_gemm_ps, …)
    with pytest.raises(InvalidArgumentError, match="prefill_kv_ps, context_gemm_ps, context_flop_ps"):
        _core.run_engine(**{**kw, "roofline": short}, timeseries_every=0, record_events=False, **inp)
    names = ("prefill_flop_ps", "context_ps", "prefill_kv_ps", "context_gemm_ps", "context_flop_ps")
    for i, name in enumerate((*names, "context_weight_ps"), start=5):
        big = [0, 0, 1, 1, 1, 1, 0, 1, 0, 0, 0]
        big[i] = 2**40 + 1
        over = dict(kw["roofline"], attention=[tuple(big)])
        with pytest.raises(InvalidArgumentError, match=f"roofline {name} {2**40 + 1} must be at most"):
            _core.run_engine(**{**kw, "roofline": over}, timeseries_every=0, record_events=False, **inp)
    with pytest.raises(InvalidArgumentError, match="roofline"):
        _core.run_engine(**{**kw, "roofline": None}, timeseries_every=0, record_events=False, **inp)


def test_the_quiet_spans_of_a_real_model_are_exact():
    """Light load on a real roofline: the Rust engine's quiet spans (decode steps in closed form) and the
    reference's steps give the same clock."""
    n = 12
    rng = np.random.default_rng(3)
    w = kvsim.Workload(
        arrival=np.cumsum(rng.choice([0.0, 0.5, 2.0], size=n)),
        output_len=rng.integers(200, 900, size=n),
        prompt_len=rng.integers(10, 3000, size=n),
    )
    cfg = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", block_size=64)
    ref, rust = kvsim.simulate(w, cfg, backend="reference"), kvsim.simulate(w, cfg)
    assert rust.raw.counters == ref.raw.counters
    assert rust.summary == ref.summary


def test_deepseek_v4_experts_are_priced_as_vllm_loads_them():
    """DeepSeek-V4's fp8 checkpoint loads its routed experts as MXFP4 (vLLM 0.33.0's DeepseekV4FP8Config,
    `expert_dtype` fp4): 43 layers x 256 experts x 3 x 4,096 x 2,048 elements at 17/32 bytes each (4-bit
    values, a byte's scale per 32). The roofline's groups read them so, and sum to the model's weights
    (they once priced the experts at fp8: 277 GB of experts in a model of 156 GB)."""
    m = kvsim.models.get("deepseek-v4-flash")
    params = 43 * 256 * 3 * 4096 * 2048
    experts = weight_groups(m)["experts"]
    assert (
        (experts.params, experts.bytes) == (params, params * 17 // 32) == (277_025_390_592, 147_169_738_752)
    )
    assert sum(g.bytes for g in weight_groups(m).values()) == m.param_bytes


def test_gpt_oss_padded_mxfp4_experts_are_read_and_multiplied():
    """vLLM 0.33.0 pads gpt-oss's MXFP4 experts to its backend's tiles
    (fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size) and its kernels take the
    padded shapes (Triton's matmul_ogs K and N from the weights, Marlin's from them, FlashInfer TRT-LLM's
    the padded intermediate_size_per_partition): on a B200 (TRT-LLM: hidden to 256, intermediate to 128)
    gpt-oss-120b's 2,880 x 2,880 experts are 3,072 x 2,944, so the roofline streams and multiplies
    128 x 36 x 3 x (3,072 x 2,944 - 2,880 x 2,880) more elements, 17/32 B each. On an H100 at tp 1
    (Triton: 2,880 is a multiple of 64, hidden unpadded) nothing changes; at tp 2 each GPU's 1,440 is 1,472."""
    import dataclasses

    from kvsim.model.linear_time import linear_time_model
    from kvsim.model.shard import shard

    m = kvsim.models.get("gpt-oss-120b")
    b200, h100 = kvsim.gpus.get("b200"), kvsim.gpus.get("h100-80gb")
    elements = 128 * 36 * 3 * 2880 * 2880
    experts = elements * 17 // 32
    assert weight_groups(m)["experts"].bytes == experts == 60_914_073_600
    pad_elements = 128 * 36 * 3 * (3072 * 2944 - 2880 * 2880)
    pad = pad_elements * 17 // 32
    assert (pad_elements, pad) == (10_362_028_032, 5_504_827_392)
    rt = roofline_time_model(m, b200)
    bare = roofline_time_model(m, dataclasses.replace(b200, arch=None))  # no backend known: unpadded
    # (all experts touched: read at the fused-MoE curve's saturated 0.8220 of HBM, `FUSED_MOE_MEMORY`)
    sat = FUSED_MOE_MEMORY[-1][1]
    assert rt.moe_mem_ps[-1] == round((experts + pad) / (b200.hbm_bandwidth * sat) * PS)
    assert bare.moe_mem_ps[-1] == round(experts / (b200.hbm_bandwidth * sat) * PS)
    assert rt.moe_flop_tok_ps / bare.moe_flop_tok_ps == pytest.approx(
        (elements + pad_elements) / elements, rel=1e-6
    )
    assert rt.tok_ps > bare.tok_ps  # the activation over 2,944 columns, not 2,880
    decode = [(1024, 1)] * 64
    assert rt.step_ps(decode) > bare.step_ps(decode)
    # The linear model streams the same padded bytes.
    lt = linear_time_model(m, b200)
    assert lt.c0_ps == round((shard(m, None, 1).param_bytes + pad) / b200.hbm_bandwidth * PS)
    # H100, Triton: nothing at tp 1; 1,440 -> 1,472 a GPU at tp 2, the hidden size unpadded.
    assert roofline_time_model(m, h100) == roofline_time_model(m, dataclasses.replace(h100, arch=None))
    tp2 = roofline_time_model(m, h100, tensor_parallel_size=2)
    pad2 = 128 * 36 * 3 * 2880 * (1472 - 1440) * 17 // 32
    assert tp2.moe_mem_ps[-1] == round((experts / 2 + pad2) / (h100.hbm_bandwidth * sat) * PS)
    # Expert parallelism over 2 B200s: 64 whole experts a GPU, each 3,072 x 2,944.
    ep = roofline_time_model(m, b200, tensor_parallel_size=2, expert_parallel=True)
    assert ep.moe_mem_ps[-1] == round((experts + pad) / 2 / (b200.hbm_bandwidth * sat) * PS)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"attention": (1,)}, "roofline attention (1,) must hold AttentionClass values"),  # (AttributeError)
        ({"attention": None}, "roofline attention None must be a tuple"),  # (TypeError)
        ({"moe_mem_ps": None}, "roofline moe_mem_ps None must be a tuple"),  # (TypeError)
        ({"moe_senders": 0}, "roofline moe_senders 0 must be a whole number in [1, 65536]"),
        ({"moe_senders": 2.0}, "roofline moe_senders 2.0 must be a whole number in [1, 65536]"),
    ],
)
def test_a_hand_made_roofline_of_the_wrong_shape_is_refused_by_field(change, said):
    from kvsim.model.timing import FULL, AttentionClass, RooflineTimeModel

    base = dict.fromkeys(
        ("fixed_ps", "seq_ps", "tok_ps", "dense_mem_ps", "dense_mem_tok_ps", "dense_flop_tok_ps"), 0
    )
    base.update(moe_mem_ps=(), moe_flop_tok_ps=0, head_mem_ps=0, head_flop_seq_ps=0)
    base["attention"] = (AttentionClass(FULL, 0, 1, 0, 1),)
    RooflineTimeModel(**base)  # (the shape it takes)
    with pytest.raises(InvalidArgumentError, match=re.escape(said)):
        RooflineTimeModel(**{**base, **change})
