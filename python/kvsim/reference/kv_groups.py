"""Reference hybrid KV-cache manager: one block table per KV-cache group over one pool (DESIGN.md §Hybrid
attention), vLLM 0.33.0's `HybridKVCacheCoordinator` and its single-type managers.

The executable spec of `rust/core/src/kv_groups/`; same API, same answers, written for clarity. A
request's table in group `g` holds its blocks of `block_size[g]` tokens, the null block (0) where a
window's tokens were skipped. The engine calls, per allocation of a request (vLLM's `allocate_slots`):
`need` (the blocks to pop, hits that are free included), `remove_skipped`, then `admit` (a new request:
its hits, new blocks and keys) or `grow` (a running one), and `free`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvsim.errors import InternalError, InvalidArgumentError
from kvsim.reference.block_pool import BlockPool
from kvsim.reference.hashing import MASK64, iter_block_keys, mix64

KINDS = ("full", "sliding_window", "chunked_local", "mamba")
NULL = 0


def group_key(key: int, group: int) -> int:
    """A content key tagged with its group (vLLM's `BlockHashWithGroupId`): one content is cached once
    per group. Both lanes are chained with the group's index through `mix64`."""
    lo = mix64((key & MASK64) ^ (group + 1))
    hi = mix64(((key >> 64) + group + 1) & MASK64)
    return (hi << 64) | lo


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class GroupSpec:
    """One KV-cache group as the engine sees it.

    Attributes:
        kind: one of `KINDS`.
        window: the sliding window or chunk, in tokens (0 otherwise).
        block_size: tokens per block of this group.
        cap: the full-prompt admission check's per-request cap in blocks (sliding-window and chunked-local
            groups: vLLM's `max_admission_blocks_per_request`), or None.
    """

    kind: str
    window: int
    block_size: int
    cap: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidArgumentError(f"group kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.block_size < 1:
            raise InvalidArgumentError(f"group block_size {self.block_size} must be at least 1")
        if self.kind in ("sliding_window", "chunked_local") and self.window < 1:
            raise InvalidArgumentError(f"a {self.kind} group needs a window of at least 1 token")

    def skipped(self, computed: int) -> int:
        """Tokens the next token no longer attends to after `computed` (vLLM's `get_num_skipped_tokens`)."""
        if self.kind == "sliding_window":
            return max(0, computed - self.window + 1)
        if self.kind == "chunked_local":
            return computed // self.window * self.window
        return 0

    @property
    def sparse(self) -> bool:
        """Keys only the blocks a later request could hit (vLLM's sparse retention: sliding window)."""
        return self.kind == "sliding_window"


@dataclass
class GroupTable:
    """A request's blocks in one group, and how many of them were considered for keys (vLLM's
    `num_cached_block`)."""

    blocks: list[int] = field(default_factory=list)
    num_cached: int = 0


@dataclass
class _Request:
    tables: list[GroupTable]
    # Keys of the request's full blocks so far, per block size (chained from the first block).
    keys: dict[int, list[int]] = field(default_factory=dict)
    num_prompt: int = 0
    junction: int = 0


@dataclass
class Lookup:
    """A prefix lookup's answer: per group the blocks hit (null blocks for skipped positions), the tokens
    hit, and the junction (end of a prefix a sparse group did not cache, 0 if none)."""

    hits: list[list[int]]
    tokens: int
    junction: int


class HybridKVCacheManager:
    """Per-request tables of several KV-cache groups over one `BlockPool` (block 0 is the null block).

    Args:
        num_blocks: the pool's blocks, the null block included.
        groups: the groups, in vLLM's order.
        scheduler_block_size: the least common multiple of the groups' block sizes.
        enable_caching: prefix caching.
        free_order: the pool's free order.
        retention_interval: vLLM's `prefix_cache_retention_interval` for sparse groups: 0 (its default)
            keeps the replay boundary's and the junction's blocks, a positive multiple of the scheduler's
            block size also one per interval, None every block.
    """

    def __init__(
        self,
        num_blocks: int,
        groups: Sequence[GroupSpec],
        scheduler_block_size: int,
        enable_caching: bool = True,
        free_order: str = "lifo_unhashed",
        retention_interval: int | None = 0,
    ) -> None:
        if not groups:
            raise InvalidArgumentError("a hybrid manager needs at least one group")
        self.pool = BlockPool(num_blocks, enable_caching, free_order)
        self.groups = list(groups)
        self.sched_bs = scheduler_block_size
        self.enable_caching = enable_caching
        self.retention = retention_interval
        self._requests: dict[int, _Request] = {}
        # Groups of one spec are looked up together, full attention first (vLLM's `attention_groups`).
        order: list[tuple[GroupSpec, list[int]]] = []
        for g, spec in enumerate(self.groups):
            key = (spec.kind, spec.window, spec.block_size)
            for s, ids in order:
                if (s.kind, s.window, s.block_size) == key:
                    ids.append(g)
                    break
            else:
                order.append((spec, [g]))
        order.sort(key=lambda e: e[0].kind != "full")
        self.spec_groups = order
        # One group: vLLM's unitary coordinator (its own block size aligns hits, no junction).
        self.alignment = self.groups[0].block_size if len(self.groups) == 1 else scheduler_block_size

    # -- queries --------------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_evictions(self) -> int:
        return self.pool.num_evictions

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._requests

    def tables(self, request_id: int) -> list[list[int]]:
        """The request's table in each group (block 0 where a window's tokens were skipped)."""
        return [list(t.blocks) for t in self._requests[request_id].tables]

    def held(self, request_id: int) -> int:
        """Blocks the request holds (null entries excluded)."""
        return sum(b != NULL for t in self._requests[request_id].tables for b in t.blocks)

    def _keys(self, req: _Request, segments: Sequence[tuple[int, int]], bs: int, n: int) -> list[int]:
        """The request's first `n` full-block keys at block size `bs` (extending the ones kept)."""
        keys = req.keys.setdefault(bs, [])
        if len(keys) < n:
            parent = keys[-1] if keys else None
            keys.extend(iter_block_keys(segments, bs, len(keys), parent, n - len(keys)))
        return keys

    def _cached(self, key: int, gids: list[int]) -> list[int] | None:
        """The block cached under `key` in each of `gids`, or None if any misses (`get_cached_block`)."""
        out = []
        for g in gids:
            b = self.pool.lookup(group_key(key, g))
            if b is None:
                return None
            out.append(b)
        return out

    def lookup(self, segments: Sequence[tuple[int, int]], max_tokens: int) -> Lookup:
        """The longest prefix of at most `max_tokens` tokens every group can serve (vLLM's
        `find_longest_cache_hit`, §Hybrid attention); no side effects."""
        n_groups = len(self.groups)
        if not self.enable_caching:
            return Lookup([[] for _ in range(n_groups)], 0, 0)
        req = _Request([])
        hits: list[list[int] | None] = [None] * n_groups
        lengths = [0] * n_groups
        hit_length = max_tokens
        longest = 0
        simple = len(self.spec_groups) == 2 and self.spec_groups[0][0].kind == "full"
        while True:
            curr = hit_length
            for spec, gids in self.spec_groups:
                if spec.kind == "full" and hits[gids[0]] is not None:
                    curr = min(curr, lengths[gids[0]])
                    continue
                found, curr = self._find(req, segments, spec, gids, curr)
                for g, blocks in zip(gids, found, strict=True):
                    hits[g], lengths[g] = blocks, curr
                longest = max(longest, curr)
            if len(self.groups) == 1 or curr >= hit_length:
                hit_length = min(hit_length, curr)
                break
            hit_length = curr
            if simple:
                break
        for spec, gids in self.spec_groups:
            if spec.kind == "full":
                for g in gids:
                    kept = hits[g]
                    assert kept is not None
                    del kept[_cdiv(hit_length, spec.block_size) :]
        uncached = longest - hit_length if n_groups > 1 else 0
        return Lookup(
            [h if h is not None else [] for h in hits], hit_length, hit_length + uncached if uncached else 0
        )

    def _find(
        self,
        req: _Request,
        segments: Sequence[tuple[int, int]],
        spec: GroupSpec,
        gids: list[int],
        max_len: int,
    ) -> tuple[list[list[int]], int]:
        """One spec's longest hit within `max_len` tokens: per group its blocks, and the tokens hit."""
        bs, align = spec.block_size, self.alignment
        n = max_len // bs
        keys = self._keys(req, segments, bs, n)
        if spec.kind == "full":
            found: list[list[int]] = [[] for _ in gids]
            for i in range(n):
                cached = self._cached(keys[i], gids)
                if cached is None:
                    break
                for out, b in zip(found, cached, strict=True):
                    out.append(b)
            hit = len(found[0]) * bs
            hit -= hit % align
            for out in found:
                del out[_cdiv(hit, bs) :]
            return found, hit
        if spec.kind == "sliding_window":
            need = _cdiv(spec.window - 1, bs)
            found = [[NULL] * n for _ in gids]
            run = 0
            matched = False
            for i in range(n - 1, -1, -1):
                cached = self._cached(keys[i], gids)
                if cached is None:
                    run = 0
                    continue
                if run == 0 and bs != align and (i + 1) * bs % align != 0:
                    continue
                for out, b in zip(found, cached, strict=True):
                    out[i] = b
                run += 1
                if run >= need:
                    for out in found:
                        del out[i + run :]
                    matched = True
                    break
            if not matched:
                for out in found:
                    del out[run:]
                while bs != align and len(found[0]) * bs % align != 0:
                    for out in found:
                        out.pop()
            return found, len(found[0]) * bs
        if spec.kind == "chunked_local":
            start = max_len // spec.window * spec.window if max_len > 0 else 0
            first = start // bs
            found = [[NULL] * first for _ in gids]
            for i in range(first, n):
                cached = self._cached(keys[i], gids)
                if cached is None:
                    break
                for out, b in zip(found, cached, strict=True):
                    out.append(b)
            return found, len(found[0]) * bs
        raise InternalError("a Mamba group caches no prefix (prefix caching is refused with Mamba layers)")

    def need(
        self, request_id: int, num_tokens: int, hit: Lookup | None, computed: int, capped: bool = False
    ) -> int:
        """Blocks the pool must pop to give the request slots for `num_tokens` tokens (vLLM's
        `get_num_blocks_to_allocate`): a running request's new blocks, or a new one's (beyond its skipped
        and hit blocks) plus its hits that are free; `capped` applies the admission cap (the full-prompt
        check)."""
        req = self._requests.get(request_id)
        total = 0
        for g, spec in enumerate(self.groups):
            required = _cdiv(num_tokens, spec.block_size)
            if capped and spec.cap is not None:
                required = min(required, spec.cap)
            have = len(req.tables[g].blocks) if req is not None else 0
            if req is not None:
                total += max(required - have, 0)
                continue
            hits = hit.hits[g] if hit is not None else []
            skipped = spec.skipped(computed) // spec.block_size
            total += max(required - max(skipped, len(hits) + have), 0)
            outside = hits[max(0, skipped - have) :]
            total += sum(1 for b in outside if b != NULL and self.pool.ref_cnt(b) == 0)
        return total

    # -- mutations ------------------------------------------------------------------------------------
    def remove_skipped(self, request_id: int, computed: int) -> list[tuple[int, int]]:
        """Frees the request's blocks that left a window after `computed` tokens, each group's highest
        first down to its first null, replaced by the null block; returns them as (block, group)."""
        req = self._requests.get(request_id)
        if req is None:
            return []
        out: list[tuple[int, int]] = []
        for g, (spec, table) in enumerate(zip(self.groups, req.tables, strict=True)):
            skipped = spec.skipped(computed) // spec.block_size
            freed = []
            for i in range(min(skipped, len(table.blocks)) - 1, -1, -1):
                if table.blocks[i] == NULL:
                    break
                freed.append(table.blocks[i])
                table.blocks[i] = NULL
            if freed:
                self.pool._release(freed)
                out.extend((b, g) for b in freed)
        return out

    def admit(
        self,
        request_id: int,
        segments: Sequence[tuple[int, int]],
        hit: Lookup,
        num_tokens: int,
        num_cache: int,
        num_prompt: int,
    ) -> list[tuple[int, int]]:
        """A new request takes its hits (skipped ones as null blocks), then blocks for `num_tokens` tokens
        group by group, and keys its full blocks up to `num_cache` tokens. The caller checked `need`."""
        req = _Request([GroupTable() for _ in self.groups], num_prompt=num_prompt, junction=hit.junction)
        for g, spec in enumerate(self.groups):
            skipped = spec.skipped(hit.tokens) // spec.block_size
            taken = hit.hits[g][skipped:]
            self.pool._acquire([b for b in taken if b != NULL])
            table = req.tables[g]
            table.blocks = [NULL] * skipped + taken
            table.num_cached = len(table.blocks)
        self._requests[request_id] = req
        return self._allocate_and_cache(req, segments, num_tokens, num_cache)

    def grow(
        self, request_id: int, segments: Sequence[tuple[int, int]], num_tokens: int, num_cache: int
    ) -> list[tuple[int, int]]:
        """A running request's blocks for `num_tokens` tokens, keys up to `num_cache` tokens. The caller
        checked `need`."""
        return self._allocate_and_cache(self._requests[request_id], segments, num_tokens, num_cache)

    def _allocate_and_cache(
        self, req: _Request, segments: Sequence[tuple[int, int]], num_tokens: int, num_cache: int
    ) -> list[tuple[int, int]]:
        new: list[tuple[int, int]] = []
        for g, (spec, table) in enumerate(zip(self.groups, req.tables, strict=True)):
            n = _cdiv(num_tokens, spec.block_size) - len(table.blocks)
            if n > 0:
                got = self.pool.allocate(n)
                assert got is not None, "the caller checked the room"
                table.blocks.extend(got)
                new.extend((b, g) for b in got)
        self._cache(req, segments, num_cache)
        return new

    def _cache(self, req: _Request, segments: Sequence[tuple[int, int]], num_tokens: int) -> None:
        """Keys each group's full blocks up to `num_tokens` tokens (vLLM's `cache_blocks`)."""
        if not self.enable_caching:
            return
        cacheable = num_tokens if len(self.groups) == 1 else num_tokens // self.sched_bs * self.sched_bs
        for g, (spec, table) in enumerate(zip(self.groups, req.tables, strict=True)):
            if spec.kind == "mamba":
                continue
            bs = spec.block_size
            num_full = cacheable // bs
            start = table.num_cached
            if start >= num_full:
                continue
            keys = self._keys(req, segments, bs, num_full)
            mask = self._mask(spec, req, start, num_full)
            for i in range(start, num_full):
                b = table.blocks[i]
                if b == NULL or (mask is not None and not mask[i - start]):
                    continue
                self.pool.register(b, group_key(keys[i], g))
            table.num_cached = num_full

    def _mask(self, spec: GroupSpec, req: _Request, start: int, end: int) -> list[bool] | None:
        """Which of blocks `[start, end)` a sparse group keys (vLLM's `reachable_block_mask`, no EAGLE),
        or None for all of them."""
        if not spec.sparse:
            return None
        bs, align = spec.block_size, self.alignment
        if align % bs:
            return None
        need = _cdiv(spec.window - 1, bs)
        mask = [False] * (end - start)
        segment = align if self.retention is None else (self.retention or None)
        if segment is not None:
            per = segment // bs
            if need >= per:
                return None
            for i in range(start, end):
                if i % per >= per - need:
                    mask[i - start] = True
        if self.retention is not None:
            boundaries = [req.num_prompt - 1]
            if req.junction:
                boundaries.append(req.junction)
            for boundary in boundaries:
                stop = boundary // align * align // bs
                for j in range(max(start, stop - need), min(end, stop)):
                    mask[j - start] = True
        return mask

    def free(self, request_id: int) -> list[tuple[int, int]]:
        """Frees the request's tables group by group, each in reverse without its leading null blocks;
        returns (block, group) in that order. Unknown ids are a no-op."""
        req = self._requests.pop(request_id, None)
        out: list[tuple[int, int]] = []
        if req is None:
            return out
        for g, table in enumerate(req.tables):
            blocks = [b for b in table.blocks if b != NULL]
            blocks.reverse()
            self.pool._release(blocks)
            out.extend((b, g) for b in blocks)
        return out

    # -- checking -------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raises InternalError if the pool or a table is inconsistent."""
        self.pool.check_invariants()
        holders = [0] * self.pool.num_blocks
        for rid, req in self._requests.items():
            for g, table in enumerate(req.tables):
                seen_block = False
                for b in table.blocks:
                    if b == NULL:
                        if seen_block and self.groups[g].kind != "mamba":
                            raise InternalError(f"request {rid} group {g}: a null block after a held one")
                        continue
                    seen_block = True
                    holders[b] += 1
        for b in range(1, self.pool.num_blocks):
            if holders[b] != self.pool.ref_cnt(b):
                raise InternalError(f"block {b}: {holders[b]} holders but ref_cnt {self.pool.ref_cnt(b)}")


__all__ = ["KINDS", "NULL", "GroupSpec", "GroupTable", "HybridKVCacheManager", "Lookup", "group_key"]
