"""A model's parameters by module, derived from a Hugging Face `config.json` (DESIGN.md §Defaults and sizing).

`param_breakdown` lists every weight matrix of a decoder-only transformer as vLLM builds it, grouped by the
module it belongs to, so that a quantization (`kvsim.model.quant`) can price each group in its own format:

- `embed` (`model.embed_tokens`) and `lm_head` (absent when the embeddings are tied);
- `attn`: q, k, v and o projections (MLA: its low-rank projections), per layer; a gated delta net layer's
  input and output projections in their stead (Qwen3-Next, Qwen3.5);
- `mlp`: a dense layer's gated MLP (three matrices; OPT/GPT and Nemotron-H's squared-ReLU MLP: two), per
  layer; Granite 4.0-H's shared MLP, Nemotron-H's latent projections (`kvsim.model.params_state`);
- `experts`: every routed expert's matrices (in memory all of them; per token `num_experts_per_tok`);
- `shared_experts`: experts every token passes through (DeepSeek, Llama 4, Qwen2-MoE);
- `router`: the gate picking the experts;
- `other`: norms, biases, attention sinks, learned positions: kept in the checkpoint's dtype.

Tensor parallelism splits most weights over the ranks, but vLLM builds some whole on every rank
(`ReplicatedLinear`, or a merged linear layer with `disable_tp`): those matrices are marked `whole`, and the
part of `other` every rank holds whole (the norms, a row-parallel layer's bias, the routers' biases) is
`Breakdown.other_whole`. `kvsim.model.shard` counts them whole on every GPU, the rest / tp. As vLLM 0.33.0
builds them (DESIGN.md §Defaults and sizing, "Tensor parallelism"): every router (`router`: vLLM's
`GateLinear`, a `ReplicatedLinear`, and Qwen's `shared_expert_gate`); MLA's `q_a_proj` and
`kv_a_proj_with_mqa` (`deepseek_v2.py`, fused in `fused_qkv_a_proj` with `disable_tp`); DeepSeek-V3.2's
indexer (`wq_b`, `wk_weights_proj`); DeepSeek-V4's `fused_wqa_wkv`, compressors, indexer and hyper-connection
weights; Nemotron-H's latent projections; Gemma 4's per-layer input gate and projection; KDA's `f_a_proj` and
`g_a_proj`.
A `whole` matrix keeps its module's name and decoder layers, so that it is priced layer by layer as the
others are (`Breakdown.whole_part`, `kvsim.model.quant.Quantization.group_bytes`).

A `Matrix` is `count` matrices of `rows` x `cols` (output x input features). The totals equal the published
parameter counts of the checkpoints the test-suite holds (Llama, Qwen2.5/3, gpt-oss, Mixtral, DeepSeek-V3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model import params_models, params_state
from kvsim.model.breakdown import GROUPS, LAYERS_PREFIX, Breakdown, Matrix
from kvsim.model.dsa import MINIMAX_M3_TYPES, minimax_m3_sparse
from kvsim.model.hf_layers import (
    MIMO_V2_TYPES,
    full_attention_interval,
    kimi_full_rank_gate,
    kimi_linear_attention,
)
from kvsim.model.hf_sparse import DSA_TYPES, dsa_indexer_layers
from kvsim.model.nemotron_nas import MODEL_TYPE as NAS_TYPE
from kvsim.model.nemotron_nas import nas_blocks, nemotron_nas
from kvsim.model.param_names import gate_up, qkv
from kvsim.model.params_kimi import kimi_k3

# The model types whose MoE gate vLLM 0.33.0 builds in float32 whatever the checkpoint's dtype
# (`GateLinear(..., params_dtype=torch.float32)`): MiniMax-M2 (`model_executor/models/minimax_m2.py` lines
# 110-117), MiniMax-M3 (`models/minimax_m3/nvidia/model.py` lines 231-239), GLM-4.5 / 4.6 / 4.7
# (`model_executor/models/glm4_moe.py` lines 141-147).
FP32_ROUTER_TYPES = frozenset({"minimax_m2", "glm4_moe", *MINIMAX_M3_TYPES})


def _layer_flags(cfg: Mapping[str, Any], layers: int, experts: int, pick: Any, where: str) -> list[bool]:
    """Which decoder layers hold routed experts (True) rather than a dense MLP. A step of MoE layers
    (`decoder_sparse_step`, `interleave_moe_layer_step`) is a whole number of at least 1."""
    if not experts:
        return [False] * layers
    moe_layers = cfg.get("moe_layers")
    if isinstance(moe_layers, list) and all(isinstance(i, int) for i in moe_layers):  # Llama 4
        wanted = set(moe_layers)
        return [i in wanted for i in range(layers)]
    freq = cfg.get("moe_layer_freq")
    if isinstance(freq, list) and len(freq) == layers:  # a per-layer mask
        return [bool(x) for x in freq]
    if freq is not None and (isinstance(freq, bool) or not isinstance(freq, int) or freq < 1):
        # (vLLM's DeepSeek / Kimi: `layer_idx % moe_layer_freq`, a ZeroDivisionError at 0)
        raise InvalidArgumentError(
            f"model {where}: field 'moe_layer_freq' {freq!r} must be a whole number of at least 1 "
            f"(or a list of the {layers} layers' flags)"
        )
    dense_first = pick("first_k_dense_replace", default=0, required=False)
    step = pick("decoder_sparse_step", "interleave_moe_layer_step", default=1, required=False)
    if step < 1:
        key = (
            "decoder_sparse_step"
            if cfg.get("decoder_sparse_step") is not None
            else "interleave_moe_layer_step"
        )
        raise InvalidArgumentError(
            f"model {where}: field {key!r} {step} must be a whole number of at least 1"
        )
    # Which layer of each step: Qwen's `decoder_sparse_step` and Llama 4's `interleave_moe_layer_step`
    # take the last (`(layer_idx + 1) % step == 0`), DeepSeek / Kimi's `moe_layer_freq` the first
    # (`layer_idx % moe_layer_freq == 0`, vLLM's `deepseek_v2.py` DeepseekV2DecoderLayer)
    first = 0
    if isinstance(freq, int) and freq > 1:
        step, first = freq, 1
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in only):
        raise InvalidArgumentError(f"model {where}: field 'mlp_only_layers' {only!r} must list layer numbers")
    only_mlp = set(only)
    return [i >= dense_first and (i + 1 - first) % step == 0 and i not in only_mlp for i in range(layers)]


def _minimax_m3_moe_layers(cfg: Mapping[str, Any], layers: int, where: str) -> None:
    """MiniMax-M3's `moe_layer_freq` as vLLM 0.33.0 reads it (`nvidia/model.py` `_is_moe_layer`:
    `moe_layer_freq[layer_id] != 0`, no `first_k_dense_replace`): a list of the layers' 0 / 1.

    Raises:
        InvalidArgumentError: no `moe_layer_freq` (vLLM's `MiniMaxM3TextConfig` puts the preview checkpoint's
            3 dense then 57 MoE layers in its place, which kvsim does not guess, as for
            `sparse_attention_config`), or one that is not a list of the layers' whole numbers (vLLM indexes
            it by layer: a number fails there).
    """
    freq = cfg.get("moe_layer_freq")
    if freq is None:
        raise InvalidArgumentError(
            f"model {where}: MiniMax-M3 without 'moe_layer_freq': vLLM 0.33.0's MiniMaxM3TextConfig would put the "
            "preview checkpoint's (3 dense layers, then 57 MoE) in its place and reads no 'first_k_dense_replace', "
            "which kvsim does not guess (vLLM 0.34.0's, transformers' MiniMaxM3VLTextConfig, makes every layer "
            "MoE, as vllm_release 0.34.0 sizes it); give the field (or transformers 5's 'mlp_layer_types')"
        )
    if not isinstance(freq, list) or len(freq) != layers or not all(isinstance(f, int) for f in freq):
        raise InvalidArgumentError(
            f"model {where}: field 'moe_layer_freq' {freq!r} must list the {layers} layers, each 0 (a dense MLP) "
            "or 1 (MoE): vLLM 0.33.0's MiniMax-M3 reads it by layer (`_is_moe_layer`), 0.34.0's as transformers' "
            "'mlp_layer_types' (any entry not 0 a MoE layer)"
        )


def _minimax_m3_routing_bias(cfg: Mapping[str, Any], where: str) -> bool:
    """Whether MiniMax-M3's MoE layers hold the router's `e_score_correction_bias` (`MiniMaxM3MoE`:
    `use_routing_bias`, true when absent: `MiniMaxM3TextConfig`'s default).

    Raises:
        InvalidArgumentError: a `use_routing_bias` that is not true or false.
    """
    v = cfg.get("use_routing_bias", True)
    if not isinstance(v, bool):
        raise InvalidArgumentError(f"model {where}: field 'use_routing_bias' {v!r} must be true or false")
    return v


def _linear_attention_layers(cfg: Mapping[str, Any], layers: int, where: str) -> list[bool]:
    """Which decoder layers' mixer is a state layer: a gated delta net (Qwen3-Next / Qwen3.5's
    `linear_attention` layers, from `layer_types`, else Qwen3-Next's `full_attention_interval`) or Kimi's
    KDA (`linear_attn_config.kda_layers`, 1-based), as `kvsim.model.hf_layers.layers_from_hf_config` reads
    them."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        return [t == "linear_attention" for t in types]
    lac = cfg.get("linear_attn_config")
    if str(cfg.get("model_type", "")).startswith("kimi_linear") and lac is not None:
        kda = kimi_linear_attention(cfg, layers, where)[3]  # Kimi-Linear's KDA layers
        return [i + 1 in kda for i in range(layers)]
    if cfg.get("model_type") == "qwen3_next" or cfg.get("linear_num_value_heads") is not None:
        interval = full_attention_interval(cfg, where)
        return [bool((i + 1) % interval) for i in range(layers)]
    return [False] * layers


def param_breakdown(
    cfg: Mapping[str, Any],
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    ffn: int,
    vocab: int,
    kv_lora: int,
    rope: int,
    pick: Any,
    where: str,
) -> Breakdown:
    """The weight matrices of the model `cfg` describes (see the module docstring); `where` names it in
    errors.

    Raises:
        InvalidArgumentError: a field whose value no model has (an MoE step or `experts_per_token` of 0,
            gpt-oss without experts), named.
    """
    model_type = str(cfg.get("model_type", ""))
    opt_like = model_type in ("opt", "gpt2", "gpt_neox", "gptj", "falcon", "bloom")
    # transformers' default: Gemma and OPT-like models tie their embeddings unless the config says not.
    tie = cfg.get("tie_word_embeddings")
    if tie is not None and not isinstance(tie, bool):
        raise InvalidArgumentError(
            f"model {where}: field 'tie_word_embeddings' {tie!r} must be true or false"
        )
    tied = tie if tie is not None else opt_like or model_type.startswith("gemma")
    if model_type in ("jamba", "nemotron_h"):
        tied = (
            False  # vLLM 0.33.0's jamba.py and nemotron_h.py build their own lm_head whatever the config says
        )
    b = Breakdown(aliases=("backbone",) if model_type == "nemotron_h" else ())
    b.add("embed", vocab, hidden, module="model.embed_tokens")
    if not tied:
        b.add("lm_head", vocab, hidden, module="lm_head")
    if model_type.startswith("gemma4"):
        params_models.gemma4(b, cfg, layers, hidden, heads, kv_heads, head_dim, ffn, vocab, pick, where)
        return b
    if model_type == "deepseek_v4":
        params_models.deepseek_v4(b, cfg, layers, hidden, heads, pick, where)
        return b
    # The Mamba hybrids whose layers are not attention + MLP (`kvsim.model.params_state`).
    if model_type == "jamba":
        params_state.jamba(b, cfg, layers, hidden, heads, kv_heads, ffn, pick, where)
        return b
    if model_type == "nemotron_h":
        params_state.nemotron_h(b, cfg, layers, hidden, heads, kv_heads, head_dim, pick, where)
        return b
    if model_type == NAS_TYPE:
        blocks = nas_blocks(cfg, layers, heads, hidden, where)
        nemotron_nas(b, cfg, blocks, hidden, heads, head_dim, where)
        return b
    if model_type == "granitemoehybrid":
        params_state.granite_moe_hybrid(b, cfg, layers, hidden, heads, kv_heads, ffn, pick, where)
        return b
    if model_type.startswith("kimi_linear") and not kimi_full_rank_gate(cfg):
        # (Kimi-K3's fields, read on its path only: vLLM builds them for any Kimi-Linear config, kvsim does not)
        k3 = [
            k
            for k in ("mla_use_output_gate", "routed_expert_hidden_size", "attn_res_block_size")
            if cfg.get(k)
        ]
        if k3:
            raise InvalidArgumentError(
                f"model {where}: field {k3[0]!r} (Kimi-K3's) without linear_attn_config.use_full_rank_gate is "
                "not modelled by kvsim: it reads Kimi-K3's output gate, latent experts and attention residuals "
                "only with its full-rank KDA gate"
            )
    if model_type.startswith("kimi_linear") and kimi_full_rank_gate(cfg):  # Kimi-K3's language model
        linear = _linear_attention_layers(cfg, layers, where)
        experts = pick("num_experts", least=1)
        moe_flags = _layer_flags(cfg, layers, experts, pick, where)
        kda_at = [i for i in range(layers) if linear[i]]
        kimi_k3(b, cfg, layers, hidden, heads, kda_at, moe_flags, pick, where)
        return b
    if model_type == "opt":
        # learned positions (offset 2; `OPTLearnedPositionalEmbedding`, an `nn.Embedding` every rank holds)
        b.loose((pick("max_position_embeddings", default=2048) + 2) * hidden, whole=True)
    # Attention. State layers (Qwen3-Next / Qwen3.5's gated delta net, Kimi-Linear's KDA) replace it with
    # their mixer (below).
    linear = _linear_attention_layers(cfg, layers, where)
    n_linear = sum(linear)
    n_attn = layers - n_linear
    at = [i for i in range(layers) if not linear[i]]  # the attention layers
    if kv_lora:
        q_lora = pick("q_lora_rank", default=0, required=False)
        nope = pick("qk_nope_head_dim", default=head_dim, required=False)
        v_dim = pick("v_head_dim", default=head_dim, required=False)
        # (vLLM's MLA names: `deepseek_v2.py` DeepseekV2MLAAttention, which GLM-5's and Kimi's files reuse.)
        # The low-rank A projections `q_a_proj` and `kv_a_proj_with_mqa` every rank holds whole
        # (`ReplicatedLinear`s, or fused in `fused_qkv_a_proj` with `disable_tp`: vLLM 0.33.0's
        # `deepseek_v2.py` DeepseekV2Attention and DeepseekV2MLAAttention, `deepseek_v32/attention.py`,
        # Kimi-Linear's `kimi_k3/nvidia/mla.py`); `q_proj`, `q_b_proj` and `kv_b_proj` are split by heads.
        if q_lora:
            b.add("attn", q_lora, hidden, n_attn, module="self_attn.q_a_proj", layers=at, whole=True)
            b.add("attn", heads * (nope + rope), q_lora, n_attn, module="self_attn.q_b_proj", layers=at)
            b.loose(q_lora * n_attn, whole=True)  # q_a_layernorm
        else:
            b.add("attn", heads * (nope + rope), hidden, n_attn, module="self_attn.q_proj", layers=at)
        kv_a = "self_attn.kv_a_proj_with_mqa"
        b.add("attn", kv_lora + rope, hidden, n_attn, module=kv_a, layers=at, whole=True)
        b.add("attn", heads * (nope + v_dim), kv_lora, n_attn, module="self_attn.kv_b_proj", layers=at)
        b.add("attn", hidden, heads * v_dim, n_attn, row=True, module="self_attn.o_proj", layers=at)
        b.loose(kv_lora * n_attn, whole=True)  # kv_a_layernorm
        if model_type in DSA_TYPES and cfg.get("index_topk") is not None:
            # DeepSeek-V3.2's indexer where a layer builds one (vLLM 0.33.0's `deepseek_v32/attention.py`):
            # `wq_b` (q_lora -> heads x head_dim, with the quant config), `wk` and `weights_proj` fused
            # (hidden -> head_dim + heads, unquantized: an fp8 checkpoint's wk is loaded in bf16) and `k_norm`
            # (a LayerNorm, weight and bias). All whole on every rank (`wq_b` a `ReplicatedLinear`,
            # `wk_weights_proj` built with `disable_tp`).
            indexed = [i for i, has in enumerate(dsa_indexer_layers(cfg, layers, where)) if has]
            n_index = len(indexed)
            idx_heads, idx_dim = pick("index_n_heads", least=1), pick("index_head_dim", least=1)
            # (q_lora_rank required: hf_layers)
            wq_b = "self_attn.indexer.wq_b"
            b.add("attn", idx_heads * idx_dim, q_lora, n_index, module=wq_b, layers=indexed, whole=True)
            b.loose(((idx_dim + idx_heads) * hidden + 2 * idx_dim) * n_index, whole=True, gemm=True)
    elif model_type in MIMO_V2_TYPES:
        params_models.mimo_v2_attention(b, cfg, layers, hidden, heads, kv_heads, head_dim, pick)
    else:
        # The attention layers that remain of a gated delta net model gate their output with a second
        # query-sized projection.
        gated = n_linear > 0 or bool(cfg.get("attn_output_gate"))
        q = qkv("self_attn")  # (q, k and v: vLLM's fused qkv_proj, named by its first part)
        b.add("attn", heads * head_dim * (2 if gated else 1), hidden, n_attn, layers=at, **q)
        b.add("attn", kv_heads * head_dim, hidden, 2 * n_attn, layers=at, kv_heads=kv_heads, **q)
        b.add("attn", hidden, heads * head_dim, n_attn, row=True, module="self_attn.o_proj", layers=at)
        if model_type in MINIMAX_M3_TYPES:
            # MiniMax-M3's sparse layers (vLLM 0.33.0's `models/minimax_m3/nvidia/model.py`
            # MiniMaxM3SparseAttention): `index_q` (`sparse_num_index_heads` x `sparse_index_dim`, split as the
            # KV heads are) and `index_k` (one head, whole on every rank) fused into the layer's qkv_proj
            # (`MinimaxM3QKVParallelLinearWithIndexer`, priced as q, k and v are), and their norms
            # (`index_q_norm`, `index_k_norm`: a head's width each, whole on every rank).
            m3 = minimax_m3_sparse(cfg, layers, where)
            sparse_at = [i for i, s in enumerate(m3.layers) if s]
            n_sparse = len(sparse_at)
            # index_q (as many heads as KV heads, vLLM asserts: replicated as they are)
            b.add(
                "attn",
                m3.index_heads * m3.index_dim,
                hidden,
                n_sparse,
                layers=sparse_at,
                kv_heads=m3.index_heads,
                **q,
            )
            b.add("attn", m3.index_dim, hidden, n_sparse, layers=sparse_at, whole=True, **q)  # index_k
            b.loose(2 * m3.index_dim * n_sparse, whole=True)  # index_q_norm, index_k_norm
        # Biases: a column-parallel layer's (q, k, v) split with it, a row-parallel one's (the output
        # projection's) whole on every rank (`RowParallelLinear`).
        if opt_like:
            b.loose(heads * head_dim * layers)  # q, k, v biases
            b.loose(2 * kv_heads * head_dim * layers, kv_heads=kv_heads)
            b.loose(hidden * layers, whole=True)  # the output projection's bias
        elif cfg.get("attention_bias") or model_type.startswith("qwen2"):
            b.loose(heads * head_dim * layers)  # q, k, v biases (Qwen2)
            b.loose(2 * kv_heads * head_dim * layers, kv_heads=kv_heads)
            if model_type == "gpt_oss":
                b.loose(hidden * layers, whole=True)  # o_proj's bias
                b.loose(heads * layers)  # the attention sinks (a rank's heads)
        if model_type.startswith(("qwen3", "gemma3", "minimax_m2")):
            # q_norm, k_norm: one head's width (Qwen3, Gemma 3; Llama 4's qk norm has no weight), whole on
            # every rank, or every head's (MiniMax-M2's per-layer qk norm over the whole projection, split
            # with the heads: `MiniMaxText01RMSNormTP`, `minimax_m2.py`).
            if model_type.startswith("minimax_m2"):
                # (k_norm sharded as the KV heads are, replicated past them: `weight_shard_world_size`)
                b.loose(heads * head_dim * n_attn)
                b.loose(kv_heads * head_dim * n_attn, kv_heads=kv_heads)
            else:
                b.loose(2 * head_dim * n_attn, whole=True)
        if model_type in MINIMAX_M3_TYPES:
            # q_norm, k_norm: one head's width each, whole on every rank (MiniMax-M3's per-head
            # `MiniMAXGemmaRMSNorm(head_dim)`, `models/minimax_m3/nvidia/model.py`)
            b.loose(2 * head_dim * n_attn, whole=True)
    state = [i for i in range(layers) if linear[i]]
    if n_linear and model_type.startswith("kimi_linear"):
        params_models.kimi_delta_attention(b, cfg, hidden, layers, state, where)
    elif n_linear:
        params_models.gated_delta_net(b, cfg, hidden, state, pick)
    # Norms: two per layer (Gemma 2/3: four), the final one; OPT/GPT's LayerNorms have biases.
    per_layer_norms = 4 if model_type.startswith(("gemma2", "gemma3")) else 2
    b.loose((per_layer_norms * hidden * layers + hidden) * (2 if opt_like else 1), whole=True)
    # MLP and experts.
    is_m3 = model_type in MINIMAX_M3_TYPES
    # (MiniMax-M3: `MiniMaxM3TextConfig`'s defaults where a field is absent, as vLLM 0.33.0 reads the config)
    experts = pick(
        "n_routed_experts", "num_local_experts", "num_experts", default=128 if is_m3 else 0, required=False
    )
    if model_type == "gpt_oss" and experts < 1:  # vLLM's gpt_oss.py: every layer's MLP is its experts
        raise InvalidArgumentError(
            f"model {where}: field 'num_local_experts' {experts} must be at least 1 (gpt-oss's MLP is its experts)"
        )
    # A count of 0 where vLLM 0.33.0 builds the MoE block whenever the field is set (not None) would be a
    # router and experts of none, no checkpoint: every model reading `n_routed_experts` (DeepSeek's
    # `deepseek_v2.py` DeepseekV2DecoderLayer, `glm4_moe.py`: `n_routed_experts is not None`), Kimi-Linear
    # (`models/kimi_k3/nvidia/model.py`: `is_moe` is `num_experts is not None`) and Mixtral (every layer).
    # Qwen's MoE models check `num_experts > 0` and build a dense MLP, as kvsim does.
    zero_moe = ["n_routed_experts"]
    if model_type.startswith("kimi_linear"):
        zero_moe.append("num_experts")
    if model_type.startswith("mixtral"):
        zero_moe.append("num_local_experts")
    for key in zero_moe:
        if cfg.get(key) == 0 and not isinstance(cfg.get(key), bool):
            raise InvalidArgumentError(
                f"model {where}: field {key!r} 0: vLLM builds this model's MoE block whenever the field is set, "
                "and one of no experts is no model it loads (leave the field out, or null, for a dense model)"
            )
    if is_m3:
        _minimax_m3_moe_layers(cfg, layers, where)
    moe_flags = _layer_flags(cfg, layers, experts, pick, where)
    n_moe = sum(moe_flags)
    n_dense = layers - n_moe
    moe_at = [i for i in range(layers) if moe_flags[i]]
    dense_at = [i for i in range(layers) if not moe_flags[i]]
    # (Llama 4 names its MLP and MoE block `feed_forward`; Kimi-Linear, Mixtral, PhiMoE, Granite MoE and
    # MiniMax-M3 their MoE block `block_sparse_moe`, as their checkpoints do, and a dense MLP `mlp`: vLLM
    # 0.33.0 builds the block with the `block_sparse_moe` prefix, the name a quantization's ignore list or
    # per-module map is read against (`models/kimi_k3/nvidia/model.py` KimiDecoderLayer, which sets
    # `self.mlp = self.block_sparse_moe` too; `mixtral.py`, `phimoe.py`, `granitemoe.py`,
    # `granitemoeshared.py`, `models/minimax_m3/nvidia/model.py`); MiniMax-M2's is built as `mlp`
    # (`minimax_m2.py`); the others `mlp`)
    ff = "feed_forward" if model_type.startswith("llama4") else "mlp"
    moe = ff
    if model_type.startswith(("kimi_linear", "mixtral", "phimoe", "granitemoe", "minimax_m3")):
        moe = "block_sparse_moe"
    dense_ffn = (
        pick("intermediate_size_mlp", default=ffn, required=False) if model_type.startswith("llama4") else ffn
    )
    if model_type in MINIMAX_M3_TYPES:
        # MiniMax-M3's dense layers' MLP is `dense_intermediate_size` wide (vLLM 0.33.0's `nvidia/model.py`
        # MiniMaxM3DecoderLayer; 12,288 when absent, `MiniMaxM3TextConfig`'s default), not the experts'
        # `intermediate_size` (kvsim counted 3,072: 509,607,936 parameters too few over MiniMax-M3's 3 layers)
        dense_ffn = pick("dense_intermediate_size", default=12288, least=1)
    if opt_like:
        b.add("mlp", ffn, hidden, n_dense, module="fc1", layers=dense_at)
        b.add("mlp", hidden, ffn, n_dense, row=True, module="fc2", layers=dense_at)
        b.loose(ffn * n_dense)  # fc1's biases
        b.loose(hidden * n_dense, whole=True)  # fc2's (row-parallel)
    else:
        b.add("mlp", dense_ffn, hidden, 2 * n_dense, layers=dense_at, **gate_up(ff))  # gate, up
        b.add("mlp", hidden, dense_ffn, n_dense, row=True, module=f"{ff}.down_proj", layers=dense_at)
    if experts:
        # gpt-oss and Llama 4 give the expert width as intermediate_size; the others as moe_intermediate_size.
        moe_ffn = pick("moe_intermediate_size", default=ffn, required=False)
        if is_m3:
            # MiniMax-M3's experts and shared expert are `intermediate_size` wide (vLLM 0.33.0's `MiniMaxM3MoE`
            # reads no `moe_intermediate_size`)
            moe_ffn = ffn
        per_tok = pick(
            "num_experts_per_tok",
            "experts_per_token",
            "num_experts_per_token",
            default=4 if is_m3 else 1,
            required=False,
        )
        if not 1 <= per_tok <= experts:
            key = next(
                k
                for k in ("num_experts_per_tok", "experts_per_token", "num_experts_per_token")
                if cfg.get(k) is not None
            )
            raise InvalidArgumentError(
                f"model {where}: field {key!r} {per_tok} must be from 1 to the {experts} experts"
            )
        b.num_experts, b.experts_per_token, b.expert_ffn = experts, per_tok, moe_ffn
        b.add("experts", moe_ffn, hidden, 2 * experts * n_moe, module=f"{moe}.experts", layers=moe_at)
        b.add("experts", hidden, moe_ffn, experts * n_moe, module=f"{moe}.experts", layers=moe_at)
        if model_type == "gpt_oss":
            b.other += (2 * moe_ffn + hidden) * experts * n_moe  # the experts' biases
            b.loose(experts * n_moe, whole=True)  # the router's bias
        shared = pick("n_shared_experts", "num_shared_experts", default=1 if is_m3 else 0, required=False)
        shared_ffn = moe_ffn * shared
        sx = f"{moe}.shared_experts"
        if cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE / Qwen3-Next: one shared expert
            shared_ffn = pick("shared_expert_intermediate_size", default=0, required=False)
            b.add("router", 1, hidden, n_moe, module=f"{ff}.shared_expert_gate", layers=moe_at)
            sx = f"{ff}.shared_expert"
        if model_type.startswith("llama4"):
            shared_ffn = moe_ffn  # one shared expert of the routed width
            sx = f"{ff}.shared_expert"
        b.add("shared_experts", shared_ffn, hidden, 2 * n_moe, layers=moe_at, **gate_up(sx))
        b.add("shared_experts", hidden, shared_ffn, n_moe, row=True, module=f"{sx}.down_proj", layers=moe_at)
        gate_bits = 32 if model_type in FP32_ROUTER_TYPES else 0
        b.add("router", experts, hidden, n_moe, module=f"{moe}.gate", layers=moe_at, bits=gate_bits)
        # The router's e_score_correction_bias: DeepSeek's where it routes with `noaux_tc`; Kimi-Linear's on
        # every MoE layer, whatever its routing (`KimiMoE` builds it unconditionally, float32:
        # `models/kimi_k3/nvidia/model.py`, `amd/linear.py`), counted in the checkpoint's dtype as `other`.
        # MiniMax-M3's under `use_routing_bias` (`MiniMaxM3MoE`, float32, `nvidia/model.py`).
        if (
            cfg.get("topk_method") == "noaux_tc"
            or model_type == "deepseek_v3"
            or model_type.startswith("kimi_linear")
            or (is_m3 and _minimax_m3_routing_bias(cfg, where))
        ):
            b.loose(experts * n_moe, whole=True)
    return b


def fused_parts_refusal(b: Breakdown, ignored: tuple[str, ...] | list[str]) -> str | None:
    """Why vLLM 0.33.0 refuses the ignore list `ignored` on a fused module of `b` (one with `parts`), else
    None. It asks the list about the fused module's own name first (`self_attn.in_proj_qkvgfab`), then about
    each part's (`is_layer_skipped`, `quant_utils.py`; compressed-tensors' `find_matching_patterns`,
    `config_utils.py`), and raises where some parts are named and others not ("Detected some but not all
    shards ... are quantized", "Found different quantization schemes for the shards of ..."). An entry naming
    the fused module itself and not its parts is refused here too: kvsim prices the module by its first
    part's name."""
    from kvsim.model.quant import is_ignored

    if not ignored:
        return None
    for group in GROUPS:
        for m in b.matrices[group]:
            if not m.parts:
                continue
            for i in m.layers:
                named = [is_ignored(f"{LAYERS_PREFIX}.{i}.{part}", ignored, b.aliases) for part in m.parts]
                if all(named):
                    continue
                fused = f"{LAYERS_PREFIX}.{i}.{m.fused}"
                if m.fused and is_ignored(fused, ignored, b.aliases):
                    return (
                        f"the ignore list names {fused} (vLLM's fused module of "
                        f"{', '.join(m.parts)}) by its own name, which kvsim does not read: name its parts"
                    )
                if any(named):
                    some = [part for part, n in zip(m.parts, named, strict=True) if n]
                    rest = [part for part, n in zip(m.parts, named, strict=True) if not n]
                    return (
                        f"the ignore list names {', '.join(some)} of layer {i} but not {', '.join(rest)}: vLLM "
                        f"0.33.0 and 0.34.0 fuse them into one module ({m.fused or m.module}) and refuse shards quantized "
                        'unlike ("Found different quantization schemes for the shards", is_layer_skipped\'s '
                        '"Detected some but not all shards")'
                    )
    return None


__all__ = [
    "FP32_ROUTER_TYPES",
    "GROUPS",
    "LAYERS_PREFIX",
    "Breakdown",
    "Matrix",
    "fused_parts_refusal",
    "param_breakdown",
]
