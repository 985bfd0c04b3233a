"""The constants a lab bundle sends beside its tracks (DESIGN.md §Lab): the model's bytes per token with
the formula that makes them (`_model_info`: GQA and MLA as `kvsim.models` computes them, a hybrid model's
per token slot of a block), a hybrid model's KV-cache groups and the pool's arithmetic as vLLM forms them
(`_layout_info`), and the CPU tier's (`tier_info`). `kvsim.lab.bundle` puts them in the bundle and the
snapshot.
"""

from __future__ import annotations

from typing import Any

from kvsim.lab.lab_models import lab_model
from kvsim.lab.state import Track
from kvsim.model import models
from kvsim.model.config import SimConfig


def _model_info(cfg: SimConfig) -> dict[str, Any]:
    m = lab_model(cfg.release_model)
    bpt = m.kv_bytes_per_token
    if cfg.kv_groups:
        # A hybrid model: a block's token slots (its bytes ÷ the engine's block size), the unit of the
        # engine's token measures; `groups` and `layout` give the bytes group by group.
        bpt = cfg.pool.layout.bytes_per_block // cfg.engine_block_size
    dtype_bytes = models.dtype_bits(m.kv_dtype) / 8
    if m.is_mla:
        formula = (
            f"{m.num_layers} layers × ({m.kv_lora_rank} latent + {m.qk_rope_head_dim} rope) × "
            f"{dtype_bytes:g} bytes = {bpt:,} bytes ({_human(bpt)}) per token (MLA: one latent, not K and V per head)"
        )
    else:
        formula = (
            f"2 × {m.num_layers} layers × {m.num_kv_heads} KV heads × {m.head_dim} head dim × "
            f"{dtype_bytes:g} bytes = {bpt:,} bytes ({_human(bpt)}) per token"
        )
    if cfg.kv_groups:
        formula = (
            f"{_human(cfg.pool.layout.bytes_per_block)} per block ÷ {cfg.engine_block_size} tokens = {bpt:,} bytes "
            f"({_human(bpt)}) per token slot of a block; every attention layer keeping every token"
            + (" (its state layers keep none)" if any(lay.kind == "mamba" for lay in m.layers) else "")
            + " would keep "
            f"{m.kv_bytes_per_token:,} B ({_human(m.kv_bytes_per_token)}) per token"
        )
    return {
        "name": m.name,
        "num_layers": m.num_layers,
        "num_heads": m.num_attention_heads,
        "num_kv_heads": m.num_kv_heads,
        "head_dim": m.head_dim,
        "dtype": m.kv_dtype,
        "dtype_bytes": dtype_bytes,
        "kv_lora_rank": m.kv_lora_rank or None,
        "bytes_per_token": bpt,
        "full_attention_bytes_per_token": m.kv_bytes_per_token,
        "formula": formula,
    }


