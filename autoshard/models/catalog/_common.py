"""Pieces shared by the catalog's model families: entry assembly, example batches, losses, small layers.

Everything here builds tensors with torch ops on the current default device / tensor mode, so a catalog
model and its batch cost nothing under ``torch.device("meta")`` or ``FakeTensorMode``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from autoshard.errors import UsageError
from autoshard.models.source import Batch, LossFn, ModelSource

__all__ = [
    "RMSNorm",
    "catalog_source",
    "classification_loss",
    "image_batch",
    "init_normal_",
    "layered_source",
    "merge_heads",
    "random_state_restored",
    "reset_parameters_",
    "seq2seq_batch",
    "split_heads",
    "token_batch",
    "token_loss",
    "whole_parameters",
]


class _Layered(Protocol):
    """A frozen config dataclass with a ``num_layers`` field (the count of its repeated block)."""

    @property
    def num_layers(self) -> int: ...


ConfigT = TypeVar("ConfigT", bound=_Layered)


def catalog_source(
    name: str,
    *,
    build_fn: Callable[[], nn.Module],
    batch_fn: Callable[..., Batch],
    loss_fn: LossFn,
    metadata: Mapping[str, Any],
    default_seq_len: int | None = None,
    max_seq_len: int | None = None,
    num_layers: int | None = None,
    with_num_layers: Callable[[int], ModelSource] | None = None,
) -> ModelSource:
    """The :class:`ModelSource` of catalog entry ``name``.

    Args:
        name: the catalog name.
        build_fn: builds the module on the current default device / tensor mode.
        batch_fn: ``batch_fn(batch_size)`` or, for token models, ``batch_fn(batch_size, seq_len=N)``.
        loss_fn: ``loss_fn(logits, batch)`` returning the training loss.
        metadata: published figures, e.g. ``{"published_parameters": ..., "reference": ...}``.
        default_seq_len: the sequence length used when none is given; ``None`` for models without one.
        max_seq_len: the longest supported sequence (learned positions), if bounded.
        num_layers: the count of the repeated block, when the model has one homogeneous stack.
        with_num_layers: returns this entry with ``n`` repeated blocks.

    Returns:
        The entry, with ``kind="catalog"`` and ``origin="catalog:NAME"``.
    """
    return ModelSource(
        name=name,
        kind="catalog",
        origin=f"catalog:{name}",
        build_fn=build_fn,
        batch_fn=batch_fn,
        loss_fn=loss_fn,
        optimizer_fn=None,
        accepts_seq_len=default_seq_len is not None,
        default_seq_len=default_seq_len,
        max_seq_len=max_seq_len,
        num_layers=num_layers,
        with_num_layers=with_num_layers,
        metadata=dict(metadata),
    )


def layered_source(
    name: str,
    config: ConfigT,
    *,
    build: Callable[[ConfigT], nn.Module],
    batch_fn: Callable[..., Batch],
    loss_fn: LossFn,
    metadata: Mapping[str, Any],
    default_seq_len: int | None = None,
    max_seq_len: int | None = None,
) -> ModelSource:
    """A catalog entry for a model with one stack of ``config.num_layers`` identical blocks.

    Its ``with_num_layers(n)`` rebuilds the same entry from ``dataclasses.replace(config, num_layers=n)``.
    The rescaled entry drops ``published_parameters`` (the count no longer describes it) and records the
    catalog's own depth as ``metadata["catalog_num_layers"]``.

    Args:
        name: the catalog name.
        config: a frozen dataclass with a ``num_layers`` field.
        build: the model class (or any callable) building the module from ``config``.
        batch_fn: see :func:`catalog_source`.
        loss_fn: see :func:`catalog_source`.
        metadata: see :func:`catalog_source`.
        default_seq_len: see :func:`catalog_source`.
        max_seq_len: see :func:`catalog_source`.

    Returns:
        The entry.
    """

    def with_num_layers(n: int) -> ModelSource:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise UsageError(f"with_num_layers needs a positive number of layers, but got {n=}.")
        scaled = {k: v for k, v in metadata.items() if k != "published_parameters"}
        scaled.setdefault("catalog_num_layers", config.num_layers)
        return layered_source(
            name,
            dataclasses.replace(config, num_layers=n),  # type: ignore[type-var]
            build=build,
            batch_fn=batch_fn,
            loss_fn=loss_fn,
            metadata=scaled,
            default_seq_len=default_seq_len,
            max_seq_len=max_seq_len,
        )

    return catalog_source(
        name,
        build_fn=functools.partial(build, config),
        batch_fn=batch_fn,
        loss_fn=loss_fn,
        metadata=metadata,
        default_seq_len=default_seq_len,
        max_seq_len=max_seq_len,
        num_layers=config.num_layers,
        with_num_layers=with_num_layers,
    )


# --- example batches ------------------------------------------------------------------------------------


def _check_positive(**values: int) -> None:
    for key, value in values.items():
        if value < 1:
            raise UsageError(f"{key} must be at least 1, but got {key}={value}.")


def token_batch(batch_size: int, seq_len: int, *, vocab_size: int) -> dict[str, torch.Tensor]:
    """Random token ids and next-token labels, ``(batch_size, seq_len)`` each, on the default device.

    ``labels[i, t]`` is the target of position ``t`` (already shifted), so the loss needs no slicing.

    Args:
        batch_size: sequences per step.
        seq_len: tokens per sequence.
        vocab_size: ids are drawn from ``[0, vocab_size)``.

    Returns:
        ``{"input_ids": ..., "labels": ...}`` (int64).

    Raises:
        UsageError: ``batch_size`` or ``seq_len`` is below 1.

    Example:
        >>> token_batch(2, 8, vocab_size=100)["input_ids"].shape
        torch.Size([2, 8])
    """
    _check_positive(batch_size=batch_size, seq_len=seq_len)
    return {
        "input_ids": torch.randint(0, vocab_size, (batch_size, seq_len)),
        "labels": torch.randint(0, vocab_size, (batch_size, seq_len)),
    }


def seq2seq_batch(batch_size: int, seq_len: int, *, vocab_size: int) -> dict[str, torch.Tensor]:
    """Like :func:`token_batch`, plus ``decoder_input_ids``; encoder and decoder both get ``seq_len`` tokens.

    Raises:
        UsageError: ``batch_size`` or ``seq_len`` is below 1.
    """
    batch = token_batch(batch_size, seq_len, vocab_size=vocab_size)
    batch["decoder_input_ids"] = torch.randint(0, vocab_size, (batch_size, seq_len))
    return batch


def image_batch(batch_size: int, *, image_size: int, num_classes: int) -> dict[str, torch.Tensor]:
    """Random RGB images ``(batch_size, 3, image_size, image_size)`` and class labels ``(batch_size,)``.

    Raises:
        UsageError: ``batch_size`` is below 1.
    """
    _check_positive(batch_size=batch_size)
    return {
        "pixel_values": torch.randn(batch_size, 3, image_size, image_size),
        "labels": torch.randint(0, num_classes, (batch_size,)),
    }


# --- losses ---------------------------------------------------------------------------------------------


def token_loss(logits: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of ``(batch, seq, vocab)`` logits against ``batch["labels"]`` (``-100`` ignored)."""
    return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())


