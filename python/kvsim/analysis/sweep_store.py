"""A sweep's rows on disk: `check_output` (can the parquet file be written, before any point runs),
`ResultStore` (rows already there, for resume, and new rows flushed as parts, one file at the end) and
`rows_frame` (rows as one polars frame).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from kvsim.errors import InvalidArgumentError

# The column that identifies a file as a sweep's: every row's point id, which resume reads.
SWEEP_COLUMNS = ("point_id",)


def check_output(path: str | os.PathLike[str]) -> Path:
    """Checks, before any point runs, that a sweep can write its parquet file at `path`: not a folder,
    not an existing file that is not parquet or not a sweep's (without `SWEEP_COLUMNS`: another table,
    which resume would append to), and in a folder that exists or can be made and is writable.

    Returns:
        The path.

    Raises:
        InvalidArgumentError: why it cannot be written (the message starts with the path).
    """
    import tempfile

    p = Path(path)
    if p.is_dir():
        raise InvalidArgumentError(f"{p} is a folder, not a parquet file")
    if p.exists():
        try:
            schema = pl.read_parquet_schema(p)
        except Exception as exc:  # polars raises several kinds for a file that is not parquet
            raise InvalidArgumentError(
                f"{p} exists and is not a parquet file ({type(exc).__name__}); move it or choose another path"
            ) from None
        missing = [c for c in SWEEP_COLUMNS if c not in schema]
        if schema and missing:  # another table: resume would append to it, --no-resume delete it
            raise InvalidArgumentError(
                f"{p} exists and is not a sweep's parquet file (no {', '.join(missing)} column); "
                "move it or choose another path"
            )
    for parent in [p.parent, *p.parent.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise InvalidArgumentError(f"{p}: {parent} is a file, not a folder")
            break
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=f".{p.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise InvalidArgumentError(f"{p}: cannot write in {p.parent} ({exc.strerror or exc})") from None
    return p


class ResultStore:
    """The sweep's parquet file: rows already there (for resume) and new rows.

    While a sweep runs, each flush (at most every `flush_every_s` seconds) writes only the rows that
    arrived since the last one, as one part file in `<path>.parts/`, so a sweep's writing is linear in
    its rows; `finish()` writes the file itself as one table (old rows, parts and new rows, to a temporary
    name, then renamed) and removes the parts. An interrupted sweep leaves its parts: the next one reads
    the file and the parts (`polars.scan_parquet`), and skips every point found, so resume is exact and
    an interruption loses at most `flush_every_s` of work. A row is identified by `point_id`; a point
    found twice (the file written, the parts not yet removed) is kept once.

    Raises:
        InvalidArgumentError: `path` cannot be written (see `check_output`), or holds what is not parquet.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None, *, resume: bool = True, flush_every_s: float = 10.0
    ):
        self.path = check_output(path) if path is not None else None
        self.old = pl.DataFrame()
        self.new: list[dict[str, Any]] = []
        self.flushed = 0  # rows of `new` already in a part file
        self._dropped = False  # old rows dropped (`drop`): the file is written again even with no new row
        self._next_part = 0
        self.flush_every_s = flush_every_s
        self._last_flush = time.monotonic()
        if self.path is None:
            return
        if not resume:
            self.path.unlink(missing_ok=True)
            shutil.rmtree(self.parts_dir, ignore_errors=True)
            return
        frames = []
        if self.path.exists():
            frames.append(pl.scan_parquet(self.path))
        parts = sorted(self.parts_dir.glob("part-*.parquet")) if self.parts_dir.is_dir() else []
        if parts:
            frames.append(pl.scan_parquet(parts))
        if frames:
            try:
                old = pl.concat(frames, how="diagonal_relaxed").collect()
            except Exception as exc:  # a damaged part or file: say which store, not polars' internals
                raise InvalidArgumentError(
                    f"{self.path}: cannot read the rows already there ({type(exc).__name__}: {exc})"
                ) from None
            if "point_id" in old.columns:
                old = old.unique(subset="point_id", keep="first", maintain_order=True)
            self.old = old
        self._next_part = 1 + max((int(p.stem.split("-")[1]) for p in parts), default=-1)

    @property
    def parts_dir(self) -> Path:
        assert self.path is not None
        return self.path.with_name(self.path.name + ".parts")

    @property
    def done(self) -> set[str]:
        ids = set(self.old["point_id"].to_list()) if "point_id" in self.old.columns else set()
        return ids | {r["point_id"] for r in self.new}

    def drop(self, ids: set[str]) -> None:
        """Removes the rows already there with one of `ids` (rows written under a knob's old meaning,
        `kvsim.analysis.sweep_revisions`); `finish()` then writes the file without them."""
        if not ids or "point_id" not in self.old.columns:
            return
        kept = self.old.filter(~pl.col("point_id").is_in(sorted(ids)))
        if kept.height != self.old.height:
            self.old = kept
            self._dropped = True

    def add(self, row: dict[str, Any]) -> None:
        self.new.append(row)
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def frame(self) -> pl.DataFrame:
        new = rows_frame(self.new)
        if self.old.height == 0:
            return new
        if new.height == 0:
            return self.old
        return pl.concat([self.old, new], how="diagonal_relaxed")

    def flush(self) -> None:
        """Writes the rows added since the last flush as one part file (nothing if there are none). A
        part that cannot be written stays in memory and goes into the next part or the final file."""
        self._last_flush = time.monotonic()
        if self.path is None or self.flushed == len(self.new):
            return
        part = self.parts_dir / f"part-{self._next_part:06d}.parquet"
        try:
            self.parts_dir.mkdir(parents=True, exist_ok=True)
            tmp = part.with_name(part.name + ".tmp")
            rows_frame(self.new[self.flushed :]).write_parquet(tmp)
            os.replace(tmp, part)
        except OSError:
            return  # kept in memory; finish() says where the rows went if the file cannot be written either
        self._next_part += 1
        self.flushed = len(self.new)

    def finish(self) -> None:
        """Writes the file as one table and removes the parts.

        Raises:
            InvalidArgumentError: the file cannot be written; the message says where the rows were kept
                instead (a parquet file in the temporary folder).
        """
        if self.path is None or (not self.new and not self.parts_dir.is_dir() and not self._dropped):
            return
        frame = self.frame()
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            frame.write_parquet(tmp)
            os.replace(tmp, self.path)
        except OSError as exc:
            import tempfile

            try:
                fd, kept = tempfile.mkstemp(prefix=f"kvsim-{self.path.stem}-", suffix=".parquet")
                os.close(fd)
                frame.write_parquet(kept)
            except OSError as again:
                where = (
                    f"; the rows flushed earlier are in {self.parts_dir}" if self.parts_dir.is_dir() else ""
                )
                raise InvalidArgumentError(
                    f"cannot write {self.path} ({exc.strerror or exc}) nor a copy in the temporary folder "
                    f"({again.strerror or again}){where}"
                ) from None
            raise InvalidArgumentError(
                f"cannot write {self.path} ({exc.strerror or exc}); its {frame.height} rows are in {kept}"
            ) from None
        shutil.rmtree(self.parts_dir, ignore_errors=True)


def rows_frame(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """Rows (dicts, possibly with different keys and nulls) as one frame."""
    if not rows:
        return pl.DataFrame()
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    cols = {k: [r.get(k) for r in rows] for k in keys}
    series = []
    for k, values in cols.items():
        kinds = {type(v) for v in values if v is not None}
        if kinds and kinds <= {int, float} and float in kinds:
            values = [None if v is None else float(v) for v in values]
        elif len(kinds) > 1:
            values = [None if v is None else str(v) for v in values]
        series.append(pl.Series(k, values, strict=False))
    return pl.DataFrame(series)


__all__ = ["ResultStore", "check_output", "rows_frame"]
