"""The lab's disaggregated fleet (DESIGN.md §Lab, "A disaggregated fleet"; §Prefill/decode disaggregation).

One prefill replica and one decode replica on one clock: at any instant, each pool's blocks and the
request holding each, every request's phase (prefill queue, prefill, waiting on the decode replica,
its transfer queued / on the link / landed, the tail computed on the decode replica, decoding, done or
rejected), and
the decode replica's inbound link. Nothing here decides anything: the fleet runs on the Rust engine
(`kvsim.simulate_cluster`, the rows the page shows) and on the reference engine (`kvsim.reference.cluster.
run_cluster` with `record_events`: each replica's event log, which `simulate_cluster` does not return);
the two runs' per-sequence columns must be equal or `InternalError` stops it. Blocks come from the logs'
`allocate` / `prefix-hit` / `free` rows; phases from the rows' times; preemptions, the tokens each request
has generated and which freed blocks keep a key (drawn cached) from `pd_replay`, which replays each
replica's log and time series step by step. Besides that, the one thing derived is when a
transfer is on the link: the log has no row for it (a transfer logs no `load` event), so its start is
its admission or the end of the transfer before it on the link (first come first served, §Prefill/decode
disaggregation step 5) and its end the start plus latency + blocks × time per block; the tests check the
durations' sum against the decode replica's `pd_link_busy_ps` counter and every end against the moment
the engine saw it complete.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from kvsim.analysis.run_report_fleet import PD_LINK_KEYS
from kvsim.arguments import as_int
from kvsim.errors import InternalError, InvalidArgumentError
from kvsim.lab.bundle_info import time_info
from kvsim.lab.pd_replay import Replay, replay
from kvsim.lab.presets import _table
from kvsim.model.config import SimConfig
from kvsim.reference.engine import REJECTED
from kvsim.workloads import Workload

PS_PER_S = 10**12
ADMIT, ALLOCATE, PREFIX_HIT, EVICT, FREE = 0, 1, 2, 4, 5  # kvsim.reference.engine.events.EVENT codes
PHASES = (
    "not arrived",
    "prefill queue",
    "prefilling",
    "waiting for decode blocks",
    "transfer queued",
    "on the link",
    "landed, not yet seen",
    "computing its tail",
    "decoding",
    "done",
    "rejected",
    "local prefill queue",
    "prefilling locally",
    "preempted",
    "recomputing",
    "preempted on prefill",
    "recomputing on prefill",
)
TRANSFER_PHASES = ("transfer queued", "on the link", "landed, not yet seen")
SHARED = 1  # the preset's shared system prompt's content id
PD_MAX_TOKENS = 64


@dataclass(frozen=True)
class PdPreset:
    """A disaggregated preset: the workload, the decode replicas' config (with `prefill_replicas`), and
    names for the page."""

    name: str
    title: str
    description: str
    workload: Workload
    config: SimConfig
    request_names: list[str]


def disaggregated() -> PdPreset:
    """1 prefill + 1 decode replica of a Llama-3-8B (128 KiB of KV per token, 32 blocks of 16 tokens each),
    five requests that share a 64-token system prompt. Requests 1-4 are prefilled on the prefill replica
    and their full blocks move to the decode replica; req-5's part not cached on the decode replica (8
    tokens) is under the 32-token threshold, so it prefills there (conditional disaggregation). The link
    is given a 2 ms latency (the preset's steps last 1 ms; at 50 GB/s a block moves in 42 µs, so without
    it a transfer would land within a step). req-2 moves its 4 shared blocks too: the decode replica
    admits it at 3 ms, while req-1's copies are still on the link (1.0 to 3.2 ms), keyless until their
    read is seen (vLLM: `allocate_slots(..., delay_cache_blocks=True)` for a remote prefill), so it
    finds no hit; req-3 and req-4, admitted after, hit those 4 and move 2 blocks each."""
    rows = [([(SHARED, 64), (100 + i, 16 + 8 * i)], 12 + 4 * i) for i in range(4)]
    rows.append(([(SHARED, 64), (104, 8)], 10))
    w = _table(rows, [0.0, 0.002, 0.004, 0.006, 0.012], PD_MAX_TOKENS)
    cfg = SimConfig(
        model="llama-3-8b",
        num_blocks=32,
        block_size=16,
        replicas=1,
        prefill_replicas=1,
        pd_threshold_tokens=32,
        pd_link_latency_s=0.002,
    )
    return PdPreset(
        name="disaggregated",
        title="Disaggregated fleet (1 prefill + 1 decode replica)",
        description=(
            "A prefill replica computes each prompt, its full blocks move over the link to the decode "
            "replica, which holds blocks for them while they are in flight and then decodes. req-5's "
            "uncached part is under the 32-token threshold: it prefills on the decode replica. The link "
            "is given a 2 ms latency so that a transfer spans steps. req-2 moves all 5 of its blocks, "
            "the 4 it shares with req-1 too: when the decode replica admits it (3 ms), req-1's copies of "
            "them are still on the link, and blocks in flight are not in the prefix cache until their "
            "transfer is seen complete (as in vLLM), so it finds no hit there; req-3 and req-4, admitted "
            "after req-1's landed, hit those 4 and move 2 each."
        ),
        workload=w,
        config=cfg,
        request_names=[f"req-{i + 1}" for i in range(len(rows))],
    )


def disaggregated_pressure() -> PdPreset:
    """The same fleet with pools of 16 blocks (15 usable) on both replicas and four requests that each generate 60
    tokens after a shared 64-token prompt: the decode replica runs out of blocks while they decode and
    preempts the newest (recompute); a preempted request's full blocks stay cached there, and it is
    readmitted with hits on those not reused meanwhile and computes the rest again."""
    rows = [([(SHARED, 64), (100 + i, 20 + 8 * i)], 60) for i in range(4)]
    w = _table(rows, [0.0, 0.001, 0.002, 0.003], PD_MAX_TOKENS)
    cfg = SimConfig(
        model="llama-3-8b",
        num_blocks=16,
        block_size=16,
        replicas=1,
        prefill_replicas=1,
        pd_threshold_tokens=16,
        pd_link_latency_s=0.001,
    )
    return PdPreset(
        name="disaggregated-pressure",
        title="Disaggregated fleet under memory pressure (pools of 15 blocks)",
        description=(
            "Four requests, each prefilled on the prefill replica and decoded on the decode replica (15 "
            "blocks each): as their outputs grow the decode replica runs out and preempts the newest "
            "(recompute). Its full "
            "blocks stay in the decode replica's prefix cache (dashed) until reused; readmitted, it hits "
            "those still cached and computes the rest of its prompt and of the tokens it had generated "
            "again, keeping those tokens."
        ),
        workload=w,
        config=cfg,
        request_names=[f"req-{i + 1}" for i in range(len(rows))],
    )


PD_PRESETS = {"disaggregated": disaggregated, "disaggregated-pressure": disaggregated_pressure}


def get(name: str) -> PdPreset:
    """The disaggregated preset called `name` (an unknown one is refused naming `preset`)."""
    if not isinstance(name, str) or name not in PD_PRESETS:
        raise InvalidArgumentError(f"preset {name!r} is not one of {', '.join(map(repr, PD_PRESETS))}")
    return PD_PRESETS[name]()


@dataclass
class PdRun:
    """One run of a disaggregated fleet: per input row (engine order) its times (ps), its replicas,
    its transfer, and per replica the event log; `instants` the times (ps) at which something changes."""

    names: list[str]
    num_blocks: tuple[int, int]  # (prefill, decode): usable blocks, the null block excluded
    arrival: np.ndarray
    prefill_replica: np.ndarray
    prefill_first: np.ndarray
    prefill_finish: np.ndarray
    admit: np.ndarray  # admission on the decode replica (-1: never)
    first_scheduled: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray  # its finish, or its rejection (`rejected`)
    rejected: np.ndarray  # per row, whether the engine rejected it (its row's status), not finished it
    load_wait: np.ndarray
    transfer_blocks: np.ndarray
    decode_hits: np.ndarray  # per row, the blocks its first admission on the decode replica hit
    link_start: np.ndarray  # -1: no transfer
    link_end: np.ndarray
    events: tuple[dict[str, np.ndarray], dict[str, np.ndarray]]  # (prefill replica 0, decode replica 0)
    transfer_ids: dict[int, frozenset[int]]  # per remote row, the decode blocks its transfer fills
    full_blocks: np.ndarray  # per row, its prompt's full blocks (what a prefill leaves keyed)
    target: np.ndarray  # per row, the tokens it is to generate (on its decode replica)
    replays: tuple[Replay, Replay]  # (prefill replica 0, decode replica 0): tokens, preemptions, keys
    prefix_caching: tuple[bool, bool]  # (prefill, decode)
    summary: dict[str, Any]
    counters: dict[str, int]  # the decode replica's
    link: dict[str, float]
    instants: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def run(
    workload: Workload, config: SimConfig, names: list[str], prefill_config: SimConfig | None = None
) -> PdRun:
    """Runs the fleet on both engines (see the module's docstring); `prefill_config` as
    `simulate_cluster`'s (the prefill replica's pool, say)."""
    from kvsim.engine.cluster import router_spec, simulate_cluster
    from kvsim.engine.cluster_pd import _pd_spec
    from kvsim.engine.engine_input import prepare
    from kvsim.reference import cluster

    if config.prefill_replicas != 1 or config.replicas != 1:
        raise InvalidArgumentError(
            f"prefill_replicas {config.prefill_replicas} and replicas {config.replicas}: the lab draws "
            "1 prefill and 1 decode replica"
        )
    for cfg in (config, prefill_config or config):
        if cfg.preemption != "recompute":
            raise InvalidArgumentError(
                f"preemption {cfg.preemption!r}: the lab's disaggregated page draws preemption by recompute"
            )
    if config.kv_offloading_chunks:
        raise InvalidArgumentError(
            f"kv_offloading_chunks {config.kv_offloading_chunks}: the lab's disaggregated page draws no CPU tier"
        )
    fleet = simulate_cluster(workload, config, prefill_config=prefill_config)  # Rust: rows and summary
    spec = router_spec(config)
    pd = _pd_spec([config], spec, prefill_config)
    prefill = pd.prefill_config or config
    inp = prepare(workload, config)
    ref = cluster.run_cluster(inp, [config], spec, timeseries_every=1, record_events=True, pd=pd)
    cols = ref.columns
    for name in ("first_scheduled", "first_token", "finish", "load_wait_ps", "status"):
        if not np.array_equal(np.asarray(getattr(fleet.raw, name)), np.asarray(cols[name])):
            raise InternalError(f"the Rust and reference fleets differ in {name}")
    n = len(inp)
    decode_ev, prefill_ev = ref.events[0], ref.events[1]  # decode replicas first, then prefill
    for ev in (decode_ev, prefill_ev):
        if np.any(np.diff(ev["time_ps"]) < 0):  # `held_blocks` reads a log up to a time
            raise InternalError("a replica's event log goes back in time")
    admit = np.full(n, -1, dtype=np.int64)
    blocks = np.zeros(n, dtype=np.int64)
    hits = np.zeros(n, dtype=np.int64)
    kind, seq, t = decode_ev["kind"], decode_ev["seq"], decode_ev["time_ps"]
    admitted: dict[int, set[int]] = {}
    current = -1
    for i in range(len(kind)):
        if kind[i] == ADMIT:
            current = int(seq[i])
            if admit[current] >= 0:  # a readmission after a preemption: not the transfer's
                current = -1
                continue
            admit[current] = int(t[i])
            admitted[current] = set()
        elif kind[i] == ALLOCATE and current == int(seq[i]) and int(t[i]) == admit[current]:
            blocks[current] += 1  # the admission's new blocks: the transfer's (a remote request's)
            admitted[current].add(int(decode_ev["block"][i]))
        elif kind[i] == PREFIX_HIT and current == int(seq[i]) and int(t[i]) == admit[current]:
            hits[current] += 1  # its hits there: the blocks it need not move
        elif kind[i] not in (PREFIX_HIT, EVICT):  # an admission: its hits, its allocations, evictions
            current = -1
    load_wait = np.asarray(cols["load_wait_ps"], dtype=np.int64)
    remote = (np.asarray(cols["prefill_replica"]) >= 0) & (load_wait > 0)
    transfer_blocks = np.where(remote, blocks, 0)
    start = np.full(n, -1, dtype=np.int64)
    end = np.full(n, -1, dtype=np.int64)
    free_at = 0
    for row in sorted(np.flatnonzero(remote), key=lambda r: (admit[r], r)):
        start[row] = max(int(admit[row]), free_at)
        end[row] = start[row] + pd.link_latency_ps + int(transfer_blocks[row]) * pd.link_ps_per_block
        free_at = int(end[row])
    order = np.asarray(inp.request_id, dtype=np.int64)
    prompt = np.asarray(inp.prompt_len, dtype=np.int64)
    no_seen = np.full(n, -1, dtype=np.int64)
    replays = (
        replay(prefill_ev, ref.timeseries[1], prompt, prefill.engine_block_size, no_seen),
        replay(
            decode_ev,
            ref.timeseries[0],
            prompt,
            config.engine_block_size,
            np.where(remote, admit + load_wait, -1),
        ),
    )
    times = [
        *replays[1].samples,  # a token generated: the request's count changes
        *(
            np.asarray([q.start, q.readmit, q.resample])
            for rp in replays
            for qs in rp.preemptions
            for q in qs
        ),
        np.asarray(inp.arrival_ps),
        decode_ev["time_ps"],
        prefill_ev["time_ps"],
        *(np.asarray(cols[k]) for k in ("first_scheduled", "first_token", "finish")),
        np.asarray(cols["prefill_first_scheduled"]),
        np.asarray(cols["prefill_finish"]),
        admit + load_wait,
        start,
        end,
    ]
    instants = np.unique(np.concatenate([np.asarray(x, dtype=np.int64) for x in times]))
    return PdRun(
        names=[names[int(r)] for r in order],
        num_blocks=(int(prefill.num_blocks or 0) - 1, int(config.num_blocks or 0) - 1),
        arrival=np.asarray(inp.arrival_ps, dtype=np.int64),
        prefill_replica=np.asarray(cols["prefill_replica"], dtype=np.int64),
        prefill_first=np.asarray(cols["prefill_first_scheduled"], dtype=np.int64),
        prefill_finish=np.asarray(cols["prefill_finish"], dtype=np.int64),
        admit=admit,
        first_scheduled=np.asarray(cols["first_scheduled"], dtype=np.int64),
        first_token=np.asarray(cols["first_token"], dtype=np.int64),
        finish=np.asarray(cols["finish"], dtype=np.int64),
        rejected=np.asarray(cols["status"]) == REJECTED,
        load_wait=load_wait,
        transfer_blocks=transfer_blocks,
        decode_hits=hits,
        link_start=start,
        link_end=end,
        events=(prefill_ev, decode_ev),
        full_blocks=prompt // prefill.engine_block_size,
        target=np.asarray(inp.target, dtype=np.int64),
        replays=replays,
        prefix_caching=(bool(prefill.enable_prefix_caching), bool(config.enable_prefix_caching)),
        transfer_ids={row: frozenset(admitted[row]) for row in np.flatnonzero(remote).tolist()},
        summary=dict(fleet.summary),
        counters=dict(ref.counters[0]),
        link={"latency_s": pd.link_latency_ps / PS_PER_S, "s_per_block": pd.link_ps_per_block / PS_PER_S},
        instants=instants[instants >= 0],
    )


def phase(r: PdRun, row: int, t: int) -> str:
    """What request `row` is doing at `t` (ps), from its times and its replicas' replays."""
    if t < r.arrival[row]:
        return "not arrived"
    if r.finish[row] >= 0 and t >= r.finish[row]:
        return "rejected" if r.rejected[row] else "done"
    # A preemption (its rows' times do not tell it: the replicas' logs do, `pd_replay`): on the prefill
    # replica while it prefills there, on the decode replica from its admission there.
    on_prefill = r.replays[0].preempted(row, t) if r.prefill_replica[row] >= 0 else None
    if on_prefill is not None:
        return f"{on_prefill} on prefill"
    on_decode = r.replays[1].preempted(row, t)
    if on_decode is not None:
        return on_decode
    if r.first_token[row] >= 0 and t >= r.first_token[row]:
        return "decoding"
    if r.prefill_replica[row] < 0:
        return "prefilling locally" if 0 <= r.first_scheduled[row] <= t else "local prefill queue"
    if r.prefill_first[row] < 0 or t < r.prefill_first[row]:
        return "prefill queue"
    if t < r.prefill_finish[row]:
        return "prefilling"
    if r.admit[row] < 0 or t < r.admit[row]:
        return "waiting for decode blocks"
    if r.link_start[row] >= 0:
        if t < r.link_start[row]:
            return "transfer queued"
        if t < r.link_end[row]:
            return "on the link"
        if t < r.admit[row] + r.load_wait[row]:
            return "landed, not yet seen"
    return "computing its tail"


