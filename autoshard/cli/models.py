"""``autoshard models``: list the built-in catalog."""

from __future__ import annotations

import argparse
from typing import Any

from autoshard.cli._format import count, print_json

NAME = "models"
HELP = "List the built-in model catalog."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``models`` flags."""
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    """Run ``autoshard models``."""
    from autoshard.models.catalog.listing import LISTING  # data: no torch, no model built

    rows: list[dict[str, Any]] = [entry.to_dict() for entry in LISTING]
    if args.json:
        print_json(rows)
        return 0
    from rich.table import Table

    from autoshard._console import print_table, stdout_console

    table = Table(title="autoshard catalog", title_justify="left")
    for col in ("name", "parameters", "default seq len"):
        table.add_column(col, justify="left" if col == "name" else "right")
    for r in rows:
        table.add_row(r["name"], count(r["parameters"]), str(r["default_seq_len"] or "—"))
    print_table(stdout_console(wide_when_piped=False), table)
    return 0
