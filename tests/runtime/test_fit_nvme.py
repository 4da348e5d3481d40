"""ZeRO-3 with NVMe offload through fit(): it trains where DeepSpeed's ``async_io`` op can be built (libaio), and
is refused up front, with what to install, where it cannot. Exactly one of the two tests runs on any machine.

The training case runs where libaio is installed (the development machine); the refusal where ``ds_report``
shows ``async_io`` incompatible (CI: ``.ci/run`` does not install libaio, whose op build took about 8 of its
minutes). The first run builds DeepSpeed's ``async_io`` op (minutes on 2 cores; cached under
``~/.cache/torch_extensions`` after).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import autoshard
from autoshard.errors import UsageError
from autoshard.planner.plan_file import ExportedPlan, from_plan
from autoshard.strategies.deepspeed.backend import async_io_available, import_deepspeed

import_deepspeed("cuda" if torch.cuda.is_available() else "cpu")  # picks DeepSpeed's accelerator first
AIO = async_io_available()


def _nvme_plan(directory: Path) -> ExportedPlan:
    """The planner's single-process ZeRO-3 CPU-offload plan for tiny-gpt2, offloading to ``directory`` instead."""
    planned = autoshard.recommend("tiny-gpt2", hardware=autoshard.detect_hardware(gpus=1), batch_size=2, seq_len=16,
                                  precision="32-true", strategies=["deepspeed_stage_3_offload"])
    exported = from_plan(planned)
    return replace(exported, strategy="deepspeed_stage_3_offload_nvme", traits=None,
                   hardware=replace(exported.hardware, nvme_path=str(directory)))


@pytest.mark.skipif(AIO, reason="DeepSpeed's async_io op is available here: the training test runs instead")
def test_nvme_offload_without_async_io_is_refused_with_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="async_io") as caught:
        autoshard.fit("tiny-gpt2", plan=_nvme_plan(tmp_path), max_steps=1)
    assert "libaio" in (caught.value.hint or "")
    assert list(tmp_path.iterdir()) == []  # refused before DeepSpeed wrote anything
    assert not torch.distributed.is_initialized()


@pytest.mark.skipif(not AIO, reason="DeepSpeed's async_io op cannot be built here (no libaio): see the refusal test")
def test_nvme_offload_trains_as_cpu_offload_does_and_swaps_to_the_directory(tmp_path: Path) -> None:
    """NVMe offload changes where the optimizer state and the parameters live, not the arithmetic: on the same
    batches (two fixed ones, repeated, so the loss falls), its losses are CPU offload's. (Fresh random batches,
    as this test once used, sit at chance level, ln(vocab) = 6.93 for tiny-gpt2: a falling loss cannot be asked
    of them.)"""
    source = autoshard.load_source("tiny-gpt2")
    torch.manual_seed(0)
    batches = [source.batch(2, seq_len=16) for _ in range(2)] * 3
    nvme_plan = _nvme_plan(tmp_path / "nvme")
    (tmp_path / "nvme").mkdir()
    cpu_plan = replace(nvme_plan, strategy="deepspeed_stage_3_offload", traits=None,
                       hardware=replace(nvme_plan.hardware, nvme_path=None))
    nvme = autoshard.fit("tiny-gpt2", list(batches), plan=nvme_plan, max_steps=6, seed=0)
    cpu = autoshard.fit("tiny-gpt2", list(batches), plan=cpu_plan, max_steps=6, seed=0)
    assert nvme.plan.strategy == "deepspeed_stage_3_offload_nvme"
    assert nvme.losses == pytest.approx(cpu.losses, rel=1e-5)
    assert nvme.losses[-1] < nvme.losses[0]
    # DeepSpeed's swappers made their folders under nvme_path (the swap files themselves go at the end).
    made = {str(p.relative_to(tmp_path / "nvme")) for p in (tmp_path / "nvme").rglob("*")}
    assert {"zero_stage_3/float32params", "zero_stage_3/optimizer"} <= made, made


def test_the_plan_names_nvme_for_both_offloads(tmp_path: Path) -> None:
    from autoshard.strategies.deepspeed.config import ds_config

    zero = ds_config(_nvme_plan(tmp_path))["zero_optimization"]
    assert zero["offload_param"]["nvme_path"] == zero["offload_optimizer"]["nvme_path"] == str(tmp_path)
