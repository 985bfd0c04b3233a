"""A table's prompt content (`load_table`'s `hash_ids` column, Mooncake's rule), a date in its arrival
column, and what `kvsim run --workload PATH` says about either (DESIGN.md §Errors, "Prompt content of a
table")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from kvsim.errors import TimeUnitError, TraceFormatError
from kvsim.workloads import Workload, iter_table, load_azure, load_mooncake, load_table

from .cli_run_common import _error, _json
from .test_traces import TRACES, needs_traces

MOONCAKE_COLUMNS = {"arrival": "timestamp", "prompt_len": "input_length", "output_len": "output_length"}
# Rows in Mooncake's format: equal leading ids are shared prefixes; row 3 shares two blocks of row 0.
ROWS = [
    {"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [0, 1, 2]},
    {"timestamp": 400, "input_length": 512, "output_length": 1, "hash_ids": [0]},
    {"timestamp": 900, "input_length": 700, "output_length": 9, "hash_ids": [5, 6]},
    {"timestamp": 1500, "input_length": 1500, "output_length": 4, "hash_ids": [0, 1, 7]},
]


def _jsonl(path: Path, rows: list, key: str = "hash_ids") -> Path:
    lines = [json.dumps({(key if k == "hash_ids" else k): v for k, v in r.items()}) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def _write(path: Path, rows: list) -> Path:
    """`rows` as csv (hash ids as JSON text), jsonl or parquet (a list column), by the suffix."""
    if path.suffix == ".jsonl":
        return _jsonl(path, rows)
    frame = pl.DataFrame(rows)
    if path.suffix == ".csv":
        frame.with_columns(pl.Series("hash_ids", [json.dumps(r["hash_ids"]) for r in rows])).write_csv(path)
    else:
        frame.write_parquet(path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_tables_hash_ids_are_mooncakes_content(tmp_path: Path, suffix: str) -> None:
    """The column is read by the Mooncake loader's rule (it was dropped, every prompt taken as unique)."""
    want = load_mooncake(_jsonl(tmp_path / "m.jsonl", ROWS))
    got = load_table(_write(tmp_path / f"t{suffix}", ROWS), columns=MOONCAKE_COLUMNS, time_unit="ms")
    assert got.equals(want)
    assert got.segments(3) == [(0, 512), (1, 512), (7, 476)]
    assert got.meta["columns"]["hash_ids"] == "hash_ids"
    assert got.meta["block_size"] == 512
    assert got.meta["unread_content"] == []
    chunks = Workload.concat(iter_table(tmp_path / f"t{suffix}", chunk_rows=3, columns=MOONCAKE_COLUMNS))
    assert chunks.equals(load_table(tmp_path / f"t{suffix}", columns=MOONCAKE_COLUMNS))
    with pytest.raises(
        TraceFormatError, match=r"1 ids for a prompt of 512 tokens, expected ceil\(512/400\) = 2"
    ):
        load_table(tmp_path / f"t{suffix}", columns=MOONCAKE_COLUMNS, block_size=400)  # another block size


def test_a_content_column_of_another_name_is_mapped_or_named(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", ROWS, key="block_hashes")
    plain = load_table(path, columns=MOONCAKE_COLUMNS, time_unit="ms")
    assert plain.meta["unread_content"] == ["block_hashes"]
    assert len(np.unique(plain.segment_id)) == len(plain)  # each prompt its own segment
    mapped = load_table(path, columns={**MOONCAKE_COLUMNS, "hash_ids": "block_hashes"}, time_unit="ms")
    assert mapped.meta["unread_content"] == []
    assert mapped.equals(load_mooncake(_jsonl(tmp_path / "m.jsonl", ROWS)))


@pytest.mark.parametrize(
    ("ids", "reason"),
    [
        ([0, 1], "2 ids for a prompt of 1100 tokens, expected ceil(1100/512) = 3"),
        ("[0, 1, x]", "is not a list of hash ids"),
        ([0, -1, 2], "-1 must be at least 0"),
        ([0, 1, 1 << 63], "9223372036854775808 is not below 2**63"),
        (7, "int is not a list"),
    ],
)
def test_a_bad_content_row_is_named(tmp_path: Path, ids: object, reason: str) -> None:
    rows = [*ROWS[:1], {**ROWS[0], "timestamp": 100, "hash_ids": ids}, *ROWS[1:]]
    path = _jsonl(tmp_path / "t.jsonl", rows, key="content")
    columns = {**MOONCAKE_COLUMNS, "hash_ids": "content"}
    with pytest.raises(TraceFormatError) as info:
        load_table(path, columns=columns)
    assert (info.value.line, info.value.field) == (2, "content")
    assert reason in info.value.reason
    skipped = load_table(path, columns=columns, on_error="skip", time_unit="ms")
    assert skipped.meta["skipped_rows"] == 1
    assert skipped.equals(load_mooncake(_jsonl(tmp_path / "m.jsonl", ROWS)))


AZURE_COLUMNS = {"arrival": "TIMESTAMP", "prompt_len": "ContextTokens", "output_len": "GeneratedTokens"}
# Azure's format, out of order: the earliest stamp is the last row (a chunked load must find it first).
AZURE_ROWS = [
    ("2023-11-16 18:17:04.1000000", 396, 109),
    ("2023-11-16 18:17:05.0000001", 12, 7),
    ("2023-11-16 18:17:03.9799600", 374, 44),
]


def _azure(path: Path, rows: list = AZURE_ROWS) -> Path:
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)
    )
    return path


