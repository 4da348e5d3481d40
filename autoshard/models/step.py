"""How a batch reaches the model and the loss: the three conventions people write.

1. **A training step of your own**, ``training_step(model, batch) -> loss``: autoshard calls it with the model as
   the backend wraps it, and uses what it returns as the loss. Use it for anything the other two do not cover.
2. **Dictionary batches** (Hugging Face): ``model(**batch)``. The loss is ``loss_fn(output, batch)`` when one is
   given, else the output's ``loss``. A forward that takes one argument and none of the dictionary's keys by name
   (``forward(self, batch)``, common in vision code) gets the dictionary itself: ``model(batch)``.
3. **Tuple batches**, ``(inputs..., targets...)``, as in a plain PyTorch loop:
   - When ``forward`` takes fewer positional arguments than the batch has elements, the first ones are the
     inputs and the rest the targets: ``output = model(x)``, ``loss = loss_fn(output, y)``, so
     ``loss_fn=torch.nn.functional.mse_loss`` works as written.
   - When ``forward`` takes every element (or ``*args``), the model gets them all and the loss gets the whole
     batch: ``loss_fn(model(*batch), batch)``.

   A dictionary's keys that ``forward`` does not take (it has no ``**kwargs``) are left out of its call and reach
   the loss only: a dataset's ``text`` or ``idx`` column, or ``labels`` for a model that returns logits.

A single tensor goes to ``model(batch)``; the loss gets ``loss_fn(output, batch)``. Without ``loss_fn``, the
loss is the one the model returned (:func:`output_loss`): ``output.loss``, the output itself when it is a scalar, or
the first element of a tuple when that is a scalar (Hugging Face's ``return_dict=False``). Anything else is refused:
a stand-in such as the mean of the logits would train, and its loss fall, towards nothing the user wants. A tuple
batch split into inputs and targets needs ``loss_fn``: a loss that ignored the targets would train on nothing.

:func:`step_functions` turns the choice into two functions over the whole batch: ``call(model, batch)`` and
``loss(output, batch)``. Planning traces them, and ``fit()`` trains with them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from autoshard.errors import UsageError
from autoshard.models.source import Batch, CallFn, LossFn, batch_rows, call_model

TrainingStep = Callable[[nn.Module, Batch], torch.Tensor]


@dataclass(frozen=True, slots=True)
class StepFunctions:
    """The forward and the loss of one micro-batch, each over the whole batch."""

    call: CallFn
    loss: LossFn
    users_loss: bool = False
    """``loss`` runs the user's ``loss_fn`` (an error in it is theirs to look at, not a loss to pass)."""

    def fed(self, batch: Batch) -> Batch:
        """The part of ``batch`` the forward gets: a tuple's inputs without its targets, a dictionary's keys the
        forward takes; the whole batch where the call is not autoshard's convention (``training_step``, a model
        source's own ``call``). What tokens per second counts: a target's integer classes are not tokens.

        Example:
            >>> fns = step_functions(torch.nn.Linear(2, 2), loss_fn=lambda out, y: out.sum())
            >>> x, y = torch.zeros(4, 2), torch.zeros(4, 6, dtype=torch.long)
            >>> len(fns.fed((x, y))), sorted(fns.fed({"input": x, "labels": y}))
            (1, ['input'])
        """
        call = self.call
        if not isinstance(call, _Call):
            return batch
        if isinstance(batch, Mapping) and call.keywords is not None and not whole_mapping(batch, call.inputs,
                                                                                          call.keywords):
            return {k: v for k, v in batch.items() if k in call.keywords}
        parts = split(batch, call.inputs)
        return batch if parts is None else parts[0]


def positional_inputs(module: nn.Module) -> int | None:
    """How many positional arguments ``module.forward`` requires (``None``: it takes ``*args``, or its signature
    cannot be read).

    Example:
        >>> positional_inputs(torch.nn.Linear(2, 2)), positional_inputs(torch.nn.Sequential())
        (1, 1)
    """
    params = _forward_parameters(module)
    if params is None or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return None
    return sum(1 for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                               inspect.Parameter.POSITIONAL_OR_KEYWORD)
               and p.default is inspect.Parameter.empty)


def _forward_parameters(module: nn.Module) -> list[inspect.Parameter] | None:
    """The parameters of ``module.forward`` (``None``: its signature cannot be read)."""
    try:
        return list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return None


