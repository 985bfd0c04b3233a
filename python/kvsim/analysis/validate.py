"""Step time checked against real GPUs: each real vLLM serving run replayed through kvsim
(`python -m kvsim.analysis.validate`, DESIGN.md §Time model, "Validation").

The runs are LLMServingSim's (casys-kaist/LLMServingSim, MIT; `../shared/validation/llmservingsim/runs`):
vLLM 0.19.0 serving 300 ShareGPT-GPT4 requests on RTX PRO 6000 Blackwell GPUs, every request with a fixed
output length, prefix caching, chunked prefill and CUDA graphs on, with each request's engine timestamps.
Each is replayed as it ran: a run of a release that schedules asynchronously by default (`ASYNC_RELEASES`, all
three) with kvsim's `async_scheduling` rule on from the front end's `arrival_time` (`async_replay`; with
`--sync-scheduling`, as kvsim replayed them before 2026-12-07, from `queued_ts` without the rule, for
comparison), and its own lengths, its serving configuration (`meta.json`:
model, tensor and data parallelism, expert parallelism, `max_num_seqs`, `max_num_batched_tokens`) and
vLLM 0.19's scheduler (`SimConfig.preset("vllm-0.19")`), under three time models: the roofline with
datasheet figures (`time_model="roofline"`, efficiencies 1), the roofline calibrated on the GPU's
per-operator profile (`calibration=` the shipped calibration of that GPU), and the old straight line
(`time_model="linear"`), and for a run over several GPUs the calibrated roofline once more with the collectives
over PCIe peer-to-peer (`calibrated-p2p`): the others stage them through host memory (`pcie_p2p=False`,
`P2P_EVIDENCE` says why; the runs record no P2P state). A data-parallel run is a fleet of `dp` replicas behind the least-loaded router
(vLLM's DP load balancer sends a request to the engine with the fewest waiting and running ones): of a
mixture-of-experts model, one DP group whose ranks step together (DESIGN.md §Data-parallel groups).

Metrics come from the request rows alike on both sides (`run_metrics`): TTFT (first token − arrival), TPOT
((last token − first token) / (output − 1)), E2E (last token − arrival), each's mean, p50, p90 and p99;
ITL's mean (all gaps pooled: Σ (last − first) / Σ (output − 1), which is what the measured rows allow,
they have no per-token times); output throughput (output tokens / (last finish − first arrival)); peak
running (scheduled, not finished) and peak waiting (arrived, not scheduled). `results/validation.md`
gives kvsim against the measured value and the relative error, and `results/plots/validation.png`
measured against simulated per-request TTFT and E2E.
"""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.errors import InvalidArgumentError, KvsimError

REPO = Path(__file__).resolve().parents[3]
SHARED = REPO.parent / "shared" / "validation"
RUNS = SHARED / "llmservingsim" / "runs"
COMMAND = "python -m kvsim.analysis.validate"
# The runs' names for GPUs and models, and kvsim's presets. Qwen3-30B-A3B-Instruct-2507 has the
# architecture fields of Qwen3-30B-A3B (layers, widths, heads, 128 experts of which 8 per token).
GPUS = {"RTXPRO6000": "rtx-pro-6000"}
MODELS = {
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b",
}
TIME_MODELS = ("roofline", "calibrated", "calibrated-p2p", "linear")
TIME_MODEL_NAMES = {
    "roofline": "roofline, datasheet",
    "calibrated": "roofline, calibrated",
    "calibrated-p2p": "calibrated, PCIe P2P",
    "linear": "linear (old)",
}
# The transport assumed for the multi-GPU runs' collectives (`SimConfig.pcie_p2p`; DESIGN.md §Time model, "The
# collectives' link"): staged through host memory, no PCIe peer-to-peer. The runs record no driver, NCCL log
# or P2P state (meta.json), so this is inferred: two RTX PRO 6000s commonly hang in NCCL's first all-reduce
# unless P2P is disabled (local-inference-lab/rtx6kpro#15, vllm-project/vllm#30317), and the runs' own
# LLMServingSim configuration (sim_config.json) assumes a 16 GB/s, 20 µs link for this host, a quarter of
# PCIe 5.0's 64. `calibrated-p2p` replays them with peer-to-peer, so the report shows both assumptions.
P2P_EVIDENCE = (
    "the runs record no P2P state (meta.json has no driver, NCCL or topology); host staging is inferred: two RTX "
    "PRO 6000s commonly hang in NCCL's first all-reduce unless P2P is disabled (local-inference-lab/rtx6kpro#15, "
    "vllm-project/vllm#30317); the TP-2 run's decode steps exceed kvsim's peer-to-peer ones by a per-token, "
    "context-free term absent from the TP-1 run, a slow collective link's signature; and LLMServingSim's own "
    "sim_config.json for these runs assumes a 16 GB/s, 20 µs link, a quarter of PCIe 5.0's 64 GB/s"
)


