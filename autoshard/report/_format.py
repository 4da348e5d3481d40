"""The words and numbers of a tuning report, shared by its markdown and terminal views.

Numbers are formatted for reading (MiB, ms, samples/s); ``—`` stands for "not known".

Example:
    >>> num(1234.5), num(123.4), num(12.34), num(1.234), num(None)
    ('1,234', '123', '12.3', '1.23', '—')
"""

from __future__ import annotations

import math
from typing import Any

from autoshard.tuner.result import TrialRecord, TrialState, TuneResult

MISSING = "—"
"""Shown wherever a value is not known."""
_MIB = 2**20

# (key, markdown header, terminal header); the terminal table leaves out the keys in TERMINAL_SKIPS.
COLUMNS: tuple[tuple[str, str, str], ...] = (
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
TERMINAL_SKIPS = frozenset({"tokens_per_s", "predicted_samples_per_s"})
NUMERIC = frozenset({"micro_batch", "samples_per_s", "tokens_per_s", "step_ms", "peak", "predicted_peak",
                      "memory_error", "predicted_samples_per_s"})
"""Right-aligned columns."""
SHORT_KIND = {"cuda_allocated": "cuda", "host_rss": "rss"}


def num(value: float | None) -> str:
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


def mib(nbytes: int | None) -> str:
    return MISSING if nbytes is None else num(nbytes / _MIB)


def percent(fraction: float | None) -> str:
    """``+10.0%``-style signed percentage of a fraction."""
    return MISSING if fraction is None else f"{fraction * 100:+.1f}%"


def _setting_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def settings_text(settings: dict[str, Any]) -> str:
    """``k=v, k=v`` sorted by name (``—`` when the trial chose none)."""
    if not settings:
        return MISSING
    return ", ".join(f"{k}={_setting_value(v)}" for k, v in sorted(settings.items()))


def describe_config(trial: TrialRecord) -> str:
    """One line naming a trial's configuration."""
    c = trial.config
    if c is None:
        return "configuration not recorded"
    ckpt = "on" if c.activation_checkpointing else "off"
    text = f"{c.strategy}, micro-batch {c.micro_batch_size}, activation checkpointing {ckpt}"
    return text if not c.settings else f"{text}, settings {settings_text(c.settings)}"


def throughput(trial: TrialRecord) -> str:
    text = f"{num(trial.samples_per_s)} samples/s"
    if trial.tokens_per_s is not None:
        text += f" ({num(trial.tokens_per_s)} tokens/s)"
    if trial.step_time_s is not None:
        text += f", step {num(trial.step_time_s * 1000)} ms"
    return text


def cells(trial: TrialRecord, result: TuneResult, *, short_kind: bool = False) -> dict[str, str]:
    """Every table cell of one trial, keyed as in :data:`COLUMNS`."""
    c = trial.config
    tags = [
        tag
        for tag, flag in (
            ("best", result.best is not None and result.best.number == trial.number),
            ("planner", result.planner_trial == trial.number),
        )
        if flag
    ]
    peak = mib(trial.peak_memory_bytes)
    if trial.peak_memory_bytes is not None and trial.peak_memory_kind:
        kind = SHORT_KIND.get(trial.peak_memory_kind, trial.peak_memory_kind) if short_kind else trial.peak_memory_kind
        peak = f"{peak} ({kind})"
    step_ms = None if trial.step_time_s is None else trial.step_time_s * 1000
    return {
        "number": str(trial.number) + (f" ({', '.join(tags)})" if tags else ""),
        "state": trial.state.value,
        "strategy": MISSING if c is None else c.strategy,
        "micro_batch": MISSING if c is None else str(c.micro_batch_size),
        "checkpointing": MISSING if c is None else ("yes" if c.activation_checkpointing else "no"),
        "settings": MISSING if c is None else settings_text(c.settings),
        "samples_per_s": num(trial.samples_per_s),
        "tokens_per_s": num(trial.tokens_per_s),
        "step_ms": num(step_ms),
        "peak": peak,
        "predicted_peak": mib(trial.predicted_peak_bytes),
        "memory_error": percent(trial.memory_error),
        "predicted_samples_per_s": num(trial.predicted_samples_per_s),
        "failure": MISSING if trial.failure is None else trial.failure.value,
        "cached": "yes" if trial.cached else "no",
    }


def counts_line(result: TuneResult) -> str:
    counts = result.counts()
    # a waiting trial was queued (another strategy's defaults, a rerun) past this run's trial limit
    parts = [f"{counts[s.value]} {s.value}" + (" (queued: run first when the study goes on with a higher trial limit)"
                                               if s is TrialState.WAITING else "")
             for s in TrialState if counts.get(s.value)]
    total = len(result.trials)
    return f"{total} trial{'' if total == 1 else 's'}" + (f": {', '.join(parts)}" if parts else "")


def best_lines(result: TuneResult) -> list[str]:
    """The "Best" section as plain sentences."""
    best = result.best
    if best is None:
        return ["No trial completed with a measurement."]
    lines = [f"Trial {best.number}: {describe_config(best)}.", f"Throughput: {throughput(best)}."]
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
    said = (f"{abs(gain) * 100:.1f}% {word} than the planner's recommendation "
            f"(trial {planner_number}: {num(planner.samples_per_s)} samples/s)")
    varied = max((t.step_time_spread for t in (best, planner) if t.step_time_spread is not None), default=None)
    if varied is not None and abs(gain) <= varied:  # one run each, on a machine whose steps vary that much
        return (f"{said}, which is within how much a trial's own steps varied ({varied * 100:.0f}% between its "
                "fastest and slowest): measured once each, the two are not told apart; run both again (fit() with "
                "each plan) before choosing.")
    return f"{said}."

