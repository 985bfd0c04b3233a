"""`python -m kvsim.analysis.startup_check`: kvsim's start-up figures against real vLLM start-up logs, term by
term, printed as the Markdown of results/startup.md (DESIGN.md §Defaults and sizing, "Checked against real
logs").

The logs are `vllm_startup_logs.csv` beside this module: vLLM 0.19.0 on H100 80GB HBM3 GPUs, the runs of
models kvsim has presets for (its header names the source). Each row is configured as the run was
(`SimConfig.preset("vllm-0.19", ...)`: 0.19.0's rules, which log the CUDA-graph estimate but do not subtract
it) and compared on

- the weights ("Model loading took"), the activation peak, non-torch memory and the CUDA-graph estimate
  (the terms vLLM's profiler logs);
- the KV cache memory sized from the GPU ("Available KV cache memory");
- the blocks and the concurrency kvsim cuts from the KV cache memory the log reports (vLLM rounds it to
  hundredths of a GiB, so the blocks of both ends of that interval are given): the layout alone.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from kvsim.model.units import fmt_count

GIB = 1 << 30
LOGS = Path(__file__).with_name("vllm_startup_logs.csv")
SOURCE = (
    "https://github.com/llm-d-incubation/llm-d-planner/blob/d3121e059da88662db39a926a3ead964be97359b/"
    "accuracy/results/v0.19.0/logs/"
)


@dataclass(frozen=True)
class Row:
    """One logged start-up and kvsim's figures for it (GiB unless named otherwise)."""

    log: dict[str, str]
    weights: float
    activation: float
    non_torch: float
    cudagraph: float
    available: float
    blocks: tuple[int, int]
    concurrency: float

    @property
    def multimodal(self) -> bool:
        return self.log["multimodal"] == "1"

    def logged(self, key: str) -> float:
        return float(self.log[key])


def logs() -> list[dict[str, str]]:
    """The logged start-ups (`vllm_startup_logs.csv`, its `#` header lines skipped)."""
    with LOGS.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def config_kwargs(log: dict[str, str]) -> dict[str, object]:
    """The `SimConfig` fields of a logged run (beside its pool)."""
    kw: dict[str, object] = {
        "model": log["kvsim_model"],
        "tensor_parallel_size": int(log["tp"]),
        "max_model_len": int(log["max_model_len"]),
        "enable_prefix_caching": False,
    }
    if log["kv_cache_dtype"] != "auto":
        kw["kv_cache_dtype"] = log["kv_cache_dtype"]
    if log["quantization"] == "fp8":  # vllm serve --quantization fp8 (a checkpoint's own is in its config)
        kw["quantization"] = "fp8"
    return kw


def check(log: dict[str, str]) -> Row:
    """kvsim's figures for one logged run."""
    from kvsim.model.config import SimConfig
    from kvsim.model.memory import cudagraph_estimate
    from kvsim.model.models import get

    kw = config_kwargs(log)
    on_gpu = SimConfig.preset(
        "vllm-0.19", gpu="h100-80gb", gpu_memory_utilization=float(log["gpu_memory_utilization"]), **kw
    )
    pool = on_gpu.pool
    fig = pool.figures
    assert fig is not None
    assert fig.available_kv_bytes is not None
    assert pool.activation_reserve_bytes is not None
    assert pool.non_torch_bytes is not None
    model = get(log["kvsim_model"])
    graphs = cudagraph_estimate(
        model, on_gpu.max_num_seqs, on_gpu.max_num_batched_tokens, int(log["tp"]), blackwell=False
    )
    ends = []
    for delta in (-0.005, 0.005):
        cut = SimConfig.preset(
            "vllm-0.19", kv_cache_bytes=int((float(log["available_gib"]) + delta) * GIB), **kw
        )
        assert cut.pool.figures is not None
        ends.append(cut.pool.figures)
    at_log = SimConfig.preset("vllm-0.19", kv_cache_bytes=int(float(log["available_gib"]) * GIB), **kw)
    assert at_log.pool.figures is not None
    return Row(
        log,
        weights=fig.model_loading_bytes / GIB,
        activation=pool.activation_reserve_bytes / GIB,
        non_torch=pool.non_torch_bytes / GIB,
        cudagraph=graphs / GIB,
        available=fig.available_kv_bytes / GIB,
        blocks=(ends[0].num_blocks, ends[1].num_blocks),
        concurrency=at_log.pool.figures.max_concurrency,
    )


