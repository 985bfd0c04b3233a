//! The CPU tier for a model of several KV-cache groups (DESIGN.md §CPU tier, "A hybrid model"; the twin
//! of `python/kvsim/reference/engine/offload_hybrid.py`): a waiting request's hits continued into the
//! tier group by group (full attention a prefix, a window a run from the right, a Mamba state a window of
//! one chunk, to a fixed point), its load over every group, the stores a step offers per group (a sliding
//! window's only at the replay boundary and the shared-prefix junction; a Mamba group's states as the
//! GPU's cache keys them, each alone, before the others), the connector's copy of each table whose window
//! blocks reused since go stale, and the fences a window's or a state's store makes at once. Such a run
//! takes full steps, and every path here is the general one: the tier's keys are listed, never runs of
//! private names.
//!
//! This file holds what both sides share (the reference's "the groups as the connector sees them"): a
//! chunk's key, the groups' chunks (`Chunking`), a load's window, a request's content keys, and what a
//! request finished in the step before keeps for its last offer (`HLast`); `waiting.rs` the lookup, a
//! load's admission and a landed load's resumption, `stores.rs` the connector's tables and the stores, as
//! `offload/` splits `waiting.rs` and `stores.rs`.

mod stores;
mod waiting;

use super::Tier;
use crate::engine::Engine;
use crate::kv_groups::{GroupKind, GroupSpec, Groups};
use crate::{BlockId, BlockKey};

/// A chunk's key: its last block's content key with the low byte its group's index (vLLM's
/// `OffloadKey`, the block hash then the group index: one content's keys order as their groups).
const GROUP_BITS: u32 = 8;

#[inline]
fn chunk_key(content: BlockKey, g: usize) -> BlockKey {
    BlockKey((content.0 >> GROUP_BITS << GROUP_BITS) | g as u128)
}

#[inline]
fn cdiv(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// What a hybrid model's request finished in the step before needs for its last offer (it has left the
/// slab): its connector tables, next chunks, content keys and junction.
#[derive(Debug)]
pub(in crate::engine) struct HLast {
    row: usize,
    prompt_len: u64,
    num_tokens: u64,
    next_stores: Vec<u64>,
    conn: Vec<Vec<BlockId>>,
    keys: Vec<BlockKey>,
    junction: u64,
}

/// The groups' chunks as the connector sees them: a chunk of group `g` holds `blocks_per_chunk` of its
/// blocks (`tpc(g)` tokens, vLLM's `tokens_per_chunk`: the groups' block sizes may differ, each a
/// multiple of the engine's `bs`), named by the content key of the engine block it ends with (one chain
/// for every group) and ranked by where it ends.
struct Chunking<'g> {
    groups: &'g Groups,
    bs: u64,
    bpc: u64,
}

