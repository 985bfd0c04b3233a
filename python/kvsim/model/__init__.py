"""The model of the serving system: `SimConfig` and its KNOBS table, LLM models, GPUs, pool sizing.

- `config`: SimConfig; `models`, `gpus`: presets (`kvsim.models`, `kvsim.gpus`; the `Model` type in
  `architecture`, a `config.json` read by `hf_config`); `sizing`: the pool (`kvsim.sizing`, which also
  re-exports `linear_time`'s coefficients and calibrations; `shard`: one GPU's share under tensor
  parallelism; `encoders`, `rope`: what vLLM loads beside the weights); `units`: sizes and durations;
  `segments`: segment-id conventions.
Imports nothing from kvsim but `kvsim.errors` and itself (DESIGN.md §Architecture).
"""
