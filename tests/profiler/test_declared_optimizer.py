"""A model file's optimizer() is what the trace steps; the profile, the plan and its exports name it, not the
--optimizer they were given (they said adamw for a file stepping SGD)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import autoshard
from autoshard.models import load_source
from autoshard.profiler.optimizers import declared_optimizer

MODEL = textwrap.dedent("""
    import torch

    def model():
        return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def batch(batch_size):
        return torch.randn(batch_size, 16)

    def optimizer(params):
        return torch.optim.{cls}(params, lr=0.1)
""")


def _file(tmp_path: Path, cls: str) -> str:
    path = tmp_path / "model.py"
    path.write_text(MODEL.replace("{cls}", cls), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("cls", "name"), [("SGD", "sgd"), ("AdamW", "adamw"), ("Adam", "adam"),
                                           ("RMSprop", None)])
def test_the_model_files_optimizer_is_named(tmp_path: Path, cls: str, name: str | None) -> None:
    assert declared_optimizer(load_source(_file(tmp_path, cls))) == name


def test_profile_and_plan_name_the_optimizer_the_file_steps(tmp_path: Path) -> None:
    path = _file(tmp_path, "SGD")
    profiled = autoshard.profile(path, batch_size=2)  # --optimizer's default is adamw
    assert profiled.options.optimizer == "sgd" and profiled.optimizer_state_bytes == 0  # no momentum: no state
    plan = autoshard.recommend(path, hardware="a10g", cache=False, optimizer="adamw8bit", strategies=["fsdp"])
    assert plan.workload.optimizer == "sgd"  # and FSDP2, which cannot step adamw8bit, is not refused for it
    assert autoshard.profile(_file(tmp_path, "RMSprop"), batch_size=2).options.optimizer == "adamw"  # no name
