"""The rich console the CLI prints its tables to (rich imported only when something is printed)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


@functools.cache
def _console_class() -> type[Console]:
    """rich's console, told to raise ``BrokenPipeError`` when the reader goes away (defined once, on first use)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _Console


def stdout_console(*, wide_when_piped: bool = True) -> Console:
    """A rich console on stdout: 200 columns wide when stdout is not a terminal (``wide_when_piped``: a table is
    not squeezed into 80 columns in a file), and a reader that stops early (``autoshard ... | head``) raises
    ``BrokenPipeError``, which the CLI answers with 141 as a shell reports SIGPIPE (rich's own answer exits 1, a
    failure to ``set -o pipefail``)."""
    cls = _console_class()
    console = cls()
    return cls(width=200) if wide_when_piped and not console.is_terminal else console


def print_table(console: Console, table: Any) -> None:
    """``console.print(table)``, at the table's own width when the console is narrower: rich would squeeze its
    unwrappable columns to nothing (a 40-column terminal showed recommend's strategy names and no figure), and a
    terminal wraps a long line instead, every figure kept."""
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update(max_width=10_000), table).maximum
    if natural <= console.width:
        console.print(table)
        return
    wide = _console_class()(width=natural, file=console.file, force_terminal=console.is_terminal,
                            color_system=console.color_system, no_color=console.no_color)  # type: ignore[arg-type]
    wide.print(table)
