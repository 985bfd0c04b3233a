//! The engine: scheduler + memory model over a whole workload, returning per-sequence
//! columns and integer counters. `python/kvsim/reference/engine.py` is the executable spec: this module
//! follows it rule for rule (DESIGN.md §Engine), and the differential tests compare the two exactly.
//!
//! One `Engine` whose `impl` is split along the step's seams (DESIGN.md §Module map): this file holds
//! the struct, its construction and the run loop (`advance`); `seq` the sequences, arrivals and the
//! slab; `running` the running phase and the step's end; `admission` the waiting phase; `preemption`
//! preemption, swap and groups; `memory` the memory backends and the time-weighted record; `timing`
//! the time models; `events` the event log; `lockstep` event skipping; `stream` and `stepped` runs
//! fed in pieces; `group` a data-parallel group's rank, stepped by its group.

mod admission;
pub mod config;
pub mod contiguous;
mod events;
mod group;
mod hybrid;
mod input;
mod lockstep;
mod memory;
mod offload;
mod output;
mod preemption;
mod quiet;
mod running;
mod seq;
mod stepped;
mod stream;
mod timing;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

pub use config::{
    AttnClass, AttnKind, EngineConfig, GroupLink, Policy, Preemption, Roofline, TierConfig,
    TimeModel,
};
pub use input::EngineInput;
pub(crate) use output::for_each_row_column;
pub use output::{Counters, EngineOutput, StepDurations};
pub use quiet::RouterReads;
pub use stream::StreamEngine;
pub(crate) use stream::{Buffers, forever};

pub use events::{event, reject};
use memory::{
    Aggregates, Memory, MemoryState, peak_blocks, peak_blocks_of, region_size, region_size_of,
};
pub(crate) use seq::private_starts;
use seq::{Seq, join_arrived};
pub(crate) use timing::first_start_at_or_after;

use crate::{BlockId, BlockPool, KvError, Result, invalid_arg};
use contiguous::{Buddy, FirstFit, Space};

pub(crate) const FINISHED: i8 = 0;
/// Segment ids at or above this name generated tokens (`kvsim.model.segments.OUTPUT_BIT`).
pub(crate) const OUTPUT_BIT: u64 = 1 << 63;
const REJECTED: i8 = 1;

/// The simulated clock's range (2^62 ps, about 53 days): a step that would end past it is an error (the
/// time model's coefficients are too large for the workload), in both engines alike.
pub const MAX_TIME_PS: u64 = 1 << 62;
/// Spacing of admission numbers: a group's samples take the numbers right after their parent's, so the
/// running list stays sorted by admission number with each group together.
const ADM_STRIDE: u64 = 1 << 32;

