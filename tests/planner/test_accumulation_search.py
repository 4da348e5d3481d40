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


def test_the_explanation_states_the_global_batch_it_trains_with() -> None:
    """A 16-node plan over 25 GbE trained 4,352 sequences a step where InfiniBand's trained 256, and neither was
    said (probe): the batch size changes what training learns."""
    s = Synthetic("ddp", state_gib=10, act_gib=1, per_device_samples_s=100)
    p = plan(workload(), H100x8, request(global_batch_size=48), [s])
    line = next(x for x in p.explanation if x.startswith("Global batch:"))
    micro, steps = p.recommended.candidate.micro_batch_size, p.recommended.gradient_accumulation
    assert micro * steps * 8 == 48
    assert line.startswith(f"Global batch: 48 samples per optimizer step (micro-batch {micro}, ") and "8 data" in line
    one = plan(workload(), dataclasses.replace(H100x8, processes_per_node=1,
                                               node=dataclasses.replace(H100x8.node, gpus=1)),
               request(micro_batch_size=2), [s])
    assert not any(x.startswith("Global batch:") for x in one.explanation)  # one device, one micro-batch
