//! The engine: scheduler + memory model over a whole workload (SPEC §4–6), returning per-sequence
//! columns and integer counters. `python/kvsim/reference/engine.py` is the executable spec: this module
//! follows it rule for rule (DESIGN.md §Engine), and the differential tests compare the two exactly.

pub mod config;
pub mod contiguous;
mod input;
mod lockstep;
mod output;
mod stepped;
mod stream;

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicBool, Ordering};

pub use config::{EngineConfig, Policy, Preemption, TimeModel};
pub use input::EngineInput;
pub use output::{Counters, EngineOutput};
pub use stream::StreamEngine;
pub(crate) use stream::{Buffers, forever};

use crate::block_pool::IdHasher;
use crate::block_table::{BlockTable, blocks_for, rem_bs};
use crate::{BlockId, BlockKey, BlockPool, KvError, Result, Segment, invalid_arg};
use contiguous::{Buddy, FirstFit, Space};

/// Event log kinds, shared with `kvsim.reference.engine.EVENT_KINDS`.
pub mod event {
    pub const ADMIT: i64 = 0;
    pub const ALLOCATE: i64 = 1;
    pub const PREFIX_HIT: i64 = 2;
    pub const COW_COPY: i64 = 3;
    pub const EVICT: i64 = 4;
    pub const FREE: i64 = 5;
    pub const PREEMPT: i64 = 6;
    pub const SWAP_OUT: i64 = 7;
    pub const SWAP_IN: i64 = 8;
    pub const FINISH: i64 = 9;
    pub const REJECT: i64 = 10;
    pub const FORK: i64 = 11;
    /// The tokens a sequence computes in a step that is not plain (see `Engine::log_schedule`).
    pub const SCHEDULE: i64 = 12;
}

/// Reject reasons, shared with `kvsim.reference.engine.REJECT_REASONS`.
pub mod reject {
    pub const NO_ROOM_TO_GENERATE: i64 = 1;
    pub const EXCEEDS_POOL: i64 = 2;
    pub const EXCEEDS_ADDRESS_SPACE: i64 = 3;
    pub const EXCEEDS_STEP_BUDGET: i64 = 4;
    pub const NEVER_ADMITTED: i64 = 5;
    pub const NEVER_SWAPPED_IN: i64 = 6;
    pub const EXCEEDS_SEATS: i64 = 7;
}

const FINISHED: i8 = 0;
/// Segment ids at or above this name generated tokens (`kvsim.segments.OUTPUT_BIT`).
pub(crate) const OUTPUT_BIT: u64 = 1 << 63;
/// `try_admit`: this sequence can never start.
const NEVER: u64 = u64::MAX;
/// `try_admit`: chunked prefill off, more tokens than the budget left, and `skip_over_budget`.
const SKIP: u64 = u64::MAX - 1;
const REJECTED: i8 = 1;

/// The simulated clock's range (2^62 ps, about 53 days): a step that would end past it is an error (the
/// time model's coefficients are too large for the workload), in both engines alike.
pub const MAX_TIME_PS: u64 = 1 << 62;
/// Spacing of admission numbers: a group's samples take the numbers right after their parent's, so the
/// running list stays sorted by admission number with each group together.
const ADM_STRIDE: u64 = 1 << 32;

/// A live sequence: waiting or running. Finished and rejected ones leave the slab.
///
/// Laid out by hand (`repr(C)`, one sequence per run of whole cache lines): a lockstep event reads and
/// writes the first three lines only (counters, block table, flags); the rest is for admission,
/// preemption and hashing.
#[derive(Debug, Default)]
#[repr(C, align(64))]
#[allow(clippy::struct_excessive_bools)] // independent flags of one sequence's life
struct Seq {
    // -- line 0: the lockstep state and the counters it advances.
    /// Order of (re)admission: the running list is sorted by it, and so are same-step events.
    adm_no: u64,
    /// Lockstep mode (lockstep.rs): this sequence decodes one token per step from `base_step`, when it had
    /// computed `base_c` and generated `base_g` tokens; `next_event` is the next step it must be touched.
    next_event: u64,
    base_step: u64,
    base_c: u64,
    base_g: u64,
    target: u64,
    num_computed: u64,
    generated: u64,
    // -- line 1: the block table (its key of the last registered block spills into line 2).
    table: BlockTable,
    // -- line 2.
    reserved_blocks: u64,
    /// Start of the first prompt segment no other sequence's prompt contains (`prompt_len` if none):
    /// from there on, only this sequence can ever look its blocks up (see `defer_keys`).
    private_from: u64,
    lazy: bool,
    /// Sampled a token since its (re)admission started it over: it decodes (`one_free_block` applies).
    decoding: bool,
    retiring: bool,
    admitted_before: bool,
    /// fork-cow: the next `num_children` rows are samples forked from this one at its first token.
    forked: bool,
    num_children: usize,
    row: usize,
    prompt_len: u64,
    // -- cold.
    /// Prompt segments, then this sequence's output segment once it has generated a token.
    segs: Vec<Segment>,
    max_gen: u64,
    output_seg: u64,
    computed_at_preemption: u64,
    region: Option<(u64, u64)>,
    /// Blocks held in the CPU pool while swapped out (a group's: on its first member).
    swapped_blocks: u64,
    /// fork-cow: the sequence group (vLLM v0) this sample belongs to since its fork, named by sample 0's
    /// row. A group sits together in the running list and is scheduled, preempted and swapped as one.
    group: Option<usize>,
    /// A swapped group, on its first member: the members (running order) and the leading blocks they
    /// share.
    members: Vec<usize>,
    shared_blocks: u64,
    /// While waiting: the keys a lookup walks, for `keys_for` tokens of content (recomputed only when
    /// the content grew, so a blocked head is not rehashed every step).
    keys: Vec<BlockKey>,
    keys_for: u64,
}

impl Seq {
    #[inline]
    fn num_tokens(&self) -> u64 {
        self.prompt_len + self.generated
    }

    /// Running slots this sequence takes when admitted: itself, plus the samples it will fork.
    #[inline]
    fn seats(&self) -> u64 {
        1 + if self.forked {
            0
        } else {
            self.num_children as u64
        }
    }

    fn generate_one(&mut self) {
        self.set_generated(self.generated + 1);
        self.decoding = true;
    }

    /// Sets the generated count. The output segment that names those tokens is added with the first
    /// one; its length is brought up to date by `sync_output`, before anything hashes `segs`.
    #[inline]
    fn set_generated(&mut self, g: u64) {
        if g > 0 && self.generated == 0 {
            self.segs.push(Segment::new(self.output_seg, g));
        }
        self.generated = g;
    }

