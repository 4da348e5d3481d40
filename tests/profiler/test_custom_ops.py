"""Custom ops (``torch.library``) in a model: traced through their fake implementation, and, without a FLOP
formula, said to count 0 FLOPs (a custom-kernels probe: a custom matmul left 26 % of a model's FLOPs out and
nothing said so); with one registered, counted."""

from __future__ import annotations

from pathlib import Path

import autoshard

MODEL_PY = '''
import torch
from torch import nn


@torch.library.custom_op("{ns}::mm", mutates_args=())
def mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


@mm.register_fake
def _(x, w):
    return x.new_empty(*x.shape[:-1], w.shape[-1])


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    return mm(grad, w.t()), mm(x.reshape(-1, x.shape[-1]).t(), grad.reshape(-1, grad.shape[-1]))


mm.register_autograd(_backward, setup_context=_setup)
{formula}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 64) / 8)
        self.head = nn.Linear(64, 1)

    def forward(self, x):
        return self.head(torch.relu(mm(x, self.w)))


def model():
    return Net()


def batch(batch_size):
    return torch.randn(batch_size, 64)
'''

FORMULA = '''

@torch.utils.flop_counter.register_flop_formula(torch.ops.{ns}.mm)
def _mm_flops(x_shape, w_shape, *args, out_shape=None, **kwargs):
    return 2 * x_shape[0] * x_shape[1] * w_shape[1]
'''


def test_a_custom_op_without_a_formula_is_said_to_count_no_flops(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY.format(ns="probe_nof", formula=""), encoding="utf-8")
    profile = autoshard.profile(str(path), batch_size=8, precision="32-true")
    assert profile.uncounted_ops == ("probe_nof::mm",)
    assert profile.forward_flops == 2 * 8 * 64 * 1  # the head alone: the custom matmul counts 0
    plan = autoshard.recommend(str(path), hardware=autoshard.detect_hardware(gpus=2), batch_size=8,
                               precision="32-true")
    (line,) = [x for x in plan.explanation if "without a FLOP formula" in x]
    assert "(probe_nof::mm)" in line and "register_flop_formula(torch.ops.probe_nof.mm)" in line


def test_a_custom_op_with_a_formula_is_counted_and_not_said(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY.format(ns="probe_withf", formula=FORMULA.format(ns="probe_withf")), encoding="utf-8")
    profile = autoshard.profile(str(path), batch_size=8, precision="32-true")
    assert profile.uncounted_ops == ()
    assert profile.forward_flops == 2 * 8 * 64 * 64 + 2 * 8 * 64 * 1


def test_torchs_own_ops_are_never_said() -> None:
    assert autoshard.profile("tiny-gpt2", batch_size=2).uncounted_ops == ()


def test_fit_says_a_module_it_cannot_copy_is_the_attribute_not_the_config() -> None:
    """A custom-kernels probe kept a CustomOpDef on its module: fit() said "model() raised TypeError: cannot pickle
    '_DispatchModule'" with a hint about config.json files."""
    import threading

    import pytest
    import torch
    from torch import nn

    from autoshard.errors import UsageError

    class Locked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 1)
            self.lock = threading.Lock()  # copy.deepcopy cannot copy it, as it cannot a custom op's object

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)

    with pytest.raises(UsageError, match=r"fit\(\) plans on a copy of your module .* copying Locked raised "
                                         r"TypeError") as info:
        autoshard.fit(Locked(), [torch.randn(2, 4)], loss_fn=lambda out, b: out.mean(), max_steps=1, progress=False)
    assert "ModelSource(build_fn=...)" in (info.value.hint or "") and "config.json" not in str(info.value)
