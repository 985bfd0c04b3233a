//! Sequences and the slab (DESIGN.md §Engine, step 1): a live sequence's state (`Seq`), arrivals
//! joining the waiting queue or rejected at once, building a sequence when it reaches the head, and
//! which prompt content is private to a row (`private_starts`, what deferred keys skip).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::{Engine, EngineInput, Memory, REJECTED, event, peak_blocks_of, region_size_of, reject};
use crate::block_pool::IdHasher;
use crate::block_table::BlockTable;
use crate::{BlockKey, Segment};

/// The rows from `$nxt` on (a place: a local or `self.nxt`) that arrive at or before `$engine`'s clock
/// join, `$nxt` left at the first that has not (`$arrivals`: the input's arrival column, its first row
/// `$base`, its end `$end`): the head of `advance`'s loop and of a group rank's step (`join_due`). A
/// macro, not a method: `advance` keeps these in locals, and the same loop through an inlined method
/// costs the run 2 % more instructions (callgrind, 100,000 requests; the whole step is inlined in it).
macro_rules! join_arrived {
    ($engine:expr, $arrivals:expr, $base:expr, $end:expr, $nxt:expr) => {
        while $nxt < $end && $arrivals[$nxt - $base] <= $engine.join_limit() {
            $engine.join($nxt);
            $nxt += 1;
        }
    };
}
pub(super) use join_arrived;

/// A live sequence: waiting or running. Finished and rejected ones leave the slab.
///
/// Laid out by hand (`repr(C)`, one sequence per run of whole cache lines): a lockstep event reads and
/// writes the first three lines only (counters, block table, flags); the rest is for admission,
/// preemption and hashing (the assertions after it check the offsets).
#[derive(Debug, Default)]
#[repr(C, align(64))]
#[allow(clippy::struct_excessive_bools)] // independent flags of one sequence's life
pub(super) struct Seq {
    // -- line 0: the lockstep state and the counters it advances.
    /// Order of (re)admission: the running list is sorted by it, and so are same-step events.
    pub(super) adm_no: u64,
    /// Lockstep mode (lockstep.rs): this sequence decodes one token per step from `base_step`, when it had
    /// computed `base_c` and generated `base_g` tokens; `next_event` is the next step it must be touched.
    pub(super) next_event: u64,
    pub(super) base_step: u64,
    pub(super) base_c: u64,
    pub(super) base_g: u64,
    pub(super) target: u64,
    pub(super) num_computed: u64,
    pub(super) generated: u64,
    // -- line 1: the block table (its key of the last registered block spills into line 2).
    pub(super) table: BlockTable,
    // -- line 2 (its first 16 bytes the table's).
    pub(super) reserved_blocks: u32,
    /// The CPU tier (DESIGN.md §CPU tier; offload/): its stores in flight (the completion of each, and
    /// the request's finish, read it: kept with the line a lockstep event touches).
    pub(super) jobs: u32,
    /// Start of the first prompt segment no other sequence's prompt contains (`prompt_len` if none):
    /// from there on, only this sequence can ever look its blocks up (see `defer_keys`).
    pub(super) private_from: u64,
    pub(super) lazy: bool,
    /// Sampled a token since its (re)admission started it over: it decodes (`one_free_block` applies).
    pub(super) decoding: bool,
    pub(super) retiring: bool,
    pub(super) admitted_before: bool,
    /// fork-cow: the next `num_children` rows are samples forked from this one at its first token.
    pub(super) forked: bool,
    /// The CPU tier: whether a load holds its blocks (`held`) and has landed, whether it still prefills
    /// (vLLM's `_inflight_prefills`).
    pub(super) held: bool,
    pub(super) loaded: bool,
    pub(super) prefilling: bool,
    pub(super) num_children: u32,
    /// The CPU tier: its own run's handle (`CpuTier::store_own`; 0: none; `cpu_tier::OWN_FRESH`: none,
    /// and nothing of it in the tier: admitted without a lookup, before its first offer or preemption).
    pub(super) tier_own: u32,
    pub(super) row: usize,
    pub(super) prompt_len: u64,
    // -- cold.
    /// Prompt segments, then this sequence's output segment once it has generated a token.
    pub(super) segs: Vec<Segment>,
    pub(super) max_gen: u64,
    pub(super) output_seg: u64,
    pub(super) computed_at_preemption: u64,
    pub(super) region: Option<(u64, u64)>,
    /// Blocks held in the CPU pool while swapped out (a group's: on its first member).
    pub(super) swapped_blocks: u64,
    /// fork-cow: the sequence group (vLLM v0) this sample belongs to since its fork, named by sample 0's
    /// row. A group sits together in the running list and is scheduled, preempted and swapped as one.
    pub(super) group: Option<usize>,
    /// A swapped group, on its first member: the members (running order) and the leading blocks they
    /// share.
    pub(super) members: Vec<usize>,
    pub(super) shared_blocks: u64,
    /// While waiting: the keys a lookup walks, for `keys_for` tokens of content (recomputed only when
    /// the content grew, so a blocked head is not rehashed every step).
    pub(super) keys: Vec<BlockKey>,
    pub(super) keys_for: u64,
    /// ITL (`EngineOutput::itl_runs`): the current run of tokens sampled in consecutive steps, from step
    /// `itl_first` (the gap before it `itl_gap` ps, -1 for the first token) to `itl_last`, whose token
    /// came at `itl_last_t`. While lazy, the last two are those of the step before the next `sync`.
    pub(super) itl_first: u64,
    pub(super) itl_gap: i64,
    pub(super) itl_last: u64,
    pub(super) itl_last_t: i64,
    /// A hybrid pool (DESIGN.md §Hybrid attention): the sequence's per-group tables and keys.
    pub(super) hybrid: Option<Box<super::hybrid::HybridSeq>>,
    /// The CPU tier (its hot fields in line 2): the next chunk a store offers, when its load was admitted,
    /// and its full blocks' content keys so far.
    pub(super) next_store: u64,
    pub(super) load_at: i64,
    pub(super) tier_keys: Vec<BlockKey>,
    /// Prefill/decode disaggregation: a prefill replica computed its prompt; its full blocks' KV comes
    /// over the decode replica's inbound link (vLLM's `do_remote_prefill`).
    pub(super) remote: bool,
    /// `async_scheduling`: finished in the step in flight, it keeps its seat and blocks through the next
    /// schedule (`Engine::async_done`); `freed`: a preemption freed them.
    pub(super) done: bool,
    pub(super) freed: bool,
    /// `async_scheduling` with a CPU tier: the last step that scheduled it (`offload/async_tier.rs`).
    pub(super) sched_step: u64,
}

