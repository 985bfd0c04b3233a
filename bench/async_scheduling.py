"""The engine rule `async_scheduling` (DESIGN.md §Engine, "Asynchronous scheduling"; §Time model,
"Qwen3-30B-A3B's TTFT median") on the validation's runs: LLMServingSim's three real vLLM 0.19.0 runs
(`kvsim.analysis.validate`, calibrated roofline) replayed with synchronous scheduling and with the rule,
Qwen3-30B-A3B's two DP ranks as one data-parallel group (each rank following the rule on the group's
clock), from two arrivals:

- the engine core's `queued_ts` (what `kvsim.analysis.validate --sync-scheduling` replays; the engine core stamps it when it
  takes the request in, between steps);
- the front end's `arrival_time` put on the engine's clock (`kvsim.analysis.validate_runs.front_end_arrivals`,
  what `kvsim.analysis.validate` replays by default: `queued_ts - (queued_ts - arrival_time - min over the run)`,
  the two clocks linked by the request taken in soonest after it reached the front end); TTFT is measured
  from the same arrival on both sides.

It prints each run's errors (kvsim - measured) / measured and the median error of the first token of the
requests scheduled within 5 ms of being taken in:

    PYTHONPATH=$PWD/python python -m bench.async_scheduling
"""

from __future__ import annotations

import sys

import numpy as np

from kvsim.analysis import validate_runs as V

METRICS = (
    ("ttft_mean", "TTFT mean"),
    ("ttft_p50", "TTFT p50"),
    ("ttft_p90", "TTFT p90"),
    ("tpot_mean", "TPOT mean"),
    ("tpot_p50", "TPOT p50"),
    ("e2e_mean", "E2E mean"),
    ("e2e_p50", "E2E p50"),
    ("itl_mean", "ITL mean"),
    ("throughput", "tokens/s"),
)


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
        for arrivals, run in (("queued_ts", base), ("front end", V.front_end_arrivals(base))):
            measured = V.run_metrics(run.arrival, run.scheduled, run.first_token, run.finish, run.output_len)
            mask = (run.scheduled - run.queued) < 0.005
            for on in (False, True):
                # (off: unset, vLLM's default deployment for sizing, as validate --sync-scheduling replays)
                replayed = V.replay(run, cfg.replace(async_scheduling=True if on else None))
                sim, arrival, first = replayed["metrics"], replayed["arrival"], replayed["first_token"]
                errs = [100 * (sim[k] - measured[k]) / measured[k] for k, _ in METRICS]
                gap = 1e3 * float(np.median(((first - arrival) - (run.first_token - run.arrival))[mask]))
                cells = " | ".join(f"{e:+.1f}%" for e in errs)
                mode = "async" if on else "sync"
                print(f"| {run.name} | {arrivals} | {mode} | {cells} | {gap:+.1f} ms |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
