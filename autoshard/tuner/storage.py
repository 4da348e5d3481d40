"""Where a study lives: by default a SQLite file in the output directory (resumed by running the same command
again), or any storage Optuna takes (``postgresql://...`` so that several nodes tune one study, or a journal
file ``*.log``); and the checks a resumed study must pass.

A study remembers what it tunes (model, hardware and batch fingerprints) and refuses to mix in trials of
something else. A trial left RUNNING by a tuner that was killed is failed on resume: at once when it ran on
this host and its process is gone, otherwise by Optuna's heartbeat once it has been silent for the grace
period (another node's tuner may still be running it).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import optuna
import psutil

from autoshard.errors import AutoshardError, UsageError

HEARTBEAT_INTERVAL_S = 15
"""Seconds between a running trial's heartbeats (database storages)."""
GRACE_PERIOD_S = 120
"""A running trial silent for this long is failed by the next tuner that opens the study."""
FINGERPRINT_ATTR = "autoshard_fingerprint"
OWNER_ATTR = "autoshard_owner"
DEFAULT_FILE = "study.db"


def open_storage(url: str | None, output_dir: Path) -> tuple[optuna.storages.BaseStorage, str]:
    """The study storage and its display name (password masked).

    Args:
        url: ``None`` for ``sqlite:///<output_dir>/study.db``; a SQLAlchemy URL (``sqlite:///``,
            ``postgresql://``, ``mysql://``); or a path ending in ``.log`` for an Optuna journal file.
        output_dir: the tuner's output directory.

    Raises:
        UsageError: the storage cannot be opened (unreachable server, bad URL, missing driver); the message
            says which storage and why.
    """
    if url is None:
        url = f"sqlite:///{(output_dir / DEFAULT_FILE).resolve()}"
    if url.startswith(("postgres://", "postgres+")):  # Heroku's and libpq's spelling, which SQLAlchemy 1.4 dropped
        url = "postgresql" + url[len("postgres"):]
    shown = mask(url)
    if "://" not in url:
        if not url.endswith(".log"):
            raise UsageError(f"--storage {url!r} is neither a database URL nor a journal file.",
                             hint="Use e.g. postgresql://user:password@host/db, sqlite:///path/study.db, or a "
                                  "path ending in .log for an Optuna journal file.")
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        try:
            return JournalStorage(JournalFileBackend(url)), url
        except OSError as e:
            raise UsageError(f"cannot open the journal file {url}: {e.strerror or e}.") from e
    try:
        with warnings.catch_warnings(), _schema_lock(url):
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat_interval
            storage = optuna.storages.RDBStorage(url, heartbeat_interval=HEARTBEAT_INTERVAL_S,
                                                 grace_period=GRACE_PERIOD_S, engine_kwargs=_engine_kwargs(url))
    except ImportError as e:
        raise UsageError(f"cannot open the study storage {shown}: its database driver is missing ({e}).",
                         hint=_driver_hint(url)) from e
    except Exception as e:  # SQLAlchemy's errors (OperationalError, ArgumentError, ...) vary by driver
        import sqlalchemy.exc

        if isinstance(e, sqlalchemy.exc.ArgumentError):  # the URL itself: malformed, or an unknown scheme
            raise UsageError(f"--storage {shown} is not a database URL SQLAlchemy can open: {_reason(e)}.",
                             hint="Use e.g. postgresql://user:password@host/db, mysql://user:password@host/db, "
                                  "sqlite:///path/study.db, or a path ending in .log for a journal file.") from e
        raise UsageError(f"cannot open the study storage {shown}: {_reason(e)}.", hint=_open_hint(url)) from e
    return storage, shown


def _driver_hint(url: str) -> str:
    """How to install the driver SQLAlchemy looks for with ``url`` (its default for the scheme).

    Example:
        >>> _driver_hint("mysql://u@host/db")
        'Install it: pip install mysqlclient (or pip install pymysql and a mysql+pymysql:// URL).'
    """
    scheme = url.split("://", 1)[0]
    if scheme.startswith("postgresql"):
        return "Install it: pip install 'psycopg[binary]' (in autoshard's checkout: pip install -e '.[postgres]')."
    if scheme == "mysql" or scheme.startswith("mysql+mysqldb"):
        return "Install it: pip install mysqlclient (or pip install pymysql and a mysql+pymysql:// URL)."
    if scheme.startswith("mysql+pymysql"):
        return "Install it: pip install pymysql."
    return f"Install the driver SQLAlchemy uses for {scheme}:// URLs (its documentation lists them)."