def _layout_info(cfg: SimConfig, kv_bytes: int | None) -> dict[str, Any] | None:
    """A hybrid model's KV-cache groups and the pool's arithmetic, as vLLM forms them (`kv_layout`; DESIGN.md
    §Hybrid attention): per group its kind, window, layers, block size, one layer's page (with how it is
    made) and a block's bytes; how the page sizes were unified; the pool's blocks. None for a model whose
    layers are one group of full attention."""
    if not cfg.kv_groups:
        return None
    from kvsim.model.layers import _attention_page
    from kvsim.model.models import dtype_bits

    m = lab_model(cfg.release_model)
    lay = cfg.pool.layout
    layers = m.layer_list()
    tp = cfg.tensor_parallel_size
    bits = dtype_bits(m.kv_dtype)
    weight_bits = dtype_bits(m.weight_dtype) if m.weight_dtype in ("fp16", "bf16", "fp32") else 16
    kinds: dict[str, int] = {}
    for layer in layers:
        if layer.kind not in ("shared", "none"):
            key = f"{layer.kind} {layer.window}" if layer.window else layer.kind
            kinds[key] = kinds.get(key, 0) + 1
    groups = []
    for g, (grp, spec) in enumerate(zip(lay.groups, cfg.kv_groups, strict=True)):
        first = layers[grp.layer_ids[0]]
        label = f"{grp.kind} {grp.window}" if grp.window else grp.kind
        info: dict[str, Any] = {
            "index": g,
            "kind": grp.kind,
            "window": grp.window,
            "label": label,
            "block_size": spec.block_size,
            "num_layers": grp.num_layers,
            "layer_ids": list(grp.layer_ids),
            "page_bytes": grp.page_bytes,
            "bytes_per_block": grp.bytes_per_block,
        }
        if grp.kind == "mamba":
            assert first.state is not None
            st = first.state
            state_bytes = st.page_bytes(tp, weight_bits)
            extra = st.mamba2_groups + (tp - st.mamba2_groups if st.mamba2_groups % tp else 0)
            conv = (st.conv_channels + 2 * extra * st.mamba2_state_size) // tp
            ssm_bits = st.ssm_bits or weight_bits
            info["state_bytes"] = state_bytes
            info["page_formula"] = (
                f"one request's state: conv {conv:,} channels × {st.conv_width} × {weight_bits // 8} bytes + SSM "
                f"{st.ssm_heads // tp} heads × {st.ssm_per_head:,} × {ssm_bits // 8} bytes = {state_bytes:,} bytes, "
                "padded to the attention page"
            )
            info["blocks_per_request"] = 1
        else:
            heads = max(1, (first.num_kv_heads or m.num_kv_heads) // tp)
            width = first.head_dim or m.head_dim
            page = _attention_page(first, m, tp, bits, spec.block_size)
            info["page_formula"] = (
                f"{spec.block_size} tokens × {m.kv_lora_rank + m.qk_rope_head_dim} latent"
                if m.is_mla
                else f"{spec.block_size} tokens × 2 (K, V) × {heads} KV heads × {width} head dim"
                if first.v_head_dim is None or first.v_head_dim == width
                else f"{spec.block_size} tokens × {heads} KV heads × ({width} K + {first.v_head_dim} V)"
            ) + f" × {bits // 8} bytes = {page:,} bytes"
            if grp.kind == "sliding_window":
                info["blocks_per_request"] = -(-(grp.window - 1) // spec.block_size) + 1
        groups.append(info)
    group_size = lay.groups[0].num_layers
    counts = sorted(kinds.values())
    rule = (
        f"the smallest kind's {counts[0]} layers"
        if group_size == counts[0]
        else f"the largest kind's {counts[-1]}, under 1.5 × the smallest's {counts[0]}"
    )
    split = []
    for k, n in kinds.items():
        parts = -(-n // group_size)
        pad = parts * group_size - n
        split.append(
            f"{k} ×{n} → {parts} group{'s' if parts != 1 else ''}"
            + (f" (+{pad} padding layers)" if pad else "")
        )
    unify = [
        f"layers of one kind share block tables, in groups of {group_size} layers ({rule}: "
        f"vLLM's _get_kv_cache_groups_uniform_page_size): " + ", ".join(split),
        *lay.notes,
    ]
    pages = {g["page_bytes"] for g in groups}
    if len(pages) == 1:
        state = any(g["kind"] == "mamba" for g in groups)
        unify.append(
            f"every group's page is {next(iter(pages)):,} B (one layer's {lay.block_size} tokens"
            + (", and a state padded to it" if state else "")
            + f"): one block id is that page in each of a group's {group_size} layers"
        )
    return {
        "groups": groups,
        "block_size": lay.block_size,
        "asked_block_size": cfg.block_size,
        "scheduler_block_size": lay.scheduler_block_size,
        "bytes_per_block": lay.bytes_per_block,
        "group_size": group_size,
        # Attention layers (full, sliding window, chunked): each would keep every token's K and V if counted
        # as full attention (`model.full_attention_bytes_per_token`).
        "attention_layers": sum(
            layer.kind in ("full", "sliding_window", "chunked_local") for layer in layers
        ),
        "describe": lay.describe(),
        "unify": unify,
        "kv_cache_bytes": kv_bytes,
        "num_blocks": cfg.num_blocks,
    }


def tier_info(cfg: SimConfig, t: Track, tier_bytes: int | None) -> dict[str, Any] | None:
    """The CPU tier's constants (DESIGN.md §CPU tier), None without one: its chunks and their bytes
    (a chunk's blocks' KV padded to 4 KiB, as vLLM's `CPUOffloadingSpec`), the memory asked for, the
    eviction policy, the store threshold and how it counts, whether a tier hit sets the junction
    (`kv_offloading_hit_junction`), the link's time, and the run's totals the log has no row for (`stores_failed`:
    stores that found no room; `stores_skipped`: under the store threshold)."""
    if not cfg.kv_offloading_chunks:
        return None
    summary = t.result.summary
    return {
        "chunks": cfg.kv_offloading_chunks,
        "chunk_bytes": cfg.kv_offloading_chunk_bytes,
        "bytes": tier_bytes,
        "blocks_per_chunk": cfg.kv_offloading_blocks_per_chunk,
        "eviction_policy": cfg.kv_offloading_eviction_policy,
        "prompt_only": cfg.kv_offloading_prompt_only,
        "store_threshold": cfg.kv_offloading_store_threshold,
        "store_threshold_count": cfg.kv_offloading_store_threshold_count,
        "hit_junction": cfg.kv_offloading_hit_junction,
        "latency_s": cfg.kv_offloading_latency_ps / 1e12,
        "s_per_block": cfg.kv_offloading_ps_per_block / 1e12,
        "stores_failed": int(summary["stores_failed"]),
        "stores_skipped": int(summary["stores_skipped"]),
        "load_wait_s_total": float(summary["load_wait_s_total"]),
    }


def time_info(cfg: SimConfig) -> dict[str, Any]:
    """The run's clock (DESIGN.md §Lab): `name` the time model the engine ran under; with `"ticks"` (a
    config that names no GPU) every step lasts `step_s` (1 ms), a counter of steps, not a GPU's time."""
    ticks = cfg.time_model == "ticks"
    return {
        "name": cfg.time_model,
        "step_s": cfg.iteration_time_ps / 1e12 if ticks else None,
        "gpu": getattr(cfg, "gpu", None),
    }


def _human(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"
