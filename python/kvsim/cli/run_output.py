"""What `kvsim run` reports after a run (split from `kvsim.cli.run`, which reads the flags and runs it): the
notes on what was sized and how (`encoder_notes`, `block_size_note`, and those `run_record` adds), the record
`--json` prints and `--save-result` writes (`run_record`, `save_run`), and the human report: the workload,
pool, start-up and time lines, `config:`, the `vllm bench serve` table, the groups, tier and fleet sections and
the notes (`print_run`). The table and most notes are `kvsim.analysis.run_report`'s."""

from __future__ import annotations

import argparse
import datetime
import json
import re
from pathlib import Path
from typing import Any

from kvsim.analysis.run_report import render_groups, render_table, render_tier
from kvsim.analysis.run_report_fleet import data_parallel_notes, fleet_record, herd_notes, render_fleet
from kvsim.cli.block_backend import backend_block_note
from kvsim.cli.flags import FlagError
from kvsim.model.config import KNOBS
from kvsim.model.models import transformers_backend_note
from kvsim.model.units import fmt_count

# Rotary caches worth a note: a quarter of a GiB a GPU (Llama 4 Scout's are 2.5 GiB; most models' a few MiB).
ROPE_NOTE_BYTES = 1 << 28


def encoder_notes(config: Any) -> list[str]:
    """What vLLM loads beside the language model's weights, when the pool was sized from a GPU: a
    multimodal checkpoint's towers (counted in the weights memory, or not and why: then vLLM's KV memory
    is smaller than shown), routed experts vLLM pads under tensor parallelism, and rotary caches large
    enough to notice (DESIGN.md §Defaults and sizing)."""
    from kvsim.model.models import resolve, with_quantization
    from kvsim.model.shard import loaded_expert_padding, padded_expert_width
    from kvsim.model.units import fmt_bytes

    pool = config.pool
    if config.model is None or pool.source != "gpu":
        return []
    model = resolve(config.release_model)
    notes = []
    if not config.language_model_only:
        kinds = ", ".join(t.kind for t in model.towers)
        if model.towers:
            notes.append(
                f'{config.model} is a multimodal checkpoint: the weights above (vLLM\'s "Model loading took") '
                f"hold its encoder and projector ({kinds}: {fmt_bytes(pool.tower_bytes or 0)} a GPU) beside the "
                "language model, as vLLM loads them; --language-model-only leaves them out, as in vLLM"
            )
        if model.uncounted:
            notes.append(
                f"{config.model}: vLLM also loads what kvsim does not count ({'; '.join(model.uncounted)}), so "
                "its KV memory is smaller than shown; --language-model-only leaves it out of both, or "
                "--kv-cache-memory-bytes with vLLM's logged figure gives its pool"
            )
    tp, ep, dp = config.tensor_parallel_size, config.enable_expert_parallel, config.data_parallel_size
    padded = padded_expert_width(model, tp, dp, expert_parallel=ep)
    if padded:
        # (in the experts' format as loaded: fp8 under --quantization fp8, as the weights above)
        extra, _ = loaded_expert_padding(with_quantization(model, config.quantization), tp, ep, dp)
        at = f"tensor_parallel_size {tp}" + (f", data_parallel_size {dp}" if dp > 1 else "")
        n = f"{tp}" if dp == 1 else f"({tp} x {dp})"
        notes.append(
            f"vLLM pads {config.model}'s routed experts to {padded:,} wide a GPU at {at} "
            f"({model.expert_ffn:,} // {n} = {model.expert_ffn // (tp * dp):,} otherwise; its KimiMoE): "
            f"{fmt_bytes(extra)} of zeros a GPU in the weights above, which its kernels also read; "
            "--enable-expert-parallel keeps the experts whole instead"
        )
    if (pool.rope_cache_bytes or 0) >= ROPE_NOTE_BYTES:
        notes.append(
            f"{config.model}'s rotary embeddings keep {fmt_bytes(pool.rope_cache_bytes)} of cos/sin caches on "
            "every GPU (part of the weights above): vLLM builds them for the config's max_position_embeddings "
            "(as its RoPE scaling extends them), whatever --max-model-len says"
        )
    return notes


def block_size_note(config: Any) -> str | None:
    """The block size given (`--block-size`, or the run file's) and the one the pool has, where a state
    layer raised it as vLLM 0.33.0 does: `Platform._align_hybrid_block_size` (vllm/platforms/interface.py)
    raises the attention block until an attention page holds a Mamba state and logs "Setting attention
    block size to N tokens to ensure that attention page size is >= mamba page size."; None otherwise (an
    unset size's raise is vLLM's usual start, which the pool line and `config:` show)."""
    pool = config.pool
    used, asked = pool.pool_block_size, config.block_size
    if used == asked or config._given.get("block_size") is None:
        return None
    return (
        f"block size {asked} raised to {used} tokens: {pool.model} keeps Mamba states, and vLLM raises the "
        f'attention block until a page holds one (it logs "Setting attention block size to {used} tokens to '
        "ensure that attention page size is >= mamba page size.\"); every group's block is "
        f"{used} tokens (--save-result's pool_sizing: block_size {used}, block_size_given {asked})"
    )


