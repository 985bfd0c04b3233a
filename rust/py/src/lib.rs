//! `kvsim._core`: thin PyO3 wrappers over kvsim-core. Each method converts its arguments, calls the core
//! once and converts the result; domain logic lives in the core.

// PyO3 extracts arguments into owned values; borrowing them is not an option at this boundary.
#![allow(clippy::needless_pass_by_value)]
// `Python::check_signals` as a path does not satisfy `attach`'s higher-ranked closure bound.
#![allow(clippy::redundant_closure_for_method_calls)]

use kvsim_core::block_pool::MAX_BLOCKS;
use kvsim_core::engine::{self, EngineConfig, EngineInput, Policy, Preemption, TimeModel};
use kvsim_core::{BlockId, BlockKey, BlockPool, FreeOrder, KVCacheManager, KvError, Segment};
use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;
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

/// Python ints arrive as i128 so that negative or huge values get kvsim's error, not an `OverflowError`.
fn u64_arg(v: i128, what: &str) -> PyResult<u64> {
    u64::try_from(v).map_err(|_| invalid(format!("{what} {v} is not a u64")))
}

fn num_blocks_arg(v: i128) -> PyResult<u32> {
    if (2..=i128::from(MAX_BLOCKS)).contains(&v) {
        Ok(v as u32)
    } else {
        Err(invalid(format!(
            "num_blocks {v} must be between 2 and {MAX_BLOCKS} (block 0 is the null block)"
        )))
    }
}

fn block_size_arg(v: i128) -> PyResult<u64> {
    if v < 1 {
        return Err(invalid(format!("block_size {v} must be at least 1")));
    }
    u64_arg(v, "block_size")
}

/// A block id for a pool of `n` blocks; ids beyond i64 get the core's out-of-range message.
fn block_arg(v: i128, n: u32) -> PyResult<i64> {
    i64::try_from(v).map_err(|_| invalid(format!("block id {v} is out of range 0..{}", n - 1)))
}

fn blocks_arg(v: &[i128], n: u32) -> Vec<i64> {
    // Out-of-i64 ids become -1 so that the core reports them in list order, as the reference does.
    v.iter().map(|&b| block_arg(b, n).unwrap_or(-1)).collect()
}

fn segments_arg(v: &[(i128, i128)]) -> PyResult<Vec<Segment>> {
    v.iter()
        .enumerate()
        .map(|(i, &(id, len))| {
            let id = u64::try_from(id)
                .map_err(|_| invalid(format!("segment {i}: id {id} is not a u64")))?;
            if len < 1 {
                return Err(invalid(format!(
                    "segment {i}: length {len} must be at least 1"
                )));
            }
            Ok(Segment::new(id, u64_arg(len, "segment length")?))
        })
        .collect()
}

fn ids(v: &[BlockId]) -> Vec<u32> {
    v.iter().map(|b| b.0).collect()
}

/// Low-level block pool: reference counts, free queue (head = next handed out), prefix map.
#[pyclass(name = "BlockPool", module = "kvsim._core")]
struct PyBlockPool(Guarded<BlockPool>);

#[pymethods]
impl PyBlockPool {
    #[new]
    #[pyo3(signature = (num_blocks, enable_caching = true, free_order = "classic"))]
    fn new(num_blocks: i128, enable_caching: bool, free_order: &str) -> PyResult<Self> {
        let n = num_blocks_arg(num_blocks)?;
        let order = FreeOrder::parse(free_order).py()?;
        let pool = no_panic("BlockPool()", || BlockPool::new(n, enable_caching, order)).py()?;
        Ok(Self(Guarded::new(pool, "BlockPool")))
    }

