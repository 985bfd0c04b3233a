"""Loaders of real serving traces (Mooncake JSONL, Azure LLM 2023 CSV) into `Workload`s, and the readers and
checks they share with the generic table loader (`kvsim.workloads.trace_table`).

Each loader first parses the whole file columnar with polars and validates it vectorised; a clean file
never goes through Python row by row. If anything is off (polars cannot parse a value, a field is missing
or out of range), the file is read again line by line, appending to flat lists, to name the first bad
line (`on_error="raise"`, a `TraceFormatError` with file, 1-based line and field) or to skip bad lines
(`on_error="skip"`). Either way the returned workload's `meta["skipped_rows"]` counts the skipped lines
(0 for a clean file) and `meta["source"]` names the file. Blank lines are ignored, not counted.

Lengths must be integers >= 1 and below 2**63: a row with a zero, negative, fractional (`3.5`, never
truncated to 3) or too large length is malformed, as is a value with bytes that are not UTF-8 (named by
its field). The length files of `synthetic(lengths="empirical" | "sharegpt-real")` go through the same
reader (`read_length_pairs`), so what polars cannot parse is named by row and field there too. The
published traces contain none (Azure's smallest GeneratedTokens is 6 in the code trace and 7 in the
conversation trace; Mooncake's smallest output_length is 1), so the default `on_error="raise"` loads
every record of them. Request ids are `first_request_id + line order` (before sorting by arrival).

The readers and checks the generic table loader (`kvsim.workloads.trace_table`) and the chunked readers
(`trace_chunks`) share are this module's public names, their seam: the file and option checks
(`existing_file`, `check_on_error`), the record readers (`open_text`, `csv_records`, `jsonl_records`,
`json_record`, `get_field`), the field rules (`to_int`, `to_time`, `hash_row`, `hash_fast`,
`hash_segments`), the dates (`is_date`, `azure_ns`, `date_stamps`, `datetime_ns`, `datetime_row_ns`,
`stamp_text`), the line loop (`line_loop`) and what a loaded file says (`trace_meta`, `first_ids`,
`require_rows`, `no_rows_error`, `arrival_field`), and the loaders' parts the chunked readers run a
piece at a time (`read_mooncake`, `azure_columns`, `azure_workload`); the rest is the loaders' own.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from os import PathLike
from pathlib import Path
from typing import IO, Any

import numpy as np
import polars as pl

from kvsim.arguments import int_arg
from kvsim.errors import InvalidArgumentError, TraceFormatError
from kvsim.model.segments import MAX_REQUEST_ID
from kvsim.workloads.table import Workload

MOONCAKE_BLOCK = 512
_U63 = 1 << 63
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_AZURE_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?$")
_EPOCH = datetime(1970, 1, 1)


class _RowError(Exception):
    """One bad field of one record; the line loop turns it into a `TraceFormatError` or a skip."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def check_on_error(on_error: str) -> None:
    if not isinstance(on_error, str) or on_error not in ("raise", "skip"):
        raise InvalidArgumentError(f"on_error {on_error!r} must be 'raise' or 'skip'")


def existing_file(path: str | PathLike[str]) -> Path:
    if not isinstance(path, str | PathLike):
        raise InvalidArgumentError(f"path {path!r} must be a str or os.PathLike")
    p = Path(path)
    if not p.is_file():
        what = "is a directory, not a file" if p.is_dir() else "does not exist"
        raise InvalidArgumentError(f"trace file {p} {what}")
    return p


def to_int(value: Any, field: str, minimum: int = 1) -> int:
    """An integer field: JSON ints, integral floats and decimal strings; at least `minimum`, below 2**63
    (the columns are int64). A fractional count (`3.5`) is an error, never truncated."""
    if isinstance(value, bool) or value is None:
        raise _RowError(field, f"{value!r} is not an integer")
    if isinstance(value, str):
        if _NOT_UTF8.search(value):
            raise _RowError(field, "not valid UTF-8")
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise _RowError(field, f"{value!r} is not an integer") from None
    if isinstance(value, float):
        if not math.isfinite(value) or value != math.floor(value):
            raise _RowError(field, f"{value!r} is not an integer")
        value = int(value)
    if not isinstance(value, int):
        raise _RowError(field, f"{value!r} is not an integer")
    if value < minimum:
        raise _RowError(field, f"{value} must be at least {minimum}")
    if value >= _U63:
        raise _RowError(field, f"{value} is not below 2**63")
    return value


