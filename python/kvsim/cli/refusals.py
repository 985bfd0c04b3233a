"""The rule that refuses a knob doing nothing for a run, by name (`kvsim run`, `kvsim plan`, `kvsim sweep`):
`idle_knobs` and `idle_model_knobs` tell, for one configuration, which knobs it sets and does not read, and
`refuse_idle_at_every_point` refuses one that no point of a command reads; the knobs a run without a model
cannot act on, swap space without swapping, and the note naming the sizing flag vLLM lets win. Messages
are spelled as flags (`FLAGS`) or as a sweep's fields (`FieldSpelling`).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kvsim.cli.flags import FlagError, _knob_flags
from kvsim.errors import KvsimError, MeasuredSizingError
from kvsim.model.config import CONTIGUOUS_POLICIES, KNOBS
from kvsim.model.config_checks import measured_refusal
from kvsim.workloads.registry import format_value


def _given_at(args: argparse.Namespace, flag_of: dict[str, str], name: str) -> str:
    """Where knob `name`'s value came from: its flag, or the run file."""
    return f"argument {flag_of[name]}" if name in flag_of else f"run file {args.toml}: [config] {name}"


def given_where(args: argparse.Namespace) -> Callable[[str], str]:
    """How `kvsim run` and `kvsim plan` name a knob they refuse (`refuse_idle_at_every_point`'s `where`): one
    the user gave by the flag as typed (`--no-sparse-mla-shard-q`, not `--sparse-mla-shard-q`; argparse
    records it, `args.flag_of`) or by the run file (`_given_at`), any other (a preset's own) by its flag."""

    def where(name: str) -> str:
        if name in args.given_knobs:
            return _given_at(args, args.flag_of, name)
        return f"argument {_knob_flags(name)[0]}"

    return where


def _refuse_modelless_knobs(
    args: argparse.Namespace | None,
    config: Any,
    cfg: dict[str, Any],
    flag_of: dict[str, str],
    where: Callable[[str], str] | None = None,
    configs: Iterable[Any] = (),
) -> None:
    """A pool given in blocks with no model: the model's sizing and serving knobs the user gave have
    nothing to act on (`config:` listed `tensor_parallel_size=1000` as if it took effect). (A preset's own
    values, `gpu_memory_utilization` 0.9 of the older ones, are not the user's.) `where` names a knob
    (`kvsim sweep`'s `--base` fields; else its flag or the run file), and with `configs` (a sweep's points)
    a knob is refused only where none of them names a model."""
    if config.model is not None or any(c.model is not None for c in configs):
        return
    for name in (
        "tensor_parallel_size",
        "data_parallel_size",
        "enable_expert_parallel",
        "kv_cache_dtype",
        "quantization",
        "gpu_memory_utilization",
        "enforce_eager",
        "language_model_only",
        "cudagraph_memory_bytes",
        "cudagraph_capture_grid",
        "sparse_mla_shard_q",
        "activation_reserve_bytes",
        "prefix_cache_retention_interval",
    ):
        if name in cfg and cfg[name] != KNOBS[name].default:
            said = where(name) if where is not None else _given_at(args, flag_of, name)  # type: ignore[arg-type]
            model = "model=NAME" if where is not None else "--model"
            raise FlagError(
                f"{said}: a model's knob, but this run names no model (its pool is given in blocks): give "
                f"{model} or drop it"
            )


class Spelling:
    """How a refusal names a knob and its value: `kvsim run`'s and `kvsim plan`'s by their flags
    (`--replicas N`, "drop the flag"; `flag_of` names the spelling given, so that
    `--disable-hybrid-kv-cache-manager` is "the flag"), `kvsim sweep`'s by SimConfig field as its `--base`
    and `--grid` take them (`FieldSpelling`: `replicas=N`, "drop it")."""

    drop = "drop the flag"

    def __init__(self, flag_of: dict[str, str] | None = None, fields: Iterable[str] = ()) -> None:
        self.flag_of = dict(flag_of or {})
        self.fields = frozenset(fields)  # (knobs given by a run file's [config]: `RunFileSpelling`)

    def of(self, name: str) -> Spelling:
        """The spelling of knob `name`'s own refusal: a run file's field (`RunFileSpelling`: "the field",
        "drop it") where the run file gave it, else this one."""
        return RunFileSpelling(self.flag_of) if name in self.fields else self

    def knob(self, name: str) -> str:
        return _knob_flags(name)[0]

    def setting(self, name: str, value: str) -> str:
        return f"{self.knob(name)} {value}"

    def value(self, name: str, value: Any) -> str:
        switch = isinstance(value, bool) or self.flag_of.get(name) == "--disable-hybrid-kv-cache-manager"
        return (
            "the flag" if switch else "none" if value is None else repr(value)
        )  # (the flag's word for None)


