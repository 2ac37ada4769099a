"""Bytes that are not a valid protobuf message: INVALID_ARGUMENT with a plain message, and the
server keeps serving (SEMANTICS §8)."""

from __future__ import annotations

import random

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import Server, collect, create_request, kind

CORRUPT = [
    pytest.param(b"\xff\xff\xff", id="invalid-tag"),
    pytest.param(b"\x08", id="truncated-varint"),
    pytest.param(b"\x0a\x05ab", id="length-past-the-end"),
    pytest.param(b"\x0f\x00", id="bad-wire-type"),
]

SEED = 11
# Distinct texts for the runs that check the server still answers; seeded, so every session
# sends the same ones.
TEXTS = random.Random(SEED)

# What a message must not leak: exception classes, Python internals, tracebacks.
LEAKS = ("Traceback", "DecodeError", "google.protobuf", "_pb2", "<class", 'File "', "Exception")


def assert_plain_invalid_argument(error: grpc.aio.AioRpcError, request_type: str) -> None:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = error.details() or ""
    assert details
    assert request_type in details
    for leak in LEAKS:
        assert leak not in details, details
    assert "\n" not in details, details


async def assert_still_serving(server: Server) -> None:
    health = health_pb2_grpc.HealthStub(server.channel)
    response = await health.Check(health_pb2.HealthCheckRequest(service="agent.v1.RunService"))
    assert response.status == health_pb2.HealthCheckResponse.SERVING
    text = f"still serving {TEXTS.getrandbits(48):012x}"
    events = await collect(server.runs.CreateRunStream(create_request(text)))
    assert kind(events[-1]) == "run_completed"
    assert "".join(e.text_delta.delta for e in events if kind(e) == "text_delta") == text


@pytest.mark.parametrize("payload", CORRUPT)
async def test_corrupt_unary_request_is_invalid_argument(server: Server, payload: bytes) -> None:
    call = server.channel.unary_unary(
        "/agent.v1.RunService/CreateRun", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call(payload)
    assert_plain_invalid_argument(err.value, "agent.v1.CreateRunRequest")
    await assert_still_serving(server)


@pytest.mark.parametrize("payload", CORRUPT)
async def test_corrupt_streaming_request_is_invalid_argument(
    server: Server, payload: bytes
) -> None:
    call = server.channel.unary_stream(
        "/agent.v1.RunService/WatchRunEvents", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in call(payload):
            pytest.fail("a corrupt request streamed a response")
    assert_plain_invalid_argument(err.value, "agent.v1.WatchRunEventsRequest")
    await assert_still_serving(server)


async def test_corrupt_create_run_stream_creates_no_run(server: Server) -> None:
    call = server.channel.unary_stream(
        "/agent.v1.RunService/CreateRunStream", request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in call(b"\xff\xff\xff"):
            pytest.fail("a corrupt request streamed a response")
    assert_plain_invalid_argument(err.value, "agent.v1.CreateRunRequest")
    listed = await server.runs.ListRuns(pb.ListRunsRequest())
    assert list(listed.runs) == []
    await assert_still_serving(server)


async def test_many_corrupt_requests_do_not_wear_the_server_down(server: Server) -> None:
    """Streams that fail on decode must release their slot of the open-stream cap."""
    call = server.channel.unary_stream(
        "/agent.v1.RunService/WatchRunEvents", request_serializer=None, response_deserializer=None
    )
    for _ in range(200):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in call(b"\xff\xff\xff"):
                pass
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await assert_still_serving(server)
