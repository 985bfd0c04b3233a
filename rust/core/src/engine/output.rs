//! The engine's output: per-sequence columns (times in picoseconds, -1 when it never happened) and
//! integer counters; `kvsim.simulate` derives the request rows and the summary from them.

/// Totals over the run. The `w_*` fields are time-weighted sums (picoseconds × quantity), so they are
/// 128-bit; the Python side divides them by busy time and capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub num_steps: i128,
    pub busy_ps: i128,
    pub makespan_ps: i128,
    pub sum_batch: i128,
    pub sum_batched_tokens: i128,
    pub peak_batch: i128,
    pub peak_allocated_tokens: i128,
    pub w_batch: i128,
    pub w_stored: i128,
    pub w_allocated: i128,
    pub w_internal: i128,
    pub w_reserved: i128,
    pub w_external: i128,
    pub w_held_blocks: i128,
    pub w_logical_blocks: i128,
    pub num_preemptions: i128,
    pub num_evictions: i128,
    pub num_cow_copies: i128,
    pub prefix_hit_tokens: i128,
    pub prompt_tokens_admitted: i128,
    pub recomputed_tokens: i128,
    pub num_swapped_blocks: i128,
    pub num_block_allocations: i128,
    pub first_hit_tokens: i128,
    pub first_prompt_tokens: i128,
    /// The CPU tier (DESIGN.md §CPU tier); 0 without one.
    pub cpu_hit_tokens: i128,
    pub first_cpu_hit_tokens: i128,
    pub num_loads: i128,
    pub loaded_blocks: i128,
    pub num_stores: i128,
    pub stored_blocks: i128,
    pub cpu_evictions: i128,
    pub stores_failed: i128,
    pub stores_skipped: i128,
    pub num_flushes: i128,
    pub load_wait_ps: i128,
    pub w_cpu_chunks: i128,
    pub peak_cpu_chunks: i128,
    /// A hybrid model's tier: the host bytes its loads and stores moved, each group's blocks at its own
    /// bytes (`TierConfig::group_link`); 0 for one full-attention group, whose bytes the caller takes as
    /// its blocks times the block's.
    pub loaded_group_bytes: i128,
    pub stored_group_bytes: i128,
    /// Prefill/decode disaggregation (DESIGN.md §Prefill/decode disaggregation): a decode replica's
    /// transfers from the prefill pool, their blocks and their summed durations on its inbound link.
    pub pd_transfers: i128,
    pub pd_transfer_blocks: i128,
    pub pd_link_busy_ps: i128,
    /// A hybrid pool's groups (DESIGN.md §Hybrid attention): per group, the time-weighted sum (ps ×
    /// blocks) and the peak of the blocks the running tables hold (the Python side's
    /// `w_group_blocks_<g>`, `peak_group_blocks_<g>`). Empty for one full-attention group.
    pub group_blocks: Vec<[i128; 2]>,
}

impl Counters {
    /// Name and value of every counter (the names are the Python side's keys).
    pub fn pairs(&self) -> Vec<(&'static str, i128)> {
        vec![
            ("num_steps", self.num_steps),
            ("busy_ps", self.busy_ps),
            ("makespan_ps", self.makespan_ps),
            ("sum_batch", self.sum_batch),
            ("sum_batched_tokens", self.sum_batched_tokens),
            ("peak_batch", self.peak_batch),
            ("peak_allocated_tokens", self.peak_allocated_tokens),
            ("w_batch", self.w_batch),
            ("w_stored", self.w_stored),
            ("w_allocated", self.w_allocated),
            ("w_internal", self.w_internal),
            ("w_reserved", self.w_reserved),
            ("w_external", self.w_external),
            ("w_held_blocks", self.w_held_blocks),
            ("w_logical_blocks", self.w_logical_blocks),
            ("num_preemptions", self.num_preemptions),
            ("num_evictions", self.num_evictions),
            ("num_cow_copies", self.num_cow_copies),
            ("prefix_hit_tokens", self.prefix_hit_tokens),
            ("prompt_tokens_admitted", self.prompt_tokens_admitted),
            ("recomputed_tokens", self.recomputed_tokens),
            ("num_swapped_blocks", self.num_swapped_blocks),
            ("num_block_allocations", self.num_block_allocations),
            ("first_hit_tokens", self.first_hit_tokens),
            ("first_prompt_tokens", self.first_prompt_tokens),
            ("cpu_hit_tokens", self.cpu_hit_tokens),
            ("first_cpu_hit_tokens", self.first_cpu_hit_tokens),
            ("num_loads", self.num_loads),
            ("loaded_blocks", self.loaded_blocks),
            ("num_stores", self.num_stores),
            ("stored_blocks", self.stored_blocks),
            ("cpu_evictions", self.cpu_evictions),
            ("stores_failed", self.stores_failed),
            ("stores_skipped", self.stores_skipped),
            ("num_flushes", self.num_flushes),
            ("load_wait_ps", self.load_wait_ps),
            ("w_cpu_chunks", self.w_cpu_chunks),
            ("peak_cpu_chunks", self.peak_cpu_chunks),
            ("loaded_group_bytes", self.loaded_group_bytes),
            ("stored_group_bytes", self.stored_group_bytes),
            ("pd_transfers", self.pd_transfers),
            ("pd_transfer_blocks", self.pd_transfer_blocks),
            ("pd_link_busy_ps", self.pd_link_busy_ps),
        ]
    }
}

