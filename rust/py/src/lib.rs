//! `kvsim._core`: thin PyO3 wrappers over kvsim-core. Each method converts its arguments, calls the core
//! once and converts the result; domain logic lives in the core.

// PyO3 extracts arguments into owned values; borrowing them is not an option at this boundary.
#![allow(clippy::needless_pass_by_value)]
// `Python::check_signals` as a path does not satisfy `attach`'s higher-ranked closure bound.
#![allow(clippy::redundant_closure_for_method_calls)]

use kvsim_core::block_pool::{MAX_BLOCKS, POOL_BYTES_PER_BLOCK};
use kvsim_core::cluster::{ClusterOutput, RouterSpec, TieBreak};
use kvsim_core::engine::{self, EngineConfig, EngineInput, Policy, Preemption, TimeModel};
use kvsim_core::{BlockId, BlockKey, BlockPool, FreeOrder, KVCacheManager, KvError, Segment};
use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyTuple};
use std::sync::atomic::{AtomicBool, Ordering};

mod errors {
    pyo3::import_exception!(kvsim.errors, InvalidArgumentError);
    pyo3::import_exception!(kvsim.errors, InvalidOperationError);
    pyo3::import_exception!(kvsim.errors, InternalError);
}

/// Maps the core's error kinds onto the Python hierarchy of `kvsim.errors`.
fn py_err(e: KvError) -> PyErr {
    match e {
        KvError::InvalidArgument(m) => errors::InvalidArgumentError::new_err(m),
        KvError::InvalidOperation(m) => errors::InvalidOperationError::new_err(m),
        KvError::Internal(m) => errors::InternalError::new_err(m),
    }
}

trait IntoPyResult<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for kvsim_core::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(py_err)
    }
}

fn invalid(msg: String) -> PyErr {
    errors::InvalidArgumentError::new_err(msg)
}

// -- arguments ----------------------------------------------------------------------------------------
// The rules of DESIGN.md §Errors, shared with the reference (`python/kvsim/arguments.py`): an integer
// argument is any object with `__index__` except a bool (else "NAME VALUE must be an integer", VALUE its
// repr); its range is checked next, in argument order, with messages that print Python's own digits.

/// Python's `repr(obj)` (what the reference's `{value!r}` prints).
fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr()
        .map_or_else(|_| "<unprintable>".to_owned(), |r| r.to_string())
}

/// An integer argument: `value` is exact within i128 and saturated beyond it (range checks against
/// bounds inside i128 stay right); `Display` prints the exact Python value.
struct IntArg {
    value: i128,
    /// Python's digits, for a value beyond i128.
    huge: Option<String>,
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
    fn u64(&self) -> Option<u64> {
        u64::try_from(self.value).ok()
    }
}

/// Converts an integer argument named `name` (see the rules above).
fn int_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<IntArg> {
    int_arg_named(obj, || name.to_owned())
}

