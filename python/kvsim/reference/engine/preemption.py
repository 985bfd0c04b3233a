"""Preemption, swap and sequence groups (DESIGN.md §Engine, steps 2, 3 and 5; the twin of
`rust/core/src/engine/preemption.rs`): the tail unit's preemption (recompute or swap, a group whole or
sample by sample), a group's room, swapping back in and the swap-in phase."""

from __future__ import annotations

from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State


class Preemption(State):
    """Victims come from the tail of the running list; swapped units wait in `self.swapped`, FCFS."""

    def pop_tail_unit(self) -> list[Seq]:
        """Takes the running list's tail unit (a sequence, or a whole group) out, in running order."""
        g = self.running[-1].group
        i = len(self.running) - 1
        if g >= 0:
            while i > 0 and self.running[i - 1].group == g:
                i -= 1
        unit = self.running[i:]
        del self.running[i:]
        return unit

    def preempt_unit(self, unit: list[Seq]) -> None:
        """Preempts a unit taken from the tail. A group of several running samples is swapped out whole
        (`preemption` "swap" or "auto", vLLM v0) when the CPU pool holds its blocks, shared ones once;
        otherwise each member goes on its own, from the last, and leaves the group: swapped under "swap"
        if it fits, else freed for recomputation."""
        mode = self.cfg.preemption
        if len(unit) > 1 and mode in ("swap", "auto"):
            tables = [self.kv.block_table(s.idx) for s in unit]
            shared = 0
            while shared < len(tables[0]) and all(
                len(t) > shared and t[shared] == tables[0][shared] for t in tables
            ):
                shared += 1
            n = shared + sum(len(t) - shared for t in tables)
            if n <= self.cfg.cpu_blocks - self.cpu_used:
                self.swap_out(unit, shared, n)
                return
        for s in reversed(unit):
            self.preempt(s, swap=mode == "swap")

    def preempt_tail(self, s: Seq) -> bool:
        """Preempts the running list's tail unit; returns whether it was the unit `s` begins."""
        victim = self.pop_tail_unit()
        self.preempt_unit(victim)
        return victim[0] is s

    def swap_out(self, unit: list[Seq], shared: int, n: int) -> None:
        """Moves a unit's `n` blocks to the CPU pool (the first `shared` of its tables once), its samples
        from the last; it waits in the swapped queue as one."""
        for s in reversed(unit):
            self.cols["num_preemptions"][s.idx] += 1
            self.c["num_preemptions"] += 1
            self.cols["num_swaps"][s.idx] += 1
            self.log("swap-out", s)
            self.release(s)
        unit[0].swapped_blocks = n
        unit[0].shared_blocks = shared
        self.cpu_used += n
        self.swap_blocks_step += n
        self.c["num_swapped_blocks"] += n
        self.swapped.append(unit)

    def preempt(self, s: Seq, swap: bool) -> None:
        """Swaps `s` out to the CPU pool if `swap` and its blocks fit there, else frees it for
        recomputation (it goes to the front of the waiting queue and starts over from token 0). A sample
        preempted on its own leaves its group: it comes back as a sequence of its own."""
        s.group = -1
        if s.done:
            # async_scheduling: finished in the step in flight, still running in vLLM's eyes: its blocks are
            # freed now and it counts a preemption, but it stays finished.
            self.cols["num_preemptions"][s.idx] += 1
            self.c["num_preemptions"] += 1
            self.log("preempt", s)
            self.release(s)
            s.freed = True
            return
        if swap:
            n = len(self.kv.block_table(s.idx))
            if n <= self.cfg.cpu_blocks - self.cpu_used:
                self.swap_out([s], 0, n)
                return
        if self.connector and self.hybrid:
            self.watch_livelock(s)
        self.cols["num_preemptions"][s.idx] += 1
        self.c["num_preemptions"] += 1
        self.log("preempt", s)
        self.release(s)
        s.prefilling = False
        if self.connector:
            self.preempted_now.append(s)
        s.computed_at_preemption = s.num_computed
        s.num_computed = 0
        s.decoding = False
        self.waiting.appendleft(s)

    def group_need(self, unit: list[Seq]) -> int:
        """Blocks a group's members pop to add their next token each, in order: a new block at a block
        boundary, a copy of a shared partial last block (the last holder writes in place)."""
        bs, need = self.bs, 0
        writers: dict[int, int] = {}
        for s in unit:
            table = self.kv.block_table(s.idx)
            need += -(-(s.num_computed + 1) // bs) - len(table)
            if s.num_computed % bs:
                last = table[-1]
                if self.kv.pool.ref_cnt(last) - writers.get(last, 0) > 1:
                    need += 1
                    writers[last] = writers.get(last, 0) + 1
        return need

    def group_fits(self, unit: list[Seq]) -> bool:
        """vLLM v0's `can_append_slots` for a group: its blocks fit (and, with `one-free-block`, a block is
        free for every member)."""
        free = self.kv.num_free_blocks
        if self.cfg.append_check == "one-free-block" and len(unit) > free:
            return False
        return self.group_need(unit) <= free

    def try_swap_in(self, s: Seq, budget: int) -> int:
        """Brings a swapped sequence back into fresh blocks (its content returns from the CPU, its keys are
        registered again) with room for its next chunk; returns the chunk's tokens, or 0 if it does not fit."""
        cfg, bs = self.cfg, self.bs
        num_new = min(s.num_tokens - s.num_computed, budget)
        if not cfg.chunked_prefill and num_new < s.num_tokens - s.num_computed:
            return 0
        need = -(-(s.num_computed + num_new) // bs)
        if cfg.append_check == "one-free-block" and s.decoding:
            # vLLM v0's `can_swap_in`: its blocks plus a free block for its next token, needed or not.
            need = max(need, -(-s.num_computed // bs) + 1)
        if need + self.admission_watermark() > self.kv.num_free_blocks:
            return 0
        new = self.kv._restore(s.idx, s.segments(), s.num_computed + num_new)
        self.log("swap-in", s)
        self.log_allocations(s, new)
        self.cpu_used -= s.swapped_blocks
        self.swap_blocks_step += s.swapped_blocks
        self.c["num_swapped_blocks"] += s.swapped_blocks
        s.swapped_blocks = 0
        s.num_computed += num_new
        return num_new

    def try_swap_in_group(self, unit: list[Seq], budget: int) -> int:
        """Brings a swapped group back: the blocks its members shared are restored once and shared again,
        each member's own blocks fresh (full ones registered again), then each member grows by its next
        token (as the running phase would). Returns the tokens scheduled, or 0 if it does not fit."""
        bs, first, n = self.bs, unit[0], len(unit)
        if n > budget:
            return 0
        c = first.num_computed  # every member of a group has computed as many tokens
        shared = first.shared_blocks
        identical = shared == -(-c // bs)  # swapped before their first write after the fork
        grow = n if c % bs == 0 else (n - 1 if identical else 0)
        if self.cfg.append_check == "one-free-block":
            grow = n  # vLLM v0's `can_swap_in`: a free block per sample, needed or not
        if first.swapped_blocks + grow + self.admission_watermark() > self.kv.num_free_blocks:
            return 0
        kv = self.kv
        prefix = c if identical else shared * bs
        restored = kv._restore(first.idx, first.segments(), prefix)
        for s in unit[1:]:
            kv.fork(first.idx, s.idx)
        for i, s in enumerate(unit):
            own = kv.allocate(s.idx, s.segments(), c - prefix) if c > prefix else []
            assert own is not None, "the group's room was checked"
            self.log("swap-in", s, -1, shared if i > 0 else -1)
            self.log_allocations(s, (restored if i == 0 else []) + own)
        self.cpu_used -= first.swapped_blocks
        self.swap_blocks_step += first.swapped_blocks
        self.c["num_swapped_blocks"] += first.swapped_blocks
        first.swapped_blocks = first.shared_blocks = 0
        for s in unit:
            grown = self.try_grow(s, 1, check=False)
            assert grown, "the group's room was checked"
        return n

    def swap_in_phase(self, scheduled: list[tuple[Seq, int]], budget: int) -> int:
        """Step part 3a: swapped units come back, FCFS, before any new admission; one that cannot come
        back while nothing runs never will (reason 6). Appends to `scheduled`; returns the budget left."""
        cfg = self.cfg
        while self.swapped and budget > 0:
            unit = self.swapped[0]
            if len(self.running) + sum(s.seats for s in unit) > cfg.max_num_seqs:
                break
            if len(unit) > 1:
                num_new = self.try_swap_in_group(unit, budget)
            else:
                num_new = self.try_swap_in(unit[0], budget)
            if num_new == 0:
                if not self.running:
                    self.swapped.popleft()
                    self.cpu_used -= unit[0].swapped_blocks
                    for s in unit:
                        self.reject(s, 6)
                    continue
                break
            self.swapped.popleft()
            self.running.extend(unit)
            if len(unit) > 1:
                scheduled.extend((s, 1) for s in unit)
            else:
                scheduled.append((unit[0], num_new))
            budget -= num_new
        return budget
