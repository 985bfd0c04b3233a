"""`kvsim.simulate_stream`: a workload consumed in chunks, rows produced as they complete (DESIGN.md
§Streaming), so memory holds the requests in flight, not the whole workload.

Chunks are `Workload`s in arrival order (each chunk's first arrival no earlier than the previous chunk's
last). Each is prepared and fed to the engine, which steps as far as the input fed allows (a step that a
later chunk could change waits for it), then hands back the rows that are done. The rows of a chunk are
built once all of them are done (`request_rows`, as a whole run builds them), go to the sink (kept in
memory, written to parquet files, or dropped) and into the summary's statistics (`RowStats`, exact and
chunk-independent). Both backends stream; a chunked run gives the same rows and summary as a whole one.
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kvsim.arguments import int_arg
from kvsim.engine.engine_input import EngineInput, prepare
from kvsim.engine.simulate import (
    BACKENDS,
    RowStats,
    SimResult,
    check_one_replica,
    request_rows,
    simulate,
    summary_from,
)
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import SimConfig
from kvsim.model.segments import OUTPUT_BIT
from kvsim.reference.engine import EngineOutput
from kvsim.workloads import Workload, synthetic
from kvsim.workloads.generators import _positive

DEFAULT_CHUNK = 1 << 20
_COLUMNS = (
    "first_scheduled",
    "first_token",
    "finish",
    "generated",
    "num_preemptions",
    "num_swaps",
    "cached_tokens",
    "recomputed_tokens",
    "cpu_hit_tokens",
    "load_wait_ps",
    "status",
    "reject_reason",
)


class _OneWorkload(Iterator[Workload]):
    """`chunks`' iterator: the rows of one `Workload`, whose request ids are unique already, so
    `simulate_stream` need not check that they increase from chunk to chunk."""

    unique_ids = True

    def __init__(self, parts: Iterator[Workload]) -> None:
        self._parts = parts

    def __next__(self) -> Workload:
        return next(self._parts)


def chunks(workload: Workload, size: int = DEFAULT_CHUNK) -> Iterator[Workload]:
    """`workload`'s rows in chunks of `size` requests (a trace loaded whole, for `simulate_stream`)."""
    size = int_arg("chunk size", size)
    if size < 1:
        raise InvalidArgumentError(f"chunk size {size} must be at least 1")
    return _OneWorkload(workload[lo : lo + size] for lo in range(0, len(workload), size))


def synthetic_chunks(
    num_requests: int, chunk_size: int = DEFAULT_CHUNK, *, seed: int = 0, **kwargs: Any
) -> Iterator[Workload]:
    """A synthetic workload of `num_requests` made and consumed `chunk_size` requests at a time.

    Chunk `i` is `synthetic(chunk_size, seed=<seed, i>, **kwargs)` with request ids counting on and its
    arrivals shifted to start one inter-arrival gap (drawn as the arrival process draws them) after the
    previous chunk's last arrival. A chunk's conversations (`turns`) stay within it. The result is the same
    kind of workload as `synthetic(num_requests, ...)`, not the same draws.

    Raises:
        InvalidArgumentError: at the call, before any chunk: `num_requests`, `chunk_size` and
            `first_request_id` that are not integers (or out of range), and `arrival_rate` (unless
            `arrivals="all-at-once"`, which reads none) or `burstiness` that is not a finite number > 0,
            as `synthetic` checks them (the gaps between chunks are drawn from them). The other options
            are `synthetic`'s, checked as each chunk is made.
    """
    n = int_arg("num_requests", num_requests)
    if n < 0:
        raise InvalidArgumentError(f"num_requests {num_requests} must not be negative")
    chunk_size = int_arg("chunk_size", chunk_size)
    if chunk_size < 1:
        raise InvalidArgumentError(f"chunk_size {chunk_size} must be at least 1")
    first_id = int_arg("first_request_id", kwargs.pop("first_request_id", 0))
    arrivals = kwargs.get("arrivals", "poisson")
    rate = 1.0
    if arrivals != "all-at-once":
        rate = _positive("arrival_rate", kwargs.get("arrival_rate", 1.0))
    burst = _positive("burstiness", kwargs.get("burstiness", 1.0))
    return _synthetic_chunks(n, chunk_size, seed, first_id, arrivals, rate, burst, kwargs)


