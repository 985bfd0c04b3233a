//! The core's one error type. Messages are lowercase and name the entity and the numbers involved.

use std::fmt;

/// Every error the core returns on purpose. The binding maps each kind to a Python exception class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvError {
    /// A value outside its domain (maps to `kvsim.errors.InvalidArgumentError`).
    InvalidArgument(String),
    /// A call not allowed in the current state (maps to `kvsim.errors.InvalidOperationError`).
    InvalidOperation(String),
    /// A broken internal invariant: a bug (maps to `kvsim.errors.InternalError`).
    Internal(String),
}

pub type Result<T> = std::result::Result<T, KvError>;

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvError::InvalidArgument(m) | KvError::InvalidOperation(m) | KvError::Internal(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for KvError {}

/// `return Err(KvError::InvalidArgument(format!(...)))` in one line.
#[macro_export]
macro_rules! invalid_arg {
    ($($t:tt)*) => { return Err($crate::KvError::InvalidArgument(format!($($t)*))) };
}

/// `return Err(KvError::InvalidOperation(format!(...)))` in one line.
#[macro_export]
macro_rules! invalid_op {
    ($($t:tt)*) => { return Err($crate::KvError::InvalidOperation(format!($($t)*))) };
}

/// `return Err(KvError::Internal(format!(...)))` in one line.
#[macro_export]
macro_rules! internal {
    ($($t:tt)*) => { return Err($crate::KvError::Internal(format!($($t)*))) };
}