def to_time(value: Any, field: str) -> float:
    """A time field: a finite number >= 0 (JSON number or decimal string)."""
    if isinstance(value, bool) or value is None:
        raise _RowError(field, f"{value!r} is not a number")
    try:
        t = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        if is_date(value):
            # (a table's arrival column is of numbers or of dates, decided by its first row)
            raise _RowError(
                field, f"{value!r} is a date, in a column of numbers (its first row's kind)"
            ) from None
        raise _RowError(field, f"{value!r} is not a number") from None
    if not math.isfinite(t) or t < 0:
        raise _RowError(field, f"{value!r} must be finite and >= 0")
    return t


def get_field(record: Mapping[str, Any], field: str) -> Any:
    if field not in record:
        raise _RowError(field, "missing")
    return record[field]


def line_loop(
    path: Path, records: Iterator[tuple[int, Any]], parse: Callable[[Any], None], on_error: str
) -> int:
    """Feeds each `(line, record)` to `parse` (which appends to flat lists); returns lines skipped."""
    skipped = 0
    for line, record in records:
        try:
            parse(record)
        except _RowError as err:
            if on_error == "raise":
                raise TraceFormatError(str(path), line, err.field, err.reason) from None
            skipped += 1
    return skipped


def jsonl_records(f: IO[bytes]) -> Iterator[tuple[int, Any]]:
    """`(line, object)` for every non-blank line; a line that is not a JSON object yields the error."""
    for line, raw in enumerate(f, 1):
        text = raw.strip()
        if not text:
            continue
        try:
            # Bytes that are not UTF-8 become lone surrogates: inside a value, its field reports them.
            obj = json.loads(text.decode("utf-8", "surrogateescape"))
        except ValueError as exc:
            yield line, _RowError("json", f"not valid JSON ({exc})")
            continue
        yield line, obj if isinstance(obj, dict) else _RowError("json", "not a JSON object")


def json_record(record: Any) -> Mapping[str, Any]:
    if isinstance(record, _RowError):
        raise record
    return record


def open_text(path: Path) -> IO[str]:
    """The file as text for `csv`: bytes that are not UTF-8 become lone surrogates (`surrogateescape`),
    which `csv_records` reports by line and field instead of a bare UnicodeDecodeError."""
    return path.open(newline="", encoding="utf-8", errors="surrogateescape")


_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def csv_records(path: Path, f: IO[str]) -> tuple[list[str], Iterator[tuple[int, Any]]]:
    """The header and `(line, row as dict of strings)` for every non-blank row of the open file `f`."""
    reader = csv.reader(f)
    try:
        first = next(reader, None)
    except csv.Error as exc:
        raise TraceFormatError(str(path), 1, "header", f"not CSV ({exc})") from None
    if first is None:
        raise TraceFormatError(str(path), 1, "header", "the file is empty")
    header = [h.strip() for h in first]
    if any(_NOT_UTF8.search(h) for h in header):
        raise TraceFormatError(str(path), 1, "header", "not valid UTF-8")
    twice = next((h for i, h in enumerate(header) if h in header[:i]), None)
    if twice is not None:
        raise TraceFormatError(str(path), 1, "header", f"column {twice!r} appears more than once")

    def rows() -> Iterator[tuple[int, Any]]:
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                yield reader.line_num, _RowError("row", f"not CSV ({exc})")
                continue
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) > len(header):
                yield reader.line_num, _RowError("row", f"{len(row)} fields, header has {len(header)}")
                continue
            bad = next((h for h, v in zip(header, row, strict=False) if _NOT_UTF8.search(v)), None)
            if bad is not None:
                yield reader.line_num, _RowError(bad, "not valid UTF-8")
                continue
            yield reader.line_num, dict(zip(header, row, strict=False))

    return header, rows()


