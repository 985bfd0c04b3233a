"""`max_model_len` auto (`-1`, `"auto"`): vLLM 0.33.0 and 0.34.0's auto-fit (`_auto_fit_max_model_len`,
`vllm/v1/core/kv_cache_planning.py`), and the first one-request refusal under measured sizing, which now says
the length that runs (user52 findings 1 and 2; DESIGN.md §Defaults and sizing, "--max-model-len auto").

The worked case: llama-3.1-70b at tp 2 holds 80 layers × 2 × (8 / 2) KV heads × 128 × 2 B = 160 KiB a token
a GPU, so a 64-token block is 10 MiB and a request of L tokens needs ceil(L / 64) blocks; on an H100 its
measured pool is 635 blocks, so (635 − 1) × 64 = 40,576 tokens is the longest request it holds."""

from __future__ import annotations

import pytest

from kvsim.cli import main
from kvsim.errors import InvalidArgumentError
from kvsim.model.config import SimConfig
from tests.cli_run_common import _error, _json

MIB = 1 << 20
LLAMA_70B_TP2 = {"model": "llama-3.1-70b", "gpu": "h100-80gb", "tensor_parallel_size": 2}


@pytest.mark.parametrize("auto", ["auto", "AUTO", " -1 ", -1])
def test_auto_fits_the_longest_request_the_measured_blocks_hold(auto):
    """Measured sizing fits twice: on the reservation (the estimate of the first refusal, 61,824) and after
    warmup on the measured blocks less the null block, (n − 1) × 64 = 40,576, the length that runs."""
    c = SimConfig(max_model_len=auto, **LLAMA_70B_TP2)
    assert c.pool.layout.bytes_per_block == 64 * 80 * 2 * 4 * 128 * 2 == 10 * MIB
    n = c.num_blocks
    assert c.max_model_len == (n - 1) * 64 == 40_576
    fit = c.pool.auto_fit
    assert (fit.context, fit.fitted) == (131_072, 40_576)
    first, final = fit.lines
    assert first.startswith(
        "Auto-fit max_model_len: reduced from 131072 to 61824 to fit in available KV cache"
    )
    assert first.endswith("; the final length is set after CUDA graph capture and warmup")
    assert final == (
        "--max-model-len auto reduced max_model_len from 61824 to 40576 (6.19 GiB GPU left for the KV cache "
        "after CUDA graph capture and warmup)."
    )
    # the length auto gives is the longest that SimConfig takes given: one token more is refused after warmup
    assert SimConfig(max_model_len=40_576, **LLAMA_70B_TP2).num_blocks == n
    with pytest.raises(InvalidArgumentError, match="measured after warmup"):
        SimConfig(max_model_len=40_577, **LLAMA_70B_TP2)
    lines = c.pool.figures.lines()
    # vLLM's order: the first fit after the available memory, the final one before the KV cache size
    assert lines.index(first) == 2
    assert lines.index(final) + 1 == lines.index(
        "GPU KV cache size: 40,640 tokens, Maximum concurrency for 40,576 tokens per request: 1.00x"
    )


def test_auto_on_a_profiled_pool_is_one_fit_and_a_short_one_is_vllms_warning():
    """Profiled (vLLM 0.33.0's rule, and 0.34.0's where the extensible cache is off): one fit on the pool less
    the null block, (n − 1) × 64 = 8,384 here (8,192 or more: an info line); a pool of 50 blocks in an
    override fits 49 × 64 = 3,136, under vLLM's 8,192, which it logs as a warning with its hint."""
    c = SimConfig(max_model_len="auto", kv_cache_sizing="profiled", **LLAMA_70B_TP2)
    assert c.max_model_len == (c.num_blocks - 1) * 64 == 8_384
    (line,) = c.pool.auto_fit.lines
    assert line.startswith("--max-model-len auto reduced max_model_len from 131072 to 8384 (")
    assert line.endswith(" GiB GPU available for the KV cache).")
    small = SimConfig(max_model_len="auto", num_blocks=50, **LLAMA_70B_TP2)
    assert small.max_model_len == 49 * 64 == 3_136
    (line,) = small.pool.auto_fit.lines
    assert "Requests longer than 3136 tokens will be rejected." in line
    assert line.endswith("Increase `gpu_memory_utilization` or set --max-model-len explicitly.")
    # a pool given in bytes: 100 blocks of 10 MiB, 99 usable
    in_bytes = SimConfig(
        model="llama-3.1-70b", tensor_parallel_size=2, kv_cache_bytes=1000 * MIB, max_model_len=-1
    )
    assert in_bytes.max_model_len == 99 * 64


def test_a_context_that_fits_is_kept_and_said_to_fit():
    c = SimConfig(model="llama-3.1-8b", gpu="h100-80gb", max_model_len="auto")
    assert c.max_model_len == 131_072
    first, final = c.pool.auto_fit.lines
    assert first.startswith("Auto-fit max_model_len: full model context length 131072 fits in available KV")
    assert final.startswith("Auto-fit max_model_len: using max_model_len=131072, which fits in the KV cache")


