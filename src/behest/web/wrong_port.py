"""The HTTP port's answer to a gRPC client: a gRPC error that names the gRPC port.

The HTTP listener speaks HTTP/1.1 (uvicorn's h11); a gRPC client speaks HTTP/2 without asking
first (prior knowledge: its connection opens with the HTTP/2 preface). Left to h11, such a
client hears nothing it understands and retries until its deadline (grpcurl: "context
deadline exceeded" after 10 s). So the listener's protocol (`http1_or_grpc`) looks at a
connection's first bytes: the HTTP/2 preface hands the connection to `WrongPort`, which
answers every request on it with grpc-status 14 (UNAVAILABLE) and "this is behest's HTTP
port; gRPC is on port N"; anything else is HTTP/1.1 as before.

Over TLS the same holds once the handshake chose h2 (ALPN), which it does only for a client
that does not offer HTTP/1.1 (a gRPC client): browsers and HTTP clients keep HTTP/1.1.

HTTP/2 itself (frames, HPACK, SETTINGS and PING acknowledgements, flow control, GOAWAY) is
the `h2` library's, h11's sibling; this module gives it the bytes and writes out its answer.
"""

from __future__ import annotations

import asyncio
import string
from collections.abc import Callable
from typing import Any, ClassVar, cast
from urllib.parse import quote

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, DataReceived, RequestReceived
from h2.exceptions import ProtocolError
from uvicorn.protocols.http.h11_impl import H11Protocol

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_UNAVAILABLE = 14
_PRINTABLE_BUT_PERCENT = " " + string.punctuation.replace("%", "")  # and letters and digits


def http1_or_grpc(grpc_port: Callable[[], int]) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol, except that a connection opening with the HTTP/2 preface
    gets `WrongPort`'s answer naming `grpc_port()`."""

    class Http1OrGrpc(_Sniffing):
        _grpc_port = staticmethod(grpc_port)

    return Http1OrGrpc


class _Sniffing(H11Protocol):
    # Over TLS, the protocols offered (uvicorn reads this): the server's choice is the first
    # of these the client offers too, so whatever offers HTTP/1.1 gets it (a browser), and a
    # gRPC client, which offers only h2, gets h2 and this answer.
    alpn_protocols: ClassVar[list[str]] = ["http/1.1", "h2"]
    _grpc_port: Callable[[], int]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head: bytes | None = b""  # the first bytes while they may be the preface

    def data_received(self, data: bytes) -> None:
        if self._head is not None:
            head = self._head + data
            if len(head) < len(PREFACE) and PREFACE.startswith(head):
                self._head = head
                return
            self._head = None
            if head.startswith(PREFACE):
                self._to_http2(head)
                return
            data = head
        super().data_received(data)

    def _to_http2(self, head: bytes) -> None:
        self.connections.discard(self)
        self._unset_keepalive_if_required()
        answer = WrongPort(
            _grpc_message(self._grpc_port()),
            self.connections,
            idle_s=self.timeout_keep_alive,
        )
        self.transport.set_protocol(answer)
        answer.connection_made(self.transport)
        answer.data_received(head)


def _grpc_message(port: int) -> str:
    where = f"port {port}" if port else "another port"
    return f"this is behest's HTTP port; gRPC is on {where}"


class WrongPort(asyncio.Protocol):
    """An HTTP/2 connection whose every request is answered UNAVAILABLE with `message`; it
    ends after `idle_s` without a frame, at the client's GOAWAY or a protocol error, or at the
    server's shutdown (it is one of uvicorn's `connections`)."""

    def __init__(self, message: str, connections: set[Any], *, idle_s: float) -> None:
        # A trailers-only gRPC answer: the status in the only HEADERS frame, no body.
        self._answer = [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", str(_UNAVAILABLE)),
            ("grpc-message", _percent_encoded(message)),
        ]
        self._connections = connections
        self._idle_s = idle_s
        self._h2 = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        self._transport: asyncio.Transport | None = None
        self._idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._connections.add(self)
        self._h2.initiate_connection()  # this side's SETTINGS
        self._flush()
        self._rearm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()

    def shutdown(self) -> None:
        """uvicorn's call at the server's stop."""
        self._goaway()

    def data_received(self, data: bytes) -> None:
        self._rearm()
        try:
            events = self._h2.receive_data(data)
        except ProtocolError:  # h2 has queued the GOAWAY that says why
            self._end()
            return
        for event in events:
            if isinstance(event, RequestReceived):  # answered at once
                self._h2.send_headers(event.stream_id, self._answer, end_stream=True)
            elif isinstance(event, DataReceived):  # a request's body, unread: its window back
                self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, ConnectionTerminated):  # the client's GOAWAY
                self._end()
                return
        self._flush()

    def _goaway(self) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        self._h2.close_connection()
        self._end()

    def _end(self) -> None:
        self._flush()
        if self._transport is not None:
            self._transport.close()

    def _flush(self) -> None:
        out = self._h2.data_to_send()
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(out)

    def _rearm(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        loop = asyncio.get_running_loop()
        self._idle = loop.call_later(self._idle_s, self._goaway)


def _percent_encoded(message: str) -> str:
    """grpc-message's encoding: UTF-8 bytes outside printable ASCII, and %, as %XX."""
    return quote(message, safe=_PRINTABLE_BUT_PERCENT)
