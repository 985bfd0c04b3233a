//! `run_cluster`: a fleet of replicas behind a router on one clock (`kvsim_core::cluster`), one call
//! across the boundary; the replicas' configs are read as `run_engine`'s knobs (`config::engine_config`).

use crate::args::{IntArg, Origin, bool_arg, int_arg, items, repr, u64_in};
use crate::columns::{Columns, counters_dict, output_dicts};
use crate::config::engine_config;
use crate::errors::{IntoPyResult, invalid};
use crate::guard::detached;
use kvsim_core::cluster::pd::{PdOutput, PdSpec};
use kvsim_core::cluster::{ClusterOutput, RouterSpec, TieBreak};
use numpy::IntoPyArray;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList};

/// The router's parameters as `run_cluster` takes them (None: the default).
fn router_spec(
    router: &Bound<'_, PyAny>,
    seed: Option<&Bound<'_, PyAny>>,
    refresh_ps: Option<&Bound<'_, PyAny>>,
    prefix_load_cap: Option<&Bound<'_, PyAny>>,
    weights: Option<&Bound<'_, PyAny>>,
    tie_break: Option<&Bound<'_, PyAny>>,
) -> PyResult<RouterSpec> {
    let router: String = router
        .extract()
        .map_err(|_| invalid(format!("router {} must be a str", repr(router))))?;
    let seed = seed.map_or(Ok(0), |v| u64_in(v, "router_seed", 0))?;
    let refresh = match refresh_ps {
        Some(v) => {
            let refresh = int_arg(v, "router_refresh_ps")?;
            i64::try_from(refresh.value).map_err(|_| {
                invalid(format!(
                    "router_refresh_ps {refresh} must be between 0 and {}",
                    i64::MAX
                ))
            })?
        }
        None => 0,
    };
    let cap = match prefix_load_cap {
        None => 1.5,
        Some(v) => number(v, || "prefix_load_cap".to_owned())?,
    };
    let weights = weights_arg(weights)?;
    let tie_break = match tie_break.filter(|v| !v.is_none()) {
        None => TieBreak::default(),
        Some(v) => {
            let name: String = v
                .extract()
                .map_err(|_| invalid(format!("router_tie_break {} must be a str", repr(v))))?;
            TieBreak::parse(&name).py()?
        }
    };
    Ok(
        RouterSpec::new(&router, seed, refresh, cap, weights.as_deref())
            .py()?
            .with_tie_break(tie_break),
    )
}

/// A float argument (an int or a float, never a bool).
fn number(v: &Bound<'_, PyAny>, name: impl Fn() -> String) -> PyResult<f64> {
    let bad = || invalid(format!("{} {} must be a number", name(), repr(v)));
    if v.is_instance_of::<PyBool>() {
        return Err(bad());
    }
    v.extract().map_err(|_| bad())
}

/// `router_weights`: a dict of scorer name to a number (or None: the defaults).
fn weights_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<(String, f64)>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    let d = obj.cast::<PyDict>().map_err(|_| {
        invalid(format!(
            "router_weights {} must be a dict or None",
            repr(obj)
        ))
    })?;
    let mut pairs = Vec::with_capacity(d.len());
    for (k, v) in d.iter() {
        let name: String = k
            .extract()
            .map_err(|_| invalid(format!("router_weights: key {} is not a string", repr(&k))))?;
        let value = number(&v, || format!("router_weights['{name}']"))?;
        pairs.push((name, value));
    }
    Ok(Some(pairs))
}

