"""A mixture-of-experts model's data-parallel ranks step together (DESIGN.md §Data-parallel groups): the
group step's rule (its duration is the slowest rank's; an idle rank's clock moves with the group; vLLM's
wave of dummy steps up to a 32nd step), the Rust groups against the reference's over random workloads,
fleets, group sizes and routers, what `data_parallel_size` with `replicas` means, and what is refused."""

from __future__ import annotations

import dataclasses

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import assume, event, given

import kvsim
from kvsim.cli import main
from kvsim.engine import rust_engine
from kvsim.engine.cluster import prepare, router_spec
from kvsim.errors import InvalidArgumentError
from kvsim.reference import cluster as reference
from kvsim.reference.dp import WAVE_CHECK_STEPS
from kvsim.workloads import Workload, synthetic
from tests.fleet_strategies import fleet_of
from tests.test_cluster_differential import router_args
from tests.test_engine_differential import configs, workloads

MS = 10**9  # picoseconds
BACKENDS = ("reference", "rust")


def run(inp, cfgs, spec, backend):
    """(columns, counters) of a fleet run on one backend, or ("raise", message)."""
    try:
        if backend == "reference":
            out = reference.run_cluster(inp, cfgs, spec)
            return {k: np.asarray(v) for k, v in out.columns.items()}, [dict(c) for c in out.counters]
        res = rust_engine.run_cluster(inp, cfgs, spec)
        return {k: np.asarray(v) for k, v in res["columns"].items()}, [dict(c) for c in res["counters"]]
    except InvalidArgumentError as exc:
        return ("raise", str(exc))


def fleet_run(w, cfg, n, group, backend, router="round-robin"):
    spec = dataclasses.replace(router_spec(cfg), name=router, dp_group=group)
    return run(prepare(w, cfg), [cfg] * n, spec, backend)


def rows(arrivals_ms, prompts, outputs) -> Workload:
    return Workload(
        arrival=np.asarray(arrivals_ms, dtype=float) / 1e3, prompt_len=prompts, output_len=outputs
    )


