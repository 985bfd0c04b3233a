"""Prompt content ids: a seeded bijection onto [0, 2**63), so generated ids never collide (SPEC §3).

Workloads name the content of a prompt with segment ids below `kvsim.model.segments.OUTPUT_BIT`; ids at or
above it are the engine's output ids. Ids drawn at random could collide (a birthday bound of about
n²/2**64 for n ids); instead every workload numbers its contents 0, 1, 2, ... and maps the number through
`mix63`, a splitmix64-style finaliser that is a bijection on 63-bit words, offset by a seeded key.
Distinct numbers under one key therefore give distinct ids by construction, and the ids look random
enough that two workloads built with different keys almost never share one by accident.
"""

from __future__ import annotations

import numpy as np

from kvsim.errors import InvalidArgumentError

MASK63 = (1 << 63) - 1
_M63 = np.uint64(MASK63)
# splitmix64's multipliers; both odd, so multiplication modulo 2**63 is invertible.
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)
# Key of the ids a `Workload` gives requests built without segments (and the Azure loader uses):
# the content of request r is then `content_ids(DEFAULT_KEY, r, 1)`, unique because request ids are.
DEFAULT_KEY = 0x5851F42D4C957F2D


def mix63(x: np.ndarray) -> np.ndarray:
    """A bijection on `[0, 2**63)`: splitmix64's xorshift-multiply rounds, computed modulo 2**63.

    Each round is invertible on 63-bit words (a right xorshift never sets bit 63, an odd multiplier
    is a unit modulo 2**63), so the composition is too.

    Args:
        x: uint64 array whose values are below 2**63 (higher bits are masked off).

    Returns:
        A new uint64 array of the same shape, every value below 2**63.
    """
    z = np.asarray(x, dtype=np.uint64) & _M63
    z = z ^ (z >> np.uint64(31))
    z = (z * _C1) & _M63
    z = z ^ (z >> np.uint64(29))
    z = (z * _C2) & _M63
    return z ^ (z >> np.uint64(32))


def content_ids(key: int, start: int | np.ndarray, count: int | None = None) -> np.ndarray:
    """Ids of contents numbered `start, start+1, ..., start+count-1` (or of the numbers in `start`).

    Args:
        key: the workload's seeded key, any integer in [0, 2**64).
        start: first content number, or a uint64/int64 array of content numbers (then `count` is None).
        count: how many consecutive numbers, when `start` is an int.

    Returns:
        uint64 array of ids below 2**63, pairwise distinct for distinct numbers below 2**63.

    Raises:
        InvalidArgumentError: `key` outside u64 or a negative count.
    """
    if not 0 <= key < 1 << 64:
        raise InvalidArgumentError(f"key {key} is not a u64")
    if count is None:
        numbers = np.asarray(start, dtype=np.uint64)
    else:
        if count < 0:
            raise InvalidArgumentError(f"count {count} must not be negative")
        numbers = np.arange(count, dtype=np.uint64) + np.uint64(int(start) & MASK63)
    return mix63(numbers + np.uint64(key & MASK63))
