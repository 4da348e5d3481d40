"""Candidates × rules × cost model → a ranked :class:`Plan` with reasons."""

from __future__ import annotations

from autoshard.planner.plan import Evaluation, Plan, PlanRequest
from autoshard.planner.rules import RULES, Rule
from autoshard.planner.search import plan

__all__ = ["RULES", "Evaluation", "Plan", "PlanRequest", "Rule", "plan"]
