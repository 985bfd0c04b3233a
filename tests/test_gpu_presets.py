"""The GPU presets (python/kvsim/model/gpus.py): each one's memory against its datasheet, the 2026 GPUs' cited
figures and vLLM's rules for their architecture, device names, host and peer links, tensor rates."""

from __future__ import annotations

import dataclasses

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model import gpus, models

GIB = 1 << 30


# Each preset's marketed memory in GB (its datasheet), against which the driver-reported totals are checked.
MARKETED_GB = {
    "rtx-2070": 8,
    "rtx-3090": 24,
    "rtx-4090": 24,
    "rtx-5090": 32,
    "rtx-pro-6000": 96,
    "a10g": 24,
    "a10": 24,
    "l4": 24,
    "l40s": 48,
    "l40": 48,
    "rtx-6000-ada": 48,
    "a100-40gb": 40,
    "a100-80gb": 80,
    "h100-80gb": 80,
    "h100-pcie": 80,
    "h20": 96,
    "h200": 141,
    "h200-nvl": 141,
    "b200": 180,
    "gb200": 186,
    "b300": 288,
    "gb300": 288,
    "mi300x": 192,
    "mi325x": 256,
    "mi350x": 288,
    "mi355x": 288,
}


def test_gpu_presets() -> None:
    """Every preset the issue names is there, with the figures a datasheet gives in their ranges."""
    assert sorted(gpus.names()) == sorted(MARKETED_GB)
    for name, gb in MARKETED_GB.items():
        g = gpus.get(name)
        # Driver-reported totals lie between 0.95 x the marketed "GB" read as 10**9 and the same read as 2**30.
        assert 0.95 * gb * 10**9 <= g.memory_bytes <= gb * GIB, name
        assert g.hbm_bandwidth > g.pcie_bandwidth > 0, name
        assert g.peak_flops > 1e13, name
        # fp8 runs at twice bf16's rate where the tensor cores have it, fp4 at twice fp8's (Blackwell Ultra's
        # at three times: 13.5 and 15 PFLOPS against 4.5 and 5).
        assert g.fp8_flops in (0, pytest.approx(2 * g.peak_flops, rel=0.02)), name
        ultra = name in ("b300", "gb300") and g.fp4_flops == 3 * g.fp8_flops
        assert g.fp4_flops in (0, pytest.approx(2 * g.fp8_flops, rel=0.02)) or name == "rtx-5090" or ultra, (
            name
        )
        assert g.source, name
    assert gpus.get("a100-80gb").hbm_bandwidth > gpus.get("a100-40gb").hbm_bandwidth
    assert gpus.get("H100-80GB") is gpus.get("h100-80gb")  # names are case-insensitive


# The presets added for the GPUs served on in 2026: (CUDA's total in GiB, as the cited messages print it; memory
# bandwidth; dense bf16, fp8 and fp4 FLOP/s; host link; peer link; arch), each against gpus.py's cited figures.
GPUS_2026 = {
    "b300": (267.69, 8.0e12, 2250e12, 4500e12, 13500e12, 64e9, 900e9, "sm_103"),
    "gb300": (276.50, 8.0e12, 2500e12, 5000e12, 15000e12, 225e9, 900e9, "sm_103"),
    "h200-nvl": (139.80, 4.8e12, 835.5e12, 1670.5e12, 0, 64e9, 450e9, "sm_90"),
    "rtx-6000-ada": (47.53, 960e9, 364.2e12, 728.5e12, 0, 32e9, 0, "sm_89"),
    "l40": (44.31, 864e9, 181.05e12, 362e12, 0, 32e9, 0, "sm_89"),
    "a10": (22.06, 600e9, 125e12, 0, 0, 32e9, 0, "sm_86"),
    "mi350x": (287.98, 8.0e12, 2300e12, 4600e12, 9200e12, 64e9, 537.6e9, "gfx950"),
    "mi355x": (287.98, 8.0e12, 2516.6e12, 5033.2e12, 10066.3e12, 64e9, 537.6e9, "gfx950"),
}


