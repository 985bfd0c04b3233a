"""`kvsim.simulate_stream`: a workload fed in chunks gives the rows and summary of the whole run, on both
backends; the exact statistics do not depend on chunking or spilling; bad streams get clear errors."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize("existing", [False, True])
def test_a_run_that_raises_mid_stream_leaves_no_rows_behind(tmp_path, existing):
    """A rejected call changes nothing: the chunks written before a bad one are removed, and so are the
    folders the call made (a folder that was there, empty, stays, empty)."""
    w = synthetic(3000, arrival_rate=60, lengths="sharegpt-paper", seed=2)
    cfg = kvsim.SimConfig(num_blocks=400, block_size=16)
    parts = list(chunks(w, 700))
    late = Workload(arrival=[0.0], prompt_len=[10], output_len=[5])  # before the chunks' arrivals
    target = tmp_path / "a" / "rows"
    if existing:
        target.mkdir(parents=True)

    def source():
        yield from parts[:3]  # the first chunks' rows are written before the bad one comes
        yield late

    with pytest.raises(InvalidArgumentError, match="chunks must come in arrival order"):
        simulate_stream(source(), cfg, rows=target)
    if existing:
        assert target.is_dir()
        assert not any(target.iterdir())
    else:
        assert not (tmp_path / "a").exists()
    written: list[int] = []

    def spy():
        for p in parts:
            written.append(len(list(target.glob("part-*.parquet"))))
            yield p

    res = simulate_stream(spy(), cfg, rows=target)  # the same folder then takes a good run
    assert max(written) > 0
    assert res.rows_path == target
    assert pl.read_parquet(target / "*.parquet").equals(kvsim.simulate(w, cfg).requests, null_equal=True)


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


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"chunk_size": 1.5}, r"^chunk_size 1\.5 must be an integer"),
        ({"chunk_size": "2"}, r"^chunk_size '2' must be an integer"),
        ({"chunk_size": None}, r"^chunk_size None must be an integer"),
        ({"chunk_size": float("nan")}, r"^chunk_size nan must be an integer"),
        ({"chunk_size": True}, r"^chunk_size True must be an integer"),
        ({"chunk_size": 0}, r"^chunk_size 0 must be at least 1"),
        ({"independent_chunks": "yes"}, r"^independent_chunks 'yes' must be True or False"),
        ({"independent_chunks": 2}, r"^independent_chunks 2 must be True or False"),
        ({"independent_chunks": None}, r"^independent_chunks None must be True or False"),
        ({"spill_dir": 5}, r"^spill_dir 5 must be None or a directory path"),
        ({"spill_dir": b"/tmp"}, r"^spill_dir b'/tmp' must be None or a directory path"),
        ({"spill_dir": "FILE"}, r"^spill_dir '.*file' is not a directory"),
        ({"spill_dir": "MISSING"}, r"^spill_dir '.*missing' does not exist"),
        ({"source": 5}, r"^source 5 is not a kvsim\.Workload or an iterable of Workload chunks"),
        ({"source": None}, r"^source None is not a kvsim\.Workload"),
        ({"source": "trace.csv"}, r"^source 'trace\.csv' is not a kvsim\.Workload"),
    ],
)
def test_bad_arguments_are_refused_by_name_before_anything_is_made(tmp_path, monkeypatch, kw, message):
    """Each argument is checked at the call: `chunk_size="2"` once leaked a bare TypeError,
    `chunk_size=True` ran chunks of 1, `independent_chunks="yes"` PyO3's TypeError, and a `spill_dir`
    that is a file or a number failed only after 2**24 latency values (an OSError). A refused call
    creates nothing: not the `rows` folder, not a spill file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    if kw.get("spill_dir") in ("FILE", "MISSING"):
        kw = {"spill_dir": tmp_path / kw["spill_dir"].lower()}
    source = kw.pop("source", synthetic(20, arrival_rate=5, seed=0))
    before = sorted(tmp_path.iterdir())
    for backend in ("rust", "reference"):
        with pytest.raises(InvalidArgumentError, match=message):
            simulate_stream(source, kvsim.SimConfig(num_blocks=200), backend=backend, rows="out", **kw)
    assert sorted(tmp_path.iterdir()) == before


def test_numpy_arguments_are_taken_like_python_ones(tmp_path):
    w = synthetic(60, arrival_rate=5, seed=0)
    cfg = kvsim.SimConfig(num_blocks=200)
    want = simulate_stream(w, cfg, chunk_size=7, independent_chunks=True).summary
    got = simulate_stream(
        w, cfg, chunk_size=np.int64(7), independent_chunks=np.bool_(True), spill_dir=tmp_path
    ).summary
    assert got == want
    assert list(tmp_path.iterdir()) == []  # the spill_dir probe leaves nothing behind


