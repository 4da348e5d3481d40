"""One trial's configuration as the planner sees it: a candidate to evaluate, and the plan it would export."""

from __future__ import annotations

import dataclasses

from autoshard.planner import plan_file
from autoshard.planner.plan import Plan
from autoshard.planner.plan_file import ExportedPlan
from autoshard.planner.search import evaluate
from autoshard.strategies import get
from autoshard.strategies.base import Candidate
from autoshard.tuner.result import TrialConfig


def trial_candidate(config: TrialConfig, *, trial: bool) -> Candidate:
    """``config`` as a planner :class:`~autoshard.strategies.base.Candidate`; with ``trial``, with the settings
    every short trial runs with (:meth:`~autoshard.strategies.base.Strategy.trial_settings`)."""
    settings = dict(config.settings)
    if trial:
        settings.update(get(config.strategy).trial_settings())
    return Candidate(strategy=config.strategy, micro_batch_size=config.micro_batch_size,
                     activation_checkpointing=config.activation_checkpointing, settings=settings)


def exported_plan(plan: Plan, config: TrialConfig) -> ExportedPlan:
    """``config`` as ``plan.json`` holds it (the trial-only settings dropped)."""
    evaluation = evaluate(get(config.strategy), plan.workload, plan.hardware, plan.request,
                          trial_candidate(config, trial=False))
    return plan_file.from_plan(dataclasses.replace(plan, recommended=evaluation))
