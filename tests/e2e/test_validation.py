"""Bad input gets a clear status that names the field; the server stays up (SEMANTICS §8)."""

from __future__ import annotations

import uuid

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import Server, collect, create_request

BAD_CREATE = [
    (pb.CreateRunRequest(model=c.ModelName(value="echo"), input="x"), "provider is required"),
    (pb.CreateRunRequest(provider=c.ProviderId(value="local"), input="x"), "model is required"),
    (create_request(""), "input"),
    (create_request("   "), "input"),
    (create_request("x", session_id="not-a-uuid"), "session_id"),
    (create_request("x", metadata="{not json"), "metadata"),
    (create_request("x", metadata="[1, 2]"), "metadata"),
    (create_request("x", tool_choice="sometimes"), "tool_choice"),
    (create_request("x", provider="nope"), "provider"),
    (create_request("x", model="gpt-nothing"), "model"),
    (create_request("x" * 300_000), "input"),
    (create_request("x", client_request_id="k" * 1000), "client_request_id"),
    (create_request("before\x00after"), "input"),
]


@pytest.mark.parametrize(("request_", "field"), BAD_CREATE)
async def test_create_run_rejects_bad_input_naming_the_field(
    server: Server, request_: pb.CreateRunRequest, field: str
) -> None:
    for call in (server.runs.CreateRun(request_), collect(server.runs.CreateRunStream(request_))):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (err.value.details() or "")


async def test_an_unknown_session_is_not_found(server: Server) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.CreateRun(create_request("x", session_id=str(uuid.uuid4())))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_list_runs_limit_above_100_is_invalid(server: Server) -> None:
    request = pb.ListRunsRequest(pagination=c.Pagination(limit=101))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.ListRuns(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "limit" in (err.value.details() or "")


@pytest.mark.parametrize("run_id", ["", "nope", "123"])
async def test_malformed_run_ids_are_invalid(server: Server, run_id: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "run_id" in (err.value.details() or "")


async def test_unknown_run_is_not_found(server: Server) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.runs.GetRun(pb.GetRunRequest(run_id=str(uuid.uuid4())))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_server_keeps_serving_after_bad_requests(server: Server) -> None:
    for request_, _ in BAD_CREATE:
        with pytest.raises(grpc.aio.AioRpcError):
            await server.runs.CreateRun(request_)
    created = await server.runs.CreateRun(create_request("still here"))
    assert created.run_id