// The layout the lockstep path relies on: its fields in lines 0-2 (the CPU tier's hot fields too).
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(Seq, table) == 64 && offset_of!(Seq, reserved_blocks) == 144);
    assert!(offset_of!(Seq, jobs) < 192 && offset_of!(Seq, tier_own) < 192);
    assert!(offset_of!(Seq, prompt_len) + 8 <= 192 && offset_of!(Seq, segs) == 192);
};

impl Seq {
    #[inline]
    pub(super) fn num_tokens(&self) -> u64 {
        self.prompt_len + self.generated
    }

    /// Running slots this sequence takes when admitted: itself, plus the samples it will fork.
    #[inline]
    pub(super) fn seats(&self) -> u64 {
        1 + if self.forked {
            0
        } else {
            self.num_children as u64
        }
    }

    pub(super) fn generate_one(&mut self) {
        self.set_generated(self.generated + 1);
        self.decoding = true;
    }

    /// Sets the generated count. The output segment that names those tokens is added with the first
    /// one; its length is brought up to date by `sync_output`, before anything hashes `segs`.
    #[inline]
    pub(super) fn set_generated(&mut self, g: u64) {
        if g > 0 && self.generated == 0 {
            self.segs.push(Segment::new(self.output_seg, g));
        }
        self.generated = g;
    }

    /// Makes the output segment's length the generated count (before `segs` is hashed).
    #[inline]
    pub(super) fn sync_output(&mut self) {
        if self.generated > 0 {
            self.segs.last_mut().expect("output segment").len = self.generated;
        }
    }
}

