//! `Stream`: a run fed in chunks (`kvsim.simulate_stream`) over the core's `StreamEngine`.

use crate::args::{Origin, bool_arg, default_false};
use crate::columns::{COLUMNS, Columns, counters_dict, output_dicts};
use crate::config::engine_config;
use crate::errors::{InternalError, IntoPyResult, py_err};
use crate::guard::{detached, no_panic};
use kvsim_core::{KvError, engine};
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
    /// An internal error (a panic: a bug) left the engine half-changed: every later call raises
    /// `InternalError`, as a poisoned `Guarded` object does.
    poisoned: bool,
}

#[pymethods]
impl PyStream {
    #[new]
    #[pyo3(
        signature = (*, forks, independent = default_false(), **knobs),
        text_signature = "(*, forks, independent=False, **knobs)"
    )]
    fn new(
        py: Python<'_>,
        forks: &Bound<'_, PyAny>,
        independent: Py<PyAny>,
        knobs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        // (typed here, not by PyO3: a bad value is kvsim's InvalidArgumentError naming it)
        let forks = bool_arg(forks, "forks")?;
        let independent = bool_arg(independent.bind(py), "independent")?;
        let empty = PyDict::new(py);
        let cfg = engine_config(knobs.unwrap_or(&empty), Origin::Call("Stream"), &[])?;
        // The pool is built on a watched thread, so that Ctrl-C during a long setup raises at once.
        let core = detached(py, "Stream()", |cancel| {
            engine::StreamEngine::new_cancellable(cfg, forks, independent, Some(cancel))
        })?;
        Ok(PyStream {
            core,
            poisoned: false,
        })
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
        self.check("feed")?;
        let core = &mut self.core;
        let r = no_panic("Stream.feed", || core.feed(inp)).py();
        self.settle(py, r)
    }

    /// Takes every step that rows not fed yet cannot change (all of them when `final_input`), with the
    /// GIL released; Ctrl-C raises `KeyboardInterrupt`.
    ///
    /// Raises `InvalidArgumentError` for a step past the simulated clock, `InternalError` on a bug.
    fn advance(&mut self, py: Python<'_>, final_input: &Bound<'_, PyAny>) -> PyResult<()> {
        let final_input = bool_arg(final_input, "final_input")?;
        self.check("advance")?;
        let core = &mut self.core;
        let r = detached(py, "the engine", |cancel| core.advance(final_input, cancel));
        self.settle(py, r)
    }

    /// The output columns of the rows finished or rejected since the last call, as a dict of arrays
    /// (the columns of `run_engine`'s first result).
    fn take_done<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check("take_done")?;
        let core = &mut self.core;
        let r = no_panic("Stream.take_done", || Ok(core.take_done())).py();
        let out = self.settle(py, r)?;
        Ok(output_dicts(py, out)?.0)
    }

    /// The run's integer counters so far, as a dict (those of `run_engine`'s second result).
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check("counters")?;
        counters_dict(py, &self.core.counters())
    }

    /// Test hook: panics inside the stream's guard (tests/test_errors.py checks that the stream is
    /// unusable after it). Always raises `InternalError`.
    fn _panic_for_test(&mut self, py: Python<'_>) -> PyResult<()> {
        self.check("_panic_for_test")?;
        let r = no_panic("Stream._panic_for_test", || -> kvsim_core::Result<()> {
            panic!("deliberate test panic")
        })
        .py();
        self.settle(py, r)
    }
}

impl PyStream {
    fn check(&self, op: &str) -> PyResult<()> {
        if self.poisoned {
            return Err(py_err(KvError::Internal(format!(
                "Stream.{op}: this Stream is unusable after an internal error in an earlier operation"
            ))));
        }
        Ok(())
    }

    /// `r` as it is; an `InternalError` (a panic in the core) poisons the stream.
    fn settle<T>(&mut self, py: Python<'_>, r: PyResult<T>) -> PyResult<T> {
        if let Err(e) = &r
            && e.is_instance_of::<InternalError>(py)
        {
            self.poisoned = true;
        }
        r
    }
}
