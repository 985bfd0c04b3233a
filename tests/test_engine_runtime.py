"""The Rust engine as a citizen of a Python process: it releases the GIL, it stops on Ctrl-C, and its
results do not depend on what other threads are doing."""

from __future__ import annotations

import _thread
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import kvsim
from kvsim.workloads import synthetic


def long_run():
    # ~10 M one-millisecond steps (about a second): long enough to observe from another thread.
    return synthetic(20_000, arrival_rate=2, lengths="sharegpt-paper", seed=3), kvsim.SimConfig(
        num_blocks=300
    )


def test_results_do_not_depend_on_other_threads():
    w = synthetic(400, arrival_rate=80, lengths="sharegpt-paper", seed=5)
    cfg = kvsim.SimConfig(num_blocks=120, block_size=16)
    alone = kvsim.simulate(w, cfg)
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda _: kvsim.simulate(w, cfg), range(4)))
    for r in together:
        assert r.requests.equals(alone.requests, null_equal=True)
        assert r.summary == alone.summary
    assert alone.summary["preemptions"] > 0  # the pool is under pressure, so ordering matters


def test_gil_is_released_during_a_run():
    w, cfg = long_run()
    ticks = 0
    done = threading.Event()

    def count():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    start = time.perf_counter()
    kvsim.simulate(w, cfg)
    elapsed = time.perf_counter() - start
    done.set()
    t.join()
    # A thread that needs the GIL kept ticking while the engine ran (at least a quarter of the time).
    assert ticks >= max(1, int(elapsed * 1000 / 4))


def test_ctrl_c_interrupts_a_long_run():
    w, cfg = long_run()
    timer = threading.Timer(0.05, _thread.interrupt_main)
    timer.start()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        kvsim.simulate(w, cfg)  # the engine polls for signals between chunks of steps
    timer.cancel()
    assert time.perf_counter() - start < 5
