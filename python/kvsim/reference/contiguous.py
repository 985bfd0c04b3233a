"""Reference contiguous address space with first-fit placement (the paper's baselines, SPEC §2).

Regions are token ranges of one linear space `[0, capacity)`; holes are kept sorted by start so that
first-fit takes the lowest-addressed hole that is large enough, and freeing merges neighbours.
"""

from __future__ import annotations

import bisect


class FirstFit:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.holes: list[tuple[int, int]] = [(0, capacity)] if capacity > 0 else []
        self.num_free = capacity

    def allocate(self, size: int) -> int | None:
        """Start of a new region of `size` tokens in the first hole that fits, or None."""
        for i, (start, length) in enumerate(self.holes):
            if length >= size:
                if length == size:
                    del self.holes[i]
                else:
                    self.holes[i] = (start + size, length - size)
                self.num_free -= size
                return start
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