/// `int_arg` with the name built only for the error message (a segment's fields, on every call).
fn int_arg_named(obj: &Bound<'_, PyAny>, name: impl FnOnce() -> String) -> PyResult<IntArg> {
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
fn u64_in(obj: &Bound<'_, PyAny>, name: &str, lo: u64) -> PyResult<u64> {
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
fn request_id_arg(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    let v = int_arg(obj, "request_id")?;
    v.u64()
        .ok_or_else(|| invalid(format!("request_id {v} is not a u64")))
}

fn bool_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    if obj.is_instance_of::<PyBool>() {
        obj.extract()
    } else {
        Err(invalid(format!("{name} {} must be a bool", repr(obj))))
    }
}

/// The constructors' defaults as Python objects (their arguments are checked like any other).
fn default_true() -> Py<PyAny> {
    Python::attach(|py| PyBool::new(py, true).to_owned().into_any().unbind())
}

fn default_order() -> Py<PyAny> {
    Python::attach(|py| {
        pyo3::types::PyString::new(py, "classic")
            .into_any()
            .unbind()
    })
}

fn free_order_arg(obj: &Bound<'_, PyAny>) -> PyResult<FreeOrder> {
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
fn u64_arg(v: i128, what: &str) -> PyResult<u64> {
    u64::try_from(v).map_err(|_| invalid(format!("{what} {v} is not a u64")))
}

fn num_blocks_msg(v: impl std::fmt::Display) -> PyErr {
    invalid(format!(
        "num_blocks {v} must be between 2 and {MAX_BLOCKS} (block 0 is the null block)"
    ))
}

fn num_blocks_arg(v: i128) -> PyResult<u32> {
    if (2..=i128::from(MAX_BLOCKS)).contains(&v) {
        Ok(v as u32)
    } else {
        Err(num_blocks_msg(v))
    }
}

fn num_blocks_obj(obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    let v = int_arg(obj, "num_blocks")?;
    num_blocks_arg(v.value).map_err(|_| num_blocks_msg(&v))
}

fn block_size_arg(v: i128) -> PyResult<u64> {
    match u64::try_from(v) {
        Ok(b) if b >= 1 => Ok(b),
        _ => Err(invalid(format!(
            "block_size {v} must be between 1 and {}",
            u64::MAX
        ))),
    }
}

fn block_size_obj(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    u64_in(obj, "block_size", 1)
}

/// A block id of a pool of `n` blocks: an integer in `0..n`.
fn block_arg(obj: &Bound<'_, PyAny>, n: u32) -> PyResult<i64> {
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
fn items<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
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
fn blocks_arg(obj: &Bound<'_, PyAny>, n: u32) -> PyResult<Vec<i64>> {
    items(obj, "block_ids must be a list or tuple of block ids")?
        .iter()
        .map(|b| block_arg(b, n))
        .collect()
}

/// A block key: an integer in `[0, 2^128)`.
fn key_arg(obj: &Bound<'_, PyAny>) -> PyResult<Option<u128>> {
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
fn segments_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Segment>> {
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

fn ids(v: &[BlockId]) -> Vec<u32> {
    v.iter().map(|b| b.0).collect()
}

/// The low-level block pool: reference counts, the free queue and the prefix map (DESIGN.md §Block pool).
///
/// `BlockPool(num_blocks, enable_caching=True, free_order="classic")` holds blocks `0..num_blocks`;
/// block 0 is the null block, never handed out. The free queue starts in ascending ids; its head is the
/// next block `allocate` hands out. `free_order` is where freed blocks join it: `"classic"` (the tail)
/// or `"lifo_unhashed"` (unkeyed ones at the head). Free blocks keep their key until reused, so `lookup`
/// still finds them (they are *evictable*).
///
/// Raises `InvalidArgumentError` for an argument of the wrong type, `num_blocks` outside
/// `2..=4294967293`, an unknown `free_order`, or a pool whose bookkeeping (`POOL_BYTES_PER_BLOCK` bytes
/// per block) exceeds the memory limit (`memory_limit()`).
#[pyclass(name = "BlockPool", module = "kvsim._core")]
struct PyBlockPool(Guarded<BlockPool>);

#[pymethods]
impl PyBlockPool {
    #[new]
    #[pyo3(
        signature = (num_blocks, enable_caching = default_true(), free_order = default_order()),
        text_signature = "(num_blocks, enable_caching=True, free_order='classic')"
    )]
    fn new<'py>(
        py: Python<'py>,
        num_blocks: &Bound<'py, PyAny>,
        enable_caching: Py<PyAny>,
        free_order: Py<PyAny>,
    ) -> PyResult<Self> {
        let n = num_blocks_obj(num_blocks)?;
        let caching = bool_arg(enable_caching.bind(py), "enable_caching")?;
        let order = free_order_arg(free_order.bind(py))?;
        let pool = no_panic("BlockPool()", || BlockPool::new(n, caching, order)).py()?;
        Ok(Self(Guarded::new(pool, "BlockPool")))
    }

    /// Blocks in the pool, the null block included.
    #[getter]
    fn num_blocks(&self) -> PyResult<u32> {
        self.0.read("num_blocks", |p| Ok(p.num_blocks()))
    }
    /// Blocks that can be handed out: `num_blocks - 1`.
    #[getter]
    fn capacity(&self) -> PyResult<u32> {
        self.0.read("capacity", |p| Ok(p.capacity()))
    }
    /// Blocks in the free queue (evictable cached ones included).
    #[getter]
    fn num_free_blocks(&self) -> PyResult<u32> {
        self.0.read("num_free_blocks", |p| Ok(p.num_free_blocks()))
    }
    /// Keys dropped so far because their free block was handed out again.
    #[getter]
    fn num_evictions(&self) -> PyResult<u64> {
        self.0.read("num_evictions", |p| Ok(p.num_evictions()))
    }
    /// Whether blocks may carry content keys (prefix caching).
    #[getter]
    fn enable_caching(&self) -> PyResult<bool> {
        self.0.read("enable_caching", |p| Ok(p.enable_caching()))
    }
    /// `"classic"` or `"lifo_unhashed"`.
    #[getter]
    fn free_order(&self) -> PyResult<&'static str> {
        self.0.read("free_order", |p| Ok(p.free_order().as_str()))
    }

    /// Pops `num` blocks from the head of the free queue (each gets `ref_cnt` 1 and loses its old key).
    ///
    /// Returns their ids in order, or `None`, changing nothing, when fewer than `num` are free.
    /// Raises `InvalidArgumentError` when `num` is not an integer or is negative.
    fn allocate(&mut self, num: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u32>>> {
        let v = int_arg(num, "num")?;
        if v.value < 0 {
            return Err(invalid(format!(
                "cannot allocate {v} blocks: the count must not be negative"
            )));
        }
        let num = v.u64().unwrap_or(u64::MAX);
        self.0
            .write("allocate", |p| Ok(p.allocate(num).map(|v| ids(&v))))
    }

    /// Drops one reference per listed block, in order; a block reaching 0 joins the free queue.
    ///
    /// `block_ids` is a list or tuple of ints. Raises `InvalidArgumentError` for an id that is not an
    /// integer or is out of range, `InvalidOperationError` for the null block or a block freed more
    /// often than it is held; a rejected call changes nothing.
    fn free(&mut self, block_ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = blocks_arg(block_ids, self.0.core.num_blocks())?;
        self.0.write("free", |p| p.free(&b))
    }

    /// Takes one more reference on each listed block, taking free ones out of the queue (a cache hit).
    ///
    /// Raises as `free` does (the null block: `InvalidOperationError`); a rejected call changes nothing.
    fn touch(&mut self, block_ids: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = blocks_arg(block_ids, self.0.core.num_blocks())?;
        self.0.write("touch", |p| p.touch(&b))
    }

    /// Gives the in-use block `block_id` the content key `key` (an int in `[0, 2**128)`), so that
    /// `lookup(key)` finds it.
    ///
    /// Raises `InvalidArgumentError` for a key or id that is not an integer or is out of range,
    /// `InvalidOperationError` for the null block, a free or already keyed block, or caching disabled.
    fn register(&mut self, block_id: &Bound<'_, PyAny>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = key_arg(key)?.ok_or_else(|| {
            invalid(format!(
                "key {} is not a u128",
                int_arg(key, "key").map_or_else(|_| repr(key), |v| v.to_string())
            ))
        })?;
        let b = block_arg(block_id, self.0.core.num_blocks())?;
        self.0.write("register", |p| p.register(b, BlockKey(k)))
    }

    /// The first block registered under `key` that still carries it, or `None` (also for any integer no
    /// block can carry). Raises `InvalidArgumentError` when `key` is not an integer.
    fn lookup(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
        let Some(k) = key_arg(key)? else {
            return Ok(None);
        };
        self.0
            .read("lookup", |p| Ok(p.lookup(BlockKey(k)).map(|b| b.0)))
    }

    /// The reference count of `block_id` (0: free or the null block).
    ///
    /// Raises `InvalidArgumentError` for an id that is not an integer or is out of range.
    fn ref_cnt(&self, block_id: &Bound<'_, PyAny>) -> PyResult<u32> {
        let b = block_arg(block_id, self.0.core.num_blocks())?;
        self.0.read("ref_cnt", |p| p.ref_cnt(b))
    }

    /// The content key `block_id` carries, or `None`. Raises as `ref_cnt` does.
    fn block_hash(&self, block_id: &Bound<'_, PyAny>) -> PyResult<Option<u128>> {
        let b = block_arg(block_id, self.0.core.num_blocks())?;
        self.0
            .read("block_hash", |p| Ok(p.block_hash(b)?.map(|k| k.0)))
    }

    /// The free queue's block ids, head (next handed out) first.
    fn free_block_ids(&self) -> PyResult<Vec<u32>> {
        self.0
            .read("free_block_ids", |p| Ok(ids(&p.free_block_ids())))
    }

    /// Ascending ids of every block that carries a key (in use or evictable).
    fn cached_block_ids(&self) -> PyResult<Vec<u32>> {
        self.0
            .read("cached_block_ids", |p| Ok(ids(&p.cached_block_ids())))
    }

    /// Checks the pool's invariants (DESIGN.md §Block pool); raises `InternalError` (a bug) if one fails.
    fn check_invariants(&self) -> PyResult<()> {
        self.0.read("check_invariants", BlockPool::check_invariants)
    }

    /// Test hook: panics inside this pool's guard (tests/test_errors.py checks the poisoning).
    fn _panic_for_test(&mut self) -> PyResult<()> {
        self.0
            .write("_panic_for_test", |_| -> kvsim_core::Result<()> {
                panic!("deliberate test panic")
            })
    }
}

