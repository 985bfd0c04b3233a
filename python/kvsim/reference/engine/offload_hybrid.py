"""The CPU tier for a model of several KV-cache groups (DESIGN.md §CPU tier, "A hybrid model"; the twin of
`rust/core/src/engine/offload/hybrid/`): a waiting request's hits continued into the tier group by group
(full attention a prefix, a window a run from the right, a Mamba state a window of one chunk, to a fixed
point), its load over every group, the stores a step offers per group (a sliding window's only at the
replay boundary and the shared-prefix junction; a Mamba group's states as the GPU's cache keys them, each
alone, before the others), the connector's copy of each table whose window blocks reused since go stale,
and the fences a window's or a state's store makes at once.

vLLM 0.33.0's rules: `vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py`
(`_lookup_complete_chunks`, `_sliding_window_lookup`, `resolve_mamba_align_size`,
`update_state_after_alloc`, `_update_req_states`, `_build_aligned_boundary_store_jobs`,
`_build_store_jobs`), `offloading/config.py` (`get_sliding_window_size_in_chunks`) and
`vllm/v1/core/single_type_kv_cache_manager.py` (`SlidingWindowManager.reachable_block_mask`,
`MambaManager.cache_blocks`' hand-offs). The single-group tier is `offload.py`; the tier itself
`kvsim.reference.cpu_tier`, whose keys here name a chunk by its last block's content and its group
(`tier_key`).
"""

from __future__ import annotations

from collections import Counter, deque
from typing import TYPE_CHECKING

from kvsim.errors import InternalError
from kvsim.reference.cpu_tier import MISS, PENDING
from kvsim.reference.engine.job import Job
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State
from kvsim.reference.hashing import iter_block_keys
from kvsim.reference.kv_groups import NULL, Lookup

if TYPE_CHECKING:
    from collections.abc import Iterator

# A chunk's key: its last block's content key with the low byte its group's index (vLLM's `OffloadKey`,
# the block hash then the group index: one content's keys order as their groups).
GROUP_BITS = 8


