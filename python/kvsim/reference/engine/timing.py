"""Time models (DESIGN.md §Engine, step 4; the twin of `rust/core/src/engine/timing.rs`): a step's
duration, swap time, and the clock's range."""

from __future__ import annotations

from kvsim.model.config import MAX_TIME_PS
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State


class Timing(State):
    """`ticks`: a fixed iteration time; `linear`: c0 + c_tok x batched tokens + c_ctx x context read;
    both plus the PCIe time of the blocks swapped in the step."""

    def step_time(self, scheduled: list[tuple[Seq, int]]) -> int:
        cfg = self.cfg
        if cfg.time_model == "ticks":
            return cfg.iteration_time_ps + self.swap_time()
        assert cfg.c0_ps is not None
        assert cfg.c_tok_ps is not None
        assert cfg.c_ctx_ps is not None
        tokens = sum(n for _, n in scheduled)
        context = sum(s.num_computed for s, _ in scheduled)
        return cfg.c0_ps + cfg.c_tok_ps * tokens + cfg.c_ctx_ps * context + self.swap_time()

    def swap_time(self) -> int:
        """PCIe time of the blocks swapped out or in during this step (both time models)."""
        blocks, self.swap_blocks_step = self.swap_blocks_step, 0
        return blocks * self.cfg.swap_ps_per_block


def clock_overflow_message(step: int, t: int) -> str:
    """The error of a step that would end past `MAX_TIME_PS` (the Rust engine raises the same text)."""
    return (
        f"step {step} starting at {t} ps would end past the simulated clock's range of {MAX_TIME_PS} ps "
        "(about 53 days): the time model's coefficients (iteration_time_ps, c0_ps, c_tok_ps, c_ctx_ps, "
        "swap_ps_per_block) are too large for this workload"
    )
