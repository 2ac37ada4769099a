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
