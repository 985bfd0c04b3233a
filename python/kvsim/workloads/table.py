"""`Workload`: the columnar request table every engine reads (SPEC §1, §3).

One row per request, each column one contiguous numpy array; the prompt's segments are stored in CSR
form (`seg_offsets` into flat `segment_id` / `segment_len`), so a million requests are a handful of
arrays and no Python object per request. The table is immutable (its arrays are read-only) and always
sorted by arrival, ties in the order given.

    row i:  request_id[i] arrival[i] prompt_len[i] output_len[i] max_tokens[i] num_samples[i] beam[i]
    prompt: segment_id[seg_offsets[i] : seg_offsets[i+1]], segment_len[same range]  (sums to prompt_len)

Columns and dtypes: `request_id` uint64 (unique, at most `segments.MAX_REQUEST_ID` so that the engine can
name the request's output content), `arrival` float64 seconds from the start (finite, >= 0),
`prompt_len`, `output_len`, `max_tokens`, `num_samples` int64 (all >= 1), `beam` bool, `seg_offsets`
int64 (length n+1), `segment_id` uint64, `segment_len` int64 (>= 1).

`output_len` is the length the request *would* generate; `max_tokens` is the user's cap and may be
smaller, in which case the request generates `min(output_len, max_tokens)` tokens. `num_samples` is the
number of sequences: `n` of parallel sampling, or the beam width when `beam` is true (beam search keeps
`num_samples` beams; the flag tells the engine to prune and fork instead of sampling independently).

Segment ids below 2**63 name prompt content. Ids at or above it are output ids
(`kvsim.model.segments.output_id(request_id, sample)`): a prompt may quote an earlier request's generated
tokens (a multi-turn conversation quotes the previous answers), so such a segment must name a request
that comes earlier in the table, a sample it has, and at most the tokens it generates. A selection of a
table (`w[10:20]`) may drop the quoted request; the result then carries `allow_foreign_outputs=True`,
which accepts output ids of requests absent from the table (content no request in the table generates).
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kvsim.arguments import keyword_check
from kvsim.errors import InvalidArgumentError
from kvsim.model.segments import MAX_REQUEST_ID, MAX_SAMPLES, OUTPUT_BIT
from kvsim.model.units import fmt_count
from kvsim.workloads.ids import DEFAULT_KEY, content_ids

ROW_COLUMNS = ("request_id", "arrival", "prompt_len", "output_len", "max_tokens", "num_samples", "beam")
_DTYPES: dict[str, type] = {
    "request_id": np.uint64,
    "arrival": np.float64,
    "prompt_len": np.int64,
    "output_len": np.int64,
    "max_tokens": np.int64,
    "num_samples": np.int64,
    "beam": np.bool_,
    "seg_offsets": np.int64,
    "segment_id": np.uint64,
    "segment_len": np.int64,
}
_PARQUET_KEY = "kvsim.workload"
_FORMAT_VERSION = 1
_OUTPUT_BIT = np.uint64(OUTPUT_BIT)


def arrival_rate(n: int, span: float) -> float:
    """The mean rate of `n` arrivals over `span` seconds, the last minus the first: `(n - 1) / span`
    requests per second (n arrivals make n - 1 gaps). A span of 0, every request arriving at once, is a
    batch with no rate: inf; fewer than 2 arrivals have no span to measure: nan. The one home of this rule
    (`Workload.describe`, `kvsim.analysis.plan.workload_rate`, the steady-state notes of `kvsim run` and
    `kvsim sweep`, a workload spec's `request_rate`)."""
    if n < 2:
        return math.nan
    return math.inf if span == 0 else (n - 1) / span


def _column(name: str, values: Any) -> np.ndarray:
    """Converts `values` to a fresh 1-D contiguous array of the column's dtype, rejecting lossy casts."""
    dtype = np.dtype(_DTYPES[name])
    if dtype.kind in "iu" and not isinstance(values, np.ndarray):
        exact = _exact_ints(name, values, dtype)
        if exact is not None:
            return exact
    try:
        arr = np.asarray(values)
    except (OverflowError, ValueError) as exc:
        raise InvalidArgumentError(f"{name}: cannot convert to {dtype}: {exc}") from None
    if arr.ndim != 1:
        if arr.ndim == 0:  # (None, a dict, a number: not a column of values)
            raise InvalidArgumentError(f"{name} must be a sequence of values, not {values!r:.60}")
        raise InvalidArgumentError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if dtype.kind == "b":
        if arr.dtype.kind != "b" and arr.size:
            raise InvalidArgumentError(f"{name} must be boolean, got dtype {arr.dtype}")
        return np.ascontiguousarray(arr, dtype=dtype).copy()
    if arr.dtype.kind == "O":
        try:
            arr = np.array(values, dtype=dtype)
        except (OverflowError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"{name}: cannot convert to {dtype}: {exc}") from None
    if dtype.kind == "f":
        if arr.size and arr.dtype.kind not in "iuf":
            raise InvalidArgumentError(f"{name} must be numeric, got dtype {arr.dtype}")
        return np.array(arr, dtype=dtype)
    # Integer columns: accept integer arrays and integral floats, nothing that would be rounded or wrap.
    if arr.size and arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.floor(arr))
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidArgumentError(f"{name}[{i}] = {arr[i]} is not an integer")
    elif arr.size and arr.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{name} must be integer, got dtype {arr.dtype}")
    if arr.size and dtype.kind == "u" and arr.dtype.kind in "if" and (arr < 0).any():
        i = int(np.argmax(arr < 0))
        raise InvalidArgumentError(f"{name}[{i}] = {arr[i]} must not be negative")
    if arr.size and dtype.kind == "i" and arr.dtype.kind == "u" and (arr > np.iinfo(np.int64).max).any():
        i = int(np.argmax(arr > np.iinfo(np.int64).max))
        raise InvalidArgumentError(f"{name}[{i}] = {arr[i]} does not fit in int64")
    return np.array(arr, dtype=dtype)


