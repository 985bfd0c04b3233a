//! The engine's side of a stepped replica (`crate::cluster::replica`, DESIGN.md §The stepped replica):
//! an engine over owned input columns that grow one row (or fork-cow group) at a time, advanced to a
//! horizon, and the signals a router reads from it.

use std::sync::atomic::AtomicBool;

use super::{
    Engine, EngineConfig, EngineInput, EngineOutput, MAX_TIME_PS, Memory, Policy, Result,
    TimeModel, offload,
};
use crate::BlockKey;
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
    step: u64,
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
/// A prefill replica's finished requests that hold their blocks until their transfers end (DESIGN.md
/// §Prefill/decode disaggregation, step 7, vLLM's delayed free): `sending` maps a row to its slab slot
/// (its table and slot kept); `ends` holds `(end, row)` of those whose end the decode side decided.
#[derive(Debug, Default)]
pub(crate) struct Sends {
    pub(super) sending: crate::block_pool::RowMap<usize>,
    ends: std::collections::BinaryHeap<std::cmp::Reverse<(i64, usize)>>,
    /// The last step scheduled nothing and changed nothing: the replica waits for a transfer's end.
    pub(super) stalled: bool,
    /// Rows finished or rejected since the driver last took them (`take_done_rows`).
    pub(super) done: Vec<usize>,
    /// Finished requests hold their blocks (paged; a contiguous replica frees at once).
    pub(super) hold: bool,
}

impl Sends {
    /// Whether a held request's transfer ended at or before `t`.
    #[inline]
    pub(super) fn due(&self, t: i64) -> bool {
        self.ends.peek().is_some_and(|e| e.0.0 <= t)
    }

    /// Where a stalled replica at `t` jumps: the earliest end decided (not before `t`) or the next
    /// arrival, whichever is first; None: neither is known.
    pub(super) fn stall_target(&self, t: i64, arrival: Option<i64>) -> Option<i64> {
        let end = self.ends.peek().map(|e| e.0.0.max(t));
        match (end, arrival) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest end decided (`i64::MAX`: none).
    #[inline]
    pub(super) fn next_end(&self) -> i64 {
        self.ends.peek().map_or(i64::MAX, |e| e.0.0)
    }
}

/// The fewest rows the output columns grow by (`cover_output_rows`).
const OUTPUT_ROWS_MIN: usize = 1024;

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

impl<'a> Engine<'a> {
    /// An engine with no rows yet over `view` (empty), taking `defer_keys` (no prompt of the whole
    /// workload quotes an output) and `forks` (the workload holds fork-cow samples) from its driver,
    /// which also hands each row's `private_from` (`push_private_from`).
    pub(crate) fn new_stepped(
        view: EngineInput<'a>,
        cfg: &'a EngineConfig,
        defer_keys: bool,
        forks: bool,
        cancel: Option<&AtomicBool>,
    ) -> Result<Self> {
        let mut e = Self::new_cancellable(view, cfg, cancel)?;
        e.defer_keys = defer_keys;
        e.private_from = Vec::new();
        e.fill_events = cfg.policy.is_paged() && cfg.enable_prefix_caching && !defer_keys;
        e.forks = forks;
        e.final_input = true;
        Ok(e)
    }

    /// Whether rows carry a `private_from` (deferred keys, paged, caching on), as in `new`.
    pub(crate) fn reads_private_from(&self) -> bool {
        self.defer_keys && self.cfg.enable_prefix_caching && self.cfg.policy.is_paged()
    }

    /// The rows' `private_from`, one per row of the input view (from `row_base` on).
    pub(crate) fn private_from_mut(&mut self) -> &mut Vec<u64> {
        &mut self.private_from
    }

    /// Points the engine at its owner's columns again (after they grew or were compacted): `inp`
    /// holds the rows from `row_base` on.
    pub(crate) fn set_input(&mut self, inp: EngineInput<'a>, row_base: usize) {
        self.inp = inp;
        self.row_base = row_base;
    }

    /// Makes the output columns hold the rows before absolute row `rows` (every row pushed so far;
    /// they hold rows from `out_base` on). They grow a run of rows at a time, by half their length at
    /// least: a fleet's replica gets its rows one at a time, and ten one-row pushes a row cost more in
    /// instructions and in cache lines held than the engine's writes to them (results/README.md
    /// §Cluster speed). `take_output` cuts them to the rows pushed.
    pub(crate) fn cover_output_rows(&mut self, rows: usize) {
        let (need, have) = (rows - self.out_base, self.out.status.len());
        if need > have {
            self.out
                .extend_rows((need - have).max(have / 2).max(OUTPUT_ROWS_MIN));
        }
    }

