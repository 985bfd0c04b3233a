//! Python arguments into the core's types, with kvsim's messages. The rules of DESIGN.md §Errors, shared
//! with the reference (`python/kvsim/arguments.py`): an integer argument is any object with `__index__`
//! except a bool (else "NAME VALUE must be an integer", VALUE its repr); its range is checked next, in
//! argument order, with messages that print Python's own digits.

use crate::errors::{IntoPyResult, invalid};
use kvsim_core::block_pool::MAX_BLOCKS;
use kvsim_core::{FreeOrder, Segment};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyTuple};

/// Python's `repr(obj)` (what the reference's `{value!r}` prints).
pub(crate) fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr()
        .map_or_else(|_| "<unprintable>".to_owned(), |r| r.to_string())
}

/// An integer argument: `value` is exact within i128 and saturated beyond it (range checks against
/// bounds inside i128 stay right); `Display` prints the exact Python value.
pub(crate) struct IntArg {
    pub(crate) value: i128,
    /// Python's digits, for a value beyond i128.
    pub(crate) huge: Option<String>,
}

impl std::fmt::Display for IntArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.huge {
            Some(text) => f.write_str(text),
            None => self.value.fmt(f),
        }
    }
}

impl IntArg {
    pub(crate) fn u64(&self) -> Option<u64> {
        u64::try_from(self.value).ok()
    }
}

/// Converts an integer argument named `name` (see the rules above).
pub(crate) fn int_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<IntArg> {
    int_arg_named(obj, || name.to_owned())
}

/// `int_arg` with the name built only for the error message (a segment's fields, on every call).
pub(crate) fn int_arg_named(
    obj: &Bound<'_, PyAny>,
    name: impl FnOnce() -> String,
) -> PyResult<IntArg> {
    if !obj.is_instance_of::<PyBool>() {
        match obj.extract::<i128>() {
            Ok(value) => return Ok(IntArg { value, huge: None }),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
                let exact = obj.py().import("operator")?.call_method1("index", (obj,))?;
                let negative = exact.lt(0)?;
                return Ok(IntArg {
                    value: if negative { i128::MIN } else { i128::MAX },
                    huge: Some(exact.str()?.to_string()),
                });
            }
            Err(_) => {}
        }
    }
    Err(invalid(format!(
        "{} {} must be an integer",
        name(),
        repr(obj)
    )))
}

/// A `u64` argument: an integer in `[lo, u64::MAX]`.
pub(crate) fn u64_in(obj: &Bound<'_, PyAny>, name: &str, lo: u64) -> PyResult<u64> {
    let v = int_arg(obj, name)?;
    match v.u64() {
        Some(x) if x >= lo => Ok(x),
        _ => Err(invalid(format!(
            "{name} {v} must be between {lo} and {}",
            u64::MAX
        ))),
    }
}

/// A request id: an integer in `[0, u64::MAX]`.
pub(crate) fn request_id_arg(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    let v = int_arg(obj, "request_id")?;
    v.u64()
        .ok_or_else(|| invalid(format!("request_id {v} is not a u64")))
}

pub(crate) fn bool_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    if obj.is_instance_of::<PyBool>() {
        obj.extract()
    } else {
        Err(invalid(format!("{name} {} must be a bool", repr(obj))))
    }
}

/// The constructors' defaults as Python objects (their arguments are checked like any other).
pub(crate) fn default_true() -> Py<PyAny> {
    Python::attach(|py| PyBool::new(py, true).to_owned().into_any().unbind())
}

pub(crate) fn default_false() -> Py<PyAny> {
    Python::attach(|py| PyBool::new(py, false).to_owned().into_any().unbind())
}

pub(crate) fn default_order() -> Py<PyAny> {
    Python::attach(|py| {
        pyo3::types::PyString::new(py, "classic")
            .into_any()
            .unbind()
    })
}

pub(crate) fn free_order_arg(obj: &Bound<'_, PyAny>) -> PyResult<FreeOrder> {
    obj.extract::<&str>()
        .ok()
        .and_then(|s| FreeOrder::parse(s).ok())
        .ok_or_else(|| {
            invalid(format!(
                "free_order {} is not one of 'classic', 'lifo_unhashed'",
                repr(obj)
            ))
        })
}

/// Python ints arrive as i128 (engine knobs, validated by SimConfig first) so that negative or huge
/// values get kvsim's error, not an `OverflowError`.
pub(crate) fn u64_arg(v: i128, what: &str) -> PyResult<u64> {
    u64::try_from(v).map_err(|_| invalid(format!("{what} {v} is not a u64")))
}

fn num_blocks_msg(v: impl std::fmt::Display) -> PyErr {
    invalid(format!(
        "num_blocks {v} must be between 2 and {MAX_BLOCKS} (block 0 is the null block)"
    ))
}

pub(crate) fn num_blocks_arg(v: i128) -> PyResult<u32> {
    if (2..=i128::from(MAX_BLOCKS)).contains(&v) {
        Ok(v as u32)
    } else {
        Err(num_blocks_msg(v))
    }
}

pub(crate) fn num_blocks_obj(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    let v = int_arg(obj, "num_blocks")?;
    num_blocks_arg(v.value).map_err(|_| num_blocks_msg(&v))
}

pub(crate) fn block_size_arg(v: i128) -> PyResult<u64> {
    match u64::try_from(v) {
        Ok(b) if b >= 1 => Ok(b),
        _ => Err(invalid(format!(
            "block_size {v} must be between 1 and {}",
            u64::MAX
        ))),
    }
}

