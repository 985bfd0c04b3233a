//! Floors for the engine benchmarks (`bench/test_bench_engine.py`): how fast the least work could go.
//!
//! - [`free_list_floor`] only pops and pushes blocks through a free queue: the cost of the block
//!   operations alone.
//! - [`step_floor`] is the least a step-exact simulation of a workload does: while the token budget
//!   never binds and the pool suffices, the same steps and the same block allocations as the engine on
//!   private prompts, with everything else left out. It shows how much of the engine's time an engine
//!   that advances step by step must spend.

use std::collections::VecDeque;

use crate::BlockId;
use crate::error::Result;
use crate::free_queue::FreeQueue;
use crate::invalid_arg;

/// `ops` blocks popped from the head of a free queue of `num_blocks` and pushed back at the tail, with
/// nothing else done. Returns a checksum of the ids.
pub fn free_list_floor(num_blocks: u32, ops: u64) -> u64 {
    let mut q = FreeQueue::new(num_blocks.max(2), 1);
    let mut sum = 0u64;
    for _ in 0..ops {
        let b = q.pop_front().expect("the queue is never empty");
        sum = sum.wrapping_add(u64::from(b.0));
        q.push_back(b);
    }
    sum
}

/// What [`step_floor`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepFloor {
    pub steps: u64,
    pub block_allocations: u64,
    pub finished: u64,
    /// Checksum of the finish times and the time-weighted sums (so that nothing is optimised away).
    pub checksum: u64,
}

/// The parameters [`step_floor`] reads (the engine's, for policy `vllm` with ticks).
#[derive(Clone, Copy, Debug)]
pub struct FloorConfig {
    pub num_blocks: u32,
    pub block_size: u64,
    pub iteration_ps: u64,
    pub max_num_seqs: u64,
    pub watermark_blocks: u64,
}

fn check(arrival_ps: &[i64], prompt_len: &[i64], target: &[i64], cfg: FloorConfig) -> Result<()> {
    let n = arrival_ps.len();
    if prompt_len.len() != n || target.len() != n {
        invalid_arg!(
            "columns differ in length: arrival_ps {n}, prompt_len {}, target {}",
            prompt_len.len(),
            target.len()
        );
    }
    for i in 0..n {
        if prompt_len[i] < 1 || target[i] < 0 || (i > 0 && arrival_ps[i] < arrival_ps[i - 1]) {
            invalid_arg!(
                "row {i}: prompt_len {} must be >= 1, target {} >= 0, arrivals sorted",
                prompt_len[i],
                target[i]
            );
        }
    }
    if cfg.num_blocks < 2 || cfg.block_size < 1 || cfg.max_num_seqs < 1 {
        invalid_arg!("invalid floor config {cfg:?}");
    }
    Ok(())
}

/// The least work of a step-exact paged simulation: policy `vllm` with ticks, one sample per request,
/// prompts admitted whole in FCFS order while their blocks and a seat are free (no token budget, no
/// prefix lookups), one token per running sequence per step, a block popped at each block boundary,
/// blocks freed at the finish; sequences live between their events in a calendar ring, as in the
/// engine's lockstep mode, and each step adds the batch, held blocks and slack to time-weighted sums.
/// A sequence that finds the pool empty goes on without its block (no preemption). On private prompts
/// (no prefix hits) it allocates no more blocks than the engine, and exactly as many, in as many steps,
/// while the budget never binds and the pool suffices (`kvsim.engine.rust_engine.check_step_floor` refuses the
/// workloads it does not model).
pub fn step_floor(
    arrival_ps: &[i64],
    prompt_len: &[i64],
    target: &[i64],
    cfg: FloorConfig,
) -> Result<StepFloor> {
    check(arrival_ps, prompt_len, target, cfg)?;
    crate::block_pool::check_pool_memory(cfg.num_blocks)?;
    let n = arrival_ps.len();
    let mut sim = Sim::new(cfg, n);
    let mut next = 0;
    while sim.finished + sim.rejected < n as u64 {
        while next < n && arrival_ps[next] <= sim.t {
            sim.arrive(next, prompt_len[next] as u64, target[next] as u64);
            next += 1;
        }
        if sim.running == 0 {
            sim.reject_unstartable_heads();
        }
        if sim.running == 0 && sim.waiting.is_empty() {
            if next == n {
                break;
            }
            sim.t = arrival_ps[next];
            continue;
        }
        sim.step();
    }
    let mut checksum = (sim.w_batch ^ sim.w_held ^ sim.w_slack) as u64;
    for f in &sim.finish {
        checksum = checksum.wrapping_mul(31).wrapping_add(*f as u64);
    }
    Ok(StepFloor {
        steps: sim.step,
        block_allocations: sim.allocations,
        finished: sim.finished,
        checksum,
    })
}

