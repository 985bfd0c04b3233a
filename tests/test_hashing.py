"""The block-key hash is one documented function: Rust and Python compute identical keys."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

import kvsim
from kvsim.reference import hashing

segments = st.lists(st.tuples(st.integers(0, (1 << 64) - 1), st.integers(1, 70)), min_size=1, max_size=6)


@given(segments, st.integers(1, 33))
def test_rust_and_python_keys_agree(segs, block_size):
    assert kvsim.block_keys(segs, block_size) == hashing.block_keys(segs, block_size)


def test_splitmix64_reference_outputs():
    # The first outputs of splitmix64 seeded with 0: mix64(k * golden ratio).
    assert hashing.mix64(hashing.GOLDEN) == 0xE220A8397B1DCDAF
    assert hashing.mix64((2 * hashing.GOLDEN) & hashing.MASK64) == 0x6E789E6AA1B965F4


def test_keys_depend_on_content_and_position_not_on_how_it_is_split():
    a = hashing.block_keys([(7, 32)], 16)
    # The same 32 tokens named as a prefix of a longer content give the same keys...
    assert hashing.block_keys([(7, 32), (8, 3)], 16) == a
    # ...but the same tokens at another offset (a different content) do not.
    assert hashing.block_keys([(9, 16), (7, 16)], 16)[1] != a[1]
    # Keys are 128-bit and the chain makes block 1's key depend on block 0.
    assert all(0 <= k < 1 << 128 for k in a)
    assert hashing.block_keys([(6, 16), (7, 32)], 16)[1] != a[1]


def test_block_size_changes_the_keys():
    assert hashing.block_keys([(1, 64)], 16)[0] != hashing.block_keys([(1, 64)], 32)[0]