/// The prefill pool's arguments of `run_cluster` (None: the default, 0 / no config).
fn pd_args(
    prefill_replicas: Option<&Bound<'_, PyAny>>,
    pd_threshold_tokens: Option<&Bound<'_, PyAny>>,
    pd_link_latency_ps: Option<&Bound<'_, PyAny>>,
    pd_link_ps_per_block: Option<&Bound<'_, PyAny>>,
    prefill_config: Option<&Bound<'_, PyAny>>,
) -> PyResult<(PdSpec, Option<kvsim_core::engine::EngineConfig>)> {
    let prefill_cfg = match prefill_config.filter(|v| !v.is_none()) {
        None => None,
        Some(d) => {
            let d = d.cast::<PyDict>().map_err(|_| {
                invalid(format!("prefill_config {} must be a dict or None", repr(d)))
            })?;
            Some(engine_config(d, Origin::Call("run_cluster"), &[])?)
        }
    };
    let prefill = prefill_replicas.map_or(Ok(0), |v| u64_in(v, "prefill_replicas", 0))?;
    let prefill = usize::try_from(prefill)
        .ok()
        .filter(|&p| p <= 4096)
        .ok_or_else(|| {
            invalid(format!(
                "prefill_replicas {prefill} must be between 0 and 4096"
            ))
        })?;
    let pd = PdSpec {
        prefill_replicas: prefill,
        threshold_tokens: pd_threshold_tokens
            .map_or(Ok(0), |v| u64_in(v, "pd_threshold_tokens", 0))?,
        link_latency_ps: pd_link_latency_ps
            .map_or(Ok(0), |v| u64_in(v, "pd_link_latency_ps", 0))?,
        link_ps_per_block: pd_link_ps_per_block
            .map_or(Ok(0), |v| u64_in(v, "pd_link_ps_per_block", 0))?,
    };
    Ok((pd, prefill_cfg))
}

