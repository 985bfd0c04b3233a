"""The lab's snapshot (DESIGN.md §Lab): the state the page shows at one instant, both tracks' blocks,
requests and scalars in bytes and fractions (`snapshot`, `snapshot_from`, `track_snapshot`). Split from
`kvsim.lab.bundle`, which re-exports it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kvsim.lab.presets as _presets
from kvsim.arguments import as_int
from kvsim.errors import InvalidArgumentError
from kvsim.lab.bundle_info import _model_info, tier_info
from kvsim.lab.bundle_run import run_tracks
from kvsim.lab.metrics import SCALARS, metric_columns, moment_columns, moment_of
from kvsim.lab.query import (
    Resolved,
    _check_choice,
    _contiguous_track,
    resolve,
)
from kvsim.lab.state import (
    TIER_COLUMNS,
    Track,
    state_at,
    tokens_at,
)
from kvsim.model.config import CONTIGUOUS_POLICIES, SimConfig
from kvsim.reference.engine import EVENT_KINDS
from kvsim.workloads import Workload


def _requests(p: _presets.Preset) -> list[dict[str, Any]]:
    w = p.workload
    offsets, seg_id, seg_len = w.seg_offsets.tolist(), w.segment_id.tolist(), w.segment_len.tolist()
    prompts, outputs, max_tokens = w.prompt_len.tolist(), w.output_len.tolist(), w.max_tokens.tolist()
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
                "max_tokens": max_tokens[i],
                "num_samples": samples[i],
                "arrival_s": arrivals[i],
            }
        )
    return out


def reject_reasons(t: Track) -> dict[int, str]:
    """Why the engine rejected each request it rejected (request id -> its `reject_reason`, as
    `kvsim.simulate`'s requests table words it: "needs more blocks than the pool holds", ...)."""
    req = t.result.requests
    if req is None:
        return {}
    rejected = req.filter(req["status"] == "rejected")
    return {
        int(rid): str(why)
        for rid, why in zip(
            rejected["request_id"].to_list(), rejected["reject_reason"].to_list(), strict=True
        )
    }


def sequence_name(request: str, num_samples: int, sample: int) -> str:
    """A sequence's name as the page writes it: the request's (`req-1`), with `·s<sample>` when the
    request has several samples (`req-1·s0`, `req-1·s1`)."""
    return f"{request}·s{sample}" if num_samples > 1 else request


def loading_hits(t: Track, seq: int, k: int) -> int:
    """Blocks a request held for a CPU-tier load at state k found on the GPU (its `prefix-hit` rows
    between its last `admit` and its `load`, among the first `event_upto[k]` events): the blocks after
    them are being filled by the load and take their keys when it lands."""
    ev = t.result.raw.events
    assert ev is not None
    n = int(t.metrics["event_upto"][min(k, len(t.metrics["event_upto"]) - 1)])
    kinds = ev["kind"][:n]
    mine = np.flatnonzero(ev["seq"][:n] == seq)
    codes = kinds[mine]
    loads = np.flatnonzero(codes == EVENT_KINDS.index("load"))
    if not len(loads):
        return 0
    last = loads[-1]
    admits = np.flatnonzero(codes[:last] == EVENT_KINDS.index("admit"))
    first = admits[-1] if len(admits) else 0
    return int((codes[first:last] == EVENT_KINDS.index("prefix-hit")).sum())


def filling_blocks(
    t: Track, k: int, seqs: dict[tuple[int, int], list[Any]], blocks: dict[int, list[Any]]
) -> set[int]:
    """The blocks a CPU-tier load in flight is filling at state k (`seqs` and `blocks`: `state_at(t, k)`):
    those of a request held `loading` past its GPU hits, which hold no KV yet and take their keys when the
    load lands (its `load-done` makes the request `loaded`). One full-attention group: its table past
    `loading_hits`; a hybrid model's block rows carry the keys its manager gave, so the load's blocks are
    the request's blocks with no key. The page's replay derives the same (`TrackReplay.filling`)."""
    out: set[int] = set()
    index: dict[tuple[int, int], int] | None = None
    for (rid, sample), row in seqs.items():
        if row[3] != "loading":
            continue
        if t.groups:
            out.update(b for table in row[9] for b in table if b and blocks[b][4] is None)
            continue
        if index is None:
            index = {
                (int(r), int(s_)): i
                for i, (r, s_) in enumerate(zip(t.inp.request_id, t.inp.sample, strict=True))
            }
        out.update(row[8][loading_hits(t, index[(rid, sample)], k) :])
    return out


def _swap_space(cfg: SimConfig, requests: list[dict[str, Any]]) -> dict[str, int] | None:
    """The CPU swap space of a run that may swap: its `capacity_blocks` and the `used_blocks` its swapped-out
    sequences hold (their `swapped_blocks`); None when the run never swaps."""
    if cfg.preemption not in ("swap", "auto") or not cfg.cpu_blocks:
        return None
    used = sum(r.get("swapped_blocks", 0) for r in requests)
    return {"capacity_blocks": int(cfg.cpu_blocks), "used_blocks": used}


def swapped_blocks(t: Track, k: int) -> dict[tuple[int, int], int]:
    """Per swapped-out sequence at state k, `(request id, sample)`, the blocks its latest swap-out moved to
    the CPU swap space: the frees of its sequence that follow the swap-out in the same step (the engine
    frees a swapped-out table's blocks right after it)."""
    raw = t.result.raw.events
    if raw is None:
        return {}
    kind = np.asarray(raw["kind"])
    seq = np.asarray(raw["seq"])
    step = np.asarray(raw["step"])
    n = int(t.metrics["event_upto"][min(k, len(t.metrics["event_upto"]) - 1)])
    swap_out, free = EVENT_KINDS.index("swap-out"), EVENT_KINDS.index("free")
    out: dict[tuple[int, int], int] = {}
    for i in np.flatnonzero(kind[:n] == swap_out).tolist():
        q = int(seq[i])
        blocks = 0
        j = i + 1
        while j < len(kind) and step[j] == step[i] and (seq[j] != q or kind[j] == free):
            blocks += int(seq[j] == q)
            j += 1
        out[(int(t.inp.request_id[q]), int(np.broadcast_to(t.inp.sample, (len(t.inp),))[q]))] = blocks
    return out


def track_snapshot(t: Track, k: int, bpt: int, p: _presets.Preset) -> dict[str, Any]:
    """Blocks and requests of one track at state k. A hybrid model's requests have `block_tables`, one
    per KV-cache group (block 0 where a window's tokens left; `block_table` is None), and its blocks their
    `group`; a block holds min(B, computed − i·B) tokens at position i of a group of block size B (a
    state block: the tokens its state covers, the computed ones for a request's running state, (i + 1)·B
    for a state at position i, cached or started from), a cached one B, and shows its key only while it
    has one."""
    k = max(0, min(k, t.num_steps))
    seqs, blocks, regions = state_at(t, k)
    groups = t.groups
    bs = t.config.engine_block_size
    reqs = {r["request_id"]: r for r in _requests(p)}
    held: dict[int, int] = {}  # block -> tokens it holds
    holders: dict[int, list[str]] = {}  # block -> the sequences whose tables hold it
    filling = filling_blocks(t, k, seqs, blocks)  # (no KV, and no key, until the load lands)
    why = reject_reasons(t)
    swapped = swapped_blocks(t, k) if t.paged else {}
    requests = []
    for (rid, sample), row in sorted(seqs.items()):
        c, g = tokens_at(row, k)
        r = reqs[rid]
        name = sequence_name(r["name"], r["num_samples"], sample)
        tables = row[9] if groups else [row[8]]
        sizes = [spec.block_size for spec in groups] if groups else [bs]
        for x, table in enumerate(tables):
            size = sizes[x]
            state = bool(groups) and groups[x].kind == "mamba"
            last = max((i for i, b in enumerate(table) if b), default=-1)
            for i, b in enumerate(table):
                if b == 0 and groups:
                    continue
                # (a state block before the running one, the last: a cached state it started from, the
                # state after its block's tokens)
                tokens = (c if i == last else (i + 1) * size) if state else min(size, max(0, c - i * size))
                held[b] = max(held.get(b, 0), tokens)
                holders.setdefault(b, []).append(name)
        region = regions.get((rid, sample))
        requests.append(
            {
                "request_id": rid,
                "sample": sample,
                "name": name,
                "label": r["label"],
                "status": row[3],
                "system_tokens": r["system_tokens"],
                "user_tokens": r["user_tokens"],
                "generated_tokens": g,
                "context_tokens": c,
                "target_tokens": r["target_tokens"],
                "block_table": None if groups else list(row[8]),
                # A swapped-out sequence's context is in the CPU swap space: its blocks there.
                **({"swapped_blocks": swapped.get((rid, sample), 0)} if row[3] == "swapped" else {}),
                # A rejected request: why the engine rejected it.
                **({"reject_reason": why.get(rid)} if row[3] == "rejected" else {}),
                **({"block_tables": [list(x) for x in row[9]]} if groups else {}),
                "region": None
                if region is None or region[2] is None
                else {"offset_tokens": region[2], "size_tokens": region[3]},
            }
        )
    out_blocks = []
    for b, row in sorted(blocks.items()):
        state = row[2]
        group = row[6] if groups else None
        size = groups[group].block_size if groups and group is not None and group >= 0 else bs
        tokens = held.get(b, 0) if state in ("private", "shared") else (size if state == "cached" else 0)
        if (
            state == "cached"
            and groups
            and group is not None
            and group >= 0
            and groups[group].kind == "mamba"
        ):
            tokens = (Track.key_index(row[4]) + 1) * size if row[4] else size  # (the state after its block)
        if groups:
            key = row[4]
        else:
            key = row[4] if state == "cached" or (state in ("private", "shared") and tokens == bs) else None
            if b in filling:
                key = None
        out_blocks.append(
            {
                "block_id": b,
                "state": state,
                "ref_cnt": row[3],
                "num_tokens": tokens,
                "prefix_key": key,
                "request_ids": row[5],
                "sequences": holders.get(b, []),
                "offset_bytes": b * bs * bpt,
                **({"group": group} if groups else {}),
                **({"loading": True} if b in filling else {}),
            }
        )
    return {"blocks": out_blocks, "requests": requests}


def _scalar(v: np.generic) -> int | float | None:
    """A column's value as JSON takes it: NaN (undefined, as the multiplier with nothing running) is None."""
    x = v.item()
    return None if isinstance(x, float) and np.isnan(x) else x


def snapshot_from(
    r: Resolved,
    paged: Track,
    contiguous: Track | None,
    step: int | None,
    contiguous_step: int | None = None,
) -> dict[str, Any]:
    """The snapshot at one instant: the paged track at state `step` and the contiguous one at
    `contiguous_step`, which must be in force at the same time (`moment_of`); either alone picks the first
    instant at which its track is there (the other at its last state by then), neither the step the page
    opens on."""
    info = _model_info(r.paged)
    bpt = info["bytes_per_token"]
    steps = paged.num_steps
    c_steps = contiguous.num_steps if contiguous is not None else None
    k = None if step is None else as_int(step)  # a numpy integer is an integer, a bool is not
    if step is not None and k is None:
        raise InvalidArgumentError(f"step {step!r} must be an integer")
    kc = None if contiguous_step is None else as_int(contiguous_step)
    if contiguous_step is not None and kc is None:
        raise InvalidArgumentError(f"contiguous_step {contiguous_step!r} must be an integer")
    if k is not None and not 0 <= k <= steps:
        more = (
            f"; the contiguous track's go to {c_steps}: contiguous_step={k} shows its step {k}"
            if c_steps is not None and steps < k <= c_steps
            else ""
        )
        raise InvalidArgumentError(f"step {k} must be between 0 and {steps} (the paged track's steps){more}")
    if kc is not None:
        if c_steps is None:
            raise InvalidArgumentError(
                f"contiguous_step {kc}: this run has no contiguous track (a hybrid model's)"
            )
        if not 0 <= kc <= c_steps:
            raise InvalidArgumentError(
                f"contiguous_step {kc} must be between 0 and {c_steps} (the contiguous track's steps)"
            )
    if k is None and kc is None:
        # None: the step the page opens on (a workload of your own has none: its end).
        k = steps if r.query.get("preset") == "custom" else min(r.preset.step, steps)
    pm, cm = metric_columns(paged, contiguous, bpt)
    moments = moment_columns(paged, contiguous)
    m = moment_of(moments, k, kc)
    k = int(moments["paged_step"][m])
    out: dict[str, Any] = {
        "step": k,
        "num_steps": steps,
        # The instant shown (each track's state is the last it reached by then) and each track's own.
        "time_s": float(moments["time_s"][m]),
        "paged_time_s": float(pm["time_s"][k]),
        "bytes_per_token": bpt,
        "block_size": r.paged.engine_block_size,
    }
    kc = None
    if contiguous is not None:
        kc = int(moments["contiguous_step"][m])
        out["contiguous_step"] = kc
        out["contiguous_num_steps"] = c_steps
        out["contiguous_time_s"] = float(cm["time_s"][kc])

    def scalar(name: str) -> int | float | None:
        if name == "concurrency_multiplier":
            return _scalar(moments[name][m]) if name in moments else None
        if name in pm:
            return _scalar(pm[name][k])
        return _scalar(cm[name][kc]) if name in cm and kc is not None else None

    out.update({name: scalar(name) for name in SCALARS})
    if paged.groups:
        out["groups"] = [
            {
                "kind": g.kind,
                "window": g.window,
                "block_size": g.block_size,
                "blocks": int(pm[f"paged_group_blocks_{i}"][k]),
            }
            for i, g in enumerate(paged.groups)
        ]
    tier = tier_info(r.paged, paged, r.query.get("kv_offloading_bytes"))
    if tier is not None:
        at = {name: int(pm[name][k]) for name in TIER_COLUMNS}
        tier.update(at)
        # The chunks as the page draws them: pinned by a load, ready (not pinned), pending, free.
        tier["ready_chunks"] = at["cpu_chunks"] - at["cpu_pending_chunks"] - at["cpu_loading_chunks"]
        tier["free_chunks"] = tier["chunks"] - at["cpu_chunks"]
    out["tier"] = tier
    out["num_held"] = int(pm["num_held"][k])
    out.update(track_snapshot(paged, k, bpt, r.preset))
    # The CPU swap space: its blocks (None: no swapping) and those the swapped-out sequences hold in it.
    out["swap_space"] = _swap_space(r.paged, out["requests"])
    out["contiguous"] = (
        None if contiguous is None or kc is None else track_snapshot(contiguous, kc, bpt, r.preset)
    )
    return out


def snapshot(
    workload: Workload | str,
    config: SimConfig | None = None,
    step: int | None = None,
    *,
    contiguous_step: int | None = None,
    backend: str = "rust",
    contiguous_policy: str | None = None,
    segment_names: dict[int, str] | None = None,
    request_names: list[str] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The state the page shows at `step` (None: the step the page opens on, a preset's; the end for a
    workload of your own) of `workload` under `config` (paged track; `contiguous_step` picks the contiguous
    track's state instead, or with `step` one of those in force at the same instant: `snapshot_from`)
    beside `contiguous_policy` (contiguous track, placed by `config.placement`; default: the preset's, or
    `orca-oracle` for a custom workload), in bytes and fractions
    (DESIGN.md §Lab). `segment_names` (content id -> name) and `request_names` make prefix keys readable.

    `workload` may also be a preset's name; then `overrides` apply as in `bundle` (`snapshot("copilot",
    step=1, block_size=32)`), and a `config`, `segment_names` or `request_names` is refused (the preset
    brings its own).

    Raises:
        InvalidArgumentError: a workload that is neither a `Workload` nor a preset's name, a bad override
            (or any override with a `Workload`; a config or names with a preset's name), config or step
            (the message names it), or a run past `LIMITS`.
    """
    if step is not None and as_int(step) is None:  # before the run, not after it
        raise InvalidArgumentError(f"step {step!r} must be an integer")
    if contiguous_step is not None and as_int(contiguous_step) is None:
        raise InvalidArgumentError(f"contiguous_step {contiguous_step!r} must be an integer")
    if isinstance(workload, str):
        given = [
            name
            for name, v in (
                ("config", config),
                ("segment_names", segment_names),
                ("request_names", request_names),
            )
            if v is not None
        ]
        if given:  # a preset brings its own: refused, not ignored
            raise InvalidArgumentError(
                f"{', '.join(given)}: a preset's name brings its own config and names; change them with "
                f"overrides (snapshot({workload!r}, block_size=32)) or pass a kvsim.Workload with its config"
            )
        chosen = {} if contiguous_policy is None else {"contiguous_policy": contiguous_policy}
        r = resolve(workload, **chosen, **overrides)
    else:
        if not isinstance(workload, Workload):
            raise InvalidArgumentError(
                f"workload {workload!r} is not a kvsim.Workload or a preset's name (one of "
                f"{', '.join(map(repr, _presets.names()))})"
            )
        contiguous_policy = contiguous_policy or "orca-oracle"
        if not isinstance(config, SimConfig):
            raise InvalidArgumentError(f"config {config!r} is not a kvsim.SimConfig")
        if overrides:  # they apply to a preset; a workload of your own takes its config as given
            raise InvalidArgumentError(
                f"{', '.join(overrides)}: overrides apply to a preset's name only; with a workload, set "
                "them on config (config.replace(...))"
            )
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
    return snapshot_from(r, paged, contiguous, step, contiguous_step)


def _resolve_custom(p: _presets.Preset, config: SimConfig, contiguous_policy: str) -> Resolved:
    _check_choice("contiguous_policy", contiguous_policy, CONTIGUOUS_POLICIES)
    if config.is_contiguous:
        contiguous_policy = config.policy
        config = config.replace(policy="vllm")
    if config.model is None:
        raise InvalidArgumentError("config.model None: the lab reports bytes, so the config needs a model")
    contiguous = _contiguous_track(config, p.workload, contiguous_policy)
    return Resolved(p, config, contiguous, {"preset": "custom"})
