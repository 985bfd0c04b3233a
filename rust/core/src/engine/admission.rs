//! The waiting phase (DESIGN.md §Engine, step 3): swapped units come back first, then the waiting head
//! takes its prefix hits and a chunk if the admission gate lets it; a prompt over the budget left stops
//! the phase or is skipped.

use super::{
    ADM_STRIDE, Engine, EngineConfig, Memory, Policy, event, peak_blocks, region_size, reject,
};
use crate::block_table::{BlockTable, blocks_for};

/// `try_admit`: this sequence can never start.
pub(super) const NEVER: u64 = u64::MAX;
/// `try_admit`: chunked prefill off, more tokens than the budget left, and `skip_over_budget`.
const SKIP: u64 = u64::MAX - 1;

/// What `try_admit` answers for a whole prompt (chunked prefill off) over the budget left: 0 (wait: the
/// waiting phase ends, vLLM ≥ 0.12) or `SKIP` (try the next one, vLLM 0.9.2 to 0.11.2).
pub(super) fn over_budget(cfg: &EngineConfig) -> u64 {
    if cfg.skip_over_budget { SKIP } else { 0 }
}

/// The tokens the full-prompt gate asks room for, for a waiting request of `total` tokens: vLLM 0.33.0's
/// `min(request.num_tokens, max_model_len)` (`KVCacheManager.allocate_slots` with
/// `full_sequence_must_fit`; `Scheduler._request_remaining_blocks`). The cap never bites here: a request
/// reaching `max_model_len` is rejected at arrival and its target keeps `prompt + target <= max_model_len`,
/// so a waiting one (new, preempted, held) has at most `max_model_len − 1` tokens (DESIGN.md §Engine, step
/// 3; debug-asserted, the reference's `gate_tokens` asserts it always).
pub(super) fn gate_tokens(cfg: &EngineConfig, total: u64) -> u64 {
    debug_assert!(
        cfg.max_model_len.is_none_or(|m| total < m),
        "a waiting request of {total} tokens, max_model_len {:?}",
        cfg.max_model_len
    );
    cfg.max_model_len.map_or(total, |m| total.min(m))
}

/// A waiting request's GPU hits for `try_admit_after`: to be looked up, or in `Engine::hits` already
/// with the last one's key (a CPU tier's lookup took them just before: not asked twice), or, over a
/// hybrid pool, its lookup over every group in `Engine::lookup` already (`Looked`: a CPU tier's or a
/// decode replica's lookup ran it just before and found nothing to load; not run twice).
#[derive(Clone, Copy, Debug)]
pub(super) enum GpuHits {
    Ask,
    Taken(Option<crate::BlockKey>),
    Looked,
}

