"""Activation checkpointing choices (none, full, every-N, torchtitan's op-selective) traced, against the CPU allocator."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
import torch

from autoshard.errors import UsageError
from autoshard.models import load_source
from autoshard.models.source import ModelSource
from autoshard.profiler.checkpointing import FULL, NONE, OP, ActivationCheckpointing, parse_checkpointing
from autoshard.profiler.options import ProfileOptions
from autoshard.profiler.result import ModelProfile
from autoshard.profiler.trace import trace
from tests.benchmark_scripts import load
from tests.profiler import models


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("memory_accuracy")


def _llama() -> ModelSource:
    return load_source("tiny-llama")


def _gpt() -> ModelSource:
    return models.gpt_source(4, hidden=64, seq=64, vocab=256)


CASES: list[tuple[str, Callable[[], ModelSource], int | None, str, str]] = [
    ("gpt-every-2", _gpt, None, "32-true", "every-2"),
    ("gpt-op", _gpt, None, "32-true", "op"),
    ("llama-op", _llama, 64, "32-true", "op"),
    ("llama-every-2", _llama, 64, "32-true", "every-2"),
    ("llama-op-bf16-mixed", _llama, 64, "bf16-mixed", "op"),
]


@pytest.mark.parametrize(("make", "seq", "precision", "mode"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_traced_peak_matches_the_cpu_allocator(bench: ModuleType, make: Callable[[], ModelSource],
                                               seq: int | None, precision: str, mode: str) -> None:
    """The ground truth checkpoints as fit() does (runtime.activation_checkpointing); the prediction traces
    the profiler's own wrappers under fake tensors."""
    torch.manual_seed(0)
    options = ProfileOptions(batch_size=4, seq_len=seq, precision=precision, checkpointing=mode, target="cpu")
    predicted = trace(make(), options, fake=True)
    measured = bench.measure_peak(make(), options, torch.device("cpu"))
    # The tolerance of the profiler's ground-truth tests (tests/profiler/test_trace.py).
    assert predicted.peak_bytes == pytest.approx(measured["allocated"], rel=0.02)
    assert measured["drift"] == 0


def _traced(mode: str) -> ModelProfile:
    return trace(_llama(), ProfileOptions(batch_size=4, seq_len=64, precision="32-true", checkpointing=mode,
                                          target="cpu"))


def test_each_mode_saves_and_recomputes_what_it_says() -> None:
    none, full, every2, op = (_traced(m) for m in ("none", "full", "every-2", "op"))
    assert full.peak_bytes < op.peak_bytes < none.peak_bytes
    assert full.peak_bytes < every2.peak_bytes < none.peak_bytes
    # every-2 wraps the second block only (torchtitan counts blocks from 1 and wraps count % 2 == 0).
    assert every2.blocks[0].activation_bytes == none.blocks[0].activation_bytes
    assert every2.blocks[1].activation_bytes == full.blocks[1].activation_bytes
    # op keeps the saved matmul and attention outputs on top of the block's input.
    assert all(f.activation_bytes < o.activation_bytes < n.activation_bytes
               for f, o, n in zip(full.blocks, op.blocks, none.blocks, strict=True))
    # Recomputation is counted, not assumed: op replays fewer ops than full, every-2 half of full's extra.
    assert none.forward_flops == full.forward_flops == op.forward_flops == every2.forward_flops
    assert none.backward_flops < op.backward_flops < full.backward_flops
    assert every2.backward_flops - none.backward_flops == (full.backward_flops - none.backward_flops) // 2
    # The step-time model charges the host per checkpointed block.
    assert len(full.blocks) == 2
    assert (none.checkpointed_blocks, every2.checkpointed_blocks, full.checkpointed_blocks,
            op.checkpointed_blocks) == (0, 1, 2, 2)


def test_a_cuda_trace_runs_the_op_policy_under_cuda_semantics() -> None:
    plain = trace(_llama(), ProfileOptions(batch_size=4, seq_len=64))
    op = trace(_llama(), ProfileOptions(batch_size=4, seq_len=64, checkpointing="op"))
    full = trace(_llama(), ProfileOptions(batch_size=4, seq_len=64, checkpointing="full"))
    assert full.peak_bytes < op.peak_bytes < plain.peak_bytes


@pytest.mark.parametrize(("value", "expected"), [
    (False, NONE), (True, FULL), ("none", NONE), ("off", NONE), ("full", FULL), ("op", OP), ("selective", OP),
    ("every-2", ActivationCheckpointing("every", 2)), ("every_3", ActivationCheckpointing("every", 3)), ("4", ActivationCheckpointing("every", 4)),
    ("every-1", FULL), (None, NONE),
])
def test_choices_parse_as_users_write_them(value: object, expected: ActivationCheckpointing) -> None:
    assert parse_checkpointing(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"checkpointing": "sometimes"}, "unknown activation checkpointing"),
    ({"checkpointing": "every-0"}, "at least 1"),
    ({"checkpointing": "none", "activation_checkpointing": True}, "contradicts"),
])
def test_bad_choices_are_refused_in_the_users_terms(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ProfileOptions(batch_size=1, **kwargs)  # type: ignore[arg-type]


def test_the_boolean_still_means_full_checkpointing() -> None:
    options = ProfileOptions(batch_size=1, activation_checkpointing=True)
    assert options.checkpointing == FULL and options.to_dict()["checkpointing"] == "full"
    assert ProfileOptions(batch_size=1, checkpointing="op").activation_checkpointing is True
