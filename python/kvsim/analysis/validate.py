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

This module holds the report, the claims (`validation_claims`) and the command; the runs, their metrics,
configurations and replay are `kvsim.analysis.validate_runs`'s.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

from kvsim.analysis.validate_runs import (
    ASYNC_RELEASES,
    REPO,
    RUNS,
    TIME_MODELS,
    Run,
    async_replay,
    calibration_for,
    config,
    find_runs,
    front_end_arrivals,
    load_run,
    missing_front_end,
    multi_gpu,
    run_metrics,
    run_release,
    schedules_async,
    simulate_run,
    workload,
)
from kvsim.errors import InvalidArgumentError, KvsimError

COMMAND = "python -m kvsim.analysis.validate"
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

    return int(resolve(cfg.release_model).num_layers)


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
        if resolve(run.model, run_release(run)).num_experts:
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


# (the runs and their replay are `kvsim.analysis.validate_runs`'s, named here too for those who read them here)
__all__ = [
    "ASYNC_RELEASES",
    "CLAIMED",
    "COMMAND",
    "METRICS",
    "P2P_EVIDENCE",
    "RUNS",
    "TARGET",
    "TIME_MODELS",
    "TIME_MODEL_NAMES",
    "Run",
    "async_replay",
    "calibration_for",
    "config",
    "find_runs",
    "front_end_arrivals",
    "fused_moe_range",
    "host_staged_words",
    "load_run",
    "main",
    "missing_front_end",
    "multi_gpu",
    "replay_words",
    "report",
    "run_layers",
    "run_metrics",
    "schedules_async",
    "simulate_run",
    "step_breakdown",
    "two_gpu_all_reduce",
    "validate",
    "validation_claims",
    "why_not",
    "workload",
]


if __name__ == "__main__":
    sys.exit(main())
