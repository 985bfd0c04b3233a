//! The tier's runs against their keys listed: a run offered decides as its keys listed, the first
//! eviction built from the log as from the groups, spans across the lower half's wrap.

use super::*;

#[derive(Clone, Debug)]
enum RunOp {
    /// A run of `n` keys `(hi, lo..)` at positions `pos..` for request `rid`.
    StoreRun(u64, u64, u64, u64, u64),
    /// `StoreRun`s of `ns[0]`, `ns[1]`, ... keys, each after the last (keys and positions).
    StoreRuns(u64, u64, u64, Vec<u64>, u64),
    /// Keys `(hi, lo)` at positions offered as a list to both tiers (any keys: repeats, other
    /// groups, positions out of order), for request `rid`.
    StoreList(u64, Vec<(u64, u8, u64)>),
    Load(u64, u64, Vec<u8>),
    CompleteLoad(usize),
    CompleteStore(usize),
    Finish(u64),
}

/// A key's lower half: 0..12, or 12.. counting down from u64::MAX (a group's slots wrapping).
fn edge_lo(n: u8) -> u64 {
    if n < 12 {
        u64::from(n)
    } else {
        u64::MAX - u64::from(n - 12)
    }
}

/// A group: 0..5, and 5 the largest.
fn edge_hi(hi: u64) -> u64 {
    if hi < 5 { hi } else { u64::MAX }
}

/// Two tiers compared op by op (the properties below) load `ks` for `rid` alike, the load kept in `loads`.
pub(super) fn load_both(
    a: &mut CpuTier,
    b: &mut CpuTier,
    rid: u64,
    ks: &[(BlockKey, u64)],
    loads: &mut Vec<Vec<BlockKey>>,
) {
    a.prepare_load(rid, ks);
    b.prepare_load(rid, ks);
    loads.push(ks.iter().map(|&(k, _)| k).collect());
}

/// The `i`th load in flight (modulo their count) completes in both tiers.
pub(super) fn complete_load_both(
    a: &mut CpuTier,
    b: &mut CpuTier,
    i: usize,
    loads: &mut Vec<Vec<BlockKey>>,
) {
    let ks = loads.swap_remove(i % loads.len());
    a.complete_load(&ks);
    b.complete_load(&ks);
}

fn run_op() -> impl proptest::strategy::Strategy<Value = RunOp> {
    use proptest::prelude::*;
    prop_oneof![
        // Mostly a request's own group at positions equal to the keys (the engine's private chunks),
        // named by the request's id (hi = rid: its record a `Rec`, `Chunks::recs`) or
        // otherwise (hi = rid + 8), else a shared group (0, also request 0's own) or other positions.
        4 => (0u64..4, 0u8..10, 0u64..12, 1u64..6, proptest::option::weighted(0.2, 0u64..12))
            .prop_map(|(r, g, lo, n, pos)| {
                let hi = if g < 2 { 0 } else if g < 7 { r } else { r + 8 };
                RunOp::StoreRun(r, hi, lo, n, pos.unwrap_or(lo))
            }),
        // Edges: keys whose lower half wraps past u64::MAX, the largest group, positions up to
        // `MAX_POSITION` (the last a run's positions may reach).
        // A request's runs offered one after another, each continuing the last's keys and positions
        // (as the engine offers a growing request's new chunks), across the wrap.
        2 => (0u64..4, 0u8..4, 0u64..6, proptest::collection::vec(1u64..4, 1..4), proptest::option::weighted(0.2, 0u64..6))
            .prop_map(|(r, g, lo, ns, pos)| {
                let hi = [r, r + 8, 0, u64::MAX][g as usize];
                let lo = lo.wrapping_sub(3); // u64::MAX - 2 ..= 2
                // (positions follow the keys across the wrap: 4 + lo, modulo 2^64)
                let total: u64 = ns.iter().sum();
                let pos = pos.map_or(lo.wrapping_add(4) % 32, |p| MAX_POSITION + 1 - total - p);
                RunOp::StoreRuns(r, hi, lo, ns, pos)
            }),
        1 => (0u64..4, proptest::collection::vec((0u64..6, 0u8..20, 0u64..12), 0..6))
            .prop_map(|(r, v)| RunOp::StoreList(r, v)),
        1 => (0u64..4, 0u64..6, proptest::collection::vec(0u8..20, 0..5))
            .prop_map(|(r, hi, v)| RunOp::Load(r, hi, v)),
        1 => (0usize..8).prop_map(RunOp::CompleteLoad),
        2 => (0usize..8).prop_map(RunOp::CompleteStore),
        2 => (0u64..4).prop_map(RunOp::Finish),
    ]
}

