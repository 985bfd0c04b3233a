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
