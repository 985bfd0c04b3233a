"""`--kv-cache-dtype` takes what the preset's vLLM release takes (`kvsim.model.kv_dtype_values`): vLLM 0.34.0's and
0.33.0's `CacheDType` (`vllm/config/cache.py`) has no `fp16`, `bf16` or `fp32` (vllm serve refuses them:
"Invalid kv_cache_dtype"), and takes `fp8_inc` and others kvsim does not model; each is refused by name (`nvfp4`,
which kvsim models: tests/test_nvfp4_kv.py)."""

from __future__ import annotations

import pytest

from kvsim.model.kv_dtype_values import MODELLED, VLLM_KV_CACHE_DTYPES
from tests.cli_run_common import LLAMA_ON_H100, PLAN, _error, _json

PREFIX = "kvsim run: error: argument --kv-cache-dtype: "


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("fp16", "vLLM's name for it is float16"),
        ("bf16", "vLLM's name for it is bfloat16"),
        ("fp32", "vLLM has no 32-bit KV cache dtype: its auto follows the model's dtype"),
    ],
)
@pytest.mark.parametrize("preset", [[], ["--preset", "vllm-0.34"], ["--preset", "vllm-0.33"]])
def test_a_kv_dtype_vllm_refuses_is_refused_listing_its_values(capsys, value, hint, preset):
    err = _error(capsys, [*LLAMA_ON_H100, *preset, "--kv-cache-dtype", value])
    assert err.startswith(
        f"{PREFIX}kv_cache_dtype {value!r} is not one of vLLM 0.34.0's (and 0.33.0's) values"
    ), err
    assert '"Invalid kv_cache_dtype"' in err
    assert f"({hint})" in err
    assert f"vLLM takes {', '.join(VLLM_KV_CACHE_DTYPES)}; kvsim models {', '.join(MODELLED)}" in err


@pytest.mark.parametrize("value", ["fp8_inc", "turboquant_k8v4", "int8_per_token_head"])
def test_a_kv_dtype_vllm_takes_and_kvsim_does_not_model_says_so(capsys, value):
    err = _error(
        capsys,
        ["run", "--model", "llama-3.1-8b", "--gpu", "b200", "--requests", "3", "--kv-cache-dtype", value],
    )
    assert err.startswith(f"{PREFIX}kv_cache_dtype {value!r}: vLLM 0.34.0 takes it"), err
    assert "but kvsim does not model its KV cache pages" in err


def test_vllms_names_run_and_size_as_the_model_dtype_or_fp8(capsys):
    """llama-3.1-8b is bf16: auto, bfloat16 and float16 keep 2 bytes an element (128 KiB a token), fp8 1."""
    per_token = {}
    for value in ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"):
        out = _json(capsys, [*LLAMA_ON_H100, "--kv-cache-dtype", value])
        per_token[value] = out["pool_sizing"]["num_blocks"]
    assert per_token["auto"] == per_token["bfloat16"] == per_token["float16"]
    assert per_token["fp8"] == per_token["fp8_e4m3"] == per_token["fp8_e5m2"] > 1.9 * per_token["auto"]


def test_an_older_preset_keeps_kvsims_names(capsys):
    """The presets before vllm-0.33 keep kvsim's list (their releases' lists are not read): fp32 doubles the
    bytes a token of bf16."""
    blocks = {}
    for value in ("auto", "fp32"):
        out = _json(capsys, [*LLAMA_ON_H100, "--preset", "vllm-v1", "--kv-cache-dtype", value])
        blocks[value] = out["pool_sizing"]["num_blocks"]
    assert blocks["fp32"] < 0.51 * blocks["auto"]


def test_the_run_file_the_prefill_config_and_plan_are_refused_as_given(capsys, tmp_path):
    run_file = tmp_path / "run.toml"
    run_file.write_text('[config]\nmodel = "llama-3.1-8b"\ngpu = "h100-80gb"\nkv_cache_dtype = "fp32"\n')
    err = _error(capsys, ["run", "--toml", str(run_file), "--requests", "3"])
    assert f"run file {run_file}: [config] kv_cache_dtype: kv_cache_dtype 'fp32' is not one of" in err
    fleet = [*LLAMA_ON_H100, "--replicas", "1", "--prefill-replicas", "1"]
    err = _error(capsys, [*fleet, "--prefill-config", "kv_cache_dtype=bf16"])
    assert err.startswith(
        "kvsim run: error: argument --prefill-config: kv_cache_dtype: kv_cache_dtype 'bf16'"
    ), err
    err = _error(
        capsys, [*PLAN, "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--kv-cache-dtype", "fp8_inc"]
    )
    assert "argument --kv-cache-dtype: kv_cache_dtype 'fp8_inc': vLLM 0.34.0 takes it" in err