def held_blocks(events: dict[str, np.ndarray], t: int) -> dict[int, list[int]]:
    """Per block id, the input rows holding it after every event at or before `t` (ps)."""
    held: dict[int, list[int]] = {}
    kind, seq, block, time = events["kind"], events["seq"], events["block"], events["time_ps"]
    for i in range(int(np.searchsorted(time, t, side="right"))):
        k = int(kind[i])
        if k in (ALLOCATE, PREFIX_HIT):
            held.setdefault(int(block[i]), []).append(int(seq[i]))
        elif k == FREE:
            holders = held[int(block[i])]
            holders.remove(int(seq[i]))
            if not holders:
                del held[int(block[i])]
    return held


def cached_blocks(events: dict[str, np.ndarray], t: int, keyed_at_free: dict[int, int]) -> dict[int, int]:
    """A replica's free blocks that keep a key after every event at or before `t` (ps), each with the input
    row that freed it last: a block freed by its last holder is keyed if it was one of the leading blocks
    of that holder's table that had keys when it released them (`keyed_at_free[i]` for the `free` row i,
    `pd_replay`: its full blocks of computed tokens, a transfer's blocks once it landed; a prefill request
    computes its prompt, no more, unless preempted); its table's order is its `prefix-hit` and `allocate`
    rows' order since its admission. An `allocate` or an `evict` of the block ends it (the engine logs an
    `evict` before reusing a keyed block, which the tests check)."""
    holders: dict[int, int] = {}
    order: dict[int, list[int]] = {}
    cached: dict[int, int] = {}
    kind, seq, block, time = events["kind"], events["seq"], events["block"], events["time_ps"]
    for i in range(int(np.searchsorted(time, t, side="right"))):
        k, b, row = int(kind[i]), int(block[i]), int(seq[i])
        if k == ADMIT:
            order[row] = []
        elif k in (ALLOCATE, PREFIX_HIT):
            cached.pop(b, None)
            holders[b] = holders.get(b, 0) + 1
            order.setdefault(row, []).append(b)
        elif k == EVICT:
            cached.pop(b, None)
        elif k == FREE:
            holders[b] -= 1
            if not holders[b] and order[row].index(b) < keyed_at_free[i]:
                cached[b] = row
    return cached


