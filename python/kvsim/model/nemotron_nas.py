"""Nemotron-NAS (model_type `nemotron-nas`, `DeciLMForCausalLM`: Llama-3.3-Nemotron-Super-49B-v1 / v1.5,
Llama-3.1-Nemotron-Ultra-253B-v1, Llama-3.1-Nemotron-51B) as vLLM 0.33.0 builds it
(`vllm/model_executor/models/nemotron_nas.py`; DESIGN.md §Model configs, "Nemotron-NAS").

A Llama decoder whose layers each follow their own entry of `block_configs` (`DeciLMDecoderLayer`):

- `attention.no_op`: the layer has no attention (no projections, no `input_layernorm`, no KV cache: vLLM
  counts its attention layers as the blocks that are not no-op, `ModelConfig.get_num_layers_by_block_type`);
  otherwise a Llama attention (`DeciLMAttention`, a `LlamaAttention`) of `num_attention_heads` query heads and
  `num_attention_heads // n_heads_in_group` KV heads, each layer its own;
- `ffn.no_op`: no MLP (nor its `post_attention_layernorm`); otherwise a gated Llama MLP (`LlamaMLP`, SiLU) of
  `_ffn_mult_to_intermediate_size(ffn_mult, hidden)`: int(2 · ffn_mult · hidden / 3) rounded up to a multiple
  of 256 (or the block's `intermediate_size` where it states no `ffn_mult`).

vLLM 0.33.0 builds nothing else of a block: a `replace_with_linear` attention or MLP (the DeciLM checkpoints'
single `linear_attn` / `linear_mlp` matrix, Llama-3.1-Nemotron-51B's) is not built (its attention is sized
from a null `n_heads_in_group`, its MLP from a null `ffn_mult`), so kvsim refuses it by name; a block's
`window_length`, sink-token and `sparsify` fields are not read by vLLM, nor here. The model-wide KV heads
are the first attention layer's (`NemotronNasModelArchConfigConvertor.get_total_num_kv_heads`, which fails
for a model of no attention layer: refused here too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.mamba_dims import cfg_flag
from kvsim.model.param_names import gate_up, qkv

MODEL_TYPE = "nemotron-nas"
# `_find_multiple(intermediate_size, 256)` in vLLM 0.33.0's nemotron_nas.py.
FFN_MULTIPLE = 256


@dataclass(frozen=True)
class NasBlock:
    """One decoder layer of a Nemotron-NAS model: its attention's KV heads (0: a no-op attention) and its
    MLP's width (0: a no-op MLP)."""

    kv_heads: int
    ffn: int


