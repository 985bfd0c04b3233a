//! The engine: scheduler + memory model over a whole workload (SPEC §4–6), returning per-sequence
//! columns and integer counters. `python/kvsim/reference/engine.py` is the executable spec: this module
//! follows it rule for rule (DESIGN.md §Engine), and the differential tests compare the two exactly.

pub mod config;
pub mod contiguous;
mod input;
mod output;

use std::collections::VecDeque;

pub use config::{EngineConfig, Policy, TimeModel};
pub use input::EngineInput;
pub use output::{Counters, EngineOutput};

use crate::block_table::BlockTable;
use crate::{BlockId, BlockPool, KvError, Result, Segment};
use contiguous::FirstFit;

/// Reject reasons, shared with `kvsim.reference.engine.REJECT_REASONS`.
pub mod reject {
    pub const NO_ROOM_TO_GENERATE: i64 = 1;
    pub const EXCEEDS_POOL: i64 = 2;
    pub const EXCEEDS_ADDRESS_SPACE: i64 = 3;
    pub const PROMPT_EXCEEDS_BUDGET: i64 = 4;
    pub const NEVER_ADMITTED: i64 = 5;
}

const FINISHED: i64 = 0;
const REJECTED: i64 = 1;
/// Steps between checks of the interrupt callback (Ctrl-C from Python).
const INTERRUPT_EVERY: u64 = 1 << 16;

/// A live sequence: waiting or running. Finished and rejected ones leave the slab.
#[derive(Debug, Default)]
struct Seq {
    row: usize,
    /// Prompt segments, then this sequence's output segment once it has generated a token.
    segs: Vec<Segment>,
    prompt_len: u64,
    target: u64,
    max_gen: u64,
    output_len: u64,
    output_seg: u64,
    generated: u64,
    num_computed: u64,
    computed_at_preemption: u64,
    reserved_blocks: u64,
    region: Option<(u64, u64)>,
    table: BlockTable,
}

impl Seq {
    #[inline]
    fn num_tokens(&self) -> u64 {
        self.prompt_len + self.generated
    }

    fn generate_one(&mut self) {
        self.generated += 1;
        if self.generated == 1 {
            self.segs.push(Segment::new(self.output_seg, 1));
        } else {
            self.segs.last_mut().expect("output segment").len = self.generated;
        }
    }
}

/// The region a contiguous policy reserves for a sequence, in token slots.
fn region_size(cfg: &EngineConfig, s: &Seq) -> u64 {
    match cfg.policy {
        Policy::Static => cfg.max_model_len.unwrap_or(0),
        Policy::OrcaMax => s.prompt_len + s.max_gen,
        Policy::OrcaPow2 => s.prompt_len + s.output_len.max(1).next_power_of_two(),
        _ => s.prompt_len + s.output_len,
    }
}

/// Blocks held at the sequence's largest (its last token's K/V is never computed); `reserve` promises
/// room for every token it may generate.
fn peak_blocks(cfg: &EngineConfig, s: &Seq) -> u64 {
    if cfg.policy == Policy::Reserve {
        (s.prompt_len + s.max_gen).div_ceil(cfg.block_size)
    } else {
        (s.prompt_len + s.target - 1).div_ceil(cfg.block_size)
    }
}

enum Memory {
    Paged(BlockPool),
    Contiguous(FirstFit),
}

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
    running: Vec<usize>,
    scheduled: Vec<(usize, u64)>,
    hits: Vec<BlockId>,
    new_blocks: Vec<BlockId>,
    num_rejected: u64,
    out: EngineOutput,
}

impl<'a> Engine<'a> {
    pub fn new(inp: EngineInput<'a>, cfg: &'a EngineConfig) -> Result<Self> {
        cfg.validate()?;
        inp.validate()?;
        let mem = if cfg.policy.is_paged() {
            Memory::Paged(BlockPool::new(
                cfg.num_blocks,
                cfg.enable_prefix_caching,
                cfg.free_order,
            )?)
        } else {
            Memory::Contiguous(FirstFit::new(cfg.capacity_tokens()))
        };
        Ok(Engine {
            cfg,
            out: EngineOutput::new(inp.len()),
            inp,
            mem,
            outstanding: 0,
            t: 0,
            slab: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            scheduled: Vec::new(),
            hits: Vec::new(),
            new_blocks: Vec::new(),
            num_rejected: 0,
        })
    }