def trace_meta(path: Path, fmt: str, skipped: int, **extra: Any) -> dict[str, Any]:
    return {"source": str(path), "format": fmt, "skipped_rows": skipped, **extra}


def no_rows_error(path: Path | str, field: str, skipped: int) -> TraceFormatError:
    """What a file that gives no request is (the whole-file loaders and the chunked readers alike)."""
    reason = f"no rows left: all {skipped} skipped (on_error='skip')" if skipped else "the file has no rows"
    return TraceFormatError(str(path), 1, field, reason)


def require_rows(w: Workload, field: str) -> Workload:
    if not len(w):
        raise no_rows_error(w.meta["source"], field, int(w.meta.get("skipped_rows", 0)))
    return w


def arrival_field(w: Workload) -> str:
    """The file's field that gives a loaded workload's arrivals (named when the file has no rows)."""
    fmt = w.meta.get("format")
    if fmt == "mooncake":
        return "timestamp"
    if fmt == "azure-2023":
        return "TIMESTAMP"
    return str(w.meta.get("columns", {}).get("arrival", "arrival"))


def first_ids(first_request_id: int, n: int) -> np.ndarray:
    first_request_id = int_arg("first_request_id", first_request_id)
    if first_request_id < 0 or first_request_id + n - 1 > MAX_REQUEST_ID:
        raise InvalidArgumentError(
            f"first_request_id {first_request_id} puts ids outside [0, {MAX_REQUEST_ID}]"
        )
    return np.arange(first_request_id, first_request_id + n, dtype=np.uint64)


# -------------------------------------------------------------------------------------------- Mooncake


