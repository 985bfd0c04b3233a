"""Reference block pool: reference counts, the free queue (an LRU of evictable blocks) and the prefix map.

The executable spec of `rust/core/src/block_pool.rs`; same API, same answers, written for clarity.
"""

from __future__ import annotations

import os
from collections import Counter, OrderedDict
from collections.abc import Iterable
from typing import Any

from kvsim.arguments import block_id_arg, block_ids_arg, bool_arg, int_arg
from kvsim.errors import InternalError, InvalidArgumentError, InvalidOperationError

FREE_ORDERS = ("classic", "lifo_unhashed")
MAX_KEY = (1 << 128) - 1
# The largest pool: ids leave room for the Rust free queue's two sentinels and its "no block" marker.
MAX_BLOCKS = (1 << 32) - 3
# The most references a block can hold (the Rust pool's u32 count): `touch` past it is refused.
MAX_REF_CNT = (1 << 32) - 1
# The Rust pool's bookkeeping per block at most (`POOL_BYTES_PER_BLOCK` in rust/core/src/block_pool.rs:
# reference count, key, duplicate chain, tag, free-queue links, a prefix-map entry); both
# backends refuse a pool whose `num_blocks` times this exceeds `memory_limit()`, with the same message
# (the reference's Python objects take more per block: it is the spec, not the tool for huge pools).
POOL_BYTES_PER_BLOCK = 66
MEMORY_LIMIT_ENV = "KVSIM_MEMORY_LIMIT"


def memory_limit() -> int:
    """`KVSIM_MEMORY_LIMIT` (bytes) if set, else the machine's physical memory, else no limit (2**64-1)."""
    v = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if v.isdigit() and int(v) <= (1 << 64) - 1:
        return int(v)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return (1 << 64) - 1


def check_pool_memory(num_blocks: int) -> None:
    needed = num_blocks * POOL_BYTES_PER_BLOCK
    limit = memory_limit()
    if needed > limit:
        raise InvalidArgumentError(
            f"num_blocks {num_blocks} needs {needed} bytes ({needed >> 20} MiB) of block bookkeeping "
            f"({POOL_BYTES_PER_BLOCK} bytes per block), more than the memory limit of {limit} bytes "
            f"({limit >> 20} MiB: this machine's physical memory, or {MEMORY_LIMIT_ENV} if set)"
        )


def check_free_order(free_order: Any) -> None:
    if not isinstance(free_order, str) or free_order not in FREE_ORDERS:
        raise InvalidArgumentError(
            f"free_order {free_order!r} is not one of {', '.join(repr(o) for o in FREE_ORDERS)}"
        )


def check_num_blocks(num_blocks: Any) -> int:
    n = int_arg("num_blocks", num_blocks)
    if not 2 <= n <= MAX_BLOCKS:
        raise InvalidArgumentError(
            f"num_blocks {n} must be between 2 and {MAX_BLOCKS} (block 0 is the null block)"
        )
    return n


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
        num_blocks = check_num_blocks(num_blocks)
        bool_arg("enable_caching", enable_caching)
        check_free_order(free_order)
        check_pool_memory(num_blocks)
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

    def _check_block(self, block_id: Any) -> int:
        return block_id_arg(block_id, self.num_blocks)

    @staticmethod
    def _check_not_null(block_id: int) -> None:
        if block_id == 0:
            raise InvalidOperationError("block 0 is the null block and is never allocated or freed")

    def ref_cnt(self, block_id: int) -> int:
        return self._ref_cnt[self._check_block(block_id)]

    def block_hash(self, block_id: int) -> int | None:
        return self._key[self._check_block(block_id)]

    def free_block_ids(self) -> list[int]:
        return list(self._free)

    def cached_block_ids(self) -> list[int]:
        return [b for b in range(self.num_blocks) if self._key[b] is not None]

    def lookup(self, key: int) -> int | None:
        """The first block registered under `key` that still carries it, or None (also for any integer no
        block can carry); InvalidArgumentError when `key` is not an integer."""
        key = int_arg("key", key)
        holders = self._cached.get(key)
        return next(iter(holders)) if holders else None

    def holds_key(self, key: int) -> bool:
        """Whether some block (in use, or free but cached) carries `key`; no argument checks (engine use)."""
        return key in self._cached

    def key_set(self) -> set[int]:
        """Every key some block carries (a router's snapshot of the prefix map)."""
        return set(self._cached)

    # -- mutations ------------------------------------------------------------------------------------
    def allocate(self, num: int) -> list[int] | None:
        """Pops `num` blocks from the head of the free queue, or returns None and changes nothing."""
        num = int_arg("num", num)
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

        `block_ids` is a list or tuple; every id is checked (type, range) before anything else.

        Raises:
            InvalidArgumentError: not a list or tuple of ints, or an id out of range (nothing changes).
            InvalidOperationError: the null block, or a block would be freed more often than it is held
                (nothing changes).
        """
        order = block_ids_arg(block_ids, self.num_blocks)
        seen: Counter[int] = Counter()
        for block_id in order:
            self._check_not_null(block_id)
            seen[block_id] += 1
            if seen[block_id] > self._ref_cnt[block_id]:
                raise InvalidOperationError(
                    f"block {block_id} freed {seen[block_id]} times but has ref_cnt {self._ref_cnt[block_id]}"
                )
        self._release(order)

    def _release(self, order: Iterable[int]) -> None:
        """`free` for callers that hold the references by construction (the manager)."""
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
        """Takes one more reference on each block, removing free ones from the queue (a cache hit).

        Raises as `free` does for bad ids and the null block; nothing changes then.
        """
        order = block_ids_arg(block_ids, self.num_blocks)
        for block_id in order:
            self._check_not_null(block_id)
        if order and max(self._ref_cnt[b] for b in set(order)) + len(order) > MAX_REF_CNT:
            # (near the count's range: each block's references in the call, as the Rust pool's u32 count)
            times = Counter(order)
            for block_id, n in times.items():
                held = self._ref_cnt[block_id]
                if held + n > MAX_REF_CNT:
                    raise InvalidOperationError(
                        f"block {block_id}: {n} more references would pass the {MAX_REF_CNT} a block can hold "
                        f"(it has {held})"
                    )
        self._acquire(order)

    def _acquire(self, order: Iterable[int]) -> None:
        """`touch` for callers that pass valid ids by construction (the manager)."""
        for block_id in order:
            if self._ref_cnt[block_id] == 0:
                del self._free[block_id]
            self._ref_cnt[block_id] += 1

    def register(self, block_id: int, key: int) -> None:
        """Gives an in-use block its content key, making it findable by `lookup`."""
        key = int_arg("key", key)
        if not 0 <= key <= MAX_KEY:
            raise InvalidArgumentError(f"key {key} is not a u128")
        block_id = self._check_block(block_id)
        self._check_not_null(block_id)
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