@pytest.mark.parametrize("chunk_rows", [None, 1, 2])
def test_a_date_arrival_column_is_read_as_the_azure_loader_reads_it(tmp_path: Path, chunk_rows) -> None:
    """It failed with "'2023-11-16 18:17:03.9799600' is not a number"; now seconds since the earliest
    stamp from integer nanoseconds, as `load_azure` (the same rule), whole or in chunks."""
    path = _azure(tmp_path / "t.csv")
    if chunk_rows is None:
        got = load_table(path, columns=AZURE_COLUMNS)
    else:
        got = Workload.concat(iter_table(path, chunk_rows=chunk_rows, columns=AZURE_COLUMNS))
    assert got.equals(load_azure(path))
    assert got.arrival.tolist() == [0.0, 0.12004, 1.0200401]
    if chunk_rows is None:
        assert got.meta["start"] == "2023-11-16 18:17:03.979960000"


def _datetime_parquet(path: Path, rows: list = AZURE_ROWS, zone: str | None = None) -> Path:
    """The Azure rows with their stamps as real date-times (polars' `Datetime` in nanoseconds, in `zone`
    at the same instants where given), written by polars as parquet."""
    stamps = pl.Series("TIMESTAMP", [a for a, _, _ in rows]).str.to_datetime(
        "%Y-%m-%d %H:%M:%S%.f", time_unit="ns", time_zone="UTC" if zone else None
    )
    if zone:
        stamps = stamps.dt.convert_time_zone(zone)
    pl.DataFrame(
        [
            stamps,
            pl.Series("ContextTokens", [b for _, b, _ in rows]),
            pl.Series("GeneratedTokens", [c for _, _, c in rows]),
        ]
    ).write_parquet(path)
    return path


@pytest.mark.parametrize("zone", [None, "Europe/Paris"])
@pytest.mark.parametrize("chunk_rows", [None, 1, 2])
def test_a_parquet_datetime_arrival_column_is_read_as_dates(tmp_path: Path, chunk_rows, zone) -> None:
    """A parquet arrival column of real date-times (polars' `Datetime`) was refused as "not a number"; now
    read as the Azure loader reads date text: seconds since the earliest stamp from integer nanoseconds
    (exact to the nanosecond), `meta["start"]` the earliest (UTC), whole or in chunks; a zone's stamps at
    their UTC instant."""
    path = _datetime_parquet(tmp_path / "t.parquet", zone=zone)
    assert isinstance(pl.read_parquet_schema(path)["TIMESTAMP"], pl.Datetime)
    if chunk_rows is None:
        got = load_table(path, columns=AZURE_COLUMNS)
        assert got.meta["start"] == "2023-11-16 18:17:03.979960000"
    else:
        got = Workload.concat(iter_table(path, chunk_rows=chunk_rows, columns=AZURE_COLUMNS))
    want = load_table(_azure(tmp_path / "t.csv"), columns=AZURE_COLUMNS)
    assert got.arrival.tolist() == want.arrival.tolist() == [0.0, 0.12004, 1.0200401]
    assert got.prompt_len.tolist() == want.prompt_len.tolist()
    with pytest.raises(TimeUnitError, match="holds dates"):
        load_table(path, columns=AZURE_COLUMNS, time_unit="ms")


