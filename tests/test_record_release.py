"""A record of a real run is read under the vLLM release that ran it (DESIGN.md §Time model, "Validation";
`kvsim.model.releases.covering`): LLMServingSim's profiles and serving runs are vLLM 0.19.0's, in release
0.19.1's range, so a model they name is read as 0.19.1 reads it (a CSF checkpoint refused naming 0.19.1),
not as the latest does; a run of another release kvsim has is read and recorded as that one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from kvsim.analysis.calibrate_profiles import read_llmservingsim
from kvsim.analysis.validate_runs import Run, config, multi_gpu, run_release
from kvsim.errors import InvalidArgumentError
from kvsim.model.releases import RELEASES, covering
from tests.test_release_readers import _csf

CSF_UNDER = "modelopt weight_scale_encoding 'csf' .*: vLLM {} reads no such field"


def test_covering_names_the_release_whose_range_holds_a_version():
    assert covering("0.19.0") == covering("0.19") == covering("0.19.1") == "0.19.1"
    assert covering("0.23.0") == covering("0.30.5") == covering("0.33.0") == "0.33.0"
    assert covering("0.12.0") == "0.18.1"
    assert covering("0.9.2") == "0.11.2"
    assert covering("v0") == "v0"
    for outside in ("0.35.0", "0.9.1", "0.19.2", "nightly", None, 19):
        assert covering(outside) is None, outside
    # every release covers its own number
    assert all(covering(r) == r for r in RELEASES)


def _run(model: str, version: str, dp: int = 1) -> Run:
    one = np.zeros(1)
    engine = {
        "tensor_parallel_size": 1,
        "data_parallel_size": dp,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 512,
    }
    meta = {"vllm_version": version, "engine_kwargs": engine}
    return Run("r", Path("."), meta, "b200", model, one, one, one, one, one + 4, one + 4, one, one)


def test_a_validation_run_is_read_under_the_release_that_ran_it(tmp_path):
    csf = _csf(tmp_path)
    run = _run(csf, "0.19.0", dp=2)
    assert run_release(run) == "0.19.1"
    # (the latest reads the checkpoint; vLLM 0.19's does not: multi_gpu read it under the latest)
    with pytest.raises(InvalidArgumentError, match=CSF_UNDER.format(r"0\.19\.1")):
        multi_gpu(run)
    with pytest.raises(InvalidArgumentError, match=CSF_UNDER.format(r"0\.19\.1")):
        config(run, "roofline")
    # a run of 0.34.0 reads and records 0.34.0 (the preset's scheduler rules kept); one outside every range
    # is read as the preset's release
    newer = dataclasses.replace(run, meta={**run.meta, "vllm_version": "0.34.0"})
    assert config(newer, "roofline").vllm_release == "0.34.0"
    assert not multi_gpu(newer)
    assert run_release(dataclasses.replace(run, meta={**run.meta, "vllm_version": "0.99.0"})) == "0.19.1"
    plain = _run("llama-3.1-8b", "0.19.0")
    assert config(plain, "roofline").vllm_release == "0.19.1"


def test_a_profile_is_read_under_the_release_that_profiled_it(tmp_path):
    csf = _csf(tmp_path)
    profile = tmp_path / "RTXPRO6000" / "Llama-3.1-8B"
    profile.mkdir(parents=True)
    (profile / "meta.yaml").write_text(
        "vllm_version: 0.19.0\nhardware: RTXPRO6000\nmodel: meta-llama/Llama-3.1-8B\n"
    )
    with pytest.raises(InvalidArgumentError, match=CSF_UNDER.format(r"0\.19\.1")):
        read_llmservingsim(profile, None, csf)
    # profiled by 0.34.0: the model is read (the profile's missing tables are the next refusal)
    (profile / "meta.yaml").write_text("vllm_version: 0.34.0\nhardware: RTXPRO6000\n")
    with pytest.raises(InvalidArgumentError, match=r"no tp<N>/ folder"):
        read_llmservingsim(profile, None, csf)
