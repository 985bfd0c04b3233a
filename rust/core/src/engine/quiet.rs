//! Whether what a router reads of a stepped replica can be read at a horizon without stepping there
//! (`Engine::quiet_through`, DESIGN.md §The stepped replica, "Stepping only when the view can change"):
//! the running sequences' neutral steps read in closed form, the rows that may join in them, and the
//! memo of the steps found neutral, kept until the next advance.

use super::{Engine, MAX_TIME_PS, Memory, Policy, TimeModel, first_start_at_or_after};
use crate::block_table::{blocks_for, div_bs};

/// What a router reads of a replica besides its load (waiting + running + in flight), which every
/// router that reads state reads: the KV counts (`kv_used`), the prefix map (leading hits). Decides
/// which events leave its view unchanged (`Engine::quiet_through`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterReads {
    pub kv: bool,
    pub keys: bool,
}

/// `quiet_through`'s findings at one step, kept until the next advance: the `k` steps from `step` on
/// leave what a router reading `reads` sees as it is but for the sequences finishing in them, at the
/// steps `finishes` (sorted; ticks only, where steps last the same whatever the batch), and every
/// horizon up to `until` (the start of step `step + k`) is reached by steps among them; the rows
/// pushed before row `rows` (absolute) that have not joined may join in them (`quiet_cover`).
#[derive(Debug)]
pub(crate) struct QuietMemo {
    pub(super) step: u64,
    reads: RouterReads,
    k: u64,
    until: i64,
    finishes: Vec<u64>,
    /// The rows not joined yet that are covered: those before this one.
    rows: usize,
    /// The most blocks the `k` steps pop: the running sequences' (exact) and a bound for each row
    /// covered.
    pops: u64,
    /// Rows may join in the `k` steps without changing the load (`quiet_joins`).
    joins: bool,
}

/// Steps `quiet_through` tries to vouch for past the horizon asked (a fleet's next arrivals come soon
/// after it). 32 cost 1.5 % more instructions than 128 (callgrind, as below) and missed a 2 MiB last
/// level as often (cachegrind).
const QUIET_AHEAD: u64 = 128;
/// `QUIET_AHEAD` while rows join: the replica lags behind the fleet's clock, and each look costs one
/// pass over its running list and the rows waiting to join (callgrind, `python -m bench.cluster_profile
/// 100000 prefix-affinity`: `run_cluster` takes 1,738, 1,676, 1,663 and 1,791 M instructions at 32,
/// 64, 128 and 256 steps ahead; the 16 single runs 1,229 M).
const QUIET_AHEAD_JOINING: u64 = 128;
const QUIET_MAX: u64 = 1 << 12;

impl QuietMemo {
    pub(crate) fn new() -> Self {
        QuietMemo {
            step: u64::MAX,
            reads: RouterReads::default(),
            k: 0,
            until: i64::MIN,
            finishes: Vec::new(),
            rows: 0,
            pops: 0,
            joins: false,
        }
    }
}

