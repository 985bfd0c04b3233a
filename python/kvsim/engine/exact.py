"""Summary statistics that do not depend on how the values were split: the same numbers from one array
or from any sequence of chunks of it (DESIGN.md §Streaming).

- `Mean`: the values are summed in fixed blocks of `BLOCK` consecutive values (numpy's pairwise sum
  inside a block), and the block sums one after the other, so the float result depends only on the values
  and their order, not on where chunks were cut.
- `Quantiles`: exact order statistics. Values are kept in memory up to `memory_limit`, then spilled to a
  temporary file; the order statistics come from `np.partition` in memory, or from a radix selection over
  the file (a histogram of the top 16 bits of each value's order-preserving integer key, then of the
  next 16 bits within the bucket holding the rank, until the bucket fits in memory and is sorted), which
  reads the file in blocks. Both give the same values; the linear interpolation between the two order
  statistics around `(n - 1) q` is computed here, in one formula for both.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Any

import numpy as np

BLOCK = 1 << 16
_READ = 1 << 22  # values per block read back from a spill file
_SIGN = np.uint64(1 << 63)


class Mean:
    """The mean of a stream of float64 values, the same however the stream is chunked."""

    def __init__(self) -> None:
        self.count = 0
        self._total = 0.0
        self._carry = np.zeros(0, dtype=np.float64)

    def add(self, values: np.ndarray) -> None:
        v = np.asarray(values, dtype=np.float64)
        self.count += len(v)
        if len(self._carry):
            v = np.concatenate([self._carry, v])
        full = len(v) - len(v) % BLOCK
        for lo in range(0, full, BLOCK):
            self._total += float(np.sum(v[lo : lo + BLOCK]))
        self._carry = v[full:].copy()

    def result(self) -> float | None:
        if not self.count:
            return None
        return (self._total + float(np.sum(self._carry))) / self.count


def _keys(v: np.ndarray) -> np.ndarray:
    """Order-preserving uint64 keys of float64 values (no NaNs): flip the sign bit of non-negative
    values, every bit of negative ones."""
    u = v.view(np.uint64)
    return np.where(u & _SIGN, ~u, u | _SIGN)


def _from_keys(k: np.ndarray) -> np.ndarray:
    u = np.where(k & _SIGN, k & ~_SIGN, ~k)
    return u.view(np.float64)


def interpolate(lo: float, hi: float, h: float) -> float:
    """The linear quantile between order statistics `lo` = v[floor(h)] and `hi` = v[floor(h) + 1]."""
    frac = h - math.floor(h)
    return lo if frac == 0 else lo + frac * (hi - lo)


class Quantiles:
    """Exact quantiles (linear interpolation) of a stream of float64 values; NaNs must be dropped first.

    Args:
        memory_limit: values kept in memory before they are spilled to a temporary file.
        spill_dir: where the temporary file goes (default: the system's temporary directory).
    """

    def __init__(self, memory_limit: int = 1 << 24, spill_dir: str | os.PathLike[str] | None = None) -> None:
        self.count = 0
        self.memory_limit = memory_limit
        self._parts: list[np.ndarray] = []
        self._held = 0
        self._spill_dir = spill_dir
        self._file: Any = None

    def add(self, values: np.ndarray) -> None:
        v = np.ascontiguousarray(values, dtype=np.float64)
        if not len(v):
            return
        self.count += len(v)
        if self._file is None and self._held + len(v) <= self.memory_limit:
            self._parts.append(v)  # kept as given: callers pass arrays they no longer change
            self._held += len(v)
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(dir=self._spill_dir)  # noqa: SIM115 (closed by close())
            for p in self._parts:
                p.tofile(self._file)
            self._parts, self._held = [], 0
        v.tofile(self._file)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._parts = []

    def _blocks(self) -> Any:
        f = self._file
        f.flush()
        f.seek(0)
        while True:
            block = np.fromfile(f, dtype=np.float64, count=_READ)
            if not len(block):
                return
            yield block

    def order_statistics(self, ranks: list[int]) -> dict[int, float]:
        """The values of the given 0-based ranks in sorted order."""
        if self._file is None:
            v = np.concatenate(self._parts) if len(self._parts) != 1 else self._parts[0]
            part = np.partition(v, sorted(set(ranks)))  # a copy: the parts stay as they were
            return {r: float(part[r]) for r in ranks}
        return self._select_many(sorted(set(ranks)))

    def _select_many(self, ranks: list[int]) -> dict[int, float]:
        """Radix selection over the spill file: one pass for the histogram of the keys' top 16 bits,
        one for the buckets holding the ranks (sorted in memory); a bucket too large for memory is
        narrowed 16 bits at a time (`_select`)."""
        shift = np.uint64(48)
        hist = np.zeros(1 << 16, dtype=np.int64)
        for block in self._blocks():
            hist += np.bincount((_keys(block) >> shift).astype(np.int64), minlength=1 << 16)
        cum = np.cumsum(hist)
        want: dict[int, list[tuple[int, int]]] = {}
        for r in ranks:
            digit = int(np.searchsorted(cum, r, side="right"))
            want.setdefault(digit, []).append((r, r - (int(cum[digit - 1]) if digit else 0)))
        out: dict[int, float] = {}
        small = [d for d in want if hist[d] <= self.memory_limit]
        for d in want:
            if d not in small:
                out.update({r: self._select(r) for r, _ in want[d]})
        if small:
            digits = np.array(small, dtype=np.uint64)
            found = []
            for block in self._blocks():
                k = _keys(block)
                found.append(k[np.isin(k >> shift, digits)])
            keys = np.concatenate(found)
            top = keys >> shift
            for d in small:
                bucket = np.sort(keys[top == np.uint64(d)])
                for r, residual in want[d]:
                    out[r] = float(_from_keys(bucket[residual : residual + 1])[0])
        return out

    def _select(self, rank: int) -> float:
        """Radix selection of one rank over the spill file: 16 bits of the key per pass."""
        prefix, known = np.uint64(0), 0  # keys whose top `known` bits equal `prefix`
        while True:
            if known and self._bucket_count(prefix, known) <= self.memory_limit:
                keys = np.sort(self._bucket(prefix, known))
                return float(_from_keys(keys[rank : rank + 1])[0])
            shift = np.uint64(64 - known - 16)
            hist = np.zeros(1 << 16, dtype=np.int64)
            for block in self._blocks():
                k = self._in_bucket(_keys(block), prefix, known)
                hist += np.bincount(((k >> shift) & np.uint64(0xFFFF)).astype(np.int64), minlength=1 << 16)
            cum = np.cumsum(hist)
            digit = int(np.searchsorted(cum, rank, side="right"))
            rank -= int(cum[digit - 1]) if digit else 0
            prefix = prefix | (np.uint64(digit) << shift)
            known += 16
            if known == 64:
                return float(_from_keys(np.array([prefix], dtype=np.uint64))[0])

    @staticmethod
    def _in_bucket(k: np.ndarray, prefix: np.uint64, known: int) -> np.ndarray:
        if not known:
            return k
        top = np.uint64(64 - known)
        return k[(k >> top) == (prefix >> top)]

    def _bucket_count(self, prefix: np.uint64, known: int) -> int:
        return sum(len(self._in_bucket(_keys(b), prefix, known)) for b in self._blocks())

    def _bucket(self, prefix: np.uint64, known: int) -> np.ndarray:
        return np.concatenate([self._in_bucket(_keys(b), prefix, known) for b in self._blocks()])

    def result(self, qs: tuple[float, ...]) -> dict[float, float | None]:
        """Each quantile `q` of the values (None when there are none)."""
        n = self.count
        if not n:
            return dict.fromkeys(qs)
        hs = {q: (n - 1) * q for q in qs}
        ranks = sorted({r for h in hs.values() for r in (math.floor(h), min(math.floor(h) + 1, n - 1))})
        stats = self.order_statistics(ranks)
        return {
            q: interpolate(stats[math.floor(h)], stats[min(math.floor(h) + 1, n - 1)], h)
            for q, h in hs.items()
        }


__all__ = ["BLOCK", "Mean", "Quantiles", "interpolate"]
