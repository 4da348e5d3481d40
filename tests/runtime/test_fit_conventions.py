"""fit() on the training code people write (autoshard/models/step.py): ``(inputs, targets)`` batches with a plain
loss, Hugging Face dict batches (from a DataLoader or a list of samples), and a ``training_step`` hook — on two
gloo processes as a user's script runs them — and errors worded for the code the user gave."""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from autoshard.errors import UsageError, UserCodeError
from autoshard.models.step import positional_inputs, split, step_functions
from autoshard.runtime import fit

SCRIPT = Path(__file__).with_name("conventions_script.py")
REPO = Path(__file__).resolve().parents[2]


@functools.cache
def _run(case: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), case], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


@pytest.mark.parametrize("case", ["plain", "hf-loader", "hf-list", "hf-list-global", "training-step", "tensor",
                                  "weighted"])
def test_the_common_training_loops_train_on_two_processes(case: str) -> None:
    result = _run(case)
    losses = result["losses"]
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses)
    assert case == "weighted" or losses[-1] < losses[0], losses  # sampled with replacement: 6 steps are noise
    if case == "hf-list":
        assert any("single samples" in n for n in result["notes"]), result["notes"]
    if case == "hf-list-global":  # its 16 tokens were taken for a micro-batch and the global batch refused (probe)
        assert result["global_batch"] == 8
        assert any("single samples (read as batches" in n for n in result["notes"]), result["notes"]
    if case == "weighted":  # every rank loaded and collated every batch with no word of it (a migration probe)
        assert any(n.startswith("data: the DataLoader with a sampler of its own (WeightedRandomSampler) cannot be "
                                "split among the ranks") and "2× the loading work" in n for n in result["notes"]), \
            result["notes"]
    if case == "tensor":  # iterated, its rows were batches of one row, and the trace failed at a batch of [8]
        assert any(n.startswith("data is a tensor of shape [64, 8]") for n in result["notes"]), result["notes"]


def test_a_compiled_module_trains_as_the_module_it_wraps_and_says_so() -> None:
    """torch.compile's wrapper takes ``*args``: fed as is, ``(x, y)`` reached ``Sequential.forward`` whole."""
    compiled, plain = _run("compiled"), _run("plain")
    assert compiled["strategy"] == plain["strategy"]
    assert compiled["losses"] == pytest.approx(plain["losses"], rel=1e-6)
    assert any("torch.compile'd" in n and "uncompiled" in n for n in compiled["notes"]), compiled["notes"]


def test_without_consolidation_workers_hand_back_no_model_and_say_why() -> None:
    """The launching process's module never saw the training: it came back as ``result.model``, untrained."""
    result = _run("no-consolidate")
    assert result["model"] is False and _run("plain")["model"] is True
    assert any(n.startswith("consolidate=False: the trained weights stayed in the worker processes")
               for n in result["notes"]), result["notes"]


class _Two(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # takes the whole (x, y) batch
        return self.net(x)


def test_a_tuple_batch_splits_into_inputs_and_targets_only_when_forward_takes_fewer() -> None:
    x, y = torch.randn(4, 3), torch.randn(4, 1)
    seq = torch.nn.Sequential(torch.nn.Linear(3, 1))
    assert positional_inputs(seq) == 1 and positional_inputs(_Two()) == 2
    fns = step_functions(seq, loss_fn=F.mse_loss)
    out = fns.call(seq, (x, y))
    assert torch.equal(fns.loss(out, (x, y)), F.mse_loss(out, y))
    whole = step_functions(_Two(), loss_fn=lambda output, batch: F.mse_loss(output, batch[1]))
    assert whole.loss(whole.call(_Two(), (x, y)), (x, y)).ndim == 0
    assert split({"input_ids": x}, 1) is None and split(x, 1) is None


def test_inputs_and_targets_without_a_loss_is_refused_in_the_users_terms() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 1))
    batches = [(torch.randn(4, 3), torch.randn(4, 1))] * 2
    with pytest.raises(UsageError, match="the rest are targets, and without loss_fn") as info:
        fit(model, batches, max_steps=1, optimizer="sgd")
    assert "mse_loss" in (info.value.hint or "")


