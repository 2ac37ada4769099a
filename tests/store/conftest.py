"""The store conformance suite's fixtures: every test runs once per backend.

SQLite always runs, on a fresh file per test. PostgreSQL runs when BEHEST_TEST_POSTGRES_URL
names a server (e.g. postgresql+asyncpg://postgres@127.0.0.1:5432/test). Without it the
PostgreSQL tests are skipped (and listed as skipped), except under CI (BEHEST_CI set, as
.ci/run does), where each of them fails instead: CI must not pass with half the suite. The
suite creates its own database on that server for the session, so whatever schema an earlier
checkout left in the named database cannot interfere, and drops it at the end. Within the
session tests isolate themselves with fresh uuids, and tests of the single-row tables
(compaction config, circuit breaker) set every value they then assert.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from behest.store.sql.store import SqlStore
from tests.support import CI, NO_POSTGRES, POSTGRES_URL

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param(
        "postgresql",
        id="postgresql",
        marks=pytest.mark.skipif(not POSTGRES_URL and not CI, reason=NO_POSTGRES),
    ),
]

OpenStore = Callable[[], Awaitable[SqlStore]]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database URL of this test's backend: a fresh SQLite file, or the session's database."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'behest.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def backend(store_url: str) -> str:
    """ "sqlite" or "postgresql"."""
    return "sqlite" if store_url.startswith("sqlite") else "postgresql"


@pytest.fixture
async def open_store(store_url: str) -> AsyncIterator[OpenStore]:
    """Start further stores on the same database (another process or replica); all are closed."""
    opened: list[SqlStore] = []

    async def open_() -> SqlStore:
        store = SqlStore(store_url)
        opened.append(store)
        await store.start()
        return store

    try:
        yield open_
    finally:
        for store in opened:
            await store.close()


@pytest.fixture
async def store(open_store: OpenStore) -> SqlStore:
    """A started store on this test's backend."""
    return await open_store()