impl Chunking<'_> {
    #[inline]
    fn tpc(&self, g: usize) -> u64 {
        self.groups.specs()[g].block_size * self.bpc
    }

    /// Engine blocks a chunk of group `g` spans.
    #[inline]
    fn per(&self, g: usize) -> u64 {
        self.tpc(g) / self.bs
    }

    /// Chunk `i` of group `g`'s key, from `content` (the engine blocks' content keys).
    #[inline]
    fn key(&self, content: &[BlockKey], g: usize, i: u64) -> BlockKey {
        chunk_key(content[((i + 1) * self.per(g) - 1) as usize], g)
    }

    /// Chunk `i` of group `g`'s position for the tier's ranking: where it ends, in engine blocks (vLLM
    /// ranks a request's keys by the tokens their chunks end at, whatever their group).
    #[inline]
    fn pos(&self, g: usize, i: u64) -> u64 {
        (i + 1) * self.per(g)
    }

    /// Each group's window in chunks (vLLM's `sliding_window_size_in_chunks`): None for full
    /// attention, `ceil(W / C)` for a sliding window of W tokens, `ceil(A / C)` for local chunks of A,
    /// 1 for a Mamba state.
    fn windows(&self) -> Vec<Option<u64>> {
        (0..self.groups.len())
            .map(|g| {
                let spec = &self.groups.specs()[g];
                match spec.kind {
                    GroupKind::Full => None,
                    GroupKind::Mamba => Some(1),
                    _ => Some(cdiv(spec.window, self.tpc(g))),
                }
            })
            .collect()
    }

    /// The tokens a Mamba group's chunk holds, None without one (vLLM's `resolve_mamba_align_size`: a
    /// hit is rounded down to it).
    fn state_chunk(&self) -> Option<u64> {
        (0..self.groups.len())
            .find(|&g| self.groups.specs()[g].kind == GroupKind::Mamba)
            .map(|g| self.tpc(g))
    }

    /// vLLM's `alignment_tokens` for the offloading: the full-attention groups' chunk when they share
    /// one; with no full-attention group the largest chunk; None if they differ.
    fn align(&self) -> Option<u64> {
        let full: Vec<u64> = (0..self.groups.len())
            .filter(|&g| self.groups.specs()[g].kind == GroupKind::Full)
            .map(|g| self.tpc(g))
            .collect();
        match full.first() {
            None => (0..self.groups.len()).map(|g| self.tpc(g)).max(),
            Some(&c) => full.iter().all(|&d| d == c).then_some(c),
        }
    }
}

/// The chunks a load into a group ending at `num_tokens` reads (`load_window_size_in_chunks`): a
/// sliding window widened by the hit's partial last chunk; a state's one.
fn load_window(spec: &GroupSpec, tpc: u64, num_tokens: u64) -> Option<u64> {
    match spec.kind {
        GroupKind::Full => None,
        GroupKind::Mamba => Some(1),
        GroupKind::SlidingWindow => {
            let pad = (tpc - num_tokens % tpc) % tpc;
            Some(cdiv(spec.window, tpc).max(cdiv(spec.window - 1 + pad, tpc)))
        }
        GroupKind::ChunkedLocal => Some(cdiv(spec.window, tpc)),
    }
}

