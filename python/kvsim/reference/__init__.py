"""The pure-Python reference backend: the executable spec the Rust core is tested against. Slow by design."""

from kvsim.reference.block_pool import BlockPool
from kvsim.reference.hashing import block_keys
from kvsim.reference.kv_cache_manager import KVCacheManager

__all__ = ["BlockPool", "KVCacheManager", "block_keys"]
