"""The HTTP port's answer to a gRPC client: a gRPC error that names the gRPC port.

The HTTP listener speaks HTTP/1.1 (uvicorn's h11); a gRPC client speaks HTTP/2 without asking
first (prior knowledge: its connection opens with the HTTP/2 preface). Left to h11, such a
client hears nothing it understands and retries until its deadline (grpcurl: "context
deadline exceeded" after 10 s). So the listener's protocol (`http1_or_grpc`) looks at a
connection's first bytes: the HTTP/2 preface hands the connection to `WrongPort`, which speaks
just enough HTTP/2 (RFC 9113) to answer every request on it with grpc-status 14 (UNAVAILABLE)
and "this is behest's HTTP port; gRPC is on port N"; anything else is HTTP/1.1 as before.

Over TLS the same holds once the handshake chose h2 (ALPN), which it does only for a client
that does not offer HTTP/1.1 (a gRPC client): browsers and HTTP clients keep HTTP/1.1.

The frames are few and fixed, so they are written here (no HTTP/2 library is a dependency):
a SETTINGS frame, SETTINGS and PING acknowledgements, one HEADERS frame per request (a
trailers-only gRPC answer, HPACK literals without Huffman coding), and GOAWAY to end.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any, ClassVar, cast

from uvicorn.protocols.http.h11_impl import H11Protocol

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HEADERS, _SETTINGS, _PING, _GOAWAY = 0x1, 0x4, 0x6, 0x7
_END_STREAM, _ACK, _END_HEADERS = 0x1, 0x1, 0x4
_NO_ERROR, _FRAME_SIZE_ERROR = 0x0, 0x6
_MAX_FRAME = 16_384  # SETTINGS_MAX_FRAME_SIZE's default, which this side never raises
_UNAVAILABLE = 14


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
    ends after `idle_s` without a frame, at the client's GOAWAY, or at the server's shutdown
    (it is one of uvicorn's `connections`)."""

    def __init__(self, message: str, connections: set[Any], *, idle_s: float) -> None:
        self._answer = _trailers_only(_UNAVAILABLE, message)
        self._connections = connections
        self._idle_s = idle_s
        self._buffer = b""
        self._preface_seen = False
        self._last_stream = 0
        self._transport: asyncio.Transport | None = None
        self._idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._connections.add(self)
        self._transport.write(_frame(_SETTINGS, 0, 0))
        self._rearm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()

    def shutdown(self) -> None:
        """uvicorn's call at the server's stop."""
        self._goaway(_NO_ERROR)

    def data_received(self, data: bytes) -> None:
        self._rearm()
        self._buffer += data
        if not self._preface_seen:
            if len(self._buffer) < len(PREFACE):
                return
            self._buffer = self._buffer[len(PREFACE) :]
            self._preface_seen = True
        while len(self._buffer) >= 9:
            length = int.from_bytes(self._buffer[:3], "big")
            if length > _MAX_FRAME:
                self._goaway(_FRAME_SIZE_ERROR)
                return
            if len(self._buffer) < 9 + length:
                return
            kind, flags = self._buffer[3], self._buffer[4]
            stream = int.from_bytes(self._buffer[5:9], "big") & 0x7FFF_FFFF
            payload = self._buffer[9 : 9 + length]
            self._buffer = self._buffer[9 + length :]
            if self._frame(kind, flags, stream, payload):
                return

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> bool:
        """Answer one frame; True once the connection is ending."""
        assert self._transport is not None
        if kind == _HEADERS and stream > self._last_stream:  # a request: answered at once
            self._last_stream = stream
            self._transport.write(
                _frame(_HEADERS, _END_STREAM | _END_HEADERS, stream, self._answer)
            )
        elif kind == _SETTINGS and not flags & _ACK:
            self._transport.write(_frame(_SETTINGS, _ACK, 0))
        elif kind == _PING and not flags & _ACK:
            self._transport.write(_frame(_PING, _ACK, 0, payload))
        elif kind == _GOAWAY:
            self._goaway(_NO_ERROR)
            return True
        return False  # anything else (DATA, WINDOW_UPDATE, RST_STREAM, …) asks for nothing

    def _goaway(self, code: int) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        self._transport.write(_frame(_GOAWAY, 0, 0, struct.pack(">II", self._last_stream, code)))
        self._transport.close()

    def _rearm(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        loop = asyncio.get_running_loop()
        self._idle = loop.call_later(self._idle_s, self._goaway, _NO_ERROR)


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


def _trailers_only(status: int, message: str) -> bytes:
    """The HPACK block of a gRPC answer without a body: :status 200 (the static table's 8th
    entry) and the rest as literals that are not indexed."""
    block = bytearray(b"\x88")
    fields = (
        ("content-type", "application/grpc"),
        ("grpc-status", str(status)),
        ("grpc-message", _percent_encoded(message)),
    )
    for name, value in fields:
        block += b"\x00" + _string(name.encode()) + _string(value.encode())
    return bytes(block)


def _string(data: bytes) -> bytes:
    """An HPACK string literal, not Huffman-coded: its length (a 7-bit prefix integer)."""
    length, out = len(data), bytearray()
    if length < 0x7F:
        out.append(length)
    else:
        out.append(0x7F)
        length -= 0x7F
        while length >= 0x80:
            out.append(length % 0x80 | 0x80)
            length //= 0x80
        out.append(length)
    return bytes(out) + data


def _percent_encoded(message: str) -> str:
    """grpc-message's encoding: bytes outside printable ASCII, and %, as %XX."""
    return "".join(
        chr(b) if 0x20 <= b <= 0x7E and b != 0x25 else f"%{b:02X}" for b in message.encode()
    )