impl Engine<'_> {
    /// Whether the signals `reads` names and the load (every router that reads state reads it) can be
    /// read at `horizon` without stepping there: `Some((until, running))` when, at every horizon from
    /// `horizon` up to `until`, the replica's load (waiting + running + in flight) is its waiting count
    /// now plus `running` plus its rows in flight now, and its KV counts (where read) and prefix map
    /// (where read) are those of now; `None` when it must step. Taking those steps later, in one
    /// piece, is exact and cheaper than cutting the lockstep run at every arrival of the fleet. Valid
    /// while no row is pushed (a push may change it: the driver asks again).
    ///
    /// In lockstep, with nothing waiting or swapped out, every running sequence's state at a later
    /// step follows from its base (`Seq::base_step`) until something happens that is not a plain
    /// decode: so `quiet_scan` reads, in closed form, what each sequence does in the steps before the
    /// horizon (and a few past it): the blocks it pops, whether it fills a block that would get a
    /// mapped key, and the step it finishes. Those steps are *neutral* when no block pop can fail (the
    /// free blocks cover them all: no preemption; `one_free_block` keeps a margin), the popped blocks
    /// (the free queue's first ones, frees of finishing sequences joining at the head or the tail
    /// only) carry no mapped key and no mapped key is registered (where the router reads the prefix
    /// map), nothing is popped nor freed (where it reads the KV counts), and finishes, which lower the
    /// running count, come only where steps last the same whatever the batch (ticks), so the steps'
    /// start times stay known.
    ///
    /// Rows pushed but not joined, all arrived by the horizon, may join in those steps (`quiet_cover`):
    /// a row that joins, waits or is admitted moves between in flight, waiting and running, which
    /// leaves the load as it is, as long as no one finishes but the running sequences counted, none is
    /// rejected, and none is preempted (the running sequences' steps then stay what they were: they
    /// come first in the running list, sorted by admission, and each takes its one token of the
    /// budget before any admission's).
    pub(crate) fn quiet_through(&mut self, horizon: i64, reads: RouterReads) -> Option<(i64, u64)> {
        let running = self.running.len() as u64;
        let arrivals = self.inp.arrival_ps;
        let i = self.nxt - self.row_base;
        let next_row = arrivals.get(i).copied().unwrap_or(i64::MAX);
        if self.t >= horizon {
            // `advance_until` would do nothing up to the clock (and the rows in flight stay so up
            // to the next one's arrival).
            return Some((self.t.min(next_row - 1).max(horizon), running));
        }
        // The rows in flight at the horizon: `i..later` (rows from `later` on arrive after it, and the
        // vouch ends before the first does).
        let later = if arrivals.last().is_none_or(|&a| a <= horizon) {
            arrivals.len()
        } else {
            i + arrivals[i..].partition_point(|&a| a <= horizon)
        };
        let (cover, cap) = (
            self.row_base + later,
            arrivals.get(later).map_or(i64::MAX, |&a| a - 1),
        );
        if cover > self.nxt && !self.joins_allowed(reads) {
            return None; // rows join before the horizon
        }
        let m = &self.quiet;
        let known = m.step == self.step
            && m.reads == reads
            && horizon <= m.until
            && (m.rows >= cover || self.quiet_cover(cover));
        if !known && !self.quiet_scan(horizon, reads, cover) {
            return None;
        }
        let m = &self.quiet;
        let mut until = m.until;
        let mut gone = 0;
        if !m.finishes.is_empty() {
            // Ticks: step j from now starts at t + j dt; the steps starting before the horizon are
            // the first ceil((horizon - t) / dt).
            let TimeModel::Ticks { iteration_ps: dt } = self.cfg.time else {
                unreachable!("finishes are vouched for under ticks only");
            };
            let k = ((horizon - self.t) as u64).div_ceil(dt);
            gone = m.finishes.partition_point(|&f| f < self.step + k);
            if let Some(&f) = m.finishes.get(gone) {
                // Step f starts within the memo's span, before `until` (no overflow).
                until = until.min(self.t + ((f - self.step) * dt) as i64);
            }
        }
        Some((until.min(cap), running - gone as u64))
    }

    /// `quiet_through`'s look at the running sequences: vouches for the steps before `horizon` and up
    /// to `QUIET_AHEAD` past them, or else those before it only; with rows joining (those not joined
    /// before absolute row `cover`), for `QUIET_AHEAD_JOINING` past them or not at all; false if the
    /// steps are not neutral.
    #[inline(never)]
    fn quiet_scan(&mut self, horizon: i64, reads: RouterReads, cover: usize) -> bool {
        self.quiet.step = u64::MAX;
        if !self.lockstep
            || self.running.is_empty()
            || !self.nothing_waits()
            || !self.swapped.is_empty()
            || self.swap_blocks_step != 0
            || self.ts_every != 0
            || self.outstanding != 0
            || self.forks
            || self.one_free_block_binds()
        {
            return false;
        }
        // The steps starting before the horizon: 0..need. Neutral steps keep the batch (but for
        // finishes, under ticks), so step j lasts `dt0 + ddt j` and starts at `j dt0 + ddt j (j-1)/2`.
        let (dt0, ddt) = self.quiet_step_lengths();
        let gap = i128::from(horizon - self.t);
        let start = |j: u64| -> i128 {
            let j = i128::from(j);
            j * dt0 + ddt * ((j * (j - 1)) >> 1)
        };
        let need = if ddt == 0 {
            if dt0 <= 0 {
                return false;
            }
            u64::try_from((gap + dt0 - 1) / dt0).unwrap_or(u64::MAX)
        } else {
            first_start_at_or_after!(1u64, QUIET_MAX + 1, gap, start) // start(0) < gap
        };
        if need > QUIET_MAX {
            return false;
        }
        let first = self.nxt;
        // With rows joining, a vouch that cannot reach well past the horizon is not worth its scans:
        // the replica, lagging behind, steps instead (in one piece, through their admissions).
        let spans = if cover > first {
            &[need + QUIET_AHEAD_JOINING][..]
        } else {
            &[need + QUIET_AHEAD, need][..]
        };
        if cover > first && self.join_blocks(first, cover, spans[0], reads).is_none() {
            // `quiet_cover` would refuse them whatever the running sequences do: not worth a pass
            // over those (most looks that fail fail here: a short row joining).
            return false;
        }
        for &k in spans {
            let end = i128::from(self.t) + start(k);
            if end > i128::from(MAX_TIME_PS) {
                continue;
            }
            let Some(pops) = self.quiet_steps(k, reads) else {
                continue;
            };
            if !self.quiet_memory(pops, reads) {
                continue;
            }
            let joins = self.quiet_joins(reads);
            let m = &mut self.quiet;
            (m.step, m.reads, m.k, m.until) = (self.step, reads, k, end as i64);
            (m.rows, m.pops, m.joins) = (first, pops, joins);
            if cover <= first || self.quiet_cover(cover) {
                return true;
            }
            self.quiet.step = u64::MAX;
        }
        false
    }

    /// Whether the `k` steps from now are neutral for a router reading `reads` as far as the running
    /// sequences go (see `quiet_through`): the blocks they pop (`None` if not neutral), writing the
    /// steps at which sequences finish into `self.quiet.finishes` (sorted).
    fn quiet_steps(&mut self, span: u64, reads: RouterReads) -> Option<u64> {
        let (step, bs) = (self.step, self.cfg.block_size);
        let may_finish = matches!(self.cfg.time, TimeModel::Ticks { .. }) && !reads.kv;
        let paged = self.cfg.policy.is_paged();
        let keys = reads.keys && paged && self.cfg.enable_prefix_caching;
        let mut finishes = std::mem::take(&mut self.quiet.finishes);
        finishes.clear();
        let mut pops = 0u64;
        let mut neutral = true;
        for &slot in &self.running {
            let seq = &self.slab[slot];
            if !seq.lazy {
                neutral = false;
                break;
            }
            let since = step - seq.base_step;
            let (c, generated) = (seq.base_c + since, seq.base_g + since); // computed and generated now
            // It samples its last token in step `step + left - 1` (and frees its blocks after it).
            let left = seq.target - generated;
            let steps = if left <= span {
                if !may_finish {
                    neutral = false;
                    break;
                }
                finishes.push(step + left - 1);
                left
            } else {
                span
            };
            if !paged {
                continue;
            }
            // Its steps compute tokens c .. c + steps; one at a block boundary pops a block.
            let popped = div_bs(c + steps - 1, bs) + 1 - div_bs(c + bs - 1, bs);
            if popped > 0 && reads.kv {
                neutral = false;
                break;
            }
            pops += popped;
            if keys {
                // Blocks full by then beyond the keyed ones get keys at its events: phantom ones only
                // past its real keys or (deferred keys) from its private content on.
                let table = &seq.table;
                let phantom_only = table.num_keyed_blocks > table.num_real_keys
                    || (self.defer_keys && table.num_keyed_blocks >= div_bs(seq.private_from, bs));
                if div_bs(c + steps, bs) > table.num_keyed_blocks && !phantom_only {
                    neutral = false;
                    break;
                }
            }
        }
        finishes.sort_unstable();
        self.quiet.finishes = finishes;
        neutral.then_some(pops)
    }

    /// Whether the running sequences' `pops` blocks are there (no preemption, no full step under
    /// `one_free_block`) and, where the router reads the prefix map, none of them loses a mapped key.
    fn quiet_memory(&self, pops: u64, reads: RouterReads) -> bool {
        if pops == 0 {
            return true;
        }
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("only paged sequences pop blocks");
        };
        let free = u64::from(pool.num_free_blocks());
        if pops > free || (self.cfg.one_free_block && free - pops <= self.running.len() as u64) {
            return false; // a block might not be there: preemption, or a full step
        }
        if reads.keys && self.caches_prefixes() && pool.maps_keys() {
            // The blocks popped are the free queue's first ones (blocks freed meanwhile join at the
            // head, taken first, or at the tail, not reached): none may lose a mapped key.
            let mut block = None;
            for _ in 0..pops {
                block = pool.next_free(block);
                if pool.is_mapped(block.expect("enough free blocks")) {
                    return false;
                }
            }
        }
        true
    }

    /// Whether rows may join in the steps `quiet_steps` found neutral (the memo's) without changing
    /// the load (see `quiet_through`): ticks (the batch does not change the steps' lengths, so the
    /// running sequences' finishes stay where they are); policy `vllm` (no promise held for later,
    /// no region placed); no `one_free_block`; the KV counts unread (an admission pops blocks); and a
    /// running sequence that runs through every one of those steps (no step is idle, and a waiting
    /// head is never rejected for want of a running sequence).
    fn quiet_joins(&self, reads: RouterReads) -> bool {
        self.joins_allowed(reads) && self.quiet.finishes.len() < self.running.len()
    }

    /// `quiet_joins`' conditions on the config and the router.
    fn joins_allowed(&self, reads: RouterReads) -> bool {
        matches!(self.cfg.time, TimeModel::Ticks { .. })
            && self.cfg.policy == Policy::Vllm
            && !self.cfg.one_free_block
            && !reads.kv
    }

    /// Extends the memo's vouch to the rows not joined before absolute row `to` (pushed since it was
    /// taken): each joins (or waits) in its steps without changing the load, and their blocks added to
    /// the steps' pops still fit the free blocks. False (the memo unchanged) if one might not.
    fn quiet_cover(&mut self, to: usize) -> bool {
        let m = &self.quiet;
        if !m.joins {
            return false;
        }
        let Some(blocks) = self.join_blocks(m.rows, to, m.k, m.reads) else {
            return false;
        };
        let pops = m.pops + blocks;
        if let Memory::Paged(pool) = &self.mem
            && pops > u64::from(pool.num_free_blocks())
        {
            return false;
        }
        (self.quiet.rows, self.quiet.pops) = (to, pops);
        true
    }

    /// The most blocks the rows from absolute row `from` to `to` hold by the end of the next `k`
    /// steps, each joining (or waiting) in them without changing the load (`quiet_join_blocks`), or
    /// `None` if one might not: paged memory only and, where the router reads the prefix map, an
    /// empty map (no hit, no eviction) that the rows add no key to (deferred keys, and no full block
    /// of a prompt before its private content). `quiet_cover` adds them to the steps' pops; a look
    /// asks first, before its pass over the running sequences.
    fn join_blocks(&self, from: usize, to: usize, k: u64, reads: RouterReads) -> Option<u64> {
        let Memory::Paged(pool) = &self.mem else {
            return None;
        };
        let keys = reads.keys && self.caches_prefixes();
        if keys && (!self.defer_keys || pool.maps_keys()) {
            return None;
        }
        (from..to)
            .map(|row| self.quiet_join_blocks(row - self.row_base, k, keys))
            .sum()
    }

    /// For row `i` of the input view joining in the next `k` steps: the most blocks it can hold by
    /// their end, or `None` if it might be rejected (at arrival, or chunked prefill off and a prompt
    /// over the step's budget), finish within them (one token a step at most, from the first step
    /// after its arrival) or, with `keys`, register a real key (a full block before its private
    /// content).
    fn quiet_join_blocks(&self, i: usize, k: u64, keys: bool) -> Option<u64> {
        let inp = &self.inp;
        let cfg = self.cfg;
        // Step j from now starts at t + j dt (ticks, and a sequence runs through them all): the row
        // joins at the first one starting at or after its arrival, j0, at the earliest, so by the end
        // of step k - 1 it has computed at most its prompt and k - 1 - j0 tokens more, and it
        // samples its last token no earlier than in step j0 + target - 1.
        let TimeModel::Ticks { iteration_ps: dt } = cfg.time else {
            unreachable!("rows join in a vouch under ticks only (`joins_allowed`)");
        };
        let j0 = inp.arrival_ps[i]
            .checked_sub(self.t)
            .filter(|&late| late > 0)
            .map_or(0, |late| (late as u64).div_ceil(dt));
        if j0 >= k {
            return Some(0); // it joins after them
        }
        let k = k - j0;
        let (prompt, target) = (inp.prompt_len[i] as u64, inp.target[i] as u64);
        // No fork-cow sample is met: a workload with forks never vouches (`quiet_scan`).
        if self.row_rejected_at_arrival(self.row_base + i).0 != 0
            || target <= k
            || (!cfg.chunked_prefill && prompt > cfg.max_num_batched_tokens)
            || (keys && div_bs(self.private_from[i], cfg.block_size) > 0)
        {
            return None;
        }
        Some(blocks_for(prompt + k.min(target - 1), cfg.block_size))
    }
}
