"""Properties of every engine run over random small workloads and configs (SPEC §4-7), plus SimConfig
validation.

The workloads are small on purpose (the reference engine is slow by design); pools are tiny so that
preemption, head-of-line blocking and rejections happen often. The example count comes from the
hypothesis profile in conftest.py (KVSIM_HYPOTHESIS_PROFILE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kvsim
from kvsim import SimConfig
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import (
    ADMISSION_GATES,
    CONTIGUOUS_POLICIES,
    FREE_ORDERS,
    POLICIES,
    WAITING_OVER_BUDGET,
    WATERMARK_RULES,
)
from kvsim.model.segments import output_id

BACKENDS = ["reference", "rust"]


# -- workload helper ----------------------------------------------------------------------------------
@dataclass
class Req:
    """One request: prompt segments (segment_id, length), output length, cap, samples, arrival (s)."""

    segments: list[tuple[int, int]]
    output: int
    max_tokens: int
    samples: int = 1
    arrival: float = 0.0

    @property
    def prompt_len(self) -> int:
        return sum(n for _, n in self.segments)


def build(reqs: list[Req]) -> kvsim.Workload:
    """A Workload from explicit requests (arrivals must be non-decreasing so row i is request i)."""
    offsets, seg_id, seg_len = [0], [], []
    for r in reqs:
        for sid, n in r.segments:
            seg_id.append(sid)
            seg_len.append(n)
        offsets.append(len(seg_id))
    return kvsim.Workload(
        arrival=[r.arrival for r in reqs],
        output_len=[r.output for r in reqs],
        max_tokens=[r.max_tokens for r in reqs],
        num_samples=[r.samples for r in reqs],
        seg_offsets=offsets,
        segment_id=seg_id,
        segment_len=seg_len,
    )


SHARED_IDS = (11, 12, 13)  # content ids of shared system prompts
OWN_BASE = 1_000  # own content of request i: OWN_BASE + i


@st.composite
def requests(draw: st.DrawFn) -> list[Req]:
    """10-60 requests, lengths 1-200 (scale drawn per workload), arrivals in half-millisecond steps,
    some sharing a system prompt prefix, some quoting an earlier request's output (multi-turn)."""
    n = draw(st.integers(10, 60))
    max_len = draw(st.sampled_from([8, 32, 200]))
    max_out = draw(st.sampled_from([4, 16, 64]))
    lengths = st.integers(1, max_len)
    reqs: list[Req] = []
    t_half_ms = 0
    for i in range(n):
        t_half_ms += draw(st.sampled_from([0, 0, 0, 1, 2, 7]))
        segs: list[tuple[int, int]] = []
        if draw(st.booleans()):
            segs.append((draw(st.sampled_from(SHARED_IDS)), draw(lengths)))
        if reqs and draw(st.integers(0, 5)) == 0:
            j = draw(st.integers(0, len(reqs) - 1))
            quoted = min(reqs[j].output, reqs[j].max_tokens)
            segs.append((output_id(j, 0), draw(st.integers(1, quoted))))
        if not segs or draw(st.booleans()):
            segs.append((OWN_BASE + i, draw(lengths)))
        output = draw(st.integers(1, max_out))
        max_tokens = draw(st.sampled_from([output, output, max(1, output // 2), max_out]))
        samples = draw(st.sampled_from([1, 1, 1, 2, 3]))
        reqs.append(Req(segs, output, max_tokens, samples, t_half_ms / 2000))
    return reqs


@st.composite
def configs(draw: st.DrawFn) -> SimConfig:
    # vllm drawn more often: it is the policy with preemption and the prefix cache at work.
    policy = draw(st.sampled_from(("vllm", "vllm", "vllm", *POLICIES)))
    max_model_len = draw(st.sampled_from([None, 48, 256]))
    if policy == "static" and max_model_len is None:
        max_model_len = 256
    time = {"time_model": draw(st.sampled_from(["ticks", "linear"]))}
    if time["time_model"] == "linear":
        time |= {
            "c0_ps": draw(st.sampled_from([0, 1_000, 10**9])),
            "c_tok_ps": draw(st.sampled_from([0, 7, 10**6])),
            "c_ctx_ps": draw(st.sampled_from([0, 3, 10**5])),
        }
    return SimConfig(
        num_blocks=draw(st.integers(8, 80)),
        block_size=draw(st.sampled_from([1, 4, 16])),
        policy=policy,
        enable_prefix_caching=draw(st.booleans()),
        free_order=draw(st.sampled_from(FREE_ORDERS)),
        chunked_prefill=draw(st.booleans()),
        admission_gate=draw(st.sampled_from(ADMISSION_GATES)),
        waiting_over_budget=draw(st.sampled_from(WAITING_OVER_BUDGET)),
        watermark=draw(st.sampled_from([0.0, 0.05])),
        watermark_rule=draw(st.sampled_from(WATERMARK_RULES)),
        max_num_seqs=draw(st.sampled_from([1, 2, 5, 256])),
        max_num_batched_tokens=draw(st.sampled_from([8, 32, 100, 8192])),
        max_model_len=max_model_len,
        **time,
    )


def capped_target(r: Req, cfg: SimConfig) -> int:
    """Tokens one sequence generates: output_len capped by max_tokens and by max_model_len - prompt."""
    t = min(r.output, r.max_tokens)
    if cfg.max_model_len is not None:
        t = min(t, max(cfg.max_model_len - r.prompt_len, 0))
    return t


# -- the properties ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@given(reqs=requests(), cfg=configs())
def test_engine_invariants(backend, reqs, cfg):
    res = kvsim.simulate(build(reqs), cfg, backend=backend)
    rows = res.requests.to_dicts()
    s = res.summary
    bs, cap = cfg.block_size, cfg.capacity_tokens
    assert len(rows) == len(reqs)

    # Every request finishes or is rejected with a reason.
    for r, row in zip(reqs, rows, strict=True):
        target = capped_target(r, cfg)
        assert row["status"] in ("finished", "rejected")
        assert row["num_samples"] == r.samples
        if row["status"] == "finished":
            assert row["reject_reason"] is None
            assert target >= 1
            assert row["output_len"] == r.samples * target
            # arrival <= first_scheduled <= first_token <= finish (a step may last 0 ps in `linear`).
            assert row["first_scheduled"] is not None
            assert row["first_token"] is not None
            assert row["arrival"] <= row["first_scheduled"] <= row["first_token"] <= row["finish"]
        else:
            assert isinstance(row["reject_reason"], str)
            assert row["reject_reason"]
            # Rejected sequences count no generated tokens (a sibling sample may have finished).
            assert row["output_len"] <= (r.samples - 1) * target
            assert row["arrival"] <= row["finish"]
            if target < 1:
                assert "max_model_len" in row["reject_reason"]
        assert row["cached_tokens"] % bs == 0
        assert row["recomputed_tokens"] >= 0
        if row["num_preemptions"] == 0:
            assert row["recomputed_tokens"] == 0
            # One admission per sequence: at most prompt-1 tokens, in whole blocks.
            assert row["cached_tokens"] <= r.samples * ((r.prompt_len - 1) // bs) * bs
        elif row["status"] == "finished" and not cfg.enable_prefix_caching:
            # Readmitted with nothing cached: everything computed before is computed again.
            assert row["recomputed_tokens"] >= row["num_preemptions"]
        if not cfg.enable_prefix_caching or cfg.is_contiguous:
            assert row["cached_tokens"] == 0

    # The summary agrees with the rows.
    assert s["completed"] + s["rejected"] == len(reqs)
    assert s["completed"] == sum(row["status"] == "finished" for row in rows)
    assert s["preemptions"] == sum(row["num_preemptions"] for row in rows)
    assert s["recomputed_tokens"] == sum(row["recomputed_tokens"] for row in rows)
    assert s["prefix_hit_tokens"] == sum(row["cached_tokens"] for row in rows)
    finishes = [row["finish"] for row in rows if row["finish"] is not None]
    assert s["makespan_s"] >= max(finishes)
    assert s["peak_batch"] <= cfg.max_num_seqs

    # Policies: reserve and the contiguous baselines never preempt.
    if cfg.policy == "reserve" or cfg.is_contiguous:
        assert s["preemptions"] == 0
        assert all(row["num_preemptions"] == 0 for row in rows)
    # A mean or a rate over nothing is None (DESIGN.md §Metrics): no step, no busy time, no prompt admitted.
    busy = s["time_weighted_batch"] is not None  # (a step may last 0 ps in `linear`)
    assert (s["mean_batch"] is None) == (s["num_steps"] == 0)
    if s["num_steps"] == 0:
        assert not busy
        assert s["prefix_hit_rate"] is None
        assert s["peak_batch"] == 0
    if not cfg.enable_prefix_caching or cfg.is_contiguous:
        assert s["prefix_hit_rate"] in (0.0, None)
        assert s["prefix_hit_tokens"] == 0
        assert s["blocks_saved_by_sharing"] in (0.0, None)
    if s["prefix_hit_rate"] is not None:
        assert 0.0 <= s["prefix_hit_rate"] < 1.0
    if not busy:
        for name in ("kv_utilization", "kv_allocated_fraction", "blocks_saved_by_sharing"):
            assert s[name] is None, name
        return

    # Memory accounting (time-weighted fractions of capacity).
    eps = 1e-9
    for name in (
        "kv_utilization",
        "kv_allocated_fraction",
        "internal_fragmentation",
        "external_fragmentation",
        "reservation_waste",
    ):
        assert s[name] >= 0.0, name
    assert s["kv_utilization"] <= 1.0 + eps
    assert s["kv_allocated_fraction"] <= 1.0 + eps
    assert s["peak_allocated_fraction"] <= 1.0
    assert s["stored_share_of_allocated"] <= 1.0 + eps
    if cfg.is_contiguous:
        # A region is its final length (stored + still to write) plus what it never uses.
        assert s["kv_utilization"] + s["reservation_waste"] + s["internal_fragmentation"] == pytest.approx(
            s["kv_allocated_fraction"], abs=eps
        )
        assert s["external_fragmentation"] <= 1.0 - s["kv_allocated_fraction"] + eps
    else:
        assert s["external_fragmentation"] == 0.0
        assert s["kv_utilization"] + s["internal_fragmentation"] == pytest.approx(
            s["kv_allocated_fraction"], abs=eps
        )
        # The same unused slots as a share of those allocated: what tokens stored leave of them.
        if s["stored_share_of_allocated"] is not None:
            assert s["internal_fragmentation_of_allocated"] == pytest.approx(
                1.0 - s["stored_share_of_allocated"], abs=eps
            )
        # Below one block per running sequence: only each sequence's last block is partial.
        assert s["internal_fragmentation"] * cap <= (bs - 1) * s["time_weighted_batch"] + eps
        assert s["blocks_saved_by_sharing"] >= 0.0
    if cfg.policy != "reserve":
        assert s["reservation_waste"] == 0.0 or cfg.is_contiguous


# Requests that would fit alone always finish when nothing can reject them: a pool large enough for
# every request's peak, no watermark, no gate, chunked prefill, no max_model_len. (Reason 5 is only for
# requests that cannot start even in an empty pool; here every one can.)
@pytest.mark.parametrize("backend", BACKENDS)
@given(reqs=requests(), cfg=configs())
def test_everything_that_fits_finishes(backend, reqs, cfg):
    bs = cfg.block_size
    static_len = 1024  # longer than any prompt here (at most 200 + 64 + 200) plus its output
    need = 1  # blocks (paged) or whole blocks of address space (contiguous) the largest request needs
    for r in reqs:
        gen = min(r.output, r.max_tokens)
        tokens = {
            "vllm": r.prompt_len + gen - 1,  # its last token's K/V is never computed
            "reserve": r.prompt_len + r.max_tokens,
            "static": static_len,
            "orca-max": r.prompt_len + r.max_tokens,
            "orca-pow2": r.prompt_len + (1 << (r.output - 1).bit_length()),
            "orca-oracle": r.prompt_len + r.output,
        }[cfg.policy]
        need = max(need, math.ceil(tokens / bs))
    cfg = cfg.replace(
        num_blocks=max(cfg.num_blocks, need + 1),
        watermark=0.0,
        admission_gate="none",
        chunked_prefill=True,
        max_model_len=static_len if cfg.policy == "static" else None,
    )
    res = kvsim.simulate(build(reqs), cfg, backend=backend)
    assert res.requests["status"].to_list() == ["finished"] * len(reqs)
    assert res.summary["completed"] == len(reqs)


# -- SimConfig validation ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"policy": "lru"}, "policy", "lru"),
        ({"policy": "VLLM"}, "policy", "VLLM"),
        ({"placement": "best-fit"}, "placement", "best-fit"),
        ({"free_order": "fifo"}, "free_order", "fifo"),
        ({"preemption": "kill"}, "preemption", "kill"),
        ({"sampling": "beam"}, "sampling", "beam"),
        ({"admission_gate": "half"}, "admission_gate", "half"),
        ({"time_model": "roofline"}, "time_model", "roofline"),
        ({"block_size": 0}, "block_size", "0"),
        ({"block_size": -16}, "block_size", "-16"),
        ({"block_size": 2.5}, "block_size", "2.5"),
        ({"block_size": True}, "block_size", "True"),
        ({"max_num_seqs": 0}, "max_num_seqs", "0"),
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens", "0"),
        ({"cpu_blocks": -1}, "cpu_blocks", "-1"),
        ({"iteration_time_ps": 0}, "iteration_time_ps", "0"),
        ({"watermark": 1.5}, "watermark", "1.5"),
        ({"watermark": 1.0}, "watermark", "1.0"),
        ({"watermark": -0.1}, "watermark", "-0.1"),
        ({"max_model_len": 0}, "max_model_len", "0"),
        ({"enable_prefix_caching": "yes"}, "enable_prefix_caching", "yes"),
        ({"chunked_prefill": 1}, "chunked_prefill", "1"),
        ({"num_blocks": 1}, "num_blocks", "1"),
        ({"num_blocks": 0}, "num_blocks", "0"),
        ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization", "0.0"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization", "1.5"),
        ({"policy": "static"}, "max_model_len", "static"),
        ({"preemption": "swap"}, "cpu_blocks", "0"),
        ({"preemption": "swap", "cpu_blocks": 4, "policy": "reserve"}, "preemption", "reserve"),
        ({"append_check": "lazy"}, "append_check", "lazy"),
        ({"append_check": "one-free-block", "policy": "reserve"}, "append_check", "reserve"),
        ({"sampling": "fork-cow", "policy": "reserve"}, "sampling", "reserve"),
        ({"sampling": "fork-cow", "policy": "orca-max"}, "sampling", "orca-max"),
        (
            {"sampling": "fork-cow", "max_num_batched_tokens": 8, "max_num_seqs": 9},
            "max_num_batched_tokens",
            "8",
        ),
        ({"time_model": "linear", "c0_ps": 1, "c_tok_ps": 1}, "c_ctx_ps", "None"),
        ({"time_model": "linear", "c0_ps": -1, "c_tok_ps": 1, "c_ctx_ps": 1}, "c0_ps", "-1"),
        ({"num_blocks": None}, "num_blocks", "None"),
        ({"num_blocks": None, "model": "gpt-9", "kv_cache_bytes": 2**30}, "model", "gpt-9"),
    ],
)
def test_config_validation_names_field_and_value(kwargs, field, value):
    args = {"num_blocks": 16, **kwargs}
    with pytest.raises(InvalidArgumentError) as info:
        SimConfig(**args)
    msg = str(info.value)
    assert field in msg
    assert value in msg


def test_rust_engine_rejects_forks_under_other_policies():
    """The Rust engine checks its input on its own (a caller may bypass `SimConfig`): forked samples under
    a contiguous policy are an error naming the option, not a panic."""
    from kvsim.engine import rust_engine
    from kvsim.engine.engine_input import prepare
    from kvsim.workloads import synthetic

    w = synthetic(4, arrival_rate=10, lengths="sharegpt-paper", seed=1, num_samples=3)
    inp = prepare(w, SimConfig(num_blocks=64, sampling="fork-cow"))
    with pytest.raises(InvalidArgumentError, match="fork-cow"):
        rust_engine.run(inp, SimConfig(num_blocks=64, policy="orca-max", max_model_len=4096))


def test_unknown_preset_is_rejected():
    with pytest.raises(InvalidArgumentError, match=r"preset 'vllm-v9'"):
        SimConfig.preset("vllm-v9", num_blocks=16)


@pytest.mark.parametrize("name", ["vllm-0.20", "vllm-0.19", "vllm-v1", "vllm-0.11"])
def test_presets_before_0_24_refuse_a_watermark(name):
    """vLLM v1 has no watermark before 0.24.0: a preset of those releases refuses one, naming it."""
    with pytest.raises(InvalidArgumentError, match=rf"watermark 0.1: preset '{name}' has none"):
        SimConfig.preset(name, num_blocks=16, watermark=0.1)
    assert SimConfig.preset(name, num_blocks=16, watermark=0.0).watermark_blocks == 0


def test_replace_validates_again():
    cfg = SimConfig(num_blocks=16)
    with pytest.raises(InvalidArgumentError, match="max_num_seqs"):
        cfg.replace(max_num_seqs=0)


def test_presets_and_valid_configs_construct():
    assert SimConfig.preset("vllm-latest", num_blocks=16).free_order == "lifo_unhashed"
    assert SimConfig.preset("vllm-v0", num_blocks=16).watermark_blocks == 0  # int(0.01 * 16)
    # (v0's int(watermark * num_gpu_blocks), its 200 blocks all usable: vllm/core/block_manager_v1.py)
    assert SimConfig.preset("vllm-v0", num_blocks=200).watermark_blocks == 2  # int(0.01 * 200)
    assert SimConfig.preset("vllm-v0", num_blocks=16).watermark_rule == "always"
    # vLLM v1 (while-running) counts its null block: int(0.01 * 200) = 2 where v0's int(0.01 * 199) = 1.
    assert SimConfig(num_blocks=200, watermark=0.01).watermark_blocks == 2
    assert SimConfig(num_blocks=200, watermark=0.01, watermark_rule="always").watermark_blocks == 1
    assert SimConfig.preset("vllm-latest", num_blocks=16, watermark=0.1).watermark_rule == "while-running"
    # v0's 4 GiB of swap space in OPT-13B blocks of 16 tokens (800 KiB of KV per token): 327 blocks.
    v0 = SimConfig.preset("vllm-v0", model="opt-13b", kv_cache_bytes=12 * 2**30)
    assert (v0.preemption, v0.cpu_blocks) == ("auto", 327)
    assert SimConfig.preset("vllm-v0", model="opt-13b", kv_cache_bytes=2**30, cpu_blocks=5).cpu_blocks == 5
    assert SimConfig.preset("vllm-v0", num_blocks=16).cpu_blocks == 0
    for policy in CONTIGUOUS_POLICIES:
        cfg = SimConfig(num_blocks=16, policy=policy, max_model_len=64, placement="buddy")
        assert cfg.is_contiguous
    assert SimConfig(num_blocks=16, preemption="swap", cpu_blocks=4).cpu_blocks == 4