def test_auto_refusals_are_named():
    with pytest.raises(InvalidArgumentError, match="Cannot auto-fit max_model_len: not enough GPU memory"):
        # (15 MiB less the null block's 10 MiB holds no 10 MiB block: not one token)
        SimConfig(
            model="llama-3.1-70b", tensor_parallel_size=2, kv_cache_bytes=15 * MIB, max_model_len="auto"
        )
    with pytest.raises(InvalidArgumentError, match=r"max_model_len auto \(-1\) fits the context to a model"):
        SimConfig(num_blocks=100, max_model_len="auto")
    with pytest.raises(InvalidArgumentError, match="or -1 or 'auto'"):
        SimConfig(num_blocks=100, max_model_len=0)
    for old in ("vllm-0.20", "vllm-0.19", "vllm-v1", "vllm-0.11", "vllm-v0"):
        with pytest.raises(InvalidArgumentError, match=f"preset {old} is an older vLLM than 0.33.0"):
            SimConfig.preset(old, max_model_len="auto", **LLAMA_70B_TP2)
    # vLLM 0.33.0 had it (profiled, block 16 by its default): the same rule, one fit
    c = SimConfig.preset("vllm-0.33", max_model_len="auto", **LLAMA_70B_TP2)
    assert c.block_size == 16
    assert c.max_model_len == (c.num_blocks - 1) * 16


def test_the_older_releases_auto_refusal_is_the_configurations_own(capsys):
    """The older presets' refusal of auto was in `SimConfig.preset` only: `replace(max_model_len=-1)` on a
    vllm-v1 configuration fitted, and plan's --compare ranked an auto candidate under --preset vllm-v1 (labelled
    `max_model_len=-1`). SimConfig refuses it wherever it comes from, by the release those presets record
    (`vllm_release`); the free order alone, which it keyed on before, no longer refuses it."""
    older = SimConfig.preset("vllm-v1", model="llama-3.1-8b", gpu="h100-80gb")
    with pytest.raises(InvalidArgumentError, match=r"max_model_len auto \(-1\) under vLLM 0\.18\.1 \("):
        older.replace(max_model_len=-1)
    with pytest.raises(InvalidArgumentError, match="has not read the older releases'"):
        SimConfig(max_model_len="auto", vllm_release="0.22.1", **LLAMA_70B_TP2)
    assert SimConfig(max_model_len="auto", free_order="classic", **LLAMA_70B_TP2).pool.auto_fit is not None
    assert SimConfig(max_model_len="auto", **LLAMA_70B_TP2).pool.auto_fit is not None
    plan = ["plan", "--slo", "ttft_p99:2s", "--max-probes", "2", "--workers", "1", "--requests", "5"]
    model = ["--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--compare", "max_model_len=4096,auto"]
    assert main([*plan, "--preset", "vllm-v1", *model]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        "kvsim plan: error: argument --compare: candidate max_model_len=auto: max_model_len auto"
    )
    assert main([*plan, *model]) == 0
    out = capsys.readouterr().out
    assert "max_model_len=auto " in out
    assert "max_model_len=-1" not in out


def test_auto_is_kept_as_given():
    """`to_dict` keeps -1, `describe` shows "auto", and both rebuild the fitted length; `replace` fits again
    (at tp 4 the 70B model's whole context fits)."""
    c = SimConfig(max_model_len="auto", **LLAMA_70B_TP2)
    assert c.to_dict()["max_model_len"] == -1
    assert c.describe()["given"] == {"max_model_len": "auto"}
    assert c.resolved()["max_model_len"] == 40_576
    assert SimConfig.from_dict(c.to_dict()).max_model_len == 40_576
    assert SimConfig.from_dict(c.describe()).max_model_len == 40_576
    assert c.replace(tensor_parallel_size=4).max_model_len == 131_072


def test_kvsim_run_takes_auto_from_the_flag_and_the_run_file(capsys, tmp_path):
    argv = ["run", "--model", "llama-3.1-70b", "--gpu", "h100-80gb", "-tp", "2", "--requests", "3"]
    for given in ("auto", "-1"):
        out = _json(capsys, [*argv, "--max-model-len", given])
        assert out["config"]["max_model_len"] == 40_576
        assert any(line.startswith("--max-model-len auto reduced") for line in out["startup"])
    assert main([*argv, "--max-model-len", "auto"]) == 0
    text = capsys.readouterr().out
    assert "max_model_len=40576 (auto given)" in text
    assert "vllm: --max-model-len auto reduced max_model_len from 61824 to 40576 (" in text
    run_file = tmp_path / "run.toml"
    run_file.write_text(
        '[config]\nmodel = "llama-3.1-70b"\ngpu = "h100-80gb"\ntensor_parallel_size = 2\nmax_model_len = "auto"\n'
    )
    assert (
        _json(capsys, ["run", "--toml", str(run_file), "--requests", "3"])["config"]["max_model_len"]
        == 40_576
    )
    err = _error(capsys, [*argv, "--max-model-len", "auto", "--preset", "vllm-v1"])
    assert err.startswith(
        "kvsim run: error: argument --max-model-len: max_model_len auto (-1): preset vllm-v1 is an older vLLM"
    )