def test_chunk_helpers_refuse_non_integers():
    w = synthetic(10, arrival_rate=5, seed=0)
    with pytest.raises(InvalidArgumentError, match=r"^chunk size 1\.5 must be an integer"):
        list(chunks(w, 1.5))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"^num_requests 2\.5 must be an integer"):
        list(synthetic_chunks(2.5, 1))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"^chunk_size '2' must be an integer"):
        list(synthetic_chunks(4, "2"))  # type: ignore[arg-type]
    assert sum(len(c) for c in synthetic_chunks(np.int64(4), np.int64(2), arrival_rate=5)) == 4


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"arrival_rate": 0}, "arrival_rate 0 must be positive and finite"),
        ({"arrival_rate": -2.0, "arrivals": "constant"}, "arrival_rate -2.0 must be positive and finite"),
        ({"arrival_rate": "5"}, "arrival_rate '5' must be a positive and finite number"),
        ({"arrival_rate": True}, "arrival_rate True must be a positive and finite number"),
        ({"burstiness": float("inf"), "arrivals": "gamma"}, "burstiness inf must be positive and finite"),
        ({"burstiness": "x"}, "burstiness 'x' must be a positive and finite number"),
    ],
)
def test_synthetic_chunks_check_arrival_rate_and_burstiness_at_the_call(kwargs, said):
    """`synthetic_chunks` drew the gaps between chunks from `arrival_rate` and `burstiness` unchecked: a
    string was a bare ValueError, and every check waited for the first chunk (none for 0 requests, where a
    bad value was taken). Now `synthetic`'s check, at the call; `synthetic` itself refuses a string or a
    bool (a float() of it once took "5" and True)."""
    for n in (0, 10):
        with pytest.raises(InvalidArgumentError, match="^" + re.escape(said)):
            synthetic_chunks(n, 4, **kwargs)
    with pytest.raises(InvalidArgumentError, match="^" + re.escape(said)):
        synthetic(3, **kwargs)
    # all-at-once reads no rate (as synthetic); numpy numbers are numbers
    assert len(list(synthetic_chunks(5, 2, arrivals="all-at-once", arrival_rate=0))) == 3
    assert (
        sum(len(c) for c in synthetic_chunks(5, 2, arrival_rate=np.int64(3), burstiness=np.float32(1))) == 5
    )


def test_a_streamed_runs_serving_figures_keep_itls_mean():
    """A streamed run keeps no per-sequence columns: its ITL mean comes from its rows when each request is
    one sequence (it was None while the whole run's said 6.16 ms); with samples folded into rows, none."""
    w = synthetic(3000, arrival_rate=60, lengths="sharegpt-paper", seed=5)
    cfg = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", num_blocks=1200)
    whole = kvsim.simulate(w, cfg).serving()
    streamed = simulate_stream(w, cfg, rows="memory", chunk_size=700).serving()
    assert whole["mean_itl_ms"] > 1
    assert streamed["mean_itl_ms"] == pytest.approx(whole["mean_itl_ms"], rel=1e-12)
    assert streamed["mean_tpot_ms"] == whole["mean_tpot_ms"]
    two = synthetic(300, arrival_rate=60, lengths="sharegpt-paper", seed=5, num_samples=2)
    assert (
        simulate_stream(two, kvsim.SimConfig(num_blocks=1200), rows="memory").serving()["mean_itl_ms"] is None
    )


def test_chunks_that_repeat_request_ids_are_refused(tmp_path):
    """Two chunks both of requests 0 and 1: their default content is named by the id, so the second pair
    hit the first pair's blocks (96 hit tokens between unrelated prompts). Chunks given by the caller must
    increase their ids (checked without keeping every id); one Workload, or `chunks` of one, is unique."""
    a = Workload(arrival=[0.0, 0.1], output_len=[2, 2], prompt_len=[64, 64])
    b = Workload(arrival=[1.0, 1.1], output_len=[2, 2], prompt_len=[64, 64])
    cfg = kvsim.SimConfig(num_blocks=100)
    out = tmp_path / "rows"
    with pytest.raises(
        InvalidArgumentError, match=r"^a chunk's request_id 0 is not above the earlier chunks' largest, 1"
    ):
        simulate_stream([a, b], cfg, rows=out)
    assert not out.exists()
    c = Workload(arrival=[1.0, 1.1], output_len=[2, 2], prompt_len=[64, 64], request_id=[2, 3])
    ok = simulate_stream([a, c], cfg, rows="memory")
    assert ok.summary["prefix_hit_tokens"] == 0
    # A workload whose ids do not increase with arrival is still one stream, whole or through `chunks`.
    w = Workload(
        arrival=[0.0, 0.5, 1.0, 1.5], output_len=[2] * 4, prompt_len=[64] * 4, request_id=[9, 3, 7, 1]
    )
    whole = kvsim.simulate(w, cfg)
    assert simulate_stream(chunks(w, 1), cfg).summary == whole.summary
    assert simulate_stream(w, cfg, chunk_size=1).summary == whole.summary
