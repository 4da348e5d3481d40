"""``fit(callbacks=[...])``: the user's code told of the run as it goes, on rank 0 — to log to TensorBoard or
Weights & Biases, plot, or act every so many steps. Each callback is any object with one or more of the methods of
:data:`METHODS`; what one raises stops the run as the user's error, naming the method.

The workers ``fit()`` starts run the user's script again, so the callbacks there are the script's own objects, made
again in rank 0's process: what one keeps (a writer, a list) is that process's, not the launching one's. A worker
leaves without Python's exit handlers (``os._exit``: DeepSpeed's communication threads can abort a normal exit), so
what a writer buffers is flushed only where the callback does it: ``on_train_end`` is the place (a file logger's
unflushed lines, a TensorBoard ``SummaryWriter``'s queue and ``wandb.finish()`` were lost without it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoshard.errors import UsageError, UserCodeError
from autoshard.runtime.progress import Reporter
from autoshard.runtime.result import EvalMetrics, StepMetrics

METHODS = ("on_log", "on_eval", "on_checkpoint", "on_train_end")
"""``on_log(steps)``: the steps just averaged over the ranks, every ``log_every`` steps (a list of
:class:`StepMetrics`); ``on_eval(metrics)``: a scoring of ``eval_data`` (:class:`EvalMetrics`);
``on_checkpoint(step, path)``: a checkpoint written (its directory, a string); ``on_train_end(steps)``: training
has ended without an error, every step's metrics (a list of :class:`StepMetrics`), before the weights are gathered
and handed back — where to close a writer."""


def check_callbacks(callbacks: Any) -> tuple[Any, ...]:
    """``callbacks`` as a tuple, each with at least one of :data:`METHODS`.

    Raises:
        UsageError: not a list or tuple, or an element with none of the methods (a function given alone).
    """
    if callbacks is None:
        return ()
    if not isinstance(callbacks, (list, tuple)):
        raise UsageError(f"callbacks= takes a list of objects, but got {type(callbacks).__name__}.",
                         hint=f"Pass e.g. callbacks=[MyLogger()], where MyLogger defines any of {', '.join(METHODS)}.")
    for i, callback in enumerate(callbacks):
        if not any(callable(getattr(callback, m, None)) for m in METHODS):
            raise UsageError(f"callbacks[{i}] ({type(callback).__name__}) has none of the methods fit() calls: "
                             f"{', '.join(METHODS)}.",
                             hint="Define on_log(self, steps) to be told every log_every steps (a function alone "
                                  "is not a callback).")
    return tuple(callbacks)


@dataclass
class Listeners:
    """What rank 0 tells of the run: its progress lines and the user's callbacks, in that order."""

    reporter: Reporter | None
    callbacks: tuple[Any, ...]

    def on_log(self, steps: list[StepMetrics]) -> None:
        if self.reporter is not None:
            self.reporter(steps)
        self._call("on_log", list(steps))

    def on_eval(self, metrics: EvalMetrics) -> None:
        if self.reporter is not None:
            self.reporter.evaluated(metrics)
        self._call("on_eval", metrics)

    def on_checkpoint(self, step: int, path: Path) -> None:
        if self.reporter is not None:
            self.reporter.saved(step, path)
        self._call("on_checkpoint", step, str(path))

    def on_train_end(self, steps: Sequence[StepMetrics]) -> None:
        self._call("on_train_end", list(steps))

    def _call(self, method: str, *args: Any) -> None:
        for i, callback in enumerate(self.callbacks):
            function = getattr(callback, method, None)
            if not callable(function):
                continue
            try:
                function(*args)
            except Exception as exc:
                raise UserCodeError(f"callbacks[{i}].{method} ({type(callback).__name__}) raised "
                                    f"{type(exc).__name__}: {exc}") from exc


def listeners(reporter: Reporter | None, callbacks: Sequence[Any]) -> Listeners | None:
    """The listeners of rank 0's run, ``None`` when nothing listens."""
    if reporter is None and not callbacks:
        return None
    return Listeners(reporter, tuple(callbacks))
