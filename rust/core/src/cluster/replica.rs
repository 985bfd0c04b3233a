//! A replica that can be stepped (DESIGN.md §The stepped replica): the engine over input columns it
//! owns, appended in place one unit at a time (a row, or a fork-cow parent with its samples), advanced
//! to a horizon, with the signals a router reads. Rows that are done (finished or rejected, with every
//! earlier row) are compacted out of the input columns once they are at least half of them, so a push
//! costs amortised O(1) and the input held stays proportional to the rows in flight; their output moves
//! to the fleet's columns the same way when the driver asks (`drain_done`), or stays to the end.

use std::sync::atomic::AtomicBool;

use crate::engine::{
    Buffers, Engine, EngineConfig, EngineInput, EngineOutput, RouterReads, forever,
};
use crate::kv_groups::SharedKeys;
use crate::{BlockKey, Result, Segment};
use std::collections::HashSet;
use std::hash::BuildHasher;

/// Compaction waits for at least this many done rows (and for them to be half the columns).
const COMPACT_MIN: usize = 1024;

/// Whether `k` done rows of `held` are worth moving out now: at least `COMPACT_MIN` and half of them,
/// so the rows left behind move at most as often as they are held (amortised O(1) a row).
fn worth_moving(k: usize, held: usize) -> bool {
    k >= COMPACT_MIN && 2 * k >= held
}

pub struct Replica {
    /// Borrows `buf` and `cfg` (see `engine::forever`); declared first, so it is dropped first.
    engine: Engine<'static>,
    buf: Box<Buffers>,
    cfg: Box<EngineConfig>,
    /// Rows pushed so far (rows are numbered in push order from 0).
    rows: usize,
    /// The first row the columns hold.
    base: usize,
    /// Every row before this one is done.
    done: usize,
    /// The workload holds fork-cow samples: `fork_parent` is kept.
    forks: bool,
    /// The caller's row of each row whose output the engine still holds (from its `out_base` on):
    /// where `drain_done` puts it.
    global: Vec<usize>,
}

