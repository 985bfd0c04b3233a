"""The weights of the layers some models build their own way (`kvsim.model.params.param_breakdown` calls
these, each adding its matrices to the model's `Breakdown`): Kimi Delta Attention, the gated delta net
(Qwen3-Next, Qwen3.5/3.6), Gemma 4's layers, MiMo-V2's attention and DeepSeek-V4's, as vLLM 0.33.0 builds
them (DESIGN.md §Defaults and sizing; `params_state` holds the Mamba hybrids', `params_kimi` Kimi-K3's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.hf_layers import kimi_linear_attention
from kvsim.model.param_names import gate_up, qkv
from kvsim.model.params_kimi import KDA_IN_PROJ, KDA_IN_PROJ_PARTS

if TYPE_CHECKING:
    from kvsim.model.breakdown import Breakdown


def kimi_delta_attention(
    b: Breakdown, cfg: Mapping[str, Any], hidden: int, layers: int, at: list[int], where: str
) -> None:
    """The weights of `n` Kimi Delta Attention layers as vLLM 0.33.0 builds them
    (`vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py`, `KimiGatedDeltaNetAttention`, the layer
    `models/kimi_k3/nvidia/model.py` builds where `linear_attn_config` has no `use_full_rank_gate`),
    P = `num_heads` x `head_dim` of the config's `linear_attn_config`: one merged input projection
    `in_proj_qkvgfab` (q, k, v: hidden -> P each; `b_proj`: hidden -> heads; the forget gate's `f_a_proj`:
    hidden -> head_dim, a slice every tensor-parallel rank holds whole, `replicated_shard_id=4`), the forget
    gate's `f_b_proj` (head_dim -> P), the output gate's `g_a_proj` (hidden -> head_dim, a `ReplicatedLinear`:
    whole on every rank) and `g_b_proj` (head_dim -> P), `o_proj` (P -> hidden); outside the matrices the
    three short convolutions (P x kernel each), `dt_bias` (P), `A_log` (heads) and the output norm
    (head_dim). vLLM keeps the convolutions, `dt_bias` and `A_log` in float32; they are counted here in the
    checkpoint's dtype (0.05M of a layer's 39M at Kimi-Linear-48B's sizes).

    The merged projection is one module to a quantization: vLLM asks the ignore list about each of the
    checkpoint's names of its parts (`packed_modules_mapping`: `in_proj_qkvgfab` is `q_proj`, `k_proj`,
    `v_proj`, `b_proj`, `f_a_proj`) and refuses a list that names some of them but not all (`parts`,
    `fused_parts_refusal`); the matrices are named by the first part, `self_attn.q_proj`."""
    heads, head_dim, kernel, _ = kimi_linear_attention(cfg, layers, where)
    p = heads * head_dim
    n = len(at)
    qkv = "self_attn.q_proj"
    parts, fused = KDA_IN_PROJ_PARTS, KDA_IN_PROJ
    b.add("attn", p, hidden, 3 * n, module=qkv, layers=at, parts=parts, fused=fused)  # q, k, v
    b.add("attn", heads, hidden, n, module=qkv, layers=at, parts=parts, fused=fused)  # b_proj
    b.add("attn", head_dim, hidden, n, module=qkv, layers=at, whole=True, parts=parts, fused=fused)  # f_a
    b.add("attn", head_dim, hidden, n, module="self_attn.g_a_proj", layers=at, whole=True)
    b.add("attn", p, head_dim, n, module="self_attn.f_b_proj", layers=at)
    b.add("attn", p, head_dim, n, module="self_attn.g_b_proj", layers=at)
    b.add("attn", hidden, p, n, row=True, module="self_attn.o_proj", layers=at)  # o_proj
    b.loose((3 * p * kernel + p + heads) * n)
    b.loose(head_dim * n, whole=True)  # the output norm


def gated_delta_net(b: Breakdown, cfg: Mapping[str, Any], hidden: int, at: list[int], pick: Any) -> None:
    """The weights of `n` gated delta net layers as vLLM 0.33.0 builds them
    (`vllm/model_executor/models/qwen3_next.py`, `Qwen3NextGatedDeltaNet`): `in_proj_qkvz` (hidden ->
    2·key_dim + 2·value_dim), `in_proj_ba` (hidden -> 2·value heads), `out_proj` (value_dim -> hidden), and
    outside the matrices the depthwise `conv1d` (conv_dim x kernel, conv_dim = 2·key_dim + value_dim),
    `dt_bias` and `A_log` (one per value head) and the gated RMS norm (one value head's width)."""
    nk, nv = pick("linear_num_key_heads"), pick("linear_num_value_heads")
    hk, hv = pick("linear_key_head_dim"), pick("linear_value_head_dim")
    kernel = pick("linear_conv_kernel_dim", default=4, required=False)
    key_dim, value_dim = nk * hk, nv * hv
    n = len(at)
    b.add("attn", 2 * key_dim + 2 * value_dim, hidden, n, module="linear_attn.in_proj_qkvz", layers=at)
    b.add("attn", 2 * nv, hidden, n, module="linear_attn.in_proj_ba", layers=at)
    b.add("attn", hidden, value_dim, n, row=True, module="linear_attn.out_proj", layers=at)
    b.loose(((2 * key_dim + value_dim) * kernel + 2 * nv) * n)  # conv1d, dt_bias, A_log
    b.loose(hv * n, whole=True)  # the gated norm (one value head's width)


def gemma4(
    b: Breakdown,
    cfg: Mapping[str, Any],
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    ffn: int,
    vocab: int,
    pick: Any,
    where: str,
) -> None:
    """Gemma 4's decoder layers as vLLM 0.33.0's `gemma4.py` builds them (`Gemma4DecoderLayer`):

    - attention: a sliding layer's q, k, v, o with `num_key_value_heads` heads of `head_dim`; a global
      (`full_attention`) layer's with heads of `global_head_dim` and, under `attention_k_eq_v`,
      `num_global_key_value_heads`. vLLM's `QKVParallelLinear` keeps a V slot even where the checkpoint
      ships no `v_proj` (K is loaded into both): counted, as it occupies memory. A KV-shared layer (the
      last `num_kv_shared_layers`) has only q and o. `q_norm` and `k_norm` (one head's width; a shared
      layer: `q_norm` only; `v_norm` has no weight);
    - a dense gated MLP of `intermediate_size` on every layer, twice as wide on the KV-shared layers under
      `use_double_wide_mlp`;
    - with `num_experts`: an MoE block beside the MLP on every layer (`num_experts` experts of
      `moe_intermediate_size` / `expert_intermediate_size`, `top_k_experts` per token), its router
      (`proj`: hidden -> experts; `scale`: hidden; `per_expert_scale`: experts) and three more norms;
    - four norms per layer and `layer_scalar` (a buffer, one value);
    - per-layer embeddings (E2B / E4B: `hidden_size_per_layer_input` P > 0, `Gemma4Model`): a second
      embedding table `embed_tokens_per_layer` (`vocab_size_per_layer_input` x layers·P), the
      `per_layer_model_projection` (hidden -> layers·P) and its norm (P); per layer `per_layer_input_gate`
      (hidden -> P), `per_layer_projection` (P -> hidden) and `post_per_layer_input_norm` (hidden). The
      table is counted with the embeddings, the three linear layers (vLLM builds them with the
      quantization config) with the MLP.
    """
    types = cfg.get("layer_types") or []
    global_dim = pick("global_head_dim", default=head_dim, least=1)
    global_kv = kv_heads
    if cfg.get("attention_k_eq_v") and cfg.get("num_global_key_value_heads") is not None:
        global_kv = pick("num_global_key_value_heads")
    shared = cfg.get("num_kv_shared_layers") or 0
    first_shared = layers - shared
    double = bool(cfg.get("use_double_wide_mlp"))
    # None (the dense models' value) is no experts; 0 is no model's (transformers' Gemma4TextConfig
    # leaves it None without `enable_moe_block`, vLLM's MoE block builds `num_experts` of them).
    experts = pick("num_experts", default=0, required=False, least=1)
    for i in range(layers):
        full = i < len(types) and types[i] == "full_attention"
        dim, kv = (global_dim, global_kv) if full else (head_dim, kv_heads)
        is_shared = shared > 0 and i >= first_shared
        b.add(
            "attn",
            heads * dim,
            hidden,
            layers=[i],
            **(qkv("self_attn") if not is_shared else {"module": "self_attn.q_proj"}),
        )  # q
        if not is_shared:
            # k, v (v: K's copy under attention_k_eq_v)
            b.add("attn", kv * dim, hidden, 2, layers=[i], kv_heads=kv, **qkv("self_attn"))
        b.add("attn", hidden, heads * dim, row=True, module="self_attn.o_proj", layers=[i])  # o
        b.loose(dim * (1 if is_shared else 2), whole=True)  # q_norm, k_norm
        width = ffn * (2 if double and is_shared else 1)
        b.add("mlp", width, hidden, 2, layers=[i], **gate_up("mlp"))  # gate, up
        b.add("mlp", hidden, width, row=True, module="mlp.down_proj", layers=[i])  # down
        b.loose(4 * hidden + 1, whole=True)  # four norms, layer_scalar
    if experts:
        moe_ffn = pick("moe_intermediate_size", "expert_intermediate_size", least=1)
        per_tok = pick("top_k_experts")
        if not 1 <= per_tok <= experts:
            raise InvalidArgumentError(
                f"model {where}: field 'top_k_experts' {per_tok} must be from 1 to the {experts} experts"
            )
        b.num_experts, b.experts_per_token, b.expert_ffn = experts, per_tok, moe_ffn
        every = range(layers)
        b.add("experts", moe_ffn, hidden, 2 * experts * layers, module="experts", layers=every)  # gate, up
        b.add("experts", hidden, moe_ffn, experts * layers, module="experts", layers=every)  # down
        b.add("router", experts, hidden, layers, module="router.proj", layers=every)  # proj
        # router scale, per_expert_scale, 3 norms
        b.loose((hidden + experts + 3 * hidden) * layers, whole=True)
    ple = pick("hidden_size_per_layer_input", default=0, required=False)
    if ple:
        ple_vocab = pick("vocab_size_per_layer_input", default=vocab, required=False, least=1)
        every = range(layers)
        b.add("embed", ple_vocab, layers * ple, module="model.embed_tokens_per_layer")
        b.add("mlp", layers * ple, hidden, module="model.per_layer_model_projection")
        # (`ReplicatedLinear`s, `Gemma4DecoderLayer`)
        b.add("mlp", ple, hidden, layers, module="per_layer_input_gate", layers=every, whole=True)
        b.add("mlp", hidden, ple, layers, module="per_layer_projection", layers=every, whole=True)
        b.loose(ple + hidden * layers, whole=True)  # per_layer_projection_norm, post_per_layer_input_norm
    b.loose(hidden, whole=True)  # the final norm


def mimo_v2_attention(
    b: Breakdown,
    cfg: Mapping[str, Any],
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    pick: Any,
) -> None:
    """MiMo-V2-Flash's attention as vLLM 0.33.0's `mimo_v2.py` builds it (`MiMoV2Attention`), each layer by
    its own heads (`kvsim.model.hf_layers._mimo_v2_layers` reads the pattern and checks the fields): a fused
    `qkv_proj` of `heads` query heads and KV heads of the K width (q, k) and the V width (v); `o_proj` from
    `heads` x V width back to hidden; a sliding layer's attention sinks (`add_swa_attention_sink_bias`: one
    value a head, split with the heads; a full layer's only under `add_full_attention_sink_bias`, which
    vLLM 0.33.0's file does not read: none); q, k, v biases under `attention_bias`. No q / k norms."""
    pattern = cfg.get("hybrid_layer_pattern") or [0] * layers
    full_v = pick("v_head_dim", default=head_dim, required=False)
    sinks = bool(cfg.get("add_swa_attention_sink_bias"))
    for i in range(layers):
        if pattern[i]:
            q_heads, kv, k_dim = (
                pick("swa_num_attention_heads"),
                pick("swa_num_key_value_heads"),
                pick("swa_head_dim"),
            )
            v_dim = pick("swa_v_head_dim", default=k_dim, required=False)
        else:
            q_heads, kv, k_dim, v_dim = heads, kv_heads, head_dim, full_v
        q = qkv("self_attn")
        b.add("attn", q_heads * k_dim, hidden, layers=[i], **q)  # q
        b.add("attn", kv * k_dim, hidden, layers=[i], kv_heads=kv, **q)  # k
        b.add("attn", kv * v_dim, hidden, layers=[i], kv_heads=kv, **q)  # v
        b.add("attn", hidden, q_heads * v_dim, row=True, module="self_attn.o_proj", layers=[i])  # o
        if cfg.get("attention_bias"):
            b.loose(q_heads * k_dim)  # q, k, v biases (split with the heads)
            b.loose(kv * (k_dim + v_dim), kv_heads=kv)
        if pattern[i] and sinks:
            b.loose(q_heads)  # the attention sinks (a rank's heads)


def deepseek_v4(
    b: Breakdown, cfg: Mapping[str, Any], layers: int, hidden: int, heads: int, pick: Any, where: str
) -> None:
    """DeepSeek-V4's weights as vLLM 0.33.0 builds them (`vllm/models/deepseek_v4/attention.py`,
    `compressor.py`, `nvidia/model.py`): per layer the attention's `wq_a` / `wkv` (fused), `wq_b`, the grouped
    low-rank output `wo_a` / `wo_b`, its norms and sink; a compressor where the ratio is above 1 (its
    `fused_wkv_wgate` built without the quant config, so unquantized, its `ape` and norm); the indexer on
    ratio-4 layers (`wq_b` quantized, `weights_proj` and its compressor not); the hyper-connection mixing
    (`hc_attn_*`, `hc_ffn_*`: `hc_mult² + 2·hc_mult` rows over `hc_mult · hidden`) and an MoE block on every
    layer. The MTP layer (`num_nextn_predict_layers`) is loaded only for speculative decoding: not counted."""
    head = pick("head_dim")
    q_lora = pick("q_lora_rank")
    o_groups, o_lora = pick("o_groups"), pick("o_lora_rank")
    idx_heads, idx_dim = pick("index_n_heads"), pick("index_head_dim")
    hc = pick("hc_mult", default=1, required=False)
    # `compress_ratios` is checked where the layers are read (`hf_sparse.deepseek_v4_layers`).
    given = cfg.get("compress_ratios")
    ratios = [max(1, r) if isinstance(r, int) else 1 for r in (given if isinstance(given, list) else [])]
    ratios = ratios[:layers]
    n4 = sum(r == 4 for r in ratios)
    every = range(layers)
    # wq_a and wkv: `fused_wqa_wkv`, built with `disable_tp` (whole on every rank)
    b.add("attn", q_lora, hidden, layers, module="attn.fused_wqa_wkv", layers=every, whole=True)  # wq_a
    b.add("attn", head, hidden, layers, module="attn.fused_wqa_wkv", layers=every, whole=True)  # wkv
    b.add("attn", heads * head, q_lora, layers, module="attn.wq_b", layers=every)
    b.add("attn", o_groups * o_lora, heads * head // o_groups, layers, module="attn.wo_a", layers=every)
    b.add("attn", hidden, o_groups * o_lora, layers, row=True, module="attn.wo_b", layers=every)
    b.loose((q_lora + head) * layers, whole=True)  # q_norm, kv_norm
    b.loose(heads * layers)  # attn_sink (a rank's heads)
    # Every rank holds the rest whole: the compressors' `fused_wkv_wgate` (`disable_tp`), `ape` and norm, the
    # indexer's `wq_b` and `weights_proj` (`ReplicatedLinear`s) and its compressor, the hyper-connections.
    for r in ratios:
        if r > 1:
            coff = 2 if r == 4 else 1
            # fused_wkv_wgate, ape, norm
            b.loose(2 * coff * head * hidden + r * coff * head + head, whole=True, gemm=True)
    ratio4 = [i for i, r in enumerate(ratios) if r == 4]
    b.add("attn", idx_heads * idx_dim, q_lora, n4, module="attn.indexer.wq_b", layers=ratio4, whole=True)
    b.loose(
        n4 * (idx_heads * hidden + 2 * 2 * idx_dim * hidden + 4 * 2 * idx_dim + idx_dim),
        whole=True,
        gemm=True,
    )
    mix = hc * hc + 2 * hc
    # The hyper-connection mixers are float32 parameters whatever the checkpoint's dtype
    # (`models/deepseek_v4/nvidia/model.py` lines 623-662 hc_attn_* / hc_ffn_*, 883-901 hc_head_*).
    b.loose(
        2 * layers * (mix * hc * hidden + mix + 3), whole=True, gemm=True, wide=True
    )  # hc_attn_*, hc_ffn_* (fn, base, scale)
    b.loose(hc * hc * hidden + hc + 1, whole=True, gemm=True, wide=True)  # hc_head_*
    b.loose(2 * hidden * layers + hidden, whole=True)  # attn_norm, ffn_norm, the final norm
    experts = pick("n_routed_experts", least=1)  # vLLM's DeepSeek-V4 builds an MoE block on every layer
    moe_ffn = pick("moe_intermediate_size", least=1)
    per_tok = pick("num_experts_per_tok")
    if not 1 <= per_tok <= experts:
        raise InvalidArgumentError(
            f"model {where}: field 'num_experts_per_tok' {per_tok} must be from 1 to the {experts} experts"
        )
    b.num_experts, b.experts_per_token, b.expert_ffn = experts, per_tok, moe_ffn
    b.add("experts", moe_ffn, hidden, 2 * experts * layers, module="ffn.experts", layers=every)
    b.add("experts", hidden, moe_ffn, experts * layers, module="ffn.experts", layers=every)
    shared = pick("n_shared_experts", default=0, required=False)
    sx = "ffn.shared_experts"
    b.add("shared_experts", moe_ffn * shared, hidden, 2 * layers, module=f"{sx}.gate_up_proj", layers=every)
    b.add(
        "shared_experts", hidden, moe_ffn * shared, layers, row=True, module=f"{sx}.down_proj", layers=every
    )
    b.add("router", experts, hidden, layers, module="ffn.gate", layers=every)
    hashed = pick("num_hash_layers", default=0, required=False)
    b.loose(experts * (layers - hashed), whole=True)  # the gate's bias (hash-routed layers have none)
    # A hash-routed layer's token-to-expert table instead, `gate.tid2eid` (vocab x experts a token), int32
    # (`models/deepseek_v4/nvidia/model.py` lines 285-300; int64 only under the mega-MoE backends)
    b.loose(min(hashed, layers) * pick("vocab_size") * per_tok, whole=True, wide=True)
