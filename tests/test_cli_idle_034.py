"""vLLM 0.34.0's two sizing knobs, `--cudagraph-capture-grid` and `--sparse-mla-shard-q`, in `kvsim run`,
`kvsim plan` and `kvsim sweep` (`kvsim.cli.refusals.idle_knobs`): refused by the name given where no point
reads them (the flag as typed, `--no-sparse-mla-shard-q` too, or the run file; a sweep's `--base` field), and
not refused where the user did not give them (the defaults' values, or a preset's, are not the user's)."""

from __future__ import annotations

import polars as pl
import pytest

from kvsim.cli import main
from tests.cli_run_common import PLAN, SWEEP

LLAMA = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb"]
SWEEP_LLAMA = ["--base", "model=llama-3.1-8b", "--base", "gpu=h100-80gb", "--base", "enforce_eager=true"]
NO_GRAPHS = "does nothing here: it picks the CUDA graphs kvsim's estimate counts, and "
NO_SHARDQ = "does nothing here: vLLM 0.34.0 keeps ShardQ's buffers only for DeepSeek-V3.2 and GLM-5"


@pytest.mark.parametrize(
    ("flags", "field", "flag_said", "field_said"),
    [
        (
            ["--cudagraph-capture-grid", "split", "--enforce-eager"],
            "cudagraph_capture_grid=split",
            f"--cudagraph-capture-grid: 'split' {NO_GRAPHS}--enforce-eager captures no graphs",
            f"cudagraph_capture_grid: 'split' {NO_GRAPHS}enforce_eager captures no graphs",
        ),
        (
            ["--cudagraph-capture-grid", "shared", "--enforce-eager"],
            "cudagraph_capture_grid=shared",
            f"--cudagraph-capture-grid: 'shared' {NO_GRAPHS}--enforce-eager captures no graphs",
            f"cudagraph_capture_grid: 'shared' {NO_GRAPHS}enforce_eager captures no graphs",
        ),
        (
            ["--sparse-mla-shard-q"],
            "sparse_mla_shard_q=true",
            f"--sparse-mla-shard-q: the flag {NO_SHARDQ}",
            f"sparse_mla_shard_q: true {NO_SHARDQ}",
        ),
        (
            ["--no-sparse-mla-shard-q"],
            "sparse_mla_shard_q=false",
            f"--no-sparse-mla-shard-q: the flag {NO_SHARDQ}",
            f"sparse_mla_shard_q: false {NO_SHARDQ}",
        ),
    ],
)
def test_plan_and_sweep_refuse_them_by_name_where_no_point_reads_them(
    capsys, tmp_path, flags, field, flag_said, field_said
):
    """Llama 3.1 8B on an H100: eager (no CUDA graphs to estimate) and no sparse MLA (no ShardQ buffers)."""
    assert main([*PLAN, *LLAMA, *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"kvsim plan: error: argument {flag_said}"), err
    assert err.rstrip().endswith("drop the flag"), err
    out = tmp_path / "s.parquet"
    argv = [*SWEEP, *SWEEP_LLAMA, "--base", field, "--grid", "max_num_seqs=8,16", "--output", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"kvsim sweep: error: argument --base {field_said}"), err
    assert err.rstrip().endswith("drop it"), err
    assert not out.exists()  # (refused before any point ran)


def test_plan_and_sweep_take_them_when_not_given_or_where_a_point_reads_them(capsys, tmp_path):
    """The same eager Llama with neither knob given runs (the defaults' "split" and ShardQ on, and the
    `vllm-0.33` preset's "shared" and ShardQ off, are not the user's); a sweep whose grid runs a point with
    CUDA graphs reads a base grid, so it runs too."""
    for preset in ([], ["--preset", "vllm-0.34"], ["--preset", "vllm-0.33"]):
        assert main([*PLAN, *LLAMA, "--enforce-eager", *preset]) == 0, preset
    capsys.readouterr()
    out = tmp_path / "plain.parquet"
    assert main([*SWEEP, *SWEEP_LLAMA, "--grid", "max_num_seqs=8,16", "--output", str(out)]) == 0
    assert pl.read_parquet(out).height == 2
    out = tmp_path / "graphs.parquet"
    base = [
        "--base",
        "model=llama-3.1-8b",
        "--base",
        "gpu=h100-80gb",
        "--base",
        "cudagraph_capture_grid=shared",
    ]
    assert main([*SWEEP, *base, "--grid", "enforce_eager=true,false", "--output", str(out)]) == 0
    assert pl.read_parquet(out).height == 2
    capsys.readouterr()


def test_kvsim_run_names_an_idle_knob_where_the_user_gave_it(capsys, tmp_path):
    """`kvsim run` names the knob as `kvsim plan` does (`kvsim.cli.refusals.given_where`): by the flag typed,
    or by the run file that set it (it named the positive flag, which the user typed in neither case)."""
    run = ["run", *LLAMA, "--requests", "3"]
    assert main([*run, "--no-sparse-mla-shard-q"]) == 2
    assert capsys.readouterr().err.startswith(
        f"kvsim run: error: argument --no-sparse-mla-shard-q: the flag {NO_SHARDQ}"
    )
    path = tmp_path / "r.toml"
    path.write_text("[config]\nsparse_mla_shard_q = false\n")
    assert main([*run, "--toml", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"kvsim run: error: run file {path}: [config] sparse_mla_shard_q: "), err
    # (reread52 item 8: a run file's knob is a field, not a flag)
    assert f"sparse_mla_shard_q: the field {NO_SHARDQ}" in err, err
    assert err.rstrip().endswith("; drop it"), err
    assert "flag" not in err, err
    # So is an idle knob of `kvsim plan`'s run file, while the flag it names to give stays a flag.
    plan = ["plan", *LLAMA, "--requests", "3", "--slo", "ttft_p99:1s", "--toml", str(path)]
    path.write_text('[config]\nrouter = "random"\n')
    assert main(plan) == 2
    err = capsys.readouterr().err
    assert err == (
        f"kvsim plan: error: run file {path}: [config] router: 'random' does nothing here: a router picks "
        "among replicas, and this run has one (every request goes to it); give --replicas N or drop it\n"
    )
    assert main([*plan[:-2], "--router", "random"]) == 2
    assert capsys.readouterr().err.rstrip().endswith("give --replicas N or drop the flag")