    #[getter]
    fn num_blocks(&self) -> PyResult<u32> {
        self.0.read("num_blocks", |p| Ok(p.num_blocks()))
    }
    #[getter]
    fn capacity(&self) -> PyResult<u32> {
        self.0.read("capacity", |p| Ok(p.capacity()))
    }
    #[getter]
    fn num_free_blocks(&self) -> PyResult<u32> {
        self.0.read("num_free_blocks", |p| Ok(p.num_free_blocks()))
    }
    #[getter]
    fn num_evictions(&self) -> PyResult<u64> {
        self.0.read("num_evictions", |p| Ok(p.num_evictions()))
    }
    #[getter]
    fn enable_caching(&self) -> PyResult<bool> {
        self.0.read("enable_caching", |p| Ok(p.enable_caching()))
    }
    #[getter]
    fn free_order(&self) -> PyResult<&'static str> {
        self.0.read("free_order", |p| Ok(p.free_order().as_str()))
    }

    fn allocate(&mut self, num: i128) -> PyResult<Option<Vec<u32>>> {
        if num < 0 {
            return Err(invalid(format!(
                "cannot allocate {num} blocks: the count must not be negative"
            )));
        }
        let num = u32::try_from(num).unwrap_or(u32::MAX);
        self.0
            .write("allocate", |p| Ok(p.allocate(num).map(|v| ids(&v))))
    }

    fn free(&mut self, block_ids: Vec<i128>) -> PyResult<()> {
        let b = blocks_arg(&block_ids, self.0.core.num_blocks());
        self.0.write("free", |p| p.free(&b))
    }

    fn touch(&mut self, block_ids: Vec<i128>) -> PyResult<()> {
        let b = blocks_arg(&block_ids, self.0.core.num_blocks());
        self.0.write("touch", |p| p.touch(&b))
    }

    fn register(&mut self, block_id: i128, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = key
            .extract::<u128>()
            .map_err(|_| invalid(format!("key {key} is not a u128")))?;
        let b = block_arg(block_id, self.0.core.num_blocks())?;
        self.0.write("register", |p| p.register(b, BlockKey(k)))
    }

    fn lookup(&self, key: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
        let Ok(k) = key.extract::<u128>() else {
            return Ok(None);
        };
        self.0
            .read("lookup", |p| Ok(p.lookup(BlockKey(k)).map(|b| b.0)))
    }

    fn ref_cnt(&self, block_id: i128) -> PyResult<u32> {
        let b = block_arg(block_id, self.0.core.num_blocks())?;
        self.0.read("ref_cnt", |p| p.ref_cnt(b))
    }

    fn block_hash(&self, block_id: i128) -> PyResult<Option<u128>> {
        let b = block_arg(block_id, self.0.core.num_blocks())?;
        self.0
            .read("block_hash", |p| Ok(p.block_hash(b)?.map(|k| k.0)))
    }

    fn free_block_ids(&self) -> PyResult<Vec<u32>> {
        self.0
            .read("free_block_ids", |p| Ok(ids(&p.free_block_ids())))
    }

    fn cached_block_ids(&self) -> PyResult<Vec<u32>> {
        self.0
            .read("cached_block_ids", |p| Ok(ids(&p.cached_block_ids())))
    }

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

/// Per-request block tables over a block pool, with prefix caching and copy-on-write forks.
#[pyclass(name = "KVCacheManager", module = "kvsim._core")]
struct PyKVCacheManager(Guarded<KVCacheManager>);

#[pymethods]
impl PyKVCacheManager {
    #[new]
    #[pyo3(signature = (num_blocks, block_size, enable_caching = true, free_order = "classic"))]
    fn new(
        num_blocks: i128,
        block_size: i128,
        enable_caching: bool,
        free_order: &str,
    ) -> PyResult<Self> {
        let bs = block_size_arg(block_size)?;
        let n = num_blocks_arg(num_blocks)?;
        let order = FreeOrder::parse(free_order).py()?;
        let manager = no_panic("KVCacheManager()", || {
            KVCacheManager::new(n, bs, enable_caching, order)
        })
        .py()?;
        Ok(Self(Guarded::new(manager, "KVCacheManager")))
    }

    #[getter]
    fn num_blocks(&self) -> PyResult<u32> {
        self.0.read("num_blocks", |m| Ok(m.pool().num_blocks()))
    }
    #[getter]
    fn block_size(&self) -> PyResult<u64> {
        self.0.read("block_size", |m| Ok(m.block_size()))
    }
    #[getter]
    fn enable_caching(&self) -> PyResult<bool> {
        self.0
            .read("enable_caching", |m| Ok(m.pool().enable_caching()))
    }
    #[getter]
    fn num_free_blocks(&self) -> PyResult<u32> {
        self.0
            .read("num_free_blocks", |m| Ok(m.pool().num_free_blocks()))
    }
    #[getter]
    fn num_evictions(&self) -> PyResult<u64> {
        self.0
            .read("num_evictions", |m| Ok(m.pool().num_evictions()))
    }
    #[getter]
    fn num_cow_copies(&self) -> PyResult<u64> {
        self.0.read("num_cow_copies", |m| Ok(m.num_cow_copies()))
    }
    #[getter]
    fn num_requests(&self) -> PyResult<usize> {
        self.0.read("num_requests", |m| Ok(m.num_requests()))
    }

    fn __contains__(&self, request_id: i128) -> PyResult<bool> {
        self.0.read("__contains__", |m| {
            Ok(u64::try_from(request_id).is_ok_and(|r| m.contains(r)))
        })
    }

    fn lookup(&self, segments: Vec<(i128, i128)>) -> PyResult<u64> {
        let segs = segments_arg(&segments)?;
        self.0.read("lookup", |m| m.lookup(&segs))
    }

    fn allocate(
        &mut self,
        request_id: i128,
        segments: Vec<(i128, i128)>,
        num_new_tokens: i128,
    ) -> PyResult<Option<Vec<u32>>> {
        let rid = u64_arg(request_id, "request_id")?;
        let segs = segments_arg(&segments)?;
        kvsim_core::hash::validate_segments(&segs).py()?;
        if num_new_tokens < 1 {
            return Err(invalid(format!(
                "num_new_tokens {num_new_tokens} must be at least 1"
            )));
        }
        let n = u64_arg(num_new_tokens, "num_new_tokens")?;
        self.0.write("allocate", |m| {
            Ok(m.allocate(rid, &segs, n)?.map(|v| ids(&v)))
        })
    }

