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


def collective_link(gpu: Gpu, group: int, stride: int = 1) -> CollectiveLink:
    """The bandwidth a ring collective over `group` GPUs (tp's all-reduce, the MoE layers' all-gather and
    reduce-scatter over the EP group's tp · dp GPUs or the DP group's dp) runs at on each GPU, one direction
    (DESIGN.md §Time model, "The collectives' link"). The group's GPUs are `stride` apart (vLLM's DP group:
    one GPU of each DP rank, tp apart; every other group here is contiguous, stride 1), so it spans
    `group · stride` GPUs and holds `domain / stride` of a domain's (a host's) GPUs:

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
    stride = max(1, stride)
    span = group * stride  # (the GPUs from the group's first to its last, the contiguous block it lies in)
    host = getattr(gpu, "gpus_per_host", 0) or 0
    domain = getattr(gpu, "peer_domain", 0) or 0
    links = getattr(gpu, "peer_links", 0) or 0
    peer = getattr(gpu, "peer_bandwidth", 0.0) or 0.0
    hosts = -(-span // host) if host else 1

    def members(gpus: int) -> int:
        """The group's GPUs among `gpus` consecutive ones (a domain, a host): one in every `stride`."""
        return max(1, min(group, -(-gpus // stride)))

    if not peer:
        rate = gpu.pcie_bandwidth
        how = (
            f"over PCIe at {_gbs(rate)} each way (no GPU-to-GPU link in {gpu.name}'s figures; a GPU spec's "
            "peer_link gives one)"
        )
        inner = group
    else:
        inner = members(domain) if domain else group
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
    if peer and domain and span > domain and (not host or domain < host):
        n = members(domain)
        crossing = n * gpu.pcie_bandwidth
        joined = min(span, host) if host else span
        how += (
            f"; {joined} GPUs span {-(-joined // domain)} GPU-to-GPU domains of {domain}, joined by PCIe "
            f"({_gbs(gpu.pcie_bandwidth)} each way a GPU × {n} = {_gbs(crossing)})"
        )
        rate = min(rate, crossing)
    # Past the host (past the NVLink domain where it spans hosts, as an NVL72's).
    unit = max(host, domain) if peer else host
    if host and span > unit:
        n = members(unit)
        net = getattr(gpu, "network_bandwidth", 0.0) or NETWORK_BANDWIDTH
        crossing = n * net
        how += (
            f"; the group spans {hosts} hosts of {host} GPUs"
            + (f" ({-(-span // unit)} GPU-to-GPU domains of {unit})" if unit > host else "")
            + (f", {n} of its GPUs in each" if n < unit else "")
            + f", joined by the network ({_article(f'{net * 8 / 1e9:g}')} Gb/s NIC a GPU, {_gbs(net)} each way, × {n} = "
            f"{_gbs(crossing)})"
        )
        rate = min(rate, crossing)
        how += f": priced at {_gbs(rate)} each way"
    elif host and span > host:
        how += f"; the group spans {hosts} hosts of {host} GPUs, all in one GPU-to-GPU domain of {domain}"
    elif peer and domain and span > domain:
        how += f": priced at {_gbs(rate)} each way"
    return CollectiveLink(group, rate, how, hosts)


# vLLM's model files whose decoder layer runs the sequence-parallel MoE layer by layer (the attention's output
# reduce-scattered over TP in place of its all-reduce, the next layer's input all-gathered: vLLM 0.33.0's
# `DeepseekV2DecoderLayer.forward`, `model_executor/models/deepseek_v2.py`), by the config's `model_type`:
# DeepSeek-V2 / V3 (Kimi-K2's config says deepseek_v3), DeepSeek-V3.2 and GLM-5, all served by that file.
DECODER_LAYER_SP = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa"})


@dataclass(frozen=True)
class MoeCollectives:
    """The collectives a step's layers run under tp and dp (DESIGN.md §Time model, "Under expert parallelism";
    vLLM 0.33.0, the release the time model follows; the EP and DP groups of `vllm/distributed/parallel_state.py`):

    - `gather`, `stride`: the group the MoE layers' tokens are all-gathered over and reduce-scattered back
      from, its GPUs `stride` apart (`collective_link`'s); 1 where nothing is gathered (dp 1: every TP rank
      holds every token already).
    - `gather_share`: the hidden states each of those rings moves through a GPU's link per token of its DP
      rank's batch, as a fraction (numerator, denominator): the group's other members' tokens.
    - `tp_units`, `tp_rings`: tensor parallelism's collectives over the step's layers, per token: `tp_units`
      times `(tp − 1)/tp` hidden states through a GPU's link (an all-reduce is 2, an all-gather or a
      reduce-scatter 1) and `tp_rings` ring collectives of `tp − 1` steps each (an all-reduce 2).
    - `sequence_parallel`: vLLM's sequence-parallel MoE (`ParallelConfig.use_sequence_parallel_moe`).
    """

    gather: int
    stride: int
    gather_share: tuple[int, int]
    tp_units: int
    tp_rings: int
    sequence_parallel: bool
    decoder_layer_sp: bool = False


def moe_collectives(
    model: object, tp: int, dp: int, expert_parallel: bool, moe_flags: tuple[bool, ...]
) -> MoeCollectives:
    """What a step's collectives move (`MoeCollectives`) for `model` (its `num_experts`, `num_layers` and
    `model_type`) at `tp` x `dp`, with or without expert parallelism, `moe_flags` its layers holding routed
    experts. vLLM 0.33.0 (DESIGN.md §Time model, "Under expert parallelism"):

    - tp > 1 at dp 1 (expert parallelism or not): no gather; every layer's attention (or mixer) all-reduces
      its output over TP, and so does its MLP or MoE layer (`MoERunner._maybe_reduce_final_output`: the
      experts' partial sums, whole experts under EP or a tp-th of each without): 2 all-reduces a layer.
    - dp > 1 without sequence parallelism (no expert parallelism, or tp 1): the default all-to-all
      (`AgRsAll2AllManager`, `device_communicators/all2all.py`) all-gathers each DP rank's tokens over the
      DP group (`_get_comm_group`: `get_dp_group()`, one GPU of each DP rank, tp apart) and reduce-scatters
      the outputs back: `dp − 1` other ranks' hidden states per own token, over `dp` GPUs `tp` apart; the
      TP all-reduces stay 2 a layer.
    - expert parallelism with tp > 1 and dp > 1: sequence-parallel MoE. Each TP rank takes a tp-th of its DP
      rank's tokens (`sequence_parallel_chunk`; `DPMetadata.sp_local_sizes`, `ceil(n / tp)` a GPU) and the
      all-gather and reduce-scatter run over the EP group, all `tp · dp` GPUs (`get_ep_group()`): `(tp · dp −
      1) / tp` hidden states per own token. The runner's TP all-reduce is skipped (`is_sequence_parallel`);
      the model puts the tokens back together: DeepSeek's decoder layer (`DECODER_LAYER_SP`) reduce-scatters
      the attention's output over TP in place of its all-reduce and all-gathers the next layer's input (the
      hidden state, or hidden state and residual, 2 hidden widths, before a layer that is not one and at the
      model's end), so a MoE layer moves one all-reduce's worth; the other model files (`Qwen3MoeSparseMoeBlock`,
      `Qwen3NextSparseMoeBlock` and the like) keep the attention's all-reduce and all-gather the MoE block's
      output over TP: an all-reduce and an all-gather a MoE layer.
    """
    num_experts = getattr(model, "num_experts", 0)
    layers = len(moe_flags)
    sp = bool(num_experts) and expert_parallel and tp > 1 and dp > 1
    if not num_experts or dp == 1:
        gather, stride, share = 1, 1, (0, 1)
    elif sp:
        gather, stride, share = tp * dp, 1, (tp * dp - 1, tp)
    else:
        gather, stride, share = dp, tp, (dp - 1, 1)
    if not sp:
        return MoeCollectives(gather, stride, share, 4 * layers, 4 * layers, False)
    decoder_sp = getattr(model, "model_type", "") in DECODER_LAYER_SP
    if not decoder_sp:
        # A MoE layer: the attention's all-reduce (2) and the MoE block's all-gather (1); a layer without
        # routed experts its two all-reduces.
        units = rings = sum(3 if moe else 4 for moe in moe_flags)
        return MoeCollectives(gather, stride, share, units, rings, True)
    units = rings = 0
    for i, moe in enumerate(moe_flags):
        if i and moe_flags[i - 1]:
            # The previous layer left its output sharded over TP: all-gathered after this layer's input
            # norm (the hidden state) before a MoE layer, before the layer (hidden state and residual, 2
            # widths: `DeepseekV2Model.forward`) otherwise.
            units, rings = units + (1 if moe else 2), rings + 1
        # A MoE layer: the attention's output reduce-scattered (1); another layer its two all-reduces.
        units, rings = (units + 1, rings + 1) if moe else (units + 4, rings + 4)
    if moe_flags and moe_flags[-1]:
        units, rings = units + 2, rings + 1  # (the model's end: hidden state and residual gathered)
    return MoeCollectives(gather, stride, share, units, rings, True, decoder_sp)
