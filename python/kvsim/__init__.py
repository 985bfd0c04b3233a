"""kvsim: a fast, faithful simulator of paged KV-cache memory management for LLM serving.

`kvsim.BlockPool` and `kvsim.KVCacheManager` come from the Rust core (`kvsim._core`); `kvsim.reference`
holds their pure-Python twins, the executable spec both backends are tested against.
"""

from kvsim import reference
from kvsim._core import BlockPool, KVCacheManager, block_keys
from kvsim.errors import InternalError, InvalidArgumentError, InvalidOperationError, KvsimError

__version__ = "0.1.0"

__all__ = [
    "BlockPool",
    "InternalError",
    "InvalidArgumentError",
    "InvalidOperationError",
    "KVCacheManager",
    "KvsimError",
    "block_keys",
    "reference",
]