def optional_positionals(module: nn.Module) -> list[str]:
    """The positional arguments of ``module.forward`` that have a default, in order: a tuple batch's elements past
    the required ones do not reach them (:func:`split` sends them to the loss), which a forward that asserts its
    ``targets`` in training (torchvision's detection models) does not expect.

    Example:
        >>> class Detector(torch.nn.Module):
        ...     def forward(self, images, targets=None): ...
        >>> optional_positionals(Detector()), optional_positionals(torch.nn.Linear(2, 2))
        (['targets'], [])
    """
    params = _forward_parameters(module) or []
    return [p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                 inspect.Parameter.POSITIONAL_OR_KEYWORD)
            and p.default is not inspect.Parameter.empty]


def defaulted_bindings(module: nn.Module, batch: Batch) -> list[str]:
    """The parameters of ``module.forward`` with a default that a tuple batch fed whole (``model(*batch)``: the
    forward requires no more of its arguments than the batch has) fills by position, in order. A Hugging Face
    forward requires none, so ``(input_ids, labels)`` arrives as ``input_ids`` and ``attention_mask``.

    Example:
        >>> class HF(torch.nn.Module):
        ...     def forward(self, input_ids=None, attention_mask=None, labels=None): ...
        >>> ids = torch.zeros(2, 4, dtype=torch.long)
        >>> defaulted_bindings(HF(), (ids, ids)), defaulted_bindings(torch.nn.Linear(2, 2), (ids, ids))
        (['input_ids', 'attention_mask'], [])
    """
    if not isinstance(batch, (tuple, list)) or split(batch, positional_inputs(module)) is not None:
        return []
    params = [p for p in _forward_parameters(module) or [] if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                                        inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    return [p.name for p in params[:len(batch)] if p.default is not inspect.Parameter.empty]


def keyword_inputs(module: nn.Module) -> frozenset[str] | None:
    """The argument names ``module.forward`` takes by keyword (``None``: it takes ``**kwargs``, or its signature
    cannot be read).

    Example:
        >>> sorted(keyword_inputs(torch.nn.Linear(2, 2)))
        ['input']
    """
    params = _forward_parameters(module)
    if params is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                          inspect.Parameter.KEYWORD_ONLY))


def unused_keys(module: nn.Module, batch: Batch) -> list[str]:
    """The keys of a dictionary batch that ``module.forward`` does not take: they reach the loss only.

    Example:
        >>> unused_keys(torch.nn.Linear(2, 2), {"input": 1, "labels": 2, "text": "a"})
        ['labels', 'text']
    """
    accepted = keyword_inputs(module)
    if not isinstance(batch, Mapping) or accepted is None:
        return []
    return [k for k in batch if k not in accepted]


def step_functions(module: nn.Module, *, loss_fn: LossFn | None = None,
                   training_step: TrainingStep | None = None) -> StepFunctions:
    """The forward and loss for batches of ``module`` (see the module docs for the rules).

    ``module`` is the user's own module: the one whose ``forward`` says how many inputs it takes. The returned
    ``call`` is applied to whatever wraps it (DDP, FSDP2, a DeepSpeed engine).

    Raises:
        UsageError: both ``loss_fn`` and ``training_step`` are given.
    """
    if training_step is not None:
        if loss_fn is not None:
            raise UsageError("pass loss_fn or training_step, not both: training_step returns the loss itself.")
        return StepFunctions(call=training_step, loss=_returned_loss)
    inputs = positional_inputs(module)
    return StepFunctions(call=_Call(inputs, keyword_inputs(module)), loss=_Loss(inputs, loss_fn),
                         users_loss=loss_fn is not None)


def whole_mapping(batch: Batch, inputs: int | None, keywords: frozenset[str] | None) -> bool:
    """Whether a dictionary batch goes to the forward whole, ``model(batch)``: the forward requires one argument
    and takes none of the dictionary's keys by name.

    Example:
        >>> whole_mapping({"image": 1, "label": 2}, 1, frozenset({"batch"})), whole_mapping({"x": 1}, 1, None)
        (True, False)
    """
    return (isinstance(batch, Mapping) and inputs == 1 and keywords is not None and bool(batch)
            and not keywords.intersection(batch))