class FieldSpelling(Spelling):
    """`kvsim sweep`'s spelling: SimConfig fields (`policy`, `replicas=N`)."""

    drop = "drop it"

    def knob(self, name: str) -> str:
        return name

    def setting(self, name: str, value: str) -> str:
        return f"{name}={value}"

    def value(self, name: str, value: Any) -> str:
        return format_value(value) if isinstance(value, bool) else "none" if value is None else repr(value)


class RunFileSpelling(Spelling):
    """The refusal of a knob a run file's [config] gave (`kvsim run --toml`, `kvsim plan --toml`): the
    knob is a field, not a flag ("the field", "drop it"); the other knobs the message names keep their
    flags."""

    drop = "drop it"

    def value(self, name: str, value: Any) -> str:
        said = super().value(name, value)
        return "the field" if said == "the flag" else said


def spelling(args: argparse.Namespace) -> Spelling:
    """`kvsim run`'s and `kvsim plan`'s spelling: flags as typed (`args.flag_of`), and the knobs given by the
    run file only (`args.given_knobs` without a flag) as its fields."""
    return Spelling(args.flag_of, set(args.given_knobs) - set(args.flag_of))


FLAGS = Spelling()


def idle_model_knobs(config: Any, spell: Spelling = FLAGS) -> dict[str, str | None]:
    """A model's knobs set away from their defaults in `config`, each None where the model gives it
    something to act on, else why it does nothing, in vLLM 0.33.0 as here (the refusal's text after the
    knob's name). `language_model_only` on a text-only checkpoint (vLLM builds a multimodal config, the
    one that reads the flag, only for a multimodal architecture: `ModelConfig.__post_init__`);
    `gdn_prefill_backend` on a model without gated delta net layers (vLLM reads it only in its GDN
    attention backend, `vllm/v1/attention/backends/gdn_attn.py`); `hybrid_kv_cache_manager` on a model of
    one KV-cache group (vLLM's hybrid manager and the unified one it falls back to allocate the same pool:
    `unify_hybrid_kv_cache_specs` has nothing to unify); `prefix_cache_retention_interval` on a model
    without a sliding-window or Mamba KV-cache group (vLLM's sparse retention, `reachable_block_mask`,
    and its Mamba manager's prefill end read it for those groups only) or with prefix caching off (it
    picks which blocks get a key). The one rule of `kvsim run`, `kvsim plan` and `kvsim sweep`
    (`refuse_idle_at_every_point`)."""
    if config.model is None:
        return {}
    from kvsim.model.models import resolve

    model = resolve(config.release_model)
    layout = config.pool.layout
    out: dict[str, str | None] = {}

    def idle(name: str, why: str | None) -> None:
        value = getattr(config, name)
        out[name] = (
            None if why is None else f"{spell.value(name, value)} does nothing here: {why}; {spell.drop}"
        )

    if config.language_model_only:
        idle(
            "language_model_only",
            None
            if model.encoders or model.towers or model.uncounted
            else f"model {model.name} is text-only, no encoder or projector to leave out (vLLM reads the flag "
            "only for a multimodal checkpoint)",
        )
    if config.gdn_prefill_backend != KNOBS["gdn_prefill_backend"].default:
        gdn = any(lay.state is not None and lay.state.gdn_head_k_dim for lay in model.layer_list())
        idle(
            "gdn_prefill_backend",
            None
            if gdn
            else f"model {model.name} has no gated delta net layers, the only ones whose prefill kernel it picks",
        )
    if config.hybrid_kv_cache_manager != KNOBS["hybrid_kv_cache_manager"].default and layout is not None:
        idle(
            "hybrid_kv_cache_manager",
            None
            if layout.hybrid or layout.promoted
            else f"model {model.name}'s layers make one KV-cache group ({layout.groups[0].kind}), which vLLM's "
            "hybrid KV-cache manager and the unified one allocate alike (it matters for sliding-window, "
            "chunked-local and state layers beside full attention)",
        )
    if config.prefix_cache_retention_interval != KNOBS["prefix_cache_retention_interval"].default:
        sparse = sorted({g.kind.replace("_", "-") for g in config.kv_groups if g.sparse})
        idle(
            "prefix_cache_retention_interval",
            f"model {model.name} has no sliding-window or Mamba (state) KV-cache group"
            + (
                " with the hybrid KV-cache manager off (its windows kept whole)"
                if layout is not None and layout.promoted
                else ""
            )
            + ", the only groups whose cached blocks it thins (vLLM's sparse retention, reachable_block_mask)"
            if not sparse
            else None
            if config.enable_prefix_caching
            else f"it picks which blocks of model {model.name}'s {' and '.join(sparse)} groups get a "
            "prefix-cache key, and prefix caching is off",
        )
    return out