/// Calls `$m!(column, initial value)` for each per-row output column of `EngineOutput`, in order: the
/// one list that every place handling a row's columns goes through (making, growing, cutting, moving
/// and gathering them).
macro_rules! for_each_row_column {
    ($m:ident) => {
        $m!(first_scheduled, -1);
        $m!(first_token, -1);
        $m!(finish, -1);
        $m!(generated, 0);
        $m!(num_preemptions, 0);
        $m!(num_swaps, 0);
        $m!(cached_tokens, 0);
        $m!(recomputed_tokens, 0);
        $m!(cpu_hit_tokens, 0);
        $m!(load_wait_ps, 0);
        $m!(status, -1);
        $m!(reject_reason, 0);
    };
}
pub(crate) use for_each_row_column;

#[derive(Clone, Debug, Default)]
pub struct EngineOutput {
    pub first_scheduled: Vec<i64>,
    pub first_token: Vec<i64>,
    pub finish: Vec<i64>,
    pub generated: Vec<i64>,
    pub num_preemptions: Vec<i64>,
    pub num_swaps: Vec<i64>,
    pub cached_tokens: Vec<i64>,
    pub recomputed_tokens: Vec<i64>,
    /// Tokens of the row loaded from the CPU tier, and the time it waited for its loads.
    pub cpu_hit_tokens: Vec<i64>,
    pub load_wait_ps: Vec<i64>,
    /// 0 finished, 1 rejected (-1 until then).
    pub status: Vec<i8>,
    /// 0, or why the row was rejected (`engine::reject`).
    pub reject_reason: Vec<i8>,
    pub counters: Counters,
    /// One row per recorded step, columns as `TIMESERIES`.
    pub timeseries: Vec<[i64; 10]>,
    /// A hybrid model: each recorded step's blocks per KV-cache group in the running tables, one row of
    /// `groups` values per `timeseries` row (columns `blocks_group_<g>`).
    pub group_timeseries: Vec<i64>,
    /// With `record_events`: `[steps done, time ps, kind, row, block or -1, count or -1]` per event
    /// (`engine::event`).
    pub events: Vec<[i64; 6]>,
    /// ITL's record (`kvsim.engine.metrics`): every step's duration, run-length coded (`StepDurations`).
    pub itl_steps: StepDurations,
    /// ITL's record: every run of tokens a sequence sampled in consecutive steps, as the columns `row`,
    /// first step, last step, gap ps before its first token or -1 for the sequence's first token, a
    /// row each when it closed (the next token came after a break, or the sequence finished). Kept as
    /// columns (`push_itl_run`), handed over as they are (`take_itl_columns`): a run's 32 bytes in one
    /// vector reached 32 MiB on a million requests, which the allocator maps afresh (and the kernel
    /// zeroes) every run, and was copied into the columns after.
    pub itl_runs: [Vec<i64>; 4],
}

/// The ITL record's runs `EngineOutput::for_run` makes room for (8 KiB a column).
pub(super) const ITL_FIRST_RUNS: usize = 1024;