@pytest.mark.parametrize("name", sorted(GPUS_2026))
def test_2026_gpu_presets_hold_their_cited_figures(name: str) -> None:
    gib, bw, bf16, fp8, fp4, link, peer, arch = GPUS_2026[name]
    g = gpus.get(name)
    assert f"{g.memory_bytes / GIB:.2f}" == f"{gib:.2f}"
    assert (g.hbm_bandwidth, g.peak_flops, g.fp8_flops, g.fp4_flops) == (bw, bf16, fp8, fp4)
    assert (g.pcie_bandwidth, g.peer_bandwidth, g.arch) == (link, peer, arch)
    if name == "a10":  # 16 GiB of weights leave 3.93 GiB: not one 131,072-token request, vLLM's refusal
        with pytest.raises(InvalidArgumentError, match="does not fit one request"):
            kvsim.SimConfig(model="llama-3.1-8b", gpu=name)
    cfg = kvsim.SimConfig(model="llama-3.1-8b", gpu=name, max_model_len=8192 if name == "a10" else None)
    assert cfg.num_blocks > 0
    assert cfg.pool.figures is not None
    assert cfg.pool.figures.available_kv_bytes is not None
    assert cfg.pool.figures.available_kv_bytes > 0


def test_2026_gpus_take_vllms_rules_for_their_arch() -> None:
    """What vLLM 0.33.0 decides by compute capability, for sm_103 (B300, GB300: the 10.x family, as B200) and
    sm_121 (GB10: the 12.x family, as the RTX 5090, and its own batch-default rule)."""
    from kvsim.model import memory
    from kvsim.model.gpus import datacenter_blackwell, vllm_server_batch_defaults
    from kvsim.model.mxfp4_padding import mxfp4_padding_bytes

    # `get_batch_defaults`: >= 160 GiB first (B300, GB300, MI350X), then >= 70 GiB unless an A100 or a GB10.
    for name in ("b300", "gb300", "mi350x"):
        assert vllm_server_batch_defaults(gpus.get(name)) == (16384, 1024), name
    assert vllm_server_batch_defaults(gpus.get("h200-nvl")) == (8192, 1024)
    for name in ("rtx-6000-ada", "l40", "a10"):
        assert vllm_server_batch_defaults(gpus.get(name)) == (2048, 256), name
    gb10 = gpus.from_spec(
        {"name": "gb10", "memory": "122572MiB", "bandwidth": "273GB/s", "tflops": 100, "arch": "sm_121"}
    )
    assert vllm_server_batch_defaults(gb10) == (2048, 256)  # is_gb10: the small tier though >= 70 GiB
    assert vllm_server_batch_defaults(dataclasses.replace(gb10, arch="sm_120")) == (8192, 1024)
    assert kvsim.SimConfig(model="llama-3.1-8b", gpu=gb10).max_num_batched_tokens == 2048
    # `is_device_capability_family(100)`: the 1024-wide CUDA graph ceiling, by arch (a described sm_100 too).
    assert [
        datacenter_blackwell(a) for a in ("sm_100", "sm_103", "sm_90", "sm_120", "sm_121", "gfx950", "")
    ] == [
        True,
        True,
        False,
        False,
        False,
        False,
        False,
    ]
    b200 = kvsim.SimConfig(model="llama-3.1-8b", gpu="b200").pool
    for gpu in (
        "b300",
        "gb300",
        gpus.from_spec({"arch": "sm_100", "name": "my-b200"}, base=gpus.get("b200")),
    ):
        assert kvsim.SimConfig(model="llama-3.1-8b", gpu=gpu).pool.cudagraph_bytes == b200.cudagraph_bytes
    assert b200.cudagraph_bytes == memory.cudagraph_estimate(
        models.get("llama-3.1-8b"), 1024, 16384, blackwell=True, grid="split"
    )
    # gpt-oss's MXFP4 experts: FlashInfer's TRT-LLM kernels on 10.x, Marlin on 12.x, as on sm_100 and sm_120.
    m = models.get("gpt-oss-120b")
    assert mxfp4_padding_bytes(m, "sm_103", 1) == mxfp4_padding_bytes(m, "sm_100", 1) > 0
    assert mxfp4_padding_bytes(m, "sm_121", 1) == mxfp4_padding_bytes(m, "sm_120", 1) > 0
    assert mxfp4_padding_bytes(m, "gfx950", 1) > 0