def tier_ceiling(config: Any, workload: Any, result: Any) -> float | None:
    """A CPU tier's run on a Mooncake trace: the reuse ceiling of its first admissions' GPU + tier hits, an
    infinite cache's hit rate over the requests the run did not reject, from the trace's chained hash ids
    (`claims_seed.mooncake_ceiling`, a hit reaching the prompt's last token as a load's does; DESIGN.md §CPU
    tier, "Metrics"). None without a tier or on another workload (its segment ids need not be chained)."""
    if (
        not config.kv_offloading_chunks
        or workload is None
        or (workload.meta or {}).get("format") != "mooncake"
    ):
        return None
    import numpy as np

    from kvsim.analysis.claims_seed import mooncake_ceiling

    rows = result.requests
    rejected = set(rows.filter(rows["status"] == "rejected")["request_id"].to_list())
    keep = [int(r) not in rejected for r in np.asarray(workload.request_id).tolist()]
    return mooncake_ceiling(workload, config.pool.pool_block_size, whole_prompt=True, keep=keep)


def run_record(
    args: argparse.Namespace,
    config: Any,
    result: Any,
    serving: dict[str, Any],
    info: dict[str, Any],
    notes: list[str],
    backend: str,
    goodput: Any,
    fleet: bool,
    workload: Any = None,
) -> dict[str, Any]:
    """The run's record (`--json`'s, `--save-result`'s file), its notes completed in `notes`: a DP rank run
    alone, the fleet's DP groups, what vLLM loads beside the weights, the Transformers backend, the
    calibration's model, the block size raised or no backend's; with a CPU tier on a Mooncake trace the
    run's reuse ceiling (`tier_ceiling`: `reuse_ceiling`, else absent)."""
    import kvsim

    dp = config.data_parallel_size
    several = config.replicas > 1 or config.prefill_replicas > 0
    if dp > 1 and not several:
        # (a mixture-of-experts model: its DP ranks share the experts, each rank an engine of its own)
        notes.append(
            f"data_parallel_size {dp}: vLLM runs {dp} engines, one a DP rank, and spreads the requests over "
            f"them; this run is one rank's engine given the whole workload ({dp} times its share), sized with "
            f"the routed experts spread over the ranks' GPUs; --replicas {dp} runs all {dp} behind a router"
        )
    if fleet and several:  # (a fleet of DP ranks: what a replica is, and the groups they make)
        notes.extend(data_parallel_notes(result))
        notes.extend(herd_notes(result))
    notes.extend(encoder_notes(config))
    backend_note = transformers_backend_note(config.model)
    if backend_note is not None:
        notes.append(backend_note)
    calibrated_on = config.calibration_note()
    if calibrated_on is not None:
        notes.append(calibrated_on)
    prefill_cfg = getattr(args, "prefill_sim_config", None)
    for note in (block_size_note(config), backend_block_note(config, args.preset)):
        if note is not None:
            notes.append(note)
    if prefill_cfg is not None and prefill_cfg.block_size != config.block_size:  # (its own, not inherited)
        note = backend_block_note(prefill_cfg, args.preset, "prefill replicas' ")
        if note is not None:
            notes.append(note)
    out = {
        "kvsim_version": kvsim.__version__,
        "argv": getattr(args, "_argv", None),
        "pool": config.pool.line(),
        "time": config.time_line(),
        "time_model": config.time_record(),  # (what the times are: a datasheet bound or calibrated, user53 #7)
        "calibration": config.calibration_record(),
        # vLLM's four start-up figures (DESIGN.md §Defaults and sizing), as vLLM logs them.
        "startup": config.pool.figures.lines() if config.pool.figures is not None else [],
        "pool_sizing": config.pool.to_dict(),
        "config": config.describe(),
        # (the resolved transport of the collectives, beside the config's unresolved pcie_p2p)
        "collective_transport": config.collective_transport,
        "workload": info,
        "seed": info["seed"],
        "backend": backend,
        "goodput_slos_ms": goodput,
        "serving": serving,
        "summary": result.summary,
        "notes": notes,
    }
    prefill_cfg = getattr(args, "prefill_sim_config", None)
    if prefill_cfg is not None:  # --prefill-config: the prefill pool's own pool and time
        out["prefill_pool"] = prefill_cfg.pool.line()
        out["prefill_time"], out["prefill_time_model"] = prefill_cfg.time_line(), prefill_cfg.time_record()
    if config.prefill_replicas > 0:
        # (the prefill replicas' whole config, as `config` is the decode replicas' (theirs too without
        # --prefill-config): it reads back with SimConfig.from_dict, so a record of a P/D run says what
        # its prefill side ran with)
        out["prefill_config"] = (prefill_cfg if prefill_cfg is not None else config).describe()
    if fleet:
        out["fleet"] = fleet_record(result)
    ceiling = tier_ceiling(config, workload, result)
    if ceiling is not None:
        out["reuse_ceiling"] = ceiling
    return out