    fn reject_at_arrival(&self, s: &Seq) -> i64 {
        let cfg = self.cfg;
        if s.target < 1 {
            reject::NO_ROOM_TO_GENERATE
        } else if cfg.policy.is_paged() && peak_blocks(cfg, s) > cfg.capacity_blocks() {
            reject::EXCEEDS_POOL
        } else if !cfg.policy.is_paged() && region_size(cfg, s) > cfg.capacity_tokens() {
            reject::EXCEEDS_ADDRESS_SPACE
        } else if !cfg.chunked_prefill && s.prompt_len > cfg.max_num_batched_tokens {
            reject::PROMPT_EXCEEDS_BUDGET
        } else {
            0
        }
    }

    // -- slab ------------------------------------------------------------------------------------------
    fn make_seq(&self, row: usize) -> Seq {
        let inp = &self.inp;
        let (lo, hi) = (
            inp.seg_offsets[row] as usize,
            inp.seg_offsets[row + 1] as usize,
        );
        let segs = (lo..hi)
            .map(|k| Segment::new(inp.segment_id[k], inp.segment_len[k] as u64))
            .collect();
        Seq {
            row,
            segs,
            prompt_len: inp.prompt_len[row] as u64,
            target: inp.target[row] as u64,
            max_gen: inp.max_gen[row] as u64,
            output_len: inp.output_len[row] as u64,
            output_seg: inp.output_seg[row],
            ..Seq::default()
        }
    }

    fn insert(&mut self, s: Seq) -> usize {
        if let Some(k) = self.free_slots.pop() {
            self.slab[k] = s;
            k
        } else {
            self.slab.push(s);
            self.slab.len() - 1
        }
    }

    fn remove(&mut self, k: usize) {
        self.slab[k] = Seq::default();
        self.free_slots.push(k);
    }

    // -- memory ----------------------------------------------------------------------------------------
    /// Allocates a waiting sequence's first chunk; returns its token count, or 0 if it cannot start.
    fn try_admit(&mut self, k: usize, budget: u64) -> u64 {
        let cfg = self.cfg;
        let bs = cfg.block_size;
        let total = self.slab[k].num_tokens();
        match &mut self.mem {
            Memory::Contiguous(space) => {
                let num_new = if cfg.chunked_prefill {
                    total.min(budget)
                } else {
                    total
                };
                if num_new > budget {
                    return 0;
                }
                let size = region_size(cfg, &self.slab[k]);
                let Some(start) = space.allocate(size) else {
                    return 0;
                };
                let s = &mut self.slab[k];
                s.region = Some((start, size));
                s.num_computed = num_new;
                num_new
            }
            Memory::Paged(pool) => {
                self.hits.clear();
                let s = &self.slab[k];
                let last_key = BlockTable::find_hits(pool, bs, &s.segs, total, &mut self.hits);
                let num_hits = self.hits.len() as u64;
                let hit = num_hits * bs;
                let mut num_new = total - hit;
                if cfg.chunked_prefill {
                    num_new = num_new.min(budget);
                } else if num_new > budget {
                    return 0;
                }
                let free = u64::from(pool.num_free_blocks()) - self.outstanding;
                let evictable = BlockTable::num_evictable(pool, &self.hits);
                let first = (hit + num_new).div_ceil(bs) - num_hits;
                let need = if cfg.policy == Policy::Reserve {
                    peak_blocks(cfg, s) - num_hits
                } else if cfg.full_prompt_gate {
                    total.div_ceil(bs) - num_hits
                } else {
                    first
                };
                if need + evictable + cfg.watermark_blocks > free {
                    return 0;
                }
                self.new_blocks.clear();
                let mut table = BlockTable::start(
                    pool,
                    bs,
                    &self.hits,
                    last_key,
                    num_new,
                    &mut self.new_blocks,
                );
                let s = &mut self.slab[k];
                table.register_full_blocks(pool, bs, &s.segs);
                s.table = table;
                if cfg.policy == Policy::Reserve {
                    s.reserved_blocks = need - first;
                    self.outstanding += s.reserved_blocks;
                }
                s.num_computed = hit + num_new;
                let recomputed = s.computed_at_preemption.saturating_sub(hit);
                let c = &mut self.out.counters;
                c.prefix_hit_tokens += i128::from(hit);
                c.prompt_tokens_admitted += i128::from(total);
                c.recomputed_tokens += i128::from(recomputed);
                self.out.cached_tokens[s.row] += hit as i64;
                self.out.recomputed_tokens[s.row] += recomputed as i64;
                num_new
            }
        }
    }

