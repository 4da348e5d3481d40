"""Held-out loss during ``fit()``: ``eval_data`` scored every ``eval_every`` optimizer steps and at the end.

Each rank scores its share of the data (sharded as training data is: a ``DistributedSampler`` over a dataset, or
the batches of an iterable dealt out in turn, the last incomplete round left out), so every rank runs the same
number of forwards — FSDP2 and ZeRO-3 gather parameters in each, a collective every rank must join. The forward
and the loss are training's (:mod:`autoshard.models.step`), under ``torch.no_grad()``, the backend's autocast and
the module in eval mode (dropout off, batch norm on its running statistics); the loss reported is the mean over
every sample scored (each batch's loss weighted by its samples). A dataset is sharded in order and whole: its
last batch may be short, and the ``DistributedSampler`` repeats at most ``ranks - 1`` samples so that every rank
has as many; an iterable's batches are dealt out as in training, the last incomplete round left out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from autoshard.errors import UsageError, UserCodeError
from autoshard.models.step import StepFunctions
from autoshard.runtime.backends import Backend, to_device
from autoshard.runtime.data import DataFeed
from autoshard.runtime.distributed import mean_over_ranks
from autoshard.runtime.loop import first_loss
from autoshard.runtime.result import EvalMetrics


class Evaluator:
    """Scores ``data`` with the backend's model.

    Raises:
        UsageError: ``data`` gives each rank no whole batch.
    """

    def __init__(self, data: Any, *, backend: Backend, fns: StepFunctions, micro_batch_size: int, seed: int) -> None:
        self.backend, self.fns = backend, fns
        self.feed = DataFeed(data, micro_batch_size=micro_batch_size, ctx=backend.ctx, seed=seed, scoring=True)
        if self.feed.batches_per_epoch == 0:
            raise UsageError(f"eval_data gives each of the {backend.ctx.world_size} rank(s) no whole batch of "
                             f"{micro_batch_size}: nothing would be scored.",
                             hint="Pass more eval_data, or a DataLoader with a smaller batch_size.")
        if self.feed.one_pass:
            raise UsageError("eval_data is a one-pass iterator (a generator): it would be empty after its first "
                             "evaluation.", hint="Pass a list, a Dataset or a DataLoader.")

    def check(self) -> None:
        """Score this rank's first batch before training starts (collective: every rank calls it), so that a batch
        the model or the loss cannot take is refused now, naming ``eval_data``, not after the whole run.

        Raises:
            UserCodeError: the model or the loss failed on it, or the loss is not a scalar (as for ``data``).
        """
        backend = self.backend
        with self._scoring():
            batch = to_device(next(iter(self.feed.epoch(0))), backend.ctx.device)
            try:
                first_loss(backend, self.fns, batch, sync=False)
            except UserCodeError as e:
                raise UserCodeError(f"eval_data: {e.message}", hint=e.hint) from e
            except UsageError as e:  # no loss in the output: an eval batch without the labels the data has
                raise UsageError(f"eval_data: its first batch: {e.message}", hint=e.hint) from e

    def __call__(self, step: int) -> EvalMetrics:
        """The loss at ``step`` (collective: every rank calls it)."""
        backend, ctx = self.backend, self.backend.ctx
        sums = torch.zeros(2, dtype=torch.float64)  # loss × samples, samples
        count = 0
        with self._scoring():
            for batch in self.feed.epoch(0):
                batch = to_device(batch, ctx.device)
                loss = self.fns.loss(backend.forward(batch, sync=False, call=self.fns.call), batch)
                size = _samples(batch)
                sums += torch.stack([loss.detach().double().cpu() * size, torch.tensor(float(size))])
                count += 1
        total, samples = mean_over_ranks(sums, ctx)  # means over the ranks: their ratio is the ratio of the sums
        return EvalMetrics(step=step, loss=total / samples if samples else float("nan"),
                           batches=count * ctx.world_size)


    @contextlib.contextmanager
    def _scoring(self) -> Iterator[None]:
        """The module in eval mode (each submodule's mode restored after), no gradients, the backend's autocast,
        and torch's generators as they were after: a DataLoader's iterator draws its seed from them, and a
        resumed run, scoring before its first step where the uninterrupted run scored before step 1, drew
        dropout's masks from another state from there on (a migration probe)."""
        module = self.backend.module
        modes = {m: m.training for m in module.modules()}
        device = self.backend.ctx.device
        module.eval()
        try:
            with (torch.random.fork_rng(devices=[device] if device.type == "cuda" else []),
                  torch.no_grad(), self.backend.autocast()):
                yield
        finally:
            for m, training in modes.items():
                m.training = training
            self.backend.evaluated()


def _samples(batch: Any) -> int:
    """A batch's samples: its first tensor's first dimension (1 where it has none), each batch's loss being a mean
    over its samples, so that a short last batch weighs what it holds."""
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves(batch):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return int(leaf.shape[0])
    return 1
