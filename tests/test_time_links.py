"""The roofline's collectives and the links they cross (DESIGN.md §Time model): tensor parallelism's
all-reduces on the GPU-to-GPU link (NVLink, Infinity Fabric, PCIe), a group past the host on the network,
data-parallel MoE collectives, and a GPU file's topology and peer link."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model.timing import roofline_time_model

PS = 1e12


def test_tensor_parallel_time_line_names_the_link_its_all_reduces_take():
    """The roofline prices tp's all-reduces on the GPU-to-GPU link where the GPU's figures have one, else on
    PCIe (`collectives.peer_bandwidth`); the time line says which, so a GPU priced over PCIe is not a surprise.
    The MI350 series' 7 Infinity Fabric links (537.6 GB/s each way) make its tp-8 steps faster than the
    MI300X's (448 GB/s, less compute), where over PCIe they were slower."""
    line = kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", tensor_parallel_size=2).time_line()
    assert "tp 2's all-reduces over the GPU-to-GPU link at 450 GB/s each way" in line
    line = kvsim.SimConfig(model="llama-3.1-8b", gpu="l40", tensor_parallel_size=2).time_line()
    assert (
        "tp 2's all-reduces over PCIe peer-to-peer at 32 GB/s each way (no GPU-to-GPU link in l40's figures"
        in line
    )
    assert "all-reduces" not in kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb").time_line()

    def step(gpu: str) -> tuple[int, int]:
        rt = kvsim.SimConfig(model="llama-3.1-70b", gpu=gpu, tensor_parallel_size=8).roofline
        return rt.step_ps([(1024, 1)] * 64), rt.step_ps([(2048, 2048)])

    mi300x, mi355x, mi350x = step("mi300x"), step("mi355x"), step("mi350x")
    for mi35x in (mi355x, mi350x):
        assert mi35x[0] < mi300x[0]  # a decode step
        assert mi35x[1] < mi300x[1]  # a prefill chunk
    assert mi355x[1] <= mi350x[1]  # (the same links, more compute)


@pytest.mark.parametrize(
    ("gpu", "per_link"), [("mi300x", 64e9), ("mi325x", 64e9), ("mi350x", 76.8e9), ("mi355x", 76.8e9)]
)
def test_an_infinity_fabric_mesh_gives_a_collective_one_link_a_peer(gpu: str, per_link: float) -> None:
    """AMD Instinct's 8-GPU platforms are a full mesh of 7 Infinity Fabric links a GPU, one to each peer
    (`Gpu.peer_links`): tp 2 crosses one link, tp 4 three (each GPU reaches its 3 peers directly), tp 8 all
    seven, not the 7 links' sum at any tp; the all-reduce term and the time line both use that figure."""
    from kvsim.model.collectives import collective_link

    g = kvsim.gpus.get(gpu)
    assert (g.peer_links, g.peer_domain, g.gpus_per_host) == (7, 8, 8)
    assert g.peer_bandwidth == pytest.approx(7 * per_link)
    m = kvsim.models.get("llama-3.1-70b")
    for tp, links in ((2, 1), (4, 3), (8, 7)):
        assert collective_link(g, tp).bandwidth == pytest.approx(links * per_link)
        rt = roofline_time_model(m, g, tensor_parallel_size=tp)
        used = (
            2
            * m.num_layers
            * (2 * (tp - 1) / tp)
            * m.hidden_size
            * 2
            / {t.name: t.ps for t in rt.terms}["tp_allreduce_tok"]
            * PS
        )
        assert used == pytest.approx(links * per_link, rel=1e-9)
        line = kvsim.SimConfig(model="llama-3.1-8b", gpu=gpu, tensor_parallel_size=tp).time_line()
        assert (
            f"tp {tp}'s all-reduces over the GPU-to-GPU link at {links * per_link / 1e9:g} GB/s each way"
            in line
        )
        assert f"({links} of its 7 mesh links of {per_link / 1e9:g} GB/s" in line


