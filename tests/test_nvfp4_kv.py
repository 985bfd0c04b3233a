"""The NVFP4 KV cache (`--kv-cache-dtype nvfp4`, `nvfp4_4over6`; vLLM 0.34.0 and 0.33.0): a page of `2 × kv_heads`
slots of `head_size // 2 + head_size // 16` bytes a token (`nvfp4_kv_cache_full_dim`, FlashInfer's
`customize_spec`), sized and timed from it, and refused by name where FlashInfer's backend, the one that takes
it, does not serve it (DESIGN.md §Errors, "KV cache dtypes")."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.errors import InvalidArgumentError
from kvsim.model.dtypes import kv_head_bits, nvfp4_head_bytes
from kvsim.model.gpus import resolve as resolve_gpu
from kvsim.model.models import resolve
from kvsim.model.timing import roofline_time_model
from tests.cli_run_common import PLAN, _error, _json

LLAMA_ON_B200 = ["run", "--model", "llama-3.1-8b", "--gpu", "b200", "--requests", "3"]
PREFIX = "kvsim run: error: argument --kv-cache-dtype: kv_cache_dtype "


def test_a_heads_bytes_are_vllms_integer_formula():
    # 128 values: 64 bytes of 4-bit values, 8 fp8 scales; 64 values: 32 + 4
    assert nvfp4_head_bytes(128) == 72
    assert nvfp4_head_bytes(64) == 36
    # K and V of 128: 144 bytes, 9/32 of bf16's 512
    assert kv_head_bits(128, 128, "nvfp4") == 8 * 144 == 9 * (128 + 128) * 16 // 32
    assert kv_head_bits(128, 128, "nvfp4_4over6") == kv_head_bits(128, 128, "nvfp4")
    assert kv_head_bits(128, 128, "fp8") == 8 * 256


@pytest.mark.parametrize("value", ["nvfp4", "nvfp4_4over6"])
def test_llama_on_b200_by_hand(capsys, value):
    """Llama-3.1-8B: 32 layers × 8 KV heads × (K + V) × (128 // 2 + 128 // 16) bytes = 36,864 bytes a token
    (bf16's 131,072 × 9/32); a 64-token block 2,359,296 bytes; the blocks the KV bytes kvsim prints hold."""
    out = _json(capsys, [*LLAMA_ON_B200, "--kv-cache-dtype", value])["pool_sizing"]
    per_token = 32 * 8 * 2 * (128 // 2 + 128 // 16)
    assert per_token == 36_864 == 131_072 * 9 // 32
    assert out["kv_bytes_per_token"] == per_token
    assert out["block_size"] == 64
    assert out["bytes_per_block"] == 64 * per_token == 2_359_296
    assert out["kv_groups"][0]["page_bytes"] == 64 * 8 * 2 * 72
    assert out["num_blocks"] == out["measured"]["kv_bytes"] // (64 * per_token)
    # the memory terms do not depend on the KV dtype: bf16's KV bytes hold 32/9 times fewer tokens
    bf16 = _json(capsys, [*LLAMA_ON_B200])["pool_sizing"]
    assert bf16["measured"]["kv_bytes"] == out["measured"]["kv_bytes"]
    assert bf16["num_blocks"] == out["measured"]["kv_bytes"] // (64 * 131_072)


def test_a_hybrid_models_block_holds_a_mamba_state_in_nvfp4_pages(capsys):
    """Qwen3-Next: its full-attention layers' page a token is 2 KV heads × (K + V) × (256 // 2 + 256 // 16) =
    576 bytes (bf16: 2,048); vLLM's `_align_hybrid_block_size` takes FlashInfer's customized page, so the block
    is raised to the least multiple of 64 tokens whose page holds the largest state."""
    m = resolve("qwen3-next-80b-a3b")
    state = max(lay.state.page_bytes(1, 16) for lay in m.layers if lay.state is not None)
    per_token = 2 * 2 * (256 // 2 + 256 // 16)
    assert per_token == 576
    expected = 64 * -(-state // (64 * per_token))
    out = _json(
        capsys,
        [
            "run",
            "--model",
            "qwen3-next-80b-a3b",
            "--gpu",
            "b200",
            "--requests",
            "3",
            "--kv-cache-dtype",
            "nvfp4",
        ],
    )["pool_sizing"]
    groups = out["kv_groups"]
    full = [g for g in groups if g["kind"] == "full"]
    assert [g["block_size"] for g in full] == [expected]
    assert expected * per_token >= state > (expected - 64) * per_token
    # every group's page is the attention page (the state padded to it)
    assert {g["page_bytes"] for g in groups} == {expected * per_token}
    auto = _json(capsys, ["run", "--model", "qwen3-next-80b-a3b", "--gpu", "b200", "--requests", "3"])
    assert expected > auto["pool_sizing"]["block_size"] == 64 * -(-state // (64 * 2048))


def test_the_roofline_reads_the_pages_bytes():
    m, b200 = resolve("llama-3.1-8b"), resolve_gpu("b200")
    bf16 = roofline_time_model(m, b200).attention[0].kv_ps
    nvfp4 = roofline_time_model(m, b200, kv_cache_dtype="nvfp4").attention[0].kv_ps
    fp8 = roofline_time_model(m, b200, kv_cache_dtype="fp8").attention[0].kv_ps
    assert abs(nvfp4 * 32 - bf16 * 9) <= 32
    assert abs(fp8 * 2 - bf16) <= 2


@pytest.mark.parametrize(
    ("model", "gpu", "value", "why"),
    [
        (
            "llama-3.1-8b",
            "h100-80gb",
            "nvfp4_4over6",
            "on sm_90, compute capability 9.x, where FlashInfer takes nvfp4 only",
        ),
        (
            "llama-3.1-8b",
            "rtx-pro-6000",
            "nvfp4_4over6",
            "compute capability 12.x, where FlashInfer takes nvfp4 only",
        ),
        ("gpt-oss-20b", "h100-80gb", "nvfp4", 'on sm_90 at head size 64 ("fa2 prefill misreads'),
        ("llama-3.1-8b", "mi300x", "nvfp4", "on gfx942, a ROCm GPU"),
        ("deepseek-v3", "b200", "nvfp4", "for an MLA model"),
        (
            "llama-3.1-8b",
            "rtx-2070",
            "nvfp4",
            "on sm_75: FlashInfer's backend takes it on compute capability",
        ),
    ],
)
def test_what_flashinfer_does_not_serve_is_refused_by_name(capsys, model, gpu, value, why):
    err = _error(
        capsys, ["run", "--model", model, "--gpu", gpu, "--requests", "3", "--kv-cache-dtype", value]
    )
    assert err.startswith(
        f"{PREFIX}{value}: model {model}: vLLM 0.34.0 (and 0.33.0) serves no NVFP4 KV cache "
    ), err
    assert why in err, err


def test_sinks_are_refused_on_hopper_and_taken_on_blackwell(capsys):
    """gpt-oss has attention sinks (and heads of 64): FlashInfer reads them from an NVFP4 cache on 10.x only."""
    from kvsim.model.kv_dtype_values import nvfp4_refusal

    m = resolve("gpt-oss-20b")
    assert nvfp4_refusal(m, "nvfp4", "sm_100") is None
    assert "head size 64" in (nvfp4_refusal(m, "nvfp4", "sm_120") or "")
    import dataclasses

    wide = dataclasses.replace(
        m, head_dim=128, layers=tuple(dataclasses.replace(lay, head_dim=None) for lay in m.layers)
    )
    assert "attention sinks" in (nvfp4_refusal(wide, "nvfp4", "sm_90") or "")
    assert nvfp4_refusal(wide, "nvfp4", "sm_100") is None
    out = _json(
        capsys,
        ["run", "--model", "gpt-oss-20b", "--gpu", "b200", "--requests", "3", "--kv-cache-dtype", "nvfp4"],
    )
    # 24 layers × 8 KV heads × (K + V) × (64 // 2 + 64 // 16) bytes if every layer kept every token
    assert out["pool_sizing"]["kv_bytes_per_token"] == 24 * 8 * 2 * 36


def test_the_python_api_refuses_what_the_model_alone_rules_out():
    with pytest.raises(InvalidArgumentError, match="serves no NVFP4 KV cache for an MLA model"):
        resolve("deepseek-v3").with_kv_dtype("nvfp4")
    assert resolve("llama-3.1-8b").with_kv_dtype("nvfp4").kv_bytes_per_token == 36_864
    with pytest.raises(InvalidArgumentError, match="not a weight dtype"):
        resolve("llama-3.1-8b").with_weight_dtype("nvfp4")


@pytest.mark.parametrize("preset", ["vllm-0.33", "vllm-0.34"])
def test_the_read_releases_presets_take_it(capsys, preset):
    out = _json(capsys, [*LLAMA_ON_B200, "--preset", preset, "--kv-cache-dtype", "nvfp4"])
    assert out["pool_sizing"]["kv_bytes_per_token"] == 36_864


def test_an_older_preset_refuses_it_by_name(capsys):
    err = _error(capsys, [*LLAMA_ON_B200, "--preset", "vllm-v1", "--kv-cache-dtype", "nvfp4"])
    assert err.startswith(
        f"{PREFIX}'nvfp4' under preset vllm-v1: kvsim models the NVFP4 KV cache as vLLM 0.33.0"
    ), err


def test_the_older_releases_refuse_it_however_it_is_reached(tmp_path):
    """The older presets refused only a value typed on the CLI or in a run file: `SimConfig.preset('vllm-v1',
    kv_cache_dtype='nvfp4')` sized NVFP4 pages, and so did auto from a ModelOpt checkpoint whose KV cache is
    NVFP4. SimConfig refuses the resolved dtype under the release those presets record (`vllm_release`)."""
    import json

    from kvsim.model import models
    from kvsim.model.config import SimConfig

    on_b200 = {"model": "llama-3.1-8b", "gpu": "b200"}
    for preset, release in (("vllm-v1", "0.18.1"), ("vllm-0.20", "0.22.1")):
        with pytest.raises(InvalidArgumentError, match=f"kv_cache_dtype 'nvfp4' under vLLM {release} "):
            SimConfig.preset(preset, kv_cache_dtype="nvfp4", **on_b200)
    with pytest.raises(InvalidArgumentError, match="has not read the older releases'"):
        SimConfig.preset("vllm-v1", **on_b200).replace(kv_cache_dtype="nvfp4_4over6")
    hf = Path(__file__).parent / "data" / "hf" / "llama-3.1-8b.json"
    qc = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4"}
    (tmp_path / "m.json").write_text(json.dumps({**json.loads(hf.read_text()), "quantization_config": qc}))
    m = models.from_hf_config(tmp_path / "m.json")
    with pytest.raises(
        InvalidArgumentError, match=r"'nvfp4' \(auto: the checkpoint's KV cache\) under vLLM 0\.18\.1"
    ):
        SimConfig.preset("vllm-v1", model=m, gpu="b200")
    assert SimConfig.preset("vllm-0.33", model=m, gpu="b200").pool.kv_bytes_per_token == 36_864


def test_plan_takes_it_and_refuses_it_as_run_does(capsys):
    err = _error(
        capsys, [*PLAN, "--model", "llama-3.1-8b", "--gpu", "h100-80gb", "--kv-cache-dtype", "nvfp4_4over6"]
    )
    assert "argument --kv-cache-dtype: kv_cache_dtype nvfp4_4over6: model llama-3.1-8b:" in err


def test_the_sizing_functions_apply_the_gpus_rules():
    from kvsim.model.sizing import pool_blocks, size_pool

    with pytest.raises(
        InvalidArgumentError, match=r"on sm_90, compute capability 9\.x, where FlashInfer takes nvfp4 only"
    ):
        pool_blocks("llama-3.1-8b", "h100-80gb", 16, kv_dtype="nvfp4_4over6")
    with pytest.raises(InvalidArgumentError, match="on gfx942, a ROCm GPU"):
        size_pool("llama-3.1-8b", "mi300x", 16, kv_cache_dtype="nvfp4")
    # a pool of given bytes: 1 GiB over 16-token blocks of 36,864 bytes a token
    assert pool_blocks("llama-3.1-8b", None, 16, kv_cache_bytes=2**30, kv_dtype="nvfp4") == 2**30 // (
        16 * 36_864
    )


def test_head_sizes_flashinfer_does_not_take_are_refused():
    import dataclasses

    from kvsim.model.kv_dtype_values import nvfp4_refusal

    m = resolve("llama-3.1-8b")
    assert nvfp4_refusal(m, "nvfp4", "sm_100") is None
    assert "at a head size of 80" in (nvfp4_refusal(dataclasses.replace(m, head_dim=80), "nvfp4") or "")
    lopsided = dataclasses.replace(
        m, layers=tuple(dataclasses.replace(lay, v_head_dim=64) for lay in m.layer_list())
    )
    assert "K heads of 128 and V heads of 64" in (nvfp4_refusal(lopsided, "nvfp4") or "")
    assert nvfp4_refusal(m, "fp8", "gfx942") is None


def test_a_block_flashinfer_takes_is_a_multiple_of_16(capsys):
    out = _json(capsys, [*LLAMA_ON_B200, "--kv-cache-dtype", "nvfp4", "--block-size", "48"])["pool_sizing"]
    assert out["bytes_per_block"] == 48 * 36_864
    err = _error(capsys, [*LLAMA_ON_B200, "--kv-cache-dtype", "nvfp4", "--block-size", "8"])
    assert "block size 8: vLLM 0.33.0 and 0.34.0 start no attention backend on a GPU for it" in err
