"""Nemotron-NAS (`nemotron-nas`, DeciLMForCausalLM) as vLLM 0.33.0 builds it (`kvsim.model.nemotron_nas`;
DESIGN.md §Model configs, "Nemotron-NAS"): each layer's attention and MLP from its `block_configs` entry.
kvsim refused the model type before (its blocks unread)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.errors import InvalidArgumentError, UnsplittableModelError
from kvsim.model import hf_config
from kvsim.model.gpus import get as gpu
from kvsim.model.layers import kv_layout
from kvsim.model.nemotron_nas import ffn_mult_to_width
from kvsim.model.shard import shard
from kvsim.model.timing import roofline_time_model

SUPER = Path(__file__).parent / "data" / "hf" / "llama-3.3-nemotron-super-49b-v1.json"
# Llama-3.3-Nemotron-Super-49B-v1's layers whose attention is a no-op (its block_configs: `no_op` true).
SUPER_NO_OP = (6, 7, 11, *range(42, 52), *range(53, 71))


def build(cfg: dict):
    return hf_config._from_dict(cfg, "t", "t", "t", None)


def block(group: int | None = 4, ffn_mult: float | None = 1.0, **attention: object) -> dict:
    """A `block_configs` entry: attention of `group` query heads a KV head (None: a no-op attention), an MLP
    of `ffn_mult` (None: a no-op MLP)."""
    att = {"n_heads_in_group": group, "no_op": group is None, **attention}
    ffn = {"ffn_mult": ffn_mult, "no_op": ffn_mult is None}
    return {"attention": att, "ffn": ffn}


def nas(*blocks: dict, **fields: object) -> dict:
    return {
        "model_type": "nemotron-nas",
        "hidden_size": 1536,
        "num_attention_heads": 12,
        "head_dim": 128,
        "num_hidden_layers": len(blocks),
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "block_configs": list(blocks),
        **fields,
    }


def test_super_49b_parameters_are_the_published_total():
    """49,867,145,216: Hugging Face's safetensors total of nvidia/Llama-3_3-Nemotron-Super-49B-v1 (a public
    research log on the checkpoint quotes it, "49,867,145,216 bf16 params ≈ 99.75 GB"; public model indexes
    round it to 49.9B; tests/data/hf/README.md). Every layer a Llama layer would have been 64 KV heads (the config's `num_key_value_heads` is
    null) and the widest MLP on all 80 layers: some 75B."""
    m = hf_config.from_hf_config(SUPER)
    assert m.num_params == 49_867_145_216
    assert m.num_active_params == m.num_params
    assert m.weight_bytes == 2 * m.num_params  # bf16, nothing quantized
    assert m.num_kv_heads == 8  # the first attention layer's (vLLM's get_total_num_kv_heads)
    assert m.intermediate_size == 28672  # the widest MLP: ffn_mult 5.25 -> 2/3 x 5.25 x 8192


def test_the_roofline_reads_the_weights_the_model_holds():
    """The roofline re-derives the weights from the kept config fields (`block_configs` among them)."""
    from kvsim.model.weights import weight_groups

    m = hf_config.from_hf_config(SUPER)
    groups = weight_groups(m)
    assert sum(g.bytes for g in groups.values()) == m.param_bytes
    biased = build(nas(block(4), block(None), bias=True, qkv_bias=False))
    assert sum(g.bytes for g in weight_groups(biased).values()) == biased.param_bytes
    assert biased.num_params == build(nas(block(4), block(None))).num_params + 1536  # the o bias alone


def test_super_49b_kv_bytes_per_token_by_hand():
    """49 of the 80 layers have attention (31 are no-op: layers 6, 7, 11, 42-51, 53-70), each with 64 / 8 = 8
    KV heads of 128 (`n_heads_in_group` 8 on every one): K and V, 8 heads x 128 values, 2 bytes (bf16) =
    4,096 B a token a layer; x 49 = 200,704 B a token (every layer a Llama-70B layer: 327,680)."""
    m = hf_config.from_hf_config(SUPER)
    assert m.kv_bytes_per_token == 49 * 2 * 8 * 128 * 2 == 200_704
    layout = kv_layout(m, 16)
    assert len(layout.groups) == 1
    assert layout.groups[0].kind == "full"
    assert layout.bytes_per_block == 16 * 200_704
    assert layout.groups[0].layer_ids == tuple(i for i in range(80) if i not in SUPER_NO_OP)
    # an fp8 KV cache: one byte a value
    assert kv_layout(m, 16, kv_bits=8).bytes_per_block == 16 * 100_352


def test_a_no_op_attention_layer_holds_no_kv_and_computes_no_attention():
    m = hf_config.from_hf_config(SUPER)
    layers = m.layer_list()
    assert all(layers[i].kind == "none" for i in SUPER_NO_OP)
    assert sum(lay.kind == "full" for lay in layers) == 49
    assert not m.is_hybrid  # one full-attention group: vLLM's plain KV-cache manager
    # (the roofline attends in the 49 attention layers only)
    (attention,) = roofline_time_model(m, gpu("h100-80gb")).attention
    assert attention.layers == 49


def test_each_layer_keeps_its_own_kv_heads_in_one_group():
    """Layers of 12 / 4 = 3 and 12 / 12 = 1 KV heads, and a no-op one: one full-attention group (vLLM's
    UniformTypeKVCacheSpecs: same kind, per-layer pages), a block taking each layer's page."""
    m = build(nas(block(4), block(None), block(12), block(4, None)))
    assert [lay.kind for lay in m.layer_list()] == ["full", "none", "full", "full"]
    assert m.num_kv_heads == 3
    assert m.layer_list()[2].num_kv_heads == 1
    # K and V x 128 x 2 bytes: 3 + 1 + 3 heads
    assert m.kv_bytes_per_token == 2 * 128 * 2 * (3 + 1 + 3)
    (group,) = kv_layout(m, 16).groups
    assert group.layer_ids == (0, 2, 3)
    assert group.bytes_per_block == 16 * m.kv_bytes_per_token


