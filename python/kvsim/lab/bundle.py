"""What the page and the API get: a run's *bundle* (both tracks' rows and metric columns) and the
*snapshot* at one step (DESIGN.md §Lab). Both come from `state.replay` of the engine's event log; this
module resolves a preset and its overrides into configs, checks the caps, and turns token counts into
bytes and fractions.
"""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import json
import time
from typing import Any

import numpy as np

import kvsim.lab.presets as _presets
from kvsim.engine.simulate import simulate
from kvsim.errors import InvalidArgumentError
from kvsim.lab.state import BLOCK_STATES, STATUSES, Track, gc_paused, replay, state_at, tokens_at
from kvsim.model import models
from kvsim.model.config import CONTIGUOUS_POLICIES, PLACEMENTS, PREEMPTIONS, SAMPLINGS, SimConfig
from kvsim.reference.engine import EVENT_KINDS
from kvsim.workloads import Workload

try:  # orjson encodes a large bundle several times faster than the standard library
    import orjson
except ImportError:  # pragma: no cover - the `lab` extra installs it
    orjson = None  # type: ignore[assignment]

# Caps on the work one page request may cause (the API and `bundle` refuse more, naming the cap).
LIMITS = {
    "max_requests": 5_000,
    "max_blocks": 65_536,
    "max_events": 500_000,
    "max_steps": 50_000,
    "max_block_size": 256,
}
PAGED_POLICIES = ("vllm", "reserve")
BLOCK_SIZES = (8, 16, 32, 64, 128)
OVERRIDES = (
    "model",
    "block_size",
    "num_blocks",
    "enable_prefix_caching",
    "policy",
    "sampling",
    "preemption",
    "contiguous_policy",
    "placement",
)


def options() -> dict[str, list[Any]]:
    """The values each override takes (the page's dropdowns)."""
    return {
        "models": models.names(),
        "policies": [*PAGED_POLICIES, *CONTIGUOUS_POLICIES],
        "samplings": list(SAMPLINGS),
        "preemptions": list(PREEMPTIONS),
        "block_sizes": list(BLOCK_SIZES),
        "contiguous_policies": list(CONTIGUOUS_POLICIES),
        "placements": list(PLACEMENTS),
    }


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A preset with its overrides applied: the paged and the contiguous track's configs."""

    preset: _presets.Preset
    paged: SimConfig
    contiguous: SimConfig
    query: dict[str, Any]


def _check_choice(name: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidArgumentError(f"{name} {value!r} is not one of {', '.join(map(repr, allowed))}")


def _check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} {value!r} must be an integer")
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} {value} must be between {lo} and {hi}")
    return value


def _contiguous_track(paged: SimConfig, workload: Workload, policy: str) -> SimConfig:
    """The contiguous track's config: the paged track's pool under `policy`, one sequence per sample and
    recompute (contiguous policies know nothing else), `max_model_len` the workload's longest request
    unless the paged track sets one (what `static` reserves)."""
    longest = int((workload.prompt_len + workload.output_len).max()) if len(workload) else 1
    return paged.replace(
        policy=policy,
        sampling="independent",
        preemption="recompute",
        cpu_blocks=0,
        max_model_len=paged.max_model_len or longest,
    )


