"""Reference cluster: replicas behind a router on one simulated clock (the executable spec of
`rust/core/src/cluster/`: the driver of `mod.rs` and the routers of `router.rs`).

Each unit (a sequence, or a fork-cow parent with its samples) goes, at its arrival, to the replica a
router picks from the replicas' signals at that instant (`Replica`: waiting, running, in flight, KV used
and total, prefix hits), exact or from a snapshot refreshed every `refresh_ps`; the replicas run their
steps between arrivals. DESIGN.md §Engine states what each router reads, and when.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from kvsim.engine.engine_input import EngineInput
from kvsim.errors import InternalError, InvalidArgumentError
from kvsim.model.config import ROUTER_TIE_BREAKS, SimConfig
from kvsim.reference.block_pool import check_pool_memory
from kvsim.reference.dp import Groups
from kvsim.reference.engine import COLUMN_DTYPE, COLUMN_FILL, EVENT_COLUMNS, FINISHED, Replica

MASK64 = (1 << 64) - 1
MAX_HORIZON = (1 << 63) - 1  # an advance with no horizon (the clock's range is below it)
ROUTERS = ("round-robin", "random", "least-loaded", "least-kv", "prefix-affinity", "weighted")
# Routers that read the replicas' state (the others need not step anyone before pushing).
STATEFUL_ROUTERS = ("least-loaded", "least-kv", "prefix-affinity", "weighted")
TIE_BREAKS = ROUTER_TIE_BREAKS  # how a router that reads state settles a tie among its best replicas
SCORERS = ("prefix", "queue", "kv")  # the weighted router's scorers, summed in this order
DEFAULT_WEIGHTS = {"prefix": 3.0, "queue": 2.0, "kv": 2.0}


def splitmix64(state: int) -> tuple[int, int]:
    """One step of splitmix64: the next state and its output (all arithmetic wrapping u64)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def _finite_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{name} {value!r} is not a number")
    x = float(value)
    if not math.isfinite(x):
        raise InvalidArgumentError(f"{name} {value!r} is not finite")
    return x


