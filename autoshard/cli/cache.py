"""``autoshard cache``: where the workload cache is, what it holds, and clearing it."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from autoshard.cli._format import gib, print_json

if TYPE_CHECKING:
    from autoshard.cache import CacheEntry

NAME = "cache"
HELP = "Show or clear the workload cache (the traced training steps recommend reuses)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``cache`` flags."""
    parser.add_argument("action", choices=("dir", "info", "list", "clear"), nargs="?", default="info",
                        metavar="{dir,info,list,clear}",  # argparse's refusal names the metavar, not "action"
                        help="dir: print its path; info (default): entries and size; list: each entry's model, "
                             "options and whether this install still reads it; clear: delete every entry")
    parser.add_argument("--stale", action="store_true",
                        help="with clear: delete only the entries this install never reads (traced by another "
                             "torch, transformers, Python or autoshard)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    """Run ``autoshard cache``."""
    from autoshard.cache import ENV_VAR, cache_root, clear, file_in_the_way, list_entries, usage, workloads_dir
    from autoshard.errors import UsageError

    if args.stale and args.action != "clear":
        raise UsageError(f"--stale goes with `autoshard cache clear`, not `{args.action}`.")
    directory = workloads_dir(os.environ)  # the edge: AUTOSHARD_CACHE_DIR / XDG_CACHE_HOME are read here
    blocker = file_in_the_way(directory) if args.action != "dir" else None
    if blocker is not None:  # it answered "0 workload(s)" for a cache that can never hold one
        named = f" ({ENV_VAR} names a file)" if os.environ.get(ENV_VAR) and blocker == cache_root(os.environ) else ""
        raise UsageError(f"the workload cache {directory} cannot exist: {blocker} is a file, not a "
                         f"directory{named}.", hint=f"Set {ENV_VAR} to a directory.")
    if args.action == "dir":
        if args.json:
            print_json({"directory": str(directory)})
        else:
            print(directory)
        return 0
    if args.action == "clear":
        try:
            done = clear(directory, stale_only=args.stale)
        except OSError as exc:
            raise UsageError(f"cannot clear {directory}: {exc.strerror or exc}.") from None
        if args.json:
            print_json({"cleared": done.to_dict()})
        else:
            which = "stale workload(s)" if args.stale else "workload(s)"
            print(f"Removed {done.entries} {which}, {gib(done.size_bytes)}, from {directory}.")
        return 0
    if args.action == "list":
        listed = list_entries(directory)
        if args.json:
            print_json({"directory": str(directory), "entries": [e.to_dict() for e in listed]})
        else:
            print(f"{directory}: {len(listed)} workload(s)")
            for line in _entry_lines(listed):
                print(line)
            if any(e.stale for e in listed):
                print("A stale entry is never read here: `autoshard cache clear --stale` deletes them.")
        return 0
    held = usage(directory)
    if args.json:
        print_json(held.to_dict())
    else:
        print(f"{directory}: {held.entries} workload(s), {gib(held.size_bytes)}. "
              "`autoshard cache clear` deletes them.")
    return 0


def _entry_lines(listed: list[CacheEntry]) -> list[str]:
    """One line per entry: the model, what its step was traced with, its size, and why it is stale."""
    lines = []
    for entry in listed:
        key = entry.key or {}
        seq, impl = key.get("seq_len"), key.get("optimizer_impl")
        optimizer = key.get("optimizer") if impl is None else f"{key.get('optimizer')} ({impl})"
        traced = ", ".join(str(part) for part in (
            key.get("precision"), optimizer, None if seq is None else f"seq {seq}",
            _checkpointing(key), key.get("target")) if part)
        stale = f"  stale: {entry.stale}" if entry.stale else ""
        lines.append(f"  {key.get('model', entry.path.name)}  {traced or '-'}  {gib(entry.size_bytes)}{stale}")
    return lines


def _checkpointing(key: dict[str, Any]) -> str | None:
    choices = key.get("checkpointing")
    if not isinstance(choices, list) or not any(choices):
        return None
    mode = key.get("checkpoint_mode", "full")
    return f"checkpointing {mode}" if all(choices) else f"without and with checkpointing {mode}"
