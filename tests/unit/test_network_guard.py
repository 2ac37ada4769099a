"""The guard that keeps tests off the network."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.network_guard import NetworkAccessError


def test_connecting_to_a_public_address_fails_loudly() -> None:
    with socket.socket() as sock, pytest.raises(NetworkAccessError):
        sock.connect(("93.184.216.34", 443))


async def test_asyncio_cannot_resolve_or_reach_a_public_host() -> None:
    with pytest.raises(NetworkAccessError):
        await asyncio.open_connection("api.openai.com", 443)
    with pytest.raises(NetworkAccessError):
        await asyncio.open_connection("93.184.216.34", 443)


def test_loopback_is_allowed() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.socket() as client:
            client.connect(server.getsockname())
            accepted, peer = server.accept()
            with accepted:
                assert peer == client.getsockname()
