"""One `behest serve` per SQLite database: a lock file beside it, held while the server runs.

SQLite has one writer, and behest takes every unfinished run of its database at start-up as
its own (no other process can be executing them). A second server on the same file would
break both promises, so it is refused at start. The lock is an flock on `<database>.lock`:
the kernel drops it when the process ends, kill -9 included, so a crash never leaves a stale
lock behind. The file holds the holder's pid, to name it in the refusal.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sqlalchemy.engine import make_url

from behest.errors import FailedPrecondition


def sqlite_lock(url: str) -> DatabaseLock | None:
    """The lock a server on `url` must hold: None unless it names a SQLite file."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if parsed.query.get("mode") == "memory":
        return None
    return DatabaseLock(Path(database))


class DatabaseLock:
    """The exclusive lock of one SQLite database file, for this process."""

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; FailedPrecondition naming the holder if another process has it."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise FailedPrecondition(
                f"another behest process (pid {holder}) serves the SQLite database in "
                f"{self.path.parent}; SQLite has one writer: stop that server, give this one "
                "another --data-dir, or run replicas on PostgreSQL"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor drops the flock
