"""Shared fixtures: a real behest server on 127.0.0.1:0 with its own data directory."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from tests import network_guard
from tests.store.conftest import BACKENDS
from tests.support import (
    NO_POSTGRES,
    POSTGRES_URL,
    Server,
    fast_settings,
    start_server,
    stop_server,
)


def pytest_configure(config: pytest.Config) -> None:
    network_guard.install()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    running = await start_server(fast_settings(tmp_path))
    try:
        yield running
    finally:
        await stop_server(running)


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest) -> str:
    """Empty for SQLite in the data directory, else the session's PostgreSQL database."""
    return "" if request.param == "sqlite" else str(request.getfixturevalue("postgres_url"))


@pytest.fixture
async def served(database_url: str, tmp_path: Path) -> AsyncIterator[Server]:
    """A server on SQLite, and (a second run of the test) on PostgreSQL."""
    overrides = {"database_url": database_url} if database_url else {}
    running = await start_server(fast_settings(tmp_path, **overrides))
    try:
        yield running
    finally:
        await stop_server(running)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh database on the BEHEST_TEST_POSTGRES_URL server, dropped after the session."""
    if not POSTGRES_URL:
        pytest.fail(
            f"BEHEST_CI is set but BEHEST_TEST_POSTGRES_URL is not: {NO_POSTGRES}", pytrace=False
        )
    server = make_url(POSTGRES_URL)
    name = f"behest_test_{uuid.uuid4().hex[:12]}"
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)

    async def execute(sql: str) -> None:
        connection = await asyncpg.connect(admin)
        try:
            await connection.execute(sql)
        finally:
            await connection.close()

    asyncio.run(execute(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
