"""Shared fixtures: a real behest server on 127.0.0.1:0 with its own data directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests import network_guard
from tests.support import Server, fast_settings, start_server, stop_server


def pytest_configure(config: pytest.Config) -> None:
    network_guard.install()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    running = await start_server(fast_settings(tmp_path))
    try:
        yield running
    finally:
        await stop_server(running)
