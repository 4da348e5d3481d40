"""The tuner's search space, built from real plans of tiny-gpt2: on two CPU (gloo) processes and on a DGX H100."""

from __future__ import annotations

import warnings
from dataclasses import replace

import optuna
import pytest

import autoshard
from autoshard import planner
from autoshard.errors import UsageError
from autoshard.hardware import detect_hardware
from autoshard.planner.plan import Plan
from autoshard.planner.search import evaluate
from autoshard.strategies import get
from autoshard.strategies import names as strategy_names
from autoshard.tuner import estimate
from autoshard.tuner.space import SearchSpace, _micro_batches, build_space

NOT_TUNED = frozenset({"find_unused_parameters", "start_powerSGD_iter", "reduce_dtype"})
"""Knobs of correctness or numerics (tuner/space.py's docstring says why each is left out)."""
from autoshard.tuner.candidate import trial_candidate

optuna.logging.set_verbosity(optuna.logging.WARNING)

ASKS = 40


@pytest.fixture(scope="module")
def cpu_hardware() -> autoshard.HardwareSpec:
    """Two gloo processes on this machine's CPU, whatever GPUs it may have."""
    hw = detect_hardware(gpus=2, environ={"CUDA_VISIBLE_DEVICES": ""})
    assert (hw.device_type, hw.backend, hw.world_size) == ("cpu", "gloo", 2)
    return hw


@pytest.fixture(scope="module")
def plans(cpu_hardware: autoshard.HardwareSpec) -> dict[str, Plan]:
    """Real plans, by name: ``cpu`` (fp32, gloo), ``gpu`` (bf16 on a DGX H100: ZeRO-3 and FSDP fit),
    ``restricted`` (the CPU machine limited to FSDP and ZeRO-2) and ``fixed_batch`` (micro-batch 8 requested).

    The last two re-plan the ``cpu`` plan's traced workload (what ``recommend`` would do after tracing it again).
    """
    cpu = autoshard.recommend("tiny-gpt2", hardware=cpu_hardware, seq_len=32, precision="32-true")
    gpu = autoshard.recommend("tiny-gpt2", hardware=autoshard.load_hardware("dgx-h100"), seq_len=32,
                              precision="bf16-mixed")
    restricted = ("fsdp", "deepspeed_stage_2")
    return {
        "cpu": cpu,
        "gpu": gpu,
        "restricted": planner.plan(cpu.workload, cpu_hardware, replace(cpu.request, strategies=restricted),
                                   [get(n) for n in restricted]),
        "fixed_batch": planner.plan(cpu.workload, cpu_hardware, replace(cpu.request, micro_batch_size=8),
                                    [get(n) for n in strategy_names()]),
    }


def fitting_strategies(plan: Plan) -> list[str]:
    """The plan's fitting strategies, each once, best-ranked first."""
    return list(dict.fromkeys(e.strategy for e in plan.candidates if e.fits))


def ask_configs(space: SearchSpace, plan: Plan, sampler: optuna.samplers.BaseSampler) -> list[tuple]:
    """``ASKS`` trials of an in-memory study, each told its predicted throughput (or infeasible), as
    ``(params, config, evaluation)``."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    out = []
    for _ in range(ASKS):
        trial = study.ask()
        config = space.suggest(trial)
        evaluation = evaluate(get(config.strategy), plan.workload, plan.hardware, plan.request,
                              trial_candidate(config, trial=True))
        trial.set_constraint("oom", 0.0 if evaluation.fits else 1.0)
        study.tell(trial, evaluation.cost.samples_per_s if evaluation.fits else 0.0)
        out.append((dict(trial.params), config, evaluation))
    return out


def tpe() -> optuna.samplers.BaseSampler:
    """TPE as ``tune`` configures it (``study.py``), seeded, with few startup trials so that most asks are TPE's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=0, n_startup_trials=5, multivariate=True, group=True,
                                          constant_liar=True)


@pytest.mark.parametrize("plan_name", ["cpu", "gpu", "restricted"])
def test_recommended_strategy_leads_and_the_rest_follow_the_plans_ranking(plans: dict[str, Plan],
                                                                           plan_name: str) -> None:
    plan = plans[plan_name]
    space = build_space(plan, top=100)
    names = [s.strategy for s in space.strategies]
    assert names[0] == plan.recommended.candidate.strategy
    assert names == fitting_strategies(plan)


