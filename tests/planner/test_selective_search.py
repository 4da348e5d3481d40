"""When the plan needs checkpointing, torchtitan's op-selective policy is weighed against full (#16).

A Llama built from transformers' ``LlamaConfig`` (4096 wide, 4 blocks, 4096 tokens, micro-batch 4 on 8 H100s under
FSDP2): no checkpointing needs about 18.9 GiB a GPU, every 2nd block 13.8, op-selective 11.8, full 8.8. The GPU's
memory is set between them (90 % of it usable) to make each choice the one that fits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from transformers import LlamaConfig

from autoshard.errors import NoFeasiblePlan, UserCodeError
from autoshard.hardware import HardwareSpec, load_hardware
from autoshard.planner.machine import plan_for
from autoshard.planner.plan import Plan
from autoshard.planner.plan_file import from_plan
from autoshard.planner.selective import weigh_selective
from autoshard.profiler.checkpointing import FULL, OP

GIB = 2**30


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("llama")
    LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=4, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096).save_pretrained(directory)
    return directory / "config.json"


def _h100s(gib: float) -> HardwareSpec:
    hardware = load_hardware("dgx-h100", gpus=8)
    gpu = dataclasses.replace(hardware.node.gpu, memory_bytes=int(gib * GIB))
    return dataclasses.replace(hardware, node=dataclasses.replace(hardware.node, gpu=gpu))


def _plan(config: Path, gib: float, checkpointing: str | None = None,
          progress: Callable[[int, int], None] | None = None) -> Plan:
    return plan_for(config, _h100s(gib), seq_len=4096, batch_size=4, strategies=["fsdp"],
                    checkpointing=checkpointing, progress=progress)


def test_op_selective_is_chosen_where_it_fits_and_no_checkpointing_does_not(llama: Path) -> None:
    seen: list[tuple[int, int]] = []
    plan = _plan(llama, 14, progress=lambda done, total: seen.append((done, total)))  # 12.6 GiB usable: op fits
    # One count over both workloads: bf16-mixed traces 4 sessions for none / full, then 2 for op-selective.
    assert seen[-1] == (6, 6) and (4, 4) in seen and [d for d, _ in seen] == sorted(d for d, _ in seen)
    full = _plan(llama, 14, "full").recommended
    op = _plan(llama, 14, "op").recommended
    assert plan.workload.checkpoint_mode == OP
    best = plan.recommended
    assert best.candidate.activation_checkpointing and best.fits
    assert best.memory is not None and op.memory is not None and best.memory.gpu.total == op.memory.gpu.total
    assert best.cost is not None and full.cost is not None and best.cost.samples_per_s > full.cost.samples_per_s
    # The table keeps the plan without checkpointing; every checkpointed row is op-selective.
    assert {e.candidate.activation_checkpointing for e in plan.candidates} == {False, True}
    assert not next(e for e in plan.candidates if not e.candidate.activation_checkpointing).fits
    assert plan.explanation[1].startswith("Weighed against it: full activation checkpointing (fsdp, micro-batch 4: ")
    # Why every-N is not weighed unasked: where op-selective fits, it may not. Its need (13.8 GiB) is under the
    # GPU's 14 GiB, so the refusal says what is usable.
    with pytest.raises(NoFeasiblePlan, match=r"against 12\.6 GiB usable \(14\.0 GiB less a 10% margin\)"):
        _plan(llama, 14, "every-2")
    assert "op-selective activation checkpointing" in plan.explanation[0]
    assert any("op-selective activation checkpointing is what lets this micro-batch fit" in r
               for r in plan.explanation)
    weighed = plan.to_dict()["checkpointing_weighed"]  # the same in --json, field by field
    assert [(w["checkpointing"], w["chosen"]) for w in weighed] == [("full", False), ("op", True)]
    assert weighed[0]["samples_per_s"] == full.cost.samples_per_s and weighed[0]["micro_batch_size"] == 4
    assert weighed[1]["samples_per_s"] == best.cost.samples_per_s and weighed[1]["strategy"] == "fsdp"
    exported = from_plan(plan)  # what fit() and the exports read
    assert exported.checkpointing == "op" and exported.checkpointing_choice == OP
    assert plan.cached_workload is None
    again = _plan(llama, 14)  # every trace from the cache now: the same plan, and the entry it was read from
    assert again.cached_workload is not None and again.workload.checkpoint_mode == OP
    assert again.explanation == plan.explanation


def test_full_is_kept_where_no_selective_choice_fits(llama: Path) -> None:
    plan = _plan(llama, 10.5)  # 9.45 GiB usable: only full checkpointing fits
    assert plan.workload.checkpoint_mode == FULL
    assert plan.recommended.candidate.activation_checkpointing
    assert plan.explanation[1] == "Weighed against it: op-selective activation checkpointing (nothing fits with it)."
    assert [(w.checkpointing, w.chosen, w.best is None) for w in plan.checkpointing_weighed] == [
        (FULL, True, False), (OP, False, True)]
    assert from_plan(plan).checkpointing == "full"


def test_nothing_more_is_traced_when_the_plan_needs_no_checkpointing_or_names_it(llama: Path) -> None:
    def traced(choice: object) -> tuple[object, None]:
        raise AssertionError(f"{choice} was traced")

    roomy = _plan(llama, 80)
    assert not roomy.recommended.candidate.activation_checkpointing
    assert weigh_selective(roomy, traced, []) is roomy  # type: ignore[arg-type]
    assert roomy.to_dict()["checkpointing_weighed"] == []
    assert not any(line.startswith("Weighed against it") for line in roomy.explanation)
    # Checkpointing named: every candidate checkpoints, nothing else is weighed or traced. FSDP2 reads the trace
    # without checkpointing too, so the named full plan is the roomy plan's workload, read back from the cache.
    seen: list[tuple[int, int]] = []
    named = _plan(llama, 14, "full", progress=lambda done, total: seen.append((done, total)))
    assert named.workload.checkpoint_mode == FULL and named.recommended.candidate.activation_checkpointing
    assert seen == [] and named.cached_workload is not None and named.checkpointing_weighed == ()
    assert not any(line.startswith("Weighed against it") for line in named.explanation)


def test_a_selective_step_that_cannot_be_traced_leaves_the_full_plan_standing(llama: Path) -> None:
    """Zamba2's op-selective trace raised in the recompute (its shared block's casts replay differently), and
    recommend failed outright although its plan with full checkpointing was made."""
    weighed = _plan(llama, 10.5)  # only full checkpointing fits; take back what was weighed
    planned = dataclasses.replace(weighed, explanation=weighed.explanation[:1] + weighed.explanation[2:],
                                  checkpointing_weighed=())

    def traced(choice: object) -> tuple[object, None]:
        raise UserCodeError("backward raised RuntimeError: invocation index 32 not found in storage.")

    plan = weigh_selective(planned, traced, [])  # type: ignore[arg-type]
    assert plan.recommended == planned.recommended and plan.workload is planned.workload
    assert plan.explanation[1] == ("Weighed against it: op-selective activation checkpointing (its step could not "
                                   "be traced: backward raised RuntimeError: invocation index 32 not found in "
                                   "storage).")
    assert [w.to_dict()["not_traced"] for w in plan.checkpointing_weighed] == [
        None, "backward raised RuntimeError: invocation index 32 not found in storage."]


def test_offloading_is_the_last_resort_for_a_selective_choice_while_full_fits_without_it(llama: Path) -> None:
    """Each choice is planned on its own traces: op-selective fitted only with offload, and its plan, in which
    nothing fitted without offloading, left the offload rule out. A 70B plan on 4 DGX H100s then picked
    ZeRO-3 with offload and op-selective over ZeRO-3 with full checkpointing, which fits without it (probe)."""
    plan = plan_for(llama, _h100s(12.5), seq_len=4096, batch_size=4, strategies=["fsdp", "fsdp_cpu_offload"])
    full, op = plan.checkpointing_weighed  # 11.25 GiB usable: fsdp fits with full only, op only with offload
    assert full.chosen and full.best is not None and full.best.strategy == "fsdp"
    assert op.best is not None and op.best.strategy == "fsdp_cpu_offload" and op.best.cost is not None
    assert any(r.startswith("[offload-last-resort]") for r in op.best.reasons)
    assert op.best.score == pytest.approx(op.best.cost.samples_per_s * 0.5)
