"""Starting one worker process per rank on this machine, watching them, and stopping them all when one fails.

Each worker runs in a session of its own, so it and anything it starts form one process group; stopping a
worker is SIGTERM to that group, a grace period, then SIGKILL — by process-group id, never by name. Rank 0
writes to this process's terminal; the other ranks write to ``rank<N>.log`` in the run directory, and their lines
are said on this process's stderr as ``[rank N] ...`` (a line another rank said already, once). A worker
that fails writes ``error-rank<N>.json`` (its exception's class, message and hint) before it exits, so the
error raised here names the rank and says what went wrong there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from autoshard import errors
from autoshard.errors import (
    AutoshardError,
    UsageError,
    WorkerError,
    WorkerKilled,
    WorkerTimeout,
)

RUN_DIR_VAR = "AUTOSHARD_RUN_DIR"
"""Set in every worker: the directory holding ``plan.json`` and receiving results."""
LAUNCHER_PID_VAR = "AUTOSHARD_LAUNCHER_PID"
"""Set in every worker: the process id of the process that started it, so a worker can tell, from its very
first line, whether that process is still its parent (a worker started just before its launcher was killed is
already an orphan when it looks)."""
_NOT_REEXECUTABLE = ("pytest", "ipykernel_launcher", "ipykernel", "IPython", "jupyter", "pydevd")


def is_worker(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one of the workers :func:`autoshard.fit` started: your script run again once per
    rank, or ``python -m autoshard.runtime.worker``.

    When ``fit()`` starts the workers itself, every rank runs your script from the top up to its ``fit()``
    call (and leaves there); the launching process runs all of it. Guard what only the launching process
    should do before ``fit()`` — printing, plotting, downloading, writing files — with ``if not
    autoshard.is_worker():``. Under ``torchrun`` / ``deepspeed`` / ``srun`` the launcher started every rank and
    each runs your whole script, so this is ``False`` there: use ``RANK`` (or
    ``torch.distributed.get_rank()``) to pick one. ``False`` in a plain single process too.

    Args:
        environ: the environment to read (default: this process's).

    Example:
        >>> is_worker({RUN_DIR_VAR: "/tmp/autoshard-fit-x", "RANK": "1", "WORLD_SIZE": "2"})
        True
        >>> is_worker({"RANK": "1", "WORLD_SIZE": "2"})  # a torchrun rank
        False
    """
    return bool((os.environ if environ is None else environ).get(RUN_DIR_VAR))


def leave_with_launcher(environ: Mapping[str, str]) -> None:
    """In a worker: leave (exit code 1) when the process that started it is gone — killed, or out of memory — so
    that no worker outlives its launcher; at once if it is gone already (the worker was orphaned while it
    started: importing torch takes seconds). The launcher is the one :data:`LAUNCHER_PID_VAR` names, else the
    parent at the time of the call. A daemon thread looks every half second.

    Args:
        environ: the worker's environment.
    """
    import threading

    named = environ.get(LAUNCHER_PID_VAR, "")
    launcher = int(named) if named.isdigit() else os.getppid()
    if os.getppid() != launcher:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="autoshard-launcher-watch", daemon=True).start()


STACKS_FILE = "stacks-rank{rank}.txt"
"""Where a worker writes every thread's Python stack when it is stopped (SIGTERM), in the run directory."""


def dump_stacks_when_stopped(environ: Mapping[str, str]) -> None:
    """In a worker: when stopped with SIGTERM (a time limit, a peer's failure, Ctrl-C in the launcher), first
    write every thread's Python stack to :data:`STACKS_FILE` in the run directory (:mod:`faulthandler`, which
    writes from the signal handler even while the main thread is blocked in C, e.g. a collective), then stop as
    before. A timed-out run's error then says where each rank was.

    Args:
        environ: the worker's environment (:data:`RUN_DIR_VAR`, ``RANK``).
    """
    import faulthandler

    run_dir = environ.get(RUN_DIR_VAR)
    if not run_dir or not hasattr(faulthandler, "register"):  # not a worker; or Windows
        return
    path = Path(run_dir) / STACKS_FILE.format(rank=environ.get("RANK", "0"))
    stream = open(path, "w", encoding="utf-8")  # noqa: SIM115  # open for the process's life: written at SIGTERM
    faulthandler.register(signal.SIGTERM, file=stream, all_threads=True, chain=True)