def _refuse_idle_model_knobs(
    args: argparse.Namespace, config: Any, cfg: dict[str, Any], flag_of: dict[str, str]
) -> None:
    """`kvsim run`'s refusal of a model's knob the user gave that this model gives nothing to act on
    (`idle_model_knobs`; it ran unread and `config:` listed it)."""
    spell = Spelling(flag_of, set(cfg) - set(flag_of))
    for name, why in idle_model_knobs(config, spell).items():
        if why is not None and name in cfg:
            why = idle_model_knobs(config, spell.of(name))[name]
            raise FlagError(f"{_given_at(args, flag_of, name)}: {why}")


def _overridden_sizing(
    args: argparse.Namespace, config: Any, cfg: dict[str, Any], flag_of: dict[str, str]
) -> tuple[list[str], set[str]]:
    """Pool-sizing knobs the user gave that another one overrides, as vLLM 0.33.0 lets it: the notes that
    say which one sized the pool (`sizing_override_notes`, spelled as `kvsim run`'s flags or its run
    file's fields), and the overridden knobs (left off `config:`, which lists what took effect)."""

    def said(name: str) -> str:
        return flag_of.get(name, f"run file {args.toml}: [config] {name}")

    notes = sizing_override_notes(config, cfg, said)
    return list(notes.values()), set(notes)


# How much of a configuration `sizing_override_notes` says: its values and the blocks its KV memory holds,
# its values alone, or neither (a note over configurations that differ in them).
DETAILS = ("full", "values", "none")


