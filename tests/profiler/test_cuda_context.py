"""The CUDA context outside the allocator, and the nvidia-smi-style total beside the allocated peak (#16)."""

from __future__ import annotations

import json

import pytest

from autoshard.cli import main
from autoshard.profiler.cuda_context import (
    MEASUREMENTS,
    context_measurement,
    context_overhead,
    reserve_lower_bound_bytes,
)
from autoshard.profiler.cuda_reserve import ROUND_LARGE as SEGMENT_BYTES
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.trace import trace
from tests.profiler import models


def test_a_cuda_profile_adds_the_context_outside_the_allocator_and_a_device_total() -> None:
    p = trace(models.mlp_source(), ProfileOptions(batch_size=2))
    (context,) = [o for o in p.overheads if not o.in_allocator]
    assert context.name == "CUDA context" and "measured" in context.source
    in_allocator = sum(o.bytes for o in p.overheads if o.in_allocator)
    assert p.peak_bytes == p.peak_breakdown.total + in_allocator  # the allocated peak leaves the context out
    assert p.peak_with_overheads_bytes == p.peak_bytes + context.bytes
    assert p.device_total_bytes == p.peak_bytes + p.reserve_bytes + context.bytes
    assert (p.peak_bytes + p.reserve_bytes) % SEGMENT_BYTES == 0


def test_a_cpu_profile_has_no_context_and_no_reserve() -> None:
    p = trace(models.mlp_source(), ProfileOptions(batch_size=2, target="cpu"))
    assert p.overheads == () and p.reserve_bytes == 0 and p.device_total_bytes == p.peak_bytes


def test_every_measurement_names_where_it_was_made() -> None:
    assert all(m.source and m.cuda and m.torch and m.bytes > 0 for m in MEASUREMENTS)


def test_a_measurement_on_the_same_gpu_generation_is_preferred_and_others_say_so() -> None:
    ada = context_overhead((8, 9))
    hopper = context_overhead((9, 0))
    assert "(this compute capability)" in ada.source
    assert "not measured on sm_90" in hopper.source
    # Lazy module loading (CUDA >= 11.7, PyTorch's default) loads only the kernels used: a smaller context.
    assert context_measurement((9, 0), lazy_loading=False).bytes > context_measurement((9, 0)).bytes


@pytest.mark.parametrize("allocated", [0, 1, SEGMENT_BYTES - 1, SEGMENT_BYTES, 3 * SEGMENT_BYTES + 5])
def test_the_reserve_is_the_rounding_up_to_whole_segments(allocated: int) -> None:
    reserve = reserve_lower_bound_bytes(allocated)
    assert 0 <= reserve < SEGMENT_BYTES and (allocated + reserve) % SEGMENT_BYTES == 0


def test_recommend_reports_the_nvidia_smi_total_per_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "tiny-gpt2", "--hardware", "dgx-h100", "--gpus", "2", "--seq-len", "32",
                 "--batch-size", "2", "--strategies", "ddp", "--checkpointing", "none", "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["recommended"]["memory"]
    device = memory["device"]
    assert device["allocated"] == memory["gpu"]["total"]
    assert device["nvidia_smi_total"] == device["allocated"] + device["reserve"] + device["cuda_context"]
    assert device["cuda_context"] == context_overhead((9, 0)).bytes