def host_staged_words(gpu: str = "rtx-pro-6000") -> str:
    """The host-staged collective's figures on `gpu` as the report and the claims' notes say them (one
    source: `collectives.HOST_STAGED_SHARE`, `HOST_STAGED_LATENCY_PS`, `roofline.COLLECTIVE_HOP_PS` and the
    GPU's host link), e.g. "16 GB/s, 14 µs a collective beside 3 µs a hop"."""
    from kvsim.model.collectives import HOST_STAGED_LATENCY_PS, HOST_STAGED_SHARE
    from kvsim.model.gpus import GPUS
    from kvsim.model.roofline import COLLECTIVE_HOP_PS

    rate = GPUS[gpu].pcie_bandwidth / HOST_STAGED_SHARE
    return (
        f"{rate / 1e9:g} GB/s, {HOST_STAGED_LATENCY_PS / 1e6:g} µs a collective beside "
        f"{COLLECTIVE_HOP_PS / 1e6:g} µs a hop"
    )


def two_gpu_all_reduce(gpu: str = "rtx-pro-6000") -> str:
    """A two-GPU all-reduce's host-staged rate and latency on `gpu` (two ring steps' hops and the staging's
    latency), e.g. "16 GB/s and 2 × 3 + 14 = 20 µs"."""
    from kvsim.model.collectives import HOST_STAGED_LATENCY_PS, HOST_STAGED_SHARE
    from kvsim.model.gpus import GPUS
    from kvsim.model.roofline import COLLECTIVE_HOP_PS

    rate = GPUS[gpu].pcie_bandwidth / HOST_STAGED_SHARE
    hop, lat = COLLECTIVE_HOP_PS / 1e6, HOST_STAGED_LATENCY_PS / 1e6
    return f"{rate / 1e9:g} GB/s and 2 × {hop:g} + {lat:g} = {2 * hop + lat:g} µs"


def fused_moe_range() -> str:
    """The fused-MoE curve's range of HBM fractions as the report says it ("0.44-0.84";
    `roofline.FUSED_MOE_MEMORY`)."""
    from kvsim.model.roofline import FUSED_MOE_MEMORY

    fractions = [f for _, f in FUSED_MOE_MEMORY]
    return f"{min(fractions):.2f}-{max(fractions):.2f}"


# The metrics of the report, in its order: (key, label, unit scale, whether the 10 % target applies).
METRICS = (
    ("ttft_mean", "TTFT mean", 1e3, True),
    ("ttft_p50", "TTFT p50", 1e3, True),
    ("ttft_p90", "TTFT p90", 1e3, False),
    ("ttft_p99", "TTFT p99", 1e3, False),
    ("tpot_mean", "TPOT mean", 1e3, True),
    ("tpot_p50", "TPOT p50", 1e3, True),
    ("tpot_p90", "TPOT p90", 1e3, False),
    ("tpot_p99", "TPOT p99", 1e3, False),
    ("e2e_mean", "E2E mean", 1e3, True),
    ("e2e_p50", "E2E p50", 1e3, True),
    ("e2e_p90", "E2E p90", 1e3, False),
    ("e2e_p99", "E2E p99", 1e3, False),
    ("itl_mean", "ITL mean", 1e3, True),
    ("throughput", "output tokens/s", 1.0, True),
    ("peak_running", "peak running", 1.0, False),
    ("peak_waiting", "peak waiting", 1.0, False),
)
TARGET = 0.10


@dataclass
class Run:
    """One measured run: its folder, config fields and per-request columns (seconds from its first
    arrival)."""

    name: str
    path: Path
    meta: dict[str, Any]
    gpu: str
    model: str
    arrival: np.ndarray
    scheduled: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    # `queued_ts` on the same clock as `arrival` (the same as it where `clock` is "queued_ts"), and the front
    # end's `arrival_time` (wall clock, NaN where a row has none), both in the run's order
    queued: np.ndarray
    sent: np.ndarray
    clock: str = "queued_ts"

    @property
    def engine(self) -> dict[str, Any]:
        return dict(self.meta.get("engine_kwargs") or {})


