//! The hybrid manager's unit tests (vLLM's rules, worked examples; Mamba align mode).

use super::*;
use crate::{BlockPool, FreeOrder};

fn sw_full(window: u64) -> Groups {
    Groups::new(
        vec![
            GroupSpec {
                kind: GroupKind::SlidingWindow,
                window,
                block_size: 4,
                cap: None,
                checkpoint_blocks: 0,
            },
            GroupSpec {
                kind: GroupKind::Full,
                window: 0,
                block_size: 4,
                cap: None,
                checkpoint_blocks: 0,
            },
        ],
        4,
        Some(0),
        true,
    )
    .unwrap()
}

fn segs(id: u64, n: u64) -> Vec<Segment> {
    vec![Segment::new(id, n)]
}

/// vLLM 0.33.0's own decisions for this scenario (recorded by driving its KVCacheManager on CPU):
/// a 14-token prompt on a sliding window of 5 and a full group, block 4, 20 blocks; decoding frees
/// the window's blocks at the next allocation, unkeyed ones to the head of the free queue.
#[test]
fn window_blocks_leave_at_the_next_allocation() {
    let groups = sw_full(5);
    let mut pool = BlockPool::new(20, true, FreeOrder::LifoUnhashed).unwrap();
    let mut cache = KeyCache::default();
    let mut req = HybridTables::default();
    let mut hit = Lookup::default();
    let s = segs(7, 14);
    groups.lookup(&pool, &s, &mut cache, 13, &mut hit);
    assert_eq!(hit.tokens, 0);
    assert_eq!(
        groups.need(
            &pool,
            None,
            14,
            Some(&hit),
            0,
            false,
            false,
            &StepKeys::default()
        ),
        8
    );
    let mut new = Vec::new();
    groups.admit(
        &mut pool,
        &mut req,
        &mut cache,
        &s,
        &hit,
        14,
        14,
        14,
        false,
        &mut StepKeys::default(),
        &mut new,
    );
    let ids = |t: &GroupTable| t.blocks.iter().map(|b| b.0).collect::<Vec<_>>();
    assert_eq!(ids(&req.tables[0]), vec![1, 2, 3, 4]);
    assert_eq!(ids(&req.tables[1]), vec![5, 6, 7, 8]);
    let mut freed = Vec::new();
    groups.remove_skipped(&mut pool, &mut req, 14, &mut freed);
    assert_eq!(freed, vec![(BlockId(2), 0), (BlockId(1), 0)]);
    assert_eq!(ids(&req.tables[0]), vec![0, 0, 3, 4]);
    // Unkeyed, so to the head: the next two pops reuse them (vLLM: [2], [1]).
    assert_eq!(pool.free_block_ids()[..2], [BlockId(2), BlockId(1)]);
    let s17 = vec![Segment::new(7, 14), Segment::new(1 << 63, 3)];
    freed.clear();
    groups.remove_skipped(&mut pool, &mut req, 16, &mut freed);
    assert_eq!(freed, vec![(BlockId(3), 0)]);
    assert_eq!(
        groups.need(
            &pool,
            Some(&req),
            17,
            None,
            16,
            false,
            false,
            &StepKeys::default()
        ),
        2
    );
    new.clear();
    groups.grow(
        &mut pool,
        &mut req,
        &mut cache,
        &s17,
        17,
        17,
        false,
        &mut StepKeys::default(),
        &mut new,
    );
    assert_eq!(new, vec![(BlockId(2), 0), (BlockId(1), 1)]);
    freed.clear();
    groups.free(&mut pool, &mut req, &mut freed);
    assert_eq!(
        freed.iter().map(|&(b, _)| b.0).collect::<Vec<_>>(),
        vec![2, 4, 1, 8, 7, 6, 5]
    );
    pool.check_invariants().unwrap();
}