def sizing_override_notes(
    config: Any, cfg: dict[str, Any], said: Callable[[str], str], *, detail: str = "full"
) -> dict[str, str]:
    """The knobs of `cfg` (what was given for `config`) that another knob of it overrides in sizing the
    pool, as vLLM 0.33.0 lets it, each with the note that says which one sized the pool (knobs spelled by
    `said`; `detail`, one of `DETAILS`: less of this configuration, for a note over several). `num_gpu_blocks_override`
    wins over the blocks the KV memory holds, however that memory was given (`get_kv_cache_configs`,
    vllm/v1/core/kv_cache_planning.py, logs "Overriding num_gpu_blocks=M with num_gpu_blocks_override=N";
    vLLM v0's `LLMEngine._initialize_kv_caches` the same); `kv_cache_memory_bytes` over
    `gpu_memory_utilization` (the worker skips the memory profiling: "This does not respect the
    gpu_memory_utilization config", `Worker.determine_available_memory`, vllm/v1/worker/gpu_worker.py)."""
    from kvsim.model.units import fmt_bytes

    notes: dict[str, str] = {}
    blocks = cfg.get("num_blocks")
    kv = cfg.get("kv_cache_bytes")
    gmu = cfg.get("gpu_memory_utilization")
    if blocks is not None and (kv is not None or gmu is not None):
        # (the KV memory the override replaces: kv_cache_memory_bytes when given, which itself overrides
        # gpu_memory_utilization below)
        by = "kv_cache_bytes" if kv is not None else "gpu_memory_utilization"
        sized = None
        # (a KV memory too small for a block: vLLM fails before the override, and no count is said)
        with contextlib.suppress(KvsimError):
            if detail == "full":
                # (vLLM's count, floor(KV bytes / block bytes), the figure its log line prints: "within"'s
                # num_blocks, which "extra" gives one more for kvsim's null block)
                sized = config.replace(num_blocks=None, pool_null_block="within").num_blocks
        values = detail != "none"
        given = f"{said(by)} {fmt_bytes(kv) if kv is not None else f'{gmu:g}'}" if values else said(by)
        holds = f" (whose KV memory holds {sized:,} blocks)" if sized is not None else ""
        n = str(blocks) if values else "N"
        log = (
            f'"Overriding num_gpu_blocks={"M" if sized is None else sized} with num_gpu_blocks_override={n}"'
        )
        # (vLLM v0, whose count "extra" follows, took it in LLMEngine._initialize_kv_caches, logging the same)
        where = (
            "v0's LLMEngine._initialize_kv_caches"
            if config.pool_null_block == "extra"
            else "its get_kv_cache_configs"
        )
        override = f"{said('num_blocks')} {blocks:,}" if values else said("num_blocks")
        notes[by] = (
            f"{override} sizes the pool, not {given}{holds}: vLLM lets the override win ({where} logs {log}), "
            f"so {said(by)} sizes nothing here"
        )
    if kv is not None and gmu is not None:
        kv_said = said("kv_cache_bytes") + (f" {fmt_bytes(kv)}" if detail != "none" else "")
        gmu_said = said("gpu_memory_utilization") + (f" {gmu:g}" if detail != "none" else "")
        notes["gpu_memory_utilization"] = (
            f"{kv_said} is the KV memory, not what {gmu_said} leaves: vLLM's kv_cache_memory_bytes skips the "
            'memory profiling and ignores gpu_memory_utilization ("This does not respect the '
            f'gpu_memory_utilization config"), so {said("gpu_memory_utilization")} sizes nothing here'
        )
    return notes


def sweep_sizing_notes(points: Sequence[tuple[Any, dict[str, Any]]], said: Callable[[str], str]) -> list[str]:
    """`kvsim run`'s notes on a sizing knob another overrides (`sizing_override_notes`), over a sweep's
    configurations (each `(config, what was given for it)`), each said once: as `kvsim run` says it where
    every configuration it applies to gives one note, else with less of them (`DETAILS`: without the blocks
    their KV memory holds, then without their values); with how many of the configurations it applies to
    where not all."""
    out: list[str] = []
    for knob in ("kv_cache_bytes", "gpu_memory_utilization"):
        hits = [(c, cfg) for c, cfg in points if knob in sizing_override_notes(c, cfg, said)]
        if not hits:
            continue
        for detail in DETAILS:
            notes = (sizing_override_notes(c, cfg, said, detail=detail)[knob] for c, cfg in hits)
            texts = list(dict.fromkeys(notes))
            if len(texts) == 1:
                break
        where = (
            ""
            if len(hits) == len(points)
            else f" (at {len(hits)} of the sweep's {len(points)} configurations)"
        )
        out.extend(text + where for text in texts)
    return out


def _refuse_idle_swap(
    args: argparse.Namespace | None,
    configs: Iterable[Any],
    cfg: dict[str, Any],
    flag_of: dict[str, str],
    where: Callable[[str], str] | None = None,
) -> None:
    """A CPU swap space given (`--swap-space`, `--cpu-blocks`, or the run file's) with preemption
    `recompute` would do nothing: a victim's blocks are freed, never swapped. vLLM 0.33.0, whose engine
    preempts by recompute only, has no such flag (neither vllm/engine/arg_utils.py nor
    vllm/config/cache.py names swap_space), so `vllm serve --swap-space 4` stops at argparse's
    "unrecognized arguments"; kvsim refuses it too, saying what would use it. `configs`: the points a
    command runs (`kvsim run`'s one; `kvsim plan`'s candidates; `kvsim sweep`'s points, its `--base` fields
    named by `where`), refused only where none of them swaps."""
    from kvsim.model.units import fmt_bytes

    if any(c.preemption != "recompute" for c in configs):
        return
    for name in ("swap_space_bytes", "cpu_blocks"):
        value = cfg.get(name)
        if not value:  # not given, or 0 (no CPU pool, which is what recompute has)
            continue
        said = where(name) if where is not None else _given_at(args, flag_of, name)  # type: ignore[arg-type]
        how = "preemption=swap" if where is not None else "--preemption-mode swap"
        what = (
            f"a CPU swap space of {fmt_bytes(value)}"
            if name == "swap_space_bytes"
            else f"a CPU pool of {value} blocks"
        )
        raise FlagError(
            f"{said}: {what} would do nothing: preemption is 'recompute', which frees a "
            "preempted request's blocks and never swaps (vLLM 0.33.0 and 0.34.0 preempt only so and have no "
            f"--swap-space: vllm serve refuses the flag); add {how} or auto (vLLM v0's) "
            "to swap to it, or drop it"
        )


