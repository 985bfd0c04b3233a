"""The Mamba hybrids' weights and layers (DESIGN.md §Defaults and sizing, "State-layer hybrids' weights"):
Jamba, Nemotron-H and Granite 4.0-H as vLLM 0.33.0 builds them (`kvsim.model.params_state`). Counted as a
transformer's attention + MLP on every layer, Jamba-v0.1 was 92 B parameters and Nemotron-H-8B 17 B."""

from __future__ import annotations

import math

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.model import hf_config
from kvsim.model.hf_layers import layers_from_hf_config


def build(cfg: dict):
    return hf_config._from_dict(cfg, "t", "t", "t", None)


# -- Nemotron-H ------------------------------------------------------------------------------------------------

NEMO = {
    "model_type": "nemotron_h",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "hybrid_override_pattern": "M-*E",
    "mamba_num_heads": 8,
    "mamba_head_dim": 16,
    "n_groups": 2,
    "ssm_state_size": 32,
    "conv_kernel": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 96,
    "n_shared_experts": 1,
    "moe_shared_expert_intermediate_size": 64,
    "tie_word_embeddings": False,
    "max_position_embeddings": 4096,
}


def nemotron_by_hand(c: dict, latent: int = 0) -> tuple[int, int]:
    """The block of each letter written out from vLLM 0.33.0's nemotron_h.py and mamba_mixer2.py."""
    h, v = c["hidden_size"], c["vocab_size"]
    inner = c["mamba_num_heads"] * c["mamba_head_dim"]
    gn = c["n_groups"] * c["ssm_state_size"]
    conv_dim = inner + 2 * gn
    heads = c["mamba_num_heads"]
    mamba = h * (inner + conv_dim + heads) + inner * h + conv_dim * (c["conv_kernel"] + 1) + 3 * heads + inner
    d, q, kv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    attn = h * (q + 2 * kv) * d + q * d * h
    mlp = 2 * h * c["intermediate_size"]
    e, f = c["n_routed_experts"], c["moe_intermediate_size"]
    width = latent or h
    routed = e * 2 * width * f
    shared = 2 * h * c["n_shared_experts"] * c["moe_shared_expert_intermediate_size"]
    moe_rest = h * e + e + shared + (2 * h * latent if latent else 0)
    norms = 4 * h + h
    total = 2 * v * h + mamba + attn + mlp + routed + moe_rest + norms
    active = total - routed + routed * c["num_experts_per_tok"] // e
    return total, active


def test_nemotron_h_counts_each_block_by_its_letter():
    m = build(NEMO)
    assert (m.num_params, m.num_active_params) == nemotron_by_hand(NEMO)
    assert (m.num_experts, m.experts_per_token, m.expert_ffn) == (4, 2, 96)
    # As a transformer (attention + gated MLP on each of the four layers) it was far more.
    plain = {k: v for k, v in NEMO.items() if not k.startswith(("mamba_", "ssm_", "hybrid_"))}
    assert m.num_params < 0.7 * build({**plain, "model_type": "llama"}).num_params


def test_nemotron_h_latent_moe_works_in_its_latent_width():
    c = {**NEMO, "moe_latent_size": 64}
    assert (build(c).num_params, build(c).num_active_params) == nemotron_by_hand(c, latent=64)


def test_nemotron_h_reads_layers_block_type_as_transformers_prefers_it():
    """transformers' NemotronHConfig writes `layers_block_type` (and prefers it to the pattern); the older
    `mamba_n_groups` / `mamba_d_conv` spellings are its aliases."""
    blocks = ["mamba", "mlp", "attention", "moe"]
    c = {**NEMO, "hybrid_override_pattern": "MMMM", "layers_block_type": blocks}
    assert build(c).num_params == build(NEMO).num_params
    assert [lay.kind for lay in build(c).layers] == ["mamba", "none", "full", "none"]
    renamed = {k: v for k, v in NEMO.items() if k not in ("n_groups", "conv_kernel")}
    renamed |= {"mamba_n_groups": 2, "mamba_d_conv": 4}
    assert build(renamed).num_params == build(NEMO).num_params
    assert build(renamed).layers == build(NEMO).layers
    with pytest.raises(InvalidArgumentError, match=r"'layers_block_type' blocks \['shared'\]"):
        build({**NEMO, "layers_block_type": ["mamba", "mlp", "shared", "moe"]})
    with pytest.raises(InvalidArgumentError, match="'layers_block_type' must list"):
        build({**NEMO, "layers_block_type": "M-*E"})


