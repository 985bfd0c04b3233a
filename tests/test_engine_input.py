"""`prepare`'s fast path for one sample per request gives exactly what the general expansion gives."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import hypothesis.strategies as st
import numpy as np
from hypothesis import given

import kvsim
from kvsim.engine_input import _prepare_expanded, _prepare_single, prepare

from .test_engine_differential import workloads


def assert_same(a, b) -> None:
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        assert x.dtype == y.dtype, field.name
        assert np.array_equal(x, y), field.name
        assert x.flags.c_contiguous, field.name


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


@given(workloads(), st.one_of(st.none(), st.integers(8, 120)), st.booleans())
def test_single_sample_fast_path_equals_the_general_expansion(w, max_model_len, shuffle):
    n = len(w)
    # Shuffled arrivals exercise the reordering a `Workload` never needs (it sorts on construction).
    order = np.random.default_rng(n).permutation(n) if shuffle else np.arange(n)
    duck = reordered(w, order, one_sample=True)
    cfg = kvsim.SimConfig(num_blocks=64, block_size=4, max_model_len=max_model_len)
    ones = np.ones(n, dtype=np.int64)
    assert_same(_prepare_single(duck, cfg), _prepare_expanded(duck, cfg, ones))
    assert_same(prepare(duck, cfg), _prepare_expanded(duck, cfg, ones))


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
