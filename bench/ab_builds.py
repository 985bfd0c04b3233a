"""Two builds of the engine compared on the CPU tier's wall-clock ratio (results/README.md §CPU tier): each
build is a folder holding a copy of the `kvsim` package with that build's extension (`--snapshot DIR` makes
one from the package as built now); processes of each build alternate, each running `bench.tier_pairs`'s
pairs (the million-request setup, the engine alone, tier off then a 10^8-token tier, after a warm-up of
each), so that this VM's drift between minutes falls on both builds alike. Prints each build's medians
(tier off, tier on) and the median and mean of its pairs' ratios.

    python -m bench.ab_builds --snapshot /tmp/ab/old      # before the change (then rebuild)
    python -m bench.ab_builds --snapshot /tmp/ab/new      # after it
    python -m bench.ab_builds /tmp/ab/old /tmp/ab/new [--rounds 3] [--pairs 4]

A build changes the code layout of the whole engine, which moves its tier-off runs by a few percent either
way (results/README.md §CPU tier): compare the tier-off medians too before reading a change in the ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "kvsim"

# One process's pairs: `tier_pairs`'s setup, printed as "off,on" seconds per pair.
CHILD = """
import sys, time, kvsim
from kvsim.engine import rust_engine
from kvsim.engine.engine_input import prepare
from kvsim.workloads import synthetic
from bench.callgrind_engine import with_tier
cfg = kvsim.SimConfig(num_blocks=1500, block_size=16, enable_prefix_caching=True)
w = synthetic(1_000_000, arrival_rate=100, lengths="sharegpt-paper", seed=7)
tier = with_tier(cfg, 10**8)
runs = [(prepare(w, cfg), cfg), (prepare(w, tier), tier)]
for inp, c in runs:
    rust_engine.run(inp, c)  # warm-ups, untimed
pairs = []
for _ in range(int(sys.argv[1])):
    t = []
    for inp, c in runs:
        t0 = time.process_time()
        rust_engine.run(inp, c)
        t.append(time.process_time() - t0)
    pairs.append(f"{t[0]:.5f},{t[1]:.5f}")
print(" ".join(pairs))
"""


def snapshot(folder: Path) -> None:
    """Copies the package as built now (with its extension) into `folder`/kvsim."""
    if not any(PACKAGE.glob("_core*.so")):
        raise SystemExit(f"no built extension in {PACKAGE}: run `make dev` first")
    dest = folder / "kvsim"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    print(f"snapshot of {PACKAGE} in {dest}")


def run_build(folder: Path, pairs: int) -> list[tuple[float, float]]:
    """One process of build `folder`: its pairs' (tier off, tier on) seconds."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(ROOT)]))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(pairs)],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [(float(a), float(b)) for a, b in (p.split(",") for p in out)]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("builds", nargs="*", type=Path, help="folders each holding a kvsim package (a snapshot)")
    p.add_argument("--snapshot", type=Path, help="copy the package as built now into this folder, and stop")
    p.add_argument("--rounds", type=int, default=3, help="processes of each build (alternating)")
    p.add_argument("--pairs", type=int, default=4, help="off/on pairs in each process")
    a = p.parse_args(argv)
    if a.snapshot:
        snapshot(a.snapshot)
        return
    if len(a.builds) < 2:
        p.error("give two or more build folders (or --snapshot DIR)")
    for b in a.builds:
        if not any((b / "kvsim").glob("_core*.so")):
            p.error(f"{b} holds no kvsim package with its extension (make one with --snapshot {b})")
    got: dict[Path, list[tuple[float, float]]] = {b: [] for b in a.builds}
    for _ in range(a.rounds):
        for b in a.builds:
            got[b] += run_build(b, a.pairs)
    for b, pairs in got.items():
        off, on = [x for x, _ in pairs], [y for _, y in pairs]
        ratios = [y / x for x, y in pairs]
        print(
            f"{b}: {len(pairs)} pairs; medians off {statistics.median(off):.4f} s, on "
            f"{statistics.median(on):.4f} s; ratio median {statistics.median(ratios):.4f}, "
            f"mean {statistics.mean(ratios):.4f}"
        )


if __name__ == "__main__":
    main()
