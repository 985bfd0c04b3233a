"""Kimi-K3's language model by module (`kvsim.model.params.param_breakdown`), as vLLM 0.33.0 builds it
(`vllm/models/kimi_k3/nvidia/model.py` KimiLinearModel, `nvidia/kda.py` KimiK3DeltaAttention,
`nvidia/mla.py` MultiHeadLatentAttention, `model_executor/layers/linear.py` KimiK3MergedQKVGateLinear):
Kimi-Linear's decoder (KDA state layers, MLA layers, DeepSeek-style MoE) with the full-rank KDA gate, MLA's
query low-rank and output gate, the latent MoE and the attention residuals (DESIGN.md §Model configs,
"Kimi-K3"). Split from `params` as `params_state` is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.hf_layers import kimi_linear_attention
from kvsim.model.param_names import gate_up

# vLLM 0.33.0's fused modules of Kimi-K3 (`KimiLinearModel.packed_modules_mapping`): the checkpoint's names of
# their parts, which a quantization's ignore list is read against (`params.fused_parts_refusal`).
KDA_IN_PROJ = "self_attn.in_proj_qkvgfab"
KDA_IN_PROJ_PARTS = tuple(f"self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "b_proj", "f_a_proj"))
MLA_A_PROJ = "self_attn.fused_qkv_a_g_proj"
MLA_A_PROJ_PARTS = ("self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.g_proj")


def kimi_k3(
    b: Any,
    cfg: Mapping[str, Any],
    layers: int,
    hidden: int,
    heads: int,
    kda_at: list[int],
    moe_flags: list[bool],
    pick: Any,
    where: str,
) -> None:
    """Kimi-K3's decoder layers (the embeddings and lm_head added by the caller):

    - KDA layers (`KimiK3DeltaAttention`), P = `num_heads` x `head_dim`: `in_proj_qkvgfab` (q, k, v and the
      full-rank output gate g, hidden -> P each; `f_a_proj` hidden -> head_dim, whole on every rank,
      `replicated_shard_id=4`; `b_proj` hidden -> heads), `f_b_proj` (head_dim -> P), `o_proj` (P ->
      hidden); outside the matrices the three short convolutions (P x kernel each, float32 in vLLM),
      `dt_bias` (P), `A_log` (heads) and `o_norm` (head_dim). The gate's slice is not one of the module's
      `packed_modules_mapping` parts (q, k, v, b, f_a), so an ignore list's `g_proj` entry is not read for it.
      (vLLM pads the merged projection's rows a GPU to a multiple of 16: 0 at tp 1, 4 rows at tp 8; not
      counted.)
    - MLA layers with `q_lora_rank` and `mla_use_output_gate`: `fused_qkv_a_g_proj` (`q_a_proj` hidden ->
      q_lora and `kv_a_proj_with_mqa` hidden -> kv_lora + rope, whole on every rank; the output gate
      `g_proj` hidden -> heads x v_head, split by heads), `q_a_layernorm`, `q_b_proj`, `kv_a_layernorm`,
      `kv_b_proj`, `o_proj`.
    - MoE layers (`block_sparse_moe`): the router (`gate`, hidden -> experts) and its float32
      `e_score_correction_bias`; the shared experts (`KimiMLP` of `num_shared_experts` x
      `moe_intermediate_size`, on the hidden width); with `routed_expert_hidden_size` L the routed experts
      work in L between `routed_expert_down_proj` (hidden -> L) and `routed_expert_up_proj` (L -> hidden),
      both `ReplicatedLinear`s built with the quantization (group `mlp`, whole on every rank), and
      `routed_expert_norm` (L) with `latent_moe_use_norm`; every expert gate, up and down of
      `moe_intermediate_size` on L.
    - The dense layers' `mlp` (gate, up, down of `intermediate_size`).
    - Two norms a layer and the final one; with `attn_res_block_size` two more norms a layer
      (`self_attention_res_norm`, `mlp_res_norm`), two 1 x hidden projections a layer built without the
      quantization (`self_attention_res_proj`, `mlp_res_proj`: `ReplicatedLinear`s, counted outside the
      matrices, whole), and the final `output_attn_res_norm` and `output_attn_res_proj`.
    """
    k_heads, head_dim, kernel, _ = kimi_linear_attention(cfg, layers, where)
    p = k_heads * head_dim
    n = len(kda_at)
    kw = {"parts": KDA_IN_PROJ_PARTS, "fused": KDA_IN_PROJ}
    qkv = "self_attn.q_proj"  # (the merged module, named by its first part)
    b.add("attn", p, hidden, 4 * n, module=qkv, layers=kda_at, **kw)  # q, k, v, g
    b.add("attn", k_heads, hidden, n, module=qkv, layers=kda_at, **kw)  # b
    b.add("attn", head_dim, hidden, n, module=qkv, layers=kda_at, whole=True, **kw)  # f_a
    b.add("attn", p, head_dim, n, module="self_attn.f_b_proj", layers=kda_at)
    b.add("attn", hidden, p, n, row=True, module="self_attn.o_proj", layers=kda_at)
    b.loose((3 * p * kernel + p + k_heads) * n)  # conv1d, dt_bias, A_log
    b.loose(head_dim * n, whole=True)  # o_norm

    mla_at = [i for i in range(layers) if i not in set(kda_at)]
    m = len(mla_at)
    if cfg.get("q_lora_rank") is None:
        raise InvalidArgumentError(
            f"model {where}: field 'q_lora_rank' None: a full-rank KDA gate (Kimi-K3's layer) beside MLA layers "
            "without 'q_lora_rank' (Kimi-Linear's q_proj; vLLM builds its output gate apart) is not modelled"
        )
    q_lora = pick("q_lora_rank", least=1)
    kv_lora = pick("kv_lora_rank", least=1)
    nope, rope = pick("qk_nope_head_dim", least=1), pick("qk_rope_head_dim", default=0, required=False)
    v_dim = pick("v_head_dim", least=1)
    if not cfg.get("mla_use_nope", False):
        raise InvalidArgumentError(
            f"model {where}: Kimi-K3 without 'mla_use_nope': vLLM 0.33.0's and 0.34.0's KimiDecoderLayer asserts NoPE MLA"
        )
    if not cfg.get("mla_use_output_gate", False):
        raise InvalidArgumentError(
            f"model {where}: Kimi-K3 without 'mla_use_output_gate' (its MLA's fused_qkv_a_proj) is not modelled"
        )
    a_kw = {"parts": MLA_A_PROJ_PARTS, "fused": MLA_A_PROJ}
    qa = "self_attn.q_a_proj"
    b.add("attn", q_lora, hidden, m, module=qa, layers=mla_at, whole=True, **a_kw)
    b.add("attn", kv_lora + rope, hidden, m, module=qa, layers=mla_at, whole=True, **a_kw)
    b.add("attn", heads * v_dim, hidden, m, module=qa, layers=mla_at, **a_kw)  # g_proj
    b.add("attn", heads * (nope + rope), q_lora, m, module="self_attn.q_b_proj", layers=mla_at)
    b.add("attn", heads * (nope + v_dim), kv_lora, m, module="self_attn.kv_b_proj", layers=mla_at)
    b.add("attn", hidden, heads * v_dim, m, row=True, module="self_attn.o_proj", layers=mla_at)
    b.loose((q_lora + kv_lora) * m, whole=True)  # q_a_layernorm, kv_a_layernorm

    moe_at = [i for i in range(layers) if moe_flags[i]]
    dense_at = [i for i in range(layers) if not moe_flags[i]]
    nm, nd = len(moe_at), len(dense_at)
    ffn = pick("intermediate_size", least=1)
    b.add("mlp", ffn, hidden, 2 * nd, layers=dense_at, **gate_up("mlp"))
    b.add("mlp", hidden, ffn, nd, row=True, module="mlp.down_proj", layers=dense_at)
    experts = pick("num_experts", least=1)
    moe_ffn = pick("moe_intermediate_size", least=1)
    per_tok = pick("num_experts_per_token", "num_experts_per_tok", least=1)
    if per_tok > experts:
        raise InvalidArgumentError(
            f"model {where}: field 'num_experts_per_token' {per_tok} must be from 1 to the {experts} experts"
        )
    latent = pick("routed_expert_hidden_size", default=0, required=False) or hidden
    b.num_experts, b.experts_per_token, b.expert_ffn = experts, per_tok, moe_ffn
    mx = "block_sparse_moe"
    b.add("experts", moe_ffn, latent, 2 * experts * nm, module=f"{mx}.experts", layers=moe_at)
    b.add("experts", latent, moe_ffn, experts * nm, module=f"{mx}.experts", layers=moe_at)
    if latent != hidden:
        down, up = f"{mx}.routed_expert_down_proj", f"{mx}.routed_expert_up_proj"
        b.add("mlp", latent, hidden, nm, module=down, layers=moe_at, whole=True)
        b.add("mlp", hidden, latent, nm, module=up, layers=moe_at, whole=True)
        if cfg.get("latent_moe_use_norm"):
            b.loose(latent * nm, whole=True)  # routed_expert_norm
    shared = pick("num_shared_experts", default=0, required=False) * moe_ffn
    sx = f"{mx}.shared_experts"
    b.add("shared_experts", shared, hidden, 2 * nm, layers=moe_at, **gate_up(sx))
    b.add("shared_experts", hidden, shared, nm, row=True, module=f"{sx}.down_proj", layers=moe_at)
    b.add("router", experts, hidden, nm, module=f"{mx}.gate", layers=moe_at)
    b.loose(experts * nm, whole=True)  # the router's e_score_correction_bias (float32 in vLLM)

    norms = 2 * layers + 1
    if cfg.get("attn_res_block_size") is not None:
        pick("attn_res_block_size", least=1)
        norms += 2 * layers + 1  # self_attention_res_norm, mlp_res_norm; output_attn_res_norm
        b.loose((2 * layers + 1) * hidden, whole=True)  # the res projections (1 x hidden, unquantized)
    b.loose(norms * hidden, whole=True)


__all__ = ["KDA_IN_PROJ", "KDA_IN_PROJ_PARTS", "MLA_A_PROJ", "MLA_A_PROJ_PARTS", "kimi_k3"]
