"""The one shape every model source is turned into: :class:`ModelSource`.

A model source is anything a user can point autoshard at — a ``model.py`` following the convention in
``docs/models.md``, a Hugging Face ``config.json``, or a catalog name. Each loader turns it into a
:class:`ModelSource`: functions that build the module and one training batch, plus an optional loss and
optimizer. The source never allocates by itself; the caller decides where tensors live (the profiler
builds under ``FakeTensorMode``, ``fit`` on a real device).
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from autoshard.errors import UsageError, UserCodeError

Batch = Any
"""One step's inputs: a tensor (``model(batch)``), a tuple/list (``model(*batch)``) or a mapping
(``model(**batch)``); with a training step of the user's own, also a dataclass of tensors."""

LossFn = Callable[[Any, Batch], torch.Tensor]
CallFn = Callable[[nn.Module, Batch], Any]
"""``call(model, batch) -> output``: how a batch reaches the (possibly wrapped) model."""
OptimizerFn = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSource:
    """A loaded model source: how to build the module, its batch, loss and optimizer."""

    name: str
    """Display name: the catalog name, or the file's name."""
    kind: str
    """``"file"``, ``"hf-config"`` or ``"catalog"``."""
    origin: str
    """Where it came from: a path, or ``catalog:NAME``."""
    build_fn: Callable[[], nn.Module]
    """Builds the module on the current default device / tensor mode."""
    batch_fn: Callable[..., Batch]
    """``batch_fn(batch_size)`` or, when :attr:`accepts_seq_len`, ``batch_fn(batch_size, seq_len=N)``."""
    loss_fn: LossFn | None = None
    """``loss_fn(output, batch) -> scalar``; ``None`` uses :func:`default_loss`."""
    call_fn: Callable[[nn.Module, Batch], Any] | None = None
    """``call_fn(model, batch) -> output``; ``None`` uses :func:`call_model` (see :mod:`autoshard.models.step`)."""
    optimizer_fn: OptimizerFn | None = None
    """``optimizer_fn(params) -> Optimizer``; ``None`` lets the caller pick (autoshard's ``--optimizer``)."""
    accepts_seq_len: bool = False
    """Whether ``batch_fn`` takes a ``seq_len`` keyword (token models)."""
    default_seq_len: int | None = None
    """The sequence length used when the user gives none."""
    max_seq_len: int | None = None
    """The longest sequence the model supports (e.g. learned positions), if bounded."""
    num_layers: int | None = None
    """Number of repeated blocks, when the source knows it (catalog and HF configs)."""
    with_num_layers: Callable[[int], ModelSource] | None = None
    """Returns the same model with ``n`` repeated blocks, when the source can (used to scale traces)."""
    user_file: str | None = None
    """The user's file whose frames are shown when user code raises."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Published figures and facts, e.g. ``{"published_parameters": 6_738_415_616, "reference": ...}``."""
    with_layers: Callable[[tuple[int, ...]], ModelSource] | None = None
    """Returns the same model keeping only the blocks at these full-depth positions (increasing, from 0), each
    of the kind it is at full depth, when the source can (HF configs; used to scale traces of models whose
    blocks differ, e.g. dense and MoE layers). Callers check what it built
    (:mod:`autoshard.models.hf_layers`)."""
    fingerprint: str | None = None
    """A digest of what the source was loaded from (:mod:`autoshard.models.fingerprint`): the file and the
    siblings it imports, the config's content, the catalog entry's definition. ``None`` for a source made in
    code, which nothing is cached for. :meth:`replace` drops it unless it is given."""

    def build(self) -> nn.Module:
        """Build the module, turning exceptions from user code into :class:`UserCodeError`.

        Raises:
            UserCodeError: the builder raised, or returned something that is not an ``nn.Module``.
        """
        module = call_user(self.build_fn, what="model()", user_file=self.user_file)
        if not isinstance(module, nn.Module):
            raise UserCodeError(
                f"model() in {self.origin} returned {type(module).__name__}, expected a torch.nn.Module.",
                hint="Make model() return the module itself, e.g. `return MyNet()`.",
            )
        if is_compiled(module):
            raise UserCodeError(
                f"model() in {self.origin} returned a torch.compile'd module: autoshard profiles and trains the "
                "module itself, eagerly (it neither models nor applies torch.compile).",
                hint="Return the module uncompiled, e.g. `return MyNet()`; compile it in your own script if you "
                     "train there.",
            )
        from autoshard.models.hf_build import allocates_nothing, every_layer_runs_in

        if allocates_nothing():  # a trace: every layer runs, as for a model built from its config.json
            every_layer_runs_in(module)
        return module

    def batch(self, batch_size: int, seq_len: int | None = None) -> Batch:
        """Build one step's inputs on the current default device / tensor mode.

        Raises:
            UsageError: ``seq_len`` was given but the source's ``batch()`` takes none, or it is too long.
            UserCodeError: ``batch()`` raised or returned something that is not a batch.
        """
        if seq_len is not None and not self.accepts_seq_len:
            if self.kind != "file":  # a config's or catalog entry's inputs: images or audio, sized by the config
                raise UsageError(
                    f"--seq-len does not apply to {self.name}: its inputs are not a token sequence (they are "
                    f"sized by its config, e.g. image_size).",
                    hint="Drop --seq-len.",
                )
            raise UsageError(
                f"--seq-len was given but batch() in {self.origin} takes no seq_len argument.",
                hint="Drop --seq-len, or define `def batch(batch_size, seq_len=...)` in your model file.",
            )
        if seq_len is not None and self.max_seq_len is not None and seq_len > self.max_seq_len:
            raise UsageError(
                f"--seq-len {seq_len} exceeds the longest sequence {self.name} supports ({self.max_seq_len}).",
                hint=f"Use --seq-len {self.max_seq_len} or less.",
            )
        if self.accepts_seq_len:
            seq_len = seq_len if seq_len is not None else self.default_seq_len
            kwargs: dict[str, Any] = {} if seq_len is None else {"seq_len": seq_len}
        else:
            kwargs = {}
        result = call_user(self.batch_fn, batch_size, what="batch()", user_file=self.user_file, **kwargs)
        check_batch(result, origin=self.origin)
        return result

    def resolved_seq_len(self, seq_len: int | None) -> int | None:
        """The sequence length a batch built with ``seq_len`` actually has (``None`` when not a token model)."""
        if not self.accepts_seq_len:
            return None
        return seq_len if seq_len is not None else self.default_seq_len

    def replace(self, **changes: Any) -> ModelSource:
        """A copy with some fields changed; without a :attr:`fingerprint` unless ``fingerprint=`` is given (the
        copy is no longer what was loaded)."""
        return replace(self, **{"fingerprint": None, **changes})


