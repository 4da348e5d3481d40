"""benchmarks/tune_efficiency.py: the grid is the tuner's space, the replay asks what the tuner's loop asks, and
the report says what was found.

No trial runs a worker process: the tuner's loop is driven with ``run_trial`` replaced by a lookup in a
synthetic throughput table, so the test checks the benchmark's plumbing and arithmetic, never timing values.
"""

from __future__ import annotations

import doctest
import itertools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from autoshard.strategies.base import Knob
from autoshard.tuner.result import TrialConfig
from autoshard.tuner.space import SearchSpace, StrategySpace
from tests.benchmark_scripts import load


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load("tune_efficiency")


@pytest.fixture(scope="module")
def plan(bench: ModuleType) -> Any:
    """The planner's plan for the full grid's strategies on 2 CPU processes (a trace of tiny-gpt2, no workers)."""
    return bench.make_plan(bench.FULL_GRID, 2)


def _strategy(name: str, family: str, knobs: Mapping[str, tuple[Any, ...]]) -> StrategySpace:
    return StrategySpace(strategy=name, family=family, micro_batch_sizes=(2, 4, 8), checkpointing=(False,),
                         knobs=tuple(Knob(name=k, default=v[0], kind="choice", choices=v) for k, v in knobs.items()),
                         default_micro_batch_size=8, default_checkpointing=False)


SPACE = SearchSpace(strategies=(
    _strategy("ddp", "ddp", {"static_graph": (False, True)}),
    _strategy("deepspeed_stage_2", "deepspeed", {"overlap_comm": (False, True), "contiguous_gradients": (True, False)}),
    _strategy("fsdp", "fsdp", {"foreach": (False, True)}),
))
"""A synthetic grid space: 3 × 2 + 3 × 4 + 3 × 2 = 24 configurations."""


def synthetic_rate(strategy: str, micro_batch_size: int, settings: Mapping[str, Any]) -> float:
    """A made-up throughput with one clear best: fsdp, mb 4, foreach."""
    base = {"ddp": 300.0, "deepspeed_stage_2": 250.0, "fsdp": 200.0}[strategy]
    rate = base * {2: 1.0, 4: 2.2, 8: 1.5}[micro_batch_size]
    if settings.get("foreach") is True:
        rate *= 2.0
    if settings.get("overlap_comm") is True:
        rate *= 1.1
    return rate


def table_of(bench: ModuleType, space: SearchSpace) -> dict[str, float]:
    return {c.key(): synthetic_rate(c.strategy, c.micro_batch_size, c.settings) for c in bench.grid_configs(space)}


def test_docstring_examples_hold(bench: ModuleType) -> None:
    failed, attempted = doctest.testmod(bench, optionflags=doctest.ELLIPSIS)
    assert attempted >= 8 and failed == 0


def test_grid_configs_are_every_combination_of_the_space(bench: ModuleType) -> None:
    configs = bench.grid_configs(SPACE)
    assert len(configs) == 24 and len({c.key() for c in configs}) == 24
    assert [c.strategy for c in configs] == ["ddp"] * 6 + ["deepspeed_stage_2"] * 12 + ["fsdp"] * 6
    assert TrialConfig(strategy="deepspeed_stage_2", micro_batch_size=4, activation_checkpointing=False,
                       settings={"overlap_comm": True, "contiguous_gradients": False}) in configs
    continuous = SearchSpace(strategies=(StrategySpace(
        strategy="ddp", family="ddp", micro_batch_sizes=(2,), checkpointing=(False,),
        knobs=(Knob(name="bucket_cap_mb", default=25, kind="float", low=1, high=200),),
        default_micro_batch_size=2, default_checkpointing=False),))
    with pytest.raises(ValueError, match="bucket_cap_mb is a float knob"):
        bench.grid_configs(continuous)


