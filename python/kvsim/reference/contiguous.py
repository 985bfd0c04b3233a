"""Reference contiguous address spaces for the paper's baselines (SPEC §2): first-fit and buddy placement.

Regions are token ranges of one linear space `[0, capacity)`. Both classes answer `allocate(size)` with
`(start, reserved)` (buddy rounds up to a power of two) or None, and `free(start, reserved)`.
"""

from __future__ import annotations

import bisect


class FirstFit:
    """Holes sorted by start: first-fit takes the lowest-addressed hole that is large enough; freeing
    merges neighbours."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.holes: list[tuple[int, int]] = [(0, capacity)] if capacity > 0 else []
        self.num_free = capacity

    def max_region(self) -> int:
        return self.capacity

    def allocate(self, size: int) -> tuple[int, int] | None:
        """`(start, size)` of a new region in the first hole that fits, or None."""
        for i, (start, length) in enumerate(self.holes):
            if length >= size:
                if length == size:
                    del self.holes[i]
                else:
                    self.holes[i] = (start + size, length - size)
                self.num_free -= size
                return start, size
        return None

    def free(self, start: int, size: int) -> None:
        i = bisect.bisect_left(self.holes, (start, 0))
        lo, hi = start, start + size
        if i > 0 and self.holes[i - 1][0] + self.holes[i - 1][1] == lo:
            i -= 1
            lo = self.holes[i][0]
            del self.holes[i]
        if i < len(self.holes) and self.holes[i][0] == hi:
            hi += self.holes[i][1]
            del self.holes[i]
        self.holes.insert(i, (lo, hi - lo))
        self.num_free += size

    def largest_hole(self) -> int:
        return max((length for _, length in self.holes), default=0)

    def external_fragmentation(self) -> int:
        """Free tokens outside the largest hole: free in total, but in holes too small to be used whole."""
        return self.num_free - self.largest_hole()


class Buddy:
    """Binary buddy placement: a region of `size` tokens takes a block of the next power of two.

    The space `[0, capacity)` is cut into power-of-two chunks, largest first (capacity's binary digits),
    each the root of a buddy tree. Allocation takes, among free blocks of the smallest order that fits,
    the lowest-addressed one and splits it down (the upper halves become free); freeing merges a block
    with its buddy while both are free, up to its chunk's order.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.chunks: list[tuple[int, int]] = []  # (base, order), ascending base
        base = 0
        for order in range(capacity.bit_length() - 1, -1, -1):
            if capacity >> order & 1:
                self.chunks.append((base, order))
                base += 1 << order
        self.free_at: dict[int, set[int]] = {}  # order -> starts of free blocks
        for base, order in self.chunks:
            self.free_at.setdefault(order, set()).add(base)
        self.num_free = capacity

    @staticmethod
    def order_of(size: int) -> int:
        return max(size - 1, 0).bit_length()

    def max_region(self) -> int:
        return 1 << self.chunks[0][1] if self.chunks else 0

    def allocate(self, size: int) -> tuple[int, int] | None:
        """`(start, reserved)` of a new block of `2**ceil(log2(size))` tokens, or None."""
        want = self.order_of(size)
        orders = sorted(o for o, starts in self.free_at.items() if starts and o >= want)
        if not orders:
            return None
        order = orders[0]
        start = min(self.free_at[order])
        self.free_at[order].remove(start)
        while order > want:
            order -= 1
            self.free_at.setdefault(order, set()).add(start + (1 << order))
        self.num_free -= 1 << want
        return start, 1 << want

    def free(self, start: int, reserved: int) -> None:
        order = self.order_of(reserved)
        self.num_free += reserved
        base, top = max(c for c in self.chunks if c[0] <= start)
        while order < top:
            buddy = base + ((start - base) ^ (1 << order))
            if buddy not in self.free_at.get(order, ()):
                break
            self.free_at[order].remove(buddy)
            start = min(start, buddy)
            order += 1
        self.free_at.setdefault(order, set()).add(start)

    def largest_hole(self) -> int:
        return max((1 << o for o, starts in self.free_at.items() if starts), default=0)

    def external_fragmentation(self) -> int:
        return self.num_free - self.largest_hole()
