"""Data-parallel groups (DESIGN.md §Data-parallel groups; the twin of `rust/core/src/cluster/dp.rs`): a
mixture-of-experts model's DP ranks, `size` consecutive replicas of the fleet, step together on one clock.
Each group step every rank schedules, the step lasts the slowest rank's time (a rank with nothing runs a
dummy batch of one token; each rank's routed experts compute every rank's tokens, gathered), every rank
that scheduled records it with that duration and the others' clocks move with the group; vLLM's wave (`DPEngineCoreProc.run_busy_loop`, `vllm/v1/engine/core.py`) ends only at a 32nd step
with no rank holding a request."""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.reference.engine import Replica

# vLLM's `_has_global_unfinished_reqs` all-reduces the ranks' unfinished requests every this many steps.
WAVE_CHECK_STEPS = 32


@dataclass
class Wave:
    """One group's wave: running (it stepped since its last end) and the steps taken in it."""

    running: bool = False
    steps: int = 0


def landing(t: int, a: int, wave: Wave, d: int) -> tuple[int, Wave]:
    """Where an idle group at `t` lands for a row arriving at `a > t`, with its wave and the ranks' longest
    dummy batch `d`: the first dummy step at or after `a` while the wave's steps last, else the wave ends
    and the next starts at `a` (or at the last dummy step's end, if later)."""
    if not wave.running or d == 0:
        return a, Wave()
    left = WAVE_CHECK_STEPS - wave.steps % WAVE_CHECK_STEPS
    j = -(-(a - t) // d)
    if j < left:
        return t + j * d, Wave(True, wave.steps + j)
    return max(a, t + left * d), Wave()


class Groups:
    """The fleet's DP groups: replicas `g*size .. g*size + size - 1` form group g."""

    def __init__(self, n: int, size: int) -> None:
        assert size > 1
        assert n % size == 0
        self.size = size
        self.waves = [Wave() for _ in range(n // size)]

    def ranks(self, g: int) -> range:
        return range(g * self.size, (g + 1) * self.size)

    def advance(self, g: int, reps: list[Replica], horizon: int) -> None:
        """Every step of group `g` that starts strictly before `horizon` (an idle group's landing too); a
        group with no row left stops at its last step's end."""
        ranks = [reps[r].engine for r in self.ranks(g)]
        while True:
            t = ranks[0].t
            if t >= horizon:
                return
            plans = [e.group_plan() for e in ranks]
            # Every rank's experts compute the tokens gathered from all ranks (a dummy batch's one too).
            gathered = sum(p[1] if p is not None else 1 for p in plans)
            d = max(
                (p[0] if p is not None else e.dummy_time()) + e.experts_time(gathered)
                for e, p in zip(ranks, plans, strict=True)
            )
            if all(p is None for p in plans):
                pending = [a for a in (e.next_arrival() for e in ranks) if a is not None]
                if not pending:
                    return  # nothing left: the wave's remaining dummy steps observe nothing
                at, wave = landing(t, min(pending), self.waves[g], d)
                if at >= horizon:
                    return
                for e in ranks:
                    e.group_dummy(at)
                self.waves[g] = wave
                continue
            for e, p in zip(ranks, plans, strict=True):
                if p is not None:
                    e.group_commit(d)
            for e, p in zip(ranks, plans, strict=True):
                if p is None:
                    e.group_dummy(t + d)
            w = self.waves[g]
            w.running = True
            w.steps += 1
            if w.steps % WAVE_CHECK_STEPS == 0 and not any(e.has_work() for e in ranks):
                self.waves[g] = Wave()

    def advance_all(self, reps: list[Replica], horizon: int) -> None:
        for g in range(len(self.waves)):
            self.advance(g, reps, horizon)
