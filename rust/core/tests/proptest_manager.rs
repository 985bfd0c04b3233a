//! Random operation sequences on the manager: invariants after every step (debug builds also assert them
//! inside every pool mutation), atomic failure, and full release when every request is freed.

use kvsim_core::{FreeOrder, KVCacheManager, Segment};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// A new request: prompt segments (shared ids 1..=3 make prefix hits likely), first chunk size.
    Admit(Vec<(u64, u64)>, u64),
    /// One more prefill chunk or decode token for the k-th live request.
    Step(usize, u64),
    Free(usize),
    Fork(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let seg = prop_oneof![(1u64..=3, 1u64..40), (100u64..1_000_000, 1u64..40)];
    prop_oneof![
        (prop::collection::vec(seg, 1..4), 0u64..64).prop_map(|(s, c)| Op::Admit(s, c)),
        (any::<usize>(), 1u64..40).prop_map(|(k, n)| Op::Step(k, n)),
        any::<usize>().prop_map(Op::Free),
        any::<usize>().prop_map(Op::Fork),
    ]
}

struct Live {
    id: u64,
    base: Vec<Segment>,
    generated: u64,
}

impl Live {
    fn segments(&self) -> Vec<Segment> {
        let mut s = self.base.clone();
        if self.generated > 0 {
            s.push(Segment::new((1 << 63) | (self.id << 16), self.generated));
        }
        s
    }
    fn total(&self) -> u64 {
        self.base.iter().map(|s| s.len).sum::<u64>() + self.generated
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn random_operations_keep_every_invariant(
        num_blocks in 2u32..40,
        block_size in prop::sample::select(vec![1u64, 2, 4, 16]),
        caching in any::<bool>(),
        lifo in any::<bool>(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let order = if lifo { FreeOrder::LifoUnhashed } else { FreeOrder::Classic };
        let mut m = KVCacheManager::new(num_blocks, block_size, caching, order).unwrap();
        let mut live: Vec<Live> = Vec::new();
        let mut next_id = 0u64;
        for op in ops {
            match op {
                Op::Admit(s, chunk) => {
                    let base: Vec<Segment> = s.iter().map(|&(id, len)| Segment::new(id, len)).collect();
                    let total: u64 = base.iter().map(|x| x.len).sum();
                    let hit = m.lookup(&base).unwrap();
                    prop_assert!(hit < total && hit % block_size == 0);
                    let n = if chunk == 0 { total - hit } else { chunk.min(total - hit) };
                    let before = m.clone();
                    if m.allocate(next_id, &base, n).unwrap().is_some() {
                        live.push(Live { id: next_id, base, generated: 0 });
                    } else {
                        prop_assert!(!m.contains(next_id));
                        prop_assert_eq!(m.pool().free_block_ids(), before.pool().free_block_ids());
                    }
                    next_id += 1;
                }
                Op::Step(k, n) if !live.is_empty() => {
                    let len = live.len();
                    let r = &mut live[k % len];
                    let computed = m.num_computed_tokens(r.id).unwrap();
                    let n = if computed == r.total() { r.generated += 1; 1 } else { n.min(r.total() - computed) };
                    let snapshot = |m: &KVCacheManager| {
                        (m.pool().free_block_ids(), m.block_table(r.id).unwrap().to_vec())
                    };
                    let before = snapshot(&m);
                    if m.allocate(r.id, &r.segments(), n).unwrap().is_none() {
                        prop_assert_eq!(snapshot(&m), before);
                        prop_assert_eq!(m.num_computed_tokens(r.id).unwrap(), computed);
                    }
                }
                Op::Free(k) if !live.is_empty() => {
                    let r = live.swap_remove(k % live.len());
                    m.free(r.id);
                    prop_assert!(!m.contains(r.id));
                }
                Op::Fork(k) if !live.is_empty() => {
                    let parent = &live[k % live.len()];
                    m.fork(parent.id, next_id).unwrap();
                    let child = Live { id: next_id, base: parent.segments(), generated: 0 };
                    live.push(child);
                    next_id += 1;
                }
                _ => {}
            }
            m.check_invariants().unwrap();
        }
        for r in live.drain(..) {
            m.free(r.id);
        }
        prop_assert_eq!(m.pool().num_free_blocks(), num_blocks - 1);
        prop_assert_eq!(m.num_requests(), 0);
        m.check_invariants().unwrap();
    }
}
