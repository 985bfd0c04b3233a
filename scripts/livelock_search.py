"""The livelock watch's check (DESIGN.md §CPU tier, "A livelock vLLM would loop in"): a random search over
hybrid models with a CPU tier (the differential tests' strategies, `tiered_hybrid_configs` and `workloads`,
and as often the found case's model, pool and tier, `_livelock_case`, with random traffic and scheduler
knobs) that runs each example on the Rust engine and, for every run the watch stops, runs it again on the
reference engine with the watch silenced for `--after` more preemptions: a run that then samples a token,
rejects a request or ends was stopped wrongly. Prints a line per stopped run and the counts.

    python scripts/livelock_search.py --examples 30000 --after 500

(from the repository root; hypothesis draws afresh each time, so the counts vary from run to run)."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hypothesis.strategies as st
from hypothesis import HealthCheck, Phase, given, settings

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.reference.engine import livelock
from tests.test_engine_differential import workloads
from tests.test_offload_hybrid import _livelock_case, tiered_hybrid_configs


class Timeout(Exception):
    pass


class Enough(Exception):
    pass


def _alarm(*_: Any) -> None:
    raise Timeout


@st.composite
def near_the_case(draw: st.DrawFn) -> kvsim.SimConfig:
    """The found case's model, tier and link, with random pools and scheduler knobs."""
    _, cfg = _livelock_case()
    return dataclasses.replace(
        cfg,
        num_blocks=draw(st.integers(40, 60)),
        free_order=draw(st.sampled_from(["classic", "lifo_unhashed"])),
        max_num_seqs=draw(st.integers(1, 8)),
        admission_gate=draw(st.sampled_from(["none", "full-prompt"])),
        watermark=draw(st.sampled_from([0.0, 0.1])),
    )


def silenced_run(w: Any, cfg: kvsim.SimConfig, after: int) -> str:
    """Runs `w` on the reference engine with the watch silenced: 'confirmed' if `after` preemptions follow
    the watch's stop without a token sampled or a request rejected, else what happened."""
    epochs: list[tuple[int, int]] = []
    note = livelock.LivelockWatch.note

    def silenced(self: livelock.LivelockWatch, epoch: tuple[int, int], state: livelock.State) -> bool:
        stops = note(self, epoch, state)
        if epochs or stops:
            epochs.append(epoch)
        if len(epochs) > after:
            raise Enough
        return False

    livelock.LivelockWatch.note = silenced  # type: ignore[method-assign]
    try:
        kvsim.simulate(w, cfg, backend="reference")
        return "ENDED (stopped wrongly)"
    except Enough:
        return "confirmed" if len(set(epochs)) == 1 else "SAMPLED OR REJECTED after the stop"
    finally:
        livelock.LivelockWatch.note = note  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=2000)
    ap.add_argument("--after", type=int, default=500, help="preemptions to run on after a stop")
    ap.add_argument("--timeout", type=int, default=20, help="seconds a Rust run may take")
    args = ap.parse_args()
    counts = {"examples": 0, "stopped": 0, "confirmed": 0, "deadlocks": 0, "slow": 0}
    signal.signal(signal.SIGALRM, _alarm)

    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    @given(workloads(max_requests=20), st.one_of(tiered_hybrid_configs(), near_the_case()))
    def search(w: Any, cfg: kvsim.SimConfig) -> None:
        counts["examples"] += 1
        signal.alarm(args.timeout)
        try:
            kvsim.simulate(w, cfg, backend="rust")
        except Timeout:
            counts["slow"] += 1  # (a slow run, or a hang the watch missed: look at it)
            print(f"slow: over {args.timeout} s on the Rust engine", flush=True)
            return
        except InvalidArgumentError as e:
            if "the run deadlocks at" in str(e):
                counts["deadlocks"] += 1
            if "the run livelocks at" not in str(e):
                return
        else:
            return
        finally:
            signal.alarm(0)
        counts["stopped"] += 1
        verdict = silenced_run(w, cfg, args.after)
        counts["confirmed"] += verdict == "confirmed"
        print(f"stopped run {counts['stopped']}: {verdict}", flush=True)

    search()
    print(counts)


if __name__ == "__main__":
    main()
