//! Content identity: segments -> per-block pieces -> chained 128-bit block keys (SPEC §3).
//!
//! The function is defined once, in DESIGN.md §Keys, and computed identically by
//! `python/kvsim/reference/hashing.py`; a test checks the two agree on random inputs.

use crate::{Result, invalid_arg};

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
/// Lanes of the key of the (virtual) block before a request's first block: the digits of pi.
const ROOT_LO: u64 = 0x243F_6A88_85A3_08D3;
const ROOT_HI: u64 = 0x1319_8A2E_0370_7344;

/// The content key of a full block; it covers the block and, through the chain, everything before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey(pub u128);

/// `length` tokens: the first `length` tokens of the content named `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    pub id: u64,
    pub len: u64,
}

impl Segment {
    pub const fn new(id: u64, len: u64) -> Self {
        Segment { id, len }
    }
}

/// splitmix64's finaliser: a bijection on 64-bit words with full avalanche.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Incremental key of one block: feed its pieces in order, then `finish`.
#[derive(Clone, Copy, Debug)]
pub struct KeyBuilder {
    lo: u64,
    hi: u64,
    num_pieces: u64,
}

impl KeyBuilder {
    #[inline]
    pub fn new(parent: Option<BlockKey>) -> Self {
        let (lo, hi) = match parent {
            None => (ROOT_LO, ROOT_HI),
            Some(BlockKey(k)) => (k as u64, (k >> 64) as u64),
        };
        KeyBuilder {
            lo,
            hi,
            num_pieces: 0,
        }
    }

    #[inline]
    fn word(&mut self, w: u64) {
        self.lo = mix64(self.lo ^ w);
        self.hi = mix64(self.hi.wrapping_add(w).wrapping_add(GOLDEN));
    }

    /// Absorbs one piece: tokens `[offset, end)` of content `id`.
    #[inline]
    pub fn piece(&mut self, id: u64, offset: u64, end: u64) {
        self.word(id);
        self.word(offset);
        self.word(end);
        self.num_pieces += 1;
    }

    #[inline]
    pub fn finish(self) -> BlockKey {
        let lo = mix64(self.lo ^ self.num_pieces);
        let hi = mix64(self.hi ^ lo);
        BlockKey((u128::from(hi) << 64) | u128::from(lo))
    }
}

/// Key of one block from its parent's key and its `(id, offset, end)` pieces.
pub fn block_key(parent: Option<BlockKey>, pieces: &[(u64, u64, u64)]) -> BlockKey {
    let mut b = KeyBuilder::new(parent);
    for &(id, off, end) in pieces {
        b.piece(id, off, end);
    }
    b.finish()
}

/// Checks a request's segment list and returns its total token count.
pub fn validate_segments(segments: &[Segment]) -> Result<u64> {
    if segments.is_empty() {
        invalid_arg!("segments must not be empty");
    }
    let mut total: u128 = 0;
    for (i, s) in segments.iter().enumerate() {
        if s.len < 1 {
            invalid_arg!(
                "segment {i}: length {} must be between 1 and {}",
                s.len,
                u64::MAX
            );
        }
        total += u128::from(s.len);
    }
    match u64::try_from(total) {
        Ok(t) => Ok(t),
        Err(_) => invalid_arg!("segments describe {total} tokens, more than a u64 holds"),
    }
}

/// Walks the keys of consecutive full blocks of a segment list, keeping a cursor into the segments so
/// that `n` blocks cost O(n + segments) rather than O(n · segments).
pub struct BlockKeys<'a> {
    segments: &'a [Segment],
    block_size: u64,
    next_block: u64,
    end_block: u64,
    parent: Option<BlockKey>,
    seg: usize,
    seg_start: u64,
}

impl<'a> BlockKeys<'a> {
    /// Keys of blocks `start .. start + count`, chained from `parent` (the key of block `start - 1`).
    /// The caller guarantees those blocks are full, i.e. `(start + count) · block_size` tokens exist.
    pub fn new(
        segments: &'a [Segment],
        block_size: u64,
        start: u64,
        parent: Option<BlockKey>,
        count: u64,
    ) -> Self {
        BlockKeys {
            segments,
            block_size,
            next_block: start,
            end_block: start + count,
            parent,
            seg: 0,
            seg_start: 0,
        }
    }
}