#[allow(clippy::struct_excessive_bools)] // independent facts about the run
pub struct Engine<'a> {
    cfg: &'a EngineConfig,
    inp: EngineInput<'a>,
    mem: Memory,
    /// `reserve` policy: blocks promised to admitted sequences and not yet allocated.
    outstanding: u64,
    t: i64,
    slab: Vec<Seq>,
    free_slots: Vec<usize>,
    waiting: VecDeque<usize>,
    /// Rows that arrived and wait behind `waiting`, not yet in the slab: a sequence is built when it
    /// reaches the head (`waiting_head`), so a long queue costs a row number each, not a `Seq`.
    fresh: VecDeque<usize>,
    /// Preempted by swapping (a sequence, or a group's first member): their blocks are in the CPU pool
    /// (`cpu_used` of `cpu_blocks`).
    swapped: VecDeque<usize>,
    cpu_used: u64,
    /// Blocks swapped out or in during the current step (their PCIe time is added to the step).
    swap_blocks_step: u64,
    running: Vec<usize>,
    /// `async_scheduling` (DESIGN.md §Engine, "Asynchronous scheduling"): the start of the step in flight
    /// (-1: none; the next step is scheduled at its own start), whose finishers (`async_done`, slab
    /// slots) keep their seats and blocks until the next step is scheduled.
    async_prev: i64,
    async_done: Vec<usize>,
    /// ... in a hybrid pool with prefix caching, the sequences the step in flight sampled and the tokens
    /// each had computed then, keyed when its outputs arrive (`settle_keys`).
    flight_sampled: Vec<(usize, u64)>,
    scheduled: Vec<(usize, u64)>,
    /// Waiting sequences skipped in this step's waiting phase (`skip_over_budget`), in skip order.
    skipped: Vec<usize>,
    hits: Vec<BlockId>,
    new_blocks: Vec<BlockId>,
    /// A hybrid pool: the waiting head's lookup, and the (block, group) pairs an operation touched.
    lookup: crate::kv_groups::Lookup,
    group_new: Vec<(BlockId, usize)>,
    /// A hybrid pool's Mamba keys set in this step (cleared at each step's start, `schedule`); with a
    /// CPU tier, also the state blocks keyed since the step's last offer, each with its request's slab
    /// slot (DESIGN.md §CPU tier, "A Mamba group": `StepKeys::hand_off`, `h_offer_states`).
    step_keys: crate::kv_groups::StepKeys,
    num_rejected: u64,
    /// Tokens sampled by full steps (`finish_step`; lockstep's are not counted). A hybrid pool never enters
    /// lockstep, so for its livelock watch (`offload/livelock.rs`) this counts every token its run samples.
    sampled: u64,
    /// Loads and remote transfers admitted, preemptions and rejections so far (each counted as it
    /// happens): a tier's `progress_marks`.
    progress: u64,
    /// A CPU tier's (or a decode replica's connector's) state every step reads, kept here rather than
    /// behind `tier`'s box (`offload/mod.rs`, `TierHot`).
    tier_hot: offload::TierHot,
    /// Set (to its error's message) when a step or a transfer on a link would end past `MAX_TIME_PS`,
    /// or the scheduler livelocks (`offload/livelock.rs`), the first in the run: `advance` stops with
    /// that error after the step.
    step_error: Option<String>,
    out: EngineOutput,
    /// Steps run so far (the index of the next step).
    step: u64,
    /// Record the memory state of every `ts_every`-th step (0: none).
    ts_every: u64,
    /// The event log, when recording: `[steps done, time, kind, row, block, count]`.
    log: Option<Vec<[i64; 6]>>,
    next_adm: u64,
    /// Lockstep mode state (see lockstep.rs).
    lockstep: bool,
    /// Lockstep events: bucket `step % len` holds `(admission number, slab index)` of sequences whose
    /// next event is at `step` (stale entries are skipped). Its length exceeds every event distance.
    ring: Vec<Vec<(u64, usize)>>,
    ring_mask: usize,
    /// Lockstep: a block filling is an event (caching on, keys not deferred).
    fill_events: bool,
    /// Some sample is forked (fork-cow): a shared partial block may need copying.
    forks: bool,
    /// No prompt quotes a generated output: blocks holding generated tokens, or a prompt segment that no
    /// other sequence's prompt contains, can only ever be looked up by their own sequence after a
    /// recompute preemption, so they are phantom-keyed (no hashing, no map entry) until then, and their
    /// registration may wait for the sequence's next lockstep event.
    defer_keys: bool,
    /// Per row of `inp`, where its private content starts (`Seq::private_from`); empty unless `defer_keys` with
    /// caching on.
    private_from: Vec<u64>,
    agg: Aggregates,
    /// The roofline's attention sums of the current step, one per class (`timing::AttnSums`).
    attn_sums: Vec<timing::AttnSums>,
    /// Event sequences touched in the current lockstep step, in admission order.
    touched: Vec<usize>,
    done: Vec<usize>,
    /// Paged memory: `record` sums held blocks only (allocated and stored follow from them at the end).
    peak_held: u64,
    /// The peak of held x block size + `MemoryState::extra` over the steps where `extra` is not zero.
    peak_allocated_extra: i128,
    /// The time-weighted sum of `MemoryState::extra` (added to `w_allocated` at the end).
    w_extra_slots: i128,
    /// `group_need`'s scratch: shared partial blocks and how many members copied them so far.
    writers: Vec<(BlockId, u32)>,
    /// Set by `run`: the caller's cancel flag (Ctrl-C), read between units of work (`cancelled`).
    cancel: Option<&'a AtomicBool>,
    /// Rows are numbered from the start of the run; `inp` holds rows from `row_base` on and the output
    /// columns rows from `out_base` on (both 0 for a whole run; a stream moves them, `stream.rs`).
    row_base: usize,
    out_base: usize,
    /// The next row to join.
    nxt: usize,
    /// No more input will come: `advance` runs to the end.
    final_input: bool,
    /// A stepped replica (`cluster::replica`): `advance` takes only steps starting before this time
    /// (`i64::MAX`: no horizon).
    horizon: i64,
    /// `quiet_through`'s memo of the steps it found neutral (reset by every advance).
    quiet: quiet::QuietMemo,
    /// The CPU tier and its transfers (DESIGN.md §CPU tier), None without one; a decode replica of a
    /// disaggregated fleet holds its connector here (`set_pd_link`).
    tier: Option<Box<offload::Tier>>,
    /// Rows whose prompt a prefill replica computed (`mark_remote`), until their sequence is built.
    remote_rows: std::collections::HashSet<usize>,
    /// A prefill replica of a disaggregated fleet (`set_hold_sends`): its finished requests' blocks,
    /// held until their transfers end (DESIGN.md §Prefill/decode disaggregation, step 7).
    sends: Option<Box<stepped::Sends>>,
}

