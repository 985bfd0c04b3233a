"""A review of `kvsim plan`'s answers: a rate that passed only as a burst (its queue growing through the
run, `kvsim run`'s overloaded note) says so; `--compare` ties candidates its searches cannot order, names
no best between bursts, and `--json`'s `best` is null when the text says there is none; a memory search
does not answer a pool vLLM refuses (`--kv-cache-memory-bytes` below one request of `max_model_len`);
the two ends of a bracket read as two; a second `--compare` is refused; counts agree with their nouns."""

from __future__ import annotations

import functools
import json

import polars as pl
import pytest

import kvsim
from kvsim.analysis.plan import at_rate, workload_rate
from kvsim.analysis.plan_compare import Candidate, best_of
from kvsim.analysis.plan_pd import SplitPlan
from kvsim.analysis.plan_search import SLO, PlanResult
from kvsim.analysis.plan_smallest import smallest_memory
from kvsim.analysis.steady_state import queue_growth
from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from kvsim.model.units import fmt_count
from kvsim.workloads.registry import make_workload, parse_workload

# The review's burst: 300 ShareGPT-like requests on Llama-3.1-70B at tp 4 pass up to 612.8 req/s, where
# they are served at 11.7 req/s (3,000 requests: 41.7 req/s; 10,000: 36.1).
BURST = ["--model", "llama-3.1-70b", "--gpu", "h100-80gb", "-tp", "4", "--workload", "sharegpt"]
BURST_SLOS = ["--slo", "ttft_p99:2s", "--slo", "tpot_p99:100ms", "--workers", "2"]


def _workload(n: int = 60, rate: float = 2.0) -> kvsim.Workload:
    return kvsim.workloads.synthetic(
        n, arrival_rate=rate, seed=0, lengths="sharegpt-paper", max_model_len=2048
    )


def _knee_probe(workload, config, *, knee: float, overloaded: bool = False) -> dict:
    """A stand-in probe: `ttft_s_p99` = rate / knee, so `ttft_p99 <= 1 s` holds up to `knee`; every run
    `overloaded` or none."""
    rate = workload_rate(workload)
    return {"ttft_s_p99": rate / knee, "completed": len(workload), "rejected": 0, "overloaded": overloaded}


# ------------------------------------------------------------------------------------------- bursts


def test_a_rate_that_passed_as_a_burst_says_so(capsys):
    """user52 finding 8: the search's knee ran overloaded by `kvsim run`'s own rule (`queue_growth`), so the
    answer is no knee: status `burst`, the knee kept as `burst_rate` (named a burst in the message), and
    `value` (and `servable_rate`) the highest rate that passed in a steady run, a rate no overloaded run
    served less than; `kvsim run` at the knee says overloaded too."""
    argv = ["plan", *BURST, "--requests", "300", *BURST_SLOS]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "burst"
    # (`burst` and `steady` say the answer's probe, a steady pass: the burst is the status and `burst_rate`)
    assert out["burst"] is False
    assert out["steady"] is True
    knee = out["burst_rate"]
    assert out["bracket"][0] == knee
    (at_knee,) = [p for p in out["probes"] if p["rate"] == knee]
    assert at_knee["overloaded"] is True
    assert at_knee["passed"] is True
    assert at_knee["served_rps"] < 0.1 * knee  # (served far below the rate it passed at)
    rate = out["value"]
    assert rate is not None
    assert rate < knee
    assert out["servable_rate"] == rate  # (nothing set aside: the answer's own rate)
    (answer,) = [p for p in out["probes"] if p["rate"] == rate]
    assert answer["passed"] is True
    assert answer["steady"] is True
    # The highest steady pass: every probe between it and the knee passed, none in a steady run.
    between = [p for p in out["probes"] if rate < p["rate"] <= knee]
    assert between
    assert all(p["passed"] and p["steady"] is False for p in between)
    # A rate the configuration sustains: below what every overloaded run served.
    served = [p["served_rps"] for p in out["probes"] if p["overloaded"]]
    assert served
    assert rate < min(served)
    assert out["steady"] is True
    assert out["message"].startswith(
        "highest rate meeting ttft_p99 <= 2 s, tpot_p99 <= 0.1 s in a steady run: "
    )
    assert f"the search's knee, {knee:.4g} req/s" in out["message"]
    assert "passed only as a burst" in out["message"]
    assert "--requests" in out["message"]
    # The same rule as kvsim run's note, on the same run.
    w = make_workload(*parse_workload("sharegpt"), 300, 0)
    cfg = kvsim.SimConfig(model="llama-3.1-70b", gpu="h100-80gb", tensor_parallel_size=4)
    assert queue_growth(kvsim.simulate(at_rate(w, knee), cfg)) is not None
    assert main(["run", *BURST, "--requests", "300", "--request-rate", f"{knee}"]) == 0
    assert any(line.startswith("note: overloaded: ") for line in capsys.readouterr().out.splitlines())
    assert main(argv) == 0
    text = capsys.readouterr().out.splitlines()
    (header,) = [line for line in text if line.startswith("round")]
    assert header.split()[-1] == "steady"
    (row,) = [line for line in text if line.split()[1:2] == [f"{knee:.4g}"]]
    assert row.split()[-1] == "NO:overloaded"
    (last,) = [line for line in text if line.startswith("burst: ")]
    assert last.startswith(
        f"burst: highest rate meeting ttft_p99 <= 2 s, tpot_p99 <= 0.1 s in a steady run: {rate:.4g} req/s"
    )
    assert not any(line.startswith("converged: ") for line in text)


