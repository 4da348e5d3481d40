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
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from autoshard.errors import UsageError, UserCodeError
from autoshard.models.source import batch_token_length
from autoshard.models.step import StepFunctions
from autoshard.runtime.backends import Backend, to_device
from autoshard.runtime.data import DataFeed, as_samples
from autoshard.runtime.distributed import all_true, mean_over_ranks
from autoshard.runtime.loop import first_loss, longer_than_planned
from autoshard.runtime.result import EvalMetrics


class Evaluator:
    """Scores ``data`` with the backend's model; ``seq_len`` (the plan's) is what longer batches are warned of.

    Raises:
        UsageError: ``data`` gives each rank no whole batch.
    """

    def __init__(self, data: Any, *, backend: Backend, fns: StepFunctions, micro_batch_size: int, seed: int,
                 seq_len: int | None = None) -> None:
        self.backend, self.fns = backend, fns
        self.data, self.micro_batch_size, self.seed = data, micro_batch_size, seed
        self.seq_len = seq_len
        self.notes: list[str] = []
        """What checking the first batch decided (a list read as single samples), for ``fit()``'s notes."""
        self._warned_length = False
        self.feed = self._feed(data)
        if self.feed.batches_per_epoch == 0:
            raise UsageError(f"eval_data gives each of the {backend.ctx.world_size} rank(s) no whole batch of "
                             f"{micro_batch_size}: nothing would be scored.",
                             hint="Pass more eval_data, or a DataLoader with a smaller batch_size.")
        if self.feed.one_pass:
            raise UsageError("eval_data is a one-pass iterator (a generator): it would be empty after its first "
                             "evaluation.", hint="Pass a list, a Dataset or a DataLoader.")

    def _feed(self, data: Any) -> DataFeed:
        return DataFeed(data, micro_batch_size=self.micro_batch_size, ctx=self.backend.ctx, seed=self.seed,
                        scoring=True)

    def check(self) -> None:
        """Score this rank's first batch before training starts (collective: every rank calls it), so that a batch
        the model or the loss cannot take is refused now, naming ``eval_data``, not after the whole run. A list
        whose first element fails as a batch on every rank and runs as a batch of one sample is read as samples,
        batched at the plan's micro-batch, as ``data=`` reads one.

        Raises:
            UserCodeError: the model or the loss failed on it, or the loss is not a scalar (as for ``data``).
            UsageError: the first batch has no loss (or, on another rank, failed).
        """
        ctx = self.backend.ctx
        failure = self._first_failure(self.feed)
        if all_true(failure is None, ctx):
            return
        samples = as_samples(self.data)  # the same on every rank: each tries it, or none
        if samples is not None:
            feed = self._feed(samples)
            if all_true(feed.batches_per_epoch != 0 and self._first_failure(feed) is None, ctx):
                self.feed = feed
                self.notes.append(f"eval_data is a list whose elements are single samples (the first failed in "
                                  "the model as a batch, and a batch of them ran): it is batched like a Dataset, at "
                                  f"the plan's micro-batch {self.micro_batch_size}, as data= is.")
                return
        raise failure or UsageError("eval_data: its first batch failed on another rank (this rank's ran).")

    def _first_failure(self, feed: DataFeed) -> UserCodeError | UsageError | None:
        """What scoring ``feed``'s first batch on this rank raised, in ``eval_data``'s words, or ``None``."""
        backend = self.backend
        with self._scoring():
            batch = next(iter(feed.epoch(0)), None)
            if batch is None:  # a stream empty on this rank: nothing to check
                return None
            self._see(batch)
            try:
                first_loss(backend, self.fns, to_device(batch, backend.ctx.device), sync=False)
            except UserCodeError as e:
                return UserCodeError(f"eval_data: {e.message}", hint=e.hint, location=e.location)
            except UsageError as e:  # no loss in the output: an eval batch without the labels the data has
                return UsageError(f"eval_data: its first batch: {e.message}", hint=e.hint)
        return None

    def __call__(self, step: int) -> EvalMetrics:
        """The loss at ``step`` (collective: every rank calls it)."""
        backend, ctx = self.backend, self.backend.ctx
        sums = torch.zeros(2, dtype=torch.float64)  # loss × samples, samples
        count = 0
        with self._scoring():
            for batch in self._batches():
                self._see(batch)
                batch = to_device(batch, ctx.device)
                loss = self.fns.loss(backend.forward(batch, sync=False, call=self.fns.call), batch)
                size = _samples(batch)
                sums += torch.stack([loss.detach().double().cpu() * size, torch.tensor(float(size))])
                count += 1
        total, samples = mean_over_ranks(sums, ctx)  # means over the ranks: their ratio is the ratio of the sums
        return EvalMetrics(step=step, loss=total / samples if samples else float("nan"),
                           batches=count * ctx.world_size)

    def _batches(self) -> Iterator[Any]:
        """This rank's batches; a stream's (its length unknown, each rank's own share maybe of another length) end
        on every rank when any rank's does, so that every rank runs as many forwards."""
        ctx = self.backend.ctx
        batches = self.feed.epoch(0)
        if self.feed.batches_per_epoch is not None or ctx.world_size == 1:
            yield from batches
            return
        end = object()
        while all_true((batch := next(batches, end)) is not end, ctx):
            yield batch

    def _see(self, batch: Any) -> None:
        """Warn once (rank 0) of a batch longer than the plan's ``seq_len``, as training does."""
        if self._warned_length or self.seq_len is None:
            return
        length = batch_token_length(self.fns.fed(batch))
        if length is not None and length > self.seq_len:
            self._warned_length = True
            if self.backend.ctx.is_main:
                warnings.warn(longer_than_planned("eval_data", length, self.seq_len), stacklevel=3)

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
