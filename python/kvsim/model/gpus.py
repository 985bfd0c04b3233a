"""GPU presets: memory, HBM bandwidth, peak dense fp16/bf16 FLOP/s and PCIe bandwidth (SPEC §2, §5).

`memory_bytes` is the total device memory the driver reports (`nvidia-smi` / `torch.cuda.mem_get_info`,
which vLLM's `gpu_memory_utilization` multiplies), in bytes; the marketing "GB" is close to but not the
same number. `hbm_bandwidth` and `peak_flops` are datasheet peaks (dense, no structured sparsity).
`pcie_bandwidth` is one direction of the host link (datasheets quote both directions added), which
is what a swap-out or swap-in crosses.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.errors import InvalidArgumentError

MIB = 1 << 20


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
    """

    name: str
    memory_bytes: int
    hbm_bandwidth: float
    peak_flops: float
    pcie_bandwidth: float
    source: str = ""


GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        # Turing whitepaper (RTX 2070 Founders Edition): 8 GB GDDR6, 448 GB/s, 59.7 TFLOPS fp16 tensor
        # (fp16 accumulate; GeForce halves fp32-accumulate); PCIe 3.0 x16 (~16 GB/s each way).
        Gpu(
            "rtx-2070", 8192 * MIB, 448e9, 59.7e12, 16e9, "NVIDIA Turing architecture whitepaper, Appendix A"
        ),
        # A100 datasheet (SXM4 40GB): 1,555 GB/s, 312 TFLOPS bf16/fp16 dense, PCIe Gen4 64 GB/s (both ways).
        Gpu("a100-40gb", 40960 * MIB, 1555e9, 312e12, 32e9, "NVIDIA A100 Tensor Core GPU datasheet"),
        # A100 datasheet (SXM4 80GB): 2,039 GB/s, 312 TFLOPS dense, PCIe Gen4.
        Gpu("a100-80gb", 81920 * MIB, 2039e9, 312e12, 32e9, "NVIDIA A100 Tensor Core GPU datasheet"),
        # H100 datasheet (SXM5 80GB): 3.35 TB/s, 989 TFLOPS bf16 dense (1,979 with sparsity), PCIe Gen5
        # 128 GB/s (both ways); nvidia-smi reports 81,559 MiB.
        Gpu("h100-80gb", 81559 * MIB, 3.35e12, 989.4e12, 64e9, "NVIDIA H100 Tensor Core GPU datasheet"),
        # H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, 989 TFLOPS bf16 dense, PCIe Gen5; nvidia-smi
        # reports 143,771 MiB.
        Gpu("h200", 143771 * MIB, 4.8e12, 989.4e12, 64e9, "NVIDIA H200 Tensor Core GPU datasheet"),
        # L4 datasheet: 24 GB GDDR6, 300 GB/s, 121 TFLOPS bf16 dense (242 with sparsity), PCIe Gen4 x16;
        # nvidia-smi reports 23,034 MiB.
        Gpu("l4", 23034 * MIB, 300e9, 121e12, 32e9, "NVIDIA L4 Tensor Core GPU datasheet"),
    )
}


def vllm_server_batch_defaults(gpu: Gpu) -> tuple[int, int]:
    """`(max_num_batched_tokens, max_num_seqs)` that vLLM's OpenAI server (`vllm serve`) picks on `gpu`
    when neither is given (vLLM 0.33.0's `EngineArgs.get_batch_defaults`): 16384 and 1024 on a GPU of at
    least 160 GiB (B200), 8192 and 1024 on one of at least 70 GiB that is not an A100 (H100, H200), else
    2048 and 256. kvsim's own defaults (`kvsim.model.config.KNOBS`) do not depend on the GPU; `kvsim run`
    notes the difference."""
    if gpu.memory_bytes >= 160 * 2**30:
        return 16384, 1024
    if gpu.memory_bytes >= 70 * 2**30 and "a100" not in gpu.name:
        return 8192, 1024
    return 2048, 256


def names() -> list[str]:
    """The preset names, sorted."""
    return sorted(GPUS)


def get(name: str) -> Gpu:
    """The preset called `name`: `rtx-2070`, `a100-40gb`, `a100-80gb`, `h100-80gb`, `h200`, `l4`.

    Raises:
        InvalidArgumentError: an unknown name; the message lists the known ones.
    """
    try:
        return GPUS[name]
    except KeyError:
        import difflib

        low = str(name).lower()
        close = [n for n in names() if n.startswith(low)] or difflib.get_close_matches(low, names(), 2, 0.75)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise InvalidArgumentError(f"unknown GPU {name!r}{hint}; known: {', '.join(names())}") from None


__all__ = ["GPUS", "Gpu", "get", "names", "vllm_server_batch_defaults"]