def test_described_gpu_arch_outside_vllms_capabilities_is_refused() -> None:
    """A described GPU's `arch` is a compute capability vLLM 0.33.0 runs on (6.0 and up) with a family it has
    rules for (up to 12.x): `sm_10` is 1.0, not Blackwell's `sm_100`, which the MLA block-size and GLM-5 KV
    rules read by prefix would have taken it for while the CUDA-graph ceiling and the quantization floor read
    it as 1.0."""
    base = {"memory": "180GiB", "bandwidth": "8TB/s", "tflops": 2250}
    for arch, cc in (
        ("sm_10", "1.0"),
        ("sm_12", "1.2"),
        ("sm_52", "5.2"),
        ("sm_900", "90.0"),
        ("sm_089", "8.9"),
    ):
        with pytest.raises(InvalidArgumentError, match=rf"gpu: arch '{arch}' is compute capability {cc}: "):
            gpus.from_spec({**base, "arch": arch})
    for arch in ("sm_60", "sm_75", "sm_89", "sm_100", "sm_103", "sm_110", "sm_121", "gfx950"):
        assert gpus.from_spec({**base, "arch": arch}).arch == arch


def test_device_names_find_their_presets() -> None:
    """The preset a device name as torch prints it is (`kvsim.gpu.bytes.gpu_preset_for`, which names the
    roofline a calibration is compared with and the preset a device check sizes): it matched by substring in
    a short table, so an L40S or an L40 was the L4 (a third of its rate and bandwidth), an H100 PCIe the SXM
    part, an H200 NVL the SXM H200, and the A10, B200, B300, RTX and MI3xx presets were found for none."""
    cases = {
        "NVIDIA L40S": "l40s",
        "NVIDIA L40": "l40",
        "NVIDIA L4": "l4",
        "NVIDIA A10": "a10",
        "NVIDIA A10G": "a10g",
        "NVIDIA A100-SXM4-80GB": "a100-80gb",
        "NVIDIA A100 80GB PCIe": "a100-80gb",
        "NVIDIA A100-SXM4-40GB": "a100-40gb",
        "NVIDIA H100 80GB HBM3": "h100-80gb",
        "NVIDIA H100 PCIe": "h100-pcie",
        "NVIDIA H100 NVL": None,
        "NVIDIA H200": "h200",
        "NVIDIA H200 NVL": "h200-nvl",
        "NVIDIA H20": "h20",
        "NVIDIA B200": "b200",
        "NVIDIA GB200": "gb200",
        "NVIDIA B300 SXM6 AC": "b300",
        "NVIDIA GB300": "gb300",
        "NVIDIA GeForce RTX 2070": "rtx-2070",
        "NVIDIA GeForce RTX 4090": "rtx-4090",
        "NVIDIA RTX 6000 Ada Generation": "rtx-6000-ada",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000",
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": None,
        "AMD Instinct MI300X": "mi300x",
        "AMD Instinct MI350X": "mi350x",
        "Tesla T4": None,
    }
    assert {name: gpus.preset_for_device(name) for name in cases} == cases
    assert {p for p in cases.values() if p} <= set(gpus.names())


def test_the_host_link_is_the_hosts_and_geforce_tensor_rates_accumulate_in_fp32() -> None:
    """B200's PCIe Gen6 meets its DGX host's Gen5 CPUs (Xeon 8570): host memory at Gen5 x16's 64 GB/s each way,
    so a 2 MiB block of Llama-3-8B's KV takes ~33 us on the link, not ~16; the RTX 2070's dense rate is the
    Turing whitepaper's fp16-accumulate 59.7 TFLOPS halved for fp32 accumulate, as every other GeForce entry."""
    assert gpus.get("b200").pcie_bandwidth == 64e9
    assert gpus.get("b200").pcie_bandwidth == gpus.get("h100-80gb").pcie_bandwidth
    assert gpus.get("rtx-2070").peak_flops == pytest.approx(59.7e12 / 2, rel=0.002)
