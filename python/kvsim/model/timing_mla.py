"""MLA's widths and dense MLA's prefill path in the roofline (DESIGN.md §Time model, "MLA's prefill path"):
the values a token moves through an MLA layer (`mla_layer_values`, not `head_dim`) and the seconds of the
cached latents' up-projection (`mla_context_seconds`), read from vLLM's MLA attention. `kvsim.model.timing`
re-exports these names (split from it at ~800 lines)."""

from __future__ import annotations

from typing import NamedTuple

from kvsim.model.models import Model


def mla_layer_values(model: Model, tp: int) -> tuple[int, int]:
    """(activation values, elementwise values) one token moves through one MLA layer on one of `tp` GPUs:
    the widths vLLM 0.33.0's MLA attention moves (`model_executor/layers/mla.py`
    MultiHeadLatentAttentionWrapper.forward; `model_executor/layers/attention/mla_attention.py`
    MLAAttention.forward_impl and its module docstring), not `head_dim`. With `n` = heads / tp, the latent
    `r` (`kv_lora_rank`), the RoPE width `ρ`, the key width without RoPE `p`, the value width `v` and the
    query latent `c` (`q_lora_rank`; DeepSeek-V3: 16 heads at tp 8, r 512, ρ 64, p 128, v 128, c 1536):

    - activations, each matrix's input and output: the A projection, hidden in and `c + r + ρ` out
      (`fused_qkv_a_proj`), or without a query latent `q_proj` (hidden in, `n·(p + ρ)` out) and
      `kv_a_proj_with_mqa` (hidden in, `r + ρ` out); Kimi-K3's output gate fused into it, `n·v` more out;
      `q_b_proj`, `c` in and `n·(p + ρ)` out; the decode path's absorbed `kv_b_proj` (`forward_mqa`): W_UK,
      `n·p` in and `n·r` out (the query `r + ρ` wide a head), and after the attention W_UV (`_v_up_proj`),
      `n·r` in and `n·v` out; `o_proj`, `n·v` in and hidden out;
    - elementwise, read and written: `q_a_layernorm` (`2c`) and `kv_a_layernorm` (`2r`); the rotary
      embedding of the query's and the key's RoPE parts (`2·(n·ρ + ρ)`; none on Kimi's NoPE MLA, whose
      `kimi_linear.py` builds no rotary); the KV write of the latent entry (`r + ρ`, as a GQA layer's is its
      K and V); Kimi-K3's output gate (`sigmoid(g) · o`: `3·n·v`).

    Every token is charged the decode path's values: a prefill token of dense MLA goes through `forward_mha`
    instead (`kv_b_proj` up-projects its latent, `r` in and `n·(p + v)` out, where W_UK and W_UV move
    `n·(p + 2r + v)`), but the activations weigh where a step is memory-bound, its decodes; sparse MLA
    (DeepSeek-V3.2, GLM-5) runs every token through `forward_mqa`."""
    n = model.num_attention_heads // tp
    h, r, rope, c = model.hidden_size, model.kv_lora_rank, model.qk_rope_head_dim, model.q_lora_rank
    p, v = mla_head_widths(model)
    gate = n * v if model.config_fields.get("mla_use_output_gate") else 0
    if c:
        a_proj = (h + c + r + rope + gate) + (c + n * (p + rope))  # fused_qkv_a_proj, q_b_proj
    else:
        a_proj = (h + n * (p + rope)) + (h + r + rope + gate)  # q_proj, kv_a_proj_with_mqa
    act = a_proj + (n * p + n * r) + (n * r + n * v) + (n * v + h)  # W_UK, W_UV, o_proj
    rotary = 0 if model.model_type == "kimi_linear" else 2 * (n * rope + rope)
    elem = 2 * c + 2 * r + rotary + (r + rope) + 3 * gate
    return act, elem


def mla_head_widths(model: Model) -> tuple[int, int]:
    """An MLA layer's key width without RoPE `p` (`qk_nope_head_dim`) and value width `v` (`v_head_dim`),
    `head_dim` where the config states none (the widths the weights count, `kvsim.model.params`)."""
    return model.qk_nope_head_dim or model.head_dim, model.v_head_dim or model.head_dim


class MlaContext(NamedTuple):
    """Seconds of one dense MLA layer's up-projection of its cached latents (`mla_context_seconds`)."""

    copy_s: float  # per cached key: the gather and the keys' concatenation
    gemm_mem_s: float  # per cached key: kv_b_proj's activations
    gemm_flop_s: float  # per cached key: kv_b_proj's FLOPs
    weight_s: float  # per step: kv_b_proj's weights


class MlaPrefill(NamedTuple):
    """A dense MLA layer's prefill path (`forward_mha`): bytes a key read and FLOPs a pair, and its cached
    keys' up-projection."""

    kv_bytes: float
    flops: float
    context: MlaContext


def mla_context_seconds(
    model: Model, tp: int, kv_bits: int, weight_bytes: float, mem_rate: float, gemm_rate: float
) -> MlaContext:
    """One dense MLA layer's time on one GPU of `tp` for the keys its prefilling sequences had cached, each
    step: vLLM 0.34.0's `forward_mha` (`model_executor/layers/attention/mla_attention.py`) attends the
    context through `_compute_prefill_context`, which gathers the cached entries into a workspace
    (`gather_and_maybe_dequant_cache`: the entry `r + ρ` read at the cache's width, written at bf16),
    up-projects their latents through `kv_b_proj` (`r` in, `n·(p + v)` out, 2·r·n·(p + v) FLOPs at its
    weights' rate, its `r·n·(p + v)` weights read at `weight_bytes` a parameter once per workspace chunk)
    and writes the keys whole (`_concat_k_nope_k_pe`: `n·p + ρ` in, `n·(p + ρ)` out): each kernel its own
    roofline, the gather and the concatenation at HBM bandwidth (`copy_s` a key), the GEMM the larger of
    its bytes (`weight_s` + `gemm_mem_s` a key) and FLOPs (`gemm_flop_s` a key) (`n` = heads / tp;
    DeepSeek-V3 at tp 8: 2,304 + 10,368 bytes, 9,216 bytes and 4.2 MFLOP a key and layer, 2 MiB of fp8
    weights). The attention kernel's reads of the up-projected keys and values are the class's
    `prefill_kv`."""
    n = model.num_attention_heads // tp
    r, rope = model.kv_lora_rank, model.qk_rope_head_dim
    p, v = mla_head_widths(model)
    act = 2  # bytes of a bf16 value
    gather = (r + rope) * kv_bits / 8 + (r + rope) * act
    concat = (n * p + rope) * act + n * (p + rope) * act
    return MlaContext(
        (gather + concat) / mem_rate,
        (r + n * (p + v)) * act / mem_rate,
        2 * r * n * (p + v) / gemm_rate,
        r * n * (p + v) * weight_bytes / mem_rate,
    )