    /// The first row the output columns hold (rows before it were moved out, `move_output_front`).
    pub(crate) fn out_base(&self) -> usize {
        self.out_base
    }

    /// Moves the output of the `to.len()` rows from `out_base` on, every one of them done (never
    /// written again), into `dst`: the `j`-th to row `to[j]` there.
    pub(crate) fn move_output_front(&mut self, to: &[usize], dst: &mut EngineOutput) {
        debug_assert!((0..to.len()).all(|j| self.row_done(self.out_base + j)));
        self.out.move_front_into(to, dst);
        self.out_base += to.len();
    }

    /// As `move_output_front`, only the rows whose status `keep` accepts reaching `dst`.
    pub(crate) fn move_output_front_if(
        &mut self,
        to: &[usize],
        dst: &mut EngineOutput,
        keep: impl Fn(i8) -> bool,
    ) {
        debug_assert!((0..to.len()).all(|j| self.row_done(self.out_base + j)));
        self.out.move_front_into_if(to, dst, keep);
        self.out_base += to.len();
    }

    /// Runs every step that starts strictly before `horizon` (and nothing else), reading `cancel`.
    pub(crate) fn advance_until(&mut self, horizon: i64, cancel: &'a AtomicBool) -> Result<()> {
        self.quiet.step = u64::MAX;
        self.cancel = Some(cancel);
        self.horizon = horizon;
        let result = self.advance();
        self.horizon = i64::MAX;
        self.cancel = None;
        result
    }

    /// Runs to the end and sums the counters.
    pub(crate) fn finish_stepped(&mut self, cancel: &'a AtomicBool) -> Result<()> {
        self.cancel = Some(cancel);
        self.horizon = i64::MAX;
        let result = self.advance();
        self.cancel = None;
        result?;
        if self.sends.as_ref().is_some_and(|s| s.stalled) {
            return Err(crate::KvError::Internal(format!(
                "no progress at time {} ps",
                self.t
            )));
        }
        self.finish_counters();
        Ok(())
    }