impl Replica {
    /// An empty replica under `cfg`. `defer_keys` (no prompt of the whole workload quotes an output)
    /// and `forks` (the workload holds fork-cow samples) are the driver's, learnt over the whole
    /// workload; `cancel` is read while the pool is built.
    pub fn new(
        cfg: EngineConfig,
        defer_keys: bool,
        forks: bool,
        cancel: Option<&AtomicBool>,
    ) -> Result<Self> {
        let cfg = Box::new(cfg);
        let buf = Box::new(Buffers {
            seg_offsets: vec![0],
            ..Buffers::default()
        });
        // SAFETY: `cfg` and `buf` are boxed and owned by the `Replica` that owns the engine; the view is
        // replaced after every change of `buf` (`refresh`).
        let (cfg_ref, view) = unsafe { (forever(&*cfg), forever(&*buf).view()) };
        let engine = Engine::new_stepped(view, cfg_ref, defer_keys, forks, cancel)?;
        Ok(Replica {
            engine,
            buf,
            cfg,
            rows: 0,
            base: 0,
            done: 0,
            forks,
            global: Vec::new(),
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Rows pushed so far.
    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The first row whose input the columns still hold (rows before it were compacted away).
    pub fn first_held_row(&self) -> usize {
        self.base
    }

    /// Points the engine at the columns again (they may have moved).
    fn refresh(&mut self) {
        // SAFETY: `buf` is owned by `self` and changed only by `push` and `compact`, each followed by
        // this call before the engine runs again.
        let view = unsafe { forever(&*self.buf).view() };
        self.engine.set_input(view, self.base);
    }

    /// Appends rows `rows` of `inp` (already validated by the driver): one unit, a row or a fork-cow
    /// parent followed by its samples, arriving no earlier than every row pushed before.
    /// `private_from` holds the whole workload's per-row value (`engine::private_starts`), or is empty.
    pub fn push(
        &mut self,
        inp: &EngineInput<'_>,
        rows: std::ops::Range<usize>,
        private_from: &[u64],
    ) {
        let first = rows.start;
        let (local, forks) = (self.rows, self.forks);
        let b = &mut *self.buf;
        for i in rows.clone() {
            b.arrival_ps.push(inp.arrival_ps[i]);
            b.prompt_len.push(inp.prompt_len[i]);
            b.target.push(inp.target[i]);
            b.max_gen.push(inp.max_gen[i]);
            b.output_seg.push(inp.output_seg[i]);
            let (lo, hi) = (inp.seg_offsets[i] as usize, inp.seg_offsets[i + 1] as usize);
            b.segment_id.extend_from_slice(&inp.segment_id[lo..hi]);
            b.segment_len.extend_from_slice(&inp.segment_len[lo..hi]);
            b.seg_offsets.push(b.segment_id.len() as i64);
            if forks {
                let p = inp.fork_parent(i);
                b.fork_parent.push(if p >= 0 {
                    (local + (p as usize - first)) as i64
                } else {
                    -1
                });
            }
        }
        if self.engine.reads_private_from() {
            let pf = self.engine.private_from_mut();
            pf.extend(rows.clone().map(|i| private_from[i]));
        }
        self.rows += rows.len();
        self.global.extend(rows.clone());
        self.refresh();
    }

    /// Prefill/decode disaggregation: appends row `row` of `inp` as `push` does, with its arrival
    /// replaced by `arrival` (a hand-off joins its decode replica when its prefill finished), its target
    /// capped at 1 with `first_token_only` (vLLM's `max_tokens=1` on a prefill replica), its prompt
    /// less its last `backoff` tokens when it is longer (vLLM's `_truncate_request_for_prefill` on a
    /// prefill replica of a model with Mamba groups), and marked remote with `remote` (a prefill replica
    /// computed its prompt).
    #[allow(clippy::too_many_arguments)]
    pub fn push_pd(
        &mut self,
        inp: &EngineInput<'_>,
        row: usize,
        private_from: &[u64],
        arrival: Option<i64>,
        first_token_only: bool,
        remote: bool,
        backoff: i64,
    ) {
        self.push(inp, row..row + 1, private_from);
        let b = &mut *self.buf;
        if let Some(a) = arrival {
            *b.arrival_ps.last_mut().expect("a row pushed") = a;
        }
        if first_token_only {
            for col in [&mut b.target, &mut b.max_gen] {
                let x = col.last_mut().expect("a row pushed");
                *x = (*x).min(1);
            }
        }
        let prompt = b.prompt_len.last_mut().expect("a row pushed");
        if backoff > 0 && *prompt > backoff {
            *prompt -= backoff;
            // The row's segments less their last `backoff` tokens (a segment emptied is dropped).
            let mut n = backoff;
            while n > 0 {
                let len = b
                    .segment_len
                    .last_mut()
                    .expect("a prompt longer than the backoff");
                if *len > n {
                    *len -= n;
                    break;
                }
                n -= *len;
                b.segment_len.pop();
                b.segment_id.pop();
            }
            *b.seg_offsets.last_mut().expect("a row pushed") = b.segment_id.len() as i64;
        }
        if remote {
            self.engine.mark_remote(self.rows - 1);
        }
        self.refresh();
    }

    /// Makes this replica a decode replica of a disaggregated fleet (`Engine::set_pd_link`).
    pub fn set_pd_link(&mut self, latency_ps: u64, ps_per_block: u64) {
        self.engine.set_pd_link(latency_ps, ps_per_block);
    }

    /// Makes this replica a prefill replica of a disaggregated fleet (`Engine::set_hold_sends`).
    pub fn set_hold_sends(&mut self, hold: bool) {
        self.engine.set_hold_sends(hold);
    }

    /// Row `row`'s (in push order) transfer ends at `end` (`Engine::send_ended`).
    pub fn send_ended(&mut self, row: usize, end: i64) {
        self.engine.send_ended(row, end);
    }

    /// A prefill replica's rows (in push order) finished or rejected since the last call.
    pub fn take_done_rows(&mut self, dst: &mut Vec<usize>) {
        self.engine.take_done_rows(dst);
    }

    /// A decode replica's remote rows decided since the last call, with their transfers' ends.
    pub fn take_sends_decided(&mut self, dst: &mut Vec<(usize, i64)>) {
        self.engine.take_sends_decided(dst);
    }

    /// Whether this prefill replica waits for its held blocks' transfers to end (`Engine::sends_stalled`).
    pub fn stalled_on_sends(&self) -> bool {
        self.engine.sends_stalled()
    }

    /// When this replica's next step starts given its rows (`Engine::next_event`; None: nothing left).
    pub fn next_event(&self) -> Option<i64> {
        self.engine.next_step_start()
    }

    /// Row `row`'s (in push order) status, first schedule and finish (`Engine::row_outcome`); its
    /// output must still be held (`drain_done` not called past it).
    pub fn row_outcome(&self, row: usize) -> (i8, i64, i64) {
        self.engine.row_outcome(row)
    }

    /// Moves the output of the rows done (with every earlier row) into `dst`, each at its row there
    /// (the `rows` range `push` was given), once they are worth it (`worth_moving`, of the rows whose
    /// output the engine holds): a fleet's replicas then hold the output of
    /// the rows in flight, not of every row, and its rows are written while they are in cache.
    pub fn drain_done(&mut self, dst: &mut EngineOutput) {
        let base = self.engine.out_base();
        let (k, held) = (self.done - base, self.rows - base);
        if !worth_moving(k, held) {
            return;
        }
        self.engine.move_output_front(&self.global[..k], dst);
        self.global.drain(..k);
    }

    /// As `drain_done`, only the rows whose status `keep` accepts reaching `dst` (the others dropped).
    pub fn drain_done_if(&mut self, dst: &mut EngineOutput, keep: impl Fn(i8) -> bool) {
        let base = self.engine.out_base();
        let (k, held) = (self.done - base, self.rows - base);
        if !worth_moving(k, held) {
            return;
        }
        self.engine
            .move_output_front_if(&self.global[..k], dst, keep);
        self.global.drain(..k);
    }

    /// The caller's rows whose output `take_output` returns, in order (those `drain_done` left).
    pub fn rows_held(&self) -> &[usize] {
        &self.global
    }

    /// Drops the done rows' input once they are at least half of the columns (amortised O(1) a row).
    fn compact(&mut self) {
        while self.done < self.rows && self.engine.row_done(self.done) {
            self.done += 1;
        }
        let keep_from = self.done.min(self.engine.next_row());
        let k = keep_from - self.base;
        if !worth_moving(k, self.rows - self.base) {
            return;
        }
        let b = &mut *self.buf;
        let seg_lo = b.seg_offsets[k];
        b.arrival_ps.drain(..k);
        b.prompt_len.drain(..k);
        b.target.drain(..k);
        b.max_gen.drain(..k);
        b.output_seg.drain(..k);
        if !b.fork_parent.is_empty() {
            b.fork_parent.drain(..k);
        }
        b.seg_offsets.drain(..k);
        for o in &mut b.seg_offsets {
            *o -= seg_lo;
        }
        b.segment_id.drain(..seg_lo as usize);
        b.segment_len.drain(..seg_lo as usize);
        if self.engine.reads_private_from() {
            self.engine.private_from_mut().drain(..k);
        }
        self.base = keep_from;
        self.refresh();
    }

    /// Runs every step that starts strictly before `horizon` (DESIGN.md §The stepped replica).
    pub fn advance_until(&mut self, horizon: i64, cancel: &AtomicBool) -> Result<()> {
        // Only steps write output rows: a replica that first steps at the end (round-robin's) makes
        // its columns once, at their size.
        self.engine.cover_output_rows(self.rows);
        // SAFETY: the engine drops the reference again before `advance_until` returns.
        let result = self
            .engine
            .advance_until(horizon, unsafe { forever(cancel) });
        if result.is_ok() {
            self.compact();
        }
        result
    }

    /// Whether a router reading `reads` can read this replica at `horizon` without stepping it there:
    /// `Some((until, running))` when what it reads at every horizon from `horizon` to `until` is what
    /// it reads now, but for the running count, `running` there (valid while no row arriving at or
    /// before `until` is pushed); see `Engine::quiet_through`.
    pub fn quiet_through(&mut self, horizon: i64, reads: RouterReads) -> Option<(i64, u64)> {
        self.engine.quiet_through(horizon, reads)
    }

    /// Runs to the end; the output is then `take_output`'s.
    pub fn finish(&mut self, cancel: &AtomicBool) -> Result<()> {
        self.engine.cover_output_rows(self.rows);
        // SAFETY: as in `advance_until`.
        self.engine.finish_stepped(unsafe { forever(cancel) })
    }

    /// The output columns of the rows `drain_done` left (`rows_held`, in push order) and the counters,
    /// after `finish`.
    pub fn take_output(&mut self) -> EngineOutput {
        self.engine.take_output(self.rows)
    }

    // -- a rank of a data-parallel group (DESIGN.md §Data-parallel groups; `Engine`'s `group.rs`) -----
    /// The group step's first half at the rank's clock: its rows due join and it schedules; its step's
    /// own duration but the routed experts' term and its batched tokens, or None (a dummy batch).
    pub fn group_plan(&mut self) -> Result<Option<(u64, u64)>> {
        self.engine.cover_output_rows(self.rows);
        self.engine.group_plan()
    }

    /// The planned step recorded with the group's duration `d`.
    pub fn group_commit(&mut self, d: u64, tokens: u64) -> Result<()> {
        self.engine.group_commit(d, tokens)?;
        self.compact();
        Ok(())
    }

    /// An idle rank's clock moved to `t` with its group.
    pub fn group_dummy(&mut self, t: i64) {
        self.engine.group_dummy(t);
    }

    /// The rank's quiet state (`Engine::group_quiet`): its batch, its step j's own time `dt0 + ddt j`
    /// but the experts' term, the longest span it allows; None: it takes its next step in full.
    pub fn group_quiet(&self) -> Option<(u64, i128, i128, u64)> {
        self.engine.group_quiet()
    }

    /// Whether the rank's `j`-th step from its current one holds an event.
    pub fn quiet_event_at(&self, j: u64) -> bool {
        self.engine.quiet_event_at(j)
    }

    /// `span` quiet steps recorded with the group's durations, step j lasting `dt0 + ddt j`.
    pub fn take_group_quiet(&mut self, span: u64, dt0: i128, ddt: i128) {
        self.engine.take_group_quiet(span, dt0, ddt);
    }

    /// A dummy batch's duration under this rank's time model, but the routed experts' term.
    pub fn dummy_time(&self) -> u64 {
        self.engine.dummy_time()
    }

    /// The routed experts' term of a group step whose ranks' tokens sum to `gathered`.
    pub fn experts_time(&self, gathered: u64) -> u64 {
        self.engine.experts_time(gathered)
    }

    /// A request is running, waiting or swapped out.
    pub fn has_work(&self) -> bool {
        self.engine.has_work()
    }

    /// The next pushed row's arrival that has not joined.
    pub fn next_arrival(&self) -> Option<i64> {
        self.engine.next_arrival()
    }

    /// The rank's clock.
    pub fn clock(&self) -> i64 {
        self.engine.clock()
    }

    // -- signals (DESIGN.md §The stepped replica) --------------------------------------------------------
    pub fn waiting(&self) -> u64 {
        self.engine.num_waiting()
    }

    pub fn running(&self) -> u64 {
        self.engine.num_running()
    }

    /// Rows pushed with arrival at or before `t` that have not joined yet (a group: its parent).
    pub fn in_flight(&self, t: i64) -> u64 {
        self.engine.num_in_flight(t)
    }

    /// `(kv_used, kv_total)`: blocks (paged) or token slots (contiguous).
    pub fn kv(&self) -> (u64, u64) {
        self.engine.kv_used_total()
    }

    /// Whether this replica's prefix map can hold keys (paged, caching on).
    pub fn caches_prefixes(&self) -> bool {
        self.engine.caches_prefixes()
    }

    /// How many of `keys` (a prompt's chained block keys at this replica's block size), from the
    /// first, its prefix map holds.
    pub fn leading_hits(&self, keys: &[BlockKey]) -> u64 {
        self.engine.leading_hits(keys)
    }

    /// A hybrid model's prefix hit in blocks of its engine block size, against its prefix map or a
    /// stale view's `snapshot` of it (`Engine::hybrid_hit_tokens`, the prompt's chains from `keys`); None
    /// for a model of one group.
    pub fn hybrid_hit_blocks<S: BuildHasher>(
        &self,
        (segs, keys): (&[Segment], &mut SharedKeys),
        prompt: u64,
        snapshot: Option<&HashSet<BlockKey, S>>,
    ) -> Option<u64> {
        let tokens = self
            .engine
            .hybrid_hit_tokens((segs, keys), prompt, snapshot)?;
        Some(tokens / self.cfg.block_size)
    }

    /// The prefix map's keys (a stale router view's snapshot).
    pub fn cached_keys(&self) -> Vec<BlockKey> {
        self.engine.cached_keys()
    }
}
