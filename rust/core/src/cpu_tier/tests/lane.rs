//! The lane of retired runs and a request's own run against the general paths they stand for.

use super::runs::{complete_load_both, load_both};
use super::*;

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
