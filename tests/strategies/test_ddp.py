"""DDP's memory and cost rules, checked against torch's own functions and against real 2-process gloo runs."""

from __future__ import annotations

from typing import Any

import pytest

from autoshard.errors import UsageError
from autoshard.strategies import Candidate, build_workload
from autoshard.strategies.ddp import strategy as ddp_module
from autoshard.strategies.ddp.strategy import (
    DDPStrategy,
    bucket_members,
    gradient_buckets,
    powersgd_elements,
)
from tests.strategies import conformance
from tests.strategies.gloo_harness import run_gloo

MIB = 1024 * 1024


def _ddp() -> DDPStrategy:
    strategy = DDPStrategy()
    strategy.name = "ddp"  # type: ignore[misc]  # as registry.get() names its instances
    return strategy


def _cand(micro_batch: int = 4, checkpointing: bool = False, **settings: Any) -> Candidate:
    return Candidate(strategy="ddp", micro_batch_size=micro_batch, activation_checkpointing=checkpointing,
                     settings=settings)


# -- rules read from torch ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("first_mib", "cap_mib"), [(1, 25), (0.1, 0.1), (0.05, 0.2), (25, 25)])
@pytest.mark.parametrize("model", ["tiny-llama", "tiny-gpt2-cpu"])
def test_bucket_layout_matches_torch_bucket_assignment(model: str, first_mib: float, cap_mib: float) -> None:
    import torch
    import torch.distributed as dist

    numels = conformance.workloads()[model].parameter_numels
    first, cap = int(first_mib * MIB), int(cap_mib * MIB)
    # What the reducer's rebuild does: parameters in gradient-ready order (here the reverse of definition).
    ready = list(reversed(range(len(numels))))
    tensors = [torch.empty(numels[i], device="meta") for i in ready]
    indices, _ = dist._compute_bucket_assignment_by_size(tensors, [first, cap], [False] * len(numels), ready)
    expected = tuple(tuple(numels[i] for i in bucket) for bucket in indices)
    assert bucket_members(numels, 4, first_bucket_bytes=first, bucket_bytes=cap) == expected
    assert sum(gradient_buckets(numels, 4, first_bucket_bytes=first, bucket_bytes=cap)) == 4 * sum(numels)


def test_find_unused_parameters_keeps_the_construction_time_buckets() -> None:
    import torch
    import torch.distributed as dist

    workload, hw = conformance.workloads()["tiny-llama"], conformance.hardware()["dgx-h100"]
    numels = workload.parameter_numels
    strategy, cand = _ddp(), _cand(find_unused_parameters=True, bucket_cap_mb=0.1)
    layout = ddp_module._Layout.of(workload, workload.trace("amp", False), strategy.resolve(hw, cand))
    # DDP.__init__ with find_unused_parameters=True: limits [first, cap] over parameters in definition order,
    # buckets then reversed into the reducer (distributed.py _ddp_init_helper).
    cap = int(0.1 * MIB)
    indices, _ = dist._compute_bucket_assignment_by_size([torch.empty(n, device="meta") for n in numels], [cap, cap])
    expected = [sorted(numels[i] for i in bucket) for bucket in reversed(indices)]
    assert [sorted(m) for m in layout.members] == expected


@pytest.mark.parametrize("bucket_cap_mb", [None, 10, 25, 0.5])
def test_bucket_caps_follow_torch_bucket_capacity_config(bucket_cap_mb: float | None) -> None:
    import torch.distributed as dist

    try:
        from torch.nn.parallel.distributed import _BucketCapacityConfig
    except ImportError:  # torch before 2.13: DDP.__init__ computes them inline (distributed.py, torch 2.11)
        cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * MIB)
        caps = (cap, dist._DEFAULT_FIRST_BUCKET_BYTES if bucket_cap_mb is None else cap)
    else:
        config = _BucketCapacityConfig.create(bucket_cap_mb, None, False)
        caps = (config.bucket_bytes_cap, config.first_bucket_bytes_cap)
    hw = conformance.hardware()["dgx-h100"]
    settings = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    ours = _ddp().resolve(hw, _cand(**settings))
    assert (int(ours.bucket_cap_mb * MIB), ours.first_bucket_bytes) == caps


