"""With a global batch and no micro-batch, the largest micro-batch is searched with the gradients accumulation
keeps, as the chosen one is priced."""

from __future__ import annotations

import dataclasses

import pytest

from autoshard.strategies.base import MemoryEstimate
from tests.planner.test_planner import GIB, H100x8, Synthetic, plan, request, workload


class Accumulating(Synthetic):
    """:class:`Synthetic` plus 10 GiB of gradients kept through forward when a step takes several micro-batches
    (FSDP2's sharded gradients, ZeRO-1's 16-bit ones)."""

    def memory(self, workload, hardware, candidate):
        m = super().memory(workload, hardware, candidate)
        kept = 10 * GIB if candidate.gradient_accumulation > 1 else 0
        return MemoryEstimate(gpu=dataclasses.replace(m.gpu, gradients=kept), peak_phase=m.peak_phase,
                              cpu_bytes_per_node=m.cpu_bytes_per_node)


@pytest.mark.parametrize(("per_device", "micro", "accumulation"), [
    (120, 40, 3),  # 66 samples fit alone, 56 while accumulating: 60 (a divisor) would not fit with its gradients
    (60, 60, 1),  # the whole per-device batch fits in one micro-batch: no accumulation, no kept gradients
    (112, 56, 2),
])
def test_global_batch_micro_batch_is_the_largest_that_fits_with_accumulated_gradients(per_device, micro,
                                                                                         accumulation):
    # 71.7 GiB usable on an H100: 40 GiB of states / 8 + 1 GiB per sample (+ 10 GiB when accumulating)
    strategy = Accumulating("fsdp", state_gib=40, act_gib=1, per_device_samples_s=10, sharded=True)
    p = plan(workload(), H100x8, request(global_batch_size=8 * per_device), [strategy])
    best = p.recommended
    assert (best.candidate.micro_batch_size, best.gradient_accumulation) == (micro, accumulation)
    assert best.fits
    assert best.candidate.micro_batch_size <= best.max_micro_batch_size
