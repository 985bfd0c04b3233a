"""The 2026 families (split from tests/test_catalogue.py): state layers, full-attention MoE and the refusals
of what kvsim cannot model, each checked by hand against its config.json (DESIGN.md §Hybrid attention)."""

from __future__ import annotations

import json
import math

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model import hf_config, models
from kvsim.model.layers import kv_layout
from kvsim.model.shard import replicated
from kvsim.model.sizing import size_pool
from tests.catalogue_common import HF, _text

# -- 2026 families: state layers, full-attention MoE, refusals ------------------------------------------------


def test_qwen3_next_state_and_kv_bytes_from_the_config_by_hand():
    """Qwen3-Next: 36 gated delta net layers keep a state per request, 12 gated-attention layers keep KV.
    Per token (bf16): 2 (K, V) x 2 KV heads x 256 x 2 bytes = 2,048 B a full layer, x 12 = 24,576 B.
    Per request a delta-net layer keeps its convolution state, conv_dim = 2 x 16 x 128 + 32 x 128 = 8,192
    channels x (kernel 4 - 1) x 2 B, and its recurrent state, 32 value heads x 128 x 128 x 2 B (vLLM's
    gated_delta_net_state_shape): 49,152 + 1,048,576 = 1,097,728 B. A 16-token attention block (32 KiB)
    cannot hold it, so vLLM raises the block to 16 x ceil(1,097,728 / (16 x 2,048)) = 544 tokens."""
    from kvsim.model.layers import kv_layout

    cfg = json.loads((HF / "qwen3-next-80b-a3b.json").read_text())
    m = models.get("qwen3-next-80b-a3b")
    kinds = [lay.kind for lay in m.layers]
    assert kinds == (["mamba"] * 3 + ["full"]) * 12
    per_layer = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2
    assert per_layer == 2048
    assert m.kv_bytes_per_token == 12 * per_layer
    conv_dim = 2 * 16 * 128 + 32 * 128
    state = conv_dim * (4 - 1) * 2 + 32 * 128 * 128 * 2
    assert state == 1_097_728
    st = m.layers[0].state
    assert st is not None
    assert st.page_bytes(1, 16) == state
    layout = kv_layout(m, 16, enable_prefix_caching=False)
    assert layout.block_size == 16 * -(-state // (16 * per_layer)) == 544
    assert {g.kind for g in layout.groups} == {"mamba", "full"}
    assert all(g.page_bytes == 544 * per_layer for g in layout.groups)
    # Two GPUs halve the KV heads and the state's heads and channels.
    assert st.page_bytes(2, 16) == state // 2


def test_qwen3_next_weights_count_the_gated_delta_net_and_the_gated_attention():
    """The parameters re-derived by hand: per delta-net layer in_proj_qkvz (2048 -> 2 x 2048 + 2 x 4096),
    in_proj_ba (2048 -> 64), out_proj (4096 -> 2048), conv1d 8,192 x 4, dt_bias and A_log 32 each, a norm
    of 128; per attention layer a query twice as wide (its output gate), k, v, o and two 256-wide norms;
    512 + 1 shared experts of 512 per layer with a router and the shared expert's gate; embeddings and
    lm_head. The model card's 80B total, 79B without embeddings, 3B activated (rounded)."""
    h, layers, lin, full = 2048, 48, 36, 12
    delta = h * (2 * 2048 + 2 * 4096) + h * 64 + 4096 * h + 8192 * 4 + 32 + 32 + 128
    attn = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h + 2 * 256
    moe = 512 * 3 * h * 512 + 3 * h * 512 + 512 * h + h
    embeds = 2 * 151936 * h
    norms = (2 * layers + 1) * h
    total = lin * delta + full * attn + layers * moe + embeds + norms
    m = models.get("qwen3-next-80b-a3b")
    assert m.num_params == total
    assert (m.num_params - embeds) / 1e9 == pytest.approx(79, rel=0.01)
    active = m.num_params - layers * 512 * 3 * h * 512 + layers * 10 * 3 * h * 512
    assert m.num_active_params == active
    assert (active - embeds) / 1e9 == pytest.approx(3, rel=0.1)


def test_qwen3_next_runs_as_vllm_serves_it():
    """On two H200s, with prefix caching on (`vllm serve`'s default: vLLM's Mamba 'align' mode) and off, the
    four start-up figures come out; a request counts 3 blocks per state group with caching (two states and
    the gated delta net's prefill checkpoint, which its FlashInfer prefill kernel on Hopper exports, with
    blocks a multiple of 64 tokens: 576 where 544), one without, so the concurrency is a little lower with
    it; on A100s (Triton's kernel, no checkpoint) 2 a state group, on 544-token blocks. (vLLM 0.33.0's profiled pool: `vllm-0.33`.)"""
    off = kvsim.SimConfig.preset(
        "vllm-0.33",
        model="qwen3-next-80b-a3b",
        gpu="h200",
        tensor_parallel_size=2,
        enable_prefix_caching=False,
    )
    fig = off.pool.figures
    m = models.get("qwen3-next-80b-a3b")
    rep = replicated(m)[0]  # (and the routers and norms)
    assert (
        fig.model_loading_bytes == -(-(m.param_bytes - rep) // 2) + rep + m.rope_cache_bytes
    )  # (rotary cache whole)
    assert fig.max_concurrency > 1
    on = kvsim.SimConfig.preset("vllm-0.33", model="qwen3-next-80b-a3b", gpu="h200", tensor_parallel_size=2)
    assert on.pool.layout.mamba_align
    assert [g.cap for g in on.kv_groups if g.kind == "mamba"] == [3, 3, 3]
    blocks = on.pool.layout.blocks_per_request(262_144, on.max_in_flight_tokens)
    assert on.engine_block_size == 576
    assert blocks == -(-262_144 // 576) + 3 * 3
    assert on.pool.figures.max_concurrency < fig.max_concurrency
    a100 = kvsim.SimConfig.preset(
        "vllm-0.33", model="qwen3-next-80b-a3b", gpu="a100-80gb", tensor_parallel_size=4
    )
    assert [g.cap for g in a100.kv_groups if g.kind == "mamba"] == [2, 2, 2]
    assert (
        a100.pool.layout.blocks_per_request(262_144, a100.max_in_flight_tokens)
        == -(-262_144 // a100.engine_block_size) + 3 * 2
    )
    assert a100.engine_block_size % 16 == 0
    assert a100.engine_block_size % 64 != 0


def test_minimax_m2_is_full_attention_moe_in_fp8_blocks():
    """MiniMax-M2: every layer full attention (vLLM's minimax_m2.py), 62 x 2 x 8 x 128 x 2 B = 253,952 B a
    token; 256 experts of 1536 per layer at a byte a weight plus an fp32 scale per 128 x 128 block, the
    embeddings and lm_head at 2 bytes, the router at 4; 230B total and 10B active (without embeddings) on the card."""
    m = models.get("minimax-m2")
    assert not m.is_hybrid
    assert m.kv_bytes_per_token == 62 * 2 * 8 * 128 * 2
    h, f, e, n = 3072, 1536, 256, 62

    def blocks(rows, cols):
        return -(-rows // 128) * -(-cols // 128)

    experts = n * e * (2 * (f * h + 4 * blocks(f, h)) + h * f + 4 * blocks(h, f))
    attn = n * (
        (48 * 128 + 2 * 8 * 128) * h
        + 4 * (blocks(48 * 128, h) + 2 * blocks(8 * 128, h))
        + h * 48 * 128
        + 4 * blocks(h, 48 * 128)
    )
    embeds = 2 * 200064 * h
    router = n * e * h
    rest = m.num_params - embeds - router - n * (3 * f * h * e + (48 + 2 * 8) * 128 * h + 48 * 128 * h)
    # (the router in float32: vLLM 0.33.0's GateLinear(params_dtype=torch.float32), minimax_m2.py 110-117)
    assert m.weight_bytes == experts + attn + 2 * (embeds + rest) + 4 * router
    assert (m.num_active_params - embeds) / 1e9 == pytest.approx(10, rel=0.05)
    bad = {**json.loads((HF / "minimax-m2.json").read_text()), "attn_type_list": [0] + [1] * 61}
    with pytest.raises(InvalidArgumentError, match="attn_type_list"):
        hf_config._from_dict(bad, "m", "m", "m", None)


def test_deepseek_v4_caches_and_groups_from_first_principles():
    """DeepSeek-V4-Flash's KV, from the per-layer arithmetic (DESIGN.md §Hybrid attention, "DeepSeek-V4"):
    fp8_ds_mla entries of 448 fp8 + 64 bf16 RoPE values + 8 scale bytes, pages rounded up to 576 bytes; a
    block id holds one page of every cache in the largest packed group; a run on a B200 prints vLLM's figures
    from those bytes."""
    m = models.get("deepseek-v4-flash")
    ratios = json.loads((HF / "deepseek-v4-flash.json").read_text())["compress_ratios"][:43]
    entry = 448 + 64 * 2 + 8
    assert entry == 584

    def page(n_bytes):
        return -(-n_bytes // 576) * 576

    swa, c4, c128 = page(64 * entry), page(256 // 4 * entry), page(256 // 128 * entry)
    idx_keys, idx_state = page(64 * (128 + 4)), page(4 * 2 * 2 * 128 * 4)
    state4, state128 = page(4 * 2 * 2 * 512 * 4), page(8 * 2 * 512 * 4)
    n4, n128 = ratios.count(4), ratios.count(128)
    assert (n4, n128, len(ratios)) == (21, 20, 43)
    full_group = n4 * (idx_keys + c4) + n128 * c128
    expected_groups = [
        ("sliding_window", 128, 64, 22 * swa),
        ("sliding_window", 128, 64, 21 * swa),
        ("full", 0, 256, full_group),
        ("sliding_window", 8, 4, n4 * (idx_state + state4)),
        ("sliding_window", 128, 8, n128 * state128),
    ]
    for tp in (1, 4):  # one latent head, replicated: tensor parallelism changes no page
        layout = kv_layout(m, 16, tensor_parallel_size=tp)
        got = [(g.kind, g.window, g.block_size, g.bytes_per_block) for g in layout.groups]
        assert got == expected_groups
        assert layout.bytes_per_block == max(b for *_, b in expected_groups) == full_group
        assert layout.scheduler_block_size == 256
    # A 1M-token request holds, per group, what vLLM's admission bound gives (two batches in flight).
    layout = kv_layout(m, 16)
    in_flight = 2 * 8192
    per_request = (
        2 * (-(-(127 + in_flight) // 64) + 1)
        + -(-(1 << 20) // 256)
        + (-(-(7 + in_flight) // 4) + 1)
        + (-(-(127 + in_flight) // 8) + 1)
    )
    assert layout.blocks_per_request(1 << 20, in_flight) == per_request
    # Per token if every cache kept every token: the latent everywhere, 1/r of one where compressed, the
    # indexer's 132-byte key per 4 tokens.
    exact = 43 * entry + n4 * (entry / 4 + 132 / 4) + n128 * entry / 128
    assert m.kv_bytes_per_token == math.ceil(exact)
    # The pool on a B200 (tensor parallel 2) is whole blocks of that size, and vLLM's figures follow.
    p = size_pool("deepseek-v4-flash", "b200", 16, tensor_parallel_size=2, max_num_batched_tokens=8192)
    assert p.layout is not None
    assert p.layout.bytes_per_block == full_group
    assert p.figures is not None
    ctx = 1 << 20
    assert p.figures.max_concurrency == pytest.approx(p.figures.num_blocks / per_request)
    assert p.figures.kv_cache_tokens == int(p.figures.num_blocks / per_request * ctx)


def test_deepseek_v4_weights_and_refusals():
    """DeepSeek-V4-Flash's weights: fp8 128 x 128 blocks, MXFP4 experts (`expert_dtype` fp4), 284B (model
    card); what kvsim cannot price is refused by name."""
    m = models.get("deepseek-v4-flash")
    assert m.quantization.startswith("deepseek_v4_fp8")
    assert "experts mxfp4" in m.quantization
    assert m.num_params / 1e9 == pytest.approx(284, rel=0.01)  # model card: 284B (MTP layer not loaded)
    experts = 43 * 256 * 3 * 2048 * 4096
    mxfp4 = experts // 2 + experts // 32  # 4-bit values + one E8M0 byte per 32
    fp8_experts = {**json.loads((HF / "deepseek-v4-flash.json").read_text()), "expert_dtype": "fp8"}
    m8 = hf_config._from_dict(fp8_experts, "v4", "v4", "v4", None)
    block_scales = 43 * 256 * 3 * (2048 // 128) * (4096 // 128) * 4
    assert m8.weight_bytes - m.weight_bytes == experts + block_scales - mxfp4
    base = json.loads((HF / "deepseek-v4-flash.json").read_text())
    # NVIDIA's DeepSeek-V4-Flash-NVFP4 (its config.json: `quant_method` fp8, `moe_quant_algo` NVFP4): the
    # routed experts NVFP4 (4-bit values, one fp8 scale per 16 padded to 128 x 4 tiles, a global scale),
    # the rest as the fp8 release's (each expert matrix one fp32 global scale, as kvsim prices NVFP4).
    nv = {**base, "quantization_config": {**base["quantization_config"], "moe_quant_algo": "NVFP4"}}
    m4 = hf_config._from_dict(nv, "v4", "v4", "v4", None)
    assert "experts nvfp4" in m4.quantization
    per = 43 * 256  # the routed experts: w1 and w3 (2,048 x 4,096 each, out x in), w2 (4,096 x 2,048)
    up = 2048 * 4096 // 2 + 2048 * (4096 // 16) + 8  # rows 2,048 (a multiple of 128), 256 scale columns
    down = 4096 * 2048 // 2 + 4096 * (2048 // 16) + 8
    assert m4.weight_bytes - m.weight_bytes == per * (2 * up + down) - mxfp4
    for change, match in (
        ({"compress_ratios": [0, 2] + [4] * 42}, "compress_ratios\\[1\\] 2"),
        ({"compress_ratios": [4] * 10}, "compress_ratios"),
        ({"head_dim": 256}, "head_dim"),
        # vLLM 0.33.0 and 0.34.0 register DeepSeek-V4.1 (DeepseekV41Config): not modelled, not "no config class"
        (
            {"model_type": "deepseek_v41"},
            r"'deepseek_v41' \(DeepSeek-V4.1, vLLM 0.33.0's and 0.34.0's DeepseekV41Config\)",
        ),
        (
            {"model_type": "deepseek_v3"},
            r"model_type 'deepseek_v3' with 'compress_ratios': only DeepSeek-V4 "
            r"\('deepseek_v4'\) is modelled \(",
        ),
        # SGLang's copies of the V4 releases (model_type 'deepseek_ref'): no config class in vLLM 0.33.0 or 0.34.0
        ({"model_type": "deepseek_ref"}, "0.34.0 register no config class named 'deepseek_ref'"),
        ({"expert_dtype": "fp6"}, "expert_dtype"),
        (
            {"quantization_config": {**base["quantization_config"], "moe_quant_algo": "MXFP8"}},
            "moe_quant_algo 'MXFP8' is not modelled",
        ),
    ):
        with pytest.raises(InvalidArgumentError, match=match):
            hf_config._from_dict({**base, **change}, "v4", "v4", "v4", None)
    no_ratios = {k: v for k, v in base.items() if k != "compress_ratios"}
    with pytest.raises(InvalidArgumentError, match="compress_ratios"):
        hf_config._from_dict(no_ratios, "v4", "v4", "v4", None)
    with pytest.raises(InvalidArgumentError, match="hybrid_kv_cache_manager"):
        kv_layout(m, 16, hybrid_kv_cache_manager="off")
    with pytest.raises(InvalidArgumentError, match="block_size 32"):
        kv_layout(m, 32)


def _gemma4_text(**changes):
    """A small Gemma 4 text config (six layers: five sliding, one global) with `changes`."""
    text = {
        "model_type": "gemma4_text",
        "num_hidden_layers": 6,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "num_global_key_value_heads": 2,
        "attention_k_eq_v": True,
        "head_dim": 32,
        "global_head_dim": 64,
        "vocab_size": 100,
        "sliding_window": 512,
        "hidden_size_per_layer_input": 0,
        "num_kv_shared_layers": 0,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
    }
    text.update(changes)
    return {"model_type": "gemma4", "text_config": text}


def test_gemma_4_unmodelled_layers_are_refused_by_name():
    """A layer type Gemma 4 does not have, and a KV-shared layer with no earlier layer of its type to read,
    are refused, naming them."""
    chunked = _gemma4_text(layer_types=["sliding_attention"] * 5 + ["chunked_attention"])
    with pytest.raises(InvalidArgumentError, match="'chunked_attention' is not"):
        hf_config._from_dict(chunked, "g4", "g4", "g4", None)
    lone = _gemma4_text(num_kv_shared_layers=1)  # the one global layer is the last: nothing to read
    with pytest.raises(InvalidArgumentError, match="no earlier 'full_attention' layer"):
        hf_config._from_dict(lone, "g4", "g4", "g4", None)
    with pytest.raises(InvalidArgumentError, match="'layer_types' must list the 6 layers"):
        hf_config._from_dict(_gemma4_text(layer_types=None), "g4", "g4", "g4", None)


def test_gemma_4_e4b_per_layer_embeddings_and_shared_kv_by_hand():
    """Gemma 4 E4B (config.json text_config): per-layer embeddings add a table of vocab 262,144 x 42 layers
    x 256, the projection 2560 -> 42 x 256 and per layer a gate (2560 -> 256), a projection (256 -> 2560)
    and a 2560-wide norm; the last 18 layers keep no KV: 20 sliding layers of 2 x 2 x 256 x 2 B and 4 global
    layers of 2 x 2 x 512 x 2 B a token (attention_k_eq_v off: the global layers keep num_key_value_heads)."""
    m = models.get("gemma-4-e4b")
    assert sum(lay.kind == "shared" for lay in m.layers) == 18
    assert m.kv_bytes_per_token == 20 * 2 * 2 * 256 * 2 + 4 * 2 * 2 * 512 * 2
    published = json.loads((HF / "gemma-4-e4b.json").read_text())
    published["text_config"]["hidden_size_per_layer_input"] = 0
    without = hf_config._from_dict(published, "x", "x", "x", None)
    ple = 262144 * 42 * 256 + 2560 * 42 * 256 + 42 * (2 * 2560 * 256 + 2560) + 256
    assert m.num_params - without.num_params == ple
    # The model card's 4.5B "effective" parameters: everything but the per-layer table (and the encoders).
    assert (m.num_params - 262144 * 42 * 256) / 1e9 == pytest.approx(4.5, rel=0.035)
    from kvsim.model.layers import kv_layout

    sizes = {(g.kind, g.block_size) for g in kv_layout(m, 16).groups}
    assert sizes == {("sliding_window", 32), ("full", 16)}  # the sliding page is half the global one


def test_gemma_4_kv_shared_layers_keep_no_cache_and_double_their_mlp():
    """vLLM's gemma4.py: the last `num_kv_shared_layers` read the last earlier layer of their type (no cache
    of their own), have only q and o projections and q_norm, and under `use_double_wide_mlp` an MLP twice
    as wide; without `attention_k_eq_v` a global layer keeps `num_key_value_heads`."""
    types = ["sliding_attention", "full_attention"] * 3
    base = hf_config._from_dict(_gemma4_text(layer_types=types), "a", "a", "a", None)
    m = hf_config._from_dict(
        _gemma4_text(layer_types=types, num_kv_shared_layers=2, use_double_wide_mlp=True), "b", "b", "b", None
    )
    assert [lay.kind for lay in m.layers] == ["sliding_window", "full"] * 2 + ["shared"] * 2
    # bf16 by default here (float16): sliding 2 x 4 x 32 x 2 B, global 2 x 2 x 64 x 2 B, two of each kept.
    assert m.kv_bytes_per_token == 2 * (2 * 4 * 32 * 2) + 2 * (2 * 2 * 64 * 2)
    # The two shared layers lose k, v and k_norm and gain a second MLP's width (3 x 128 x 64 each).
    kv_weights = 64 * (2 * 4 * 32 + 2 * 2 * 64) + 32 + 64
    assert m.num_params - base.num_params == 2 * 3 * 128 * 64 - kv_weights
    plain = hf_config._from_dict(_gemma4_text(layer_types=types, attention_k_eq_v=False), "c", "c", "c", None)
    assert {lay.num_kv_heads for lay in plain.layers} == {4}
    assert {lay.head_dim for lay in plain.layers if lay.kind == "full"} == {64}


def test_gemma_4_31b_kv_bytes_per_group_by_hand():
    """Gemma 4 31B (config.json text_config), bf16 KV, block 16, one GPU:
    - a sliding layer: num_key_value_heads 16 x head_dim 256 x 2 (K and V) x 2 B = 16,384 B a token, kept for
      the last sliding_window 1,024 tokens; a block of 16 tokens: 262,144 B;
    - a global layer: num_global_key_value_heads 4 x global_head_dim 512 x 2 x 2 B = 8,192 B a token (K is
      loaded into V's slot under attention_k_eq_v, but the layer still caches V), every token;
    vLLM's unify_kv_cache_spec_page_size grows the global layers' block to 32 tokens (262,144 B too); the 50
    sliding layers form 5 groups of 10, the 10 global layers one: a block id = 10 x 262,144 B."""
    m = models.get("gemma-4-31b")
    cfg = _text(json.loads((HF / "gemma-4-31b.json").read_text()))
    sliding = cfg["num_key_value_heads"] * cfg["head_dim"] * 2 * 2
    glob = cfg["num_global_key_value_heads"] * cfg["global_head_dim"] * 2 * 2
    assert (sliding, glob) == (16_384, 8_192)
    n_full = cfg["layer_types"].count("full_attention")
    assert m.kv_bytes_per_token == (60 - n_full) * sliding + n_full * glob
    from kvsim.model.layers import kv_layout

    layout = kv_layout(m, 16)
    groups = [(g.kind, g.window, g.block_size, g.page_bytes, len(g.layer_ids)) for g in layout.groups]
    assert groups == [("sliding_window", 1024, 16, 16 * sliding, 10)] * 5 + [("full", 0, 32, 32 * glob, 10)]
    assert layout.bytes_per_block == 10 * 16 * sliding
    for g in layout.groups:
        assert g.bytes_per_block == 10 * g.block_size * (sliding if g.kind == "sliding_window" else glob)
    assert all(cfg["layer_types"][i] == "full_attention" for i in layout.groups[-1].layer_ids)


@pytest.mark.parametrize(
    ("model", "sliding_block", "full_block", "blocks"),
    [
        ("gemma-4-31b", 64, 128, 13_162),
        ("gemma-4-26b-a4b", 64, 128, 62_034),
        ("gemma-4-e4b", 128, 64, 222_333),
    ],
)
def test_gemma_4_with_an_fp8_cache_on_hopper_takes_flashattention_4s_64_token_pages(
    model, sliding_block, full_block, blocks
):
    """vLLM 0.33.0's model head size is the widest layer's, 512 (the global layers'); FlashAttention 3 takes
    up to 256 on 9.x, so vLLM upgrades to FlashAttention 4, whose fp8 kernel reads 64-token pages: the cache
    block is 64 where it was 16. The sliding layers take it (31B: 16 kv x 256 x 2 x 1 B = 8,192 B a token, a
    page of 524,288 B); the global ones (4 kv x 512 x 2 x 1 B = 4,096 B) unify to 128 tokens for the same
    page. E4B's are the other way (2 kv x 256 x 2 = 1,024 B sliding, 2 kv x 512 x 2 = 2,048 B global): the
    global layers keep 64, the sliding ones grow to 128. The same bytes a token, 4x larger blocks. (vLLM 0.33.0's profiled pool: `vllm-0.33`.)"""
    fp8 = kvsim.SimConfig.preset("vllm-0.33", model=model, gpu="h200", kv_cache_dtype="fp8")
    assert fp8.block_size == 64
    layout = fp8.pool.layout
    assert {(g.kind, g.block_size) for g in layout.groups} == {
        ("sliding_window", sliding_block),
        ("full", full_block),
    }
    assert fp8.num_blocks == blocks
    bf16 = kvsim.SimConfig.preset(
        "vllm-0.33", model=model, gpu="h200"
    )  # (bf16: FlashAttention 3 takes it at 16 as before)
    assert bf16.block_size == 16
    b200 = kvsim.SimConfig.preset(
        "vllm-0.33", model=model, gpu="b200", kv_cache_dtype="fp8"
    )  # (the page rule is 9.x's)
    assert b200.block_size == 16
    if model == "gemma-4-31b":
        assert layout.bytes_per_block == 10 * 64 * 8_192 == 5_242_880
        assert fp8.pool.figures.kv_cache_tokens == 1_010_940


def test_gemma_4_fp8_on_hopper_refuses_a_block_its_global_layers_cannot_take():
    """A block of 16 makes the 31B's global layers' blocks 32 tokens: FlashAttention 4's fp8 kernel on 9.x
    has no kernel block for it (64 only). A block of 32 makes them 64: taken."""
    with pytest.raises(
        InvalidArgumentError, match=r"512-wide layers .* blocks of 32 tokens, not a multiple of 64"
    ):
        kvsim.SimConfig(model="gemma-4-31b", gpu="h200", kv_cache_dtype="fp8", block_size=16)
    ok = kvsim.SimConfig(model="gemma-4-31b", gpu="h200", kv_cache_dtype="fp8", block_size=32)
    assert {g.block_size for g in ok.pool.layout.groups} == {32, 64}
    with pytest.raises(InvalidArgumentError, match="not a multiple of 64"):
        kvsim.SimConfig(model="gemma-4-e4b", gpu="h200", kv_cache_dtype="fp8_e4m3", block_size=32)


def test_gemma_4_26b_a4b_counts_the_moe_block_beside_the_mlp():
    """Gemma 4 26B A4B: on each of 30 layers a dense gated MLP (3 x 2112 x 2816) and beside it 128 experts of
    3 x 704 x 2816 (8 a token) with a 128 x 2816 router: experts 30 x 128 x 3 x 704 x 2816."""
    m = models.get("gemma-4-26b-a4b")
    assert (m.num_experts, m.experts_per_token, m.expert_ffn) == (128, 8, 704)
    experts = 30 * 128 * 3 * 704 * 2816
    assert m.num_params - m.num_active_params == experts - experts * 8 // 128
    published = json.loads((HF / "gemma-4-26b-a4b.json").read_text())
    published["text_config"]["num_experts"] = None
    no_moe = hf_config._from_dict(published, "x", "x", "x", None)
    # Without the MoE block: the experts, the router (matrix, scale, per-expert scale) and three norms go.
    assert m.num_params - no_moe.num_params == experts + 30 * (128 * 2816 + 2816 + 128 + 3 * 2816)


def test_gemma_4_runs_as_vllm_serves_it(capsys):
    """`kvsim run --model gemma-4-... --gpu h100-80gb` prints vLLM's four start-up figures (the 26B A4B at its
    262,144-token context; the 31B's 57 GiB of bf16 weights leave room for 8,192 tokens, and at its own
    context the run is refused with vLLM's message and numbers). (vLLM 0.33.0's profiled pool: `vllm-0.33`.)"""
    from kvsim.cli import main

    for model, extra in (("gemma-4-26b-a4b", []), ("gemma-4-31b", ["--max-model-len", "8192"])):
        argv = [
            "run",
            "--preset",
            "vllm-0.33",
            "--model",
            model,
            "--gpu",
            "h100-80gb",
            "--requests",
            "10",
            *extra,
        ]
        assert main(argv) == 0
        out = capsys.readouterr().out
        cfg = kvsim.SimConfig.preset(
            "vllm-0.33", model=model, gpu="h100-80gb", **({"max_model_len": 8192} if extra else {})
        )
        lines = cfg.pool.figures.lines()
        assert [f"vllm: {line}" for line in lines] == [x for x in out.splitlines() if x.startswith("vllm: ")]
        assert len(lines) == 3  # the KV cache size and the concurrency on one line, as 0.33.0 logs them
        assert lines[0].startswith("Model loading took ")
        assert len(cfg.pool.layout.groups) == 6
    assert main(["run", "--preset", "vllm-0.33", "--model", "gemma-4-31b", "--gpu", "h100-80gb"]) == 2
    assert "estimated maximum model length" in capsys.readouterr().err


def test_quantization_flag_keeps_a_hybrid_presets_layers_fields():
    """--quantization fp8 re-prices a preset from its kept config fields: Gemma 3's sliding window and
    Qwen3-Next's delta-net fields are among them (the window was lost before, and the rebuild refused)."""
    for name in ("gemma-3-27b", "qwen3-next-80b-a3b"):
        dense = models.get(name)
        fp8 = models.with_quantization(dense, "fp8")
        assert fp8.num_params == dense.num_params
        assert fp8.weight_bytes < 0.6 * dense.param_bytes


def test_qwen3_5_keeps_its_recurrent_state_in_mamba_ssm_dtype():
    """Qwen3.5 (a `text_config` with `linear_attention` layer types) keeps the delta net's temporal state
    in its config's `mamba_ssm_dtype` (float32: 4 bytes), the convolution in the model's dtype; without the
    field, Qwen3-Next's rule (the model's dtype) holds."""
    text = {
        "model_type": "qwen3_5_moe_text",
        "num_hidden_layers": 4,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "vocab_size": 1000,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "attn_output_gate": True,
        "dtype": "bfloat16",
        "mamba_ssm_dtype": "float32",
    }
    m = hf_config._from_dict({"model_type": "qwen3_5_moe", "text_config": text}, "q", "q", "q", None)
    st = m.layers[0].state
    assert st is not None
    assert st.page_bytes(1, 16) == 8192 * 3 * 2 + 32 * 128 * 128 * 4
    plain = hf_config._from_dict({**text, "mamba_ssm_dtype": None}, "q", "q", "q", None)
    st2 = plain.layers[0].state
    assert st2 is not None
    assert st2.page_bytes(1, 16) == 8192 * 3 * 2 + 32 * 128 * 128 * 2
    # One gated-attention layer: q (and its gate) 2 x 4096, k and v 512 each, o 4096, from d 2048.
    delta = 2048 * (2 * 2048 + 2 * 4096) + 2048 * 64 + 4096 * 2048
    attn = 2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048
    dense = 3 * 2048 * 2048 * 4 * 4  # the default MLP width 4 x hidden, 4 layers
    assert m.num_params - plain.num_params == 0
    matrices = m.num_params - 2 * 1000 * 2048 - dense
    assert matrices - 3 * delta - attn == 3 * (8192 * 4 + 32 + 32 + 128) + 2 * 256 + 9 * 2048


def test_gemma_3_non_embedding_parameters_are_the_technical_reports():
    """Gemma 3 technical report (arXiv 2503.19786, Table 1): 12B has 10,759M non-embedding parameters and 27B
    25,600M (a 417M vision encoder apart); kvsim's count less the tied embeddings (vocabulary x width)."""
    for name, width, published in (("gemma-3-12b", 3840, 10_759e6), ("gemma-3-27b", 5376, 25_600e6)):
        m = models.get(name)
        assert m.num_params - 262208 * width == pytest.approx(published, rel=2e-4)


def test_gemma_3_12b_kv_bytes_by_hand():
    """Gemma 3 12B: 48 layers of 8 KV heads x 256, bf16: 2 x 8 x 256 x 2 B = 8,192 B a layer, 393,216 B a
    token if every layer kept it; 40 layers keep only the last 1,024 tokens, 8 keep every token."""
    m = models.get("gemma-3-12b")
    assert m.kv_bytes_per_token == 48 * 2 * 8 * 256 * 2
    assert sum(lay.kind == "full" for lay in m.layers) == 8
    assert {lay.window for lay in m.layers if lay.kind == "sliding_window"} == {1024}


def test_llama_4_maverick_alternates_moe_and_dense_layers():
    """Maverick (interleave_moe_layer_step 2): layers 1, 3, ..., 47 hold 128 experts of 8192 plus a shared
    expert of 8192, the others a dense MLP of 16384; its attention is Scout's (12 full layers, 36 in
    8,192-token chunks: 2 x 8 x 128 x 2 B = 4,096 B a layer a token if every layer kept every token)."""
    m = models.get("llama-4-maverick")
    h = 5120
    attn = h * 40 * 128 + 2 * h * 8 * 128 + 40 * 128 * h
    moe = 128 * 3 * h * 8192 + 3 * h * 8192 + 128 * h
    dense = 3 * h * 16384
    embeds = 2 * 202048 * h
    norms = (2 * 48 + 1) * h
    assert m.num_params == 48 * attn + 24 * moe + 24 * dense + embeds + norms
    assert m.num_active_params == m.num_params - 24 * 127 * 3 * h * 8192
    assert sum(lay.kind == "full" for lay in m.layers) == 12
    assert {lay.window for lay in m.layers if lay.kind == "chunked_local"} == {8192}
    assert m.kv_bytes_per_token == 48 * 4096


def test_kimi_linear_state_kv_and_weights_by_hand():
    """Kimi-Linear-48B-A3B: 7 MLA layers keep one latent per token, (512 + 64) x 2 B = 1,152 B, 8,064 B a
    token; 20 KDA layers keep per request three short-convolution states, 3 x 32 x 128 channels x (4 - 1) x
    2 B, and a float32 recurrent state, 32 heads x 128 x 128 x 4 B (vLLM's kda_state_shape / kda_state_dtype):
    73,728 + 2,097,152 = 2,170,880 B; vLLM raises the attention block to 128 x ceil(2,170,880 / (128 x
    1,152)) = 1,920 tokens (an MLA model's hybrid block is a multiple of 128, `_align_hybrid_block_size`;
    kvsim took 16's, 1,888). Weights: KDA's q, k, v, o, the two gates' low-rank pairs, b_proj; MLA without a q
    low-rank; 256 experts of 1024 and a shared expert on 26 layers, a dense MLP of 9216 on the first."""
    from kvsim.model.layers import kv_layout

    m = models.get("kimi-linear-48b-a3b")
    assert [lay.kind for lay in m.layers].count("mamba") == 20
    assert m.kv_bytes_per_token == 7 * (512 + 64) * 2 == 8064
    state = 3 * 32 * 128 * 3 * 2 + 32 * 128 * 128 * 4
    st = m.layers[0].state
    assert st is not None
    assert st.page_bytes(1, 16) == state == 2_170_880
    assert kv_layout(m, 16, enable_prefix_caching=False).block_size == 128 * -(-state // (128 * 1152)) == 1920
    h, p, d = 2304, 32 * 128, 128
    kda = 3 * h * p + 2 * h * d + 2 * d * p + h * 32 + p * h + 3 * p * 4 + p + 32 + d
    mla = h * 32 * 192 + h * 576 + 512 * 32 * 256 + 32 * 128 * h + 512
    moe = 256 * 3 * h * 1024 + 3 * h * 1024 + 256 * h + 256  # the router's e_score_correction_bias
    dense = 3 * h * 9216
    embeds = 2 * 163840 * h
    norms = (2 * 27 + 1) * h
    assert m.num_params == 20 * kda + 7 * mla + 26 * moe + dense + embeds + norms
    # The checkpoint's own count (moonshotai/Kimi-Linear-48B-A3B-Instruct's safetensors index, as
    # pmains/kimi-linear-48b-ssd-streaming's benchmarks/results/phase-02-static-inventory.json sums it:
    # router 15,342,080 with the 26 x 256 biases). kvsim left the bias out (KimiMoE builds it on every MoE
    # layer, not only DeepSeek's noaux_tc): 49,122,675,072.
    assert m.num_params == 49_122_681_728
    active = m.num_params - 26 * 248 * 3 * h * 1024
    assert m.num_active_params == active
    assert (active - embeds) / 1e9 == pytest.approx(3, rel=0.1)  # the card's "3B activated"
    assert m.max_model_len == 1048576


def test_qwen3_6_state_in_float32_and_weights_by_hand():
    """Qwen3.6-35B-A3B (Qwen3.5's architecture): a delta-net layer keeps 8,192 conv channels x 3 x 2 B and a
    float32 recurrent state, 32 x 128 x 128 x 4 B: 2,146,304 B; a gated-attention layer 2 x 2 x 256 x 2 B =
    2,048 B a token, so vLLM's block is 16 x ceil(2,146,304 / (16 x 2,048)) = 1,056 tokens. Weights: as
    Qwen3-Next's mixer and gated attention, 256 experts of 512 and a shared expert on every layer."""
    from kvsim.model.layers import kv_layout

    m = models.get("qwen3.6-35b-a3b")
    st = m.layers[0].state
    assert st is not None
    state = 8192 * 3 * 2 + 32 * 128 * 128 * 4
    assert st.page_bytes(1, 16) == state == 2_146_304
    assert m.kv_bytes_per_token == 10 * 2048
    assert kv_layout(m, 16, enable_prefix_caching=False).block_size == 16 * -(-state // (16 * 2048)) == 1056
    h = 2048
    delta = h * (2 * 2048 + 2 * 4096) + h * 64 + 4096 * h + 8192 * 4 + 32 + 32 + 128
    attn = h * 16 * 256 * 2 + 2 * h * 2 * 256 + 16 * 256 * h + 2 * 256
    moe = 256 * 3 * h * 512 + 3 * h * 512 + 256 * h + h
    total = 30 * delta + 10 * attn + 40 * moe + 2 * 248320 * h + (2 * 40 + 1) * h
    assert m.num_params == total


@pytest.mark.parametrize(
    "pattern",
    [
        "model.language_model.layers.*.self_attn*",  # NVIDIA's NVFP4 Gemma 4 spelling
        "language_model.model.layers.*.self_attn",  # LLaVA-style wrappers
        "model.layers.*.self_attn",  # a text model's own
    ],
)
def test_an_ignore_list_in_a_multimodal_wrappers_spelling_keeps_attention_unquantized(tmp_path, pattern):
    """A multimodal checkpoint names its text model's modules under `model.language_model.` (or
    `language_model.model.`): attention its ignore list names stays in bf16 whichever spelling it uses."""
    base = json.loads((HF / "llama-3.1-8b.json").read_text())
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}
    plain, ignoring = (
        {**base, "quantization_config": qc},
        {
            **base,
            "quantization_config": {**qc, "exclude_modules": ["lm_head", pattern]},
        },
    )
    (tmp_path / "a.json").write_text(json.dumps(plain))
    (tmp_path / "b.json").write_text(json.dumps(ignoring))
    a, b = models.from_hf_config(tmp_path / "a.json"), models.from_hf_config(tmp_path / "b.json")
    h = 4096
    attn = 32 * (2 * h * h + 2 * h * 1024)  # q, o: h x h; k, v: h x 1024
    # attention at 2 bytes a weight rather than NVFP4's 4.5 bits (4 bits + an fp8 scale per 16)
    assert b.weight_bytes - a.weight_bytes == pytest.approx(attn * (2 - 4.5 / 8), rel=1e-3)


def test_kimi_k3_by_hand():
    """Kimi-K3 (moonshotai/Kimi-K3's config.json) as vLLM 0.33.0 builds it (models/kimi_k3/nvidia/model.py,
    kda.py, mla.py): 69 KDA layers with the full-rank gate (q, k, v, g of 96 x 128 on d 7168, f_a whole on
    every GPU, b; f_b; o; three float32 convolutions of 4, dt_bias, A_log, o_norm), 24 MLA layers (q_a 1536
    and kv_a 576 whole on every GPU, the output gate split; q_b, kv_b, o; two norms), 92 latent MoE layers (896
    experts of 3072 on a 3584 latent between a replicated down and up projection, its norm; two shared
    experts of 3072 on d; the router and its bias), a dense first layer of 33792, the attention residuals'
    two norms and two 1 x d projections a layer and the final pair: 2,779,484,476,000 parameters, NVIDIA's
    2.8T; 104.19B active without the input embedding (its 104B). KV: the 24 MLA layers' 576-wide latent, 27,648 B
    a token in bf16; a KDA state of 3 x 12,288 x 3 x 2 B conv and 96 x 128 x 128 x 4 B, with a FlashKDA
    prefill checkpoint block on Hopper / Blackwell (3 blocks a request in align mode, 2 on an A100)."""
    from kvsim.model.layers import kv_layout
    from kvsim.model.weights import model_breakdown, weight_groups

    m = models.get("kimi-k3")
    h, p, d, lat, e = 7168, 96 * 128, 128, 3584, 3072
    kda = 4 * p * h + 96 * h + d * h + p * d + h * p + 3 * p * 4 + p + 96 + d
    mla = (1536 + 576 + 96 * 128) * h + 96 * 192 * 1536 + 96 * 256 * 512 + h * 96 * 128 + 1536 + 512
    moe = 896 * 3 * lat * e + 2 * lat * h + lat + 3 * h * 2 * e + 896 * h + 896
    dense = 3 * h * 33792
    embeds = 2 * 163840 * h
    norms = (2 * 93 + 1) * h * 2 + (
        2 * 93 + 1
    ) * h  # two norms a layer, two residual norms, the res projections
    assert m.num_params == 69 * kda + 24 * mla + 92 * moe + dense + embeds + norms == 2_779_484_476_000
    active = m.num_params - 92 * (896 - 16) * 3 * lat * e
    assert m.num_active_params == active
    assert round((active - embeds // 2) / 1e9) == 104  # without the input embedding (lm_head computed)
    assert m.kv_bytes_per_token == 24 * 576 * 2
    st = m.layers[0].state
    assert st is not None
    assert st.page_bytes(1, 16) == 3 * p * 3 * 2 + 96 * d * d * 4
    assert st.checkpoint_blocks == 1
    for arch, blocks in (("sm_90", 3), ("sm_100", 3), ("sm_80", 2)):
        mamba = [g for g in kv_layout(m, 16, gpu_arch=arch).groups if g.kind == "mamba"]
        assert {g.max_blocks_per_request(1, 1, True) for g in mamba} == {blocks}, arch
    # MXFP4 (compressed-tensors' mxfp4-pack-quantized): the routed experts and the latent projections; the
    # ignore list keeps attention, shared experts, the dense MLP and lm_head in bf16.
    assert m.quantization == "compressed-tensors: mlp mxfp4, experts mxfp4"
    groups = weight_groups(m)
    experts = 92 * 896 * 3 * lat * e
    assert groups["experts"].bytes == experts // 2 + experts // 32
    assert groups["attn"].bytes == 2 * groups["attn"].params
    b = model_breakdown(m)[0]
    latent = [mat for mat in b.matrices["mlp"] if "routed_expert" in mat.module]
    assert [mat.whole for mat in latent] == [True, True]
    assert m.uncounted == ("vision: kvsim does not count a untyped vision tower under kimi_k3",)


@pytest.mark.parametrize(
    ("field", "value"),
    [("mla_use_output_gate", True), ("routed_expert_hidden_size", 1024), ("attn_res_block_size", 12)],
)
def test_kimi_k3_fields_without_its_full_rank_gate_are_refused_by_name(field, value):
    """Kimi-K3's output gate, latent experts and attention residuals are read on its path only (a
    `use_full_rank_gate` config): on a Kimi-Linear config kvsim ignored them, where vLLM builds them."""
    cfg = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
    with pytest.raises(InvalidArgumentError, match=f"field '{field}' \\(Kimi-K3's\\)"):
        hf_config._from_dict({**cfg, field: value}, "k", "k", "k", None)


@pytest.mark.parametrize("value", [[], "", {}, "false", 1])
def test_kimi_full_rank_gate_must_be_true_or_false(value):
    """`use_full_rank_gate` decides Kimi-K3's layer: `[]` (false by its truth) was read as a full-rank gate
    (an adversarial pass); a value not true or false is refused by name."""
    cfg = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())
    lac = {**cfg["linear_attn_config"], "use_full_rank_gate": value}
    with pytest.raises(InvalidArgumentError, match=r"use_full_rank_gate' .* must be true or false"):
        hf_config._from_dict({**cfg, "linear_attn_config": lac}, "k", "k", "k", None)


def test_a_config_json_python_cannot_read_and_a_changed_hf_quant_config(tmp_path):
    """An integer past Python's 4,300 digits, or arrays nested too deep, raised a bare ValueError or
    RecursionError; an hf_quant_config.json changed beside an unchanged config.json was not read again
    (the cache keyed config.json alone). Both found by an adversarial pass."""
    cfg = json.loads((HF / "qwen3-8b.json").read_text())
    path = tmp_path / "config.json"
    for text in ('{"pretraining_tp": ' + "1" * 5000 + "}", "[" * 100_000 + "]" * 100_000):
        path.write_text(text)
        hf_config._HF_CACHE.clear()
        with pytest.raises(InvalidArgumentError, match="is not a JSON config"):
            models.from_hf_config(path)
    path.write_text(json.dumps(cfg))
    side = tmp_path / "hf_quant_config.json"
    side.write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}}))
    assert "fp8" in models.from_hf_config(path).quantization
    side.unlink()
    assert models.from_hf_config(path).quantization == ""


def test_heads_zero_wide_name_the_model_and_its_fields():
    """hidden_size // num_attention_heads of 0 said "head_dim 0 must be at least 1", naming neither the model
    nor the fields (an adversarial pass)."""
    cfg = json.loads((HF / "llama-3.1-8b.json").read_text())
    with pytest.raises(
        InvalidArgumentError, match=r"model 'x': hidden_size 4096 over num_attention_heads 8192"
    ):
        hf_config._from_dict({**cfg, "num_attention_heads": 8192}, "x", "x", "x", None)


def test_an_error_in_an_hf_quant_config_json_says_which_file_holds_it(tmp_path):
    """The fields of an hf_quant_config.json beside a config.json are read as its `quantization_config`:
    an error naming `quantization_config.*` now says which file holds them (the user's config.json has no
    such field; an adversarial pass)."""
    cfg = json.loads((HF / "qwen3-8b.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    side = {
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": "FP8", "exclude_modules": "mtp*"},
    }
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(side))
    hf_config._HF_CACHE.clear()
    with pytest.raises(InvalidArgumentError, match=r"read from .*hf_quant_config\.json"):
        models.from_hf_config(tmp_path / "config.json")
