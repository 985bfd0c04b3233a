"""Reference hybrid KV-cache manager: one block table per KV-cache group over one pool (DESIGN.md §Hybrid
attention), vLLM 0.33.0's `HybridKVCacheCoordinator` and its single-type managers.

The executable spec of `rust/core/src/kv_groups/`; same API, same answers, written for clarity. A
request's table in group `g` holds its blocks of `block_size[g]` tokens, the null block (0) where a
window's tokens were skipped. The engine calls, per allocation of a request (vLLM's `allocate_slots`):
`need` (the blocks to pop, hits that are free included), `remove_skipped`, then `admit` (a new request:
its hits, new blocks and keys) or `grow` (a running one), and `free`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def peak_blocks(groups: Sequence[GroupSpec], last: int) -> int:
    """Blocks of all `groups` a request whose tokens reach `last` holds at most: full attention every
    token's, a window at most its admission cap, local chunks too, one block more where a chunk is no
    multiple of the block (vLLM's cap, `ceil((A + in flight) / B)`, misses the block a chunk starting inside
    one takes: a request needing it would preempt itself and be readmitted forever), a state its one block
    (what rejection at arrival compares, and `run_report.admissions_never_waited_for_memory` bounds a
    prompt's admission by)."""
    total = 0
    for spec in groups:
        n = _cdiv(last, spec.block_size)
        if spec.cap is not None:
            straddles = spec.kind == "chunked_local" and spec.window % spec.block_size != 0
            n = min(n, spec.cap + straddles)
        total += n
    return total


@dataclass(frozen=True)
class GroupSpec:
    """One KV-cache group as the engine sees it.

    Attributes:
        kind: one of `KINDS`.
        window: the sliding window or chunk, in tokens (0 otherwise).
        block_size: tokens per block of this group.
        cap: the full-prompt admission check's per-request cap in blocks (sliding-window and chunked-local
            groups: vLLM's `max_admission_blocks_per_request`), or None; a Mamba group with prefix caching:
            the blocks a request holds at most (2 + `checkpoint_blocks`), read only at arrival.
        checkpoint_blocks: a Mamba group's prefill-checkpoint blocks (vLLM's
            `num_prefill_checkpoint_blocks`: 0 or 1).
    """

    kind: str
    window: int
    block_size: int
    cap: int | None = None
    checkpoint_blocks: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidArgumentError(f"group kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.block_size < 1:
            raise InvalidArgumentError(f"group block_size {self.block_size} must be at least 1")
        if self.kind in ("sliding_window", "chunked_local") and self.window < 1:
            raise InvalidArgumentError(f"a {self.kind} group needs a window of at least 1 token")
        if self.checkpoint_blocks not in (0, 1) or (self.checkpoint_blocks and self.kind != "mamba"):
            raise InvalidArgumentError(
                f"group checkpoint_blocks {self.checkpoint_blocks} must be 0, or 1 for a Mamba group"
            )

    def skipped(self, computed: int) -> int:
        """Tokens the next token no longer attends to after `computed` (vLLM's `get_num_skipped_tokens`)."""
        if self.kind == "sliding_window":
            return max(0, computed - self.window + 1)
        if self.kind == "chunked_local":
            return computed // self.window * self.window
        if self.kind == "mamba":
            return max(0, computed - 1)  # the state after the last computed token is all a step reads
        return 0

    @property
    def sparse(self) -> bool:
        """Keys only the blocks a later request could hit (vLLM's sparse retention: sliding window and
        Mamba groups)."""
        return self.kind in ("sliding_window", "mamba")

    @property
    def run_blocks(self) -> int:
        """Consecutive blocks a sparse group's hit needs: a window's `ceil((W - 1) / B)`, a state's one."""
        return 1 if self.kind == "mamba" else _cdiv(self.window - 1, self.block_size)


@dataclass
class GroupTable:
    """A request's blocks in one group, and how many of them were considered for keys (vLLM's
    `num_cached_block`)."""

    blocks: list[int] = field(default_factory=list)
    num_cached: int = 0


@dataclass
class _Request:
    rid: int
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
        mamba = [spec for spec in self.groups if spec.kind == "mamba"]
        self.has_mamba = bool(mamba)
        # Mamba states with prefix caching: vLLM's `mamba_cache_mode="align"` (DESIGN.md §Hybrid attention).
        self.align = enable_caching and bool(mamba)
        self.mamba_block_size = mamba[0].block_size if mamba else 0
        if self.align and any(spec.block_size != self.mamba_block_size for spec in mamba):
            raise InvalidArgumentError("Mamba groups with prefix caching must share one block size")
        # Every Mamba group exports a prefill checkpoint (vLLM's `mamba_has_prefill_checkpoint_blocks`).
        self.checkpoints = self.align and all(spec.checkpoint_blocks > 0 for spec in mamba)
        # Keys a Mamba group set in this step (vLLM's `cached_blocks_this_step`): cleared by `new_step`.
        self.keyed_this_step: set[int] = set()
        # A CPU tier's hand-offs (DESIGN.md §CPU tier, "A Mamba group"; vLLM's
        # `_pending_boundary_state_offloads`): each state block keyed since the last `take_boundary_states`,
        # as (request, group, block, boundary); None: not recorded (no tier).
        self.boundary_states: list[tuple[int, int, int, int]] | None = None

    # -- queries --------------------------------------------------------------------------------------
    def remote_end(self, total: int) -> int:
        """Where a decode replica's transfer of a prompt of `total` tokens ends (DESIGN.md §Prefill/decode
        disaggregation, "A hybrid model"): the scheduler's last full block of it; with a Mamba group the
        prompt but its last token, which the decode side computes from the loaded state (vLLM's
        `_get_remote_prefill_token_count`; a one-token prompt whole) (Rust `Groups::remote_end`)."""
        if self.has_mamba:
            return total - 1 if total > 1 else total
        return total // self.sched_bs * self.sched_bs

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_evictions(self) -> int:
        return self.pool.num_evictions

    def new_step(self) -> None:
        """A step's scheduling starts: the states keyed in the last one exist now."""
        self.keyed_this_step.clear()

    def needs_checkpoint(self, start: int, end: int, num_tokens: int, num_prompt: int) -> bool:
        """An allocation of `[start, end)` for a request of `num_tokens` tokens reserves a prefill
        checkpoint (vLLM 0.33.0's `MambaManager.get_num_blocks_to_allocate`: the checkpoint position of the
        allocation's end): it reaches the prefill's end (any chunk unless the retention interval is 0:
        the coordinator passes 0 for a positive interval and for None, dense retention), starts on a block boundary and covers the last boundary before `end` with a
        block to spare before it (`is_mamba_prefill_checkpoint_valid`). `end` is a chunk's end, or the
        whole sequence for the full-prompt gate."""
        if not self.checkpoints:
            return False
        prefill_end = 0 if self.retention != 0 else max(num_prompt, num_tokens - 1)
        return end >= prefill_end and self._checkpoint_valid(start, end, end)

    def _checkpoint_valid(self, start: int, end: int, upto: int) -> bool:
        """`is_mamba_prefill_checkpoint_valid` for a query `[start, end)` and the checkpoint position of
        `upto` tokens (the last boundary before it)."""
        bs = self.mamba_block_size
        ckpt = (upto - 1) // bs * bs
        return start % bs == 0 and start + bs <= ckpt < end

    def split(
        self, start: int, n: int, num_tokens: int, num_prompt: int, junction: int, budget_max: int
    ) -> int:
        """The tokens of a chunk of `n` from `start` after vLLM's `_mamba_block_aligned_split` (DESIGN.md
        §Hybrid attention): prefill chunks end on block boundaries, the prompt's tail is a step of its own
        (unless a checkpoint is reserved) and a chunk stops at the junction. 0: nothing this step."""
        if not self.align:
            return n
        bs = self.mamba_block_size
        prefill_end = max(num_prompt, num_tokens - 1)
        end = start + n
        if start >= prefill_end:
            return n
        # (the scheduler's split places the checkpoint from the prefill's end, whatever the chunk's)
        use_ckpt = self.checkpoints and end >= prefill_end and self._checkpoint_valid(start, end, prefill_end)
        if end < prefill_end:
            aligned = end // bs * bs
            if aligned > start or bs <= budget_max:
                end = aligned
        stops = []
        if not use_ckpt:
            if start % bs:
                stops.append((start // bs + 1) * bs)
            stops.append((num_tokens - 1) // bs * bs)
        if junction > start:
            stops.append(start + (junction - start) // bs * bs)
        for stop in stops:
            if start < stop < end:
                end = stop
        return max(end - start, 0)

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._requests

    def tables(self, request_id: int) -> list[list[int]]:
        """The request's table in each group (block 0 where a window's tokens were skipped)."""
        return [list(t.blocks) for t in self._requests[request_id].tables]

    def junction(self, request_id: int) -> int:
        """The end of the shared prefix the request's lookup found (0 if none)."""
        return self._requests[request_id].junction

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

    def _cached(self, key: int, gids: list[int], held: Callable[[int], bool] | None) -> list[int] | None:
        """The block cached under `key` in each of `gids`, or None if any misses (`get_cached_block`);
        against `held` (a snapshot of the pool's keys, a router's view), NULL for each block held."""
        out = []
        for g in gids:
            if held is not None:
                if not held(group_key(key, g)):
                    return None
                out.append(NULL)
                continue
            b = self.pool.lookup(group_key(key, g))
            if b is None:
                return None
            out.append(b)
        return out

    def lookup(
        self, segments: Sequence[tuple[int, int]], max_tokens: int, held: Callable[[int], bool] | None = None
    ) -> Lookup:
        """The longest prefix of at most `max_tokens` tokens every group can serve (vLLM's
        `find_longest_cache_hit`, §Hybrid attention); no side effects. With `held`, the keys a snapshot of
        the pool holds (a router's view, §Clusters) stand for the pool's (the hit's blocks then NULL)."""
        n_groups = len(self.groups)
        if not self.enable_caching:
            return Lookup([[] for _ in range(n_groups)], 0, 0)
        req = _Request(-1, [])
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
                found, curr = self._find(req, segments, spec, gids, curr, held)
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
        held: Callable[[int], bool] | None = None,
    ) -> tuple[list[list[int]], int]:
        """One spec's longest hit within `max_len` tokens: per group its blocks, and the tokens hit."""
        bs, align = spec.block_size, self.alignment
        n = max_len // bs
        keys = self._keys(req, segments, bs, n)
        if spec.kind == "full":
            found: list[list[int]] = [[] for _ in gids]
            for i in range(n):
                cached = self._cached(keys[i], gids, held)
                if cached is None:
                    break
                for out, b in zip(found, cached, strict=True):
                    out.append(b)
            hit = len(found[0]) * bs
            hit -= hit % align
            for out in found:
                del out[_cdiv(hit, bs) :]
            return found, hit
        if spec.kind in ("sliding_window", "mamba"):
            need = spec.run_blocks
            found = [[NULL] * n for _ in gids]
            run = 0
            matched = False
            for i in range(n - 1, -1, -1):
                cached = self._cached(keys[i], gids, held)
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
                cached = self._cached(keys[i], gids, held)
                if cached is None:
                    break
                for out, b in zip(found, cached, strict=True):
                    out.append(b)
            return found, len(found[0]) * bs
        raise InternalError(f"group kind {spec.kind!r} has no prefix lookup")

    def need(
        self,
        request_id: int,
        num_tokens: int,
        hit: Lookup | None,
        computed: int,
        capped: bool = False,
        checkpoint: bool = False,
    ) -> int:
        """Blocks the pool must pop to give the request slots for `num_tokens` tokens (vLLM's
        `get_num_blocks_to_allocate`): a running request's new blocks, or a new one's (beyond its skipped
        and hit blocks) plus its hits that are free; `capped` applies the admission cap (the full-prompt
        check); `checkpoint`: the chunk reserves a prefill checkpoint (`needs_checkpoint`). A new request
        whose Mamba hit was keyed in this step needs more than the pool holds (it starts next step)."""
        req = self._requests.get(request_id)
        if req is None and hit is not None and self.align and self._hit_keyed_this_step(hit):
            return self.pool.num_blocks + 1
        total = 0
        for g, spec in enumerate(self.groups):
            required = _cdiv(num_tokens, spec.block_size)
            have = len(req.tables[g].blocks) if req is not None else 0
            if spec.kind == "mamba":
                # One state block per allocation (two with a checkpoint), the positions between null.
                have = have if req is not None else len(hit.hits[g]) if hit is not None else 0
                if required > have:
                    total += min(required - have, 1 + int(checkpoint))
                if req is None and hit is not None:
                    total += sum(1 for b in hit.hits[g] if b != NULL and self.pool.ref_cnt(b) == 0)
                continue
            if capped and spec.cap is not None:
                required = min(required, spec.cap)
            if req is not None:
                total += max(required - have, 0)
                continue
            hits = hit.hits[g] if hit is not None else []
            skipped = spec.skipped(computed) // spec.block_size
            total += max(required - max(skipped, len(hits) + have), 0)
            outside = hits[max(0, skipped - have) :]
            total += sum(1 for b in outside if b != NULL and self.pool.ref_cnt(b) == 0)
        return total

    def _hit_keyed_this_step(self, hit: Lookup) -> bool:
        """A Mamba group's hit block (its table's last entry) got its key in this step."""
        if not self.keyed_this_step or hit.tokens == 0:
            return False
        for g, spec in enumerate(self.groups):
            blocks = hit.hits[g]
            if (
                spec.kind == "mamba"
                and blocks
                and blocks[-1] != NULL
                and self.pool.block_hash(blocks[-1]) in self.keyed_this_step
            ):
                return True
        return False

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
                    if spec.kind == "mamba":
                        continue  # a state table has null positions inside it
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
        checkpoint: bool = False,
        computed: int | None = None,
    ) -> list[tuple[int, int]]:
        """A new request takes its hits (skipped ones as null blocks), then blocks for `num_tokens` tokens
        group by group, and keys its full blocks up to `num_cache` tokens. The caller checked `need`.
        `computed`: the tokens it has computed once a CPU-tier load lands (its hits and the loaded ones:
        the windows skip from there, vLLM's `allocate_new_computed_blocks` with external tokens), else its
        hits'."""
        req = _Request(
            request_id, [GroupTable() for _ in self.groups], num_prompt=num_prompt, junction=hit.junction
        )
        done = hit.tokens if computed is None else computed
        for g, spec in enumerate(self.groups):
            skipped = spec.skipped(done) // spec.block_size
            taken = hit.hits[g][skipped:]
            self.pool._acquire([b for b in taken if b != NULL])
            table = req.tables[g]
            table.blocks = [NULL] * skipped + taken
            table.num_cached = len(table.blocks)
        self._requests[request_id] = req
        return self._allocate_and_cache(req, segments, num_tokens, num_cache, checkpoint)

    def grow(
        self,
        request_id: int,
        segments: Sequence[tuple[int, int]],
        num_tokens: int,
        num_cache: int,
        checkpoint: bool = False,
    ) -> list[tuple[int, int]]:
        """A running request's blocks for `num_tokens` tokens, keys up to `num_cache` tokens. The caller
        checked `need`."""
        return self._allocate_and_cache(
            self._requests[request_id], segments, num_tokens, num_cache, checkpoint
        )

    def cache_to(self, request_id: int, segments: Sequence[tuple[int, int]], num_tokens: int) -> None:
        """The request's blocks up to `num_tokens` take their keys (vLLM's `cache_blocks` in
        `update_from_output` under asynchronous scheduling, when a step's sampled tokens arrive)."""
        self._cache(self._requests[request_id], segments, num_tokens)

    def cache_loaded(
        self, request_id: int, segments: Sequence[tuple[int, int]], num_tokens: int
    ) -> list[tuple[int, int, int, int]]:
        """A CPU-tier load landed: the request's blocks up to `num_tokens` take their keys (vLLM's
        `cache_blocks` in `_update_waiting_for_remote_kv`). The state blocks keyed are returned as
        (group, block, boundary, key), neither marked keyed in this step nor handed off: vLLM keys them
        when its waiting pass first reaches the request, where the engine calls `adopt_loaded`."""
        landed: list[tuple[int, int, int, int]] = []
        self._cache(self._requests[request_id], segments, num_tokens, landed)
        return landed

    def adopt_loaded(self, request_id: int, landed: list[tuple[int, int, int, int]]) -> None:
        """The waiting pass reached a request whose load landed: its state keys (`cache_loaded`'s) count as
        keyed in this step and its states are handed off, as vLLM keys them there."""
        for g, b, boundary, key in landed:
            self.keyed_this_step.add(key)
            if self.boundary_states is not None:
                self.boundary_states.append((request_id, g, b, boundary))

    def take_boundary_states(self) -> list[tuple[int, list[tuple[int, int, int]]]]:
        """The step's hand-offs, drained (vLLM's `take_boundary_state_offloads`): per request, in the order
        of its first, its (group, block, boundary), group by group, each group's in keying order."""
        if not self.boundary_states:
            return []
        entries = self.boundary_states
        self.boundary_states = []
        out: dict[int, list[tuple[int, int, int]]] = {}
        for g in sorted({g for _, g, _, _ in entries}):
            for rid, gg, b, boundary in entries:
                if gg == g:
                    out.setdefault(rid, []).append((g, b, boundary))
        return list(out.items())

    def _allocate_and_cache(
        self,
        req: _Request,
        segments: Sequence[tuple[int, int]],
        num_tokens: int,
        num_cache: int,
        checkpoint: bool,
    ) -> list[tuple[int, int]]:
        new: list[tuple[int, int]] = []
        for g, (spec, table) in enumerate(zip(self.groups, req.tables, strict=True)):
            n = _cdiv(num_tokens, spec.block_size) - len(table.blocks)
            if n > 0 and spec.kind == "mamba":
                # The state at the chunk's end (and the checkpoint's before it); the positions between null.
                n = min(n, 1 + int(checkpoint))
                table.blocks.extend([NULL] * (_cdiv(num_tokens, spec.block_size) - n - len(table.blocks)))
            if n > 0:
                got = self.pool.allocate(n)
                assert got is not None, "the caller checked the room"
                table.blocks.extend(got)
                new.extend((b, g) for b in got)
        self._cache(req, segments, num_cache)
        return new

    def _cache(
        self,
        req: _Request,
        segments: Sequence[tuple[int, int]],
        num_tokens: int,
        landed: list[tuple[int, int, int, int]] | None = None,
    ) -> None:
        """Keys each group's full blocks up to `num_tokens` tokens (vLLM's `cache_blocks`); a state block
        keyed is marked keyed in this step and handed off (`boundary_states`), or listed in `landed`."""
        if not self.enable_caching:
            return
        cacheable = num_tokens if len(self.groups) == 1 else num_tokens // self.sched_bs * self.sched_bs
        for g, (spec, table) in enumerate(zip(self.groups, req.tables, strict=True)):
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
                key = group_key(keys[i], g)
                self.pool.register(b, key)
                if spec.kind == "mamba":
                    if landed is not None:
                        landed.append((g, b, (i + 1) * bs, key))
                        continue
                    self.keyed_this_step.add(key)
                    if self.boundary_states is not None:
                        self.boundary_states.append((req.rid, g, b, (i + 1) * bs))
            table.num_cached = num_full

    def _mask(self, spec: GroupSpec, req: _Request, start: int, end: int) -> list[bool] | None:
        """Which of blocks `[start, end)` a sparse group keys (vLLM's `reachable_block_mask`, no EAGLE),
        or None for all of them."""
        if not spec.sparse:
            return None
        bs, align = spec.block_size, self.alignment
        if align % bs:
            return None
        need = spec.run_blocks
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

    def free(self, request_id: int, at_once: bool = False) -> list[tuple[int, int]]:
        """Frees the request's tables group by group, each in reverse without its leading null blocks;
        returns (block, group) in that order. Unknown ids are a no-op. `at_once`: as vLLM's deferred free
        (`defer_block_free`: `pop_blocks_for_free`, every group's table in group order, then one
        `free_blocks` of them reversed in `_drain_deferred_frees`), one release of all groups, the last
        group's last block first (the Rust `free_at_once`)."""
        req = self._requests.pop(request_id, None)
        out: list[tuple[int, int]] = []
        if req is None:
            return out
        if self.boundary_states:  # its hand-offs not offered yet are dropped (vLLM's `pop_blocks_for_free`)
            self.boundary_states = [e for e in self.boundary_states if e[0] != request_id]
        if at_once:
            out = [(b, g) for g, table in enumerate(req.tables) for b in table.blocks if b != NULL]
            out.reverse()
            self.pool._release([b for b, _ in out])
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
