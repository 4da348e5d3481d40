"""A tuning study as a table in the terminal (``autoshard tune`` prints it when the study ends)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoshard._console import print_table, stdout_console
from autoshard.report import _format as fmt
from autoshard.tuner.result import TrialState, TuneResult

if TYPE_CHECKING:
    from rich.console import Console

_STATE_STYLE = {
    TrialState.COMPLETE: "green",
    TrialState.INFEASIBLE: "yellow",
    TrialState.FAILED: "red",
    TrialState.PRUNED: "dim",
}


def print_summary(result: TuneResult, console: Console | None = None) -> None:
    """Print the trials as a compact table, then the best configuration and the notes.

    Args:
        result: the study's outcome.
        console: where to print; by default stdout, 200 columns wide when it is not a terminal.
    """
    from rich.table import Table
    from rich.text import Text

    if console is None:
        console = stdout_console()
    table = Table(title=Text(f"{result.study_name}: {fmt.counts_line(result)}"), title_justify="left", pad_edge=False)
    keys = [(key, header) for key, _, header in fmt.COLUMNS if key not in fmt.TERMINAL_SKIPS]
    for key, header in keys:
        table.add_column(header, justify="right" if key in fmt.NUMERIC else "left", no_wrap=key != "settings")
    for trial in result.trials:
        cells = fmt.cells(trial, result, short_kind=True)
        is_best = result.best is not None and result.best.number == trial.number
        row = [Text(cells[key]) for key, _ in keys]  # Text: user strings are never read as rich markup
        if trial.state in _STATE_STYLE:
            row[1].stylize(_STATE_STYLE[trial.state])  # the state column
        table.add_row(*row, style="bold" if is_best else None)
    print_table(console, table)
    best = fmt.best_lines(result)
    console.print(Text("Best: ", style="bold") + Text(best[0]))
    for line in best[1:]:
        console.print(Text("  " + line))
    for note in result.notes:
        console.print(Text(note, style="dim"))
