"""The engine rule `async_scheduling` (DESIGN.md §Engine, "Asynchronous scheduling") on the validation's
single-engine runs: LLMServingSim's real vLLM 0.19.0 runs (`kvsim.analysis.validate`, calibrated roofline)
replayed from the engine core's `queued_ts` and from the front end's `arrival_time` put on the engine's
clock (`bench.async_admission.front_end_arrivals`), with synchronous scheduling and with the rule. A run of
data-parallel ranks (a fleet: Qwen3-30B-A3B's) is listed, not replayed: the rule is refused for a fleet. It
prints each run's errors (kvsim - measured) / measured and the median error of the first token of the
requests scheduled within 5 ms of being taken in:

    PYTHONPATH=$PWD/python python -m bench.async_scheduling
"""

from __future__ import annotations

import sys

import numpy as np

from bench.async_admission import METRICS, _unqueued_in, front_end_arrivals
from kvsim import simulate
from kvsim.analysis import validate as V


def main(argv: list[str] | None = None) -> int:
    del argv
    print(
        "| run | arrivals | scheduling | "
        + " | ".join(label for _, label in METRICS)
        + " | unqueued first token |"
    )
    print("|---|---|---|" + "---:|" * (len(METRICS) + 1))
    for base in V.find_runs():
        cfg = V.config(base, "calibrated")
        if cfg.replicas > 1:
            print(f"| {base.name} | a fleet of {cfg.replicas} DP ranks: not replayed (refused) |")
            continue
        unqueued = (base.scheduled - base.arrival) < 0.005
        for arrivals, run in (("queued_ts", base), ("front end", front_end_arrivals(base))):
            measured = V.run_metrics(run.arrival, run.scheduled, run.first_token, run.finish, run.output_len)
            mask = unqueued if arrivals == "queued_ts" else _unqueued_in(run)
            for on in (False, True):
                rows = simulate(V.workload(run), cfg.replace(async_scheduling=on)).requests.sort("request_id")
                arrival, first = rows["arrival"].to_numpy(), rows["first_token"].to_numpy()
                sim = V.run_metrics(
                    arrival,
                    rows["first_scheduled"].to_numpy(),
                    first,
                    rows["finish"].to_numpy(),
                    rows["output_len"].to_numpy(),
                )
                errs = [100 * (sim[k] - measured[k]) / measured[k] for k, _ in METRICS]
                gap = 1e3 * float(np.median(((first - arrival) - (run.first_token - run.arrival))[mask]))
                cells = " | ".join(f"{e:+.1f}%" for e in errs)
                mode = "async" if on else "sync"
                print(f"| {run.name} | {arrivals} | {mode} | {cells} | {gap:+.1f} ms |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