impl<'a> Engine<'a> {
    pub fn new(inp: EngineInput<'a>, cfg: &'a EngineConfig) -> Result<Self> {
        Self::new_cancellable(inp, cfg, None)
    }

    /// `new` whose setup reads `cancel` (Ctrl-C) while it builds the pool (`BlockPool::new_cancellable`):
    /// a set flag ends it with `InvalidOperation("interrupted")` within a millisecond or so.
    pub fn new_cancellable(
        inp: EngineInput<'a>,
        cfg: &'a EngineConfig,
        cancel: Option<&AtomicBool>,
    ) -> Result<Self> {
        Self::new_into(inp, cfg, cancel, None)
    }

    /// `new_cancellable` writing into `out` (`EngineOutput::for_run` of the input's rows, made by the
    /// caller: `run_into`), else into an `EngineOutput::new` of its own.
    fn new_into(
        inp: EngineInput<'a>,
        cfg: &'a EngineConfig,
        cancel: Option<&AtomicBool>,
        out: Option<EngineOutput>,
    ) -> Result<Self> {
        if let Some(o) = &out
            && o.status.len() != inp.len()
        {
            invalid_arg!(
                "an output of {} rows for {} input rows",
                o.status.len(),
                inp.len()
            );
        }
        cfg.validate()?;
        inp.validate()?;
        check_forks(&inp, cfg)?;
        let mem = if cfg.policy.is_paged() {
            Memory::Paged(BlockPool::new_cancellable(
                cfg.num_blocks,
                cfg.enable_prefix_caching,
                cfg.free_order,
                cancel,
            )?)
        } else {
            let cap = cfg.capacity_tokens();
            Memory::Contiguous(if cfg.buddy {
                Space::Buddy(Buddy::new(cap))
            } else {
                Space::FirstFit(FirstFit::new(cap))
            })
        };
        // A hybrid pool keys its blocks as it allocates them (no phantom keys, no lockstep). (A CPU tier
        // names its chunks by keys of its own, `Seq::tier_keys`: the pool's may stay phantom.)
        let defer_keys = cfg.groups.is_none() && !inp.segment_id.iter().any(|&id| id >= OUTPUT_BIT);
        let private_from = if defer_keys && cfg.enable_prefix_caching && cfg.policy.is_paged() {
            private_starts(&inp)
        } else {
            Vec::new()
        };
        // Longer than a block (see `next_event`).
        let ring_len = ((cfg.block_size + 1).max(64) as usize).next_power_of_two();
        let mut engine = Engine {
            cfg,
            out: out.unwrap_or_else(|| EngineOutput::new(inp.len())),
            inp,
            mem,
            outstanding: 0,
            t: 0,
            slab: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            fresh: VecDeque::new(),
            swapped: VecDeque::new(),
            cpu_used: 0,
            swap_blocks_step: 0,
            running: Vec::new(),
            async_prev: -1,
            async_done: Vec::new(),
            flight_sampled: Vec::new(),
            scheduled: Vec::new(),
            skipped: Vec::new(),
            hits: Vec::new(),
            new_blocks: Vec::new(),
            lookup: crate::kv_groups::Lookup::default(),
            group_new: Vec::new(),
            step_keys: crate::kv_groups::StepKeys::new(cfg.groups.is_some() && cfg.tier.is_some()),
            num_rejected: 0,
            progress: 0,
            tier_hot: offload::TierHot::default(),
            step_error: None,
            sampled: 0,
            step: 0,
            ts_every: 0,
            log: None,
            next_adm: 0,
            lockstep: false,
            ring: vec![Vec::new(); ring_len],
            ring_mask: ring_len - 1,
            fill_events: cfg.policy.is_paged() && cfg.enable_prefix_caching && !defer_keys,
            forks: inp.has_forks(),
            defer_keys,
            private_from,
            agg: Aggregates::default(),
            attn_sums: Vec::new(),
            touched: Vec::new(),
            done: Vec::new(),
            peak_held: 0,
            peak_allocated_extra: 0,
            w_extra_slots: 0,
            writers: Vec::new(),
            cancel: None,
            row_base: 0,
            out_base: 0,
            nxt: 0,
            final_input: true,
            horizon: i64::MAX,
            quiet: quiet::QuietMemo::new(),
            tier: offload::Tier::of(cfg),
            remote_rows: std::collections::HashSet::new(),
            sends: None,
        };
        if let Some(groups) = &cfg.groups {
            engine.out.counters.group_blocks = vec![[0, 0]; groups.len()];
        }
        Ok(engine)
    }

