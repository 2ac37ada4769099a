"""Worker tools (issue 25): a worker connects with WorkerService, declares its tools, gets
its tenant's runs' calls as tasks, and its results go to the model; each execution recorded."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from behest._proto.agent.v1 import catalog_pb2 as cat
from behest._proto.agent.v1 import catalog_pb2_grpc as cat_rpc
from behest._proto.agent.v1 import execution_pb2 as x
from behest._proto.agent.v1 import execution_pb2_grpc as x_rpc
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
