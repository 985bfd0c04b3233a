"""The `kvsim` command line (kvsim.cli) and `python -m bench.sweep`: one run (table and --json), a sweep,
--help that names every flag, and errors as exit code 2."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from kvsim.analysis.sweep import CONFIG_FIELDS
from kvsim.cli import bench_main, build_parser, main

RUN = ["run", "--requests", "80", "--num-blocks", "150", "--time-model", "ticks", "--block-size", "32"]


def test_run_prints_a_summary_table(capsys):
    assert main(RUN) == 0
    out = capsys.readouterr().out
    assert "KV utilization" in out
    assert "request throughput" in out
    assert "block_size=32" in out
    assert "pool: 150 blocks × 32 tokens = 4,800 tokens" in out


def test_run_json_is_machine_readable(capsys):
    assert main([*RUN, "--json", "--policy", "orca-oracle"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["policy"] == "orca-oracle"
    assert data["pool"].startswith("pool: 150 blocks")
    assert data["config"]["num_blocks"] == 150
    assert data["summary"]["completed"] + data["summary"]["rejected"] == 80


def test_run_from_toml(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text('workload = "alpaca"\nrequests = 40\n[config]\nnum_blocks = 90\ntime_model = "ticks"\n')
    assert main(["run", "--toml", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["num_requests"] == 40


@pytest.mark.parametrize("command", ["run", "plan", "sweep", "claims"])
def test_help_explains_every_flag(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    if command in ("run", "plan"):  # plan takes run's workload and configuration flags
        for name in CONFIG_FIELDS:
            assert f"--{name.replace('_', '-')}" in text
        assert "(default: None)" not in text
        assert " V " not in text
        assert "--workload NAME[:K=V,...]|PATH" in text  # a trace file of one's own
    if command == "sweep":  # a sweep's workloads are named (a trace file is kvsim run's)
        assert "--workload NAME[:K=V,...]" in text
        assert "|PATH" not in text
        for flag in (
            "--grid",
            "--workload",
            "--seeds",
            "--executor",
            "--scheduler",
            "--workers",
            "--output",
            "--goodput",
        ):
            assert flag in text


def test_bench_sweep_runs_a_grid(tmp_path, capsys):
    out = tmp_path / "g.parquet"
    args = ["--grid", "block_size=16,32", "--base", "num_blocks=150", "--base", "time_model=ticks"]
    args += ["--requests", "60", "--seeds", "2", "--output", str(out), "--no-progress"]
    assert bench_main(args) == 0
    assert "4 runs now" in capsys.readouterr().out
    assert pl.read_parquet(out).height == 4
    assert bench_main(args) == 0
    assert "0 runs now, 4 already" in capsys.readouterr().out


def test_errors_exit_2(capsys):
    assert bench_main(["--grid", "blok_size=8"]) == 2
    assert "did you mean block_size" in capsys.readouterr().err
    assert main(["run", "--policy", "paged"]) == 2


def test_claims_table_prints_every_claim_with_its_verdict(tmp_path):
    from kvsim.analysis.claims import CONFIRMED, Claim, ClaimsReport

    report = ClaimsReport(
        [
            Claim("A-1", "a claim", "src", "1.0", "1.01", "5 %", CONFIRMED, "cmd"),
            Claim("B-2", "another", "src", "2.0", "x" * 200, "5 %", "DIFFERS", "cmd"),
        ],
        tmp_path / "claims.md",
        0.0,
        [],
    )
    lines = report.table(width=40).splitlines()
    assert lines[0].split() == ["id", "source", "ours", "verdict"]
    assert [line.split()[0] for line in lines[2:]] == ["A-1", "B-2"]
    assert lines[3].endswith("DIFFERS")
    assert "…" in lines[3]  # long values are cut to the width


def _one_error(capsys, argv):
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "error" in line]
    assert len(err) == 1, err
    return err[0]


def test_sweep_output_is_checked_before_any_point_runs(tmp_path, capsys):
    """Issue 12 part 4: --output under a regular file, at a folder, at a file that is not parquet, or
    where nothing can be written fails at once, one line naming the flag, and nothing runs."""
    regular = tmp_path / "regular"
    regular.write_text("x")
    text = tmp_path / "notes.txt"
    text.write_text("not parquet")
    base = ["sweep", "--base", "num_blocks=150", "--requests", "10", "--no-progress", "--output"]
    for out, why in (
        (regular / "x.parquet", "is a file, not a folder"),
        (tmp_path, "is a folder"),
        (text, "is not a parquet file"),
        ("/proc/x.parquet", "cannot write in /proc"),
    ):
        line = _one_error(capsys, [*base, str(out)])
        assert line.startswith("kvsim sweep: error: argument --output:"), line
        assert why in line, line
    assert text.read_text() == "not parquet"
    fresh = tmp_path / "new" / "dir" / "x.parquet"
    assert main([*base, str(fresh)]) == 0
    assert pl.read_parquet(fresh).height == 1


@pytest.mark.parametrize("scale", ["nan", "inf", "0", "-1", "abc"])
def test_claims_scale_must_be_a_positive_number(capsys, tmp_path, scale):
    line = _one_error(capsys, ["claims", "--scale", scale, "--no-plots", "--results", str(tmp_path)])
    assert line.startswith("kvsim claims: error: argument --scale:"), line
    assert not (tmp_path / "claims.md").exists()


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_claims_workers_must_be_at_least_one(capsys, tmp_path, workers):
    """`--workers -1` reached ThreadPoolExecutor and ended in its traceback; 0 silently meant the CPU count."""
    line = _one_error(capsys, ["claims", "--workers", workers, "--no-plots", "--results", str(tmp_path)])
    assert line == f"kvsim claims: error: argument --workers: {workers} must be at least 1", line
    assert not (tmp_path / "claims.md").exists()


@pytest.mark.parametrize("flag", ["--workers", "--seeds"])
def test_sweep_counts_name_their_flag(capsys, tmp_path, flag):
    argv = ["sweep", "--base", "num_blocks=100", "--output", str(tmp_path / "s.parquet"), flag, "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"kvsim sweep: error: argument {flag}: 0 must be at least 1"], err
    assert not (tmp_path / "s.parquet").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--num-blocks", "100", "--backend", "cuda"],
        ["run", "--num-blocks", "100", "--trace-time-unit", "h"],
        ["run", "--num-blocks", "100", "--block-size"],
        ["sweep", "--executor", "gpu"],
        ["plan", "--num-blocks", "100", "--smallest", "cpu_blocks"],
        ["lab", "--port", "http"],
        ["lab", "--host", ""],  # (it listened on every interface and printed http://:PORT/)
        ["lab", "--host", "  "],
        ["validate-gpu", "--layers", "two"],
    ],
)
def test_argparse_value_errors_are_one_line_too(capsys, argv):
    """argparse's own complaints about a flag's value (an invalid choice, `invalid int value`, a missing
    value) are one line naming the flag, like kvsim's checks, not the command's whole usage."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"kvsim {argv[0]}: error: argument "), err


