"""Where a sweep's points run: a pool of threads (the Rust engine releases the GIL), of spawned processes,
or a Dask cluster (a LocalCluster, or a scheduler's address), behind one `executor_session` that yields
`map(task, items)`; `kvsim.analysis.sweep.execute` runs sweep points on it, `kvsim.plan` its rounds of
probes. And the progress bar both show.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kvsim.errors import InvalidArgumentError

EXECUTORS = ("threads", "processes", "dask")


def progress_bar(total: int, desc: str, enabled: bool) -> Any:
    """A tqdm bar on stderr, or None: only when `enabled` and stderr is a terminal (in a log, a bar's
    carriage returns would pile up into one long line)."""
    if not enabled or not total or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="pt", dynamic_ncols=True, smoothing=0.1)


def _local_map(pool: cf.Executor, task: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
    futures = [pool.submit(task, item) for item in items]
    try:
        for fut in cf.as_completed(futures):
            yield fut.result()
    finally:
        for fut in futures:
            fut.cancel()


def _dask_map(client: Any, task: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Any]:
    from distributed import as_completed

    for fut in as_completed(client.map(task, list(items), pure=False)):
        yield fut.result()


def check_executor(executor: str, workers: int | None, scheduler: str | None) -> int:
    """The worker count (default: the CPU count) once the executor options are valid.

    Raises:
        InvalidArgumentError: an unknown executor, workers < 1, or a scheduler without `dask`.
    """
    if executor not in EXECUTORS:
        raise InvalidArgumentError(f"executor {executor!r} is not one of {', '.join(EXECUTORS)}")
    count = check_workers(workers)
    if scheduler and executor != "dask":
        raise InvalidArgumentError("--scheduler needs --executor dask")
    return count


def check_workers(workers: int | None) -> int:
    """The worker count: `workers`, or the CPU count when it is None.

    Raises:
        InvalidArgumentError: `workers` is not an integer of at least 1 (0 is not "the CPU count").
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InvalidArgumentError(f"workers {workers!r} must be at least 1")
    return workers or os.cpu_count() or 1


def _check_scheduler(address: str) -> None:
    """Refuses a Dask scheduler address that is no address or (TCP) does not answer, before a `Client` is
    built: a Client whose start failed complains again from its finaliser at the interpreter's exit."""
    import socket

    import dask
    from dask.utils import parse_timedelta
    from distributed.comm import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    try:
        proto, loc = parse_address(address)
        get_backend(proto)
        if proto in ("tcp", "tls"):
            host, port = parse_host_port(loc)
            timeout = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="s")
            socket.create_connection((host, port), timeout=timeout).close()
    except (OSError, ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"scheduler {address!r}: cannot connect ({exc})") from None


@contextlib.contextmanager
def executor_session(
    executor: str = "threads",
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    dask_processes: bool = False,
) -> Iterator[Callable[[Callable[[Any], Any], Sequence[Any]], Iterator[Any]]]:
    """One pool of workers for several batches of tasks: yields `map(task, items)`, which runs
    `task(item)` for every item in parallel and yields the results in completion order. What `execute`
    runs sweep points on, and `kvsim.plan` its rounds of probes (one pool for all rounds). A task and its
    items must pickle for `processes` and `dask` (module-level functions, plain data).

    Args:
        executor: `threads` (the Rust engine releases the GIL), `processes` (spawned) or `dask`.
        workers: parallel workers (default: the CPU count).
        scheduler: a Dask scheduler address (`tcp://host:port`); without it `dask` starts a LocalCluster
            on 127.0.0.1.
        dask_processes: LocalCluster workers as processes (True) or threads in this process (False).

    Raises:
        InvalidArgumentError: an unknown executor, workers < 1, or a scheduler without `dask`.
    """
    workers = check_executor(executor, workers, scheduler)
    if executor in ("threads", "processes"):
        pool: cf.Executor
        if executor == "threads":
            pool = cf.ThreadPoolExecutor(max_workers=workers)
        else:
            ctx = multiprocessing.get_context("spawn")  # fork would copy polars' and Rayon's thread pools
            pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
        with pool:
            yield lambda task, items: _local_map(pool, task, items)
        return
    with warnings.catch_warnings():
        # distributed warns on import about optional packages and on cluster start about ports; neither
        # matters for a sweep, and pytest turns warnings into errors.
        warnings.simplefilter("ignore")
        from distributed import Client, LocalCluster

        cluster = None
        if scheduler:
            _check_scheduler(scheduler)
            try:
                client = Client(scheduler)
            except (OSError, ValueError) as exc:  # unreachable (a timeout is an OSError), or not an address
                raise InvalidArgumentError(f"scheduler {scheduler!r}: cannot connect ({exc})") from None
        else:
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=dask_processes,
                protocol="tcp://",
                host="127.0.0.1",
                dashboard_address=None,
                silence_logs=40,
            )
            client = Client(cluster)
    try:
        yield lambda task, items: _dask_map(client, task, items)
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client.close()
            if cluster is not None:
                cluster.close()


__all__ = ["EXECUTORS", "check_executor", "executor_session", "progress_bar"]
