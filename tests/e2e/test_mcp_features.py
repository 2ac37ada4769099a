"""MCP features behest honours, through the real SDK over stdio (tests/mcp_servers/echo_server.py)
and a plugin tool: progress notifications become throttled tool_progress events, log messages
go to behest's log tagged with the server, sampling requests are answered by the run's own
model with their tokens counted, and refused when a budget is spent or a setting says so."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import session_pb2 as s
from behest._proto.agent.v1 import session_pb2_grpc as s_rpc
from behest.observability.logs import JsonFormatter
from tests.support import (
    Server,
    collect,
    create_request,
    echo_mcp,
    fast_settings,
    kind,
    script,
    served_with_echo_mcp,
    start_server,
    start_server_with_plugins,
    stop_server,
)


def echo(**more: object) -> dict[str, object]:
    return echo_mcp(timeout_s=30, **more)


@pytest.fixture
async def served(database_url: str, tmp_path: Path) -> AsyncIterator[Server]:
    """A server with the echo MCP server, on both stores."""
    async with served_with_echo_mcp(tmp_path, database_url, timeout_s=30) as running:
        yield running


def calling(name: str, arguments: dict[str, Any], **first: Any) -> str:
    """A script: call one tool, then say what it answered."""
    return script(
        {"tool_calls": [{"name": name, "arguments": arguments}], **first}, {"say": "tool_results"}
    )


def said(events: list[pb.AgentEvent]) -> str:
    last = max(i for i, e in enumerate(events) if kind(e) == "model_started")
    return "".join(e.text_delta.delta for e in events[last:] if kind(e) == "text_delta")


def between(events: list[pb.AgentEvent], first: str, last: str) -> list[pb.AgentEvent]:
    """The events after the first `first` and before the first `last` that follows it."""
    start = next(i for i, e in enumerate(events) if kind(e) == first)
    end = next(i for i, e in enumerate(events) if i > start and kind(e) == last)
    return events[start + 1 : end]


async def test_an_mcp_servers_progress_becomes_throttled_tool_progress_events(
    served: Server,
) -> None:
    request = create_request(calling("echo__count", {"steps": 40}), model="script")
    events = await collect(served.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed"
    assert said(events) == "echo__count: counted to 40"
    started = next(e for e in events if kind(e) == "tool_execution_started").tool_execution_started
    told = [e for e in events if kind(e) == "tool_progress"]
    progress = [e.tool_progress for e in told]
    assert {(p.call_id, p.tool_name, p.total) for p in progress} == {
        (started.call_id, "echo__count", 40.0)
    }
    # The first report at once, the last with the result: in between, at most one every
    # half second (40 reports sent as fast as the server can).
    assert progress[0].progress == 1 and progress[0].message == "step 1"
    assert progress[-1].progress == 40 and progress[-1].message == "step 40"
    assert len(progress) < 10
    assert [p.progress for p in progress] == sorted(p.progress for p in progress)
    finished = next(e for e in events if kind(e) == "tool_execution_finished")
    assert finished.sequence == told[-1].sequence + 1  # committed with the result
    assert between(events, "tool_execution_started", "tool_execution_finished") == told


async def test_a_sampling_request_is_answered_by_the_runs_model_and_its_tokens_count(
    served: Server,
) -> None:
    request = create_request(calling("echo__ask_model", {"prompt": "What is MCP?"}), model="script")
    events = await collect(served.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed"
    assert said(events) == "echo__ask_model: the model said 'What is MCP?' (script, endTurn)"
    # The tool's model call is the run's: its usage recorded while the tool ran.
    [sampled] = [
        e.usage_recorded.usage
        for e in between(events, "tool_execution_started", "tool_execution_finished")
        if kind(e) == "usage_recorded"
    ]
    assert (sampled.input_tokens, sampled.output_tokens) == (4, 3)  # the local estimate
    used = [e.usage_recorded.usage for e in events if kind(e) == "usage_recorded"]
    assert len(used) == 3
    run_id = events[0].run_id
    run = (await served.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert run.total_usage.input_tokens == sum(u.input_tokens for u in used)
    assert run.total_usage.output_tokens == sum(u.output_tokens for u in used)


async def test_a_sampling_request_is_refused_once_the_runs_budget_is_spent(
    served: Server,
) -> None:
    first = {"usage": {"input": 10, "output": 5}}  # the whole token budget, not past it
    request = create_request(
        calling("echo__ask_model", {"prompt": "more?"}, **first), model="script"
    )
    request.budget.max_tokens = 15
    events = await collect(served.runs.CreateRunStream(request))
    assert [kind(e) for e in events[-2:]] == ["budget_exceeded", "run_failed"]  # the next call
    ran = between(events, "tool_execution_started", "tool_execution_finished")
    assert "usage_recorded" not in {kind(e) for e in ran}
    sessions = s_rpc.SessionServiceStub(served.channel)
    listed = await sessions.ListSessionMessages(
        s.ListSessionMessagesRequest(session_id=events[0].run_started.session_id)
    )
    [result] = [m for m in listed.messages if m.tool_call_id]
    text = "".join(part.text.text for part in result.content)
    assert text == (
        "MCP tool 'ask_model' failed: the run's budget is spent: it used 15 against its token "
        "budget of 15"
    )


async def test_a_server_whose_sampling_is_off_is_not_answered(tmp_path: Path) -> None:
    server = await start_server(fast_settings(tmp_path, mcp=echo(sampling=False)))
    try:
        request = create_request(calling("echo__ask_model", {"prompt": "hi"}), model="script")
        events = await collect(server.runs.CreateRunStream(request))
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    assert (
        said(events)
        == "echo__ask_model: error: MCP tool 'ask_model' failed: Sampling not supported"
    )
    assert sum(1 for e in events if kind(e) == "usage_recorded") == 2  # the run's own calls


async def test_an_mcp_servers_log_messages_go_to_behests_log_tagged_with_it(
    served: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="behest.tools.mcp.server")
    for level in ("warning", "debug", "notice"):
        arguments = {"level": level, "text": f"disk at {level}"}
        request = create_request(calling("echo__log", arguments), model="script")
        events = await collect(served.runs.CreateRunStream(request))
        assert said(events) == f"echo__log: logged at {level}"
    logged = [r for r in caplog.records if r.name == "behest.tools.mcp.server"]
    texts = [r.getMessage() for r in logged]
    # debug is below the server's log_level (info): behest neither asks for it nor logs it.
    assert "MCP server 'echo': disk at debug" not in texts
    warning = next(r for r in logged if r.getMessage() == "MCP server 'echo': disk at warning")
    assert warning.levelno == logging.WARNING
    notice = next(r for r in logged if r.getMessage() == "MCP server 'echo': disk at notice")
    assert notice.levelno == logging.INFO
    entry = json.loads(JsonFormatter().format(warning))
    assert entry["mcp_server"] == "echo"
    assert entry["mcp_level"] == "warning" and entry["mcp_logger"] == "echo.tests"
    # Data that is not a string is logged as JSON.
    assert 'MCP server \'echo\': {"said": "disk at debug", "at": "debug"}' in texts


async def test_a_plugin_tool_reports_progress_and_asks_the_runs_model(tmp_path: Path) -> None:
    server = await start_server_with_plugins(fast_settings(tmp_path))
    try:
        arguments = {"text": "Plugins can ask too.", "parts": 5}
        request = create_request(calling("summarise", arguments), model="script")
        events = await collect(server.runs.CreateRunStream(request))
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    assert said(events) == "summarise: summary by script: Plugins can ask too. (endTurn)"
    progress = [e.tool_progress for e in events if kind(e) == "tool_progress"]
    assert [(p.progress, p.total, p.message) for p in progress] == [
        (1, 5, "read part 1"),
        (5, 5, "read part 5"),
    ]
    assert sum(1 for e in events if kind(e) == "usage_recorded") == 3
