//! `BlockPool`: the core's block pool behind a Python class, and the two free functions of the pool's
//! layer (`block_keys`, `pool_memory`).

use crate::args::{
    block_arg, block_size_obj, blocks_arg, bool_arg, default_order, default_true, free_order_arg,
    int_arg, key_arg, num_blocks_obj, repr, segments_arg,
};
use crate::errors::{IntoPyResult, invalid};
use crate::guard::{Guarded, no_panic};
use kvsim_core::block_pool::POOL_BYTES_PER_BLOCK;
use kvsim_core::{BlockId, BlockKey, BlockPool};
use pyo3::prelude::*;

/// Block ids as Python sees them.
pub(crate) fn ids(v: &[BlockId]) -> Vec<u32> {
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
pub(crate) struct PyBlockPool(Guarded<BlockPool>);

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

/// The keys of every full block of `segments` for `block_size`, with the documented hash (DESIGN.md
/// §Keys): a list of ints in `[0, 2**128)`, one per full block, chained from the first.
///
/// Raises `InvalidArgumentError` for bad segments or a `block_size` outside `1..2**64`.
#[pyfunction]
pub(crate) fn block_keys(
    segments: &Bound<'_, PyAny>,
    block_size: &Bound<'_, PyAny>,
) -> PyResult<Vec<u128>> {
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
pub(crate) fn pool_memory(num_blocks: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
    let n = num_blocks_obj(num_blocks)?;
    Ok((
        u64::from(n) * POOL_BYTES_PER_BLOCK,
        kvsim_core::block_pool::memory_limit(),
    ))
}
