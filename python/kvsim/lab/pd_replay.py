"""One replica's requests, step by step, for the lab's disaggregated page (DESIGN.md §Lab, "A disaggregated
fleet"): when each request sampled its tokens, when it was preempted and readmitted, and how many of its
blocks had keys when it released them (what a freed block keeps in the prefix cache).

Nothing here decides anything: it reads one replica's event log and time series (the reference engine's,
`run_cluster(..., record_events=True, timeseries_every=1)`), the rules of DESIGN.md §Event log: a running
request computes one token in each step unless a `schedule` row gives its count (0: left out); an
admission computes from its prefix hits (`prefix-hit` rows, a block each); a `preempt` takes it out, its
computed tokens back to 0 (recompute: it computes its prompt and the tokens it generated again when it is
readmitted); a request samples a token at the end of a step in which its computed tokens reach its prompt
plus the tokens it has generated. A remote request admitted with a transfer is *held* (no seat, no
computation) until its transfer is seen; the log has no row for its resume (§Event log), so the number
resumed in a step is the step's batch (time series) less the running requests it schedules, taken from
the held queue's head among those seen (vLLM's `_update_waiting_for_remote_kv`, then the held queue
before the waiting one); it resumes with its transferred tokens computed, one short of its prompt when
the transfer covered all of it (§Prefill/decode disaggregation, step 6). A block has a key once it is
full of computed tokens (vLLM 0.33.0 `KVCacheManager.cache_blocks`: a request's full blocks are cached as
it computes them), a transferred block once its transfer lands; a freed block keeps its key.

The replay checks itself against the engine: every step's computed tokens add up to the time series'
`batched_tokens`, and a step end is the next moment the replica's log or time series shows; the tests
check the sampling times against the rows' `first_token`, `finish` and `generated`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvsim.errors import InternalError
from kvsim.reference.engine.events import EVENT

ADMIT, PREFIX_HIT, ALLOCATE = EVENT["admit"], EVENT["prefix-hit"], EVENT["allocate"]
FREE, PREEMPT, FINISH, REJECT = EVENT["free"], EVENT["preempt"], EVENT["finish"], EVENT["reject"]
SCHEDULE = EVENT["schedule"]
QUIET = (EVENT["evict"], EVENT["cow-copy"])  # rows that change no request's tokens
REFUSED = tuple(EVENT[k] for k in ("swap-out", "swap-in", "fork", "window", "store", "load"))


@dataclass
class Preemption:
    """One preemption of a request: preempted at `start` (ps), readmitted at `readmit` and sampling again
    at `resample` (-1: not in the run)."""

    start: int
    readmit: int = -1
    resample: int = -1


@dataclass
class Replay:
    """Per input row: the times (ps) of its sampled tokens, its preemptions; per `free` row of the log (its
    index), how many of the freeing request's table's leading blocks had keys."""

    samples: list[np.ndarray]
    preemptions: list[list[Preemption]]
    keyed_at_free: dict[int, int] = field(default_factory=dict)

    def generated(self, row: int, t: int) -> int:
        """The tokens row `row` sampled at or before `t` (ps) on this replica."""
        return int(np.searchsorted(self.samples[row], t, side="right"))

    def preempted(self, row: int, t: int) -> str | None:
        """'preempted' (its blocks freed, waiting to be readmitted) or 'recomputing' (readmitted, before it
        samples again) at `t`, else None."""
        for p in self.preemptions[row]:
            if p.start <= t and (p.readmit < 0 or t < p.readmit):
                return "preempted"
            if 0 <= p.readmit <= t and (p.resample < 0 or t < p.resample):
                return "recomputing"
        return None


def replay(
    events: dict[str, np.ndarray],
    timeseries: dict[str, np.ndarray],
    prompt_len: np.ndarray,
    block_size: int,
    seen: np.ndarray,
) -> Replay:
    """Replays one replica (see the module's docstring). `seen[row]`: when the remote request's transfer is
    seen complete, for a row whose first admission here holds it for a transfer; -1 for every other."""
    n = len(prompt_len)
    kind, seq, t_ev, step_ev, count = (
        events["kind"],
        events["seq"],
        events["time_ps"],
        events["step"],
        events["count"],
    )
    ts_step = np.asarray(timeseries["step"], dtype=np.int64)
    ts_time = np.asarray(timeseries["time_ps"], dtype=np.int64)
    ts_batch = np.asarray(timeseries["batch"], dtype=np.int64)
    ts_tokens = np.asarray(timeseries["batched_tokens"], dtype=np.int64)
    # A step's end: the first moment the log or the time series shows with the next step count.
    first_at: dict[int, int] = {}
    steps = np.concatenate([step_ev, ts_step]).tolist()
    for s, t in zip(steps, np.concatenate([t_ev, ts_time]).tolist(), strict=True):
        first_at[s] = min(first_at.get(s, t), t)
    status = ["absent"] * n
    computed = [0] * n
    gen = [0] * n
    keyed = [0] * n
    table = [0] * n  # its table's blocks since its admission
    moved = [0] * n  # a held request's blocks of its admission (its hits and its transfer's)
    admitted_at = [-1] * n
    admitted = [False] * n
    held: list[int] = []  # the held queue, in admission order
    running: list[int] = []
    sampled: list[list[int]] = [[] for _ in range(n)]  # step counts
    preemptions: list[list[Preemption]] = [[] for _ in range(n)]
    keyed_at_free: dict[int, int] = {}
    pos, n_ev = 0, len(kind)

    def events_until(k: int) -> dict[int, int]:
        """Every row with a step count up to `k`; returns the `schedule` rows of step k (row -> count)."""
        nonlocal pos
        listed: dict[int, int] = {}
        while pos < n_ev and step_ev[pos] <= k:
            e, row, when = int(kind[pos]), int(seq[pos]), int(t_ev[pos])
            if e == ADMIT:
                table[row] = 0
                admitted_at[row] = when
                keyed[row] = 0
                if not admitted[row] and seen[row] >= 0:
                    status[row] = "held"
                    held.append(row)
                else:
                    status[row] = "running"
                    running.append(row)
                    computed[row] = 0
                    if preemptions[row]:
                        preemptions[row][-1].readmit = when
                admitted[row] = True
            elif e == PREFIX_HIT:
                table[row] += 1
                moved[row] += status[row] == "held" and when == admitted_at[row]
                keyed[row] += 1
                if status[row] == "running":
                    computed[row] += block_size
            elif e == ALLOCATE:
                table[row] += 1
                moved[row] += status[row] == "held" and when == admitted_at[row]
            elif e == SCHEDULE:
                if int(step_ev[pos]) == k:
                    listed[row] = int(count[pos])
            elif e == PREEMPT:
                status[row] = "preempted"
                running.remove(row)
                computed[row] = 0
                preemptions[row].append(Preemption(when))
            elif e == FREE:
                keyed_at_free[pos] = keyed[row]
            elif e in (FINISH, REJECT):
                if row in running:
                    running.remove(row)
                if row in held:
                    held.remove(row)
                status[row] = "done"
            elif e in REFUSED:
                raise InternalError(f"the disaggregated page does not replay {e!r} rows (event {pos})")
            elif e not in QUIET:
                raise InternalError(f"event kind {e} at {pos} out of place")
            pos += 1
        return listed

    for j in range(len(ts_step)):
        k, start = int(ts_step[j]), int(ts_time[j])
        listed = events_until(k)
        scheduled = sum(1 for row in running if listed.get(row, 1) > 0)
        ready = [row for row in held if 0 <= seen[row] <= start]
        m = int(ts_batch[j]) - scheduled
        if m < 0 or m > len(ready):
            raise InternalError(f"step {k}: {m} held requests resumed of {len(ready)} seen")
        for row in ready[:m]:
            held.remove(row)
            running.append(row)
            status[row] = "running"
            keyed[row] = moved[row]  # its transfer landed: its blocks have keys
            computed[row] = min(moved[row] * block_size, int(prompt_len[row]) - 1)
        tokens = 0
        for row in running:
            c = listed.get(row, 1)
            tokens += c
            computed[row] += c
            keyed[row] = max(keyed[row], computed[row] // block_size)
            goal = int(prompt_len[row]) + gen[row]
            if computed[row] > goal:
                raise InternalError(f"step {k}: row {row} computed {computed[row]} of {goal} tokens")
            if c > 0 and computed[row] == goal:
                gen[row] += 1
                sampled[row].append(k)
        if tokens != int(ts_tokens[j]):
            raise InternalError(f"step {k}: the replay computes {tokens} tokens, the engine {ts_tokens[j]}")
    events_until(1 << 62)

    def end(k: int) -> int:
        if k + 1 not in first_at:
            raise InternalError(f"step {k} sampled a token and nothing follows it")
        return first_at[k + 1]

    samples = [np.asarray([end(k) for k in s], dtype=np.int64) for s in sampled]
    for row in range(n):
        for p in preemptions[row]:  # it samples again once readmitted and recomputed
            later = samples[row][samples[row] > p.start]
            p.resample = int(later[0]) if len(later) and p.readmit >= 0 else -1
    return Replay(
        samples=samples,
        preemptions=preemptions,
        keyed_at_free=keyed_at_free,
    )