def test_the_first_refusal_says_the_length_that_runs(capsys):
    """Finding 2: vLLM's first refusal (on the reservation) estimates 61,824, which its check after warmup
    refuses; kvsim adds what those blocks hold, 40,576, the length auto gives. The refusal is named by what
    the user gave (--model, or --max-model-len), not by the unset gpu_memory_utilization; its subtraction
    is to the byte, one block of 10,485,760 B."""
    argv = ["run", "--model", "llama-3.1-70b", "--gpu", "h100-80gb", "-tp", "2", "--requests", "3"]
    err = _error(capsys, argv)
    assert err.startswith(
        "kvsim run: error: argument --model: model llama-3.1-70b does not fit one request: "
    )
    assert "the estimated maximum model length is 61824." in err
    assert "hold one request of 40,576 tokens at most, the length that runs (--max-model-len 40576;" in err
    assert err.endswith("or --max-model-len auto fits it.")
    kv = SimConfig(max_model_len=40_576, **LLAMA_70B_TP2).pool.figures.available_kv_bytes
    assert (
        f"{kv:,} B − 10,485,760 B = {kv - 10 * MIB:,} B (9.44 GiB as it prints it), one block below the 9.45 GiB"
        in err
    )
    err = _error(capsys, [*argv, "--max-model-len", "61824"])
    assert err.startswith(
        "kvsim run: error: argument --max-model-len: model llama-3.1-70b does not fit one request in"
    )
    assert "the estimated maximum model length is 40576." in err
    assert main([*argv, "--max-model-len", "40576"]) == 0


def test_the_one_request_refusal_names_a_run_files_field(capsys, tmp_path):
    """A run file's max_model_len (or model) was blamed as `argument --model`, a flag never typed; it is
    named by the run file's field, as the other refusals name it."""
    run_file = tmp_path / "run.toml"
    config = '[config]\nmodel = "llama-3.1-8b"\ngpu = "l4"\n'
    run_file.write_text(config + "max_model_len = 131072\n")
    err = _error(capsys, ["run", "--toml", str(run_file), "--requests", "3"])
    assert err.startswith(
        f"kvsim run: error: run file {run_file}: [config] max_model_len: model llama-3.1-8b "
    ), err
    assert "argument --" not in err.split(": model ")[0]
    run_file.write_text(config)
    err = _error(capsys, ["run", "--toml", str(run_file), "--requests", "3"])
    assert err.startswith(f"kvsim run: error: run file {run_file}: [config] model: model llama-3.1-8b "), err


def test_a_sweep_takes_auto_as_a_grid_value(tmp_path, capsys):
    import polars as pl

    from tests.cli_run_common import SWEEP

    out = tmp_path / "sweep.parquet"
    base = ["--base", "model=llama-3.1-70b", "--base", "gpu=h100-80gb", "--base", "tensor_parallel_size=2"]
    argv = [*SWEEP, "--grid", "max_model_len=auto,8192", *base, "--output", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    rows = pl.read_parquet(out).sort("max_model_len", descending=True)
    assert rows["max_model_len"].to_list() == [40_576, 8_192]
    assert rows["num_blocks"].to_list() == [635, 635]


def test_a_hybrid_model_is_fitted_by_its_groups():
    """Qwen3-Next (attention and gated-delta-net state groups) on eight L4s: its 262,144-token context does
    not fit, and the length auto gives is the longest SimConfig takes given (one token more is refused)."""
    kw = {"model": "qwen3-next-80b-a3b", "gpu": "l4", "tensor_parallel_size": 8}
    c = SimConfig(max_model_len="auto", **kw)
    assert c.pool.auto_fit.context == 262_144 > c.max_model_len
    assert SimConfig(max_model_len=c.max_model_len, **kw).num_blocks == c.num_blocks
    with pytest.raises(InvalidArgumentError, match="does not fit one request"):
        SimConfig(max_model_len=c.max_model_len + 1, **kw)


def test_a_prefill_pool_of_other_memory_under_auto_is_told_why_the_lengths_differ(capsys):
    """With auto each pool fits its own length: a prefill pool of other memory stopped the run with two
    lengths the user never gave. The refusal says auto fitted them and asks for one length; a length runs."""
    argv = [
        "run",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "l4",
        "--kv-cache-sizing",
        "profiled",
        "--requests",
        "3",
    ]
    pd = ["--prefill-replicas", "1", "--prefill-config", "gpu_memory_utilization=0.85"]
    err = _error(capsys, [*argv, *pd, "--max-model-len", "auto"])
    assert err.startswith("kvsim run: error: argument --prefill-config: prefill_config's max_model_len "), err
    assert (
        "(max_model_len auto fits each pool's length to its own memory: give max_model_len a number)" in err
    )
    err = _error(capsys, [*argv, *pd, "--max-model-len", "8192", "--prefill-config", "max_model_len=4096"])
    assert "differs from the decode replicas' 8192: both pools" in err, err
    assert main([*argv, *pd, "--max-model-len", "8192"]) == 0
