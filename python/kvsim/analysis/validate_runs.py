"""The validation's runs (`python -m kvsim.analysis.validate`, DESIGN.md §Time model, "Validation"): each real
vLLM serving run read (`load_run`, `find_runs`) and put on the front end's clock (`front_end_arrivals`), its
metrics (`run_metrics`), its serving configuration under a time model (`config`) and kvsim's replay of it
(`replay`, `simulate_run`; as it ran: `async_replay`). The report, the claims and the command are
`kvsim.analysis.validate`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.errors import InvalidArgumentError

REPO = Path(__file__).resolve().parents[3]
SHARED = REPO.parent / "shared" / "validation"
RUNS = SHARED / "llmservingsim" / "runs"
# The runs' names for GPUs and models, and kvsim's presets. Qwen3-30B-A3B-Instruct-2507 has the
# architecture fields of Qwen3-30B-A3B (layers, widths, heads, 128 experts of which 8 per token).
GPUS = {"RTXPRO6000": "rtx-pro-6000"}
MODELS = {
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b",
}
TIME_MODELS = ("roofline", "calibrated", "calibrated-p2p", "linear")


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
    """The report's metrics of one run's requests (`kvsim.analysis.validate`'s docstring), seconds and counts."""
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


# The preset the runs are replayed under: vLLM 0.19's rules (the runs are vLLM 0.19.0's).
PRESET = "vllm-0.19"


def run_release(run: Run) -> str:
    """The release of `kvsim.model.releases.RELEASES` that ran `run` (its `vllm_version`: 0.19.0 is `0.19.1`'s
    range, `releases.covering`), or `PRESET`'s where none covers it: its model is read, and its configuration
    records, that release."""
    from kvsim.model.presets import release_under
    from kvsim.model.releases import covering

    return covering(run.meta.get("vllm_version")) or release_under(PRESET)


def config(run: Run, time_model: str, async_scheduling: bool = False) -> Any:
    """The run's serving configuration under vLLM 0.19's rules and `time_model` (`TIME_MODELS`); with
    `async_scheduling`, the rule on where the run's release schedules asynchronously (`schedules_async`)."""
    from kvsim.model.config import SimConfig
    from kvsim.model.models import resolve
    from kvsim.model.presets import release_under

    e = run.engine
    dp = int(e.get("data_parallel_size") or 1)
    release = run_release(run)
    moe = resolve(run.model, release).num_experts > 0
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
    if release != release_under(PRESET):  # (a run of another release: read and recorded as that one)
        kw["vllm_release"] = release
    if async_scheduling and schedules_async(run):
        kw["async_scheduling"] = True
    if e.get("max_model_len"):
        kw["max_model_len"] = int(e["max_model_len"])
    if multi_gpu(run) and time_model != "linear":
        # (`kvsim.analysis.validate.P2P_EVIDENCE`: host staging assumed, peer-to-peer under `calibrated-p2p` for comparison; the
        # linear model prices no collectives, and SimConfig refuses a pcie_p2p it could not apply)
        kw["pcie_p2p"] = time_model == "calibrated-p2p"
    if time_model == "linear":
        kw["time_model"] = "linear"
    elif time_model in ("calibrated", "calibrated-p2p"):
        kw["calibration"] = calibration_for(run.gpu)
    return SimConfig.preset(PRESET, **kw)


def multi_gpu(run: Run) -> bool:
    """Whether `run`'s model spans GPUs that exchange collectives: tensor parallelism, or a mixture-of-experts
    model's DP ranks (their all-gather and reduce-scatter)."""
    from kvsim.model.models import resolve

    e = run.engine
    tp, dp = int(e.get("tensor_parallel_size") or 1), int(e.get("data_parallel_size") or 1)
    return tp > 1 or (dp > 1 and resolve(run.model, run_release(run)).num_experts > 0)


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


def replay(run: Run, cfg: Any) -> dict[str, Any]:
    """kvsim's replay of `run` under `cfg`: one replica by `kvsim.simulate`, a fleet (`cfg.replicas` > 1)
    by `kvsim.simulate_cluster`; its metrics (`run_metrics`), per-request columns (seconds, in request id
    order) and `cfg`."""
    from kvsim import simulate, simulate_cluster

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


def simulate_run(run: Run, time_model: str, async_scheduling: bool = False) -> dict[str, Any]:
    """kvsim's replay of `run` under `time_model` (`config`'s `async_scheduling`; `replay`): its metrics and
    per-request columns (seconds)."""
    return replay(run, config(run, time_model, async_scheduling))


def async_replay(run: Run) -> tuple[Run, bool, str]:
    """What the default replay (as the run ran) replays of `run`: the run, whether with the rule, and a
    sentence saying so. A run of a release that schedules asynchronously (`schedules_async`) is replayed with
    the rule from the front end's arrivals (`front_end_arrivals`), the clock the rule's admission a step later
    is defined against: `queued_ts` is stamped at a step boundary, so from it the rule would add a step the
    request already waited. Where its rows lack `arrival_time`, or its configuration is one kvsim does not
    model the rule for (`SimConfig` refuses it), it is replayed
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
