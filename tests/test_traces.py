"""Tests of the trace loaders: the published traces' facts, segment layout, malformed rows, skip counts."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kvsim.errors import InvalidArgumentError, TimeUnitError, TraceFormatError
from kvsim.workloads import Workload, load_azure, load_mooncake, load_table

TRACES = Path(
    os.environ.get("KVSIM_TRACES") or Path(__file__).resolve().parents[1].parent / "shared" / "traces"
)
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason=f"traces folder {TRACES} is absent")

# The facts table of shared/traces/README.md: records, mean input, mean output, duration in seconds.
# Means and durations there are rounded to whole tokens / seconds ("about"), hence the tolerances below.
MOONCAKE_FACTS = {
    "conversation_trace.jsonl": (12_031, 12_035, 343, 3_537),
    "synthetic_trace.jsonl": (3_993, 15_325, 149, 1_022),
}
AZURE_FACTS = {
    "AzureLLMInferenceTrace_code.csv": (8_819, 2_048, 13),  # records, mean input, median output
    "AzureLLMInferenceTrace_conv.csv": (19_366, 1_155, 129),
}


# ------------------------------------------------------------------------------------ real traces


@needs_traces
@pytest.mark.parametrize("name", sorted(MOONCAKE_FACTS))
def test_mooncake_facts(name: str) -> None:
    records, mean_in, mean_out, duration = MOONCAKE_FACTS[name]
    w = load_mooncake(TRACES / "mooncake" / name)
    assert len(w) == records
    assert w.prompt_len.mean() == pytest.approx(mean_in, abs=0.5)
    assert w.output_len.mean() == pytest.approx(mean_out, abs=0.5)
    assert w.arrival[-1] - w.arrival[0] == pytest.approx(duration, abs=1.0)
    assert w.meta["skipped_rows"] == 0


@needs_traces
def test_mooncake_segments_follow_hash_ids() -> None:
    path = TRACES / "mooncake" / "conversation_trace.jsonl"
    w = load_mooncake(path)
    raw = pl.read_ndjson(path)
    # Request ids are line numbers from 0; look a few lines up by id and rebuild their segments by hand.
    by_id = {int(r): i for i, r in enumerate(w.request_id.tolist())}
    for line in (0, 1, 4, 777, len(raw) - 1):
        rec = raw.row(line, named=True)
        segs = w.segments(by_id[line])
        hashes = rec["hash_ids"]
        assert [s for s, _ in segs] == hashes
        assert all(n == 512 for _, n in segs[:-1])
        assert sum(n for _, n in segs) == rec["input_length"]
        assert 1 <= segs[-1][1] <= 512
        assert w.arrival[by_id[line]] == rec["timestamp"] / 1000
    # Every conversation request starts with hash id 0: one shared first block.
    assert (w.segment_id[w.seg_offsets[:-1]] == 0).all()
    assert 0 < w.describe()["shared_prompt_fraction"] < 1


@needs_traces
@pytest.mark.parametrize("name", sorted(AZURE_FACTS))
def test_azure_facts(name: str) -> None:
    records, mean_in, median_out = AZURE_FACTS[name]
    w = load_azure(TRACES / "azure_llm_2023" / name)
    assert len(w) == records
    assert w.prompt_len.mean() == pytest.approx(mean_in, abs=0.5)
    assert np.median(w.output_len) == median_out
    assert w.arrival[0] == 0.0
    assert 3_300 < w.arrival[-1] < 3_700  # "about 1 h"
    assert (w.num_segments == 1).all()
    assert len(np.unique(w.segment_id)) == records
    assert w.meta["skipped_rows"] == 0


@needs_traces
def test_azure_fractional_seconds_survive() -> None:
    path = TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
    w = load_azure(path)
    # Rows 1 and 2: 18:17:03.9799600 and 18:17:04.0319600, 52 ms apart.
    assert w.arrival[1] == pytest.approx(0.052, abs=1e-9)
    assert w.meta["start"] == "2023-11-16 18:17:03.979960000"


# ---------------------------------------------------------------------------------- Mooncake, small


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = [
    {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]},
    {"timestamp": 1500, "input_length": 512, "output_length": 1, "hash_ids": [0]},
    {"timestamp": 1000, "input_length": 1100, "output_length": 9, "hash_ids": [0, 1, 2]},
]


def test_mooncake_small_file(tmp_path: Path) -> None:
    w = load_mooncake(_write_jsonl(tmp_path / "t.jsonl", GOOD))
    assert w.arrival.tolist() == [0.0, 1.0, 1.5]
    assert w.request_id.tolist() == [0, 2, 1]
    assert w.segments(0) == [(0, 512), (1, 88)]
    assert w.segments(1) == [(0, 512), (1, 512), (2, 76)]
    assert w.segments(2) == [(0, 512)]
    assert w.output_len.tolist() == [3, 9, 1]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ("not json", "json"),
        ("[1, 2]", "json"),
        ({"input_length": 5, "output_length": 1, "hash_ids": [0]}, "timestamp"),
        ({"timestamp": -1, "input_length": 5, "output_length": 1, "hash_ids": [0]}, "timestamp"),
        ({"timestamp": "x", "input_length": 5, "output_length": 1, "hash_ids": [0]}, "timestamp"),
        ({"timestamp": 1, "input_length": 0, "output_length": 1, "hash_ids": []}, "input_length"),
        ({"timestamp": 1, "input_length": 5.5, "output_length": 1, "hash_ids": [0]}, "input_length"),
        ({"timestamp": 1, "input_length": 5, "output_length": 0, "hash_ids": [0]}, "output_length"),
        ({"timestamp": 1, "input_length": 5, "output_length": True, "hash_ids": [0]}, "output_length"),
        ({"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [0]}, "hash_ids"),
        ({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [-3]}, "hash_ids"),
        ({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1 << 63]}, "hash_ids"),
        ({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": 7}, "hash_ids"),
    ],
)
def test_mooncake_malformed_rows(tmp_path: Path, bad: object, field: str) -> None:
    # A blank line before the bad one: line numbers count it, as an editor would.
    path = _write_jsonl(tmp_path / "t.jsonl", [GOOD[0], "", bad, GOOD[1]])
    with pytest.raises(TraceFormatError) as info:
        load_mooncake(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 3, field)
    assert str(path) in str(err)
    assert "line 3" in str(err)
    assert repr(field) in str(err)
    assert isinstance(err, ValueError)
    clone = pickle.loads(pickle.dumps(err))
    assert (clone.path, clone.line, clone.field, str(clone)) == (err.path, err.line, err.field, str(err))
    skipped = load_mooncake(path, on_error="skip")
    assert skipped.meta["skipped_rows"] == 1
    assert skipped.equals(load_mooncake(_write_jsonl(tmp_path / "good.jsonl", GOOD[:2])))


def test_mooncake_slow_path_equals_fast_path(tmp_path: Path) -> None:
    rows = [
        {
            "timestamp": 10 * i,
            "input_length": 100 + 37 * i,
            "output_length": 1 + i,
            "hash_ids": list(range(i, i + 1 + (100 + 37 * i - 1) // 512)),
        }
        for i in range(60)
    ]
    fast = load_mooncake(_write_jsonl(tmp_path / "a.jsonl", rows))
    slow = load_mooncake(_write_jsonl(tmp_path / "b.jsonl", [*rows, "garbage"]), on_error="skip")
    assert slow.meta["skipped_rows"] == 1
    assert fast.meta["skipped_rows"] == 0
    assert slow.equals(fast)


def test_loader_options(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "t.jsonl", GOOD)
    with pytest.raises(InvalidArgumentError, match="on_error"):
        load_mooncake(path, on_error="ignore")
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        load_mooncake(tmp_path / "missing.jsonl")
    w = load_mooncake(path, first_request_id=100)
    assert sorted(w.request_id.tolist()) == [100, 101, 102]
    assert Workload.concat([w, load_mooncake(path)]).describe()["num_requests"] == 6


# ------------------------------------------------------------------------------------- Azure, small

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def test_azure_small_file(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text(f"{AZURE_HEADER}\n2023-11-16 18:17:04.5000000,10,2\n2023-11-16 18:17:03.9999999,20,3\n")
    w = load_azure(path)
    assert w.prompt_len.tolist() == [20, 10]
    assert w.arrival[0] == 0.0
    assert w.arrival[1] == pytest.approx(0.5000001, abs=1e-12)


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("2023-11-16 18:17:05.1,0,3", "ContextTokens"),
        ("2023-11-16 18:17:05.1,-4,3", "ContextTokens"),
        ("2023-11-16 18:17:05.1,4,0", "GeneratedTokens"),
        ("2023-11-16 18:17:05.1,4,x", "GeneratedTokens"),
        ("2023-11-16 18:17:05.1,4", "GeneratedTokens"),
        ("yesterday,4,3", "TIMESTAMP"),
        ("2023-13-16 18:17:05.1,4,3", "TIMESTAMP"),
        ("2023-11-16 18:17:05.1,4,3,9", "row"),
    ],
)
def test_azure_malformed_rows(tmp_path: Path, row: str, field: str) -> None:
    path = tmp_path / "a.csv"
    good = "2023-11-16 18:17:04.0000000,10,2"
    path.write_text(f"{AZURE_HEADER}\n{good}\n{good}\n{row}\n{good}\n")
    with pytest.raises(TraceFormatError) as info:
        load_azure(path)
    assert (info.value.line, info.value.field) == (4, field)
    assert f"{path}, line 4, field {field!r}" in str(info.value)
    w = load_azure(path, on_error="skip")
    assert len(w) == 3
    assert w.meta["skipped_rows"] == 1


def test_azure_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:17:04.0000000,10\n")
    with pytest.raises(TraceFormatError) as info:
        load_azure(path, on_error="skip")
    assert (info.value.line, info.value.field) == (1, "header")


# --------------------------------------------------------------------------------- generic tables


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_load_table_formats_and_units(tmp_path: Path, fmt: str) -> None:
    frame = pl.DataFrame({"t": [0, 1500, 250], "in": [5, 6, 7], "out": [1, 2, 3], "n": [1, 2, 1]})
    path = tmp_path / f"x.{fmt}"
    {"csv": frame.write_csv, "jsonl": frame.write_ndjson, "parquet": frame.write_parquet}[fmt](path)
    w = load_table(
        path,
        columns={"arrival": "t", "prompt_len": "in", "output_len": "out", "num_samples": "n"},
        time_unit="ms",
    )
    assert w.arrival.tolist() == [0.0, 0.25, 1.5]
    assert w.prompt_len.tolist() == [5, 7, 6]
    assert w.num_samples.tolist() == [1, 1, 2]
    assert w.request_id.tolist() == [0, 2, 1]
    assert w.meta["format"] == fmt


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_load_table_malformed_rows(tmp_path: Path, fmt: str) -> None:
    frame = pl.DataFrame({"arrival": [0.0, 1.0, 2.0], "prompt_len": [5, 0, 7], "output_len": [1, 2, 3]})
    path = tmp_path / f"x.{fmt}"
    {"csv": frame.write_csv, "jsonl": frame.write_ndjson, "parquet": frame.write_parquet}[fmt](path)
    with pytest.raises(TraceFormatError) as info:
        load_table(path)
    # csv: header is line 1, so the second record is line 3; jsonl and parquet count records from 1.
    assert info.value.line == (3 if fmt == "csv" else 2)
    assert info.value.field == "prompt_len"
    w = load_table(path, on_error="skip")
    assert w.prompt_len.tolist() == [5, 7]
    assert w.meta["skipped_rows"] == 1


def test_load_table_options(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("arrival,prompt_len\n0,1\n")
    with pytest.raises(TraceFormatError, match="output_len"):
        load_table(path)
    with pytest.raises(TimeUnitError, match="time_unit 'h' must be one of"):
        load_table(path, time_unit="h")
    with pytest.raises(InvalidArgumentError, match="columns keys"):
        load_table(path, columns={"bogus": "x"})
    (tmp_path / "x.txt").write_text("")
    with pytest.raises(InvalidArgumentError, match="format"):
        load_table(tmp_path / "x.txt")


@pytest.mark.parametrize("loader", ["table", "azure"])
def test_a_csv_header_that_repeats_a_column_is_refused(tmp_path: Path, loader: str) -> None:
    """`arrival,prompt_len,output_len,arrival` once took the first `arrival` silently (polars renamed
    the second)."""
    path = tmp_path / "t.csv"
    if loader == "table":
        path.write_text("arrival,prompt_len,output_len,arrival\n1,2,3,4\n")
        load = load_table
        twice = "arrival"
    else:
        path.write_text(
            "TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens\n2023-11-16 18:17:04.0,1,2,3\n"
        )
        load = load_azure
        twice = "ContextTokens"
    with pytest.raises(TraceFormatError) as info:
        load(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 1, "header")
    assert err.reason == f"column {twice!r} appears more than once"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "the file has no rows"),
        ("\n \n", "the file has no rows"),
        ('{"t": "x", "prompt_len": 1, "output_len": 1}\n', "no rows left: all 1 skipped (on_error='skip')"),
    ],
)
def test_load_table_of_no_rows_names_the_arrival_column(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(TraceFormatError) as info:
        load_table(path, columns={"arrival": "t"}, on_error="skip")
    assert (info.value.path, info.value.line, info.value.field, info.value.reason) == (
        str(path),
        1,
        "t",
        reason,
    )


def test_booleans_and_time_typed_columns_are_refused_by_row_and_field(tmp_path):
    """polars' vectorised path read `true` as 1 and a parquet Duration arrival of 1 s as 1e6 (its
    microseconds): a column that is not numeric now takes the row loop, which names the first bad row."""
    import datetime

    (tmp_path / "a.csv").write_text("arrival,prompt_len,output_len\n0,true,5\n")
    (tmp_path / "b.jsonl").write_text('{"arrival": 0, "prompt_len": true, "output_len": 5}\n')
    sec = [datetime.timedelta(seconds=1), datetime.timedelta(seconds=2)]
    pl.DataFrame({"arrival": sec, "prompt_len": [5, 6], "output_len": [3, 4]}).write_parquet(
        tmp_path / "c.parquet"
    )
    pl.DataFrame({"arrival": [0.0, 1.0], "prompt_len": [True, False], "output_len": [3, 4]}).write_parquet(
        tmp_path / "d.parquet"
    )
    for name, field in (
        ("a.csv", "prompt_len"),
        ("b.jsonl", "prompt_len"),
        ("c.parquet", "arrival"),
        ("d.parquet", "prompt_len"),
    ):
        with pytest.raises(TraceFormatError, match=rf"field '{field}'"):
            load_table(tmp_path / name)
    pl.DataFrame({"arrival": [0.0, 1.5], "prompt_len": [5, 6], "output_len": [3, 4]}).write_parquet(
        tmp_path / "ok.parquet"
    )
    assert load_table(tmp_path / "ok.parquet").arrival.tolist() == [0.0, 1.5]


def test_one_suffix_map_reads_every_table_format(tmp_path: Path) -> None:
    """`trace_table.TABLE_FORMATS` is the one suffix-to-format map: each suffix (any case) is a trace file
    to `kvsim run` (`specs.is_trace_file`), and `load_table` and `read_length_pairs` read a file written
    in its format under it."""
    from kvsim.workloads.specs import is_trace_file
    from kvsim.workloads.trace_table import TABLE_FORMATS, read_length_pairs

    frame = pl.DataFrame({"arrival": [0.0, 1.5], "prompt_len": [3, 4], "output_len": [5, 6]})
    assert set(TABLE_FORMATS.values()) == {"csv", "jsonl", "parquet"}
    for suffix, fmt in TABLE_FORMATS.items():
        for spelled in (suffix, suffix.upper()):
            path = tmp_path / f"t{spelled}"
            {"csv": frame.write_csv, "jsonl": frame.write_ndjson, "parquet": frame.write_parquet}[fmt](path)
            assert is_trace_file(str(path)), spelled
            w = load_table(path)
            assert (w.meta["format"], w.prompt_len.tolist()) == (fmt, [3, 4]), spelled
            prompts, outputs = read_length_pairs(path, "prompt_len", "output_len", ())
            assert (prompts.tolist(), outputs.tolist()) == ([3, 4], [5, 6]), spelled
    assert not is_trace_file(str(tmp_path / "t.tsv"))


@pytest.mark.parametrize("reader", ["trace_table", "trace_chunks"])
def test_the_table_loader_takes_the_trace_readers_by_public_names(reader: str) -> None:
    """`trace_table` and the chunked readers read `traces`' readers and checks through their public names
    (the seam the traces' module docstring lists), none of its private ones."""
    import ast
    import importlib

    from kvsim.workloads import traces

    module = importlib.import_module(f"kvsim.workloads.{reader}")
    tree = ast.parse(Path(module.__file__ or "").read_text())
    taken = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "kvsim.workloads.traces"
        for alias in node.names
    ]
    assert len(taken) > 10 or reader == "trace_chunks"
    assert [n for n in taken if n.startswith("_")] == []
    assert all(f"`{n}`" in (traces.__doc__ or "") or n == "MOONCAKE_BLOCK" for n in taken), taken
    attributes = [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "traces"
    ]
    assert [a for a in attributes if a.startswith("_")] == []
    assert all(f"`{a}`" in (traces.__doc__ or "") or a == "MOONCAKE_BLOCK" for a in attributes), attributes
    assert taken or attributes
