//! `KVCacheManager`: the core's per-request block tables behind a Python class.

use crate::args::{
    block_arg, block_size_obj, bool_arg, default_order, default_true, free_order_arg, int_arg,
    num_blocks_obj, request_id_arg, segments_arg, u64_in,
};
use crate::errors::IntoPyResult;
use crate::guard::{Guarded, no_panic};
use crate::pool::ids;
use kvsim_core::KVCacheManager;
use pyo3::prelude::*;

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
pub(crate) struct PyKVCacheManager(Guarded<KVCacheManager>);

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
