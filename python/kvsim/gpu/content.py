"""What a token's K and V hold: a pure function of the token and everything before it (no torch).

A real model's K/V for position `p` depends on tokens `0..p`, which is why kvsim's prefix cache keys a block
by its whole chain (DESIGN.md §Keys). So a token's *tag* chains its content identity (segment id, offset
inside that content) onto the previous token's tag, and its K/V vectors are a deterministic hash of the tag,
the layer and K-or-V. Two blocks the simulator shares (a prefix hit, a forked sample's prompt) must then
hold bitwise equal values, and any block written for the wrong position or the wrong sequence differs.
"""

from __future__ import annotations

import numpy as np

from kvsim.engine.engine_input import EngineInput
from kvsim.reference.hashing import GOLDEN, MASK64, mix64

_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)


def _mix64_np(z: np.ndarray) -> np.ndarray:
    """`kvsim.reference.hashing.mix64` on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _C1
    z = (z ^ (z >> np.uint64(27))) * _C2
    return z ^ (z >> np.uint64(31))


def sequence_tokens(inp: EngineInput, seq: int) -> list[tuple[int, int]]:
    """Every token sequence `seq` ever holds, as (content id, offset): its prompt, then its output."""
    out: list[tuple[int, int]] = []
    for seg_id, length in inp.segments(seq):
        out.extend((seg_id, k) for k in range(length))
    out.extend((int(inp.output_seg[seq]), k) for k in range(int(inp.target[seq])))
    return out


def token_tags(tokens: list[tuple[int, int]]) -> np.ndarray:
    """The chained tag of each token (uint64): equal tags iff equal prefixes (up to 64-bit collisions)."""
    tags = np.empty(len(tokens), dtype=np.uint64)
    tag = 0x243F6A8885A308D3
    for i, (seg_id, offset) in enumerate(tokens):
        tag = mix64(tag ^ mix64((seg_id ^ (offset * GOLDEN)) & MASK64))
        tags[i] = tag
    return tags


def kv_values(tags: np.ndarray, layer: int, which: int, width: int) -> np.ndarray:
    """float32 [len(tags), width] in [-1, 1): K (`which=0`) or V (`which=1`) of layer `layer`."""
    salt = np.uint64(mix64(2 * layer + which + 1))
    cols = (np.arange(1, width + 1, dtype=np.uint64) * np.uint64(GOLDEN)) ^ salt
    z = _mix64_np(tags.astype(np.uint64)[:, None] ^ cols[None, :])
    return (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-23) - np.float32(1.0)


__all__ = ["kv_values", "sequence_tokens", "token_tags"]
