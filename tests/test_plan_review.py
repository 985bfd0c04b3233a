"""Checks from a review of kvsim's answers (kvsim plan's above all): a quantization the checkpoint lacks is
refused naming the model as given."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError


def test_a_quantization_the_checkpoint_lacks_names_the_preset():
    with pytest.raises(InvalidArgumentError) as exc:
        kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", quantization="awq")
    assert "model 'llama-3.1-8b' is not an AWQ checkpoint" in str(exc.value)
    assert "huggingface.co" not in str(exc.value)
    with pytest.raises(InvalidArgumentError, match="is not a GPTQ checkpoint"):
        kvsim.SimConfig(model="llama-3.1-8b", gpu="h100-80gb", quantization="gptq_marlin")
