//! The benchmarks' floors (`kvsim_core::floor`): what the engine's time is compared with in `bench/`.

use crate::args::{block_size_arg, num_blocks_arg, u64_arg};
use crate::columns::slice;
use crate::errors::IntoPyResult;
use crate::guard::no_panic;
use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

/// Pops `ops` blocks from a free queue of `num_blocks` and pushes them back, nothing else (GIL
/// released): the floor `bench/` compares the engine's time with. Returns a checksum of the ids popped.
///
/// Benchmark use only. Raises `InvalidArgumentError` for `num_blocks` outside `2..=4294967293` (or past
/// the memory limit) or a negative `ops`.
#[pyfunction]
pub(crate) fn free_list_floor(py: Python<'_>, num_blocks: i128, ops: i128) -> PyResult<u64> {
    let n = num_blocks_arg(num_blocks)?;
    let ops = u64_arg(ops, "ops")?;
    kvsim_core::block_pool::check_pool_memory(n).py()?;
    py.detach(|| {
        no_panic("free_list_floor", || {
            Ok(kvsim_core::floor::free_list_floor(n, ops))
        })
    })
    .py()
}

/// The least work of a step-exact engine on these rows (`kvsim_core::floor::step_floor`; GIL released):
/// returns `(steps, block_allocations, finished, checksum)`.
///
/// Called by `kvsim.engine.rust_engine.step_floor` (DESIGN.md §Where the time goes) with a validated
/// `SimConfig`'s pool and scheduler knobs and `EngineInput`'s arrival, prompt and target columns.
/// Raises `InvalidArgumentError` for a knob out of range or a column that is not contiguous.
#[pyfunction]
#[pyo3(signature = (*, num_blocks, block_size, iteration_ps, max_num_seqs, watermark_blocks, arrival_ps, prompt_len, target))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn step_floor<'py>(
    py: Python<'py>,
    num_blocks: i128,
    block_size: i128,
    iteration_ps: i128,
    max_num_seqs: i128,
    watermark_blocks: i128,
    arrival_ps: PyReadonlyArray1<'py, i64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    target: PyReadonlyArray1<'py, i64>,
) -> PyResult<(u64, u64, u64, u64)> {
    let cfg = kvsim_core::floor::FloorConfig {
        num_blocks: num_blocks_arg(num_blocks)?,
        block_size: block_size_arg(block_size)?,
        iteration_ps: u64_arg(iteration_ps, "iteration_ps")?,
        max_num_seqs: u64_arg(max_num_seqs, "max_num_seqs")?,
        watermark_blocks: u64_arg(watermark_blocks, "watermark_blocks")?,
    };
    let (a, p, t) = (
        slice(&arrival_ps, "arrival_ps")?,
        slice(&prompt_len, "prompt_len")?,
        slice(&target, "target")?,
    );
    let r = py
        .detach(|| no_panic("step_floor", || kvsim_core::floor::step_floor(a, p, t, cfg)))
        .py()?;
    Ok((r.steps, r.block_allocations, r.finished, r.checksum))
}
