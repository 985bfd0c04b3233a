//! SPEC §9's golden traces on the Rust core (the Python suite runs the same traces on both backends).

use kvsim_core::{BlockId, FreeOrder, KVCacheManager, Segment};

fn segs(v: &[(u64, u64)]) -> Vec<Segment> {
    v.iter().map(|&(id, len)| Segment::new(id, len)).collect()
}

fn ids(v: &[BlockId]) -> Vec<u32> {
    v.iter().map(|b| b.0).collect()
}

fn admit(m: &mut KVCacheManager, rid: u64, s: &[(u64, u64)]) -> Vec<u32> {
    let s = segs(s);
    let total: u64 = s.iter().map(|x| x.len).sum();
    let hit = m.lookup(&s).unwrap();
    let new = m.allocate(rid, &s, total - hit).unwrap().expect("fits");
    m.check_invariants().unwrap();
    ids(&new)
}

#[test]
fn sharing_then_free_queue_order_classic() {
    let mut m = KVCacheManager::new(11, 16, true, FreeOrder::Classic).unwrap();
    assert_eq!(admit(&mut m, 0, &[(1, 48), (100, 7)]), [1, 2, 3, 4]);
    assert_eq!(admit(&mut m, 1, &[(1, 48), (101, 5)]), [5]);
    assert_eq!(ids(m.block_table(1).unwrap()), [1, 2, 3, 5]);
    assert_eq!(m.pool().num_free_blocks(), 5);
    m.free(0);
    m.free(1);
    assert_eq!(
        ids(&m.pool().free_block_ids()),
        [6, 7, 8, 9, 10, 4, 5, 3, 2, 1]
    );
    assert_eq!(admit(&mut m, 2, &[(1, 48), (102, 6)]), [6]);
    m.free(2);
    assert_eq!(
        admit(&mut m, 3, &[(103, 160)]),
        [7, 8, 9, 10, 4, 5, 6, 3, 2, 1]
    );
    assert_eq!(m.pool().num_evictions(), 3);
}

#[test]
fn sharing_then_free_queue_order_lifo_unhashed() {
    let mut m = KVCacheManager::new(11, 16, true, FreeOrder::LifoUnhashed).unwrap();
    admit(&mut m, 0, &[(1, 48), (100, 7)]);
    admit(&mut m, 1, &[(1, 48), (101, 5)]);
    m.free(0);
    m.free(1);
    assert_eq!(
        ids(&m.pool().free_block_ids()),
        [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    );
    assert_eq!(admit(&mut m, 2, &[(1, 48), (102, 6)]), [5]);
    m.free(2);
    assert_eq!(
        admit(&mut m, 3, &[(103, 160)]),
        [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    );
}

#[test]
fn eviction_order() {
    let mut m = KVCacheManager::new(11, 16, true, FreeOrder::Classic).unwrap();
    assert_eq!(admit(&mut m, 0, &[(7, 87)]), [1, 2, 3, 4, 5, 6]);
    assert_eq!(admit(&mut m, 1, &[(8, 48)]), [7, 8, 9]);
    m.free(0);
    m.free(1);
    assert_eq!(
        ids(&m.pool().free_block_ids()),
        [10, 6, 5, 4, 3, 2, 1, 9, 8, 7]
    );
    assert_eq!(admit(&mut m, 2, &[(7, 35), (9, 5)]), [10]);
    assert_eq!(ids(m.block_table(2).unwrap()), [1, 2, 10]);
    assert_eq!(m.pool().num_free_blocks(), 7);
}

#[test]
fn capacity_check_counts_evictable_hits_and_changes_nothing_on_failure() {
    let mut m = KVCacheManager::new(14, 16, true, FreeOrder::Classic).unwrap();
    admit(&mut m, 0, &[(1, 96)]);
    admit(&mut m, 1, &[(1, 48), (2, 1)]);
    m.free(0);
    admit(&mut m, 2, &[(3, 32)]);
    admit(&mut m, 3, &[(4, 32)]);
    assert_eq!(m.pool().num_free_blocks(), 5);
    let before = m.clone();
    let s = segs(&[(1, 96), (5, 48)]);
    assert_eq!(m.lookup(&s).unwrap(), 96);
    assert_eq!(m.allocate(9, &s, 48).unwrap(), None);
    assert!(!m.contains(9));
    assert_eq!(m.pool().free_block_ids(), before.pool().free_block_ids());
    for b in 0..14 {
        assert_eq!(
            m.pool().ref_cnt(b).unwrap(),
            before.pool().ref_cnt(b).unwrap()
        );
    }
}

#[test]
fn copy_on_write_first_writer_copies_last_writes_in_place() {
    let mut m = KVCacheManager::new(11, 16, true, FreeOrder::Classic).unwrap();
    let prompt = [(1, 40)];
    assert_eq!(admit(&mut m, 0, &prompt), [1, 2, 3]);
    m.fork(0, 1).unwrap();
    let child = segs(&[(1, 40), (1001, 1)]);
    assert_eq!(ids(&m.allocate(1, &child, 1).unwrap().unwrap()), [4]);
    assert_eq!(ids(m.block_table(1).unwrap()), [1, 2, 4]);
    assert_eq!(m.num_cow_copies(), 1);
    let parent = segs(&[(1, 40), (1000, 1)]);
    assert_eq!(
        ids(&m.allocate(0, &parent, 1).unwrap().unwrap()),
        Vec::<u32>::new()
    );
    assert_eq!(ids(m.block_table(0).unwrap()), [1, 2, 3]);
    assert_eq!(m.num_cow_copies(), 1);
    m.check_invariants().unwrap();
}
