//! The engine's knobs as the binding reads them: one table (`KNOBS`) and one parser (`engine_config`),
//! shared by `run_engine` and `Stream` (their keyword arguments) and by `run_cluster` (one dict per
//! replica). `kvsim.engine.rust_engine.config_kwargs` writes them from a validated `SimConfig`.

use crate::args::{Origin, block_size_arg, bool_arg, int_arg_named, num_blocks_arg, repr, u64_arg};
use crate::errors::{InternalError, IntoPyResult, invalid};
use kvsim_core::FreeOrder;
use kvsim_core::cpu_tier::Eviction;
use kvsim_core::engine::{
    AttnClass, AttnKind, EngineConfig, GroupLink, Policy, Preemption, Roofline, TierConfig,
    TimeModel,
};
use kvsim_core::kv_groups::{GroupKind, GroupSpec, Groups};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::cell::Cell;

/// The engine's keyword arguments, in the order their values are checked; `skip_over_budget`,
/// `watermark_while_running`, `one_free_block` and `async_scheduling` default to false, `max_model_len` may be None,
/// `roofline` (the roofline's coefficients, a dict) is needed by `time_model` "roofline" only,
/// `kv_groups` (a hybrid model's groups), `scheduler_block_size`, `retention_interval` and `cpu_tier` (the
/// CPU tier: (chunks, eviction, prompt_only, blocks_per_chunk, store_threshold, ps_per_block, latency_ps,
/// group_link: a hybrid model's (ps_per_block, bytes_per_block) per group, else empty, count_per_request,
/// hit_junction))
/// are optional;
/// every other one is required.
pub(crate) const KNOBS: [&str; 29] = [
    "num_blocks",
    "block_size",
    "policy",
    "enable_prefix_caching",
    "free_order",
    "max_num_seqs",
    "max_num_batched_tokens",
    "chunked_prefill",
    "full_prompt_gate",
    "skip_over_budget",
    "watermark_blocks",
    "watermark_while_running",
    "one_free_block",
    "async_scheduling",
    "max_model_len",
    "time_model",
    "iteration_time_ps",
    "c0_ps",
    "c_tok_ps",
    "c_ctx_ps",
    "roofline",
    "preemption",
    "cpu_blocks",
    "swap_ps_per_block",
    "buddy",
    "kv_groups",
    "scheduler_block_size",
    "retention_interval",
    "cpu_tier",
];

/// Reads the knobs of one dict, each by its name in `KNOBS` (else an internal error: the table and the
/// reads below must agree, and `engine_config` checks that every knob was read).
struct Knobs<'a, 'py> {
    d: &'a Bound<'py, PyDict>,
    origin: Origin,
    read: Cell<usize>,
}

impl<'py> Knobs<'_, 'py> {
    fn get(&self, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        if !KNOBS.contains(&key) {
            return Err(InternalError::new_err(format!(
                "knob '{key}' is not in KNOBS"
            )));
        }
        self.read.set(self.read.get() + 1);
        self.d.get_item(key)
    }

    fn need(&self, key: &str) -> PyResult<Bound<'py, PyAny>> {
        self.get(key)?.ok_or_else(|| self.origin.missing(key))
    }

    fn int(&self, key: &str) -> PyResult<i128> {
        Ok(int_arg_named(&self.need(key)?, || self.origin.name(key))?.value)
    }

    fn opt_int(&self, key: &str) -> PyResult<Option<i128>> {
        let v = self.need(key)?;
        if v.is_none() {
            return Ok(None);
        }
        Ok(Some(int_arg_named(&v, || self.origin.name(key))?.value))
    }

    /// A bool; `default` is taken when the key is absent (None: required).
    fn flag(&self, key: &str, default: Option<bool>) -> PyResult<bool> {
        match (self.get(key)?, default) {
            (None, Some(v)) => Ok(v),
            (None, None) => Err(self.origin.missing(key)),
            (Some(v), _) => bool_arg(&v, &self.origin.name(key)),
        }
    }

    fn text(&self, key: &str) -> PyResult<String> {
        let v = self.need(key)?;
        v.extract().map_err(|_| {
            invalid(format!(
                "{} {} must be a str",
                self.origin.name(key),
                repr(&v)
            ))
        })
    }
}

