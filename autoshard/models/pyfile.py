"""Loading a user's ``model.py`` that follows the model-file convention (``docs/models.md``).

A model file defines two functions and, optionally, two more::

    def model() -> nn.Module: ...                 # required: builds the module
    def batch(batch_size, seq_len=256): ...       # required: one training step's inputs (seq_len optional)
    def loss(output, batch) -> Tensor: ...        # optional: default is output.loss or a reduction
    def optimizer(params) -> Optimizer: ...       # optional: default is chosen by autoshard (AdamW)

and optionally ``MAX_SEQ_LEN = N`` when the model cannot run longer sequences (learned positions).

Importing the file runs it: this happens only because the user named the file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import itertools
import linecache
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

from autoshard.errors import ModelSourceError, UserCodeError
from autoshard.models.fingerprint import file_fingerprint
from autoshard.models.source import ModelSource, takes_keyword, user_frame
from autoshard.models.step import FileCall

__all__ = ["load_file"]

_REQUIRED = ("model", "batch")
_DOCS = "See docs/models.md for the model-file convention."
_module_ids = itertools.count()
_SIGNATURES = {
    "model": "`def model():` returning an nn.Module",
    "batch": "`def batch(batch_size):` (or `def batch(batch_size, seq_len=256):`)",
    "loss": "`def loss(output, batch):` returning a scalar tensor",
    "optimizer": "`def optimizer(params):` returning a torch.optim.Optimizer",
}
_ARG_NAMES = {"model": "", "batch": "batch_size", "loss": "output, batch", "optimizer": "params"}
_SAMPLE_ARGS: dict[str, tuple[Any, ...]] = {"model": (), "batch": (1,), "loss": (None, None), "optimizer": ([],)}


def load_file(path: str | os.PathLike[str]) -> ModelSource:
    """Import a model file and check it follows the convention.

    The file is imported under a unique module name that is removed from ``sys.modules`` afterwards; its
    directory is on ``sys.path`` only while it is imported, so ``from layers import Block`` finds a sibling
    ``layers.py``. Sibling modules first imported this way are dropped from ``sys.modules`` again, so two model
    files with a ``layers.py`` each do not see each other's. Nothing is built: ``model()`` and ``batch()`` run
    later, through :meth:`ModelSource.build` and :meth:`ModelSource.batch`.

    Args:
        path: the ``.py`` file. Importing it runs its top-level code.

    Returns:
        A :class:`ModelSource` with ``kind="file"``.

    Raises:
        ModelSourceError: the file is missing, is not a ``.py`` file, or does not define callable ``model`` and
            ``batch`` functions with usable signatures.
        UserCodeError: importing the file raised (a syntax error, a missing package, any exception).
    """
    file = Path(path).expanduser()
    if not file.exists():
        raise ModelSourceError(f"{file}: no such file.", hint="Check the path to your model file.")
    if not file.is_file():
        raise ModelSourceError(f"{file} is not a file.", hint="Point autoshard at a model.py file.")
    if file.suffix != ".py":
        raise ModelSourceError(
            f"{file} is not a Python file (expected a .py model file).",
            hint="Rename it to end in .py, or pass a Hugging Face config.json.",
        )
    module = _import(file)
    functions = _check_functions(module, file)
    batch_fn = functions["batch"]
    accepts_seq_len = takes_keyword(batch_fn, "seq_len")
    max_seq_len = _max_seq_len(module, file)
    default_seq_len = _default_seq_len(batch_fn, file) if accepts_seq_len else None
    if default_seq_len is not None and max_seq_len is not None and default_seq_len > max_seq_len:
        raise ModelSourceError(
            f"batch() in {file} defaults to seq_len={default_seq_len}, above MAX_SEQ_LEN = {max_seq_len}.",
            hint="Lower the seq_len default or raise MAX_SEQ_LEN.",
        )
    return ModelSource(
        name=_display_name(file),
        kind="file",
        origin=str(file),
        build_fn=functions["model"],
        batch_fn=batch_fn,
        loss_fn=functions.get("loss"),
        call_fn=FileCall(),
        optimizer_fn=functions.get("optimizer"),
        accepts_seq_len=accepts_seq_len,
        default_seq_len=default_seq_len,
        max_seq_len=max_seq_len,
        user_file=str(file),
        fingerprint=file_fingerprint(file),
    )


def _display_name(file: Path) -> str:
    """The file's stem, or its directory's name for a file called ``model.py`` (``examples/gpt/model.py`` → gpt)."""
    if file.name == "model.py" and file.resolve().parent.name:
        return file.resolve().parent.name
    return file.stem


def _import(file: Path) -> ModuleType:
    stem = re.sub(r"\W", "_", file.stem)
    name = f"_autoshard_model_{stem}_{next(_module_ids)}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:  # pragma: no cover — .py files always get a source loader
        raise ModelSourceError(f"{file}: Python cannot import this file.")
    module = importlib.util.module_from_spec(spec)
    importlib.invalidate_caches()  # sibling files may have been written moments ago
    with _sibling_imports(file.parent), _own_argv(file):
        # Registered while it runs so that dataclasses, pickling of classes and typing lookups work during import.
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise _syntax_error(exc, file) from exc
        except SystemExit as exc:
            location = user_frame(exc, str(file))
            where = f" at {location}" if location else ""
            raise UserCodeError(
                f"Importing {file} called sys.exit(){where}.",
                hint="Move script code (argument parsing, training loops) under `if __name__ == '__main__':`.",
                location=location,
            ) from exc
        except Exception as exc:  # importing user code can raise anything; report it precisely
            raise _import_error(exc, file) from exc
        finally:
            sys.modules.pop(name, None)
    return module



@contextlib.contextmanager
def _own_argv(file: Path) -> Iterator[None]:
    """``sys.argv`` is ``[file]`` while importing, as ``python file`` without arguments would have it: a script that
    parses its arguments at import reads none of autoshard's (``profile model.py --batch-size 4``), so its defaults
    apply, and a usage line it prints names the file, not ``autoshard``."""
    saved = sys.argv
    sys.argv = [str(file)]
    try:
        yield
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _sibling_imports(directory: Path) -> Iterator[None]:
    """Put ``directory`` first on ``sys.path`` while importing; afterwards restore ``sys.path`` and drop the
    sibling modules found through it."""
    root = directory.resolve()
    before = set(sys.modules)
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(root))
        for name in set(sys.modules) - before:
            if _is_sibling(name, sys.modules.get(name), root):
                del sys.modules[name]


def _is_sibling(name: str, module: ModuleType | None, root: Path) -> bool:
    """Whether ``name`` was imported from ``root`` itself: ``root/name.py`` or the package ``root/name/``.

    Packages installed somewhere under ``root`` (a ``.venv`` next to the model file) are not siblings: their
    top-level name is not an entry of ``root``, and they stay imported.
    """
    origin = getattr(module, "__file__", None)
    if not origin:
        return False
    top = name.partition(".")[0]
    path = Path(origin).resolve()
    return path == root / f"{top}.py" or path.is_relative_to(root / top)


def _syntax_error(exc: SyntaxError, file: Path) -> UserCodeError:
    where = exc.filename or str(file)
    location = f"{where}:{exc.lineno}" if exc.lineno else where
    text = exc.text if exc.text is not None else linecache.getline(where, exc.lineno or 0)
    text = text.strip()
    hint = f"    {exc.lineno} | {text}" if text else "Fix the syntax error in your model file."
    return UserCodeError(f"Syntax error in {location}: {exc.msg}", hint=hint, location=location)


def _import_error(exc: Exception, file: Path) -> UserCodeError:
    location = user_frame(exc, str(file))
    where = f" at {location}" if location else ""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        hint = f"Install {exc.name!r} into this Python environment, or fix the import."
    elif isinstance(exc, ImportError):
        hint = "Fix the import (is the installed version the one your model file expects?)."
    else:
        hint = "Fix the error in your model file (run with --debug for the full traceback)."
    return UserCodeError(
        f"Importing {file} raised {type(exc).__name__}{where}: {exc}", hint=hint, location=location
    )


def _check_functions(module: ModuleType, file: Path) -> dict[str, Callable[..., Any]]:
    """The convention's functions defined by ``module``, checked; optional ones only when defined."""
    missing = [name for name in _REQUIRED if not hasattr(module, name)]
    if missing:
        raise _missing_error(module, file, missing)
    found: dict[str, Callable[..., Any]] = {}
    for name in ("model", "batch", "loss", "optimizer"):
        value = getattr(module, name, None)
        if value is None and name not in _REQUIRED:
            continue
        if isinstance(value, nn.Module):
            raise ModelSourceError(
                f"`{name}` in {file} is a module instance ({type(value).__name__}), not a function building one.",
                hint=f"Write `def {name}(): return {type(value).__name__}(...)` so autoshard decides where it "
                "is allocated.",
            )
        if not callable(value):
            raise ModelSourceError(
                f"`{name}` in {file} is a {type(value).__name__}, not a function.",
                hint=f"Define it as a function: {_SIGNATURES[name]}. {_DOCS}",
            )
        _check_signature(value, name, file)
        found[name] = value
    return found


