use super::access::SCAN_SEEN;
use super::order::Span;
use super::*;

fn k(n: u128) -> BlockKey {
    BlockKey(n)
}

/// Keys `ns` at positions 0, 1, ...
fn at(ns: &[u128]) -> Vec<(BlockKey, u64)> {
    ns.iter()
        .enumerate()
        .map(|(i, &n)| (k(n), i as u64))
        .collect()
}

fn keys(ns: &[u128]) -> Vec<BlockKey> {
    ns.iter().map(|&n| k(n)).collect()
}

/// `prepare_store`: Some((stored, evicted)) or None.
fn store(t: &mut CpuTier, rid: u64, ks: &[(BlockKey, u64)]) -> Option<(Vec<u128>, Vec<u128>)> {
    let (mut stored, mut evicted) = (Vec::new(), Vec::new());
    t.prepare_store(rid, ks, &mut stored, &mut evicted)?;
    Some((
        stored.iter().map(|k| k.0).collect(),
        evicted.iter().map(|k| k.0).collect(),
    ))
}

/// Stores `ns` for `rid` (positions 0, 1, ...), completes the store and finishes the request.
fn fill(t: &mut CpuTier, rid: u64, ns: &[u128]) {
    store(t, rid, &at(ns)).unwrap();
    t.complete_store(&keys(ns));
    t.finish(rid);
}

#[test]
fn lookup_tells_missing_pending_and_ready_chunks_apart() {
    let mut t = CpuTier::new(4, Eviction::Lru, 0);
    assert_eq!(t.lookup(k(1)), MISS);
    assert_eq!(store(&mut t, 1, &at(&[1, 2])), Some((vec![1, 2], vec![])));
    assert_eq!(
        (t.lookup(k(1)), t.used(), t.num_evictable()),
        (PENDING, 2, 0)
    );
    t.complete_store(&keys(&[1, 9]));
    assert_eq!((t.lookup(k(1)), t.lookup(k(2))), (HIT, PENDING));
    assert_eq!(t.num_evictable(), 1);
    // offering held keys again stores nothing
    assert_eq!(store(&mut t, 2, &at(&[1, 2])), Some((vec![], vec![])));
}

#[test]
fn lru_evicts_a_running_requests_tail_first_and_a_finished_requests_tail_first() {
    let mut t = CpuTier::new(3, Eviction::Lru, 0);
    store(&mut t, 1, &at(&[1, 2, 3])).unwrap();
    t.complete_store(&keys(&[1, 2, 3]));
    // request 1 still runs: ranks (r, -position), its last chunk the oldest
    assert_eq!(store(&mut t, 2, &at(&[4])), Some((vec![4], vec![3])));
    t.finish(1);
    t.complete_store(&keys(&[4]));
    t.finish(2);
    // finish re-ranked 2 then 1 (the first chunk newest); request 2 finished later
    assert_eq!(
        store(&mut t, 3, &at(&[5, 6])),
        Some((vec![5, 6], vec![2, 1]))
    );
    assert_eq!(t.num_evicted(), 3);
}

#[test]
fn a_load_moves_a_chunk_up_and_pins_protect_it() {
    let mut t = CpuTier::new(3, Eviction::Lru, 0);
    fill(&mut t, 1, &[1, 2, 3]);
    // request 2 reads chunk 3 (the oldest): it becomes the newest
    t.prepare_load(2, &[(k(3), 0)]);
    assert_eq!(t.num_evictable(), 2);
    assert_eq!(
        store(&mut t, 3, &at(&[7, 8])),
        Some((vec![7, 8], vec![2, 1]))
    );
    // pinned: not evictable, so there is no room
    assert_eq!(store(&mut t, 3, &at(&[7, 8, 9])), None);
    assert!(t.check_complete_load(&keys(&[3, 3])).is_err());
    assert!(t.check_complete_load(&keys(&[5])).is_err());
    t.check_complete_load(&keys(&[3])).unwrap();
    t.complete_load(&keys(&[3]));
    t.complete_store(&keys(&[7, 8]));
    assert_eq!(store(&mut t, 4, &at(&[9])), Some((vec![9], vec![3])));
}

#[test]
fn pending_chunks_are_neither_loadable_nor_evictable() {
    let mut t = CpuTier::new(2, Eviction::Lru, 0);
    store(&mut t, 1, &at(&[1, 2])).unwrap();
    assert!(t.check_prepare_load(&at(&[1])).is_err());
    assert!(t.check_prepare_load(&at(&[5])).is_err());
    assert_eq!(store(&mut t, 2, &at(&[3])), None);
    t.complete_store(&keys(&[1]));
    t.check_prepare_load(&at(&[1])).unwrap();
    assert_eq!(store(&mut t, 2, &at(&[3])), Some((vec![3], vec![1])));
}

#[test]
fn an_offered_chunk_is_never_evicted_and_eviction_is_all_or_nothing() {
    for eviction in [Eviction::Lru, Eviction::Arc] {
        let mut t = CpuTier::new(2, eviction, 0);
        fill(&mut t, 1, &[1, 2]);
        // 1 is the oldest but offered again: 2 goes instead
        assert_eq!(
            store(&mut t, 2, &at(&[1, 3])),
            Some((vec![3], vec![2])),
            "{eviction:?}"
        );
        // two needed, one evictable (3 is pending): nothing changes
        assert_eq!(store(&mut t, 3, &at(&[4, 5])), None);
        assert_eq!((t.used(), t.lookup(k(1)), t.num_evicted()), (2, HIT, 1));
        // one needed, but the only evictable chunk is offered
        assert_eq!(store(&mut t, 3, &at(&[1, 6])), None);
    }
}