    /// Whether the run was cancelled: a step's loops stop at the next unit (as if the budget ran out),
    /// and `run` returns the error right after the step.
    #[inline]
    fn cancelled(&self) -> bool {
        self.cancel.is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// A cancelled run's largest structures (the pool, the slab, the output columns) are freed on a
    /// thread of their own: returning a gigabyte to the system takes a noticeable fraction of a second,
    /// which Ctrl-C should not wait for.
    fn discard(&mut self) {
        let mem = std::mem::replace(
            &mut self.mem,
            Memory::Contiguous(Space::FirstFit(FirstFit::new(0))),
        );
        let big = (
            mem,
            std::mem::take(&mut self.slab),
            std::mem::take(&mut self.out),
        );
        // If no thread can be had, `big` is dropped here.
        let _ = std::thread::Builder::new().spawn(move || drop(big));
    }

    /// Records the memory state of every `every`-th step into the output's time series (0: none).
    #[must_use]
    pub fn with_timeseries(mut self, every: u64) -> Self {
        self.ts_every = every;
        self
    }

    /// Runs to completion, or until `cancel` is set (Ctrl-C from Python: the binding's watcher sets it):
    /// the flag is read after every step or quiet span, after every admission and before every running
    /// unit of a step, so a cancelled run stops within one unit of work, whatever the size of its steps, and
    /// returns `InvalidOperation("interrupted")`.
    pub fn run(mut self, cancel: &'a AtomicBool) -> Result<EngineOutput> {
        self.cancel = Some(cancel);
        self.final_input = true;
        self.advance()?;
        self.finish_counters();
        Ok(self.out)
    }

    /// Notes a step or a transfer that would end past `MAX_TIME_PS`, or a livelock: the run's first such
    /// error is the one `advance` stops with after the step (the reference raises it at once; what the
    /// step does after it is discarded).
    #[cold]
    #[inline(never)]
    fn stop_after_step(&mut self, msg: String) {
        if self.step_error.is_none() {
            self.step_error = Some(msg);
        }
    }

    /// Steps until the run is over or, with more input to come (`final_input` false), until a step
    /// could depend on it: rows arrive in order, so a step starting before the last arrival fed is safe
    /// (later rows arrive no earlier), one starting at or after it is not, nor the jump of an idle
    /// engine to the next arrival.
    fn advance(&mut self) -> Result<()> {
        // Locals for the loop's hot reads (the input's slices live as long as the engine's view).
        let (arrivals, base, cancel) = (self.inp.arrival_ps, self.row_base, self.cancel);
        let end = base + arrivals.len();
        let last_arrival = arrivals.last().copied().unwrap_or(0);
        // A step starting at or after `horizon` is not taken (nor its arrivals joined); with more input
        // to come, neither is one starting at or after the last arrival once every row fed has joined:
        // each a comparison against `stop_at` on the hot path (`i64::MAX` for a whole run).
        let horizon = self.horizon;
        let stop_at = if self.final_input {
            horizon
        } else {
            horizon.min(last_arrival)
        };
        // A stepped replica: nothing of the step starting at or after its horizon happens, the join of
        // its arrivals neither (a row arriving then is still in flight; one rejected at once is rejected
        // by that step, as in the reference). Checked here and after each step: the loop's only other
        // turn, an idle jump, lands before the horizon (callgrind: 1.8 % fewer instructions than the
        // same check at the loop's head, from the loop's register allocation).
        if self.t >= horizon {
            return Ok(());
        }
        let mut nxt = self.nxt;
        let result = loop {
            join_arrived!(self, arrivals, base, end, nxt);
            if !self.has_work() {
                if nxt == end && !self.final_input {
                    // More input to come: the next arrival is not known yet. Before `async_prev`'s reset
                    // below, as the reference's `advance`: a row fed later may arrive by the start of the
                    // step in flight and join the next step's schedule, which the reset (taking the
                    // arrivals up to the step's end) would pass by (a stream then differed from the whole
                    // run: tests/test_async_scheduling.py).
                    break Ok(());
                }
                if self.idle_turn() {
                    continue; // (the step in flight, a CPU tier's batch queue or last stores)
                }
                if nxt == end {
                    break Ok(()); // the end
                }
                let a = arrivals[nxt - base];
                if a >= horizon {
                    break Ok(()); // a stepped replica idles at its horizon without moving its clock
                }
                self.t = a;
                if self.tier.is_some() && !self.cfg.async_scheduling {
                    self.observe(); // (asynchronous: only a batch's output observes)
                }
                continue;
            }
            if self.t >= stop_at && nxt == end {
                break Ok(()); // more input to come: a later row may arrive at the start of this step
            }
            if self.stalled() {
                // Waits for a transfer or the next arrival (a stepped replica: not past its horizon).
                let arrival = (nxt < end).then(|| arrivals[nxt - base]);
                match self.resolve_any_stall(arrival, horizon) {
                    Ok(true) => continue,
                    Ok(false) => break Ok(()),
                    Err(e) => break Err(e),
                }
            }
            self.observe_sends(); // a prefill replica's observation point: each step's start
            let (rejected_before, preempted_before) =
                (self.num_rejected, self.out.counters.num_preemptions);
            let progressed = if self.lockstep {
                // Quiet steps (see `skip_quiet_steps`) start with an empty bucket and nothing waiting;
                // with more input to come, later rows arrive no earlier than the last one fed.
                (self.ring[self.step as usize & self.ring_mask].is_empty()
                    && self.nothing_waits()
                    && self.skip_quiet_steps(quiet_bound(
                        if nxt < end {
                            Some(arrivals[nxt - base])
                        } else if self.final_input {
                            None
                        } else {
                            Some(last_arrival)
                        },
                        self.sends_bound(horizon),
                    )))
                    || self.lockstep_step()
            } else {
                self.full_step()
            };
            // A cancelled step may have stopped half way (`cancelled`): checked before anything reads
            // its outcome.
            if let Some(c) = cancel
                && c.load(Ordering::Relaxed)
            {
                self.discard();
                break Err(KvError::InvalidOperation("interrupted".into()));
            }
            // Nothing scheduled is fine if a head was rejected or a sequence preempted itself (then no
            // time passes, as in the reference); anything else would repeat forever.
            if let Some(msg) = &self.step_error {
                break Err(KvError::InvalidArgument(msg.clone()));
            }
            if !progressed
                && self.num_rejected == rejected_before
                && self.out.counters.num_preemptions == preempted_before
                && !self.sends_stall()
            {
                break Err(KvError::Internal(format!(
                    "no progress at time {} ps",
                    self.t
                )));
            }
            if self.t >= horizon {
                break Ok(());
            }
        };
        self.nxt = nxt;
        self.flush_occupancy(); // (a CPU tier's counters complete whenever the run pauses)
        // (A store past the clock planned by an idle step, then the end or the horizon, stops here.)
        let overflow = self.step_error.clone();
        overflow.map_or(result, |msg| Err(KvError::InvalidArgument(msg)))
    }

    /// The counters summed at the end of a run.
    fn finish_counters(&mut self) {
        if let Memory::Paged(pool) = &self.mem {
            let c = &mut self.out.counters;
            c.num_evictions = i128::from(pool.num_evictions());
            c.num_block_allocations = i128::from(pool.num_allocated());
            // `record` summed held blocks only: allocated = held x block size, stored = allocated - internal.
            let bs = i128::from(self.cfg.block_size);
            c.w_allocated = bs * c.w_held_blocks + self.w_extra_slots;
            c.w_stored = c.w_allocated - c.w_internal;
            c.peak_allocated_tokens =
                (bs * i128::from(self.peak_held)).max(self.peak_allocated_extra);
        }
        self.out.counters.makespan_ps = i128::from(self.t);
        if let Some(log) = self.log.take() {
            self.out.events = log;
        }
    }
}

/// Fork-cow samples (rows with a fork_parent) take vLLM v0's rules: policy `vllm`, synchronous
/// scheduling, and a budget that holds a whole group (`max_num_batched_tokens >= max_num_seqs`).
fn check_forks(inp: &EngineInput<'_>, cfg: &EngineConfig) -> Result<()> {
    if !inp.has_forks() {
        return Ok(());
    }
    if cfg.policy != Policy::Vllm {
        invalid_arg!("sampling 'fork-cow' (rows with a fork_parent) applies to policy 'vllm'");
    }
    if cfg.async_scheduling {
        invalid_arg!("async_scheduling takes vLLM v1's rules: sampling 'fork-cow' does not apply");
    }
    if cfg.max_num_batched_tokens < cfg.max_num_seqs {
        invalid_arg!(
            "sampling 'fork-cow' needs max_num_batched_tokens >= max_num_seqs (vLLM v0's rule), got max_num_batched_tokens {} < max_num_seqs {}",
            cfg.max_num_batched_tokens,
            cfg.max_num_seqs
        );
    }
    Ok(())
}

/// The time a quiet span must stop before: the next arrival known, or the horizon of a stepped replica
/// if that is earlier (a step starting at or after either is not taken together).
#[inline]
fn quiet_bound(arrival: Option<i64>, horizon: i64) -> Option<i64> {
    if horizon == i64::MAX {
        arrival
    } else {
        Some(arrival.map_or(horizon, |a| a.min(horizon)))
    }
}

/// Simulates every sequence of `inp` under `cfg`, recording every `timeseries_every`-th step (0: none)
/// and, with `record_events`, every block and scheduling event.
pub fn run(
    inp: EngineInput<'_>,
    cfg: &EngineConfig,
    timeseries_every: u64,
    record_events: bool,
    cancel: &AtomicBool,
) -> Result<EngineOutput> {
    run_into(inp, cfg, timeseries_every, record_events, cancel, None)
}

/// `run` writing into `out`, the input's rows' `EngineOutput::for_run`, which the caller makes in its
/// own thread before it hands the run to a worker thread: the Python binding (`run_engine`), whose
/// thread's allocator arena (glibc's main one) keeps the memory of a run's freed columns for the next,
/// where a worker thread's arena gave its pages back at the end of each run and took them again,
/// zeroed, in the next (page faults; DESIGN.md §CPU tier, "Where a run's memory comes from"). `out`'s
/// rows must be the input's.
pub fn run_into(
    inp: EngineInput<'_>,
    cfg: &EngineConfig,
    timeseries_every: u64,
    record_events: bool,
    cancel: &AtomicBool,
    out: Option<EngineOutput>,
) -> Result<EngineOutput> {
    Engine::new_into(inp, cfg, Some(cancel), out)?
        .with_timeseries(timeseries_every)
        .with_events(record_events)
        .run(cancel)
}

#[cfg(test)]
mod tests;
