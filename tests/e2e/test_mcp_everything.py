"""The MCP reference server `@modelcontextprotocol/server-everything` from npm (tests/mcp_node,
installed by `make test`, run by path with node): its long-running operation's progress is in
the run's log, its sampling tool is answered by the run's `script` model with the tokens
counted, its log messages are in behest's log, its task-required tool is listed as not offered
and never offered, and its question (elicitation on the back-channel) is put to the user."""

from __future__ import annotations

import itertools
import json
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from behest._proto.agent.v1 import catalog_pb2 as cat
from behest._proto.agent.v1 import catalog_pb2_grpc as cat_rpc
from behest._proto.agent.v1 import run_pb2 as pb
from behest.tools.mcp_logs import LEVELS
from tests.support import (
    CI,
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    stop_server,
)

EVERYTHING = (
    Path(__file__).parents[1]
    / "mcp_node"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)
RESEARCH = "everything__simulate-research-query"


@pytest.fixture(scope="module")
def node() -> str:
    """Node with tests/mcp_node's packages (`make test` installs them with npm ci)."""
    found = shutil.which("node")
    if found and EVERYTHING.is_file():
        return found
    why = "no node" if not found else f"no {EVERYTHING}: run `make test`"
    if CI:
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@pytest.fixture
async def served(node: str, tmp_path: Path) -> AsyncIterator[Server]:
    server = {"command": node, "args": [str(EVERYTHING), "stdio"], "log_level": "debug"}
    settings = fast_settings(tmp_path, mcp={"servers": {"everything": server}})
    running = await start_server(settings)
    try:
        yield running
    finally:
        await stop_server(running)


def calling(name: str, arguments: dict[str, Any]) -> str:
    return script({"tool_calls": [{"name": name, "arguments": arguments}]}, {"say": "tool_results"})


def said(events: list[pb.AgentEvent]) -> str:
    last = max(i for i, e in enumerate(events) if kind(e) == "model_started")
    return "".join(e.text_delta.delta for e in events[last:] if kind(e) == "text_delta")


async def test_a_long_running_operation_shows_its_progress_in_the_runs_log(
    served: Server,
) -> None:
    tool = "everything__trigger-long-running-operation"
    request = create_request(calling(tool, {"duration": 2, "steps": 8}), model="script")
    events = await collect(served.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed"
    assert said(events).startswith(f"{tool}: Long running operation completed.")
    told = [e for e in events if kind(e) == "tool_progress"]
    progress = [e.tool_progress for e in told]
    assert {(p.tool_name, p.total) for p in progress} == {(tool, 8.0)}
    assert progress[0].progress == 1 and progress[-1].progress == 8
    assert [p.progress for p in progress] == sorted({p.progress for p in progress})
    # A report every quarter second, told at most every half second; the last one with the
    # result (the next event is the end of the call).
    assert 3 <= len(progress) <= 6
    moments = [e.timestamp.ToDatetime() for e in told[:-1]]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(moments)]
    assert all(gap >= 0.45 for gap in gaps), gaps
    after = events[events.index(told[-1]) + 1]
    assert kind(after) == "tool_execution_finished"