def snapshot(r: PdRun, index: int) -> dict[str, Any]:
    """What the page shows at instant `index` (0-based into `r.instants`) of `r`, a run
    (`preset_run(name)`, or `run(...)`'s). A numpy integer is an integer, a bool is not."""
    if not isinstance(r, PdRun):
        hint = f" (a preset's: preset_run({r!r}))" if isinstance(r, str) else ""
        raise InvalidArgumentError(
            f"run {r!r} is not a kvsim.lab.pd.PdRun: pass preset_run(name) or run(...)'s result{hint}"
        )
    i = as_int(index)
    if i is None or not 0 <= i < len(r.instants):
        raise InvalidArgumentError(f"instant {index!r} must be an integer from 0 to {len(r.instants) - 1}")
    t = int(r.instants[i])
    phases = [phase(r, row, t) for row in range(len(r.arrival))]
    pools: list[dict[str, Any]] = []
    cells_of: list[list[dict[str, Any]]] = []
    for p, (name, events) in enumerate(zip(("prefill", "decode"), r.events, strict=True)):
        held = held_blocks(events, t)
        cached = cached_blocks(events, t, r.replays[p].keyed_at_free) if r.prefix_caching[p] else {}
        cells = []
        for b in range(1, r.num_blocks[p] + 1):
            holders = held.get(b, [])
            in_transfer = p == 1 and any(
                phases[h] in TRANSFER_PHASES and b in r.transfer_ids.get(h, ()) for h in holders
            )
            cells.append(
                {
                    "id": b,
                    "requests": [r.names[h] for h in holders],
                    "transfer": bool(in_transfer and holders),
                    "cached": r.names[cached[b]] if b in cached else None,
                }
            )
        pools.append(
            {
                "name": name,
                "num_blocks": r.num_blocks[p],
                "held": sum(1 for c in cells if c["requests"]),
                "transfer": sum(1 for c in cells if c["transfer"]),
                "cached": sum(1 for c in cells if c["cached"]),
                "blocks": cells,
            }
        )
        cells_of.append(cells)
    requests = []
    for row in range(len(r.arrival)):
        # A transfer is told from its admission on the decode replica (before it, nothing is decided).
        known = r.link_start[row] >= 0 and t >= r.admit[row]
        in_pool = [[c["id"] for c in cells if r.names[row] in c["requests"]] for cells in cells_of]
        requests.append(
            {
                "name": r.names[row],
                "phase": phases[row],
                "disaggregated": bool(r.prefill_replica[row] >= 0),
                "prefill_blocks": in_pool[0],
                "decode_blocks": in_pool[1],
                "transfer_blocks": int(r.transfer_blocks[row]) if known else 0,
                # (the blocks its admission there hit, which it does not move: none of them a block
                # another request's transfer still fills, keyless until seen, as vLLM caches a remote
                # request's blocks only once its read is done)
                "decode_hit_blocks": int(r.decode_hits[row]) if known else 0,
                "link_start_s": _s(r.link_start[row]) if known else None,
                "link_end_s": _s(r.link_end[row]) if known else None,
                "seen_s": _s(r.admit[row] + r.load_wait[row]) if known else None,
                # Its decode replica generates every output token (the prefill replica's one is dropped).
                "generated": r.replays[1].generated(row, t),
                "max_tokens": int(r.target[row]),
            }
        )
    on_link = [q["name"] for q in requests if q["phase"] == "on the link"]
    queued = [q["name"] for q in requests if q["phase"] == "transfer queued"]
    return {
        "instant": i,
        "num_instants": len(r.instants),
        "time_s": t / PS_PER_S,
        "pools": pools,
        "requests": requests,
        "link": {**r.link, "on_link": on_link, "queued": queued},
        "transfers_done": int(sum(1 for row in range(len(r.arrival)) if 0 <= r.link_end[row] <= t)),
    }


