"""The reference engine (the executable spec of `rust/core/src/engine/`), one module per concern
(DESIGN.md §"The reference engine's modules"); this package re-exports what the rest of kvsim reads."""

from kvsim.reference.engine.admission import NEVER, SKIP
from kvsim.reference.engine.core import Engine, run
from kvsim.reference.engine.events import EVENT, EVENT_COLUMNS, EVENT_KINDS
from kvsim.reference.engine.output import (
    COLUMN_DTYPE,
    COLUMN_FILL,
    COUNTERS,
    FINISHED,
    ITL_RUNS,
    ITL_STEPS,
    REJECT_REASONS,
    REJECTED,
    TIMESERIES,
    EngineOutput,
)
from kvsim.reference.engine.replica import Replica
from kvsim.reference.engine.seq import Seq
from kvsim.reference.engine.timing import clock_overflow_message

__all__ = [
    "COLUMN_DTYPE",
    "COLUMN_FILL",
    "COUNTERS",
    "EVENT",
    "EVENT_COLUMNS",
    "EVENT_KINDS",
    "FINISHED",
    "ITL_RUNS",
    "ITL_STEPS",
    "NEVER",
    "REJECTED",
    "REJECT_REASONS",
    "SKIP",
    "TIMESERIES",
    "Engine",
    "EngineOutput",
    "Replica",
    "Seq",
    "clock_overflow_message",
    "run",
]
