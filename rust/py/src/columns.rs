//! Columns across the boundary: the per-sequence input columns in (one table, `COLUMNS`, read by
//! `run_engine`, `Stream.feed` and `run_cluster`), the output columns and counters out as dicts of numpy
//! arrays (moved, not copied).

use crate::args::Origin;
use crate::errors::invalid;
use kvsim_core::engine::{self, EngineInput};
use numpy::{Element, IntoPyArray, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The per-sequence input columns' keyword arguments (`kvsim.engine.rust_engine.input_kwargs`).
pub(crate) const COLUMNS: [&str; 9] = [
    "arrival_ps",
    "prompt_len",
    "target",
    "max_gen",
    "fork_parent",
    "output_seg",
    "seg_offsets",
    "segment_id",
    "segment_len",
];

/// The input columns of one call, borrowed from Python's numpy arrays (see `kvsim.engine.engine_input`).
pub(crate) struct Columns<'py> {
    arrival_ps: PyReadonlyArray1<'py, i64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    target: PyReadonlyArray1<'py, i64>,
    max_gen: PyReadonlyArray1<'py, i64>,
    fork_parent: PyReadonlyArray1<'py, i64>,
    output_seg: PyReadonlyArray1<'py, u64>,
    seg_offsets: PyReadonlyArray1<'py, i64>,
    segment_id: PyReadonlyArray1<'py, u64>,
    segment_len: PyReadonlyArray1<'py, i64>,
}

/// One column of `d`: a 1-d numpy array of `T`'s dtype, else an error naming it.
fn column<'py, T: Element>(
    d: &Bound<'py, PyDict>,
    origin: Origin,
    name: &str,
    dtype: &str,
) -> PyResult<PyReadonlyArray1<'py, T>> {
    let v = d.get_item(name)?.ok_or_else(|| origin.missing(name))?;
    v.extract().map_err(|_| {
        invalid(format!(
            "column {name} must be a 1-d numpy array of {dtype}"
        ))
    })
}

impl<'py> Columns<'py> {
    /// The columns `COLUMNS` names, from a call's keyword arguments (other keys are the caller's).
    pub(crate) fn from_kwargs(d: &Bound<'py, PyDict>, origin: Origin) -> PyResult<Self> {
        Ok(Self {
            arrival_ps: column(d, origin, "arrival_ps", "int64")?,
            prompt_len: column(d, origin, "prompt_len", "int64")?,
            target: column(d, origin, "target", "int64")?,
            max_gen: column(d, origin, "max_gen", "int64")?,
            fork_parent: column(d, origin, "fork_parent", "int64")?,
            output_seg: column(d, origin, "output_seg", "uint64")?,
            seg_offsets: column(d, origin, "seg_offsets", "int64")?,
            segment_id: column(d, origin, "segment_id", "uint64")?,
            segment_len: column(d, origin, "segment_len", "int64")?,
        })
    }

    /// The core's view of the columns (each must be contiguous).
    pub(crate) fn view(&self) -> PyResult<EngineInput<'_>> {
        Ok(EngineInput {
            arrival_ps: slice(&self.arrival_ps, "arrival_ps")?,
            prompt_len: slice(&self.prompt_len, "prompt_len")?,
            target: slice(&self.target, "target")?,
            max_gen: slice(&self.max_gen, "max_gen")?,
            fork_parent: slice(&self.fork_parent, "fork_parent")?,
            output_seg: slice(&self.output_seg, "output_seg")?,
            seg_offsets: slice(&self.seg_offsets, "seg_offsets")?,
            segment_id: slice(&self.segment_id, "segment_id")?,
            segment_len: slice(&self.segment_len, "segment_len")?,
        })
    }
}

/// A contiguous column as a slice, else an error naming it.
pub(crate) fn slice<'a, T: Element>(
    a: &'a PyReadonlyArray1<'_, T>,
    name: &str,
) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| invalid(format!("column {name} must be a contiguous array")))
}

/// Named columns as a dict of numpy arrays (each `Vec` moved into its array).
pub(crate) fn arrays<T: Element>(
    py: Python<'_>,
    columns: impl IntoIterator<Item = (&'static str, Vec<T>)>,
) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (name, values) in columns {
        d.set_item(name, values.into_pyarray(py))?;
    }
    Ok(d)
}

/// The output columns and counters as two dicts (`run_engine`'s result; `Stream.take_done`'s columns).
pub(crate) fn output_dicts(
    py: Python<'_>,
    output: engine::EngineOutput,
) -> PyResult<(Bound<'_, PyDict>, Bound<'_, PyDict>)> {
    let (columns, codes, counters) = output.columns();
    let cols = arrays(py, columns)?;
    for (name, values) in codes {
        cols.set_item(name, values.into_pyarray(py))?;
    }
    Ok((cols, counters_dict(py, &counters)?))
}

/// The run's integer counters as a dict.
pub(crate) fn counters_dict<'py>(
    py: Python<'py>,
    counters: &engine::Counters,
) -> PyResult<Bound<'py, PyDict>> {
    let ctrs = PyDict::new(py);
    for (name, value) in counters.pairs() {
        ctrs.set_item(name, value)?;
    }
    for (g, [w, peak]) in counters.group_blocks.iter().enumerate() {
        ctrs.set_item(format!("w_group_blocks_{g}"), w)?;
        ctrs.set_item(format!("peak_group_blocks_{g}"), peak)?;
    }
    Ok(ctrs)
}
