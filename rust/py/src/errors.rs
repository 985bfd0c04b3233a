//! The core's errors as Python exceptions: `KvError`'s kinds onto `kvsim.errors`' hierarchy (DESIGN.md
//! §Errors), and the shorthand every wrapper uses to raise them.

use kvsim_core::KvError;
use pyo3::prelude::*;

pyo3::import_exception!(kvsim.errors, InvalidArgumentError);
pyo3::import_exception!(kvsim.errors, InvalidOperationError);
pyo3::import_exception!(kvsim.errors, InternalError);

/// Maps the core's error kinds onto the Python hierarchy of `kvsim.errors`.
pub(crate) fn py_err(e: KvError) -> PyErr {
    match e {
        KvError::InvalidArgument(m) => InvalidArgumentError::new_err(m),
        KvError::InvalidOperation(m) => InvalidOperationError::new_err(m),
        KvError::Internal(m) => InternalError::new_err(m),
    }
}

/// `.py()`: a core result as a Python one.
pub(crate) trait IntoPyResult<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for kvsim_core::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(py_err)
    }
}

/// Bad input at the boundary: `InvalidArgumentError` with `msg`.
pub(crate) fn invalid(msg: String) -> PyErr {
    InvalidArgumentError::new_err(msg)
}