def test_restricted_plan_recommends_something_other_than_ddp(plans: dict[str, Plan]) -> None:
    # Keeps the "recommended first" case above from passing only because ddp happens to lead every list.
    assert plans["restricted"].recommended.candidate.strategy != "ddp"


@pytest.mark.parametrize("top", [1, 2, 3, 100])
def test_top_keeps_only_the_best_fitting_strategies(plans: dict[str, Plan], top: int) -> None:
    plan = plans["cpu"]
    space = build_space(plan, top=top)
    assert [s.strategy for s in space.strategies] == fitting_strategies(plan)[:top]


def test_strategies_that_do_not_fit_are_left_out(plans: dict[str, Plan]) -> None:
    plan = plans["cpu"]
    not_fitting = {e.strategy for e in plan.candidates if not e.fits} - set(fitting_strategies(plan))
    assert not_fitting, "the CPU plan should have strategies that do not fit (offload, hybrid, nvme)"
    names = {s.strategy for s in build_space(plan, top=100).strategies}
    assert not names & not_fitting


@pytest.mark.parametrize("plan_name", ["cpu", "gpu"])
def test_untuned_knobs_are_never_in_the_space(plans: dict[str, Plan], plan_name: str) -> None:
    plan = plans[plan_name]
    space = build_space(plan, top=100)
    offered = {k.name for s in space.strategies for k in get(s.strategy).knobs(plan.hardware)}
    assert NOT_TUNED <= offered, "every untuned knob is a real knob of some strategy here"
    untuned = {k.name for s in space.strategies for k in get(s.strategy).knobs(plan.hardware) if not k.tuned}
    assert untuned == NOT_TUNED & offered
    tuned = {k.name for s in space.strategies for k in s.knobs}
    assert not tuned & NOT_TUNED
    for params, config, _ in ask_configs(space, plan, optuna.samplers.RandomSampler(seed=1)):
        assert not {p.split("/")[-1] for p in params} & NOT_TUNED
        assert not set(config.settings) & NOT_TUNED


def test_gpu_space_offers_zero3_and_fsdp_knobs(plans: dict[str, Plan]) -> None:
    space = build_space(plans["gpu"], top=100)
    knobs = {s.strategy: {k.name for k in s.knobs} for s in space.strategies}
    assert {"stage3_prefetch_bucket_size", "stage3_max_live_parameters", "sub_group_size"} <= knobs["deepspeed_stage_3"]
    assert {"reshard_after_forward", "forward_prefetch", "blocks_per_unit"} <= knobs["fsdp"]


@pytest.mark.parametrize(("plan_name", "offers_bf16_compress"), [("cpu", False), ("gpu", True)])
def test_ddp_offers_bf16_compression_only_with_nccl(plans: dict[str, Plan], plan_name: str,
                                                     offers_bf16_compress: bool) -> None:
    ddp = build_space(plans[plan_name], top=100, compress_gradients=True).space_of("ddp")
    hooks = next(k.choices for k in ddp.knobs if k.name == "comm_hook")
    assert ("bf16_compress" in hooks) is offers_bf16_compress


@pytest.mark.parametrize("plan_name", ["cpu", "gpu"])
def test_gradient_compression_is_offered_only_when_asked(plans: dict[str, Plan], plan_name: str) -> None:
    """PowerSGD won a study on its own (rank 14), and the plan carried it with compression from step 1000 where
    the trial had measured it from step 2: compression changes what training computes, as reduce_dtype does."""
    plan = plans[plan_name]
    ddp = build_space(plan, top=100).space_of("ddp")
    assert not {"comm_hook", "matrix_approximation_rank"} & {k.name for k in ddp.knobs}
    assert ddp.knobs  # bucket size, bucket views, static graph: still tuned
    for params, config, _ in ask_configs(build_space(plan, top=1), plan, optuna.samplers.RandomSampler(seed=0)):
        assert "comm_hook" not in config.settings and not any("comm_hook" in p for p in params)


