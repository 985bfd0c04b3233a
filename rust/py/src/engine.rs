//! `run_engine`: one whole run across the boundary (the columns in, the GIL released, the columns out).

use crate::args::{Origin, bool_arg, u64_in};
use crate::columns::{COLUMNS, Columns, arrays, output_dicts};
use crate::config::engine_config;
use crate::guard::detached;
use kvsim_core::engine;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Runs the engine over per-sequence columns (see `kvsim.engine.engine_input`) with the GIL released; returns
/// `(columns, counters)` as two dicts. Ctrl-C interrupts the run with `KeyboardInterrupt`.
///
/// The private entry point behind `kvsim.simulate(..., backend="rust")` (`kvsim.engine.rust_engine.run`),
/// which passes a validated `SimConfig`'s knobs by keyword (`rust_engine.config_kwargs`: `num_blocks`,
/// `block_size`, `policy`, ... as `Stream` and `run_cluster`'s configs take them) and `EngineInput`'s
/// contiguous numpy columns by keyword (`rust_engine.input_kwargs`: `arrival_ps`, `prompt_len`, ...).
/// `columns` maps each per-sequence output column to an array, plus `"timeseries"` and `"events"` (dicts
/// of arrays, empty unless `timeseries_every > 0` / `record_events`) and `"itl"` (ITL's record: the
/// arrays `kvsim.engine.metrics.itl_values` reads, always); `counters` maps counter names to ints.
///
/// Raises `InvalidArgumentError` for an unknown, missing or mistyped keyword, a knob out of range or a
/// column that is not contiguous, a pool too large for the memory limit, or a step past the simulated
/// clock; `InternalError` on a bug.
#[pyfunction]
#[pyo3(signature = (*, timeseries_every, record_events, **kwargs))]
pub(crate) fn run_engine<'py>(
    py: Python<'py>,
    timeseries_every: &Bound<'py, PyAny>,
    record_events: &Bound<'py, PyAny>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let origin = Origin::Call("run_engine");
    let empty = PyDict::new(py);
    let kwargs = kwargs.unwrap_or(&empty);
    let cfg = engine_config(kwargs, origin, &COLUMNS)?;
    // (typed here, not by PyO3: a bad value is kvsim's InvalidArgumentError naming it)
    let timeseries_every = u64_in(timeseries_every, "timeseries_every", 0)?;
    let record_events = bool_arg(record_events, "record_events")?;
    let columns = Columns::from_kwargs(kwargs, origin)?;
    let inp = columns.view()?;
    // (the output made here, in Python's thread: its allocator arena keeps a run's freed columns for
    // the next run, where the worker's gave them back each time: `engine::run_into`)
    let out = engine::EngineOutput::for_run(inp.len());
    let mut output = detached(py, "the engine", |cancel| {
        engine::run_into(
            inp,
            &cfg,
            timeseries_every,
            record_events,
            cancel,
            Some(out),
        )
    })?;
    let series = if timeseries_every > 0 {
        arrays(py, output.timeseries_columns())?
    } else {
        PyDict::new(py)
    };
    let events = if record_events {
        arrays(py, output.event_columns())?
    } else {
        PyDict::new(py)
    };
    let itl = arrays(py, output.take_itl_columns())?;
    let (cols, ctrs) = output_dicts(py, output)?;
    cols.set_item("timeseries", series)?;
    cols.set_item("events", events)?;
    cols.set_item("itl", itl)?;
    Ok((cols, ctrs))
}
