"""What both engines receive: a workload turned into integer per-sequence columns (shared by both backends).

Doing this once, in numpy, keeps the two engines' inputs bit-identical: arrival times become integer
picoseconds here (SPEC §5), generation targets are capped here, and each request of `n` samples becomes
`n` sequences here: independent ones (`sampling="independent"`, vLLM v1), or, with `"fork-cow"`, samples
1..n-1 marked as forked from sample 0 when its prompt is done (`fork_parent`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvsim.errors import InvalidArgumentError
from kvsim.model.config import MAX_TIME_PS, MAX_TOKENS, PS_PER_S, SimConfig
from kvsim.model.segments import MAX_REQUEST_ID, MAX_SAMPLES, OUTPUT_BIT


@dataclass(frozen=True)
class EngineInput:
    """Per-sequence columns, sorted by (arrival, request row, sample). All integer and contiguous, but
    for constants (`sample` with one sample per request, `fork_parent` with nothing forked), which are
    read-only broadcasts taking no memory; columns equal to the workload's are the workload's arrays."""

    request_row: np.ndarray  # int64: the workload row this sequence belongs to
    request_id: np.ndarray  # uint64
    sample: np.ndarray  # int64
    arrival_ps: np.ndarray  # int64
    prompt_len: np.ndarray  # int64
    target: (
        np.ndarray
    )  # int64: tokens this sequence generates (output_len capped by max_tokens/max_model_len)
    max_gen: np.ndarray  # int64: the most it could generate (max_tokens capped): what reservations size for
    fork_parent: np.ndarray  # int64: -1, or (fork-cow) the row of sample 0 this sample is forked from
    # (a read-only broadcast of -1, no memory, when nothing is forked)
    output_seg: np.ndarray  # uint64: content id of this sequence's generated tokens
    seg_offsets: np.ndarray  # int64, len n+1, into the workload's flat segment arrays
    segment_id: np.ndarray  # uint64
    segment_len: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.arrival_ps)

    def segments(self, i: int) -> list[tuple[int, int]]:
        lo, hi = int(self.seg_offsets[i]), int(self.seg_offsets[i + 1])
        return [
            (int(a), int(b)) for a, b in zip(self.segment_id[lo:hi], self.segment_len[lo:hi], strict=True)
        ]


def prepare(workload: Any, config: SimConfig) -> EngineInput:
    """Expands samples, converts seconds to picoseconds and caps generation targets."""
    if not all(hasattr(workload, name) for name in ("arrival", "num_samples", "output_len", "__len__")):
        raise InvalidArgumentError(f"workload {workload!r} is not a kvsim.Workload")
    n = len(workload)
    beam = np.asarray(getattr(workload, "beam", np.zeros(n, dtype=bool)), dtype=bool)
    if beam.any():
        row = int(np.argmax(beam))
        raise InvalidArgumentError(
            f"row {row}: beam search (beam=True) is not simulated: candidates' pruning needs a survival "
            "model the workload does not give; use num_samples with sampling='fork-cow' for parallel sampling"
        )
    samples = np.asarray(workload.num_samples, dtype=np.int64)
    # Shortcuts that leave the result unchanged: with one sample per request the sequences are the rows
    # (no expansion), and arrivals already sorted (as in a `Workload`) need no reordering.
    single = not len(samples) or samples.min() == 1 == samples.max()
    rows = np.arange(n, dtype=np.int64) if single else np.repeat(np.arange(n, dtype=np.int64), samples)
    m = len(rows)
    if single:
        sample = np.broadcast_to(np.int64(0), (m,))  # read-only, no memory
    else:
        starts = np.cumsum(samples) - samples
        sample = np.arange(m, dtype=np.int64) - np.repeat(starts, samples)

    def per_sequence(column: Any, dtype: Any) -> np.ndarray:
        a = np.asarray(column, dtype=dtype)
        return a if single else a[rows]

    arrival_s = np.asarray(workload.arrival, dtype=np.float64)
    with np.errstate(over="ignore"):  # an arrival past ~1.8e296 s is inf here, refused just below
        latest_ps = arrival_s.max() * PS_PER_S if n else 0.0
    if latest_ps >= MAX_TIME_PS:
        row = int(np.argmax(arrival_s))
        raise InvalidArgumentError(
            f"row {row}: arrival {float(arrival_s[row])!r} s is past the simulated clock's range "
            f"({MAX_TIME_PS} ps, about 53 days): rebase the timestamps to the first request"
        )
    arrival_ps = np.rint(per_sequence(arrival_s, np.float64) * PS_PER_S).astype(np.int64)
    prompt = per_sequence(workload.prompt_len, np.int64)
    for name in ("prompt_len", "output_len", "max_tokens"):
        column = np.asarray(getattr(workload, name), dtype=np.int64)
        if n and column.max() > MAX_TOKENS:
            row = int(np.argmax(column))
            raise InvalidArgumentError(
                f"row {row}: {name} {int(column[row])} is above kvsim's limit of {MAX_TOKENS} tokens"
            )
    output = per_sequence(workload.output_len, np.int64)
    # Shared with the workload where nothing is capped (the workload's columns are read-only).
    max_gen = per_sequence(workload.max_tokens, np.int64)
    if config.max_model_len is not None:
        max_gen = np.minimum(max_gen, np.maximum(config.max_model_len - prompt, 0))
    target = output if bool((output <= max_gen).all()) else np.minimum(output, max_gen)
    rid = per_sequence(workload.request_id, np.uint64)
    if m and (int(rid.max()) > MAX_REQUEST_ID or int(sample.max()) >= MAX_SAMPLES):
        raise InvalidArgumentError(
            "request ids must stay below 2**47 and samples below 2**16 to name their outputs"
        )
    output_seg = np.uint64(OUTPUT_BIT) | (rid << np.uint64(16)) | sample.astype(np.uint64)
    # Stable order by arrival; expansion keeps a request's samples adjacent, sample 0 first.
    in_order = m < 2 or not (arrival_ps[1:] < arrival_ps[:-1]).any()
    order = None if in_order else np.argsort(arrival_ps, kind="stable")

    def c(a: np.ndarray) -> np.ndarray:
        if a.strides == (0,):
            return a  # a broadcast constant: the same in any order
        return np.ascontiguousarray(a if order is None else a[order])

    seg_offsets = np.asarray(workload.seg_offsets, dtype=np.int64)
    seg_id = np.asarray(workload.segment_id, dtype=np.uint64)
    seg_len = np.asarray(workload.segment_len, dtype=np.int64)
    if not (single and in_order):
        # Gather each sequence's segments (a sequence's prompt is its request's prompt).
        src = c(rows)
        seg_count = (seg_offsets[1:] - seg_offsets[:-1])[src]
        seq_offsets = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(seg_count, out=seq_offsets[1:])
        total = int(seq_offsets[-1])
        idx = np.repeat(seg_offsets[:-1][src] - seq_offsets[:-1], seg_count) + np.arange(
            total, dtype=np.int64
        )
        seg_offsets, seg_id, seg_len = seq_offsets, seg_id[idx], seg_len[idx]

    fork_parent = np.broadcast_to(np.int64(-1), (m,))
    if config.sampling == "fork-cow" and not single:
        sorted_sample = c(sample)
        fork_parent = np.where(sorted_sample > 0, np.arange(m, dtype=np.int64) - sorted_sample, -1)

    return EngineInput(
        request_row=c(rows),
        request_id=c(rid),
        sample=c(sample),
        arrival_ps=c(arrival_ps),
        prompt_len=c(prompt),
        target=c(target),
        max_gen=c(max_gen),
        fork_parent=fork_parent,
        output_seg=c(output_seg),
        seg_offsets=np.ascontiguousarray(seg_offsets),
        segment_id=np.ascontiguousarray(seg_id),
        segment_len=np.ascontiguousarray(seg_len),
    )


def always_rejected(inp: EngineInput, config: SimConfig) -> np.ndarray:
    """Per sequence of `inp`, the reason code (`kvsim.reference.engine.REJECT_REASONS`) for which a run of
    `inp` under `config` rejects it at its arrival whatever the pool, the rate or the replicas: 1, nothing
    to generate (its target is 0: the prompt reaches `max_model_len`), or 7, more samples than
    `max_num_seqs` running seats (a fork-cow request's samples are admitted together); 0 for the others.
    The engines check the same at arrival (`reject_at_arrival`, which may name a pool-size reason first
    for such a sequence: it is rejected either way), and a forked sample goes with its parent.
    """
    m = len(inp)  # (max_num_seqs is at least 1: a sequence alone always has its seat)
    reason = np.where(np.asarray(inp.target) < 1, 1, 0).astype(np.int8)
    parent = np.asarray(inp.fork_parent)
    if m and parent.strides != (0,):  # fork-cow: a parent takes a seat for itself and each sample
        forked = parent >= 0
        seats = 1 + np.bincount(parent[forked], minlength=m)
        reason = np.where((reason == 0) & ~forked & (seats > config.max_num_seqs), 7, reason).astype(np.int8)
        reason[forked] = reason[parent[forked]]
    return reason