def test_the_users_burst_headline_is_a_sustained_rate(capsys):
    """user52 finding 8 as reported: 1,000 ShareGPT-like requests on Llama-3.1-8B headlined 1087 req/s
    (`value`, `servable_rate`, `converged`) from a run that served 63.56; 2,000 headlined 122.6. Both
    answers are now the highest steady pass, below every overloaded run's served rate, and the burst's
    knee, which moves with the request count, is only `burst_rate`."""
    argv = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "sharegpt",
            "--slo", "ttft_p99:2s", "--slo", "tpot_p99:50ms", "--workers", "2", "--json"]  # fmt: skip
    knees = []
    for n in ("1000", "2000"):
        assert main([*argv, "--requests", n]) == 0
        out = json.loads(capsys.readouterr().out)
        if out["status"] != "burst":  # (a knee the search found in a steady run needs no such answer)
            assert out["burst"] is False
            assert out["burst_rate"] is None
            continue
        served = min(p["served_rps"] for p in out["probes"] if p["overloaded"])
        assert out["burst_rate"] > served  # (the old headline: above what the configuration served)
        assert out["value"] is not None
        assert out["value"] < served
        assert out["servable_rate"] == out["value"]
        knees.append(out["burst_rate"])
    assert knees  # (the reported case is a burst at 1,000 requests at least)


def test_a_steady_answer_has_no_burst_caveat():
    """Probes whose queue did not grow leave the answer as it was: no flag, no caveat, no column. Where
    every run was overloaded (a stand-in probe), the knee is only `burst_rate`: no rate passed in a steady
    run, so `value` is None and the status `burst`."""
    probe = functools.partial(_knee_probe, knee=5.0)
    r = kvsim.plan(_workload(), kvsim.SimConfig(num_blocks=64), {"ttft_p99": 1.0}, probe=probe, workers=2)
    assert r.status == "converged"
    assert not r.burst
    assert r.burst_rate is None
    assert "STEADY" not in r.message
    assert "overloaded" not in r.table()
    bursty = kvsim.plan(
        _workload(),
        kvsim.SimConfig(num_blocks=64),
        {"ttft_p99": 1.0},
        probe=functools.partial(_knee_probe, knee=5.0, overloaded=True),
        workers=2,
    )
    assert not bursty.burst  # (no answer: the burst is the status and `burst_rate`)
    assert bursty.status == "burst"
    assert bursty.burst_rate == r.value
    assert bursty.value is None
    assert bursty.servable_rate is None
    assert bursty.message.startswith("no rate probed meets ttft_p99 <= 1 s in a steady run")
    assert "NOT A STEADY STATE" in bursty.message
    assert bursty.to_dict()["burst_rate"] == r.value
    from kvsim.analysis.plots_plan import plan_finding

    assert plan_finding(bursty).startswith(
        f"highest steady passing rate none; knee {bursty._fmt(r.value)} passed only as a burst"
    )


# ------------------------------------------------------------------------------------------ compare


