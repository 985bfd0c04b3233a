"""The `kvsim` command line (kvsim.cli) and `python -m bench.sweep`: one run (table and --json), a sweep,
--help that names every flag, and errors as exit code 2."""

from __future__ import annotations

import json

import polars as pl
import pytest

from kvsim.cli import bench_main, build_parser, main
from kvsim.sweep import CONFIG_FIELDS

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


@pytest.mark.parametrize("command", ["run", "sweep", "claims"])
def test_help_explains_every_flag(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    if command == "run":
        for name in CONFIG_FIELDS:
            assert f"--{name.replace('_', '-')}" in text
        assert "(default: None)" not in text
        assert " V " not in text
    if command == "sweep":
        for flag in ("--grid", "--workload", "--seeds", "--executor", "--scheduler", "--workers", "--output"):
            assert flag in text


def test_bench_sweep_runs_a_grid(tmp_path, capsys):
    out = tmp_path / "g.parquet"
    args = ["--grid", "block_size=16,32", "--base", "num_blocks=150", "--base", "time_model=ticks"]
    args += ["--requests", "60", "--seeds", "2", "--output", str(out), "--no-progress"]
    assert bench_main(args) == 0
    assert "4 points run" in capsys.readouterr().out
    assert pl.read_parquet(out).height == 4
    assert bench_main(args) == 0
    assert "0 points run, 4 already" in capsys.readouterr().out


def test_errors_exit_2(capsys):
    assert bench_main(["--grid", "blok_size=8"]) == 2
    assert "did you mean block_size" in capsys.readouterr().err
    assert main(["run", "--policy", "paged"]) == 2


def test_claims_table_prints_every_claim_with_its_verdict(tmp_path):
    from kvsim.claims import CONFIRMED, Claim, ClaimsReport

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
