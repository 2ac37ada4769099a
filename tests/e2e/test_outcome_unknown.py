"""A tool that is not idempotent, cut by a stop, leaves its run waiting for a reconciliation
instead of failing it (issue 25): its execution OUTCOME_UNKNOWN, the run WAITING_FOR_INPUT,
and ReconcileToolExecution says what happened. Every execution has a record with transitions."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import common_pb2 as c
from behest._proto.agent.v1 import execution_pb2 as x
from behest._proto.agent.v1 import execution_pb2_grpc as x_rpc
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import session_pb2 as s
from behest._proto.agent.v1 import session_pb2_grpc as s_rpc
from behest.client import (
    BehestClient,
    ExecutionStatus,
    FailedPrecondition,
    PendingCallKind,
    RunCompleted,
    ToolExecution,
    Verdict,
)
from tests.e2e.test_resume import events_of, interrupt_during_tool, tool_step
from tests.support import (
    Server,
    behest,
    create_request,
    fast_settings,
    kind,
    script,
    start_server_with_plugins,
    stop_server,
)
from tests.web_support import ALICE, AUTH, BOB, CAROL, bearer


async def tool_results(server: Server, run_id: str) -> list[str]:
    """The text of the tool messages of the run's session: what the model got."""
    run = (await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
    sessions = s_rpc.SessionServiceStub(server.channel)
    listed = await sessions.ListSessionMessages(
        s.ListSessionMessagesRequest(session_id=run.session_id)
    )
    messages = [m for m in listed.messages if m.role == "tool"]
    return ["".join(part.text.text for part in m.content) for m in messages]


def executions(server: Server) -> x_rpc.ToolExecutionServiceStub:
    return x_rpc.ToolExecutionServiceStub(server.channel)


async def until_unknown(server: Server, run_id: str) -> pb.AgentEvent:
    """The run's ToolOutcomeUnknown, once the restarted server has stored it."""
    watch = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
    async for event in watch:
        if kind(event) == "tool_outcome_unknown":
            watch.cancel()
            return event
    raise AssertionError("the run never said the outcome was unknown")


async def cut_unsafe_call(tmp_path: Path, **settings: object) -> tuple[Server, str]:
    """A run whose slow_unsafe call was cut by a shutdown, on a restarted server."""
    steps = script(tool_step("slow_unsafe", 1), {"text": "all done"})
    first = await start_server_with_plugins(fast_settings(tmp_path))
    run_id = await interrupt_during_tool(first, steps)
    return await start_server_with_plugins(fast_settings(tmp_path, **settings)), run_id


async def test_a_cut_unsafe_call_waits_and_its_verdict_ran_gives_the_model_its_result(
    tmp_path: Path,
) -> None:
    server, run_id = await cut_unsafe_call(tmp_path)
    try:
        unknown = (await until_unknown(server, run_id)).tool_outcome_unknown
        assert (unknown.tool_name, unknown.attempt) == ("slow_unsafe", 1)
        run = (await server.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
        assert run.status == c.RUN_STATUS_WAITING_FOR_INPUT
        pending = await server.runs.ListPendingCalls(pb.ListPendingCallsRequest(run_id=run_id))
        assert [(p.kind, p.execution_id) for p in pending.calls] == [
            (pb.PENDING_CALL_KIND_OUTCOME_UNKNOWN, unknown.execution_id)
        ]
        listed = await executions(server).ListToolExecutions(
            x.ListToolExecutionsRequest(run_id=run_id)
        )
        assert [(e.id, e.status) for e in listed.executions] == [
            (unknown.execution_id, x.TOOL_EXECUTION_STATUS_OUTCOME_UNKNOWN)
        ]
        reply = await executions(server).ReconcileToolExecution(
            x.ReconcileToolExecutionRequest(
                execution_id=unknown.execution_id,
                verdict=x.RECONCILE_VERDICT_RAN,
                output="slept 1 s (seen in the backend's log)",
            )
        )
        assert reply.execution.status == x.TOOL_EXECUTION_STATUS_RECONCILED
        assert list(reply.waiting_call_ids) == []
        events = await events_of(server, run_id)
        results = await tool_results(server, run_id)
        got = await executions(server).GetToolExecution(
            x.GetToolExecutionRequest(execution_id=unknown.execution_id)
        )
    finally:
        await stop_server(server)
    kinds = [kind(e) for e in events]
    assert kind(events[-1]) == "run_completed"
    assert kinds.count("tool_execution_started") == 1  # never run twice
    reconciled = next(e for e in events if kind(e) == "tool_execution_reconciled")
    assert reconciled.tool_execution_reconciled.verdict == x.RECONCILE_VERDICT_RAN
    assert reconciled.tool_execution_reconciled.reconciled_by == "anonymous"
    assert results == ["slept 1 s (seen in the backend's log)"]
    steps = [(t.status, t.actor) for t in got.execution.transitions]
    assert [status for status, _ in steps] == [
        x.TOOL_EXECUTION_STATUS_STARTED,
        x.TOOL_EXECUTION_STATUS_OUTCOME_UNKNOWN,
        x.TOOL_EXECUTION_STATUS_RECONCILED,
    ]
    assert steps[0][1].startswith("node ") and steps[2][1] == "anonymous"
    assert "not idempotent" in got.execution.transitions[1].reason


async def test_did_not_run_runs_it_again_as_attempt_two_with_the_same_key(
    tmp_path: Path,
) -> None:
    server, run_id = await cut_unsafe_call(tmp_path)
    try:
        unknown = (await until_unknown(server, run_id)).tool_outcome_unknown
        await executions(server).ReconcileToolExecution(
            x.ReconcileToolExecutionRequest(
                execution_id=unknown.execution_id, verdict=x.RECONCILE_VERDICT_DID_NOT_RUN
            )
        )
        events = await events_of(server, run_id)
        listed = await executions(server).ListToolExecutions(
            x.ListToolExecutionsRequest(run_id=run_id)
        )
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    starts = [e.tool_execution_started for e in events if kind(e) == "tool_execution_started"]
    assert [s.attempt for s in starts] == [1, 2]
    first, second = listed.executions
    assert (first.attempt, first.status, first.verdict) == (
        1,
        x.TOOL_EXECUTION_STATUS_RECONCILED,
        x.RECONCILE_VERDICT_DID_NOT_RUN,
    )
    assert (second.attempt, second.status) == (2, x.TOOL_EXECUTION_STATUS_SUCCEEDED)
    assert second.id == starts[1].execution_id
    assert first.idempotency_key == second.idempotency_key != ""


async def test_give_up_tells_the_model_and_the_run_goes_on(tmp_path: Path) -> None:
    server, run_id = await cut_unsafe_call(tmp_path)
    try:
        unknown = (await until_unknown(server, run_id)).tool_outcome_unknown
        await executions(server).ReconcileToolExecution(
            x.ReconcileToolExecutionRequest(
                execution_id=unknown.execution_id,
                verdict=x.RECONCILE_VERDICT_GIVE_UP,
                reason="the backend keeps no log",
            )
        )
        events = await events_of(server, run_id)
        (result,) = await tool_results(server, run_id)
        listed = await executions(server).ListToolExecutions(
            x.ListToolExecutionsRequest(run_id=run_id)
        )
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    assert "could not tell" in result and "the backend keeps no log" in result
    (execution,) = listed.executions
    assert (execution.verdict, execution.is_error) == (x.RECONCILE_VERDICT_GIVE_UP, True)


async def test_unreconciled_past_its_time_the_run_fails_naming_the_tool(tmp_path: Path) -> None:
    server, run_id = await cut_unsafe_call(tmp_path, outcome_unknown_timeout_s=0.5)
    try:
        events = await events_of(server, run_id)
    finally:
        await stop_server(server)
    assert [kind(e) for e in events].count("tool_outcome_unknown") == 1
    failed = events[-1].run_failed
    assert kind(events[-1]) == "run_failed"
    assert failed.code == pb.FAILURE_CODE_TOOL_OUTCOME_UNKNOWN
    assert "slow_unsafe" in failed.error and "nobody reconciled it" in failed.error


async def test_refused_reconciles_change_nothing(tmp_path: Path) -> None:
    server, run_id = await cut_unsafe_call(tmp_path)
    stub = executions(server)
    try:
        unknown = (await until_unknown(server, run_id)).tool_outcome_unknown
        cases = [
            (x.RECONCILE_VERDICT_UNSPECIFIED, "", grpc.StatusCode.INVALID_ARGUMENT, "verdict"),
            (x.RECONCILE_VERDICT_GIVE_UP, "out", grpc.StatusCode.INVALID_ARGUMENT, "output"),
        ]
        for verdict, output, code, word in cases:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ReconcileToolExecution(
                    x.ReconcileToolExecutionRequest(
                        execution_id=unknown.execution_id, verdict=verdict, output=output
                    )
                )
            assert refused.value.code() == code and word in (refused.value.details() or "")
        ran = x.ReconcileToolExecutionRequest(
            execution_id=unknown.execution_id, verdict=x.RECONCILE_VERDICT_RAN, output="done"
        )
        await stub.ReconcileToolExecution(ran)
        await stub.ReconcileToolExecution(ran)  # the same verdict again: harmless
        ran.output = "something else"
        with pytest.raises(grpc.aio.AioRpcError) as again:
            await stub.ReconcileToolExecution(ran)
        assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        events = await events_of(server, run_id)
        listed = await stub.ListToolExecutions(x.ListToolExecutionsRequest(run_id=run_id))
        (execution,) = listed.executions
        with pytest.raises(grpc.aio.AioRpcError) as finished:
            await stub.ReconcileToolExecution(ran)
        missing = x.GetToolExecutionRequest(execution_id="00000000-0000-4000-8000-000000000000")
        with pytest.raises(grpc.aio.AioRpcError) as unknown_id:
            await stub.GetToolExecution(missing)
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    assert execution.result == "done"
    assert finished.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert unknown_id.value.code() == grpc.StatusCode.NOT_FOUND


async def cut_checked_call(tmp_path: Path, check: str) -> tuple[Server, str]:
    """A run whose slow_checked call (its check will say `check`) was cut by a shutdown."""
    call = {"name": "slow_checked", "arguments": {"seconds": 5, "check": check}}
    steps = script({"tool_calls": [call]}, {"say": "tool_results"})
    first = await start_server_with_plugins(fast_settings(tmp_path))
    run_id = await interrupt_during_tool(first, steps)
    return await start_server_with_plugins(fast_settings(tmp_path)), run_id


@pytest.mark.parametrize(
    ("check", "said", "attempts"),
    [
        ("ran", "slow_checked: the backend says attempt 1 ran", [1]),
        ("did_not_run", "slow_checked: ran at attempt 2", [1, 2]),
    ],
)
async def test_a_tools_check_reconciles_before_anyone_is_asked(
    tmp_path: Path, check: str, said: str, attempts: list[int]
) -> None:
    server, run_id = await cut_checked_call(tmp_path, check)
    try:
        events = await events_of(server, run_id)
        listed = await executions(server).ListToolExecutions(
            x.ListToolExecutionsRequest(run_id=run_id)
        )
    finally:
        await stop_server(server)
    kinds = [kind(e) for e in events]
    assert kind(events[-1]) == "run_completed"
    assert "tool_outcome_unknown" not in kinds  # nobody was asked
    [reconciled] = [
        e.tool_execution_reconciled for e in events if kind(e) == "tool_execution_reconciled"
    ]
    assert reconciled.reconciled_by == "the check of slow_checked"
    text = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert text == said
    starts = [
        e.tool_execution_started.attempt for e in events if kind(e) == "tool_execution_started"
    ]
    assert starts == attempts
    assert listed.executions[0].status == x.TOOL_EXECUTION_STATUS_RECONCILED


async def test_a_check_that_cannot_tell_leaves_it_to_a_person(tmp_path: Path) -> None:
    server, run_id = await cut_checked_call(tmp_path, "unknown")
    try:
        unknown = (await until_unknown(server, run_id)).tool_outcome_unknown
        await executions(server).ReconcileToolExecution(
            x.ReconcileToolExecutionRequest(
                execution_id=unknown.execution_id, verdict=x.RECONCILE_VERDICT_GIVE_UP
            )
        )
        events = await events_of(server, run_id)
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    [reconciled] = [
        e.tool_execution_reconciled for e in events if kind(e) == "tool_execution_reconciled"
    ]
    assert reconciled.reconciled_by == "anonymous"


async def test_the_cli_lists_executions_and_reconciles_one(tmp_path: Path) -> None:
    server, run_id = await cut_unsafe_call(tmp_path)
    try:
        unknown = (await until_unknown(server, run_id)).tool_outcome_unknown
        pending = await behest("pending", run_id, "--server", server.address)
        listed = await behest("executions", run_id, "--server", server.address)
        reconciled = await behest(
            "reconcile", unknown.execution_id, "--ran", "slept", "--server", server.address
        )
        again = await behest(
            "reconcile", unknown.execution_id, "--give-up", "--server", server.address
        )
        events = await events_of(server, run_id)
        shown = await behest("executions", "--id", unknown.execution_id, "--server", server.address)
    finally:
        await stop_server(server)
    assert (
        pending.code == 0 and f"reconciliation of execution {unknown.execution_id}" in pending.out
    )
    assert listed.code == 0 and "outcome_unknown" in listed.out and "slow_unsafe" in listed.out
    assert reconciled.code == 0 and "the run goes on" in reconciled.out
    # Reconciled otherwise already (or its run ended since): refused, naming why.
    assert again.code == 2 and "FAILED_PRECONDITION" in again.err
    assert kind(events[-1]) == "run_completed"
    assert shown.code == 0 and "reconciled by anonymous" in shown.out
    assert "outcome_unknown by node" in shown.out


async def test_the_python_client_reads_and_reconciles_executions(tmp_path: Path) -> None:
    server, run_id = await cut_unsafe_call(tmp_path)
    try:
        await until_unknown(server, run_id)
        async with BehestClient(server.address) as client:
            [waiting] = await client.pending_calls(run_id)
            [execution] = await client.list_tool_executions(run_id)
            done = await client.reconcile(execution.id, Verdict.RAN, output="slept")
            events = [e async for e in client.watch(run_id)]
            shown = await client.get_tool_execution(execution.id)
            with pytest.raises(FailedPrecondition):
                await client.reconcile(execution.id, Verdict.GIVE_UP)
    finally:
        await stop_server(server)
    assert waiting.kind == PendingCallKind.OUTCOME_UNKNOWN
    assert waiting.execution_id == execution.id
    assert (
        isinstance(execution, ToolExecution) and execution.status == ExecutionStatus.OUTCOME_UNKNOWN
    )
    assert done.execution.status == ExecutionStatus.RECONCILED and done.waiting_call_ids == ()
    assert isinstance(events[-1].data, RunCompleted)
    assert [t.status for t in shown.transitions] == [
        ExecutionStatus.STARTED,
        ExecutionStatus.OUTCOME_UNKNOWN,
        ExecutionStatus.RECONCILED,
    ]


async def test_reconciling_needs_the_reconciler_role_when_one_is_configured(
    tmp_path: Path,
) -> None:
    auth = {"auth": {**AUTH["auth"], "reconciler_role": "approver"}}  # alice has it, carol not
    settings = fast_settings(tmp_path).with_tables(auth, source="tests")
    steps = script(tool_step("slow_unsafe", 1), {"text": "all done"})
    first = await start_server_with_plugins(settings)
    created = await first.runs.CreateRun(
        create_request(steps, model="script"), metadata=bearer(ALICE)
    )
    watch = first.runs.WatchRunEvents(
        pb.WatchRunEventsRequest(run_id=created.run_id), metadata=bearer(ALICE)
    )
    async for event in watch:
        if kind(event) == "tool_execution_started":
            watch.cancel()
            break
    await stop_server(first)
    server = await start_server_with_plugins(settings)
    stub = executions(server)
    try:
        watch = server.runs.WatchRunEvents(
            pb.WatchRunEventsRequest(run_id=created.run_id), metadata=bearer(ALICE)
        )
        async for event in watch:
            if kind(event) == "tool_outcome_unknown":  # the run taken up again has paused
                watch.cancel()
                break
        [unknown] = [
            e
            for e in (
                await stub.ListToolExecutions(
                    x.ListToolExecutionsRequest(run_id=created.run_id), metadata=bearer(ALICE)
                )
            ).executions
        ]
        ran = x.ReconcileToolExecutionRequest(
            execution_id=unknown.id, verdict=x.RECONCILE_VERDICT_RAN, output="slept"
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ReconcileToolExecution(ran, metadata=bearer(CAROL))
        with pytest.raises(grpc.aio.AioRpcError) as hidden:
            await stub.ReconcileToolExecution(ran, metadata=bearer(BOB))  # another tenant
        done = await stub.ReconcileToolExecution(ran, metadata=bearer(ALICE))
    finally:
        await stop_server(server)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'approver'" in (refused.value.details() or "")
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    assert done.execution.status == x.TOOL_EXECUTION_STATUS_RECONCILED


async def test_a_call_cut_by_a_cancel_ends_saying_so_and_its_outcome_stays_unknown(
    tmp_path: Path,
) -> None:
    steps = script(tool_step("slow_unsafe", seconds=30), {"text": "never said"})
    server = await start_server_with_plugins(fast_settings(tmp_path))
    try:
        stream = server.runs.CreateRunStream(create_request(steps, model="script"))
        async for event in stream:
            if kind(event) == "tool_execution_started":
                break
        started = event.tool_execution_started
        await server.runs.CancelRun(pb.CancelRunRequest(run_id=event.run_id, reason="enough"))
        rest = [e async for e in stream]
        executions = x_rpc.ToolExecutionServiceStub(server.channel)
        got = await executions.GetToolExecution(
            x.GetToolExecutionRequest(execution_id=started.execution_id)
        )
    finally:
        await stop_server(server)
    assert [kind(e) for e in rest] == [
        "tool_execution_finished",
        "tool_message_committed",
        "run_cancelled",
    ]
    finished = rest[0].tool_execution_finished
    assert (finished.call_id, finished.cancelled, finished.is_error) == (
        started.call_id,
        True,
        True,
    )
    assert got.execution.status == x.TOOL_EXECUTION_STATUS_OUTCOME_UNKNOWN
    assert "cancelled while it ran" in got.execution.transitions[-1].reason
