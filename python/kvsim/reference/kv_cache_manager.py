"""Reference KV-cache manager: per-request block tables over a `BlockPool`, prefix lookup, copy-on-write.

The executable spec of `rust/core/src/manager.rs`. The token layout of one request is pictured in
DESIGN.md (§"A request's blocks"); the names below follow it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvsim.arguments import as_int, request_id_arg, u64_arg
from kvsim.errors import InternalError, InvalidArgumentError, InvalidOperationError
from kvsim.reference.block_pool import BlockPool
from kvsim.reference.hashing import Segment, checked_segments, iter_block_keys


@dataclass
class _Request:
    blocks: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    # Blocks [0, num_keyed_blocks) carry keys; last_key is the key of block num_keyed_blocks - 1.
    num_keyed_blocks: int = 0
    last_key: int | None = None


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    """Block tables for requests, on a pool of `num_blocks` blocks (block 0 is the null block).

    A request is known from its first successful `allocate` until `free`. Its table always holds exactly
    `ceil(num_computed_tokens / block_size)` blocks, and with caching on its first
    `num_computed_tokens // block_size` blocks carry their content keys (registered when allocated, so a
    request admitted later in the same step can hit them).
    """

    def __init__(
        self, num_blocks: int, block_size: int, enable_caching: bool = True, free_order: str = "classic"
    ) -> None:
        block_size = u64_arg("block_size", block_size, 1)
        self.pool = BlockPool(num_blocks, enable_caching, free_order)
        self.block_size = block_size
        self.enable_caching = enable_caching
        self._requests: dict[int, _Request] = {}
        self.num_cow_copies = 0

    # -- queries --------------------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def num_evictions(self) -> int:
        return self.pool.num_evictions

    @property
    def num_requests(self) -> int:
        return len(self._requests)

    def __contains__(self, request_id: object) -> bool:
        """Whether the request holds a table. Never raises: anything that is not a request id (a float, a
        bool, None, an int outside u64) is not in it, as with a dict."""
        rid = as_int(request_id)
        return rid is not None and rid in self._requests

    def _get(self, request_id: Any) -> _Request:
        request_id = request_id_arg(request_id)
        req = self._requests.get(request_id)
        if req is None:
            raise InvalidOperationError(f"unknown request {request_id}")
        return req

    def block_table(self, request_id: int) -> list[int]:
        return list(self._get(request_id).blocks)

    def num_computed_tokens(self, request_id: int) -> int:
        return self._get(request_id).num_computed_tokens

    def free_block_ids(self) -> list[int]:
        return self.pool.free_block_ids()

    def cached_block_ids(self) -> list[int]:
        return self.pool.cached_block_ids()

    def ref_cnt(self, block_id: int) -> int:
        return self.pool.ref_cnt(block_id)

    def block_hash(self, block_id: int) -> int | None:
        return self.pool.block_hash(block_id)

    def _hits(self, segments: Sequence[Segment], total: int) -> tuple[list[int], int | None]:
        """Cached blocks of the longest prefix in whole blocks covering at most `total - 1` tokens."""
        hits: list[int] = []
        last_key = None
        if not self.enable_caching:
            return hits, last_key
        for key in iter_block_keys(segments, self.block_size, 0, None, (total - 1) // self.block_size):
            block_id = self.pool.lookup(key)
            if block_id is None:
                break
            hits.append(block_id)
            last_key = key
        return hits, last_key

    def lookup(self, segments: Sequence[Segment]) -> int:
        """Tokens a new request with this content would find cached; no side effects."""
        segs, total = checked_segments(segments)
        return len(self._hits(segs, total)[0]) * self.block_size

    # -- mutations ------------------------------------------------------------------------------------
    def allocate(self, request_id: int, segments: Sequence[Segment], num_new_tokens: int) -> list[int] | None:
        """Makes room for `num_new_tokens` more tokens of a request; returns the new block ids in order.

        `segments` describes every token the request has so far. On a request's first allocation its
        cached prefix is taken first and `num_new_tokens` counts from the end of that prefix. A shared
        partial last block (after `fork`) is copied before the write (copy-on-write; the copy comes first
        in the returned list). Returns None, changing nothing, when the blocks do not fit.

        Raises:
            InvalidArgumentError: a `request_id` or `num_new_tokens` that is not an integer or is out of
                range (`num_new_tokens` in `[1, 2**64)`), bad segments, or more tokens than the segments
                hold. Every argument is checked before anything changes.
        """
        return self._allocate(request_id, segments, num_new_tokens, True)

    def _allocate(
        self, request_id: int, segments: Sequence[Segment], num_new_tokens: int, keyed: bool
    ) -> list[int] | None:
        """`allocate`; `keyed` False (engine use: a discarded token, DESIGN.md §Engine, "Asynchronous
        scheduling") registers no key for the blocks the new tokens fill."""
        request_id = request_id_arg(request_id)
        segments, total = checked_segments(segments)
        num_new_tokens = u64_arg("num_new_tokens", num_new_tokens, 1)
        bs = self.block_size
        req = self._requests.get(request_id)
        if req is None:
            hits, last_key = self._hits(segments, total)
            computed = len(hits) * bs
            self._check_room(request_id, computed, num_new_tokens, total)
            num_new_blocks = _cdiv(computed + num_new_tokens, bs) - len(hits)
            num_evictable = sum(1 for b in hits if self.pool.ref_cnt(b) == 0)
            if num_new_blocks + num_evictable > self.pool.num_free_blocks:
                return None
            self.pool._acquire(hits)
            new = self.pool.allocate(num_new_blocks)
            assert new is not None
            req = _Request(hits + new, computed, len(hits), last_key)
            self._requests[request_id] = req
        else:
            computed = req.num_computed_tokens
            self._check_room(request_id, computed, num_new_tokens, total)
            copy = computed % bs != 0 and self.pool.ref_cnt(req.blocks[-1]) > 1
            num_new_blocks = _cdiv(computed + num_new_tokens, bs) - len(req.blocks)
            if num_new_blocks + copy > self.pool.num_free_blocks:
                return None
            new = self.pool.allocate(num_new_blocks + copy)
            assert new is not None
            if copy:
                self.pool._release([req.blocks[-1]])
                req.blocks[-1] = new[0]
                self.num_cow_copies += 1
                req.blocks.extend(new[1:])
            else:
                req.blocks.extend(new)
        req.num_computed_tokens = computed + num_new_tokens
        if keyed:
            self._register_full_blocks(req, segments)
        return new

    def _restore(self, request_id: int, segments: Sequence[Segment], num_tokens: int) -> list[int]:
        """Engine use (swap-in): a request returns into fresh blocks holding `num_tokens` computed tokens,
        full ones registered again; no prefix lookup. The caller has checked that they fit."""
        new = self.pool.allocate(_cdiv(num_tokens, self.block_size))
        assert new is not None, "capacity was checked by the caller"
        req = _Request(list(new), num_tokens)
        self._requests[request_id] = req
        self._register_full_blocks(req, segments)
        return new

    def _admit_load(
        self, request_id: int, hits: list[int], last_key: int | None, num_tokens: int
    ) -> list[int]:
        """Engine use (a load from the CPU tier, DESIGN.md §CPU tier): a request takes its prefix hits and
        fresh blocks up to `num_tokens` (a whole number of blocks) whose content is still on its way: they
        get keys only when the load lands (`_cache_loaded`). The caller has checked that they fit."""
        self.pool._acquire(hits)
        new = self.pool.allocate(num_tokens // self.block_size - len(hits))
        assert new is not None, "capacity was checked by the caller"
        self._requests[request_id] = _Request(hits + new, num_tokens, len(hits), last_key)
        return new

    def _cache_loaded(self, request_id: int, segments: Sequence[Segment], num_computed: int) -> None:
        """Engine use: a load landed; its blocks get their keys, and the request counts `num_computed`
        tokens (one short of the prompt when the load covered all of it: that token is computed again)."""
        req = self._requests[request_id]
        self._register_full_blocks(req, segments)
        req.num_computed_tokens = num_computed

    @staticmethod
    def _check_room(request_id: int, computed: int, num_new_tokens: int, total: int) -> None:
        # Rust: `computed.checked_add(num_new_tokens)` fails past u64, and then so does this (total <= u64).
        if computed + num_new_tokens > total:
            raise InvalidArgumentError(
                f"request {request_id}: num_new_tokens {num_new_tokens} goes beyond the {total} tokens "
                f"its segments describe ({computed} already computed)"
            )

    def _register_full_blocks(self, req: _Request, segments: Sequence[Segment]) -> None:
        if not self.enable_caching:
            return
        num_full = req.num_computed_tokens // self.block_size
        start = req.num_keyed_blocks
        keys = iter_block_keys(segments, self.block_size, start, req.last_key, num_full - start)
        for i, key in enumerate(keys, start):
            self.pool.register(req.blocks[i], key)
            req.last_key = key
        req.num_keyed_blocks = max(start, num_full)

    def free(self, request_id: int) -> None:
        """Releases a request's blocks in reverse table order and forgets it; unknown ids are a no-op."""
        request_id = request_id_arg(request_id)
        req = self._requests.pop(request_id, None)
        if req is not None:
            self.pool._release(reversed(req.blocks))

    def fork(self, parent_id: int, child_id: int) -> None:
        """Makes `child_id` share every block of `parent_id` (ref_cnt + 1 each), as a new sample does."""
        parent = self._get(parent_id)
        child_id = request_id_arg(child_id)
        if child_id in self._requests:
            raise InvalidOperationError(f"cannot fork onto request {child_id}: it already exists")
        self.pool._acquire(parent.blocks)
        self._requests[child_id] = _Request(
            list(parent.blocks), parent.num_computed_tokens, parent.num_keyed_blocks, parent.last_key
        )

    # -- checking -------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raises InternalError if the pool or any block table is inconsistent."""
        self.pool.check_invariants()
        holders = [0] * self.pool.num_blocks
        bs = self.block_size
        for rid, req in self._requests.items():
            if len(req.blocks) != _cdiv(req.num_computed_tokens, bs):
                raise InternalError(
                    f"request {rid} holds {len(req.blocks)} blocks for {req.num_computed_tokens} tokens"
                )
            expected_keyed = req.num_computed_tokens // bs if self.enable_caching else 0
            # A load that covered the whole prompt keys its last block and computes its last token again.
            if not expected_keyed <= req.num_keyed_blocks <= max(expected_keyed, len(req.blocks)):
                raise InternalError(f"request {rid} has {req.num_keyed_blocks} keyed blocks")
            for i, b in enumerate(req.blocks):
                holders[b] += 1
                if i < req.num_keyed_blocks and self.pool.block_hash(b) is None:
                    raise InternalError(f"request {rid}: full block {b} has no key")
            if (
                req.num_keyed_blocks
                and self.pool.block_hash(req.blocks[req.num_keyed_blocks - 1]) != req.last_key
            ):
                raise InternalError(f"request {rid}: chain key differs from its last full block's key")
        for b in range(1, self.pool.num_blocks):
            if holders[b] != self.pool.ref_cnt(b):
                raise InternalError(f"block {b}: {holders[b]} holders but ref_cnt {self.pool.ref_cnt(b)}")
