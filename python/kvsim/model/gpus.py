"""GPU presets: memory, HBM bandwidth, peak dense FLOP/s per dtype and host link (SPEC §2, §5), and GPUs
described by the user (`from_spec`, `from_file`: flags or a small TOML/JSON file).

`memory_bytes` is the total device memory CUDA reports (`torch.cuda.mem_get_info()`'s total, what vLLM's
`gpu_memory_utilization` multiplies: `request_memory` in `vllm/v1/worker/utils.py`), in bytes: less than
`nvidia-smi`'s total (an H100 SXM: 79.19 GiB where nvidia-smi says 81,559 MiB) and the marketing "GB".
Each figure is as PyTorch's out-of-memory messages, `torch.cuda.get_device_properties` or vLLM's start-up
lines print it on Linux, with its source; it moves by up to ~0.1 GiB between driver releases (A100-80GB:
79.15 GiB on driver 12.2, 79.25-79.26 on 12.5 and later), so the newest seen is taken. `hbm_bandwidth` and the FLOP rates are datasheet
peaks, dense (no structured sparsity: datasheets quoting "with sparsity" are halved); GeForce cards are
given at their FP32-accumulate tensor rate (what bf16 GEMMs use), which their whitepapers list at half
the FP16-accumulate rate. `pcie_bandwidth` is one direction of the host link (datasheets quote both
directions added), which is what a swap-out or swap-in crosses. The time model prices FLOPs at
`peak_flops` (bf16), a GEMM whose weights and activations both run at fp8 or fp4 at `fp8_flops` or
`fp4_flops` (`kvsim.model.timing._flops`; 0: no tensor-core support for that dtype, bf16's rate taken).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kvsim.errors import InvalidArgumentError
from kvsim.model.gpu_presets import GIB, GPUS, Gpu  # (re-exported: the presets' records)
from kvsim.model.gpu_tables import TOPOLOGY

# How `vllm serve` picks `--max-num-batched-tokens` and `--max-num-seqs` when they are not given
# (`EngineArgs.get_batch_defaults`, read in each release's wheel): `serve-0.28` is 0.28.0 to 0.34.0 (a tier
# for GPUs of at least 160 GiB), `serve-0.9` is 0.9.0 to 0.27.1 (70 GiB and not an A100, else the small
# tier), `v0` is the v0 engine (256 sequences, max(max_model_len, 2048) tokens with chunked prefill off).
BATCH_RULES = ("serve-0.28", "serve-0.9", "v0")


def vllm_server_batch_defaults(
    gpu: Gpu | None, rule: str = "serve-0.28", max_model_len: int = 2048
) -> tuple[int, int]:
    """`(max_num_batched_tokens, max_num_seqs)` that vLLM's OpenAI server (`vllm serve`) picks on `gpu`
    when neither is given, by `rule` (`BATCH_RULES`). vLLM 0.33.0's `EngineArgs.get_batch_defaults`
    (`serve-0.28`, from 0.28.0): 16384 and 1024 on a GPU of at least 160 GiB (B200, MI300X), 8192 and
    1024 on one of at least 70 GiB that is not an A100 (H100, H200), else 2048 and 256; 0.9.0 to 0.27.1
    (`serve-0.9`) had no 160 GiB tier; the v0 engine (`v0`) took 256 sequences and, chunked prefill off,
    max(max_model_len, 2048) tokens. 0.33.0 also keeps NVIDIA's GB10 (DGX Spark, compute capability 12.1:
    `is_device_capability((12, 1))`) off the 70 GiB tier, "the memory but not the compute of a large discrete
    GPU": a GPU of arch `sm_121` below 160 GiB takes the small tier (no preset is a GB10; describe one with
    `arch = "sm_121"`). `kvsim.model.config.SimConfig` applies vLLM's caps on top (`max_num_seqs` at most the
    tokens). `v0` reads no GPU (`gpu` may be None); the `serve-*` rules need one."""
    if rule not in BATCH_RULES:
        raise InvalidArgumentError(f"batch_rule {rule!r} is not one of {', '.join(BATCH_RULES)}")
    if rule == "v0":
        return max(max_model_len, 2048), 256
    if gpu is None:
        raise InvalidArgumentError(f"batch_rule {rule!r} picks by the GPU's memory, and no GPU is given")
    if rule == "serve-0.28" and gpu.memory_bytes >= 160 * GIB:
        return 16384, 1024
    if gpu.memory_bytes >= 70 * GIB and "a100" not in gpu.name.lower() and gpu.arch != "sm_121":
        return 8192, 1024
    return 2048, 256


def is_rocm(arch: str | None) -> bool:
    """Whether `arch` is an AMD GPU's (`gfxNNN`: MI300X gfx942, MI350X / MI355X gfx950), run by vLLM's ROCm
    platform and its own files."""
    return arch is not None and arch.startswith("gfx")


def sm_capability(arch: str | None) -> int | None:
    """A CUDA arch's compute capability as vLLM compares it (`sm_90` 90, `sm_100` 100, `sm_120` 120: its
    `DeviceCapability.to_int`), None for ROCm's, none or one not spelt `sm_` and digits. The one parser the
    rules by capability read (`datacenter_blackwell`, `sizing.check_capability`, `dsa`'s backends) and
    `from_spec`'s check of a described arch."""
    if arch is None or not arch.startswith("sm_") or not arch[3:].isdigit():
        return None
    return int(arch[3:])


def datacenter_blackwell(arch: str | None) -> bool:
    """Whether `arch` is compute capability 10.x (B200, GB200: sm_100; B300, GB300: sm_103), the family vLLM
    0.33.0's `is_device_capability_family(100)` tests (its 1024-wide CUDA graph ceiling, FlashInfer's MLA and
    TRT-LLM MoE kernels, GLM-5's fp8 KV cache)."""
    cap = sm_capability(arch)
    return cap is not None and cap // 10 == 10


# The preset a CUDA/ROCm device name (`torch.cuda.get_device_name`) is, most specific first (`h200 nvl`
# before `h200`, `gb200` before `b200`, `a100` before `a10`, `l40s` before `l40` before `l4`); a variant without
# a preset of its own (H100 NVL, RTX PRO 6000 Workstation Edition) matches none.
_DEVICE_NAMES = (
    (r"\bh200 nvl\b", "h200-nvl"),
    (r"\bh200\b", "h200"),
    (r"\bh100 nvl\b", None),
    (r"\bh100 pcie\b", "h100-pcie"),
    (r"\bh100\b", "h100-80gb"),
    (r"\bh20\b", "h20"),
    (r"\bgb300\b", "gb300"),
    (r"\bb300\b", "b300"),
    (r"\bgb200\b", "gb200"),
    (r"\bb200\b", "b200"),
    (r"\ba100\b.*\b80\s*gb\b", "a100-80gb"),
    (r"\ba100\b", "a100-40gb"),
    (r"\ba10g\b", "a10g"),
    (r"\ba10\b", "a10"),
    (r"\bl40s\b", "l40s"),
    (r"\bl40\b", "l40"),
    (r"\bl4\b", "l4"),
    (r"\brtx 6000 ada\b", "rtx-6000-ada"),
    (r"\brtx pro 6000 blackwell server\b", "rtx-pro-6000"),
    (r"\brtx pro 6000\b", None),
    (r"\brtx 2070\b", "rtx-2070"),
    (r"\brtx 3090\b", "rtx-3090"),
    (r"\brtx 4090\b", "rtx-4090"),
    (r"\brtx 5090\b", "rtx-5090"),
    (r"\bmi300x\b", "mi300x"),
    (r"\bmi325x\b", "mi325x"),
    (r"\bmi350x\b", "mi350x"),
    (r"\bmi355x\b", "mi355x"),
)


def preset_for_device(device_name: str) -> str | None:
    """The preset a device name as torch reports it is (`NVIDIA H200 NVL` -> `h200-nvl`, `NVIDIA L40S` ->
    `l40s`, `NVIDIA A100-SXM4-80GB` -> `a100-80gb`), else None (a GPU without a preset)."""
    import re

    name = re.sub(r"[-_]", " ", device_name.lower())
    for pattern, preset in _DEVICE_NAMES:
        if re.search(pattern, name):
            return preset
    return None


def names() -> list[str]:
    """The preset names, sorted."""
    return sorted(GPUS)


def get(name: str) -> Gpu:
    """The preset called `name` (`names()`: `h100-80gb`, `b200`, `rtx-4090`, `mi300x`, ...).

    Raises:
        InvalidArgumentError: an unknown name; the message lists the known ones.
    """
    try:
        return GPUS[name]
    except KeyError:
        import difflib

        low = str(name).lower()
        if low in GPUS:
            return GPUS[low]
        close = [n for n in names() if n.startswith(low)] or difflib.get_close_matches(low, names(), 2, 0.75)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise InvalidArgumentError(
            f"unknown GPU {name!r}{hint}; known: {', '.join(names())}; or a GPU file (.toml / .json) or "
            "--gpu-memory with the other --gpu-* flags"
        ) from None


# A described GPU's fields: (key, unit) -> the Gpu field. Sizes take units (48GiB), rates GB/s or TB/s
# (bytes per second: 864GB/s), FLOP rates TFLOPS as a plain number.
SPEC_KEYS = (
    "name",
    "memory",
    "bandwidth",
    "tflops",
    "fp8_tflops",
    "fp4_tflops",
    "link",
    "peer_link",
    "peer_links",
    "peer_domain",
    "gpus_per_host",
    "network",
    "arch",
    "pcie_p2p",
)


def _rate(key: str, value: Any, where: str) -> float:
    """A bandwidth in bytes per second: a number, or text with a unit (`864GB/s`, `3.35TB/s`, `32 GB/s`)."""
    import math
    import re

    if isinstance(value, bool):
        raise InvalidArgumentError(f"{where}: {key} {value!r} must be a bandwidth such as 864GB/s")
    if isinstance(value, int | float):
        rate = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKMGT]?)(i?)B/s\s*", str(value))
        if not m:
            raise InvalidArgumentError(
                f"{where}: {key} {value!r} is not a bandwidth (a number of bytes per second, or 864GB/s, 3.35TB/s)"
            )
        base = 1024 if m.group(3) else 1000
        rate = float(m.group(1)) * base ** " kMGT".index((m.group(2) or " ").replace("K", "k"))
    if not (math.isfinite(rate) and rate > 0):
        raise InvalidArgumentError(f"{where}: {key} {value!r} must be a positive bandwidth")
    return rate