def _exact_ints(name: str, values: Any, dtype: np.dtype) -> np.ndarray | None:
    """A list of Python ints converted exactly, or None if it holds anything else.

    numpy turns `[7, 2**63]` into float64 (losing the low bits of the big id), so integer columns given as
    Python sequences are converted element by element instead.
    """
    try:
        items = np.array(values, dtype=object)
    except (TypeError, ValueError):
        return None
    if items.ndim != 1 or not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in items):
        return None
    info = np.iinfo(dtype)
    for i, v in enumerate(items):
        if v < info.min:
            raise InvalidArgumentError(
                f"{name}[{i}] = {v} must not be negative" if v < 0 else f"{name}[{i}] = {v}"
            )
        if v > info.max:
            raise InvalidArgumentError(f"{name}[{i}] = {v} does not fit in {dtype}")
    return np.array([int(v) for v in items], dtype=dtype)


def _gather_csr(offsets: np.ndarray, rows: np.ndarray, *flats: np.ndarray) -> tuple[np.ndarray, ...]:
    """Rows `rows` of a CSR table: the new offsets, then each flat array restricted to those rows."""
    counts = offsets[1:][rows] - offsets[:-1][rows]
    new_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    total = int(new_offsets[-1])
    # Position k of the output comes from offsets[row] + (k - new_offsets[row's slot]).
    index = np.repeat(offsets[:-1][rows] - new_offsets[:-1], counts) + np.arange(total, dtype=np.int64)
    return (new_offsets, *(flat[index] for flat in flats))


def _row_error(w_ids: np.ndarray, i: int, message: str) -> InvalidArgumentError:
    rid = f" (request_id {int(w_ids[i])})" if i < len(w_ids) else ""
    return InvalidArgumentError(f"row {i}{rid}: {message}")