def _check_signature(fn: Callable[..., Any], name: str, file: Path) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and some C callables have no signature; the call itself will tell
    try:
        signature.bind(*_SAMPLE_ARGS[name])
    except TypeError as exc:
        if name == "batch" and "seq_len" in signature.parameters:
            _default_seq_len(fn, file)  # names the missing seq_len default, the likelier mistake
        raise ModelSourceError(
            f"{name}{signature} in {file} cannot be called as {name}({_ARG_NAMES[name]}): {exc}.",
            hint=f"Use {_SIGNATURES[name]}; give any other parameter a default.",
        ) from None


def _missing_error(module: ModuleType, file: Path, missing: list[str]) -> ModelSourceError:
    present = [name for name in ("model", "batch", "loss", "optimizer") if hasattr(module, name)]
    if len(missing) == len(_REQUIRED):
        what = "neither `model()` nor `batch()`"
    else:
        what = f"no `{missing[0]}()` (found: {', '.join(f'{name}()' for name in present)})"
    classes = sorted(
        attr
        for attr, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, nn.Module) and value.__module__ == module.__name__
    )
    factories = sorted(  # build_model(), make_model(), get_model(), ...: the user's own name for model()
        attr for attr, value in vars(module).items()
        if callable(value) and not isinstance(value, type) and "model" in attr.lower() and attr != "model"
        and getattr(value, "__module__", None) == module.__name__)
    also = " and `def batch(batch_size): ...`" if "batch" in missing else ""
    if "model" in missing and factories:
        hint = f"Add `def model(): return {factories[0]}()`{also}, or rename {factories[0]} to model. {_DOCS}"
    elif "model" in missing and len(classes) == 1:
        hint = f"Add `def model(): return {classes[0]}()`{also}. {_DOCS}"
    elif "model" in missing and classes:
        hint = (f"Add `def model():` returning the one of {', '.join(classes)} to train, e.g. "
                f"`return {classes[0]}()`{also}. {_DOCS}")
    else:
        hint = f"A model file defines `def model():` returning the nn.Module and `def batch(batch_size):`. {_DOCS}"
    return ModelSourceError(f"{file} defines {what}.", hint=hint)


def _default_seq_len(batch_fn: Callable[..., Any], file: Path) -> int | None:
    """The default of ``batch``'s ``seq_len`` parameter; ``None`` when it has none (``**kwargs`` or ``=None``)."""
    try:
        parameter = inspect.signature(batch_fn).parameters.get("seq_len")
    except (TypeError, ValueError):
        return None
    if parameter is None or parameter.default is None:
        return None
    if parameter.default is inspect.Parameter.empty:
        raise ModelSourceError(
            f"batch() in {file} requires seq_len but gives it no default.",
            hint="Give it one, e.g. `def batch(batch_size, seq_len=512):`.",
        )
    return _positive_int(parameter.default, f"The seq_len default of batch() in {file}")


def _max_seq_len(module: ModuleType, file: Path) -> int | None:
    value = getattr(module, "MAX_SEQ_LEN", None)
    return None if value is None else _positive_int(value, f"MAX_SEQ_LEN in {file}")


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelSourceError(f"{what} must be a positive int, but got {value!r}.")
    return value
