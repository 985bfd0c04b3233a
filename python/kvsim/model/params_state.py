"""The weights of the Mamba hybrids (DESIGN.md §Defaults and sizing, "State-layer hybrids' weights"): Jamba,
Nemotron-H and Granite 4.0-H, as vLLM 0.33.0 builds them, for `kvsim.model.params.param_breakdown`.

Their decoder layers are not a transformer's attention + MLP: a Mamba layer's mixer replaces the attention,
Jamba puts its experts on every other layer only, and a Nemotron-H layer is one block alone (a Mamba
mixer, an attention, an MLP or an MoE). Counted as a transformer, Jamba-v0.1 was 92 B parameters (it has
52 B) and Nemotron-H-8B 17 B (8 B): their weights took twice the memory they do.

Groups (`kvsim.model.params.GROUPS`): a Mamba 2 mixer's input and output projections are built with the
quantization config (`attn`: they take the attention's place); its depthwise convolution (built with
`quant_config=None`), `A`, `D`, `dt_bias` and gated norm are loose parameters (`other`, the checkpoint's
dtype). Jamba's Mamba 1 mixer builds every projection without the quantization config
(`vllm/model_executor/layers/mamba/mamba_mixer.py`): all of it is counted in `other`, which stays in the
checkpoint's dtype under any quantization.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.hf_layers import (
    granite_layer_is_mamba,
    jamba_attention_layers,
    jamba_period,
    nemotron_h_pattern,
)
from kvsim.model.mamba_dims import cfg_flag as _flag
from kvsim.model.mamba_dims import mamba_dims
from kvsim.model.param_names import gate_up, qkv


def mamba2_mixer(
    b: Any,
    hidden: int,
    heads: int,
    head_dim: int,
    groups: int,
    state: int,
    kernel: int,
    conv_bias: bool,
    bias: bool,
    at: list[int],
) -> None:
    """Mamba 2 mixers on layers `at` (`mamba_mixer2.py`, `MambaMixer2`, named `mixer` by Nemotron-H and
    Granite 4.0-H), I = heads x head_dim, G·N = groups x state:
    `in_proj` (hidden -> 2·I + 2·G·N + heads), `out_proj` (I -> hidden), and outside the matrices the
    convolution over conv_dim = I + 2·G·N channels (kernel wide, a bias each with `use_conv_bias`), the
    projections' biases (`use_bias`), `A`, `D`, `dt_bias` (one a head) and the gated RMS norm (I)."""
    inner = heads * head_dim
    gn = groups * state
    conv_dim = inner + 2 * gn
    n = len(at)
    b.add("attn", 2 * inner + 2 * gn + heads, hidden, n, module="mixer.in_proj", layers=at)
    b.add("attn", hidden, inner, n, row=True, module="mixer.out_proj", layers=at)
    # (all split over the ranks, the gated norm too: `Mixer2RMSNormGated`, a rank's heads; but
    # out_proj's bias, a row-parallel layer's, whole on every rank)
    loose = conv_dim * kernel + (conv_dim if conv_bias else 0) + 3 * heads + inner
    if bias:
        loose += 2 * inner + 2 * gn + heads
        b.loose(hidden * n, whole=True)
    b.loose(loose * n)


def mamba1_mixer(
    b: Any,
    hidden: int,
    inner: int,
    state: int,
    dt_rank: int,
    kernel: int,
    conv_bias: bool,
    bias: bool,
    n: int,
) -> None:
    """`n` Mamba 1 mixers as Jamba builds them (`mamba_mixer.py`, `MambaMixer` with `use_rms_norm`):
    `in_proj` (hidden -> 2·inner), `x_proj` (inner -> dt_rank + 2·state), `dt_proj` (dt_rank -> inner, with
    its bias), `out_proj` (inner -> hidden), the convolution (inner x kernel, a bias each with
    `mamba_conv_bias`), `A` (inner x state), `D` (inner), the norms of dt, B and C, and the projections'
    biases (`mamba_proj_bias`). All unquantized (`other`, see the module docstring). The three norms and
    out_proj's bias (a row-parallel layer's) every tensor-parallel rank holds whole; the rest is split."""
    per = (
        2 * inner * hidden  # in_proj
        + (dt_rank + 2 * state) * inner  # x_proj
        + dt_rank * inner
        + inner  # dt_proj and its bias
        + hidden * inner  # out_proj
        + inner * kernel
        + (inner if conv_bias else 0)  # conv1d
        + inner * state
        + inner  # A, D
        + (2 * inner if bias else 0)  # in_proj's biases
    )
    b.loose(per * n)
    # dt_layernorm, b_layernorm, c_layernorm; out_proj's bias
    b.loose((dt_rank + 2 * state + (hidden if bias else 0)) * n, whole=True)


