"""A transfer on the CPU tier's host link (`Job`; DESIGN.md §CPU tier), the twin of `Job` in
`rust/core/src/engine/offload/mod.rs`: what the tier's single-group rules (`offload.py`) and its hybrid
ones (`offload_hybrid.py`) both move, watch and fence."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.reference.engine.seq import Seq


@dataclass(eq=False)
class Job:
    """A transfer on the host link: a load (CPU to GPU) or a store (GPU to CPU) of a request's chunks."""

    load: bool
    seq: Seq
    keys: list[int]
    blocks: list[int]  # the GPU blocks it reads (a store) or writes (a load)
    end: int  # ps: when its last byte has moved
    avail: int  # the first observation (numbered from 1) that may see it complete
    remote: bool = False  # a decode replica's transfer from the prefill pool (no tier chunks)
    # Its blocks' time on the link, its latency aside (a flushing step times it again): each at
    # `kv_offloading_ps_per_block`, a hybrid model's each at its group's (`Offload.link_ps`).
    link_ps: int = 0
    # A hybrid model's store: the blocks of its window groups, watched from its creation (the rest only
    # once its request finished).
    fenced: list[int] = field(default_factory=list)