#[test]
fn arc_ghost_hits_move_the_target() {
    let mut t = CpuTier::new(2, Eviction::Arc, 0);
    fill(&mut t, 1, &[1, 2]);
    // T1 = [2, 1] (finish made 1 the most recent); target 0, so T1 gives its least recent
    assert_eq!(store(&mut t, 2, &at(&[3])), Some((vec![3], vec![2])));
    t.complete_store(&keys(&[3]));
    t.finish(2);
    // 2 comes back: a B1 hit raises the target by max(1, |B2|/|B1|) = 1
    assert_eq!(store(&mut t, 3, &at(&[2])), Some((vec![2], vec![1])));
    assert!((t.target() - 1.0).abs() < f64::EPSILON);
    t.complete_store(&keys(&[2]));
    t.finish(3);
    // request 4 reads 3: reused, so T1 -> T2 at its finish
    t.prepare_load(4, &[(k(3), 0)]);
    t.complete_load(&keys(&[3]));
    t.finish(4);
    // T1 = [2], T2 = [3], B1 = [1]: |T1| 1 >= 1, T1 gives 2
    assert_eq!(store(&mut t, 5, &at(&[4])), Some((vec![4], vec![2])));
    t.complete_store(&keys(&[4]));
    t.finish(5);
    // T1 = [4], target 1: T1 gives 4 -> B1 = [1, 2, 4], trimmed to capacity: [2, 4]
    assert_eq!(store(&mut t, 6, &at(&[5])), Some((vec![5], vec![4])));
    assert_eq!(t.b1.keys().map(|k| k.0).collect::<Vec<_>>(), [2, 4]);
    t.complete_store(&keys(&[5]));
    t.finish(6);
    // 1 is no ghost any more: the target stays; 4 is one: target += max(1, 0/2) -> 2 (= capacity,
    // the cap), and |T1| 1 < 2: T2 gives 3
    assert_eq!(store(&mut t, 7, &at(&[4])), Some((vec![4], vec![3])));
    assert!((t.target() - 2.0).abs() < f64::EPSILON);
    t.complete_store(&keys(&[4]));
    t.finish(7);
    // 3 is a B2 ghost: target -= max(1, |B1|/|B2|) = max(1, 1/1) -> 1; |T1| 2 >= 1: T1 gives 5
    assert_eq!(store(&mut t, 8, &at(&[3])), Some((vec![3], vec![5])));
    assert!((t.target() - 1.0).abs() < f64::EPSILON);
    t.check_invariants().unwrap();
}

#[test]
fn arc_ghost_lists_stay_within_capacity() {
    let mut t = CpuTier::new(3, Eviction::Arc, 0);
    for rid in 0..50u64 {
        let n = u128::from(rid) * 2;
        fill(&mut t, rid, &[n, n + 1]);
    }
    assert!(t.b1.len() <= 3 && t.b2.len() <= 3);
    assert_eq!(t.used(), 3);
}

#[test]
fn the_threshold_stores_a_key_at_its_nth_offer() {
    let mut t = CpuTier::new(4, Eviction::Lru, 2);
    assert_eq!(store(&mut t, 1, &at(&[1, 2])), Some((vec![], vec![])));
    assert_eq!(t.num_stores_skipped(), 2);
    assert_eq!(store(&mut t, 2, &at(&[2, 3])), Some((vec![2], vec![])));
    assert_eq!(t.num_stores_skipped(), 3);
    // a threshold of 1 is none
    let mut t = CpuTier::new(4, Eviction::Lru, 1);
    assert_eq!(store(&mut t, 1, &at(&[1])), Some((vec![1], vec![])));
}

#[test]
fn per_request_a_request_counts_a_key_once_until_it_finishes() {
    // vLLM 0.34.0's `counted_keys`: request 1's second offer counts nothing, and skips nothing more
    let mut t = CpuTier::new(4, Eviction::Lru, 2);
    t.count_per_request();
    assert_eq!(store(&mut t, 1, &at(&[1])), Some((vec![], vec![])));
    assert_eq!(store(&mut t, 1, &at(&[1])), Some((vec![], vec![])));
    assert_eq!(t.num_stores_skipped(), 1);
    // another request's offer counts; a finished request's counted keys are dropped with it
    t.finish(1);
    assert!(t.counted.is_empty());
    assert_eq!(store(&mut t, 2, &at(&[1])), Some((vec![1], vec![])));
    // 0.33.0 (the default) counts the re-offer: stored at the second
    let mut t = CpuTier::new(4, Eviction::Lru, 2);
    store(&mut t, 1, &at(&[1])).unwrap();
    assert_eq!(store(&mut t, 1, &at(&[1])), Some((vec![1], vec![])));
}

