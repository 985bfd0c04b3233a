//! Time models (DESIGN.md §Engine, §Time model): a step's duration (ticks, the linear model over tokens
//! and context, or the roofline over the step's per-operator aggregates) plus its swap time, and the
//! clock's range. The twin of `python/kvsim/reference/engine/timing.py`.

use super::config::{AttnKind, Roofline};
use super::{Engine, MAX_TIME_PS, TimeModel};

/// A roofline step's attention aggregates, one class's: keys read by sequences computing one token
/// (`xd`), keys read, query-key pairs and tokens in the step of the others (`xp`, `yp`, `tp`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct AttnSums {
    pub xd: u128,
    pub xp: u128,
    pub yp: u128,
    pub tp: u128,
}

impl Roofline {
    /// The step's picoseconds, one `AttnSums` per class, saturating at `u64::MAX` (past
    /// `MAX_TIME_PS`: `record` stops the run).
    #[inline]
    pub(super) fn time(&self, tokens: u64, seqs: u64, sums: &[AttnSums]) -> u64 {
        let mut total = self.base(tokens, seqs);
        for (a, x) in self.attention.iter().zip(sums) {
            total = total.saturating_add(a.attention_ps(x));
        }
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// The same without the routed experts' term (a rank of a DP group: `Engine::step_time_apart`).
    pub(super) fn time_apart(&self, tokens: u64, seqs: u64, sums: &[AttnSums]) -> u64 {
        let mut total = self.base_apart(tokens, seqs);
        for (a, x) in self.attention.iter().zip(sums) {
            total = total.saturating_add(a.attention_ps(x));
        }
        u64::try_from(total).unwrap_or(u64::MAX)
    }

    /// The same when every class reads the same keys and pairs (full attention only: lockstep); `apart`:
    /// without the routed experts' term (a rank of a DP group).
    #[allow(clippy::inline_always)] // (one body, `apart` a constant at each call: measured)
    #[inline(always)]
    pub(super) fn time_uniform(&self, tokens: u64, seqs: u64, x: &AttnSums, apart: bool) -> u64 {
        let mut total = if apart {
            self.base_apart(tokens, seqs)
        } else {
            self.base(tokens, seqs)
        };
        for a in &self.attention {
            total = total.saturating_add(a.attention_ps(x));
        }
        u64::try_from(total).unwrap_or(u64::MAX)
    }
}

impl super::config::AttnClass {
    /// `max(kv', flop) · Xd + max(prefill_kv · Xp, prefill_flop · Yp) + context · C +
    /// max(context_weight + context_gemm · C, context_flop · C)`, `C = Xp − Tp` the keys the prefilling
    /// sequences had cached (a prefilling sequence reads at least its own tokens' keys, so `Xp ≥ Tp`),
    /// the context terms only where `C > 0` (the weights read once a step): keys read are below 2^73 (2^32 sequences of at most 2^41 tokens), so with
    /// coefficients of at most 2^40 the decode, key and context terms fit 128 bits; pairs may not, and
    /// saturate.
    #[inline]
    fn attention_ps(&self, x: &AttnSums) -> u128 {
        let per_key = if x.xp > 0 {
            self.mixed_decode_ps()
        } else {
            self.decode_ps()
        };
        let decode = u128::from(per_key) * x.xd;
        if x.xp == 0 {
            return decode;
        }
        let pairs = (u128::from(self.prefill_kv_ps) * x.xp)
            .max(u128::from(self.prefill_flop_ps).saturating_mul(x.yp));
        let total = decode.saturating_add(pairs);
        let cached = x.xp - x.tp;
        if cached == 0 {
            return total;
        }
        let w = u128::from;
        let gemm = (w(self.context_weight_ps) + w(self.context_gemm_ps) * cached)
            .max(w(self.context_flop_ps) * cached);
        total.saturating_add(w(self.context_ps) * cached + gemm)
    }
}

impl Engine<'_> {
    /// The step's duration and batched tokens, from the scheduled sequences (full steps).
    pub(super) fn step_time(&mut self) -> (u64, u64) {
        let cfg = self.cfg;
        if let TimeModel::Roofline(r) = &cfg.time {
            return self.roofline_step_time(r);
        }
        let (mut tokens, mut context) = (0u64, 0u64);
        for &(k, n) in &self.scheduled {
            tokens += n;
            context += self.slab[k].num_computed;
        }
        (self.linear_time(tokens, context), tokens)
    }