def idle_knobs(config: Any, prefill: Any = None, spell: Spelling = FLAGS) -> dict[str, str | None]:
    """The knobs in `config` (with `prefill`, a P/D run's prefill pool) that only some runs read (most only
    when set away from their defaults; vLLM 0.34.0's six, the CPU tier's rules and the sizing knobs at any
    value, the callers keeping the user's own), each None where this one reads it, else why it does nothing (the refusal's text
    after the knob's name). The router's knobs are read by the routers DESIGN.md §Fleet names (the
    tie-break and the refresh by those that read replica state, the seed by `random` and by a tie drawn at
    random, the load cap by `prefix-affinity`, the weights by `weighted`); the CPU tier's by a run with a
    tier (`--kv-offloading-size` or `--kv-offloading-chunks`), vLLM 0.34.0's threshold count by one whose
    store threshold is 2 or more and its junction from the tier by a hybrid model with a full-attention
    group beside a window or state group; vLLM 0.34.0's CUDA-graph grid by a run whose graphs kvsim
    estimates and ShardQ by one that keeps its buffers (`dsa.shardq_bytes`); the swap time by a run that swaps; a
    disaggregated fleet's by a run with prefill replicas (it ran as a fleet of one); the placement by a
    contiguous policy; the router by a run with more than one replica in a pool (in front of one, every
    request went to it). (`SimConfig` takes them all, as the base of sweeps and searches that vary the knob
    that reads them: `kvsim plan` and `kvsim sweep` refuse one only where it does nothing at every point,
    `refuse_idle_at_every_point`. A model's knobs: `idle_model_knobs`; without a model:
    `_refuse_modelless_knobs`.)"""
    from kvsim.engine.cluster_pd import PD_KNOBS
    from kvsim.reference.cluster import STATEFUL_ROUTERS

    out: dict[str, str | None] = {}

    def given(name: str) -> bool:
        return bool(getattr(config, name) != KNOBS[name].default)

    for name in (n for n in PD_KNOBS if n != "prefill_replicas" and given(n)):
        out[name] = (
            None
            if config.prefill_replicas
            else "a disaggregated fleet's knob, but this run has no prefill pool: give "
            f"{spell.setting('prefill_replicas', 'N')} or {spell.drop}"
        )
    if given("placement"):
        contiguous = config.is_contiguous or (prefill is not None and prefill.is_contiguous)
        out["placement"] = (
            None
            if contiguous
            else f"{spell.value('placement', config.placement)} does nothing here: placement is how a "
            f"contiguous policy ({', '.join(CONTIGUOUS_POLICIES)}) lays out its regions, and this run's policy "
            f"{config.policy!r} is paged; give one of them with {spell.knob('policy')} or {spell.drop}"
        )
    router = config.router
    if given("router"):
        out["router"] = (
            None
            if config.replicas > 1 or config.prefill_replicas > 1
            else f"{spell.value('router', router)} does nothing here: a router picks among replicas, and this "
            f"run has one{' in each pool' if config.prefill_replicas else ''} (every request goes to it); "
            f"give {spell.setting('replicas', 'N')} or {spell.drop}"
        )
    stateful = router in STATEFUL_ROUTERS
    reads = {
        "router_refresh_s": (stateful, f"routers that read replica state ({', '.join(STATEFUL_ROUTERS)})"),
        "router_tie_break": (stateful, f"routers that read replica state ({', '.join(STATEFUL_ROUTERS)})"),
        "router_seed": (
            router == "random" or (stateful and config.router_tie_break == "random"),
            "the random router and ties drawn at random",
        ),
        "prefix_load_cap": (router == "prefix-affinity", "router prefix-affinity"),
        "router_weights": (router == "weighted", "router weighted"),
    }
    for name, (read, who) in reads.items():
        if given(name):
            out[name] = (
                None
                if read
                else f"read only by {who}, and this run's router is {router!r}: give a router that reads it "
                f"or {spell.drop}"
            )
    tier = config.kv_offloading_chunks > 0 or (prefill is not None and prefill.kv_offloading_chunks > 0)
    no_tier = (
        f"a CPU tier's knob, but this run has no CPU tier: give {spell.knob('kv_offloading_size')} (or "
        f"{spell.knob('kv_offloading_chunks')}) or {spell.drop}"
    )
    tier_knobs = (
        "kv_offloading_eviction_policy",
        "kv_offloading_prompt_only",
        "kv_offloading_blocks_per_chunk",
        "kv_offloading_store_threshold",
        "kv_offloading_latency_ps",
    )
    for name in tier_knobs:
        if given(name):
            out[name] = None if tier else no_tier
    # vLLM 0.34.0's two rules (DESIGN.md §CPU tier): the threshold's count reads a threshold of 2 or more,
    # the tier's junction a hybrid model's full-attention group beside a window or state group. (Either value
    # of these and of the sizing knobs below, the defaults' too: the callers keep the user's knobs alone.)
    thresholds = [c.kv_offloading_store_threshold for c in (config, prefill) if c is not None]
    out["kv_offloading_store_threshold_count"] = (
        no_tier
        if not tier
        else None
        if max(thresholds) >= 2
        else f"{spell.value('kv_offloading_store_threshold_count', config.kv_offloading_store_threshold_count)} "
        "does nothing here: it says what counts toward the CPU tier's store threshold, and this run has "
        f"none (under 2 every offer stores): give {spell.setting('kv_offloading_store_threshold', 'N')} "
        f"of 2 or more or {spell.drop}"
    )
    layout = config.pool.layout
    kinds = set() if layout is None else {g.kind for g in layout.groups}
    out["kv_offloading_hit_junction"] = (
        no_tier
        if not tier
        else None
        if "full" in kinds and kinds - {"full"}
        else f"{spell.value('kv_offloading_hit_junction', config.kv_offloading_hit_junction)} does nothing "
        "here: it marks where a sliding-window, chunked-local or Mamba group cut a CPU-tier hit below the "
        "full-attention groups', "
        f"and this run's pool has {'groups of ' + ', '.join(sorted(kinds)) + ' only' if kinds else 'one full-attention group'}: "
        f"give a hybrid model with both or {spell.drop}"
    )
    # vLLM 0.34.0's sizing knobs (DESIGN.md §Presets): measured sizing reads a pool sized from a GPU that
    # vLLM keeps it on for, the default block size a run whose block size is not given.
    # (either value is idle where vLLM keeps the extensible cache off whatever is asked: a pool given in bytes
    # or blocks, or none sized from a GPU; "profiled" given acts wherever "measured" could)
    off = None
    if given("kv_cache_sizing"):
        from kvsim.model.gpus import is_rocm
        from kvsim.model.gpus import resolve as resolve_gpu
        from kvsim.model.measured import measured_off

        off = (
            "this run sizes no pool from a GPU (give a model and a GPU)"
            if config.gpu is None or config.model is None
            else measured_off(
                kv_cache_bytes=config.kv_cache_bytes is not None,
                num_blocks=config._given.get("num_blocks") is not None,
                rocm=is_rocm(resolve_gpu(config.gpu).arch),
                disaggregated=config.prefill_replicas > 0,
            )
        )
    if off is not None:
        out["kv_cache_sizing"] = (
            f"{spell.value('kv_cache_sizing', config.kv_cache_sizing)} does nothing here: vLLM 0.34.0 sizes "
            f"the pool from measured memory only where it keeps its extensible KV cache on, and {off}; "
            f"{spell.drop}"
        )
    if config._given.get("block_size") is not None:
        out["default_block_size"] = (
            f"{spell.value('default_block_size', config.default_block_size)} does nothing here: it is the "
            f"block size vLLM offers when none is given, and this run gives "
            f"{spell.value('block_size', config._given['block_size'])}; {spell.drop}"
        )
    # vLLM 0.34.0's CUDA-graph sizes and ShardQ (DESIGN.md §Defaults and sizing): the grid is read where kvsim
    # estimates the graphs of a pool sized from a GPU, ShardQ where DeepSeek-V3.2's or GLM-5's backend takes it
    # (either value, the defaults' too, as the tier's rules above).
    off = (
        "this run sizes no pool from a GPU (give a model and a GPU)"
        if config.gpu is None or config.model is None
        else f"{spell.knob('enforce_eager')} captures no graphs"
        if config.enforce_eager
        else f"{spell.knob('cudagraph_memory_bytes')} gives the graphs' memory"
        if config.cudagraph_memory_bytes is not None
        else f"{spell.knob('activation_reserve_bytes')} gives the non-KV memory whole"
        if config.activation_reserve_bytes is not None
        else f"{spell.knob('kv_cache_bytes')} gives the KV cache memory"
        if config.kv_cache_bytes is not None
        else f"{spell.knob('num_blocks')} gives the pool"
        if config._given.get("num_blocks") is not None
        else None
    )
    out["cudagraph_capture_grid"] = (
        None
        if off is None
        else f"{spell.value('cudagraph_capture_grid', config.cudagraph_capture_grid)} does nothing here: it "
        f"picks the CUDA graphs kvsim's estimate counts, and {off}; {spell.drop}"
    )
    out["sparse_mla_shard_q"] = (
        None
        if _shardq_taken(config)
        else f"{spell.value('sparse_mla_shard_q', config.sparse_mla_shard_q)} does nothing here: vLLM 0.34.0 "
        "keeps ShardQ's buffers only for DeepSeek-V3.2 and GLM-5 under tensor parallelism on a GPU whose sparse "
        f"MLA backend takes it (DESIGN.md §Defaults and sizing), and this run has none; {spell.drop}"
    )
    if config._given.get("kv_offloading_ps_per_block") is not None:
        out["kv_offloading_ps_per_block"] = None if tier else no_tier
    if config.allow_long_max_model_len:
        mml = config._given.get("max_model_len")
        why: str | None
        if config.model is None:
            why = "it lets a max_model_len longer than a model's context through, and this run names no model"
        else:
            from kvsim.model.models import resolve

            m = resolve(config.release_model)
            longer = mml is not None and mml > m.longest_context
            why = (
                None
                if longer
                else (
                    f"it lets a max_model_len longer than model {m.name}'s context of {m.longest_context:,} "
                    f"through, and {'none is given' if mml is None else f'{mml:,} is not longer'}"
                )
            )
        out["allow_long_max_model_len"] = (
            None
            if why is None
            else f"{spell.value('allow_long_max_model_len', True)} does nothing here: {why}; {spell.drop}"
        )
    # batch_rule: how unset batch limits are picked, its verdict even at its default (the callers pass the
    # user's knobs as `given`, so an explicit `--batch-rule serve-0.28` is refused too, a preset's is not)
    rule = config.batch_rule
    limits = [n for n in ("max_num_seqs", "max_num_batched_tokens") if config._given.get(n) is None]
    out["batch_rule"] = (
        f"{spell.value('batch_rule', rule)} does nothing here: it picks the batch limits left unset, and "
        f"both are given ({spell.knob('max_num_seqs')}, {spell.knob('max_num_batched_tokens')}); {spell.drop}"
        if not limits
        else None
        if config.gpu is not None or rule == "v0"
        else f"{spell.value('batch_rule', rule)} does nothing here: it is how vllm serve picks unset batch "
        "limits by the GPU's memory, and this run names no GPU (unset, they are 8192 tokens and 256 "
        f"sequences without one; rule 'v0' reads no GPU): give {spell.knob('gpu')}, "
        f"{spell.setting('batch_rule', 'v0')}, or {spell.drop}"
    )
    if config._given.get("swap_ps_per_block") is not None:
        out["swap_ps_per_block"] = (
            None
            if config.preemption != "recompute"
            else "the time a swap takes, but preemption is 'recompute', which never swaps: add "
            f"{spell.setting('preemption', 'swap')} or auto, or {spell.drop}"
        )
    return out


