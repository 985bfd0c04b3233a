//! `Stream`: a run fed in chunks (`kvsim.simulate_stream`) over the core's `StreamEngine`.

use crate::args::Origin;
use crate::columns::{COLUMNS, Columns, counters_dict, output_dicts};
use crate::config::engine_config;
use crate::errors::IntoPyResult;
use crate::guard::{detached, no_panic};
use kvsim_core::engine;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A run fed in chunks (`kvsim.simulate_stream`; the core's `StreamEngine`): `feed` a chunk's columns
/// (its `fork_parent` rows count from the chunk's first row; `independent`: see the core's
/// `StreamEngine`), `advance(final_input)` steps as far as
/// the input allows (GIL released, Ctrl-C raises `KeyboardInterrupt`), `take_done()` returns the
/// columns of the rows done so far, `counters()` the run's counters.
///
/// `Stream(*, forks, independent=False, **knobs)`: `knobs` are `run_engine`'s engine keywords
/// (`kvsim.engine.rust_engine.config_kwargs`). Raises `InvalidArgumentError` for an unknown, missing or
/// mistyped keyword, a knob out of range or a pool too large for the memory limit.
#[pyclass(name = "Stream", module = "kvsim._core")]
pub(crate) struct PyStream {
    core: engine::StreamEngine,
}

#[pymethods]
impl PyStream {
    #[new]
    #[pyo3(signature = (*, forks, independent = false, **knobs))]
    fn new(
        py: Python<'_>,
        forks: bool,
        independent: bool,
        knobs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let empty = PyDict::new(py);
        let cfg = engine_config(knobs.unwrap_or(&empty), Origin::Call("Stream"), &[])?;
        // The pool is built on a watched thread, so that Ctrl-C during a long setup raises at once.
        let core = detached(py, "Stream()", |cancel| {
            engine::StreamEngine::new_cancellable(cfg, forks, independent, Some(cancel))
        })?;
        Ok(PyStream { core })
    }

    /// Feeds the next chunk's per-sequence columns (`kvsim.engine.engine_input`, the same keywords as
    /// `run_engine`), in arrival order after every row fed before.
    ///
    /// Raises `InvalidArgumentError` for an unknown or missing column, one that is not a contiguous
    /// array of its dtype, or a chunk out of order, and `InternalError` on a bug.
    #[pyo3(signature = (**columns))]
    fn feed(&mut self, py: Python<'_>, columns: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        let origin = Origin::Call("Stream.feed");
        let empty = PyDict::new(py);
        let columns = columns.unwrap_or(&empty);
        origin.check_keys(columns, &[&COLUMNS])?;
        let columns = Columns::from_kwargs(columns, origin)?;
        let inp = columns.view()?;
        let core = &mut self.core;
        no_panic("Stream.feed", || core.feed(inp)).py()
    }

    /// Takes every step that rows not fed yet cannot change (all of them when `final_input`), with the
    /// GIL released; Ctrl-C raises `KeyboardInterrupt`.
    ///
    /// Raises `InvalidArgumentError` for a step past the simulated clock, `InternalError` on a bug.
    fn advance(&mut self, py: Python<'_>, final_input: bool) -> PyResult<()> {
        let core = &mut self.core;
        detached(py, "the engine", |cancel| core.advance(final_input, cancel))
    }

    /// The output columns of the rows finished or rejected since the last call, as a dict of arrays
    /// (the columns of `run_engine`'s first result).
    fn take_done<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let core = &mut self.core;
        let out = no_panic("Stream.take_done", || Ok(core.take_done())).py()?;
        Ok(output_dicts(py, out)?.0)
    }

    /// The run's integer counters so far, as a dict (those of `run_engine`'s second result).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counters_dict(py, &self.core.counters())
    }
}
