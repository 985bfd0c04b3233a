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

from kvsim.config import PS_PER_S, SimConfig
from kvsim.errors import InvalidArgumentError
from kvsim.segments import MAX_REQUEST_ID, MAX_SAMPLES, OUTPUT_BIT


@dataclass(frozen=True)
class EngineInput:
    """Per-sequence columns, sorted by (arrival, request row, sample). All integer, all contiguous."""

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
    n = len(workload)
    beam = np.asarray(getattr(workload, "beam", np.zeros(n, dtype=bool)), dtype=bool)
    if beam.any():
        row = int(np.argmax(beam))
        raise InvalidArgumentError(
            f"row {row}: beam search (beam=True) is not simulated: candidates' pruning needs a survival "
            "model the workload does not give; use num_samples with sampling='fork-cow' for parallel sampling"
        )
    samples = np.asarray(workload.num_samples, dtype=np.int64)
    if len(samples) and samples.min() == 1 == samples.max():
        return _prepare_single(workload, config)
    return _prepare_expanded(workload, config, samples)


def _prepare_expanded(workload: Any, config: SimConfig, samples: np.ndarray) -> EngineInput:
    """`prepare` in general: each request of `n` samples becomes `n` sequences, sorted by arrival."""
    n = len(workload)
    rows = np.repeat(np.arange(n, dtype=np.int64), samples)
    starts = np.cumsum(samples) - samples
    sample = np.arange(len(rows), dtype=np.int64) - np.repeat(starts, samples)
    arrival = np.asarray(workload.arrival, dtype=np.float64)[rows]
    arrival_ps = np.rint(arrival * PS_PER_S).astype(np.int64)
    prompt = np.asarray(workload.prompt_len, dtype=np.int64)[rows]
    output = np.asarray(workload.output_len, dtype=np.int64)[rows]
    max_tokens = np.asarray(workload.max_tokens, dtype=np.int64)[rows]
    max_gen = max_tokens.copy()
    if config.max_model_len is not None:
        max_gen = np.minimum(max_gen, np.maximum(config.max_model_len - prompt, 0))
    target = np.minimum(output, max_gen)
    rid = np.asarray(workload.request_id, dtype=np.uint64)[rows]
    if len(rid) and (int(rid.max()) > MAX_REQUEST_ID or int(sample.max()) >= MAX_SAMPLES):
        raise InvalidArgumentError(
            "request ids must stay below 2**47 and samples below 2**16 to name their outputs"
        )
    output_seg = np.uint64(OUTPUT_BIT) | (rid << np.uint64(16)) | sample.astype(np.uint64)
    # Stable order by arrival; the workload is sorted already, expansion keeps samples adjacent.
    order = np.argsort(arrival_ps, kind="stable")
    seg_offsets = np.asarray(workload.seg_offsets, dtype=np.int64)
    seg_count = (seg_offsets[1:] - seg_offsets[:-1])[rows][order]
    seq_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(seg_count, out=seq_offsets[1:])
    # Gather each sequence's segments (a sequence's prompt is its request's prompt).
    src_start = seg_offsets[:-1][rows][order]
    idx = np.repeat(src_start - seq_offsets[:-1], seg_count) + np.arange(int(seq_offsets[-1]), dtype=np.int64)
    seg_id = np.asarray(workload.segment_id, dtype=np.uint64)[idx]
    seg_len = np.asarray(workload.segment_len, dtype=np.int64)[idx]

    def c(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a[order])

    # The sort is stable and a request's samples share its arrival, so they stay adjacent, sample 0 first.
    sorted_sample = sample[order]
    fork_parent = np.full(len(rows), -1, dtype=np.int64)
    if config.sampling == "fork-cow":
        pos = np.arange(len(rows), dtype=np.int64)
        fork_parent = np.where(sorted_sample > 0, pos - sorted_sample, -1)

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
        seg_offsets=seq_offsets,
        segment_id=np.ascontiguousarray(seg_id),
        segment_len=np.ascontiguousarray(seg_len),
    )


def _prepare_single(workload: Any, config: SimConfig) -> EngineInput:
    """`prepare` for one sample per request (the common case): no expansion, and no reordering when the
    arrivals are sorted already (they are in a `Workload`). Same result as the general path."""
    n = len(workload)
    arrival_ps = np.rint(np.asarray(workload.arrival, dtype=np.float64) * PS_PER_S).astype(np.int64)
    if n > 1 and (arrival_ps[1:] < arrival_ps[:-1]).any():
        order = np.argsort(arrival_ps, kind="stable")
    else:
        order = None

    def c(a: Any, dtype: Any) -> np.ndarray:
        a = np.asarray(a, dtype=dtype)
        return np.ascontiguousarray(a if order is None else a[order])

    prompt = np.asarray(workload.prompt_len, dtype=np.int64)
    max_gen = np.array(workload.max_tokens, dtype=np.int64)
    if config.max_model_len is not None:
        max_gen = np.minimum(max_gen, np.maximum(config.max_model_len - prompt, 0))
    target = np.minimum(np.asarray(workload.output_len, dtype=np.int64), max_gen)
    rid = np.asarray(workload.request_id, dtype=np.uint64)
    if n and int(rid.max()) > MAX_REQUEST_ID:
        raise InvalidArgumentError(
            "request ids must stay below 2**47 and samples below 2**16 to name their outputs"
        )
    output_seg = np.uint64(OUTPUT_BIT) | (rid << np.uint64(16))
    seg_offsets = np.asarray(workload.seg_offsets, dtype=np.int64)
    seg_id = np.asarray(workload.segment_id, dtype=np.uint64)
    seg_len = np.asarray(workload.segment_len, dtype=np.int64)
    if order is not None:
        seg_count = (seg_offsets[1:] - seg_offsets[:-1])[order]
        seq_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(seg_count, out=seq_offsets[1:])
        src_start = seg_offsets[:-1][order]
        idx = np.repeat(src_start - seq_offsets[:-1], seg_count) + np.arange(
            int(seq_offsets[-1]), dtype=np.int64
        )
        seg_offsets, seg_id, seg_len = seq_offsets, seg_id[idx], seg_len[idx]
    return EngineInput(
        request_row=c(np.arange(n, dtype=np.int64), np.int64),
        request_id=c(rid, np.uint64),
        sample=np.zeros(n, dtype=np.int64),
        arrival_ps=c(arrival_ps, np.int64),
        prompt_len=c(prompt, np.int64),
        target=c(target, np.int64),
        max_gen=c(max_gen, np.int64),
        fork_parent=np.full(n, -1, dtype=np.int64),
        output_seg=c(output_seg, np.uint64),
        seg_offsets=np.ascontiguousarray(seg_offsets),
        segment_id=np.ascontiguousarray(seg_id),
        segment_len=np.ascontiguousarray(seg_len),
    )