pub(crate) fn block_size_obj(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    u64_in(obj, "block_size", 1)
}

/// A block id of a pool of `n` blocks: an integer in `0..n`.
pub(crate) fn block_arg(obj: &Bound<'_, PyAny>, n: u32) -> PyResult<i64> {
    let v = int_arg(obj, "block id")?;
    if (0..i128::from(n)).contains(&v.value) {
        Ok(v.value as i64)
    } else {
        Err(invalid(format!(
            "block id {v} is out of range 0..{}",
            n - 1
        )))
    }
}

/// `obj` as a list or tuple (the containers both backends take), else an error naming `what`.
pub(crate) fn items<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(l) = obj.cast::<PyList>() {
        Ok(l.iter().collect())
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        Ok(t.iter().collect())
    } else {
        Err(invalid(format!(
            "{what}, not {}",
            obj.get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string())
        )))
    }
}

/// A list of block ids: every element an integer in range, checked in list order before anything else.
pub(crate) fn blocks_arg(obj: &Bound<'_, PyAny>, n: u32) -> PyResult<Vec<i64>> {
    items(obj, "block_ids must be a list or tuple of block ids")?
        .iter()
        .map(|b| block_arg(b, n))
        .collect()
}

/// A block key: an integer in `[0, 2^128)`.
pub(crate) fn key_arg(obj: &Bound<'_, PyAny>) -> PyResult<Option<u128>> {
    let v = int_arg(obj, "key")?;
    Ok(if v.huge.is_some() {
        // Beyond i128: only a positive value below 2^128 is a key.
        obj.extract::<u128>().ok()
    } else {
        u128::try_from(v.value).ok()
    })
}

/// A segment list: a list or tuple of `(segment_id, length)` pairs, each a list or tuple of two integers,
/// `segment_id` a u64 and `length` in `[1, u64::MAX]`, checked pair by pair; then the core checks the list
/// (not empty, total within u64).
pub(crate) fn segments_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Segment>> {
    let segs = items(
        obj,
        "segments must be a list or tuple of (segment_id, length) pairs",
    )?;
    let mut out = Vec::with_capacity(segs.len());
    for (i, pair) in segs.iter().enumerate() {
        let fields = items(pair, "")
            .ok()
            .filter(|f| f.len() == 2)
            .ok_or_else(|| {
                invalid(format!(
                    "segment {i} {} must be a (segment_id, length) pair",
                    repr(pair)
                ))
            })?;
        let id = int_arg_named(&fields[0], || format!("segment {i}: id"))?;
        let id = id
            .u64()
            .ok_or_else(|| invalid(format!("segment {i}: id {id} is not a u64")))?;
        let len = int_arg_named(&fields[1], || format!("segment {i}: length"))?;
        let len = len.u64().filter(|&l| l >= 1).ok_or_else(|| {
            invalid(format!(
                "segment {i}: length {len} must be between 1 and {}",
                u64::MAX
            ))
        })?;
        out.push(Segment::new(id, len));
    }
    kvsim_core::hash::validate_segments(&out).py()?;
    Ok(out)
}

/// Where keyword arguments come from, for the messages about them: a call's own keywords, or one of
/// `run_cluster`'s replica configs (a dict of the same keywords).
#[derive(Clone, Copy)]
pub(crate) enum Origin {
    /// The keyword arguments of the named call (`run_engine`, `Stream`, `Stream.feed`).
    Call(&'static str),
    /// `run_cluster`'s `configs[r]`.
    Replica(usize),
}

impl Origin {
    /// How a value's message names `key`.
    pub(crate) fn name(self, key: &str) -> String {
        match self {
            Self::Call(_) => key.to_owned(),
            Self::Replica(r) => format!("configs[{r}]['{key}']"),
        }
    }

    pub(crate) fn missing(self, key: &str) -> PyErr {
        invalid(match self {
            Self::Call(f) => format!("{f}: missing keyword argument '{key}'"),
            Self::Replica(r) => format!("configs[{r}]: missing key '{key}'"),
        })
    }

    /// A range check's error, prefixed with the replica it is about.
    pub(crate) fn wrap(self, py: Python<'_>, e: PyErr) -> PyErr {
        match self {
            Self::Replica(r) if e.is_instance_of::<crate::errors::InvalidArgumentError>(py) => {
                invalid(format!("configs[{r}]: {}", e.value(py)))
            }
            _ => e,
        }
    }

    /// Refuses a key of `d` that is not a string or not in one of `known`, before any value is read.
    pub(crate) fn check_keys(self, d: &Bound<'_, PyDict>, known: &[&[&str]]) -> PyResult<()> {
        for (k, _) in d.iter() {
            let Ok(name) = k.extract::<String>() else {
                return Err(invalid(match self {
                    Self::Call(f) => format!("{f}: keyword {} is not a string", repr(&k)),
                    Self::Replica(r) => format!("configs[{r}]: key {} is not a string", repr(&k)),
                }));
            };
            if !known.iter().any(|keys| keys.contains(&name.as_str())) {
                let all = known.concat().join(", ");
                return Err(invalid(match self {
                    Self::Call(f) => {
                        format!("{f}: unknown keyword argument '{name}' (the arguments are: {all})")
                    }
                    Self::Replica(r) => format!(
                        "configs[{r}]: unknown key '{name}' (the keys are run_engine's engine arguments: {all})"
                    ),
                }));
            }
        }
        Ok(())
    }
}