def _s(ps: Any) -> float | None:
    return None if ps < 0 else int(ps) / PS_PER_S


def opening(r: PdRun) -> int:
    """The instant the page opens on: the first where a request is preempted on the decode replica while
    one decodes, else the first where a transfer is on the link while a request decodes (else 0)."""
    seen: dict[str, int] = {}
    for i, t in enumerate(r.instants):
        ph = [phase(r, row, int(t)) for row in range(len(r.arrival))]
        if "decoding" in ph:
            for what in ("preempted", "on the link"):
                if what in ph:
                    seen.setdefault(what, i)
    return seen.get("preempted", seen.get("on the link", 0))


@lru_cache(maxsize=4)
def preset_run(name: str) -> PdRun:
    """The preset's run (kept: a preset always runs the same)."""
    p = get(name)
    return run(p.workload, p.config, p.request_names)


def timeline(name: str) -> dict[str, Any]:
    """The page's payload: the preset, the fleet's summary keys of P/D, and every instant's snapshot."""
    p = get(name)
    r = preset_run(name)
    return {
        "preset": {"name": p.name, "title": p.title, "description": p.description},
        "presets": list(PD_PRESETS),
        "summary": {k: r.summary.get(k) for k in PD_LINK_KEYS},
        "phases": list(PHASES),
        "opening": opening(r),
        # The replicas' clock (`"ticks"`: 1 ms a step, not a GPU's time; the link's figures are a link's).
        "time_model": time_info(p.config),
        "snapshots": [snapshot(r, i) for i in range(len(r.instants))],
    }
