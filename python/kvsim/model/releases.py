"""The vLLM release a config reader follows where releases read a checkpoint's field differently (DESIGN.md
§Presets, "0.34.0's quantization layers"): ModelOpt's `weight_scale_encoding` (`kvsim.model.quant_modelopt`) and
MiniMax-M3's legacy sparse fields (`kvsim.model.dsa.minimax_m3_sparse`). The readers take it as a plain
argument, a release's number (`"0.34.0"`, or `"0.34"`), defaulting to `LATEST`; whoever knows a run's preset
passes its release.
"""

from __future__ import annotations

from typing import Any

from kvsim.errors import InvalidArgumentError

# The release the readers follow when none is given (the `vllm-latest` preset's).
LATEST = "0.34.0"


def version(release: Any) -> tuple[int, int, int]:
    """`release` (`"0.34.0"`, `"0.34"`) as (major, minor, patch).

    Raises:
        InvalidArgumentError: a release that is not two or three dot-separated whole numbers.
    """
    parts = release.split(".") if isinstance(release, str) else []
    if len(parts) not in (2, 3) or not all(p.isdigit() and p.isascii() for p in parts):
        raise InvalidArgumentError(
            f"release {release!r} is not a vLLM release number (two or three whole numbers: '0.34.0', '0.33')"
        )
    nums = [int(p) for p in parts] + [0] * (3 - len(parts))
    return nums[0], nums[1], nums[2]


def at_least(release: Any, than: str) -> bool:
    """Whether vLLM `release` is `than` or later (`release` checked: `version`)."""
    return version(release) >= version(than)


def said(release: Any) -> str:
    """`release` as messages name it: `vLLM 0.34.0`."""
    return "vLLM {}.{}.{}".format(*version(release))


__all__ = ["LATEST", "at_least", "said", "version"]
