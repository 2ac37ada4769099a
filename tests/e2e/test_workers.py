"""Worker tools (issue 25): a worker connects with WorkerService, declares its tools, gets
its tenant's runs' calls as tasks, and its results go to the model; each execution recorded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import catalog_pb2 as cat
from behest._proto.agent.v1 import catalog_pb2_grpc as cat_rpc
from behest._proto.agent.v1 import execution_pb2 as x
from behest._proto.agent.v1 import execution_pb2_grpc as x_rpc
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import worker_pb2 as w
from tests.support import (
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    stop_server,
)
from tests.web_support import ALICE, AUTH, BOB, bearer
from tests.workers.raw import LOOKUP, RawWorker

CALL = {"name": "lookup_order", "arguments": {"order_id": "A-17"}}


def fast(tmp_path: Path, **overrides: object):  # type: ignore[no-untyped-def]
    return fast_settings(tmp_path, worker_heartbeat_s=0.2, worker_poll_s=0.05, **overrides)


async def test_a_run_calls_a_worker_tool_and_the_model_gets_its_result(tmp_path: Path) -> None:
    server = await start_server(fast(tmp_path))
    worker = RawWorker(server.channel)
    try:
        welcome = await worker.welcome()
        assert welcome.worker_id and welcome.heartbeat_interval_s == 0.2
        tools = await cat_rpc.ToolServiceStub(server.channel).ListTools(cat.ListToolsRequest())
        [listed] = [t for t in tools.tools if t.spec.name == "lookup_order"]
        assert (listed.source, listed.workers, listed.idempotent) == ("worker", 1, True)
        steps = script({"tool_calls": [CALL]}, {"say": "tool_results"})
        stream = server.runs.CreateRunStream(create_request(steps, model="script"))
        task = await worker.next()
        assert (task.tool_name, json.loads(task.arguments)) == (
            "lookup_order",
            {"order_id": "A-17"},
        )
        assert task.attempt == 1 and task.idempotency_key
        ack = await worker.result(task, "shipped on 1 December")
        assert ack.accepted, ack.reason
        events = await collect(stream)
        again = await worker.result(task, "shipped on 2 December")  # a second result
        executions = await x_rpc.ToolExecutionServiceStub(server.channel).ListToolExecutions(
            x.ListToolExecutionsRequest(run_id=events[0].run_id)
        )
    finally:
        await worker.close()
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said == "lookup_order: shipped on 1 December"
    assert not again.accepted and "already has its result" in again.reason
    [execution] = executions.executions
    assert (execution.source, execution.status) == ("worker", x.TOOL_EXECUTION_STATUS_SUCCEEDED)
    assert execution.id == task.execution_id and execution.result == "shipped on 1 December"


async def test_a_bad_hello_is_invalid_argument_naming_the_field(tmp_path: Path) -> None:
    server = await start_server(fast(tmp_path))
    cases = [
        (RawWorker(server.channel, [LOOKUP, LOOKUP]), "declared twice"),
        (
            RawWorker(
                server.channel,
                [w.WorkerToolSpec(name="calculator", parameters_schema=LOOKUP.parameters_schema)],
            ),
            "server's own",
        ),
        (
            RawWorker(server.channel, [w.WorkerToolSpec(name="x", parameters_schema="{")]),
            "parameters_schema is not JSON",
        ),
        (
            RawWorker(
                server.channel, [w.WorkerToolSpec(name="x", parameters_schema='{"type": "array"}')]
            ),
            "object schema",
        ),
        (
            RawWorker(
                server.channel,
                [w.WorkerToolSpec(name="bad name", parameters_schema=LOOKUP.parameters_schema)],
            ),
            "tools[0].name",
        ),
    ]
    try:
        for worker, words in cases:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await worker.welcome()
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert words in (refused.value.details() or ""), refused.value.details()
            await worker.close()
        healthy = RawWorker(server.channel)
        assert (await healthy.welcome()).worker_id  # the server stays up
        await healthy.close()
    finally:
        await stop_server(server)


UNSAFE = w.WorkerToolSpec(
    name="place_order",
    description="Places an order (not idempotent).",
    parameters_schema=json.dumps({"type": "object", "properties": {}}),
)


async def executions_of(server, run_id: str) -> list[x.ToolExecution]:  # type: ignore[no-untyped-def]
    stub = x_rpc.ToolExecutionServiceStub(server.channel)
    return list(
        (await stub.ListToolExecutions(x.ListToolExecutionsRequest(run_id=run_id))).executions
    )


async def test_a_vanished_workers_idempotent_call_runs_again_on_another_worker(
    tmp_path: Path,
) -> None:
    server = await start_server(fast(tmp_path))
    first = RawWorker(server.channel, name="one")  # (a RawWorker connects as it is made)
    second: RawWorker | None = None
    try:
        await first.welcome()
        steps = script({"tool_calls": [CALL]}, {"say": "tool_results"})
        stream = server.runs.CreateRunStream(create_request(steps, model="script"))
        task = await first.next()
        await first.close()  # gone without a result: its lease lapses
        second = RawWorker(server.channel, name="two")
        await second.welcome()
        retried = await second.next()
        assert (retried.attempt, retried.idempotency_key) == (2, task.idempotency_key)
        assert retried.execution_id != task.execution_id
        await second.result(retried, "found it")
        events = await collect(stream)
        executions = await executions_of(server, events[0].run_id)
    finally:
        if second is not None:
            await second.close()
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    assert [(e.attempt, e.status) for e in executions] == [
        (1, x.TOOL_EXECUTION_STATUS_OUTCOME_UNKNOWN),
        (2, x.TOOL_EXECUTION_STATUS_SUCCEEDED),
    ]
    starts = [
        e.tool_execution_started.attempt for e in events if kind(e) == "tool_execution_started"
    ]
    assert starts == [1, 2]


async def test_a_vanished_workers_unsafe_call_waits_for_a_reconciliation(tmp_path: Path) -> None:
    server = await start_server(fast(tmp_path))
    worker = RawWorker(server.channel, [UNSAFE], name="one")
    try:
        await worker.welcome()
        call = {"name": "place_order", "arguments": {}}
        steps = script({"tool_calls": [call]}, {"say": "tool_results"})
        created = await server.runs.CreateRun(create_request(steps, model="script"))
        task = await worker.next()
        await worker.close()
        watch = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
        async for event in watch:
            if kind(event) == "tool_outcome_unknown":
                watch.cancel()
                break
        stub = x_rpc.ToolExecutionServiceStub(server.channel)
        await stub.ReconcileToolExecution(
            x.ReconcileToolExecutionRequest(
                execution_id=task.execution_id,
                verdict=x.RECONCILE_VERDICT_RAN,
                output="order 9 placed",
            )
        )
        events = await collect(
            server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
        )
        got = await stub.GetToolExecution(x.GetToolExecutionRequest(execution_id=task.execution_id))
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said == "place_order: order 9 placed"  # given to the model exactly once
    assert [kind(e) for e in events].count("tool_execution_started") == 1
    reasons = [t.reason for t in got.execution.transitions]
    assert any("worker vanished" in r for r in reasons), reasons


async def test_two_workers_share_a_hundred_tasks_and_another_tenants_worker_gets_none(
    tmp_path: Path,
) -> None:
    # Leases of 6 s: a hundred runs at once on two cores can stall the loop past fast()'s
    # 0.6 s, and a lapsed lease sends an idempotent call to the other worker as a retry.
    settings = fast_settings(tmp_path, worker_heartbeat_s=2.0, worker_poll_s=0.05)
    server = await start_server(settings.with_tables(AUTH, source="tests"))
    acme = [RawWorker(server.channel, name=n, max_tasks=4, metadata=bearer(ALICE)) for n in "ab"]
    globex = RawWorker(server.channel, name="g", max_tasks=4, metadata=bearer(BOB))
    served: dict[str, int] = {"a": 0, "b": 0}

    async def serve(worker: RawWorker, name: str) -> None:
        while True:
            task = await worker.next()
            if isinstance(task, w.WorkerResultAck):
                assert task.accepted, task.reason
                continue
            served[name] += 1
            await worker._outbox.put(
                w.WorkerMessage(
                    result=w.WorkerResult(
                        execution_id=task.execution_id, attempt=task.attempt, output=task.arguments
                    )
                )
            )

    try:
        for worker in (*acme, globex):
            await worker.welcome()
        servers = [
            asyncio.create_task(serve(worker, name))
            for worker, name in zip(acme, "ab", strict=True)
        ]
        stray = asyncio.create_task(globex.next())
        steps = script({"tool_calls": [CALL]}, {"text": "ok"})
        runs = [
            server.runs.CreateRunStream(
                create_request(steps, model="script"), metadata=bearer(ALICE)
            )
            for _ in range(100)
        ]
        ended = [await collect(run) for run in runs]
        assert all(kind(events[-1]) == "run_completed" for events in ended)
        assert not stray.done()  # globex's worker never got one of acme's tasks
    finally:
        for task in (*servers, stray):
            task.cancel()
        for worker in (*acme, globex):
            await worker.close()
        await stop_server(server)
    assert served["a"] + served["b"] == 100
    assert served["a"] > 0 and served["b"] > 0, served


SHAPED = w.WorkerToolSpec(
    name="lookup_order",
    description="Look an order up; answers JSON.",
    parameters_schema=LOOKUP.parameters_schema,
    output_schema=json.dumps(
        {"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]}
    ),
    idempotent=True,
)


async def test_results_refused_change_nothing_and_off_schema_output_is_an_error(
    tmp_path: Path,
) -> None:
    settings = fast(tmp_path).with_tables(AUTH, source="tests")
    server = await start_server(settings)
    worker = RawWorker(server.channel, [SHAPED], metadata=bearer(ALICE))
    thief = RawWorker(server.channel, [SHAPED], name="thief", metadata=bearer(BOB))
    try:
        await worker.welcome()
        await thief.welcome()
        steps = script({"tool_calls": [CALL]}, {"say": "tool_results"})
        stream = server.runs.CreateRunStream(
            create_request(steps, model="script"), metadata=bearer(ALICE)
        )
        task = await worker.next()
        stolen = await thief.result(task, '{"status": "mine"}')  # another tenant's task
        stale = await worker.result(task, '{"status": "x"}', attempt=task.attempt + 1)
        huge = await worker.result(task, "x" * (1024 * 1024 + 1))
        off = await worker.result(task, '{"state": "shipped"}')  # breaks the output schema
        events = await collect(stream)
    finally:
        await worker.close()
        await thief.close()
        await stop_server(server)
    assert not stolen.accepted and "not leased to this worker" in stolen.reason
    assert not stale.accepted and "another attempt" in stale.reason
    assert not huge.accepted and "bytes" in huge.reason
    assert off.accepted and off.reason.startswith("taken as an error")
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert "does not match its output schema" in said and "status" in said
    [finished] = [e for e in events if kind(e) == "tool_execution_finished"]
    assert finished.tool_execution_finished.is_error


async def test_serving_and_reconciling_need_their_roles_when_configured(tmp_path: Path) -> None:
    auth = {"auth": {**AUTH["auth"], "worker_role": "worker", "reconciler_role": "operator"}}
    server = await start_server(fast(tmp_path).with_tables(auth, source="tests"))
    worker = RawWorker(server.channel, metadata=bearer(ALICE))
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await worker.welcome()
        reconcile = x_rpc.ToolExecutionServiceStub(server.channel).ReconcileToolExecution(
            x.ReconcileToolExecutionRequest(
                execution_id="00000000-0000-4000-8000-000000000000",
                verdict=x.RECONCILE_VERDICT_GIVE_UP,
            ),
            metadata=bearer(ALICE),
        )
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await reconcile
    finally:
        await worker.close()
        await stop_server(server)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'worker'" in (refused.value.details() or "")
    # An execution the caller cannot see is not found before any role is asked for.
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_workers_retryable_error_is_tried_again_as_its_tool_declares(
    tmp_path: Path,
) -> None:
    twice = w.WorkerToolSpec(
        name="lookup_order",
        description="Look an order up.",
        parameters_schema=LOOKUP.parameters_schema,
        idempotent=True,
        max_attempts=2,
    )
    server = await start_server(fast(tmp_path))
    worker = RawWorker(server.channel, [twice])
    try:
        await worker.welcome()
        steps = script({"tool_calls": [CALL]}, {"say": "tool_results"})
        stream = server.runs.CreateRunStream(create_request(steps, model="script"))
        first = await worker.next()
        await worker.result(first, "the shop is busy", is_error=True, retryable=True)
        second = await worker.next()
        await worker.result(second, "shipped")
        events = await collect(stream)
    finally:
        await worker.close()
        await stop_server(server)
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.idempotency_key == second.idempotency_key
    [retry] = [e.tool_retry_scheduled for e in events if kind(e) == "tool_retry_scheduled"]
    assert retry.next_attempt == 2 and "the shop is busy" in retry.reason
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said == "lookup_order: shipped"


async def test_a_worker_tool_that_requires_approval_reaches_a_worker_once_allowed(
    tmp_path: Path,
) -> None:
    guarded = w.WorkerToolSpec(
        name="lookup_order",
        description="Look an order up (asks first).",
        parameters_schema=LOOKUP.parameters_schema,
        requires_approval=True,
    )
    server = await start_server(fast(tmp_path))
    worker = RawWorker(server.channel, [guarded])
    try:
        await worker.welcome()
        steps = script({"tool_calls": [CALL]}, {"say": "tool_results"})
        created = await server.runs.CreateRun(create_request(steps, model="script"))
        watch = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
        async for event in watch:
            if kind(event) == "approval_requested":
                call_id = event.approval_requested.call.id
                watch.cancel()
                break
        approval = pb.ApprovalAnswer(call_id=call_id, decision=pb.APPROVAL_DECISION_ALLOW)
        await server.runs.SubmitApprovals(
            pb.SubmitApprovalsRequest(run_id=created.run_id, approvals=[approval])
        )
        task = await worker.next()
        await worker.result(task, "allowed and shipped")
        events = await collect(
            server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
        )
    finally:
        await worker.close()
        await stop_server(server)
    assert task.call_id == call_id
    assert "".join(e.text_delta.delta for e in events if kind(e) == "text_delta") == (
        "lookup_order: allowed and shipped"
    )


async def test_a_tenants_queue_of_worker_calls_is_bounded(tmp_path: Path) -> None:
    server = await start_server(fast(tmp_path, max_queued_tasks_per_tenant=1))
    worker = RawWorker(server.channel, max_tasks=1)
    steps = script({"tool_calls": [CALL]}, {"say": "tool_results"})
    try:
        await worker.welcome()
        held = server.runs.CreateRunStream(create_request(steps, model="script"))
        first = await worker.next()  # the worker holds one; the next call waits in the queue
        queued = server.runs.CreateRunStream(create_request(steps, model="script"))
        head = []
        while not head or kind(head[-1]) != "tool_execution_started":  # its task is queued
            head.append(await queued.read())
        refused = await collect(server.runs.CreateRunStream(create_request(steps, model="script")))
        await worker.result(first, "one")
        second = await worker.next()
        await worker.result(second, "two")
        rest = []
        while (event := await queued.read()) != grpc.aio.EOF:
            rest.append(event)
        ended = [await collect(held), head + rest]
    finally:
        await worker.close()
        await stop_server(server)
    said = "".join(e.text_delta.delta for e in refused if kind(e) == "text_delta")
    assert "calls waiting for workers, the most it may have" in said
    assert all(kind(events[-1]) == "run_completed" for events in ended)


VERIFIED = w.WorkerToolSpec(
    name="place_order",
    description="Places an order (not idempotent; its worker can tell whether one was placed).",
    parameters_schema=json.dumps({"type": "object", "properties": {}}),
    verifiable=True,
)


@pytest.mark.parametrize(
    ("verdict", "said", "starts"),
    [
        ({"known": True, "ran": True, "output": "order 5 was placed"}, "order 5 was placed", 1),
        ({"known": True, "ran": False}, "placed at last", 2),
        ({"known": False}, "", 1),
    ],
)
async def test_a_vanished_workers_call_is_verified_by_another_worker_first(
    tmp_path: Path, verdict: dict[str, object], said: str, starts: int
) -> None:
    server = await start_server(fast(tmp_path))
    first = RawWorker(server.channel, [VERIFIED], name="one")
    second: RawWorker | None = None
    try:
        await first.welcome()
        call = {"name": "place_order", "arguments": {}}
        steps = script({"tool_calls": [call]}, {"say": "tool_results"})
        created = await server.runs.CreateRun(create_request(steps, model="script"))
        task = await first.next()
        await first.close()  # it vanishes with the task
        second = RawWorker(server.channel, [VERIFIED], name="two")
        await second.welcome()
        asked = await second.next()
        assert isinstance(asked, w.WorkerVerify), asked
        assert (asked.execution_id, asked.idempotency_key) == (
            task.execution_id,
            task.idempotency_key,
        )
        await second.verdict(asked, **verdict)
        if starts == 2:  # it did not run: it runs again, on the worker there is
            again = await second.next()
            assert again.attempt == 2
            await second.result(again, "placed at last")
        if not verdict["known"]:  # nobody could tell: a person is asked
            stub = x_rpc.ToolExecutionServiceStub(server.channel)
            watch = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
            async for event in watch:
                if kind(event) == "tool_outcome_unknown":
                    watch.cancel()
                    break
            await stub.ReconcileToolExecution(
                x.ReconcileToolExecutionRequest(
                    execution_id=task.execution_id, verdict=x.RECONCILE_VERDICT_GIVE_UP
                )
            )
        events = await collect(
            server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
        )
    finally:
        if second is not None:
            await second.close()
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    text = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said in text
    [reconciled] = [
        e.tool_execution_reconciled for e in events if kind(e) == "tool_execution_reconciled"
    ]
    expected = "anonymous" if not verdict["known"] else "the check of place_order"
    assert reconciled.reconciled_by == expected
    assert [kind(e) for e in events].count("tool_execution_started") == starts
