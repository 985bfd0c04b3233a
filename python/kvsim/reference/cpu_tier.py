"""Reference CPU tier: the chunks vLLM's native offloading keeps in host memory, their eviction, and the
host link's transfers (DESIGN.md §CPU tier; vLLM 0.33.0's `vllm/v1/kv_offload/cpu/manager.py` and
`policies/lru.py`, `policies/arc.py`).

The executable spec of `rust/core/src/cpu_tier/`. A chunk is named by its content key; it is *pending*
while its store is in flight (neither readable nor evictable), else *ready*, and *pinned* while loads
read it. A request's accesses (stores offered, loads) are recorded once per key with the key's position
in the request (its chunk index), which the eviction policies rank by.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field

from kvsim.errors import InternalError

MISS, HIT, PENDING = 0, 1, 2
EVICTIONS = ("lru", "arc")


@dataclass
class _Chunk:
    ready: bool = False
    pins: int = 0


@dataclass
class _Access:
    """What one request did to the tier (vLLM's `_RequestCacheAccess` and the LRU's request rank)."""

    rank: int = 0  # the LRU's request rank, 0 until first needed
    seen: dict[int, int] = field(default_factory=dict)  # key -> position, in order of first access
    inserted: set[int] = field(default_factory=set)
    reused: set[int] = field(default_factory=set)
    store_misses: set[int] = field(default_factory=set)
    counted: set[int] = field(default_factory=set)  # keys counted toward the threshold (per request only)
    finished: bool = False


class CpuTier:
    """`capacity` chunks of host memory and the policy that evicts them."""

    def __init__(
        self,
        capacity: int,
        eviction: str = "lru",
        store_threshold: int = 0,
        tracker: int = 64_000,
        count_per_request: bool = False,
    ):
        self.capacity = capacity
        self.eviction = eviction
        self.chunks: dict[int, _Chunk] = {}
        self.num_evictable = 0
        self.accesses: dict[int, _Access] = {}
        # Stores offered before a key is admitted (vLLM's `store_threshold`, LRU-bounded tracker).
        self.threshold = store_threshold if store_threshold >= 2 else 0
        self.tracker = tracker
        # vLLM 0.34.0: a request counts a key once (`counted_keys`); 0.33.0 (False) counts every offer.
        self.per_request = count_per_request
        self.counts: OrderedDict[int, int] = OrderedDict()
        # LRU: each chunk's rank (smaller is evicted first): (request rank, -position) or (n, 0).
        self.next_rank = 0
        self.rank: dict[int, tuple[int, int]] = {}
        self.evictable: set[int] = set()
        self.heap: list[tuple[tuple[int, int], int]] = []
        # ARC: T1/T2 in recency order (least recent first), their ghosts, the adaptive target.
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.target = 0.0
        self.num_evicted = 0
        self.num_stores_skipped = 0

    # -- queries --------------------------------------------------------------------------------------
    def lookup(self, key: int) -> int:
        c = self.chunks.get(key)
        if c is None:
            return MISS
        return HIT if c.ready else PENDING

    @property
    def used(self) -> int:
        return len(self.chunks)

    # -- access bookkeeping ---------------------------------------------------------------------------
    def _access(self, rid: int) -> _Access:
        a = self.accesses.get(rid)
        if a is None:
            a = self.accesses[rid] = _Access()
        return a

    def _request_rank(self, a: _Access) -> int:
        if a.rank == 0:
            self.next_rank += 1
            a.rank = self.next_rank
        return a.rank

    def _record(self, rid: int, keys: list[tuple[int, int]], reused: list[int]) -> None:
        """Records a request's first access to each key (`_record_request_cache_access`)."""
        a = self._access(rid)
        new = []
        for key, pos in keys:
            if key in a.seen:
                continue
            if a.finished:
                raise InternalError("a finished request accessed the CPU tier")
            a.seen[key] = pos
            new.append((key, pos))
        if new and self.eviction == "lru":
            r = self._request_rank(a)
            for key, pos in new:
                if key not in self.chunks:
                    continue
                rank = (r, -pos)
                if self.rank[key] >= rank:
                    continue
                self.rank[key] = rank
                if key in self.evictable:
                    heapq.heappush(self.heap, (rank, key))
        a.reused.update(k for k in reused if k not in a.inserted)

    # -- evictability -----------------------------------------------------------------------------------
    def _mark_evictable(self, key: int) -> None:
        self.num_evictable += 1
        if self.eviction == "lru":
            self.evictable.add(key)
            heapq.heappush(self.heap, (self.rank[key], key))

    def _mark_pinned(self, key: int) -> None:
        self.num_evictable -= 1
        if self.eviction == "lru":
            self.evictable.discard(key)

    def _evict(self, n: int, protected: set[int]) -> list[int] | None:
        """`n` evictable chunks not in `protected`, removed; None (nothing changed) if there are fewer."""
        if self.eviction == "lru":
            selected: list[tuple[tuple[int, int], int]] = []
            deferred: list[tuple[tuple[int, int], int]] = []
            chosen: set[int] = set()
            while self.heap and len(selected) < n:
                entry = heapq.heappop(self.heap)
                rank, key = entry
                if key not in self.evictable or self.rank.get(key) != rank or key in chosen:
                    continue
                if key in protected:
                    deferred.append(entry)
                    continue
                selected.append(entry)
                chosen.add(key)
            for entry in deferred:
                heapq.heappush(self.heap, entry)
            if len(selected) < n:
                for entry in selected:
                    heapq.heappush(self.heap, entry)
                return None
            out = []
            for _, key in selected:
                self.evictable.discard(key)
                del self.chunks[key]
                del self.rank[key]
                out.append(key)
            return out
        return self._arc_evict(n, protected)

    # -- ARC ------------------------------------------------------------------------------------------
    def _arc_evict(self, n: int, protected: set[int]) -> list[int] | None:
        out: list[int] = []
        t1_size = len(self.t1)
        for _ in range(n):
            pick = None
            if t1_size >= int(self.target):
                pick = self._arc_pick(self.t1, protected, out)
            if pick is None:
                pick = self._arc_pick(self.t2, protected, out)
                if pick is None:
                    pick = self._arc_pick(self.t1, protected, out)
            if pick is None:
                return None
            if pick in self.t1:
                t1_size -= 1
            out.append(pick)
        for key in out:
            if key in self.t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
            del self.chunks[key]
        for ghost in (self.b1, self.b2):
            while len(ghost) > self.capacity:
                ghost.popitem(last=False)
        return out

    def _arc_pick(self, lst: OrderedDict[int, None], protected: set[int], taken: list[int]) -> int | None:
        for key in lst:
            c = self.chunks[key]
            if c.ready and c.pins == 0 and key not in protected and key not in taken:
                return key
        return None

    # -- loads and stores -----------------------------------------------------------------------------
    def prepare_load(self, rid: int, keys: list[tuple[int, int]]) -> None:
        """Pins ready chunks for a load (`prepare_load`), recording the accesses."""
        for key, _ in keys:
            c = self.chunks[key]
            if not c.ready:
                raise InternalError("a load of a pending chunk")
            if c.pins == 0:
                self._mark_pinned(key)
            c.pins += 1
        self._record(rid, keys, [k for k, _ in keys])

    def complete_load(self, keys: list[int]) -> None:
        for key in keys:
            c = self.chunks[key]
            c.pins -= 1
            if c.pins == 0:
                self._mark_evictable(key)

    def prepare_store(self, rid: int, keys: list[tuple[int, int]]) -> tuple[list[int], list[int]] | None:
        """Offers a request's chunks (`prepare_store`): (keys stored now, keys evicted for them), or None
        when the tier cannot make room (nothing is stored then)."""
        offered = [k for k, _ in keys]
        counted: set[int] = self._access(rid).counted if self.per_request else set()
        if self.threshold:
            self._count_offers(offered, counted)
        to_store: list[tuple[int, int]] = []
        ready_existing: list[int] = []
        for key, pos in keys:
            c = self.chunks.get(key)
            if c is None:
                to_store.append((key, pos))
            elif c.ready:
                ready_existing.append(key)
        if self.threshold:
            kept = [(k, p) for k, p in to_store if self.counts.get(k, 0) >= self.threshold]
            # (per request, a skip counts once per request and key)
            self.num_stores_skipped += sum(
                1 for k, _ in to_store if self.counts.get(k, 0) < self.threshold and k not in counted
            )
            to_store = kept
            if self.per_request:
                counted.update(offered)
        a = self._access(rid)
        misses = [k for k, _ in to_store if k not in a.store_misses]
        if misses and self.eviction == "arc":
            self._arc_store_misses(misses)
        a.store_misses.update(misses)
        recorded = {k for k, _ in to_store} | set(ready_existing)
        self._record(rid, [(k, p) for k, p in keys if k in recorded], ready_existing)
        if not to_store:
            return [], []
        need = len(to_store) - (self.capacity - len(self.chunks))
        evicted: list[int] = []
        if need > 0:
            if need > self.num_evictable:
                return None
            got = self._evict(need, set(offered))
            if got is None:
                return None
            evicted = got
            self.num_evictable -= len(evicted)
            self.num_evicted += len(evicted)
        for key, pos in to_store:
            self.chunks[key] = _Chunk()
            if self.eviction == "lru":
                self.rank[key] = (self._request_rank(a), -pos)
            else:
                self.b1.pop(key, None)
                self.b2.pop(key, None)
                self.t1[key] = None
        a.inserted.update(k for k, _ in to_store)
        return [k for k, _ in to_store], evicted

    def complete_store(self, keys: list[int]) -> None:
        for key in keys:
            c = self.chunks.get(key)
            if c is not None and not c.ready:
                c.ready = True
                self._mark_evictable(key)

    def _count_offers(self, keys: list[int], counted: set[int]) -> None:
        """vLLM's `_record_accesses`: a key's offers, in a tracker of `tracker` keys (least recent out);
        a tracked key in `counted` (the request's, per request) moves up without counting again."""
        protected = set()
        for key in keys:
            if key in self.counts:
                self.counts.move_to_end(key)
                if key not in counted:
                    self.counts[key] += 1
                protected.add(key)
        unprotected = len(self.counts) - len(protected)
        for key in keys:
            if key in self.counts:
                continue
            if len(self.counts) >= self.tracker:
                if unprotected == 0:
                    continue
                self.counts.popitem(last=False)
                unprotected -= 1
            self.counts[key] = 1

    def _arc_store_misses(self, keys: list[int]) -> None:
        """ARC learns from its ghosts before a store inserts (`on_store_miss`), tail to head."""
        for key in reversed(keys):
            if key in self.b1:
                self.target = min(self.target + max(1.0, len(self.b2) / len(self.b1)), float(self.capacity))
                self.b1.move_to_end(key)
            elif key in self.b2:
                self.target = max(self.target - max(1.0, len(self.b1) / len(self.b2)), 0.0)
                self.b2.move_to_end(key)

    def finish(self, rid: int) -> None:
        """A request finished (`on_request_finished`): its chunks ranked anew, its first the newest."""
        a = self.accesses.get(rid)
        if a is None or a.finished:
            return
        a.finished = True
        # By position, then key: one request's keys at one position are one content's in several KV-cache
        # groups, whose keys order as their groups (vLLM's `order_request_keys`).
        ordered = sorted(a.seen, key=lambda k: (a.seen[k], k))
        if self.eviction == "lru":
            for key in reversed(ordered):
                if key not in self.chunks:
                    continue
                self.next_rank += 1
                self.rank[key] = (self.next_rank, 0)
                if key in self.evictable:
                    heapq.heappush(self.heap, (self.rank[key], key))
        else:
            inserted_only = a.inserted - a.reused
            for key in reversed(ordered):
                if key not in self.chunks:
                    continue
                if key in inserted_only:
                    (self.t1 if key in self.t1 else self.t2).move_to_end(key)
                elif key in a.reused:
                    if key in self.t1:
                        del self.t1[key]
                        self.t2[key] = None
                    else:
                        self.t2.move_to_end(key)
        del self.accesses[rid]


__all__ = ["EVICTIONS", "HIT", "MISS", "PENDING", "CpuTier"]
