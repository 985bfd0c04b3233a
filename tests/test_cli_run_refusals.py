"""`kvsim run`'s input validation and refusals (split from tests/test_cli_run.py): files of no requests, absurd
arrivals, unreadable calibrations, run-file strings; a knob or flag a run does not read refused by name, not
ignored (plan's and sweep's: tests/test_cli_plan_refusals.py); what the config line and notes say of the pool."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings

import polars as pl
import pytest

import kvsim
from kvsim.cli import main
from tests.cli_run_common import LLAMA_ON_H100, SMALL, _error, _json


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
    --gdn-prefill-backend triton the blocks are 544 tokens and no note. (The blocks aligned from vLLM
    0.33.0's default block of 16; from 0.34.0's 64: tests/test_block_default.py.)"""
    base = ["run", "--requests", "5", "--model", "qwen3-next-80b-a3b", "--workload", "sharegpt"]
    base += ["--default-block-size", "16"]
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
        (["--no-kv-offloading-prompt-only"], "--no-kv-offloading-prompt-only: a CPU tier's knob"),
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
        ["--preset", "vllm-0.34"],  # (the defaults' grid and ShardQ, not given, are not refused)
        ["--preset", "vllm-0.33"],  # (its cudagraph_capture_grid and sparse_mla_shard_q are the preset's)
    ):
        assert main(["run", "--num-gpu-blocks-override", "500", "--requests", "10", *argv]) == 0, argv
    capsys.readouterr()


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
        # vLLM 0.34.0's CUDA-graph sizes and ShardQ, where they are not read.
        (
            ["--sparse-mla-shard-q"],
            "--sparse-mla-shard-q: the flag does nothing here: vLLM 0.34.0 keeps ShardQ's buffers only for "
            "DeepSeek-V3.2 and GLM-5",
        ),
        (
            ["--cudagraph-capture-grid", "split", "--enforce-eager"],
            "--cudagraph-capture-grid: 'split' does nothing here: it picks the CUDA graphs kvsim's estimate "
            "counts, and --enforce-eager captures no graphs",
        ),
        (
            ["--no-sparse-mla-shard-q"],
            "--no-sparse-mla-shard-q: the flag does nothing here: vLLM 0.34.0 keeps ShardQ's buffers only for",
        ),
        (
            ["--cudagraph-capture-grid", "shared", "--enforce-eager"],
            "--cudagraph-capture-grid: 'shared' does nothing here: it picks the CUDA graphs kvsim's estimate "
            "counts, and --enforce-eager captures no graphs",
        ),
        (
            ["--cudagraph-capture-grid", "shared", "--num-gpu-blocks-override", "2000"],
            "--cudagraph-capture-grid: 'shared' does nothing here: it picks the CUDA graphs kvsim's estimate "
            "counts, and --num-gpu-blocks-override gives the pool",
        ),
        (
            ["--cudagraph-capture-grid", "split", "--cudagraph-memory-bytes", "1GiB"],
            "--cudagraph-capture-grid: 'split' does nothing here: it picks the CUDA graphs kvsim's estimate "
            "counts, and --cudagraph-memory-bytes gives the graphs' memory",
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
    # (profiled both: unset, a v0 pool's sizing settles to the profiled rule, the only one it applies to)
    base = ["run", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--requests", "3", "--json"]
    base += ["--kv-cache-sizing", "profiled"]
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
    gdn += ["--default-block-size", "16"]  # (the block aligned from 0.33.0's 16)
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
    assert sizing["token_slots"] == sizing["num_blocks"] * 576
    # (a hybrid pool's blocks serve several groups: its `tokens` is vLLM's "GPU KV cache size", not the slots)
    assert sizing["tokens"] == sizing["startup"]["gpu_kv_cache_tokens"] != sizing["token_slots"]
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


def test_the_config_line_shows_a_block_size_other_than_vllms_default(capsys):
    """An unset block size resolves (vLLM 0.34.0's 64, or an MLA backend's): the line shows it only where it
    is not the default block (every line printed `block_size=16` once the knob was derived). DeepSeek-V3 on
    a B200 under 0.33.0's 16: FlashInfer MLA's 32 (its 32 or 64 offered 16); the unset sizing knobs are not
    listed either."""
    for argv, shown in (
        (["--model", "llama-3-8b", "--gpu", "h100-80gb"], None),
        (
            [
                "--model",
                "deepseek-v3",
                "--gpu",
                "b200",
                "-tp",
                "8",
                "--max-model-len",
                "32768",
                "--default-block-size",
                "16",
            ],
            "block_size=32,",
        ),
        (["--model", "llama-3-8b", "--gpu", "h100-80gb", "--block-size", "32"], "block_size=32,"),
    ):
        assert main(["run", *argv, "--requests", "5"]) == 0
        (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("config: ")]
        assert (shown in line) if shown else ("block_size" not in line), line
        assert "gpu_memory_utilization" not in line, line
        assert "kv_cache_sizing" not in line, line


def test_a_block_size_no_gpu_backend_takes_is_refused_with_a_model_on_a_gpu(capsys, tmp_path):
    """vLLM 0.33.0 and 0.34.0 take any positive --block-size in their config (`CacheConfig.block_size`, `gt=0`)
    but start no attention backend on CUDA or ROCm for one that is not a multiple of 16 (`supports_block_size`,
    "No valid attention backend found"): with a model on a GPU kvsim refuses it by name; without a GPU it runs
    (the paper's block-size study, the tests' small blocks); an older preset's gets a note."""
    said = "vLLM 0.33.0 and 0.34.0 start no attention backend on a GPU for it (every backend on CUDA's and ROCm's"
    for gpu in ("h100-80gb", "h200", "mi300x"):
        for size in ("7", "8", "24"):
            args = ["run", "--model", "llama-3.1-8b", "--gpu", gpu, "--block-size", size, "--requests", "2"]
            err = _error(capsys, args)
            assert err.startswith(f"kvsim run: error: argument --block-size: block size {size}: {said}"), err
            assert "give a multiple of 16" in err
            # (FlashInfer takes any multiple of its kernel blocks, 48 with nvfp4 too: not only 16, 32 or 64)
            assert "FlashInfer multiples of 16, 32 or 64 kernel blocks" in err
            assert _error(capsys, [*args, "--preset", "vllm-0.33"]) == err
    for size in ("16", "32", "48"):
        assert (
            main(["run", "--model", "llama-3.1-8b", "--gpu", "h200", "--block-size", size, "--requests", "2"])
            == 0
        )
        assert "start no attention backend" not in capsys.readouterr().out
    # kvsim plan refuses it as kvsim run does.
    plan = ["plan", "--slo", "ttft_p99:2s", "--max-probes", "2", "--workers", "1", "--requests", "5"]
    err = _error(capsys, [*plan, "--model", "llama-3.1-8b", "--gpu", "h200", "--block-size", "8"])
    assert err.startswith(f"kvsim plan: error: argument --block-size: block size 8: {said}"), err
    # The run file's field is named as such.
    run_file = tmp_path / "run.toml"
    run_file.write_text('[config]\nmodel = "llama-3.1-8b"\ngpu = "h200"\nblock_size = 8\n')
    err = _error(capsys, ["run", "--toml", str(run_file), "--requests", "2"])
    assert f"[config] block_size: block size 8: {said}" in err, err
    # No GPU: a free simulation.
    assert (
        main(
            ["run", "--model", "llama-3.1-8b", "--num-blocks", "500", "--block-size", "7", "--requests", "2"]
        )
        == 0
    )
    assert "start no attention backend" not in capsys.readouterr().out
    assert main(["run", "--num-blocks", "500", "--block-size", "7", "--requests", "2"]) == 0
    assert "start no attention backend" not in capsys.readouterr().out
    # An older preset (vLLM 0.22.1 and before, whose backends kvsim has not read): a note, and the run.
    args = ["run", "--model", "llama-3.1-8b", "--gpu", "h200", "--block-size", "8", "--requests", "2"]
    assert main([*args, "--preset", "vllm-v1"]) == 0
    out = capsys.readouterr().out
    assert f"note: block size 8: {said}" in out
    assert "kvsim has not read the backends' sizes of --preset vllm-v1 and runs it as asked" in out
    # The prefill replicas' own size (--prefill-config) is refused as theirs.
    fleet = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--replicas", "1", "--prefill-replicas", "1",
             "--requests", "2"]  # fmt: skip
    err = _error(capsys, [*fleet, "--prefill-config", "block_size=8"])
    assert err.startswith(f"kvsim run: error: argument --prefill-config: block_size: block size 8: {said}"), (
        err
    )
    assert main([*fleet, "--prefill-config", "block_size=32"]) == 0
    capsys.readouterr()
    assert _error(capsys, [*fleet, "--block-size", "8", "--prefill-config", "max_num_seqs=4"]).startswith(
        f"kvsim run: error: argument --block-size: block size 8: {said}"
    )
    # An MLA model: served (vLLM's Triton MLA backend takes any size, the base class's MultipleOf(1)).
    for size in ("8", "256"):
        assert main(["run", "--model", "deepseek-v3", "--gpu", "h200", "-tp", "8", "--block-size", size,
                     "--requests", "2"]) == 0  # fmt: skip
        assert "start no attention backend" not in capsys.readouterr().out
    # A size a state layer raises to a multiple of 16 (qwen3-next: 8 -> 320) is served: the raise's note only.
    assert main(["run", "--model", "qwen3-next-80b-a3b", "--gpu", "h100-80gb", "-tp", "4", "--block-size", "8",
                 "--requests", "2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "note: block size 8 raised to 320 tokens" in out
    assert "start no attention backend" not in out


def test_the_0_34_sizing_knobs_run_where_they_are_read(capsys):
    """--cudagraph-capture-grid on a pool sized from a GPU and --sparse-mla-shard-q on DeepSeek-V3.2 at tp 8 on
    a B200 (ShardQ on its FlashAttention 4 sparse backend) change the pool, so they run."""
    assert main([*LLAMA_ON_H100, "--cudagraph-capture-grid", "split"]) == 0
    argv = ["run", "--model", "deepseek-v3.2", "--gpu", "b200", "-tp", "8", "--requests", "3"]
    assert main([*argv, "--sparse-mla-shard-q"]) == 0
    capsys.readouterr()
