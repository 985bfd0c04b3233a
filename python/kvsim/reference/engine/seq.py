"""A sequence as the scheduler sees it (the twin of `rust/core/src/engine/seq.rs`)."""

from __future__ import annotations

from dataclasses import dataclass, field


def cut_segments(prompt: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """`prompt`'s segments less their last `n` tokens (a segment emptied is dropped)."""
    out = list(prompt)
    while n > 0:
        seg, length = out[-1]
        if length > n:
            out[-1] = (seg, length - n)
            break
        out.pop()
        n -= length
    return out


@dataclass
class Seq:
    """One sequence (a request, or one sample of it) as the scheduler sees it."""

    idx: int
    prompt: list[tuple[int, int]]
    prompt_len: int
    target: int
    max_gen: int
    output_seg: int
    generated: int = 0
    num_computed: int = 0
    computed_at_preemption: int = 0
    # reserve policy: blocks promised but not yet allocated; contiguous: (start, size) region
    reserved_blocks: int = 0
    region: tuple[int, int] | None = None
    swapped_blocks: int = 0  # blocks held in the CPU pool while swapped out (a group's: on its first)
    shared_blocks: int = 0  # a swapped group (on its first member): leading blocks its members share
    admitted_before: bool = False
    # Sampled a token since its (re)admission started it over: it decodes (append_check applies).
    decoding: bool = False
    # fork-cow: the samples forked from this one when its first token is sampled (until then, unforked)
    children: list[Seq] = field(default_factory=list)
    forked: bool = False
    # fork-cow: the sequence group (vLLM v0) this sample belongs to since its fork, named by sample 0's
    # index; -1 for none. A group sits together in the running list and is scheduled, preempted and
    # swapped as one.
    group: int = -1
    # CPU tier (DESIGN.md §CPU tier): transfers in flight for it, the next chunk a store offers, whether a
    # load holds its blocks (`held`) and has landed, whether it still prefills (vLLM's
    # `_inflight_prefills`, which a load's admission reserves blocks for), when its load was admitted.
    jobs: int = 0
    next_store: int = 0
    held: bool = False
    loaded: bool = False
    prefilling: bool = False
    load_at: int = -1
    table: list[int] = field(default_factory=list)  # a finished one's blocks, for its last stores
    # A hybrid model's tier (DESIGN.md §CPU tier, "A hybrid model"): the connector's copy of each group's
    # table (None until scheduled since its last lookup; stale window blocks zeroed), each group's next
    # chunk to offer, and the shared-prefix junction its last admission found.
    conn: list[list[int]] | None = None
    next_stores: list[int] = field(default_factory=list)
    junction: int = 0
    # A landed load's state keys (group, block, boundary, key), until the waiting pass first reaches it
    # (DESIGN.md §CPU tier, "A Mamba group"): None if none.
    landed: list[tuple[int, int, int, int]] | None = None
    # Prefill/decode disaggregation: its prompt was computed on a prefill replica; its full blocks' KV
    # comes over the decode replica's inbound link (vLLM's `do_remote_prefill`).
    remote: bool = False
    # async_scheduling (DESIGN.md §Engine, "Asynchronous scheduling"): finished in the step in flight, it
    # holds its seat and blocks through the next schedule (`retiring`); `freed`: a preemption freed them.
    done: bool = False
    freed: bool = False
    # async_scheduling, a hybrid pool: the step that last scheduled it and its tokens there (DESIGN.md
    # §Engine, "Asynchronous scheduling", "A hybrid model's windows free a step later": `Hybrid.settled`).
    flight_step: int = -1
    flight_tokens: int = 0
    # async_scheduling with a CPU tier: the last step that scheduled it (`offload_async.py`).
    sched_step: int = -1
    # ITL (kvsim.engine.metrics): the current run of tokens sampled in consecutive steps, from step `run_first`
    # to `last_step` (its last token at `last_time` ps), and the gap before its first token (-1: the
    # sequence's first token).
    run_first: int = -1
    run_gap: int = -1
    last_step: int = -1
    last_time: int = -1

    @property
    def seats(self) -> int:
        """Running slots this sequence takes when admitted: itself, plus the samples it will fork."""
        return 1 + (0 if self.forked else len(self.children))

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.generated

    def segments(self) -> list[tuple[int, int]]:
        return [*self.prompt, (self.output_seg, self.generated)] if self.generated else list(self.prompt)
