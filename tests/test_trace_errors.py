"""Bad values in trace and length files (issue 12, part 3): every one is a `TraceFormatError` naming the
file, the row and the field (or loads to the right answer), never an OverflowError, a UnicodeDecodeError,
a polars exception or a silent truncation."""

from __future__ import annotations

import json
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings

from kvsim.errors import InvalidArgumentError, TraceFormatError
from kvsim.workloads import Workload, iter_table, load_azure, load_mooncake, load_table, synthetic

AZURE_HEADER = b"TIMESTAMP,ContextTokens,GeneratedTokens\n"


def lengths_from(path: Path, prompt: str = "prompt_len", output: str = "output_len") -> Workload:
    return synthetic(
        4,
        lengths="empirical",
        length_params={"path": str(path), "prompt_column": prompt, "output_column": output},
    )


def expect(fn, path: Path, line: int, field: str) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as info:
        fn()
    e = info.value
    assert (e.path, e.line, e.field) == (str(path), line, field), str(e)
    return e


# -- the reproducers ------------------------------------------------------------------------------------
def test_integers_past_int64_name_the_row(tmp_path):
    csv = tmp_path / "big.csv"
    csv.write_text("arrival,prompt_len,output_len\n0,4,2\n0,9223372036854775808,4\n")
    e = expect(lambda: load_table(csv), csv, 3, "prompt_len")
    assert "not below 2**63" in e.reason
    expect(lambda: lengths_from(csv), csv, 3, "prompt_len")
    mc = tmp_path / "m.jsonl"
    mc.write_text(
        json.dumps({"timestamp": 0, "input_length": 3, "output_length": 2**63, "hash_ids": [1]}) + "\n"
    )
    expect(lambda: load_mooncake(mc), mc, 1, "output_length")
    az = tmp_path / "az.csv"
    az.write_bytes(AZURE_HEADER + b"2023-11-16 18:17:03.9799600,99999999999999999999,3\n")
    expect(lambda: load_azure(az), az, 2, "ContextTokens")


def test_fractional_token_counts_are_errors_not_truncated(tmp_path):
    csv = tmp_path / "frac.csv"
    csv.write_text("arrival,prompt_len,output_len\n0,3.5,4\n")
    assert "3.5 is not an integer" in expect(lambda: load_table(csv), csv, 2, "prompt_len").reason
    expect(lambda: lengths_from(csv), csv, 2, "prompt_len")
    pq = tmp_path / "frac.parquet"
    pl.DataFrame({"arrival": [0.0, 1.0], "prompt_len": [20.0, 20.7], "output_len": [3, 3]}).write_parquet(pq)
    assert "20.7 is not an integer" in expect(lambda: load_table(pq), pq, 2, "prompt_len").reason
    expect(lambda: lengths_from(pq), pq, 2, "prompt_len")
    js = tmp_path / "frac.jsonl"
    js.write_text('{"arrival": 0, "prompt_len": 4, "output_len": 2.25}\n')
    expect(lambda: load_table(js), js, 1, "output_len")
    # Integral floats are integers.
    pl.DataFrame({"arrival": [0.0], "prompt_len": [20.0], "output_len": [3.0]}).write_parquet(pq)
    assert load_table(pq).prompt_len.tolist() == [20]


def test_non_utf8_bytes_name_the_row_and_field(tmp_path):
    az = tmp_path / "az.csv"
    az.write_bytes(AZURE_HEADER + b"2023-11-16 18:17:03.9799600,5,3\n2023-11-16 18:17:04.0000000,\xff5,3\n")
    assert expect(lambda: load_azure(az), az, 3, "ContextTokens").reason == "not valid UTF-8"
    csv = tmp_path / "t.csv"
    csv.write_bytes(b"arrival,prompt_len,output_len\n0,4,\xfe\n")
    expect(lambda: load_table(csv), csv, 2, "output_len")
    expect(lambda: lengths_from(csv), csv, 2, "output_len")
    head = tmp_path / "head.csv"
    head.write_bytes(b"arrival,prompt\xff,output_len\n0,4,2\n")
    expect(lambda: load_table(head), head, 1, "header")
    js = tmp_path / "t.jsonl"
    js.write_bytes(b'{"arrival": 0, "prompt_len": "\xff", "output_len": 2}\n')
    expect(lambda: load_table(js), js, 1, "prompt_len")


