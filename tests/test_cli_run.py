"""`kvsim run` through the real entry point (issue 13 parts 1-3, issue 12 part 4): one set of defaults,
the pool line, vLLM's flags and units, one-line errors with exit status 2, workloads from files, and notes
(the report's metrics: tests/test_cli_run_report.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import kvsim
from kvsim.cli import main
from tests.cli_run_common import SMALL, _error, _json


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
    # 12 GiB in blocks of 64 (vLLM 0.34.0's default) of 800 KiB a token: 12 × 2^30 // (64 × 819,200) = 245
    assert _json(capsys, [*base, "--kv-cache-memory-bytes", "12GiB"])["config"]["num_blocks"] == 245
    assert _json(capsys, [*base, "--num-gpu-blocks-override", "300"])["config"]["num_blocks"] == 300


def test_every_run_prints_the_pool_line(capsys):
    assert main(["run", "--requests", "20", "--model", "opt-13b", "--kv-cache-memory-bytes", "12GiB"]) == 0
    out = capsys.readouterr().out
    # (245 blocks of 64 = 15,680 tokens: 12 × 2^30 // (64 × 819,200 B))
    assert "pool: 245 blocks × 64 tokens = 15,680 tokens = 12.0 GiB (kv_cache_bytes 12.0 GiB" in out


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
    assert data["config"]["cpu_blocks"] == 4 * 2**30 // (64 * 819_200)  # (blocks of 64, the default: 81)
    assert data["config"]["swap_space_bytes"] == "4 GiB"


# (Llama-3-8B's 128 KiB a token in blocks of 64, the default: 8 MiB a block, 128 of them a GiB)
@pytest.mark.parametrize(("text", "blocks"), [("4", 512), ("1.5", 192), ("1e1", 1280), ("0.5GiB", 64)])
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
    argv = ["run", "--requests", "60", "--time-model", "ticks", "--block-size", "16", "--workload"]
    argv += ["synthetic:lengths=fixed,prompt_len=6000,output_len=200,arrival_rate=20"]
    small = _json(capsys, [*argv, "--num-gpu-blocks-override", "600"])
    s = small["summary"]
    assert (s["preemptions"], s["rejected"], s["peak_batch"]) == (0, 0, 1)
    assert 0.5 < s["peak_allocated_fraction"] < 0.9
    assert not any(n.startswith("not memory-bound") for n in small["notes"]), small["notes"]
    large = _json(capsys, [*argv, "--num-gpu-blocks-override", "1200"])
    assert large["summary"]["peak_batch"] > 1
    assert large["summary"]["queueing_s_p99"] < 0.5 * s["queueing_s_p99"]


def test_a_hybrid_pool_is_judged_by_every_groups_blocks(capsys):
    """A hybrid pool's admissions are bounded by every KV-cache group's blocks (gpt-oss-20b: full attention
    and a 128-token window, 375 blocks each for a 6,000-token prompt, the window's cap above that): on 1,100
    blocks one request runs (750 of them) and the next waits for blocks, the pool peaking at ~68 % with
    nothing preempted: no "not memory-bound" note. The hybrid pools once got the note never (Qwen3-Next at
    0.8 % of its pool); on 6,000 blocks the same load is calm and says so."""
    argv = [
        "run",
        "--model",
        "gpt-oss-20b",
        "--gpu",
        "h100-80gb",
        "--requests",
        "60",
        "--time-model",
        "ticks",
        "--block-size",
        "16",
    ]
    argv += ["--workload", "synthetic:lengths=fixed,prompt_len=6000,output_len=200,arrival_rate=1"]
    small = _json(capsys, [*argv, "--num-gpu-blocks-override", "1100"])
    s = small["summary"]
    assert (s["preemptions"], s["rejected"], s["peak_batch"]) == (0, 0, 1)
    assert 0.6 < s["peak_allocated_fraction"] < 0.9  # (750 of 1,100: the first request's two groups)
    assert not any(n.startswith("not memory-bound") for n in small["notes"]), small["notes"]
    large = _json(capsys, [*argv, "--num-gpu-blocks-override", "6000"])
    assert large["summary"]["peak_allocated_fraction"] < 0.5
    assert any(n.startswith("not memory-bound") for n in large["notes"]), large["notes"]


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