def load_run(path: Path) -> Run:
    """A run folder (`meta.json`, `requests.jsonl`).

    Raises:
        InvalidArgumentError: a missing or malformed file, or a model or GPU kvsim has no preset for.
    """
    try:
        meta = json.loads((path / "meta.json").read_text())
        rows = [
            json.loads(line) for line in (path / "requests.jsonl").read_text().splitlines() if line.strip()
        ]
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"run {path}: cannot read meta.json / requests.jsonl ({exc})") from None
    gpu_key = path.parent.name
    if gpu_key not in GPUS or meta.get("model") not in MODELS:
        raise InvalidArgumentError(
            f"run {path}: GPU {gpu_key!r} or model {meta.get('model')!r} has no kvsim preset (known: "
            f"{', '.join(GPUS)}; {', '.join(MODELS)})"
        )
    try:
        col = {
            k: np.array([float(r[k]) for r in rows])
            for k in ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
        }
        prompt = np.array([int(r["input_toks"]) for r in rows])
        output = np.array([int(r["output_toks"]) for r in rows])
        sent = np.array(
            [float(r["arrival_time"]) if r.get("arrival_time") is not None else np.nan for r in rows]
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"run {path}: requests.jsonl lacks a field ({exc!r})") from None
    t0 = col["queued_ts"].min()
    order = np.argsort(col["queued_ts"], kind="stable")
    return Run(
        name=f"{gpu_key}/{path.name}",
        path=path,
        meta=meta,
        gpu=GPUS[gpu_key],
        model=MODELS[meta["model"]],
        arrival=(col["queued_ts"] - t0)[order],
        scheduled=(col["scheduled_ts"] - t0)[order],
        first_token=(col["first_token_ts"] - t0)[order],
        finish=(col["last_token_ts"] - t0)[order],
        prompt_len=prompt[order],
        output_len=output[order],
        queued=(col["queued_ts"] - t0)[order],
        sent=sent[order],
    )


def missing_front_end(run: Run) -> int:
    """How many of `run`'s requests have no front-end `arrival_time`."""
    return int(np.count_nonzero(np.isnan(run.sent)))


def front_end_arrivals(run: Run) -> Run:
    """`run` with the front end's `arrival_time` as each request's arrival, put on the engine's clock: the
    two clocks (wall and monotonic) are linked by the request taken in soonest after it reached the front
    end, so each arrival is `queued_ts - (lag - min lag)`, `lag = queued_ts - arrival_time`; every column is
    shifted to the first such arrival and the requests put in its order (the default replay, `async_replay`,
    DESIGN.md §Time model, "Qwen3-30B-A3B's TTFT median").

    Raises:
        InvalidArgumentError: a request of `run` has no `arrival_time` (`missing_front_end`).
    """
    missing = missing_front_end(run)
    if missing:
        raise InvalidArgumentError(
            f"run {run.name}: {missing} of {len(run.sent)} requests have no arrival_time (the front end's arrival)"
        )
    lag = run.queued - run.sent
    arrival = run.queued - (lag - lag.min())
    order = np.argsort(arrival, kind="stable")
    t0 = arrival.min()
    return replace(
        run,
        arrival=(arrival - t0)[order],
        scheduled=(run.scheduled - t0)[order],
        first_token=(run.first_token - t0)[order],
        finish=(run.finish - t0)[order],
        prompt_len=run.prompt_len[order],
        output_len=run.output_len[order],
        queued=(run.queued - t0)[order],
        sent=run.sent[order],
        clock="arrival_time",
    )


def find_runs(root: Path = RUNS) -> list[Run]:
    """Every run under `root` (`<gpu>/<model>/`), in name order.

    Raises:
        InvalidArgumentError: no such folder (a clone without `../shared/validation`).
    """
    if not root.is_dir():
        raise InvalidArgumentError(
            f"no validation runs at {root} (the real measurements live in ../shared/validation beside the "
            "repository); give --runs DIR"
        )
    return [load_run(p) for p in sorted(root.glob("*/*")) if (p / "requests.jsonl").exists()]