def measured_flag_error(exc: MeasuredSizingError, flag_of: dict[str, str]) -> FlagError:
    """`kvsim run`'s words for a `MeasuredSizingError`: its knobs as flags (`--kv-cache-sizing profiled`,
    not SimConfig's `kv_cache_sizing 'profiled'`), on the flag given (the sizing's, else the other knob's).
    Only a "measured" given raises it (an unset sizing settles to "profiled" where measured cannot run,
    `measured.unset_sizing`), so without the flag the run file's [config] table gave it."""
    source = "" if "kv_cache_sizing" in flag_of else " (the run file's)"
    text = measured_refusal(exc.which, FLAGS, source)
    given = next((flag_of[k] for k in ("kv_cache_sizing", exc.which) if k in flag_of), None)
    return FlagError(f"argument {given}: {text}" if given else text)


def _shardq_taken(config: Any) -> bool:
    """Whether this run's model, GPU and KV dtype take vLLM 0.34.0's ShardQ buffers (`dsa.shardq_bytes`)."""
    if config.model is None or config.gpu is None:
        return False
    from kvsim.model import dsa
    from kvsim.model.gpus import resolve as resolve_gpu
    from kvsim.model.models import resolve as resolve_model

    m = resolve_model(config.release_model)
    if not (m.is_dsa and m.is_mla):
        return False
    arch = resolve_gpu(config.gpu).arch
    kv = dsa.resolve(m, arch, config.kv_cache_dtype, config.block_size)[0]
    tp = config.tensor_parallel_size
    return dsa.shardq_bytes(m, arch, kv, tp, config.max_num_batched_tokens, config.max_num_seqs) > 0