def test_nemotron_h_mlp_widths_by_layer():
    """`intermediate_size` may list a width for each MLP layer (vLLM's NemotronHMLPDecoderLayer)."""
    c = {**NEMO, "hybrid_override_pattern": "M--*", "intermediate_size": [512, 1024]}
    flat = {**NEMO, "hybrid_override_pattern": "M--*", "intermediate_size": 512}
    assert build(c).num_params - build(flat).num_params == 2 * 256 * 512


# -- Jamba -----------------------------------------------------------------------------------------------------

JAMBA = {
    "model_type": "jamba",
    "hidden_size": 256,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "attn_layer_period": 4,
    "attn_layer_offset": 2,
    "expert_layer_period": 2,
    "expert_layer_offset": 1,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_dt_rank": "auto",
    "mamba_conv_bias": True,
    "mamba_proj_bias": False,
    "tie_word_embeddings": False,
}


def test_jamba_puts_experts_on_every_other_layer_and_mamba_in_attentions_place():
    c = JAMBA
    h, inner, n, rank = 256, 512, 16, math.ceil(256 / 16)
    mamba = 2 * inner * h + (rank + 2 * n) * inner + rank * inner + inner + inner * h
    mamba += inner * 4 + inner + inner * n + inner + rank + 2 * n
    d = h // 8
    attn = h * (8 + 4) * d + 8 * d * h
    gated = 3 * h * c["intermediate_size"]
    total = 2 * 1000 * h + 2 * attn + 6 * mamba + 4 * 4 * gated + 4 * 4 * h + 4 * gated + 17 * h
    m = build(c)
    assert m.num_params == total
    assert m.num_active_params == total - 4 * 2 * gated
    assert [lay.kind for lay in m.layers] == ["mamba", "mamba", "full", "mamba"] * 2


def test_jamba_mamba_mixers_stay_unquantized():
    """vLLM's MambaMixer builds its projections without the quantization config: an fp8 checkpoint keeps
    them in bf16 (two bytes), while the experts take one byte and a scale."""
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    plain, quant = build(JAMBA), build({**JAMBA, "quantization_config": fp8})
    bf16_only = {**JAMBA, "num_experts": 1, "attn_layer_period": 100}  # mixers, MLPs, embeddings only
    assert quant.param_bytes < plain.param_bytes
    m = build(bf16_only)
    q = build({**bf16_only, "quantization_config": fp8})
    h, inner, n, rank = 256, 512, 16, 16
    mixers = 8 * (2 * inner * h + (rank + 2 * n) * inner + rank * inner + inner * h)
    # The quantized model saves about a byte a weight on what is quantized, nothing on the mixers.
    saved = m.param_bytes - q.param_bytes
    assert saved < m.num_params - mixers
    assert saved > 0.9 * (8 * 3 * 256 * 512)  # the MLPs' matrices at least


# -- Granite 4.0-H ---------------------------------------------------------------------------------------------

GRANITE = {
    "model_type": "granitemoehybrid",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "shared_intermediate_size": 384,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 1000,
    "layer_types": ["mamba", "mamba", "attention", "mamba"],
    "mamba_n_heads": 16,
    "mamba_d_head": 32,
    "mamba_n_groups": 1,
    "mamba_d_state": 64,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_conv_bias": True,
    "mamba_proj_bias": False,
    "position_embedding_type": "nope",
    "tie_word_embeddings": True,
    "max_position_embeddings": 131072,
}


def test_granite_4_h_layers_and_weights():
    h = 256
    inner, gn, heads = 512, 64, 16
    conv_dim = inner + 2 * gn
    mamba = h * (inner + conv_dim + heads) + inner * h + conv_dim * 5 + 3 * heads + inner
    attn = h * (8 + 4) * 32 + h * h
    experts = 8 * 3 * h * 128
    per_layer = 3 * h * 384 + 8 * h + experts + 2 * h
    total = 1000 * h + 3 * mamba + attn + 4 * per_layer + h
    m = build(GRANITE)
    assert m.num_params == total
    assert m.num_active_params == total - 4 * experts + 4 * experts * 2 // 8
    kinds = [lay.kind for lay in m.layers]
    assert kinds == ["mamba", "mamba", "full", "mamba"]
    state = m.layers[0].state
    assert state is not None
    # vLLM's mamba2_state_shape: conv (expand·hidden + 2·groups·state, kernel − 1), temporal (heads,
    # d_head, d_state), both in the model's dtype: bf16.
    assert state.page_bytes(1, 16) == (conv_dim * 3 + heads * 32 * 64) * 2
    assert state.checkpoint_blocks == 1


