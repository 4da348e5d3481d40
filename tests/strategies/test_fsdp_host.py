"""FSDP2's host time: its hooks per unit and per parameter tensor beside the kernel launches, and DTensor's dispatch
in the optimizer step per parameter tensor (``autoshard.strategies.fsdp.cost.host_time``; the figures measured by
``benchmarks/fsdp_hooks.py``). Behaviour only: what scales with what, and where the time goes; never wall-clock."""

from __future__ import annotations

import dataclasses

import pytest

from autoshard.hardware import load_hardware
from autoshard.strategies import Candidate, costs, get
from autoshard.strategies.fsdp.cost import (
    HOOK_TENSOR_S,
    HOOK_UNIT_S,
    OPTIMIZER_TENSOR_S,
    host_time,
)
from autoshard.strategies.fsdp.memory import Layout, Units, wrapping_units
from autoshard.strategies.workload import fsdp_half_mode
from tests.strategies import conformance


def _layout(**changes: object) -> Layout:
    workload, hw = conformance.workloads()["tiny-llama"], load_hardware("dgx-h100")
    cand = Candidate(strategy="fsdp", micro_batch_size=1, activation_checkpointing=False)
    layout, _ = get("fsdp").layout(workload, hw, cand)
    return dataclasses.replace(layout, **changes)


def _units(blocks: int, tensors_per_block: int, root: int = 3) -> Units:
    return Units(root_before=(10,) * root, root_after=(), blocks=((4,) * tensors_per_block,) * blocks)


@pytest.mark.parametrize(("blocks", "per_block"), [(1, 2), (4, 2), (12, 12), (24, 9)])
@pytest.mark.parametrize("raf", [True, False, 2])
@pytest.mark.parametrize("gather_bytes", [2, 4])
def test_hooks_are_priced_per_unit_and_per_parameter_tensor(blocks: int, per_block: int, raf: bool | int,
                                                            gather_bytes: int) -> None:
    layout = _layout(reshard_after_forward=raf, orig_bytes=4, gather_bytes=gather_bytes)
    host = host_time(_units(blocks, per_block), layout, foreach=False)
    key = (raf is not False, gather_bytes < 4)  # a partial reshard (an int) reshards; bf16 gathers cast
    units, tensors = blocks + 1, blocks * per_block + 3  # the root is a unit, with its 3 tensors
    assert host.hooks_s == pytest.approx(units * HOOK_UNIT_S[key] + tensors * HOOK_TENSOR_S[key])
    assert host.optimizer_s == pytest.approx(tensors * OPTIMIZER_TENSOR_S[False])


def test_hook_time_grows_with_units_and_with_tensors_per_unit() -> None:
    layout = _layout()
    one = host_time(_units(4, 2), layout, foreach=False)
    more_units = host_time(_units(8, 2), layout, foreach=False)
    more_tensors = host_time(_units(4, 12), layout, foreach=False)
    assert more_units.hooks_s > one.hooks_s and more_tensors.hooks_s > one.hooks_s
    assert more_units.optimizer_s == pytest.approx(one.optimizer_s + 8 * OPTIMIZER_TENSOR_S[False])


def test_a_root_without_parameters_is_not_priced_as_a_unit() -> None:
    layout = _layout()
    with_root, bare = host_time(_units(4, 2), layout, foreach=True), host_time(_units(4, 2, root=0), layout,
                                                                                foreach=True)
    key = (True, layout.gather_bytes < layout.orig_bytes)
    assert with_root.hooks_s - bare.hooks_s == pytest.approx(HOOK_UNIT_S[key] + 3 * HOOK_TENSOR_S[key])


def test_the_for_loop_optimizer_pays_dtensor_dispatch_per_op_and_foreach_per_list() -> None:
    layout, units = _layout(), _units(12, 12)
    loop, lists = host_time(units, layout, foreach=False), host_time(units, layout, foreach=True)
    assert loop.optimizer_s > lists.optimizer_s > 0
    assert loop.hooks_s == lists.hooks_s  # the hooks do not depend on the optimizer
    assert "for-loop optimizer" in loop.notes[1] and "foreach optimizer" in lists.notes[1]


def test_keeping_parameters_after_forward_saves_hook_time() -> None:
    units = _units(12, 12)
    keep = host_time(units, _layout(reshard_after_forward=False), foreach=False)
    raf = host_time(units, _layout(reshard_after_forward=True), foreach=False)
    assert keep.hooks_s < raf.hooks_s
    assert "no reshard after forward" in keep.notes[0] and "(reshard_after_forward" in raf.notes[0]


def test_a_small_fsdp_step_is_host_bound_by_its_hooks_and_the_optimizer_pays_dtensor_dispatch() -> None:
    # At micro-batch 1 tiny-llama's kernels take microseconds: the launches bound the step, and FSDP2's hooks join
    # them on the host's side; DTensor's dispatch in the optimizer step is added once per step, after backward.
    workload, hw = conformance.workloads()["tiny-llama"], load_hardware("dgx-h100")
    trace = workload.trace(fsdp_half_mode(workload.precision), False)
    bare_s, _ = costs.step_compute_seconds(trace, 1, hw, "bf16")
    plain_opt_s, _ = costs.optimizer_step_seconds(workload, hw, False, shard=hw.world_size)
    units = wrapping_units(workload)
    count = len(units.blocks) + 1
    tensors = len(workload.parameter_numels)
    for name, raf in (("fsdp", True), ("fsdp_shard_grad_op", False)):
        for foreach in (False, True):
            cost = get(name).cost(workload, hw, Candidate(strategy=name, micro_batch_size=1,
                                                          activation_checkpointing=False,
                                                          settings={"foreach": foreach}))
            key = (raf, True)  # bf16-mixed: autoshard's policy casts the gathered parameters
            assert cost.compute_s == pytest.approx(bare_s + count * HOOK_UNIT_S[key] + tensors * HOOK_TENSOR_S[key])
            assert cost.optimizer_s == pytest.approx(plain_opt_s + tensors * OPTIMIZER_TENSOR_S[foreach])
            text = " ".join(cost.notes)
            assert f"FSDP2 hooks on the host: {count} unit(s)" in text
            assert f"DTensor dispatch in the {'foreach' if foreach else 'for-loop'} optimizer step" in text
            assert text.count("docs/benchmarks/fsdp_hooks.md, torch 2.13.0") == 2
            assert any("host-bound" in n for n in cost.notes)


def test_ddp_pays_no_fsdp_host_time() -> None:
    workload, hw = conformance.workloads()["tiny-llama"], load_hardware("dgx-h100")
    cost = get("ddp").cost(workload, hw, Candidate(strategy="ddp", micro_batch_size=1,
                                                   activation_checkpointing=False))
    assert not any("FSDP2 hooks" in n or "DTensor" in n for n in cost.notes)