# -- the group step's rule -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rank_beside_a_prefill_steps_as_long_as_it(backend):
    """Two ranks: rank 0 prefills 1,000 tokens (1 + 10 ms under this line) while rank 1 prefills 10 (1.1 ms):
    the group's step lasts 11 ms, so rank 1's first token comes at 11 ms, not 1.1 ms; apart, at 1.1 ms."""
    cfg = kvsim.SimConfig(
        num_blocks=200, block_size=16, time_model="linear", c0_ps=MS, c_tok_ps=10**7, c_ctx_ps=0,
        max_num_batched_tokens=2048, max_num_seqs=4,
    )  # fmt: skip
    w = rows([0, 0], [1000, 10], [3, 3])
    cols, counters = fleet_run(w, cfg, 2, 2, backend)
    apart, _ = fleet_run(w, cfg, 2, 1, backend)
    assert list(cols["replica"]) == [0, 1]
    assert apart["first_token"][1] == MS + 10 * 10**7
    assert cols["first_token"][1] == cols["first_token"][0] == MS + 1000 * 10**7
    # Then both decode a token a step (1.01 ms each): the same steps, the same ends.
    assert cols["finish"][0] == cols["finish"][1] == 11 * MS + 2 * (MS + 10**7)
    assert [c["num_steps"] for c in counters] == [3, 3]
    assert counters[0]["busy_ps"] == counters[1]["busy_ps"] == cols["finish"][0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_ranks_experts_compute_the_tokens_gathered_from_all_ranks(backend):
    """Two ranks, batches of 100 and 1 tokens (vLLM's all-gather before each MoE layer hands every rank's
    experts all 101): a roofline of a fixed 1 µs, an experts table of (0, 0.3, 0.5) ms and 10 µs a token
    gathered, nothing else. The group's first step lasts 1 µs + max(0.5 ms, 101 × 10 µs) = 1.011 ms on
    both ranks; a lone rank takes the other's batch as large as its own (`moe_senders` 2): 200 tokens,
    2.001 ms, and 2 tokens, 0.501 ms. Then rank 0 decodes (1 token) beside rank 1's dummy batch (1
    token): 2 tokens gathered, 1 µs + 0.5 ms (one token alone would read 0.3 ms)."""
    from kvsim.model.timing import FULL, AttentionClass, RooflineTimeModel

    us = 10**6
    rt = RooflineTimeModel(
        fixed_ps=us, seq_ps=0, tok_ps=0, dense_mem_ps=0, dense_mem_tok_ps=0, dense_flop_tok_ps=0,
        moe_mem_ps=(0, 300 * us, 500 * us), moe_flop_tok_ps=10 * us, head_mem_ps=0, head_flop_seq_ps=0,
        attention=(AttentionClass(FULL, 0, 0, 0),), moe_senders=2,
    )  # fmt: skip
    assert rt.experts_ps(101) == 1010 * us
    cfg = kvsim.SimConfig(num_blocks=200, block_size=16, max_num_batched_tokens=2048, max_num_seqs=4)
    cfg = cfg.with_roofline(rt)
    w = rows([0, 0], [100, 1], [3, 2])
    cols, counters = fleet_run(w, cfg, 2, 2, backend)
    assert list(cols["replica"]) == [0, 1]
    first = us + 1010 * us
    assert list(cols["first_token"]) == [first, first]
    # step 2: both decode (2 tokens gathered); step 3: rank 0 decodes beside rank 1's dummy batch
    assert cols["finish"][1] == first + us + 500 * us
    assert cols["finish"][0] == first + 2 * (us + 500 * us)
    assert [c["num_steps"] for c in counters] == [3, 2]
    apart, _ = fleet_run(w, cfg, 2, 1, backend)
    assert list(apart["first_token"]) == [us + 2000 * us, us + 500 * us]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_idle_rank_moves_with_its_group(backend):
    """One request on rank 0 of a group of three: the others schedule nothing and record no step, but their
    clocks end where the group's does (each run's makespan)."""
    cfg = kvsim.SimConfig(num_blocks=100, block_size=16, time_model="ticks")
    cols, counters = fleet_run(rows([0], [20], [5]), cfg, 3, 3, backend)
    assert [c["num_steps"] for c in counters] == [5, 0, 0]
    assert [c["makespan_ps"] for c in counters] == [cols["finish"][0]] * 3 == [5 * MS] * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_request_in_the_waves_tail_joins_at_a_dummy_step(backend):
    """1 ms ticks. Rank 0's request runs steps 1 and 2 (0 to 2 ms); the group then steps dummy batches until
    its 32nd step: a request for rank 1 arriving at 5.5 ms waits for the step starting at 6 ms (apart it
    starts at 5.5 ms); one arriving after the wave ended (32 ms) starts when it arrives."""
    cfg = kvsim.SimConfig(num_blocks=100, block_size=16, time_model="ticks")
    during = rows([0, 5.5], [4, 4], [2, 2])
    cols, _ = fleet_run(during, cfg, 2, 2, backend)
    apart, _ = fleet_run(during, cfg, 2, 1, backend)
    assert cols["first_scheduled"][1] == 6 * MS
    assert apart["first_scheduled"][1] == 5.5 * MS
    # The wave's last dummy step is the 32nd (31 to 32 ms): an arrival during it starts the next wave at 32.
    cols, _ = fleet_run(rows([0, 31.5], [4, 4], [2, 2]), cfg, 2, 2, backend)
    assert cols["first_scheduled"][1] == WAVE_CHECK_STEPS * MS
    cols, _ = fleet_run(rows([0, 40.5], [4, 4], [2, 2]), cfg, 2, 2, backend)
    assert cols["first_scheduled"][1] == 40.5 * MS
    # A wave that is still busy at its 32nd step goes on: no dummy steps between its requests' steps.
    cols, counters = fleet_run(rows([0, 33.5], [4, 4], [40, 2]), cfg, 2, 2, backend)
    assert cols["first_scheduled"][1] == 34 * MS
    assert counters[0]["num_steps"] == 40


@pytest.mark.parametrize("backend", BACKENDS)
def test_groups_of_one_fleet_step_apart_from_each_other(backend):
    """Four ranks in two groups: a request on group 1 never waits for group 0's long prefill."""
    cfg = kvsim.SimConfig(
        num_blocks=200, block_size=16, time_model="linear", c0_ps=MS, c_tok_ps=10**7, c_ctx_ps=0,
        max_num_batched_tokens=2048,
    )  # fmt: skip
    w = rows([0, 0, 0, 0], [1000, 10, 10, 10], [2, 2, 2, 2])
    cols, _ = fleet_run(w, cfg, 4, 2, backend)
    assert list(cols["first_token"]) == [11 * MS, 11 * MS, MS + 10**8, MS + 10**8]


# -- Rust against the reference -------------------------------------------------------------------------------
@st.composite
def grouped_fleets(draw):
    """Configs for `size` x `groups` ranks: copies of one, or ranks differing in memory, block size,
    caching, seats and the line's or the roofline's coefficients (a group of mixed GPUs: its experts'
    table and FLOPs too, each rank's read at the group's tokens gathered)."""
    base = draw(configs())
    size = draw(st.integers(2, 3))
    n = size * draw(st.integers(1, 2))
    cfgs = draw(fleet_of(base, n, line_coefficients))
    if base.time_model == "roofline" and any(c is not base for c in cfgs):
        # (ranks of mixed GPUs: each its own fixed time and experts' table and FLOPs)
        for i in range(1, n):
            table = draw(st.lists(st.integers(0, 10**9), max_size=40))
            cfgs[i] = cfgs[i].with_roofline(
                dataclasses.replace(
                    base.roofline,
                    fixed_ps=draw(st.integers(0, 10**9)),
                    moe_mem_ps=tuple(table),
                    moe_flop_tok_ps=draw(st.integers(0, 10**8)) if table else 0,
                )
            )
    return cfgs, size


def line_coefficients(draw, base) -> dict:
    return {"c0_ps": draw(st.integers(1, 10**9))} if base.time_model == "linear" else {}


@given(w=workloads(), fleet=grouped_fleets(), data=st.data())
def test_rust_groups_equal_the_reference_groups(w, fleet, data):
    cfgs, size = fleet
    args = router_args(data.draw)
    spec = dataclasses.replace(
        router_spec(cfgs[0].replace(**args)), dp_group=size
    )  # (the router's knobs, checked by SimConfig)
    assert_backends_agree(w, cfgs, spec, size)


def assert_backends_agree(w, cfgs, spec, size) -> None:
    """The differential tests' check: `w` prepared for the fleet (one the first config refuses is not
    drawn) and run on both backends, which refuse it alike or agree in every per-request column and every
    rank's counters, each group of `size` ranks ending on its group's clock."""
    try:
        inp = prepare(w, cfgs[0])
    except InvalidArgumentError:
        assume(False)
    ref = run(inp, cfgs, spec, "reference")
    rust = run(inp, cfgs, spec, "rust")
    if isinstance(ref[0], str) or isinstance(rust[0], str):  # ("raise", message)
        event("refused")
        assert ref == rust
        return
    event("ran")
    (rc, rn), (sc, sn) = ref, rust
    assert rc.keys() == sc.keys()
    for k in rc:
        np.testing.assert_array_equal(rc[k], sc[k], err_msg=k)
    assert rn == sn
    # The invariant: every rank of a group ends on its group's clock.
    for g in range(len(cfgs) // size):
        assert len({c["makespan_ps"] for c in rn[g * size : (g + 1) * size]}) == 1


@given(w=workloads(max_requests=40), cfg=configs(), data=st.data())
def test_busy_groups_agree(w, cfg, data):
    """More requests a rank, the routers that read state, exact and refreshed."""
    router = data.draw(st.sampled_from(["least-loaded", "least-kv", "prefix-affinity", "weighted", "random"]))
    refresh = data.draw(st.sampled_from([0, 2 * MS]))
    spec = dataclasses.replace(router_spec(cfg), name=router, refresh_ps=refresh, dp_group=2)
    inp = prepare(w, cfg)
    assert _equal(run(inp, [cfg] * 4, spec, "reference"), run(inp, [cfg] * 4, spec, "rust"))


def _equal(a, b) -> bool:
    if isinstance(a[0], str) or isinstance(b[0], str):  # ("raise", message)
        return a == b
    return a[0].keys() == b[0].keys() and all(np.array_equal(a[0][k], b[0][k]) for k in a[0]) and a[1] == b[1]


# -- long quiet spans: the group's closed form (DESIGN.md §Data-parallel groups, "Fast paths") -------------------
@st.composite
def quiet_fleets(draw):
    """A group of 2 or 3 ranks whose configs differ in their time model's coefficients (so each rank's
    decode step grows at its own rate and the slowest rank changes mid-span: the envelope switches), seats
    and budget (batches of different sizes), memory and block size (block events apart)."""
    size = draw(st.integers(2, 3))
    time = draw(st.sampled_from(["ticks", "linear", "roofline"]))
    policy = draw(st.sampled_from(["vllm", "vllm", "reserve", "orca-oracle"]))
    caching = draw(st.sampled_from([False, False, True]))
    cfgs = []
    for _ in range(size):
        seqs = draw(st.integers(1, 6))
        if time == "ticks":
            clock = {"time_model": "ticks", "iteration_time_ps": draw(st.integers(1, 10**9))}
        elif time == "linear":
            # (fixed times near the context's growth over a span: the lines cross within one)
            clock = {
                "time_model": "linear", "c0_ps": draw(st.integers(1, 10**9) | st.integers(1, 10**7)),
                "c_tok_ps": draw(st.integers(0, 10**6)), "c_ctx_ps": draw(st.integers(0, 10**6)),
            }  # fmt: skip
        else:
            clock = {"time_model": "ticks"}  # (then the roofline's coefficients)
        cfg = kvsim.SimConfig(
            policy=policy,
            num_blocks=draw(st.integers(40, 400)),
            block_size=draw(st.sampled_from([4, 16, 32, 64])),
            enable_prefix_caching=caching,
            max_num_seqs=seqs,
            max_num_batched_tokens=draw(st.sampled_from([64, 512, 2048])),
            **clock,
        )
        if time == "roofline":
            from kvsim.model.timing import FULL, AttentionClass, RooflineTimeModel

            table = tuple(draw(st.lists(st.integers(0, 10**9), max_size=12)))
            kv = draw(st.integers(0, 10**6))
            cfg = cfg.with_roofline(
                RooflineTimeModel(
                    fixed_ps=draw(st.integers(0, 10**9) | st.integers(0, 10**7)),
                    seq_ps=draw(st.integers(0, 10**6)),
                    tok_ps=draw(st.integers(0, 10**6)),
                    dense_mem_ps=draw(st.integers(0, 10**8)),
                    dense_mem_tok_ps=0,
                    dense_flop_tok_ps=draw(st.integers(0, 10**6)),
                    moe_mem_ps=table,
                    moe_flop_tok_ps=draw(st.integers(0, 10**7)) if table else 0,
                    head_mem_ps=0,
                    head_flop_seq_ps=0,
                    attention=(AttentionClass(FULL, 0, kv, kv // 2),),
                    moe_senders=size,
                )
            )
        cfgs.append(cfg)
    return cfgs, size


@st.composite
def long_outputs(draw) -> Workload:
    """A few requests with long outputs (hundreds of decode steps each), most of them far apart."""
    n = draw(st.integers(1, 9))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0, 0.0, 0.001, 0.05, 0.5, 3.0]), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 1500), min_size=n, max_size=n))
    return Workload(arrival=np.cumsum(gaps), prompt_len=prompts, output_len=outputs)