def ffn_mult_to_width(ffn_mult: float, hidden: int) -> int:
    """The MLP width of `ffn_mult` (vLLM 0.33.0's `_ffn_mult_to_intermediate_size`): two thirds of
    `ffn_mult` x `hidden`, truncated to a whole number, rounded up to a multiple of 256."""
    width = int(2 * ffn_mult * hidden / 3)
    return -(-width // FFN_MULTIPLE) * FFN_MULTIPLE


def _flag(part: Mapping[str, Any], key: str, where: str) -> bool:
    v = part.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise InvalidArgumentError(f"model {where}: field {key!r} {v!r} must be true or false")
    return v


def nas_blocks(
    cfg: Mapping[str, Any], num_layers: int, heads: int, hidden: int, where: str
) -> list[NasBlock]:
    """Each layer's block from `block_configs` (see the module docstring), checked: one entry a layer, each
    with its `attention` and `ffn` objects; `n_heads_in_group` a whole number dividing the heads; `ffn_mult`
    a positive number (or `intermediate_size` a whole one); no `replace_with_linear`; a block's own
    `hidden_act` SiLU (`LlamaMLP` refuses others); some layer with attention.

    Raises:
        InvalidArgumentError: what vLLM 0.33.0 does not build, named.
    """
    configs = cfg.get("block_configs")
    if not isinstance(configs, list) or len(configs) != num_layers:
        raise InvalidArgumentError(
            f"model {where}: field 'block_configs' must list the {num_layers} layers' blocks (Nemotron-NAS)"
        )
    blocks: list[NasBlock] = []
    for i, block in enumerate(configs):
        at = f"{where}: block_configs[{i}]"
        attention = block.get("attention") if isinstance(block, dict) else None
        ffn = block.get("ffn") if isinstance(block, dict) else None
        if not isinstance(attention, dict) or not isinstance(ffn, dict):
            raise InvalidArgumentError(f"model {at} must be an object with 'attention' and 'ffn' objects")
        kv = 0
        if not _flag(attention, "no_op", at):
            _refuse_linear(attention, at, "an attention", "a full attention of 'n_heads_in_group'")
            group = attention.get("n_heads_in_group")
            if isinstance(group, bool) or not isinstance(group, int) or group < 1 or heads % group:
                raise InvalidArgumentError(
                    f"model {at}: attention field 'n_heads_in_group' {group!r} must be a whole number dividing "
                    f"the {heads} attention heads (the layer's KV heads are heads / n_heads_in_group)"
                )
            kv = heads // group
        width = 0
        if not _flag(ffn, "no_op", at):
            _refuse_linear(ffn, at, "an MLP", "a gated MLP of 'ffn_mult'")
            act = ffn.get("hidden_act", cfg.get("hidden_act", "silu"))
            if act not in (None, "silu"):
                raise InvalidArgumentError(
                    f"model {at}: hidden_act {act!r}: vLLM 0.33.0's and 0.34.0's LlamaMLP take silu only"
                )
            if "ffn_mult" in ffn:
                mult = ffn["ffn_mult"]
                if isinstance(mult, bool) or not isinstance(mult, int | float) or not 0 < mult < 2**20:
                    raise InvalidArgumentError(
                        f"model {at}: ffn field 'ffn_mult' {mult!r} must be a positive number"
                    )
                width = ffn_mult_to_width(mult, hidden)
            else:
                size = ffn.get("intermediate_size")
                if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                    raise InvalidArgumentError(
                        f"model {at}: the MLP states neither 'ffn_mult' nor a whole 'intermediate_size'"
                    )
                width = size
            if width < 1:
                raise InvalidArgumentError(
                    f"model {at}: ffn_mult {ffn['ffn_mult']!r} gives an MLP of no width"
                )
        blocks.append(NasBlock(kv, width))
    if not any(b.kv_heads for b in blocks):
        raise InvalidArgumentError(
            f"model {where}: every block's attention is a no-op: vLLM 0.33.0 and 0.34.0 find no KV heads for it "
            "(NemotronNasModelArchConfigConvertor), and kvsim models the KV cache only"
        )
    return blocks


def _refuse_linear(part: Mapping[str, Any], at: str, what: str, builds: str) -> None:
    """Refuses a block's part replaced with a linear layer (`replace_with_linear`): vLLM 0.33.0's
    nemotron_nas.py does not build one (it builds `builds` from fields the config leaves null)."""
    if _flag(part, "replace_with_linear", at):
        raise InvalidArgumentError(
            f"model {at}: {what} replaced with a linear layer ('replace_with_linear') is not built by vLLM "
            f"0.33.0's or 0.34.0's nemotron_nas.py (each builds {builds}), so kvsim does not model it"
        )


def first_kv_heads(blocks: list[NasBlock]) -> int:
    """The model-wide KV heads vLLM 0.33.0 reports: the first attention layer's."""
    return next(b.kv_heads for b in blocks if b.kv_heads)


def nemotron_nas(
    b: Any, cfg: Mapping[str, Any], blocks: list[NasBlock], hidden: int, heads: int, head_dim: int, where: str
) -> None:
    """The decoder layers' weights (the embeddings and lm_head added by the caller), layer by layer: an
    attention layer's fused q, k, v (its own KV heads) and o projections and its `input_layernorm`; an MLP
    layer's gate and up (fused), down projections of its own width and its `post_attention_layernorm`; a
    no-op part nothing. Biases as `DeciLMDecoderLayer` sets them: q, k, v with `attention_bias` (or `bias`;
    `qkv_bias` where stated), o with `attention_bias` (or `bias`), the MLP's with `mlp_bias`. The final norm."""
    # (each a true or false: "false" is not false, as transformers' strict configs say)
    flags = {k: cfg_flag(cfg, False, where, k) for k in ("attention_bias", "bias", "mlp_bias")}
    o_bias = flags["attention_bias"] or flags["bias"]
    qkv_bias = cfg_flag(cfg, o_bias, where, "qkv_bias")
    mlp_bias = flags["mlp_bias"]
    q = qkv("self_attn")  # (q, k and v: vLLM's fused qkv_proj, named by its first part)
    for i, block in enumerate(blocks):
        if block.kv_heads:
            kv = block.kv_heads
            b.add("attn", heads * head_dim, hidden, layers=[i], **q)
            b.add("attn", kv * head_dim, hidden, 2, layers=[i], kv_heads=kv, **q)
            b.add("attn", hidden, heads * head_dim, row=True, module="self_attn.o_proj", layers=[i])
            b.loose(hidden, whole=True)  # input_layernorm
            if qkv_bias:
                b.loose(heads * head_dim)
                b.loose(2 * kv * head_dim, kv_heads=kv)
            if o_bias:
                b.loose(hidden, whole=True)  # (a row-parallel layer's bias: whole on every rank)
        if block.ffn:
            w = block.ffn
            b.add("mlp", w, hidden, 2, layers=[i], **gate_up("mlp"))  # gate, up
            b.add("mlp", hidden, w, row=True, module="mlp.down_proj", layers=[i])
            b.loose(hidden, whole=True)  # post_attention_layernorm
            if mlp_bias:
                b.loose(2 * w)
                b.loose(hidden, whole=True)
    b.loose(hidden, whole=True)  # the final norm


__all__ = [
    "FFN_MULTIPLE",
    "MODEL_TYPE",
    "NasBlock",
    "ffn_mult_to_width",
    "first_kv_heads",
    "nas_blocks",
    "nemotron_nas",
]