def _attention(
    b: Any, hidden: int, heads: int, kv_heads: int, head_dim: int, bias: bool, at: list[int], name: str
) -> None:
    """The q, k, v and o of the attention layers `at`, vLLM's module `name` in each (biases on q, k, v and
    o with `bias`)."""
    n = len(at)
    q = qkv(name)  # (vLLM's fused qkv_proj, named by its first part)
    b.add("attn", heads * head_dim, hidden, n, layers=at, **q)
    b.add("attn", kv_heads * head_dim, hidden, 2 * n, layers=at, kv_heads=kv_heads, **q)
    b.add("attn", hidden, heads * head_dim, n, row=True, module=f"{name}.o_proj", layers=at)
    if bias:
        b.loose(heads * head_dim * n)
        b.loose(2 * kv_heads * head_dim * n, kv_heads=kv_heads)
        b.loose(hidden * n, whole=True)  # o's bias (row-parallel: whole on every rank)


def _experts(
    b: Any,
    experts: int,
    per_tok: int,
    moe_ffn: int,
    width: int,
    gated: bool,
    at: list[int],
    where: str,
    key: str,
    name: str,
) -> None:
    """`experts` routed experts of `moe_ffn` over inputs of `width` (gate and up, or up alone where not
    `gated`; down) on layers `at`, vLLM's fused-MoE module `name` in each."""
    n = len(at)
    if not 1 <= per_tok <= experts:
        raise InvalidArgumentError(
            f"model {where}: field {key!r} {per_tok} must be from 1 to the {experts} experts"
        )
    b.num_experts, b.experts_per_token, b.expert_ffn = experts, per_tok, moe_ffn
    b.add("experts", moe_ffn, width, (2 if gated else 1) * experts * n, module=name, layers=at)
    b.add("experts", width, moe_ffn, experts * n, module=name, layers=at)


def jamba(
    b: Any,
    cfg: Mapping[str, Any],
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    pick: Any,
    where: str,
) -> None:
    """Jamba's layers (`vllm/model_executor/models/jamba.py`): attention on the layers where
    `i % attn_layer_period == attn_layer_offset` (q, k, v, o without biases, heads of hidden / heads), a
    Mamba 1 mixer on the others (inner = `mamba_expand` x hidden, `mamba_dt_rank` "auto" = ceil(hidden /
    16), transformers' `JambaConfig`); the feed-forward an MoE of `num_experts` gated experts of
    `intermediate_size` with a router where `i % expert_layer_period == expert_layer_offset`
    (`layers_num_experts`), else a dense gated MLP of the same width; two norms a layer and the final one.
    The attention pattern is read once, by `hf_layers` (its kinds here, the caches there)."""
    attn = jamba_attention_layers(cfg, layers, where)
    n_attn = sum(attn)
    d = mamba_dims(cfg, "jamba", where)
    assert d is not None
    _attention(
        b, hidden, heads, kv_heads, hidden // heads, False, [i for i in range(layers) if attn[i]], "self_attn"
    )
    mamba1_mixer(b, hidden, d.inner, d.state, d.dt_rank, d.kernel, d.conv_bias, d.bias, layers - n_attn)
    # (`num_local_experts` is JambaConfig's other name for `num_experts`)
    experts = pick("num_experts", "num_local_experts", default=16, least=1)
    period, offset = jamba_period(cfg, "expert", 2, 1, where)
    moe_at = [i for i in range(layers) if i % period == offset] if experts > 1 else []
    n_moe = len(moe_at)
    dense_at = [i for i in range(layers) if i not in moe_at]
    if n_moe:
        _experts(
            b,
            experts,
            pick("num_experts_per_tok", default=2),
            ffn,
            hidden,
            True,
            moe_at,
            where,
            "num_experts_per_tok",
            "feed_forward.experts",
        )
        b.add("router", experts, hidden, n_moe, module="feed_forward.router", layers=moe_at)
    n_dense = layers - n_moe
    b.add("mlp", ffn, hidden, 2 * n_dense, layers=dense_at, **gate_up("feed_forward"))  # gate, up
    b.add("mlp", hidden, ffn, n_dense, row=True, module="feed_forward.down_proj", layers=dense_at)
    b.loose(2 * hidden * layers + hidden, whole=True)  # the norms