def hash_segments(input_len: np.ndarray, counts: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR offsets and segment lengths: `block` each, the last of a request what remains of its input."""
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    seg_len = np.full(int(offsets[-1]), block, dtype=np.int64)
    seg_len[offsets[1:] - 1] = input_len - block * (counts - 1)
    return offsets, seg_len


def hash_fast(lists: pl.Series, inp: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Hash-id counts per row and the flat ids (uint64) of a polars list column, or None when anything
    breaks `hash_row`'s rule (the line loop then names the row)."""
    if not isinstance(lists.dtype, pl.List) or not lists.dtype.inner.is_integer() or lists.null_count():
        return None
    counts = lists.list.len().to_numpy().astype(np.int64)
    hashes = lists.explode()
    if hashes.null_count() or not np.array_equal(counts, -(-inp // block)):
        return None
    flat = hashes.cast(pl.Int64, strict=False)
    if flat.null_count():
        return None  # (a uint64 id past 2**63)
    ids = flat.to_numpy()
    if (ids < 0).any():
        return None
    return counts, ids.astype(np.uint64)


def hash_row(hashes: Any, n_in: int, block: int, field: str) -> list[int]:
    """One row's hash ids (Mooncake's content rule, for `load_mooncake` and a table's `hash_ids` column):
    a list (in a csv cell, its JSON text `[0, 1, 2]`) of `ceil(n_in / block)` integers in [0, 2**63)."""
    if isinstance(hashes, str):
        try:
            hashes = json.loads(hashes)
        except ValueError:
            raise _RowError(field, f"{hashes!r} is not a list of hash ids ([0, 1, ...])") from None
    if not isinstance(hashes, list):
        raise _RowError(field, f"{type(hashes).__name__} is not a list")
    want = -(-n_in // block)
    if len(hashes) != want:
        raise _RowError(
            field, f"{len(hashes)} ids for a prompt of {n_in} tokens, expected ceil({n_in}/{block}) = {want}"
        )
    return [to_int(h, field, 0) for h in hashes]  # (each below 2**63, the output ids' range)


def _mooncake_fast(path: Path, block: int) -> tuple[np.ndarray, ...] | None:
    schema: dict[str, Any] = {
        "timestamp": pl.Float64,
        "input_length": pl.Int64,
        "output_length": pl.Int64,
        "hash_ids": pl.List(pl.Int64),
    }
    try:
        frame = pl.read_ndjson(path, schema=schema)
    except pl.exceptions.PolarsError:
        return None
    if sum(frame.null_count().row(0)):
        return None
    ts = frame["timestamp"].to_numpy()
    inp = frame["input_length"].to_numpy()
    out = frame["output_length"].to_numpy()
    ok = np.isfinite(ts).all() and (ts >= 0).all() and (inp >= 1).all() and (out >= 1).all()
    content = hash_fast(frame["hash_ids"], inp, block) if ok else None
    if content is None:
        return None
    return ts, inp, out, *content


def load_mooncake(
    path: str | PathLike[str],
    *,
    on_error: str = "raise",
    first_request_id: int = 0,
    block_size: int = MOONCAKE_BLOCK,
) -> Workload:
    """Loads a Mooncake trace (FAST'25 release, JSONL).

    Each line `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}` becomes one
    request arriving at `timestamp / 1000` seconds. Its prompt is one segment per hash id, in order, of
    `block_size` (512) tokens each except the last, which holds the rest so the lengths sum to
    `input_length`; the hash ids are the segment ids unchanged (they are chained prefix hashes, so an
    equal id at an equal position means an equal prefix, exactly what segments express).

    Args:
        path: the JSONL file.
        on_error: `"raise"` on the first malformed line, or `"skip"` (count in `meta["skipped_rows"]`).
        first_request_id: request id of the first line; later lines count up in file order.
        block_size: tokens per hash id (512 in every published Mooncake trace).

    Returns:
        The workload, `meta` = `{"source", "format": "mooncake", "skipped_rows"}`.

    Raises:
        TraceFormatError: a malformed line (not JSON, a missing or non-integer field, a length < 1, a
            negative timestamp, a hash id outside [0, 2**63), or `len(hash_ids) != ceil(input_length /
            block_size)`), when `on_error="raise"`; a file that gives no request (empty, blank lines,
            every line skipped: line 1, field "timestamp").
        InvalidArgumentError: a missing file or a bad option.
    """
    w = read_mooncake(path, on_error=on_error, first_request_id=first_request_id, block_size=block_size)
    return require_rows(w, "timestamp")


def read_mooncake(
    path: str | PathLike[str],
    *,
    on_error: str = "raise",
    first_request_id: int = 0,
    block_size: int = MOONCAKE_BLOCK,
) -> Workload:
    """`load_mooncake` that returns a workload of no rows (a chunk's piece may have none)."""
    check_on_error(on_error)
    p = existing_file(path)
    block_size = int_arg("block_size", block_size)
    if block_size < 1:
        raise InvalidArgumentError(f"block_size {block_size} must be at least 1")
    fast = _mooncake_fast(p, block_size)
    skipped = 0
    if fast is not None:
        ts, inp, out, counts, flat = fast
    else:
        ts_l: list[float] = []
        in_l: list[int] = []
        out_l: list[int] = []
        cnt_l: list[int] = []
        flat_l: list[int] = []

        def parse(record: Any) -> None:
            rec = json_record(record)
            t = to_time(get_field(rec, "timestamp"), "timestamp")
            n_in = to_int(get_field(rec, "input_length"), "input_length")
            n_out = to_int(get_field(rec, "output_length"), "output_length")
            ids = hash_row(get_field(rec, "hash_ids"), n_in, block_size, "hash_ids")
            ts_l.append(t)
            in_l.append(n_in)
            out_l.append(n_out)
            cnt_l.append(len(ids))
            flat_l.extend(ids)

        with p.open("rb") as f:
            skipped = line_loop(p, jsonl_records(f), parse, on_error)
        ts = np.array(ts_l, dtype=np.float64)
        inp = np.array(in_l, dtype=np.int64)
        out = np.array(out_l, dtype=np.int64)
        counts = np.array(cnt_l, dtype=np.int64)
        flat = np.array(flat_l, dtype=np.uint64)
    offsets, seg_len = hash_segments(inp, counts, block_size)
    cols = {
        "arrival": ts / 1000.0,
        "prompt_len": inp,
        "output_len": out,
        "max_tokens": out.copy(),
        "num_samples": np.ones(len(inp), dtype=np.int64),
        "beam": np.zeros(len(inp), dtype=np.bool_),
        "request_id": first_ids(first_request_id, len(inp)),
        "seg_offsets": offsets,
        "segment_id": flat,
        "segment_len": seg_len,
    }
    return Workload._from_owned(cols, trace_meta(p, "mooncake", skipped, block_size=block_size))


# ----------------------------------------------------------------------------------------------- Azure


def is_date(value: Any) -> bool:
    """Whether `value` is date text of the Azure traces' shape (`2023-11-16 18:17:03.9799600`)."""
    return isinstance(value, str) and _AZURE_TIME.match(value.strip()) is not None


def azure_ns(value: Any, field: str = "TIMESTAMP") -> int:
    """`2023-11-16 18:17:03.9799600` -> integer nanoseconds since 1970 (the clock is taken as UTC)."""
    m = _AZURE_TIME.match(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise _RowError(field, f"{value!r} is not 'YYYY-MM-DD HH:MM:SS.fffffff'")
    try:
        dt = datetime.fromisoformat(m.group(1))
    except ValueError:
        raise _RowError(field, f"{value!r} is not a valid date and time") from None
    frac = (m.group(2) or "").ljust(9, "0")
    return (dt - _EPOCH) // _SECOND * 1_000_000_000 + int(frac)


_SECOND = datetime(1970, 1, 1, 0, 0, 1) - _EPOCH


def _azure_fast(path: Path) -> tuple[np.ndarray, ...] | None:
    try:
        frame = pl.read_csv(
            path,
            schema_overrides={"TIMESTAMP": pl.String, "ContextTokens": pl.Int64, "GeneratedTokens": pl.Int64},
        )
        if tuple(frame.columns) != _AZURE_COLUMNS:
            return None
    except pl.exceptions.PolarsError:
        return None
    ns = date_stamps(frame["TIMESTAMP"])
    if ns is None or frame["ContextTokens"].null_count() or frame["GeneratedTokens"].null_count():
        return None
    inp = frame["ContextTokens"].to_numpy()
    out = frame["GeneratedTokens"].to_numpy()
    if (inp < 1).any() or (out < 1).any():
        return None
    return ns, inp, out


def datetime_ns(values: pl.Series) -> pl.Series:
    """A column of date-times (a parquet file's `Datetime`) as integer nanoseconds since 1970 (Int64): one
    in a time zone at its UTC instant, one without taken as UTC, as the Azure traces' text is; null where
    missing or outside what nanoseconds since 1970 hold (1677-09-21 to 2262-04-11)."""
    assert isinstance(values.dtype, pl.Datetime), values.dtype
    return values.cast(pl.Datetime("ns", values.dtype.time_zone), strict=False).cast(pl.Int64)


def datetime_row_ns(value: Any, field: str) -> int:
    """One value of `datetime_ns` (the line loop's): its nanoseconds, or the row's error where null."""
    if value is None:
        raise _RowError(
            field, "no date and time (missing, or outside 1677-09-21 to 2262-04-11, nanoseconds since 1970)"
        )
    return int(value)


def date_stamps(stamps: pl.Series) -> np.ndarray | None:
    """Integer nanoseconds since 1970 of a column of date text (`azure_ns`'s rule, vectorised) or of
    date-times (`datetime_ns`), or None where a stamp is not of the documented shape or a date-time is
    missing (the line loop then reads or names it)."""
    if isinstance(stamps.dtype, pl.Datetime):
        ns = datetime_ns(stamps)
        return None if ns.null_count() else ns.to_numpy()
    if stamps.dtype != pl.String:
        return None
    try:
        ns = stamps.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="ns", strict=False)
    except pl.exceptions.PolarsError:
        return None
    # polars accepts a missing fraction and other widths; the line loop is the definition, so only
    # take this path when every stamp has the documented shape.
    if ns.null_count() or not stamps.str.contains(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{1,9}$").all():
        return None
    return ns.cast(pl.Int64).to_numpy()


def stamp_text(ns: int) -> str:
    """Integer nanoseconds since 1970 as the Azure traces write a stamp (nine fractional digits)."""
    start_dt = _EPOCH + _SECOND * (ns // 1_000_000_000)
    return f"{start_dt.isoformat(sep=' ')}.{ns % 1_000_000_000:09d}"


def load_azure(path: str | PathLike[str], *, on_error: str = "raise", first_request_id: int = 0) -> Workload:
    """Loads an Azure LLM inference trace (2023 release, `TIMESTAMP,ContextTokens,GeneratedTokens`).

    Arrivals are seconds since the earliest row (the first row in the published files), computed from
    integer nanoseconds, so the seven fractional digits survive. There is no prefix information: each
    prompt is one unique segment (`Workload`'s default, keyed by request id).

    Args:
        path: the CSV file.
        on_error: `"raise"` on the first malformed line, or `"skip"` (count in `meta["skipped_rows"]`).
        first_request_id: request id of the first row; later rows count up in file order.

    Returns:
        The workload, `meta` = `{"source", "format": "azure-2023", "skipped_rows", "start"}` where
        `start` is the earliest timestamp as written in the file.

    Raises:
        TraceFormatError: a missing or repeated header column (line 1, always raised), a malformed row
            when `on_error="raise"`, or a file that gives no request (header only, every row skipped:
            line 1, field "TIMESTAMP").
        InvalidArgumentError: a missing file or a bad option.
    """
    check_on_error(on_error)
    p = existing_file(path)
    ns, inp, out, skipped = azure_columns(p, on_error)
    if not len(ns):
        raise no_rows_error(p, "TIMESTAMP", skipped)
    return azure_workload(p, ns, inp, out, skipped, int(ns.min()), first_request_id)


def azure_columns(p: Path, on_error: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Integer-nanosecond stamps, prompt and output lengths of an Azure file, and the rows skipped."""
    fast = _azure_fast(p)
    if fast is not None:
        ns, inp, out = fast
        return ns, inp, out, 0
    ns_l: list[int] = []
    in_l: list[int] = []
    out_l: list[int] = []

    def parse(record: Any) -> None:
        rec = json_record(record)
        t = azure_ns(get_field(rec, "TIMESTAMP"))
        n_in = to_int(get_field(rec, "ContextTokens"), "ContextTokens")
        n_out = to_int(get_field(rec, "GeneratedTokens"), "GeneratedTokens")
        ns_l.append(t)
        in_l.append(n_in)
        out_l.append(n_out)

    with open_text(p) as f:
        header, records = csv_records(p, f)
        for col in _AZURE_COLUMNS:
            if col not in header:
                raise TraceFormatError(str(p), 1, "header", f"column {col!r} missing; header is {header}")
        skipped = line_loop(p, records, parse, on_error)
    return (
        np.array(ns_l, dtype=np.int64),
        np.array(in_l, dtype=np.int64),
        np.array(out_l, dtype=np.int64),
        skipped,
    )


def azure_workload(
    p: Path,
    ns: np.ndarray,
    inp: np.ndarray,
    out: np.ndarray,
    skipped: int,
    start: int,
    first_request_id: int,
) -> Workload:
    """The workload of Azure columns, arrivals in seconds since `start` (integer nanoseconds)."""
    arrival = (ns - start).astype(np.float64) / 1e9
    start_text = stamp_text(start) if len(ns) else ""
    return Workload(
        arrival=arrival,
        prompt_len=inp,
        output_len=out,
        request_id=first_ids(first_request_id, len(inp)),
        meta=trace_meta(p, "azure-2023", skipped, start=start_text),
    )
