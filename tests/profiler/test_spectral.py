"""Spectral layers (a Fourier neural operator's, FNet's): their FFTs and complex matmuls are counted (torch 2.13
counts FFTs as 0 FLOPs and a complex matmul as a real one), and a bfloat16 input to an FFT is said with the fix."""

from __future__ import annotations

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import autoshard
from autoshard.errors import UserCodeError
from autoshard.profiler import flops
from autoshard.profiler.op_census import CensusCounter

_FNO = '''
import torch
from torch import nn


class Spectral(nn.Module):
    def __init__(self, channels, modes):
        super().__init__()
        self.modes = modes
        self.weight = nn.Parameter(torch.randn(channels, channels, modes, modes, dtype=torch.cfloat) / channels)

    def forward(self, x):
        xf = torch.fft.rfft2(x{cast})
        m = self.modes
        y = torch.zeros(*xf.shape, dtype=xf.dtype, device=x.device)
        y[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", xf[:, :, :m, :m], self.weight)
        return torch.fft.irfft2(y, s=x.shape[-2:])


class FNO(nn.Module):
    def __init__(self, channels=8, modes=4, layers=2):
        super().__init__()
        self.lift = nn.Conv2d(3, channels, 1)
        self.spectral = nn.ModuleList(Spectral(channels, modes) for _ in range(layers))
        self.pointwise = nn.ModuleList(nn.Conv2d(channels, channels, 1) for _ in range(layers))

    def forward(self, x):
        x = self.lift(x)
        for spectral, pointwise in zip(self.spectral, self.pointwise):
            x = torch.nn.functional.gelu(spectral(x) + pointwise(x))
        return x.mean()


def model():
    return FNO()


def batch(batch_size):
    return torch.randn(batch_size, 3, 16, 16)
'''


def _real_fft(points: int, transforms: int) -> int:
    return round(transforms * 2.5 * points * math.log2(points))


def test_a_real_transform_and_its_inverse_count_fftws_flops() -> None:
    x = torch.randn(2, 4, 16, 16)
    with flops.counter() as counter:
        spectrum = torch.fft.rfft2(x)
        forward = counter.get_total_flops()
        torch.fft.irfft2(spectrum, s=(16, 16))
    assert forward == _real_fft(256, transforms=8) > 0  # 2.5·N·log2 N per real transform of N = 16 x 16 points
    assert counter.get_total_flops() == 2 * forward


def test_a_complex_transform_counts_twice_a_real_one() -> None:
    with flops.counter() as counter:
        torch.fft.fft(torch.randn(3, 64, dtype=torch.cfloat))
    assert counter.get_total_flops() == 2 * _real_fft(64, transforms=3)


def test_a_complex_matmul_counts_four_real_ones() -> None:
    a, b = torch.randn(5, 6, 7), torch.randn(5, 7, 3)
    with flops.counter() as real:
        torch.bmm(a, b)
    with flops.counter() as complex_:
        torch.bmm(a.to(torch.cfloat), b.to(torch.cfloat))
    assert real.get_total_flops() == 2 * 5 * 6 * 7 * 3
    assert complex_.get_total_flops() == 4 * real.get_total_flops()


def test_the_census_files_transforms_as_their_own_kind_with_their_points() -> None:
    with FakeTensorMode(allow_non_fake_inputs=True), flops.counter(census=True) as counter:
        torch.fft.rfft2(torch.empty(2, 4, 32, 16))
    assert isinstance(counter, CensusCounter)
    (fft,) = counter.census().matmuls
    assert (fft.kind, fft.dtype, fft.min_dim) == ("fft", "fp32", 512)
    assert fft.flops == _real_fft(512, transforms=8)
    assert fft.bytes == 2 * 4 * 32 * 16 * 4 + 2 * 4 * 32 * 9 * 8  # the real input and the half spectrum


def test_a_fourier_neural_operator_profiles_its_transforms_and_complex_weights(tmp_path) -> None:
    path = tmp_path / "fno.py"
    path.write_text(_FNO.format(cast=""))
    profile = autoshard.profile(str(path), batch_size=2, precision="32-true", target="cpu")  # no 512-B rounding
    channels, modes, layers, side = 8, 4, 2, 16
    transforms = 2 * channels
    per_layer = (2 * _real_fft(side * side, transforms)  # rfft2 and irfft2
                 + 4 * 2 * 2 * channels * channels * modes * modes  # the complex einsum: 4 real multiply-adds each
                 + 2 * 2 * side * side * channels * channels)  # the 1x1 pointwise convolution
    lift = 2 * 2 * side * side * 3 * channels
    assert profile.forward_flops == layers * per_layer + lift
    assert profile.census is not None and any(m.kind == "fft" for m in profile.census.matmuls)
    assert profile.census.matmul_flops == profile.forward_flops + profile.backward_flops
    # Complex parameters: 8 bytes each, and 8 for each of AdamW's two states.
    spectral = layers * channels * channels * modes * modes
    convolutions = 3 * channels + channels + layers * (channels * channels + channels)
    assert profile.parameter_bytes == 8 * spectral + 4 * convolutions
    assert profile.optimizer_state_bytes == 2 * profile.parameter_bytes + 4 * (2 + 2 + 2 * layers)  # + steps


def test_a_bfloat16_input_to_a_transform_says_to_cast_it(tmp_path) -> None:
    path = tmp_path / "fno.py"
    path.write_text(_FNO.format(cast=""))
    with pytest.raises(UserCodeError, match="Unsupported dtype BFloat16") as raised:
        autoshard.profile(str(path), batch_size=2, precision="bf16-mixed")  # the convolution before it gives bf16
    assert "x.float()" in (raised.value.hint or "") and "fno.py" in str(raised.value)
    path.write_text(_FNO.format(cast=".float()"))
    assert autoshard.profile(str(path), batch_size=2, precision="bf16-mixed").forward_flops > 0