def save_run(
    args: argparse.Namespace, save_dir: Path | None, config: Any, result: Any, out: dict[str, Any], info: dict
) -> None:
    """`--save-result`: the record as JSON and the request rows as Parquet in `save_dir` (none without it),
    the file's path kept in `out["saved"]`."""
    if save_dir is None:
        return
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"kvsim-{Path(str(info['name'])).stem}-{config.policy}")
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S-%f")
    path = save_dir / f"{stem}-{stamp}.json"
    try:
        save_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2, default=str, ensure_ascii=False) + "\n")
        result.requests.write_parquet(path.with_suffix(".requests.parquet"))
    except OSError as exc:
        raise FlagError(f"argument --save-result: cannot write {path}: {exc.strerror}") from None
    out["saved"] = str(path)


def print_run(
    args: argparse.Namespace,
    config: Any,
    result: Any,
    serving: dict[str, Any],
    out: dict[str, Any],
    info: dict[str, Any],
    notes: list[str],
    pct_metrics: Any,
    pcts: Any,
    fleet: bool,
    save_dir: Path | None,
) -> None:
    """The human report of a run (without `--json`)."""
    prefill_cfg = getattr(args, "prefill_sim_config", None)
    params = ",".join(
        f"{k}={','.join(f'{a}={b}' for a, b in v.items()) if isinstance(v, dict) else v}"
        for k, v in info["params"].items()
        if v is not None
    )
    seed = f", seed {info['seed']}" if info["seed"] is not None else ""
    print(
        f"workload: {info['name']}{':' + params if params else ''}, {fmt_count(info['requests'], 'request')}{seed}"
    )
    print(out["pool"])
    for line in out["startup"]:
        print(f"vllm: {line}")
    print(out["time"])
    if prefill_cfg is not None:
        print(f"prefill {out['prefill_pool']}")
        print(f"prefill {out['prefill_time']}")
    raw_cfg, human = config.resolved(), config.describe()
    pool_bs = config.pool.pool_block_size
    if pool_bs != config.block_size:  # (a state layer raised it: the pool's, and the one asked)
        human["block_size"] = f"{pool_bs} (raised from {config.block_size} for the state layers)"
    for k, given in human["given"].items():  # (vllm-v0's num_blocks N: a pool of N + 1)
        why = ": vLLM v0's blocks, all usable, and kvsim's null block" if k == "num_blocks" else ""
        human[k] = f"{human[k]} ({given} given{why})"
    shown = {
        k: human[k]
        for k, v in raw_cfg.items()
        if v is not None
        and v != KNOBS[k].default
        # (no swap: a hybrid model, or recompute preemption)
        and not (
            k == "swap_ps_per_block" and (v == 0 or config.kv_groups or config.preemption == "recompute")
        )
        and not (k.startswith("kv_offloading_") and not config.kv_offloading_chunks)  # no tier: moot
        # (a preset's serve rule without a GPU, or any rule with both limits given, picks nothing)
        and not (
            k == "batch_rule"
            and (
                (config.gpu is None and v != "v0")
                or all(config._given.get(n) is not None for n in ("max_num_seqs", "max_num_batched_tokens"))
            )
        )
        # (an unset block size resolves to vLLM's default, 16 or default_block_size's 64, but for some MLA
        # models: shown where it is not that)
        and not (k == "block_size" and v == config.default_block_size and pool_bs == v)
        # (a sizing knob another overrode, as vLLM lets it: the notes say which one sized the pool)
        and k not in getattr(args, "overridden_knobs", ())
        # (unset, settled as vLLM 0.34.0 settles them: the pool line says how it was sized; but a sizing
        # settled away from the default's, a disaggregated fleet's profiled pool, is shown: user52)
        and not (
            k in ("gpu_memory_utilization", "kv_cache_sizing")
            and k in config.derived
            and not (k == "kv_cache_sizing" and config.pool.profiled_why)
        )
    }
    if "kv_cache_sizing" in shown and "kv_cache_sizing" in config.derived:
        shown["kv_cache_sizing"] += " (unset: vLLM 0.34.0's for NIXL without an IMEX channel)"
    # (a size in GiB, as vLLM's flag takes it, with its unit: `kv_offloading_size=64 GiB`, not `=64.0`)
    print(
        "config: "
        + ", ".join(f"{k}={v:g} GiB" if KNOBS[k].kind == "gib" else f"{k}={v}" for k, v in shown.items())
    )
    print()
    from kvsim.model.units import fmt_duration_ps

    tick = fmt_duration_ps(config.iteration_time_ps) if config.time_model == "ticks" else None
    scope = (config.replicas, config.prefill_replicas)
    caching = config.enable_prefix_caching
    times = None if tick else out["time_model"]["times"]
    print(render_table(serving, result.summary, pct_metrics, pcts, tick, scope, caching, times))
    for section in (
        render_groups(config, result.summary),
        render_tier(config, result.summary, out.get("reuse_ceiling")),
    ):
        if section:
            print(section)
    if fleet:
        print(render_fleet(result))
    for note in notes:
        print(f"note: {note}")
    if save_dir is not None:
        print(f"saved: {out['saved']}")