/// Per row: the start of its first prompt segment that no other row's prompt contains (its prompt length
/// if none). Sorting the ids finds those that occur more than once (usually few, `repeated_ids`); only
/// their segments go through a map, which decides whether they are in more than one prompt. (A hash map
/// over every id of a million-request workload was a cache miss per lookup.)
pub(crate) fn private_starts(inp: &EngineInput<'_>) -> Vec<u64> {
    let n = inp.len();
    let repeated = repeated_ids(inp.segment_id);
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

/// Ids sorted in one piece at most this many (their 8-byte copies fit a core's cache); more are first
/// spread over buckets of about this size.
const SORT_IN_CACHE: usize = 1 << 15;

/// The ids that occur more than once in `ids`, ascending, each once. Past `SORT_IN_CACHE` ids, equal ids
/// are first gathered into one of a power of two of buckets (by the top bits of `mix64(id)`), each then
/// sorted in cache: a million ids sorted in one piece took twice the time, most of it in misses.
pub(crate) fn repeated_ids(ids: &[u64]) -> Vec<u64> {
    repeated_ids_by(ids, SORT_IN_CACHE)
}

/// `repeated_ids` with buckets of about `in_cache` ids (the tests' small ones exercise the buckets).
pub(crate) fn repeated_ids_by(ids: &[u64], in_cache: usize) -> Vec<u64> {
    fn sorted_repeats(ids: &mut [u64], out: &mut Vec<u64>) {
        ids.sort_unstable();
        out.extend(ids.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]));
    }
    let mut out = Vec::new();
    let buckets = ids.len().div_ceil(in_cache.max(1)).next_power_of_two();
    if buckets == 1 {
        sorted_repeats(&mut ids.to_vec(), &mut out);
        out.dedup();
        return out;
    }
    let shift = u64::BITS - buckets.trailing_zeros();
    let bucket = |id: u64| (crate::hash::mix64(id) >> shift) as usize;
    let mut start = vec![0usize; buckets + 1];
    for &id in ids {
        start[bucket(id) + 1] += 1;
    }
    for b in 0..buckets {
        start[b + 1] += start[b];
    }
    let mut at = start.clone();
    let mut spread = vec![0u64; ids.len()];
    for &id in ids {
        let b = bucket(id);
        spread[at[b]] = id;
        at[b] += 1;
    }
    for b in 0..buckets {
        sorted_repeats(&mut spread[start[b]..start[b + 1]], &mut out);
    }
    out.sort_unstable(); // buckets hold distinct ids: the repeats of one id are all in one
    out.dedup();
    out
}