    /// `step_time` under the roofline, out of line: inlined into `Engine::advance` with the MLA prefill
    /// terms it moved the ticks benchmark by +0.7 % (results/README.md, "Dense MLA's prefill path").
    #[inline(never)]
    fn roofline_step_time(&mut self, r: &Roofline) -> (u64, u64) {
        let tokens = self.roofline_sums(r);
        let dt = r.time(tokens, self.scheduled.len() as u64, &self.attn_sums);
        (self.with_swap(dt), tokens)
    }

    /// A rank of a DP group's step (`group_plan`): `step_time` but the routed experts' term, which the
    /// group's driver adds for every rank's tokens (`experts_time`); the batched tokens.
    pub(super) fn step_time_apart(&mut self) -> (u64, u64) {
        let cfg = self.cfg;
        let TimeModel::Roofline(r) = &cfg.time else {
            return self.step_time();
        };
        let tokens = self.roofline_sums(r);
        let dt = r.time_apart(tokens, self.scheduled.len() as u64, &self.attn_sums);
        (self.with_swap(dt), tokens)
    }

    /// The routed experts' term of a DP group's step whose ranks' tokens sum to `gathered` (every rank's
    /// experts compute them all, vLLM's all-gather before each MoE layer), saturating; 0 but under the
    /// roofline of a mixture-of-experts model.
    pub(crate) fn experts_time(&self, gathered: u64) -> u64 {
        match &self.cfg.time {
            TimeModel::Roofline(r) => {
                u64::try_from(r.experts_ps(u128::from(gathered))).unwrap_or(u64::MAX)
            }
            _ => 0,
        }
    }

    /// The scheduled sequences' attention aggregates into `attn_sums`; the batched tokens.
    #[inline]
    fn roofline_sums(&mut self, r: &Roofline) -> u64 {
        let mut tokens = 0u64;
        self.attn_sums.clear();
        self.attn_sums
            .resize(r.attention.len(), AttnSums::default());
        for &(k, n) in &self.scheduled {
            tokens += n;
            let c = self.slab[k].num_computed;
            for (a, x) in r.attention.iter().zip(self.attn_sums.iter_mut()) {
                let (keys, pairs) = if a.kind == AttnKind::Full && n == 1 {
                    (u128::from(c), 0)
                } else {
                    a.keys_and_pairs(c, n)
                };
                if n == 1 {
                    x.xd += keys;
                } else {
                    x.xp += keys;
                    x.yp += pairs;
                    x.tp += u128::from(n);
                }
            }
        }
        tokens
    }

    /// A lockstep step's duration under the roofline: the running sequences, each computing one token,
    /// read `xd` keys; the scheduled admissions (`self.scheduled`) add theirs; `tokens` in all. Only
    /// full-attention classes reach lockstep.
    pub(super) fn lockstep_time(&mut self, tokens: u64, xd: u64) -> u64 {
        self.lockstep_time_of(tokens, xd, false)
    }

    /// `lockstep_time` but the routed experts' term: a rank of a DP group (`group_plan`), whose
    /// driver adds it for the ranks' tokens gathered.
    pub(super) fn lockstep_time_apart(&mut self, tokens: u64, xd: u64) -> u64 {
        self.lockstep_time_of(tokens, xd, true)
    }

    #[allow(clippy::inline_always)] // (one body, `apart` a constant at each call: measured)
    #[inline(always)]
    fn lockstep_time_of(&mut self, tokens: u64, xd: u64, apart: bool) -> u64 {
        let cfg = self.cfg;
        let TimeModel::Roofline(r) = &cfg.time else {
            unreachable!("ticks and linear take linear_time");
        };
        let mut x = AttnSums {
            xd: u128::from(xd),
            ..AttnSums::default()
        };
        for &(k, n) in &self.scheduled {
            let c = u128::from(self.slab[k].num_computed);
            if n == 1 {
                x.xd += c;
            } else {
                let n = u128::from(n);
                x.xp += c;
                x.yp += n * c - n * (n - 1) / 2;
                x.tp += n;
            }
        }
        let dt = r.time_uniform(tokens, self.running.len() as u64, &x, apart);
        self.with_swap(dt)
    }