def _peak(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most intervals [start, end) open at once."""
    events = np.concatenate(
        [np.stack([starts, np.ones_like(starts)], 1), np.stack([ends, -np.ones_like(ends)], 1)]
    )
    order = np.lexsort((events[:, 1], events[:, 0]))  # at a tie, ends (-1) before starts
    return int(np.max(np.cumsum(events[order, 1]), initial=0))


def run_metrics(
    arrival: np.ndarray, scheduled: np.ndarray, first: np.ndarray, finish: np.ndarray, output: np.ndarray
) -> dict[str, float]:
    """The report's metrics of one run's requests (module docstring), seconds and counts."""
    ttft, e2e = first - arrival, finish - arrival
    many = output > 1
    tpot = (finish[many] - first[many]) / (output[many] - 1)
    out: dict[str, float] = {}
    for name, v in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        out[f"{name}_mean"] = float(np.mean(v))
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = float(np.percentile(v, q))
    out["itl_mean"] = float(np.sum(finish[many] - first[many]) / np.sum(output[many] - 1))
    out["throughput"] = float(np.sum(output) / (finish.max() - arrival.min()))
    out["peak_running"] = _peak(scheduled, finish)
    out["peak_waiting"] = _peak(arrival, scheduled)
    return out


def workload(run: Run) -> Any:
    from kvsim.workloads import Workload

    return Workload(
        arrival=run.arrival,
        prompt_len=run.prompt_len,
        output_len=run.output_len,
        max_tokens=run.output_len,
    )


# vLLM releases checked to schedule asynchronously by default (DESIGN.md §Engine, "Asynchronous scheduling":
# on for want of an incompatible option, vllm-project/vllm#31998); the default replay runs them with kvsim's
# rule on from the front end's arrivals (`async_replay`) and the others as they are (`--sync-scheduling`: all
# from `queued_ts` without the rule).
ASYNC_RELEASES = ("0.19.0",)


def schedules_async(run: Run) -> bool:
    """Whether `run`'s vLLM release schedules asynchronously by default (`ASYNC_RELEASES`)."""
    return str(run.meta.get("vllm_version")) in ASYNC_RELEASES


def config(run: Run, time_model: str, async_scheduling: bool = False) -> Any:
    """The run's serving configuration under vLLM 0.19's rules and `time_model` (`TIME_MODELS`); with
    `async_scheduling`, the rule on where the run's release schedules asynchronously (`schedules_async`)."""
    from kvsim.model.config import SimConfig
    from kvsim.model.models import resolve

    e = run.engine
    dp = int(e.get("data_parallel_size") or 1)
    moe = resolve(run.model).num_experts > 0
    # (vLLM ignores enable_expert_parallel on a dense model; SimConfig refuses it there)
    ep = bool(e.get("enable_expert_parallel")) and moe
    kw: dict[str, Any] = {
        "model": run.model,
        "gpu": run.gpu,
        "tensor_parallel_size": int(e.get("tensor_parallel_size") or 1),
        # DP ranks are the fleet's replicas, one DP group stepping together (DESIGN.md §Data-parallel
        # groups); kvsim reads data_parallel_size only for a mixture-of-experts model, whose experts are
        # spread over every rank's GPUs (SimConfig refuses it on a dense model).
        "data_parallel_size": dp if moe else 1,
        "enable_expert_parallel": ep,
        "max_num_seqs": int(e["max_num_seqs"]),
        "max_num_batched_tokens": int(e["max_num_batched_tokens"]),
        "replicas": dp,
        "router": "least-loaded",
    }
    if async_scheduling and schedules_async(run):
        kw["async_scheduling"] = True
    if e.get("max_model_len"):
        kw["max_model_len"] = int(e["max_model_len"])
    if multi_gpu(run) and time_model != "linear":
        # (`P2P_EVIDENCE`: host staging assumed, peer-to-peer under `calibrated-p2p` for comparison; the
        # linear model prices no collectives, and SimConfig refuses a pcie_p2p it could not apply)
        kw["pcie_p2p"] = time_model == "calibrated-p2p"
    if time_model == "linear":
        kw["time_model"] = "linear"
    elif time_model in ("calibrated", "calibrated-p2p"):
        kw["calibration"] = calibration_for(run.gpu)
    return SimConfig.preset("vllm-0.19", **kw)


def multi_gpu(run: Run) -> bool:
    """Whether `run`'s model spans GPUs that exchange collectives: tensor parallelism, or a mixture-of-experts
    model's DP ranks (their all-gather and reduce-scatter)."""
    from kvsim.model.models import resolve

    e = run.engine
    tp, dp = int(e.get("tensor_parallel_size") or 1), int(e.get("data_parallel_size") or 1)
    return tp > 1 or (dp > 1 and resolve(run.model).num_experts > 0)


def calibration_for(gpu: str) -> str:
    """The shipped calibration of `gpu` (`kvsim.sizing.calibrations()`), by name.

    Raises:
        InvalidArgumentError: none shipped for it.
    """
    from kvsim.model.linear_time import calibrations

    names = [c for c in calibrations() if c.startswith(gpu + "-")]
    if not names:
        raise InvalidArgumentError(f"no shipped calibration for gpu {gpu!r} (kvsim calibrate makes one)")
    return names[0]


def simulate_run(run: Run, time_model: str, async_scheduling: bool = False) -> dict[str, Any]:
    """kvsim's replay of `run` under `time_model` (`config`'s `async_scheduling`): its metrics and
    per-request columns (seconds)."""
    from kvsim import simulate, simulate_cluster

    cfg = config(run, time_model, async_scheduling)
    w = workload(run)
    if cfg.replicas > 1:
        res: Any = simulate_cluster(w, cfg)
    else:
        res = simulate(w, cfg)
    rows = res.requests.sort("request_id")
    arrival = rows["arrival"].to_numpy()
    col = {k: rows[k].to_numpy() for k in ("first_scheduled", "first_token", "finish")}
    metrics = run_metrics(
        arrival, col["first_scheduled"], col["first_token"], col["finish"], rows["output_len"].to_numpy()
    )
    return {
        "metrics": metrics,
        "first_token": col["first_token"],
        "finish": col["finish"],
        "arrival": arrival,
        "config": cfg,
    }


def async_replay(run: Run) -> tuple[Run, bool, str]:
    """What the default replay (as the run ran) replays of `run`: the run, whether with the rule, and a
    sentence saying so. A run of a release that schedules asynchronously (`schedules_async`) is replayed with
    the rule from the front end's arrivals (`front_end_arrivals`), the clock the rule's admission a step later
    is defined against: `queued_ts` is stamped at a step boundary, so from it the rule would add a step the
    request already waited. Where its rows lack `arrival_time`, or its configuration is one kvsim does not
    model the rule for (`SimConfig` refuses it: a hybrid model, a CPU tier, a prefill pool), it is replayed
    from `queued_ts` without the rule, and the sentence says so; a run of another release is replayed as with
    `--sync-scheduling`."""
    if not schedules_async(run):
        return (
            run,
            False,
            (
                f"vLLM {run.meta.get('vllm_version')} is not a release kvsim knows to schedule asynchronously by "
                f"default ({', '.join(ASYNC_RELEASES)}): replayed from `queued_ts` without the rule."
            ),
        )
    try:
        config(run, "calibrated", async_scheduling=True)
    except InvalidArgumentError as exc:
        config(run, "calibrated")  # (an error of the run's own config, not the rule's, is raised as it is)
        return (
            run,
            False,
            (
                f"**vLLM {run.meta.get('vllm_version')} schedules asynchronously, but kvsim does not model the rule "
                f"for this run** ({exc}): replayed from `queued_ts` without the rule, as with `--sync-scheduling`."
            ),
        )
    missing = missing_front_end(run)
    if missing:
        return (
            run,
            False,
            (
                f"**{missing} of {len(run.sent)} requests have no front-end `arrival_time`**: replayed from "
                "`queued_ts` without the rule (from `queued_ts`, a step-boundary stamp, the rule would count a step "
                "twice), as with `--sync-scheduling`."
            ),
        )
    fe = front_end_arrivals(run)
    lag = fe.queued - fe.arrival
    return (
        fe,
        True,
        (
            "Replayed with the rule from the front end's arrivals (`arrival_time` on the engine's clock, the request "
            "taken in soonest after reaching it linking the clocks; measured TTFT and E2E from them too): "
            f"`queued_ts` lags them by a median {1e3 * float(np.median(lag)):.1f} ms, at most "
            f"{1e3 * float(lag.max()):.1f} ms."
        ),
    )


def validate(runs: list[Run], async_scheduling: bool = True) -> dict[str, Any]:
    """Every run measured and replayed under every time model: by default (`async_scheduling`) each as it ran,
    as `async_replay` says (its sentence under the result's "replay"); without, from `queued_ts` and without
    the rule (`--sync-scheduling`, as kvsim replayed before 2026-12-07)."""
    out = {}
    for run in runs:
        note: str | None = None
        rule = False
        if async_scheduling:
            run, rule, note = async_replay(run)
        measured = run_metrics(run.arrival, run.scheduled, run.first_token, run.finish, run.output_len)
        sims = {tm: simulate_run(run, tm, rule) for tm in TIME_MODELS}
        out[run.name] = {"run": run, "measured": measured, "sims": sims, "replay": note}
    return out


def _fmt(v: float, scale: float) -> str:
    x = v * scale
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:,.2f}"


