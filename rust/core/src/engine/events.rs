//! The event log (DESIGN.md §Event log): event kinds and reject reasons (shared with the reference), and
//! the rows written while recording.

use super::{Engine, Memory};

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
    /// A block that left a sliding window or a local chunk (freed, the null block in its place).
    pub const WINDOW: i64 = 13;
    /// The CPU tier (DESIGN.md §CPU tier): a store or a load starts (`count`: its chunks), a request's
    /// hit in the tier (`count`: tokens beyond its GPU hits), a store evicts a chunk, a transfer is seen
    /// complete (`count`: its chunks).
    pub const STORE: i64 = 14;
    pub const LOAD: i64 = 15;
    pub const CPU_HIT: i64 = 16;
    pub const CPU_EVICT: i64 = 17;
    pub const STORE_DONE: i64 = 18;
    pub const LOAD_DONE: i64 = 19;
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

impl Engine<'_> {
    /// Logs every block and scheduling event into the output (`event` kinds).
    #[must_use]
    pub fn with_events(mut self, record: bool) -> Self {
        if record {
            self.log = Some(Vec::new());
            // A hybrid pool logs `count` = the block's group on its block events.
            if let Memory::Paged(pool) = &mut self.mem {
                pool.record_evictions();
            }
        }
        self
    }

    #[inline]
    pub(super) fn log(&mut self, kind: i64, row: usize, block: i64) {
        self.log_count(kind, row, block, -1);
    }

    #[inline]
    pub(super) fn log_count(&mut self, kind: i64, row: usize, block: i64, count: i64) {
        if let Some(log) = &mut self.log {
            log.push([self.step as i64, self.t, kind, row as i64, block, count]);
        }
    }

    /// A `schedule` row for every sequence of the step's batch that does not compute exactly one token
    /// (its count), then one (count 0) for each running sequence the step left out; a running sequence
    /// without a row computed one token (DESIGN.md §Event log). The first `implicit` running sequences
    /// computed one token each without entering `scheduled` (lockstep).
    pub(super) fn log_schedule(&mut self, implicit: usize) {
        for i in 0..self.scheduled.len() {
            let (k, n) = self.scheduled[i];
            // (a discarded token, `done`: one token, listed, DESIGN.md §Event log)
            if n != 1 || self.slab[k].done {
                let row = self.slab[k].row;
                self.log_count(event::SCHEDULE, row, -1, n as i64);
            }
        }
        let left_out = self.running.len() - implicit - self.scheduled.len();
        if left_out > 0 && implicit == 0 {
            // The batch is a subsequence of the running list (a Mamba chunk that reaches no block
            // boundary leaves a sequence out mid-list): the others, in running order.
            let mut p = 0;
            for j in 0..self.running.len() {
                let k = self.running[j];
                if p < self.scheduled.len() && self.scheduled[p].0 == k {
                    p += 1;
                } else {
                    let row = self.slab[k].row;
                    self.log_count(event::SCHEDULE, row, -1, 0);
                }
            }
        } else if left_out > 0 {
            // Lockstep: the running phase scheduled a prefix of the running list; the left-out ones follow.
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
    pub(super) fn log_allocations(&mut self, row: usize, first: i64) {
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
}
