"""Fixtures for the hardware tests: a fake ``pynvml`` served from recorded-shape JSON, and a clean environment."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from hardware_fake_nvml import FakeNvml

_LAUNCHER_VARS = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK",
    "GROUP_RANK", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
    "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_PROCID", "SLURM_LOCALID",
    "SLURM_NODEID",
)


@pytest.fixture(autouse=True)
def _no_launcher_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see no GPU selection or launcher variables unless they set them."""
    for name in _LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_nvml() -> Callable[[str], FakeNvml]:
    """``fake_nvml("dgx_a100_8x")``: a fake pynvml module serving that fixture."""
    return FakeNvml


@pytest.fixture
def install_nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], FakeNvml]:
    """``install_nvml("t4_1x")``: make ``import pynvml`` return a fake serving that fixture."""

    def install(name: str) -> FakeNvml:
        fake = FakeNvml(name)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return install