def _synthetic_chunks(
    n: int,
    chunk_size: int,
    seed: int,
    first_id: int,
    arrivals: str,
    rate: float,
    burst: float,
    kwargs: dict[str, Any],
) -> Iterator[Workload]:
    """`synthetic_chunks`' chunks, its arguments checked."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1 << 32]))
    offset = 0.0
    for i, lo in enumerate(range(0, n, chunk_size)):
        chunk_seed = int(np.random.SeedSequence([seed, i]).generate_state(1)[0])
        w = synthetic(min(chunk_size, n - lo), seed=chunk_seed, first_request_id=first_id + lo, **kwargs)
        cols = dict(w.columns())
        cols["arrival"] = w.arrival + offset
        meta = dict(w.meta, chunk=i, chunk_size=chunk_size, num_requests_total=n)
        shifted = Workload._from_owned(
            cols, meta, allow_foreign_outputs=w.allow_foreign_outputs, validate=False
        )
        if arrivals == "all-at-once":
            gap = 0.0
        elif arrivals == "constant":
            gap = 1.0 / rate
        elif arrivals == "gamma":
            shape = 1.0 / (burst * burst)
            gap = float(rng.gamma(shape, 1.0 / (rate * shape)))
        else:
            gap = float(rng.exponential(1.0 / rate))
        offset = float(shifted.arrival[-1]) + gap
        yield shifted


class _Rust:
    def __init__(self, config: SimConfig, independent: bool) -> None:
        from kvsim import _core
        from kvsim.engine.rust_engine import config_kwargs

        self.core = _core.Stream(
            **config_kwargs(config), forks=config.sampling == "fork-cow", independent=independent
        )

    def feed(self, inp: EngineInput) -> None:
        from kvsim.engine.rust_engine import input_kwargs

        self.core.feed(**input_kwargs(inp))

    def advance(self, final: bool) -> None:
        self.core.advance(final)

    def take_done(self) -> dict[str, np.ndarray]:
        return dict(self.core.take_done())

    def counters(self) -> dict[str, int]:
        return dict(self.core.counters())


class _Reference:
    def __init__(self, config: SimConfig, first: EngineInput) -> None:
        from kvsim.reference.engine import Engine

        self.engine = Engine(first, config)

    def feed(self, inp: EngineInput) -> None:
        self.engine.feed(inp)

    def advance(self, final: bool) -> None:
        self.engine.advance(final)

    def take_done(self) -> dict[str, np.ndarray]:
        return self.engine.take_done()

    def counters(self) -> dict[str, int]:
        return dict(self.engine.c)


class _Sink:
    """Where finished rows go: `"memory"` (kept, one frame at the end), `"none"`, or a directory of
    parquet files `part-000000.parquet`, ... (read them with `pl.scan_parquet(dir / "*.parquet")`)."""

    def __init__(self, rows: str | os.PathLike[str]) -> None:
        self.frames: list[pl.DataFrame] = []
        self.path: Path | None = None
        self.parts = 0
        self.created: list[Path] = []
        if isinstance(rows, str) and rows in ("memory", "none"):
            self.mode = rows
            return
        if not isinstance(rows, str | os.PathLike):
            raise InvalidArgumentError(f"rows {rows!r} is not 'memory', 'none' or a directory path")
        if isinstance(rows, str) and rows.strip().lower() in ("memory", "none"):
            # `rows="Memory"` is a typo, not a folder to create: a str folder of that name is refused
            # (a pathlib.Path of it is still a folder)
            raise InvalidArgumentError(
                f"rows {rows!r} is not 'memory', 'none' or a directory path (did you mean "
                f"{rows.strip().lower()!r}? a folder of that name: pass pathlib.Path({rows!r}))"
            )
        self.mode = "parquet"
        path = Path(rows)
        if path.exists() and not path.is_dir():
            raise InvalidArgumentError(f"rows {str(path)!r} exists and is not a directory")
        if path.is_dir() and any(path.iterdir()):
            raise InvalidArgumentError(f"rows directory {str(path)!r} is not empty")
        # (the folders this call makes, deepest first: `discard` removes them again)
        self.created = [p for p in (path, *path.parents) if not p.exists()]
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / ".kvsim-write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise InvalidArgumentError(f"rows directory {str(path)!r} is not writable: {exc}") from None
        self.path = path

    def add(self, frame: pl.DataFrame) -> None:
        if self.mode == "memory":
            self.frames.append(frame)
        elif self.mode == "parquet":
            assert self.path is not None
            frame.write_parquet(self.path / f"part-{self.parts:06d}.parquet")
            self.parts += 1

    def discard(self) -> None:
        """What it wrote removed: its part files, and the folders it made if they are empty again."""
        self.frames.clear()
        if self.path is None:
            return
        for i in range(self.parts):
            (self.path / f"part-{i:06d}.parquet").unlink(missing_ok=True)
        for d in self.created:
            try:
                d.rmdir()
            except OSError:
                break  # (not empty: something else was put there)

    def result(self, empty: pl.DataFrame) -> pl.DataFrame | None:
        if self.mode != "memory":
            return None
        return pl.concat(self.frames, rechunk=False) if self.frames else empty


def simulate_stream(
    source: Workload | Iterable[Workload],
    config: SimConfig,
    *,
    backend: str = "rust",
    rows: str | os.PathLike[str] = "none",
    chunk_size: int = DEFAULT_CHUNK,
    spill_dir: str | os.PathLike[str] | None = None,
    independent_chunks: bool = False,
) -> SimResult:
    """Simulates a workload given as chunks, keeping only the requests in flight (DESIGN.md §Streaming).

    Args:
        source: an iterable of `Workload` chunks in arrival order (`synthetic_chunks`, `chunks(w)`), or
            one `Workload` (cut into chunks of `chunk_size`).
        config: a `kvsim.SimConfig`.
        backend: `"rust"` or `"reference"`.
        rows: `"none"` (only the summary), `"memory"` (`.requests` holds every row, as `simulate`), or a
            directory to write the rows into as parquet files, one per chunk, in request order (then
            `.rows_path` names it).
        chunk_size: requests per chunk when `source` is one `Workload`.
        spill_dir: where latency values beyond 2**24 per metric are spilled for the exact percentiles
            (default: the system's temporary directory; about 32 bytes per request).
        independent_chunks: a promise that no prompt shares content with, or quotes an output of, a
            request of another chunk (true of `synthetic_chunks`); the Rust engine then skips hashing
            content private to a request, as a whole run does (about 2.5x faster on ShareGPT-like
            prompts). If the first chunk quotes no output, no later one may.

    Returns:
        A `SimResult` whose summary equals `simulate`'s on the whole workload; `.raw` holds the counters
        only (no per-sequence columns), no time series or event log.

    Raises:
        InvalidArgumentError: a bad source, backend, config, rows target, chunk_size, spill_dir or
            independent_chunks (checked before anything is created), a bad chunk, chunks out of
            arrival order, or given chunks whose request ids do not increase from chunk to chunk (the
            rows written before it, and the folders made, are removed).
    """
    parts = _parts(source)
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"backend {backend!r} is not one of {', '.join(map(repr, BACKENDS))}")
    if not isinstance(config, SimConfig):
        raise InvalidArgumentError(f"config {config!r} is not a kvsim.SimConfig")
    check_one_replica(config, "kvsim.simulate_stream")
    size = int_arg("chunk_size", chunk_size)
    if size < 1:
        raise InvalidArgumentError(f"chunk_size {size} must be at least 1")
    _check_spill_dir(spill_dir)
    if not isinstance(independent_chunks, bool | np.bool_):
        raise InvalidArgumentError(f"independent_chunks {independent_chunks!r} must be True or False")
    independent_chunks = bool(independent_chunks)
    sink = _Sink(rows)  # last: a rows directory is created only for a call whose arguments are good
    # (one Workload's ids, or `chunks`' of one, are unique already)
    given_chunks = not (isinstance(source, Workload) or getattr(source, "unique_ids", False))
    if isinstance(source, Workload):
        parts = chunks(source, size)
    try:
        return _stream(parts, config, backend, spill_dir, independent_chunks, sink, given_chunks)
    except BaseException:
        sink.discard()  # a call that raises (a bad chunk, Ctrl-C) leaves no rows behind
        raise


def _stream(
    parts: Iterator[Workload],
    config: SimConfig,
    backend: str,
    spill_dir: str | os.PathLike[str] | None,
    independent_chunks: bool,
    sink: _Sink,
    check_ids: bool = True,
) -> SimResult:
    """`simulate_stream`'s run, its arguments checked; `check_ids`: chunks given by the caller, whose
    request ids must increase from chunk to chunk (unique across the stream without keeping every id:
    a request's default content is named by its id, so a repeated id would hit another's blocks)."""
    stats = RowStats(spill_dir=spill_dir)
    engine: _Rust | _Reference | None = None
    pending: deque[tuple[Workload, EngineInput]] = deque()  # chunks whose rows are not all done
    done: list[dict[str, np.ndarray]] = []  # rows done, not yet given to their chunk
    held = 0
    last = -np.inf
    top: int | None = None  # the largest request id of the chunks so far
    quoted = False

    def collect() -> None:
        nonlocal held
        assert engine is not None
        cols = engine.take_done()
        if len(cols["status"]):
            done.append(cols)
            held += len(cols["status"])
        while pending and held >= len(pending[0][1]):
            w, inp = pending.popleft()
            m = len(inp)
            merged = {k: np.concatenate([d[k] for d in done]) for k in _COLUMNS}
            rest = {k: v[m:] for k, v in merged.items()}
            done[:] = [rest] if len(rest["status"]) else []
            held -= m
            frame = request_rows(
                w, inp, _raw({k: v[:m] for k, v in merged.items()}, {}), tier=config.kv_offloading_chunks > 0
            )
            stats.add(frame)
            sink.add(frame)

    for w in parts:
        if not isinstance(w, Workload):
            raise InvalidArgumentError(f"a chunk is a {type(w).__name__}, not a kvsim.Workload")
        if not len(w):
            continue
        if float(w.arrival[0]) < last:
            raise InvalidArgumentError(
                f"a chunk starts at arrival {float(w.arrival[0])!r} s, before the previous chunk's last "
                f"arrival {last!r} s: chunks must come in arrival order"
            )
        last = float(w.arrival[-1])
        if check_ids:
            ids = w.request_id
            lo = int(ids.min())
            if top is not None and lo <= top:
                raise InvalidArgumentError(
                    f"a chunk's request_id {lo} is not above the earlier chunks' largest, {top}: request ids "
                    "must increase from chunk to chunk (unique across the stream; a repeated id would share "
                    "another request's default content)"
                )
            top = int(ids.max())
        quotes = bool((w.segment_id >= np.uint64(OUTPUT_BIT)).any())
        if independent_chunks and engine is not None and quotes and not quoted:
            raise InvalidArgumentError(
                "a chunk quotes a generated output but the first chunk did not: with independent chunks "
                "the first one must show whether outputs are quoted (or stream without independent_chunks)"
            )
        quoted = quoted or (engine is None and quotes)
        inp = prepare(w, config)
        if engine is None:
            engine = _Rust(config, independent_chunks) if backend == "rust" else _Reference(config, inp)
        engine.feed(inp)
        pending.append((w, inp))
        del w, inp
        engine.advance(False)
        collect()
    if engine is None:  # no request at all: the whole run of an empty workload
        nil = simulate(Workload(arrival=[], output_len=[], prompt_len=[]), config, backend=backend)
        assert nil.requests is not None
        return SimResult(requests=sink.result(nil.requests), summary=nil.summary, config=config, raw=nil.raw)
    engine.advance(True)
    collect()
    assert not pending, "every row is done at the end of the run"
    counters = engine.counters()
    summary = summary_from(stats, counters, config)
    raw = _raw({k: np.zeros(0, dtype=np.int64) for k in _COLUMNS}, counters)
    return SimResult(
        requests=sink.result(pl.DataFrame()), summary=summary, config=config, raw=raw, rows_path=sink.path
    )


def _parts(source: Any) -> Iterator[Workload]:
    """`source`'s chunks (a `Workload`'s are cut once `chunk_size` is checked: an empty iterator here)."""
    if isinstance(source, Workload):
        return iter(())
    if not isinstance(source, str | bytes):  # a path's characters are not chunks
        try:
            return iter(source)
        except TypeError:
            pass
    raise InvalidArgumentError(f"source {source!r} is not a kvsim.Workload or an iterable of Workload chunks")


def _check_spill_dir(spill_dir: Any) -> None:
    """`spill_dir` as the spill file will use it (`tempfile.TemporaryFile(dir=...)`, possibly hours in):
    None, or an existing directory a file can be made in. Checked by making an unnamed temporary file
    there (gone at once), so a bad one fails at the call, not after 2**24 latency values."""
    if spill_dir is None:
        return
    if not isinstance(spill_dir, str | os.PathLike):
        raise InvalidArgumentError(f"spill_dir {spill_dir!r} must be None or a directory path")
    path = os.fspath(spill_dir)
    if not isinstance(path, str):
        raise InvalidArgumentError(f"spill_dir {spill_dir!r} must be None or a directory path")
    if not os.path.isdir(path):
        why = "is not a directory" if os.path.exists(path) else "does not exist"
        raise InvalidArgumentError(f"spill_dir {path!r} {why}")
    try:
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        raise InvalidArgumentError(f"spill_dir {path!r} is not writable: {exc}") from None


def _raw(cols: dict[str, np.ndarray], counters: dict[str, int]) -> EngineOutput:
    return EngineOutput(
        first_scheduled=cols["first_scheduled"],
        first_token=cols["first_token"],
        finish=cols["finish"],
        generated=cols["generated"],
        num_preemptions=cols["num_preemptions"],
        num_swaps=cols["num_swaps"],
        cached_tokens=cols["cached_tokens"],
        recomputed_tokens=cols["recomputed_tokens"],
        cpu_hit_tokens=cols["cpu_hit_tokens"],
        load_wait_ps=cols["load_wait_ps"],
        status=cols["status"],
        reject_reason=cols["reject_reason"],
        counters=counters,
    )


__all__ = ["DEFAULT_CHUNK", "chunks", "simulate_stream", "synthetic_chunks"]