def takes_keyword(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` accepts a keyword argument ``name`` (explicitly or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


_FFT_BF16 = "Unsupported dtype BFloat16"
"""What torch's FFTs raise for a bfloat16 input (``promote_type_fft``, aten/src/ATen/native/SpectralOps.cpp)."""


def call_user(fn: Callable[..., Any], *args: Any, what: str, user_file: str | None, user_code: bool = False,
              feeding: str | None = None, uncut: str | None = None, **kwargs: Any) -> Any:
    """Call user code; turn any exception into a :class:`UserCodeError` naming the user's file and line.

    Errors raised on purpose by autoshard (``AutoshardError``) pass through unchanged. ``user_code``: the code
    is the user's although no file of theirs is known (a module passed to ``fit()``); ``feeding``: how its batches
    reach the model and the loss, for the hint (:func:`autoshard.models.step.describe`); ``uncut``: the first
    dimensions of a batch whose tensors disagree on it (:func:`first_dimensions`), which cutting it into samples
    breaks.
    """
    from autoshard.errors import AutoshardError, InternalError

    try:
        return fn(*args, **kwargs)
    except (AutoshardError, InternalError):
        raise
    except Exception as exc:  # user code can raise anything; we report it precisely
        location = user_frame(exc, user_file) if user_file is not None or not user_code else own_frame(exc)
        where = f" at {location}" if location else ""
        if any(name in str(exc) or name in where for name in _QUANTIZED):  # a QLoRA base: not the user's bug
            hint = ("The model holds bitsandbytes' quantized weights (Params4bit / Int8Params: a 4- or 8-bit base, as "
                    "QLoRA loads it), which cannot be built on the fake tensors autoshard traces with: autoshard "
                    "cannot plan a quantized base model. Plan the model unquantized (its 16-bit memory is an upper "
                    "bound), or train it in your own loop.")
            raise UserCodeError(f"{what} raised {type(exc).__name__}{where}: {_first(exc)}", hint=hint,
                                location=location) from exc
        if (user_file is not None or user_code) and _asks_for_cuda(exc):
            hint = ("The step is traced on this machine's CPU, on fake tensors (no GPU needed, none used): code that "
                    "puts tensors on 'cuda' itself (.cuda(), device='cuda') cannot run here. Take the device from "
                    "the inputs or the parameters (x.device), which autoshard and fit() place.")
        elif (user_file is not None or user_code) and type(exc).__name__ in _VALUE_READS:
            hint = ("autoshard builds the model and traces its step on fake tensors, which hold no values: code that "
                    "reads one (.item(), .tolist(), float(t), nonzero(), a boolean mask) cannot run there. Keep "
                    "the model, batch and loss shape-static (e.g. torch.where instead of x[mask]); docs/models.md.")
        elif (user_file is not None or user_code) and str(exc).strip() == _FFT_BF16:
            hint = ("torch.fft takes no bfloat16 input (torch 2.13 refuses it on a CPU, and on a GPU too without "
                    "native bf16 transforms: pytorch/pytorch#117844), and under bf16 autocast the layer before it "
                    "gives bfloat16. Cast to float32 for the transform (torch.fft.rfft2(x.float())) as spectral "
                    "models do, or plan in another precision (--precision 32-true; precision='32-true' in Python).")
        elif user_file is not None:
            hint = "Fix the error in your model file (run with --debug for the full traceback)."
        elif user_code:
            fed = f" each batch was fed as {feeding};" if feeding else ""
            hint = (f"Your code raised it while autoshard traced a step to plan (on your batch cut to the micro-batch "
                    f"sizes it tries, so its first dimension may differ from yours):{fed} check the model, the batch "
                    "and the loss.")
            if uncut:  # a graph batch: x [nodes, ...], edge_index [2, edges], y [nodes]
                hint += (f" Its tensors disagree on their first dimension ({uncut}): if it is a batch that cannot be "
                         "cut into samples along it (a graph's edge_index [2, edges]), plan with a model file whose "
                         "batch(batch_size) builds a batch of batch_size samples (docs/models.md; `autoshard "
                         "recommend model.py --output-dir DIR`) and pass its plan.json as plan= to fit().")
        elif _NO_PAD_TOKEN in str(exc):  # a decoder's sequence classification head, pad_token_id null
            hint = ('Set "pad_token_id" in the config.json (the tokenizer\'s pad token, or its eos_token_id as is '
                    "usual for decoder-only models): the classification head takes each sequence's last token "
                    "before the padding, and without a pad token transformers trains on batches of one only.")
        else:  # a Hugging Face config or a catalog model: the code that raised is not the user's
            hint = ("The model's own code raised it. For a config.json the usual cause is a value transformers "
                    "accepts but its model cannot run (num_experts_per_tok above the experts, attention heads not a "
                    "multiple of the key/value heads, the hidden size not a multiple of the heads): check the config; "
                    "else rerun with --debug for the full traceback and report it.")
        raise UserCodeError(
            f"{what} raised {type(exc).__name__}{where}: {exc}", hint=hint, location=location
        ) from exc