    fn free(&mut self, request_id: i128) -> PyResult<()> {
        let rid = u64_arg(request_id, "request_id")?;
        self.0.write("free", |m| {
            m.free(rid);
            Ok(())
        })
    }

    fn fork(&mut self, parent_id: i128, child_id: i128) -> PyResult<()> {
        let parent = u64_arg(parent_id, "request_id")?;
        self.0.read("fork", |m| m.block_table(parent).map(|_| ()))?;
        let child = u64_arg(child_id, "request_id")?;
        self.0.write("fork", |m| m.fork(parent, child))
    }

    fn block_table(&self, request_id: i128) -> PyResult<Vec<u32>> {
        let rid = u64_arg(request_id, "request_id")?;
        self.0.read("block_table", |m| Ok(ids(m.block_table(rid)?)))
    }

    fn num_computed_tokens(&self, request_id: i128) -> PyResult<u64> {
        let rid = u64_arg(request_id, "request_id")?;
        self.0
            .read("num_computed_tokens", |m| m.num_computed_tokens(rid))
    }

    fn free_block_ids(&self) -> PyResult<Vec<u32>> {
        self.0
            .read("free_block_ids", |m| Ok(ids(&m.pool().free_block_ids())))
    }

    fn cached_block_ids(&self) -> PyResult<Vec<u32>> {
        self.0.read("cached_block_ids", |m| {
            Ok(ids(&m.pool().cached_block_ids()))
        })
    }

    fn ref_cnt(&self, block_id: i128) -> PyResult<u32> {
        let b = block_arg(block_id, self.0.core.pool().num_blocks())?;
        self.0.read("ref_cnt", |m| m.pool().ref_cnt(b))
    }

    fn block_hash(&self, block_id: i128) -> PyResult<Option<u128>> {
        let b = block_arg(block_id, self.0.core.pool().num_blocks())?;
        self.0
            .read("block_hash", |m| Ok(m.pool().block_hash(b)?.map(|k| k.0)))
    }

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

/// Keys of every full block the segments describe, with the documented hash (DESIGN.md §Keys).
#[pyfunction]
fn block_keys(segments: Vec<(i128, i128)>, block_size: i128) -> PyResult<Vec<u128>> {
    let segs = segments_arg(&segments)?;
    kvsim_core::hash::validate_segments(&segs).py()?;
    let bs = block_size_arg(block_size)?;
    let keys = no_panic("block_keys", || kvsim_core::hash::block_keys(&segs, bs));
    Ok(keys.py()?.into_iter().map(|k| k.0).collect())
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
        max_num_batched_tokens, chunked_prefill, full_prompt_gate, watermark_blocks, one_free_block,
        max_model_len, time_model, iteration_time_ps, c0_ps, c_tok_ps, c_ctx_ps, preemption, cpu_blocks,
        swap_ps_per_block, buddy, forks, independent = false
    ))]
    #[allow(clippy::too_many_arguments, clippy::fn_params_excessive_bools)]
    fn new(
        num_blocks: i128,
        block_size: i128,
        policy: &str,
        enable_prefix_caching: bool,
        free_order: &str,
        max_num_seqs: i128,
        max_num_batched_tokens: i128,
        chunked_prefill: bool,
        full_prompt_gate: bool,
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
        let core = no_panic("Stream()", || {
            engine::StreamEngine::new(cfg, forks, independent)
        })
        .py()?;
        Ok(PyStream { core })
    }

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

    fn take_done<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let core = &mut self.core;
        let out = no_panic("Stream.take_done", || Ok(core.take_done())).py()?;
        Ok(output_dicts(py, out)?.0)
    }

    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counters_dict(py, &self.core.counters())
    }
}

/// Runs the engine over per-sequence columns (see `kvsim.engine_input`) with the GIL released; returns
/// `(columns, counters)` as two dicts. Ctrl-C interrupts the run with `KeyboardInterrupt`.
#[pyfunction]
#[pyo3(signature = (
    *, num_blocks, block_size, policy, enable_prefix_caching, free_order, max_num_seqs,
    max_num_batched_tokens, chunked_prefill, full_prompt_gate, watermark_blocks, one_free_block = false,
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
    let (cols, ctrs) = output_dicts(py, output)?;
    cols.set_item("timeseries", series)?;
    cols.set_item("events", events)?;
    Ok((cols, ctrs))
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
/// released): the floor `bench/` compares the engine's time with. Returns a checksum.
#[pyfunction]
fn free_list_floor(py: Python<'_>, num_blocks: u32, ops: u64) -> u64 {
    py.detach(|| kvsim_core::floor::free_list_floor(num_blocks, ops))
}

/// The least work of a step-exact engine on these rows (`kvsim_core::floor::step_floor`; GIL released):
/// returns `(steps, block_allocations, finished, checksum)`.
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
    m.add_function(wrap_pyfunction!(run_engine, m)?)?;
    m.add_function(wrap_pyfunction!(free_list_floor, m)?)?;
    m.add_function(wrap_pyfunction!(step_floor, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_in_guard, m)?)?;
    Ok(())
}