async def test_the_sampling_tool_is_answered_by_the_runs_model_and_its_tokens_count(
    served: Server,
) -> None:
    tool = "everything__trigger-sampling-request"
    request = create_request(calling(tool, {"prompt": "hello", "maxTokens": 20}), model="script")
    events = await collect(served.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed"
    answer = json.loads(said(events).split("LLM sampling result: \n", 1)[1])
    assert answer == {
        "model": "script",
        "stopReason": "endTurn",
        "role": "assistant",
        "content": {"type": "text", "text": "Resource trigger-sampling-request context: hello"},
    }
    started = next(i for i, e in enumerate(events) if kind(e) == "tool_execution_started")
    finished = next(i for i, e in enumerate(events) if kind(e) == "tool_execution_finished")
    [sampled] = [e for e in events[started:finished] if kind(e) == "usage_recorded"]
    assert sampled.usage_recorded.usage.output_tokens == 4  # a word a token (the estimate)
    used = [e.usage_recorded.usage for e in events if kind(e) == "usage_recorded"]
    run = (await served.runs.GetRun(pb.GetRunRequest(run_id=events[0].run_id))).run
    assert run.total_usage.input_tokens == sum(u.input_tokens for u in used)
    assert run.total_usage.output_tokens == sum(u.output_tokens for u in used)


async def test_a_task_required_tool_is_listed_as_not_offered_and_never_offered(
    served: Server,
) -> None:
    tools = cat_rpc.ToolServiceStub(served.channel)
    listed = {t.spec.name: t for t in (await tools.ListTools(cat.ListToolsRequest())).tools}
    assert listed[RESEARCH].source == "mcp"
    assert listed[RESEARCH].unsupported == (
        'it requires task-augmented execution (execution.taskSupport "required"), which '
        "behest does not run"
    )
    offered_too = [
        n for n, t in listed.items() if n.startswith("everything__") and not t.unsupported
    ]
    assert "everything__trigger-sampling-request" in offered_too  # sampling is advertised
    events = await collect(
        served.runs.CreateRunStream(create_request(script({"say": "tools"}), model="script"))
    )
    offered = said(events).removeprefix("tools: ").split(" (choice")[0].split(", ")
    assert RESEARCH not in offered
    assert set(offered_too) <= set(offered)


async def test_its_log_messages_go_to_behests_log_tagged_with_it(
    served: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="behest.tools.mcp.server")
    tool = "everything__toggle-simulated-logging"
    events = await collect(
        served.runs.CreateRunStream(create_request(calling(tool, {}), model="script"))
    )
    assert "Started simulated, random-leveled logging" in said(events)
    [logged, *_] = [r for r in caplog.records if r.name == "behest.tools.mcp.server"]
    level = logged.mcp_level  # type: ignore[attr-defined]
    assert logged.mcp_server == "everything"  # type: ignore[attr-defined]
    assert logged.levelno == LEVELS[level]  # its own level, mapped (all asked for: debug)
    text = logged.getMessage().removeprefix("MCP server 'everything': ").lower()
    assert text.startswith(level) and "message" in text


async def test_its_question_on_the_back_channel_is_put_to_the_user_and_answered(
    served: Server,
) -> None:
    """Elicitation as servers of the 2025 protocol ask: an `elicitation/create` request
    during the call (tests/e2e/test_elicitation.py covers the 2026 input-required way)."""
    request = create_request(calling("everything__trigger-elicitation-request", {}), model="script")
    stream = served.runs.CreateRunStream(request)
    async for event in stream:
        if kind(event) == "elicitation_requested":
            break
    asked = event.elicitation_requested
    assert asked.message == "Please provide inputs for the following fields:"
    assert json.loads(asked.requested_schema)["required"] == ["name"]
    with pytest.raises(grpc.aio.AioRpcError) as refused:  # its schema requires a name
        await served.runs.SubmitElicitationAnswers(answer(event.run_id, asked, {"check": True}))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await served.runs.SubmitElicitationAnswers(answer(event.run_id, asked, {"name": "Ada"}))
    rest = await collect(stream)
    assert kind(rest[-1]) == "run_completed"
    assert "User provided the requested information" in said(rest)
    assert "- Name: Ada" in said(rest)


def answer(
    run_id: str, asked: pb.ElicitationRequestedEvent, content: dict[str, Any]
) -> pb.SubmitElicitationAnswersRequest:
    item = pb.ElicitationAnswer(
        elicitation_id=asked.elicitation_id,
        action=pb.ELICITATION_ACTION_ACCEPT,
        content=json.dumps(content),
    )
    return pb.SubmitElicitationAnswersRequest(run_id=run_id, answers=[item])
