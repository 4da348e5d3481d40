"""Imports every catalog family so that its ``@register`` decorators run (explicit, no introspection)."""

from __future__ import annotations

from autoshard.models.catalog import bert, gpt2, llama, resnet, t5, vit

__all__ = ["bert", "gpt2", "llama", "resnet", "t5", "vit"]
