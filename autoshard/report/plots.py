"""Optuna's optimization history and parameter importance plots of a tuning study, as PNG files."""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autoshard.errors import UsageError
from autoshard.report.matplotlib_use import PLOT_HINT, matplotlib_unusable

if TYPE_CHECKING:
    import optuna
    from matplotlib.figure import Figure

HISTORY_PNG = "optimization_history.png"
IMPORTANCES_PNG = "param_importances.png"
_OBJECTIVE_NAME = "Throughput (samples/s)"


def _complete_trials(study: optuna.study.Study) -> list[optuna.trial.FrozenTrial]:
    """Complete trials with a finite objective (infeasible ones included: they are complete with 0)."""
    import optuna

    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return [t for t in trials if t.value is not None and math.isfinite(t.value)]


def _importance_blocker(trials: Sequence[optuna.trial.FrozenTrial]) -> str | None:
    """Why no parameter importance can be assessed, or ``None`` when at least one parameter can.

    Optuna 5's default evaluator (PED-ANOVA, ``optuna.importance.PedAnovaImportanceEvaluator``) assesses a
    parameter within each of its regimes (the trials sharing one distribution), keeping a regime only with at
    least 2 trials; a regime whose trials all took one value contributes nothing. Other evaluators use only the
    parameters present in every completed trial. Without any such parameter every importance is zero and Optuna
    normalises them to equal shares, which would be a misleading plot.
    """
    if all(any(v > 0 for v in t.constraints.values()) for t in trials):
        return "no trial completed: each one ran out of memory or was predicted to (recorded as throughput 0)"
    if len({t.value for t in trials}) < 2:
        return "every completed trial has the same throughput, so no parameter made a difference"
    values: dict[tuple[str, Any], list[Any]] = {}
    for trial in trials:
        for name, dist in trial.distributions.items():
            values.setdefault((name, dist), []).append(trial.params[name])
    if any(len(v) >= 2 and len(set(map(repr, v))) >= 2 for v in values.values()):
        return None
    if not values:
        return "the completed trials have no parameters"
    return (
        "no parameter took two different values across the completed trials, so Optuna cannot rank them "
        "(a strategy's knobs, named like ddp/bucket_cap_mb, are suggested only in that strategy's trials)"
    )


def _save(ax: Any, path: Path) -> None:
    """Save the figure holding ``ax`` and close it."""
    import matplotlib.pyplot as plt

    fig = ax.figure
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")  # tight: the history legend sits right of the axes
    except OSError as exc:
        raise UsageError(f"cannot write the plot {path}: {exc.strerror or exc}.") from exc
    finally:
        plt.close(fig)


def write_plots(study: optuna.study.Study, directory: Path) -> tuple[list[Path], list[str]]:
    """Write Optuna's optimization history and parameter importance plots as PNG files.

    Infeasible trials (out of memory: complete with value 0 and a positive ``oom`` constraint) are drawn in
    grey by Optuna's history plot and are left out of its best-value line; the importances count them as the
    study does, with throughput 0.

    Args:
        study: the tuning study (single objective, maximised throughput).
        directory: where to write ``optimization_history.png`` and ``param_importances.png``; created if missing.

    Returns:
        The paths written, and one sentence for each plot that could not be drawn, saying why.

    Raises:
        UsageError: the directory or a plot cannot be written.
    """
    why = matplotlib_unusable()
    if why is not None:
        return [], [f"No plots drawn: {why} ({PLOT_HINT})."]
    try:
        import matplotlib

        if "matplotlib.pyplot" not in sys.modules:
            matplotlib.use("Agg")  # headless; a program that already chose a backend keeps it (savefig works)
        import matplotlib.pyplot  # fails here rather than halfway through a plot
        from matplotlib.ticker import MaxNLocator
        from optuna.exceptions import ExperimentalWarning
        from optuna.visualization.matplotlib import (
            plot_optimization_history,
            plot_param_importances,
        )
    except ImportError as exc:
        return [], [f"No plots drawn: matplotlib cannot be imported ({exc}; {PLOT_HINT})."]

    trials = _complete_trials(study)
    if len(trials) < 2:
        have = f"{len(trials)} complete trial" + ("" if len(trials) == 1 else "s")
        return [], [f"No plots drawn: the study has {have} and the plots need at least 2."]
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the plot directory {directory}: {exc.strerror or exc}.") from exc

    written: list[Path] = []
    notes: list[str] = []
    # rc_context undoes the ggplot style Optuna sets globally; the warnings are Optuna's experimental API and its
    # small-sample remarks on importances, which say nothing the notes do not.
    with matplotlib.rc_context(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        try:
            ax = plot_optimization_history(study, target_name=_OBJECTIVE_NAME)
        except ValueError as exc:
            notes.append(f"{HISTORY_PNG} not drawn: Optuna could not plot the history ({exc}).")
        else:
            if any(any(v > 0 for v in t.constraints.values()) for t in trials):
                # Optuna draws infeasible trials in grey without a legend entry: name them.
                ax.scatter([], [], color="#cccccc", label="Infeasible (out of memory, recorded as 0)")
                ax.legend(bbox_to_anchor=(1.05, 1.0), loc="upper left")  # Optuna's placement, with the entry
            cast("Figure", ax.figure).set_size_inches(9.6, 4.8)  # the legend sits right of the axes: give the axes room
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # trial numbers
            _save(ax, directory / HISTORY_PNG)
            written.append(directory / HISTORY_PNG)

        blocker = _importance_blocker(trials)
        if blocker is not None:
            notes.append(f"{IMPORTANCES_PNG} not drawn: {blocker}.")
        else:
            warnings.filterwarnings("ignore", message=r"(Some regimes|Target and region|The number of trials)")
            try:
                ax = plot_param_importances(study, target_name=_OBJECTIVE_NAME)
            except (ValueError, RuntimeError) as exc:
                notes.append(f"{IMPORTANCES_PNG} not drawn: Optuna could not assess the importances ({exc}).")
            else:
                _save(ax, directory / IMPORTANCES_PNG)
                written.append(directory / IMPORTANCES_PNG)
    return written, notes
