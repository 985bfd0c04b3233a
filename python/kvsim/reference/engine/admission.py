"""Admission (DESIGN.md §Engine, steps 1 and 3; the twin of `rust/core/src/engine/admission.rs`): what a
sequence needs (its region or peak blocks), rejection at arrival, the waiting phase with its gate
(`admission_gate`, the watermark as `watermark_rule` applies it, promised blocks) and what a prompt over
the budget does (`waiting_over_budget`), and rejections."""

from __future__ import annotations

from kvsim.reference.engine.output import REJECTED
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State
from kvsim.reference.kv_groups import Lookup

NEVER = -1  # try_admit: this sequence can never start
# try_admit: chunked prefill off, more tokens than the budget left, and `waiting_over_budget="skip"`
SKIP = -2


class Admission(State):
    """Sizes, rejections and the waiting phase."""

    def region_size(self, s: Seq) -> int:
        policy = self.cfg.policy
        if policy == "static":
            assert self.cfg.max_model_len is not None
            return self.cfg.max_model_len
        if policy == "orca-max":
            return s.prompt_len + s.max_gen
        if policy == "orca-pow2":
            return s.prompt_len + (1 << max(s.target - 1, 0).bit_length())
        return s.prompt_len + s.target  # orca-oracle: exactly what it will generate

    def peak_blocks(self, s: Seq) -> int:
        """Blocks held at the sequence's largest: its last token's K/V is never computed."""
        if self.hybrid:
            return self.hybrid_peak_blocks(s)
        if self.cfg.policy == "reserve":
            return -(-(s.prompt_len + s.max_gen) // self.bs)
        return -(-(s.prompt_len + s.target - 1) // self.bs)

    def reject_at_arrival(self, s: Seq) -> int:
        cfg = self.cfg
        if s.target < 1:
            return 1
        if self.paged and self.peak_blocks(s) > cfg.capacity_blocks:
            return 2
        if not self.paged and self.region_size(s) > self.space.max_region():
            return 3
        if s.seats > cfg.max_num_seqs:
            return 7
        return 0

    def admission_watermark(self) -> int:
        """The blocks an admission leaves free now: the watermark at every admission (`watermark_rule=
        "always"`, vLLM v0) or only while some sequence runs, those admitted earlier in this step included
        (`"while-running"`, vLLM v1 0.24.0 and later: `has_scheduled_reqs=bool(self.running)`)."""
        if self.cfg.watermark_rule == "while-running" and not self.running:
            return 0
        return self.cfg.watermark_blocks

    def over_budget(self) -> int:
        """What `try_admit` answers for a whole prompt (chunked prefill off) over the budget left: 0 (wait:
        the waiting phase ends, vLLM >= 0.12) or SKIP (try the next one, vLLM 0.9.2 to 0.11.2)."""
        return SKIP if self.cfg.waiting_over_budget == "skip" else 0

    def gate_tokens(self, total: int) -> int:
        """The tokens the full-prompt gate asks room for, for a waiting request of `total` tokens: vLLM
        0.33.0's `min(request.num_tokens, max_model_len)` (`KVCacheManager.allocate_slots` with
        `full_sequence_must_fit`; `Scheduler._request_remaining_blocks`). The cap never bites in kvsim: a
        request reaching `max_model_len` is rejected at arrival and its target keeps `prompt + target <=
        max_model_len`, so a waiting one (new, preempted, held) has at most `max_model_len − 1` tokens
        (DESIGN.md §Engine, step 3; asserted here, Rust `gate_tokens`)."""
        mml = self.cfg.max_model_len
        assert mml is None or total < mml, f"a waiting request of {total} tokens, max_model_len {mml}"
        return total if mml is None else min(total, mml)

    def try_admit(self, s: Seq, budget: int, looked: Lookup | None = None) -> int:
        """Allocates a waiting sequence's first chunk; returns its token count, 0 if it cannot start now,
        NEVER if it cannot ever start (without chunked prefill, more tokens than a step's budget) or SKIP
        (see `over_budget`). `looked`: over a hybrid pool, `s`'s lookup over every group made just before
        (a CPU tier's or a decode replica's, which found nothing to load), not run twice (Rust
        `GpuHits::Looked`)."""
        cfg, bs = self.cfg, self.bs
        total = s.num_tokens
        if not self.paged:
            num_new = total if not cfg.chunked_prefill else min(total, budget)
            if num_new > cfg.max_num_batched_tokens:
                return NEVER
            if num_new > budget:
                return self.over_budget()
            region = self.space.allocate(self.region_size(s))
            if region is None:
                return 0
            s.region = region
            s.num_computed = num_new
            self.log("admit", s, *region)
            return num_new
        if self.hybrid:
            return self.hybrid_try_admit(s, budget, looked)
        segs = s.segments()
        hits, _ = self.kv._hits(segs, total)
        hit = len(hits) * bs
        num_new = total - hit
        if cfg.chunked_prefill:
            num_new = min(num_new, budget)
        elif num_new > cfg.max_num_batched_tokens:
            return NEVER
        elif num_new > budget:
            return self.over_budget()
        pool = self.kv.pool
        free = pool.num_free_blocks - self.outstanding
        evictable = sum(1 for b in hits if pool.ref_cnt(b) == 0)
        first = -(-(hit + num_new) // bs) - len(hits)
        if cfg.policy == "reserve":
            need = self.peak_blocks(s) - len(hits)
        elif cfg.admission_gate == "full-prompt":
            need = -(-self.gate_tokens(total) // bs) - len(hits)
        else:
            need = first
        if need + evictable + self.admission_watermark() > free:
            return 0
        new = self.kv.allocate(s.idx, segs, num_new)
        assert new is not None, "capacity was checked"
        self.log_admission(s, hits, new)
        if cfg.policy == "reserve":
            s.reserved_blocks = need - first
            self.outstanding += s.reserved_blocks
        s.num_computed = hit + num_new
        self.note_admission(s, hit, total)
        return num_new

    def log_admission(self, s: Seq, hits: list[int], new: list[int]) -> None:
        """A paged admission's events: `admit`, a `prefix-hit` per block in `hits`, an `allocate` per new
        block. An ordinary admission's and a transfer's (`hold_for_transfer`) alike."""
        self.log("admit", s)
        for b in hits:
            self.log("prefix-hit", s, b)
        self.log_allocations(s, new)

    def note_admission(self, s: Seq, hit: int, total: int, cpu_hit: int = 0) -> None:
        """Counters and row columns of a paged admission that took `hit` cached tokens of `total` on the
        GPU and `cpu_hit` more from the CPU tier."""
        self.c["prefix_hit_tokens"] += hit
        self.c["prompt_tokens_admitted"] += total
        if not s.admitted_before:  # hits on a first admission: sharing between requests, not resumes
            s.admitted_before = True
            self.c["first_hit_tokens"] += hit
            self.c["first_cpu_hit_tokens"] += cpu_hit
            self.c["first_prompt_tokens"] += total
        self.cols["cached_tokens"][s.idx] += hit
        recomputed = max(0, s.computed_at_preemption - hit - cpu_hit)
        self.cols["recomputed_tokens"][s.idx] += recomputed
        self.c["recomputed_tokens"] += recomputed

    def waiting_phase(self, scheduled: list[tuple[Seq, int]], budget: int) -> None:
        """Step part 3b, once nothing is swapped out: the waiting queue's head is admitted while it fits
        (head-of-line: a waiting request never preempts); appends to `scheduled`."""
        cfg = self.cfg
        skipped: list[Seq] = []
        while self.waiting and budget > 0:
            s = self.waiting[0]
            if len(self.running) + s.seats > cfg.max_num_seqs:
                if not self.running:
                    self.waiting.popleft()
                    self.reject(s, 5)
                    continue
                break
            num_new = self.try_admit(s, budget)
            if num_new == NEVER:
                self.waiting.popleft()
                self.reject(s, 4)
                continue
            if num_new == SKIP:
                self.waiting.popleft()
                skipped.append(s)
                continue
            if num_new == 0:
                if not self.running and not self.sending:  # (blocks held for a transfer come back)
                    self.waiting.popleft()
                    self.reject(s, 5)
                    continue
                break  # head-of-line blocking: a waiting request never preempts
            self.waiting.popleft()
            self.running.append(s)
            scheduled.append((s, num_new))
            budget -= num_new
            if self.cols["first_scheduled"][s.idx] < 0:
                self.cols["first_scheduled"][s.idx] = self.t
        # vLLM 0.9.2-0.11.2 put skipped requests back at the head in reverse order (`prepend_request` into
        # a queue, then `prepend_requests`, which reversed it once more): the last skipped comes first.
        self.waiting.extendleft(skipped)

    def reject(self, s: Seq, reason: int) -> None:
        """Rejects `s` (and the samples it would have forked) now, with a reason code."""
        self.num_rejected += 1
        if s.remote:  # a remote request rejected: its prefill replica's blocks are freed now
            self.sends_decided.append((s.idx, self.t))
            s.remote = False
        for r in (s, *([] if s.forked else s.children)):
            if self.prefill_side:
                self.done_rows.append(r.idx)
            self.log("reject", r)
            self.cols["status"][r.idx] = REJECTED
            self.cols["reject_reason"][r.idx] = reason
            self.cols["finish"][r.idx] = self.t
