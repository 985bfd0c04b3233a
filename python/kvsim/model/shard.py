"""One GPU's share of a model under tensor parallelism, as vLLM splits its layers (DESIGN.md §Defaults and
sizing, "Tensor parallelism"): the attention heads and KV heads over the ranks (or the KV heads replicated),
a gated delta net's key and value heads and a KDA layer's heads, the routed experts' intermediate width,
the row-parallel layers' input features and their quantization groups, and the weights divided. A model
vLLM 0.33.0 cannot split that way (or splits wrongly without a word) is refused (`UnsplittableModelError`),
naming the layer, the field and vLLM's check.
Used by the pool's sizing (`kvsim.model.sizing`) and the roofline's coefficients (`kvsim.model.linear_time`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from kvsim.errors import UnsplittableModelError
from kvsim.model.gpus import Gpu
from kvsim.model.gpus import resolve as get_gpu
from kvsim.model.models import Model
from kvsim.model.models import resolve as resolve_model
from kvsim.model.quant import not_whole_groups


def resolve(model: Model | str, gpu: Gpu | str | None) -> tuple[Model, Gpu | None]:
    """A model and a GPU, each given as itself or a preset name (or, for the model, a config path)."""
    m = resolve_model(model)
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    return m, g


def _kept(m: Model) -> dict[str, Any]:
    """The config fields `m` was built from (`Model.config_json`; empty for the 2024 presets)."""
    try:
        kept = json.loads(m.config_json) if m.config_json else {}
    except ValueError:
        return {}
    return kept if isinstance(kept, dict) else {}


def _check_state_heads(m: Model, tp: int) -> None:
    """A gated delta net's key and value heads and a KDA layer's heads split over the ranks, as vLLM 0.33.0
    needs them to (`vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py`,
    `vllm/models/kimi_k3/nvidia/kda.py`)."""
    states = [lay.state for lay in m.layers if lay.state is not None]
    if not states:
        return
    kept = _kept(m)
    if any(s.gdn_head_k_dim for s in states):
        for key, what in (("linear_num_value_heads", "value"), ("linear_num_key_heads", "key")):
            n = kept.get(key)
            if not isinstance(n, int) or not n % tp:
                continue
            if what == "value":
                # `divide(num_v_heads, tp_size)` for A_log and the recurrent state's shape
                # (`MambaStateShapeCalculator.gated_delta_net_state_shape`).
                vllm = f'vLLM\'s gated delta net asserts it: "{n} is not divisible by {tp}"'
            else:
                # No check: `num_k_heads // tp_size` key heads a rank, into which the forward reshapes each
                # rank's share of the projections (`prepare_gdn_attention_core_inputs`,
                # `rearrange_mixed_qkv`).
                vllm = (
                    f"vLLM 0.33.0 does not check it but gives each GPU {n} // {tp} = {n // tp} key heads "
                    "(QwenGatedDeltaNetAttention), which its share of the projections does not fill: its "
                    "forward's reshapes fail or mix tokens"
                )
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp} does not divide {m.name}'s {key} {n} (its gated delta net's "
                f"{what} heads): {vllm}"
            )
    lac = kept.get("linear_attn_config")
    heads = lac.get("num_heads") if isinstance(lac, dict) else None
    if str(kept.get("model_type", "")).startswith("kimi_linear") and isinstance(heads, int) and heads % tp:
        raise UnsplittableModelError(
            f"tensor_parallel_size {tp} does not divide {m.name}'s linear_attn_config.num_heads {heads} (its "
            f"KDA layers' heads): vLLM's KimiDeltaAttention asserts num_heads % tp_size == 0"
        )


# Kimi-Linear (vLLM 0.33.0's `vllm/models/kimi_k3/nvidia/model.py`, `KimiMoE`): under tensor parallelism
# without expert parallelism, a rank's routed-expert width below this (the config's
# `min_moe_intermediate_per_partition`, 256 when absent) is padded up to it.
KIMI_MIN_MOE_PER_RANK = 256


def _check_experts(m: Model, tp: int) -> None:
    """The routed experts' intermediate width split over `tp` ranks (tensor parallelism without expert
    parallelism): vLLM 0.33.0's `FusedMoEConfig.__post_init__` (`fused_moe/config.py`) asserts
    `intermediate_size % tp_size == 0` before it floor-divides it; Kimi-Linear pads a rank's share below
    256 first (`KimiMoE`), which leaves nothing to assert."""
    width = m.expert_ffn
    if not m.num_experts or not width or not width % tp:
        return
    kept = _kept(m)
    key = next(
        (k for k in ("moe_intermediate_size", "expert_intermediate_size") if k in kept), "intermediate_size"
    )
    if str(kept.get("model_type", "")).startswith("kimi_linear"):
        least = kept.get("min_moe_intermediate_per_partition", KIMI_MIN_MOE_PER_RANK)
        if isinstance(least, int) and width // tp < least:
            return
    raise UnsplittableModelError(
        f"tensor_parallel_size {tp} does not divide {m.name}'s {key} {width} (its routed experts' "
        f"intermediate width, which vLLM splits over the GPUs without --enable-expert-parallel): vLLM's "
        f"FusedMoEConfig asserts intermediate_size % tp_size == 0 ({width} % {tp} = {width % tp})"
    )


def shard(
    m: Model, kv_cache_dtype: str | None, tensor_parallel_size: int, *, expert_parallel: bool = False
) -> Model:
    """One GPU's share of `m` under tensor parallelism: weights / tp, KV heads // tp (at least 1).
    `expert_parallel` (vLLM's `--enable-expert-parallel`): the routed experts lie whole on the GPUs, so
    their width is not split (nor checked)."""
    if kv_cache_dtype not in (None, "auto"):
        m = m.with_kv_dtype(kv_cache_dtype)
    tp = tensor_parallel_size
    if tp == 1:
        return m
    if m.num_attention_heads % tp:
        raise UnsplittableModelError(
            f"tensor_parallel_size {tp} does not divide {m.name}'s {m.num_attention_heads} attention heads"
        )
    # vLLM's QKVParallelLinear: KV heads split evenly, or fewer than the ranks replicated evenly; every
    # layer's (Gemma 4's global layers have their own).
    kvs = {m.num_kv_heads} | {lay.num_kv_heads for lay in m.layers if lay.num_kv_heads}
    for kv in sorted(kvs) if not m.is_mla else ():
        if kv and (kv % tp if kv >= tp else tp % kv):
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp}: {m.name}'s {kv} KV heads neither divide among {tp} GPUs nor "
                f"replicate evenly over them (vLLM asserts {kv} % {tp} == 0 or {tp} % {kv} == 0)"
            )
    _check_state_heads(m, tp)
    if not expert_parallel:
        _check_experts(m, tp)
    for group, cols, quant_group in m.row_inputs:
        if cols % tp:
            # vLLM's RowParallelLinear: `divide(input_size, tp_size)`.
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp} does not divide the {cols} input features of {m.name}'s {group} "
                f'output projections (vLLM: "{cols} is not divisible by {tp}")'
            )
        # (A group as wide as the layer too: AWQ-Marlin exempts it, but sizes each rank's scales at 0
        # groups; AWQ's other kernels, compressed-tensors and GPTQ split it as any other.)
        if quant_group and (cols // tp) % quant_group:
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp}: {m.name}'s {group} output projections take {cols} // {tp} = "
                f"{cols // tp} input features a GPU, not a whole number of its {m.quant_method} groups of "
                f"{quant_group} (vLLM: {not_whole_groups(m.quant_method, cols // tp, quant_group, cols)})"
            )
    kv_heads = m.num_kv_heads if m.is_mla else max(1, m.num_kv_heads // tp)
    return dataclasses.replace(
        m,
        num_kv_heads=kv_heads,
        num_params=-(-m.num_params // tp),
        num_active_params=-(-m.num_active_params // tp),
        weight_bytes=-(-m.weight_bytes // tp),
        towers=tuple(dataclasses.replace(t, split=-(-t.split // tp)) for t in m.towers),
    )
