"""A model that pins CUDA's attention kernel (``torch.nn.attention.sdpa_kernel``) is traced as CUDA runs it (a
custom-kernels probe: the memory-efficient or cuDNN kernel pinned was refused as the model's error, "No viable
backend for scaled_dot_product_attention", as the CPU has neither)."""

from __future__ import annotations

from pathlib import Path

import pytest

import autoshard
from autoshard.errors import UserCodeError

MODEL_PY = '''
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 192)

    def forward(self, x):
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 4, 16).permute(2, 0, 3, 1, 4)
        with sdpa_kernel([{backends}]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(x.shape).square().mean()


def model():
    return Attention()


def batch(batch_size):
    return torch.randn(batch_size, 32, 64)
'''


def _profile(tmp_path: Path, backends: str, target: str = "cuda") -> autoshard.ModelProfile:
    path = tmp_path / f"{backends.replace('SDPBackend.', '').replace(', ', '_').lower()}.py"
    path.write_text(MODEL_PY.format(backends=backends), encoding="utf-8")
    return autoshard.profile(str(path), batch_size=2, target=target)


@pytest.mark.parametrize("pinned", ["SDPBackend.EFFICIENT_ATTENTION", "SDPBackend.CUDNN_ATTENTION"])
def test_a_pinned_cuda_kernel_is_traced_as_the_fused_kernel_cuda_runs(tmp_path: Path, pinned: str) -> None:
    fused = _profile(tmp_path, "SDPBackend.FLASH_ATTENTION")
    math = _profile(tmp_path, "SDPBackend.MATH")
    got = _profile(tmp_path, pinned)
    assert got.forward_flops == fused.forward_flops
    assert got.peak_breakdown.activations < math.peak_breakdown.activations  # no s x s matrix kept, as fused


def test_on_a_cpu_target_the_pinned_kernel_is_refused_as_a_cpu_run_refuses_it(tmp_path: Path) -> None:
    with pytest.raises(UserCodeError, match="No viable backend"):
        _profile(tmp_path, "SDPBackend.EFFICIENT_ATTENTION", target="cpu")
