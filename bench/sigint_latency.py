"""Ctrl-C latency: runs one simulation in a child process, sends it a real SIGINT and reports when
KeyboardInterrupt reached it (results/README.md, section Ctrl-C).

    python -m bench.sigint_latency N NUM_BLOCKS BACKEND WAIT_S

N requests arrive at once (ShareGPT-like lengths) into NUM_BLOCKS blocks with 2**22 seats; the signal is
sent WAIT_S seconds after the child is ready to call `kvsim.simulate`.
"""

import signal
import subprocess
import sys
import time

CHILD = r"""
import sys, time, kvsim
from kvsim.workloads import synthetic
n, blocks, backend = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
w = synthetic(n, arrivals="all-at-once", lengths="sharegpt-paper", seed=1)
cfg = kvsim.SimConfig(num_blocks=blocks, block_size=16, max_num_seqs=2**22)
print("ready", flush=True)
try:
    kvsim.simulate(w, cfg, backend=backend)
except KeyboardInterrupt:
    print("KeyboardInterrupt", time.perf_counter(), flush=True)
    sys.exit(3)
print("finished", flush=True)
"""


def main() -> None:
    n, blocks, backend, wait = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, n, blocks, backend], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    time.sleep(wait)
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
        f"{backend}, {n} requests at once, {blocks} blocks: KeyboardInterrupt {float(words[1]) - sent:.3f} s "
        f"after SIGINT, process gone after {gone:.3f} s"
    )


if __name__ == "__main__":
    main()
