"""Op-selective activation checkpointing, weighed when a plan needs checkpointing.

Checkpointing every block recomputes the most and saves the most memory. When the plan that weighs no
checkpointing against full checkpointing picks full, torchtitan's op-selective policy may fit as well and recompute
less (it keeps the matmul and attention outputs): torchtitan's own 70B run on 64 A100s is op-selective at
micro-batch 1, faster than full checkpointing at 2 (``docs/performance.md``, in ``docs/benchmarks/published.md``).
:func:`weigh_selective` plans it with the same non-checkpointed traces and keeps whichever scores best, saying in the
explanation what was weighed. It costs its own tracing sessions, so it is traced only then: a plan without
checkpointing costs nothing more, nor does one whose checkpointing the user named.

Every N-th block (``every-N``, torchtitan's layer-selective mode) is not weighed unasked: it costs as many sessions
again (its copies of a deep model are of N-block units), and where checkpointing is needed, op-selective usually
fits where it does not at about its speed. On a 4-block Llama of 4096 width at 4096 tokens, micro-batch 4 under
FSDP2, every 2nd block needs 13.8 GiB a GPU against op-selective's 11.8 (``tests/planner/test_selective_search.py``);
torchtitan measured op-selective at 2,973 tokens/s per GPU against every 2nd block's 2,904 on Llama 3 8B and 1,904
against 1,914 on Llama 2 13B. ``--checkpointing every-N`` plans it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from autoshard.errors import ModelSourceError, NoFeasiblePlan, ProfileError
from autoshard.hardware.units import format_throughput
from autoshard.planner.plan import Evaluation, Plan, WeighedCheckpointing
from autoshard.planner.search import plan
from autoshard.profiler.checkpointing import FULL, OP, ActivationCheckpointing
from autoshard.strategies.base import Strategy
from autoshard.strategies.workload import Workload

SELECTIVE: tuple[ActivationCheckpointing, ...] = (OP,)
"""The selective choices weighed against full checkpointing: torchtitan's op-level policy
(``selective_ac_option = "op"``)."""


def weigh_selective(planned: Plan, traced: Callable[[ActivationCheckpointing], tuple[Workload, str | None]],
                    strategies: Sequence[Strategy]) -> Plan:
    """``planned``, or the plan of a selective choice that scores higher, with what was weighed in its explanation.

    Args:
        planned: the plan weighing no checkpointing against full checkpointing.
        traced: the workload of a selective choice (its checkpointed traces are the ones used), and the workload
            cache entry it was read from (``None``: traced now).
        strategies: the strategies ``planned`` weighed.

    Returns:
        ``planned`` itself when its recommendation does not checkpoint, or when it weighed no checkpointing at
        all (checkpointing was asked for); otherwise the better of full and each of :data:`SELECTIVE`.
    """
    base = planned.workload
    unchecked = tuple(t for t in base.traces if not t.checkpointing)
    if (not planned.recommended.candidate.activation_checkpointing or base.checkpoint_mode != FULL or not unchecked
            or planned.request.checkpointing is not None):  # named: FSDP's traces hold the unchecked step too
        return planned
    weighed: list[tuple[ActivationCheckpointing, Plan | None]] = []
    entries: dict[ActivationCheckpointing, str | None] = {}
    failed: dict[ActivationCheckpointing, str] = {}
    for choice in SELECTIVE:
        try:
            selective, entries[choice] = traced(choice)
        except (ModelSourceError, ProfileError) as exc:  # the plan with full checkpointing stands
            failed[choice] = exc.message
            weighed.append((choice, None))
            continue
        workload = dataclasses.replace(base, checkpoint_mode=choice,
                                       traces=unchecked + tuple(t for t in selective.traces if t.checkpointing))
        try:
            weighed.append((choice, plan(workload, planned.hardware, planned.request, strategies,
                                         fitting_elsewhere=tuple(e for e in planned.candidates if e.fits))))
        except NoFeasiblePlan:
            weighed.append((choice, None))
    best = max((p for _, p in weighed if p is not None and p.recommended.candidate.activation_checkpointing),
               key=lambda p: p.recommended.score, default=None)
    chosen = best if best is not None and best.recommended.score > planned.recommended.score else planned
    choices = tuple(WeighedCheckpointing(checkpointing=choice, chosen=p is chosen, best=_best_checkpointed(p),
                                         not_traced=failed.get(choice))
                    for choice, p in [(FULL, planned), *weighed])
    lines = [_in_words(w) for w in choices if not w.chosen]
    explanation = (*chosen.explanation[:1], f"Weighed against it: {'; '.join(lines)}.", *chosen.explanation[1:])
    entry = planned.cached_workload
    if chosen is not planned:  # read from the cache only if both its traces were
        entry = entries[chosen.workload.checkpoint_mode] if entry is not None else None
    return dataclasses.replace(chosen, explanation=explanation, cached_workload=entry, checkpointing_weighed=choices)


def _in_words(weighed: WeighedCheckpointing) -> str:
    """One weighed choice in words: its best checkpointed candidate's throughput, or that none fits."""
    choice = weighed.checkpointing
    name = "full activation checkpointing" if choice == FULL else choice.label
    best = weighed.best
    if weighed.not_traced is not None:
        return f"{name} (its step could not be traced: {weighed.not_traced.rstrip('.')})"
    if best is None or best.cost is None:
        return f"{name} (nothing fits with it)"
    return (f"{name} ({best.strategy}, micro-batch {best.candidate.micro_batch_size}: "
            f"{format_throughput(best.cost.samples_per_s)} samples/s, score {best.score:.4g})")


def _best_checkpointed(planned: Plan | None) -> Evaluation | None:
    if planned is None:
        return None
    return next((e for e in planned.candidates if e.fits and e.candidate.activation_checkpointing), None)
