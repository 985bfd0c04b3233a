"""The engine: a workload under a config on either backend (`kvsim.simulate`, `kvsim.simulate_stream`).

- `simulate`: rows, summary, time series; `streaming`: a run fed in chunks; `engine_input`: what both
  engines read; `rust_engine`: the one call into the Rust core; `metrics`: vllm bench serve's serving
  metrics (`SimResult.serving()`); `exact`: chunk-independent means and quantiles; `golden`:
  `python -m kvsim.engine.golden`, the golden traces on both backends.
The pure-Python engine is `kvsim.reference.engine` (DESIGN.md §Architecture).
"""
