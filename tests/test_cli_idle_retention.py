"""`--prefix-cache-retention-interval` is refused by name where the run has nothing it reads (a newcomer
review: exit 0 on llama-3-8b, nothing changed), by `kvsim run`, `kvsim plan` and `kvsim sweep` alike, and
runs where it acts; `--sampling fork-cow` on requests of one sample each is a note (DESIGN.md §Errors)."""

from __future__ import annotations

import json

import pytest

from kvsim.cli import main

from .cli_run_common import PLAN, SWEEP, _error, _json

GEMMA = ["--model", "gemma-3-12b", "--gpu", "h100-80gb", "--max-model-len", "32768"]
LLAMA = ["--model", "llama-3-8b", "--gpu", "h100-80gb"]
SHARED = "synthetic:num_system_prompts=2,system_prompt_len=3000,sharing_ratio=1"


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (
            [*LLAMA, "--prefix-cache-retention-interval", "64"],
            "64 does nothing here: model llama-3-8b has no sliding-window or Mamba (state) KV-cache group, "
            "the only groups whose cached blocks it thins",
        ),
        (
            [*GEMMA, "--prefix-cache-retention-interval", "64", "--no-enable-prefix-caching"],
            "64 does nothing here: it picks which blocks of model gemma-3-12b's sliding-window groups get a "
            "prefix-cache key, and prefix caching is off",
        ),
        (
            [*GEMMA, "--prefix-cache-retention-interval", "64", "--hybrid-kv-cache-manager", "off"],
            "64 does nothing here: model gemma-3-12b has no sliding-window or Mamba (state) KV-cache group "
            "with the hybrid KV-cache manager off (its windows kept whole)",
        ),
        (
            [*LLAMA, "--prefix-cache-retention-interval", "none"],
            "none does nothing here: model llama-3-8b has no sliding-window",
        ),
        (
            ["--num-gpu-blocks-override", "500", "--prefix-cache-retention-interval", "64"],
            "a model's knob, but this run names no model (its pool is given in blocks): give --model or drop it",
        ),
    ],
)
def test_kvsim_run_refuses_an_idle_retention_interval(capsys, argv, why):
    line = _error(capsys, ["run", "--requests", "3", *argv])
    assert line.startswith(f"kvsim run: error: argument --prefix-cache-retention-interval: {why}"), line


def test_the_retention_interval_runs_where_a_sliding_window_reads_it(capsys):
    """Not refused always: on Gemma 3's sliding-window groups with prefix caching it keys more blocks."""
    run = ["run", *GEMMA, "--requests", "200", "--workload", SHARED]
    default = _json(capsys, run)["summary"]["prefix_hit_rate_first_admission"]
    every_64 = _json(capsys, [*run, "--prefix-cache-retention-interval", "64"])
    assert every_64["config"]["prefix_cache_retention_interval"] == 64
    assert every_64["summary"]["prefix_hit_rate_first_admission"] > default


def test_plan_and_sweep_refuse_it_where_no_point_reads_it(capsys, tmp_path):
    assert main([*PLAN, *LLAMA, "--prefix-cache-retention-interval", "64"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "kvsim plan: error: argument --prefix-cache-retention-interval: 64 does nothing here"
    )
    out = tmp_path / "s.parquet"
    base = [
        "--base",
        "model=llama-3-8b",
        "--base",
        "gpu=h100-80gb",
        "--base",
        "prefix_cache_retention_interval=64",
    ]
    assert main([*SWEEP, *base, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "kvsim sweep: error: argument --base prefix_cache_retention_interval: 64 does nothing"
    )
    assert err.rstrip().endswith("drop it"), err
    assert not out.exists()
    # A grid with a model that reads it runs (its llama points with the knob unread).
    grid = [
        "--base",
        "gpu=h100-80gb",
        "--base",
        "max_model_len=32768",
        "--base",
        "prefix_cache_retention_interval=64",
    ]
    grid += ["--grid", "model=llama-3.1-8b,gemma-3-12b"]
    assert main([*SWEEP, *grid, "--output", str(out)]) == 0
    capsys.readouterr()
    assert out.exists()


def test_fork_cow_on_requests_of_one_sample_is_a_note(capsys):
    """It forks nothing there: the run is the one `independent` gives (the engines' input differs only in
    the fork parents, none with one sample each), so a note says so; with samples, no note."""
    run = ["run", "--num-gpu-blocks-override", "300", "--requests", "200"]
    fork = _json(capsys, [*run, "--sampling", "fork-cow"])
    independent = _json(capsys, [*run, "--sampling", "independent"])
    assert fork["summary"] == independent["summary"]
    said = [n for n in fork["notes"] if n.startswith("sampling 'fork-cow' changes nothing here")]
    assert len(said) == 1, fork["notes"]
    assert "every request of sharegpt has one sample" in said[0]
    samples = [*run, "--workload", "synthetic:num_samples=3", "--sampling"]
    forked = _json(capsys, [*samples, "fork-cow"])
    assert not any("changes nothing here" in n for n in forked["notes"])
    assert forked["summary"] != _json(capsys, [*samples, "independent"])["summary"]
    assert json.dumps(forked["notes"]).count("fork-cow") == 0
