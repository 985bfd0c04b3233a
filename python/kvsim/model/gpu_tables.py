"""The GPU presets' tables that `kvsim.model.gpus` applies to its records: each preset's architecture (a CUDA
compute capability or an AMD LLVM target) and its topology (GPUs a host holds, GPUs its peer link joins, the
peer link's mesh links) and its network between hosts, each figure with its source.
"""

# Each preset's architecture: NVIDIA's compute capabilities ("CUDA GPUs - Compute Capability",
# developer.nvidia.com/cuda-gpus: Turing 7.5, A100 8.0, GA102 and A10 8.6, Ada (L4, L40, L40S, RTX 6000 Ada) 8.9,
# Hopper 9.0, B200 and GB200 10.0, Blackwell Ultra B300 and GB300 10.3, RTX Blackwell 12.0, GB10 12.1) and AMD's
# LLVM targets (ROCm's "GPU hardware specifications": MI300X and MI325X gfx942, MI350X and MI355X gfx950).
ARCHS = {
    "rtx-2070": "sm_75",
    "rtx-3090": "sm_86",
    "rtx-4090": "sm_89",
    "rtx-5090": "sm_120",
    "rtx-pro-6000": "sm_120",
    "a10g": "sm_86",
    "a10": "sm_86",
    "l4": "sm_89",
    "l40s": "sm_89",
    "l40": "sm_89",
    "rtx-6000-ada": "sm_89",
    "a100-40gb": "sm_80",
    "a100-80gb": "sm_80",
    "h100-80gb": "sm_90",
    "h100-pcie": "sm_90",
    "h20": "sm_90",
    "h200": "sm_90",
    "h200-nvl": "sm_90",
    "b200": "sm_100",
    "gb200": "sm_100",
    "b300": "sm_103",
    "gb300": "sm_103",
    "mi300x": "gfx942",
    "mi325x": "gfx942",
    "mi350x": "gfx950",
    "mi355x": "gfx950",
}

# Each preset's topology: (GPUs a host holds, GPUs the peer link joins, the peer link's mesh links: 0 a switch
# or bridge). Presets without a peer link or a host size (PCIe cards: servers vary) have none.
TOPOLOGY = {
    # NVIDIA DGX A100 datasheet: 8 A100 SXM4 GPUs on 6 NVSwitches (the HGX A100 8-GPU board).
    "a100-40gb": (8, 8, 0),
    "a100-80gb": (8, 8, 0),
    # NVIDIA DGX H100 datasheet: 8 H100 SXM5 GPUs on 4 NVSwitches (the HGX H100 8-GPU board).
    "h100-80gb": (8, 8, 0),
    # NVIDIA H20 product brief: the HGX H20 8-GPU board, NVLink 900 GB/s through NVSwitch as HGX H100's.
    "h20": (8, 8, 0),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM: "HGX H200 partner and NVIDIA-Certified Systems with 4 or 8
    # GPUs", NVSwitch; taken as 8 (the DGX H200's).
    "h200": (8, 8, 0),
    # NVIDIA H200 Tensor Core GPU datasheet, NVL: "MGX H200 NVL partner and NVIDIA-Certified Systems with up to
    # 8 GPUs", joined by a "2- or 4-way NVLink bridge": 4 GPUs a bridge, the host's PCIe between bridges.
    "h200-nvl": (8, 4, 0),
    # NVIDIA HGX B200 and HGX B300 datasheets: 8 GPUs a board, NVLink 5 through NVLink switches.
    "b200": (8, 8, 0),
    "b300": (8, 8, 0),
    # NVIDIA GB200 NVL72 and GB300 NVL72 datasheets: 72 GPUs and 36 Grace CPUs in one NVLink domain (NVLink
    # switch trays), 1 Grace and 2 GPUs a superchip; a compute tray (one host, one OS) holds 2 superchips, 4
    # GPUs (NVIDIA's technical blog "NVIDIA GB200 NVL72 Delivers Trillion-Parameter LLM Training and Real-Time
    # Inference": 18 compute trays; setloop.io/blog/gb200-nvl72-architecture: "two Grace CPUs and four Blackwell
    # GPUs per tray", 18 trays, nine NVLink Switch trays). So the NVLink collectives reach 72 GPUs, one host 4.
    "gb200": (4, 72, 0),
    "gb300": (4, 72, 0),
    # AMD Instinct MI300X, MI325X, MI350X and MI355X datasheets and platform briefs: 8 OAM GPUs on a universal
    # base board, fully connected by Infinity Fabric, 7 links a GPU, one to each peer (MI300X / MI325X: 128 GB/s
    # peak a link, both ways, 64 each way: "up to seven Infinity Fabric links, each with 16 lanes ... 128GB/s of
    # bidirectional bandwidth per link", wheelersnetwork.com/2024/01; MI350X / MI355X: 153.6 GB/s peak a link,
    # 76.8 each way, the presets' sources above).
    "mi300x": (8, 8, 7),
    "mi325x": (8, 8, 7),
    "mi350x": (8, 8, 7),
    "mi355x": (8, 8, 7),
}

# Each preset's network between hosts where it is not a 400 Gb/s NIC a GPU (50 GB/s each way, the DGX H100,
# DGX H200 and DGX B200 datasheets' 8 ConnectX-7 ports of 400 Gb/s for 8 GPUs: `collectives.NETWORK_BANDWIDTH`):
# Blackwell Ultra systems ship an 800 Gb/s ConnectX-8 a GPU (NVIDIA DGX B300 datasheet: "8x OSFP ports serving
# 8x single-port NVIDIA ConnectX-8 VPI, up to 800Gb/s"; GB300 NVL72: "NVIDIA ConnectX-8 SuperNIC", 800 Gb/s a
# GPU), 100 GB/s each way.
NETWORK = {
    "b300": 100e9,
    "gb300": 100e9,
}

# The presets whose stock driver does no GPU peer-to-peer over PCIe (`Gpu.pcie_p2p` False), so that NCCL stages
# every collective between two of them through host memory (its SHM transport; DESIGN.md §Time model, "The
# collectives' link"): NVIDIA's GeForce cards, whose P2P NVIDIA disables on stock drivers (RTX 4090:
# blog.chlc.cc/p/rtx4090-gpudirect-p2p-unlocked and allanchan339.github.io/bug-fixes/2025/05/21/4090-P2P.html,
# P2P only with a patched kernel module; RTX 5090: tinygrad/open-gpu-kernel-modules#29, the same; RTX 3090:
# noonghunna/club-3090#356, "NCCL stages every cross-card all-reduce through host memory"; the RTX 2070, a
# Turing GeForce, likewise). Datacenter and workstation cards (A10, L4, L40S, RTX 6000 Ada, RTX PRO 6000, H100
# PCIe) do P2P over PCIe; a host whose IOMMU, ACS or VM blocks it, or whose P2P hangs (2 RTX PRO 6000s:
# local-inference-lab/rtx6kpro#15, vllm-project/vllm#30317), is `SimConfig(pcie_p2p=False)`.
NO_PCIE_P2P = frozenset({"rtx-2070", "rtx-3090", "rtx-4090", "rtx-5090"})
