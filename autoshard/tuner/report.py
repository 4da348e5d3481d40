"""Reporting a tuning study: ``summary.md``, ``summary.json``, a terminal table and Optuna's plots.

Every view is built from the typed :class:`~autoshard.tuner.result.TuneResult`; only the plots read the Optuna
study itself. Numbers are formatted for reading (MiB, ms, samples/s); ``—`` stands for "not known".

Example:
    >>> from autoshard.tuner.result import TrialConfig, TrialRecord, TrialState, TuneResult
    >>> trial = TrialRecord(number=0, state=TrialState.COMPLETE,
    ...                     config=TrialConfig(strategy="ddp", micro_batch_size=4, activation_checkpointing=False),
    ...                     samples_per_s=12.5, peak_memory_bytes=100 * 2**20, peak_memory_kind="cuda_allocated",
    ...                     predicted_peak_bytes=110 * 2**20)
    >>> result = TuneResult(study_name="demo", storage="sqlite:///tune.db", output_dir="out", trials=(trial,),
    ...                     best=trial, best_plan=None)
    >>> md = summary_markdown(result)
    >>> md.splitlines()[0]
    '# autoshard tune: demo'
    >>> "+10.0%" in md
    True
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from autoshard.errors import UsageError
from autoshard.tuner.result import TrialRecord, TrialState, TuneResult

if TYPE_CHECKING:
    import optuna
    from matplotlib.figure import Figure
    from rich.console import Console

MISSING = "—"
"""Shown wherever a value is not known."""
HISTORY_PNG = "optimization_history.png"
IMPORTANCES_PNG = "param_importances.png"
PLOT_HINT = "pip install 'autoshard[plot]'"
_OBJECTIVE_NAME = "Throughput (samples/s)"
_MIB = 2**20

# (key, markdown header, terminal header); the terminal table leaves out the keys in _TERMINAL_SKIPS.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("number", "#", "#"),
    ("state", "state", "state"),
    ("strategy", "strategy", "strategy"),
    ("micro_batch", "micro-batch", "micro"),
    ("checkpointing", "checkpointing", "ckpt"),
    ("settings", "settings", "settings"),
    ("samples_per_s", "samples/s", "samples/s"),
    ("tokens_per_s", "tokens/s", "tokens/s"),
    ("step_ms", "step ms", "step ms"),
    ("peak", "peak MiB (kind)", "peak MiB"),
    ("predicted_peak", "predicted MiB", "pred MiB"),
    ("memory_error", "prediction error", "pred err"),
    ("predicted_samples_per_s", "predicted samples/s", "pred samples/s"),
    ("failure", "failure", "failure"),
    ("cached", "cached", "cached"),
)
_TERMINAL_SKIPS = frozenset({"tokens_per_s", "predicted_samples_per_s"})
_NUMERIC = frozenset({"micro_batch", "samples_per_s", "tokens_per_s", "step_ms", "peak", "predicted_peak",
                      "memory_error", "predicted_samples_per_s"})
"""Right-aligned columns."""
_SHORT_KIND = {"cuda_allocated": "cuda", "host_rss": "rss"}
_STATE_STYLE = {
    TrialState.COMPLETE: "green",
    TrialState.INFEASIBLE: "yellow",
    TrialState.FAILED: "red",
    TrialState.PRUNED: "dim",
}


# --------------------------------------------------------------------------------------------- formatting


def _num(value: float | None) -> str:
    """A number with as many decimals as its size deserves (``1,234`` / ``123`` / ``12.3`` / ``1.23``)."""
    if value is None or not math.isfinite(value):
        return MISSING
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.0f}"
    if size >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _mib(nbytes: int | None) -> str:
    return MISSING if nbytes is None else _num(nbytes / _MIB)


def _percent(fraction: float | None) -> str:
    """``+10.0%``-style signed percentage of a fraction."""
    return MISSING if fraction is None else f"{fraction * 100:+.1f}%"


def _setting_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _settings(settings: dict[str, Any]) -> str:
    """``k=v, k=v`` sorted by name (``—`` when the trial chose none)."""
    if not settings:
        return MISSING
    return ", ".join(f"{k}={_setting_value(v)}" for k, v in sorted(settings.items()))


def _describe_config(trial: TrialRecord) -> str:
    """One line naming a trial's configuration."""
    c = trial.config
    if c is None:
        return "configuration not recorded"
    ckpt = "on" if c.activation_checkpointing else "off"
    text = f"{c.strategy}, micro-batch {c.micro_batch_size}, activation checkpointing {ckpt}"
    return text if not c.settings else f"{text}, settings {_settings(c.settings)}"


