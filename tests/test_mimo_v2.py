"""MiMo-V2-Flash (`mimo_v2_flash`) as vLLM 0.33.0's `mimo_v2.py` builds it (DESIGN.md §Hybrid attention,
"MiMo-V2-Flash"): `hybrid_layer_pattern` picks the sliding layers, each attention kind has its own KV heads,
and K and V heads differ in width (192 / 128), so a layer's KV bytes a token are kv_heads x (K + V) x dtype
bytes; the weights per layer by their own heads, MoE per `moe_layer_freq`, attention sinks; the roofline's
per-layer KV bytes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kvsim import models
from kvsim.errors import InvalidArgumentError
from kvsim.model import gpus, hf_config
from kvsim.model.layers import Layer, kv_layout
from kvsim.model.timing import roofline_time_model

HF = Path(__file__).parent / "data" / "hf"
CFG = json.loads((HF / "mimo-v2-flash.json").read_text())
# A token's K and V in one layer, bf16 (2 B): full attention 4 KV heads x (192 + 128); sliding 8 x (192 + 128).
FULL_TOKEN = 4 * (192 + 128) * 2  # 2,560 B
SWA_TOKEN = 8 * (192 + 128) * 2  # 5,120 B


def _model():
    return models.from_hf_config(HF / "mimo-v2-flash.json")


def test_layer_kinds_and_windows_follow_the_hybrid_layer_pattern():
    """Layer i slides (128 tokens, 8 KV heads of K 192 / V 128) where hybrid_layer_pattern[i] is 1, else full
    attention (4 KV heads of K 192 / V 128): 9 full layers (0, 5, 11, ..., 47), 39 sliding."""
    m = _model()
    assert len(m.layers) == 48
    full = [i for i, lay in enumerate(m.layers) if lay.kind == "full"]
    assert full == [0, 5, 11, 17, 23, 29, 35, 41, 47]
    assert full == [i for i, x in enumerate(CFG["hybrid_layer_pattern"]) if x == 0]
    for i, lay in enumerate(m.layers):
        if CFG["hybrid_layer_pattern"][i]:
            assert lay == Layer("sliding_window", 128, num_kv_heads=8, head_dim=192, v_head_dim=128)
        else:
            assert lay == Layer("full", num_kv_heads=4, head_dim=192, v_head_dim=128)
    assert m.is_hybrid
    assert (m.num_kv_heads, m.head_dim) == (4, 192)


def test_kv_bytes_per_token_by_hand():
    """K 192 and V 128 wide (not 2 x 192): 9 full layers x 2,560 B + 39 sliding layers x 5,120 B = 222,720 B a
    token were every layer to keep it (a sliding layer keeps only its last 128); sized as 2 x head_dim it
    would be 9 x 3,072 + 39 x 6,144 = 267,264 B."""
    m = _model()
    assert m.kv_bytes_per_token == 9 * FULL_TOKEN + 39 * SWA_TOKEN == 222_720
    assert m.with_kv_dtype("fp8").kv_bytes_per_token == 222_720 // 2


@pytest.mark.parametrize("tp", [1, 4])
def test_hybrid_manager_off_keeps_each_layers_heads(tp):
    """--disable-hybrid-kv-cache-manager: `unify_hybrid_kv_cache_specs` turns each sliding layer into a
    FullAttentionSpec of its own KV heads and widths (8 x (192 + 128)), not the full layers' 4: one group of
    every layer (`UniformTypeKVCacheSpecs`), a block = 16 x (9 x 4 + 39 x 8) x 320 x 2 B / tp's heads."""
    m = _model()
    layout = kv_layout(m, 16, tensor_parallel_size=tp, hybrid_kv_cache_manager="off")
    assert [(g.kind, g.num_layers) for g in layout.groups] == [("full", 48)]
    per_token = 9 * max(1, 4 // tp) * 320 * 2 + 39 * max(1, 8 // tp) * 320 * 2
    assert layout.bytes_per_block == 16 * per_token


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_groups_and_pages_match_vllms_specs(tp):
    """vLLM's pages (`AttentionSpec.page_size_bytes`: block x kv_heads x (head_size + head_size_v) x 2 B), KV
    heads per rank (replicated once tp passes them): full 4 // tp, sliding 8 // tp. Below tp 8 the sliding page
    is twice the full one, so `unify_kv_cache_spec_page_size` grows the full layers' block to 32; the 9 full
    layers set the group size (9 < 39 / 1.5), the 39 sliding layers split into 5 groups (`layers[i::5]`:
    8, 8, 8, 8, 7, each padded to 9)."""
    m = _model()
    layout = kv_layout(m, 16, tensor_parallel_size=tp)
    full_heads, swa_heads = max(1, 4 // tp), max(1, 8 // tp)
    swa_page = 16 * swa_heads * (192 + 128) * 2
    full_block = 16 * swa_heads // full_heads
    got = [
        (g.kind, g.window, g.block_size, g.page_bytes, g.num_layers, len(g.layer_ids)) for g in layout.groups
    ]
    assert got[0] == ("full", 0, full_block, full_block * full_heads * 320 * 2, 9, 9)
    assert got[0][3] == swa_page
    assert got[1:] == [("sliding_window", 128, 16, swa_page, 9, n) for n in (8, 8, 8, 8, 7)]
    sliding = [i for i, x in enumerate(CFG["hybrid_layer_pattern"]) if x]
    assert [g.layer_ids for g in layout.groups[1:]] == [tuple(sliding[i::5]) for i in range(5)]
    assert layout.groups[1].layer_ids[:3] == (1, 7, 13)
    assert layout.bytes_per_block == 9 * swa_page


def test_parameters_match_the_published_309b_total_and_15b_active():
    """XiaomiMiMo/MiMo-V2-Flash's model card: "309B total parameters and 15B active parameters" (the MTP
    module, which vLLM's mimo_v2.py skips, is not counted). By hand, hidden 4096:
    - embeddings and the untied lm_head: 2 x 152,576 x 4096;
    - a full layer's attention: q 64 x 192, k 4 x 192, v 4 x 128 (x 4096 each), o 4096 x 64 x 128;
      a sliding layer's: k 8 x 192, v 8 x 128, and 64 attention sinks;
    - layer 0 (moe_layer_freq[0] = 0) a dense MLP 3 x 4096 x 16384; the 47 others 256 experts of
      3 x 4096 x 2048 (8 a token), a 256 x 4096 router and its 256 e_score_correction_bias;
    - two norms a layer and the final one."""
    m = _model()
    h = 4096
    full_attn = (64 * 192 + 4 * 192 + 4 * 128) * h + h * 64 * 128
    swa_attn = (64 * 192 + 8 * 192 + 8 * 128) * h + h * 64 * 128 + 64
    expert = 3 * h * 2048
    router = 256 * h + 256
    common = 2 * 152_576 * h + 9 * full_attn + 39 * swa_attn + 3 * h * 16_384 + (2 * 48 + 1) * h
    total = common + 47 * (256 * expert + router)
    active = common + 47 * (8 * expert + router)
    assert (m.num_params, m.num_active_params) == (total, active) == (308_778_780_864, 15_445_936_320)
    assert round(m.num_params / 1e9) == 309
    assert round(m.num_active_params / 1e9) == 15
    assert m.quantization.startswith("fp8")


def test_roofline_reads_k_and_v_at_their_own_widths():
    """The roofline's attention reads a key's bytes at kv_heads x (K + V) x dtype: with V as wide as K (192)
    each class would read 384 / 320 as many."""
    h200 = gpus.get("h200")
    m = _model()
    wide = dataclasses.replace(m, layers=tuple(dataclasses.replace(lay, v_head_dim=None) for lay in m.layers))
    assert wide.kv_bytes_per_token == 9 * 4 * 384 * 2 + 39 * 8 * 384 * 2
    got = {(a.kind, a.window): a for a in roofline_time_model(m, h200).attention}
    ref = {(a.kind, a.window): a for a in roofline_time_model(wide, h200).attention}
    assert len(got) == 2
    assert sorted(a.layers for a in got.values()) == [9, 39]
    for key, a in got.items():
        assert abs(a.kv_ps - ref[key].kv_ps * 320 / 384) <= 1
        assert abs(a.flop_ps - ref[key].flop_ps * 320 / 384) <= 1  # (whole picoseconds)


def test_other_models_keep_their_kv_bytes():
    """A layer without a V width keeps 2 x head_dim (Gemma 4 31B's, by hand in test_catalogue)."""
    assert Layer("full").v_head_dim is None
    assert Layer("full", head_dim=128).kv_width(64) == 256
    assert Layer("full").kv_width(64) == 128
    assert models.get("llama-3.1-8b").kv_bytes_per_token == 32 * 8 * 128 * 2 * 2


def test_unmodelled_mimo_fields_are_refused_by_name():
    base = {k: v for k, v in CFG.items() if k != "quantization_config"}

    def build(**over):
        return hf_config._from_dict({**base, **over}, "mimo", "mimo", "mimo", None)

    with pytest.raises(InvalidArgumentError, match="'hybrid_layer_pattern' must list the 48 layers"):
        build(hybrid_layer_pattern=[0, 1] * 16)
    with pytest.raises(InvalidArgumentError, match="'hybrid_layer_pattern' must list"):
        build(hybrid_layer_pattern=[2] * 48)
    with pytest.raises(InvalidArgumentError, match="swa_num_attention_heads 32 differs"):
        build(swa_num_attention_heads=32)
    # another model type's hybrid_layer_pattern stays refused
    with pytest.raises(InvalidArgumentError, match="read for MiMo-V2-Flash only"):
        build(model_type="mimo_v2")
    assert build().num_params == _model().num_params  # (the bf16 form: the same parameters)