@given(
    w=long_outputs(),
    fleet=quiet_fleets(),
    router=st.sampled_from(["round-robin", "least-loaded", "least-kv"]),
)
def test_long_quiet_spans_in_groups_equal_the_reference(w, fleet, router):
    """Every per-request column and every counter of each rank equal the reference's, which steps the group
    one step at a time, where the Rust groups take their quiet spans whole (ranks in lockstep, dummy ranks
    beside them, the slowest rank changing within a span)."""
    cfgs, size = fleet
    spec = dataclasses.replace(router_spec(cfgs[0]), name=router, dp_group=size)
    assert_backends_agree(w, cfgs, spec, size)  # (one group: `size` configs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_slowest_rank_changes_within_a_quiet_span(backend):
    """Two ranks under the linear model, round-robin: rank 0 (3 requests, c0 5 ms, 0.1 ns a context token)
    and rank 1 (2 requests, c0 1 ms, 10 ns a context token). Rank 0's steps are the slower at first, rank
    1's from the step where its context passes 400 keys; every step of the group lasts the larger, the
    group's end the sum of the larger of the two lines step by step, on each rank."""
    common = {"num_blocks": 400, "block_size": 16, "time_model": "linear", "c_tok_ps": 0, "max_num_seqs": 8}
    a = kvsim.SimConfig(**common, c0_ps=5 * MS, c_ctx_ps=100)
    b = kvsim.SimConfig(**common, c0_ps=MS, c_ctx_ps=10**7)
    w = rows([0, 0, 0, 0, 0], [10, 10, 10, 10, 10], [400, 400, 400, 400, 400])
    spec = dataclasses.replace(router_spec(a), name="round-robin", dp_group=2)
    cols, counters = run(prepare(w, a), [a, b], spec, backend)
    assert list(cols["replica"]) == [0, 1, 0, 1, 0]
    # The context is the keys computed after the step: step 0 prefills 10 a request (and samples each
    # first token), step j = 1..399 decodes to 10 + j a request: 3 (10 + j) on rank 0, 2 (10 + j) on rank 1.
    end = max(5 * MS + 100 * 3 * 10, MS + 10**7 * 2 * 10)
    lines = [(5 * MS + 100 * 3 * (10 + j), MS + 10**7 * 2 * (10 + j)) for j in range(1, 400)]
    assert lines[0][0] > lines[0][1]  # (the slower rank changes)
    assert lines[-1][0] < lines[-1][1]
    end += sum(max(x) for x in lines)
    assert list(cols["finish"]) == [end] * 5
    assert counters[0]["busy_ps"] == counters[1]["busy_ps"] == end
    assert [c["num_steps"] for c in counters] == [400, 400]