def test_knob_defaults_are_torch_defaults() -> None:
    import inspect

    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState
    from torch.nn.parallel import DistributedDataParallel

    ddp_defaults = inspect.signature(DistributedDataParallel.__init__).parameters
    psgd_defaults = inspect.signature(PowerSGDState.__init__).parameters
    knobs = {k.name: k.default for k in _ddp().knobs(conformance.hardware()["dgx-h100"])}
    for name in ("gradient_as_bucket_view", "static_graph", "find_unused_parameters"):
        assert knobs[name] == ddp_defaults[name].default, name
    for name in ("matrix_approximation_rank", "start_powerSGD_iter"):
        assert knobs[name] == psgd_defaults[name].default, name


def test_bf16_compress_is_offered_only_with_cuda_and_nccl() -> None:
    cpu, gpu = conformance.hardware()["cpu-2-processes"], conformance.hardware()["dgx-h100"]
    cpu_hooks = next(k.choices for k in _ddp().knobs(cpu) if k.name == "comm_hook")
    gpu_hooks = next(k.choices for k in _ddp().knobs(gpu) if k.name == "comm_hook")
    assert "bf16_compress" in gpu_hooks and "bf16_compress" not in cpu_hooks
    with pytest.raises(UsageError, match="bf16_compress"):
        _ddp().memory(conformance.workloads()["tiny-gpt2-cpu"], cpu, _cand(comm_hook="bf16_compress"))


@pytest.mark.parametrize("bad", [{"bucket_cap_mb": 0}, {"bucket_cap_mb": "25"}, {"comm_hook": "int8"},
                                 {"matrix_approximation_rank": 0}, {"start_powerSGD_iter": 1}])
def test_out_of_range_settings_are_refused_with_a_message(bad: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match="ddp"):
        _ddp().memory(conformance.workloads()["tiny-llama"], conformance.hardware()["dgx-h100"], _cand(**bad))


# -- memory rules ---------------------------------------------------------------------------------------------------


def test_gradient_as_bucket_view_drops_the_second_copy_of_gradients() -> None:
    workload, hw = conformance.workloads()["tiny-llama"], conformance.hardware()["dgx-h100"]
    copy = _ddp().memory(workload, hw, _cand(4))
    views = _ddp().memory(workload, hw, _cand(4, gradient_as_bucket_view=True))
    buckets = copy.gpu.buffers - workload.trace("amp", False).phases(4)[copy.peak_phase].buffers
    assert buckets >= 4 * sum(workload.parameter_numels)  # a flat fp32 copy of every gradient (rounded up to 512 B)
    assert views.gpu.buffers == copy.gpu.buffers - buckets
    assert views.gpu.gradients == buckets  # .grad are views of the buckets
    assert views.gpu.total <= copy.gpu.total


def test_powersgd_keeps_error_feedback_and_low_rank_factors() -> None:
    workload, hw = conformance.workloads()["tiny-llama"], conformance.hardware()["dgx-h100"]
    plain = _ddp().memory(workload, hw, _cand(4)).gpu
    psgd = _ddp().memory(workload, hw, _cand(4, comm_hook="powersgd")).gpu
    grads = workload.trace("amp", False).at_1.gradient_bytes
    assert psgd.buffers - plain.buffers >= grads  # error feedback: one copy of every bucket


def test_powersgd_elements_follow_the_compression_test() -> None:
    # (n + m)·r·2 < n·m for a 4096² weight at rank 4; a 1-D bias is sent as is.
    assert powersgd_elements([4096 * 4096], rank=4) == (2 * 4096 * 4, 0)
    assert powersgd_elements([4096], rank=4) == (0, 4096)
    # A rank so high that compression saves less than 2x: sent uncompressed.
    assert powersgd_elements([256 * 256], rank=64) == (0, 256 * 256)


# -- cost rules -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("hook", "ratio"), [("fp16_compress", 0.5), ("bf16_compress", 0.5)])
def test_compress_hooks_halve_the_all_reduce_payload_of_fp32_gradients(hook: str, ratio: float) -> None:
    workload, hw = conformance.workloads()["tiny-gpt2-cpu"], conformance.hardware()["dgx-h100"]
    plain = _ddp().cost(workload, hw, _cand(4)).collectives[0]
    compressed = _ddp().cost(workload, hw, _cand(4, comm_hook=hook)).collectives[0]
    assert compressed.bytes == pytest.approx(plain.bytes * ratio, abs=2)
    assert plain.bytes == workload.trace("amp", False).at_1.gradient_bytes


