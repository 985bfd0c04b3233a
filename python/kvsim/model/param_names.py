"""vLLM's names of the fused modules a parameter breakdown (`kvsim.model.params`) records: attention's q,
k and v (`qkv_proj`) and an MLP's gate and up (`gate_up_proj`), as `Breakdown.add`'s keywords. vLLM 0.33.0
fuses them in every model file kvsim reads (each model's `packed_modules_mapping`); a checkpoint names the
parts, which an ignore list must name all or none of (`kvsim.model.params.fused_parts_refusal`)."""

from __future__ import annotations

from typing import Any


def qkv(prefix: str) -> dict[str, Any]:
    """`Breakdown.add`'s naming of attention's q, k and v under `prefix` (`self_attn`): vLLM fuses them
    into one `qkv_proj` (its `packed_modules_mapping`), named here by its first part, its parts read against
    an ignore list together (`fused_parts_refusal`)."""
    parts = (f"{prefix}.q_proj", f"{prefix}.k_proj", f"{prefix}.v_proj")
    return {"module": parts[0], "parts": parts, "fused": f"{prefix}.qkv_proj"}


def gate_up(prefix: str) -> dict[str, Any]:
    """`qkv`'s naming of an MLP's gate and up projections under `prefix` (`mlp`), vLLM's `gate_up_proj`."""
    parts = (f"{prefix}.gate_proj", f"{prefix}.up_proj")
    return {"module": parts[0], "parts": parts, "fused": f"{prefix}.gate_up_proj"}


__all__ = ["gate_up", "qkv"]