def test_an_unknown_subcommand_is_one_line_naming_the_known_ones(capsys):
    assert main(["rnu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "invalid choice: 'rnu'" in err[0], err
    assert "'run'" in err[0], err


def test_sweep_base_typo_suggests_the_field(capsys):
    line = _one_error(capsys, ["sweep", "--base", "blok_size=16"])
    assert (
        line
        == "kvsim sweep: error: argument --base: 'blok_size' is not a SimConfig field (did you mean block_size, default_block_size?)"
    )
    line = _one_error(capsys, ["sweep", "--base", "block_size"])
    assert line.startswith("kvsim sweep: error: argument --base: 'block_size' is not NAME=VALUE"), line


def test_run_file_typo_suggests_the_field(capsys, tmp_path):
    f = tmp_path / "run.toml"
    f.write_text("[config]\nnum_blocks = 300\nblok_size = 32\n")
    line = _one_error(capsys, ["run", "--toml", str(f)])
    assert line.endswith(
        "unknown SimConfig field 'blok_size' (did you mean block_size, default_block_size?)"
    ), line


def test_a_sweep_without_a_pool_says_how_to_give_one(capsys, tmp_path):
    line = _one_error(capsys, ["sweep", "--output", str(tmp_path / "s.parquet"), "--grid", "block_size=8,16"])
    assert line.startswith("kvsim sweep: error: no pool to simulate: give --base model=NAME"), line
    assert (
        main(
            [
                "sweep",
                "--output",
                str(tmp_path / "s.parquet"),
                "--requests",
                "5",
                "--grid",
                "num_blocks=100,200",
            ]
        )
        == 0
    )


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["run", "--model", "opt-13b"], "--model opt-13b without --gpu has no memory to size one from"),
        (["run", "--gpu", "a100-40gb"], "--gpu a100-40gb without --model: a pool's blocks are sized from"),
        (["run", "--kv-cache-memory-bytes", "12GiB"], "--kv-cache-memory-bytes 12GiB without --model: "),
        (
            ["run", "--gpu-memory", "48GiB", "--gpu-bandwidth", "864GB/s", "--gpu-tflops", "362"],
            "a GPU of --gpu-* flags without --model: ",
        ),
        (
            ["plan", "--model", "opt-13b", "--slo", "ttft_p99:2s"],
            "--model opt-13b without --gpu has no memory",
        ),
        (["plan", "--gpu", "a100-40gb", "--slo", "ttft_p99:2s"], "--gpu a100-40gb without --model: "),
        (
            ["sweep", "--base", "model=opt-13b", "--grid", "block_size=16,32"],
            "--base model=opt-13b without a gpu has no memory to size one from",
        ),
        (["sweep", "--grid", "model=opt-13b,llama-3-8b"], "--grid model without a gpu has no memory"),
        (
            ["sweep", "--base", "gpu=a100-40gb", "--grid", "block_size=16,32"],
            "--base gpu=a100-40gb without a model: a pool's blocks are sized from",
        ),
        (
            ["sweep", "--grid", "gpu=a100-40gb,h100-80gb", "--base", "kv_cache_bytes=12GiB"],
            "--grid gpu and --base kv_cache_bytes=12GiB without a model: ",
        ),
    ],
)
def test_a_model_without_memory_or_memory_without_a_model_is_refused_first_naming_what_is_missing(
    capsys, tmp_path, argv, said
):
    """One line, exit 2, naming what was given and what it lacks, before anything else is refused: beside
    a 100,000-request trace (read after the config), or a sweep's --output in a folder that does not exist
    (checked after it). A sweep's model without a GPU failed every point as an "invalid grid combination"
    (`num_blocks None`, the flags unnamed); a GPU without a model said only what to give."""
    extra = {"run": ["--workload", "mooncake-conversation", "--requests", "100000"],
             "plan": ["--workload", "mooncake-conversation", "--requests", "100000"],
             "sweep": ["--output", str(tmp_path / "missing" / "s.parquet")]}[argv[0]]  # fmt: skip
    line = _one_error(capsys, [*argv, *extra])
    assert line.startswith(f"kvsim {argv[0]}: error: no pool to simulate: {said}"), line
    assert not (tmp_path / "missing").exists()
    # With a pool the GPU without a model runs (steps in ticks), as before.
    if argv[:2] == ["run", "--gpu"]:
        assert main([*argv, "--num-gpu-blocks-override", "100", "--requests", "5"]) == 0


