"""The GPU presets' records (`GPUS`): each accelerator's memory, HBM bandwidth, peak dense FLOP/s per dtype,
host link and peer link with its source, then `gpu_tables`' architecture and topology applied. What each
figure means and how it is read: `kvsim.model.gpus`, which re-exports `Gpu` and `GPUS` (split from it at ~800
lines)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kvsim.model.gpu_tables import ARCHS, NETWORK, NO_PCIE_P2P, TOPOLOGY

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class Gpu:
    """One accelerator.

    Attributes:
        name: preset name (lower case, dashed).
        memory_bytes: device memory in bytes.
        hbm_bandwidth: device memory bandwidth in bytes per second.
        peak_flops: peak dense fp16/bf16 tensor FLOP/s.
        pcie_bandwidth: host link bandwidth, one direction, bytes per second.
        source: where the numbers come from.
        fp8_flops: peak dense fp8 tensor FLOP/s (0: no fp8 tensor cores).
        fp4_flops: peak dense fp4 tensor FLOP/s (0: no fp4 tensor cores).
        peer_bandwidth: the GPU-to-GPU link (NVLink, Infinity Fabric), one direction, bytes per second,
            what tensor- and expert-parallel collectives cross; 0: none, they cross the host link (PCIe).
        arch: the architecture vLLM picks kernels by: `sm_XY` for an NVIDIA GPU of compute capability X.Y,
            `gfxNNN` for an AMD one; "" unknown (a described GPU without `arch`).
        peer_links: how the peer link joins the GPUs: 0, a switch or bridge (NVSwitch, an NVLink bridge)
            giving every GPU its whole `peer_bandwidth` to any peer; N, a full mesh of N point-to-point links
            (AMD Instinct's Infinity Fabric), one to each peer, `peer_bandwidth` their sum, so a collective
            over G GPUs uses min(G - 1, N) of them (`kvsim.model.collectives.collective_link`).
        peer_domain: GPUs the peer link joins (8 on an HGX board, 72 in an NVL72 rack, 4 over H200 NVL's
            bridge); 0: unknown, taken as any number.
        gpus_per_host: GPUs one host (one operating system: a server, an NVL72 compute tray) holds, what
            vLLM's `mp` executor can span; 0: unknown (PCIe cards: servers vary), taken as any number.
        network_bandwidth: the network between hosts, one direction a GPU (its NIC), bytes per second, what a
            collective past a host (past an NVL72's NVLink domain) crosses; 0: a 400 Gb/s NIC a GPU
            (`kvsim.model.collectives.NETWORK_BANDWIDTH`).
        pcie_p2p: whether two of these GPUs do peer-to-peer over PCIe on a stock driver (False: NVIDIA's
            GeForce cards, `gpu_tables.NO_PCIE_P2P`), what a collective between GPUs without a peer link
            crosses when True; without it NCCL stages the collective through host memory
            (`kvsim.model.collectives.collective_link`). None: not known (a GPU described without a preset
            and without `pcie_p2p`, or built here without it), taken as peer-to-peer, as a datacenter card's,
            the time line saying that this is assumed (`collectives.pcie_p2p_of`). Every preset says True
            or False. `SimConfig.pcie_p2p` overrides it for a host.
    """

    name: str
    memory_bytes: int
    hbm_bandwidth: float
    peak_flops: float
    pcie_bandwidth: float
    source: str = ""
    fp8_flops: float = 0.0
    fp4_flops: float = 0.0
    peer_bandwidth: float = 0.0
    arch: str = ""
    peer_links: int = 0
    peer_domain: int = 0
    gpus_per_host: int = 0
    network_bandwidth: float = 0.0
    pcie_p2p: bool | None = None


def _g(
    name: str,
    mem: int,
    bw: float,
    bf16: float,
    link: float,
    source: str,
    fp8: float = 0.0,
    fp4: float = 0.0,
    peer: float = 0.0,
) -> Gpu:
    return Gpu(name, mem, bw, bf16, link, source, fp8, fp4, peer)


GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        # Turing whitepaper (RTX 2070, reference boost clock 1,620 MHz): 8 GB GDDR6, 448 GB/s, 59.7 TFLOPS fp16
        # tensor with fp16 accumulate, which GeForce halves with fp32 accumulate: 29.9 (the rate every other
        # GeForce entry here takes, and PyTorch's fp16 GEMMs accumulate in fp32; Turing has no bf16; the
        # Founders Edition's 1,710 MHz boost gives 31.5); PCIe 3.0 x16 (~16 GB/s each way). Was 59.7 (the
        # fp16-accumulate rate, kvsim's first target card) until 2026-12-06.
        # CUDA: 7.78 GiB (tloen/alpaca-lora#442, an RTX 2070: "7.78 GiB total capacity").
        _g("rtx-2070", 7967 * MIB, 448e9, 29.9e12, 16e9, "NVIDIA Turing architecture whitepaper, Appendix A"),
        # GA102 whitepaper (RTX 3090): 24 GB GDDR6X, 936 GB/s, 71 TFLOPS fp16 tensor with fp32 accumulate
        # (142 with fp16 accumulate); PCIe 4.0 x16 (32 GB/s each way); nvidia-smi reports 24,576 MiB.
        # CUDA: 23.56 GiB (wtdcode/vllm-backport#34, RTX 3090s: "Free memory on device (22.93/23.56 GiB)";
        # 23.69-23.70 on older drivers).
        _g(
            "rtx-3090",
            24125 * MIB,
            936e9,
            71e12,
            32e9,
            "NVIDIA Ampere GA102 GPU architecture whitepaper, Table 9",
        ),
        # Ada whitepaper (RTX 4090): 24 GB GDDR6X, 1,008 GB/s, 165.2 TFLOPS fp16/bf16 tensor with fp32
        # accumulate, 330.3 fp8 (fp32 accumulate), dense; PCIe 4.0 x16; nvidia-smi reports 24,564 MiB.
        # CUDA: 23.64 GiB (ali-vilab/VGen#104, TMElyralab/MuseTalk#76, 3DTopia/Phidias-Diffusion#8: "total
        # capacity of 23.64 GiB"; 23.52 on driver R580 in pytorch/pytorch#182941).
        _g(
            "rtx-4090",
            24207 * MIB,
            1008e9,
            165.2e12,
            32e9,
            "NVIDIA Ada GPU architecture whitepaper, Appendix A",
            fp8=330.3e12,
        ),
        # RTX Blackwell whitepaper (RTX 5090): 32 GB GDDR7, 1,792 GB/s, 209.5 TFLOPS fp16/bf16 tensor with fp32
        # accumulate, 419 fp8, 1,676 fp4 (3,352 "AI TOPS" with sparsity), dense; PCIe 5.0 x16 (64 GB/s each
        # way); nvidia-smi reports 32,607 MiB.
        # CUDA: 31.37 GiB (Wan-Video/Wan2.1#465; vllm-project/vllm#14452: "total_gpu_memory (31.37GiB)").
        _g(
            "rtx-5090",
            32123 * MIB,
            1792e9,
            209.5e12,
            64e9,
            "NVIDIA RTX Blackwell GPU architecture whitepaper",
            fp8=419e12,
            fp4=1676e12,
        ),
        # RTX PRO 6000 Blackwell Server Edition datasheet: 96 GB GDDR7, 1,597 GB/s, 4 PFLOPS fp4 with sparsity
        # (2 dense; fp8 1, bf16 0.5 dense); PCIe 5.0 x16; nvidia-smi reports 97,887 MiB. The 1,597 GB/s is the
        # Server Edition's (NVIDIA's product page, nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-
        # edition: "Memory Bandwidth: 1597 GB/s", as quoted in public GitHub files found by code search, one
        # citing NVIDIA's December 2025 datasheet, page 3; AWS's G7e: "Each G7e GPU provides 1,597 GB/s"); the
        # 1,792 GB/s often quoted is the Workstation Edition's (28 Gbps GDDR7).
        # CUDA: 97,250 MiB = 94.97 GiB (the Server Edition's torch.cuda.get_device_properties on Linux,
        # total_memory=97250MB, in a public GitHub file found by code search; no issue thread to cite).
        _g(
            "rtx-pro-6000",
            97250 * MIB,
            1597e9,
            500e12,
            64e9,
            "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet",
            fp8=1000e12,
            fp4=2000e12,
        ),
        # A10 datasheet (NVIDIA publishes none for AWS's A10G; the A10's figures): 24 GB GDDR6, 600 GB/s,
        # 125 TFLOPS bf16 dense (250 with sparsity); PCIe 4.0 x16; an A10G's nvidia-smi reports 23,028 MiB.
        # The bf16 rate is unverified for the A10G: AWS's G5 page (aws.amazon.com/ec2/instance-types/g5) gives
        # only "24 GB of memory, 80 RT cores and 320 third-generation Tensor Cores" (80 SMs to the A10's 72) and
        # "up to 250 TOPS" (the A10's dense INT8, twice this 125); a secondary source, Baseten's "NVIDIA A10 vs
        # A10G for ML model inference" (baseten.co/blog), gives the A10G 70 TFLOPS bf16 dense, its tensor compute
        # below the A10's (70 is GeForce's half-rate fp32 accumulate on 80 SMs at TechPowerUp's 1,710 MHz
        # boost). Kept at the A10's 125 until an AWS or NVIDIA figure says otherwise; compute-bound (prefill)
        # times on a10g may be optimistic.
        # CUDA: 22,587 MiB = 22.06 GiB (torch.cuda.get_device_properties of an AWS A10G, total_memory=22587MB,
        # in public GitHub files found by code search; no issue thread to cite).
        _g("a10g", 22587 * MIB, 600e9, 125e12, 32e9, "NVIDIA A10 Tensor Core GPU datasheet (AWS A10G)"),
        # A10 datasheet: 24 GB GDDR6, 600 GB/s, 125 TFLOPS bf16 dense (250 with sparsity); PCIe 4.0 x16;
        # nvidia-smi reports 23,028 MiB ("NVIDIA A10, 23028 MiB" in public GitHub files found by code search; AWS's
        # A10G reports the same). CUDA: 22.06 GiB on a named "NVIDIA A10" (torch 2.14, CUDA 13.0: "GPU 0 has a
        # total capacity of 22.06 GiB", in a public GitHub benchmark file found by code search), the A10G's
        # 22,587 MiB (the same board memory and nvidia-smi total).
        _g("a10", 22587 * MIB, 600e9, 125e12, 32e9, "NVIDIA A10 Tensor Core GPU datasheet"),
        # L4 datasheet: 24 GB GDDR6, 300 GB/s, 121 TFLOPS bf16 dense (242 with sparsity), 242.5 fp8 dense,
        # PCIe Gen4 x16; nvidia-smi reports 23,034 MiB.
        # CUDA: 22.05 GiB (pytorch/pytorch#175666, vLLM's CI on L4s: "Free memory on device cuda:1 (19.77/22.05 GiB)").
        _g("l4", 22579 * MIB, 300e9, 121e12, 32e9, "NVIDIA L4 Tensor Core GPU datasheet", fp8=242.5e12),
        # L40S datasheet: 48 GB GDDR6, 864 GB/s, 362.05 TFLOPS bf16 dense (733 with sparsity), 733 fp8
        # dense, PCIe Gen4 x16 (64 GB/s both ways); nvidia-smi reports 46,068 MiB.
        # CUDA: 47,576,711,168 bytes = 44.31 GiB (deviceQuery of an L40S, driver 12.4; 44.39-44.52 seen elsewhere).
        _g("l40s", 47576711168, 864e9, 362.05e12, 32e9, "NVIDIA L40S GPU datasheet", fp8=733e12),
        # L40 datasheet: 48 GB GDDR6, 864 GB/s, 181.05 TFLOPS bf16 dense (362.1 with sparsity), 362 fp8 dense
        # (724 with sparsity), PCIe Gen4 x16; nvidia-smi reports 46,068 MiB as the L40S does ("NVIDIA L40, 46068
        # MiB" in a public GitHub file found by code search). CUDA: taken as the L40S's 47,576,711,168 bytes = 44.31
        # GiB (the same board memory; torch.cuda.get_device_properties of L40s prints "NVIDIA L40 (44.3GB)" in
        # public GitHub files found by code search).
        _g("l40", 47576711168, 864e9, 181.05e12, 32e9, "NVIDIA L40 GPU datasheet", fp8=362e12),
        # RTX 6000 Ada Generation datasheet: 48 GB GDDR6 (ECC), 960 GB/s, 1,457 TFLOPS fp8 with sparsity (728.5
        # dense); bf16 364.2 TFLOPS dense with fp32 accumulate (Ada whitepaper, Appendix A: a professional card,
        # not halved as GeForce's are); PCIe Gen4 x16; nvidia-smi reports 49,140 MiB (ECC off).
        # CUDA: 47.53 GiB = 48,671 MiB (PyTorch's "total capacity of 47.53 GiB" on 49,140 MiB 48 GB cards in
        # public GitHub files found by code search; a named one's torch.cuda.get_device_properties prints "NVIDIA
        # RTX 6000 Ada Generation (47.5 GB)"). With ECC on it reports 46,068 MiB and CUDA 44.43 GiB
        # (DINGYANB/MTVCrafter#21): describe that with --gpu-memory.
        _g(
            "rtx-6000-ada",
            48671 * MIB,
            960e9,
            364.2e12,
            32e9,
            "NVIDIA RTX 6000 Ada Generation datasheet; Ada GPU architecture whitepaper, Appendix A",
            fp8=728.5e12,
        ),
        # A100 datasheet (SXM4 40GB): 1,555 GB/s, 312 TFLOPS bf16/fp16 dense, PCIe Gen4 64 GB/s (both ways),
        # NVLink 600 GB/s (both ways).
        # CUDA: 42,298,834,944 bytes = 39.39 GiB (bottlerocket-os/bottlerocket#3873, deviceQuery of A100-SXM4-40GBs; the
        # PCIe part reports the same).
        _g(
            "a100-40gb",
            42298834944,
            1555e9,
            312e12,
            32e9,
            "NVIDIA A100 Tensor Core GPU datasheet",
            peer=300e9,
        ),
        # A100 datasheet (SXM4 80GB): 2,039 GB/s, 312 TFLOPS dense, PCIe Gen4, NVLink 600 GB/s.
        # CUDA: 85,100,068,864 bytes = 79.26 GiB (deviceQuery of an A100-SXM4-80GB, driver 12.5; HiDream-ai/VAREdit#6,
        # levihsu/OOTDiffusion#235: 79.25 GiB; 79.15 on driver 12.2).
        _g(
            "a100-80gb",
            85100068864,
            2039e9,
            312e12,
            32e9,
            "NVIDIA A100 Tensor Core GPU datasheet",
            peer=300e9,
        ),
        # H100 datasheet (SXM5 80GB): 3.35 TB/s, 989 TFLOPS bf16 dense (1,979 with sparsity), 1,979 fp8
        # dense, PCIe Gen5 128 GB/s (both ways), NVLink 900 GB/s (both ways). nvidia-smi reports 81,559 MiB;
        # CUDA 85,028,896,768 bytes = 79.19 GiB (deviceQuery, driver 12.8; vLLM 0.19.0's "Free memory on device
        # (77.66/79.19 GiB)" in all 74 runs of llm-d-incubation/llm-d-planner's sweep, commit d3121e0:
        # results/startup.md).
        _g(
            "h100-80gb",
            85028896768,
            3.35e12,
            989.4e12,
            64e9,
            "NVIDIA H100 Tensor Core GPU datasheet",
            fp8=1978.9e12,
            peer=450e9,
        ),
        # H100 datasheet (PCIe 80GB): 2 TB/s, 756 TFLOPS bf16 dense (1,513 with sparsity), 1,513 fp8 dense,
        # PCIe Gen5; nvidia-smi reports 81,559 MiB as for the SXM part.
        # CUDA: 81,008 MiB = 79.11 GiB (torch.cuda.get_device_properties of an H100 PCIe, total_memory=81008MB,
        # in a public GitHub file found by code search; vllm-project/vllm#27508's "total capacity of 79.11 GiB").
        _g(
            "h100-pcie",
            81008 * MIB,
            2.0e12,
            756e12,
            64e9,
            "NVIDIA H100 Tensor Core GPU datasheet (PCIe)",
            fp8=1513e12,
        ),
        # H20 product brief: 96 GB HBM3, 4.0 TB/s, 148 TFLOPS bf16 dense, 296 fp8 dense, PCIe Gen5 x16, NVLink
        # 900 GB/s (both ways); nvidia-smi reports 97,871 MiB.
        # CUDA: 97,285 MiB = 95.00 GiB (modelscope/DiffSynth-Studio#1238: "total capacity of 95.00 GiB";
        # torch.cuda.get_device_properties of an H20, total_memory=97285MB).
        _g("h20", 97285 * MIB, 4.0e12, 148e12, 64e9, "NVIDIA H20 product brief", fp8=296e12, peer=450e9),
        # H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, 989 TFLOPS bf16 dense, 1,979 fp8 dense, PCIe Gen5,
        # NVLink 900 GB/s (both ways); nvidia-smi reports 143,771 MiB.
        # CUDA: 139.81 GiB (vllm-project/vllm#34553: "NVIDIA H200 (139.81 GiB)"; stas00/ml-engineering's
        # debug/pytorch.md: 139.80).
        _g(
            "h200",
            143165 * MIB,
            4.8e12,
            989.4e12,
            64e9,
            "NVIDIA H200 Tensor Core GPU datasheet",
            fp8=1978.9e12,
            peer=450e9,
        ),
        # H200 datasheet (NVL, the PCIe card): 141 GB HBM3e, 4.8 TB/s, 1,671 TFLOPS bf16 and 3,341 fp8 with
        # sparsity (835.5 and 1,670.5 dense), PCIe Gen5 128 GB/s (both ways), 2- or 4-way NVLink bridge 900 GB/s
        # per GPU (both ways: kvsim prices a tensor-parallel group within a bridged 4 over it, a larger one over the
        # host's PCIe between bridges too: `gpu_tables.TOPOLOGY`, `kvsim.model.collectives.collective_link`);
        # nvidia-smi reports 143,771 MiB as for the SXM part.
        # CUDA: 139.80 GiB = 143,155 MiB ("NVIDIA H200 NVL (139.80 GiB)" and "2x NVIDIA H200 NVL (139.80 GB each)"
        # in public GitHub files found by code search; no issue thread to cite).
        _g(
            "h200-nvl",
            143155 * MIB,
            4.8e12,
            835.5e12,
            64e9,
            "NVIDIA H200 Tensor Core GPU datasheet (NVL)",
            fp8=1670.5e12,
            peer=450e9,
        ),
        # HGX B200 datasheet, per GPU (1/8 of the board): 180 GB HBM3e, 7.7 TB/s, 2.25 PFLOPS bf16, 4.5 fp8,
        # 9 fp4 dense (the sheet's 36 / 72 / 144 PFLOPS per 8 GPUs are with sparsity); NVLink 1.8 TB/s per
        # GPU (both ways); nvidia-smi reports 183,359 MiB. Host link: the GPU's PCIe Gen6 x16 meets its
        # host's Gen5 (the DGX B200 user guide, docs.nvidia.com/dgx/dgxb200-user-guide: "2 x Intel Xeon 8570",
        # PCIe Gen5 CPUs), so host memory moves at Gen5 x16's 64 GB/s each way (128 GB/s was Gen6's).
        # CUDA: 182,631 MiB = 178.35 GiB (stas00/ml-engineering's debug/pytorch.md: "total capacity of 178.35 GiB").
        _g(
            "b200",
            182631 * MIB,
            7.7e12,
            2250e12,
            64e9,
            "NVIDIA HGX B200 datasheet; DGX B200 user guide (host CPUs)",
            fp8=4500e12,
            fp4=9000e12,
            peer=900e9,
        ),
        # GB200 NVL72 datasheet, per GPU (1/72 of the rack): 186 GB HBM3e (13.4 TB / 72), 8 TB/s, 2.5 PFLOPS
        # bf16, 5 fp8, 10 fp4 dense (the sheet's 360 / 720 / 1,440 PFLOPS are with sparsity); NVLink 1.8 TB/s
        # per GPU (both ways) to the other 71. Host link: NVLink-C2C to Grace, whose 900 GB/s both ways (450
        # each way) NVIDIA gives per superchip, one Grace and two GPUs (a Grace's ten C2C links, 450 GB/s each
        # way in all: glennklockwood.com/garden/NVLink from Grace's Hot Chips 34 talk; GH200's one GPU has them
        # all: "NVLINK C2C interface with data rates upto 450GB/s per direction", NVIDIA's MLPerf Inference
        # start-from-device note for DGX GH200), so each GPU has half: 225 GB/s each way. NVIDIA's NCCL
        # net-plugin design note "DirectNIC support" (authors at nvidia.com; a public GitHub file found by code
        # search): "in the platforms with two GPUs per Grace, C2C bandwidth per GPU is only 1800Gb/s" (225 GB/s,
        # one way: an 800 Gb/s NIC's traffic "would consume half of its bandwidth"). No datasheet states the
        # split. Was 450 GB/s each way (each GPU assumed the whole C2C) until 2026-12-06. CUDA:
        # 184.31 GiB (vllm-project/vllm#43951, "4x NVIDIA GB200 (184 GiB)": "total capacity of 184.31 GiB").
        _g(
            "gb200",
            188733 * MIB,
            8.0e12,
            2500e12,
            225e9,
            "NVIDIA GB200 NVL72 datasheet; NVIDIA NCCL DirectNIC note (C2C per GPU)",
            fp8=5000e12,
            fp4=10000e12,
            peer=900e9,
        ),
        # HGX B300 datasheet, per GPU (1/8 of the board): 288 GB HBM3e (2.3 TB / 8), 2.25 PFLOPS bf16, 4.5 fp8,
        # 13.5 fp4 dense (the sheet's 36 / 72 PFLOPS per 8 GPUs are with sparsity, its fp4 144 | 108 with |
        # without);
        # 8 TB/s (NVIDIA's "Inside NVIDIA Blackwell Ultra" technical blog: 288 GB HBM3e at 8 TB/s a GPU; no NVIDIA
        # source found for the HGX part's own: secondary tables give it 7.7 TB/s, verda.com, and its fp4 13.1
        # to 14 PF dense, glennklockwood.com and verda.com, both within 4 % and neither NVIDIA's); NVLink
        # 1.8 TB/s per GPU (both ways); nvidia-smi reports 275,040 MiB. Host link: the GPU's PCIe Gen6 x16 meets
        # its host's Gen5, as B200's: DGX B300 pairs eight B300 with two Intel Xeon 6 6776P, 88 PCIe 5.0 lanes
        # each (heise online, "Intel Xeon 6 6776P: Diesen Prozessor setzt Nvidia im DGX B300 ein", 2025,
        # heise.de/-10395118, from Intel's announcement), so Gen5 x16's 64 GB/s each way (128 GB/s was Gen6's).
        # CUDA: 267.69 GiB = 274,115 MiB (vLLM's "Free memory on device (264.8/267.69 GiB)" and PyTorch's "total
        # capacity of 267.69 GiB" on NVIDIA B300 SXM6 AC nodes, in public GitHub files found by code search; no
        # issue thread to cite).
        _g(
            "b300",
            274115 * MIB,
            8.0e12,
            2250e12,
            64e9,
            "NVIDIA HGX B300 datasheet; heise online on DGX B300's host CPUs (Xeon 6 6776P, PCIe 5.0)",
            fp8=4500e12,
            fp4=13500e12,
            peer=900e9,
        ),
        # GB300 NVL72 datasheet, per GPU (1/72 of the rack): up to 20 TB HBM3e (~279 GB a GPU; 288 GB Blackwell
        # Ultra's), 576 TB/s (8 TB/s), 2.5 PFLOPS bf16, 5 fp8, 15 fp4 dense (the sheet's 360 / 720 PFLOPS are with
        # sparsity, its fp4 1,440 | 1,080 with | without); host link: NVLink-C2C to Grace, 900 GB/s both ways a
        # Grace shared by its two GPUs (2 Grace and 4 GPUs a compute tray), 225 GB/s each way a GPU, as GB200's
        # (the NCCL "DirectNIC support" note's "two GPUs per Grace ... 1800Gb/s" is this platform's: CX-8 on the
        # board; was 450 until 2026-12-06);
        # NVLink 1.8 TB/s per GPU (both ways) to the other 71; nvidia-smi reports 284,208 MiB.
        # CUDA: 276.50 GiB = 283,136 MiB (stas00/ml-engineering's debug/pytorch.md: "total capacity of 276.50 GiB"
        # on a DGX Station's GB300; the same in a 64-GPU GB300 cluster's torchtitan runs, "peak 244.94 of
        # 276.50 GiB", in public GitHub files found by code search).
        _g(
            "gb300",
            283136 * MIB,
            8.0e12,
            2500e12,
            225e9,
            "NVIDIA GB300 NVL72 datasheet; NVIDIA NCCL DirectNIC note (C2C per GPU)",
            fp8=5000e12,
            fp4=15000e12,
            peer=900e9,
        ),
        # AMD Instinct MI300X datasheet: 192 GB HBM3, 5.3 TB/s, 1,307.4 TFLOPS bf16 dense (2,614.9 with
        # sparsity), 2,614.9 fp8 dense, PCIe Gen5 x16 (128 GB/s both ways), Infinity Fabric 896 GB/s peak
        # aggregate (7 links, taken as 448 GB/s each way). ROCm's torch: 191.69 GiB on a named MI300X (HIP
        # out-of-memory messages "total capacity of 191.69 GiB" in public GitHub files found by code search;
        # 191.98 where the GPU is not named).
        _g(
            "mi300x",
            196291 * MIB,
            5.3e12,
            1307.4e12,
            64e9,
            "AMD Instinct MI300X accelerator datasheet",
            fp8=2614.9e12,
            peer=448e9,
        ),
        # AMD Instinct MI325X datasheet: 256 GB HBM3E, 6 TB/s, 1,307.4 TFLOPS bf16 dense, 2,614.9 fp8 dense,
        # PCIe Gen5 x16, Infinity Fabric 896 GB/s peak aggregate (taken as 448 GB/s each way). ROCm's torch:
        # 255.98 GiB (vllm-project/vllm#41962, "AMD MI325X × 8 (255.98 GiB HBM each)").
        _g(
            "mi325x",
            262124 * MIB,
            6.0e12,
            1307.4e12,
            64e9,
            "AMD Instinct MI325X accelerator datasheet",
            fp8=2614.9e12,
            peer=448e9,
        ),
        # AMD Instinct MI355X datasheet: 288 GB HBM3E, 8 TB/s, 2,516.6 TFLOPS bf16 dense, 5,033.2 fp8 and
        # 10,066.3 fp4 (MXFP4) dense, PCIe Gen5 x16, 7 Infinity Fabric links of 153.6 GB/s peak each (AMD's
        # MI355X specifications; "7 IF links per socket", AMD's CDNA 4 talk at Hot Chips 2025): 1,075.2 GB/s
        # aggregate, taken as 537.6 GB/s each way, as the MI300X's 7 x 128 GB/s. ROCm's torch: 287.98 GiB
        # (ROCm/TheRock#2118, gfx950: "total capacity of 287.98 GiB").
        _g(
            "mi355x",
            294892 * MIB,
            8.0e12,
            2516.6e12,
            64e9,
            "AMD Instinct MI355X accelerator datasheet",
            fp8=5033.2e12,
            fp4=10066.3e12,
            peer=537.6e9,
        ),
        # AMD Instinct MI350X datasheet: 288 GB HBM3E, 8 TB/s, 2.3 PFLOPS bf16 dense, 4.6 fp8 and 9.2 fp4 (MXFP4)
        # dense (the MI355X's silicon at 2.2 GHz, not 2.4), PCIe Gen5 x16, the MI355X's 7 Infinity Fabric links of
        # 153.6 GB/s (AMD's MI350X specifications; taken as 537.6 GB/s each way). ROCm's torch: taken as the MI355X's 287.98 GiB (the
        # same 288 GB of HBM3E; "MI350X (294 GB)", i.e. 294,892 MiB, in a public GitHub file found by code search,
        # and gfx950's HIP out-of-memory messages "total capacity of 287.98 GiB" in many).
        _g(
            "mi350x",
            294892 * MIB,
            8.0e12,
            2300e12,
            64e9,
            "AMD Instinct MI350X accelerator datasheet",
            fp8=4600e12,
            fp4=9200e12,
            peer=537.6e9,
        ),
    )
}


def _with_topology(g: Gpu) -> Gpu:
    host, domain, links = TOPOLOGY.get(g.name, (0, 0, 0))
    return dataclasses.replace(
        g,
        arch=ARCHS[g.name],
        gpus_per_host=host,
        peer_domain=domain,
        peer_links=links,
        network_bandwidth=NETWORK.get(g.name, 0.0),
        pcie_p2p=g.name not in NO_PCIE_P2P,
    )


GPUS = {n: _with_topology(g) for n, g in GPUS.items()}