    /// The step's duration: the time model, plus PCIe time for the blocks swapped out or in.
    pub(super) fn linear_time(&mut self, tokens: u64, context: u64) -> u64 {
        let dt = match &self.cfg.time {
            TimeModel::Ticks { iteration_ps } => *iteration_ps,
            TimeModel::Linear {
                c0_ps,
                c_tok_ps,
                c_ctx_ps,
            } => c0_ps
                .saturating_add(c_tok_ps.saturating_mul(tokens))
                .saturating_add(c_ctx_ps.saturating_mul(context)),
            TimeModel::Roofline(_) => {
                unreachable!("the roofline is timed by step_time / lockstep_time")
            }
        };
        self.with_swap(dt)
    }

    /// `dt` plus the PCIe time of the blocks swapped in this step (saturating: a step too long for the
    /// clock stops the run in `record`).
    #[inline]
    fn with_swap(&mut self, dt: u64) -> u64 {
        let swap =
            std::mem::take(&mut self.swap_blocks_step).saturating_mul(self.cfg.swap_ps_per_block);
        swap.saturating_add(dt)
    }
}

/// The first step `i` in `lo..hi` starting at or after `gap` (`hi` if none does), where step `i` starts
/// at `start(i)`, nondecreasing in `i`: the step an arrival at `gap` joins. The one search of a quiet
/// span's end (`lockstep.rs`), a stepped replica's horizon (`quiet.rs`) and a DP group's envelope
/// (`cluster/dp.rs`), over their own index types (`u64`, `i128`). A macro rather than a generic function:
/// the function, inlined, gave `skip_quiet_steps`' hot path other registers and more instructions
/// (callgrind, `bench.callgrind_engine`); the macro compiles to the code it replaced.
macro_rules! first_start_at_or_after {
    ($lo:expr, $hi:expr, $gap:expr, $start:expr) => {{
        let (mut lo, mut hi) = ($lo, $hi);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if $start(mid) >= $gap {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }};
}
pub(crate) use first_start_at_or_after;

/// The error of a step that would end past `MAX_TIME_PS` (the reference raises the same text).
pub(super) fn clock_overflow_message(step: u64, t: i64) -> String {
    format!(
        "step {step} starting at {t} ps would end past the simulated clock's range of {MAX_TIME_PS} ps \
         (about 53 days): the time model's coefficients (iteration_time_ps, c0_ps, c_tok_ps, c_ctx_ps, \
         the roofline's, swap_ps_per_block) are too large for this workload"
    )
}

/// A transfer on a link whose end is checked against `MAX_TIME_PS` (`transfer_end`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Transfer {
    /// A CPU tier's load (CPU to GPU).
    Load,
    /// A CPU tier's store (GPU to CPU).
    Store,
    /// A decode replica's transfer from the prefill pool.
    Remote,
}

/// When a transfer of `blocks` blocks starting at `start` ends on a link taking `latency` plus
/// `per_block` a block: None past `MAX_TIME_PS` (checked throughout: no product or sum wraps).
#[inline]
pub(super) fn transfer_end(start: i64, latency: u64, blocks: u64, per_block: u64) -> Option<i64> {
    let duration = blocks.checked_mul(per_block)?.checked_add(latency)?;
    let end = start.checked_add(i64::try_from(duration).ok()?)?;
    (end <= MAX_TIME_PS as i64).then_some(end)
}

/// The error of a transfer that would end past `MAX_TIME_PS` (the reference raises the same text).
#[cold]
pub(super) fn transfer_overflow_message(what: Transfer, blocks: u64, start: i64) -> String {
    let (name, knobs) = match what {
        Transfer::Load => (
            "a CPU-tier load",
            "kv_offloading_latency_ps and kv_offloading_ps_per_block",
        ),
        Transfer::Store => (
            "a CPU-tier store",
            "kv_offloading_latency_ps and kv_offloading_ps_per_block",
        ),
        Transfer::Remote => (
            "a prefill-to-decode KV transfer",
            "pd_link_latency_s and pd_link_ps_per_block (or pd_link_bandwidth)",
        ),
    };
    format!(
        "{name} of {blocks} blocks starting at {start} ps would end past the simulated clock's range of \
         {MAX_TIME_PS} ps (about 53 days): {knobs} are too large for this workload"
    )
}