class Workload:
    """A columnar table of requests, sorted by arrival, with prompt segments in CSR form.

    The module docstring lists the columns, dtypes and rules. All columns are read-only numpy arrays.

    Args:
        arrival: arrival times in seconds from the start (finite, >= 0). Rows are sorted by it (stable).
        output_len: tokens each request generates if not capped (>= 1).
        prompt_len: prompt tokens (>= 1). Optional when segments are given (then their sums); checked
            against them when both are given.
        max_tokens: the user's cap on generated tokens (>= 1); defaults to `output_len`.
        num_samples: sequences per request (`n`, or the beam width if `beam`); defaults to 1.
        beam: whether the request is a beam search of width `num_samples`; defaults to false.
        request_id: unique ids, at most `segments.MAX_REQUEST_ID`; defaults to `0..n-1` in input order.
        seg_offsets: CSR offsets (length n+1, from 0, non-decreasing) into the flat segment arrays.
        segment_id: flat segment ids (uint64).
        segment_len: flat segment lengths (>= 1).
        meta: JSON-serialisable facts about the table (its source, `skipped_rows`, generator options).
        allow_foreign_outputs: accept output ids of requests that are not in the table.

    Without segments, each request's prompt is one unique segment `content_ids(DEFAULT_KEY, request_id)`.

    Raises:
        InvalidArgumentError: a column of the wrong shape or type, or a row breaking a rule; the message
            names the column, the row (and its request id) and the value.
    """

    __slots__ = (
        "allow_foreign_outputs",
        "arrival",
        "beam",
        "max_tokens",
        "meta",
        "num_samples",
        "output_len",
        "prompt_len",
        "request_id",
        "seg_offsets",
        "segment_id",
        "segment_len",
    )

    arrival: np.ndarray
    beam: np.ndarray
    max_tokens: np.ndarray
    num_samples: np.ndarray
    output_len: np.ndarray
    prompt_len: np.ndarray
    request_id: np.ndarray
    seg_offsets: np.ndarray
    segment_id: np.ndarray
    segment_len: np.ndarray
    meta: dict[str, Any]
    allow_foreign_outputs: bool

    def __init__(
        self,
        *,
        arrival: Any,
        output_len: Any,
        prompt_len: Any = None,
        max_tokens: Any = None,
        num_samples: Any = None,
        beam: Any = None,
        request_id: Any = None,
        seg_offsets: Any = None,
        segment_id: Any = None,
        segment_len: Any = None,
        meta: Mapping[str, Any] | None = None,
        allow_foreign_outputs: bool = False,
    ) -> None:
        cols: dict[str, np.ndarray] = {"arrival": _column("arrival", arrival)}
        n = len(cols["arrival"])
        cols["output_len"] = _column("output_len", output_len)
        cols["request_id"] = (
            np.arange(n, dtype=np.uint64) if request_id is None else _column("request_id", request_id)
        )
        given_segments = [x is not None for x in (seg_offsets, segment_id, segment_len)]
        if any(given_segments) and not all(given_segments):
            raise InvalidArgumentError("seg_offsets, segment_id and segment_len must be given together")
        if all(given_segments):
            cols["seg_offsets"] = _column("seg_offsets", seg_offsets)
            cols["segment_id"] = _column("segment_id", segment_id)
            cols["segment_len"] = _column("segment_len", segment_len)
            _check_csr(cols["seg_offsets"], cols["segment_id"], cols["segment_len"], n)
            if prompt_len is not None:
                cols["prompt_len"] = _column("prompt_len", prompt_len)
        else:
            if prompt_len is None:
                raise InvalidArgumentError("prompt_len is required when no segments are given")
            cols["prompt_len"] = _column("prompt_len", prompt_len)
            cols["seg_offsets"] = np.arange(n + 1, dtype=np.int64)
            cols["segment_len"] = cols["prompt_len"].copy()
            if len(cols["request_id"]) == n:
                cols["segment_id"] = content_ids(DEFAULT_KEY, cols["request_id"])
            else:
                cols["segment_id"] = np.zeros(n, dtype=np.uint64)  # the length check below reports it
        cols["max_tokens"] = (
            cols["output_len"].copy() if max_tokens is None else _column("max_tokens", max_tokens)
        )
        cols["num_samples"] = (
            np.ones(n, dtype=np.int64) if num_samples is None else _column("num_samples", num_samples)
        )
        cols["beam"] = np.zeros(n, dtype=np.bool_) if beam is None else _column("beam", beam)
        self._init(cols, meta, allow_foreign_outputs, validate=True)

    def _init(
        self,
        cols: dict[str, np.ndarray],
        meta: Mapping[str, Any] | None,
        allow_foreign_outputs: bool,
        *,
        validate: bool,
    ) -> None:
        """Stores owned, correctly typed columns: validates, sorts by arrival, freezes."""
        if meta is not None and not isinstance(meta, Mapping):
            raise InvalidArgumentError(f"meta {_short(meta)} must be a mapping (a dict) or None")
        if validate:
            _validate_rows(cols)
        if "prompt_len" not in cols:
            cols["prompt_len"] = _segment_sums(cols["seg_offsets"], cols["segment_len"])
        arrival = cols["arrival"]
        if len(arrival) > 1 and (np.diff(arrival) < 0).any():
            order = np.argsort(arrival, kind="stable")
            for name in ROW_COLUMNS:
                cols[name] = cols[name][order]
            cols["seg_offsets"], cols["segment_id"], cols["segment_len"] = _gather_csr(
                cols["seg_offsets"], order, cols["segment_id"], cols["segment_len"]
            )
        if validate:
            _check_output_refs(cols, allow_foreign_outputs)
        for name, arr in cols.items():
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "meta", dict(meta) if meta is not None else {})
        object.__setattr__(self, "allow_foreign_outputs", bool(allow_foreign_outputs))

    @classmethod
    def _from_owned(
        cls,
        cols: dict[str, np.ndarray],
        meta: Mapping[str, Any] | None = None,
        *,
        allow_foreign_outputs: bool = False,
        validate: bool = True,
    ) -> Workload:
        """Builds a table from arrays kvsim made itself (right dtypes, not shared): no conversion copies."""
        self = cls.__new__(cls)
        self._init(cols, meta, allow_foreign_outputs, validate=validate)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Workload is immutable: cannot set {name!r}")

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickles as its columns (to process pools and Dask workers): pickle's default for a class with
        `__slots__` would set them through `__setattr__`, which an immutable table refuses."""
        return _unpickle, (self.columns(), self.meta, self.allow_foreign_outputs)

    # ----------------------------------------------------------------------------------------- access

    def __len__(self) -> int:
        return len(self.arrival)

    def __repr__(self) -> str:
        n = len(self)
        if n == 0:
            return "Workload(0 requests)"
        return (
            f"Workload({n} requests over {float(self.arrival[-1] - self.arrival[0]):.6g} s, "
            f"{len(self.segment_id)} segments, mean prompt {float(self.prompt_len.mean()):.6g}, "
            f"mean output {float(self.output_len.mean()):.6g})"
        )

    @property
    def num_segments(self) -> np.ndarray:
        """Segments per request (int64)."""
        return np.diff(self.seg_offsets)

    @property
    def generated_len(self) -> np.ndarray:
        """Tokens each request actually generates: `min(output_len, max_tokens)`."""
        return np.minimum(self.output_len, self.max_tokens)

    def _check_row(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} out of range for {n} requests")
        return i % n if n else i

    def segments(self, i: int) -> list[tuple[int, int]]:
        """The prompt of row `i` as `(segment_id, length)` pairs (the form `kvsim.block_keys` takes)."""
        i = self._check_row(int(i))
        lo, hi = int(self.seg_offsets[i]), int(self.seg_offsets[i + 1])
        return list(zip(self.segment_id[lo:hi].tolist(), self.segment_len[lo:hi].tolist(), strict=True))

    def row(self, i: int) -> dict[str, Any]:
        """Row `i` as a dict of Python values, its segments under `"segments"`."""
        i = self._check_row(int(i))
        out: dict[str, Any] = {name: getattr(self, name)[i].item() for name in ROW_COLUMNS}
        out["segments"] = self.segments(i)
        return out

    def columns(self) -> dict[str, np.ndarray]:
        """Every column by name (the read-only arrays themselves, no copies)."""
        return {
            name: getattr(self, name) for name in (*ROW_COLUMNS, "seg_offsets", "segment_id", "segment_len")
        }

    def __getitem__(self, key: slice | Sequence[int] | np.ndarray) -> Workload:
        """A selection of rows, in table order: a slice, a boolean mask or an array of row numbers.

        Rows are kept in the table's order whatever the order of an index array, so a conversation's
        turns stay after the turns they quote. Quoted requests that are left out make the result accept
        foreign output ids (see the module docstring).

        Raises:
            TypeError: an integer (use `row(i)` or `segments(i)`).
            IndexError: a row number out of range or given twice, or a mask of the wrong length.
        """
        n = len(self)
        if isinstance(key, int | np.integer):
            raise TypeError("Workload[int] is not a table; use row(i) or segments(i)")
        if isinstance(key, slice):
            rows = np.arange(n, dtype=np.int64)[key]
            if key.step is not None and key.step < 0:
                rows = rows[::-1]
        else:
            arr = np.asarray(key)
            if arr.dtype.kind == "b":
                if arr.shape != (n,):
                    raise IndexError(f"boolean mask of shape {arr.shape} for {n} requests")
                rows = np.flatnonzero(arr).astype(np.int64)
            elif arr.size == 0 or arr.dtype.kind in "iu":
                rows = np.sort(arr.astype(np.int64).ravel())
                if rows.size and (rows[0] < -n or rows[-1] >= n):
                    raise IndexError(f"row numbers must lie in [{-n}, {n}), got {rows[0]} .. {rows[-1]}")
                rows = np.sort(rows % n) if n else rows
                if rows.size > 1 and (np.diff(rows) == 0).any():
                    raise IndexError("a row number appears twice")
            else:
                raise TypeError(f"cannot index a Workload with dtype {arr.dtype}")
        cols = {name: getattr(self, name)[rows].copy() for name in ROW_COLUMNS}
        cols["seg_offsets"], cols["segment_id"], cols["segment_len"] = _gather_csr(
            self.seg_offsets, rows, self.segment_id, self.segment_len
        )
        cols = {k: np.ascontiguousarray(v) for k, v in cols.items()}
        meta = dict(self.meta)
        meta["selected_from"] = n
        if rows.size > 1 and rows[-1] - rows[0] + 1 != rows.size:
            # Rows left out inside the selection thin its arrivals: the generator's `arrival_rate` is no
            # longer theirs (a window of consecutive rows keeps it).
            meta.pop("arrival_rate", None)
        # Rows kept in order and already valid: only output references can change (to foreign ones).
        return Workload._from_owned(cols, meta, allow_foreign_outputs=True)._tighten(
            self.allow_foreign_outputs
        )

    def _tighten(self, keep: bool) -> Workload:
        """Drops the `allow_foreign_outputs` flag when no row needs it (keeps it when `keep`)."""
        if not keep and self.allow_foreign_outputs and _count_foreign(self.columns()) == 0:
            object.__setattr__(self, "allow_foreign_outputs", False)
        return self

    def equals(self, other: Workload) -> bool:
        """Whether every column has the same dtype and values (meta is not compared)."""
        if not isinstance(other, Workload) or len(self) != len(other):
            return False
        mine, theirs = self.columns(), other.columns()
        return all(mine[k].dtype == theirs[k].dtype and np.array_equal(mine[k], theirs[k]) for k in mine)

    # ---------------------------------------------------------------------------------- combination

    @classmethod
    def concat(cls, workloads: Iterable[Workload]) -> Workload:
        """One table holding the rows of all `workloads`, sorted by arrival (ties: in the order given).

        Raises:
            InvalidArgumentError: an empty list, or a request id present in two of them.
        """
        parts = list(workloads)
        if not parts:
            raise InvalidArgumentError("concat needs at least one workload")
        for p in parts:
            if not isinstance(p, Workload):
                raise InvalidArgumentError(f"concat takes Workloads, got {type(p).__name__}")
        cols = {name: np.concatenate([getattr(p, name) for p in parts]) for name in ROW_COLUMNS}
        shifts = np.cumsum([0] + [len(p.segment_id) for p in parts[:-1]])
        cols["seg_offsets"] = np.concatenate(
            [np.zeros(1, dtype=np.int64)]
            + [p.seg_offsets[1:] + s for p, s in zip(parts, shifts, strict=True)]
        )
        cols["segment_id"] = np.concatenate([p.segment_id for p in parts])
        cols["segment_len"] = np.concatenate([p.segment_len for p in parts])
        ids = np.sort(cols["request_id"])
        dup = np.flatnonzero(ids[1:] == ids[:-1])
        if dup.size:
            raise InvalidArgumentError(f"request_id {int(ids[dup[0]])} appears in more than one workload")
        meta: dict[str, Any] = {"concat": [p.meta for p in parts]}
        skipped = [p.meta.get("skipped_rows") for p in parts]
        if any(s is not None for s in skipped):
            meta["skipped_rows"] = int(sum(s or 0 for s in skipped))
        foreign = any(p.allow_foreign_outputs for p in parts)
        return cls._from_owned(cols, meta, allow_foreign_outputs=foreign)

    # ------------------------------------------------------------------------------------ polars / IO

    def to_polars(self) -> pl.DataFrame:
        """One row per request: the row columns, then `segment_id` and `segment_len` as list columns."""
        frame = pl.DataFrame({name: getattr(self, name) for name in ROW_COLUMNS})
        n = len(self)
        if n == 0:
            return frame.with_columns(
                pl.Series("segment_id", [], dtype=pl.List(pl.UInt64)),
                pl.Series("segment_len", [], dtype=pl.List(pl.Int64)),
            )
        # Every row has at least one segment, so a group-by over the (sorted) row number rebuilds the
        # lists in row order; polars takes its sorted fast path, about 0.2 s per million rows.
        row = np.repeat(np.arange(n, dtype=np.int64), self.num_segments)
        lists = (
            pl.DataFrame({"_row": row, "segment_id": self.segment_id, "segment_len": self.segment_len})
            .with_columns(pl.col("_row").set_sorted())
            .group_by("_row", maintain_order=True)
            .agg(pl.col("segment_id"), pl.col("segment_len"))
        )
        return frame.with_columns(lists["segment_id"], lists["segment_len"])

    @classmethod
    def from_polars(
        cls,
        frame: pl.DataFrame,
        meta: Mapping[str, Any] | None = None,
        *,
        allow_foreign_outputs: bool = False,
    ) -> Workload:
        """The inverse of `to_polars` (missing optional columns take their defaults).

        Raises:
            InvalidArgumentError: a required column is missing, a list is empty or null, or a row is invalid.
        """
        if not isinstance(frame, pl.DataFrame):
            raise InvalidArgumentError(
                f"frame is a {type(frame).__name__}, not a polars DataFrame (collect a LazyFrame first)"
            )
        missing = [
            c for c in ("arrival", "output_len", "segment_id", "segment_len") if c not in frame.columns
        ]
        if missing:
            raise InvalidArgumentError(
                f"frame lacks {fmt_count(len(missing), 'column')} ({missing}); it has {frame.columns}"
            )
        for c in ("segment_id", "segment_len"):
            dtype = frame[c].dtype
            if not isinstance(dtype, pl.List) or not dtype.inner.is_integer():
                raise InvalidArgumentError(f"column {c} must be lists of integers, got {frame[c].dtype}")
        if frame["segment_id"].null_count() or frame["segment_len"].null_count():
            raise InvalidArgumentError("segment_id and segment_len must not be null")
        counts = frame["segment_id"].list.len().to_numpy().astype(np.int64)
        if not np.array_equal(counts, frame["segment_len"].list.len().to_numpy()):
            raise InvalidArgumentError("segment_id and segment_len lists differ in length")
        if (counts == 0).any():
            i = int(np.argmax(counts == 0))
            raise InvalidArgumentError(f"row {i}: segment list is empty")
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        seg_id = frame["segment_id"].explode()
        seg_len = frame["segment_len"].explode()
        if seg_id.null_count() or seg_len.null_count():
            raise InvalidArgumentError("segment_id and segment_len must not contain nulls")
        kwargs = {c: frame[c].to_numpy() for c in ROW_COLUMNS if c in frame.columns}
        return cls(
            **kwargs,
            seg_offsets=offsets,
            segment_id=seg_id.to_numpy(),
            segment_len=seg_len.to_numpy(),
            meta=meta,
            allow_foreign_outputs=allow_foreign_outputs,
        )

    def save(self, path: str | PathLike[str]) -> None:
        """Writes the table as parquet (`to_polars()`'s layout); `meta` travels in the file's metadata."""
        header = {
            "version": _FORMAT_VERSION,
            "meta": self.meta,
            "allow_foreign_outputs": self.allow_foreign_outputs,
        }
        try:
            text = json.dumps(header)
        except TypeError as exc:
            raise InvalidArgumentError(f"meta is not JSON-serialisable: {exc}") from None
        target = _path_arg(path)
        try:
            self.to_polars().write_parquet(target, metadata={_PARQUET_KEY: text})
        except OSError as exc:
            raise InvalidArgumentError(f"cannot write {target}: {exc.strerror or exc}") from None

    @classmethod
    def load(cls, path: str | PathLike[str]) -> Workload:
        """Reads a table written by `save`, validating every row again.

        Raises:
            InvalidArgumentError: the file was not written by `save`, or holds an invalid row.
        """
        path = _path_arg(path)
        try:
            frame = pl.read_parquet(path)
            header_text = pl.read_parquet_metadata(path).get(_PARQUET_KEY)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise InvalidArgumentError(f"cannot read {path} as parquet: {exc}") from None
        if header_text is None:
            raise InvalidArgumentError(
                f"{path} has no {_PARQUET_KEY!r} metadata: not written by Workload.save"
            )
        try:
            header = json.loads(header_text)
        except ValueError as exc:
            raise InvalidArgumentError(f"{path}: its {_PARQUET_KEY!r} metadata is not JSON ({exc})") from None
        if not isinstance(header, dict):
            raise InvalidArgumentError(f"{path}: its {_PARQUET_KEY!r} metadata is not a JSON object")
        if header.get("version") != _FORMAT_VERSION:
            raise InvalidArgumentError(
                f"{path}: workload format version {header.get('version')} is not supported"
            )
        return cls.from_polars(
            frame, header.get("meta"), allow_foreign_outputs=bool(header.get("allow_foreign_outputs"))
        )

    # ------------------------------------------------------------------------------------ statistics

    def describe(self) -> dict[str, float]:
        """Summary statistics of the table.

        Returns:
            `num_requests`; `duration_s` (last minus first arrival); `arrival_rate` (requests per second,
            `(n-1) / duration`, inf when every request arrives at once, nan below two requests);
            `prompt_len_{mean,p50,p99}`, `output_len_{mean,p50,p99}` (linear-interpolated percentiles);
            `total_prompt_tokens`; `mean_num_samples`; `shared_prompt_fraction`: the fraction of prompt
            tokens in segments whose id occurs more than once in the table's prompts or that quote a
            generated output (an upper bound on what prefix caching can reuse).
        """
        n = len(self)
        out: dict[str, float] = {"num_requests": float(n)}
        if n == 0:
            return out
        duration = float(self.arrival[-1] - self.arrival[0])
        out["duration_s"] = duration
        out["arrival_rate"] = arrival_rate(n, duration)
        for name in ("prompt_len", "output_len"):
            col = getattr(self, name)
            out[f"{name}_mean"] = float(col.mean())
            out[f"{name}_p50"] = float(np.percentile(col, 50))
            out[f"{name}_p99"] = float(np.percentile(col, 99))
        total = int(self.segment_len.sum())
        out["total_prompt_tokens"] = float(total)
        out["mean_num_samples"] = float(self.num_samples.mean())
        _, inverse, counts = np.unique(self.segment_id, return_inverse=True, return_counts=True)
        shared = (counts[inverse] > 1) | (self.segment_id >= _OUTPUT_BIT)
        out["shared_prompt_fraction"] = float(self.segment_len[shared].sum()) / total
        return out


# ------------------------------------------------------------------------------------------ checks


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_INIT_PARAMS = list(inspect.signature(Workload.__init__).parameters.values())[1:]
_INIT_NAMES = [p.name for p in _INIT_PARAMS]
_INIT_REQUIRED = [p.name for p in _INIT_PARAMS if p.default is inspect.Parameter.empty]
setattr(Workload, "__init__", keyword_check("Workload", _INIT_NAMES, 0, _INIT_REQUIRED)(Workload.__init__))  # noqa: B010


def _unpickle(cols: dict[str, np.ndarray], meta: dict[str, Any], allow_foreign_outputs: bool) -> Workload:
    """A pickled table back (`Workload.__reduce__`): its columns were valid and sorted when pickled."""
    return Workload._from_owned(dict(cols), meta, allow_foreign_outputs=allow_foreign_outputs, validate=False)


def _segment_sums(offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    cumulative = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=cumulative[1:])
    return cumulative[offsets[1:]] - cumulative[offsets[:-1]]


def _check_csr(offsets: np.ndarray, seg_id: np.ndarray, seg_len: np.ndarray, n: int) -> None:
    if len(offsets) != n + 1:
        raise InvalidArgumentError(f"seg_offsets has length {len(offsets)}, expected {n + 1} (rows + 1)")
    if len(seg_id) != len(seg_len):
        raise InvalidArgumentError(f"segment_id has {len(seg_id)} entries but segment_len has {len(seg_len)}")
    if offsets[0] != 0:
        raise InvalidArgumentError(f"seg_offsets[0] = {offsets[0]} must be 0")
    if offsets[-1] != len(seg_id):
        raise InvalidArgumentError(
            f"seg_offsets[-1] = {offsets[-1]} must equal the segment count {len(seg_id)}"
        )
    counts = np.diff(offsets)
    if (counts < 1).any():
        i = int(np.argmax(counts < 1))
        raise InvalidArgumentError(
            f"row {i}: has {counts[i]} segments (seg_offsets must increase by at least 1)"
        )
    if (seg_len < 1).any():
        k = int(np.argmax(seg_len < 1))
        row = int(np.searchsorted(offsets, k, side="right")) - 1
        raise InvalidArgumentError(
            f"row {row}: segment {k - int(offsets[row])} has length {seg_len[k]}, must be >= 1"
        )


def _validate_rows(cols: dict[str, np.ndarray]) -> None:
    """Every per-row rule except output references (those depend on the sorted order)."""
    n = len(cols["arrival"])
    ids = cols["request_id"]
    for name in (
        "output_len",
        "request_id",
        "max_tokens",
        "num_samples",
        "beam",
        *(["prompt_len"] if "prompt_len" in cols else []),
    ):
        if len(cols[name]) != n:
            raise InvalidArgumentError(f"{name} has {len(cols[name])} rows but arrival has {n}")
    arrival = cols["arrival"]
    bad = ~np.isfinite(arrival) | (arrival < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise _row_error(ids, i, f"arrival {arrival[i]} must be finite and >= 0")
    for name in ("prompt_len", "output_len", "max_tokens", "num_samples"):
        if name in cols and (cols[name] < 1).any():
            i = int(np.argmax(cols[name] < 1))
            raise _row_error(ids, i, f"{name} {cols[name][i]} must be at least 1")
    if (cols["num_samples"] > MAX_SAMPLES).any():
        i = int(np.argmax(cols["num_samples"] > MAX_SAMPLES))
        raise _row_error(ids, i, f"num_samples {cols['num_samples'][i]} exceeds {MAX_SAMPLES}")
    if (ids > np.uint64(MAX_REQUEST_ID)).any():
        i = int(np.argmax(ids > np.uint64(MAX_REQUEST_ID)))
        raise _row_error(ids, i, f"request_id exceeds {MAX_REQUEST_ID} (the largest an output id can name)")
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    dup = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
    if dup.size:
        i, j = int(order[dup[0]]), int(order[dup[0] + 1])
        raise InvalidArgumentError(f"request_id {int(sorted_ids[dup[0]])} appears in rows {i} and {j}")
    sums = _segment_sums(cols["seg_offsets"], cols["segment_len"])
    if "prompt_len" in cols and not np.array_equal(sums, cols["prompt_len"]):
        i = int(np.argmax(sums != cols["prompt_len"]))
        raise _row_error(
            ids, i, f"segments sum to {sums[i]} tokens but prompt_len is {cols['prompt_len'][i]}"
        )


def _output_refs(cols: dict[str, np.ndarray]) -> tuple[np.ndarray, ...] | None:
    """For each output-id segment: (its row, its flat index, the quoted row or -1 if absent, sample)."""
    seg_id = cols["segment_id"]
    flat = np.flatnonzero(seg_id >= _OUTPUT_BIT)
    if flat.size == 0:
        return None
    row = np.searchsorted(cols["seg_offsets"], flat, side="right") - 1
    sid = seg_id[flat]
    ref_id = (sid >> np.uint64(16)) & np.uint64(MAX_REQUEST_ID)
    sample = (sid & np.uint64(0xFFFF)).astype(np.int64)
    ids = cols["request_id"]
    order = np.argsort(ids, kind="stable")
    pos = np.minimum(np.searchsorted(ids[order], ref_id), len(ids) - 1)
    found = ids[order[pos]] == ref_id
    ref_row = np.where(found, order[pos], -1)
    return row, flat, ref_row, sample


def _count_foreign(cols: dict[str, np.ndarray]) -> int:
    refs = _output_refs(cols)
    return 0 if refs is None else int((refs[2] < 0).sum())


def _check_output_refs(cols: dict[str, np.ndarray], allow_foreign: bool) -> int:
    """Checks output-id segments against the sorted table; returns how many name absent requests."""
    refs = _output_refs(cols)
    if refs is None:
        return 0
    row, flat, ref_row, sample = refs
    ids = cols["request_id"]
    seg_id = cols["segment_id"]
    absent = ref_row < 0
    if absent.any() and not allow_foreign:
        k = int(np.argmax(absent))
        rid = int((seg_id[flat[k]] >> np.uint64(16)) & np.uint64(MAX_REQUEST_ID))
        raise _row_error(
            ids,
            int(row[k]),
            f"segment id {int(seg_id[flat[k]]):#x} is >= 2**63 but is not an output id of a request in the "
            f"table (it names request {rid}); prompt content ids must be < 2**63",
        )
    present = ~absent
    later = present & (ref_row >= row)
    if later.any():
        k = int(np.argmax(later))
        raise _row_error(
            ids,
            int(row[k]),
            f"quotes the output of request {int(ids[ref_row[k]])} at row {int(ref_row[k])}, "
            "which does not come earlier in the table",
        )
    safe_ref = np.where(present, ref_row, 0)
    no_sample = present & (sample >= cols["num_samples"][safe_ref])
    if no_sample.any():
        k = int(np.argmax(no_sample))
        raise _row_error(
            ids,
            int(row[k]),
            f"quotes sample {int(sample[k])} of request {int(ids[ref_row[k]])}, which has "
            f"{fmt_count(int(cols['num_samples'][ref_row[k]]), 'sample')}",
        )
    generated = np.minimum(cols["output_len"], cols["max_tokens"])[safe_ref]
    too_long = present & (cols["segment_len"][flat] > generated)
    if too_long.any():
        k = int(np.argmax(too_long))
        raise _row_error(
            ids,
            int(row[k]),
            f"quotes {int(cols['segment_len'][flat[k]])} output tokens of request {int(ids[ref_row[k]])}, "
            f"which generates only {int(generated[k])}",
        )
    return int(absent.sum())


def _path_arg(path: Any) -> Path:
    """`path` as a `Path`: a str or an `os.PathLike`, nothing else (None, a number)."""
    if not isinstance(path, str | PathLike):
        raise InvalidArgumentError(f"path {path!r} must be a file path (str or os.PathLike)")
    return Path(path)
