//! Time models (DESIGN.md §Engine): a step's duration (ticks, or the linear model over tokens and
//! context) plus its swap time, and the clock's range.

use super::{Engine, MAX_TIME_PS, TimeModel};

impl Engine<'_> {
    pub(super) fn step_time(&mut self) -> (u64, u64) {
        let (mut tokens, mut context) = (0u64, 0u64);
        for &(k, n) in &self.scheduled {
            tokens += n;
            context += self.slab[k].num_computed;
        }
        (self.linear_time(tokens, context), tokens)
    }

    /// The step's duration: the time model, plus PCIe time for the blocks swapped out or in.
    pub(super) fn linear_time(&mut self, tokens: u64, context: u64) -> u64 {
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
}

/// The error of a step that would end past `MAX_TIME_PS` (the reference raises the same text).
pub(super) fn clock_overflow_message(step: u64, t: i64) -> String {
    format!(
        "step {step} starting at {t} ps would end past the simulated clock's range of {MAX_TIME_PS} ps \
         (about 53 days): the time model's coefficients (iteration_time_ps, c0_ps, c_tok_ps, c_ctx_ps, \
         swap_ps_per_block) are too large for this workload"
    )
}