def test_weights_layer_by_layer():
    """Attention: q and o of 12 heads x 128, k and v of the layer's KV heads, an input norm; MLP: gate, up,
    down of the block's width, a post-attention norm; a no-op part nothing; embeddings, lm_head, final norm."""
    h, v = 1536, 1000
    m = build(nas(block(4, 2.0), block(None, 1.0), block(12, None)))
    w2, w1 = ffn_mult_to_width(2.0, h), ffn_mult_to_width(1.0, h)
    assert (w2, w1) == (2048, 1024)  # 2/3 x 2 x 1536 and 2/3 x 1536, multiples of 256 already

    def attn(kv: int) -> int:
        return 2 * h * 12 * 128 + 2 * h * kv * 128 + h

    expected = 2 * v * h + h + attn(3) + attn(1) + sum(3 * h * w + h for w in (w2, w1))
    assert m.num_params == expected


@pytest.mark.parametrize(
    ("mult", "hidden", "width"),
    [
        (5.25, 8192, 28672),  # exact
        (1.3125, 8192, 7168),  # exact
        (0.5, 8192, 2816),  # int(2730.67) = 2730, up to 11 x 256
        (1.0, 8192, 5632),  # int(5461.33) = 5461, up to 22 x 256
        (3.28125, 8192, 17920),
    ],
)
def test_ffn_width_rounds_up_to_256(mult, hidden, width):
    """vLLM 0.33.0's `_ffn_mult_to_intermediate_size`: int(2 x ffn_mult x hidden / 3), rounded up to 256's
    multiple."""
    assert ffn_mult_to_width(mult, hidden) == width


def test_tensor_parallel_splits_each_layer():
    """Per GPU: 64 / tp query heads, 8 / tp KV heads a layer (at least one, replicated past 8 GPUs), weights
    / tp (norms whole)."""
    m = hf_config.from_hf_config(SUPER)
    for tp, heads in ((1, 8), (2, 4), (4, 2), (8, 1), (16, 1)):
        assert kv_layout(m, 16, tensor_parallel_size=tp).bytes_per_block == 16 * 49 * 2 * heads * 128 * 2
    norms = (49 + 80 + 1) * 8192  # input norms, post-attention norms, the final norm: whole on every GPU
    assert shard(m, None, 8).weight_bytes == 2 * ((m.num_params - norms) // 8 + norms)
    with pytest.raises(UnsplittableModelError, match="does not divide"):
        shard(m, None, 3)  # 64 attention heads


def test_a_layer_whose_kv_heads_the_gpus_do_not_split_is_refused():
    """vLLM's LlamaAttention asserts each layer's KV heads divide among the GPUs (or the GPUs among them):
    a layer of 12 / 4 = 3 KV heads on 2 GPUs is refused, though the model's first layer (6 KV heads) splits."""
    m = build(nas(block(2, 0.75), block(4, 0.75)))  # (MLPs 768 wide: 3 GPUs split them too)
    assert m.num_kv_heads == 6
    shard(m, None, 3)  # 12 heads, 6 and 3 KV heads: each divides by 3
    with pytest.raises(UnsplittableModelError, match="3 KV heads"):
        shard(m, None, 2)


@pytest.mark.parametrize(
    ("blocks", "match"),
    [
        # Llama-3.1-Nemotron-51B's linear attention: vLLM 0.33.0 builds a full attention of a null group
        ((block(None, 1.0, replace_with_linear=True, no_op=False), block()), "replace_with_linear"),
        (
            ({"attention": {"n_heads_in_group": 4}, "ffn": {"replace_with_linear": True}}, block()),
            "replace_with_linear",
        ),
        ((block(5), block()), "'n_heads_in_group' 5"),  # 12 heads
        ((block(None), block(None)), "every block's attention is a no-op"),
        ((block(4, 0.0), block()), "'ffn_mult' 0.0"),
        ((block(4), {"attention": {"n_heads_in_group": 4}}), "'attention' and 'ffn' objects"),
        (({"attention": {"n_heads_in_group": 4}, "ffn": {"ffn_mult": 1.0, "hidden_act": "gelu"}},), "silu"),
    ],
)
def test_what_vllm_does_not_build_is_refused(blocks, match):
    with pytest.raises(InvalidArgumentError, match=match):
        build(nas(*blocks))


def test_blocks_must_list_every_layer():
    with pytest.raises(InvalidArgumentError, match="must list the 3 layers' blocks"):
        build({**nas(block(), block()), "num_hidden_layers": 3})


@pytest.mark.parametrize("field", ["mlp_bias", "attention_bias", "qkv_bias", "bias"])
def test_a_bias_flag_that_is_not_true_or_false_is_refused_by_name(field):
    """`"false"` is not false: the flags were read by their truth, adding biases (an adversarial pass)."""
    with pytest.raises(InvalidArgumentError, match=f"field '{field}' 'no' must be true or false"):
        build(nas(block(), block(), **{field: "no"}))
