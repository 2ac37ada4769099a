"""Runs that wait (issue 14): approvals and client tools as durable pauses, through a real
server and real gRPC clients, with the `script` model."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    server_process,
    start_server,
    start_server_with_plugins,
    stop_server,
)

TERMINAL = {"run_completed", "run_failed", "run_cancelled"}
CALC = {"name": "calculator", "arguments": {"expression": "6*7"}}
ECHO_RESULTS = {"say": "tool_results"}
BROWSER = c.ToolSpec(
    name="browser_open",
    description="Opens a page in the user's browser.",
    parameters_schema=json.dumps(
        {
            "type": "object",
            "properties": {"url": {"type": "string"}},
            "required": ["url"],
            "additionalProperties": False,
        }
    ),
)


def approved_calculator(*steps: dict[str, object], **fields: Any) -> pb.CreateRunRequest:
    request = create_request(script(*steps), model="script", **fields)
    request.approval_required_tools.append("calculator")
    return request


def with_browser(*steps: dict[str, object], **fields: Any) -> pb.CreateRunRequest:
    request = create_request(script(*steps), model="script", **fields)
    request.client_tools.append(BROWSER)
    return request


async def until(stream: AsyncIterator[pb.AgentEvent], wanted: str) -> list[pb.AgentEvent]:
    """Read a stream up to and including the first event of kind `wanted`."""
    events = []
    async for event in stream:
        events.append(event)
        if kind(event) == wanted:
            return events
    raise AssertionError(f"the stream ended without {wanted}: {[kind(e) for e in events]}")


async def rest_of(stub: rpc.RunServiceStub, run_id: str, after: int) -> list[pb.AgentEvent]:
    request = pb.WatchRunEventsRequest(run_id=run_id, last_event_id=after)
    async with asyncio.timeout(10):
        return await collect(stub.WatchRunEvents(request))


def allow(run_id: str, call_id: str, decision: int = pb.APPROVAL_DECISION_ALLOW, reason: str = ""):
    return pb.SubmitApprovalsRequest(
        run_id=run_id,
        approvals=[pb.ApprovalAnswer(call_id=call_id, decision=decision, reason=reason)],
    )


def tool_texts(events: list[pb.AgentEvent]) -> str:
    return "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")


# --- approvals ---------------------------------------------------------------------------


async def test_a_run_waits_for_an_approval_and_an_allow_runs_the_tool(server: Server) -> None:
    stream = server.runs.CreateRunStream(approved_calculator({"tool_calls": [CALC]}, ECHO_RESULTS))
    before = await until(stream, "approval_requested")
    request = before[-1].approval_requested
    assert request.call.name == "calculator"
    assert json.loads(request.call.arguments) == {"expression": "6*7"}
    assert request.expires_at.seconds > time.time()
    assert "tool_execution_started" not in [kind(e) for e in before]
    run_id = before[0].run_id
    run = (await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert run.status == c.RUN_STATUS_WAITING_FOR_INPUT
    assert list(run.approval_required_tools) == ["calculator"]
    pending = await server.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
    assert [(p.call.id, p.kind) for p in pending.calls] == [
        (request.call.id, pb.PENDING_CALL_KIND_APPROVAL)
    ]

    answer = await server.runs.SubmitApprovals(allow(run_id, request.call.id, reason="fine"))
    assert list(answer.waiting_call_ids) == []
    after = [e async for e in stream]
    kinds = [kind(e) for e in after]
    assert kinds[0] == "approval_resolved"
    resolved = after[0].approval_resolved
    assert (resolved.decision, resolved.decided_by, resolved.reason) == (
        pb.APPROVAL_DECISION_ALLOW,
        "anonymous",
        "fine",
    )
    assert kinds.count("tool_execution_started") == 1
    assert kinds[-1] == "run_completed"
    assert "42" in tool_texts(after)
    everything = await rest_of(server.runs, run_id, 0)
    assert [e.sequence for e in everything] == list(range(1, len(everything) + 1))


async def test_a_denied_call_is_not_run_and_the_model_sees_why(server: Server) -> None:
    stream = server.runs.CreateRunStream(approved_calculator({"tool_calls": [CALC]}, ECHO_RESULTS))
    request = (await until(stream, "approval_requested"))[-1]
    deny = allow(
        request.run_id, request.approval_requested.call.id, pb.APPROVAL_DECISION_DENY, "too costly"
    )
    await server.runs.SubmitApprovals(deny)
    after = [e async for e in stream]
    kinds = [kind(e) for e in after]
    assert after[0].approval_resolved.decision == pb.APPROVAL_DECISION_DENY
    assert "tool_execution_started" not in kinds
    assert kinds[-1] == "run_completed"
    seen = tool_texts(after)
    assert "was not run" in seen and "too costly" in seen and "anonymous" in seen


async def test_an_approval_nobody_gives_in_time_is_a_denial(tmp_path: Path) -> None:
    running = await start_server(fast_settings(tmp_path, approval_timeout_s=0.3))
    try:
        stream = running.runs.CreateRunStream(
            approved_calculator({"tool_calls": [CALC]}, ECHO_RESULTS)
        )
        await until(stream, "approval_requested")
        async with asyncio.timeout(10):
            after = [e async for e in stream]
        resolved = after[0].approval_resolved
        assert resolved.decision == pb.APPROVAL_DECISION_TIMED_OUT
        assert resolved.decided_by == ""
        assert "tool_execution_started" not in [kind(e) for e in after]
        assert "nobody approved it within 0.3 s" in tool_texts(after)
        assert kind(after[-1]) == "run_completed"
        late = allow(after[0].run_id, resolved.call_id)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await running.runs.SubmitApprovals(late)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        await stop_server(running)


async def test_a_runs_own_timeout_bounds_its_wait(server: Server) -> None:
    request = approved_calculator({"tool_calls": [CALC]}, ECHO_RESULTS, approval_timeout_s=1)
    stream = server.runs.CreateRunStream(request)
    await until(stream, "approval_requested")
    async with asyncio.timeout(10):
        after = [e async for e in stream]
    assert after[0].approval_resolved.decision == pb.APPROVAL_DECISION_TIMED_OUT


async def test_answering_twice_is_harmless_and_a_different_answer_is_refused(
    server: Server,
) -> None:
    slow_end = {"text": "after the tool", "delay_ms": 200}
    stream = server.runs.CreateRunStream(approved_calculator({"tool_calls": [CALC]}, slow_end))
    request = (await until(stream, "approval_requested"))[-1]
    run_id, call_id = request.run_id, request.approval_requested.call.id
    await server.runs.SubmitApprovals(allow(run_id, call_id))
    again = await server.runs.SubmitApprovals(allow(run_id, call_id))
    assert list(again.waiting_call_ids) == []
    with pytest.raises(grpc.aio.AioRpcError) as otherwise:
        await server.runs.SubmitApprovals(allow(run_id, call_id, pb.APPROVAL_DECISION_DENY))
    assert otherwise.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert call_id in (otherwise.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await server.runs.SubmitApprovals(allow(run_id, "call_nope"))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    after = [e async for e in stream]
    kinds = [kind(e) for e in after]
    assert kinds.count("approval_resolved") == 1
    assert kinds.count("tool_execution_started") == 1
    assert kinds[-1] == "run_completed"
    retried = await server.runs.SubmitApprovals(allow(run_id, call_id))  # a lost reply's retry
    assert list(retried.waiting_call_ids) == []


async def test_bad_answers_are_invalid_and_write_nothing(server: Server) -> None:
    stream = server.runs.CreateRunStream(approved_calculator({"tool_calls": [CALC]}))
    request = (await until(stream, "approval_requested"))[-1]
    run_id, call_id = request.run_id, request.approval_requested.call.id
    cases = [
        pb.SubmitApprovalsRequest(run_id=run_id),
        allow(run_id, call_id, pb.APPROVAL_DECISION_TIMED_OUT),
        allow(run_id, call_id, pb.APPROVAL_DECISION_UNSPECIFIED),
        allow(run_id, ""),
        allow("not-a-uuid", call_id),
    ]
    for bad in cases:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await server.runs.SubmitApprovals(bad)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    both = pb.SubmitApprovalsRequest(
        run_id=run_id,
        approvals=[
            pb.ApprovalAnswer(call_id=call_id, decision=pb.APPROVAL_DECISION_ALLOW),
            pb.ApprovalAnswer(call_id="call_unknown", decision=pb.APPROVAL_DECISION_ALLOW),
        ],
    )
    with pytest.raises(grpc.aio.AioRpcError) as partly:
        await server.runs.SubmitApprovals(both)
    assert partly.value.code() == grpc.StatusCode.NOT_FOUND
    pending = await server.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
    assert [p.call.id for p in pending.calls] == [call_id]
    results = pb.SubmitToolResultsRequest(
        run_id=run_id, results=[pb.ClientToolResult(call_id=call_id, output="x")]
    )
    with pytest.raises(grpc.aio.AioRpcError) as wrong_kind:
        await server.runs.SubmitToolResults(results)
    assert wrong_kind.value.code() == grpc.StatusCode.NOT_FOUND
    stream.cancel()


async def test_allow_always_frees_the_tool_for_the_rest_of_the_session(server: Server) -> None:
    stream = server.runs.CreateRunStream(
        approved_calculator({"tool_calls": [CALC]}, {"tool_calls": [CALC]}, {"text": "ok"})
    )
    request = (await until(stream, "approval_requested"))[-1]
    await server.runs.SubmitApprovals(
        allow(request.run_id, request.approval_requested.call.id, pb.APPROVAL_DECISION_ALLOW_ALWAYS)
    )
    kinds = [kind(e) async for e in stream]
    assert kinds.count("approval_requested") == 0
    assert kinds.count("tool_execution_started") == 2
    assert kinds[-1] == "run_completed"
    session_id = (await server.runs.GetRun(pb.GetRunRequest(run_id=request.run_id))).run.session_id
    next_run = approved_calculator({"tool_calls": [CALC]}, {"text": "ok"}, session_id=session_id)
    later = await collect(server.runs.CreateRunStream(next_run))
    assert "approval_requested" not in [kind(e) for e in later]
    assert kind(later[-1]) == "run_completed"


async def test_parallel_calls_wait_for_every_answer_and_keep_their_order(server: Server) -> None:
    calls = {"tool_calls": [CALC, {"name": "current_time", "arguments": {}}, CALC]}
    stream = server.runs.CreateRunStream(approved_calculator(calls, ECHO_RESULTS))
    before = await until(stream, "approval_requested")
    second = (await until(stream, "approval_requested"))[-1]
    made = [e.tool_call_completed.call.id for e in before if kind(e) == "tool_call_completed"]
    first = before[-1]
    run_id = first.run_id
    one, two = first.approval_requested.call.id, second.approval_requested.call.id
    assert [one, two] == [made[0], made[2]]
    waiting = await server.runs.SubmitApprovals(allow(run_id, two, pb.APPROVAL_DECISION_DENY, "no"))
    assert list(waiting.waiting_call_ids) == [one]
    run = (await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert run.status == c.RUN_STATUS_WAITING_FOR_INPUT
    await server.runs.SubmitApprovals(allow(run_id, one))
    after = [e async for e in stream]
    assert kind(after[-1]) == "run_completed"
    executed = [
        e.tool_execution_started.call_id for e in after if kind(e) == "tool_execution_started"
    ]
    assert sorted(executed) == sorted([one, made[1]])
    output = await server.runs.GetRunOutput(pb.GetRunOutputRequest(run_id=run_id))
    assert output.output.iterations == 2
    messages = await server.app.store.run_messages(run_id)
    assert [m.tool_call_id for m in messages if m.role.value == "tool"] == made


async def test_cancel_of_a_waiting_run_ends_it_at_once(server: Server) -> None:
    stream = server.runs.CreateRunStream(approved_calculator({"tool_calls": [CALC]}))
    request = (await until(stream, "approval_requested"))[-1]
    began = time.monotonic()
    reply = await server.runs.CancelRun(pb.CancelRunRequest(run_id=request.run_id))
    assert reply.status == c.RUN_STATUS_CANCELLED
    after = [e async for e in stream]
    assert time.monotonic() - began < 1.0
    assert [kind(e) for e in after][-1] == "run_cancelled"
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await server.runs.SubmitApprovals(allow(request.run_id, request.approval_requested.call.id))
    assert ended.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    pending = await server.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=request.run_id))
    assert list(pending.calls) == []


async def test_waiting_runs_hold_no_task_and_no_slot(tmp_path: Path) -> None:
    running = await start_server(fast_settings(tmp_path, max_concurrent_runs=10))
    try:
        waiting = []
        for _ in range(10):
            streams = [
                running.runs.CreateRunStream(approved_calculator({"tool_calls": [CALC]}))
                for _ in range(10)
            ]
            for stream in streams:
                waiting.append((await until(stream, "approval_requested"))[-1])
                stream.cancel()
        ids = {w.run_id for w in waiting}
        tasks = [t for t in asyncio.all_tasks() if t.get_name().removeprefix("run-") in ids]
        if tasks:  # the last ones may still be returning from their pause
            _, still = await asyncio.wait(tasks, timeout=1.0)
            assert not still, "waiting runs keep tasks"
        listed = await running.runs.ListRuns(
            pb.ListRunsRequest(status=c.RUN_STATUS_WAITING_FOR_INPUT)
        )
        assert len(listed.runs) == 100
        done = await collect(running.runs.CreateRunStream(create_request("still admitted")))
        assert kind(done[-1]) == "run_completed"
        first = waiting[0]
        await running.runs.SubmitApprovals(allow(first.run_id, first.approval_requested.call.id))
        rest = await rest_of(running.runs, first.run_id, first.sequence)
        assert kind(rest[-1]) == "run_completed"
    finally:
        await stop_server(running)


async def test_a_waiting_run_survives_kill_9_and_its_tool_runs_once(tmp_path: Path) -> None:
    async with server_process(tmp_path) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            stream = stub.CreateRunStream(approved_calculator({"tool_calls": [CALC]}, ECHO_RESULTS))
            before = await until(stream, "approval_requested")
            process.send_signal(signal.SIGKILL)
            await process.wait()
            stream.cancel()
    run_id, call_id = before[-1].run_id, before[-1].approval_requested.call.id
    async with server_process(tmp_path) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            run = (await stub.GetRun(pb.GetRunRequest(run_id=run_id))).run
            assert run.status == c.RUN_STATUS_WAITING_FOR_INPUT
            pending = await stub.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
            assert [p.call.id for p in pending.calls] == [call_id]
            await stub.SubmitApprovals(allow(run_id, call_id))
            everything = await rest_of(stub, run_id, 0)
    assert everything[: len(before)] == before
    kinds = [kind(e) for e in everything]
    assert kinds.count("tool_execution_started") == 1
    assert [k in TERMINAL for k in kinds].count(True) == 1
    assert kinds[-1] == "run_completed"
    assert [e.sequence for e in everything] == list(range(1, len(everything) + 1))


# --- client tools ----------------------------------------------------------------------


async def test_a_client_tools_result_reaches_the_model(server: Server) -> None:
    call = {"name": "browser_open", "arguments": {"url": "https://example.com"}}
    stream = server.runs.CreateRunStream(with_browser({"tool_calls": [call]}, ECHO_RESULTS))
    before = await until(stream, "client_tool_requested")
    requested = before[-1].client_tool_requested
    assert requested.call.name == "browser_open"
    assert json.loads(requested.call.arguments) == {"url": "https://example.com"}
    run_id = before[-1].run_id
    pending = await server.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
    assert [p.kind for p in pending.calls] == [pb.PENDING_CALL_KIND_CLIENT_TOOL]
    result = pb.SubmitToolResultsRequest(
        run_id=run_id,
        results=[pb.ClientToolResult(call_id=requested.call.id, output="<title>Example</title>")],
    )
    reply = await server.runs.SubmitToolResults(result)
    assert list(reply.waiting_call_ids) == []
    after = [e async for e in stream]
    answered = after[0].client_tool_answered
    assert (answered.call_id, answered.is_error, answered.timed_out) == (
        requested.call.id,
        False,
        False,
    )
    assert "<title>Example</title>" in tool_texts(after)
    assert kind(after[-1]) == "run_completed"
    run = (await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    assert [t.name for t in run.client_tools] == ["browser_open"]


async def test_schema_invalid_arguments_never_reach_the_client(server: Server) -> None:
    bad = {"name": "browser_open", "arguments": {"link": 3}}
    events = await collect(
        server.runs.CreateRunStream(with_browser({"tool_calls": [bad]}, ECHO_RESULTS))
    )
    kinds = [kind(e) for e in events]
    assert "client_tool_requested" not in kinds
    assert "do not match its schema" in tool_texts(events)
    assert kinds[-1] == "run_completed"


async def test_a_client_tool_call_nobody_answers_becomes_an_error(server: Server) -> None:
    call = {"name": "browser_open", "arguments": {"url": "u"}}
    request = with_browser({"tool_calls": [call]}, ECHO_RESULTS, client_tool_timeout_s=1)
    stream = server.runs.CreateRunStream(request)
    await until(stream, "client_tool_requested")
    async with asyncio.timeout(10):
        after = [e async for e in stream]
    assert after[0].client_tool_answered.timed_out
    assert "timed out" in tool_texts(after)
    assert kind(after[-1]) == "run_completed"


async def test_client_tool_declarations_are_checked(server: Server) -> None:
    cases = {
        "clash": c.ToolSpec(name="calculator", parameters_schema="{}"),
        "name": c.ToolSpec(name="has space"),
        "schema": c.ToolSpec(name="x", parameters_schema='{"type": 7}'),
        "json": c.ToolSpec(name="x", parameters_schema="{"),
        "deep": c.ToolSpec(name="x", parameters_schema="[" * 200 + "]" * 200),
    }
    for case, spec in cases.items():
        request = create_request("hi", model="script")
        request.client_tools.append(spec)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await server.runs.CreateRun(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, case
        assert "client_tools" in (refused.value.details() or ""), case
    unknown = create_request("hi", model="script")
    unknown.approval_required_tools.append("no_such_tool")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await server.runs.CreateRun(unknown)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    too_long = create_request("hi", model="script", approval_timeout_s=10**9)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await server.runs.CreateRun(too_long)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# --- who may answer ---------------------------------------------------------------------

TOKENS = {
    "alice": ("acme", ["approver"]),
    "carol": ("acme", []),
    "bob": ("globex", ["approver"]),
}
SECRETS = {name: secrets.token_urlsafe(24) for name in TOKENS}


def bearer(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {SECRETS[name]}"),)


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[Server]:
    tokens = {
        name: {
            "sha256": hashlib.sha256(SECRETS[name].encode()).hexdigest(),
            "principal": name,
            "tenant": tenant,
            "roles": roles,
        }
        for name, (tenant, roles) in TOKENS.items()
    }
    tables = {"auth": {"mode": "bearer", "tokens": tokens, "approver_role": "approver"}}
    running = await start_server(fast_settings(tmp_path).with_tables(tables, source="test"))
    try:
        yield running
    finally:
        await stop_server(running)


async def test_only_approvers_of_the_runs_tenant_may_decide(guarded: Server) -> None:
    runs = guarded.runs
    stream = runs.CreateRunStream(
        approved_calculator({"tool_calls": [CALC]}), metadata=bearer("carol")
    )
    request = (await until(stream, "approval_requested"))[-1]
    decision = allow(request.run_id, request.approval_requested.call.id)
    with pytest.raises(grpc.aio.AioRpcError) as other_tenant:
        await runs.SubmitApprovals(decision, metadata=bearer("bob"))
    assert other_tenant.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as no_role:
        await runs.SubmitApprovals(decision, metadata=bearer("carol"))
    assert no_role.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "approver" in (no_role.value.details() or "")
    listing = pb.ListPendingCallsRequest(run_id=request.run_id)
    with pytest.raises(grpc.aio.AioRpcError) as hidden:
        await runs.ListPendingCalls(listing, metadata=bearer("bob"))
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    await runs.SubmitApprovals(decision, metadata=bearer("alice"))
    after = [e async for e in stream]
    assert after[0].approval_resolved.decided_by == "alice"
    assert kind(after[-1]) == "run_completed"


# --- which calls wait -------------------------------------------------------------------


async def test_side_effects_and_tools_that_ask_for_it_wait_for_approvals(tmp_path: Path) -> None:
    running = await start_server_with_plugins(fast_settings(tmp_path))
    try:
        calls = [
            CALC,
            {"name": "slow_unsafe", "arguments": {"seconds": 0}},
            {"name": "guarded", "arguments": {"seconds": 0}},
        ]
        request = create_request(script({"tool_calls": calls}), model="script")
        request.approve_side_effects = True
        stream = running.runs.CreateRunStream(request)
        before = await until(stream, "approval_requested")
        second = await until(stream, "approval_requested")
        waiting = [before[-1].approval_requested.call.name, second[-1].approval_requested.call.name]
        assert waiting == ["slow_unsafe", "guarded"]  # calculator is read-only
        pending = await running.runs.ListPendingCalls(
            pb.ListPendingCallsRequest(run_id=before[-1].run_id)
        )
        assert [p.call.name for p in pending.calls] == waiting
        stream.cancel()
        plain = running.runs.CreateRunStream(
            create_request(script({"tool_calls": calls[1:]}), model="script")
        )
        events = await until(plain, "approval_requested")
        assert events[-1].approval_requested.call.name == "guarded"  # it asks by itself
        assert "tool_execution_started" not in [kind(e) for e in events]
        pending = await running.runs.ListPendingCalls(
            pb.ListPendingCallsRequest(run_id=events[-1].run_id)
        )
        assert [p.call.name for p in pending.calls] == ["guarded"]
        plain.cancel()
    finally:
        await stop_server(running)