    /// Makes the output segment's length the generated count (before `segs` is hashed).
    #[inline]
    fn sync_output(&mut self) {
        if self.generated > 0 {
            self.segs.last_mut().expect("output segment").len = self.generated;
        }
    }
}

/// The region a contiguous policy reserves for a sequence, in token slots.
fn region_size(cfg: &EngineConfig, s: &Seq) -> u64 {
    match cfg.policy {
        Policy::Static => cfg.max_model_len.unwrap_or(0),
        Policy::OrcaMax => s.prompt_len + s.max_gen,
        Policy::OrcaPow2 => s.prompt_len + s.target.max(1).next_power_of_two(),
        _ => s.prompt_len + s.target, // orca-oracle: exactly what it will generate
    }
}

/// What `try_admit` answers for a whole prompt (chunked prefill off) over the budget left: 0 (wait: the
/// waiting phase ends, vLLM ≥ 0.12) or `SKIP` (try the next one, vLLM 0.9.2 to 0.11.2).
fn over_budget(cfg: &EngineConfig) -> u64 {
    if cfg.skip_over_budget { SKIP } else { 0 }
}

/// Blocks held at the sequence's largest (its last token's K/V is never computed); `reserve` promises
/// room for every token it may generate.
fn peak_blocks(cfg: &EngineConfig, s: &Seq) -> u64 {
    if cfg.policy == Policy::Reserve {
        blocks_for(s.prompt_len + s.max_gen, cfg.block_size)
    } else {
        blocks_for(s.prompt_len + s.target - 1, cfg.block_size)
    }
}

/// What `record` weighs by time: token slots stored, allocated, wasted inside blocks or regions,
/// promised for later, stranded between regions; blocks held and blocks the tables cover.
#[derive(Clone, Copy, Debug, Default)]
struct MemoryState {
    stored: u64,
    allocated: u64,
    internal: u64,
    reserved: u64,
    external: u64,
    held: u64,
    logical: u64,
}

enum Memory {
    Paged(BlockPool),
    Contiguous(Space),
}

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
    scheduled: Vec<(usize, u64)>,
    /// Waiting sequences skipped in this step's waiting phase (`skip_over_budget`), in skip order.
    skipped: Vec<usize>,
    hits: Vec<BlockId>,
    new_blocks: Vec<BlockId>,
    num_rejected: u64,
    /// Set (to the step) when a step would end past `MAX_TIME_PS`: `run` stops with an error.
    clock_overflow: Option<u64>,
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
    /// Event sequences touched in the current lockstep step, in admission order.
    touched: Vec<usize>,
    done: Vec<usize>,
    /// Paged memory: `record` sums held blocks only (allocated and stored follow from them at the end).
    peak_held: u64,
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
}

/// Sums over running sequences of what `measure` needs, kept incrementally in lockstep mode.
#[derive(Clone, Copy, Debug, Default)]
struct Aggregates {
    /// Tokens computed (after the current step's allocation).
    c: u64,
    /// Paged: unused slots in partially filled last blocks.
    internal: i64,
    /// Paged: blocks the sequences' tables cover (shared blocks counted per holder).
    logical: u64,
    /// Contiguous: prompt + target tokens, and region sizes.
    fin: u64,
    size: u64,
}