def test_granite_4_h_defaults_and_refusals():
    """`mamba_d_head` "auto" is the inner width over the heads; no `layer_types`: every layer Mamba
    (transformers' GraniteMoeHybridConfig); a head width that does not make the inner width is refused,
    as transformers refuses it, and an unknown layer type by name."""
    auto = {**GRANITE, "mamba_d_head": "auto"}
    assert build(auto).num_params == build(GRANITE).num_params
    allm = {k: v for k, v in GRANITE.items() if k != "layer_types"}
    assert [lay.kind for lay in layers_from_hf_config(allm, 4, "t")] == ["mamba"] * 4
    with pytest.raises(InvalidArgumentError, match="'mamba_n_heads' 16 x 'mamba_d_head' 16"):
        build({**GRANITE, "mamba_d_head": 16})
    with pytest.raises(InvalidArgumentError, match=r"layer types \['shared'\]"):
        build({**GRANITE, "layer_types": ["mamba", "shared", "attention", "mamba"]})
    dense = {**GRANITE, "num_local_experts": 0}
    assert build(dense).num_experts == 0
    assert build(dense).num_params == build(dense).num_active_params


def test_nemotron_h_mlp_widths_must_match_its_mlp_layers():
    with pytest.raises(InvalidArgumentError, match="list of one or of the 2 MLP layers' widths"):
        build({**NEMO, "hybrid_override_pattern": "M--*", "intermediate_size": [512, 1024, 2048]})
    with pytest.raises(InvalidArgumentError, match="'intermediate_size'"):
        build({**NEMO, "hybrid_override_pattern": "M--*", "intermediate_size": [512, 0]})


def test_no_rotary_cache_where_vllm_builds_no_rope():
    """vLLM 0.33.0's Jamba and Nemotron-H attention has no rotary embedding, Granite 4.0-H's only with
    `position_embedding_type` "rope" (its checkpoints say "nope"): no cos/sin cache is held for them."""
    assert build({**JAMBA, "max_position_embeddings": 262144}).rope_cache_bytes == 0
    assert build(NEMO).rope_cache_bytes == 0
    assert build(GRANITE).rope_cache_bytes == 0
    roped = build({**GRANITE, "position_embedding_type": "rope", "rope_theta": 10000.0})
    assert roped.rope_cache_bytes == 131072 * 32 * 2  # cos and sin of 16 pairs a row, bf16


# -- The published checkpoints (tests/data/hf/README.md) -------------------------------------------------------

HF = __import__("pathlib").Path(__file__).parent / "data" / "hf"


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        # Hugging Face's safetensors total of ai21labs/AI21-Jamba-Mini-1.5 (Jamba-v0.1's architecture; the Open
        # LLM Leaderboard's 51.57B for Jamba-v0.1); the card's 12B active.
        ("jamba-v0.1", 51_570_323_328, 12.1e9),
        # nvidia/Nemotron-H-8B-Base-8K: 8.101B safetensors (a dense hybrid: every parameter active).
        ("nemotron-h-8b", 8.101e9, 8.101e9),
    ],
)
def test_published_hybrid_checkpoints(name, total, active):
    from kvsim.model.hf_config import from_hf_config

    m = from_hf_config(HF / f"{name}.json")
    assert m.num_params == pytest.approx(total, abs=0.5e6)  # (the published figure's rounding)
    assert m.num_active_params == pytest.approx(active, rel=0.01)
    assert m.weight_bytes == 2 * m.num_params  # bf16, nothing quantized


@pytest.mark.parametrize("name", ["nemotron-3-nano-30b-a3b", "granite-4.0-h-tiny"])
def test_the_roofline_reads_the_weights_the_model_holds(name):
    """The roofline re-derives the weights from the fields a Model keeps (`Model.config_fields`): every field
    the hybrids' weights read is kept (the Nemotron-H pattern was not, and the time model failed on it)."""
    from kvsim import models
    from kvsim.model.weights import weight_groups

    m = models.get(name)
    groups = weight_groups(m)
    assert sum(g.bytes for g in groups.values()) == m.param_bytes
    assert groups["attn"].bytes > 0
    assert groups["experts"].bytes > 0


def test_attention_head_width_as_each_model_file_takes_it():
    """Nemotron-H reads `head_dim` (transformers' default 128 when absent, not hidden / heads); Jamba and
    Granite 4.0-H size their heads hidden / heads whatever the config says (vLLM 0.33.0's model files)."""
    no_dim = {k: v for k, v in NEMO.items() if k != "head_dim"}  # hidden 256 / 4 heads would be 64
    assert build(no_dim).head_dim == 128
    assert build(no_dim).kv_bytes_per_token == 1 * 2 * 2 * 128 * 2  # one attention layer, 2 KV heads
    assert build({**JAMBA, "head_dim": 128}).head_dim == 256 // 8
    assert build({**GRANITE, "head_dim": 128}).head_dim == 256 // 8