def test_what_polars_raises_never_leaks_from_the_length_loader(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    expect(lambda: lengths_from(empty), empty, 1, "header")  # polars: NoDataError
    header_only = tmp_path / "header.csv"
    header_only.write_text("prompt_len,output_len\n")
    assert "no rows" in expect(lambda: lengths_from(header_only), header_only, 1, "prompt_len").reason
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"prompt_len,output_len\n4,2\n\xff\xfe,3\n")  # polars: ComputeError (invalid utf-8)
    expect(lambda: lengths_from(bad), bad, 3, "prompt_len")
    big = tmp_path / "big.csv"
    big.write_text("prompt_len,output_len\n4,2\n5,170141183460469231731687303715884105727\n")  # i128 column
    expect(lambda: lengths_from(big), big, 3, "output_len")
    text = tmp_path / "text.jsonl"
    text.write_text('{"prompt_len": 4, "output_len": 2}\n{"prompt_len": [1], "output_len": 2}\n')
    expect(lambda: lengths_from(text), text, 2, "prompt_len")
    missing = tmp_path / "missing.csv"
    missing.write_text("a,b\n1,2\n")
    expect(lambda: lengths_from(missing), missing, 1, "header")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")
    with pytest.raises(InvalidArgumentError, match=r"cannot read .* as parquet"):
        lengths_from(junk)


def test_workload_load_refuses_a_foreign_or_broken_file(tmp_path):
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"nope")
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        Workload.load(junk)
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        Workload.load(tmp_path / "absent.parquet")
    frame = pl.DataFrame({"arrival": [0.0], "output_len": [1], "segment_id": [1], "segment_len": [2]})
    with pytest.raises(InvalidArgumentError, match="segment_id must be lists of integers"):
        Workload.from_polars(frame)