def test_a_missing_parquet_datetime_is_named_by_row(tmp_path: Path) -> None:
    """A null date-time names its row (the line loop, the fast pass's stamps not taken); skipped, the
    other rows keep their nanoseconds."""
    rows = [AZURE_ROWS[0], (None, 5, 6), *AZURE_ROWS[1:]]
    stamps = pl.Series("TIMESTAMP", [a for a, _, _ in rows]).str.to_datetime(
        "%Y-%m-%d %H:%M:%S%.f", time_unit="ns"
    )
    path = tmp_path / "n.parquet"
    pl.DataFrame(
        [
            stamps,
            pl.Series("ContextTokens", [r[1] for r in rows]),
            pl.Series("GeneratedTokens", [r[2] for r in rows]),
        ]
    ).write_parquet(path)
    with pytest.raises(TraceFormatError) as info:
        load_table(path, columns=AZURE_COLUMNS)
    assert (info.value.line, info.value.field) == (2, "TIMESTAMP")
    assert info.value.reason.startswith("no date and time (missing")
    skipped = load_table(path, columns=AZURE_COLUMNS, on_error="skip")
    assert skipped.meta["skipped_rows"] == 1
    assert skipped.arrival.tolist() == [0.0, 0.12004, 1.0200401]


def test_a_column_of_dates_and_numbers_is_refused_by_row(tmp_path: Path) -> None:
    dates_first = _azure(tmp_path / "d.csv", [AZURE_ROWS[0], ("12.5", 3, 4)])
    with pytest.raises(TraceFormatError) as info:
        load_table(dates_first, columns=AZURE_COLUMNS)
    assert (info.value.line, info.value.field) == (3, "TIMESTAMP")
    assert info.value.reason == "'12.5' is not 'YYYY-MM-DD HH:MM:SS.fffffff'"
    numbers_first = _azure(tmp_path / "n.csv", [("12.5", 3, 4), AZURE_ROWS[0]])
    with pytest.raises(TraceFormatError) as info:
        load_table(numbers_first, columns=AZURE_COLUMNS)
    assert info.value.line == 3
    assert (
        info.value.reason
        == "'2023-11-16 18:17:04.1000000' is a date, in a column of numbers (its first row's kind)"
    )
    with pytest.raises(TimeUnitError, match="holds dates, read as seconds since the earliest"):
        load_table(_azure(tmp_path / "t.csv"), columns=AZURE_COLUMNS, time_unit="ms")


def test_run_names_the_time_unit_flag_beside_dates(tmp_path: Path, capsys) -> None:
    """`kvsim run` tells a time unit beside dates (`TimeUnitError`) from the file's other errors by its
    type: the flag named, in one line; without the flag the file runs."""
    path = _azure(tmp_path / "t.csv")
    cols = ",".join(f"{k}={v}" for k, v in AZURE_COLUMNS.items())
    base = ["run", "--num-blocks", "64", "--workload", str(path), "--trace-columns", cols]
    line = _error(capsys, [*base, "--trace-time-unit", "ms"])
    assert line.startswith("kvsim run: error: argument --trace-time-unit: time_unit 'ms': "), line
    assert "holds dates" in line
    assert _json(capsys, base)["summary"]["completed"] == len(AZURE_ROWS)


@needs_traces
def test_the_azure_trace_by_path_is_the_registrys(capsys) -> None:
    path = TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    base = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "200"]
    cols = ",".join(f"{k}={v}" for k, v in AZURE_COLUMNS.items())
    own = _json(capsys, [*base, "--workload", str(path), "--trace-columns", cols])
    assert own["summary"] == _json(capsys, [*base, "--workload", "azure-conv"])["summary"]
    line = _error(capsys, [*base, "--workload", str(path), "--trace-columns", cols, "--time-unit", "ms"])
    assert line.startswith("kvsim run: error: argument --trace-time-unit: time_unit 'ms': "), line


