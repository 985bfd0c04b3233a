"""DeepSeek-V4's KV-cache layout as vLLM 0.33.0 builds it (DESIGN.md §Hybrid attention, "DeepSeek-V4"): each
layer's caches (the indexer's keys and state, the sliding window, the compressed latent cache, the
compressor's state) registered as their own specs and packed into groups by page size
(`deepseek_v4_layout`, called by `kvsim.model.layers.kv_layout`).
"""

from __future__ import annotations

import math
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.dsa import dsa_index_bytes
from kvsim.model.layer_types import (
    DSV4_ALIGNMENT,
    DSV4_BLOCK,
    DSV4_ENTRY_BYTES,
    DSV4_SWA_BLOCK,
    KVGroup,
    KVLayout,
    Layer,
)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


Spec = tuple[str, int, int, int]  # (group kind, window, block size in tokens, page bytes)


def _deepseek_v4_specs(layer: Layer) -> list[Spec]:
    """A DeepSeek-V4 layer's caches as vLLM 0.33.0 registers them, in its order (the indexer's keys and
    state, the sliding window, the compressed latent cache, the compressor's state), each as (group kind,
    window, block size, page bytes on one GPU: every cache has one head, `max_tp_shards=1`).

    - indexer keys (`DeepseekV4IndexerCache`, ratio 4): `MLAAttentionSpec`, `tokens_per_state` 4, blocks of
      256 tokens = 64 entries of `index_head_dim` fp8 values + an fp32 scale per 128 (132 bytes);
    - indexer state (its `DeepseekCompressor`'s `CompressorStateCache`): `SlidingWindowMLASpec` of window
      `coff · ratio` = 8, blocks of 4 entries of `2 · coff · index_head_dim` fp32 values;
    - sliding window (`DeepseekV4SWACache`): `SlidingWindowMLASpec`, blocks of 64 tokens of 584 bytes;
    - compressed latent (`DeepseekV4Attention.get_kv_cache_spec`, ratio > 1): `MLAAttentionSpec`,
      `tokens_per_state` r, blocks of 256 tokens = 256 / r entries of 584 bytes;
    - compressor state: `SlidingWindowMLASpec` of window `coff · r` (`coff` 2 for ratio 4, else 1), blocks
      of 4 (ratio 4) or 8 (ratio 128) entries of `2 · coff · 512` fp32 values.

    Every page is rounded up to a multiple of 576 bytes (`_apply_alignment_padding`). A compressed cache's
    block counts as a full-attention block of 256 tokens: vLLM's managers read `tokens_per_state` nowhere.
    """
    r = layer.compress_ratio
    out: list[Spec] = []

    def page(entries: int, entry_bytes: int) -> int:
        return _round_up(entries * entry_bytes, DSV4_ALIGNMENT)

    if r == 4:
        idx = layer.index_head_dim
        out.append(("full", 0, DSV4_BLOCK, page(DSV4_BLOCK // r, dsa_index_bytes(idx))))
        out.append(("sliding_window", 2 * r, 4, page(4, 2 * 2 * idx * 4)))
    out.append(("sliding_window", layer.window, DSV4_SWA_BLOCK, page(DSV4_SWA_BLOCK, DSV4_ENTRY_BYTES)))
    if r > 1:
        coff = 2 if r == 4 else 1
        head = layer.head_dim or 512
        out.append(("full", 0, DSV4_BLOCK, page(DSV4_BLOCK // r, DSV4_ENTRY_BYTES)))
        state_bs = 4 if r == 4 else 8
        out.append(("sliding_window", coff * r, state_bs, page(state_bs, 2 * coff * head * 4)))
    return out


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """vLLM's `_approximate_gcd`: the `d` in [lower_bound, max(values)] with the least padding
    `sum((d - x % d) % d)`, ties going to the larger `d`."""
    lo, hi = max(1, lower_bound), max(values)
    if lo > hi:
        return lo
    best, best_pad = lo, None
    for d in range(lo, hi + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


def _packed_groups(specs: list[tuple[int, Spec]]) -> list[KVGroup]:
    """vLLM 0.33.0's grouping of unequal pages for a block-outermost layout
    (`_get_packed_kv_cache_groups`, `vllm/v1/core/kv_cache_planning.py`; DESIGN.md §Hybrid attention).

    Caches are bucketed first-fit in order: one bucket holds caches of one kind and block size (sliding
    windows: of one window). A bucket is balanced when each of its page sizes has as many caches. The repeats
    per group is `_approximate_gcd` of the balanced buckets' caches per page size, at least the largest such
    count of a balanced bucket of several page sizes; a balanced bucket then makes `ceil(count / repeats)`
    groups, repeat `k` of its pattern going to group `k mod groups`; any other bucket is one group. Without
    repeats, a sliding-window bucket is a state bucket, split so that a group fits the widest block.
    """
    buckets: list[list[tuple[int, Spec]]] = []
    for item in specs:
        kind, window, bs, _ = item[1]
        for bucket in buckets:
            k0, w0, bs0, _ = bucket[0][1]
            if bs0 == bs and k0 == kind and (kind != "sliding_window" or w0 == window):
                bucket.append(item)
                break
        else:
            buckets.append([item])
    info = []
    for bucket in buckets:
        by_page: dict[int, list[tuple[int, Spec]]] = {}
        for item in bucket:
            by_page.setdefault(item[1][3], []).append(item)
        counts = [len(v) for v in by_page.values()]
        info.append((bucket, by_page, len(set(counts)) == 1, max(counts)))
    floor = max((most for _, pages, bal, most in info if bal and len(pages) > 1), default=0)
    repeats = _approximate_gcd([most for _, _, bal, most in info if bal], floor) if floor else None

    def n_groups(bal: bool, most: int) -> int:
        return -(-most // repeats) if bal and repeats is not None else 1

    def widest(pages: dict[int, list[tuple[int, Spec]]], n: int) -> int:
        return sum(-(-len(v) // n) * page for page, v in pages.items())

    def is_state(bucket: list[tuple[int, Spec]]) -> bool:
        return repeats is None and bucket[0][1][0] == "sliding_window"

    anchor = max(
        (widest(pages, len(b) if is_state(b) else n_groups(bal, most)) for b, pages, bal, most in info),
        default=0,
    )
    groups: list[KVGroup] = []
    for bucket, pages, bal, most in info:
        n = n_groups(bal, most)
        if anchor and is_state(bucket):
            per_block = max(anchor // bucket[0][1][3], 1)
            n = max(n, -(-len(bucket) // per_block))
        if n == 1:
            members = [bucket]
        else:
            rows = list(zip(*pages.values(), strict=False))
            if sum(len(r) for r in rows) != len(bucket):
                raise InvalidArgumentError(
                    "a bucket of unequal page counts would be split (vLLM's packed grouping drops caches "
                    "there): not modelled"
                )
            members = [[item for row in rows[k::n] for item in row] for k in range(n)]
        for m in members:
            kind, window, bs, page = m[0][1]
            ids = tuple(i for i, _ in m)
            groups.append(KVGroup(kind, window, bs, len(m), ids, page, sum(s[3] for _, s in m)))
    return groups


def deepseek_v4_layout(
    model: Any, layers: list[Layer], block_size: int, hybrid_kv_cache_manager: str
) -> KVLayout:
    """DeepSeek-V4's KV-cache groups as vLLM 0.33.0 forms them (DESIGN.md §Hybrid attention,
    "DeepSeek-V4"): each layer's caches (`_deepseek_v4_specs`) packed into groups (`_packed_groups`: its
    indexer backend supports only the block-outermost layout); a block id takes the largest group's pages
    (`_get_kv_cache_bytes_per_block`, block-outermost: no padding layers)."""
    name = getattr(model, "name", "?")
    if any(lay.kind != "deepseek_v4" for lay in layers):
        raise InvalidArgumentError(f"model {name}: DeepSeek-V4 layers mixed with other layer kinds")
    if hybrid_kv_cache_manager == "off":
        raise InvalidArgumentError(
            f"model {name}: DeepSeek-V4's sliding-window and compressor-state caches need vLLM's hybrid "
            "KV-cache manager: hybrid_kv_cache_manager 'off' is not modelled for it"
        )
    if block_size not in (16, DSV4_BLOCK):
        raise InvalidArgumentError(
            f"model {name}: block_size {block_size}: vLLM gives DeepSeek-V4 blocks of {DSV4_BLOCK} tokens when "
            "--block-size is not set (the least size all its attention backends take: "
            "_preferred_block_size_for_backends); kvsim models that one (its default 16 stands for not set)"
        )
    specs = [(i, spec) for i, lay in enumerate(layers) for spec in _deepseek_v4_specs(lay)]
    kinds = {(k, w if k == "sliding_window" else 0, bs) for _, (k, w, bs, _) in specs}
    if len(kinds) == 1:
        # One spec, or one kind with per-layer pages (`is_kv_cache_spec_uniform`,
        # `UniformTypeKVCacheSpecs.from_specs`): one group, before any packing (every layer without
        # compression).
        kind, window, bs, page = specs[0][1]
        groups = [
            KVGroup(
                kind, window, bs, len(specs), tuple(i for i, _ in specs), page, sum(s[3] for _, s in specs)
            )
        ]
    else:
        groups = _packed_groups(specs)
    notes = [
        f"DeepSeek-V4: KV priced in FlashMLA's fp8_ds_mla layout ({DSV4_ENTRY_BYTES} B an entry), blocks of "
        f"{DSV4_BLOCK} tokens whatever the KV dtype asked for, caches packed block-outermost (DESIGN.md "
        "§Hybrid attention)"
    ]
    # The engines count a group's block as its B_g token slots over a unit of the smallest group's block
    # (as for pages unified by a larger block size), so the layout's block size is that one: 4 tokens.
    return KVLayout(
        tuple(groups),
        max(g.bytes_per_block for g in groups),
        min(g.block_size for g in groups),
        math.lcm(*(g.block_size for g in groups)),
        False,
        False,
        tuple(notes),
        packed=len(groups) > 1,
    )