impl Engine<'_> {
    /// Why a sequence of prompt `prompt`, target `target` and output cap `max_gen`, taking `seats`
    /// running slots (`Seq::seats`), is rejected at arrival (`reject`), or 0.
    fn reject_at_arrival(&self, prompt: u64, target: u64, max_gen: u64, seats: u64) -> i64 {
        let cfg = self.cfg;
        if target < 1 {
            reject::NO_ROOM_TO_GENERATE
        } else if cfg.policy.is_paged()
            && if cfg.groups.is_some() {
                self.hybrid_peak_blocks(prompt + target - 1)
            } else {
                peak_blocks_of(cfg, prompt, target, max_gen)
            } > cfg.capacity_blocks()
        {
            reject::EXCEEDS_POOL
        } else if let Memory::Contiguous(space) = &self.mem
            && region_size_of(cfg, prompt, target, max_gen) > space.max_region()
        {
            reject::EXCEEDS_ADDRESS_SPACE
        } else if seats > cfg.max_num_seqs {
            reject::EXCEEDS_SEATS
        } else {
            0
        }
    }

    /// The last arrival a step scheduled now takes in: `t`, or under `async_scheduling`, while a step is
    /// in flight, that step's start (the next step is scheduled then).
    #[inline]
    pub(super) fn join_limit(&self) -> i64 {
        if self.async_prev >= 0 {
            self.async_prev
        } else {
            self.t
        }
    }

    /// A slab slot holding a fresh sequence for `row` (a recycled slot keeps its vectors' buffers).
    pub(super) fn new_seq(&mut self, row: usize) -> usize {
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
        let remote = !self.remote_rows.is_empty() && self.remote_rows.remove(&row);
        let inp = &self.inp;
        let old = &mut self.slab[k];
        let mut segs = std::mem::take(&mut old.segs);
        let mut blocks = std::mem::take(&mut old.table.blocks);
        let mut keys = std::mem::take(&mut old.keys);
        let mut tier_keys = std::mem::take(&mut old.tier_keys);
        tier_keys.clear();
        let mut hybrid = old.hybrid.take();
        if let Some(h) = hybrid.as_mut() {
            h.keys.clear();
        }
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
            // (a row count: rows fit the input's columns, far below 2^32 samples of one request)
            num_children: u32::try_from(num_children).expect("fewer than 2^32 samples a request"),
            table: BlockTable {
                blocks,
                ..BlockTable::default()
            },
            keys,
            hybrid,
            tier_keys,
            remote,
            ..Seq::default()
        };
        k
    }

    /// Frees slot `k` for `new_seq` (its table is already released).
    pub(super) fn remove(&mut self, k: usize) {
        self.free_slots.push(k);
    }

    /// Rejects `row` and the `num_children` sample rows it would have forked, now.
    pub(super) fn reject_rows(&mut self, row: usize, num_children: usize, reason: i64) {
        if let Some(sends) = self.sends.as_deref_mut() {
            sends.done.extend(row..=row + num_children);
        }
        for r in row..=row + num_children {
            self.log(event::REJECT, r, -1);
            self.out.status[r - self.out_base] = REJECTED;
            self.out.reject_reason[r - self.out_base] = reason as i8;
            self.out.finish[r - self.out_base] = self.t;
        }
        self.num_rejected += 1;
        self.progress += 1;
    }

    /// Rejects waiting sequence `k` (and its unforked samples) and drops it.
    pub(super) fn reject_seq(&mut self, k: usize, reason: i64) {
        if self.slab[k].remote {
            self.remote_rejected(self.slab[k].row);
            self.slab[k].remote = false;
        }
        let s = &self.slab[k];
        let children = if s.forked { 0 } else { s.num_children as usize };
        self.reject_rows(s.row, children, reason);
        self.remove(k);
    }

    pub(super) fn join(&mut self, row: usize) {
        let i = row - self.row_base;
        if self.inp.fork_parent(i) >= 0 {
            return; // a fork-cow sample: it starts when its parent samples its first token
        }
        let (reason, num_children) = self.row_rejected_at_arrival(row);
        if reason == 0 {
            self.fresh.push_back(row);
        } else {
            if !self.remote_rows.is_empty() && self.remote_rows.remove(&row) {
                self.remote_rejected(row);
            }
            self.reject_rows(row, num_children, reason);
        }
    }

    /// A remote request rejected now: its prefill replica's blocks are freed now.
    #[cold]
    fn remote_rejected(&mut self, row: usize) {
        let t = self.t;
        if let Some(tier) = self.tier.as_deref_mut() {
            tier.sends_decided.push((row, t));
        }
    }

    /// `reject_at_arrival` for `row` (not a fork-cow sample: itself and the samples it will fork take
    /// a seat each), without building its sequence, and the samples it would fork.
    #[inline]
    pub(super) fn row_rejected_at_arrival(&self, row: usize) -> (i64, usize) {
        let inp = &self.inp;
        let i = row - self.row_base;
        let children = self.num_children(row);
        let reason = self.reject_at_arrival(
            inp.prompt_len[i] as u64,
            inp.target[i] as u64,
            inp.max_gen[i] as u64,
            1 + children as u64,
        );
        (reason, children)
    }

    /// The fork-cow samples of `row`: the rows right after it that name it as their parent (parents
    /// are global row numbers).
    pub(super) fn num_children(&self, row: usize) -> usize {
        self.inp
            .fork_parent
            .get(row - self.row_base + 1..)
            .unwrap_or_default()
            .iter()
            .take_while(|&&p| p == row as i64)
            .count()
    }

    /// Whether a request is running, waiting or swapped out (vLLM's `has_unfinished_requests`).
    #[inline]
    pub(crate) fn has_work(&self) -> bool {
        !(self.running.is_empty() && self.nothing_waits() && self.swapped.is_empty())
    }

    /// Nothing waits to be admitted (neither built sequences nor fresh rows).
    #[inline]
    pub(super) fn nothing_waits(&self) -> bool {
        self.waiting.is_empty() && self.fresh.is_empty() && self.tier_hot.held_empty // (true without a tier)
    }

    /// The head of the waiting queue, its sequence built if it was a fresh row.
    #[inline]
    pub(super) fn waiting_head(&mut self) -> Option<usize> {
        if let Some(&k) = self.waiting.front() {
            return Some(k);
        }
        self.fresh_head()
    }

    #[inline(never)]
    pub(super) fn fresh_head(&mut self) -> Option<usize> {
        let row = self.fresh.pop_front()?;
        let k = self.new_seq(row);
        self.waiting.push_back(k);
        Some(k)
    }
}
