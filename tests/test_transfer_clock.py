"""A transfer's end is held to the simulated clock's range as a step's is (DESIGN.md §Time model, the
clock's range): a CPU-tier load, a CPU-tier store and a prefill-to-decode transfer that would end past
`MAX_TIME_PS` stop the run with the same error, naming the transfer, its blocks, its start and its knobs,
in both engines (the reference at once, the Rust core after the step), through `kvsim.simulate`,
`kvsim.simulate_cluster` and the CLI; a transfer ending exactly at the bound is not refused. A replica's
step past the clock stops a fleet, a disaggregated one included, with the same error in both engines.

The knobs' ranges: a link's latency and time a block are at most 2**40 ps (`MAX_COEFFICIENT_PS`;
pd_link_latency_s at most 2**40 ps in seconds); arrivals up to `MAX_TIME_PS` (2**62). So one transfer
starting at an arrival 2**39 ps before the clock's end and lasting 2**40 ps ends past it: that is how each
test below overflows. (Without the check a store past the clock went unnoticed, and a load or a transfer
made the engine jump past the clock and blame the time model's coefficients for the next step.)"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import kvsim
from kvsim.cli import main
from kvsim.engine.engine_input import prepare
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import MAX_TIME_PS
from kvsim.workloads import Workload

BACKENDS = ("rust", "reference")
LATE = (MAX_TIME_PS - (1 << 39)) / 1e12  # s: an arrival 2**39 ps (about 0.55 s) before the clock's end
TICK = 1_000_000_000  # ps: each step's time (ticks)
PAST = "would end past the simulated clock's range"


def workload(arrival: list[float], prompts: list[list[tuple[int, int]]], output: int = 1) -> Workload:
    """Requests with the given (segment id, length) prompts: equal segments are equal content."""
    offsets, ids, lens = [0], [], []
    for prompt in prompts:
        for i, n in prompt:
            ids.append(i)
            lens.append(n)
        offsets.append(len(ids))
    return Workload(
        arrival=arrival,
        output_len=[output] * len(prompts),
        seg_offsets=offsets,
        segment_id=np.array(ids, dtype=np.uint64),
        segment_len=lens,
    )


def tier(num_blocks: int, latency: int, per_block: int = 0) -> kvsim.SimConfig:
    return kvsim.SimConfig(
        num_blocks=num_blocks,
        block_size=16,
        iteration_time_ps=TICK,
        kv_offloading_chunks=16,
        kv_offloading_latency_ps=latency,
        kv_offloading_ps_per_block=per_block,
    )


def arrival_ps(w: Workload, cfg: kvsim.SimConfig, row: int) -> int:
    """The engines' arrival of `row` in picoseconds (the seconds' conversion, as they get it)."""
    return int(prepare(w, cfg).arrival_ps[row])


def errors(run) -> list[str]:
    """Each backend's error message (both must raise InvalidArgumentError)."""
    messages = []
    for backend in BACKENDS:
        with pytest.raises(InvalidArgumentError) as e:
            run(backend)
        messages.append(str(e.value))
    return messages


def finishes(run) -> None:
    for backend in BACKENDS:
        res = run(backend)
        assert (res.requests["status"] == "finished").all(), backend


# -- a CPU-tier store -------------------------------------------------------------------------------------------
# One request arriving late: its prompt's 4 blocks (64 tokens) are offered when its first step ends (at
# arrival + TICK) and stored over the link from then.
STORE_W = workload([LATE], [[(1, 64)]])


def test_a_store_ending_past_the_clock_stops_the_run_in_both_engines():
    per_block = 1000
    begin = arrival_ps(STORE_W, tier(64, 0), 0) + TICK
    bound = MAX_TIME_PS - begin - 4 * per_block  # the latency that ends the store at the clock's end
    assert 0 < bound < 1 << 40  # within the knob's range: the run is valid
    finishes(lambda b: kvsim.simulate(STORE_W, tier(64, bound, per_block), backend=b))
    rust, ref = errors(lambda b: kvsim.simulate(STORE_W, tier(64, bound + 1, per_block), backend=b))
    assert rust == ref
    assert rust.startswith(f"a CPU-tier store of 4 blocks starting at {begin} ps {PAST}"), rust
    assert "kv_offloading_latency_ps and kv_offloading_ps_per_block" in rust