def _err(sim: float, meas: float) -> float:
    return (sim - meas) / meas if meas else float("nan")


def report(results: dict[str, Any], plot: str | None, sync: bool = False) -> str:
    """`results/validation.md` (the default replay, as each run ran), or with `sync` the synchronous replay
    from `queued_ts` kept for comparison (`results/validation_sync.md`)."""
    lines = [
        "# Step time against real GPUs"
        + (": the synchronous replay from `queued_ts`, for comparison" if sync else ""),
        "",
        f"Produced by `{COMMAND}{' --sync-scheduling' if sync else ''}` "
        '(DESIGN.md §Time model, "Validation"). Each real vLLM 0.19.0 serving run of',
        "LLMServingSim (casys-kaist/LLMServingSim commit 5daddb21, MIT; `../shared/validation/llmservingsim/runs`:",
        "300 ShareGPT-GPT4 requests with fixed output lengths on RTX PRO 6000 Blackwell GPUs, CUDA graphs, chunked",
        "prefill and prefix caching on) is replayed through kvsim with its own arrivals and lengths, its serving",
        'configuration and vLLM 0.19\'s scheduler (`SimConfig.preset("vllm-0.19")`), under three time models:',
        "**roofline, datasheet** (the default with a model and a GPU: efficiencies 1), **roofline, calibrated**",
        "(the efficiencies `kvsim calibrate` fitted to the GPU's per-operator profile of Llama-3.1-8B, applied",
        'to every model) and **linear (old)** (`time_model="linear"`). Errors are (kvsim − measured) / measured;',
        f"the target is {TARGET:.0%} on every mean and median (bold: missed).",
        "",
        *textwrap.wrap(replay_words(sync), width=110),
        "",
        *textwrap.wrap(
            "**The routed experts' read** (DESIGN.md §Time model, \"The routed experts' read\"). Under both "
            "rooflines the MoE run's routed experts stream at no more than vLLM's fused-MoE kernel's measured "
            "fraction of HBM bandwidth by tokens per touched expert (0.44 at one token an expert, 0.82-0.84 from "
            "about two: vLLM's benchmark_moe.py on Qwen3-30B-A3B's experts, bf16, on an A100, "
            "vllm-project/vllm#19049), not the dense projections' rate; the curve comes from that benchmark, "
            "nothing in it is fitted to these runs.",
            width=110,
        ),
        "",
        *textwrap.wrap(
            "**The collectives' transport** (DESIGN.md §Time model, \"The collectives' link\"). The two multi-GPU "
            "runs (TP 2; DP 2 + EP) are replayed with their collectives staged through host memory, no PCIe "
            f"peer-to-peer (`pcie_p2p=False`: a quarter of PCIe 5.0's 64 GB/s, {host_staged_words()}, "
            "from NVIDIA/nccl#384 and voipmonitor/rtx6kpro's measurements, not fitted to these runs). That is an "
            f"assumption: {P2P_EVIDENCE}. (The sourced rule gives Qwen3-32B's all-reduce {two_gpu_all_reduce()}, "
            "the very figures LLMServingSim's file assumes; it was set from the NCCL and rtx6kpro figures "
            "alone.) A fourth column, **calibrated, PCIe P2P**, replays them with peer-to-peer at the link's "
            "64 GB/s (the RTX PRO 6000's default), so both assumptions' errors show; the single-GPU run has no "
            "collective and is the same under both.",
            110,
        ),
        "",
    ]
    tally: dict[str, list[bool]] = {tm: [] for tm in TIME_MODELS}
    for name, r in results.items():
        run, meas, sims = r["run"], r["measured"], r["sims"]
        e = run.engine
        cfg = sims["calibrated"]["config"]
        lines += [
            f"## {name}",
            "",
            f"`{run.model}` on `{run.gpu}`: tensor parallel {e.get('tensor_parallel_size', 1)}, data parallel "
            f"{e.get('data_parallel_size', 1)}, expert parallel {bool(e.get('enable_expert_parallel'))}, "
            f"max_num_seqs {e.get('max_num_seqs')}, max_num_batched_tokens {e.get('max_num_batched_tokens')}; "
            f"{len(run.arrival)} requests over {run.arrival.max():.1f} s. kvsim: {cfg.pool.line()}; calibration "
            f"`{cfg.calibration}`; collectives "
            + (
                "staged through host memory (assumed), over PCIe peer-to-peer in the P2P column."
                if multi_gpu(run)
                else "none (one GPU)."
            ),
            "",
            *([r["replay"], ""] if r.get("replay") else []),
            f"| metric | measured (from `{run.clock}`) | "
            + " | ".join(f"{TIME_MODEL_NAMES[tm]} | error" for tm in TIME_MODELS)
            + " |",
            "|---|---:|" + "---:|---:|" * len(TIME_MODELS),
        ]
        for key, label, scale, target in METRICS:
            unit = " (ms)" if scale == 1e3 else ""
            cells = [f"{label}{unit}", _fmt(meas[key], scale)]
            for tm in TIME_MODELS:
                sim = sims[tm]["metrics"][key]
                err = _err(sim, meas[key])
                miss = target and not abs(err) <= TARGET
                if target:
                    tally[tm].append(not miss)
                text = f"{err:+.1%}"
                cells += [_fmt(sim, scale), f"**{text}**" if miss else text]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Summary", ""]
    for tm in TIME_MODELS:
        ok = tally[tm]
        lines.append(
            f"- {TIME_MODEL_NAMES[tm]}: {sum(ok)} of {len(ok)} means, medians, ITL and throughput within {TARGET:.0%}."
        )
    lines.append("")
    lines += why_not(results)
    if plot:
        lines += [f"Per-request TTFT and E2E, measured against kvsim's calibrated roofline: `{plot}`.", ""]
    return "\n".join(lines)


