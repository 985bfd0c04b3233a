"""The links a collective crosses (DESIGN.md §Time model, "The collectives' link"): the bandwidth a ring
collective over a group of GPUs runs at on each GPU, from the GPU's peer link (a switch, a bridge or a full
mesh of links), its host's PCIe and the network between hosts, and the words the `time:` line says it in.
The roofline (`kvsim.model.timing`) prices tensor parallelism's all-reduces and the MoE layers' all-gather
and reduce-scatter with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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

# A collective between GPUs that cross PCIe without peer-to-peer (`Gpu.pcie_p2p` False: GeForce cards, or a host
# whose IOMMU, ACS, VM or driver blocks it; `SimConfig.pcie_p2p`): NCCL's SHM transport stages it through host
# memory (vLLM's custom all-reduce, which needs P2P, stays off). Priced from published figures, none fitted to
# kvsim's validation runs (DESIGN.md §Time model, "The collectives' link"):
#
# - bandwidth: a quarter of the host link's, one direction. NVIDIA/nccl#384 measured 2 GPUs' SHM all-reduce
#   (`NCCL_P2P_DISABLE=1`) at a bus bandwidth of 3.9 GB/s on PCIe 3.0 x16 (~16 GB/s each way: 0.24 of it), the
#   maintainer explaining that each byte goes into host memory and out again, both directions of the host link
#   at once, so host traffic is the bottleneck. The same order elsewhere: P2P-disabled copies between two A40s
#   at 19-21 GB/s both directions together on PCIe 4.0 (NVIDIA/nccl-tests#74, ~0.3 of one direction's 32 GB/s)
#   and between RTX 4090s at 20-22 GB/s one way (NVIDIA/nccl#814, copies, not an all-reduce: an upper bound);
#   8 RTX 5090s' all-reduce of 1-8 GB messages over many channels at 28 GB/s on PCIe 5.0 (NVIDIA/nccl#1639,
#   0.44), the most a large message reaches. The quarter is the one 2-GPU all-reduce measured.
# - latency: 14 µs a collective beside its ring steps' hops (`roofline.COLLECTIVE_HOP_PS`): a GPU-to-GPU copy
#   with P2P disabled takes ~14 µs on RTX PRO 6000s against 0.4 µs with it (voipmonitor/rtx6kpro
#   hardware/pcie-bandwidth.md, "P2P Disabled ~14 us", CUDA's p2pBandwidthLatencyTest). It is charged once a
#   collective (an all-reduce, an all-gather, a reduce-scatter), not once a ring step: NCCL pipelines a
#   collective's steps through its host buffers, and its small-message ring on 8 PCIe GeForce RTX 4090s
#   (host-staged on a stock driver; the thread does not say which) took 42.6 µs for 14 steps (NVIDIA/nccl#1530),
#   ~3 µs a step, the hop, where 14 µs a step would give ~200 µs.
HOST_STAGED_SHARE = 4
HOST_STAGED_LATENCY_PS = 14_000_000


@dataclass(frozen=True)
class CollectiveLink:
    """What a collective over `group` GPUs crosses: `bandwidth` one direction a GPU (bytes per second, before
    the `link` efficiency), `how`, the words the time line says it in, and `latency_ps`, what each collective
    over it adds beside its ring steps' hops (picoseconds: host staging's `HOST_STAGED_LATENCY_PS` where it
    crosses PCIe without peer-to-peer, else 0). `pcie`: whether it crosses PCIe between GPUs (no peer link,
    or between peer domains), the only links `pcie_p2p` changes."""

    group: int
    bandwidth: float
    how: str
    hosts: int = 1
    latency_ps: int = 0
    pcie: bool = False


def pcie_p2p_of(gpu: Gpu, pcie_p2p: bool | None = None) -> bool:
    """Whether collectives crossing PCIe between `gpu`s go peer-to-peer: `pcie_p2p` where given (a host's
    `SimConfig.pcie_p2p`), else the GPU's own `Gpu.pcie_p2p`, its None (not known: a GPU described without
    it) taken as True, as a datacenter card's (`collective_link`'s time line then says it is assumed)."""
    if pcie_p2p is not None:
        return pcie_p2p
    return getattr(gpu, "pcie_p2p", None) is not False


def _article(number: str) -> str:
    """`number` with its indefinite article as read aloud ("an 800", "a 400")."""
    return f"{'an' if number.startswith(('8', '11', '18')) else 'a'} {number}"


def _gbs(rate: float) -> str:
    return f"{rate / 1e9:g} GB/s"


def collective_link(gpu: Gpu, group: int, stride: int = 1, pcie_p2p: bool | None = None) -> CollectiveLink:
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

    PCIe between GPUs (no peer link, or between domains) is peer-to-peer when `pcie_p2p` (None: the GPU's own,
    `Gpu.pcie_p2p`, False on GeForce cards, not known on a GPU described without it: taken as True and said
    to be assumed; `pcie_p2p_of`); without it NCCL stages through host memory: a quarter of the
    host link's rate and `HOST_STAGED_LATENCY_PS` a collective (`HOST_STAGED_SHARE`). Over a peer link the
    flag changes nothing.
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

    p2p = pcie_p2p_of(gpu, pcie_p2p)
    # (the GPU's P2P not known, none given: taken as P2P, and the time line says it is assumed)
    assumed = (
        "; peer-to-peer assumed for a described GPU (--no-pcie-p2p, or pcie_p2p = false in its file, if it "
        "has none)"
        if pcie_p2p is None and getattr(gpu, "pcie_p2p", None) is None
        else ""
    )
    from kvsim.model.gpu_tables import NO_PCIE_P2P

    # (a described GPU's off is its description's, or its base preset's: not said to be a GeForce card's)
    why = (
        "pcie_p2p off"
        if pcie_p2p is not None
        else "NVIDIA disables it on GeForce cards"
        if gpu.name in NO_PCIE_P2P
        else f"off in {gpu.name}'s figures, pcie_p2p false"
    )
    # (one direction of the host link between GPUs: peer-to-peer, or staged through host memory)
    pcie_rate = gpu.pcie_bandwidth if p2p else gpu.pcie_bandwidth / HOST_STAGED_SHARE
    latency = 0
    crosses_pcie = False
    if not peer:
        rate = pcie_rate
        crosses_pcie = group > 1
        if p2p:
            how = (
                f"over PCIe peer-to-peer at {_gbs(rate)} each way (no GPU-to-GPU link in {gpu.name}'s figures; "
                "a GPU spec's peer_link gives one)" + assumed
            )
        else:
            latency = HOST_STAGED_LATENCY_PS if crosses_pcie else 0
            how = (
                f"staged through host memory over PCIe, no peer-to-peer ({why}): a quarter of PCIe's "
                f"{_gbs(gpu.pcie_bandwidth)} each way, {_gbs(rate)}, and {HOST_STAGED_LATENCY_PS / 1e6:g} µs a "
                f"collective (no GPU-to-GPU link in {gpu.name}'s figures; a GPU spec's peer_link gives one)"
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
        crossing = n * pcie_rate
        joined = min(span, host) if host else span
        crosses_pcie = True
        if p2p:
            how += (
                f"; {joined} GPUs span {-(-joined // domain)} GPU-to-GPU domains of {domain}, joined by PCIe "
                f"peer-to-peer ({_gbs(pcie_rate)} each way a GPU × {n} = {_gbs(crossing)})" + assumed
            )
        else:
            latency = HOST_STAGED_LATENCY_PS
            how += (
                f"; {joined} GPUs span {-(-joined // domain)} GPU-to-GPU domains of {domain}, joined by PCIe "
                f"staged through host memory, no peer-to-peer ({why}: a quarter of PCIe's "
                f"{_gbs(gpu.pcie_bandwidth)}, {_gbs(pcie_rate)} each way a GPU × {n} = {_gbs(crossing)}, and "
                f"{HOST_STAGED_LATENCY_PS / 1e6:g} µs a collective)"
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
    return CollectiveLink(group, rate, how, hosts, latency, crosses_pcie)


# The `model_type`s vLLM 0.33.0 serves with `deepseek_v2.py` (its `DeepseekV2ForCausalLM` and
# `DeepseekV3ForCausalLM`, which a config's `architectures` names): DeepSeek-V2 and V3, and Moonshot's Kimi-K2,
# whose config.json says `"model_type": "kimi_k2"` with `"architectures": ["DeepseekV3ForCausalLM"]`
# (moonshotai/Kimi-K2-Instruct). One home for the list: the collectives' and the whole groups' tables below,
# and `kvsim.model.shard`'s MLA rules.
DEEPSEEK_V2_FILE = ("deepseek_v2", "deepseek_v3", "kimi_k2")


# How the model file vLLM 0.33.0 serves a `model_type` with on CUDA takes part in the sequence-parallel MoE
# (`ParallelConfig.use_sequence_parallel_moe`, `config/parallel.py` L767-785: the default
# `allgather_reducescatter` all-to-all, expert parallelism, tp > 1 and dp > 1). A model opts in per MoE layer
# (`FusedMoEFactory(is_sequence_parallel=...)`, False by default: `model_executor/layers/fused_moe/layer.py`
# L123, L59); a `model_type` not listed here does not (Mixtral, Qwen2-MoE, PhiMoE, OLMoE, Jamba, GLM-4.5,
# MiniMax-M2 and M3, Gemma 4, Granite-4.0-H: their `FusedMoEFactory` takes no `is_sequence_parallel`), and
# its MoE layers run the non-sequence-parallel path whatever the flags: the gather over the DP group and the
# runner's TP all-reduce (`device_communicators/all2all.py` L64-74 `_get_comm_group`,
# `fused_moe/runner/moe_runner.py` L509-515 `_maybe_reduce_final_output`). The patterns (`moe_collectives`):
#
# - `BLOCK`: the MoE block chunks its tokens over TP, runs its experts on a tp-th of them and all-gathers
#   their output over TP (`sequence_parallel_chunk`, `tensor_model_parallel_all_gather`); the layer's
#   other all-reduces (the attention's) stay.
# - `DEEPSEEK`: DeepSeek's decoder layer, on its MoE layers only: the attention's output reduce-scattered
#   over TP in place of its all-reduce, the next layer's input all-gathered after its norm (hidden state),
#   before a layer without experts and at the model's end hidden state and residual (2 widths).
# - `EVERY_LAYER`: the model shards its embedding over TP and every layer, dense or MoE, all-gathers its input
#   after the input norm and reduce-scatters the attention's (mixer's) output; the dense MLPs and shared
#   experts run replicated on the shard with no collective; at the end one all-gather of the final stream.
BLOCK, DEEPSEEK, EVERY_LAYER = "block", "deepseek", "every-layer"
SEQUENCE_PARALLEL_MOE: dict[str, str] = {
    # `model_executor/models/qwen3_moe.py` Qwen3MoeSparseMoeBlock L152, L215, `forward` L219-241
    "qwen3_moe": BLOCK,
    # Qwen3-VL-MoE's language model: Qwen3MoeDecoderLayer and its block (`qwen3_vl_moe.py` L47-52, L71)
    "qwen3_vl_moe": BLOCK,
    "qwen3_vl_moe_text": BLOCK,
    # `gpt_oss.py` MLPBlock L372-375 (not under LoRA, which kvsim does not model), `forward` L405-421
    "gpt_oss": BLOCK,
    # `llama4.py` Llama4MoE L95, L143, `forward` L148-164 (its dense layers: a plain MLP, 2 all-reduces)
    "llama4": BLOCK,
    "llama4_text": BLOCK,
    # `nemotron_h.py` NemotronHMoE L157, L247, `forward` L255-276 (the `E` blocks; the others one all-reduce)
    "nemotron_h": BLOCK,
    # `granitemoe.py` GraniteMoeDecoderLayer L271, GraniteMoeMoE.forward L118-137
    "granitemoe": BLOCK,
    # `mimo_v2.py` MiMoV2MoE L136, L184, `forward` L192-215
    "mimo_v2_flash": BLOCK,
    # `deepseek_v2.py` DeepseekV2DecoderLayer L1300-1304 (use_sequence_parallel_moe, pp 1, a MoE layer),
    # o_proj L1325, `forward` L1352-1423; DeepseekV2Model.forward L1550-1560, L1578-1585 (every type vLLM
    # serves with that file: `DEEPSEEK_V2_FILE`)
    **dict.fromkeys(DEEPSEEK_V2_FILE, DEEPSEEK),
    # DeepSeek-V3.2 and GLM-5 on CUDA: `models/deepseek_v32/nvidia/model.py` (registry.py L95-98, L126;
    # `deepseek_v2.py` serves them on XPU and CPU only): DeepseekV32DecoderLayer L78-81 (every layer),
    # `forward` L122-166 (all-gather L147-148, reduce-scatter L152-153), the dense MLP replicated L107-115;
    # DeepseekV32Model's embedding shard L273-281, the end's all-gather of the hidden state L304-317
    "deepseek_v32": EVERY_LAYER,
    "glm_moe_dsa": EVERY_LAYER,
    # `models/deepseek_v4/nvidia/model.py` `_use_sequence_parallel` L571-582, DeepseekV4DecoderLayer L597,
    # L606-607, `forward` L779-784; the model's shard L970-977, the end's all-gather of its `hc_mult` streams
    # L1021-1034 (`_END_STREAMS`)
    "deepseek_v4": EVERY_LAYER,
    # `qwen3_next.py` `_should_use_sequence_parallel` L87-97 (no `mlp_only_layers`, `decoder_sparse_step` 1,
    # else the MoE block's own chunk and all-gather, L257-276: `BLOCK`), Qwen3NextDecoderLayer L496-515,
    # `forward` L558-611; Qwen3NextModel.forward L716-719, L740-751
    "qwen3_next": EVERY_LAYER,
    # `qwen3_5.py` Qwen3_5DecoderLayer L142-147, L155, L164 (every layer of the MoE model), Qwen3NextModel's
    # forward inherited
    "qwen3_5_moe": EVERY_LAYER,
    "qwen3_5_moe_text": EVERY_LAYER,
    # Kimi-Linear and Kimi-K3 (registry.py L148-151, L488-491): `models/kimi_k3/nvidia/model.py`
    # KimiDecoderLayer L709-714, o_proj L764-765, `forward` L897-931 (all-gather L911-915, reduce-scatter
    # L921-923; layer 0's dense KimiMLP replicated, L239, L256); KimiLinearModel.forward L1133-1140,
    # L1224-1237
    "kimi_linear": EVERY_LAYER,
}

# Where vLLM 0.33.0 serves a `model_type` with another file on ROCm (AMD's gfx GPUs: `Gpu.arch`), its pattern
# there, replacing `SEQUENCE_PARALLEL_MOE`'s: DeepSeek-V4 (`models/deepseek_v4/__init__.py` L17-18 →
# `models/deepseek_v4/amd/model.py`, FusedMoEFactory from L749 without `is_sequence_parallel`) and Kimi-Linear /
# K3 (`models/kimi_k3/__init__.py` L26-29 → `amd/linear.py`, FusedMoEFactory L327-348 without it; K3's
# `amd/model.py` L49 wraps it) do not opt in. (DeepSeek-V3.2 and GLM-5's `models/deepseek_v32/amd/model.py`,
# the MoE block's chunk and all-gather then the next layer's fused all-reduce, are priced as CUDA's: a
# departure, DESIGN.md.)
SEQUENCE_PARALLEL_MOE_ROCM: dict[str, str] = {"deepseek_v4": "", "kimi_linear": ""}

# The weight groups (`kvsim.model.params.GROUPS`) vLLM 0.33.0 builds whole on every GPU under the
# sequence-parallel MoE (`disable_tp`: every GPU runs them on its own tp-th of the rank's tokens), where
# tensor parallelism splits them otherwise, by `model_type` (a model that opts in but is not listed replicates
# nothing more: Qwen3-MoE, Qwen3-VL-MoE, gpt-oss, Granite MoE and MiMo-V2 have no shared experts, and their
# MoE blocks build nothing else with it):
#
# - DeepSeek-V2 / V3 (Kimi-K2): the shared experts, `DeepseekV2MoE` L312 (`is_sequence_parallel` the
#   config's `use_sequence_parallel_moe`) → `DeepseekV2MLP` L364-372, whose `gate_up_proj` and `down_proj`
#   take `disable_tp=is_sequence_parallel` (`deepseek_v2.py` L261-277); the dense layers' `DeepseekV2MLP`
#   (L1339-1345) is built without it: split.
# - DeepSeek-V3.2 and GLM-5 on CUDA: the shared experts (the same `DeepseekV2MoE`, L97-104) and the dense
#   layers' MLP (`models/deepseek_v32/nvidia/model.py` L78-81, L106-115: `is_sequence_parallel=
#   self.use_sequence_parallel`). On ROCm (`models/deepseek_v32/amd/model.py`) the dense MLP is built
#   without it (L96-103): the shared experts only (`SEQUENCE_PARALLEL_REPLICATED_ROCM`).
# - DeepSeek-V4: the shared experts (`models/deepseek_v4/nvidia/model.py` L323-334 → `DeepseekV4MLP`
#   L153-168 `disable_tp=is_sequence_parallel`; every layer is a MoE layer). Its ROCm file does not opt in.
# - Kimi-Linear / Kimi-K3: the shared experts and the dense MLP (`models/kimi_k3/nvidia/model.py` `KimiMLP`
#   L233-258: `replicate = use_sequence_parallel and not shard_sequence_parallel`; shared experts L449-462,
#   the dense MLP L779-785), unless `VLLM_KIMI_K3_SHARD_SP_SHARED_EXPERT=1` (`envs.py` L1650-1660, off by
#   default; `shard_sequence_parallel_mlp` L142-159, and for the shared experts a DeepEP-v2 or MegaMoE
#   backend, L162-173), which kvsim does not model. Its ROCm file does not opt in.
# - Llama 4: the shared expert (`llama4.py` L95, L107-116 `disable_tp=self.is_sequence_parallel`); its dense
#   layers' `LlamaMLP` stays split.
# - Nemotron-H: the MoE blocks' shared experts (`nemotron_h.py` `NemotronHMoE` L157, L185-192 →
#   `NemotronHMLP` L109-124 `disable_tp=is_sequence_parallel`; its latent projections, L198-213, are
#   `ReplicatedLinear`s, whole anyway); the `-` MLP blocks (L307-313) stay split.
# - Qwen3-Next and Qwen3.5 MoE: the shared expert (`qwen3_next.py` L150, L211-221 → `Qwen2MoeMLP`,
#   `qwen2_moe.py` L90: `disable_tp = disable_tp or is_sequence_parallel`; `qwen3_5.py` L173 builds the same
#   `Qwen3NextSparseMoeBlock`), at whichever pattern (`BLOCK` under `mlp_only_layers` too). AITER's fused
#   shared expert (ROCm, L152-159) is not modelled.
SEQUENCE_PARALLEL_REPLICATED: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(DEEPSEEK_V2_FILE, ("shared_experts",)),
    "deepseek_v32": ("shared_experts", "mlp"),
    "glm_moe_dsa": ("shared_experts", "mlp"),
    "deepseek_v4": ("shared_experts",),
    "kimi_linear": ("shared_experts", "mlp"),
    "llama4": ("shared_experts",),
    "llama4_text": ("shared_experts",),
    "nemotron_h": ("shared_experts",),
    "qwen3_next": ("shared_experts",),
    "qwen3_5_moe": ("shared_experts",),
    "qwen3_5_moe_text": ("shared_experts",),
}
SEQUENCE_PARALLEL_REPLICATED_ROCM: dict[str, tuple[str, ...]] = {
    "deepseek_v32": ("shared_experts",),
    "glm_moe_dsa": ("shared_experts",),
}

# The weight groups of the MoE block (`kvsim.model.params.GROUPS`), which under the sequence-parallel MoE
# multiplies a GPU's tp-th of its rank's tokens: their matrices held whole anyway (routers, Qwen's shared-expert
# gate, Kimi-K3's and Nemotron-H's latent projections) cost a tp-th of their parameters a token of the rank
# (`kvsim.model.shard.shard`'s active parameters, the roofline's `dense_flop_tok`), where the attention's
# whole matrices see every token, gathered.
SP_MOE_BLOCK_GROUPS = ("mlp", "shared_experts", "router")


# The all-gather at the end of an `EVERY_LAYER` model: the final hidden state (1 width), but DeepSeek-V4's
# `hc_mult` hyper-connection streams (`models/deepseek_v4/nvidia/model.py` L1021-1034: the all-gather runs
# before `hc_head` folds them), by `model_type`: the config field giving the widths.
_END_STREAMS = {"deepseek_v4": "hc_mult"}

# Tensor parallelism's all-reduces a layer runs outside the sequence-parallel MoE (tp > 1), by `model_type`:
# (a layer holding routed experts, a layer without); 2 and 2 (the attention's or mixer's, the MLP's or the MoE
# runner's) where not listed.
#
# - Gemma 4 (`model_executor/models/gemma4.py`): a MoE layer runs its dense MLP beside the experts, so the
#   attention's `o_proj` (L437), the MLP's `down_proj` (L273-279, on every layer: `forward` L738) and the MoE
#   runner each all-reduce.
# - Granite-4.0-H (`granitemoehybrid.py` L92-106, L168-182, `forward` L114-140, L190-220): the mixer's
#   (Mamba's `out_proj` or the attention's `o_proj`, L267), the MoE runner's and the shared MLP's
#   (`granitemoeshared.py` L60-66 `output_linear`, a reducing RowParallelLinear): 3, or 2 without a
#   shared MLP (`shared_intermediate_size` 0; `_GRANITE_SHARED`).
# - Nemotron-H (`nemotron_h.py` L278-553): each block is a single mixer (Mamba, attention, MLP or MoE), one
#   all-reduce a block.
TP_ALL_REDUCES: dict[str, tuple[int, int]] = {
    "gemma4": (3, 2),
    "gemma4_text": (3, 2),
    "granitemoehybrid": (3, 2),
    "nemotron_h": (1, 1),
}
_GRANITE_SHARED = "shared_intermediate_size"


# Small TP all-reduces of a per-token statistic (a few bytes a token beside a hidden state's thousands: only
# their ring steps are priced), by `model_type`, at tp > 1:
# - MiniMax-M2's q / k norms over the whole heads' width: one all-reduce of the per-token variances a layer
#   (`minimax_m2.py` L215-241 `MiniMaxText01RMSNormTP.forward_qkv`; `layers/minimax_rms_norm/rms_norm_tp.py`
#   L30-41, L393-421: `minimax_qk_norm_fusion`, fused or its fallback's one `_all_reduce_variance`).
# - Granite-4.0-H's Mamba gated norm at `mamba_n_groups` 1, its reduction over the TP-split width: one
#   all-reduce of the per-token sums a Mamba layer (`layers/mamba/mamba_mixer2.py` L121-150
#   `Mixer2RMSNormGated.forward_native`, which `forward_cuda` L172-183 runs whenever tp > 1 there).
_SMALL_ALL_REDUCES = {"minimax_m2": ("attention", ""), "granitemoehybrid": ("mamba", "mamba_n_groups")}


def small_all_reduces(model: object) -> int:
    """The small all-reduces a step runs at tp > 1 (`_SMALL_ALL_REDUCES`): one a layer of the named kind."""
    kind, groups = _SMALL_ALL_REDUCES.get(getattr(model, "model_type", "") or "", ("", ""))
    if not kind or (groups and (_fields(model).get(groups) or 1) != 1):
        return 0
    layers = getattr(model, "layer_list", lambda: ())()
    if kind == "mamba":
        return sum(lay.kind == "mamba" for lay in layers)
    return sum(lay.kind != "mamba" and lay.kind != "none" for lay in layers)


def _fields(model: object) -> dict:
    return getattr(model, "config_fields", None) or {}


def sequence_parallel_pattern(model: object, rocm: bool = False) -> str:
    """How `model` runs vLLM 0.33.0's sequence-parallel MoE when it is on (`SEQUENCE_PARALLEL_MOE`, on ROCm
    `SEQUENCE_PARALLEL_MOE_ROCM` first): `BLOCK`, `DEEPSEEK`, `EVERY_LAYER`, or "" where its model file does
    not opt in."""
    model_type = getattr(model, "model_type", "") or ""
    if rocm and model_type in SEQUENCE_PARALLEL_MOE_ROCM:
        return SEQUENCE_PARALLEL_MOE_ROCM[model_type]
    pattern = SEQUENCE_PARALLEL_MOE.get(model_type, "")
    if model_type == "qwen3_next":
        cfg = _fields(model)
        if cfg.get("mlp_only_layers") or (cfg.get("decoder_sparse_step") or 1) != 1:
            pattern = BLOCK  # (`_should_use_sequence_parallel` False: the MoE block's own chunk and gather)
    return pattern


def sequence_parallel_moe(model: object, tp: int, dp: int, expert_parallel: bool, rocm: bool = False) -> bool:
    """Whether vLLM 0.33.0 runs `model`'s MoE layers sequence-parallel at `tp` x `dp`: expert parallelism,
    tp > 1, dp > 1 (`ParallelConfig.use_sequence_parallel_moe`) and a model file that opts in
    (`sequence_parallel_pattern`)."""
    return (
        bool(getattr(model, "num_experts", 0))
        and bool(sequence_parallel_pattern(model, rocm))
        and expert_parallel
        and tp > 1
        and dp > 1
    )


def sequence_parallel_replicated(
    model: object, tp: int, dp: int, expert_parallel: bool, rocm: bool = False
) -> tuple[str, ...]:
    """The weight groups `model` holds whole on every GPU at `tp` x `dp` (`SEQUENCE_PARALLEL_REPLICATED`, on
    ROCm `SEQUENCE_PARALLEL_REPLICATED_ROCM` first): () outside the sequence-parallel MoE."""
    if not sequence_parallel_moe(model, tp, dp, expert_parallel, rocm):
        return ()
    model_type = getattr(model, "model_type", "") or ""
    if rocm and model_type in SEQUENCE_PARALLEL_REPLICATED_ROCM:
        return SEQUENCE_PARALLEL_REPLICATED_ROCM[model_type]
    return SEQUENCE_PARALLEL_REPLICATED.get(model_type, ())


def tp_all_reduces(model: object, moe_flags: tuple[bool, ...]) -> tuple[int, ...]:
    """Each layer's TP all-reduces outside the sequence-parallel MoE (`TP_ALL_REDUCES`)."""
    model_type = getattr(model, "model_type", "") or ""
    moe, other = TP_ALL_REDUCES.get(model_type, (2, 2))
    if model_type == "granitemoehybrid" and not _fields(model).get(_GRANITE_SHARED):
        moe, other = moe - 1, other - 1
    return tuple(moe if f else other for f in moe_flags)