impl<'a> Engine<'a> {
    #[inline]
    fn tier_groups(&self) -> &'a Groups {
        let cfg: &'a _ = self.cfg;
        cfg.groups.as_ref().expect("a hybrid pool")
    }

    /// `k`'s content keys of its first `blocks` engine blocks (a group of the engine's block size
    /// keeps their chain: the tier refuses a layout without one), a copy.
    fn content_keys(&mut self, k: usize, blocks: u64) -> Vec<BlockKey> {
        let groups = self.tier_groups();
        let bs = self.cfg.block_size;
        let g = (0..groups.len())
            .find(|&g| groups.specs()[g].block_size == bs)
            .expect("a group of the engine's block size");
        let s = &mut self.slab[k];
        s.sync_output();
        let hs = s.hybrid.get_or_insert_with(Box::default);
        groups
            .content_keys(&mut hs.keys, &s.segs, g, blocks)
            .to_vec()
    }

    /// The groups' chunks (`Chunking`).
    fn chunking(&self) -> Chunking<'a> {
        self.chunking_of(self.tier_ref())
    }

    /// `chunking` of `tier` (taken out of the engine).
    fn chunking_of(&self, tier: &Tier) -> Chunking<'a> {
        Chunking {
            groups: self.tier_groups(),
            bs: self.cfg.block_size,
            bpc: tier.cfg.blocks_per_chunk,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::FreeOrder;
    use crate::engine::{EngineConfig, EngineInput, GroupLink, TierConfig, run};
    use crate::kv_groups::{GroupKind, GroupSpec, Groups};
    use std::sync::atomic::AtomicBool;

    const MS: u64 = 1_000_000_000;

    /// DESIGN.md §CPU tier, "A hybrid model": each group's blocks take their own time on the link and
    /// move their own bytes. Full attention of 2 layers and windows of 3 (1,000 tokens, wider than any
    /// sequence here) make three groups of 2 layer slots, the last window group holding 1 layer and a
    /// padding slot (vLLM 0.33.0's `_get_kv_cache_groups_uniform_page_size`): its block moves half the
    /// bytes (the offloading worker copies a group's own layers), so half the time. A prompt of 64
    /// tokens stored, evicted from the GPU by another, and loaded again 48 tokens deep (3 blocks of each
    /// group) waits 3 × (1 + 1 + 0.5) ms, not 9 ms; the twin of
    /// `test_a_padded_groups_blocks_take_less_time_on_the_link` in `tests/test_offload_hybrid.py`.
    #[test]
    fn a_padded_groups_blocks_take_less_time_on_the_link() {
        let spec = |kind, window, cap| GroupSpec {
            kind,
            window,
            block_size: 16,
            cap,
            checkpoint_blocks: 0,
        };
        let groups = Groups::new(
            vec![
                spec(GroupKind::Full, 0, None),
                spec(GroupKind::SlidingWindow, 1000, Some(17)),
                spec(GroupKind::SlidingWindow, 1000, Some(17)),
            ],
            16,
            Some(0),
            true,
        )
        .unwrap();
        let link = |ps_per_block, bytes_per_block| GroupLink {
            ps_per_block,
            bytes_per_block,
        };
        let cfg = EngineConfig {
            free_order: FreeOrder::LifoUnhashed,
            max_num_seqs: 1,
            full_prompt_gate: true,
            watermark_while_running: true,
            max_model_len: Some(256),
            groups: Some(groups),
            tier: Some(TierConfig {
                chunks: 64,
                eviction: crate::cpu_tier::Eviction::Lru,
                prompt_only: true,
                blocks_per_chunk: 1,
                store_threshold: 0,
                store_count_per_request: false,
                hit_junction: false,
                ps_per_block: MS,
                latency_ps: 0,
                group_link: vec![link(MS, 16384), link(MS, 16384), link(MS / 2, 8192)],
            }),
            ..EngineConfig::for_tests(14, 16)
        };
        cfg.validate().unwrap();
        let s = 1_000 * MS as i64;
        let inp = EngineInput {
            arrival_ps: &[0, s, 2 * s],
            prompt_len: &[64, 64, 64],
            target: &[1, 1, 1],
            max_gen: &[1, 1, 1],
            fork_parent: &[-1, -1, -1],
            output_seg: &[1 << 63, (1 << 63) + 1, (1 << 63) + 2],
            seg_offsets: &[0, 1, 2, 3],
            segment_id: &[1, 2, 1],
            segment_len: &[64, 64, 64],
        };
        let out = run(inp, &cfg, 0, false, &AtomicBool::new(false)).unwrap();
        assert_eq!(out.cpu_hit_tokens, [0, 0, 48]);
        assert_eq!(out.counters.loaded_blocks, 9);
        assert_eq!(out.load_wait_ps, [0, 0, 7_500_000_000]);
        assert_eq!(out.counters.loaded_group_bytes, 3 * (16384 + 16384 + 8192));
        // Each prompt's store: its 4 full-attention blocks and each window's 3 before the replay boundary.
        assert_eq!(out.counters.stored_blocks, 20);
        assert_eq!(
            out.counters.stored_group_bytes,
            2 * (4 * 16384 + 3 * 16384 + 3 * 8192)
        );
        // Every group's block at the pool's stride (as before): 9 ms.
        let flat = EngineConfig {
            tier: cfg.tier.clone().map(|t| TierConfig {
                group_link: vec![link(MS, 16384); 3],
                ..t
            }),
            ..cfg.clone()
        };
        let out = run(inp, &flat, 0, false, &AtomicBool::new(false)).unwrap();
        assert_eq!(out.load_wait_ps, [0, 0, 9 * MS as i64]);
    }
}
