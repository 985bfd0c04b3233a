"""Where `kvsim.simulate`'s memory goes: peak RSS of each phase above the workload's own columns.

    python -m bench.memory_phases N [RATE] [whole]

Builds N ShareGPT-like requests (Poisson at RATE requests/s, default 100: the million-request benchmark's
setup; 100000 overloads the 1,500-block pool, so nearly every request waits), returns freed heap to the
system (`malloc_trim`), then runs `prepare`, the Rust engine, `request_rows` and `summarize` one after
the other, resetting the kernel's peak-RSS mark (`/proc/self/clear_refs`) before each; `whole` runs
`kvsim.simulate` as one phase instead. Prints bytes per request above the RSS after the workload was
built. Linux only (it reads /proc/self/status).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import sys
import time
from collections.abc import Callable
from typing import Any

import kvsim
from kvsim.engine import rust_engine
from kvsim.engine.engine_input import prepare
from kvsim.workloads import synthetic

sim = importlib.import_module("kvsim.engine.simulate")  # the module (the package exports the function)
libc = ctypes.CDLL("libc.so.6")


def rss() -> tuple[int, int]:
    """(current, peak) resident set size in bytes."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0]) * 1024 if key in ("VmRSS", "VmHWM") else 0
    return fields["VmRSS"], fields["VmHWM"]


def main() -> None:
    n = int(sys.argv[1])
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 100.0
    whole = "whole" in sys.argv[3:]
    cfg = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)
    w = synthetic(n, arrival_rate=rate, lengths="sharegpt-paper", seed=7)
    gc.collect()
    libc.malloc_trim(0)
    base = rss()[0]
    own = sum(a.nbytes for a in w.columns().values()) / n
    print(f"{n:,} requests at {rate:g}/s: the workload's columns {own:.1f} B/request")

    def phase(name: str, f: Callable[..., Any], *args: Any) -> Any:
        libc.malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as c:
            c.write("5")  # resets VmHWM to the current RSS
        t = time.perf_counter()
        out = f(*args)
        dt = time.perf_counter() - t
        now, peak = rss()
        print(
            f"  {name:13s} peak {(peak - base) / n:6.1f} B/request above the workload, "
            f"{(now - base) / n:6.1f} after it ({dt:.2f} s)"
        )
        return out

    if whole:
        phase("simulate", kvsim.simulate, w, cfg)
        return
    inp = phase("prepare", prepare, w, cfg)
    raw = phase("engine", rust_engine.run, inp, cfg)
    sim._freeze(raw)
    rows = phase("request_rows", sim.request_rows, w, inp, raw)
    del inp
    phase("summarize", sim.summarize, rows, raw, cfg)


if __name__ == "__main__":
    main()