@pytest.mark.parametrize("gpu", ["h100-80gb", "h200", "b200", "gb200"])
def test_a_switched_nvlink_gives_every_group_the_whole_link(gpu: str) -> None:
    """NVSwitch gives each GPU its whole NVLink bandwidth to any peer: tp 2, 4 and 8 price alike (GB200's
    NVL72 domain: up to 72, across its 4-GPU compute trays)."""
    from kvsim.model.collectives import collective_link

    g = kvsim.gpus.get(gpu)
    assert g.peer_links == 0
    groups = (2, 4, 8, 16, 72) if gpu == "gb200" else (2, 4, 8)
    assert {collective_link(g, n).bandwidth for n in groups} == {g.peer_bandwidth}
    m = kvsim.models.get("llama-3.1-70b")
    rates = {
        tp: 2
        * m.num_layers
        * (2 * (tp - 1) / tp)
        * m.hidden_size
        * 2
        * PS
        / {t.name: t.ps for t in roofline_time_model(m, g, tensor_parallel_size=tp).terms}["tp_allreduce_tok"]
        for tp in (2, 4, 8)
    }
    assert rates == pytest.approx(dict.fromkeys((2, 4, 8), g.peer_bandwidth), rel=1e-9)


def test_a_group_past_the_host_crosses_the_network_and_the_time_line_says_so():
    """An HGX H200 host holds 8 GPUs: tp 16's ring crosses the network between two hosts, a 400 Gb/s NIC a GPU
    (`NETWORK_BANDWIDTH`, 50 GB/s each way) on each of a host's 8 GPUs, 400 GB/s below NVLink's 450; the
    MI355X's mesh at tp 64 the same. H200 NVL's bridge joins 4: tp 8 crosses PCIe between bridges (4 x 64
    GB/s). GB200's 4-GPU trays are one NVLink domain of 72: tp 8 stays on NVLink, and the line says the
    group spans 2 hosts."""
    from kvsim.model.collectives import NETWORK_BANDWIDTH, collective_link

    assert NETWORK_BANDWIDTH == 50e9
    h200 = kvsim.gpus.get("h200")
    assert collective_link(h200, 8).bandwidth == 450e9
    assert collective_link(h200, 16).bandwidth == collective_link(h200, 32).bandwidth == 400e9
    assert collective_link(kvsim.gpus.get("mi355x"), 64).bandwidth == 400e9
    assert collective_link(kvsim.gpus.get("h200-nvl"), 4).bandwidth == 450e9
    assert collective_link(kvsim.gpus.get("h200-nvl"), 8).bandwidth == 256e9
    gb200 = kvsim.gpus.get("gb200")
    assert collective_link(gb200, 72).bandwidth == 900e9
    assert collective_link(gb200, 144).bandwidth == 900e9  # (72 GPUs' NICs: 3.6 TB/s, above NVLink)
    line = kvsim.SimConfig(model="llama-3.1-70b", gpu="h200", tensor_parallel_size=16).time_line()
    assert (
        "tp 16's all-reduces over the GPU-to-GPU link at 450 GB/s each way; the group spans 2 hosts of 8"
        in line
    )
    assert "the network (a 400 Gb/s NIC a GPU, 50 GB/s each way, × 8 = 400 GB/s): priced at 400 GB/s" in line
    line = kvsim.SimConfig(model="llama-3.1-70b", gpu="gb200", tensor_parallel_size=8).time_line()
    assert "900 GB/s each way; the group spans 2 hosts of 4 GPUs, all in one GPU-to-GPU domain of 72" in line
    m = kvsim.models.get("llama-3.1-70b")
    t8, t16 = (
        {t.name: t.ps for t in roofline_time_model(m, h200, tensor_parallel_size=tp).terms}[
            "tp_allreduce_tok"
        ]
        for tp in (8, 16)
    )
    assert t16 == pytest.approx(2 * m.num_layers * (30 / 16) * m.hidden_size * 2 / 400e9 * PS, rel=1e-9)
    assert t8 == pytest.approx(2 * m.num_layers * (14 / 8) * m.hidden_size * 2 / 450e9 * PS, rel=1e-9)