    fn try_grow(&mut self, k: usize, num_new: u64) -> bool {
        let bs = self.cfg.block_size;
        let s = &mut self.slab[k];
        let Memory::Paged(pool) = &mut self.mem else {
            s.num_computed += num_new;
            return true;
        };
        let before = pool.num_free_blocks();
        self.new_blocks.clear();
        let Some(copied) = s.table.grow(pool, bs, num_new, &mut self.new_blocks) else {
            return false;
        };
        s.table.register_full_blocks(pool, bs, &s.segs);
        self.out.counters.num_cow_copies += i128::from(copied);
        let used = u64::from(before - pool.num_free_blocks());
        if s.reserved_blocks > 0 {
            let taken = used.min(s.reserved_blocks);
            s.reserved_blocks -= taken;
            self.outstanding -= taken;
        }
        s.num_computed += num_new;
        true
    }

    fn release(&mut self, k: usize) {
        let s = &mut self.slab[k];
        match &mut self.mem {
            Memory::Paged(pool) => {
                s.table.release(pool);
                self.outstanding -= s.reserved_blocks;
                s.reserved_blocks = 0;
            }
            Memory::Contiguous(space) => {
                let (start, size) = s.region.take().expect("a running sequence holds a region");
                space.free(start, size);
            }
        }
    }

    // -- scheduling ------------------------------------------------------------------------------------
    fn preempt(&mut self, k: usize) {
        self.release(k);
        let s = &mut self.slab[k];
        s.computed_at_preemption = s.num_computed;
        s.num_computed = 0;
        self.out.num_preemptions[s.row] += 1;
        self.out.counters.num_preemptions += 1;
        self.waiting.push_front(k);
    }

    fn reject_row(&mut self, row: usize, reason: i64) {
        self.out.status[row] = REJECTED;
        self.out.reject_reason[row] = reason;
        self.out.finish[row] = self.t;
        self.num_rejected += 1;
    }

