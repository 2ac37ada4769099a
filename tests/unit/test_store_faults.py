"""A failed write's cause in plain words and the right class (store/sql/faults.py), from the
drivers' real errors."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import asyncpg
import grpc
import pytest
from sqlalchemy.exc import OperationalError

from behest.api.status import status_of
from behest.errors import StorageFailed, StorageFull, StorageLocked
from behest.store.sql.faults import fault_of


def locked_error(path: Path) -> sqlite3.OperationalError:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        with pytest.raises(sqlite3.OperationalError) as caught:
            other.execute("BEGIN IMMEDIATE")
        return caught.value
    finally:
        other.close()
        holder.close()


def test_a_locked_sqlite_file_is_unavailable_naming_the_lock(tmp_path: Path) -> None:
    error = locked_error(tmp_path / "x.db")
    fault = fault_of(OperationalError("BEGIN IMMEDIATE", {}, error))
    assert isinstance(fault, StorageLocked)
    assert status_of(fault) == grpc.StatusCode.UNAVAILABLE
    assert str(fault).startswith("the database is locked by another writer (database is locked)")
    assert "BEGIN" not in str(fault)  # the driver's words, never the SQL


def test_a_full_disk_is_resource_exhausted_for_either_driver() -> None:
    for error in (
        sqlite3.OperationalError("database or disk is full"),
        asyncpg.exceptions.DiskFullError("could not extend file: No space left on device"),
        OSError(errno.ENOSPC, "No space left on device"),
    ):
        fault = fault_of(OperationalError("INSERT", {}, error))
        assert isinstance(fault, StorageFull), error
        assert status_of(fault) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert str(fault).startswith("the database's disk is full (")


def test_anything_else_is_a_failed_write_in_the_drivers_words() -> None:
    fault = fault_of(ConnectionResetError("the connection broke"))
    assert isinstance(fault, StorageFailed)
    assert str(fault) == "the database could not store it (the connection broke)"
    refused = fault.refused("no run was created")
    assert isinstance(refused, StorageFailed)
    assert (
        str(refused) == "no run was created: the database could not store it (the connection broke)"
    )
