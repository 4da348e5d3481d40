"""Which of a script's ``fit()`` calls a worker process is for.

When ``fit()`` starts its workers, each runs the user's script again from the top (:mod:`.supervisor`), and so
reaches every ``fit()`` call the script made before the one that started it: a second configuration compared
with the first, a fine-tuning phase after pre-training, a loop over learning rates. Each call is named by where
the user's code makes it and how many times it was made there before (:func:`call_key`), the same in the
launching process and in its workers. The launching process records what each call returned or raised
(:func:`record`) and hands the records to the workers it starts (:func:`write`); a worker replays them for the
calls before its own and trains at the call that started it only (:func:`at_worker`). Without this, the
workers of a second call trained the first call's model and data with the second call's plan.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, ParamSpec

from autoshard.errors import AutoshardError, UsageError
from autoshard.runtime.result import FitResult

P = ParamSpec("P")

CALLS_FILE = "calls.json"
"""In a run directory: the call the workers were started for, and the outcomes of the calls before it."""

SEPARATOR = " < "
_made: Counter[str] = Counter()
_outcomes: dict[str, FitResult | dict[str, Any]] = {}
"""Each call's result (without its model and weights: the steps are shared, not copied) or error record."""
_current: list[tuple[str, dict[str, Any]]] = []


def identified(fit: Callable[P, FitResult]) -> Callable[P, FitResult]:
    """``fit`` with its calls named (:func:`call_key`): in a worker ``fit()`` started, a call before the workers'
    own returns (or raises) what it did in the launching process, without training, and the workers' own call
    trains; anywhere else each call runs and its outcome is recorded for workers started later (:func:`write`).
    The model of a replayed call is this process's, untrained: the call that trains loads the launching process's
    weights (``fit()``'s run directory), so what earlier calls taught the model is not lost."""

    @functools.wraps(fit)
    def call(*args: P.args, **kwargs: P.kwargs) -> FitResult:
        from autoshard.runtime import supervisor

        key, summary = call_key(), call_summary(args, kwargs)
        run_dir = os.environ.get(supervisor.RUN_DIR_VAR)
        if run_dir is not None:
            try:
                outcome = at_worker(Path(run_dir), key, summary)
            except AutoshardError as e:
                supervisor.write_error(Path(run_dir), int(os.environ.get("RANK", "0")), e)
                raise
            if outcome is not None:
                return _replay(outcome, args[0] if args else kwargs.get("model"))
        _current.append((key, summary))
        try:
            result = fit(*args, **kwargs)
        except Exception as e:
            record(key, error=e)
            raise
        finally:
            _current.pop()
        record(key, result=result)
        return result

    return call


def call_key() -> str:
    """This ``fit()`` call's name: the lines of the user's code on the call stack (every frame outside
    autoshard, innermost first: a helper that calls ``fit()`` is told apart by its callers), and how many times
    a call was made from there in this process (``script.py:12 < script.py:30#2``)."""
    frame: FrameType | None = sys._getframe(1)
    lines = []
    while frame is not None:
        if not _ours(frame):
            lines.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
        frame = frame.f_back
    site = SEPARATOR.join(lines) or "an unknown place"
    _made[site] += 1
    return f"{site}#{_made[site]}"


def record(key: str, *, result: FitResult | None = None, error: Exception | None = None) -> None:
    """Remember what call ``key`` returned or raised, for workers started later."""
    if error is not None:
        _outcomes[key] = {"error": {"type": type(error).__name__, "message": getattr(error, "message", str(error)),
                                    "hint": getattr(error, "hint", None),
                                    "autoshard": isinstance(error, AutoshardError)}}
    elif result is not None:
        _outcomes[key] = dataclasses.replace(result, model=None, state_dict=None)


