"""Ctrl-C latency: runs one simulation in a child process, sends it a real SIGINT and reports when
KeyboardInterrupt reached it (results/README.md, section Ctrl-C).

    python -m bench.sigint_latency N NUM_BLOCKS BACKEND WAIT_S [stream]

N requests arrive at once (ShareGPT-like lengths) into NUM_BLOCKS blocks with 2**22 seats; the signal is
sent WAIT_S seconds after the child is ready to call `kvsim.simulate` (with `stream`:
`kvsim.simulate_stream`). WAIT_S `none` sends no signal and reports how long the whole run took: with
few requests and a huge pool (`10 67108864 rust none`) that is the engine's setup, and
`10 67108864 rust 1.0` a signal in the middle of it.
"""

import signal
import subprocess
import sys
import time

CHILD = r"""
import sys, time, kvsim
from kvsim.workloads import synthetic
n, blocks, backend, entry = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
w = synthetic(n, arrivals="all-at-once", lengths="sharegpt-paper", seed=1)
cfg = kvsim.SimConfig(num_blocks=blocks, block_size=16, max_num_seqs=2**22)
run = kvsim.simulate_stream if entry == "stream" else kvsim.simulate
print("ready", flush=True)
start = time.perf_counter()
try:
    run(w, cfg, backend=backend)
except KeyboardInterrupt:
    print("KeyboardInterrupt", time.perf_counter(), flush=True)
    sys.exit(3)
print("finished", time.perf_counter() - start, flush=True)
"""


def main() -> None:
    n, blocks, backend, wait = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    entry = sys.argv[5] if len(sys.argv) > 5 else "simulate"
    what = f"{backend} {'simulate_stream' if entry == 'stream' else 'simulate'}, {n} requests at once, {blocks} blocks"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, n, blocks, backend, entry], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    if wait == "none":
        out = child.stdout.read()
        child.wait()
        words = out.split()
        print(
            f"{what}: no signal, the run took {float(words[1]):.3f} s" if words[:1] == ["finished"] else out
        )
        return
    time.sleep(float(wait))
    sent = time.perf_counter()  # CLOCK_MONOTONIC: the child's clock too
    child.send_signal(signal.SIGINT)
    out = child.stdout.read()
    child.wait()
    gone = time.perf_counter() - sent
    words = out.split()
    if child.returncode != 3 or words[:1] != ["KeyboardInterrupt"]:
        print(f"no KeyboardInterrupt: exit status {child.returncode}, output {out!r}")
        return
    print(
        f"{what}: KeyboardInterrupt {float(words[1]) - sent:.3f} s after SIGINT, process gone after {gone:.3f} s"
    )


if __name__ == "__main__":
    main()