@needs_traces
def test_the_mooncake_trace_by_path_is_the_registrys(capsys) -> None:
    """The newcomer review's run: by path it hit 1.8 % (0.0 % on first admissions), the registry's 6.3 %
    (4.2 %), and a note said no two of its prompts share content."""
    path = TRACES / "mooncake" / "conversation_trace.jsonl"
    base = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "300"]
    cols = ",".join(f"{k}={v}" for k, v in MOONCAKE_COLUMNS.items())
    own = _json(capsys, [*base, "--workload", str(path), "--time-unit", "ms", "--trace-columns", cols])
    named = _json(capsys, [*base, "--workload", "mooncake-conversation"])
    assert own["summary"]["prefix_hit_rate_first_admission"] > 0
    assert own["summary"] == named["summary"]
    assert own["workload"]["params"]["columns"]["hash_ids"] == "hash_ids"
    assert not any("prefix caching is on" in n for n in own["notes"])


def test_a_file_without_content_says_so(capsys, tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "t.jsonl", ROWS, key="block_hashes")
    cols = ",".join(f"{k}={v}" for k, v in MOONCAKE_COLUMNS.items())
    argv = ["run", "--num-gpu-blocks-override", "400", "--workload", str(path), "--trace-columns", cols]
    notes = _json(capsys, argv)["notes"]
    unread = [n for n in notes if "'block_hashes'" in n]
    assert len(unread) == 1, notes
    assert "--trace-columns hash_ids=block_hashes" in unread[0]
    prefix = next(n for n in notes if n.startswith("prefix caching is on"))
    assert (
        "the file gives no prompt content, no hash_ids column, so every prompt is taken as unique" in prefix
    )
    assert "no two of its prompts share content" not in prefix
    mapped = _json(capsys, [*argv[:-1], cols + ",hash_ids=block_hashes"])
    assert not any("block_hashes" in n or "prefix caching is on" in n for n in mapped["notes"])
    assert mapped["summary"]["prefix_hit_rate_first_admission"] > 0


def test_a_file_missing_columns_names_trace_columns_and_the_registrys_workload(
    capsys, tmp_path: Path
) -> None:
    mine = _jsonl(tmp_path / "mine.jsonl", ROWS)
    line = _error(capsys, ["run", "--num-gpu-blocks-override", "400", "--workload", str(mine)])
    assert "3 columns missing" in line
    assert "its columns are those of the Mooncake traces (mooncake-conversation / mooncake-synthetic)" in line
    assert (
        "--time-unit ms --trace-columns arrival=timestamp,prompt_len=input_length,output_len=output_length"
        in line
    )
    named = tmp_path / "conversation_trace.jsonl"
    shutil.copy(mine, named)
    line = _error(capsys, ["run", "--num-gpu-blocks-override", "400", "--workload", str(named)])
    assert "its name is that of the trace --workload mooncake-conversation reads" in line
    other = tmp_path / "other.csv"
    other.write_text("t,p,o\n0,10,5\n")
    line = _error(capsys, ["run", "--num-gpu-blocks-override", "400", "--workload", str(other)])
    assert line.endswith(
        "; name the file's columns with --trace-columns arrival=COL,prompt_len=COL,output_len=COL"
    )
    bad_row = tmp_path / "bad.csv"
    bad_row.write_text("arrival,prompt_len,output_len\n0,x,5\n")
    line = _error(capsys, ["run", "--num-gpu-blocks-override", "400", "--workload", str(bad_row)])
    assert "--trace-columns" not in line  # a bad value is the file's to fix


@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_conv.csv", "mine.csv"])
def test_an_azure_file_by_path_says_what_to_do(capsys, tmp_path: Path, name: str) -> None:
    path = _azure(tmp_path / name)
    run = ["run", "--num-gpu-blocks-override", "400", "--workload", str(path)]
    line = _error(capsys, run)
    assert line.endswith(
        "; as a file workload: --trace-columns arrival=TIMESTAMP,prompt_len=ContextTokens,output_len=GeneratedTokens "
        "(its dates are read as seconds since the earliest)"
    ), line
    if name == "mine.csv":
        assert "its columns are those of the Azure traces (azure-code / azure-conv)" in line
    else:
        assert "its name is that of the trace --workload azure-conv reads" in line
    cols = ",".join(f"{k}={v}" for k, v in AZURE_COLUMNS.items())
    assert _json(capsys, [*run, "--trace-columns", cols])["summary"]["completed"] == 3
