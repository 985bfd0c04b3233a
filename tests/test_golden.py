"""SPEC §9's golden traces: the block ids vLLM itself produces, on both backends."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

SHARED = 1  # segment id of the 48 common tokens


def manager(backend: SimpleNamespace, free_order: str = "classic", num_blocks: int = 11):
    return backend.KVCacheManager(num_blocks, 16, enable_caching=True, free_order=free_order)


def admit(m, rid: int, segments: list[tuple[int, int]]) -> list[int]:
    """A new request's first allocation: cached prefix, then every remaining token."""
    total = sum(n for _, n in segments)
    new = m.allocate(rid, segments, total - m.lookup(segments))
    assert new is not None
    m.check_invariants()
    return new


def test_sharing_and_free_queue_order_classic(backend):
    m = manager(backend)
    assert admit(m, 0, [(SHARED, 48), (100, 7)]) == [1, 2, 3, 4]
    assert m.block_table(0) == [1, 2, 3, 4]
    assert m.cached_block_ids() == [1, 2, 3]
    assert m.lookup([(SHARED, 48), (101, 5)]) == 48
    assert admit(m, 1, [(SHARED, 48), (101, 5)]) == [5]
    assert m.block_table(1) == [1, 2, 3, 5]
    assert [m.ref_cnt(b) for b in (1, 2, 3)] == [2, 2, 2]
    assert m.num_free_blocks == 5
    m.free(0)
    m.free(1)
    assert m.free_block_ids() == [6, 7, 8, 9, 10, 4, 5, 3, 2, 1]
    assert admit(m, 2, [(SHARED, 48), (102, 6)]) == [6]
    assert m.block_table(2) == [1, 2, 3, 6]
    assert m.free_block_ids() == [7, 8, 9, 10, 4, 5]
    m.free(2)
    assert admit(m, 3, [(103, 160)]) == [7, 8, 9, 10, 4, 5, 6, 3, 2, 1]
    assert m.num_evictions == 3
    assert m.lookup([(SHARED, 48), (104, 1)]) == 0


def test_sharing_and_free_queue_order_lifo_unhashed(backend):
    m = manager(backend, "lifo_unhashed")
    admit(m, 0, [(SHARED, 48), (100, 7)])
    admit(m, 1, [(SHARED, 48), (101, 5)])
    m.free(0)
    m.free(1)
    assert m.free_block_ids() == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert admit(m, 2, [(SHARED, 48), (102, 6)]) == [5]
    m.free(2)
    assert admit(m, 3, [(103, 160)]) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]


def test_eviction_order(backend):
    m = manager(backend)
    assert admit(m, 0, [(7, 87)]) == [1, 2, 3, 4, 5, 6]
    assert admit(m, 1, [(8, 48)]) == [7, 8, 9]
    m.free(0)
    m.free(1)
    assert m.free_block_ids() == [10, 6, 5, 4, 3, 2, 1, 9, 8, 7]
    assert admit(m, 2, [(7, 35), (9, 5)]) == [10]
    assert m.block_table(2) == [1, 2, 10]
    assert m.num_free_blocks == 7


def test_capacity_check_counts_evictable_hits(backend):
    # 6 cached blocks: 3 held by a live request, 3 evictable; 5 free blocks in all.
    m = manager(backend, num_blocks=14)
    admit(m, 0, [(1, 96)])  # blocks 1..6, keyed
    admit(m, 1, [(1, 48), (2, 1)])  # hits 1..3 (ref 2), gets 7
    m.free(0)  # 4..6 evictable (ref 0), 1..3 still held by request 1
    admit(m, 2, [(3, 32)])  # takes 8, 9: leaves 5 free (10..13, then 6,5,4)
    assert m.num_free_blocks == 7
    admit(m, 3, [(4, 32)])
    assert m.num_free_blocks == 5
    before = [m.ref_cnt(b) for b in range(14)]
    segments = [(1, 96), (5, 48)]  # hits the 6 cached blocks and needs 3 new: 3 + 3 = 6 > 5
    assert m.lookup(segments) == 96
    assert m.allocate(9, segments, 48) is None
    assert [m.ref_cnt(b) for b in range(14)] == before
    assert 9 not in m
    m.check_invariants()


def test_copy_on_write_first_writer_copies_last_writes_in_place(backend):
    m = manager(backend)
    prompt = [(1, 40)]  # 2 full blocks + a partial third
    assert admit(m, 0, prompt) == [1, 2, 3]
    m.fork(0, 1)
    assert [m.ref_cnt(b) for b in (1, 2, 3)] == [2, 2, 2]
    # Sample 1 writes its first generated token: the shared partial block 3 is copied.
    assert m.allocate(1, [*prompt, (1001, 1)], 1) == [4]
    assert m.block_table(1) == [1, 2, 4]
    assert m.ref_cnt(3) == 1
    assert m.num_cow_copies == 1
    # Sample 0 is now the only holder of block 3 and writes in place.
    assert m.allocate(0, [*prompt, (1000, 1)], 1) == []
    assert m.block_table(0) == [1, 2, 3]
    assert m.num_cow_copies == 1
    m.check_invariants()


@pytest.mark.parametrize("rule", ["classic", "lifo_unhashed"])
def test_free_of_unknown_request_is_a_noop(backend, rule):
    m = manager(backend, rule)
    m.free(42)
    assert m.num_free_blocks == 10