@dataclass(frozen=True)
class RouterSpec:
    """Which router, with its parameters (the cluster contract §4).

    Attributes:
        name: one of `ROUTERS`.
        seed: the seed (a u64) of the router's splitmix64 stream: `random` draws from it once per unit,
            the routers that read state once per tie among their best replicas (`tie_break` `random`).
        refresh_ps: 0 for an exact view of the replicas; R > 0 for a snapshot taken at the latest
            multiple of R picoseconds at or before each arrival.
        prefix_load_cap: `prefix-affinity`'s cap c >= 1: a replica is eligible while its load is at most
            c x (mean load + 1).
        weights: `weighted`'s scorer weights (`prefix`, `queue`, `kv`; each a finite float >= 0); None
            for `DEFAULT_WEIGHTS`.
        tie_break: how a router that reads state settles a tie among its best replicas (`TIE_BREAKS`):
            `random`, the tied replica `ties[(z * t) >> 64]` for the stream's next draw z (t tied, in
            index order); `lowest`, the lowest index; `round-robin`, the first tied replica at or after
            `k mod N` in cyclic order, for the unit's 0-based count k.
        dp_group: the fleet's data-parallel groups: every `dp_group` consecutive replicas are the ranks of
            one, stepping together (DESIGN.md §Data-parallel groups; `kvsim.reference.dp`); 1: apart.

    Raises:
        InvalidArgumentError: a field out of its domain, naming the field and the value.
    """

    name: str
    seed: int = 0
    refresh_ps: int = 0
    prefix_load_cap: float = 1.5
    weights: Mapping[str, float] | None = None
    tie_break: str = "random"
    dp_group: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name not in ROUTERS:
            raise InvalidArgumentError(
                f"router {self.name!r} is not one of {', '.join(repr(r) for r in ROUTERS)}"
            )
        if not isinstance(self.tie_break, str) or self.tie_break not in TIE_BREAKS:
            raise InvalidArgumentError(
                f"router_tie_break {self.tie_break!r} is not one of {', '.join(repr(t) for t in TIE_BREAKS)}"
            )
        for name, value, hi in (
            ("router_seed", self.seed, MASK64),
            ("router_refresh_ps", self.refresh_ps, None),
        ):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise InvalidArgumentError(f"{name} {value!r} is not an integer")
            if value < 0 or (hi is not None and value > hi):
                bound = f"between 0 and {hi}" if hi is not None else "at least 0"
                raise InvalidArgumentError(f"{name} {value!r} must be {bound}")
        if isinstance(self.dp_group, bool) or not isinstance(self.dp_group, int | np.integer):
            raise InvalidArgumentError(f"dp_group {self.dp_group!r} is not an integer")
        if self.dp_group < 1:
            raise InvalidArgumentError(f"dp_group {self.dp_group} must be at least 1")
        object.__setattr__(self, "dp_group", int(self.dp_group))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "refresh_ps", int(self.refresh_ps))
        cap = _finite_float("prefix_load_cap", self.prefix_load_cap)
        if cap < 1.0:
            raise InvalidArgumentError(f"prefix_load_cap {self.prefix_load_cap!r} must be at least 1")
        object.__setattr__(self, "prefix_load_cap", cap)
        if self.weights is not None:
            if not isinstance(self.weights, Mapping):
                raise InvalidArgumentError(
                    f"router_weights {self.weights!r} is not a mapping of scorer names to weights"
                )
            weights: dict[str, float] = {}
            for key, weight in self.weights.items():
                if key not in SCORERS:
                    raise InvalidArgumentError(
                        f"router_weights names an unknown scorer {key!r} (scorers: {', '.join(SCORERS)})"
                    )
                w = _finite_float(f"router_weights[{key!r}]", weight)
                if w < 0.0:
                    raise InvalidArgumentError(f"router_weights[{key!r}] {weight!r} must not be negative")
                weights[key] = w
            object.__setattr__(self, "weights", weights)

    def __hash__(self) -> int:
        w = None if self.weights is None else tuple(sorted(self.weights.items()))
        return hash(
            (self.name, self.seed, self.refresh_ps, self.prefix_load_cap, w, self.tie_break, self.dp_group)
        )

    @property
    def reads_state(self) -> bool:
        return self.name in STATEFUL_ROUTERS

    def scorer_weights(self) -> tuple[float, float, float]:
        """`weighted`'s weights in `SCORERS` order (an absent name weighs 0.0)."""
        w = DEFAULT_WEIGHTS if self.weights is None else self.weights
        return w.get("prefix", 0.0), w.get("queue", 0.0), w.get("kv", 0.0)


@dataclass(frozen=True)
class PdSpec:
    """A disaggregated fleet's prefill pool (DESIGN.md §Prefill/decode disaggregation), checked by
    `kvsim.engine.cluster`.

    Attributes:
        prefill_replicas: P >= 1 prefill replicas.
        threshold_tokens: a request whose prompt part not cached on its decode replica is under this
            prefills there (conditional disaggregation); 0: every request is disaggregated.
        link_latency_ps: a transfer's fixed time on a decode replica's inbound link.
        link_ps_per_block: a block's time on that link.
        prefill_config: the prefill replicas' config (None: the decode replicas' `configs[0]`).
    """

    prefill_replicas: int
    threshold_tokens: int = 0
    link_latency_ps: int = 0
    link_ps_per_block: int = 0
    prefill_config: SimConfig | None = None


# The fleet's extra per-row columns with a prefill pool: the prefill replica (-1: prefilled locally on its
# decode replica), when it first scheduled the request and when it finished it (-1: not disaggregated).
PD_COLUMNS = ("prefill_replica", "prefill_first_scheduled", "prefill_finish")


@dataclass
class ClusterOutput:
    """A cluster run's output.

    Attributes:
        columns: the single run's per-sequence output columns (`EngineOutput`'s names and dtypes) for every
            row of the input, in its row order, plus `replica` (int64, 0-based).
        counters: per replica, the counters dict a single run gives, over that replica's rows and steps.
        timeseries: per replica, its time series (empty dicts unless `timeseries_every > 0`).
        events: per replica, its event log (empty dicts unless `record_events`); `seq` is the input's row.
    """

    columns: dict[str, np.ndarray]
    counters: list[dict[str, int]]
    timeseries: list[dict[str, np.ndarray]] = field(default_factory=list)
    events: list[dict[str, np.ndarray]] = field(default_factory=list)


