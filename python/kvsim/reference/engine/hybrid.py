"""A model with several KV-cache groups (DESIGN.md §Hybrid attention; the twin of
`rust/core/src/engine/hybrid.rs`): what a sequence needs at its largest, its admission (the lookup every
group agrees on, the full-prompt check with the windows' caps, the first chunk's room), its growth (blocks
leaving a window freed first), its release, and the memory a step weighs. The scheduler's rules (budget,
seats, watermark, head-of-line, preemption) are the engine's own, unchanged."""

from __future__ import annotations

from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State
from kvsim.reference.kv_groups import NULL, HybridKVCacheManager, Lookup, peak_blocks

NEVER = -1
SKIP = -2


class Hybrid(State):
    """The engine's memory operations when its pool serves several KV-cache groups (`self.hybrid`)."""

    hkv: HybridKVCacheManager

    def hybrid_peak_blocks(self, s: Seq) -> int:
        """Blocks of all groups the sequence holds at most, through its last token (`kv_groups.peak_blocks`:
        what rejection at arrival compares)."""
        return peak_blocks(self.hkv.groups, s.prompt_len + s.target - 1)

    def hybrid_lookup(self, s: Seq) -> Lookup:
        """A waiting request's prefix lookup over every group (vLLM's `find_longest_cache_hit`, up to its
        tokens but one). An ordinary admission (`hybrid_try_admit`), a CPU tier's lookup (`h_lookup`) and a
        decode replica's transfer (`h_remote_lookup`) start alike."""
        return self.hkv.lookup(s.segments(), s.num_tokens - 1)

    def hybrid_try_admit(self, s: Seq, budget: int, looked: Lookup | None = None) -> int:
        """`try_admit` for a hybrid pool: 0 if the head cannot start now, NEVER, SKIP, or its first
        chunk's tokens (vLLM's `get_computed_blocks` + `allocate_slots(full_sequence_must_fit=...)`). Its
        lookup is run here, or is `looked` (made just before: Rust `GpuHits::Looked`)."""
        cfg, kv = self.cfg, self.hkv
        total = s.num_tokens
        hit = self.hybrid_lookup(s) if looked is None else looked
        num_new = total - hit.tokens
        if cfg.chunked_prefill:
            num_new = min(num_new, budget)
        elif num_new > cfg.max_num_batched_tokens:
            return NEVER
        elif num_new > budget:
            return self.over_budget()
        if kv.align:
            num_new = self.hybrid_split(s, hit.tokens, num_new, hit.junction)
            if num_new == 0:
                return 0  # no block boundary within reach: the waiting phase stops here
        watermark = self.admission_watermark()
        free = kv.num_free_blocks
        if cfg.admission_gate == "full-prompt":
            full = self.gate_tokens(total)
            checkpoint = kv.needs_checkpoint(hit.tokens, full, total, s.prompt_len)
            if kv.need(s.idx, full, hit, hit.tokens, capped=True, checkpoint=checkpoint) + watermark > free:
                return 0
        end = hit.tokens + num_new
        checkpoint = kv.needs_checkpoint(hit.tokens, end, total, s.prompt_len)
        if kv.need(s.idx, end, hit, hit.tokens, checkpoint=checkpoint) + watermark > free:
            return 0
        new = kv.admit(s.idx, s.segments(), hit, end, end, s.prompt_len, checkpoint)
        self.log_hybrid_admission(s, hit, hit.tokens, new)
        s.num_computed = end
        self.note_admission(s, hit.tokens, total)
        return num_new

    def log_hybrid_admission(self, s: Seq, hit: Lookup, done: int, new: list[tuple[int, int]]) -> None:
        """An admission over a hybrid pool logged: `admit`, the hits its windows kept as of `done` tokens
        (its hit's at an ordinary admission, the loaded or transferred tokens' when its tables are held for
        a transfer: `h_hold_tables`), then its new blocks `new`. Under `kv_offloading_hit_junction` with a
        CPU tier the `admit` row carries the request's junction in `count` (0: none; the tier's lookup may
        have raised it, and the log is where the lab's replay reads it: DESIGN.md §Event log)."""
        kv = self.hkv
        junction = hit.junction if self.tier is not None and self.cfg.kv_offloading_hit_junction else -1
        self.log("admit", s, -1, junction)
        for g, blocks in enumerate(hit.hits):
            skipped = kv.groups[g].skipped(done) // kv.groups[g].block_size
            for b in blocks[skipped:]:
                if b != NULL:
                    self.log("prefix-hit", s, b, g)
        self.log_group_allocations(s, new)

    def hybrid_try_grow(self, s: Seq, num_new: int) -> bool:
        """Room for `num_new` more tokens of running `s`: blocks that left a window are freed first
        (whether or not the rest fits), then every group's new blocks must be free (`hybrid_grow`, no
        watermark)."""
        new = self.hybrid_grow(s, num_new, 0)
        if new is None:
            return False
        if self.connector:
            self.touched.update(b for b, _ in new)
        return True

    def hybrid_grow(self, s: Seq, num_new: int, watermark: int) -> list[tuple[int, int]] | None:
        """`num_new` more tokens of `s` (a running sequence, or a held one resumed after its load,
        `h_resume_loaded`) with `watermark` blocks left free: blocks that left a window by its settled
        tokens (`settled`) are freed first (whether or not the rest fits), then every group's new blocks are allocated if they fit; those
        blocks, or None if not."""
        kv = self.hkv
        self.hybrid_remove_skipped(s, self.settled(s))
        end = s.num_computed + num_new
        checkpoint = kv.needs_checkpoint(s.num_computed, end, s.num_tokens, s.prompt_len)
        if kv.need(s.idx, end, None, s.num_computed, checkpoint=checkpoint) + watermark > kv.num_free_blocks:
            return None
        new = kv.grow(s.idx, s.segments(), end, min(end, self.known_tokens(s)), checkpoint)
        self.log_group_allocations(s, new)
        s.num_computed = end
        return new

    def hybrid_split(self, s: Seq, start: int, num_new: int, junction: int) -> int:
        """A prefill chunk cut to the Mamba groups' block boundaries (`HybridKVCacheManager.split`)."""
        return self.hkv.split(
            start, num_new, s.num_tokens, s.prompt_len, junction, self.cfg.max_num_batched_tokens
        )

    def hybrid_connector_finished(self, s: Seq) -> None:
        """A request finished on a replica of a disaggregated fleet (its NIXL connector, either pool):
        the blocks its windows left behind at its computed tokens are freed first (vLLM's
        `_connector_finished` calls `remove_skipped_blocks` before the connector sees its tables), before
        the rest is freed or held for the transfer (DESIGN.md §Prefill/decode disaggregation, a hybrid
        model)."""
        self.hybrid_remove_skipped(s)

    def settled(self, s: Seq) -> int:
        """`s`'s computed tokens but those of the step in flight (vLLM's `num_computed_tokens -
        num_in_flight_tokens`, what `allocate_slots` frees windows on): under `async_scheduling`, while the
        step before this schedule runs and it scheduled `s`, its tokens there are not yet settled (DESIGN.md
        §Engine, "Asynchronous scheduling"); otherwise all of them."""
        if self.async_prev >= 0 and s.flight_step == self.c["num_steps"] - 1:
            return s.num_computed - s.flight_tokens
        return s.num_computed

    def known_tokens(self, s: Seq) -> int:
        """`s`'s tokens the scheduler knows (vLLM's `request.num_tokens`, which caps the keys an allocation
        sets): under `async_scheduling`, while the step before this schedule runs and it sampled a token of
        `s`, all but that one (DESIGN.md §Engine, "Asynchronous scheduling"); otherwise all."""
        if self.async_prev >= 0 and s.last_step == self.c["num_steps"] - 1:
            return s.num_tokens - 1
        return s.num_tokens

    def settle_keys(self) -> None:
        """async_scheduling: the step in flight's outputs arrive; each sequence it sampled that still holds
        its blocks keys them up to the tokens it had computed then (vLLM's `update_from_output`: `cache_blocks`
        at `num_computed_tokens - num_in_flight_tokens` for a running request's sampled token, a finisher's
        too, before it is freed; a request preempted meanwhile is skipped, its output stale)."""
        for s, computed in self.flight_sampled:
            if s.idx in self.hkv:
                self.hkv.cache_to(s.idx, s.segments(), computed)
        self.flight_sampled = []

    def hybrid_remove_skipped(self, s: Seq, computed: int | None = None) -> None:
        """The blocks `s`'s windows left behind at `computed` tokens (its computed tokens if None) freed
        (vLLM's `remove_skipped_blocks`) and logged (`window`). A growth (`hybrid_grow`, on its settled
        tokens), a finish on a fleet's replica (`hybrid_connector_finished`) and a finish handed to a CPU
        tier (`h_finished`) alike. Without `computed`: its computed tokens but those of a batch just
        scheduled and not yet committed (`async_scheduling` with a CPU tier, at the output of the batch in
        flight: vLLM's `_connector_finished` frees on `num_computed_tokens - num_in_flight_tokens`, a
        discarded token's still in flight)."""
        if computed is None:
            uncommitted = s.flight_step == self.c["num_steps"]
            done = s.num_computed - s.flight_tokens if uncommitted else s.num_computed
        else:
            done = computed
        for b, g in self.hkv.remove_skipped(s.idx, done):
            self.log("window", s, b, g)

    def hybrid_release(self, s: Seq, at_once: bool = False) -> None:
        for b, g in self.hkv.free(s.idx, at_once):
            self.log("free", s, b, g)

    def log_group_allocations(self, s: Seq, new: list[tuple[int, int]]) -> None:
        """One `allocate` per block popped (`count`: its group), an `evict` first if it lost a key."""
        if self.events is None:
            return
        evicted = self.hkv.pool.evicted
        assert evicted is not None
        lost = set(evicted)
        evicted.clear()
        for b, g in new:
            if b in lost:
                self.log("evict", s, b, g)
            self.log("allocate", s, b, g)

    def hybrid_state(self) -> tuple[int, int, list[int], int]:
        """(slots left empty in partly filled blocks, blocks the running tables hold, those per group, the
        slots an attention group's blocks hold beyond the engine's block size: distinct blocks of a group of
        block size B_g count B_g - B more each; zero unless unequal pages raised a group's block size)."""
        kv = self.hkv
        internal = 0
        per_group = [0] * len(kv.groups)
        wide = [g for g, spec in enumerate(kv.groups) if spec.kind != "mamba" and spec.block_size != self.bs]
        distinct: dict[int, set[int]] = {g: set() for g in wide}
        for s in self.running:
            for g, (spec, table) in enumerate(zip(kv.groups, kv.tables(s.idx), strict=True)):
                per_group[g] += sum(b != NULL for b in table)
                if g in distinct:
                    distinct[g].update(b for b in table if b != NULL)
                if spec.kind != "mamba" and table:
                    internal += -s.num_computed % spec.block_size
        extra = sum(len(distinct[g]) * (kv.groups[g].block_size - self.bs) for g in wide)
        return internal, sum(per_group), per_group, extra
