"""`WrongPort` as an HTTP/2 client sees it (h2 on the client's side, a transport in memory):
the answer to a request, the acknowledgements, the windows of unread bodies, and the GOAWAYs
that end it (the client's, the server's stop, a protocol error, idleness)."""

from __future__ import annotations

import asyncio
from typing import Any

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    Event,
    PingAckReceived,
    ResponseReceived,
    SettingsAcknowledged,
    StreamEnded,
    WindowUpdated,
)

from behest.web.wrong_port import WrongPort

MESSAGE = "this is behest's HTTP port; gRPC is on port 5 (100%)"


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class Client:
    """A gRPC-like HTTP/2 client connected to a `WrongPort`."""

    def __init__(self, *, idle_s: float = 60) -> None:
        self.connections: set[Any] = set()
        self.server = WrongPort(MESSAGE, self.connections, idle_s=idle_s)
        self.transport = Transport()
        self.h2 = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.server.connection_made(self.transport)

    def send(self, data: bytes | None = None) -> list[Event]:
        """Send `data` (or what h2 has queued) to the server; the events of its answer."""
        self.server.data_received(self.h2.data_to_send() if data is None else data)
        return self.heard()

    def heard(self) -> list[Event]:
        answer, self.transport.written = bytes(self.transport.written), bytearray()
        return self.h2.receive_data(answer)

    def request(self, body: bytes = b"") -> int:
        stream = self.h2.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/agent.v1.RunService/GetRun"),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        self.h2.send_headers(stream, headers)
        size = self.h2.max_outbound_frame_size
        for at in range(0, len(body), size):
            self.h2.send_data(stream, body[at : at + size])
        self.h2.end_stream(stream)
        return stream


def goaway(events: list[Event]) -> ConnectionTerminated:
    (ended,) = [e for e in events if isinstance(e, ConnectionTerminated)]
    return ended


async def test_a_request_is_answered_unavailable_in_one_headers_frame() -> None:
    client = Client()
    client.request()
    events = client.send()
    (response,) = [e for e in events if isinstance(e, ResponseReceived)]
    assert dict(response.headers) == {
        ":status": "200",
        "content-type": "application/grpc",
        "grpc-status": "14",
        "grpc-message": "this is behest's HTTP port; gRPC is on port 5 (100%25)",
    }
    assert response.stream_ended is not None
    assert any(isinstance(e, SettingsAcknowledged) for e in events)
    assert client.server in client.connections


async def test_pings_are_acked_and_bodies_windows_given_back() -> None:
    client = Client()
    client.send()
    client.h2.ping(b"12345678")
    assert [e.ping_data for e in client.send() if isinstance(e, PingAckReceived)] == [b"12345678"]
    # More bodies than the connection's first window (65,535 bytes): h2 on the client's side
    # refuses to send the third, were the windows of the first not given back.
    updates = []
    for _ in range(3):
        client.request(b"x" * 30_000)
        events = client.send()
        assert any(isinstance(e, StreamEnded) for e in events)
        updates += [e for e in events if isinstance(e, WindowUpdated) and e.stream_id == 0]
    assert updates


async def test_the_servers_stop_and_the_clients_goaway_end_the_connection() -> None:
    client = Client()
    stream = client.request()
    client.send()
    client.server.shutdown()
    ended = goaway(client.heard())
    assert (ended.error_code, ended.last_stream_id) == (ErrorCodes.NO_ERROR, stream)
    assert client.transport.closed

    client = Client()
    client.send()
    client.h2.close_connection()
    client.send()
    assert client.transport.closed
    client.server.connection_lost(None)
    assert client.connections == set()


async def test_a_protocol_error_or_idleness_ends_it_with_a_goaway() -> None:
    client = Client()
    client.send()
    client.server.data_received(b"\x00\x00\x04\x06\x00\x00\x00\x00\x001234")  # a PING of 4 bytes
    assert goaway(client.heard()).error_code == ErrorCodes.FRAME_SIZE_ERROR
    assert client.transport.closed

    client = Client(idle_s=0.01)
    client.send()
    await asyncio.sleep(0.1)
    assert goaway(client.heard()).error_code == ErrorCodes.NO_ERROR
    assert client.transport.closed
