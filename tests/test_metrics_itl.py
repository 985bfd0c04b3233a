"""ITL's exact record (kvsim.engine.metrics, `EngineOutput.itl`): the multiset of values the engines' record gives
equals the gaps between every token's time, taken one token at a time in the reference engine, on small
random runs with preemption (recompute and swap), fork-cow samples, token budgets and every policy; and
the reported statistics equal numpy's on that list."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings

import kvsim
from kvsim.analysis.sweep import make_workload
from kvsim.engine import metrics
from kvsim.engine.simulate import prepare
from kvsim.reference import engine as ref_engine
from kvsim.workloads import Workload
from tests.test_engine_differential import assert_same, configs, workloads


def _reference_with_token_times(w, cfg):
    """The reference run of `w` with its test hook on: every token's time, by row."""
    inp = prepare(w, cfg)
    eng = ref_engine.Engine(inp, cfg)
    eng.token_times = {}
    raw = eng.run()
    return raw, eng.token_times


def _gaps_by_hand(raw, token_times) -> list[int]:
    """Every gap between consecutive tokens of every finished sequence (ps)."""
    gaps: list[int] = []
    for row, times in token_times.items():
        if raw.status[row] != ref_engine.FINISHED:
            continue
        assert len(times) == raw.generated[row], "one recorded time per generated token"
        assert times[0] == raw.first_token[row]
        assert times[-1] == raw.finish[row]
        gaps += [b - a for a, b in itertools.pairwise(times)]
    return gaps


def _expanded(raw) -> list[int]:
    recorded = metrics.itl_values(raw)
    assert recorded is not None
    values, counts = recorded
    assert (counts >= 0).all()
    return sorted(np.repeat(values, counts).tolist())


@settings(deadline=None)
@given(w=workloads(), cfg=configs())
def test_recorded_itl_is_every_token_gap(w, cfg):
    raw, token_times = _reference_with_token_times(w, cfg)
    assert _expanded(raw) == sorted(_gaps_by_hand(raw, token_times))


def test_itl_with_preemption_and_budget_is_exact():
    """A pool that forces recompute preemption and a token budget that leaves sequences out: the
    distribution is reported (not None) and equals numpy's on the hand-made list of gaps."""
    w = make_workload("sharegpt", {"arrival_rate": 50.0}, 40, 3)
    cfg = kvsim.SimConfig(
        block_size=16,
        num_blocks=150,
        max_num_batched_tokens=600,
        time_model="linear",
        c0_ps=10**9,
        c_tok_ps=10**6,
        c_ctx_ps=10**4,
    )
    raw, token_times = _reference_with_token_times(w, cfg)
    assert raw.num_preemptions.sum() > 0
    gaps = np.array(_gaps_by_hand(raw, token_times)) / 1e9
    for backend in ("reference", "rust"):
        s = kvsim.simulate(w, cfg, backend=backend).serving(metric_percentiles=(50, 90, 99))
        assert s["median_itl_ms"] == pytest.approx(np.median(gaps), rel=1e-12)
        assert s["std_itl_ms"] == pytest.approx(gaps.std(), rel=1e-9)
        assert s["p90_itl_ms"] == pytest.approx(np.percentile(gaps, 90), rel=1e-12)
        assert s["p99_itl_ms"] == pytest.approx(np.percentile(gaps, 99), rel=1e-12)
        assert s["mean_itl_ms"] == pytest.approx(gaps.mean(), rel=1e-12)
        assert "itl_inexact_sequences" not in s


@settings(deadline=None)
@given(w=workloads(max_requests=20), cfg=configs())
def test_recorded_itl_is_every_token_gap_with_samples_and_swap(w, cfg):
    """fork-cow groups swapped out and back, or recomputed: the samples' own tokens, gaps and all."""
    cfg = cfg.replace(
        sampling="fork-cow",
        policy="vllm",
        preemption="swap" if cfg.cpu_blocks else "auto",
        cpu_blocks=max(cfg.cpu_blocks, 1),
        max_num_batched_tokens=max(cfg.max_num_batched_tokens, cfg.max_num_seqs),
    )
    raw, token_times = _reference_with_token_times(w, cfg)
    assert _expanded(raw) == sorted(_gaps_by_hand(raw, token_times))


def test_a_sequence_rejected_after_its_tokens_is_left_out():
    """Row 1 is preempted (recompute) after 45 tokens and can never come back (its 46 tokens exceed the
    32-token budget, chunked prefill off): rejected, its run is recorded but its gaps are not ITL's."""
    w = Workload(arrival=[0.0, 0.0], output_len=[22, 46], prompt_len=[1, 1])
    cfg = kvsim.SimConfig(
        num_blocks=13,
        block_size=4,
        max_num_seqs=2,
        max_num_batched_tokens=32,
        chunked_prefill=False,
        append_check="one-free-block",
        iteration_time_ps=10**9,
        enable_prefix_caching=False,
        admission_gate="none",
        watermark=0.0,
    )
    raw, token_times = _reference_with_token_times(w, cfg)
    assert raw.status.tolist() == [ref_engine.FINISHED, ref_engine.REJECTED]
    assert len(token_times[1]) == 45
    assert 1 in raw.itl["run_row"].tolist()
    assert _expanded(raw) == sorted(_gaps_by_hand(raw, token_times)) == [10**9] * 21
    assert_same(w, cfg)
