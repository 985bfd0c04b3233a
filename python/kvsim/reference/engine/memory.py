"""Memory state (DESIGN.md §Metrics; the twin of `rust/core/src/engine/memory.rs`): freeing a sequence's
memory, the time-weighted measurement of every step and its time series, the counters summed at the end.
"""

from __future__ import annotations

from kvsim.reference.engine.output import TIMESERIES
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State
from kvsim.reference.kv_groups import NULL


class Memory(State):
    """Paged (blocks of the KV-cache manager) or contiguous (regions of a first-fit or buddy space)."""

    def release(self, s: Seq) -> None:
        if self.hybrid:
            self.hybrid_release(s)
        elif self.paged:
            if self.events is not None:
                for b in reversed(self.kv.block_table(s.idx)):
                    self.log("free", s, b)
            self.kv.free(s.idx)
            self.outstanding -= s.reserved_blocks
            s.reserved_blocks = 0
        else:
            assert s.region is not None
            self.space.free(*s.region)
            s.region = None

    def release_deferred(self, s: Seq) -> None:
        """`release` of a finisher whose free waited for the batch computing its discarded token
        (`defer_block_free`, `offload_async.py`): a hybrid pool's groups are freed in one release, as vLLM's
        `_drain_deferred_frees` does (`HybridKVCacheManager.free`'s `at_once`)."""
        if self.hybrid:
            self.hybrid_release(s, at_once=True)
        else:
            self.release(s)

    def idle_table_blocks(self) -> int:
        """Blocks in the tables of requests that hold them outside the running list (DESIGN.md §Metrics,
        `blocks_saved_by_sharing`): a prefill replica's finished requests until their transfer ends
        (`sending`), the held requests, whose loads (a CPU tier's, a decode replica's transfers) land in
        them, and under `async_scheduling` with a tier the finishers whose blocks wait for the batch in
        flight (`deferred`)."""
        idle = [*self.sending.values(), *self.held, *self.deferred]
        if self.hybrid:
            return sum(b != NULL for s in idle for table in self.hkv.tables(s.idx) for b in table)
        return sum(len(self.kv.block_table(s.idx)) for s in idle)

    def measure(self, dt: int, batch: int, tokens: int) -> None:
        """Time-weighted memory state during the step (after allocation, before finishing)."""
        c, bs = self.c, self.bs
        stored = internal = reserved = external = held = logical = 0
        if self.hybrid:
            held = self.cfg.capacity_blocks - self.hkv.num_free_blocks
            internal, logical, per_group, extra = self.hybrid_state()
            logical += self.idle_table_blocks()
            allocated = held * bs + extra
            stored = allocated - internal
            for g, n in enumerate(per_group):
                c[f"w_group_blocks_{g}"] += dt * n
                c[f"peak_group_blocks_{g}"] = max(c[f"peak_group_blocks_{g}"], n)
                if self.ts_every and c["num_steps"] % self.ts_every == 0:
                    self.ts[f"blocks_group_{g}"].append(n)
        elif self.paged:
            logical = sum(-(-s.num_computed // bs) for s in self.running) + self.idle_table_blocks()
            held = self.cfg.capacity_blocks - self.kv.num_free_blocks
            # A partial block shared by forked samples (until their first write) counts once.
            partial = {self.kv.block_table(s.idx)[-1]: (-s.num_computed) % bs for s in self.running}
            internal = sum(partial.values())
            allocated = held * bs
            stored = allocated - internal
            reserved = self.outstanding * bs
        else:
            allocated = 0
            for s in self.running:
                assert s.region is not None
                size = s.region[1]
                final = s.prompt_len + s.target
                allocated += size
                stored += s.num_computed
                reserved += final - s.num_computed
                internal += size - final
            external = self.space.external_fragmentation()
        if self.tier is not None:
            self.tier_measure(dt)
        c["w_batch"] += dt * batch
        c["w_stored"] += dt * stored
        c["w_allocated"] += dt * allocated
        c["w_internal"] += dt * internal
        c["w_reserved"] += dt * reserved
        c["w_external"] += dt * external
        c["w_held_blocks"] += dt * held
        c["w_logical_blocks"] += dt * logical
        c["peak_allocated_tokens"] = max(c["peak_allocated_tokens"], allocated)
        if self.ts_every and c["num_steps"] % self.ts_every == 0:
            free = self.cfg.capacity_tokens - allocated
            row = (
                c["num_steps"],
                self.t,
                batch,
                tokens,
                free,
                stored,
                allocated,
                internal,
                reserved,
                external,
            )
            for name, value in zip(TIMESERIES, row, strict=True):
                self.ts[name].append(value)

    def finish_counters(self) -> None:
        """The counters summed at the end of a run."""
        if self.hybrid:
            self.c["num_evictions"] = self.hkv.num_evictions
            self.c["num_block_allocations"] = self.hkv.pool.num_allocated
        elif self.paged:
            self.c["num_evictions"] = self.kv.num_evictions
            self.c["num_cow_copies"] = self.kv.num_cow_copies
            self.c["num_block_allocations"] = self.kv.pool.num_allocated
        self.c["makespan_ps"] = self.t