def test_powersgd_volume_grows_with_its_rank() -> None:
    workload, hw = conformance.workloads()["tiny-llama"], conformance.hardware()["4x-dgx-h100"]
    volumes = [_ddp().cost(workload, hw, _cand(4, comm_hook="powersgd", matrix_approximation_rank=r))
               .collectives[0].bytes for r in (1, 2, 4)]
    plain = _ddp().cost(workload, hw, _cand(4)).collectives[0].bytes
    assert volumes == sorted(volumes) and volumes[-1] < plain


def test_only_the_last_bucket_is_exposed_when_backward_is_long() -> None:
    workload, hw = conformance.workloads()["tiny-llama"], conformance.hardware()["4x-dgx-h100"]
    cost = _ddp().cost(workload, hw, _cand(64, bucket_cap_mb=0.1))
    assert cost.collectives[0].calls > 1
    assert 0 < cost.exposed_communication_s < cost.communication_s


def buffers_rank(*, rank: int, world_size: int) -> dict[str, Any]:
    """Rank 1 changes its buffer between two steps of DDP (fit()'s settings: broadcast_buffers left at True)."""
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    net = nn.Linear(4, 1)
    net.register_buffer("table", torch.zeros(8))
    ddp = DistributedDataParallel(net)
    seen = []
    for step in range(2):
        if rank == 1:
            net.table.fill_(step + 10.0)  # rank 1's own value, before this step's forward
        ddp(torch.randn(2, 4)).sum().backward()
        seen.append(float(net.table[0]))
    return {"seen": seen}


def test_ddp_broadcasts_rank_0s_buffers_before_each_forward() -> None:
    results = run_gloo("tests.strategies.test_ddp:buffers_rank", world_size=2, timeout_s=120)
    assert [r["seen"] for r in results] == [[0.0, 0.0], [0.0, 0.0]]  # rank 1's writes replaced by rank 0's


def test_buffers_are_broadcast_each_step_in_the_cost() -> None:
    """A 400 MB lookup-table buffer made DDP 4.6 x slower than FSDP2 on two gloo processes (a multi-model probe),
    where the step-time model priced them alike: the broadcast before each forward was left out."""
    import dataclasses

    workload, hw = conformance.workloads()["tiny-llama"], conformance.hardware()["4x-dgx-h100"]
    plain = _ddp().cost(dataclasses.replace(workload, buffer_bytes=0), hw, _cand(4))
    table = 300 * MIB
    heavy = _ddp().cost(dataclasses.replace(workload, buffer_bytes=table), hw, _cand(4))
    (broadcast,) = [c for c in heavy.collectives if c.kind == "broadcast"]
    assert (broadcast.bytes, broadcast.calls, broadcast.overlappable) == (table, 2, False)  # buckets of 250 MiB
    assert not [c for c in plain.collectives if c.kind == "broadcast"]
    assert heavy.step_time_s > plain.step_time_s
    assert heavy.exposed_communication_s - plain.exposed_communication_s == pytest.approx(
        heavy.communication_s - plain.communication_s)
    one = _ddp().cost(dataclasses.replace(workload, buffer_bytes=table), conformance.hardware()["cpu"], _cand(4))
    assert one.collectives == ()  # nothing to broadcast to


# -- the gloo harness ------------------------------------------------------------------------------------------------


def test_gloo_harness_returns_each_ranks_json_in_rank_order() -> None:
    import os

    results = run_gloo("tests.strategies.gloo_harness:probe_rank", world_size=2, timeout_s=60)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["rank_sum"] == 1.0 and r["world_size"] == 2 for r in results)
    assert all(r["pgid"] == r["pid"] != os.getpgid(0) for r in results)  # each rank leads its own group


# A failing rank ends the run as soon as it fails: its limit is long, so that two ranks importing torch on a loaded
# machine do not run into it first (8 s did, under a load of 8 on 2 cores, 2026-12-01).
@pytest.mark.parametrize(("kwargs", "message", "timeout_s"), [({"hang_rank": 1}, "timed out", 8),
                                                               ({"fail_rank": 1}, "on purpose", 90)])
