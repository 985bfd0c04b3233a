//! kvsim-core: the whole model of paged KV-cache memory management, with no Python in it.
//!
//! Layers, bottom up: [`hash`] (content keys of blocks), [`free_queue`] (the intrusive LRU list),
//! [`block_pool`] (reference counts, free queue, prefix map), [`manager`] (per-request block tables,
//! prefix lookup, copy-on-write), and beside them [`cpu_tier`] (the host-memory tier of vLLM's native
//! offloading). DESIGN.md at the repository root describes the semantics; the
//! Python package's `kvsim.reference` is the executable spec these types are tested against.

pub mod block_pool;
pub mod block_table;
pub mod cluster;
pub mod cpu_tier;
pub mod engine;
pub mod error;
pub mod floor;
pub mod free_queue;
pub mod hash;
pub mod kv_groups;
pub mod manager;

pub use block_pool::{BlockPool, FreeOrder};
pub use block_table::BlockTable;
pub use error::{KvError, Result};
pub use hash::{BlockKey, Segment};
pub use manager::KVCacheManager;

/// Identifies a block of the pool. Block 0 is the null block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

impl BlockId {
    pub const NULL: BlockId = BlockId(0);

    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for BlockId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
