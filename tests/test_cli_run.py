"""`kvsim run` through the real entry point (issue 13 parts 1-4, issue 12 part 4): one set of defaults,
the pool line, vLLM's flags and units, one-line errors with exit status 2, workloads from files, notes,
and vllm bench serve's metrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsim
from kvsim.cli import main

SMALL = ["run", "--requests", "60", "--num-gpu-blocks-override", "200"]


def _json(capsys, argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _error(capsys, argv):
    """Runs a bad command: exit status 2, one line on stderr, which is returned."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# -- part 1: one default per knob; sizing from the GPU ----------------------------------------------------------
def test_cli_and_api_size_a_named_gpu_the_same(capsys):
    data = _json(capsys, ["run", "--requests", "20", "--model", "llama-3-8b", "--gpu", "h100-80gb"])
    cfg = kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb")
    assert data["config"]["num_blocks"] == cfg.num_blocks
    assert data["config"]["time_model"] == cfg.time_model == "roofline"
    assert data["pool"] == cfg.pool.line()


def test_gpu_memory_utilization_changes_the_pool(capsys):
    base = ["run", "--requests", "20", "--model", "llama-3-8b", "--gpu", "h100-80gb"]
    half = _json(capsys, [*base, "--gpu-memory-utilization", "0.5"])["config"]["num_blocks"]
    high = _json(capsys, [*base, "--gpu-memory-utilization", "0.95"])["config"]["num_blocks"]
    assert half < high


def test_kv_cache_memory_bytes_and_block_override(capsys):
    base = ["run", "--requests", "20", "--model", "opt-13b", "--gpu", "a100-40gb"]
    assert _json(capsys, [*base, "--kv-cache-memory-bytes", "12GiB"])["config"]["num_blocks"] == 983
    assert _json(capsys, [*base, "--num-gpu-blocks-override", "300"])["config"]["num_blocks"] == 300