def test_a_grid_with_an_invalid_combination_says_so_in_one_line_or_skips_it(capsys, tmp_path):
    """The combinations are listed on one line (they were one a line); `--skip-invalid` runs the rest (it
    failed the same way: the metric columns were read from the whole grid first)."""
    argv = ["sweep", "--requests", "5", "--no-progress", "--base", "num_blocks=64",
            "--grid", "kv_offloading_chunks=0,4", "--grid", "policy=vllm,reserve"]  # fmt: skip
    line = _one_error(capsys, [*argv, "--output", str(tmp_path / "a.parquet")])
    assert "1 invalid grid combination " in line
    assert "{'kv_offloading_chunks': 4, 'policy': 'reserve'}" in line
    assert not (tmp_path / "a.parquet").exists()
    assert main([*argv, "--output", str(tmp_path / "b.parquet"), "--skip-invalid"]) == 0
    rows = pl.read_parquet(tmp_path / "b.parquet")
    assert sorted(zip(rows["kv_offloading_chunks"], rows["policy"], strict=True)) == [
        (0, "reserve"),
        (0, "vllm"),
        (4, "vllm"),
    ]


@pytest.mark.parametrize(
    ("argv", "flag", "field"),
    [
        (["run", "--num-blocks", "100", "--gpu-memory-utilization", "1e400"], "--gpu-memory-utilization", ""),
        (["run", "--num-blocks", "100", "--max-num-seqs=-1e400"], "--max-num-seqs", ""),
        (
            ["run", "--num-blocks", "100", "--workload", "sharegpt:arrival_rate=1e400"],
            "--workload",
            "arrival_rate",
        ),
        (["sweep", "--base", "num_blocks=100", "--grid", "gpu_memory_utilization=0.9,1e400"], "--grid", ""),
        (["sweep", "--base", "num_blocks=100", "--grid", "workload.arrival_rate=1,1e400"], "--grid", ""),
    ],
)
def test_a_number_beyond_a_floats_range_is_named_as_written(capsys, tmp_path, argv, flag, field):
    """`1e400` is read by Python's float as infinity; the error shows the text given, not `inf`, and
    says why it is refused (it said `gpu_memory_utilization inf must be finite`)."""
    if argv[0] == "sweep":
        argv = [*argv, "--output", str(tmp_path / "s.parquet")]
    line = _one_error(capsys, argv)
    assert line.startswith(f"kvsim {argv[0]}: error: "), line
    assert flag in line, line
    assert field in line, line
    assert "1e400' is beyond a float's range" in line, line
    assert " inf " not in line, line
    assert not (tmp_path / "s.parquet").exists()


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("-12GiB", "kv_cache_bytes '-12GiB' must not be negative"),
        ("-12", "kv_cache_bytes '-12' must not be negative"),
        ("-12G", "kv_cache_bytes '-12884901888' must not be negative"),  # (vLLM's 12G, 12 * 2**30)
        ("-1.5e3 MiB", "must not be negative"),
    ],
)
def test_a_negative_size_reaches_the_flags_own_error(capsys, value, said):
    """`--kv-cache-memory-bytes -12GiB` stopped at argparse's "expected one argument" (a dash and a digit
    with a unit read as an unknown flag), where `=-12GiB` gave kvsim's "must not be negative"; `-12G` (vLLM's
    one-letter suffix) said "unknown size unit". Both spellings now give the flag's own error."""
    base = ["run", "--model", "llama-3.1-8b", "--requests", "3", "--kv-cache-memory-bytes"]
    for argv in ([*base, value], [*base[:-1], f"--kv-cache-memory-bytes={value}"]):
        line = _one_error(capsys, argv)
        assert line.startswith("kvsim run: error: argument --kv-cache-memory-bytes: "), line
        assert said in line, line
    # Other flags' negative values with units, and a flag after one, parse as before.
    line = _one_error(capsys, ["run", "--num-blocks", "100", "--pd-link-latency", "-5ms", "--requests", "3"])
    assert line.startswith(
        "kvsim run: error: argument --pd-link-latency: pd_link_latency_s '-5ms' must not be negative"
    )


