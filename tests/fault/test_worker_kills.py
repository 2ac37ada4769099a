"""kill -9 and tool side effects (issue 25): `behest serve` as a child process, SIGKILLed in
the middle of a tool call; a tool that is not idempotent never runs twice, and the run waits
for a reconciliation (an in-process tool) or takes the worker's result once (a worker tool)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import grpc

from behest._proto.agent.v1 import execution_pb2 as x
from behest._proto.agent.v1 import execution_pb2_grpc as x_rpc
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import run_pb2_grpc as rpc
from behest._proto.agent.v1 import worker_pb2 as w
from tests.support import PLUGIN_PATH, collect, create_request, kind, script, server_process
from tests.workers.raw import RawWorker

UNSAFE = w.WorkerToolSpec(
    name="place_order",
    description="Places an order (not idempotent).",
    parameters_schema=json.dumps({"type": "object", "properties": {}}),
)
WITH_PLUGINS = {"PYTHONPATH": os.pathsep.join([str(PLUGIN_PATH), os.environ.get("PYTHONPATH", "")])}


async def until(stub: rpc.RunServiceStub, run_id: str, wanted: str) -> pb.AgentEvent:
    watch = stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=run_id))
    async for event in watch:
        if kind(event) == wanted:
            watch.cancel()
            return event
    raise AssertionError(f"run {run_id} ended without {wanted}")


async def test_an_unsafe_plugin_tool_cut_by_kill_9_waits_and_completes_reconciled(
    tmp_path: Path,
) -> None:
    steps = script(
        {"tool_calls": [{"name": "slow_unsafe", "arguments": {"seconds": 30}}]},
        {"say": "tool_results"},
    )
    async with server_process(tmp_path, **WITH_PLUGINS) as (process, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            created = await stub.CreateRun(create_request(steps, model="script"))
            await until(stub, created.run_id, "tool_execution_started")
        process.send_signal(signal.SIGKILL)
        await process.wait()
    async with server_process(tmp_path, **WITH_PLUGINS) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rpc.RunServiceStub(channel)
            unknown = (
                await until(stub, created.run_id, "tool_outcome_unknown")
            ).tool_outcome_unknown
            await x_rpc.ToolExecutionServiceStub(channel).ReconcileToolExecution(
                x.ReconcileToolExecutionRequest(
                    execution_id=unknown.execution_id,
                    verdict=x.RECONCILE_VERDICT_RAN,
                    output="slept (per the backend)",
                )
            )
            events = await collect(
                stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
            )
    assert kind(events[-1]) == "run_completed"
    assert [kind(e) for e in events].count("tool_execution_started") == 1
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said == "slow_unsafe: slept (per the backend)"


async def test_kill_9_while_a_worker_holds_a_task_takes_its_result_once_after_restart(
    tmp_path: Path,
) -> None:
    heartbeats = {"BEHEST_WORKER_HEARTBEAT_S": "1", "BEHEST_WORKER_POLL_S": "0.05"}
    steps = script(
        {"tool_calls": [{"name": "place_order", "arguments": {}}]}, {"say": "tool_results"}
    )
    async with server_process(tmp_path, **heartbeats) as (process, address):
        channel = grpc.aio.insecure_channel(address)
        worker = RawWorker(channel, [UNSAFE], name="orders")
        await worker.welcome()
        stub = rpc.RunServiceStub(channel)
        created = await stub.CreateRun(create_request(steps, model="script"))
        task = await worker.next()
        process.send_signal(signal.SIGKILL)  # the worker holds the task
        await process.wait()
        await worker.close()
        await channel.close()
    async with server_process(tmp_path, listen=address, **heartbeats) as (_, address):
        async with grpc.aio.insecure_channel(address) as channel:
            again = RawWorker(channel, [UNSAFE], name="orders")  # the same worker, reconnected
            await again.welcome()
            ack = await again.result(task, "order 77 placed")
            twice = await again.result(task, "order 77 placed")
            stub = rpc.RunServiceStub(channel)
            events = await collect(
                stub.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
            )
            await again.close()
    assert ack.accepted, ack.reason
    assert not twice.accepted
    assert kind(events[-1]) == "run_completed"
    assert [kind(e) for e in events].count("tool_execution_started") == 1
    said = "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")
    assert said == "place_order: order 77 placed"