const RING: usize = 1 << 12;

struct Seq {
    prompt: u64,
    target: u64,
    base_step: u64,
    base_c: u64,
    row: usize,
    blocks: Vec<BlockId>,
}

impl Seq {
    /// Computing the token at this position samples the last one.
    fn last(&self) -> u64 {
        self.prompt + self.target - 2
    }
}

struct Sim {
    cfg: FloorConfig,
    free: FreeQueue,
    ring: Vec<Vec<usize>>,
    slab: Vec<Seq>,
    spare: Vec<usize>,
    waiting: VecDeque<usize>,
    done: Vec<usize>,
    finish: Vec<i64>,
    t: i64,
    step: u64,
    running: u64,
    slack: i64,
    w_batch: i128,
    w_held: i128,
    w_slack: i128,
    allocations: u64,
    finished: u64,
    rejected: u64,
}

impl Sim {
    fn new(cfg: FloorConfig, n: usize) -> Self {
        Self {
            cfg,
            free: FreeQueue::new(cfg.num_blocks, 1),
            ring: vec![Vec::new(); RING],
            slab: Vec::new(),
            spare: Vec::new(),
            waiting: VecDeque::new(),
            done: Vec::new(),
            finish: vec![0; n],
            t: 0,
            step: 0,
            running: 0,
            slack: 0,
            w_batch: 0,
            w_held: 0,
            w_slack: 0,
            allocations: 0,
            finished: 0,
            rejected: 0,
        }
    }

    fn arrive(&mut self, row: usize, prompt: u64, target: u64) {
        let capacity = u64::from(self.cfg.num_blocks) - 1;
        if target < 1 || (prompt + target - 1).div_ceil(self.cfg.block_size) > capacity {
            self.rejected += 1;
            return;
        }
        let k = self.spare.pop().unwrap_or_else(|| {
            self.slab.push(Seq {
                prompt: 0,
                target: 0,
                base_step: 0,
                base_c: 0,
                row: 0,
                blocks: Vec::new(),
            });
            self.slab.len() - 1
        });
        let s = &mut self.slab[k];
        (s.prompt, s.target, s.row) = (prompt, target, row);
        s.blocks.clear();
        self.waiting.push_back(k);
    }

    fn pop(&mut self, k: usize) {
        if let Some(b) = self.free.pop_front() {
            self.slab[k].blocks.push(b);
            self.allocations += 1;
        }
    }

    /// Puts `k`, which has computed `c` tokens after this step, into the bucket of its next event.
    fn schedule(&mut self, k: usize, c: u64) {
        let s = &mut self.slab[k];
        s.base_step = self.step + 1;
        s.base_c = c;
        let event = c.div_ceil(self.cfg.block_size) * self.cfg.block_size;
        // At most RING - 1 steps ahead of the current step, whose bucket is out while it is processed; a
        // farther event becomes a wake-up that only reschedules.
        let ahead = (event.min(s.last()) - c).min(RING as u64 - 2);
        self.ring[(self.step + 1 + ahead) as usize & (RING - 1)].push(k);
    }