def rows() -> list[Row]:
    return [check(log) for log in logs()]


def table(checked: list[Row] | None = None) -> str:
    """The Markdown of results/startup.md's table: each run's figures, vLLM's / kvsim's."""
    checked = rows() if checked is None else checked
    out = [
        "| run (log) | weights | activation | non-torch | CUDA graphs (est.) | available KV | blocks from the logged KV "
        "| concurrency |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in checked:
        log = r.log
        flags = f"tp {log['tp']}, {int(log['max_model_len']):,} tokens"
        if log["kv_cache_dtype"] != "auto":
            flags += f", kv {log['kv_cache_dtype']}"
        if log["quantization"]:
            flags += f", {log['quantization']}"
        mm = " (multimodal)" if r.multimodal else ""
        lo, hi = r.blocks
        blocks = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
        out.append(
            f"| [{log['checkpoint']}]({SOURCE}{log['log_file']}){mm}, {flags} "
            f"| {r.logged('weights_gib'):.2f} / {r.weights:.2f} "
            f"| {r.logged('activation_gib'):.2f} / {r.activation:.2f} "
            f"| {r.logged('non_torch_gib'):.2f} / {r.non_torch:.2f} "
            f"| {r.logged('cudagraph_estimated_gib'):.2f} / {r.cudagraph:.2f} "
            f"| {r.logged('available_gib'):.2f} / {r.available:.2f} "
            f"| {int(log['kv_cache_blocks']):,} / {blocks} "
            f"| {r.logged('max_concurrency'):.2f} / {r.concurrency:.2f} |"
        )
    return "\n".join(out)


def summary(checked: list[Row] | None = None) -> str:
    """The largest differences, text-only models and multimodal ones apart."""
    checked = rows() if checked is None else checked
    lines = []
    for label, part in (
        ("text-only models", [r for r in checked if not r.multimodal]),
        ("multimodal models", [r for r in checked if r.multimodal]),
    ):
        if not part:
            continue

        def worst(key: str, attr: str, rs: list[Row] = part) -> str:
            d = max((getattr(r, attr) - r.logged(key) for r in rs), key=abs)
            return f"{d:+.2f}"

        exact = sum(lo - 1 <= int(r.log["kv_cache_blocks"]) <= hi + 1 for r in part for lo, hi in [r.blocks])
        lines.append(
            f"- {label} ({fmt_count(len(part), 'run')}): largest difference kvsim - vLLM in GiB: weights {worst('weights_gib', 'weights')}, "
            f"activation {worst('activation_gib', 'activation')}, non-torch {worst('non_torch_gib', 'non_torch')}, "
            f"CUDA-graph estimate {worst('cudagraph_estimated_gib', 'cudagraph')}, available KV "
            f"{worst('available_gib', 'available')}; blocks cut from the logged KV memory within a block of vLLM's: "
            f"{exact} of {len(part)}"
        )
    return "\n".join(lines)


def document() -> str:
    """results/startup.md: the table and the summary, with what they are."""
    checked = rows()
    return "\n".join(
        [
            "# kvsim's start-up figures against real vLLM start-up logs",
            "",
            "Made by `python -m kvsim.analysis.startup_check > results/startup.md` (DESIGN.md §Defaults and sizing,",
            '"Checked against real logs"). Each row is one `vllm serve` start-up of vLLM 0.19.0 on H100 80GB HBM3',
            "GPUs (`gpu_memory_utilization` 0.95, prefix caching off; llm-d-incubation/llm-d-planner's sweep, commit",
            "d3121e0, Apache-2.0: each run links its log) and kvsim configured as it was",
            "(`SimConfig.preset(\"vllm-0.19\", ...)`); each cell is vLLM's figure / kvsim's, in GiB. vLLM 0.19.0",
            "logs its CUDA-graph estimate but does not subtract it. The blocks are those kvsim cuts from the KV memory",
            "vLLM logged, from both ends of its rounding to hundredths of a GiB (the layout alone). The weights",
            "are what vLLM's \"Model loading took\" counts: multimodal checkpoints' towers and every model's",
            'rotary caches with the language model (DESIGN.md §Defaults and sizing, "What loads beside the',
            "weights\"); what is left is PyTorch's allocator rounding, which kvsim does not model.",
            "",
            table(checked),
            "",
            summary(checked),
            "",
        ]
    )


if __name__ == "__main__":
    print(document(), end="")