def step_breakdown(cfg: Any, batch: int, context: int) -> dict[str, float]:
    """A decode step of `batch` sequences at `context` tokens under `cfg`'s roofline, by operator group
    (ms): the dense projections, the routed experts, decode attention, the collectives (all-reduces,
    gathers and scatters with their latencies) and the rest (LM head, sampling, elementwise, overheads)."""
    rt = cfg.roofline
    terms = {t.name: t.ps for t in rt.terms}
    t = batch
    total = rt.step_ps([(context, 1)] * batch)
    dense = max(rt.dense_mem_ps + rt.dense_mem_tok_ps * t, rt.dense_flop_tok_ps * t)
    experts = rt.experts_ps(rt.moe_senders * t)  # (a lone rank: the other ranks' batches as large)
    attention = rt.decode_ps * context * batch
    comm = t * (terms.get("tp_allreduce_tok", 0) + terms.get("ep_gather_scatter_tok", 0))
    comm += terms.get("tp_allreduce", 0) + terms.get("ep_gather_scatter", 0)
    out = {
        "step": total,
        "projections": dense,
        "experts": experts,
        "attention": attention,
        "collectives": comm,
    }
    out["rest"] = total - dense - experts - attention - comm
    return {k: v / 1e9 for k, v in out.items()}