/// Per-request block tables over a block pool, with prefix caching and copy-on-write forks (vLLM's
/// `KVCacheManager`; DESIGN.md §A request's blocks).
///
/// `KVCacheManager(num_blocks, block_size, enable_caching=True, free_order="classic")`: a pool of
/// `num_blocks` blocks (block 0 is the null block) of `block_size` tokens. Request ids are ints in
/// `[0, 2**64)`; a request is known from its first successful `allocate` until `free`. A request's content
/// is a list of `(segment_id, length)` pairs: the first `length` tokens of content `segment_id`.
///
/// `request_id in manager` never raises: anything that is not a request id it holds (a float, a bool,
/// `None`, an int outside u64) is not in it, as with a dict.
///
/// Raises `InvalidArgumentError` for an argument of the wrong type, `block_size` outside
/// `1..2**64`, and whatever `BlockPool` raises for `num_blocks`, `enable_caching` and `free_order`.
#[pyclass(name = "KVCacheManager", module = "kvsim._core")]
struct PyKVCacheManager(Guarded<KVCacheManager>);

#[pymethods]
impl PyKVCacheManager {
    #[new]
    #[pyo3(
        signature = (num_blocks, block_size, enable_caching = default_true(), free_order = default_order()),
        text_signature = "(num_blocks, block_size, enable_caching=True, free_order='classic')"
    )]
    fn new<'py>(
        py: Python<'py>,
        num_blocks: &Bound<'py, PyAny>,
        block_size: &Bound<'py, PyAny>,
        enable_caching: Py<PyAny>,
        free_order: Py<PyAny>,
    ) -> PyResult<Self> {
        let bs = block_size_obj(block_size)?;
        let n = num_blocks_obj(num_blocks)?;
        let caching = bool_arg(enable_caching.bind(py), "enable_caching")?;
        let order = free_order_arg(free_order.bind(py))?;
        let manager = no_panic("KVCacheManager()", || {
            KVCacheManager::new(n, bs, caching, order)
        })
        .py()?;
        Ok(Self(Guarded::new(manager, "KVCacheManager")))
    }

    /// Blocks in the pool, the null block included.
    #[getter]
    fn num_blocks(&self) -> PyResult<u32> {
        self.0.read("num_blocks", |m| Ok(m.pool().num_blocks()))
    }
    /// Tokens per block.
    #[getter]
    fn block_size(&self) -> PyResult<u64> {
        self.0.read("block_size", |m| Ok(m.block_size()))
    }
    /// Whether full blocks are registered and looked up (prefix caching).
    #[getter]
    fn enable_caching(&self) -> PyResult<bool> {
        self.0
            .read("enable_caching", |m| Ok(m.pool().enable_caching()))
    }
    /// Blocks in the free queue (evictable cached ones included).
    #[getter]
    fn num_free_blocks(&self) -> PyResult<u32> {
        self.0
            .read("num_free_blocks", |m| Ok(m.pool().num_free_blocks()))
    }
    /// Keys dropped so far because their free block was handed out again.
    #[getter]
    fn num_evictions(&self) -> PyResult<u64> {
        self.0
            .read("num_evictions", |m| Ok(m.pool().num_evictions()))
    }
    /// Copies of a shared partial block made so far (copy-on-write after `fork`).
    #[getter]
    fn num_cow_copies(&self) -> PyResult<u64> {
        self.0.read("num_cow_copies", |m| Ok(m.num_cow_copies()))
    }
    /// Requests holding a block table.
    #[getter]
    fn num_requests(&self) -> PyResult<usize> {
        self.0.read("num_requests", |m| Ok(m.num_requests()))
    }

    /// `request_id in manager`: whether the request holds a table. Never raises: anything that is not a
    /// request id (a float, a bool, None, an int outside u64) is not in it, as with a dict.
    fn __contains__(&self, request_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let rid = int_arg(request_id, "request_id").ok().and_then(|v| v.u64());
        self.0
            .read("__contains__", |m| Ok(rid.is_some_and(|r| m.contains(r))))
    }

    /// Tokens a new request with content `segments` would find cached (whole blocks, at most all but
    /// the last token); changes nothing. Raises `InvalidArgumentError` for bad segments.
    fn lookup(&self, segments: &Bound<'_, PyAny>) -> PyResult<u64> {
        let segs = segments_arg(segments)?;
        self.0.read("lookup", |m| m.lookup(&segs))
    }

    /// Makes room for `num_new_tokens` more tokens of request `request_id`, whose content so far is
    /// `segments` (vLLM's `get_computed_blocks` + `allocate_slots`).
    ///
    /// On a request's first allocation its cached prefix is taken first and `num_new_tokens` counts from
    /// the end of that prefix. Returns the ids of the blocks it popped (a copy-on-write copy of a shared
    /// partial last block first), or `None`, changing nothing, when they do not fit.
    ///
    /// Raises `InvalidArgumentError` (changing nothing) for a `request_id` or `num_new_tokens` that is not
    /// an integer or is out of range (`num_new_tokens` in `1..2**64`), bad `segments`, or more tokens than
    /// `segments` describe.
    fn allocate(
        &mut self,
        request_id: &Bound<'_, PyAny>,
        segments: &Bound<'_, PyAny>,
        num_new_tokens: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Vec<u32>>> {
        let rid = request_id_arg(request_id)?;
        let segs = segments_arg(segments)?;
        let n = u64_in(num_new_tokens, "num_new_tokens", 1)?;
        self.0.write("allocate", |m| {
            Ok(m.allocate(rid, &segs, n)?.map(|v| ids(&v)))
        })
    }

    /// Releases the request's blocks in reverse table order and forgets it; an unknown id is a no-op.
    /// Raises `InvalidArgumentError` when `request_id` is not a u64.
    fn free(&mut self, request_id: &Bound<'_, PyAny>) -> PyResult<()> {
        let rid = request_id_arg(request_id)?;
        self.0.write("free", |m| {
            m.free(rid);
            Ok(())
        })
    }

    /// Makes `child_id` share every block of `parent_id` (`ref_cnt` + 1 each), as a new sample does.
    ///
    /// Raises `InvalidArgumentError` for an id that is not a u64, `InvalidOperationError` for an unknown
    /// parent or a child that already exists.
    fn fork(&mut self, parent_id: &Bound<'_, PyAny>, child_id: &Bound<'_, PyAny>) -> PyResult<()> {
        let parent = request_id_arg(parent_id)?;
        self.0.read("fork", |m| m.block_table(parent).map(|_| ()))?;
        let child = request_id_arg(child_id)?;
        self.0.write("fork", |m| m.fork(parent, child))
    }

    /// The request's block ids in token order. Raises `InvalidArgumentError` for an id that is not a
    /// u64, `InvalidOperationError` for an unknown request.
    fn block_table(&self, request_id: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
        let rid = request_id_arg(request_id)?;
        self.0.read("block_table", |m| Ok(ids(m.block_table(rid)?)))
    }

    /// Tokens the request's table holds. Raises as `block_table` does.
    fn num_computed_tokens(&self, request_id: &Bound<'_, PyAny>) -> PyResult<u64> {
        let rid = request_id_arg(request_id)?;
        self.0
            .read("num_computed_tokens", |m| m.num_computed_tokens(rid))
    }

    /// The pool's free queue, head (next handed out) first.
    fn free_block_ids(&self) -> PyResult<Vec<u32>> {
        self.0
            .read("free_block_ids", |m| Ok(ids(&m.pool().free_block_ids())))
    }

    /// Ascending ids of every block that carries a key (in use or evictable).
    fn cached_block_ids(&self) -> PyResult<Vec<u32>> {
        self.0.read("cached_block_ids", |m| {
            Ok(ids(&m.pool().cached_block_ids()))
        })
    }

    /// The reference count of `block_id`. Raises `InvalidArgumentError` for an id that is not an integer
    /// or is out of range.
    fn ref_cnt(&self, block_id: &Bound<'_, PyAny>) -> PyResult<u32> {
        let b = block_arg(block_id, self.0.core.pool().num_blocks())?;
        self.0.read("ref_cnt", |m| m.pool().ref_cnt(b))
    }

    /// The content key `block_id` carries, or `None`. Raises as `ref_cnt` does.
    fn block_hash(&self, block_id: &Bound<'_, PyAny>) -> PyResult<Option<u128>> {
        let b = block_arg(block_id, self.0.core.pool().num_blocks())?;
        self.0
            .read("block_hash", |m| Ok(m.pool().block_hash(b)?.map(|k| k.0)))
    }

    /// Checks the pool's and the tables' invariants (DESIGN.md §A request's blocks); raises
    /// `InternalError` (a bug) if one fails.
    fn check_invariants(&self) -> PyResult<()> {
        self.0
            .read("check_invariants", KVCacheManager::check_invariants)
    }

    /// Test hook: panics inside this manager's guard (tests/test_errors.py checks the poisoning).
    fn _panic_for_test(&mut self) -> PyResult<()> {
        self.0
            .write("_panic_for_test", |_| -> kvsim_core::Result<()> {
                panic!("deliberate test panic")
            })
    }
}