_QUANTIZED = ("Params4bit", "Int8Params", "bitsandbytes")
"""What an error raised building or running a bitsandbytes-quantized model under fake tensors names."""


def _first(exc: BaseException) -> str:
    """The first line of an exception's message (torch's fake-tensor errors run to many)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_NO_PAD_TOKEN = "no padding token is defined"
"""What transformers' sequence-classification heads of decoder models raise for a batch of more than one sequence
when the config has no ``pad_token_id`` (Llama's configs ship it null)."""
_VALUE_READS = frozenset({"DataDependentOutputException", "DynamicOutputShapeException"})
"""Fake-tensor errors (``torch._subclasses.fake_tensor``) raised when code reads a value, named by class so that
this module need not import them."""

_NO_CUDA = ("not linked with support for cuda", "Torch not compiled with CUDA enabled", "Found no NVIDIA driver",
            "No CUDA GPUs are available")
"""What torch raises when code asks for a CUDA device this process does not have (a CPU build, no driver)."""


def _asks_for_cuda(exc: BaseException) -> bool:
    """Whether ``exc`` is torch refusing a CUDA device this process does not have."""
    return isinstance(exc, (RuntimeError, AssertionError)) and any(m in str(exc) for m in _NO_CUDA)


def user_frame(exc: BaseException, user_file: str | None) -> str | None:
    """``"path:line"`` of the innermost traceback frame inside ``user_file``, if any."""
    if user_file is None:
        return None
    import os

    target = os.path.realpath(user_file)
    return _innermost_frame(exc, lambda path: path == target)


def own_frame(exc: BaseException) -> str | None:
    """``"path:line"`` of the innermost traceback frame in neither Python's nor an installed package's files nor
    autoshard's: the user's own code, for a module whose file autoshard was not given (``fit(module)``)."""
    import os
    import sysconfig

    skipped = tuple(os.path.realpath(p) + os.sep for p in {*sysconfig.get_paths().values(),
                                                           os.path.dirname(os.path.dirname(__file__))} if p)
    return _innermost_frame(exc, lambda path: not path.startswith(skipped))


def _innermost_frame(exc: BaseException, keep: Callable[[str], bool]) -> str | None:
    """``"path:line"`` of the innermost frame of ``exc``'s traceback whose real path ``keep`` keeps (frames of
    code with no file, ``<...>``, are passed over)."""
    import os
    import traceback

    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if not frame.filename.startswith("<") and keep(os.path.realpath(frame.filename)):
            found = f"{frame.filename}:{frame.lineno}"
    return found


def check_batch(batch: Batch, *, origin: str) -> None:
    """Raise :class:`UserCodeError` unless ``batch`` is a tensor, or a sequence, a mapping or a dataclass holding a
    tensor. For a module given to ``fit()`` (``origin`` ``module:...``) the batch is the user's data, and the
    message says so; for a model file, it is what its ``batch()`` returned."""
    if isinstance(batch, torch.Tensor):
        return
    data = origin.startswith("module:")
    what = "the data's first batch is a" if data else f"batch() in {origin} returned"
    values = batch_values(batch)
    if values is None:
        raise UserCodeError(
            f"{what} {type(batch).__name__}; expected a tensor, a tuple/list, a dict or a dataclass of tensors.",
            hint="Tokenize or convert the data to tensors first (a Dataset, or a DataLoader with a collate_fn)."
            if data else "Return e.g. `torch.randn(batch_size, 784)` or `{'input_ids': ..., 'labels': ...}`.",
        )
    if not any(isinstance(v, torch.Tensor) for v in values):
        kinds = ", ".join(sorted({type(v).__name__ for v in values})) or "empty"
        raise UserCodeError(
            f"{what}{'' if data else ' a'} {type(batch).__name__} with no tensor in it ({kinds}).",
            hint="Tokenize or convert the data to tensors first (a Dataset, or a DataLoader with a collate_fn)."
            if data else "At least one input of the training step must be a torch.Tensor.",
        )


def _is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def batch_values(batch: Batch) -> list[Any] | None:
    """A batch's top-level values: the tensor itself, a mapping's values, a sequence's items, a dataclass's fields;
    ``None`` for anything else (a string, a number).

    Example:
        >>> [tuple(v.shape) for v in batch_values({"x": torch.zeros(4, 2), "y": torch.zeros(4)})]
        [(4, 2), (4,)]
    """
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, Mapping):
        return list(batch.values())
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        return list(batch)
    if _is_dataclass_instance(batch):
        return [getattr(batch, f.name) for f in dataclasses.fields(batch)]
    return None