def where_stopped(run_dir: Path, world_size: int) -> str:
    r"""Each rank's innermost frames when it was stopped, from the stacks :func:`dump_stacks_when_stopped` wrote
    (the thread the signal ran on: the main one), one line per rank; empty when none were written.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "stacks-rank0.txt").write_text(
        ...     'Current thread 0x1 (most recent call first):\n  File "/x/train.py", line 9 in step\n'
        ...     '  File "/x/train.py", line 20 in <module>\n')
        >>> where_stopped(d, 2)
        'rank 0 was in step (/x/train.py:9) ← <module> (/x/train.py:20)'
    """
    lines = []
    for rank in range(world_size):
        path = run_dir / STACKS_FILE.format(rank=rank)
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        frames = _current_thread_frames(text)[:3]
        if frames:
            lines.append(f"rank {rank} was in " + " ← ".join(frames))
    return "\n".join(lines)


def _current_thread_frames(text: str) -> list[str]:
    """``function (file:line)`` of the stack faulthandler marked current (else its first), innermost first."""
    blocks = [b for b in text.split("\n\n") if "File " in b]
    current = [b for b in blocks if b.lstrip().startswith("Current thread")] or blocks[:1]
    frames = []
    for line in current[0].splitlines() if current else ():
        line = line.strip()
        if line.startswith('File "') and '", line ' in line and " in " in line:
            file, rest = line[len('File "'):].split('", line ', 1)
            number, _, function = rest.partition(" in ")
            frames.append(f"{function} ({file}:{number})")
    return frames


@contextlib.contextmanager
def sigterm_unwinds(checkpoint_dir: Path | None = None) -> Iterator[None]:
    """While active, SIGTERM (a job scheduler's time limit, ``kill``) raises ``SystemExit(143)`` in this process, so
    that the caller's ``finally`` blocks stop the workers and remove the run directory: by default SIGTERM ended the
    launching process at once and left ``$TMPDIR/autoshard-fit-*``, the model's weights in it (a concurrency probe).
    Left alone off the main thread (signals are delivered there) and where the process has its own handler. With
    ``checkpoint_dir``, the message names the latest checkpoint there and how to continue from it."""
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def stopped(signum: int, frame: Any) -> None:
        print(f"autoshard: fit() terminated (SIGTERM): its workers are stopped.{_resumable(checkpoint_dir)}",
              file=sys.stderr)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stopped)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _resumable(checkpoint_dir: Path | None) -> str:
    """What a stopped run left to continue from (a probe's SIGTERM at step 2,000 said nothing of it)."""
    if checkpoint_dir is None:
        return ""
    from autoshard.runtime.checkpoint import latest

    found = latest(checkpoint_dir) if checkpoint_dir.is_dir() else None
    if found is None:
        return f" No checkpoint was written in {checkpoint_dir} yet."
    return (f" The latest checkpoint is {found}: fit(..., checkpointing=Checkpointing(dir={str(checkpoint_dir)!r}, "
            "resume=True)) continues from it.")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def script_command(orig_argv: Sequence[str] | None = None) -> list[str] | None:
    """The command that started this process, to run again as a worker — or ``None`` when it cannot be run
    again (an interactive session, a notebook, pytest, or a ``-c`` program that reads its code from standard
    input, as execnet's bootstrap of a pytest-xdist worker does: a worker's standard input is empty).

    Args:
        orig_argv: the interpreter's command line (default: ``sys.orig_argv``).

    Example:
        >>> script_command(["python", "-c", "import sys;exec(eval(sys.stdin.readline()))"]) is None
        True
        >>> script_command(["python", "-m", "pytest", "tests"]) is None
        True
        >>> script_command(["python", "-c", "import train; train.main()"])[1:]
        ['-c', 'import train; train.main()']
    """
    argv = list(getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv)[1:]
    if not argv:
        return None
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-m", "-c"):
        i += 2 if argv[i] in ("-X", "-W") else 1  # interpreter options (some take a value)
    if i >= len(argv):
        return None
    if argv[i] == "-m":
        if i + 1 >= len(argv) or argv[i + 1].split(".")[0] in _NOT_REEXECUTABLE:
            return None
    elif argv[i] == "-c":
        if i + 1 >= len(argv) or "stdin" in argv[i + 1]:
            return None
    else:
        script = Path(argv[i])
        if not script.is_file() or script.name.split(".")[0] in _NOT_REEXECUTABLE:
            return None
    return [sys.executable, *argv]