@dataclass
class View:
    """What the router reads of one replica (live, or a snapshot plus what was routed since)."""

    waiting: int
    running: int
    in_flight: int
    kv_used: int
    kv_total: int
    keys: set[int] | None  # a snapshot of the prefix map; None: look up the replica's live map

    @property
    def load(self) -> int:
        return self.waiting + self.running + self.in_flight


def view_of(rep: Replica, snapshot: bool) -> View:
    return View(
        rep.waiting(),
        rep.running(),
        rep.in_flight(),
        rep.kv_used(),
        rep.kv_total(),
        rep.key_set() if snapshot else None,
    )


class Router:
    """Picks a replica for each unit (the cluster contract §4): the routers that read state find the
    replicas tied for best and settle a tie by `spec.tie_break`."""

    def __init__(self, spec: RouterSpec, replicas: list[Replica]) -> None:
        self.spec = spec
        self.replicas = replicas
        self.n = len(replicas)
        self.count = 0  # units routed so far
        self.state = spec.seed  # the splitmix64 state: random's draws and the ties' draws

    def hits(self, r: int, view: View, segments: list[tuple[int, int]], prompt_len: int) -> int:
        return self.replicas[r].prefix_hit_blocks(segments, prompt_len, view.keys)

    def draw(self, n: int) -> int:
        """The next draw z of the stream, as a number below n: (z * n) >> 64."""
        self.state, z = splitmix64(self.state)
        return (z * n) >> 64

    def settle(self, ties: list[int]) -> int:
        """One of the tied best replicas (in index order) for the unit just counted: the only one, a
        draw, the lowest, or the first at or after k mod N cyclically (k: the unit's 0-based count)."""
        if len(ties) == 1 or self.spec.tie_break == "lowest":
            return ties[0]
        if self.spec.tie_break == "round-robin":
            k = self.count - 1
            return min(ties, key=lambda r: (r - k) % self.n)
        return ties[self.draw(len(ties))]

    def pick(self, views: list[View], segments: list[tuple[int, int]], prompt_len: int) -> int:
        name, n = self.spec.name, self.n
        self.count += 1
        if name == "round-robin":
            return (self.count - 1) % n
        if name == "random":
            return self.draw(n)
        loads = [v.load for v in views]
        key: dict[int, Any]
        if name == "least-loaded":
            key = {r: loads[r] for r in range(n)}
        elif name == "least-kv":
            # Utilisation kv_used / kv_total as an exact rational, then load.
            key = {r: (Fraction(views[r].kv_used, views[r].kv_total), loads[r]) for r in range(n)}
        elif name == "prefix-affinity":
            bound = self.spec.prefix_load_cap * float(sum(loads) + n)
            eligible = [r for r in range(n) if float(loads[r] * n) <= bound]
            key = {r: (-self.hits(r, views[r], segments, prompt_len), loads[r]) for r in eligible}
            if not key:  # unreachable (the least loaded is always eligible, cap >= 1); as the Rust router
                key = {r: loads[r] for r in range(n)}
        else:  # weighted: the highest score (negated: the least key)
            wp, wq, wk = self.spec.scorer_weights()
            lo, hi = min(loads), max(loads)
            key = {}
            for r in range(n):
                v = views[r]
                blocks = max(prompt_len - 1, 0) // self.replicas[r].block_size
                # (read only with a prefix weight: a hybrid replica has no prefix map a router reads, and
                # a weighted router reading none is the one it may have)
                hits = self.hits(r, v, segments, prompt_len) if wp and blocks else 0
                prefix = float(hits) / float(blocks) if blocks else 0.0
                queue = float(hi - loads[r]) / float(hi - lo) if hi != lo else 1.0
                kv = 1.0 - float(v.kv_used) / float(v.kv_total)
                key[r] = -(wp * prefix + wq * queue + wk * kv)
        best = min(key.values())
        return self.settle([r for r in sorted(key) if key[r] == best])


