"""Shared fixtures: a real behest server on 127.0.0.1:0 with its own data directory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests import network_guard
from tests.store.conftest import BACKENDS
from tests.stored import create_database, drop_database
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
    url = asyncio.run(create_database(POSTGRES_URL, "behest_test"))
    try:
        yield url
    finally:
        asyncio.run(drop_database(POSTGRES_URL, url))