/// The keys of every full block of `segments` for `block_size`, with the documented hash (DESIGN.md
/// §Keys): a list of ints in `[0, 2**128)`, one per full block, chained from the first.
///
/// Raises `InvalidArgumentError` for bad segments or a `block_size` outside `1..2**64`.
#[pyfunction]
fn block_keys(segments: &Bound<'_, PyAny>, block_size: &Bound<'_, PyAny>) -> PyResult<Vec<u128>> {
    let segs = segments_arg(segments)?;
    let bs = block_size_obj(block_size)?;
    let keys = no_panic("block_keys", || kvsim_core::hash::block_keys(&segs, bs));
    Ok(keys.py()?.into_iter().map(|k| k.0).collect())
}

/// The bytes of bookkeeping a pool of `num_blocks` blocks may take (`num_blocks` ×
/// `POOL_BYTES_PER_BLOCK`), and the limit `BlockPool`, `KVCacheManager` and the engine check it against
/// (`KVSIM_MEMORY_LIMIT` bytes if set, else this machine's physical memory): `(needed, limit)`.
/// Raises `InvalidArgumentError` when `num_blocks` is not an integer in `2..=4294967293`.
#[pyfunction]
fn pool_memory(num_blocks: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
    let n = num_blocks_obj(num_blocks)?;
    Ok((
        u64::from(n) * POOL_BYTES_PER_BLOCK,
        kvsim_core::block_pool::memory_limit(),
    ))
}

fn slice<'a, T: numpy::Element>(a: &'a PyReadonlyArray1<'_, T>, name: &str) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| invalid(format!("column {name} must be a contiguous array")))
}

/// The engine's configuration from `run_engine`'s (and `Stream`'s) keyword arguments.
#[allow(clippy::too_many_arguments, clippy::fn_params_excessive_bools)]
fn engine_config(
    num_blocks: i128,
    block_size: i128,
    policy: &str,
    enable_prefix_caching: bool,
    free_order: &str,
    max_num_seqs: i128,
    max_num_batched_tokens: i128,
    chunked_prefill: bool,
    full_prompt_gate: bool,
    skip_over_budget: bool,
    watermark_blocks: i128,
    one_free_block: bool,
    max_model_len: Option<i128>,
    time_model: &str,
    iteration_time_ps: i128,
    c0_ps: i128,
    c_tok_ps: i128,
    c_ctx_ps: i128,
    preemption: &str,
    cpu_blocks: i128,
    swap_ps_per_block: i128,
    buddy: bool,
) -> PyResult<EngineConfig> {
    let time = match time_model {
        "ticks" => TimeModel::Ticks {
            iteration_ps: u64_arg(iteration_time_ps, "iteration_time_ps")?,
        },
        "linear" => TimeModel::Linear {
            c0_ps: u64_arg(c0_ps, "c0_ps")?,
            c_tok_ps: u64_arg(c_tok_ps, "c_tok_ps")?,
            c_ctx_ps: u64_arg(c_ctx_ps, "c_ctx_ps")?,
        },
        other => {
            return Err(invalid(format!(
                "time_model '{other}' is not one of 'ticks', 'linear'"
            )));
        }
    };
    Ok(EngineConfig {
        num_blocks: num_blocks_arg(num_blocks)?,
        block_size: block_size_arg(block_size)?,
        policy: Policy::parse(policy).py()?,
        enable_prefix_caching,
        free_order: FreeOrder::parse(free_order).py()?,
        max_num_seqs: u64_arg(max_num_seqs, "max_num_seqs")?,
        max_num_batched_tokens: u64_arg(max_num_batched_tokens, "max_num_batched_tokens")?,
        chunked_prefill,
        full_prompt_gate,
        skip_over_budget,
        watermark_blocks: u64_arg(watermark_blocks, "watermark_blocks")?,
        one_free_block,
        max_model_len: max_model_len
            .map(|v| u64_arg(v, "max_model_len"))
            .transpose()?,
        time,
        preemption: Preemption::parse(preemption).py()?,
        cpu_blocks: u64_arg(cpu_blocks, "cpu_blocks")?,
        swap_ps_per_block: u64_arg(swap_ps_per_block, "swap_ps_per_block")?,
        buddy,
    })
}