def test_the_largest_knobs_store_past_the_clock_without_wrapping():
    """Latency and time a block both 2**40 (their largest): the store's end, 2**40 * 5 ps after its start,
    is past the clock, refused as such (no wrapped or negative end)."""
    big = 1 << 40
    rust, ref = errors(lambda b: kvsim.simulate(STORE_W, tier(64, big, big), backend=b))
    assert rust == ref
    assert rust.startswith("a CPU-tier store of 4 blocks"), rust


def test_a_step_past_the_clock_is_named_before_the_stores_it_would_offer():
    """A step whose own time ends past the clock offers no store (its stores would start past it): both
    engines name the step and the time model's coefficients, not the link's knobs."""
    cfg = dataclasses.replace(tier(64, 0), iteration_time_ps=1 << 40)
    rust, ref = errors(lambda b: kvsim.simulate(STORE_W, cfg, backend=b))
    assert rust == ref
    t = arrival_ps(STORE_W, cfg, 0)
    assert rust.startswith(f"step 0 starting at {t} ps {PAST}"), rust
    assert "the time model's coefficients" in rust


def test_a_finished_requests_last_store_past_the_clock_stops_the_run():
    """A finished request's last store offered in a step of its own, when nothing else is left to run (the
    Rust engine's idle path, then the run's end): two one-block requests, one seat, a tier of one chunk
    and steps of 2**40 ps. The first is stored from its step's end and lands as the second's step ends;
    the second's store, refused then (the tier's one chunk is in flight), is offered again once it
    finished, at arrival + 2 steps, and lasts 2**40 ps: past the clock's end."""
    big = 1 << 40
    w = Workload(
        arrival=[(MAX_TIME_PS - 2 * big - (1 << 39)) / 1e12] * 2, prompt_len=[16, 16], output_len=[1, 1]
    )

    def cfg(latency: int) -> kvsim.SimConfig:
        return kvsim.SimConfig(
            num_blocks=8,
            block_size=16,
            iteration_time_ps=big,
            max_num_seqs=1,
            kv_offloading_chunks=1,
            kv_offloading_prompt_only=False,
            kv_offloading_latency_ps=latency,
            kv_offloading_ps_per_block=0,
        )

    begin = arrival_ps(w, cfg(0), 1) + 2 * big
    rust, ref = errors(lambda b: kvsim.simulate(w, cfg(big), backend=b))
    assert rust == ref
    assert rust.startswith(f"a CPU-tier store of 1 blocks starting at {begin} ps {PAST}"), rust
    for backend in BACKENDS:  # half as long: both stores end within the range
        res = kvsim.simulate(w, cfg(big // 2), backend=backend)
        assert (res.requests["status"] == "finished").all(), backend
        assert (res.summary["stores"], res.summary["stores_failed"]) == (2, 1), backend


# -- a CPU-tier load --------------------------------------------------------------------------------------------
# A (64 tokens) is stored to the tier at 0; B (112 tokens, 7 blocks + 1 for its second token) takes the
# whole pool of 8 blocks at 10 s, evicting A's cached blocks; C, A's prompt again, arrives late: a GPU miss
# and a tier hit of 4 blocks, loaded from its arrival.
LOAD_W = workload([0.0, 10.0, LATE], [[(1, 64)], [(2, 112)], [(1, 64)]], output=2)


def test_a_load_ending_past_the_clock_stops_the_run_in_both_engines():
    start = arrival_ps(LOAD_W, tier(9, 0), 2)
    bound = MAX_TIME_PS - start  # the latency that ends the load at the clock's end
    assert 0 < bound < 1 << 40
    rust, ref = errors(lambda b: kvsim.simulate(LOAD_W, tier(9, bound + 1), backend=b))
    assert rust == ref
    assert rust.startswith(f"a CPU-tier load of 4 blocks starting at {start} ps {PAST}"), rust
    # At the bound the load is accepted; C's last token then needs a step from the clock's end: that
    # step is what overflows, named as a step.
    rust, ref = errors(lambda b: kvsim.simulate(LOAD_W, tier(9, bound), backend=b))
    assert rust == ref
    assert re.match(rf"step \d+ starting at {MAX_TIME_PS} ps {PAST}", rust), rust
    # Two TICKs earlier, C's two steps end at the bound: the run completes, C's blocks loaded from the tier.
    for backend in BACKENDS:
        res = kvsim.simulate(LOAD_W, tier(9, bound - 2 * TICK), backend=backend)
        assert (res.requests["status"] == "finished").all(), backend
        assert res.summary["loads"] == 1, backend
        assert int(res.requests["cpu_hit_tokens"][2]) == 63, backend


# -- a prefill-to-decode transfer -------------------------------------------------------------------------------
# One request of 17 tokens (one full block) arriving late on a fleet of one prefill and one decode replica:
# prefilled in one step, then its block moves over the decode replica's link from that step's end.
PD_W = Workload(arrival=[0.0, LATE], prompt_len=[17, 17], output_len=[2, 2])
PD_CFG = kvsim.SimConfig(num_blocks=64, block_size=16, iteration_time_ps=TICK)


def pd_run(per_block: int, latency_s: float = 0.0):
    return lambda b: kvsim.simulate_cluster(
        PD_W,
        PD_CFG,
        replicas=1,
        backend=b,
        prefill_replicas=1,
        pd_threshold_tokens=0,
        pd_link_latency_s=latency_s,
        pd_link_ps_per_block=per_block,
    )


def test_a_pd_transfer_ending_past_the_clock_stops_the_fleet_in_both_engines():
    start = arrival_ps(PD_W, PD_CFG, 1) + TICK
    bound = MAX_TIME_PS - start  # the time a block that ends the transfer at the clock's end
    assert 0 < bound < 1 << 40
    rust, ref = errors(pd_run(bound + 1))
    assert rust == ref
    assert rust.startswith(f"a prefill-to-decode KV transfer of 1 blocks starting at {start} ps {PAST}"), rust
    assert "pd_link_latency_s and pd_link_ps_per_block" in rust
    # Both link knobs at their largest: refused the same way.
    rust, ref = errors(pd_run(1 << 40, (1 << 40) / 1e12))
    assert rust == ref
    assert rust.startswith(f"a prefill-to-decode KV transfer of 1 blocks starting at {start} ps {PAST}"), rust
    # At the bound the transfer is accepted and the decode replica's step from the clock's end overflows.
    rust, ref = errors(pd_run(bound))
    assert rust == ref
    assert re.match(rf"step \d+ starting at {MAX_TIME_PS} ps {PAST}", rust), rust
    # Two TICKs earlier (the decode replica's step with the transfer's token, then one more): it completes.
    finishes(pd_run(bound - 2 * TICK))


# -- a fleet's clock --------------------------------------------------------------------------------------------
def test_a_replicas_step_past_the_clock_stops_a_fleet_with_the_same_error():
    cfg = kvsim.SimConfig(num_blocks=64, block_size=16, iteration_time_ps=1 << 40)
    w = Workload(arrival=[0.0, LATE], prompt_len=[17, 17], output_len=[2, 2])
    t = arrival_ps(w, cfg, 1)
    for extra in ({}, {"prefill_replicas": 1, "pd_threshold_tokens": 0, "pd_link_ps_per_block": 0}):
        rust, ref = errors(
            lambda b, extra=extra: kvsim.simulate_cluster(w, cfg, replicas=2, backend=b, **extra)
        )
        assert rust == ref, extra
        assert f"starting at {t} ps {PAST}" in rust, (extra, rust)
        assert "the time model's coefficients" in rust


# -- the CLI ----------------------------------------------------------------------------------------------------
def test_the_cli_reports_a_transfer_past_the_clock_in_one_line(capsys, tmp_path):
    """A trace replays from its first request: a row at 0 and one LATE later overflow as LATE does."""
    path = tmp_path / "late.csv"
    path.write_text(f"arrival,prompt_len,output_len\n0,4,1\n{LATE!r},64,1\n")
    argv = [
        "run",
        "--block-size",
        "16",
        "--num-blocks",
        "64",
        "--workload",
        str(path),
        "--kv-offloading-chunks",
        "16",
    ]
    argv += ["--kv-offloading-ps-per-block", "0", "--iteration-time-ps", str(TICK)]
    assert main([*argv, "--kv-offloading-latency-ps", "1000", "--json"]) == 0
    capsys.readouterr()
    assert main([*argv, "--kv-offloading-latency-ps", str(1 << 40)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "a CPU-tier store of 4 blocks starting at" in err[0], err
    assert PAST in err[0]
