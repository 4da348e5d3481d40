"""The files a tuning study leaves in its output directory: ``summary.md``, ``summary.json`` and the plots."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from autoshard.errors import UsageError
from autoshard.report.markdown import summary_markdown
from autoshard.report.plots import write_plots
from autoshard.tuner.observer import TuneObserver
from autoshard.tuner.result import TuneResult

if TYPE_CHECKING:
    import optuna


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}.",
                         hint="choose a writable output directory") from exc


def write_summary(
    result: TuneResult, study: optuna.study.Study | None, directory: Path
) -> tuple[list[Path], list[str]]:
    """Write ``summary.md``, ``summary.json`` and, given the study, its plots under ``plots/``.

    Args:
        result: the study's outcome.
        study: the Optuna study the plots are drawn from; ``None`` writes no plots.
        directory: the output directory; created if missing.

    Returns:
        The paths written (``summary.md``, ``summary.json``, then the plots) and the notes on plots not drawn.

    Raises:
        UsageError: the directory cannot be created or a file cannot be written.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create the output directory {directory}: {exc.strerror or exc}.",
            hint="choose a writable output directory",
        ) from exc
    plots: list[Path] = []
    notes: list[str] = []
    if study is not None:
        plots, notes = write_plots(study, directory / "plots")
    md_path, json_path = directory / "summary.md", directory / "summary.json"
    relative = [p.relative_to(directory).as_posix() for p in plots]
    _write_text(md_path, summary_markdown(result, plots=relative, extra_notes=notes))
    _write_text(json_path, json.dumps(result.to_dict(), indent=2) + "\n")
    return [md_path, json_path, *plots], notes


class SummaryWriter(TuneObserver):
    """Writes the summary files into the study's output directory once its result is settled
    (:func:`write_summary`); the notes on plots not drawn join the result's."""

    def study_finished(self, result: TuneResult, study: optuna.Study) -> Sequence[str]:
        _, notes = write_summary(result, study, Path(result.output_dir))
        return notes
