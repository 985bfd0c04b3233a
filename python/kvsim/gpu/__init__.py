"""GPU validation with torch (DESIGN.md §GPU validation): real tensors behind kvsim's block tables.

- `kvsim.gpu.content`: the K/V a token holds, a pure function of its prefix (no torch).
- `kvsim.gpu.numerics`: replays a run's event log into a real paged KV pool and checks decode attention.
- `kvsim.gpu.bytes`: the pool's and the contiguous baseline's bytes as real tensors, against kvsim's sizing.
- `kvsim.gpu.calibrate`: one transformer layer timed at real shapes, the linear time model fitted.
- `kvsim.gpu.validate`: `python -m kvsim.gpu.validate` / `kvsim validate-gpu`, the report.

torch is the optional extra `gpu` (`pip install kvsim[gpu]`); nothing here is imported by `import kvsim`,
and this package's `__init__` imports no torch either.
"""
