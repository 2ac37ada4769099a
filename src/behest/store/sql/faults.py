"""What a database error means for a write, in plain words: the one place driver errors of
SQLite and PostgreSQL become behest's StorageFault (full, locked, failed otherwise)."""

from __future__ import annotations

import errno
import sqlite3

import asyncpg
from sqlalchemy.exc import DBAPIError

from behest.errors import StorageFailed, StorageFault, StorageFull, StorageLocked, describe

# SQLite's primary result codes (sqlite3.Error.sqlite_errorcode & 0xFF).
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_FULL = 5, 6, 13
# PostgreSQL's SQLSTATEs: disk_full; lock_not_available.
_PG_FULL = {"53100"}
_PG_LOCKED = {"55P03", "57014"}  # lock_not_available; a lock_timeout ends as query_canceled


def fault_of(exc: BaseException) -> StorageFault:
    """The StorageFault a failed write is, named by its cause (the driver's words kept,
    no SQL, no class names)."""
    if isinstance(exc, StorageFault):
        return exc
    cause = _driver_error(exc)
    words = describe(cause)
    if _is_full(cause):
        return StorageFull(f"the database's disk is full ({words}); free space to go on")
    if _is_locked(cause):
        return StorageLocked(
            f"the database is locked by another writer ({words}); behest retries when it is free"
        )
    return StorageFailed(f"the database could not store it ({words})")


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's own exception under SQLAlchemy's wrapper (and asyncpg's adapter)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    inner = getattr(exc, "__cause__", None)
    if isinstance(inner, asyncpg.PostgresError):
        return inner
    return exc


def _is_full(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", 0) & 0xFF == _SQLITE_FULL or (
            "disk is full" in str(exc)
        )
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return getattr(exc, "sqlstate", None) in _PG_FULL


def _is_locked(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        return code in (_SQLITE_BUSY, _SQLITE_LOCKED) or "database is locked" in str(exc)
    return getattr(exc, "sqlstate", None) in _PG_LOCKED