def write(run_dir: Path) -> None:
    """Tell the workers started in ``run_dir`` that they are for the call under way, and what the earlier
    calls did."""
    if _current:
        earlier = {key: outcome if isinstance(outcome, dict) else {"result": outcome.to_dict()}
                   for key, outcome in _outcomes.items()}
        target, summary = _current[-1]
        (run_dir / CALLS_FILE).write_text(json.dumps({"target": target, "summary": summary, "earlier": earlier}),
                                          encoding="utf-8")


def call_summary(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a ``fit()`` call trains, in a few JSON values: the model (class and parameter count, or the source
    named), the data (type, length, a loader's batch size) and the run's length and batch arguments."""
    from torch import nn

    model = args[0] if args else kwargs.get("model")
    data = args[1] if len(args) > 1 else kwargs.get("data")
    if isinstance(model, nn.Module):
        described = f"{type(model).__name__} of {sum(p.numel() for p in model.parameters()):,} parameters"
    else:
        described = str(getattr(model, "origin", model))
    shape: list[Any] = [type(data).__name__]
    if hasattr(data, "__len__"):
        with contextlib.suppress(TypeError):  # a DataLoader over an IterableDataset without a length
            shape.append(len(data))  # type: ignore[arg-type]  # it has __len__
    shape.append(getattr(data, "batch_size", None))
    return {"model": described, "data": shape,
            **{name: kwargs.get(name) for name in ("max_steps", "epochs", "batch_size", "global_batch_size")}}


def at_worker(run_dir: Path, key: str, summary: dict[str, Any]) -> dict[str, Any] | None:
    """In a worker, at call ``key`` training what ``summary`` says (:func:`call_summary`): ``None`` to train (the
    call the workers were started for — by its name, or the same call reached along another path of the script,
    as a script that sends its workers straight to ``fit()`` does — or a worker that runs one job, ``python -m
    autoshard.runtime.worker``); else the launching process's outcome of this earlier call to replay
    (``{"result": ...}`` or ``{"error": ...}``).

    Raises:
        UsageError: the launching process made no such call before the workers' own, and this one trains
            something else (the script took another path in the worker).
    """
    path = run_dir / CALLS_FILE
    if not path.is_file():
        return None
    calls = json.loads(path.read_text(encoding="utf-8"))
    if key == calls["target"]:
        return None
    earlier: dict[str, dict[str, Any]] = calls["earlier"]
    if key in earlier:
        return earlier[key]
    if summary == calls.get("summary"):
        return None
    raise UsageError(
        f"a worker running your script again reached a fit() call ({_where(key)}: {_said(summary)}) that the "
        f"launching process did not make before the one it started the workers for ({_where(calls['target'])}: "
        f"{_said(calls.get('summary') or {})}).",
        hint="The script must make the same fit() calls in the workers: do not let `autoshard.is_worker()` or "
             "anything else that differs there decide which run; or launch every rank with torchrun.")


def _said(summary: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in summary.items() if v is not None)


def _replay(outcome: dict[str, Any], model: Any) -> FitResult:
    from torch import nn

    from autoshard.runtime.supervisor import rebuild_error

    if "error" in outcome:
        error = outcome["error"]
        if error.get("autoshard", True):
            raise rebuild_error(error["type"], error["message"], error["hint"])
        builtin = getattr(builtins, error["type"], None)  # what the user's own `except TypeError:` caught there
        if isinstance(builtin, type) and issubclass(builtin, Exception):
            raise builtin(error["message"])
        raise RuntimeError(f"{error['type']}: {error['message']}")
    return FitResult.from_dict(outcome["result"], model=model if isinstance(model, nn.Module) else None)


def _ours(frame: FrameType) -> bool:
    name = str(frame.f_globals.get("__name__", ""))
    return name == "autoshard" or name.startswith("autoshard.")


def _where(key: str) -> str:
    """The user's line of a call, and which call from there."""
    site, _, count = key.rpartition("#")
    line = site.split(SEPARATOR, 1)[0]
    return line if count == "1" else f"{line}, call {count} from there"