def test_gloo_harness_stops_the_whole_run_when_a_rank_hangs_or_fails(kwargs: dict[str, Any], message: str,
                                                                     timeout_s: float) -> None:
    import os
    import time

    from tests.strategies.gloo_harness import GlooRunError

    started = time.monotonic()
    with pytest.raises(GlooRunError, match=message) as info:
        run_gloo("tests.strategies.gloo_harness:probe_rank", world_size=2, timeout_s=timeout_s, grace_s=1,
                 kwargs=kwargs)
    assert time.monotonic() - started < timeout_s + 22
    assert "rank 0 output" in str(info.value) and "rank 1 output" in str(info.value)
    assert len(info.value.pids) == 2
    for pid in info.value.pids:  # no worker left behind: each process group is gone
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)


# -- against real processes -----------------------------------------------------------------------------------------

GLOO_CASES = [
    # id, run kwargs, settings, checkpointing, micro-batch
    ("fp32", {}, {}, False, 4),
    ("bucket-view", {"gradient_as_bucket_view": True}, {"gradient_as_bucket_view": True}, False, 4),
    ("fp16-compress", {"comm_hook": "fp16_compress"}, {"comm_hook": "fp16_compress"}, False, 4),
    ("fp16-compress-bucket-view-checkpointing",
     {"comm_hook": "fp16_compress", "gradient_as_bucket_view": True, "checkpointing": True, "micro_batch": 1},
     {"comm_hook": "fp16_compress", "gradient_as_bucket_view": True}, True, 1),
    ("small-buckets", {"bucket_cap_mb": 0.1, "steps": 3}, {"bucket_cap_mb": 0.1}, False, 4),
]


@pytest.mark.parametrize(("run", "settings", "checkpointing", "micro_batch"), [c[1:] for c in GLOO_CASES],
                         ids=[c[0] for c in GLOO_CASES])
def test_ddp_memory_matches_two_gloo_processes(run: dict[str, Any], settings: dict[str, Any], checkpointing: bool,
                                              micro_batch: int) -> None:
    """Each rank's live-tensor peak over the steps, against ``ddp.memory()`` for the same step (within 10 %)."""
    workload, hw = conformance.workloads()["tiny-gpt2-cpu"], conformance.hardware()["cpu-2-processes"]
    results = run_gloo("tests.strategies.test_ddp:ddp_rank", world_size=2, timeout_s=180,
                       kwargs={"micro_batch": micro_batch, "checkpointing": checkpointing, **run})
    measured = max(r["step_peak_bytes"] for r in results)
    predicted = _ddp().memory(workload, hw, _cand(micro_batch, checkpointing, **settings)).gpu.total
    assert predicted == pytest.approx(measured, rel=0.10), f"predicted {predicted}, measured {measured}"
    if "bucket_cap_mb" in settings:  # the rebuilt buckets are the ones the layout predicts
        rebuilt = [int(x) for x in results[0]["ddp_logging"]["rebuilt_bucket_sizes"].split(",")]
        element_bytes = workload.trace("amp", False).at_1.gradient_bytes / sum(workload.parameter_numels)
        cap = int(settings["bucket_cap_mb"] * MIB)
        assert rebuilt == list(gradient_buckets(workload.parameter_numels, element_bytes, first_bucket_bytes=cap,
                                                bucket_bytes=cap))


def test_ddp_powersgd_memory_bounds_two_gloo_processes() -> None:
    """PowerSGD in its steady state (steps after start_powerSGD_iter): the prediction is an upper bound, since the
    new error tensor is made in a future callback on gloo's thread, where the tracker does not see it."""
    workload, hw = conformance.workloads()["tiny-gpt2-cpu"], conformance.hardware()["cpu-2-processes"]
    results = run_gloo("tests.strategies.test_ddp:ddp_rank", world_size=2, timeout_s=180,
                       kwargs={"comm_hook": "powersgd", "start_powerSGD_iter": 2, "steps": 4})
    measured = max(r["step_peak_bytes"] for r in results)
    strategy, cand = _ddp(), _cand(4, comm_hook="powersgd")
    predicted = strategy.memory(workload, hw, cand).gpu.total
    # The high point of tiny-gpt2's backward is at its start, before its one bucket is ready: what is measured
    # there is the state PowerSGD keeps between steps; the prediction adds one bucket's transients on top.
    layout = ddp_module._Layout.of(workload, workload.trace("amp", False), strategy.resolve(hw, cand))
    _, transient, _ = ddp_module._hook_memory(strategy.resolve(hw, cand), layout, lambda n: n)
    assert measured <= predicted
    assert predicted - transient == pytest.approx(measured, rel=0.10), f"predicted {predicted}, measured {measured}"


