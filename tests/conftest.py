"""Shared fixtures: the two backends, and hypothesis profiles chosen by KVSIM_HYPOTHESIS_PROFILE."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, settings

import kvsim
from kvsim import reference

settings.register_profile("fast", max_examples=60, deadline=None)
settings.register_profile("ci", max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("KVSIM_HYPOTHESIS_PROFILE", "fast"))

BACKENDS = {
    "rust": SimpleNamespace(BlockPool=kvsim.BlockPool, KVCacheManager=kvsim.KVCacheManager),
    "reference": SimpleNamespace(BlockPool=reference.BlockPool, KVCacheManager=reference.KVCacheManager),
}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> SimpleNamespace:
    """Each test using this fixture runs once on the Rust core and once on the Python reference."""
    return BACKENDS[request.param]
