"""Loaders of real serving traces (Mooncake JSONL, Azure LLM 2023 CSV, generic tables) into `Workload`s.

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
"""

from __future__ import annotations

import contextlib
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
from kvsim.model.units import fmt_count
from kvsim.workloads.table import Workload

MOONCAKE_BLOCK = 512
_U63 = 1 << 63
_TIME_DIVISORS = {"s": 1.0, "ms": 1e3, "us": 1e6}
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_AZURE_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?$")
_EPOCH = datetime(1970, 1, 1)
_TABLE_FIELDS = ("arrival", "prompt_len", "output_len", "max_tokens", "num_samples", "request_id")


class _RowError(Exception):
    """One bad field of one record; the line loop turns it into a `TraceFormatError` or a skip."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def _check_on_error(on_error: str) -> None:
    if not isinstance(on_error, str) or on_error not in ("raise", "skip"):
        raise InvalidArgumentError(f"on_error {on_error!r} must be 'raise' or 'skip'")


def _existing(path: str | PathLike[str]) -> Path:
    if not isinstance(path, str | PathLike):
        raise InvalidArgumentError(f"path {path!r} must be a str or os.PathLike")
    p = Path(path)
    if not p.is_file():
        what = "is a directory, not a file" if p.is_dir() else "does not exist"
        raise InvalidArgumentError(f"trace file {p} {what}")
    return p


def _to_int(value: Any, field: str, minimum: int = 1) -> int:
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


def _to_time(value: Any, field: str) -> float:
    """A time field: a finite number >= 0 (JSON number or decimal string)."""
    if isinstance(value, bool) or value is None:
        raise _RowError(field, f"{value!r} is not a number")
    try:
        t = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise _RowError(field, f"{value!r} is not a number") from None
    if not math.isfinite(t) or t < 0:
        raise _RowError(field, f"{value!r} must be finite and >= 0")
    return t


def _get(record: Mapping[str, Any], field: str) -> Any:
    if field not in record:
        raise _RowError(field, "missing")
    return record[field]


def _line_loop(
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


def _jsonl_records(f: IO[bytes]) -> Iterator[tuple[int, Any]]:
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


def _json_record(record: Any) -> Mapping[str, Any]:
    if isinstance(record, _RowError):
        raise record
    return record


def _open_text(path: Path) -> IO[str]:
    """The file as text for `csv`: bytes that are not UTF-8 become lone surrogates (`surrogateescape`),
    which `_csv_records` reports by line and field instead of a bare UnicodeDecodeError."""
    return path.open(newline="", encoding="utf-8", errors="surrogateescape")


_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def _csv_records(path: Path, f: IO[str]) -> tuple[list[str], Iterator[tuple[int, Any]]]:
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


def _meta(path: Path, fmt: str, skipped: int, **extra: Any) -> dict[str, Any]:
    return {"source": str(path), "format": fmt, "skipped_rows": skipped, **extra}


def no_rows_error(path: Path | str, field: str, skipped: int) -> TraceFormatError:
    """What a file that gives no request is (the whole-file loaders and the chunked readers alike)."""
    reason = f"no rows left: all {skipped} skipped (on_error='skip')" if skipped else "the file has no rows"
    return TraceFormatError(str(path), 1, field, reason)


def _require_rows(w: Workload, field: str) -> Workload:
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


def _first_ids(first_request_id: int, n: int) -> np.ndarray:
    first_request_id = int_arg("first_request_id", first_request_id)
    if first_request_id < 0 or first_request_id + n - 1 > MAX_REQUEST_ID:
        raise InvalidArgumentError(
            f"first_request_id {first_request_id} puts ids outside [0, {MAX_REQUEST_ID}]"
        )
    return np.arange(first_request_id, first_request_id + n, dtype=np.uint64)


# -------------------------------------------------------------------------------------------- Mooncake


def _mooncake_segments(
    input_len: np.ndarray, counts: np.ndarray, block: int
) -> tuple[np.ndarray, np.ndarray]:
    """CSR offsets and segment lengths: `block` each, the last of a request what remains of its input."""
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    seg_len = np.full(int(offsets[-1]), block, dtype=np.int64)
    seg_len[offsets[1:] - 1] = input_len - block * (counts - 1)
    return offsets, seg_len


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
    counts = frame["hash_ids"].list.len().to_numpy().astype(np.int64)
    hashes = frame["hash_ids"].explode()
    if hashes.null_count():
        return None
    flat = hashes.to_numpy()
    ok = (
        np.isfinite(ts).all()
        and (ts >= 0).all()
        and (inp >= 1).all()
        and (out >= 1).all()
        and np.array_equal(counts, -(-inp // block))
        and (flat >= 0).all()
    )
    if not ok:
        return None
    return ts, inp, out, counts, flat.astype(np.uint64)


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
    w = _load_mooncake(path, on_error=on_error, first_request_id=first_request_id, block_size=block_size)
    return _require_rows(w, "timestamp")


def _load_mooncake(
    path: str | PathLike[str],
    *,
    on_error: str = "raise",
    first_request_id: int = 0,
    block_size: int = MOONCAKE_BLOCK,
) -> Workload:
    """`load_mooncake` that returns a workload of no rows (a chunk's piece may have none)."""
    _check_on_error(on_error)
    p = _existing(path)
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
            rec = _json_record(record)
            t = _to_time(_get(rec, "timestamp"), "timestamp")
            n_in = _to_int(_get(rec, "input_length"), "input_length")
            n_out = _to_int(_get(rec, "output_length"), "output_length")
            hashes = _get(rec, "hash_ids")
            if not isinstance(hashes, list):
                raise _RowError("hash_ids", f"{type(hashes).__name__} is not a list")
            want = -(-n_in // block_size)
            if len(hashes) != want:
                raise _RowError(
                    "hash_ids",
                    f"{len(hashes)} ids for input_length {n_in}, expected ceil({n_in}/{block_size}) = {want}",
                )
            ids = [_to_int(h, "hash_ids", 0) for h in hashes]
            if any(h >= _U63 for h in ids):
                raise _RowError("hash_ids", "an id is >= 2**63 (the output-id range)")
            ts_l.append(t)
            in_l.append(n_in)
            out_l.append(n_out)
            cnt_l.append(len(ids))
            flat_l.extend(ids)

        with p.open("rb") as f:
            skipped = _line_loop(p, _jsonl_records(f), parse, on_error)
        ts = np.array(ts_l, dtype=np.float64)
        inp = np.array(in_l, dtype=np.int64)
        out = np.array(out_l, dtype=np.int64)
        counts = np.array(cnt_l, dtype=np.int64)
        flat = np.array(flat_l, dtype=np.uint64)
    offsets, seg_len = _mooncake_segments(inp, counts, block_size)
    cols = {
        "arrival": ts / 1000.0,
        "prompt_len": inp,
        "output_len": out,
        "max_tokens": out.copy(),
        "num_samples": np.ones(len(inp), dtype=np.int64),
        "beam": np.zeros(len(inp), dtype=np.bool_),
        "request_id": _first_ids(first_request_id, len(inp)),
        "seg_offsets": offsets,
        "segment_id": flat,
        "segment_len": seg_len,
    }
    return Workload._from_owned(cols, _meta(p, "mooncake", skipped, block_size=block_size))


# ----------------------------------------------------------------------------------------------- Azure


def _azure_ns(value: Any) -> int:
    """`2023-11-16 18:17:03.9799600` -> integer nanoseconds since 1970 (the clock is taken as UTC)."""
    m = _AZURE_TIME.match(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise _RowError("TIMESTAMP", f"{value!r} is not 'YYYY-MM-DD HH:MM:SS.fffffff'")
    try:
        dt = datetime.fromisoformat(m.group(1))
    except ValueError:
        raise _RowError("TIMESTAMP", f"{value!r} is not a valid date and time") from None
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
        ns = frame["TIMESTAMP"].str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="ns", strict=False)
    except pl.exceptions.PolarsError:
        return None
    if ns.null_count() or frame["ContextTokens"].null_count() or frame["GeneratedTokens"].null_count():
        return None
    # polars accepts a missing fraction and other widths; the line loop is the definition, so only
    # take this path when every stamp has the documented shape.
    if not frame["TIMESTAMP"].str.contains(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{1,9}$").all():
        return None
    inp = frame["ContextTokens"].to_numpy()
    out = frame["GeneratedTokens"].to_numpy()
    if (inp < 1).any() or (out < 1).any():
        return None
    return ns.cast(pl.Int64).to_numpy(), inp, out


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
    _check_on_error(on_error)
    p = _existing(path)
    ns, inp, out, skipped = _azure_columns(p, on_error)
    if not len(ns):
        raise no_rows_error(p, "TIMESTAMP", skipped)
    return _azure_workload(p, ns, inp, out, skipped, int(ns.min()), first_request_id)


def _azure_columns(p: Path, on_error: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Integer-nanosecond stamps, prompt and output lengths of an Azure file, and the rows skipped."""
    fast = _azure_fast(p)
    if fast is not None:
        ns, inp, out = fast
        return ns, inp, out, 0
    ns_l: list[int] = []
    in_l: list[int] = []
    out_l: list[int] = []

    def parse(record: Any) -> None:
        rec = _json_record(record)
        t = _azure_ns(_get(rec, "TIMESTAMP"))
        n_in = _to_int(_get(rec, "ContextTokens"), "ContextTokens")
        n_out = _to_int(_get(rec, "GeneratedTokens"), "GeneratedTokens")
        ns_l.append(t)
        in_l.append(n_in)
        out_l.append(n_out)

    with _open_text(p) as f:
        header, records = _csv_records(p, f)
        for col in _AZURE_COLUMNS:
            if col not in header:
                raise TraceFormatError(str(p), 1, "header", f"column {col!r} missing; header is {header}")
        skipped = _line_loop(p, records, parse, on_error)
    return (
        np.array(ns_l, dtype=np.int64),
        np.array(in_l, dtype=np.int64),
        np.array(out_l, dtype=np.int64),
        skipped,
    )


def _azure_workload(
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
    start_text = ""
    if len(ns):
        start_dt = _EPOCH + _SECOND * (start // 1_000_000_000)
        start_text = f"{start_dt.isoformat(sep=' ')}.{start % 1_000_000_000:09d}"
    return Workload(
        arrival=arrival,
        prompt_len=inp,
        output_len=out,
        request_id=_first_ids(first_request_id, len(inp)),
        meta=_meta(p, "azure-2023", skipped, start=start_text),
    )


# --------------------------------------------------------------------------------------- generic table


def _table_format(p: Path, fmt: str | None) -> str:
    if fmt is None:
        suffix = p.suffix.lower()
        fmt = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}.get(suffix)
        if fmt is None:
            raise InvalidArgumentError(f"cannot tell the format of {p} from {suffix!r}: pass format=")
    if fmt not in ("csv", "jsonl", "parquet"):
        raise InvalidArgumentError(f"format {fmt!r} must be 'csv', 'jsonl' or 'parquet'")
    return fmt


def _table_fast(
    frame: pl.DataFrame, mapping: Mapping[str, str], divisor: float
) -> dict[str, np.ndarray] | None:
    out: dict[str, np.ndarray] = {}
    try:
        for ours, theirs in mapping.items():
            dtype = pl.Float64 if ours == "arrival" else pl.Int64
            col = frame[theirs]
            if not col.dtype.is_numeric():
                # (polars casts true to 1 and a Duration to its integer microseconds: not numbers of this
                # field; the line loop names the row)
                return None
            if ours != "arrival" and col.dtype.is_float() and not (col == col.floor()).all():
                return None  # polars' cast truncates 3.5 to 3; the line loop names the row
            col = col.cast(dtype, strict=True)
            if col.null_count():
                return None
            out[ours] = col.to_numpy()
    except (pl.exceptions.PolarsError, KeyError):
        return None
    arrival = out.get("arrival")
    if arrival is not None and not (np.isfinite(arrival).all() and (arrival >= 0).all()):
        return None
    for name in ("prompt_len", "output_len", "max_tokens", "num_samples"):
        if name in out and (out[name] < 1).any():
            return None
    if "request_id" in out and (out["request_id"] < 0).any():
        return None
    if arrival is None:
        return out
    out["arrival"] = arrival / divisor
    return out


def _read_frame(p: Path, fmt: str) -> pl.DataFrame | None:
    """The whole file as a polars frame, or None when polars cannot read it (the line loop then names
    the first bad line). An unreadable parquet file has no lines to name: InvalidArgumentError."""
    if fmt == "parquet":
        try:
            return pl.read_parquet(p)
        except pl.exceptions.PolarsError as exc:
            raise InvalidArgumentError(f"cannot read {p} as parquet: {exc}") from None
    if fmt == "csv":
        with _open_text(p) as f:
            _csv_records(p, f)  # an empty file, a header that is not UTF-8 or repeats a column: refused
    try:
        if fmt == "csv":
            return pl.read_csv(p, infer_schema_length=None)
        return pl.read_ndjson(p, infer_schema_length=None)
    except pl.exceptions.PolarsError:
        return None


def _file_columns(p: Path, fmt: str, frame: pl.DataFrame | None) -> list[str]:
    """The file's column names: the frame's, a CSV header, or the keys of the first JSON object."""
    if frame is not None:
        return list(frame.columns)
    if fmt == "csv":
        with _open_text(p) as f:
            return _csv_records(p, f)[0]
    with p.open("rb") as f:
        for _line, record in _jsonl_records(f):
            return list(_json_record(record))
    return []


def _read_columns(
    p: Path,
    fmt: str,
    frame: pl.DataFrame | None,
    mapping: Mapping[str, str],
    divisor: float,
    on_error: str,
) -> tuple[dict[str, np.ndarray], int]:
    """Columns `ours -> the file's column` of a table as arrays (`arrival` as seconds, float64; every
    other one int64: at least 1, `request_id` at least 0), and the rows skipped. The frame's columns are
    checked vectorised; on anything off, the file is read row by row to name the first bad row.

    Raises:
        TraceFormatError: a missing column (line 1, field "header") or a malformed row.
    """
    if frame is not None:
        missing = [v for v in mapping.values() if v not in frame.columns]
        if missing:
            raise TraceFormatError(
                str(p),
                1,
                "header",
                f"{fmt_count(len(missing), 'column')} missing ({missing}); columns are {frame.columns}",
            )
        cols = _table_fast(frame, mapping, divisor)
        if cols is not None:
            return cols, 0
    lists: dict[str, list[Any]] = {k: [] for k in mapping}

    def parse(record: Any) -> None:
        rec = _json_record(record)
        row = {}
        for ours, theirs in mapping.items():
            value = _get(rec, theirs)
            if ours == "arrival":
                row[ours] = _to_time(value, theirs) / divisor
            else:
                row[ours] = _to_int(value, theirs, 0 if ours == "request_id" else 1)
        for k, v in row.items():
            lists[k].append(v)

    with contextlib.ExitStack() as stack:
        if fmt == "csv":
            header, records = _csv_records(p, stack.enter_context(_open_text(p)))
            missing = [v for v in mapping.values() if v not in header]
            if missing:
                raise TraceFormatError(
                    str(p),
                    1,
                    "header",
                    f"{fmt_count(len(missing), 'column')} missing ({missing}); header is {header}",
                )
        elif fmt == "jsonl":
            records = _jsonl_records(stack.enter_context(p.open("rb")))
        else:
            assert frame is not None, "a parquet file is read whole or refused"
            names = list(mapping.values())
            records = (
                (i, dict(zip(names, values, strict=True)))
                for i, values in enumerate(frame.select(names).iter_rows(), 1)
            )
        skipped = _line_loop(p, records, parse, on_error)
    cols = {k: np.array(v, dtype=np.float64 if k == "arrival" else np.int64) for k, v in lists.items()}
    return cols, skipped


def read_length_pairs(
    path: Path, prompt_column: str | None, output_column: str | None, candidates: tuple[tuple[str, str], ...]
) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) length columns of a csv, jsonl or parquet file (by suffix; anything else is read
    as csv), with the row-naming errors of `load_table`. Without column names, the first pair of
    `candidates` the file has is taken.

    Raises:
        TraceFormatError: a bad value (file, row, field), a missing column, or no rows.
        InvalidArgumentError: no candidate pair matches, or an unreadable parquet file.
    """
    fmt = {".parquet": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl"}.get(path.suffix.lower(), "csv")
    frame = _read_frame(path, fmt)
    if prompt_column is None or output_column is None:
        columns = _file_columns(path, fmt, frame)
        for pc, oc in candidates:
            if pc in columns and oc in columns:
                prompt_column, output_column = pc, oc
                break
        else:
            raise InvalidArgumentError(f"{path}: name prompt_column and output_column; columns are {columns}")
    mapping = {"prompt_len": prompt_column, "output_len": output_column}
    cols, _ = _read_columns(path, fmt, frame, mapping, 1.0, "raise")
    if len(cols["prompt_len"]) == 0:
        raise TraceFormatError(str(path), 1, prompt_column, "the file has no rows")
    return cols["prompt_len"], cols["output_len"]


def load_table(
    path: str | PathLike[str],
    *,
    columns: Mapping[str, str] | None = None,
    time_unit: str = "s",
    format: str | None = None,
    on_error: str = "raise",
    first_request_id: int = 0,
) -> Workload:
    """Loads any table of requests (csv, jsonl or parquet) with an arrival and two lengths per row.

    Args:
        path: the file.
        columns: our column name -> the file's: `arrival`, `prompt_len`, `output_len` are required,
            `max_tokens`, `num_samples`, `request_id` optional; names not given map to themselves.
        time_unit: unit of the arrival column, `"s"`, `"ms"` or `"us"`; arrivals become seconds.
        format: `"csv"`, `"jsonl"` or `"parquet"`; by default from the suffix (.csv, .jsonl/.ndjson,
            .parquet).
        on_error: `"raise"` on the first malformed row, or `"skip"` (count in `meta["skipped_rows"]`).
        first_request_id: request id of the first row when the file has no request id column.

    Returns:
        The workload; each prompt one unique segment.

    Raises:
        TraceFormatError: a missing or repeated CSV column (line 1, field "header"), a file that gives no
            request (empty, header only, blank lines, every row skipped: line 1, the arrival column) or a
            malformed row (for parquet, `line` is the 1-based row number).
        InvalidArgumentError: a missing file, an unknown column key, format or time unit.
    """
    w = _load_table(
        path,
        columns=columns,
        time_unit=time_unit,
        format=format,
        on_error=on_error,
        first_request_id=first_request_id,
    )
    return _require_rows(w, arrival_field(w))


def _load_table(
    path: str | PathLike[str],
    *,
    columns: Mapping[str, str] | None = None,
    time_unit: str = "s",
    format: str | None = None,
    on_error: str = "raise",
    first_request_id: int = 0,
) -> Workload:
    """`load_table` that returns a workload of no rows (a chunk's piece may have none)."""
    _check_on_error(on_error)
    p = _existing(path)
    fmt = _table_format(p, format)
    if not isinstance(time_unit, str) or time_unit not in _TIME_DIVISORS:
        raise InvalidArgumentError(f"time_unit {time_unit!r} must be one of {sorted(_TIME_DIVISORS)}")
    divisor = _TIME_DIVISORS[time_unit]
    if columns is not None and not (
        isinstance(columns, Mapping) and all(isinstance(v, str) for v in (*columns, *columns.values()))
    ):
        raise InvalidArgumentError(f"columns {columns!r} must be a mapping of column names (str -> str)")
    given = dict(columns or {})
    unknown = sorted(set(given) - set(_TABLE_FIELDS))
    if unknown:
        raise InvalidArgumentError(f"columns keys {unknown} are not among {_TABLE_FIELDS}")
    mapping = {k: given.get(k, k) for k in ("arrival", "prompt_len", "output_len")}
    frame = _read_frame(p, fmt)
    if frame is not None:
        for k in ("max_tokens", "num_samples", "request_id"):
            if k in given or k in frame.columns:
                mapping[k] = given.get(k, k)
    else:
        mapping.update({k: given[k] for k in ("max_tokens", "num_samples", "request_id") if k in given})
    cols, skipped = _read_columns(p, fmt, frame, mapping, divisor, on_error)
    n = len(cols["arrival"])
    request_id = cols.pop("request_id", None)
    if request_id is None:
        request_id = _first_ids(first_request_id, n)
    return Workload(
        arrival=cols["arrival"],
        prompt_len=cols["prompt_len"],
        output_len=cols["output_len"],
        max_tokens=cols.get("max_tokens"),
        num_samples=cols.get("num_samples"),
        request_id=request_id,
        meta=_meta(p, fmt, skipped, columns=mapping, time_unit=time_unit),
    )