/// Names of `itl_steps`' then `itl_runs`' columns (the Python side's `ITL_STEPS` and `ITL_RUNS`).
pub const ITL_COLUMNS: [&str; 7] = [
    "step_ps",
    "step_slope_ps",
    "step_repeat",
    "run_row",
    "run_first",
    "run_last",
    "run_gap_ps",
];

/// Every step's duration, run-length coded as entries `[first step's ps, slope ps, steps]` (step j of an
/// entry, from 0, lasts `first + j * slope`), joined greedily: an entry of one step takes any next one
/// (its slope set by it), a longer one a step continuing its progression; else a new entry starts (the
/// reference's `push_step`, the same rule, so both give the same entries).
///
/// The last entry is kept open outside the list, with the duration that would continue it: `record`
/// calls `push` every step, and its common case is one comparison and two adds.
#[derive(Clone, Debug)]
pub struct StepDurations {
    closed: Vec<[i64; 3]>,
    /// The last entry (`[_, _, 0]` before the first step).
    open: [i64; 3],
    /// The duration that continues `open` once it holds two steps or more; `NO_NEXT` (no duration)
    /// while it holds fewer, so that every such step takes the slow path.
    next_ps: i64,
}

/// No step lasts this long (durations are in 0..=2^62).
const NO_NEXT: i64 = i64::MIN;

impl Default for StepDurations {
    fn default() -> Self {
        StepDurations {
            closed: Vec::new(),
            open: [0, 0, 0],
            next_ps: NO_NEXT,
        }
    }
}

impl StepDurations {
    /// Appends a step of `dt` ps.
    #[inline]
    pub fn push(&mut self, dt: i64) {
        // Durations are in 0..=2^62 and slopes in -2^62..=2^62, so a wrapped sum (only 2^63 wraps, to
        // `NO_NEXT`) never equals a duration it should not.
        if dt == self.next_ps {
            self.open[2] += 1;
            self.next_ps = dt.wrapping_add(self.open[1]);
        } else {
            self.push_new(dt);
        }
    }

    /// `push`'s other cases: the first step, the second of an entry (its slope), a step that breaks the
    /// progression (a new entry).
    #[cold]
    #[inline(never)]
    fn push_new(&mut self, dt: i64) {
        match self.open[2] {
            0 => self.open = [dt, 0, 1],
            1 => {
                self.open[1] = dt - self.open[0];
                self.open[2] = 2;
                self.next_ps = dt.wrapping_add(self.open[1]);
            }
            _ => {
                self.closed.push(self.open);
                self.open = [dt, 0, 1];
                self.next_ps = NO_NEXT;
            }
        }
    }

    /// Appends `n` steps lasting `dt0 + j * ddt` (j from 0): as `n` calls of `push`, in O(1). After
    /// three of them the open entry holds the last two with slope `ddt`, so the rest continue it.
    pub fn push_steps(&mut self, dt0: i64, ddt: i64, n: u64) {
        for j in 0..n.min(3) {
            self.push(dt0 + ddt * j as i64);
        }
        if n > 3 {
            debug_assert_eq!(self.open[1], ddt, "the span's slope");
            self.open[2] += (n - 3) as i64;
            self.next_ps = self.next_ps.wrapping_add(ddt.wrapping_mul((n - 3) as i64));
        }
    }

    /// The entries, in order.
    pub fn entries(&self) -> impl Iterator<Item = [i64; 3]> + '_ {
        let open = (self.open[2] > 0).then_some(self.open);
        self.closed.iter().copied().chain(open)
    }
}

/// Time-series columns: step index, its start (ps), batch size, batched tokens, then token slots free,
/// stored, allocated, internal slack, reserved for later, and stranded between regions.
pub const TIMESERIES: [&str; 10] = [
    "step",
    "time_ps",
    "batch",
    "batched_tokens",
    "free_tokens",
    "stored_tokens",
    "allocated_tokens",
    "internal_tokens",
    "reserved_tokens",
    "external_tokens",
];

impl EngineOutput {
    /// `n` rows in their initial state (`for_each_row_column`'s values; `vec!` leaves a zero column's
    /// pages untouched until written).
    pub fn new(n: usize) -> Self {
        let mut out = EngineOutput::default();
        macro_rules! make {
            ($col:ident, $init:expr) => {
                out.$col = vec![$init; n];
            };
        }
        for_each_row_column!(make);
        out
    }

