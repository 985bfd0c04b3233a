"""A replica of a cluster (the twin of `rust/core/src/cluster/replica.rs`): the engine pushed rows as they
are routed to it, stepped to given instants, with the signals a router reads."""

from __future__ import annotations

from kvsim.engine.engine_input import EngineInput
from kvsim.model.config import SimConfig
from kvsim.reference.engine.core import Engine
from kvsim.reference.engine.output import EngineOutput
from kvsim.reference.hashing import iter_block_keys


class Replica:
    """A replica of a cluster (DESIGN.md §Engine): an `Engine` fed rows as they are routed to it and
    stepped to given instants, with the signals a router reads (the cluster contract's names)."""

    def __init__(
        self,
        inp: EngineInput,
        config: SimConfig,
        timeseries_every: int = 0,
        record_events: bool = False,
        pd_link: tuple[int, int] | None = None,
    ) -> None:
        self.engine = Engine(inp, config, timeseries_every, record_events, pd_link)

    def push(
        self,
        inp: EngineInput,
        lo: int,
        hi: int | None = None,
        *,
        arrival: int | None = None,
        first_token_only: bool = False,
        remote: bool = False,
        backoff: int = 0,
    ) -> None:
        self.engine.push(
            inp, lo, hi, arrival=arrival, first_token_only=first_token_only, remote=remote, backoff=backoff
        )

    def advance_until(self, horizon_ps: int) -> None:
        self.engine.advance_until(horizon_ps)

    def finish(self) -> EngineOutput:
        return self.engine.finish()

    @property
    def block_size(self) -> int:
        return self.engine.bs

    def waiting(self) -> int:
        """Sequences that joined and wait to be (re)admitted: the waiting queue, the swapped units' samples
        and those holding blocks for a load from the CPU tier."""
        e = self.engine
        return len(e.waiting) + sum(len(unit) for unit in e.swapped) + len(e.held)

    def running(self) -> int:
        return len(self.engine.running)

    def in_flight(self) -> int:
        """Rows pushed but not joined yet (a fork-cow group counts its parent only)."""
        e = self.engine
        return e.num_units_pushed - e.num_units_joined

    def load(self) -> int:
        return self.waiting() + self.running() + self.in_flight()

    def kv_used(self) -> int:
        """Paged: blocks with `ref_cnt > 0` (the null block excluded); contiguous: reserved tokens."""
        e = self.engine
        if e.paged:
            pool = e.hkv.pool if e.hybrid else e.kv.pool
            return pool.capacity - pool.num_free_blocks
        return e.space.capacity - e.space.num_free

    def kv_total(self) -> int:
        """Paged: the usable blocks (`num_blocks - 1`); contiguous: the capacity in tokens."""
        e = self.engine
        if e.paged:
            return (e.hkv.pool if e.hybrid else e.kv.pool).capacity
        return e.space.capacity

    def caches(self) -> bool:
        """Whether a prompt can hit this replica's prefix cache at all (paged, caching on)."""
        return self.engine.paged and self.engine.cfg.enable_prefix_caching

    def key_set(self) -> set[int]:
        """The keys of this replica's prefix map now (empty when it does not cache; a hybrid model's keyed
        per group, `kv_groups.group_key`)."""
        if not self.caches():
            return set()
        e = self.engine
        return (e.hkv.pool if e.hybrid else e.kv.pool).key_set()

    def prefix_hit_blocks(
        self, segments: list[tuple[int, int]], prompt_len: int, keys: set[int] | None = None
    ) -> int:
        """Leading full blocks of a prompt, among its first `(prompt_len - 1) // block_size`, whose key
        is in this replica's prefix map (or in `keys`, a snapshot of it): the hit it would give now. A
        hybrid model's: the tokens its manager's lookup over every group would hit (`kv_groups.lookup`,
        as its admission looks up), in blocks of the engine's block size."""
        if not self.caches():
            return 0
        if self.engine.hybrid:
            snapshot = None if keys is None else keys.__contains__
            return self.engine.hkv.lookup(segments, max(prompt_len - 1, 0), snapshot).tokens // self.engine.bs
        pool = self.engine.kv.pool
        held = pool.holds_key if keys is None else keys.__contains__
        bs = self.engine.bs
        hit = 0
        for key in iter_block_keys(segments, bs, 0, None, max(prompt_len - 1, 0) // bs):
            if not held(key):
                break
            hit += 1
        return hit
