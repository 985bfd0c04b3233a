"""A model's layers and the KV-cache groups vLLM forms from them (DESIGN.md §Hybrid attention):
`kvsim.model.layers.kv_layout` against vLLM 0.33.0's own `get_kv_cache_groups` on real models' layer
layouts (recorded by `scripts/vllm_hybrid_golden.py` into tests/data/vllm_hybrid/layouts.json), and the
layer kinds `from_hf_config` reads from a config.json, family by family."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model.hf_layers import layers_from_hf_config
from kvsim.model.layers import Layer, MambaState, kv_layout
from kvsim.model.models import Model

LAYOUTS = json.loads((Path(__file__).parent / "data" / "vllm_hybrid" / "layouts.json").read_text())
KIND = {
    "FullAttentionSpec": "full",
    "SlidingWindowSpec": "sliding_window",
    "ChunkedLocalAttentionSpec": "chunked_local",
}


def model_of(layers: list[list]) -> Model:
    """A bf16 model with the recorded layers (kind, window, KV heads, head width)."""
    specs = tuple(
        Layer(kind, window if kind != "full" else 0, num_kv_heads=heads, head_dim=head_dim)
        for kind, window, heads, head_dim in layers
    )
    return Model(
        name="recorded",
        num_layers=len(specs),
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=specs[0].num_kv_heads or 8,
        head_dim=specs[0].head_dim or 128,
        intermediate_size=8192,
        vocab_size=1000,
        num_params=10**9,
        num_active_params=10**9,
        max_model_len=131072,
        weight_dtype="bf16",
        kv_dtype="bf16",
        layers=specs,
    )


@pytest.mark.parametrize("recorded", LAYOUTS, ids=[r["name"] for r in LAYOUTS])
def test_groups_are_vllms(recorded):
    m = model_of(recorded["layers"])
    layout = kv_layout(m, 16, hybrid_kv_cache_manager="on", max_model_len=recorded["max_model_len"])
    ours = [(g.kind, g.block_size, list(g.layer_ids)) for g in layout.groups]
    theirs = [(KIND[g["kind"]], g["block_size"], g["layers"]) for g in recorded["groups"]]
    assert ours == theirs
    assert layout.bytes_per_block == recorded["bytes_per_block"]
    concurrency = layout.max_concurrency(10_000, recorded["max_model_len"], 2 * 8192)
    assert concurrency == pytest.approx(recorded["max_concurrency_10000_blocks"], rel=1e-12)


def test_gpt_oss_keeps_a_window_on_half_its_layers():
    """gpt-oss-120b at 128K context: the sliding-window half holds ceil((127 + 2 × 8192) / 16) + 1 = 1,033
    blocks a request, the full half 8,192: vLLM's concurrency is 10,000 / 9,225, not 10,000 / 8,192 / 2."""
    rec = next(r for r in LAYOUTS if r["name"] == "gpt-oss-120b")
    layout = kv_layout(model_of(rec["layers"]), 16, max_model_len=131072)
    assert layout.blocks_per_request(131072, 16384) == 8192 + 1032 + 1
    off = kv_layout(model_of(rec["layers"]), 16, hybrid_kv_cache_manager="off", max_model_len=131072)
    assert off.promoted
    assert len(off.groups) == 1
    assert off.bytes_per_block == 2 * layout.bytes_per_block  # one block id across all 36 layers


def test_chunked_local_attention_keeps_only_its_chunk_by_default():
    """vLLM runs the hybrid manager for chunked local attention by default
    (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 1 in 0.19.0 and 0.33.0; Llama-4-Scout's
    0.19.0 start-up log counts its blocks): Llama 4's local layers keep their chunk, `off` keeps every
    token."""
    rec = next(r for r in LAYOUTS if r["name"] == "llama-4-scout")
    auto = kv_layout(model_of(rec["layers"]), 16)
    assert not auto.promoted
    assert [g.kind for g in auto.groups] == ["chunked_local"] * 3 + ["full"]
    assert kv_layout(model_of(rec["layers"]), 16, hybrid_kv_cache_manager="on") == auto
    off = kv_layout(model_of(rec["layers"]), 16, hybrid_kv_cache_manager="off")
    assert off.promoted
    assert [g.kind for g in off.groups] == ["full"]
    assert "keep every token" in off.notes[0]


