"""Allocate/free/lookup throughput of the Rust manager against the reference on the same operation stream.

The driver below is a small serving loop (admit with prefix lookup, one decode token per running request
per step, free on finish) over requests sharing system prompts; both backends receive the identical call
sequence because the driver is deterministic and both backends answer identically.
"""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim import reference
from kvsim.model.segments import output_id

from .conftest import record

NUM_REQUESTS = 600
NUM_BLOCKS = 1200
BLOCK_SIZE = 16


def make_requests(seed: int = 0) -> list[tuple[list[tuple[int, int]], int]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(NUM_REQUESTS):
        prefix = [(int(rng.integers(1, 9)), 200)] if rng.random() < 0.7 else []
        prompt = [*prefix, (10_000 + i, int(rng.integers(8, 300)))]
        out.append((prompt, int(rng.integers(16, 200))))
    return out


def drive(manager_cls, requests) -> dict[str, int]:
    m = manager_cls(NUM_BLOCKS, BLOCK_SIZE)
    pending = list(range(len(requests)))[::-1]
    running: dict[int, int] = {}  # request -> tokens generated
    ops = hits = 0
    while pending or running:
        while pending:
            rid = pending[-1]
            prompt, _ = requests[rid]
            hit = m.lookup(prompt)
            total = sum(n for _, n in prompt)
            ops += 2
            if m.allocate(rid, prompt, total - hit) is None:
                break
            hits += hit
            running[rid] = 0
            pending.pop()
        for rid in list(running):
            prompt, out_len = requests[rid]
            running[rid] += 1
            ops += 1
            if (
                m.allocate(rid, [*prompt, (output_id(rid), running[rid])], 1) is None
                or running[rid] == out_len
            ):
                m.free(rid)
                ops += 1
                del running[rid]
    return {"ops": ops, "hit_tokens": hits, "free": m.num_free_blocks, "evictions": m.num_evictions}


class DriverOnly:
    """Answers like a manager with room for everything and no cache: times the driver loop alone."""

    num_free_blocks = NUM_BLOCKS - 1
    num_evictions = 0

    def __init__(self, num_blocks: int, block_size: int) -> None:
        pass

    def lookup(self, segments) -> int:
        return 0

    def allocate(self, request_id, segments, num_new_tokens) -> list[int]:
        return []

    def free(self, request_id) -> None:
        pass


@pytest.fixture(scope="module")
def requests():
    return make_requests()


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_manager_operation_stream(benchmark, requests, backend):
    cls = kvsim.KVCacheManager if backend == "rust" else reference.KVCacheManager
    benchmark.group = "manager-ops"
    benchmark.extra_info["what"] = f"{NUM_REQUESTS} requests, lookup+allocate+free, block {BLOCK_SIZE}"
    result = benchmark.pedantic(drive, args=(cls, requests), rounds=3 if backend == "rust" else 1)
    # Sane result: everything was released, prefixes were shared, and both backends agree.
    assert result["free"] == NUM_BLOCKS - 1
    assert result["hit_tokens"] > 0
    assert result == drive(reference.KVCacheManager if backend == "rust" else kvsim.KVCacheManager, requests)
    benchmark.extra_info.update(result)
    record(benchmark, "manager-ops", backend)


def test_driver_alone(benchmark, requests):
    """The Python loop both backends share; the report subtracts it to give the managers' own ratio."""
    benchmark.group = "manager-ops"
    result = benchmark.pedantic(drive, args=(DriverOnly, requests), rounds=3)
    assert result["ops"] > NUM_REQUESTS
    record(benchmark, "manager-ops", "driver")
