"""What can go wrong while a training step is traced, said so that the user can act on it.

* An op that fake tensors cannot run (no fake kernel, or a result whose shape depends on the data such as
  ``x[x > 0]``, ``nonzero()``, ``.item()``) becomes a :class:`~autoshard.errors.ProfileError` naming the op
  and the module running it, in forward, in backward or in the optimizer step. The tracker records the op that
  raised and the innermost module; in backward no forward hook runs, so :func:`mark_backward` labels each
  module's output gradient node, and the node that starts last names the module whose backward is running.
* Anything else the user's code raises is a :class:`~autoshard.errors.UserCodeError` (``call_user``).
* A trace that runs longer than :data:`TIME_LIMIT_S` stops with a :class:`~autoshard.errors.ProfileError`
  instead of hanging (:func:`time_limit`, checked by the tracker every few ops).
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_iter

from autoshard.errors import ProfileError, UserCodeError
from autoshard.models.source import ModelSource, call_user
from autoshard.profiler.tracker import MemoryTracker

__all__ = ["TIME_LIMIT_S", "guard", "mark_backward", "time_limit"]

TIME_LIMIT_S = 300.0
"""How long one trace (both steps, FLOP counting included) may run before it is stopped: a trace still running
after five minutes is most likely stuck, and a user is better told so than left waiting."""

_MARK = "autoshard_module"


def guard(fn: Callable[[], Any], source: ModelSource, tracker: MemoryTracker | None, what: str) -> Any:
    """Run part of the step; turn fake-tensor limits into ProfileError and user exceptions into UserCodeError.

    Args:
        fn: the part to run (forward, loss, backward, optimizer step).
        source: the model source, for its name and user file.
        tracker: the active tracker, which knows the op that raised and its module.
        what: the part's name in messages (``"forward"``, ``"backward"``, ...).

    Raises:
        ProfileError: an op fake tensors cannot run, naming the op and the module.
        UserCodeError: anything else ``fn`` raised.
    """
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedOperatorException,
    )

    try:
        return call_user(fn, what=what, user_file=source.user_file, user_code=source.kind == "module",
                         feeding=source.metadata.get("feeding"), uncut=source.metadata.get("uncut"))
    except UserCodeError as exc:
        cause = exc.__cause__
        where = _where(exc, tracker)
        # A Hugging Face config or a catalog model: the code is the library's, which the user cannot edit.
        theirs = source.user_file is not None or source.kind == "module"
        not_yours = f"{source.name}'s code is the library's, not yours: autoshard cannot plan it yet (report it)."
        if isinstance(cause, UnsupportedOperatorException):
            raise ProfileError(
                f"the {what} uses {cause.func}{where}, which autoshard cannot trace without running it.",
                hint="Replace the op with a standard PyTorch op, or report it (rerun with --debug for "
                     "details)." if theirs else not_yours,
            ) from cause
        if isinstance(cause, (DataDependentOutputException, DynamicOutputShapeException)):
            static = ("A packed sequence's shape is its lengths' sum. Feed the RNN the padded batch instead and take "
                      "each sequence's last real step with gather (h[torch.arange(B), lengths - 1]), or mask the "
                      "padded steps in the loss: shape-static, and for a one-way RNN the same result."
                      if "pack_padded_sequence" in str(cause.func) else
                      "Make that code shape-static (e.g. torch.where instead of x[mask]), or report it.")
            raise ProfileError(
                f"the {what} calls {cause.func}{where}, whose result depends on tensor values "
                "(e.g. .item(), nonzero(), boolean-mask indexing), which a trace without data cannot know.",
                hint=static if theirs else not_yours,
            ) from cause
        if isinstance(cause, RuntimeError) and "encountered during backward but not found in storage" in str(cause):
            raise ProfileError(
                f"op-selective checkpointing cannot replay the recompute of {source.name}{where}: it ran an op more "
                "times than the forward did, and torch's selective checkpointing replays each op by its count (a "
                "block shared between layers does this: autocast casts its weights once in the forward, and again "
                "in each recompute).",
                hint="Use full or every-N checkpointing (--checkpointing full; activation_checkpointing= in fit()).",
            ) from cause
        if cause is not None and "data-dependent" in str(cause).lower():
            op = f" calls {tracker.failure[0]}" if tracker is not None and tracker.failure else ""
            raise ProfileError(
                f"the {what}{op}{where} branches on a tensor's value, which a trace without data cannot "
                f"know: {cause}",
                hint="Make that code shape-static, or report it (rerun with --debug for details).",
            ) from cause
        raise


def _where(exc: UserCodeError, tracker: MemoryTracker | None) -> str:
    parts = []
    module = _failing_module(tracker)
    if module:
        parts.append(f"module {module!r}")
    if exc.location:
        parts.append(exc.location)
    return f" (in {', '.join(parts)})" if parts else ""


def _failing_module(tracker: MemoryTracker | None) -> str:
    if tracker is None:
        return ""
    if tracker.failure is not None and tracker.failure[1]:
        return tracker.failure[1]
    return tracker.module_stack[-1] if tracker.module_stack else tracker.backward_module or ""


def mark_backward(output: Any, module: str, tracker: MemoryTracker) -> None:
    """Label the gradient nodes of ``module``'s output tensors, so that backward knows whose backward runs.

    When such a node starts in backward, ``tracker.backward_module`` becomes ``module``. A node already
    labelled keeps its first (innermost) module: a module returning its child's output adds nothing.
    """
    for t in tree_iter(output):
        node = t.grad_fn if isinstance(t, torch.Tensor) else None
        # torch declares Node.metadata a method (torch/autograd/graph.py, 2.13); at runtime it is a dict property.
        if node is None or _MARK in node.metadata:  # type: ignore[operator]
            continue
        node.metadata[_MARK] = module  # type: ignore[index]
        node.register_prehook(_Enter(tracker, module))


class _Enter:
    """A gradient node pre-hook: ``tracker.backward_module = module``."""

    __slots__ = ("module", "tracker")

    def __init__(self, tracker: MemoryTracker, module: str) -> None:
        self.tracker = tracker
        self.module = module

    def __call__(self, grad_outputs: Any) -> None:
        self.tracker.backward_module = self.module


def time_limit(source: ModelSource, tracker: MemoryTracker, limit_s: float) -> Callable[[], None]:
    """A check for ``tracker.on_ops`` that raises once ``limit_s`` seconds have passed from now.

    Raises:
        ProfileError: (from the check) the trace ran past the limit; names the phase and the module.
    """
    deadline = time.monotonic() + limit_s

    def check() -> None:
        if time.monotonic() <= deadline:
            return
        module = tracker.module_stack[-1] if tracker.module_stack else tracker.backward_module
        where = f", module {module!r}" if module else ""
        raise ProfileError(
            f"tracing {source.name} took longer than {limit_s:g} s (stopped in the {tracker.phase}{where}).",
            hint="Trace a smaller batch or sequence length (time grows with both), or report it with "
                 "--debug.",
        )

    return check


@contextlib.contextmanager
def fake_tensor_log_quiet() -> Iterator[None]:
    """Keep torch's fake-tensor logger from printing a traceback to stderr for an op that fails under fake
    tensors (``log.exception`` in ``FakeTensorMode._dispatch_impl``, torch 2.13): the failure is raised anyway,
    and reported once, in the user's terms (:func:`guard`). Also keep quiet torch's warning that a fake tensor's
    data pointer was read, which ``copy.deepcopy`` of a module (an EMA copy, a teacher built from the student)
    triggers on the fake weights the trace builds, not on the user's; and its warning that a compiled module
    runs under global module hooks, which are the trace's own (:func:`autoshard.profiler.trace._run_steps`), not
    the user's run's."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
            warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
            yield
    finally:
        logger.setLevel(level)
