"""``python data_streams_script.py LOG_DIR CASE...``: fit() on two CPU processes over data shared out among the ranks
in the ways people write it, for ``test_fit_data_streams.py``. The model writes the sample ids of every batch it
gets to ``LOG_DIR/CASE_r<rank>.jsonl``; the launching process prints one line ``RESULT {...}`` per case (its
steps' epochs, notes and scorings, or the error it raised).

* ``split``: an ``IterableDataset`` that yields only its rank's and loader worker's share (``i % (ranks × workers)``),
  as torch DDP and Lightning users write one, in a ``DataLoader(batch_size=4, num_workers=2)``, two epochs: rank 0's
  stream holds 8 batches (two of one sample), rank 1's 6.
* ``whole``: an ``IterableDataset`` that yields all 20 samples on every rank, ``DataLoader(batch_size=4)``.
* ``premade``: ``DataLoader(dataset, batch_size=None, shuffle=True)`` over 10 ready-made batches of 4 token
  sequences, each batch padded to its own length.
* ``eval-samples``: training on a ``DataLoader``, ``eval_data`` a list of 9 single-sample dicts.
* ``user-sampler``: a ``DataLoader`` over 16 samples with the user's own ``DistributedSampler`` (built for rank 0
  of 2, as a launching process that is no rank can only build it), two epochs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, get_worker_info

import autoshard

VOCAB = 64


def _record(kind: str, ids: torch.Tensor, shape: list[int], training: bool) -> None:
    if ids.device.type == "meta" or type(ids) is not torch.Tensor:  # planning's fake tensors
        return
    log, case = Path(sys.argv[1]), os.environ["DATA_STREAMS_CASE"]
    with open(log / f"{case}_r{os.environ.get('RANK', 'L')}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"mode": "train" if training else "eval", "ids": ids.long().tolist(), "shape": shape,
                            "kind": kind}) + "\n")


class Vectors(nn.Module):
    """``forward(x)``: ``x[:, 0]`` holds each sample's id."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _record("vec", x[:, 0].round(), list(x.shape), self.training)
        return self.lin(x)


class Tokens(nn.Module):
    """``forward(input_ids, labels)`` in Hugging Face's way; ``input_ids[:, 0]`` holds each sample's id."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.head = nn.Embedding(VOCAB, 8), nn.Linear(8, VOCAB)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        _record("tok", input_ids[:, 0], list(input_ids.shape), self.training)
        logits = self.head(self.emb(input_ids))
        return {"loss": F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)}


def _vector(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(8, generator=torch.Generator().manual_seed(i))
    x[0] = i
    return x, x[1:2].clone()


class SplitByRank(IterableDataset):
    """50 samples, each rank and loader worker yielding only its own: ``i % (ranks × workers)``."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        rank, ranks = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return (_vector(i) for i in range(50) if i % (ranks * workers) == rank * workers + worker)


class Whole(IterableDataset):
    """20 samples, all of them on every rank."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return (_vector(i) for i in range(20))


def _sequence(i: int, length: int = 8) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, VOCAB, (length,), generator=torch.Generator().manual_seed(i))
    ids[0] = i
    return {"input_ids": ids, "labels": ids.clone()}


class Batches(Dataset):
    """10 ready-made batches of 4 sequences (ids 4k to 4k + 3), each padded to its own length, 5 to 14 tokens."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, k: int) -> dict[str, torch.Tensor]:
        length = 5 + k
        ids = torch.stack([torch.randint(1, VOCAB, (length,), generator=torch.Generator().manual_seed(4 * k + j))
                           for j in range(4)])
        ids[:, 0] = torch.arange(4 * k, 4 * k + 4)
        return {"input_ids": ids, "labels": ids.clone()}


def _case(case: str) -> dict[str, Any]:
    torch.manual_seed(0)
    common: dict[str, Any] = {"processes": 2, "optimizer": "sgd", "progress": False}
    if case == "split":
        return {**common, "model": Vectors(), "data": DataLoader(SplitByRank(), batch_size=4, num_workers=2),
                "loss_fn": F.mse_loss, "epochs": 2}
    if case == "whole":
        return {**common, "model": Vectors(), "data": DataLoader(Whole(), batch_size=4), "loss_fn": F.mse_loss}
    if case == "premade":
        return {**common, "model": Tokens(), "data": DataLoader(Batches(), batch_size=None, shuffle=True)}
    if case == "eval-samples":
        train = [_sequence(i) for i in range(16)]
        return {**common, "model": Tokens(), "data": DataLoader(train, batch_size=2),
                "eval_data": [_sequence(40 + i) for i in range(9)]}
    if case == "user-sampler":
        samples = [_vector(i) for i in range(16)]
        sampler = DistributedSampler(samples, num_replicas=2, rank=0, shuffle=True, seed=3)
        return {**common, "model": Vectors(), "data": DataLoader(samples, batch_size=2, sampler=sampler),
                "loss_fn": F.mse_loss, "epochs": 2}
    raise SystemExit(f"unknown case {case}")


def main(cases: list[str]) -> None:
    for case in cases:
        os.environ["DATA_STREAMS_CASE"] = case  # the workers run this script again, and set it as they go
        kwargs = _case(case)
        try:
            result = autoshard.fit(kwargs.pop("model"), **kwargs)
        except autoshard.AutoshardError as e:
            if not autoshard.is_worker():
                print("RESULT " + json.dumps({"case": case, "error": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        if not autoshard.is_worker():
            print("RESULT " + json.dumps({"case": case, "epochs": [s.epoch for s in result.steps],
                                          "notes": list(result.notes), "evals": [e.to_dict() for e in result.evals],
                                          "micro_batch": result.plan.micro_batch_size}), flush=True)


if __name__ == "__main__":
    main(sys.argv[2:])