/// Runs the workload's per-sequence columns (`run_engine`'s, by keyword) on a cluster of replicas behind
/// a router, on one clock, with the GIL released (`kvsim_core::cluster::run_cluster`; DESIGN.md
/// §Cluster). Ctrl-C interrupts it with `KeyboardInterrupt`.
///
/// `configs`: one dict per replica of `run_engine`'s engine keyword arguments
/// (`kvsim.engine.rust_engine.config_kwargs`); `router`: one of `round-robin`, `random`, `least-loaded`,
/// `least-kv`, `prefix-affinity`, `weighted`, with `router_seed` (random), `router_refresh_ps` (0: exact
/// view), `prefix_load_cap`, `router_weights` (weighted: scorer name to weight; None: the defaults) and
/// `router_tie_break` (`random`, the default: a tie among the best replicas is drawn from the
/// `router_seed` stream; `lowest`: the lowest index; `round-robin`: the first at or after unit k mod N).
/// Time series and event logs are not recorded for clusters (`timeseries_every` must be 0 and
/// `record_events` false). `dp_group` D > 1: every D consecutive replicas are the ranks of a
/// data-parallel group, stepping together (DESIGN.md §Data-parallel groups; `kvsim_core::cluster::dp`).
///
/// With `prefill_replicas` P > 0 the fleet is disaggregated (DESIGN.md §Prefill/decode
/// disaggregation; `kvsim_core::cluster::pd::run_pd`): `configs` are the decode replicas, P prefill
/// replicas run `configs[0]`, `pd_threshold_tokens` is the conditional disaggregation's threshold and
/// `pd_link_latency_ps`, `pd_link_ps_per_block` a decode replica's inbound link; `prefill_config` (a
/// dict as `configs[r]`, or None) the prefill replicas' config.
///
/// Returns a dict: `outputs` (every row's output columns, in workload order, as `run_engine`'s),
/// `replica` (each row's replica, int64) and `counters` (one dict per replica, as `run_engine`'s; with
/// a prefill pool, the decode replicas' then the prefill replicas', and `prefill_replica`,
/// `prefill_first_scheduled`, `prefill_finish`: per row, int64).
///
/// Raises `InvalidArgumentError` for an empty or bad `configs`, an unknown router, a negative refresh
/// or seed, a `prefix_load_cap` below 1 or not finite, unknown or negative weights, an unknown
/// `router_tie_break`, and everything
/// `run_engine` refuses; `InternalError` on a bug.
#[pyfunction]
#[pyo3(signature = (
    *, configs, router, router_seed = None, router_refresh_ps = None, prefix_load_cap = None,
    router_weights = None, router_tie_break = None, timeseries_every = None, record_events = None,
    prefill_replicas = None, pd_threshold_tokens = None, pd_link_latency_ps = None, pd_link_ps_per_block = None,
    prefill_config = None, dp_group = None, **columns
), text_signature = "(*, configs, router, router_seed=0, router_refresh_ps=0, prefix_load_cap=1.5, router_weights=None, router_tie_break='random', timeseries_every=0, record_events=False, prefill_replicas=0, pd_threshold_tokens=0, pd_link_latency_ps=0, pd_link_ps_per_block=0, prefill_config=None, dp_group=1, **columns)")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_cluster<'py>(
    py: Python<'py>,
    configs: &Bound<'py, PyAny>,
    router: &Bound<'py, PyAny>,
    router_seed: Option<Bound<'py, PyAny>>,
    router_refresh_ps: Option<Bound<'py, PyAny>>,
    prefix_load_cap: Option<Bound<'py, PyAny>>,
    router_weights: Option<Bound<'py, PyAny>>,
    router_tie_break: Option<Bound<'py, PyAny>>,
    timeseries_every: Option<Bound<'py, PyAny>>,
    record_events: Option<Bound<'py, PyAny>>,
    prefill_replicas: Option<Bound<'py, PyAny>>,
    pd_threshold_tokens: Option<Bound<'py, PyAny>>,
    pd_link_latency_ps: Option<Bound<'py, PyAny>>,
    pd_link_ps_per_block: Option<Bound<'py, PyAny>>,
    prefill_config: Option<Bound<'py, PyAny>>,
    dp_group: Option<Bound<'py, PyAny>>,
    columns: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let (pd, prefill_cfg) = pd_args(
        prefill_replicas.as_ref(),
        pd_threshold_tokens.as_ref(),
        pd_link_latency_ps.as_ref(),
        pd_link_ps_per_block.as_ref(),
        prefill_config.as_ref(),
    )?;
    let cfgs = items(configs, "configs must be a list of dicts")?
        .iter()
        .enumerate()
        .map(|(r, d)| {
            let d = d
                .cast::<PyDict>()
                .map_err(|_| invalid(format!("configs[{r}] {} must be a dict", repr(d))))?;
            engine_config(d, Origin::Replica(r), &[])
        })
        .collect::<PyResult<Vec<_>>>()?;
    // (typed here, not by PyO3: a bad value is kvsim's InvalidArgumentError naming it)
    let timeseries_every = match &timeseries_every {
        Some(v) => int_arg(v, "timeseries_every")?,
        None => IntArg {
            value: 0,
            huge: None,
        },
    };
    let record_events = match &record_events {
        Some(v) => bool_arg(v, "record_events")?,
        None => false,
    };
    if timeseries_every.value != 0 {
        return Err(invalid(format!(
            "timeseries_every {timeseries_every}: clusters record no time series (use 0)"
        )));
    }
    if record_events {
        return Err(invalid(
            "record_events True: clusters record no event log (use False)".into(),
        ));
    }
    let spec = router_spec(
        router,
        router_seed.as_ref(),
        router_refresh_ps.as_ref(),
        prefix_load_cap.as_ref(),
        router_weights.as_ref(),
        router_tie_break.as_ref(),
    )?;
    let spec = match &dp_group {
        Some(v) if !v.is_none() => {
            let g = int_arg(v, "dp_group")?;
            match usize::try_from(g.value) {
                Ok(n) if n >= 1 => spec.with_dp_group(n),
                _ => return Err(invalid(format!("dp_group {g} must be at least 1"))),
            }
        }
        _ => spec,
    };
    let origin = Origin::Call("run_cluster");
    let empty = PyDict::new(py);
    let columns = columns.unwrap_or(&empty);
    origin.check_keys(columns, &[&crate::columns::COLUMNS])?;
    let columns = Columns::from_kwargs(columns, origin)?;
    let inp = columns.view()?;
    let PdOutput {
        cluster:
            ClusterOutput {
                out,
                replica,
                counters,
            },
        prefill_replica,
        prefill_first_scheduled,
        prefill_finish,
    } = detached(py, "the cluster", |cancel| {
        if pd.prefill_replicas > 0 {
            kvsim_core::cluster::pd::run_pd(inp, &cfgs, prefill_cfg.as_ref(), &spec, &pd, cancel)
        } else {
            kvsim_core::cluster::run_cluster(inp, &cfgs, &spec, cancel).map(|cluster| PdOutput {
                cluster,
                ..PdOutput::default()
            })
        }
    })?;
    let (cols, _) = output_dicts(py, out)?;
    let result = PyDict::new(py);
    if pd.prefill_replicas > 0 {
        result.set_item("prefill_replica", prefill_replica.into_pyarray(py))?;
        result.set_item(
            "prefill_first_scheduled",
            prefill_first_scheduled.into_pyarray(py),
        )?;
        result.set_item("prefill_finish", prefill_finish.into_pyarray(py))?;
    }
    result.set_item("outputs", cols)?;
    result.set_item("replica", replica.into_pyarray(py))?;
    let list = PyList::empty(py);
    for c in &counters {
        list.append(counters_dict(py, c)?)?;
    }
    result.set_item("counters", list)?;
    Ok(result)
}
