"""Time models (DESIGN.md §Engine, step 4, and §Time model; the twin of `rust/core/src/engine/timing.rs`): a
step's duration, swap time, and the clock's range."""

from __future__ import annotations

from kvsim.errors import InvalidArgumentError
from kvsim.model.config import MAX_TIME_PS
from kvsim.model.timing import FULL, SLIDING, RooflineTimeModel
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.state import State


class Timing(State):
    """`ticks`: a fixed iteration time; `linear`: c0 + c_tok x batched tokens + c_ctx x context read;
    `roofline`: per operator group the larger of its memory and compute time (`roofline_step`); each plus
    the PCIe time of the blocks swapped in the step."""

    def step_time(self, scheduled: list[tuple[Seq, int]]) -> int:
        cfg = self.cfg
        if cfg.time_model == "ticks":
            return cfg.iteration_time_ps + self.swap_time()
        if cfg.time_model == "roofline":
            rows = [(s.num_computed, n) for s, n in scheduled]
            return roofline_step(cfg.roofline, rows) + self.swap_time()
        assert cfg.c0_ps is not None
        assert cfg.c_tok_ps is not None
        assert cfg.c_ctx_ps is not None
        tokens = sum(n for _, n in scheduled)
        context = sum(s.num_computed for s, _ in scheduled)
        return cfg.c0_ps + cfg.c_tok_ps * tokens + cfg.c_ctx_ps * context + self.swap_time()

    def step_time_apart(self, scheduled: list[tuple[Seq, int]]) -> int:
        """A rank of a data-parallel group's step: `step_time` but the routed experts' term, which the
        group's driver adds once it knows every rank's tokens (`experts_time`)."""
        cfg = self.cfg
        if cfg.time_model == "roofline":
            rows = [(s.num_computed, n) for s, n in scheduled]
            return roofline_step(cfg.roofline, rows, experts=False) + self.swap_time()
        return self.step_time(scheduled)

    def experts_time(self, gathered: int) -> int:
        """The routed experts' term of a data-parallel group's step whose ranks' tokens sum to `gathered`
        (vLLM's all-gather before each MoE layer: every rank's experts compute them all); 0 but under the
        roofline of a mixture-of-experts model."""
        cfg = self.cfg
        if cfg.time_model == "roofline":
            return cfg.roofline.experts_ps(gathered)
        return 0

    def dummy_time(self) -> int:
        """A dummy batch's duration (a rank of a data-parallel group with nothing to run: vLLM's
        `execute_dummy_batch`, `_dummy_run(1)`): one sequence computing one token over one key, no swap;
        the routed experts' term left to the group's driver (`experts_time`: the rank's one token joins
        the gather)."""
        cfg = self.cfg
        if cfg.time_model == "ticks":
            return int(cfg.iteration_time_ps)
        if cfg.time_model == "roofline":
            return roofline_step(cfg.roofline, [(1, 1)], experts=False)
        assert cfg.c0_ps is not None
        assert cfg.c_tok_ps is not None
        assert cfg.c_ctx_ps is not None
        return int(cfg.c0_ps + cfg.c_tok_ps + cfg.c_ctx_ps)

    def swap_time(self) -> int:
        """PCIe time of the blocks swapped out or in during this step (every time model)."""
        blocks, self.swap_blocks_step = self.swap_blocks_step, 0
        return blocks * self.cfg.swap_ps_per_block


