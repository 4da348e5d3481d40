"""An FSDP plan for several CPU processes says that its Accelerate and HF Trainer files train DDP there: accelerate
1.15 gives ``DistributedType.FSDP`` only to multi-accelerator runs (``AcceleratorState``), so on CPU processes the
Trainer ran ``MULTI_CPU`` with the model in ``DistributedDataParallel`` and said nothing (a probe ran the exported
command with torchrun on 2 CPU processes). The GPU plan and the one-process plan get no such line."""

from __future__ import annotations

import inspect

import pytest
from accelerate.state import AcceleratorState

from autoshard.export import notes
from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint, ModelFingerprint
from autoshard.strategies import get


def _plan(strategy: str, device_type: str, ranks: int) -> ExportedPlan:
    return ExportedPlan(strategy=strategy, family=get(strategy).family, micro_batch_size=1, gradient_accumulation=1,
                        activation_checkpointing=False,
                        settings={"reshard_after_forward": True} if strategy.startswith("fsdp") else {},
                        precision="32-true", optimizer="adamw", seq_len=None,
                        model=ModelFingerprint(name="m", parameter_count=1, block_class=None, layout_hash="0" * 16),
                        hardware=HardwareFingerprint(gpu=None if device_type == "cpu" else "h100",
                                                     gpu_memory_bytes=None if device_type == "cpu" else 80,
                                                     gpus_per_node=ranks, nodes=1, device_type=device_type,
                                                     backend="gloo" if device_type == "cpu" else "nccl",
                                                     nvme_path=None))


def _ddp_line(plan: ExportedPlan) -> list[str]:
    return [n for n in notes(plan) if "run FSDP only on accelerators" in n]


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp_shard_grad_op", "fsdp_hybrid"])
def test_a_cpu_fsdp_plan_says_accelerate_and_the_trainer_train_ddp(strategy: str) -> None:
    (line,) = _ddp_line(_plan(strategy, "cpu", 2))
    assert "DDP" in line and "autoshard.fit(plan=...)" in line
    assert ("hf_trainer_args.txt" in line) is (strategy != "fsdp_hybrid")  # the Trainer has no hybrid: no file


@pytest.mark.parametrize(("strategy", "device_type", "ranks"), [("fsdp", "cuda", 8), ("fsdp", "cpu", 1),
                                                                ("ddp", "cpu", 2)])
def test_no_such_line_where_the_files_run_the_plan(strategy: str, device_type: str, ranks: int) -> None:
    assert _ddp_line(_plan(strategy, device_type, ranks)) == []


def test_accelerate_still_gives_fsdp_only_to_accelerator_runs() -> None:
    """The fact the line rests on, read from the installed accelerate: the branch that sets FSDP sits under the
    check for a multi-accelerator distributed type, which names no CPU type. If accelerate starts running FSDP on
    CPU processes, this fails and the line must go."""
    source = inspect.getsource(AcceleratorState.__init__)
    branch = source[:source.index("self.distributed_type = DistributedType.FSDP")]
    guard = branch[branch.rindex("elif self.distributed_type in ["):]
    assert "DistributedType.MULTI_GPU" in guard and "MULTI_CPU" not in guard
