"""The tuning report: the markdown table and its numbers, the terminal table, Optuna's plots, the summary files."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from rich.console import Console

from autoshard.errors import UsageError
from autoshard.report import (
    print_summary,
    summary_markdown,
    write_plots,
    write_summary,
)
from autoshard.tuner.result import (
    FailureClass,
    TrialConfig,
    TrialRecord,
    TrialState,
    TuneResult,
)

MIB = 2**20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

optuna.logging.set_verbosity(optuna.logging.WARNING)


def record(number: int, **kwargs: object) -> TrialRecord:
    """A complete DDP trial, with ``kwargs`` overriding any field."""
    fields: dict[str, object] = {
        "number": number,
        "state": TrialState.COMPLETE,
        "config": TrialConfig(strategy="ddp", micro_batch_size=4, activation_checkpointing=False,
                              settings={"bucket_cap_mb": 25}),
        "samples_per_s": 100.0,
    }
    fields.update(kwargs)
    return TrialRecord(**fields)  # type: ignore[arg-type]


def tune_result(*trials: TrialRecord, best: int | None = None, planner: int | None = None,
                notes: tuple[str, ...] = ()) -> TuneResult:
    by_number = {t.number: t for t in trials}
    return TuneResult(study_name="study-1", storage="sqlite:///tune.db", output_dir="out", trials=trials,
                      best=None if best is None else by_number[best], best_plan=None, planner_trial=planner,
                      notes=notes)


def table_row(markdown: str, number: int) -> dict[str, str]:
    """The cells of trial ``number``'s row, keyed by the table's headers."""
    lines = markdown.splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.startswith("| # |"))

    def split(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split(" | ")]

    headers = split(lines[header_at])
    for line in lines[header_at + 2:]:
        if not line.startswith("|"):
            break
        cells = split(line)
        if cells[0].split()[0] == str(number):
            assert len(cells) == len(headers), line
            return dict(zip(headers, cells, strict=True))
    raise AssertionError(f"no row for trial {number}")


@pytest.fixture
def mixed_result() -> TuneResult:
    fsdp = TrialConfig(strategy="fsdp", micro_batch_size=8, activation_checkpointing=True,
                       settings={"limit_all_gathers": True, "forward_prefetch": False})
    return tune_result(
        record(0, peak_memory_bytes=100 * MIB, peak_memory_kind="cuda_allocated",
               predicted_peak_bytes=110 * MIB, predicted_samples_per_s=90.0),
        record(1, config=fsdp, samples_per_s=150.0, tokens_per_s=153_600.0, step_time_s=0.0533, cached=True),
        record(2, state=TrialState.INFEASIBLE, samples_per_s=None, failure=FailureClass.PREDICTED_OOM,
               predicted_peak_bytes=90_000 * MIB),
        record(3, state=TrialState.FAILED, config=None, samples_per_s=None, failure=FailureClass.TIMEOUT,
               message="no step finished within 300 s"),
        best=1, planner=0, notes=("resumed an existing study",),
    )


# --------------------------------------------------------------------------------------------- markdown


def test_markdown_has_title_counts_every_trial_and_the_best(mixed_result):
    md = summary_markdown(mixed_result)
    assert md.startswith("# autoshard tune: study-1\n")
    assert "**Trials:** 4 trials: 2 complete, 1 infeasible, 1 failed." in md
    for number in range(4):
        table_row(md, number)
    assert table_row(md, 1)["#"] == "1 (best)"
    assert table_row(md, 0)["#"] == "0 (planner)"
    best = md.split("## Best", 1)[1]
    assert "Trial 1: fsdp, micro-batch 8, activation checkpointing on" in best
    assert "forward_prefetch=False, limit_all_gathers=True" in best
    assert "150 samples/s (153,600 tokens/s), step 53.3 ms" in best
    assert "50.0% faster than the planner's recommendation (trial 0: 100 samples/s)" in best
    assert "- Trial 3: no step finished within 300 s" in md
    assert md.rstrip().endswith("- resumed an existing study")


def test_waiting_trials_are_said_to_be_queued_for_the_next_run():
    """A study run with fewer trials than it queued (each strategy's defaults) keeps the rest waiting: the counts say
    the next run starts with them, not only "waiting" (read as trials still running)."""
    queued = TrialConfig(strategy="fsdp", micro_batch_size=4, activation_checkpointing=False, settings={})
    result = tune_result(record(0), record(1, state=TrialState.WAITING, config=queued, samples_per_s=None),
                         best=0, planner=0)
    queued = "1 waiting (queued: run first when the study goes on with a higher trial limit)"
    assert f"**Trials:** 2 trials: 1 complete, {queued}." in summary_markdown(result)


def test_markdown_cells_are_formatted_and_unknowns_are_dashes(mixed_result):
    md = summary_markdown(mixed_result)
    planner = table_row(md, 0)
    assert planner["peak MiB (kind)"] == "100 (cuda_allocated)"
    assert planner["predicted MiB"] == "110"
    assert planner["predicted samples/s"] == "90.0"
    assert planner["settings"] == "bucket_cap_mb=25"
    assert planner["cached"] == "no"
    fsdp = table_row(md, 1)
    assert (fsdp["samples/s"], fsdp["tokens/s"], fsdp["step ms"], fsdp["checkpointing"], fsdp["cached"]) == (
        "150", "153,600", "53.3", "yes", "yes")
    assert table_row(md, 2)["predicted MiB"] == "90,000"
    assert table_row(md, 2)["failure"] == "predicted_oom"
    failed = table_row(md, 3)
    for header in ("strategy", "micro-batch", "checkpointing", "settings", "samples/s", "peak MiB (kind)",
                   "prediction error"):
        assert failed[header] == "—", header
    assert failed["failure"] == "timeout"


@pytest.mark.parametrize(
    ("predicted_mib", "measured_mib", "expected"),
    [
        (110, 100, "+10.0%"),
        (90, 100, "-10.0%"),
        (100, 100, "+0.0%"),
        (101, 100, "+1.0%"),
        (None, 100, "—"),
        (110, None, "—"),
    ],
)
def test_prediction_error_is_predicted_minus_measured_over_measured(predicted_mib, measured_mib, expected):
    trial = record(0, predicted_peak_bytes=None if predicted_mib is None else predicted_mib * MIB,
                   peak_memory_bytes=None if measured_mib is None else measured_mib * MIB,
                   peak_memory_kind="cuda_allocated")
    assert table_row(summary_markdown(tune_result(trial, best=0)), 0)["prediction error"] == expected


def test_no_prediction_error_against_host_rss():
    # A CPU trial's resident-set growth holds the framework's own memory too: not comparable to the prediction.
    trial = record(0, predicted_peak_bytes=110 * MIB, peak_memory_bytes=100 * MIB, peak_memory_kind="host_rss")
    assert table_row(summary_markdown(tune_result(trial, best=0)), 0)["prediction error"] == "—"


@pytest.mark.parametrize(
    ("samples_per_s", "expected"),
    [(12_345.6, "12,346"), (123.4, "123"), (12.34, "12.3"), (1.234, "1.23"), (0.0, "0.00"), (None, "—")],
)
def test_throughput_is_shown_with_digits_by_magnitude(samples_per_s, expected):
    md = summary_markdown(tune_result(record(0, samples_per_s=samples_per_s)))
    assert table_row(md, 0)["samples/s"] == expected


@pytest.mark.parametrize(
    ("planner", "planner_trial", "expected", "absent"),
    [
        (1, record(1, samples_per_s=100.0), "50.0% faster than the planner's recommendation (trial 1", None),
        (0, None, "This is the planner's own recommendation (trial 0).", "faster"),
        (1, record(1, state=TrialState.INFEASIBLE, samples_per_s=None, failure=FailureClass.OOM),
         "The planner's recommendation (trial 1) has no throughput to compare with (infeasible, oom).", "faster"),
        (7, None, "The planner's recommendation (trial 7) is not among the recorded trials.", "faster"),
        (None, None, "Throughput: 150 samples/s.", "planner"),
        # A gain no larger than how much one trial's steps varied is not told apart by one run each (a probe's one
        # loaded CPU: "228.0% faster", and the two measured again were indistinguishable).
        (1, record(1, samples_per_s=100.0, step_time_spread=0.8),
         "50.0% faster than the planner's recommendation (trial 1: 100 samples/s), which is within how much a "
         "trial's own steps varied (80% between its fastest and slowest): measured once each, the two are not told "
         "apart", None),
        (1, record(1, samples_per_s=100.0, step_time_spread=0.1), "(trial 1: 100 samples/s).", "not told apart"),
    ],
)
def test_best_section_compares_with_the_planners_trial(planner, planner_trial, expected, absent):
    trials = (record(0, samples_per_s=150.0),) + (() if planner_trial is None else (planner_trial,))
    best = summary_markdown(tune_result(*trials, best=0, planner=planner)).split("## Best", 1)[1]
    assert expected in best
    if absent is not None:
        assert absent not in best


def test_markdown_without_a_best_trial_says_so():
    failed = record(0, state=TrialState.FAILED, samples_per_s=None, failure=FailureClass.CRASH)
    md = summary_markdown(tune_result(failed))
    assert "No trial completed with a measurement." in md.split("## Best", 1)[1]


def test_markdown_escapes_pipes_in_settings():
    config = TrialConfig(strategy="ddp", micro_batch_size=1, activation_checkpointing=False, settings={"x": "a|b"})
    row = table_row(summary_markdown(tune_result(record(0, config=config))), 0)
    assert row["settings"] == r"x=a\|b"


# --------------------------------------------------------------------------------------------- terminal


def test_print_summary_prints_every_trial_and_the_best_without_reading_markup(mixed_result):
    config = TrialConfig(strategy="ddp", micro_batch_size=2, activation_checkpointing=False,
                         settings={"tag": "[bold]x[/bold]"})
    result = tune_result(*mixed_result.trials, record(4, config=config), best=1, planner=0,
                         notes=mixed_result.notes)
    buffer = io.StringIO()
    print_summary(result, Console(file=buffer, width=200))
    out = buffer.getvalue()
    assert "study-1: 5 trials" in out
    for text in ("1 (best)", "0 (planner)", "predicted_oom", "timeout", "100 (cuda)", "+10.0%", "tag=[bold]x[/bold]"):
        assert text in out, text
    assert "Best: Trial 1: fsdp" in out
    assert "50.0% faster" in out
    assert "resumed an existing study" in out


def test_print_summary_uses_a_wide_console_when_not_a_terminal(mixed_result, capsys):
    print_summary(mixed_result)
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if "predicted_oom" in line)
    assert "infeasible" in row and "ddp" in row  # one unwrapped line per trial
    assert max(len(line) for line in lines) > 80


# --------------------------------------------------------------------------------------------- plots


def add(study: optuna.Study, value: float, params: dict[str, object], distributions: dict, *,
        oom: bool = False) -> None:
    study.add_trial(optuna.trial.create_trial(value=value, params=params, distributions=distributions,
                                              constraints={"oom": 1.0} if oom else None))


def ddp_study() -> optuna.Study:
    """Four complete trials sharing ``ddp/bucket_cap_mb`` (one infeasible, via ask/tell), and one failed."""
    study = optuna.create_study(direction="maximize")
    dist = {"ddp/bucket_cap_mb": IntDistribution(1, 200)}
    for value, cap in ((100.0, 25), (120.0, 50), (140.0, 100)):
        add(study, value, {"ddp/bucket_cap_mb": cap}, dist)
    trial = study.ask()
    trial.suggest_int("ddp/bucket_cap_mb", 1, 200)
    trial.set_constraint("oom", 1.0)
    study.tell(trial, 0.0)
    failed = study.ask()
    failed.suggest_int("ddp/bucket_cap_mb", 1, 200)
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    return study


def is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == PNG_MAGIC


def test_plots_are_real_pngs_and_leave_matplotlib_as_found(tmp_path):
    import matplotlib
    import matplotlib.pyplot as plt

    facecolor = matplotlib.rcParams["axes.facecolor"]
    paths, notes = write_plots(ddp_study(), tmp_path / "plots")
    assert notes == []
    assert [p.name for p in paths] == ["optimization_history.png", "param_importances.png"]
    assert all(p.parent == tmp_path / "plots" and is_png(p) for p in paths)
    assert plt.get_fignums() == []  # figures closed
    assert matplotlib.rcParams["axes.facecolor"] == facecolor  # Optuna's ggplot style undone


def test_one_complete_trial_gives_a_note_instead_of_plots(tmp_path):
    study = optuna.create_study(direction="maximize")
    add(study, 100.0, {"ddp/bucket_cap_mb": 25}, {"ddp/bucket_cap_mb": IntDistribution(1, 200)})
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    paths, notes = write_plots(study, tmp_path / "plots")
    assert paths == []
    assert notes == ["No plots drawn: the study has 1 complete trial and the plots need at least 2."]
    assert not (tmp_path / "plots").exists()


BUCKET = {"ddp/bucket_cap_mb": IntDistribution(1, 200)}
PREFETCH = {"fsdp/forward_prefetch": CategoricalDistribution([True, False])}
OVERLAP = {"zero/overlap_comm": CategoricalDistribution([True, False])}


@pytest.mark.parametrize(
    ("trials", "reason"),
    [
        pytest.param([(100.0, {"ddp/bucket_cap_mb": 25}, BUCKET), (110.0, {"fsdp/forward_prefetch": True}, PREFETCH),
                      (120.0, {"zero/overlap_comm": False}, OVERLAP)],
                     "no parameter took two different values", id="completed-trials-share-no-param"),
        pytest.param([(100.0 + i, {"ddp/bucket_cap_mb": 25}, BUCKET) for i in range(3)],
                     "no parameter took two different values", id="shared-param-never-varied"),
        pytest.param([(100.0 + i, {}, {}) for i in range(3)], "the completed trials have no parameters",
                     id="no-params"),
        pytest.param([(0.0, {"ddp/bucket_cap_mb": cap}, BUCKET) for cap in (25, 50, 100)],
                     "no trial completed: each one ran out of memory", id="all-infeasible"),
        pytest.param([(100.0, {"ddp/bucket_cap_mb": cap}, BUCKET) for cap in (25, 50, 100)],
                     "every completed trial has the same throughput", id="all-the-same"),
    ],
)
def test_importances_impossible_give_a_note_but_the_history_is_drawn(tmp_path, trials, reason):
    study = optuna.create_study(direction="maximize")
    for value, params, distributions in trials:
        add(study, value, params, distributions, oom=value == 0.0)
    paths, notes = write_plots(study, tmp_path)
    assert [p.name for p in paths] == ["optimization_history.png"]
    assert is_png(paths[0])
    assert len(notes) == 1
    assert notes[0].startswith("param_importances.png not drawn: " + reason)
    assert not (tmp_path / "param_importances.png").exists()


def test_missing_matplotlib_gives_the_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    paths, notes = write_plots(ddp_study(), tmp_path)
    assert paths == []
    assert notes == ["No plots drawn: matplotlib is not installed (pip install 'matplotlib>=3.9'; in autoshard's checkout: pip install -e '.[plot]')."]


# --------------------------------------------------------------------------------------------- files


def test_write_summary_writes_markdown_json_and_plots(tmp_path, mixed_result):
    out = tmp_path / "run"
    paths, notes = write_summary(mixed_result, ddp_study(), out)
    assert notes == []
    assert [p.relative_to(out).as_posix() for p in paths] == [
        "summary.md", "summary.json", "plots/optimization_history.png", "plots/param_importances.png"]
    assert json.loads((out / "summary.json").read_text()) == mixed_result.to_dict()
    md = (out / "summary.md").read_text()
    assert md.startswith("# autoshard tune: study-1")
    assert "](plots/optimization_history.png)" in md
    assert all(is_png(p) for p in paths[2:])


def test_write_summary_without_a_study_writes_no_plots(tmp_path, mixed_result):
    paths, notes = write_summary(mixed_result, None, tmp_path)
    assert [p.name for p in paths] == ["summary.md", "summary.json"]
    assert notes == []
    assert not (tmp_path / "plots").exists()


def test_write_summary_puts_plot_notes_in_the_markdown(tmp_path, mixed_result):
    study = optuna.create_study(direction="maximize")
    paths, notes = write_summary(mixed_result, study, tmp_path)
    assert len(paths) == 2
    assert notes == ["No plots drawn: the study has 0 complete trials and the plots need at least 2."]
    assert f"- {notes[0]}" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda result, path: write_summary(result, None, path), id="write_summary"),
        pytest.param(lambda result, path: write_plots(ddp_study(), path), id="write_plots"),
    ],
)
def test_unwritable_directory_is_a_usage_error_naming_the_path(tmp_path, mixed_result, write):
    (tmp_path / "file").write_text("not a directory")
    target = tmp_path / "file" / "sub"
    with pytest.raises(UsageError, match="Not a directory") as info:
        write(mixed_result, target)
    assert str(target) in info.value.message


def test_a_table_wider_than_a_narrow_terminal_keeps_every_figure() -> None:
    """A 40-column terminal squeezed recommend's table to its strategy names, every figure cut away (a probe)."""
    import io

    from rich.console import Console
    from rich.table import Table

    from autoshard._console import print_table

    table = Table()
    for column in ("strategy", "fits", "micro", "GPU/device", "samples/s", "tokens/s"):
        table.add_column(column, no_wrap=True)
    table.add_row("deepspeed_stage_3_offload", "yes", "1", "57.10 GiB", "0.00122", "10")
    out = io.StringIO()
    print_table(Console(file=out, width=40), table)
    assert "deepspeed_stage_3_offload" in out.getvalue() and "57.10 GiB" in out.getvalue()
    assert "0.00122" in out.getvalue()
    out = io.StringIO()
    print_table(Console(file=out, width=200), table)  # room enough: printed as the console is
    assert max(len(line) for line in out.getvalue().splitlines()) < 100


def test_the_progress_display_writes_lines_alone_where_stderr_is_not_a_terminal(capsys) -> None:
    # a probe's log file ended with the bar drawn once, cut ("tune ━━━━ 3/3 0:0… trial 2: …")
    from autoshard.report import ProgressDisplay

    display = ProgressDisplay()
    display.study_started(budget=2)
    display.say("Estimate: about 9 s a trial")
    display.trial_started(1, "ddp mb=4")
    display.trial_step(1, 5, 10.0)
    display.trial_ended(1, {"samples_per_s": 12.5})
    display.trials_done(1)
    display.study_ended()
    err = capsys.readouterr().err
    assert err.splitlines() == ["Estimate: about 9 s a trial", "  trial 1: ddp mb=4: 12.5 samples/s"]
