"""An FSDP plan exported in bf16-mixed or 16-mixed says that Accelerate and the HF Trainer reduce-scatter the
gradients in the low precision where the plan priced fp32 (accelerate's ``FullyShardedDataParallelPlugin`` builds
its policy with ``reduce_dtype = param_dtype`` from ``mixed_precision``, and no config field changes it), and gives
the plugin that runs the plan. Both halves are checked against accelerate's own plugin, not against the note's
wording: the claim by building the plugin as ``AcceleratorState`` does from the exported config's
``mixed_precision``, the fix by evaluating the note's expression and doing the same."""

from __future__ import annotations

import re

import pytest
import torch
from accelerate.utils import FullyShardedDataParallelPlugin

from autoshard.export.accelerate import accelerate_config
from autoshard.planner.plan_file import ExportedPlan, HardwareFingerprint, ModelFingerprint
from autoshard.strategies import get
from autoshard.strategies.fsdp.export import EXPORTER

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _plan(precision: str, reduce_dtype: str) -> ExportedPlan:
    return ExportedPlan(strategy="fsdp", family=get("fsdp").family, micro_batch_size=1, gradient_accumulation=1,
                        activation_checkpointing=False, settings={"reshard_after_forward": True,
                                                                  "reduce_dtype": reduce_dtype},
                        precision=precision, optimizer="adamw", seq_len=None,
                        model=ModelFingerprint(name="m", parameter_count=1, block_class=None, layout_hash="0" * 16),
                        hardware=HardwareFingerprint(gpu="h100", gpu_memory_bytes=80, gpus_per_node=8, nodes=1,
                                                     device_type="cuda", backend="nccl", nvme_path=None))


def _reduce_note(plan: ExportedPlan) -> str | None:
    found = [n for n in EXPORTER.notes(plan) if n.startswith("Accelerate and the HF Trainer reduce-scatter")]
    assert len(found) <= 1
    return found[0] if found else None


def _as_accelerate_builds_it(plugin: FullyShardedDataParallelPlugin, plan: ExportedPlan) -> torch.dtype:
    """The reduce dtype of ``plugin`` once ``AcceleratorState`` has applied the exported ``mixed_precision``."""
    plugin.set_mixed_precision(accelerate_config(plan)["mixed_precision"])
    return plugin.mixed_precision_policy.reduce_dtype


@pytest.mark.parametrize(("precision", "low"), [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16)])
def test_a_plan_reducing_in_fp32_is_told_accelerate_reduces_in_low_precision_and_how_to_run_it(precision, low):
    plan = _plan(precision, "fp32")
    assert _as_accelerate_builds_it(FullyShardedDataParallelPlugin(fsdp_version=2), plan) == low  # the claim
    note = _reduce_note(plan)
    assert note is not None
    expression = re.search(r"fsdp_plugin=(FullyShardedDataParallelPlugin\(.*?\}\))", note)
    assert expression is not None, note
    plugin = eval(expression.group(1), {"torch": torch,  # the note's own text
                                         "FullyShardedDataParallelPlugin": FullyShardedDataParallelPlugin})
    assert _as_accelerate_builds_it(plugin, plan) == torch.float32  # the fix runs the plan
    assert plugin.mixed_precision_policy.param_dtype == low


@pytest.mark.parametrize(("precision", "reduce_dtype"), [("bf16-mixed", "bf16"), ("32-true", "fp32"),
                                                         ("bf16-true", "bf16")])
def test_no_note_where_accelerate_reduces_as_planned(precision, reduce_dtype):
    plan = _plan(precision, reduce_dtype)
    assert _reduce_note(plan) is None
    if precision == "bf16-mixed":
        built = _as_accelerate_builds_it(FullyShardedDataParallelPlugin(fsdp_version=2), plan)
        assert built == DTYPES[reduce_dtype]
