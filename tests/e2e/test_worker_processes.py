"""Worker processes (behest.worker, started with `behest worker run`) against a real server,
and SIGKILLed in the middle of a task (issue 25): an idempotent tool's call goes to another
worker as attempt 2 with the same idempotency key; another's waits for a reconciliation."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from behest._proto.agent.v1 import catalog_pb2 as cat
from behest._proto.agent.v1 import catalog_pb2_grpc as cat_rpc
from behest._proto.agent.v1 import execution_pb2 as x
from behest._proto.agent.v1 import execution_pb2_grpc as x_rpc
from behest._proto.agent.v1 import run_pb2 as pb
from tests.support import (
    Server,
    collect,
    create_request,
    fast_settings,
    kind,
    script,
    start_server,
    stop_server,
)

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def started(self) -> list[str]:
        """The next task it started: [execution id, attempt, key, tool]."""
        assert self.process.stdout is not None
        while line := (await self.process.stdout.readline()).decode():
            if line.startswith("started "):
                return line.split()[1:]
        raise AssertionError("the worker process ended")


@asynccontextmanager
async def worker_process(address: str, name: str) -> AsyncIterator[WorkerProcess]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "ORDERS_WORKER_NAME": name, "PYTHONPATH": path}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "behest", "worker", "run", "tests.workers.orders:worker",
        "--address", address, stdout=asyncio.subprocess.PIPE, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        yield WorkerProcess(process)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def serving(server: Server, tool: str, count: int = 1) -> None:
    """Wait until `count` workers serve `tool` (ListTools), as a client would look."""
    tools = cat_rpc.ToolServiceStub(server.channel)
    async with asyncio.timeout(20):
        while True:
            listed = await tools.ListTools(cat.ListToolsRequest())
            if any(t.spec.name == tool and t.workers >= count for t in listed.tools):
                return
            await asyncio.sleep(0.05)  # a worker's connection is not an event a client sees


def calling(tool: str, **arguments: object) -> str:
    return script({"tool_calls": [{"name": tool, "arguments": arguments}]}, {"say": "tool_results"})


def said(events: list[pb.AgentEvent]) -> str:
    return "".join(e.text_delta.delta for e in events if kind(e) == "text_delta")


async def test_a_kill_9_of_a_worker_sends_an_idempotent_call_to_another(tmp_path: Path) -> None:
    server = await start_server(fast_settings(tmp_path, worker_heartbeat_s=0.2))
    try:
        async with worker_process(server.address, "first") as first:
            await serving(server, "lookup_order")
            stream = server.runs.CreateRunStream(
                create_request(calling("lookup_order", order_id="A-1", seconds=30), model="script")
            )
            execution, attempt, key, _ = await first.started()
            async with worker_process(server.address, "second") as second:
                await serving(server, "lookup_order", count=2)
                first.process.send_signal(signal.SIGKILL)
                again = await second.started()
                events = await collect(stream)
        executions = await x_rpc.ToolExecutionServiceStub(server.channel).ListToolExecutions(
            x.ListToolExecutionsRequest(run_id=events[0].run_id)
        )
    finally:
        await stop_server(server)
    assert attempt == "1" and again[1] == "2" and again[2] == key and again[0] != execution
    assert kind(events[-1]) == "run_completed"
    assert said(events) == "lookup_order: order A-1: shipped (attempt 2)"
    assert [(e.attempt, e.executor.startswith("worker ")) for e in executions.executions] == [
        (1, True),
        (2, True),
    ]


async def test_a_kill_9_of_a_worker_leaves_an_unsafe_call_to_a_reconciliation(
    tmp_path: Path,
) -> None:
    server = await start_server(fast_settings(tmp_path, worker_heartbeat_s=0.2))
    try:
        async with worker_process(server.address, "first") as first:
            await serving(server, "place_order")
            created = await server.runs.CreateRun(
                create_request(calling("place_order", item="lamp", seconds=30), model="script")
            )
            execution, _, _, _ = await first.started()
            first.process.send_signal(signal.SIGKILL)
        watch = server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
        async for event in watch:
            if kind(event) == "tool_outcome_unknown":
                watch.cancel()
                break
        async with worker_process(server.address, "third") as third:
            await serving(server, "place_order")
            await x_rpc.ToolExecutionServiceStub(server.channel).ReconcileToolExecution(
                x.ReconcileToolExecutionRequest(
                    execution_id=execution, verdict=x.RECONCILE_VERDICT_DID_NOT_RUN
                )
            )
            rerun = await third.started()
            events = await collect(
                server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
            )
    finally:
        await stop_server(server)
    assert rerun[1] == "2"
    assert kind(events[-1]) == "run_completed"
    assert said(events) == "place_order: placed an order for lamp"


async def test_a_worker_process_checks_a_call_whose_worker_died(tmp_path: Path) -> None:
    server = await start_server(fast_settings(tmp_path, worker_heartbeat_s=0.2))
    try:
        async with worker_process(server.address, "first") as first:
            await serving(server, "reserve")
            created = await server.runs.CreateRun(
                create_request(calling("reserve", item="lamp", seconds=30), model="script")
            )
            _, _, key, _ = await first.started()
            async with worker_process(server.address, "second"):
                await serving(server, "reserve", count=2)
                first.process.send_signal(signal.SIGKILL)
                events = await collect(
                    server.runs.WatchRunEvents(pb.WatchRunEventsRequest(run_id=created.run_id))
                )
    finally:
        await stop_server(server)
    assert kind(events[-1]) == "run_completed"
    assert said(events) == f"reserve: lamp reserved (key {key[:8]})"  # the check's, once
    [reconciled] = [e for e in events if kind(e) == "tool_execution_reconciled"]
    assert reconciled.tool_execution_reconciled.reconciled_by == "the check of reserve"
    assert [kind(e) for e in events].count("tool_execution_started") == 1