def test_a_training_step_replaces_forward_and_loss_in_one_process() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    seen: list[int] = []

    def step(m: torch.nn.Module, batch: Any) -> torch.Tensor:
        seen.append(len(batch))
        x, labels = batch
        return F.cross_entropy(m(x), labels)

    batches = [(torch.randn(4, 3), torch.randint(0, 2, (4,)))] * 4
    result = fit(model, batches, training_step=step, max_steps=2, optimizer="sgd")
    assert len(result.steps) == 2 and seen and all(n == 2 for n in seen)
    with pytest.raises(UsageError, match="loss_fn or training_step, not both"):
        fit(model, batches, training_step=step, loss_fn=F.mse_loss, max_steps=1)
    # a step returning a dict was told to return a tensor "from loss(output, batch)", which it has none of
    with pytest.raises(UserCodeError, match="is a dict, expected a scalar tensor") as info:
        fit(model, batches, training_step=lambda m, b: {"loss": step(m, b)}, max_steps=1)
    assert (info.value.hint or "").startswith("Return the loss as a 0-dim tensor from training_step(model, batch)")


def test_an_error_in_a_module_is_not_blamed_on_a_model_file() -> None:
    class Broken(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x.reshape(5, 7))

    with pytest.raises(UserCodeError) as info:
        fit(Broken(), [(torch.randn(4, 3), torch.randn(4, 1))] * 2, loss_fn=F.mse_loss, max_steps=1)
    text = f"{info.value.message} {info.value.hint}"
    assert "model file" not in text and "report it" not in text


class _LogitsOnly(nn.Module):
    """A model of one's own over tokenised rows: it takes the ids, returns logits; the labels are the loss's."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.out = nn.Embedding(32, 8), nn.Linear(8, 32)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.out(self.emb(input_ids))


def test_dictionary_keys_the_forward_does_not_take_reach_the_loss_only() -> None:
    """model(**batch) failed on a column the forward does not take ("unexpected keyword argument 'labels'"); the HF
    Trainer drops such columns. A forward with **kwargs still gets every key."""
    samples = [{"input_ids": torch.arange(8) % 32, "labels": torch.arange(8) % 32, "text": f"row {i}", "idx": i}
               for i in range(16)]

    def loss(output: torch.Tensor, batch: dict) -> torch.Tensor:
        return F.cross_entropy(output.flatten(0, 1), batch["labels"].flatten())

    result = fit(_LogitsOnly(), samples, loss_fn=loss, batch_size=4, max_steps=2, progress=False)
    assert len(result.steps) == 2
    assert any(n.startswith("The batches' labels, text, idx reach the loss only: _LogitsOnly.forward does not "
                            "take them") for n in result.notes), result.notes
    seen = {}

    class _Takes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 1)

        def forward(self, x: torch.Tensor, **kwargs: object) -> torch.Tensor:
            seen.update(kwargs)
            return self.lin(x)

    fit(_Takes(), [{"x": torch.ones(2, 2), "extra": torch.zeros(2)}], loss_fn=lambda o, b: o.sum(), max_steps=1,
        progress=False)
    assert "extra" in seen


class _GraphNet(nn.Module):
    """Message passing as GNN libraries batch it: node features [nodes, f], edge_index [2, edges]."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        messages = self.lin(x)[edge_index[0]]
        return torch.zeros_like(x).index_add(0, edge_index[1], messages)


def test_a_graph_batch_that_cannot_be_cut_into_samples_is_said_so() -> None:
    """edge_index [2, edges] was cut as if its 2 rows were samples: the trace failed with an IndexError blamed on
    the user's forward and a hint about their batch's first dimension (a GNN probe)."""
    torch.manual_seed(0)
    graph = {"x": torch.randn(12, 4), "edge_index": torch.randint(0, 12, (2, 30)), "y": torch.randn(12, 4)}
    with pytest.raises(UserCodeError) as info:
        fit(_GraphNet(), [graph] * 4, loss_fn=lambda out, b: F.mse_loss(out, b["y"]), max_steps=1, processes=1)
    assert "Its tensors disagree on their first dimension (x: 12, edge_index: 2, y: 12)" in info.value.hint
    assert "pass its plan.json as plan= to fit()" in info.value.hint
