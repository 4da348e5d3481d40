"""A study in a real PostgreSQL server on loopback, shared by several tuner processes.

Skipped, with the reason, where the throw-away server cannot run (see ``tests/tuner/postgres.py``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from tests.tuner.postgres import postgres_server, postgres_unavailable

TRIALS_PER_WORKER = 5

# One worker: opens the study, waits at a file barrier until the other worker has too (so that both really run
# at once), then runs its trials, each tagged with the worker's index.
_WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import optuna

    url, study_name, barrier, worker, n_trials = sys.argv[1:]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=study_name, storage=url, load_if_exists=True)
    Path(barrier, worker).touch()
    deadline = time.monotonic() + 20
    while len(list(Path(barrier).iterdir())) < 2:
        if time.monotonic() > deadline:
            sys.exit("the other worker never opened the study")
        time.sleep(0.02)

    def objective(trial):
        trial.set_user_attr("worker", int(worker))
        time.sleep(0.05)
        return trial.suggest_float("x", -1.0, 1.0) ** 2

    study.optimize(objective, n_trials=int(n_trials))
    """
)


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    """A SQLAlchemy URL of an empty database in a throw-away PostgreSQL server on 127.0.0.1."""
    reason = postgres_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with postgres_server(tmp_path) as url:
        yield url


def test_two_processes_share_one_optuna_study_in_postgres(postgres_url: str, tmp_path: Path) -> None:
    # Optuna creates its tables on first use with CREATE TABLE/TYPE, which is not atomic in PostgreSQL: two
    # processes doing it at once on an empty database fail one of them (UniqueViolation on
    # pg_type_typname_nsp_index, or DuplicateTable) in most runs. Create the schema first; this test is about
    # sharing the study.
    optuna.storages.RDBStorage(postgres_url).engine.dispose()
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, postgres_url, "shared", str(barrier), str(index), str(TRIALS_PER_WORKER)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for index in range(2)
    ]
    for worker in workers:
        output, _ = worker.communicate(timeout=60)
        assert worker.returncode == 0, output

    study = optuna.load_study(study_name="shared", storage=postgres_url)
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2 * TRIALS_PER_WORKER
    assert sorted(t.number for t in trials) == list(range(2 * TRIALS_PER_WORKER))
    assert Counter(t.user_attrs["worker"] for t in trials) == {0: TRIALS_PER_WORKER, 1: TRIALS_PER_WORKER}
    spans = [
        (min(t.datetime_start for t in trials if t.user_attrs["worker"] == w),
         max(t.datetime_complete for t in trials if t.user_attrs["worker"] == w))
        for w in (0, 1)
    ]
    assert spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1], f"the workers did not overlap: {spans}"


def test_two_tuners_share_one_study_in_a_fresh_postgres_database(postgres_url: str, tmp_path: Path) -> None:
    # Two `autoshard tune` processes, as two nodes would run them, open the same study in an empty database at
    # the same moment (the schema race above is autoshard's to handle) and share the trial budget.
    def tuner(index: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "autoshard", "tune", "tiny-gpt2", "--gpus", "2", "--seq-len", "32",
             "--batch-sizes", "2", "--strategies", "ddp", "--top", "1", "--steps", "60", "--warmup-steps", "1",
             "--trials", "4", "--precision", "32-true", "--no-prune", "--no-cache", "--storage", postgres_url,
             "--study-name", "shared", "--output-dir", str(tmp_path / f"node{index}"), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    tuners = [tuner(0), tuner(1)]
    outputs = [t.communicate(timeout=600) for t in tuners]
    for t, (_, err) in zip(tuners, outputs, strict=True):
        assert t.returncode == 0, err[-3000:]
    study = optuna.load_study(study_name="shared", storage=postgres_url)
    finished = [t for t in study.trials if t.state.is_finished()]
    assert len(finished) >= 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in finished)
    owners = Counter(t.user_attrs["autoshard_owner"]["pid"] for t in finished)
    assert len(owners) == 2, f"one tuner ran every trial: {owners}"
    for out, _ in outputs:  # each tuner reports the whole shared study
        assert len(json.loads(out)["trials"]) == len(study.trials)


def test_unreachable_postgres_url_raises_operational_error_quickly() -> None:
    pytest.importorskip("psycopg", reason="psycopg, the PostgreSQL driver, is not installed")
    import sqlalchemy.exc

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again on leaving the block: nothing listens there
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/autoshard"

    started_s = time.monotonic()
    # Message: '(psycopg.OperationalError) connection failed: connection to server at "127.0.0.1", port N failed:
    # Connection refused ...' (libpq's words, translated where libpq has a catalogue for the locale).
    with pytest.raises(sqlalchemy.exc.OperationalError, match=str(port)):
        optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"connect_timeout": 3}})
    elapsed_s = time.monotonic() - started_s

    assert elapsed_s < 5, f"a refused connection took {elapsed_s:.1f} s to report"


def test_a_database_lost_mid_study_is_said_in_words_and_the_study_resumes(postgres_url: str, tmp_path: Path) -> None:
    # A server stopped during a trial ended `autoshard tune` with "internal error: StorageInternalError" (team-tuning
    # probe). Here the database refuses new connections and drops the open ones while trial 0 runs.
    import psycopg
    import sqlalchemy

    import autoshard
    from autoshard.errors import StorageLost
    from autoshard.planner.plan_file import ExportedPlan
    from autoshard.tuner.runner import Measurement

    from .standin import DDP_SPACE

    server = sqlalchemy.engine.make_url(postgres_url)
    admin = {"host": server.host, "port": server.port, "user": server.username, "dbname": "postgres",
             "autocommit": True}

    def connections(allowed: bool) -> None:
        with psycopg.connect(**admin) as conn:
            conn.execute(f"ALTER DATABASE {server.database} ALLOW_CONNECTIONS {str(allowed).lower()}")
            if not allowed:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                             (server.database,))

    runs: list[int] = []

    def runner(exported: ExportedPlan, spec: object, run_dir: Path, **_: object) -> Measurement:
        runs.append(exported.micro_batch_size)
        if len(runs) == 1:
            connections(False)
        return Measurement(samples_per_s=100.0 * exported.micro_batch_size, tokens_per_s=None, step_time_s=1.0,
                           peak_memory_bytes=None, peak_memory_kind=None, step_times_s=(1.0,) * 5)

    args = {"processes": 2, "seq_len": 32, "precision": "32-true", "steps": 5, "warmup_steps": 2, "progress": False,
            "use_cache": False, "prune": False, "space": DDP_SPACE, "trials": 2, "storage": postgres_url,
            "study_name": "lost", "runner": runner}
    with pytest.raises(StorageLost) as caught:
        autoshard.tune("tiny-gpt2", output_dir=tmp_path / "a", **args)
    assert caught.value.exit_code == 1
    assert caught.value.message.startswith(f"lost the study storage {postgres_url} during the study: ")
    assert "the same command resumes the study" in (caught.value.hint or "")
    connections(True)
    result = autoshard.tune("tiny-gpt2", output_dir=tmp_path / "a", **args)  # the same command, the server back
    assert [t.failure for t in result.trials if t.number == 0] == ["stale"]
    reruns = [t for t in result.trials if t.rerun_of == 0]
    assert len(reruns) == 1 and reruns[0].state == "complete"
    measured = [t for t in result.trials if t.state == "complete" and t.duplicate_of is None]
    assert sorted(t.config.micro_batch_size for t in measured if t.config) == [1, 2]  # the budget, rerun included
