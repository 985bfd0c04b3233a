"""Reference block pool: reference counts, the free queue (an LRU of evictable blocks) and the prefix map.

The executable spec of `rust/core/src/block_pool.rs`; same API, same answers, written for clarity.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable

from kvsim.errors import InternalError, InvalidArgumentError, InvalidOperationError

FREE_ORDERS = ("classic", "lifo_unhashed")
MAX_KEY = (1 << 128) - 1
MAX_BLOCKS = (1 << 32) - 2


def check_free_order(free_order: str) -> None:
    if free_order not in FREE_ORDERS:
        raise InvalidArgumentError(
            f"free_order {free_order!r} is not one of {', '.join(repr(o) for o in FREE_ORDERS)}"
        )


class BlockPool:
    """Blocks `0..num_blocks`, of which block 0 is the null block and is never handed out.

    Each block is in exactly one state: *null*; *in use* (`ref_cnt > 0`, not in the free queue); or
    *free* (`ref_cnt == 0`, in the free queue), where a free block may still carry a content key and so be
    found by `lookup` (it is then *evictable*). The free queue starts in ascending id order; `allocate`
    pops from its head and evicts the key of each popped block (lazy eviction); `free` puts blocks whose
    count drops to zero at the tail (rule `classic`), or, with rule `lifo_unhashed`, puts the ones without
    a key at the head instead, keeping their relative order. The map `key -> blocks` keeps insertion order
    and does not de-duplicate: `lookup` returns the first block inserted under a key that still holds it.
    """

    def __init__(self, num_blocks: int, enable_caching: bool = True, free_order: str = "classic") -> None:
        if not 2 <= num_blocks <= MAX_BLOCKS:
            raise InvalidArgumentError(
                f"num_blocks {num_blocks} must be between 2 and {MAX_BLOCKS} (block 0 is the null block)"
            )
        check_free_order(free_order)
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.free_order = free_order
        self._ref_cnt = [0] * num_blocks
        self._key: list[int | None] = [None] * num_blocks
        # OrderedDict gives the O(1) remove-from-the-middle of vLLM's intrusive list.
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self._cached: dict[int, dict[int, None]] = {}
        self.num_evictions = 0
        self.num_allocated = 0
        # When a list, every evicted block id is appended to it (the engine's event log reads it).
        self.evicted: list[int] | None = None

    # -- queries --------------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def capacity(self) -> int:
        return self.num_blocks - 1

    def _check_block(self, block_id: int) -> None:
        if not 0 <= block_id < self.num_blocks:
            raise InvalidArgumentError(f"block id {block_id} is out of range 0..{self.num_blocks - 1}")

    def _check_usable(self, block_id: int) -> None:
        self._check_block(block_id)
        if block_id == 0:
            raise InvalidOperationError("block 0 is the null block and is never allocated or freed")

    def ref_cnt(self, block_id: int) -> int:
        self._check_block(block_id)
        return self._ref_cnt[block_id]

    def block_hash(self, block_id: int) -> int | None:
        self._check_block(block_id)
        return self._key[block_id]

    def free_block_ids(self) -> list[int]:
        return list(self._free)

    def cached_block_ids(self) -> list[int]:
        return [b for b in range(self.num_blocks) if self._key[b] is not None]

    def lookup(self, key: int) -> int | None:
        holders = self._cached.get(key)
        return next(iter(holders)) if holders else None

    # -- mutations ------------------------------------------------------------------------------------
    def allocate(self, num: int) -> list[int] | None:
        """Pops `num` blocks from the head of the free queue, or returns None and changes nothing."""
        if num < 0:
            raise InvalidArgumentError(f"cannot allocate {num} blocks: the count must not be negative")
        if num > len(self._free):
            return None
        self.num_allocated += num
        out = []
        for _ in range(num):
            block_id, _ = self._free.popitem(last=False)
            self._evict(block_id)
            self._ref_cnt[block_id] = 1
            out.append(block_id)
        return out

    def _evict(self, block_id: int) -> None:
        key = self._key[block_id]
        if key is None:
            return
        holders = self._cached[key]
        del holders[block_id]
        if not holders:
            del self._cached[key]
        self._key[block_id] = None
        self.num_evictions += 1
        if self.evicted is not None:
            self.evicted.append(block_id)

    def free(self, block_ids: Iterable[int]) -> None:
        """Drops one reference per listed block, in the given order; blocks reaching zero join the queue.

        Raises:
            InvalidOperationError: a block would be freed more often than it is held (nothing changes).
        """
        order = list(block_ids)
        seen: Counter[int] = Counter()
        for block_id in order:
            self._check_usable(block_id)
            seen[block_id] += 1
            if seen[block_id] > self._ref_cnt[block_id]:
                raise InvalidOperationError(
                    f"block {block_id} freed {seen[block_id]} times but has ref_cnt {self._ref_cnt[block_id]}"
                )
        unhashed_to_head: list[int] = []
        for block_id in order:
            self._ref_cnt[block_id] -= 1
            if self._ref_cnt[block_id] == 0:
                if self.free_order == "lifo_unhashed" and self._key[block_id] is None:
                    unhashed_to_head.append(block_id)
                else:
                    self._free[block_id] = None
        for block_id in reversed(unhashed_to_head):
            self._free[block_id] = None
            self._free.move_to_end(block_id, last=False)

    def touch(self, block_ids: Iterable[int]) -> None:
        """Takes one more reference on each block, removing free ones from the queue (a cache hit)."""
        order = list(block_ids)
        for block_id in order:
            self._check_usable(block_id)
        for block_id in order:
            if self._ref_cnt[block_id] == 0:
                del self._free[block_id]
            self._ref_cnt[block_id] += 1

    def register(self, block_id: int, key: int) -> None:
        """Gives an in-use block its content key, making it findable by `lookup`."""
        if not 0 <= key <= MAX_KEY:
            raise InvalidArgumentError(f"key {key} is not a u128")
        self._check_usable(block_id)
        if not self.enable_caching:
            raise InvalidOperationError("cannot register a key: prefix caching is disabled")
        if self._ref_cnt[block_id] == 0:
            raise InvalidOperationError(f"block {block_id} is free and cannot be registered")
        if self._key[block_id] is not None:
            raise InvalidOperationError(f"block {block_id} already has a key")
        self._key[block_id] = key
        self._cached.setdefault(key, {})[block_id] = None

    # -- checking -------------------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raises InternalError if any structural invariant is broken."""

        def fail(msg: str) -> None:
            raise InternalError(f"block pool invariant broken: {msg}")

        if self._ref_cnt[0] != 0 or 0 in self._free or self._key[0] is not None:
            fail("the null block is in use, free or keyed")
        for b in range(1, self.num_blocks):
            if (self._ref_cnt[b] == 0) != (b in self._free):
                fail(f"block {b} has ref_cnt {self._ref_cnt[b]} but in-queue is {b in self._free}")
            key = self._key[b]
            if key is not None and b not in self._cached.get(key, {}):
                fail(f"block {b} carries a key the map does not list it under")
        for key, holders in self._cached.items():
            if not holders:
                fail("empty map entry")
            for b in holders:
                if self._key[b] != key:
                    fail(f"map lists block {b} under a key it does not carry")
        if not self.enable_caching and self._cached:
            fail("keys exist with caching disabled")
