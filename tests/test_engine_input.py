"""`prepare` (per-sequence engine input) and the request rows do not depend on the order of a workload's rows."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import hypothesis.strategies as st
import numpy as np
from hypothesis import given

import kvsim
from kvsim.engine.engine_input import prepare

from .test_engine_differential import workloads


def assert_same(a, b) -> None:
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        assert x.dtype == y.dtype, field.name
        assert np.array_equal(x, y), field.name
        assert x.flags.c_contiguous or x.strides == (0,), field.name  # or a broadcast constant


class Duck(SimpleNamespace):
    """A duck-typed workload: any object with the columns (a `Workload` sorts its rows, this does not)."""

    def __len__(self) -> int:
        return len(self.arrival)


def reordered(w, order: np.ndarray, arrival: np.ndarray | None = None, one_sample: bool = False) -> Duck:
    """`w`'s rows in `order` (with `arrival` instead of w's arrival times if given)."""
    counts = np.diff(np.asarray(w.seg_offsets))[order]
    starts = np.asarray(w.seg_offsets)[:-1][order]
    idx = np.concatenate([np.arange(s, s + c) for s, c in zip(starts, counts, strict=True)])
    samples = np.ones(len(w), dtype=np.int64) if one_sample else np.asarray(w.num_samples)
    return Duck(
        arrival=(np.asarray(w.arrival) if arrival is None else arrival)[order],
        prompt_len=np.asarray(w.prompt_len)[order],
        output_len=np.asarray(w.output_len)[order],
        max_tokens=np.asarray(w.max_tokens)[order],
        request_id=np.asarray(w.request_id)[order],
        num_samples=samples[order],
        seg_offsets=np.concatenate([[0], np.cumsum(counts)]),
        segment_id=np.asarray(w.segment_id)[idx],
        segment_len=np.asarray(w.segment_len)[idx],
    )


@given(
    workloads(),
    st.one_of(st.none(), st.integers(8, 120)),
    st.sampled_from(["fork-cow", "independent"]),
    st.booleans(),
)
def test_prepare_depends_on_arrivals_not_on_row_order(w, max_model_len, sampling, one_sample):
    # Distinct arrivals; the shuffled copy must give the same sequences, naming their rows through the
    # shuffle. One sample per request takes prepare's shortcuts (no expansion; no reordering in order).
    n = len(w)
    arrival = np.asarray(w.arrival) + np.arange(n) * 1e-6
    order = np.random.default_rng(n).permutation(n)
    in_order = reordered(w, np.arange(n), arrival, one_sample)
    shuffled = reordered(w, order, arrival, one_sample)
    cfg = kvsim.SimConfig(num_blocks=64, block_size=4, max_model_len=max_model_len, sampling=sampling)
    a, b = prepare(in_order, cfg), prepare(shuffled, cfg)
    assert np.array_equal(order[b.request_row], a.request_row)
    b = dataclasses.replace(b, request_row=a.request_row)
    assert_same(a, b)


@given(workloads(), st.sampled_from(["fork-cow", "independent"]))
def test_rows_follow_the_workload_order_whatever_order_the_arrivals_come_in(w, sampling):
    # Distinct arrivals, so both orders run the same simulation; then shuffle the rows of a duck-typed copy.
    n = len(w)
    arrival = np.asarray(w.arrival) + np.arange(n) * 1e-6
    in_order = reordered(w, np.arange(n), arrival)
    shuffled = reordered(w, np.random.default_rng(n + 1).permutation(n), arrival)
    cfg = kvsim.SimConfig(num_blocks=40, block_size=4, sampling=sampling)
    a = kvsim.simulate(in_order, cfg).requests
    b = kvsim.simulate(shuffled, cfg).requests
    assert b["request_id"].to_list() == shuffled.request_id.tolist()  # rows in the workload's order
    assert b.sort("request_id").equals(a.sort("request_id"))
