"""The trace loaders in chunks: `iter_mooncake`, `iter_azure`, `iter_table` yield a file's requests as
`Workload`s of at most `chunk_rows` lines each, reading the file in bounded pieces (DESIGN.md
§Streaming), for `kvsim.simulate_stream`.

Each piece (`chunk_rows` lines of a csv or jsonl file, the csv header in front; `chunk_rows` rows of a
parquet file, through polars' lazy `scan_parquet().slice()`) goes through the whole-file loader's own
reader and checks (`kvsim.workloads.traces`), so a chunked load accepts and refuses what a whole one
does, with the same `TraceFormatError`: the file, the line (counted in the whole file, for parquet the
row) and the field. Request ids count on across chunks as in the whole file; Azure arrivals are seconds
since the file's earliest stamp, found by a first pass over the pieces (a table's arrival column of
dates likewise). A file in arrival order (every published trace is) gives chunks in arrival order, and
`simulate_stream(iter_x(path), cfg)` equals `simulate(load_x(path), cfg)`. A csv field with a newline
inside quotes is not supported (pieces end at line ends).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Mapping, Sized
from os import PathLike
from pathlib import Path
from typing import IO, TypeVar

import numpy as np
import polars as pl

from kvsim.arguments import int_arg
from kvsim.errors import InvalidArgumentError, TraceFormatError
from kvsim.workloads import trace_table, traces
from kvsim.workloads.table import Workload

DEFAULT_CHUNK_ROWS = 1 << 16
_T = TypeVar("_T", bound=Sized)


def _as_chunks(p: Path, chunk_rows: int, pieces: Iterator[Workload]) -> Iterator[Workload]:
    """The non-empty pieces, their `meta["source"]` the file (not the piece's temporary copy). A piece
    may hold no row (blank or skipped lines); the whole file must give one, as for the whole-file
    loaders, with their error (`traces.no_rows_error`)."""
    rows = skipped = 0
    field = None
    for w in pieces:
        field = traces.arrival_field(w)
        skipped += int(w.meta.get("skipped_rows", 0))
        rows += len(w)
        if len(w):
            meta = dict(w.meta, source=str(p), chunk_rows=chunk_rows)
            yield Workload._from_owned(
                dict(w.columns()), meta, allow_foreign_outputs=w.allow_foreign_outputs, validate=False
            )
    if not rows:
        assert field is not None, "every file gives at least one piece"
        raise traces.no_rows_error(p, field, skipped)


def _chunk_rows(chunk_rows: int) -> int:
    chunk_rows = int_arg("chunk_rows", chunk_rows)
    if chunk_rows < 1:
        raise InvalidArgumentError(f"chunk_rows {chunk_rows} must be at least 1")
    return chunk_rows


def _text_pieces(f: IO[bytes], chunk_rows: int, header: bool) -> Iterator[tuple[int, bytes]]:
    """`(lines before the piece's first data line, the piece)`: `chunk_rows` lines each, after the
    header line (csv) repeated in front of every piece."""
    head = f.readline() if header else b""
    before = 1 if header else 0
    while True:
        lines = []
        for _ in range(chunk_rows):
            line = f.readline()
            if not line:
                break
            lines.append(line if line.endswith(b"\n") else line + b"\n")
        if not lines:
            if before == (1 if header else 0):
                yield 0, head  # a file of no lines or a header only: one piece, the loader's checks
            return
        yield before - (1 if header else 0), head + b"".join(lines)
        before += len(lines)


def _pieces(p: Path, fmt: str, chunk_rows: int, load: Callable[[Path, int], _T]) -> Iterator[_T]:
    """Each piece of `p` loaded by `load(piece_file, ids_so_far)`, errors renamed to `p` and its lines."""
    with tempfile.TemporaryDirectory(prefix="kvsim-chunk-") as tmp:
        piece_path = Path(tmp) / f"piece.{fmt}"
        next_id = 0
        if fmt == "parquet":
            try:
                total = pl.scan_parquet(p).select(pl.len()).collect().item()
            except pl.exceptions.PolarsError as exc:
                raise InvalidArgumentError(f"cannot read {p} as parquet: {exc}") from None
            # a file of no rows is still one piece, for the loader's checks of its columns
            offsets: Iterator[tuple[int, bytes | None]] = (
                (lo, None) for lo in range(0, max(total, 1), chunk_rows)
            )
        else:
            f = p.open("rb")
            offsets = _text_pieces(f, chunk_rows, header=fmt == "csv")
        try:
            for before, data in offsets:
                if data is None:
                    pl.scan_parquet(p).slice(before, chunk_rows).collect().write_parquet(piece_path)
                else:
                    piece_path.write_bytes(data)
                try:
                    w = load(piece_path, next_id)
                except TraceFormatError as err:
                    line = err.line if err.field == "header" and err.line == 1 else err.line + before
                    raise TraceFormatError(str(p), line, err.field, err.reason) from None
                next_id += len(w)
                yield w
        finally:
            if fmt != "parquet":
                f.close()


def iter_mooncake(
    path: str | PathLike[str],
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    on_error: str = "raise",
    first_request_id: int = 0,
    block_size: int = traces.MOONCAKE_BLOCK,
) -> Iterator[Workload]:
    """`load_mooncake(path, ...)` as chunks of at most `chunk_rows` lines (see the module)."""
    traces.check_on_error(on_error)
    p = traces.existing_file(path)
    rows = _chunk_rows(chunk_rows)
    first = int_arg("first_request_id", first_request_id)

    def load(piece: Path, done: int) -> Workload:
        return traces.read_mooncake(
            piece, on_error=on_error, first_request_id=first + done, block_size=block_size
        )

    return _as_chunks(p, rows, _pieces(p, "jsonl", rows, load))


def iter_azure(
    path: str | PathLike[str],
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    on_error: str = "raise",
    first_request_id: int = 0,
) -> Iterator[Workload]:
    """`load_azure(path, ...)` as chunks of at most `chunk_rows` lines (see the module). The file is
    read twice: a first pass finds its earliest stamp, the origin of every arrival."""
    traces.check_on_error(on_error)
    p = traces.existing_file(path)
    rows = _chunk_rows(chunk_rows)
    first = int_arg("first_request_id", first_request_id)
    starts: list[int] = []

    def scan(piece: Path, done: int) -> np.ndarray:
        ns = traces.azure_columns(piece, on_error)[0]
        if len(ns):
            starts.append(int(ns.min()))
        return ns

    def chunks() -> Iterator[Workload]:
        for _ in _pieces(p, "csv", rows, scan):
            pass
        start = min(starts) if starts else 0

        def load(piece: Path, done: int) -> Workload:
            ns, inp, out, skipped = traces.azure_columns(piece, on_error)
            return traces.azure_workload(piece, ns, inp, out, skipped, start, first + done)

        yield from _as_chunks(p, rows, _pieces(p, "csv", rows, load))

    return chunks()


def iter_table(
    path: str | PathLike[str],
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    columns: Mapping[str, str] | None = None,
    time_unit: str = "s",
    format: str | None = None,
    on_error: str = "raise",
    first_request_id: int = 0,
    block_size: int = traces.MOONCAKE_BLOCK,
) -> Iterator[Workload]:
    """`load_table(path, ...)` as chunks of at most `chunk_rows` lines or parquet rows (see the module). An
    arrival column of dates is read in two passes, as `iter_azure` reads: the first finds the earliest
    stamp, the second counts every chunk's arrivals from it."""
    traces.check_on_error(on_error)
    p = traces.existing_file(path)
    fmt = trace_table._table_format(p, format)
    rows = _chunk_rows(chunk_rows)
    first = int_arg("first_request_id", first_request_id)
    column = dict(columns or {}).get("arrival", "arrival") if isinstance(columns, Mapping) else "arrival"
    dates = trace_table.arrival_dates(p, fmt, column)

    def load(piece: Path, done: int, start_ns: int | None = None) -> Workload:
        return trace_table._load_table(
            piece,
            columns=columns,
            time_unit=time_unit,
            format=fmt,
            on_error=on_error,
            first_request_id=first + done,
            block_size=block_size,
            dates=dates,
            start_ns=start_ns,
        )

    if not dates:
        return _as_chunks(p, rows, _pieces(p, fmt, rows, load))

    def chunks() -> Iterator[Workload]:
        starts = [w.meta["start_ns"] for w in _pieces(p, fmt, rows, load) if len(w)]
        start = min(starts) if starts else 0
        yield from _as_chunks(p, rows, _pieces(p, fmt, rows, lambda piece, done: load(piece, done, start)))

    return chunks()