def _refuse_idle_knobs(args: argparse.Namespace, config: Any, prefill: Any = None) -> None:
    """`kvsim run`'s refusal of a knob the user gave (`args.given_knobs`, not a preset's own) that this run
    does not read (`idle_knobs`; it was accepted and dropped, and `config:` showed it as if it took effect):
    refused by the flag as typed, or the run file (`given_where`, as `kvsim plan` names it)."""
    refuse_idle_at_every_point(
        [(config, prefill)], given_where(args), spelling(args), model=False, given=args.given_knobs
    )


def refuse_idle_at_every_point(
    points: Iterable[tuple[Any, Any]],
    where: Callable[[str], str],
    spell: Spelling = FLAGS,
    *,
    model: bool = True,
    given: set[str] | None = None,
) -> None:
    """The rule of `kvsim run`, `kvsim plan` and `kvsim sweep`: a knob that does nothing at every point
    that sets it is refused by name (`where(name)`, then why, one line; the first such knob). `points` are
    the (config, prefill config or None) pairs a command runs: one for `kvsim run`; a search's candidates
    or the replica counts it tries; a sweep's grid. So a sweep over policies reads `placement` at its
    contiguous points, a search over replica counts reads `router`, and neither is refused there.
    `idle_knobs`' knobs, and `idle_model_knobs`' with `model`; only the knobs in `given` when it is not
    None (the user's, not a preset's)."""
    why: dict[str, str] = {}
    acts: set[str] = set()
    for config, prefill in points:
        verdicts = {
            **(idle_model_knobs(config, spell) if model else {}),
            **idle_knobs(config, prefill, spell),
        }
        for name, idle in verdicts.items():
            if given is not None and name not in given:
                continue
            if given is None and getattr(config, name) == KNOBS[name].default:
                continue  # (a verdict given at the knob's default: only the user's may refuse it)
            if idle is None:
                acts.add(name)
            else:
                why.setdefault(name, idle)
    for name, text in why.items():
        if name not in acts:
            if name in spell.fields:  # (a run file's field: its verdict again, spelled as one)
                text = _verdict(points, name, spell.of(name), model) or text
            raise FlagError(f"{where(name)}: {text}")


def _verdict(points: Iterable[tuple[Any, Any]], name: str, spell: Spelling, model: bool) -> str | None:
    """Knob `name`'s first refusal at `points` (`refuse_idle_at_every_point`) in `spell`."""
    for config, prefill in points:
        verdicts = {
            **(idle_model_knobs(config, spell) if model else {}),
            **idle_knobs(config, prefill, spell),
        }
        if verdicts.get(name) is not None:
            return verdicts[name]
    return None
