//! The prefix lookup of a hybrid pool (vLLM 0.33.0's `HybridKVCacheCoordinator.find_longest_cache_hit`,
//! DESIGN.md §Hybrid attention, "The prefix lookup"): groups of one spec looked up together, full
//! attention first, each kind's walk, repeated until no group shortens the hit, and the junction of a
//! prefix a sparse group did not cache. `python/kvsim/reference/kv_groups.py`'s `lookup` and `_find`.

use super::{GroupKind, Groups, KeyCache, Lookup, cdiv, group_key};
use crate::{BlockId, BlockKey, BlockPool, Segment};

impl Groups {
    /// The block cached under `key` in each of `gids` (`held` answers for the pool), pushed into `out`;
    /// false (and `out` as it was) if any misses (vLLM's `get_cached_block`).
    fn cached<F: Fn(BlockKey) -> Option<BlockId>>(
        held: &F,
        key: BlockKey,
        gids: &[usize],
        out: &mut Vec<BlockId>,
    ) -> bool {
        let start = out.len();
        for &g in gids {
            let Some(b) = held(group_key(key, g)) else {
                out.truncate(start);
                return false;
            };
            out.push(b);
        }
        true
    }

    /// The longest prefix of at most `max_tokens` tokens every group can serve (vLLM's
    /// `find_longest_cache_hit`, DESIGN.md §Hybrid attention), into `out`; no side effects on the pool.
    pub fn lookup(
        &self,
        pool: &BlockPool,
        segs: &[Segment],
        cache: &mut KeyCache,
        max_tokens: u64,
        out: &mut Lookup,
    ) {
        let held = |key| pool.lookup(key);
        self.lookup_in(&held, pool.enable_caching(), segs, cache, max_tokens, out);
    }

    /// `lookup` against `held`, which answers for a pool's prefix map (the pool itself, or a router's
    /// snapshot of its keys, DESIGN.md §Clusters), with prefix caching on or off (`caching`).
    pub fn lookup_in<F: Fn(BlockKey) -> Option<BlockId>>(
        &self,
        held: &F,
        caching: bool,
        segs: &[Segment],
        cache: &mut KeyCache,
        max_tokens: u64,
        out: &mut Lookup,
    ) {
        let n = self.specs.len();
        out.hits.resize_with(n, Vec::new);
        for h in &mut out.hits {
            h.clear();
        }
        out.tokens = 0;
        out.junction = 0;
        if !caching {
            return;
        }
        let mut found = vec![false; n];
        let mut lengths = vec![0u64; n];
        let mut hit_length = max_tokens;
        let mut longest = 0u64;
        let simple = self.lookup_order.len() == 2
            && self.specs[self.lookup_order[0][0]].kind == GroupKind::Full;
        let mut scratch: Vec<BlockId> = Vec::new();
        loop {
            let mut curr = hit_length;
            for gids in &self.lookup_order {
                let spec = self.specs[gids[0]];
                if spec.kind == GroupKind::Full && found[gids[0]] {
                    curr = curr.min(lengths[gids[0]]);
                    continue;
                }
                curr = self.find(held, segs, cache, gids, curr, out, &mut scratch);
                for &g in gids {
                    found[g] = true;
                    lengths[g] = curr;
                }
                longest = longest.max(curr);
            }
            if n == 1 || curr >= hit_length {
                hit_length = hit_length.min(curr);
                break;
            }
            hit_length = curr;
            if simple {
                break;
            }
        }
        for gids in &self.lookup_order {
            let spec = self.specs[gids[0]];
            if spec.kind == GroupKind::Full {
                let keep = cdiv(hit_length, spec.block_size) as usize;
                for &g in gids {
                    out.hits[g].truncate(keep);
                }
            }
        }
        let uncached = if n > 1 { longest - hit_length } else { 0 };
        out.tokens = hit_length;
        out.junction = if uncached > 0 {
            hit_length + uncached
        } else {
            0
        };
    }

    /// One spec's longest hit within `max_len` tokens into `out.hits[g]` for `g` in `gids`; the tokens.
    #[allow(clippy::too_many_arguments)]
    fn find<F: Fn(BlockKey) -> Option<BlockId>>(
        &self,
        held: &F,
        segs: &[Segment],
        cache: &mut KeyCache,
        gids: &[usize],
        max_len: u64,
        out: &mut Lookup,
        scratch: &mut Vec<BlockId>,
    ) -> u64 {
        let spec = self.specs[gids[0]];
        let (bs, align) = (spec.block_size, self.alignment);
        let n = max_len / bs;
        let keys = self.keys(cache, segs, gids[0], n);
        for &g in gids {
            out.hits[g].clear();
        }
        match spec.kind {
            GroupKind::Full => {
                for &key in keys {
                    scratch.clear();
                    if !Self::cached(held, key, gids, scratch) {
                        break;
                    }
                    for (&g, &b) in gids.iter().zip(scratch.iter()) {
                        out.hits[g].push(b);
                    }
                }
                let mut hit = out.hits[gids[0]].len() as u64 * bs;
                hit -= hit % align;
                let keep = cdiv(hit, bs) as usize;
                for &g in gids {
                    out.hits[g].truncate(keep);
                }
                hit
            }
            // A state is a window needing one block (vLLM's `MambaManager.find_longest_cache_hit`: from
            // the right, the first cached block is the hit, the positions before it null).
            GroupKind::SlidingWindow | GroupKind::Mamba => {
                let need = spec.run_blocks();
                for &g in gids {
                    out.hits[g].resize(n as usize, BlockId::NULL);
                }
                let mut run = 0u64;
                let mut matched = false;
                for i in (0..n).rev() {
                    scratch.clear();
                    if !Self::cached(held, keys[i as usize], gids, scratch) {
                        run = 0;
                        continue;
                    }
                    if run == 0 && bs != align && (i + 1) * bs % align != 0 {
                        continue;
                    }
                    for (&g, &b) in gids.iter().zip(scratch.iter()) {
                        out.hits[g][i as usize] = b;
                    }
                    run += 1;
                    if run >= need {
                        for &g in gids {
                            out.hits[g].truncate((i + run) as usize);
                        }
                        matched = true;
                        break;
                    }
                }
                if !matched {
                    let mut keep = run;
                    while bs != align && keep * bs % align != 0 {
                        keep -= 1;
                    }
                    for &g in gids {
                        out.hits[g].truncate(keep as usize);
                    }
                }
                out.hits[gids[0]].len() as u64 * bs
            }
            GroupKind::ChunkedLocal => {
                let start = if max_len > 0 {
                    max_len / spec.window * spec.window
                } else {
                    0
                };
                let first = start / bs;
                for &g in gids {
                    out.hits[g].resize(first as usize, BlockId::NULL);
                }
                for &key in &keys[first as usize..] {
                    scratch.clear();
                    if !Self::cached(held, key, gids, scratch) {
                        break;
                    }
                    for (&g, &b) in gids.iter().zip(scratch.iter()) {
                        out.hits[g].push(b);
                    }
                }
                out.hits[gids[0]].len() as u64 * bs
            }
        }
    }
}
