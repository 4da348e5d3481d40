"""What a trial will cost before it runs, and micro-batches whose trials finish in seconds on a CPU machine.

On a GPU the planner's cost model (the traced ops at the GPU's achievable rates) predicts a step. On a CPU it has
no peak to go on (its placeholder rate is for ranking only), and the memory model alone lets micro-batches grow to
whatever the host memory holds (1024 for tiny-gpt2), which made trials take minutes. So on a CPU a step is
predicted from the model's FLOPs per sample and this CPU's float32 matmul rate, measured here for a fraction of a
second with the threads one worker gets, times :data:`CPU_TRAINING_EFFICIENCY`; and the micro-batches offered are
capped so that one trial's steps take at most :data:`CPU_TRIAL_STEPS_S`.
"""

from __future__ import annotations

import time

from autoshard.planner.plan import Plan
from autoshard.planner.search import evaluate
from autoshard.strategies import get
from autoshard.strategies.base import Candidate
from autoshard.tuner.result import TrialEstimate

CPU_TRAINING_EFFICIENCY = 0.3
"""Fraction of the measured matmul rate a CPU training step reaches. Measured on this project's 2-core VM (torch
2.13.0 CPU, 2 gloo workers of 1 thread, tiny-gpt2 at sequence 32, DDP): 0.19 at micro-batch 8, 0.34 at 64,
0.32 at 256 (``step_time_s`` against FLOPs per sample × micro-batch ÷ the rate :func:`cpu_flops_per_s` measured)."""
CPU_TRIAL_STEPS_S = 5.0
"""On a CPU, the micro-batches offered are the largest whose trial steps (warm-up included) are predicted to take
at most this long, and the powers of two below it."""
TRIAL_STARTUP_S = 8.0
"""Starting a trial's workers (a Python process per rank importing torch, building the model, joining the
process group) before the first step. Measured on the same VM: 7.7–9.7 s for 2 gloo workers of tiny-gpt2 (a
trial's duration less its steps), on a shared, busy machine. Not measured on a GPU machine yet."""


def cpu_flops_per_s(threads: int, *, seconds: float = 0.2) -> float:
    """This CPU's float32 matmul rate with ``threads`` threads (what one trial worker gets), measured now on
    1024 x 1024 matmuls (at least three).

    1024, not smaller: on a busy machine a multi-threaded matmul waits for whichever of its threads another
    process holds, and a small one waits about as long as a large one. On this project's 2-core VM under a load
    of 4–5 (other processes on both cores), two threads ran 256 x 256 matmuls at 1–46 GFLOP/s from one
    measurement to the next, and 1024 x 1024 ones at 30–54, while a training step of the example GPT
    (examples/gpt, 23 GFLOP a sample) ran at 11–26 GFLOP/s: the smaller matmul predicted 37 s steps that took
    3 s (``autoshard tune examples/gpt/model.py``; 1024 predicted 1.5–2.6 s for steps of 1.0–3.6 s). With one
    thread the two sizes ran within about 15 % of each other (at best 103 and 98 GFLOP/s), so
    :data:`CPU_TRAINING_EFFICIENCY`, measured with one thread per worker, holds for either.

    Example:
        >>> cpu_flops_per_s(1, seconds=0.05) > 1e8
        True
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        n = 1024  # the size of a training step's matmuls, whose rate a busy machine lowers as it lowers theirs
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b  # first call: thread pool and kernel selection
        count, start = 0, time.perf_counter()
        while True:
            a @ b
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and count >= 3:
                return 2 * n**3 * count / elapsed
    finally:
        torch.set_num_threads(before)


def cpu_step_s(plan: Plan, micro_batch_size: int, gradient_accumulation: int, checkpointing: bool,
               flops_per_s: float) -> float:
    """One optimizer step on one CPU worker: its samples × FLOPs per sample (forward and backward, recomputation
    included) at ``flops_per_s`` × :data:`CPU_TRAINING_EFFICIENCY`."""
    flops = plan.workload.trace("amp", checkpointing).flops_per_sample() * micro_batch_size * gradient_accumulation
    return flops / (flops_per_s * CPU_TRAINING_EFFICIENCY)


def cpu_micro_batch_cap(plan: Plan, steps: int, flops_per_s: float) -> int:
    """The largest power-of-two micro-batch whose ``steps`` CPU steps are predicted to take at most
    :data:`CPU_TRIAL_STEPS_S` (at least 1)."""
    cap = 1
    while steps * cpu_step_s(plan, cap * 2, 1, False, flops_per_s) <= CPU_TRIAL_STEPS_S:
        cap *= 2
        if cap >= 1 << 20:
            break
    return cap


def trial_estimate(plan: Plan, candidate: Candidate, steps: int, flops_per_s: float | None) -> TrialEstimate:
    """The predicted cost of a trial of ``candidate``: :data:`TRIAL_STARTUP_S` + ``steps`` steps, each from
    the measured CPU rate (``flops_per_s``, on a CPU machine) or the planner's cost model (on GPUs)."""
    evaluation = evaluate(get(candidate.strategy), plan.workload, plan.hardware, plan.request, candidate)
    accumulation = max(1, evaluation.gradient_accumulation)
    if flops_per_s is not None:
        step_s = cpu_step_s(plan, candidate.micro_batch_size, accumulation, candidate.activation_checkpointing,
                            flops_per_s)
        basis = (f"FLOPs per sample at this CPU's measured {flops_per_s / 1e9:.1f} GFLOP/s float32 matmul rate per "
                 f"worker × {CPU_TRAINING_EFFICIENCY:g} training efficiency")
    elif evaluation.cost is not None:
        step_s = evaluation.cost.step_time_s
        basis = "the planner's cost model (the traced ops at the GPU's achievable rates, and its communication model)"
    else:
        step_s, basis = 0.0, "no step-time model for this hardware: start-up only"
    return TrialEstimate(seconds=TRIAL_STARTUP_S + steps * step_s, startup_s=TRIAL_STARTUP_S, step_s=step_s,
                         steps=steps, micro_batch_size=candidate.micro_batch_size, basis=basis)


def describe(estimate: TrialEstimate, trials: int) -> str:
    """One line for the user before the study starts.

    Example:
        >>> print(describe(TrialEstimate(seconds=12.0, startup_s=8.0, step_s=0.4, steps=10, micro_batch_size=128,
        ...                              basis="a model"), 3))  # doctest: +NORMALIZE_WHITESPACE
        3 trials, about 12 s each (estimate: 8 s to start the workers + 10 steps × 0.4 s at micro-batch 128,
        from a model), about 36 s in all.
    """
    total = estimate.seconds * trials
    shown = f"{total:.0f} s" if total < 120 else f"{total / 60:.0f} min"
    return (f"{trials} trial{'s' if trials != 1 else ''}, about {estimate.seconds:.0f} s each (estimate: "
            f"{estimate.startup_s:.0f} s to start the workers + {estimate.steps} steps × {estimate.step_s:.2g} s at "
            f"micro-batch {estimate.micro_batch_size}, from {estimate.basis}), about {shown} in all.")
