"""Rendering a tuning study for people: ``summary.md`` and ``summary.json``, the terminal table, Optuna's plots
(matplotlib) and the progress bar (rich).

Every view is built from the typed :class:`~autoshard.tuner.result.TuneResult`; only the plots read the Optuna
study itself. The tuner renders nothing: :func:`autoshard.tune` hands it :class:`ProgressDisplay` and
:class:`SummaryWriter` as observers (:class:`~autoshard.tuner.observer.TuneObserver`).
"""

from __future__ import annotations

from autoshard.report.markdown import summary_markdown
from autoshard.report.plots import HISTORY_PNG, IMPORTANCES_PNG, PLOT_HINT, write_plots
from autoshard.report.progress import ProgressDisplay
from autoshard.report.summary import SummaryWriter, write_summary
from autoshard.report.terminal import print_summary

__all__ = [
    "HISTORY_PNG",
    "IMPORTANCES_PNG",
    "PLOT_HINT",
    "ProgressDisplay",
    "SummaryWriter",
    "print_summary",
    "summary_markdown",
    "write_plots",
    "write_summary",
]