def _compare(knees: dict[str, float], bursts: tuple[str, ...] = ()) -> object:
    candidates = [
        Candidate(name, {}, functools.partial(_knee_probe, knee=k, overloaded=name in bursts))
        for name, k in knees.items()
    ]
    return best_of(_workload(), kvsim.SimConfig(num_blocks=64), {"ttft_p99": 1.0}, candidates, workers=2)


def test_candidates_whose_searches_cannot_be_ordered_tie():
    """A tie is candidates whose searches cannot order them: one failed at no rate up to the other's
    answer (its bracket reaches it), whether the two answers are equal or not; knees 0.8 % apart whose
    probes separate them (one failed where the other passed) stay ordered, and the best line says the lead
    is below the precision; knees 20 % apart are ordered, no remark."""
    from kvsim.analysis.plan_compare import _reaches
    from kvsim.cli.plan import _best_line

    same = _compare({"a": 5.0, "b": 5.0})
    assert same.tied == ["a", "b"]
    assert same.decided is None
    assert _best_line(same, 60).startswith("best: a tie at ")
    top = PlanResult("rate", 5.03, (5.03, 5.10), 0.02, "converged", (), pl.DataFrame())
    overlapping = PlanResult("rate", 5.00, (5.00, 5.08), 0.02, "converged", (), pl.DataFrame())
    below = PlanResult("rate", 4.99, (4.99, 5.03), 0.02, "converged", (), pl.DataFrame())
    assert _reaches(overlapping, top.value)
    assert not _reaches(below, top.value)
    close = _compare({"a": 5.0, "b": 5.04})
    ra, rb = close.plans["a"], close.plans["b"]
    assert ra.bracket[1] <= rb.value  # (a failed where b passed)
    assert close.tied == ["b"]
    assert close.decided == "b"
    line = _best_line(close, 60)
    assert line.startswith(
        "best: b (ahead of a by 0.86 %, less than the searches' 2 % precision: a failed at "
    )
    apart = _compare({"a": 5.0, "b": 6.0})
    assert apart.tied == ["b"]
    assert apart.best == apart.decided == "b"
    assert _best_line(apart, 60) == "best: b"


def test_no_best_between_bursts():
    """A burst decides nothing: b passed up to 6 req/s only in overloaded runs, so its rate is no steady
    pass (`value` None, status `burst`) and ranks below a's 5, but nothing shows b's sustained knee below
    a's, so the two tie and `decided` is None; the best line names b's burst knee beside its missing steady
    pass. `bursts` is for an answer whose own run was overloaded: b's status `burst` answer is not one."""
    from kvsim.cli.plan import _best_line

    out = _compare({"a": 5.0, "b": 6.0}, bursts=("b",))
    assert out.plans["b"].status == "burst"
    assert out.plans["b"].value is None
    assert out.best == "a"
    assert out.tied == ["a", "b"]
    assert out.bursts == []
    assert out.decided is None
    # (the table's `burst` says the answer's own probe, as `--json`'s: b has no answer, its burst is its status)
    assert out.table.filter(pl.col("candidate") == "b")["burst"].to_list() == [False]
    assert out.table.filter(pl.col("candidate") == "b")["status"].to_list() == ["burst"]
    assert out.table.filter(pl.col("candidate") == "b")["rate"].to_list() == [None]
    knee = out.plans["b"].burst_rate
    line = _best_line(out, 60)
    assert line.startswith("best: a tie between a (")
    assert f"b (no steady pass, burst: its knee {knee:.4g} req/s passed only as a burst)" in line
    steady_best = _compare({"a": 5.0, "b": 6.0}, bursts=("a",))
    assert steady_best.decided == "b"


def _steady_then_burst(workload, config) -> dict:
    """b of the review's reproduction: knee 99.9 req/s, every run above 8.5 req/s overloaded."""
    rate = workload_rate(workload)
    return {"ttft_s_p99": rate / 99.9, "completed": len(workload), "rejected": 0, "overloaded": rate > 8.5}