def ddp_rank(*, rank: int, world_size: int, model: str = "tiny-gpt2", micro_batch: int = 4, seq_len: int = 64,
             gradient_as_bucket_view: bool = False, comm_hook: str = "none",
             bucket_cap_mb: float | None = None, matrix_approximation_rank: int = 1, start_powerSGD_iter: int = 2,
             checkpointing: bool = False, steps: int = 2) -> dict[str, Any]:
    """One rank of a DDP run on CPU (gloo), fp32 AdamW, measured with the MemoryTracker (see gloo_harness)."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel

    from autoshard.models import load_source
    from autoshard.models.source import default_loss
    from autoshard.profiler.optimizers import build_optimizer
    from tests.strategies.gloo_harness import track_training_steps

    torch.manual_seed(0)
    source = load_source(model)
    module = source.build()
    module.train()
    torch.manual_seed(rank)  # each rank its own data, as a sampler would give
    batch = source.batch(micro_batch, seq_len=seq_len)
    if checkpointing:
        _checkpoint_blocks(module)

    wrapped: list[DistributedDataParallel] = []
    hook_state: list[Any] = []

    def wrap(m: torch.nn.Module) -> torch.nn.Module:
        ddp = DistributedDataParallel(m, bucket_cap_mb=bucket_cap_mb, gradient_as_bucket_view=gradient_as_bucket_view)
        if comm_hook == "fp16_compress":
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif comm_hook == "powersgd":
            state = powerSGD_hook.PowerSGDState(process_group=None, start_powerSGD_iter=start_powerSGD_iter,
                                                matrix_approximation_rank=matrix_approximation_rank)
            ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
            hook_state.append(state)
        elif comm_hook != "none":
            raise ValueError(f"comm_hook {comm_hook!r} is not measured here")
        wrapped.append(ddp)
        return ddp

    result = track_training_steps(module, batch, lambda params: build_optimizer("adamw", params, foreach=None),
                                  loss_fn=source.loss_fn or default_loss, wrap=wrap, steps=steps,
                                  extra_tensors=lambda: _powersgd_tensors(hook_state))
    result["rank"] = rank
    logging_data = wrapped[0]._get_ddp_logging_data()
    result["ddp_logging"] = {k: logging_data[k] for k in ("bucket_sizes", "rebuilt_bucket_sizes") if k in logging_data}
    return result


def _powersgd_tensors(states: list[Any]) -> list[Any]:
    """PowerSGD's error feedback and P/Q: replaced inside future callbacks, on gloo's threads, which the
    tracker's dispatch mode (thread-local) does not see."""
    return [t for st in states for d in (st.error_dict, st.p_memory_dict, st.q_memory_dict) for t in d.values()]


