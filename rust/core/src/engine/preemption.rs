//! Preemption and swap (DESIGN.md §Engine, step 2): the tail unit is recomputed or swapped out (a group
//! whole when the CPU pool holds it, else sample by sample), and swapped units come back into fresh
//! blocks.

use super::{Engine, Memory, Preemption, event};
use crate::block_table::{BlockTable, blocks_for, rem_bs};

impl Engine<'_> {
    /// Takes the running list's tail unit (a sequence, or a whole group) out, in running order.
    pub(super) fn pop_tail_unit(&mut self) -> Vec<usize> {
        let mut i = self.running.len() - 1;
        if let Some(g) = self.slab[self.running[i]].group {
            while i > 0 && self.slab[self.running[i - 1]].group == Some(g) {
                i -= 1;
            }
        }
        self.running.split_off(i)
    }

    /// Preempts a unit taken from the tail. A group of several running samples is swapped out whole
    /// (`preemption` swap or auto, vLLM v0) when the CPU pool holds its blocks, shared ones once;
    /// otherwise each member goes on its own, from the last, and leaves the group: swapped under `swap`
    /// if it fits, else freed for recomputation.
    pub(super) fn preempt_unit(&mut self, unit: &[usize]) {
        let mode = self.cfg.preemption;
        if unit.len() > 1 && mode != Preemption::Recompute {
            let first = self.slab[unit[0]].table.blocks();
            let mut shared = 0;
            while shared < first.len()
                && unit[1..]
                    .iter()
                    .all(|&k| self.slab[k].table.blocks().get(shared) == Some(&first[shared]))
            {
                shared += 1;
            }
            let n = (shared
                + unit
                    .iter()
                    .map(|&k| self.slab[k].table.blocks().len() - shared)
                    .sum::<usize>()) as u64;
            if n <= self.cfg.cpu_blocks - self.cpu_used {
                self.swap_out(unit, shared as u64, n);
                return;
            }
        }
        for &k in unit.iter().rev() {
            self.preempt(k, mode == Preemption::Swap);
        }
    }

    /// Preempts the running list's tail unit; returns whether it was the unit `k` begins.
    pub(super) fn preempt_tail(&mut self, k: usize) -> bool {
        let victim = self.pop_tail_unit();
        let own = victim[0] == k;
        self.preempt_unit(&victim);
        own
    }

    /// Moves a unit's `n` blocks to the CPU pool (the first `shared` of its tables once), its samples
    /// from the last; it waits in the swapped queue as one, named by its first sample (which keeps the
    /// members of a group).
    pub(super) fn swap_out(&mut self, unit: &[usize], shared: u64, n: u64) {
        for &k in unit.iter().rev() {
            let row = self.slab[k].row;
            self.out.num_preemptions[row - self.out_base] += 1;
            self.out.counters.num_preemptions += 1;
            self.progress += 1;
            self.out.num_swaps[row - self.out_base] += 1;
            self.log(event::SWAP_OUT, row, -1);
            self.release(k);
        }
        let head = unit[0];
        let s = &mut self.slab[head];
        s.swapped_blocks = n;
        s.shared_blocks = shared;
        s.members.clear();
        if unit.len() > 1 {
            s.members.extend_from_slice(unit);
        }
        self.cpu_used += n;
        self.swap_blocks_step += n;
        self.out.counters.num_swapped_blocks += i128::from(n);
        self.swapped.push_back(head);
    }

    /// Swaps `k` out to the CPU pool if `swap` and its blocks fit there, else frees it for recomputation
    /// (to the front of the waiting queue, starting over from token 0). A sample preempted on its own
    /// leaves its group: it comes back as a sequence of its own.
    pub(super) fn preempt(&mut self, k: usize, swap: bool) {
        self.slab[k].group = None;
        if self.slab[k].done {
            // async_scheduling: finished in the step in flight, still running in vLLM's eyes: its blocks
            // are freed now and it counts a preemption, but it stays finished.
            let row = self.slab[k].row;
            self.out.num_preemptions[row - self.out_base] += 1;
            self.out.counters.num_preemptions += 1;
            self.progress += 1;
            self.log(event::PREEMPT, row, -1);
            self.release(k);
            self.slab[k].freed = true;
            return;
        }
        if swap {
            let n = self.slab[k].table.blocks().len() as u64;
            if n <= self.cfg.cpu_blocks - self.cpu_used {
                self.swap_out(&[k], 0, n);
                return;
            }
        }
        if self.tier.is_some() && self.cfg.groups.is_some() {
            self.watch_livelock(k);
        }
        let row = self.slab[k].row;
        self.out.num_preemptions[row - self.out_base] += 1;
        self.out.counters.num_preemptions += 1;
        self.progress += 1;
        self.log(event::PREEMPT, row, -1);
        if let Memory::Paged(pool) = &mut self.mem {
            // It may look its own content up when it resumes: phantom keys become real first.
            let s = &mut self.slab[k];
            s.sync_output();
            s.table.materialize(pool, self.cfg.block_size, &s.segs);
        }
        self.release(k);
        let s = &mut self.slab[k];
        s.computed_at_preemption = s.num_computed;
        s.num_computed = 0;
        s.decoding = false;
        s.prefilling = false;
        if let Some(tier) = &mut self.tier {
            // (its own run, if the tier keeps one apart, where its lookups find it again)
            let own = std::mem::take(&mut s.tier_own);
            tier.cpu.demote_own(own, super::offload::private_hi(s.row));
            tier.preempted_now.push(k);
            self.tier_hot.pending = true;
        }
        self.waiting.push_front(k);
    }

    /// Brings swapped `k` back into fresh blocks (its content returns from the CPU; full blocks get
    /// their keys again) with room for its next chunk; returns the chunk's tokens, or 0 if it does not fit.
    pub(super) fn try_swap_in(&mut self, k: usize, budget: u64) -> u64 {
        let cfg = self.cfg;
        let bs = cfg.block_size;
        let watermark = self.admission_watermark();
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("swap is paged only")
        };
        let s = &mut self.slab[k];
        let pending = s.num_tokens() - s.num_computed;
        let num_new = pending.min(budget);
        if !cfg.chunked_prefill && num_new < pending {
            return 0;
        }
        let mut need = blocks_for(s.num_computed + num_new, bs);
        if cfg.one_free_block && s.decoding {
            // vLLM v0's `can_swap_in`: its blocks plus a free block for its next token, needed or not.
            need = need.max(blocks_for(s.num_computed, bs) + 1);
        }
        if need + watermark > u64::from(pool.num_free_blocks()) {
            return 0;
        }
        self.new_blocks.clear();
        let buffer = std::mem::take(&mut s.table.blocks);
        let mut table = BlockTable::start(
            pool,
            bs,
            &[],
            None,
            s.num_computed + num_new,
            &mut self.new_blocks,
            0,
            buffer,
        );
        let phantom = self.defer_keys.then_some(s.private_from);
        s.sync_output();
        table.register_full_blocks_cached(pool, bs, &s.segs, &[], phantom);
        s.table = table;
        self.cpu_used -= s.swapped_blocks;
        self.swap_blocks_step += s.swapped_blocks;
        self.out.counters.num_swapped_blocks += i128::from(s.swapped_blocks);
        s.swapped_blocks = 0;
        s.num_computed += num_new;
        let row = s.row;
        self.log(event::SWAP_IN, row, -1);
        self.log_allocations(row, event::ALLOCATE);
        num_new
    }

    /// Brings swapped group `members` back: the blocks they shared are restored once and shared again,
    /// each member's own blocks fresh (full ones registered again), then each member grows by its next
    /// token as the running phase would. Returns the tokens scheduled, or 0 if it does not fit.
    pub(super) fn try_swap_in_group(&mut self, members: &[usize], budget: u64) -> u64 {
        let cfg = self.cfg;
        let bs = cfg.block_size;
        let head = members[0];
        let n = members.len() as u64;
        if n > budget {
            return 0;
        }
        let c = self.slab[head].num_computed; // every member of a group has computed as many tokens
        let shared = self.slab[head].shared_blocks;
        let identical = shared == blocks_for(c, bs); // swapped before their first write after the fork
        let grow = if rem_bs(c, bs) == 0 || cfg.one_free_block {
            n // with `one_free_block`, v0's `can_swap_in`: a free block per sample, needed or not
        } else if identical {
            n - 1
        } else {
            0
        };
        let watermark = self.admission_watermark();
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("swap is paged only")
        };
        let blocks = self.slab[head].swapped_blocks;
        if blocks + grow + watermark > u64::from(pool.num_free_blocks()) {
            return 0;
        }
        let prefix = if identical { c } else { shared * bs };
        self.new_blocks.clear();
        let s = &mut self.slab[head];
        let buffer = std::mem::take(&mut s.table.blocks);
        let mut table =
            BlockTable::start(pool, bs, &[], None, prefix, &mut self.new_blocks, 0, buffer);
        let phantom = self.defer_keys.then_some(s.private_from);
        s.sync_output();
        table.register_full_blocks_cached(pool, bs, &s.segs, &[], phantom);
        s.table = table;
        for &m in &members[1..] {
            let table = self.slab[head].table.fork(pool);
            self.slab[m].table = table;
        }
        for (i, &m) in members.iter().enumerate() {
            if i > 0 {
                self.new_blocks.clear();
            }
            let Memory::Paged(pool) = &mut self.mem else {
                unreachable!()
            };
            let s = &mut self.slab[m];
            if c > prefix {
                let grown = s.table.grow(pool, bs, c - prefix, &mut self.new_blocks);
                assert_eq!(grown, Some(false), "the group's room was checked");
                let phantom = self.defer_keys.then_some(s.private_from);
                s.sync_output();
                s.table
                    .register_full_blocks_cached(pool, bs, &s.segs, &[], phantom);
            }
            let row = s.row;
            // A member after the first shares the first's leading `shared` blocks (its restored ones).
            let count = if i > 0 { shared as i64 } else { -1 };
            self.log_count(event::SWAP_IN, row, -1, count);
            self.log_allocations(row, event::ALLOCATE);
        }
        self.cpu_used -= blocks;
        self.swap_blocks_step += blocks;
        self.out.counters.num_swapped_blocks += i128::from(blocks);
        let s = &mut self.slab[head];
        s.swapped_blocks = 0;
        s.shared_blocks = 0;
        for &m in members {
            let grown = self.try_grow(m, 1, false);
            assert!(grown, "the group's room was checked");
        }
        n
    }
}