def resolve(preset: str = "copilot", **overrides: Any) -> Resolved:
    """The preset `preset` with `overrides` (names in `OVERRIDES`, None = the preset's value) applied.

    `policy` names the paged track's policy (`vllm`, `reserve`); a contiguous policy given as `policy`
    becomes the contiguous track's (`contiguous_policy`) and the paged track runs `vllm`.

    Raises:
        InvalidArgumentError: an unknown override, a value of the wrong type or out of range, or a run
            larger than `LIMITS` (the message names the field and the value).
    """
    for name in overrides:
        if name not in OVERRIDES:
            raise InvalidArgumentError(f"parameter {name!r} is not one of {', '.join(map(repr, OVERRIDES))}")
    p = _presets.get(preset)
    o = {k: v for k, v in overrides.items() if v is not None}
    cfg = p.config
    contiguous_policy = o.get("contiguous_policy", p.contiguous_policy)
    _check_choice("contiguous_policy", contiguous_policy, CONTIGUOUS_POLICIES)
    policy = o.get("policy", cfg.policy)
    _check_choice("policy", policy, options()["policies"])
    if policy in CONTIGUOUS_POLICIES:
        if "contiguous_policy" in o and o["contiguous_policy"] != policy:
            raise InvalidArgumentError(
                f"policy {policy!r} and contiguous_policy {o['contiguous_policy']!r} disagree: give one"
            )
        contiguous_policy, policy = policy, "vllm"
    model = o.get("model", cfg.model)
    if model is not None and not isinstance(model, models.Model):
        _check_choice("model", model, models.names())
    block_size = _check_int("block_size", o.get("block_size", cfg.block_size), 1, LIMITS["max_block_size"])
    num_blocks = _check_int("num_blocks", o.get("num_blocks", cfg.num_blocks), 2, LIMITS["max_blocks"])
    caching = o.get("enable_prefix_caching", cfg.enable_prefix_caching)
    if not isinstance(caching, bool):
        raise InvalidArgumentError(f"enable_prefix_caching {caching!r} must be true or false")
    sampling = o.get("sampling", cfg.sampling)
    _check_choice("sampling", sampling, SAMPLINGS)
    if sampling == "fork-cow" and policy != "vllm":
        raise InvalidArgumentError(f"sampling 'fork-cow' needs policy 'vllm', not {policy!r}")
    preemption = o.get("preemption", cfg.preemption)
    _check_choice("preemption", preemption, PREEMPTIONS)
    if preemption != "recompute" and policy != "vllm":
        raise InvalidArgumentError(f"preemption {preemption!r} needs policy 'vllm', not {policy!r}")
    placement = o.get("placement", cfg.placement)
    _check_choice("placement", placement, PLACEMENTS)
    n = len(p.workload)
    if n > LIMITS["max_requests"]:
        raise InvalidArgumentError(f"requests {n} exceed the lab's max_requests {LIMITS['max_requests']}")
    cpu_blocks = cfg.cpu_blocks
    if preemption != "recompute" and cpu_blocks == 0:
        cpu_blocks = num_blocks  # a CPU pool as large as the GPU's, unless the preset sizes one
    paged = cfg.replace(
        model=model,
        block_size=block_size,
        num_blocks=num_blocks,
        enable_prefix_caching=caching,
        policy=policy,
        sampling=sampling,
        preemption=preemption,
        cpu_blocks=cpu_blocks if preemption != "recompute" else 0,
        placement=placement,
    )
    contiguous = _contiguous_track(paged, p.workload, contiguous_policy)
    query = {
        "preset": p.name,
        "model": model if isinstance(model, str) or model is None else model.name,
        "block_size": block_size,
        "num_blocks": num_blocks,
        "enable_prefix_caching": caching,
        "policy": policy,
        "sampling": sampling,
        "preemption": preemption,
        "contiguous_policy": contiguous_policy,
        "placement": placement,
    }
    return Resolved(p, paged, contiguous, query)


def _model_info(cfg: SimConfig) -> dict[str, Any]:
    m = cfg.model if isinstance(cfg.model, models.Model) else models.get(cfg.model)
    bpt = m.kv_bytes_per_token
    dtype_bytes = models.dtype_bits(m.kv_dtype) / 8
    if m.is_mla:
        formula = (
            f"{m.num_layers} layers × ({m.kv_lora_rank} latent + {m.qk_rope_head_dim} rope) × "
            f"{dtype_bytes:g} B = {bpt:,} B ({_human(bpt)}) per token (MLA: one latent, not K and V per head)"
        )
    else:
        formula = (
            f"2 × {m.num_layers} layers × {m.num_kv_heads} KV heads × {m.head_dim} head dim × "
            f"{dtype_bytes:g} B = {bpt:,} B ({_human(bpt)}) per token"
        )
    return {
        "name": m.name,
        "num_layers": m.num_layers,
        "num_heads": m.num_attention_heads,
        "num_kv_heads": m.num_kv_heads,
        "head_dim": m.head_dim,
        "dtype": m.kv_dtype,
        "dtype_bytes": dtype_bytes,
        "kv_lora_rank": m.kv_lora_rank or None,
        "bytes_per_token": bpt,
        "formula": formula,
    }


