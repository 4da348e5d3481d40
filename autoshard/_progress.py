"""A progress bar on stderr while ``recommend`` traces the model (10-60 s for a large one): the CLI's, and
``autoshard.recommend(progress=True)``'s."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TextIO

Progress = Callable[[int, int], None]


@contextlib.contextmanager
def tracing_progress(*, enabled: bool = True, stream: TextIO | None = None) -> Iterator[Progress | None]:
    """Yield a ``progress(done, total)`` callback drawing a bar on ``stream`` (default stderr), or ``None``.

    The bar is drawn only when ``enabled`` and the stream is a terminal: a log file or a pipe gets nothing, and
    the bar disappears when tracing ends.
    """
    stream = sys.stderr if stream is None else stream
    if not enabled or not stream.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    with Bar(SpinnerColumn(), TextColumn("Tracing the training step"), BarColumn(), MofNCompleteColumn(),
             TimeElapsedColumn(), console=Console(file=stream), transient=True) as bar:
        task = bar.add_task("trace", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield progress