/// The per-sequence input columns as the core's view (each must be contiguous).
#[allow(clippy::too_many_arguments)]
fn input_view<'a>(
    arrival_ps: &'a PyReadonlyArray1<'_, i64>,
    prompt_len: &'a PyReadonlyArray1<'_, i64>,
    target: &'a PyReadonlyArray1<'_, i64>,
    max_gen: &'a PyReadonlyArray1<'_, i64>,
    fork_parent: &'a PyReadonlyArray1<'_, i64>,
    output_seg: &'a PyReadonlyArray1<'_, u64>,
    seg_offsets: &'a PyReadonlyArray1<'_, i64>,
    segment_id: &'a PyReadonlyArray1<'_, u64>,
    segment_len: &'a PyReadonlyArray1<'_, i64>,
) -> PyResult<EngineInput<'a>> {
    Ok(EngineInput {
        arrival_ps: slice(arrival_ps, "arrival_ps")?,
        prompt_len: slice(prompt_len, "prompt_len")?,
        target: slice(target, "target")?,
        max_gen: slice(max_gen, "max_gen")?,
        fork_parent: slice(fork_parent, "fork_parent")?,
        output_seg: slice(output_seg, "output_seg")?,
        seg_offsets: slice(seg_offsets, "seg_offsets")?,
        segment_id: slice(segment_id, "segment_id")?,
        segment_len: slice(segment_len, "segment_len")?,
    })
}

/// The output columns and counters as two dicts (`run_engine`'s result; `Stream.take_done`'s columns).
fn output_dicts(
    py: Python<'_>,
    output: engine::EngineOutput,
) -> PyResult<(Bound<'_, PyDict>, Bound<'_, PyDict>)> {
    let (columns, codes, counters) = output.columns();
    let cols = PyDict::new(py);
    for (name, values) in columns {
        cols.set_item(name, values.into_pyarray(py))?;
    }
    for (name, values) in codes {
        cols.set_item(name, values.into_pyarray(py))?;
    }
    Ok((cols, counters_dict(py, &counters)?))
}

fn counters_dict<'py>(
    py: Python<'py>,
    counters: &engine::Counters,
) -> PyResult<Bound<'py, PyDict>> {
    let ctrs = PyDict::new(py);
    for (name, value) in counters.pairs() {
        ctrs.set_item(name, value)?;
    }
    Ok(ctrs)
}

/// A run fed in chunks (`kvsim.simulate_stream`; the core's `StreamEngine`): `feed` a chunk's columns
/// (its `fork_parent` rows count from the chunk's first row; `independent`: see the core's
/// `StreamEngine`), `advance(final_input)` steps as far as
/// the input allows (GIL released, Ctrl-C raises `KeyboardInterrupt`), `take_done()` returns the
/// columns of the rows done so far, `counters()` the run's counters.
#[pyclass(name = "Stream", module = "kvsim._core")]
struct PyStream {
    core: engine::StreamEngine,
}