proptest::proptest! {
    /// `prepare_store_run` and `complete_store_run` decide as `prepare_store` and `complete_store` of
    /// the run's keys listed: two tiers, one offered runs and one lists, stay alike (the keys stored,
    /// evicted, the policy's order, the counts) under random loads, completions and finishes.
    #[test]
    fn a_run_offered_decides_as_its_keys_listed(
        cap in 1u64..24,
        arc in proptest::bool::ANY,
        threshold in 0u64..3,
        named in proptest::bool::ANY,
        ops in proptest::collection::vec(run_op(), 0..100),
    ) {
        // Requests and groups named as rows (`row_name`: the rows' own table), or as they are (the
        // other table; the edges' `u64::MAX` lands there either way).
        let name = |x: u64| if named { x.wrapping_add(super::ROW_NAMES) } else { x };
        let eviction = if arc { Eviction::Arc } else { Eviction::Lru };
        let mut a = CpuTier::with_tracker(cap, eviction, threshold, 6);
        let mut b = CpuTier::with_tracker(cap, eviction, threshold, 6);
        let key = |hi: u64, lo: u64| run_key(hi, lo);
        // Stores in flight: (the run if `a` stored it whole, the keys stored).
        let mut stores: Vec<RunStore> = vec![];
        let mut loads: Vec<Vec<BlockKey>> = vec![];
        let ops = ops.into_iter().flat_map(|op| match op {
            RunOp::StoreRuns(rid, hi, lo, ns, pos) => {
                let mut at = 0;
                ns.into_iter()
                    .map(|n| {
                        at += n;
                        RunOp::StoreRun(rid, hi, lo.wrapping_add(at - n), n, pos + at - n)
                    })
                    .collect()
            }
            op => vec![op],
        });
        for op in ops {
            match op {
                RunOp::StoreRun(rid, hi, lo, n, pos) => {
                    let (rid, hi) = (name(rid), name(hi));
                    let list: Vec<_> = (0..n).map(|i| (key(hi, lo.wrapping_add(i)), pos + i)).collect();
                    let (mut offer, mut sa, mut ea) = (Vec::new(), Vec::new(), Vec::new());
                    let ra = a.prepare_store_run(rid, (hi, lo, n), pos, &mut offer, &mut sa, &mut ea);
                    let (mut sb, mut eb) = (Vec::new(), Vec::new());
                    let rb = b.prepare_store(rid, &list, &mut sb, &mut eb);
                    proptest::prop_assert_eq!(ra.is_some(), rb.is_some());
                    if ra == Some(true) {
                        sa = list.iter().map(|&(k, _)| k).collect();
                    }
                    proptest::prop_assert_eq!(&sa, &sb);
                    proptest::prop_assert_eq!(&ea, &eb);
                    if ra.is_some() && !sb.is_empty() {
                        stores.push((if ra == Some(true) { Some((hi, lo, n)) } else { None }, sb));
                    }
                }
                RunOp::StoreList(rid, v) => {
                    let rid = name(rid);
                    let list: Vec<_> = v.iter().map(|&(hi, lo, pos)| (key(name(edge_hi(hi)), edge_lo(lo)), pos)).collect();
                    let (mut sa, mut ea, mut sb, mut eb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                    let ra = a.prepare_store(rid, &list, &mut sa, &mut ea);
                    let rb = b.prepare_store(rid, &list, &mut sb, &mut eb);
                    proptest::prop_assert_eq!(ra, rb);
                    proptest::prop_assert_eq!(&sa, &sb);
                    proptest::prop_assert_eq!(&ea, &eb);
                    if ra.is_some() && !sb.is_empty() {
                        stores.push((None, sb));
                    }
                }
                RunOp::Load(rid, hi, v) => {
                    let rid = name(rid);
                    let ks: Vec<_> = v.iter().enumerate().map(|(i, &n)| (key(name(edge_hi(hi)), edge_lo(n)), i as u64))
                        .filter(|&(k, _)| b.lookup(k) == HIT).collect();
                    proptest::prop_assert!(a.check_prepare_load(&ks).is_ok());
                    if b.check_prepare_load(&ks).is_ok() {
                        load_both(&mut a, &mut b, rid, &ks, &mut loads);
                    }
                }
                RunOp::CompleteLoad(i) if !loads.is_empty() => complete_load_both(&mut a, &mut b, i, &mut loads),
                RunOp::CompleteStore(i) if !stores.is_empty() => {
                    let (run, ks) = stores.swap_remove(i % stores.len());
                    match run {
                        Some((hi, lo, n)) => a.complete_store_run(hi, lo, n),
                        None => a.complete_store(&ks),
                    }
                    b.complete_store(&ks);
                }
                RunOp::Finish(rid) => {
                    a.finish(name(rid));
                    b.finish(name(rid));
                }
                _ => {}
            }
            a.check_invariants().unwrap();
            proptest::prop_assert_eq!(a.internals(), b.internals());
            proptest::prop_assert_eq!(
                (a.used(), a.num_evictable(), a.num_evicted(), a.num_stores_skipped()),
                (b.used(), b.num_evictable(), b.num_evicted(), b.num_stores_skipped())
            );
            for hi in 0..6 {
                for lo in 0..20 {
                    let k = key(edge_hi(hi), edge_lo(lo));
                    proptest::prop_assert_eq!(a.lookup(k), b.lookup(k));
                }
            }
        }
        // A tier never full so far: its first eviction's order, built from the log of the finishes'
        // spans (`build_heap`), evicts every chunk as the order rebuilt from the groups does.
        if !arc && !a.heap_live {
            let (built, rebuilt) = evict_all_built_and_rebuilt(&a);
            proptest::prop_assert_eq!(built, rebuilt);
        }
    }
}

/// Every evictable chunk of `t` (a tier never full so far, LRU) evicted, in order, from its first
/// eviction's order built from the log (`build_heap`, its invariants checked) and from one rebuilt from
/// the groups (`rebuild_heap`).
fn evict_all_built_and_rebuilt(t: &CpuTier) -> (Vec<BlockKey>, Vec<BlockKey>) {
    let (mut x, mut y) = (t.clone(), t.clone());
    (x.heap_live, y.heap_live) = (true, true);
    x.build_heap();
    y.rebuild_heap();
    x.check_invariants().unwrap();
    let n = t.num_evictable() as usize;
    let (mut ex, mut ey) = (Vec::new(), Vec::new());
    let none = KeySet::default();
    assert!(x.evict(n, &none, &mut ex) && y.evict(n, &none, &mut ey));
    (ex, ey)
}

proptest::proptest! {
    /// The first eviction's order built from the log of the finishes' spans (`build_heap`) evicts as
    /// the order rebuilt from the groups (`rebuild_heap`), in a tier of requests' private runs (the
    /// engine's case) each stored and then: completed and finished (logged); finished before its
    /// store completes (not logged: found among the groups); still running; finished and then read
    /// by another request (a load of its first chunk: the run a vector); or offered again whole by
    /// another request that finishes (the reuse lists the run: its logged span stale); and with more
    /// stale spans in the log, which its compaction drops.
    #[test]
    fn the_first_eviction_builds_from_the_log_as_from_the_groups(
        named in proptest::bool::ANY,
        reqs in proptest::collection::vec((1u64..6, 0u8..5), 1..80),
        again in proptest::collection::vec(0usize..80, 0..40),
        stale in 0usize..6,
    ) {
        let name = |x: u64| if named { x.wrapping_add(super::ROW_NAMES) } else { x };
        let mut t = CpuTier::new(10_000, Eviction::Lru, 0);
        for (r, &(n, fate)) in reqs.iter().enumerate() {
            let (rid, hi) = (name(r as u64), name(r as u64));
            let (mut offer, mut stored, mut evicted) = (Vec::new(), Vec::new(), Vec::new());
            let whole = t.prepare_store_run(rid, (hi, 0, n), 0, &mut offer, &mut stored, &mut evicted);
            proptest::prop_assert_eq!(whole, Some(true));
            let other = name(r as u64 + 1_000);
            match fate {
                0 => {
                    t.complete_store_run(hi, 0, n);
                    t.finish(rid);
                }
                1 => {
                    t.finish(rid);
                    t.complete_store_run(hi, 0, n);
                }
                2 => t.complete_store_run(hi, 0, n),
                3 => {
                    t.complete_store_run(hi, 0, n);
                    t.finish(rid);
                    let ks = [(run_key(hi, 0), 0)];
                    t.prepare_load(other, &ks);
                    t.complete_load(&[ks[0].0]);
                    t.finish(other);
                }
                _ => {
                    t.complete_store_run(hi, 0, n);
                    t.finish(rid);
                    let (mut offer, mut stored, mut evicted) = (Vec::new(), Vec::new(), Vec::new());
                    t.prepare_store_run(other, (hi, 0, n), 0, &mut offer, &mut stored, &mut evicted);
                    t.finish(other);
                }
            }
        }
        // Runs offered whole again by other requests that finish: the reuse lists a run's chunks (a
        // vector), so its logged span goes stale.
        for (j, &r) in again.iter().enumerate() {
            let (r, n) = (r % reqs.len(), reqs[r % reqs.len()].0);
            let (rid, hi) = (name(10_000 + j as u64), name(r as u64));
            let (mut offer, mut stored, mut evicted) = (Vec::new(), Vec::new(), Vec::new());
            t.prepare_store_run(rid, (hi, 0, n), 0, &mut offer, &mut stored, &mut evicted);
            t.finish(rid);
        }
        // More stale spans (a logged span cut to its head: no run's whole slots), `stale` before each
        // logged one (in order): the compaction drops them all once they are too many.
        let logged: Vec<Span> = t.log.clone();
        t.log = Vec::new();
        for s in logged {
            for _ in 0..stale {
                t.log.push(s.truncated(1));
            }
            t.log.push(s);
        }
        let before = t.log.len();
        t.compact_log();
        let bound = 2 * t.chunks.groups.len() + 64;
        proptest::prop_assert!(t.log.len() <= bound.min(before));
        if before > bound {
            let mut u = t.clone();
            proptest::prop_assert!(t.log.iter().all(|&s| u.chunks.logged_run_mut(s).is_some()));
        }
        proptest::prop_assert!(!t.heap_live);
        let (built, rebuilt) = evict_all_built_and_rebuilt(&t);
        proptest::prop_assert_eq!(built, rebuilt);
    }
}

/// A request's span of keys must not join a run whose keys wrap past `u64::MAX` in their lower half:
/// the span lists its keys by adding to the whole key, so `(hi, u64::MAX)` then `(hi, 0)` would list
/// `(hi + 1, 0)` for the second (found by the adversarial pass). The record must name the keys offered:
/// a later offer of `(hi, 0)` at an earlier position is a repeat (no rank moves), as the listed tier says.
#[test]
fn a_span_does_not_join_keys_across_the_lower_halfs_wrap() {
    let hi = 7;
    let mut a = CpuTier::new(8, Eviction::Lru, 0);
    let mut b = CpuTier::new(8, Eviction::Lru, 0);
    let (mut offer, mut s, mut e) = (Vec::new(), Vec::new(), Vec::new());
    for (lo, pos) in [(u64::MAX, 0), (0, 1)] {
        assert!(
            a.prepare_store_run(1, (hi, lo, 1), pos, &mut offer, &mut s, &mut e)
                .is_some()
        );
        b.prepare_store(1, &[(run_key(hi, lo), pos)], &mut s, &mut e)
            .unwrap();
        a.complete_store(&[run_key(hi, lo)]);
        b.complete_store(&[run_key(hi, lo)]);
    }
    assert_eq!(a.internals(), b.internals());
    // (hi, 0) offered again by the same request at position 0: already seen, its rank stays.
    for t in [&mut a, &mut b] {
        t.prepare_store(1, &[(run_key(hi, 0), 0)], &mut s, &mut e)
            .unwrap();
        t.check_invariants().unwrap();
    }
    assert_eq!(a.internals(), b.internals());
    a.finish(1);
    b.finish(1);
    assert_eq!(a.internals(), b.internals());
}
