"""The links a collective crosses (DESIGN.md §Time model, "The collectives' link"): the bandwidth a ring
collective over a group of GPUs runs at on each GPU, from the GPU's peer link (a switch, a bridge or a full
mesh of links), its host's PCIe and the network between hosts, and the words the `time:` line says it in.
The roofline (`kvsim.model.timing`) prices tensor parallelism's all-reduces and the MoE layers' all-gather
and reduce-scatter with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.model.gpus import Gpu


def peer_bandwidth(gpu: Gpu) -> float:
    """One direction of the GPU-to-GPU link (NVLink, Infinity Fabric; all of a mesh's links), else the host link
    (PCIe). A collective's bandwidth over a group of GPUs is `collective_link`'s."""
    return getattr(gpu, "peer_bandwidth", 0.0) or gpu.pcie_bandwidth


# The network between hosts (between NVLink domains), one direction a GPU: a 400 Gb/s NIC a GPU, 50 GB/s, as
# NVIDIA's DGX H100, DGX H200 and DGX B200 datasheets give (8 ConnectX-7 ports of 400 Gb/s for 8 GPUs) and as
# `pd_link_bandwidth`'s default takes it; a GPU's own `network_bandwidth` where it differs (B300 and GB300
# systems' 800 Gb/s ConnectX-8: `gpu_tables.NETWORK`; a GPU file's `network`).
NETWORK_BANDWIDTH = 50e9


@dataclass(frozen=True)
class CollectiveLink:
    """What a collective over `group` GPUs crosses: `bandwidth` one direction a GPU (bytes per second, before
    the `link` efficiency) and `how`, the words the time line says it in."""

    group: int
    bandwidth: float
    how: str
    hosts: int = 1


def _article(number: str) -> str:
    """`number` with its indefinite article as read aloud ("an 800", "a 400")."""
    return f"{'an' if number.startswith(('8', '11', '18')) else 'a'} {number}"


def _gbs(rate: float) -> str:
    return f"{rate / 1e9:g} GB/s"


def collective_link(gpu: Gpu, group: int) -> CollectiveLink:
    """The bandwidth a ring collective over `group` GPUs (tp's all-reduce, tp · dp's MoE all-gather and
    reduce-scatter) runs at on each GPU, one direction (DESIGN.md §Time model, "The collectives' link"):

    - within the peer link's domain (`Gpu.peer_domain`): a switched or bridged link (NVSwitch, an NVLink
      bridge: `peer_links` 0) gives every GPU its whole `peer_bandwidth` whatever the group; a full mesh of N
      links (AMD Instinct's Infinity Fabric) gives min(group − 1, N) links' worth, a GPU reaching its group's
      peers over one link each (tp 2 one link, tp 4 three, tp 8 all seven);
    - without a peer link, the host link (PCIe);
    - a group past the domain crosses the host's PCIe between domains (H200 NVL's bridges of 4 in a host of
      8), past the host (`Gpu.gpus_per_host`; an NVL72 domain's 72 GPUs past its 4-GPU trays are one NVLink
      domain still) the network between hosts (`Gpu.network_bandwidth` a GPU, else `NETWORK_BANDWIDTH`); NCCL runs a ring through each
      GPU's own NIC or host link, so a crossing carries the traffic over the domain's (host's) GPUs' links
      together: min(the domain's rate, its GPUs × the crossing's rate a GPU).
    """
    group = max(1, group)
    host = getattr(gpu, "gpus_per_host", 0) or 0
    domain = getattr(gpu, "peer_domain", 0) or 0
    links = getattr(gpu, "peer_links", 0) or 0
    peer = getattr(gpu, "peer_bandwidth", 0.0) or 0.0
    hosts = -(-group // host) if host else 1
    if not peer:
        rate = gpu.pcie_bandwidth
        how = (
            f"over PCIe at {_gbs(rate)} each way (no GPU-to-GPU link in {gpu.name}'s figures; a GPU spec's "
            "peer_link gives one)"
        )
        inner = group
    else:
        inner = min(group, domain) if domain else group
        if links:
            per = peer / links
            used = max(1, min(inner - 1, links))
            rate = used * per
            how = (
                f"over the GPU-to-GPU link at {_gbs(rate)} each way ({used} of its {links} mesh links of "
                f"{_gbs(per)}, one to each peer)"
            )
        else:
            rate = peer
            how = f"over the GPU-to-GPU link at {_gbs(rate)} each way"
    # Past the domain within a host: the host's PCIe between domains.
    if peer and domain and group > domain and (not host or domain < host):
        n = domain
        crossing = n * gpu.pcie_bandwidth
        joined = min(group, host) if host else group
        how += (
            f"; {joined} GPUs span {-(-joined // domain)} GPU-to-GPU domains of {domain}, joined by PCIe "
            f"({_gbs(gpu.pcie_bandwidth)} each way a GPU × {n} = {_gbs(crossing)})"
        )
        rate = min(rate, crossing)
    # Past the host (past the NVLink domain where it spans hosts, as an NVL72's).
    unit = max(host, domain) if peer else host
    if host and group > unit:
        n = unit
        net = getattr(gpu, "network_bandwidth", 0.0) or NETWORK_BANDWIDTH
        crossing = n * net
        how += (
            f"; the group spans {hosts} hosts of {host} GPUs"
            + (f" ({-(-group // unit)} GPU-to-GPU domains of {unit})" if unit > host else "")
            + f", joined by the network ({_article(f'{net * 8 / 1e9:g}')} Gb/s NIC a GPU, {_gbs(net)} each way, × {n} = "
            f"{_gbs(crossing)})"
        )
        rate = min(rate, crossing)
        how += f": priced at {_gbs(rate)} each way"
    elif host and group > host:
        how += f"; the group spans {hosts} hosts of {host} GPUs, all in one GPU-to-GPU domain of {domain}"
    elif peer and domain and group > domain:
        how += f": priced at {_gbs(rate)} each way"
    return CollectiveLink(group, rate, how, hosts)


def moe_gather_group(num_experts: int, tp: int, dp: int) -> int:
    """The GPUs a MoE layer's tokens are gathered over and scattered back from (the roofline's term and the
    time line's words both read it): tp x dp with DP ranks, under expert parallelism (its all-to-all:
    `FusedMoEParallelConfig.use_all2all_kernels` needs dp > 1) or without (vLLM's naive dispatch/combine,
    `MoERunner.do_naive_dispatch_combine`, dp > 1); 1 otherwise: at dp 1 every TP rank holds every token
    already, its experts' partial outputs summed by the TP all-reduce the layer has anyway (expert
    parallelism at dp 1 moves nothing more)."""
    return tp * dp if num_experts and dp > 1 else 1