def _units(inp: EngineInput) -> list[tuple[int, int]]:
    """Row ranges of the routed units: a sequence, or a fork-cow parent with its samples after it."""
    fork = inp.fork_parent
    n = len(inp)
    out: list[tuple[int, int]] = []
    if n and int(np.max(fork)) < 0:
        return [(i, i + 1) for i in range(n)]
    i = 0
    while i < n:
        j = i + 1
        while j < n and int(fork[j]) == i:
            j += 1
        out.append((i, j))
        i = j
    return out


def _check_fleet(inp: EngineInput, configs: list[SimConfig]) -> None:
    """What every replica must allow of the input (the Rust driver refuses the same, with the same
    words): fork-cow rows need policy `vllm` and a budget of at least `max_num_seqs` on every replica, and
    the pools together must fit the memory limit, as one pool must."""
    if len(inp) and int(np.max(inp.fork_parent)) >= 0:
        for r, cfg in enumerate(configs):
            if cfg.policy != "vllm":
                raise InvalidArgumentError(
                    f"replica {r}: sampling 'fork-cow' (rows with a fork_parent) applies to policy 'vllm'"
                )
            if cfg.max_num_batched_tokens < cfg.max_num_seqs:
                raise InvalidArgumentError(
                    f"replica {r}: sampling 'fork-cow' needs max_num_batched_tokens >= max_num_seqs "
                    f"(vLLM v0's rule), got max_num_batched_tokens {cfg.max_num_batched_tokens} < "
                    f"max_num_seqs {cfg.max_num_seqs}"
                )
    total = sum(int(cfg.num_blocks or 0) for cfg in configs)
    if total > (1 << 32) - 1:
        raise InvalidArgumentError(
            f"configs: the replicas' pools hold {total} blocks in all, more than one machine's bookkeeping "
            "can address"
        )
    check_pool_memory(total)


