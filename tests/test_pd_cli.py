"""What `kvsim run` and `kvsim plan` say of a prefill/decode disaggregated fleet (DESIGN.md §Prefill/decode
disaggregation; the engines' agreement and the fleet's behaviour are tests/test_pd.py's): the printed split
and its `--json` records, each pool's prefix hits, the prefill pool's own config (`--prefill-config`), the
not-memory-bound note judged on the decode replicas' own queue, and the one-line errors (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kvsim
from tests.test_pd import BACKENDS

RUN = ["run", "--requests", "80", "--num-gpu-blocks-override", "300", "--block-size", "4"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_kvsim_run_prints_the_split(capsys, backend):
    import json

    from kvsim.cli import main

    argv = [
        *RUN,
        "--backend",
        backend,
        "--replicas",
        "2",
        "--prefill-replicas",
        "1",
        "--pd-link-ps-per-block",
    ]
    argv += ["1000000", "--pd-link-latency", "50us", "--router", "least-loaded"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    section = out.split("== disaggregation: 1 prefill : 2 decode replicas; ", 1)[1].splitlines()
    assert [line.split()[0] for line in section[2:6]] == ["prefill", "prefill", "transfer+wait", "decode"]
    assert (
        section[6].lstrip().startswith("(transfer+wait: from its admission on the decode replica to the end")
    )
    assert section[7].lstrip().startswith("transfers: ")
    assert "link in use " in section[7]
    assert "% of the run (latency included), bandwidth used " in section[7]
    assert "busy time (busy / makespan): prefill replicas" in section[8]
    assert "busy imbalance (busier / idler side): " in section[9]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    pd = data["fleet"]["disaggregation"]
    assert pd["prefill_replicas"] == 1
    assert pd["pd_transfers"] > 0
    assert pd["ttft_transfer_p50_s"] >= 50e-6
    assert data["summary"]["pd_transfers"] == pd["pd_transfers"]
    assert main([*RUN, "--replicas", "2", "--json"]) == 0
    assert "disaggregation" not in json.loads(capsys.readouterr().out)["fleet"]
    # Every prompt under the threshold, prefilled on its decode replica: the split says its decode
    # queueing is then the whole TTFT (queue and prefill), not a wait.
    assert main([*argv, "--pd-threshold", "1000000"]) == 0
    out = capsys.readouterr().out
    assert "0 requests routed to a prefill replica, 80 prefilled locally" in out
    assert "its decode queue+step part is its whole TTFT, its queue and its prefill" in out


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        (["--prefill-replicas", "-1"], "argument --prefill-replicas: prefill_replicas -1"),
        (["--prefill-replicas", "1"], "pd_link_ps_per_block is needed without a model"),
        (["--pd-threshold", "x"], "argument --pd-threshold: pd_threshold_tokens 'x'"),
        (["--pd-link-bandwidth", "0"], "argument --pd-link-bandwidth: pd_link_bandwidth 0"),
        (["--pd-link-latency=-1ms"], "argument --pd-link-latency: pd_link_latency_s '-1ms'"),
        (
            ["--prefill-replicas", "1", "--pd-link-ps-per-block", "1", "--preemption-mode", "swap"],
            "preemption 'swap'",
        ),
    ],
)
def test_kvsim_run_disaggregation_errors_are_one_line_exit_2(capsys, flags, text):
    from kvsim.cli import main

    assert main([*RUN, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert text in err[0], err[0]


def test_a_link_too_slow_for_a_block_is_refused_by_the_flag_with_the_least_that_runs(capsys):
    """`--pd-link-bandwidth 10` (bytes per second, though a user likely meant 10 GB/s) makes a block's
    transfer outlast the engine's clock: one line naming the flag and its unit, the block's time in seconds
    and the least bandwidth that runs (no picoseconds: user audit 54 #10); that bandwidth runs, one a little
    below it is refused."""
    import re

    from kvsim.cli import main

    argv = ["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--workload", "sharegpt:arrival_rate=12",
            "--requests", "20", "--replicas", "2", "--prefill-replicas", "1"]  # fmt: skip
    assert main([*argv, "--pd-link-bandwidth", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "pd_link_bandwidth 10 B/s (--pd-link-bandwidth; a bare number is bytes per second)" in err[0]
    assert (
        "moves a block of 8 MiB in 838,860.8 s, more than the 1.0995 s a block's transfer may last" in err[0]
    )
    assert " ps" not in err[0]
    least = re.search(r"give at least (\S+) MB/s", err[0])
    assert least, err[0]
    assert main([*argv, "--pd-link-bandwidth", f"{least.group(1)}MB/s"]) == 0
    capsys.readouterr()
    below = float(least.group(1)) - 0.01
    assert main([*argv, "--pd-link-bandwidth", f"{below:.2f}MB/s"]) == 2
    assert f"give at least {least.group(1)} MB/s" in capsys.readouterr().err


def test_kvsim_run_gives_the_prefill_pool_its_own_config(capsys):
    """`--prefill-config gpu=b200,...` sizes and prices the prefill pool as its own GPU (printed as
    `prefill pool: ...`), and the run is `simulate_cluster(..., prefill_config=)` with that config; a bad
    pair, an unknown knob, a knob both pools must share, and the flag without a prefill pool are one-line
    errors naming the flag (exit 2)."""
    from kvsim.cli import main
    from kvsim.workloads.registry import make_workload, parse_workload

    base = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "sharegpt:arrival_rate=12"]
    base += ["--requests", "120", "--replicas", "2", "--prefill-replicas", "1", "--json"]
    assert main([*base, "--prefill-config", "gpu=b200,max_num_batched_tokens=16384"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prefill_pool"].startswith("pool: ")
    assert "b200" in out["prefill_pool"]
    assert "b200" in out["prefill_time"]
    # (profiled, as the decode side's: vLLM 0.34.0 keeps NIXL's pools off the extensible KV cache, no IMEX)
    assert "b200 × 0.92 − " in out["prefill_pool"]
    assert "measured after warmup" not in out["prefill_pool"]
    cfg = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", replicas=2, prefill_replicas=1)
    pre = kvsim.SimConfig(
        model="llama-3.1-8b", gpu="b200", max_num_batched_tokens=16384, kv_cache_sizing="profiled"
    )
    w = make_workload(*parse_workload("sharegpt:arrival_rate=12"), 120, 0)  # the run's workload
    want = kvsim.simulate_cluster(w, cfg, prefill_config=pre).summary
    assert out["summary"]["ttft_prefill_p50_s"] == pytest.approx(want["ttft_prefill_p50_s"])
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "prefill_pool" not in plain
    assert (
        plain["summary"]["ttft_prefill_p50_s"] > out["summary"]["ttft_prefill_p50_s"]
    )  # a B200 prefills faster
    for bad, says in (
        ("gpu", "is not KNOB=VALUE"),
        ("foo=1", "unknown SimConfig field 'foo'"),
        ("max_model_len=1024", "max_model_len"),
    ):
        assert main([*base, "--prefill-config", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("kvsim run: error: argument --prefill-config:")
        assert says in err
        assert "\n" not in err
    no_pool = [a for a in base if a not in ("--prefill-replicas", "1")]
    assert main([*no_pool, "--prefill-config", "gpu=b200"]) == 2
    assert "no prefill pool" in capsys.readouterr().err
    # One replica: refused too (it ran as an ordinary replica, printing a prefill pool it never had).
    one = [a for a in no_pool if a not in ("--replicas", "2")]
    assert main([*one, "--prefill-config", "gpu=b200"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvsim run: error: argument --prefill-config:")
    assert "no prefill pool: give --prefill-replicas N" in err


def test_kvsim_plan_refuses_a_prefill_config_it_would_not_use(capsys):
    """The search runs every replica on the decode config: `--prefill-config` was parsed and ignored."""
    from kvsim.cli import main

    argv = ["plan", "--num-gpu-blocks-override", "64", "--requests", "30", "--slo", "ttft_p99:1s",
            "--replicas", "2", "--prefill-replicas", "1", "--pd-link-ps-per-block", "10"]  # fmt: skip
    for extra in ([], ["--split"]):
        assert main([*argv, *extra, "--prefill-config", "num_blocks=2"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("kvsim plan: error: argument --prefill-config: kvsim plan searches fleets")
        assert "\n" not in err


def test_kvsim_run_shows_each_pools_prefix_hits(capsys):
    """The cache table labels each pool's rate and the fleet's; the fleet table has a row for each prefill
    replica; `--json` carries the keys and each prefill replica's record."""
    from kvsim.cli import main

    argv = [*RUN, "--replicas", "2", "--prefill-replicas", "2", "--pd-link-ps-per-block", "1000"]
    argv += ["--workload", "sharegpt:system_prompt_len=64,num_system_prompts=2", "--router", "round-robin"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    s = data["summary"]
    assert s["prefill_prefix_hit_rate"] > 0
    pre = data["fleet"]["per_prefill_replica"]
    assert sum(x["requests"] for x in pre) == s["pd_disaggregated"] == 80
    assert sum(x["prefix_hit_tokens"] for x in pre) == s["prefill_prefix_hit_tokens"]
    assert sum(x["prompt_tokens"] for x in pre) == s["prefill_prompt_tokens"]
    assert data["fleet"]["disaggregation"]["decode_prefix_hit_rate"] == s["decode_prefix_hit_rate"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for key, label in (
        ("prefill_prefix_hit_rate", "prefix hit rate, prefill replicas"),
        ("decode_prefix_hit_rate", "prefix hit rate, decode replicas"),
        ("prefix_hit_rate", "prefix hit rate, both pools"),
    ):
        line = next(x for x in out.splitlines() if x.strip().startswith(label))
        assert line.split()[-2] == f"{100 * s[key]:.1f}", line
    assert "== fleet: 2 decode and 2 prefill replicas" in out
    rows = [x.split() for x in out.splitlines() if x.strip().startswith(("p0 ", "p1 "))]
    assert [(x[0], int(x[1])) for x in rows] == [("p0", pre[0]["requests"]), ("p1", pre[1]["requests"])]
    assert [x[4] for x in rows] == [f"{100 * p['prefix_hit_rate']:.1f}" for p in pre]


def _pd_notes(prefill_blocks: int | None = None, **over) -> tuple[list[str], object]:
    from kvsim.analysis.run_report import run_notes
    from kvsim.workloads.registry import make_workload

    w = make_workload("sharegpt", {"arrival_rate": 12}, 300, 0)
    # (blocks of 16: "a prefill pool of 100 blocks" below is 1,600 tokens)
    cfg = kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb", block_size=16, **over)
    prefill = None if prefill_blocks is None else cfg.replace(num_blocks=prefill_blocks)
    r = kvsim.simulate_cluster(
        w, cfg, replicas=3, prefill_replicas=1, router="least-loaded", prefill_config=prefill
    )
    notes: list[str] = []
    run_notes(r, w, {"name": "sharegpt"}, notes)
    return [n for n in notes if n.startswith("not memory-bound")], r


def test_the_not_memory_bound_note_judges_the_decode_replicas_by_their_own_queue():
    """A P/D fleet's `queueing_s` runs from arrival to the decode replica's first step, the remote prefill
    and the transfer in it: 12 requests/s of ShareGPT on 1 : 3 H100s queued p99 18.6 ms that way, and the
    note said they waited for the token budget, where the decode batch averaged 6 sequences. It judges the
    decode replicas by their own queue (from the hand-off, less the transfer) and names the remote parts."""
    (note,), r = _pd_notes()
    s, q = r.summary, r.requests.filter(r.requests["status"] == "finished")
    wait = (q["first_scheduled"] - q["arrival"]).to_numpy()
    for name in ("ttft_prefill_queue_s", "ttft_prefill_s", "ttft_transfer_s"):
        wait = wait - q[name].to_numpy()
    decode = float(np.percentile(np.maximum(wait, 0), 99))
    # The whole queueing is over the note's 1 % of the median end-to-end latency (what made it blame the
    # token budget); the decode replicas' own part is under it.
    assert s["queueing_s_p99"] > 0.01 * s["e2e_s_p50"] > decode
    assert f"barely queued on their decode replicas (p99 {1000 * decode:.1f} ms, from the hand-off" in note
    assert "token budget" not in note
    for part, key in (
        ("prefill queueing", "ttft_prefill_queue"),
        ("prefill", "ttft_prefill"),
        ("transfer+wait", "ttft_transfer"),
    ):
        assert f"{part} p99 {1000 * s[f'{key}_p99_s']:,.1f} ms" in note
    # Decode replicas of 2 seats each: requests queue there, and the note says so, naming the seats.
    (note,), r = _pd_notes(max_num_seqs=2)
    assert "requests queued on their decode replicas (p99 " in note
    assert "the batch reached max_num_seqs (2 sequences" in note
    # A prefill pool of 100 blocks (1,600 tokens), where a long prompt's admission can wait for blocks:
    # the memory knobs may change the answer, so no note says they cannot.
    notes, r = _pd_notes(prefill_blocks=100)
    assert notes == []
    assert _pd_notes(prefill_blocks=400)[0]  # (400 blocks: calm again)


def test_kvsim_run_json_records_the_prefill_replicas_config(capsys):
    """`--json` of a P/D fleet carried the prefill pool's lines only (and argv): now the prefill replicas'
    whole config, read back by SimConfig.from_dict, their own with --prefill-config, else the decode's."""
    from kvsim.cli import main
    from kvsim.model.config import SimConfig

    argv = ["run", "--block-size", "16", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--replicas", "1", "--prefill-replicas", "1",
            "--requests", "8", "--json"]  # fmt: skip
    assert main([*argv, "--prefill-config", "block_size=32,max_num_seqs=4"]) == 0
    data = json.loads(capsys.readouterr().out)
    pre, dec = SimConfig.from_dict(data["prefill_config"]), SimConfig.from_dict(data["config"])
    assert (pre.block_size, pre.max_num_seqs) == (32, 4)
    assert (dec.block_size, dec.max_num_seqs) != (32, 4)
    assert dec.block_size == 16
    assert pre.model == dec.model == "llama-3.1-8b"
    assert main(argv) == 0  # without --prefill-config: the decode replicas' config, theirs too
    data = json.loads(capsys.readouterr().out)
    assert data["prefill_config"] == data["config"]
    assert (
        main(
            [
                "run",
                "--block-size",
                "16",
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "h100-80gb",
                "--requests",
                "4",
                "--json",
            ]
        )
        == 0
    )
    assert "prefill_config" not in json.loads(capsys.readouterr().out)  # (no prefill replicas)


def test_a_pd_fleets_queueing_row_says_it_holds_the_remote_prefill(capsys):
    """audit54 #18: in a P/D fleet `queueing_s` (first scheduled on the decode replica − arrival, which
    plan's queueing_* SLOs bound) holds the prefill queueing, the prefill and the transfer: the latency
    row is PRE-DECODE there, its cells the summary's, and no aggregated run's QUEUEING row changes."""
    from kvsim.cli import main

    argv = ["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--workload", "sharegpt:arrival_rate=12"]
    argv += ["--requests", "200", "--replicas", "3", "--prefill-replicas", "1", "--router", "least-loaded"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, x in enumerate(out) if x.startswith("== latency"))
    cols = out[head + 1].split()
    row = next(x for x in out[head:] if x.startswith("  PRE-DECODE")).split()[1:]
    assert not any(x.startswith("  QUEUEING") for x in out)
    note = out[out.index(next(x for x in out if x.startswith("  PRE-DECODE"))) + 1]
    assert note.startswith(
        "  (PRE-DECODE, a disaggregated fleet: first scheduled on the decode replica - arrival"
    )
    assert "kvsim plan's queueing_* SLOs bound on such a fleet" in note
    assert main([*argv, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    shown = dict(zip(cols, row, strict=True))
    for col, key in (("mean", "mean"), ("median", "p50"), ("p99", "p99")):
        assert float(shown[col].replace(",", "")) == pytest.approx(1000 * s[f"queueing_s_{key}"], rel=1e-3)
    # It holds the remote parts: its median is above the prefill queueing's (0 here) by the prefill at least.
    assert s["queueing_s_p50"] >= s["ttft_prefill_p50_s"] > s["ttft_prefill_queue_p50_s"]
    # The same flags without a prefill pool: QUEUEING, as before.
    assert main([*argv[:-4], "--router", "least-loaded"]) == 0
    assert any(x.startswith("  QUEUEING") for x in capsys.readouterr().out.splitlines())


def test_a_split_plan_says_what_queueing_bounds_on_each_fleet():
    """`kvsim plan --split` with a queueing_* SLO says it bounds the remote prefill and the transfer too
    on the disaggregated fleets (audit54 #18); without one it says nothing of it."""
    import polars as pl

    from kvsim.analysis.plan_pd import SplitPlan
    from kvsim.analysis.plan_search import PlanResult
    from kvsim.analysis.plan_slo import SLO

    for slo, said in ((SLO("queueing_p99", 0.5), True), (SLO("ttft_p99", 1.0), False)):
        search = PlanResult("replicas", 1, (None, 1), 0.0, "converged", (slo,), pl.DataFrame())
        text = SplitPlan(40.0, 1, 4, 1, (1, 1), search, {1: search}, (slo,)).message
        line = "queueing_*: on a disaggregated fleet first scheduled on the decode replica - arrival"
        assert (line in text) is said, text


def test_the_pre_decode_row_keeps_every_digit_of_a_long_figure():
    """reread54: the PRE-DECODE label takes 2 characters of the first cell's width; a figure of 10
    characters or more (a mean of 1,234,567.8 ms) must widen the row, not lose its leading digits."""
    from kvsim.analysis.run_report import _queueing_row

    summary = {"queueing_s_mean": 1234.5678, "queueing_s_p50": 2.0, "queueing_s_p99": 3.0}
    cols = ["mean", "median", "p99"]
    assert _queueing_row(summary, cols, pd=True)[0].split() == [
        "PRE-DECODE",
        "1,234,567.8",
        "2,000.0",
        "3,000.0",
    ]
    assert _queueing_row(summary, cols)[0].split() == ["QUEUEING", "1,234,567.8", "2,000.0", "3,000.0"]
    # Short figures line up with the aggregated run's row: the same right edges.
    short = {"queueing_s_mean": 0.5}
    assert len(_queueing_row(short, cols, pd=True)[0]) == len(_queueing_row(short, cols)[0])
