"""Hypothesis strategies shared by the fleet tests: the replicas of a fleet drawn from one config
(tests/test_cluster_differential.py's `fleets`, tests/test_dp_groups.py's `grouped_fleets`, each varying its
own knobs besides the shared ones)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
from hypothesis import assume

import kvsim
from kvsim.errors import InvalidArgumentError

# What a strategy's `more` gets: hypothesis's `draw` and the fleet's first config; it returns more knobs.
MoreKnobs = Callable[[Callable[..., Any], kvsim.SimConfig], dict[str, Any]]


@st.composite
def fleet_of(draw, base: kvsim.SimConfig, n: int, more: MoreKnobs) -> list[kvsim.SimConfig]:
    """`n` replica configs: copies of `base`, or `base` then `n` - 1 replicas each differing from it in
    memory, block size, caching and seats, and in the knobs `more` draws (sharing what shapes the input:
    sampling and max_model_len); a change `base.replace` refuses is assumed away."""
    if draw(st.booleans()):
        return [base] * n
    out = [base]
    for _ in range(n - 1):
        change = {
            "num_blocks": draw(st.integers(2, 60)),
            "block_size": draw(st.sampled_from([1, 2, 4, 16])),
            "enable_prefix_caching": draw(st.booleans()),
            "max_num_seqs": draw(st.integers(1, min(8, base.max_num_batched_tokens))),
            **more(draw, base),
        }
        try:
            out.append(base.replace(**change))
        except InvalidArgumentError:
            assume(False)
    return out
