"""One exception tree for everything autoshard reports to a user.

Every error a user can cause (a bad path, a broken ``model.py``, a nonsensical number) is an
:class:`AutoshardError`. The CLI prints its message in one or two lines and exits with
``exit_code``; library callers catch the class they care about.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar


class AutoshardError(Exception):
    """Base class of every error autoshard raises on purpose.

    Attributes:
        exit_code: the process exit code the CLI uses for this error.
        hint: an optional second line telling the user how to fix it.
    """

    exit_code: int = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message}\n{self.hint}"

    def reword(self, rewrite: Callable[[str], str]) -> None:
        """Rewrite the message and hint in place (the flags they name, as a Python caller's arguments)."""
        self.message = rewrite(self.message)
        self.hint = None if self.hint is None else rewrite(self.hint)
        self.args = (self.message, *self.args[1:])


class UsageError(AutoshardError):
    """An argument is out of range or contradicts another one."""


class UnknownArgument(UsageError, TypeError):
    """A public function was called with a keyword it does not take (a ``TypeError`` too, as Python's own is)."""


class ModelSourceError(AutoshardError):
    """The model source cannot be found or does not follow the convention."""


class UserCodeError(ModelSourceError):
    """The user's own code (``model.py``, a forward, a loss) raised.

    Attributes:
        location: ``"path:line"`` of the innermost frame in the user's file, when known.
    """

    def __init__(self, message: str, *, hint: str | None = None, location: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.location = location


class InternalError(RuntimeError):
    """A fault of autoshard's own machinery (e.g. a FLOP formula) met while the user's code ran.

    Not an :class:`AutoshardError`: the CLI reports it as an internal error (a bug to report), and
    ``call_user`` lets it through rather than blaming the user's code, which only happened to be on the stack.
    """


class ProfileError(AutoshardError):
    """The training step could not be traced (e.g. an op fake tensors cannot run)."""


class HardwareError(AutoshardError):
    """Hardware could not be detected, or a hardware profile is invalid."""


class StorageLost(AutoshardError):
    """A tuning study's storage failed while the study ran (its database server stopped, the connection
    dropped): what finished before it is in the storage, and the same command resumes the study."""

    exit_code = 1


class NoFeasiblePlan(AutoshardError):
    """No strategy fits the model on the given hardware.

    Attributes:
        candidates: every candidate weighed, as ``Evaluation.to_dict()`` gives it (what each needs, why it was
            rejected), for ``--json``; empty when the error was raised without them.
    """

    exit_code = 3

    def __init__(self, message: str, *, hint: str | None = None, candidates: tuple[dict, ...] = ()) -> None:
        super().__init__(message, hint=hint)
        self.candidates = candidates


class WorkerError(AutoshardError):
    """A training worker process failed or was stopped; the other workers were stopped with it.

    Attributes:
        detail: the failed worker's traceback, when it reported one (shown with ``--debug``).
    """

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, detail: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.detail = detail


class WorkerTimeout(WorkerError):
    """The worker processes did not finish within their time limit; every one of them was stopped."""


class WorkerKilled(WorkerError):
    """A worker process died without reporting an error (a signal, e.g. the kernel's OOM killer, or an abort);
    the other workers were stopped."""


# -- flags and arguments ---------------------------------------------------------------------------------------

Rewrites = Sequence[tuple[str, str]]
"""Patterns and replacements for :func:`re.sub`, applied in order."""

PLANNER_ARGUMENTS: Rewrites = (
    (r"--gpus/--nodes for (\d+)", r"hardware= with \1 GPUs"), (r"--nvme PATH", "an NVMe path in hardware="),
    (r"\(--nodes\)", "(hardware= with more nodes)"), (r"\(--cpu-memory\)", "(hardware= with its RAM)"),
    (r"--nodes 1\b", "hardware= of one node"),
    (r"--strategies; strategy= in fit\(\)", "strategies="), (r"--seq-len (\d+)", r"seq_len=\1"),
    (r"--global-batch-size\b", "global_batch_size="), (r"--batch-size\b", "batch_size="),
    (r"--checkpointing ([\w-]+); activation_checkpointing= in fit\(\)", r'activation_checkpointing="\1"'),
    (r"--precision ([\w-]+); precision= in fit\(\)", r'precision="\1"'),
    (r"--checkpointing ([\w-]+)", r'activation_checkpointing="\1"'),
    (r"--checkpointing\b", "activation_checkpointing="), (r"--optimizer-impl\b", "optimizer_impl="),
    (r"--optimizer\b", "optimizer="), (r"--precision\b", "precision="), (r"--grad-clip-norm\b", "grad_clip_norm="),
    (r"--hardware\b", "hardware="), (r"--strategies\b", "strategies="), (r"--seq-len\b", "seq_len="),
    (r"--no-cache\b", "cache=False"), (r"--gpus\b", "hardware="), (r"--nodes\b", "hardware="),
    (r"--cpu-memory SIZE", "load_hardware(..., cpu_memory=SIZE)"),
    (r"--cpu-cores N", "load_hardware(..., cpu_cores=N)"),
    (r"--(cpu|gpu)-memory\b", r"load_hardware()'s \1_memory="), (r"--cpu-cores\b", "load_hardware()'s cpu_cores="),
    (r"--benchmark-disk\b", "autoshard.hardware.benchmark_disk()"),
    (r"drop --extrapolate\b", "extrapolate=False"), (r"--extrapolate\b", "extrapolate="),
)
"""``autoshard.profile``'s, ``recommend``'s and ``tune``'s arguments for the ``recommend`` flags that the library's
messages name (the hardware's own flags are :func:`autoshard.hardware.load_hardware`'s, given as ``hardware=``)."""

COMPARE_ARGUMENTS: Rewrites = (
    (r"--hardware\b", "machines="), (r"--price\b", "prices="), (r"--global-batch-size (\d+)", r"global_batch_size=\1"),
    *PLANNER_ARGUMENTS,
)
"""``autoshard.planner.compare.compare``'s arguments for the ``compare`` flags its messages name (its machines are
``--hardware``'s, its prices ``--price``'s; the request's are ``recommend``'s)."""

HARDWARE_ARGUMENTS: Rewrites = (
    (r"pass --hardware NAME with --gpus", 'use load_hardware("NAME", gpus=N)'),
    (r"pass --hardware NAME", 'use load_hardware("NAME")'), (r"Pass --hardware NAME", 'Use load_hardware("NAME")'),
    (r"--hardware ([\w.-]+) --gpus (\d+)", r'load_hardware("\1", gpus=\2)'), (r"--gpus (\d+|N)\b", r"gpus=\1"),
    (r"--nodes (\d+)", r"nodes=\1"), (r"--gpus\b", "gpus="), (r"--nodes\b", "nodes="),
    (r"--(gpu|cpu)-memory (\d+)([A-Za-z]+)\b", r'\1_memory="\2\3"'), (r"--(gpu|cpu)-memory (\d+)\b", r"\1_memory=\2"),
    (r"--gpu-memory\b", "gpu_memory="), (r"--cpu-memory\b", "cpu_memory="), (r"--cpu-cores\b", "cpu_cores="),
    (r"--nvme\b", "nvme="), (r"--hardware\b", "load_hardware()"),
)
""":func:`autoshard.hardware.load_hardware`'s arguments for the hardware flags its messages name."""

PYTHON_COMMANDS: Mapping[str, str] = {
    "autoshard hardware --list": "autoshard.hardware.list_profiles()",
    "autoshard hardware --benchmark-disk PATH": "autoshard.hardware.benchmark_disk(PATH)",
}
"""Commands the messages quote whole (in backticks) that have a Python equivalent: a Python caller is shown that."""

_COMMAND_LINE: ContextVar[bool] = ContextVar("autoshard_command_line", default=False)


@contextmanager
def command_line() -> Iterator[None]:
    """While active, errors keep the flags they name: the ``autoshard`` command is the caller."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


def reworded(text: str, rewrites: Rewrites, *, for_python: bool = True) -> str:
    """``text`` with each pattern of ``rewrites`` replaced outside spans in backticks; a span in backticks is a
    command quoted whole, which keeps its flags, or becomes its Python equivalent where it has one
    (:data:`PYTHON_COMMANDS`) when the text is ``for_python`` (not when one command's text is said in another's
    terms, as ``autoshard compare`` says ``recommend``'s).

    Example:
        >>> reworded("Use --seq-len 128 or less.", PLANNER_ARGUMENTS)
        'Use seq_len=128 or less.'
        >>> reworded("Pass --hardware (`autoshard hardware --list`).", HARDWARE_ARGUMENTS)
        'Pass load_hardware() (`autoshard.hardware.list_profiles()`).'
        >>> reworded("Compare with `autoshard compare MODEL --hardware a100:8`.", HARDWARE_ARGUMENTS)
        'Compare with `autoshard compare MODEL --hardware a100:8`.'
    """
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # even parts are outside backticks
        for pattern, replacement in rewrites:
            parts[i] = re.sub(pattern, replacement, parts[i])
    inside = range(1, len(parts) - 1, 2) if for_python else ()  # odd parts (a trailing one has no closing backtick)
    for i in inside:
        parts[i] = PYTHON_COMMANDS.get(parts[i], parts[i])
    return "`".join(parts)


def rewording(rewrites: Rewrites) -> Callable[[str], str]:
    """:func:`reworded` with ``rewrites``, for a result's ``reworded(text)``."""
    return functools.partial(reworded, rewrites=rewrites)


_P = ParamSpec("_P")
_R = TypeVar("_R")


_IN_PUBLIC_CALL: ContextVar[bool] = ContextVar("autoshard_in_public_call", default=False)


def in_arguments(rewrites: Rewrites, *, result: Callable[[Any], Any] | None = None
                 ) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorate a public function so that the errors it raises name its arguments, not the command line's flags
    (which the library's messages are written in), unless the ``autoshard`` command called it
    (:func:`command_line`).

    ``result``, when given, rewords what the function returns in the same way (a plan's explanation, a hardware
    spec's notes) — only for the outermost public call, so that the library's own calls read the text it wrote.
    """
    def decorate(function: Callable[_P, _R]) -> Callable[_P, _R]:
        parameters = inspect.signature(function).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        switches = {name: p.annotation == "bool | None" for name, p in parameters.items()
                    if p.annotation in ("bool", "bool | None")}  # name -> None allowed

        @functools.wraps(function)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            for name, value in kwargs.items():
                if name not in parameters and not takes_any:
                    raise UnknownArgument(unknown_argument(function.__name__, name, parameters))
                if name in switches and not isinstance(value, bool) and not (value is None and switches[name]):
                    # reserved="no" is true, and was taken as True
                    raise UsageError(f"{name} must be True or False{' (or None)' if switches[name] else ''}, "
                                     f"but got {value!r}.")
            outermost = not _IN_PUBLIC_CALL.get()
            token = _IN_PUBLIC_CALL.set(True)
            try:
                value = function(*args, **kwargs)
            except AutoshardError as exc:
                if not _COMMAND_LINE.get():
                    exc.reword(rewording(rewrites))
                raise
            finally:
                _IN_PUBLIC_CALL.reset(token)
            if result is not None and outermost and not _COMMAND_LINE.get():
                return result(value)
            return value
        return wrapper
    return decorate


_GUESSES: dict[str, tuple[str, ...]] = {
    # What a keyword the command line or another library uses is called here, in the order to suggest.
    "strategy": ("strategies",), "strategies": ("strategy",), "batch": ("batch_size",), "micro_batch": ("batch_size",),
    "micro_batch_size": ("batch_size",), "model": ("source",), "config": ("source",), "path": ("source",),
    "checkpointing": ("activation_checkpointing",), "gradient_checkpointing": ("activation_checkpointing",),
    "max_grad_norm": ("grad_clip_norm",), "gradient_clipping": ("grad_clip_norm",), "steps": ("max_steps",),
    "num_epochs": ("epochs",), "dataloader": ("data",), "train_dataloader": ("data",),
    "eval_dataloader": ("eval_data",),
    "sequence_length": ("seq_len",), "max_seq_len": ("seq_len",), "seq_length": ("seq_len",),
    "gpus": ("processes",), "num_gpus": ("gpus", "processes"), "devices": ("processes",),
    "nproc_per_node": ("processes",), "nproc": ("processes",), "nprocs": ("processes",),
    "num_processes": ("processes",), "world_size": ("processes",), "num_nodes": ("nodes",),
}
_HARDWARE_KEYWORDS = ("gpus", "nodes", "num_gpus", "num_nodes", "devices", "gpu_memory", "cpu_memory", "cpu_cores",
                      "nvme")


def unknown_argument(function: str, name: str, parameters: Mapping[str, object]) -> str:
    """The message for ``function(name=...)``, which it does not take: the argument meant, where one can tell.

    Example:
        >>> unknown_argument("recommend", "batch", {"source": None, "batch_size": None})
        "recommend() got an unexpected keyword argument 'batch'; did you mean batch_size=?"
    """
    message = f"{function}() got an unexpected keyword argument {name!r}"
    meant = [m for m in _GUESSES.get(name, ()) if m in parameters]
    meant += [m for m in difflib.get_close_matches(name, list(parameters), n=3, cutoff=0.75) if m not in meant]
    if meant:
        return message + "; did you mean " + " or ".join(f"{m}=" for m in meant) + "?"
    if name in ("lr", "learning_rate", "weight_decay") and "optimizer" in parameters:
        return (message + ": the optimizer's settings are its own, e.g. "
                "optimizer=functools.partial(torch.optim.AdamW, lr=3e-4).")
    if name in _HARDWARE_KEYWORDS and "hardware" in parameters:
        return (message + ": the GPUs and nodes are hardware='s, e.g. "
                'hardware=autoshard.load_hardware("h100-sxm-80gb", gpus=8, nodes=2).')
    return message + "."