def run_workers(command: Sequence[str], *, world_size: int, run_dir: Path, environ: Mapping[str, str],
                timeout_s: float | None = None, grace_s: float = 10.0, log_rank0: bool = False,
                on_poll: Callable[[], None] | None = None) -> None:
    """Run ``command`` once per rank and wait for all of them.

    Args:
        command: the worker command line.
        world_size: number of ranks (all on this machine).
        run_dir: the run directory (``AUTOSHARD_RUN_DIR``); logs and error files go there.
        environ: the environment to start from (the caller's).
        timeout_s: stop everything after this long (``None``: no limit).
        grace_s: seconds between SIGTERM and SIGKILL.
        log_rank0: rank 0 writes to ``rank0.log`` too, instead of this process's terminal.
        on_poll: called about every 50 ms while the workers run; whatever it raises stops every worker and
            is raised from here (the tuner prunes a trial this way).

    Raises:
        WorkerTimeout: the run did not finish within ``timeout_s``; every worker's process group was stopped.
        WorkerError: a rank failed (exit code, its error message); every worker's process group has been
            stopped. If the rank raised an autoshard error, that error's class is raised instead, its message
            prefixed with the rank.
    """
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    echoes: list[threading.Thread] = []
    seen: dict[bytes, int] = {}
    try:
        for rank in range(world_size):
            env = dict(environ)
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                       LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       **{RUN_DIR_VAR: str(run_dir), LAUNCHER_PID_VAR: str(os.getpid())})
            if rank == 0 and not log_rank0:
                out: Any = None  # inherit: the user sees rank 0's output
            else:
                out = open(run_dir / f"rank{rank}.log", "wb")  # noqa: SIM115  # closed below
                logs.append(out)
            try:
                procs.append(subprocess.Popen(list(command), env=env, stdin=subprocess.DEVNULL,
                                              stdout=out if log_rank0 or out is None else subprocess.PIPE,
                                              stderr=subprocess.STDOUT if out is not None else None,
                                              start_new_session=True))
                if out is not None and not log_rank0:  # the user's terminal sees it too, once per line
                    echoes.append(_echo(procs[-1], out, rank, seen))
            except OSError as exc:  # the program cannot be run: permissions, a removed venv, no processes left
                raise WorkerError(f"could not start rank {rank}'s worker process ({command[0]}): "
                                  f"{exc.strerror or exc}.",
                                  hint="fit() and tune start their workers with this Python; check it can be run "
                                       "(its file and the virtual environment still exist and are executable) and "
                                       "that this user may start more processes (ulimit -u).") from exc
        failure = _wait(procs, None if timeout_s is None else time.monotonic() + timeout_s, on_poll)
    except BaseException:
        stop(procs, grace_s)
        raise
    finally:
        for echo in echoes:
            echo.join(timeout=5.0)  # a grandchild holding the pipe open does not hold the run
        for log in logs:
            log.close()
    stop(procs, grace_s)
    if failure is not None:
        raise _error(failure, run_dir, world_size, user_script=not _autoshards_own(command))


def _echo(proc: subprocess.Popen[bytes], log: Any, rank: int, seen: dict[bytes, int]) -> threading.Thread:
    """Copy a rank's output to its log and to this process's stderr as ``[rank N] ...``, but for a line another
    rank said already (``seen``: each line's first rank): what only rank 1 printed or warned (its share of the
    data held the long batch) was lost with the run directory after a run that succeeded."""

    def copy() -> None:
        stream = proc.stdout
        if stream is None:  # started without a pipe: nothing to echo
            return
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream loses the echo, not the run
            for line in iter(stream.readline, b""):
                log.write(line)
                if seen.setdefault(line, rank) != rank:  # another rank said it: once is enough
                    continue
                sys.stderr.write(f"[rank {rank}] {line.decode(errors='replace').rstrip()}\n")
                sys.stderr.flush()
            log.flush()

    thread = threading.Thread(target=copy, name=f"autoshard-rank{rank}-output", daemon=True)
    thread.start()
    return thread


def _wait(procs: Sequence[subprocess.Popen[bytes]], deadline: float | None,
          on_poll: Callable[[], None] | None = None) -> dict[int, int | None] | None:
    """``{rank: exit code}`` of the ranks found failed at the first sign of failure (``{-1: None}``: timed out),
    or ``None`` when every rank succeeded."""
    while True:
        if on_poll is not None:
            on_poll()
        codes = [p.poll() for p in procs]
        failed: dict[int, int | None] = {rank: code for rank, code in enumerate(codes) if code not in (None, 0)}
        if failed:
            return failed
        if all(c == 0 for c in codes):
            return None
        if deadline is not None and time.monotonic() > deadline:
            return {-1: None}
        time.sleep(0.05)


def stop(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM every running worker's process group, wait up to ``grace_s``, then SIGKILL what is left."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        alive = [p for p in procs if p.poll() is None]
        if not alive:
            break
        for p in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)  # a session leader: its process-group id is its pid
        end = time.monotonic() + wait_s
        while time.monotonic() < end and any(p.poll() is None for p in alive):
            time.sleep(0.05)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=1.0)