impl Engine<'_> {
    /// The blocks an admission leaves free now: the watermark, at every admission (vLLM v0) or, with
    /// `watermark_while_running`, only while some sequence runs, those admitted earlier in this step
    /// included (vLLM v1 0.24.0 and later: `allocate_slots(..., has_scheduled_reqs=bool(self.running))`).
    pub(super) fn admission_watermark(&self) -> u64 {
        if self.cfg.watermark_while_running && self.running.is_empty() {
            0
        } else {
            self.cfg.watermark_blocks
        }
    }

    /// Allocates a waiting sequence's first chunk; returns its token count, 0 if it cannot start now,
    /// `NEVER` if it never can (chunked prefill off and more tokens than a step's budget), or `SKIP` (see
    /// `over_budget`).
    #[inline]
    pub(super) fn try_admit(&mut self, k: usize, budget: u64) -> u64 {
        self.try_admit_after(k, budget, GpuHits::Ask)
    }

    /// `try_admit`, `k`'s GPU hits as `found` says.
    #[inline]
    pub(super) fn try_admit_after(&mut self, k: usize, budget: u64, found: GpuHits) -> u64 {
        let cfg = self.cfg;
        let bs = cfg.block_size;
        let total = self.slab[k].num_tokens();
        let watermark = self.admission_watermark();
        match &mut self.mem {
            Memory::Contiguous(space) => {
                let num_new = if cfg.chunked_prefill {
                    total.min(budget)
                } else {
                    total
                };
                if num_new > cfg.max_num_batched_tokens {
                    return NEVER;
                }
                if num_new > budget {
                    return over_budget(cfg);
                }
                let Some(region) = space.allocate(region_size(cfg, &self.slab[k])) else {
                    return 0;
                };
                let s = &mut self.slab[k];
                s.region = Some(region);
                s.num_computed = num_new;
                let row = s.row;
                self.log_count(event::ADMIT, row, region.0 as i64, region.1 as i64);
                num_new
            }
            Memory::Paged(_) if cfg.groups.is_some() => self.hybrid_try_admit(k, budget, found),
            Memory::Paged(_) => {
                let last_key = match found {
                    GpuHits::Taken(last_key) => last_key,
                    GpuHits::Ask => self.gpu_hits(k),
                    GpuHits::Looked => unreachable!("a hybrid pool's lookup"),
                };
                let Memory::Paged(pool) = &mut self.mem else {
                    unreachable!()
                };
                let s = &self.slab[k];
                let num_hits = self.hits.len() as u64;
                let hit = num_hits * bs;
                let mut num_new = total - hit;
                if cfg.chunked_prefill {
                    num_new = num_new.min(budget);
                } else if num_new > cfg.max_num_batched_tokens {
                    return NEVER;
                } else if num_new > budget {
                    return over_budget(cfg);
                }
                let free = u64::from(pool.num_free_blocks()) - self.outstanding;
                let evictable = BlockTable::num_evictable(pool, &self.hits);
                let first = blocks_for(hit + num_new, bs) - num_hits;
                let need = if cfg.policy == Policy::Reserve {
                    peak_blocks(cfg, s) - num_hits
                } else if cfg.full_prompt_gate {
                    blocks_for(gate_tokens(cfg, total), bs) - num_hits
                } else {
                    first
                };
                if need + evictable + watermark > free {
                    return 0;
                }
                self.new_blocks.clear();
                // The table will grow to the sequence's peak: reserve it once instead of doubling.
                let peak = peak_blocks(cfg, &self.slab[k]) as usize;
                let buffer = std::mem::take(&mut self.slab[k].table.blocks);
                let mut table = BlockTable::start(
                    pool,
                    bs,
                    &self.hits,
                    last_key,
                    num_new,
                    &mut self.new_blocks,
                    peak,
                    buffer,
                );
                let s = &mut self.slab[k];
                let phantom = self.defer_keys.then_some(s.private_from);
                s.sync_output();
                table.register_full_blocks_cached(pool, bs, &s.segs, &s.keys, phantom);
                s.table = table;
                s.keys.clear();
                s.keys_for = 0;
                if cfg.policy == Policy::Reserve {
                    // (at most the pool's blocks, a u32 count: admitted because they fit)
                    debug_assert!(u32::try_from(need - first).is_ok());
                    s.reserved_blocks = (need - first) as u32;
                    self.outstanding += u64::from(s.reserved_blocks);
                }
                s.num_computed = hit + num_new;
                self.note_admission(k, hit, total, 0);
                if self.log.is_some() {
                    self.log_admission(self.slab[k].row);
                }
                num_new
            }
        }
    }

    /// A waiting sequence's cached prefix (one full-attention group): its hits into `self.hits`, the key
    /// of the last one returned (the lookup's keys are kept in the sequence until its content grows).
    #[inline]
    pub(super) fn gpu_hits(&mut self, k: usize) -> Option<crate::BlockKey> {
        let bs = self.cfg.block_size;
        self.hits.clear();
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("paged only")
        };
        let s = &mut self.slab[k];
        let total = s.num_tokens();
        if pool.enable_caching() && s.keys_for != total {
            // A first admission cannot hit a block holding a segment private to this sequence:
            // nobody else has that content (it registered nothing yet), so stop hashing there.
            let limit = if s.admitted_before || !self.defer_keys {
                u64::MAX
            } else {
                s.private_from / bs
            };
            s.sync_output();
            BlockTable::lookup_keys(bs, &s.segs, total, limit, &mut s.keys);
            s.keys_for = total;
        }
        BlockTable::find_hits_cached(pool, &s.keys, &mut self.hits)
    }

    /// A paged admission's events: `admit`, a `prefix-hit` per block in `hits`, an `allocate` per new block
    /// (`new_blocks`). An ordinary admission's and a transfer's (`hold_for_transfer`) alike.
    pub(super) fn log_admission(&mut self, row: usize) {
        self.log(event::ADMIT, row, -1);
        for i in 0..self.hits.len() {
            let b = i64::from(self.hits[i].0);
            self.log(event::PREFIX_HIT, row, b);
        }
        self.log_allocations(row, event::ALLOCATE);
    }

    /// Counters and row columns of a paged admission that took `hit` cached tokens of `total` on the GPU
    /// and `cpu_hit` more from the CPU tier.
    pub(super) fn note_admission(&mut self, k: usize, hit: u64, total: u64, cpu_hit: u64) {
        let s = &mut self.slab[k];
        let recomputed = s.computed_at_preemption.saturating_sub(hit + cpu_hit);
        let c = &mut self.out.counters;
        c.prefix_hit_tokens += i128::from(hit);
        c.prompt_tokens_admitted += i128::from(total);
        if !s.admitted_before {
            // Hits on a first admission: sharing between requests, not resumes.
            s.admitted_before = true;
            c.first_hit_tokens += i128::from(hit);
            c.first_cpu_hit_tokens += i128::from(cpu_hit);
            c.first_prompt_tokens += i128::from(total);
        }
        c.recomputed_tokens += i128::from(recomputed);
        self.out.cached_tokens[s.row - self.out_base] += hit as i64;
        self.out.recomputed_tokens[s.row - self.out_base] += recomputed as i64;
    }

    /// The swap-in phase: swapped sequences and groups return FCFS before any new admission; returns
    /// the budget left. Admission of waiting sequences happens only once nothing is swapped out.
    pub(super) fn admit_swapped(&mut self, mut budget: u64) -> u64 {
        while let Some(&k) = self.swapped.front() {
            let members = std::mem::take(&mut self.slab[k].members);
            let seats = if members.is_empty() {
                self.slab[k].seats()
            } else {
                members.iter().map(|&m| self.slab[m].seats()).sum()
            };
            if budget == 0 || self.running.len() as u64 + seats > self.cfg.max_num_seqs {
                self.slab[k].members = members;
                break;
            }
            let num_new = if members.is_empty() {
                self.try_swap_in(k, budget)
            } else {
                self.try_swap_in_group(&members, budget)
            };
            if num_new == 0 {
                if self.running.is_empty() {
                    self.swapped.pop_front();
                    self.cpu_used -= self.slab[k].swapped_blocks;
                    if members.is_empty() {
                        self.reject_seq(k, reject::NEVER_SWAPPED_IN);
                    } else {
                        for &m in &members {
                            self.reject_seq(m, reject::NEVER_SWAPPED_IN);
                        }
                    }
                    continue;
                }
                self.slab[k].members = members;
                break;
            }
            self.swapped.pop_front();
            budget -= num_new;
            if members.is_empty() {
                self.running.push(k);
                self.scheduled.push((k, num_new));
                self.slab[k].adm_no = self.next_adm;
            } else {
                for (i, &m) in members.iter().enumerate() {
                    self.running.push(m);
                    self.scheduled.push((m, 1));
                    self.slab[m].adm_no = self.next_adm + i as u64;
                }
            }
            self.next_adm += ADM_STRIDE;
        }
        budget
    }

    /// The waiting phase: admits FCFS from the head while budget, seats and memory allow, appending each
    /// admitted sequence to `scheduled`. A head that cannot start blocks the rest (head-of-line), unless
    /// nothing runs at all: then it can never start and is rejected.
    pub(super) fn admit_waiting(&mut self, budget: u64) {
        let budget = self.admit_swapped(budget);
        if !self.swapped.is_empty() {
            return;
        }
        if self.tier.is_some() {
            self.tier_admit_plain(budget);
            return;
        }
        self.admit_loop::<false>(budget);
    }

    /// The waiting phase with a CPU tier, its usual heads (nothing held, a head the tier holds nothing
    /// for: `tier_has_nothing_for`) admitted by the plain loop; the first other one hands the rest of
    /// the phase to the tier's loop (`tier_admit_waiting`), which decides such heads alike.
    #[inline(always)]
    #[allow(clippy::inline_always)] // one call a request: measured (results/README.md §CPU tier)
    fn tier_admit_plain(&mut self, budget: u64) {
        if !self.tier_hot.held_empty {
            self.tier_admit_waiting(budget);
            return;
        }
        self.admit_loop::<true>(budget);
    }

    /// `admit_waiting`'s loop; `TIER`: with a CPU tier and nothing held (`tier_admit_plain`), whose
    /// rules for a head are the tier loop's (`tier_admit_waiting`).
    #[inline(always)]
    #[allow(clippy::inline_always)] // one call site each: the tier-off loop as it was
    fn admit_loop<const TIER: bool>(&mut self, mut budget: u64) {
        let cfg = self.cfg;
        while budget > 0 {
            let Some(k) = self.waiting_head() else {
                break;
            };
            if TIER {
                if self.running.len() as u64 >= cfg.max_num_seqs {
                    break;
                }
                if !self.tier_has_nothing_for(k) {
                    // (nothing skipped: a tier refuses `skip_over_budget`)
                    debug_assert!(self.skipped.is_empty());
                    self.tier_admit_waiting(budget);
                    return;
                }
                let s = &mut self.slab[k];
                s.next_store = 0;
                // (no record in the tier: its first store looks for none, `CpuTier::store_own`)
                s.tier_own = crate::cpu_tier::OWN_FRESH;
            } else if self.running.len() as u64 + self.slab[k].seats() > cfg.max_num_seqs {
                if self.running.is_empty() {
                    self.waiting.pop_front();
                    self.reject_seq(k, reject::NEVER_ADMITTED);
                    continue;
                }
                break;
            }
            let num_new = self.try_admit(k, budget);
            if num_new == NEVER {
                self.waiting.pop_front();
                self.reject_seq(k, reject::EXCEEDS_STEP_BUDGET);
                continue;
            }
            if !TIER && num_new == SKIP {
                self.waiting.pop_front();
                self.skipped.push(k);
                continue;
            }
            if num_new == 0 {
                // (A prefill replica's blocks held for transfers come back; with a tier, nothing is
                // held here: the tier loop's test, a finisher's behind the batch in flight included.)
                if self.running.is_empty()
                    && (TIER || self.sends.as_ref().is_none_or(|s| s.sending.is_empty()))
                    && !(TIER && self.tier.as_ref().is_some_and(|t| t.batches.holds_blocks()))
                {
                    self.waiting.pop_front();
                    self.reject_seq(k, reject::NEVER_ADMITTED);
                    continue;
                }
                break; // head-of-line blocking: a waiting request never preempts
            }
            self.waiting.pop_front();
            if TIER {
                // `tier_admitted` of a head the tier holds nothing for (`tier_has_nothing_for`: not
                // remote, no hybrid tables), inline: its flags, and its blocks watched while a store
                // may fence them. Keep in step with `tier_admitted` (offload/waiting.rs).
                let s = &mut self.slab[k];
                debug_assert!(!s.remote && s.hybrid.is_none());
                s.held = false;
                s.prefilling = s.num_computed < s.num_tokens();
                if self.tier_hot.pending
                    && self
                        .tier
                        .as_deref()
                        .is_some_and(super::offload::Tier::may_fence)
                {
                    self.tier_watch_blocks(k);
                }
            }
            self.running.push(k);
            self.scheduled.push((k, num_new));
            let s = &mut self.slab[k];
            s.adm_no = self.next_adm;
            self.next_adm += ADM_STRIDE;
            if self.out.first_scheduled[s.row - self.out_base] < 0 {
                self.out.first_scheduled[s.row - self.out_base] = self.t;
            }
            budget -= num_new;
            if self.cancelled() {
                break; // after an admission: a blocked head costs no check
            }
        }
        if TIER {
            return; // (`held_empty` stays true: nothing held, as the tier loop would leave it)
        }
        // vLLM 0.9.2-0.11.2 put skipped requests back at the head in reverse order (`prepend_request`
        // into a queue, then `prepend_requests`, which reversed it once more): the last skipped first.
        for &k in &self.skipped {
            self.waiting.push_front(k);
        }
        self.skipped.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EngineInput, EngineOutput, reject, run};
    use super::*;
    use std::sync::atomic::AtomicBool;

    const MS: i64 = 1_000_000_000;

    /// Private prompts all waiting at 0, outputs as given, in 11 blocks of 16 (10 usable).
    fn simulate(
        prompt: &[i64],
        target: &[i64],
        watermark: u64,
        while_running: bool,
    ) -> EngineOutput {
        let n = prompt.len();
        let output_seg: Vec<u64> = (0..n as u64).map(|i| (1 << 63) + i).collect();
        let offsets: Vec<i64> = (0..=n as i64).collect();
        let ids: Vec<u64> = (1..=n as u64).collect();
        let inp = EngineInput {
            arrival_ps: &vec![0; n],
            prompt_len: prompt,
            target,
            max_gen: target,
            fork_parent: &vec![-1; n],
            output_seg: &output_seg,
            seg_offsets: &offsets,
            segment_id: &ids,
            segment_len: prompt,
        };
        let cfg = EngineConfig {
            watermark_blocks: watermark,
            watermark_while_running: while_running,
            ..EngineConfig::for_tests(11, 16)
        };
        run(inp, &cfg, 0, false, &AtomicBool::new(false)).unwrap()
    }

    /// A 160-token prompt takes all 10 blocks: held back at every admission (vLLM v0) the watermark's
    /// block makes it unstartable (rejected, reason 5); held only while a request runs (vLLM v1 ≥ 0.24)
    /// the idle engine admits it.
    #[test]
    fn an_idle_engine_pays_no_watermark_while_running() {
        let always = simulate(&[160], &[1], 1, false);
        assert_eq!(always.reject_reason, [reject::NEVER_ADMITTED as i8]);
        let idle = simulate(&[160], &[1], 1, true);
        assert_eq!(idle.reject_reason, [0]);
        assert_eq!(idle.finish, [MS]);
    }

    /// A (60 tokens, 4 blocks, output 4) enters the idle engine; B (96 tokens, 6 blocks) is tried after A
    /// joined the running list in the same step, so it pays the watermark (6 + 1 > 6) and waits for A's
    /// finish at 4 ms under both rules; without a watermark both start at 0.
    #[test]
    fn the_second_admission_of_a_step_pays_the_watermark() {
        for while_running in [true, false] {
            let paid = simulate(&[60, 96], &[4, 1], 1, while_running);
            assert_eq!(paid.first_scheduled, [0, 4 * MS], "{while_running}");
            assert_eq!(paid.finish, [4 * MS, 5 * MS], "{while_running}");
        }
        let free = simulate(&[60, 96], &[4, 1], 0, true);
        assert_eq!(free.first_scheduled, [0, 0]);
        assert_eq!(free.finish, [4 * MS, MS]);
    }
}
