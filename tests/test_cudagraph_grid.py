"""The CUDA graphs vLLM captures by default, by release (`cudagraph_capture_grid`): 0.33.0's shared sizes,
gpt-oss's 1,024-token cap, 0.34.0's split sizes and SM100's wide grids (`kvsim.model.memory`). Every figure is
worked by hand from vLLM's code (`vllm/config/vllm.py`, `vllm/config/compilation.py`,
`vllm/model_executor/models/config.py`, 0.33.0 and 0.34.0)."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.errors import InvalidArgumentError
from kvsim.model import memory, models

# llama-3.1-8b: hidden 4096, intermediate 14336, 32 layers. `_forward_peak` is tokens x (4 x 4096 + 3 x 14336)
# x 2 B = tokens x 118,784 B; a graph is 32 x GRAPH_LAYER_BYTES (22 MiB // 100 = 230,686 B) = 7,381,952 B.
LLAMA_TOKEN = (4 * 4096 + 3 * 14336) * 2
LLAMA_GRAPH = 32 * (22 * (1 << 20) // 100)


def test_the_wide_grids_are_vllm_0_34s():
    """`prefill_cudagraph_capture_grid(8192)`: 1, 2, 4, 8..64 by 8 (8), 80..128 by 16 (4), 160..256 by 32
    (4), 320..512 by 64 (4), 640..1024 by 128 (4), 1280..7168 by 256 (24), then 7424 (0.07 x 7168 = 501.8
    rounds down to 256), 7680 (0.07 x 7424 = 519.7: 512) and 8192: 3 + 8 + 4 x 4 + 24 + 3 = 54.
    `decode_cudagraph_capture_grid(1024)`: 1..6, 8..14 by 2 (4), 16..44 by 4 (8), 48..120 by 8 (10),
    128..336 by 16 (14), 352..992 by 32 (21), 1024: 6 + 4 + 8 + 10 + 14 + 21 + 1 = 64."""
    prefill = memory.prefill_capture_grid(8192)
    assert len(prefill) == 54
    assert prefill[:12] == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80]
    assert prefill[-4:] == [7168, 7424, 7680, 8192]
    assert [t for t in prefill if 512 < t <= 1280] == [640, 768, 896, 1024, 1280]
    decode = memory.decode_capture_grid(1024)
    assert len(decode) == 64
    assert decode[:10] == [1, 2, 3, 4, 5, 6, 8, 10, 12, 14]
    assert [n for n in decode if 44 <= n <= 56] == [44, 48, 56]
    assert [n for n in decode if 336 <= n <= 416] == [336, 352, 384, 416]
    assert decode[-2:] == [992, 1024]
    # A limit off the grid closes it (`[*grid, limit]`); 0 captures nothing.
    assert memory.decode_capture_grid(7) == [1, 2, 3, 4, 5, 6, 7]
    assert memory.prefill_capture_grid(100) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 100]
    assert memory.prefill_capture_grid(0) == []


def test_b200_graphs_by_release():
    """B200 (sm_100) at kvsim's defaults there (1,024 seqs, 16,384 tokens). 0.33.0: 1, 2, 4, 8..248 by 8
    (31), 256..1024 by 16 (49) = 83 sizes, all at or below 1,024 requests: 83 PIECEWISE + 83 FULL = 166
    graphs, the first capture at 1,024 tokens. 0.34.0: 54 prefill sizes up to 8,192 and 64 decode request
    counts up to 1,024 (1,024 tokens, within 8,192): 118 graphs, the first at 8,192 tokens."""
    prefill, decode = memory.cudagraph_graphs(1024, 16384, blackwell=True, grid="shared")
    assert (len(prefill), len(decode), max(prefill)) == (83, 83, 1024)
    prefill, decode = memory.cudagraph_graphs(1024, 16384, blackwell=True, grid="split")
    assert (len(prefill), len(decode), max(prefill), max(decode)) == (54, 64, 8192, 1024)
    m = models.get("llama-3.1-8b")
    # 8,192 x 118,784 = 973,078,528 B + 118 x 7,381,952 = 871,070,336 B: 1,844,148,864 B (1.72 GiB);
    # 0.33.0: 1,024 x 118,784 = 121,634,816 + 166 x 7,381,952 = 1,225,404,032: 1,347,038,848 B (1.25 GiB).
    assert memory.cudagraph_estimate(m, 1024, 16384, blackwell=True, grid="split") == 1_844_148_864
    assert memory.cudagraph_estimate(m, 1024, 16384, blackwell=True) == 1_347_038_848
    assert 8192 * LLAMA_TOKEN + 118 * LLAMA_GRAPH == 1_844_148_864
    # Fewer tokens a step than 8,192: the prefill grid stops there; decode graphs within the token budget
    # (at 512 tokens the decode counts up to the first at or past 512, that one at 512).
    prefill, decode = memory.cudagraph_graphs(1024, 512, blackwell=True, grid="split")
    assert prefill == memory.prefill_capture_grid(512)
    assert decode[-1] == 512
    assert 480 in decode
    assert 544 not in decode


def test_off_sm100_the_split_sizes_are_the_shared_ones():
    """An H100 (1,024 seqs, 8,192 tokens): 0.34.0's decode request counts are the shared sizes each
    `min(size, max_num_seqs)`, the same 51 + 51 graphs as 0.33.0's (1, 2, 4, 8..248 by 8, 256..512 by 16);
    at 100 seqs 0.33.0 appends 100 to the grid and both count the 16 sizes up to 100 (1, 2, 4, 8..96 by 8
    (12), 100) as decode graphs."""
    for seqs, tokens in ((1024, 8192), (256, 8192), (100, 2048), (1024, 300)):
        shared = memory.cudagraph_graphs(seqs, tokens, grid="shared")
        split = memory.cudagraph_graphs(seqs, tokens, grid="split")
        assert shared == split
    prefill, decode = memory.cudagraph_graphs(1024, 8192, grid="split")
    assert (len(prefill), len(decode)) == (51, 51)
    assert len(memory.cudagraph_graphs(100, 2048, grid="split")[1]) == 16


def test_gpt_oss_capture_cap():
    """`GptOssForCausalLMConfig.verify_and_update_config`. 0.33.0 (since 0.11.1): `max_cudagraph_capture_size`
    1024 on every GPU, so the 83 sizes up to 1,024 whatever max_num_seqs (no uniform-decode size appended):
    at 256 seqs 83 PIECEWISE + the 35 up to 256 (1, 2, 4, 8..248 by 8, 256) FULL = 118, where another model
    takes 51 + 35 = 86. 0.34.0 off SM100: prefill the legacy sizes below min(8192, 1024) and 1024 (83), decode
    `decode_cudagraph_capture_grid(1024)` (64): 147. On SM100 it sets nothing: the wide grids (118)."""
    prefill, decode = memory.cudagraph_graphs(256, 8192, model_type="gpt_oss")
    assert (len(prefill), len(decode), max(prefill)) == (83, 35, 1024)
    prefill, decode = memory.cudagraph_graphs(256, 8192)
    assert (len(prefill), len(decode), max(prefill)) == (51, 35, 512)
    prefill, decode = memory.cudagraph_graphs(1024, 8192, model_type="gpt_oss", grid="split")
    assert (len(prefill), len(decode), max(prefill)) == (83, 64, 1024)
    # Fewer tokens a step than 1,024: both cap there (0.33.0: the grid to 512 and 512 itself, 51 sizes).
    assert len(memory.cudagraph_capture_sizes(1024, 512, model_type="gpt_oss")) == 51
    prefill, decode = memory.cudagraph_graphs(1024, 600, model_type="gpt_oss", grid="split")
    assert max(prefill) == 600
    assert decode[-1] == 600
    assert memory.cudagraph_graphs(1024, 16384, True, "gpt_oss", "split") == memory.cudagraph_graphs(
        1024, 16384, True, "", "split"
    )
    # Through the model: gpt-oss-20b on an H100 under vLLM 0.33.0's rule counts its 166 graphs.
    m = models.get("gpt-oss-20b")
    assert m.model_type == "gpt_oss"
    pool = kvsim.SimConfig.preset("vllm-0.33", model="gpt-oss-20b", gpu="h100-80gb").pool
    first = memory.cudagraph_estimate(m, 1024, 8192) - 166 * max(
        memory.GRAPH_FLOOR_BYTES, m.num_layers * memory.GRAPH_LAYER_BYTES
    )
    assert pool.cudagraph_bytes == memory.cudagraph_estimate(m, 1024, 8192)
    assert first == memory.cudagraph_estimate(m, 1024, 1024) - 166 * max(
        memory.GRAPH_FLOOR_BYTES, m.num_layers * memory.GRAPH_LAYER_BYTES
    )


def test_the_knob_and_the_presets():
    """`cudagraph_capture_grid` defaults to 0.34.0's rule (`vllm-latest`, `vllm-0.34`); the `vllm-0.33` preset
    sets 0.33.0's; the pool keeps the estimate its rule gives (B200, llama-3.1-8b: 1,844,148,864 B under
    0.34.0)."""
    assert kvsim.SimConfig(num_blocks=100).cudagraph_capture_grid == "split"
    assert kvsim.SimConfig.preset("vllm-latest", num_blocks=100).cudagraph_capture_grid == "split"
    assert kvsim.SimConfig.preset("vllm-0.34", num_blocks=100).cudagraph_capture_grid == "split"
    assert kvsim.SimConfig.preset("vllm-0.33", num_blocks=100).cudagraph_capture_grid == "shared"
    new = kvsim.SimConfig.preset("vllm-0.34", model="llama-3.1-8b", gpu="b200")
    assert new.pool.cudagraph_bytes == 1_844_148_864
    old = kvsim.SimConfig.preset(
        "vllm-0.34", model="llama-3.1-8b", gpu="b200", cudagraph_capture_grid="shared"
    )
    assert old.pool.cudagraph_bytes == 1_347_038_848
    # Measured sizing subtracts what the graphs hold: the larger estimate leaves fewer blocks.
    assert new.pool.num_blocks < old.pool.num_blocks
    with pytest.raises(InvalidArgumentError, match="cudagraph_capture_grid"):
        kvsim.SimConfig(num_blocks=100, cudagraph_capture_grid="wide")