def classification_loss(logits: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of ``(batch, classes)`` logits against ``batch["labels"]``."""
    return F.cross_entropy(logits, batch["labels"])


# --- layers and helpers ---------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """Root-mean-square layer norm with a learned scale and no bias or mean subtraction.

    Used by T5 (``T5LayerNorm``) and Llama/Mistral. The statistic is taken in float32 and the result cast
    back to the input dtype before scaling, as both reference implementations do.

    Args:
        hidden_size: size of the normalised (last) dimension.
        eps: added to the mean square before the reciprocal square root.
    """

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set the scale to ones, in place (as ``nn.LayerNorm.reset_parameters`` does)."""
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` over its last dimension."""
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(batch, seq, heads * head_dim)`` → ``(batch, heads, seq, head_dim)``."""
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(batch, heads, seq, head_dim)`` → ``(batch, seq, heads * head_dim)``."""
    return x.transpose(1, 2).flatten(2)


@contextlib.contextmanager
def random_state_restored() -> Iterator[None]:
    """Put the random state of the CPU and of the default device back as it was on entry, on exit.

    A catalog model builds its layers inside this block and then calls its ``init_weights()``, which redraws
    the layers' default initialisation in the same order. The random stream is consumed once, exactly as by a
    constructor that initialises each layer as it builds it, so a seeded build gives the weights it always
    gave, and ``init_weights()`` after the same seed gives them too. The layers' first draw is discarded.
    """
    device = torch.get_default_device()
    if device.type in ("cpu", "meta"):
        fork = torch.random.fork_rng(devices=[], device_type="cpu")  # the CPU state is always restored
    else:
        index = device.index if device.index is not None else torch.get_device_module(device.type).current_device()
        fork = torch.random.fork_rng(devices=[index], device_type=device.type)
    with fork:
        yield


def reset_parameters_(module: nn.Module) -> None:
    """Call ``reset_parameters()`` on every submodule of ``module`` that has one, in registration order.

    For layers registered in the order they were built, this redraws torch's default initialisation with the
    same random calls in the same order as construction did. Norm layers go back to ones/zeros and batch norm
    also zeroes its running statistics. Every reset is in place, so it works on DTensor shards and after
    ``to_empty``.
    """
    for m in module.modules():
        reset = getattr(m, "reset_parameters", None)
        if callable(reset):
            with whole_parameters(m):
                reset()


def init_normal_(module: nn.Module, std: float) -> None:
    """Initialise every ``Linear``/``Embedding`` weight in ``module`` from N(0, std²) and zero the biases.

    The scheme of the Hugging Face GPT-2, BERT and Llama ports (``initializer_range`` in their configs).
    Norm layers keep their ones/zeros. Free under ``meta`` and fake tensors.
    """
    for m in module.modules():
        if not isinstance(m, (nn.Linear, nn.Embedding)):
            continue
        with whole_parameters(m):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)


@contextlib.contextmanager
def whole_parameters(*parts: nn.Module | torch.Tensor) -> Iterator[None]:
    """Make the parameters of ``parts`` (modules, recursively, or single parameters) whole for an in-place
    initialisation, when ``deepspeed.zero.Init`` has partitioned them; a no-op for anything else.

    Under ``zero.Init`` every submodule's parameters are partitioned when its constructor returns, so a root
    model's ``init_weights()`` meets empty tensors. Inside this block they are gathered; on exit rank 0's values
    are partitioned back to every rank (``deepspeed.zero.GatheredParameters(..., modifier_rank=0)``, the
    pattern DeepSpeed documents for initialising weights after ``zero.Init``). Every rank still runs the
    initialisation, so the ranks' random streams stay in step. Blocks must not nest over the same parameters
    (DeepSpeed 0.19.8 refuses that), so initialise one module at a time. Plain tensors and FSDP2's DTensor
    shards are initialised where they are.
    """
    params: list[torch.Tensor] = []
    for part in parts:
        params.extend(part.parameters() if isinstance(part, nn.Module) else [part])
    partitioned = [p for p in params if hasattr(p, "ds_id")]  # DeepSpeed's mark of a ZeRO-3 parameter
    if not partitioned:
        yield
        return
    import deepspeed  # already imported: only zero.Init makes parameters with a ds_id

    with deepspeed.zero.GatheredParameters(partitioned, modifier_rank=0):
        yield


def entry_metadata(reference: str, published_parameters: int | None, counted_module: str,
                   **extra: object) -> dict[str, object]:
    """A catalog entry's metadata: its reference, and — for the published (not tiny) models — the published
    parameter count and which module that count refers to."""
    metadata: dict[str, object] = {"reference": reference, **extra}
    if published_parameters is not None:
        metadata["published_parameters"] = published_parameters
        metadata["counted_module"] = counted_module
    return metadata