    fn step(&mut self) {
        let bs = self.cfg.block_size;
        let mut bucket = std::mem::take(&mut self.ring[self.step as usize & (RING - 1)]);
        for &k in &bucket {
            let s = &self.slab[k];
            let c = s.base_c + (self.step - s.base_step); // computed before this step
            let last = s.last();
            if c % bs == 0 {
                self.pop(k);
                self.slack += bs as i64;
            }
            if c == last {
                self.done.push(k);
            } else {
                self.schedule(k, c + 1);
            }
        }
        bucket.clear();
        self.ring[self.step as usize & (RING - 1)] = bucket;
        self.slack -= self.running as i64;
        self.admit();
        let dt = i128::from(self.cfg.iteration_ps);
        let held = u64::from(self.cfg.num_blocks) - 1 - u64::from(self.free.len());
        self.w_batch += dt * i128::from(self.running);
        self.w_held += dt * i128::from(held);
        self.w_slack += dt * i128::from(self.slack);
        self.t += self.cfg.iteration_ps as i64;
        self.step += 1;
        for i in 0..self.done.len() {
            let s = &self.slab[self.done[i]];
            for &b in s.blocks.iter().rev() {
                self.free.push_back(b);
            }
            let computed = if s.target == 1 {
                s.prompt
            } else {
                s.last() + 1
            };
            self.slack -= (s.blocks.len() as u64 * bs) as i64 - computed as i64;
            self.finish[s.row] = self.t;
            self.running -= 1;
            self.finished += 1;
            self.spare.push(self.done[i]);
        }
        self.done.clear();
    }

    /// With nothing running, a waiting head that does not fit the empty pool (the watermark) never will:
    /// rejected before any step is taken, as in the engine (no time passes).
    fn reject_unstartable_heads(&mut self) {
        while let Some(&k) = self.waiting.front() {
            let need = self.slab[k].prompt.div_ceil(self.cfg.block_size);
            if need + self.cfg.watermark_blocks <= u64::from(self.free.len()) {
                break;
            }
            self.waiting.pop_front();
            self.spare.push(k);
            self.rejected += 1;
        }
    }