def nemotron_h(
    b: Any,
    cfg: Mapping[str, Any],
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    pick: Any,
    where: str,
) -> None:
    """Nemotron-H's layers (`vllm/model_executor/models/nemotron_h.py`), one block each by its letter of
    `hybrid_override_pattern` (or its `layers_block_type`): `M` a Mamba 2 mixer (`mamba_num_heads` x
    `mamba_head_dim`, `n_groups`, `ssm_state_size`, `conv_kernel`, `use_conv_bias`, `use_bias`); `*` an
    attention (q, k, v, o without biases); `-` an ungated MLP (`up_proj`, `down_proj`: squared ReLU) of
    `intermediate_size` (a list: the k-th MLP layer's); `E` an MoE block: its router (hidden -> experts,
    float32, and its `e_score_correction_bias`), `n_routed_experts` ungated experts of
    `moe_intermediate_size`, a shared ungated MLP of `n_shared_experts` x
    `moe_shared_expert_intermediate_size`, and with `moe_latent_size` L the experts work in L (their inputs
    and outputs L wide) between `fc1_latent_proj` (hidden -> L) and `fc2_latent_proj` (L -> hidden). One
    norm a layer and the final one. Defaults are transformers' `NemotronHConfig`'s."""
    letters = nemotron_h_pattern(cfg, layers, where)
    bias = _flag(cfg, False, where, "mlp_bias")
    d = mamba_dims(cfg, "nemotron_h", where)
    assert d is not None

    def at(letter: str) -> list[int]:
        return [i for i, c in enumerate(letters) if c == letter]

    # (every block is vLLM's `mixer` of its layer: `model.layers.N.mixer.*`, the checkpoint's
    # `backbone.layers.N.mixer.*`)
    mamba2_mixer(b, hidden, d.heads, d.head_dim, d.groups, d.state, d.kernel, d.conv_bias, d.bias, at("M"))
    _attention(b, hidden, heads, kv_heads, head_dim, False, at("*"), "mixer")
    widths = cfg.get("intermediate_size")
    n_mlp = letters.count("-")
    if isinstance(widths, list) and (
        len(widths) not in (1, n_mlp)
        or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths)
    ):
        raise InvalidArgumentError(
            f"model {where}: field 'intermediate_size' {widths!r} must be one width, or a list of one or of the "
            f"{n_mlp} MLP layers' widths (whole numbers of at least 1)"
        )
    for k, i in enumerate(at("-")):
        if isinstance(widths, list):
            w = widths[0] if len(widths) == 1 else widths[k]
        else:
            w = pick("intermediate_size", default=21504, least=1)
        b.add("mlp", w, hidden, module="mixer.up_proj", layers=[i])  # up
        b.add("mlp", hidden, w, row=True, module="mixer.down_proj", layers=[i])  # down
        if bias:
            b.loose(w)
            b.loose(hidden, whole=True)  # down's bias (row-parallel)
    n_moe = letters.count("E")
    if n_moe:
        experts = pick("n_routed_experts", "num_local_experts", default=8, least=1)
        latent = pick("moe_latent_size", default=0, required=False, least=1)
        width = latent or hidden
        _experts(
            b,
            experts,
            pick("num_experts_per_tok", default=2),
            pick("moe_intermediate_size", default=7688, least=1),
            width,
            False,
            at("E"),
            where,
            "num_experts_per_tok",
            "mixer.experts",
        )
        b.add("router", experts, hidden, n_moe, module="mixer.gate", layers=at("E"))
        b.loose(experts * n_moe, whole=True)  # e_score_correction_bias (the router's)
        shared = pick("n_shared_experts", default=1, required=False) * pick(
            "moe_shared_expert_intermediate_size", default=7688, least=1
        )
        sx = "mixer.shared_experts"
        b.add("shared_experts", shared, hidden, n_moe, module=f"{sx}.up_proj", layers=at("E"))
        b.add("shared_experts", hidden, shared, n_moe, row=True, module=f"{sx}.down_proj", layers=at("E"))
        if latent:
            # `ReplicatedLinear`s: whole on every rank (vLLM 0.33.0's `nemotron_h.py`, NemotronHMoE)
            b.add("mlp", latent, hidden, n_moe, module="mixer.fc1_latent_proj", layers=at("E"), whole=True)
            b.add("mlp", hidden, latent, n_moe, module="mixer.fc2_latent_proj", layers=at("E"), whole=True)
            if bias:
                b.loose((latent + hidden) * n_moe, whole=True)
        # (the shared expert is built without `mlp_bias`: NemotronHMLP's default, no bias)
    b.loose(hidden * layers + hidden, whole=True)  # the norms


