"""Run a function in N CPU processes joined by gloo, and measure what each process keeps alive.

The measurement side of the strategy tests: a strategy's memory model is checked against real processes
running the real ``torch.distributed`` wrapper (DDP, FSDP2, ZeRO) on CPU tensors.

* :func:`run_gloo` starts ``world_size`` worker processes, each in its own session (so its own process group),
  rendezvousing over TCP on a free local port; each calls a rank function named ``"module:function"`` and writes
  its JSON result to a file. Results come back as parsed JSON, never pickles. On a wall-clock timeout or a
  failed rank, every worker's process group is sent SIGTERM, given ``grace_s`` seconds, then SIGKILL — by
  process-group id, never by name.
* :func:`track_training_steps` runs inside a rank function: training steps under
  :class:`autoshard.profiler.tracker.MemoryTracker`, with the same categories and phases as the profiler's
  trace (``autoshard/profiler/trace.py``), tracking from *before* the model is wrapped so that what the wrapper
  allocates at construction (DDP's gradient buckets) is counted.

Example (in a test)::

    results = run_gloo("tests.strategies.test_ddp:ddp_rank", world_size=2, kwargs={"micro_batch": 4})
    peak = max(r["step_peak_bytes"] for r in results)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from autoshard.runtime.supervisor import free_port, stop  # one implementation of both

REPO_ROOT = Path(__file__).resolve().parents[2]
STEP_PHASES = ("forward", "loss", "backward", "optimizer", "zero_grad")


class GlooRunError(RuntimeError):
    """A gloo run failed: a rank exited non-zero, wrote no result, or the run timed out.

    Attributes:
        pids: the workers' process ids (each also its process group's id), all stopped and reaped.
    """

    def __init__(self, message: str, *, pids: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.pids = pids


def run_gloo(
    target: str,
    *,
    world_size: int = 2,
    kwargs: Mapping[str, Any] | None = None,
    timeout_s: float = 120.0,
    grace_s: float = 5.0,
    threads_per_rank: int = 1,
) -> list[dict[str, Any]]:
    """Call ``target(rank=r, world_size=n, **kwargs)`` in ``world_size`` processes joined by gloo.

    Args:
        target: ``"package.module:function"``, importable from the repository root. The function runs after
            ``init_process_group("gloo")`` and must return something ``json.dumps`` accepts.
        world_size: number of processes.
        kwargs: JSON-serialisable keyword arguments for ``target``.
        timeout_s: wall-clock limit for the whole run.
        grace_s: seconds between SIGTERM and SIGKILL when the run is stopped.
        threads_per_rank: intra-op threads per process (``torch.set_num_threads``).

    Returns:
        The ranks' results, in rank order.

    Raises:
        ValueError: ``world_size`` < 1.
        TypeError: ``kwargs`` is not JSON-serialisable.
        GlooRunError: a rank failed, wrote no result, or the run timed out; the message carries the tail of each
            rank's output, and every worker's process group has been stopped.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, but got {world_size=}.")
    kwargs_json = json.dumps(dict(kwargs or {}))  # raises TypeError for non-JSON kwargs
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["OMP_NUM_THREADS"] = str(threads_per_rank)
    with tempfile.TemporaryDirectory(prefix="autoshard-gloo-") as tmp:
        procs: list[subprocess.Popen[bytes]] = []
        logs = []
        try:
            for rank in range(world_size):
                log = open(Path(tmp, f"rank{rank}.log"), "wb")  # noqa: SIM115  # closed in finally
                logs.append(log)
                cmd = [sys.executable, "-m", "tests.strategies.gloo_harness", target, "--rank", str(rank),
                       "--world-size", str(world_size), "--port", str(port), "--kwargs", kwargs_json,
                       "--out", str(Path(tmp, f"rank{rank}.json")), "--timeout-s", str(timeout_s),
                       "--threads", str(threads_per_rank)]
                # A session of its own per rank: its process group can be signalled as a whole.
                procs.append(subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True))
            failure = _wait(procs, deadline=time.monotonic() + timeout_s)
        finally:
            stop(procs, grace_s)
            for log in logs:
                log.close()
        pids = tuple(p.pid for p in procs)
        if failure is not None:
            raise GlooRunError(f"{failure}\n{_tails(tmp, world_size)}", pids=pids)
        results = []
        for rank in range(world_size):
            path = Path(tmp, f"rank{rank}.json")
            if not path.exists():
                raise GlooRunError(f"rank {rank} exited without a result.\n{_tails(tmp, world_size)}", pids=pids)
            results.append(json.loads(path.read_text()))
        return results


