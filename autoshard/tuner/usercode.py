"""The user's own step functions (``training_step``, ``loss_fn``) carried to the trials' processes by reference.

A trial's workers rebuild the model from its source in processes of their own, so a function given to ``tune()``
(or ``fit(tune=...)``) reaches them as the module and qualified name it is found under, as pickle refers to a
function, with its file so that a module next to the user's script is found from any working directory. A function
that cannot be found that way (a lambda, a closure, a function of the ``__main__`` script: importing the script
again would run it) is refused before any trial, rather than dropped.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoshard.errors import UsageError


def function_reference(fn: Callable[..., Any], what: str) -> dict[str, str]:
    """Where the trials' workers find ``fn``: ``{"module", "qualname", "file"}``.

    Args:
        fn: the user's function.
        what: its argument's name, for the message (``training_step``).

    Raises:
        UsageError: ``fn`` is not a function a worker process can import.
    """
    if not callable(fn):
        raise UsageError(f"{what} must be a function, but got {type(fn).__name__}.")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    hint = (f"Define {what} at the top level of the model file or of a module next to your script, and import it "
            "from there: each trial runs in processes of its own, which import it by name.")
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        raise UsageError(f"{what} ({getattr(fn, '__qualname__', type(fn).__name__)}) is a lambda, a closure or "
                         "not a plain function: the trials' processes cannot import it.", hint=hint)
    if module == "__main__":
        raise UsageError(f"{what} ({qualname}) is defined in the script that is running (__main__): the trials' "
                         "processes would have to run the script again to find it.", hint=hint)
    try:
        file = inspect.getsourcefile(fn)
    except TypeError:
        file = None
    try:
        found = _lookup(importlib.import_module(module), qualname)
    except (ImportError, AttributeError):
        found = None
    if found is not fn:
        raise UsageError(f"{what} ({module}.{qualname}) cannot be imported by that name.", hint=hint)
    return {"module": module, "qualname": qualname, "file": "" if file is None else str(Path(file).resolve())}


def load_function(reference: dict[str, str]) -> Callable[..., Any]:
    """The function ``reference`` (:func:`function_reference`) names, imported in a trial's worker; its module's
    root directory is put on ``sys.path`` first when the worker's working directory does not reach it."""
    module = reference["module"]
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError:
        if not reference.get("file"):
            raise
        file = Path(reference["file"])
        depth = module.count(".") + (file.name == "__init__.py")
        sys.path.insert(0, str(file.parents[depth]))
        imported = importlib.import_module(module)
    found = _lookup(imported, reference["qualname"])
    if not callable(found):
        raise TypeError(f"{module}.{reference['qualname']} is not callable")
    return found


def _lookup(module: Any, qualname: str) -> Any:
    found = module
    for part in qualname.split("."):
        found = getattr(found, part)
    return found