# -- A review against vLLM 0.33.0 and transformers 5.20 --------------------------------------------------------


def test_granite_reads_layers_block_type_as_layer_types():
    """transformers' GraniteMoeHybridConfig maps `layers_block_type` onto `layer_types`."""
    c = {k: v for k, v in GRANITE.items() if k != "layer_types"} | {
        "layers_block_type": GRANITE["layer_types"]
    }
    assert build(c).layers == build(GRANITE).layers
    assert build(c).num_params == build(GRANITE).num_params


@pytest.mark.parametrize("what", ["attn", "expert"])
def test_jamba_offsets_below_their_period(what):
    with pytest.raises(
        InvalidArgumentError, match=f"'{what}_layer_offset' 4 must be below '{what}_layer_period' 4"
    ):
        build({**JAMBA, f"{what}_layer_period": 4, f"{what}_layer_offset": 4})


def test_nemotron_h_older_spellings_win_as_transformers_pops_them():
    """NemotronHConfig.__post_init__ sets `n_groups`, `conv_kernel`, `use_conv_bias` from `mamba_n_groups`,
    `mamba_d_conv`, `mamba_conv_bias` where both are given."""
    both = {**NEMO, "mamba_n_groups": 4, "mamba_d_conv": 3, "mamba_conv_bias": False}
    renamed = {**NEMO, "n_groups": 4, "conv_kernel": 3, "use_conv_bias": False}
    assert build(both).num_params == build(renamed).num_params
    assert build(both).layers == build(renamed).layers
    assert build(both).num_params != build(NEMO).num_params


def test_nemotron_h_shared_expert_has_no_bias():
    """`mlp_bias` gives the MLP layers and the latent projections biases; the shared expert is built without
    (NemotronHMLP's default)."""
    plain, biased = build(NEMO), build({**NEMO, "mlp_bias": True})
    assert biased.num_params - plain.num_params == 512 + 256  # the one MLP layer's up and down biases


def test_mamba_hybrids_take_their_config_classes_defaults():
    """No `num_key_value_heads`: 8 for Jamba and Nemotron-H (not every head); no `intermediate_size`:
    Jamba's 14336, Granite's 11008, Nemotron-H's 21504 (not 4 x hidden); Jamba's `num_local_experts` is its
    `num_experts`; Jamba and Nemotron-H never tie their lm_head (vLLM builds one)."""
    nokv = {k: v for k, v in JAMBA.items() if k != "num_key_value_heads"}
    assert build(nokv).num_kv_heads == 8
    nokv = {k: v for k, v in NEMO.items() if k != "num_key_value_heads"} | {"num_attention_heads": 16}
    assert build(nokv).num_kv_heads == 8
    for cfg, width in ((JAMBA, 14336), (GRANITE, 11008)):
        noffn = {k: v for k, v in cfg.items() if k != "intermediate_size"}
        assert build(noffn).num_params == build({**cfg, "intermediate_size": width}).num_params
    local = {k: v for k, v in JAMBA.items() if k != "num_experts"} | {"num_local_experts": 4}
    assert build(local).num_params == build(JAMBA).num_params
    for cfg in (JAMBA, NEMO):
        assert build({**cfg, "tie_word_embeddings": True}).num_params == build(cfg).num_params


def test_nemotron_h_ssm_cache_dtype():
    """`mamba_ssm_cache_dtype` as vLLM's cache config takes it: float32 (the default), bfloat16 / float16, or
    auto (the model's dtype); anything else refused by name."""
    bits = {
        d: build({**NEMO, "mamba_ssm_cache_dtype": d}).layers[0].state.ssm_bits
        for d in ("float32", "bfloat16", "auto")
    }
    assert bits == {"float32": 32, "bfloat16": 16, "auto": 0}
    for bad in ("x", 32, None):
        cfg = {**NEMO, "mamba_ssm_cache_dtype": bad}
        if bad is None:
            continue  # (null is the field absent: float32)
        with pytest.raises(InvalidArgumentError, match="'mamba_ssm_cache_dtype'"):
            build(cfg)


def test_nemotron_h_sliding_window_on_its_attention_layers():
    m = build({**NEMO, "sliding_window": 64})
    assert [(lay.kind, lay.window) for lay in m.layers] == [
        ("mamba", 0),
        ("none", 0),
        ("sliding_window", 64),
        ("none", 0),
    ]