def split(batch: Batch, inputs: int | None) -> tuple[tuple[Any, ...], Any] | None:
    """``(inputs, targets)`` of a tuple batch with more elements than ``forward`` takes, else ``None``.

    Example:
        >>> split((1, 2), 1), split((1, 2, 3), 1), split((1, 2), 2), split({"a": 1}, 1)
        (((1,), 2), ((1,), (2, 3)), None, None)
    """
    if not isinstance(batch, (tuple, list)) or inputs is None or not 1 <= inputs < len(batch):
        return None
    rest = tuple(batch[inputs:])
    return tuple(batch[:inputs]), rest[0] if len(rest) == 1 else rest


@dataclass(frozen=True, slots=True)
class _Call:
    inputs: int | None
    keywords: frozenset[str] | None = None
    """What the forward takes by keyword: a dictionary batch's other keys (a dataset's ``text`` or ``idx`` column,
    labels the forward does not take) reach the loss only, as the HF Trainer drops unused columns."""

    def __call__(self, model: nn.Module, batch: Batch) -> Any:
        if whole_mapping(batch, self.inputs, self.keywords):
            return model(batch)
        if isinstance(batch, Mapping) and self.keywords is not None:
            return call_model(model, {k: v for k, v in batch.items() if k in self.keywords})
        parts = split(batch, self.inputs)
        return call_model(model, batch if parts is None else parts[0])


@dataclass(frozen=True, slots=True)
class _Loss:
    inputs: int | None
    loss_fn: LossFn | None

    def __call__(self, output: Any, batch: Batch) -> torch.Tensor:
        parts = split(batch, self.inputs)
        if parts is None:
            return output_loss(output, batch) if self.loss_fn is None else self.loss_fn(output, batch)
        if self.loss_fn is None:
            raise UsageError(
                f"each batch holds {len(batch)} tensors and the model's forward requires {self.inputs} positional "
                f"argument{'s' * (self.inputs != 1)} (one with a default is not fed from a tuple): the rest are "
                "targets, and without loss_fn nothing would compare the output with them.",
                hint="Pass loss_fn=(output, targets) -> scalar, e.g. loss_fn=torch.nn.functional.mse_loss, or "
                     "training_step=(model, batch) -> loss.")
        return self.loss_fn(output, parts[1])


def output_loss(output: Any, batch: Batch) -> torch.Tensor:
    """The loss the model returned, for a forward with no ``loss_fn``: ``output.loss`` or ``output["loss"]``
    (Hugging Face), the output itself when it is a scalar, or the first element of a tuple or list output when that
    is a scalar (Hugging Face's ``return_dict=False`` puts the loss first), else its only scalar (nanoGPT returns
    ``(logits, loss)``).

    Example:
        >>> output_loss((torch.tensor(0.5), torch.zeros(2, 3)), {}).item()
        0.5
        >>> output_loss((torch.zeros(2, 3), torch.tensor(0.25)), {}).item()
        0.25

    Raises:
        UsageError: the output holds no loss: what it is, and how to give one.
    """
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if loss is None:
        first = output[0] if isinstance(output, (tuple, list)) and output else output
        loss = first if _scalar(first) else None
    if loss is None and isinstance(output, (tuple, list)):  # nanoGPT's (logits, loss): its one scalar
        scalars = [x for x in output if _scalar(x)]
        loss = scalars[0] if len(scalars) == 1 else None
    if isinstance(loss, torch.Tensor):
        return loss
    contrastive = hasattr(output, "logits_per_image")  # CLIP, SigLIP: their loss is asked for by return_loss=True
    wanted = "`return_loss=True`" if contrastive else "`labels`"
    labels = (f" (a Hugging Face model computes one when the batch has {wanted})"
              if hasattr(output, "to_tuple") and isinstance(batch, Mapping)
              and ("return_loss" if contrastive else "labels") not in batch else "")
    shape = _shape_of(output, batch_rows(batch))
    raise UsageError(f"the model's output is {shape}, with no loss{labels}: fit() needs one to train on.",
                     hint="Pass loss_fn=(output, batch) -> scalar, or training_step=(model, batch) -> loss.")