def first_dimensions(batch: Any) -> str | None:
    """The first dimension of each of ``batch``'s top-level tensors, named, when they disagree (``None`` when they
    agree or there are fewer than two): what :func:`batch_rows` cannot read samples from.

    Example:
        >>> first_dimensions({"x": torch.zeros(256, 16), "edge_index": torch.zeros(2, 1024), "y": torch.zeros(256)})
        'x: 256, edge_index: 2, y: 256'
        >>> first_dimensions((torch.zeros(4, 2), torch.zeros(4))) is None
        True
    """
    values = batch_values(batch) or []
    names = ([str(k) for k in batch] if isinstance(batch, Mapping)
             else [f.name for f in dataclasses.fields(batch)] if _is_dataclass_instance(batch)
             else [f"[{i}]" for i in range(len(values))])
    sized = [(n, t.shape[0]) for n, t in zip(names, values, strict=False)
             if isinstance(t, torch.Tensor) and t.dim() > 0]
    if len({size for _, size in sized}) < 2:
        return None
    return ", ".join(f"{n}: {size}" for n, size in sized)


def batch_rows(batch: Any) -> int | None:
    """The samples in ``batch``: the first dimension its top-level tensors share (``None`` when they disagree or
    it holds none).

    Example:
        >>> batch_rows((torch.zeros(32, 8), torch.zeros(32))), batch_rows({"x": torch.zeros(4, 2), "n": 3})
        (32, 4)
    """
    sizes = {t.shape[0] for t in batch_values(batch) or [] if isinstance(t, torch.Tensor) and t.dim() > 0}
    return sizes.pop() if len(sizes) == 1 else None