def test_a_mamba_state_raises_the_attention_block():
    """Qwen3-Next-80B-A3B's gated delta net (16 key heads, 32 value heads of 128, conv kernel 4) in bf16:
    a 1,097,728-byte state (vLLM's gated_delta_net_state_shape: conv (8192, 3), temporal (32, 128, 128));
    its 2 KV heads of 256 make a 2,048-byte attention page per token, so the attention block grows to
    16 × ceil(1,097,728 / (16 × 2,048)) = 544 tokens, vLLM's "Setting attention block size to 544 tokens"
    for this model."""
    gdn = MambaState(
        conv_channels=128 * 16 * 2 + 128 * 32, conv_width=3, ssm_heads=32, ssm_per_head=128 * 128
    )
    assert gdn.page_bytes(1, 16) == 1_097_728
    layers = tuple(Layer("full") if (i + 1) % 4 == 0 else Layer("mamba", state=gdn) for i in range(48))
    m = dataclasses.replace(
        model_of([["full", 0, 2, 256]]), num_layers=48, layers=layers, num_kv_heads=2, head_dim=256
    )
    layout = kv_layout(m, 16, enable_prefix_caching=False)
    assert layout.block_size == 544
    assert [g.kind for g in layout.groups] == ["mamba"] * 3 + ["full"]
    assert {g.page_bytes for g in layout.groups} == {544 * 2048}
    # Prefix caching on (vLLM's default): mamba_cache_mode 'align', a state per 544-token block.
    # (0.33.0's default block of 16 offered, which `kv_layout(m, 16)` takes; 0.34.0's 64: test_block_default.py)
    cfg = kvsim.SimConfig(model=m, num_blocks=100, default_block_size=16)
    assert cfg.pool.layout.mamba_align
    assert [(g.kind, g.block_size) for g in cfg.kv_groups] == [("mamba", 544)] * 3 + [("full", 544)]
    off = kvsim.SimConfig(model=m, num_blocks=100, enable_prefix_caching=False, default_block_size=16)
    assert [g.block_size for g in off.kv_groups] == [m.max_model_len] * 3 + [544]
    with pytest.raises(InvalidArgumentError, match="need chunked prefill"):
        kvsim.SimConfig(model=m, num_blocks=100, chunked_prefill=False)
    with pytest.raises(InvalidArgumentError, match="hybrid KV-cache manager"):
        kv_layout(m, 16, hybrid_kv_cache_manager="off")


@pytest.mark.parametrize(
    ("gpu", "backend", "flashinfer"),
    [
        ("h200", "auto", True),  # Hopper: FlashInfer's GDN prefill
        ("h20", "auto", True),
        ("b200", "auto", True),  # Blackwell (10.0) with 128-wide keys and vLLM 0.33's CUDA 13 build
        ("rtx-pro-6000", "auto", True),  # 12.0
        ("a100-80gb", "auto", False),  # Ampere: Triton's
        ("l40s", "auto", False),  # Ada: Triton's
        ("mi300x", "auto", False),  # ROCm: Triton's (or AITER's FlyDSL, which exports no checkpoint either)
        ("h200", "triton", False),
        ("a100-80gb", "flashinfer", False),  # vLLM falls back to Triton's where FlashInfer's does not run
        (None, "auto", True),  # no GPU: FlashInfer's, said in a note
        (None, "triton", False),
    ],
)
def test_the_gated_delta_nets_checkpoints_follow_its_prefill_kernel(gpu, backend, flashinfer):
    """vLLM 0.33.0 (`_resolve_gdn_prefill_backend`, `QwenGatedDeltaNetAttention.get_kv_cache_spec`,
    `_align_hybrid_block_size`): only FlashInfer's GDN prefill kernel exports prefill checkpoints; with it
    and prefix caching on (align mode) each state group counts a checkpoint block and the attention block
    is a multiple of 64 tokens (Qwen3-Next-80B-A3B, 4 ranks: 320 where 16-token alignment gives 272);
    without caching, one state a request and the kernel changes nothing."""
    # (131,072 tokens: four L40Ss do not hold one request of the model's 262,144; 0.33.0's default block of
    # 16 offered: under 0.34.0's 64, tests/test_block_default.py)
    kw = {"gpu": gpu, "tensor_parallel_size": 4, "max_model_len": 131072} if gpu else {"num_blocks": 1000}
    kw["default_block_size"] = 16
    cfg = kvsim.SimConfig(model="qwen3-next-80b-a3b", gdn_prefill_backend=backend, **kw)
    states = [g for g in cfg.kv_groups if g.kind == "mamba"]
    assert len(states) == 3
    block = (320 if gpu else 576) if flashinfer else (272 if gpu else 544)
    assert cfg.engine_block_size == block
    assert block % (64 if flashinfer else 16) == 0
    assert {(g.block_size, g.checkpoint_blocks) for g in states} == {(block, 1 if flashinfer else 0)}
    noted = any("FlashInfer" in n for n in cfg.pool.layout.notes)
    assert noted == (gpu is None and flashinfer)
    off = kvsim.SimConfig(
        model="qwen3-next-80b-a3b", gdn_prefill_backend=backend, enable_prefix_caching=False, **kw
    )
    assert off.engine_block_size == (272 if gpu else 544)
    assert {g.checkpoint_blocks for g in off.kv_groups if g.kind == "mamba"} == {0}


