"""Content identity: segments -> per-block pieces -> chained 128-bit block keys (SPEC §3, DESIGN.md §Keys).

This is the reference definition of the hash; `rust/core/src/hash.rs` computes the same function and the
test-suite checks the two agree on random inputs. Never Python's `hash()`: it is randomised per process.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kvsim.arguments import segments_arg, u64_arg
from kvsim.errors import InvalidArgumentError

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
# The "parent" of a request's first block: the hexadecimal digits of pi, so the root is not zero.
ROOT_LO = 0x243F6A8885A308D3
ROOT_HI = 0x13198A2E03707344

Segment = tuple[int, int]
Piece = tuple[int, int, int]


def mix64(z: int) -> int:
    """splitmix64's finaliser: a bijection on 64-bit words with full avalanche."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def block_key(parent: int | None, pieces: Sequence[Piece]) -> int:
    """Key of one full block: chains the parent key with the block's `(segment_id, offset, end)` pieces.

    Two lanes of 64 bits: `lo` absorbs each word with xor then mix, `hi` with an add of the golden ratio
    then mix. The piece count is folded in last so that piece lists of different lengths cannot collide
    by construction.
    """
    if parent is None:
        lo, hi = ROOT_LO, ROOT_HI
    else:
        lo, hi = parent & MASK64, parent >> 64
    for piece in pieces:
        for w in piece:
            lo = mix64(lo ^ w)
            hi = mix64((hi + w + GOLDEN) & MASK64)
    lo = mix64(lo ^ len(pieces))
    hi = mix64(hi ^ lo)
    return (hi << 64) | lo


def checked_segments(segments: object) -> tuple[list[Segment], int]:
    """A request's segment list as int pairs, and its total token count (the rules of `kvsim.arguments`).

    Raises:
        InvalidArgumentError: not a list or tuple of pairs of integers, an id outside u64, a length
            outside `[1, 2**64)`, an empty list, or more tokens in all than a u64 holds.
    """
    segs = segments_arg(segments)
    if not segs:
        raise InvalidArgumentError("segments must not be empty")
    total = sum(length for _, length in segs)
    if total > MASK64:
        raise InvalidArgumentError(f"segments describe {total} tokens, more than a u64 holds")
    return segs, total


def validate_segments(segments: Sequence[Segment]) -> int:
    """Checks a request's segment list (see `checked_segments`) and returns its total token count."""
    return checked_segments(segments)[1]


def block_pieces(segments: Sequence[Segment], block_size: int, block_index: int) -> list[Piece]:
    """The canonical pieces covering tokens `[i·B, (i+1)·B)` (or fewer, for the last partial block).

    A segment `(id, n)` names the first `n` tokens of content `id`, so its overlap with a block is one
    piece `(id, offset, end)` with offsets inside that content; a segment always starts at offset 0, so
    two adjacent pieces of one id can never be contiguous and the list is canonical as built.
    """
    lo, hi = block_index * block_size, (block_index + 1) * block_size
    pieces: list[Piece] = []
    start = 0
    for seg_id, length in segments:
        end = start + length
        if end > lo and start < hi:
            pieces.append((seg_id, max(lo, start) - start, min(hi, end) - start))
        if end >= hi:
            break
        start = end
    return pieces


def iter_block_keys(
    segments: Sequence[Segment], block_size: int, start: int, parent: int | None, count: int
) -> Iterator[int]:
    """Keys of full blocks `start .. start+count`, chained from `parent` (the key of block `start-1`)."""
    key = parent
    for i in range(start, start + count):
        key = block_key(key, block_pieces(segments, block_size, i))
        yield key


def block_keys(segments: Sequence[Segment], block_size: int) -> list[int]:
    """Keys of every full block the segments describe (a trailing partial block gets none)."""
    segs, total = checked_segments(segments)
    block_size = u64_arg("block_size", block_size, 1)
    n = total // block_size
    from kvsim.reference.block_pool import memory_limit

    limit = memory_limit()
    if n * BYTES_PER_KEY > limit:
        raise InvalidArgumentError(
            f"segments describe {n} full blocks of {block_size} tokens: their keys need {n * BYTES_PER_KEY} "
            f"bytes ({BYTES_PER_KEY} bytes per key), more than the memory limit of {limit} bytes"
        )
    return list(iter_block_keys(segs, block_size, 0, None, n))


# What one key of `block_keys`' result may take, as a Python int in a list (the Rust core's BYTES_PER_KEY).
BYTES_PER_KEY = 64