#[pymethods]
impl PyStream {
    #[new]
    #[pyo3(signature = (
        *, num_blocks, block_size, policy, enable_prefix_caching, free_order, max_num_seqs,
        max_num_batched_tokens, chunked_prefill, full_prompt_gate, skip_over_budget = false,
        watermark_blocks, one_free_block, max_model_len, time_model, iteration_time_ps, c0_ps, c_tok_ps,
        c_ctx_ps, preemption, cpu_blocks, swap_ps_per_block, buddy, forks, independent = false
    ))]
    #[allow(clippy::too_many_arguments, clippy::fn_params_excessive_bools)]
    fn new(
        py: Python<'_>,
        num_blocks: i128,
        block_size: i128,
        policy: &str,
        enable_prefix_caching: bool,
        free_order: &str,
        max_num_seqs: i128,
        max_num_batched_tokens: i128,
        chunked_prefill: bool,
        full_prompt_gate: bool,
        skip_over_budget: bool,
        watermark_blocks: i128,
        one_free_block: bool,
        max_model_len: Option<i128>,
        time_model: &str,
        iteration_time_ps: i128,
        c0_ps: i128,
        c_tok_ps: i128,
        c_ctx_ps: i128,
        preemption: &str,
        cpu_blocks: i128,
        swap_ps_per_block: i128,
        buddy: bool,
        forks: bool,
        independent: bool,
    ) -> PyResult<Self> {
        let cfg = engine_config(
            num_blocks,
            block_size,
            policy,
            enable_prefix_caching,
            free_order,
            max_num_seqs,
            max_num_batched_tokens,
            chunked_prefill,
            full_prompt_gate,
            skip_over_budget,
            watermark_blocks,
            one_free_block,
            max_model_len,
            time_model,
            iteration_time_ps,
            c0_ps,
            c_tok_ps,
            c_ctx_ps,
            preemption,
            cpu_blocks,
            swap_ps_per_block,
            buddy,
        )?;
        // The pool is built on a watched thread, so that Ctrl-C during a long setup raises at once.
        let (result, signal) = py.detach(|| {
            run_watched(|cancel| {
                no_panic("Stream()", || {
                    engine::StreamEngine::new_cancellable(cfg, forks, independent, Some(cancel))
                })
            })
        });
        if let Some(e) = signal {
            return Err(e);
        }
        Ok(PyStream { core: result.py()? })
    }

    /// Feeds the next chunk's per-sequence columns (`kvsim.engine.engine_input`, the same keywords as
    /// `run_engine`), in arrival order after every row fed before.
    ///
    /// Raises `InvalidArgumentError` for a column that is not contiguous or a chunk out of order, and
    /// `InternalError` on a bug.
    #[pyo3(signature = (
        *, arrival_ps, prompt_len, target, max_gen, fork_parent, output_seg, seg_offsets, segment_id,
        segment_len
    ))]
    #[allow(clippy::too_many_arguments)]
    fn feed(
        &mut self,
        arrival_ps: PyReadonlyArray1<'_, i64>,
        prompt_len: PyReadonlyArray1<'_, i64>,
        target: PyReadonlyArray1<'_, i64>,
        max_gen: PyReadonlyArray1<'_, i64>,
        fork_parent: PyReadonlyArray1<'_, i64>,
        output_seg: PyReadonlyArray1<'_, u64>,
        seg_offsets: PyReadonlyArray1<'_, i64>,
        segment_id: PyReadonlyArray1<'_, u64>,
        segment_len: PyReadonlyArray1<'_, i64>,
    ) -> PyResult<()> {
        let inp = input_view(
            &arrival_ps,
            &prompt_len,
            &target,
            &max_gen,
            &fork_parent,
            &output_seg,
            &seg_offsets,
            &segment_id,
            &segment_len,
        )?;
        let core = &mut self.core;
        no_panic("Stream.feed", || core.feed(inp)).py()
    }

    /// Takes every step that rows not fed yet cannot change (all of them when `final_input`), with the
    /// GIL released; Ctrl-C raises `KeyboardInterrupt`.
    ///
    /// Raises `InvalidArgumentError` for a step past the simulated clock, `InternalError` on a bug.
    fn advance(&mut self, py: Python<'_>, final_input: bool) -> PyResult<()> {
        let core = &mut self.core;
        let (result, signal) = py.detach(|| {
            run_watched(|cancel| no_panic("the engine", || core.advance(final_input, cancel)))
        });
        if let Some(e) = signal {
            return Err(e);
        }
        result.py()
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

/// Runs the engine over per-sequence columns (see `kvsim.engine.engine_input`) with the GIL released; returns
/// `(columns, counters)` as two dicts. Ctrl-C interrupts the run with `KeyboardInterrupt`.
///
/// The private entry point behind `kvsim.simulate(..., backend="rust")` (`kvsim.engine.rust_engine.run`), which
/// passes a validated `SimConfig`'s knobs by keyword and `EngineInput`'s contiguous numpy columns.
/// `columns` maps each per-sequence output column to an array, plus `"timeseries"` and `"events"` (dicts
/// of arrays, empty unless `timeseries_every > 0` / `record_events`) and `"itl"` (ITL's record: the
/// arrays `kvsim.engine.metrics.itl_values` reads, always); `counters` maps counter names to ints.
///
/// Raises `InvalidArgumentError` for a knob out of range or a column that is not contiguous, a pool too
/// large for the memory limit, or a step past the simulated clock; `InternalError` on a bug.
#[pyfunction]
#[pyo3(signature = (
    *, num_blocks, block_size, policy, enable_prefix_caching, free_order, max_num_seqs,
    max_num_batched_tokens, chunked_prefill, full_prompt_gate, skip_over_budget = false, watermark_blocks,
    one_free_block = false,
    max_model_len,
    time_model, iteration_time_ps, c0_ps, c_tok_ps, c_ctx_ps, preemption, cpu_blocks, swap_ps_per_block, buddy,
    timeseries_every, record_events,
    arrival_ps, prompt_len, target, max_gen, fork_parent, output_seg, seg_offsets, segment_id, segment_len
))]
#[allow(clippy::too_many_arguments, clippy::fn_params_excessive_bools)]
fn run_engine<'py>(
    py: Python<'py>,
    num_blocks: i128,
    block_size: i128,
    policy: &str,
    enable_prefix_caching: bool,
    free_order: &str,
    max_num_seqs: i128,
    max_num_batched_tokens: i128,
    chunked_prefill: bool,
    full_prompt_gate: bool,
    skip_over_budget: bool,
    watermark_blocks: i128,
    one_free_block: bool,
    max_model_len: Option<i128>,
    time_model: &str,
    iteration_time_ps: i128,
    c0_ps: i128,
    c_tok_ps: i128,
    c_ctx_ps: i128,
    preemption: &str,
    cpu_blocks: i128,
    swap_ps_per_block: i128,
    buddy: bool,
    timeseries_every: i128,
    record_events: bool,
    arrival_ps: PyReadonlyArray1<'py, i64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    target: PyReadonlyArray1<'py, i64>,
    max_gen: PyReadonlyArray1<'py, i64>,
    fork_parent: PyReadonlyArray1<'py, i64>,
    output_seg: PyReadonlyArray1<'py, u64>,
    seg_offsets: PyReadonlyArray1<'py, i64>,
    segment_id: PyReadonlyArray1<'py, u64>,
    segment_len: PyReadonlyArray1<'py, i64>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let cfg = engine_config(
        num_blocks,
        block_size,
        policy,
        enable_prefix_caching,
        free_order,
        max_num_seqs,
        max_num_batched_tokens,
        chunked_prefill,
        full_prompt_gate,
        skip_over_budget,
        watermark_blocks,
        one_free_block,
        max_model_len,
        time_model,
        iteration_time_ps,
        c0_ps,
        c_tok_ps,
        c_ctx_ps,
        preemption,
        cpu_blocks,
        swap_ps_per_block,
        buddy,
    )?;
    let timeseries_every = u64_arg(timeseries_every, "timeseries_every")?;
    let inp = input_view(
        &arrival_ps,
        &prompt_len,
        &target,
        &max_gen,
        &fork_parent,
        &output_seg,
        &seg_offsets,
        &segment_id,
        &segment_len,
    )?;
    let (result, signal) = py.detach(|| {
        run_watched(|cancel| {
            no_panic("the engine", || {
                engine::run(inp, &cfg, timeseries_every, record_events, cancel)
            })
        })
    });
    if let Some(e) = signal {
        return Err(e);
    }
    let output = result.py()?;
    let series = PyDict::new(py);
    if timeseries_every > 0 {
        for (name, values) in output.timeseries_columns() {
            series.set_item(name, values.into_pyarray(py))?;
        }
    }
    let events = PyDict::new(py);
    if record_events {
        for (name, values) in output.event_columns() {
            events.set_item(name, values.into_pyarray(py))?;
        }
    }
    let itl = PyDict::new(py);
    for (name, values) in output.itl_columns() {
        itl.set_item(name, values.into_pyarray(py))?;
    }
    let (cols, ctrs) = output_dicts(py, output)?;
    cols.set_item("timeseries", series)?;
    cols.set_item("events", events)?;
    cols.set_item("itl", itl)?;
    Ok((cols, ctrs))
}

/// The keys of one replica's config dict (`run_cluster`'s `configs`): `run_engine`'s engine keywords.
const CONFIG_KEYS: [&str; 22] = [
    "num_blocks",
    "block_size",
    "policy",
    "enable_prefix_caching",
    "free_order",
    "max_num_seqs",
    "max_num_batched_tokens",
    "chunked_prefill",
    "full_prompt_gate",
    "skip_over_budget",
    "watermark_blocks",
    "one_free_block",
    "max_model_len",
    "time_model",
    "iteration_time_ps",
    "c0_ps",
    "c_tok_ps",
    "c_ctx_ps",
    "preemption",
    "cpu_blocks",
    "swap_ps_per_block",
    "buddy",
];

