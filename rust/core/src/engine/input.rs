//! The engine's input: per-sequence columns borrowed from the caller (numpy arrays from Python), checked
//! once so that the run itself cannot index out of bounds or underflow.

use crate::{Result, invalid_arg};

#[derive(Clone, Copy, Debug)]
pub struct EngineInput<'a> {
    pub arrival_ps: &'a [i64],
    pub prompt_len: &'a [i64],
    /// Tokens to generate (output length capped by max tokens and max model length).
    pub target: &'a [i64],
    /// The most the sequence may generate (what `reserve` and `orca-max` size for).
    pub max_gen: &'a [i64],
    /// -1, or (fork-cow) the earlier row of sample 0 this sample is forked from; samples follow it.
    /// Empty when no row is forked (all -1).
    pub fork_parent: &'a [i64],
    /// Content id of the sequence's generated tokens.
    pub output_seg: &'a [u64],
    /// CSR offsets (length n + 1) into `segment_id` / `segment_len`: each sequence's prompt segments.
    pub seg_offsets: &'a [i64],
    pub segment_id: &'a [u64],
    pub segment_len: &'a [i64],
}

impl EngineInput<'_> {
    #[inline]
    pub fn len(&self) -> usize {
        self.arrival_ps.len()
    }

    /// Row `i`'s fork parent (-1 for none; `fork_parent` may be empty).
    #[inline]
    pub fn fork_parent(&self, i: usize) -> i64 {
        self.fork_parent.get(i).copied().unwrap_or(-1)
    }

    /// Whether any row is forked from another.
    pub fn has_forks(&self) -> bool {
        self.fork_parent.iter().any(|&p| p >= 0)
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.arrival_ps.is_empty()
    }

    pub fn validate(&self) -> Result<()> {
        let n = self.len();
        for (name, len) in [
            ("prompt_len", self.prompt_len.len()),
            ("target", self.target.len()),
            ("max_gen", self.max_gen.len()),
            ("output_seg", self.output_seg.len()),
        ] {
            if len != n {
                invalid_arg!("column {name} has {len} rows, arrival_ps has {n}");
            }
        }
        if !self.fork_parent.is_empty() && self.fork_parent.len() != n {
            invalid_arg!(
                "column fork_parent has {} rows, arrival_ps has {n} (or 0: none forked)",
                self.fork_parent.len()
            );
        }
        if self.seg_offsets.len() != n + 1 || self.seg_offsets.first() != Some(&0) {
            invalid_arg!("seg_offsets must have {} entries starting at 0", n + 1);
        }
        if self.segment_id.len() != self.segment_len.len() {
            invalid_arg!("segment_id and segment_len differ in length");
        }
        if self.seg_offsets[n] as usize != self.segment_id.len() {
            invalid_arg!(
                "seg_offsets ends at {}, not at {} segments",
                self.seg_offsets[n],
                self.segment_id.len()
            );
        }
        let mut last_arrival = 0;
        for i in 0..n {
            let (lo, hi) = (self.seg_offsets[i], self.seg_offsets[i + 1]);
            if lo > hi {
                invalid_arg!("row {i}: seg_offsets decrease ({lo} > {hi})");
            }
            if hi as usize > self.segment_len.len() {
                invalid_arg!(
                    "row {i}: seg_offsets {hi} is past the {} segments",
                    self.segment_len.len()
                );
            }
            let mut sum = 0i64;
            for k in lo as usize..hi as usize {
                if self.segment_len[k] < 1 {
                    invalid_arg!(
                        "row {i}: segment length {} must be at least 1",
                        self.segment_len[k]
                    );
                }
                sum = sum.saturating_add(self.segment_len[k]);
            }
            if self.prompt_len[i] < 1 || sum != self.prompt_len[i] {
                invalid_arg!(
                    "row {i}: prompt_len {} but segments sum to {sum}",
                    self.prompt_len[i]
                );
            }
            if self.target[i] < 0 || self.max_gen[i] < self.target[i] {
                invalid_arg!(
                    "row {i}: target {} and max_gen {} are inconsistent",
                    self.target[i],
                    self.max_gen[i]
                );
            }
            let p = self.fork_parent(i);
            if p >= i as i64 || p < -1 || (p >= 0 && self.fork_parent(p as usize) != -1) {
                invalid_arg!("row {i}: fork_parent {p} is not -1 or an earlier sample-0 row");
            }
            // A parent's samples are the rows right after it.
            if p >= 0 && p != i as i64 - 1 && self.fork_parent(i - 1) != p {
                invalid_arg!(
                    "row {i}: fork_parent {p} but row {} is not a sample of it",
                    i - 1
                );
            }
            let a = self.arrival_ps[i];
            if i == 0 && a < 0 {
                invalid_arg!("row 0: arrival_ps {a} must not be negative");
            }
            if a < last_arrival {
                invalid_arg!("row {i}: arrival_ps {a} is before the previous row's {last_arrival}");
            }
            if a as u64 >= crate::engine::MAX_TIME_PS {
                invalid_arg!(
                    "row {i}: arrival_ps {a} is past the clock's range ({} ps, about 53 days)",
                    crate::engine::MAX_TIME_PS
                );
            }
            last_arrival = a;
        }
        Ok(())
    }
}