# The width the MoE layers' tokens are all-gathered and reduce-scattered at where the routed experts work in a
# latent narrower than the hidden state, by `model_type`: the config field giving it (the hidden width where
# absent). The latent's down-projection runs before the dispatch and its up-projection after the combine:
# Kimi-K3 (`models/kimi_k3/nvidia/model.py` L383-389, FusedMoE built at `moe_hidden_size` L543-548, the routed
# down-projection before the experts in `forward` L644-680, the up-projection its `routed_output_transform`);
# Nemotron-H's `moe_latent_size` (`nemotron_h.py` L247-249: `fc1_latent_proj` and `fc2_latent_proj` as the
# runner's `routed_input_transform` and `routed_output_transform`, applied before `_forward_impl`'s dispatch
# and after its combine: `fused_moe/runner/moe_runner.py` L722, L787, L920, L933).
DISPATCH_WIDTH = {"kimi_linear": "routed_expert_hidden_size", "nemotron_h": "moe_latent_size"}


def dispatch_width(model: object) -> int:
    """The width `model`'s MoE layers dispatch and combine their tokens at (`DISPATCH_WIDTH`): its latent's,
    else its hidden size."""
    field = DISPATCH_WIDTH.get(getattr(model, "model_type", "") or "")
    latent = _fields(model).get(field) if field else None
    if isinstance(latent, int) and not isinstance(latent, bool) and latent > 0:
        return latent
    return int(getattr(model, "hidden_size", 0))


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
    - `sequence_parallel`: vLLM's sequence-parallel MoE (`ParallelConfig.use_sequence_parallel_moe`, and the
      model's file opting in: `SEQUENCE_PARALLEL_MOE`); `pattern` its shape there (`BLOCK`, `DEEPSEEK`,
      `EVERY_LAYER`; "" outside it).
    - `all_reduces`: outside it, each layer's TP all-reduces (`TP_ALL_REDUCES`); `small_all_reduces` those
      of a per-token statistic (`_SMALL_ALL_REDUCES`), in `tp_rings` (2 each) but not `tp_units`.
    - `tp_collectives`: tensor parallelism's collectives a step, each all-reduce, all-gather or reduce-scatter
      one (the small all-reduces too): what host staging's latency a collective multiplies
      (`HOST_STAGED_LATENCY_PS`).
    """

    gather: int
    stride: int
    gather_share: tuple[int, int]
    tp_units: int
    tp_rings: int
    sequence_parallel: bool
    pattern: str = ""
    all_reduces: tuple[int, ...] = ()
    small_all_reduces: int = 0
    tp_collectives: int = 0

    @property
    def decoder_layer_sp(self) -> bool:
        """DeepSeek's decoder-layer pattern (`DEEPSEEK`)."""
        return self.pattern == DEEPSEEK