def test_a_gpus_own_network_prices_the_crossing():
    """Blackwell Ultra systems ship an 800 Gb/s ConnectX-8 a GPU (the DGX B300 datasheet; GB300 NVL72):
    B300's tp 16 crosses two hosts at 8 x 100 GB/s, where an H200's 400 Gb/s NICs give 8 x 50; a GPU file's
    `network` sets it (a wrong value is refused naming the key); GB300's NVLink domain of 72 needs no NIC
    below 73 GPUs."""
    from kvsim.model.collectives import collective_link
    from kvsim.model.gpus import from_spec

    b300 = kvsim.gpus.get("b300")
    assert b300.network_bandwidth == 100e9
    assert collective_link(b300, 16).bandwidth == 800e9
    assert (
        "the network (an 800 Gb/s NIC a GPU, 100 GB/s each way, × 8 = 800 GB/s)"
        in collective_link(b300, 16).how
    )
    assert collective_link(kvsim.gpus.get("gb300"), 72).bandwidth == kvsim.gpus.get("gb300").peer_bandwidth
    h200 = kvsim.gpus.get("h200")
    slow = from_spec({"network": "25GB/s"}, "gpu file x.toml", base=h200)
    assert collective_link(slow, 16).bandwidth == 8 * 25e9
    assert "(a 200 Gb/s NIC a GPU, 25 GB/s each way" in collective_link(slow, 16).how
    with pytest.raises(kvsim.InvalidArgumentError, match=r"gpu file x\.toml: network"):
        from_spec({"network": "fast"}, "gpu file x.toml", base=h200)


def test_the_time_line_names_the_link_of_data_parallel_moe_collectives():
    """With DP ranks a MoE model's all-gather and reduce-scatter cross the DP group's link, at dp > 1 even at
    tp 1: the time line names it (PCIe on an H100 PCIe; one Infinity Fabric link at dp 2 on an MI355X, the
    term priced at it)."""
    from kvsim.model.collectives import collective_link

    line = kvsim.SimConfig(model="gpt-oss-120b", gpu="h100-pcie", data_parallel_size=4).time_line()
    assert (
        "the MoE layers' all-gather and reduce-scatter over the DP group's 4 GPUs over PCIe peer-to-peer at 64 GB/s each way"
        in line
    )
    assert "all-reduces" not in line
    line = kvsim.SimConfig(model="gpt-oss-120b", gpu="mi355x", data_parallel_size=2).time_line()
    assert (
        "over the DP group's 2 GPUs over the GPU-to-GPU link at 76.8 GB/s each way (1 of its 7 mesh links"
        in line
    )
    m, g = kvsim.models.get("gpt-oss-120b"), kvsim.gpus.get("mi355x")
    rt = roofline_time_model(m, g, data_parallel_size=2)
    moe = {t.name: t.ps for t in rt.terms}["ep_gather_scatter_tok"]
    layers = m.num_layers  # (every gpt-oss layer is MoE)
    assert moe == pytest.approx(2 * layers * 1 * m.hidden_size * 2 / collective_link(g, 2).bandwidth * PS)


def test_a_gpu_file_describes_its_topology(tmp_path):
    """`peer_links`, `peer_domain` and `gpus_per_host` in a GPU file; a preset's carry over; bad values are
    refused naming the key."""
    from kvsim.model.collectives import collective_link

    path = tmp_path / "mesh.toml"
    path.write_text('preset = "h100-80gb"\npeer_links = 3\npeer_link = "300GB/s"\n')
    g = kvsim.gpus.resolve(str(path))
    assert (g.peer_links, g.peer_domain, g.gpus_per_host) == (3, 8, 8)
    assert collective_link(g, 2).bandwidth == 100e9
    assert collective_link(g, 8).bandwidth == 300e9
    with pytest.raises(InvalidArgumentError, match="gpus_per_host -1 must be a whole number"):
        kvsim.gpus.from_spec({"memory": "48GiB", "bandwidth": "864GB/s", "tflops": 362, "gpus_per_host": -1})


def test_a_gpu_file_names_its_peer_link(tmp_path):
    """`peer_link` in a GPU file is the link the collectives cross (without it, the host link)."""
    from kvsim.model.gpus import from_file

    path = tmp_path / "pcie.toml"
    path.write_text('preset = "h100-80gb"\nname = "h100-pcie-peer"\npeer_link = "32GB/s"\n')
    slow = from_file(path)
    assert slow.peer_bandwidth == 32e9
    m = kvsim.models.get("qwen3-32b")
    fast, pcie = (
        roofline_time_model(m, g, tensor_parallel_size=2) for g in (kvsim.gpus.get("h100-80gb"), slow)
    )
    per = {
        g: {t.name: t.ps for t in r.terms}["tp_allreduce_tok"] for g, r in (("fast", fast), ("pcie", pcie))
    }
    assert per["pcie"] == pytest.approx(per["fast"] * 450 / 32)
    with pytest.raises(InvalidArgumentError, match="peer_link 'fast' is not a bandwidth"):
        kvsim.model.gpus.from_spec(
            {"memory": "48GiB", "bandwidth": "864GB/s", "tflops": 362, "peer_link": "fast"}
        )