def _wait(procs: Sequence[subprocess.Popen[bytes]], *, deadline: float) -> str | None:
    """Wait for every process; the reason to stop early (a failed rank, the deadline), or ``None``."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [(rank, c) for rank, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            return "; ".join(f"rank {rank} exited with code {c}" for rank, c in failed)
        if all(c == 0 for c in codes):
            return None
        if time.monotonic() > deadline:
            return "the gloo run timed out"
        time.sleep(0.05)


def _tails(tmp: str, world_size: int, chars: int = 3000) -> str:
    parts = []
    for rank in range(world_size):
        path = Path(tmp, f"rank{rank}.log")
        text = path.read_text(errors="replace") if path.exists() else ""
        parts.append(f"--- rank {rank} output (tail) ---\n{text[-chars:]}")
    return "\n".join(parts)


# -- inside a rank ----------------------------------------------------------------------------------------


def track_training_steps(
    model: Any,
    batch: Any,
    make_optimizer: Callable[[Any], Any],
    *,
    loss_fn: Callable[[Any, Any], Any],
    wrap: Callable[[Any], Any] | None = None,
    steps: int = 2,
    extra_tensors: Callable[[], Iterable[Any]] | None = None,
) -> dict[str, Any]:
    """Run ``steps`` training steps with a :class:`~autoshard.profiler.tracker.MemoryTracker` on real tensors.

    Parameters, buffers and the batch are registered before anything else; tracking starts before
    ``wrap(model)`` runs, so buffers a wrapper allocates at construction are counted from then on. Each step is
    forward, loss, backward, ``optimizer.step()``, ``optimizer.zero_grad(set_to_none=True)``, as the profiler
    traces it. Python's cyclic GC is paused during the steps (as in the profiler).

    Args:
        model: the module (unwrapped).
        batch: one micro-batch (tensor, sequence or mapping, as ``autoshard.models.source.call_model`` takes).
        make_optimizer: builds the optimizer from the wrapped model's parameters.
        loss_fn: ``loss_fn(output, batch)``.
        wrap: the distributed wrapper (e.g. ``DistributedDataParallel``); ``None`` trains ``model`` itself.
        steps: optimizer steps.
        extra_tensors: returns tensors to count that the tracker cannot see being created — those allocated
            on another thread, e.g. in a communication future's callback (PowerSGD's error feedback). Called
            after wrapping and after each backward; they are counted as temporaries from then on.

    Returns:
        JSON-ready dict: ``step_peak_bytes`` (highest point in the step phases), ``step_peak_phase``,
        ``step_peak_step``, ``step_peak_by_category``, ``phase_peaks`` ({phase: {category: bytes, "total":
        bytes, "step": n}}), ``setup_peak_bytes`` (the highest point while wrapping), ``end_bytes`` (alive after
        the last step, by category).
    """
    import torch
    from torch.utils._pytree import tree_iter

    from autoshard.models.source import call_model
    from autoshard.profiler.tracker import Category, MemoryTracker

    tracker = MemoryTracker()

    def pack(t: torch.Tensor) -> torch.Tensor:
        tracker.track(t, Category.ACTIVATIONS)
        return t

    def on_grad(p: torch.Tensor) -> None:
        if p.grad is not None:
            tracker.track(p.grad, Category.GRADIENTS)

    tracker.track_all(model.parameters(), Category.PARAMETERS)
    tracker.track_all(model.buffers(), Category.BUFFERS)
    tracker.track_all((t for t in tree_iter(batch) if isinstance(t, torch.Tensor)), Category.INPUTS)
    params = [p for p in model.parameters() if p.requires_grad]
    handles = [p.register_post_accumulate_grad_hook(on_grad) for p in params]
    try:
        with _gc_paused(), tracker:
            tracker.phase = "setup"
            wrapped = wrap(model) if wrap is not None else model
            if extra_tensors is not None:
                tracker.track_all(extra_tensors(), Category.TEMPORARIES)
            optimizer = make_optimizer(wrapped.parameters())
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                for step in range(steps):
                    tracker.step = step
                    tracker.phase = "forward"
                    output = call_model(wrapped, batch)
                    tracker.phase = "loss"
                    loss = loss_fn(output, batch)
                    del output
                    tracker.phase = "backward"
                    loss.backward()
                    del loss
                    # A wrapper may swap .grad for a view of its own buffer after the accumulate-grad hook
                    # (DDP with gradient_as_bucket_view): count what .grad is now as gradients.
                    for p in params:
                        if p.grad is not None:
                            tracker.track(p.grad, Category.GRADIENTS)
                    if extra_tensors is not None:
                        tracker.track_all(extra_tensors(), Category.TEMPORARIES)
                    tracker.phase = "optimizer"
                    optimizer.step()
                    for state in optimizer.state.values():
                        for v in state.values():
                            if isinstance(v, torch.Tensor):
                                tracker.track(v, Category.OPTIMIZER)
                    tracker.phase = "zero_grad"
                    optimizer.zero_grad(set_to_none=True)
                    _settle(tracker)
            end = {c.value: b for c, b in tracker.totals.items()}
    finally:
        for h in handles:
            h.remove()
    phase_peaks = {
        phase: {**{c.value: b for c, b in snap.by_category.items()}, "total": snap.total_bytes, "step": snap.step}
        for phase, snap in tracker.phase_peaks.items()
    }
    in_steps = {p: v for p, v in phase_peaks.items() if p in STEP_PHASES}
    top = max(in_steps, key=lambda p: in_steps[p]["total"])
    return {
        "step_peak_bytes": in_steps[top]["total"],
        "step_peak_phase": top,
        "step_peak_step": in_steps[top]["step"],
        "step_peak_by_category": {k: v for k, v in in_steps[top].items() if k not in ("total", "step")},
        "phase_peaks": phase_peaks,
        "setup_peak_bytes": phase_peaks.get("setup", {}).get("total", 0),
        "end_bytes": end,
    }


def _settle(tracker: Any, *, poll_s: float = 0.01, quiet_polls: int = 3, limit_s: float = 2.0) -> None:
    """Wait, the GIL released, until the live bytes stop changing (``quiet_polls`` polls in a row), at most
    ``limit_s``. A communication thread lets go of what it holds from the step just ended only once it gets the
    GIL (a comm hook's callback, released there, closes over the bucket that DDP replaces when it rebuilds its
    buckets in the next forward; the work keeps the hook's compressed copy). Under load that was after the next
    step's backward began: test_ddp's fp16_compress case with bucket views measured the old bucket and its fp16
    copy on top of the step (+1.5 x the bucket, 4.79 MB against 3.75 MB), once in four CI runs."""
    last, quiet, deadline = tracker.total_bytes, 0, time.monotonic() + limit_s
    while quiet < quiet_polls and time.monotonic() < deadline:
        time.sleep(poll_s)
        quiet = quiet + 1 if tracker.total_bytes == last else 0
        last = tracker.total_bytes


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def probe_rank(*, rank: int, world_size: int, hang_rank: int | None = None, fail_rank: int | None = None
               ) -> dict[str, Any]:
    """A rank function for testing the harness: all-reduces its rank, or hangs, or raises, when told to."""
    import torch
    import torch.distributed as dist

    if rank == fail_rank:
        raise RuntimeError(f"rank {rank} fails on purpose")
    if rank == hang_rank:
        time.sleep(3600)
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    return {"rank": rank, "world_size": world_size, "rank_sum": total.item(), "pid": os.getpid(),
            "pgid": os.getpgid(0)}


def _resolve(target: str) -> Callable[..., Any]:
    module_name, sep, attr = target.partition(":")
    if not sep or not attr:
        raise ValueError(f"target must be 'module:function', but got {target=}.")
    return getattr(importlib.import_module(module_name), attr)  # type: ignore[no-any-return]


def _worker(argv: Sequence[str] | None = None) -> int:
    """Entry point of one rank: join the gloo group, call the target, write its JSON result."""
    parser = argparse.ArgumentParser(prog="gloo_harness")
    parser.add_argument("target")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kwargs", default="{}")
    parser.add_argument("--out", required=True)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    fn = _resolve(args.target)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                            world_size=args.world_size, timeout=timedelta(seconds=args.timeout_s))
    try:
        result = fn(rank=args.rank, world_size=args.world_size, **json.loads(args.kwargs))
        text = json.dumps(result)  # fails here, in the rank, if the result is not JSON
        tmp = Path(args.out + ".partial")
        tmp.write_text(text)
        tmp.replace(args.out)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = _worker()
    # Leave without running interpreter and C++ static teardown: after DeepSpeed's CPU communication ops have
    # been loaded, a background thread left running at exit occasionally aborts the process ("terminate called
    # without an active exception", SIGABRT) after the rank has already written its result.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