def test_the_gdn_kernel_rule_and_its_refusals():
    from kvsim.model.gpus import from_spec
    from kvsim.model.layers import gdn_flashinfer

    assert gdn_flashinfer("sm_90", 64)  # Hopper takes any key width
    assert not gdn_flashinfer("sm_100", 64)  # Blackwell needs 128-wide keys
    assert gdn_flashinfer("sm_103", 128)
    assert gdn_flashinfer("sm_121", 128)
    assert not gdn_flashinfer("sm_89", 128)
    assert not gdn_flashinfer("gfx950", 128)
    with pytest.raises(InvalidArgumentError, match="gdn_prefill_backend 'cutlass' is not one of"):
        kvsim.SimConfig(model="qwen3-next-80b-a3b", num_blocks=100, gdn_prefill_backend="cutlass")
    # A described GPU names its architecture, or leaves it unknown.
    g = from_spec({"memory": "141GiB", "bandwidth": "4.8TB/s", "tflops": 989, "arch": "sm_90"})
    assert g.arch == "sm_90"
    assert from_spec({"memory": "48GiB", "bandwidth": "864GB/s", "tflops": 362}).arch == ""
    with pytest.raises(InvalidArgumentError, match="arch 'hopper' must be sm_XY"):
        from_spec({"memory": "48GiB", "bandwidth": "864GB/s", "tflops": 362, "arch": "hopper"})


# -- config.json, family by family ---------------------------------------------------------------------
def hf(base: dict | None = None, **fields) -> dict:
    return {"hidden_size": 64, **(base or {}), **fields}


# A DeepSeek-V3.2 layer's fields (its sparse attention's indexer and the MLA ranks it reads).
DSA = {
    "model_type": "deepseek_v32",
    "index_topk": 2048,
    "index_head_dim": 128,
    "index_n_heads": 64,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
}


@pytest.mark.parametrize(
    ("cfg", "expect"),
    [
        # transformers' layer_types (gpt-oss, Gemma 3 and later checkpoints write it)
        (hf(layer_types=["sliding_attention", "full_attention"] * 2, sliding_window=128), "SFSF"),
        # gpt-oss without layer_types: vLLM's gpt_oss.py slides the even layers
        (hf(model_type="gpt_oss", sliding_window=128), "SFSF"),
        # Gemma 3's sliding_window_pattern 6: every sixth layer global (Gemma3TextConfig)
        (hf(model_type="gemma3_text", sliding_window=1024, sliding_window_pattern=2), "SFSF"),
        # Llama 4: chunked local attention on the RoPE layers (no_rope_layers 1), NoPE layers global
        (hf(model_type="llama4_text", attention_chunk_size=8192, no_rope_layers=[1, 1, 1, 0]), "CCCF"),
        (hf(model_type="llama4_text", attention_chunk_size=8192), "CCCF"),  # default interval 4
        # Qwen2/3 with use_sliding_window false (the published checkpoints): full attention
        (hf(model_type="qwen2", sliding_window=131072, use_sliding_window=False), "FFFF"),
        (hf(model_type="qwen2", sliding_window=4096, use_sliding_window=True, max_window_layers=2), "FFSS"),
        # Mistral-7B-v0.1: a model-wide sliding_window, every layer (vLLM's CacheConfig.sliding_window)
        (hf(model_type="mistral", sliding_window=4096), "SSSS"),
        (hf(model_type="mistral", sliding_window=None), "FFFF"),
        (hf(model_type="llama"), "FFFF"),
        # Cohere2 (Command R7B, Command A) and EXAONE 4 without layer_types: transformers derives them from
        # sliding_window_pattern (4 when absent), three local layers to one global; kvsim slid every layer
        (hf(model_type="cohere2", sliding_window=4096, sliding_window_pattern=4), "SSSF"),
        (hf(model_type="cohere2", sliding_window=4096), "SSSF"),
        (hf(model_type="exaone4", sliding_window=4096, sliding_window_pattern=2), "SFSF"),
    ],
)
def test_layer_kinds_from_a_config(cfg, expect):
    layers = layers_from_hf_config(cfg, 4, "test") or (Layer("full"),) * 4
    letters = {"full": "F", "sliding_window": "S", "chunked_local": "C", "mamba": "M"}
    assert "".join(letters[lay.kind] for lay in layers) == expect


