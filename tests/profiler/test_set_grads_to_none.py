"""``set_grads_to_none``: gradients freed between steps (torch >= 2.0) or kept, zeroed (``set_to_none=False``,
``Module.zero_grad()`` before torch 2.0), the traced step against the CPU allocator's peak."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from autoshard.errors import UsageError
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.trace import trace
from tests.benchmark_scripts import load
from tests.profiler import models


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("memory_accuracy")


@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("accumulation", [1, 2, 5])  # 5: the trace runs two micro-batches, the real step five
def test_traced_peak_matches_the_cpu_allocator(bench: ModuleType, set_to_none: bool, accumulation: int) -> None:
    torch.manual_seed(0)
    options = ProfileOptions(batch_size=2, precision="32-true", grad_accumulation=accumulation,
                             set_grads_to_none=set_to_none, target="cpu")
    predicted = trace(models.gpt_source(2), options, fake=True)
    measured = bench.measure_peak(models.gpt_source(2), options, torch.device("cpu"))
    # The tolerance of the profiler's ground-truth tests (tests/profiler/test_trace.py).
    assert predicted.peak_bytes == pytest.approx(measured["allocated"], rel=0.02)
    assert measured["drift"] == 0


def test_kept_gradients_are_alive_through_the_forward() -> None:
    """With zeroed gradients kept, the forward's peak carries all of them; freed, it carries none."""
    freed, kept = (trace(models.gpt_source(2), ProfileOptions(batch_size=2, precision="32-true",
                                                              set_grads_to_none=s, target="cpu"))
                   for s in (True, False))
    forward = {name: dict(p.phase_peaks)["forward"] for name, p in (("freed", freed), ("kept", kept))}
    assert forward["freed"].gradients == 0
    assert forward["kept"].gradients == kept.gradient_bytes > 0
    assert kept.peak_bytes > freed.peak_bytes


def test_a_non_bool_is_refused_in_the_users_terms() -> None:
    with pytest.raises(UsageError, match="set_grads_to_none must be True or False"):
        ProfileOptions(batch_size=1, set_grads_to_none="no")  # type: ignore[arg-type]


def test_the_cli_keeps_gradients_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from autoshard.cli import main

    args = ["profile", "tiny-gpt2", "--seq-len", "32", "--batch-size", "2", "--json"]
    assert main(args) == 0
    freed = json.loads(capsys.readouterr().out)
    assert main([*args, "--keep-grads"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert freed["options"]["set_grads_to_none"] is True and kept["options"]["set_grads_to_none"] is False
    assert kept["peak_bytes"] > freed["peak_bytes"]