def write_error(run_dir: Path, rank: int, exc: BaseException) -> None:
    """Record why this rank failed, for the launching process (called in the worker)."""
    import traceback

    record = {"type": type(exc).__name__, "message": getattr(exc, "message", str(exc)),
              "hint": getattr(exc, "hint", None),
              "autoshard": isinstance(exc, AutoshardError), "time": time.time(),
              "traceback": "".join(traceback.format_exception(exc))[-4000:]}
    path = run_dir / f"error-rank{rank}.json"
    tmp = path.with_suffix(".partial")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    tmp.replace(path)


def _autoshards_own(command: Sequence[str]) -> bool:
    """Whether ``command`` runs one of autoshard's worker modules rather than the user's script.

    Example:
        >>> _autoshards_own(["python", "-m", "autoshard.runtime.worker"]), _autoshards_own(["python", "train.py"])
        (True, False)
    """
    return len(command) > 2 and command[1] == "-m" and command[2].startswith("autoshard.")


def _error(failed: dict[int, int | None], run_dir: Path, world_size: int, *,
           user_script: bool = True) -> AutoshardError:
    if -1 in failed:
        where = where_stopped(run_dir, world_size)
        return WorkerTimeout("the workers did not finish within the time limit and were stopped."
                             + (f"\n{where}" if where else ""),
                             hint=f"Every thread's stack is in {run_dir / STACKS_FILE.format(rank='N')}."
                             if where else None)
    records = error_records(run_dir, world_size)
    # A rank that died without a word (a signal, an abort) is the cause; the others then lose their peer.
    silent = sorted(r for r, code in failed.items() if r not in records)
    if silent or not records:
        rank = silent[0] if silent else min(failed)
        code = failed[rank] or 0
        if code >= 0 and user_script:  # an exit, not a signal: fit() reports its own errors, so the code outside it
            said = "an error" if code else "an exit"
            return WorkerError(f"rank {rank} exited with code {code} before fit() reported from it: {said} in your "
                               "script outside fit() (its traceback, if any, is in "
                               f"{'the output above' if rank == 0 else 'its output below'}); the other workers "
                               f"were stopped.{_log_tail(run_dir, rank)}",
                               hint="Each worker runs your script again from the top, so what comes before fit() "
                                    "runs in every worker too: guard what must run once (deleting or writing files, "
                                    "downloads) with `if not autoshard.is_worker():`.")
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return WorkerKilled(f"rank {rank} {how} without reporting an error; the other workers were stopped."
                            f"{_log_tail(run_dir, rank)}",
                            hint="Running out of host memory is a common cause of a kill; check `dmesg`.")
    first = first_error(records)
    rec = records[first]
    if rec.get("autoshard"):
        return rebuild_error(rec["type"], f"rank {first}: {rec['message']}", rec.get("hint"))
    return WorkerError(f"rank {first} failed: {rec['type']}: {rec['message']}",
                       hint="The worker's traceback is in the error's .detail attribute.",
                       detail=rec.get("traceback"))


def error_records(run_dir: Path, world_size: int) -> dict[int, dict[str, Any]]:
    """The error each rank reported (:func:`write_error`'s records), by rank; ranks that wrote none are absent."""
    records = {}
    for r in range(world_size):
        path = run_dir / f"error-rank{r}.json"
        if path.is_file():
            with contextlib.suppress(OSError, json.JSONDecodeError):
                records[r] = json.loads(path.read_text(encoding="utf-8"))
    return records


def first_error(records: Mapping[int, Mapping[str, Any]]) -> int:
    """The rank whose error came first: the cause (later ones are usually peers losing their connection to it)."""
    return min(records, key=lambda r: (records[r].get("time", float("inf")), r))


def rebuild_error(type_name: str, message: str, hint: str | None) -> AutoshardError:
    """The autoshard error another process reported by class name (``UsageError`` if the name is unknown)."""
    cls = getattr(errors, type_name, None)
    if isinstance(cls, type) and issubclass(cls, AutoshardError):
        with contextlib.suppress(TypeError):  # a subclass with another constructor
            return cls(message, hint=hint)
    return UsageError(message, hint=hint)


def _log_tail(run_dir: Path, rank: int, chars: int = 1500) -> str:
    path = run_dir / f"rank{rank}.log"
    if rank == 0 or not path.is_file():
        return ""
    return "\n--- its output (tail) ---\n" + path.read_text(errors="replace")[-chars:]