def tier_key(content: int, group: int) -> int:
    return (content >> GROUP_BITS << GROUP_BITS) | group


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class HybridTier(State):
    """The CPU tier's rules over a hybrid pool (`self.hkv`); `offload.py` hands these the hybrid case."""

    if TYPE_CHECKING:
        # offload.py's state and the methods these call there (and hybrid.py's)
        tpc: int
        block_keys: dict[int, list[int]]
        loading: Counter[int]
        skipped_held: list[Seq]
        stores: deque[Job]

        def fence(self, job: Job, blocks: list[int] | None = None) -> None: ...
        def queue_load(
            self,
            s: Seq,
            keys: list[int],
            dest: list[int],
            end: int,
            local: int,
            ext: int,
            per_group: list[int] | None = None,
        ) -> None: ...
        def queue_store(
            self,
            s: Seq,
            keys: list[int],
            blocks: list[int],
            step_end: int,
            observation: int,
            per_group: list[int] | None = None,
        ) -> Job: ...
        def log_group_allocations(self, s: Seq, new: list[tuple[int, int]]) -> None: ...
        def hybrid_grow(self, s: Seq, num_new: int, watermark: int) -> list[tuple[int, int]] | None: ...
        def log_hybrid_admission(
            self, s: Seq, hit: Lookup, done: int, new: list[tuple[int, int]]
        ) -> None: ...
        def prefilling_to_finish(self) -> Iterator[tuple[Seq, int]]: ...
        def hybrid_remove_skipped(self, s: Seq) -> None: ...
        def resumed_chunk(self, s: Seq, budget: int) -> tuple[int, bool]: ...
        def known_tokens(self, s: Seq) -> int: ...

    # -- the groups as the connector sees them -------------------------------------------------------
    def h_tpc(self, g: int) -> int:
        """Tokens a chunk of group `g` holds (vLLM's `tokens_per_chunk`: its blocks' tokens; the groups'
        block sizes may differ, each a multiple of the engine's)."""
        return self.hkv.groups[g].block_size * self.cfg.kv_offloading_blocks_per_chunk

    def h_pos(self, g: int, i: int) -> int:
        """Chunk `i` of group `g`'s position for the tier's ranking: where it ends, in engine blocks (vLLM
        ranks a request's keys by the tokens their chunks end at, whatever their group)."""
        return (i + 1) * self.h_tpc(g) // self.bs

    def h_align(self) -> int | None:
        """vLLM's `alignment_tokens` for the offloading: the full-attention groups' chunk when they share
        one; with no full-attention group the largest chunk; None if they differ."""
        full = {self.h_tpc(g) for g, spec in enumerate(self.hkv.groups) if spec.kind == "full"}
        if len(full) == 1:
            return full.pop()
        if not full:
            return max(self.h_tpc(g) for g in range(len(self.hkv.groups)))
        return None

    def h_windows(self) -> list[int | None]:
        """Each group's window in chunks (vLLM's `sliding_window_size_in_chunks`): None for full
        attention, `ceil(W / C)` for a sliding window of W tokens, `ceil(A / C)` for local chunks of A
        (C its chunk's tokens), 1 for a Mamba state."""
        return [
            None if g.kind == "full" else 1 if g.kind == "mamba" else _cdiv(g.window, self.h_tpc(i))
            for i, g in enumerate(self.hkv.groups)
        ]

    def h_state_chunk(self) -> int | None:
        """The tokens a Mamba group's chunk holds, None without one (vLLM's `resolve_mamba_align_size`:
        a hit is rounded down to it)."""
        for g, spec in enumerate(self.hkv.groups):
            if spec.kind == "mamba":
                return self.h_tpc(g)
        return None

    def h_load_window(self, g: int, num_tokens: int) -> int | None:
        """The chunks a load into group `g` ending at `num_tokens` reads (`load_window_size_in_chunks`):
        a sliding window widened by the hit's partial last chunk."""
        spec = self.hkv.groups[g]
        if spec.kind == "full":
            return None
        if spec.kind == "mamba":
            return 1
        tpc = self.h_tpc(g)
        window = _cdiv(spec.window, tpc)
        if spec.kind == "sliding_window":
            window = max(window, _cdiv(spec.window - 1 + (-num_tokens % tpc), tpc))
        return window

    def h_keys(self, s: Seq, g: int, n: int) -> list[int]:
        """Group `g`'s keys of `s`'s first `n` chunks: each the content key of the engine block its chunk
        ends with (one chain for every group, so one prefix's keys differ only in their group)."""
        per = self.h_tpc(g) // self.bs  # engine blocks a chunk
        keys = self.block_keys.setdefault(s.idx, [])
        need = n * per
        if len(keys) < need:
            last = keys[-1] if keys else None
            keys.extend(iter_block_keys(s.segments(), self.bs, len(keys), last, need - len(keys)))
        return [tier_key(k, g) for k in keys[per - 1 : need : per]]

    # -- the lookup ----------------------------------------------------------------------------------
    def h_lookup(self, s: Seq) -> tuple[Lookup, int] | None:
        """A waiting request's GPU hit and the tokens the tier holds beyond it (vLLM's
        `get_num_new_matched_tokens`), or None if it must be skipped (a transfer of its own in flight, a
        pending chunk in its hit, or a chunk another request is loading)."""
        n_groups = len(self.hkv.groups)
        s.conn = None  # the connector's tables start over, and every chunk is offered again
        s.next_stores = [0] * n_groups
        if s.jobs:
            return None
        hit = self.hybrid_lookup(s)
        ext, boundary = self.h_tier_hit(s, hit.tokens)
        if ext is None:
            return None
        if self.cfg.kv_offloading_hit_junction and boundary > hit.tokens + ext and boundary > hit.junction:
            # A hit a sparse group cut short: the full-attention groups' boundary is the junction (vLLM
            # 0.34.0's `_maybe_register_shared_prefix_junction`; never lowering the GPU lookup's).
            hit.junction = boundary
        return hit, ext

    def h_tier_hit(self, s: Seq, local: int) -> tuple[int | None, int]:
        """The tokens beyond `local` GPU hits every group's chunks in the tier serve (vLLM's
        `_lookup_complete_chunks`): 0 for less than a chunk, None to defer; and the full-attention groups'
        boundary (the bound when the lookup first reached a window or state group; 0 if it did not, or had
        no full-attention group, or deferred in one before)."""
        windows = self.h_windows()
        total = s.num_tokens
        full = [g for g, w in enumerate(windows) if w is None]
        windowed = sorted(
            (g for g, w in enumerate(windows) if w is not None), key=lambda g: -(windows[g] or 0)
        )
        order = full + windowed
        keys = [self.h_keys(s, g, total // self.h_tpc(g)) for g in range(len(windows))]
        max_hit = total - 1 if windowed else total
        state = self.h_state_chunk()
        if state is not None:
            max_hit = max_hit // state * state
        hit_tokens = 0
        defer = False
        boundary: int | None = None
        todo = order
        while todo:
            looked_windowed = False
            current, todo = todo, []
            for g in current:
                tpc = self.h_tpc(g)
                num_keys = len(keys[g])
                max_hit = min(max_hit, num_keys * tpc)
                if max_hit - local < tpc:
                    return 0, boundary or 0
                num_chunks = min(_cdiv(max_hit, tpc), num_keys)
                start = local // tpc
                found: int | None
                window = windows[g]
                if window is not None and boundary is None:
                    boundary = max_hit if full and not defer else 0
                if window is None:
                    found = self.h_prefix_run(keys[g][start:num_chunks])
                else:
                    first = self.h_load_window(g, min(max_hit, num_chunks * tpc))
                    assert first is not None
                    found = self.h_window_run(keys[g][start:num_chunks], window, first)
                if found == 0:
                    return 0, boundary or 0
                if found is None:
                    defer = True
                else:
                    max_hit = min(max_hit, tpc * (start + found))
                new = max_hit - local
                if new < tpc:
                    return 0, boundary or 0
                if new < hit_tokens:
                    if defer:
                        defer = False
                        todo = order
                    elif looked_windowed and not todo:
                        todo = windowed
                looked_windowed |= window is not None
                hit_tokens = new
        if defer:
            return None, 0
        if self.loading:
            end = local + hit_tokens
            for g in range(len(windows)):
                tpc = self.h_tpc(g)
                ks = keys[g][local // tpc : _cdiv(end, tpc)]
                span = self.h_load_window(g, end)
                if span is not None:
                    ks = ks[-span:]
                if any(key in self.loading for key in ks):
                    return None, 0
        return hit_tokens, boundary or 0

    def h_prefix_run(self, keys: list[int]) -> int | None:
        """How many of `keys` from the first the tier holds (vLLM's `_maximal_prefix_lookup`); None if
        one of them is pending."""
        assert self.tier is not None
        pending = False
        for i, key in enumerate(keys):
            got = self.tier.lookup(key)
            if got == MISS:
                return None if pending else i
            pending |= got == PENDING
        return None if pending else len(keys)

    def h_window_run(self, keys: list[int], window: int, first: int) -> int | None:
        """Where the last run of `window` chunks in the tier ends among `keys`, scanning from the right,
        the first run needing `first` (vLLM's `_sliding_window_lookup`); a shorter run reaching the
        start counts; 0 if none; None if a chunk of the run found is pending."""
        assert self.tier is not None
        pending = False
        run = 0
        required = first
        for i in range(len(keys) - 1, -1, -1):
            got = self.tier.lookup(keys[i])
            if got == MISS:
                run = 0
                pending = False
                required = window
            else:
                run += 1
                pending |= got == PENDING
            if run == required:
                return None if pending else i + required
        return None if pending else run

    # -- a load --------------------------------------------------------------------------------------
    def h_inflight_reserved(self) -> int:
        """`inflight_reserved` over a hybrid pool: what each request still prefilling needs to hold its
        whole sequence, the windows capped (vLLM's `_request_remaining_blocks`)."""
        kv = self.hkv
        out = 0
        for s, tokens in self.prefilling_to_finish():
            checkpoint = kv.needs_checkpoint(s.num_computed, tokens, s.num_tokens, s.prompt_len)
            out += kv.need(s.idx, tokens, None, s.num_computed, capped=True, checkpoint=checkpoint)
        return out

    def h_hold_tables(self, s: Seq, hit: Lookup, end: int) -> list[tuple[int, int]] | None:
        """`s`'s tables up to `end` tokens after its GPU hit `hit`, if they fit (the full-prompt gate with the
        windows' caps, the watermark and the blocks the requests still prefilling need): each group's
        positions its window skipped at `end` null, its hits above them taken, new blocks for the rest,
        logged; those new blocks, or None (nothing changed). A CPU tier's load and a decode replica's
        transfer (`h_admit_remote`) hold them alike (Rust `h_hold_tables`)."""
        cfg, kv = self.cfg, self.hkv
        local, total = hit.tokens, s.num_tokens
        free = kv.num_free_blocks
        watermark = self.admission_watermark()
        full = self.gate_tokens(total)
        checkpoint = kv.needs_checkpoint(end, full, total, s.prompt_len)
        if (
            cfg.admission_gate == "full-prompt"
            and kv.need(s.idx, full, hit, end, capped=True, checkpoint=checkpoint) + watermark > free
        ):
            return None
        if kv.need(s.idx, end, hit, end) + watermark > free - self.h_inflight_reserved():
            return None
        new = kv.admit(s.idx, s.segments(), hit, end, local, s.prompt_len, computed=end)
        self.touched.update(b for t in kv.tables(s.idx) for b in t if b != NULL)
        self.log_hybrid_admission(s, hit, end, new)
        return new

    def h_admit_load(self, s: Seq, hit: Lookup, ext: int) -> bool:
        """Admits the load of `ext` tokens after the GPU hit if its blocks fit (the full-prompt gate, the
        watermark and the blocks the requests still prefilling need); False changes nothing. The load
        reads every group's chunks its blocks need: full attention all of them, a window its last."""
        assert self.tier is not None
        cfg, kv = self.cfg, self.hkv
        local = hit.tokens
        end = local + ext
        new = self.h_hold_tables(s, hit, end)
        if new is None:
            return False
        s.junction = kv.junction(s.idx)
        tables = kv.tables(s.idx)
        bpc = cfg.kv_offloading_blocks_per_chunk
        load: list[tuple[int, int]] = []
        dest: list[int] = []
        per_group: list[int] = []  # its blocks of each group, each group's at its own time on the link
        for g, table in enumerate(tables):
            bs = kv.groups[g].block_size
            last = _cdiv(end, self.h_tpc(g))
            first = _cdiv(local, bs)
            stop = _cdiv(end, bs)
            begin = next((i for i in range(first, stop) if table[i] != NULL), stop)
            if begin < stop:
                chunk = begin // bpc
                load.extend(
                    (k, self.h_pos(g, chunk + i)) for i, k in enumerate(self.h_keys(s, g, last)[chunk:])
                )
            dest.extend(table[begin:stop])
            per_group.append(stop - begin)
            s.next_stores[g] = last  # vLLM's chunk-level policy: stores resume after the loaded chunks
        keys = [k for k, _ in load]
        self.tier.prepare_load(s.idx, load)
        self.loading.update(keys)
        self.queue_load(s, keys, dest, end, local, ext, per_group)
        return True

    def h_resume_loaded(self, s: Seq, budget: int) -> int:
        """A held request whose load has landed, admitted as a resumed one over a hybrid pool: the first
        time the pass reaches it, its states' keys count as keyed in this step and its states are handed
        off (`HybridKVCacheManager.adopt_loaded`); its chunk cut to the Mamba groups' block boundaries
        (`hybrid_split`), the full-prompt gate, then its window's blocks left behind freed and its next
        chunk's allocated if the watermark allows (`hybrid_grow`, a running sequence's growth with the
        watermark, a checkpoint reserved as for any prefill chunk); the tokens it computes, 0 if it cannot
        start now, or NEVER."""
        cfg, kv = self.cfg, self.hkv
        if s.landed is not None:
            # The pass reaches it first since its load landed: its states' keys are set now (vLLM's
            # `_update_waiting_for_remote_kv`), keyed in this step and handed off.
            kv.adopt_loaded(s.idx, s.landed)
            s.landed = None
        total = s.num_tokens
        start = s.num_computed
        num_new, final = self.resumed_chunk(s, budget)
        if final:
            return num_new
        if kv.align:
            num_new = self.hybrid_split(s, start, num_new, kv.junction(s.idx))
            if num_new == 0:
                return 0  # no block boundary within reach: the waiting phase stops here
        watermark = self.admission_watermark()
        full = self.gate_tokens(total)
        if (
            cfg.admission_gate == "full-prompt"
            and kv.need(
                s.idx,
                full,
                None,
                start,
                capped=True,
                checkpoint=kv.needs_checkpoint(start, full, total, s.prompt_len),
            )
            + watermark
            > kv.num_free_blocks
        ):
            return 0
        if self.hybrid_grow(s, num_new, watermark) is None:
            return 0
        return num_new

    # -- stores --------------------------------------------------------------------------------------
    def h_sync_tables(self, scheduled: list[tuple[Seq, int]]) -> None:
        """vLLM's `_update_req_states`: each scheduled request's copy of its tables takes the blocks its
        step added (its whole tables if it was admitted since its lookup); then in every copy a window
        group's entry not offered yet whose block this step allocated (left the window and taken again)
        is zeroed, never to be stored."""
        kv = self.hkv
        before: dict[int, list[int]] = {}
        for s, _ in scheduled:
            tables = kv.tables(s.idx)
            if s.conn is None:
                s.conn = tables
                before[s.idx] = [0] * len(tables)
            else:
                before[s.idx] = [len(c) for c in s.conn]
                for c, t in zip(s.conn, tables, strict=True):
                    c.extend(t[len(c) :])
        if not self.touched:
            return
        bpc = self.cfg.kv_offloading_blocks_per_chunk
        windowed = [g for g, spec in enumerate(kv.groups) if spec.kind != "full"]
        for s in (*self.running, *self.finished_last):
            if s.conn is None:
                continue
            ends = before.get(s.idx)
            for g in windowed:
                c = s.conn[g]
                for j in range(s.next_stores[g] * bpc, ends[g] if ends is not None else len(c)):
                    if c[j] in self.touched:
                        c[j] = NULL

    def h_store_mask(self, s: Seq, g: int, start: int, end: int) -> list[bool] | None:
        """Which of chunks `[start, end)`'s blocks group `g` may store (vLLM's `reachable_block_mask`
        with the offloading's alignment, the full-attention chunk; retention 0): a sliding window only
        the blocks a hit at the replay boundary or the junction needs; None for all."""
        spec = self.hkv.groups[g]
        if spec.kind != "sliding_window":
            return None
        bpc, bs, align = self.cfg.kv_offloading_blocks_per_chunk, spec.block_size, self.h_align()
        if align is None or align % bs:
            return None  # (the mask cannot say a block: every block may be stored)
        need = _cdiv(spec.window - 1, bs)
        first, stop = start * bpc, end * bpc
        mask = [False] * (stop - first)
        for boundary in (s.prompt_len - 1, s.junction):
            if boundary == s.junction and not boundary:
                continue
            edge = boundary // align * align // bs
            for j in range(max(first, edge - need), min(stop, edge)):
                mask[j - first] = True
        return mask

    def h_offer(
        self, s: Seq, done: bool, n: int, step_end: int, observation: int, flushed: list[Job]
    ) -> bool:
        """The chunks of every group `s` may store up to `n` offloadable tokens, offered to the tier in
        one call, group by group (vLLM's `_build_store_jobs`); returns whether a store was planned."""
        tier, cfg, kv = self.tier, self.cfg, self.hkv
        assert tier is not None
        assert s.conn is not None
        bpc = cfg.kv_offloading_blocks_per_chunk
        ranges: list[tuple[int, int]] = []
        offer: list[tuple[int, int]] = []
        known = self.known_tokens(s)  # (the chunks keyed: under async_scheduling the tokens arrived)
        for g, c in enumerate(s.conn):
            tpc = self.h_tpc(g)
            num = min(n // tpc, len(c) // bpc, known // tpc)
            start = s.next_stores[g]
            ranges.append((start, num))
            if num <= start or kv.groups[g].kind == "mamba":
                continue  # (a state group's chunks are its hand-offs: `h_offer_states`)
            keys = self.h_keys(s, g, num)
            mask = self.h_store_mask(s, g, start, num)
            for i in range(start, num):
                if c[i * bpc + bpc - 1] == NULL:
                    continue
                marks = mask[(i - start) * bpc : (i - start + 1) * bpc] if mask is not None else [True] * bpc
                if not any(marks):
                    continue
                if any(c[i * bpc + b] == NULL and marks[b] for b in range(bpc)):
                    continue
                offer.append((keys[i], self.h_pos(g, i)))
        if not offer:
            for g, (_, num) in enumerate(ranges):
                s.next_stores[g] = max(s.next_stores[g], num)
            return False
        out = tier.prepare_store(s.idx, offer)
        if out is None:
            self.c["stores_failed"] += 1
            return False
        stored, evicted = out
        self.c["cpu_evictions"] += len(evicted)
        for _ in evicted:
            self.log("cpu-evict", s)
        if not stored:
            for g, (_, num) in enumerate(ranges):
                s.next_stores[g] = max(s.next_stores[g], num)
            return False
        chosen = set(stored)
        blocks: list[int] = []
        now: list[int] = []  # a window's blocks: fenced at once (they may leave it before the finish)
        per_group = [0] * len(ranges)  # its blocks of each group, each group's at its own time on the link
        for g, ((start, num), c) in enumerate(zip(ranges, s.conn, strict=True)):
            windowed = kv.groups[g].kind != "full"
            if num > start and kv.groups[g].kind != "mamba":
                keys = self.h_keys(s, g, num)
                for i in range(start, num):
                    if keys[i] not in chosen:
                        continue
                    for b in range(bpc):
                        bid = c[i * bpc + b]
                        if bid == NULL:
                            continue
                        blocks.append(bid)
                        per_group[g] += 1
                        if windowed:
                            now.append(bid)
            s.next_stores[g] = max(s.next_stores[g], num)
        job = self.queue_store(s, stored, blocks, step_end, observation, per_group)
        job.fenced = now
        if done:
            self.fence(job)
            later = [b for b in blocks if b not in set(now)]
            if not self.touched.isdisjoint(later):
                flushed.append(job)
        elif now:
            self.fence(job, now)
        return True

    def h_offer_states(self, step_end: int, observation: int) -> bool:
        """The step's state hand-offs (vLLM's `_build_aligned_boundary_store_jobs`, before every other
        store): each state the GPU's cache keyed at a boundary that is a multiple of its group's chunk and
        within its request's offloadable tokens, offered alone: reused if ready in the tier, else stored
        (one block, fenced at once: the state is freed at its request's next allocation) or failed (the
        hand-off is gone); returns whether a store was planned."""
        tier, cfg = self.tier, self.cfg
        assert tier is not None
        planned = False
        for rid, entries in self.hkv.take_boundary_states():
            s = self.seqs[rid]
            limit = min(s.num_tokens, s.prompt_len) if cfg.kv_offloading_prompt_only else s.num_tokens
            for g, block, boundary in entries:
                tpc = self.h_tpc(g)
                if boundary > limit or boundary % tpc:
                    continue
                i = boundary // tpc - 1
                key = self.h_keys(s, g, i + 1)[i]
                out = tier.prepare_store(s.idx, [(key, self.h_pos(g, i))])
                if out is None:
                    self.c["stores_failed"] += 1
                    continue
                stored, evicted = out
                self.c["cpu_evictions"] += len(evicted)
                for _ in evicted:
                    self.log("cpu-evict", s)
                if not stored:
                    continue
                one = [0] * len(self.hkv.groups)
                one[g] = 1
                job = self.queue_store(s, stored, [block], step_end, observation, one)
                job.fenced = [block]
                self.fence(job, [block])
                planned = True
        return planned

    def h_finished(self, s: Seq) -> None:
        """A request finished: the blocks its windows left behind are freed first (vLLM's
        `_connector_finished` does so before the connector sees the request's tables), then the blocks
        of its stores in flight that a window's fence did not watch yet are watched (vLLM's
        `request_finished`: the deferred fences)."""
        self.hybrid_remove_skipped(s)
        for job in self.stores:
            if job.seq is s:
                fenced = set(job.fenced)
                self.fence(job, [b for b in job.blocks if b not in fenced])

    def h_land(self, s: Seq) -> None:
        """A held request's load landed: its blocks up to the loaded tokens take their keys."""
        if s.num_computed >= s.num_tokens:
            raise InternalError("a hybrid model's load ends short of the sequence's tokens")
        landed = self.hkv.cache_loaded(s.idx, s.segments(), s.num_computed)
        s.landed = landed or None