def _tflops(key: str, value: Any, where: str, required: bool) -> float:
    import math

    if value is None and not required:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidArgumentError(f"{where}: {key} {value!r} must be a number of TFLOPS")
    try:
        v = float(value)
    except ValueError:
        raise InvalidArgumentError(f"{where}: {key} {value!r} must be a number of TFLOPS") from None
    if not (math.isfinite(v) and v > 0):
        raise InvalidArgumentError(f"{where}: {key} {value!r} must be a positive number of TFLOPS")
    return v * 1e12


def from_spec(spec: dict[str, Any], where: str = "gpu", base: Gpu | None = None) -> Gpu:
    """A `Gpu` from a description: `memory` (a size: `48GiB`), `bandwidth` (`864GB/s`), `tflops` (dense
    bf16), `fp8_tflops`, `fp4_tflops`, `link` (host link, one direction: `32GB/s`), `peer_link` (GPU-to-GPU link such as NVLink,
    one direction; unset: the host link), `peer_links` (0: a switch; N: a full mesh of N links sharing
    `peer_link`), `peer_domain` (GPUs the peer link joins), `gpus_per_host` (0: unknown), `network` (the NIC a GPU
    between hosts, one direction: `50GB/s`; unset: `base`'s, else a 400 Gb/s NIC), `arch` (`sm_90`, `gfx942`: the kernels vLLM picks), `pcie_p2p`
    (a bool: whether two of them do peer-to-peer over PCIe; unset: `base`'s, else None, not known, taken
    as true, as a datacenter card's, and said to be assumed: a GeForce card described without a base says
    false), `name`. With `base` (a
    preset), the keys given replace its figures; without, `memory`, `bandwidth` and `tflops` are needed
    and `link` defaults to PCIe 4.0's 32 GB/s. The same numbers give the same answers as a preset.

    Raises:
        InvalidArgumentError: an unknown key, a missing figure or a bad value, naming it and `where`.
    """
    from kvsim.model.units import parse_bytes

    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise InvalidArgumentError(f"{where}: unknown key {unknown[0]!r}; a GPU takes {', '.join(SPEC_KEYS)}")
    import re

    memory = spec.get("memory")
    bare = re.fullmatch(r"\s*([0-9][0-9_]*(?:\.[0-9]*)?)\s*", memory) if isinstance(memory, str) else None
    if bare:
        # (as `bandwidth` refuses `864`: text without a unit is a unit forgotten, not bytes; user52)
        number = bare.group(1)
        in_bytes = "" if "." in number else f", or bytes as {number}B"
        # (a count of bytes, 1 MiB or more, means bytes; a small one GiB, as the flag's help writes it)
        meant = f"{number}B" if float(number.replace("_", "")) >= 2**20 else f"{number}GiB"
        raise InvalidArgumentError(
            f"{where}: memory {memory!r} is not a size (a number with its unit: 48GiB, 23034MiB{in_bytes}): did "
            f"you mean {meant}?"
        )
    missing = [k for k in ("memory", "bandwidth", "tflops") if spec.get(k) is None]
    if base is None and missing:
        raise InvalidArgumentError(
            f"{where}: a GPU needs {', '.join(missing)} (memory 48GiB, bandwidth 864GB/s, tflops 362)"
        )
    fields: dict[str, Any] = {} if base is None else dataclasses.asdict(base)
    if spec.get("memory") is not None:
        try:
            fields["memory_bytes"] = parse_bytes("memory", spec["memory"])
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{where}: {exc}") from None
        if fields["memory_bytes"] < 1:
            raise InvalidArgumentError(f"{where}: memory {spec['memory']!r} must be above 0")
    if spec.get("bandwidth") is not None:
        fields["hbm_bandwidth"] = _rate("bandwidth", spec["bandwidth"], where)
    if spec.get("tflops") is not None:
        fields["peak_flops"] = _tflops("tflops", spec["tflops"], where, True)
    for key, attr in (("fp8_tflops", "fp8_flops"), ("fp4_tflops", "fp4_flops")):
        if key in spec:
            fields[attr] = _tflops(key, spec[key], where, False)
    if spec.get("link") is not None:
        fields["pcie_bandwidth"] = _rate("link", spec["link"], where)
    if spec.get("peer_link") is not None:
        fields["peer_bandwidth"] = _rate("peer_link", spec["peer_link"], where)
    if spec.get("network") is not None:
        fields["network_bandwidth"] = _rate("network", spec["network"], where)
    for key in ("peer_links", "peer_domain", "gpus_per_host"):
        if spec.get(key) is not None:
            v = spec[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidArgumentError(
                    f"{where}: {key} {v!r} must be a whole number of at least 0 (0: unknown)"
                )
            fields[key] = v
    if spec.get("arch") is not None:
        import re

        arch = spec["arch"]
        if not isinstance(arch, str) or not re.fullmatch(r"sm_[0-9]{2,3}|gfx[0-9a-f]{3,4}", arch):
            raise InvalidArgumentError(
                f"{where}: arch {arch!r} must be sm_XY (an NVIDIA GPU of compute capability X.Y: sm_90) or "
                "gfxNNN (an AMD GPU: gfx942)"
            )
        cap = sm_capability(arch)
        if cap is not None:
            major, minor = divmod(cap, 10)
            if arch != f"sm_{cap}" or major < 6 or major > 12:
                # vLLM 0.33.0 runs on compute capability 6.0 and up ("Kepler and Maxwell NVIDIA GPUs ... vLLM
                # doesn't support these GPUs": `CudaPlatformBase.supported_dtypes`) and decides by families up
                # to 12.x; `sm_10` is 1.0, not Blackwell's 10.0 (`sm_100`), which some of kvsim's rules would
                # otherwise have read it as; `sm_089` (a leading zero) is no spelling vLLM uses.
                raise InvalidArgumentError(
                    f"{where}: arch {arch!r} is compute capability {major}.{minor}: vLLM 0.33.0 and 0.34.0 run on "
                    "6.0 and up and have rules for families up to 12.x (sm_90 is 9.0, sm_100 10.0, sm_103 10.3, "
                    "sm_121 12.1); leave arch unset for a GPU it has no rules for"
                )
        fields["arch"] = arch
    if spec.get("pcie_p2p") is not None:
        if not isinstance(spec["pcie_p2p"], bool):
            raise InvalidArgumentError(
                f"{where}: pcie_p2p {spec['pcie_p2p']!r} must be true or false (unquoted in a TOML file): "
                "whether two of these GPUs do peer-to-peer over PCIe (unset: the base preset's, else true)"
            )
        fields["pcie_p2p"] = spec["pcie_p2p"]
    fields.setdefault("pcie_bandwidth", 32e9)
    fields.setdefault("fp8_flops", 0.0)
    fields.setdefault("fp4_flops", 0.0)
    fields.setdefault("peer_bandwidth", 0.0)
    fields.setdefault("network_bandwidth", 0.0)
    fields.setdefault("arch", "")
    for key in ("peer_links", "peer_domain", "gpus_per_host"):
        fields.setdefault(key, 0)
    name = spec.get("name") or (f"{base.name}-custom" if base is not None else "custom-gpu")
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentError(f"{where}: name {name!r} must be a non-empty string")
    fields["name"] = name
    # (`pcie_p2p` unset and no base: None, not known, and the time line says P2P is assumed)
    fields["source"] = f"described by {where}"
    return Gpu(**fields)


def from_file(path: str | Path) -> Gpu:
    """A `Gpu` from a TOML or JSON file of `from_spec`'s keys (a `[gpu]` table, or top-level keys); a
    `preset` key starts from that preset.

    Raises:
        InvalidArgumentError: an unreadable file or a bad description, naming the file.
    """
    import json
    import tomllib

    p = Path(path)
    where = f"GPU file {p}"
    try:
        text = p.read_text()
        data = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidArgumentError(f"{where}: cannot read it: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("gpu"), dict):
        beside = sorted(k for k in data if k != "gpu")
        if beside:
            # (a key beside the `[gpu]` table was read by nothing)
            raise InvalidArgumentError(
                f"{where}: unknown key {beside[0]!r} beside the [gpu] table; a GPU's keys go in it"
            )
        data = data["gpu"]
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{where}: must hold a table of {', '.join(SPEC_KEYS)}")
    data = dict(data)
    base = get(str(data.pop("preset"))) if "preset" in data else None
    data.setdefault("name", p.stem)
    return from_spec(data, where, base)


def resolve(gpu: Gpu | str) -> Gpu:
    """A `Gpu` from a `Gpu`, a preset name (case-insensitive), or a GPU file path (`.toml` / `.json`)."""
    if isinstance(gpu, Gpu):
        return gpu
    if isinstance(gpu, str) and (
        gpu.lower().endswith((".toml", ".json")) or ("/" in gpu and Path(gpu).exists())
    ):
        return from_file(gpu)
    return get(gpu)


__all__ = [
    "BATCH_RULES",
    "GPUS",
    "SPEC_KEYS",
    "TOPOLOGY",
    "Gpu",
    "datacenter_blackwell",
    "from_file",
    "from_spec",
    "get",
    "names",
    "preset_for_device",
    "resolve",
    "vllm_server_batch_defaults",
]