def moe_collectives(
    model: object, tp: int, dp: int, expert_parallel: bool, moe_flags: tuple[bool, ...], rocm: bool = False
) -> MoeCollectives:
    """What a step's collectives move (`MoeCollectives`) for `model` (its `num_experts`, `model_type` and
    config fields) at `tp` x `dp`, with or without expert parallelism, `moe_flags` its layers holding routed
    experts. vLLM 0.33.0 (DESIGN.md §Time model, "Under expert parallelism"):

    - tp > 1 at dp 1 (expert parallelism or not): no gather; every layer's attention (or mixer) all-reduces
      its output over TP, and so does its MLP or MoE layer (`MoERunner._maybe_reduce_final_output`: the
      experts' partial sums, whole experts under EP or a tp-th of each without): 2 all-reduces a layer, or
      the model's own count (`TP_ALL_REDUCES`).
    - dp > 1 without sequence parallelism (no expert parallelism, tp 1, or a model that does not opt in):
      the default all-to-all (`AgRsAll2AllManager`, `device_communicators/all2all.py`) all-gathers each DP
      rank's tokens over the DP group (`_get_comm_group`: `get_dp_group()`, one GPU of each DP rank, tp
      apart) and reduce-scatters the outputs back: `dp − 1` other ranks' hidden states per own token, over
      `dp` GPUs `tp` apart; the TP all-reduces as at dp 1.
    - expert parallelism with tp > 1 and dp > 1, a model that opts in (`SEQUENCE_PARALLEL_MOE`):
      sequence-parallel MoE. Each TP rank takes a tp-th of its DP rank's tokens (`ceil(n / tp)` a GPU) and
      the all-gather and reduce-scatter run over the EP group, all `tp · dp` GPUs (`get_ep_group()`): `(tp ·
      dp − 1) / tp` hidden states per own token. The runner's TP all-reduce is skipped; the TP collectives
      by the model's pattern: `BLOCK` a MoE layer's other all-reduces and an all-gather, `DEEPSEEK` one
      all-reduce's worth a MoE layer, `EVERY_LAYER` an all-gather and a reduce-scatter every layer and the
      end's all-gather. `rocm`: the GPU is AMD's (vLLM's ROCm files: `SEQUENCE_PARALLEL_MOE_ROCM`).
    """
    c = _moe_collectives(model, tp, dp, expert_parallel, moe_flags, rocm)
    small = small_all_reduces(model)
    if not small:
        return c
    return replace(
        c, tp_rings=c.tp_rings + 2 * small, small_all_reduces=small, tp_collectives=c.tp_collectives + small
    )


