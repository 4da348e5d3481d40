"""The optimizer implementation (for-loop, foreach, fused): the traced step against the CPU allocator's peak."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from autoshard.errors import UsageError
from autoshard.profiler.optimizers import build_optimizer
from autoshard.profiler.options import ProfileOptions, parse_optimizer_impl
from autoshard.profiler.trace import trace
from tests.benchmark_scripts import load
from tests.profiler import models


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("memory_accuracy")


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize("impl", ["for-loop", "foreach", "fused"])
def test_traced_optimizer_peak_matches_the_cpu_allocator(bench: ModuleType, impl: str, optimizer: str) -> None:
    torch.manual_seed(0)
    options = ProfileOptions(batch_size=1, precision="32-true", optimizer=optimizer, optimizer_impl=impl,
                             target="cpu")
    predicted = trace(models.mlp_source(), options, fake=True)
    measured = bench.measure_peak(models.mlp_source(), options, torch.device("cpu"))
    # The tolerance of the profiler's ground-truth tests (tests/profiler/test_trace.py).
    assert predicted.peak_bytes == pytest.approx(measured["allocated"], rel=0.02)
    assert measured["drift"] == 0


def test_each_implementation_has_the_temporaries_torch_allocates() -> None:
    """torch/optim/adam.py (2.13): ``_multi_tensor_adam`` holds ``torch._foreach_sqrt(exp_avg_sqs)``, one
    temporary per parameter of the list at once; ``_single_tensor_adam`` computes
    ``(exp_avg_sq.sqrt() / bias_correction2_sqrt)``, two of one parameter's, while the previous parameter's
    ``denom`` is still bound; ``_fused_adam`` updates in place."""
    traced = {impl: trace(models.mlp_source(), ProfileOptions(batch_size=1, precision="32-true",
                                                             optimizer_impl=impl, target="cpu"))
              for impl in ("for-loop", "foreach", "fused")}
    scratch = {impl: dict(p.phase_peaks)["optimizer"].temporaries
               for impl, p in traced.items() if "optimizer" in dict(p.phase_peaks)}
    sizes = [4 * p.numel() for p in models.mlp_source().build().parameters()]
    assert scratch["foreach"] == traced["foreach"].parameter_bytes == sum(sizes)
    assert scratch["for-loop"] == max(prev + 2 * cur for prev, cur in zip([0, *sizes], sizes, strict=False))
    assert "fused" not in scratch and traced["fused"].peak_phase == "backward"
    assert len({p.optimizer_state_bytes for p in traced.values()}) == 1


def test_default_is_what_torch_picks_on_the_target() -> None:
    assert ProfileOptions(batch_size=1).optimizer_impl == "foreach"
    assert ProfileOptions(batch_size=1, target="cpu").optimizer_impl == "for-loop"
    cuda = trace(models.gpt_source(2), ProfileOptions(batch_size=2, target="cuda"))
    named = trace(models.gpt_source(2), ProfileOptions(batch_size=2, target="cuda", optimizer_impl="foreach"))
    assert cuda.peak_bytes == named.peak_bytes and cuda.phase_peaks == named.phase_peaks


@pytest.mark.parametrize(("impl", "foreach", "fused"), [("foreach", True, False), ("for-loop", False, False),
                                                         ("fused", False, True)])
def test_built_optimizer_runs_the_named_implementation(impl: str, foreach: bool, fused: bool) -> None:
    opt = build_optimizer("adamw", torch.nn.Linear(2, 2).parameters(), impl=impl)  # type: ignore[arg-type]
    assert bool(opt.defaults["foreach"]) is foreach and bool(opt.defaults["fused"]) is fused


@pytest.mark.parametrize(("value", "optimizer", "message"), [
    ("fused", "adafactor", "no fused adafactor"),
    ("vectorized", "adamw", "unknown optimizer implementation"),
])
def test_bad_implementation_is_refused_in_the_users_terms(value: str, optimizer: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ProfileOptions(batch_size=1, optimizer=optimizer, optimizer_impl=value)  # type: ignore[arg-type]


def test_spellings_users_type_are_accepted() -> None:
    assert parse_optimizer_impl("for_loop") == parse_optimizer_impl("forloop") == "for-loop"
    assert parse_optimizer_impl("FOREACH") == "foreach"
