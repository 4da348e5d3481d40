"""Fixtures for model-source tests: model files and configs written into ``tmp_path``, and one training step."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from autoshard.models.source import ModelSource, call_model, default_loss

# Model sources are built from files only; a test must never reach the Hugging Face Hub. transformers reads these
# when it is first imported, so they are set before any test module imports it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def write_model(tmp_path: Path) -> Callable[..., Path]:
    """``write_model(source, name="model.py", folder="pkg")`` writes dedented ``source`` and returns its path."""

    def write(source: str, name: str = "model.py", folder: str = "pkg") -> Path:
        path = tmp_path / folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
        return path

    return write


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """``write_config(data, folder="tiny")`` writes ``data`` as ``folder/config.json`` and returns its path."""

    def write(data: dict[str, Any], folder: str = "tiny") -> Path:
        path = tmp_path / folder / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")
        return path

    return write


@pytest.fixture
def train_step() -> Callable[[ModelSource, torch.nn.Module, Any], torch.Tensor]:
    """``train_step(source, module, batch)``: one real forward and backward; returns the detached loss."""

    def step(source: ModelSource, module: torch.nn.Module, batch: Any) -> torch.Tensor:
        output = (source.call_fn or call_model)(module, batch)
        loss = (source.loss_fn or default_loss)(output, batch)
        loss.backward()
        return loss.detach()

    return step