/// One replica's engine config from a dict of `run_engine`'s engine keyword arguments (`skip_over_budget`
/// and `one_free_block` default to false, as there); a missing or unknown key, or a value of the wrong
/// type, is an `InvalidArgumentError` naming `configs[r]` and the key.
fn config_from_dict(r: usize, d: &Bound<'_, PyAny>) -> PyResult<EngineConfig> {
    let d = d
        .cast::<PyDict>()
        .map_err(|_| invalid(format!("configs[{r}] {} must be a dict", repr(d))))?;
    for (k, _) in d.iter() {
        let name: String = k
            .extract()
            .map_err(|_| invalid(format!("configs[{r}]: key {} is not a string", repr(&k))))?;
        if !CONFIG_KEYS.contains(&name.as_str()) {
            return Err(invalid(format!(
                "configs[{r}]: unknown key '{name}' (the keys are run_engine's engine arguments: {})",
                CONFIG_KEYS.join(", ")
            )));
        }
    }
    let get = |key: &str| -> PyResult<Option<Bound<'_, PyAny>>> { d.get_item(key) };
    let need = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        get(key)?.ok_or_else(|| invalid(format!("configs[{r}]: missing key '{key}'")))
    };
    let int = |key: &str| -> PyResult<i128> {
        Ok(int_arg_named(&need(key)?, || format!("configs[{r}]['{key}']"))?.value)
    };
    let flag = |key: &str, default: Option<bool>| -> PyResult<bool> {
        match (get(key)?, default) {
            (None, Some(v)) => Ok(v),
            (None, None) => Err(invalid(format!("configs[{r}]: missing key '{key}'"))),
            (Some(v), _) => bool_arg(&v, &format!("configs[{r}]['{key}']")),
        }
    };
    let text = |key: &str| -> PyResult<String> {
        let v = need(key)?;
        v.extract()
            .map_err(|_| invalid(format!("configs[{r}]['{key}'] {} must be a str", repr(&v))))
    };
    let max_model_len = match get("max_model_len")? {
        None => {
            return Err(invalid(format!(
                "configs[{r}]: missing key 'max_model_len'"
            )));
        }
        Some(v) if v.is_none() => None,
        Some(v) => Some(int_arg_named(&v, || format!("configs[{r}]['max_model_len']"))?.value),
    };
    engine_config(
        int("num_blocks")?,
        int("block_size")?,
        &text("policy")?,
        flag("enable_prefix_caching", None)?,
        &text("free_order")?,
        int("max_num_seqs")?,
        int("max_num_batched_tokens")?,
        flag("chunked_prefill", None)?,
        flag("full_prompt_gate", None)?,
        flag("skip_over_budget", Some(false))?,
        int("watermark_blocks")?,
        flag("one_free_block", Some(false))?,
        max_model_len,
        &text("time_model")?,
        int("iteration_time_ps")?,
        int("c0_ps")?,
        int("c_tok_ps")?,
        int("c_ctx_ps")?,
        &text("preemption")?,
        int("cpu_blocks")?,
        int("swap_ps_per_block")?,
        flag("buddy", None)?,
    )
    .map_err(|e| {
        if e.is_instance_of::<errors::InvalidArgumentError>(d.py()) {
            invalid(format!("configs[{r}]: {}", e.value(d.py())))
        } else {
            e
        }
    })
}

/// `router_weights`: a dict of scorer name to a number (or None: the defaults).
fn weights_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<(String, f64)>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    let d = obj.cast::<PyDict>().map_err(|_| {
        invalid(format!(
            "router_weights {} must be a dict or None",
            repr(obj)
        ))
    })?;
    let mut pairs = Vec::with_capacity(d.len());
    for (k, v) in d.iter() {
        let name: String = k
            .extract()
            .map_err(|_| invalid(format!("router_weights: key {} is not a string", repr(&k))))?;
        let value: f64 = if v.is_instance_of::<PyBool>() {
            return Err(invalid(format!(
                "router_weights['{name}'] {} must be a number",
                repr(&v)
            )));
        } else {
            v.extract().map_err(|_| {
                invalid(format!(
                    "router_weights['{name}'] {} must be a number",
                    repr(&v)
                ))
            })?
        };
        pairs.push((name, value));
    }
    Ok(Some(pairs))
}

