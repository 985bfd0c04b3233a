"""`kvsim.simulate_stream`: a workload fed in chunks gives the rows and summary of the whole run, on both
backends; the exact statistics do not depend on chunking or spilling; bad streams get clear errors."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import polars as pl
import pytest
from hypothesis import given

import kvsim
from kvsim.engine.exact import Mean, Quantiles
from kvsim.engine.streaming import chunks, simulate_stream, synthetic_chunks
from kvsim.errors import InvalidArgumentError
from kvsim.workloads import Workload, synthetic

from .test_engine_differential import configs, workloads


def assert_stream_equals_whole(w: Workload, cfg: kvsim.SimConfig, size: int, **kw) -> None:
    whole = kvsim.simulate(w, cfg, backend="reference")
    for backend in ("rust", "reference"):
        res = simulate_stream(chunks(w, size), cfg, backend=backend, rows="memory", **kw)
        assert res.requests is not None
        assert res.requests.equals(whole.requests, null_equal=True), backend
        assert res.summary == whole.summary, backend
        assert res.raw.counters == whole.raw.counters, backend


@given(workloads(max_requests=30), configs(), st.integers(1, 31))
def test_chunked_runs_equal_whole_runs(w, cfg, size):
    assert_stream_equals_whole(w, cfg, size)


@given(st.integers(1, 400), st.sampled_from([1, 16]), st.booleans(), st.integers(0, 3))
def test_independent_chunks_skip_hashing_and_still_agree(size, block_size, caching, seed):
    # Private prompts (no system prompt, one turn): every chunk of the table is independent of the others.
    w = synthetic(400, arrival_rate=200, lengths="sharegpt-paper", seed=seed)
    cfg = kvsim.SimConfig(num_blocks=300, block_size=block_size, enable_prefix_caching=caching)
    whole = kvsim.simulate(w, cfg)
    res = simulate_stream(w, cfg, chunk_size=size, independent_chunks=True, rows="memory")
    assert res.requests is not None
    assert res.requests.equals(whole.requests, null_equal=True)
    assert res.summary == whole.summary


def test_shared_prefixes_and_conversations_across_chunks_agree():
    w = synthetic(
        600, arrival_rate=80, lengths="sharegpt-paper", seed=4, turns=3, turn_interval=0.5,
        num_system_prompts=2, system_prompt_len=48, sharing_ratio=0.7, num_samples=2,
    )  # fmt: skip
    cfg = kvsim.SimConfig(
        num_blocks=250, block_size=16, sampling="fork-cow", preemption="auto", cpu_blocks=40
    )
    assert_stream_equals_whole(w, cfg, 97)


def test_rows_to_parquet_files_equal_the_rows_in_memory(tmp_path):
    w = synthetic(3000, arrival_rate=60, lengths="sharegpt-paper", seed=2)
    cfg = kvsim.SimConfig(num_blocks=400, block_size=16)
    whole = kvsim.simulate(w, cfg)
    res = simulate_stream(w, cfg, rows=tmp_path / "rows", chunk_size=700)
    assert res.requests is None
    assert res.rows_path == tmp_path / "rows"
    assert len(list((tmp_path / "rows").glob("part-*.parquet"))) == 5
    written = pl.read_parquet(tmp_path / "rows" / "*.parquet")
    assert written.equals(whole.requests, null_equal=True)
    assert res.summary == whole.summary
    only = simulate_stream(w, cfg, chunk_size=700)  # rows="none": the summary alone, the same
    assert only.requests is None
    assert only.summary == whole.summary


def test_synthetic_chunks_make_one_ordered_workload():
    parts = list(synthetic_chunks(2500, 1000, arrival_rate=10, lengths="sharegpt-paper", seed=1))
    assert [len(p) for p in parts] == [1000, 1000, 500]
    ids = np.concatenate([p.request_id for p in parts])
    assert np.array_equal(ids, np.arange(2500))
    arrivals = np.concatenate([p.arrival for p in parts])
    assert (np.diff(arrivals) > 0).all()
    w = Workload.concat(parts)
    cfg = kvsim.SimConfig(num_blocks=500, block_size=16)
    res = simulate_stream(iter(parts), cfg, independent_chunks=True)
    assert res.summary == kvsim.simulate(w, cfg).summary


@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False), min_size=1, max_size=300),
    st.integers(1, 7),
    st.integers(1, 50),
)
def test_exact_statistics_ignore_chunking_and_spilling(values, parts, limit):
    v = np.array(values)
    whole_q, whole_m = Quantiles(), Mean()
    whole_q.add(v.copy())
    whole_m.add(v)
    split_q, split_m = Quantiles(memory_limit=limit), Mean()
    for part in np.array_split(v, parts):
        split_q.add(part.copy())
        split_m.add(part)
    qs = (0.0, 0.5, 0.9, 0.99, 1.0)
    got = split_q.result(qs)
    assert got == whole_q.result(qs)
    split_q.close()
    assert split_m.result() == whole_m.result()
    s = np.sort(v)
    assert got[0.0] == s[0]
    assert got[1.0] == s[-1]
    for q in qs:  # polars' linear quantile is the same formula
        assert got[q] == pytest.approx(pl.Series(v).quantile(q, "linear"), rel=1e-12, abs=1e-12)


def test_bad_streams_get_clear_errors(tmp_path):
    w = synthetic(50, arrival_rate=10, lengths="sharegpt-paper", seed=1)
    cfg = kvsim.SimConfig(num_blocks=100, block_size=16)
    for backend in ("rust", "reference"):
        with pytest.raises(InvalidArgumentError, match="chunks must come in arrival order"):
            simulate_stream([w[25:], w[:25]], cfg, backend=backend)
        with pytest.raises(InvalidArgumentError, match=r"not a kvsim\.Workload"):
            simulate_stream([w, "x"], cfg, backend=backend)  # type: ignore[list-item]
        convo = synthetic(40, arrival_rate=10, lengths="sharegpt-paper", seed=1, turns=2, turn_interval=0.1)
        plain, quoting = convo[:1], convo[1:]  # row 0 is a first turn; later ones quote answers
        with pytest.raises(InvalidArgumentError, match="the first chunk did not"):
            simulate_stream([plain, quoting], cfg, backend=backend, independent_chunks=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidArgumentError, match="is not a directory"):
        simulate_stream(w, cfg, rows=tmp_path / "file")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "a").write_text("x")
    with pytest.raises(InvalidArgumentError, match="is not empty"):
        simulate_stream(w, cfg, rows=tmp_path / "full")
    with pytest.raises(InvalidArgumentError, match="backend"):
        simulate_stream(w, cfg, backend="gpu")


def test_an_empty_stream_is_an_empty_run():
    cfg = kvsim.SimConfig(num_blocks=100, block_size=16)
    res = simulate_stream([], cfg, rows="memory")
    assert res.summary["num_requests"] == 0
    assert res.requests is not None
    assert res.requests.height == 0


@pytest.mark.parametrize("rows", ["Memory", "NONE", " none"])
def test_a_misspelt_rows_mode_is_refused_not_made_a_folder(tmp_path, monkeypatch, rows):
    """`rows="Memory"` once created a folder `Memory` and wrote parquet parts into it."""
    monkeypatch.chdir(tmp_path)
    w = synthetic(20, arrival_rate=5, seed=0)
    with pytest.raises(kvsim.InvalidArgumentError, match="did you mean"):
        kvsim.simulate_stream(w, kvsim.SimConfig(num_blocks=200), rows=rows)
    assert list(tmp_path.iterdir()) == []
