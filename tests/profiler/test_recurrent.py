"""Recurrent layers: ``nn.LSTM`` runs on a CPU as ``aten::mkldnn_rnn_layer`` (one call per layer and direction),
for which torch's FLOP counter has no formula. An LSTM model profiled as 0 FLOPs but its head's, and was planned
at hundreds of TFLOP/s. GRU and plain RNN run as ``mm`` / ``addmm`` and were counted already."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import autoshard
from autoshard.profiler import flops
from autoshard.profiler.op_census import CensusCounter


def _gate_products(layers: list[tuple[int, int]], tokens: int, gates: int = 4) -> int:
    """2 FLOPs per multiply-add of every token through every layer's input and hidden gate weights."""
    return sum(2 * tokens * gates * hidden * (inputs + hidden) for inputs, hidden in layers)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_an_lstm_counts_its_gate_products_forward_and_twice_that_backward(bidirectional: bool,
                                                                          batch_first: bool) -> None:
    lstm = nn.LSTM(24, 32, num_layers=2, batch_first=batch_first, bidirectional=bidirectional)
    x = torch.randn((3, 5, 24) if batch_first else (5, 3, 24), requires_grad=True)
    with flops.counter() as counter:
        out, _ = lstm(x)
        forward = counter.get_total_flops()
        out.sum().backward()
    directions = 2 if bidirectional else 1
    layers = [(24, 32)] * directions + [(32 * directions, 32)] * directions
    assert forward == _gate_products(layers, tokens=15)
    assert counter.get_total_flops() == 3 * forward


def test_a_packed_sequence_counts_only_its_real_tokens() -> None:
    lstm = nn.LSTM(8, 16)
    packed = nn.utils.rnn.pack_padded_sequence(torch.randn(6, 3, 8), torch.tensor([6, 4, 1]))
    with flops.counter() as counter:
        lstm(packed)
    assert counter.get_total_flops() == _gate_products([(8, 16)], tokens=11)


def test_the_census_files_each_time_step_as_a_kernel_of_the_batch_by_the_hidden_state() -> None:
    lstm = nn.LSTM(64, 128, batch_first=True)
    with FakeTensorMode(allow_non_fake_inputs=True), flops.counter(census=True) as counter:
        lstm(torch.empty(16, 40, 64))
    assert isinstance(counter, CensusCounter)
    (matmul,) = counter.census().matmuls
    assert matmul.flops == _gate_products([(64, 128)], tokens=16 * 40)
    assert matmul.kernels == 40 and matmul.min_dim == 16


def test_an_lstm_model_profiles_its_recurrent_flops(tmp_path) -> None:
    path = tmp_path / "model.py"
    path.write_text(
        "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n\n"
        "class Classifier(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.emb = nn.Embedding(100, 32)\n"
        "        self.rnn = nn.LSTM(32, 64, num_layers=2, batch_first=True)\n"
        "        self.out = nn.Linear(64, 5)\n\n"
        "    def forward(self, tokens):\n"
        "        h, _ = self.rnn(self.emb(tokens))\n"
        "        return self.out(h[:, -1])\n\n"
        "def model():\n    return Classifier()\n\n"
        "def batch(batch_size, seq_len=16):\n"
        "    return torch.randint(0, 100, (batch_size, seq_len)), torch.randint(0, 5, (batch_size,))\n\n"
        "def loss(output, batch):\n    return F.cross_entropy(output, batch[1])\n")
    profile = autoshard.profile(str(path), batch_size=4, precision="32-true")
    recurrent = _gate_products([(32, 64), (64, 64)], tokens=4 * 16)
    head = 2 * 4 * 64 * 5
    assert profile.forward_flops == recurrent + head
    assert profile.backward_flops == 2 * (recurrent + head)


class _Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(8, 16, batch_first=True)
        self.head = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, h = self.rnn(packed)
        return self.head(h[-1])


def test_a_packed_sequence_is_refused_at_the_users_line_with_the_padded_alternative() -> None:
    from autoshard.errors import ProfileError
    from autoshard.runtime import fit

    batch = (torch.randn(4, 6, 8), torch.tensor([6, 3, 5, 1]), torch.randint(0, 2, (4,)))
    with pytest.raises(ProfileError, match="pack_padded_sequence") as caught:
        fit(_Packed(), [batch] * 2, training_step=lambda model, b: nn.functional.cross_entropy(model(b[0], b[1]),
                                                                                            b[2]),
            max_steps=1, progress=False)
    assert f"{__file__}:" in caught.value.message  # the user's line: fit(module) knows no file of theirs
    assert "gather" in (caught.value.hint or "")