def test_a_cohere_sliding_layer_keeps_one_token_more():
    """vLLM 0.33.0's commandr.py (Cohere2) and cohere2_moe.py pass `sliding_window + 1` to the attention
    layer (Cohere's window sees [pos - window, pos]), and the KV cache keeps that many; EXAONE 4 its
    window."""
    for kind in ("cohere2", "cohere2_moe"):
        types = ["sliding_attention"] * 3 + ["full_attention"]
        layers = layers_from_hf_config(hf(model_type=kind, sliding_window=4096, layer_types=types), 4, "t")
        assert [lay.window for lay in layers] == [4097, 4097, 4097, 0]
    exaone = layers_from_hf_config(hf(model_type="exaone4", sliding_window=4096), 4, "t")
    assert [lay.window for lay in exaone] == [4096, 4096, 4096, 0]
    with pytest.raises(InvalidArgumentError, match="'sliding_window_pattern' 'LLLG'"):
        layers_from_hf_config(
            hf(model_type="exaone4", sliding_window=4096, sliding_window_pattern="LLLG"), 4, "t"
        )


def test_state_layers_from_a_config():
    qwen3_next = hf(
        model_type="qwen3_next",
        full_attention_interval=4,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
    )
    layers = layers_from_hf_config(qwen3_next, 8, "test")
    assert [lay.kind for lay in layers] == ["mamba", "mamba", "mamba", "full"] * 2
    assert layers[0].state is not None
    assert layers[0].state.page_bytes(1, 16) == 1_097_728
    jamba = hf(model_type="jamba", hidden_size=4096, attn_layer_period=8, attn_layer_offset=4)
    kinds = [lay.kind for lay in layers_from_hf_config(jamba, 8, "test")]
    assert kinds == ["mamba"] * 4 + ["full"] + ["mamba"] * 3
    nemo = hf(
        model_type="nemotron_h",
        hybrid_override_pattern="M-M*",
        mamba_num_heads=128,
        mamba_head_dim=64,
        ssm_state_size=128,
        n_groups=8,
        conv_kernel=4,
    )
    kinds = [lay.kind for lay in layers_from_hf_config(nemo, 4, "test")]
    assert kinds == ["mamba", "none", "mamba", "full"]  # (the MLP block: no attention)


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        (hf(layer_types=["full_attention", "mystery"] * 2), "mystery"),
        (hf(layer_types=["full_attention"] * 3), "layer_types"),
        (hf(model_type="minimax", attn_type_list=[0, 1, 0, 1]), "attn_type_list"),
        (hf(model_type="custom", attention_chunk_size=8192), "attention_chunk_size"),
        (hf(layer_types=["sliding_attention"] * 4), "sliding_window"),
        # A pattern's period of 0 was a ZeroDivisionError; a state of size 0 or a kernel of 0 (a conv width
        # of -1) was taken; Llama 4's "0" strings were RoPE layers.
        (
            hf(model_type="jamba", attn_layer_period=0),
            "'attn_layer_period' 0 must be a whole number of at least 1",
        ),
        (hf(model_type="jamba", mamba_d_conv=0), "'mamba_d_conv' 0"),
        (hf(model_type="jamba", mamba_expand=0), "'mamba_expand' 0"),
        (
            hf(model_type="nemotron_h", hybrid_override_pattern="M-M*", mamba_num_heads=8, mamba_head_dim=0),
            "'mamba_head_dim' 0",
        ),
        (
            hf(
                model_type="nemotron_h",
                hybrid_override_pattern="M-M*",
                mamba_num_heads=8,
                mamba_head_dim=8,
                ssm_state_size=16,
                conv_kernel=0,
            ),
            "'conv_kernel' 0",
        ),
        (
            hf(model_type="gemma3_text", sliding_window=1024, sliding_window_pattern=0),
            "'sliding_window_pattern' 0",
        ),
        (
            hf(model_type="llama4_text", attention_chunk_size=8192, no_rope_layers=["1", "1", "1", "0"]),
            "'no_rope_layers' must list the 4 layers, each 1",
        ),
        (
            hf(layer_types=["chunked_attention", "full_attention"] * 2, attention_chunk_size=0),
            "'attention_chunk_size' 0",
        ),
        # Read as plain attention before, silently: per-layer blocks on a model type other than Nemotron-NAS's
        # (whose are read: tests/test_nemotron_nas.py), Falcon-H1's Mamba-2 states (a sixth of the bytes),
        # DeepSeek-V3.2's indexer keys
        (
            hf(model_type="llama", block_configs=[{"attention": {"n_heads_in_group": 8}}] * 4),
            "field 'block_configs' (per-layer blocks) is read for Nemotron-NAS only",
        ),
        (
            hf(model_type="falcon_h1", mamba_d_ssm=3072, mamba_n_heads=24),
            "field 'mamba_d_ssm' (model_type 'falcon_h1') describes state layers",
        ),
        (hf(model_type="deepseek_v3", index_topk=2048, index_head_dim=128), "field 'index_topk'"),
        # DeepSeek-V3.2 without its ranks or top-k (vLLM builds its attention and top-k buffer from them)
        (hf(DSA, q_lora_rank=None), "'q_lora_rank' None"),
        (hf(DSA, index_topk=None), "'index_topk' None"),
        (hf(DSA, index_topk=2**64), "'index_topk'"),
        (
            hf(DSA, index_head_dim=100),
            "multiple of 128",
        ),
        (
            hf(DSA, index_topk_freq=0),
            "'index_topk_freq' 0",
        ),
        (
            hf(DSA, index_topk_pattern=5),
            "'index_topk_pattern'",
        ),
        # Bamba (Mamba-2 layers but at attn_layer_indices): every layer ran as full attention
        (
            hf(model_type="bamba", attn_layer_indices=[1, 3], mamba_d_state=128, mamba_n_heads=128),
            "field 'attn_layer_indices' (model_type 'bamba') describes state layers",
        ),
        (hf(model_type="custom", ssm_state_size=16), "field 'ssm_state_size'"),
    ],
)
def test_what_cannot_be_modelled_is_refused_by_name(cfg, field):
    with pytest.raises(InvalidArgumentError, match=re.escape(field)):
        layers_from_hf_config(cfg, 4, "test")


