"""What many runs are turned into: sweeps, the claims suite, plots, run reports.

- `sweep`: grids, executors, resume; `claims`: the claims suite (`python -m kvsim.analysis.claims`);
  `plots`: its PNGs; `run_report`: the `kvsim run` table and notes;
  `steady_state`: the overloaded and too-short rule they and `plan` share. Imports the engine, never back.
"""
