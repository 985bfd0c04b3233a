"""Segment-id conventions shared by workloads and both engines (SPEC §3).

Prompt content ids chosen by workloads live below `OUTPUT_BIT`; the tokens a request generates are the
content `output_id(request_id, sample)`, so a later conversation turn that quotes an earlier answer
names the same content the engine hashed while generating it. The Rust engine computes the same ids.
"""

from __future__ import annotations

from kvsim.errors import InvalidArgumentError

OUTPUT_BIT = 1 << 63
MAX_REQUEST_ID = (1 << 47) - 1
MAX_SAMPLES = 1 << 16


def output_id(request_id: int, sample: int = 0) -> int:
    """Content id of the tokens sample `sample` of request `request_id` generates."""
    if not 0 <= request_id <= MAX_REQUEST_ID:
        raise InvalidArgumentError(f"request_id {request_id} must be between 0 and {MAX_REQUEST_ID}")
    if not 0 <= sample < MAX_SAMPLES:
        raise InvalidArgumentError(f"sample {sample} must be between 0 and {MAX_SAMPLES - 1}")
    return OUTPUT_BIT | (request_id << 16) | sample


def is_output_id(segment_id: int) -> bool:
    return segment_id >= OUTPUT_BIT