# -- generated bad files --------------------------------------------------------------------------------
good_rows = st.lists(
    st.tuples(st.floats(0, 1e6, allow_nan=False), st.integers(1, 10**6), st.integers(1, 10**6)),
    min_size=1,
    max_size=6,
)
# Bad cell values, as (text for csv, value for jsonl): each a class the issue names, plus the usual ones.
bad_cells = st.one_of(
    st.integers(2**63, 2**70).map(lambda v: (str(v).encode(), v)),
    st.integers(-(2**70), 0).map(lambda v: (str(v).encode(), v)),
    st.floats(0.5, 1e6).filter(lambda v: v != int(v)).map(lambda v: (repr(v).encode(), v)),
    st.sampled_from([b"\xff", b"4\xfe", b"\xc3"]).map(lambda b: (b, b)),
    st.sampled_from(["abc", "nan", "inf", "1e400", "", " "]).map(lambda t: (t.encode(), t)),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=good_rows,
    data=st.data(),
    fmt=st.sampled_from(["csv", "jsonl"]),
    bad=bad_cells,
    field=st.sampled_from(["prompt_len", "output_len"]),
)
def test_generated_bad_text_tables(tmp_path, rows, data, fmt, bad, field):
    at = data.draw(st.integers(0, len(rows) - 1))
    names = ["arrival", "prompt_len", "output_len"]
    col = names.index(field)
    path = tmp_path / f"t.{fmt}"
    if fmt == "csv":
        lines = [b",".join(names_.encode() for names_ in names)]
        for i, r in enumerate(rows):
            cells = [repr(r[0]).encode(), str(r[1]).encode(), str(r[2]).encode()]
            if i == at:
                cells[col] = bad[0]
            lines.append(b",".join(cells))
        path.write_bytes(b"\n".join(lines) + b"\n")
        line = at + 2
    else:
        out = []
        for i, r in enumerate(rows):
            rec = dict(zip(names, r, strict=True))
            value = bad[1]
            if i != at:
                out.append(json.dumps(rec).encode())
                continue
            if isinstance(value, bytes):
                out.append(json.dumps(rec).replace(f'"{field}": {r[col]}', f'"{field}": "@@"').encode())
                out[-1] = out[-1].replace(b"@@", value)
            else:
                rec[field] = value
                out.append(json.dumps(rec).encode())
        path.write_bytes(b"\n".join(out) + b"\n")
        line = at + 1
    expect(lambda: load_table(path), path, line, field)
    expect(lambda: lengths_from(path), path, line, field)
    k = data.draw(st.integers(1, len(rows)), label="chunk_rows")
    expect(lambda: list(iter_table(path, chunk_rows=k)), path, line, field)  # the row counted in the file


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=good_rows,
    data=st.data(),
    bad=st.one_of(
        st.floats(0.5, 1e6).filter(lambda v: v != int(v)).map(lambda v: ("float", v)),
        st.integers(2**63, 2**64 - 1).map(lambda v: ("uint", v)),
        st.integers(-(2**63), 0).map(lambda v: ("int", v)),
        st.sampled_from(["x", "3.5", ""]).map(lambda v: ("str", v)),
    ),
    field=st.sampled_from(["prompt_len", "output_len"]),
)
def test_generated_bad_parquet(tmp_path, rows, data, bad, field):
    at = data.draw(st.integers(0, len(rows) - 1))
    kind, value = bad
    cols: dict[str, list] = {"arrival": [r[0] for r in rows], "prompt_len": [r[1] for r in rows]}
    cols["output_len"] = [r[2] for r in rows]
    cols[field][at] = value
    dtype = {"float": pl.Float64, "uint": pl.UInt64, "int": pl.Int64, "str": pl.String}[kind]
    if kind == "str":
        cols[field] = [str(v) for v in cols[field]]
    path = tmp_path / "t.parquet"
    pl.DataFrame(cols, schema_overrides={field: dtype}).write_parquet(path)
    expect(lambda: load_table(path), path, at + 1, field)
    expect(lambda: lengths_from(path), path, at + 1, field)
    k = data.draw(st.integers(1, len(rows)), label="chunk_rows")
    expect(lambda: list(iter_table(path, chunk_rows=k)), path, at + 1, field)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=good_rows, fmt=st.sampled_from(["csv", "jsonl", "parquet"]))
def test_clean_generated_files_load_exactly(tmp_path, rows, fmt):
    frame = pl.DataFrame(
        {
            "arrival": [r[0] for r in rows],
            "prompt_len": [r[1] for r in rows],
            "output_len": [r[2] for r in rows],
        }
    )
    path = tmp_path / f"t.{fmt}"
    {"csv": frame.write_csv, "jsonl": frame.write_ndjson, "parquet": frame.write_parquet}[fmt](path)
    w = load_table(path)
    order = np.argsort([r[0] for r in rows], kind="stable")
    assert sorted(w.prompt_len.tolist()) == sorted(r[1] for r in rows)
    assert len(w) == len(rows) == len(order)
    lw = lengths_from(path)
    assert set(lw.prompt_len.tolist()) <= {r[1] for r in rows}


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda f: load_table(f, time_unit=["s"]), r"time_unit \['s'\] must be one of"),
        (lambda f: load_table(f, columns=[1]), r"columns \[1\] must be a mapping"),
        (lambda f: load_table(f, format=["csv"]), r"format \['csv'\] must be"),
        (lambda f: load_table(5), "path 5 must be a str or os.PathLike"),
        (lambda f: load_mooncake(f, block_size="x"), "block_size 'x' must be an integer"),
        (lambda f: load_table(f, first_request_id=1.5), "first_request_id 1.5 must be an integer"),
        (lambda f: load_azure(f, on_error=[]), r"on_error \[\] must be 'raise' or 'skip'"),
    ],
)
def test_bad_loader_options_are_invalid_argument_errors(tmp_path, call, fragment):
    f = tmp_path / "t.csv"
    f.write_text("arrival,prompt_len,output_len\n0,4,2\n")
    with pytest.raises(InvalidArgumentError, match=fragment):
        call(f)
