"""`kvsim run`'s report (issue 13 part 4): vllm bench serve's metrics in ms with chosen percentiles, goodput
and SLO attainment, the human table's groups and units, the memory headings, a fleet's figures, --save-result,
and the note on synchronous scheduling."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

import kvsim
from kvsim.cli import main
from tests.cli_run_common import SMALL, _error, _json


# -- part 4: the metrics a serving engineer reads ----------------------------------------------------------------
def test_vllm_bench_metrics_in_ms_with_chosen_percentiles(capsys):
    argv = [*SMALL, "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99.9"]
    s = _json(capsys, argv)["serving"]
    for m in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p50", "p90", "p99.9"):
            assert f"{stat}_{m}_ms" in s
    assert s["request_throughput"] > 0
    assert s["output_throughput"] > 0


def _vllm_p_word(p: float) -> str:
    """vLLM 0.34.0's `vllm/benchmarks/serve.py` (lines 1430-1432), the rule its result keys are named by."""
    return str(int(p)) if int(p) == p else str(p)


def test_fractional_percentiles_are_named_as_vllm_bench_names_them(capsys, tmp_path):
    """user53 #1: kvsim wrote `p99_9_ttft_ms` where `vllm bench serve` writes `p99.9_ttft_ms`, in `--json`,
    `--save-result` and the table's column; a dashboard reading vLLM's keys found none in kvsim's."""
    pcts = [0.5, 25.0, 99.0, 99.9, 99.99]
    argv = [
        *SMALL,
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "0.5,25,99,99.9,99.99",
    ]
    keys = {f"p{_vllm_p_word(float(p))}_{m}_ms" for p in pcts for m in ("ttft", "tpot", "itl", "e2el")}
    s = _json(capsys, argv)["serving"]
    assert keys <= set(s)
    assert "p99_9_ttft_ms" not in s
    assert main([*argv, "--save-result", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    saved = json.loads(next(tmp_path.glob("*.json")).read_text())["serving"]
    assert keys <= set(saved)
    head = next(line for line in out.splitlines() if line.strip().startswith("mean"))
    assert head.split()[3:] == ["p0.5", "p25", "p99", "p99.9", "p99.99"]
    assert main(["run", "--help"]) == 0
    assert "named as vllm bench serve names them: p99, p99.9 (--json: p99.9_ttft_ms)" in " ".join(
        capsys.readouterr().out.split()
    )


def test_goodput_and_slo_attainment(capsys):
    data = _json(capsys, [*SMALL, "--goodput", "ttft:1e9", "tpot:1e9"])
    assert data["serving"]["slo_attainment"] == 1.0
    assert data["serving"]["request_goodput"] == pytest.approx(data["serving"]["request_throughput"])
    tight = _json(capsys, [*SMALL, "--goodput", "ttft:0.001"])["serving"]
    assert tight["slo_attainment"] == 0.0
    assert tight["request_goodput"] == 0.0


def test_human_table_groups_with_units(capsys):
    assert main([*SMALL, "--goodput", "ttft:500"]) == 0
    out = capsys.readouterr().out
    for group in (  # no GPU: the timed groups say their times are ticks (tests/test_cli_says.py)
        "== throughput (seconds of ticks: 1 ms a step, not a GPU's time) ==",
        "== latency (ms of ticks: 1 ms a step, not a GPU's time) ==",
        "== memory (means time-weighted over busy time unless a line says per step) ==",
        "== cache ==",
        "== preemption ==",
    ):
        assert group in out
    assert "req/s" in out
    assert "request goodput" in out


def test_the_memory_headings_word_is_true_of_each_mean_under_it(capsys):
    """The heading said "means time-weighted over busy time" above `mean batch (per step)`, a mean over
    steps (the time-weighted batch was in --json only). Each mean under it is the summary's time-weighted
    key unless its label says per step; the two batches differ where steps differ in length (a roofline:
    a prefill step lasts longer than a decode step), so the labels tell apart figures that differ."""
    argv = ["run", "--model", "opt-13b", "--gpu", "a100-40gb", "--kv-cache-memory-bytes", "12GiB"]
    argv += ["--workload", "sharegpt:arrival_rate=2", "--requests", "200"]
    s = _json(capsys, argv)["summary"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("== memory (means time-weighted over busy time unless a line says per step) ==")
    rows = {}
    for line in out[at + 1 :]:
        if line.startswith("=="):
            break
        label, value = re.split(r"\s{2,}", line.strip())[:2]
        rows[label] = float(value.split()[0].replace(",", ""))
    assert rows["mean batch (time-weighted)"] == pytest.approx(s["time_weighted_batch"], rel=1e-3)
    assert rows["mean batch (per step)"] == pytest.approx(s["mean_batch"], rel=1e-3)
    assert abs(s["time_weighted_batch"] - s["mean_batch"]) > 0.01 * s["mean_batch"]
    assert rows["KV utilization (tokens stored)"] == pytest.approx(100 * s["kv_utilization"], abs=0.05)
    per_step = [label for label in rows if "per step" in label]
    assert per_step == ["mean batch (per step)"]


def test_a_fleets_memory_figures_say_they_are_one_replicas(capsys):
    """A fleet's memory rows are one replica's (the mean batch between its replicas' own, the peak the
    fullest one's), and the heading says so, naming the decode replicas under a P/D split."""
    argv = ["run", "--requests", "300", "--time-model", "ticks", "--num-gpu-blocks-override", "400"]
    argv += ["--workload", "sharegpt:arrival_rate=40", "--replicas", "2"]
    data = _json(capsys, argv)
    s, per = data["summary"], data["fleet"]["per_replica"]
    assert min(r["mean_batch"] for r in per) <= s["mean_batch"] <= max(r["mean_batch"] for r in per)
    assert s["peak_allocated_fraction"] == max(r["peak_allocated_fraction"] for r in per)
    assert main(argv) == 0
    head = (
        "== memory (one replica's: means time-weighted over the 2 replicas' busy time unless a line says per "
        "step, peaks the fullest one's) =="
    )
    assert head in capsys.readouterr().out
    pd = ["--prefill-replicas", "1", "--pd-link-ps-per-block", "1000000"]
    assert main([*argv[:-1], "3", *pd]) == 0
    assert "means time-weighted over the 3 decode replicas' busy time" in capsys.readouterr().out


def test_save_result_records_what_reproduces_the_run(capsys, tmp_path):
    d = tmp_path / "out"
    assert main([*SMALL, "--seed", "4", "--save-result", str(d)]) == 0
    saved = list(d.glob("*.json"))
    assert len(saved) == 1
    record = json.loads(saved[0].read_text())
    assert record["kvsim_version"] == kvsim.__version__
    assert record["seed"] == 4
    assert record["workload"]["name"] == "sharegpt"
    assert record["pool"].startswith("pool: 200 blocks")
    assert record["config"]["iteration_time_ps"] == "1 ms"
    assert record["argv"][:2] == ["run", "--requests"]
    assert pl.read_parquet(saved[0].with_suffix(".requests.parquet")).height == 60


def test_save_result_at_a_file_fails_before_the_run(capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    line = _error(capsys, [*SMALL, "--save-result", str(f)])
    assert "--save-result" in line


def test_a_default_run_says_its_scheduling_is_synchronous_where_vllms_is_not(capsys):
    """vLLM 0.19.0 and later schedule asynchronously by default; kvsim's unset `async_scheduling` runs its
    engine synchronously (DESIGN.md §Departures), which no line said. The note says so, and whether
    --async-scheduling runs vLLM's rule here or why not (the refusal SimConfig gives); a set knob, or rules
    vLLM never scheduled asynchronously (another policy), get no note."""
    base = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "20"]

    def said(argv):
        return [n for n in _json(capsys, argv)["notes"] if n.startswith("scheduling is synchronous here")]

    (note,) = said(base)
    assert "vLLM 0.19.0 and later schedule asynchronously by default" in note
    assert "--async-scheduling runs vLLM's rule" in note
    assert said([*base, "--async-scheduling"]) == said([*base, "--no-async-scheduling"]) == []
    # A CPU tier takes the rule on one full-attention group and beside a hybrid model's KV-cache groups
    # (DESIGN.md §Engine, "Asynchronous scheduling", *With a CPU tier*).
    (tier,) = said([*base, "--kv-offloading-size", "8"])
    assert "--async-scheduling runs vLLM's rule" in tier
    assert said([*base, "--kv-offloading-size", "8", "--async-scheduling"]) == []
    hybrid = ["run", "--model", "gemma-3-27b", "--gpu", "h100-80gb", "--requests", "20"]
    (tier,) = said([*hybrid, "--kv-offloading-size", "8"])
    assert "--async-scheduling runs vLLM's rule" in tier
    assert said([*hybrid, "--kv-offloading-size", "8", "--async-scheduling"]) == []
    kvsim.SimConfig(model="gemma-3-27b", gpu="h100-80gb", kv_offloading_size=8, async_scheduling=True)
    kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", kv_offloading_size=8, async_scheduling=True)
    # a disaggregated fleet takes it too (DESIGN.md §Engine, "P/D under the rule")
    pd = [*base, "--replicas", "2", "--prefill-replicas", "1"]
    (fleet,) = said(pd)
    assert "--async-scheduling runs vLLM's rule" in fleet
    assert said([*pd, "--async-scheduling"]) == []
    kvsim.SimConfig(
        model="llama-3.1-8b", gpu="h100-80gb", replicas=2, prefill_replicas=1, async_scheduling=True
    )
    assert said([*base, "--policy", "orca-max", "--max-model-len", "8192"]) == []


def test_the_latency_table_and_json_say_what_the_times_are(capsys):
    """user53 #7: a datasheet roofline's times (no calibration) read as measurements, to four figures, in
    a table headed `latency (ms)`; the heading and `--json` now say they are optimistic bounds, a
    calibration's that they are calibrated, and no number changes."""
    llama = ["run", "--model", "llama-3.1-8b", "--workload", "sharegpt:arrival_rate=4", "--requests", "100"]
    for gpu, cal, times in (
        ("h100-80gb", None, "datasheet roofline: optimistic bounds"),
        ("rtx-pro-6000", "rtx-pro-6000-llama-3.1-8b", "roofline calibrated by rtx-pro-6000-llama-3.1-8b"),
    ):
        argv = [*llama, "--gpu", gpu, *(["--calibration", cal] if cal else [])]
        data = _json(capsys, argv)
        assert data["time_model"] == {"name": "roofline", "calibrated": cal is not None, "times": times}
        assert main(argv) == 0
        out = capsys.readouterr().out.splitlines()
        head = out.index(f"== latency (ms; {times}) ==")
        ttft = out[head + 2].split()
        assert ttft[0] == "TTFT"
        assert float(ttft[1]) == pytest.approx(data["serving"]["mean_ttft_ms"], rel=1e-3)
    ticks = _json(capsys, [*SMALL])["time_model"]
    assert ticks["name"] == "ticks"
    assert ticks["calibrated"] is False
    assert "not a GPU's time" in ticks["times"]


def test_enforce_eager_says_its_steps_are_timed_as_graphs(capsys):
    """user53 #12: `--enforce-eager` gave more KV blocks and byte-identical latencies with no word that the
    time model prices no launch overhead; a timed eager run now says it shows only the memory side, and
    the flag's help says the same. The numbers themselves stay (no eager overhead is priced)."""
    argv = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--max-model-len", "8192"]
    argv += ["--workload", "sharegpt:arrival_rate=1", "--requests", "40"]
    graphs, eager = _json(capsys, argv), _json(capsys, [*argv, "--enforce-eager"])
    assert eager["pool_sizing"] != graphs["pool_sizing"]
    assert eager["serving"]["mean_tpot_ms"] == graphs["serving"]["mean_tpot_ms"]
    said = [n for n in eager["notes"] if n.startswith("enforce_eager:")]
    assert len(said) == 1
    assert "times an eager run's steps as a graph-captured run's" in said[0]
    assert "only the memory side" in said[0]
    assert not [n for n in graphs["notes"] if n.startswith("enforce_eager:")]
    assert main(["run", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "timed as a graph-captured run's" in help_text