def batch_token_length(batch: Any) -> int | None:
    """The sequence length of a batch of token ids: the second dimension of its ``input_ids`` (a mapping's), else
    of its first top-level 2-D integer tensor with a row per sample; ``None`` where it holds none (images, features
    in floats, a graph's ``edge_index`` [2, edges], whose edges were counted as tokens: a GNN probe).

    Example:
        >>> ids = torch.zeros(4, 128, dtype=torch.long)
        >>> images = (torch.zeros(4, 3, 8, 8), ids[:, 0])
        >>> graph = {"x": torch.zeros(256, 16), "edge_index": torch.zeros(2, 1024, dtype=torch.long)}
        >>> batch_token_length({"input_ids": ids, "labels": ids}), batch_token_length(images), batch_token_length(graph)
        (128, None, None)
    """
    ids = batch.get("input_ids") if isinstance(batch, Mapping) else None
    if isinstance(ids, torch.Tensor) and ids.dim() == 2:
        return int(ids.shape[1])
    rows = batch_rows(batch)
    for t in batch_values(batch) or []:
        if isinstance(t, torch.Tensor) and t.dim() == 2 and not t.is_floating_point() and not t.is_complex() \
                and t.dtype != torch.bool and t.shape[0] == rows:
            return int(t.shape[1])
    return None


def map_tensors(fn: Callable[[Any], Any], batch: Batch) -> Batch:
    """``batch`` with ``fn`` applied to every leaf (tensors and whatever else it holds), as ``tree_map`` does,
    inside dataclass instances too (rebuilt with :func:`dataclasses.replace` over their ``init`` fields), which
    ``tree_map`` takes for leaves.

    Example:
        >>> @dataclass
        ... class Pair:
        ...     x: torch.Tensor
        ...     y: torch.Tensor
        >>> map_tensors(lambda t: t * 2, [Pair(torch.ones(1), torch.zeros(1))])[0].x
        tensor([2.])
    """
    def leaf(value: Any) -> Any:
        if _is_dataclass_instance(value):
            return dataclasses.replace(value, **{f.name: map_tensors(fn, getattr(value, f.name))
                                                 for f in dataclasses.fields(value) if f.init})
        return fn(value)

    return tree_map(leaf, batch)


def is_compiled(module: nn.Module) -> bool:
    """Whether ``module`` is ``torch.compile``'s wrapper (``OptimizedModule``, the user's module in ``_orig_mod``);
    without importing dynamo, which costs a second, when nothing imported it."""
    if "torch._dynamo" not in sys.modules:
        return False
    from torch._dynamo.eval_frame import OptimizedModule

    return isinstance(module, OptimizedModule)


def call_model(module: nn.Module, batch: Batch) -> Any:
    """Run ``module`` on ``batch`` following the convention: tensor → ``m(b)``, sequence → ``m(*b)``,
    mapping → ``m(**b)``."""
    if isinstance(batch, Mapping):
        return module(**batch)
    if isinstance(batch, (tuple, list)):
        return module(*batch)
    return module(batch)


def default_loss(output: Any, batch: Batch) -> torch.Tensor:
    """The loss used when a source defines none.

    ``output.loss`` (or ``output["loss"]``) when present; otherwise the mean of every floating-point tensor in
    the output that requires grad, summed.

    Raises:
        UserCodeError: the output holds no floating-point tensor to reduce.
    """
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss
    tensors = [t for t in _flatten(output) if t.is_floating_point() and t.requires_grad]
    if not tensors:
        raise UserCodeError(
            "The model's output has no `.loss` and no floating-point tensor that requires grad to reduce.",
            hint="Define `def loss(output, batch):` in your model file returning a scalar tensor.",
        )
    # mean() accumulates in fp32 internally; casting the (possibly large) output first would add a copy.
    total = tensors[0].mean().float()
    for t in tensors[1:]:
        total = total + t.mean().float()
    return total


def _flatten(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in _flatten(v)]
    if isinstance(obj, (tuple, list)):
        return [t for v in obj for t in _flatten(v)]
    if hasattr(obj, "to_tuple"):  # transformers ModelOutput
        return _flatten(obj.to_tuple())
    return []


def cast_floats(batch: Any, dtype: torch.dtype) -> Any:
    """``batch`` (or a model's output) with every floating-point tensor in ``dtype``; anything else unchanged.

    Example:
        >>> cast_floats({"x": torch.ones(1), "ids": torch.ones(1, dtype=torch.long)}, torch.bfloat16)["x"].dtype
        torch.bfloat16
    """
    return map_tensors(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, batch)
