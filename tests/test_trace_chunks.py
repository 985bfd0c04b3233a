"""The chunked trace loaders (`iter_mooncake`, `iter_azure`, `iter_table`): the same requests as the
whole-file loaders, and `simulate_stream` over them equals `simulate` over the whole file."""

from __future__ import annotations

import json
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings

import kvsim
from kvsim.engine.streaming import simulate_stream
from kvsim.errors import InvalidArgumentError, TraceFormatError
from kvsim.workloads import (
    Workload,
    iter_azure,
    iter_mooncake,
    iter_table,
    load_azure,
    load_mooncake,
    load_table,
)

from .test_traces import TRACES, needs_traces

CFG = kvsim.SimConfig(num_blocks=2048, block_size=16)
COLUMNS = ("arrival", "prompt_len", "output_len", "max_tokens", "request_id")


def assert_same_requests(whole: Workload, chunks: list[Workload]) -> None:
    assert sum(len(c) for c in chunks) == len(whole)
    for name in COLUMNS:
        got = np.concatenate([getattr(c, name) for c in chunks]) if chunks else getattr(whole, name)[:0]
        assert np.array_equal(got, getattr(whole, name)), name
    assert all(c.meta["source"] == whole.meta["source"] for c in chunks)


def assert_stream_equals_whole(whole: Workload, chunked, backends=("rust", "reference")) -> None:
    for backend in backends:
        ref = kvsim.simulate(whole, CFG, backend=backend)
        res = simulate_stream(chunked(), CFG, backend=backend, rows="memory")
        assert res.requests is not None
        assert res.requests.equals(ref.requests, null_equal=True), backend
        assert res.summary == ref.summary, backend
        assert res.raw.counters == ref.raw.counters, backend


REAL = [
    ("mooncake/conversation_trace.jsonl", load_mooncake, iter_mooncake),
    ("mooncake/synthetic_trace.jsonl", load_mooncake, iter_mooncake),
    ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", load_azure, iter_azure),
    ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", load_azure, iter_azure),
]


@needs_traces
@pytest.mark.parametrize(("name", "load", "chunked"), REAL)
def test_real_traces_in_chunks_are_the_whole_trace(name, load, chunked):
    path = TRACES / name
    whole = load(path)
    chunks = list(chunked(path, chunk_rows=3001))
    assert len(chunks) == -(-len(whole) // 3001)
    assert_same_requests(whole, chunks)
    assert_stream_equals_whole(whole, lambda: chunked(path, chunk_rows=3001), backends=("rust",))


@needs_traces
@pytest.mark.parametrize(("name", "load", "chunked"), REAL)
def test_heads_of_real_traces_stream_equal_on_both_backends(tmp_path, name, load, chunked):
    src = TRACES / name
    head = tmp_path / src.name
    with src.open("rb") as f:
        head.write_bytes(b"".join(f.readline() for _ in range(61)))  # a csv header and 60 rows
    whole = load(head)
    assert_same_requests(whole, list(chunked(head, chunk_rows=17)))
    assert_stream_equals_whole(whole, lambda: chunked(head, chunk_rows=17))


rows_st = st.lists(
    st.tuples(st.integers(0, 10**4), st.integers(1, 300), st.integers(1, 40)), min_size=1, max_size=25
).map(lambda rows: sorted(rows, key=lambda r: r[0]))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=10)
@given(rows=rows_st, fmt=st.sampled_from(["csv", "jsonl", "parquet"]), k=st.integers(1, 9))
def test_generated_tables_in_chunks_simulate_as_the_whole_file(tmp_path, rows, fmt, k):
    frame = pl.DataFrame(
        {
            "t_ms": [r[0] / 7 for r in rows],
            "prompt_len": [r[1] for r in rows],
            "output_len": [r[2] for r in rows],
        }
    )
    path = tmp_path / f"t.{fmt}"
    {"csv": frame.write_csv, "jsonl": frame.write_ndjson, "parquet": frame.write_parquet}[fmt](path)
    kw = {"columns": {"arrival": "t_ms"}, "time_unit": "ms", "first_request_id": 5}
    whole = load_table(path, **kw)
    assert_same_requests(whole, list(iter_table(path, chunk_rows=k, **kw)))
    assert_stream_equals_whole(whole, lambda: iter_table(path, chunk_rows=k, **kw))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=10)
