"""The ``autoshard`` command: a thin shell over the public API.

Each subcommand lives in its own module exposing ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. Errors autoshard raises on purpose are printed as one or two lines with their exit code;
anything else is reported as an internal error. ``--debug`` shows full tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from difflib import get_close_matches
from types import ModuleType
from typing import Any, NoReturn

from autoshard.cli._encoding import plain_where_unencodable
from autoshard.errors import AutoshardError, command_line

SUBCOMMANDS = ("recommend", "compare", "profile", "tune", "hardware", "models", "export", "cache")
"""The subcommands, in the order ``--help`` lists them; each is the module ``autoshard.cli.<name>``."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with its errors as two lines (what is wrong, where the flags are) instead of the usage
    block: the message argparse writes, a close flag name for a mistyped one, and the ``--help`` to run."""

    json_errors = False
    """Also print the error as ``{"error": ...}`` on stdout (the command line asked for ``--json``)."""

    def error(self, message: str) -> NoReturn:
        unknown = re.fullmatch(r"unrecognized arguments: (.*)", message)
        if unknown:
            flags = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            words = unknown.group(1).split()
            close = [c for w in words if w.startswith("--") for c in get_close_matches(w.split("=")[0], flags, 1, 0.8)]
            if close:
                message += f" (did you mean {', '.join(dict.fromkeys(close))}?)"
        hint = f"Run '{self.prog} --help' for its flags."
        if self.json_errors:
            _print_error_json("UsageError", message, hint, 2)
        self.exit(2, f"{self.prog}: error: {message}\n  {hint}\n")


def _json_errors(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Make ``parser`` and its subcommands' parsers print flag errors as JSON too when ``argv`` asks for
    ``--json`` (before a ``--``)."""
    words = list(argv)
    wanted = "--json" in (words[:words.index("--")] if "--" in words else words)
    parsers = [parser, *(p for a in parser._actions if isinstance(a, argparse._SubParsersAction)
                         for p in a.choices.values())]
    for each in parsers:
        if isinstance(each, _Parser):
            each.json_errors = wanted


def _subcommand(name: str) -> ModuleType:
    return importlib.import_module(f"autoshard.cli.{name}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser (exposed for docs and tests).

    Args:
        command: add only this subcommand's flags (the others are listed with their help line). A subcommand's
            flags may import what they describe (hardware profiles, precisions), so ``main`` builds only the
            one it runs, and ``autoshard --version`` / ``--help`` import neither torch nor the planner.
    """
    from autoshard import __version__

    parser = _Parser(
        prog="autoshard",
        description="Plan and run distributed training of a PyTorch model (DDP, FSDP, DeepSpeed ZeRO).",
    )
    parser.add_argument("--version", action="version", version=f"autoshard {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = _subcommand(name)
        sp = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show full tracebacks")
        if command is None or command == name:
            module.add_arguments(sp)
        sp.set_defaults(_run=module.run, _parser=sp)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not a flag (the top-level flags take no value)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in SUBCOMMANDS else None


_FLAGS = {"force=True": "--force"}
"""Python arguments the library's hints name, and the flag that says the same on the command line."""


def _in_flags(hint: str) -> str:
    """A library hint in the command line's terms.

    Example:
        >>> _in_flags("Pass force=True to replace them.")
        'Pass --force to replace them.'
    """
    for argument, flag in _FLAGS.items():
        hint = hint.replace(argument, flag)
    return hint


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``autoshard`` console script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    plain_where_unencodable()
    parser = build_parser(_command(argv) or "")
    _json_errors(parser, argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the subcommand's parser names its own flags in the error
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    debug = bool(getattr(args, "debug", False))
    as_json = bool(getattr(args, "json", False))
    try:
        with command_line(), _sigterm_as_interrupt():  # the library's errors keep naming flags
            if as_json:
                from autoshard.cli._format import json_only_stdout

                with json_only_stdout():
                    return int(args._run(args) or 0)
            return int(args._run(args) or 0)
    except AutoshardError as exc:
        if debug:  # the traceback first; the answer, its JSON document and its exit code as without --debug
            traceback.print_exc()
        print(f"autoshard: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  {_in_flags(exc.hint)}", file=sys.stderr)
        if as_json:  # a script reading stdout gets the error too, as the one JSON document there
            hint = None if exc.hint is None else _in_flags(exc.hint)
            _print_error_json(type(exc).__name__, exc.message, hint, exc.exit_code,
                              getattr(exc, "candidates", ()))
        return exc.exit_code
    except KeyboardInterrupt as exc:
        how, code = ("terminated (SIGTERM)", 143) if isinstance(exc, _Terminated) else ("interrupted", 130)
        print(f"autoshard: {how}", file=sys.stderr)
        if as_json:
            _print_error_json("Interrupted", how, None, code)
        for stream in (sys.stdout, sys.stderr):  # said now, whatever ends the process after (a second signal)
            with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed: nothing to say it on
                stream.flush()
        return code
    except BrokenPipeError:
        # The reader stopped early (`autoshard recommend ... | head`): nothing is wrong, and Python would complain
        # again when it flushes stdout at exit, so stdout goes to /dev/null (the Python docs' recipe, "Note on
        # SIGPIPE"). 141 is what a shell reports for a process a SIGPIPE ended.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as exc:  # noqa: BLE001 — the outermost shell reports internal errors without a traceback
        if debug:
            traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}"
        hint = "This is a bug in autoshard; rerun with --debug and report the traceback."
        print(f"autoshard: internal error: {message}", file=sys.stderr)
        print(f"  {hint}", file=sys.stderr)
        if as_json:
            _print_error_json("InternalError", message, hint, 1)
        return 1


class _Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a scheduler's time limit), raised where the command is, as Ctrl-C is."""


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds the command as Ctrl-C does (its cleanup runs, one line says so, exit 143); by default it
    ended ``recommend`` or ``profile`` with no word (a concurrency probe). A command that handles SIGTERM itself
    (``tune``) installs its own handler inside; off the main thread, signals are not ours to take."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: Any) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_error_json(kind: str, message: str, hint: str | None, exit_code: int,
                      candidates: Sequence[Any] = ()) -> None:
    """``{"error": {type, message, hint, exit_code[, candidates]}}`` on stdout: what ``--json`` prints when the
    command fails (``type``: the exception's class, ``UsageError`` for a flag argparse refused, ``InternalError``
    for a bug; ``candidates``: what nothing-fits weighed)."""
    from autoshard.cli._format import print_json

    error: dict[str, Any] = {"type": kind, "message": message, "hint": hint, "exit_code": exit_code}
    if candidates:
        error["candidates"] = list(candidates)
    print_json({"error": error})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
