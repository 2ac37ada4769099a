"""Property-based fuzz of grpc.health.v1.Health (Check, List, Watch) and server reflection (v1
and v1alpha) through a real server on 127.0.0.1:0 with grpc.aio clients: raw bytes and
mutations of valid requests (fuzz_strategies.raw_bytes), and odd, huge and unknown service
names, symbols, file names and extensions.

Properties, for every call:

1. it ends OK, NOT_FOUND (a service health does not know), INVALID_ARGUMENT (a request that
   does not decode) or RESOURCE_EXHAUSTED (over the 4 MiB message bound), never INTERNAL or
   UNKNOWN; an OK answer decodes as the method's response;
2. no message, a status's or a reflection error's, names a Python class, traceback or
   internals (test_fuzz's `LEAK`), unless the request itself carried that text;
3. reflection answers every message of its stream, in order, and its errors say NOT_FOUND or
   INVALID_ARGUMENT;
4. the server still answers health afterwards.

A Watch of a service health knows does not end: its first answer is read, then it is
cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2 as h
from grpc_reflection.v1alpha import reflection_pb2 as r
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fault import fuzz_strategies as fs
from tests.fault.test_fuzz import FUZZ, leaks
from tests.support import Server, fast_settings, start_server, stop_server

Code = grpc.StatusCode
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
CALL_TIMEOUT_S = 10.0
ALLOWED = {Code.OK, Code.NOT_FOUND, Code.INVALID_ARGUMENT, Code.RESOURCE_EXHAUSTED}
HEALTH = "/grpc.health.v1.Health/"
REFLECTION = {
    "v1": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "v1alpha": "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
}
RESPONSES = {"Check": h.HealthCheckResponse, "List": h.HealthListResponse}
VALID_HEALTH = [
    h.HealthCheckRequest(service="agent.v1.RunService").SerializeToString(),
    h.HealthCheckRequest(service="").SerializeToString(),
]
VALID_REFLECTION = [
    r.ServerReflectionRequest(list_services="").SerializeToString(),
    r.ServerReflectionRequest(
        file_containing_symbol="agent.v1.RunService.WatchRunEvents"
    ).SerializeToString(),
    r.ServerReflectionRequest(file_by_filename="agent/v1/run.proto").SerializeToString(),
    r.ServerReflectionRequest(
        file_containing_extension=r.ExtensionRequest(
            containing_type="agent.v1.AgentEvent", extension_number=100
        )
    ).SerializeToString(),
    r.ServerReflectionRequest(
        all_extension_numbers_of_type="agent.v1.AgentEvent"
    ).SerializeToString(),
]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    started = await start_server(fast_settings(tmp_path))
    try:
        yield started
    finally:
        await stop_server(started)


def check_message(what: str, code: Code, message: str, payload: bytes) -> None:
    assert code in ALLOWED, f"{what} -> {code.name} {message!r}"
    found = leaks(message, payload.decode("utf-8", "replace"))
    assert not found, f"{what} -> {code.name} {message!r} shows {found}"


async def health(server: Server, method: str, payload: bytes) -> None:
    """One health call with `payload` as its body; checks properties 1, 2 and 4."""
    what = f"{method} {fs.short(payload)}"
    try:
        if method == "Watch":
            call = server.channel.unary_stream(HEALTH + method)(payload, timeout=CALL_TIMEOUT_S)
            first = await call.read()  # a known service's Watch goes on: its first answer
            call.cancel()
            assert first is not grpc.aio.EOF, what
            h.HealthCheckResponse.FromString(first)
        else:
            answer = await server.channel.unary_unary(HEALTH + method)(
                payload, timeout=CALL_TIMEOUT_S
            )
            RESPONSES[method].FromString(answer)
    except grpc.aio.AioRpcError as err:
        check_message(what, err.code(), err.details() or "", payload)
    except DecodeError as exc:
        pytest.fail(f"{what}: undecodable answer ({exc})")
    await still_serving(server, what)


async def reflection(server: Server, version: str, payloads: list[bytes]) -> None:
    """One reflection stream sending `payloads`; checks properties 1 to 4."""
    what = f"{version} {[fs.short(p) for p in payloads]}"
    call = server.channel.stream_stream(REFLECTION[version])(iter(payloads), timeout=CALL_TIMEOUT_S)
    answers: list[bytes] = []
    try:
        answers = [answer async for answer in call]
    except grpc.aio.AioRpcError as err:
        check_message(what, err.code(), err.details() or "", b"".join(payloads))
        oversized = any(len(p) > fs.MAX_RECEIVE_BYTES for p in payloads)
        assert oversized and err.code() == Code.RESOURCE_EXHAUSTED, what
    else:
        assert len(answers) == len(payloads), what
    for payload, data in zip(payloads, answers, strict=False):
        answer = r.ServerReflectionResponse.FromString(data)
        if answer.HasField("error_response"):
            error = answer.error_response
            check_message(what, Code.OK, error.error_message, payload)
            assert error.error_code in (Code.NOT_FOUND.value[0], Code.INVALID_ARGUMENT.value[0])
        else:
            assert answer.WhichOneof("message_response"), what
    await still_serving(server, what)


async def still_serving(server: Server, what: str) -> None:
    try:
        answer = await server.channel.unary_unary(
            HEALTH + "Check",
            request_serializer=h.HealthCheckRequest.SerializeToString,
            response_deserializer=h.HealthCheckResponse.FromString,
        )(h.HealthCheckRequest(), timeout=5.0)
    except grpc.aio.AioRpcError as err:
        pytest.fail(f"server not answering after {what}: {err.code()} {err.details()}")
    assert answer.status == h.HealthCheckResponse.SERVING, what


METHODS = ("Check", "List", "Watch", "v1", "v1alpha")


@settings(FUZZ, max_examples=200)
@given(method=st.sampled_from(METHODS), specs=st.lists(fs.raw_bytes(), min_size=1, max_size=3))
async def test_raw_bytes_to_health_and_reflection(
    server: Server, method: str, specs: list[fs.RawSpec]
) -> None:
    """Arbitrary bytes as the body of each health method, and as reflection's messages."""
    if method in REFLECTION:
        await reflection(server, method, [s.build(VALID_REFLECTION) for s in specs])
    else:
        valid = [b""] if method == "List" else VALID_HEALTH
        await health(server, method, specs[0].build(valid))


