use super::access::SCAN_SEEN;
use super::order::Span;
use super::*;

mod lane;
mod runs;

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
