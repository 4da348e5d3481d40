"""Training scripts as people write them, for ``test_fit_conventions.py``: ``python conventions_script.py CASE``.

Each case builds a small model and data the way its convention's users do, calls ``autoshard.fit`` on two CPU
processes, and prints one line ``RESULT {"strategy": ..., "losses": [...], "notes": [...]}`` from the launching
process.

* ``plain``: a ``DataLoader(TensorDataset(X, Y))``, an ``nn.Sequential`` and ``loss_fn=F.mse_loss``.
* ``hf-loader``: a ``LlamaForCausalLM`` from a small ``LlamaConfig``, a ``DataLoader`` over a list of dict samples.
* ``hf-list``: the same list of dict samples passed as ``data`` directly.
* ``training-step``: a ``training_step(model, batch) -> loss`` hook.
* ``compiled``: ``plain`` with the model given as ``torch.compile(model)``.
* ``no-consolidate``: ``plain`` with ``consolidate=False``.
* ``tensor``: one tensor of inputs passed as ``data`` (its rows the samples), an autoencoder's loss.
* ``weighted``: ``plain`` with a ``WeightedRandomSampler`` in its ``DataLoader``.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import autoshard


def _plain() -> dict:
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = x @ torch.randn(8, 1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return {"model": model, "data": DataLoader(TensorDataset(x, y), batch_size=8), "loss_fn": F.mse_loss}


def _llama_samples() -> tuple[torch.nn.Module, list[dict[str, torch.Tensor]]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    pattern = torch.arange(16) % 7  # a repeating sequence the model can learn
    samples = [{"input_ids": pattern.clone(), "labels": pattern.clone()} for _ in range(32)]
    return model, samples


def _training_step() -> dict:
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = (x.sum(dim=1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

    def training_step(m: torch.nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
        inputs, labels = batch
        return F.cross_entropy(m(inputs), labels)

    return {"model": model, "data": DataLoader(TensorDataset(x, y), batch_size=8), "training_step": training_step}


def _tensor() -> dict:
    torch.manual_seed(0)
    x = torch.randn(1, 8).repeat(64, 1) + 0.01 * torch.randn(64, 8)  # one pattern, learnt in a few steps
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 8))
    return {"model": model, "data": x, "loss_fn": lambda out, batch: F.mse_loss(out, batch), "batch_size": 8}


def main(case: str) -> None:
    if case in ("plain", "compiled", "no-consolidate"):
        kwargs = _plain()
        if case == "compiled":
            kwargs["model"] = torch.compile(kwargs["model"])
        if case == "no-consolidate":
            kwargs["consolidate"] = False
    elif case in ("hf-loader", "hf-list", "hf-list-global"):
        model, samples = _llama_samples()
        kwargs = {"model": model, "data": DataLoader(samples, batch_size=4) if case == "hf-loader" else samples}
        if case == "hf-list":
            kwargs["batch_size"] = 4
        if case == "hf-list-global":  # a sample's 16 tokens are no micro-batch: 8 samples a step is 4 per rank
            kwargs["global_batch_size"] = 8
    elif case == "training-step":
        kwargs = _training_step()
    elif case == "weighted":  # a sampler of its own: each rank reads the loader whole and keeps its share
        kwargs = _plain()
        dataset = kwargs["data"].dataset
        sampler = torch.utils.data.WeightedRandomSampler(torch.ones(len(dataset)), len(dataset),
                                                         generator=torch.Generator().manual_seed(0))
        kwargs["data"] = DataLoader(dataset, batch_size=8, sampler=sampler)
    elif case == "tensor":
        kwargs = _tensor()
    else:
        raise SystemExit(f"unknown case {case!r}")
    model = kwargs.pop("model")
    data = kwargs.pop("data")
    result = autoshard.fit(model, data, processes=2, max_steps=6, optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2),
                           **kwargs)
    if not autoshard.is_worker():
        print("RESULT " + json.dumps({"strategy": result.plan.strategy, "losses": result.losses,
                                      "global_batch": result.plan.micro_batch_size
                                      * result.plan.gradient_accumulation * 2,
                                      "notes": list(result.notes), "model": result.model is not None}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
