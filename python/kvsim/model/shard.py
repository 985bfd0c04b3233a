"""One GPU's share of a model under tensor parallelism, as vLLM splits its layers (DESIGN.md §Defaults and
sizing, "Tensor parallelism"): the attention heads and KV heads over the ranks (or the KV heads replicated),
the row-parallel layers' input features and their quantization groups, and the weights divided. A model
vLLM cannot split that way is refused (`UnsplittableModelError`), naming the layer and vLLM's check.
Used by the pool's sizing (`kvsim.model.sizing`) and the roofline's coefficients (`kvsim.model.linear_time`).
"""

from __future__ import annotations

import dataclasses

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


def shard(m: Model, kv_cache_dtype: str | None, tensor_parallel_size: int) -> Model:
    """One GPU's share of `m` under tensor parallelism: weights / tp, KV heads // tp (at least 1)."""
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
    for group, cols, quant_group in m.row_inputs:
        if cols % tp:
            # vLLM's RowParallelLinear: `divide(input_size, tp_size)`.
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp} does not divide the {cols} input features of {m.name}'s {group} "
                f'output projections (vLLM: "{cols} is not divisible by {tp}")'
            )
        if quant_group and quant_group < cols and (cols // tp) % quant_group:
            raise UnsplittableModelError(
                f"tensor_parallel_size {tp}: {m.name}'s {group} output projections take {cols} // {tp} = "
                f"{cols // tp} input features a GPU, not a whole number of its {m.quant_method} groups of "
                f"{quant_group} (vLLM: {not_whole_groups(m.quant_method, cols // tp, quant_group)})"
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
