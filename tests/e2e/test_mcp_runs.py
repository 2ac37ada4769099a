"""A run calls a tool of an MCP server named in the settings file, and the model sees it."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from behest.config import Settings
from behest.domain.callers import DEFAULT_TENANT
from behest.tools.context import idempotency_key
from tests.support import collect, create_request, kind, script, start_server, stop_server

ECHO_SERVER = Path(__file__).parents[1] / "mcp_servers" / "echo_server.py"


def settings_file(tmp_path: Path, servers: str) -> Path:
    path = tmp_path / "behest.toml"
    path.write_text(
        f'listen = "127.0.0.1:0"\ndata_dir = "{tmp_path / "data"}"\n'
        "provider_backoff_initial_s = 0.01\nshutdown_grace_s = 0\n" + servers
    )
    return path


async def test_a_run_calls_an_mcp_tool_and_the_model_sees_its_result(tmp_path: Path) -> None:
    config = settings_file(
        tmp_path,
        f'[mcp.servers.echo]\ncommand = "{sys.executable}"\nargs = ["{ECHO_SERVER}"]\n',
    )
    server = await start_server(Settings.load(config_file=str(config)))
    try:
        steps = script(
            {"tool_calls": [{"name": "echo__add", "arguments": {"a": 2, "b": 40}}]},
            {"say": "tool_results"},
        )
        events = await collect(server.runs.CreateRunStream(create_request(steps, model="script")))
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    last_turn = max(i for i, e in enumerate(events) if kind(e) == "model_started")
    said = "".join(e.text_delta.delta for e in events[last_turn:] if kind(e) == "text_delta")
    assert said == "echo__add: 42"


async def test_an_mcp_server_that_fails_to_start_does_not_take_behest_down(
    tmp_path: Path,
) -> None:
    config = settings_file(tmp_path, '[mcp.servers.broken]\ncommand = "/nonexistent/mcp-server"\n')
    server = await start_server(Settings.load(config_file=str(config)))
    try:
        assert server.app.mcp.status()["broken"].startswith("failed")
        events = await collect(server.runs.CreateRunStream(create_request("still serving")))
        assert kind(events[-1]) == "run_completed"
    finally:
        await stop_server(server)


async def test_an_mcp_server_that_requires_approval_makes_its_calls_wait(tmp_path: Path) -> None:
    config = settings_file(
        tmp_path,
        f'[mcp.servers.echo]\ncommand = "{sys.executable}"\nargs = ["{ECHO_SERVER}"]\n'
        "requires_approval = true\n",
    )
    server = await start_server(Settings.load(config_file=str(config)))
    try:
        steps = script(
            {"tool_calls": [{"name": "echo__add", "arguments": {"a": 2, "b": 40}}]},
            {"say": "tool_results"},
        )
        stream = server.runs.CreateRunStream(create_request(steps, model="script"))
        async for event in stream:
            if kind(event) == "approval_requested":
                break
        assert event.approval_requested.call.name == "echo__add"
        decision = pb.ApprovalAnswer(
            call_id=event.approval_requested.call.id, decision=pb.APPROVAL_DECISION_ALLOW
        )
        await server.runs.SubmitApprovals(
            pb.SubmitApprovalsRequest(run_id=event.run_id, approvals=[decision])
        )
        events = await collect(stream)
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said == "echo__add: 42"


async def test_a_runs_mcp_call_carries_its_context_in_meta(tmp_path: Path) -> None:
    config = settings_file(
        tmp_path,
        f'[mcp.servers.echo]\ncommand = "{sys.executable}"\nargs = ["{ECHO_SERVER}"]\n'
        "timeout_s = 12\n",
    )
    server = await start_server(Settings.load(config_file=str(config)))
    try:
        steps = script(
            {"tool_calls": [{"name": "echo__meta", "arguments": {}}]}, {"say": "tool_results"}
        )
        began = datetime.now(UTC)
        events = await collect(server.runs.CreateRunStream(create_request(steps, model="script")))
        ended = datetime.now(UTC)
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    started = next(e for e in events if kind(e) == "tool_execution_started")
    call_id = started.tool_execution_started.call_id
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    meta = json.loads(said.removeprefix("echo__meta: "))
    assert set(meta) == {
        "io.behest/execution_id",
        "io.behest/attempt",
        "io.behest/idempotency_key",
        "io.behest/run_id",
        "io.behest/deadline",
    }
    # The execution's record: the one ToolExecutionStarted names, attempt 1.
    assert meta["io.behest/execution_id"] == started.tool_execution_started.execution_id
    assert meta["io.behest/attempt"] == started.tool_execution_started.attempt == 1
    assert meta["io.behest/idempotency_key"] == idempotency_key(
        DEFAULT_TENANT, events[0].run_id, call_id
    )
    assert meta["io.behest/run_id"] == events[0].run_id
    assert meta["io.behest/deadline"].endswith("Z")
    deadline = datetime.fromisoformat(meta["io.behest/deadline"].replace("Z", "+00:00"))
    ahead = timedelta(seconds=12)
    assert began + ahead - timedelta(milliseconds=1) <= deadline <= ended + ahead


async def test_a_tool_of_a_server_not_connected_yet_may_be_named_and_then_only_its_own(
    tmp_path: Path,
) -> None:
    """The settings' agents are checked before the MCP servers have listed their tools (the
    app waits for none): a name of a server that has not listed its tools yet is taken."""
    config = settings_file(
        tmp_path,
        f'[mcp.servers.echo]\ncommand = "{sys.executable}"\nargs = ["{ECHO_SERVER}"]\n'
        '[agents.adder]\nprovider = "local"\nmodel = "script"\ntools = ["echo__add"]\n',
    )
    server = await start_server(Settings.load(config_file=str(config)))
    try:
        steps = script(
            {"tool_calls": [{"name": "echo__add", "arguments": {"a": 2, "b": 40}}]},
            {"say": "tool_results"},
        )
        of_agent = pb.CreateRunRequest(agent="adder", input=steps)
        events = await collect(server.runs.CreateRunStream(of_agent))
        assert kind(events[-1]) == "run_completed"
        said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
        assert said.endswith("echo__add: 42")
        # Listed now: a name it does not list is refused.
        request = create_request("hi", model="script")
        request.tools.append("echo__nope")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await server.runs.CreateRun(request)
    finally:
        await stop_server(server)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tools: unknown tool 'echo__nope'" in (refused.value.details() or "")