def _open_hint(url: str) -> str:
    """What to check when the storage at ``url`` did not open: the file's directory for SQLite, else the server.

    Example:
        >>> _open_hint("sqlite:////nonexistent/dir/study.db")
        'The directory /nonexistent/dir does not exist: create it, or name a file in one that does.'
    """
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[-1]
        parent = Path(path).parent if path and path != ":memory:" else None
        if parent is not None and not parent.is_dir():
            return f"The directory {parent} does not exist: create it, or name a file in one that does."
        return ("Check that the file can be written there (a SQLite URL is sqlite:///relative or "
                "sqlite:////absolute).")
    return ("Check that the server is running and reachable from this machine, and the URL's user, password and "
            "database.")


def mask(url: str) -> str:
    """``url`` with any password replaced by ``***``.

    Example:
        >>> mask("postgresql://tuner:secret@db.example:5432/studies")
        'postgresql://tuner:***@db.example:5432/studies'
    """
    if "://" in url:
        import sqlalchemy.engine
        import sqlalchemy.exc

        # SQLAlchemy's own parser: the password is whatever it would send (it may hold '/' or ':').
        with contextlib.suppress(sqlalchemy.exc.ArgumentError, ValueError):
            return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url)  # an unparsable URL: mask what looks like a password


def check_fingerprint(study: optuna.Study, fingerprint: Mapping[str, Any], storage_name: str) -> str | None:
    """Record ``fingerprint`` on a new study; refuse a study that was made for another model, machine or batch —
    unless every trial it ran failed (none measured anything): then it is taken up for this job, and the note
    returned says so (a user who fixed the model.py whose first trial raised was refused its own study).

    Raises:
        UsageError: the study exists with a different fingerprint and measured trials; the message names what
            differs.
    """
    stored = study.user_attrs.get(FINGERPRINT_ATTR)
    if stored is None:
        if study.trials:
            raise UsageError(f"study {study.study_name!r} in {storage_name} was not made by autoshard tune.",
                             hint="Pass another --study-name, or another --output-dir for a fresh study.")
        study.set_user_attr(FINGERPRINT_ATTR, dict(fingerprint))
        return None
    differences = fingerprint_differences(stored, fingerprint)
    measured = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    failed = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))
    if differences and failed and not study.get_trials(deepcopy=False, states=measured):
        from autoshard.tuner.resume import SUPERSEDED_ATTR, superseded

        study.set_user_attr(FINGERPRINT_ATTR, dict(fingerprint))
        old = sorted(superseded(study) | {t.number for t in study.get_trials(deepcopy=False)})
        study.set_user_attr(SUPERSEDED_ATTR, old)
        return (f"Every trial of study {study.study_name!r} had failed, none measured: it is taken up for this "
                "job although " + "; ".join(differences) + "; the failed configurations run again first, and do "
                "not count toward the trials.")
    if differences:
        journal = " --storage-class JournalFileBackend" if "://" not in storage_name else ""
        # the URL as shown has its password masked: the command would not log in as written
        where = "YOUR_STORAGE_URL" if "***" in storage_name else shlex.quote(storage_name)
        with_password = " (your --storage URL, with its password)" if "***" in storage_name else ""
        raise UsageError(f"study {study.study_name!r} in {storage_name} was made for another job: "
                         + "; ".join(differences) + ".",
                         hint="Start fresh with another --output-dir (with --storage, another --study-name as "
                              "well: an output directory holds one study), or delete the study (`optuna "
                              f"delete-study --study-name {shlex.quote(study.study_name)} --storage "
                              f"{where}{journal}`{with_password}) and its output directory.")
    return None


_SETTINGS = {"global_batch_size": "the global batch size (--global-batch-size)", "precision": "--precision",
             "optimizer": "the optimizer (--optimizer)", "seq_len": "the sequence length (--seq-len)",
             "grad_clip_norm": "--grad-clip-norm", "training_step": "training_step", "loss_fn": "loss_fn",
             "gpu": "the GPU", "gpu_memory_bytes": "the GPU memory", "gpus_per_node": "the number of devices per node",
             "nodes": "the number of nodes", "device_type": "the device type", "backend": "the backend",
             "nvme_path": "the NVMe path", "network": "the network between the nodes",
             "network_bytes_per_s": "the network's bandwidth per node (bytes/s)",
             "steps": "the length of a trial (--steps)",
             "warmup_steps": "the warm-up length of a trial (--warmup-steps)"}