#[test]
fn a_second_request_hits_the_window_at_the_prompts_end() {
    let groups = sw_full(5);
    let mut pool = BlockPool::new(20, true, FreeOrder::LifoUnhashed).unwrap();
    let (mut cache, mut req, mut hit, mut new) = (
        KeyCache::default(),
        HybridTables::default(),
        Lookup::default(),
        Vec::new(),
    );
    let s = segs(7, 14);
    groups.lookup(&pool, &s, &mut cache, 13, &mut hit);
    groups.admit(
        &mut pool,
        &mut req,
        &mut cache,
        &s,
        &hit,
        14,
        14,
        14,
        false,
        &mut StepKeys::default(),
        &mut new,
    );
    // Only the window's block ending at the replay boundary (12 tokens) is keyed in group 0.
    let s2 = vec![Segment::new(7, 14), Segment::new(9, 2)];
    let mut cache2 = KeyCache::default();
    groups.lookup(&pool, &s2, &mut cache2, 15, &mut hit);
    assert_eq!(hit.tokens, 12);
    assert_eq!(hit.hits[0], vec![BlockId(0), BlockId(0), BlockId(3)]);
    assert_eq!(hit.hits[1], vec![BlockId(5), BlockId(6), BlockId(7)]);
    assert_eq!(hit.junction, 0);
}

fn mamba_full(bs: u64, checkpoint_blocks: u64) -> Groups {
    mamba_full_retention(bs, checkpoint_blocks, Some(0))
}

fn mamba_full_retention(bs: u64, checkpoint_blocks: u64, retention: Option<u64>) -> Groups {
    Groups::new(
        vec![
            GroupSpec {
                kind: GroupKind::Mamba,
                window: 0,
                block_size: bs,
                cap: Some(2 + checkpoint_blocks),
                checkpoint_blocks,
            },
            GroupSpec {
                kind: GroupKind::Full,
                window: 0,
                block_size: bs,
                cap: None,
                checkpoint_blocks: 0,
            },
        ],
        bs,
        retention,
        true,
    )
    .unwrap()
}