def _human(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def run_tracks(r: Resolved, backend: str = "rust") -> tuple[Track, Track]:
    """Simulates and replays both tracks, refusing runs past the caps; before running when the
    workload alone implies more events than the cap: every block of a request that fits the pool ends in
    a `free` row."""
    w = r.preset.workload
    bs, cap = r.paged.block_size, r.paged.capacity_blocks
    blocks = ((w.prompt_len + w.output_len - 1).clip(min=1) + bs - 1) // bs
    least = int((blocks * w.num_samples)[blocks <= cap].sum())
    if least > LIMITS["max_events"]:
        raise InvalidArgumentError(
            f"events at least {least} at block_size {bs} exceed max_events {LIMITS['max_events']}"
        )
    # The contiguous track runs in a second thread beside the paged one: the engine runs release the GIL,
    # so the shorter track's replay (Python) overlaps the paged engine run (Rust). Each track is its own
    # objects; the result is the same as running them one after the other.
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kvsim-lab-track") as pool:
        contiguous = pool.submit(_run_track, r, r.contiguous, backend)
        paged = _run_track(r, r.paged, backend)
        return paged, contiguous.result()


def _run_track(r: Resolved, cfg: SimConfig, backend: str) -> Track:
    res = simulate(r.preset.workload, cfg, backend=backend, record_events=True, record_timeseries=True)
    steps = int(res.summary["num_steps"])
    events = 0 if res.events is None else res.events.height
    if steps > LIMITS["max_steps"]:
        raise InvalidArgumentError(
            f"steps {steps} of policy {cfg.policy!r} exceed max_steps {LIMITS['max_steps']}"
        )
    if events > LIMITS["max_events"]:
        raise InvalidArgumentError(
            f"events {events} of policy {cfg.policy!r} exceed max_events {LIMITS['max_events']}"
        )
    return replay(
        res,
        r.preset.workload,
        cfg,
        names=r.preset.segment_names,
        request_names=r.preset.request_names or None,
    )


def _pad(values: Any, n: int) -> np.ndarray:
    """A per-state column (a list or an array) as an array of n values, its last value repeated."""
    a = np.asarray(values)
    return np.concatenate((a, np.repeat(a[-1:], n - len(a)))) if len(a) < n else a


def _fraction(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b elementwise, 0.0 where b is 0 (integer columns: exact in float64 below 2**53)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.divide(a, b, out=np.zeros_like(a), where=b != 0)


COUNT_COLUMNS = ("running", "waiting", "swapped", "finished", "rejected")
BLOCK_COUNT_COLUMNS = ("free_blocks", "cached_blocks", "shared_blocks", "private_blocks")
CUMULATIVE_COLUMNS = ("cow_copies", "evictions", "preemptions", "swaps")


def metric_columns(
    paged: Track, contiguous: Track, bpt: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The snapshot's scalar keys, one value per state 0..S (S the longer track's steps), as arrays: the
    paged track's columns hold every card's number (the contiguous ones too), each track its own counts."""
    s = max(paged.num_steps, contiguous.num_steps) + 1
    pm = {k: _pad(v, s).astype(np.int64) for k, v in paged.metrics.items()}
    cm = {k: _pad(v, s).astype(np.int64) for k, v in contiguous.metrics.items()}
    cap = contiguous.config.capacity_tokens
    bs = paged.config.block_size
    # Whole columns at once (int64: bytes stay far below 2**53 within LIMITS).
    pa, ps = pm["allocated_tokens"], pm["stored_tokens"]
    ca, cs = cm["allocated_tokens"], cm["stored_tokens"]
    ce = cm["external_tokens"]
    c_out: dict[str, np.ndarray] = {
        "contiguous_reserved_bytes": ca * bpt,
        "contiguous_used_bytes": cs * bpt,
        "contiguous_wasted_bytes": (ca - cs) * bpt,
        "contiguous_waste_fraction": _fraction(ca - cs, ca),
        "contiguous_internal_fragmentation": _fraction(ca - cs, ca),
        "contiguous_external_bytes": ce * bpt,
        "contiguous_external_fragmentation": _fraction(ce, np.full(s, cap, np.int64)),
    }
    p_out: dict[str, np.ndarray] = {
        "paged_allocated_bytes": pa * bpt,
        "paged_stored_bytes": ps * bpt,
        "paged_tail_slack_bytes": (pa - ps) * bpt,
        "paged_tail_slack_fraction": _fraction(pa - ps, pa),
        "paged_tail_slack_bound_bytes": pm["running"] * ((bs - 1) * bpt),
        "paged_external_fragmentation": np.zeros(s),
        "prefix_saved_bytes": pm["shared_saved_tokens"] * bpt,
        "paged_reserved_bytes": pm["reserved_tokens"] * bpt,
        "concurrency_multiplier": _fraction(ca, pa),
        **c_out,
    }
    for out, m in ((p_out, pm), (c_out, cm)):
        for name in COUNT_COLUMNS:
            out[f"num_{name}"] = m[name]
        for name in BLOCK_COUNT_COLUMNS:
            out[f"paged_{name}"] = m[name]
        for name in CUMULATIVE_COLUMNS:
            out[name] = m[name]
        out["time_s"] = m["time_ps"] / 1e12
    return p_out, c_out


SCALARS = (
    "concurrency_multiplier",
    "prefix_saved_bytes",
    "contiguous_reserved_bytes",
    "contiguous_used_bytes",
    "contiguous_wasted_bytes",
    "contiguous_waste_fraction",
    "contiguous_internal_fragmentation",
    "contiguous_external_bytes",
    "contiguous_external_fragmentation",
    "paged_allocated_bytes",
    "paged_stored_bytes",
    "paged_tail_slack_bytes",
    "paged_tail_slack_fraction",
    "paged_tail_slack_bound_bytes",
    "paged_external_fragmentation",
    "paged_reserved_bytes",
)


def _requests(p: _presets.Preset) -> list[dict[str, Any]]:
    w = p.workload
    offsets, seg_id, seg_len = w.seg_offsets.tolist(), w.segment_id.tolist(), w.segment_len.tolist()
    prompts, outputs = w.prompt_len.tolist(), w.output_len.tolist()
    rids, samples, arrivals = w.request_id.tolist(), w.num_samples.tolist(), w.arrival.tolist()
    seg_names = p.segment_names
    out = []
    for i in range(len(w)):
        lo = offsets[i]
        first_name = seg_names.get(seg_id[lo]) if offsets[i + 1] > lo else None
        system = seg_len[lo] if first_name is not None else 0
        prompt = prompts[i]
        out.append(
            {
                "request_id": rids[i],
                "name": p.request_names[i] if p.request_names else f"req-{i + 1}",
                "label": p.labels[i] if p.labels else "",
                "system_prompt": first_name,
                "system_tokens": system,
                "user_tokens": prompt - system,
                "target_tokens": prompt + outputs[i],
                "num_samples": samples[i],
                "arrival_s": arrivals[i],
            }
        )
    return out


BLOCK_COLUMNS = ("step", "block", "state", "ref", "key_label", "key_index", "holders_count", "holders")
SEQ_COLUMNS = (
    "step",
    "seq",
    "status",
    "computed",
    "computed_rate",
    "generated",
    "generated_rate",
    "keep",
    "tail_count",
    "tail",
)


def _block_columns(t: Track) -> dict[str, np.ndarray]:
    b = t.blocks
    if b is None:
        return {name: np.zeros(0, np.int64) for name in BLOCK_COLUMNS}
    cols = {name: getattr(b, name) for name in BLOCK_COLUMNS if hasattr(b, name)}
    cols["holders_count"] = np.diff(b.holders_offsets)
    return {name: cols[name] for name in BLOCK_COLUMNS}


def _seq_columns(t: Track) -> dict[str, np.ndarray]:
    s = t.seqs
    cols = {name: getattr(s, name) for name in SEQ_COLUMNS if hasattr(s, name)}
    cols["tail_count"] = np.diff(s.tail_offsets)
    return {name: cols[name] for name in SEQ_COLUMNS}


def _track_payload(t: Track, metrics: dict[str, np.ndarray]) -> dict[str, Any]:
    """One track as sent: the event log, block and sequence rows as columns (numpy arrays: `encode`
    writes them as JSON arrays), codes with their names (`event_kinds`, `block_states`, `statuses`,
    `key_labels`), per sequence its request id and sample (`seq_request_id`, `seq_sample`). An event's
    time is the time of the state its step count names (`metrics["time_s"][step]`) unless the track
    sends `event_time_s`."""
    raw = t.result.raw.events
    assert raw is not None
    events = {name: raw[name] for name in ("step", "kind", "seq", "block", "count")}
    step_ps = np.append(t.result.raw.timeseries["time_ps"], int(t.result.raw.counters["makespan_ps"]))
    times = raw["time_ps"]
    if len(times) and not np.array_equal(times, step_ps[np.minimum(raw["step"], len(step_ps) - 1)]):
        events["time_s"] = times / 1e12
    return {
        "policy": t.config.policy,
        "num_steps": t.num_steps,
        "capacity_tokens": t.config.capacity_tokens,
        "event_upto": _pad(t.metrics["event_upto"], len(metrics["time_s"])),
        "summary": t.result.summary,
        "event_kinds": list(EVENT_KINDS),
        "block_states": list(BLOCK_STATES),
        "statuses": list(STATUSES),
        "key_labels": t.key_labels,
        "seq_request_id": t.inp.request_id.astype(np.int64),
        "seq_sample": np.broadcast_to(t.inp.sample, (len(t.inp),)).astype(np.int64),
        "num_events": len(raw["step"]),
        "events": events,
        "metrics": metrics,
        "blocks": _block_columns(t),
        "seqs": _seq_columns(t),
        "regions": t.region_rows,
    }


# A numpy array in a bundle is sent as a *typed column*: {"dtype": name, "base64": its little-endian bytes},
# the narrowest of these that holds every value (integers past int32 go as float64, exact below 2**53).
# The page reads it as a TypedArray without parsing a number; `decode` turns it back into an array.
COLUMN_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "float64")
_INT_RANGES = [(name, np.iinfo(name)) for name in COLUMN_DTYPES[:-1]]


def _column_dtype(a: np.ndarray) -> str:
    if a.dtype.kind == "f":
        return "float64"
    if a.dtype.kind not in "biu":
        raise TypeError(f"an array of {a.dtype} is not a column")
    if not len(a):
        return "int32"
    lo, hi = int(a.min()), int(a.max())
    for name, info in _INT_RANGES:
        if info.min <= lo and hi <= info.max:
            return name
    if max(-lo, hi) > 2**53:
        raise ValueError(f"a column value {max(-lo, hi)} is past float64's exact integers")
    return "float64"


def column(a: np.ndarray) -> dict[str, str]:
    """`a` (one-dimensional numbers) as a typed column."""
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"a column is one-dimensional, not of shape {a.shape}")
    dtype = _column_dtype(a)
    data = np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    return {"dtype": dtype, "base64": base64.b64encode(data).decode("ascii")}


def _is_column(x: Any) -> bool:
    return isinstance(x, dict) and len(x) == 2 and x.get("dtype") in COLUMN_DTYPES and "base64" in x


def decode(body: bytes | str) -> Any:
    """A bundle as `encode` wrote it (JSON bytes or text) with every typed column turned back into a
    numpy array (integers as int64, floats as float64)."""
    return _columns_to_arrays(json.loads(body))


def _columns_to_arrays(value: Any) -> Any:
    if _is_column(value):
        raw = base64.b64decode(value["base64"])
        a = np.frombuffer(raw, np.dtype(value["dtype"]).newbyteorder("<"))
        return a.astype(np.float64 if value["dtype"] == "float64" else np.int64)
    if isinstance(value, dict):
        return {k: _columns_to_arrays(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_columns_to_arrays(v) for v in value]
    return value


def _default(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return column(x)
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serializable")


def encode(content: Any) -> bytes:
    """`content` (a bundle, a snapshot, any JSON value) as JSON bytes, numpy arrays as typed columns
    (`column`; `decode` reads them back): orjson when installed, the standard library otherwise."""
    if orjson is not None:
        return orjson.dumps(content, default=_default)
    return json.dumps(
        content, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_default
    ).encode()


def bundle(preset: str = "copilot", *, backend: str = "rust", **overrides: Any) -> dict[str, Any]:
    """The page's run payload for `preset` with `overrides` (LAB_CONTRACT's Bundle; DESIGN.md §Lab)."""
    t0 = time.perf_counter()
    r = resolve(preset, **overrides)
    with gc_paused():  # one pause over both replays and the payload (see `state.gc_paused`)
        paged, contiguous = run_tracks(r, backend)
        return bundle_from(r, paged, contiguous, t0)


def bundle_from(r: Resolved, paged: Track, contiguous: Track, t0: float | None = None) -> dict[str, Any]:
    """The bundle of tracks already run (the server keeps recent ones)."""
    t0 = time.perf_counter() if t0 is None else t0
    with gc_paused():
        return _bundle_from(r, paged, contiguous, t0)


def _bundle_from(r: Resolved, paged: Track, contiguous: Track, t0: float) -> dict[str, Any]:
    info = _model_info(r.paged)
    bpt = info["bytes_per_token"]
    pm, cm = metric_columns(paged, contiguous, bpt)
    steps = max(paged.num_steps, contiguous.num_steps)
    p = r.preset
    return {
        "query": r.query,
        "preset": {
            "name": p.name,
            "title": p.title,
            "description": p.description,
            "default_step": min(p.step, steps),
        },
        "model": info,
        "block_size": r.paged.block_size,
        "bytes_per_token": bpt,
        "bytes_per_block": bpt * r.paged.block_size,
        "num_blocks": r.paged.num_blocks,
        "capacity_tokens": r.paged.capacity_tokens,
        "num_steps": steps,
        "default_step": min(p.step, steps),
        "requests": _requests(p),
        "paged": _track_payload(paged, pm),
        "contiguous": _track_payload(contiguous, cm),
        "limits": LIMITS,
        "elapsed_s": time.perf_counter() - t0,
    }


def track_snapshot(t: Track, k: int, bpt: int, p: _presets.Preset) -> dict[str, Any]:
    """Blocks and requests of one track at state k."""
    k = max(0, min(k, t.num_steps))
    seqs, blocks, regions = state_at(t, k)
    bs = t.config.block_size
    names = p.request_names or [f"req-{i + 1}" for i in range(len(p.workload))]
    reqs = {r["request_id"]: r for r in _requests(p)}
    held: dict[int, int] = {}  # block -> tokens it holds
    requests = []
    for (rid, sample), row in sorted(seqs.items()):
        c, g = tokens_at(row, k)
        for i, b in enumerate(row[8]):
            held[b] = max(held.get(b, 0), min(bs, max(0, c - i * bs)))
        r = reqs[rid]
        region = regions.get((rid, sample))
        requests.append(
            {
                "request_id": rid,
                "sample": sample,
                "name": r["name"] if sample == 0 else f"{r['name']}#{sample}",
                "label": r["label"],
                "status": row[3],
                "system_tokens": r["system_tokens"],
                "user_tokens": r["user_tokens"],
                "generated_tokens": g,
                "context_tokens": c,
                "target_tokens": r["target_tokens"],
                "block_table": list(row[8]),
                "region": None
                if region is None or region[2] is None
                else {"offset_tokens": region[2], "size_tokens": region[3]},
            }
        )
    del names
    out_blocks = []
    for b, row in sorted(blocks.items()):
        state = row[2]
        tokens = held.get(b, 0) if state in ("private", "shared") else (bs if state == "cached" else 0)
        key = row[4] if state == "cached" or (state in ("private", "shared") and tokens == bs) else None
        out_blocks.append(
            {
                "block_id": b,
                "state": state,
                "ref_cnt": row[3],
                "num_tokens": tokens,
                "prefix_key": key,
                "request_ids": row[5],
                "offset_bytes": b * bs * bpt,
            }
        )
    return {"blocks": out_blocks, "requests": requests}


def snapshot_from(r: Resolved, paged: Track, contiguous: Track, step: int | None) -> dict[str, Any]:
    info = _model_info(r.paged)
    bpt = info["bytes_per_token"]
    steps = max(paged.num_steps, contiguous.num_steps)
    k = steps if step is None else step
    if isinstance(k, bool) or not isinstance(k, int):
        raise InvalidArgumentError(f"step {step!r} must be an integer")
    if not 0 <= k <= steps:
        raise InvalidArgumentError(f"step {k} must be between 0 and {steps} (the run's steps)")
    pm, _ = metric_columns(paged, contiguous, bpt)
    out: dict[str, Any] = {
        "step": k,
        "num_steps": steps,
        "bytes_per_token": bpt,
        "block_size": r.paged.block_size,
    }
    out.update({name: pm[name][k].item() for name in SCALARS})
    out.update(track_snapshot(paged, k, bpt, r.preset))
    out["contiguous"] = track_snapshot(contiguous, k, bpt, r.preset)
    return out


def snapshot(
    workload: Workload | str,
    config: SimConfig | None = None,
    step: int | None = None,
    *,
    backend: str = "rust",
    contiguous_policy: str | None = None,
    segment_names: dict[int, str] | None = None,
    request_names: list[str] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The state the page shows at `step` (None: the end) of `workload` under `config` (paged track)
    beside `contiguous_policy` (contiguous track, placed by `config.placement`; default: the preset's, or
    `orca-oracle` for a custom workload), in bytes and fractions
    (DESIGN.md §Lab). `segment_names` (content id -> name) and `request_names` make prefix keys readable.

    `workload` may also be a preset's name; then `config` is ignored and `overrides` apply as in
    `bundle` (`snapshot("copilot", step=1, block_size=32)`).

    Raises:
        InvalidArgumentError: a bad override, config or step (the message names it), or a run past
            `LIMITS`.
    """
    if isinstance(workload, str):
        chosen = {} if contiguous_policy is None else {"contiguous_policy": contiguous_policy}
        r = resolve(workload, **chosen, **overrides)
    else:
        contiguous_policy = contiguous_policy or "orca-oracle"
        if not isinstance(config, SimConfig):
            raise InvalidArgumentError(f"config {config!r} is not a kvsim.SimConfig")
        p = _presets.Preset(
            name="custom",
            title="custom",
            description="",
            workload=workload,
            config=config,
            step=0,
            segment_names=dict(segment_names or {}),
            request_names=list(request_names or []),
            contiguous_policy=contiguous_policy,
        )
        r = _resolve_custom(p, config, contiguous_policy)
    paged, contiguous = run_tracks(r, backend)
    return snapshot_from(r, paged, contiguous, step)


def _resolve_custom(p: _presets.Preset, config: SimConfig, contiguous_policy: str) -> Resolved:
    _check_choice("contiguous_policy", contiguous_policy, CONTIGUOUS_POLICIES)
    if config.is_contiguous:
        contiguous_policy = config.policy
        config = config.replace(policy="vllm")
    if config.model is None:
        raise InvalidArgumentError("config.model None: the lab reports bytes, so the config needs a model")
    contiguous = _contiguous_track(config, p.workload, contiguous_policy)
    return Resolved(p, config, contiguous, {"preset": "custom"})


def configure(preset: str = "copilot", **overrides: Any) -> tuple[Workload, SimConfig, int]:
    """The `(workload, paged config, step)` the server runs for `preset` with `overrides` (the query's
    names); its contiguous track is `snapshot(..., contiguous_policy=resolved query's contiguous_policy)`."""
    r = resolve(preset, **overrides)
    return r.preset.workload, r.paged, r.preset.step
