"""Requests that stop early, for the recorders' `async_stop_*` scenarios (DESIGN.md §Engine, "Asynchronous
scheduling"): a request `(arrival, segments, max_tokens, stop_at)` stops at its `stop_at`-th output token,
below its `max_tokens`, by a stop token vLLM's scheduler cannot foresee (`scripts/vllm_hybrid_golden.py`'s
`sampling_params`). Plain data and the standard library."""

from __future__ import annotations

import random
from typing import Any

MAX_MODEL_LEN = 256  # the recorders' (each checks its own against it)


def with_stops(sc: dict[str, Any], seed: int) -> dict[str, Any]:
    """`sc` with requests that stop early: each drawn (by `seed`, three in five) keeps its output length as
    its `stop_at` and is given a `max_tokens` 1-8 above it (within `MAX_MODEL_LEN`), so vLLM cannot foresee
    its end (the recorders' `sampling_params`, in `scripts/vllm_hybrid_golden.py`). Every recorder's stop
    scenarios use it."""
    rng = random.Random(70000 + seed)
    requests: list[Any] = []
    for r in sc["requests"]:
        extra = rng.randint(1, 8)
        p = sum(n for _, n in r[1])
        if rng.random() < 0.6 and p + r[2] + extra <= MAX_MODEL_LEN:
            requests.append((r[0], r[1], r[2] + extra, r[2]))
        else:
            requests.append(tuple(r))
    return {**sc, "requests": requests}
