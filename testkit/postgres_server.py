"""A throwaway PostgreSQL cluster on 127.0.0.1: Debian's own binaries (``initdb``,
``pg_ctl``, ``postgres``), a free port, a temporary folder removed afterwards.

What the PostgreSQL store is tested and measured against: a real server, never a mock.
:meth:`PostgresServer.stop` and :meth:`PostgresServer.start` again on the same folder and
port is a database outage and its end, as an operator would see it.

PostgreSQL refuses to run as root; as root, the cluster runs as the ``postgres`` user
(the folder is given to it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from testkit.server_process import free_port

# Where Debian's packages put the binaries (the first that has initdb wins).
BIN_DIRS = ("/usr/local/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin")
SUPERUSER = "parley"


def bin_dir() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``; None when absent."""
    on_path = shutil.which("initdb")
    candidates = [Path(on_path).parent] if on_path else []
    candidates += [Path(d) for d in BIN_DIRS]
    for folder in candidates:
        if all((folder / name).exists() for name in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


class PostgresServer:
    """One cluster: :meth:`start` (``initdb`` the first time), :meth:`stop`, :meth:`remove`."""

    def __init__(self, *, fsync: bool = True) -> None:
        found = bin_dir()
        if found is None:
            raise RuntimeError("PostgreSQL's initdb, pg_ctl and postgres are not installed")
        self.bin = found
        self.port = free_port()
        self.fsync = fsync
        self.folder = Path(tempfile.mkdtemp(prefix="parley-pg-"))
        self.data = self.folder / "data"
        self._user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:  # postgres will not run as root
            self._user = pwd.getpwnam("postgres")
            os.chown(self.folder, self._user.pw_uid, self._user.pw_gid)
        self.running = False

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        """Start (after ``initdb`` on first use) and wait until it takes connections."""
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                      "--encoding=UTF8", "--no-sync")  # fmt: skip
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.folder} -c max_connections=100 "
            f"-c fsync={'on' if self.fsync else 'off'}"
        )
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data),
                  "-l", str(self.folder / "server.log"), "-o", options)  # fmt: skip
        self.running = True
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: connections are cut, as in an outage)."""
        if self.running:
            self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data))
            self.running = False

    def remove(self) -> None:
        """Stop, then delete the folder."""
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def create_database(self, name: str) -> str:
        """A new, empty database; its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # a test's own name, not input
        return self.url(name)

    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _run(self, program: str, *args: str) -> None:
        extra: dict[str, Any] = {}
        if self._user is not None:
            extra = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
        done = subprocess.run(
            [str(self.bin / program), *args], capture_output=True, text=True,
            cwd=self.folder, **extra,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stderr or done.stdout}\n{self.log()}")


def postgres_or_skip() -> PostgresServer:
    """A started cluster, or the test skipped when PostgreSQL is not installed."""
    if bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (no initdb, pg_ctl, postgres in /usr/local/bin)")
    return PostgresServer().start()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One cluster for the test session (each test makes its own database in it)."""
    server = postgres_or_skip()
    try:
        yield server
    finally:
        server.remove()
