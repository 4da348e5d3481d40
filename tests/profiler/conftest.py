"""Fixtures shared by the profiler's tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autoshard.models.hf import load_config
from autoshard.models.source import ModelSource


@pytest.fixture
def saved(tmp_path: Path) -> Callable[[Callable[[], Any]], ModelSource]:
    """``saved(make_config)``: the config saved with ``save_pretrained`` and loaded as autoshard loads it."""

    def save(make: Callable[[], Any]) -> ModelSource:
        folder = tmp_path / make.__name__.strip("_")
        make().save_pretrained(folder)
        return load_config(folder)

    return save