def run_cluster(
    inp: EngineInput,
    configs: list[SimConfig],
    router: RouterSpec,
    timeseries_every: int = 0,
    record_events: bool = False,
    pd: PdSpec | None = None,
) -> ClusterOutput:
    """Simulates `inp` on `len(configs)` replicas (replica r under `configs[r]`) behind `router`, on one
    clock (the cluster contract §3): at each unit's arrival a router that reads state first steps every
    replica to that instant (or, with `refresh_ps = R > 0`, to the latest multiple of R, when that is new,
    and snapshots it), then the unit is pushed to the replica it picks; at the end every replica runs to
    completion. With `timeseries_every = N > 0` or `record_events`, each replica records as a single run.

    Raises:
        InvalidArgumentError: no configs, a config that is not a `SimConfig`, a router that is not a
            `RouterSpec`, fork-cow rows on a replica that cannot fork, pools that together exceed the
            memory limit, or what a single run refuses.
    """
    if not isinstance(router, RouterSpec):
        raise InvalidArgumentError(f"router {router!r} is not a RouterSpec")
    configs = list(configs)
    if not configs:
        raise InvalidArgumentError("replicas 0: a cluster needs at least one replica (configs is empty)")
    for i, cfg in enumerate(configs):
        if not isinstance(cfg, SimConfig):
            raise InvalidArgumentError(f"configs[{i}] {cfg!r} is not a SimConfig")
    if isinstance(timeseries_every, bool) or not isinstance(timeseries_every, int) or timeseries_every < 0:
        raise InvalidArgumentError(f"timeseries_every {timeseries_every!r} must be an int >= 0")
    g = router.dp_group
    if pd is not None and g > 1:
        raise InvalidArgumentError(
            f"dp_group {g}: a disaggregated fleet (prefill_replicas > 0) with data-parallel groups is not modelled"
        )
    if len(configs) % g:
        raise InvalidArgumentError(
            f"dp_group {g}: the {len(configs)} replicas must form whole data-parallel groups (a divisor of the "
            "replica count, 1 for none)"
        )
    if g > 1 and any(cfg.kv_offloading_chunks for cfg in configs):
        raise InvalidArgumentError(
            f"dp_group {g}: a CPU tier with data-parallel groups is not modelled (its stores lengthen and stall "
            "a rank's steps)"
        )
    if pd is not None:
        _check_fleet(inp, [*configs, *[pd.prefill_config or configs[0]] * pd.prefill_replicas])
        return _run_pd(inp, configs, router, timeseries_every, record_events, pd)
    _check_fleet(inp, configs)
    n = len(inp)
    replicas = [Replica(inp, cfg, timeseries_every, record_events) for cfg in configs]
    groups = Groups(len(replicas), g) if g > 1 else None
    pick = Router(router, replicas)
    rows_of: list[list[int]] = [[] for _ in replicas]  # each replica's rows, as input rows
    replica = np.zeros(n, dtype=np.int64)
    reads, every = router.reads_state, router.refresh_ps
    window = -1  # the start of the current snapshot's window (stale view)
    views: list[View] = []
    routed = [0] * len(replicas)  # units routed to each replica since the snapshot
    for lo, hi in _units(inp):
        a = int(inp.arrival_ps[lo])
        if reads:
            if every:
                s = a // every * every
                if s != window:
                    window = s
                    advance(replicas, groups, s)
                    views = [view_of(rep, True) for rep in replicas]
                    routed = [0] * len(replicas)
                now = [
                    View(v.waiting, v.running, v.in_flight + k, v.kv_used, v.kv_total, v.keys)
                    for v, k in zip(views, routed, strict=True)
                ]
            else:
                advance(replicas, groups, a)
                now = [view_of(rep, False) for rep in replicas]
            r = pick.pick(now, inp.segments(lo), int(inp.prompt_len[lo]))
        else:
            r = pick.pick([], [], 0)
        replicas[r].push(inp, lo, hi)
        rows_of[r].extend(range(lo, hi))
        replica[lo:hi] = r
        routed[r] += 1
    if groups is not None:
        groups.advance_all(replicas, MAX_HORIZON)
    columns = {k: np.full(n, COLUMN_FILL[k], dtype=COLUMN_DTYPE[k]) for k in COLUMN_FILL}
    counters, timeseries, events = [], [], []
    for rep, rows in zip(replicas, rows_of, strict=True):
        out = rep.finish()
        idx = np.asarray(rows, dtype=np.int64)
        for k in COLUMN_FILL:
            columns[k][idx] = getattr(out, k)
        counters.append(dict(out.counters))
        timeseries.append(out.timeseries)
        if out.events:
            ev = dict(out.events)
            ev["seq"] = idx[ev["seq"]] if len(idx) else ev["seq"]
            events.append({k: ev[k] for k in EVENT_COLUMNS})
        else:
            events.append({})
    columns["replica"] = replica
    return ClusterOutput(columns, counters, timeseries, events)


def advance(replicas: list[Replica], groups: Groups | None, horizon: int) -> None:
    """Every replica to `horizon` (each step starting before it), in its group if the fleet has DP groups."""
    if groups is not None:
        groups.advance_all(replicas, horizon)
        return
    for rep in replicas:
        rep.advance_until(horizon)


def _gather(
    inp: EngineInput, reps: list[Replica], rows_of: list[list[int]], columns: dict[str, np.ndarray], take: Any
) -> tuple[list[dict[str, int]], list[dict[str, np.ndarray]], list[dict[str, np.ndarray]], list[Any]]:
    """Runs each replica to its end and writes its rows' columns where `take(row, columns of the replica,
    its index)` allows; returns its counters, time series, events and outputs."""
    counters, timeseries, events, outs = [], [], [], []
    for rep, rows in zip(reps, rows_of, strict=True):
        out = rep.finish()
        idx = np.asarray(rows, dtype=np.int64)
        keep = np.asarray([take(int(r), out, i) for i, r in enumerate(rows)], dtype=bool)
        for k in COLUMN_FILL:
            columns[k][idx[keep]] = getattr(out, k)[keep] if len(idx) else getattr(out, k)
        counters.append(dict(out.counters))
        timeseries.append(out.timeseries)
        if out.events:
            ev = dict(out.events)
            ev["seq"] = idx[ev["seq"]] if len(idx) else ev["seq"]
            events.append({k: ev[k] for k in EVENT_COLUMNS})
        else:
            events.append({})
        outs.append(out)
    return counters, timeseries, events, outs


