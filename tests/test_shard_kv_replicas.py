"""One GPU's K and V projection weights past as many GPUs as KV heads: vLLM 0.33.0's `QKVParallelLinear`
(`vllm/model_executor/layers/linear.py`) gives each rank `max(1, num_kv_heads // tp)` KV heads, replicating
each head's K and V rows over `tp // num_kv_heads` ranks (`num_kv_head_replicas`), so a GPU holds
1 / min(tp, kv_heads) of a layer's K/V rows, not 1 / tp (`kvsim.model.breakdown.kv_share`; DESIGN.md §Defaults
and sizing, "Tensor parallelism"). The sizing (`kvsim.model.shard.shard`) and the roofline (`dense_mem`)
both follow; at tp <= KV heads nothing changes."""

from __future__ import annotations

import re

import pytest

from kvsim.model import gpus, models
from kvsim.model.shard import replicated, shard
from kvsim.model.timing import roofline_time_model
from kvsim.model.weights import weight_groups


def _split_evenly(m: models.Model, tp: int) -> int:
    """The per-GPU bytes of the rule before replication was priced: what is whole on every rank whole, the
    rest / tp (K/V rows included)."""
    whole, _ = replicated(m)
    return -(-(m.param_bytes - whole) // tp) + whole


def test_qwen3_235b_at_tp_8_holds_one_kv_head_a_gpu():
    """Qwen3-235B-A22B (bf16; 94 layers, hidden 4,096, 4 KV heads of 128) at tp 8: each GPU holds one KV
    head's K and V rows, a quarter of them, where dividing by tp gave an eighth. The difference a GPU is
    layers x 2 (K, V) x kv x head_dim x hidden x (1/kv - 1/tp) x 2 bytes
    = 94 x 2 x 4 x 128 x 4,096 x (1/4 - 1/8) x 2 = 98,566,144 B (about 94 MiB), its parameters half that
    (49,283,072), every one multiplied by every token (attention)."""
    m = models.resolve("qwen3-235b-a22b")
    assert (m.num_layers, m.hidden_size, m.num_kv_heads, m.head_dim) == (94, 4096, 4, 128)
    kv_params = 94 * 2 * 4 * 128 * 4096
    gpu = shard(m, None, 8)
    missing = kv_params // 4 - kv_params // 8  # 1/kv - 1/tp of them
    assert missing == 49_283_072
    assert gpu.param_bytes - _split_evenly(m, 8) == 2 * missing == 98_566_144
    whole_bytes, whole_params = replicated(m)
    kv_bytes = 2 * kv_params
    assert gpu.param_bytes == -(-(m.param_bytes - whole_bytes - kv_bytes) // 8) + whole_bytes + kv_bytes // 4
    # (the routed experts too split over tp at dp 1)
    rest = m.num_params - whole_params - kv_params
    assert gpu.num_params == -(-rest // 8) + whole_params + kv_params // 4
    active = m.num_active_params - whole_params - kv_params
    assert gpu.num_active_params == -(-active // 8) + whole_params + kv_params // 4


def test_qwen3_30b_at_tp_8_and_16():
    """Qwen3-30B-A3B (bf16; 48 layers, hidden 2,048, 4 KV heads of 128): a GPU's K/V rows are a quarter of
    them at tp 8 and at tp 16 alike, 48 x 2 x 4 x 128 x 2,048 x (1/4 - 1/tp) x 2 B more than 1/tp:
    25,165,824 B at tp 8, 37,748,736 B at tp 16."""
    m = models.resolve("qwen3-30b-a3b")
    assert (m.num_layers, m.hidden_size, m.num_kv_heads, m.head_dim) == (48, 2048, 4, 128)
    kv_bytes = 48 * 2 * 4 * 128 * 2048 * 2
    for tp, more in ((8, 25_165_824), (16, 37_748_736)):
        assert kv_bytes // 4 - kv_bytes // tp == more
        assert shard(m, None, tp).param_bytes - _split_evenly(m, tp) == more


def test_fp8_block_scales_follow_the_replicated_rows():
    """MiniMax-M2 (fp8, 128 x 128 blocks; 62 layers, hidden 3,072, 48 heads, 8 KV heads of 128) at tp 16:
    vLLM's rank holds a qkv_proj of (48/16 + 2 x 1) x 128 = 640 rows, fp8, and ceil(640/128) x
    ceil(3,072/128) = 5 x 24 fp32 `weight_scale_inv` (the k and v scale rows loaded by
    `adjust_block_scale_shard` from its replicated head's); kvsim's q share (48 blocks / 16) plus one head's
    K and V (8 blocks / 8 each) is the same 5 x 24. MiniMax-M2's per-layer k_norm (8 x 128, bf16) is sharded
    as the KV heads are (`MiniMaxText01RMSNormTP`, `weight_shard_world_size` num_kv_heads): replicated
    too. A GPU holds, per layer, (1/8 - 1/16) more of K and V (2 x 1,024 x 3,072 B), their scales
    (2 x 8 x 24 x 4 B) and k_norm (8 x 128 x 2 B): 62 x (6,291,456 + 1,536 + 2,048) / 16 = 24,393,280 B."""
    m = models.resolve("minimax-m2")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.head_dim) == (
        62,
        3072,
        48,
        8,
        128,
    )
    assert m.quant_method == "fp8"
    assert shard(m, None, 16).param_bytes - _split_evenly(m, 16) == 62 * (6_291_456 + 1_536 + 2_048) // 16
    assert 62 * (6_291_456 + 1_536 + 2_048) // 16 == 24_393_280


def test_gemma4_global_layers_replicate_their_own_kv_heads():
    """Gemma 4 31B: 50 sliding layers of 16 KV heads of 256 and 10 global ones of 4 KV heads of 512
    (`num_global_key_value_heads`, `attention_k_eq_v`: vLLM's QKVParallelLinear keeps the V slot) over
    hidden 5,376. At tp 8 the sliding layers' 16 heads split (2 a GPU, 1/8 as before); the global layers'
    4 replicate, a GPU holding a quarter of their K and V rows:
    10 x 2 x 4 x 512 x 5,376 x (1/4 - 1/8) x 2 B = 55,050,240 B more."""
    m = models.resolve("gemma-4-31b")
    heads = [lay.num_kv_heads for lay in m.layers]
    assert heads.count(4) == 10
    assert heads.count(16) == 50
    assert shard(m, None, 8).param_bytes - _split_evenly(m, 8) == 10 * 2 * 4 * 512 * 5376 * 2 // 8
    assert 10 * 2 * 4 * 512 * 5376 * 2 // 8 == 55_050_240
    # at tp 4 no layer has fewer KV heads than GPUs: 1/tp of every one, as before
    assert shard(m, None, 4).param_bytes == _split_evenly(m, 4)


@pytest.mark.parametrize(
    ("name", "tp"), [("qwen3-235b-a22b", 4), ("qwen3-30b-a3b", 2), ("llama-3.1-70b", 8), ("minimax-m2", 8)]
)
def test_tp_at_most_the_kv_heads_unchanged(name, tp):
    """At tp <= KV heads vLLM splits the K/V rows as the rest: 1/tp a GPU, as kvsim always counted."""
    m = models.resolve(name)
    assert tp <= m.num_kv_heads
    assert shard(m, None, tp).param_bytes == _split_evenly(m, tp)


def test_the_roofline_reads_what_a_gpu_holds():
    """The roofline's `dense_mem` reads a GPU's dense weights: at tp 8 Qwen3-235B-A22B's replicated K/V
    rows add the same 98,566,144 B (`test_qwen3_235b_at_tp_8_holds_one_kv_head_a_gpu`) to what 1/tp of
    the attention gave."""
    m = models.resolve("qwen3-235b-a22b")
    groups = weight_groups(m)
    dense = [groups[g] for g in ("attn", "mlp", "shared_experts", "router")]
    even = sum((g.bytes - g.whole_bytes) / 8 + g.whole_bytes for g in dense) + groups["other"].gemm_bytes
    rt = roofline_time_model(m, gpus.resolve("h100-80gb"), tensor_parallel_size=8)
    term = next(t for t in rt.terms if t.name == "dense_mem")
    read = int(re.match(r"([\d,]+) B", term.how).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert read == pytest.approx(even + 98_566_144, abs=1)