def why_not(results: dict[str, Any]) -> list[str]:
    """Where the calibrated roofline misses the target, and what its decode step is made of there."""
    lines = ["## Where the target is missed, and why", ""]
    for name, r in results.items():
        run, meas, sim = r["run"], r["measured"], r["sims"]["calibrated"]
        missed = [
            label
            for key, label, _, target in METRICS
            if target and not abs(_err(sim["metrics"][key], meas[key])) <= TARGET
        ]
        if not missed:
            lines.append(f"- **{name}**: none with the calibration.")
            continue
        cfg = sim["config"]
        context = int(run.prompt_len.mean() + run.output_len.mean() / 2)
        b = step_breakdown(cfg, cfg.max_num_seqs, context)
        gap = (meas["itl_mean"] - sim["metrics"]["itl_mean"]) * 1e3
        parts = ", ".join(
            f"{k} {b[k]:.1f}" for k in ("projections", "experts", "attention", "collectives", "rest") if b[k]
        )
        e = run.engine
        lines.append(
            f"- **{name}**: {', '.join(missed)}. kvsim's tokens come {abs(gap):.1f} ms "
            f"{'closer together' if gap > 0 else 'further apart'} than measured (ITL mean {sim['metrics']['itl_mean'] * 1e3:.1f} ms "
            f"against {meas['itl_mean'] * 1e3:.1f} ms). kvsim's decode step of {cfg.max_num_seqs} sequences at "
            f"{context:,} tokens (the run's mean prompt and half its mean output) takes {b['step']:.1f} ms: {parts} "
            "ms. The calibration fitted one GPU's dense projections and attention (Llama-3.1-8B's profile): "
            + (
                f"the {2 * run_layers(cfg)} all-reduces a step over PCIe (tensor parallel {e.get('tensor_parallel_size')}) "
                f"are priced staged through host memory by published figures ({host_staged_words()}), no "
                "collective on this host having been measured; "
                if int(e.get("tensor_parallel_size") or 1) > 1
                else ""
            )
            + (
                "the routed experts (fused-MoE kernels over 64 experts of 768 columns per GPU) are read at vLLM's "
                f"fused-MoE kernel's bandwidth as benchmarked on another GPU (an A100, vllm-project/vllm#19049: {fused_moe_range()} "
                "of HBM by tokens per expert; no RTX PRO 6000 figure) and the gather and scatter of hidden states "
                "between the two ranks are priced "
                f"staged through host memory ({host_staged_words()}; the ranks step together, as vLLM's do, each step the slower "
                "rank's; their per-step token-count exchange and padding are not priced); "
                if e.get("enable_expert_parallel")
                else ""
            )
            + "the queueing for a seat (max_num_seqs) that TTFT measures inherits the decode steps' error."
        )
    lines.append("")
    return lines


def run_layers(cfg: Any) -> int:
    from kvsim.model.models import resolve

    return int(resolve(cfg.model).num_layers)


# The metrics a run's claim checks (the 10 % target: every mean and median, ITL's mean, throughput).
CLAIMED = tuple(key for key, _, _, target in METRICS if target)


