//! `kvsim._core`: thin PyO3 wrappers over kvsim-core. Each method converts its arguments, calls the core
//! once and converts the result; domain logic lives in the core. One module per seam (DESIGN.md §Module
//! map): `errors` (the core's errors as kvsim's exceptions), `guard` (panics, poisoning, the GIL released
//! under a Ctrl-C watch), `args` (Python arguments into the core's types), `config` (the engine's knobs),
//! `columns` (columns in and out), and the wrappers: `pool`, `manager`, `engine`, `stream`, `cluster`,
//! `floor`, `cpu_tier`.

// PyO3 extracts arguments into owned values; borrowing them is not an option at this boundary.
#![allow(clippy::needless_pass_by_value)]
// `Python::check_signals` as a path does not satisfy `attach`'s higher-ranked closure bound.
#![allow(clippy::redundant_closure_for_method_calls)]

mod args;
mod cluster;
mod columns;
mod config;
mod cpu_tier;
mod engine;
mod errors;
mod floor;
mod guard;
mod manager;
mod pool;
mod stream;

use kvsim_core::block_pool::{MAX_BLOCKS, POOL_BYTES_PER_BLOCK};
use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<pool::PyBlockPool>()?;
    m.add_class::<manager::PyKVCacheManager>()?;
    m.add_class::<stream::PyStream>()?;
    m.add_class::<cpu_tier::PyCpuTier>()?;
    m.add_function(wrap_pyfunction!(pool::block_keys, m)?)?;
    m.add_function(wrap_pyfunction!(pool::pool_memory, m)?)?;
    m.add("POOL_BYTES_PER_BLOCK", POOL_BYTES_PER_BLOCK)?;
    m.add("MAX_BLOCKS", MAX_BLOCKS)?;
    // The profile this build was optimized with (`scripts/pgo_build.sh` names it), None without one.
    m.add("PGO_PROFILE", option_env!("KVSIM_PGO_PROFILE"))?;
    m.add_function(wrap_pyfunction!(engine::run_engine, m)?)?;
    m.add_function(wrap_pyfunction!(cluster::run_cluster, m)?)?;
    m.add_function(wrap_pyfunction!(floor::free_list_floor, m)?)?;
    m.add_function(wrap_pyfunction!(floor::step_floor, m)?)?;
    m.add_function(wrap_pyfunction!(guard::_panic_in_guard, m)?)?;
    Ok(())
}