def _checkpoint_blocks(module: Any) -> None:
    """Non-reentrant activation checkpointing of every repeated block, as the profiler applies it."""
    from torch.utils.checkpoint import checkpoint

    from autoshard.profiler.blocks import find_repeated_blocks

    blocks = find_repeated_blocks(module)
    if blocks is None:
        raise ValueError("the model has no repeated block to checkpoint")
    for name in blocks.names:
        block = module.get_submodule(name)
        inner = block.forward

        def forward(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

        block.forward = forward


# -- one device -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings", [{}, {"gradient_as_bucket_view": True}, {"comm_hook": "powersgd"}])
def test_one_device_holds_the_traced_step_alone_and_reduces_nothing(settings: dict[str, Any]) -> None:
    """One rank trains unwrapped (fit() and every trainer autoshard hands off to): the traced step's memory, no
    buckets or hook state, no all-reduce; from 2 ranks the buckets are a second copy of the gradients."""
    from autoshard.hardware import load_hardware

    workload = conformance.workloads()["tiny-llama"]
    one, two = load_hardware("h100-sxm-80gb", gpus=1), load_hardware("h100-sxm-80gb", gpus=2)
    alone = _ddp().memory(workload, one, _cand(4, **settings))
    trace = workload.trace("amp", False)
    traced = trace.phases(4)[alone.peak_phase]
    assert alone.gpu.buffers == traced.buffers
    assert alone.gpu.gradients == min(traced.gradients, trace.at_1.gradient_bytes)
    assert alone.notes[0] == ddp_module.ONE_DEVICE_NOTE
    replicated = _ddp().memory(workload, two, _cand(4))
    assert replicated.gpu.total > alone.gpu.total
    cost = _ddp().cost(workload, one, _cand(4, **settings))
    assert cost.collectives == () and cost.communication_s == cost.exposed_communication_s == 0.0
    assert cost.step_time_s == pytest.approx(cost.compute_s + cost.optimizer_s)
    assert ddp_module.ONE_DEVICE_NOTE in cost.notes


def test_one_device_tunes_no_ddp_knob() -> None:
    """Nothing to reduce on one device: the tuner searches micro-batch and checkpointing only."""
    from autoshard.hardware import load_hardware

    assert not [k.name for k in _ddp().knobs(load_hardware("h100-sxm-80gb", gpus=1)) if k.tuned]
    assert {k.name for k in _ddp().knobs(load_hardware("h100-sxm-80gb", gpus=2)) if k.tuned} == {
        "bucket_cap_mb", "comm_hook", "matrix_approximation_rank", "gradient_as_bucket_view", "static_graph"}


@pytest.mark.parametrize("micro_batch", [2, 4])
def test_one_device_with_gradients_zeroed_holds_them_through_forward_as_the_trace_does(micro_batch: int) -> None:
    """``zero_grad(set_to_none=False)`` (the HF Trainer before torch 2.0): the gradients stay allocated into the
    next forward. The one-device estimate is then the traced step's own peak (``profile(..., set_grads_to_none=
    False)``), one gradient copy above the default's where forward peaks. (On an H200, BERT-large of transformers'
    single-GPU guide: the planner said 10.34 GiB, the profile 11.59, the GPU 11.61.)"""
    import dataclasses

    import autoshard
    from autoshard.hardware import load_hardware
    from autoshard.models import load_source

    source = load_source("tiny-gpt2")
    workload = build_workload(source, precision="32-true", target="cpu", seq_len=64)
    kept_workload = dataclasses.replace(workload, set_grads_to_none=False)
    one = load_hardware("h100-sxm-80gb", gpus=1)
    default = _ddp().memory(workload, one, _cand(micro_batch))
    kept = _ddp().memory(kept_workload, one, _cand(micro_batch))
    traced = autoshard.profile(source, batch_size=micro_batch, seq_len=64, precision="32-true", target="cpu",
                               set_grads_to_none=False).peak_bytes
    assert kept.gpu.total == traced
    grads = workload.trace("amp", False).at_1.gradient_bytes
    assert 0 < kept.gpu.total - default.gpu.total <= grads
    assert any("zeroed, not set to None" in n for n in kept.notes)
    assert kept_workload.to_dict()["set_grads_to_none"] is False


@pytest.mark.parametrize("checkpointing", [False, True])
def test_one_device_is_the_traced_step_at_every_micro_batch(checkpointing: bool) -> None:
    """Gradients set to None between steps grow through backward, so backward peaks at one moment: its gradients
    and its other bytes *at that moment*. Taking the highest non-state bytes of backward (its start) beside the
    gradients of its peak (its end) over-counted micro-batches 2 and up, and made memory fall as the micro-batch
    grew (llama-3-8b, 8192 tokens, checkpointing: 149.81, 176.27, 170.13 GiB at 1, 2, 3). One device trains the
    traced step alone: its estimate is the profile's peak, micro-batch by micro-batch."""
    import autoshard
    from autoshard.hardware import load_hardware
    from autoshard.models import load_source

    source = load_source("tiny-gpt2")
    workload = build_workload(source, precision="32-true", target="cpu", seq_len=128)
    one = load_hardware("h100-sxm-80gb", gpus=1)
    totals = []
    for micro_batch in (1, 2, 3, 4):
        estimate = _ddp().memory(workload, one, _cand(micro_batch, checkpointing))
        traced = autoshard.profile(source, batch_size=micro_batch, seq_len=128, precision="32-true", target="cpu",
                                   activation_checkpointing=checkpointing).peak_bytes
        assert estimate.gpu.total == traced, micro_batch
        totals.append(estimate.gpu.total)
    assert totals == sorted(totals)