#[test]
fn a_full_tracker_forgets_its_least_recent_unprotected_key() {
    let mut t = CpuTier::with_tracker(8, Eviction::Lru, 2, 2);
    store(&mut t, 1, &at(&[1, 2])).unwrap();
    // 3 displaces 1, the least recent
    store(&mut t, 1, &at(&[3])).unwrap();
    assert_eq!(t.counts.keys().map(|k| k.0).collect::<Vec<_>>(), [2, 3]);
    // 2 and 3 offered again are protected: 4 finds no room and is not tracked
    assert_eq!(
        store(&mut t, 2, &at(&[2, 3, 4])),
        Some((vec![2, 3], vec![]))
    );
    assert_eq!(t.counts.keys().map(|k| k.0).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(t.num_stores_skipped(), 4);
    // 1 was forgotten: its count starts again
    assert_eq!(store(&mut t, 3, &at(&[1])), Some((vec![], vec![])));
}

#[test]
fn memory_does_not_grow_with_finished_requests() {
    for eviction in [Eviction::Lru, Eviction::Arc] {
        let mut t = CpuTier::with_tracker(16, eviction, 2, 100);
        for rid in 0..3_000u64 {
            // a fresh chunk (stored at its second offer) and rereads of a few old ones
            let n = u128::from(rid);
            for _ in 0..2 {
                let mut stored = Vec::new();
                t.prepare_store(rid, &[(k(n), 0)], &mut stored, &mut Vec::new());
                t.complete_store(&stored);
            }
            let old: Vec<_> = (1..4)
                .map(|d| (k(n.saturating_sub(d)), d as u64))
                .filter(|&(key, _)| t.lookup(key) == HIT)
                .collect();
            t.prepare_load(rid, &old);
            t.complete_load(&old.iter().map(|&(key, _)| key).collect::<Vec<_>>());
            t.finish(rid);
        }
        assert!(t.num_evicted() > 2_900, "{eviction:?}");
        assert!(t.accesses.is_empty() && t.chunks.recs.is_empty());
        assert!(t.heap.len() <= 64.max(2 * t.num_evictable as usize));
        assert!(t.b1.len() <= 16 && t.b2.len() <= 16);
        assert!(t.counts.len() <= 100);
        assert!(t.chunks.len() <= 16);
    }
}

#[test]
fn rereads_without_evictions_keep_the_lru_heap_small() {
    let mut t = CpuTier::new(1000, Eviction::Lru, 0);
    fill(&mut t, 0, &[1, 2, 3]);
    for rid in 1..5_000u64 {
        t.prepare_load(rid, &at(&[1, 2, 3]));
        t.complete_load(&keys(&[1, 2, 3]));
        t.finish(rid);
    }
    assert!(t.heap.len() <= 64, "{}", t.heap.len());
    assert!(t.accesses.is_empty() && t.chunks.recs.is_empty());
}

#[test]
fn a_long_requests_keys_are_recorded_once_whether_scanned_or_mapped() {
    // More keys than `SCAN_SEEN`: the record moves from scanning to its map midway, and keys seen
    // before (offered again) are not recorded twice: finishing re-ranks each key once, the first
    // chunk newest.
    let n = 2 * SCAN_SEEN as u128 + 3;
    let mut t = CpuTier::new(1000, Eviction::Lru, 0);
    let first: Vec<u128> = (1..=n / 2).collect();
    let all: Vec<u128> = (1..=n).collect();
    store(&mut t, 7, &at(&first)).unwrap();
    t.complete_store(&keys(&first));
    let again = store(&mut t, 7, &at(&all)).unwrap();
    assert_eq!(again.0, ((n / 2 + 1)..=n).collect::<Vec<_>>());
    t.finish(7);
    let ranks = t.internals().ranks;
    assert_eq!(ranks.len(), n as usize);
    // Request 7 took rank 1; the finish gave ranks 2..=n+1 from the last key to the first.
    for (key, rank, neg_pos) in ranks {
        assert_eq!(
            (rank, neg_pos),
            ((n + 2 - key.0) as u64, 0),
            "key {}",
            key.0
        );
    }
}

#[test]
fn a_key_is_held_in_one_place_whether_in_a_run_or_alone() {
    // A run starts a group; keys stored alone (a gap, a repeat in one offer) are singles, and a
    // group's slots growing to a single's key leave it where it is.
    let mut t = CpuTier::new(8, Eviction::Lru, 0);
    store(&mut t, 0, &at(&[0])).unwrap();
    assert_eq!(
        store(&mut t, 0, &at(&[2, 1, 2])),
        Some((vec![2, 1, 2], vec![]))
    );
    assert_eq!(
        (t.used(), t.lookup(k(1)), t.lookup(k(2))),
        (3, PENDING, PENDING)
    );
    t.complete_store(&keys(&[0, 1, 2]));
    store(&mut t, 1, &at(&[4, 3])).unwrap();
    assert_eq!(t.used(), 5);
    t.check_invariants().unwrap();
    t.complete_store(&keys(&[3, 4]));
    t.finish(0);
    t.finish(1);
    // every chunk evictable and found: eviction takes the five
    assert_eq!(t.num_evictable(), 5);
    let (stored, evicted) = store(&mut t, 2, &at(&[10, 11, 12, 13, 14, 15, 16, 17])).unwrap();
    assert_eq!((stored.len(), evicted.len()), (8, 5));
    t.check_invariants().unwrap();
}

#[test]
fn eviction_names_parse() {
    assert_eq!(Eviction::parse("arc").unwrap(), Eviction::Arc);
    assert_eq!(
        Eviction::parse(Eviction::Lru.as_str()).unwrap(),
        Eviction::Lru
    );
    assert!(Eviction::parse("fifo").is_err());
}

#[derive(Clone, Debug)]
enum Op {
    Store(u64, Vec<u8>),
    Load(u64, Vec<u8>),
    CompleteLoad(usize),
    CompleteStore(usize),
    Finish(u64),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let ks = || proptest::collection::vec(0u8..16, 0..5);
    prop_oneof![
        (0u64..4, ks()).prop_map(|(r, v)| Op::Store(r, v)),
        (0u64..4, ks()).prop_map(|(r, v)| Op::Load(r, v)),
        (0usize..8).prop_map(Op::CompleteLoad),
        (0usize..8).prop_map(Op::CompleteStore),
        (0u64..4).prop_map(Op::Finish),
    ]
}

proptest::proptest! {
    /// Random legal operations keep every invariant (debug builds check them after each one).
    #[test]
    fn random_operations_keep_the_invariants(
        cap in 1u64..10,
        arc in proptest::bool::ANY,
        threshold in 0u64..4,
        ops in proptest::collection::vec(op(), 0..120),
    ) {
        let eviction = if arc { Eviction::Arc } else { Eviction::Lru };
        let mut t = CpuTier::with_tracker(cap, eviction, threshold, 6);
        let (mut loads, mut stores): (Vec<Vec<BlockKey>>, Vec<Vec<BlockKey>>) = (vec![], vec![]);
        for op in ops {
            match op {
                Op::Store(rid, v) => {
                    let ks: Vec<_> = v.iter().enumerate().map(|(i, &n)| (k(n.into()), i as u64)).collect();
                    let mut stored = Vec::new();
                    if t.prepare_store(rid, &ks, &mut stored, &mut Vec::new()).is_some() {
                        proptest::prop_assert!(t.used() <= cap);
                        stores.push(stored);
                    }
                }
                Op::Load(rid, v) => {
                    let ks: Vec<_> = v.iter().enumerate().map(|(i, &n)| (k(n.into()), i as u64))
                        .filter(|&(key, _)| t.lookup(key) == HIT).collect();
                    t.prepare_load(rid, &ks);
                    loads.push(ks.iter().map(|&(key, _)| key).collect());
                }
                Op::CompleteLoad(i) if !loads.is_empty() => {
                    let ks = loads.swap_remove(i % loads.len());
                    t.check_complete_load(&ks).unwrap();
                    t.complete_load(&ks);
                }
                Op::CompleteStore(i) if !stores.is_empty() => {
                    let ks = stores.swap_remove(i % stores.len());
                    t.complete_store(&ks);
                }
                Op::Finish(rid) => t.finish(rid),
                _ => {}
            }
            t.check_invariants().unwrap();
        }
    }
}

/// A store in flight: the run if it was stored whole as one, and the keys stored.
type RunStore = (Option<(u64, u64, u64)>, Vec<BlockKey>);

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
fn load_both(
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
fn complete_load_both(a: &mut CpuTier, b: &mut CpuTier, i: usize, loads: &mut Vec<Vec<BlockKey>>) {
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

#[derive(Clone, Debug)]
enum LaneOp {
    /// A live request (the `i`th, modulo; a new one if none, or if `fresh`) stores its next `n` chunks.
    Store(usize, bool, u64),
    /// A live request offers shared keys `(SHARED, lo)` at positions 0, 1, ...
    Shared(usize, Vec<u8>),
    /// A live request loads these live requests' chunks or shared keys (those ready).
    Load(usize, Vec<(usize, u8)>),
    CompleteLoad(usize),
    CompleteStore(usize),
    /// The `i`th live request finishes: never named again.
    Finish(usize),
}

fn lane_op() -> impl proptest::strategy::Strategy<Value = LaneOp> {
    use proptest::prelude::*;
    prop_oneof![
        5 => (0usize..6, proptest::bool::weighted(0.6), 1u64..5).prop_map(|(i, f, n)| LaneOp::Store(i, f, n)),
        1 => (0usize..6, proptest::collection::vec(0u8..6, 1..4)).prop_map(|(i, v)| LaneOp::Shared(i, v)),
        1 => (0usize..6, proptest::collection::vec((0usize..8, 0u8..6), 0..4)).prop_map(|(i, v)| LaneOp::Load(i, v)),
        1 => (0usize..8).prop_map(LaneOp::CompleteLoad),
        5 => (0usize..8).prop_map(LaneOp::CompleteStore),
        3 => (0usize..6).prop_map(LaneOp::Finish),
    ]
}

proptest::proptest! {
    /// `finish_unnamed` decides as `finish` for requests whose keys nobody names after their finish
    /// (the engine's private chunks): two LRU tiers, one retiring finished runs to the lane and one
    /// re-ranking them in their groups, store, evict and rank alike (the keys evicted in order, the
    /// policy's order, the counts) under random stores, shared keys, loads, completions and
    /// finishes, with stores in flight at a finish, runs that evictions cut, and full tiers. A third,
    /// retiring as the first and counting its evictions without listing them (`count_evictions_only`,
    /// the engine's tier), decides and counts as the first, its eviction lists left empty.
    #[test]
    fn a_retired_run_evicts_as_a_reranked_one(
        cap in 1u64..30,
        named in proptest::bool::ANY,
        ops in proptest::collection::vec(lane_op(), 0..150),
    ) {
        const SHARED: u64 = 1 << 40;
        let name = |x: u64| if named { x.wrapping_add(super::ROW_NAMES) } else { x };
        let mut a = CpuTier::new(cap, Eviction::Lru, 0);
        let mut b = CpuTier::new(cap, Eviction::Lru, 0);
        let mut c = CpuTier::new(cap, Eviction::Lru, 0);
        c.count_evictions_only();
        // Live requests: (id, their next chunk).
        let mut live: Vec<(u64, u64)> = vec![];
        let mut next_id = 0;
        let mut stores: Vec<Vec<BlockKey>> = vec![];
        let mut loads: Vec<Vec<BlockKey>> = vec![];
        for op in ops {
            match op {
                LaneOp::Store(i, fresh, n) => {
                    if live.is_empty() || fresh {
                        live.push((name(next_id), 0));
                        next_id += 1;
                    }
                    let j = if fresh { live.len() - 1 } else { i % live.len() };
                    let (rid, lo) = live[j];
                    let (mut offer, mut sa, mut ea) = (Vec::new(), Vec::new(), Vec::new());
                    let (mut sb, mut eb) = (Vec::new(), Vec::new());
                    let ra = a.prepare_store_run(rid, (rid, lo, n), lo, &mut offer, &mut sa, &mut ea);
                    let rb = b.prepare_store_run(rid, (rid, lo, n), lo, &mut offer, &mut sb, &mut eb);
                    let (mut sc, mut ec) = (Vec::new(), Vec::new());
                    let rc = c.prepare_store_run(rid, (rid, lo, n), lo, &mut offer, &mut sc, &mut ec);
                    proptest::prop_assert_eq!(ra, rb);
                    proptest::prop_assert_eq!(&sa, &sb);
                    proptest::prop_assert_eq!(&ea, &eb);
                    proptest::prop_assert_eq!((rc, &sc), (ra, &sa));
                    proptest::prop_assert!(ec.is_empty());
                    if ra.is_some() {
                        live[j].1 += n;
                        let ks: Vec<_> = if ra == Some(true) {
                            (0..n).map(|i| run_key(rid, lo + i)).collect()
                        } else {
                            sb
                        };
                        if !ks.is_empty() {
                            stores.push(ks);
                        }
                    }
                }
                LaneOp::Shared(i, v) if !live.is_empty() => {
                    let rid = live[i % live.len()].0;
                    let mut list: Vec<_> = v.iter().map(|&lo| run_key(SHARED, u64::from(lo))).collect();
                    list.dedup();
                    let list: Vec<_> = list.into_iter().enumerate().map(|(p, k)| (k, p as u64)).collect();
                    let (mut sa, mut ea, mut sb, mut eb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                    let ra = a.prepare_store(rid, &list, &mut sa, &mut ea);
                    let rb = b.prepare_store(rid, &list, &mut sb, &mut eb);
                    let (mut sc, mut ec) = (Vec::new(), Vec::new());
                    let rc = c.prepare_store(rid, &list, &mut sc, &mut ec);
                    proptest::prop_assert_eq!(ra, rb);
                    proptest::prop_assert_eq!(&sa, &sb);
                    proptest::prop_assert_eq!(&ea, &eb);
                    proptest::prop_assert_eq!((rc, &sc), (ra, &sa));
                    proptest::prop_assert!(ec.is_empty());
                    if ra.is_some() && !sb.is_empty() {
                        stores.push(sb);
                    }
                }
                LaneOp::Load(i, v) if !live.is_empty() => {
                    let rid = live[i % live.len()].0;
                    let ks: Vec<_> = v
                        .iter()
                        .map(|&(r, lo)| {
                            let hi = if r >= live.len() { SHARED } else { live[r].0 };
                            run_key(hi, u64::from(lo))
                        })
                        .filter(|&k| b.lookup(k) == HIT)
                        .enumerate()
                        .map(|(p, k)| (k, p as u64))
                        .collect();
                    if b.check_prepare_load(&ks).is_ok() {
                        proptest::prop_assert!(a.check_prepare_load(&ks).is_ok());
                        load_both(&mut a, &mut b, rid, &ks, &mut loads);
                        c.prepare_load(rid, &ks);
                    }
                }
                LaneOp::CompleteLoad(i) if !loads.is_empty() => {
                    let ks = loads.swap_remove(i % loads.len());
                    for t in [&mut a, &mut b, &mut c] {
                        t.complete_load(&ks);
                    }
                }
                LaneOp::CompleteStore(i) if !stores.is_empty() => {
                    let ks = stores.swap_remove(i % stores.len());
                    a.complete_store(&ks);
                    b.complete_store(&ks);
                    c.complete_store(&ks);
                }
                LaneOp::Finish(i) if !live.is_empty() => {
                    let (rid, _) = live.remove(i % live.len());
                    // (its loads of others' chunks may still pin them; its own chunks nobody loads
                    // again: the loads listed name live requests' keys only)
                    loads.retain(|ks| !ks.iter().any(|k| (k.0 >> 64) as u64 == rid));
                    a.finish_unnamed(rid);
                    b.finish(rid);
                    c.finish_unnamed(rid);
                }
                _ => {}
            }
            a.check_invariants().unwrap();
            b.check_invariants().unwrap();
            c.check_invariants().unwrap();
            proptest::prop_assert_eq!(a.internals(), b.internals());
            proptest::prop_assert_eq!(c.internals(), a.internals());
            proptest::prop_assert_eq!(
                (c.used(), c.num_evictable(), c.num_evicted()),
                (a.used(), a.num_evictable(), a.num_evicted())
            );
            proptest::prop_assert_eq!(
                (a.used(), a.num_evictable(), a.num_evicted()),
                (b.used(), b.num_evictable(), b.num_evicted())
            );
            for &(rid, n) in &live {
                for lo in 0..=n {
                    proptest::prop_assert_eq!(a.lookup(run_key(rid, lo)), b.lookup(run_key(rid, lo)));
                }
            }
            for lo in 0..6 {
                let k = run_key(SHARED, lo);
                proptest::prop_assert_eq!(a.lookup(k), b.lookup(k));
            }
        }
    }
}

#[test]
fn a_full_tier_evicts_retired_runs_in_rank_order_among_the_others() {
    // A and B store three chunks each (B's rank after A's), complete; A finishes unnamed (its run to
    // the lane, ranked newest, its last chunk first) and B still runs; C needs five of ten slots
    // with six held: B's chunks go first (its rank is the least), its last first, then (two more)
    // A's last two.
    let (ra, rb, rc) = (row_name(1), row_name(2), row_name(3));
    let evicted_by = |retire: bool| {
        let mut t = CpuTier::new(10, Eviction::Lru, 0);
        let (mut offer, mut stored, mut evicted) = (Vec::new(), Vec::new(), Vec::new());
        for rid in [ra, rb] {
            t.prepare_store_run(rid, (rid, 0, 3), 0, &mut offer, &mut stored, &mut evicted);
            t.complete_store_run(rid, 0, 3);
        }
        if retire {
            t.finish_unnamed(ra);
            assert_eq!(
                (t.lane.len(), t.lane_len, t.used(), t.num_evictable()),
                (1, 3, 6, 6)
            );
            assert_eq!(t.lookup(run_key(rb, 0)), HIT);
        } else {
            t.finish(ra);
        }
        let whole = t.prepare_store_run(rc, (rc, 0, 11), 0, &mut offer, &mut stored, &mut evicted);
        assert_eq!(whole, None); // (more than the tier holds: nothing changes)
        assert_eq!((t.used(), t.num_evicted()), (6, 0));
        let whole =
            t.prepare_store_run(rc, (rc, 0, 9 - 2), 0, &mut offer, &mut stored, &mut evicted);
        assert_eq!(whole, Some(true));
        t.check_invariants().unwrap();
        assert_eq!((t.used(), t.num_evicted()), (10, 3));
        let first = evicted.clone();
        let whole = t.prepare_store_run(rc, (rc, 7, 2), 7, &mut offer, &mut stored, &mut evicted);
        assert_eq!(whole, Some(true));
        t.check_invariants().unwrap();
        (first, evicted.clone(), t.lane_len)
    };
    let (first, second, lane_left) = evicted_by(true);
    assert_eq!(
        first,
        vec![run_key(rb, 2), run_key(rb, 1), run_key(rb, 0)],
        "B's chunks first, its last first"
    );
    assert_eq!(
        second,
        vec![run_key(ra, 2), run_key(ra, 1)],
        "then A's, from the lane"
    );
    assert_eq!(lane_left, 1);
    let (first_b, second_b, _) = evicted_by(false);
    assert_eq!(
        (first_b, second_b),
        (first, second),
        "as a finish's re-ranking evicts"
    );
}

#[derive(Clone, Debug)]
enum OwnOp {
    /// A live request (the `i`th, modulo; a new one if none, or if `fresh`) stores its next `n` chunks.
    Store(usize, bool, u64),
    /// A live request offers shared keys `(SHARED, lo)` at positions 0, 1, ...
    Shared(usize, Vec<u8>),
    /// A live request loads ready shared keys.
    Load(usize, Vec<u8>),
    CompleteLoad(usize),
    CompleteStore(usize),
    /// The `i`th live request is preempted (it will look its chunks up again).
    Preempt(usize),
    /// The `i`th live request finishes: never named again.
    Finish(usize),
}

fn own_op() -> impl proptest::strategy::Strategy<Value = OwnOp> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0usize..6, proptest::bool::weighted(0.5), 1u64..5).prop_map(|(i, f, n)| OwnOp::Store(i, f, n)),
        1 => (0usize..6, proptest::collection::vec(0u8..6, 1..4)).prop_map(|(i, v)| OwnOp::Shared(i, v)),
        1 => (0usize..6, proptest::collection::vec(0u8..6, 0..4)).prop_map(|(i, v)| OwnOp::Load(i, v)),
        1 => (0usize..8).prop_map(OwnOp::CompleteLoad),
        5 => (0usize..8).prop_map(OwnOp::CompleteStore),
        1 => (0usize..6).prop_map(OwnOp::Preempt),
        3 => (0usize..6).prop_map(OwnOp::Finish),
    ]
}

/// A store in flight in `an_own_run_decides_as_a_row_run`: a run `(rid, lo, n)` with the handle B
/// stored it under (0: the general path), or listed keys.
#[derive(Clone, Debug)]
enum InFlight {
    Run(u64, u64, u64, u32),
    Keys(Vec<BlockKey>),
}

proptest::proptest! {
    /// A request's own run (`own.rs`: `store_own`, `complete_own`, `finish_own`, `demote_own`)
    /// decides as the groups' row run the engine's general path keeps (`try_store_run`,
    /// `complete_store_run`, `finish_unnamed`): two LRU tiers driven as the engine drives them, with
    /// new, continuing and ready-extending stores, completions of part of a run before the rest,
    /// shared keys and loads (the request's own run demoted first, as a running request never loads),
    /// preemptions, finishes with stores in flight, and tiers that fill (an eviction demotes an own
    /// run that is the least, and stores evict for own runs): the same keys evicted in order, the
    /// policy's order,
    /// counts and lookups of live requests' keys not in a live own run (nobody looks those up, nor a
    /// finished request's: a run of one chunk retires to the lane from its own slot, from a group's
    /// single slot it stays in the group, ranked alike).
    #[test]
    fn an_own_run_decides_as_a_row_run(
        cap in 1u64..40,
        ops in proptest::collection::vec(own_op(), 0..160),
    ) {
        const SHARED: u64 = 1 << 40;
        let mut a = CpuTier::new(cap, Eviction::Lru, 0);
        let mut b = CpuTier::new(cap, Eviction::Lru, 0);
        // Live requests: (id, their next chunk, B's handle of their own run).
        let mut live: Vec<(u64, u64, u32)> = vec![];
        let mut next_id = 0;
        let mut stores: Vec<InFlight> = vec![];
        let mut loads: Vec<Vec<BlockKey>> = vec![];
        let mut owned = 0;
        for op in ops {
            match op {
                OwnOp::Store(i, fresh, n) => {
                    if live.is_empty() || fresh {
                        live.push((row_name(next_id), 0, 0));
                        next_id += 1;
                    }
                    let j = if fresh { live.len() - 1 } else { i % live.len() };
                    let (rid, lo, _) = live[j];
                    let (mut offer, mut sa, mut ea) = (Vec::new(), Vec::new(), Vec::new());
                    let (mut sb, mut eb) = (Vec::new(), Vec::new());
                    let ra = a.prepare_store_run(rid, (rid, lo, n), lo, &mut offer, &mut sa, &mut ea);
                    let rb = if b.store_own(&mut live[j].2, rid, lo, n, &mut eb) {
                        owned += 1;
                        Some(true)
                    } else {
                        proptest::prop_assert_eq!(live[j].2, 0);
                        b.prepare_store_run(rid, (rid, lo, n), lo, &mut offer, &mut sb, &mut eb)
                    };
                    proptest::prop_assert_eq!(ra, rb);
                    proptest::prop_assert_eq!(&sa, &sb);
                    proptest::prop_assert_eq!(&ea, &eb);
                    if ra.is_some() {
                        live[j].1 += n;
                        if ra == Some(true) {
                            stores.push(InFlight::Run(rid, lo, n, live[j].2));
                        } else if !sa.is_empty() {
                            stores.push(InFlight::Keys(sa));
                        }
                    }
                }
                OwnOp::Shared(i, v) if !live.is_empty() => {
                    let j = i % live.len();
                    let rid = live[j].0;
                    b.demote_own(live[j].2, rid); // (the engine's general path demotes first)
                    live[j].2 = 0;
                    let mut list: Vec<_> = v.iter().map(|&lo| run_key(SHARED, u64::from(lo))).collect();
                    list.dedup();
                    let list: Vec<_> = list.into_iter().enumerate().map(|(p, k)| (k, p as u64)).collect();
                    let (mut sa, mut ea, mut sb, mut eb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                    let ra = a.prepare_store(rid, &list, &mut sa, &mut ea);
                    let rb = b.prepare_store(rid, &list, &mut sb, &mut eb);
                    proptest::prop_assert_eq!(ra, rb);
                    proptest::prop_assert_eq!(&sa, &sb);
                    proptest::prop_assert_eq!(&ea, &eb);
                    if ra.is_some() && !sa.is_empty() {
                        stores.push(InFlight::Keys(sa));
                    }
                }
                OwnOp::Load(i, v) if !live.is_empty() => {
                    let j = i % live.len();
                    let rid = live[j].0;
                    let ks: Vec<_> = v
                        .iter()
                        .map(|&lo| run_key(SHARED, u64::from(lo)))
                        .filter(|&k| a.lookup(k) == HIT)
                        .enumerate()
                        .map(|(p, k)| (k, p as u64))
                        .collect();
                    if a.check_prepare_load(&ks).is_ok() {
                        proptest::prop_assert!(b.check_prepare_load(&ks).is_ok());
                        b.demote_own(live[j].2, rid);
                        live[j].2 = 0;
                        load_both(&mut a, &mut b, rid, &ks, &mut loads);
                    }
                }
                OwnOp::CompleteLoad(i) if !loads.is_empty() => {
                    complete_load_both(&mut a, &mut b, i, &mut loads);
                }
                OwnOp::CompleteStore(i) if !stores.is_empty() => {
                    match stores.swap_remove(i % stores.len()) {
                        InFlight::Run(rid, lo, n, h) => {
                            a.complete_store_run(rid, lo, n);
                            b.complete_own_store(h, rid, lo, n); // (the engine's completion)
                        }
                        InFlight::Keys(ks) => {
                            a.complete_store(&ks);
                            b.complete_store(&ks);
                        }
                    }
                }
                OwnOp::Preempt(i) if !live.is_empty() => {
                    let j = i % live.len();
                    b.demote_own(live[j].2, live[j].0);
                    live[j].2 = 0;
                }
                OwnOp::Finish(i) if !live.is_empty() => {
                    let (rid, _, h) = live.remove(i % live.len());
                    a.finish_unnamed(rid);
                    if !b.finish_own(h, rid) {
                        b.finish_unnamed(rid);
                    }
                }
                _ => {}
            }
            a.check_invariants().unwrap();
            b.check_invariants().unwrap();
            proptest::prop_assert_eq!(a.internals(), b.internals());
            proptest::prop_assert_eq!(
                (a.used(), a.num_evictable(), a.num_evicted()),
                (b.used(), b.num_evictable(), b.num_evicted())
            );
            let own: Vec<u64> = b.owns.iter().map(|o| o.hi).collect();
            for &(rid, n, _) in &live {
                if own.contains(&rid) {
                    continue;
                }
                for lo in 0..=n {
                    proptest::prop_assert_eq!(a.lookup(run_key(rid, lo)), b.lookup(run_key(rid, lo)));
                }
            }
            for lo in 0..6 {
                let k = run_key(SHARED, lo);
                proptest::prop_assert_eq!(a.lookup(k), b.lookup(k));
            }
        }
        let _ = owned;
    }
}

#[test]
fn own_runs_take_the_usual_store_and_retire_to_the_lane() {
    // Two requests store runs into a tier that never fills: own runs (no group, no record), completed,
    // finished to the lane (A's demoted by a completion of part of it: the general path's); a third
    // fills the tier, evicting the oldest; when its own run is the least, an eviction demotes it and
    // takes it.
    let (ra, rb, rc, rd) = (row_name(1), row_name(2), row_name(3), row_name(4));
    let mut t = CpuTier::new(12, Eviction::Lru, 0);
    let (mut ha, mut hb, mut hc, mut hd) = (0, 0, 0, 0);
    let mut ev = Vec::new();
    assert!(t.store_own(&mut ha, ra, 0, 3, &mut ev));
    assert!(t.store_own(&mut ha, ra, 3, 2, &mut ev)); // (continues its pending run)
    assert!(t.store_own(&mut hb, rb, 0, 4, &mut ev));
    assert_eq!((t.used(), t.chunks.groups.len(), t.owns.len), (9, 0, 9));
    assert_eq!(t.lookup(run_key(ra, 0)), MISS); // (nobody looks a running request's own run up)
    assert!(!t.complete_own(ha, ra, 0, 3)); // (part of it: demoted, the general path's)
    t.complete_store_run(ra, 0, 3);
    t.complete_store_run(ra, 3, 2);
    assert_eq!(t.lookup(run_key(ra, 4)), HIT);
    assert!(t.complete_own(hb, rb, 0, 4));
    assert_eq!(t.num_evictable(), 9);
    assert!(!t.finish_own(ha, ra)); // (demoted: `finish_unnamed`'s)
    t.finish_unnamed(ra);
    assert!(t.finish_own(hb, rb));
    assert_eq!((t.lane.len(), t.lane_len, t.owns.len), (1, 4, 0)); // (A's stays in its group)
    assert!(t.store_own(&mut hc, rc, 0, 3, &mut ev));
    assert_eq!(hc, hb, "the slot freed last is the next one's");
    // Four more than the room: the first eviction takes A's four least (finished first).
    assert!(t.store_own(&mut hc, rc, 3, 4, &mut ev));
    assert_eq!(ev, (1..5).rev().map(|i| run_key(ra, i)).collect::<Vec<_>>());
    assert!(t.heap_live && t.owns.len == 7);
    assert!(t.complete_own(hc, rc, 0, 7));
    // D needs five: A's last and B's four (the lane); then three more: C's own run, the least left,
    // demoted and taken, its last first.
    ev.clear();
    assert!(t.store_own(&mut hd, rd, 0, 5, &mut ev));
    assert_eq!(ev[0], run_key(ra, 0));
    assert_eq!(
        &ev[1..],
        (0..4).rev().map(|i| run_key(rb, i)).collect::<Vec<_>>()
    );
    assert_eq!(t.lane_len, 0);
    ev.clear();
    assert!(t.store_own(&mut hd, rd, 5, 3, &mut ev));
    assert_eq!(ev, (4..7).rev().map(|i| run_key(rc, i)).collect::<Vec<_>>());
    assert!(t.owns.valid(hc, rc).is_none() && t.chunks.groups.get(rc).is_some());
    assert!(!t.finish_own(hc, rc));
    t.finish_unnamed(rc);
    t.check_invariants().unwrap();
}

#[test]
fn evictions_from_the_lane_alone_take_what_the_general_loop_takes() {
    // Five requests store four chunks each and retire (the lane: five spans of four, oldest first);
    // with `live`, a sixth stores ten after them (its rank newer: the queue's least comes after the
    // whole lane), else the queue is empty. Copies of the tier evict `n` chunks with nothing protected
    // (the lane's fast path, when the lane alone supplies them) and with a key protected that the tier
    // does not hold (the general loop): the same keys in the same order, the same order left, the
    // same lane; `n` within a span, across several, the whole lane, past it into the queue (the
    // general loop for both), more than are evictable. Then runs of evictions of three, which leave
    // the lane's front span cut and cross into the next, alike until the tier is empty.
    let other: KeySet = std::iter::once(run_key(row_name(99), 0)).collect();
    for live in [false, true] {
        let mut t = CpuTier::new(40, Eviction::Lru, 0);
        let (mut offer, mut stored, mut evicted) = (Vec::new(), Vec::new(), Vec::new());
        for i in 1..=5 {
            let rid = row_name(i);
            let r = t.prepare_store_run(rid, (rid, 0, 4), 0, &mut offer, &mut stored, &mut evicted);
            assert_eq!(r, Some(true));
            t.complete_store_run(rid, 0, 4);
            t.finish_unnamed(rid);
        }
        assert_eq!((t.lane.len(), t.lane_len), (5, 20));
        if live {
            let rid = row_name(9);
            let r =
                t.prepare_store_run(rid, (rid, 0, 10), 0, &mut offer, &mut stored, &mut evicted);
            assert_eq!(r, Some(true));
            t.complete_store_run(rid, 0, 10);
        }
        let evictable = t.num_evictable();
        assert_eq!(evictable, if live { 30 } else { 20 });
        for n in [1, 3, 4, 5, 9, 13, 20, 21, 25, 30, 31] {
            let (mut fast, mut general, mut quiet) = (t.clone(), t.clone(), t.clone());
            quiet.count_evictions_only();
            let (mut out_f, mut out_g, mut out_q) = (Vec::new(), Vec::new(), Vec::new());
            fast.scratch_evict.clear();
            let ok = fast.evict(n, &KeySet::default(), &mut out_f);
            assert_eq!(ok, n as u64 <= evictable, "n = {n}");
            assert_eq!(
                fast.scratch_evict.is_empty(),
                ok && n <= 20,
                "the fast path when the lane alone supplies them (n = {n})"
            );
            assert_eq!(general.evict(n, &other, &mut out_g), ok);
            assert_eq!(quiet.evict(n, &KeySet::default(), &mut out_q), ok);
            assert_eq!(out_f, out_g, "n = {n}");
            assert!(out_q.is_empty());
            if n == 9 {
                let mut want: Vec<BlockKey> = (1..=2)
                    .flat_map(|i| (0..4).rev().map(move |lo| run_key(row_name(i), lo)))
                    .collect();
                want.push(run_key(row_name(3), 3));
                assert_eq!(
                    out_f, want,
                    "the oldest retired runs, each's last chunk first"
                );
            }
            for u in [&mut fast, &mut general, &mut quiet] {
                if ok {
                    u.num_evictable -= n as u64;
                    u.num_evicted += n as u64;
                }
                u.check_invariants().unwrap();
            }
            assert_eq!(fast.internals(), general.internals(), "n = {n}");
            assert_eq!(quiet.internals(), fast.internals(), "n = {n}");
            let lane = |u: &CpuTier| (u.lane.iter().copied().collect::<Vec<Span>>(), u.lane_len);
            assert_eq!(lane(&fast), lane(&general), "n = {n}");
            assert_eq!(lane(&quiet), lane(&fast), "n = {n}");
        }
        let (mut fast, mut general) = (t.clone(), t.clone());
        let mut rounds = 0;
        loop {
            let (mut out_f, mut out_g) = (Vec::new(), Vec::new());
            let ok = fast.evict(3, &KeySet::default(), &mut out_f);
            assert_eq!(general.evict(3, &other, &mut out_g), ok);
            assert_eq!(out_f, out_g, "round {rounds}");
            if !ok {
                break;
            }
            rounds += 1;
            for u in [&mut fast, &mut general] {
                u.num_evictable -= 3;
                u.num_evicted += 3;
                u.check_invariants().unwrap();
            }
            assert_eq!(fast.internals(), general.internals(), "round {rounds}");
            assert_eq!(
                (fast.lane.len(), fast.lane_len),
                (general.lane.len(), general.lane_len)
            );
        }
        assert_eq!(rounds, evictable / 3);
    }
}