def _run_pd(
    inp: EngineInput,
    configs: list[SimConfig],
    router: RouterSpec,
    timeseries_every: int,
    record_events: bool,
    pd: PdSpec,
) -> ClusterOutput:
    """The disaggregated fleet (DESIGN.md §Prefill/decode disaggregation): `configs` are the decode
    replicas; `pd.prefill_replicas` more run `pd.prefill_config` (or `configs[0]`). A unit's decode replica
    is picked first, then, unless its uncached prompt part is under the threshold, its prefill replica,
    which runs it to its first token; at that finish it joins its decode replica as a remote request, and
    the prefill replica holds its blocks until the decode side's read ends. The replicas' steps are taken
    in one global order by start instant (decode before prefill at a tie), in rounds of windows
    (`step_until`), every step before a unit's arrival taken before it is routed. Counters, time series
    and events: the decode replicas', then the prefill replicas'."""
    n = len(inp)
    link = (pd.link_latency_ps, pd.link_ps_per_block)
    decode = [Replica(inp, cfg, timeseries_every, record_events, link) for cfg in configs]
    prefill_cfg = pd.prefill_config or configs[0]
    prefill = [Replica(inp, prefill_cfg, timeseries_every, record_events) for _ in range(pd.prefill_replicas)]
    # A model with a Mamba group: the prefill replica computes the prompt but its last token, which the
    # decode side computes from the state after it (vLLM's `_prefill_backoff`, DESIGN.md
    # §Prefill/decode disaggregation, "A Mamba (state) group").
    layout = prefill_cfg.pool.layout
    backoff = int(layout is not None and any(g.kind == "mamba" for g in layout.groups))
    for rep in prefill:
        rep.engine.prefill_side = True
        rep.engine.hold_sends = not prefill_cfg.is_contiguous
    route_d = Router(router, decode)
    route_p = Router(dataclasses.replace(router, seed=(router.seed + 1) & MASK64), prefill)
    rows_d: list[list[int]] = [[] for _ in decode]
    rows_p: list[list[int]] = [[] for _ in prefill]
    replica = np.zeros(n, dtype=np.int64)
    pre = np.full(n, -1, dtype=np.int64)
    pending: list[dict[int, tuple[int, int]]] = [{} for _ in prefill]  # engine row -> (input row, decode)
    # Known hand-offs not pushed yet: (finish, prefill replica, input row, decode replica, row on p).
    handoffs: list[tuple[int, int, int, int, int]] = []
    # Per decode replica, its remote rows (row on d -> (prefill replica, row on p)) whose transfer end
    # the decode side has not decided yet.
    remote_of: list[dict[int, tuple[int, int]]] = [{} for _ in decode]
    # Per prefill replica and decode replica: its requests in flight or held with an end undecided
    # (pushed there or not); and per prefill replica, its hand-offs not pushed yet.
    undecided = [[0] * len(decode) for _ in prefill]
    unpushed = [0] * len(prefill)
    inf = float("inf")

    def collect() -> None:
        for p, rep in enumerate(prefill):
            status, finish = rep.engine.cols["status"], rep.engine.cols["finish"]
            for k in rep.engine.take_done_rows():
                row, d = pending[p].pop(k)
                if status[k] == FINISHED:
                    handoffs.append((int(finish[k]), p, row, d, k))
                    unpushed[p] += 1
                else:
                    undecided[p][d] -= 1

    def deliver(limit: float) -> bool:
        """Pushes every known hand-off with finish before `limit`, in order of (finish, prefill replica,
        row); whether one was."""
        handoffs.sort()
        i = 0
        while i < len(handoffs) and handoffs[i][0] < limit:
            f, p, row, d, k = handoffs[i]
            decode[d].push(inp, row, row + 1, arrival=f, remote=True)
            rows_d[d].append(row)
            remote_of[d][len(decode[d].engine.seqs) - 1] = (p, k)
            unpushed[p] -= 1
            i += 1
        del handoffs[:i]
        return i > 0

    def ne(rep: Replica) -> float:
        t = rep.engine.next_event()
        return inf if t is None else t

    def step_until(a: float) -> None:
        """Rounds of windows until no replica has a step starting before `a` (DESIGN.md, the order of
        events): decode replicas to `H_d`, their decided transfer ends to the prefill replicas, prefill
        replicas each to its `H_p`, their finishes collected."""
        while True:
            # A prefill replica stalled for its held blocks steps next at its next arrival, an end
            # decided, or an end still undecided: at or after its decode replicas' next steps, or after
            # the finish of a hand-off not pushed yet.
            lb_p = []
            for p, rep in enumerate(prefill):
                t = min(ne(rep), a)
                if rep.engine.stalled:
                    t = min([t, *(ne(decode[d]) for d, c in enumerate(undecided[p]) if c)])
                    t = min([t, *(h[0] for h in handoffs if h[1] == p)])
                lb_p.append(t)
            h_d = min(a, min(lb_p) + 1)
            moved = deliver(h_d)
            lb_d = []
            for d, rep in enumerate(decode):
                if ne(rep) < h_d:
                    rep.advance_until(MAX_HORIZON if h_d == inf else int(h_d))
                    moved = True
                for row, end in rep.engine.take_sends_decided():
                    p, k = remote_of[d].pop(row)
                    prefill[p].engine.send_ended(k, end)
                    undecided[p][d] -= 1
                lb_d.append(min(ne(rep), h_d))
            for p, rep in enumerate(prefill):
                h_p = a
                if unpushed[p]:
                    h_p = min(h_p, h_d)
                # A request finished by now, or by a step of this window, holds its blocks until an end
                # its decode replica decides at or after its next step.
                for d, c in enumerate(undecided[p]):
                    if c:
                        h_p = min(h_p, lb_d[d])
                if ne(rep) < h_p:
                    rep.advance_until(int(h_p) if h_p != inf else MAX_HORIZON)
                    moved = True
            collect()
            if not moved:
                if all(ne(rep) >= a for rep in (*decode, *prefill)) and not any(h[0] < a for h in handoffs):
                    return
                raise InternalError("the disaggregated fleet's drive made no progress")

    for lo, hi in _units(inp):
        a = int(inp.arrival_ps[lo])
        step_until(a)
        deliver(a + 1)
        segments, prompt_len = inp.segments(lo), int(inp.prompt_len[lo])
        d = route_d.pick([view_of(rep, False) for rep in decode], segments, prompt_len)
        replica[lo:hi] = d
        uncached = prompt_len - decode[d].prefix_hit_blocks(segments, prompt_len) * decode[d].block_size
        if uncached < pd.threshold_tokens:
            decode[d].push(inp, lo, hi)
            rows_d[d].extend(range(lo, hi))
            continue
        p = route_p.pick([view_of(rep, False) for rep in prefill], segments, prompt_len)
        prefill[p].push(inp, lo, hi, first_token_only=True, backoff=backoff)
        pending[p][len(prefill[p].engine.seqs) - 1] = (lo, d)
        undecided[p][d] += 1
        rows_p[p].append(lo)
        pre[lo] = p
    step_until(inf)
    columns = {k: np.full(n, COLUMN_FILL[k], dtype=COLUMN_DTYPE[k]) for k in COLUMN_FILL}
    pc, pt, pe, pouts = _gather(inp, prefill, rows_p, columns, lambda r, out, i: out.status[i] != FINISHED)
    dc, dt, de, _ = _gather(inp, decode, rows_d, columns, lambda r, out, i: True)
    first = np.full(n, -1, dtype=np.int64)
    finish = np.full(n, -1, dtype=np.int64)
    for rows, out in zip(rows_p, pouts, strict=True):
        idx = np.asarray(rows, dtype=np.int64)
        first[idx] = out.first_scheduled
        finish[idx] = out.finish
    columns["replica"] = replica
    columns["prefill_replica"] = pre
    columns["prefill_first_scheduled"] = first
    columns["prefill_finish"] = finish
    return ClusterOutput(columns, dc + pc, dt + pt, de + pe)
