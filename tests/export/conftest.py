"""One planned model for every export test (planning takes seconds), and plans re-targeted from it."""

from __future__ import annotations

import dataclasses

import pytest

import autoshard
from autoshard.planner import plan_file
from autoshard.strategies import get
from autoshard.strategies.base import Candidate

collect_ignore = ["consumers"]  # scripts the consumer tests run in subprocesses, not test modules


@pytest.fixture(scope="session")
def plan():
    return autoshard.recommend("tiny-gpt2", hardware="dgx-h100", seq_len=64, batch_size=4, strategies=["ddp"])


def cpu_plan(plan, strategy: str, *, ranks: int, nodes: int = 1, precision: str = "32-true", micro_batch: int = 2,
             accumulation: int = 1, **settings) -> plan_file.ExportedPlan:
    """``plan`` re-targeted at ``strategy`` on ``ranks`` gloo CPU processes per node, with ``settings`` in force."""
    cand = Candidate(strategy=strategy, micro_batch_size=micro_batch, activation_checkpointing=False)
    rec = dataclasses.replace(plan.recommended, candidate=cand, traits=get(strategy).traits,
                              gradient_accumulation=accumulation)
    e = plan_file.from_plan(dataclasses.replace(plan, recommended=rec))
    hw = dataclasses.replace(e.hardware, gpu=None, gpu_memory_bytes=None, gpus_per_node=ranks, nodes=nodes,
                             device_type="cpu", backend="gloo")
    return dataclasses.replace(e, hardware=hw, precision=precision, settings={**e.settings, **settings})


def on_gpus(exported: plan_file.ExportedPlan, gpu: str = "NVIDIA H100 80GB HBM3") -> plan_file.ExportedPlan:
    """A :func:`cpu_plan` for as many GPUs: what Lightning's DeepSpeed snippet is written for (Lightning runs
    DeepSpeed on CUDA only, so a CPU plan gets none)."""
    hw = dataclasses.replace(exported.hardware, gpu=gpu, gpu_memory_bytes=80 * 2**30, device_type="cuda",
                             backend="nccl")
    return dataclasses.replace(exported, hardware=hw)


def constructible_here(snippet: str) -> str:
    """A GPU plan's Lightning snippet made to build its ``Trainer`` on this CPU machine (its strategy and config
    as written; ``Trainer(accelerator='gpu')`` refuses a machine without one)."""
    return snippet.replace("accelerator='gpu'", "accelerator='cpu'")