def _throughput(trial: TrialRecord) -> str:
    text = f"{_num(trial.samples_per_s)} samples/s"
    if trial.tokens_per_s is not None:
        text += f" ({_num(trial.tokens_per_s)} tokens/s)"
    if trial.step_time_s is not None:
        text += f", step {_num(trial.step_time_s * 1000)} ms"
    return text


def _cells(trial: TrialRecord, result: TuneResult, *, short_kind: bool = False) -> dict[str, str]:
    """Every table cell of one trial, keyed as in :data:`_COLUMNS`."""
    c = trial.config
    tags = [
        tag
        for tag, flag in (
            ("best", result.best is not None and result.best.number == trial.number),
            ("planner", result.planner_trial == trial.number),
        )
        if flag
    ]
    peak = _mib(trial.peak_memory_bytes)
    if trial.peak_memory_bytes is not None and trial.peak_memory_kind:
        kind = _SHORT_KIND.get(trial.peak_memory_kind, trial.peak_memory_kind) if short_kind else trial.peak_memory_kind
        peak = f"{peak} ({kind})"
    step_ms = None if trial.step_time_s is None else trial.step_time_s * 1000
    return {
        "number": str(trial.number) + (f" ({', '.join(tags)})" if tags else ""),
        "state": trial.state.value,
        "strategy": MISSING if c is None else c.strategy,
        "micro_batch": MISSING if c is None else str(c.micro_batch_size),
        "checkpointing": MISSING if c is None else ("yes" if c.activation_checkpointing else "no"),
        "settings": MISSING if c is None else _settings(c.settings),
        "samples_per_s": _num(trial.samples_per_s),
        "tokens_per_s": _num(trial.tokens_per_s),
        "step_ms": _num(step_ms),
        "peak": peak,
        "predicted_peak": _mib(trial.predicted_peak_bytes),
        "memory_error": _percent(trial.memory_error),
        "predicted_samples_per_s": _num(trial.predicted_samples_per_s),
        "failure": MISSING if trial.failure is None else trial.failure.value,
        "cached": "yes" if trial.cached else "no",
    }


def _counts_line(result: TuneResult) -> str:
    counts = result.counts()
    parts = [f"{counts[s.value]} {s.value}" for s in TrialState if counts.get(s.value)]
    total = len(result.trials)
    return f"{total} trial{'' if total == 1 else 's'}" + (f": {', '.join(parts)}" if parts else "")


def _best_lines(result: TuneResult) -> list[str]:
    """The "Best" section as plain sentences."""
    best = result.best
    if best is None:
        return ["No trial completed with a measurement."]
    lines = [f"Trial {best.number}: {_describe_config(best)}.", f"Throughput: {_throughput(best)}."]
    if result.planner_trial is not None:
        lines.append(_planner_comparison(result, best, result.planner_trial))
    if result.exported:
        lines.append("Exported: " + ", ".join(result.exported) + ".")
    return lines