    /// `new(n)` with room for the ITL record's first `ITL_FIRST_RUNS` runs, for a run whose caller makes
    /// its output (`engine::run_into`): a growing vector is reallocated in the allocator arena of its
    /// first block, so the ITL record's columns then grow in the caller's arena too, not in the worker
    /// thread's.
    pub fn for_run(n: usize) -> Self {
        let mut out = Self::new(n);
        for col in &mut out.itl_runs {
            col.reserve_exact(ITL_FIRST_RUNS);
        }
        out
    }

    /// Records a closed run of tokens: `[row, first step, last step, gap ps or -1]` (`itl_runs`).
    #[inline]
    pub(super) fn push_itl_run(&mut self, run: [i64; 4]) {
        for (col, v) in self.itl_runs.iter_mut().zip(run) {
            col.push(v);
        }
    }

    /// ITL's record as named columns (`ITL_COLUMNS`), the runs' taken out (not copied).
    pub fn take_itl_columns(&mut self) -> Vec<(&'static str, Vec<i64>)> {
        let mut cols: Vec<(&'static str, Vec<i64>)> = (0..3)
            .map(|i| {
                (
                    ITL_COLUMNS[i],
                    self.itl_steps.entries().map(|e| e[i]).collect(),
                )
            })
            .collect();
        cols.extend((0..4).map(|i| (ITL_COLUMNS[3 + i], std::mem::take(&mut self.itl_runs[i]))));
        cols
    }

    /// Adds `n` rows in their initial state (a stream's next chunk, a replica's next ones).
    pub fn extend_rows(&mut self, n: usize) {
        let k = self.status.len() + n;
        macro_rules! grow {
            ($col:ident, $init:expr) => {
                self.$col.resize(k, $init);
            };
        }
        for_each_row_column!(grow);
    }

    /// Moves the first `to.len()` rows' columns into `dst`, the `j`-th to row `to[j]` there, and drops
    /// them here (the rows after them move to the front).
    pub fn move_front_into(&mut self, to: &[usize], dst: &mut EngineOutput) {
        let k = to.len();
        macro_rules! move_front {
            ($col:ident, $init:expr) => {
                for (&v, &g) in self.$col[..k].iter().zip(to) {
                    dst.$col[g] = v;
                }
                self.$col.drain(..k);
            };
        }
        for_each_row_column!(move_front);
    }

    /// As `move_front_into`, but only the rows whose status `keep` accepts reach `dst`; the others
    /// are dropped (a prefill replica's hand-offs, whose rows the decode replica writes).
    pub fn move_front_into_if(
        &mut self,
        to: &[usize],
        dst: &mut EngineOutput,
        keep: impl Fn(i8) -> bool,
    ) {
        let k = to.len();
        let mask: Vec<bool> = self.status[..k].iter().map(|&s| keep(s)).collect();
        macro_rules! move_front {
            ($col:ident, $init:expr) => {
                for ((&v, &g), &m) in self.$col[..k].iter().zip(to).zip(&mask) {
                    if m {
                        dst.$col[g] = v;
                    }
                }
                self.$col.drain(..k);
            };
        }
        for_each_row_column!(move_front);
    }

    /// Keeps the first `k` rows' columns (counters, time series and events stay).
    pub fn truncate_rows(&mut self, k: usize) {
        macro_rules! cut {
            ($col:ident, $init:expr) => {
                self.$col.truncate(k);
            };
        }
        for_each_row_column!(cut);
    }

    /// Takes the first `k` rows' columns out (counters, time series and events stay).
    #[must_use]
    pub fn take_front(&mut self, k: usize) -> EngineOutput {
        let mut front = EngineOutput::default();
        macro_rules! take {
            ($col:ident, $init:expr) => {
                let rest = self.$col.split_off(k);
                front.$col = std::mem::replace(&mut self.$col, rest);
            };
        }
        for_each_row_column!(take);
        front
    }

    /// The time series as named columns.
    pub fn timeseries_columns(&self) -> Vec<(String, Vec<i64>)> {
        let mut cols: Vec<(String, Vec<i64>)> = TIMESERIES
            .iter()
            .enumerate()
            .map(|(i, &name)| {
                (
                    name.to_string(),
                    self.timeseries.iter().map(|row| row[i]).collect(),
                )
            })
            .collect();
        let groups = self.counters.group_blocks.len();
        if groups > 0 {
            for g in 0..groups {
                cols.push((
                    format!("blocks_group_{g}"),
                    self.group_timeseries
                        .iter()
                        .skip(g)
                        .step_by(groups)
                        .copied()
                        .collect(),
                ));
            }
        }
        cols
    }

    /// The event log as named columns.
    pub fn event_columns(&self) -> Vec<(&'static str, Vec<i64>)> {
        ["step", "time_ps", "kind", "seq", "block", "count"]
            .iter()
            .enumerate()
            .map(|(i, &name)| (name, self.events.iter().map(|row| row[i]).collect()))
            .collect()
    }

    /// Each column with its name (the Python side's keys): the 64-bit ones, then `status` and
    /// `reject_reason`.
    #[allow(clippy::type_complexity)]
    pub fn columns(
        self,
    ) -> (
        Vec<(&'static str, Vec<i64>)>,
        [(&'static str, Vec<i8>); 2],
        Counters,
    ) {
        (
            vec![
                ("first_scheduled", self.first_scheduled),
                ("first_token", self.first_token),
                ("finish", self.finish),
                ("generated", self.generated),
                ("num_preemptions", self.num_preemptions),
                ("num_swaps", self.num_swaps),
                ("cached_tokens", self.cached_tokens),
                ("recomputed_tokens", self.recomputed_tokens),
                ("cpu_hit_tokens", self.cpu_hit_tokens),
                ("load_wait_ps", self.load_wait_ps),
            ],
            [
                ("status", self.status),
                ("reject_reason", self.reject_reason),
            ],
            self.counters,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::StepDurations;

    /// The reference's `push_step`, on a list of entries.
    fn push_listed(entries: &mut Vec<[i64; 3]>, dt: i64) {
        if let Some(last) = entries.last_mut() {
            if last[2] == 1 {
                last[1] = dt - last[0];
                last[2] = 2;
                return;
            }
            // Unbounded, as Python's integers.
            if i128::from(dt) == i128::from(last[0]) + i128::from(last[1]) * i128::from(last[2]) {
                last[2] += 1;
                return;
            }
        }
        entries.push([dt, 0, 1]);
    }

    /// `push_steps` gives the entries of as many `push` calls, whatever came before, and `push` those
    /// of the reference's rule.
    #[test]
    fn push_steps_equals_one_step_at_a_time() {
        let before: [&[i64]; 5] = [&[], &[7], &[5, 9], &[4, 4, 4], &[0, 0, 3, 6]];
        for prefix in before {
            for (dt0, ddt) in [(10, 0), (10, 3), (100, -7), (4, 0), (9, 4), (0, 0)] {
                for n in 0..8u64 {
                    let (mut bulk, mut one) = (StepDurations::default(), StepDurations::default());
                    let mut listed = Vec::new();
                    for &d in prefix {
                        bulk.push(d);
                        one.push(d);
                        push_listed(&mut listed, d);
                    }
                    bulk.push_steps(dt0, ddt, n);
                    for j in 0..n as i64 {
                        one.push(dt0 + ddt * j);
                        push_listed(&mut listed, dt0 + ddt * j);
                    }
                    let next = dt0 + ddt * n as i64; // the next step continues both alike
                    bulk.push(next);
                    one.push(next);
                    push_listed(&mut listed, next);
                    let entries: Vec<_> = one.entries().collect();
                    assert_eq!(
                        bulk.entries().collect::<Vec<_>>(),
                        entries,
                        "{prefix:?} {dt0} {ddt} {n}"
                    );
                    assert_eq!(entries, listed, "{prefix:?} {dt0} {ddt} {n}");
                    let total: i64 = entries.iter().map(|e| e[2]).sum();
                    assert_eq!(total, prefix.len() as i64 + n as i64 + 1);
                }
            }
        }
    }

    /// Durations at the ends of their range: a progression whose next duration would wrap (2^63) ends
    /// its entry, as the reference's (unbounded integers) does.
    #[test]
    fn extreme_durations() {
        let big = 1_i64 << 62;
        let mut d = StepDurations::default();
        let mut listed = Vec::new();
        for dt in [0, big, 0, big, big, 0, 0, 0] {
            d.push(dt);
            push_listed(&mut listed, dt);
        }
        assert_eq!(d.entries().collect::<Vec<_>>(), listed);
        assert_eq!(StepDurations::default().entries().count(), 0);
    }
}