def test_full_grid_is_the_tuners_space_cut_to_36_configurations(bench: ModuleType, plan: Any) -> None:
    space = bench.grid_space(plan, bench.FULL_GRID)
    assert space.strategies[0].strategy == plan.recommended.strategy  # the planner's order
    assert {s.strategy for s in space.strategies} == set(bench.FULL_GRID.knobs)
    for s in space.strategies:
        assert s.micro_batch_sizes == (2, 4, 8) and s.checkpointing == (False,)
        assert {k.name: k.choices for k in s.knobs} == dict(bench.FULL_GRID.knobs[s.strategy])
        assert all(k.kind == "choice" and k.default == k.choices[0] for k in s.knobs)
    configs = bench.grid_configs(space)
    assert len(configs) == 36
    # Every configuration the sampler can produce is in the grid: the enqueued defaults included.
    keys = {c.key() for c in configs}
    assert all(space.defaults(s).key() in keys for s in space.strategies)
    exported = bench.trial_plan(plan, configs[0])
    assert exported.strategy == configs[0].strategy and exported.micro_batch_size == configs[0].micro_batch_size


@pytest.mark.parametrize(("knobs", "message"), [
    ({"ddp": {"no_such_knob": (1, 2)}}, "ddp has no tuned knob no_such_knob"),
    ({"ddp": {"static_graph": (True,)}}, "leave out the default False"),
    ({"deepspeed_stage_3": {}}, "has no deepspeed_stage_3"),
])
def test_grid_space_refuses_a_grid_the_tuner_cannot_ask_for(bench: ModuleType, plan: Any,
                                                            knobs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bench.grid_space(plan, bench.GridSpec(micro_batch_sizes=(2, 4), knobs=knobs))


@pytest.mark.parametrize(("values", "target", "expected"), [
    ([1.0, 2.0, 3.0], 3.0, 3),
    ([3.0, 2.0, 3.0], 2.9, 1),
    ([None, 5.0], 4.0, 2),
    ([None, 1.0], 4.0, None),
    ([], 1.0, None),
])
def test_trials_to_threshold_is_the_first_trial_at_or_above_the_target(
        bench: ModuleType, values: list[float | None], target: float, expected: int | None) -> None:
    assert bench.trials_to_threshold(values, target) == expected


@pytest.mark.parametrize(("trials", "median", "p90", "within", "never"), [
    ([1] * 20, 1, 1, 20, 0),
    (list(range(1, 21)), 10.5, 18, 9, 0),
    ([2, 4, None], 4, None, 2, 1),
    ([None, None, 1], None, None, 1, 2),
])
def test_summary_takes_median_and_nearest_rank_p90_with_misses_as_infinite(
        bench: ModuleType, trials: list[int | None], median: float | None, p90: float | None, within: int,
        never: int) -> None:
    s = bench.summarize_trials(trials, grid_size=36, budget=9)
    assert (s["median_trials"], s["p90_trials"], s["within_budget"], s["not_reached"]) == (median, p90, within, never)
    assert s["median_fraction"] == (None if median is None else median / 36)


@pytest.mark.parametrize(("n", "k"), [(5, 1), (5, 2), (6, 3), (4, 4)])
def test_random_search_figures_match_enumerating_every_order(bench: ModuleType, n: int, k: int) -> None:
    firsts = [next(i for i, c in enumerate(order, 1) if c < k) for order in itertools.permutations(range(n))]
    for q in (0.5, 0.9):
        result = bench.random_search(n, k, q)
        assert result["expected_trials"] == pytest.approx(sum(firsts) / len(firsts))
        expected_q = min(t for t in range(1, n + 1) if sum(f <= t for f in firsts) / len(firsts) >= q)
        assert result["quantile_trials"] == expected_q


def replay(bench: ModuleType, plan: Any, table: Mapping[str, float | None], *, seed: int = 0, trials: int = 24,
           enqueue: bool = True, space: SearchSpace = SPACE) -> list[Any]:
    from autoshard.tuner.runner import TrialSpec

    spec = TrialSpec(model="tiny-gpt2", optimizer="adamw", steps=3, warmup_steps=1)
    return bench.tuner_loop(plan, space, spec, trials=trials, seed=seed, enqueue=enqueue, work_dir=Path("unused"),
                            environ={}, table=table)


def test_replay_runs_the_tuners_loop_answering_from_the_table(bench: ModuleType, plan: Any) -> None:
    table = table_of(bench, SPACE)
    records = replay(bench, plan, table, trials=12)
    # The tuner's enqueued trials first: each strategy at the planner's micro-batch and its knobs' defaults.
    assert [r.config for r in records[:3]] == [SPACE.defaults(s) for s in SPACE.strategies]
    assert all(r.samples_per_s == table[r.config.key()] for r in records)
    # A repeated configuration is answered from the study, not run, and does not use up the budget.
    fresh = [r for r in records if r.duplicate_of is None]
    assert len(fresh) == 12 and len({r.config.key() for r in fresh}) == 12
    assert all(r.cached for r in records if r.duplicate_of is not None)
    assert [r.config for r in replay(bench, plan, table, trials=12)] == [r.config for r in records]  # seeded
    alone = replay(bench, plan, table, trials=3, enqueue=False)
    assert [r.config for r in alone[:3]] != [r.config for r in records[:3]]


def test_replay_refuses_a_configuration_outside_the_table(bench: ModuleType, plan: Any) -> None:
    table = table_of(bench, SPACE)
    del table[SPACE.defaults(SPACE.strategies[0]).key()]
    with pytest.raises(ValueError, match="ddp mb=8 static_graph=False, which the grid does not hold"):
        replay(bench, plan, table, trials=1)


def test_failed_grid_configurations_fail_in_the_replay(bench: ModuleType, plan: Any) -> None:
    table: dict[str, float | None] = dict(table_of(bench, SPACE))
    for c in bench.grid_configs(SPACE):
        if c.strategy == "ddp":
            table[c.key()] = None
    first = replay(bench, plan, table, trials=1)[0]
    assert first.config.strategy == "ddp" and first.state.value == "failed" and first.failure.value == "crash"


@pytest.mark.parametrize(("rows", "expected"), [
    ([{"trial": 1, "v": 1.0}, {"trial": None, "v": 1.0}, {"trial": 2, "v": 3.0}], 2),
    ([{"trial": 1, "v": None}, {"trial": 2, "v": 2.9}], None),
    ([], None),
])
def test_reached_counts_budget_trials_only(bench: ModuleType, rows: list[dict[str, Any]], expected: int | None) -> None:
    assert bench.reached(rows, 3.0, "v") == expected


def test_replay_study_counts_budget_trials_and_asks_per_seed(bench: ModuleType, plan: Any) -> None:
    table = table_of(bench, SPACE)
    result = bench.replay_study(plan, SPACE, table, range(3), threshold=0.97, budget=6, enqueue=True,
                                other_thresholds=(0.5, 0.97))
    assert result["trials"] == 24
    # The same runs against other thresholds: a lower one is reached no later; 97 % gives the main figure.
    assert result["by_threshold"]["0.97"]["median_trials"] == result["summary"]["median_trials"]
    for s in result["per_seed"]:
        assert s["by_threshold"]["0.97"] == s["trials"] and s["by_threshold"]["0.5"] <= s["trials"]
    for s in result["per_seed"]:
        assert s["trials"] is not None and s["trials"] <= s["asks"] <= s["asks_total"]
        assert s["found"] == s["asked"][s["asks"] - 1] == "fsdp mb=4 foreach=True"  # the only one within 97 %
        assert len(s["asked"]) == max(s["asks"], 6) and s["budget_trials_run"] <= 24
        assert sum(not a.startswith("(repeat)") for a in s["asked"][:s["asks"]]) == s["trials"]
        assert s["stopped_early"] == (s["budget_trials_run"] < 24)
    summary = result["summary"]
    assert summary["seeds"] == 3 and summary["grid_size"] == 24 and summary["budget_trials"] == 6
    assert summary["median_trials"] == sorted(s["trials"] for s in result["per_seed"])[1]


def test_live_loop_asks_what_the_replay_asks_when_trials_measure_the_table(
        bench: ModuleType, plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autoshard.tuner import runner as tuner
    from autoshard.tuner.runner import Measurement, TrialSpec

    space = bench.grid_space(plan, bench.FULL_GRID)
    table = table_of(bench, space)
    ran: list[tuple[str, int]] = []

    def fake_run_trial(exported: Any, spec: Any, run_dir: Path, **_: Any) -> Measurement:
        ran.append((exported.strategy, exported.micro_batch_size))
        rate = synthetic_rate(exported.strategy, exported.micro_batch_size, exported.settings)
        return Measurement(samples_per_s=rate, tokens_per_s=None, step_time_s=1.0, peak_memory_bytes=None,
                           peak_memory_kind=None, step_times_s=())

    monkeypatch.setattr(tuner, "run_trial", fake_run_trial)
    spec = TrialSpec(model="tiny-gpt2", optimizer="adamw", steps=4, warmup_steps=1)
    records = bench.tuner_loop(plan, space, spec, trials=12, seed=bench.LIVE_SEED, enqueue=True, work_dir=tmp_path,
                               environ={})
    replayed = replay(bench, plan, table, seed=bench.LIVE_SEED, trials=12, space=space)
    assert [r.config for r in records] == [r.config for r in replayed]
    assert len(ran) == 12  # repeats are answered from the study
    summary = bench.live_summary(records, table, threshold=0.97)
    best = max(table.values())
    rows = bench.trial_rows(replayed, table, best)
    assert summary["reached_by_grid"] == summary["reached_by_live"] == bench.reached(rows, 0.97 * best,
                                                                                    "grid_samples_per_s")
    assert [r["trial"] for r in summary["trials"] if r["trial"] is not None] == list(range(1, 13))
    assert summary["pick"]["grid_samples_per_s"] == max(r.samples_per_s for r in replayed)


def _report(bench: ModuleType, plan: Any, live: dict[str, Any] | None) -> dict[str, Any]:
    table = table_of(bench, SPACE)
    rows = [bench.grid_row(c, [{"samples_per_s": table[c.key()], "foreign_cores": 0.0},
                               {"samples_per_s": table[c.key()] * 1.1, "foreign_cores": 0.25}])
            for c in bench.grid_configs(SPACE)]
    rows[0] = bench.grid_row(bench.grid_configs(SPACE)[0], [{"samples_per_s": None, "error": "timeout: slow"}])
    grid = bench.grid_summary(rows, 0.97, 0.2)
    table = {r["key"]: r["samples_per_s"] for r in rows}
    tuner = bench.replay_study(plan, SPACE, table, range(2), threshold=0.97, budget=6, enqueue=True,
                               other_thresholds=(0.9, 1.0))
    alone = bench.replay_study(plan, SPACE, table, range(2), threshold=0.97, budget=6, enqueue=False,
                               other_thresholds=(0.9, 1.0))
    replay = {"tuner": tuner, "sampler_only": alone, "sensitivity": bench.sensitivity(grid, tuner, alone, (0.9, 1.0)),
              "random": {"median_trials": 12, "p90_trials": 22, "expected_trials": 12.5}}
    meta = bench.environment(["benchmarks/tune_efficiency.py", "--seeds", "2"])
    setup = {"model": "tiny-gpt2", "seq_len": 64, "processes": 2, "backend": "gloo", "precision": "32-true",
             "optimizer": "adamw", "steps": 20, "warmup": 5, "repeats": 2, "threshold": 0.97, "budget_fraction": 0.25,
             "budget_trials": 6, "seeds": 2, "quiet": {"max_foreign_cores": 0.2, "retries": 2, "wait_s": 30.0}}
    return {"meta": meta, "setup": setup, "grid": grid, "replay": replay, "live": live,
            "seconds": {"total": 100.0, "grid": 90.0, "replay": 5.0, "live": 5.0}}


def test_grid_summary_sorts_by_throughput_with_failures_last(bench: ModuleType, plan: Any) -> None:
    grid = _report(bench, plan, None)["grid"]
    rates = [r["samples_per_s"] for r in grid["rows"]]
    assert rates[-1] is None and rates[:-1] == sorted(rates[:-1], reverse=True)
    assert grid["size"] == 24 and grid["failed"] == 1 and grid["near_best"] == 1
    assert grid["best_label"] == "fsdp mb=4 foreach=True"
    assert grid["best_samples_per_s"] == pytest.approx(synthetic_rate("fsdp", 4, {"foreach": True}) * 1.05)
    assert grid["noise"]["median_spread"] == pytest.approx(0.1 / 1.05)
    assert (grid["noise"]["runs"], grid["noise"]["disturbed_runs"]) == (46, 23)  # 0.25 foreign cores > 0.2


def test_report_writes_markdown_and_json_with_every_figure(bench: ModuleType, plan: Any, tmp_path: Path) -> None:
    trial = {"number": 0, "duplicate_of": None, "label": "ddp mb=8 static_graph=False", "state": "complete",
             "cached": False, "samples_per_s": 700.0, "grid_samples_per_s": 690.0, "grid_fraction": 0.5,
             "duration_s": 4.0, "failure": None}
    live = {"trials": [{**trial, "trial": 1},
                       {**trial, "trial": None, "number": 1, "duplicate_of": 0, "cached": True, "duration_s": 0.0},
                       {**trial, "trial": 2, "number": 2, "label": "fsdp mb=2 foreach=False", "state": "failed",
                        "samples_per_s": None, "failure": "timeout"}],
            "reached_by_grid": None, "reached_by_live": 2, "foreign_cores": 0.01, "same_as_replay": 1,
            "pick": {"label": "ddp mb=8 static_graph=False", "samples_per_s": 700.0, "grid_samples_per_s": 690.0,
                     "grid_fraction": 0.5}}
    report = _report(bench, plan, live)
    best_rate = report["grid"]["best_samples_per_s"]
    report["live"]["trials"][0]["grid_samples_per_s"] = best_rate
    out = tmp_path / "deep" / "out"
    bench.write_report(out, report)
    text = (out / "tune_efficiency.md").read_text()
    data = json.loads((out / "tune_efficiency.json").read_text())
    assert data["grid"]["size"] == 24 and data["meta"]["optuna"] and data["meta"]["torch"]
    assert "Command: `python benchmarks/tune_efficiency.py --seeds 2`" in text
    assert "**Grid: 24 configurations, best" in text and "1 of 24 within 97 % of it" in text
    assert "not within the 6 trials" in text and "at trial 2" in text
    assert ("| — | ddp mb=8 static_graph=False | complete (repeat of trial 1: not run, not counted) | 700.0 | "
            "690.0 | 50.0 % |") in text
    assert "| 2 | fsdp mb=2 foreach=False | failed, timeout | — | 690.0 | 50.0 % | — |" in text
    assert "| random search (exact) | 12 | 22 | 50.0 % | 91.7 % | — | 0 | — | — |" in text
    assert text.count("| tuner (planner's pick enqueued first) |") == 1
    best = report["grid"]["rows"][0]
    assert f"| 1 | {best['label']} | {best['samples_per_s']:,.1f} |" in text
    assert "| 24 | ddp mb=2 static_graph=False | — |  (1 failed) | — | — | 1 | — |" in text
    assert "more than 0.2 cores busy was measured again (up to 2 times" in text
    assert "Its first 1 proposals (repeats included) were the replay's with seed 0" in text
    assert f"measured the grid's best configuration at {700 / best_rate * 100:.1f} % of its grid median" in text
    assert "23 of 46 kept runs were still disturbed" in text
    assert "the sampler made a median of" in text and "Of the 2 seeds," in text
    assert "## Reading the numbers" in text
    sens = report["replay"]["sensitivity"]
    assert [r["threshold"] for r in sens] == [0.9, 1.0] and sens[1]["configs"] == 1 and sens[1]["random"] == [12, 22]
    assert "| 100 % | 1 | " in text and "| threshold | configurations within | tuner | sampler alone |" in text

    again = tmp_path / "again"
    assert bench.main(["--from-json", str(out / "tune_efficiency.json"), "--out", str(again)]) == 0
    assert (again / "tune_efficiency.md").read_text() == text

    skipped = _report(bench, plan, None)
    bench.write_report(out, skipped)
    assert "Skipped (`--skip-live`)." in (out / "tune_efficiency.md").read_text()


@pytest.mark.parametrize(("argv", "seeds", "repeats"),
                         [([], 20, 3), (["--quick"], 3, 1), (["--quick", "--seeds", "5"], 5, 1)])
def test_command_line_defaults(bench: ModuleType, argv: list[str], seeds: int, repeats: int) -> None:
    args = bench.parse_args(argv)
    assert (args.seeds, args.repeats, args.steps, args.warmup, args.processes) == (seeds, repeats, 20, 5, 2)
    assert (args.quiet_cores, args.retries, args.wait_s) == (0.25, 2, 30.0)
    assert args.out == Path("docs/benchmarks") and not args.skip_live and args.from_json is None


@pytest.mark.parametrize("argv", [["--seeds", "0"], ["--warmup", "19"], ["--warmup", "-1"], ["--repeats", "x"],
                                  ["--quiet-cores", "-1"], ["--retries", "-1"], ["--wait-s", "nan"]])
def test_bad_command_line_exits_with_usage_error(bench: ModuleType, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2


def test_budget_is_a_quarter_of_the_full_grid(bench: ModuleType) -> None:
    assert bench.BUDGET_FRACTION == 0.25 and bench.THRESHOLD == 0.97
    assert math.floor(bench.BUDGET_FRACTION * 36) == 9


def test_disturbed_grid_run_is_measured_again_and_the_least_disturbed_kept(
        bench: ModuleType, plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autoshard.tuner import runner
    from autoshard.tuner.result import FailureClass
    from autoshard.tuner.runner import Measurement, TrialFailed, TrialSpec

    space = bench.grid_space(plan, bench.FULL_GRID)
    configs = [c for c in bench.grid_configs(space) if c.strategy == "ddp" and c.micro_batch_size == 2
               and not c.settings["gradient_as_bucket_view"]]
    assert [c.settings["static_graph"] for c in configs] == [False, True]
    # static_graph=False: disturbed three times (0.9, 0.5, 0.7 cores), the 0.5 attempt is kept;
    # static_graph=True: fails on a quiet machine, which is a result, not measured again.
    loads = {False: iter([0.9, 0.5, 0.7]), True: iter([0.0])}
    rates = iter([100.0, 200.0, 300.0])
    current: list[bool] = []

    def fake_run_trial(exported: Any, *_: Any, **__: Any) -> Measurement:
        current.append(bool(exported.settings["static_graph"]))
        if current[-1]:
            raise TrialFailed(FailureClass.CRASH, "boom")
        return Measurement(samples_per_s=next(rates), tokens_per_s=None, step_time_s=1.0, peak_memory_bytes=None,
                           peak_memory_kind=None, step_times_s=())

    monkeypatch.setattr(bench, "foreign_cores", lambda *_: next(loads[current[-1]]))
    monkeypatch.setattr(bench, "wait_for_quiet", lambda quiet: 0.0)
    monkeypatch.setattr(runner, "run_trial", fake_run_trial)
    quiet = bench.Quiet(max_foreign_cores=0.25, retries=2, wait_s=0.0)
    spec = TrialSpec(model="tiny-gpt2", optimizer="adamw", steps=4, warmup_steps=1)
    log: list[str] = []
    first, second = bench.measure_grid(plan, configs, spec, repeats=1, quiet=quiet, work_dir=tmp_path, environ={},
                                       log=log.append)
    assert first["attempts"] == 3 and first["samples_per_s"] == 200.0 and first["max_foreign_cores"] == 0.5
    assert [a["samples_per_s"] for a in first["runs"][0]["attempts"]] == [100.0, 200.0, 300.0]
    assert second["attempts"] == 1 and second["samples_per_s"] is None and second["failed_runs"] == 1
    assert second["runs"][0]["error"] == "crash: boom"
    assert len(log) == 4 and sum("attempt 3" in line for line in log) == 1


def test_waiting_for_a_quiet_machine_stops_at_the_time_limit(bench: ModuleType) -> None:
    assert bench.wait_for_quiet(bench.Quiet(max_foreign_cores=0.0, retries=0, wait_s=0.0)) < 0.5