# -- what a user asks for, and what is refused -------------------------------------------------------------------
MOE = {"model": "qwen3-30b-a3b", "gpu": "h100-80gb", "enable_expert_parallel": True}


def test_dp_with_as_many_replicas_is_a_group():
    """data_parallel_size 2 with replicas 2 is vLLM's deployment: its ranks step together (one makespan);
    with replicas 4, two groups; replicas 1 stays one rank's engine given the whole workload."""
    from kvsim.engine.cluster import dp_group

    cfg = kvsim.SimConfig(**MOE, data_parallel_size=2)
    w = synthetic(40, arrival_rate=20.0, lengths="sharegpt-paper", seed=5)
    res = kvsim.simulate_cluster(w, cfg, replicas=2, router="least-loaded")
    assert res.summary["replicas"] == 2
    spans = [r.raw.counters["makespan_ps"] for r in res.replicas]
    assert spans[0] == spans[1]
    assert dp_group([cfg.replace(replicas=1)] * 4) == 2
    assert dp_group([cfg.replace(replicas=1)]) == 1
    apart = kvsim.SimConfig(**{**MOE, "enable_expert_parallel": False}, data_parallel_size=1)
    assert dp_group([apart] * 3) == 1


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"replicas": 3}, "replicas 3 with data_parallel_size 2: a mixture-of-experts model's DP ranks step"),
        (
            {"replicas": 2, "prefill_replicas": 1},
            "prefill_replicas 1 with data_parallel_size 2: a disaggregated fleet of data-parallel ranks",
        ),
        (
            # (one decode rank too: the prefill pool's ranks would step apart)
            {"replicas": 1, "prefill_replicas": 3},
            "prefill_replicas 3 with data_parallel_size 2: a disaggregated fleet of data-parallel ranks",
        ),
        (
            {"replicas": 2, "kv_offloading_size": 4.0},
            "kv_offloading_size with data_parallel_size 2 and replicas 2: a CPU tier on the ranks",
        ),
    ],
)
def test_what_dp_groups_do_not_model_is_refused(change, words):
    with pytest.raises(InvalidArgumentError, match=words):
        kvsim.SimConfig(**MOE, data_parallel_size=2, **change)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_engines_refuse_what_groups_do_not_model(backend):
    cfg = kvsim.SimConfig(num_blocks=100, block_size=16)
    w = rows([0], [10], [2])
    out = fleet_run(w, cfg, 3, 2, backend)
    assert out == ("raise", "dp_group 2: the 3 replicas must form whole data-parallel groups (a divisor of "
                   "the replica count, 1 for none)")  # fmt: skip
    tier = kvsim.SimConfig(
        num_blocks=100, block_size=16, kv_offloading_chunks=4, kv_offloading_ps_per_block=1
    )
    out = fleet_run(w, tier, 2, 2, backend)
    assert out[0] == "raise"
    assert "a CPU tier with data-parallel groups is not modelled" in out[1]


