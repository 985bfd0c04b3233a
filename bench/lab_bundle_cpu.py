"""CPU seconds of building a lab bundle, per phase (DESIGN.md §Lab, Cost): both engine runs with the
event log and a time series, the two replays (`kvsim.lab.state.replay`), the payload (`bundle_from`) and
its encoding (`kvsim.lab.bundle.encode`: orjson, numpy columns as typed columns); then the whole of
`encode(kvsim.lab.bundle(preset))` (the bundle freed inside the timed span) and the body's size. CPU time
(`time.process_time`), not wall time, so that a loaded machine still gives comparable numbers; the best
and the median of `--rounds` rounds, and the load average.

    python bench/lab_bundle_cpu.py [preset] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import time

from kvsim.engine.simulate import simulate
from kvsim.lab.bundle import bundle, bundle_from, encode, resolve
from kvsim.lab.state import replay


def phases(preset: str) -> dict[str, float]:
    clock = time.process_time
    t0 = clock()
    r = resolve(preset)
    configs = (r.paged, r.contiguous)
    w = r.preset.workload
    runs = [simulate(w, c, record_events=True, record_timeseries=True) for c in configs]
    t1 = clock()
    names, request_names = r.preset.segment_names, r.preset.request_names or None
    paged, contiguous = (
        replay(res, w, c, names=names, request_names=request_names)
        for res, c in zip(runs, configs, strict=True)
    )
    t2 = clock()
    b = bundle_from(r, paged, contiguous)
    t3 = clock()
    encode(b)
    t4 = clock()
    return {"engines": t1 - t0, "replays": t2 - t1, "payload": t3 - t2, "encode": t4 - t3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset", nargs="?", default="chat")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    phases("copilot")  # imports and first-call costs out of the way
    best = min((phases(a.preset) for _ in range(a.rounds)), key=lambda p: sum(p.values()))
    parts = "  ".join(f"{k} {v:.3f}" for k, v in best.items())
    print(f"{a.preset}: {parts}  total {sum(best.values()):.3f} s CPU (best of {a.rounds})")
    whole = []
    size = 0
    for _ in range(a.rounds):
        t0 = time.process_time()
        size = len(encode(bundle(a.preset)))  # the bundle is freed inside the timed span, as a server's is
        whole.append(time.process_time() - t0)
    whole.sort()
    print(
        f"{a.preset}: encode(kvsim.lab.bundle({a.preset!r})) {whole[0]:.3f} s CPU best, "
        f"{whole[len(whole) // 2]:.3f} s median of {a.rounds}; body {size / 1e6:.1f} MB; load average "
        f"{os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