def test_a_steady_pass_beside_a_burst_knee_decides(capsys):
    """reread52 item 1: a converges near 5 req/s (failing at about 5.04); b's knee, near 99.9, passed
    only as a burst, and its answer is its highest steady pass, 8, which beats a's knee: b's answer
    is a steady state, not a burst, so b is decided best, and the best line calls nothing a burst."""
    from kvsim.cli.plan import _best_line

    candidates = [
        Candidate("a", {}, functools.partial(_knee_probe, knee=5.0)),
        Candidate("b", {}, _steady_then_burst),
    ]
    out = best_of(_workload(), kvsim.SimConfig(num_blocks=64), {"ttft_p99": 1.0}, candidates, workers=2)
    b = out.plans["b"]
    assert b.status == "burst"
    assert b.burst_rate is not None
    assert b.burst_rate > 90
    assert b.value is not None
    assert 5.04 < b.value <= 8.5
    assert out.plans["a"].bracket[1] < b.value  # (a failed where b's steady run passed)
    assert out.bursts == []
    assert out.tied == ["b"]
    assert out.decided == "b"
    line = _best_line(out, 60)
    assert line == "best: b"
    assert "burst" not in line


def _overloaded_above(workload, config, *, knee: float, above: float) -> dict:
    """A knee at `knee` req/s whose runs above `above` req/s are overloaded but served at 3/4 of their rate:
    an overloaded answer kept as `converged` (`PlanResult.burst`), not a status `burst`."""
    rate = workload_rate(workload)
    return {
        "ttft_s_p99": rate / knee,
        "completed": len(workload),
        "rejected": 0,
        "overloaded": rate > above,
        "throughput_rps": 0.75 * rate,
    }


def test_an_overloaded_answer_ranks_below_a_steady_one():
    """User audit 54 finding 16: 1 replica's overloaded pass at 8.543 req/s ranked above 2 replicas'
    steady 5.863, the table saying one GPU sustains more than two (2 replicas serve 8.543 req/s with TTFT
    p99 0.93 s, 1 replica overloaded). An answer whose own run was overloaded is a rate the configuration
    does not sustain: it ranks below every answer from a run that was not, whatever its rate, and still
    ties with it where its search reaches it (its sustained knee is not known to lie below), so nothing is
    decided; a steady answer above the overloaded one is decided as before."""
    from kvsim.cli.plan import _best_line

    def compare(steady_knee: float) -> object:
        candidates = [
            Candidate("a", {}, functools.partial(_overloaded_above, knee=8.5, above=6.0)),
            Candidate("b", {}, functools.partial(_knee_probe, knee=steady_knee)),
        ]
        return best_of(_workload(), kvsim.SimConfig(num_blocks=64), {"ttft_p99": 1.0}, candidates, workers=2)

    out = compare(6.0)
    a, b = out.plans["a"], out.plans["b"]
    assert a.status == "converged"
    assert a.burst
    assert not b.burst
    assert b.steady is not False
    assert a.value > b.value
    assert out.table["candidate"].to_list() == ["b", "a"]
    assert out.best == "b"
    assert out.tied == ["b", "a"]
    assert out.bursts == ["a"]
    assert out.decided is None
    line = _best_line(out, 60)
    assert line.startswith("best: none decided: the answer of a is a burst")
    assert "it ranks below the answers from runs that were not overloaded, whatever their rate" in line
    assert f"a ({a.value:.4g} req/s, converged, overloaded)" in line
    above = compare(10.0)
    assert above.table["candidate"].to_list() == ["b", "a"]
    assert above.decided == "b"
    assert _best_line(above, 60) == "best: b"


def test_the_audits_replica_comparison_ranks_the_steady_fleet_first(capsys):
    """The audit's command: 2 replicas' steady answer ranks above 1 replica's overloaded one; kvsim run at
    1 replica's answer finds 1 replica overloaded and 2 replicas within the SLO, not overloaded."""
    fleet = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--workload", "mooncake-conversation"]
    fleet += ["--requests", "300", "--max-model-len", "16384"]
    argv = ["plan", *fleet, "--workers", "2", "--slo", "ttft_p99:5s", "--compare", "replicas=1,2"]
    assert main([*argv, "--json"]) == 0
    compare = json.loads(capsys.readouterr().out)["compare"]
    assert [c["candidate"] for c in compare["candidates"]] == ["replicas=2", "replicas=1"]
    one = compare["plans"]["replicas=1"]
    assert one["burst"] is True
    assert one["value"] > compare["plans"]["replicas=2"]["value"]
    assert compare["best"] is None
    for replicas, overloaded in (("1", True), ("2", False)):
        assert (
            main(["run", *fleet, "--replicas", replicas, "--request-rate", repr(one["value"]), "--json"]) == 0
        )
        run = json.loads(capsys.readouterr().out)
        assert any(n.startswith("overloaded:") for n in run["notes"]) is overloaded
        if not overloaded:
            assert run["summary"]["ttft_s_p99"] <= 5.0


