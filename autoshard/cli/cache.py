"""``autoshard cache``: where the workload cache is, what it holds, and clearing it."""

from __future__ import annotations

import argparse
import os

from autoshard.cli._format import gib, print_json

NAME = "cache"
HELP = "Show or clear the workload cache (the traced training steps recommend reuses)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``cache`` flags."""
    parser.add_argument("action", choices=("dir", "info", "clear"), nargs="?", default="info",
                        help="dir: print its path; info (default): entries and size; clear: delete every entry")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    """Run ``autoshard cache``."""
    from autoshard.cache import clear, usage, workloads_dir
    from autoshard.errors import UsageError

    directory = workloads_dir(os.environ)  # the edge: AUTOSHARD_CACHE_DIR / XDG_CACHE_HOME are read here
    if args.action == "dir":
        if args.json:
            print_json({"directory": str(directory)})
        else:
            print(directory)
        return 0
    if args.action == "clear":
        try:
            done = clear(directory)
        except OSError as exc:
            raise UsageError(f"cannot clear {directory}: {exc.strerror or exc}.") from None
        if args.json:
            print_json({"cleared": done.to_dict()})
        else:
            print(f"Removed {done.entries} workload(s), {gib(done.size_bytes)}, from {directory}.")
        return 0
    held = usage(directory)
    if args.json:
        print_json(held.to_dict())
    else:
        print(f"{directory}: {held.entries} workload(s), {gib(held.size_bytes)}. "
              "`autoshard cache clear` deletes them.")
    return 0
