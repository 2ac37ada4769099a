"""Sub-agent runs (issue 15): `spawn_agent` starts child runs with their own logs; their text
comes back to the parent, their spend counts against its budget, a parent cancel ends them,
and a crash mid-child resumes both, each ending once."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest._proto.agent.v1 import session_pb2 as spb
from behest._proto.agent.v1 import session_pb2_grpc as session_rpc
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    server_process,
    start_server,
    stop_server,
)

TERMINAL = {"run_completed", "run_failed", "run_cancelled"}


def spawn(child_steps: list[dict[str, object]], **extra: Any) -> dict[str, object]:
    """A model call of `spawn_agent` whose child plays `child_steps`."""
    return {"name": "spawn_agent", "arguments": {"input": script(*child_steps), **extra}}


def parent(*steps: dict[str, object], **fields: Any) -> pb.CreateRunRequest:
    request = create_request(script(*steps), model="script", **fields)
    request.allow_sub_agents = True
    return request


def texts(events: list[pb.AgentEvent]) -> str:
    return "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")


async def log_of(stub: rpc.RunServiceStub, run_id: str) -> list[pb.AgentEvent]:
    async with asyncio.timeout(20):
        return await collect(stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id)))


def of_kind(events: list[pb.AgentEvent], name: str) -> list[Any]:
    return [getattr(e, name) for e in events if kind(e) == name]


async def test_a_parent_runs_two_children_in_parallel_and_gets_their_text(
    server: Server,
) -> None:
    one = spawn([{"text": "first child here", "delay_ms": 20}])
    two = spawn([{"text": "second child here", "delay_ms": 20}], instructions="be brief")
    events = await collect(
        server.runs.CreateRunStream(parent({"tool_calls": [one, two]}, {"say": "tool_results"}))
    )
    assert kind(events[-1]) == "run_completed"
    started = of_kind(events, "sub_run_started")
    finished = of_kind(events, "sub_run_finished")
    assert len(started) == len(finished) == 2
    assert {f.status for f in finished} == {c.RUN_STATUS_COMPLETED}
    said = texts(events[events.index(next(e for e in events if kind(e) == "sub_run_finished")) :])
    assert "first child here" in said and "second child here" in said
    parent_id = events[0].run_id
    # Both ran at once: each started before either finished.
    kinds = [kind(e) for e in events]
    assert kinds.index("sub_run_finished") > max(
        i for i, k in enumerate(kinds) if k == "sub_run_started"
    )
    for start in started:
        child = await log_of(server.runs, start.child_run_id)
        assert [e.sequence for e in child] == list(range(1, len(child) + 1))
        assert kind(child[-1]) == "run_completed"
        record = (await server.runs.GetRun(pb.GetRunRequest(run_id=start.child_run_id))).run
        assert record.parent_run_id == parent_id
        assert record.session_id == start.session_id != events[0].run_started.session_id


async def test_the_tool_is_offered_only_to_runs_that_allow_it(tmp_path: Path) -> None:
    running = await start_server(fast_settings(tmp_path, sub_agent_max_depth=1))
    try:
        plain = create_request(script({"say": "tools"}), model="script")
        said = texts(await collect(running.runs.CreateRunStream(plain)))
        assert "spawn_agent" not in said
        allowed = texts(await collect(running.runs.CreateRunStream(parent({"say": "tools"}))))
        assert "spawn_agent" in allowed
        # A child at the depth limit is offered no spawn_agent of its own.
        events = await collect(
            running.runs.CreateRunStream(
                parent({"tool_calls": [spawn([{"say": "tools"}])]}, {"say": "tool_results"})
            )
        )
        assert kind(events[-1]) == "run_completed"
        child_id = of_kind(events, "sub_run_started")[0].child_run_id
        child_said = texts(await log_of(running.runs, child_id))
        assert "calculator" in child_said and "spawn_agent" not in child_said
    finally:
        await stop_server(running)


async def test_children_beyond_the_limit_are_refused_to_the_model(tmp_path: Path) -> None:
    running = await start_server(fast_settings(tmp_path, sub_agent_max_children=1))
    try:
        calls = [spawn([{"text": "only one"}]), spawn([{"text": "one too many"}])]
        events = await collect(
            running.runs.CreateRunStream(parent({"tool_calls": calls}, {"say": "tool_results"}))
        )
        assert len(of_kind(events, "sub_run_started")) == 1
        assert "at most 1 sub-agents" in texts(events)
        assert kind(events[-1]) == "run_completed"
    finally:
        await stop_server(running)


async def test_a_childs_spend_counts_against_the_parents_budget(server: Server) -> None:
    child = spawn([{"text": "spent", "usage": {"input": 500}}])
    request = parent(
        {"tool_calls": [child], "usage": {"input": 100}},
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}],
            "usage": {"input": 450},
        },
        budget=pb.RunBudget(max_tokens=1000),
    )
    events = await collect(server.runs.CreateRunStream(request))
    over = of_kind(events, "budget_exceeded")
    assert [(o.budget, o.limit, o.used) for o in over] == [
        (pb.BUDGET_KIND_TOKENS, "1000", str(100 + 500 + 450))
    ]
    assert events[-1].run_failed.code == pb.FAILURE_CODE_BUDGET_EXCEEDED
    child_id = of_kind(events, "sub_run_started")[0].child_run_id
    record = (await server.runs.GetRun(pb.GetRunRequest(run_id=child_id))).run
    assert record.budget.max_tokens == 900  # what the parent had left when it started


async def test_cancelling_the_parent_cancels_its_children(server: Server) -> None:
    slow = [{"deltas": 500, "delay_ms": 20}]
    stream = server.runs.CreateRunStream(parent({"tool_calls": [spawn(slow), spawn(slow)]}))
    started: list[pb.AgentEvent] = []
    async for event in stream:
        if kind(event) == "sub_run_started":
            started.append(event)
            if len(started) == 2:
                break
    parent_id = started[0].run_id
    reply = await server.runs.CancelRun(pb.CancelRunRequest(run_id=parent_id, reason="stop all"))
    assert reply.status == c.RUN_STATUS_CANCELLED
    assert kind((await log_of(server.runs, parent_id))[-1]) == "run_cancelled"
    for event in started:
        child = await log_of(server.runs, event.sub_run_started.child_run_id)
        assert kind(child[-1]) == "run_cancelled"
        assert child[-1].run_cancelled.source == pb.CANCEL_SOURCE_PARENT_RUN
        assert parent_id in child[-1].run_cancelled.reason
    stream.cancel()


async def test_a_crash_mid_child_resumes_both_and_each_ends_once(tmp_path: Path) -> None:
    slow_child = [{"deltas": 300, "delay_ms": 10}, {"text": "child finished"}]
    steps = [{"tool_calls": [spawn(slow_child)]}, {"say": "tool_results"}]
    async with server_process(tmp_path) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            stream = stub.CreateRunStream(parent(*steps))
            async for event in stream:
                if kind(event) == "sub_run_started":
                    break
            child_id = event.sub_run_started.child_run_id
            async for child_event in stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=child_id)):
                if kind(child_event) == "text_delta":
                    break  # the child is streaming
            process.send_signal(signal.SIGKILL)
            await process.wait()
    parent_id = event.run_id
    async with server_process(tmp_path) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            parent_log = await log_of(stub, parent_id)
            child_log = await log_of(stub, child_id)
    for log in (parent_log, child_log):
        kinds = [kind(e) for e in log]
        assert [k in TERMINAL for k in kinds].count(True) == 1, kinds
        assert kinds[-1] == "run_completed", kinds
        assert [e.sequence for e in log] == list(range(1, len(log) + 1))
    assert [kind(e) for e in parent_log].count("sub_run_started") == 1
    assert "child finished" in texts(parent_log)


async def test_deleting_the_parents_session_erases_its_childrens_sessions(server: Server) -> None:
    grandchild = spawn([{"text": "deepest"}])
    child = spawn([{"tool_calls": [grandchild]}])  # children inherit allow_sub_agents
    request = parent({"tool_calls": [child, spawn([{"text": "other"}])]})
    events = await collect(server.runs.CreateRunStream(request))
    assert kind(events[-1]) == "run_completed", events[-1]
    children = [s.child_run_id for s in of_kind(events, "sub_run_started")]
    child_logs = [await log_of(server.runs, run_id) for run_id in children]
    grandchildren = [s.child_run_id for log in child_logs for s in of_kind(log, "sub_run_started")]
    assert len(children) == 2 and len(grandchildren) == 1
    sessions = session_rpc.SessionServiceStub(server.channel)
    deleted = await sessions.DeleteSession(
        spb.DeleteSessionRequest(session_id=events[0].run_started.session_id)
    )
    assert deleted.runs_deleted == 4
    for run_id in [events[0].run_id, *children, *grandchildren]:
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    for log in child_logs:
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await sessions.GetSession(
                spb.GetSessionRequest(session_id=log[0].run_started.session_id)
            )
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND


async def test_starting_a_child_can_wait_for_an_approval(server: Server) -> None:
    steps = ({"tool_calls": [spawn([{"text": "child says hi"}])]}, {"say": "tool_results"})
    for options in ({"approval_required_tools": ["spawn_agent"]}, {"approve_side_effects": True}):
        stream = server.runs.CreateRunStream(parent(*steps, **options))
        before = []
        async for event in stream:
            before.append(event)
            if kind(event) == "approval_requested":
                break
        call = before[-1].approval_requested.call
        assert call.name == "spawn_agent"
        assert "sub_run_started" not in [kind(e) for e in before]
        answer = pb.SubmitApprovalsRequest(
            run_id=before[0].run_id,
            approvals=[pb.ApprovalAnswer(call_id=call.id, decision=pb.APPROVAL_DECISION_ALLOW)],
        )
        await server.runs.SubmitApprovals(answer)
        after = [e async for e in stream]
        assert kind(after[-1]) == "run_completed"
        assert len(of_kind(after, "sub_run_started")) == 1
        assert "child says hi" in texts(after)
    # Only a run that may start children can ask for their approval.
    request = create_request("hi", approval_required_tools=["spawn_agent"])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await server.runs.CreateRun(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "approval_required_tools: unknown server tool 'spawn_agent'" in (
        refused.value.details() or ""
    )
