"""What the catalogue's tests share (tests/test_catalogue*.py): the published configs' folder and a config
with its `text_config` fields merged up, as vLLM reads a multimodal model's text model."""

from __future__ import annotations

from pathlib import Path

HF = Path(__file__).parent / "data" / "hf"
GIB = 1 << 30


def _text(cfg: dict) -> dict:
    return {**cfg, **cfg["text_config"]} if isinstance(cfg.get("text_config"), dict) else cfg