def _scalar(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() == 0 and value.is_floating_point()


def _shape_of(output: Any, rows: int | None = None) -> str:
    """What a model returned, in a few words: ``"a tensor of shape [batch, 2]"`` (a first dimension of ``rows``, the
    batch's samples, is named: the batch traced first may be a slice of the user's), ``"SequenceClassifierOutput
    with logits"``, ``"a tuple of 2 whose first element is a tensor of shape [batch, 2]"``.

    Example:
        >>> _shape_of(torch.zeros(1, 10), 1), _shape_of(torch.zeros(3, 10), 1)
        ('a tensor of shape [batch, 10]', 'a tensor of shape [3, 10]')
    """
    if isinstance(output, torch.Tensor):
        dims = [str(d) for d in output.shape]
        if dims and rows is not None and output.shape[0] == rows:
            dims[0] = "batch"
        return f"a tensor of shape [{', '.join(dims)}]"
    if isinstance(output, Mapping):
        keys = [str(k) for k, v in output.items() if v is not None]
        return f"{type(output).__name__} with {', '.join(keys) if keys else 'nothing in it'}"
    if isinstance(output, (tuple, list)):
        first = f" whose first element is {_shape_of(output[0], rows)}" if output else ""
        return f"a {type(output).__name__} of {len(output)}{first}"
    return f"a {type(output).__name__}"


@dataclass(frozen=True, slots=True)
class FileCall:
    """How a model file's batch reaches its model, as a module's does (:class:`_Call`): ``model(*batch[:k])`` when
    the forward takes ``k`` positional arguments and the tuple has more elements (the rest are targets, which the
    file's ``loss(output, batch)`` reads from the whole batch), ``model(batch)`` for a dictionary its forward takes
    whole (:func:`whole_mapping`), a dictionary's other keys the forward does not take left to the loss (a model
    file's ``y`` reached ``forward`` and failed there, where a module passed to ``fit()`` had it dropped), else
    :func:`call_model`. The forward asked is the user's module's, under whatever
    wraps it (DDP's and DeepSpeed's ``forward(*inputs, **kwargs)`` pass everything on to ``.module``)."""

    def __call__(self, model: nn.Module, batch: Batch) -> Any:
        user = _user_module(model)
        return _Call(positional_inputs(user), keyword_inputs(user))(model, batch)


def _user_module(model: nn.Module) -> nn.Module:
    """The module under DDP / a DeepSpeed engine: wrappers whose ``forward`` takes ``*inputs`` and who hold the
    user's module as ``.module`` (a module of the user's own with a ``.module`` and a forward of its own is not
    unwrapped)."""
    inner = getattr(model, "module", None)
    while positional_inputs(model) is None and isinstance(inner, nn.Module):
        model, inner = inner, getattr(inner, "module", None)
    return model


def _returned_loss(output: Any, batch: Batch) -> torch.Tensor:
    """``training_step`` returned the loss: it is the output."""
    return output


def describe(module: nn.Module, batch: Batch, *, loss_fn: LossFn | None = None,
             training_step: TrainingStep | None = None) -> str:
    """One sentence on how ``batch`` is fed: for error messages and notes."""
    if training_step is not None:
        return "training_step(model, batch) returns the loss"
    if whole_mapping(batch, positional_inputs(module), keyword_inputs(module)):
        return "model(batch)" + (", loss_fn(output, batch)" if loss_fn else ", output.loss")
    if isinstance(batch, Mapping):
        return "model(**batch)" + (", loss_fn(output, batch)" if loss_fn else ", output.loss")
    parts = split(batch, positional_inputs(module))
    if parts is not None:
        fed = len(parts[0])
        unfed = optional_positionals(module)[:len(batch) - fed]
        skipped = (f" (not its {', '.join(unfed)}, which has a default: give it none, or pass training_step=, to "
                   "feed it the rest)") if unfed else ""
        return f"model(*batch[:{fed}]){skipped}, loss_fn(output, the rest of the batch)"
    if isinstance(batch, (tuple, list)):
        nested = (" (its first element is itself a tuple: for ((inputs...), targets) batches, pass training_step="
                  "lambda model, batch: loss(model(*batch[0]), batch[1]))"
                  if batch and isinstance(batch[0], (tuple, list)) else "")
        return "model(*batch)" + (", loss_fn(output, batch)" if loss_fn else "") + nested
    return "model(batch)" + (", loss_fn(output, batch)" if loss_fn else "")