HF = Path(__file__).parent / "data" / "hf"


def _edited(tmp_path: Path, name: str, drop: tuple[str, ...] = (), **fields: object) -> str:
    """tests/data/hf/NAME.json with `fields` set and `drop` removed (in its text_config, if it has one)."""
    cfg = json.loads((HF / f"{name}.json").read_text())
    text = cfg.get("text_config", cfg)
    for key in drop:
        text.pop(key, None)
    text.update(fields)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _k3_lac() -> dict[str, object]:
    return dict(json.loads((HF / "kimi-k3.json").read_text())["text_config"]["linear_attn_config"])


def _kimi(**lac: object) -> dict[str, object]:
    base = json.loads((HF / "kimi-linear-48b-a3b.json").read_text())["linear_attn_config"]
    return {"linear_attn_config": {**base, **lac}}


@pytest.mark.parametrize(
    ("name", "drop", "fields", "message"),
    [
        # A period of 0 was a ZeroDivisionError (params read Qwen3-Next's 0 as 4, the layers as 0).
        ("qwen3-next-80b-a3b", (), {"full_attention_interval": 0}, "'full_attention_interval' 0"),
        ("qwen3-next-80b-a3b", (), {"full_attention_interval": True}, "'full_attention_interval' True"),
        ("gemma-3-12b", ("layer_types",), {"sliding_window_pattern": 0}, "'sliding_window_pattern' 0"),
        # A gated delta net of 0 heads, widths or kernel was taken.
        ("qwen3-next-80b-a3b", (), {"linear_conv_kernel_dim": 0}, "'linear_conv_kernel_dim' 0"),
        ("qwen3-next-80b-a3b", (), {"linear_num_key_heads": 0}, "'linear_num_key_heads' 0"),
        ("qwen3-next-80b-a3b", (), {"linear_num_value_heads": 0}, "'linear_num_value_heads' 0"),
        ("qwen3-next-80b-a3b", (), {"linear_key_head_dim": 0}, "'linear_key_head_dim' 0"),
        ("qwen3-next-80b-a3b", (), {"linear_value_head_dim": 0}, "'linear_value_head_dim' 0"),
        # Kimi-Linear's linear_attn_config: a bare ValueError / TypeError, a kernel truncated or of 0, heads
        # of True / 0 / -32, KDA layers that matched no layer (the model then all full attention).
        (
            "kimi-linear-48b-a3b",
            (),
            _kimi(short_conv_kernel_size="abc"),
            "'linear_attn_config.short_conv_kernel_size' 'abc'",
        ),
        (
            "kimi-linear-48b-a3b",
            (),
            _kimi(short_conv_kernel_size=None),
            "'linear_attn_config.short_conv_kernel_size' None",
        ),
        (
            "kimi-linear-48b-a3b",
            (),
            _kimi(short_conv_kernel_size=4.7),
            "'linear_attn_config.short_conv_kernel_size' 4.7",
        ),
        (
            "kimi-linear-48b-a3b",
            (),
            _kimi(short_conv_kernel_size=0),
            "'linear_attn_config.short_conv_kernel_size' 0",
        ),
        ("kimi-linear-48b-a3b", (), _kimi(num_heads=True), "'linear_attn_config.num_heads' True"),
        ("kimi-linear-48b-a3b", (), _kimi(num_heads=0), "'linear_attn_config.num_heads' 0"),
        ("kimi-linear-48b-a3b", (), _kimi(num_heads=-32), "'linear_attn_config.num_heads' -32"),
        ("kimi-linear-48b-a3b", (), _kimi(head_dim=0), "'linear_attn_config.head_dim' 0"),
        (
            "kimi-linear-48b-a3b",
            (),
            _kimi(kda_layers=["1", "2"]),
            "'linear_attn_config.kda_layers' ['1', '2']",
        ),
        ("kimi-linear-48b-a3b", (), _kimi(kda_layers=[]), "'linear_attn_config.kda_layers' [] must list"),
        ("kimi-linear-48b-a3b", (), _kimi(kda_layers=[0, 999, -1]), "from 1 to 27 (1-based)"),
        ("kimi-linear-48b-a3b", (), _kimi(kda_layers=[1, 1, 2]), "'linear_attn_config.kda_layers' [1, 1, 2]"),
        # What changes vLLM's KDA layer is refused by name, not read past: a bounded gate (FlashKDA's
        # prefill checkpoints on Hopper and Blackwell), a full-rank gate (Kimi-K3's layer).
        (
            "kimi-linear-48b-a3b",
            (),
            _kimi(gate_lower_bound=-5.0),
            "'linear_attn_config.gate_lower_bound' -5.0 is not modelled: a bounded KDA gate",
        ),
        # Kimi-K3.1's DeepSeek sparse attention (vLLM 0.34.0's `dsa_config`) was read past: the model was
        # sized as Kimi-K3, without its index key cache, top-k buffer and indexer weights.
        (
            "kimi-k3",
            (),
            {"dsa_config": {"dsa_layers": [4, 8, 12], "index_topk": 2048}},
            "field 'dsa_config' (Kimi-K3.1's DeepSeek sparse attention, vLLM 0.34.0) is not modelled",
        ),
        # Qwen3-Next's state fields under another model type without layer_types: every layer ran as full
        # attention, the fields unread.
        (
            "qwen3-next-80b-a3b",
            ("model_type",),
            {},
            "field 'linear_num_value_heads' (Qwen3-Next's state layers) under model_type ''",
        ),
        (
            "kimi-linear-48b-a3b",
            (),
            _kimi(head_dim=2**40),  # (it reached the engine's config, refused as `kv_groups`, no field named)
            "'linear_attn_config.head_dim' 1099511627776 must be a whole number of at least 1 up to 1,048,576",
        ),
        (
            "kimi-linear-48b-a3b",
            (),
            _kimi(gate_lower_bound=0),  # (a bound of 0 is a bound: it ran as Kimi-Linear, `0 == False`)
            "'linear_attn_config.gate_lower_bound' 0 is not modelled: a bounded KDA gate",
        ),
        (
            "kimi-linear-48b-a3b",
            (),
            _kimi(use_full_rank_gate=True),  # (Kimi-K3's layer, read; beside Kimi-Linear's MLA, refused)
            "a full-rank KDA gate (Kimi-K3's layer) beside MLA layers without 'q_lora_rank'",
        ),
        (
            "kimi-k3",
            (),
            {"linear_attn_config": {**_k3_lac(), "gate_lower_bound": -6.0}},
            "'linear_attn_config.gate_lower_bound' -6.0 must be a number in [-5, 0)",
        ),
        # A window the engine cannot take (a signed 64-bit integer) was refused only when the run started,
        # naming kv_groups.
        ("mistral-7b", (), {"sliding_window": 2**63}, "'sliding_window' 9223372036854775808 is longer than"),
        (
            "gemma-3-27b",
            (),
            {"sliding_window": 2**64},
            "'sliding_window' 18446744073709551616 is longer than",
        ),
        (
            "llama-4-scout",
            (),
            {"attention_chunk_size": 2**63},
            "'attention_chunk_size' 9223372036854775808 is",
        ),
    ],
)
def test_a_layer_field_no_model_has_is_refused_by_name(tmp_path, name, drop, fields, message):
    """Each value is an InvalidArgumentError naming the field, from `SimConfig` (the CLI's `--model`), not a
    bare Python exception or a model built on a guess."""
    path = _edited(tmp_path, name, drop, **fields)
    with pytest.raises(InvalidArgumentError, match=re.escape(message)) as info:
        kvsim.SimConfig(model=path, kv_cache_bytes="8GiB", enable_prefix_caching=False)
    assert str(info.value).startswith(f"model {path}: field ")