names = st.one_of(
    fs.odd_text(),
    st.sampled_from(
        [
            "",
            "agent.v1",
            "agent.v1.RunService.",
            "agent.v1.RunService.Nope",
            ".agent.v1.RunService",
            "agent/v1/run.proto",
            "google/protobuf/timestamp.proto",
            "grpc.health.v1.Health.List",
            "grpc.reflection.v1.ServerReflection",
        ]
    ),
    st.sampled_from(fs.ODD_PIECES).map(lambda piece: fs.of_bytes(piece, 1 << 20)),
)
ASKS = ("file_by_filename", "file_containing_symbol", "all_extension_numbers_of_type")


@settings(FUZZ, max_examples=120)
@given(
    method=st.sampled_from(METHODS),
    name=names,
    ask=st.sampled_from((*ASKS, "file_containing_extension")),
    number=st.integers(-(2**31), 2**31 - 1),
)
async def test_odd_names_to_health_and_reflection(
    server: Server, method: str, name: str, ask: str, number: int
) -> None:
    """Odd, huge and unknown names: a service to check or watch, or what reflection looks up."""
    if method in REFLECTION:
        if ask == "file_containing_extension":
            wanted = r.ExtensionRequest(containing_type=name, extension_number=number)
            request = r.ServerReflectionRequest(file_containing_extension=wanted)
        else:
            request = r.ServerReflectionRequest(**{ask: name})
        await reflection(server, method, [request.SerializeToString()])
    elif method == "Watch":
        # An unknown service's Watch answers SERVICE_UNKNOWN and goes on (until it is known).
        await health(server, method, h.HealthCheckRequest(service=name).SerializeToString())
    else:
        await health(server, "Check", h.HealthCheckRequest(service=name).SerializeToString())


async def test_undecodable_reflection_messages_do_not_end_the_stream(server: Server) -> None:
    """A message that is not a request is answered INVALID_ARGUMENT; the stream goes on."""
    good = r.ServerReflectionRequest(list_services="").SerializeToString()
    for version in REFLECTION:
        call = server.channel.stream_stream(REFLECTION[version])(
            iter([b"\xff\xff", good]), timeout=CALL_TIMEOUT_S
        )
        bad, listed = [r.ServerReflectionResponse.FromString(a) async for a in call]
        assert bad.error_response.error_code == Code.INVALID_ARGUMENT.value[0]
        assert bad.error_response.error_message == (
            "a request is not a valid ServerReflectionRequest message"
        )
        assert listed.list_services_response.service
    check = server.channel.unary_unary(HEALTH + "Check")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(check(b"\xff\xff", timeout=CALL_TIMEOUT_S), CALL_TIMEOUT_S)
    assert (err.value.code(), err.value.details()) == (
        Code.INVALID_ARGUMENT,
        "the request is not a valid grpc.health.v1.HealthCheckRequest message",
    )