def test_json_best_is_null_when_the_text_says_tie(capsys):
    """The review's case: block sizes 16 and 32 both pass up to the cap; the text says a tie, and --json
    named block_size=16 'best'."""
    argv = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "100", "--workers", "2"]
    argv += ["--slo", "ttft_p99:1s", "--compare", "block_size=16,32"]
    assert main(argv) == 0
    (best,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("best: ")]
    assert best.startswith("best: a tie at ")
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    compare = out["compare"]
    assert compare["tied"] == ["block_size=16", "block_size=32"]
    assert compare["best"] is None
    assert compare["searched"] == "block_size=16"  # (whose search the top-level fields are)
    assert out["value"] == compare["plans"]["block_size=16"]["value"]


def test_a_second_compare_is_refused(capsys):
    argv = [
        "plan",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-80gb",
        "--requests",
        "10",
        "--slo",
        "ttft_p99:1s",
    ]
    code = main([*argv, "--compare", "kv_cache_dtype=auto,fp8", "--compare", "block_size=16,32"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "argument --compare: given 2 times" in err[0]


# ----------------------------------------------------------------------------- one request's memory


def test_kv_cache_memory_bytes_must_hold_one_request(capsys):
    """vLLM checks --kv-cache-memory-bytes as it checks profiled memory: 5,289,181,078 B holds 40,352 of
    Llama-3.1-8B's 131,072 tokens, which kvsim ran at 'Maximum concurrency ... 0.31x'. With a GPU the least
    that starts is the request's blocks and the null block; without one the pool is kvsim's experiment,
    run, and the run says vLLM refuses it; a pool in blocks stays an experiment."""
    with pytest.raises(InvalidArgumentError, match="To serve at least one request") as exc:
        kvsim.SimConfig(block_size=16, model="llama-3.1-8b", gpu="l40s", kv_cache_bytes=5_289_181_078)
    least = int(str(exc.value).split("needs at least ")[1].split(" B")[0].replace(",", ""))
    assert least == (131_072 // 16 + 1) * 16 * 128 * 1024  # 8,193 blocks of 2 MiB
    ok = kvsim.SimConfig(block_size=16, model="llama-3.1-8b", gpu="l40s", kv_cache_bytes=least)
    assert ok.pool.figures is not None
    assert ok.pool.figures.max_concurrency >= 1
    with pytest.raises(InvalidArgumentError, match="does not fit one request"):
        kvsim.SimConfig(block_size=16, model="llama-3.1-8b", gpu="l40s", kv_cache_bytes=least - 1)
    # A pool in blocks: run whatever it holds, and vLLM 0.33.0's check of the override's blocks kept (its
    # blocks less the null block must hold the request's 8,192: 8,193 start, 8,192 are refused).
    assert (
        kvsim.SimConfig(block_size=16, model="llama-3.1-8b", gpu="l40s", num_blocks=8193).pool.vllm_refusal
        is None
    )
    blocks = kvsim.SimConfig(block_size=16, model="llama-3.1-8b", gpu="l40s", num_blocks=8192)
    assert "estimated maximum model length is 131056" in blocks.pool.vllm_refusal
    assert (
        kvsim.SimConfig(block_size=16, model="llama-3.1-8b", num_blocks=8192).pool.vllm_refusal
        == blocks.pool.vllm_refusal
    )
    # vLLM v0 (its N blocks all usable, no null block): the context's 8,192 blocks start, 8,191 hold 131,056 tokens.
    v0 = kvsim.SimConfig.preset("vllm-v0", block_size=16, model="llama-3.1-8b", num_blocks=8192)
    assert v0.pool.vllm_refusal is None
    assert (
        "is 131056"
        in kvsim.SimConfig.preset(
            "vllm-v0", block_size=16, model="llama-3.1-8b", num_blocks=8191
        ).pool.vllm_refusal
    )
    # ... and one past the GPU: vLLM allocates the override's blocks after the weights and fails there.
    fit = blocks.pool.kv_room_bytes // (16 * 128 * 1024)
    assert (
        kvsim.SimConfig(block_size=16, model="llama-3.1-8b", gpu="l40s", num_blocks=fit).pool.vllm_refusal
        is None
    )
    past = kvsim.SimConfig(
        block_size=16, model="llama-3.1-8b", gpu="l40s", num_blocks=fit + 1
    ).pool.vllm_refusal
    assert "CUDA out of memory" in past
    assert f"at most {fit:,} blocks fit" in past
    assert main(["run", "--block-size", "16", "--model", "llama-3.1-8b", "--gpu", "l40s", "--num-gpu-blocks-override", "100",
                 "--requests", "5"]) == 0  # fmt: skip
    (note,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: vLLM refuses")]
    assert "estimated maximum model length is 1584" in note
    assert "given in blocks" in note
    argv = [
        "run",
        "--block-size",
        "16",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "l40s",
        "--kv-cache-memory-bytes",
        "5289181078",
    ]
    assert main([*argv, "--requests", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "To serve at least one request with the model's max seq len (131072)" in err[0]
    # Without a GPU: run, and said.
    assert (
        kvsim.SimConfig(block_size=16, model="llama-3.1-8b", kv_cache_bytes=least).pool.vllm_refusal is None
    )
    small = kvsim.SimConfig(block_size=16, model="llama-3.1-8b", kv_cache_bytes=least - 1)
    assert "To serve at least one request" in small.pool.vllm_refusal
    assert (
        main(
            [
                "run",
                "--block-size",
                "16",
                "--model",
                "llama-3.1-8b",
                "--kv-cache-memory-bytes",
                "1GiB",
                "--requests",
                "5",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("vllm: GPU KV cache size: 8,192 tokens") for line in out)
    (note,) = [line for line in out if line.startswith("note: vLLM refuses this pool at start-up")]
    assert "estimated maximum model length is 8176" in note
    assert main(["run", "--block-size", "16", "--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "1GiB", "--requests", "5",
                 "--max-model-len", "8176"]) == 0  # fmt: skip
    assert "vLLM refuses this pool" not in capsys.readouterr().out


def test_the_smallest_num_blocks_on_a_gpu_is_one_vllm_starts():
    """With a GPU, `--smallest num_blocks` answers an override vLLM 0.33.0 starts with: its blocks less the null
    block hold one request of max_model_len (16,384 tokens: 1,024 blocks and the null block); smaller values
    fail without a run."""
    w = make_workload(*parse_workload("sharegpt"), 40, 0)
    cfg = kvsim.SimConfig(block_size=16, model="llama-3.1-8b", gpu="l40s", max_model_len=16384)
    r = smallest_memory(w, cfg, {"ttft_p99": 1.0}, knob="num_blocks", rate=2.0, workers=2, max_probes=16)
    assert r.value is not None
    assert r.value >= 1025
    assert (
        kvsim.SimConfig(
            block_size=16, model="llama-3.1-8b", gpu="l40s", max_model_len=16384, num_blocks=r.value
        ).pool.vllm_refusal
        is None
    )
    refused = r.probes.filter(pl.col("refused").is_not_null())
    assert refused.height
    assert all("does not fit one request" in t for t in refused["refused"])
    assert all(v < 1025 for v in refused["num_blocks"])


def test_the_smallest_num_blocks_searches_no_more_blocks_than_fit_beside_the_weights():
    """`--smallest num_blocks` from an override past the GPU (40,000 blocks of 2 MiB, 78.1 GiB, beside
    Llama-3.1-8B's 15.0 GiB on an L40S: vLLM fails, CUDA out of memory) searches no higher than the blocks that
    fit beside the weights, `kv_room_bytes // bytes_per_block` (31,482,634,240 B // 2,097,152 = 15,012; not the
    starting override's 64 times), and its verdicts are monotone (every failing probe below every passing one)."""
    w = make_workload(*parse_workload("sharegpt"), 40, 0)
    cfg = kvsim.SimConfig(
        block_size=16, model="llama-3.1-8b", gpu="l40s", max_model_len=16384, num_blocks=40000
    )
    assert "at most 15,012 blocks fit" in cfg.pool.vllm_refusal
    cap = cfg.pool.kv_room_bytes // cfg.pool.layout.bytes_per_block
    assert cap == 15012
    r = smallest_memory(w, cfg, {"ttft_p99": 1.0}, knob="num_blocks", rate=2.0, workers=2, max_probes=16)
    probes = r.probes["num_blocks"].to_list()
    assert max(probes) == cap
    assert r.value is not None
    assert r.value <= cap
    failing = r.probes.filter(~pl.col("passed"))["num_blocks"]
    passing = r.probes.filter(pl.col("passed"))["num_blocks"]
    assert failing.max() < passing.min()


def test_the_smallest_pool_without_a_gpu_is_one_vllm_starts():
    """Without a GPU a pool in blocks or bytes below one request runs as kvsim's experiment, but a search's answer
    is a pool vLLM starts with: `--smallest num_blocks` and `kv_cache_bytes` at a 4,096-token context refuse
    the probes below one request and the null block (257 blocks; 257 blocks' bytes)."""
    w = make_workload(*parse_workload("sharegpt"), 40, 0)
    for knob, start, least in (
        ("num_blocks", {"num_blocks": 2000}, 257),
        ("kv_cache_bytes", {"kv_cache_bytes": 2000 * 2 * 2**20}, 257 * 2 * 2**20),
    ):
        cfg = kvsim.SimConfig(block_size=16, model="llama-3.1-8b", max_model_len=4096, **start)
        r = smallest_memory(w, cfg, {"ttft_p99": 10.0}, knob=knob, rate=1.0, workers=2, max_probes=16)
        assert r.value is not None
        assert r.value >= least
        assert cfg.replace(**{knob: r.value}).pool.vllm_refusal is None
        refused = r.probes.filter(pl.col("refused").is_not_null())
        assert refused.height
        assert all(v < least for v in refused[knob])


def test_the_smallest_kv_cache_bytes_is_one_vllm_starts():
    """`--smallest kv_cache_bytes` answered 4.9 GiB at the default max_model_len, a pool vLLM refuses:
    values below one request fail without a run, refused, and the answer starts."""
    w = make_workload(*parse_workload("sharegpt"), 40, 0)
    cfg = kvsim.SimConfig(model="llama-3.1-8b", gpu="l40s", max_model_len=16384)
    r = smallest_memory(w, cfg, {"ttft_p99": 1.0}, knob="kv_cache_bytes", rate=2.0, workers=2, max_probes=14)
    assert r.value is not None
    kvsim.SimConfig(model="llama-3.1-8b", gpu="l40s", max_model_len=16384, kv_cache_bytes=r.value)
    refused = r.probes.filter(pl.col("refused").is_not_null())
    assert refused.height
    assert all("does not fit one request" in t for t in refused["refused"])
    assert "refused by the configuration" in r.message


# ---------------------------------------------------------------------------------------- formatting


def _result(axis: str, lo: float, hi: float) -> PlanResult:
    value = lo if axis == "rate" else hi
    return PlanResult(axis, value, (lo, hi), 0.02, "converged", (SLO("ttft_p99", 1.0),), pl.DataFrame())


def test_the_bracket_ends_read_as_two():
    """The review's pair: 5,289,181,078 B passed and 5,244,112,693 B failed, printed '4.9 GiB (4.9 GiB
    fails)'."""
    msg = _result("kv_cache_bytes", 5_244_112_693, 5_289_181_078).message
    assert msg.endswith(": 4.93 GiB (4.88 GiB fails)")
    msg = _result("kv_cache_bytes", 2**30, 2**30 + 1).message  # (one byte apart)
    passes, fails = msg.split(": ")[-1].removesuffix(" fails)").split(" (")
    assert passes != fails
    msg = _result("rate", 3.37101, 3.37102).message
    assert "3.37101 req/s (passes; 3.37102 req/s fails;" in msg
    # Apart at the usual digits: as before.
    assert _result("rate", 3.371, 3.4).message.split(": ", 1)[1].startswith("3.371 req/s (passes; 3.4 req/s")


# -------------------------------------------------------------------------------------------- words


def test_a_quantization_the_checkpoint_lacks_names_the_preset():
    with pytest.raises(InvalidArgumentError) as exc:
        kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", quantization="awq")
    assert "model 'llama-3.1-8b' is not an AWQ checkpoint" in str(exc.value)
    assert "huggingface.co" not in str(exc.value)
    with pytest.raises(InvalidArgumentError, match="is not a GPTQ checkpoint"):
        kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", quantization="gptq_marlin")


def test_counts_agree_with_their_nouns():
    assert (fmt_count(1, "replica"), fmt_count(3, "GPU"), fmt_count(1024, "block")) == (
        "1 replica",
        "3 GPUs",
        "1,024 blocks",
    )
    search = PlanResult("replicas", 1, (None, 1), 0.0, "converged", (SLO("ttft_p99", 1.0),), pl.DataFrame())
    one = SplitPlan(40.0, 1, 4, 1, (1, 1), search, {1: search}, (SLO("ttft_p99", 1.0),))
    lines = one.message.splitlines()
    assert lines[0] == "aggregated: 1 replica = 1 GPU, 40 req/s per GPU"
    assert lines[1].startswith("disaggregated: 1 prefill : 1 decode = 2 GPUs, ")
    assert lines[2].startswith("the aggregated fleet saves 1 GPU at ")


def test_a_memory_search_whose_every_probe_is_refused_says_its_rate(capsys, monkeypatch):
    """Every probe refused without a run (the override's 2,000 blocks, 3.9 GiB, and half that, below the
    8 GiB one request of 65,536 tokens needs) left the probes without a `rate` column, and the header's
    target rate crashed (ColumnNotFoundError). (The CLI now refuses the override beside a search of
    kv_cache_bytes, which drops it: `_refuse_dropped_pool_flags` is bypassed here to reach the header with
    a base config that stands and probes that do not, as `smallest_memory` itself still can.)"""
    import kvsim.cli.plan

    monkeypatch.setattr(kvsim.cli.plan, "_refuse_dropped_pool_flags", lambda args: None)
    argv = [
        "plan",
        "--block-size",
        "16",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-80gb",
        "--num-gpu-blocks-override",
        "2000",
    ]
    argv += ["--kv-cache-memory-bytes", "12GiB", "--max-model-len", "65536", "--requests", "5"]
    argv += ["--slo", "ttft_p99:2s", "--workers", "1", "--max-probes", "2", "--rate", "1.5"]
    assert main([*argv, "--smallest", "kv_cache_bytes"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "workload: sharegpt, 5 requests; every probe at 1.5 req/s"
    assert "2 values failed without a run, refused by the configuration" in out[-1]


def test_the_refusals_available_memory_is_reconciled_with_the_start_up_line(capsys):
    """newcomer46 #4: 36 MiB of gpt-oss-20b without a GPU printed "Available KV cache memory: 0.04 GiB" and
    then a refusal of "available KV cache memory (0.03 GiB)", both vLLM's words: the second is the memory
    less the null block. The refusal now says so to the byte, so the two figures add up; and the note says
    why no GPU makes it a note where --gpu makes it an error."""
    argv = ["run", "--block-size", "16", "--model", "gpt-oss-20b", "--kv-cache-memory-bytes", "36MiB", "--max-model-len", "4096",
            "--requests", "20"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert "vllm: Available KV cache memory: 0.04 GiB" in out
    (note,) = [line for line in out if line.startswith("note: vLLM refuses this pool at start-up")]
    assert "larger than the available KV cache memory (0.03 GiB)" in note
    # 36 MiB less one 384 KiB block: 35.625 MiB = 0.0348 GiB, which vLLM's two decimals print 0.03
    assert f"{(36 * 2**20 - 384 * 2**10) / 2**30:.2f}" == "0.03"
    assert (
        "the available memory it checks is the KV memory less one block, the null block: 37,748,736 B − 393,216 B "
        '= 37,355,520 B (0.03 GiB as it prints it), one block below the 0.04 GiB of its "Available KV cache memory" '
        "line" in note
    )
    assert note.endswith(
        "kvsim runs it because no GPU is named: a pool in bytes without one is no deployment vLLM could start "
        "but kvsim's experiment (the tests' small pools), so vLLM's refusal is this note; with --gpu it is a "
        "deployment, and kvsim refuses it with an error as vLLM does"
    )