def test_every_run_prints_the_pool_line(capsys):
    assert main(["run", "--requests", "20", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB"]) == 0
    out = capsys.readouterr().out
    assert "pool: 983 blocks × 16 tokens = 15,728 tokens = 12.0 GiB (kv_cache_bytes 12.0 GiB" in out


def test_tensor_parallel_flag_and_a_model_that_does_not_fit(capsys):
    line = _error(capsys, ["run", "--model", "llama-3-70b", "--gpu", "h100-80gb"])
    assert "does not fit on h100-80gb" in line
    data = _json(
        capsys, ["run", "--requests", "20", "--model", "llama-3-70b", "--gpu", "h100-80gb", "-tp", "4"]
    )
    assert data["config"]["tensor_parallel_size"] == 4
    assert "tp 4" in data["pool"]


def test_fp8_kv_cache_flag(capsys):
    base = ["run", "--requests", "20", "--model", "llama-3-8b", "--kv-cache-memory-bytes", "8GiB"]
    fp16 = _json(capsys, base)["config"]["num_blocks"]
    fp8 = _json(capsys, [*base, "--kv-cache-dtype", "fp8"])["config"]["num_blocks"]
    assert fp8 == 2 * fp16


def test_a_hugging_face_config_path_as_model(capsys):
    path = str(Path(__file__).parent / "data" / "hf" / "llama-3-8b.json")
    data = _json(capsys, ["run", "--requests", "20", "--model", path, "--gpu", "h100-80gb"])
    assert data["config"]["num_blocks"] == kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb").num_blocks


def test_a_config_json_with_a_layer_period_of_0_is_one_line(capsys, tmp_path):
    """Qwen3-Next's `full_attention_interval: 0` was a ZeroDivisionError traceback, exit status 1."""
    cfg = json.loads((Path(__file__).parent / "data" / "hf" / "qwen3-next-80b-a3b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "full_attention_interval": 0}))
    argv = ["run", "--model", str(path), "--kv-cache-memory-bytes", "8GiB", "--no-enable-prefix-caching"]
    line = _error(capsys, [*argv, "--requests", "5"])
    assert line == (
        f"kvsim run: error: argument --model: model {path}: field 'full_attention_interval' 0 must be a whole "
        "number of at least 1"
    )


def test_no_pool_is_an_error_naming_the_flags(capsys):
    line = _error(capsys, ["run"])
    assert "--model" in line
    assert "--num-gpu-blocks-override" in line


# -- part 2: vLLM's flags, units, help, errors -------------------------------------------------------------------
def test_vllm_switches_and_todays_aliases(capsys):
    off = _json(capsys, [*SMALL, "--no-enable-prefix-caching"])["config"]
    assert off["enable_prefix_caching"] is False
    assert _json(capsys, [*SMALL, "--enable-prefix-caching"])["config"]["enable_prefix_caching"] is True
    assert (
        _json(capsys, [*SMALL, "--enable-prefix-caching", "false"])["config"]["enable_prefix_caching"]
        is False
    )
    assert _json(capsys, [*SMALL, "--no-enable-chunked-prefill"])["config"]["chunked_prefill"] is False
    assert _json(capsys, [*SMALL, "--chunked-prefill", "false"])["config"]["chunked_prefill"] is False
    cfg = _json(
        capsys, [*SMALL, "--max-num-seqs", "8", "--max-num-batched-tokens", "4096", "--max-model-len", "4096"]
    )
    assert (cfg["config"]["max_num_seqs"], cfg["config"]["max_model_len"]) == (8, 4096)


def test_swap_space_in_gib_and_preemption_mode(capsys):
    argv = ["run", "--requests", "20", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB"]
    data = _json(capsys, [*argv, "--swap-space", "4", "--preemption-mode", "swap"])
    assert data["config"]["preemption"] == "swap"
    assert data["config"]["cpu_blocks"] == 4 * 2**30 // (16 * 819_200)
    assert data["config"]["swap_space_bytes"] == "4 GiB"


@pytest.mark.parametrize(("text", "blocks"), [("4", 2048), ("1.5", 768), ("1e1", 5120), ("0.5GiB", 256)])
def test_swap_space_is_gib_as_in_vllm(capsys, text, blocks):
    """vLLM's --swap-space is a float of GiB (int(swap_space * GiB) bytes), whatever the notation."""
    argv = [
        "run",
        "--requests",
        "10",
        "--model",
        "llama-3-8b",
        "--num-blocks",
        "500",
        "--preemption-mode",
        "swap",
    ]
    assert _json(capsys, [*argv, "--swap-space", text])["config"]["cpu_blocks"] == blocks


def test_swap_space_smaller_than_a_block_is_named(capsys):
    argv = [
        "run",
        "--requests",
        "10",
        "--model",
        "llama-3-8b",
        "--num-blocks",
        "500",
        "--preemption-mode",
        "swap",
    ]
    line = _error(capsys, [*argv, "--swap-space", "0.001"])
    assert line.startswith(
        "kvsim run: error: argument --swap-space: swap_space_bytes 1073741 holds no block"
    ), line
    assert "out of range" in _error(capsys, [*argv, "--swap-space", "1e999999999999"])


def test_units_for_sizes_and_durations(capsys):
    burst = [*SMALL, "--workload", "sharegpt:arrivals=all-at-once", "--time-model", "ticks"]
    data = _json(capsys, [*burst, "--iteration-time-ps", "5ms"])
    assert data["config"]["iteration_time_ps"] == "5 ms"
    odd = _json(capsys, [*burst, "--iteration-time-ps", "1234567"])["config"]["iteration_time_ps"]
    assert odd == "1.234567 us"  # exact: a saved result reproduces the run
    one_ms = _json(capsys, [*burst, "--iteration-time-ps", "1ms"])["summary"]["makespan_s"]
    five_ms = data["summary"]["makespan_s"]
    assert five_ms == pytest.approx(5 * one_ms)
    linear = _json(
        capsys,
        [*SMALL, "--time-model", "linear", "--c0-ps", "120us", "--c-tok-ps", "10ns", "--c-ctx-ps", "1ns"],
    )
    assert linear["config"]["c0_ps"] == "120 us"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--workload", "sharegpt:arrival_rate=abc"], "--workload"),
        (["--workload", "sharegpt:num_samples=abc"], "--workload"),
        (["--workload", "sharegpt:turns=1.5"], "--workload"),
        (["--seed", "-1"], "--seed"),
        (["--workload", ""], "--workload"),
        (["--block-size", "abc"], "--block-size"),
        (["--block_size", "0"], "--block_size"),
        (["--gpu-memory-utilization", "nan"], "--gpu-memory-utilization"),
        (["--kv-cache-memory-bytes", "12XB"], "--kv-cache-memory-bytes"),
        (["--iteration-time-ps", "1.5ps"], "--iteration-time-ps"),
        (["--enable-prefix-caching", "maybe"], "--enable-prefix-caching"),
        (["--requests", "0"], "--requests"),
        (["--goodput", "ttft=5"], "--goodput"),
        (["--percentile-metrics", "foo"], "--percentile-metrics"),
        (["--metric-percentiles", "101"], "--metric-percentiles"),
        (["--rows", "5"], "--rows"),
        (["--time-scale", "-2"], "--time-scale"),
        (["--time-scale", "2", "--request-rate", "5"], "--request-rate"),
        (["--workload", "sharegpt:lengths=nosuch"], "--workload"),
        (["--workload", "sharegpt:max_model_len=100"], "--workload"),
        (["--model", "opt-13b", "--swap-space", "4", "--cpu-blocks", "10"], "--swap-space"),
        (["--save-result", ""], "--save-result"),
        (["--save-result", "a\0b"], "--save-result"),
    ],
)
def test_bad_values_are_one_line_naming_the_flag(capsys, argv, flag):
    line = _error(capsys, [*SMALL, *argv])
    assert line.startswith(f"kvsim run: error: argument {flag}:"), line


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # `3` would be the positional MODEL (`kvsim run MODEL`, as vllm serve MODEL): two words are unknown.
        (
            ["run", "--bogus", "3", "4"],
            "kvsim run: error: unrecognized arguments: --bogus 4 (see: kvsim run --help)",
        ),
        (["plan", "--bogus"], "kvsim plan: error: unrecognized arguments: --bogus (see: kvsim plan --help)"),
        (
            ["sweep", "--bogus"],
            "kvsim sweep: error: unrecognized arguments: --bogus (see: kvsim sweep --help)",
        ),
        (["lab", "extra"], "kvsim lab: error: unrecognized arguments: extra (see: kvsim lab --help)"),
        ([], "kvsim: error: the following arguments are required: "),
    ],
)
def test_an_unknown_or_missing_argument_is_one_line_pointing_at_help(capsys, argv, said):
    """A CLI error is one line: argparse printed the command's usage first (69 lines for `kvsim plan`)."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(said), err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"kvsim {kvsim.__version__}"


def test_help_has_one_default_per_flag_and_real_metavars(capsys):
    assert main(["run", "--help"]) == 0
    text = capsys.readouterr().out
    assert "(default: None)" not in text
    for line in text.splitlines():
        assert line.count("default") <= 1, line
    flat = " ".join(text.split())
    assert "--kv-cache-memory-bytes SIZE" in flat
    assert "--block-size TOKENS" in flat
    assert "a size: 12GiB" in flat
    assert "max_tokens = 2048 − prompt" in flat  # what each paper preset's max_tokens is
    assert "metrics.py" in flat


def test_the_console_script_is_the_entry_point(tmp_path):
    exe = Path(sys.executable).with_name("kvsim")
    bad = subprocess.run(
        [str(exe), "run", "--seed", "-1", "--num-blocks", "50"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert "Traceback" not in bad.stderr
    ok = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    assert ok.returncode == 0


# -- part 3: workloads from the command line ---------------------------------------------------------------------
def _trace_file(tmp_path: Path, suffix: str) -> Path:
    frame = pl.DataFrame(
        {
            "ts_ms": [0, 100, 250, 400, 800, 900],
            "in": [30, 50, 20, 80, 40, 60],
            "out": [10, 20, 5, 15, 25, 30],
        }
    )
    path = tmp_path / f"trace{suffix}"
    {".csv": frame.write_csv, ".jsonl": frame.write_ndjson, ".parquet": frame.write_parquet}[suffix](path)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_trace_file_of_ones_own(capsys, tmp_path, suffix):
    path = _trace_file(tmp_path, suffix)
    cols = ["--trace-columns", "arrival=ts_ms,prompt_len=in,output_len=out", "--time-unit", "ms"]
    data = _json(capsys, ["run", "--num-blocks", "100", "--workload", str(path), *cols])
    assert data["workload"]["requests"] == 6
    assert data["summary"]["completed"] == 6
    window = _json(capsys, ["run", "--num-blocks", "100", "--workload", str(path), *cols, "--rows", "1:4"])
    assert window["workload"]["params"]["start"] == 1  # the saved record names the window it replayed
    assert window["workload"]["params"]["stop"] == 4
    assert window["workload"]["requests"] == 3


def test_a_file_with_absolute_timestamps_replays_from_its_first_request(capsys, tmp_path):
    """Unix timestamps would be past the simulated clock, and an offset would count idle time into the
    duration (and so into every throughput): a file replays from its first request, as vllm bench serve."""
    path = tmp_path / "unix.csv"
    pl.DataFrame(
        {"arrival": [1.7e9, 1.7e9 + 1, 1.7e9 + 2], "prompt_len": [10, 20, 30], "output_len": [5, 5, 5]}
    ).write_csv(path)
    data = _json(capsys, ["run", "--num-blocks", "100", "--workload", str(path)])
    assert data["summary"]["completed"] == 3
    assert data["serving"]["duration_s"] < 3
    assert any("replayed from its first request" in n for n in data["notes"])


def test_max_model_len_defaults_to_the_models_context_as_vllms(capsys, tmp_path):
    """vLLM's max_model_len defaults to the model's context: a prompt that reaches it is refused and an
    output is cut at it. kvsim's does the same with a model, and says so, since the user did not choose
    it; a longer max_model_len (allowed) runs them whole."""
    path = tmp_path / "long.csv"
    pl.DataFrame(
        {"arrival": [0.0, 1.0, 2.0], "prompt_len": [100, 2000, 3000], "output_len": [10, 100, 10]}
    ).write_csv(path)
    argv = ["run", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB", "--workload", str(path)]
    out = _json(capsys, argv)
    assert out["summary"]["rejected"] == 1
    assert out["summary"]["completed"] == 2
    assert (
        "max_model_len is the model's context, 2,048 tokens (vLLM's default): 1 prompt reaches it (refused) "
        "and 1 output ends at it (cut short); --max-model-len with --allow-long-max-model-len runs them longer"
    ) in out["notes"], out["notes"]
    assert out["summary"]["output_tokens"] == 10 + (2048 - 2000)
    given = _json(capsys, [*argv, "--max-model-len", "2048"])
    assert not any("model's context" in n for n in given["notes"])
    assert given["summary"]["rejected"] == 1
    longer = [*argv, "--max-model-len", "4096", "--allow-long-max-model-len"]
    whole = _json(capsys, longer)["summary"]
    assert (whole["rejected"], whole["output_tokens"]) == (0, 120)


def test_a_trace_file_row_error_is_one_line(capsys, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("arrival,prompt_len,output_len\n0,10,5\n1,abc,5\n")
    line = _error(capsys, ["run", "--num-blocks", "100", "--workload", str(path)])
    assert "line 3" in line
    assert "prompt_len" in line


def test_time_scale_replays_at_a_higher_load(capsys, tmp_path):
    path = _trace_file(tmp_path, ".csv")
    cols = ["--trace-columns", "arrival=ts_ms,prompt_len=in,output_len=out", "--time-unit", "ms"]
    base = ["run", "--num-blocks", "100", "--time-model", "ticks", "--workload", str(path), *cols]
    slow = _json(capsys, [*base, "--time-scale", "10"])["summary"]["makespan_s"]
    fast = _json(capsys, [*base, "--time-scale", "0.1"])["summary"]["makespan_s"]
    assert slow > fast
    w = kvsim.analysis.sweep.make_workload("sharegpt", {"request_rate": 50.0}, 200, 0)
    assert (len(w) - 1) / (w.arrival[-1] - w.arrival[0]) == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [("--time-scale", "1e300", "give a smaller scale"), ("--request-rate", "1e-300", "give a higher rate")],
)
def test_a_stretch_past_the_clock_blames_its_flag(capsys, flag, value, said):
    """It was refused as "row 19: arrival 1.23e+301 s is past the simulated clock's range ...: rebase the
    timestamps to the first request", naming no flag, with advice that would not help."""
    line = _error(capsys, ["run", "--num-gpu-blocks-override", "500", "--requests", "20", flag, value])
    assert line.startswith(f"kvsim run: error: argument {flag}: "), line
    assert "past the simulated clock's range" in line
    assert said in line
    assert "rebase" not in line


def test_a_generated_workloads_rate_past_the_clock_names_its_parameter(capsys, tmp_path):
    """adv47 B4: `--grid workload.arrival_rate=1e-300` (and `sharegpt:arrival_rate=1e-300` in kvsim run)
    was refused as a trace's "row 1: arrival 8.03e+299 s is past the simulated clock's range ...: rebase
    the timestamps to the first request", naming no field; the generator now refuses it by its parameter,
    with a way out for a generated workload, and the spacing of turns likewise by `turn_interval`."""
    run = ["run", "--num-gpu-blocks-override", "500", "--requests", "20"]
    line = _error(capsys, [*run, "--workload", "sharegpt:arrival_rate=1e-300"])
    assert line.startswith("kvsim run: error: argument --workload: "), line
    assert "arrival_rate 1e-300 requests/s puts the last arrival at " in line
    assert "past the simulated clock's range" in line
    assert line.endswith("give a higher arrival_rate, or fewer requests")
    assert "rebase" not in line
    sweep = ["sweep", "--base", "model=opt-13b", "--base", "gpu=a100-40gb", "--requests", "20"]
    sweep += ["--no-progress", "--no-resume", "--output", str(tmp_path / "h.parquet")]
    line = _error(capsys, [*sweep, "--grid", "workload.arrival_rate=1e-300"])
    assert line.startswith("kvsim sweep: error: grid workload.arrival_rate=1e-300: "), line
    assert "arrival_rate 1e-300 requests/s puts the last arrival at " in line
    assert "rebase" not in line
    line = _error(capsys, [*run, "--workload", "sharegpt:turns=4,turn_interval=1e300"])
    assert "turn_interval 1e+300 s over 4 turns puts the last arrival at " in line
    assert line.endswith("give a shorter turn_interval, or fewer turns")


def test_a_trace_column_mapped_twice_is_refused(capsys, tmp_path):
    """`arrival=ts2,arrival=ts_ms` read the last mapping silently."""
    path = _trace_file(tmp_path, ".csv")
    cols = ["--trace-columns", "arrival=ts2,arrival=ts_ms,prompt_len=in,output_len=out"]
    line = _error(capsys, ["run", "--num-blocks", "100", "--workload", str(path), *cols])
    assert "'arrival' is mapped twice ('ts2' and 'ts_ms')" in line


def test_seed_on_a_deterministic_trace_is_noted(capsys, tmp_path):
    path = _trace_file(tmp_path, ".csv")
    cols = ["--trace-columns", "arrival=ts_ms,prompt_len=in,output_len=out"]
    data = _json(capsys, ["run", "--num-blocks", "100", "--workload", str(path), *cols, "--seed", "3"])
    assert any("--seed 3 is ignored" in n for n in data["notes"])
    assert data["seed"] is None


def test_paper_presets_send_what_real_clients_send():
    w = kvsim.analysis.sweep.make_workload("sharegpt", {}, 500, 0)
    assert (w.max_tokens == 2048 - w.prompt_len).all()
    exact = kvsim.analysis.sweep.make_workload("sharegpt", {"max_tokens": "exact"}, 500, 0)
    assert (exact.max_tokens == exact.output_len).all()


def test_paper_ordering_of_vllm_and_orca(capsys):
    """With client-style max_tokens, Orca (Max) reserves the whole context and batches fewest; vLLM most
    (requests queued at once, so memory decides the batch)."""
    batch = {}
    for policy in ("vllm", "orca-oracle", "orca-pow2", "orca-max"):
        argv = ["run", "--requests", "1500", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB"]
        argv += ["--policy", policy, "--max-model-len", "2048", "--workload", "sharegpt:arrivals=all-at-once"]
        batch[policy] = _json(capsys, argv)["summary"]["mean_batch"]
    assert batch["vllm"] > batch["orca-oracle"] > batch["orca-pow2"] > batch["orca-max"], batch


def test_not_memory_bound_note(capsys):
    argv = ["run", "--requests", "50", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB"]
    light = _json(capsys, [*argv, "--workload", "sharegpt:arrival_rate=0.2"])
    assert any(n.startswith("not memory-bound") for n in light["notes"])
    heavy = _json(capsys, [*argv, "--workload", "sharegpt:arrivals=all-at-once", "--requests", "400"])
    assert not any(n.startswith("not memory-bound") for n in heavy["notes"])


def test_a_run_whose_queue_grows_says_it_is_overloaded(capsys):
    """A rate the configuration cannot serve: the queue grows from the first requests to the last, so TTFT
    counts a wait that grows with --requests. The note's numbers are the run's own: the rate the requests
    arrived at, the rate served, and the first and last tenth's mean waits, recomputed here from the
    requests' rows. A rate it serves, and a burst all at once (no rate), get no such note."""
    from kvsim.analysis.steady_state import queue_growth

    argv = ["run", "--requests", "400", "--num-gpu-blocks-override", "300", "--time-model", "ticks"]
    heavy = _json(capsys, [*argv, "--workload", "sharegpt:arrival_rate=400"])
    over = [n for n in heavy["notes"] if n.startswith("overloaded:")]
    assert len(over) == 1, heavy["notes"]
    from kvsim.workloads.registry import make_workload

    w = make_workload("sharegpt", {"arrival_rate": 400}, 400, 0)  # (the run's: seed 0)
    r = kvsim.simulate(w, kvsim.SimConfig(num_blocks=300, time_model="ticks"))
    assert r.summary["throughput_rps"] == pytest.approx(heavy["summary"]["throughput_rps"])
    done = r.requests.filter(pl.col("status") == "finished").sort("arrival")
    wait = (done["first_scheduled"] - done["arrival"]).to_list()
    tenth = len(wait) // 10
    first, last = sum(wait[:tenth]) / tenth, sum(wait[-tenth:]) / tenth
    offered = (done.height - 1) / (done["arrival"][-1] - done["arrival"][0])
    assert queue_growth(r) == pytest.approx((offered, r.summary["throughput_rps"], first, last))
    assert last > 4 * first
    assert r.summary["throughput_rps"] < 0.9 * offered
    assert f"offers {offered:,.3g} requests/s" in over[0]
    assert f"served {r.summary['throughput_rps']:,.3g}/s" in over[0]
    light = _json(capsys, [*argv, "--workload", "sharegpt:arrival_rate=0.5"])
    burst = _json(capsys, [*argv, "--workload", "sharegpt:arrivals=all-at-once"])
    for calm in (light, burst):
        assert not any(n.startswith("overloaded:") for n in calm["notes"]), calm["notes"]


def test_a_long_run_overloaded_by_a_few_percent_is_overloaded():
    """30,000 ShareGPT-like requests on Llama-3.1-70B at tp 4 at 37.3 req/s, about 5 % above what the
    configuration serves: the last tenth waited over 20 s for a first step, the first tenth milliseconds,
    the queue growing through the run; served above 90 % of the offered rate (the drain is short against a
    long run), which the rule's former bound required: it missed it."""
    from kvsim.analysis.plan import at_rate
    from kvsim.analysis.steady_state import queue_growth
    from kvsim.workloads.registry import make_workload, parse_workload

    w = at_rate(make_workload(*parse_workload("sharegpt"), 30000, 0), 37.33)
    r = kvsim.simulate(w, kvsim.SimConfig(model="llama-3.1-70b", gpu="h100-80gb", tensor_parallel_size=4))
    growth = queue_growth(r)
    assert growth is not None
    offered, served, first, last = growth
    assert served > 0.9 * offered
    assert last > 20
    assert first < 0.1


def test_a_burst_the_run_drains_is_not_overloaded(capsys, tmp_path):
    """300 requests at once, then one a second, slower than the configuration serves them: the last
    requests wait behind the burst (the last tenth far longer than the first), and the requests arrived at
    a mean rate above the one served, but the queue shrank from the burst on; no overloaded note. The same
    requests in the other order (the burst last) grow the queue and are noted. With most requests
    rejected, the note gives the finished requests' rate, not the workload's."""
    argv = ["run", "--num-gpu-blocks-override", "300", "--iteration-time-ps", "30ms", "--requests", "400"]
    burst = [(0.0, 200, 300)] * 300
    trickle = [(1.0 + i, 200, 300) for i in range(100)]
    for name, rows, noted in (
        ("burst_first", burst + trickle, False),
        ("burst_last", [(float(i), 200, 300) for i in range(100)] + [(100.0, 200, 300)] * 300, True),
    ):
        path = tmp_path / f"{name}.csv"
        path.write_text("arrival,prompt_len,output_len\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
        out = _json(capsys, [*argv, "--workload", str(path)])
        over = [n for n in out["notes"] if n.startswith("overloaded:")]
        assert len(over) == noted, (name, out["notes"])
    few = _json(capsys, [*argv, "--workload", "sharegpt:arrival_rate=5", "--num-gpu-blocks-override", "20"])
    assert few["summary"]["rejected"] > 0
    over = [n for n in few["notes"] if n.startswith("overloaded:")]
    assert len(over) == 1, few["notes"]
    assert f"the {few['summary']['completed']:,} requests that finished arrived at" in over[0]
    assert "the workload offers" not in over[0]


def test_the_too_short_note_takes_no_rate_from_a_few_arrivals(capsys, tmp_path):
    """2 ShareGPT-like requests at the generator's 2 req/s arrive 0.007 s apart (seed 13): the note took
    their rate as 1 / that gap, 141 req/s, and asked for 1,316 requests; it now quotes the workload's 2
    req/s. A trace states no rate: two arrivals 1 ns apart gave 1e9 req/s and tens of millions of
    requests; with fewer than `MIN_RATE_ARRIVALS` the note says the rate cannot be told and gives no
    count."""
    import math

    from kvsim.analysis.steady_state import MIN_RATE_ARRIVALS, STEADY_SPANS

    argv = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb"]
    out = _json(capsys, [*argv, "--workload", "sharegpt", "--requests", "2", "--seed", "13"])
    (note,) = [n for n in out["notes"] if n.startswith("not a steady state")]
    assert "the workload's rate, 2 requests/s" in note
    need = math.ceil(STEADY_SPANS * out["summary"]["e2e_s_p99"] * 2)
    assert f"about {need:,} requests at this rate" in note
    assert "141" not in note
    trace = tmp_path / "t2.csv"
    trace.write_text("arrival,prompt_len,output_len\n0,100,10\n0.000000001,100,10\n")
    out = _json(capsys, [*argv, "--workload", str(trace)])
    (note,) = [n for n in out["notes"] if n.startswith("not a steady state")]
    assert "requests/s" not in note
    assert "at this rate" not in note
    assert (
        f"how many cannot be told, for 2 arrivals give no rate (one needs at least {MIN_RATE_ARRIVALS}"
        in note
    )


def test_a_run_too_short_for_a_steady_state_says_so(capsys):
    """`kvsim run`'s too-short note (DESIGN.md §Capacity search, "Steady state", plan's rule): 300
    ShareGPT-like requests on OPT-13B at 3 req/s arrive over about 90 s, under 5 times their e2e p99, so
    the run never held the load the rate keeps in the engine: the note says so with the run's own span,
    e2e p99 and rate (recomputed here from the request rows) and the requests a steady state needs, 5 times
    the e2e p99 of arrivals at that rate. 3,000 of them arrive over 15 minutes: no note. A burst (no rate)
    is said to be a batch; an overloaded run says so in its own note and gets no second one."""
    import math

    import numpy as np

    from kvsim.analysis.steady_state import STEADY_SPANS, fmt_spans

    argv = ["run", "--model", "opt-13b", "--gpu", "a100-40gb", "--kv-cache-memory-bytes", "12GiB"]
    short = _json(capsys, [*argv, "--workload", "sharegpt:arrival_rate=3", "--requests", "300"])
    (note,) = [n for n in short["notes"] if n.startswith("not a steady state")]
    from kvsim.workloads.registry import make_workload

    w = make_workload("sharegpt", {"arrival_rate": 3}, 300, 0)  # (the run's: seed 0)
    r = kvsim.simulate(w, kvsim.SimConfig(model="opt-13b", gpu="a100-40gb", kv_cache_bytes=12 * 2**30))
    done = r.requests.filter(pl.col("status") == "finished")
    arrival = done["arrival"].to_numpy()
    span = float(arrival.max() - arrival.min())
    e2e = float(np.quantile(done["finish"].to_numpy() - arrival, 0.99))
    assert e2e == pytest.approx(short["summary"]["e2e_s_p99"])
    assert span < STEADY_SPANS * e2e
    rate = 3.0  # (the workload's own rate, not the arrivals' (n - 1) / span)
    assert (
        f"the 300 requests that finished arrived over {span:.3g} s, {fmt_spans(span, e2e)} times their e2e p99 "
        f"of {e2e:.3g} s" in note
    )
    assert "the workload's rate, 3 requests/s" in note
    need = math.ceil(STEADY_SPANS * e2e * rate)
    assert need / rate >= STEADY_SPANS * e2e > (need - 1) / rate  # (arrivals at that rate over 5 e2e p99s)
    assert need > 300
    assert f"about {need:,} requests at this rate, or more (--requests)" in note
    # The text says it too, as a note.
    assert main([*argv, "--workload", "sharegpt:arrival_rate=3", "--requests", "300"]) == 0
    assert f"note: {note}" in capsys.readouterr().out.splitlines()
    long = _json(capsys, [*argv, "--workload", "sharegpt:arrival_rate=3", "--requests", "3000"])
    assert not any(n.startswith("not a steady state") for n in long["notes"]), long["notes"]
    assert long["summary"]["e2e_s_p99"] * STEADY_SPANS < 3000 / 3 * 0.9
    burst = _json(capsys, [*argv, "--workload", "sharegpt:arrivals=all-at-once", "--requests", "50"])
    (note,) = [n for n in burst["notes"] if n.startswith("not a steady state")]
    assert "the 50 requests that finished arrived at once, a batch, not a rate" in note
    ticks = ["run", "--requests", "400", "--num-gpu-blocks-override", "300", "--time-model", "ticks"]
    heavy = _json(capsys, [*ticks, "--workload", "sharegpt:arrival_rate=400"])
    assert any(n.startswith("overloaded:") for n in heavy["notes"])
    assert not any(n.startswith("not a steady state") for n in heavy["notes"])


def test_overload_that_waits_for_seats_is_not_memory_bound(capsys):
    """Requests queue for a seat (max_num_seqs) while the pool stays far from full and nothing is
    preempted: swap vs recompute or the block size cannot change this answer, and the run says so."""
    argv = [
        "run",
        "--requests",
        "300",
        "--workload",
        "sharegpt:arrivals=all-at-once",
        "--time-model",
        "ticks",
    ]
    seats = _json(capsys, [*argv, "--num-gpu-blocks-override", "50000", "--max-num-seqs", "8"])
    assert seats["summary"]["queueing_s_p99"] > 1
    assert any(n.startswith("not memory-bound") and "max_num_seqs (8" in n for n in seats["notes"]), seats[
        "notes"
    ]
    memory = _json(capsys, [*argv, "--num-gpu-blocks-override", "300", "--max-num-seqs", "256"])
    assert memory["summary"]["preemptions"] > 0
    assert not any(n.startswith("not memory-bound") for n in memory["notes"])


def test_admissions_that_wait_for_blocks_below_a_full_pool_are_not_called_calm(capsys):
    """Prompts of 6,000 tokens (375 blocks) on a pool of 599: one runs, the next one's whole prompt does not
    fit beside it (the full-prompt gate), so requests queue for blocks while the pool peaks at ~65 % with
    nothing preempted. No "not memory-bound" note; twice the pool serves them faster (memory decided)."""
    argv = ["run", "--requests", "60", "--time-model", "ticks", "--workload"]
    argv += ["synthetic:lengths=fixed,prompt_len=6000,output_len=200,arrival_rate=20"]
    small = _json(capsys, [*argv, "--num-gpu-blocks-override", "600"])
    s = small["summary"]
    assert (s["preemptions"], s["rejected"], s["peak_batch"]) == (0, 0, 1)
    assert 0.5 < s["peak_allocated_fraction"] < 0.9
    assert not any(n.startswith("not memory-bound") for n in small["notes"]), small["notes"]
    large = _json(capsys, [*argv, "--num-gpu-blocks-override", "1200"])
    assert large["summary"]["peak_batch"] > 1
    assert large["summary"]["queueing_s_p99"] < 0.5 * s["queueing_s_p99"]


@pytest.mark.parametrize(
    ("gpu", "tokens", "seqs"), [("h100-80gb", 8192, 1024), ("a100-80gb", 2048, 256), ("b200", 16384, 1024)]
)
def test_vllm_serves_batch_defaults_by_gpu_are_used_and_said(capsys, gpu, tokens, seqs):
    """With a GPU named, unset --max-num-seqs / --max-num-batched-tokens take what vllm serve picks on it
    (0.33.0's get_batch_defaults), and the run says so; given flags win and silence the note."""
    argv = ["run", "--requests", "20", "--model", "llama-3-8b", "--gpu", gpu]
    data = _json(capsys, argv)
    assert (data["config"]["max_num_batched_tokens"], data["config"]["max_num_seqs"]) == (tokens, seqs)
    assert any(
        n.startswith(
            f"--max-num-seqs {seqs} and --max-num-batched-tokens {tokens}: what vllm serve picks on {gpu}"
        )
        for n in data["notes"]
    ), data["notes"]
    matched = _json(capsys, [*argv, "--max-num-batched-tokens", "4096", "--max-num-seqs", "64"])
    assert (matched["config"]["max_num_batched_tokens"], matched["config"]["max_num_seqs"]) == (4096, 64)
    assert not any("what vllm serve picks" in n for n in matched["notes"])
    # A release preset picks by its own release's rule: before 0.28.0 no tier past 160 GiB.
    older = _json(capsys, [*argv, "--preset", "vllm-0.20"])
    expected = (8192, 1024) if gpu == "b200" else (tokens, seqs)
    assert (older["config"]["max_num_batched_tokens"], older["config"]["max_num_seqs"]) == expected


def test_vllms_batch_refusal_and_caps_hold(capsys):
    """With a GPU named (vLLM's deployment), vLLM refuses a budget below the sequences when both are given;
    a defaulted max_num_seqs is capped by the budget given instead (vLLM's min), so
    --max-num-batched-tokens 128 alone runs. A pool in blocks without a GPU simulates any pair."""
    gpu = ["run", "--requests", "20", "--model", "llama-3-8b", "--gpu", "h100-80gb"]
    line = _error(capsys, [*gpu, "--max-num-batched-tokens", "128", "--max-num-seqs", "256"])
    assert "max_num_batched_tokens (128) must be greater than or equal to max_num_seqs (256)" in line, line
    data = _json(capsys, [*gpu, "--max-num-batched-tokens", "128"])
    assert data["config"]["max_num_seqs"] == 128
    free = _json(capsys, [*SMALL, "--max-num-batched-tokens", "128", "--max-num-seqs", "256"])
    assert (free["config"]["max_num_batched_tokens"], free["config"]["max_num_seqs"]) == (128, 256)


def test_rejected_requests_are_noted_with_their_reason(capsys):
    """A pool too small for any request rejects them all: the run says so and why, rather than print a
    table of dashes."""
    data = _json(capsys, ["run", "--requests", "20", "--num-gpu-blocks-override", "2"])
    assert data["summary"]["rejected"] == 20
    assert any(
        n.startswith("20 of 20 requests were rejected") and "needs more blocks than the pool holds: 20" in n
        for n in data["notes"]
    ), data["notes"]
    assert not any("were rejected" in n for n in _json(capsys, SMALL)["notes"])


def test_contiguous_policies_get_no_prefix_cache_note(capsys):
    """Contiguous policies have no prefix cache, so 'prefix caching is on' would be wrong for them."""
    argv = ["run", "--requests", "60", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB"]
    assert any(n.startswith("prefix caching is on") for n in _json(capsys, argv)["notes"])
    orca = _json(capsys, [*argv, "--policy", "orca-oracle"])
    assert not any(n.startswith("prefix caching is on") for n in orca["notes"])


def test_a_nul_byte_in_a_path_is_one_line(capsys):
    assert _error(capsys, [*SMALL, "--toml", "a\0b"]).startswith("kvsim run: error: run file")


def test_azure_with_prefix_caching_is_noted(capsys):
    if not (kvsim.workloads.traces_dir() / "azure_llm_2023").exists():
        pytest.skip("traces folder absent")
    data = _json(capsys, ["run", "--requests", "200", "--num-blocks", "4000", "--workload", "azure-code"])
    assert any("Azure traces carry no content hashes" in n for n in data["notes"])


# -- part 4: the metrics a serving engineer reads ----------------------------------------------------------------
def test_vllm_bench_metrics_in_ms_with_chosen_percentiles(capsys):
    argv = [*SMALL, "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99.9"]
    s = _json(capsys, argv)["serving"]
    for m in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p50", "p90", "p99_9"):
            assert f"{stat}_{m}_ms" in s
    assert s["request_throughput"] > 0
    assert s["output_throughput"] > 0


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


# -- any text for any flag: a run or one line with exit status 2, never a traceback ------------------------------
_FLAGS = [
    "--block-size",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--max-model-len",
    "--watermark",
    "--gpu-memory-utilization",
    "--kv-cache-memory-bytes",
    "--iteration-time-ps",
    "--policy",
    "--preemption-mode",
    "--enable-prefix-caching",
    "--seed",
    "--requests",
    "--time-scale",
    "--workload",
    "-tp",
]


@settings(max_examples=60, deadline=None)
@given(
    flag=st.sampled_from(_FLAGS),
    text=st.one_of(
        st.text(alphabet="0123456789.-eE:=,/abcGiBms ", min_size=1, max_size=8),
        st.sampled_from(["nan", "inf", "-1", "0", "1e400", "true", "none", "2**64", "sharegpt:turns=0"]),
    ),
)
def test_any_flag_value_runs_or_fails_in_one_line(flag, text):
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    argv = ["run", "--requests", "5", "--num-blocks", "64", "--model", "opt-13b", flag, text, "--json"]
    if flag == "--requests":
        argv = ["run", "--num-blocks", "64", flag, text, "--json"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    if code == 0:
        json.loads(out.getvalue())
    else:
        assert code == 2, err.getvalue()
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1, err.getvalue()
        assert "Traceback" not in err.getvalue()


def test_cli_and_api_give_the_same_latencies(capsys):
    """One configuration, two interfaces, one answer (the CLI once defaulted to a different time model)."""
    argv = [
        "run",
        "--requests",
        "300",
        "--model",
        "llama-3-8b",
        "--gpu",
        "h100-80gb",
        "--workload",
        "sharegpt:arrival_rate=20",
    ]
    data = _json(capsys, argv)
    w = kvsim.analysis.sweep.make_workload("sharegpt", {"arrival_rate": 20.0}, 300, 0)
    api = kvsim.simulate(w, kvsim.SimConfig(model="llama-3-8b", gpu="h100-80gb")).summary
    assert data["summary"]["ttft_s_p99"] == api["ttft_s_p99"]
    assert data["summary"]["makespan_s"] == api["makespan_s"]


def test_preset_flag(capsys):
    argv = [
        "run",
        "--requests",
        "20",
        "--model",
        "opt-13b",
        "--kv-cache-memory-bytes",
        "12GiB",
        "--preset",
        "vllm-v0",
    ]
    cfg = _json(capsys, argv)["config"]
    assert (cfg["append_check"], cfg["preemption"], cfg["cpu_blocks"]) == ("one-free-block", "auto", 327)
    assert _json(capsys, [*argv, "--watermark", "0.05"])["config"]["watermark"] == 0.05


def test_a_row_window_starts_the_clock_at_its_first_request():
    from kvsim.workloads.specs import apply_trace_params

    w = kvsim.analysis.sweep.make_workload("sharegpt", {}, 100, 0)
    window = apply_trace_params(w, {"start": 40, "stop": 60}, "sharegpt")
    assert len(window) == 20
    assert window.arrival[0] == 0.0
    assert window.arrival[-1] == pytest.approx(w.arrival[59] - w.arrival[40])
    assert (window.prompt_len == w.prompt_len[40:60]).all()
    with pytest.raises(kvsim.InvalidArgumentError, match="hold no request"):
        apply_trace_params(w, {"start": 100}, "sharegpt")


@pytest.mark.parametrize(
    "head",
    [
        'requests = "abc"',
        "requests = 0",
        "requests = true",
        "requests = 1e400",
        "seed = -3",
        "seed = 1.5",
        "workload = 5",
        'backend = "gpu"',
        "config = 3",
        "bogus = 1",
    ],
)
def test_a_bad_run_file_value_is_one_line_naming_the_file(capsys, tmp_path, head):
    """A run file's values go through the same bounds as the flags (no traceback, no silent int())."""
    path = tmp_path / "run.toml"
    body = f"{head}\n" + ("[config]\nnum_blocks = 300\n" if not head.startswith("config") else "")
    path.write_text(body)
    line = _error(capsys, ["run", "--toml", str(path)])
    assert line.startswith(f"kvsim run: error: run file {path}:"), line


def test_save_result_where_nothing_can_be_written_fails_before_the_run(capsys):
    line = _error(capsys, [*SMALL, "--save-result", "/proc/kvsim-results"])
    assert line.startswith("kvsim run: error: argument --save-result: cannot create /proc/kvsim-results"), (
        line
    )


def test_a_refused_run_leaves_no_result_folder(capsys, tmp_path):
    """The folder was created when checked, before the run's other flags were: a refused run left it."""
    d = tmp_path / "new" / "results"
    _error(capsys, [*SMALL, "--save-result", str(d), "--block-size", "-1"])
    assert not (tmp_path / "new").exists()
    (tmp_path / "f").touch()
    line = _error(capsys, [*SMALL, "--save-result", str(tmp_path / "f" / "x")])
    assert line.endswith(f"cannot create {tmp_path / 'f' / 'x'}: {tmp_path / 'f'} is not a folder"), line
    assert main([*SMALL, "--save-result", str(d)]) == 0
    assert len(list(d.glob("*.json"))) == 1


# -- the audit of the interface a vLLM user sees ------------------------------------------------------------------
def test_preset_flag_offers_every_preset_simconfig_has(capsys):
    """`--preset` once offered three of SimConfig.preset's five names (vllm-0.19 and vllm-0.11 missing)."""
    from kvsim.cli.flags import PRESETS

    with pytest.raises(kvsim.InvalidArgumentError) as exc:
        kvsim.SimConfig.preset("no-such-preset")
    listed = {name.strip(" '") for name in str(exc.value).split("is not one of", 1)[1].split(",")}
    assert set(PRESETS) == listed
    for name in PRESETS:
        data = _json(capsys, [*SMALL, "--preset", name])
        expected = kvsim.SimConfig.preset(name, num_blocks=200)
        assert data["config"]["free_order"] == expected.free_order, name
        assert data["config"]["waiting_over_budget"] == expected.waiting_over_budget, name


@pytest.mark.parametrize("rows", ["5:2", "7:7"])
def test_rows_window_must_be_ordered(capsys, rows):
    line = _error(capsys, [*SMALL, "--rows", rows])
    assert line.startswith("kvsim run: error: argument --rows:"), line  # was "run file None: ..."


def test_rows_window_past_the_workload_blames_rows(capsys):
    line = _error(capsys, [*SMALL, "--rows", "100:200"])
    assert line.startswith("kvsim run: error: argument --rows:"), line
    assert "hold no request" in line, line


def test_request_rate_inf_says_how_to_queue_everything_at_once(capsys):
    """vllm bench serve's default --request-rate is inf (every request at once)."""
    line = _error(capsys, [*SMALL, "--request-rate", "inf"])
    assert line.startswith("kvsim run: error: argument --request-rate:")
    assert "arrivals=all-at-once" in line
    data = _json(capsys, [*SMALL, "--workload", "sharegpt:arrivals=all-at-once"])
    assert data["workload"]["params"]["arrivals"] == "all-at-once"


def test_bare_save_result_is_vllms_flag_with_result_dir(capsys, tmp_path, monkeypatch):
    """vllm bench serve spells it `--save-result --result-dir DIR` (a flag and a folder)."""
    d = tmp_path / "runs"
    assert main([*SMALL, "--save-result", "--result-dir", str(d)]) == 0
    assert len(list(d.glob("*.json"))) == 1
    assert len(list(d.glob("*.requests.parquet"))) == 1
    monkeypatch.chdir(tmp_path)
    assert main([*SMALL, "--save-result"]) == 0
    assert len(list(tmp_path.glob("kvsim-*.json"))) == 1
    capsys.readouterr()
    line = _error(capsys, [*SMALL, "--result-dir", str(d)])
    assert line.startswith("kvsim run: error: argument --result-dir: applies with --save-result"), line
    line = _error(capsys, [*SMALL, "--save-result", str(d), "--result-dir", str(d)])
    assert line.startswith("kvsim run: error: argument --result-dir: not allowed"), line
    f = tmp_path / "a-file"
    f.write_text("x")
    line = _error(capsys, [*SMALL, "--save-result", "--result-dir", str(f)])
    assert line.startswith("kvsim run: error: argument --result-dir:"), line
    assert "not a folder" in line, line


def test_gpu_memory_utilization_default_is_vllm_033s_and_presets_keep_their_own(capsys):
    """vLLM 0.20.0 and later default --gpu-memory-utilization to 0.92 (once kvsim kept 0.9 and a run
    noted the difference): `kvsim run --gpu` sizes at 0.92 unless a preset of an older release or the
    flag says otherwise, and no run notes a difference any more."""
    argv = ["run", "--requests", "20", "--model", "llama-3-8b", "--gpu", "h100-80gb"]
    for extra, share in (
        ([], 0.92),
        (["--preset", "vllm-0.19"], 0.9),
        (["--preset", "vllm-v0", "--gpu-memory-utilization", "0.8"], 0.8),
    ):
        data = _json(capsys, [*argv, *extra])
        assert data["config"]["gpu_memory_utilization"] == share, extra
        preset = extra[1] if extra else "vllm-latest"
        blocks = kvsim.SimConfig.preset(
            preset, model="llama-3-8b", gpu="h100-80gb", gpu_memory_utilization=share
        ).num_blocks
        assert f"{blocks:,} blocks" in data["pool"], data["pool"]
        assert not any("--gpu-memory-utilization" in n for n in data["notes"]), data["notes"]


def test_vllm_serves_batch_defaults_have_a_tier_past_160_gib():
    """vLLM 0.33.0's get_batch_defaults gives B200-class GPUs (>= 160 GiB) 16384 tokens and 1024 seqs."""
    from kvsim.model.gpus import Gpu, vllm_server_batch_defaults

    big = Gpu("b200", 180 * 2**30, 8e12, 2.2e15, 64e9, "test")
    assert vllm_server_batch_defaults(big) == (16384, 1024)
    assert vllm_server_batch_defaults(kvsim.gpus.get("h200")) == (8192, 1024)
    assert vllm_server_batch_defaults(kvsim.gpus.get("a100-80gb")) == (2048, 256)


def test_the_v0_batch_rule_reads_no_gpu_and_the_serve_rules_are_refused_without_one(capsys):
    """vLLM v0's budget is max(max_model_len, 2048) (SchedulerConfig, `_DEFAULT_MAX_NUM_BATCHED_TOKENS`) on
    any GPU, so it holds without one: OPT-13B (a 2,048 context) takes 2048, not kvsim's GPU-less 8192. A
    serve rule picks by the GPU's memory: given without a GPU it is refused by name, and a preset's is not
    shown in `config:`; any rule given with both limits picks nothing and is refused."""
    from kvsim.model.gpus import vllm_server_batch_defaults

    sized = {"model": "opt-13b", "kv_cache_bytes": 12 * 2**30}
    for cfg in (
        kvsim.SimConfig.preset("vllm-v0", **sized),
        kvsim.SimConfig.preset("vllm-v0", gpu="a100-40gb", **sized),
        kvsim.SimConfig(batch_rule="v0", **sized),
    ):
        assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == (2048, 256)
    long = kvsim.SimConfig(batch_rule="v0", model="llama-3-8b", kv_cache_bytes=12 * 2**30)
    assert long.max_num_batched_tokens == 8192  # (its context of 8,192)
    assert kvsim.SimConfig(batch_rule="serve-0.9", **sized).max_num_batched_tokens == 8192
    assert vllm_server_batch_defaults(None, "v0", 4096) == (4096, 256)
    with pytest.raises(kvsim.errors.InvalidArgumentError, match="no GPU"):
        vllm_server_batch_defaults(None, "serve-0.9")
    base = ["run", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB", "--requests", "5"]
    assert main([*base, "--preset", "vllm-v0"]) == 0
    out = capsys.readouterr().out
    assert "max_num_batched_tokens=2048, batch_rule=v0" in out, out
    assert main([*base, "--preset", "vllm-v1"]) == 0
    out = capsys.readouterr().out
    assert "batch_rule" not in out, out
    assert "max_num_batched_tokens=8192" in out, out
    for rule in ("serve-0.9", "serve-0.28"):
        assert main([*base, "--batch-rule", rule]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0, err
        assert f"argument --batch-rule: '{rule}' does nothing here" in err, err
        assert "this run names no GPU" in err, err
        assert "give --gpu, --batch-rule v0, or drop the flag" in err, err
    assert main([*base, "--gpu", "a100-40gb", "--batch-rule", "serve-0.9"]) == 0
    capsys.readouterr()
    assert main([*base, "--batch-rule", "v0", "--max-num-seqs", "8", "--max-num-batched-tokens", "4096"]) == 2
    assert "both are given" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--model", "meta-llama/Meta-Llama-3-8B-Nope", "(did you mean llama-3-8b"),
        ("--model", "meta-llama/Meta-Llama-3-8B-Nope", "not in the Hugging Face cache (looked for "),
        ("--model", "Llama-3-8B-Nope", "did you mean llama-3-8b"),
        ("--model", "gpt-5", "or the path of a Hugging Face config.json"),
        ("--gpu", "H100", "(did you mean h100-80gb, h100-pcie?)"),
        ("--gpu", "h100", "(did you mean h100-80gb, h100-pcie?)"),
        ("--gpu", "a100", "(did you mean a100-40gb, a100-80gb?)"),
    ],
)
def test_a_vllm_users_model_and_gpu_names_get_a_suggestion(capsys, flag, value, needle):
    """vLLM takes hub names (`--model meta-llama/...`) and users say `h100`: the error points at the preset."""
    argv = ["run", "--requests", "5", "--model", "llama-3-8b", "--gpu", "h100-80gb", flag, value]
    line = _error(capsys, argv)
    assert line.startswith(f"kvsim run: error: argument {flag}:"), line
    assert needle in line, line


@pytest.mark.parametrize(
    ("flag", "text", "field", "value"),
    [
        ("--max-num-batched-tokens", "8K", "max_num_batched_tokens", 8192),
        ("--max-num-batched-tokens", "8k", "max_num_batched_tokens", 8000),
        ("--max-num-batched-tokens", "2.5k", "max_num_batched_tokens", 2500),
        ("--max-model-len", "2K", "max_model_len", 2048),
        ("--kv-cache-memory-bytes", "12G", "kv_cache_bytes", 12 * 2**30),
        ("--kv-cache-memory-bytes", "12g", "kv_cache_bytes", 12 * 10**9),
        ("--kv-cache-memory-bytes", "12GiB", "kv_cache_bytes", 12 * 2**30),
    ],
)
def test_vllms_human_readable_integers_read_as_vllm_reads_them(capsys, flag, text, field, value):
    """vLLM's --max-num-batched-tokens, --max-model-len and --kv-cache-memory-bytes take `8k` (decimal) and
    `8K` (binary); kvsim refused them, and 12G must not mean 12 * 10^9 where vLLM means 12 GiB."""
    argv = ["run", "--requests", "5", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB", flag, text]
    data = _json(capsys, argv)
    expected = kvsim.SimConfig(**{"model": "opt-13b", "kv_cache_bytes": 12 * 2**30, field: value})
    assert data["config"][field] == expected.describe()[field]
    assert data["config"]["num_blocks"] == expected.num_blocks


def test_a_binary_suffix_takes_a_whole_number(capsys):
    line = _error(capsys, [*SMALL, "--max-num-batched-tokens", "1.5K"])
    assert line.startswith("kvsim run: error: argument --max-num-batched-tokens: '1.5K'"), line


# -- the CPU tier's table ------------------------------------------------------------------------------------
TIER_RUN = [
    "run", "--num-gpu-blocks-override", "128", "--kv-offloading-chunks", "40", "--requests", "60",
    "--workload", "synthetic:system_prompt_len=256,num_system_prompts=4,arrival_rate=20",
]  # fmt: skip


@pytest.mark.parametrize("replicas", [1, 3])
def test_the_tier_table_says_how_many_chunks_its_occupancy_is_of(capsys, replicas):
    """One replica: its tier's chunks. A fleet: its tiers (the summary's `cpu_tier_chunks`, all of them),
    the mean over all, the peak the fullest tier's; the table said 'of 40 chunks' for three tiers of 40."""
    argv = [*TIER_RUN, "--replicas", str(replicas)]
    s = _json(capsys, argv)["summary"]
    assert s["cpu_tier_chunks"] == 40 * replicas
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "tier occupancy" in x)
    mean, peak = 100 * s["cpu_tier_occupancy"], 100 * s["cpu_tier_peak_occupancy"]
    held = "40 chunks" if replicas == 1 else "3 tiers × 40 chunks (peak: the fullest tier's)"
    assert line.split(None, 5)[-1] == f"{mean:.1f} % / {peak:.1f} % of {held}"


@pytest.mark.parametrize("size", ["0.001", "1B"])
def test_a_tier_smaller_than_a_chunk_is_refused(capsys, size):
    """It ran as no tier at all, its table and its checks gone (a 1 MiB tier with `--policy reserve` ran)."""
    err = _error(capsys, ["run", "--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "2GiB", "--requests", "20",
                          "--kv-offloading-size", size])  # fmt: skip
    assert "holds no CPU-tier chunk" in err
    assert "or 0 for no tier" in err


def test_repeated_output_flags_add_up_or_are_refused(capsys):
    """A second `--goodput` or `--percentile-metrics` replaced the first (an SLO attainment of 100 % where
    both SLOs gave 0 %); now they add up, and a name or percentile given twice is refused."""
    both = _json(capsys, [*SMALL, "--goodput", "ttft:0.5", "tpot:5"])["serving"]
    twice = _json(capsys, [*SMALL, "--goodput", "ttft:0.5", "--goodput", "tpot:5"])["serving"]
    assert twice == both
    split = _json(capsys, [*SMALL, "--percentile-metrics", "ttft", "--percentile-metrics", "e2el"])["serving"]
    assert {"p99_ttft_ms", "p99_e2el_ms"} <= set(split)
    assert "p99_tpot_ms" not in split
    for argv, says in (
        (["--goodput", "ttft:1", "--goodput", "ttft:5"], "given twice"),
        (["--percentile-metrics", "ttft", "--percentile-metrics", "ttft"], "repeat a name"),
        (["--metric-percentiles", "50,50"], "repeat a percentile"),
    ):
        assert says in _error(capsys, [*SMALL, *argv])


def test_a_percentile_is_labelled_exactly(capsys):
    """`:g` rounded 99.99999 to `p100`, so `99.99999,100` printed two `p100` columns and kept one."""
    serving = _json(capsys, [*SMALL, "--metric-percentiles", "99.99999,100"])["serving"]
    assert {"p99_99999_ttft_ms", "p100_ttft_ms"} <= set(serving)


# -- input validation: files of no requests, absurd arrivals, unreadable calibrations, run-file strings ---------
@pytest.mark.parametrize(
    ("name", "text", "extra", "said"),
    [
        ("empty.jsonl", "", [], "line 1, field 'arrival': the file has no rows"),
        ("blank.jsonl", "\n\n", [], "line 1, field 'arrival': the file has no rows"),
        (
            "header.csv",
            "t,prompt_len,output_len\n",
            ["--trace-columns", "arrival=t"],
            "field 't': the file has no rows",
        ),
        (
            "dup.csv",
            "arrival,prompt_len,output_len,arrival\n0,2,3,1\n",
            [],
            "column 'arrival' appears more than once",
        ),
    ],
)
def test_a_trace_file_of_no_requests_is_one_line(capsys, tmp_path, name, text, extra, said):
    """It ran as "0 requests" (exit 0); a repeated CSV column silently took the first."""
    path = tmp_path / name
    path.write_text(text)
    line = _error(capsys, ["run", "--num-gpu-blocks-override", "200", "--workload", str(path), *extra])
    assert line.startswith(f"kvsim run: error: {path}, line 1, field "), line
    assert line.endswith(said), line


@pytest.mark.parametrize(
    "argv",
    [
        ["--workload", "sharegpt:time_scale=1e300"],
        ["--request-rate", "1e-300"],
    ],
)
def test_arrivals_past_the_clock_are_one_line_without_warnings(argv):
    """numpy printed `RuntimeWarning: overflow encountered in scalar multiply` before the error."""
    code = "import sys; from kvsim.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-c",
            code,
            "run",
            "--requests",
            "5",
            "--num-gpu-blocks-override",
            "200",
            *argv,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "past the simulated clock's range" in lines[0]


def test_an_arrival_past_the_clock_is_refused_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w = kvsim.Workload(arrival=[0.0, 1e300, 1e308], prompt_len=[4, 4, 4], output_len=[2, 2, 2])
        with pytest.raises(kvsim.InvalidArgumentError, match=r"row 2: arrival 1e\+308 s is past"):
            kvsim.simulate(w, kvsim.SimConfig(num_blocks=100))


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (
            b"\x7fELF\xff\xfe" + bytes(range(256)) * 4,
            "not UTF-8 text, so not a calibration JSON (byte 4: ff fe 00 01",
        ),
        (b'{"a": 1,,}', "not JSON (Expecting property name enclosed in double quotes at line 1 column 9"),
        (b"[1, 2]", "not a calibration file (a JSON list, not an object)"),
    ],
)
def test_a_calibration_that_is_not_json_is_a_short_line(capsys, tmp_path, data, said):
    """A binary file's repr (hundreds of bytes) was printed in the error."""
    path = tmp_path / "cal.json"
    path.write_bytes(data)
    line = _error(capsys, [*SMALL, "--calibration", str(path)])
    assert line.startswith(f"kvsim run: error: argument --calibration: calibration {str(path)!r}: {said}"), (
        line
    )
    assert len(line) < 200 + len(str(path)), line


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("num_blocks", '"400"', "num_blocks '400' must be an integer, not a string"),
        ("gpu_memory_utilization", '"0.9"', "gpu_memory_utilization '0.9' must be a number"),
        (
            "enable_prefix_caching",
            '"false"',
            "enable_prefix_caching 'false' must be True or False (in a TOML file true or false, unquoted; on "
            "the command line true or false)",
        ),
    ],
)
def test_a_run_file_string_for_a_number_is_refused_as_simconfig_does(capsys, tmp_path, key, value, said):
    """`num_blocks = "400"` ran although `SimConfig(num_blocks="400")` is refused."""
    path = tmp_path / "run.toml"
    base = "" if key == "num_blocks" else "num_blocks = 300\n"
    path.write_text(f"requests = 5\n[config]\n{base}{key} = {value}\n")
    line = _error(capsys, ["run", "--toml", str(path)])
    assert line == f"kvsim run: error: run file {path}: [config] {said}", line
    with pytest.raises(kvsim.InvalidArgumentError, match=re.escape(said.split(" must")[0])):
        kvsim.SimConfig(**{"num_blocks": 300, key: value.strip('"')})


def test_a_run_file_keeps_units_and_none(capsys, tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(
        'requests = 5\n[config]\nnum_blocks = 300\niteration_time_ps = "2ms"\nmax_model_len = "none"\n'
    )
    data = _json(capsys, ["run", "--toml", str(path)])
    assert data["config"]["iteration_time_ps"] == "2 ms"


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        (["--workload", "sharegpt:arrivals=poisson,burstiness=3"], "argument --workload: workload "),
        (["--workload", "sharegpt:arrivals=all-at-once,arrival_rate=3"], "arrival_rate does nothing"),
        (
            ["--workload", "sharegpt", "--trace-time-unit", "ms"],
            "argument --trace-time-unit: applies to a file",
        ),
        (
            ["--workload", "sharegpt:start=2", "--rows", "0:5"],
            "argument --rows: workload 'sharegpt:start=2' sets start=2 too",
        ),
        (
            ["--workload", "sharegpt:request_rate=3", "--request-rate", "5"],
            "argument --request-rate: workload 'sharegpt:request_rate=3' sets request_rate=3.0 too",
        ),
        (
            ["--workload", "sharegpt:time_scale=3", "--time-scale", "2"],
            "argument --time-scale: workload 'sharegpt:time_scale=3' sets time_scale=3.0 too",
        ),
        (["--model", "llama-3-8b", "--gpu", "h100-80gb", "-dp", "2"], "argument -dp: data_parallel_size 2"),
        (["--model", "llama-3-8b", "--gpu", "h100-80gb", "-ep"], "argument -ep: enable_expert_parallel"),
    ],
)
def test_ignored_or_conflicting_workload_and_parallel_flags_are_one_line(capsys, flags, text):
    argv = [*SMALL, *flags]
    if "--model" in flags:
        argv.remove("--num-gpu-blocks-override")
        argv.remove("200")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert text in err[0], err[0]


def test_trace_time_unit_still_reads_a_file(tmp_path, capsys):
    f = tmp_path / "t.csv"
    f.write_text("arrival,prompt_len,output_len\n0,10,5\n500,12,4\n")
    assert main([*SMALL, "--workload", str(f), "--trace-time-unit", "ms", "--json"]) == 0
    assert main([*SMALL, "--workload", "sharegpt", "--rows", "2:9", "--time-scale", "2"]) == 0


@pytest.mark.parametrize(
    ("key", "value"),
    [("model", "none"), ("gpu", "null"), ("iteration_time_ps", "none"), ("policy", "None")],
)
def test_none_unsets_only_an_optional_field(capsys, tmp_path, key, value):
    """`"none"` (TOML has no null; flags are text) unsets an optional field. For `model` and `gpu`, whose
    help documents no `none`, it was taken as no model / no GPU; for a required field it said `None must
    be given`: both refused naming the key, from a run file and from the flag."""
    said = f"{key} {value!r}: 'none' unsets only an optional field, and {key} is not one"
    path = tmp_path / "run.toml"
    path.write_text(f'requests = 5\n[config]\nnum_blocks = 300\n{key} = "{value}"\n')
    line = _error(capsys, ["run", "--toml", str(path)])
    assert line.startswith(f"kvsim run: error: run file {path}: [config] {said}"), line
    flag = "--" + key.replace("_", "-")
    line = _error(capsys, [*SMALL, flag, value])
    assert line.startswith(f"kvsim run: error: argument {flag}: {said}"), line


def test_the_choice_none_is_a_choice_not_unset(capsys, tmp_path):
    """`admission_gate`'s choice `none` (older vLLM's gate) was read as None, unset, and refused as a
    required field's None, from a run file and from `--admission-gate none`; SimConfig took it."""
    path = tmp_path / "run.toml"
    path.write_text('requests = 5\n[config]\nnum_blocks = 300\nadmission_gate = "none"\n')
    assert _json(capsys, ["run", "--toml", str(path)])["config"]["admission_gate"] == "none"
    assert _json(capsys, [*SMALL, "--admission-gate", "none"])["config"]["admission_gate"] == "none"
    assert _json(capsys, [*SMALL, "--max-model-len", "none"])["config"]["max_model_len"] is None


def test_kvsim_run_says_which_gdn_prefill_kernel_it_assumed(capsys):
    """Qwen3-Next without a GPU: the gated delta net's prefill kernel is FlashInfer's (576-token blocks with
    prefix caching) and a note says so and how to choose Triton's; on an H200 nothing is assumed; with
    --gdn-prefill-backend triton the blocks are 544 tokens and no note."""
    base = ["run", "--requests", "5", "--model", "qwen3-next-80b-a3b", "--workload", "sharegpt"]
    assert main([*base, "--num-gpu-blocks-override", "400"]) == 0
    out = capsys.readouterr().out
    assert "block 576" in out
    assert "note: gated delta net prefill on FlashInfer's kernel" in out
    assert "--gdn-prefill-backend triton" in out
    assert main([*base, "--num-gpu-blocks-override", "400", "--gdn-prefill-backend", "triton"]) == 0
    out = capsys.readouterr().out
    assert "block 544" in out
    assert "gated delta net" not in out
    assert main([*base, "--gpu", "h200", "-tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "block 576" in out
    assert "gated delta net" not in out


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--pd-threshold", "30"),
        ("--pd-link-bandwidth", "1e9"),
        ("--pd-link-latency", "1ms"),
        ("--pd-link-ps-per-block", "1000"),
    ],
)
def test_a_disaggregation_knob_without_prefill_replicas_is_refused_not_ignored(capsys, flag, value):
    """It ran as a fleet of one replica with the knob unread (exit 0)."""
    assert main(["run", "--num-gpu-blocks-override", "2000", "--requests", "10", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        f"kvsim run: error: argument {flag}: a disaggregated fleet's knob, but this run has no "
    ), err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--replicas", "2", "--router-weight", "prefix=3"], "--router-weight: read only by router weighted"),
        (
            ["--replicas", "2", "--router-tie-break", "lowest"],
            "--router-tie-break: read only by routers that",
        ),
        (
            ["--replicas", "2", "--router", "least-kv", "--prefix-load-cap", "2"],
            "--prefix-load-cap: read only",
        ),
        (["--replicas", "2", "--router-seed", "5"], "--router-seed: read only by the random router"),
        (
            ["--replicas", "2", "--router", "least-kv", "--router-tie-break", "lowest", "--router-seed", "5"],
            "--router-seed: read only by the random router",
        ),
        (["--replicas", "2", "--router", "random", "--router-refresh", "1"], "--router-refresh: read only"),
        (["--kv-offloading-latency-ps", "5ms"], "--kv-offloading-latency-ps: a CPU tier's knob"),
        (["--kv-offloading-eviction-policy", "arc"], "--kv-offloading-eviction-policy: a CPU tier's knob"),
        (["--kv-offloading-blocks-per-chunk", "4"], "--kv-offloading-blocks-per-chunk: a CPU tier's knob"),
        (["--no-kv-offloading-prompt-only"], "--kv-offloading-prompt-only: a CPU tier's knob"),
        (["--kv-offloading-ps-per-block", "5"], "--kv-offloading-ps-per-block: a CPU tier's knob"),
        (["--swap-ps-per-block", "5ms"], "--swap-ps-per-block: the time a swap takes, but preemption"),
        (
            ["--prefill-replicas", "1", "--prefill-config", "replicas=3,router=random"],
            "--prefill-config: replicas is the fleet's",
        ),
        (["-tp", "1000"], "-tp: a model's knob, but this run names no model"),
        (["--kv-cache-dtype", "fp8"], "--kv-cache-dtype: a model's knob"),
        (["--quantization", "fp8"], "--quantization: a model's knob"),
        (["--gpu-memory-utilization", "0.5"], "--gpu-memory-utilization: a model's knob"),
    ],
)
def test_a_knob_the_run_does_not_read_is_refused_not_dropped(capsys, argv, said):
    """A CLI review found these accepted and dropped (exit 0; `config:` listed some as if they took
    effect): router knobs under a router that reads none of them, a CPU tier's knobs with no tier, a swap
    time under recompute, the fleet's shape inside --prefill-config."""
    assert main(["run", "--num-gpu-blocks-override", "500", "--requests", "10", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"kvsim run: error: argument {said}"), err


def test_the_knobs_run_where_they_are_read(capsys):
    for argv in (
        ["--replicas", "2", "--router", "weighted", "--router-weight", "prefix=3"],
        ["--replicas", "2", "--router", "prefix-affinity", "--prefix-load-cap", "2", "--router-seed", "5"],
        ["--replicas", "2", "--router", "least-kv", "--router-tie-break", "lowest", "--router-refresh", "1"],
        ["--replicas", "2", "--router", "random", "--router-seed", "5"],
        ["--kv-offloading-chunks", "1000", "--kv-offloading-eviction-policy", "arc"],
        ["--preemption-mode", "swap", "--cpu-blocks", "100", "--swap-ps-per-block", "5ms"],
        ["--preset", "vllm-0.19"],  # (its gpu_memory_utilization 0.9 is the preset's, not the user's)
    ):
        assert main(["run", "--num-gpu-blocks-override", "500", "--requests", "10", *argv]) == 0, argv
    capsys.readouterr()


LLAMA_ON_H100 = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "3"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--placement", "buddy"], "--placement: 'buddy' does nothing here: placement is how a contiguous"),
        (["--gdn-prefill-backend", "flashinfer"], "--gdn-prefill-backend: 'flashinfer' does nothing here"),
        (
            ["--language-model-only"],
            "--language-model-only: the flag does nothing here: model llama-3.1-8b is",
        ),
        (["--hybrid-kv-cache-manager", "off"], "--hybrid-kv-cache-manager: 'off' does nothing here"),
        (["--hybrid-kv-cache-manager", "on"], "--hybrid-kv-cache-manager: 'on' does nothing here"),
        (["--disable-hybrid-kv-cache-manager"], "--disable-hybrid-kv-cache-manager: the flag does nothing"),
        (["--router", "prefix-affinity"], "--router: 'prefix-affinity' does nothing here: a router picks"),
        (["--router", "random", "--router-seed", "3"], "--router: 'random' does nothing here"),
        (
            ["--allow-long-max-model-len"],
            "--allow-long-max-model-len: the flag does nothing here: it lets a max_model_len longer than "
            "model llama-3.1-8b's context of 131,072 through, and none is given",
        ),
        (
            ["--max-model-len", "4096", "--allow-long-max-model-len"],
            "--allow-long-max-model-len: the flag does nothing here: it lets a max_model_len longer than "
            "model llama-3.1-8b's context of 131,072 through, and 4,096 is not longer",
        ),
    ],
)
def test_a_flag_that_does_nothing_for_this_run_is_refused_by_name(capsys, argv, said):
    """A review found these accepted with exit 0 and no word (`config:` listing them as if they took
    effect): a placement under a paged policy, a GDN kernel, --language-model-only and the hybrid
    manager's switch on a text-only model of full-attention layers (vLLM reads none of them there), a
    router in front of one replica."""
    assert main([*LLAMA_ON_H100, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"kvsim run: error: argument {said}"), err
    assert err.rstrip().endswith("drop the flag"), err


def test_the_pool_and_context_knobs_run_where_they_act(capsys, tmp_path):
    """--pool-null-block on a pool sized from memory or given in blocks and --allow-long-max-model-len
    beside a longer --max-model-len change the run (the refusals above are of flags idle there, not
    always), in a sweep too, and an override's note quotes vLLM's own count under either."""
    base = ["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--requests", "3", "--json"]
    assert main(base) == 0
    within = json.loads(capsys.readouterr().out)["config"]["num_blocks"]
    assert main([*base, "--pool-null-block", "extra"]) == 0
    extra = json.loads(capsys.readouterr().out)
    assert extra["config"]["num_blocks"] == within + 1
    assert "plus kvsim's null block (v0 had none)" in extra["pool"]
    assert main([*base, "--max-model-len", "16384", "--allow-long-max-model-len"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["max_model_len"] == 16384
    argv = ["run", "--preset", "vllm-v0", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--requests", "3"]
    assert main([*argv, "--num-gpu-blocks-override", "3000", "--kv-cache-memory-bytes", "12GiB"]) == 0
    out = capsys.readouterr().out
    assert (
        'logs "Overriding num_gpu_blocks=6144 with num_gpu_blocks_override=3000"' in out
    )  # (not v0's 6,145)
    sweep = [
        "sweep",
        "--base",
        "num_blocks=3000",
        "--base",
        "pool_null_block=extra",
        "--grid",
        "block_size=16,32",
    ]
    # (v0's count: 3,000 usable blocks and kvsim's null block; once refused as doing nothing)
    out_file = tmp_path / "s.parquet"
    assert main([*sweep, "--requests", "5", "--no-progress", "--output", str(out_file)]) == 0
    assert pl.read_parquet(out_file)["num_blocks"].to_list() == [3001, 3001]


def test_static_needs_a_given_max_model_len(capsys):
    """A static policy reserves max_model_len a request: the model's context it now defaults to (40,960
    tokens for Qwen3-8B) would refuse every request a pool cannot hold whole, for a figure nobody chose."""
    argv = ["run", "--policy", "static", "--model", "qwen3-8b", "--num-gpu-blocks-override", "2000"]
    assert main([*argv, "--requests", "5"]) == 2
    assert "policy 'static' reserves max_model_len per request: set max_model_len (--max-model-len)" in (
        capsys.readouterr().err
    )
    assert main([*argv, "--requests", "5", "--max-model-len", "2048"]) == 0


def test_those_flags_run_where_they_act(capsys):
    """The same flags where the run reads them: each changes what runs (so the refusals above are not
    of flags that never act)."""
    small = ["--num-gpu-blocks-override", "500", "--requests", "5"]
    pairs = (
        (["--policy", "static", "--max-model-len", "4096"], ["--placement", "buddy"]),
        (["--replicas", "2"], ["--router", "least-loaded"]),
        (["--prefill-replicas", "2", "--pd-link-ps-per-block", "1000"], ["--router", "random"]),
    )
    for base, flag in pairs:
        assert main(["run", *small, *base, "--json"]) == 0, base
        without = json.loads(capsys.readouterr().out)
        assert main(["run", *small, *base, *flag, "--json"]) == 0, flag
        with_flag = json.loads(capsys.readouterr().out)
        key = flag[0].lstrip("-").replace("-", "_")
        assert with_flag["config"][key] != without["config"][key]
    sizes = []
    for flags in ([], ["--language-model-only"]):
        assert main(["run", "--model", "gemma-3-12b", "--gpu", "h100-80gb", "--requests", "3", *flags]) == 0
        sizes.append(capsys.readouterr().out.split("\n", 2)[1])
    assert sizes[0] != sizes[1]  # (the towers' memory goes to the KV cache)
    gdn = ["run", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "-tp", "2", "--requests", "3"]
    assert main([*gdn, "--gdn-prefill-backend", "triton"]) == 0
    assert "block 544" in capsys.readouterr().out  # (no checkpoints: FlashInfer's 64-token grid gone)
    oss = [
        "run",
        "--model",
        "gpt-oss-120b",
        "--gpu",
        "h100-80gb",
        "--requests",
        "3",
        "--max-model-len",
        "65536",
    ]
    assert main([*oss, "--hybrid-kv-cache-manager", "off"]) == 0
    assert "in 2 groups" not in capsys.readouterr().out


PLAN = ["plan", "--slo", "ttft_p99:2s", "--max-probes", "2", "--workers", "1", "--requests", "5"]
SWEEP = ["sweep", "--requests", "5", "--no-progress", "--workers", "1", "--no-resume"]


@pytest.mark.parametrize(
    ("flags", "base", "said"),
    [
        (
            ["--placement", "buddy"],
            ["placement=buddy"],
            "placement: 'buddy' does nothing here: placement is how",
        ),
        (
            ["--gdn-prefill-backend", "flashinfer"],
            ["gdn_prefill_backend=flashinfer"],
            "gdn-prefill-backend: 'flashinfer' does nothing here",
        ),
        (["--language-model-only"], ["language_model_only=true"], "language-model-only: "),
        (
            ["--hybrid-kv-cache-manager", "off"],
            ["hybrid_kv_cache_manager=off"],
            "hybrid-kv-cache-manager: 'off'",
        ),
        (
            ["--router", "prefix-affinity"],
            ["router=prefix-affinity"],
            "router: 'prefix-affinity' does nothing",
        ),
        (
            ["--replicas", "2", "--router-seed", "3"],
            ["replicas=2", "router_seed=3"],
            "router-seed: read only by the random router",
        ),
    ],
)
def test_plan_and_sweep_refuse_a_flag_that_does_nothing_at_any_point(capsys, tmp_path, flags, base, said):
    """`kvsim plan` and `kvsim sweep` accepted the flags `kvsim run` refuses (exit 0, the search or the
    grid run with the knob unread): the same rule (`kvsim.cli.refusals.refuse_idle_at_every_point`) refuses
    them there, by the flag or the base field given, before any probe or point runs."""
    model = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb"]
    assert main([*PLAN, *model, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"kvsim plan: error: argument --{said}"), err
    assert err.rstrip().endswith(" or drop the flag") or err.rstrip().endswith("; drop the flag"), err
    out = tmp_path / "sweep.parquet"
    sweep_base = [a for b in ("model=llama-3.1-8b", "gpu=h100-80gb", *base) for a in ("--base", b)]
    assert main([*SWEEP, *sweep_base, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    field = base[-1].split("=")[0]
    assert err.startswith(f"kvsim sweep: error: argument --base {field}: "), err
    assert err.rstrip().endswith("drop it"), err
    assert not out.exists()  # (refused before any point ran)


def test_a_sweep_file_s_idle_base_field_is_named_by_its_table(capsys, tmp_path):
    """A sweep file's `[base]` field is named by the file and its table, as its other errors are."""
    path = tmp_path / "s.toml"
    path.write_text('[base]\nnum_blocks = 500\nplacement = "buddy"\n')
    assert main([*SWEEP, "--file", str(path), "--output", str(tmp_path / "s.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvsim sweep: error: sweep file {path}: [base] placement: 'buddy' does nothing"), (
        err
    )


def test_plan_and_sweep_take_those_flags_where_some_point_reads_them(capsys, tmp_path):
    """Refused only where no point reads the knob: a search over replica counts (`--smallest replicas`,
    `--split`) reads `--router`, a `--compare` of policies with a contiguous one reads `--placement`, a
    compare of models with a multimodal one `--language-model-only`; a sweep's grid likewise. A knob the
    search or grid varies is what it measures, not refused (the candidates tie, the rows repeat)."""
    blocks = ["--num-gpu-blocks-override", "500"]
    accepted = (
        [*blocks, "--smallest", "replicas", "--router", "least-loaded"],
        [*blocks, "--split", "--max-gpus", "3", "--router", "least-loaded", "--pd-link-ps-per-block", "1000"],
        [*blocks, "--max-model-len", "4096", "--compare", "policy=vllm,static", "--placement", "buddy"],
        [*LLAMA_ON_H100[1:5], "--compare", "model=llama-3.1-8b,gemma-3-12b", "--language-model-only"],
        [*blocks, "--compare", "placement=first-fit,buddy"],
    )
    for flags in accepted:
        assert main([*PLAN, *flags, "--json"]) == 0, flags
        out = json.loads(capsys.readouterr().out)
        knob = next(f for f in reversed(flags) if f.startswith("--")).lstrip("-").replace("-", "_")
        if knob in out["config"]:
            assert out["config"][knob] != kvsim.SimConfig(num_blocks=500).describe()[knob], flags
    for i, grid in enumerate(
        (
            ["--base", "max_model_len=4096", "--base", "placement=buddy", "--grid", "policy=vllm,static"],
            ["--base", "router=least-loaded", "--grid", "replicas=1,2"],
            ["--grid", "placement=first-fit,buddy"],
        )
    ):
        out = tmp_path / f"{i}.parquet"
        assert main([*SWEEP, "--base", "num_blocks=500", *grid, "--output", str(out)]) == 0, grid
        assert pl.read_parquet(out).height == 2
    capsys.readouterr()


def test_plan_names_the_sizing_flag_that_won_unless_the_search_varies_it(capsys):
    """`kvsim run`'s note on a sizing flag another overrides (`_overridden_sizing`) in `kvsim plan`: the
    search ran on the override's pool without a word; a search over the KV memory sizes each probe's pool
    itself, so there the note would be wrong."""
    argv = [*PLAN, "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--num-gpu-blocks-override", "2000"]
    argv += ["--kv-cache-memory-bytes", "12GiB", "--max-model-len", "65536"]  # (12 GiB holds one request)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "note: --num-gpu-blocks-override 2,000 sizes the pool, not --kv-cache-memory-bytes 12.0 GiB (whose"
        in out
    )
    # (a search of kv_cache_bytes drops the override in every probe: refused by name, one line)
    assert main([*argv, "--smallest", "kv_cache_bytes"]) == 2
    assert "argument --num-gpu-blocks-override: --smallest kv_cache_bytes sizes" in capsys.readouterr().err
    alone = [a for a in argv if a not in ("--num-gpu-blocks-override", "2000")]
    assert main([*alone, "--smallest", "kv_cache_bytes"]) == 0
    assert "sizes the pool, not" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "used", "unused", "said"),
    [
        (
            # (12 GiB holds 98,304 tokens: one request of the model's 131,072 does not fit, which vLLM
            # refuses before the override replaces the blocks)
            [
                "--num-gpu-blocks-override",
                "2000",
                "--kv-cache-memory-bytes",
                "12GiB",
                "--max-model-len",
                "65536",
            ],
            "num_blocks=2000",
            "kv_cache_bytes",
            "--num-gpu-blocks-override 2,000 sizes the pool, not --kv-cache-memory-bytes 12.0 GiB (whose KV "
            'memory holds 6,144 blocks): vLLM lets the override win (its get_kv_cache_configs logs "Overriding '
            'num_gpu_blocks=6144 with num_gpu_blocks_override=2000")',
        ),
        (
            ["--num-gpu-blocks-override", "2000", "--gpu-memory-utilization", "0.5"],
            "num_blocks=2000",
            "gpu_memory_utilization",
            "--num-gpu-blocks-override 2,000 sizes the pool, not --gpu-memory-utilization 0.5 (whose KV memory "
            "holds 11,111 blocks)",
        ),
        (
            [
                "--kv-cache-memory-bytes",
                "12GiB",
                "--gpu-memory-utilization",
                "0.5",
                "--max-model-len",
                "65536",
            ],
            "kv_cache_bytes=12 GiB",
            "gpu_memory_utilization",
            "--kv-cache-memory-bytes 12.0 GiB is the KV memory, not what --gpu-memory-utilization 0.5 leaves",
        ),
    ],
)
def test_a_sizing_flag_another_overrides_is_named_not_listed(capsys, flags, used, unused, said):
    """vLLM lets num_gpu_blocks_override win over the blocks the KV memory holds, and kv_cache_memory_bytes
    over gpu_memory_utilization: `config:` listed both (`num_blocks=2000, ..., kv_cache_bytes=12 GiB`)
    under a pool line of the override's. The run says which one sized the pool and lists only it."""
    assert main([*LLAMA_ON_H100, *flags]) == 0
    out = capsys.readouterr().out
    config = next(line for line in out.splitlines() if line.startswith("config: "))
    assert used in config, config
    assert f"{unused}=" not in config, config
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert any(line.startswith(f"note: {said}") for line in notes), notes
    sized = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", gpu_memory_utilization=0.5)
    assert sized.num_blocks == 11111  # (the count the note names is the pool that flag alone sizes)


def test_a_kv_memory_beside_blocks_without_a_model_is_named_not_listed(capsys):
    """No model: the KV memory cuts into no block at all, and the blocks given are the pool."""
    argv = ["run", "--num-gpu-blocks-override", "500", "--kv-cache-memory-bytes", "12GiB", "--requests", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "kv_cache_bytes=" not in next(line for line in out.splitlines() if line.startswith("config: "))
    assert "note: --num-gpu-blocks-override 500 sizes the pool, not --kv-cache-memory-bytes 12.0 GiB: " in out


def test_a_block_size_a_mamba_state_raises_is_said_and_saved_as_the_pools(capsys, tmp_path):
    """--block-size 32 on Qwen3-Next ran 576-token blocks (vLLM's _align_hybrid_block_size, which logs
    "Setting attention block size to 576 tokens ...") while `config:` said block_size=32 and the saved
    JSON "block_size": 32 beside 576-token groups. Now a note names both, `config:` the pool's (and the one
    asked), and the JSON's pool_sizing the pool's with the given one labelled beside it."""
    argv = ["run", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "-tp", "2", "--requests", "3"]
    assert main([*argv, "--block-size", "32", "--save-result", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "block 576," in out
    config = next(line for line in out.splitlines() if line.startswith("config: "))
    assert "block_size=576 (raised from 32 for the state layers)" in config
    assert "block_size=32," not in config
    notes = [line for line in out.splitlines() if line.startswith("note: block size")]
    assert notes == [
        "note: block size 32 raised to 576 tokens: qwen3-next-80b-a3b keeps Mamba states, and vLLM raises the "
        'attention block until a page holds one (it logs "Setting attention block size to 576 tokens to ensure '
        "that attention page size is >= mamba page size.\"); every group's block is 576 tokens "
        "(--save-result's pool_sizing: block_size 576, block_size_given 32)"
    ]
    saved = json.loads(next(tmp_path.glob("*.json")).read_text())
    sizing = saved["pool_sizing"]
    assert (sizing["block_size"], sizing["block_size_given"]) == (576, 32)
    assert {g["block_size"] for g in sizing["kv_groups"]} == {576}
    assert sizing["tokens"] == sizing["num_blocks"] * 576
    # A size the state needs no raise for, and a model without states: no note, the two sizes agree.
    for run, size in ((argv, "576"), (LLAMA_ON_H100, "32")):
        assert main([*run, "--block-size", size, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["pool_sizing"]["block_size"] == data["pool_sizing"]["block_size_given"] == int(size)
        assert not [n for n in data["notes"] if n.startswith("block size")]


def test_internal_fragmentation_says_what_it_is_a_share_of(capsys):
    """128-token blocks on a large pool printed "internal fragmentation 0.0 %" while 13 % of the slots
    they allocated held no token (the JSON's stored_share_of_allocated 0.867): the share was of the whole
    pool. The table now labels that row and adds the share of the allocated slots."""
    argv = ["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--block-size", "128", "--requests", "500"]
    assert main([*argv, "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    assert s["internal_fragmentation_of_allocated"] == pytest.approx(1 - s["stored_share_of_allocated"])
    assert s["internal_fragmentation_of_allocated"] > 0.1 > 100 * s["internal_fragmentation"]
    assert main(argv) == 0
    rows = {
        line[:38].strip(): line[38:].strip()
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("  internal fragmentation")
    }
    share = 100 * s["internal_fragmentation_of_allocated"]
    assert rows == {
        "internal fragmentation / pool": f"{100 * s['internal_fragmentation']:.1f} %",
        "internal fragmentation / allocated": f"{share:.1f} %",
    }


def test_a_fleet_of_one_reads_one_replica_and_transfers_read_binary_units(capsys):
    """A P/D run of one prefill and one decode replica printed "== fleet: 1 replicas" and "1 decode
    replicas", and its transfers in decimal GB (40.28 GB) where every other size kvsim prints is binary
    (fmt_bytes: GiB, MiB)."""
    from kvsim.model.units import fmt_bytes

    argv = ["run", "--model", "llama-3.1-8b", "--num-gpu-blocks-override", "500", "--requests", "20"]
    argv += ["--prefill-replicas", "1"]
    assert main([*argv, "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)["summary"]["pd_transfer_bytes"]
    assert moved > 2**20
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "== fleet: 1 decode and 1 prefill replica, router round-robin ==" in out
    assert "== disaggregation: 1 prefill : 1 decode replica; " in out
    transfers = next(line for line in out.splitlines() if line.startswith("  transfers: "))
    assert f" blocks, {fmt_bytes(moved)}); " in transfers, transfers
    assert " GB" not in transfers


def test_the_config_line_leaves_out_a_swap_time_a_run_never_uses(capsys):
    """A hybrid model cannot swap (vLLM's hybrid manager: recompute only); its swap time was printed for
    the 16-token block asked, not the 576-token block it runs. Recompute preemption (the default) never
    swaps either: the swap time shows only under swap preemption."""
    for model, flags, swaps in (
        ("llama-3.1-8b", ["--gpu", "h100-80gb", "--preemption-mode", "swap", "--swap-space", "4"], True),
        ("llama-3.1-8b", ["--gpu", "h100-80gb"], False),
        ("qwen3-next-80b-a3b", ["--gpu", "h200", "-tp", "2"], False),
    ):
        assert main(["run", "--model", model, *flags, "--requests", "3"]) == 0
        (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("config: ")]
        assert ("swap_ps_per_block=" in line) is swaps, line


@pytest.mark.parametrize(
    ("module", "argv", "said"),
    [
        ("kvsim.analysis.claims", ["--bogus"], "unrecognized arguments: --bogus"),
        ("kvsim.analysis.claims", ["abc"], "SCALE 'abc' is not a number"),  # (a bare ValueError traceback)
        ("kvsim.analysis.claims", ["1e-9"], "SCALE '1e-9': scale 1e-09 leaves"),
        ("kvsim.analysis.claims_pd", ["a", "b"], "unrecognized arguments: b"),
        ("kvsim.analysis.validate", ["--bogus"], "unrecognized arguments: --bogus"),
        ("kvsim.lab.screenshots", ["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_the_python_dash_m_commands_refuse_in_one_line(module, argv, said):
    """`python -m` entry points the README names answer a bad argument as the kvsim commands do: one line,
    exit status 2 (they printed argparse's usage too; `kvsim.analysis.claims abc` a ValueError traceback)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"python -m {module}: error: ")
    assert said in lines[0]


def test_the_config_line_shows_a_block_size_other_than_vllms_16(capsys):
    """An unset block size resolves (16, or an MLA backend's): the line shows it only where it is not vLLM's
    16 (every line printed `block_size=16` once the knob was derived)."""
    for argv, shown in (
        (["--model", "llama-3-8b", "--gpu", "h100-80gb"], None),
        (
            ["--model", "deepseek-v3", "--gpu", "b200", "-tp", "8", "--max-model-len", "32768"],
            "block_size=32,",
        ),
        (["--model", "llama-3-8b", "--gpu", "h100-80gb", "--block-size", "32"], "block_size=32,"),
    ):
        assert main(["run", *argv, "--requests", "5"]) == 0
        (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("config: ")]
        assert (shown in line) if shown else ("block_size" not in line), line


def test_plan_reads_pool_null_block_in_every_memory_search(capsys):
    """A search of the pool's memory runs probes that set that knob, and --pool-null-block counts every
    probe's blocks: a kv_cache_bytes search's cut from memory, a num_blocks search's given (vLLM v0's
    count: N usable, kvsim's null block beside; it was refused there as doing nothing)."""
    slo = ["--slo", "ttft_p99:2s", "--requests", "60", "--max-probes", "2", "--workers", "1"]
    assert main(["plan", "--preset", "vllm-v0", "--num-gpu-blocks-override", "500", *slo]) == 0
    capsys.readouterr()
    model = ["plan", "--model", "llama-3-8b", *slo, "--json"]
    for rule, pool in (("within", "pool: 2,048 blocks"), ("extra", "pool: 2,049 blocks")):
        argv = [
            *model,
            "--pool-null-block",
            rule,
            "--num-gpu-blocks-override",
            "2048",
            "--smallest",
            "num_blocks",
        ]
        assert main(argv) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["pool"].startswith(pool), rule
        # (the search starts at the num_blocks given: vLLM's 2,048 under either rule; a --kv-cache-memory-bytes
        # to start from is refused beside a num_blocks search, which drops it)
        assert data["probes"][0]["num_blocks"] == 2048, rule
    assert (
        main(
            [
                *model,
                "--pool-null-block",
                "extra",
                "--kv-cache-memory-bytes",
                "6GiB",
                "--smallest",
                "kv_cache_bytes",
            ]
        )
        == 0
    )


def test_sweep_refuses_a_swap_space_and_a_models_knob_no_point_reads(capsys):
    """kvsim sweep took `--base cpu_blocks=40` under recompute and `--base tensor_parallel_size=2` with no
    model silently (kvsim run and plan refuse both); now by the same rule, over its points: a grid of
    preemption modes with one that swaps reads the swap space, a grid of models reads -tp."""
    small = ["--requests", "5", "--no-progress"]
    for base, said in (
        (["--base", "cpu_blocks=40"], "argument --base cpu_blocks: a CPU pool of 40 blocks would do nothing"),
        (["--base", "tensor_parallel_size=2"], "argument --base tensor_parallel_size: a model's knob"),
    ):
        assert main(["sweep", "--base", "num_blocks=300", *base, "--grid", "block_size=16,32", *small]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"kvsim sweep: error: {said}"), err
    grid = ["--grid", "preemption=recompute,swap"]
    assert main(["sweep", "--base", "num_blocks=300", "--base", "cpu_blocks=40", *grid, *small]) == 0
    grid = ["--grid", "model=llama-3-8b"]
    assert main(["sweep", "--base", "num_blocks=300", "--base", "tensor_parallel_size=2", *grid, *small]) == 0


def test_a_block_size_no_gpu_backend_takes_is_noted_with_a_model_on_a_gpu(capsys):
    """vLLM 0.33.0 takes any positive --block-size in its config (`CacheConfig.block_size`, `gt=0`) but starts
    no GPU attention backend for one that is not a multiple of 16 (`get_supported_kernel_block_sizes`); kvsim
    runs it (the paper's block-size study, the tests' small blocks) and says so in one note, only where a
    model runs on a GPU and the size was given."""
    from kvsim.cli import main

    said = "vLLM 0.33.0 starts no attention backend on a GPU for it (each takes multiples of 16 only"
    for size, noted in (("7", True), ("8", True), ("32", False)):
        args = ["run", "--model", "llama-3.1-8b", "--gpu", "h200", "--block-size", size, "--requests", "2"]
        assert main(args) == 0
        out = capsys.readouterr().out
        assert (f"note: block size {size}: {said}" in out) is noted, size
    assert (
        main(
            ["run", "--model", "llama-3.1-8b", "--num-blocks", "500", "--block-size", "7", "--requests", "2"]
        )
        == 0
    )
    assert said not in capsys.readouterr().out  # (no GPU: a free simulation)
    assert main(["run", "--num-blocks", "500", "--block-size", "7", "--requests", "2"]) == 0
    assert said not in capsys.readouterr().out
    # The prefill replicas' own size (--prefill-config) is told too, as theirs (it was not told at all).
    fleet = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--replicas", "1", "--prefill-replicas", "1",
             "--requests", "2"]  # fmt: skip
    for size, noted in (("8", True), ("32", False)):
        assert main([*fleet, "--prefill-config", f"block_size={size}"]) == 0
        out = capsys.readouterr().out
        assert (f"note: prefill replicas' block size {size}: {said}" in out) is noted, size
        assert f"note: block size {size}:" not in out  # (the decode replicas keep 16)
    # An MLA model: none (vLLM's Triton MLA backend takes any size, the base class's MultipleOf(1)).
    for size in ("8", "256"):
        assert main(["run", "--model", "deepseek-v3", "--gpu", "h200", "-tp", "8", "--block-size", size,
                     "--requests", "2"]) == 0  # fmt: skip
        assert "starts no attention backend" not in capsys.readouterr().out
    # A size a state layer raises to a multiple of 16 (qwen3-next: 8 -> 320) is served: no backend note,
    # the raise's note; and a prefill pool that inherits the decode replicas' size is not told again.
    assert main(["run", "--model", "qwen3-next-80b-a3b", "--gpu", "h100-80gb", "-tp", "4", "--block-size", "8",
                 "--requests", "2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "note: block size 8 raised to 320 tokens" in out
    assert "starts no attention backend" not in out
    assert main([*fleet, "--block-size", "8", "--prefill-config", "max_num_seqs=4"]) == 0
    out = capsys.readouterr().out
    assert f"note: block size 8: {said}" in out
    assert "prefill replicas' block size" not in out
