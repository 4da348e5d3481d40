"""Where a study lives (SQLite by default, a journal file, a database URL), the fingerprint a resumed study must
match, and failing the trials of a tuner that was killed."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest

from autoshard.errors import UsageError
from autoshard.tuner import storage

optuna.logging.set_verbosity(optuna.logging.WARNING)

FINGERPRINT = {"model": "sha256:aaa", "hardware": "sha256:bbb", "batch": "sha256:ccc"}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://tuner:secret@db.example:5432/studies", "postgresql://tuner:***@db.example:5432/studies"),
        ("postgresql+psycopg2://tuner:s3cr:et@10.0.0.5/studies", "postgresql+psycopg2://tuner:***@10.0.0.5/studies"),
        ("mysql://root:pw@localhost/optuna?charset=utf8", "mysql://root:***@localhost/optuna?charset=utf8"),
        ("postgresql://tuner:@db/studies", "postgresql://tuner:***@db/studies"),
        ("postgresql://tuner@db.example:5432/studies", "postgresql://tuner@db.example:5432/studies"),
        ("postgresql://db.example:5432/studies", "postgresql://db.example:5432/studies"),
        ("sqlite:////tmp/out/study.db", "sqlite:////tmp/out/study.db"),
        ("runs/journal.log", "runs/journal.log"),
        # SQLAlchemy's URL parser takes everything up to the last '@' before the host as the password.
        ("postgresql://tuner:a/b@db/studies", "postgresql://tuner:***@db/studies"),
    ],
)
def test_mask_hides_only_the_password(url: str, expected: str) -> None:
    assert storage.mask(url) == expected


def test_the_default_storage_is_a_sqlite_file_in_the_output_dir(tmp_path: Path) -> None:
    backend, shown = storage.open_storage(None, tmp_path)
    assert shown == f"sqlite:///{(tmp_path / storage.DEFAULT_FILE).resolve()}"
    optuna.create_study(study_name="s", storage=backend)
    assert (tmp_path / storage.DEFAULT_FILE).is_file()
    reopened, _ = storage.open_storage(None, tmp_path)
    assert optuna.load_study(study_name="s", storage=reopened).study_name == "s"


def test_a_path_ending_in_log_is_a_journal_file(tmp_path: Path) -> None:
    path = str(tmp_path / "journal.log")
    backend, shown = storage.open_storage(path, tmp_path)
    assert shown == path
    study = optuna.create_study(study_name="s", storage=backend, direction="maximize")
    study.tell(study.ask(), 1.0)
    assert Path(path).stat().st_size > 0
    reopened, _ = storage.open_storage(path, tmp_path)
    assert len(optuna.load_study(study_name="s", storage=reopened).trials) == 1


@pytest.mark.parametrize("url", ["study.db", "runs/study", "postgres-host:5432/db"])
def test_neither_a_url_nor_a_journal_file_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(UsageError, match="neither a database URL nor a journal file"):
        storage.open_storage(url, tmp_path)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_database_is_a_usage_error_that_hides_the_password(tmp_path: Path) -> None:
    url = f"postgresql://u:secret@127.0.0.1:{closed_port()}/db"
    started = time.monotonic()
    with pytest.raises(UsageError) as info:
        storage.open_storage(url, tmp_path)
    assert time.monotonic() - started < 5
    text = str(info.value)
    assert "secret" not in text
    assert storage.mask(url) in text or "driver is missing" in text


def test_an_output_dir_under_a_regular_file_is_a_usage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(UsageError, match="cannot write to the output directory"):
        storage.writable_dir(blocker / "out")


def test_writable_dir_creates_the_directory_and_leaves_no_probe(tmp_path: Path) -> None:
    out = storage.writable_dir(tmp_path / "a" / "b")
    assert out.is_dir() and list(out.iterdir()) == []


# -- fingerprint ----------------------------------------------------------------------------------------------


def test_a_new_study_records_the_fingerprint_and_the_same_one_passes() -> None:
    study = optuna.create_study()
    storage.check_fingerprint(study, FINGERPRINT, "memory")
    assert study.user_attrs[storage.FINGERPRINT_ATTR] == FINGERPRINT
    storage.check_fingerprint(study, dict(FINGERPRINT), "memory")


@pytest.mark.parametrize("key", sorted(FINGERPRINT))
def test_another_fingerprint_is_refused_naming_what_differs(key: str) -> None:
    study = optuna.create_study(study_name="tune-gpt2")
    storage.check_fingerprint(study, FINGERPRINT, "sqlite:///x/study.db")
    with pytest.raises(UsageError, match="made for another job") as info:
        storage.check_fingerprint(study, {**FINGERPRINT, key: "sha256:zzz"}, "sqlite:///x/study.db")
    message = info.value.message
    assert f"the {key} was {FINGERPRINT[key]} then, sha256:zzz now" in message
    assert "tune-gpt2" in message and "sqlite:///x/study.db" in message
    assert all(other not in message for other in FINGERPRINT if other != key)


def test_a_study_with_trials_but_no_fingerprint_is_refused() -> None:
    study = optuna.create_study(study_name="someone-elses")
    study.tell(study.ask(), 1.0)
    with pytest.raises(UsageError, match="was not made by autoshard tune"):
        storage.check_fingerprint(study, FINGERPRINT, "memory")
    assert storage.FINGERPRINT_ATTR not in study.user_attrs


# -- stale trials ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dead_owner() -> dict[str, object]:
    """The owner record of a process of this host that has since exited."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(proc.pid).create_time()
    finally:
        proc.kill()
        proc.wait()
    return {"host": socket.gethostname(), "pid": proc.pid, "started": started}


