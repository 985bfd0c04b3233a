"""`SimConfig`'s cross-knob checks (DESIGN.md §Defaults and sizing, §Engine): the combinations of knobs
kvsim refuses by name, data and expert parallelism where kvsim models nothing of them, what a fleet of DP
groups or a disaggregated fleet cannot be, vLLM v1's hybrid KV-cache manager's only values
(`HYBRID_ONLY`) and `async_scheduling`'s refusals.

`SimConfig` (`kvsim.model.config`, which re-exports this module's public names) takes these methods from
`ConfigChecks`, which holds no state of its own: `SimConfig.__post_init__` calls them in its order, and
`SimConfig._size` calls `_check_hybrid` and `_check_async` once the pool is sized.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvsim.errors import InvalidArgumentError, MeasuredSizingError

# The knobs vLLM's hybrid KV-cache manager (v1) fixes for a model whose KV-cache groups are not one
# full-attention group, and the only value each takes then (`SimConfig._check_hybrid`; the lab's page
# disables the other values with this table, `kvsim.lab.query.requires`).
HYBRID_ONLY: dict[str, str] = {
    "policy": "vllm",
    "preemption": "recompute",
    "sampling": "independent",
    "append_check": "exact",
    "watermark_rule": "while-running",
}


class FieldSpelling:
    """A refusal's knobs as `SimConfig` names them (`kv_cache_sizing 'profiled'`); `kvsim run` writes
    them as its flags (`kvsim.cli.refusals.Spelling`: `--kv-cache-sizing profiled`)."""

    def knob(self, name: str) -> str:
        return name

    def setting(self, name: str, value: str) -> str:
        return f"{name} {value!r}"


def measured_refusal(which: str, spell: Any = None, source: str = "") -> str:
    """Why `kv_cache_sizing` "measured" cannot run beside knob `which` (`MeasuredSizingError.which`), its
    knobs written by `spell` (`FieldSpelling` by default: SimConfig's names); `source` follows the sizing's
    setting (`kvsim run`: the preset that chose it)."""
    spell = spell or FieldSpelling()
    measured = spell.setting("kv_cache_sizing", "measured") + source
    profiled = spell.setting("kv_cache_sizing", "profiled")
    if which == "pool_null_block":
        return (
            f"{measured} is vLLM 0.34.0's (v1's extensible KV cache): {spell.setting('pool_null_block', 'extra')} "
            f"(vLLM v0's count) does not apply; use {profiled}"
        )
    assert which == "activation_reserve_bytes", which
    return (
        f"{measured} keeps the transient activation peak free apart from the memory that stays in use "
        f"(weights, non-torch, CUDA graphs), which {spell.knob('activation_reserve_bytes')} lumps into one "
        f"total: give {spell.knob('cudagraph_memory_bytes')} for the graphs instead, or use {profiled}"
    )


# A disaggregated fleet of DP ranks: refused (`SimConfig`, `kvsim.engine.cluster`'s prefill_config).
DP_DISAGGREGATED = (
    "a disaggregated fleet of data-parallel ranks is not modelled (a mixture-of-experts model's DP ranks step "
    "together, DESIGN.md §Data-parallel groups)"
)

PD_TIER = (
    "a CPU tier is not modelled with a prefill pool (the connector and the tier would share the held queue)"
)


def tier_knob(config: Any) -> str:
    """The knob that gave a config its CPU tier, as the refusals name it: `kv_offloading_size` (vLLM's GiB,
    `kvsim run`'s --kv-offloading-size) where given, else `kv_offloading_chunks` (audit54 #14: a refusal
    named both, the internal one to a user who gave the flag)."""
    return "kv_offloading_size" if config.kv_offloading_size is not None else "kv_offloading_chunks"


def check_whole_dp_groups(n: int, dp: int) -> None:
    """Refuses `n` > 1 replicas that are not whole DP groups of `dp` ranks (`SimConfig` of one config,
    `kvsim.engine.cluster.dp_group` of a list)."""
    if n > 1 and dp > 1 and n % dp:
        raise InvalidArgumentError(
            f"replicas {n} with data_parallel_size {dp}: a mixture-of-experts model's DP ranks step together "
            f"in groups of {dp} (DESIGN.md §Data-parallel groups), so replicas must be 1 (one rank's engine) "
            f"or a multiple of {dp}"
        )


class ConfigChecks:
    """The cross-knob checks' part of `SimConfig` (a base class of it, never built alone)."""

    if TYPE_CHECKING:
        # SimConfig's fields and properties these methods read (SimConfig defines them).
        model: Any
        policy: str
        preemption: str
        sampling: str
        append_check: str
        max_num_seqs: int
        max_num_batched_tokens: int
        swap_space_bytes: int | None
        cpu_blocks: int
        enable_expert_parallel: bool
        data_parallel_size: int
        replicas: int
        prefill_replicas: int
        kv_offloading_size: float | None
        kv_offloading_chunks: int
        async_scheduling: bool | None
        chunked_prefill: bool
        prefix_cache_retention_interval: int | None
        kv_cache_sizing: str
        gpu: Any
        kv_cache_bytes: int | None
        pool_null_block: str
        activation_reserve_bytes: int | None

        @property
        def pool(self) -> Any: ...

        @property
        def measured_sizing_on(self) -> bool: ...

        @property
        def release_model(self) -> Any: ...

    def _check_combinations(self) -> None:
        if self.policy == "static" and self._given.get("max_model_len") is None:  # type: ignore[attr-defined]
            # (given, not the model's context it defaults to: a region of 40,960 tokens a request for
            # Qwen3-8B would refuse every request the pool cannot hold whole, for a default nobody chose)
            raise InvalidArgumentError(
                "policy 'static' reserves max_model_len per request: set max_model_len (--max-model-len)"
            )
        if self.kv_cache_sizing == "measured":
            # (vLLM 0.34.0's measured sizing, `kvsim.model.measured`: v1's, and it keeps the transient peak
            # apart from what stays in use, which one measured total does not say)
            which = (
                "pool_null_block"
                if self.pool_null_block == "extra"
                else "activation_reserve_bytes"
                if self.activation_reserve_bytes is not None
                else None
            )
            if which is not None:
                raise MeasuredSizingError(measured_refusal(which), which)
        if self.append_check == "one-free-block" and self.policy != "vllm":
            raise InvalidArgumentError(
                f"append_check 'one-free-block' applies to policy 'vllm', not {self.policy!r}"
            )
        if self.sampling == "fork-cow" and self.policy != "vllm":
            raise InvalidArgumentError(f"sampling 'fork-cow' applies to policy 'vllm', not {self.policy!r}")
        if self.sampling == "fork-cow" and self.max_num_batched_tokens < self.max_num_seqs:
            # A sample group decodes whole (a token per sample) and can hold max_num_seqs samples.
            raise InvalidArgumentError(
                f"sampling 'fork-cow' needs max_num_batched_tokens >= max_num_seqs (vLLM v0's rule), got "
                f"max_num_batched_tokens {self.max_num_batched_tokens} < max_num_seqs {self.max_num_seqs}"
            )
        if self.preemption == "auto" and self.policy != "vllm":
            raise InvalidArgumentError(f"preemption 'auto' applies to policy 'vllm', not {self.policy!r}")
        if self.swap_space_bytes is not None and self.cpu_blocks:
            raise InvalidArgumentError(
                f"swap_space_bytes {self.swap_space_bytes} and cpu_blocks {self.cpu_blocks} both size the CPU "
                "pool: give one of them"
            )

    def _check_parallelism(self) -> None:
        """Refuses data and expert parallelism where kvsim models nothing of them (DESIGN.md §Defaults and
        sizing): a dense model's DP rank is an engine of its own (kvsim simulates one), so
        `data_parallel_size` is read only for a mixture-of-experts model, whose routed experts vLLM spreads
        over every rank's GPUs (each expert split over tp x dp of them, or whole ones under
        `enable_expert_parallel`), and `enable_expert_parallel` only for a model with experts."""
        from kvsim.model.models import resolve

        experts = 0
        name = None
        if self.model is not None:
            m = resolve(self.release_model)
            experts, name = m.num_experts, m.name
        if self.enable_expert_parallel and not experts:
            whose = f"model {name} is dense (no experts)" if name is not None else "no model is given"
            raise InvalidArgumentError(
                f"enable_expert_parallel: {whose}; expert parallelism spreads a mixture-of-experts model's "
                "experts over GPUs and does nothing here"
            )
        dp = self.data_parallel_size
        if dp > 1 and not experts:
            whose = "no model is given" if name is None else f"model {name} is dense"
            raise InvalidArgumentError(
                f"data_parallel_size {dp}: {whose}, so each DP rank is an independent engine kvsim would "
                f"simulate as one; use replicas {dp} (--replicas {dp}) for a fleet of them behind a router "
                "(a mixture-of-experts model's DP ranks share its experts, which kvsim models)"
            )

    def _check_dp_groups(self) -> None:
        """Refuses what a fleet of DP groups (D > 1 ranks a group, DESIGN.md §Data-parallel groups) cannot be."""
        dp, n = self.data_parallel_size, self.replicas
        if dp <= 1:
            return
        if self.prefill_replicas:
            # (whatever the decode replicas: a prefill pool of DP ranks would step apart, which vLLM's don't)
            raise InvalidArgumentError(
                f"prefill_replicas {self.prefill_replicas} with data_parallel_size {dp}: {DP_DISAGGREGATED}: "
                f"drop prefill_replicas (--prefill-replicas) for an aggregated fleet of DP groups, or set "
                "data_parallel_size 1 (-dp 1) for a disaggregated fleet of one-rank replicas"
            )
        if n <= 1:
            return
        check_whole_dp_groups(n, dp)
        if self.kv_offloading_chunks:
            tier = tier_knob(self)
            raise InvalidArgumentError(
                f"{tier} with data_parallel_size {dp} and replicas {n}: a CPU tier on the ranks of a DP group "
                f"is not modelled (its stores lengthen and stall a rank's steps): drop {tier} "
                f"(--{tier.replace('_', '-')}), set replicas 1 (--replicas 1: one rank's engine, which takes a "
                "tier), or data_parallel_size 1 (-dp 1) for a fleet of one-rank replicas with tiers"
            )

    def _check_pd_tier(self) -> None:
        """Refuses a CPU tier on a disaggregated fleet's decode replicas (DESIGN.md §Prefill/decode
        disaggregation: not modelled; a prefill pool's own config with a tier, `prefill_config`, is refused
        by `simulate_cluster`, which reads it as one)."""
        if self.prefill_replicas and self.kv_offloading_chunks:
            tier = tier_knob(self)
            raise InvalidArgumentError(
                f"{tier} with prefill_replicas {self.prefill_replicas}: {PD_TIER}: drop {tier} "
                f"(--{tier.replace('_', '-')}) for a disaggregated fleet, or prefill_replicas "
                "(--prefill-replicas) for an aggregated fleet with a tier on each replica"
            )

    def _check_hybrid(self) -> None:
        """A model whose KV-cache groups are not one full-attention group runs vLLM v1's hybrid manager
        (DESIGN.md §Hybrid attention): only v1's rules apply to it."""
        layout = self.pool.layout
        if layout is None or layout.single_full:
            return
        name = getattr(self.model, "name", self.model)
        what = f"model {name} has {layout.describe()}: vLLM's hybrid KV-cache manager (v1) serves it, so"
        for knob, v1 in HYBRID_ONLY.items():
            value = getattr(self, knob)
            if value != v1:
                raise InvalidArgumentError(f"{what} {knob} {value!r} does not apply (only {v1!r})")
        if layout.mamba_align and not self.chunked_prefill:
            raise InvalidArgumentError(
                f"{what} its Mamba states with prefix caching (vLLM's mamba_cache_mode 'align') need chunked "
                "prefill: chunked_prefill False is refused (vLLM asserts it), or run with "
                "enable_prefix_caching=False"
            )
        retention = self.prefix_cache_retention_interval
        if retention and retention % layout.scheduler_block_size:
            raise InvalidArgumentError(
                f"prefix_cache_retention_interval {retention} must be a multiple of the scheduler's block size "
                f"{layout.scheduler_block_size} (vLLM's rule)"
            )

    def _check_async(self) -> None:
        """Refuses `async_scheduling` where kvsim does not model it (DESIGN.md §Engine, "Asynchronous
        scheduling"): vLLM v0's rules (which it never had)."""
        if not self.async_scheduling:
            return
        what = "async_scheduling True"
        for knob, v1 in (
            ("policy", "vllm"),
            ("preemption", "recompute"),
            ("sampling", "independent"),
            ("append_check", "exact"),
        ):
            value = getattr(self, knob)
            if value != v1:
                raise InvalidArgumentError(
                    f"{what} takes vLLM v1's rules: {knob} {value!r} does not apply (only {v1!r})"
                )