def validation_claims(root: Path = RUNS) -> list[Any]:
    """The claims suite's validation claims (DESIGN.md §Claims, `V-<model>`): per run, kvsim's calibrated
    roofline gives the measured means and medians within 10 %; NOT TESTABLE without `../shared/validation`."""
    from kvsim.analysis.claims_model import CONFIRMED, DIFFERS, NOT_TESTABLE, Claim
    from kvsim.model.models import resolve

    source = "LLMServingSim (casys-kaist/LLMServingSim 5daddb21): real vLLM 0.19.0 runs, RTX PRO 6000"
    try:
        runs = find_runs(root)
    except InvalidArgumentError as exc:
        return [Claim("V-runs", "kvsim's step time against real vLLM serving runs", source, "-", "-",
                      f"± {TARGET:.0%}", NOT_TESTABLE, COMMAND, str(exc))]  # fmt: skip
    out = []
    for run in runs:
        # (replayed as it ran, as results/validation.md is: `async_replay`)
        run, rule, replay = async_replay(run)
        measured = run_metrics(run.arrival, run.scheduled, run.first_token, run.finish, run.output_len)
        sim = simulate_run(run, "calibrated", rule)["metrics"]
        errs = {k: _err(sim[k], measured[k]) for k in CLAIMED}
        labels = {key: label for key, label, _, _ in METRICS}
        note = (
            f"calibration {calibration_for(run.gpu)}; {replay[:1].lower()}{replay[1:]} results/validation.md has "
            "every metric and time "
            "model, results/validation_sync.md the synchronous replay from `queued_ts` (--sync-scheduling)"
        )
        if multi_gpu(run):
            p2p = simulate_run(run, "calibrated-p2p", rule)["metrics"]
            note += (
                f"; collectives staged through host memory (pcie_p2p off: {host_staged_words()}, from "
                f"NVIDIA/nccl#384 and voipmonitor/rtx6kpro, not fitted): {P2P_EVIDENCE}; with PCIe P2P instead: "
                + ", ".join(f"{labels[k]} {_err(p2p[k], measured[k]):+.1%}" for k in CLAIMED)
            )
        e = run.engine
        setup = f"TP {e.get('tensor_parallel_size', 1)}, DP {e.get('data_parallel_size', 1)}" + (
            ", EP" if e.get("enable_expert_parallel") else ""
        )
        transport = ", async scheduling from the front end's arrivals" if rule else ""
        transport += ", collectives staged through host memory" if multi_gpu(run) else ""
        if resolve(run.model).num_experts:
            transport += ", routed experts at the fused-MoE kernel's measured bandwidth"
            note += (
                "; the routed experts read at vLLM's fused-MoE kernel's measured fraction of HBM by tokens per "
                "expert (vllm-project/vllm#19049, an A100 benchmark of this model's experts; not fitted)"
            )
        out.append(
            Claim(
                f"V-{run.model}",
                f"kvsim (calibrated roofline, vLLM 0.19's scheduler{transport}) replays the real run of {run.model} "
                f"on {run.gpu} ({setup}): TTFT, TPOT, E2E means and medians, ITL mean and output throughput",
                source,
                ", ".join(f"{labels[k]} {_fmt(measured[k], 1e3)} ms" for k in ("tpot_mean", "e2e_mean")),
                ", ".join(f"{labels[k]} {errs[k]:+.1%}" for k in CLAIMED),
                f"each within ± {TARGET:.0%}",
                CONFIRMED if all(abs(v) <= TARGET for v in errs.values()) else DIFFERS,
                COMMAND,
                note,
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from kvsim.cli.flags import Parser  # (argparse's, its errors one line and exit status 2)

    p = Parser(
        prog=COMMAND,
        description="Replay the real vLLM serving runs of ../shared/validation through kvsim as each ran and write "
        "results/validation.md and results/plots/validation.png",
    )
    p.add_argument("--runs", default=str(RUNS), help="folder of <gpu>/<model>/ runs (default: %(default)s)")
    p.add_argument(
        "--output",
        help="the report (default: results/validation.md; with --sync-scheduling results/validation_sync.md)",
    )
    p.add_argument(
        "--plot",
        help="the per-request plot ('' for none; default: results/plots/validation.png, none with --sync-scheduling)",
    )
    p.add_argument(
        "--sync-scheduling",
        action="store_true",
        help="replay every run from the engine's queued_ts without kvsim's async_scheduling rule, as kvsim replayed "
        "them before 2026-12-07, for comparison (by default a run of a release that schedules asynchronously, "
        f"{', '.join(ASYNC_RELEASES)}, is replayed with the rule from the front end's arrivals, as it ran)",
    )
    args = p.parse_args(argv)
    sync = args.sync_scheduling
    if args.output is None:
        args.output = str(REPO / "results" / ("validation_sync.md" if sync else "validation.md"))
    if args.plot is None:
        args.plot = "" if sync else str(REPO / "results" / "plots" / "validation.png")
    try:
        results = validate(find_runs(Path(args.runs)), not sync)
        if not results:
            raise InvalidArgumentError(f"no runs (<gpu>/<model>/requests.jsonl) under {args.runs}")
        plot = None
        if args.plot:
            from kvsim.analysis.plots_validation import plot_requests

            plot_requests(results, Path(args.plot))
            plot = _relative(Path(args.plot))
        text = report(results, plot, sync)
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
    except KvsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


def replay_words(sync: bool) -> str:
    """The report's paragraph on how the runs were replayed: as they ran (the default), or with
    `--sync-scheduling` for comparison."""
    releases = ", ".join(ASYNC_RELEASES)
    if sync:
        return (
            "**Replayed with `--sync-scheduling`**, for comparison: every run from the engine core's `queued_ts` "
            "without kvsim's `async_scheduling` rule, as kvsim replayed them before 2026-12-07. The runs ran with "
            f"vLLM {releases}'s asynchronous scheduling, so this is not how they ran: results/validation.md "
            "(the default) replays them so."
        )
    return (
        "**Replayed as the runs ran.** vLLM "
        f'{releases} schedules asynchronously by default (DESIGN.md §Engine, "Asynchronous scheduling"), and '
        "these runs ran so: each run of such a release is replayed with kvsim's `async_scheduling` rule on from "
        "the front end's arrivals (`arrival_time` on the engine's clock, not `queued_ts`, a step-boundary stamp "
        'from which the rule would count a step twice; DESIGN.md §Time model, "Qwen3-30B-A3B\'s TTFT median"), '
        "and each run says how it was replayed. This is the default since 2026-12-07; `--sync-scheduling` "
        "replays every run from `queued_ts` without the rule, as before, for comparison "
        "(results/validation_sync.md)."
    )


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