/// A table as a string: `N` for the null block, `b<i>` for a real block at position `i`.
fn shape(t: &GroupTable) -> String {
    t.blocks
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if b == BlockId::NULL {
                "N".to_string()
            } else {
                format!("b{i}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One request's allocations as the engine makes them: the chunk rule, the blocks that left, the
/// room, the new blocks.
struct Drive {
    groups: Groups,
    pool: BlockPool,
    keyed: StepKeys,
    budget: u64,
}

impl Drive {
    fn new(groups: Groups, num_blocks: u32, budget: u64) -> Self {
        let pool = BlockPool::new(num_blocks, true, FreeOrder::LifoUnhashed).unwrap();
        Drive {
            groups,
            pool,
            keyed: StepKeys::default(),
            budget,
        }
    }

    /// Admits a request of `segs` (all prompt): its lookup, first chunk, room and blocks; returns
    /// (hit, tokens) or None if it cannot start.
    fn admit(
        &mut self,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
    ) -> Option<(u64, u64)> {
        let total: u64 = segs.iter().map(|s| s.len).sum();
        let mut hit = Lookup::default();
        self.groups
            .lookup(&self.pool, segs, cache, total - 1, &mut hit);
        let h = hit.tokens;
        let n = (total - h).min(self.budget);
        let n = self
            .groups
            .split(h, n, total, total, hit.junction, self.budget);
        if n == 0 {
            return None;
        }
        let ckpt = self.groups.needs_checkpoint(h, h + n, total, total);
        let need = self.groups.need(
            &self.pool,
            None,
            h + n,
            Some(&hit),
            h,
            false,
            ckpt,
            &self.keyed,
        );
        if need > u64::from(self.pool.num_free_blocks()) {
            return None;
        }
        let mut new = Vec::new();
        self.groups.admit(
            &mut self.pool,
            req,
            cache,
            segs,
            &hit,
            h + n,
            h + n,
            total,
            ckpt,
            &mut self.keyed,
            &mut new,
        );
        Some((h, n))
    }

    /// A running request at `computed` of `segs` (prompt `prompt`) grows by what the chunk rule
    /// gives; returns (tokens, freed).
    fn grow(
        &mut self,
        req: &mut HybridTables,
        cache: &mut KeyCache,
        segs: &[Segment],
        prompt: u64,
        computed: u64,
    ) -> (u64, Vec<(BlockId, usize)>) {
        let total: u64 = segs.iter().map(|s| s.len).sum();
        let n = (total - computed).min(self.budget);
        let n = self
            .groups
            .split(computed, n, total, prompt, req.junction, self.budget);
        let mut freed = Vec::new();
        if n == 0 {
            return (0, freed);
        }
        self.groups
            .remove_skipped(&mut self.pool, req, computed, &mut freed);
        let end = computed + n;
        let ckpt = self.groups.needs_checkpoint(computed, end, total, prompt);
        let need = self.groups.need(
            &self.pool,
            Some(req),
            end,
            None,
            computed,
            false,
            ckpt,
            &self.keyed,
        );
        assert!(need <= u64::from(self.pool.num_free_blocks()));
        let mut new = Vec::new();
        self.groups.grow(
            &mut self.pool,
            req,
            cache,
            segs,
            end,
            end,
            ckpt,
            &mut self.keyed,
            &mut new,
        );
        (n, freed)
    }
}

/// DESIGN.md §Hybrid attention, "Mamba groups" (and the vLLM source study's worked example): a
/// 5000-token prompt, B = 512, a budget of 2048, no checkpoints. Chunks end on block boundaries, the
/// tail is a step of its own, a table holds nulls inside it, and only the state at the replay
/// boundary (4608 tokens) is keyed.
#[test]
fn mamba_align_tables_follow_the_chunks() {
    let mut d = Drive::new(mamba_full(512, 0), 64, 2048);
    let (mut req, mut cache) = (HybridTables::default(), KeyCache::default());
    let s = segs(7, 5000);
    assert_eq!(d.admit(&mut req, &mut cache, &s), Some((0, 2048)));
    assert_eq!(shape(&req.tables[0]), "N N N b3");
    assert_eq!(req.tables[1].blocks.len(), 4);
    d.keyed.clear();
    let (n, freed) = d.grow(&mut req, &mut cache, &s, 5000, 2048);
    assert_eq!((n, freed.len()), (2048, 0));
    assert_eq!(shape(&req.tables[0]), "N N N b3 N N N b7");
    let b3 = req.tables[0].blocks[3];
    d.keyed.clear();
    // [4096, 4608): the prompt's tail [4608, 5000) is a step of its own.
    let (n, freed) = d.grow(&mut req, &mut cache, &s, 5000, 4096);
    assert_eq!(n, 512);
    assert_eq!(freed, vec![(b3, 0)]);
    assert_eq!(shape(&req.tables[0]), "N N N N N N N b7 b8");
    let b7 = req.tables[0].blocks[7];
    let b8 = req.tables[0].blocks[8];
    let mut keys = KeyCache::default();
    let key8 = group_key(d.groups.keys(&mut keys, &s, 0, 9)[8], 0);
    assert_eq!(d.pool.lookup(key8), Some(b8));
    assert!(d.keyed.contains(key8));
    // No other Mamba block carries a key.
    let key7 = group_key(d.groups.keys(&mut keys, &s, 0, 9)[7], 0);
    assert_eq!(d.pool.lookup(key7), None);
    d.keyed.clear();
    let (n, freed) = d.grow(&mut req, &mut cache, &s, 5000, 4608);
    assert_eq!((n, freed), (392, vec![(b7, 0)]));
    assert_eq!(shape(&req.tables[0]), "N N N N N N N N b8 b9");
    d.keyed.clear();
    // Decode: the source block leaves, keyed, to the free queue's tail.
    let s1 = vec![Segment::new(7, 5000), Segment::new(1 << 63, 1)];
    let (n, freed) = d.grow(&mut req, &mut cache, &s1, 5000, 5000);
    assert_eq!((n, freed), (1, vec![(b8, 0)]));
    assert_eq!(shape(&req.tables[0]), "N N N N N N N N N b9");
    assert_eq!(d.pool.lookup(key8), Some(b8));
    assert_eq!(d.pool.free_block_ids().last(), Some(&b8));
    d.pool.check_invariants().unwrap();
}

/// A request whose Mamba hit was keyed in this step waits for the next (vLLM's
/// `cached_blocks_this_step`); then it hits the state at 4608 and computes the tail.
#[test]
fn mamba_hit_keyed_this_step_waits_a_step() {
    let mut d = Drive::new(mamba_full(512, 0), 64, 8192);
    let (mut a, mut ca) = (HybridTables::default(), KeyCache::default());
    let s = segs(7, 5000);
    // One step: [0, 4608) (the tail is a step of its own).
    assert_eq!(d.admit(&mut a, &mut ca, &s), Some((0, 4608)));
    let b8 = a.tables[0].blocks[8];
    let (mut b, mut cb) = (HybridTables::default(), KeyCache::default());
    let mut hit = Lookup::default();
    d.groups.lookup(&d.pool, &s, &mut cb, 4999, &mut hit);
    assert_eq!(hit.tokens, 4608);
    assert_eq!(hit.hits[0].len(), 9);
    assert_eq!(hit.hits[0][8], b8);
    assert!(hit.hits[0][..8].iter().all(|&x| x == BlockId::NULL));
    assert_eq!(
        d.groups.need(
            &d.pool,
            None,
            5000,
            Some(&hit),
            4608,
            false,
            false,
            &d.keyed
        ),
        DEFERRED
    );
    assert_eq!(d.admit(&mut b, &mut cb, &s), None);
    d.keyed.clear();
    // Next step: one Mamba block for the tail (the hit block is held by `a`), one full block.
    assert_eq!(
        d.groups.need(
            &d.pool,
            None,
            5000,
            Some(&hit),
            4608,
            false,
            false,
            &d.keyed
        ),
        2
    );
    assert_eq!(d.admit(&mut b, &mut cb, &s), Some((4608, 392)));
    assert_eq!(shape(&b.tables[0]), "N N N N N N N N b8 b9");
    assert_eq!(b.tables[0].blocks[8], b8);
    assert_eq!(d.pool.ref_cnt_of(b8), 2);
    d.pool.check_invariants().unwrap();
}

/// With prefill checkpoints a prompt that fits the budget is one step: the checkpoint block at the
/// last boundary before the prompt's end (keyed: the replay boundary) and the running block.
#[test]
fn mamba_checkpoint_reserves_a_second_block() {
    let mut d = Drive::new(mamba_full(512, 1), 64, 8192);
    let (mut req, mut cache) = (HybridTables::default(), KeyCache::default());
    let s = segs(7, 5000);
    assert!(d.groups.needs_checkpoint(0, 5000, 5000, 5000));
    let mut hit = Lookup::default();
    d.groups.lookup(&d.pool, &s, &mut cache, 4999, &mut hit);
    assert_eq!(
        d.groups
            .need(&d.pool, None, 5000, Some(&hit), 0, false, true, &d.keyed),
        2 + 10
    );
    // The full-prompt gate asks the same: the Mamba group's cap is not applied.
    assert_eq!(
        d.groups
            .need(&d.pool, None, 5000, Some(&hit), 0, true, true, &d.keyed),
        2 + 10
    );
    assert_eq!(d.admit(&mut req, &mut cache, &s), Some((0, 5000)));
    assert_eq!(shape(&req.tables[0]), "N N N N N N N N b8 b9");
    let (c, r) = (req.tables[0].blocks[8], req.tables[0].blocks[9]);
    assert_eq!((c, r), (BlockId(1), BlockId(2))); // popped in order: the checkpoint first
    let key8 = group_key(d.groups.keys(&mut cache, &s, 0, 9)[8], 0);
    assert_eq!(d.pool.lookup(key8), Some(c));
    // Not reserved when the chunk starts off a boundary, or covers no block before the last one.
    assert!(!d.groups.needs_checkpoint(100, 5000, 5000, 5000));
    assert!(!d.groups.needs_checkpoint(4608, 5000, 5000, 5000));
    assert!(d.groups.needs_checkpoint(4096, 5000, 5000, 5000));
    assert!(!d.groups.needs_checkpoint(0, 4608, 5000, 5000));
    // Without checkpoints in every Mamba group: none.
    assert!(!mamba_full(512, 0).needs_checkpoint(0, 5000, 5000, 5000));
    d.pool.check_invariants().unwrap();
}

/// vLLM's coordinator gives its Mamba manager no prefill end unless the retention interval is 0
/// (`KVCacheCoordinator.get_num_blocks_to_allocate`: `retention_interval != 0`, None included): a chunk
/// short of the prefill's end that covers its own checkpoint reserves one under dense (None) or sparse
/// retention, never under vLLM's default 0.
#[test]
fn a_chunk_short_of_the_prefill_reserves_a_checkpoint_unless_retention_is_0() {
    for (retention, reserves) in [(Some(0), false), (None, true), (Some(1024), true)] {
        let groups = mamba_full_retention(512, 1, retention);
        assert_eq!(
            groups.needs_checkpoint(0, 2048, 5000, 5000),
            reserves,
            "{retention:?}"
        );
        // The chunk finishing the prefill: alike.
        assert!(groups.needs_checkpoint(0, 5000, 5000, 5000));
    }
}

/// The chunk rule (vLLM's `_mamba_block_aligned_split`), B = 512.
#[test]
fn mamba_split_cuts_chunks_to_boundaries() {
    let g = mamba_full(512, 0);
    // Budget 2048: boundaries; the tail alone; decode untouched.
    assert_eq!(g.split(0, 2048, 5000, 5000, 0, 2048), 2048);
    assert_eq!(g.split(4096, 904, 5000, 5000, 0, 2048), 512);
    assert_eq!(g.split(4608, 392, 5000, 5000, 0, 2048), 392);
    assert_eq!(g.split(5000, 1, 5001, 5000, 0, 2048), 1);
    // A budget left that reaches no boundary: nothing this step.
    assert_eq!(g.split(0, 300, 5000, 5000, 0, 2048), 0);
    assert_eq!(g.split(1024, 500, 5000, 5000, 0, 2048), 0);
    // A prompt within one block: one chunk.
    assert_eq!(g.split(0, 300, 300, 300, 0, 2048), 300);
    // The junction stops a chunk (floored to blocks from the start).
    assert_eq!(g.split(0, 2048, 5000, 5000, 1100, 2048), 1024);
    assert_eq!(g.split(0, 2048, 5000, 5000, 600, 2048), 512);
    // A block larger than the budget: sub-block chunks, then the next boundary.
    assert_eq!(g.split(0, 100, 1000, 1000, 0, 100), 100);
    assert_eq!(g.split(500, 100, 1000, 1000, 0, 100), 12);
    // A resumed request (outputs included): the prefill ends at T - 1.
    assert_eq!(g.split(0, 8192, 5100, 5000, 0, 8192), 5096 / 512 * 512);
    // With checkpoints the tail is not a step of its own.
    let c = mamba_full(512, 1);
    assert_eq!(c.split(0, 5000, 5000, 5000, 0, 8192), 5000);
    assert_eq!(c.split(0, 5000, 5000, 5000, 2000, 8192), 1536);
    // Without prefix caching: no rule.
    let mut specs = g.specs().to_vec();
    specs[0].block_size = 512;
    let off = Groups::new(specs, 512, Some(0), false).unwrap();
    assert!(!off.align());
    assert_eq!(off.split(0, 300, 5000, 5000, 0, 2048), 300);
}

/// A Mamba table's blocks below the skipped boundary leave highest first, nulls inside it skipped
/// (not a stop, as for a window), as one release.
#[test]
fn mamba_remove_skipped_walks_past_nulls() {
    let groups = Groups::new(
        vec![GroupSpec {
            kind: GroupKind::Mamba,
            window: 0,
            block_size: 4,
            cap: Some(2),
            checkpoint_blocks: 0,
        }],
        4,
        Some(0),
        true,
    )
    .unwrap();
    let mut pool = BlockPool::new(10, true, FreeOrder::LifoUnhashed).unwrap();
    let got = pool.allocate(3).unwrap();
    let n = BlockId::NULL;
    let mut req = HybridTables {
        tables: vec![GroupTable {
            blocks: vec![n, got[0], n, n, got[1], n, got[2]],
            num_cached: 0,
        }],
        num_prompt: 28,
        junction: 0,
    };
    let mut freed = Vec::new();
    // 25 computed: positions below (25 - 1) / 4 = 6 go.
    groups.remove_skipped(&mut pool, &mut req, 25, &mut freed);
    assert_eq!(freed, vec![(got[1], 0), (got[0], 0)]);
    assert_eq!(req.tables[0].blocks, vec![n, n, n, n, n, n, got[2]]);
    // Unkeyed, one release in that order: to the head.
    assert_eq!(pool.free_block_ids()[..2], [got[1], got[0]]);
    pool.check_invariants().unwrap();
}

#[test]
fn mamba_align_refusals() {
    let spec = |kind, checkpoint_blocks| GroupSpec {
        kind,
        window: 4,
        block_size: 4,
        cap: None,
        checkpoint_blocks,
    };
    assert!(Groups::new(vec![spec(GroupKind::Full, 1)], 4, Some(0), true).is_err());
    assert!(Groups::new(vec![spec(GroupKind::Mamba, 2)], 4, Some(0), true).is_err());
    assert!(Groups::new(vec![spec(GroupKind::Mamba, 1)], 4, Some(0), true).is_ok());
    let mut other = spec(GroupKind::Mamba, 0);
    other.block_size = 2;
    let two = vec![spec(GroupKind::Mamba, 0), other];
    assert!(Groups::new(two.clone(), 4, Some(0), true).is_err());
    assert!(Groups::new(two, 4, Some(0), false).is_ok());
    let cfg = crate::engine::EngineConfig {
        chunked_prefill: false,
        groups: Some(mamba_full(16, 0)),
        ..crate::engine::EngineConfig::for_tests(64, 16)
    };
    let err = cfg.validate().unwrap_err().to_string();
    assert!(err.contains("chunked prefill"), "{err}");
    let cfg = crate::engine::EngineConfig {
        chunked_prefill: true,
        ..cfg
    };
    cfg.validate().unwrap();
}

/// A CPU tier's hand-offs (DESIGN.md §CPU tier, "A Mamba group"): a state group beside full attention,
/// block 4, retention 0. A 14-token prompt computed in one chunk keys the state at its replay boundary
/// (12) only, marked keyed in the step and handed off as its request's; without recording nothing is
/// listed; an adopted state (a landed load's) is marked keyed and handed off, dropped with its request.
#[test]
fn state_blocks_keyed_are_handed_off_as_their_requests() {
    let spec = |kind| GroupSpec {
        kind,
        window: 0,
        block_size: 4,
        cap: None,
        checkpoint_blocks: 0,
    };
    let groups = Groups::new(
        vec![spec(GroupKind::Mamba), spec(GroupKind::Full)],
        4,
        Some(0),
        true,
    )
    .unwrap();
    let s = segs(9, 14);
    let admit = |keyed: &mut StepKeys, end: u64| {
        let mut pool = BlockPool::new(20, true, FreeOrder::LifoUnhashed).unwrap();
        let (mut cache, mut req, mut hit) = (
            KeyCache::default(),
            HybridTables::default(),
            Lookup::default(),
        );
        groups.lookup(&pool, &s, &mut cache, 13, &mut hit);
        let mut new = Vec::new();
        groups.admit(
            &mut pool, &mut req, &mut cache, &s, &hit, end, end, 14, false, keyed, &mut new,
        );
        req.tables[0].blocks.clone()
    };
    let mut off = StepKeys::new(false);
    admit(&mut off, 12);
    off.hand_off(3);
    let mut out = Vec::new();
    off.take_handed(&mut out);
    assert!(out.is_empty());
    let mut on = StepKeys::new(true);
    let table = admit(&mut on, 12);
    assert_eq!(on.keys.len(), 1);
    on.hand_off(3);
    on.take_handed(&mut out);
    assert_eq!(out.len(), 1);
    let (owner, st) = out[0];
    assert_eq!((owner, st.group, st.boundary), (3, 0, 12));
    assert_eq!(st.block, table[2]);
    assert_eq!(on.keys, vec![st.key]);
    on.clear();
    on.adopt(5, st);
    on.adopt(6, st);
    on.drop_owner(5);
    on.take_handed(&mut out);
    assert_eq!(out, vec![(6, st)]);
    assert_eq!(on.keys, vec![st.key, st.key]);
}

fn full_only(block_size: u64) -> Groups {
    let full = GroupSpec {
        kind: GroupKind::Full,
        window: 0,
        block_size,
        cap: None,
        checkpoint_blocks: 0,
    };
    let window = GroupSpec {
        kind: GroupKind::SlidingWindow,
        window: 64,
        ..full
    };
    Groups::new(vec![window, full], block_size, Some(0), true).unwrap()
}

/// A router's shared chains (`SharedKeys`) read as a request's own: the same keys for pools of one block
/// size in turn, and afresh for a pool of another (a prefill pool of another block size), then back.
#[test]
fn shared_chains_are_each_pools_own() {
    let (a, b) = (full_only(4), full_only(8));
    let s = segs(11, 40);
    let own = |g: &Groups, n: u64| g.keys(&mut KeyCache::default(), &s, 0, n).to_vec();
    let mut shared = SharedKeys::default();
    for (g, n) in [(&a, 5), (&a, 9), (&b, 4), (&a, 3), (&b, 5)] {
        assert_eq!(g.keys(shared.for_groups(g), &s, 0, n), own(g, n));
    }
    shared.reset();
    let other = segs(12, 40);
    let fresh = a.keys(&mut KeyCache::default(), &other, 0, 9).to_vec();
    assert_eq!(a.keys(shared.for_groups(&a), &other, 0, 9), fresh);
}

/// vLLM's deferred free (`_drain_deferred_frees` over `pop_blocks_for_free`): every group's blocks in
/// one release, the last group's last block first, so the keyed blocks reach the free queue's tail in
/// that one order (the full group's before the window's), where `free` releases the window group first.
/// (The window group keys only its block 3 here.)
#[test]
fn a_deferred_free_releases_every_group_at_once() {
    let groups = sw_full(5);
    let s = segs(7, 14);
    let mut tails = Vec::new();
    for at_once in [false, true] {
        let mut pool = BlockPool::new(20, true, FreeOrder::LifoUnhashed).unwrap();
        let (mut cache, mut req, mut hit, mut new) = (
            KeyCache::default(),
            HybridTables::default(),
            Lookup::default(),
            Vec::new(),
        );
        groups.lookup(&pool, &s, &mut cache, 13, &mut hit);
        groups.admit(
            &mut pool,
            &mut req,
            &mut cache,
            &s,
            &hit,
            14,
            14,
            14,
            false,
            &mut StepKeys::default(),
            &mut new,
        );
        let mut freed = Vec::new();
        if at_once {
            groups.free_at_once(&mut pool, &mut req, &mut freed);
        } else {
            groups.free(&mut pool, &mut req, &mut freed);
        }
        let order = freed.iter().map(|&(b, g)| (b.0, g)).collect::<Vec<_>>();
        let expected = if at_once {
            vec![
                (8, 1),
                (7, 1),
                (6, 1),
                (5, 1),
                (4, 0),
                (3, 0),
                (2, 0),
                (1, 0),
            ]
        } else {
            vec![
                (4, 0),
                (3, 0),
                (2, 0),
                (1, 0),
                (8, 1),
                (7, 1),
                (6, 1),
                (5, 1),
            ]
        };
        assert_eq!(order, expected);
        let queue = pool.free_block_ids();
        // the unkeyed blocks (the partial last ones, the window's first two) to the head, the first
        // released first, in either order the same; the keyed ones to the tail, in the release's order
        assert_eq!(queue[..4], [BlockId(8), BlockId(4), BlockId(2), BlockId(1)]);
        tails.push(
            queue[queue.len() - 4..]
                .iter()
                .map(|b| b.0)
                .collect::<Vec<_>>(),
        );
        pool.check_invariants().unwrap();
    }
    assert_eq!(tails, vec![vec![3, 7, 6, 5], vec![7, 6, 5, 3]]);
}