    fn schedule(&mut self) {
        let cfg = self.cfg;
        let mut budget = cfg.max_num_batched_tokens;
        self.scheduled.clear();
        let mut preempted = false;
        let mut i = 0;
        'running: while i < self.running.len() && budget > 0 {
            let k = self.running[i];
            let s = &self.slab[k];
            let num_new = (s.num_tokens() - s.num_computed).min(budget);
            loop {
                if self.try_grow(k, num_new) {
                    self.scheduled.push((k, num_new));
                    budget -= num_new;
                    i += 1;
                    continue 'running;
                }
                let victim = self.running.pop().expect("the growing sequence is running");
                self.preempt(victim);
                preempted = true;
                if victim == k {
                    break 'running; // k was the tail: nothing after it
                }
            }
        }
        if preempted {
            return;
        }
        while let Some(&k) = self.waiting.front() {
            if budget == 0 || self.running.len() as u64 >= cfg.max_num_seqs {
                break;
            }
            let num_new = self.try_admit(k, budget);
            if num_new == 0 {
                if self.running.is_empty() {
                    self.waiting.pop_front();
                    let row = self.slab[k].row;
                    self.reject_row(row, reject::NEVER_ADMITTED);
                    self.remove(k);
                    continue;
                }
                break; // head-of-line blocking: a waiting request never preempts
            }
            self.waiting.pop_front();
            self.running.push(k);
            self.scheduled.push((k, num_new));
            budget -= num_new;
            let row = self.slab[k].row;
            if self.out.first_scheduled[row] < 0 {
                self.out.first_scheduled[row] = self.t;
            }
        }
    }

    fn step_time(&self) -> u64 {
        match self.cfg.time {
            TimeModel::Ticks { iteration_ps } => iteration_ps,
            TimeModel::Linear {
                c0_ps,
                c_tok_ps,
                c_ctx_ps,
            } => {
                let (mut tokens, mut context) = (0u64, 0u64);
                for &(k, n) in &self.scheduled {
                    tokens += n;
                    context += self.slab[k].num_computed;
                }
                c0_ps + c_tok_ps * tokens + c_ctx_ps * context
            }
        }
    }

    /// Time-weighted memory state during the step (after allocation, before finishing).
    fn measure(&mut self, dt: u64, batch: u64) {
        let bs = self.cfg.block_size;
        let (mut stored, mut internal, mut reserved, mut external, mut held, mut logical) =
            (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        let allocated;
        match &self.mem {
            Memory::Paged(pool) => {
                held = self.cfg.capacity_blocks() - u64::from(pool.num_free_blocks());
                for &k in &self.running {
                    let c = self.slab[k].num_computed;
                    internal += (bs - c % bs) % bs;
                    logical += c.div_ceil(bs);
                }
                allocated = held * bs;
                stored = allocated - internal;
                reserved = self.outstanding * bs;
            }
            Memory::Contiguous(space) => {
                let mut a = 0;
                for &k in &self.running {
                    let s = &self.slab[k];
                    let size = s.region.expect("running holds a region").1;
                    let fin = s.prompt_len + s.target;
                    a += size;
                    stored += s.num_computed;
                    reserved += fin - s.num_computed;
                    internal += size - fin;
                }
                allocated = a;
                external = space.external_fragmentation();
            }
        }
        let dt = i128::from(dt);
        let c = &mut self.out.counters;
        c.w_batch += dt * i128::from(batch);
        c.w_stored += dt * i128::from(stored);
        c.w_allocated += dt * i128::from(allocated);
        c.w_internal += dt * i128::from(internal);
        c.w_reserved += dt * i128::from(reserved);
        c.w_external += dt * i128::from(external);
        c.w_held_blocks += dt * i128::from(held);
        c.w_logical_blocks += dt * i128::from(logical);
        c.peak_allocated_tokens = c.peak_allocated_tokens.max(i128::from(allocated));
    }

    fn join(&mut self, row: usize) {
        let s = self.make_seq(row);
        let reason = self.reject_at_arrival(&s);
        if reason == 0 {
            let k = self.insert(s);
            self.waiting.push_back(k);
        } else {
            self.reject_row(row, reason);
        }
    }

    fn finish_step(&mut self) {
        let t = self.t;
        let mut done = Vec::new();
        for &(k, _) in &self.scheduled {
            let s = &mut self.slab[k];
            if s.num_computed == s.num_tokens() {
                s.generate_one();
                if self.out.first_token[s.row] < 0 {
                    self.out.first_token[s.row] = t;
                }
                if s.generated == s.target {
                    done.push(k);
                }
            }
        }
        for &k in &done {
            self.release(k);
            let row = self.slab[k].row;
            self.out.status[row] = FINISHED;
            self.out.finish[row] = t;
            self.out.generated[row] = self.slab[k].generated as i64;
        }
        if !done.is_empty() {
            self.running.retain(|k| !done.contains(k));
            for k in done {
                self.remove(k);
            }
        }
    }

    /// Runs to completion. `interrupted` is polled every few thousand steps; when it returns true
    /// the run stops with an error (Ctrl-C from Python).
    pub fn run(mut self, interrupted: &mut dyn FnMut() -> bool) -> Result<EngineOutput> {
        let n = self.inp.len();
        let mut nxt = 0usize;
        loop {
            while nxt < n && self.inp.arrival_ps[nxt] <= self.t {
                self.join(nxt);
                nxt += 1;
            }
            if self.running.is_empty() && self.waiting.is_empty() {
                if nxt == n {
                    break;
                }
                self.t = self.inp.arrival_ps[nxt];
                continue;
            }
            let rejected_before = self.num_rejected;
            self.schedule();
            if self.scheduled.is_empty() {
                if self.num_rejected == rejected_before {
                    return Err(KvError::Internal(format!(
                        "no progress at time {} ps",
                        self.t
                    )));
                }
                continue; // every waiting head was rejected; no time passes
            }
            let dt = self.step_time();
            let batch = self.scheduled.len() as u64;
            self.measure(dt, batch);
            self.t += dt as i64;
            let c = &mut self.out.counters;
            c.num_steps += 1;
            c.busy_ps += i128::from(dt);
            c.sum_batch += i128::from(batch);
            c.sum_batched_tokens += self
                .scheduled
                .iter()
                .map(|&(_, n)| i128::from(n))
                .sum::<i128>();
            c.peak_batch = c.peak_batch.max(i128::from(batch));
            self.finish_step();
            if c_steps(&self.out.counters) % INTERRUPT_EVERY == 0 && interrupted() {
                return Err(KvError::InvalidOperation("interrupted".into()));
            }
        }
        if let Memory::Paged(pool) = &self.mem {
            self.out.counters.num_evictions = i128::from(pool.num_evictions());
        }
        self.out.counters.makespan_ps = i128::from(self.t);
        Ok(self.out)
    }
}

fn c_steps(c: &Counters) -> u64 {
    c.num_steps as u64
}

/// Simulates every sequence of `inp` under `cfg`.
pub fn run(
    inp: EngineInput<'_>,
    cfg: &EngineConfig,
    interrupted: &mut dyn FnMut() -> bool,
) -> Result<EngineOutput> {
    Engine::new(inp, cfg)?.run(interrupted)
}