def keys_and_pairs(kind: int, window: int, c: int, n: int) -> tuple[int, int]:
    """Keys a sequence reads and query-key pairs it forms in one layer of an attention class, when it has
    `c` tokens computed after the step, `n` of them computed in it (queries at positions c − n .. c − 1):
    full attention reads all `c` keys and each query attends to position + 1 of them; a sliding window of
    `w` reads the last `w + n − 1` and each query attends to min(position + 1, w); chunked local attention
    reads from the start of the first query's chunk of `w` and each query attends to its chunk's keys up
    to itself."""
    if kind == FULL:
        return c, n * c - n * (n - 1) // 2
    if kind == SLIDING:
        lo, hi = c - n + 1, c  # each query attends to min(q, w) keys, q = lo .. hi
        if hi <= window:
            pairs = (lo + hi) * n // 2
        elif lo >= window:
            pairs = window * n
        else:
            pairs = (lo + window) * (window - lo + 1) // 2 + (hi - window) * window
        return min(c, window + n - 1), pairs

    def upto(m: int) -> int:  # pairs of the queries at positions 0 .. m - 1
        q, r = divmod(m, window)
        return q * (window * (window + 1) // 2) + r * (r + 1) // 2

    return c - (c - n) // window * window, upto(c) - upto(c - n)


def roofline_step(rt: RooflineTimeModel, rows: list[tuple[int, int]], experts: bool = True) -> int:
    """The roofline's picoseconds for a step whose scheduled sequences have (tokens computed after the
    step, tokens computed in it) = `rows` (DESIGN.md §Time model):

        fixed + seq·S + tok·T + max(dense_mem + dense_mem_tok·T, dense_flop·T)
        + max(moe_mem[min(N, len − 1)], moe_flop·N) + max(head_mem, head_flop·S)
        + Σ_class max(kv', flop)·Xd + max(prefill_kv·Xp, prefill_flop·Yp)
                  + context·C + max(context_weight + context_gemm·C, context_flop·C)

    with T the batched tokens, S the sequences, Tp the tokens of the sequences computing more than one, and
    per attention class Xd the keys read by sequences computing one token, Xp and Yp the keys read and the
    query-key pairs of the others, C = Xp − Tp the keys they had cached before the step (the last line only
    where C > 0); kv' is the class's kv when no sequence prefills (Xp = 0), its mixed_kv otherwise. N, the
    tokens the routed experts compute, is a lone engine's `moe_senders · T`; without `experts` their term
    is left out (a rank of a DP group: its driver adds it for the ranks' tokens gathered)."""
    tokens = sum(n for _, n in rows)
    prefill = sum(n for _, n in rows if n != 1)
    seqs = len(rows)
    total = (
        rt.fixed_ps
        + rt.seq_ps * seqs
        + rt.tok_ps * tokens
        + max(rt.dense_mem_ps + rt.dense_mem_tok_ps * tokens, rt.dense_flop_tok_ps * tokens)
        + max(rt.head_mem_ps, rt.head_flop_seq_ps * seqs)
    )
    if experts:
        total += rt.experts_ps(rt.moe_senders * tokens)
    for a in rt.attention:
        xd = xp = yp = 0
        for c, n in rows:
            keys, pairs = keys_and_pairs(a.kind, a.window, c, n)
            if n == 1:
                xd += keys
            else:
                xp += keys
                yp += pairs
        decode = max(a.mixed_ps if xp else a.kv_ps, a.flop_ps)
        total += decode * xd
        if xp:
            total += max(a.prefill_key_ps * xp, a.prefill_ps * yp)
            cached = xp - prefill
            if cached:
                gemm = max(a.context_weight_ps + a.context_gemm_ps * cached, a.context_flop_ps * cached)
                total += a.context_ps * cached + gemm
    return total


def clock_overflow_message(step: int, t: int) -> str:
    """The error of a step that would end past `MAX_TIME_PS` (the Rust engine raises the same text)."""
    return (
        f"step {step} starting at {t} ps would end past the simulated clock's range of {MAX_TIME_PS} ps "
        "(about 53 days): the time model's coefficients (iteration_time_ps, c0_ps, c_tok_ps, c_ctx_ps, "
        "the roofline's, swap_ps_per_block) are too large for this workload"
    )


# What each transfer on a link is called in its clock error, and the knobs that set its time.
TRANSFERS = {
    "load": ("a CPU-tier load", "kv_offloading_latency_ps and kv_offloading_ps_per_block"),
    "store": ("a CPU-tier store", "kv_offloading_latency_ps and kv_offloading_ps_per_block"),
    "remote": (
        "a prefill-to-decode KV transfer",
        "pd_link_latency_s and pd_link_ps_per_block (or pd_link_bandwidth)",
    ),
}


def transfer_end(
    what: str, start: int, latency: int, blocks: int, per_block: int, link_ps: int | None = None
) -> int:
    """When a transfer (`TRANSFERS`) of `blocks` blocks starting at `start` ends on a link taking `latency`
    plus `per_block` a block (or `link_ps` for them all: a hybrid model's groups each at their own time a
    block); one that would end past `MAX_TIME_PS` stops the run (the Rust engine stops with the same text
    after the step)."""
    end = start + latency + (blocks * per_block if link_ps is None else link_ps)
    if end > MAX_TIME_PS:
        name, knobs = TRANSFERS[what]
        raise InvalidArgumentError(
            f"{name} of {blocks} blocks starting at {start} ps would end past the simulated clock's range of "
            f"{MAX_TIME_PS} ps (about 53 days): {knobs} are too large for this workload"
        )
    return end