@pytest.mark.parametrize("plan_name", ["cpu", "gpu"])
@pytest.mark.parametrize("sampler", [tpe, lambda: optuna.samplers.RandomSampler(seed=0)], ids=["tpe", "random"])
def test_every_suggested_config_passes_the_planners_evaluation(plans: dict[str, Plan], plan_name: str,
                                                               sampler) -> None:
    plan = plans[plan_name]
    space = build_space(plan, top=100)
    asked = ask_configs(space, plan, sampler())  # evaluate() raises UsageError on a setting out of range
    assert len({config.strategy for _, config, _ in asked}) > 1
    for _, config, evaluation in asked:
        assert evaluation.candidate.settings.items() >= config.settings.items()


def test_powersgd_rank_is_asked_only_with_the_powersgd_hook(plans: dict[str, Plan]) -> None:
    plan = plans["cpu"]
    space = build_space(plan, top=1, compress_gradients=True)
    assert space.strategies[0].strategy == "ddp"
    asked = ask_configs(space, plan, optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for params, config, _ in asked:
        powersgd = config.settings["comm_hook"] == "powersgd"
        assert ("ddp/matrix_approximation_rank" in params) is powersgd
        assert ("matrix_approximation_rank" in config.settings) is powersgd
        seen.add(powersgd)
    assert seen == {True, False}


@pytest.mark.parametrize("plan_name", ["cpu", "gpu"])
def test_enqueued_defaults_come_back_unchanged_for_every_strategy(plans: dict[str, Plan], plan_name: str) -> None:
    space = build_space(plans[plan_name], top=100)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    for s in space.strategies:
        study.enqueue_trial(space.params(space.defaults(s)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for s in space.strategies:
            assert space.suggest(study.ask()) == space.defaults(s)
    out_of_range = [str(w.message) for w in caught if "out of range" in str(w.message)]
    assert not out_of_range, "a default lies outside the range the tuner searches"


def test_explicit_micro_batch_sizes_restrict_every_strategy(plans: dict[str, Plan]) -> None:
    plan = plans["cpu"]
    space = build_space(plan, top=100, micro_batch_sizes=[4, 2, 4])
    for s in space.strategies:
        assert s.micro_batch_sizes == (2, 4)
        assert s.default_micro_batch_size == 4  # the nearest to the planner's 1024
    assert {config.micro_batch_size for _, config, _ in ask_configs(space, plan, tpe())} == {2, 4}


def test_a_fixed_request_batch_size_is_the_only_choice(plans: dict[str, Plan]) -> None:
    plan = plans["fixed_batch"]
    assert plan.request.micro_batch_size == 8
    space = build_space(plan, top=100)
    for s in space.strategies:
        assert (s.micro_batch_sizes, s.default_micro_batch_size) == ((8,), 8)
    for params, config, _ in ask_configs(space, plan, optuna.samplers.RandomSampler(seed=0)):
        assert config.micro_batch_size == 8
        assert not any("/micro_batch_size" in p for p in params)


@pytest.mark.parametrize(("tune_checkpointing", "expected"), [(True, (False, True)), (False, (False,))])
def test_checkpointing_is_offered_both_ways_only_when_tuned(plans: dict[str, Plan], tune_checkpointing: bool,
                                                            expected: tuple[bool, ...]) -> None:
    plan = plans["cpu"]
    assert plan.recommended.candidate.activation_checkpointing is False
    space = build_space(plan, top=100, tune_checkpointing=tune_checkpointing)
    assert {s.checkpointing for s in space.strategies} == {expected}


@pytest.mark.parametrize(
    ("largest", "global_batch", "world", "expected"),
    [
        (12, None, 2, (2, 4, 8, 12)),  # the largest, then the powers of two below it: four in all
        (1024, None, 2, (128, 256, 512, 1024)),
        (1, None, 2, (1,)),
        (3, None, 2, (1, 2, 3)),
        (12, 32, 2, (1, 2, 4, 8)),  # 16 per device: 12 does not divide it
        (8, 24, 2, (1, 2, 4)),  # 12 per device
        (12, 6, 2, (1,)),  # 3 per device: only 1 divides it among the powers of two
        (16, 64, 4, (2, 4, 8, 16)),
    ],
)
def test_micro_batch_choices(largest: int, global_batch: int | None, world: int,
                             expected: tuple[int, ...]) -> None:
    assert _micro_batches(largest, global_batch, world) == expected


def test_micro_batches_none_of_which_fits_are_refused_before_any_trial(plans: dict[str, Plan]) -> None:
    """--batch-sizes 262144 ran 50 trials, each predicted not to fit, then said "see the trials' logs" (none)."""
    plan = plans["gpu"]
    largest = max(e.max_micro_batch_size for e in plan.candidates if e.fits)
    with pytest.raises(UsageError, match=f"none of the micro-batches \\[{largest + 1}\\] fits: the largest that "
                                         f"fits is {largest}"):
        build_space(plan, top=100, micro_batch_sizes=[largest + 1])
    assert build_space(plan, top=100, micro_batch_sizes=[largest, largest + 1])  # one that fits is enough


def test_the_planners_own_micro_batch_is_offered_so_the_first_trial_is_its_recommendation() -> None:
    """A plan of DDP at micro-batch 51 (checkpointing lets 97 fit) gave the tuner 16, 32, 64 and 97: its
    "planner" trial ran the nearest, 64, predicted not to fit, and the summary had nothing to compare."""
    assert _micro_batches(97, None, 2, planned=51) == (32, 51, 64, 97)
    assert _micro_batches(97, None, 2, planned=64) == (16, 32, 64, 97)  # already there
    assert _micro_batches(8, None, 2, planned=12) == (1, 2, 4, 8)  # above what fits: not offered


@pytest.mark.parametrize("top", [0, -1, True, 1.5, "2"])
def test_bad_top_raises_usage_error(plans: dict[str, Plan], top: object) -> None:
    with pytest.raises(UsageError, match="number of strategies"):
        build_space(plans["cpu"], top=top)


@pytest.mark.parametrize("micro_batch_sizes", [[], [0], [True], [2, -1], [1.5]])
def test_bad_micro_batch_sizes_raise_usage_error(plans: dict[str, Plan], micro_batch_sizes: list) -> None:
    with pytest.raises(UsageError, match="micro-batch sizes"):
        build_space(plans["cpu"], micro_batch_sizes=micro_batch_sizes)


def test_asking_for_a_strategy_outside_the_space_names_the_tuned_ones(plans: dict[str, Plan]) -> None:
    space = build_space(plans["cpu"], top=2)
    with pytest.raises(UsageError, match="not among the tuned strategies.*ddp"):
        space.space_of("fsdp_cpu_offload")


def test_on_a_cpu_the_default_micro_batches_are_capped_so_a_trial_takes_seconds(plans: dict[str, Plan]) -> None:
    """The memory model alone offers tiny-gpt2 micro-batches up to 1024 on a CPU (a 3-trial study took 349 s)."""
    plan = plans["cpu"]
    assert max(build_space(plan, top=2).strategies[0].micro_batch_sizes) == 1024  # memory is no limit here
    rate = 34e9  # this project's 2-core VM, one thread per worker (cpu_flops_per_s)
    cap = estimate.cpu_micro_batch_cap(plan, 10, rate)
    space = build_space(plan, top=2, max_micro_batch_size=cap)
    for s in space.strategies:
        assert max(s.micro_batch_sizes) == cap == s.default_micro_batch_size
        assert 10 * estimate.cpu_step_s(plan, cap, 1, False, rate) <= estimate.CPU_TRIAL_STEPS_S
        assert 10 * estimate.cpu_step_s(plan, cap * 2, 1, False, rate) > estimate.CPU_TRIAL_STEPS_S
    assert cap == 128


def test_a_queued_trial_is_recorded_with_the_configuration_it_will_run(plans: dict[str, Plan]) -> None:
    """A trial queued again after an interrupted tuner (or the planner's pick, queued first) was listed with "—"
    for strategy, micro-batch and settings until it ran, though its parameters were known."""
    from autoshard.tuner.records import queued_config, record
    from autoshard.tuner.result import TrialState

    space = build_space(plans["gpu"], top=2)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    chosen = space.suggest(study.ask())  # a trial that ran (asked), then one queued with its configuration
    study.enqueue_trial(space.params(chosen), user_attrs={"rerun_of": 0})
    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))[0]
    shown = record(waiting, queued_config(waiting, space))
    assert (shown.state, shown.config) == (TrialState.WAITING, chosen)
    assert record(waiting).config is None  # what the table showed as "—"
    # not a queued trial, or a queue of another run's choices (its strategy parameter names two strategies, this
    # space's three): nothing is made up
    assert queued_config(study.get_trials(deepcopy=False)[0], space) is None
    assert queued_config(waiting, build_space(plans["gpu"], top=3)) is None
