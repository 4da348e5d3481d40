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


def test_a_hybrid_plan_writes_no_hf_trainer_file() -> None:
    """With transformers 5.24's --fsdp switch alone, the Trainer's config (which refuses hybrid sharding) was never
    built: hf_trainer_args.txt named an fsdp_config.json that no export writes, and the README listed it beside
    "the HF Trainer cannot run it" (a cross-surface probe)."""
    import dataclasses

    from autoshard.export import render

    base = _plan("fsdp_hybrid", "cuda", 8)
    plan = dataclasses.replace(base, hardware=dataclasses.replace(base.hardware, nodes=2))
    files = render(plan, validate=False)
    assert "hf_trainer_args.txt" not in files and "fsdp_config.json" not in files
    assert "hf_trainer_args.txt" not in files["README.md"]
    assert "parallelism_config" in files["accelerate_config.yaml"]


@pytest.mark.parametrize(("strategy", "said"), [
    ("fsdp", "hf_trainer_args.txt (--activation_checkpointing) and the FSDP configs here enable it."),
    ("deepspeed_stage_3", "hf_trainer_args.txt (--activation_checkpointing) enables it; with ds_config.json in your "
                          "own script, enable it in your model"),
    ("ddp", "hf_trainer_args.txt (--activation_checkpointing) enables it; with the DDP files in your own script"),
])
def test_the_checkpointing_note_names_only_files_the_export_has(strategy: str, said: str) -> None:
    """A DeepSpeed export's README said "the FSDP configs here enable it", and it has none (a cross-surface probe)."""
    import dataclasses

    from autoshard.export.trainer_flags import checkpointing_flag

    if checkpointing_flag() != "--activation_checkpointing":
        pytest.skip(f"this transformers' flag is {checkpointing_flag()}")
    plan = dataclasses.replace(_plan(strategy, "cuda", 8), activation_checkpointing=True)
    (line,) = [n for n in notes(plan) if n.startswith("The plan checkpoints every")]
    assert said in line, line
    assert ("FSDP configs" in line) is (strategy == "fsdp")