def _planner_comparison(result: TuneResult, best: TrialRecord, planner_number: int) -> str:
    """How the best trial compares with the trial that ran the planner's recommendation."""
    if planner_number == best.number:
        return f"This is the planner's own recommendation (trial {planner_number})."
    planner = next((t for t in result.trials if t.number == planner_number), None)
    if planner is None:
        return f"The planner's recommendation (trial {planner_number}) is not among the recorded trials."
    if not planner.samples_per_s or not best.samples_per_s:
        why = planner.state.value + ("" if planner.failure is None else f", {planner.failure.value}")
        return f"The planner's recommendation (trial {planner_number}) has no throughput to compare with ({why})."
    gain = best.samples_per_s / planner.samples_per_s - 1
    word = "faster" if gain >= 0 else "slower"
    return (
        f"{abs(gain) * 100:.1f}% {word} than the planner's recommendation "
        f"(trial {planner_number}: {_num(planner.samples_per_s)} samples/s)."
    )


def _md_cell(text: str) -> str:
    """Text safe inside a markdown table cell (no pipes, no line breaks)."""
    return text.replace("|", "\\|").replace("\n", " ")


# --------------------------------------------------------------------------------------------- markdown


def summary_markdown(result: TuneResult, *, plots: Sequence[str] = (), extra_notes: Sequence[str] = ()) -> str:
    """The study as a markdown document: counts, one table row per trial, the best configuration, notes.

    Args:
        result: the study's outcome.
        plots: image paths, relative to where the document is written, to embed under "Plots".
        extra_notes: notes to list after ``result.notes`` (e.g. why a plot could not be drawn).

    Returns:
        The document, ending with a newline.
    """
    lines = [
        f"# autoshard tune: {result.study_name}",
        "",
        f"Storage: `{result.storage}` · output: `{result.output_dir}`",
        "",
        f"**Trials:** {_counts_line(result)}.",
        "",
        "| " + " | ".join(header for _, header, _ in _COLUMNS) + " |",
        "|" + "|".join("---:" if key in _NUMERIC else "---" for key, _, _ in _COLUMNS) + "|",
    ]
    for trial in result.trials:
        cells = _cells(trial, result)
        lines.append("| " + " | ".join(_md_cell(cells[key]) for key, _, _ in _COLUMNS) + " |")
    messages = [t for t in result.trials if t.message]
    if messages:
        lines += ["", "## Trial messages", ""]
        lines += [f"- Trial {t.number}: {_md_cell(t.message or '')}" for t in messages]
    lines += ["", "## Best", ""]
    lines += [f"- {line}" for line in _best_lines(result)]
    if plots:
        lines += ["", "## Plots", ""]
        for p in plots:
            lines += [f"![{Path(p).stem.replace('_', ' ')}]({Path(p).as_posix()})", ""]
        lines.pop()
    notes = [*result.notes, *extra_notes]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- terminal


def print_summary(result: TuneResult, console: Console | None = None) -> None:
    """Print the trials as a compact table, then the best configuration and the notes.

    Args:
        result: the study's outcome.
        console: where to print; by default stdout, 200 columns wide when it is not a terminal.
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=200)  # piped output: do not squeeze the table into 80 columns
    table = Table(title=Text(f"{result.study_name}: {_counts_line(result)}"), title_justify="left", pad_edge=False)
    keys = [(key, header) for key, _, header in _COLUMNS if key not in _TERMINAL_SKIPS]
    for key, header in keys:
        table.add_column(header, justify="right" if key in _NUMERIC else "left", no_wrap=key != "settings")
    for trial in result.trials:
        cells = _cells(trial, result, short_kind=True)
        is_best = result.best is not None and result.best.number == trial.number
        row = [Text(cells[key]) for key, _ in keys]  # Text: user strings are never read as rich markup
        if trial.state in _STATE_STYLE:
            row[1].stylize(_STATE_STYLE[trial.state])  # the state column
        table.add_row(*row, style="bold" if is_best else None)
    console.print(table)
    best = _best_lines(result)
    console.print(Text("Best: ", style="bold") + Text(best[0]))
    for line in best[1:]:
        console.print(Text("  " + line))
    for note in result.notes:
        console.print(Text(note, style="dim"))


# --------------------------------------------------------------------------------------------- plots


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
    except ImportError:
        return [], [f"No plots drawn: matplotlib is not installed ({PLOT_HINT})."]

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


# --------------------------------------------------------------------------------------------- files


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