def test_a_list_of_ranks_must_share_its_dp_size():
    a = kvsim.SimConfig(**MOE, data_parallel_size=2)
    b = kvsim.SimConfig(**MOE, data_parallel_size=4)
    w = synthetic(4, seed=1)
    with pytest.raises(InvalidArgumentError, match="data_parallel_size 4 of config\\[1\\] differs"):
        kvsim.simulate_cluster(w, [a, b])


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            {"model": "gpt-oss-20b"},
            "model 'gpt-oss-20b' of config\\[1\\] differs from config\\[0\\]'s 'qwen3-30b-a3b'",
        ),
        ({"quantization": "fp8"}, "quantization 'fp8' of config\\[1\\] differs from config\\[0\\]'s None"),
        (
            {"tensor_parallel_size": 2},
            "tensor_parallel_size 2 of config\\[1\\] differs from config\\[0\\]'s 1",
        ),
        ({"enable_expert_parallel": True}, "enable_expert_parallel True of config\\[1\\] differs"),
        (
            {"time_model": "linear"},
            "time_model 'linear' of config\\[1\\] differs from config\\[0\\]'s 'roofline'",
        ),
    ],
)
def test_the_ranks_of_a_group_share_one_model_and_parallel_config(change, words):
    """vLLM's DP ranks are one `vllm serve`: one model (and its weights' quantization), one tp, one expert
    parallelism; kvsim's group step needs one time model. Refused naming the field and the group's ranks."""
    a = kvsim.SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb", data_parallel_size=2, max_model_len=8192)
    w = synthetic(4, seed=1)
    with pytest.raises(InvalidArgumentError, match=words + ".*config\\[0\\]..config\\[1\\] are one DP group"):
        kvsim.simulate_cluster(w, [a, a.replace(**change)])
    # the second group of a fleet is checked too
    with pytest.raises(InvalidArgumentError, match="of config\\[3\\] differs from config\\[2\\]'s"):
        kvsim.simulate_cluster(w, [a, a, a, a.replace(**change)])


