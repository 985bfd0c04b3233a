"""The model of the serving system: `SimConfig` and its KNOBS table, LLM models, GPUs, pool sizing.

- `config`: SimConfig; `models`, `gpus`: presets (`kvsim.models`, `kvsim.gpus`); `sizing`: the pool and
  the time models (`kvsim.sizing`); `units`: sizes and durations; `segments`: segment-id conventions.
Imports nothing from kvsim but `kvsim.errors` and itself (DESIGN.md §Architecture).
"""
