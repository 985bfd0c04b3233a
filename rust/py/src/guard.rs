//! Calls into the core made safe to reach Python: a panic (a bug) becomes `InternalError` and poisons
//! the object it hit (`Guarded`), and a run happens on a worker thread with the GIL released while this
//! thread watches for Ctrl-C (`detached`, the one place every run enters the core).

use crate::errors::{IntoPyResult, py_err};
use kvsim_core::KvError;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// Runs `work` (named `what` in a panic's message) the way every run enters the core: GIL released,
/// on a watched worker thread (`run_watched`), a panic caught (`no_panic`). Ctrl-C comes back as
/// `KeyboardInterrupt`, the core's error as kvsim's.
pub(crate) fn detached<T: Send>(
    py: Python<'_>,
    what: &str,
    work: impl FnOnce(&AtomicBool) -> kvsim_core::Result<T> + Send,
) -> PyResult<T> {
    let (result, signal) = py.detach(|| run_watched(|cancel| no_panic(what, || work(cancel))));
    if let Some(e) = signal {
        return Err(e);
    }
    result.py()
}

/// How often the watcher of a running engine checks for Ctrl-C (Python's pending signals).
const SIGNAL_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Runs `work` on a worker thread while this thread (GIL released) checks Python's signals every
/// `SIGNAL_POLL`; a pending signal (Ctrl-C: `KeyboardInterrupt`) sets the cancel flag the engine reads
/// between units of work, and comes back with the result. Signal handlers run on Python's main thread
/// only, so the check is made here and not by the worker; on other threads it finds nothing, as before.
///
/// The watcher waits on `done`, which the worker sets before it wakes the watcher (the thread having
/// exited only stops it after a panic outside the guard, which sets no `done`). It once waited on
/// `is_finished` alone, which turns true only after the wake-up, so a watcher that looked in between
/// slept a whole `SIGNAL_POLL` more (a short run, a streamed chunk of a few rows, took up to 20 ms
/// instead of microseconds: ~15 ms a call measured on `simulate_stream`'s chunks of one row).
fn run_watched<T: Send>(
    work: impl FnOnce(&AtomicBool) -> kvsim_core::Result<T> + Send,
) -> (kvsim_core::Result<T>, Option<PyErr>) {
    let cancel = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let mut signal = None;
    let watcher = std::thread::current();
    let result = std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("kvsim-engine".into())
            .stack_size(8 << 20)
            .spawn_scoped(scope, || {
                let out = work(&cancel);
                done.store(true, Ordering::Release);
                watcher.unpark(); // (after `done`: a watcher that saw it false wakes at once)
                out
            });
        let worker = match worker {
            Ok(worker) => worker,
            Err(e) => {
                return Err(KvError::InvalidOperation(format!(
                    "cannot start the engine's thread: {e}"
                )));
            }
        };
        // (`is_finished` too: a panic outside `no_panic`'s guard ends the thread without `done`)
        while !done.load(Ordering::Acquire) && !worker.is_finished() {
            std::thread::park_timeout(SIGNAL_POLL);
            if signal.is_none()
                && let Err(e) = Python::attach(|py| py.check_signals())
            {
                signal = Some(e);
                cancel.store(true, Ordering::Relaxed);
            }
        }
        worker.join().unwrap_or_else(|_| {
            Err(KvError::Internal(
                "the engine's thread panicked outside its guard".into(),
            ))
        })
    });
    (result, signal)
}

/// Runs `f`; a panic inside it (a bug in the core) comes back as `KvError::Internal` naming what
/// panicked (`what()`) and the panic's message, so that it reaches Python as
/// `kvsim.errors.InternalError`, never as a panic.
fn catch_panic<T>(what: impl FnOnce() -> String, f: impl FnOnce() -> T) -> Result<T, KvError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        KvError::Internal(format!(
            "{} panicked ({msg}): a bug in kvsim, please report it with the inputs that led here",
            what()
        ))
    })
}

/// `catch_panic` around a fallible call into the core named `what` (a panic or the call's own error).
pub(crate) fn no_panic<T>(
    what: &str,
    f: impl FnOnce() -> kvsim_core::Result<T>,
) -> kvsim_core::Result<T> {
    catch_panic(|| what.to_owned(), f).and_then(|r| r)
}

/// A core object behind a Python class. Its operations run under `catch_panic`; after a panic its state
/// may be half-changed, so it is *poisoned*: every later operation raises `InternalError` as well.
pub(crate) struct Guarded<T> {
    pub(crate) core: T,
    class: &'static str,
    poisoned: AtomicBool,
}

impl<T> Guarded<T> {
    pub(crate) fn new(core: T, class: &'static str) -> Self {
        Self {
            core,
            class,
            poisoned: AtomicBool::new(false),
        }
    }

    fn check(&self, op: &str) -> PyResult<()> {
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(py_err(KvError::Internal(format!(
                "{}.{op}: this {} is unusable after an internal error in an earlier operation",
                self.class, self.class
            ))));
        }
        Ok(())
    }

    fn settle<R>(&self, r: Result<kvsim_core::Result<R>, KvError>) -> PyResult<R> {
        if r.is_err() {
            self.poisoned.store(true, Ordering::Relaxed);
        }
        r.and_then(|r| r).py()
    }

    /// Runs the read-only operation `op` under the guard.
    pub(crate) fn read<R>(
        &self,
        op: &str,
        f: impl FnOnce(&T) -> kvsim_core::Result<R>,
    ) -> PyResult<R> {
        self.check(op)?;
        let r = catch_panic(|| format!("{}.{op}", self.class), || f(&self.core));
        self.settle(r)
    }

    /// Runs the mutating operation `op` under the guard.
    pub(crate) fn write<R>(
        &mut self,
        op: &str,
        f: impl FnOnce(&mut T) -> kvsim_core::Result<R>,
    ) -> PyResult<R> {
        self.check(op)?;
        let class = self.class;
        let core = &mut self.core;
        let r = catch_panic(|| format!("{class}.{op}"), || f(core));
        self.settle(r)
    }
}

/// Test hook: panics inside the guard `run_engine` uses (tests/test_errors.py checks what Python sees).
/// Always raises `InternalError`.
#[pyfunction]
pub(crate) fn _panic_in_guard(py: Python<'_>) -> PyResult<()> {
    py.detach(|| {
        no_panic("the engine", || -> kvsim_core::Result<()> {
            panic!("deliberate test panic")
        })
    })
    .py()
}