/// Runs the workload's per-sequence columns (`run_engine`'s) on a cluster of replicas behind a router,
/// on one clock, with the GIL released (`kvsim_core::cluster::run_cluster`; DESIGN.md §Cluster).
/// Ctrl-C interrupts it with `KeyboardInterrupt`.
///
/// `configs`: one dict per replica of `run_engine`'s engine keyword arguments
/// (`kvsim.engine.rust_engine.config_kwargs`); `router`: one of `round-robin`, `random`, `least-loaded`,
/// `least-kv`, `prefix-affinity`, `weighted`, with `router_seed` (random), `router_refresh_ps` (0: exact
/// view), `prefix_load_cap`, `router_weights` (weighted: scorer name to weight; None: the defaults) and
/// `router_tie_break` (`random`, the default: a tie among the best replicas is drawn from the
/// `router_seed` stream; `lowest`: the lowest index). Time series and event logs are not recorded for clusters (`timeseries_every` must be 0 and
/// `record_events` false).
///
/// Returns a dict: `outputs` (every row's output columns, in workload order, as `run_engine`'s),
/// `replica` (each row's replica, int64) and `counters` (one dict per replica, as `run_engine`'s).
///
/// Raises `InvalidArgumentError` for an empty or bad `configs`, an unknown router, a negative refresh
/// or seed, a `prefix_load_cap` below 1 or not finite, unknown or negative weights, an unknown
/// `router_tie_break`, and everything
/// `run_engine` refuses; `InternalError` on a bug.
#[pyfunction]
#[pyo3(signature = (
    *, configs, router, router_seed = None, router_refresh_ps = None, prefix_load_cap = None,
    router_weights = None, router_tie_break = None, timeseries_every = 0, record_events = false,
    arrival_ps, prompt_len, target, max_gen, fork_parent, output_seg, seg_offsets, segment_id, segment_len
), text_signature = "(*, configs, router, router_seed=0, router_refresh_ps=0, prefix_load_cap=1.5, router_weights=None, router_tie_break='random', timeseries_every=0, record_events=False, arrival_ps, prompt_len, target, max_gen, fork_parent, output_seg, seg_offsets, segment_id, segment_len)")]
#[allow(clippy::too_many_arguments)]
fn run_cluster<'py>(
    py: Python<'py>,
    configs: &Bound<'py, PyAny>,
    router: &Bound<'py, PyAny>,
    router_seed: Option<Bound<'py, PyAny>>,
    router_refresh_ps: Option<Bound<'py, PyAny>>,
    prefix_load_cap: Option<Bound<'py, PyAny>>,
    router_weights: Option<Bound<'py, PyAny>>,
    router_tie_break: Option<Bound<'py, PyAny>>,
    timeseries_every: i128,
    record_events: bool,
    arrival_ps: PyReadonlyArray1<'py, i64>,
    prompt_len: PyReadonlyArray1<'py, i64>,
    target: PyReadonlyArray1<'py, i64>,
    max_gen: PyReadonlyArray1<'py, i64>,
    fork_parent: PyReadonlyArray1<'py, i64>,
    output_seg: PyReadonlyArray1<'py, u64>,
    seg_offsets: PyReadonlyArray1<'py, i64>,
    segment_id: PyReadonlyArray1<'py, u64>,
    segment_len: PyReadonlyArray1<'py, i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let cfgs = items(configs, "configs must be a list of dicts")?
        .iter()
        .enumerate()
        .map(|(r, d)| config_from_dict(r, d))
        .collect::<PyResult<Vec<_>>>()?;
    if timeseries_every != 0 {
        return Err(invalid(format!(
            "timeseries_every {timeseries_every}: clusters record no time series (use 0)"
        )));
    }
    if record_events {
        return Err(invalid(
            "record_events True: clusters record no event log (use False)".into(),
        ));
    }
    let router: String = router
        .extract()
        .map_err(|_| invalid(format!("router {} must be a str", repr(router))))?;
    let seed = match &router_seed {
        Some(v) => u64_in(v, "router_seed", 0)?,
        None => 0,
    };
    let refresh = match &router_refresh_ps {
        Some(v) => int_arg(v, "router_refresh_ps")?,
        None => IntArg {
            value: 0,
            huge: None,
        },
    };
    let refresh = i64::try_from(refresh.value).map_err(|_| {
        invalid(format!(
            "router_refresh_ps {refresh} must be between 0 and {}",
            i64::MAX
        ))
    })?;
    let cap: f64 = match &prefix_load_cap {
        None => 1.5,
        Some(v) if v.is_instance_of::<PyBool>() => {
            return Err(invalid(format!(
                "prefix_load_cap {} must be a number",
                repr(v)
            )));
        }
        Some(v) => v
            .extract()
            .map_err(|_| invalid(format!("prefix_load_cap {} must be a number", repr(v))))?,
    };
    let weights = weights_arg(router_weights.as_ref())?;
    let tie_break = match &router_tie_break {
        None => TieBreak::default(),
        Some(v) => {
            let name: String = v
                .extract()
                .map_err(|_| invalid(format!("router_tie_break {} must be a str", repr(v))))?;
            TieBreak::parse(&name).py()?
        }
    };
    let spec = RouterSpec::new(&router, seed, refresh, cap, weights.as_deref())
        .py()?
        .with_tie_break(tie_break);
    let inp = input_view(
        &arrival_ps,
        &prompt_len,
        &target,
        &max_gen,
        &fork_parent,
        &output_seg,
        &seg_offsets,
        &segment_id,
        &segment_len,
    )?;
    let (result, signal) = py.detach(|| {
        run_watched(|cancel| {
            no_panic("the cluster", || {
                kvsim_core::cluster::run_cluster(inp, &cfgs, &spec, cancel)
            })
        })
    });
    if let Some(e) = signal {
        return Err(e);
    }
    let ClusterOutput {
        out,
        replica,
        counters,
    } = result.py()?;
    let (cols, _) = output_dicts(py, out)?;
    let result = PyDict::new(py);
    result.set_item("outputs", cols)?;
    result.set_item("replica", replica.into_pyarray(py))?;
    let list = PyList::empty(py);
    for c in &counters {
        list.append(counters_dict(py, c)?)?;
    }
    result.set_item("counters", list)?;
    Ok(result)
}

/// How often the watcher of a running engine checks for Ctrl-C (Python's pending signals).
const SIGNAL_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Runs `work` on a worker thread while this thread (GIL released) checks Python's signals every
/// `SIGNAL_POLL`; a pending signal (Ctrl-C: `KeyboardInterrupt`) sets the cancel flag the engine reads
/// between units of work, and comes back with the result. Signal handlers run on Python's main thread
/// only, so the check is made here and not by the worker; on other threads it finds nothing, as before.
fn run_watched<T: Send>(
    work: impl FnOnce(&AtomicBool) -> kvsim_core::Result<T> + Send,
) -> (kvsim_core::Result<T>, Option<PyErr>) {
    let cancel = AtomicBool::new(false);
    let mut signal = None;
    let watcher = std::thread::current();
    let result = std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("kvsim-engine".into())
            .stack_size(8 << 20)
            .spawn_scoped(scope, || {
                let out = work(&cancel);
                watcher.unpark();
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
        while !worker.is_finished() {
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
fn no_panic<T>(what: &str, f: impl FnOnce() -> kvsim_core::Result<T>) -> kvsim_core::Result<T> {
    catch_panic(|| what.to_owned(), f).and_then(|r| r)
}

/// A core object behind a Python class. Its operations run under `catch_panic`; after a panic its state
/// may be half-changed, so it is *poisoned*: every later operation raises `InternalError` as well.
struct Guarded<T> {
    core: T,
    class: &'static str,
    poisoned: AtomicBool,
}

impl<T> Guarded<T> {
    fn new(core: T, class: &'static str) -> Self {
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
    fn read<R>(&self, op: &str, f: impl FnOnce(&T) -> kvsim_core::Result<R>) -> PyResult<R> {
        self.check(op)?;
        let r = catch_panic(|| format!("{}.{op}", self.class), || f(&self.core));
        self.settle(r)
    }

    /// Runs the mutating operation `op` under the guard.
    fn write<R>(
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
fn _panic_in_guard(py: Python<'_>) -> PyResult<()> {
    py.detach(|| {
        no_panic("the engine", || -> kvsim_core::Result<()> {
            panic!("deliberate test panic")
        })
    })
    .py()
}

/// Pops `ops` blocks from a free queue of `num_blocks` and pushes them back, nothing else (GIL
/// released): the floor `bench/` compares the engine's time with. Returns a checksum of the ids popped.
///
/// Benchmark use only. Raises `InvalidArgumentError` for `num_blocks` outside `2..=4294967293` (or past
/// the memory limit) or a negative `ops`.
#[pyfunction]
fn free_list_floor(py: Python<'_>, num_blocks: i128, ops: i128) -> PyResult<u64> {
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
fn step_floor<'py>(
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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBlockPool>()?;
    m.add_class::<PyKVCacheManager>()?;
    m.add_class::<PyStream>()?;
    m.add_function(wrap_pyfunction!(block_keys, m)?)?;
    m.add_function(wrap_pyfunction!(pool_memory, m)?)?;
    m.add("POOL_BYTES_PER_BLOCK", POOL_BYTES_PER_BLOCK)?;
    m.add("MAX_BLOCKS", MAX_BLOCKS)?;
    m.add_function(wrap_pyfunction!(run_engine, m)?)?;
    m.add_function(wrap_pyfunction!(run_cluster, m)?)?;
    m.add_function(wrap_pyfunction!(free_list_floor, m)?)?;
    m.add_function(wrap_pyfunction!(step_floor, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_in_guard, m)?)?;
    Ok(())
}
