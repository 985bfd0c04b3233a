//! `CpuTier`: the core's CPU tier (vLLM's native offloading in host memory) behind a Python class, with
//! the methods of its executable spec `kvsim.reference.cpu_tier.CpuTier`.

use crate::args::{bool_arg, default_false, int_arg, items, key_arg, repr};
use crate::errors::{IntoPyResult, invalid};
use crate::guard::{Guarded, no_panic};
use kvsim_core::BlockKey;
use kvsim_core::cpu_tier::{CpuTier, DEFAULT_TRACKER, Eviction, MAX_POSITION};
use pyo3::prelude::*;

/// A count argument named `name`: an integer in `[0, u64::MAX]`.
fn count_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    let v = int_arg(obj, name)?;
    v.u64()
        .ok_or_else(|| invalid(format!("{name} {v} must be between 0 and {}", u64::MAX)))
}

/// A content key named `name`: an integer in `[0, 2**128)`.
fn key_obj(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<BlockKey> {
    match key_arg(obj) {
        Ok(Some(k)) => Ok(BlockKey(k)),
        Ok(None) => Err(invalid(format!("{name} {} is not a u128", repr(obj)))),
        Err(_) => Err(invalid(format!("{name} {} must be an integer", repr(obj)))),
    }
}

/// A list or tuple of keys.
fn keys_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<BlockKey>> {
    items(obj, "keys must be a list or tuple of keys")?
        .iter()
        .enumerate()
        .map(|(i, k)| key_obj(k, &format!("keys[{i}]")))
        .collect()
}

/// A list or tuple of `(key, position)` pairs.
fn pairs_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(BlockKey, u64)>> {
    let pairs = items(obj, "keys must be a list or tuple of (key, position) pairs")?;
    let mut out = Vec::with_capacity(pairs.len());
    for (i, pair) in pairs.iter().enumerate() {
        let fields = items(pair, "")
            .ok()
            .filter(|f| f.len() == 2)
            .ok_or_else(|| {
                invalid(format!(
                    "keys[{i}] {} must be a (key, position) pair",
                    repr(pair)
                ))
            })?;
        let key = key_obj(&fields[0], &format!("keys[{i}]: key"))?;
        let name = format!("keys[{i}]: position");
        let pos = count_arg(&fields[1], &name)?;
        if pos > MAX_POSITION {
            return Err(invalid(format!(
                "{name} {pos} must be between 0 and {MAX_POSITION}"
            )));
        }
        out.push((key, pos));
    }
    Ok(out)
}

/// The longest run the binding takes, in chunks (a request's prompt is a few thousand; `MAX_POSITION` + 1
/// is 2^32, whose keys listed take 64 GiB).
const MAX_RUN: u64 = 1 << 24;

/// A run's `(hi, lo, n)`: its keys' group `hi`, first `lo` and count `n`, with `n` in `[1, MAX_RUN]`
/// and `lo + n - 1` below `2**64` (one group).
fn run_arg(
    hi: &Bound<'_, PyAny>,
    lo: &Bound<'_, PyAny>,
    n: &Bound<'_, PyAny>,
) -> PyResult<(u64, u64, u64)> {
    let hi = count_arg(hi, "hi")?;
    let lo = count_arg(lo, "lo")?;
    let n = count_arg(n, "n")?;
    // (a run's keys are listed whole: 2^32 of them asked for 64 GiB and aborted)
    if n == 0 || n > MAX_RUN {
        return Err(invalid(format!("n {n} must be between 1 and {MAX_RUN}")));
    }
    if lo.checked_add(n - 1).is_none() {
        return Err(invalid(format!(
            "lo {lo} + n {n} - 1 must be at most {} (one group's keys)",
            u64::MAX
        )));
    }
    Ok((hi, lo, n))
}

fn u128s(v: &[BlockKey]) -> Vec<u128> {
    v.iter().map(|k| k.0).collect()
}

fn default_eviction() -> Py<PyAny> {
    Python::attach(|py| pyo3::types::PyString::new(py, "lru").into_any().unbind())
}

fn default_int(v: usize) -> Py<PyAny> {
    Python::attach(|py| {
        v.into_pyobject(py)
            .map_or_else(|_| py.None(), |o| o.into_any().unbind())
    })
}

fn zero() -> Py<PyAny> {
    default_int(0)
}

fn default_tracker() -> Py<PyAny> {
    default_int(DEFAULT_TRACKER)
}

/// The CPU tier of vLLM's native offloading: `capacity` chunks of host memory and the policy that
/// evicts them (vLLM 0.33.0's `kv_offload/cpu/manager.py`; the executable spec is
/// `kvsim.reference.cpu_tier.CpuTier`, which this class matches call for call).
///
/// `CpuTier(capacity, eviction="lru", store_threshold=0, tracker=64000, count_per_request=False)`:
/// `eviction` is `"lru"` or `"arc"`; a `store_threshold` of 2 or more stores a key only from its
/// that-many-th offer, counted in a tracker of `tracker` keys, every offer (vLLM 0.33.0) or, with
/// `count_per_request`, once per request (0.34.0). Keys are ints in `[0, 2**128)`, request ids (`rid`) ints in
/// `[0, 2**64)`, positions (a chunk's index in its request) ints in `[0, 2**32)`; a chunk may be pinned by
/// at most 65,535 loads at once.
///
/// Raises `InvalidArgumentError` for an argument of the wrong type or out of range, or an unknown
/// `eviction`.
#[pyclass(name = "CpuTier", module = "kvsim._core")]
pub(crate) struct PyCpuTier(Guarded<CpuTier>);

#[pymethods]
impl PyCpuTier {
    #[new]
    #[pyo3(
        signature = (capacity, eviction = default_eviction(), store_threshold = zero(), tracker = default_tracker(), count_per_request = default_false()),
        text_signature = "(capacity, eviction='lru', store_threshold=0, tracker=64000, count_per_request=False)"
    )]
    fn new<'py>(
        py: Python<'py>,
        capacity: &Bound<'py, PyAny>,
        eviction: Py<PyAny>,
        store_threshold: Py<PyAny>,
        tracker: Py<PyAny>,
        count_per_request: Py<PyAny>,
    ) -> PyResult<Self> {
        let capacity = count_arg(capacity, "capacity")?;
        let eviction = eviction.bind(py);
        let policy = eviction
            .extract::<&str>()
            .ok()
            .and_then(|s| Eviction::parse(s).ok())
            .ok_or_else(|| {
                invalid(format!(
                    "eviction {} is not one of 'lru', 'arc'",
                    repr(eviction)
                ))
            })?;
        let threshold = count_arg(store_threshold.bind(py), "store_threshold")?;
        let tracker = count_arg(tracker.bind(py), "tracker")?;
        let tracker = usize::try_from(tracker).unwrap_or(usize::MAX);
        let count_per_request = bool_arg(count_per_request.bind(py), "count_per_request")?;
        let tier = no_panic("CpuTier()", || {
            let mut tier = CpuTier::with_tracker(capacity, policy, threshold, tracker);
            if count_per_request {
                tier.count_per_request();
            }
            Ok(tier)
        })
        .py()?;
        Ok(Self(Guarded::new(tier, "CpuTier")))
    }

    /// Chunks of host memory the tier holds at most.
    #[getter]
    fn capacity(&self) -> PyResult<u64> {
        self.0.read("capacity", |t| Ok(t.capacity()))
    }
    /// `"lru"` or `"arc"`.
    #[getter]
    fn eviction(&self) -> PyResult<&'static str> {
        self.0.read("eviction", |t| Ok(t.eviction().as_str()))
    }
    /// Chunks held, pending ones (store in flight) included.
    #[getter]
    fn used(&self) -> PyResult<u64> {
        self.0.read("used", |t| Ok(t.used()))
    }
    /// Chunks that may be evicted now: ready and pinned by no load.
    #[getter]
    fn num_evictable(&self) -> PyResult<u64> {
        self.0.read("num_evictable", |t| Ok(t.num_evictable()))
    }
    /// Chunks evicted so far to make room for stores.
    #[getter]
    fn num_evicted(&self) -> PyResult<u64> {
        self.0.read("num_evicted", |t| Ok(t.num_evicted()))
    }
    /// New chunks offered but not stored because their key had too few offers (the store threshold).
    #[getter]
    fn num_stores_skipped(&self) -> PyResult<u64> {
        self.0
            .read("num_stores_skipped", |t| Ok(t.num_stores_skipped()))
    }
    /// ARC's adaptive target for T1's size (0.0 under LRU).
    #[getter]
    fn target(&self) -> PyResult<f64> {
        self.0.read("target", |t| Ok(t.target()))
    }

    /// `0` (MISS: not held), `1` (HIT: held and ready) or `2` (PENDING: its store in flight); any
    /// integer outside `[0, 2**128)` is a miss. Raises `InvalidArgumentError` when `key` is not an
    /// integer.
    fn lookup(&self, key: &Bound<'_, PyAny>) -> PyResult<u8> {
        let Some(k) = key_arg(key)? else {
            return Ok(kvsim_core::cpu_tier::MISS);
        };
        self.0.read("lookup", |t| Ok(t.lookup(BlockKey(k))))
    }

    /// Pins ready chunks for a load by request `rid` and records the accesses; `keys` is a list or
    /// tuple of `(key, position)` pairs.
    ///
    /// Raises `InvalidArgumentError` for a bad argument, `InvalidOperationError` for a key the tier
    /// does not hold or whose store is pending; a rejected call changes nothing.
    fn prepare_load(&mut self, rid: &Bound<'_, PyAny>, keys: &Bound<'_, PyAny>) -> PyResult<()> {
        let rid = count_arg(rid, "rid")?;
        let keys = pairs_arg(keys)?;
        self.0.write("prepare_load", |t| {
            t.check_prepare_load(&keys)?;
            t.prepare_load(rid, &keys);
            Ok(())
        })
    }

    /// A load of `keys` (a list or tuple of keys) is done: each is unpinned once.
    ///
    /// Raises `InvalidArgumentError` for a bad argument, `InvalidOperationError` for a key not held or
    /// listed more often than loads pin it; a rejected call changes nothing.
    fn complete_load(&mut self, keys: &Bound<'_, PyAny>) -> PyResult<()> {
        let keys = keys_arg(keys)?;
        self.0.write("complete_load", |t| {
            t.check_complete_load(&keys)?;
            t.complete_load(&keys);
            Ok(())
        })
    }

    /// Offers request `rid`'s chunks (`keys`: `(key, position)` pairs): returns `(stored, evicted)`,
    /// the keys stored now (pending until `complete_store`) and the keys evicted for them, or `None`
    /// when the tier cannot make room (nothing stored; the offers and accesses are still recorded).
    ///
    /// Raises `InvalidArgumentError` for a bad argument (a key offered twice among them: an offer's
    /// chunks are distinct, and one counted twice would ask room for both); a rejected call changes
    /// nothing.
    fn prepare_store(
        &mut self,
        rid: &Bound<'_, PyAny>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<Option<(Vec<u128>, Vec<u128>)>> {
        let rid = count_arg(rid, "rid")?;
        let keys = pairs_arg(keys)?;
        let mut seen = std::collections::HashSet::with_capacity(keys.len());
        if let Some(i) = keys.iter().position(|&(k, _)| !seen.insert(k)) {
            return Err(invalid(format!(
                "keys[{i}]: key {} is offered twice in one offer (an offer's chunks are distinct)",
                keys[i].0.0
            )));
        }
        self.0.write("prepare_store", |t| {
            let (mut stored, mut evicted) = (Vec::new(), Vec::new());
            Ok(t.prepare_store(rid, &keys, &mut stored, &mut evicted)
                .map(|()| (u128s(&stored), u128s(&evicted))))
        })
    }

    /// Stores of `keys` (a list or tuple of keys) are done: each pending chunk among them becomes
    /// ready; other keys are ignored.
    ///
    /// Raises `InvalidArgumentError` for a bad argument; a rejected call changes nothing.
    fn complete_store(&mut self, keys: &Bound<'_, PyAny>) -> PyResult<()> {
        let keys = keys_arg(keys)?;
        self.0.write("complete_store", |t| {
            t.complete_store(&keys);
            Ok(())
        })
    }

    /// `prepare_store(rid, [((hi << 64) | (lo + i), pos + i) for i in range(n)])`, the keys of a run
    /// (a request's private chunks) given by their group `hi`, first `lo` and count `n` instead of
    /// listed, with the same decisions and the same result (a run stored whole lists its keys as
    /// stored). `n` is at least 1 and at most `2**24`, `lo + n - 1` below `2**64` and `pos + n - 1` below `2**32`.
    ///
    /// Raises `InvalidArgumentError` for a bad argument; a rejected call changes nothing.
    fn prepare_store_run(
        &mut self,
        rid: &Bound<'_, PyAny>,
        hi: &Bound<'_, PyAny>,
        lo: &Bound<'_, PyAny>,
        n: &Bound<'_, PyAny>,
        pos: &Bound<'_, PyAny>,
    ) -> PyResult<Option<(Vec<u128>, Vec<u128>)>> {
        let rid = count_arg(rid, "rid")?;
        let (hi, lo, n) = run_arg(hi, lo, n)?;
        let pos = count_arg(pos, "pos")?;
        if pos
            .checked_add(n - 1)
            .is_none_or(|last| last > MAX_POSITION)
        {
            return Err(invalid(format!(
                "pos {pos} + n {n} - 1 must be at most {MAX_POSITION} (the last position)"
            )));
        }
        self.0.write("prepare_store_run", |t| {
            let (mut offer, mut stored, mut evicted) = (Vec::new(), Vec::new(), Vec::new());
            Ok(
                t.prepare_store_run(rid, (hi, lo, n), pos, &mut offer, &mut stored, &mut evicted)
                    .map(|whole| {
                        if whole {
                            let run = (0..n).map(|i| (u128::from(hi) << 64) | u128::from(lo + i));
                            (run.collect(), u128s(&evicted))
                        } else {
                            (u128s(&stored), u128s(&evicted))
                        }
                    }),
            )
        })
    }

    /// `complete_store([(hi << 64) | (lo + i) for i in range(n)])`: stores of a run's keys are done.
    /// `n` is at least 1 and at most `2**24` (`MAX_RUN`), `lo + n - 1` below `2**64`.
    ///
    /// Raises `InvalidArgumentError` for a bad argument; a rejected call changes nothing.
    fn complete_store_run(
        &mut self,
        hi: &Bound<'_, PyAny>,
        lo: &Bound<'_, PyAny>,
        n: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (hi, lo, n) = run_arg(hi, lo, n)?;
        self.0.write("complete_store_run", |t| {
            t.complete_store_run(hi, lo, n);
            Ok(())
        })
    }

    /// Request `rid` finished: its chunks are ranked anew (its first the most recent) and its record
    /// dropped; an unknown `rid` is ignored. Raises `InvalidArgumentError` for a bad argument.
    fn finish(&mut self, rid: &Bound<'_, PyAny>) -> PyResult<()> {
        let rid = count_arg(rid, "rid")?;
        self.0.write("finish", |t| {
            t.finish(rid);
            Ok(())
        })
    }

    /// Test hook: the policy's state in the spec's terms, `(ranks, t1, t2, b1, b2, tracker)`: under LRU
    /// `(key, request rank, -position)` of every chunk, evicted first first; under ARC its four lists,
    /// least recent first; the threshold tracker's `(key, offers)`, least recent first.
    #[allow(clippy::type_complexity)]
    fn _internals(
        &self,
    ) -> PyResult<(
        Vec<(u128, u64, i128)>,
        Vec<u128>,
        Vec<u128>,
        Vec<u128>,
        Vec<u128>,
        Vec<(u128, u64)>,
    )> {
        self.0.read("_internals", |t| {
            let s = t.internals();
            let [t1, t2, b1, b2] = s.arc.map(|l| u128s(&l));
            Ok((
                s.ranks.iter().map(|&(k, r, p)| (k.0, r, p)).collect(),
                t1,
                t2,
                b1,
                b2,
                s.tracker.iter().map(|&(k, n)| (k.0, n)).collect(),
            ))
        })
    }

    /// Checks the tier's invariants; raises `InternalError` (a bug) if one fails.
    fn check_invariants(&self) -> PyResult<()> {
        self.0.read("check_invariants", CpuTier::check_invariants)
    }
}