    /// The output columns of the rows from `out_base` to absolute row `rows` (every row pushed) and
    /// the counters, once finished.
    pub(crate) fn take_output(&mut self, rows: usize) -> EngineOutput {
        let mut out = std::mem::take(&mut self.out);
        out.truncate_rows(rows - self.out_base);
        out
    }

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
            let (mut lo, mut hi) = (1u64, QUIET_MAX + 1); // start(lo - 1) < gap; the answer <= hi
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if start(mid) >= gap {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            lo
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

    /// Whether `row` is finished or rejected.
    #[inline]
    pub(crate) fn row_done(&self, row: usize) -> bool {
        self.out.status[row - self.out_base] >= 0
    }

    /// The next row to join (rows before it joined, or are fork-cow samples).
    #[inline]
    pub(crate) fn next_row(&self) -> usize {
        self.nxt
    }

    /// Makes this engine a decode replica of a disaggregated fleet (DESIGN.md §Prefill/decode
    /// disaggregation): the held queue's machinery with transfers over an inbound link of `latency_ps`
    /// plus `ps_per_block` a block. The engine has no CPU tier (the caller refuses one).
    pub fn set_pd_link(&mut self, latency_ps: u64, ps_per_block: u64) {
        debug_assert!(
            self.tier.is_none(),
            "a CPU tier with a prefill pool is refused"
        );
        self.tier = Some(Box::new(offload::Tier::connector(
            latency_ps,
            ps_per_block,
            self.cfg.block_size,
        )));
    }

    /// Makes this engine a prefill replica of a disaggregated fleet: it reports its rows done
    /// (`take_done_rows`) and, with `hold`, a finished request keeps its blocks until `send_ended` gives
    /// its transfer's end and an observation point reaches it (`free_sent`).
    pub fn set_hold_sends(&mut self, hold: bool) {
        self.sends = Some(Box::new(Sends {
            hold,
            ..Sends::default()
        }));
    }

    /// The decode side decided the transfer of finished row `row` (held): it ends at `end`.
    pub fn send_ended(&mut self, row: usize, end: i64) {
        let sends = self.sends.as_deref_mut().expect("a prefill replica");
        if sends.hold {
            // (A replica that does not hold them, contiguous, freed them at the finish.)
            debug_assert!(
                sends.sending.contains_key(&row),
                "row {row} holds its blocks"
            );
            sends.ends.push(std::cmp::Reverse((end, row)));
        }
    }

    /// An observation point at `t`: every held request whose transfer ended at or before `t` frees its
    /// blocks, in order of end, then row.
    #[inline(never)]
    pub(super) fn free_sent(&mut self) {
        let t = self.t;
        loop {
            let sends = self.sends.as_deref_mut().expect("a prefill replica");
            if !sends.due(t) {
                break;
            }
            let std::cmp::Reverse((_, row)) = sends.ends.pop().expect("one is due");
            let k = sends.sending.remove(&row).expect("a held request");
            self.release(k);
            self.remove(k);
        }
    }

    /// A prefill replica: appends to `dst` the rows finished or rejected since the last call.
    pub fn take_done_rows(&mut self, dst: &mut Vec<usize>) {
        if let Some(sends) = self.sends.as_deref_mut()
            && !sends.done.is_empty()
        {
            dst.append(&mut sends.done);
        }
    }

    /// Whether the engine waits for a transfer: a CPU tier's or connector's, or a prefill replica's.
    #[inline]
    pub(super) fn stalled(&self) -> bool {
        self.tier.as_ref().is_some_and(|t| t.stalled)
            || self.sends.as_ref().is_some_and(|s| s.stalled)
    }

    /// `resolve_stall`, or a prefill replica's `resolve_sends_stall`.
    pub(super) fn resolve_any_stall(&mut self, arrival: Option<i64>, horizon: i64) -> Result<bool> {
        if self.sends.as_ref().is_some_and(|s| s.stalled) {
            return Ok(self.resolve_sends_stall(arrival, horizon));
        }
        self.resolve_stall(arrival, horizon)
    }

    /// A prefill replica's observation point at `t`, the start of a step: frees what is due.
    #[inline]
    pub(super) fn observe_sends(&mut self) {
        if self.sends.as_ref().is_some_and(|s| s.due(self.t)) {
            self.free_sent();
        }
    }

    /// A quiet span's bound `horizon`, or a prefill replica's next transfer end decided if earlier
    /// (its blocks are freed at the step starting there).
    #[inline]
    pub(super) fn sends_bound(&self, horizon: i64) -> i64 {
        self.sends
            .as_ref()
            .map_or(horizon, |s| s.next_end().min(horizon))
    }

    /// Whether a prefill replica waits for its held blocks' transfers to end.
    pub fn sends_stalled(&self) -> bool {
        self.sends.as_ref().is_some_and(|s| s.stalled)
    }

    /// A step that scheduled nothing and changed nothing: a prefill replica holding blocks for transfers
    /// waits for them to end (true); any other engine would repeat forever (false).
    pub(super) fn sends_stall(&mut self) -> bool {
        match self.sends.as_deref_mut() {
            Some(sends) if !sends.sending.is_empty() => {
                sends.stalled = true;
                true
            }
            _ => false,
        }
    }

    /// A stalled prefill replica jumps to the earliest transfer end decided or the next arrival, if
    /// before `horizon` (true); false: it waits for the driver (neither known, or not before it).
    pub(super) fn resolve_sends_stall(&mut self, arrival: Option<i64>, horizon: i64) -> bool {
        let sends = self.sends.as_deref_mut().expect("a prefill replica");
        match sends.stall_target(self.t, arrival) {
            Some(x) if x < horizon => {
                self.t = x;
                sends.stalled = false;
                true
            }
            _ => false,
        }
    }

    /// A decode replica: appends to `dst` the (row, transfer end) of the remote requests decided since
    /// the last call.
    pub fn take_sends_decided(&mut self, dst: &mut Vec<(usize, i64)>) {
        if let Some(tier) = self.tier.as_deref_mut()
            && !tier.sends_decided.is_empty()
        {
            dst.append(&mut tier.sends_decided);
        }
    }

    /// The instant this engine's next step starts (an idle jump's or a stall's included) given the rows
    /// pushed so far; None if it has nothing left to do.
    pub fn next_step_start(&self) -> Option<i64> {
        let (arrivals, base) = (self.inp.arrival_ps, self.row_base);
        let end = base + arrivals.len();
        let next = (self.nxt < end).then(|| arrivals[self.nxt - base]);
        if next.is_some_and(|a| a <= self.t) {
            return Some(self.t);
        }
        if let Some(tier) = self.tier.as_deref()
            && tier.stalled
        {
            return match (self.next_transfer(), next) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if let Some(sends) = self.sends.as_deref()
            && sends.stalled
        {
            return sends.stall_target(self.t, next);
        }
        let idle = self.running.is_empty() && self.nothing_waits() && self.swapped.is_empty();
        if !idle
            || self
                .tier
                .as_deref()
                .is_some_and(|t| !t.finished_last.is_empty())
        {
            return Some(self.t);
        }
        next
    }

    /// Row `row` (pushed, not joined yet) is a remote request: a prefill replica computed its prompt.
    pub fn mark_remote(&mut self, row: usize) {
        self.remote_rows.insert(row);
    }

    /// Row `row`'s status (-1 while in flight), first schedule and finish (ps; -1 for none yet); its
    /// output must still be held (no `move_output_front` past it).
    pub fn row_outcome(&self, row: usize) -> (i8, i64, i64) {
        let i = row - self.out_base;
        if i >= self.out.status.len() {
            return (-1, -1, -1); // not stepped since it was pushed: in flight
        }
        (
            self.out.status[i],
            self.out.first_scheduled[i],
            self.out.finish[i],
        )
    }

    /// Sequences waiting to be (re)admitted: the waiting queue, rows joined but not built yet, the
    /// sequences of the swapped-out units (each sample of a swapped group) and those holding blocks for
    /// a load from the CPU tier.
    pub(crate) fn num_waiting(&self) -> u64 {
        let swapped: usize = self
            .swapped
            .iter()
            .map(|&k| self.slab[k].members.len().max(1))
            .sum();
        let held = self.tier.as_ref().map_or(0, |t| t.held.len());
        (self.waiting.len() + self.fresh.len() + swapped + held) as u64
    }

    /// Sequences in the running list.
    pub(crate) fn num_running(&self) -> u64 {
        self.running.len() as u64
    }

    /// Rows pushed with arrival at or before `t` that have not joined yet (a group: its parent only).
    pub(crate) fn num_in_flight(&self, t: i64) -> u64 {
        let base = self.row_base;
        let mut n = 0;
        let mut row = self.nxt;
        while row - base < self.inp.len() && self.inp.arrival_ps[row - base] <= t {
            if self.inp.fork_parent(row - base) < 0 {
                n += 1;
            }
            row += 1;
        }
        n
    }

    /// KV memory in use and in all: paged, blocks with a reference (the null block excluded) and the
    /// usable blocks; contiguous, the reserved regions' token slots and the capacity in tokens.
    pub(crate) fn kv_used_total(&self) -> (u64, u64) {
        match &self.mem {
            Memory::Paged(pool) => {
                let total = self.cfg.capacity_blocks();
                (total - u64::from(pool.num_free_blocks()), total)
            }
            Memory::Contiguous(_) => {
                let used = self
                    .running
                    .iter()
                    .map(|&k| self.slab[k].region.map_or(0, |r| r.1))
                    .sum();
                (used, self.cfg.capacity_tokens())
            }
        }
    }

    /// Whether the prefix map can hold keys (paged, caching on).
    pub(crate) fn caches_prefixes(&self) -> bool {
        self.cfg.policy.is_paged() && self.cfg.enable_prefix_caching
    }

    /// How many of `keys`, from the first, the prefix map holds (in use or evictable).
    pub(crate) fn leading_hits(&self, keys: &[BlockKey]) -> u64 {
        match &self.mem {
            Memory::Paged(pool) if pool.enable_caching() => keys
                .iter()
                .take_while(|&&k| pool.lookup(k).is_some())
                .count() as u64,
            _ => 0,
        }
    }

    /// Every key in the prefix map (empty unless paged with caching on).
    pub(crate) fn cached_keys(&self) -> Vec<BlockKey> {
        match &self.mem {
            Memory::Paged(pool) if pool.enable_caching() => pool.cached_keys().collect(),
            _ => Vec::new(),
        }
    }
}
