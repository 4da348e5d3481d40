"""A tuning study as a markdown document (``summary.md``).

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

from collections.abc import Sequence
from pathlib import Path

from autoshard.report import _format as fmt
from autoshard.tuner.result import TuneResult

CPU_PREDICTION_NOTE = ("No predicted samples/s column: on a CPU the planner's speed is a placeholder for ranking "
                       "its candidates, not a prediction (summary.json keeps it as predicted_samples_per_s).")


def summary_markdown(result: TuneResult, *, plots: Sequence[str] = (), extra_notes: Sequence[str] = ()) -> str:
    """The study as a markdown document: counts, one table row per trial, the best configuration, notes.

    Args:
        result: the study's outcome.
        plots: image paths, relative to where the document is written, to embed under "Plots".
        extra_notes: notes to list after ``result.notes`` (e.g. why a plot could not be drawn).

    Returns:
        The document, ending with a newline.
    """
    # On a CPU the planner's speed is a placeholder for ranking, 10-20x off a measurement: not shown beside one.
    cpu = result.device_type == "cpu"
    columns = [(key, header) for key, header, _ in fmt.COLUMNS if not (cpu and key == "predicted_samples_per_s")]
    lines = [
        f"# autoshard tune: {result.study_name}",
        "",
        f"Storage: `{result.storage}` · output: `{result.output_dir}`",
        "",
        f"**Trials:** {fmt.counts_line(result)}.",
        "",
        "| " + " | ".join(header for _, header in columns) + " |",
        "|" + "|".join("---:" if key in fmt.NUMERIC else "---" for key, _ in columns) + "|",
    ]
    for trial in result.trials:
        cells = fmt.cells(trial, result)
        lines.append("| " + " | ".join(_md_cell(cells[key]) for key, _ in columns) + " |")
    if cpu:
        extra_notes = [*extra_notes, CPU_PREDICTION_NOTE]
    messages = [t for t in result.trials if t.message]
    if messages:
        lines += ["", "## Trial messages", ""]
        lines += [f"- Trial {t.number}: {_md_cell(t.message or '')}" for t in messages]
    lines += ["", "## Best", ""]
    lines += [f"- {line}" for line in fmt.best_lines(result)]
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


def _md_cell(text: str) -> str:
    """Text safe inside a markdown table cell (no pipes, no line breaks)."""
    return text.replace("|", "\\|").replace("\n", " ")