def test_the_ranks_of_a_group_may_differ_in_memory_seats_and_gpu():
    """What a group's ranks may vary: memory, block size, caching, seats, and the GPU (vLLM's config does
    not name one; the group step takes the slowest rank's time); two groups may serve different models."""
    a = kvsim.SimConfig(model="qwen3-30b-a3b", gpu="h100-80gb", data_parallel_size=2, max_model_len=8192)
    w = synthetic(8, seed=1)
    other = a.replace(num_blocks=3000, block_size=32, enable_prefix_caching=False, max_num_seqs=8, gpu="h200")
    assert kvsim.simulate_cluster(w, [a, other]).summary["replicas"] == 2
    b = a.replace(model="gpt-oss-20b")
    assert kvsim.simulate_cluster(w, [a, a, b, b]).summary["replicas"] == 4


def test_the_cli_runs_a_dp_group_and_refuses_a_partial_one(capsys):
    argv = ["run", "qwen3-30b-a3b", "--gpu", "h100-80gb", "-dp", "2", "-ep", "--requests", "30", "--json"]
    assert main([*argv, "--replicas", "2"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["fleet"]["router"]["dp_group"] == 2
    spans = {r["makespan_s"] for r in out["fleet"]["per_replica"]}
    assert len(spans) == 1
    assert main([*argv[:-1], "--replicas", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "replicas 3 with data_parallel_size 2" in err[0]


@pytest.mark.parametrize(
    ("model", "given", "blamed", "ways"),
    [
        (
            ["qwen3-30b-a3b", "-dp", "2", "-ep"],
            ["--replicas", "2", "--kv-offloading-size", "64"],
            "argument --kv-offloading-size: kv_offloading_size with data_parallel_size 2",
            (["--replicas", "1"], ["-dp", "1"]),
        ),
        (
            ["qwen3-30b-a3b", "-dp", "2", "-ep"],
            ["--replicas", "2", "--prefill-replicas", "1"],
            "argument --prefill-replicas: prefill_replicas 1 with data_parallel_size 2",
            (["--prefill-replicas", None], ["-dp", "1"]),
        ),
        (
            ["--model", "llama-3.1-8b"],
            ["--replicas", "2", "--prefill-replicas", "1", "--kv-offloading-size", "64"],
            "argument --kv-offloading-size: kv_offloading_size with prefill_replicas 1",
            (["--prefill-replicas", None], ["--kv-offloading-size", None]),
        ),
    ],
)
def test_the_fleet_refusals_name_the_flag_and_a_way_forward(capsys, model, given, blamed, ways):
    """DP + CPU tier, DP + P/D and P/D + CPU tier (audit54 #14): one line naming the flag given (not the
    internal kv_offloading_chunks) and the flags to change; each way it names then runs."""
    argv = [
        "run",
        *model,
        "--gpu",
        "h100-80gb",
        "--workload",
        "mooncake-conversation",
        "--requests",
        "20",
        *given,
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert blamed in err[0]
    assert "kv_offloading_chunks" not in err[0]
    for flag, value in ways:
        assert f"({flag}" in err[0]
        way = list(argv)
        if flag in way:  # (the flag as given dropped, then set to the value the line names, if any)
            k = way.index(flag)
            del way[k : k + 2]
        if value is not None:
            way += [flag, value]
        assert main([*way, "--json"]) == 0, way
        capsys.readouterr()


def test_the_replica_search_refuses_dp_groups():
    """`smallest_replicas` bisects over counts, most of which are not whole DP groups: refused by name."""
    from kvsim.analysis.plan_smallest import smallest_replicas

    cfg = kvsim.SimConfig(**MOE, data_parallel_size=2)
    with pytest.raises(InvalidArgumentError, match="smallest replicas with data_parallel_size 2"):
        smallest_replicas(synthetic(4, seed=1), cfg, "ttft_p99:1s")


def test_the_split_search_and_the_cli_name_the_search_asked_for(capsys):
    """`--split` with -dp 2 said "smallest replicas with data_parallel_size 2", a search the user never
    asked for: `best_split` and `kvsim plan` name the split (or `--smallest replicas`) and the dp flag."""
    from kvsim.analysis.plan_pd import best_split

    cfg = kvsim.SimConfig(**MOE, data_parallel_size=2)
    with pytest.raises(InvalidArgumentError, match="a split search with data_parallel_size 2"):
        best_split(synthetic(4, seed=1), cfg, "ttft_p99:1s")
    argv = ["plan", "--model", "qwen3-30b-a3b", "--gpu", "h100-80gb", "-dp", "2", "--replicas", "2"]
    argv += ["--slo", "ttft_p99:2s", "--requests", "20", "--rate", "1"]
    for search, said in ((["--split"], "--split"), (["--smallest", "replicas"], "--smallest replicas")):
        assert main([*argv, *search]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert err.startswith(
            f"kvsim plan: error: argument -dp: {said} steps replica counts one at a time"
        ), err
        assert "smallest replicas with" not in err, err
        assert "drop it to search single-rank replicas" in err, err


def test_a_prefill_pool_of_dp_ranks_is_refused():
    """A prefill_config of DP ranks beside decode replicas of none: refused as a disaggregated fleet of DP
    ranks is (its ranks would step apart), naming the prefill config's field."""
    w = rows([0], [10], [2])
    decode = kvsim.SimConfig(**MOE, prefill_replicas=1)
    with pytest.raises(InvalidArgumentError, match="prefill_config's data_parallel_size 2: a disaggregated"):
        kvsim.simulate_cluster(w, decode, prefill_config=kvsim.SimConfig(**MOE, data_parallel_size=2))