def running_trial(study: optuna.Study, owner: dict[str, object] | None) -> int:
    trial = study.ask()
    if owner is not None:
        trial.set_user_attr(storage.OWNER_ATTR, owner)
    return trial.number


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # tune records heartbeats itself, as here (none)
def test_only_a_trial_of_a_dead_process_on_this_host_is_failed(tmp_path: Path, dead_owner: dict[str, object]) -> None:
    backend, _ = storage.open_storage(None, tmp_path)
    study = optuna.create_study(study_name="s", storage=backend, direction="maximize")
    dead = running_trial(study, dead_owner)
    alive = running_trial(study, storage.owner())
    elsewhere = running_trial(study, {**dead_owner, "host": "another-node.invalid"})
    recycled = running_trial(study, {**storage.owner(), "started": storage.owner()["started"] - 3600})
    unowned = running_trial(study, None)

    assert storage.fail_stale_trials(study) == [dead, recycled]

    trials = {t.number: t for t in optuna.load_study(study_name="s", storage=backend).trials}
    running = optuna.trial.TrialState.RUNNING
    assert {n: trials[n].state for n in (alive, elsewhere, unowned)} == dict.fromkeys((alive, elsewhere, unowned),
                                                                                          running)
    for n in (dead, recycled):
        assert trials[n].state == optuna.trial.TrialState.FAIL
        assert trials[n].user_attrs["failure"] == "stale"
    assert storage.fail_stale_trials(study) == []  # nothing left to fail on a second resume
    # a study starting: a trial of this very process is one it left (a tune() that lost its storage, called again)
    assert storage.fail_stale_trials(study, own_too=True) == [alive]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_trial_of_a_killed_tuner_not_yet_reaped_is_failed(tmp_path: Path) -> None:
    """A SIGKILLed tuner whose parent has not called wait() is a zombie: same pid and start time, nothing running."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        zombie = {"host": socket.gethostname(), "pid": proc.pid, "started": psutil.Process(proc.pid).create_time()}
        proc.kill()
        end = time.monotonic() + 10
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < end:
            time.sleep(0.05)
        backend, _ = storage.open_storage(None, tmp_path)
        study = optuna.create_study(study_name="s", storage=backend, direction="maximize")
        n = running_trial(study, zombie)
        assert storage.fail_stale_trials(study) == [n]
    finally:
        proc.wait()


def test_owner_describes_this_process() -> None:
    me = storage.owner()
    assert me["host"] == socket.gethostname()
    assert me["pid"] == psutil.Process().pid
    assert me["started"] == pytest.approx(psutil.Process().create_time())


@pytest.mark.parametrize("existed", [False, True])
def test_a_study_refused_before_it_starts_leaves_no_study_db_behind(tmp_path: Path, existed: bool) -> None:
    """A refusal after the default storage was opened (here: an unknown strategy) left an empty study.db, and the
    output directory it made, where the user asked for results."""
    from autoshard.tuner.study import run_study

    out = tmp_path / "tune"
    if existed:
        out.mkdir()
        (out / "mine.txt").write_text("kept")
    with pytest.raises(UsageError, match="unknown strategy"):
        run_study("tiny-gpt2", strategies=["zero9"], processes=1, output_dir=out, trials=1)
    assert not (out / "study.db").exists()
    assert out.is_dir() is existed and (not existed or (out / "mine.txt").read_text() == "kept")


def test_postgres_scheme_is_read_as_postgresql(tmp_path: Path) -> None:
    # libpq's and Heroku's postgres:// was "not a database URL SQLAlchemy can open" (team-tuning probe)
    url = f"postgres://u:secret@127.0.0.1:{closed_port()}/db"
    with pytest.raises(UsageError) as info:
        storage.open_storage(url, tmp_path)
    text = str(info.value)
    assert "not a database URL" not in text and "secret" not in text
    assert f"postgresql://u:***@127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}/db" in text or "driver" in text


_OPEN_AT_ONCE = """
import sys, time
from pathlib import Path
from autoshard.tuner.storage import open_storage
url, go = sys.argv[1], float(sys.argv[2])
time.sleep(max(0.0, go - time.time()))
open_storage(url, Path("."))
"""


def test_two_tuners_opening_a_new_sqlite_study_at_once_both_open_it(tmp_path: Path) -> None:
    # Optuna creating its tables in a new file from two processes failed about 3 times in 10 ("UNIQUE constraint
    # failed: alembic_version.version_num", "table trial_heartbeats already exists"), and was told to check that
    # the file can be written (team-tuning probe)
    for attempt in range(4):
        url = f"sqlite:///{tmp_path / f'shared{attempt}.db'}"
        go = time.time() + 3.0  # both past their imports, then at the same moment
        procs = [subprocess.Popen([sys.executable, "-c", _OPEN_AT_ONCE, url, str(go)], cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, f"attempt {attempt}: {err[-2000:]}"