"""How a message names each setting of the batch and hardware fingerprints."""


_KEYS_ADDED_LATER = ("trial",)
"""Fingerprint parts later versions added (2026-12-02: the trial's steps and warm-up steps, which the study ranks
its trials' throughput over): a study made before them does not record them, and is not another job for that."""

_ADDED_LATER = {"hardware": ("network", "network_bytes_per_s")}
"""Fingerprint fields later versions added (2026-12-01: the network a multi-node plan was priced with): a study
made before them does not record them, and is not another job for that."""


def fingerprint_differences(stored: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """What differs between the job a study was made for (``stored``) and this one, in words.

    Example:
        >>> fingerprint_differences({"model": {"name": "m", "code": "1"}, "batch": {"seq_len": 32}},
        ...                         {"model": {"name": "m", "code": "2"}, "batch": {"seq_len": 64}})
        ["the model's code changed since the study was made (its file, or a module beside it that it imports)", \
'the sequence length (--seq-len) was 32 then, 64 now']
    """
    out = []
    for key, value in here.items():
        then = stored.get(key)
        if then == value or (key in _KEYS_ADDED_LATER and key not in stored):
            continue
        if key == "model" and isinstance(then, Mapping) and isinstance(value, Mapping):
            out += _model_differences(then, value)
        elif isinstance(then, Mapping) and isinstance(value, Mapping):
            later = [k for k in _ADDED_LATER.get(key, ()) if k not in then]  # a study older than the field
            out += [f"{_SETTINGS.get(k, k.replace('_', ' '))} was {_shown(then.get(k))} then, {_shown(value.get(k))} "
                    f"now" for k in dict.fromkeys([*then, *value]) if then.get(k) != value.get(k) and k not in later]
        else:
            out.append(f"the {key} was {_shown(then)} then, {_shown(value)} now")
    return out


def _model_differences(then: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    if then.get("name") != now.get("name"):
        return [f"the model was {then.get('name')} then, {now.get('name')} now"]
    if then.get("parameter_count") != now.get("parameter_count"):
        return [f"the model had {_shown(then.get('parameter_count'))} parameters then, "
                f"{_shown(now.get('parameter_count'))} now"]
    out = []
    if then.get("layout_hash") != now.get("layout_hash") or then.get("block_class") != now.get("block_class"):
        out.append("the model's layers changed since the study was made (the shapes of its parameters or blocks)")
    if then.get("code") != now.get("code"):
        out.append("the model's code changed since the study was made (its file, or a module beside it that it "
                   "imports)" if then.get("code") and now.get("code") else "the model's code was not recorded "
                   "when the study was made")
    return out


def _shown(value: Any) -> str:
    if value is None:
        return "not set"
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1e6:
        value = int(value)  # a bandwidth in bytes/s (a float in JSON); a clipping norm of 1.0 stays 1.0
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def owner() -> dict[str, Any]:
    """This tuner process, as recorded on the trials it runs."""
    me = psutil.Process()
    return {"host": socket.gethostname(), "pid": me.pid, "started": me.create_time()}


def fail_stale_trials(study: optuna.Study, *, own_too: bool = False) -> list[int]:
    """Fail trials left RUNNING by a tuner that is gone; returns their numbers.

    A trial of this host whose owning process no longer exists is failed at once, and with ``own_too`` (a study
    starting: none of this process's trials runs yet) so is one of this very process (a ``tune()`` that lost its
    storage, called again in the same Python session); any other is left to Optuna's heartbeat
    (:data:`GRACE_PERIOD_S`).
    """
    host, me = socket.gethostname(), (owner() if own_too else None)
    failed = []
    storage = study._storage  # optuna has no public per-trial state setter outside tell()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        who = t.user_attrs.get(OWNER_ATTR)
        if not who or who.get("host") != host or (_alive(who) and who != me):
            continue
        with contextlib.suppress(RuntimeError):  # another tuner got there first
            storage.set_trial_user_attr(t._trial_id, "failure", "stale")
            storage.set_trial_user_attr(t._trial_id, "message", "the tuner running it stopped without finishing "
                                        "it (killed, or its study storage was lost); failed on resume")
            if storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL):
                failed.append(t.number)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if isinstance(storage, optuna.storages.RDBStorage):
            optuna.storages.fail_stale_trials(study)
    return failed


def _alive(who: Mapping[str, Any]) -> bool:
    """Whether the recorded tuner process still runs. A killed process its parent has not yet reaped (a zombie:
    a script that ran ``Popen.kill()`` without ``wait()``) still has its pid and start time, but runs nothing."""
    try:
        proc = psutil.Process(int(who["pid"]))
        return (abs(proc.create_time() - float(who["started"])) < 1.0  # not a recycled pid
                and proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, ValueError, TypeError):
        return False


@contextlib.contextmanager
def _schema_lock(url: str) -> Iterator[None]:
    """Hold a lock while Optuna creates its tables: two tuners opening an empty database at once otherwise race
    in ``CREATE TYPE`` / ``CREATE TABLE``. On PostgreSQL an advisory lock (measured: 9 of 10 concurrent first
    opens failed with UniqueViolation or DuplicateTable; with the lock, 12 of 12 succeeded); on a SQLite file an
    exclusive ``flock`` of the file itself, which SQLite's own ``fcntl`` locks do not see (a probe: 3 of 10
    concurrent first opens failed with "UNIQUE constraint failed: alembic_version.version_num" or "table
    trial_heartbeats already exists")."""
    if url.startswith("sqlite"):
        with _file_lock(url):
            yield
        return
    if not url.startswith("postgresql"):
        yield
        return
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, **_engine_kwargs(url))
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": _LOCK_KEY})
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": _LOCK_KEY})
    finally:
        engine.dispose()