/// A hybrid model's groups (`kv_groups`: (kind, window, block_size, cap or -1, checkpoint_blocks)
/// tuples, with `scheduler_block_size` and `retention_interval`), checked into the core's types; None
/// without groups.
#[allow(clippy::type_complexity)]
fn kv_groups(k: &Knobs<'_, '_>) -> PyResult<Option<(Vec<GroupSpec>, u64, Option<u64>)>> {
    let groups = k.get("kv_groups")?.filter(|v| !v.is_none());
    let sched = k.get("scheduler_block_size")?.filter(|v| !v.is_none());
    let retention = k.get("retention_interval")?.filter(|v| !v.is_none());
    let Some(v) = groups else {
        return Ok(None);
    };
    let name = |key: &str| k.origin.name(key);
    let tuples: Vec<(i64, i64, i64, i64, i64)> = v.extract().map_err(|_| {
        invalid(format!(
            "{} {} must be a list of (kind, window, block_size, cap, checkpoint_blocks) integer tuples",
            name("kv_groups"),
            repr(&v)
        ))
    })?;
    let Some(sched) = sched else {
        return Err(k.origin.missing("scheduler_block_size"));
    };
    let sched = u64_arg(
        int_arg_named(&sched, || name("scheduler_block_size"))?.value,
        "scheduler_block_size",
    )?;
    let retention = match retention {
        Some(r) => Some(u64_arg(
            int_arg_named(&r, || name("retention_interval"))?.value,
            "retention_interval",
        )?),
        None => None,
    };
    let specs = tuples
        .into_iter()
        .map(|(kind, window, bs, cap, checkpoint_blocks)| {
            Ok(GroupSpec {
                kind: GroupKind::from_code(kind).py()?,
                window: u64_arg(i128::from(window), "kv_groups window")?,
                block_size: u64_arg(i128::from(bs), "kv_groups block_size")?,
                cap: u64::try_from(cap).ok(),
                checkpoint_blocks: u64_arg(
                    i128::from(checkpoint_blocks),
                    "kv_groups checkpoint_blocks",
                )?,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(Some((specs, sched, retention)))
}

/// The roofline's coefficients (`kvsim.model.roofline.RooflineTimeModel.engine_kwargs`): a dict of
/// non-negative integers, `moe_mem_ps` a list of them and `attention` a list of (kind, window, kv_ps,
/// flop_ps, mixed_kv_ps, prefill_flop_ps, context_ps, prefill_kv_ps, context_gemm_ps, context_flop_ps,
/// context_weight_ps) tuples; checked into the core's `Roofline`.
fn roofline_arg(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Roofline> {
    let d = v
        .cast::<PyDict>()
        .map_err(|_| invalid(format!("{name} {} must be a dict", repr(v))))?;
    let field = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(key)?
            .ok_or_else(|| invalid(format!("{name} has no '{key}'")))
    };
    let int = |key: &str| -> PyResult<u64> {
        u64_arg(
            int_arg_named(&field(key)?, || format!("{name}['{key}']"))?.value,
            key,
        )
    };
    let table: Vec<i64> = field("moe_mem_ps")?
        .extract()
        .map_err(|_| invalid(format!("{name}['moe_mem_ps'] must be a list of integers")))?;
    let classes: Vec<AttnClassArg> = field("attention")?.extract().map_err(|_| {
        invalid(format!(
            "{name}['attention'] must be a list of (kind, window, kv_ps, flop_ps, mixed_kv_ps, \
             prefill_flop_ps, context_ps, prefill_kv_ps, context_gemm_ps, context_flop_ps, \
             context_weight_ps) integer tuples"
        ))
    })?;
    let r = Roofline {
        fixed_ps: int("fixed_ps")?,
        seq_ps: int("seq_ps")?,
        tok_ps: int("tok_ps")?,
        dense_mem_ps: int("dense_mem_ps")?,
        dense_mem_tok_ps: int("dense_mem_tok_ps")?,
        dense_flop_tok_ps: int("dense_flop_tok_ps")?,
        moe_mem_ps: table
            .into_iter()
            .map(|x| u64_arg(i128::from(x), "moe_mem_ps"))
            .collect::<PyResult<_>>()?,
        moe_flop_tok_ps: int("moe_flop_tok_ps")?,
        head_mem_ps: int("head_mem_ps")?,
        head_flop_seq_ps: int("head_flop_seq_ps")?,
        moe_senders: int("moe_senders")?,
        attention: classes
            .into_iter()
            .map(
                |(kind, window, kv, flop, mixed, prefill, context, pkv, gemm, cflop, weight)| {
                    let arg = |v: i64, what: &str| u64_arg(i128::from(v), what);
                    Ok(AttnClass {
                        kind: AttnKind::from_code(kind).py()?,
                        window: u64_arg(i128::from(window), "attention window")?,
                        kv_ps: u64_arg(i128::from(kv), "attention kv_ps")?,
                        flop_ps: u64_arg(i128::from(flop), "attention flop_ps")?,
                        mixed_kv_ps: u64_arg(i128::from(mixed), "attention mixed_kv_ps")?,
                        prefill_flop_ps: u64_arg(i128::from(prefill), "attention prefill_flop_ps")?,
                        context_ps: u64_arg(i128::from(context), "attention context_ps")?,
                        prefill_kv_ps: arg(pkv, "attention prefill_kv_ps")?,
                        context_gemm_ps: arg(gemm, "attention context_gemm_ps")?,
                        context_flop_ps: arg(cflop, "attention context_flop_ps")?,
                        context_weight_ps: arg(weight, "attention context_weight_ps")?,
                    })
                },
            )
            .collect::<PyResult<_>>()?,
    };
    r.validate().py()?;
    Ok(r)
}

/// An attention class as Python passes it (`roofline_arg`).
type AttnClassArg = (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64);

/// `cpu_tier` as Python passes it (`cpu_tier`'s fields, in order).
type CpuTierArg = (
    i128,
    String,
    bool,
    i128,
    i128,
    i128,
    i128,
    Vec<(i128, i128)>,
    bool,
    bool,
);

/// The engine's configuration from the knobs in `d` (`KNOBS`; keys in `also` are the caller's own and
/// skipped). An unknown or missing key, or a value of the wrong type, is an `InvalidArgumentError`
/// naming the key (and `configs[r]` for a replica), checked before any range; then the ranges, in
/// `KNOBS` order.
/// The CPU tier (`cpu_tier`: (chunks, eviction, prompt_only, blocks_per_chunk, store_threshold,
/// ps_per_block, latency_ps, group_link, count_per_request, hit_junction), `group_link` a hybrid model's
/// (ps_per_block, bytes_per_block) per group, else empty; the last two vLLM 0.34.0's rules, DESIGN.md §CPU
/// tier), checked into the core's type; None without one.
fn cpu_tier(k: &Knobs<'_, '_>) -> PyResult<Option<TierConfig>> {
    let Some(v) = k.get("cpu_tier")?.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let name = k.origin.name("cpu_tier");
    let (
        chunks,
        eviction,
        prompt_only,
        bpc,
        threshold,
        per_block,
        latency,
        group_link,
        per_request,
        hit_junction,
    ): CpuTierArg = v.extract().map_err(|_| {
        invalid(format!(
            "{name} {} must be (chunks, eviction, prompt_only, blocks_per_chunk, store_threshold, ps_per_block, latency_ps, group_link, count_per_request, hit_junction)",
            repr(&v)
        ))
    })?;
    let eviction = match eviction.as_str() {
        "lru" => Eviction::Lru,
        "arc" => Eviction::Arc,
        other => {
            return Err(invalid(format!(
                "{name} eviction '{other}' is not one of 'lru', 'arc'"
            )));
        }
    };
    Ok(Some(TierConfig {
        chunks: u64_arg(chunks, "cpu_tier chunks")?,
        eviction,
        prompt_only,
        blocks_per_chunk: u64_arg(bpc, "cpu_tier blocks_per_chunk")?,
        store_threshold: u64_arg(threshold, "cpu_tier store_threshold")?,
        store_count_per_request: per_request,
        hit_junction,
        ps_per_block: u64_arg(per_block, "cpu_tier ps_per_block")?,
        latency_ps: u64_arg(latency, "cpu_tier latency_ps")?,
        group_link: group_link
            .into_iter()
            .map(|(ps, bytes)| {
                Ok(GroupLink {
                    ps_per_block: u64_arg(ps, "cpu_tier group_link ps_per_block")?,
                    bytes_per_block: u64_arg(bytes, "cpu_tier group_link bytes_per_block")?,
                })
            })
            .collect::<PyResult<_>>()?,
    }))
}

pub(crate) fn engine_config(
    d: &Bound<'_, PyDict>,
    origin: Origin,
    also: &[&str],
) -> PyResult<EngineConfig> {
    origin.check_keys(d, &[&KNOBS, also])?;
    let k = Knobs {
        d,
        origin,
        read: Cell::new(0),
    };
    let num_blocks = k.int("num_blocks")?;
    let block_size = k.int("block_size")?;
    let policy = k.text("policy")?;
    let enable_prefix_caching = k.flag("enable_prefix_caching", None)?;
    let free_order = k.text("free_order")?;
    let max_num_seqs = k.int("max_num_seqs")?;
    let max_num_batched_tokens = k.int("max_num_batched_tokens")?;
    let chunked_prefill = k.flag("chunked_prefill", None)?;
    let full_prompt_gate = k.flag("full_prompt_gate", None)?;
    let skip_over_budget = k.flag("skip_over_budget", Some(false))?;
    let watermark_blocks = k.int("watermark_blocks")?;
    let watermark_while_running = k.flag("watermark_while_running", Some(false))?;
    let one_free_block = k.flag("one_free_block", Some(false))?;
    let async_scheduling = k.flag("async_scheduling", Some(false))?;
    let max_model_len = k.opt_int("max_model_len")?;
    let time_model = k.text("time_model")?;
    let iteration_time_ps = k.int("iteration_time_ps")?;
    let c0_ps = k.int("c0_ps")?;
    let c_tok_ps = k.int("c_tok_ps")?;
    let c_ctx_ps = k.int("c_ctx_ps")?;
    let roofline = k.get("roofline")?.filter(|v| !v.is_none());
    let preemption = k.text("preemption")?;
    let cpu_blocks = k.int("cpu_blocks")?;
    let swap_ps_per_block = k.int("swap_ps_per_block")?;
    let buddy = k.flag("buddy", None)?;
    let groups = kv_groups(&k)?;
    let tier = cpu_tier(&k)?;
    if k.read.get() != KNOBS.len() {
        return Err(InternalError::new_err(
            "engine_config reads a different set of knobs than KNOBS lists",
        ));
    }
    let checked = || -> PyResult<EngineConfig> {
        let time = match time_model.as_str() {
            "ticks" => TimeModel::Ticks {
                iteration_ps: u64_arg(iteration_time_ps, "iteration_time_ps")?,
            },
            "linear" => TimeModel::Linear {
                c0_ps: u64_arg(c0_ps, "c0_ps")?,
                c_tok_ps: u64_arg(c_tok_ps, "c_tok_ps")?,
                c_ctx_ps: u64_arg(c_ctx_ps, "c_ctx_ps")?,
            },
            "roofline" => {
                let Some(r) = &roofline else {
                    return Err(k.origin.missing("roofline"));
                };
                TimeModel::Roofline(Box::new(roofline_arg(r, &k.origin.name("roofline"))?))
            }
            other => {
                return Err(invalid(format!(
                    "time_model '{other}' is not one of 'ticks', 'linear', 'roofline'"
                )));
            }
        };
        Ok(EngineConfig {
            num_blocks: num_blocks_arg(num_blocks)?,
            block_size: block_size_arg(block_size)?,
            policy: Policy::parse(&policy).py()?,
            enable_prefix_caching,
            free_order: FreeOrder::parse(&free_order).py()?,
            max_num_seqs: u64_arg(max_num_seqs, "max_num_seqs")?,
            max_num_batched_tokens: u64_arg(max_num_batched_tokens, "max_num_batched_tokens")?,
            chunked_prefill,
            full_prompt_gate,
            skip_over_budget,
            watermark_blocks: u64_arg(watermark_blocks, "watermark_blocks")?,
            watermark_while_running,
            one_free_block,
            async_scheduling,
            max_model_len: max_model_len
                .map(|v| u64_arg(v, "max_model_len"))
                .transpose()?,
            time,
            preemption: Preemption::parse(&preemption).py()?,
            cpu_blocks: u64_arg(cpu_blocks, "cpu_blocks")?,
            swap_ps_per_block: u64_arg(swap_ps_per_block, "swap_ps_per_block")?,
            buddy,
            groups: groups
                .map(|(specs, sched, retention)| {
                    Groups::new(specs, sched, retention, enable_prefix_caching).py()
                })
                .transpose()?,
            tier,
        })
    };
    checked().map_err(|e| origin.wrap(d.py(), e))
}