@given(rows=rows_st, data=st.data(), k=st.integers(1, 9))
def test_skipped_lines_keep_ids_and_arrivals_as_the_whole_file(tmp_path, rows, data, k):
    """Mooncake with bad lines skipped and blank lines; Azure arrivals from the file's first stamp."""
    bad = set(data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=3)))
    lines = []
    for i, (t, n_in, n_out) in enumerate(rows):
        rec = {
            "timestamp": t,
            "input_length": n_in,
            "output_length": n_out,
            "hash_ids": list(range(-(-n_in // 64))),
        }
        if i in bad:
            rec["output_length"] = 0
        lines.append(json.dumps(rec))
        if i % 4 == 1:
            lines.append("")
    moon = tmp_path / "m.jsonl"
    moon.write_text("\n".join(lines) + "\n")
    if len(bad) == len(rows):  # nothing left: both refuse, alike
        with pytest.raises(TraceFormatError) as whole_err:
            load_mooncake(moon, on_error="skip", block_size=64)
        with pytest.raises(TraceFormatError) as chunk_err:
            list(iter_mooncake(moon, chunk_rows=k, on_error="skip", block_size=64))
        assert str(chunk_err.value) == str(whole_err.value)
        assert f"all {len(bad)} skipped" in str(whole_err.value)
        return
    whole = load_mooncake(moon, on_error="skip", block_size=64)
    assert_same_requests(whole, list(iter_mooncake(moon, chunk_rows=k, on_error="skip", block_size=64)))
    assert_stream_equals_whole(
        whole, lambda: iter_mooncake(moon, chunk_rows=k, on_error="skip", block_size=64)
    )

    az = tmp_path / "a.csv"
    stamps = [
        f"2023-11-16 18:{10 + t // 60000:02d}:{t // 1000 % 60:02d}.{t % 1000 * 10000:07d}" for t, _, _ in rows
    ]
    body = [f"{s},{n_in},{n_out}" for s, (_, n_in, n_out) in zip(stamps, rows, strict=True)]
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(body) + "\n")
    whole = load_azure(az)
    chunks = list(iter_azure(az, chunk_rows=k))
    assert_same_requests(whole, chunks)
    assert all(c.meta["start"] == whole.meta["start"] for c in chunks)


def test_bad_chunk_options(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival,prompt_len,output_len\n0,1,1\n")
    with pytest.raises(InvalidArgumentError, match="chunk_rows 0 must be at least 1"):
        iter_table(path, chunk_rows=0)
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        iter_mooncake(Path(tmp_path / "absent.jsonl"))
    with pytest.raises(InvalidArgumentError, match="on_error"):
        iter_azure(path, on_error="ignore")


NO_ROWS = {
    "empty.jsonl": ("", "table", "arrival", "the file has no rows"),
    "blank.jsonl": ("\n\n  \n", "table", "arrival", "the file has no rows"),
    "header.csv": ("arrival,prompt_len,output_len\n", "table", "arrival", "the file has no rows"),
    "bad.jsonl": (
        '{"arrival": -1, "prompt_len": 2, "output_len": 3}\n\n{"arrival": 0, "prompt_len": 0, "output_len": 3}\n',
        "table",
        "arrival",
        "no rows left: all 2 skipped (on_error='skip')",
    ),
    "moon_empty.jsonl": ("", "mooncake", "timestamp", "the file has no rows"),
    "moon_blank.jsonl": ("\n\n", "mooncake", "timestamp", "the file has no rows"),
    "moon_bad.jsonl": (
        '{"timestamp": -1, "input_length": 2, "output_length": 3, "hash_ids": [1]}\n',
        "mooncake",
        "timestamp",
        "no rows left: all 1 skipped (on_error='skip')",
    ),
    "azure.csv": ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "azure", "TIMESTAMP", "the file has no rows"),
    "azure_bad.csv": (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,0,1\n",
        "azure",
        "TIMESTAMP",
        "no rows left: all 1 skipped (on_error='skip')",
    ),
}


@pytest.mark.parametrize("name", sorted(NO_ROWS))
@pytest.mark.parametrize("k", [1, 3])
def test_a_file_that_gives_no_request_is_refused_whole_and_in_chunks_alike(tmp_path, name, k):
    """An empty, blank, header-only or all-skipped file is a TraceFormatError (line 1, the arrival
    field), the same whole and chunked; a chunk's piece of no rows is not (the test above)."""
    text, kind, field, reason = NO_ROWS[name]
    path = tmp_path / name
    path.write_text(text)
    kw = {"on_error": "skip"} if "skipped" in reason else {}
    load, chunks = {
        "table": (load_table, iter_table),
        "mooncake": (load_mooncake, iter_mooncake),
        "azure": (load_azure, iter_azure),
    }[kind]
    with pytest.raises(TraceFormatError) as whole:
        load(path, **kw)
    with pytest.raises(TraceFormatError) as chunked:
        list(chunks(path, chunk_rows=k, **kw))
    for err in (whole.value, chunked.value):
        assert (err.path, err.line, err.field, err.reason) == (str(path), 1, field, reason)


def test_a_parquet_file_of_no_rows_is_refused_whole_and_in_chunks(tmp_path):
    path = tmp_path / "t.parquet"
    pl.DataFrame({"t": [1.0], "prompt_len": [1], "output_len": [1]}).head(0).write_parquet(path)
    for call in (
        lambda: load_table(path, columns={"arrival": "t"}),
        lambda: list(iter_table(path, columns={"arrival": "t"}, chunk_rows=2)),
    ):
        with pytest.raises(TraceFormatError, match=r"line 1, field 't': the file has no rows"):
            call()