def test_the_longest_window_the_engine_takes_runs(tmp_path):
    """2**63 - 1 tokens (the engine reads a window as a signed 64-bit integer) is taken and runs: a window
    past the context keeps every token, as full attention does."""
    from kvsim.workloads import synthetic

    path = _edited(tmp_path, "mistral-7b", sliding_window=2**63 - 1)
    cfg = kvsim.SimConfig(model=path, kv_cache_bytes="8GiB")
    assert [g.window for g in cfg.kv_groups] == [2**63 - 1]
    w = synthetic(5, seed=0)
    (tmp_path / "full").mkdir()
    full = kvsim.SimConfig(
        model=_edited(tmp_path / "full", "mistral-7b", ("sliding_window",)), kv_cache_bytes="8GiB"
    )
    ran, as_full = kvsim.simulate(w, cfg), kvsim.simulate(w, full)
    assert ran.summary["completed"] == 5
    assert ran.requests["finish"].to_list() == as_full.requests["finish"].to_list()
    with pytest.raises(InvalidArgumentError, match=r"longer than 9223372036854775807 tokens \(2\*\*63 - 1\)"):
        Layer("sliding_window", 2**63)


def test_nemotron_h_mlp_blocks_attend_to_nothing_in_the_roofline():
    """Nemotron-H's MLP and MoE blocks (`-`, `E`) keep no cache and attend to nothing: they were marked as
    KV-sharing layers, which the roofline reads as attention over another layer's keys (Nemotron-H-8B's
    roofline counted 28 attention layers for its 4, a decode step 21 % too long)."""
    from kvsim.model import gpus, models
    from kvsim.model.timing import roofline_time_model

    m = models.resolve(str(Path(__file__).parent / "data" / "hf" / "nemotron-h-8b.json"))
    kinds = [lay.kind for lay in m.layer_list()]
    assert kinds.count("full") == 4
    assert kinds.count("shared") == 0
    roof = roofline_time_model(m, gpus.get("h100-80gb"))
    assert [a.layers for a in roof.attention] == [4]