_LOCK_KEY = 0x6175746F  # "auto": any constant shared by every autoshard tuner


@contextlib.contextmanager
def _file_lock(url: str) -> Iterator[None]:
    """An exclusive ``flock`` of the SQLite file ``url`` names (created empty if missing: SQLite takes an empty
    file as a new database); nothing for an in-memory database, a directory that does not exist (SQLite's own
    error says so) or a platform without ``fcntl``."""
    path = url.split(":///", 1)[-1].split("?", 1)[0]
    if os.name != "posix" or not path or path == ":memory:" or not Path(path).parent.is_dir():
        yield
        return
    import fcntl

    try:
        handle = open(path, "ab")  # noqa: SIM115 (held across the yield)
    except OSError:  # unwritable: SQLite's own error names it
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def lost(error: BaseException) -> bool:
    """Whether ``error`` is the study storage failing (a database server stopped or unreachable mid-study, a
    connection dropped): Optuna's wrapper of a failed commit, or SQLAlchemy's own errors."""
    import sqlalchemy.exc

    return isinstance(error, (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError))


def lost_reason(error: BaseException) -> str:
    """The database's own words for a :func:`lost` storage (Optuna's wrapper says only that a commit failed)."""
    return _reason(error.__cause__ if isinstance(error, optuna.exceptions.StorageInternalError)
                   and error.__cause__ is not None else error)


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("postgresql"):
        return {"connect_args": {"connect_timeout": 10}}
    if url.startswith("sqlite"):
        # Several tuners on one machine may share a file; wait for a lock instead of failing at once.
        return {"connect_args": {"timeout": 60}}
    return {}


def _reason(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e)
    text = text.split("\n(Background on this error")[0]
    return " ".join(text.split())[:300].rstrip(".") or type(e).__name__


@contextlib.contextmanager
def removed_if_refused(output_dir: Path, url: str | None, dir_existed: bool, db_existed: bool) -> Iterator[None]:
    """Inside, a refusal (an :class:`~autoshard.errors.AutoshardError`) removes what opening the default storage
    made before any study was in it: ``study.db`` and the output directory, when they did not exist before."""
    try:
        yield
    except AutoshardError:
        if url is None and not db_existed:
            (output_dir / DEFAULT_FILE).unlink(missing_ok=True)
        if not dir_existed:
            with contextlib.suppress(OSError):  # not empty: something else was written there meanwhile
                output_dir.rmdir()
        raise


def writable_dir(path: Path) -> Path:
    """Create ``path`` if needed and check that files can be written in it.

    Raises:
        UsageError: it cannot be created or written (the OS's reason).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".autoshard-write-test-{os.getpid()}"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"cannot write to the output directory {path}: {e.strerror or e}.",
                         hint="Choose another --output-dir.") from e
    return path
