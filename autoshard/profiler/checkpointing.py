"""Which activations a step recomputes: :class:`ActivationCheckpointing` and torchtitan's selective policies.

Four choices, as published runs use them:

* ``none``: every activation is saved.
* ``full``: every repeated block is recomputed in backward (non-reentrant ``torch.utils.checkpoint``).
* ``every-N``: torchtitan's layer-selective mode (``activation_checkpoint.mode = "selective"``,
  ``selective_ac_option = "N"``): only every N-th block is checkpointed. ``_apply_layer_sac`` in
  ``torchtitan/distributed/activation_checkpoint.py`` counts blocks from 1 and wraps those with
  ``count % N == 0``, i.e. blocks 2, 4, ... for N = 2.
* ``op``: torchtitan's op-selective mode (``selective_ac_option = "op"``): every block is checkpointed under a
  ``torch.utils.checkpoint.create_selective_checkpoint_contexts`` policy that saves the outputs of the ops in
  a save list (matmuls, attention kernels, reduce-scatter, ``max``) and recomputes the rest, except that every
  second ``aten.mm`` of a block is recomputed too (``_apply_op_sac``'s ``meta[mm_count_key] % 2 == 0``).
  The save list is ``_op_sac_save_list`` of ``torchtitan/models/llama3/infra/parallelize.py`` (pytorch/torchtitan
  018740b7aae7846d24954539244c78215dbd181f).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.utils._pytree import tree_map

from autoshard.errors import UsageError

CheckpointMode = Literal["none", "full", "every", "op"]

CHECKPOINTING_NAMES = ("none", "full", "op", "every-N")
"""How the choice is spelled on the command line (``every-2``, ``every-3``, ...)."""


@dataclass(frozen=True, slots=True)
class ActivationCheckpointing:
    """What a step recomputes (see the module docstring); truthy unless ``none``."""

    mode: CheckpointMode = "none"
    """``none``, ``full``, ``every`` (every ``every``-th block) or ``op`` (op-selective, every block)."""
    every: int = 1
    """For ``every``: checkpoint one block in this many (>= 2; ``every-1`` is ``full``)."""

    def __bool__(self) -> bool:
        return self.mode != "none"

    def __str__(self) -> str:
        return f"every-{self.every}" if self.mode == "every" else self.mode

    @property
    def label(self) -> str:
        """Words for explanations, e.g. ``"op-selective activation checkpointing"``.

        Example:
            >>> ActivationCheckpointing("every", 2).label
            'activation checkpointing of every 2nd block'
        """
        if self.mode == "every":
            suffix = {2: "nd", 3: "rd"}.get(self.every, "th")
            return f"activation checkpointing of every {self.every}{suffix} block"
        return {"none": "no activation checkpointing", "full": "activation checkpointing",
                "op": "op-selective activation checkpointing"}[self.mode]

    def checkpointed(self, block_names: Sequence[str], positions: Sequence[int] | None = None) -> tuple[str, ...]:
        """The blocks this choice wraps, in order.

        Args:
            block_names: the model's repeated blocks, stack after stack.
            positions: where each block sits among a deeper model's (0-based), when ``block_names`` are a shallow
                copy's (:mod:`autoshard.profiler.depth_checkpointing`): ``every-N`` counts those positions;
                ``None``: their own.

        Example:
            >>> ActivationCheckpointing("every", 2).checkpointed(["h.0", "h.1", "h.2", "h.3", "h.4"])
            ('h.1', 'h.3')
            >>> ActivationCheckpointing("every", 2).checkpointed(["h.0", "h.1", "h.2"], positions=[0, 2, 7])
            ('h.2',)
        """
        if self.mode == "none":
            return ()
        if self.mode == "every":
            at = range(len(block_names)) if positions is None else positions
            if len(at) != len(block_names):
                raise ValueError(f"{len(block_names)} blocks but {len(at)} positions.")
            return tuple(n for n, i in zip(block_names, at, strict=True) if (i + 1) % self.every == 0)
        return tuple(block_names)


NONE = ActivationCheckpointing("none")
FULL = ActivationCheckpointing("full")
OP = ActivationCheckpointing("op")


def parse_checkpointing(value: bool | str | ActivationCheckpointing | None) -> ActivationCheckpointing:
    """Parse ``True`` / ``False``, ``"none"``, ``"full"``, ``"op"`` or ``"every-N"`` (also ``"off"``,
    ``"selective"``, ``"every_N"``, or a bare ``"N"``).

    Raises:
        UsageError: anything else, or N < 1.

    Example:
        >>> str(parse_checkpointing("every-2")), str(parse_checkpointing(True)), str(parse_checkpointing("1"))
        ('every-2', 'full', 'full')
    """
    if isinstance(value, ActivationCheckpointing):
        return value
    if value is None or value is False:
        return NONE
    if value is True:
        return FULL
    key = str(value).strip().lower()
    named = {"none": NONE, "off": NONE, "false": NONE, "no": NONE, "full": FULL, "true": FULL, "on": FULL,
             "op": OP, "selective": OP, "selective-op": OP}
    if key in named:
        return named[key]
    match = re.fullmatch(r"(?:every[-_ ]?)?(\d+)", key)
    if match is None:
        raise UsageError(f"unknown activation checkpointing {value!r}.",
                         hint=f"Use one of: {', '.join(CHECKPOINTING_NAMES)} (e.g. every-2).")
    every = int(match.group(1))
    if every < 1:
        raise UsageError(f"checkpointing every {every} blocks: N must be at least 1, but got {value!r}.")
    return FULL if every == 1 else ActivationCheckpointing("every", every)


@functools.cache
def op_save_list() -> frozenset[Any]:
    """The ops whose outputs op-selective checkpointing saves.

    torchtitan's ``_op_sac_save_list`` (see the module docstring), less its higher-order ops
    (``flex_attention``, ``inductor_compiled_code``) and custom ``_varlen_attn`` that eager models here do
    not reach, plus ``_scaled_dot_product_flash_attention_for_cpu``: the kernel the same
    ``F.scaled_dot_product_attention`` call runs on CPU, so that a CPU run keeps what a CUDA run would.
    """
    aten = torch.ops.aten
    names = ["mm", "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
             "_scaled_dot_product_fused_attention_overrideable", "_scaled_dot_product_flash_attention_for_cpu",
             "max"]
    ops = {getattr(aten, n).default for n in names if hasattr(aten, n)}
    c10d = getattr(torch.ops, "_c10d_functional", None)
    if c10d is not None and hasattr(c10d, "reduce_scatter_tensor"):
        ops.add(c10d.reduce_scatter_tensor.default)
    return frozenset(ops)


def op_selective_context(on_save: Callable[[Any], None] | None = None) -> Callable[[], Any]:
    """A ``context_fn`` for ``torch.utils.checkpoint.checkpoint`` that runs torchtitan's op policy.

    Each call of the returned function (one per checkpointed forward) starts its own ``mm`` count, as
    ``selective_checkpointing_context_fn`` does with a fresh ``defaultdict(int)``.

    Args:
        on_save: called with each output the policy saves (the profiler counts them as activations).
    """
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = op_save_list()
    mm = torch.ops.aten.mm.default

    def context() -> Any:
        counts: dict[str, int] = defaultdict(int)

        def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
            # torch 2.13 calls the policy in forward only (recompute replays by index); torch 2.11 calls it in
            # the recompute too, with ``ctx.is_recompute`` set: one count per pass, as torchtitan keys its
            # ``{mode}_mm_count``, keeps the recompute's choices the forward's.
            key = "recompute" if getattr(ctx, "is_recompute", False) else "forward"
            if func == mm:
                counts[key] += 1
            if func in save and not (func == mm and counts[key] % 2 == 0):
                if on_save is not None and key == "forward" and _POLICY_SEES_OUTPUT:  # what forward keeps
                    on_save(ctx.op_output)
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        contexts = create_selective_checkpoint_contexts(policy)
        if on_save is not None and not _POLICY_SEES_OUTPUT:
            _report_saved_outputs(contexts, on_save)
        return contexts

    return context


def _policy_sees_output() -> bool:
    from torch.utils.checkpoint import SelectiveCheckpointContext

    return "op_output" in inspect.signature(SelectiveCheckpointContext).parameters


_POLICY_SEES_OUTPUT = _policy_sees_output()
"""torch 2.13 passes the policy the op's output (``SelectiveCheckpointContext.op_output``, the call made after the
op runs); torch 2.11 calls it before the op, without one."""


class _ReportingList(list[Any]):
    """The list a saved op's outputs are appended to, telling ``on_save`` of each (unwrapped)."""

    def __init__(self, on_save: Callable[[Any], None]) -> None:
        super().__init__()
        self._on_save = on_save

    def append(self, item: Any) -> None:
        super().append(item)
        # torch/utils/checkpoint.py (2.11): the outputs are kept as a pytree of ``_VersionWrapper(val)``.
        self._on_save(tree_map(lambda w: getattr(w, "val", w), item))


def _report_saved_outputs(contexts: tuple[Any, Any], on_save: Callable[[Any], None]) -> None:
    """Where the policy does not see outputs: the forward and recompute modes share one ``storage`` (op → saved
    outputs, ``create_selective_checkpoint_contexts`` in torch 2.11); give both one whose lists report appends."""
    storage: defaultdict[Any, list[Any]] = defaultdict(lambda: _ReportingList(on_save))
    for mode in contexts:
        if not hasattr(mode, "storage"):
            raise RuntimeError(f"torch {torch.__version__}: selective checkpointing keeps no storage to observe")
        mode.storage = storage
