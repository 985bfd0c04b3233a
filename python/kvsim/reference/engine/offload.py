"""The CPU tier in the engine (DESIGN.md §CPU tier; the twin of `rust/core/src/engine/offload/`): the
waiting phase with held requests and skips, a waiting request's hits continued into the tier and its
load's admission, a landed load's resumption, the stores a step offers and the transfers on the host
link; when the engine observes them and the stall of an engine that waits for nothing but transfers are
`offload_observe`'s (the twin of `engine/offload/observe.rs`).

vLLM 0.33.0's rules: `vllm/v1/core/sched/scheduler.py` (the waiting loop, `skip_request`,
`_update_waiting_for_remote_kv`, `_inflight_prefill_reserved_blocks`),
`vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py` (`get_num_new_matched_tokens`,
`update_state_after_alloc`, `_build_store_jobs`); the tier itself is `kvsim.reference.cpu_tier`.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Iterator

from kvsim.reference.cpu_tier import MISS, PENDING, CpuTier
from kvsim.reference.engine.admission import NEVER, SKIP
from kvsim.reference.engine.job import Job
from kvsim.reference.engine.livelock import LivelockWatch, livelock_error
from kvsim.reference.engine.offload_async import TierAsync
from kvsim.reference.engine.offload_hybrid import HybridTier
from kvsim.reference.engine.offload_observe import TierObserve
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State
from kvsim.reference.engine.timing import transfer_end
from kvsim.reference.hashing import iter_block_keys
from kvsim.reference.kv_groups import Lookup


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Offload(HybridTier, TierObserve, TierAsync, State):
    """The engine's CPU tier (`self.tier`, None without one)."""

    tier: CpuTier | None
    held: deque[Seq]  # vLLM's `kv_holding_waiting`: requests that hold blocks for a load
    loads: deque[Job]  # in flight, in order of their end (one link each way, first come first served)
    stores: deque[Job]
    loading: Counter[int]  # chunks that loads in flight read (vLLM's `_chunks_being_loaded`)
    load_free: int  # when each direction of the link is free again
    store_free: int
    pd_free: int
    num_observed: int  # observations so far (DESIGN.md §CPU tier: Time)
    finished_last: list[Seq]  # finished in the step before: their last stores are offered next step
    stalled: bool  # the last step scheduled nothing and changed nothing: the engine waits for a transfer
    block_keys: dict[int, list[int]]  # a sequence's full blocks' content keys, as far as computed
    skipped_held: list[Seq]  # the waiting phase's held requests set aside in this pass
    # vLLM's flush: stores of finished requests fence the blocks they read, and a step that allocates a
    # fenced block, or preempts a request with stores in flight, waits for those stores.
    fences: dict[int, list[Job]]
    touched: set[int]  # blocks this step allocated or took as hits
    preempted_now: list[Seq]
    # A hybrid model's groups: one of a group's blocks on the link, its time and its host bytes (its own
    # layers: `SimConfig.kv_offloading_group_ps_per_block`, `kv_offloading_group_block_bytes`).
    group_ps: tuple[int, ...]
    group_bytes: tuple[int, ...]

    def init_tier(self) -> None:
        cfg = self.cfg
        self.tier = None
        self.held = deque()
        self.loads, self.stores = deque(), deque()
        self.loading = Counter()
        self.load_free = self.store_free = 0
        self.num_observed = 0
        self.finished_last = []
        self.tier_flight = False  # async_scheduling (offload_async.py): the batch queue
        self.flight_end = 0
        self.deferred = []
        self.victim_deferred = False
        self.stalled = False
        self.block_keys = {}
        self.skipped_held = []
        self.fences = {}
        self.touched = set()
        self.preempted_now = []
        self.livelock = LivelockWatch()  # a hybrid pool's (`watch_livelock`)
        self.pd_free = 0  # when a decode replica's inbound link is free again
        self.connector = bool(cfg.kv_offloading_chunks) or self.pd_link is not None
        if cfg.kv_offloading_chunks:
            self.tier = CpuTier(
                cfg.kv_offloading_chunks,
                cfg.kv_offloading_eviction_policy,
                cfg.kv_offloading_store_threshold,
                count_per_request=cfg.kv_offloading_store_threshold_count == "per-request",
            )
            self.tpc = self.bs * cfg.kv_offloading_blocks_per_chunk
            if self.hybrid:
                self.hkv.boundary_states = []  # a Mamba group's states are handed to the tier as keyed
                # Each group's block at its own time on the link and its own bytes (DESIGN.md §CPU tier,
                # "A hybrid model": its own layers, not the pool's stride).
                self.group_ps = cfg.kv_offloading_group_ps_per_block or ()
                self.group_bytes = cfg.kv_offloading_group_block_bytes or ()

    def link_ps(self, blocks: int, per_group: list[int] | None) -> int:
        """The time `blocks` blocks take on the host link, its latency aside: `per_group` (a hybrid
        model's blocks of each group) each group's at its own time a block, else every block at
        `kv_offloading_ps_per_block`."""
        if per_group is None:
            return blocks * self.cfg.kv_offloading_ps_per_block
        return sum(n * ps for n, ps in zip(per_group, self.group_ps, strict=True))

    def group_bytes_moved(self, per_group: list[int]) -> int:
        """The host bytes a hybrid model's transfer of `per_group` blocks (per group) moves."""
        return sum(n * b for n, b in zip(per_group, self.group_bytes, strict=True))

    # -- keys -----------------------------------------------------------------------------------------
    def chunk_keys(self, s: Seq, n: int) -> list[int]:
        """The content keys of `s`'s first `n` chunks: each its last block's (the chain names the prefix)."""
        bpc = self.cfg.kv_offloading_blocks_per_chunk
        keys = self.block_keys.setdefault(s.idx, [])
        need = n * bpc
        if len(keys) < need:
            last = keys[-1] if keys else None
            keys.extend(iter_block_keys(s.segments(), self.bs, len(keys), last, need - len(keys)))
        return keys[bpc - 1 : need : bpc]

    # -- the waiting phase ----------------------------------------------------------------------------
    def tier_waiting_phase(self, scheduled: list[tuple[Seq, int]], budget: int) -> None:
        """Step part 3b with a CPU tier (vLLM's waiting loop): held requests first, then the waiting
        queue; a request that cannot be decided now is skipped and put back at the head of its queue, in
        order, after the pass; a load admitted joins the held ones."""
        cfg = self.cfg
        skipped_held: list[Seq] = []
        self.skipped_held = skipped_held  # held all the same (`inflight_reserved` counts them)
        skipped_waiting: list[Seq] = []
        while budget > 0:
            from_held = bool(self.held)
            queue = self.held if from_held else self.waiting
            if not queue or len(self.running) >= cfg.max_num_seqs:
                break
            s = queue[0]
            if from_held:
                if not s.loaded:
                    skipped_held.append(queue.popleft())
                    continue
                num_new = self.try_resume_loaded(s, budget)
            elif self.hybrid and self.tier is None:
                # A decode replica's connector over a hybrid pool: a remote request's transfer, else an
                # ordinary admission (a remote one's with the lookup made here).
                found_h = self.h_remote_lookup(s)
                if found_h is not None and found_h[1] > 0:
                    if self.h_admit_remote(s, *found_h):
                        skipped_held.append(queue.popleft())
                        continue
                    num_new = 0
                else:
                    num_new = self.try_admit(s, budget, None if found_h is None else found_h[0])
            elif self.hybrid:
                got = self.h_lookup(s)
                if got is None:
                    skipped_waiting.append(queue.popleft())
                    continue
                if got[1]:
                    if self.h_admit_load(s, *got):
                        skipped_held.append(queue.popleft())
                        continue
                    num_new = 0
                else:
                    num_new = self.try_admit(s, budget, got[0])
                    if num_new > 0:
                        s.junction = self.hkv.junction(s.idx)
            else:
                found = self.tier_lookup(s)
                if found is None:
                    skipped_waiting.append(queue.popleft())
                    continue
                hits, last_key, local, ext = found
                if ext:
                    admitted = (
                        self.admit_remote(s, hits, last_key, local, ext)
                        if s.remote
                        else self.admit_load(s, hits, last_key, local, ext)
                    )
                    if admitted:
                        skipped_held.append(queue.popleft())
                        continue
                    num_new = 0
                else:
                    num_new = self.try_admit(s, budget)
            if num_new == NEVER:
                queue.popleft()
                if from_held:
                    self.release(s)
                    s.held = s.prefilling = False
                    # Its load done, it leaves as a finished request: vLLM's `_free_request` calls the
                    # connector's `request_finished` (offloading/scheduler.py: `on_request_finished`).
                    if self.tier is not None:
                        self.tier.finish(s.idx)
                self.reject(s, 4)
                continue
            assert num_new != SKIP, "waiting_over_budget 'skip' is refused with a CPU tier"
            if num_new == 0:
                # (blocks held for a load, or by a finisher behind the batch in flight, come back)
                if not self.running and not self.held and not skipped_held and not self.deferred:
                    queue.popleft()
                    self.reject(s, 5)
                    continue
                break  # head-of-line blocking: a waiting request never preempts
            queue.popleft()
            s.held = False
            if s.remote:  # admitted with no transfer: its prefill replica's blocks are freed now
                self.sends_decided.append((s.idx, self.t))
            s.remote = False  # one transfer per request (vLLM clears `do_remote_prefill` once allocated)
            s.prefilling = s.num_computed < s.num_tokens
            if self.hybrid:
                self.touched.update(b for t in self.hkv.tables(s.idx) for b in t if b != 0)
            else:
                self.touched.update(self.kv.block_table(s.idx))
            self.running.append(s)
            scheduled.append((s, num_new))
            budget -= num_new
            if self.cols["first_scheduled"][s.idx] < 0:
                self.cols["first_scheduled"][s.idx] = self.t
        self.held.extendleft(reversed(skipped_held))
        self.waiting.extendleft(reversed(skipped_waiting))

    def tier_lookup(self, s: Seq) -> tuple[list[int], int | None, int, int] | None:
        """A waiting request's GPU prefix hits and the tokens the tier holds beyond them (vLLM's
        `get_num_new_matched_tokens`): (hits, their last key, hit tokens, tokens to load), or None if it
        must be skipped (a store of its own in flight, a chunk of its hit still being stored, or being
        loaded by another request). A decode replica's remote request (or any request on one without a
        tier): its GPU hits and, if remote, the tokens up to its prompt's last full block beyond them."""
        if self.tier is None or s.remote:
            total = s.num_tokens
            hits, last_key = self.kv._hits(s.segments(), total)
            local = len(hits) * self.bs
            ext = total // self.bs * self.bs - local if s.remote else 0
            return hits, last_key, local, max(ext, 0)
        s.next_store = 0  # a lookup starts it over: every chunk is offered again
        if s.jobs:
            return None
        total = s.num_tokens
        hits, last_key = self.kv._hits(s.segments(), total)
        local = len(hits) * self.bs
        tpc = self.tpc
        num_chunks = total // tpc
        if num_chunks * tpc - local < tpc:
            return hits, last_key, local, 0
        keys = self.chunk_keys(s, num_chunks)
        start = local // tpc
        count = 0
        pending = False
        for key in keys[start:]:
            found = self.tier.lookup(key)
            if found == MISS:
                break
            count += 1
            pending |= found == PENDING
        if count == 0:
            return hits, last_key, local, 0
        if pending:
            return None
        ext = (start + count) * tpc - local
        if ext < tpc:
            return hits, last_key, local, 0
        if self.loading and any(key in self.loading for key in keys[start : start + count]):
            return None
        return hits, last_key, local, ext

    def prefilling_to_finish(self) -> Iterator[tuple[Seq, int]]:
        """The requests still prefilling (running, held, or held and set aside in this pass), each with the
        tokens it must hold to finish (its sequence, capped at `max_model_len`): what a transfer's
        admission leaves room for (`inflight_reserved`, `h_inflight_reserved`)."""
        mml = self.cfg.max_model_len
        for s in (*self.running, *self.held, *self.skipped_held):
            if s.prefilling:
                yield s, s.num_tokens if mml is None else min(s.num_tokens, mml)

    def inflight_reserved(self) -> int:
        """Blocks the requests still prefilling need to finish their prompts (vLLM's
        `_inflight_prefill_reserved_blocks`)."""
        out = 0
        for s, tokens in self.prefilling_to_finish():
            out += max(0, _cdiv(tokens, self.bs) - len(self.kv.block_table(s.idx)))
        return out

    def hold_for_transfer(
        self, s: Seq, hits: list[int], last_key: int | None, local: int, ext: int
    ) -> list[int] | None:
        """Holds the blocks for a transfer of `ext` tokens after `local` GPU hits if they fit (the
        full-prompt gate, the watermark and the blocks the requests still prefilling need): the table
        started, the blocks touched for the stores, the admission logged. Returns the new blocks, or None,
        changing nothing. A tier's load and a remote request's transfer alike."""
        cfg, bs, pool = self.cfg, self.bs, self.kv.pool
        total = s.num_tokens
        free = pool.num_free_blocks
        evictable = sum(1 for b in hits if pool.ref_cnt(b) == 0)
        watermark = self.admission_watermark()
        full = self.gate_tokens(total)
        if cfg.admission_gate == "full-prompt" and _cdiv(full, bs) - len(hits) + evictable + watermark > free:
            return None
        end = local + ext
        if end // bs - len(hits) + evictable + watermark > free - self.inflight_reserved():
            return None
        new = self.kv._admit_load(s.idx, hits, last_key, end)
        self.touched.update(hits)
        self.touched.update(new)
        self.log_admission(s, hits, new)
        return new

    def admit_load(self, s: Seq, hits: list[int], last_key: int | None, local: int, ext: int) -> bool:
        """Admits the load of `ext` tokens from the tier after `local` GPU hits if its blocks fit (the
        full-prompt gate, the watermark and the blocks the requests still prefilling need); False changes
        nothing."""
        assert self.tier is not None
        new = self.hold_for_transfer(s, hits, last_key, local, ext)
        if new is None:
            return False
        cfg, bs = self.cfg, self.bs
        end = local + ext
        tpc = self.tpc
        first = (local // bs) // cfg.kv_offloading_blocks_per_chunk
        keys = self.chunk_keys(s, end // tpc)[first:]
        self.tier.prepare_load(s.idx, [(k, first + i) for i, k in enumerate(keys)])
        self.loading.update(keys)
        s.next_store = end // tpc  # vLLM's chunk-level policy: stores resume after the loaded chunks
        self.queue_load(s, keys, list(new), end, local, ext)
        return True

    def queue_load(
        self,
        s: Seq,
        keys: list[int],
        dest: list[int],
        end: int,
        local: int,
        ext: int,
        per_group: list[int] | None = None,
    ) -> None:
        """A load of the tier's `keys` into GPU blocks `dest` (a hybrid model's: `per_group` of each group)
        admitted for `s`, `ext` tokens after `local` GPU hits: queued on the link, `s` held until it
        lands, its hits counted."""
        cfg = self.cfg
        total = s.num_tokens
        blocks = len(dest)
        start = max(self.t, self.load_free)
        link = self.link_ps(blocks, per_group)
        self.load_free = transfer_end(
            "load", start, cfg.kv_offloading_latency_ps, blocks, cfg.kv_offloading_ps_per_block, link
        )
        self.loads.append(Job(True, s, keys, dest, self.load_free, self.num_observed + 1, link_ps=link))
        s.jobs += 1
        s.held = s.prefilling = True
        s.loaded = False
        s.load_at = self.t
        s.num_computed = end
        # Hits count the tokens the request does not compute: a load of its whole prompt leaves the last
        # token to compute again, as the GPU's hits stop one token short.
        hit = ext - (end == total)
        c = self.c
        c["cpu_hit_tokens"] += hit
        c["num_loads"] += 1
        c["loaded_blocks"] += blocks
        if per_group is not None:
            c["loaded_group_bytes"] += self.group_bytes_moved(per_group)
        self.cols["cpu_hit_tokens"][s.idx] += hit
        self.log("cpu-hit", s, -1, hit)
        self.log("load", s, -1, len(keys))
        self.note_admission(s, local, total, hit)

    def admit_remote(self, s: Seq, hits: list[int], last_key: int | None, local: int, ext: int) -> bool:
        """A decode replica admits a remote request's transfer of `ext` tokens (its prompt's full blocks
        after `local` GPU hits) if the blocks fit, by a load's rules (the full-prompt gate, the watermark
        and the blocks the requests still prefilling need); the transfer queues on the inbound link.
        False changes nothing."""
        assert self.pd_link is not None
        new = self.hold_for_transfer(s, hits, last_key, local, ext)
        if new is None:
            return False
        bs, end = self.bs, local + ext
        self.queue_remote(s, new, end // bs - local // bs, local, end)
        return True

    def h_remote_lookup(self, s: Seq) -> tuple[Lookup, int] | None:
        """A hybrid decode replica's remote request: its GPU hit every group agrees on (within
        `prompt_len - 1` tokens) and the tokens beyond it up to the scheduler's last full block of its
        prompt (with a Mamba group: up to its last token but one) (the transfer; none if not positive: an
        ordinary admission with this lookup); None if not remote (an ordinary admission)."""
        if not s.remote:
            return None
        hit = self.hybrid_lookup(s)
        return hit, self.hkv.remote_end(s.num_tokens) - hit.tokens

    def h_admit_remote(self, s: Seq, hit: Lookup, ext: int) -> bool:
        """`admit_remote` over a hybrid pool (DESIGN.md §Prefill/decode disaggregation, a hybrid model):
        the transfer's blocks held by a hybrid load's rules (the full-prompt gate with the windows' caps,
        the watermark and what the requests still prefilling need), each group's positions its window
        skipped at the transferred tokens null, its hits above them taken, new blocks for the rest; the
        transfer moves exactly the new blocks. False changes nothing."""
        local = hit.tokens
        end = local + ext
        new = self.h_hold_tables(s, hit, end)
        if new is None:
            return False
        self.queue_remote(s, [b for b, _ in new], len(new), local, end)
        return True

    def queue_remote(self, s: Seq, new: list[int], blocks: int, local: int, end: int) -> None:
        """A remote request's transfer of `blocks` blocks into `new` (held for it), `end - local` tokens
        after `local` GPU hits: queued on the inbound link, its end handed to the prefill side."""
        assert self.pd_link is not None
        total = s.num_tokens
        latency, per_block = self.pd_link
        start = max(self.t, self.pd_free)
        self.pd_free = transfer_end("remote", start, latency, blocks, per_block)
        duration = self.pd_free - start
        self.sends_decided.append((s.idx, self.pd_free))
        self.loads.append(
            Job(
                True,
                s,
                [],
                list(new),
                self.pd_free,
                self.num_observed + 1,
                remote=True,
                link_ps=blocks * per_block,
            )
        )
        s.jobs += 1
        s.held = s.prefilling = True
        s.loaded = False
        s.remote = False
        s.load_at = self.t
        s.num_computed = end
        c = self.c
        c["pd_transfers"] += 1
        c["pd_transfer_blocks"] += blocks
        c["pd_link_busy_ps"] += duration
        self.note_admission(s, local, total)

    def try_resume_loaded(self, s: Seq, budget: int) -> int:
        """A held request whose load has landed, admitted as a resumed one (vLLM: WAITING with computed
        tokens): its next chunk allocated after the full-prompt gate and the watermark; the tokens it
        computes, 0 if it cannot start now, or NEVER."""
        if self.hybrid:
            return self.h_resume_loaded(s, budget)
        num_new, final = self.resumed_chunk(s, budget)
        if final:
            return num_new
        cfg, bs, kv = self.cfg, self.bs, self.kv
        total = s.num_tokens
        table = len(kv.block_table(s.idx))
        watermark = self.admission_watermark()
        free = kv.num_free_blocks
        full = self.gate_tokens(total)
        if cfg.admission_gate == "full-prompt" and _cdiv(full, bs) - table + watermark > free:
            return 0
        if _cdiv(s.num_computed + num_new, bs) - table + watermark > free:
            return 0
        new = kv.allocate(s.idx, s.segments(), num_new)
        assert new is not None, "capacity was checked"
        self.log_allocations(s, new)
        s.num_computed += num_new
        return num_new

    def resumed_chunk(self, s: Seq, budget: int) -> tuple[int, bool]:
        """The tokens a held request whose load has landed computes out of those it has left (vLLM's waiting
        loop for a request with computed tokens), and False: with chunked prefill as many as `budget`
        takes; without, all of them; or the answer and True: NEVER over a step's budget, 0 over what is
        left of it (it cannot start now). A single group's resumption (`try_resume_loaded`) and a hybrid
        pool's (`h_resume_loaded`) alike (Rust `resumed_chunk`)."""
        cfg = self.cfg
        num_new = s.num_tokens - s.num_computed
        if cfg.chunked_prefill:
            return min(num_new, budget), False
        if num_new > cfg.max_num_batched_tokens:
            return NEVER, True
        if num_new > budget:
            return 0, True
        return num_new, False

    def watch_livelock(self, s: Seq) -> None:
        """Before `s`'s preemption for recomputation (a hybrid pool with a CPU tier or a decode replica's
        connector): the engine's state (`s` and its computed tokens, the free blocks, each running
        request's computed tokens and each held one's and whether its load landed, in order; the transfers
        in flight, each one's request, time left and observations to wait, in sorted order; the time until
        each link is free; the tier's occupancy) noted; raises if the run livelocks (Rust
        `watch_livelock`)."""
        t, observed = self.t, self.num_observed
        jobs = sorted(
            (int(load), j.seq.idx, max(j.end - t, 0), j.avail - observed)
            for load, queue in ((True, self.loads), (False, self.stores))
            for j in queue
        )
        state = (
            s.idx,
            s.num_computed,
            self.hkv.num_free_blocks,
            len(self.running),
            *(v for r in self.running for v in (r.idx, r.num_computed)),
            len(self.held),
            *(v for h in self.held for v in (h.idx, h.num_computed, int(h.loaded))),
            len(jobs),
            *(v for job in jobs for v in job),
            max(self.load_free - t, 0),
            max(self.store_free - t, 0),
            max(self.pd_free - t, 0),
            self.tier.used if self.tier is not None else 0,
        )
        if self.livelock.note((self.sampled, self.num_rejected), state):
            raise livelock_error(self.t)

    def land(self, s: Seq) -> None:
        """A held request's load is observed complete: its blocks take their keys; a load of the whole
        prompt leaves its last token to compute (vLLM's `_update_waiting_for_remote_kv`)."""
        s.loaded = True
        self.livelock.landings += 1
        if self.hybrid:
            if s.num_computed == s.num_tokens:
                # A decode replica's transfer of a whole prompt: its blocks keyed, then its last token
                # computed again (vLLM's `_update_waiting_for_remote_kv`, in that order).
                self.hkv.cache_loaded(s.idx, s.segments(), s.num_computed)
                s.num_computed -= 1
            else:
                self.h_land(s)
        else:
            if s.num_computed == s.num_tokens:
                s.num_computed -= 1
            self.kv._cache_loaded(s.idx, s.segments(), s.num_computed)
        wait = self.t - s.load_at
        self.c["load_wait_ps"] += wait
        self.cols["load_wait_ps"][s.idx] += wait

    # -- stores ---------------------------------------------------------------------------------------
    def offer_stores(self, scheduled: list[tuple[Seq, int]], step_end: int) -> tuple[bool, int]:
        """Step part 4 (vLLM's `build_connector_meta`): the full chunks each scheduled request has computed
        after this step and each request finished in the step before has, prompt tokens only by default,
        offered to the tier from the first not offered yet; a store starts when the step ends. Then the
        finished ones are done with the tier. A store this step must wait for (a preempted request's, or
        one reading a block this step allocated: vLLM's flush) is seen at this step's end, and the step's
        new transfers are timed in vLLM's order of a flushing step (`flush_step`). Returns whether a store
        was planned and, if the step flushes, when it ends (0 if it flushes nothing)."""
        tier, cfg = self.tier, self.cfg
        if tier is None:  # a decode replica's connector: no stores
            self.preempted_now = []
            self.finished_last = []
            self.touched.clear()
            return False, 0
        observation = self.num_observed + 1
        free0, num_before = self.store_free, len(self.stores)  # (a flushing step times its stores again)
        if self.hybrid:
            self.h_sync_tables(scheduled)
        flushed: list[Job] = []
        for s in self.preempted_now:
            flushed.extend(job for job in self.stores if job.seq is s)
        self.preempted_now = []
        if self.fences and self.touched:
            for b in self.touched:
                flushed.extend(self.fences.get(b, ()))
        planned = (
            self.hybrid
            and self.hkv.boundary_states is not None
            and self.h_offer_states(step_end, observation)
        )
        finished = self.finished_last
        self.finished_last = []
        bpc = cfg.kv_offloading_blocks_per_chunk
        for s, done in [*((s, False) for s, _ in scheduled), *((s, True) for s in finished)]:
            n = max(s.prompt_len, s.num_tokens - 1) if done else s.num_computed
            n = min(n, s.num_tokens)
            if cfg.kv_offloading_prompt_only:
                n = min(n, s.prompt_len)
            if self.hybrid:
                planned |= self.h_offer(s, done, n, step_end, observation, flushed)
                continue
            num_chunks = n // self.tpc
            start = s.next_store
            if num_chunks <= start:
                continue
            keys = self.chunk_keys(s, num_chunks)[start:]
            out = tier.prepare_store(s.idx, [(k, start + i) for i, k in enumerate(keys)])
            if out is None:
                self.c["stores_failed"] += 1
                continue
            stored, evicted = out
            self.c["cpu_evictions"] += len(evicted)
            for _ in evicted:
                self.log("cpu-evict", s)
            s.next_store = num_chunks
            if not stored:
                continue
            table = s.table if done else self.kv.block_table(s.idx)
            chosen = set(stored)
            blocks = [
                table[(start + i) * bpc + j] for i, k in enumerate(keys) if k in chosen for j in range(bpc)
            ]
            job = self.queue_store(s, stored, blocks, step_end, observation)
            planned = True
            if done:
                self.fence(job)
                if not self.touched.isdisjoint(blocks):
                    flushed.append(job)
        for s in finished:
            tier.finish(s.idx)
            self.block_keys.pop(s.idx, None)
            s.table = []
            s.conn = None
        self.touched.clear()
        self.c["stores_skipped"] = tier.num_stores_skipped
        waits = dict.fromkeys(flushed)  # each once, in order
        for job in waits:
            job.avail = min(job.avail, observation)
            self.c["num_flushes"] += 1
        if not waits:
            return planned, 0
        new = list(itertools.islice(self.stores, num_before, None))
        return planned, self.flush_step(step_end, free0, new, waits, observation)

    def flush_step(
        self, step_end: int, free0: int, new: list[Job], waits: dict[Job, None], observation: int
    ) -> int:
        """vLLM's order of a flushing step (DESIGN.md §CPU tier, "Time"; its worker's
        `handle_preemptions` before the forward pass): the step's new stores `new` (planned from
        `step_end` on a link free from `free0`) timed again, those it waits for (`waits`) first from the
        step's start, then its loads from the end of the wait, its compute after the wait, and its other
        new stores from the step's end. Returns the step's end."""
        start = self.t
        free = self._requeue("store", [job for job in new if job in waits], start, free0)
        wait = max(start, *(job.end for job in waits))
        end = wait + (step_end - start)
        self.store_free = self._requeue("store", [job for job in new if job not in waits], end, free)
        mine = [job for job in self.loads if job.avail == observation and not job.remote]
        if mine:
            free = max(
                (job.end for job in self.loads if not job.remote and job.avail != observation), default=0
            )
            self.load_free = self._requeue("load", mine, wait, free)
        return end

    def _requeue(self, what: str, jobs: list[Job], start: int, free: int) -> int:
        """`jobs` on their link (`what`) again, one after the other from when it is free (`free`), none
        before `start`; returns when the link is free again."""
        cfg = self.cfg
        for job in jobs:
            begin = max(start, free)
            job.end = free = transfer_end(
                what,
                begin,
                cfg.kv_offloading_latency_ps,
                len(job.blocks),
                cfg.kv_offloading_ps_per_block,
                job.link_ps,
            )
        return free

    def queue_store(
        self,
        s: Seq,
        keys: list[int],
        blocks: list[int],
        step_end: int,
        observation: int,
        per_group: list[int] | None = None,
    ) -> Job:
        """A store of the tier's `keys` from GPU blocks `blocks` (a hybrid model's: `per_group` of each
        group), queued on the link from the step's end (seen no earlier than the observation after
        `observation`), counted and logged."""
        cfg = self.cfg
        begin = max(step_end, self.store_free)
        link = self.link_ps(len(blocks), per_group)
        self.store_free = transfer_end(
            "store", begin, cfg.kv_offloading_latency_ps, len(blocks), cfg.kv_offloading_ps_per_block, link
        )
        job = Job(False, s, keys, blocks, self.store_free, observation + 1, link_ps=link)
        self.stores.append(job)
        s.jobs += 1
        self.c["num_stores"] += 1
        self.c["stored_blocks"] += len(blocks)
        if per_group is not None:
            self.c["stored_group_bytes"] += self.group_bytes_moved(per_group)
        self.log("store", s, -1, len(keys))
        return job

    def fence(self, job: Job, blocks: list[int] | None = None) -> None:
        """`job` (a store) watches `blocks` (all it reads by default): a step that allocates one waits
        for it."""
        for b in job.blocks if blocks is None else blocks:
            self.fences.setdefault(b, []).append(job)

    def unfence(self, job: Job) -> None:
        for b in job.blocks:
            jobs = self.fences.get(b)
            if jobs is not None and job in jobs:
                jobs.remove(job)
                if not jobs:
                    del self.fences[b]

    def tier_finished(self, s: Seq) -> None:
        """A request finished (its blocks are about to be freed): the stores it has in flight fence the
        blocks they read, and its table is kept for the stores it will offer next step."""
        if self.tier is None:
            if self.hybrid:  # a hybrid decode replica's connector (DESIGN.md §Prefill/decode disaggregation)
                self.hybrid_connector_finished(s)
            return
        if self.hybrid:
            self.h_finished(s)
            return
        s.table = self.kv.block_table(s.idx)
        for job in self.stores:
            if job.seq is s:
                self.fence(job)