def test_nemotron_h_layers_from_its_block_list():
    """transformers derives the layers from the block list, ignoring `num_hidden_layers`."""
    c = {k: v for k, v in NEMO.items() if k not in ("num_hidden_layers", "hybrid_override_pattern")}
    c["layers_block_type"] = ["mamba", "mlp", "attention", "moe"]
    assert build(c).num_layers == 4
    assert build(c).num_params == build(NEMO).num_params


def test_mamba2_groups_the_ranks_do_not_divide_are_refused():
    from kvsim.errors import UnsplittableModelError

    state = build({**NEMO, "n_groups": 6}).layers[0].state
    assert state.page_bytes(2, 16) > 0
    with pytest.raises(UnsplittableModelError, match="does not divide the Mamba 2 mixer's 6 groups"):
        state.page_bytes(4, 16)
    single = build({**NEMO, "n_groups": 1}).layers[0].state
    assert single.page_bytes(4, 16) > 0  # one group is replicated to each rank's heads


def test_flags_are_true_or_false():
    for cfg, key in ((JAMBA, "mamba_conv_bias"), (NEMO, "mlp_bias"), (GRANITE, "attention_bias")):
        with pytest.raises(InvalidArgumentError, match=f"'{key}' 'false' must be true or false"):
            build({**cfg, key: "false"})


def test_the_pool_line_counts_a_groups_own_layers_and_its_padding():
    """Nemotron-3-Nano's 23 Mamba layers in four groups of six: the last holds five and a padding layer
    (every group of a hybrid model has as many layers, vLLM's `_get_kv_cache_groups_uniform_page_size`); the
    line said ×6 for it, 24 Mamba layers in all."""
    import kvsim

    cfg = kvsim.SimConfig(model="nemotron-3-nano-30b-a3b", gpu="h100-80gb")
    line = cfg.pool.layout.describe()
    assert "mamba ×6, mamba ×6, mamba ×6, mamba ×5 (+1 padding), full ×6" in line
    assert sum(len(g.layer_ids) for g in cfg.pool.layout.groups) == 23 + 6


def test_generic_fields_refused_where_their_type_is_wrong():
    """`tie_word_embeddings` "false" ran as tied, `torch_dtype` false as bfloat16; a Jamba whose heads come
    out 0 wide named a `head_dim` its config does not have."""
    with pytest.raises(InvalidArgumentError, match="'tie_word_embeddings' 'false' must be true or false"):
        build({**GRANITE, "tie_word_embeddings": "false"})
    with pytest.raises(InvalidArgumentError, match="torch_dtype False"):
        build({**GRANITE, "torch_dtype": False})
    with pytest.raises(
        InvalidArgumentError, match="hidden_size 3 over num_attention_heads 8 gives heads 0 wide"
    ):
        build({**JAMBA, "hidden_size": 3})


def test_sliding_window_left_unread_where_vllm_leaves_it():
    """vLLM 0.33.0 sets a cache-wide window only when every layer of the config's `layer_types` slides
    (`arg_utils.py`); Jamba's and Granite 4.0-H's config classes list Mamba and attention layers, and
    their attention passes no window of its own: `sliding_window` changes nothing (Nemotron-H's attention
    passes its own, read above)."""
    for cfg in (JAMBA, GRANITE):
        assert build({**cfg, "sliding_window": 64}).layers == build(cfg).layers


def test_nemotron_3_super_latent_moe_against_its_published_total():
    """Nemotron-3-Super's experts work in a latent of 1,024 between two projections (`moe_latent_size`). kvsim
    counts what vLLM loads without speculative decoding; Hugging Face's total, 123,611,012,096, also holds
    the MTP layer (`mtp_hybrid_override_pattern` "*E": an attention block, a latent MoE block, the
    `eh_proj` of 2 x hidden -> hidden and three norms), which added back gives it within 20,000 parameters
    (the float32 router biases vLLM allocates and that total leaves out, 512 a MoE layer, and a few norms)."""
    from kvsim.model.hf_config import from_hf_config

    m = from_hf_config(HF / "nemotron-3-super-120b-a12b.json")
    h, experts, ffn, latent = 4096, 512, 2688, 1024
    moe = experts * 2 * latent * ffn + h * experts + experts + 2 * h * 5376 + 2 * h * latent
    attention = h * (32 + 2 * 2) * 128 + 32 * 128 * h
    mtp = moe + attention + 2 * h * h + 3 * h
    assert m.num_params + mtp == pytest.approx(123_611_012_096, abs=20_000)
    assert m.num_params == 120_668_707_840
    # Latent experts: 22 of 512 a token, each 2 x 1024 x 2688.
    assert (m.num_experts, m.experts_per_token, m.expert_ffn) == (512, 22, 2688)