/// Per row: the start of its first prompt segment that no other row's prompt contains (its prompt length
/// if none). Sorting the ids finds those that occur more than once (usually few); only their segments
/// go through a map, which decides whether they are in more than one prompt. (A hash map over every id
/// of a million-request workload was a cache miss per lookup.)
pub(crate) fn private_starts(inp: &EngineInput<'_>) -> Vec<u64> {
    let n = inp.len();
    let mut ids = inp.segment_id.to_vec();
    ids.sort_unstable();
    let mut repeated: Vec<u64> = ids
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    repeated.dedup();
    drop(ids);
    // Repeated id -> (the first row holding it, whether another row holds it too).
    let mut rows: HashMap<u64, (usize, bool), BuildHasherDefault<IdHasher>> = HashMap::default();
    if !repeated.is_empty() {
        for r in 0..n {
            for &id in &inp.segment_id[inp.seg_offsets[r] as usize..inp.seg_offsets[r + 1] as usize]
            {
                if repeated.binary_search(&id).is_ok() {
                    let e = rows.entry(id).or_insert((r, false));
                    e.1 |= e.0 != r;
                }
            }
        }
    }
    (0..n)
        .map(|r| {
            let (lo, hi) = (inp.seg_offsets[r] as usize, inp.seg_offsets[r + 1] as usize);
            let mut start = 0u64;
            for (id, &len) in inp.segment_id[lo..hi].iter().zip(&inp.segment_len[lo..hi]) {
                if !rows.get(id).is_some_and(|e| e.1) {
                    return start;
                }
                start += len as u64;
            }
            start
        })
        .collect()
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
        cfg.validate()?;
        inp.validate()?;
        if inp.has_forks() {
            if cfg.policy != Policy::Vllm {
                invalid_arg!(
                    "sampling 'fork-cow' (rows with a fork_parent) applies to policy 'vllm'"
                );
            }
            if cfg.max_num_batched_tokens < cfg.max_num_seqs {
                invalid_arg!(
                    "sampling 'fork-cow' needs max_num_batched_tokens >= max_num_seqs (vLLM v0's rule), got max_num_batched_tokens {} < max_num_seqs {}",
                    cfg.max_num_batched_tokens,
                    cfg.max_num_seqs
                );
            }
        }
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
        let defer_keys = !inp.segment_id.iter().any(|&id| id >= OUTPUT_BIT);
        let private_from = if defer_keys && cfg.enable_prefix_caching && cfg.policy.is_paged() {
            private_starts(&inp)
        } else {
            Vec::new()
        };
        // Longer than a block (see `next_event`).
        let ring_len = ((cfg.block_size + 1).max(64) as usize).next_power_of_two();
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
            fresh: VecDeque::new(),
            swapped: VecDeque::new(),
            cpu_used: 0,
            swap_blocks_step: 0,
            running: Vec::new(),
            scheduled: Vec::new(),
            skipped: Vec::new(),
            hits: Vec::new(),
            new_blocks: Vec::new(),
            num_rejected: 0,
            clock_overflow: None,
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
            touched: Vec::new(),
            done: Vec::new(),
            peak_held: 0,
            writers: Vec::new(),
            cancel: None,
            row_base: 0,
            out_base: 0,
            nxt: 0,
            final_input: true,
            horizon: i64::MAX,
        })
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

    fn reject_at_arrival(&self, s: &Seq) -> i64 {
        let cfg = self.cfg;
        if s.target < 1 {
            reject::NO_ROOM_TO_GENERATE
        } else if cfg.policy.is_paged() && peak_blocks(cfg, s) > cfg.capacity_blocks() {
            reject::EXCEEDS_POOL
        } else if let Memory::Contiguous(space) = &self.mem
            && region_size(cfg, s) > space.max_region()
        {
            reject::EXCEEDS_ADDRESS_SPACE
        } else if s.seats() > cfg.max_num_seqs {
            reject::EXCEEDS_SEATS
        } else {
            0
        }
    }

    // -- slab ------------------------------------------------------------------------------------------
    /// A slab slot holding a fresh sequence for `row` (a recycled slot keeps its vectors' buffers).
    fn new_seq(&mut self, row: usize) -> usize {
        let k = self.free_slots.pop().unwrap_or_else(|| {
            self.slab.push(Seq::default());
            self.slab.len() - 1
        });
        let inp = &self.inp;
        let i = row - self.row_base;
        let (lo, hi) = (inp.seg_offsets[i] as usize, inp.seg_offsets[i + 1] as usize);
        let num_children = self.num_children(row);
        let private_from = self
            .private_from
            .get(i)
            .copied()
            .unwrap_or(inp.prompt_len[i] as u64);
        let old = &mut self.slab[k];
        let mut segs = std::mem::take(&mut old.segs);
        let mut blocks = std::mem::take(&mut old.table.blocks);
        let mut keys = std::mem::take(&mut old.keys);
        segs.clear();
        blocks.clear();
        keys.clear();
        segs.extend((lo..hi).map(|k| Segment::new(inp.segment_id[k], inp.segment_len[k] as u64)));
        *old = Seq {
            row,
            private_from,
            segs,
            prompt_len: inp.prompt_len[i] as u64,
            target: inp.target[i] as u64,
            max_gen: inp.max_gen[i] as u64,
            output_seg: inp.output_seg[i],
            num_children,
            table: BlockTable {
                blocks,
                ..BlockTable::default()
            },
            keys,
            ..Seq::default()
        };
        k
    }

    /// Frees slot `k` for `new_seq` (its table is already released).
    fn remove(&mut self, k: usize) {
        self.free_slots.push(k);
    }

    // -- memory ----------------------------------------------------------------------------------------
    /// Allocates a waiting sequence's first chunk; returns its token count, 0 if it cannot start now,
    /// `NEVER` if it never can (chunked prefill off and more tokens than a step's budget), or `SKIP` (see
    /// `over_budget`).
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
            Memory::Paged(pool) => {
                self.hits.clear();
                let s = &mut self.slab[k];
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
                let last_key = BlockTable::find_hits_cached(pool, &s.keys, &mut self.hits);
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
                    blocks_for(total, bs) - num_hits
                } else {
                    first
                };
                if need + evictable + cfg.watermark_blocks > free {
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
                    s.reserved_blocks = need - first;
                    self.outstanding += s.reserved_blocks;
                }
                s.num_computed = hit + num_new;
                self.note_admission(k, hit, total);
                num_new
            }
        }
    }

    /// Counters, row columns and events of a paged admission that took `hit` cached tokens of `total`.
    fn note_admission(&mut self, k: usize, hit: u64, total: u64) {
        let s = &mut self.slab[k];
        let recomputed = s.computed_at_preemption.saturating_sub(hit);
        let c = &mut self.out.counters;
        c.prefix_hit_tokens += i128::from(hit);
        c.prompt_tokens_admitted += i128::from(total);
        if !s.admitted_before {
            // Hits on a first admission: sharing between requests, not resumes.
            s.admitted_before = true;
            c.first_hit_tokens += i128::from(hit);
            c.first_prompt_tokens += i128::from(total);
        }
        c.recomputed_tokens += i128::from(recomputed);
        self.out.cached_tokens[s.row - self.out_base] += hit as i64;
        self.out.recomputed_tokens[s.row - self.out_base] += recomputed as i64;
        if self.log.is_some() {
            let row = s.row;
            self.log(event::ADMIT, row, -1);
            for i in 0..self.hits.len() {
                let b = i64::from(self.hits[i].0);
                self.log(event::PREFIX_HIT, row, b);
            }
            self.log_allocations(row, event::ALLOCATE);
        }
    }

    /// Room for `num_new` more tokens of running `k`; false, changing nothing, if they do not fit.
    /// `check = false`: a group member whose group's room was checked as a whole (`group_fits`).
    fn try_grow(&mut self, k: usize, num_new: u64, check: bool) -> bool {
        let bs = self.cfg.block_size;
        let s = &mut self.slab[k];
        let Memory::Paged(pool) = &mut self.mem else {
            s.num_computed += num_new;
            return true;
        };
        if check && self.cfg.one_free_block && s.decoding && pool.num_free_blocks() == 0 {
            return false; // vLLM v0: every decoding sequence scheduled wants a free block, needed or not
        }
        self.new_blocks.clear();
        let Some(copied) = s.table.grow(pool, bs, num_new, &mut self.new_blocks) else {
            return false;
        };
        let phantom = self.defer_keys.then_some(s.private_from);
        s.sync_output();
        s.table
            .register_full_blocks_cached(pool, bs, &s.segs, &[], phantom);
        let row = s.row;
        if copied {
            self.out.counters.num_cow_copies += 1;
        }
        if s.reserved_blocks > 0 {
            let taken = (self.new_blocks.len() as u64).min(s.reserved_blocks);
            s.reserved_blocks -= taken;
            self.outstanding -= taken;
        }
        s.num_computed += num_new;
        if self.log.is_some() && !self.new_blocks.is_empty() {
            self.log_allocations(
                row,
                if copied {
                    event::COW_COPY
                } else {
                    event::ALLOCATE
                },
            );
        }
        true
    }

    fn release(&mut self, k: usize) {
        if self.log.is_some() {
            let row = self.slab[k].row;
            for i in (0..self.slab[k].table.blocks().len()).rev() {
                let b = i64::from(self.slab[k].table.blocks()[i].0);
                self.log(event::FREE, row, b);
            }
        }
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
    /// End (exclusive) of the scheduling unit starting at `running[i]`: a sequence, or its group.
    fn unit_end(&self, i: usize) -> usize {
        let mut j = i + 1;
        if let Some(g) = self.slab[self.running[i]].group {
            while j < self.running.len() && self.slab[self.running[j]].group == Some(g) {
                j += 1;
            }
        }
        j
    }

    /// Takes the running list's tail unit (a sequence, or a whole group) out, in running order.
    fn pop_tail_unit(&mut self) -> Vec<usize> {
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
    fn preempt_unit(&mut self, unit: &[usize]) {
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
    fn preempt_tail(&mut self, k: usize) -> bool {
        let victim = self.pop_tail_unit();
        let own = victim[0] == k;
        self.preempt_unit(&victim);
        own
    }

    /// Moves a unit's `n` blocks to the CPU pool (the first `shared` of its tables once), its samples
    /// from the last; it waits in the swapped queue as one, named by its first sample (which keeps the
    /// members of a group).
    fn swap_out(&mut self, unit: &[usize], shared: u64, n: u64) {
        for &k in unit.iter().rev() {
            let row = self.slab[k].row;
            self.out.num_preemptions[row - self.out_base] += 1;
            self.out.counters.num_preemptions += 1;
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

    /// Blocks the group `running[i..j]` pops for one more token each, in order: a new block at a block
    /// boundary, a copy of a shared partial last block (its last holder writes in place).
    fn group_need(&mut self, i: usize, j: usize) -> u64 {
        let Memory::Paged(pool) = &self.mem else {
            unreachable!("groups are paged only")
        };
        let bs = self.cfg.block_size;
        let mut writers = std::mem::take(&mut self.writers);
        writers.clear();
        let mut need = 0;
        for &k in &self.running[i..j] {
            let s = &self.slab[k];
            let blocks = s.table.blocks();
            need += blocks_for(s.num_computed + 1, bs) - blocks.len() as u64;
            if rem_bs(s.num_computed, bs) != 0 {
                let last = *blocks.last().expect("a partial block");
                let pos = writers.iter().position(|&(b, _)| b == last);
                let copied = pos.map_or(0, |p| writers[p].1);
                if pool.ref_cnt_of(last) - copied > 1 {
                    need += 1;
                    match pos {
                        Some(p) => writers[p].1 += 1,
                        None => writers.push((last, 1)),
                    }
                }
            }
        }
        self.writers = writers;
        need
    }

    /// vLLM v0's `can_append_slots` for the group `running[i..j]`: its blocks fit (and, with
    /// `one_free_block`, a block is free for every member).
    fn group_fits(&mut self, i: usize, j: usize) -> bool {
        let free = match &self.mem {
            Memory::Paged(pool) => u64::from(pool.num_free_blocks()),
            Memory::Contiguous(_) => unreachable!("groups are paged only"),
        };
        if self.cfg.one_free_block && (j - i) as u64 > free {
            return false;
        }
        self.group_need(i, j) <= free
    }

    /// Swaps `k` out to the CPU pool if `swap` and its blocks fit there, else frees it for recomputation
    /// (to the front of the waiting queue, starting over from token 0). A sample preempted on its own
    /// leaves its group: it comes back as a sequence of its own.
    fn preempt(&mut self, k: usize, swap: bool) {
        self.slab[k].group = None;
        if swap {
            let n = self.slab[k].table.blocks().len() as u64;
            if n <= self.cfg.cpu_blocks - self.cpu_used {
                self.swap_out(&[k], 0, n);
                return;
            }
        }
        let row = self.slab[k].row;
        self.out.num_preemptions[row - self.out_base] += 1;
        self.out.counters.num_preemptions += 1;
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
        self.waiting.push_front(k);
    }

    /// Brings swapped `k` back into fresh blocks (its content returns from the CPU; full blocks get
    /// their keys again) with room for its next chunk; returns the chunk's tokens, or 0 if it does not fit.
    fn try_swap_in(&mut self, k: usize, budget: u64) -> u64 {
        let cfg = self.cfg;
        let bs = cfg.block_size;
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
        if need + cfg.watermark_blocks > u64::from(pool.num_free_blocks()) {
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
    fn try_swap_in_group(&mut self, members: &[usize], budget: u64) -> u64 {
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
        let Memory::Paged(pool) = &mut self.mem else {
            unreachable!("swap is paged only")
        };
        let blocks = self.slab[head].swapped_blocks;
        if blocks + grow + cfg.watermark_blocks > u64::from(pool.num_free_blocks()) {
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

    /// The swap-in phase: swapped sequences and groups return FCFS before any new admission; returns
    /// the budget left. Admission of waiting sequences happens only once nothing is swapped out.
    fn admit_swapped(&mut self, mut budget: u64) -> u64 {
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

    /// Rejects `row` and the `num_children` sample rows it would have forked, now.
    fn reject_rows(&mut self, row: usize, num_children: usize, reason: i64) {
        for r in row..=row + num_children {
            self.log(event::REJECT, r, -1);
            self.out.status[r - self.out_base] = REJECTED;
            self.out.reject_reason[r - self.out_base] = reason as i8;
            self.out.finish[r - self.out_base] = self.t;
        }
        self.num_rejected += 1;
    }

    /// Rejects waiting sequence `k` (and its unforked samples) and drops it.
    fn reject_seq(&mut self, k: usize, reason: i64) {
        let s = &self.slab[k];
        let children = if s.forked { 0 } else { s.num_children };
        self.reject_rows(s.row, children, reason);
        self.remove(k);
    }

    /// fork-cow (paper §4.4): after `k` samples its first token, each of its samples starts sharing
    /// every block (copy-on-write) with its own first token; those already finished go to `done`.
    /// Returns the new slab indices in sample order.
    fn fork(&mut self, k: usize) -> std::ops::Range<usize> {
        let Memory::Paged(_) = &self.mem else {
            unreachable!("fork-cow is paged only")
        };
        self.slab[k].forked = true;
        let (row, n) = (self.slab[k].row, self.slab[k].num_children);
        self.slab[k].group = Some(row);
        let parent_adm = self.slab[k].adm_no;
        // Right after the parent (the running list is sorted by admission number).
        let at = self
            .running
            .partition_point(|&j| self.slab[j].adm_no <= parent_adm);
        let mut children = Vec::with_capacity(n);
        for child_row in row + 1..=row + n {
            self.log(event::FORK, child_row, -1);
            let ck = self.new_seq(child_row);
            let Memory::Paged(pool) = &mut self.mem else {
                unreachable!()
            };
            let table = self.slab[k].table.fork(pool);
            let num_computed = self.slab[k].num_computed;
            let c = &mut self.slab[ck];
            c.table = table;
            c.num_computed = num_computed;
            c.set_generated(1);
            c.decoding = true;
            c.admitted_before = true; // admitted with its parent: a later admission is a resume
            c.group = Some(row);
            c.adm_no = parent_adm + (child_row - row) as u64;
            let done = c.generated == c.target;
            self.out.first_scheduled[child_row - self.out_base] =
                self.out.first_scheduled[row - self.out_base];
            self.out.first_token[child_row - self.out_base] = self.t;
            children.push(ck);
            if done {
                self.done.push(ck);
            }
        }
        self.running.splice(at..at, children);
        at..at + n
    }

    fn schedule(&mut self) {
        let cfg = self.cfg;
        let mut budget = cfg.max_num_batched_tokens;
        self.scheduled.clear();
        let mut preempted = false;
        let mut i = 0;
        'running: while i < self.running.len() && budget > 0 {
            if self.cancelled() {
                return;
            }
            let j = if self.forks { self.unit_end(i) } else { i + 1 };
            let k = self.running[i];
            if j - i > 1 {
                // A group (vLLM v0): all its samples or none, a token each; its room checked as a whole.
                if (j - i) as u64 > budget {
                    break;
                }
                while !self.group_fits(i, j) {
                    preempted = true;
                    if self.preempt_tail(k) {
                        break 'running; // the group was the tail: nothing after it
                    }
                }
                for idx in i..j {
                    let m = self.running[idx];
                    let grown = self.try_grow(m, 1, false);
                    assert!(grown, "the group's room was checked");
                    self.scheduled.push((m, 1));
                }
                budget -= (j - i) as u64;
                i = j;
                continue;
            }
            let s = &self.slab[k];
            let num_new = (s.num_tokens() - s.num_computed).min(budget);
            loop {
                if self.try_grow(k, num_new, true) {
                    self.scheduled.push((k, num_new));
                    budget -= num_new;
                    i += 1;
                    continue 'running;
                }
                preempted = true;
                if self.preempt_tail(k) {
                    break 'running; // k was the tail: nothing after it
                }
            }
        }
        if !preempted {
            self.admit_waiting(budget);
        }
    }

    /// The waiting phase: admits FCFS from the head while budget, seats and memory allow, appending each
    /// admitted sequence to `scheduled`. A head that cannot start blocks the rest (head-of-line), unless
    /// nothing runs at all: then it can never start and is rejected.
    fn admit_waiting(&mut self, budget: u64) {
        let mut budget = self.admit_swapped(budget);
        if !self.swapped.is_empty() {
            return;
        }
        let cfg = self.cfg;
        while budget > 0 {
            let Some(k) = self.waiting_head() else {
                break;
            };
            if self.running.len() as u64 + self.slab[k].seats() > cfg.max_num_seqs {
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
            if num_new == SKIP {
                self.waiting.pop_front();
                self.skipped.push(k);
                continue;
            }
            if num_new == 0 {
                if self.running.is_empty() {
                    self.waiting.pop_front();
                    self.reject_seq(k, reject::NEVER_ADMITTED);
                    continue;
                }
                break; // head-of-line blocking: a waiting request never preempts
            }
            self.waiting.pop_front();
            self.running.push(k);
            self.scheduled.push((k, num_new));
            budget -= num_new;
            let s = &mut self.slab[k];
            s.adm_no = self.next_adm;
            self.next_adm += ADM_STRIDE;
            if self.out.first_scheduled[s.row - self.out_base] < 0 {
                self.out.first_scheduled[s.row - self.out_base] = self.t;
            }
            if self.cancelled() {
                break; // after an admission: a blocked head costs no check
            }
        }
        // vLLM 0.9.2-0.11.2 put skipped requests back at the head in reverse order (`prepend_request`
        // into a queue, then `prepend_requests`, which reversed it once more): the last skipped first.
        for &k in &self.skipped {
            self.waiting.push_front(k);
        }
        self.skipped.clear();
    }

    fn step_time(&mut self) -> (u64, u64) {
        let (mut tokens, mut context) = (0u64, 0u64);
        for &(k, n) in &self.scheduled {
            tokens += n;
            context += self.slab[k].num_computed;
        }
        (self.linear_time(tokens, context), tokens)
    }

    /// Memory state during the step (after allocation, before finishing), by walking the running list.
    fn memory_state(&self) -> MemoryState {
        let bs = self.cfg.block_size;
        let mut m = MemoryState::default();
        match &self.mem {
            Memory::Paged(pool) => {
                m.held = self.cfg.capacity_blocks() - u64::from(pool.num_free_blocks());
                // A partial block shared by forked samples (until their first write) counts once.
                let mut shared_partial: Vec<BlockId> = Vec::new();
                for &k in &self.running {
                    let s = &self.slab[k];
                    let c = s.num_computed;
                    m.logical += blocks_for(c, bs);
                    if rem_bs(c, bs) == 0 {
                        continue;
                    }
                    let last = *s.table.blocks().last().expect("a partial block");
                    if pool.ref_cnt_of(last) > 1 {
                        if shared_partial.contains(&last) {
                            continue;
                        }
                        shared_partial.push(last);
                    }
                    m.internal += bs - rem_bs(c, bs);
                }
                m.allocated = m.held * bs;
                m.stored = m.allocated - m.internal;
                m.reserved = self.outstanding * bs;
            }
            Memory::Contiguous(space) => {
                for &k in &self.running {
                    let s = &self.slab[k];
                    let size = s.region.expect("running holds a region").1;
                    let fin = s.prompt_len + s.target;
                    m.allocated += size;
                    m.stored += s.num_computed;
                    m.reserved += fin - s.num_computed;
                    m.internal += size - fin;
                }
                m.external = space.external_fragmentation();
            }
        }
        m
    }

    /// Adds one step of `dt` picoseconds to the counters.
    #[inline]
    fn record(&mut self, dt: u64, batch: u64, tokens: u64, m: MemoryState) {
        if (self.t as u64).saturating_add(dt) > MAX_TIME_PS {
            self.clock_overflow = Some(self.step);
            return;
        }
        if self.ts_every > 0 && self.step % self.ts_every == 0 {
            let free = self.cfg.capacity_tokens() - m.allocated;
            self.out.timeseries.push([
                self.step as i64,
                self.t,
                batch as i64,
                tokens as i64,
                free as i64,
                m.stored as i64,
                m.allocated as i64,
                m.internal as i64,
                m.reserved as i64,
                m.external as i64,
            ]);
        }
        // One 64x64->128 multiply each (the products fit: both factors are below 2^64).
        let w = |x: u64| (u128::from(dt) * u128::from(x)) as i128;
        let c = &mut self.out.counters;
        c.w_batch += w(batch);
        c.w_internal += w(m.internal);
        if m.reserved != 0 {
            c.w_reserved += w(m.reserved);
        }
        if matches!(self.mem, Memory::Paged(_)) {
            // Allocated = held x block size and stored = allocated - internal: summed once at the end.
            c.w_held_blocks += w(m.held);
            c.w_logical_blocks += w(m.logical);
            self.peak_held = self.peak_held.max(m.held);
        } else {
            c.w_stored += w(m.stored);
            c.w_allocated += w(m.allocated);
            c.peak_allocated_tokens = c.peak_allocated_tokens.max(i128::from(m.allocated));
            if m.external != 0 {
                c.w_external += w(m.external);
            }
        }
        c.num_steps += 1;
        c.busy_ps += i128::from(dt);
        c.sum_batch += i128::from(batch);
        c.sum_batched_tokens += i128::from(tokens);
        c.peak_batch = c.peak_batch.max(i128::from(batch));
        self.t += dt as i64;
        self.step += 1;
    }

    /// The step's duration: the time model, plus PCIe time for the blocks swapped out or in.
    fn linear_time(&mut self, tokens: u64, context: u64) -> u64 {
        let swap =
            std::mem::take(&mut self.swap_blocks_step).saturating_mul(self.cfg.swap_ps_per_block);
        // Saturating: a step too long for the clock (`MAX_TIME_PS`) stops the run in `record`.
        swap.saturating_add(match self.cfg.time {
            TimeModel::Ticks { iteration_ps } => iteration_ps,
            TimeModel::Linear {
                c0_ps,
                c_tok_ps,
                c_ctx_ps,
            } => c0_ps
                .saturating_add(c_tok_ps.saturating_mul(tokens))
                .saturating_add(c_ctx_ps.saturating_mul(context)),
        })
    }

    fn join(&mut self, row: usize) {
        let i = row - self.row_base;
        if self.inp.fork_parent(i) >= 0 {
            return; // a fork-cow sample: it starts when its parent samples its first token
        }
        let inp = &self.inp;
        // What `reject_at_arrival` reads, without building the sequence (no heap).
        let probe = Seq {
            prompt_len: inp.prompt_len[i] as u64,
            target: inp.target[i] as u64,
            max_gen: inp.max_gen[i] as u64,
            num_children: self.num_children(row),
            ..Seq::default()
        };
        let reason = self.reject_at_arrival(&probe);
        if reason == 0 {
            self.fresh.push_back(row);
        } else {
            self.reject_rows(row, probe.num_children, reason);
        }
    }

    /// The fork-cow samples of `row`: the rows right after it that name it as their parent (parents
    /// are global row numbers).
    fn num_children(&self, row: usize) -> usize {
        self.inp
            .fork_parent
            .get(row - self.row_base + 1..)
            .unwrap_or_default()
            .iter()
            .take_while(|&&p| p == row as i64)
            .count()
    }

    /// Nothing waits to be admitted (neither built sequences nor fresh rows).
    #[inline]
    fn nothing_waits(&self) -> bool {
        self.waiting.is_empty() && self.fresh.is_empty()
    }

    /// The head of the waiting queue, its sequence built if it was a fresh row.
    #[inline]
    fn waiting_head(&mut self) -> Option<usize> {
        if let Some(&k) = self.waiting.front() {
            return Some(k);
        }
        self.fresh_head()
    }

    #[inline(never)]
    fn fresh_head(&mut self) -> Option<usize> {
        let row = self.fresh.pop_front()?;
        let k = self.new_seq(row);
        self.waiting.push_back(k);
        Some(k)
    }

    /// After a full step: every scheduled sequence whose tokens are all computed samples one; those that
    /// reach their target finish, in scheduled order.
    fn finish_step(&mut self) {
        let t = self.t;
        self.done.clear();
        for i in 0..self.scheduled.len() {
            let k = self.scheduled[i].0;
            let s = &mut self.slab[k];
            if s.num_computed == s.num_tokens() {
                s.generate_one();
                if self.out.first_token[s.row - self.out_base] < 0 {
                    self.out.first_token[s.row - self.out_base] = t;
                }
                if s.generated == s.target {
                    self.done.push(k);
                }
                if s.num_children > 0 && !s.forked {
                    self.fork(k);
                }
            }
        }
        self.retire_done();
    }

    /// Frees and records every sequence in `done`, in order, and drops them from the running list.
    #[inline]
    fn retire_done(&mut self) {
        if !self.done.is_empty() {
            self.retire_done_now();
        }
    }

    #[inline(never)]
    fn retire_done_now(&mut self) {
        let done = std::mem::take(&mut self.done);
        for &k in &done {
            let row = self.slab[k].row;
            self.log(event::FINISH, row, -1);
            self.release(k);
            let s = &mut self.slab[k];
            s.lazy = false;
            s.retiring = true;
            self.out.status[s.row - self.out_base] = FINISHED;
            self.out.finish[s.row - self.out_base] = self.t;
            self.out.generated[s.row - self.out_base] = s.generated as i64;
        }
        let slab = &self.slab;
        // The running list ascends in admission order: one finisher is found by binary search.
        let one = match done[..] {
            [k] => Some((
                k,
                self.running
                    .partition_point(|&j| slab[j].adm_no < slab[k].adm_no),
            )),
            _ => None,
        };
        match one {
            Some((k, i)) if self.running.get(i) == Some(&k) => {
                self.running.remove(i);
            }
            _ => self.running.retain(|&k| !slab[k].retiring),
        }
        for &k in &done {
            self.remove(k);
        }
        self.done = done;
        self.done.clear();
    }

    /// One step with every running sequence walked explicitly (the reference's loop, rule for rule).
    /// Returns false if nothing was scheduled (every waiting head was rejected: no time passes).
    fn full_step(&mut self) -> bool {
        self.schedule();
        if self.scheduled.is_empty() {
            return false;
        }
        if self.log.is_some() {
            self.log_schedule(0);
        }
        let (dt, tokens) = self.step_time();
        let m = self.memory_state();
        self.record(dt, self.scheduled.len() as u64, tokens, m);
        self.finish_step();
        self.maybe_enter_lockstep();
        true
    }

    /// Logs every block and scheduling event into the output (`event` kinds).
    #[must_use]
    pub fn with_events(mut self, record: bool) -> Self {
        if record {
            self.log = Some(Vec::new());
            if let Memory::Paged(pool) = &mut self.mem {
                pool.record_evictions();
            }
        }
        self
    }

    #[inline]
    fn log(&mut self, kind: i64, row: usize, block: i64) {
        self.log_count(kind, row, block, -1);
    }

    #[inline]
    fn log_count(&mut self, kind: i64, row: usize, block: i64, count: i64) {
        if let Some(log) = &mut self.log {
            log.push([self.step as i64, self.t, kind, row as i64, block, count]);
        }
    }

    /// A `schedule` row for every sequence of the step's batch that does not compute exactly one token
    /// (its count), then one (count 0) for each running sequence the step left out; a running sequence
    /// without a row computed one token (DESIGN.md §Event log). The first `implicit` running sequences
    /// computed one token each without entering `scheduled` (lockstep).
    fn log_schedule(&mut self, implicit: usize) {
        for i in 0..self.scheduled.len() {
            let (k, n) = self.scheduled[i];
            if n != 1 {
                let row = self.slab[k].row;
                self.log_count(event::SCHEDULE, row, -1, n as i64);
            }
        }
        let left_out = self.running.len() - implicit - self.scheduled.len();
        if left_out > 0 {
            // The running phase scheduled a prefix of the running list; the left-out ones follow it.
            let mut i = 0;
            while i < self.scheduled.len() && self.running[i] == self.scheduled[i].0 {
                i += 1;
            }
            for j in i..i + left_out {
                let row = self.slab[self.running[j]].row;
                self.log_count(event::SCHEDULE, row, -1, 0);
            }
        }
    }

    /// One event per block in `new_blocks` (an eviction first if it lost a key); `first` names the first.
    fn log_allocations(&mut self, row: usize, first: i64) {
        if self.log.is_none() {
            return;
        }
        let Memory::Paged(pool) = &mut self.mem else {
            return;
        };
        let evicted = pool.take_evicted();
        for i in 0..self.new_blocks.len() {
            let b = self.new_blocks[i];
            if evicted.contains(&b) {
                self.log(event::EVICT, row, i64::from(b.0));
            }
            self.log(
                if i == 0 { first } else { event::ALLOCATE },
                row,
                i64::from(b.0),
            );
        }
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

    /// Steps until the run is over or, with more input to come (`final_input` false), until a step
    /// could depend on it: rows arrive in order, so a step starting before the last arrival fed is safe
    /// (later rows arrive no earlier), one starting at or after it is not, nor the jump of an idle
    /// engine to the next arrival.
    fn advance(&mut self) -> Result<()> {
        // Locals for the loop's hot reads (the input's slices live as long as the engine's view).
        let (arrivals, base, cancel) = (self.inp.arrival_ps, self.row_base, self.cancel);
        let end = base + arrivals.len();
        let last_arrival = arrivals.last().copied().unwrap_or(0);
        let mut nxt = self.nxt;
        let result = loop {
            if self.t >= self.horizon {
                // A stepped replica: the step starting at or after its horizon is not taken, nor its
                // arrivals joined (a row arriving then is still in flight; one rejected at once is
                // rejected by that step, as in the reference).
                break Ok(());
            }
            while nxt < end && arrivals[nxt - base] <= self.t {
                self.join(nxt);
                nxt += 1;
            }
            if self.running.is_empty() && self.nothing_waits() && self.swapped.is_empty() {
                if nxt == end {
                    break Ok(()); // the end, or (more input to come) the next arrival is not known yet
                }
                let a = arrivals[nxt - base];
                if a >= self.horizon {
                    break Ok(()); // a stepped replica idles at its horizon without moving its clock
                }
                self.t = a;
                continue;
            }
            if nxt == end && !self.final_input && self.t >= last_arrival {
                break Ok(()); // a later row may arrive at the start of this step
            }
            let (rejected_before, preempted_before) =
                (self.num_rejected, self.out.counters.num_preemptions);
            let progressed = if self.lockstep {
                // Quiet steps (see `skip_quiet_steps`) start with an empty bucket and nothing waiting;
                // with more input to come, later rows arrive no earlier than the last one fed.
                (self.ring[self.step as usize & self.ring_mask].is_empty()
                    && self.nothing_waits()
                    && self.skip_quiet_steps(self.quiet_bound(if nxt < end {
                        Some(arrivals[nxt - base])
                    } else if self.final_input {
                        None
                    } else {
                        Some(last_arrival)
                    })))
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
            if let Some(step) = self.clock_overflow {
                break Err(KvError::InvalidArgument(clock_overflow_message(
                    step, self.t,
                )));
            }
            if !progressed
                && self.num_rejected == rejected_before
                && self.out.counters.num_preemptions == preempted_before
            {
                break Err(KvError::Internal(format!(
                    "no progress at time {} ps",
                    self.t
                )));
            }
        };
        self.nxt = nxt;
        result
    }

    /// The time a quiet span must stop before: the next arrival known, or the horizon of a stepped
    /// replica if that is earlier (a step starting at or after either is not taken together).
    #[inline]
    fn quiet_bound(&self, arrival: Option<i64>) -> Option<i64> {
        if self.horizon == i64::MAX {
            arrival
        } else {
            Some(arrival.map_or(self.horizon, |a| a.min(self.horizon)))
        }
    }

    /// The counters summed at the end of a run.
    fn finish_counters(&mut self) {
        if let Memory::Paged(pool) = &self.mem {
            let c = &mut self.out.counters;
            c.num_evictions = i128::from(pool.num_evictions());
            c.num_block_allocations = i128::from(pool.num_allocated());
            // `record` summed held blocks only: allocated = held x block size, stored = allocated - internal.
            let bs = i128::from(self.cfg.block_size);
            c.w_allocated = bs * c.w_held_blocks;
            c.w_stored = c.w_allocated - c.w_internal;
            c.peak_allocated_tokens = bs * i128::from(self.peak_held);
        }
        self.out.counters.makespan_ps = i128::from(self.t);
        if let Some(log) = self.log.take() {
            self.out.events = log;
        }
    }
}

/// The error of a step that would end past `MAX_TIME_PS` (the reference raises the same text).
fn clock_overflow_message(step: u64, t: i64) -> String {
    format!(
        "step {step} starting at {t} ps would end past the simulated clock's range of {MAX_TIME_PS} ps \
         (about 53 days): the time model's coefficients (iteration_time_ps, c0_ps, c_tok_ps, c_ctx_ps, \
         swap_ps_per_block) are too large for this workload"
    )
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
    Engine::new_cancellable(inp, cfg, Some(cancel))?
        .with_timeseries(timeseries_every)
        .with_events(record_events)
        .run(cancel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_content_starts_at_the_first_segment_no_other_prompt_contains() {
        // Rows: [7, 8] | [7, 9, 9] | [10, 7] | [11]; segment 9 repeats inside one prompt only.
        let ids = [7, 8, 7, 9, 9, 10, 7, 11];
        let lens = [4, 3, 4, 2, 2, 5, 4, 6];
        let offsets = [0, 2, 5, 7, 8];
        let prompt = [7, 8, 9, 6];
        let zeros = [0i64; 4];
        let inp = EngineInput {
            arrival_ps: &zeros,
            prompt_len: &prompt,
            target: &[1; 4],
            max_gen: &[1; 4],
            fork_parent: &[-1; 4],
            output_seg: &[1 << 63; 4],
            seg_offsets: &offsets,
            segment_id: &ids,
            segment_len: &lens,
        };
        inp.validate().unwrap();
        assert_eq!(private_starts(&inp), [4, 4, 0, 0]);
    }

    /// tests/test_engine_golden.py's group scenario, derived there: B (prompt 8, output 6), then A (prompt
    /// 8, output 3) with one forked sample, 7 blocks of 4, caching off. The group {A, A1} cannot grow
    /// beside B in step 1 and is its own victim: swapped whole under `Auto` (its 2 shared blocks once),
    /// back after B finishes (t = 6 ms), done at t = 8 ms; with a 1-block CPU pool its samples are
    /// recomputed one by one instead.
    /// Chunked prefill off, budget 32, ticks of 1 ms, prompts A 20, B 30, C 10, D 25 (outputs 3, 2, 2, 2)
    /// all waiting at 0. Stopping at the first prompt over the budget left (vLLM ≥ 0.12) admits them in
    /// order, one a step: A at 0 (12 left, B's 30 waits), B at 1 (A's token leaves 31), C at 2, D at 3.
    /// Skipping (vLLM 0.9.2 to 0.11.2): step 0 admits A and C (20 + 10), skips B and D and puts them
    /// back reversed, D first; step 1 (A and C decode, 30 left) admits D (25) and skips B (30 > 5);
    /// step 2 (A and D decode) admits B with exactly 30.
    #[test]
    fn a_prompt_over_the_budget_left_stops_or_is_skipped() {
        const MS: i64 = 1_000_000_000;
        let prompt = [20i64, 30, 10, 25];
        let inp = EngineInput {
            arrival_ps: &[0; 4],
            prompt_len: &prompt,
            target: &[3, 2, 2, 2],
            max_gen: &[3, 2, 2, 2],
            fork_parent: &[-1; 4],
            output_seg: &[1 << 63, (1 << 63) + 1, (1 << 63) + 2, (1 << 63) + 3],
            seg_offsets: &[0, 1, 2, 3, 4],
            segment_id: &[1, 2, 3, 4],
            segment_len: &prompt,
        };
        let cfg = |skip_over_budget| EngineConfig {
            enable_prefix_caching: false,
            chunked_prefill: false,
            max_num_batched_tokens: 32,
            skip_over_budget,
            ..EngineConfig::for_tests(64, 16)
        };
        let stop = run(inp, &cfg(false), 0, false, &AtomicBool::new(false)).unwrap();
        assert_eq!(stop.first_scheduled, [0, MS, 2 * MS, 3 * MS]);
        assert_eq!(stop.finish, [3 * MS, 3 * MS, 4 * MS, 5 * MS]);
        let skip = run(inp, &cfg(true), 0, false, &AtomicBool::new(false)).unwrap();
        assert_eq!(skip.first_scheduled, [0, 2 * MS, 0, MS]);
        assert_eq!(skip.first_token, [MS, 3 * MS, MS, 2 * MS]);
        assert_eq!(skip.finish, [3 * MS, 4 * MS, 2 * MS, 3 * MS]);
        assert_eq!(skip.counters.num_steps, 4);
    }

    #[test]
    fn a_group_is_preempted_and_swapped_whole() {
        const MS: i64 = 1_000_000_000;
        let eight = [8i64; 3];
        let inp = EngineInput {
            arrival_ps: &[0; 3],
            prompt_len: &eight,
            target: &[6, 3, 3],
            max_gen: &[6, 3, 3],
            fork_parent: &[-1, -1, 1],
            output_seg: &[1 << 63, (1 << 63) + 1, (1 << 63) + 2],
            seg_offsets: &[0, 1, 2, 3],
            segment_id: &[1, 2, 2],
            segment_len: &eight,
        };
        let cfg = |cpu_blocks| EngineConfig {
            enable_prefix_caching: false,
            max_num_seqs: 16,
            preemption: Preemption::Auto,
            cpu_blocks,
            ..EngineConfig::for_tests(7, 4)
        };
        let swapped = run(inp, &cfg(4), 0, false, &AtomicBool::new(false)).unwrap();
        assert_eq!(swapped.finish, [6 * MS, 8 * MS, 8 * MS]);
        assert_eq!(swapped.num_swaps, [0, 1, 1]);
        assert_eq!(swapped.counters.num_swapped_blocks, 4);
        assert_eq!(swapped.counters.num_steps, 8);
        let split = run(inp, &cfg(1), 0, false, &AtomicBool::new(false)).unwrap();
        assert_eq!(split.num_swaps, [0, 0, 0]);
        assert_eq!(split.num_preemptions, [0, 1, 2]);
        assert_eq!(split.counters.recomputed_tokens, 8 + 8 + 9);
        assert_eq!(split.finish, [6 * MS, 4 * MS, 7 * MS]);
    }

    #[test]
    fn forked_samples_must_follow_their_parent() {
        let ones = [1i64; 4];
        let input = |fork_parent: &'static [i64]| EngineInput {
            arrival_ps: &[0; 4],
            prompt_len: &[1; 4],
            target: &[1; 4],
            max_gen: &[1; 4],
            fork_parent,
            output_seg: &[1 << 63; 4],
            seg_offsets: &[0, 1, 2, 3, 4],
            segment_id: &[1, 2, 3, 4],
            segment_len: &ones,
        };
        input(&[-1, 0, 0, -1]).validate().unwrap();
        let err = input(&[-1, -1, 0, -1]).validate().unwrap_err();
        assert!(err.to_string().contains("row 2: fork_parent 0"), "{err}");
        let err = input(&[-1, 0, 1, -1]).validate().unwrap_err();
        assert!(err.to_string().contains("row 2: fork_parent 1"), "{err}");
    }
}
