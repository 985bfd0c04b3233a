"""A trial, not the model: what vLLM's asynchronous scheduling would do to the validation's first tokens
(DESIGN.md §Time model, "Qwen3-30B-A3B's TTFT median"). It replays LLMServingSim's three real vLLM 0.19.0
runs (`kvsim.analysis.validate`, calibrated roofline) on the pure-Python reference engine four ways:

- arrivals: the engine core's `queued_ts` (what `kvsim.analysis.validate` replays; the engine core stamps it
  when it takes the request in, between steps) or the front end's `arrival_time` put on the engine's
  clock (`queued_ts - (queued_ts - arrival_time - min over the run)`: the two clocks are linked by the
  request taken in soonest after it reached the front end); TTFT is measured from the same arrival on
  both sides;
- admission: kvsim's (a request joins the first step starting at or after its arrival) or the trial's
  asynchronous one: while the step that just ended left work to run, vLLM 0.19 had already scheduled the
  next step at the ended step's start (`EngineCore.step_with_batch_queue`, two batches in flight), so
  only the requests that arrived by that start join; an engine with nothing left takes arrivals at once.

The trial patches the reference engine's `join_arrivals` and `commit_step` for the run's duration only;
it prices nothing else of asynchronous scheduling (seats and blocks a finished request frees are still
reused at the next step, not the one after). It prints each run's errors (kvsim - measured) / measured
and the median error of the first token of the requests scheduled within 5 ms of being taken in:

    PYTHONPATH=$PWD/python python -m bench.async_admission
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from kvsim import simulate, simulate_cluster
from kvsim.analysis import validate as V
from kvsim.reference.engine.core import Engine

METRICS = (
    ("ttft_mean", "TTFT mean"),
    ("ttft_p50", "TTFT p50"),
    ("tpot_mean", "TPOT mean"),
    ("tpot_p50", "TPOT p50"),
    ("e2e_mean", "E2E mean"),
    ("e2e_p50", "E2E p50"),
    ("itl_mean", "ITL mean"),
    ("throughput", "tokens/s"),
)


@contextlib.contextmanager
def async_admission() -> Iterator[None]:
    """The reference engine under the trial's admission while the block runs."""
    commit = Engine.commit_step

    def commit_step(self: Any, scheduled: Any, dt: int) -> None:
        # The engine's own join limit (`Engine.join_arrivals`, `async_prev`): the last step's start while
        # it left work, the trial's threshold (seats and blocks freed as synchronous scheduling frees them).
        start = self.t
        commit(self, scheduled, dt)
        live = bool(self.waiting) or any(s.generated < s.target for s in self.running)
        self.async_prev = start if live else -1

    Engine.commit_step = commit_step  # type: ignore[method-assign]
    try:
        yield
    finally:
        Engine.commit_step = commit  # type: ignore[method-assign]


def front_end_arrivals(run: V.Run) -> V.Run:
    """`run` with the front end's `arrival_time` on the engine's clock as each request's arrival."""
    rows = [
        json.loads(line) for line in (run.path / "requests.jsonl").read_text().splitlines() if line.strip()
    ]
    col = {
        k: np.array([float(r[k]) for r in rows])
        for k in ("arrival_time", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
    }
    lag = col["queued_ts"] - col["arrival_time"]
    arrival = col["queued_ts"] - (lag - lag.min())
    order = np.argsort(arrival, kind="stable")
    t0 = arrival.min()
    return dataclasses.replace(
        run,
        arrival=(arrival - t0)[order],
        scheduled=(col["scheduled_ts"] - t0)[order],
        first_token=(col["first_token_ts"] - t0)[order],
        finish=(col["last_token_ts"] - t0)[order],
        prompt_len=np.array([int(r["input_toks"]) for r in rows])[order],
        output_len=np.array([int(r["output_toks"]) for r in rows])[order],
    )


def replay(run: V.Run) -> dict[str, Any]:
    """The reference engine's replay of `run` under the calibrated roofline: metrics and first tokens."""
    cfg = V.config(run, "calibrated")
    w = V.workload(run)
    res: Any = (
        simulate_cluster(w, cfg, backend="reference")
        if cfg.replicas > 1
        else simulate(w, cfg, backend="reference")
    )
    rows = res.requests.sort("request_id")
    arrival, first = rows["arrival"].to_numpy(), rows["first_token"].to_numpy()
    metrics = V.run_metrics(
        arrival,
        rows["first_scheduled"].to_numpy(),
        first,
        rows["finish"].to_numpy(),
        rows["output_len"].to_numpy(),
    )
    return {"metrics": metrics, "ttft": first - arrival}


def main(argv: list[str] | None = None) -> int:
    del argv
    print(
        "| run | arrivals | admission | "
        + " | ".join(label for _, label in METRICS)
        + " | unqueued first token |"
    )
    print("|---|---|---|" + "---:|" * (len(METRICS) + 1))
    for base in V.find_runs():
        unqueued = (base.scheduled - base.arrival) < 0.005
        for arrivals, run in (("queued_ts", base), ("front end", front_end_arrivals(base))):
            measured = V.run_metrics(run.arrival, run.scheduled, run.first_token, run.finish, run.output_len)
            ttft = run.first_token - run.arrival
            for admission in ("kvsim", "async"):
                if admission == "async":
                    with async_admission():
                        sim = replay(run)
                else:
                    sim = replay(run)
                errs = [100 * (sim["metrics"][k] - measured[k]) / measured[k] for k, _ in METRICS]
                # (each run's rows in its own arrival order, as the workload's)
                mask = unqueued if arrivals == "queued_ts" else _unqueued_in(run)
                gap = 1e3 * float(np.median((sim["ttft"] - ttft)[mask]))
                cells = " | ".join(f"{e:+.1f}%" for e in errs)
                print(f"| {run.name} | {arrivals} | {admission} | {cells} | {gap:+.1f} ms |", flush=True)
    return 0


def _unqueued_in(run: V.Run) -> np.ndarray:
    """The requests of `run` (front-end arrivals) scheduled within 5 ms of being taken in."""
    rows = [
        json.loads(line) for line in (run.path / "requests.jsonl").read_text().splitlines() if line.strip()
    ]
    col = {k: np.array([float(r[k]) for r in rows]) for k in ("arrival_time", "queued_ts", "scheduled_ts")}
    lag = col["queued_ts"] - col["arrival_time"]
    order = np.argsort(col["queued_ts"] - (lag - lag.min()), kind="stable")
    return ((col["scheduled_ts"] - col["queued_ts"]) < 0.005)[order]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