def test_a_plan_probe_past_the_clock_says_to_search_higher_rates(capsys):
    """`--start-rate 1e-290` ended in the engine input's "row 19: arrival 2.46e+291 s is past the simulated
    clock's range ...: rebase the timestamps to the first request", which no flag of the search changes."""
    argv = ["plan", "--num-gpu-blocks-override", "500", "--requests", "20", "--slo", "ttft_p99:2s"]
    line = _one_error(capsys, [*argv, "--start-rate", "1e-290"])
    assert "rate 1e-290 requests/s puts the last of 20 arrivals at" in line
    assert "search higher rates (--start-rate, --min-rate)" in line
    assert "rebase" not in line
    # --smallest refuses --start-rate and --min-rate: its rate is --rate's
    line = _one_error(capsys, [*argv, "--smallest", "num_blocks", "--rate", "1e-290"])
    assert line.endswith("give a higher --rate"), line


def test_python_dash_m_kvsim_runs_the_cli():
    import os
    import subprocess
    import sys
    from pathlib import Path

    import kvsim

    env = {**os.environ, "PYTHONPATH": str(Path(kvsim.__file__).parents[1])}
    out = subprocess.run(
        [sys.executable, "-m", "kvsim", "--help"], capture_output=True, text=True, env=env, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: kvsim")


@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_run_too_large_for_memory_is_one_line(capsys, command):
    """rev48 #6: `--requests 1000000000000` ended in numpy's 20-line ArrayMemoryError traceback (exit 1);
    it is one line saying how much was asked and what to lower, exit status 2, and nothing is printed."""
    argv = [command, "--num-gpu-blocks-override", "100", "--requests", "1000000000000"]
    if command == "plan":
        argv += ["--slo", "ttft_p99:1s"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert re.fullmatch(
        rf"kvsim {command}: error: out of memory \(unable to allocate [\d.]+ TiB\): this machine cannot hold the "
        r"run as asked; fewer requests \(--requests\) or a shorter trace\n",
        err,
    ), err


def test_a_misspelt_workload_parameter_is_named_as_unknown(capsys):
    """rev48 #7: `sharegpt:arival_rate=1` was refused as "lengths='sharegpt-paper' takes no length_params
    (the preset sets its lengths)", blaming the preset for a typo; now it is an unknown parameter with the
    keys it may have meant, and a real length parameter on a preset keeps the preset's refusal."""
    argv = ["run", "--num-gpu-blocks-override", "100", "--requests", "5", "--workload"]
    assert main([*argv, "sharegpt:arival_rate=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown parameter 'arival_rate' (did you mean 'arrival_rate'" in err
    assert "length_params" not in err
    assert main([*argv, "sharegpt:prompt_len=5"]) == 2
    assert "lengths='sharegpt-paper' takes no length_params" in capsys.readouterr().err
    assert main(["sweep", "--grid", "workload.arival_rate=1,2", "--workload", "sharegpt", "--base",
                 "num_blocks=100", "--requests", "5"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "unknown parameter 'arival_rate'" in err
    assert main([*argv, "synthetic:lengths=fixed,prompt_len=10,output_len=5"]) == 0