impl Iterator for BlockKeys<'_> {
    type Item = BlockKey;

    fn next(&mut self) -> Option<BlockKey> {
        if self.next_block >= self.end_block {
            return None;
        }
        let lo = self.next_block * self.block_size;
        let hi = lo + self.block_size;
        // Skip segments that end at or before this block.
        while self.seg < self.segments.len() && self.seg_start + self.segments[self.seg].len <= lo {
            self.seg_start += self.segments[self.seg].len;
            self.seg += 1;
        }
        let mut b = KeyBuilder::new(self.parent);
        let (mut i, mut start) = (self.seg, self.seg_start);
        while i < self.segments.len() && start < hi {
            let s = self.segments[i];
            let end = start + s.len;
            b.piece(s.id, lo.max(start) - start, hi.min(end) - start);
            start = end;
            i += 1;
        }
        let key = b.finish();
        self.parent = Some(key);
        self.next_block += 1;
        Some(key)
    }
}

/// Keys of every full block the segments describe (a trailing partial block gets none).
pub fn block_keys(segments: &[Segment], block_size: u64) -> Result<Vec<BlockKey>> {
    let total = validate_segments(segments)?;
    if block_size < 1 {
        invalid_arg!("block_size {block_size} must be at least 1");
    }
    let n = total / block_size;
    let needed = u128::from(n) * u128::from(BYTES_PER_KEY);
    let limit = crate::block_pool::memory_limit();
    if needed > u128::from(limit) {
        invalid_arg!(
            "segments describe {n} full blocks of {block_size} tokens: their keys need {needed} bytes \
             ({BYTES_PER_KEY} bytes per key), more than the memory limit of {limit} bytes"
        );
    }
    Ok(BlockKeys::new(segments, block_size, 0, None, n).collect())
}

/// What one key of `block_keys`' result may take, as a Python int in a list (the limit's unit).
pub const BYTES_PER_KEY: u64 = 64;

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(v: &[(u64, u64)]) -> Vec<Segment> {
        v.iter().map(|&(id, len)| Segment::new(id, len)).collect()
    }

    #[test]
    fn mix64_matches_splitmix64_reference_values() {
        // splitmix64 outputs for seed 0 are mix64(k * GOLDEN) for k = 1, 2, ...
        assert_eq!(mix64(GOLDEN), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix64(GOLDEN.wrapping_mul(2)), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn shared_prefix_gives_shared_keys_and_divergence_breaks_the_chain() {
        let a = block_keys(&segs(&[(7, 48), (100, 7)]), 16).unwrap();
        let b = block_keys(&segs(&[(7, 48), (200, 5)]), 16).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(b.len(), 3);
        assert_eq!(a, b);
        let c = block_keys(&segs(&[(7, 40), (300, 30)]), 16).unwrap();
        assert_eq!(c[..2], a[..2]);
        assert_ne!(c[2], a[2]);
        assert_ne!(c[3], a[2]);
    }

    #[test]
    fn a_segment_prefix_means_the_same_tokens() {
        // (7, 10) and (7, 48) agree on their first 10 tokens, so with block 8 the first block matches.
        let a = block_keys(&segs(&[(7, 10), (1, 6)]), 8).unwrap();
        let b = block_keys(&segs(&[(7, 48)]), 8).unwrap();
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
    }

    #[test]
    fn cursor_resumes_mid_list_like_a_fresh_walk() {
        let s = segs(&[(1, 5), (2, 40), (3, 3), (4, 70)]);
        let all = block_keys(&s, 16).unwrap();
        let tail: Vec<_> = BlockKeys::new(&s, 16, 3, Some(all[2]), 4).collect();
        assert_eq!(tail, all[3..7]);
    }

    #[test]
    fn bad_segments_are_rejected() {
        assert!(validate_segments(&[]).is_err());
        assert!(validate_segments(&segs(&[(1, 0)])).is_err());
        assert!(validate_segments(&segs(&[(1, u64::MAX), (2, 1)])).is_err());
    }
}