def granite_moe_hybrid(
    b: Any,
    cfg: Mapping[str, Any],
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    pick: Any,
    where: str,
) -> None:
    """Granite 4.0-H's layers (`vllm/model_executor/models/granitemoehybrid.py`): the mixer a Mamba 2
    (inner `mamba_expand` x hidden in `mamba_n_heads` heads of `mamba_d_head`, "auto": inner / heads;
    `mamba_n_groups`, `mamba_d_state`, `mamba_d_conv`, `mamba_conv_bias`, `mamba_proj_bias`) or, by
    `layer_types`, an attention (heads of hidden / heads, biases with `attention_bias`); beside it on every
    layer an MoE block of `num_local_experts` gated experts of `intermediate_size` with its router where
    there are experts, and a shared gated MLP of `shared_intermediate_size` where that is not 0; two norms a
    layer and the final one. Defaults are transformers' `GraniteMoeHybridConfig`'s."""
    mamba = granite_layer_is_mamba(cfg, layers, where)
    d = mamba_dims(cfg, "granitemoehybrid", where)
    assert d is not None
    mamba_at = [i for i in range(layers) if mamba[i]]
    mamba2_mixer(b, hidden, d.heads, d.head_dim, d.groups, d.state, d.kernel, d.conv_bias, d.bias, mamba_at)
    _attention(
        b,
        hidden,
        heads,
        kv_heads,
        hidden // heads,
        _flag(cfg, False, where, "attention_bias"),
        [i for i in range(layers) if not mamba[i]],
        "self_attn",
    )
    every = range(layers)
    experts = pick("num_local_experts", default=8, required=False)
    if experts:
        _experts(
            b,
            experts,
            pick("num_experts_per_tok", default=2),
            ffn,
            hidden,
            True,
            list(every),
            where,
            "num_experts_per_tok",
            "block_sparse_moe.experts",
        )
        b.add("router", experts, hidden, layers, module="block_sparse_moe.router", layers=every)
    shared = pick("shared_intermediate_size", default=1024, required=False)
    if shared:
        # input_linear (gate, up), output_linear
        b.add("mlp", shared, hidden, 2 * layers, module="shared_mlp.input_linear", layers=every)
        b.add("mlp", hidden, shared, layers, row=True, module="shared_mlp.output_linear", layers=every)
    b.loose(2 * hidden * layers + hidden, whole=True)  # the norms


__all__ = ["granite_moe_hybrid", "jamba", "mamba1_mixer", "mamba2_mixer", "nemotron_h"]
