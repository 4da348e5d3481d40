"""One exception tree for everything autoshard reports to a user.

Every error a user can cause (a bad path, a broken ``model.py``, a nonsensical number) is an
:class:`AutoshardError`. The CLI prints its message in one or two lines and exits with
``exit_code``; library callers catch the class they care about.
"""

from __future__ import annotations


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


class UsageError(AutoshardError):
    """An argument is out of range or contradicts another one."""


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
