//! The engine's side of a stepped replica (`crate::cluster::replica`, DESIGN.md §The stepped replica):
//! an engine over owned input columns that grow one row (or fork-cow group) at a time, advanced to a
//! horizon, and the signals a router reads from it; whether they can be read at a horizon without
//! stepping there is `super::quiet`'s (`quiet_through`).

use std::sync::atomic::AtomicBool;

use super::{Engine, EngineConfig, EngineInput, EngineOutput, Memory, Result, offload};
use crate::kv_groups::{Lookup, SharedKeys};
use crate::{BlockId, BlockKey, Segment};
use std::collections::HashSet;
use std::hash::BuildHasher;

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
        // (a hybrid pool keys its own blocks, never deferred, as `new` decides: the fleet's driver reads
        // the workload only)
        let defer_keys = defer_keys && cfg.groups.is_none();
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
            // (A replica that does not hold them, contiguous, freed them at the finish. Under
            // `async_scheduling` a finisher holds them from its output, after the next schedule, which the
            // decode side may decide before: `free_sent` reaches the end only after it.)
            debug_assert!(
                self.cfg.async_scheduling || sends.sending.contains_key(&row),
                "row {row} holds its blocks"
            );
            sends.ends.push(std::cmp::Reverse((end, row)));
        }
    }

    /// An observation point at `t`: every held request whose transfer ended at or before `t` frees its
    /// blocks, in order of end, then row. Under `async_scheduling`, while a step is in flight, those ended
    /// by its start (`join_limit`: vLLM applies `finished_sending` from that step's output, after the
    /// schedule made at its start).
    #[inline(never)]
    pub(super) fn free_sent(&mut self) {
        let t = self.join_limit();
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
        self.tier_hot.stalled || self.sends.as_ref().is_some_and(|s| s.stalled)
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
        if self
            .sends
            .as_ref()
            .is_some_and(|s| s.due(self.join_limit()))
        {
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
        if self.tier_hot.stalled {
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
        if self.has_work()
            || self
                .tier
                .as_deref()
                .is_some_and(|t| t.has_finished_last() || t.batches.flight)
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

    /// A hybrid model's prefix hit for a prompt of segments `segs` and `prompt` tokens, in tokens: what
    /// its lookup over every group would hit now (`Groups::lookup`, within `prompt - 1` tokens as its
    /// admission looks up; DESIGN.md §Clusters, `prefix_hit_blocks`), against its prefix map or, given
    /// one, `snapshot` (a stale router view's copy of the map's keys); the prompt's key chains from
    /// `keys`, which the lookups of every replica share. None for a model of one group.
    pub(crate) fn hybrid_hit_tokens<S: BuildHasher>(
        &self,
        (segs, keys): (&[Segment], &mut SharedKeys),
        prompt: u64,
        snapshot: Option<&HashSet<BlockKey, S>>,
    ) -> Option<u64> {
        let groups = self.cfg.groups.as_ref()?;
        let Memory::Paged(pool) = &self.mem else {
            return Some(0);
        };
        let (cache, mut out) = (keys.for_groups(groups), Lookup::default());
        let max = prompt.saturating_sub(1);
        match snapshot {
            // (a snapshot's block ids are unread: only the tokens hit are)
            Some(keys) => {
                let held = |k| keys.contains(&k).then_some(BlockId::NULL);
                groups.lookup_in(&held, pool.enable_caching(), segs, cache, max, &mut out);
            }
            None => groups.lookup(pool, segs, cache, max, &mut out),
        }
        Some(out.tokens)
    }

    /// Every key in the prefix map (empty unless paged with caching on).
    pub(crate) fn cached_keys(&self) -> Vec<BlockKey> {
        match &self.mem {
            Memory::Paged(pool) if pool.enable_caching() => pool.cached_keys().collect(),
            _ => Vec::new(),
        }
    }
}