    /// Whole prompts, FCFS, while blocks and seats last.
    fn admit(&mut self) {
        let bs = self.cfg.block_size;
        while let Some(&k) = self.waiting.front() {
            let (prompt, target) = (self.slab[k].prompt, self.slab[k].target);
            let need = prompt.div_ceil(bs);
            if need + self.cfg.watermark_blocks > u64::from(self.free.len())
                || self.running >= self.cfg.max_num_seqs
            {
                break;
            }
            self.waiting.pop_front();
            for _ in 0..need {
                self.pop(k);
            }
            self.slack += (need * bs - prompt) as i64;
            self.running += 1;
            if target == 1 {
                self.done.push(k);
            } else {
                self.schedule(k, prompt);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{self, EngineConfig, EngineInput};

    const MS: i64 = 1_000_000_000;

    struct Rows {
        arrival: Vec<i64>,
        prompt: Vec<i64>,
        target: Vec<i64>,
        output_seg: Vec<u64>,
        offsets: Vec<i64>,
        ids: Vec<u64>,
    }

    /// `n` requests with private prompts (one segment each), lengths and gaps from an LCG.
    fn rows(n: usize, seed: u64) -> Rows {
        let mut x = seed;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % m
        };
        let mut r = Rows {
            arrival: vec![],
            prompt: vec![],
            target: vec![],
            output_seg: vec![],
            offsets: vec![0],
            ids: vec![],
        };
        let mut t = 0;
        for i in 0..n {
            t += (next(3 * MS as u64)) as i64;
            r.arrival.push(t);
            r.prompt.push(1 + next(120) as i64);
            r.target.push(1 + next(200) as i64);
            r.output_seg.push(1 << 63 | (i as u64) << 16);
            r.ids.push(i as u64);
            r.offsets.push(i as i64 + 1);
        }
        r
    }

    fn config(num_blocks: u32, block_size: u64) -> EngineConfig {
        EngineConfig {
            max_num_seqs: 1000,
            max_num_batched_tokens: 1 << 20,
            ..EngineConfig::for_tests(num_blocks, block_size)
        }
    }

    fn both(r: &Rows, cfg: &EngineConfig) -> (StepFloor, engine::Counters) {
        let inp = EngineInput {
            arrival_ps: &r.arrival,
            prompt_len: &r.prompt,
            target: &r.target,
            max_gen: &r.target,
            fork_parent: &vec![-1; r.prompt.len()],
            output_seg: &r.output_seg,
            seg_offsets: &r.offsets,
            segment_id: &r.ids,
            segment_len: &r.prompt,
        };
        let floor = step_floor(
            inp.arrival_ps,
            inp.prompt_len,
            inp.target,
            FloorConfig {
                num_blocks: cfg.num_blocks,
                block_size: cfg.block_size,
                iteration_ps: MS as u64,
                max_num_seqs: cfg.max_num_seqs,
                watermark_blocks: cfg.watermark_blocks,
            },
        )
        .unwrap();
        let out = engine::run(
            inp,
            cfg,
            0,
            false,
            &std::sync::atomic::AtomicBool::new(false),
        )
        .unwrap();
        (floor, out.counters)
    }

    #[test]
    fn does_the_engines_steps_and_allocations_where_the_pool_suffices() {
        for (seed, n, bs) in [(1, 400, 16), (2, 60, 1), (3, 200, 7), (4, 400, 32)] {
            let r = rows(n, seed);
            // Room for every request's peak at once (debug builds check the free queue in O(length)).
            let peak: i64 = (0..n)
                .map(|i| (r.prompt[i] + r.target[i] - 1 + bs - 1) / bs)
                .sum();
            let (floor, c) = both(&r, &config(peak as u32 + 1, bs as u64));
            assert_eq!(c.num_preemptions, 0);
            assert_eq!(i128::from(floor.steps), c.num_steps, "block size {bs}");
            assert_eq!(i128::from(floor.block_allocations), c.num_block_allocations);
            assert_eq!(floor.finished, n as u64);
        }
    }

    #[test]
    fn far_events_wake_up_across_the_ring() {
        // Outputs longer than the ring (4096 steps), with blocks larger than it too.
        for bs in [4096, 16] {
            let mut r = rows(3, 7);
            r.target = vec![20_000, 9_000, 4_097];
            let peak: i64 = (0..3)
                .map(|i| (r.prompt[i] + r.target[i] - 1 + bs - 1) / bs)
                .sum();
            let (floor, c) = both(&r, &config(peak as u32 + 1, bs as u64));
            assert_eq!(i128::from(floor.steps), c.num_steps, "block size {bs}");
            assert_eq!(i128::from(floor.block_allocations), c.num_block_allocations);
            assert_eq!(floor.finished, 3);
        }
    }

    #[test]
    fn does_no_more_than_the_engine_under_pressure() {
        let r = rows(400, 5);
        let (floor, c) = both(&r, &config(40, 16));
        assert!(c.num_preemptions > 0);
        assert!(i128::from(floor.block_allocations) <= c.num_block_allocations);
        assert_eq!(floor.finished, 400);
    }

    #[test]
    fn refuses_bad_columns() {
        let cfg = FloorConfig {
            num_blocks: 10,
            block_size: 4,
            iteration_ps: 1,
            max_num_seqs: 4,
            watermark_blocks: 0,
        };
        assert!(step_floor(&[0, 1], &[3, 0], &[1, 1], cfg).is_err());
        assert!(step_floor(&[1, 0], &[3, 3], &[1, 1], cfg).is_err());
        assert!(step_floor(&[0], &[3, 3], &[1, 1], cfg).is_err());
        assert_eq!(
            step_floor(&[0, 0], &[3, 3], &[1, 2], cfg).unwrap().finished,
            2
        );
    }

    #[test]
    fn free_list_floor_cycles_through_the_queue() {
        // 4 blocks: ids 1, 2, 3 cycle.
        assert_eq!(free_list_floor(4, 7), 1 + 2 + 3 + 1 + 2 + 3 + 1);
    }
}
