"""A disaggregated fleet's pool sizing on CUDA (user52 findings 6 and 7): vLLM 0.34.0's
`VllmConfig._resolve_extensible_kv_cache` (`vllm/config/vllm.py` ~3247-3267) leaves an unset extensible KV
cache off for NIXL's connector without an IMEX channel (kvsim assumes none) and logs why, and keeps one asked
for on, warning that transfers within a host fall back to TCP. kvsim says both: a `vllm:` line, a note, the
pool line, the `config:` line (DESIGN.md §Defaults and sizing, "Measured sizing")."""

from __future__ import annotations

import pytest

from kvsim.model.config import SimConfig
from kvsim.model.measured import IMEX_OFF, NO_IMEX, PD_PROFILED
from tests.cli_run_common import _json

BASE = {"model": "llama-3.1-8b", "gpu": "h100-80gb"}
PD = {"replicas": 3, "prefill_replicas": 1}


def test_an_unset_sizing_is_profiled_and_says_why():
    """Llama-3.1-8B on an H100, blocks of 64 (128 KiB a token, 8 MiB a block): one replica measures 7,663
    blocks; the P/D fleet is profiled at 0.92, 7,035, 628 fewer, as one replica given the profiled rule."""
    one = SimConfig(**BASE)
    pd = SimConfig(**BASE, **PD)
    profiled = SimConfig(**BASE, kv_cache_sizing="profiled")
    assert (one.kv_cache_sizing, pd.kv_cache_sizing) == ("measured", "profiled")
    assert pd.pool.layout.bytes_per_block == one.pool.layout.bytes_per_block == 64 * 128 * 1024
    assert pd.num_blocks == profiled.num_blocks == one.num_blocks - 628 == 7_035
    assert pd.pool.profiled_why == PD_PROFILED
    assert f"CUDA graphs ({PD_PROFILED}); " in pd.pool.line()
    assert pd.pool.figures.lines()[0] == IMEX_OFF
    assert IMEX_OFF not in one.pool.figures.lines()
    assert IMEX_OFF not in profiled.pool.figures.lines()
    # given profiled, vLLM logs nothing (its flag given False); on ROCm NIXL turns it off for another reason
    given = SimConfig(**BASE, **PD, kv_cache_sizing="profiled")
    assert (given.pool.profiled_why, given.pool.figures.config_lines) == (None, ())
    rocm = SimConfig(model="llama-3.1-8b", gpu="mi300x", **PD)
    assert (rocm.pool.profiled_why, rocm.pool.figures.config_lines) == (None, ())


def test_measured_given_is_taken_with_vllms_warning():
    """--kv-cache-sizing measured with P/D: vLLM keeps the extensible cache on when asked, IMEX or not, so
    the pool is the one replica's measured pool, and vLLM's warning is its first line."""
    pd = SimConfig(**BASE, **PD, kv_cache_sizing="measured")
    assert pd.measured_sizing_on
    assert pd.num_blocks == SimConfig(**BASE).num_blocks == 7_663
    assert pd.gpu_memory_utilization == 1.0
    assert pd.pool.profiled_why is None
    assert pd.pool.figures.lines()[0] == NO_IMEX


@pytest.mark.parametrize("backend", ["rust", "reference"])
def test_kvsim_run_says_it(capsys, backend):
    argv = [
        "run",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-80gb",
        "--replicas",
        "3",
        "--prefill-replicas",
        "1",
    ]
    argv += ["--requests", "20", "--backend", backend]
    out = _json(capsys, argv)
    assert out["startup"][0] == IMEX_OFF
    (note,) = [n for n in out["notes"] if n.startswith("the pool is profiled")]
    assert (
        "vLLM 0.34.0 leaves its extensible KV cache off for NIXL's connector without an IMEX channel" in note
    )
    assert note.endswith("--kv-cache-sizing measured")
    measured = _json(capsys, [*argv, "--kv-cache-sizing", "measured"])
    assert measured["config"]["num_blocks"] == 7_663
    assert measured["startup"][0] == NO_IMEX
    (note,) = [
        n for n in measured["notes"] if n.startswith("--kv-cache-sizing measured with a disaggregated")
    ]
    assert "fall back to TCP while transfers across hosts use RDMA" in note
    assert measured["summary"]["completed"] == out["summary"]["completed"] == 20


def test_the_config_line_shows_the_sizing_settled_away_from_the_default(capsys):
    from kvsim.cli import main

    argv = ["run", "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--requests", "5"]
    assert main([*argv, "--replicas", "3", "--prefill-replicas", "1"]) == 0
    (config,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("config: ")]
    assert "kv_cache_sizing=profiled (unset: vLLM 0.34.0's for NIXL without an IMEX channel)" in config
    assert main(argv) == 0
    (config,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("config: ")]
    assert "kv_cache_sizing" not in config
