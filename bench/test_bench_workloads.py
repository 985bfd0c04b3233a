"""Benchmarks of workload building and trace loading (run with `--benchmark-enable`; see the README)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from kvsim.workloads import load_mooncake, synthetic

from .conftest import target

TRACES = Path(
    os.environ.get("KVSIM_TRACES") or Path(__file__).resolve().parents[1].parent / "shared" / "traces"
)
MILLION = 1_000_000


def test_synthetic_million_with_shared_prefixes(benchmark: pytest.FixtureRequest) -> None:
    """Target: under 2 s for a million ShareGPT-like requests, half of them behind one of 8 system prompts."""
    benchmark.group = "workloads"
    benchmark.extra_info.update(
        {
            "num_requests": MILLION,
            "lengths": "sharegpt-paper",
            "system_prompts": 8,
            "sharing_ratio": 0.5,
            "target_s": 2.0,
        }
    )
    w = benchmark(
        synthetic,
        MILLION,
        arrival_rate=10.0,
        system_prompt_len=256,
        num_system_prompts=8,
        sharing_ratio=0.5,
        seed=1,
    )
    assert len(w) == MILLION
    assert len(w.segment_id) == MILLION + MILLION // 2
    assert w.prompt_len.mean() == pytest.approx(161.31 + 128, rel=0.02)
    assert (np.diff(w.arrival) >= 0).all()
    if benchmark.stats:
        target(
            "synthetic workload, 1,000,000 requests with shared prefixes",
            benchmark.stats.stats.median,
            2.0,
            "s",
        )


def test_synthetic_conversations(benchmark: pytest.FixtureRequest) -> None:
    """Multi-turn: 250k conversations of 4 turns (prompts grow, so segments are quadratic in turns)."""
    benchmark.group = "workloads"
    benchmark.extra_info.update({"num_requests": MILLION, "turns": 4})
    w = benchmark(synthetic, MILLION, turns=4, system_prompt_len=64, seed=2)
    assert len(w) == MILLION
    # Per conversation: 2 + 4 + 6 + 8 segments (system prompt, then two per earlier turn, then the message).
    assert len(w.segment_id) == MILLION // 4 * (2 + 4 + 6 + 8)


def test_load_mooncake_conversation(benchmark: pytest.FixtureRequest) -> None:
    """Target: under 1 s for the 12,031-request Mooncake conversation trace."""
    path = TRACES / "mooncake" / "conversation_trace.jsonl"
    if not TRACES.is_dir():
        pytest.skip(f"traces folder {TRACES} is absent")
    benchmark.group = "traces"
    benchmark.extra_info.update({"trace": "mooncake/conversation_trace.jsonl", "target_s": 1.0})
    w = benchmark(load_mooncake, path)
    assert len(w) == 12_031
    assert w.prompt_len.mean() == pytest.approx(12_035, abs=0.5)
    assert w.meta["skipped_rows"] == 0
    if benchmark.stats:
        target("load_mooncake, conversation trace (12,031 requests)", benchmark.stats.stats.median, 1.0, "s")
