"""What the engine scenario tests share (tests/test_engine_golden.py, tests/test_presets.py): requests
written by hand, the workload they make, 1 ms ticks, a result's column, a run on either backend."""

from __future__ import annotations

from dataclasses import dataclass

import kvsim
from kvsim import SimConfig

BACKENDS = ["reference", "rust"]
MS = 10**9  # picoseconds per tick (iteration_time_ps default)


@dataclass
class Req:
    """One request: `prompt` is a token count (a unique segment) or a list of (segment_id, length)."""

    prompt: int | list[tuple[int, int]]
    output: int
    arrival: float = 0.0
    max_tokens: int | None = None
    samples: int = 1


def build(reqs: list[Req]) -> kvsim.Workload:
    """A Workload with explicit segments; an int prompt becomes a segment no other request shares."""
    offsets, seg_id, seg_len = [0], [], []
    for i, r in enumerate(reqs):
        segs = [(1_000_000 + i, r.prompt)] if isinstance(r.prompt, int) else r.prompt
        for sid, n in segs:
            seg_id.append(sid)
            seg_len.append(n)
        offsets.append(len(seg_id))
    return kvsim.Workload(
        arrival=[r.arrival for r in reqs],
        output_len=[r.output for r in reqs],
        max_tokens=[r.max_tokens if r.max_tokens is not None else r.output for r in reqs],
        num_samples=[r.samples for r in reqs],
        seg_offsets=offsets,
        segment_id=seg_id,
        segment_len=seg_len,
    )


def ticks(values: list[float | None]) -> list[int | None]:
    """Seconds (as rows give them) to whole 1 ms ticks, checking they are whole ticks."""
    out: list[int | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        t = round(v * 1000)
        assert abs(v * 1000 - t) < 1e-6, v
        out.append(t)
    return out


def col(res: kvsim.SimResult, name: str) -> list:
    return res.requests[name].to_list()


def run(reqs: list[Req], backend: str, **cfg) -> kvsim.SimResult:
    return kvsim.simulate(build(reqs), SimConfig(**cfg), backend=backend)
