"""A livelock vLLM would loop in (DESIGN.md §CPU tier, "A livelock vLLM would loop in"; the twin of
`rust/core/src/engine/offload/livelock.rs`): requests of a hybrid model preempt one another forever,
each resumed from its load and preempted again before anyone samples a token. The engine notes its state at
each such preemption and stops when one state comes back `REPEATS` times, a load landing between each two."""

from __future__ import annotations

from kvsim.errors import InvalidArgumentError

# How often one scheduler state is met, a load landing between each two, before the run livelocks.
REPEATS = 4
# The distinct states noted before the notes start over (memory stays bounded in a long stretch without
# a sample).
MAX_STATES = 10_000

State = tuple[int, ...]


class LivelockWatch:
    """The states met at preemptions since a token was last sampled or a request last rejected."""

    def __init__(self) -> None:
        self.landings = 0  # loads (and remote transfers) landed so far
        self.epoch: tuple[int, int] = (-1, -1)  # tokens sampled by steps, requests rejected: at the notes
        # each state: how often it was met with a load landed since its last meeting, and the landings then
        self.seen: dict[State, tuple[int, int]] = {}

    def note(self, epoch: tuple[int, int], state: State) -> bool:
        """Notes `state`, met at a preemption in `epoch`; True if it is its `REPEATS`-th meeting."""
        if epoch != self.epoch or len(self.seen) >= MAX_STATES:
            self.seen.clear()
            self.epoch = epoch
        count, landed = self.seen.get(state, (0, self.landings))
        if count == 0 or self.landings > landed:
            count += 1
        self.seen[state] = (count, self.landings)
        return count >= REPEATS


def livelock_error(t: int) -> InvalidArgumentError:
    """The error a livelocked run stops with (both engines' words)."""
    return InvalidArgumentError(
        f"the run livelocks at {t} ps: requests preempt one another and none samples a token (the engine met "
        f"the same state at {REPEATS} preemptions, a load landing between each); vLLM 0.33.0's and 0.34.0's "
        "scheduler would loop here forever (a load is admitted with blocks reserved only for the prompts still prefilling, "
        "none for a decoding request's next block or a sliding window's, and a held load is not preempted: "
        "DESIGN.md §CPU tier)"
    )