def _moe_collectives(
    model: object, tp: int, dp: int, expert_parallel: bool, moe_flags: tuple[bool, ...], rocm: bool
) -> MoeCollectives:
    num_experts = getattr(model, "num_experts", 0)
    ars = tp_all_reduces(model, moe_flags)
    pattern = sequence_parallel_pattern(model, rocm) if num_experts else ""
    sp = sequence_parallel_moe(model, tp, dp, expert_parallel, rocm)
    if not num_experts or dp == 1:
        gather, stride, share = 1, 1, (0, 1)
    elif sp:
        gather, stride, share = tp * dp, 1, (tp * dp - 1, tp)
    else:
        gather, stride, share = dp, tp, (dp - 1, 1)
    if not sp:
        units = rings = 2 * sum(ars)
        return MoeCollectives(gather, stride, share, units, rings, False, "", ars, tp_collectives=sum(ars))
    if pattern == EVERY_LAYER:
        field = _END_STREAMS.get(getattr(model, "model_type", "") or "")
        end = (_fields(model).get(field) or 1) if field else 1
        units, rings = 2 * len(moe_flags) + end, 2 * len(moe_flags) + 1
        # (each ring an all-gather or a reduce-scatter: one collective each)
        return MoeCollectives(gather, stride, share, units, rings, True, pattern, ars, tp_collectives=rings)
    if pattern == BLOCK:
        # A MoE layer: its other all-reduces (2 each) and the MoE block's all-gather (1); a layer without
        # routed experts its all-reduces. Either way a layer's collectives are its all-reduce count.
        units = rings = sum(2 * (n - 1) + 1 if moe else 2 * n for moe, n in zip(moe_flags, ars, strict=True))
        return MoeCollectives(
            gather, stride, share, units, rings, True, pattern, ars, tp_collectives=sum(ars)
        )
    units = rings = count = 0
    for i, moe in enumerate(moe_flags):
        if i and moe_flags[i - 1]:
            # The previous layer left its output sharded over TP: all-gathered after this layer's input
            # norm (the hidden state) before a MoE layer, before the layer (hidden state and residual, 2
            # widths: `DeepseekV2Model.forward`) otherwise.
            units, rings, count = units + (1 if moe else 2), rings + 1, count + 1
        # A MoE layer: the attention's output reduce-scattered (1); another layer its all-reduces.
        if moe:
            units, rings, count = units + 1, rings + 1, count + 1
        else:
            units, rings, count = units + 2 * ars[i], rings + 2 * ars[i], count + ars[i]
    if moe_flags and moe_flags[-1]:
        # (the model's end: hidden state and residual gathered)
        units, rings, count = units + 2, rings + 1, count + 1
    return MoeCollectives(gather, stride, share, units, rings, True, pattern, ars, tp_collectives=count)
