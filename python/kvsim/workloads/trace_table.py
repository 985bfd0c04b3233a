"""The generic table loader: any csv, jsonl or parquet table of requests (`load_table`), and the length
pairs of `synthetic(lengths="empirical" | "sharegpt-real")` (`read_length_pairs`), through the readers and
checks of `kvsim.workloads.traces` (its module docstring: the fast columnar pass, the line loop that names
the first bad row, `on_error`, the length rules), which it takes by their public names only. A file's
format by its suffix is `TABLE_FORMATS`, this module's, which `kvsim run` reads too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kvsim.arguments import int_arg
from kvsim.errors import InvalidArgumentError, TimeUnitError, TraceFormatError
from kvsim.model.units import fmt_count
from kvsim.workloads.table import Workload
from kvsim.workloads.traces import (
    MOONCAKE_BLOCK,
    arrival_field,
    azure_ns,
    check_on_error,
    csv_records,
    date_stamps,
    datetime_ns,
    datetime_row_ns,
    existing_file,
    first_ids,
    get_field,
    hash_fast,
    hash_row,
    hash_segments,
    is_date,
    json_record,
    jsonl_records,
    line_loop,
    open_text,
    require_rows,
    stamp_text,
    to_int,
    to_time,
    trace_meta,
)

# A table file's format by its suffix (lower case): `load_table`'s, `read_length_pairs`' and
# `kvsim run --workload path`'s (`specs.TRACE_SUFFIXES`) one map.
TABLE_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
_TIME_DIVISORS = {"s": 1.0, "ms": 1e3, "us": 1e6}
_TABLE_FIELDS = ("arrival", "prompt_len", "output_len", "max_tokens", "num_samples", "request_id", "hash_ids")
_OPTIONAL = _TABLE_FIELDS[3:]


def _table_format(p: Path, fmt: str | None) -> str:
    if fmt is None:
        suffix = p.suffix.lower()
        fmt = TABLE_FORMATS.get(suffix)
        if fmt is None:
            raise InvalidArgumentError(f"cannot tell the format of {p} from {suffix!r}: pass format=")
    if fmt not in TABLE_FORMATS.values():
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
        with open_text(p) as f:
            csv_records(p, f)  # an empty file, a header that is not UTF-8 or repeats a column: refused
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
        with open_text(p) as f:
            return csv_records(p, f)[0]
    return list(_first_record(p, fmt) or {})


def _first_record(p: Path, fmt: str) -> dict[str, Any] | None:
    """The first row of a csv or jsonl file that reads as one (a bad one is the line loop's to name)."""
    with contextlib.ExitStack() as stack:
        if fmt == "csv":
            records = csv_records(p, stack.enter_context(open_text(p)))[1]
        else:
            records = jsonl_records(stack.enter_context(p.open("rb")))
        return next((r for _line, r in records if isinstance(r, dict)), None)


def arrival_dates(p: Path, fmt: str, column: str, frame: pl.DataFrame | None = None) -> bool:
    """Whether a table's arrival column holds dates: date text (the Azure traces' `2023-11-16
    18:17:03.9799600`), by its first row, or date-times (a parquet file's `Datetime` column): then arrivals
    are seconds since the earliest stamp (`load_table`)."""
    if frame is not None:
        if column not in frame.columns:
            return False
        if isinstance(frame[column].dtype, pl.Datetime):
            return True
        values = frame[column].drop_nulls()
        return values.dtype == pl.String and len(values) > 0 and is_date(values[0])
    if fmt == "parquet":
        lazy = pl.scan_parquet(p)
        schema = lazy.collect_schema()
        if column not in schema.names():
            return False
        if isinstance(schema[column], pl.Datetime):
            return True
        values = lazy.select(column).head(1).collect()[column]
        return len(values) > 0 and is_date(values[0])
    first = _first_record(p, fmt)
    return first is not None and is_date(first.get(column))


def file_columns(path: Path) -> list[str]:
    """A table file's column names (csv header, the first JSON object's keys, parquet schema); [] when
    they cannot be read."""
    try:
        fmt = _table_format(path, None)
        if fmt == "parquet":
            return list(pl.read_parquet_schema(path))
        return _file_columns(path, fmt, None)
    except (InvalidArgumentError, TraceFormatError, pl.exceptions.PolarsError, OSError):
        return []


def _read_columns(
    p: Path,
    fmt: str,
    frame: pl.DataFrame | None,
    mapping: Mapping[str, str],
    divisor: float,
    on_error: str,
    block: int = MOONCAKE_BLOCK,
    dates: bool = False,
) -> tuple[dict[str, np.ndarray], int]:
    """Columns `ours -> the file's column` of a table as arrays (`arrival` as seconds, float64, or with
    `dates` integer nanoseconds since 1970 of date text, `traces.azure_ns`' rule; every other one
    int64: at least 1, `request_id` at least 0), and the rows skipped. A `hash_ids` column
    (`hash_row`'s rule, `block` tokens per id) becomes `hash_counts` (ids per row) and `hash_ids` (the
    flat ids, uint64). The frame's columns are checked vectorised; on anything off, the file is read row
    by row to name the first bad row.

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
        content = mapping.get("hash_ids")
        skip = ("hash_ids", "arrival") if dates else ("hash_ids",)
        cols = _table_fast(frame, {k: v for k, v in mapping.items() if k not in skip}, divisor)
        hashes = (
            hash_fast(frame[content], cols["prompt_len"], block) if cols is not None and content else None
        )
        stamps = date_stamps(frame[mapping["arrival"]]) if cols is not None and dates else None
        if cols is not None and (content is None or hashes is not None) and (not dates or stamps is not None):
            if hashes is not None:
                cols["hash_counts"], cols["hash_ids"] = hashes
            if stamps is not None:
                cols["arrival"] = stamps
            return cols, 0
    lists: dict[str, list[Any]] = {k: [] for k in mapping}
    # (a parquet file's date-times: their nanoseconds, read exactly, `datetime_ns`)
    native = frame is not None and dates and isinstance(frame[mapping["arrival"]].dtype, pl.Datetime)

    def parse(record: Any) -> None:
        rec = json_record(record)
        row: dict[str, Any] = {}
        for ours, theirs in mapping.items():
            value = get_field(rec, theirs)
            if ours == "arrival":
                row[ours] = (
                    datetime_row_ns(value, theirs)
                    if native
                    else azure_ns(value, theirs)
                    if dates
                    else to_time(value, theirs) / divisor
                )
            elif ours != "hash_ids":
                row[ours] = to_int(value, theirs, 0 if ours == "request_id" else 1)
        if "hash_ids" in mapping:
            theirs = mapping["hash_ids"]
            row["hash_ids"] = hash_row(get_field(rec, theirs), row["prompt_len"], block, theirs)
        for k, v in row.items():
            lists[k].append(v)

    with contextlib.ExitStack() as stack:
        if fmt == "csv":
            header, records = csv_records(p, stack.enter_context(open_text(p)))
            missing = [v for v in mapping.values() if v not in header]
            if missing:
                raise TraceFormatError(
                    str(p),
                    1,
                    "header",
                    f"{fmt_count(len(missing), 'column')} missing ({missing}); header is {header}",
                )
        elif fmt == "jsonl":
            records = jsonl_records(stack.enter_context(p.open("rb")))
        else:
            assert frame is not None, "a parquet file is read whole or refused"
            names = list(mapping.values())
            picked = frame.select(names)
            if native:
                picked = picked.with_columns(datetime_ns(picked[mapping["arrival"]]))
            records = (
                (i, dict(zip(names, values, strict=True))) for i, values in enumerate(picked.iter_rows(), 1)
            )
        skipped = line_loop(p, records, parse, on_error)
    hash_lists = lists.pop("hash_ids", None)
    seconds = "arrival" if not dates else ""
    cols = {k: np.array(v, dtype=np.float64 if k == seconds else np.int64) for k, v in lists.items()}
    if hash_lists is not None:
        cols["hash_counts"] = np.array([len(h) for h in hash_lists], dtype=np.int64)
        cols["hash_ids"] = np.array([i for h in hash_lists for i in h], dtype=np.uint64)
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
    fmt = TABLE_FORMATS.get(path.suffix.lower(), "csv")
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
    block_size: int = MOONCAKE_BLOCK,
) -> Workload:
    """Loads any table of requests (csv, jsonl or parquet) with an arrival and two lengths per row.

    Args:
        path: the file.
        columns: our column name -> the file's: `arrival`, `prompt_len`, `output_len` are required,
            `max_tokens`, `num_samples`, `request_id`, `hash_ids` optional; names not given map to
            themselves (an optional one when the file has that column).
        time_unit: unit of the arrival column, `"s"`, `"ms"` or `"us"`; arrivals become seconds. An
            arrival column of dates (`2023-11-16 18:17:03.9799600`, by its first row) is read as
            `load_azure` reads its stamps: seconds since the earliest (`meta["start"]`); its unit is `"s"`.
        format: `"csv"`, `"jsonl"` or `"parquet"`; by default from the suffix (.csv, .jsonl/.ndjson,
            .parquet).
        on_error: `"raise"` on the first malformed row, or `"skip"` (count in `meta["skipped_rows"]`).
        first_request_id: request id of the first row when the file has no request id column.
        block_size: tokens per hash id of a `hash_ids` column (512, Mooncake's).

    Returns:
        The workload. With a `hash_ids` column (a list of ids per row, in a csv cell its JSON text),
        each prompt is one segment per id as `load_mooncake` builds it (the same rule, `traces.hash_row`):
        `block_size` tokens each, the last the rest, so rows with equal leading ids share a prefix.
        Without one, each prompt is one unique segment. `meta["columns"]` is the mapping read;
        `meta["unread_content"]` lists the file's columns not read whose names say `hash` (content the
        caller may have meant to map as `hash_ids`).

    Raises:
        TraceFormatError: a missing or repeated CSV column (line 1, field "header"), a file that gives no
            request (empty, header only, blank lines, every row skipped: line 1, the arrival column) or a
            malformed row (for parquet, `line` is the 1-based row number).
        InvalidArgumentError: a missing file, an unknown column key, format or time unit, a time unit other
            than "s" beside dates.
    """
    w = _load_table(
        path,
        columns=columns,
        time_unit=time_unit,
        format=format,
        on_error=on_error,
        first_request_id=first_request_id,
        block_size=block_size,
    )
    return require_rows(w, arrival_field(w))


def _load_table(
    path: str | PathLike[str],
    *,
    columns: Mapping[str, str] | None = None,
    time_unit: str = "s",
    format: str | None = None,
    on_error: str = "raise",
    first_request_id: int = 0,
    block_size: int = MOONCAKE_BLOCK,
    dates: bool | None = None,
    start_ns: int | None = None,
) -> Workload:
    """`load_table` that returns a workload of no rows (a chunk's piece may have none)."""
    check_on_error(on_error)
    p = existing_file(path)
    fmt = _table_format(p, format)
    if not isinstance(time_unit, str) or time_unit not in _TIME_DIVISORS:
        raise TimeUnitError(f"time_unit {time_unit!r} must be one of {sorted(_TIME_DIVISORS)}")
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
    block_size = int_arg("block_size", block_size)
    if block_size < 1:
        raise InvalidArgumentError(f"block_size {block_size} must be at least 1")
    frame = _read_frame(p, fmt)
    # (the file's columns also when polars could not read it, so the optional ones are the same)
    present = _file_columns(p, fmt, frame)
    mapping.update({k: given.get(k, k) for k in _OPTIONAL if k in given or k in present})
    unread = [c for c in present if "hash" in c.lower() and c not in mapping.values()]
    if dates is None:
        dates = arrival_dates(p, fmt, mapping["arrival"], frame)
    if dates and time_unit != "s":
        raise TimeUnitError(
            f"time_unit {time_unit!r}: {p}'s arrival column {mapping['arrival']!r} holds dates, read as seconds "
            "since the earliest; a time unit is for numbers (leave it 's')"
        )
    cols, skipped = _read_columns(p, fmt, frame, mapping, divisor, on_error, block_size, dates)
    extra: dict[str, Any] = {}
    if dates:  # (the Azure loader's rule: seconds since the earliest stamp, from integer nanoseconds)
        ns = cols["arrival"]
        start = start_ns if start_ns is not None else int(ns.min()) if len(ns) else 0
        cols["arrival"] = (ns - start).astype(np.float64) / 1e9
        extra = {"start": stamp_text(start) if len(ns) else "", "start_ns": start}
    n = len(cols["arrival"])
    request_id = cols.pop("request_id", None)
    if request_id is None:
        request_id = first_ids(first_request_id, n)
    offsets = seg_len = None
    if "hash_counts" in cols:
        offsets, seg_len = hash_segments(cols["prompt_len"], cols["hash_counts"], block_size)
    meta = trace_meta(p, fmt, skipped, columns=mapping, time_unit=time_unit, unread_content=unread, **extra)
    if "hash_ids" in mapping:
        meta["block_size"] = block_size
    return Workload(
        arrival=cols["arrival"],
        prompt_len=cols["prompt_len"],
        output_len=cols["output_len"],
        max_tokens=cols.get("max_tokens"),
        num_samples=cols.get("num_samples"),
        request_id=request_id,
        seg_offsets=offsets,
        segment_id=cols.get("hash_ids"),
        segment_len=seg_len,
        meta=meta,
    )
